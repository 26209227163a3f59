//! `erdma-oci-hook prestart` / `createRuntime`: containers built by hand (a root directory, a
//! `config.json`, a state JSON on stdin) whose init process is a real sleeping child of the
//! test, so its limits and network namespace can be checked; hostile container roots; and one
//! end-to-end run with real runc. All need root (mknod, prlimit on another process): names end
//! in `_root`, and each calls `support::require`.
use std::io::Write;
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::{json, Value};

use crate::support::{
    self, assert_success, bin, busybox_bundle, read_spec, text, write_spec, Fixture, RuncRoot,
};

/// Within this machine's memlock hard limit (8 MiB; raising it needs CAP_SYS_RESOURCE).
const MEMLOCK: u64 = 4_194_304;

fn root_ok() -> bool {
    support::require(support::is_root(), "root is needed (mknod, prlimit on another process)")
}

/// A child process standing in for a container's init process; killed on drop.
struct Init(Child);

impl Init {
    /// `sleep 30` in the test's own namespaces.
    fn host() -> Init {
        Init(Command::new("sleep").arg("30").stdin(Stdio::null()).spawn().expect("sleep"))
    }

    /// `unshare -n sleep 30`: the same pid (unshare execs), in a fresh network namespace.
    fn private_net() -> Init {
        let child = Command::new("unshare")
            .args(["-n", "sleep", "30"])
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare");
        let init = Init(child);
        for _ in 0..500 {
            if std::fs::read_to_string(format!("/proc/{}/comm", init.pid()))
                .is_ok_and(|c| c.trim() == "sleep")
            {
                assert_ne!(
                    netns(init.pid()),
                    netns_self(),
                    "unshare -n did not give a new network namespace"
                );
                return init;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("unshare -n sleep 30 did not start");
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// (soft, hard) `Max locked memory` from /proc/PID/limits.
    fn memlock(&self) -> (String, String) {
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", self.pid())).unwrap();
        let l = limits.lines().find(|l| l.starts_with("Max locked memory")).unwrap();
        let f: Vec<&str> = l["Max locked memory".len()..].split_whitespace().collect();
        (f[0].to_string(), f[1].to_string())
    }
}

impl Drop for Init {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn netns(pid: u32) -> PathBuf {
    std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap()
}

fn netns_self() -> PathBuf {
    std::fs::read_link("/proc/self/ns/net").unwrap()
}

/// A bundle made by hand: `rootfs/` (empty unless the test fills it) and a `config.json`
/// asking for all devices through the env (or not at all).
struct Bundle {
    dir: tempfile::TempDir,
}

impl Bundle {
    fn new(ask: bool) -> Bundle {
        let dir = tempfile::Builder::new().prefix("erdma-prestart-").tempdir().unwrap();
        std::fs::create_dir(dir.path().join("rootfs")).unwrap();
        let env: Vec<&str> =
            if ask { vec!["PATH=/bin", "ERDMA_VISIBLE_DEVICES=all"] } else { vec!["PATH=/bin"] };
        let spec = json!({
            "ociVersion": "1.0.2",
            "root": {"path": "rootfs"},
            "process": {"args": ["sh"], "cwd": "/", "env": env},
            "linux": {"namespaces": [{"type": "mount"}, {"type": "pid"}]},
        });
        std::fs::write(dir.path().join("config.json"), serde_json::to_vec_pretty(&spec).unwrap())
            .unwrap();
        Bundle { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn rootfs(&self) -> PathBuf {
        self.dir.path().join("rootfs")
    }

    fn state(&self, pid: u32) -> Vec<u8> {
        serde_json::to_vec(&json!({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": pid, "bundle": self.path(), "annotations": {}})).unwrap()
    }
}

/// Runs `erdma-oci-hook STAGE` with `state` on stdin and a fixed environment: only the
/// config (as an engine's hook declaration would give it; never the test's own, which
/// carries cargo's LD_LIBRARY_PATH).
fn hook_stage(fx: &Fixture, stage: &str, state: &[u8], extra_env: &[(&str, &str)]) -> Output {
    let (k, v) = fx.env();
    let mut child = Command::new(bin("erdma-oci-hook"))
        .arg(stage)
        .env_clear()
        .env(k, v)
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(extra_env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(state).unwrap();
    child.wait_with_output().unwrap()
}

fn hook(fx: &Fixture, state: &[u8]) -> Output {
    hook_stage(fx, "prestart", state, &[])
}

/// Exit 1, nothing on stdout, `want` in the first line of stderr (`error: …`) and in the log.
#[track_caller]
fn assert_fails(out: &Output, fx: &Fixture, want: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(out.stdout.is_empty(), "stdout: {}", text(&out.stdout));
    let first = err.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("error: ") && first.contains(want),
        "`{want}` not in the first line of: {err}"
    );
    assert!(fx.log_text().contains(want), "`{want}` not in the log:\n{}", fx.log_text());
}

/// Every entry under `dir` (not following symlinks): path, type, major:minor, mode, size,
/// symlink target. Equal before and after means nothing was created, removed or changed.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            let link = std::fs::read_link(&p).map(|t| t.display().to_string()).unwrap_or_default();
            out.push(format!(
                "{rel} {:?} {} {:o} {} {link}",
                m.file_type(),
                m.rdev(),
                m.mode(),
                m.len()
            ));
            if m.is_dir() {
                walk(base, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

/// (type is char, major, minor, permission bits) of `path`.
fn node(path: &Path) -> (bool, u32, u32, u32) {
    let m = std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rdev = m.rdev();
    let (major, minor) =
        (((rdev >> 8) & 0xfff) as u32, ((rdev & 0xff) | ((rdev >> 12) & !0xff)) as u32);
    (m.file_type().is_char_device(), major, minor, m.mode() & 0o7777)
}

fn has_cap_sys_resource() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).unwrap().trim();
    u64::from_str_radix(eff, 16).unwrap() & (1 << 24) != 0
}

#[test]
fn creates_nodes_sets_memlock_root() {
    if !root_ok() {
        return;
    }
    let fx = Fixture::new("two", &format!("memlock = {MEMLOCK}"));
    let init = Init::host();
    let b = Bundle::new(true);
    let out = hook(&fx, &b.state(init.pid()));
    assert_success("prestart", &out);
    assert!(out.stdout.is_empty(), "a hook writes nothing to stdout");
    let ib = b.rootfs().join("dev/infiniband");
    assert_eq!(node(&ib.join("uverbs0")), (true, 231, 192, 0o666));
    assert_eq!(node(&ib.join("uverbs1")), (true, 231, 193, 0o666));
    assert_eq!(node(&ib.join("rdma_cm")), (true, 10, 58, 0o666));
    let mut names: Vec<_> = std::fs::read_dir(&ib)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["rdma_cm", "uverbs0", "uverbs1"], "no umad/issm nodes for eRDMA");
    assert_eq!(init.memlock(), (MEMLOCK.to_string(), MEMLOCK.to_string()));
    assert!(fx.log_text().contains("prestart applied"), "{}", fx.log_text());
    // The env is the runtime's already: what the container lacks is reported, derived from sysfs.
    assert!(fx.log_text().contains("the container's env lacks NCCL_IB_HCA==erdma_0:1,erdma_1:1 NCCL_SOCKET_IFNAME==eth0,eth1 NCCL_IB_GID_INDEX=1 NCCL_NET=IB, which a prestart hook cannot set"), "{}", fx.log_text());

    // Again (a restarted container, a second hook): the identical nodes are accepted as they are.
    let before = tree(&b.rootfs());
    let out = hook_stage(&fx, "createRuntime", &b.state(init.pid()), &[]);
    assert_success("createRuntime over existing nodes", &out);
    assert_eq!(tree(&b.rootfs()), before);
}

#[test]
fn selected_device_only_root() {
    if !root_ok() {
        return;
    }
    let fx = Fixture::new("two", &format!("memlock = {MEMLOCK}"));
    let init = Init::host();
    let b = Bundle::new(false);
    let mut spec: Value =
        serde_json::from_slice(&std::fs::read(b.path().join("config.json")).unwrap()).unwrap();
    spec["annotations"] = json!({"com.alibabacloud.erdma.devices": "erdma_1"});
    std::fs::write(b.path().join("config.json"), serde_json::to_vec(&spec).unwrap()).unwrap();
    assert_success("prestart", &hook(&fx, &b.state(init.pid())));
    let mut names: Vec<_> = std::fs::read_dir(b.rootfs().join("dev/infiniband"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["rdma_cm", "uverbs1"]);
}

#[test]
fn spec_memlock_is_reported_root() {
    if !root_ok() {
        return;
    }
    let fx = Fixture::new("one", &format!("memlock = {MEMLOCK}"));
    let init = Init::host();
    let b = Bundle::new(true);
    let mut spec: Value =
        serde_json::from_slice(&std::fs::read(b.path().join("config.json")).unwrap()).unwrap();
    spec["process"]["rlimits"] = json!([{"type": "RLIMIT_MEMLOCK", "soft": 65536, "hard": 65536}]);
    std::fs::write(b.path().join("config.json"), serde_json::to_vec(&spec).unwrap()).unwrap();
    assert_success("prestart", &hook(&fx, &b.state(init.pid())));
    let log = fx.log_text();
    assert!(
        log.lines().any(|l| l.contains(" WARN ")
            && l.contains(
                "the spec sets RLIMIT_MEMLOCK to 65536; runc applies it after this hook"
            )),
        "{log}"
    );
}

#[test]
fn not_asking_changes_nothing_root() {
    if !root_ok() {
        return;
    }
    let fx = Fixture::new("one", &format!("memlock = {MEMLOCK}"));
    let init = Init::host();
    let limits = init.memlock();
    let b = Bundle::new(false);
    let before = tree(b.path());
    let out = hook(&fx, &b.state(init.pid()));
    assert_success("prestart", &out);
    assert_eq!(tree(b.path()), before);
    assert_eq!(init.memlock(), limits);
}

/// A hostile container root: the hook fails with `want`, the root and the decoy host
/// directory are unchanged, the init process's limits too.
#[track_caller]
fn assert_refused(fx: &Fixture, b: &Bundle, decoy: &Path, init: &Init, want: &str) {
    let limits = init.memlock();
    let (root_before, decoy_before) = (tree(&b.rootfs()), tree(decoy));
    let out = hook(fx, &b.state(init.pid()));
    assert_fails(&out, fx, want);
    assert_eq!(tree(&b.rootfs()), root_before, "the container root changed");
    assert_eq!(tree(decoy), decoy_before, "the host directory changed");
    assert_eq!(init.memlock(), limits, "memlock changed although the hook failed");
}

#[test]
fn hostile_roots_root() {
    if !root_ok() {
        return;
    }
    let fx = Fixture::new("one", &format!("memlock = {MEMLOCK}"));
    let init = Init::host();
    // A host directory outside every container root, which must stay empty.
    let decoy = tempfile::Builder::new().prefix("erdma-decoy-").tempdir().unwrap();
    let d = decoy.path();

    // /dev a symlink to a host directory (absolute), and one climbing out with `..`.
    let b = Bundle::new(true);
    symlink(d, b.rootfs().join("dev")).unwrap();
    assert_refused(&fx, &b, d, &init, "/dev is a symlink to");
    let b = Bundle::new(true);
    symlink(format!("../../../../../../..{}", d.display()), b.rootfs().join("dev")).unwrap();
    assert_refused(&fx, &b, d, &init, "/dev is a symlink to ../../");

    // /dev/infiniband a symlink to a host path.
    let b = Bundle::new(true);
    std::fs::create_dir(b.rootfs().join("dev")).unwrap();
    symlink(d, b.rootfs().join("dev/infiniband")).unwrap();
    assert_refused(&fx, &b, d, &init, "/dev/infiniband is a symlink to");

    // /dev/infiniband a regular file.
    let b = Bundle::new(true);
    std::fs::create_dir(b.rootfs().join("dev")).unwrap();
    std::fs::write(b.rootfs().join("dev/infiniband"), "x").unwrap();
    assert_refused(&fx, &b, d, &init, "/dev/infiniband is a regular file, not a directory");

    let with_ib = || {
        let b = Bundle::new(true);
        std::fs::create_dir_all(b.rootfs().join("dev/infiniband")).unwrap();
        b
    };
    // A regular file at the node path.
    let b = with_ib();
    std::fs::write(b.rootfs().join("dev/infiniband/uverbs0"), "not a device").unwrap();
    assert_refused(
        &fx,
        &b,
        d,
        &init,
        "/dev/infiniband/uverbs0 is already a regular file, not the character device 231:192",
    );

    // A fifo at the node path.
    let b = with_ib();
    assert_success(
        "mkfifo",
        &Command::new("mkfifo").arg(b.rootfs().join("dev/infiniband/uverbs0")).output().unwrap(),
    );
    assert_refused(&fx, &b, d, &init, "/dev/infiniband/uverbs0 is already a fifo");

    // A symlink at the node path, to a host node.
    let b = with_ib();
    symlink("/dev/null", b.rootfs().join("dev/infiniband/uverbs0")).unwrap();
    assert_refused(&fx, &b, d, &init, "/dev/infiniband/uverbs0 is already a symlink to /dev/null");

    // A node with the wrong numbers.
    let b = with_ib();
    support::mknod(&b.rootfs().join("dev/infiniband/uverbs0"), 'c', 231, 200);
    assert_refused(
        &fx,
        &b,
        d,
        &init,
        "/dev/infiniband/uverbs0 is already a character device 231:200, not 231:192",
    );

    // The last node is the bad one: the first is not created either (checks come first).
    let b = with_ib();
    std::fs::write(b.rootfs().join("dev/infiniband/rdma_cm"), "").unwrap();
    assert_refused(&fx, &b, d, &init, "/dev/infiniband/rdma_cm is already a regular file");
    assert!(!b.rootfs().join("dev/infiniband/uverbs0").exists());

    assert_eq!(std::fs::read_dir(d).unwrap().count(), 0, "the decoy host directory stays empty");
}

#[test]
fn bad_input_root() {
    if !root_ok() {
        return;
    }
    let fx = Fixture::new("one", &format!("memlock = {MEMLOCK}"));
    let init = Init::host();
    let b = Bundle::new(true);

    assert_fails(
        &hook(&fx, b"{\"ociVersion\": \"1.0.2\", \"pid\": "),
        &fx,
        "malformed container state <stdin>",
    );
    assert_fails(
        &hook(&fx, br#"{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":1}"#),
        &fx,
        "`bundle` must be an absolute path",
    );

    let gone = json!({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": init.pid(), "bundle": b.path().join("nonexistent")});
    assert_fails(
        &hook(&fx, gone.to_string().as_bytes()),
        &fx,
        &format!("reading {}", b.path().join("nonexistent/config.json").display()),
    );

    std::fs::write(b.path().join("config.json"), "{ not json").unwrap();
    assert_fails(&hook(&fx, &b.state(init.pid())), &fx, "malformed OCI spec");

    // A pid that cannot exist: pid_max is one above the largest.
    let b = Bundle::new(true);
    let pid_max: u32 =
        std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse().unwrap();
    assert_fails(
        &hook(&fx, &b.state(pid_max)),
        &fx,
        &format!("the container's init process (pid {pid_max}, from the state) is not running"),
    );
    assert_eq!(tree(&b.rootfs()), Vec::<String>::new());

    // A device that does not exist.
    let b = Bundle::new(false);
    let mut spec: Value =
        serde_json::from_slice(&std::fs::read(b.path().join("config.json")).unwrap()).unwrap();
    spec["annotations"] = json!({"com.alibabacloud.erdma.devices": "erdma_7"});
    std::fs::write(b.path().join("config.json"), serde_json::to_vec(&spec).unwrap()).unwrap();
    assert_fails(
        &hook(&fx, &b.state(init.pid())),
        &fx,
        "eRDMA device `erdma_7` does not exist (found: erdma_0)",
    );
    assert_eq!(tree(&b.rootfs()), Vec::<String>::new());
}

#[test]
fn loader_environment_is_refused_root() {
    if !root_ok() {
        return;
    }
    let fx = Fixture::new("one", &format!("memlock = {MEMLOCK}"));
    let init = Init::host();
    let b = Bundle::new(true);
    // Empty: the loader ignores it, the hook must not.
    let out = hook_stage(&fx, "prestart", &b.state(init.pid()), &[("LD_PRELOAD", "")]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("started with LD_PRELOAD set") && err.contains("CVE-2025-23266"), "{err}");
    assert_eq!(tree(&b.rootfs()), Vec::<String>::new());
}

#[test]
fn memlock_above_hard_limit_root() {
    if !root_ok() {
        return;
    }
    // The default, unlimited.
    let fx = Fixture::new("one", "");
    let init = Init::host();
    let b = Bundle::new(true);
    let (_, hard) = init.memlock();
    let out = hook(&fx, &b.state(init.pid()));
    if has_cap_sys_resource() || hard == "unlimited" {
        assert_success("prestart with CAP_SYS_RESOURCE", &out);
        assert_eq!(init.memlock(), ("unlimited".into(), "unlimited".into()));
    } else {
        assert_fails(&out, &fx, &format!("raising memlock of pid {} to unlimited needs CAP_SYS_RESOURCE (hard limit is {hard})", init.pid()));
        assert_eq!(
            tree(&b.rootfs()),
            Vec::<String>::new(),
            "nothing created when memlock cannot be set"
        );
    }
}

#[test]
fn private_network_namespace_root() {
    if !root_ok() || !support::require(support::have("unshare"), "unshare (util-linux) is needed") {
        return;
    }
    let init = Init::private_net();
    let b = Bundle::new(true);

    let fx = Fixture::new("one", &format!("memlock = {MEMLOCK}\nnetwork = \"require\""));
    let out = hook(&fx, &b.state(init.pid()));
    assert_fails(&out, &fx, "run it with `--network host`");
    assert_eq!(tree(&b.rootfs()), Vec::<String>::new());

    // The default, `any`: the devices, and one warning about rdma_cm. The namespace holds only
    // `lo`, so the NCCL interface the env would need is not the host's eth0: it is left out
    // of what the hook says is missing.
    let fx = Fixture::new("one", &format!("memlock = {MEMLOCK}"));
    let out = hook(&fx, &b.state(init.pid()));
    assert_success("prestart with network = any", &out);
    assert!(b.rootfs().join("dev/infiniband/uverbs0").exists());
    let log = fx.log_text();
    assert_eq!(
        log.lines().filter(|l| l.contains(" WARN ") && l.contains("rdma_cm")).count(),
        1,
        "{log}"
    );
    assert!(
        log.contains("NCCL_IB_HCA==erdma_0:1") && !log.contains("NCCL_SOCKET_IFNAME==eth0"),
        "{log}"
    );
}

/// The cgroup v1 devices mount of this host, if it has one.
fn devices_v1_mount() -> Option<PathBuf> {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mi.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mut post = post.split_whitespace();
        let (fstype, _, opts) = (post.next()?, post.next()?, post.next()?);
        (fstype == "cgroup"
            && opts.split(',').any(|o| o == "devices")
            && pre.split_whitespace().nth(3) == Some("/"))
        .then(|| PathBuf::from(pre.split_whitespace().nth(4).unwrap()))
    })
}

/// A v1 devices cgroup that denies everything, removed on drop.
struct DenyAllCgroup(PathBuf);

impl Drop for DenyAllCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn cgroup_v1_device_rules_root() {
    if !root_ok() {
        return;
    }
    let v2 =
        std::fs::read_to_string("/proc/self/cgroup").unwrap().lines().all(|l| l.starts_with("0::"));
    if v2 {
        // Unified hierarchy: nothing a hook can add. The warning is covered by unit tests.
        eprintln!("cgroup v2 only: the v1 device rule case does not apply");
        return;
    }
    let Some(mount) = devices_v1_mount() else {
        assert!(!support::require(false, "a cgroup v1 devices mount"));
        return;
    };
    let fx = Fixture::new("two", &format!("memlock = {MEMLOCK}"));
    let cg = DenyAllCgroup(mount.join(format!("erdma-it-{}", std::process::id())));
    std::fs::create_dir(&cg.0).unwrap();
    std::fs::write(cg.0.join("devices.deny"), "a").unwrap();
    std::fs::write(cg.0.join("devices.allow"), "c 1:3 rwm").unwrap();
    let init = Init::host();
    std::fs::write(cg.0.join("cgroup.procs"), init.pid().to_string()).unwrap();
    let b = Bundle::new(true);
    let out = hook(&fx, &b.state(init.pid()));
    assert_success("prestart", &out);
    let mut list: Vec<String> = std::fs::read_to_string(cg.0.join("devices.list"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    list.sort();
    assert_eq!(list, ["c 10:58 rwm", "c 1:3 rwm", "c 231:192 rwm", "c 231:193 rwm"]);
    // Move it back out before the cgroup goes.
    drop(init);
}

/// A parent cgroup that denies the RDMA devices makes the child's `devices.allow` write fail
/// (v1 is hierarchical) after the nodes were made: they are removed again, memlock untouched.
#[test]
fn cgroup_refusal_rolls_back_root() {
    if !root_ok() {
        return;
    }
    if std::fs::read_to_string("/proc/self/cgroup").unwrap().lines().all(|l| l.starts_with("0::")) {
        eprintln!("cgroup v2 only: the v1 device rule case does not apply");
        return;
    }
    let Some(mount) = devices_v1_mount() else {
        assert!(!support::require(false, "a cgroup v1 devices mount"));
        return;
    };
    let fx = Fixture::new("one", &format!("memlock = {MEMLOCK}"));
    let parent = DenyAllCgroup(mount.join(format!("erdma-it-parent-{}", std::process::id())));
    std::fs::create_dir(&parent.0).unwrap();
    std::fs::write(parent.0.join("devices.deny"), "a").unwrap();
    let child = DenyAllCgroup(parent.0.join("c"));
    std::fs::create_dir(&child.0).unwrap();
    let init = Init::host();
    std::fs::write(child.0.join("cgroup.procs"), init.pid().to_string()).unwrap();
    let limits = init.memlock();
    let b = Bundle::new(true);
    let out = hook(&fx, &b.state(init.pid()));
    assert_fails(&out, &fx, "writing `c 231:192 rwm` to ");
    assert_eq!(
        tree(&b.rootfs()),
        Vec::<String>::new(),
        "the nodes and directories made are removed"
    );
    assert_eq!(init.memlock(), limits);
    assert_eq!(std::fs::read_to_string(child.0.join("devices.list")).unwrap(), "");
    drop(init);
    drop(child);
}

/// runc, a busybox bundle declaring the hook as `createRuntime` (host networking: no network
/// namespace in the spec), and a container that lists its nodes, prints its memlock and opens
/// uverbs0: "No such device or address" (the cgroup let it through to a node without a driver,
/// there is no RDMA hardware here) rather than "Operation not permitted" (the device cgroup
/// refused). With a private network namespace the same container does not start.
#[test]
fn runc_with_create_runtime_hook_root() {
    if !support::require_runc() {
        return;
    }
    let fx = Fixture::new("one", &format!("memlock = {MEMLOCK}"));
    let root = RuncRoot::new();
    let tmp = tempfile::tempdir().unwrap();
    let bundle = busybox_bundle(&tmp.path().join("b"));
    let mut spec = read_spec(&bundle);
    support::set_args(&mut spec, &["sh", "-c", "ls -l /dev/infiniband; grep 'locked memory' /proc/self/limits; cat /dev/infiniband/uverbs0; readlink /proc/self/ns/net; true"]);
    support::add_env(&mut spec, &["ERDMA_VISIBLE_DEVICES=all"]);
    let (k, v) = fx.env();
    spec["hooks"] = json!({"createRuntime": [{
        "path": bin("erdma-oci-hook"),
        "args": ["erdma-oci-hook", "createRuntime"],
        "env": [format!("{k}={}", v.display())],
    }]});
    let private = spec.clone();
    spec["linux"]["namespaces"].as_array_mut().unwrap().retain(|n| n["type"] != "network");
    write_spec(&bundle, &spec);

    let id = RuncRoot::id("prestart");
    let out = Command::new("runc")
        .args(root.args())
        .args(["run", "--bundle"])
        .arg(&bundle)
        .arg(&id)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_success("runc run", &out);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    eprintln!("container stdout:\n{stdout}container stderr:\n{stderr}");
    // Made in the container's mount namespace (its /dev tmpfs), not in the bundle's rootfs
    // where that tmpfs would hide them.
    assert!(!bundle.join("rootfs/dev/infiniband").exists());
    let nodes: Vec<(String, String)> = stdout
        .lines()
        .filter(|l| l.starts_with('c'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                format!("{} {}:{}", f[f.len() - 1], f[4].trim_end_matches(','), f[5]),
                f[0].to_string(),
            )
        })
        .collect();
    assert_eq!(
        nodes,
        [
            ("rdma_cm 10:58".to_string(), "crw-rw-rw-".to_string()),
            ("uverbs0 231:192".to_string(), "crw-rw-rw-".to_string())
        ],
        "{stdout}"
    );
    let memlock = stdout.lines().find(|l| l.starts_with("Max locked memory")).unwrap_or_default();
    let f: Vec<&str> = memlock.split_whitespace().collect();
    assert_eq!(&f[3..5], [MEMLOCK.to_string(), MEMLOCK.to_string()], "{stdout}");
    assert!(
        stdout.contains(&netns_self().display().to_string()),
        "host network namespace: {stdout}"
    );
    let cgroup_v1 = devices_v1_mount().is_some();
    if cgroup_v1 {
        // The hook's devices.allow rules (runc's spec denies all but a few devices) let
        // open(2) reach the (driverless) device.
        let log = fx.log_text();
        assert!(log.contains(r#"added: ["c 231:192 rwm", "c 10:58 rwm"]"#), "{log}");
        assert!(stderr.contains("No such device or address"), "cgroup v1: {stderr}");
    } else {
        // cgroup v2: runc's eBPF program knows nothing of the hook's nodes.
        assert!(stderr.contains("Operation not permitted"), "cgroup v2: {stderr}");
    }

    // With its own network namespace under policy `require`: the hook fails, runc does not
    // start it.
    fx.write_config(&format!("memlock = {MEMLOCK}\nnetwork = \"require\""));
    let mut private = private;
    support::set_args(&mut private, &["true"]);
    write_spec(&bundle, &private);
    let id = RuncRoot::id("prestart-private-net");
    let out = Command::new("runc")
        .args(root.args())
        .args(["run", "--bundle"])
        .arg(&bundle)
        .arg(&id)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "runc run with a private network namespace succeeded");
    assert!(text(&out.stderr).contains("--network host"), "{}", text(&out.stderr));
    let list = Command::new("runc").args(root.args()).args(["list", "-q"]).output().unwrap();
    assert!(!text(&list.stdout).contains(&id), "no container left: {}", text(&list.stdout));
}
