//! What the NRI plugin does to a container being created: the same decisions and the same
//! spec-edit core ([`erdma_oci_hook::modify`]) as `erdma-runtime` and the hooks, expressed as NRI's
//! `ContainerAdjustment` instead of a rewritten `config.json`.
//!
//! The container as NRI describes it becomes the part of an OCI spec the edits read
//! (annotations, env, rlimits, devices, namespaces); [`modify::apply`] edits that; the
//! difference is the adjustment: the device nodes (containerd adds their cgroup allow rules
//! with them), `RLIMIT_MEMLOCK`, and the env.
//!
//! Who asks, first match wins:
//! 1. the device plugin's allocation: uverbs nodes kubelet put in the container (`aliyun/erdma`
//!    in `resources.limits`), which name their devices;
//! 2. the annotation [`request::ANNOTATION`], on the container or else on the pod;
//! 3. `ERDMA_VISIBLE_DEVICES` in the env (when the config's `accept_env` allows);
//! 4. the config's `default_request`.
use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::pb;
use erdma_oci_hook::config::Config;
use erdma_oci_hook::discover::Host;
use erdma_oci_hook::error::{Error, Result};
use erdma_oci_hook::modify::{self, NetworkOutcome, Report};
use erdma_oci_hook::request::{self, Request};

/// What to answer for one container.
#[derive(Debug, Default)]
pub struct Decision {
    /// `None`: the container did not ask, and is left exactly as it is.
    pub adjust: Option<pb::ContainerAdjustment>,
    pub report: Option<Report>,
}

/// `namespace/name` of a pod, for logs and errors.
pub fn pod_name(pod: Option<&pb::PodSandbox>) -> String {
    pod.map(|p| format!("{}/{}", p.namespace, p.name)).unwrap_or_else(|| "(unknown pod)".into())
}

/// The devices whose uverbs nodes are already in the container: the device plugin's
/// allocation (kubelet passes Allocate's device specs to the runtime, which puts them in).
fn allocated(ctr: &pb::Container, host: &Host) -> Option<Request> {
    let nodes = ctr.linux.as_ref().map(|l| l.devices.as_slice()).unwrap_or_default();
    let names: Vec<String> = host
        .devices
        .iter()
        .filter(|d| {
            d.uverbs.as_ref().is_some_and(|u| {
                nodes.iter().any(|n| {
                    n.r#type == "c"
                        && n.major == i64::from(u.major)
                        && n.minor == i64::from(u.minor)
                })
            })
        })
        .map(|d| d.name.clone())
        .collect();
    (!names.is_empty()).then_some(Request::Named(names))
}

