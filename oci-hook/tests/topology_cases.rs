//! GPUs beside ERIs: the spec edits for containers given some or all GPUs on the GPU fixture
//! hosts (`testdata/sysfs/gpu*`), through `erdma-oci-hook precreate` and, with real runc,
//! `erdma-runtime`; `doctor`'s GPU Direct RDMA verdict. Names ending in `_root` need root (mknod)
//! and, where they run containers, runc.
use std::process::Output;

use serde_json::{json, Value};

use crate::support::{self, assert_success, env_of, Fixture};

const MEMLOCK: u64 = 4_194_304;

fn root() -> bool {
    support::require(support::is_root(), "root is needed to mknod the fixture's device nodes")
}

/// `erdma-oci-hook precreate` on `spec` under `fx`'s config.
fn precreate(fx: &Fixture, spec: &Value) -> (Output, Value) {
    let out = support::precreate(fx, &serde_json::to_vec(spec).unwrap());
    assert_success("precreate", &out);
    let edited = serde_json::from_slice(&out.stdout).unwrap();
    (out, edited)
}

fn spec_with(env: &[&str], devices: Value) -> Value {
    let mut e = vec!["PATH=/bin"];
    e.extend(env);
    json!({"ociVersion": "1.0.2", "process": {"args": ["sh"], "env": e}, "linux": {"devices": devices}})
}

