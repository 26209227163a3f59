//! The network a container is in, as NCCL will see it, and whether the host's RDMA devices can
//! be used from there.
//!
//! In the kernel's default `shared` RDMA namespace mode (`rdma system show netns`; the
//! `netns_mode` parameter of `ib_core`, which `rdma system set netns` changes) every RDMA device
//! is usable from every network namespace: verbs go through the device itself, and NCCL's
//! out-of-band bootstrap runs over whatever interface the container has. So a container on its
//! own network gets its `NCCL_SOCKET_IFNAME` from *its* namespace ([`interfaces`]), never from
//! the host's. In `exclusive` mode a device belongs to one namespace (the host's, unless moved)
//! and opening it from another fails, so such a container is refused.
//!
//! The interfaces are read through rtnetlink (`RTM_GETLINK`, `RTM_GETADDR` dumps) from a
//! thread that has joined the namespace with `setns(2)`: a network namespace is per thread, and
//! a netlink socket belongs to the namespace of the thread that opens it. `/sys/class/net`
//! would show the namespace sysfs was mounted in instead.
use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};
use serde::Serialize;

/// The kernel's RDMA network namespace mode.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum RdmaNetns {
    /// Every RDMA device is usable from every network namespace (the kernel's default).
    Shared,
    /// A device is usable only from the namespace it belongs to.
    Exclusive,
    /// `ib_core` is not loaded, or its parameter is unreadable.
    #[default]
    Unknown,
}

/// Where sysfs holds `ib_core`'s `netns_mode` parameter.
pub const NETNS_MODE_PARAM: &str = "module/ib_core/parameters/netns_mode";

/// `ib_core`'s `netns_mode` parameter under `sysfs_root`: the variable `rdma system set netns`
/// changes (drivers/infiniband/core/device.c, `ib_devices_shared_netns`), so it reads the
/// mode as it is now, `Y` (shared) or `N` (exclusive).
pub fn rdma_netns_mode(sysfs_root: &Path) -> RdmaNetns {
    match crate::sysfs::read_trim(&sysfs_root.join(NETNS_MODE_PARAM)).as_deref() {
        Some("Y" | "1") => RdmaNetns::Shared,
        Some("N" | "0") => RdmaNetns::Exclusive,
        _ => RdmaNetns::Unknown,
    }
}

/// One network interface of a namespace.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Iface {
    pub name: String,
    pub index: u32,
    /// `IFF_UP`.
    pub up: bool,
    /// `IFF_LOOPBACK`.
    pub loopback: bool,
    /// Its addresses of global scope (no link-local or host-scope ones).
    pub addrs: Vec<IpAddr>,
}

impl Iface {
    /// Whether NCCL can bootstrap over it: up, not loopback, with an address other hosts reach.
    pub fn usable(&self) -> bool {
        self.up && !self.loopback && !self.addrs.is_empty()
    }
}

/// Where a container's network is.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Net {
    /// The host's network namespace: the host's interfaces.
    Host,
    /// Its own namespace, with the interfaces read from it.
    Own { path: PathBuf, ifaces: Vec<Iface> },
    /// Its own namespace (or one unknown here), whose interfaces cannot be read: why.
    Unread { why: String },
}

impl Net {
    /// The namespace at `path`, read now; [`Net::Unread`] with the reason when it cannot be.
    pub fn read(path: &Path) -> Net {
        match interfaces(path) {
            Ok(ifaces) => Net::Own { path: path.to_path_buf(), ifaces },
            Err(why) => Net::Unread { why: format!("reading {}: {why}", path.display()) },
        }
    }

    /// For settings made once for every container that asks (a CDI spec, the device plugin's
    /// `Allocate`): the host's network where `network = "require"` keeps every such container
    /// on it, else unknown.
    pub fn any_container(policy: crate::config::NetworkPolicy) -> Net {
        match policy {
            crate::config::NetworkPolicy::Require => Net::Host,
            crate::config::NetworkPolicy::Any => Net::Unread {
                why: "one answer serves every container, whichever network it is on".into(),
            },
        }
    }

    /// The interface names an `NCCL_SOCKET_IFNAME` may select from: the host's, or those of
    /// the container's namespace; `None` when they are unknown.
    pub fn names<'a>(&'a self, host_netdevs: &'a [String]) -> Option<Vec<&'a str>> {
        match self {
            Net::Host => Some(host_netdevs.iter().map(String::as_str).collect()),
            Net::Own { ifaces, .. } => Some(ifaces.iter().map(|i| i.name.as_str()).collect()),
            Net::Unread { .. } => None,
        }
    }
}

