//! `erdma-runtime` with real runc and busybox bundles, over fixture sysfs trees and device
//! nodes made with `mknod`; and `erdma-oci-hook precreate`. Names ending in `_root` need root
//! and runc (they fail under `CI` when they cannot run, and skip locally).
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

use crate::support::{
    self, assert_success, busybox_bundle, env_of, read_spec, text, write_spec, Fixture, RuncRoot,
};

/// Configured memlock for containers that run: within this machine's hard limit (8 MiB without
/// CAP_SYS_RESOURCE, else runc fails with "error setting rlimit type 8").
const MEMLOCK: u64 = 4_194_304;

fn host_netns() -> String {
    std::fs::read_link("/proc/self/ns/net").unwrap().display().to_string()
}

/// `erdma-runtime --root ROOT ARGS` under `fx`'s config.
fn runtime(fx: &Fixture, root: &RuncRoot, args: &[&str]) -> Output {
    fx.command("erdma-runtime").args(root.args()).args(args).output().unwrap()
}

/// The parts of an error run every error case checks: exit 1, one line on stderr naming the
/// problem, the same line in the log, nothing on stdout.
#[track_caller]
fn assert_clear_error(out: &Output, fx: &Fixture, want: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(out.stdout.is_empty(), "stdout: {}", text(&out.stdout));
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("erdma-runtime: error: "), "{err}");
    assert!(err.contains(want), "`{want}` not in: {err}");
    let log = fx.log_text();
    assert!(
        log.lines().any(|l| l.contains(" ERROR ") && l.contains(want)),
        "`{want}` not in the log:\n{log}"
    );
}

/// `(path, "major:minor", mode)` of each entry of busybox `ls -l` output for device nodes.
fn ls_nodes(out: &str) -> Vec<(String, String, String)> {
    out.lines()
        .filter(|l| l.starts_with('c'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[f.len() - 1].to_string(),
                format!("{}:{}", f[4].trim_end_matches(','), f[5]),
                f[0].to_string(),
            )
        })
        .collect()
}

