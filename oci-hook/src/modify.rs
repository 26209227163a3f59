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
use crate::request::Request;

/// NCCL presets PAI-DLC sets on eRDMA instances (seed 001). `NCCL_IB_HCA` is replaced by the
/// devices actually given to the container.
pub const NCCL_PRESETS: &[(&str, &str)] = &[
    ("NCCL_DEBUG", "INFO"),
    ("NCCL_SOCKET_IFNAME", "eth0"),
    ("NCCL_IB_GID_INDEX", "1"),
    ("NCCL_IB_QPS_PER_CONNECTION", "8"),
    ("NCCL_MIN_NCHANNELS", "16"),
    ("NCCL_NET_PLUGIN", "none"),
    ("PYTHONUNBUFFERED", "1"),
];

/// MTU with jumbo frames; NCCL's LL128 protocol is only safe there (seed 000).
pub const MTU_JUMBO: u32 = 8500;
pub const MTU_STANDARD: u32 = 1400;

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkOutcome {
    /// The spec already shares the host's network namespace.
    AlreadyHost,
    /// A fresh private namespace no engine manages was dropped.
    Dropped,
    /// An engine manages it and the policy is `warn`.
    ManagedWarned,
}

/// What was done, for logs and `--json` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub devices: Vec<String>,
    pub nodes: Vec<String>,
    pub memlock: u64,
    pub network: NetworkOutcome,
    pub env_added: Vec<String>,
    pub warnings: Vec<String>,
}

/// The devices `request` selects on `host`, with the nodes they need (`rdma_cm` always).
pub fn select<'a>(request: &Request, host: &'a Host, config: &Config) -> Result<(Vec<&'a RdmaDevice>, Vec<&'a CharDev>)> {
    let chosen: Vec<&RdmaDevice> = match request {
        Request::None => return Ok((Vec::new(), Vec::new())),
        Request::All => host.devices.iter().filter(|d| d.uverbs.is_some()).collect(),
        Request::Named(names) => {
            let all: Vec<&RdmaDevice> = host.devices.iter().chain(&host.others).collect();
            names
                .iter()
                .map(|n| {
                    let d = all.iter().find(|d| &d.name == n).ok_or_else(|| Error::UnknownDevice {
                        name: n.clone(),
                        found: if all.is_empty() { "none".into() } else { all.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ") },
                    })?;
                    if d.uverbs.is_none() {
                        return Err(Error::DeviceUnusable { name: n.clone(), reason: d.problem.clone().unwrap_or_default() });
                    }
                    Ok(*d)
                })
                .collect::<Result<_>>()?
        }
    };
    if chosen.is_empty() {
        return Err(Error::NoDevices { sysfs: config.sysfs_root.clone() });
    }
    let mut nodes: Vec<&CharDev> = chosen.iter().filter_map(|d| d.uverbs.as_ref()).collect();
    match &host.rdma_cm {
        Some(cm) => nodes.push(cm),
        None => return Err(Error::DeviceUnusable { name: "rdma_cm".into(), reason: "no /dev/infiniband/rdma_cm on this host".into() }),
    }
    Ok((chosen, nodes))
}

/// Docker (20.10-27) sets up container networking from a `libnetwork-setkey` prestart hook.
fn engine_hook(spec: &Value) -> bool {
    ["prestart", "createRuntime"].iter().any(|stage| {
        spec.pointer(&format!("/hooks/{stage}"))
            .and_then(Value::as_array)
            .is_some_and(|hooks| hooks.iter().any(|h| h.get("args").and_then(Value::as_array).is_some_and(|a| a.iter().any(|x| x.as_str() == Some("libnetwork-setkey")))))
    })
}

fn env_get<'a>(env: &'a [Value], name: &str) -> Option<&'a str> {
    env.iter().rev().filter_map(Value::as_str).find_map(|e| e.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
}

