//! Real Debian base images (12 bookworm, 13 trixie), made once with `debootstrap
//! --variant=minbase` from the Debian mirror this machine's apt uses, and cached across test runs:
//! amd64, and arm64 under qemu-user-static ([`base_for`]).
//!
//! The mirror is read at run time from the host's apt sources (deb822 `URIs:` in
//! `/etc/apt/sources.list.d/*.sources`, else one-line `deb` entries in
//! `/etc/apt/sources.list`), never written into the source tree.
//!
//! Cache layout (root: `$ERDMA_TEST_CACHE`, else `<cargo target dir>/erdma-test-cache`):
//!
//! ```text
//! debian12-minbase/rootfs/          the debootstrapped tree, cleaned (read-only for tests)
//! debian12-minbase/oci/             OCI layout, tag `latest`, one gzip layer
//! debian12-minbase/build-info.json  mirror, timings
//! debian12-minbase-arm64/           the same for arm64 (linux/arm64/v8)
//! debian12-minbase.lock             flock(2) held while building
//! ```
//!
//! nextest runs each test in its own process, so the build is guarded by an exclusive file
//! lock and written to `NAME.tmp-PID` first, then renamed: a directory under its final name
//! is complete. Remove the cache directory to rebuild.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::fixture::{self, OciFixture};

/// A Debian release a base is made from.
#[derive(Debug, Clone, Copy)]
pub struct Release {
    pub suite: &'static str,
    /// The cache directory's name.
    pub dir: &'static str,
}
pub const BOOKWORM: Release = Release { suite: "bookworm", dir: "debian12-minbase" };
pub const TRIXIE: Release = Release { suite: "trixie", dir: "debian13-minbase" };
/// The suite whose mirror is looked up in the host's apt sources (this machine's own).
pub const SUITE: &str = BOOKWORM.suite;
/// `PATH` of the official `debian:12` and `debian:13` images.
pub const DEBIAN_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const BASE_NAME: &str = BOOKWORM.dir;

/// Root of the test cache: `$ERDMA_TEST_CACHE`, else `erdma-test-cache` in Cargo's target
/// directory (the parent of `CARGO_TARGET_TMPDIR`, so `CARGO_TARGET_DIR` is honoured).
pub fn cache_root() -> PathBuf {
    match std::env::var_os("ERDMA_TEST_CACHE") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .expect("CARGO_TARGET_TMPDIR has a parent")
            .join("erdma-test-cache"),
    }
}

/// `cache_root()/name`, built by `build(tmp)` the first time: `build` fills `tmp` (an empty
/// directory next to the final one), which is then renamed into place. Concurrent callers in
/// other processes wait on `cache_root()/name.lock`. Leftovers of interrupted builds
/// (`name.tmp-*`) are removed first, after unmounting anything still mounted below them.
pub fn cached_dir(name: &str, build: impl FnOnce(&Path)) -> PathBuf {
    let root = cache_root();
    let dest = root.join(name);
    if dest.is_dir() {
        return dest;
    }
    fs::create_dir_all(&root).unwrap_or_else(|e| panic!("create {}: {e}", root.display()));
    let _lock = lock_file(&root.join(format!("{name}.lock")));
    if dest.is_dir() {
        return dest;
    }
    remove_stale_tmp(&root, name);
    let tmp = root.join(format!("{name}.tmp-{}", std::process::id()));
    fs::create_dir_all(&tmp).unwrap();
    build(&tmp);
    fs::rename(&tmp, &dest)
        .unwrap_or_else(|e| panic!("rename {} to {}: {e}", tmp.display(), dest.display()));
    dest
}

/// An exclusive `flock` on `path` (created if needed), released when the file is dropped.
pub fn lock_file(path: &Path) -> File {
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open lock {}: {e}", path.display()));
    f.lock().unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
    f
}

fn remove_stale_tmp(root: &Path, name: &str) {
    let prefix = format!("{name}.tmp-");
    for e in fs::read_dir(root).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let p = e.path();
            unmount_below(&p);
            let _ = fs::remove_dir_all(&p);
        }
    }
}

