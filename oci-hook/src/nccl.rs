//! Where a container's NCCL settings come from: derived from this host's sysfs for the devices
//! it was given, never guessed. The one implementation behind the runtime wrapper and the
//! `precreate` hook (through [`crate::modify`]), the `prestart`/`createRuntime` hook's report,
//! `cdi generate`, `erdma-oci-hook env` and `doctor`.
//!
//! - `NCCL_IB_HCA`: the given devices' ACTIVE ports, in NCCL's exact-match syntax
//!   (`=rocep26s0:1,rocep9s0:1`): NCCL takes plain names as prefixes, so `erdma_1` would also
//!   pick `erdma_10`, and `erdma` matches nothing on hosts whose devices are `rocep…`.
//! - `NCCL_SOCKET_IFNAME`: an interface of the container's own network namespace, never a name
//!   it lacks (NCCL stops at start when none matches: "Bootstrap : no socket interface found").
//!   On the host's network, the netdevs behind those ports (`=ens5`). On a network of its own
//!   ([`Net::Own`], read from the namespace by [`crate::netns`]), its interfaces that are up
//!   with a global address (`=eth0` in a pod): NCCL's bootstrap is plain TCP between the
//!   ranks, over whatever network they share. Where the namespace cannot be read (Docker sets
//!   it up only after the container is created; a CDI spec or the device plugin's answer
//!   serves every container alike), it is left unset and NCCL chooses as it does by default
//!   (`src/misc/socket.cc`: interfaces named `ib…` first, then any but `docker…` and `lo`).
//! - `NCCL_IB_GID_INDEX`: the ports' IPv4-mapped RoCE v2 GID index, when they all agree; else
//!   unset, and NCCL 2.21+ chooses itself. The index names an entry of the device's GID table,
//!   which in the kernel's `shared` RDMA namespace mode is the same seen from every namespace,
//!   so it holds in a container on its own network too: the address in that entry is the
//!   ERI's, which the peers reach over the VPC. It is the entry NCCL ≥ 2.21 picks by itself
//!   (`NCCL_IB_GID_INDEX=-1`): of the family `NCCL_IB_ADDR_FAMILY` names (IPv4 by default),
//!   within `NCCL_IB_ADDR_RANGE` when set, RoCE v2 before v1 (`src/transport/net_ib.cc`,
//!   `ncclIbGetGidIndex`).
//!   Where the indexes differ (Alibaba's eRDMA benchmark notes found 2 and 1 on one host), the
//!   GID is chosen by address: `NCCL_IB_GID_INDEX=-1`, `NCCL_IB_ADDR_FAMILY=AF_INET` and
//!   `NCCL_IB_ADDR_RANGE`, the smallest IPv4 prefix holding every port's address (NCCL 2.21+;
//!   older NCCL reads -1 as an index).
//! - `NCCL_PROTO=^LL128` when a port's MTU is not the jumbo 8500 (the ECS eRDMA-on-GPU guide).
//! - `NCCL_NET_GDR_LEVEL`: where GPU Direct RDMA can work (`nvidia_peermem`) and the container's
//!   GPUs are farther from their nearest ERI than NCCL's default (`PXB`) admits, the level of
//!   the farthest of those paths, as NCCL classifies them ([`crate::topology`]).
//! - `NCCL_NET=IB` (unless the config's `tcp_fallback`): NCCL stops with its own error
//!   ("Failed to initialize any NET plugin") where eRDMA is unusable, instead of running over
//!   TCP sockets.
//! - `NCCL_IB_DISABLE` is never touched.
//!
//! Beside these, the presets that hold on every eRDMA host ([`PRESETS`], PAI-DLC's tuning,
//! the PAI-DLC eRDMA guide) are added unless the container sets them.
use erdma_common::nccl::{ll128_off, MTU_JUMBO, NO_LL128, PRESETS};
use serde::Serialize;

use crate::config::EnvPolicy;
use crate::discover::{Host, RdmaDevice};
use crate::netns::Net;
use crate::topology::{Topology, GDR_DEFAULT_LEVEL};

