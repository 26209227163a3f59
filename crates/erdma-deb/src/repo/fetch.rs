//! Fetching a repository's metadata: its layout (nested, flat), `InRelease` or `Release`
//! with `Release.gpg`, and the indices it lists, streamed, checked and cached, with retries.

use super::release::{FileEntry, Release};
use super::*;
use crate::index;
use erdma_common::dates::now;
use erdma_http::{Client, Failed, HttpError, RETRIES};
use erdma_openpgp::{verify_clearsigned_with, verify_detached_with, Keyring};
use std::io::Read;

/// Where a [`RepoSpec`]'s files are.
struct Layout {
    /// Archive root, no trailing slash.
    base: String,
    /// Directory of InRelease, with a trailing slash.
    meta: String,
    /// Index directories relative to `meta` (`main/binary-amd64/`, or `` for flat).
    index_dirs: Vec<String>,
    flat: bool,
    /// `URL suite`, for messages.
    display: String,
}

impl Layout {
    fn new(spec: &RepoSpec) -> Result<Self, RepoError> {
        let base = spec.url.trim_end_matches('/').to_owned();
        let display = format!("{} {}", base, spec.suite);
        let invalid = |reason: &str| RepoError::InvalidSpec {
            repo: display.clone(),
            reason: reason.to_owned(),
        };
        if base.is_empty() {
            return Err(invalid("the URL is empty"));
        }
        if spec.suite.is_empty() {
            return Err(invalid("the suite is empty"));
        }
        if spec.suite.split('/').any(|part| part == "..") {
            return Err(invalid("the suite contains `..`"));
        }
        if spec.suite.ends_with('/') {
            // sources.list(5): "if the suite is an exact path, components must be omitted".
            if !spec.components.is_empty() {
                return Err(invalid("a flat repository (suite ending in `/`) takes no components"));
            }
            let dir = spec.suite.trim_start_matches("./").trim_start_matches('/');
            Ok(Layout {
                meta: format!("{base}/{dir}"),
                base,
                index_dirs: vec![String::new()],
                flat: true,
                display,
            })
        } else {
            if spec.components.is_empty() {
                return Err(invalid("no component given"));
            }
            if spec.arch.is_empty() || spec.arch.contains('/') {
                return Err(invalid("invalid architecture"));
            }
            let mut index_dirs = Vec::new();
            for c in &spec.components {
                if c.is_empty() || c.split('/').any(|p| p == ".." || p.is_empty()) {
                    return Err(invalid(&format!("invalid component `{c}`")));
                }
                index_dirs.push(format!("{c}/binary-{}/", spec.arch));
            }
            Ok(Layout {
                meta: format!("{base}/dists/{}/", spec.suite.trim_matches('/')),
                base,
                index_dirs,
                flat: false,
                display,
            })
        }
    }
}

/// Downloads, verifies and parses the package indices of one repository.
pub async fn fetch_index(client: &Client, spec: &RepoSpec) -> Result<RepoIndex, RepoError> {
    fetch_index_cached(client, spec, None).await
}

/// [`fetch_index`], keeping what was read of each index in `cache` (`HASH.kept-N`): the
/// fields the resolver reads, named by the SHA256 of the index file the signed Release lists
/// and written only once that file matched it. The Release is fetched and verified every
/// time; an index whose entry there is unchanged is then read from the cache without being
/// downloaded, decompressed or hashed again, as apt reads its `lists/` directory.
///
/// The cache is trusted as apt's lists are: a cached file is used only when the user running
/// the build owns it and no one else may write it (see `docs/security.md`).
pub async fn fetch_index_cached(
    client: &Client,
    spec: &RepoSpec,
    cache: Option<&std::path::Path>,
) -> Result<RepoIndex, RepoError> {
    fetch_index_prefetched(client, spec, cache, None).await
}

/// An `InRelease` fetched ahead ([`prefetch_index`]), not verified: [`fetch_index_prefetched`]
/// verifies these bytes instead of fetching them again.
pub struct Prefetched {
    url: String,
    body: Vec<u8>,
    /// The indices this fetch downloaded, each as read: [`fetch_index_prefetched`] takes one
    /// in place of reading back the copy kept in the cache, and only where the verified
    /// Release lists the SHA256 its text was checked against: the trust a kept copy is given.
    read: Vec<DirIndex>,
}

/// A clone holds no indices: those read are handed to one [`fetch_index_prefetched`].
impl Clone for Prefetched {
    fn clone(&self) -> Prefetched {
        Prefetched { url: self.url.clone(), body: self.body.clone(), read: Vec::new() }
    }
}

impl fmt::Debug for Prefetched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prefetched")
            .field("url", &self.url)
            .field("body", &self.body.len())
            .field("read", &self.read.iter().map(|r| &r.checked).collect::<Vec<_>>())
            .finish()
    }
}

/// One index directory's packages as [`read_dir_index`] read them.
struct DirIndex {
    /// What the text was checked against, which names its kept copy ([`checked_as`]).
    checked: Option<String>,
    packages: Vec<IndexedPackage>,
}

/// What [`read_dir_index`] is asked for.
enum Want<'a> {
    /// A copy kept (a fetch ahead): what is read is returned, nothing where a copy already
    /// is.
    Kept,
    /// The packages (the build), taken from `handed` (what a fetch ahead read) where one
    /// was read under a hash the Release lists for them, else from the kept copy or the
    /// mirror.
    Packages { handed: &'a mut Vec<DirIndex> },
}

