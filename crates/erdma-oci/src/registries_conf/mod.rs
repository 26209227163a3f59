//! containers-registries.conf(5) as podman, skopeo and buildah read it through containers/image:
//! which files ([`files`]), how drop-ins merge, which `[[registry]]` entry a name falls under
//! ([`RegistriesConf::find`]) and the endpoints a pull then tries, mirrors first
//! ([`RegistriesConf::pull_sources`]).
//!
//! Why: a host set up for podman (a mirror for Docker Hub, an insecure in-house registry, a
//! blocked namespace) should pull the same way with erdma-build, without a second configuration.
//! Where containers/image does more or other than the man pages say, this follows the code, and
//! the comments say so.
//!
//! Not here: short-name resolution (`unqualified-search-registries` is kept for the caller,
//! `short-name-mode` is only checked; `[aliases]`, `credential-helpers` and
//! `additional-layer-store-auth-helper` are accepted and ignored) and containers-certs.d(5).
use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

mod parse;

use parse::parse_file;

/// The environment [`files`] and [`RegistriesConf::load`] read, apart so that tests need not
/// touch the process's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfEnv {
    /// `$CONTAINERS_REGISTRIES_CONF`: the main file, in place of the user's or the system's.
    /// Unlike those it must exist, and the drop-in directories are still read (containers/image
    /// reads no `<file>.d` next to it).
    pub registries_conf: Option<PathBuf>,
    /// `$HOME`, for `~/.config/containers/registries.conf` and `registries.conf.d`. Not
    /// `$XDG_CONFIG_HOME`: containers/image joins `.config/containers` to the home directory for
    /// these two (containers-registries.conf(5), DESCRIPTION; containers-registries.conf.d(5),
    /// CONFIGURATION PRECEDENCE).
    pub home: Option<PathBuf>,
    /// Normally `/etc/containers`.
    pub system_dir: PathBuf,
}

impl ConfEnv {
    pub fn from_process() -> ConfEnv {
        // Empty variables count as unset, as in containers/image.
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        // The callers of containers/image take CONTAINERS_REGISTRIES_CONF, or else the older
        // REGISTRIES_CONFIG_PATH, the first one that is set at all.
        let registries_conf = match std::env::var_os("CONTAINERS_REGISTRIES_CONF") {
            Some(_) => var("CONTAINERS_REGISTRIES_CONF"),
            None => var("REGISTRIES_CONFIG_PATH"),
        };
        ConfEnv { registries_conf, home: var("HOME"), system_dir: PathBuf::from("/etc/containers") }
    }
}

/// Why a configuration cannot be used, or a name cannot be pulled or pushed. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfError {
    /// A file or a drop-in directory that exists (or, for `$CONTAINERS_REGISTRIES_CONF`, must)
    /// and cannot be read.
    #[error("registries.conf {}: {error}", path.display())]
    Read { path: PathBuf, error: io::Error },
    /// Not TOML, or a value of the wrong type.
    #[error("registries.conf {}: {message}", file.display())]
    Syntax { file: PathBuf, message: String },
    /// A value containers/image refuses too; the message names the entry and the key.
    #[error("registries.conf {}: {message}", file.display())]
    Invalid { file: PathBuf, message: String },
    /// The entry `name` falls under has `blocked = true`.
    #[error("{name} is blocked by registries.conf {} (prefix \"{prefix}\")", file.display())]
    Blocked { name: String, prefix: String, file: PathBuf },
    /// Replacing the prefix by a location gave no valid image name.
    #[error(
        "{name}: prefix \"{prefix}\" in registries.conf {} rewrites it to \"{rewritten}\", which {reason}",
        file.display()
    )]
    Rewrite { name: String, prefix: String, file: PathBuf, rewritten: String, reason: &'static str },
}

/// Which pulls a mirror serves (`pull-from-mirror`, containers-registries.conf(5), Remapping and
/// mirroring registries).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PullFromMirror {
    #[default]
    All,
    DigestOnly,
    TagOnly,
}

/// One `[[registry.mirror]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirror {
    pub location: String,
    pub insecure: bool,
    pub pull_from_mirror: PullFromMirror,
}

/// One `[[registry]]` entry, checked: `prefix` set (it defaults to `location`), no scheme, no
/// trailing `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registry {
    /// What names it applies to: `host[:port][/namespace…]`, or `*.example.com` for subdomains.
    pub prefix: String,
    /// What replaces the prefix; empty only under a wildcard prefix, where names stay as they are.
    pub location: String,
    pub insecure: bool,
    pub blocked: bool,
    pub mirror_by_digest_only: bool,
    pub mirrors: Vec<Mirror>,
    /// The file the entry came from, for errors such as [`ConfError::Blocked`].
    pub file: PathBuf,
}

/// An endpoint to pull from (or push to): the image name there, and whether plain HTTP and
/// unverified TLS are allowed for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullSource {
    pub name: String,
    pub insecure: bool,
    pub mirror: bool,
}

/// A key the configuration has but no reader here knows: containers/image ignores these too, a
/// caller may warn (a misspelt `insecure` is otherwise silent). `key` is a dotted TOML path with
/// 1-based entry numbers, e.g. `registry[2].mirror[1].pull-from-miror`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKey {
    pub file: PathBuf,
    pub key: String,
}

impl fmt::Display for UnknownKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "registries.conf {}: unknown key {}", self.file.display(), self.key)
    }
}

