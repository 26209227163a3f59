//! CDI spec generation (`erdma-oci-hook cdi generate`), kind `aliyun.com/erdma`.
//!
//! One CDI device per usable eRDMA device, named as the kernel names it (`erdma_0`, `rocep…`),
//! holding its uverbs node, and a device `all` holding every uverbs node. What every eRDMA
//! container needs whichever devices it asked for, `rdma_cm` and the NCCL environment, is a
//! spec-level edit: the CDI spec ("OCI Edits") applies those whenever any device of the spec is
//! requested, and a node listed once gets one device-cgroup rule, not one per device.
//!
//! What CDI cannot do (the CDI specification has no rlimits and no namespaces): a container given these
//! devices still needs `--ulimit memlock=-1` from its user, or the runtime wrapper / hooks. One
//! spec serves every container, whichever network it is on, so `NCCL_SOCKET_IFNAME` is in it
//! only under `network = "require"` (every asking container on the host's network); else NCCL
//! chooses the container's interface itself. There are no CDI hooks here on purpose: the
//! devices and env are plain edits.
//!
//! Env caveat: the CDI library sets spec-level `env` by replacing a variable the container
//! already has (container-device-interface `internal/ociedit`, `addEnv`), so unlike the runtime
//! wrapper the presets win over the container's own values. `env_presets = false` in the config
//! leaves them out (only `NCCL_IB_HCA` stays, which names the devices).
use serde_json::{json, Map, Value};

use crate::config::Config;
use crate::discover::{self, CharDev, Host};
use crate::error::{Error, Result};
use crate::nccl;
use crate::netns::Net;

/// The CDI kind: `--device aliyun.com/erdma=all` (the ACK GDR guide's resource is `aliyun/erdma`).
pub const KIND: &str = "aliyun.com/erdma";
/// The device that holds every eRDMA device.
pub const ALL: &str = "all";
/// Where engines look for CDI specs, the later directory taking precedence (CDI SPEC.md,
/// "CDI JSON Specification"; container-device-interface `DefaultSpecDirs`).
pub const SPEC_DIRS: &[&str] = &["/etc/cdi", "/var/run/cdi"];
/// The file name `doctor` suggests for `cdi generate --output`.
pub const SPEC_FILE: &str = "erdma.json";

/// The spec for this host's eRDMA devices (discovered under the configured sysfs and /dev).
pub fn generate(config: &Config) -> Result<Value> {
    let host = discover::discover(&config.sysfs_root, &config.dev_root, &config.drivers)?;
    spec_for(&host, config)
}

/// Writes a rendered spec to `path` (`/etc/cdi/erdma.json`, `/var/run/cdi/erdma.json`)
/// atomically, creating the directory: engines watch these directories and must never see a
/// half-written spec.
pub fn write(path: &std::path::Path, text: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(Error::io("creating directory", dir))?;
    }
    crate::spec::write_bytes_atomic(path, text)
}

/// A CDI device node for `dev`. `hostPath` only when the node is somewhere else on the host
/// than in the container (a test's /dev root): it is the one field here that needs CDI 0.5.0.
///
/// `permissions` is `rw`, not the default `rwm`: the runtime creates the node itself (runc,
/// crun and Docker all allow `m` on every char device by default, `c *:* m`), and what the
/// workload needs is to open it.
fn device_node(dev: &CharDev) -> Value {
    let mut node = Map::new();
    node.insert("path".into(), json!(dev.path));
    let host_path = dev.host_path.to_string_lossy();
    if host_path != dev.path {
        node.insert("hostPath".into(), json!(host_path));
    }
    node.insert("type".into(), json!("c"));
    node.insert("major".into(), json!(dev.major));
    node.insert("minor".into(), json!(dev.minor));
    node.insert("permissions".into(), json!("rw"));
    Value::Object(node)
}