/// Lazily unmounts every mount point at or below `dir` (deepest first): an interrupted
/// debootstrap leaves `proc` and `sys` mounted in its target.
pub fn unmount_below(dir: &Path) {
    let Ok(dir) = dir.canonicalize() else { return };
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut points: Vec<PathBuf> = mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        // /proc/self/mounts escapes blanks as \040; our paths have none.
        .map(PathBuf::from)
        .filter(|p| p.starts_with(&dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in points {
        let _ = Command::new("umount").arg("-l").arg(&p).status();
    }
}

/// The Debian mirror the host's apt uses for bookworm, e.g. `http://HOST/debian`: the first
/// `URIs:` of a deb822 stanza in `/etc/apt/sources.list.d/*.sources` (files in name order)
/// whose `Suites:` has `bookworm`, else its first `URIs:` at all, else the first one-line
/// `deb` entry of `/etc/apt/sources.list`.
pub fn debian_mirror() -> Option<String> {
    let mut first_any = None;
    for (uris, suites) in host_stanzas() {
        let Some(uri) = uris.first() else { continue };
        if suites.iter().any(|s| s == SUITE) {
            return Some(uri.trim_end_matches('/').to_string());
        }
        first_any.get_or_insert_with(|| uri.trim_end_matches('/').to_string());
    }
    if first_any.is_some() {
        return first_any;
    }
    let list = fs::read_to_string("/etc/apt/sources.list").ok()?;
    list.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        if words.next()? != "deb" {
            return None;
        }
        let mut w = words.next()?;
        if w.starts_with('[') {
            // `[opt=val ...]` options.
            while !w.ends_with(']') {
                w = words.next()?;
            }
            w = words.next()?;
        }
        Some(w.trim_end_matches('/').to_string())
    })
}

/// The first `URIs:` of the host's deb822 stanza that lists `suite` (e.g. `bookworm-security`,
/// served from another path than the main archive).
pub fn mirror_for_suite(suite: &str) -> Option<String> {
    host_stanzas()
        .into_iter()
        .find(|(_, suites)| suites.iter().any(|s| s == suite))
        .and_then(|(uris, _)| uris.first().map(|u| u.trim_end_matches('/').to_string()))
}

/// `(URIs, Suites)` of the enabled `Types: deb` stanzas of the host's
/// `/etc/apt/sources.list.d/*.sources`, files in name order.
fn host_stanzas() -> Vec<(Vec<String>, Vec<String>)> {
    let mut files: Vec<PathBuf> = fs::read_dir("/etc/apt/sources.list.d")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sources"))
        .collect();
    files.sort();
    files
        .iter()
        .filter_map(|f| fs::read_to_string(f).ok())
        .flat_map(|t| deb822_stanzas(&t))
        .filter(|(_, _, enabled)| *enabled)
        .map(|(uris, suites, _)| (uris, suites))
        .collect()
}

/// `(URIs, Suites, Enabled)` of each stanza of a deb822 sources file with `Types: deb`.
fn deb822_stanzas(text: &str) -> Vec<(Vec<String>, Vec<String>, bool)> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let mut types = Vec::new();
        let mut uris = Vec::new();
        let mut suites = Vec::new();
        let mut enabled = true;
        for line in stanza.lines() {
            if line.starts_with('#') {
                continue;
            }
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let vals = || v.split_whitespace().map(str::to_string).collect::<Vec<_>>();
            match k.trim().to_ascii_lowercase().as_str() {
                "types" => types = vals(),
                "uris" => uris = vals(),
                "suites" => suites = vals(),
                "enabled" => enabled = !v.trim().eq_ignore_ascii_case("no"),
                _ => {}
            }
        }
        if types.iter().any(|t| t == "deb") {
            out.push((uris, suites, enabled));
        }
    }
    out
}

/// Whether [`debian12_base`] is cached already, or can be built here (root, debootstrap, a
/// mirror in the host's apt sources). Use with [`super::require`]:
/// `if !support::require(support::debian::can_build_base(), support::debian::NEEDS) { return; }`
/// or simply `if !support::debian::require_base() { return; }`.
pub fn can_build_base() -> bool {
    can_build_base_for(BOOKWORM, AMD64)
}

pub const NEEDS: &str =
    "a Debian 12 base: root, debootstrap and a Debian mirror in /etc/apt/sources.list.d (run scripts/setup), or a filled ERDMA_TEST_CACHE";

#[track_caller]
pub fn require_base() -> bool {
    super::require(can_build_base(), NEEDS)
}

/// The real Debian 12 minbase image (OCI layout, tag `latest`, one gzip layer, `Env` PATH,
/// `Cmd ["bash"]`), built on first use (debootstrap: about a minute) and cached.
///
/// The layout lives in the shared cache: treat it as read-only (use
/// [`debian12_base_copy`] for a test that modifies its input).
pub fn debian12_base() -> OciFixture {
    base(BOOKWORM)
}

