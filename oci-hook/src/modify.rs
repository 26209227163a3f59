//! Where a spec gets edited: what a container that asks for eRDMA gets.
//!
//! A chain of small edits on the JSON spec, each checked before anything is changed, so a
//! failure leaves the spec as it was: device nodes (`linux.devices`) with device-cgroup allow
//! rules, `RLIMIT_MEMLOCK`, host networking, and the NCCL environment.
use serde::Serialize;
use serde_json::{json, Value};

use crate::config::{Config, NetworkPolicy};
use crate::discover::{CharDev, Host, RdmaDevice};
use crate::error::{Error, Result};
use crate::nccl;
use crate::netns::{Net, RdmaNetns};
use crate::request::{env_get, Request};
use crate::topology::{self, GpuSet, Topology};
use erdma_common::nccl::{mtu_expected, MTU_JUMBO, MTU_STANDARD, NO_LL128};

/// The MTUs of the netdevs behind the ports of `devices`, with the device each belongs to.
pub fn port_mtus<'a>(
    devices: impl IntoIterator<Item = &'a RdmaDevice>,
) -> Vec<(&'a RdmaDevice, u32)> {
    devices
        .into_iter()
        .flat_map(|d| d.ports.iter().filter_map(move |p| p.mtu.map(|m| (d, m))))
        .collect()
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkOutcome {
    /// The spec already shares the host's network namespace.
    AlreadyHost,
    /// A fresh private namespace no engine manages was dropped.
    Dropped,
    /// An engine manages it and the policy is `any`: the container keeps its own network, and
    /// NCCL's settings are read from it.
    Own,
}

/// The one warning a container on its own network gets: verbs and NCCL work there, connection
/// setup through `rdma_cm` does not.
pub const OWN_NETWORK_WARNING: &str = "this container is not on the host's network: eRDMA verbs and NCCL work from its namespace (RDMA namespace mode shared), but programs that connect through rdma_cm (perftest's -R, rping, UCX over rdmacm) need host networking";

/// Where Docker's bridge namespace is not yet set up: the spec names none, its
/// `libnetwork-setkey` hook moves the interfaces in after the container is created.
const UNREAD_ENGINE_HOOK: &str =
    "the engine sets it up only after the container is created (Docker's libnetwork-setkey hook)";

/// Where a container's GPUs sit beside its ERIs: read for a container that asks, after
/// [`select`] and before [`apply`].
#[derive(Debug, Clone, Default)]
pub struct Placement {
    pub topology: Topology,
    /// The container's GPUs (indexes into the topology's), when its spec says.
    pub gpus: Option<Vec<usize>>,
    /// Which GPU went with which ERIs, and why, for the report.
    pub pairing: Vec<String>,
}

impl Placement {
    /// What the NCCL settings of this container depend on beyond its devices and network.
    pub fn context<'a>(&'a self, config: &Config) -> nccl::Context<'a> {
        nccl::Context {
            topology: Some(&self.topology),
            gpus: self.gpus.as_deref(),
            ..nccl::Context::of(config)
        }
    }
}

/// Reads where the host's GPUs and ERIs sit and which GPUs `spec` gives its container; for a
/// request of `all` from a container given some of the GPUs, narrows `devices` (and their
/// `nodes`) to the ERIs nearest those GPUs ([`topology::pair`]).
pub fn place<'a>(
    spec: &Value,
    host: &'a Host,
    config: &Config,
    request: &Request,
    devices: Vec<&'a RdmaDevice>,
    nodes: Vec<&'a CharDev>,
) -> (Vec<&'a RdmaDevice>, Vec<&'a CharDev>, Placement) {
    // The pairing is over the ERIs that can carry traffic (every port ACTIVE), else all.
    let usable: Vec<&RdmaDevice> = host.devices.iter().filter(|d| d.uverbs.is_some()).collect();
    let active: Vec<&RdmaDevice> =
        usable.iter().copied().filter(|d| d.all_ports_active()).collect();
    let topology = topology::of_host(config, if active.is_empty() { &usable } else { &active });
    if topology.gpus.is_empty() {
        return (devices, nodes, Placement { topology, ..Placement::default() });
    }
    let (gpus, from) = match topology::container_gpus(spec, &topology, &config.proc_root) {
        GpuSet::Given { gpus, from } => (Some(gpus), from),
        GpuSet::Unknown => (None, "its spec names no GPU: all of the host's count".to_string()),
    };
    let all: Vec<usize> = topology.gpus.iter().map(|g| g.index).collect();
    let theirs = gpus.clone().unwrap_or_else(|| all.clone());
    let (mut devices, mut nodes) = (devices, nodes);
    if *request == Request::All && !theirs.is_empty() && theirs.len() < all.len() {
        let near = topology.eris_for(&theirs);
        if !near.is_empty() && devices.iter().any(|d| !near.contains(&d.name.as_str())) {
            devices.retain(|d| near.contains(&d.name.as_str()));
            nodes.retain(|n| {
                host.rdma_cm.as_ref().is_some_and(|cm| cm.path == n.path)
                    || devices.iter().any(|d| d.uverbs.as_ref().is_some_and(|u| u.path == n.path))
            });
        }
    }
    let mut pairing = Vec::new();
    for p in topology.pairs.iter().filter(|p| theirs.contains(&p.gpu)) {
        let missing: Vec<&str> = p
            .eris
            .iter()
            .filter(|e| !devices.iter().any(|d| &d.name == *e))
            .map(String::as_str)
            .collect();
        let given = if missing.is_empty() {
            String::new()
        } else {
            format!("; not given: {}", missing.join(", "))
        };
        pairing.push(format!(
            "GPU {} ({}) -> {} ({}{given})",
            p.gpu,
            p.gpu_bus_id,
            p.eris.join(", "),
            p.path.name()
        ));
    }
    if !pairing.is_empty() {
        pairing.insert(0, format!("the container's GPUs: {from}"));
    }
    (devices, nodes, Placement { topology, gpus, pairing })
}

