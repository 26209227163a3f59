#!/usr/bin/env python3
"""Writes the testdata/sysfs/<scenario> trees, laid out like a real sysfs: class entries are
relative symlinks into devices/, as the kernel makes them, so discovery is tested through the
same links. Rerun after a change and commit the result:

    python3 testdata/sysfs/generate.py
"""
import os, shutil, sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))

def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)

def link(path, target):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.symlink(target, path)

def rel(frm_dir, to):
    return os.path.relpath(to, frm_dir)

VENDOR = {"erdma": ("0x1ded", "0x107f"), "mlx5_core": ("0x15b3", "0x101d")}

def module(sys_, name, version):
    """/sys/module/<name> of a loaded module: `initstate` and `refcnt` as the kernel writes
    them, `version` only when the module declares MODULE_VERSION (Alibaba's erdma and
    nvidia_peermem do; the erdma of upstream Linux does not: version "")."""
    mdir = os.path.join(sys_, "module", name)
    write(os.path.join(mdir, "initstate"), "live\n")
    write(os.path.join(mdir, "refcnt"), "0\n")
    if version:
        write(os.path.join(mdir, "version"), version + "\n")

# The port counters erdma keeps (testdata/sysfs/README.md, "Counters"): upstream Linux's since
# 6.8 (drivers/infiniband/hw/erdma/erdma_verbs.c, `erdma_descs`, in its order), and Alibaba's
# out-of-tree driver's (kernel/src/erdma_stats.c of alibaba/elastic-rdma-drivers 0.2.37,
# `erdma_hw_stat_descs`: 44 software counters, then the same 11 of the device, prefixed `hw_`,
# the three transmit drops without `tx_`).
UPSTREAM_COUNTERS = ["tx_reqs_cnt", "tx_packets_cnt", "tx_bytes_cnt", "tx_disable_drop_cnt",
                     "tx_bps_limit_drop_cnt", "tx_pps_limit_drop_cnt", "rx_packets_cnt",
                     "rx_bytes_cnt", "rx_disable_drop_cnt", "rx_bps_limit_drop_cnt",
                     "rx_pps_limit_drop_cnt"]
OOT_COUNTERS = (
    "listen_create_cnt listen_ipv6_cnt listen_success_cnt listen_failed_cnt listen_destroy_cnt "
    "accept_total_cnt accept_success_cnt accept_failed_cnt reject_cnt reject_failed_cnt "
    "connect_total_cnt connect_success_cnt connect_failed_cnt connect_timeout_cnt connect_reset_cnt "
    "cmdq_submitted_cnt cmdq_comp_cnt cmdq_eq_notify_cnt cmdq_eq_event_cnt cmdq_cq_armed_cnt "
    "erdma_aeq_event_cnt erdma_aeq_notify_cnt "
    "verbs_alloc_mr_cnt verbs_alloc_mr_failed_cnt verbs_alloc_pd_cnt verbs_alloc_pd_failed_cnt "
    "verbs_alloc_uctx_cnt verbs_alloc_uctx_failed_cnt verbs_create_cq_cnt verbs_create_cq_failed_cnt "
    "verbs_create_qp_cnt verbs_create_qp_failed_cnt verbs_dealloc_pd_cnt verbs_dealloc_uctx_cnt "
    "verbs_dereg_mr_cnt verbs_dereg_mr_failed_cnt verbs_destroy_cq_cnt verbs_destroy_cq_failed_cnt "
    "verbs_destroy_qp_cnt verbs_destroy_qp_failed_cnt verbs_get_dma_mr_cnt verbs_get_dma_mr_failed_cnt "
    "verbs_reg_usr_mr_cnt verbs_reg_usr_mr_failed_cnt "
    "hw_tx_reqs_cnt hw_tx_packets_cnt hw_tx_bytes_cnt hw_disable_drop_cnt hw_bps_limit_drop_cnt "
    "hw_pps_limit_drop_cnt hw_rx_packets_cnt hw_rx_bytes_cnt hw_rx_disable_drop_cnt "
    "hw_rx_bps_limit_drop_cnt hw_rx_pps_limit_drop_cnt").split()

