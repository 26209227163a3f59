//! What the driver publishes: one DRA device per ERI (per share of an ERI with `--shares N`),
//! named as a DNS label, with the attributes a claim selects by, and the ResourceSlice that
//! carries them for this node. Pure: from a discovered [`Host`] and sysfs to values; the API
//! server is [`super::apiserver`]'s.
//!
//! Attribute names without a domain are in the driver's (`erdma.aliyun.com/portState`); the
//! two of the `resource.kubernetes.io` domain are the ones Kubernetes standardised for devices
//! on PCI (`k8s.io/dynamic-resource-allocation/deviceattribute`: `pciBusID`, `pcieRoot`), so a
//! claim can require a GPU of NVIDIA's driver and an ERI on one PCIe root with `matchAttribute:
//! resource.kubernetes.io/pcieRoot`.
use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::resource::v1 as resource;

use erdma_oci_hook::discover::{Host, RdmaDevice};

/// The standard attribute for a PCI function's address (`0000:00:05.0`).
pub const PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";
/// The standard attribute for the PCIe root complex a function hangs from (`pci0000:00`).
pub const PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";

/// One published device.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    /// Its name in the pool: a DNS label (`erdma-0`, `erdma-0-s1`).
    pub name: String,
    /// The ERI it stands for (`erdma_0`).
    pub eri: String,
    /// Every port active and the uverbs node present.
    pub healthy: bool,
    pub attributes: BTreeMap<String, resource::DeviceAttribute>,
}

/// Why the devices cannot be published.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PublishError {
    #[error("the RDMA devices {a} and {b} would both be published as {name}; rename one (udev) or run the device plugin instead")]
    NameClash { a: String, b: String, name: String },
    #[error("the RDMA device name {0} cannot be made a DNS label (lowercase letters, digits and '-', at most 63)")]
    BadName(String),
}

/// `erdma_0` → `erdma-0`: a DNS label (RFC 1123: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63),
/// as a device name in a ResourceSlice must be; `None` where no such label follows.
pub fn dns_label(eri: &str) -> Option<String> {
    let label: String = eri
        .chars()
        .map(|c| if c == '_' || c == '.' { '-' } else { c.to_ascii_lowercase() })
        .collect();
    let ok = !label.is_empty()
        && label.len() <= 63
        && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-');
    ok.then_some(label)
}

/// A DNS subdomain (RFC 1123, as Kubernetes names nodes, drivers and slices): dot-separated
/// labels of lowercase letters, digits and '-', at most 253 characters in all.
pub fn dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

fn string(v: impl Into<String>) -> resource::DeviceAttribute {
    resource::DeviceAttribute { string: Some(v.into()), ..Default::default() }
}

fn int(v: i64) -> resource::DeviceAttribute {
    resource::DeviceAttribute { int: Some(v), ..Default::default() }
}

/// The PCI function and root complex of an RDMA device, from where sysfs puts it
/// (`class/infiniband/erdma_0` → `../../devices/pci0000:00/0000:00:05.0/infiniband/erdma_0`).
pub fn pci_place(sysfs: &Path, eri: &str) -> Option<(String, String)> {
    let target = std::fs::read_link(sysfs.join("class/infiniband").join(eri)).ok()?;
    let target = target.to_string_lossy();
    let after = target.split("devices/").nth(1)?;
    let mut parts = after.split('/');
    let root = parts.next().filter(|r| r.starts_with("pci"))?.to_string();
    let function =
        parts.take_while(|p| erdma_oci_hook::topology::is_bus_id(p)).last().map(str::to_string)?;
    Some((function, root))
}

/// Gb/s from a port's `rate` (`100 Gb/sec (4X EDR)`, ib_core's `rate_show`).
fn rate_gbps(sysfs: &Path, eri: &str, port: u32) -> Option<i64> {
    let path =
        sysfs.join("class/infiniband").join(eri).join("ports").join(port.to_string()).join("rate");
    let text = std::fs::read_to_string(path).ok()?;
    let number = text.split_whitespace().next()?;
    number.parse::<f64>().ok().filter(|g| g.is_finite() && *g >= 0.0).map(|g| g.round() as i64)
}

/// The attributes of `d` (its first port's, where a port is meant: an ERI has one).
fn attributes(sysfs: &Path, d: &RdmaDevice) -> BTreeMap<String, resource::DeviceAttribute> {
    let mut a = BTreeMap::new();
    a.insert("rdmaDevice".to_string(), string(&d.name));
    if let Some((function, root)) = pci_place(sysfs, &d.name) {
        a.insert(PCI_BUS_ID.to_string(), string(function));
        a.insert(PCIE_ROOT.to_string(), string(root));
    }
    if let Some(n) = crate::deviceplugin::numa_node(sysfs, &d.name) {
        a.insert("numaNode".to_string(), int(i64::from(n)));
    }
    if let Some(p) = d.ports.first() {
        a.insert("portState".to_string(), string(&p.state_name));
        if let Some(n) = &p.netdev {
            a.insert("netdev".to_string(), string(n));
        }
        if let Some(mtu) = p.mtu {
            a.insert("mtu".to_string(), int(i64::from(mtu)));
        }
        if let Some(g) = p.roce_v2_ipv4_gid {
            a.insert("gidIndex".to_string(), int(i64::from(g)));
        }
        if let Some(g) = rate_gbps(sysfs, &d.name, p.num) {
            a.insert("linkSpeedGbps".to_string(), int(g));
        }
    }
    a
}

