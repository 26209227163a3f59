//! Host discovery: RDMA devices from sysfs (`/sys/class/infiniband`, `infiniband_verbs`,
//! `misc/rdma_cm`) and their nodes in /dev. Roots are configurable so tests use fixture trees.
//! eRDMA runs in iWARP mode and has no `umad`/`issm` nodes: they are never required.
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CharDev {
    /// Where the node is inside a container (`/dev/infiniband/uverbs0`).
    pub path: String,
    /// Where it is on this host (under the configured /dev root).
    pub host_path: PathBuf,
    pub major: u32,
    pub minor: u32,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Port {
    pub num: u32,
    /// `4` is PORT_ACTIVE.
    pub state: u32,
    pub state_name: String,
    pub link_layer: Option<String>,
    pub netdev: Option<String>,
    pub mtu: Option<u32>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RdmaDevice {
    pub name: String,
    pub driver: Option<String>,
    pub ports: Vec<Port>,
    /// The verbs node; `None` with `problem` set when sysfs has it but /dev does not.
    pub uverbs: Option<CharDev>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl RdmaDevice {
    pub fn all_ports_active(&self) -> bool {
        !self.ports.is_empty() && self.ports.iter().all(|p| p.state == 4)
    }
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Host {
    /// Devices of the configured drivers, sorted by name.
    pub devices: Vec<RdmaDevice>,
    /// RDMA devices of other drivers (e.g. mlx5 beside eRDMA), for reports.
    pub others: Vec<RdmaDevice>,
    pub rdma_cm: Option<CharDev>,
}

fn read_trim(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// `"231:192"` from a sysfs `dev` file.
fn parse_dev(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.trim().split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Linux's `dev_t` encoding (glibc's `gnu_dev_major`/`gnu_dev_minor`).
pub fn split_rdev(rdev: u64) -> (u32, u32) {
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    (major as u32, minor as u32)
}

/// Checks that the host node is a character device with the numbers sysfs gave.
fn check_node(host_path: &Path, want: (u32, u32)) -> std::result::Result<(), String> {
    let meta = std::fs::symlink_metadata(host_path).map_err(|e| format!("{}: {e}", host_path.display()))?;
    if !meta.file_type().is_char_device() {
        return Err(format!("{} is not a character device", host_path.display()));
    }
    let got = split_rdev(meta.rdev());
    if got != want {
        return Err(format!("{} is {}:{}, sysfs says {}:{}", host_path.display(), got.0, got.1, want.0, want.1));
    }
    Ok(())
}

fn name_of_link(path: &Path) -> Option<String> {
    std::fs::read_link(path).ok()?.file_name().map(|n| n.to_string_lossy().into_owned())
}

fn ports(sysfs: &Path, dev_dir: &Path) -> Vec<Port> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dev_dir.join("ports")) else { return out };
    for e in entries.flatten() {
        let Ok(num) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let p = e.path();
        // "4: ACTIVE"
        let state_raw = read_trim(&p.join("state")).unwrap_or_default();
        let (state, state_name) = match state_raw.split_once(':') {
            Some((n, name)) => (n.trim().parse().unwrap_or(0), name.trim().to_string()),
            None => (0, state_raw.clone()),
        };
        let netdev = read_trim(&p.join("gid_attrs/ndevs/0")).filter(|s| !s.is_empty()).or_else(|| {
            // Older kernels: the netdev sits under the device's PCI function.
            std::fs::read_dir(dev_dir.join("device/net")).ok()?.flatten().next().map(|n| n.file_name().to_string_lossy().into_owned())
        });
        let mtu = netdev.as_ref().and_then(|n| read_trim(&sysfs.join("class/net").join(n).join("mtu"))?.parse().ok());
        out.push(Port { num, state, state_name, link_layer: read_trim(&p.join("link_layer")), netdev, mtu });
    }
    out.sort_by_key(|p| p.num);
    out
}

/// Finds the RDMA devices under `sysfs` and their nodes under `dev`.
pub fn discover(sysfs: &Path, dev: &Path, drivers: &[String]) -> Result<Host> {
    let class = sysfs.join("class/infiniband");
    let mut devices = Vec::new();
    let mut others = Vec::new();
    let entries = match std::fs::read_dir(&class) {
        Ok(e) => e.flatten().collect::<Vec<_>>(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(Error::io("reading", &class)(e)),
    };
    // uverbsN -> ibdev, from infiniband_verbs.
    let mut verbs = Vec::new();
    if let Ok(v) = std::fs::read_dir(sysfs.join("class/infiniband_verbs")) {
        for e in v.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("uverbs") {
                continue;
            }
            if let (Some(ibdev), Some(devnum)) = (read_trim(&e.path().join("ibdev")), read_trim(&e.path().join("dev")).as_deref().and_then(parse_dev)) {
                verbs.push((name, ibdev, devnum));
            }
        }
    }
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let dir = class.join(&name);
        let driver = name_of_link(&dir.join("device/driver"));
        let mut problem = None;
        let uverbs = match verbs.iter().find(|(_, ibdev, _)| *ibdev == name) {
            Some((uname, _, devnum)) => {
                let host_path = dev.join("infiniband").join(uname);
                match check_node(&host_path, *devnum) {
                    Ok(()) => Some(CharDev { path: format!("/dev/infiniband/{uname}"), host_path, major: devnum.0, minor: devnum.1 }),
                    Err(why) => {
                        problem = Some(why);
                        None
                    }
                }
            }
            None => {
                problem = Some("no uverbs device in sysfs".into());
                None
            }
        };
        let d = RdmaDevice { ports: ports(sysfs, &dir), name, driver: driver.clone(), uverbs, problem };
        if driver.as_ref().is_some_and(|drv| drivers.iter().any(|w| w == drv)) {
            devices.push(d);
        } else {
            others.push(d);
        }
    }
    devices.sort_by(|a, b| a.name.cmp(&b.name));
    others.sort_by(|a, b| a.name.cmp(&b.name));
    let rdma_cm = read_trim(&sysfs.join("class/misc/rdma_cm/dev")).as_deref().and_then(parse_dev).and_then(|devnum| {
        let host_path = dev.join("infiniband/rdma_cm");
        check_node(&host_path, devnum).ok().map(|()| CharDev { path: "/dev/infiniband/rdma_cm".into(), host_path, major: devnum.0, minor: devnum.1 })
    });
    Ok(Host { devices, others, rdma_cm })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_t_encoding() {
        // makedev(231, 192) and a large minor.
        assert_eq!(split_rdev((231 << 8) | 192), (231, 192));
        let rdev = ((300u64 & 0xfff) << 8) | ((300u64 & !0xfff) << 32) | (70000 & 0xff) | ((70000 & !0xff) << 12);
        assert_eq!(split_rdev(rdev), (300, 70000));
        assert_eq!(parse_dev("231:192\n"), Some((231, 192)));
    }
}
