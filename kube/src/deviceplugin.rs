//! What the kubelet device plugin decides, apart from its gRPC transport
//! ([`crate::kubelet`]): the devices it advertises as `aliyun/erdma` (each eRDMA device shared by up to
//! N containers, as RDMA is shared on a host-network node), their health from the ports' state,
//! what `Allocate` gives a container (the uverbs and `rdma_cm` device specs, the NCCL settings
//! derived for the allocated devices, CDI device names when the runtime takes CDI), and
//! `GetPreferredAllocation`'s choice (distinct devices first, on the NUMA node of the devices
//! already required). Names follow the device-plugin API v1beta1 (`pkg/kubelet/apis/deviceplugin/
//! v1beta1/api.proto`): `Device{ID, health, topology}`, `ContainerAllocateResponse{envs, mounts,
//! devices, annotations, cdi_devices}`.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;

use crate::grant::GrantError;
use erdma_oci_hook::discover::Host;
use erdma_oci_hook::netns::Net;

/// The resource ACK's jobs request (the ACK GDR guide: `--device=aliyun/erdma=1`).
pub const RESOURCE: &str = "aliyun/erdma";
/// `Healthy` and `Unhealthy`, as v1beta1 spells them.
pub const HEALTHY: &str = "Healthy";
pub const UNHEALTHY: &str = "Unhealthy";

/// The plugin's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginConfig {
    pub resource: String,
    /// How many containers may share one eRDMA device (each gets an ID of its own).
    pub shares: u32,
    /// Give CDI device names (`aliyun.com/erdma=erdma_0`) rather than device specs: for a
    /// runtime with CDI (containerd 1.7+, CRI-O 1.23+) and a spec from `cdi generate`.
    pub cdi: bool,
}

impl Default for PluginConfig {
    fn default() -> PluginConfig {
        PluginConfig { resource: RESOURCE.to_string(), shares: 8, cdi: false }
    }
}

/// One advertised device (`v1beta1.Device`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Advertised {
    /// `erdma_0-3`: the device and which of its shares.
    pub id: String,
    pub device: String,
    pub health: &'static str,
    /// The device's NUMA node (`device/numa_node` in sysfs; `None` for -1 or absent).
    pub numa: Option<u32>,
}

/// The device of an advertised ID (`erdma_0-3` → `erdma_0`).
pub fn device_of(id: &str) -> &str {
    id.rsplit_once('-').map_or(id, |(d, _)| d)
}

/// A device's NUMA node from sysfs (`class/infiniband/DEV/device/numa_node`).
pub fn numa_node(sysfs: &Path, device: &str) -> Option<u32> {
    let text = std::fs::read_to_string(
        sysfs.join("class/infiniband").join(device).join("device/numa_node"),
    )
    .ok()?;
    text.trim().parse::<i64>().ok().filter(|n| *n >= 0).and_then(|n| u32::try_from(n).ok())
}

/// The devices to advertise for `host`: `shares` IDs per eRDMA device, in device order.
pub fn advertise(host: &Host, sysfs: &Path, cfg: &PluginConfig) -> Vec<Advertised> {
    host.devices
        .iter()
        .flat_map(|d| {
            let numa = numa_node(sysfs, &d.name);
            let health = if crate::grant::healthy(d) { HEALTHY } else { UNHEALTHY };
            (0..cfg.shares.max(1)).map(move |i| Advertised {
                id: format!("{}-{i}", d.name),
                device: d.name.clone(),
                health,
                numa,
            })
        })
        .collect()
}

/// Another eRDMA device plugin that registers `aliyun/erdma` on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherPlugin {
    /// Its socket in kubelet's device-plugin directory.
    pub socket: std::path::PathBuf,
    /// Whose it is, for the message.
    pub whose: &'static str,
    /// What to do instead of running both.
    pub choice: &'static str,
}

