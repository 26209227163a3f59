//! Helpers for the one integration-test binary (`tests/it.rs`), in the manner of ripgrep's
//! `tests/util.rs`: real components (Debian's `docker-registry`, skopeo, docker) rather than
//! mocks, each started per test on 127.0.0.1 and torn down on drop.
//!
//! Tests that need root, a daemon or a tool call one of the `require_*` functions first:
//! locally a missing precondition prints a skip note and the test returns; with `CI` set it
//! panics, so that in CI every such test really runs (CONTRIBUTING.md, "Tests").

// Each test uses a subset of the helpers.
#![allow(dead_code)]

pub mod apt_repo;
pub mod debian;
pub mod debs;
pub mod fixture;
pub mod nccl;
pub mod pki;
pub mod proxy;
pub mod registry;
pub mod rpm_repo;
pub mod token;

pub use fixture::{big_layer_image, fixture_image, OciFixture, DEBIAN12_OS_RELEASE};
pub use proxy::{Fault, FaultyProxy};
pub use registry::{AccessLogEntry, Registry};

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// `rel` under the repository's `testdata/`, as a string (most uses format it into an image
/// reference or a URL).
pub fn testdata(rel: &str) -> String {
    format!("{}/../testdata/{rel}", env!("CARGO_MANIFEST_DIR"))
}

/// The `erdma-build` binary Cargo built for this test run.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_erdma-build"))
}

/// What a run of erdma-build under GNU time (`/usr/bin/time -v`) gave and cost.
pub struct Measured {
    pub out: Output,
    /// Peak RSS, from GNU time's report on stderr.
    pub rss_kib: u64,
    pub wall: std::time::Duration,
    /// CPU time, user and system, from GNU time's report: the work done, which a loaded
    /// machine stretches far less than the wall time.
    pub cpu: std::time::Duration,
}

/// Runs erdma-build ARGS under GNU time, with `cache` as `XDG_CACHE_HOME`, `NO_COLOR` and `env`.
pub fn run_measured(args: &[&str], cache: &std::path::Path, env: &[(&str, &str)]) -> Measured {
    let started = std::time::Instant::now();
    let out = Command::new("/usr/bin/time")
        .arg("-v")
        .arg(bin())
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let wall = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let rss_kib = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("Maximum resident set size (kbytes): "))
        .unwrap_or_else(|| panic!("no RSS in\n{stderr}"))
        .parse()
        .unwrap();
    let seconds = |field: &str| -> f64 {
        stderr
            .lines()
            .find_map(|l| l.trim().strip_prefix(field))
            .unwrap_or_else(|| panic!("no {field:?} in\n{stderr}"))
            .parse()
            .unwrap()
    };
    let cpu = std::time::Duration::from_secs_f64(
        seconds("User time (seconds): ") + seconds("System time (seconds): "),
    );
    Measured { out, rss_kib, wall, cpu }
}

/// Runs `erdma-build ARGS` to completion with stdin closed and `NO_COLOR` set.
pub fn run_build<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(bin());
    cmd.args(args).env("NO_COLOR", "1").env("XDG_CACHE_HOME", test_cache()).stdin(Stdio::null());
    cmd.output().unwrap_or_else(|e| panic!("cannot run {}: {e}", bin().display()))
}

/// A package and layer cache of this test process's own, so that what one test downloaded does
/// not change what another one measures. Tests that study the cache pass their own.
///
/// A static is never dropped, so the directory outlives its process (nextest runs each test in
/// one): it is made under Cargo's `CARGO_TARGET_TMPDIR`, not `/tmp`, named after the process
/// id, and each new one removes those of test processes that have exited.
pub fn test_cache() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let parent = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-caches");
        std::fs::create_dir_all(&parent).expect("the test caches' directory");
        for entry in std::fs::read_dir(&parent).expect("the test caches' directory").flatten() {
            let name = entry.file_name();
            let pid = name.to_str().and_then(|n| n.split('-').next()?.parse::<u32>().ok());
            if pid.is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists()) {
                // Another process may be removing it too.
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        tempfile::Builder::new()
            .prefix(&format!("{}-", std::process::id()))
            .tempdir_in(&parent)
            .expect("a test cache")
            .keep()
    })
}