def hw_counters(port_dir, names, uv):
    """ports/1/hw_counters: one decimal u64 per file (ib_core's hw_stat_port_show prints
    `%llu\n`) and `lifespan` (ms between refreshes, default 10). The values are made up:
    traffic of some GB, a few drops, per device."""
    d = os.path.join(port_dir, "hw_counters")
    for i, n in enumerate(names):
        if "bytes" in n:
            v = (uv + 1) * 7_000_000_000 + i
        elif "packets" in n or "reqs" in n:
            v = (uv + 1) * 1_700_000 + i
        else:
            v = i % 3
        write(os.path.join(d, n), f"{v}\n")
    write(os.path.join(d, "lifespan"), "10\n")

def ipv4_mapped(a, b, c, d):
    """The GID of an IPv4 address, as sysfs prints it: ::ffff:a.b.c.d in eight groups."""
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"

def link_local(uv):
    return f"fe80:0000:0000:0000:0216:3eff:fe00:{uv:04x}"

def erdma_gids(uv, v2_at=1):
    """eRDMA's table as modelled here (testdata/sysfs/README.md): the link-local GID at 0, the
    IPv4-mapped RoCE v2 GID at `v2_at` (PAI-DLC's preset NCCL_IB_GID_INDEX=1 says 1)."""
    table = [(link_local(uv), "IB/RoCE v1")] + [(link_local(uv), "RoCE v2")] * (v2_at - 1)
    return table + [(ipv4_mapped(172, 16, uv, 5), "RoCE v2")]

def mlx5_gids(uv):
    """An mlx5 RoCE port with IPv4, as the kernel fills it (roce_gid_mgmt, one v1 and one v2
    entry per address): link-local v1, v2, then IPv4-mapped v1, v2 at 3 (the RoCE v2 article)."""
    return [(link_local(uv), "IB/RoCE v1"), (link_local(uv), "RoCE v2"), (ipv4_mapped(192, 168, 1, 10 + uv), "IB/RoCE v1"), (ipv4_mapped(192, 168, 1, 10 + uv), "RoCE v2")]

def pci_function(sys_, chain, numa, vendor, device, cls):
    """A PCI function at `chain` (bus ids from the root port down, itself last) under its root
    bus `pci0000:BB` (the first bus id's), with the bridges above it (class 0x060400, the
    NUMA node of the function below them) and its `bus/pci/devices` link. Returns its dir."""
    root = os.path.join(sys_, f"devices/pci{chain[0][:7]}")
    d = root
    for i, bdf in enumerate(chain):
        d = os.path.join(d, bdf)
        last = i == len(chain) - 1
        write(os.path.join(d, "vendor"), (vendor if last else "0x8086") + "\n")
        write(os.path.join(d, "device"), (device if last else "0x347a") + "\n")
        write(os.path.join(d, "class"), (cls if last else "0x060400") + "\n")
        write(os.path.join(d, "numa_node"), f"{numa}\n")
        lnk = os.path.join(sys_, "bus/pci/devices", bdf)
        if not os.path.lexists(lnk):
            link(lnk, rel(os.path.dirname(lnk), d))
    return d

# NVIDIA's information file (kernel-open/nvidia/nv-procfs.c, nv_procfs_read_gpu_info): one
# `Field: \t value` line each.
GPU_INFO = """Model: \t\t {model}
IRQ:   \t\t {irq}
GPU UUID: \t {uuid}
Video BIOS: \t 96.00.99.00.01
Bus Type: \t PCIe
DMA Size: \t 52 bits
DMA Mask: \t 0xfffffffffffff
Bus Location: \t {bus}
Device Minor: \t {minor}
GPU Excluded:\t No
"""

