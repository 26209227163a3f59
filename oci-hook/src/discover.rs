//! Host discovery: RDMA devices from sysfs (`/sys/class/infiniband`, `infiniband_verbs`,
//! `misc/rdma_cm`) and their nodes in /dev. Roots are configurable so tests use fixture trees.
//! eRDMA runs in iWARP mode and has no `umad`/`issm` nodes: they are never required.
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::sysfs::{read_trim, SysDir};

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
    /// The index of the port's RoCE v2 GID with an IPv4-mapped address (`::ffff:a.b.c.d`), the
    /// one NCCL uses for RoCE v2 over IPv4: `gid_attrs/types/N` is `RoCE v2` and `gids/N` is
    /// IPv4-mapped. `None` when the port has none (iWARP, IB, no address yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roce_v2_ipv4_gid: Option<u32>,
    /// The IPv4 address in that GID: the ERI's own address, what `NCCL_IB_ADDR_RANGE` matches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub roce_v2_ipv4: Option<std::net::Ipv4Addr>,
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
    /// The host's network interfaces (`/sys/class/net`), sorted: what `NCCL_SOCKET_IFNAME`
    /// may name for a container on the host's network.
    pub netdevs: Vec<String>,
    /// The kernel's RDMA namespace mode: whether containers on their own network can use the
    /// devices.
    pub rdma_netns: crate::netns::RdmaNetns,
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
    let meta = std::fs::symlink_metadata(host_path)
        .map_err(|e| format!("{}: {e}", host_path.display()))?;
    if !meta.file_type().is_char_device() {
        return Err(format!("{} is not a character device", host_path.display()));
    }
    let got = split_rdev(meta.rdev());
    if got != want {
        return Err(format!(
            "{} is {}:{}, sysfs says {}:{}",
            host_path.display(),
            got.0,
            got.1,
            want.0,
            want.1
        ));
    }
    Ok(())
}

/// The ports of the device whose directory is `dev_dir`; `net` is `class/net` under `sysfs`,
/// where a port's netdev has its MTU.
fn ports(sysfs: &Path, dev_dir: &SysDir, net: Option<&SysDir>) -> Vec<Port> {
    let mut out = Vec::new();
    let Ok(ports) = dev_dir.list("ports") else { return out };
    for name in ports.names() {
        let Ok(num) = name.to_string_lossy().parse::<u32>() else { continue };
        // A port that cannot be opened reads as one whose attributes are all missing.
        let p = ports.through(name.as_os_str()).ok();
        let attr = |rel: &str| p.as_ref().and_then(|p| p.read_trim(rel));
        // "4: ACTIVE"
        let state_raw = attr("state").unwrap_or_default();
        let (state, state_name) = match state_raw.split_once(':') {
            Some((n, name)) => (n.trim().parse().unwrap_or(0), name.trim().to_string()),
            None => (0, state_raw.clone()),
        };
        let netdev = attr("gid_attrs/ndevs/0").filter(|s| !s.is_empty()).or_else(|| {
            // Older kernels: the netdev sits under the device's PCI function.
            dev_dir.list("device/net").ok()?.text_names().into_iter().next()
        });
        let mtu = netdev.as_ref().and_then(|n| {
            match net {
                Some(net) => net.read_trim(format!("{n}/mtu").as_str()),
                // Not open (not there, or passable but not readable): the whole path, which
                // an absolute name in ndevs/0 also gives.
                None => read_trim(&sysfs.join("class/net").join(n).join("mtu")),
            }?
            .parse()
            .ok()
        });
        let gid = p.as_ref().and_then(roce_v2_ipv4_gid);
        out.push(Port {
            num,
            state,
            state_name,
            link_layer: attr("link_layer"),
            netdev,
            mtu,
            roce_v2_ipv4_gid: gid.map(|(n, _)| n),
            roce_v2_ipv4: gid.map(|(_, a)| a),
        });
    }
    out.sort_by_key(|p| p.num);
    out
}

/// Most GID table entries read: mlx5 ports have 255 and fill them from index 0 (the kernel's
/// `roce_gid_mgmt` takes the lowest free one), eRDMA's a handful.
const MAX_GIDS: u32 = 256;