/// The devices to publish for `host`: per ERI one device, or `shares` (`erdma-0-s0`…) where
/// more than one claim may hold it at once; in ERI order.
pub fn published(host: &Host, sysfs: &Path, shares: u32) -> Result<Vec<Published>, PublishError> {
    let mut out: Vec<Published> = Vec::new();
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    for d in &host.devices {
        let label = dns_label(&d.name).ok_or_else(|| PublishError::BadName(d.name.clone()))?;
        if let Some(a) = labels.insert(label.clone(), d.name.clone()) {
            return Err(PublishError::NameClash { a, b: d.name.clone(), name: label });
        }
        let attributes = attributes(sysfs, d);
        let healthy = crate::grant::healthy(d);
        let names: Vec<String> = if shares <= 1 {
            vec![label]
        } else {
            (0..shares).map(|i| format!("{label}-s{i}")).collect()
        };
        for name in names {
            if dns_label(&name).as_deref() != Some(name.as_str()) {
                return Err(PublishError::BadName(d.name.clone()));
            }
            out.push(Published {
                name,
                eri: d.name.clone(),
                healthy,
                attributes: attributes.clone(),
            });
        }
    }
    Ok(out)
}

/// Why this node's devices cannot be listed for publication.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error("listing this node's RDMA devices")]
    Discover(#[source] erdma_oci_hook::error::Error),
    #[error(transparent)]
    Publish(#[from] PublishError),
}

/// The host as `config` finds it, and what it publishes with `shares`.
pub fn list(
    config: &erdma_oci_hook::config::Config,
    shares: u32,
) -> Result<(Host, Vec<Published>), ListError> {
    let host =
        erdma_oci_hook::discover::discover(&config.sysfs_root, &config.dev_root, &config.drivers)
            .map_err(ListError::Discover)?;
    let published = published(&host, &config.sysfs_root, shares)?;
    Ok((host, published))
}

/// The ResourceSlice's spec for this node's pool (named after the node): every published device,
/// at pool generation `generation`.
pub fn slice_spec(
    driver: &str,
    node: &str,
    devices: &[Published],
    generation: i64,
) -> resource::ResourceSliceSpec {
    resource::ResourceSliceSpec {
        driver: driver.to_string(),
        node_name: Some(node.to_string()),
        pool: resource::ResourcePool {
            name: node.to_string(),
            generation,
            resource_slice_count: 1,
        },
        devices: Some(
            devices
                .iter()
                .map(|p| resource::Device {
                    name: p.name.clone(),
                    attributes: Some(p.attributes.clone()),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    }
}

/// The name of this node's slice: `<node>-<driver>`, a DNS subdomain as both are.
pub fn slice_name(node: &str, driver: &str) -> String {
    format!("{node}-{driver}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(names: &[&str]) -> Host {
        let devices = names
            .iter()
            .map(|n| RdmaDevice {
                name: n.to_string(),
                driver: Some("erdma".into()),
                ports: Vec::new(),
                uverbs: None,
                problem: None,
            })
            .collect();
        Host {
            devices,
            others: Vec::new(),
            rdma_cm: None,
            netdevs: Vec::new(),
            rdma_netns: erdma_oci_hook::netns::RdmaNetns::Shared,
        }
    }

    #[test]
    fn shares_publish_a_device_per_share_and_clashing_names_are_refused() {
        let none = Path::new("/nonexistent");
        let names = |p: Vec<Published>| p.into_iter().map(|p| (p.name, p.eri)).collect::<Vec<_>>();
        assert_eq!(
            names(published(&host(&["erdma_0", "erdma_1"]), none, 1).unwrap()),
            [("erdma-0".into(), "erdma_0".into()), ("erdma-1".into(), "erdma_1".into())]
        );
        assert_eq!(
            names(published(&host(&["erdma_0"]), none, 2).unwrap()),
            [("erdma-0-s0".into(), "erdma_0".into()), ("erdma-0-s1".into(), "erdma_0".into())]
        );
        assert_eq!(
            published(&host(&["erdma_0", "erdma-0"]), none, 1),
            Err(PublishError::NameClash {
                a: "erdma_0".into(),
                b: "erdma-0".into(),
                name: "erdma-0".into()
            })
        );
        assert_eq!(
            published(&host(&["erdma_0_"]), none, 1),
            Err(PublishError::BadName("erdma_0_".into()))
        );
        // No port: not healthy, and no port attributes.
        let p = published(&host(&["erdma_0"]), none, 1).unwrap();
        assert!(!p[0].healthy);
        assert_eq!(p[0].attributes.keys().collect::<Vec<_>>(), ["rdmaDevice"]);
    }

    #[test]
    fn node_and_slice_names_are_dns_subdomains() {
        assert!(dns_subdomain("node-a"));
        assert!(dns_subdomain("cn-hangzhou.192.168.0.1"));
        assert!(dns_subdomain(&slice_name("node-a", "erdma.aliyun.com")));
        for bad in ["", "Node", "a..b", "-a", "a-", "a_b", &"a".repeat(254)] {
            assert!(!dns_subdomain(bad), "{bad:?}");
        }
    }

    #[test]
    fn rdma_device_names_become_dns_labels_or_are_refused() {
        assert_eq!(dns_label("erdma_0").as_deref(), Some("erdma-0"));
        assert_eq!(dns_label("rocep26s0").as_deref(), Some("rocep26s0"));
        assert_eq!(dns_label("Erdma_1").as_deref(), Some("erdma-1"));
        assert_eq!(dns_label("_x"), None);
        assert_eq!(dns_label("x_"), None);
        assert_eq!(dns_label("a b"), None);
        assert_eq!(dns_label(""), None);
        assert_eq!(dns_label(&"a".repeat(64)), None);
    }
}