/// The socket of another eRDMA device plugin in kubelet's device-plugin directory, if one is
/// there. Two plugins registering one resource replace each other in kubelet, so pods would get
/// either's answer; `erdma-device-plugin` refuses to advertise the same resource beside one:
/// - ACK's: the agent of `alibabacloud-erdma-controller` serves on `<unix time>-erdma.sock` and
///   registers `aliyun/erdma` (its `internal/deviceplugin/deviceplugin.go`, `dpSocketPath`);
/// - Terway's: its ENI device plugin of type `erdma` serves on `<unix time>-erdma-eni.sock` and
///   registers `aliyun/erdma` (Terway's `deviceplugin/eni.go`, `ENITypeERDMA`, `ERDMAResName`).
pub fn other_plugin_socket(dir: &Path) -> Option<OtherPlugin> {
    let stamped = |n: &str, suffix: &str| {
        n.strip_suffix(suffix)
            .is_some_and(|stamp| !stamp.is_empty() && stamp.bytes().all(|b| b.is_ascii_digit()))
    };
    let mut found: Vec<std::path::PathBuf> =
        std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).collect();
    found.sort();
    found.into_iter().find_map(|p| {
        let n = p.file_name()?.to_str()?.to_string();
        if stamped(&n, "-erdma.sock") {
            Some(OtherPlugin {
                socket: p,
                whose: "ACK's eRDMA device plugin (alibabacloud-erdma-controller's agent)",
                choice: "remove ACK's eRDMA agent from this node",
            })
        } else if stamped(&n, "-erdma-eni.sock") {
            Some(OtherPlugin {
                socket: p,
                whose: "Terway's eRDMA device plugin",
                choice: "turn eRDMA off in Terway's configuration for this node",
            })
        } else {
            None
        }
    })
}

/// A device node for the container (`v1beta1.DeviceSpec`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct DeviceSpec {
    pub container_path: String,
    pub host_path: String,
    pub permissions: String,
}

/// `v1beta1.ContainerAllocateResponse`, as far as the plugin fills it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub struct Allocation {
    pub envs: BTreeMap<String, String>,
    pub devices: Vec<DeviceSpec>,
    /// CDI device names (`aliyun.com/erdma=erdma_0`), with [`PluginConfig::cdi`].
    pub cdi_devices: Vec<String>,
}

/// What a container given the advertised `ids` gets: each distinct device's uverbs node once,
/// `rdma_cm`, and the env the hooks would set for those devices (`ERDMA_VISIBLE_DEVICES`, the
/// presets and the NCCL settings derived for them); with CDI, the device names instead of specs.
///
/// `Allocate` does not say which pod asks, nor whether it is on the host's network, so `net`
/// is [`Net::any_container`]: `NCCL_SOCKET_IFNAME` is given only where every asking pod must
/// be on the host's network (`network = "require"`); else the NRI plugin sets it from the
/// pod's own namespace, or NCCL chooses.
pub fn allocate(
    host: &Host,
    cfg: &PluginConfig,
    ids: &[String],
    net: &Net,
    ctx: &erdma_oci_hook::nccl::Context,
) -> Result<Allocation, GrantError> {
    let names: BTreeSet<&str> = ids.iter().map(|id| device_of(id)).collect();
    let chosen = crate::grant::usable(host, names)?;
    let cm = host.rdma_cm.as_ref().ok_or(GrantError::NoRdmaCm)?;
    let mut a = Allocation::default();
    if cfg.cdi {
        a.cdi_devices =
            chosen.iter().map(|d| format!("{}={}", erdma_oci_hook::cdi::KIND, d.name)).collect();
    } else {
        for node in chosen.iter().filter_map(|d| d.uverbs.as_ref()).chain(std::iter::once(cm)) {
            a.devices.push(DeviceSpec {
                container_path: node.path.clone(),
                host_path: node.host_path.display().to_string(),
                permissions: "rw".into(),
            });
        }
    }
    a.envs = crate::grant::envs(host, &chosen, net, ctx);
    Ok(a)
}