/// What was done, for logs and `--json` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub devices: Vec<String>,
    pub nodes: Vec<String>,
    pub memlock: u64,
    pub network: NetworkOutcome,
    /// The container's network as the NCCL settings were derived for it.
    pub net: Net,
    /// `NAME=VALUE` set in the container's env: added, or replacing a value that could not
    /// work here (see [`nccl::plan`]).
    pub env_added: Vec<String>,
    /// Which of its GPUs went with which ERI.
    pub pairing: Vec<String>,
    pub warnings: Vec<String>,
}

/// The devices `request` selects on `host`, with the nodes they need (`rdma_cm` always).
pub fn select<'a>(
    request: &Request,
    host: &'a Host,
    config: &Config,
) -> Result<(Vec<&'a RdmaDevice>, Vec<&'a CharDev>)> {
    let chosen: Vec<&RdmaDevice> = match request {
        Request::None => return Ok((Vec::new(), Vec::new())),
        Request::All => host.devices.iter().filter(|d| d.uverbs.is_some()).collect(),
        Request::Named(names) => {
            // Only devices of the configured drivers: a container must not be able to name its
            // way to an RDMA device the operator did not make available (e.g. an mlx5 NIC
            // beside the eRDMA ones while `drivers` is just `erdma`).
            let all = &host.devices;
            names
                .iter()
                .map(|n| {
                    if let Some(other) = host.others.iter().find(|d| &d.name == n) {
                        return Err(Error::Invalid(format!(
                            "RDMA device `{n}` has driver {}, which is not in the configured drivers ({}); add it to `drivers` in the config to allow it",
                            other.driver.as_deref().unwrap_or("unknown"),
                            config.drivers.join(", ")
                        )));
                    }
                    let d = all.iter().find(|d| &d.name == n).ok_or_else(|| Error::UnknownDevice {
                        name: n.clone(),
                        found: if all.is_empty() { "none".into() } else { all.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ") },
                    })?;
                    if d.uverbs.is_none() {
                        return Err(Error::DeviceUnusable { name: n.clone(), reason: d.problem.clone().unwrap_or_default() });
                    }
                    Ok(d)
                })
                .collect::<Result<_>>()?
        }
    };
    let mut chosen = chosen;
    // `erdma_0,erdma_0` names one device once.
    let mut seen = std::collections::HashSet::new();
    chosen.retain(|d| seen.insert(d.name.as_str()));
    if chosen.is_empty() {
        return Err(Error::NoDevices { sysfs: config.sysfs_root.clone() });
    }
    let mut nodes: Vec<&CharDev> = chosen.iter().filter_map(|d| d.uverbs.as_ref()).collect();
    match &host.rdma_cm {
        Some(cm) => nodes.push(cm),
        None => {
            return Err(Error::DeviceUnusable {
                name: "rdma_cm".into(),
                reason: "no /dev/infiniband/rdma_cm on this host".into(),
            })
        }
    }
    Ok((chosen, nodes))
}

/// Docker (20.10-27) sets up container networking from a `libnetwork-setkey` prestart hook.
fn engine_hook(spec: &Value) -> bool {
    ["prestart", "createRuntime"].iter().any(|stage| {
        spec.pointer(&format!("/hooks/{stage}")).and_then(Value::as_array).is_some_and(|hooks| {
            hooks.iter().any(|h| {
                h.get("args")
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.iter().any(|x| x.as_str() == Some("libnetwork-setkey")))
            })
        })
    })
}

