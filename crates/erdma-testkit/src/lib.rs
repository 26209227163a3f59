//! Helpers for the runtime side's integration tests (erdma-oci-hook's and erdma-kube's
//! `tests/it.rs`, each a dev-dependency), in the manner of ripgrep's `tests/util.rs`: real
//! components (runc, Debian's static busybox, device nodes made with `mknod`) over fixture sysfs
//! trees from `testdata/sysfs/`.
//!
//! Tests that need root or a tool call [`require`] first: locally a missing precondition prints
//! a skip note and the test returns; with `CI` set it panics, so that in CI every such test
//! really runs (CONTRIBUTING.md, "Tests").
//!
//! [`openapi`] checks request bodies against the OpenAPI v3 schema the Kubernetes API server
//! publishes (`testdata/k8s/openapi-v3/`), as strictly as the server decodes them, for the
//! stand-in API servers of the tests; [`apiserver`] is that stand-in, for a DRA driver's
//! requests.
#![forbid(unsafe_code)]

pub mod apiserver;
pub mod openapi;

use std::ffi::OsStr;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// A binary of the workspace that Cargo built for the test run, from the test's target
/// directory: cargo builds the binaries of the package whose integration tests run and puts
/// them there, and `cargo nextest run --workspace` (or `cargo build --workspace --bins`) every
/// other package's.
pub fn bin(name: &str) -> PathBuf {
    const KNOWN: [&str; 5] = [
        "erdma-oci-hook",
        "erdma-runtime",
        "erdma-device-plugin",
        "erdma-dra-plugin",
        "erdma-nri-plugin",
    ];
    assert!(KNOWN.contains(&name), "no binary `{name}` in erdma-oci-hook or erdma-kube");
    // This test binary is target/PROFILE/deps/it-HASH; the workspace's binaries are in
    // target/PROFILE.
    let exe = std::env::current_exe().expect("the test binary's path");
    let p = exe.parent().and_then(Path::parent).expect("target/PROFILE").join(name);
    assert!(
        p.is_file(),
        "{} is not built: run the tests with `cargo nextest run --workspace`, or `cargo build --workspace --bins` first",
        p.display()
    );
    p
}

/// The repository's root: the first folder above this crate that holds `testdata/`.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|p| p.join("testdata/sysfs").is_dir())
        .expect("testdata/ above the crate")
        .to_path_buf()
}

/// True when the precondition holds. Otherwise: under `CI` a panic naming `what`; locally a
/// skip note on stderr and false, so the caller returns.
#[track_caller]
pub fn require(cond: bool, what: &str) -> bool {
    if cond {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("precondition not met in CI: {what}");
    }
    eprintln!("skipped ({}): {what}", std::panic::Location::caller());
    false
}

pub fn is_root() -> bool {
    // The effective uid, without unsafe code: /proc/self/status "Uid: real effective ...".
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2))
                .map(|u| u == "0")
        })
        .unwrap_or(false)
}

/// Whether `cmd` is an executable on `PATH` (or an executable path).
pub fn have(cmd: &str) -> bool {
    let is_exe = |p: &Path| {
        p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
    };
    if cmd.contains('/') {
        return is_exe(Path::new(cmd));
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| is_exe(&d.join(cmd))))
}

/// Root, runc and Debian's static busybox: what running real containers needs.
pub fn require_runc() -> bool {
    require(is_root(), "root is needed to run containers and mknod device nodes")
        && require(have("runc"), "runc is needed (run scripts/setup)")
        && require(
            Path::new(BUSYBOX).is_file(),
            "/bin/busybox from busybox-static is needed (run scripts/setup)",
        )
}