def gpus_of(base, sys_, gpus, model):
    """gpus: (chain, numa) each, in minor order; the GPU is the chain's last bus id. Writes the
    PCI functions (vendor 0x10de, class 0x030200, a 3D controller), their `nvidia` driver links
    and /proc/driver/nvidia/gpus/BUS/information."""
    for minor, (chain, numa) in enumerate(gpus):
        bdf = chain[-1]
        d = pci_function(sys_, chain, numa, "0x10de", "0x2330", "0x030200")
        link(os.path.join(d, "driver"), rel(d, os.path.join(sys_, "bus/pci/drivers/nvidia")))
        link(os.path.join(sys_, "bus/pci/drivers/nvidia", bdf), rel(os.path.join(sys_, "bus/pci/drivers/nvidia"), d))
        uuid = f"GPU-6f1d3b2a-{minor:04x}-4c1e-9a7b-00163e00{minor:04x}"
        write(os.path.join(base, "proc/driver/nvidia/gpus", bdf, "information"),
              GPU_INFO.format(model=model, irq=100 + minor, uuid=uuid, bus=bdf, minor=minor))
    write(os.path.join(sys_, "bus/pci/drivers/nvidia/uevent"), "DRIVER=nvidia\n")

def scenario(name, devices, netdevs, rdma_cm=True, dev_nodes=None, umad=(), erdma_version=None, peermem=False, gids=None, numa=None, gpus=(), gpu_model="NVIDIA H100 80GB HBM3", eri_chain=None, counters=False):
    """devices: (ibdev, pci, driver, uverbs_index, netdev, port_state, phys_state);
    numa: per ibdev, its PCI function's NUMA node (default -1, what a kernel with one node or
    no firmware affinity prints);
    gids: per ibdev, the port's GID table [(gid, type)] (default erdma_gids / mlx5_gids);
    gpus: (chain, numa) per GPU (gpus_of); eri_chain: per ibdev, the bridges above its PCI
    function (bus ids from the root port down; default none: on the root bus);
    erdma_version: the loaded erdma module's version (None: not loaded; "": upstream Linux's,
    which has none); peermem: whether nvidia_peermem is loaded (GPU Direct RDMA); counters:
    whether the erdma ports have their hw_counters (the names of the module's kind)."""
    base = os.path.join(ROOT, name)
    shutil.rmtree(base, ignore_errors=True)
    sys_ = os.path.join(base, "sys")
    os.makedirs(sys_)
    drivers = set()
    # The virtio-net functions with the netdevs and their MTUs.
    for i, (nd, mtu) in enumerate(netdevs):
        ndir = os.path.join(sys_, f"devices/pci0000:00/0000:00:0{3+i}.0/virtio{i}/net/{nd}")
        write(os.path.join(ndir, "mtu"), f"{mtu}\n")
        write(os.path.join(ndir, "operstate"), "up\n")
        write(os.path.join(ndir, "address"), f"00:16:3e:00:0{i}:01\n")
        link(os.path.join(sys_, "class/net", nd), rel(os.path.join(sys_, "class/net"), ndir))
    lo = os.path.join(sys_, "devices/virtual/net/lo")
    write(os.path.join(lo, "mtu"), "65536\n")
    write(os.path.join(lo, "operstate"), "unknown\n")
    link(os.path.join(sys_, "class/net/lo"), rel(os.path.join(sys_, "class/net"), lo))
    nodes = []
    for (ib, pci, driver, uv, nd, state, phys) in devices:
        drivers.add(driver)
        vendor, device = VENDOR[driver]
        chain = (eri_chain or {}).get(ib, [])
        if chain or gpus:
            pdir = pci_function(sys_, chain + [pci], (numa or {}).get(ib, -1), vendor, device, "0x020000")
        else:
            bus = pci.split(":")[1]
            pdir = os.path.join(sys_, f"devices/pci0000:{bus}/{pci}")
            write(os.path.join(pdir, "vendor"), vendor + "\n")
            write(os.path.join(pdir, "device"), device + "\n")
            write(os.path.join(pdir, "numa_node"), f"{(numa or {}).get(ib, -1)}\n")
        link(os.path.join(pdir, "driver"), rel(pdir, os.path.join(sys_, "bus/pci/drivers", driver)))
        idir = os.path.join(pdir, "infiniband", ib)
        if driver == "erdma":
            write(os.path.join(idir, "node_type"), "4: RNIC\n")
        else:
            write(os.path.join(idir, "node_type"), "1: CA\n")
        write(os.path.join(idir, "node_guid"), f"0216:3eff:fe00:{uv:04x}\n")
        write(os.path.join(idir, "fw_ver"), "0.2.0\n")
        p = os.path.join(idir, "ports/1")
        write(os.path.join(p, "state"), state + "\n")
        write(os.path.join(p, "phys_state"), phys + "\n")
        write(os.path.join(p, "link_layer"), "Ethernet\n")
        if driver == "erdma":
            # Alibaba's erdma driver reports a fixed 4X EDR for every port with a netdev
            # (erdma_verbs.c, erdma_query_port), which ib_core prints as this (sysfs.c, rate_show).
            write(os.path.join(p, "rate"), "100 Gb/sec (4X EDR)\n")
        table = (gids or {}).get(ib) or (erdma_gids(uv) if driver == "erdma" else mlx5_gids(uv))
        for n, (gid, typ) in enumerate(table):
            write(os.path.join(p, f"gids/{n}"), gid + "\n")
            write(os.path.join(p, f"gid_attrs/types/{n}"), typ + "\n")
            write(os.path.join(p, f"gid_attrs/ndevs/{n}"), nd + "\n")
        # Empty slots read as the zero GID (their type and ndev files fail with EINVAL).
        for n in range(len(table), 8):
            write(os.path.join(p, f"gids/{n}"), "0000:0000:0000:0000:0000:0000:0000:0000\n")
        if driver == "erdma" and erdma_version is not None and counters:
            hw_counters(p, OOT_COUNTERS if erdma_version else UPSTREAM_COUNTERS, uv)
        link(os.path.join(idir, "device"), rel(idir, pdir))
        link(os.path.join(sys_, "class/infiniband", ib), rel(os.path.join(sys_, "class/infiniband"), idir))
        vdir = os.path.join(pdir, "infiniband_verbs", f"uverbs{uv}")
        write(os.path.join(vdir, "ibdev"), ib + "\n")
        write(os.path.join(vdir, "dev"), f"231:{192+uv}\n")
        write(os.path.join(vdir, "abi_version"), "1\n")
        link(os.path.join(vdir, "device"), rel(vdir, pdir))
        link(os.path.join(sys_, "class/infiniband_verbs", f"uverbs{uv}"), rel(os.path.join(sys_, "class/infiniband_verbs"), vdir))
        nodes.append(f"infiniband/uverbs{uv} c 231 {192+uv}")
    for (ib, pci, n) in umad:
        bus = pci.split(":")[1]
        udir = os.path.join(sys_, f"devices/pci0000:{bus}/{pci}/infiniband_mad/umad{n}")
        write(os.path.join(udir, "ibdev"), ib + "\n")
        write(os.path.join(udir, "dev"), f"231:{n}\n")
        write(os.path.join(udir, "port"), "1\n")
        link(os.path.join(sys_, "class/infiniband_mad", f"umad{n}"), rel(os.path.join(sys_, "class/infiniband_mad"), udir))
        nodes.append(f"infiniband/umad{n} c 231 {n}")
    for d in sorted(drivers):
        write(os.path.join(sys_, "bus/pci/drivers", d, "uevent"), f"DRIVER={d}\n")
    if devices:
        write(os.path.join(sys_, "class/infiniband_verbs/abi_version"), "6\n")
    if rdma_cm:
        cm = os.path.join(sys_, "devices/virtual/misc/rdma_cm")
        write(os.path.join(cm, "dev"), "10:58\n")
        link(os.path.join(sys_, "class/misc/rdma_cm"), rel(os.path.join(sys_, "class/misc"), cm))
        nodes.append("infiniband/rdma_cm c 10 58")
    if devices:
        # ib_core's `netns_mode` (drivers/infiniband/core/device.c: a bool parameter, 0444,
        # over `ib_devices_shared_netns`, default true): a bool parameter prints `Y` or `N`.
        ib_core = os.path.join(sys_, "module/ib_core")
        write(os.path.join(ib_core, "initstate"), "live\n")
        write(os.path.join(ib_core, "parameters/netns_mode"), "Y\n")
    if erdma_version is not None:
        module(sys_, "erdma", erdma_version)
    if peermem:
        module(sys_, "nvidia_peermem", PEERMEM_VERSION)
    if gpus:
        gpus_of(base, sys_, gpus, gpu_model)
    if dev_nodes is not None:
        nodes = [n for n in nodes if n.split()[0] in dev_nodes]
    with open(os.path.join(base, "dev.txt"), "w") as f:
        f.write("# /dev nodes the tests create for this scenario (path under /dev, type, major, minor)\n")
        f.write("".join(n + "\n" for n in nodes))