/// Applies the edits for `devices`/`nodes` to `spec`. Nothing is changed when it fails.
pub fn apply(spec: &mut Value, devices: &[&RdmaDevice], nodes: &[&CharDev], config: &Config) -> Result<Report> {
    let mut warnings = Vec::new();
    // Decide the network first: it is the one edit that can refuse.
    let namespaces = spec.pointer("/linux/namespaces").and_then(Value::as_array).cloned().unwrap_or_default();
    let net = namespaces.iter().position(|n| n.get("type").and_then(Value::as_str) == Some("network"));
    let network = match net {
        None => NetworkOutcome::AlreadyHost,
        Some(i) => {
            let managed = namespaces[i].get("path").and_then(Value::as_str).is_some_and(|p| !p.is_empty()) || engine_hook(spec);
            match (managed, config.network) {
                (false, _) => NetworkOutcome::Dropped,
                (true, NetworkPolicy::Require) => return Err(Error::HostNetworkRequired),
                (true, NetworkPolicy::Warn) => {
                    warnings.push("the engine manages this container's network namespace: eRDMA will not work and NCCL will fall back to TCP; use host networking".into());
                    NetworkOutcome::ManagedWarned
                }
            }
        }
    };

    let root = spec.as_object_mut().ok_or_else(|| Error::Invalid("spec is not a JSON object".into()))?;
    let linux = root.entry("linux").or_insert_with(|| json!({}));
    if !linux.is_object() {
        return Err(Error::Invalid("spec's `linux` is not an object".into()));
    }
    if network == NetworkOutcome::Dropped {
        if let Some(ns) = linux.get_mut("namespaces").and_then(Value::as_array_mut) {
            ns.retain(|n| n.get("type").and_then(Value::as_str) != Some("network"));
        }
    }
    // Device nodes for the runtime to create, and the cgroup rules to use them.
    let devs = linux.as_object_mut().expect("checked").entry("devices").or_insert_with(|| json!([]));
    if let Some(list) = devs.as_array_mut() {
        for n in nodes {
            list.retain(|d| d.get("path").and_then(Value::as_str) != Some(n.path.as_str()));
            list.push(json!({"path": n.path, "type": "c", "major": n.major, "minor": n.minor, "fileMode": 0o666, "uid": 0, "gid": 0}));
        }
    }
    let resources = linux.as_object_mut().expect("checked").entry("resources").or_insert_with(|| json!({}));
    if let Some(res) = resources.as_object_mut() {
        let rules = res.entry("devices").or_insert_with(|| json!([]));
        if let Some(rules) = rules.as_array_mut() {
            for n in nodes {
                rules.push(json!({"allow": true, "type": "c", "major": n.major, "minor": n.minor, "access": "rwm"}));
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
        let env = process.as_object_mut().and_then(|p| Some(p.entry("env").or_insert_with(|| json!([])).as_array_mut()?.clone())).unwrap_or_default();
        let add = |k: &str, v: String, env_added: &mut Vec<String>| {
            if env_get(&env, k).is_none() {
                env_added.push(format!("{k}={v}"));
            }
        };
        for (k, v) in NCCL_PRESETS {
            add(k, v.to_string(), &mut env_added);
        }
        add("NCCL_IB_HCA", devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(","), &mut env_added);
        // LL128 needs the 8500 MTU (seed 000); anything else gets it turned off.
        let mtus: Vec<u32> = devices.iter().flat_map(|d| d.ports.iter().filter_map(|p| p.mtu)).collect();
        for (d, m) in devices.iter().flat_map(|d| d.ports.iter().filter_map(move |p| p.mtu.map(|m| (d, m)))) {
            if m != MTU_JUMBO && m != MTU_STANDARD {
                warnings.push(format!("{} has MTU {m}: eRDMA expects {MTU_JUMBO} with jumbo frames or {MTU_STANDARD} without; data corruption is possible", d.name));
            }
        }
        if mtus.iter().any(|m| *m != MTU_JUMBO) {
            if env_get(&env, "NCCL_PROTO").is_none() {
                env_added.push("NCCL_PROTO=^LL128".into());
                warnings.push(format!("MTU {:?} is not {MTU_JUMBO}: NCCL's LL128 protocol is turned off (NCCL_PROTO=^LL128)", mtus));
            }
        }
        if let Some(list) = process.as_object_mut().and_then(|p| p.get_mut("env")).and_then(Value::as_array_mut) {
            list.extend(env_added.iter().map(|e| json!(e)));
        }
    }
    Ok(Report {
        devices: devices.iter().map(|d| d.name.clone()).collect(),
        nodes: nodes.iter().map(|n| n.path.clone()).collect(),
        memlock,
        network,
        env_added,
        warnings,
    })
}