/// The merged configuration of all the files read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistriesConf {
    /// One entry per prefix, sorted by prefix, as containers/image keeps them.
    pub registries: Vec<Registry>,
    /// `host[:port]` entries to try for a name without a registry, in order.
    pub unqualified_search_registries: Vec<String>,
    /// The file that set `unqualified_search_registries`, if any did.
    pub unqualified_search_registries_file: Option<PathBuf>,
    /// The files read, in order.
    pub files: Vec<PathBuf>,
    pub unknown_keys: Vec<UnknownKey>,
}

/// The main file, whether it must exist, and the drop-in directories after it.
struct Sources {
    main: PathBuf,
    main_required: bool,
    dirs: Vec<PathBuf>,
}

/// containers-registries.conf(5), DESCRIPTION, and containers-registries.conf.d(5),
/// CONFIGURATION PRECEDENCE: the user's file if it exists, else the system's; drop-ins from the
/// system directory and then the user's, but only the user's when the user's file is read.
/// `$CONTAINERS_REGISTRIES_CONF` replaces the main file only, as in containers/image.
fn sources(env: &ConfEnv) -> Sources {
    let user = env.home.as_ref().map(|h| h.join(".config/containers"));
    let user_file = user.as_ref().map(|u| u.join("registries.conf"));
    let user_dir = user.as_ref().map(|u| u.join("registries.conf.d"));
    let both_dirs = || [Some(env.system_dir.join("registries.conf.d")), user_dir.clone()];
    if let Some(main) = &env.registries_conf {
        let dirs = both_dirs().into_iter().flatten().collect();
        return Sources { main: main.clone(), main_required: true, dirs };
    }
    match user_file.filter(|f| f.exists()) {
        Some(main) => Sources { main, main_required: false, dirs: user_dir.into_iter().collect() },
        None => Sources {
            main: env.system_dir.join("registries.conf"),
            main_required: false,
            dirs: both_dirs().into_iter().flatten().collect(),
        },
    }
}

/// The `*.conf` files of each directory, a directory at a time, in byte order of their names;
/// subdirectories and other files are skipped, and so is a missing directory.
fn drop_ins(dirs: &[PathBuf]) -> Result<Vec<PathBuf>, ConfError> {
    let read_error = |path: &Path, error| ConfError::Read { path: path.to_owned(), error };
    let mut files = Vec::new();
    for dir in dirs {
        // lstat, as containers/image's directory walk: a symlink in place of the directory is
        // not followed, so podman ignores such a directory, and so do we.
        match fs::symlink_metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(read_error(dir, e)),
        }
        let mut names = Vec::new();
        for entry in fs::read_dir(dir).map_err(|e| read_error(dir, e))? {
            let entry = entry.map_err(|e| read_error(dir, e))?;
            let is_dir = entry.file_type().map_err(|e| read_error(dir, e))?.is_dir();
            let name = entry.file_name();
            if !is_dir && name.as_encoded_bytes().ends_with(b".conf") {
                names.push(name);
            }
        }
        names.sort();
        files.extend(names.into_iter().map(|n| dir.join(n)));
    }
    Ok(files)
}

/// The files [`RegistriesConf::load`] reads, in order: the main file (when it exists, or when
/// `$CONTAINERS_REGISTRIES_CONF` names it), then the drop-ins. For error messages and a doctor.
pub fn files(env: &ConfEnv) -> Result<Vec<PathBuf>, ConfError> {
    let sources = sources(env);
    let mut files = Vec::new();
    if sources.main_required || sources.main.exists() {
        files.push(sources.main);
    }
    files.extend(drop_ins(&sources.dirs)?);
    Ok(files)
}

impl RegistriesConf {
    /// Reads and merges the files of [`files`]. A missing file is no error, except the one
    /// `$CONTAINERS_REGISTRIES_CONF` names.
    pub fn load(env: &ConfEnv) -> Result<RegistriesConf, ConfError> {
        let sources = sources(env);
        let mut conf = match fs::read_to_string(&sources.main) {
            Ok(text) => parse_file(&text, &sources.main, false)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !sources.main_required => {
                RegistriesConf::default()
            }
            Err(error) => return Err(ConfError::Read { path: sources.main, error }),
        };
        for path in drop_ins(&sources.dirs)? {
            let text = match fs::read_to_string(&path) {
                Ok(text) => text,
                // Removed since the directory was listed.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(error) => return Err(ConfError::Read { path, error }),
            };
            conf.merge(parse_file(&text, &path, true)?);
        }
        Ok(conf)
    }

    /// One file's text, read as a main file (so version 1 is allowed); `file` names it in
    /// errors and in [`Registry::file`].
    pub fn parse(text: &str, file: &Path) -> Result<RegistriesConf, ConfError> {
        parse_file(text, file, false)
    }

    /// containers-registries.conf.d(5), CONFIGURATION PRECEDENCE: a later file's
    /// `[[registry]]` replaces an earlier one with the same prefix, and a list it sets
    /// (even to `[]`) replaces the earlier list.
    fn merge(&mut self, later: RegistriesConf) {
        let mut by_prefix: BTreeMap<String, Registry> = std::mem::take(&mut self.registries)
            .into_iter()
            .map(|r| (r.prefix.clone(), r))
            .collect();
        by_prefix.extend(later.registries.into_iter().map(|r| (r.prefix.clone(), r)));
        self.registries = by_prefix.into_values().collect();
        if later.unqualified_search_registries_file.is_some() {
            self.unqualified_search_registries = later.unqualified_search_registries;
            self.unqualified_search_registries_file = later.unqualified_search_registries_file;
        }
        self.files.extend(later.files);
        self.unknown_keys.extend(later.unknown_keys);
    }