ACTIVE = ("4: ACTIVE", "5: LinkUp")
# nvidia_peermem carries the NVIDIA driver's version.
PEERMEM_VERSION = "535.161.08"
DOWN = ("1: DOWN", "3: Disabled")

scenario("one", [("erdma_0", "0000:00:05.0", "erdma", 0, "eth0", *ACTIVE)], [("eth0", 8500)], erdma_version="0.2.35")
scenario("two", [("erdma_0", "0000:00:05.0", "erdma", 0, "eth0", *ACTIVE),
                 ("erdma_1", "0000:00:06.0", "erdma", 1, "eth1", *ACTIVE)],
         [("eth0", 8500), ("eth1", 8500)], erdma_version="0.2.37", peermem=True, counters=True)
scenario("four", [(f"rocep{b}s0", f"0000:{b:02x}:00.0", "erdma", i, f"eth{i}", *ACTIVE) for i, b in enumerate([9, 10, 11, 12])],
         [(f"eth{i}", 1400) for i in range(4)], erdma_version="0.2.38", peermem=True, counters=True,
         numa={"rocep9s0": 0, "rocep10s0": 0, "rocep11s0": 1, "rocep12s0": 1})
scenario("missing-uverbs", [("erdma_0", "0000:00:05.0", "erdma", 0, "eth0", *ACTIVE),
                            ("erdma_1", "0000:00:06.0", "erdma", 1, "eth1", *ACTIVE)],
         [("eth0", 8500), ("eth1", 8500)], dev_nodes={"infiniband/uverbs0", "infiniband/rdma_cm"}, erdma_version="0.2.36")
