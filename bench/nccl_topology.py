#!/usr/bin/env python3
"""The helper of bench/nccl_topology.sh: the rank program, and the reading and writing of NCCL's
topology XML, graph dumps and logs. Standard library only, except `rank` (torch).

  rank                                  one rank: all-reduce, result as JSON in $RESULT
  merge-dumps OUT DUMP...               one topology of several NCCL_TOPO_DUMP_FILEs
  variants REAL OUTDIR GPN              the NCCL_TOPO_FILEs of case nic-choice (b, bp, c, cp, c2, c2p, e;
                                        s-sys-200, s-sys-100, s-phb-200, s-c2p-200) and its
                                        NCCL_GRAPH_FILEs (graph-a, graph-b, graph-rev-a, graph-rev-b)
  classify LOGDIR REAL HOOKJSON IF      path types GPU -> IF: ours, the dump's tree, NCCL's log
  channels NAME LOGDIR GPN              which NET each channel and each GPU used
  report SUMMARY                        the summary's lines as tables

NCCL's topology file (NCCL 2.28, `src/graph/xml.cc`): attributes separated by one space, values
in double quotes, no tabs and no `<?xml` prolog; `<x a="1" />` (a space before `/>`) would read
as an attribute with an empty name, so the files are written as NCCL dumps them.
"""
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

# NCCL's path types, in its order (`src/graph/topo.h`, 2.28).
TYPES = ["LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS"]


