//! eRDMA traffic counters as the kernel exposes them: each port's `hw_counters` directory under
//! `/sys/class/infiniband/<dev>/ports/<n>/`, one decimal `u64` per file, refreshed from the
//! device when read (the RDMA core's `hw_stat_port_show`, drivers/infiniband/core/sysfs.c; the
//! erdma driver asks its firmware with a `GET_STATS` command, at most every `lifespan` ms).
//!
//! The erdma driver names them two ways (testdata/sysfs/README.md says where each name comes
//! from): upstream Linux since 6.8 (`drivers/infiniband/hw/erdma/erdma_verbs.c`,
//! `erdma_descs`: `tx_bytes_cnt`, `rx_packets_cnt`, …), and Alibaba's out-of-tree driver, the
//! one ECS images install (`erdma_stats.c`: `hw_tx_bytes_cnt`, …, with 44 software counters
//! beside them). [`Counter`] reads either. There is no standard `counters/` directory
//! (`port_xmit_data` and the like): the RDMA core creates it only for devices with
//! `process_mad`, which erdma has not.
use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::discover::Host;
use crate::sysfs::read_trim;

/// The traffic counters erdma keeps per port, by meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Counter {
    TxRequests,
    TxPackets,
    TxBytes,
    /// Sent packets dropped because the ERI was disabled.
    TxDisableDrops,
    /// Dropped by the ERI's bandwidth limit.
    TxBpsLimitDrops,
    /// Dropped by its packet-rate limit.
    TxPpsLimitDrops,
    RxPackets,
    RxBytes,
    RxDisableDrops,
    RxBpsLimitDrops,
    RxPpsLimitDrops,
}

impl Counter {
    pub const ALL: [Counter; 11] = [
        Counter::TxRequests,
        Counter::TxPackets,
        Counter::TxBytes,
        Counter::TxDisableDrops,
        Counter::TxBpsLimitDrops,
        Counter::TxPpsLimitDrops,
        Counter::RxPackets,
        Counter::RxBytes,
        Counter::RxDisableDrops,
        Counter::RxBpsLimitDrops,
        Counter::RxPpsLimitDrops,
    ];

    /// The file names: upstream's (`erdma_descs`), then the out-of-tree driver's
    /// (`erdma_hw_stat_descs`, whose three transmit drop counters carry no `tx_`).
    pub fn names(self) -> [&'static str; 2] {
        match self {
            Counter::TxRequests => ["tx_reqs_cnt", "hw_tx_reqs_cnt"],
            Counter::TxPackets => ["tx_packets_cnt", "hw_tx_packets_cnt"],
            Counter::TxBytes => ["tx_bytes_cnt", "hw_tx_bytes_cnt"],
            Counter::TxDisableDrops => ["tx_disable_drop_cnt", "hw_disable_drop_cnt"],
            Counter::TxBpsLimitDrops => ["tx_bps_limit_drop_cnt", "hw_bps_limit_drop_cnt"],
            Counter::TxPpsLimitDrops => ["tx_pps_limit_drop_cnt", "hw_pps_limit_drop_cnt"],
            Counter::RxPackets => ["rx_packets_cnt", "hw_rx_packets_cnt"],
            Counter::RxBytes => ["rx_bytes_cnt", "hw_rx_bytes_cnt"],
            Counter::RxDisableDrops => ["rx_disable_drop_cnt", "hw_rx_disable_drop_cnt"],
            Counter::RxBpsLimitDrops => ["rx_bps_limit_drop_cnt", "hw_rx_bps_limit_drop_cnt"],
            Counter::RxPpsLimitDrops => ["rx_pps_limit_drop_cnt", "hw_rx_pps_limit_drop_cnt"],
        }
    }

    /// The counters whose sum is the packets dropped in one direction.
    pub const TX_DROPS: [Counter; 3] =
        [Counter::TxDisableDrops, Counter::TxBpsLimitDrops, Counter::TxPpsLimitDrops];
    pub const RX_DROPS: [Counter; 3] =
        [Counter::RxDisableDrops, Counter::RxBpsLimitDrops, Counter::RxPpsLimitDrops];
}

/// One port of an ERI, read once: where it is, its state, and every `hw_counters` file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortSample {
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    /// `4` is PORT_ACTIVE.
    pub state: u32,
    pub state_name: String,
    /// `5: LinkUp`, `3: Disabled`.
    pub phys_state: Option<String>,
    pub mtu: Option<u32>,
    /// Every counter file that read as a number, by file name (the driver's software counters
    /// too, on the out-of-tree driver).
    pub counters: BTreeMap<String, u64>,
    /// Counter files that could not be read or held no number: left out of `counters`, never
    /// taken as 0.
    pub unreadable: Vec<String>,
}

impl PortSample {
    /// A counter by meaning, under whichever name the driver gives it.
    pub fn get(&self, c: Counter) -> Option<u64> {
        c.names().iter().find_map(|n| self.counters.get(*n).copied())
    }

    /// The sum of `counters`, where every one of them read.
    pub fn sum(&self, counters: &[Counter]) -> Option<u64> {
        counters.iter().try_fold(0u64, |acc, c| Some(acc.wrapping_add(self.get(*c)?)))
    }
}

/// Most counter files read from one port: the out-of-tree driver has 55, and `lifespan`.
const MAX_COUNTERS: usize = 256;

/// Reads every port of the host's devices (`only`: these names; empty: all), as sysfs under
/// `sysfs` has them now. A device whose directory is gone is left out.
pub fn sample(sysfs: &Path, host: &Host, only: &[String]) -> Vec<PortSample> {
    let mut out = Vec::new();
    for d in host.devices.iter().filter(|d| only.is_empty() || only.contains(&d.name)) {
        for p in &d.ports {
            let dir =
                sysfs.join("class/infiniband").join(&d.name).join("ports").join(p.num.to_string());
            let (counters, unreadable) = read_counters(&dir.join("hw_counters"));
            out.push(PortSample {
                device: d.name.clone(),
                port: p.num,
                netdev: p.netdev.clone(),
                state: p.state,
                state_name: p.state_name.clone(),
                phys_state: read_trim(&dir.join("phys_state")),
                mtu: p.mtu,
                counters,
                unreadable,
            });
        }
    }
    out
}

/// The numbers in a `hw_counters` directory (`lifespan`, a setting, left out), and the names
/// of the files that did not read as one.
fn read_counters(dir: &Path) -> (BTreeMap<String, u64>, Vec<String>) {
    let mut counters = BTreeMap::new();
    let mut unreadable = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return (counters, unreadable) };
    for e in entries.flatten().take(MAX_COUNTERS) {
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "lifespan" {
            continue;
        }
        match read_trim(&e.path()).and_then(|v| v.parse::<u64>().ok()) {
            Some(v) => {
                counters.insert(name, v);
            }
            None => unreadable.push(name),
        }
    }
    unreadable.sort();
    (counters, unreadable)
}