/// Whether `path` is the network namespace this process is in (the host's, for a runtime
/// wrapper or a hook the engine runs): same nsfs inode, as `ip netns identify` compares.
fn is_own_netns(path: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    if path.is_empty() {
        return false;
    }
    match (std::fs::metadata(path), std::fs::metadata("/proc/self/ns/net")) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// Whether the spec's `linux.namespaces` make a user namespace.
fn has_user_namespace(namespaces: &[Value]) -> bool {
    namespaces.iter().any(|n| n.get("type").and_then(Value::as_str) == Some("user"))
}

/// Why a fresh network namespace that no engine sets up must stay the container's own: runc
/// refuses the spec on the host's network, where it would run it on its own. `None`: it may go.
/// - `net.*` sysctls: runc sets them only in a network namespace of the container's own
///   ("sysctl ... not allowed in host network namespace", libcontainer's `validate`);
/// - a user namespace and a sysfs mount: the user namespace does not own the host's network
///   namespace, and the kernel mounts sysfs only for the network namespace's owner (EPERM).
fn kept_own(spec: &Value, namespaces: &[Value]) -> Option<String> {
    let sysctls: Vec<&str> = spec
        .pointer("/linux/sysctl")
        .and_then(Value::as_object)
        .map(|m| m.keys().map(String::as_str).filter(|k| k.starts_with("net.")).collect())
        .unwrap_or_default();
    if !sysctls.is_empty() {
        return Some(format!(
            "the spec sets {} for it, which runc applies only in a network namespace of the container's own",
            sysctls.join(", ")
        ));
    }
    let user = has_user_namespace(namespaces);
    let sysfs = spec
        .pointer("/mounts")
        .and_then(Value::as_array)
        .is_some_and(|m| m.iter().any(|m| m.get("type").and_then(Value::as_str) == Some("sysfs")));
    if user && sysfs {
        return Some("the container has a user namespace and mounts sysfs, which it could not do on the host's network".into());
    }
    None
}

/// A container on a network namespace of its own: refused under `network = "require"`, or
/// where the host's RDMA devices cannot be opened from another namespace (exclusive mode);
/// else its network, as `read` finds it, and the one warning about `rdma_cm` in `warnings`.
/// The one decision behind the spec edit and the `prestart` hook.
pub fn own_network(
    config: &Config,
    host: &Host,
    warnings: &mut Vec<String>,
    read: impl FnOnce() -> Net,
) -> Result<Net> {
    if config.network == NetworkPolicy::Require {
        return Err(Error::HostNetworkRequired);
    }
    if host.rdma_netns == RdmaNetns::Exclusive {
        return Err(Error::RdmaNetnsExclusive);
    }
    warnings.push(OWN_NETWORK_WARNING.to_string());
    Ok(read())
}

/// Applies the edits for `devices`/`nodes` to `spec`. Nothing is changed when it fails.
pub fn apply(
    spec: &mut Value,
    host: &Host,
    devices: &[&RdmaDevice],
    nodes: &[&CharDev],
    config: &Config,
    placement: &Placement,
) -> Result<Report> {
    let mut warnings = Vec::new();
    // Decide the network first: it is the one edit that can refuse.
    let namespaces =
        spec.pointer("/linux/namespaces").and_then(Value::as_array).cloned().unwrap_or_default();
    let net =
        namespaces.iter().position(|n| n.get("type").and_then(Value::as_str) == Some("network"));
    let (network, net) = match net {
        None => (NetworkOutcome::AlreadyHost, Net::Host),
        // Docker's `--network host` names the host's namespace by a path of its own
        // (`/var/run/docker/netns/default`; moby `WithNamespaces` sets `SandboxKey`): that is
        // host networking already, and the path is left as it is.
        Some(i) if namespaces[i].get("path").and_then(Value::as_str).is_some_and(is_own_netns) => {
            (NetworkOutcome::AlreadyHost, Net::Host)
        }
        Some(i) => {
            let path = namespaces[i].get("path").and_then(Value::as_str).filter(|p| !p.is_empty());
            let managed = path.is_some() || engine_hook(spec);
            match managed {
                // A fresh namespace no engine sets up would hold only `lo`: the container goes
                // on the host's network, unless runc could not run it there.
                false => match kept_own(spec, &namespaces) {
                    None => (NetworkOutcome::Dropped, Net::Host),
                    Some(why) => {
                        let net = own_network(config, host, &mut warnings, || Net::Unread {
                            why: format!("runc creates it, with `lo` alone: {why}"),
                        })?;
                        (NetworkOutcome::Own, net)
                    }
                },
                true => {
                    let net = own_network(config, host, &mut warnings, || match path {
                        Some(p) => Net::read(std::path::Path::new(p)),
                        None => Net::Unread { why: UNREAD_ENGINE_HOOK.into() },
                    })?;
                    (NetworkOutcome::Own, net)
                }
            }
        }
    };

    let root =
        spec.as_object_mut().ok_or_else(|| Error::Invalid("spec is not a JSON object".into()))?;
    let linux = root.entry("linux").or_insert_with(|| json!({}));
    if !linux.is_object() {
        return Err(Error::Invalid("spec's `linux` is not an object".into()));
    }
    if network == NetworkOutcome::Dropped {
        if let Some(ns) = linux.get_mut("namespaces").and_then(Value::as_array_mut) {
            ns.retain(|n| n.get("type").and_then(Value::as_str) != Some("network"));
        }
    }
    // Device nodes for the runtime to create, and the cgroup rules to use them. In a user
    // namespace runc cannot make nodes: it bind-mounts the host's, which keep the host's owner,
    // so no owner is asked for there (runtime-tools' `linux_uid_mappings` checks it).
    let userns = has_user_namespace(&namespaces);
    let devs =
        linux.as_object_mut().expect("checked").entry("devices").or_insert_with(|| json!([]));
    if let Some(list) = devs.as_array_mut() {
        for n in nodes {
            list.retain(|d| d.get("path").and_then(Value::as_str) != Some(n.path.as_str()));
            let mut dev = json!({"path": n.path, "type": "c", "major": n.major, "minor": n.minor, "fileMode": 0o666, "uid": 0, "gid": 0});
            if userns {
                let d = dev.as_object_mut().expect("an object");
                d.remove("uid");
                d.remove("gid");
            }
            list.push(dev);
        }
    }
    let resources =
        linux.as_object_mut().expect("checked").entry("resources").or_insert_with(|| json!({}));
    if let Some(res) = resources.as_object_mut() {
        let rules = res.entry("devices").or_insert_with(|| json!([]));
        if let Some(rules) = rules.as_array_mut() {
            for n in nodes {
                // Idempotent: an engine retrying `create` on the same bundle must not pile up rules.
                let rule = json!({"allow": true, "type": "c", "major": n.major, "minor": n.minor, "access": "rwm"});
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
        }
    }

    let process = root.entry("process").or_insert_with(|| json!({}));
    let memlock = config.memlock.value();
    if let Some(p) = process.as_object_mut() {
        // A duplicate rlimit type is an error for runc: replace, never append a second.
        let rl = p.entry("rlimits").or_insert_with(|| json!([]));
        if let Some(rl) = rl.as_array_mut() {
            rl.retain(|r| r.get("type").and_then(Value::as_str) != Some("RLIMIT_MEMLOCK"));
            rl.push(json!({"type": "RLIMIT_MEMLOCK", "hard": memlock, "soft": memlock}));
        }
    }

    let mut env_added = Vec::new();
    if config.env_presets {
        let env = process
            .as_object_mut()
            .and_then(|p| Some(p.entry("env").or_insert_with(|| json!([])).as_array_mut()?.clone()))
            .unwrap_or_default();
        // Derived from this host's sysfs for these devices (nccl.rs), merged by the policy.
        let derived = nccl::derive(host, devices, &net, &placement.context(config));
        let plan = nccl::plan(
            &|k| env_get(&env, k).map(str::to_string),
            &derived,
            host,
            &net,
            devices,
            config.env_policy,
            true,
        );
        for (d, m) in port_mtus(devices.iter().copied()) {
            if !mtu_expected(m) {
                warnings.push(format!("{} has MTU {m}: eRDMA expects {MTU_JUMBO} with jumbo frames or {MTU_STANDARD} without; data corruption is possible", d.name));
            }
        }
        if let Some(v) = plan.set.iter().find(|c| c.name == NO_LL128.0 && c.replaced.is_none()) {
            warnings.push(format!(
                "an MTU is not {MTU_JUMBO}: NCCL's LL128 protocol is turned off ({}={})",
                v.name, v.value
            ));
        }
        warnings.extend(plan.warnings);
        // Why GPU Direct RDMA stays off, where it does: the job will be slower, not broken.
        warnings.extend(
            derived.notes.iter().filter(|n| n.starts_with("GPU Direct RDMA cannot")).cloned(),
        );
        if network == NetworkOutcome::Own {
            warnings
                .extend(derived.notes.iter().filter(|n| n.contains("NCCL_SOCKET_IFNAME")).cloned());
        }
        if let Some(list) =
            process.as_object_mut().and_then(|p| p.get_mut("env")).and_then(Value::as_array_mut)
        {
            for c in &plan.set {
                if c.replaced.is_some() {
                    list.retain(|e| {
                        e.as_str().and_then(|e| e.split_once('=')).is_none_or(|(k, _)| k != c.name)
                    });
                }
                list.push(json!(format!("{}={}", c.name, c.value)));
                env_added.push(format!("{}={}", c.name, c.value));
            }
        }
    }
    Ok(Report {
        devices: devices.iter().map(|d| d.name.clone()).collect(),
        nodes: nodes.iter().map(|n| n.path.clone()).collect(),
        memlock,
        network,
        net,
        env_added,
        pairing: placement.pairing.clone(),
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Memlock;
    use crate::discover::Port;
    use serde_json::json;

    fn port(mtu: u32, state: u32) -> Port {
        Port {
            num: 1,
            state,
            state_name: if state == 4 { "ACTIVE".into() } else { "DOWN".into() },
            link_layer: Some("Ethernet".into()),
            netdev: Some("eth0".into()),
            mtu: Some(mtu),
            roce_v2_ipv4_gid: Some(1),
            roce_v2_ipv4: None,
        }
    }

    fn dev(name: &str, n: u32, mtu: u32, driver: &str) -> RdmaDevice {
        RdmaDevice {
            name: name.into(),
            driver: Some(driver.into()),
            ports: vec![port(mtu, 4)],
            uverbs: Some(CharDev {
                path: format!("/dev/infiniband/uverbs{n}"),
                host_path: format!("/dev/infiniband/uverbs{n}").into(),
                major: 231,
                minor: 192 + n,
            }),
            problem: None,
        }
    }

    fn cm() -> CharDev {
        CharDev {
            path: "/dev/infiniband/rdma_cm".into(),
            host_path: "/dev/infiniband/rdma_cm".into(),
            major: 10,
            minor: 58,
        }
    }

    fn host(mtus: &[u32]) -> Host {
        Host {
            devices: mtus
                .iter()
                .enumerate()
                .map(|(i, m)| dev(&format!("erdma_{i}"), i as u32, *m, "erdma"))
                .collect(),
            others: vec![],
            rdma_cm: Some(cm()),
            netdevs: vec!["eth0".into(), "lo".into()],
            rdma_netns: crate::netns::RdmaNetns::Shared,
        }
    }

    /// The spec `runc spec` writes, trimmed to what the edits look at.
    fn runc_spec() -> Value {
        json!({
            "ociVersion": "1.0.2-dev",
            "process": {"args": ["sh"], "env": ["PATH=/bin", "TERM=xterm"], "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}]},
            "linux": {
                "resources": {"devices": [{"allow": false, "access": "rwm"}]},
                "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}]
            },
            "x-unknown": {"kept": true}
        })
    }

    /// Selects `request` on `host` and applies it to `spec`.
    fn edit(spec: &mut Value, request: Request, host: &Host, config: &Config) -> Result<Report> {
        let (devices, nodes) = select(&request, host, config)?;
        apply(spec, host, &devices, &nodes, config, &Placement::default())
    }

    fn env(spec: &Value) -> Vec<String> {
        spec["process"]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    }

    fn env_value<'a>(spec: &'a Value, k: &str) -> Option<&'a str> {
        env_get(spec["process"]["env"].as_array().unwrap(), k)
    }

    #[test]
    fn mtu_8500_keeps_ll128() {
        let mut s = runc_spec();
        let r = edit(&mut s, Request::All, &host(&[8500]), &Config::default()).unwrap();
        assert_eq!(env_value(&s, "NCCL_PROTO"), None);
        assert_eq!(env_value(&s, "NCCL_IB_HCA"), Some("=erdma_0:1"));
        assert_eq!(env_value(&s, "NCCL_SOCKET_IFNAME"), Some("=eth0"));
        assert_eq!(env_value(&s, "NCCL_IB_GID_INDEX"), Some("1"));
        for (k, v) in erdma_common::nccl::PRESETS {
            assert_eq!(env_value(&s, k), Some(*v), "{k}");
        }
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        // Added after the container's own entries, which stay first and unchanged.
        assert_eq!(&env(&s)[..2], ["PATH=/bin", "TERM=xterm"]);
    }

    #[test]
    fn mtu_1400_turns_ll128_off() {
        let mut s = runc_spec();
        let r = edit(&mut s, Request::All, &host(&[1400, 1400]), &Config::default()).unwrap();
        assert_eq!(env_value(&s, "NCCL_PROTO"), Some("^LL128"));
        assert_eq!(
            r.warnings.len(),
            1,
            "1400 is a valid MTU, only LL128 is reported: {:?}",
            r.warnings
        );
        assert!(r.warnings[0].contains("LL128"), "{:?}", r.warnings);
        // One 8500 and one 1400: LL128 is still unsafe.
        let mut s = runc_spec();
        edit(&mut s, Request::All, &host(&[8500, 1400]), &Config::default()).unwrap();
        assert_eq!(env_value(&s, "NCCL_PROTO"), Some("^LL128"));
    }

    #[test]
    fn other_mtus_are_misconfigurations() {
        let mut s = runc_spec();
        let r = edit(&mut s, Request::All, &host(&[9000]), &Config::default()).unwrap();
        assert_eq!(env_value(&s, "NCCL_PROTO"), Some("^LL128"));
        assert!(
            r.warnings.iter().any(|w| w.contains("erdma_0 has MTU 9000")
                && w.contains("8500")
                && w.contains("1400")),
            "{:?}",
            r.warnings
        );
    }

    #[test]
    fn container_values_that_work_are_never_overridden() {
        let mut s = runc_spec();
        let own = [
            "NCCL_PROTO=Simple",
            "NCCL_IB_HCA=erdma",
            "NCCL_DEBUG=WARN",
            "NCCL_SOCKET_IFNAME=eth",
            "NCCL_IB_GID_INDEX=3",
        ];
        s["process"]["env"].as_array_mut().unwrap().extend(own.iter().map(|e| json!(e)));
        let r = edit(&mut s, Request::All, &host(&[1400]), &Config::default()).unwrap();
        for e in own {
            let (k, v) = e.split_once('=').unwrap();
            assert_eq!(env_value(&s, k), Some(v));
            assert_eq!(
                env(&s).iter().filter(|x| x.starts_with(&format!("{k}="))).count(),
                1,
                "{k} defined twice"
            );
            assert!(
                !r.env_added.iter().any(|x| x.starts_with(&format!("{k}="))),
                "{k} reported as added"
            );
        }
        assert!(
            r.warnings.iter().all(|w| !w.contains("LL128")),
            "the container chose NCCL_PROTO: {:?}",
            r.warnings
        );
        // An empty value is a value the container set.
        let mut s = runc_spec();
        s["process"]["env"].as_array_mut().unwrap().push(json!("NCCL_PROTO="));
        edit(&mut s, Request::All, &host(&[1400]), &Config::default()).unwrap();
        assert_eq!(env_value(&s, "NCCL_PROTO"), Some(""));
    }

    #[test]
    fn container_values_that_cannot_work_here_are_repaired_unless_kept() {
        // An image built for PAI-DLC hosts (bond0, mlx5 names) on a host with eth0 and erdma_0.
        let own = ["NCCL_IB_HCA=mlx5_0", "NCCL_SOCKET_IFNAME=bond0", "NCCL_DEBUG=WARN"];
        let mut s = runc_spec();
        s["process"]["env"].as_array_mut().unwrap().extend(own.iter().map(|e| json!(e)));
        let r = edit(&mut s, Request::All, &host(&[8500]), &Config::default()).unwrap();
        assert_eq!(env_value(&s, "NCCL_IB_HCA"), Some("=erdma_0:1"));
        assert_eq!(env_value(&s, "NCCL_SOCKET_IFNAME"), Some("=eth0"));
        assert_eq!(env_value(&s, "NCCL_DEBUG"), Some("WARN"));
        for k in ["NCCL_IB_HCA", "NCCL_SOCKET_IFNAME"] {
            assert_eq!(
                env(&s).iter().filter(|x| x.starts_with(&format!("{k}="))).count(),
                1,
                "{k} defined twice"
            );
        }
        assert!(
            r.warnings
                .iter()
                .any(|w| w.starts_with("NCCL_IB_HCA=mlx5_0 replaced by NCCL_IB_HCA==erdma_0:1")),
            "{:?}",
            r.warnings
        );
        assert!(
            r.warnings.iter().any(|w| w.starts_with("NCCL_SOCKET_IFNAME=bond0 replaced")
                && w.contains("names no interface of this host")),
            "{:?}",
            r.warnings
        );
        // env_policy = "keep": the container's values stay, and the report says they cannot work.
        let mut s = runc_spec();
        s["process"]["env"].as_array_mut().unwrap().extend(own.iter().map(|e| json!(e)));
        let c = Config { env_policy: crate::config::EnvPolicy::Keep, ..Config::default() };
        let r = edit(&mut s, Request::All, &host(&[8500]), &c).unwrap();
        assert_eq!(
            (env_value(&s, "NCCL_IB_HCA"), env_value(&s, "NCCL_SOCKET_IFNAME")),
            (Some("mlx5_0"), Some("bond0"))
        );
        assert_eq!(
            r.warnings.iter().filter(|w| w.contains("kept (env_policy = \"keep\")")).count(),
            2,
            "{:?}",
            r.warnings
        );
    }

    #[test]
    fn nccl_ib_hca_names_the_selected_devices() {
        let h = host(&[8500, 8500, 8500]);
        let mut s = runc_spec();
        edit(&mut s, Request::All, &h, &Config::default()).unwrap();
        assert_eq!(env_value(&s, "NCCL_IB_HCA"), Some("=erdma_0:1,erdma_1:1,erdma_2:1"));
        let mut s = runc_spec();
        let r = edit(
            &mut s,
            Request::Named(vec!["erdma_2".into(), "erdma_0".into(), "erdma_2".into()]),
            &h,
            &Config::default(),
        )
        .unwrap();
        assert_eq!(env_value(&s, "NCCL_IB_HCA"), Some("=erdma_2:1,erdma_0:1"));
        assert_eq!(r.devices, ["erdma_2", "erdma_0"]);
        assert_eq!(
            r.nodes,
            ["/dev/infiniband/uverbs2", "/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"]
        );
    }

    #[test]
    fn no_presets_when_turned_off() {
        let mut s = runc_spec();
        let c = Config { env_presets: false, ..Config::default() };
        let r = edit(&mut s, Request::All, &host(&[1400]), &c).unwrap();
        assert_eq!(env(&s), ["PATH=/bin", "TERM=xterm"]);
        assert!(r.env_added.is_empty());
    }

    #[test]
    fn devices_rules_and_memlock() {
        let mut s = runc_spec();
        s["process"]["rlimits"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "RLIMIT_MEMLOCK", "hard": 65536, "soft": 65536}));
        s["linux"]["devices"] = json!([{"path": "/dev/infiniband/uverbs0", "type": "c", "major": 231, "minor": 1}, {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229}]);
        let c = Config { memlock: Memlock::Bytes(4 << 20), ..Config::default() };
        let r = edit(&mut s, Request::All, &host(&[8500]), &c).unwrap();
        assert_eq!(r.memlock, 4 << 20);
        // Replaced, never a second entry (a duplicate type is an error for runc).
        assert_eq!(
            s["process"]["rlimits"],
            json!([{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}, {"type": "RLIMIT_MEMLOCK", "hard": 4194304, "soft": 4194304}])
        );
        assert_eq!(
            s["linux"]["devices"],
            json!([
                {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229},
                {"path": "/dev/infiniband/uverbs0", "type": "c", "major": 231, "minor": 192, "fileMode": 438, "uid": 0, "gid": 0},
                {"path": "/dev/infiniband/rdma_cm", "type": "c", "major": 10, "minor": 58, "fileMode": 438, "uid": 0, "gid": 0}
            ])
        );
        assert_eq!(
            s["linux"]["resources"]["devices"],
            json!([
                {"allow": false, "access": "rwm"},
                {"allow": true, "type": "c", "major": 231, "minor": 192, "access": "rwm"},
                {"allow": true, "type": "c", "major": 10, "minor": 58, "access": "rwm"}
            ])
        );
        assert_eq!(s["x-unknown"], json!({"kept": true}));
        // The default is unlimited (RLIM_INFINITY).
        let mut s = runc_spec();
        edit(&mut s, Request::All, &host(&[8500]), &Config::default()).unwrap();
        assert_eq!(
            s["process"]["rlimits"][1],
            json!({"type": "RLIMIT_MEMLOCK", "hard": u64::MAX, "soft": u64::MAX})
        );
    }

    #[test]
    fn applying_twice_changes_nothing_more() {
        let h = host(&[1400]);
        let mut once = runc_spec();
        edit(&mut once, Request::All, &h, &Config::default()).unwrap();
        let mut twice = once.clone();
        let r = edit(&mut twice, Request::All, &h, &Config::default()).unwrap();
        assert_eq!(once, twice);
        assert!(r.env_added.is_empty());
        assert_eq!(r.network, NetworkOutcome::AlreadyHost);
    }

    #[test]
    fn a_spec_without_linux_or_process() {
        let mut s = json!({"ociVersion": "1.0.2"});
        let r = edit(&mut s, Request::All, &host(&[8500]), &Config::default()).unwrap();
        assert_eq!(r.network, NetworkOutcome::AlreadyHost);
        assert_eq!(s["linux"]["devices"].as_array().unwrap().len(), 2);
        assert_eq!(s["process"]["rlimits"].as_array().unwrap().len(), 1);
        assert_eq!(env_value(&s, "NCCL_IB_HCA"), Some("=erdma_0:1"));
    }

    #[test]
    fn network_namespace_policy() {
        let h = host(&[8500]);
        // A fresh private namespace no engine manages is dropped; the others stay in order.
        let mut s = runc_spec();
        let r = edit(&mut s, Request::All, &h, &Config::default()).unwrap();
        assert_eq!(r.network, NetworkOutcome::Dropped);
        assert_eq!(
            s["linux"]["namespaces"],
            json!([{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}])
        );

        let managed_path = {
            let mut s = runc_spec();
            s["linux"]["namespaces"][1]["path"] = json!("/var/run/netns/cni-1234");
            s
        };
        let docker_hook = {
            let mut s = runc_spec();
            s["hooks"] = json!({"prestart": [{"path": "/usr/bin/dockerd", "args": ["libnetwork-setkey", "-exec-root=/var/run/docker", "0123abc", "4567def"]}]});
            s
        };
        let require = Config { network: NetworkPolicy::Require, ..Config::default() };
        for managed in [managed_path, docker_hook] {
            let mut s = managed.clone();
            let e = edit(&mut s, Request::All, &h, &require).unwrap_err();
            assert!(matches!(e, Error::HostNetworkRequired), "{e}");
            let msg = e.to_string();
            assert!(
                msg.contains("--network host")
                    && msg.contains("hostNetwork: true")
                    && msg.contains("network = \"any\""),
                "{msg}"
            );
            assert_eq!(s, managed, "a refused spec is unchanged");

            // The default: the container keeps its network, and is told about rdma_cm once.
            let mut s = managed.clone();
            let r = edit(&mut s, Request::All, &h, &Config::default()).unwrap();
            assert_eq!(r.network, NetworkOutcome::Own);
            assert_eq!(
                s["linux"]["namespaces"], managed["linux"]["namespaces"],
                "a managed namespace is never touched"
            );
            assert_eq!(
                r.warnings.iter().filter(|w| w.contains("rdma_cm")).count(),
                1,
                "{:?}",
                r.warnings
            );
            // Neither namespace can be read here (a path that does not exist, Docker's before
            // its hook ran): the host's interface is not given, NCCL chooses.
            assert!(matches!(r.net, Net::Unread { .. }), "{:?}", r.net);
            assert_eq!(env_value(&s, "NCCL_SOCKET_IFNAME"), None);
            assert_eq!(env_value(&s, "NCCL_IB_HCA"), Some("=erdma_0:1"));
            assert!(
                r.warnings.iter().any(|w| w.contains("NCCL_SOCKET_IFNAME is not set")),
                "{:?}",
                r.warnings
            );

            // Exclusive RDMA namespaces: the devices cannot be opened there, refused.
            let exclusive = Host { rdma_netns: RdmaNetns::Exclusive, ..h.clone() };
            let mut s = managed.clone();
            let e = edit(&mut s, Request::All, &exclusive, &Config::default()).unwrap_err();
            assert!(
                matches!(e, Error::RdmaNetnsExclusive)
                    && e.to_string().contains("rdma system set netns shared"),
                "{e}"
            );
            assert_eq!(s, managed, "a refused spec is unchanged");
        }
        // A path to the host's own namespace (Docker's `--network host`) is host networking.
        let mut s = runc_spec();
        s["linux"]["namespaces"][1]["path"] = json!("/proc/self/ns/net");
        let before = s.clone();
        let r = edit(&mut s, Request::All, &h, &Config::default()).unwrap();
        assert_eq!(r.network, NetworkOutcome::AlreadyHost);
        assert_eq!(s["linux"]["namespaces"], before["linux"]["namespaces"]);
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        // A fresh namespace runc could not run the spec without: kept, with the warning, and
        // refused under `require`.
        let sysctl = {
            let mut s = runc_spec();
            s["linux"]["sysctl"] =
                json!({"kernel.shm_rmid_forced": "1", "net.ipv4.ip_forward": "1"});
            s
        };
        let userns = {
            let mut s = runc_spec();
            s["linux"]["namespaces"].as_array_mut().unwrap().push(json!({"type": "user"}));
            s["mounts"] = json!([{"destination": "/sys", "type": "sysfs", "source": "sysfs"}]);
            s
        };
        for fresh in [&sysctl, &userns] {
            let mut s = fresh.clone();
            let r = edit(&mut s, Request::All, &h, &Config::default()).unwrap();
            assert_eq!(r.network, NetworkOutcome::Own);
            assert_eq!(s["linux"]["namespaces"], fresh["linux"]["namespaces"]);
            assert!(r.warnings.iter().any(|w| w.contains("rdma_cm")), "{:?}", r.warnings);
            let Net::Unread { why } = &r.net else { panic!("{:?}", r.net) };
            assert!(why.contains("net.ipv4.ip_forward") || why.contains("user namespace"), "{why}");
            assert!(!why.contains("kernel.shm_rmid_forced"), "{why}");
            let mut s = fresh.clone();
            let e = edit(&mut s, Request::All, &h, &require).unwrap_err();
            assert!(matches!(e, Error::HostNetworkRequired), "{e}");
            assert_eq!(&s, fresh, "a refused spec is unchanged");
        }
        // In a user namespace the nodes are the host's, bind-mounted: no owner is asked for.
        let mut s = userns.clone();
        edit(&mut s, Request::All, &h, &Config::default()).unwrap();
        let devices = s["linux"]["devices"].as_array().unwrap();
        assert!(!devices.is_empty());
        for d in devices {
            assert!(d.get("uid").is_none() && d.get("gid").is_none(), "{d}");
            assert_eq!(d["fileMode"], 0o666);
        }
        // Sysctls of other kinds, a user namespace without sysfs: the host's network does.
        let mut s = runc_spec();
        s["linux"]["sysctl"] = json!({"kernel.shm_rmid_forced": "1"});
        s["linux"]["namespaces"].as_array_mut().unwrap().push(json!({"type": "user"}));
        assert_eq!(
            edit(&mut s, Request::All, &h, &Config::default()).unwrap().network,
            NetworkOutcome::Dropped
        );
        // An empty path is no path: the namespace is fresh.
        let mut s = runc_spec();
        s["linux"]["namespaces"][1]["path"] = json!("");
        assert_eq!(
            edit(&mut s, Request::All, &h, &Config::default()).unwrap().network,
            NetworkOutcome::Dropped
        );
        // Already the host's.
        let mut s = json!({"linux": {"namespaces": [{"type": "mount"}]}});
        assert_eq!(
            edit(&mut s, Request::All, &h, &Config::default()).unwrap().network,
            NetworkOutcome::AlreadyHost
        );
    }

    #[test]
    fn selection_errors() {
        let c = Config::default();
        let mut h = host(&[8500, 8500]);
        h.others.push(dev("mlx5_0", 2, 9000, "mlx5_core"));
        let named = |n: &str| Request::Named(n.split(',').map(String::from).collect());

        let e = select(&named("erdma_7"), &h, &c).unwrap_err().to_string();
        assert_eq!(e, "eRDMA device `erdma_7` does not exist (found: erdma_0, erdma_1)");
        // Another driver's device is not there for the taking.
        let e = select(&named("mlx5_0"), &h, &c).unwrap_err().to_string();
        assert!(e.contains("`mlx5_0` has driver mlx5_core") && e.contains("`drivers`"), "{e}");
        // Unless the operator configured that driver (then discovery lists it in `devices`).
        let mut h2 = h.clone();
        h2.devices.push(h2.others.pop().unwrap());
        let (d, _) = select(
            &named("mlx5_0"),
            &h2,
            &Config { drivers: vec!["erdma".into(), "mlx5_core".into()], ..c.clone() },
        )
        .unwrap();
        assert_eq!(d[0].name, "mlx5_0");

        h.devices[1].uverbs = None;
        h.devices[1].problem = Some("/dev/infiniband/uverbs1: No such file or directory".into());
        let e = select(&named("erdma_1"), &h, &c).unwrap_err().to_string();
        assert!(e.contains("erdma_1 has no usable uverbs node: /dev/infiniband/uverbs1"), "{e}");
        // `all` takes the usable ones.
        let (d, n) = select(&Request::All, &h, &c).unwrap();
        assert_eq!((d.len(), n.len()), (1, 2));
        h.devices[0].uverbs = None;
        let e = select(&Request::All, &h, &c).unwrap_err().to_string();
        assert!(e.contains("no eRDMA device was found"), "{e}");

        let mut h = host(&[8500]);
        h.rdma_cm = None;
        let e = select(&Request::All, &h, &c).unwrap_err().to_string();
        assert!(e.contains("rdma_cm"), "{e}");
        assert!(select(&Request::None, &host(&[]), &c).unwrap().0.is_empty());
    }

    #[test]
    fn a_failed_edit_leaves_the_spec_alone() {
        let mut s = json!({"ociVersion": "1.0.2", "linux": "not an object"});
        let before = s.clone();
        assert!(edit(&mut s, Request::All, &host(&[8500]), &Config::default()).is_err());
        assert_eq!(s, before);
    }
}
