//! Where GPUs sit beside the eRDMA devices: the PCIe path between each GPU and each ERI,
//! classified as NCCL classifies it, whether GPU Direct RDMA can work on this host, and which
//! ERI each GPU goes with.
//!
//! NCCL's rules, NCCL 2.28 (`src/graph/`):
//! - **The tree** (`xml.cc`, `ncclTopoGetXmlFromSys`): from a device's sysfs path NCCL goes up
//!   *two* path components at a time, so a PCIe switch is one node (its upstream port; the
//!   downstream port and a root port are passed over) and a device whose parent two levels up
//!   is not a bus id (`pci0000:00`) hangs from a CPU node. That CPU node is named by the
//!   `numa_node` of the top-most PCI node of the chain.
//! - **The path types** (`topo.h`, `paths.cc`, `ncclTopoSetPaths`): a path over PCI links is
//!   `PIX`; once it runs from one PCI switch to another, `PXB`; through a CPU, `PHB`; from one
//!   CPU to another, `SYS`. The type of a path is the largest of its links'.
//! - **GPU Direct RDMA** (`paths.cc`, `ncclTopoCheckGdr`): used for a GPU and a NIC when the NIC
//!   supports GPU memory (`nvidia_peermem`, or dma-buf) and their path type is at most
//!   `NCCL_NET_GDR_LEVEL`, `PXB` by default.
//! - **A GPU's NICs** (`topo.cc`, `ncclTopoGetLocal`): those of the lowest path type (at equal
//!   bandwidth). Where several are equally near, NCCL spreads over them by itself: channels
//!   start on alternate NICs (`search.cc`, `ncclTopoSearchRecNet`) and point-to-point picks by
//!   the GPU's NVML index (`ncclTopoGetLocalNet`). Measured with NCCL 2.28.9
//!   (`bench/nccl_topology.sh`, docs/benchmarks.md): with two equally near NICs every channel
//!   alternates between them without any topology file, and the files that move a NIC beside
//!   some GPUs either lose the placement (a `<nic>` straight under a `<cpu>`) or leave the far
//!   NIC idle. So erdma-kit gives a container the ERIs nearest its GPUs and no topology file.
//!
//! Not modelled: NVLink (`NVL`, `NVB`, `PXN`: NCCL reads it from NVML, which a hook does not
//! load), Grace's C2C (`C2C`, `P2C`) and the merging of Broadcom Gen4 switches
//! (`ncclTopoFlattenBcmSwitches`). Each only lowers a path's type, so the level derived here is
//! never too low for a pair NCCL would otherwise refuse GDR on.
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::request::env_get;
use crate::sysfs::read_trim;

/// NCCL's path types (`src/graph/topo.h`, `PATH_*`), in its order: the number is NCCL's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum PathType {
    Loc = 0,
    Nvl = 1,
    Nvb = 2,
    C2c = 3,
    Pix = 4,
    Pxb = 5,
    P2c = 6,
    Pxn = 7,
    Phb = 8,
    Sys = 9,
}

impl PathType {
    /// The name NCCL prints and `NCCL_NET_GDR_LEVEL` takes (`topoPathTypeStr`).
    pub fn name(self) -> &'static str {
        match self {
            PathType::Loc => "LOC",
            PathType::Nvl => "NVL",
            PathType::Nvb => "NVB",
            PathType::C2c => "C2C",
            PathType::Pix => "PIX",
            PathType::Pxb => "PXB",
            PathType::P2c => "P2C",
            PathType::Pxn => "PXN",
            PathType::Phb => "PHB",
            PathType::Sys => "SYS",
        }
    }

    pub fn from_name(s: &str) -> Option<PathType> {
        ALL_TYPES.iter().copied().find(|t| t.name() == s)
    }
}

const ALL_TYPES: [PathType; 10] = [
    PathType::Loc,
    PathType::Nvl,
    PathType::Nvb,
    PathType::C2c,
    PathType::Pix,
    PathType::Pxb,
    PathType::P2c,
    PathType::Pxn,
    PathType::Phb,
    PathType::Sys,
];