/// `GetPreferredAllocation`: `size` IDs from `available`, `must` included. Distinct devices before
/// a second share of one (spreads a pod's traffic over the NICs), devices on the NUMA node of
/// those already required (or of the first one taken) before others, then by name: the same
/// answer for the same question.
pub fn preferred(
    advertised: &[Advertised],
    available: &[String],
    must: &[String],
    size: usize,
) -> Vec<String> {
    let numa_of = |id: &str| advertised.iter().find(|a| a.id == id).and_then(|a| a.numa);
    let mut out: Vec<String> = must.to_vec();
    let mut left: Vec<&String> = available
        .iter()
        .filter(|a| {
            !out.contains(a) && advertised.iter().any(|d| &d.id == *a && d.health == HEALTHY)
        })
        .collect();
    left.sort();
    while out.len() < size && !left.is_empty() {
        let used: BTreeSet<&str> = out.iter().map(|id| device_of(id)).collect();
        let numa: Option<u32> = out.first().and_then(|id| numa_of(id));
        let best = left
            .iter()
            .enumerate()
            .min_by_key(|(_, id)| {
                let fresh = !used.contains(device_of(id));
                let near = numa.is_none() || numa_of(id) == numa;
                (!fresh, !near, device_of(id).to_string(), id.to_string())
            })
            .map(|(i, _)| i)
            .expect("not empty");
        out.push(left.remove(best).clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use erdma_oci_hook::discover::{CharDev, Port, RdmaDevice};

    #[test]
    fn acks_and_terways_plugin_sockets_are_recognised_and_ours_is_not() {
        let dir = tempfile::tempdir().unwrap();
        for n in [
            "kubelet.sock",
            "erdma.sock",
            "nvidia-gpu.sock",
            "x-erdma.sock",
            "-erdma.sock",
            "1732000000-erdma.sock.bak",
            "1732000000-eni.sock",
            "1732000000-member-eni.sock",
            "x-erdma-eni.sock",
        ] {
            std::fs::write(dir.path().join(n), "").unwrap();
        }
        let socket = |d: &Path| other_plugin_socket(d).map(|o| o.socket);
        assert_eq!(socket(dir.path()), None);
        std::fs::write(dir.path().join("1732000000-erdma-eni.sock"), "").unwrap();
        let terway = other_plugin_socket(dir.path()).unwrap();
        assert_eq!(terway.socket, dir.path().join("1732000000-erdma-eni.sock"));
        assert!(terway.whose.starts_with("Terway's"));
        std::fs::write(dir.path().join("1732000000-erdma.sock"), "").unwrap();
        // Both there: the first by name (the message names one of them).
        assert_eq!(socket(dir.path()), Some(dir.path().join("1732000000-erdma-eni.sock")));
        std::fs::remove_file(dir.path().join("1732000000-erdma-eni.sock")).unwrap();
        let ack = other_plugin_socket(dir.path()).unwrap();
        assert_eq!(ack.socket, dir.path().join("1732000000-erdma.sock"));
        assert!(ack.whose.starts_with("ACK's"));
        assert_eq!(socket(&dir.path().join("missing")), None);
    }

    fn dev(name: &str, minor: u32, active: bool) -> RdmaDevice {
        RdmaDevice {
            name: name.into(),
            driver: Some("erdma".into()),
            ports: vec![Port {
                num: 1,
                state: if active { 4 } else { 1 },
                state_name: if active { "ACTIVE".into() } else { "DOWN".into() },
                link_layer: Some("Ethernet".into()),
                netdev: Some(format!("eth{}", minor - 192)),
                mtu: Some(8500),
                roce_v2_ipv4_gid: Some(1),
                roce_v2_ipv4: None,
            }],
            uverbs: Some(CharDev {
                path: format!("/dev/infiniband/uverbs{}", minor - 192),
                host_path: format!("/dev/infiniband/uverbs{}", minor - 192).into(),
                major: 231,
                minor,
            }),
            problem: None,
        }
    }

    fn host(devs: Vec<RdmaDevice>) -> Host {
        Host {
            devices: devs,
            others: Vec::new(),
            rdma_cm: Some(CharDev {
                path: "/dev/infiniband/rdma_cm".into(),
                host_path: "/dev/infiniband/rdma_cm".into(),
                major: 10,
                minor: 58,
            }),
            netdevs: vec!["eth0".into(), "eth1".into()],
            rdma_netns: erdma_oci_hook::netns::RdmaNetns::Shared,
        }
    }

    #[test]
    fn shares_health_and_allocation() {
        let h = host(vec![dev("erdma_0", 192, true), dev("erdma_1", 193, false)]);
        let cfg = PluginConfig { shares: 2, ..PluginConfig::default() };
        let ads = advertise(&h, Path::new("/nonexistent"), &cfg);
        let ids: Vec<(&str, &str)> = ads.iter().map(|a| (a.id.as_str(), a.health)).collect();
        assert_eq!(
            ids,
            [
                ("erdma_0-0", HEALTHY),
                ("erdma_0-1", HEALTHY),
                ("erdma_1-0", UNHEALTHY),
                ("erdma_1-1", UNHEALTHY)
            ]
        );
        let a = allocate(&h, &cfg, &["erdma_0-1".into()], &Net::Host, &Default::default()).unwrap();
        let paths: Vec<&str> = a.devices.iter().map(|d| d.container_path.as_str()).collect();
        assert_eq!(paths, ["/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"]);
        assert_eq!(a.envs["ERDMA_VISIBLE_DEVICES"], "erdma_0");
        assert_eq!(
            a.envs.get("NCCL_IB_HCA").map(String::as_str),
            Some("=erdma_0:1"),
            "{:?}",
            a.envs
        );
        // A pod's network is not known at Allocate: the host's interface only under `require`.
        let any = Net::any_container(erdma_oci_hook::config::NetworkPolicy::Any);
        let a = allocate(&h, &cfg, &["erdma_0-1".into()], &any, &Default::default()).unwrap();
        assert_eq!(a.envs.get("NCCL_SOCKET_IFNAME"), None, "{:?}", a.envs);
        assert_eq!(a.envs.get("NCCL_IB_HCA").map(String::as_str), Some("=erdma_0:1"));
        let require = Net::any_container(erdma_oci_hook::config::NetworkPolicy::Require);
        let a = allocate(&h, &cfg, &["erdma_0-1".into()], &require, &Default::default()).unwrap();
        assert_eq!(a.envs.get("NCCL_SOCKET_IFNAME").map(String::as_str), Some("=eth0"));
        assert!(matches!(
            allocate(&h, &cfg, &["erdma_1-0".into()], &Net::Host, &Default::default()),
            Err(GrantError::Unhealthy { .. })
        ));
        assert_eq!(
            allocate(&h, &cfg, &["erdma_9-0".into()], &Net::Host, &Default::default()),
            Err(GrantError::Unknown("erdma_9".into()))
        );
        let cdi = allocate(
            &h,
            &PluginConfig { cdi: true, ..cfg },
            &["erdma_0-0".into(), "erdma_0-1".into()],
            &Net::Host,
            &Default::default(),
        )
        .unwrap();
        assert_eq!(
            cdi.cdi_devices,
            ["aliyun.com/erdma=erdma_0"],
            "one device, however many shares"
        );
        assert!(cdi.devices.is_empty());
    }

    #[test]
    fn preferred_spreads_over_devices_on_one_numa_node() {
        let dir = tempfile::tempdir().unwrap();
        for (d, n) in [("erdma_0", "0"), ("erdma_1", "1"), ("erdma_2", "0")] {
            let p = dir.path().join("class/infiniband").join(d).join("device");
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("numa_node"), format!("{n}\n")).unwrap();
        }
        let h = host(vec![
            dev("erdma_0", 192, true),
            dev("erdma_1", 193, true),
            dev("erdma_2", 194, true),
        ]);
        let ads = advertise(&h, dir.path(), &PluginConfig { shares: 2, ..PluginConfig::default() });
        assert_eq!(ads[2].numa, Some(1));
        let all: Vec<String> = ads.iter().map(|a| a.id.clone()).collect();
        // Two devices: distinct ones, on erdma_0's NUMA node 0.
        assert_eq!(preferred(&ads, &all, &[], 2), ["erdma_0-0", "erdma_2-0"]);
        // Required erdma_1 (node 1): then node 1 first, then distinct devices elsewhere.
        assert_eq!(
            preferred(&ads, &all, &["erdma_1-1".into()], 3),
            ["erdma_1-1", "erdma_0-0", "erdma_2-0"]
        );
        assert_eq!(
            preferred(&ads, &all, &[], 4),
            ["erdma_0-0", "erdma_2-0", "erdma_1-0", "erdma_0-1"]
        );
        assert_eq!(preferred(&ads, &all, &[], 2), preferred(&ads, &all, &[], 2), "deterministic");
    }

    /// The `four` fixture host: two devices on each of two NUMA nodes, as the PCI functions'
    /// `numa_node` say (testdata/sysfs/README.md), and the others' `-1` (no affinity).
    #[test]
    fn numa_from_the_fixture_trees() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/sysfs");
        let sysfs = root.join("four/sys");
        let h = erdma_oci_hook::discover::discover(
            &sysfs,
            &root.join("four/no-dev"),
            &["erdma".into()],
        )
        .unwrap();
        let mut ads = advertise(&h, &sysfs, &PluginConfig { shares: 1, ..PluginConfig::default() });
        // No /dev nodes without root: health is deviceplugin_cases' business, NUMA is this one's.
        ads.iter_mut().for_each(|a| a.health = HEALTHY);
        let numa: Vec<(&str, Option<u32>)> =
            ads.iter().map(|a| (a.device.as_str(), a.numa)).collect();
        assert_eq!(
            numa,
            [
                ("rocep10s0", Some(0)),
                ("rocep11s0", Some(1)),
                ("rocep12s0", Some(1)),
                ("rocep9s0", Some(0))
            ]
        );
        let all: Vec<String> = ads.iter().map(|a| a.id.clone()).collect();
        // kubelet required rocep11s0 (its Topology Manager put the pod on node 1): the second
        // device comes from node 1 too.
        assert_eq!(
            preferred(&ads, &all, &["rocep11s0-0".into()], 2),
            ["rocep11s0-0", "rocep12s0-0"]
        );
        assert_eq!(preferred(&ads, &all, &["rocep9s0-0".into()], 2), ["rocep9s0-0", "rocep10s0-0"]);
        let two = root.join("two/sys");
        let h =
            erdma_oci_hook::discover::discover(&two, &root.join("two/no-dev"), &["erdma".into()])
                .unwrap();
        assert!(
            advertise(&h, &two, &PluginConfig::default()).iter().all(|a| a.numa.is_none()),
            "-1 is no NUMA node"
        );
    }
}