/// What the settings depend on beyond the devices and the network: where the GPUs sit, and the
/// operator's choices.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context<'a> {
    /// The host's GPUs beside the ERIs (`None`: not read; no GPU Direct RDMA decision).
    pub topology: Option<&'a Topology>,
    /// The container's GPUs, indexes into the topology's; `None` when its spec does not say,
    /// which counts as all of the host's.
    pub gpus: Option<&'a [usize]>,
    /// `NCCL_NET=IB` (the config's `tcp_fallback = false`).
    pub fail_closed: bool,
}

impl<'a> Context<'a> {
    /// The operator's choices from `config`, with no GPU topology.
    pub fn of(config: &crate::config::Config) -> Context<'a> {
        Context { fail_closed: !config.tcp_fallback, ..Context::default() }
    }
}

/// The smallest IPv4 prefix that holds every one of `addrs` (`10.0.0.4/30`).
fn covering_prefix(addrs: &[std::net::Ipv4Addr]) -> Option<String> {
    let first = u32::from(*addrs.first()?);
    let diff = addrs.iter().fold(0u32, |acc, a| acc | (u32::from(*a) ^ first));
    let len = diff.leading_zeros();
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Some(format!("{}/{len}", std::net::Ipv4Addr::from(first & mask)))
}

/// One derived variable, with where it came from.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Var {
    pub name: &'static str,
    pub value: String,
    /// Why this value, for `env --format json`, `doctor` and the README's table.
    pub source: String,
}

/// The settings for a set of devices on this host.
#[derive(Debug, Clone, Serialize, Default, PartialEq, Eq)]
pub struct Derived {
    /// Host-specific variables, derived from sysfs.
    pub vars: Vec<Var>,
    /// What could not be derived, and why (no ACTIVE port, GID indexes that disagree).
    pub notes: Vec<String>,
}

impl Derived {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.iter().find(|v| v.name == name).map(|v| v.value.as_str())
    }

    /// What a container that sets none of them gets: [`PRESETS`], then the derived variables.
    pub fn with_presets(&self) -> Vec<(String, String)> {
        PRESETS
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .chain(self.vars.iter().map(|v| (v.name.to_string(), v.value.clone())))
            .collect()
    }
}