scenario("port-down", [("erdma_0", "0000:00:05.0", "erdma", 0, "eth0", *DOWN)], [("eth0", 8500)], erdma_version="0.2.34", counters=True)
scenario("mlx5-beside", [("erdma_0", "0000:00:05.0", "erdma", 0, "eth0", *ACTIVE),
                         ("mlx5_0", "0000:3b:00.0", "mlx5_core", 1, "ens1f0np0", *ACTIVE)],
         [("eth0", 8500), ("ens1f0np0", 9000)], umad=[("mlx5_0", "0000:3b:00.0", 0)], erdma_version="0.2.33", peermem=True)
scenario("none", [], [("eth0", 1500)], rdma_cm=False)
# A real ACK node (the ACK GDR guide's device names, predictable interface names, no eth0):
# rocep26s0 ACTIVE on ens5, rocep156s0 DOWN on ens6, and a bond0 with no RDMA device.
scenario("rocep-ens5", [("rocep156s0", "0000:9c:00.0", "erdma", 0, "ens6", *DOWN),
                        ("rocep26s0", "0000:1a:00.0", "erdma", 1, "ens5", *ACTIVE)],
         [("ens5", 8500), ("ens6", 8500), ("bond0", 8500)], erdma_version="0.2.39", peermem=True, counters=True)
# Upstream Linux's erdma (6.8 and later: no MODULE_VERSION, the counters' upstream names).
scenario("upstream", [("erdma_0", "0000:00:05.0", "erdma", 0, "eth0", *ACTIVE)], [("eth0", 8500)], erdma_version="", counters=True)
# Two ACTIVE devices of one node whose RoCE v2 GIDs sit at different indexes (2 and 1), as
# Alibaba's eRDMA benchmark notes found: no one NCCL_IB_GID_INDEX is right for both.
scenario("gids-differ", [("erdma_0", "0000:00:05.0", "erdma", 0, "eth0", *ACTIVE),
                         ("erdma_1", "0000:00:06.0", "erdma", 1, "eth1", *ACTIVE)],
         [("eth0", 8500), ("eth1", 8500)], erdma_version="0.2.39", peermem=True,
         gids={"erdma_0": erdma_gids(0, v2_at=2), "erdma_1": erdma_gids(1, v2_at=1)})