/// NCCL's default `NCCL_NET_GDR_LEVEL` (`ncclTopoCheckGdr`: `PATH_PXB`).
pub const GDR_DEFAULT_LEVEL: PathType = PathType::Pxb;

/// Where a PCI function sits in NCCL's tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PciPlace {
    /// Its bus id (`0000:3b:00.0`).
    pub bus_id: String,
    /// The NCCL CPU node it hangs from: the `numa_node` of the top-most PCI node NCCL makes for
    /// it (`-1` where the platform gives none, as NCCL keeps it).
    pub cpu: String,
    /// The PCI switches NCCL puts between it and that CPU, top first (their bus ids).
    pub switches: Vec<String>,
}

/// The bus ids along a sysfs device path (`devices/pci0000:00/0000:00:01.0/0000:01:00.0/…`),
/// top first, up to the last one: the chain NCCL walks.
fn bus_ids_of(path: &str) -> Option<Vec<&str>> {
    let after = path.split("devices/").nth(1)?;
    let mut parts = after.split('/');
    let root = parts.next()?;
    if !root.starts_with("pci") {
        return None;
    }
    let chain: Vec<&str> = parts.take_while(|p| is_bus_id(p)).collect();
    (!chain.is_empty()).then_some(chain)
}

/// `DDDD:BB:DD.F`, hex digits (NCCL's `checkBDFFormat`).
pub fn is_bus_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter().enumerate().all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// The place of the PCI function whose sysfs path (relative to `sysfs`, as a link in
/// `class/…` or `bus/pci/devices` names it) is `link_target`.
fn place(sysfs: &Path, link_target: &str) -> Option<PciPlace> {
    let chain = bus_ids_of(link_target)?;
    let root = link_target.split("devices/").nth(1)?.split('/').next()?;
    // NCCL's nodes: the device, then every second bus id above it.
    let mut nodes: Vec<usize> = Vec::new();
    let mut i = chain.len() as isize - 1;
    while i >= 0 {
        nodes.push(i as usize);
        i -= 2;
    }
    let top = *nodes.last()?;
    let top_dir: PathBuf = [sysfs, Path::new("devices"), Path::new(root)]
        .iter()
        .collect::<PathBuf>()
        .join(chain[..=top].iter().collect::<PathBuf>());
    let cpu = read_trim(&top_dir.join("numa_node")).unwrap_or_else(|| "-1".into());
    let switches = nodes[1..].iter().rev().map(|&i| chain[i].to_string()).collect();
    Some(PciPlace { bus_id: chain.last()?.to_string(), cpu, switches })
}

/// The path type between two PCI functions (`ncclTopoSetPaths`' rules over NCCL's tree).
pub fn path_type(a: &PciPlace, b: &PciPlace) -> PathType {
    if a.bus_id == b.bus_id {
        return PathType::Loc;
    }
    if a.cpu != b.cpu {
        return PathType::Sys;
    }
    let common = a.switches.iter().zip(&b.switches).take_while(|(x, y)| x == y).count();
    if common == 0 {
        // Up to the CPU and down again.
        return PathType::Phb;
    }
    if a.switches.len() == common && b.switches.len() == common {
        // Both under the one switch.
        PathType::Pix
    } else {
        // From one switch to another on the way.
        PathType::Pxb
    }
}

/// A GPU of this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gpu {
    /// NVML's index (`NVIDIA_VISIBLE_DEVICES=0`): the GPUs in PCI bus id order.
    pub index: usize,
    pub place: PciPlace,
    /// `Device Minor` in `/proc/driver/nvidia/gpus/BUS/information`: `/dev/nvidiaN`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub minor: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

/// A GPU's ERIs: the nearest, as NCCL takes them (`topo.cc`, `ncclTopoGetLocal`: the lowest
/// path type; several when they are equally near, and NCCL then spreads its channels over them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pair {
    pub gpu: usize,
    pub gpu_bus_id: String,
    pub eris: Vec<String>,
    pub path: PathType,
}