/// The interfaces of the network namespace at `path` (`/var/run/netns/NAME`,
/// `/proc/PID/ns/net`), in index order. Needs `CAP_SYS_ADMIN` over the namespace.
pub fn interfaces(path: &Path) -> Result<Vec<Iface>, String> {
    // Never blocking (a FIFO named by a bad spec would hang `open`), never following into a
    // terminal: only an nsfs file is used.
    let ns: File = rustix::fs::open(
        path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| e.to_string())?
    .into();
    // A file under /var/run/netns that is not a namespace here: the bind mount was made in the
    // host's mount namespace after this process's was copied, and did not propagate.
    let fs = rustix::fs::fstatfs(&ns).map_err(|e| format!("statfs: {e}"))?;
    if fs.f_type as i64 != NSFS_MAGIC {
        return Err("not a namespace file in this mount namespace (a container running this needs the host's /var/run/netns mounted with propagation from the host: mountPropagation: HostToContainer)".into());
    }
    // A thread of its own: `setns` moves only the calling thread, which ends with the read.
    std::thread::scope(|s| {
        s.spawn(|| {
            rustix::thread::move_into_link_name_space(
                ns.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .map_err(|e| format!("joining the namespace (setns): {e}"))?;
            read_interfaces()
        })
        .join()
        .map_err(|_| "the reading thread panicked".to_string())?
    })
}

/// The interfaces of the calling thread's network namespace, through rtnetlink.
fn read_interfaces() -> Result<Vec<Iface>, String> {
    let links = dump(RTM_GETLINK, &[0u8; 16])?;
    let mut ifaces: Vec<Iface> = links
        .iter()
        .filter(|(k, _)| *k == RTM_NEWLINK)
        .filter_map(|(_, m)| parse_link(m))
        .collect();
    let addrs = dump(RTM_GETADDR, &[0u8; 8])?;
    for (index, addr) in
        addrs.iter().filter(|(k, _)| *k == RTM_NEWADDR).filter_map(|(_, m)| parse_addr(m))
    {
        if let Some(i) = ifaces.iter_mut().find(|i| i.index == index) {
            i.addrs.push(addr);
        }
    }
    ifaces.sort_by_key(|i| i.index);
    Ok(ifaces)
}

/// `NSFS_MAGIC` (linux/magic.h): the file system of namespace files.
const NSFS_MAGIC: i64 = 0x6e73_6673;
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWADDR: u16 = 20;
const RTM_GETADDR: u16 = 22;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const IFLA_IFNAME: u16 = 3;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFF_UP: u32 = 0x1;
const IFF_LOOPBACK: u32 = 0x8;
/// `RT_SCOPE_UNIVERSE`: an address other hosts can reach.
const SCOPE_UNIVERSE: u8 = 0;

/// Sends a dump request of `kind` with `body` (a zeroed family header: all families) and
/// returns each reply message's type and payload (after the 16-byte `nlmsghdr`), up to
/// `NLMSG_DONE`.
fn dump(kind: u16, body: &[u8]) -> Result<Vec<(u16, Vec<u8>)>, String> {
    let sock = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| format!("opening an rtnetlink socket: {e}"))?;
    let mut req = Vec::with_capacity(16 + body.len());
    req.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    req.extend_from_slice(&kind.to_ne_bytes());
    req.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    req.extend_from_slice(&0u32.to_ne_bytes()); // port: the kernel assigns
    req.extend_from_slice(body);
    rustix::net::sendto(&sock, &req, SendFlags::empty(), &SocketAddrNetlink::new(0, 0))
        .map_err(|e| format!("sending an rtnetlink request: {e}"))?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 32 << 10];
    loop {
        let (n, _) = rustix::net::recv(&sock, &mut buf[..], RecvFlags::empty())
            .map_err(|e| format!("reading rtnetlink: {e}"))?;
        if n == 0 {
            return Err("rtnetlink closed before the end of the dump".into());
        }
        for (kind, payload) in messages(&buf[..n])? {
            match kind {
                NLMSG_DONE => return Ok(out),
                NLMSG_ERROR => {
                    let errno = payload
                        .get(..4)
                        .map(|b| i32::from_ne_bytes(b.try_into().expect("4 bytes")))
                        .unwrap_or_default();
                    return Err(format!("rtnetlink answered error {}", -errno));
                }
                _ => out.push((kind, payload.to_vec())),
            }
        }
    }
}