/// Fetches ahead what [`fetch_index_cached`] will read for `spec`, before its keyring is known
/// (while the base image is still being read): the `InRelease`, and each index it lists into
/// `cache`, checked against the hash the text names as it streams, and returned as read.
/// Nothing here is trusted: the `InRelease` is returned unverified for
/// [`fetch_index_prefetched`] to verify, and an index kept or read is named by the SHA256 its
/// content was checked against (and, for a compressed file, its compression), so it is used
/// only where a verified Release lists that hash for it. `spec.keyring` is not read.
pub async fn prefetch_index(
    client: &Client,
    spec: &RepoSpec,
    cache: &std::path::Path,
) -> Result<Prefetched, RepoError> {
    let layout = Layout::new(spec)?;
    let url = format!("{}InRelease", layout.meta);
    let Some(body) = get_meta(client, &url).await? else {
        return Err(RepoError::NoRelease { url: layout.meta.clone() });
    };
    let text = erdma_openpgp::unverified_cleartext(&body).ok_or_else(|| {
        RepoError::MalformedRelease { url: url.clone(), reason: "not clear-signed".into() }
    })?;
    let release = Release::parse(&text, &url)?;
    let at = ReleaseAt::new(&layout, &release, &url);
    let mut read = Vec::new();
    for dir in &layout.index_dirs {
        // A component the repository lacks is the build's to report.
        if let Ok(Some(index)) = read_dir_index(client, &at, dir, Some(cache), Want::Kept).await {
            read.push(index);
        }
    }
    Ok(Prefetched { url, body, read })
}

/// [`fetch_index_cached`], verifying `prefetched`'s `InRelease` (where it is this repository's)
/// instead of fetching it again, and taking the indices it read (where the verified Release
/// lists what they were checked against) instead of reading their kept copies back.
pub async fn fetch_index_prefetched(
    client: &Client,
    spec: &RepoSpec,
    cache: Option<&std::path::Path>,
    prefetched: Option<Prefetched>,
) -> Result<RepoIndex, RepoError> {
    let mut layout = Layout::new(spec)?;
    let keyring = Keyring::load(&spec.keyring)
        .map_err(|source| RepoError::Keyring { repo: layout.display.clone(), source })?;
    let (release_url, text) =
        fetch_release(client, &layout.meta, &keyring, prefetched.as_ref()).await?;
    let mut handed = prefetched.map(|p| p.read).unwrap_or_default();
    let release = Release::parse(&text, &release_url)?;
    release.check_dates(&release_url, now())?;
    if !layout.flat {
        for c in release.check_wanted(spec, &layout.meta)? {
            tracing::warn!("skipping component `{c}` of {}: the repository does not have it (apt skips it too)", layout.display);
            let dir = format!("{c}/binary-{}/", spec.arch);
            layout.index_dirs.retain(|d| *d != dir);
        }
    }
    let at = ReleaseAt::new(&layout, &release, &release_url);
    let mut packages = Vec::new();
    for dir in &layout.index_dirs {
        let want = Want::Packages { handed: &mut handed };
        let read = read_dir_index(client, &at, dir, cache, want).await?;
        packages.extend(read.map(|r| r.packages).unwrap_or_default());
    }
    Ok(RepoIndex { packages })
}

/// A repository's Release as read from `url`, with where its files are.
struct ReleaseAt<'a> {
    layout: &'a Layout,
    release: &'a Release,
    url: &'a str,
    /// The name its packages are reported under: the Release's Origin, else its Label, else
    /// the repository's URL.
    origin: String,
}

impl<'a> ReleaseAt<'a> {
    fn new(layout: &'a Layout, release: &'a Release, url: &'a str) -> Self {
        let origin = release
            .origin
            .clone()
            .or_else(|| release.label.clone())
            .unwrap_or_else(|| layout.base.clone());
        ReleaseAt { layout, release, url, origin }
    }
}

