//! The NCCL environment contract of eRDMA, written down once: the presets that hold on every
//! eRDMA host, the variables that describe a host and must not be baked into an image, the MTU
//! rule behind NCCL's LL128 protocol, and the first NCCL release that works over eRDMA.
//!
//! `erdma-build` bakes [`PRESETS`] (and, for PAI-DLC, [`PAI_DLC_ENV`]) into images and warns
//! about [`HOST_SPECIFIC`] ones; `erdma-oci-hook` adds [`PRESETS`] to containers and derives the
//! host-specific ones from the host's sysfs.
use std::fmt;

use serde::Serialize;

/// PAI-DLC's tuning, true on every eRDMA host whatever its device and interface names (the
/// PAI-DLC eRDMA guide): `erdma-build` adds these to every image unless the base sets them, and
/// `erdma-oci-hook` to every container that sets none of them.
pub const PRESETS: &[(&str, &str)] = &[
    ("NCCL_DEBUG", "INFO"),
    ("NCCL_IB_QPS_PER_CONNECTION", "8"),
    ("NCCL_MIN_NCHANNELS", "16"),
    ("NCCL_NET_PLUGIN", "none"),
    ("PYTHONUNBUFFERED", "1"),
];

/// Added on top of [`PRESETS`] with `--profile pai-dlc` only: PAI-DLC's hosts have `eth0`
/// and `erdma_N` devices with the IPv4-mapped RoCE v2 GID at index 1 (the PAI-DLC eRDMA guide).
pub const PAI_DLC_ENV: &[(&str, &str)] =
    &[("NCCL_SOCKET_IFNAME", "eth0"), ("NCCL_IB_HCA", "erdma"), ("NCCL_IB_GID_INDEX", "1")];

/// The variables that describe a host, not an image: `check` warns when an image bakes one in
/// (outside `--profile pai-dlc`).
pub const HOST_SPECIFIC: &[&str] = &["NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX"];

/// Why `name=value` in an image config breaks NCCL on some hosts; `None` when it is not host
/// data (`NCCL_IB_GID_INDEX=-1` asks NCCL to choose, which is right everywhere).
pub fn host_specific(name: &str, value: &str) -> Option<String> {
    let v = value.trim();
    let names = || {
        v.trim_start_matches(['^', '='])
            .split(',')
            .map(|n| n.split(':').next().unwrap_or(n).trim())
            .filter(|n| !n.is_empty())
            .collect::<Vec<_>>()
            .join(" or ")
    };
    let why = match name {
        // NCCL stops with "Bootstrap : no socket interface found" (the PAI-DLC eRDMA guide notes; NCCL #1837).
        "NCCL_SOCKET_IFNAME" if v.starts_with('^') => "it excludes interfaces by this host's names: where they differ, NCCL may bootstrap over the wrong interface".to_string(),
        "NCCL_SOCKET_IFNAME" => format!("on a host without {} every NCCL job stops at start (\"Bootstrap : no socket interface found\")", names()),
        // A prefix filter: `erdma` matches erdma_0, not udev's rocep26s0; with no device left
        // NCCL quietly uses TCP sockets.
        "NCCL_IB_HCA" if v.starts_with('^') => "it excludes RDMA devices by this host's names: where they differ, NCCL may pick devices it should not".to_string(),
        "NCCL_IB_HCA" => format!("on a host whose RDMA devices are not named {} (udev names them rocep26s0) it matches none, and NCCL silently falls back to TCP sockets, many times slower", names()),
        // NCCL chooses the RoCE v2 GID itself since 2.21; the right index differs per host and
        // even per device (erdma-controller's docs/erdma-benchmark: 2 and 1 on one node).
        "NCCL_IB_GID_INDEX" if v == "-1" => return None,
        "NCCL_IB_GID_INDEX" => "it overrides NCCL's own RoCE v2 GID choice (automatic since NCCL 2.21) and is wrong wherever the IPv4-mapped RoCE v2 GID is at another index (mlx5 RoCE: usually 3; two eRDMA devices of one node seen at 2 and 1)".to_string(),
        _ => return None,
    };
    Some(format!("{name}={value} is host data: {why}"))
}

