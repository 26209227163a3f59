//! erdma-nri-plugin under a real containerd 1.7 (Debian 13's) with NRI on, driven through the
//! CRI as kubelet drives it (`RunPodSandbox`, `CreateContainer`, `StartContainer`), over the
//! `two` sysfs fixture with mknod'd nodes. What a container ends up with is read from inside it
//! (`ExecSync`): its device nodes, `/proc/self/limits`, its env.
//!
//! The device plugin's part is played as kubelet plays it: the IDs it advertises, its Allocate
//! answer (`deviceplugin::allocate`, what `erdma-device-plugin` sends over gRPC; the gRPC side is
//! deviceplugin_cases'), turned into CRI `devices` and `envs`.
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use erdma_kube::deviceplugin::{self, PluginConfig};
use erdma_oci_hook::discover;
use serde_json::Value;

use crate::support::cri::{require_containerd17, Container, Containerd17, Device, Options};
use crate::support::Fixture;

/// memlock the asking containers get: within this machine's 8 MiB hard limit (no
/// CAP_SYS_RESOURCE to raise it); the unlimited default is asserted on the adjustment in
/// `nri::adjust`'s unit tests.
const MEMLOCK: u64 = 4 << 20;

/// The plugin as a DaemonSet runs it: in a PID namespace of its own (a container's), so the
/// pause processes' `/proc/PID` that containerd names are not there to look at; killed on drop.
struct NriPlugin {
    child: Child,
    log: PathBuf,
    /// Its `--records` directory.
    records: PathBuf,
}

impl NriPlugin {
    fn start(fixture: &Fixture, socket: &Path) -> NriPlugin {
        let mut cmd = std::process::Command::new("unshare");
        cmd.args(["--pid", "--fork", "--mount", "--mount-proc", "--kill-child", "--"]);
        NriPlugin::spawn(fixture, cmd, socket)
    }

    /// The same, its mount namespace a slave of `h`'s containerd's, where the pods' network
    /// namespaces are mounted (see [`Containerd17::mount_ns_sharing_netns`]).
    fn start_beside(fixture: &Fixture, h: &Containerd17) -> NriPlugin {
        let mut cmd = std::process::Command::new("nsenter");
        cmd.arg(format!("--mount={}", h.mount_ns_sharing_netns().display()))
            .args(["unshare", "--pid", "--fork", "--mount", "--propagation", "slave"])
            .args(["--mount-proc", "--kill-child", "--"]);
        NriPlugin::spawn(fixture, cmd, &h.nri_socket())
    }