/// Panics with both output streams unless `out` is a success.
#[track_caller]
pub fn assert_success(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed with {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `testdata/sysfs` of the workspace.
pub fn sysfs_fixtures() -> PathBuf {
    repo_root().join("testdata/sysfs")
}

/// A `/dev` node a fixture scenario declares in its `dev.txt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevNode {
    /// Relative to /dev: `infiniband/uverbs0`.
    pub path: String,
    pub kind: char,
    pub major: u32,
    pub minor: u32,
}

/// The nodes `testdata/sysfs/<scenario>/dev.txt` declares (`path type major minor`, `#` comments).
pub fn dev_nodes(scenario: &str) -> Vec<DevNode> {
    let file = sysfs_fixtures().join(scenario).join("dev.txt");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert!(f.len() == 4 && f[1].len() == 1, "{}: bad line `{l}`", file.display());
            DevNode {
                path: f[0].into(),
                kind: f[1].chars().next().unwrap(),
                major: f[2].parse().unwrap(),
                minor: f[3].parse().unwrap(),
            }
        })
        .collect()
}

/// Copies a tree, symlinks as symlinks (the fixtures' are relative, so the copy is
/// self-contained like the original).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("mkdir {}: {e}", to.display()));
    for e in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let ft = e.file_type().unwrap();
        if ft.is_symlink() {
            symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if ft.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
        }
    }
}

/// `mknod PATH TYPE MAJOR MINOR` (root), through the tool so the tests need no unsafe code.
pub fn mknod(path: &Path, kind: char, major: u32, minor: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let out = Command::new("mknod")
        .arg("-m")
        .arg("0666")
        .arg(path)
        .arg(kind.to_string())
        .arg(major.to_string())
        .arg(minor.to_string())
        .output()
        .unwrap();
    assert_success(&format!("mknod {}", path.display()), &out);
}

/// Makes the nodes `scenario` declares under the host's own `/dev` where missing, with the
/// mode rdma-core's udev rules give them on an eRDMA host (0666, which a container in a user
/// namespace of other ids needs), and leaves them there. runc in a user namespace cannot make
/// device nodes: it bind-mounts each from the host's path the spec names, as on a real eRDMA
/// host, where they exist. Never removed, so that tests running at the same time (and
/// `scripts/runtime-validation/run`) never pull one from under another. A misc minor (major
/// 10: `rdma_cm`'s 58) that another driver of this host holds (`/proc/misc`; older kernels hand
/// out minors below 64) is refused: a node open to all would open that driver.
pub fn host_dev_nodes(scenario: &str) {
    for n in dev_nodes(scenario) {
        let path = Path::new("/dev").join(&n.path);
        if std::fs::symlink_metadata(&path).is_ok() {
            continue;
        }
        if n.kind == 'c' && n.major == 10 {
            let misc = std::fs::read_to_string("/proc/misc").unwrap_or_default();
            let name = Path::new(&n.path).file_name().unwrap().to_string_lossy().into_owned();
            let holder = misc.lines().find_map(|l| {
                let (minor, driver) = l.trim().split_once(' ')?;
                (minor.parse() == Ok(n.minor) && driver != name).then(|| driver.to_string())
            });
            assert!(
                holder.is_none(),
                "misc minor {} is {holder:?}'s here, not {name}'s: /dev/{} not made",
                n.minor,
                n.path
            );
        }
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let out = Command::new("mknod")
            .args(["-m", "0666"])
            .arg(&path)
            .args([n.kind.to_string(), n.major.to_string(), n.minor.to_string()])
            .output()
            .unwrap();
        // Another test may have made it meanwhile.
        if !out.status.success() && std::fs::symlink_metadata(&path).is_err() {
            assert_success(&format!("mknod {}", path.display()), &out);
        }
    }
}

/// A fixture host: a copy of `testdata/sysfs/<scenario>/sys`, a /dev root with the nodes the
/// scenario declares, and a config file pointing there, with its log file.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub scenario: String,
    pub sysfs: PathBuf,
    pub dev: PathBuf,
    pub config_path: PathBuf,
    pub log: PathBuf,
}