/// The packages of one index directory (`main/binary-amd64/`) as `release` lists its files:
/// from what a fetch ahead read or the copy kept in `cache`, under the hash the Release gives,
/// else downloaded (trying each compression the Release lists) and kept. `Want::Kept`: make
/// sure a copy is kept, and return `None` without reading one that already is.
async fn read_dir_index(
    client: &Client,
    at: &ReleaseAt<'_>,
    dir: &str,
    cache: Option<&std::path::Path>,
    want: Want<'_>,
) -> Result<Option<DirIndex>, RepoError> {
    let ReleaseAt { layout, release, url: release_url, origin } = at;
    // The Release also lists the uncompressed index's hash (mirrors need not serve it):
    // the decompressed text is checked against it too, and names the cached copy.
    let plain = format!("{dir}Packages");
    let plain_entry = release.sha256.get(&plain).cloned().filter(|e| is_sha256(&e.sha256));
    let listed: Vec<(String, FileEntry)> = INDEX_NAMES
        .iter()
        .map(|name| format!("{dir}{name}"))
        .filter_map(|path| release.sha256.get(&path).map(|e| (path, e.clone())))
        .collect();
    if listed.is_empty() {
        return Err(RepoError::NoIndex { url: release_url.to_string(), wanted: plain });
    }
    let context = |url: String, file: String, entry: FileEntry| IndexContext {
        url,
        file,
        repo_meta: layout.meta.clone(),
        base: layout.base.clone(),
        origin: origin.to_string(),
        repo: layout.display.clone(),
        entry,
        max_inflation: client.inflation(),
    };
    let checked = |path: &str, entry: &FileEntry| checked_as(plain_entry.as_ref(), path, entry);
    let kept_at = |path: &str, entry: &FileEntry| Some(kept_path(cache?, &checked(path, entry)?));
    let names = if plain_entry.is_some() { 1 } else { listed.len() };
    match want {
        Want::Kept => {
            let kept =
                listed.iter().take(names).any(|(p, e)| kept_at(p, e).is_some_and(|p| p.is_file()));
            if kept {
                return Ok(None);
            }
        }
        Want::Packages { handed } => {
            // Read ahead from this Release's files, for the same archive and origin: as good
            // as the kept copy of that text, which would be read next.
            let urls: Vec<String> =
                listed.iter().map(|(path, _)| format!("{}{}", layout.meta, path)).collect();
            let same_place = |p: &IndexedPackage| {
                let index = &p.index;
                urls.contains(&index.url)
                    && index.base == layout.base
                    && index.origin == *origin
                    && index.repo == layout.display
            };
            let taken = listed.iter().take(names).find_map(|(path, e)| {
                let key = checked(path, e)?;
                handed.iter().position(|r| {
                    r.checked.as_ref() == Some(&key) && r.packages.iter().take(1).all(same_place)
                })
            });
            if let Some(i) = taken {
                return Ok(Some(handed.swap_remove(i)));
            }
            let hit = listed.iter().take(names).find_map(|(path, e)| {
                let at = kept_at(path, e)?;
                read_kept(&at).map(|kept| (path, e, at, kept))
            });
            if let Some((path, entry, at, kept)) = hit {
                let ctx = context(format!("{}{}", layout.meta, path), path.clone(), entry.clone());
                match from_kept(kept, ctx).await {
                    Ok(packages) => {
                        return Ok(Some(DirIndex { checked: checked(path, entry), packages }))
                    }
                    Err(e) => {
                        tracing::warn!("ignoring cached index {}: {e}", at.display());
                        let _ = std::fs::remove_file(&at);
                    }
                }
            }
        }
    }
    // apt tries the next compression the Release lists where one is missing (Debian lists an
    // uncompressed `Packages` that is not on the mirrors); the last one missing is the error.
    let mut missing = String::new();
    for (path, entry) in &listed {
        let url = format!("{}{}", layout.meta, path);
        let keep = kept_at(path, entry);
        let ctx = context(url.clone(), path.clone(), entry.clone());
        let mut attempt = 0;
        let parsed = loop {
            let (src, failed) = match client.open_stream(&url).await {
                Ok(Some(opened)) => opened,
                Ok(None) => break None,
                Err(e) if e.is_transient() && attempt < RETRIES => {
                    attempt += 1;
                    Client::backoff(&e, attempt).await;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            match read_streamed(src, failed, ctx.clone(), plain_entry.clone(), keep.clone()).await {
                Ok(parsed) => break Some(parsed),
                Err(e @ RepoError::Http(HttpError::Transfer { .. })) if attempt < RETRIES => {
                    attempt += 1;
                    Client::backoff(&e, attempt).await;
                }
                Err(e) => return Err(e),
            }
        };
        match parsed {
            Some(packages) => {
                return Ok(Some(DirIndex { checked: checked(path, entry), packages }));
            }
            None => {
                tracing::debug!("{url} is missing; trying the next index format, if any");
                missing = url;
            }
        }
    }
    Err(RepoError::IndexMissing { url: missing })
}

/// What the text of the index file `path` (listed as `entry`) is checked against, which names
/// its kept copy and what a fetch ahead read of it: the decompressed index's SHA256 where the
/// Release lists one (`plain`; then the same for every format, all checked against it), else
/// the SHA256 of the file read with its compression after it (`….gz`, `….xz`). The two kinds
/// never name the same thing: a file's bytes taken for an index's text would otherwise be
/// read where a Release lists that file, and its text found to be something else. `None`
/// where the hash is not a SHA256.
fn checked_as(plain: Option<&FileEntry>, path: &str, entry: &FileEntry) -> Option<String> {
    let (sha256, format) = match plain {
        Some(plain) => (&plain.sha256, ""),
        None => {
            let name = path.rsplit('/').next().unwrap_or(path);
            (&entry.sha256, name.strip_prefix("Packages").unwrap_or(name))
        }
    };
    is_sha256(sha256).then(|| format!("{}{format}", sha256.to_ascii_lowercase()))
}

/// The version of the cached indices' form ([`IndexedPackage::to_kept`]): raised whenever
/// [`index::KEPT_FIELDS`] or what is kept of a stanza changes, so that older copies are
/// fetched again.
const KEPT_FORMAT: u32 = 3;

/// Where what was kept of the index whose text was checked as `checked` ([`checked_as`]) is
/// cached.
fn kept_path(cache: &std::path::Path, checked: &str) -> std::path::PathBuf {
    cache.join(format!("{checked}.kept-{KEPT_FORMAT}"))
}

/// A cached index, when the user running this owns it and no one else may write it (a cache
/// directory shared with others is read as empty: [`erdma_limits::kept`]).
fn read_kept(path: &std::path::Path) -> Option<Vec<u8>> {
    use erdma_limits::kept::{self, NotKept};
    match kept::read(path, 2 * MAX_INDEX) {
        Ok(kept) => Some(kept),
        Err(NotKept::Untrusted) => {
            tracing::warn!(
                "ignoring cached index {}: not the user's own, or writable by others",
                path.display()
            );
            None
        }
        Err(NotKept::Missing(_) | NotKept::TooLarge) => None,
    }
}

/// Writes what is kept of an index to `path` whole or not at all.
fn write_kept(path: &std::path::Path, kept: &[u8]) {
    if let Err(e) = erdma_limits::kept::write(path, |f| std::io::Write::write_all(f, kept)) {
        tracing::debug!("not caching {}: {e}", path.display());
    }
}

/// Reads a cached index's packages on the blocking pool.
async fn from_kept(kept: Vec<u8>, ctx: IndexContext) -> Result<Vec<IndexedPackage>, RepoError> {
    tokio::task::spawn_blocking(move || {
        IndexedPackage::from_kept(kept, &ctx.url, &ctx.base, &ctx.origin, &ctx.repo)
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// Reads, checks and parses one index from `src` on the blocking pool (see [`index`]); what
/// is kept of it goes to `keep` once it checked out and parsed.
async fn read_streamed(
    src: Box<dyn Read + Send>,
    failed: Failed,
    ctx: IndexContext,
    plain: Option<FileEntry>,
    keep: Option<std::path::PathBuf>,
) -> Result<Vec<IndexedPackage>, RepoError> {
    tokio::task::spawn_blocking(move || {
        let expect = index::Expect { size: ctx.entry.size, sha256: ctx.entry.sha256.clone() };
        let plain_expect =
            plain.as_ref().map(|p| index::Expect { size: p.size, sha256: p.sha256.clone() });
        let source_failed = || failed.lock().expect("poisoned").clone();
        let plain_name = ctx.file.trim_end_matches(".xz").trim_end_matches(".gz").to_string();
        let bound = index::Bound { max: MAX_INDEX, inflation: ctx.max_inflation };
        let text = index::read_index(
            src,
            &ctx.file,
            &expect,
            plain_expect.as_ref(),
            bound,
            &source_failed,
        )
        .map_err(|e| match e {
            index::StreamError::Source { message } => RepoError::Http(HttpError::Transfer {
                url: ctx.url.clone(),
                reason: message,
                retry: true,
            }),
            index::StreamError::Size { actual } => RepoError::SizeMismatch {
                file: ctx.file.clone(),
                repo: ctx.repo_meta.clone(),
                expected: ctx.entry.size,
                actual,
            },
            index::StreamError::Hash { actual } => RepoError::HashMismatch {
                file: ctx.file.clone(),
                repo: ctx.repo_meta.clone(),
                expected: ctx.entry.sha256.clone(),
                actual,
            },
            index::StreamError::PlainSize { actual } => RepoError::SizeMismatch {
                file: plain_name.clone(),
                repo: ctx.repo_meta.clone(),
                expected: plain.as_ref().map_or(0, |p| p.size),
                actual,
            },
            index::StreamError::PlainHash { actual } => RepoError::HashMismatch {
                file: plain_name.clone(),
                repo: ctx.repo_meta.clone(),
                expected: plain.as_ref().map(|p| p.sha256.clone()).unwrap_or_default(),
                actual,
            },
            index::StreamError::Decompress(source) => {
                RepoError::Decompress { url: ctx.url.clone(), source }
            }
            index::StreamError::Limit(exceeded) => {
                RepoError::Limit { url: ctx.url.clone(), exceeded }
            }
        })?;
        let parsed = IndexedPackage::read_index(text, &ctx.url, &ctx.base, &ctx.origin, &ctx.repo)?;
        if let Some(path) = &keep {
            write_kept(path, &IndexedPackage::to_kept(&parsed));
        }
        Ok(parsed)
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// Fetches `InRelease`, or `Release` and `Release.gpg` when there is no `InRelease`, and
/// returns the URL and the signed text.
async fn fetch_release(
    client: &Client,
    meta: &str,
    keyring: &Keyring,
    prefetched: Option<&Prefetched>,
) -> Result<(String, String), RepoError> {
    let in_release = format!("{meta}InRelease");
    let body = match prefetched.filter(|p| p.url == in_release) {
        Some(p) => Some(p.body.clone()),
        None => get_meta(client, &in_release).await?,
    };
    if let Some(body) = body {
        // A bad InRelease is an error; apt does not fall back to Release then.
        let text = verify_clearsigned_with(&body, keyring, now())
            .map_err(|e| RepoError::from(e).at(&in_release))?;
        return Ok((in_release, text));
    }
    let release = format!("{meta}Release");
    let Some(body) = get_meta(client, &release).await? else {
        return Err(RepoError::NoRelease { url: meta.to_owned() });
    };
    let sig_url = format!("{meta}Release.gpg");
    let Some(sig) = get_meta(client, &sig_url).await? else {
        return Err(RepoError::Unsigned { url: release });
    };
    verify_detached_with(&body, &sig, keyring, now())
        .map_err(|e| RepoError::from(e).at(&release))?;
    let text = String::from_utf8(body).map_err(|_| RepoError::MalformedRelease {
        url: release.clone(),
        reason: "not UTF-8".into(),
    })?;
    Ok((release, text))
}

async fn get_meta(client: &Client, url: &str) -> Result<Option<Vec<u8>>, RepoError> {
    Ok(client.get(url, MAX_META).await?)
}

/// What [`read_streamed`] needs to know, owned so it can run on the blocking pool.
#[derive(Clone)]
struct IndexContext {
    url: String,
    /// Path relative to the Release file, as the Release names it.
    file: String,
    repo_meta: String,
    base: String,
    origin: String,
    repo: String,
    entry: FileEntry,
    /// `--max-inflation`.
    max_inflation: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::testkit::*;

    use sha2::{Digest as _, Sha256};

    use std::time::Duration;
    use std::time::Instant;

    #[test]
    fn layouts() {
        let spec = |url: &str, suite: &str, comps: &[&str]| RepoSpec {
            url: url.into(),
            suite: suite.into(),
            components: comps.iter().map(|c| c.to_string()).collect(),
            arch: "amd64".into(),
            keyring: vec![],
        };
        let l = Layout::new(&spec("http://m/debian/", "bookworm", &["main", "contrib"])).unwrap();
        assert_eq!(l.meta, "http://m/debian/dists/bookworm/");
        assert_eq!(l.index_dirs, ["main/binary-amd64/", "contrib/binary-amd64/"]);
        assert_eq!(l.display, "http://m/debian bookworm");
        let l = Layout::new(&spec("http://m/erdma", "jammy/erdma", &["main"])).unwrap();
        assert_eq!(l.meta, "http://m/erdma/dists/jammy/erdma/");
        for (suite, meta) in
            [("/", "http://m/r/"), ("./", "http://m/r/"), ("sub/", "http://m/r/sub/")]
        {
            let l = Layout::new(&spec("http://m/r", suite, &[])).unwrap();
            assert_eq!((l.meta.as_str(), l.flat), (meta, true), "{suite}");
            assert_eq!(l.index_dirs, [""]);
        }
        assert!(Layout::new(&spec("http://m/r", "sub/", &["main"])).is_err());
        assert!(Layout::new(&spec("http://m/r", "bookworm", &[])).is_err());
        assert!(Layout::new(&spec("http://m/r", "../x", &["main"])).is_err());
        assert!(Layout::new(&spec("http://m/r", "bookworm", &["../main"])).is_err());
    }

    // -----------------------------------------------------------------------------------
    // Repositories over HTTP
    // -----------------------------------------------------------------------------------

    #[tokio::test]
    async fn nested_and_flat_repositories_over_http() {
        let fx = Fixture::new();
        fx.publish(
            "dists/bookworm/erdma",
            "main/binary-amd64",
            &[".xz", ""],
            "pool/main/e/erdma/",
            Some("main"),
            None,
        );
        fx.publish("flat", "", &[".gz"], "flat/", None, None);
        let server = HttpServer::start(fx.root.path());
        let client = client();

        // Nested suite (Alibaba's layout); a trailing slash on the URL is fine.
        let spec = fx.spec(&format!("{}/", server.url), "bookworm/erdma", &["main"]);
        let index =
            fetch_index(&client, &spec).await.unwrap_or_else(|e| panic!("{}", err_chain(&e)));
        assert_eq!(index.packages.len(), 2);
        let tools = &index.packages[0];
        assert_eq!(tools.paragraph().unwrap().get("Package"), Some("erdma-tools"));
        assert_eq!(tools.paragraph().unwrap().get("version"), Some("1.0-1"));
        assert_eq!(
            tools.url(),
            format!("{}/pool/main/e/erdma/erdma-tools_1.0-1_amd64.deb", server.url)
        );
        assert_eq!(tools.sha256(), DEB_SHA);
        assert_eq!(tools.size(), 1234);
        assert_eq!(tools.origin(), "erdma-test");
        assert_eq!(tools.repo(), format!("{} bookworm/erdma", server.url));
        assert_eq!(index.packages[1].sha256(), "ab".repeat(32));

        // What the Release does not have is named, with what it has.
        let mut wrong = spec.clone();
        wrong.components = vec!["contrib".into()];
        let e = fetch_index(&client, &wrong).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "repository {}/dists/bookworm/erdma/ has no component `contrib` (has: main)",
                server.url
            )
        );
        let mut wrong = spec.clone();
        wrong.arch = "s390x".into();
        let e = fetch_index(&client, &wrong).await.unwrap_err();
        assert!(e.to_string().contains("has no architecture `s390x` (has: amd64, arm64)"), "{e}");

        // Flat repository: `deb URL flat/`, only Packages.gz, Filename relative to URL.
        let flat = fx.spec(&server.url, "flat/", &[]);
        let index =
            fetch_index(&client, &flat).await.unwrap_or_else(|e| panic!("{}", err_chain(&e)));
        assert_eq!(index.packages.len(), 2);
        assert_eq!(
            index.packages[1].url(),
            format!("{}/flat/liberdma1_1.0-1_amd64.deb", server.url)
        );

        // A suite that is not there.
        let e = fetch_index(&client, &fx.spec(&server.url, "trixie", &["main"])).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("no InRelease or Release at {}/dists/trixie/", server.url)
        );
        assert!(!e.is_unreachable());
    }

    /// `fx`'s packages published as `bookworm main` in `formats` and served over HTTP: the
    /// metadata directory, the server, and the spec naming it.
    fn served_bookworm(
        fx: &Fixture,
        formats: &[&str],
    ) -> (std::path::PathBuf, HttpServer, RepoSpec) {
        let meta = fx.publish(
            "dists/bookworm",
            "main/binary-amd64",
            formats,
            "pool/main/",
            Some("main"),
            None,
        );
        let server = HttpServer::start(fx.root.path());
        let spec = fx.spec(&server.url, "bookworm", &["main"]);
        (meta, server, spec)
    }

    #[tokio::test]
    async fn tampering_and_fallbacks_over_http() {
        let fx = Fixture::new();
        let (meta, server, spec) = served_bookworm(&fx, &[".xz"]);
        let client = client();
        let meta_url = format!("{}/dists/bookworm/", server.url);
        fetch_index(&client, &spec).await.unwrap();

        // Packages.xz changed after signing: same size, different bytes.
        let xz = meta.join("main/binary-amd64/Packages.xz");
        let good = std::fs::read(&xz).unwrap();
        let mut bad = good.clone();
        let mid = bad.len() / 2;
        bad[mid] ^= 0xff;
        std::fs::write(&xz, &bad).unwrap();
        let e = fetch_index(&client, &spec).await.unwrap_err();
        let want = format!(
            "hash mismatch for main/binary-amd64/Packages.xz from {meta_url}: Release says sha256:{}, got sha256:{}",
            hex::encode(Sha256::digest(&good)),
            hex::encode(Sha256::digest(&bad))
        );
        assert_eq!(e.to_string(), want);
        // A longer file is caught by its size, without reading it all.
        let mut longer = good.clone();
        longer.extend([0u8; 4096]);
        std::fs::write(&xz, &longer).unwrap();
        let e = fetch_index(&client, &spec).await.unwrap_err();
        assert!(
            e.to_string().starts_with("size mismatch for main/binary-amd64/Packages.xz"),
            "{e}"
        );
        std::fs::write(&xz, &good).unwrap();

        // InRelease tampered: a bad signature, and no fallback to Release.
        let in_release = std::fs::read_to_string(meta.join("InRelease")).unwrap();
        let forged = in_release.replace("Origin: erdma-test", "Origin: erdma-evil");
        assert_ne!(forged, in_release);
        std::fs::write(meta.join("InRelease"), forged).unwrap();
        let e = fetch_index(&client, &spec).await.unwrap_err();
        assert_eq!(e.to_string(), format!("bad signature on {meta_url}InRelease"));
        assert!(!e.is_unreachable());

        // InRelease signed by a key outside the keyring.
        let other = fx.gpg.gen_key("mallory@example.org", "ed25519", "sign", "never", &[]);
        let release = std::fs::read(meta.join("Release")).unwrap();
        std::fs::write(meta.join("InRelease"), fx.gpg.clearsign(&other, &release)).unwrap();
        let e = fetch_index(&client, &spec).await.unwrap_err();
        let msg = err_chain(&e);
        assert!(msg.starts_with(&format!("bad signature on {meta_url}InRelease")), "{msg}");
        assert!(msg.contains("not in the keyring"), "{msg}");

        // No InRelease: Release + Release.gpg.
        std::fs::remove_file(meta.join("InRelease")).unwrap();
        let index =
            fetch_index(&client, &spec).await.unwrap_or_else(|e| panic!("{}", err_chain(&e)));
        assert_eq!(index.packages.len(), 2);

        // Release.gpg over other content.
        std::fs::write(meta.join("Release.gpg"), fx.gpg.detach_sign(&fx.fpr, b"other", true))
            .unwrap();
        let e = fetch_index(&client, &spec).await.unwrap_err();
        assert_eq!(e.to_string(), format!("bad signature on {meta_url}Release"));

        // Release without Release.gpg: never used unsigned.
        std::fs::remove_file(meta.join("Release.gpg")).unwrap();
        let e = fetch_index(&client, &spec).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{meta_url}Release is not signed: there is no Release.gpg beside it")
        );

        // Neither.
        std::fs::remove_file(meta.join("Release")).unwrap();
        let e = fetch_index(&client, &spec).await.unwrap_err();
        assert_eq!(e.to_string(), format!("no InRelease or Release at {meta_url}"));

        // Properly signed but expired metadata.
        let past = now() - 2 * 86_400;
        let header = format!(
            "Origin: erdma-test\nSuite: bookworm\nDate: {}\nValid-Until: {}\nArchitectures: amd64\nComponents: main\n",
            rfc2822(past),
            rfc2822(past + 86_400)
        );
        fx.publish(
            "dists/bookworm",
            "main/binary-amd64",
            &[".xz"],
            "pool/main/",
            Some("main"),
            Some(&header),
        );
        let e = fetch_index(&client, &spec).await.unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "release file {meta_url}InRelease has expired (valid until "
            )),
            "{e}"
        );

        // Release lists only an index the server does not have.
        let header = "Origin: erdma-test\nSuite: bookworm\nComponents: main\n";
        fx.publish(
            "dists/bookworm",
            "main/binary-amd64",
            &[".xz"],
            "pool/main/",
            Some("main"),
            Some(header),
        );
        std::fs::remove_file(&xz).unwrap();
        let e = fetch_index(&client, &spec).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{meta_url}main/binary-amd64/Packages.xz is listed in the Release file but the server does not have it")
        );
    }

    #[tokio::test]
    async fn a_cached_index_serves_while_the_signed_release_lists_it() {
        use std::os::unix::fs::PermissionsExt;
        let fx = Fixture::new();
        let meta = fx.publish(
            "dists/bookworm",
            "main/binary-amd64",
            &[".xz", ""],
            "pool/main/",
            Some("main"),
            None,
        );
        let server = HttpServer::start(fx.root.path());
        let client = client();
        let spec = fx.spec(&server.url, "bookworm", &["main"]);
        let cache = tempfile::tempdir().unwrap();
        let fetch = || fetch_index_cached(&client, &spec, Some(cache.path()));
        let summary = |index: &RepoIndex| -> Vec<(String, String, String)> {
            index.packages.iter().map(|p| (p.name().to_owned(), p.sha256(), p.url())).collect()
        };
        let first = summary(&fetch().await.unwrap());
        assert_eq!(first.len(), 2);

        // Kept: the fields the resolver reads, named by the SHA256 the Release gives the
        // decompressed index.
        let idx = meta.join("main/binary-amd64");
        let plain = std::fs::read_to_string(idx.join("Packages")).unwrap();
        let kept = cache.path().join(format!("{}.kept-3", hex::encode(Sha256::digest(&plain))));
        let bytes = std::fs::read(&kept).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("Package: erdma-tools\nVersion: 1.0-1\n"), "{text}");
        assert!(!text.contains("Description"), "{text}");

        // With the index gone from the server, the Release (still fetched and verified) names
        // the kept copy: the same packages, nothing downloaded or hashed again.
        std::fs::remove_file(idx.join("Packages.xz")).unwrap();
        std::fs::remove_file(idx.join("Packages")).unwrap();
        assert_eq!(summary(&fetch().await.unwrap()), first);

        // A copy others may write is not trusted: the index is fetched, and is missing.
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o664)).unwrap();
        let e = fetch().await.unwrap_err();
        assert!(matches!(e, RepoError::IndexMissing { .. }), "{e}");
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(summary(&fetch().await.unwrap()), first);

        // A damaged copy is dropped, and the index fetched again.
        std::fs::write(&kept, &bytes[..bytes.len() - 1]).unwrap();
        let e = fetch().await.unwrap_err();
        assert!(matches!(e, RepoError::IndexMissing { .. }), "{e}");
        assert!(!kept.exists());

        // A new Release with another index: that one is downloaded and kept beside.
        let changed = publish_sizes_changed(&fx, &meta, &plain);
        let index = fetch().await.unwrap();
        assert_eq!(index.packages[1].size(), 100);
        assert!(cache
            .path()
            .join(format!("{}.kept-3", hex::encode(Sha256::digest(&changed))))
            .is_file());
    }

    /// Publishes, in place of `plain`'s main index under `meta`, the same with liberdma1's
    /// size 100 (not 99), under a new signed Release; returns the new index's text.
    fn publish_sizes_changed(fx: &Fixture, meta: &std::path::Path, plain: &str) -> String {
        let idx = meta.join("main/binary-amd64");
        let changed = plain.replace("Size: 99", "Size: 100");
        assert_ne!(changed, plain);
        std::fs::write(idx.join("Packages"), &changed).unwrap();
        std::fs::write(idx.join("Packages.xz"), compress("Packages.xz", changed.as_bytes()))
            .unwrap();
        let release = hand_release(
            meta,
            &format!(
                "Origin: erdma-test\nSuite: bookworm\nCodename: bookworm\nDate: {}\n\
                 Architectures: amd64\nComponents: main\n",
                rfc2822(now())
            ),
        );
        fx.sign_release(meta, release.as_bytes());
        changed
    }

    /// Fetched ahead without a key: the index is kept, and read, and the build proper,
    /// verifying the same `InRelease` bytes, takes what was read with nothing fetched or read
    /// again, only where the verified Release lists the hash it was checked against and for
    /// the same archive. The bytes fetched ahead are verified as a fresh download is:
    /// tampered with, they are refused.
    #[tokio::test]
    async fn fetched_ahead_then_verified_before_use() {
        let fx = Fixture::new();
        let meta = fx.publish(
            "dists/bookworm",
            "main/binary-amd64",
            &[".xz", ""],
            "pool/main/",
            Some("main"),
            None,
        );
        let server = HttpServer::start(fx.root.path());
        // The same files at another address: another archive to the build.
        let elsewhere = HttpServer::start(fx.root.path());
        let client = client();
        let spec = fx.spec(&server.url, "bookworm", &["main"]);
        let cache = tempfile::tempdir().unwrap();
        let keyless = RepoSpec { keyring: Vec::new(), ..spec.clone() };
        let ahead = prefetch_index(&client, &keyless, cache.path()).await.unwrap();
        let kept: Vec<_> = std::fs::read_dir(cache.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(kept.len(), 1, "{kept:?}");
        let idx = meta.join("main/binary-amd64");
        let plain = std::fs::read_to_string(idx.join("Packages")).unwrap();
        let sha256 = hex::encode(Sha256::digest(&plain));
        assert_eq!(kept[0], format!("{sha256}.kept-3"));
        // Read under the hash of the text it checked, which names the kept copy.
        assert_eq!(ahead.read.len(), 1);
        assert_eq!(ahead.read[0].checked.as_deref(), Some(sha256.as_str()));
        assert_eq!(ahead.read[0].packages.len(), 2);
        // Once kept, a fetch ahead reads nothing again.
        let again = prefetch_index(&client, &keyless, cache.path()).await.unwrap();
        assert!(again.read.is_empty());
        let summary = |index: &RepoIndex| -> Vec<(String, u64, String, String)> {
            let p = &index.packages;
            p.iter().map(|p| (p.name().into(), p.size(), p.url(), p.origin().into())).collect()
        };
        let first = summary(&fetch_index_cached(&client, &spec, Some(cache.path())).await.unwrap());
        assert_eq!(first[1].1, 99);
        assert!(first[1].2.starts_with(&server.url), "{first:?}");

        // Read ahead from the same text at another archive: not taken (its packages would be
        // downloaded from there); the kept copy is read for this one.
        let cache_elsewhere = tempfile::tempdir().unwrap();
        let keyless_elsewhere = fx.spec(&elsewhere.url, "bookworm", &["main"]);
        let keyless_elsewhere = RepoSpec { keyring: Vec::new(), ..keyless_elsewhere };
        let there = prefetch_index(&client, &keyless_elsewhere, cache_elsewhere.path()).await;
        let there = there.unwrap();
        assert_eq!(there.read[0].checked.as_deref(), Some(sha256.as_str()));
        let mixed = Prefetched { read: there.read, ..ahead.clone() };
        let index = fetch_index_prefetched(&client, &spec, Some(cache.path()), Some(mixed));
        assert_eq!(summary(&index.await.unwrap()), first);

        // Read from another text than the one the verified Release lists: not taken.
        let in_release = std::fs::read(meta.join("InRelease")).unwrap();
        publish_sizes_changed(&fx, &meta, &plain);
        let newer = prefetch_index(&client, &keyless, cache.path()).await.unwrap();
        assert_eq!(newer.read[0].packages[1].size(), 100);
        let stale = Prefetched { read: newer.read, ..ahead.clone() };
        let index = fetch_index_prefetched(&client, &spec, Some(cache.path()), Some(stale));
        assert_eq!(summary(&index.await.unwrap()), first);

        // The server loses everything, and the kept copy is gone: a clone of what was fetched
        // ahead holds no indices, so the index is missing; what was read ahead serves.
        for f in ["InRelease", "Release", "Release.gpg"] {
            let _ = std::fs::remove_file(meta.join(f));
        }
        for f in ["Packages", "Packages.xz"] {
            std::fs::remove_file(idx.join(f)).unwrap();
        }
        std::fs::remove_file(cache.path().join(&kept[0])).unwrap();
        let e = fetch_index_prefetched(&client, &spec, Some(cache.path()), Some(ahead.clone()))
            .await
            .unwrap_err();
        assert!(matches!(e, RepoError::IndexMissing { .. }), "{e}");
        let index = fetch_index_prefetched(&client, &spec, Some(cache.path()), Some(ahead)).await;
        assert_eq!(summary(&index.unwrap()), first);

        // Another repository's InRelease is not taken for this one's.
        let url = format!("{}/dists/trixie/InRelease", server.url);
        let other = Prefetched { url, body: in_release, read: Vec::new() };
        let e = fetch_index_prefetched(&client, &spec, Some(cache.path()), Some(other.clone()))
            .await
            .unwrap_err();
        assert!(matches!(e, RepoError::NoRelease { .. }), "{e}");
        // Bytes changed after the signature (a Release naming other indices): refused.
        let text = String::from_utf8(other.body).unwrap();
        let forged = text.replacen("Origin: erdma-test", "Origin: erdma-tesT", 1);
        assert_ne!(forged, text);
        let url = format!("{}/dists/bookworm/InRelease", server.url);
        let forged = Prefetched { url, body: forged.into_bytes(), read: Vec::new() };
        let e = fetch_index_prefetched(&client, &spec, Some(cache.path()), Some(forged))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("signature"), "{e}");
    }

    /// Where the Release lists no uncompressed index, a text is named by the hash of the file
    /// it came from and that file's compression, never by the bare hash an uncompressed
    /// index's text is named by: a copy kept, or read ahead, under the bare hash of the file
    /// (as a fetch ahead told by a hostile Release that the file's bytes are an uncompressed
    /// index would have it) is not taken for the file's text.
    #[tokio::test]
    async fn a_file_s_hash_never_names_an_index_s_text() {
        let fx = Fixture::new();
        let (meta, _server, spec) = served_bookworm(&fx, &[".xz"]);
        let client = client();
        let xz = std::fs::read(meta.join("main/binary-amd64/Packages.xz")).unwrap();
        let file_sha = hex::encode(Sha256::digest(&xz));
        let cache = tempfile::tempdir().unwrap();
        let keyless = RepoSpec { keyring: Vec::new(), ..spec.clone() };
        let ahead = prefetch_index(&client, &keyless, cache.path()).await.unwrap();
        assert_eq!(ahead.read[0].checked.as_deref(), Some(format!("{file_sha}.xz").as_str()));
        assert!(cache.path().join(format!("{file_sha}.xz.kept-3")).is_file());

        // An empty index kept, and read ahead, under the file's bare hash: neither is taken.
        let other = tempfile::tempdir().unwrap();
        let planted = other.path().join(format!("{file_sha}.kept-3"));
        erdma_limits::kept::write(&planted, |f| {
            std::io::Write::write_all(f, &IndexedPackage::to_kept(&[]))
        })
        .unwrap();
        let index = fetch_index_cached(&client, &spec, Some(other.path())).await.unwrap();
        assert_eq!(index.packages.len(), 2);
        let empty = DirIndex { checked: Some(file_sha.clone()), packages: Vec::new() };
        let planted = Prefetched { read: vec![empty], ..ahead.clone() };
        let index = fetch_index_prefetched(&client, &spec, None, Some(planted)).await.unwrap();
        assert_eq!(index.packages.len(), 2);
        // What was read under the file's hash and compression is taken, the mirror gone.
        std::fs::remove_file(meta.join("main/binary-amd64/Packages.xz")).unwrap();
        let index = fetch_index_prefetched(&client, &spec, None, Some(ahead)).await.unwrap();
        assert_eq!(index.packages.len(), 2);
        // And what was kept under that name is read back by a later build, the mirror's file
        // still gone.
        let index = fetch_index_cached(&client, &spec, Some(cache.path())).await.unwrap();
        assert_eq!(index.packages.len(), 2);
    }

    #[tokio::test]
    async fn packages_without_checksums_are_malformed() {
        let fx = Fixture::new();
        let meta = fx.root.path().join("dists/bookworm");
        let idx = meta.join("main/binary-amd64");
        std::fs::create_dir_all(&idx).unwrap();
        std::fs::write(
            idx.join("Packages"),
            "Package: a\nVersion: 1\nFilename: pool/a.deb\nSize: 1\n",
        )
        .unwrap();
        let release = hand_release(&meta, "Origin: x\nComponents: main\n");
        fx.sign_release(&meta, release.as_bytes());
        let server = HttpServer::start(fx.root.path());
        let e =
            fetch_index(&client(), &fx.spec(&server.url, "bookworm", &["main"])).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "malformed Packages index {}/dists/bookworm/main/binary-amd64/Packages: package `a` has no SHA256 field",
                server.url
            )
        );
    }

    #[tokio::test]
    async fn unreachable_server_is_reported_as_such() {
        // Nothing listens on port 1 (a port bound to 0, by this or another test, is never
        // given it); every retry is refused.
        let port = 1;
        let spec = RepoSpec {
            url: format!("http://127.0.0.1:{port}"),
            suite: "bookworm".into(),
            components: vec!["main".into()],
            arch: "amd64".into(),
            keyring: Gpg::new_key_for_tests(),
        };
        let started = Instant::now();
        let e = fetch_index(&client(), &spec).await.unwrap_err();
        assert!(e.is_unreachable(), "{e:?}");
        assert!(
            e.to_string()
                .starts_with(&format!("fetching http://127.0.0.1:{port}/dists/bookworm/InRelease")),
            "{e}"
        );
        // Three retries with backoff happened.
        assert!(
            started.elapsed() >= Duration::from_millis(500 + 1000 + 2000),
            "{:?}",
            started.elapsed()
        );
    }

    impl Gpg {
        fn new_key_for_tests() -> Vec<u8> {
            let gpg = Gpg::new();
            let fpr = gpg.gen_key("k@example.org", "ed25519", "sign", "never", &[]);
            gpg.export(&fpr, false)
        }
    }

    // -----------------------------------------------------------------------------------
    // The real Debian archive
    // -----------------------------------------------------------------------------------

    /// The first `deb` URI configured for `bookworm` in /etc/apt/sources.list.d/*.sources.
    fn configured_debian_mirror() -> Option<String> {
        let mut names: Vec<_> = std::fs::read_dir("/etc/apt/sources.list.d")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "sources"))
            .collect();
        names.sort();
        names.into_iter().find_map(|p| {
            let text = std::fs::read_to_string(p).ok()?;
            parse_deb822_sources(&text).into_iter().find_map(|e| {
                let wanted =
                    e.types.iter().any(|t| t == "deb") && e.suites.iter().any(|s| s == "bookworm");
                wanted.then(|| e.uris.first().cloned()).flatten()
            })
        })
    }

    #[tokio::test]
    async fn fetches_bookworm_main_needs_debian_archive() {
        let ci = std::env::var_os("CI").is_some();
        let skip = |why: String| {
            assert!(!ci, "CI is set, so this test may not be skipped: {why}");
            eprintln!("skipping fetches_bookworm_main_needs_debian_archive: {why}");
        };
        let Some(url) = configured_debian_mirror() else {
            return skip("no bookworm mirror in /etc/apt/sources.list.d/*.sources".into());
        };
        let keyring = std::fs::read("/usr/share/keyrings/debian-archive-keyring.gpg")
            .expect("reading /usr/share/keyrings/debian-archive-keyring.gpg");
        let spec = RepoSpec {
            url,
            suite: "bookworm".into(),
            components: vec!["main".into()],
            arch: "amd64".into(),
            keyring,
        };
        let client = Client::new(erdma_http::Timeouts {
            connect: Duration::from_secs(15),
            ..Default::default()
        });
        let index = match fetch_index(&client, &spec).await {
            Ok(i) => i,
            Err(e) if e.is_unreachable() => return skip(err_chain(&e)),
            Err(e) => panic!("{}", err_chain(&e)),
        };
        assert!(index.packages.len() > 50_000, "{} packages", index.packages.len());
        let ibverbs: Vec<_> = index.packages.iter().filter(|p| p.name() == "libibverbs1").collect();
        assert!(!ibverbs.is_empty(), "libibverbs1 not in bookworm main");
        let p = ibverbs[0];
        let version = p.version().unwrap();
        assert!(version.starts_with("44."), "libibverbs1 {version}");
        assert!(p.url().starts_with(&spec.url) && p.url().ends_with("_amd64.deb"), "{}", p.url());
        assert!(p.url().contains("/pool/main/r/rdma-core/"), "{}", p.url());
        assert_eq!(p.sha256().len(), 64);
        assert!(p.size() > 0);
        assert_eq!(p.origin(), "Debian");
        assert_eq!(p.repo(), format!("{} bookworm", spec.url.trim_end_matches('/')));
    }
}