    /// Runs the plugin through `cmd` (its namespaces) and waits until the runtime configured it.
    fn spawn(fixture: &Fixture, mut cmd: std::process::Command, socket: &Path) -> NriPlugin {
        let log = fixture.dir.path().join("nri-plugin.log");
        let records = fixture.dir.path().join("nri-records");
        let (k, v) = fixture.env();
        let child = cmd
            .arg(crate::support::bin("erdma-nri-plugin"))
            .env(k, v)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .args(["--socket".as_ref(), socket.as_os_str(), "--retry-ms".as_ref(), "50".as_ref()])
            .args(["--records".as_ref(), records.as_os_str()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let p = NriPlugin { child, log, records };
        p.wait_for("configured by the runtime", 1);
        p
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `needle` is in the log `n` times.
    fn wait_for(&self, needle: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.log_text().matches(needle).count() < n {
            assert!(
                Instant::now() < deadline,
                "erdma-nri-plugin never logged `{needle}` ({n}×):\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl NriPlugin {
    /// Its records as (device, pod, container), sorted.
    fn holders(&self) -> Vec<(String, String, String)> {
        erdma_kube::holders::recorded(&self.records)
            .into_iter()
            .map(|h| {
                assert_eq!(h.namespace, "erdma-it");
                (h.device, h.pod, h.container)
            })
            .collect()
    }

    /// Waits until its records are `want`.
    fn wait_for_holders(&self, want: &[(&str, &str, &str)]) {
        let want: Vec<(String, String, String)> =
            want.iter().map(|(d, p, c)| (d.to_string(), p.to_string(), c.to_string())).collect();
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.holders() != want {
            assert!(
                Instant::now() < deadline,
                "records {:?}, want {want:?}:\n{}",
                self.holders(),
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for NriPlugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn limit_line(limits: &str, name: &str) -> String {
    limits
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no `{name}` in {limits}"))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// `/dev/infiniband` inside, as `NAME MAJOR:MINOR` (hex, as stat prints them) lines.
fn nodes_inside(h: &Containerd17, c: &str) -> Vec<String> {
    let (code, out, _) = h.exec_sync(
        c,
        &[
            "sh",
            "-c",
            "cd /dev/infiniband 2>/dev/null && for f in *; do stat -c '%n %t:%T' \"$f\"; done",
        ],
    );
    if code != 0 {
        return Vec::new();
    }
    let mut v: Vec<String> = out.lines().map(str::to_string).collect();
    v.sort();
    v
}

fn env_inside(h: &Containerd17, c: &str) -> Vec<String> {
    let (code, out, err) = h.exec_sync(c, &["env"]);
    assert_eq!(code, 0, "{err}");
    out.lines().map(str::to_string).collect()
}

fn has_env(env: &[String], kv: &str) -> bool {
    env.iter().any(|l| l == kv)
}

fn memlock_inside(h: &Containerd17, c: &str) -> String {
    let (code, limits, err) = h.exec_sync(c, &["cat", "/proc/self/limits"]);
    assert_eq!(code, 0, "{err}");
    limit_line(&limits, "Max locked memory")
}

fn allow_rule(spec: &Value, major: u64, minor: u64) -> bool {
    spec.pointer("/linux/resources/devices").and_then(Value::as_array).is_some_and(|r| {
        r.iter().any(|r| {
            r["allow"] == Value::Bool(true)
                && r["type"] == "c"
                && r["major"].as_u64() == Some(major)
                && r["minor"].as_u64() == Some(minor)
        })
    })
}

/// A pod off the host network, on a CNI ptp network (its eth0 with an address of
/// 10.254.x.0/24): under the default `network = "any"` an asking container gets the nodes,
/// memlock and an NCCL_SOCKET_IFNAME read from the pod's namespace, which has no eth1 (the
/// host's interfaces would give `=eth0,eth1` for both devices).
/// Returns the pod's sandbox id.
fn own_network_pod(h: &Containerd17, plugin: &NriPlugin, asked: &str) -> String {
    let isolated = h.run_pod("nri-isolated", false, &[], "");
    let asks = h.create_and_start(
        &isolated,
        &Container {
            name: "asks".into(),
            envs: vec![("ERDMA_VISIBLE_DEVICES".into(), "all".into())],
            ..Default::default()
        },
    );
    assert_eq!(nodes_inside(h, &asks), ["rdma_cm a:3a", "uverbs0 e7:c0", "uverbs1 e7:c1"]);
    assert_eq!(memlock_inside(h, &asks), asked);
    let env = env_inside(h, &asks);
    for kv in ["NCCL_IB_HCA==erdma_0:1,erdma_1:1", "NCCL_SOCKET_IFNAME==eth0"] {
        assert!(has_env(&env, kv), "{kv} not in {env:?}; the plugin's log:\n{}", plugin.log_text());
    }
    let (_, ifaces, _) =
        h.exec_sync(&asks, &["sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1"]);
    let mut names: Vec<&str> = ifaces.lines().map(str::trim).collect();
    names.sort();
    assert_eq!(names, ["eth0", "lo"], "the pod's interfaces");
    plugin.wait_for("rdma_cm", 1);
    assert!(
        plugin.log_text().lines().any(|l| l.contains("nri-isolated")
            && l.contains("rdma_cm")
            && l.contains("hostNetwork: true")),
        "one warning naming the pod:\n{}",
        plugin.log_text()
    );
    isolated
}

/// Beside Terway's own `aliyun/erdma` device plugin, whose Allocate answers with every node
/// under /dev/infiniband, host and container path alike, "rw", and no env (Terway
/// `deviceplugin/eni.go` and `eni_test.go`, ENITypeERDMA): the pod on its own network
/// (`isolated`) gets what Terway leaves out, memlock (`asked`) and the NCCL settings, and no
/// node twice.
fn beside_terways_device_plugin(h: &Containerd17, fixture: &Fixture, isolated: &str, asked: &str) {
    let mut terway_nodes: Vec<String> = std::fs::read_dir(fixture.dev.join("infiniband"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    terway_nodes.sort();
    let terway = h.create_and_start(
        isolated,
        &Container {
            name: "terway".into(),
            devices: terway_nodes
                .iter()
                .map(|n| Device {
                    host_path: fixture.dev.join("infiniband").join(n),
                    container_path: format!("/dev/infiniband/{n}"),
                    permissions: "rw".into(),
                })
                .collect(),
            ..Default::default()
        },
    );
    assert_eq!(nodes_inside(h, &terway), ["rdma_cm a:3a", "uverbs0 e7:c0", "uverbs1 e7:c1"]);
    let spec = h.runtime_spec(&terway);
    let paths: Vec<&str> = spec["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["path"].as_str())
        .filter(|p| p.starts_with("/dev/infiniband/"))
        .collect();
    assert_eq!(paths.len(), 3, "no node added twice: {paths:?}");
    assert_eq!(memlock_inside(h, &terway), asked);
    let env = env_inside(h, &terway);
    for kv in ["NCCL_IB_HCA==erdma_0:1,erdma_1:1", "NCCL_SOCKET_IFNAME==eth0"] {
        assert!(has_env(&env, kv), "{kv} not in {env:?}");
    }
}

#[test]
fn nri_plugin_gives_asking_containers_nodes_memlock_and_env_root_daemon() {
    if !require_containerd17() {
        return;
    }
    let fixture = Fixture::new("two", &format!("memlock = {MEMLOCK}"));
    let h = Containerd17::start(Options { cni_loopback: true, ..Default::default() });
    let plugin = NriPlugin::start_beside(&fixture, &h);
    let ours =
        limit_line(&std::fs::read_to_string("/proc/self/limits").unwrap(), "Max locked memory");
    let asked = format!("Max locked memory {MEMLOCK} {MEMLOCK} bytes");
    assert_ne!(
        ours, asked,
        "the daemon's own limit must differ from what the plugin sets, or the check proves nothing"
    );

    // kubelet's part: one `aliyun/erdma` from the device plugin (erdma_0's first share).
    let host = discover::discover(&fixture.sysfs, &fixture.dev, &["erdma".into()]).unwrap();
    let dp = PluginConfig { resource: deviceplugin::RESOURCE.into(), shares: 8, cdi: false };
    let ids = deviceplugin::advertise(&host, &fixture.sysfs, &dp);
    let alloc = deviceplugin::allocate(
        &host,
        &dp,
        &[ids[0].id.clone()],
        // As the plugin answers under the default config: no pod's network is known yet.
        &erdma_oci_hook::netns::Net::any_container(Default::default()),
        &erdma_oci_hook::nccl::Context::of(&Default::default()),
    )
    .unwrap();
    assert_eq!(ids[0].device, "erdma_0");

    let pod = h.run_pod("nri-host", true, &[], "");
    let allocated = h.create_and_start(
        &pod,
        &Container {
            name: "allocated".into(),
            devices: alloc
                .devices
                .iter()
                .map(|d| Device {
                    host_path: d.host_path.clone().into(),
                    container_path: d.container_path.clone(),
                    permissions: d.permissions.clone(),
                })
                .collect(),
            envs: alloc.envs.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            ..Default::default()
        },
    );
    let by_env = h.create_and_start(
        &pod,
        &Container {
            name: "by-env".into(),
            envs: vec![("ERDMA_VISIBLE_DEVICES".into(), "erdma_1".into())],
            ..Default::default()
        },
    );
    let plain = h.create_and_start(&pod, &Container { name: "plain".into(), ..Default::default() });
    plugin.wait_for("eRDMA given", 2);

    // The allocated container: its node and rdma_cm from kubelet, memlock from the plugin
    // (which nothing else gives a pod), the NCCL env for erdma_0.
    assert_eq!(nodes_inside(&h, &allocated), ["rdma_cm a:3a", "uverbs0 e7:c0"]);
    assert_eq!(memlock_inside(&h, &allocated), asked);
    let env = env_inside(&h, &allocated);
    for kv in
        ["ERDMA_VISIBLE_DEVICES=erdma_0", "NCCL_IB_HCA==erdma_0:1", "NCCL_SOCKET_IFNAME==eth0"]
    {
        assert!(has_env(&env, kv), "{kv} not in {env:?}");
    }

    // Asked by env only: the plugin adds the nodes (with their cgroup rules), memlock, env.
    assert_eq!(nodes_inside(&h, &by_env), ["rdma_cm a:3a", "uverbs1 e7:c1"]);
    assert_eq!(memlock_inside(&h, &by_env), asked);
    let env = env_inside(&h, &by_env);
    assert!(has_env(&env, "NCCL_IB_HCA==erdma_1:1"), "{env:?}");
    let spec = h.runtime_spec(&by_env);
    assert!(
        allow_rule(&spec, 231, 193) && allow_rule(&spec, 10, 58),
        "cgroup rules: {}",
        spec["linux"]["resources"]
    );
    // The nodes really open past the device cgroup: ENXIO (no driver here), not EPERM.
    let (_, out, _) = h.exec_sync(&by_env, &["sh", "-c", "cat /dev/infiniband/uverbs1 2>&1"]);
    assert!(out.contains("No such device or address"), "{out}");

    // Both are in the plugin's records, for the metrics' pod labels; removing a container
    // removes its record (containerd 1.7 tells through StateChange, REMOVE_CONTAINER).
    plugin.wait_for_holders(&[
        ("erdma_0", "nri-host", "allocated"),
        ("erdma_1", "nri-host", "by-env"),
    ]);
    let gone = h.create_and_start(
        &pod,
        &Container {
            name: "short-lived".into(),
            envs: vec![("ERDMA_VISIBLE_DEVICES".into(), "erdma_0".into())],
            ..Default::default()
        },
    );
    plugin.wait_for_holders(&[
        ("erdma_0", "nri-host", "allocated"),
        ("erdma_0", "nri-host", "short-lived"),
        ("erdma_1", "nri-host", "by-env"),
    ]);
    h.stop_and_remove_container(&gone, 0);
    plugin.wait_for_holders(&[
        ("erdma_0", "nri-host", "allocated"),
        ("erdma_1", "nri-host", "by-env"),
    ]);

    // Not asking: exactly as containerd made it.
    assert!(nodes_inside(&h, &plain).is_empty());
    assert_eq!(memlock_inside(&h, &plain), ours);
    assert!(!env_inside(&h, &plain).iter().any(|l| l.starts_with("NCCL_")));

    // The pod annotation asks for every container of the pod.
    let annotated =
        h.run_pod("nri-annotated", true, &[(erdma_oci_hook::request::ANNOTATION, "all")], "");
    let c = h.create_and_start(&annotated, &Container { name: "all".into(), ..Default::default() });
    assert_eq!(nodes_inside(&h, &c), ["rdma_cm a:3a", "uverbs0 e7:c0", "uverbs1 e7:c1"]);

    let isolated = own_network_pod(&h, &plugin, &asked);
    beside_terways_device_plugin(&h, &fixture, &isolated, &asked);

    // `network = "require"`: refused with the fix named, which kubelet shows as the
    // container's CreateContainerError event; a plain one starts.
    // A container removed while no plugin listens leaves a record behind: the plugin that
    // comes next drops it when the runtime synchronises it, and keeps the others.
    drop(plugin);
    let stale = erdma_kube::holders::Record {
        namespace: "erdma-it".into(),
        pod: "nri-host".into(),
        container: "removed-meanwhile".into(),
        devices: vec!["erdma_1".into()],
    };
    erdma_kube::holders::record(&fixture.dir.path().join("nri-records"), "f00d", &stale).unwrap();
    fixture.write_config(&format!("memlock = {MEMLOCK}\nnetwork = \"require\""));
    let plugin = NriPlugin::start_beside(&fixture, &h);
    plugin.wait_for_holders(&[
        ("erdma_0", "nri-annotated", "all"),
        ("erdma_0", "nri-host", "allocated"),
        ("erdma_0", "nri-isolated", "asks"),
        ("erdma_0", "nri-isolated", "terway"),
        ("erdma_1", "nri-annotated", "all"),
        ("erdma_1", "nri-host", "by-env"),
        ("erdma_1", "nri-isolated", "asks"),
        ("erdma_1", "nri-isolated", "terway"),
    ]);
    let err = h
        .try_create_and_start(
            &isolated,
            &Container {
                name: "asks-again".into(),
                envs: vec![("ERDMA_VISIBLE_DEVICES".into(), "all".into())],
                ..Default::default()
            },
        )
        .expect_err("an asking container without host networking must be refused under require");
    assert!(
        err.message().contains("hostNetwork: true") && err.message().contains("nri-isolated"),
        "{}",
        err.message()
    );
    assert!(
        plugin.log_text().contains("hostNetwork: true"),
        "the plugin logs it too:\n{}",
        plugin.log_text()
    );
    let ok =
        h.create_and_start(&isolated, &Container { name: "plain".into(), ..Default::default() });
    assert!(nodes_inside(&h, &ok).is_empty());
}

/// A DRA claim reaches a container as kubelet hands it over: the CDI device IDs
/// `NodePrepareResources` returned go into CRI's `CDI_devices`; containerd applies the claim's
/// CDI spec (the ERI's uverbs node, `rdma_cm`, the env for exactly the claim's ERIs), and the NRI
/// plugin, seeing the claim's `ERDMA_VISIBLE_DEVICES`, adds the memlock limit CDI cannot give,
/// without doubling the nodes CDI gave.
#[test]
fn dra_claim_reaches_the_container_through_cdi_and_nri_root_daemon() {
    use erdma_kube::dra::claims::{self, Allocated, ClaimRef};
    if !require_containerd17() {
        return;
    }
    let fixture = Fixture::new("two", &format!("memlock = {MEMLOCK}"));
    let h = Containerd17::start(Options { cni_loopback: true, ..Default::default() });
    let plugin = NriPlugin::start_beside(&fixture, &h);

    // The driver's part, as `NodePrepareResources` does it for a claim of erdma-1.
    let config = erdma_oci_hook::config::Config::load_from(&fixture.config_path).unwrap();
    let (host, published) = erdma_kube::dra::devices::list(&config, 1).unwrap();
    let claim = ClaimRef {
        namespace: "ns1".into(),
        name: "eri".into(),
        uid: "3f1c2b7e-5d0a-4c1e-9a63-0d2b9e7f1a44".into(),
    };
    let driver = erdma_kube::dra::DRIVER;
    let prepared = claims::Preparer {
        config: &config,
        driver,
        node: "node-a",
        host: &host,
        published: &published,
    }
    .prepare(
        &claim,
        &[Allocated { request: "eri".into(), pool: "node-a".into(), device: "erdma-1".into() }],
    )
    .unwrap();
    claims::write_spec(&h.cdi_dir(), driver, &claim, &prepared.spec).unwrap();

    // kubelet's part: the IDs into CRI.
    let pod = h.run_pod("dra-host", true, &[], "");
    let c = h.create_and_start(
        &pod,
        &Container {
            name: "claimed".into(),
            cdi_devices: prepared.devices[0].cdi_device_ids.clone(),
            ..Default::default()
        },
    );
    plugin.wait_for("eRDMA given", 1);
    assert_eq!(nodes_inside(&h, &c), ["rdma_cm a:3a", "uverbs1 e7:c1"]);
    assert_eq!(memlock_inside(&h, &c), format!("Max locked memory {MEMLOCK} {MEMLOCK} bytes"));
    let env = env_inside(&h, &c);
    for kv in ["ERDMA_VISIBLE_DEVICES=erdma_1", "NCCL_IB_HCA==erdma_1:1"] {
        assert!(has_env(&env, kv), "{kv} not in {env:?}");
    }
    let spec = h.runtime_spec(&c);
    let mut paths: Vec<&str> = spec["linux"]["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["path"].as_str())
        .filter(|p| p.starts_with("/dev/infiniband/"))
        .collect();
    paths.sort();
    assert_eq!(paths, ["/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs1"], "each node once");
    assert!(
        allow_rule(&spec, 231, 193) && allow_rule(&spec, 10, 58),
        "{}",
        spec["linux"]["resources"]
    );
}

/// The plugin outlives the runtime: when containerd's NRI connection goes (plugin restart
/// here, as a DaemonSet rollout does), a new plugin process registers and serves again; and a
/// plugin started before the socket exists waits for it.
#[test]
fn nri_plugin_reconnects_root_daemon() {
    if !require_containerd17() {
        return;
    }
    let fixture = Fixture::new("two", &format!("memlock = {MEMLOCK}"));
    let h = Containerd17::start(Options::default());
    let first = NriPlugin::start(&fixture, &h.nri_socket());
    drop(first);
    let second = NriPlugin::start(&fixture, &h.nri_socket());
    let pod = h.run_pod("nri-again", true, &[], "");
    let c = h.create_and_start(
        &pod,
        &Container {
            envs: vec![("ERDMA_VISIBLE_DEVICES".into(), "erdma_0".into())],
            ..Default::default()
        },
    );
    assert_eq!(nodes_inside(&h, &c), ["rdma_cm a:3a", "uverbs0 e7:c0"]);
    second.wait_for("eRDMA given", 1);

    // Waiting for a socket that is not there yet (the runtime starting after the plugin).
    let later = fixture.dir.path().join("later.sock");
    // Its stderr to a log, waited on (and the plugin killed when dropped) as every plugin of
    // these tests is: the wait is for the line, not a guess at how long a busy machine takes.
    let log = fixture.dir.path().join("nri-waiting.log");
    let child = fixture
        .command("erdma-nri-plugin")
        .args(["--socket".as_ref(), later.as_os_str(), "--retry-ms".as_ref(), "20".as_ref()])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let records = fixture.dir.path().join("nri-waiting-records");
    let mut waiting = NriPlugin { child, log, records };
    waiting.wait_for("cannot connect to the runtime's NRI socket", 1);
    // Twenty-millisecond retries go on after the line: the plugin is still waiting.
    std::thread::sleep(Duration::from_millis(300));
    let still = waiting.child.try_wait().unwrap().is_none();
    assert!(still, "the plugin must keep waiting for the runtime");
    let err = waiting.log_text();
    assert!(
        err.contains("cannot connect to the runtime's NRI socket")
            && err.contains("disable = false"),
        "{err}"
    );
    assert_eq!(err.matches("cannot connect").count(), 1, "said once, not on every retry: {err}");
}