/// The messages of one netlink datagram: type and payload each.
fn messages(mut buf: &[u8]) -> Result<Vec<(u16, &[u8])>, String> {
    let mut out = Vec::new();
    while buf.len() >= 16 {
        let len = u32::from_ne_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
        let kind = u16::from_ne_bytes(buf[4..6].try_into().expect("2 bytes"));
        if len < 16 || len > buf.len() {
            return Err(format!("malformed netlink message (length {len})"));
        }
        out.push((kind, &buf[16..len]));
        buf = &buf[align(len).min(buf.len())..];
    }
    Ok(out)
}

/// Netlink's 4-byte alignment (`NLMSG_ALIGN`, `RTA_ALIGN`).
fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// The `rtattr`s after a fixed header: type and value each.
fn attributes(mut buf: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while buf.len() >= 4 {
        let len = u16::from_ne_bytes([buf[0], buf[1]]) as usize;
        let kind = u16::from_ne_bytes([buf[2], buf[3]]);
        if len < 4 || len > buf.len() {
            break;
        }
        out.push((kind, &buf[4..len]));
        buf = &buf[align(len).min(buf.len())..];
    }
    out
}

/// An `RTM_NEWLINK` payload: `ifinfomsg` (family, pad, type, index, flags, change), then
/// attributes.
fn parse_link(m: &[u8]) -> Option<Iface> {
    if m.len() < 16 {
        return None;
    }
    let index = u32::from_ne_bytes(m[4..8].try_into().ok()?);
    let flags = u32::from_ne_bytes(m[8..12].try_into().ok()?);
    let name =
        attributes(&m[16..]).into_iter().find(|(k, _)| *k == IFLA_IFNAME).map(|(_, v)| {
            let v = v.split(|b| *b == 0).next().unwrap_or_default();
            String::from_utf8_lossy(v).into_owned()
        })?;
    Some(Iface {
        name,
        index,
        up: flags & IFF_UP != 0,
        loopback: flags & IFF_LOOPBACK != 0,
        addrs: Vec::new(),
    })
}