    /// The entry for `name`, a fully qualified image name without tag or digest
    /// (`docker.io/library/debian`, `127.0.0.1:5000/ns/repo`): the one with the longest
    /// matching prefix (containers-registries.conf(5), Choosing a `[[registry]]` TOML table).
    ///
    /// A prefix matches the whole name or a part of it followed by `/`, `:` or `@`; so
    /// `example.com/foo` matches `example.com/foo/bar` but not `example.com/foobar`, and, as in
    /// containers/image (which calls it unintended), `example.com` matches `example.com:5000/x`.
    /// `*.example.com` matches names whose host ends in `.example.com`.
    pub fn find(&self, name: &str) -> Option<&Registry> {
        let mut best: Option<&Registry> = None;
        for r in &self.registries {
            // The length compared is the prefix's, `*` included, and the first of equals wins,
            // as in containers/image.
            if matched_len(name, &r.prefix).is_some()
                && r.prefix.len() > best.map_or(0, |b| b.prefix.len())
            {
                best = Some(r);
            }
        }
        best
    }

    /// The endpoints a pull of `name` (as for [`find`](Self::find)) tries, in order: the
    /// mirrors that serve this kind of pull, then the primary location (containers-registries.conf(5),
    /// Remapping and mirroring registries). Each name is `name` with the matched prefix replaced
    /// by the endpoint's location. Without an entry, `name` itself.
    ///
    /// `mirror-by-digest-only` keeps all mirrors out of pulls by tag; otherwise each mirror's
    /// `pull-from-mirror` decides. A name under a blocked entry is refused, mirrors or not, as
    /// the man page says (containers/image itself checks each endpoint's own name, so it would
    /// still use the mirrors of a blocked entry). An endpoint whose rewritten name falls under
    /// a blocked entry is skipped, as containers/image's client for it refuses it; when that
    /// leaves none, the pull is refused.
    pub fn pull_sources(&self, name: &str, by_digest: bool) -> Result<Vec<PullSource>, ConfError> {
        let Some(reg) = self.find(name) else {
            return Ok(vec![PullSource { name: name.to_owned(), insecure: false, mirror: false }]);
        };
        if reg.blocked {
            return Err(blocked(name, reg));
        }
        let mirrors = reg.mirrors.iter().filter(|m| {
            if reg.mirror_by_digest_only {
                return by_digest;
            }
            match m.pull_from_mirror {
                PullFromMirror::All => true,
                PullFromMirror::DigestOnly => by_digest,
                PullFromMirror::TagOnly => !by_digest,
            }
        });
        let endpoints = mirrors.map(|m| (m.location.as_str(), m.insecure, true)).chain([(
            reg.location.as_str(),
            reg.insecure,
            false,
        )]);
        let mut sources = Vec::new();
        let mut refused = None;
        for (location, insecure, mirror) in endpoints {
            let rewritten = rewrite(name, reg, location)?;
            match self.find(&rewritten) {
                Some(other) if other.blocked => refused = Some(blocked(&rewritten, other)),
                _ => sources.push(PullSource { name: rewritten, insecure, mirror }),
            }
        }
        match refused {
            Some(e) if sources.is_empty() => Err(e),
            _ => Ok(sources),
        }
    }

    /// Where a push of `name` goes: `name` itself, never a mirror nor a `location`
    /// (containers-registries.conf(5), Remapping and mirroring registries: "Redirection and
    /// mirrors are currently processed only when reading a single image, not when pushing"),
    /// insecure as its entry says; refused under a blocked entry.
    pub fn push_destination(&self, name: &str) -> Result<PullSource, ConfError> {
        match self.find(name) {
            Some(r) if r.blocked => Err(blocked(name, r)),
            r => Ok(PullSource {
                name: name.to_owned(),
                insecure: r.is_some_and(|r| r.insecure),
                mirror: false,
            }),
        }
    }

    /// Whether the entry for `name` (a name as for [`find`](Self::find), or a bare
    /// `host[:port]`) allows plain HTTP and unverified TLS.
    pub fn insecure(&self, name: &str) -> bool {
        self.find(name).is_some_and(|r| r.insecure)
    }
}

fn blocked(name: &str, reg: &Registry) -> ConfError {
    ConfError::Blocked { name: name.to_owned(), prefix: reg.prefix.clone(), file: reg.file.clone() }
}

/// How many bytes of `name` `prefix` matches, if it does (containers/image `refMatchingPrefix`).
fn matched_len(name: &str, prefix: &str) -> Option<usize> {
    let at_boundary =
        |end: usize| matches!(name.as_bytes().get(end), None | Some(b'/' | b':' | b'@'));
    if let Some(domain) = prefix.strip_prefix('*').filter(|d| d.starts_with('.')) {
        // The first `.example.com`, before any `/`: the host part only.
        let i = name.find(domain)?;
        let end = i + domain.len();
        return (!name[..i].contains('/') && at_boundary(end)).then_some(end);
    }
    (name.starts_with(prefix) && at_boundary(prefix.len())).then_some(prefix.len())
}