/// Whether GPU Direct RDMA can work on this host, and by which means.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gdr {
    pub possible: bool,
    /// What NCCL will find (`nvidia_peermem` loaded, …) or what is missing.
    pub why: String,
}

/// The GPUs and ERIs of this host, where they sit, and how they pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Topology {
    pub gpus: Vec<Gpu>,
    /// The ERIs' places, by device name; an ERI whose PCI function cannot be placed is absent.
    pub eris: Vec<(String, PciPlace)>,
    pub pairs: Vec<Pair>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gdr: Option<Gdr>,
}

/// The paths NCCL reads to find the NVIDIA peer-memory client (`net_ib.cc`, `ncclIbGdrSupport`):
/// MLNX_OFED's `nv_peer_mem`, its non-coherent variant, the driver's `nvidia_peermem`.
pub const PEERMEM_FILES: [&str; 3] = [
    "kernel/mm/memory_peers/nv_mem/version",
    "kernel/mm/memory_peers/nv_mem_nc/version",
    "module/nvidia_peermem/version",
];

/// The NVIDIA GPUs: the PCI functions bound to the `nvidia` driver, and those
/// `/proc/driver/nvidia/gpus` lists (the driver's own view, where `proc` has it).
fn gpu_bus_ids(sysfs: &Path, proc_root: &Path) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for dir in [sysfs.join("bus/pci/drivers/nvidia"), proc_root.join("driver/nvidia/gpus")] {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let n = e.file_name().to_string_lossy().to_ascii_lowercase();
                if is_bus_id(&n) && !ids.contains(&n) {
                    ids.push(n);
                }
            }
        }
    }
    ids.sort();
    ids
}

/// `Device Minor` and `GPU UUID` from the driver's `information` file (a page at most, as a
/// sysfs attribute).
fn gpu_information(proc_root: &Path, bus_id: &str) -> (Option<u32>, Option<String>) {
    let Some(text) =
        read_trim(&proc_root.join("driver/nvidia/gpus").join(bus_id).join("information"))
    else {
        return (None, None);
    };
    let field = |k: &str| {
        text.lines().find_map(|l| {
            l.strip_prefix(k)?.trim_start().strip_prefix(':').map(|v| v.trim().to_string())
        })
    };
    (field("Device Minor").and_then(|m| m.parse().ok()), field("GPU UUID"))
}

/// The place of network interface `name`'s PCI function (`class/net/NAME`), as NCCL's socket
/// transport reports it; `None` for an interface that is not on PCI (`lo`, a veth).
pub fn place_netdev(sysfs: &Path, name: &str) -> Option<PciPlace> {
    let t = std::fs::read_link(sysfs.join("class/net").join(name)).ok()?;
    place(sysfs, &t.to_string_lossy())
}

/// [`read`] with the config's roots, for `devices`.
pub fn of_host(
    config: &crate::config::Config,
    devices: &[&crate::discover::RdmaDevice],
) -> Topology {
    let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
    read(&config.sysfs_root, &config.proc_root, &names)
}

/// Reads the host's topology for the ERIs named `eris`, with GPU Direct RDMA's state. The
/// driver's `information` files (minor, UUID) are read only where asked: [`Topology::with_driver_info`],
/// and by [`container_gpus`] for a spec that names GPUs by node or UUID.
pub fn read(sysfs: &Path, proc_root: &Path, eris: &[&str]) -> Topology {
    let mut gpus = Vec::new();
    for (index, bus_id) in gpu_bus_ids(sysfs, proc_root).into_iter().enumerate() {
        let link = sysfs.join("bus/pci/devices").join(&bus_id);
        let Some(place) =
            std::fs::read_link(&link).ok().and_then(|t| place(sysfs, &t.to_string_lossy()))
        else {
            continue;
        };
        gpus.push(Gpu { index, place, minor: None, uuid: None });
    }
    if gpus.is_empty() {
        // No GPU: nothing to place the ERIs beside, and no GPU Direct RDMA to decide.
        return Topology::default();
    }
    let eris: Vec<(String, PciPlace)> = eris
        .iter()
        .filter_map(|name| {
            let t = std::fs::read_link(sysfs.join("class/infiniband").join(name)).ok()?;
            Some((name.to_string(), place(sysfs, &t.to_string_lossy())?))
        })
        .collect();
    let gdr = Some(gdr(sysfs, proc_root));
    let mut t = Topology { gpus, eris, pairs: Vec::new(), gdr };
    t.pairs = pair(&t.gpus, &t.eris);
    t
}