#[test]
fn asking_container_gets_nodes_memlock_and_host_network_root() {
    if !support::require_runc() {
        return;
    }
    let fx = Fixture::new("one", &format!("memlock = {MEMLOCK}"));
    let root = RuncRoot::new();
    let tmp = tempfile::tempdir().unwrap();
    let bundle = busybox_bundle(&tmp.path().join("b"));
    let mut spec = read_spec(&bundle);
    support::set_args(
        &mut spec,
        &[
            "sh",
            "-c",
            "ls -l /dev/infiniband; cat /proc/self/limits; readlink /proc/self/ns/net; env",
        ],
    );
    support::add_env(&mut spec, &["ERDMA_VISIBLE_DEVICES=all"]);
    spec["x-erdma-test"] = json!({"unknown": ["fields", "survive"]});
    write_spec(&bundle, &spec);
    std::fs::set_permissions(bundle.join("config.json"), std::fs::Permissions::from_mode(0o600))
        .unwrap();

    let id = RuncRoot::id("ask");
    let out = runtime(&fx, &root, &["run", "--bundle", bundle.to_str().unwrap(), &id]);
    assert_success("erdma-runtime run", &out);
    let stdout = text(&out.stdout);
    // Only the container's output: `ls -l` starts with its "total" line.
    assert!(stdout.starts_with("total "), "{stdout}");
    let nodes = ls_nodes(&stdout);
    assert_eq!(
        nodes,
        [
            ("rdma_cm".to_string(), "10:58".to_string(), "crw-rw-rw-".to_string()),
            ("uverbs0".to_string(), "231:192".to_string(), "crw-rw-rw-".to_string())
        ],
        "{stdout}"
    );
    let memlock = stdout
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(
        memlock.split_whitespace().collect::<Vec<_>>()[3..6],
        [MEMLOCK.to_string().as_str(), &MEMLOCK.to_string(), "bytes"],
        "{memlock}"
    );
    assert!(
        stdout.lines().any(|l| l == host_netns()),
        "the container's net namespace is not the host's ({}):\n{stdout}",
        host_netns()
    );
    // Derived from the fixture host's sysfs: exact device:port, its netdev, its RoCE v2 GID.
    for var in ["NCCL_IB_HCA==erdma_0:1", "NCCL_SOCKET_IFNAME==eth0", "NCCL_IB_GID_INDEX=1"] {
        assert!(stdout.lines().any(|l| l == var), "{var} missing:\n{stdout}");
    }
    assert!(
        !stdout.lines().any(|l| l.starts_with("NCCL_PROTO=")),
        "MTU 8500 keeps LL128:\n{stdout}"
    );

    // The spec on disk: edited, unknown fields kept, mode kept.
    let after = read_spec(&bundle);
    assert_eq!(after["x-erdma-test"], spec["x-erdma-test"]);
    assert_eq!(
        std::fs::metadata(bundle.join("config.json")).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(!after["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n["type"] == "network"));
    let log = fx.log_text();
    assert!(
        log.contains(&format!("eRDMA edit of container {id}")) && log.contains("devices=erdma_0"),
        "{log}"
    );
}

#[test]
fn container_that_does_not_ask_is_untouched_root() {
    if !support::require_runc() {
        return;
    }
    let fx = Fixture::new("one", &format!("memlock = {MEMLOCK}"));
    let root = RuncRoot::new();
    let tmp = tempfile::tempdir().unwrap();
    let bundle = busybox_bundle(&tmp.path().join("b"));
    let mut spec = read_spec(&bundle);
    support::set_args(
        &mut spec,
        &["sh", "-c", "ls /dev/infiniband 2>&1; readlink /proc/self/ns/net; cat /proc/self/limits"],
    );
    support::add_env(&mut spec, &["ERDMA_VISIBLE_DEVICES_NOT=all"]);
    write_spec(&bundle, &spec);
    let cfg = bundle.join("config.json");
    let (before, meta) = (std::fs::read(&cfg).unwrap(), std::fs::metadata(&cfg).unwrap());

    let out = runtime(&fx, &root, &["run", "-b", bundle.to_str().unwrap(), &RuncRoot::id("plain")]);
    assert_success("erdma-runtime run", &out);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("/dev/infiniband: No such file or directory"), "{stdout}");
    assert!(
        !stdout.lines().any(|l| l == host_netns()),
        "a container that did not ask keeps its own network:\n{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("Max locked memory") && !l.contains(&MEMLOCK.to_string())),
        "{stdout}"
    );
    // Byte for byte, and not even rewritten.
    assert_eq!(std::fs::read(&cfg).unwrap(), before);
    let now = std::fs::metadata(&cfg).unwrap();
    assert_eq!(
        (now.ino(), now.mtime(), now.mtime_nsec()),
        (meta.ino(), meta.mtime(), meta.mtime_nsec())
    );
}

#[test]
fn default_config_edit_at_spec_level_root() {
    if !support::require(support::is_root(), "root is needed to mknod fixture nodes")
        || !support::require(support::have("runc"), "runc spec")
    {
        return;
    }
    // The default memlock (unlimited) is above this machine's hard limit: assert the spec, do
    // not run it. A spy runtime records what it was called with.
    let fx = Fixture::new("two", "");
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("calls");
    let spy = support::spy_runtime(tmp.path(), &marker, None);
    fx.write_config(&format!("runtime = \"{}\"", spy.display()));
    let root = RuncRoot::new();
    let bundle = busybox_bundle(&tmp.path().join("b"));
    let mut spec = read_spec(&bundle);
    spec["annotations"] = json!({"com.alibabacloud.erdma.devices": "erdma_1"});
    write_spec(&bundle, &spec);

    let b = bundle.to_str().unwrap();
    let args = [
        "--log",
        "/run/x/log.json",
        "--log-format",
        "json",
        "--systemd-cgroup",
        "create",
        "--pid-file",
        "/run/x/pid",
        "-bundle",
        b,
        "ctr-1",
    ];
    let out = runtime(&fx, &root, &args);
    assert_success("erdma-runtime create", &out);
    assert!(
        out.stdout.is_empty() && out.stderr.is_empty(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    // The runtime got the original arguments, unchanged.
    let mut want: Vec<String> =
        root.args().iter().map(|a| a.to_string_lossy().into_owned()).collect();
    want.extend(args.iter().map(|a| a.to_string()));
    want.push("--end--".into());
    assert_eq!(std::fs::read_to_string(&marker).unwrap().lines().collect::<Vec<_>>(), want);

    let s = read_spec(&bundle);
    let memlock: Vec<&Value> = s["process"]["rlimits"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["type"] == "RLIMIT_MEMLOCK")
        .collect();
    assert_eq!(
        memlock,
        [
            &json!({"type": "RLIMIT_MEMLOCK", "hard": 18446744073709551615u64, "soft": 18446744073709551615u64})
        ]
    );
    let paths: Vec<&str> = s["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/dev/infiniband/uverbs1", "/dev/infiniband/rdma_cm"]);
    let rules: Vec<&Value> = s["linux"]["resources"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["allow"] == true)
        .collect();
    assert_eq!(
        rules,
        [
            &json!({"allow": true, "type": "c", "major": 231, "minor": 193, "access": "rwm"}),
            &json!({"allow": true, "type": "c", "major": 10, "minor": 58, "access": "rwm"})
        ]
    );
    assert!(!s["linux"]["namespaces"].as_array().unwrap().iter().any(|n| n["type"] == "network"));
    assert_eq!(env_of(&s, "NCCL_IB_HCA"), Some("=erdma_1:1"));
    assert_eq!(env_of(&s, "NCCL_SOCKET_IFNAME"), Some("=eth1"));
    assert_eq!(env_of(&s, "NCCL_PROTO"), None);
    // Everything else as it was.
    let mut rest = s.clone();
    let mut orig = spec.clone();
    for v in [&mut rest, &mut orig] {
        for k in ["process", "linux"] {
            v.as_object_mut().unwrap().remove(k);
        }
    }
    assert_eq!(rest, orig);

    // The bundle defaults to the current directory.
    let bundle2 = busybox_bundle(&tmp.path().join("b2"));
    let mut spec2 = read_spec(&bundle2);
    support::add_env(&mut spec2, &["ERDMA_VISIBLE_DEVICES=all"]);
    write_spec(&bundle2, &spec2);
    let out = fx
        .command("erdma-runtime")
        .args(["create", "ctr-2"])
        .current_dir(&bundle2)
        .output()
        .unwrap();
    assert_success("erdma-runtime create in the bundle", &out);
    assert_eq!(env_of(&read_spec(&bundle2), "NCCL_IB_HCA"), Some("=erdma_0:1,erdma_1:1"));
}

/// A spec, a fixture and a spy in front of real runc, for the error cases.
struct ErrorCase {
    fx: Fixture,
    root: RuncRoot,
    tmp: tempfile::TempDir,
    marker: std::path::PathBuf,
    bundle: std::path::PathBuf,
}

impl ErrorCase {
    fn new(scenario: &str, extra_toml: &str, env: &[&str]) -> ErrorCase {
        let fx = Fixture::new(scenario, "");
        let tmp = tempfile::tempdir().unwrap();
        let marker = tmp.path().join("calls");
        let spy = support::spy_runtime(tmp.path(), &marker, Some("runc"));
        fx.write_config(&format!(
            "runtime = \"{}\"\nmemlock = {MEMLOCK}\n{extra_toml}",
            spy.display()
        ));
        let bundle = busybox_bundle(&tmp.path().join("b"));
        let mut spec = read_spec(&bundle);
        support::set_args(&mut spec, &["true"]);
        support::add_env(&mut spec, env);
        write_spec(&bundle, &spec);
        ErrorCase { fx, root: RuncRoot::new(), tmp, marker, bundle }
    }

    fn create(&self, id: &str) -> Output {
        runtime(&self.fx, &self.root, &["create", "--bundle", self.bundle.to_str().unwrap(), id])
    }

    /// Expects the clear error `want`, the spec as it was and the real runtime never started.
    #[track_caller]
    fn expect_error(&self, want: &str) {
        let before = std::fs::read(self.bundle.join("config.json")).unwrap();
        let out = self.create(&RuncRoot::id("err"));
        assert_clear_error(&out, &self.fx, want);
        assert_eq!(
            std::fs::read(self.bundle.join("config.json")).unwrap(),
            before,
            "config.json changed"
        );
        assert!(
            !self.marker.exists(),
            "the runtime ran: {}",
            std::fs::read_to_string(&self.marker).unwrap_or_default()
        );
        let leftovers: Vec<_> = std::fs::read_dir(&self.bundle)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| n != "config.json" && n != "rootfs")
            .collect();
        assert!(leftovers.is_empty(), "left in the bundle: {leftovers:?}");
    }
}

#[test]
fn errors_are_clear_and_leave_the_spec_alone_root() {
    if !support::require_runc() {
        return;
    }
    // A device named that does not exist, and one whose node is missing from /dev.
    ErrorCase::new("one", "", &["ERDMA_VISIBLE_DEVICES=erdma_7"])
        .expect_error("eRDMA device `erdma_7` does not exist (found: erdma_0)");
    ErrorCase::new("missing-uverbs", "", &["ERDMA_VISIBLE_DEVICES=erdma_1"])
        .expect_error("eRDMA device erdma_1 has no usable uverbs node");
    ErrorCase::new("none", "", &["ERDMA_VISIBLE_DEVICES=all"])
        .expect_error("the container asked for eRDMA but no eRDMA device was found");
    ErrorCase::new("one", "", &["ERDMA_VISIBLE_DEVICES=erdma_0;reboot"])
        .expect_error("invalid eRDMA request `erdma_0;reboot` from ERDMA_VISIBLE_DEVICES");
    // Another driver's device cannot be named unless the operator allows the driver.
    ErrorCase::new("mlx5-beside", "", &["ERDMA_VISIBLE_DEVICES=mlx5_0"])
        .expect_error("RDMA device `mlx5_0` has driver mlx5_core");

    // Malformed config.json that asks.
    let c = ErrorCase::new("one", "", &["ERDMA_VISIBLE_DEVICES=all"]);
    std::fs::write(
        c.bundle.join("config.json"),
        "{\"ociVersion\": \"1.0.2\", \"process\": {\"env\": [\"ERDMA_VISIBLE_DEVICES=all\"]}, ",
    )
    .unwrap();
    c.expect_error(&format!(
        "malformed OCI spec {}: EOF while parsing",
        c.bundle.join("config.json").display()
    ));
    std::fs::write(c.bundle.join("config.json"), "[\"ERDMA_VISIBLE_DEVICES=all\"]").unwrap();
    c.expect_error("not a JSON object");
    // One that cannot ask is not parsed: the real runtime reads it and gives its own error,
    // as it would without the wrapper; the spec stays as it was.
    let truncated = "{\"ociVersion\": \"1.0.2\", \"process\": ";
    std::fs::write(c.bundle.join("config.json"), truncated).unwrap();
    let out = c.create(&RuncRoot::id("err"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unexpected EOF"), "{out:?}");
    assert!(c.marker.exists(), "the real runtime was not run");
    assert_eq!(std::fs::read_to_string(c.bundle.join("config.json")).unwrap(), truncated);

    // A bundle that does not exist, and one without config.json.
    let c = ErrorCase::new("one", "", &[]);
    let out = runtime(&c.fx, &c.root, &["create", "--bundle", "/nonexistent/bundle", "x"]);
    assert_clear_error(
        &out,
        &c.fx,
        "bundle /nonexistent/bundle does not exist or is not a directory",
    );
    assert!(!c.marker.exists());
    let empty = c.tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = runtime(&c.fx, &c.root, &["run", "--bundle", empty.to_str().unwrap(), "x"]);
    assert_clear_error(
        &out,
        &c.fx,
        &format!("reading {}: No such file or directory", empty.join("config.json").display()),
    );

    // The real runtime not found: named, before any edit.
    let c = ErrorCase::new("one", "", &["ERDMA_VISIBLE_DEVICES=all"]);
    c.fx.write_config(&format!("runtime = \"runc-erdma-missing\"\nmemlock = {MEMLOCK}"));
    c.expect_error("OCI runtime `runc-erdma-missing` not found on PATH");
    c.fx.write_config("runtime = \"/opt/nowhere/runc\"");
    c.expect_error("OCI runtime `/opt/nowhere/runc` not found (no executable file there)");
    // `--version` without a runtime to ask: our line alone, the reason as a note, success.
    let out = c.fx.command("erdma-runtime").arg("--version").output().unwrap();
    assert_success("erdma-runtime --version (no runtime)", &out);
    assert_eq!(text(&out.stdout), format!("erdma-runtime {}\n", env!("ERDMA_VERSION")));
    assert_eq!(
        text(&out.stderr),
        format!(
            "erdma-runtime: note: no runtime version: OCI runtime `/opt/nowhere/runc` not found \
             (no executable file there); set `runtime` in {}\n",
            c.fx.config_path.display()
        )
    );

    // With the engine's `--log FILE --log-format json` (containerd's shim), the error is also
    // written there as runc would: the engine shows it to the user.
    let c = ErrorCase::new("one", "", &["ERDMA_VISIBLE_DEVICES=erdma_7"]);
    let log_json = c.tmp.path().join("log.json");
    let out = runtime(
        &c.fx,
        &c.root,
        &[
            "--log",
            log_json.to_str().unwrap(),
            "--log-format",
            "json",
            "create",
            "--bundle",
            c.bundle.to_str().unwrap(),
            "x",
        ],
    );
    assert_clear_error(&out, &c.fx, "`erdma_7` does not exist");
    let last: Value =
        serde_json::from_str(std::fs::read_to_string(&log_json).unwrap().lines().last().unwrap())
            .unwrap();
    assert_eq!(last["level"], "error");
    assert!(
        last["msg"].as_str().unwrap().starts_with("eRDMA device `erdma_7` does not exist"),
        "{last}"
    );

    // A broken config file: stderr only (there is no log file to use), still exit 1.
    let c = ErrorCase::new("one", "", &["ERDMA_VISIBLE_DEVICES=all"]);
    std::fs::write(&c.fx.config_path, "runtim = \"runc\"\n").unwrap();
    let before = std::fs::read(c.bundle.join("config.json")).unwrap();
    let out = c.create("x");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.starts_with("erdma-runtime: error: invalid config ")
            && err.contains("runtim")
            && err.lines().count() == 1,
        "{err}"
    );
    assert_eq!(std::fs::read(c.bundle.join("config.json")).unwrap(), before);
}

#[test]
fn managed_network_namespace_root() {
    if !support::require_runc()
        || !support::require(support::have("unshare"), "unshare (util-linux) is needed")
        || !support::require(support::have("ip"), "ip (iproute2) is needed")
    {
        return;
    }
    let with_path = |c: &ErrorCase, path: &Path, script: &str| {
        let mut spec = read_spec(&c.bundle);
        for ns in spec["linux"]["namespaces"].as_array_mut().unwrap() {
            if ns["type"] == "network" {
                ns["path"] = json!(path);
            }
        }
        support::set_args(&mut spec, &["sh", "-c", script]);
        write_spec(&c.bundle, &spec);
    };
    const INSIDE: &str =
        "readlink /proc/self/ns/net; ls /dev/infiniband; echo \"ifname=$NCCL_SOCKET_IFNAME hca=$NCCL_IB_HCA gid=$NCCL_IB_GID_INDEX\"; grep 'locked memory' /proc/self/limits";
    // A pod's namespace as a CNI plugin leaves it: eth0 with an address. The host (an ACK
    // node's sysfs) has ens5/ens6/bond0 and no eth0.
    let netns = support::Netns::with_interface("eth0", "10.231.0.2/24");

    // The default, `any`: runc runs the container in the namespace it was given, with the
    // devices, memlock, and the interface of *that* namespace for NCCL.
    let any = ErrorCase::new("rocep-ens5", "", &["ERDMA_VISIBLE_DEVICES=all"]);
    with_path(&any, &netns.path(), INSIDE);
    let out = runtime(
        &any.fx,
        &any.root,
        &["run", "--bundle", any.bundle.to_str().unwrap(), &RuncRoot::id("any")],
    );
    assert_success("erdma-runtime run (any)", &out);
    assert!(any.marker.exists(), "runc did not run");
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[..5],
        [
            netns.link().as_str(),
            "rdma_cm",
            "uverbs0",
            "uverbs1",
            "ifname==eth0 hca==rocep26s0:1 gid=1"
        ],
        "{stdout}"
    );
    let memlock = MEMLOCK.to_string();
    assert_eq!(
        lines[5].split_whitespace().collect::<Vec<_>>(),
        ["Max", "locked", "memory", &memlock, &memlock, "bytes"],
        "{stdout}"
    );
    let log = any.fx.log_text();
    assert_eq!(
        log.lines().filter(|l| l.contains(" WARN ") && l.contains("rdma_cm")).count(),
        1,
        "one warning about rdma_cm: {log}"
    );
    let spec = read_spec(&any.bundle);
    assert!(
        spec["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["path"] == json!(netns.path())),
        "the managed namespace was touched"
    );

    // `require`: refused, and runc never runs.
    let require =
        ErrorCase::new("rocep-ens5", "network = \"require\"", &["ERDMA_VISIBLE_DEVICES=all"]);
    with_path(&require, &netns.path(), "true");
    require.expect_error(
        "run it with `--network host` (Docker, Podman) or `hostNetwork: true` (Kubernetes), or set network = \"any\"",
    );
    // Docker's libnetwork-setkey hook under `require`: the same.
    let docker = ErrorCase::new("one", "network = \"require\"", &["ERDMA_VISIBLE_DEVICES=all"]);
    let mut spec = read_spec(&docker.bundle);
    spec["hooks"] = json!({"prestart": [{"path": "/proc/self/exe", "args": ["libnetwork-setkey", "-exec-root=/var/run/docker", "0123", "4567"]}]});
    write_spec(&docker.bundle, &spec);
    docker.expect_error("configured to need host networking");

    // A host whose RDMA namespace mode is exclusive: the devices cannot be opened from there.
    let exclusive = ErrorCase::new("rocep-ens5", "", &["ERDMA_VISIBLE_DEVICES=all"]);
    std::fs::write(exclusive.fx.sysfs.join("module/ib_core/parameters/netns_mode"), "N\n").unwrap();
    with_path(&exclusive, &netns.path(), "true");
    exclusive.expect_error("RDMA namespace mode is exclusive");

    // A path to the host's own namespace is how Docker spells `--network host`
    // (`/var/run/docker/netns/default`): host networking, no refusal, no warning.
    let host = ErrorCase::new("one", "", &["ERDMA_VISIBLE_DEVICES=all"]);
    with_path(
        &host,
        Path::new(&format!("/proc/{}/ns/net", std::process::id())),
        "readlink /proc/self/ns/net; ls /dev/infiniband; echo $NCCL_SOCKET_IFNAME",
    );
    let out = runtime(
        &host.fx,
        &host.root,
        &["run", "--bundle", host.bundle.to_str().unwrap(), &RuncRoot::id("hostpath")],
    );
    assert_success("erdma-runtime run (host namespace path)", &out);
    assert_eq!(text(&out.stdout), format!("{}\nrdma_cm\nuverbs0\n=eth0\n", host_netns()));
    assert!(!host.fx.log_text().contains(" WARN "), "{}", host.fx.log_text());
}

/// A spec that creates a network namespace of its own (no engine sets it up) and that runc
/// runs only there: `net.*` sysctls (runc: "not allowed in host network namespace"), or a user
/// namespace with `/sys` mounted (EPERM on the host's network). Asking for eRDMA, it keeps its
/// namespace and runs as plain runc runs it, where it used to be put on the host's network and
/// refused by runc. (runtime-tools' `linux_sysctl` and `linux_uid_mappings` found it.)
#[test]
fn a_fresh_namespace_runc_needs_is_kept_root() {
    if !support::require_runc() {
        return;
    }
    let fx = Fixture::new("one", &format!("memlock = {MEMLOCK}"));
    // The user namespace's nodes are bind-mounted from the host's /dev.
    support::host_dev_nodes("one");
    let root = RuncRoot::new();
    let tmp = tempfile::tempdir().unwrap();
    // What makes each case: the spec's sysctls, or a user namespace (identity-mapped).
    let change = |name: &str, spec: &mut Value| match name {
        "sysctl" => spec["linux"]["sysctl"] = json!({"net.ipv4.ip_forward": "1"}),
        _ => {
            spec["linux"]["namespaces"].as_array_mut().unwrap().push(json!({"type": "user"}));
            let map = json!([{"containerID": 0, "hostID": 0, "size": 65536}]);
            spec["linux"]["uidMappings"] = map.clone();
            spec["linux"]["gidMappings"] = map;
        }
    };
    for name in ["sysctl", "userns"] {
        let bundle = busybox_bundle(&tmp.path().join(name));
        let mut spec = read_spec(&bundle);
        support::set_args(&mut spec, &["sh", "-c", "readlink /proc/self/ns/net; cat /proc/sys/net/ipv4/ip_forward; ls /sys/class/net; env"]);
        change(name, &mut spec);
        assert!(spec["mounts"].as_array().unwrap().iter().any(|m| m["type"] == "sysfs"));
        write_spec(&bundle, &spec);
        // Plain runc runs it.
        let out = Command::new("runc")
            .args(root.args())
            .args(["run", "--bundle", bundle.to_str().unwrap(), &RuncRoot::id(name)])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_success(&format!("runc run ({name})"), &out);
        // Asking, through erdma-runtime.
        support::add_env(&mut spec, &["ERDMA_VISIBLE_DEVICES=all"]);
        write_spec(&bundle, &spec);
        let id = RuncRoot::id(&format!("{name}-ask"));
        let out = runtime(&fx, &root, &["run", "--bundle", bundle.to_str().unwrap(), &id]);
        assert_success(&format!("erdma-runtime run ({name})"), &out);
        let stdout = text(&out.stdout);
        let mut lines = stdout.lines();
        let netns = lines.next().unwrap_or_default();
        assert_ne!(netns, host_netns(), "{name}: put on the host's network:\n{stdout}");
        if name == "sysctl" {
            assert_eq!(lines.next(), Some("1"), "{stdout}");
        }
        // Its own namespace holds `lo` alone: no interface to name for NCCL, the devices all
        // the same.
        assert!(stdout.lines().any(|l| l == "lo"), "{stdout}");
        assert!(stdout.lines().any(|l| l == "NCCL_IB_HCA==erdma_0:1"), "{stdout}");
        assert!(!stdout.lines().any(|l| l.starts_with("NCCL_SOCKET_IFNAME=")), "{stdout}");
        let after = read_spec(&bundle);
        assert_eq!(after["linux"]["namespaces"], spec["linux"]["namespaces"], "{name}");
        let log = fx.log_text();
        assert!(log.contains("rdma_cm"), "{log}");
    }
}

/// opencontainers/runtime-tools' validation suite, built from the source Debian serves for
/// trixie (scripts/runtime-validation/run): each of its 58 programs gives the same result under
/// erdma-runtime, with containers asking for eRDMA and not, as under plain runc. The programs
/// runc fails here fail for this machine's reasons (cgroup v2 without v1 controllers, no
/// SELinux or AppArmor, no CAP_SYS_RESOURCE), listed in docs/runtime-and-hooks.md.
#[test]
fn runtime_tools_validation_gives_runcs_results_root() {
    let docker = std::process::Command::new("docker")
        .arg("info")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !support::require_runc()
        || !support::require(docker, "a running docker daemon (run scripts/setup)")
        || !support::require(support::have("debootstrap"), "debootstrap (run scripts/setup)")
    {
        return;
    }
    let root = support::repo_root();
    let work = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("runtime-validation");
    let out = Command::new(root.join("scripts/runtime-validation/run"))
        .env("WORK", &work)
        .current_dir(&root)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_success("scripts/runtime-validation/run", &out);
    let stdout = text(&out.stdout);
    // The suite ran: every program, most of them passing under runc.
    let passing = |mode: &str| -> usize {
        let line = stdout.lines().find(|l| l.starts_with(&format!("{mode}:"))).unwrap_or_default();
        let words: Vec<&str> = line.split_whitespace().collect();
        words.windows(2).find(|w| w[1] == "PASS").and_then(|w| w[0].parse().ok()).unwrap_or(0)
    };
    // The table's rows: a program, then runc's, noask's and ask's verdicts.
    let programs = stdout
        .lines()
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() >= 4 && w[1..4].iter().all(|v| *v == "PASS" || *v == "FAIL")
        })
        .count();
    assert_eq!(programs, 58, "{stdout}");
    assert!(passing("runc") >= 30, "{stdout}");
    assert_eq!(passing("ask"), passing("runc"), "{stdout}");
    assert_eq!(passing("noask"), passing("runc"), "{stdout}");
}

#[test]
fn other_subcommands_pass_straight_through_root() {
    if !support::require_runc() {
        return;
    }
    let fx = Fixture::new("one", "");
    let root = RuncRoot::new();
    let plain = Command::new("runc").arg("--version").output().unwrap();
    let out = fx.command("erdma-runtime").arg("--version").output().unwrap();
    assert_success("erdma-runtime --version", &out);
    // runc's own lines first, as tools parse them (go-runc reads the first line, `docker info`
    // the last naming a version and the `commit:` line), then ours, which names neither.
    let ours = format!("erdma-runtime {}\n", env!("ERDMA_VERSION"));
    assert_eq!(text(&out.stdout), text(&plain.stdout) + &ours);
    assert!(!ours.contains("version") && !ours.contains("commit:"), "{ours}");
    // runc's exit code and messages, untouched.
    let plain =
        Command::new("runc").args(root.args()).args(["state", "no-such-ctr"]).output().unwrap();
    let out = runtime(&fx, &root, &["state", "no-such-ctr"]);
    assert_eq!(out.status.code(), plain.status.code());
    assert_ne!(out.status.code(), Some(0));
    // runc stamps its messages with the second it wrote them (`time="…"`): the two runs may
    // straddle a second, so the stamp is left out of the comparison.
    let unstamped = |s: &str| {
        s.lines()
            .map(|l| l.split_once(" level=").map_or(l, |(_, rest)| rest).to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(unstamped(&text(&out.stderr)), unstamped(&text(&plain.stderr)));
    assert!(text(&out.stderr).contains("container does not exist"), "{}", text(&out.stderr));
    let out = runtime(&fx, &root, &["list", "--format", "json"]);
    assert_success("erdma-runtime list", &out);
    assert_eq!(text(&out.stdout).trim(), "null");
    // Not create/run: a bundle-looking argument is not read (it does not even exist).
    let out = runtime(&fx, &root, &["delete", "--force", "no-such-ctr"]);
    assert_eq!(
        out.status.code(),
        Command::new("runc")
            .args(root.args())
            .args(["delete", "--force", "no-such-ctr"])
            .status()
            .unwrap()
            .code()
    );
    assert!(!text(&out.stderr).contains("erdma-runtime"), "{}", text(&out.stderr));
}

#[test]
fn fifty_concurrent_creates_root() {
    if !support::require_runc() {
        return;
    }
    let fx = Fixture::new("two", &format!("memlock = {MEMLOCK}"));
    let root = RuncRoot::new();
    let tmp = tempfile::tempdir().unwrap();
    let rootfs = support::busybox_rootfs(&tmp.path().join("rootfs"));
    let fx = &fx;
    let root = &root;
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..50)
            .map(|i| {
                let dir = tmp.path().join(format!("b{i}"));
                let rootfs = rootfs.clone();
                s.spawn(move || -> Result<(), String> {
                    let bundle = support::bundle_with_rootfs(&dir, &rootfs);
                    let mut spec = read_spec(&bundle);
                    support::set_args(&mut spec, &["sleep", "60"]);
                    // A third ask for all, a third for erdma_1, a third do not ask.
                    let ask = match i % 3 {
                        0 => Some("all"),
                        1 => Some("erdma_1"),
                        _ => None,
                    };
                    if let Some(a) = ask {
                        support::add_env(&mut spec, &[&format!("ERDMA_VISIBLE_DEVICES={a}")]);
                    }
                    spec["annotations"] = json!({"test.index": i.to_string()});
                    write_spec(&bundle, &spec);
                    let before = std::fs::read(bundle.join("config.json")).unwrap();
                    let id = RuncRoot::id(&format!("c{i}"));
                    // The container's init keeps runc's stdio: files, not pipes we would wait on.
                    let errf = std::fs::File::create(dir.join("stderr")).unwrap();
                    let st = fx
                        .command("erdma-runtime")
                        .args(root.args())
                        .args(["create", "--bundle", bundle.to_str().unwrap(), &id])
                        .stdout(Stdio::null())
                        .stderr(errf)
                        .status()
                        .unwrap();
                    let err = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
                    if !st.success() {
                        return Err(format!("{i}: create: {st}: {err}"));
                    }
                    let state = Command::new("runc")
                        .args(root.args())
                        .args(["state", &id])
                        .output()
                        .unwrap();
                    let state: Value = serde_json::from_slice(&state.stdout)
                        .map_err(|e| format!("{i}: state: {e}"))?;
                    if state["status"] != "created" {
                        return Err(format!("{i}: state {state}"));
                    }
                    let s = read_spec(&bundle);
                    let check = match ask {
                        None => (std::fs::read(bundle.join("config.json")).unwrap() == before)
                            .then_some(())
                            .ok_or("not byte-identical".to_string()),
                        Some(a) => check_spec(&s, a, i),
                    };
                    let del = fx
                        .command("erdma-runtime")
                        .args(root.args())
                        .args(["delete", &id])
                        .output()
                        .unwrap();
                    check.map_err(|e| format!("{i}: {e}"))?;
                    if !del.status.success() {
                        return Err(format!("{i}: delete: {}", text(&del.stderr)));
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let failures: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        failures.is_empty(),
        "{} of 50 failed:\n{}",
        failures.len(),
        failures.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
    );
    let log = fx.log_text();
    assert_eq!(log.lines().filter(|l| l.contains("eRDMA edit of container")).count(), 34, "{log}");
    assert!(std::fs::read_dir(root.path()).unwrap().next().is_none(), "containers left behind");
}

/// The edit a container asking for `ask` ("all" or "erdma_1") on the `two` fixture gets.
fn check_spec(s: &Value, ask: &str, i: usize) -> Result<(), String> {
    let (hca, minors): (&str, &[u64]) = if ask == "all" {
        ("=erdma_0:1,erdma_1:1", &[192, 193, 58])
    } else {
        ("=erdma_1:1", &[193, 58])
    };
    let got: Vec<u64> = s["linux"]["devices"]
        .as_array()
        .ok_or("no devices")?
        .iter()
        .filter_map(|d| d["minor"].as_u64())
        .collect();
    let memlock: Vec<&Value> = s["process"]["rlimits"]
        .as_array()
        .ok_or("no rlimits")?
        .iter()
        .filter(|r| r["type"] == "RLIMIT_MEMLOCK")
        .collect();
    let ok = got == minors
        && memlock == [&json!({"type": "RLIMIT_MEMLOCK", "hard": MEMLOCK, "soft": MEMLOCK})]
        && env_of(s, "NCCL_IB_HCA") == Some(hca)
        && s["annotations"]["test.index"].as_str() == Some(i.to_string().as_str())
        && !s["linux"]["namespaces"]
            .as_array()
            .ok_or("no namespaces")?
            .iter()
            .any(|n| n["type"] == "network");
    ok.then_some(()).ok_or_else(|| format!("wrong spec for {ask}: {s}"))
}

#[test]
fn precreate_edits_stdin_to_stdout_root() {
    if !support::require(support::is_root(), "root is needed to mknod fixture nodes") {
        return;
    }
    let fx = Fixture::new("four", "memlock = 65536");
    let run = |input: &[u8]| support::precreate(&fx, input);
    let spec = json!({
        "ociVersion": "1.0.2",
        "process": {"args": ["sh"], "env": ["PATH=/bin", "ERDMA_VISIBLE_DEVICES=rocep9s0"]},
        "linux": {"namespaces": [{"type": "network"}, {"type": "mount"}]},
        "x-podman": 1
    });
    let out = run(&serde_json::to_vec(&spec).unwrap());
    assert_success("precreate", &out);
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(env_of(&s, "NCCL_IB_HCA"), Some("=rocep9s0:1"));
    // MTU 1400 on this fixture: LL128 off.
    assert_eq!(env_of(&s, "NCCL_PROTO"), Some("^LL128"));
    assert_eq!(s["linux"]["namespaces"], json!([{"type": "mount"}]));
    assert_eq!(s["linux"]["devices"][0]["path"], "/dev/infiniband/uverbs0");
    assert_eq!(s["x-podman"], 1);
    assert!(fx.log_text().contains("NCCL_PROTO=^LL128"), "{}", fx.log_text());
    // Not asking: the same bytes back.
    let raw = b"{\"ociVersion\":\"1.0.2\",\n  \"process\": {\"env\": []}}".to_vec();
    let out = run(&raw);
    assert_success("precreate", &out);
    assert_eq!(out.stdout, raw);
    // Errors: exit 1, nothing on stdout.
    let out = run(b"{\"process\": {\"env\": [\"ERDMA_VISIBLE_DEVICES=all\"]}");
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).contains("malformed OCI spec stdin"), "{}", text(&out.stderr));
    // Bytes that cannot ask come back unparsed, as they were.
    let out = run(b"{");
    assert_success("precreate", &out);
    assert_eq!(out.stdout, b"{");
}

/// A call erdma-runtime only hands over (here `state`) execs the real runtime alike whichever
/// way it takes: the quick one, for a configuration file of the plainest form with nothing to
/// log (`runtime::handover`), and the long one, for a file that says the same in other TOML
/// (an escape) or asks for debug lines. The runtime, a script, records the program run (a
/// script's `$0` is its path, found on PATH for a name), its arguments and whether SIGPIPE is
/// ignored: the caller ignores it, and both ways give the runtime the default, as std's
/// `Command` does. A setting only `create` reads (`memlock`) is
/// wrong in every file: the calls that hand over do not read it, and `create` refuses it.
#[test]
fn handing_over_execs_alike_either_way() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let record = tmp.path().join("record");
    let spy = bin.join("spy-rt");
    std::fs::write(
        &spy,
        format!(
            "#!/bin/sh\n{{ printf '%s\\n' \"$0\" \"$@\"; grep '^SigIgn:' /proc/self/status; }} > '{}'\n",
            record.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&spy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = tmp.path().join("oci-hook.toml");
    let log = tmp.path().join("erdma.log");
    let bundle = tmp.path().join("bundle");
    std::fs::create_dir(&bundle).unwrap();
    let call = |toml: &str, args: &[&str]| -> (Output, String) {
        std::fs::write(&config, toml).unwrap();
        let _ = std::fs::remove_file(&record);
        let out = Command::new("sh")
            .current_dir(&bundle)
            .arg("-c")
            .arg("trap '' PIPE; exec \"$@\"")
            .arg("sh")
            .arg(support::bin("erdma-runtime"))
            .args(args)
            .env("ERDMA_OCI_HOOK_CONFIG", &config)
            .env("PATH", format!("/nonexistent:{}:/usr/bin:/bin", bin.display()))
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (out, std::fs::read_to_string(&record).unwrap_or_default())
    };
    let args = ["--root", "/run/x", "--log", "/run/x/log.json", "state", "ctr-1"];
    let log_line = format!("log_file = \"{}\"\n", log.display());
    for runtime in [spy.display().to_string(), "spy-rt".to_string()] {
        let escaped = runtime.replacen('s', "\\u0073", 1);
        let quick = format!(
            "runtime = \"{runtime}\"\nlog_level = \"info\"\nmemlock = \"lots\"\n{log_line}"
        );
        let long = format!(
            "runtime = \"{escaped}\"\nlog_level = \"info\"\nmemlock = \"lots\"\n{log_line}"
        );
        let debug = format!(
            "runtime = \"{runtime}\"\nlog_level = \"debug\"\nmemlock = \"lots\"\n{log_line}"
        );
        assert_eq!(
            erdma_oci_hook::config::handover_plain(quick.as_bytes())
                .map(|p| (p.runtime.is_some(), p.first_look)),
            Some((true, true))
        );
        assert_eq!(erdma_oci_hook::config::handover_plain(long.as_bytes()), None);
        let mut seen = Vec::new();
        for toml in [&quick, &long, &debug] {
            let (out, record) = call(toml, &args);
            assert_success("erdma-runtime state", &out);
            assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{}", text(&out.stderr));
            let lines: Vec<&str> = record.lines().collect();
            assert_eq!(lines[0], spy.display().to_string(), "{record}");
            assert_eq!(lines[1..lines.len() - 1], args, "{record}");
            let ignored =
                u64::from_str_radix(lines.last().unwrap().split_whitespace().nth(1).unwrap(), 16)
                    .unwrap();
            assert_eq!(
                ignored & (1 << (13 - 1)),
                0,
                "SIGPIPE not ignored in the runtime: {record}"
            );
            seen.push(record);
        }
        assert!(seen.iter().all(|r| *r == seen[0]), "{seen:?}");
        // Only the debug file made a log line, the exec's.
        assert!(std::fs::read_to_string(&log).unwrap().contains("exec "), "debug logs the exec");
        std::fs::remove_file(&log).unwrap();
        // A create of a container that cannot ask is handed over alike, whatever the edit's
        // settings say (`memlock` here), from a bundle named or the current directory.
        let b = bundle.to_str().unwrap();
        std::fs::write(bundle.join("config.json"), r#"{"process":{"env":["PATH=/bin"]}}"#).unwrap();
        for create in [&["create", "--bundle", b, "ctr-1"][..], &["run", "ctr-1"]] {
            let mut seen = Vec::new();
            for toml in [&quick, &long, &debug] {
                let (out, record) = call(toml, create);
                assert_success("erdma-runtime create", &out);
                let lines: Vec<&str> = record.lines().collect();
                assert_eq!(lines[0], spy.display().to_string(), "{record}");
                assert_eq!(lines[1..lines.len() - 1], *create, "{record}");
                seen.push(record);
            }
            assert!(seen.iter().all(|r| *r == seen[0]), "{seen:?}");
        }
        std::fs::remove_file(&log).unwrap();
        // One that may ask reads and checks the whole file: refused for its memlock, the spec
        // untouched, the runtime not run.
        let asking = r#"{"process":{"env":["ERDMA_VISIBLE_DEVICES=all"]}}"#;
        std::fs::write(bundle.join("config.json"), asking).unwrap();
        for toml in [&quick, &long] {
            let (out, record) = call(toml, &["create", "--bundle", b, "ctr-1"]);
            assert_eq!(out.status.code(), Some(1));
            assert!(text(&out.stderr).contains("unlimited"), "{}", text(&out.stderr));
            assert!(record.is_empty(), "the runtime was not run: {record}");
            assert_eq!(std::fs::read_to_string(bundle.join("config.json")).unwrap(), asking);
        }
        // A table takes the keys after it out of the top level: refused for a container that
        // does not ask too, not read as the default `none`.
        std::fs::write(bundle.join("config.json"), r#"{"process":{"env":["PATH=/bin"]}}"#).unwrap();
        let table = format!("runtime = \"{runtime}\"\n[network]\ndefault_request = \"all\"\n");
        let (out, record) = call(&table, &["create", "--bundle", b, "ctr-1"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        assert!(record.is_empty(), "the runtime was not run: {record}");
    }
}