impl Fixture {
    /// The scenario with its device nodes (needs root: `mknod`) and a config of
    /// `sysfs_root`, `dev_root`, `log_file`, `log_level = "debug"`, overridden or extended by
    /// `extra_toml` (e.g. `memlock = 4194304\nnetwork = "warn"`).
    pub fn new(scenario: &str, extra_toml: &str) -> Fixture {
        let f = Fixture::sysfs_only(scenario, extra_toml);
        for n in dev_nodes(scenario) {
            mknod(&f.dev.join(&n.path), n.kind, n.major, n.minor);
        }
        f
    }

    /// The same without device nodes (no root needed): every device is reported unusable.
    pub fn sysfs_only(scenario: &str, extra_toml: &str) -> Fixture {
        let src = sysfs_fixtures().join(scenario);
        assert!(src.join("sys").is_dir(), "no fixture scenario {}", src.display());
        let dir = tempfile::Builder::new()
            .prefix(&format!("erdma-fixture-{scenario}-"))
            .tempdir()
            .unwrap();
        let sysfs = dir.path().join("sys");
        copy_tree(&src.join("sys"), &sysfs);
        let dev = dir.path().join("dev");
        std::fs::create_dir_all(&dev).unwrap();
        // The NVIDIA driver's GPU list where the scenario has GPUs; an empty /proc otherwise,
        // never this machine's.
        let proc_root = dir.path().join("proc");
        if src.join("proc").is_dir() {
            copy_tree(&src.join("proc"), &proc_root);
        } else {
            std::fs::create_dir_all(&proc_root).unwrap();
        }
        let f = Fixture {
            scenario: scenario.into(),
            sysfs,
            dev,
            config_path: dir.path().join("oci-hook.toml"),
            log: dir.path().join("erdma.log"),
            dir,
        };
        f.write_config(extra_toml);
        f
    }

    /// Rewrites the config: the fixture's roots and log, then `extra_toml` over them.
    pub fn write_config(&self, extra_toml: &str) {
        let mut t = toml::Table::new();
        t.insert("sysfs_root".into(), self.sysfs.display().to_string().into());
        t.insert("dev_root".into(), self.dev.display().to_string().into());
        t.insert("proc_root".into(), self.dir.path().join("proc").display().to_string().into());
        t.insert("log_file".into(), self.log.display().to_string().into());
        t.insert("log_level".into(), "debug".into());
        let extra: toml::Table = toml::from_str(extra_toml)
            .unwrap_or_else(|e| panic!("extra config `{extra_toml}`: {e}"));
        t.extend(extra);
        std::fs::write(&self.config_path, toml::to_string(&t).unwrap()).unwrap();
    }

    /// The pair to set in a command's environment: (`ERDMA_OCI_HOOK_CONFIG`, config path).
    pub fn env(&self) -> (&'static str, PathBuf) {
        ("ERDMA_OCI_HOOK_CONFIG", self.config_path.clone())
    }

    /// A command for one of our binaries with the fixture's config and no `RUST_LOG`.
    pub fn command(&self, binary: &str) -> Command {
        let mut cmd = Command::new(bin(binary));
        let (k, v) = self.env();
        cmd.env(k, v).env_remove("RUST_LOG").stdin(Stdio::null());
        cmd
    }