/// The settings for `devices` (those given to a container, or every device) on `host`, for a
/// container whose network is `net`, in `ctx`.
pub fn derive(host: &Host, devices: &[&RdmaDevice], net: &Net, ctx: &Context) -> Derived {
    let mut d = Derived::default();
    let active: Vec<(&RdmaDevice, &crate::discover::Port)> = devices
        .iter()
        .flat_map(|dev| dev.ports.iter().filter(|p| p.state == 4).map(move |p| (*dev, p)))
        .collect();
    let down: Vec<String> = devices
        .iter()
        .flat_map(|dev| {
            dev.ports
                .iter()
                .filter(|p| p.state != 4)
                .map(move |p| format!("{}:{} ({})", dev.name, p.num, p.state_name))
        })
        .collect();
    if !down.is_empty() {
        d.notes.push(format!("port(s) not ACTIVE, left out of NCCL_IB_HCA: {}", down.join(", ")));
    }
    if active.is_empty() {
        d.notes.push("no ACTIVE port among the devices: NCCL_IB_HCA and NCCL_SOCKET_IFNAME are not set (NCCL would fall back to TCP sockets)".into());
    } else {
        let hca: Vec<String> =
            active.iter().map(|(dev, p)| format!("{}:{}", dev.name, p.num)).collect();
        d.vars.push(Var {
            name: "NCCL_IB_HCA",
            value: format!("={}", hca.join(",")),
            source: "the ACTIVE ports of the container's devices (exact match)".into(),
        });
        match socket_ifname(host, &active, net) {
            Ok(var) => d.vars.push(var),
            Err(note) => d.notes.push(note),
        }
        let gids: Vec<Option<u32>> = active.iter().map(|(_, p)| p.roce_v2_ipv4_gid).collect();
        match gids[0] {
            Some(g) if gids.iter().all(|x| *x == Some(g)) => {
                d.vars.push(Var { name: "NCCL_IB_GID_INDEX", value: g.to_string(), source: "the ports' IPv4-mapped RoCE v2 GID (gids/N, gid_attrs/types/N)".into() })
            }
            _ if gids.iter().all(Option::is_none) => d.notes.push("no IPv4-mapped RoCE v2 GID on the ports: NCCL_IB_GID_INDEX is not set (NCCL chooses)".into()),
            _ => {
                let seen: Vec<String> = active.iter().map(|(dev, p)| format!("{}:{} {}", dev.name, p.num, p.roce_v2_ipv4_gid.map_or("none".into(), |g| g.to_string()))).collect();
                let addrs: Option<Vec<std::net::Ipv4Addr>> = active.iter().map(|(_, p)| p.roce_v2_ipv4).collect();
                match addrs.as_deref().and_then(covering_prefix) {
                    Some(range) => {
                        let why = format!("the ports' RoCE v2 GID indexes differ ({}): each port's GID is chosen by its IPv4 address (NCCL 2.21+)", seen.join(", "));
                        d.vars.push(Var { name: "NCCL_IB_GID_INDEX", value: "-1".into(), source: why.clone() });
                        d.vars.push(Var { name: "NCCL_IB_ADDR_FAMILY", value: "AF_INET".into(), source: why });
                        d.vars.push(Var { name: "NCCL_IB_ADDR_RANGE", value: range, source: "the smallest IPv4 prefix holding the ports' own addresses (their IPv4-mapped GIDs)".into() });
                    }
                    None => d.notes.push(format!("the ports' RoCE v2 GID indexes differ ({}) and not every port has an IPv4 GID: NCCL_IB_GID_INDEX is not set, NCCL 2.21+ chooses per port", seen.join(", "))),
                }
            }
        }
    }
    gdr(&mut d, &active, ctx);
    if ctx.fail_closed {
        d.vars.push(Var { name: "NCCL_NET", value: "IB".into(), source: "fail closed: where eRDMA is unusable NCCL stops with its own error (\"Failed to initialize any NET plugin\") instead of running over TCP sockets (tcp_fallback = false)".into() });
    } else {
        d.notes.push("tcp_fallback = true: NCCL_NET is not set, and NCCL falls back to TCP sockets where eRDMA is unusable".into());
    }
    let mtus: Vec<u32> =
        devices.iter().flat_map(|dev| dev.ports.iter().filter_map(|p| p.mtu)).collect();
    if ll128_off(&mtus) {
        let (k, v) = NO_LL128;
        d.vars.push(Var {
            name: k,
            value: v.into(),
            source: format!(
                "MTU {mtus:?} is not {MTU_JUMBO}: LL128 is only safe with jumbo frames"
            ),
        });
    }
    d
}

/// [`derive()`] for a container whose GPUs are not known here (a CDI spec, `doctor`, a trial
/// container without GPUs): all of the host's count.
pub fn derive_for_any_gpus(
    host: &Host,
    devices: &[&RdmaDevice],
    net: &Net,
    config: &crate::config::Config,
) -> Derived {
    let topology = crate::topology::of_host(config, devices);
    derive(host, devices, net, &Context { topology: Some(&topology), ..Context::of(config) })
}

/// `NCCL_NET_GDR_LEVEL`, or why it is not set.
fn gdr(d: &mut Derived, active: &[(&RdmaDevice, &crate::discover::Port)], ctx: &Context) {
    let Some(t) = ctx.topology.filter(|t| !t.gpus.is_empty()) else { return };
    let all: Vec<usize> = t.gpus.iter().map(|g| g.index).collect();
    let gpus = ctx.gpus.unwrap_or(&all);
    if gpus.is_empty() {
        return;
    }
    let mut eris: Vec<&str> = active.iter().map(|(dev, _)| dev.name.as_str()).collect();
    eris.dedup();
    let Some(level) = t.gdr_level_needed(gpus, &eris) else {
        return;
    };
    let Some(gdr) = t.gdr.as_ref() else { return };
    if !gdr.possible {
        d.notes.push(format!(
            "GPU Direct RDMA cannot work on this host: {}; NCCL_NET_GDR_LEVEL is not set",
            gdr.why
        ));
    } else if level <= GDR_DEFAULT_LEVEL {
        d.notes.push(format!("GPU Direct RDMA: {}; the GPUs are at most {} from their ERIs, within NCCL's default ({})", gdr.why, level.name(), GDR_DEFAULT_LEVEL.name()));
    } else {
        d.vars.push(Var {
            name: "NCCL_NET_GDR_LEVEL",
            value: level.name().into(),
            source: format!("GPU Direct RDMA: {}; the container's GPUs are up to {} from their nearest ERI, beyond NCCL's default {} (NCCL would stage GPU buffers through host memory)", gdr.why, level.name(), GDR_DEFAULT_LEVEL.name()),
        });
    }
}