/// The lowest index whose GID is an IPv4-mapped RoCE v2 one, with its address. The table is
/// read in order and stops at the first missing entry; an empty slot reads as the zero GID (and
/// its type file fails to read, EINVAL on real sysfs), and is skipped.
fn roce_v2_ipv4_gid(port: &SysDir) -> Option<(u32, std::net::Ipv4Addr)> {
    for n in 0..MAX_GIDS {
        let gid = port.read_trim(format!("gids/{n}"))?;
        let Some(addr) = ipv4_of(&gid) else { continue };
        if port.read_trim(format!("gid_attrs/types/{n}")).as_deref() == Some("RoCE v2") {
            return Some((n, addr));
        }
    }
    None
}

/// The IPv4 address of an IPv4-mapped GID: `0000:0000:0000:0000:0000:ffff:0a00:0001` is
/// `::ffff:10.0.0.1`.
fn ipv4_of(gid: &str) -> Option<std::net::Ipv4Addr> {
    let groups: Vec<&str> = gid.split(':').collect();
    let mapped = groups.len() == 8
        && groups[..5].iter().all(|g| g.trim_start_matches('0').is_empty())
        && groups[5].eq_ignore_ascii_case("ffff");
    if !mapped {
        return None;
    }
    let hi = u16::from_str_radix(groups[6], 16).ok()?;
    let lo = u16::from_str_radix(groups[7], 16).ok()?;
    Some(std::net::Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)))
}