    /// The log so far (empty when nothing was logged yet).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

pub const BUSYBOX: &str = "/bin/busybox";

/// Applets every busybox rootfs gets.
pub const APPLETS: &[&str] = &[
    "sh", "ls", "cat", "readlink", "true", "false", "echo", "env", "grep", "sleep", "id", "stat",
    "test", "mkdir", "head", "sort", "tr",
];

/// A busybox rootfs at `dir`: `/bin/busybox` (Debian's static build, copied, never linked:
/// a container must not be able to write the host's) and the [`APPLETS`] as symlinks.
pub fn busybox_rootfs(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(BUSYBOX, bin.join("busybox")).unwrap_or_else(|e| panic!("copy {BUSYBOX}: {e}"));
    for a in APPLETS {
        symlink("busybox", bin.join(a)).unwrap();
    }
    for d in ["proc", "sys", "dev", "tmp", "etc"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    dir.to_path_buf()
}

/// An OCI bundle at `dir`: a busybox `rootfs/` and the `config.json` of `runc spec`, with
/// `process.terminal` off (tests have no terminal). Returns `dir`.
pub fn busybox_bundle(dir: &Path) -> PathBuf {
    busybox_rootfs(&dir.join("rootfs"));
    runc_spec(dir);
    dir.to_path_buf()
}

/// A bundle at `dir` whose `root.path` is an existing (read-only) `rootfs`, shared between
/// bundles: fifty containers need not copy busybox fifty times.
pub fn bundle_with_rootfs(dir: &Path, rootfs: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    runc_spec(dir);
    let mut spec = read_spec(dir);
    spec["root"]["path"] = rootfs.display().to_string().into();
    spec["root"]["readonly"] = true.into();
    write_spec(dir, &spec);
    dir.to_path_buf()
}

fn runc_spec(dir: &Path) {
    let _ = std::fs::remove_file(dir.join("config.json"));
    let out =
        Command::new("runc").arg("spec").arg("--bundle").arg(dir).output().expect("runc spec");
    assert_success("runc spec", &out);
    let mut spec = read_spec(dir);
    spec["process"]["terminal"] = false.into();
    write_spec(dir, &spec);
}

pub fn read_spec(bundle: &Path) -> Value {
    let p = bundle.join("config.json");
    serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

pub fn write_spec(bundle: &Path, spec: &Value) {
    std::fs::write(bundle.join("config.json"), serde_json::to_vec_pretty(spec).unwrap()).unwrap();
}

/// Sets `process.args`.
pub fn set_args(spec: &mut Value, args: &[&str]) {
    spec["process"]["args"] = args.iter().map(|a| Value::from(*a)).collect();
}

/// Appends `NAME=value` entries to `process.env`.
pub fn add_env(spec: &mut Value, vars: &[&str]) {
    let env = spec["process"]["env"].as_array_mut().expect("process.env");
    env.extend(vars.iter().map(|v| Value::from(*v)));
}

/// The value of `name` in `process.env` (the last definition).
pub fn env_of<'a>(spec: &'a Value, name: &str) -> Option<&'a str> {
    spec["process"]["env"]
        .as_array()?
        .iter()
        .rev()
        .filter_map(Value::as_str)
        .find_map(|e| e.strip_prefix(name)?.strip_prefix('='))
}

/// `erdma-oci-hook precreate` with `input` on stdin under `fx`'s config.
pub fn precreate(fx: &Fixture, input: &[u8]) -> Output {
    let mut child = fx
        .command("erdma-oci-hook")
        .arg("precreate")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), input).unwrap();
    child.wait_with_output().unwrap()
}

/// Runs `args` in a busybox container with `env`, under erdma-runtime and real runc with `fx`'s
/// config; returns what it printed.
pub fn run_busybox(fx: &Fixture, name: &str, args: &[&str], env: &[&str]) -> String {
    let root = RuncRoot::new();
    let tmp = tempfile::tempdir().unwrap();
    let bundle = busybox_bundle(&tmp.path().join("b"));
    let mut spec = read_spec(&bundle);
    set_args(&mut spec, args);
    add_env(&mut spec, env);
    write_spec(&bundle, &spec);
    let id = RuncRoot::id(name);
    let out = fx
        .command("erdma-runtime")
        .args(root.args())
        .args(["run", "--bundle", bundle.to_str().unwrap(), &id])
        .output()
        .unwrap();
    assert_success("erdma-runtime run", &out);
    text(&out.stdout)
}

/// A private runc state directory (`runc --root`), and unique container ids; containers
/// still there are force-deleted on drop.
pub struct RuncRoot {
    pub dir: tempfile::TempDir,
}