fn node_paths(s: &Value) -> Vec<&str> {
    s["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["path"].as_str())
        .filter(|p| p.starts_with("/dev/infiniband/"))
        .collect()
}

#[test]
fn a_container_given_some_gpus_gets_their_eris_root() {
    if !root() {
        return;
    }
    // 8 GPUs and 4 ERIs on two NUMA nodes: GPUs 4-7 and erdma_2, erdma_3 share node 1.
    let fx = Fixture::new("gpu8-eri4", "");
    let (_, s) = precreate(
        &fx,
        &spec_with(&["ERDMA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=4,5"], json!([])),
    );
    assert_eq!(
        node_paths(&s),
        ["/dev/infiniband/uverbs2", "/dev/infiniband/uverbs3", "/dev/infiniband/rdma_cm"]
    );
    assert_eq!(env_of(&s, "NCCL_IB_HCA"), Some("=erdma_2:1,erdma_3:1"));
    assert_eq!(env_of(&s, "NCCL_SOCKET_IFNAME"), Some("=eth3,eth4"));
    assert_eq!(env_of(&s, "NCCL_IB_GID_INDEX"), Some("1"));
    // nvidia_peermem is loaded and the GPUs are PHB from their ERIs: NCCL needs the level.
    assert_eq!(env_of(&s, "NCCL_NET_GDR_LEVEL"), Some("PHB"));
    assert_eq!(env_of(&s, "NCCL_NET"), Some("IB"));
    let log = fx.log_text();
    assert!(log.contains("the container's GPUs: NVIDIA_VISIBLE_DEVICES=4,5"), "{log}");
    assert!(log.contains("GPU 4 (0000:98:00.0) -> erdma_2, erdma_3 (PHB)"), "{log}");

    // The GPU as CDI gives it (its node in the spec): /dev/nvidia2 is GPU 2, on node 0.
    let nodes = json!([{"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255},
                       {"path": "/dev/nvidia2", "type": "c", "major": 195, "minor": 2}]);
    let (_, s) = precreate(&fx, &spec_with(&["ERDMA_VISIBLE_DEVICES=all"], nodes));
    assert_eq!(env_of(&s, "NCCL_IB_HCA"), Some("=erdma_0:1,erdma_1:1"));
    assert_eq!(env_of(&s, "NCCL_NET_GDR_LEVEL"), Some("PHB"));

    // ERIs named are given as named, whatever the GPUs: the level admits the farther path.
    let (_, s) = precreate(
        &fx,
        &spec_with(&["ERDMA_VISIBLE_DEVICES=erdma_3", "NVIDIA_VISIBLE_DEVICES=0"], json!([])),
    );
    assert_eq!(env_of(&s, "NCCL_IB_HCA"), Some("=erdma_3:1"));
    assert_eq!(env_of(&s, "NCCL_NET_GDR_LEVEL"), Some("SYS"));
    let log = fx.log_text();
    assert!(
        log.contains("GPU 0 (0000:18:00.0) -> erdma_0, erdma_1 (PHB; not given: erdma_0, erdma_1)"),
        "{log}"
    );
    // Every GPU: every ERI.
    let (_, s) = precreate(
        &fx,
        &spec_with(&["ERDMA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=all"], json!([])),
    );
    assert_eq!(env_of(&s, "NCCL_IB_HCA"), Some("=erdma_0:1,erdma_1:1,erdma_2:1,erdma_3:1"));
}

#[test]
fn equally_near_eris_are_all_given_and_gids_chosen_by_address_root() {
    if !root() {
        return;
    }
    // The runbook's host: both ERIs SYS from every GPU. Both are nearest for any GPU, and
    // NCCL spreads its channels over them (docs/benchmarks.md, bench/nccl_topology.sh).
    let fx = Fixture::new("gpu8-eri2", "");
    for gpus in ["4,5", "all", "0"] {
        let visible = format!("NVIDIA_VISIBLE_DEVICES={gpus}");
        let (_, s) =
            precreate(&fx, &spec_with(&["ERDMA_VISIBLE_DEVICES=all", &visible], json!([])));
        assert_eq!(
            node_paths(&s),
            ["/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1", "/dev/infiniband/rdma_cm"],
            "{gpus}"
        );
        assert_eq!(env_of(&s, "NCCL_IB_HCA"), Some("=erdma_0:1,erdma_1:1"));
        // GID indexes 2 and 1: chosen by address, in the ERIs' 192.168.4.21 and .22.
        assert_eq!(env_of(&s, "NCCL_IB_GID_INDEX"), Some("-1"));
        assert_eq!(env_of(&s, "NCCL_IB_ADDR_FAMILY"), Some("AF_INET"));
        assert_eq!(env_of(&s, "NCCL_IB_ADDR_RANGE"), Some("192.168.4.20/30"));
        assert_eq!(env_of(&s, "NCCL_NET_GDR_LEVEL"), Some("SYS"));
        assert_eq!(env_of(&s, "NCCL_TOPO_FILE"), None, "NCCL needs no file to use both");
        assert!(s.get("mounts").is_none(), "{s}");
    }

    // No peermem: no level, and the log says why.
    std::fs::remove_dir_all(fx.sysfs.join("module/nvidia_peermem")).unwrap();
    let (_, s) = precreate(&fx, &spec_with(&["ERDMA_VISIBLE_DEVICES=all"], json!([])));
    assert_eq!(env_of(&s, "NCCL_NET_GDR_LEVEL"), None);
    assert!(
        fx.log_text().contains(
            "GPU Direct RDMA cannot work on this host: no NVIDIA peer-memory module is loaded"
        ),
        "{}",
        fx.log_text()
    );
}

#[test]
fn the_users_own_values_and_tcp_fallback_root() {
    if !root() {
        return;
    }
    let fx = Fixture::new("gpu2-eri1", "");
    let (_, s) = precreate(
        &fx,
        &spec_with(
            &["ERDMA_VISIBLE_DEVICES=all", "NCCL_NET=Socket", "NCCL_NET_GDR_LEVEL=PXB"],
            json!([]),
        ),
    );
    assert_eq!(env_of(&s, "NCCL_NET"), Some("Socket"));
    assert_eq!(env_of(&s, "NCCL_NET_GDR_LEVEL"), Some("PXB"));
    let env = s["process"]["env"].as_array().unwrap();
    assert_eq!(env.iter().filter(|e| e.as_str().unwrap().starts_with("NCCL_NET=")).count(), 1);
    // A one-node VM: the GPUs are PHB from the ERI.
    let (_, s) = precreate(&fx, &spec_with(&["ERDMA_VISIBLE_DEVICES=all"], json!([])));
    assert_eq!(env_of(&s, "NCCL_NET_GDR_LEVEL"), Some("PHB"));
    assert_eq!(env_of(&s, "NCCL_NET"), Some("IB"));
    fx.write_config("tcp_fallback = true");
    let (_, s) = precreate(&fx, &spec_with(&["ERDMA_VISIBLE_DEVICES=all"], json!([])));
    assert_eq!(env_of(&s, "NCCL_NET"), None);
    assert_eq!(env_of(&s, "NCCL_IB_HCA"), Some("=erdma_0:1"));
}

/// Real runc: a container given GPUs of one NUMA node has only that node's ERIs.
#[test]
fn a_container_with_gpus_of_one_node_sees_only_its_eris_root() {
    if !support::require_runc() {
        return;
    }
    let fx = Fixture::new("gpu8-eri4", &format!("memlock = {MEMLOCK}"));
    let stdout = support::run_busybox(
        &fx,
        "gpu-node",
        &["sh", "-c", "ls /dev/infiniband; env"],
        &["ERDMA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=6"],
    );
    let nodes: Vec<&str> = stdout.lines().take_while(|l| !l.contains('=')).collect();
    assert_eq!(nodes, ["rdma_cm", "uverbs2", "uverbs3"], "{stdout}");
    for var in ["NCCL_IB_HCA==erdma_2:1,erdma_3:1", "NCCL_NET_GDR_LEVEL=PHB", "NCCL_NET=IB"] {
        assert!(stdout.lines().any(|l| l == var), "{var} missing:\n{stdout}");
    }
    assert!(
        fx.log_text().contains("GPU 6 (0000:a8:00.0) -> erdma_2, erdma_3 (PHB)"),
        "{}",
        fx.log_text()
    );
}

#[test]
fn doctor_says_whether_nccl_will_use_gdr_root() {
    if !root() {
        return;
    }
    let doctor = |fx: &Fixture| -> Value {
        let out = fx.command("erdma-oci-hook").args(["doctor", "--json"]).output().unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "gpu-direct-rdma")
            .unwrap()
            .clone()
    };
    let fx = Fixture::new("gpu8-eri2", "");
    let c = doctor(&fx);
    assert_eq!(c["status"], "ok", "{c}");
    let m = c["message"].as_str().unwrap();
    assert!(m.starts_with("NCCL alone would not use GPU Direct RDMA here (GPU 0 SYS from erdma_0, erdma_1, GPU 1 SYS from erdma_0, erdma_1 and 6 more: beyond its default PXB); containers that ask get NCCL_NET_GDR_LEVEL=SYS"), "{m}");
    assert_eq!(c["details"]["gpus"], 8);
    fx.write_config("env_presets = false");
    let c = doctor(&fx);
    assert_eq!(c["status"], "warn", "{c}");
    assert!(c["hint"].as_str().unwrap().contains("NCCL_NET_GDR_LEVEL=SYS"), "{c}");
    std::fs::remove_dir_all(fx.sysfs.join("module/nvidia_peermem")).unwrap();
    fx.write_config("");
    let c = doctor(&fx);
    assert_eq!(c["status"], "warn", "{c}");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .starts_with("NCCL will not use GPU Direct RDMA: no NVIDIA peer-memory module"),
        "{c}"
    );
    // The dma-buf path: a recent kernel and NVIDIA's open module, named as not enough for erdma.
    std::fs::create_dir_all(fx.dir.path().join("proc/sys/kernel")).unwrap();
    std::fs::write(fx.dir.path().join("proc/sys/kernel/osrelease"), "6.8.0-45-generic\n").unwrap();
    std::fs::write(
        fx.dir.path().join("proc/driver/nvidia/version"),
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\n",
    )
    .unwrap();
    let c = doctor(&fx);
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("upstream rdma-core's erdma provider cannot register it"),
        "{c}"
    );
    assert_eq!(c["details"]["dmabuf_host"], true);
}