/// `NCCL_SOCKET_IFNAME` for a container whose network is `net`, or why it is left unset.
fn socket_ifname(
    host: &Host,
    active: &[(&RdmaDevice, &crate::discover::Port)],
    net: &Net,
) -> std::result::Result<Var, String> {
    let (names, source) = match net {
        Net::Host => {
            let mut ifs: Vec<&str> = Vec::new();
            for (_, p) in active {
                if let Some(n) = p.netdev.as_deref().filter(|n| host.netdevs.iter().any(|h| h == n))
                {
                    if !ifs.contains(&n) {
                        ifs.push(n);
                    }
                }
            }
            if ifs.is_empty() {
                return Err("no netdev of the host is behind the ACTIVE ports: NCCL_SOCKET_IFNAME is not set".into());
            }
            (ifs, "the netdevs behind those ports (gid_attrs/ndevs)".to_string())
        }
        Net::Own { path, ifaces } => {
            let ifs: Vec<&str> =
                ifaces.iter().filter(|i| i.usable()).map(|i| i.name.as_str()).collect();
            if ifs.is_empty() {
                return Err(format!("the container's network namespace ({}) has no interface up with a global address besides lo: NCCL_SOCKET_IFNAME is not set", path.display()));
            }
            (
                ifs,
                format!(
                    "the interfaces of the container's network namespace that are up with a global address (read from {})",
                    path.display()
                ),
            )
        }
        Net::Unread { why } => {
            return Err(format!("NCCL_SOCKET_IFNAME is not set: the container's network namespace cannot be read here ({why}); NCCL chooses among its interfaces itself (ib… first, then any but docker… and lo)"));
        }
    };
    Ok(Var { name: "NCCL_SOCKET_IFNAME", value: format!("={}", names.join(",")), source })
}

/// NCCL's interface and device list syntax (`src/misc/utils.cc`, `parseStringList`,
/// `matchIfList`): a leading `^` excludes, a leading `=` makes names exact (else prefixes),
/// entries are comma-separated `name[:port]`.
struct NcclList {
    exclude: bool,
    exact: bool,
    entries: Vec<(String, Option<u32>)>,
}

impl NcclList {
    fn parse(s: &str) -> NcclList {
        let mut s = s.trim();
        let exclude = s.starts_with('^');
        if exclude {
            s = &s[1..];
        }
        let exact = s.starts_with('=');
        if exact {
            s = &s[1..];
        }
        let entries = s
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| match e.split_once(':') {
                Some((n, p)) => (n.to_string(), p.parse().ok()),
                None => (e.to_string(), None),
            })
            .collect();
        NcclList { exclude, exact, entries }
    }

    /// Whether NCCL would use `name` (port `port`) under this list.
    fn selects(&self, name: &str, port: Option<u32>) -> bool {
        let hit = self.entries.iter().any(|(n, p)| {
            (if self.exact { name == n } else { name.starts_with(n.as_str()) })
                && (p.is_none() || port.is_none() || *p == port)
        });
        hit != self.exclude
    }
}

/// Whether a container's `NCCL_IB_HCA` selects at least one ACTIVE port of its devices.
pub fn hca_works(value: &str, devices: &[&RdmaDevice]) -> bool {
    let list = NcclList::parse(value);
    devices
        .iter()
        .any(|d| d.ports.iter().any(|p| p.state == 4 && list.selects(&d.name, Some(p.num))))
}

/// Whether a container's `NCCL_SOCKET_IFNAME` selects at least one of the interfaces `names`.
pub fn ifname_works(value: &str, names: &[&str]) -> bool {
    let list = NcclList::parse(value);
    names.iter().any(|n| list.selects(n, None))
}