/// The part of an OCI spec [`modify`] and [`request`] read, from NRI's description.
fn to_spec(pod: Option<&pb::PodSandbox>, ctr: &pb::Container) -> Value {
    // The container's annotations over the pod's.
    let mut annotations: BTreeMap<&str, &str> = pod
        .map(|p| p.annotations.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect())
        .unwrap_or_default();
    annotations.extend(ctr.annotations.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let linux = ctr.linux.clone().unwrap_or_default();
    // The network namespace is the pod's business, and the pod says it: containerd 1.7 gives a
    // host-network sandbox no `network` namespace and others `/var/run/netns/cni-…`, while
    // every container's names the pause process's (`/proc/PID/ns/net`, whichever network it
    // is in), which the plugin cannot even see from its own PID namespace.
    let namespaces = match pod.and_then(|p| p.linux.as_ref()) {
        Some(l) => &l.namespaces,
        None => &linux.namespaces,
    };
    json!({
        "annotations": annotations,
        "process": {
            "env": ctr.env,
            "rlimits": ctr.rlimits.iter().map(|r| json!({"type": r.r#type, "hard": r.hard, "soft": r.soft})).collect::<Vec<_>>(),
        },
        "linux": {
            "namespaces": namespaces.iter().map(|n| json!({"type": n.r#type, "path": n.path})).collect::<Vec<_>>(),
            "devices": linux.devices.iter().map(|d| json!({"path": d.path, "type": d.r#type, "major": d.major, "minor": d.minor})).collect::<Vec<_>>(),
        },
    })
}

fn list<'a>(spec: &'a Value, pointer: &str) -> &'a [Value] {
    spec.pointer(pointer).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// The adjustment that turns `before` into `after` (both from [`to_spec`] and [`modify::apply`]).
fn difference(before: &Value, after: &Value) -> pb::ContainerAdjustment {
    let mut adjust = pb::ContainerAdjustment::default();
    let old_env = list(before, "/process/env");
    for e in list(after, "/process/env").iter().filter(|e| !old_env.contains(e)) {
        if let Some((k, v)) = e.as_str().and_then(|e| e.split_once('=')) {
            adjust.env.push(pb::KeyValue { key: k.into(), value: v.into() });
        }
    }
    let old_rl = list(before, "/process/rlimits");
    for r in list(after, "/process/rlimits").iter().filter(|r| !old_rl.contains(r)) {
        adjust.rlimits.push(pb::PosixRlimit {
            r#type: r["type"].as_str().unwrap_or_default().into(),
            hard: r["hard"].as_u64().unwrap_or_default(),
            soft: r["soft"].as_u64().unwrap_or_default(),
        });
    }
    let old_dev = list(before, "/linux/devices");
    let same = |a: &Value, b: &Value| {
        a["path"] == b["path"] && a["major"] == b["major"] && a["minor"] == b["minor"]
    };
    let mut devices = Vec::new();
    for d in list(after, "/linux/devices").iter().filter(|d| !old_dev.iter().any(|o| same(o, d))) {
        devices.push(pb::LinuxDevice {
            path: d["path"].as_str().unwrap_or_default().into(),
            r#type: d["type"].as_str().unwrap_or("c").into(),
            major: d["major"].as_i64().unwrap_or_default(),
            minor: d["minor"].as_i64().unwrap_or_default(),
            file_mode: d["fileMode"].as_u64().map(|m| pb::OptionalFileMode { value: m as u32 }),
            uid: d["uid"].as_u64().map(|v| pb::OptionalUInt32 { value: v as u32 }),
            gid: d["gid"].as_u64().map(|v| pb::OptionalUInt32 { value: v as u32 }),
        });
    }
    if !devices.is_empty() {
        adjust.linux = Some(pb::LinuxContainerAdjustment { devices, ..Default::default() });
    }
    adjust
}

/// The answer to `CreateContainer` for `ctr` of `pod` on `host`. An error fails the container's
/// creation, and its message reaches the pod's events through kubelet.
///
/// `discover` reads the host's devices; it is called only for a container that may ask (one
/// with character devices, or whose request is not `none`), so others cost no sysfs reads.
pub fn create(
    pod: Option<&pb::PodSandbox>,
    ctr: &pb::Container,
    discover: impl FnOnce() -> Result<Host>,
    config: &Config,
) -> Result<Decision> {
    let spec = to_spec(pod, ctr);
    let has_nodes = ctr.linux.as_ref().is_some_and(|l| l.devices.iter().any(|d| d.r#type == "c"));
    let mut discover = Some(discover);
    let mut host = None;
    if has_nodes {
        host = Some((discover.take().expect("first call"))()?);
    }
    let request = match host.as_ref().and_then(|h| allocated(ctr, h)) {
        Some(r) => r,
        None => request::from_spec(&spec, config)?,
    };
    if request == Request::None {
        return Ok(Decision::default());
    }
    let host = match (host, discover) {
        (Some(h), _) => h,
        (None, Some(d)) => d()?,
        (None, None) => unreachable!("discover is taken only when the host is read"),
    };
    let host = &host;
    let (devices, nodes) = modify::select(&request, host, config)?;
    // The GPU nodes kubelet put in the container (CDI, the GPU device plugin) pick its ERIs.
    let (devices, nodes, placement) = modify::place(&spec, host, config, &request, devices, nodes);
    let mut edited = spec.clone();
    let report = modify::apply(&mut edited, host, &devices, &nodes, config, &placement).map_err(|e| match e {
        Error::HostNetworkRequired => Error::Invalid(format!(
            "pod {} asks for eRDMA but runs in its own network namespace, and this node requires host networking (network = \"require\"): set `hostNetwork: true` in its spec, or network = \"any\" in the node's config",
            pod_name(pod)
        )),
        Error::RdmaNetnsExclusive => Error::Invalid(format!(
            "pod {} asks for eRDMA from its own network namespace, but this node's RDMA namespace mode is exclusive: set `hostNetwork: true` in its spec, or `rdma system set netns shared` on the node",
            pod_name(pod)
        )),
        e => e,
    })?;
    let mut report = report;
    if report.network == NetworkOutcome::Own {
        for w in report.warnings.iter_mut().filter(|w| w.as_str() == modify::OWN_NETWORK_WARNING) {
            *w = format!("pod {} is not on the host network: eRDMA verbs and NCCL work from its namespace (RDMA namespace mode shared), but programs that connect through rdma_cm (perftest's -R, rping, UCX over rdmacm) need `hostNetwork: true`", pod_name(pod));
        }
    }
    if report.network == NetworkOutcome::Dropped {
        // Only seen outside CRI (a network namespace with no path): NRI cannot take it away.
        report.warnings.push(format!("pod {}: its network namespace cannot be changed through NRI; set `hostNetwork: true` in its spec", pod_name(pod)));
    }
    if list(&spec, "/process/rlimits").iter().any(|r| r["type"] == "RLIMIT_MEMLOCK") {
        report.warnings.push("the container already had an RLIMIT_MEMLOCK; NRI adds ours after it, and the runtime applies the last".into());
    }
    Ok(Decision { adjust: Some(difference(&spec, &edited)), report: Some(report) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use erdma_oci_hook::config::{Memlock, NetworkPolicy};
    use erdma_oci_hook::discover::{CharDev, Port, RdmaDevice};

    fn host() -> Host {
        let dev = |n: u32| RdmaDevice {
            name: format!("erdma_{n}"),
            driver: Some("erdma".into()),
            ports: vec![Port {
                num: 1,
                state: 4,
                state_name: "ACTIVE".into(),
                link_layer: Some("Ethernet".into()),
                netdev: Some(format!("eth{n}")),
                mtu: Some(8500),
                roce_v2_ipv4_gid: Some(1),
                roce_v2_ipv4: None,
            }],
            uverbs: Some(CharDev {
                path: format!("/dev/infiniband/uverbs{n}"),
                host_path: format!("/dev/infiniband/uverbs{n}").into(),
                major: 231,
                minor: 192 + n,
            }),
            problem: None,
        };
        Host {
            devices: vec![dev(0), dev(1)],
            others: vec![],
            rdma_cm: Some(CharDev {
                path: "/dev/infiniband/rdma_cm".into(),
                host_path: "/dev/infiniband/rdma_cm".into(),
                major: 10,
                minor: 58,
            }),
            netdevs: vec!["eth0".into(), "eth1".into(), "lo".into()],
            rdma_netns: erdma_oci_hook::netns::RdmaNetns::Shared,
        }
    }

    fn ns(t: &str, p: &str) -> pb::LinuxNamespace {
        pb::LinuxNamespace { r#type: t.into(), path: p.into() }
    }

    /// A container as containerd 1.7.24 describes it to NRI (logged by the plugin in nri_cases):
    /// its namespaces name the pause process's (a PID the plugin's own PID namespace does not
    /// have), network included, for host-network and other pods alike; and the env kubelet and
    /// the image give it.
    fn container(env: &[&str]) -> pb::Container {
        let pause_net = "/proc/4000000/ns/net";
        pb::Container {
            id: "c1".into(),
            name: "worker".into(),
            env: env.iter().map(|s| s.to_string()).collect(),
            linux: Some(pb::LinuxContainer {
                namespaces: vec![
                    ns("pid", ""),
                    ns("ipc", "/proc/4000000/ns/ipc"),
                    ns("uts", "/proc/4000000/ns/uts"),
                    ns("mount", ""),
                    ns("network", pause_net),
                ],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A host-network pod as containerd 1.7.24 describes it to NRI: no `network` namespace.
    fn pod() -> pb::PodSandbox {
        let linux = pb::LinuxPodSandbox {
            namespaces: vec![ns("pid", ""), ns("ipc", ""), ns("mount", "")],
            ..Default::default()
        };
        pb::PodSandbox {
            name: "train-0".into(),
            namespace: "ml".into(),
            linux: Some(linux),
            ..Default::default()
        }
    }

    /// A pod on the cluster network: its own namespace, made by CNI.
    fn pod_off_host_network() -> pb::PodSandbox {
        let mut p = pod();
        p.linux.as_mut().unwrap().namespaces.extend([
            ns("uts", ""),
            ns("network", "/var/run/netns/cni-b12bf0e7-9df9-364b-63fa-33681d039790"),
        ]);
        p
    }

    fn env_of(a: &pb::ContainerAdjustment, k: &str) -> Option<String> {
        a.env.iter().find(|e| e.key == k).map(|e| e.value.clone())
    }

    #[test]
    fn a_container_that_does_not_ask_is_left_alone() {
        let no_read =
            || -> Result<Host> { panic!("a container that does not ask costs no sysfs read") };
        let d =
            create(Some(&pod()), &container(&["PATH=/bin"]), no_read, &Config::default()).unwrap();
        assert!(d.adjust.is_none() && d.report.is_none());
    }

    #[test]
    fn env_request_gets_nodes_memlock_and_nccl_env() {
        let d = create(
            Some(&pod()),
            &container(&["PATH=/bin", "ERDMA_VISIBLE_DEVICES=erdma_1"]),
            || Ok(host()),
            &Config::default(),
        )
        .unwrap();
        let a = d.adjust.unwrap();
        let devs = &a.linux.as_ref().unwrap().devices;
        let paths: Vec<_> = devs.iter().map(|d| (d.path.as_str(), d.major, d.minor)).collect();
        assert_eq!(
            paths,
            [("/dev/infiniband/uverbs1", 231, 193), ("/dev/infiniband/rdma_cm", 10, 58)]
        );
        assert!(
            devs.iter()
                .all(|d| d.r#type == "c"
                    && d.file_mode == Some(pb::OptionalFileMode { value: 0o666 }))
        );
        // Unlimited by default: what `--ulimit memlock=-1` gives, as the OCI spec writes it.
        assert_eq!(
            a.rlimits,
            [pb::PosixRlimit { r#type: "RLIMIT_MEMLOCK".into(), hard: u64::MAX, soft: u64::MAX }]
        );
        assert_eq!(env_of(&a, "NCCL_IB_HCA").as_deref(), Some("=erdma_1:1"));
        assert_eq!(env_of(&a, "NCCL_SOCKET_IFNAME").as_deref(), Some("=eth1"));
        assert_eq!(env_of(&a, "PATH"), None, "the container's own env is not repeated");
        assert!(d.report.unwrap().warnings.is_empty());
    }

    #[test]
    fn the_device_plugins_allocation_asks_without_env_or_annotation() {
        let mut c = container(&["PATH=/bin"]);
        c.linux.as_mut().unwrap().devices.push(pb::LinuxDevice {
            path: "/dev/infiniband/uverbs0".into(),
            r#type: "c".into(),
            major: 231,
            minor: 192,
            ..Default::default()
        });
        // Even where the image's env may not ask: kubelet's allocation is the operator's.
        let cfg =
            Config { accept_env: false, memlock: Memlock::Bytes(4 << 20), ..Config::default() };
        let a = create(Some(&pod()), &c, || Ok(host()), &cfg).unwrap().adjust.unwrap();
        let paths: Vec<_> =
            a.linux.as_ref().unwrap().devices.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            ["/dev/infiniband/rdma_cm"],
            "uverbs0 is already there; only rdma_cm is added"
        );
        assert_eq!(a.rlimits[0].hard, 4 << 20);
        assert_eq!(env_of(&a, "NCCL_IB_HCA").as_deref(), Some("=erdma_0:1"));
    }

    #[test]
    fn annotation_on_the_pod_asks() {
        let mut p = pod();
        p.annotations.insert(request::ANNOTATION.into(), "all".into());
        let a = create(Some(&p), &container(&[]), || Ok(host()), &Config::default())
            .unwrap()
            .adjust
            .unwrap();
        assert_eq!(a.linux.unwrap().devices.len(), 3);
        // The container's own annotation wins over the pod's.
        let mut c = container(&[]);
        c.annotations.insert(request::ANNOTATION.into(), "none".into());
        assert!(create(Some(&p), &c, || Ok(host()), &Config::default()).unwrap().adjust.is_none());
    }

    #[test]
    fn pods_off_the_host_network_get_erdma_or_a_refusal_naming_the_fix() {
        let c = container(&["ERDMA_VISIBLE_DEVICES=all"]);
        // `require`: refused, naming the pod and both ways out.
        let require = Config { network: NetworkPolicy::Require, ..Config::default() };
        let e = create(Some(&pod_off_host_network()), &c, || Ok(host()), &require)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("pod ml/train-0")
                && e.contains("`hostNetwork: true`")
                && e.contains("network = \"any\""),
            "{e}"
        );
        // The default: devices, memlock and NCCL settings, and one warning about rdma_cm. The
        // pod's namespace (a CNI path that does not exist here) cannot be read, so the host's
        // interface is not given.
        let d =
            create(Some(&pod_off_host_network()), &c, || Ok(host()), &Config::default()).unwrap();
        let report = d.report.unwrap();
        let w = &report.warnings;
        assert_eq!(
            w.iter().filter(|w| w.contains("rdma_cm") && w.contains("ml/train-0")).count(),
            1,
            "{w:?}"
        );
        let a = d.adjust.unwrap();
        assert_eq!(a.linux.unwrap().devices.len(), 3);
        assert_eq!(a.rlimits.len(), 1);
        let env: Vec<String> = a.env.iter().map(|kv| format!("{}={}", kv.key, kv.value)).collect();
        assert!(env.contains(&"NCCL_IB_HCA==erdma_0:1,erdma_1:1".to_string()), "{env:?}");
        assert!(!env.iter().any(|e| e.starts_with("NCCL_SOCKET_IFNAME=")), "{env:?}");
        // An exclusive RDMA namespace mode: refused, naming it.
        let exclusive =
            || Ok(Host { rdma_netns: erdma_oci_hook::netns::RdmaNetns::Exclusive, ..host() });
        let e = create(Some(&pod_off_host_network()), &c, exclusive, &Config::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("ml/train-0") && e.contains("exclusive"), "{e}");
    }

    #[test]
    fn a_bad_request_is_an_error_naming_it() {
        let e = create(
            Some(&pod()),
            &container(&["ERDMA_VISIBLE_DEVICES=erdma_9"]),
            || Ok(host()),
            &Config::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("erdma_9") && e.contains("erdma_0, erdma_1"), "{e}");
    }

    #[test]
    fn the_containers_own_working_values_are_kept() {
        let c = container(&["ERDMA_VISIBLE_DEVICES=all", "NCCL_IB_HCA=erdma", "NCCL_DEBUG=WARN"]);
        let a =
            create(Some(&pod()), &c, || Ok(host()), &Config::default()).unwrap().adjust.unwrap();
        assert_eq!(env_of(&a, "NCCL_IB_HCA"), None);
        assert_eq!(env_of(&a, "NCCL_DEBUG"), None);
    }
}