/// The minbase image of `rel`, as [`debian12_base`] is Debian 12's.
pub fn base(rel: Release) -> OciFixture {
    base_for(rel, AMD64)
}

/// A Debian architecture a base is made for, with the image platform it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arch {
    /// Debian's name (`debootstrap --arch`).
    pub debian: &'static str,
    /// The image config's `architecture` and `variant`.
    pub oci: &'static str,
    pub variant: Option<&'static str>,
    /// The binfmt_misc handler that runs its binaries here (`None`: the host's own).
    pub binfmt: Option<&'static str>,
    /// The multiarch triplet of its library directories.
    pub triplet: &'static str,
}
pub const AMD64: Arch = Arch {
    debian: "amd64",
    oci: "amd64",
    variant: None,
    binfmt: None,
    triplet: "x86_64-linux-gnu",
};
/// Made under qemu-user-static (`scripts/setup` registers the qemu-aarch64 handler).
pub const ARM64: Arch = Arch {
    debian: "arm64",
    oci: "arm64",
    variant: Some("v8"),
    binfmt: Some("qemu-aarch64"),
    triplet: "aarch64-linux-gnu",
};

impl Arch {
    /// The cache directory of `rel`'s base for this architecture: amd64 keeps `rel.dir`.
    fn dir(&self, rel: Release) -> String {
        if self.binfmt.is_none() {
            rel.dir.to_string()
        } else {
            format!("{}-{}", rel.dir, self.debian)
        }
    }

    pub fn platform(&self) -> fixture::Platform {
        fixture::Platform {
            architecture: self.oci.into(),
            variant: self.variant.map(str::to_string),
        }
    }

    /// Whether this machine runs the architecture's binaries: its own, or through an enabled
    /// binfmt_misc handler (with the F flag, so that it works in a chroot and in containers).
    pub fn runs_here(&self) -> bool {
        match self.binfmt {
            None => true,
            Some(h) => {
                fs::read_to_string(Path::new("/proc/sys/fs/binfmt_misc").join(h)).is_ok_and(|t| {
                    t.lines().next() == Some("enabled")
                        && t.lines().any(|l| l.starts_with("flags:") && l.contains('F'))
                })
            }
        }
    }
}

/// The minbase image of `rel` for `arch` (cached as [`base`]'s, in `DIR-ARCH` for a foreign
/// architecture: debootstrap runs its second stage under qemu-user-static, a few minutes).
pub fn base_for(rel: Release, arch: Arch) -> OciFixture {
    let dir = cached_dir(&arch.dir(rel), |tmp| build_base(tmp, rel.suite, arch));
    fixture::read_fixture(&dir.join("oci"), fixture::DEFAULT_TAG)
}

/// Whether [`base_for`] is cached already, or can be built here (as [`can_build_base`], and
/// the architecture's binaries run).
pub fn can_build_base_for(rel: Release, arch: Arch) -> bool {
    cache_root().join(arch.dir(rel)).is_dir()
        || (super::is_root()
            && super::have("debootstrap")
            && debian_mirror().is_some()
            && arch.runs_here())
}

#[track_caller]
pub fn require_base_for(rel: Release, arch: Arch) -> bool {
    super::require(
        can_build_base_for(rel, arch),
        &format!("a Debian {} {} base: {NEEDS_FOREIGN}", rel.suite, arch.debian),
    )
}

pub const NEEDS_FOREIGN: &str = "root, debootstrap, a Debian mirror in /etc/apt/sources.list.d and, for a foreign architecture, qemu-user-static registered in binfmt_misc (run scripts/setup), or a filled ERDMA_TEST_CACHE";

/// The debootstrapped tree [`debian12_base`]'s layer was made from (read-only: other
/// processes use it too).
pub fn debian12_rootfs() -> PathBuf {
    cached_dir(BASE_NAME, |tmp| build_base(tmp, BOOKWORM.suite, AMD64)).join("rootfs")
}

/// A private copy of [`debian12_base`] in `dir` (tag `latest`).
pub fn debian12_base_copy(dir: &Path) -> OciFixture {
    let base = debian12_base();
    let layer = fixture::import_layer(&base, 0, dir);
    fixture::image_from_layers(
        dir,
        fixture::DEFAULT_TAG,
        vec![layer],
        &[("PATH", DEBIAN_PATH)],
        &["bash"],
    )
}