/// Where a container's own `NCCL_IB_GID_INDEX` is not the first IPv4 RoCE v2 GID of each ACTIVE
/// port (as PAI-DLC's preset 1 is not where the indexes differ). Only a warning: a port with
/// several addresses has several such GIDs, and only the first is read. `-1` and anything
/// NCCL does not read as an index are left alone.
fn gid_index_mismatch(own: &str, devices: &[&RdmaDevice]) -> Option<String> {
    let index: u32 = own.trim().parse().ok()?;
    let wrong: Vec<String> = devices
        .iter()
        .flat_map(|d| d.ports.iter().filter(|p| p.state == 4).map(move |p| (d, p)))
        .filter(|(_, p)| p.roce_v2_ipv4_gid.is_some_and(|g| g != index))
        .map(|(d, p)| {
            format!("{}:{} has it at {}", d.name, p.num, p.roce_v2_ipv4_gid.unwrap_or_default())
        })
        .collect();
    (!wrong.is_empty()).then(|| format!("NCCL_IB_GID_INDEX={own} kept, but it is not every port's first IPv4 RoCE v2 GID ({}): unless that entry is one too, NCCL will not reach the peers through it; NCCL_IB_GID_INDEX=-1 lets NCCL 2.21+ choose by address", wrong.join(", ")))
}

/// A change to a container's environment.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Change {
    pub name: String,
    pub value: String,
    /// The container's own value this replaces (`repair` or `replace`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced: Option<String>,
}

/// What to do to an environment: variables to set, and why some of the container's own values
/// were replaced.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Plan {
    pub set: Vec<Change>,
    pub warnings: Vec<String>,
}