/// `name` with the part `reg.prefix` matches replaced by `location`; unchanged for an empty
/// location (a wildcard prefix without one). The result must be a valid canonical name, as
/// containers/image parses it.
fn rewrite(name: &str, reg: &Registry, location: &str) -> Result<String, ConfError> {
    let Some(len) = matched_len(name, &reg.prefix) else {
        return Ok(name.to_owned());
    };
    if location.is_empty() {
        return Ok(name.to_owned());
    }
    let rewritten = format!("{location}{}", &name[len..]);
    match check_name(&rewritten) {
        Ok(()) => Ok(rewritten),
        Err(reason) => Err(ConfError::Rewrite {
            name: name.to_owned(),
            prefix: reg.prefix.clone(),
            file: reg.file.clone(),
            rewritten,
            reason,
        }),
    }
}

/// The distribution reference grammar for a canonical name without tag or digest:
/// `domain/component[/component…]`, at most 255 bytes.
fn check_name(name: &str) -> Result<(), &'static str> {
    if name.len() > 255 {
        return Err("is longer than 255 characters");
    }
    let Some((domain, path)) = name.split_once('/') else {
        return Err("does not start with a registry host");
    };
    // Otherwise the first component would be a Docker Hub namespace.
    if !(domain.contains(['.', ':']) || domain == "localhost") {
        return Err("does not start with a registry host");
    }
    if !is_domain(domain) {
        return Err("has an invalid registry host");
    }
    if domain == "index.docker.io" || (domain == "docker.io" && !path.contains('/')) {
        return Err("is not canonical (Docker Hub names are docker.io/<namespace>/<repository>)");
    }
    if !path.split('/').all(is_path_component) {
        return Err("has an invalid repository path");
    }
    Ok(())
}

/// `host[:port]`: dot-separated labels of letters, digits and inner `-`.
fn is_domain(s: &str) -> bool {
    let (host, port) = match s.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (s, None),
    };
    let label = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'-')
    };
    port.is_none_or(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()))
        && host.split('.').all(label)
}