/// MTU with jumbo frames; NCCL's LL128 protocol is only safe there (the ECS eRDMA-on-GPU guide).
pub const MTU_JUMBO: u32 = 8500;
pub const MTU_STANDARD: u32 = 1400;
/// What turns LL128 off when an MTU is not [`MTU_JUMBO`].
pub const NO_LL128: (&str, &str) = ("NCCL_PROTO", "^LL128");

/// Whether eRDMA expects this netdev MTU: 8500 with jumbo frames, 1400 without (the ECS eRDMA-on-GPU guide).
pub fn mtu_expected(mtu: u32) -> bool {
    mtu == MTU_JUMBO || mtu == MTU_STANDARD
}

/// Whether NCCL's LL128 protocol must be off for ports with these MTUs.
pub fn ll128_off(mtus: &[u32]) -> bool {
    mtus.iter().any(|m| *m != MTU_JUMBO)
}

/// The first NCCL release that works over eRDMA (the PAI-DLC eRDMA guide).
pub const MIN: Nccl = Nccl { major: 2, minor: 19, patch: 0 };

/// The first NCCL release that chooses a RoCE GID by address (`NCCL_IB_GID_INDEX=-1`,
/// `NCCL_IB_ADDR_FAMILY`, `NCCL_IB_ADDR_RANGE`; NCCL 2.21.5's `src/transport/net_ib.cc`,
/// `ncclIbGetGidIndex`), which erdma-oci-hook sets where a host's ERIs' GID indexes differ;
/// older ones read `-1` as an index.
pub const GID_BY_ADDRESS: Nccl = Nccl { major: 2, minor: 21, patch: 0 };

/// An NCCL release, `2.21.5`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nccl {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Nccl {
    pub fn parse(s: &str) -> Option<Nccl> {
        let mut it = s.split('.');
        let v = Nccl {
            major: it.next()?.parse().ok()?,
            minor: it.next()?.parse().ok()?,
            patch: it.next().unwrap_or("0").parse().ok()?,
        };
        it.next().is_none().then_some(v)
    }

    pub fn supports_erdma(self) -> bool {
        self >= MIN
    }
}

impl fmt::Display for Nccl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl Serialize for Nccl {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_sets_exactly_the_host_specific_variables() {
        let mut host: Vec<&str> = PAI_DLC_ENV.iter().map(|(k, _)| *k).collect();
        host.sort_unstable();
        let mut want = HOST_SPECIFIC.to_vec();
        want.sort_unstable();
        assert_eq!(host, want);
        assert!(PRESETS.iter().all(|(k, _)| !HOST_SPECIFIC.contains(k)));
    }

    #[test]
    fn host_data_says_what_breaks_where() {
        assert_eq!(
            host_specific("NCCL_SOCKET_IFNAME", "eth0").unwrap(),
            "NCCL_SOCKET_IFNAME=eth0 is host data: on a host without eth0 every NCCL job stops at start (\"Bootstrap : no socket interface found\")"
        );
        assert!(host_specific("NCCL_SOCKET_IFNAME", "=eth0,eth1")
            .unwrap()
            .contains("without eth0 or eth1"));
        assert!(host_specific("NCCL_IB_HCA", "erdma")
            .unwrap()
            .contains("not named erdma (udev names them rocep26s0)"));
        assert!(host_specific("NCCL_IB_HCA", "=erdma_0:1").unwrap().contains("not named erdma_0 "));
        assert!(host_specific("NCCL_IB_GID_INDEX", "1").unwrap().contains("mlx5 RoCE: usually 3"));
        assert_eq!(host_specific("NCCL_IB_GID_INDEX", "-1"), None, "-1 lets NCCL choose");
        assert_eq!(host_specific("NCCL_DEBUG", "INFO"), None);
    }

    #[test]
    fn the_mtu_rule() {
        assert!(mtu_expected(8500) && mtu_expected(1400) && !mtu_expected(9000));
        assert!(!ll128_off(&[8500, 8500]));
        assert!(ll128_off(&[8500, 1400]), "LL128 is only safe when every port has jumbo frames");
    }

    #[test]
    fn the_nccl_floor() {
        assert!(Nccl::parse("2.19.3").unwrap().supports_erdma());
        assert!(Nccl::parse("2.19").unwrap().supports_erdma());
        assert!(!Nccl::parse("2.18.3").unwrap().supports_erdma());
        assert_eq!(Nccl::parse("2.21.5.1"), None);
        assert_eq!(Nccl::parse("2.21.5").unwrap().to_string(), "2.21.5");
    }
}