/// CDI device names (SPEC.md, "CDI Devices"): alphanumerics at both ends, `-`, `_`, `.` between.
pub fn valid_device_name(name: &str) -> bool {
    let ok_end = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    ok_end(name.chars().next())
        && ok_end(name.chars().last())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The spec for `host`. Devices without a usable uverbs node are left out (with a warning);
/// a host with none, or without `rdma_cm`, is an error: a CDI spec needs at least one device.
pub fn spec_for(host: &Host, config: &Config) -> Result<Value> {
    let usable: Vec<_> = host
        .devices
        .iter()
        .filter(|d| {
            if d.uverbs.is_none() {
                tracing::warn!(
                    "{} left out of the CDI spec: {}",
                    d.name,
                    d.problem.as_deref().unwrap_or("no usable uverbs node")
                );
            }
            d.uverbs.is_some()
        })
        .collect();
    if usable.is_empty() {
        return Err(Error::NoDevices { sysfs: config.sysfs_root.clone() });
    }
    let rdma_cm = host.rdma_cm.as_ref().ok_or_else(|| Error::DeviceUnusable {
        name: "rdma_cm".into(),
        reason: "no /dev/infiniband/rdma_cm on this host".into(),
    })?;
    for d in &usable {
        if d.name == ALL || !valid_device_name(&d.name) {
            return Err(Error::Invalid(format!("eRDMA device name `{}` cannot be a CDI device name (reserved, or not [A-Za-z0-9][A-Za-z0-9_.-]*[A-Za-z0-9])", d.name)));
        }
    }

    let mut devices: Vec<(String, Vec<&CharDev>)> = usable
        .iter()
        .map(|d| (d.name.clone(), vec![d.uverbs.as_ref().expect("filtered")]))
        .collect();
    devices.push((ALL.to_string(), usable.iter().filter_map(|d| d.uverbs.as_ref()).collect()));

    // Derived for all devices, as the runtime wrapper derives them for the ones a container
    // asked for (nccl.rs): CDI env cannot depend on which devices were asked for (module docs),
    // nor on the network a container is on: the host's interface only where every container
    // that asks must be on the host's network.
    let derived =
        nccl::derive_for_any_gpus(host, &usable, &Net::any_container(config.network), config);
    for n in &derived.notes {
        tracing::warn!("{n}");
    }
    let mut env: Vec<String> = Vec::new();
    if config.env_presets {
        env.extend(derived.with_presets().iter().map(|(k, v)| format!("{k}={v}")));
    } else if let Some(hca) = derived.get("NCCL_IB_HCA") {
        env.push(format!("NCCL_IB_HCA={hca}"));
    }
    Ok(render(KIND, &devices, &[rdma_cm], env))
}

/// A CDI spec of `kind` with `devices` (each a name and its device nodes) and, as spec-level
/// edits (applied once to a container given any device of the spec), the `common` device nodes
/// and `env` (`NAME=value`), at the lowest `cdiVersion` that has what it uses. The one renderer
/// of CDI specs: the host's spec here, a DRA claim's in erdma-kube.
pub fn render(
    kind: &str,
    devices: &[(String, Vec<&CharDev>)],
    common: &[&CharDev],
    env: Vec<String>,
) -> Value {
    let devices: Vec<Value> = devices
        .iter()
        .map(|(name, nodes)| {
            let nodes: Vec<Value> = nodes.iter().map(|n| device_node(n)).collect();
            json!({"name": name, "containerEdits": {"deviceNodes": nodes}})
        })
        .collect();
    let common: Vec<Value> = common.iter().map(|n| device_node(n)).collect();
    let mut spec = Map::new();
    spec.insert("cdiVersion".into(), json!(""));
    spec.insert("kind".into(), json!(kind));
    spec.insert("devices".into(), Value::Array(devices));
    spec.insert("containerEdits".into(), json!({"env": env, "deviceNodes": common}));
    let mut spec = Value::Object(spec);
    let version = minimum_version(&spec);
    spec["cdiVersion"] = json!(version);
    spec
}

/// The lowest `cdiVersion` whose schema has every field `spec` uses.
///
/// From the version table in the CDI SPEC.md ("Released versions") and the
/// `requiresV0x0` rules of its `specs-go/version.go`: 0.3.0 is the earliest version the
/// reference library still accepts and already has `env`, `deviceNodes` with `type`,
/// `major`, `minor` and `permissions`; 0.4.0 added `mounts[].type`; 0.5.0 added
/// `deviceNodes[].hostPath` and device names starting with a digit; 0.6.0 added `annotations`
/// and dots in the kind's name; 0.7.0 `intelRdt` and `additionalGids`; 1.1.0 `netDevices`.
/// The lowest version matters: engines reject a `cdiVersion` newer than the library they
/// vendor (Podman 4.3 and containerd 1.7 carry CDI 0.5.x).
pub fn minimum_version(spec: &Value) -> &'static str {
    let devices =
        spec.get("devices").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let edits: Vec<&Value> = devices
        .iter()
        .filter_map(|d| d.get("containerEdits"))
        .chain(spec.get("containerEdits"))
        .collect();
    let has = |key: &str| edits.iter().any(|e| e.get(key).is_some());
    let any_item = |list: &str, key: &str| {
        edits.iter().any(|e| {
            e.get(list).and_then(Value::as_array).is_some_and(|l| {
                l.iter().any(|i| i.get(key).is_some_and(|v| v != "" && !v.is_null()))
            })
        })
    };
    if has("netDevices") {
        return "1.1.0";
    }
    if has("intelRdt") || has("additionalGids") {
        return "0.7.0";
    }
    let kind_name_dot = spec
        .get("kind")
        .and_then(Value::as_str)
        .and_then(|k| k.split_once('/'))
        .is_some_and(|(_, n)| n.contains('.'));
    if spec.get("annotations").is_some()
        || devices.iter().any(|d| d.get("annotations").is_some())
        || kind_name_dot
    {
        return "0.6.0";
    }
    let digit_name = devices
        .iter()
        .filter_map(|d| d.get("name").and_then(Value::as_str))
        .any(|n| n.starts_with(|c: char| c.is_ascii_digit()));
    if digit_name || any_item("deviceNodes", "hostPath") {
        return "0.5.0";
    }
    if any_item("mounts", "type") {
        return "0.4.0";
    }
    "0.3.0"
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::discover::{Port, RdmaDevice};

    fn dev(name: &str, n: u32, dev_root: &str, mtu: u32) -> RdmaDevice {
        RdmaDevice {
            name: name.into(),
            driver: Some("erdma".into()),
            ports: vec![Port {
                num: 1,
                state: 4,
                state_name: "ACTIVE".into(),
                link_layer: Some("Ethernet".into()),
                netdev: Some(format!("eth{n}")),
                mtu: Some(mtu),
                roce_v2_ipv4_gid: Some(1),
                roce_v2_ipv4: None,
            }],
            uverbs: Some(CharDev {
                path: format!("/dev/infiniband/uverbs{n}"),
                host_path: PathBuf::from(format!("{dev_root}/infiniband/uverbs{n}")),
                major: 231,
                minor: 192 + n,
            }),
            problem: None,
        }
    }

    fn host(dev_root: &str, mtu: u32) -> Host {
        Host {
            devices: vec![dev("erdma_0", 0, dev_root, mtu), dev("erdma_1", 1, dev_root, mtu)],
            others: vec![],
            rdma_cm: Some(CharDev {
                path: "/dev/infiniband/rdma_cm".into(),
                host_path: PathBuf::from(format!("{dev_root}/infiniband/rdma_cm")),
                major: 10,
                minor: 58,
            }),
            netdevs: vec!["eth0".into(), "eth1".into(), "lo".into()],
            rdma_netns: crate::netns::RdmaNetns::Shared,
        }
    }

    #[test]
    fn real_dev_root_needs_only_0_3_0() {
        let spec = spec_for(&host("/dev", 8500), &Config::default()).unwrap();
        assert_eq!(spec["cdiVersion"], "0.3.0");
        assert_eq!(spec["kind"], KIND);
        let names: Vec<&str> = spec["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["erdma_0", "erdma_1", "all"]);
        assert_eq!(
            spec["devices"][2]["containerEdits"]["deviceNodes"].as_array().unwrap().len(),
            2
        );
        assert_eq!(
            spec["containerEdits"]["deviceNodes"][0],
            json!({"path": "/dev/infiniband/rdma_cm", "type": "c", "major": 10, "minor": 58, "permissions": "rw"})
        );
        let env: Vec<&str> = spec["containerEdits"]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap())
            .collect();
        // Derived from the host (nccl.rs): exact device:port names; no interface, as one spec
        // serves containers on any network (the default `network = "any"`).
        assert!(env.contains(&"NCCL_IB_HCA==erdma_0:1,erdma_1:1"), "{env:?}");
        assert!(!env.iter().any(|e| e.starts_with("NCCL_SOCKET_IFNAME=")), "{env:?}");
        // Under `require` every asking container is on the host's network: its netdevs.
        let require =
            Config { network: crate::config::NetworkPolicy::Require, ..Config::default() };
        let spec = spec_for(&host("/dev", 8500), &require).unwrap();
        assert!(
            spec["containerEdits"]["env"]
                .as_array()
                .unwrap()
                .contains(&json!("NCCL_SOCKET_IFNAME==eth0,eth1")),
            "{spec}"
        );
        assert!(env.contains(&"NCCL_IB_GID_INDEX=1"), "{env:?}");
        assert!(
            !env.iter().any(|e| e.starts_with("NCCL_PROTO=")),
            "jumbo MTU keeps LL128: {env:?}"
        );
        assert!(
            spec.pointer("/containerEdits/hooks").is_none() && !spec.to_string().contains("hooks")
        );
    }

    #[test]
    fn elsewhere_dev_root_needs_host_path_and_0_5_0() {
        let spec = spec_for(&host("/tmp/fixture/dev", 1400), &Config::default()).unwrap();
        assert_eq!(spec["cdiVersion"], "0.5.0");
        assert_eq!(
            spec["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"],
            "/tmp/fixture/dev/infiniband/uverbs0"
        );
        assert!(spec["containerEdits"]["env"]
            .as_array()
            .unwrap()
            .contains(&json!("NCCL_PROTO=^LL128")));
    }

    #[test]
    fn no_presets_keeps_hca_only() {
        let c = Config { env_presets: false, ..Config::default() };
        let spec = spec_for(&host("/dev", 1400), &c).unwrap();
        assert_eq!(spec["containerEdits"]["env"], json!(["NCCL_IB_HCA==erdma_0:1,erdma_1:1"]));
    }

    #[test]
    fn no_usable_device_or_rdma_cm_is_an_error() {
        let mut h = host("/dev", 8500);
        h.devices.iter_mut().for_each(|d| d.uverbs = None);
        assert!(matches!(spec_for(&h, &Config::default()), Err(Error::NoDevices { .. })));
        let mut h = host("/dev", 8500);
        h.devices[0].uverbs = None;
        let spec = spec_for(&h, &Config::default()).unwrap();
        assert_eq!(spec["devices"].as_array().unwrap().len(), 2, "erdma_1 and all");
        h.rdma_cm = None;
        assert!(spec_for(&h, &Config::default()).unwrap_err().to_string().contains("rdma_cm"));
        let mut h = host("/dev", 8500);
        h.devices[0].name = "all".into();
        assert!(spec_for(&h, &Config::default()).is_err());
    }

    #[test]
    fn version_rules() {
        let base = json!({"cdiVersion": "", "kind": "aliyun.com/erdma", "devices": [{"name": "a", "containerEdits": {}}]});
        assert_eq!(minimum_version(&base), "0.3.0");
        let mut s = base.clone();
        s["devices"][0]["containerEdits"]["mounts"] =
            json!([{"hostPath": "/a", "containerPath": "/a", "type": "bind"}]);
        assert_eq!(minimum_version(&s), "0.4.0");
        let mut s = base.clone();
        s["devices"][0]["name"] = json!("0dev");
        assert_eq!(minimum_version(&s), "0.5.0");
        let mut s = base.clone();
        s["annotations"] = json!({"a": "b"});
        assert_eq!(minimum_version(&s), "0.6.0");
        let mut s = base.clone();
        s["kind"] = json!("aliyun.com/e.rdma");
        assert_eq!(minimum_version(&s), "0.6.0");
        let mut s = base;
        s["containerEdits"] =
            json!({"netDevices": [{"hostInterfaceName": "eth1", "name": "eth1"}]});
        assert_eq!(minimum_version(&s), "1.1.0");
    }

    #[test]
    fn device_names() {
        assert!(
            valid_device_name("erdma_0")
                && valid_device_name("rocep9s0")
                && valid_device_name("0a")
        );
        assert!(
            !valid_device_name("_x")
                && !valid_device_name("x-")
                && !valid_device_name("a/b")
                && !valid_device_name("")
        );
    }
}