def rank():
    import time

    import torch
    import torch.distributed as dist

    r = int(os.environ["RANK"])
    world = int(os.environ["WORLD"])
    torch.cuda.set_device(0)
    t0 = time.monotonic()
    props = torch.cuda.get_device_properties(0)
    bus = None
    if all(hasattr(props, a) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        bus = "%04x:%02x:%02x.0" % (props.pci_domain_id, props.pci_bus_id, props.pci_device_id)
    out = {"rank": r, "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
           "gpu": bus}
    try:
        dist.init_process_group("nccl", init_method="tcp://" + os.environ["MASTER"], rank=r, world_size=world)
        x = torch.full((int(os.environ.get("NELEM", 1 << 22)),), float(r + 1), device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        out["sum_ok"] = bool((x == world * (world + 1) / 2).all().item())
        if os.environ.get("OP") == "alltoall":
            # Point-to-point (ncclSend/ncclRecv in a group): block j of rank r holds 100 r + j, and
            # after the exchange block j holds 100 j + r.
            n = 1 << 16
            src = torch.cat([torch.full((n,), float(100 * r + j), device="cuda") for j in range(world)])
            dst = torch.empty_like(src)
            dist.all_to_all_single(dst, src)
            torch.cuda.synchronize()
            want = torch.cat([torch.full((n,), float(100 * j + r), device="cuda") for j in range(world)])
            out["alltoall_ok"] = bool((dst == want).all().item())
            out["sum_ok"] = out["sum_ok"] and out["alltoall_ok"]
        dist.destroy_process_group()
    except Exception as e:  # what NCCL reports is the result of the fail-closed case
        out["error"] = " | ".join(str(e).splitlines()[:3])[:600]
    out["seconds"] = round(time.monotonic() - t0, 2)
    with open(os.environ["RESULT"], "w") as f:  # NCCL logs to stdout: the result has a file
        f.write(json.dumps(out) + "\n")
    sys.exit(0 if out.get("sum_ok") else 1)


# --- NCCL's XML -----------------------------------------------------------------------------

def dump_xml(node, indent=0):
    """`node` as NCCL writes it (`ncclTopoDumpXmlRec`)."""
    attrs = "".join(f' {k}="{v}"' for k, v in node.attrib.items())
    pad = " " * indent
    kids = list(node)
    if not kids:
        return f"{pad}<{node.tag}{attrs}/>\n"
    return f"{pad}<{node.tag}{attrs}>\n" + "".join(dump_xml(k, indent + 2) for k in kids) + f"{pad}</{node.tag}>\n"


def key(e):
    for a in ("busid", "numaid", "name", "target"):
        if a in e.attrib:
            return (e.tag, a, e.attrib[a].lower())
    return (e.tag, "", "")


def merge_into(dst, src):
    for s in src:
        k = key(s)
        d = next((c for c in dst if key(c) == k), None)
        if d is None:
            dst.append(s)
        else:
            merge_into(d, s)


def merge_dumps(out, paths):
    """One tree of the per-rank dumps (each rank a host of its own): CPUs by numaid, PCI by busid."""
    merged = None
    for p in paths:
        try:
            t = ET.parse(p).getroot()
        except (OSError, ET.ParseError) as e:
            print(f"merge-dumps: {p}: {e}", file=sys.stderr)
            continue
        for cpu in t.iter("cpu"):
            cpu.attrib.pop("host_hash", None)
        if merged is None:
            merged = t
        else:
            merge_into(merged, t)
    if merged is None:
        sys.exit("merge-dumps: no dump could be read")
    # Each GPU in bus order under its parent, as NCCL sorts a parent's PCI children.
    for parent in merged.iter():
        kids = list(parent)
        if kids and all(k.tag == "pci" for k in kids):
            kids.sort(key=lambda k: k.attrib.get("busid", ""))
            parent[:] = kids
    with open(out, "w") as f:
        f.write(dump_xml(merged))


def parents(root):
    return {c: p for p in root.iter() for c in p}


def gpus_of(root):
    """[(busid, pci element)] of the GPUs, in bus order."""
    out = [(p.attrib["busid"].lower(), p) for p in root.iter("pci") if p.find("gpu") is not None]
    return sorted(out)


def chain(elem, par):
    """The element's ancestors, top (system) first, then the element."""
    c = [elem]
    while c[-1] in par:
        c.append(par[c[-1]])
    return list(reversed(c))


def tree_type(gpu_pci, net, par):
    """NCCL's path type GPU -> NET over the tree alone (`ncclTopoSetPaths`): a hop between a device
    and a PCI switch is PIX, between two switches PXB, one touching a CPU PHB, CPU to CPU SYS;
    the type is the largest hop. NET -> NIC is LOC; a <nic> straight under a <cpu> is a NIC node
    joined to the CPU by a PCI link. Neither NVLink routes, PXN nor the GPU Direct RDMA divert are
    applied here (see `classify`)."""
    g = chain(gpu_pci, par)[1:]            # cpu, pci..., gpu pci
    nic = par[net]
    nic_node = par[nic] if par[nic].tag == "pci" else nic   # the NIC node: its pci, or the <nic>
    n = chain(nic_node, par)[1:]
    # Nodes on the path: up from the GPU to the common ancestor, down to the NIC.
    common = 0
    while common < min(len(g), len(n)) and g[common] is n[common]:
        common += 1
    if common == 0:       # different CPUs
        up = list(reversed(g))
        down = n
        hops = list(zip(up, up[1:])) + [(g[0], n[0])] + list(zip(down, down[1:]))
    else:
        up = list(reversed(g[common - 1:]))
        down = n[common - 1:]
        hops = list(zip(up, up[1:])) + list(zip(down, down[1:]))

    def kind(e):
        if e.tag == "cpu":
            return "CPU"
        if e.tag == "nic":
            return "NIC"
        if e.find("gpu") is not None:
            return "GPU"
        if e.find("nic") is not None:
            return "NIC"
        return "PCI"

    t = 0
    for a, b in hops:
        ka, kb = kind(a), kind(b)
        if ka == "CPU" and kb == "CPU":
            h = TYPES.index("SYS")
        elif ka == "CPU" or kb == "CPU":
            h = TYPES.index("PHB")
        elif ka == "PCI" and kb == "PCI":
            h = TYPES.index("PXB")
        else:
            h = TYPES.index("PIX")
        t = max(t, h)
    return TYPES[t]


def strip(e):
    """A copy of a GPU's pci element for a topology file: no `rank` (NCCL sets it for its own GPU
    and trims the others), the rest (dev, sm, gdr, nvlinks) as NCCL read it."""
    c = ET.fromstring(ET.tostring(e))
    for g in c.iter("gpu"):
        g.attrib.pop("rank", None)
        g.attrib.pop("keep", None)
    return c


def variants(real, outdir, gpn):
    """b: every GPU where it is, both NICs under one CPU node of their own (SYS from every GPU);
    c: NIC n0 under the GPUs' CPU with the first fake node's GPUs, n1 under a second CPU node
    with the second node's; c2: in each fake node its first GPU beside n0, its second beside n1;
    bp, cp, c2p: the same with each NIC in a <pci> of its own; e: erdma-oci-hook's form.
    In c and c2 a GPU hangs straight from its CPU node (a switch shared by GPUs that go to two
    CPUs cannot be in both)."""
    root = ET.parse(real).getroot()
    par = parents(root)
    gpus = gpus_of(root)
    cpus = list(root.iter("cpu"))
    if not gpus or not cpus:
        sys.exit("variants: no GPU or CPU in " + real)
    first_cpu = chain(gpus[0][1], par)[1]
    numaids = [int(c.attrib.get("numaid", "0") or 0) for c in cpus]
    near = first_cpu.attrib.get("numaid", "0")
    far = str(max(0, max(numaids)) + 1)

    def cpu(numaid):
        c = ET.Element("cpu", dict(first_cpu.attrib))
        c.attrib["numaid"] = numaid
        c.attrib.pop("host_hash", None)
        return c

    def nic(names):
        n = ET.Element("nic")
        for name in names:
            ET.SubElement(n, "net", {"name": name})
        return n

    # A NIC in a <pci> of its own. A <nic> straight under a <cpu> gets the NIC id
    # NCCL_TOPO_ID(system, NCCL_TOPO_LOCAL_NIC_ID(numaid, 0)), whose mask drops the NUMA id
    # (`topo.h`), so every such <nic> of a host is one NIC node, on the first of those CPUs; under
    # a <pci> the id is the bus id's. The bus ids are made up: NCCL reads no sysfs for a NIC the
    # file names (`ncclTopoFillNet`).
    def pnic(name, busid):
        p = ET.Element("pci", {"busid": busid, "class": "0x020000", "link_speed": "16.0 GT/s PCIe", "link_width": "16"})
        p.append(nic([name]))
        return p

    def system():
        return ET.Element("system", {"version": root.attrib.get("version", "1")})

    def write(name, sysel):
        path = os.path.join(outdir, name + ".xml")
        with open(path, "w") as f:
            f.write(dump_xml(sysel))
        print(path)

    # b: the real tree without its NICs (and PCI branches with no GPU), and a CPU of the NICs.
    b = ET.fromstring(ET.tostring(root))
    bpar = parents(b)
    for e in list(b.iter()):
        if e.tag == "nic" or (e.tag == "pci" and not any(x.tag == "gpu" for x in e.iter())):
            if e in bpar and e in list(bpar[e]):
                bpar[e].remove(e)
    for c in b.iter("cpu"):
        c.attrib.pop("host_hash", None)
    for g in b.iter("gpu"):
        g.attrib.pop("rank", None)
    fc = cpu(far)
    fc.append(nic(["n0", "n1"]))
    b.append(fc)
    write("b", b)
    # bp: b with each NIC in a <pci> of its own.
    fc.remove(fc.find("nic"))
    fc.extend([pnic("n0", "0000:e0:00.0"), pnic("n1", "0000:e1:00.0")])
    write("bp", b)

    # c: the literal split, node a's GPUs with n0, node b's with n1.
    c = system()
    c0, c1 = cpu(near), cpu(far)
    for i, (_, p) in enumerate(gpus[: 2 * gpn]):
        (c0 if i < gpn else c1).append(strip(p))
    c0.append(nic(["n0"]))
    c1.append(nic(["n1"]))
    c.extend([c0, c1])
    write("c", c)
    # cp: c with each NIC in a <pci> of its own.
    c0.remove(c0.find("nic"))
    c1.remove(c1.find("nic"))
    c0.append(pnic("n0", "0000:e0:00.0"))
    c1.append(pnic("n1", "0000:e1:00.0"))
    write("cp", c)

    # e: the form erdma-oci-hook writes (`Hint::topo_xml`): a <cpu> per NUMA node with its
    # NICs' <nic><net/></nic> straight under it, no <pci>, no <gpu>: n0 on the NUMA node of the
    # first node's GPUs, n1 on that of the second node's. Where both are one node, both NICs
    # land in that one <cpu>, each in a <nic> of its own, as the hook writes two ERIs of a node.
    numa = {bus: chain(p, par)[1].attrib.get("numaid", "") for bus, p in gpus}
    n0, n1 = numa[gpus[0][0]], numa[gpus[min(gpn, len(gpus) - 1)][0]]
    e = system()
    for nid in sorted({n0, n1}, key=lambda n: int(n) if n.lstrip("-").isdigit() else 1 << 62):
        c = ET.SubElement(e, "cpu", {"numaid": nid})
        for a in ("arch", "vendor", "familyid", "modelid"):
            if a in first_cpu.attrib:
                c.attrib[a] = first_cpu.attrib[a]
        for name, at in (("n0", n0), ("n1", n1)):
            if at == nid:
                c.append(nic([name]))
    write("e", e)
    print(f"e: n0 on numaid {n0}, n1 on numaid {n1}" + (" (one NUMA node: the file cannot tell them apart)" if n0 == n1 else ""),
          file=sys.stderr)

    # c2: within each fake node, GPU i with NIC n<i>.
    if gpn >= 2:
        c2 = system()
        k0, k1 = cpu(near), cpu(far)
        for i, (_, p) in enumerate(gpus[: 2 * gpn]):
            (k0 if i % gpn == 0 else k1 if i % gpn == 1 else k0).append(strip(p))
        k0.append(nic(["n0"]))
        k1.append(nic(["n1"]))
        c2.extend([k0, k1])
        write("c2", c2)
        k0.remove(k0.find("nic"))
        k1.remove(k1.find("nic"))
        k0.append(pnic("n0", "0000:e0:00.0"))
        k1.append(pnic("n1", "0000:e1:00.0"))
        write("c2p", c2)
        write("s-c2p-200", speeded(c2, 200000))

    # ERI-like speeds: each <net> with speed="MBPS" (Mbit/s; `ncclTopoAddNet`: bw = speed / 8000
    # GB/s, so 200000 is 25 GB/s, against the veth's 10000, 1.25 GB/s). The file's value stays:
    # `ncclTopoPopulateNics` sets speed with `xmlInitAttrInt`, which leaves a present attribute.
    # s-sys-*: bp (both NICs SYS from every GPU, each in a <pci> under a CPU of their own);
    # s-phb-200: both NICs in a <pci> each under the GPUs' own CPU (PHB from every GPU);
    # s-c2p-200: c2p (above).
    write("s-sys-200", speeded(b, 200000))
    write("s-sys-100", speeded(b, 100000))
    ph = ET.fromstring(ET.tostring(b))
    phc = list(ph.iter("cpu"))
    ph.remove(phc[-1])                       # the NICs' own CPU, appended last
    home = next(c for c in ph.iter("cpu") if c.attrib.get("numaid") == near)
    home.extend([pnic("n0", "0000:e0:00.0"), pnic("n1", "0000:e1:00.0")])
    write("s-phb-200", speeded(ph, 200000))

    # NCCL_GRAPH_FILEs, one per fake node (a GPU `dev` the node lacks fails its init: "XML Import
    # Channel : dev %ld not found"): ring (id 0, pattern 4) and balanced tree (id 1, pattern 1),
    # 2 channels with all of the node's GPUs; graph-X: channel 0 on NET dev 0, channel 1 on NET
    # dev 1; graph-rev-X: the other way round, which NCCL's own search would not choose, so that
    # the file's effect shows. Ids as NCCL dumps them: NCCL_TOPO_ID(systemId 0, dev), "%#lx".
    devs = [int(p.find("gpu").attrib.get("dev", i)) for i, (_, p) in enumerate(gpus)]
    nvl = "NVL" if root.find(".//nvlink") is not None else "PHB"
    for node, ds in (("a", devs[:gpn]), ("b", devs[gpn:2 * gpn])):
        if len(ds) < gpn:
            continue
        for name, order in (("graph", (0, 1)), ("graph-rev", (1, 0))):
            gs = ET.Element("graphs", {"version": "1"})
            for gid, pattern in ((0, 4), (1, 1)):
                g = ET.SubElement(gs, "graph", {
                    "id": str(gid), "pattern": str(pattern), "crossnic": "0", "nchannels": str(len(order)),
                    "speedintra": "20", "speedinter": "20", "latencyinter": "0",
                    "typeintra": nvl, "typeinter": "SYS", "samechannels": "1"})
                for netdev in order:
                    ch = ET.SubElement(g, "channel")
                    ET.SubElement(ch, "net", {"dev": "%#x" % netdev})
                    for d in ds:
                        ET.SubElement(ch, "gpu", {"dev": "%#x" % d})
                    ET.SubElement(ch, "net", {"dev": "%#x" % netdev})
            write(f"{name}-{node}", gs)


def speeded(tree, mbps):
    """A copy of a topology with every <net> at `mbps` Mbit/s."""
    c = ET.fromstring(ET.tostring(tree))
    for n in c.iter("net"):
        n.attrib["speed"] = str(mbps)
    return c


# --- NCCL's logs ----------------------------------------------------------------------------

INFO = re.compile(r"NCCL INFO (.*)$")


def log_lines(path):
    try:
        with open(path, errors="replace") as f:
            for line in f:
                m = INFO.search(line.rstrip("\n"))
                if m:
                    yield m.group(1)
    except OSError:
        return


def bus_to_id(bus):
    d, b, rest = bus.split(":")
    dev, fn = rest.split(".")
    return (int(d, 16) << 20) | (int(b, 16) << 12) | (int(dev, 16) << 4) | int(fn, 16)


def id_to_bus(i):
    return "%04x:%02x:%02x.%01x" % (i >> 20, (i >> 12) & 0xff, (i >> 4) & 0xff, i & 0xf)


PATHLINE = re.compile(r"^(GPU|NET)/([0-9a-f]+)-([0-9a-f]+) :(.*)$")
ENTRY = re.compile(r"(GPU|PCI|NVS|CPU|NIC|NET)/([0-9a-f]+)-([0-9a-f]+) \((\d+)/([0-9.]+)/([A-Z0-9]+)\)")
SOCKET_USING = re.compile(r"NET/Socket : Using (.*)$")


def socket_devs(lines):
    """dev index -> interface name, from "NET/Socket : Using [0]n0:10.231.8.1<0> [1]n1:…"."""
    for l in lines:
        m = SOCKET_USING.search(l)
        if m:
            return {int(i): n for i, n in re.findall(r"\[(\d+)\]([^:\s]+):", m.group(1))}
    return {}


def nccl_paths(lines):
    """{(gpu bus id, NET dev): (type, bw)} from ncclTopoPrintPaths' lines (INFO, NCCL_GRAPH)."""
    out = {}
    for l in lines:
        m = PATHLINE.match(l)
        if not m or m.group(1) != "GPU":
            continue
        bus = id_to_bus(int(m.group(3), 16))
        for t, _sys, lid, _count, bw, ptype in ENTRY.findall(m.group(4)):
            if t == "NET":
                k = (bus, int(lid, 16))
                if k in out:  # a NET node twice (the same id): keep both types
                    out[k] = (out[k][0] + "+" + ptype, out[k][1])
                else:
                    out[k] = (ptype, float(bw))
    return out


def hook_paths(doc):
    """(gpu bus id, nic name) -> type from erdma-oci-hook's JSON, whatever its nesting: any object
    with a GPU key, a NIC key and a type key."""
    out = {}

    def walk(v):
        if isinstance(v, dict):
            gk = next((k for k in ("gpu", "gpu_bus_id") if isinstance(v.get(k), str)), None)
            nk = next((k for k in ("nic", "netdev", "eri", "name") if isinstance(v.get(k), str)), None)
            tk = next((k for k in ("type", "path") if isinstance(v.get(k), str)), None)
            if gk and nk and tk and ":" in v[gk]:
                out[(v[gk].lower(), v[nk])] = v[tk]
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(doc)
    return out


def classify(logdir, real, hookjson, ifname):
    logs = sorted(os.path.join(logdir, f) for f in os.listdir(logdir) if f.endswith(".log"))
    nccl = {}
    devnames = {}
    for lg in logs:
        lines = list(log_lines(lg))
        devnames.update(socket_devs(lines))
        nccl.update(nccl_paths(lines))
    ours = {}
    tree = {}
    try:
        root = ET.parse(real).getroot()
        par = parents(root)
        for bus, p in gpus_of(root):
            for net in root.iter("net"):
                if net.attrib.get("name") == ifname:
                    tree[bus] = tree_type(p, net, par)
    except (OSError, ET.ParseError) as e:
        print(f"classify: {real}: {e}", file=sys.stderr)
    hook = None
    try:
        with open(hookjson) as f:
            hook = json.load(f)
        ours = hook_paths(hook)
    except (OSError, ValueError) as e:
        print(f"classify: {hookjson}: {e}", file=sys.stderr)
    rows = []
    buses = sorted({b for b, _ in nccl} | set(tree) | {b for b, n in ours if n == ifname})
    for bus in buses:
        n = [(t, bw) for (b, d), (t, bw) in nccl.items() if b == bus and devnames.get(d, str(d)) == ifname]
        rows.append({
            "gpu": bus,
            "nic": ifname,
            "ours": ours.get((bus, ifname)),
            "dump_tree": tree.get(bus),
            "nccl_log": n[0][0] if n else None,
            "nccl_bw": n[0][1] if n else None,
        })
    equal = bool(rows) and all(r["ours"] is not None and r["ours"] == r["nccl_log"] for r in rows)
    print(json.dumps({"rows": rows, "ours_equals_nccl": equal, "net_devs": devnames,
                      "hook_json_read": hook is not None}))


CHANNEL = re.compile(r"Channel (\d+)/(\d+) : (\d+)\[(\d+)\] -> (\d+)\[(\d+)\] \[(send|receive)\] via NET/([^/\s]+)/(\d+)(\S*)")
GRAPHHDR = re.compile(r"^Pattern (\d+), crossNic (\d+), nChannels (\d+), bw ([0-9.]+)/([0-9.]+), type (\w+)/(\w+), sameChannels (\d+)")
GRAPHCH = re.compile(r"^\s*(\d+) : (NET/\S+) (.*?) (NET/\S+)$")


def channels(name, logdir, gpn):
    """Per rank: the NET of each connection NCCL logged ("Channel 00/0 : 0[0] -> 2[2] [send] via
    NET/Socket/1"), and the graphs each fake node searched (ncclTopoPrintGraph; the dumps beside
    are NCCL_GRAPH_DUMP_FILE's)."""
    res = {"variant": name, "ranks": {}, "graphs": {}, "paths": {}, "system": {}}
    for f in sorted(os.listdir(logdir)):
        m = re.match(r"rank(\d+)\.log$", f)
        if not m:
            continue
        r = int(m.group(1))
        lines = list(log_lines(os.path.join(logdir, f)))
        devs = socket_devs(lines)
        # A connection's lines come before the line that ends its algorithm's set-up
        # (`src/transport/generic.cc`): "Connected all rings", "Connected all trees", …
        conns, pending = [], []
        for l in lines:
            c = CHANNEL.search(l)
            if c:
                ch, conn, src, srcdev, dst, dstdev, kind, net, dev, extra = c.groups()
                pending.append({"ch": int(ch), "conn": int(conn), "dir": kind, "from": int(src), "to": int(dst),
                                "nvml": int(srcdev if kind == "send" else dstdev),
                                "net": devs.get(int(dev), dev), "extra": extra, "algo": "?"})
                continue
            for marker, algo in (("Connected all rings", "ring"), ("Connected all trees", "tree"),
                                 ("Connected binomial trees", "pat")):
                if l.startswith(marker):
                    for p in pending:
                        p["algo"] = algo
                    conns += pending
                    pending = []
        conns += pending
        for c in conns:  # point-to-point (ncclSend/ncclRecv) connects connIndex 1 (`enqueue.cc`)
            if c["conn"] == 1:
                c["algo"] = "p2p"
        per_net = {}
        for c in conns:
            per_net.setdefault(f'{c["algo"]} {c["dir"]} {c["net"]}', set()).add(c["ch"])
        res["ranks"][r] = {
            "nvml_dev": conns[0]["nvml"] if conns else None,
            "nets": {k: sorted(v) for k, v in sorted(per_net.items())},
            "conns": [f'{c["algo"]} {c["ch"]:02d}/{c["conn"]} {c["from"]}->{c["to"]} {c["dir"]} {c["net"]}{c["extra"]}'
                      for c in conns],
        }
        # The graphs this rank's node computed, and its GPU -> NET path types.
        graphs, cur = [], None
        for l in lines:
            h = GRAPHHDR.match(l)
            if h:
                cur = {"pattern": int(h.group(1)), "crossNic": int(h.group(2)), "nChannels": int(h.group(3)),
                       "bwIntra": float(h.group(4)), "bwInter": float(h.group(5)), "type": h.group(6) + "/" + h.group(7),
                       "channels": []}
                graphs.append(cur)
                continue
            g = GRAPHCH.match(l)
            if g and cur is not None:
                def nm(x):
                    d = int(x.split("-")[1], 16)
                    return devs.get(d, x)
                cur["channels"].append(f"{int(g.group(1)):2d}: {nm(g.group(2))} {g.group(3)} {nm(g.group(4))}")
        # What sizes the comm, and what a graph file did: "=== System : maxBw …", "Search 0 : 2
        # channels loaded from XML graph", "4 coll channels, … p2p channels per peer", WARNs.
        notes = [l for l in lines if l.startswith("=== System") or "loaded from XML graph" in l
                 or "coll channels," in l or l.startswith("NCCL_GRAPH_FILE") or l.startswith("NCCL_CROSS_NIC")
                 or l.startswith("Could not find a path")]
        try:
            with open(os.path.join(logdir, f), errors="replace") as fh:
                notes += [w.group(0) for w in (re.search(r"NCCL WARN .*$", x.rstrip("\n")) for x in fh) if w]
        except OSError:
            pass
        res.setdefault("notes", {})[r] = notes
        if r % gpn == 0:
            res["graphs"][r] = graphs
            # The system NCCL built (ncclTopoPrint), first time printed.
            sysl, on = [], False
            for l in lines:
                if l.startswith("=== System"):
                    on = True
                elif on and l.startswith("====="):
                    break
                elif on:
                    sysl.append(l)
            res["system"][r] = sysl
        p = nccl_paths(lines)
        res["paths"][r] = {f"{bus} -> {devs.get(d, d)}": f"{t}/{bw}" for (bus, d), (t, bw) in sorted(p.items())}
    print(json.dumps(res))


PATTERNS = {1: "balanced tree", 2: "split tree", 3: "tree", 4: "ring", 5: "nvls", 6: "collnet direct"}


def report(path):
    with open(path) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    for d in lines:
        case = d.get("case")
        if case == "nic-choice":
            t = d.get("table") or {}
            print(f"== nic-choice {d.get('variant')}: ok={d.get('ok')} topo_loaded={d.get('topo_loaded')} {d.get('extra', '')}")
            for r, v in sorted((t.get("ranks") or {}).items(), key=lambda x: int(x[0])):
                nets = "; ".join(f"{k} ch{','.join(map(str, ch))}" for k, ch in v["nets"].items())
                print(f"  rank {r} (nvml {v['nvml_dev']}): {nets}")
            for r, gs in sorted((t.get("graphs") or {}).items(), key=lambda x: int(x[0])):
                for g in gs:
                    print(f"  node of rank {r}: {PATTERNS.get(g['pattern'], g['pattern'])} crossNic {g['crossNic']} "
                          f"nChannels {g['nChannels']} bw {g['bwIntra']}/{g['bwInter']} type {g['type']}")
                    for c in g["channels"]:
                        print(f"      {c}")
            for r, ps in sorted((t.get("paths") or {}).items(), key=lambda x: int(x[0])):
                print(f"  paths seen by rank {r}: " + ", ".join(f"{k} {v}" for k, v in ps.items()))
            for r, ns in sorted((t.get("notes") or {}).items(), key=lambda x: int(x[0])):
                if ns:
                    print(f"  rank {r} notes: " + " | ".join(ns))
            for r, sl in sorted((t.get("system") or {}).items(), key=lambda x: int(x[0])):
                print(f"  system of the node of rank {r}: " + " | ".join(x.strip() for x in sl))
        elif case == "classify":
            res = d.get("result") or {}
            print(f"== classify on {d.get('netdev')}: ok={d.get('ok')} hook_rc={d.get('hook_rc')} {d.get('hook_stderr', '')}")
            for row in res.get("rows", []):
                print(f"  GPU {row['gpu']} -> {row['nic']}: ours {row['ours']}, dump tree {row['dump_tree']}, "
                      f"NCCL {row['nccl_log']} (bw {row['nccl_bw']})")
        else:
            keep = {k: v for k, v in d.items() if k not in ("case", "ok")}
            print(f"== {case}: ok={d.get('ok')}")
            for k, v in keep.items():
                print(f"  {k}: {json.dumps(v) if not isinstance(v, str) else v}")


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    a = sys.argv[2:]
    if cmd == "rank":
        rank()
    elif cmd == "merge-dumps":
        merge_dumps(a[0], a[1:])
    elif cmd == "variants":
        variants(a[0], a[1], int(a[2]))
    elif cmd == "classify":
        classify(a[0], a[1], a[2], a[3])
    elif cmd == "channels":
        channels(a[0], a[1], int(a[2]))
    elif cmd == "report":
        report(a[0])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