/// Runs `skopeo ARGS` to completion. Registry transports on 127.0.0.1 are plain HTTP, so pass
/// `--tls-verify=false` (or `--src-/--dest-tls-verify=false`) for `docker://` references.
pub fn skopeo<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new("skopeo")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run skopeo: {e}"))
}

/// Panics with both output streams unless `out` is a success.
#[track_caller]
pub fn assert_success(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed with {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether `cmd` is an executable on `PATH` (or an executable path).
pub fn have(cmd: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let is_exe = |p: &std::path::Path| {
        p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
    };
    if cmd.contains('/') {
        return is_exe(std::path::Path::new(cmd));
    }
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| is_exe(&dir.join(cmd))))
        .unwrap_or(false)
}

/// Whether a docker daemon answers (`docker info` succeeds).
pub fn docker_available() -> bool {
    have("docker")
        && Command::new("docker")
            .arg("info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
}

/// Whether this process runs with effective uid 0 (read from /proc to stay free of unsafe).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// Whether we run under CI (`CI` set to anything but empty, "0" or "false").
pub fn is_ci() -> bool {
    match std::env::var("CI") {
        Ok(v) => !(v.is_empty() || v == "0" || v.eq_ignore_ascii_case("false")),
        Err(_) => false,
    }
}

/// Returns `ok`; when it is false, panics under CI and prints a skip note otherwise.
/// Use as `if !support::require(cond, "what is missing") { return; }`.
#[track_caller]
pub fn require(ok: bool, what: &str) -> bool {
    if ok {
        return true;
    }
    if is_ci() {
        panic!("precondition not met under CI: {what}");
    }
    eprintln!("skipping: {what} (set CI=1 to make this a failure)");
    false
}

#[track_caller]
pub fn require_registry() -> bool {
    require(
        have(registry::REGISTRY_BIN) && have("skopeo"),
        "docker-registry and skopeo are needed (run scripts/setup)",
    )
}

#[track_caller]
pub fn require_docker() -> bool {
    require(docker_available(), "a running docker daemon is needed (run scripts/setup)")
}

#[track_caller]
pub fn require_root() -> bool {
    require(is_root(), "root is needed")
}

/// A port of 127.0.0.1 where nothing listens, for a server out of reach: connections are
/// refused. A port found free and released could be bound by another test meanwhile; port 1
/// (tcpmux) is never given to a bind to port 0, and nothing here serves it.
pub const REFUSED_PORT: u16 = 1;

/// A free TCP port on 127.0.0.1 at the time of the call (the listener is closed again, so a
/// caller that hands it to another process should retry on a bind failure).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.1:0")
}

/// Loads `base` into Docker as `name`, through a docker-archive in `dir`. Tests load the same
/// base under their own names and remove them when done: loading and removing take one lock
/// ([`docker_images_lock`]), since a removal of the image's last other name while a load is
/// still to tag it deletes the image under the load (see [`docker_rmi`]), and the `docker
/// build` after it then finds no such image.
pub fn docker_load(base: &OciFixture, name: &str, dir: &Path) {
    let tar = dir.join("base.tar");
    assert_success(
        "skopeo copy",
        &skopeo(["copy", &base.reference(), &format!("docker-archive:{}:{name}", tar.display())]),
    );
    let _lock = docker_images_lock();
    assert_success(
        "docker load",
        &Command::new("docker").args(["load", "-i"]).arg(&tar).output().unwrap(),
    );
    let _ = std::fs::remove_file(&tar);
}

/// Removes the image `name` from Docker under [`docker_load`]'s lock. Every test removes its
/// images through here, not only the bases it loaded: removing an image the legacy builder built
/// also deletes its parents that have no name left, and a base another test is loading at that
/// moment is such a parent (a build FROM the base, then the base's own name removed), so the
/// other test's `docker build` found no base.
pub fn docker_rmi(name: &str) {
    let _lock = docker_images_lock();
    let _ = Command::new("docker").args(["rmi", "-f", name]).output();
}

/// The lock the tests take around loading and removing base images in Docker.
fn docker_images_lock() -> std::fs::File {
    let root = debian::cache_root();
    std::fs::create_dir_all(&root).unwrap();
    debian::lock_file(&root.join("docker-images.lock"))
}