/// An `RTM_NEWADDR` payload: `ifaddrmsg` (family, prefix length, flags, scope, index), then
/// attributes; the interface's index and the address, when its scope is global.
fn parse_addr(m: &[u8]) -> Option<(u32, IpAddr)> {
    if m.len() < 8 || m[3] != SCOPE_UNIVERSE {
        return None;
    }
    let index = u32::from_ne_bytes(m[4..8].try_into().ok()?);
    let attrs = attributes(&m[8..]);
    // IPv4 names the interface's own address IFA_LOCAL (IFA_ADDRESS is the peer's on a
    // point-to-point link); IPv6 has only IFA_ADDRESS.
    let value = |k: u16| attrs.iter().find(|(kind, _)| *kind == k).map(|(_, v)| *v);
    let addr = match m[0] {
        2 => {
            let v: [u8; 4] = value(IFA_LOCAL).or(value(IFA_ADDRESS))?.try_into().ok()?;
            IpAddr::V4(Ipv4Addr::from(v))
        }
        10 => {
            let v: [u8; 16] = value(IFA_ADDRESS)?.try_into().ok()?;
            IpAddr::V6(Ipv6Addr::from(v))
        }
        _ => return None,
    };
    Some((index, addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(value);
        a.resize(align(a.len()), 0);
        a
    }

    fn link(index: u32, flags: u32, name: &str) -> Vec<u8> {
        let mut m = vec![0u8, 0, 1, 0];
        m.extend_from_slice(&index.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend(attr(13, &1500u32.to_ne_bytes())); // IFLA_MTU first, as the kernel orders
        m.extend(attr(IFLA_IFNAME, format!("{name}\0").as_bytes()));
        m
    }

    fn addr(family: u8, scope: u8, index: u32, attrs: &[(u16, &[u8])]) -> Vec<u8> {
        let mut m = vec![family, 24, 0, scope];
        m.extend_from_slice(&index.to_ne_bytes());
        for (k, v) in attrs {
            m.extend(attr(*k, v));
        }
        m
    }

    #[test]
    fn links_and_addresses_are_read_from_rtnetlink_payloads() {
        assert_eq!(
            parse_link(&link(3, IFF_UP | 0x40, "eth0")),
            Some(Iface { name: "eth0".into(), index: 3, up: true, loopback: false, addrs: vec![] })
        );
        let lo = parse_link(&link(1, IFF_UP | IFF_LOOPBACK, "lo")).unwrap();
        assert!(lo.loopback && !lo.usable());
        // A point-to-point IPv4 address: the local one is the interface's.
        let p2p = addr(2, 0, 3, &[(IFA_ADDRESS, &[10, 0, 0, 2]), (IFA_LOCAL, &[10, 0, 0, 1])]);
        assert_eq!(parse_addr(&p2p), Some((3, "10.0.0.1".parse().unwrap())));
        let v6: [u8; 16] = "fd00::5".parse::<Ipv6Addr>().unwrap().octets();
        assert_eq!(
            parse_addr(&addr(10, 0, 4, &[(IFA_ADDRESS, &v6)])),
            Some((4, "fd00::5".parse().unwrap()))
        );
        // Link-local (scope 253) and host-scope (254) addresses are not ones peers reach.
        let ll: [u8; 16] = "fe80::1".parse::<Ipv6Addr>().unwrap().octets();
        assert_eq!(parse_addr(&addr(10, 253, 4, &[(IFA_ADDRESS, &ll)])), None);
        assert_eq!(parse_addr(&addr(2, 254, 1, &[(IFA_LOCAL, &[127, 0, 0, 1])])), None);
        // Truncated messages are skipped, not read past their end.
        assert_eq!(parse_link(&[0u8; 8]), None);
        assert_eq!(parse_addr(&[2u8, 24, 0]), None);
        let mut bad = link(3, 1, "eth0");
        bad.truncate(20);
        assert_eq!(parse_link(&bad), None);
    }

    #[test]
    fn a_datagram_splits_into_messages() {
        let mut dgram = Vec::new();
        for (kind, body) in [(RTM_NEWLINK, link(1, 9, "lo")), (NLMSG_DONE, vec![0u8; 4])] {
            dgram.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
            dgram.extend_from_slice(&kind.to_ne_bytes());
            dgram.extend_from_slice(&[0u8; 10]);
            dgram.extend(body);
        }
        let m = messages(&dgram).unwrap();
        assert_eq!(m.iter().map(|(k, _)| *k).collect::<Vec<_>>(), [RTM_NEWLINK, NLMSG_DONE]);
        assert_eq!(parse_link(m[0].1).unwrap().name, "lo");
        dgram[0] = 200; // a length past the datagram's end
        assert!(messages(&dgram).is_err());
    }

    #[test]
    fn the_rdma_namespace_mode_is_ib_cores_parameter() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(rdma_netns_mode(d.path()), RdmaNetns::Unknown);
        let p = d.path().join("module/ib_core/parameters");
        std::fs::create_dir_all(&p).unwrap();
        for (v, want) in
            [("Y\n", RdmaNetns::Shared), ("N\n", RdmaNetns::Exclusive), ("?", RdmaNetns::Unknown)]
        {
            std::fs::write(p.join("netns_mode"), v).unwrap();
            assert_eq!(rdma_netns_mode(d.path()), want, "{v}");
        }
    }

    /// Files that are no namespace are refused without blocking or reading them: a FIFO
    /// (whose `open` would wait for a writer), a regular file.
    #[test]
    fn only_namespace_files_are_joined() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let file = d.path().join("file");
        std::fs::write(&file, "x").unwrap();
        for p in [&fifo, &file] {
            let e = interfaces(p).unwrap_err();
            assert!(e.contains("not a namespace file"), "{e}");
        }
        assert!(interfaces(&d.path().join("missing")).is_err());
    }

    /// This process's own namespace, read as a container's would be: the same interfaces the
    /// kernel lists in /proc/net/dev.
    #[test]
    fn the_own_namespace_is_read_like_proc_net_dev() {
        let ifaces = interfaces(Path::new("/proc/self/ns/net"));
        let Ok(ifaces) = ifaces else {
            // setns needs CAP_SYS_ADMIN; the root tests read created namespaces.
            return;
        };
        let dev = std::fs::read_to_string("/proc/net/dev").unwrap();
        let mut want: Vec<String> = dev
            .lines()
            .skip(2)
            .filter_map(|l| l.split(':').next().map(|n| n.trim().to_string()))
            .collect();
        let mut got: Vec<String> = ifaces.iter().map(|i| i.name.clone()).collect();
        want.sort();
        got.sort();
        assert_eq!(got, want);
        assert!(ifaces.iter().any(|i| i.loopback && i.name == "lo"));
    }
}