/// Merges the derived settings (and, with `presets`, [`PRESETS`]) into an environment whose
/// values `get` reads. The container's own values win, except under `repair` one that cannot
/// work for it (an `NCCL_IB_HCA` selecting none of its ACTIVE ports, an `NCCL_SOCKET_IFNAME`
/// naming no interface of its network, `net`), and under `replace` every derived one.
pub fn plan(
    get: &dyn Fn(&str) -> Option<String>,
    derived: &Derived,
    host: &Host,
    net: &Net,
    devices: &[&RdmaDevice],
    policy: EnvPolicy,
    presets: bool,
) -> Plan {
    let mut out = Plan::default();
    if presets {
        for (k, v) in PRESETS {
            if get(k).is_none() {
                out.set.push(Change { name: k.to_string(), value: v.to_string(), replaced: None });
            }
        }
    }
    if let Some(w) = get("NCCL_IB_GID_INDEX").and_then(|own| gid_index_mismatch(&own, devices)) {
        out.warnings.push(w);
    }
    for var in &derived.vars {
        let own = get(var.name);
        let Some(own) = own else {
            out.set.push(Change {
                name: var.name.into(),
                value: var.value.clone(),
                replaced: None,
            });
            continue;
        };
        let broken = match var.name {
            "NCCL_IB_HCA" => (!hca_works(&own, devices)).then(|| {
                format!(
                    "selects none of the container's ACTIVE ports ({})",
                    var.value.trim_start_matches('=')
                )
            }),
            "NCCL_SOCKET_IFNAME" => net.names(&host.netdevs).and_then(|names| {
                (!ifname_works(&own, &names)).then(|| {
                    let whose = match net {
                        Net::Host => "this host",
                        _ => "the container's network namespace",
                    };
                    format!("names no interface of {whose} ({})", names.join(", "))
                })
            }),
            _ => None,
        };
        let replace = match policy {
            EnvPolicy::Keep => false,
            EnvPolicy::Replace => own != var.value,
            EnvPolicy::Repair => broken.is_some(),
        };
        if replace {
            let why = broken
                .map(|b| format!(": it {b}"))
                .unwrap_or_else(|| " (env_policy = \"replace\")".into());
            out.warnings
                .push(format!("{}={own} replaced by {}={}{why}", var.name, var.name, var.value));
            out.set.push(Change {
                name: var.name.into(),
                value: var.value.clone(),
                replaced: Some(own),
            });
        } else if let Some(b) = broken {
            out.warnings.push(format!(
                "{}={own} {b}: kept (env_policy = \"keep\"); NCCL will not use eRDMA",
                var.name
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::{CharDev, Port};

    fn port(num: u32, up: bool, netdev: &str, mtu: u32, gid: Option<u32>) -> Port {
        Port {
            num,
            state: if up { 4 } else { 1 },
            state_name: if up { "ACTIVE".into() } else { "DOWN".into() },
            link_layer: Some("Ethernet".into()),
            netdev: Some(netdev.into()),
            mtu: Some(mtu),
            roce_v2_ipv4_gid: gid,
            roce_v2_ipv4: None,
        }
    }

    fn dev(name: &str, ports: Vec<Port>) -> RdmaDevice {
        RdmaDevice {
            name: name.into(),
            driver: Some("erdma".into()),
            ports,
            uverbs: Some(CharDev {
                path: "/dev/infiniband/uverbs0".into(),
                host_path: "/dev/infiniband/uverbs0".into(),
                major: 231,
                minor: 192,
            }),
            problem: None,
        }
    }

    fn host(devices: Vec<RdmaDevice>, netdevs: &[&str]) -> Host {
        Host {
            devices,
            others: vec![],
            rdma_cm: None,
            netdevs: netdevs.iter().map(|s| s.to_string()).collect(),
            rdma_netns: crate::netns::RdmaNetns::Shared,
        }
    }

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn seed_002_host_rocep_names_one_port_down_predictable_interfaces() {
        // A real ACK node: rocep26s0 ACTIVE on ens5, rocep156s0 DOWN; no eth0.
        let h = host(
            vec![
                dev("rocep156s0", vec![port(1, false, "ens6", 8500, Some(1))]),
                dev("rocep26s0", vec![port(1, true, "ens5", 8500, Some(1))]),
            ],
            &["ens5", "ens6", "lo"],
        );
        let all: Vec<&RdmaDevice> = h.devices.iter().collect();
        let d = derive(&h, &all, &Net::Host, &Context::default());
        assert_eq!(d.get("NCCL_IB_HCA"), Some("=rocep26s0:1"));
        assert_eq!(d.get("NCCL_SOCKET_IFNAME"), Some("=ens5"));
        assert_eq!(d.get("NCCL_IB_GID_INDEX"), Some("1"));
        assert_eq!(d.get("NCCL_PROTO"), None);
        assert!(d.notes.iter().any(|n| n.contains("rocep156s0:1 (DOWN)")), "{:?}", d.notes);
        // An image that baked PAI's values: both replaced under repair, with warnings.
        let p = plan(
            &env(&[
                ("NCCL_IB_HCA", "erdma"),
                ("NCCL_SOCKET_IFNAME", "eth0"),
                ("NCCL_DEBUG", "WARN"),
            ]),
            &d,
            &h,
            &Net::Host,
            &all,
            EnvPolicy::Repair,
            true,
        );
        let set: Vec<String> = p.set.iter().map(|c| format!("{}={}", c.name, c.value)).collect();
        assert!(
            set.contains(&"NCCL_IB_HCA==rocep26s0:1".to_string())
                && set.contains(&"NCCL_SOCKET_IFNAME==ens5".to_string()),
            "{set:?}"
        );
        assert!(
            !set.iter().any(|s| s.starts_with("NCCL_DEBUG=")),
            "the container's NCCL_DEBUG wins: {set:?}"
        );
        assert_eq!(p.warnings.len(), 2, "{:?}", p.warnings);
        assert!(
            p.warnings[1].contains("names no interface of this host (ens5, ens6, lo)"),
            "{:?}",
            p.warnings
        );
        // keep: nothing of the container's is touched, but the breakage is still said.
        let p = plan(
            &env(&[("NCCL_IB_HCA", "erdma"), ("NCCL_SOCKET_IFNAME", "eth0")]),
            &d,
            &h,
            &Net::Host,
            &all,
            EnvPolicy::Keep,
            true,
        );
        assert!(p.set.iter().all(|c| c.replaced.is_none()) && p.warnings.len() == 2, "{p:?}");
        // Values that work are kept under repair: a prefix that matches, an exclusion.
        let p = plan(
            &env(&[("NCCL_IB_HCA", "rocep"), ("NCCL_SOCKET_IFNAME", "^docker,lo")]),
            &d,
            &h,
            &Net::Host,
            &all,
            EnvPolicy::Repair,
            false,
        );
        assert!(p.set.iter().all(|c| c.replaced.is_none()) && p.warnings.is_empty(), "{p:?}");
        // replace: every derived value wins.
        let p = plan(
            &env(&[("NCCL_IB_HCA", "rocep"), ("NCCL_IB_GID_INDEX", "3")]),
            &d,
            &h,
            &Net::Host,
            &all,
            EnvPolicy::Replace,
            false,
        );
        assert_eq!(p.set.iter().filter(|c| c.replaced.is_some()).count(), 2, "{p:?}");
    }

    #[test]
    fn exact_names_keep_erdma_1_from_matching_erdma_10() {
        let devs: Vec<RdmaDevice> = (0..11)
            .map(|i| {
                dev(&format!("erdma_{i}"), vec![port(1, true, &format!("eth{i}"), 8500, Some(1))])
            })
            .collect();
        let h = host(devs, &["eth0", "eth1", "eth10"]);
        let given = vec![&h.devices[1]];
        assert_eq!(
            derive(&h, &given, &Net::Host, &Context::default()).get("NCCL_IB_HCA"),
            Some("=erdma_1:1")
        );
        let list = NcclList::parse("=erdma_1:1");
        assert!(
            list.selects("erdma_1", Some(1))
                && !list.selects("erdma_10", Some(1))
                && !list.selects("erdma_1", Some(2))
        );
        // Without `=`, NCCL takes a prefix: `erdma_1` matches erdma_10 too.
        assert!(NcclList::parse("erdma_1").selects("erdma_10", Some(1)));
    }

    #[test]
    fn gid_indexes_that_differ_or_are_missing_leave_nccl_to_choose() {
        // Alibaba's benchmark notes: two devices of one node at RoCE v2 indexes 2 and 1.
        let h = host(
            vec![
                dev("erdma_0", vec![port(1, true, "eth0", 8500, Some(2))]),
                dev("erdma_1", vec![port(1, true, "eth1", 1400, Some(1))]),
            ],
            &["eth0", "eth1"],
        );
        let all: Vec<&RdmaDevice> = h.devices.iter().collect();
        let d = derive(&h, &all, &Net::Host, &Context::default());
        assert_eq!(d.get("NCCL_IB_GID_INDEX"), None);
        assert!(
            d.notes.iter().any(|n| n.contains("differ (erdma_0:1 2, erdma_1:1 1)")),
            "{:?}",
            d.notes
        );
        assert_eq!(d.get("NCCL_SOCKET_IFNAME"), Some("=eth0,eth1"));
        assert_eq!(d.get("NCCL_PROTO"), Some("^LL128"));
        // A container's own GID index is kept under repair: it may be right.
        let p = plan(
            &env(&[("NCCL_IB_GID_INDEX", "3")]),
            &d,
            &h,
            &Net::Host,
            &all,
            EnvPolicy::Repair,
            false,
        );
        assert!(!p.set.iter().any(|c| c.name == "NCCL_IB_GID_INDEX"), "{p:?}");
        let h = host(vec![dev("erdma_0", vec![port(1, true, "eth0", 8500, None)])], &["eth0"]);
        assert_eq!(
            derive(&h, &h.devices.iter().collect::<Vec<_>>(), &Net::Host, &Context::default())
                .get("NCCL_IB_GID_INDEX"),
            None
        );
    }

    #[test]
    fn no_active_port_sets_no_device_or_interface() {
        let h = host(vec![dev("erdma_0", vec![port(1, false, "eth0", 8500, Some(1))])], &["eth0"]);
        let d = derive(&h, &h.devices.iter().collect::<Vec<_>>(), &Net::Host, &Context::default());
        assert_eq!(
            (d.get("NCCL_IB_HCA"), d.get("NCCL_SOCKET_IFNAME"), d.get("NCCL_IB_GID_INDEX")),
            (None, None, None)
        );
        assert!(d.notes.iter().any(|n| n.contains("no ACTIVE port")), "{:?}", d.notes);
        // A netdev the host does not list (a stale link) is never named.
        let h = host(vec![dev("erdma_0", vec![port(1, true, "eth9", 8500, None)])], &["ens5"]);
        assert_eq!(
            derive(&h, &h.devices.iter().collect::<Vec<_>>(), &Net::Host, &Context::default())
                .get("NCCL_SOCKET_IFNAME"),
            None
        );
    }

    fn iface(name: &str, index: u32, up: bool, addr: Option<&str>) -> crate::netns::Iface {
        crate::netns::Iface {
            name: name.into(),
            index,
            up,
            loopback: name == "lo",
            addrs: addr.map(|a| a.parse().unwrap()).into_iter().collect(),
        }
    }

    /// A pod on the cluster network: NCCL bootstraps over its eth0, never over the host's
    /// ens5, which its namespace does not have; the HCA list and the GID stay as derived.
    #[test]
    fn a_container_on_its_own_network_gets_its_own_interfaces() {
        let h =
            host(vec![dev("erdma_0", vec![port(1, true, "ens5", 8500, Some(1))])], &["ens5", "lo"]);
        let all: Vec<&RdmaDevice> = h.devices.iter().collect();
        let own = Net::Own {
            path: "/var/run/netns/cni-1".into(),
            ifaces: vec![
                iface("lo", 1, true, Some("127.0.0.1")),
                iface("eth0", 3, true, Some("172.20.1.7")),
                iface("net1", 4, false, Some("192.168.7.2")),
                iface("eth1", 5, true, None),
            ],
        };
        let d = derive(&h, &all, &own, &Context::default());
        assert_eq!(d.get("NCCL_SOCKET_IFNAME"), Some("=eth0"));
        assert_eq!(d.get("NCCL_IB_HCA"), Some("=erdma_0:1"));
        assert_eq!(d.get("NCCL_IB_GID_INDEX"), Some("1"));
        // An image that baked the host's name is repaired to the pod's; one naming the pod's
        // interface by prefix is kept.
        let p = plan(
            &env(&[("NCCL_SOCKET_IFNAME", "ens5")]),
            &d,
            &h,
            &own,
            &all,
            EnvPolicy::Repair,
            false,
        );
        let replaced: Vec<_> = p
            .set
            .iter()
            .filter(|c| c.replaced.is_some())
            .map(|c| (c.name.as_str(), c.value.as_str(), c.replaced.as_deref()))
            .collect();
        assert_eq!(replaced, [("NCCL_SOCKET_IFNAME", "=eth0", Some("ens5"))]);
        assert!(
            p.warnings[0].contains(
                "names no interface of the container's network namespace (lo, eth0, net1, eth1)"
            ),
            "{:?}",
            p.warnings
        );
        let p = plan(
            &env(&[("NCCL_SOCKET_IFNAME", "eth")]),
            &d,
            &h,
            &own,
            &all,
            EnvPolicy::Repair,
            false,
        );
        assert!(p.set.iter().all(|c| c.replaced.is_none()) && p.warnings.is_empty(), "{p:?}");
        // Only lo and interfaces without an address: nothing to name.
        let bare = Net::Own {
            path: "/proc/7/ns/net".into(),
            ifaces: vec![iface("lo", 1, true, Some("127.0.0.1")), iface("eth1", 5, true, None)],
        };
        let d = derive(&h, &all, &bare, &Context::default());
        assert_eq!(d.get("NCCL_SOCKET_IFNAME"), None);
        assert!(
            d.notes.iter().any(|n| n.contains("/proc/7/ns/net") && n.contains("no interface up")),
            "{:?}",
            d.notes
        );
    }

    /// A namespace that cannot be read: unset, and the container's own value is not judged.
    #[test]
    fn an_unread_namespace_leaves_the_interface_to_nccl() {
        let h =
            host(vec![dev("erdma_0", vec![port(1, true, "ens5", 8500, Some(1))])], &["ens5", "lo"]);
        let all: Vec<&RdmaDevice> = h.devices.iter().collect();
        let net = Net::Unread { why: "Docker sets it up after create".into() };
        let d = derive(&h, &all, &net, &Context::default());
        assert_eq!(d.get("NCCL_SOCKET_IFNAME"), None);
        assert_eq!(d.get("NCCL_IB_HCA"), Some("=erdma_0:1"));
        assert!(d.notes.iter().any(|n| n.contains("Docker sets it up after create") && n.contains("NCCL chooses")), "{:?}", d.notes);
        let p = plan(
            &env(&[("NCCL_SOCKET_IFNAME", "ens9")]),
            &d,
            &h,
            &net,
            &all,
            EnvPolicy::Repair,
            false,
        );
        assert!(
            p.warnings.is_empty() && !p.set.iter().any(|c| c.name == "NCCL_SOCKET_IFNAME"),
            "{p:?}"
        );
    }
}