impl Default for RuncRoot {
    fn default() -> Self {
        RuncRoot::new()
    }
}

impl RuncRoot {
    pub fn new() -> RuncRoot {
        RuncRoot { dir: tempfile::Builder::new().prefix("erdma-runc-").tempdir().unwrap() }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `[--root DIR]`, to put before a subcommand.
    pub fn args(&self) -> [&OsStr; 2] {
        [OsStr::new("--root"), self.dir.path().as_os_str()]
    }

    /// A container id unique to this process and `name`.
    pub fn id(name: &str) -> String {
        format!("erdma-it-{}-{name}", std::process::id())
    }
}

impl Drop for RuncRoot {
    fn drop(&mut self) {
        let Ok(entries) = std::fs::read_dir(self.dir.path()) else { return };
        for e in entries.flatten() {
            let _ = Command::new("runc")
                .args(self.args())
                .args(["delete", "--force"])
                .arg(e.file_name())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A runtime script that records each invocation's arguments (one per line, then a `--end--`
/// line) in `marker`, then execs `then` (e.g. `runc`) with them, or exits 0 when `then` is None.
pub fn spy_runtime(dir: &Path, marker: &Path, then: Option<&str>) -> PathBuf {
    let path = dir.join("spy-runtime");
    let tail = match then {
        Some(rt) => format!("exec {rt} \"$@\"\n"),
        None => "exit 0\n".into(),
    };
    let script = format!("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done >> '{}'\necho --end-- >> '{}'\n{tail}", marker.display(), marker.display());
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A network namespace of our own (`unshare --net sleep`), not the host's: what an engine's
/// managed namespace looks like. Its process is killed on drop.
pub struct Netns {
    child: std::process::Child,
}

// Making one starts a process holding a new network namespace: not a default value.
#[allow(clippy::new_without_default)]
impl Netns {
    pub fn new() -> Netns {
        let host = std::fs::read_link("/proc/self/ns/net").unwrap();
        let child = Command::new("unshare")
            .args(["--net", "sleep", "600"])
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare --net");
        let ns = Netns { child };
        // unshare(2) happens after the spawn returns: wait until the namespace differs (by a
        // deadline, not a count of short sleeps: a busy machine may take a while to exec).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            match std::fs::read_link(ns.path()) {
                Ok(l) if l != host => return ns,
                _ => std::thread::sleep(std::time::Duration::from_millis(2)),
            }
        }
        panic!("unshare --net did not make a new network namespace in 20 s");
    }

    /// `/proc/PID/ns/net` of the namespace's process.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/net", self.child.id()))
    }

    /// The namespace with `lo` up and the inner end of a veth pair named `inside` (`eth0`, as a
    /// CNI plugin names a pod's interface), up with `cidr`, as a CNI bridge or ptp plugin leaves
    /// it. The host's end goes with the namespace.
    pub fn with_interface(inside: &str, cidr: &str) -> Netns {
        let ns = Netns::new();
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let outside = format!(
            "ek{}x{}",
            std::process::id() % 100_000,
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let pid = ns.child.id().to_string();
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().expect("ip (iproute2)");
            assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        ip(&["link", "add", &outside, "type", "veth", "peer", "name", inside, "netns", &pid]);
        ip(&["link", "set", &outside, "up"]);
        let path = ns.path();
        let inner = |args: &[&str]| {
            let out = Command::new("nsenter")
                .arg(format!("--net={}", path.display()))
                .arg("ip")
                .args(args)
                .output()
                .expect("nsenter (util-linux)");
            assert!(
                out.status.success(),
                "ip {args:?} inside: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        inner(&["link", "set", "lo", "up"]);
        inner(&["addr", "add", cidr, "dev", inside]);
        inner(&["link", "set", inside, "up"]);
        ns
    }

    /// `net:[inode]`, as `readlink /proc/self/ns/net` prints it inside.
    pub fn link(&self) -> String {
        std::fs::read_link(self.path()).unwrap().display().to_string()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