fn build_base(tmp: &Path, suite: &str, arch: Arch) {
    let mirror =
        debian_mirror().expect("no Debian mirror in /etc/apt/sources.list.d or sources.list");
    assert!(arch.runs_here(), "{} binaries do not run here: {NEEDS_FOREIGN}", arch.debian);
    let rootfs = tmp.join("rootfs");
    let log_path = tmp.join("debootstrap.log");
    let log = File::create(&log_path).unwrap();
    eprintln!(
        "debian base: debootstrap --variant=minbase --arch={} {suite} from {mirror} (once; {})",
        arch.debian,
        if arch.binfmt.is_some() { "several minutes under qemu" } else { "about a minute" }
    );
    let t0 = Instant::now();
    let status = Command::new("debootstrap")
        .args(["--variant=minbase", &format!("--arch={}", arch.debian), suite])
        .arg(&rootfs)
        .arg(&mirror)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .status()
        .expect("run debootstrap");
    let debootstrap_time = t0.elapsed();
    if !status.success() {
        unmount_below(tmp);
        let log = fs::read_to_string(&log_path).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        panic!(
            "debootstrap failed with {status} after {debootstrap_time:?}\n--- last lines of {}\n{}",
            log_path.display(),
            tail.join("\n")
        );
    }
    // Nothing should be left mounted by a successful run; be sure before walking the tree.
    unmount_below(&rootfs);
    clean_rootfs(&rootfs);

    let t1 = Instant::now();
    let oci = tmp.join("oci");
    fixture::init_oci_layout(&oci);
    // A container runtime provides /dev, /proc and /sys: keep the directories, not what is
    // in them (debootstrap makes device nodes and a /dev/fd symlink).
    let keep = |rel: &Path, _: &fs::Metadata| {
        !["dev", "proc", "sys"].iter().any(|d| rel.starts_with(d) && rel != Path::new(d))
    };
    let layer = fixture::tree_layer(&oci, &rootfs, &keep, &[]);
    fixture::image_for_platform(
        &oci,
        fixture::DEFAULT_TAG,
        vec![layer.clone()],
        &[("PATH", DEBIAN_PATH)],
        &["bash"],
        &arch.platform(),
    );
    let layer_time = t1.elapsed();
    let info = serde_json::json!({
        "suite": suite,
        "arch": arch.debian,
        "variant": "minbase",
        "debootstrap_seconds": secs(debootstrap_time),
        "layer_seconds": secs(layer_time),
        "layer_digest": layer.digest,
        "layer_size": layer.size,
    });
    fs::write(tmp.join("build-info.json"), serde_json::to_vec_pretty(&info).unwrap()).unwrap();
    eprintln!(
        "debian base {suite} {}: debootstrap {debootstrap_time:.1?}, layer {layer_time:.1?} ({} MB gzip)",
        arch.debian,
        layer.size >> 20
    );
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 10.0).round() / 10.0
}

/// What the official `debian` images leave out too: downloaded packages, apt's index files
/// and package caches (debootstrap leaves all three), debootstrap's log, and the
/// `etc/resolv.conf` and `etc/hostname` it copies from the host (a container runtime mounts
/// its own). `etc/apt/sources.list`, written by debootstrap with the mirror, stays.
fn clean_rootfs(rootfs: &Path) {
    let empty = |dir: &Path, keep: &[&str]| {
        let Ok(rd) = fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let name = e.file_name();
            if keep.iter().any(|k| name == *k) {
                continue;
            }
            let p = e.path();
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                fs::remove_dir_all(&p).unwrap();
            } else {
                fs::remove_file(&p).unwrap();
            }
        }
    };
    empty(&rootfs.join("var/cache/apt/archives"), &["partial", "lock"]);
    empty(&rootfs.join("var/lib/apt/lists"), &["partial", "lock"]);
    for file in [
        "var/cache/apt/pkgcache.bin",
        "var/cache/apt/srcpkgcache.bin",
        "var/log/bootstrap.log",
        "etc/resolv.conf",
        "etc/hostname",
    ] {
        let _ = fs::remove_file(rootfs.join(file));
    }
}

/// Runs `cmd`, panicking with its output unless it succeeds; returns stdout.
#[track_caller]
pub fn run_ok(what: &str, cmd: &mut Command) -> Vec<u8> {
    let out =
        cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    super::assert_success(what, &out);
    out.stdout
}