# GPU hosts (testdata/sysfs/README.md, "GPU hosts"): where the GPUs sit beside the ERIs.
def gpu_under_switch(root_bus, sw, port):
    """A GPU behind a PCIe switch: root port ROOT:01.0 -> switch upstream port SW:00.0 ->
    downstream port (SW+1):PORT.0 -> the GPU on bus SW+2+port/4."""
    up = f"0000:{sw:02x}:00.0"
    down = f"0000:{sw + 1:02x}:{port:02x}.0"
    return [f"0000:{root_bus:02x}:01.0", up, down, f"0000:{sw + 2 + port // 4:02x}:00.0"]

def eight_gpus():
    """8 GPUs on 2 NUMA nodes, 4 per node, two behind each PCIe switch (NVIDIA's HGX layout:
    one switch per GPU pair), in bus order: node 0 on root buses 0x15 and 0x25, node 1 on
    0x95 and 0xa5."""
    out = []
    for numa, roots in ((0, (0x15, 0x25)), (1, (0x95, 0xa5))):
        for rb in roots:
            for port in (0, 4):
                out.append((gpu_under_switch(rb, rb + 1, port), numa))
    return out

def eri_gids(uv, addr, v2_at=1):
    table = [(link_local(uv), "IB/RoCE v1")] + [(link_local(uv), "RoCE v2")] * (v2_at - 1)
    return table + [(ipv4_mapped(*addr), "RoCE v2")]

# The equal-distance host of Alibaba's eRDMA benchmark notes (erdma-controller
# docs/erdma-benchmark: 8 GPUs without NVLink, 2 ERIs, GID indexes 2 and 1, the ERIs in
# 192.168.4.0/24, GPU-to-ERI distance beyond GDR's default): the ERIs on root buses of their
# own whose numa_node is -1, so NCCL hangs them from a CPU node "-1" of their own and every
# GPU is SYS from both.
scenario("gpu8-eri2", [("erdma_0", "0000:05:00.0", "erdma", 0, "eth1", *ACTIVE),
                       ("erdma_1", "0000:06:00.0", "erdma", 1, "eth2", *ACTIVE)],
         [("eth0", 1500), ("eth1", 8500), ("eth2", 8500)], erdma_version="0.2.39", peermem=True,
         gids={"erdma_0": eri_gids(0, (192, 168, 4, 21), v2_at=2), "erdma_1": eri_gids(1, (192, 168, 4, 22), v2_at=1)},
         gpus=eight_gpus())
# Four ERIs, two on each NUMA node's root complex (own root ports), beside 8 GPUs on the same
# two nodes: PHB to the GPUs of their node, SYS to the others.
scenario("gpu8-eri4", [(f"erdma_{i}", f"0000:{b:02x}:00.0", "erdma", i, f"eth{i + 1}", *ACTIVE)
                       for i, b in enumerate([0x36, 0x46, 0xb6, 0xc6])],
         [("eth0", 1500)] + [(f"eth{i + 1}", 8500) for i in range(4)], erdma_version="0.2.39", peermem=True,
         gids={f"erdma_{i}": eri_gids(i, (10, 0, i, 5)) for i in range(4)},
         numa={"erdma_0": 0, "erdma_1": 0, "erdma_2": 1, "erdma_3": 1},
         eri_chain={f"erdma_{i}": [f"0000:{b - 1:02x}:01.0"] for i, b in enumerate([0x36, 0x46, 0xb6, 0xc6])},
         gpus=eight_gpus())
# A VM with 2 GPUs and 1 ERI, as kubernetes-sigs/dranet's gn8is-2x.8xlarge example lists it
# (2 x L20, 1 eRDMA device at 0000:00:0b.0): everything on the root bus of one NUMA node -1,
# so each GPU is PHB from the ERI, as NCCL's dump shows on a one-node VM.
scenario("gpu2-eri1", [("erdma_0", "0000:00:0b.0", "erdma", 0, "eth0", *ACTIVE)],
         [("eth0", 8500)], erdma_version="0.2.39", peermem=True,
         gpus=[(["0000:00:07.0"], -1), (["0000:00:08.0"], -1)], gpu_model="NVIDIA L20")