/// Finds the RDMA devices under `sysfs` and their nodes under `dev`.
pub fn discover(sysfs: &Path, dev: &Path, drivers: &[String]) -> Result<Host> {
    let class_path = sysfs.join("class/infiniband");
    let (class, entries) = match SysDir::open(&class_path) {
        Ok(d) => {
            let names = d.text_names();
            (Some(d), names)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (None, Vec::new()),
        Err(e) => return Err(Error::io("reading", &class_path)(e)),
    };
    // uverbsN -> ibdev, from infiniband_verbs.
    let mut verbs = Vec::new();
    if let Ok(v) = SysDir::open(&sysfs.join("class/infiniband_verbs")) {
        for raw in v.names() {
            let name = raw.to_string_lossy().into_owned();
            if !name.starts_with("uverbs") {
                continue;
            }
            // Read by the name as it is; kept as text, as the node's name under /dev.
            let dir = Path::new(&raw);
            if let (Some(ibdev), Some(devnum)) = (
                v.read_trim(dir.join("ibdev").as_path()),
                v.read_trim(dir.join("dev").as_path()).as_deref().and_then(parse_dev),
            ) {
                verbs.push((name, ibdev, devnum));
            }
        }
    }
    let net = SysDir::open(&sysfs.join("class/net")).ok();
    let mut devices = Vec::new();
    let mut others = Vec::new();
    for name in entries {
        // A device whose directory cannot be opened has no driver and no ports.
        let dir = class.as_ref().and_then(|c| c.through(name.as_str()).ok());
        let driver = dir.as_ref().and_then(|d| d.link_name("device/driver"));
        let mut problem = None;
        let uverbs = match verbs.iter().find(|(_, ibdev, _)| *ibdev == name) {
            Some((uname, _, devnum)) => {
                let host_path = dev.join("infiniband").join(uname);
                match check_node(&host_path, *devnum) {
                    Ok(()) => Some(CharDev {
                        path: format!("/dev/infiniband/{uname}"),
                        host_path,
                        major: devnum.0,
                        minor: devnum.1,
                    }),
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
        let ports = dir.as_ref().map(|d| ports(sysfs, d, net.as_ref())).unwrap_or_default();
        let d = RdmaDevice { ports, name, driver: driver.clone(), uverbs, problem };
        if driver.as_ref().is_some_and(|drv| drivers.iter().any(|w| w == drv)) {
            devices.push(d);
        } else {
            others.push(d);
        }
    }
    devices.sort_by(|a, b| a.name.cmp(&b.name));
    others.sort_by(|a, b| a.name.cmp(&b.name));
    let rdma_cm = read_trim(&sysfs.join("class/misc/rdma_cm/dev"))
        .as_deref()
        .and_then(parse_dev)
        .and_then(|devnum| {
            let host_path = dev.join("infiniband/rdma_cm");
            check_node(&host_path, devnum).ok().map(|()| CharDev {
                path: "/dev/infiniband/rdma_cm".into(),
                host_path,
                major: devnum.0,
                minor: devnum.1,
            })
        });
    let mut netdevs = net.as_ref().map(SysDir::text_names).unwrap_or_default();
    netdevs.sort();
    let rdma_netns = crate::netns::rdma_netns_mode(sysfs);
    Ok(Host { devices, others, rdma_cm, netdevs, rdma_netns })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn dev_t_encoding() {
        // makedev(231, 192) and a large minor.
        assert_eq!(split_rdev((231 << 8) | 192), (231, 192));
        // glibc's makedev: major bits 0-11 at 8, the rest at 32; minor bits 0-7 at 0, the rest at 12.
        let (major, minor) = (300u64, 70000u64);
        let rdev =
            ((major & 0xfff) << 8) | ((major >> 12) << 44) | (minor & 0xff) | ((minor >> 8) << 20);
        assert_eq!(split_rdev(rdev), (300, 70000));
        assert_eq!(parse_dev("231:192\n"), Some((231, 192)));
        assert_eq!(parse_dev("231"), None);
    }

    pub(crate) const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/sysfs");

    use erdma_testkit::is_root;

    /// A /dev root with the nodes `testdata/sysfs/<scenario>/dev.txt` declares, made with
    /// `mknod` (root). Without root: a skip locally (`None`), a failure under `CI`.
    pub(crate) fn dev_root(scenario: &str) -> Option<tempfile::TempDir> {
        if !is_root() {
            assert!(
                std::env::var_os("CI").is_none(),
                "discover fixture tests need root (mknod) in CI"
            );
            eprintln!("skipped: discover fixture tests need root (mknod)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let list = std::fs::read_to_string(format!("{FIXTURES}/{scenario}/dev.txt")).unwrap();
        for l in list.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
            let f: Vec<&str> = l.split_whitespace().collect();
            let path = dir.path().join(f[0]);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let st = std::process::Command::new("mknod").arg(&path).args(&f[1..]).status().unwrap();
            assert!(st.success(), "mknod {l}");
        }
        Some(dir)
    }

    fn scan(scenario: &str, drivers: &[&str]) -> Option<(Host, tempfile::TempDir)> {
        let dev = dev_root(scenario)?;
        let drivers: Vec<String> = drivers.iter().map(|d| d.to_string()).collect();
        let host = discover(Path::new(&format!("{FIXTURES}/{scenario}/sys")), dev.path(), &drivers)
            .unwrap();
        Some((host, dev))
    }

    fn names(devs: &[RdmaDevice]) -> Vec<&str> {
        devs.iter().map(|d| d.name.as_str()).collect()
    }

    #[test]
    fn fixture_one() {
        let Some((h, dev)) = scan("one", &["erdma"]) else { return };
        assert_eq!(names(&h.devices), ["erdma_0"]);
        assert!(h.others.is_empty());
        let d = &h.devices[0];
        assert_eq!(d.driver.as_deref(), Some("erdma"));
        assert_eq!(
            d.ports,
            [Port {
                num: 1,
                state: 4,
                state_name: "ACTIVE".into(),
                link_layer: Some("Ethernet".into()),
                netdev: Some("eth0".into()),
                mtu: Some(8500),
                roce_v2_ipv4_gid: Some(1),
                roce_v2_ipv4: Some(std::net::Ipv4Addr::new(172, 16, 0, 5)),
            }]
        );
        assert!(d.all_ports_active());
        assert_eq!(
            d.uverbs,
            Some(CharDev {
                path: "/dev/infiniband/uverbs0".into(),
                host_path: dev.path().join("infiniband/uverbs0"),
                major: 231,
                minor: 192
            })
        );
        assert_eq!(d.problem, None);
        assert_eq!(
            h.rdma_cm,
            Some(CharDev {
                path: "/dev/infiniband/rdma_cm".into(),
                host_path: dev.path().join("infiniband/rdma_cm"),
                major: 10,
                minor: 58
            })
        );
    }

    #[test]
    fn fixture_two() {
        let Some((h, _dev)) = scan("two", &["erdma"]) else { return };
        assert_eq!(names(&h.devices), ["erdma_0", "erdma_1"]);
        let summary: Vec<_> = h
            .devices
            .iter()
            .map(|d| {
                (
                    d.uverbs.as_ref().unwrap().minor,
                    d.ports[0].netdev.clone().unwrap(),
                    d.ports[0].mtu,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [(192, "eth0".to_string(), Some(8500)), (193, "eth1".to_string(), Some(8500))]
        );
        assert!(h.rdma_cm.is_some());
    }

    #[test]
    fn fixture_four_rocep_names() {
        let Some((h, _dev)) = scan("four", &["erdma"]) else { return };
        // Names from udev's rdma naming scheme (rocep<bus>s<slot>), sorted as strings.
        assert_eq!(names(&h.devices), ["rocep10s0", "rocep11s0", "rocep12s0", "rocep9s0"]);
        let by_name = |n: &str| h.devices.iter().find(|d| d.name == n).unwrap();
        // The uverbs node is the one sysfs ties to the device, not the one of the same rank.
        assert_eq!(by_name("rocep9s0").uverbs.as_ref().unwrap().path, "/dev/infiniband/uverbs0");
        assert_eq!(by_name("rocep12s0").uverbs.as_ref().unwrap().minor, 195);
        assert!(h.devices.iter().all(|d| d.driver.as_deref() == Some("erdma")
            && d.ports[0].mtu == Some(1400)
            && d.all_ports_active()));
    }

    #[test]
    fn fixture_missing_uverbs_is_flagged() {
        let Some((h, dev)) = scan("missing-uverbs", &["erdma"]) else { return };
        assert_eq!(names(&h.devices), ["erdma_0", "erdma_1"]);
        assert!(h.devices[0].uverbs.is_some() && h.devices[0].problem.is_none());
        let d = &h.devices[1];
        assert_eq!(d.uverbs, None);
        let problem = d.problem.as_deref().unwrap();
        assert!(
            problem.starts_with(&format!("{}: ", dev.path().join("infiniband/uverbs1").display())),
            "{problem}"
        );
        // What `devices --json` shows.
        let j = serde_json::to_value(&h).unwrap();
        assert_eq!(j["devices"][1]["uverbs"], serde_json::Value::Null);
        assert!(j["devices"][0].get("problem").is_none());
    }

    #[test]
    fn fixture_port_down() {
        let Some((h, _dev)) = scan("port-down", &["erdma"]) else { return };
        let d = &h.devices[0];
        assert_eq!((d.ports[0].state, d.ports[0].state_name.as_str()), (1, "DOWN"));
        assert!(!d.all_ports_active());
        assert!(d.uverbs.is_some(), "a down port does not make the node unusable");
    }

    #[test]
    fn fixture_mlx5_beside() {
        let Some((h, _dev)) = scan("mlx5-beside", &["erdma"]) else { return };
        assert_eq!(names(&h.devices), ["erdma_0"]);
        assert_eq!(names(&h.others), ["mlx5_0"]);
        let m = &h.others[0];
        assert_eq!(m.driver.as_deref(), Some("mlx5_core"));
        assert_eq!((m.ports[0].netdev.as_deref(), m.ports[0].mtu), (Some("ens1f0np0"), Some(9000)));
        assert_eq!(m.uverbs.as_ref().unwrap().minor, 193);
        // A full mlx5 RoCE table (link-local v1/v2, IPv4-mapped v1/v2): the IPv4 v2 GID is at 3.
        assert_eq!(m.ports[0].roce_v2_ipv4_gid, Some(3));
        // The operator can count mlx5 in.
        let Some((h, _dev)) = scan("mlx5-beside", &["erdma", "mlx5_core"]) else { return };
        assert_eq!(names(&h.devices), ["erdma_0", "mlx5_0"]);
        assert!(h.others.is_empty());
    }

    #[test]
    fn fixture_rocep_names_predictable_interfaces_and_differing_gids() {
        let Some((h, _dev)) = scan("rocep-ens5", &["erdma"]) else { return };
        assert_eq!(names(&h.devices), ["rocep156s0", "rocep26s0"]);
        assert_eq!(h.netdevs, ["bond0", "ens5", "ens6", "lo"]);
        let up: Vec<_> = h
            .devices
            .iter()
            .map(|d| (d.name.as_str(), d.ports[0].state, d.ports[0].netdev.as_deref()))
            .collect();
        assert_eq!(up, [("rocep156s0", 1, Some("ens6")), ("rocep26s0", 4, Some("ens5"))]);
        let Some((h, _dev)) = scan("gids-differ", &["erdma"]) else { return };
        assert_eq!(
            h.devices.iter().map(|d| d.ports[0].roce_v2_ipv4_gid).collect::<Vec<_>>(),
            [Some(2), Some(1)]
        );
    }

    #[test]
    fn gid_text() {
        assert!(ipv4_of("0000:0000:0000:0000:0000:ffff:ac10:0005").is_some());
        assert!(ipv4_of("fe80:0000:0000:0000:0216:3eff:fe00:0000").is_none());
        assert!(ipv4_of("0000:0000:0000:0000:0000:0000:0000:0000").is_none());
        assert!(ipv4_of("ffff:ac10:0005").is_none());
        assert_eq!(
            ipv4_of("0000:0000:0000:0000:0000:ffff:c0a8:0415"),
            Some(std::net::Ipv4Addr::new(192, 168, 4, 21))
        );
        assert_eq!(ipv4_of("fe80:0000:0000:0000:0216:3eff:fe00:0000"), None);
    }

    #[test]
    fn fixture_none() {
        let Some((h, _dev)) = scan("none", &["erdma"]) else { return };
        assert!(h.devices.is_empty() && h.others.is_empty() && h.rdma_cm.is_none());
        // A sysfs root that does not exist at all is no devices either, not an error.
        let h = discover(
            Path::new("/nonexistent/sys"),
            Path::new("/nonexistent/dev"),
            &["erdma".into()],
        )
        .unwrap();
        assert!(h.devices.is_empty());
    }

    #[test]
    fn wrong_nodes_are_flagged() {
        let Some(dev) = dev_root("two") else { return };
        let sys = Path::new(FIXTURES).join("two/sys");
        // uverbs0 with the wrong minor, uverbs1 a regular file, rdma_cm gone.
        let u0 = dev.path().join("infiniband/uverbs0");
        std::fs::remove_file(&u0).unwrap();
        assert!(std::process::Command::new("mknod")
            .arg(&u0)
            .args(["c", "231", "200"])
            .status()
            .unwrap()
            .success());
        let u1 = dev.path().join("infiniband/uverbs1");
        std::fs::remove_file(&u1).unwrap();
        std::fs::write(&u1, "").unwrap();
        std::fs::remove_file(dev.path().join("infiniband/rdma_cm")).unwrap();
        let h = discover(&sys, dev.path(), &["erdma".into()]).unwrap();
        assert_eq!(
            h.devices[0].problem.as_deref(),
            Some(format!("{} is 231:200, sysfs says 231:192", u0.display()).as_str())
        );
        assert_eq!(
            h.devices[1].problem.as_deref(),
            Some(format!("{} is not a character device", u1.display()).as_str())
        );
        assert_eq!(h.rdma_cm, None);
    }

    /// A tree built here, as an older kernel lays it out: no `gid_attrs/ndevs`, the netdev found
    /// under the device's PCI function (`device/net`), reached through the class directory's
    /// symbolic link as on a real sysfs; and a port entry that is not a directory, which reads
    /// as a port whose attributes are all missing, not as no port.
    #[test]
    fn an_older_kernels_tree_through_its_links() {
        let d = tempfile::tempdir().unwrap();
        let sys = d.path().join("sys");
        let pci = sys.join("devices/pci0000:00/0000:00:05.0");
        let dev = pci.join("infiniband/erdma_0");
        let put = |rel: &Path, body: &str| {
            std::fs::create_dir_all(rel.parent().unwrap()).unwrap();
            std::fs::write(rel, body).unwrap();
        };
        let link = |target: &str, at: &Path| {
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(target, at).unwrap();
        };
        put(&dev.join("ports/1/state"), "4: ACTIVE\n");
        put(&dev.join("ports/1/link_layer"), "Ethernet\n");
        put(&dev.join("ports/2"), "not a directory\n");
        link("../..", &dev.join("device"));
        std::fs::create_dir_all(sys.join("bus/pci/drivers/erdma")).unwrap();
        link("../../../bus/pci/drivers/erdma", &pci.join("driver"));
        put(&pci.join("net/eth7/mtu"), "1500\n");
        link(
            "../../devices/pci0000:00/0000:00:05.0/infiniband/erdma_0",
            &sys.join("class/infiniband/erdma_0"),
        );
        link("../../devices/pci0000:00/0000:00:05.0/net/eth7", &sys.join("class/net/eth7"));
        let h = discover(&sys, &d.path().join("dev"), &["erdma".into()]).unwrap();
        assert_eq!(names(&h.devices), ["erdma_0"]);
        let e = &h.devices[0];
        assert_eq!(e.driver.as_deref(), Some("erdma"));
        assert_eq!(e.problem.as_deref(), Some("no uverbs device in sysfs"));
        let port = |num, state, state_name: &str, link_layer: Option<&str>| Port {
            num,
            state,
            state_name: state_name.into(),
            link_layer: link_layer.map(Into::into),
            netdev: Some("eth7".into()),
            mtu: Some(1500),
            roce_v2_ipv4_gid: None,
            roce_v2_ipv4: None,
        };
        assert_eq!(e.ports, [port(1, 4, "ACTIVE", Some("Ethernet")), port(2, 0, "", None)]);
        assert!(!e.all_ports_active());
        assert_eq!(h.netdevs, ["eth7"]);
    }

    /// What the whole-path reading gave on odd trees, the held directories give too: a
    /// `uverbs` entry whose name is not UTF-8 is read by its name as it is (and its node looked
    /// for under the name as text), and where `class/net` cannot be opened a netdev's MTU is
    /// read by its whole path (here an absolute name in `ndevs/0`, which that path follows).
    #[test]
    fn odd_names_and_no_class_net() {
        use std::os::unix::ffi::OsStrExt;
        let d = tempfile::tempdir().unwrap();
        let sys = d.path().join("sys");
        let dev = sys.join("class/infiniband/erdma_0");
        let put = |rel: &Path, body: &str| {
            std::fs::create_dir_all(rel.parent().unwrap()).unwrap();
            std::fs::write(rel, body).unwrap();
        };
        let elsewhere = d.path().join("elsewhere/eth9");
        put(&elsewhere.join("mtu"), "1234\n");
        put(&dev.join("ports/1/state"), "4: ACTIVE\n");
        put(&dev.join("ports/1/gid_attrs/ndevs/0"), &format!("{}\n", elsewhere.display()));
        std::fs::create_dir_all(sys.join("bus/pci/drivers/erdma")).unwrap();
        std::fs::create_dir_all(dev.join("device")).unwrap();
        std::os::unix::fs::symlink("../../../../bus/pci/drivers/erdma", dev.join("device/driver"))
            .unwrap();
        let verbs =
            sys.join("class/infiniband_verbs").join(std::ffi::OsStr::from_bytes(b"uverbs\xff"));
        put(&verbs.join("ibdev"), "erdma_0\n");
        put(&verbs.join("dev"), "231:192\n");
        let h = discover(&sys, &d.path().join("dev"), &["erdma".into()]).unwrap();
        assert_eq!(names(&h.devices), ["erdma_0"]);
        let e = &h.devices[0];
        assert_eq!(e.driver.as_deref(), Some("erdma"));
        let problem = e.problem.as_deref().unwrap();
        assert!(problem.contains("infiniband/uverbs\u{fffd}: "), "{problem}");
        assert_eq!(e.ports[0].netdev.as_deref(), Some(elsewhere.to_str().unwrap()));
        assert_eq!(e.ports[0].mtu, Some(1234));
        assert!(h.netdevs.is_empty());
    }
}