/// Whether NCCL's IB transport will find GPU memory registration: a peer-memory client
/// (`PEERMEM_FILES`), or dma-buf.
pub fn gdr(sysfs: &Path, proc_root: &Path) -> Gdr {
    if let Some(f) = PEERMEM_FILES.iter().find(|f| sysfs.join(f).exists()) {
        let name = f.split('/').rev().nth(1).unwrap_or(f);
        return Gdr {
            possible: true,
            why: format!("{name} is loaded ({})", sysfs.join(f).display()),
        };
    }
    let _ = proc_root;
    Gdr {
        possible: false,
        why: "no NVIDIA peer-memory module is loaded (nvidia_peermem): NCCL stages GPU buffers through host memory".into(),
    }
}

/// Each GPU with its nearest ERIs.
pub fn pair(gpus: &[Gpu], eris: &[(String, PciPlace)]) -> Vec<Pair> {
    let mut out = Vec::new();
    for g in gpus {
        let dist: Vec<PathType> = eris.iter().map(|(_, p)| path_type(&g.place, p)).collect();
        let Some(best) = dist.iter().min().copied() else { continue };
        out.push(Pair {
            gpu: g.index,
            gpu_bus_id: g.place.bus_id.clone(),
            eris: eris
                .iter()
                .zip(&dist)
                .filter(|(_, d)| **d == best)
                .map(|((n, _), _)| n.clone())
                .collect(),
            path: best,
        });
    }
    out
}

/// The GPUs a container is given, as far as its spec tells.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum GpuSet {
    /// Nothing in the spec says (no NVIDIA device node, no `NVIDIA_VISIBLE_DEVICES`).
    Unknown,
    /// These GPUs (indexes into [`Topology::gpus`]), and where that was read.
    Given { gpus: Vec<usize>, from: String },
}

