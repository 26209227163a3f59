//! The CRI harness (`support::cri`) against a real containerd 1.7 (root, daemon): pods and
//! containers made through the CRI API as kubelet makes them, seen from inside with ExecSync.
//! - A host-network pod whose container gets its env, the daemon's limits and a device node
//!   passed as a CRI `Device` (kubelet's path for a device plugin's `DeviceSpec`).
//! - CDI: a spec written into the daemon's `cdi_spec_dirs` reaches a container named in CRI's
//!   `CDI_devices` field (kubelet's path for a device plugin's `CDIDevice`s) and in a
//!   `cdi.k8s.io/` annotation (the older one).
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::time::Instant;

use serde_json::{json, Value};

use crate::support::cri::{
    pb, require_containerd17, Container, Containerd17, Device, Options, ERDMA_HANDLER,
};
use crate::support::mknod;

/// The line of `/proc/PID/limits` for `name` (`Max locked memory`), spaces squeezed.
fn limit_line(limits: &str, name: &str) -> String {
    let line = limits
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no {name} in {limits}"));
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A device node of the eRDMA kind, `infiniband/uverbsN` (char 231:192+N), under `dir`.
fn uverbs(dir: &Path, n: u32) -> std::path::PathBuf {
    let path = dir.join(format!("dev/infiniband/uverbs{n}"));
    mknod(&path, 'c', 231, 192 + n);
    path
}

/// `linux.devices` and `linux.resources.devices` of a runtime spec, for `major:minor`.
fn spec_device(spec: &Value, major: u64, minor: u64) -> (Option<Value>, Option<Value>) {
    let node = spec["linux"]["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["major"] == major && d["minor"] == minor)
        .cloned();
    let rule = spec["linux"]["resources"]["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["allow"] == true && d["major"] == major && d["minor"] == minor)
        .cloned();
    (node, rule)
}

#[test]
fn cri_host_network_pod_gets_env_limits_and_a_cri_device_root_daemon() {
    if !require_containerd17() {
        return;
    }
    let t0 = Instant::now();
    let host = tempfile::Builder::new().prefix("erdma-cri-dev-").tempdir().unwrap();
    let node = uverbs(host.path(), 0);
    let h = Containerd17::start(Options::default());
    assert!(h.version.starts_with("1.7."), "{}", h.version);
    assert!(
        std::fs::metadata(h.nri_socket()).unwrap().file_type().is_socket(),
        "NRI listens on {}",
        h.nri_socket().display()
    );
    let started = t0.elapsed();

    let pod = h.run_pod("cri-basic", true, &[("erdma.test/pod", "yes")], "");
    let c = h.create_and_start(
        &pod,
        &Container {
            envs: vec![("ERDMA_IT".into(), "42".into())],
            devices: vec![Device {
                host_path: node.clone(),
                container_path: "/dev/infiniband/uverbs0".into(),
                permissions: "rw".into(),
            }],
            ..Default::default()
        },
    );
    let status = h.container_status(&c, false).status.unwrap();
    assert_eq!(status.state, pb::ContainerState::ContainerRunning as i32, "{status:?}");

    // Host networking: the container is in containerd's network namespace, the host's.
    let (code, out, err) = h.exec_sync(&c, &["readlink", "/proc/self/ns/net"]);
    assert_eq!(
        (code, out.trim()),
        (0, std::fs::read_link("/proc/self/ns/net").unwrap().to_str().unwrap()),
        "{err}"
    );

    // The env, and the limits: containerd 1.7's CRI sets no rlimits of its own, so a
    // container has the daemon's, which it has from us.
    let (code, env, err) = h.exec_sync(&c, &["env"]);
    assert_eq!(code, 0, "{err}");
    assert!(env.lines().any(|l| l == "ERDMA_IT=42"), "{env}");
    let (code, limits, err) = h.exec_sync(&c, &["cat", "/proc/self/limits"]);
    assert_eq!(code, 0, "{err}");
    let ours = std::fs::read_to_string("/proc/self/limits").unwrap();
    assert_eq!(
        limit_line(&limits, "Max locked memory"),
        limit_line(&ours, "Max locked memory"),
        "{limits}"
    );

    // The device: the node at its container path, and a cgroup rule letting it be opened
    // (nothing drives 231:192 here, so an open fails with ENXIO; EPERM would be the cgroup).
    let (code, out, err) = h.exec_sync(&c, &["stat", "-c", "%F %t:%T", "/dev/infiniband/uverbs0"]);
    assert_eq!((code, out.trim()), (0, "character special file e7:c0"), "{err}");
    let (code, out, err) = h.exec_sync(&c, &["sh", "-c", "cat /dev/infiniband/uverbs0 2>&1"]);
    assert_ne!(code, 0);
    assert!(out.contains("No such device or address"), "open inside: {out}{err}");
    let spec = h.runtime_spec(&c);
    let (node_entry, rule) = spec_device(&spec, 231, 192);
    assert_eq!(
        node_entry.map(|n| (n["path"].clone(), n["type"].clone())),
        Some((json!("/dev/infiniband/uverbs0"), json!("c"))),
        "{}",
        spec["linux"]
    );
    assert_eq!(
        rule.map(|r| r["access"].clone()),
        Some(json!("rw")),
        "{}",
        spec["linux"]["resources"]
    );

    // ExecSync reports the exit code and both streams.
    assert_eq!(
        h.exec_sync(&c, &["sh", "-c", "echo out; echo err >&2; exit 3"]),
        (3, "out\n".into(), "err\n".into())
    );

    h.stop_and_remove_container(&c, 0);
    h.remove_pod(&pod).unwrap();
    let ran = t0.elapsed();
    drop(h);
    eprintln!(
        "containerd up in {started:?}, cases done in {ran:?}, torn down in {:?}",
        t0.elapsed() - ran
    );
}

#[test]
fn cri_cdi_device_reaches_the_container_root_daemon() {
    if !require_containerd17() {
        return;
    }
    let t0 = Instant::now();
    let host = tempfile::Builder::new().prefix("erdma-cri-dev-").tempdir().unwrap();
    let (n0, n1) = (uverbs(host.path(), 0), uverbs(host.path(), 1));
    let h = Containerd17::start(Options::default());
    let spec = json!({
        "cdiVersion": "0.5.0",
        "kind": "erdma.test/rdma",
        "devices": [
            {"name": "uverbs0", "containerEdits": {"deviceNodes": [{"path": "/dev/infiniband/uverbs0", "hostPath": n0}], "env": ["ERDMA_CDI_DEVICE=uverbs0"]}},
            {"name": "uverbs1", "containerEdits": {"deviceNodes": [{"path": "/dev/infiniband/uverbs1", "hostPath": n1}], "env": ["ERDMA_CDI_DEVICE=uverbs1"]}},
        ],
        "containerEdits": {"env": ["ERDMA_CDI_SPEC=1"]},
    });
    std::fs::write(h.cdi_dir().join("erdma-test.json"), serde_json::to_vec_pretty(&spec).unwrap())
        .unwrap();

    let pod = h.run_pod("cri-cdi", true, &[], "");
    // CRI's CDI_devices field, as kubelet passes a device plugin's CDIDevice.
    let by_field = h.create_and_start(
        &pod,
        &Container {
            name: "field".into(),
            cdi_devices: vec!["erdma.test/rdma=uverbs0".into()],
            ..Default::default()
        },
    );
    // The `cdi.k8s.io/` annotation, as device plugins did before the field.
    let by_annotation = h.create_and_start(
        &pod,
        &Container {
            name: "annotation".into(),
            annotations: vec![("cdi.k8s.io/erdma-test".into(), "erdma.test/rdma=uverbs1".into())],
            ..Default::default()
        },
    );
    for (c, n, hex) in [(&by_field, 0u32, "e7:c0"), (&by_annotation, 1, "e7:c1")] {
        let path = format!("/dev/infiniband/uverbs{n}");
        let (code, out, err) = h.exec_sync(c, &["stat", "-c", "%F %t:%T", &path]);
        assert_eq!(
            (code, out.trim().to_string()),
            (0, format!("character special file {hex}")),
            "{err}\n{}",
            h.log_tail(20)
        );
        let (_, env, _) = h.exec_sync(c, &["env"]);
        assert!(
            env.lines().any(|l| l == format!("ERDMA_CDI_DEVICE=uverbs{n}"))
                && env.lines().any(|l| l == "ERDMA_CDI_SPEC=1"),
            "{env}"
        );
        let (_, out, _) = h.exec_sync(c, &["sh", "-c", &format!("cat {path} 2>&1")]);
        assert!(out.contains("No such device or address"), "open inside: {out}");
        let rt_spec = h.runtime_spec(c);
        let (node, rule) = spec_device(&rt_spec, 231, 192 + u64::from(n));
        assert!(
            node.is_some() && rule.is_some(),
            "CDI adds the node and its cgroup rule: {}",
            rt_spec["linux"]
        );
    }
    drop(h);
    eprintln!("CDI case with start and teardown: {:?}", t0.elapsed());
}

/// The `erdma` runtime handler ([`Options::erdma_runtime`], as `configure containerd` registers
/// it) runs the binary given, with `com.alibabacloud.erdma.devices` let through from the pod to
/// the OCI spec and other annotations not; and the harness works from a test's async code.
#[test]
fn cri_erdma_handler_runs_the_given_binary_with_the_annotation_root_daemon() {
    if !require_containerd17() {
        return;
    }
    let dir = tempfile::Builder::new().prefix("erdma-cri-spy-").tempdir().unwrap();
    let marker = dir.path().join("calls");
    let spy = crate::support::spy_runtime(dir.path(), &marker, Some("runc"));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let h = Containerd17::start(Options { erdma_runtime: Some(spy), ..Default::default() });
        let pod = h.run_pod(
            "cri-erdma",
            true,
            &[(erdma_oci_hook::request::ANNOTATION, "all"), ("erdma.test/other", "1")],
            ERDMA_HANDLER,
        );
        let c = h.create_and_start(&pod, &Container::default());
        let calls = std::fs::read_to_string(&marker).unwrap();
        assert_eq!(
            calls.lines().filter(|l| *l == "create").count(),
            2,
            "the pause and the test container: {calls}"
        );
        let annotations = h.runtime_spec(&c)["annotations"].clone();
        assert_eq!(annotations[erdma_oci_hook::request::ANNOTATION], "all", "{annotations}");
        assert!(annotations.get("erdma.test/other").is_none(), "{annotations}");
        // A pod on the default handler (runc) gets no annotation through.
        let plain =
            h.run_pod("cri-plain", true, &[(erdma_oci_hook::request::ANNOTATION, "all")], "");
        let c = h.create_and_start(&plain, &Container::default());
        assert!(h.runtime_spec(&c)["annotations"]
            .get(erdma_oci_hook::request::ANNOTATION)
            .is_none());
        // Without CNI, a pod with a network namespace of its own is refused.
        let err = h.try_run_pod("cri-podnet", false, &[], "").unwrap_err();
        assert!(err.message().contains("cni"), "{err:?}");
    });
}