/// `[a-z0-9]+` runs joined by `.`, `_`, `__` or any number of `-`.
fn is_path_component(c: &str) -> bool {
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let b = c.as_bytes();
    if !b.first().is_some_and(alnum) || !b.last().is_some_and(alnum) {
        return false;
    }
    c.split(|ch: char| ch.is_ascii_lowercase() || ch.is_ascii_digit())
        .filter(|sep| !sep.is_empty())
        .all(|sep| matches!(sep, "." | "_" | "__") || sep.bytes().all(|b| b == b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAIN: &str = "/etc/containers/registries.conf";

    fn parse(text: &str) -> RegistriesConf {
        RegistriesConf::parse(text, Path::new(MAIN)).unwrap()
    }

    fn parse_err(text: &str) -> String {
        RegistriesConf::parse(text, Path::new(MAIN)).unwrap_err().to_string()
    }

    fn source(name: &str, insecure: bool, mirror: bool) -> PullSource {
        PullSource { name: name.to_owned(), insecure, mirror }
    }

    fn pulls(conf: &RegistriesConf, name: &str, by_digest: bool) -> Vec<PullSource> {
        conf.pull_sources(name, by_digest).unwrap()
    }

    /// A temporary root with `etc/containers` as the system directory and `home` as `$HOME`.
    struct Tree {
        dir: tempfile::TempDir,
        env: ConfEnv,
    }

    fn tree() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let env = ConfEnv {
            registries_conf: None,
            home: Some(dir.path().join("home")),
            system_dir: dir.path().join("etc/containers"),
        };
        Tree { dir, env }
    }

    impl Tree {
        fn write(&self, rel: &str, text: &str) -> PathBuf {
            let path = self.dir.path().join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, text).unwrap();
            path
        }
    }

    #[test]
    fn prefix_is_rewritten_to_location() {
        let conf = parse(
            r#"
[[registry]]
prefix = "example.com/foo"
location = "internal.example.com/bar"
insecure = true
"#,
        );
        assert_eq!(
            pulls(&conf, "example.com/foo/myimage", false),
            [source("internal.example.com/bar/myimage", true, false)]
        );
        assert_eq!(
            pulls(&conf, "example.com/foo", true),
            [source("internal.example.com/bar", true, false)]
        );
        // No entry: the name itself.
        assert_eq!(
            pulls(&conf, "docker.io/library/debian", false),
            [source("docker.io/library/debian", false, false)]
        );

        // prefix defaults to location; trailing slashes go.
        let conf = parse("[[registry]]\nlocation = \"registry.local:5000/\"\ninsecure = true\n");
        assert_eq!(conf.registries[0].prefix, "registry.local:5000");
        assert_eq!(conf.registries[0].location, "registry.local:5000");
        assert_eq!(
            pulls(&conf, "registry.local:5000/ns/repo", false),
            [source("registry.local:5000/ns/repo", true, false)]
        );
        assert!(conf.insecure("registry.local:5000"));
        assert!(!conf.insecure("registry.local:5001"));
    }

    #[test]
    fn longest_prefix_wins() {
        let conf = parse(
            r#"
[[registry]]
prefix = "example.com/foo/bar"
location = "c.local"
[[registry]]
prefix = "example.com"
location = "a.local"
[[registry]]
prefix = "example.com/foo"
location = "b.local/foo"
[[registry]]
prefix = "example.com"
location = "ignored.local"
"#,
        );
        // Sorted by prefix; of two entries with one prefix in a file, the first counts.
        let entries: Vec<(&str, &str)> =
            conf.registries.iter().map(|r| (r.prefix.as_str(), r.location.as_str())).collect();
        assert_eq!(
            entries,
            [
                ("example.com", "a.local"),
                ("example.com/foo", "b.local/foo"),
                ("example.com/foo/bar", "c.local")
            ]
        );
        assert_eq!(
            pulls(&conf, "example.com/foo/bar/x", false),
            [source("c.local/x", false, false)]
        );
        assert_eq!(
            pulls(&conf, "example.com/foo/x", false),
            [source("b.local/foo/x", false, false)]
        );
        assert_eq!(pulls(&conf, "example.com/x", false), [source("a.local/x", false, false)]);
    }

    #[test]
    fn prefixes_match_at_boundaries() {
        let conf = parse(
            r#"
[[registry]]
prefix = "example.com/foo"
location = "x.local/foo"
[[registry]]
location = "ported.com:5000"
[[registry]]
prefix = "other.com"
location = "mirror.local"
"#,
        );
        let prefix = |name: &str| conf.find(name).map(|r| r.prefix.as_str());
        assert_eq!(prefix("example.com/foo"), Some("example.com/foo"));
        assert_eq!(prefix("example.com/foo/bar"), Some("example.com/foo"));
        assert_eq!(prefix("example.com/foobar"), None);
        assert_eq!(prefix("example.com"), None);
        assert_eq!(prefix("ported.com:5000/x"), Some("ported.com:5000"));
        assert_eq!(prefix("ported.com:50000/x"), None);
        // containers/image lets a host prefix match the host with a port too.
        assert_eq!(prefix("other.com:5000/x"), Some("other.com"));
        assert_eq!(
            pulls(&conf, "other.com:5000/x", false),
            [source("mirror.local:5000/x", false, false)]
        );
    }

    #[test]
    fn wildcard_prefix_matches_subdomains() {
        let conf = parse(
            r#"
[[registry]]
prefix = "*.example.com"
insecure = true
[[registry]]
prefix = "*.rewrite.test"
location = "mirror.local/rw"
"#,
        );
        assert_eq!(conf.registries[0].location, "");
        // Without a location names stay as they are, with the entry's settings.
        assert_eq!(
            pulls(&conf, "sub.example.com/ns/x", false),
            [source("sub.example.com/ns/x", true, false)]
        );
        assert_eq!(
            conf.find("a.b.example.com:5000/x").map(|r| r.prefix.as_str()),
            Some("*.example.com")
        );
        assert_eq!(conf.find("example.com/x"), None);
        assert_eq!(conf.find("sub.example.community/x"), None);
        assert_eq!(conf.find("other.com/sub.example.com/x"), None);
        // With one, the matched host is replaced.
        assert_eq!(
            pulls(&conf, "a.rewrite.test/ns/x", false),
            [source("mirror.local/rw/ns/x", false, false)]
        );

        assert_eq!(
            parse_err("[[registry]]\nprefix = \"*.example.com/foo\"\nlocation = \"x.local\"\n"),
            "registries.conf /etc/containers/registries.conf: [[registry]] 1: wildcard prefix \"*.example.com/foo\" \
             must be of the form \"*.example.com\", without port, path, tag or digest"
        );
        assert_eq!(
            parse_err("[[registry]]\nprefix = \"example.com\"\n"),
            "registries.conf /etc/containers/registries.conf: [[registry]] 1: location is unset, which only a \
             wildcard prefix such as \"*.example.com\" allows (prefix \"example.com\")"
        );
    }

    #[test]
    fn mirrors_come_first_then_the_primary() {
        let conf = parse(
            r#"
[[registry]]
prefix = "example.com/foo"
location = "internal.example.com/bar"
[[registry.mirror]]
location = "mirror-0.local/mirror-for-foo"
[[registry.mirror]]
location = "mirror-1.local/mirrors/foo"
insecure = true
[[registry]]
location = "registry.com"
[[registry.mirror]]
location = "mirror.registry.com"
"#,
        );
        assert_eq!(
            pulls(&conf, "example.com/foo/image", false),
            [
                source("mirror-0.local/mirror-for-foo/image", false, true),
                source("mirror-1.local/mirrors/foo/image", true, true),
                source("internal.example.com/bar/image", false, false),
            ]
        );
        assert_eq!(
            pulls(&conf, "registry.com/image", true),
            [
                source("mirror.registry.com/image", false, true),
                source("registry.com/image", false, false)
            ]
        );
    }

    #[test]
    fn digest_only_mirrors_are_skipped_for_tag_pulls() {
        let conf = parse(
            r#"
[[registry]]
location = "a.com"
mirror-by-digest-only = true
[[registry.mirror]]
location = "m.a.local"
[[registry]]
location = "b.com"
[[registry.mirror]]
location = "digest.b.local"
pull-from-mirror = "digest-only"
[[registry.mirror]]
location = "tag.b.local"
pull-from-mirror = "tag-only"
[[registry.mirror]]
location = "all.b.local"
pull-from-mirror = "all"
"#,
        );
        assert_eq!(pulls(&conf, "a.com/x", false), [source("a.com/x", false, false)]);
        assert_eq!(
            pulls(&conf, "a.com/x", true),
            [source("m.a.local/x", false, true), source("a.com/x", false, false)]
        );
        let names = |by_digest| {
            pulls(&conf, "b.com/x", by_digest).into_iter().map(|s| s.name).collect::<Vec<_>>()
        };
        assert_eq!(names(false), ["tag.b.local/x", "all.b.local/x", "b.com/x"]);
        assert_eq!(names(true), ["digest.b.local/x", "all.b.local/x", "b.com/x"]);

        let file = "registries.conf /etc/containers/registries.conf";
        assert_eq!(
            parse_err(
                "[[registry]]\nlocation = \"a.com\"\nmirror-by-digest-only = true\n\
                 [[registry.mirror]]\nlocation = \"m.local\"\npull-from-mirror = \"all\"\n"
            ),
            format!(
                "{file}: [[registry]] 1: [[registry.mirror]] 1: pull-from-mirror cannot be set when the registry \
                 sets mirror-by-digest-only"
            )
        );
        assert_eq!(
            parse_err("[[registry]]\nlocation = \"a.com\"\npull-from-mirror = \"digest-only\"\n"),
            format!("{file}: [[registry]] 1: pull-from-mirror belongs in [[registry.mirror]], not in [[registry]]")
        );
        assert_eq!(
            parse_err("[[registry]]\nlocation = \"a.com\"\n[[registry.mirror]]\nlocation = \"m.local\"\npull-from-mirror = \"tags\"\n"),
            format!(
                "{file}: [[registry]] 1: [[registry.mirror]] 1: pull-from-mirror \"tags\" is not \"all\", \
                 \"digest-only\" or \"tag-only\""
            )
        );
        assert_eq!(
            parse_err("[[registry]]\nlocation = \"a.com\"\n[[registry.mirror]]\ninsecure = true\n"),
            format!("{file}: [[registry]] 1: [[registry.mirror]] 1: location is unset")
        );
    }

    #[test]
    fn blocked_names_the_file() {
        let t = tree();
        t.write(
            "etc/containers/registries.conf",
            "[[registry]]\nlocation = \"docker.io\"\n[[registry]]\nprefix = \"mycorp.com/hub2\"\nlocation = \"docker.io/library\"\n",
        );
        let drop_in = t.write(
            "etc/containers/registries.conf.d/50-block.conf",
            r#"
[[registry]]
prefix = "docker.io/library"
blocked = true
location = "docker.io/library"
[[registry.mirror]]
location = "mirror.local/library"
"#,
        );
        let conf = RegistriesConf::load(&t.env).unwrap();
        let err = conf.pull_sources("docker.io/library/debian", true).unwrap_err();
        match &err {
            ConfError::Blocked { name, prefix, file } => {
                assert_eq!(name, "docker.io/library/debian");
                assert_eq!(prefix, "docker.io/library");
                assert_eq!(file, &drop_in);
            }
            other => panic!("not Blocked: {other:?}"),
        }
        assert_eq!(
            err.to_string(),
            format!(
                "docker.io/library/debian is blocked by registries.conf {} (prefix \"docker.io/library\")",
                drop_in.display()
            )
        );
        assert!(matches!(
            conf.push_destination("docker.io/library/debian"),
            Err(ConfError::Blocked { .. })
        ));
        // Not blocked itself, but rewritten to a blocked name: refused as well.
        match conf.pull_sources("mycorp.com/hub2/debian", false).unwrap_err() {
            ConfError::Blocked { name, prefix, .. } => {
                assert_eq!(name, "docker.io/library/debian");
                assert_eq!(prefix, "docker.io/library");
            }
            other => panic!("not Blocked: {other:?}"),
        }
        assert_eq!(
            pulls(&conf, "docker.io/someone/app", false),
            [source("docker.io/someone/app", false, false)]
        );
    }

    #[test]
    fn push_never_uses_mirrors_or_locations() {
        let conf = parse(
            r#"
[[registry]]
prefix = "example.com/foo"
location = "internal.example.com/bar"
insecure = true
[[registry.mirror]]
location = "mirror.local/foo"
"#,
        );
        assert_eq!(
            conf.push_destination("example.com/foo/app").unwrap(),
            source("example.com/foo/app", true, false)
        );
        assert_eq!(
            conf.push_destination("quay.io/ns/app").unwrap(),
            source("quay.io/ns/app", false, false)
        );
        assert_eq!(pulls(&conf, "example.com/foo/app", false).len(), 2);
    }

    #[test]
    fn drop_ins_override_entries_with_the_same_prefix() {
        let t = tree();
        let main = t.write(
            "etc/containers/registries.conf",
            r#"
unqualified-search-registries = ["a.example.com"]
[[registry]]
prefix = "example.com"
location = "a.local"
[[registry]]
location = "keep.local"
"#,
        );
        let first = t.write(
            "etc/containers/registries.conf.d/10-a.conf",
            "[[registry]]\nprefix = \"example.com\"\nlocation = \"b.local\"\n",
        );
        let second = t.write(
            "etc/containers/registries.conf.d/20-b.conf",
            "[[registry]]\nprefix = \"example.com\"\nlocation = \"c.local\"\ninsecure = true\n",
        );
        t.write(
            "etc/containers/registries.conf.d/30-c.conf.disabled",
            "[[registry]]\nlocation = \"no.local\"\n",
        );
        t.write(
            "etc/containers/registries.conf.d/40-d.conf/x.conf",
            "[[registry]]\nlocation = \"no.local\"\n",
        );
        // The user's drop-ins come after all the system's, whatever their names.
        let user = t.write(
            "home/.config/containers/registries.conf.d/05-user.conf",
            "unqualified-search-registries = [\"user.example.com\"]\n",
        );

        let conf = RegistriesConf::load(&t.env).unwrap();
        assert_eq!(conf.files, [main.clone(), first, second.clone(), user.clone()]);
        assert_eq!(files(&t.env).unwrap(), conf.files);
        let entry = conf.find("example.com/x").unwrap();
        assert_eq!(
            (entry.location.as_str(), entry.insecure, &entry.file),
            ("c.local", true, &second)
        );
        assert_eq!(conf.find("keep.local/x").unwrap().file, main);
        assert_eq!(conf.find("no.local/x"), None);
        assert_eq!(conf.unqualified_search_registries, ["user.example.com"]);
        assert_eq!(conf.unqualified_search_registries_file, Some(user));
        assert_eq!(conf.registries.len(), 2);
    }

    #[test]
    fn user_file_replaces_the_system_file() {
        let t = tree();
        t.write("etc/containers/registries.conf", "[[registry]]\nlocation = \"system.local\"\n");
        t.write(
            "etc/containers/registries.conf.d/10.conf",
            "[[registry]]\nlocation = \"systemdrop.local\"\n",
        );
        let user = t.write(
            "home/.config/containers/registries.conf",
            "[[registry]]\nlocation = \"user.local\"\n",
        );
        let user_drop = t.write(
            "home/.config/containers/registries.conf.d/10.conf",
            "[[registry]]\nlocation = \"userdrop.local\"\n",
        );
        let conf = RegistriesConf::load(&t.env).unwrap();
        assert_eq!(conf.files, [user.clone(), user_drop.clone()]);
        assert_eq!(files(&t.env).unwrap(), [user, user_drop]);
        let locations: Vec<&str> = conf.registries.iter().map(|r| r.location.as_str()).collect();
        assert_eq!(locations, ["user.local", "userdrop.local"]);

        // Nothing at all is no error.
        let empty = tree();
        assert_eq!(RegistriesConf::load(&empty.env).unwrap(), RegistriesConf::default());
        assert_eq!(files(&empty.env).unwrap(), Vec::<PathBuf>::new());
    }

    #[test]
    fn containers_registries_conf_replaces_the_main_file_only() {
        let mut t = tree();
        t.write("etc/containers/registries.conf", "[[registry]]\nlocation = \"system.local\"\n");
        t.write(
            "home/.config/containers/registries.conf",
            "[[registry]]\nlocation = \"user.local\"\n",
        );
        let system_drop = t.write(
            "etc/containers/registries.conf.d/10.conf",
            "[[registry]]\nlocation = \"systemdrop.local\"\n",
        );
        let user_drop = t.write(
            "home/.config/containers/registries.conf.d/10.conf",
            "[[registry]]\nlocation = \"userdrop.local\"\n",
        );
        t.write("custom.conf.d/10.conf", "[[registry]]\nlocation = \"no.local\"\n");
        let custom = t.write("custom.conf", "[[registry]]\nlocation = \"custom.local\"\n");
        t.env.registries_conf = Some(custom.clone());

        let conf = RegistriesConf::load(&t.env).unwrap();
        assert_eq!(conf.files, [custom.clone(), system_drop, user_drop]);
        let locations: Vec<&str> = conf.registries.iter().map(|r| r.location.as_str()).collect();
        assert_eq!(locations, ["custom.local", "systemdrop.local", "userdrop.local"]);

        // Unlike the default files, it must exist.
        fs::remove_file(&custom).unwrap();
        match RegistriesConf::load(&t.env).unwrap_err() {
            ConfError::Read { path, error } => {
                assert_eq!(path, custom);
                assert_eq!(error.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("not Read: {other:?}"),
        }
    }

    #[test]
    fn version_1_is_converted() {
        let conf = parse(
            r#"
[registries.search]
registries = ['registry1.com', 'registry2.com:5000']
[registries.insecure]
registries = ['registry3.com', 'blocked.com/']
[registries.block]
registries = ['unsafe.com', 'blocked.com']
"#,
        );
        let entries: Vec<(&str, &str, bool, bool)> = conf
            .registries
            .iter()
            .map(|r| (r.prefix.as_str(), r.location.as_str(), r.insecure, r.blocked))
            .collect();
        assert_eq!(
            entries,
            [
                ("blocked.com", "blocked.com", true, true),
                ("registry3.com", "registry3.com", true, false),
                ("unsafe.com", "unsafe.com", false, true),
            ]
        );
        assert_eq!(conf.unqualified_search_registries, ["registry1.com", "registry2.com:5000"]);
        assert_eq!(conf.unqualified_search_registries_file.as_deref(), Some(Path::new(MAIN)));
        assert_eq!(
            pulls(&conf, "registry3.com/ns/x", false),
            [source("registry3.com/ns/x", true, false)]
        );
        assert!(matches!(conf.pull_sources("unsafe.com/x", false), Err(ConfError::Blocked { .. })));
        assert_eq!(
            parse_err("[registries.insecure]\nregistries = ['http://a.com']\n"),
            "registries.conf /etc/containers/registries.conf: [registries.insecure]: registries: \"http://a.com\" \
             must not have a scheme"
        );
    }

    #[test]
    fn mixing_versions_is_refused() {
        assert_eq!(
            parse_err("unqualified-search-registries = []\n[registries.search]\nregistries = ['a.com']\n[[registry]]\nlocation = 'b.com'\n"),
            "registries.conf /etc/containers/registries.conf: the version 1 tables [registries.search], \
             [registries.insecure] and [registries.block] cannot be mixed with version 2 settings \
             (here: [[registry]], unqualified-search-registries)"
        );
        // Drop-ins must be version 2.
        let t = tree();
        let drop_in = t.write(
            "etc/containers/registries.conf.d/10.conf",
            "[registries.block]\nregistries = ['a.com']\n",
        );
        let err = RegistriesConf::load(&t.env).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "registries.conf {}: drop-in files must use version 2 ([[registry]], unqualified-search-registries), \
                 not the version 1 tables [registries.search], [registries.insecure] and [registries.block]",
                drop_in.display()
            )
        );
    }

    #[test]
    fn schemes_are_refused() {
        let file = "registries.conf /etc/containers/registries.conf";
        assert_eq!(
            parse_err(
                "[[registry]]\nlocation = \"a.com\"\n\n[[registry]]\nlocation = \"http://x\"\n"
            ),
            format!("{file}: [[registry]] 2: location \"http://x\" must not have a scheme")
        );
        assert_eq!(
            parse_err("[[registry]]\nprefix = \"https://a.com\"\nlocation = \"a.com\"\n"),
            format!("{file}: [[registry]] 1: prefix \"https://a.com\" must not have a scheme")
        );
        assert_eq!(
            parse_err("[[registry]]\nlocation = \"a.com\"\n[[registry.mirror]]\nlocation = \"http://m.local/\"\n"),
            format!(
                "{file}: [[registry]] 1: [[registry.mirror]] 1: location \"http://m.local/\" must not have a scheme"
            )
        );
        assert_eq!(
            parse_err("unqualified-search-registries = [\"https://a.com\"]\n"),
            format!(
                "{file}: unqualified-search-registries: \"https://a.com\" must not have a scheme"
            )
        );
    }

    #[test]
    fn unknown_keys_are_collected() {
        let conf = parse(
            r#"
foo = 1
short-name-mode = "enforcing"
credential-helpers = ["pass"]
[[registry]]
location = "a.com"
insecure = false
bar = true
[[registry.mirror]]
location = "m.local"
baz = "x"
[registries.search]
x = 1
[aliases]
"img" = "a.com/img"
"#,
        );
        let mut keys: Vec<String> = conf.unknown_keys.iter().map(|k| k.key.clone()).collect();
        keys.sort();
        assert_eq!(
            keys,
            ["foo", "registries.search.x", "registry[1].bar", "registry[1].mirror[1].baz"]
        );
        assert!(conf.unknown_keys.iter().all(|k| k.file == Path::new(MAIN)));
        let foo = conf.unknown_keys.iter().find(|k| k.key == "foo").unwrap();
        assert_eq!(
            foo.to_string(),
            "registries.conf /etc/containers/registries.conf: unknown key foo"
        );
        // The entry is read all the same.
        assert_eq!(
            pulls(&conf, "a.com/x", false),
            [source("m.local/x", false, true), source("a.com/x", false, false)]
        );
    }

    #[test]
    fn other_refusals() {
        let file = "registries.conf /etc/containers/registries.conf";
        let err = parse_err("[[registry]]\nlocation = \"a.com\"\ninsecure = \"yes\"\n");
        assert!(err.starts_with(&format!("{file}: line 3: ")), "{err}");
        assert!(err.contains("expected a boolean"), "{err}");
        assert_eq!(
            parse_err("short-name-mode = \"strict\"\n"),
            format!("{file}: short-name-mode \"strict\" is not \"enforcing\", \"permissive\" or \"disabled\"")
        );
        assert_eq!(
            parse_err("unqualified-search-registries = [\"a.com/ns\"]\n"),
            format!("{file}: unqualified-search-registries: \"a.com/ns\" is not a host[:port]")
        );
        assert_eq!(
            parse_err("[[registry]]\nlocation = \"a.com\"\n[[registry]]\nprefix = \"b.com\"\nlocation = \"a.com\"\ninsecure = true\n"),
            format!("{file}: [[registry]] 2: \"a.com\" is also in [[registry]] 1 with a different insecure setting")
        );
        assert_eq!(
            parse_err("[[registry]]\ninsecure = true\n"),
            format!("{file}: [[registry]] 1: neither prefix nor location is set")
        );

        // A location that makes a name containers/image would not parse.
        let conf = parse("[[registry]]\nprefix = \"hub.local/docker\"\nlocation = \"docker.io\"\n");
        match conf.pull_sources("hub.local/docker/debian", false).unwrap_err() {
            ConfError::Rewrite { name, rewritten, .. } => {
                assert_eq!(name, "hub.local/docker/debian");
                assert_eq!(rewritten, "docker.io/debian");
            }
            other => panic!("not Rewrite: {other:?}"),
        }
        assert_eq!(
            pulls(&conf, "hub.local/docker/library/debian", false),
            [source("docker.io/library/debian", false, false)]
        );
    }

    #[test]
    fn names_are_checked_as_references() {
        assert_eq!(check_name("example.com/a/b-c__d.e"), Ok(()));
        assert_eq!(check_name("localhost/x"), Ok(()));
        assert_eq!(check_name("127.0.0.1:5000/ns/repo"), Ok(()));
        assert!(check_name("myhost/x").is_err());
        assert!(check_name("example.com/Upper").is_err());
        assert!(check_name("example.com/a..b").is_err());
        assert!(check_name("example.com/a___b").is_err());
        assert!(check_name("example.com/-a").is_err());
        assert!(check_name("example.com:x/a").is_err());
        assert!(check_name("index.docker.io/library/debian").is_err());
        assert!(is_domain("registry-1.docker.io:443"));
        assert!(!is_domain("-bad.com"));
    }
}