/// The GPUs `spec` gives its container: the `/dev/nvidiaN` nodes in `linux.devices` (CDI and
/// the NVIDIA runtime in CDI mode put them there), else `NVIDIA_VISIBLE_DEVICES` (the NVIDIA
/// container runtime's and the GPU device plugin's variable: `all`, `none`, `void`, or indexes,
/// UUIDs and MIG devices `GPU:MIG` separated by commas).
pub fn container_gpus(spec: &Value, topo: &Topology, proc_root: &Path) -> GpuSet {
    // Minor and UUID: from the topology where read, else from the driver, once per GPU however
    // long the container's list is.
    let infos = std::cell::OnceCell::new();
    let info = |g: &Gpu| {
        let all: &Vec<(Option<u32>, Option<String>)> = infos.get_or_init(|| {
            topo.gpus
                .iter()
                .map(|g| match (g.minor, &g.uuid) {
                    (None, None) => gpu_information(proc_root, &g.place.bus_id),
                    (m, u) => (m, u.clone()),
                })
                .collect()
        });
        let i = topo.gpus.iter().position(|x| x.index == g.index).unwrap_or_default();
        all.get(i).cloned().unwrap_or_default()
    };
    let minors: Vec<u32> = spec
        .pointer("/linux/devices")
        .and_then(Value::as_array)
        .map(|devs| {
            devs.iter()
                .filter_map(|d| d.get("path")?.as_str()?.strip_prefix("/dev/nvidia")?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    if !minors.is_empty() {
        let gpus = topo
            .gpus
            .iter()
            .filter(|g| info(g).0.is_some_and(|m| minors.contains(&m)))
            .map(|g| g.index)
            .collect();
        let list = minors.iter().map(|m| format!("/dev/nvidia{m}")).collect::<Vec<_>>().join(",");
        return GpuSet::Given { gpus, from: format!("the spec's device nodes {list}") };
    }
    let env = spec.pointer("/process/env").and_then(Value::as_array);
    let Some(v) = env.and_then(|e| env_get(e, "NVIDIA_VISIBLE_DEVICES")) else {
        return GpuSet::Unknown;
    };
    let from = format!("NVIDIA_VISIBLE_DEVICES={v}");
    let v = v.trim();
    let gpus = match v {
        "all" => topo.gpus.iter().map(|g| g.index).collect(),
        "" | "none" | "void" => Vec::new(),
        _ => {
            let mut out = Vec::new();
            for item in v.split(',').map(str::trim) {
                // `0:1` is MIG device 1 of GPU 0.
                let gpu = item.split(':').next().unwrap_or(item);
                let found = if let Ok(i) = gpu.parse::<usize>() {
                    topo.gpus.iter().find(|g| g.index == i)
                } else {
                    topo.gpus
                        .iter()
                        .find(|g| info(g).1.is_some_and(|u| u.eq_ignore_ascii_case(gpu)))
                };
                match found {
                    Some(g) if !out.contains(&g.index) => out.push(g.index),
                    Some(_) => {}
                    // A MIG UUID, or a GPU this host does not have: nothing can be said.
                    None => return GpuSet::Unknown,
                }
            }
            out
        }
    };
    GpuSet::Given { gpus, from }
}

impl Topology {
    /// The same with each GPU's minor and UUID from the driver's `information` file.
    pub fn with_driver_info(mut self, proc_root: &Path) -> Topology {
        for g in &mut self.gpus {
            (g.minor, g.uuid) = gpu_information(proc_root, &g.place.bus_id);
        }
        self
    }

    /// The ERIs nearest `gpus`, in ERI order.
    pub fn eris_for(&self, gpus: &[usize]) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for (name, _) in &self.eris {
            if self.pairs.iter().any(|p| gpus.contains(&p.gpu) && p.eris.contains(name)) {
                out.push(name);
            }
        }
        out
    }

    /// For each of `gpus`, the nearest of `eris`: the farthest of these is the path type the
    /// GPU Direct RDMA level must admit. `None` without GPUs or placed ERIs.
    pub fn gdr_level_needed(&self, gpus: &[usize], eris: &[&str]) -> Option<PathType> {
        let places: Vec<&PciPlace> =
            self.eris.iter().filter(|(n, _)| eris.contains(&n.as_str())).map(|(_, p)| p).collect();
        gpus.iter()
            .filter_map(|&i| {
                let g = self.gpus.iter().find(|g| g.index == i)?;
                places.iter().map(|p| path_type(&g.place, p)).min()
            })
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(bus_id: &str, cpu: &str, switches: &[&str]) -> PciPlace {
        PciPlace {
            bus_id: bus_id.into(),
            cpu: cpu.into(),
            switches: switches.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn bus_ids() {
        assert!(is_bus_id("0000:3b:00.0"));
        assert!(!is_bus_id("pci0000:00"));
        assert!(!is_bus_id("0000:3b:00"));
        assert!(!is_bus_id("0000:3g:00.0"));
        assert_eq!(
            bus_ids_of("../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/infiniband/x"),
            Some(vec!["0000:00:01.0", "0000:01:00.0"])
        );
        assert_eq!(bus_ids_of("../../devices/virtual/net/lo"), None);
    }

    #[test]
    fn nccl_path_types() {
        let cpu0 = |b, s: &[&str]| at(b, "0", s);
        // One switch above both: PIX.
        let g = cpu0("0000:03:00.0", &["0000:01:00.0"]);
        let n = cpu0("0000:04:00.0", &["0000:01:00.0"]);
        assert_eq!(path_type(&g, &n), PathType::Pix);
        // A switch below that switch on one side: PXB.
        let deep = cpu0("0000:06:00.0", &["0000:01:00.0", "0000:05:00.0"]);
        assert_eq!(path_type(&deep, &n), PathType::Pxb);
        // Different switches of one CPU, or straight on the root complex: PHB.
        let other = cpu0("0000:13:00.0", &["0000:11:00.0"]);
        assert_eq!(path_type(&g, &other), PathType::Phb);
        assert_eq!(path_type(&g, &cpu0("0000:00:05.0", &[])), PathType::Phb);
        // Another NUMA node: SYS.
        assert_eq!(path_type(&g, &at("0000:83:00.0", "1", &["0000:81:00.0"])), PathType::Sys);
        assert_eq!(path_type(&g, &g), PathType::Loc);
        assert!(PathType::Sys > GDR_DEFAULT_LEVEL && PathType::Phb > GDR_DEFAULT_LEVEL);
        assert!(PathType::Pxb <= GDR_DEFAULT_LEVEL);
        for t in ALL_TYPES {
            assert_eq!(PathType::from_name(t.name()), Some(t));
        }
    }

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/sysfs");

    fn fixture(scenario: &str, eris: &[&str]) -> Topology {
        let base = Path::new(FIXTURES).join(scenario);
        read(&base.join("sys"), &base.join("proc"), eris)
    }

    fn pairs(t: &Topology) -> Vec<(usize, Vec<&str>, &str)> {
        t.pairs
            .iter()
            .map(|p| (p.gpu, p.eris.iter().map(String::as_str).collect(), p.path.name()))
            .collect()
    }

    #[test]
    fn equal_distance_host_gives_every_gpu_both_eris() {
        let t = fixture("gpu8-eri2", &["erdma_0", "erdma_1"]);
        assert_eq!(t.gpus.len(), 8);
        // NVML's order is bus order; the minors follow it on this host.
        let buses: Vec<&str> = t.gpus.iter().map(|g| g.place.bus_id.as_str()).collect();
        assert_eq!(buses[..3], ["0000:18:00.0", "0000:19:00.0", "0000:28:00.0"]);
        assert_eq!(t.gpus[7].minor, None, "read only where asked");
        let base = Path::new(FIXTURES).join("gpu8-eri2");
        assert_eq!(t.clone().with_driver_info(&base.join("proc")).gpus[7].minor, Some(7));
        assert_eq!(t.gpus[0].place.switches, ["0000:16:00.0"]);
        assert_eq!((t.gpus[0].place.cpu.as_str(), t.gpus[4].place.cpu.as_str()), ("0", "1"));
        assert_eq!(t.eris[0].1, at("0000:05:00.0", "-1", &[]));
        // Every GPU is SYS from both ERIs (their NUMA node is -1, a CPU node of its own to
        // NCCL): both are nearest, and NCCL spreads its channels over them.
        let want: Vec<(usize, Vec<&str>, &str)> =
            (0..8).map(|i| (i, vec!["erdma_0", "erdma_1"], "SYS")).collect();
        assert_eq!(pairs(&t), want);
        assert_eq!(t.gdr_level_needed(&[0, 5], &["erdma_0", "erdma_1"]), Some(PathType::Sys));
        assert_eq!(t.eris_for(&[1, 2]), ["erdma_0", "erdma_1"]);
        let gdr = t.gdr.as_ref().unwrap();
        assert!(gdr.possible && gdr.why.starts_with("nvidia_peermem is loaded"), "{gdr:?}");
    }

    #[test]
    fn four_eris_on_two_numa_nodes_go_with_the_gpus_of_their_node() {
        let t = fixture("gpu8-eri4", &["erdma_0", "erdma_1", "erdma_2", "erdma_3"]);
        let want: Vec<(usize, Vec<&str>, &str)> = (0..8)
            .map(|i| {
                (
                    i,
                    if i < 4 { vec!["erdma_0", "erdma_1"] } else { vec!["erdma_2", "erdma_3"] },
                    "PHB",
                )
            })
            .collect();
        assert_eq!(pairs(&t), want);
        assert_eq!(t.eris_for(&[4, 5]), ["erdma_2", "erdma_3"]);
        assert_eq!(t.eris_for(&[3, 4]), ["erdma_0", "erdma_1", "erdma_2", "erdma_3"]);
        // A GPU's nearest of the ERIs given decides; across nodes, SYS.
        assert_eq!(t.gdr_level_needed(&[0], &["erdma_0"]), Some(PathType::Phb));
        assert_eq!(t.gdr_level_needed(&[0], &["erdma_2"]), Some(PathType::Sys));
        assert_eq!(t.gdr_level_needed(&[0, 4], &["erdma_0", "erdma_2"]), Some(PathType::Phb));
    }

    #[test]
    fn a_one_node_vm_is_phb() {
        let t = fixture("gpu2-eri1", &["erdma_0"]);
        assert_eq!(pairs(&t), [(0, vec!["erdma_0"], "PHB"), (1, vec!["erdma_0"], "PHB")]);
        let t = t.with_driver_info(&Path::new(FIXTURES).join("gpu2-eri1/proc"));
        assert_eq!(t.gpus[1].uuid.as_deref(), Some("GPU-6f1d3b2a-0001-4c1e-9a7b-00163e000001"));
        // No GPU: no GDR to decide.
        let t = fixture("two", &["erdma_0", "erdma_1"]);
        assert_eq!(t, Topology::default(), "nothing is read beyond the missing GPU list");
    }

    #[test]
    fn a_gpu_under_the_switch_of_an_eri_has_that_one() {
        let g = Gpu {
            index: 0,
            place: at("0000:03:00.0", "0", &["0000:01:00.0"]),
            minor: None,
            uuid: None,
        };
        let eris = vec![
            ("near".to_string(), at("0000:04:00.0", "0", &["0000:01:00.0"])),
            ("far".to_string(), at("0000:13:00.0", "0", &["0000:11:00.0"])),
        ];
        assert_eq!(pair(&[g], &eris)[0].eris, ["near"]);
    }

    #[test]
    fn the_gpus_a_spec_gives() {
        let t = fixture("gpu8-eri2", &["erdma_0", "erdma_1"]);
        let proc_root = Path::new(FIXTURES).join("gpu8-eri2/proc");
        let given = |spec: Value| match container_gpus(&spec, &t, &proc_root) {
            GpuSet::Given { gpus, .. } => Some(gpus),
            GpuSet::Unknown => None,
        };
        let env = |v: &str| serde_json::json!({"process": {"env": [format!("NVIDIA_VISIBLE_DEVICES={v}")]}});
        assert_eq!(given(env("all")), Some((0..8).collect()));
        assert_eq!(given(env("void")), Some(vec![]));
        assert_eq!(given(env("5,1")), Some(vec![5, 1]));
        assert_eq!(given(env("GPU-6f1d3b2a-0006-4c1e-9a7b-00163e000006,0:1")), Some(vec![6, 0]));
        assert_eq!(given(env("MIG-0123")), None, "a MIG UUID names no GPU here");
        // A container's list of any length: each GPU named once, the driver's files read once.
        let long = vec!["GPU-6f1d3b2a-0006-4c1e-9a7b-00163e000006"; 10_000].join(",");
        assert_eq!(given(env(&long)), Some(vec![6]));
        assert_eq!(given(env("9")), None, "a GPU this host lacks");
        assert_eq!(given(serde_json::json!({"process": {"env": ["PATH=/bin"]}})), None);
        // Device nodes (CDI) win over the variable.
        let cdi = serde_json::json!({
            "process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"]},
            "linux": {"devices": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia3"}, {"path": "/dev/nvidia-uvm"}, {"path": "/dev/nvidia2"}]}
        });
        assert_eq!(given(cdi), Some(vec![2, 3]));
    }
}
