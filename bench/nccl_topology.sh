#!/usr/bin/env bash
# NCCL's own choices held against the settings erdma-oci-hook derives: which network NCCL takes,
# whether a missing topology file stops it, whether our PCIe path types are NCCL's, and which NIC
# each GPU and channel uses when a host has two. Ranks are separate processes (torch.distributed
# with NCCL, one GPU each), NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH,ENV.
#
#   bench/nccl_topology.sh [OUT_DIR]
#
# 1. `socket-fallback` / `fail-closed`: two ranks in two network namespaces joined by a veth pair
#    (as bench/nccl_two_netns.sh), NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, each with
#    `erdma-oci-hook env --netns /run/netns/NS` (the `one` sysfs fixture: NCCL_IB_HCA names an
#    erdma device the host lacks). Without NCCL_NET: "NET/IB : No device found", "Using network
#    Socket", the all-reduce completes. With the hook's NCCL_NET=IB: init fails, "Failed to
#    initialize any NET plugin", torch says invalid usage.
# 2. `topo-missing`: case 1's fallback with NCCL_TOPO_FILE=/nonexistent/x.xml: NCCL logs "Could
#    not open XML topology file" and goes on, so a generated file's path is ours to check.
# 3. `classify`: one rank per GPU, each its own host to NCCL (NCCL_HOSTID, `src/misc/utils.cc`
#    getHostHash) so that the NIC stays in its topology, on the host's interface (the default
#    route's) over NET/Socket. NCCL's GPU -> NET path types (ncclTopoPrintPaths, INFO/GRAPH),
#    the type computed from NCCL_TOPO_DUMP_FILE's tree, and `erdma-oci-hook topology --json
#    --netdev IF` are compared per GPU bus id.
# 4. `nic-choice`: two fake nodes (NCCL_HOSTID, half the GPUs each), each in a network namespace
#    with two interfaces n0 and n1, one veth pair per NIC between the namespaces;
#    NCCL_NET=Socket, NCCL_SOCKET_IFNAME==n0,n1, NCCL_RUNTIME_CONNECT=0 (rings and trees connect
#    at init). Variants, the files written from case 3's dumps (bench/nccl_topology.py variants):
#    a: no topology file;
#    b: both NICs in one <nic> under a CPU node of their own (SYS from every GPU);
#    c: n0 under the CPU of the first node's GPUs, n1 under a second CPU with the second node's;
#    c2: in each node its first GPU on the CPU of n0, its second on the CPU of n1;
#    d0 / d1: b with NCCL_CROSS_NIC=0 / 1;
#    e: the form a first draft of erdma-oci-hook wrote (a <cpu> per NUMA node, its NICs' <nic> straight under it,
#       no <pci> or <gpu>; erdma-oci-hook writes no topology file, and this is one reason), n0 on
#       the NUMA node of the first node's GPUs, n1 on the second's;
#    f: no file, every GPU in the first node and one rank (sharing GPU 0) in the second;
#    bp, cp, c2p: b, c, c2 with each NIC in a <pci> of its own (a <nic> straight under a <cpu>
#       loses its NUMA node: bench/nccl_topology.py says why);
#    c2p-x0 / c2p-x1: c2p with NCCL_CROSS_NIC=0 / 1;
#    ERI-like speeds (each <net> speed="MBPS", Mbit/s, over the veth's 10000; NCCL takes the
#    file's value): s-sys-200 / s-sys-100: bp at 200 / 100 Gbit/s; s-sys-200-x0 / -x1: with
#    NCCL_CROSS_NIC=0 / 1; s-phb-200: both NICs in a <pci> each under the GPUs' CPU (PHB from
#    every GPU); s-c2p-200: c2p at 200 Gbit/s; s-graph / s-graph-rev: s-sys-200 with an
#    NCCL_GRAPH_FILE per fake node (ring and tree, 2 channels of all the node's GPUs, channel 0 on
#    NET dev 0 and 1 on dev 1 / the other way round); s-p2p: s-sys-200 and, after the all-reduce,
#    an all-to-all (ncclSend/ncclRecv; their connections are "Channel NN/1").
#    Recorded: the NET of each connection ("Channel 00/0 : 0[0] -> 2[2] [send] via
#    NET/Socket/1"), the graphs each node searched (ncclTopoPrintGraph, NCCL_GRAPH_DUMP_FILE),
#    the system NCCL built (ncclTopoPrint), each GPU's path types and NCCL_TOPO_DUMP_FILE.
#
# There is no eRDMA device on a GPU test host: case 1 takes its devices from testdata/sysfs/one,
# and every network is NCCL's socket transport.
#
# Needs root (namespaces, mknod), two GPUs (case 4 wants four; with two it runs one GPU per fake
# node), nvidia-smi, and:
#   PYTHON          a python with torch built with NCCL     (default: the first that imports torch)
#   ERDMA_OCI_HOOK  erdma-oci-hook                           (default: on PATH)
#   IP              iproute2's ip, a command line            (default: ip)
#   ONLY            `nic`: case 4 alone (case 3's NCCL job still runs, for the topology dump the
#                   variants are written from; no hook needed); default all
#   NIC             case 4's variants to run, names separated by spaces (default: all)
# Prints one JSON line per case (also OUT_DIR/summary.jsonl) and a report (OUT_DIR/report.txt);
# logs, dumps and topology files go to OUT_DIR/logs, packed at the end into OUT_DIR/logs.tar.gz.
# Each NCCL job is stopped after 120 s. Exits 0 only when cases 1 and 2 are as expected and
# case 3's types are equal (with ONLY=nic, whenever the script itself runs through); case 4 is
# an observation.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT/logs"
IP=${IP:-ip}
HOOK=${ERDMA_OCI_HOOK:-erdma-oci-hook}
ONLY=${ONLY:-all}
NIC=${NIC:-}
HELPER=$PWD/bench/nccl_topology.py
. bench/nccl_common.sh
torch_python nccl_topology

A=erdma-topo-a
B=erdma-topo-b
C=erdma-topo-c
D=erdma-topo-d
WORK=$(mktemp -d)
cleanup() {
    for ns in "$A" "$B" "$C" "$D"; do $IP netns delete "$ns" 2>/dev/null || true; done
    rm -rf "$WORK"
    tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# What NCCL runs with in every job. NVLink multicast stays off (NVLS can take the host's GPUs
# out of service for others).
COMMON="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH,ENV NCCL_NVLS_ENABLE=0
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1"

nvidia-smi --query-gpu=index,pci.bus_id,name,driver_version --format=csv,noheader > "$OUT/machine.txt"
"$PYTHON" -c 'import torch; print("torch", torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())))' >> "$OUT/machine.txt"
uname -r >> "$OUT/machine.txt"
NGPU=$(nvidia-smi -L | grep -c '^GPU ')
[ "$NGPU" -ge 2 ] || { echo "nccl_topology: needs two GPUs, found $NGPU" >&2; exit 2; }
GPN=$((NGPU / 2))
[ "$GPN" -gt 2 ] && GPN=2
cat "$OUT/machine.txt"

PORT=29600
# job DIR WORLD MASTER SPEC...: one NCCL job, SPEC = "RANK|GPU|NETNS|ENV…" (NETNS - for the
# host's). Each rank's log is DIR/rankN.log, its result DIR/rankN.json; true when all summed.
job() {
    local dir=$1 world=$2 master=$3
    shift 3
    mkdir -p "$dir"
    local pids=() rc=0 spec r gpu ns envs
    for spec in "$@"; do
        IFS='|' read -r r gpu ns envs <<<"$spec"
        local pre=()
        # shellcheck disable=SC2206
        [ "$ns" != - ] && pre=($IP netns exec "$ns")
        # shellcheck disable=SC2086
        timeout 120 ${pre[@]+"${pre[@]}"} env $COMMON $envs RANK="$r" WORLD="$world" MASTER="$master" \
            CUDA_VISIBLE_DEVICES="$gpu" RESULT="$dir/rank$r.json" "$PYTHON" "$HELPER" rank \
            > "$dir/rank$r.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    PORT=$((PORT + 1))
    return "$rc"
}

result() { cat "$1" 2>/dev/null || echo null; }
has() { grep -q -- "$1" "$2" 2>/dev/null && echo true || echo false; }
quote() { grep -h -m1 -- "$1" "$2" 2>/dev/null | sed 's/.*NCCL [A-Z]* //' | tr -d '"\\' || true; }

# --- 1 and 2: two namespaces, the hook's settings ------------------------------------------
if [ "$ONLY" != nic ]; then
    netns_pair "$A" "$B"

    # The fixture host: the `one` scenario's sysfs and the /dev nodes its dev.txt lists.
    . bench/fixture_host.sh
    (fixture_host "$WORK" one)
    derived() {
        ERDMA_OCI_HOOK_CONFIG="$WORK/oci-hook.toml" "$HOOK" env --netns "/run/netns/$1" --format env-file
    }
    derived "$A" > "$OUT/logs/hook-env-a.txt"
    derived "$B" > "$OUT/logs/hook-env-b.txt"
    HOOK_NET=$(sed -n 's/^NCCL_NET=//p' "$OUT/logs/hook-env-a.txt")
    ENV_A=$(grep -v '^NCCL_NET=' "$OUT/logs/hook-env-a.txt" | tr '\n' ' ')
    ENV_B=$(grep -v '^NCCL_NET=' "$OUT/logs/hook-env-b.txt" | tr '\n' ' ')
    NET_OFF="NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1"

    two() {  # two NAME EXTRA: the two namespaced ranks with the hook's settings (no NCCL_NET) + EXTRA
        job "$OUT/logs/$1" 2 "10.231.7.1:$PORT" "0|0|$A|$ENV_A $NET_OFF $2" "1|1|$B|$ENV_B $NET_OFF $2" || true
    }
    two socket-fallback ""
    d=$OUT/logs/socket-fallback
    printf '{"case":"socket-fallback","ok":%s,"env_a":"%s","no_ib_device":%s,"using_socket":%s,"quotes":["%s","%s","%s"],"rank0":%s,"rank1":%s}\n' \
        "$(grep -q '"sum_ok": true' "$d/rank0.json" 2>/dev/null && grep -q '"sum_ok": true' "$d/rank1.json" 2>/dev/null \
            && [ "$(has 'NET/IB : No device found' "$d/rank0.log")" = true ] && [ "$(has 'Using network Socket' "$d/rank0.log")" = true ] \
            && echo true || echo false)" \
        "$ENV_A" "$(has 'NET/IB : No device found' "$d/rank0.log")" "$(has 'Using network Socket' "$d/rank0.log")" \
        "$(quote 'NET/IB : No device found' "$d/rank0.log")" "$(quote 'NET/Socket : Using' "$d/rank0.log")" \
        "$(quote 'Using network' "$d/rank0.log")" \
        "$(result "$d/rank0.json")" "$(result "$d/rank1.json")" | tee -a "$OUT/summary.jsonl"

    # The hook's NCCL_NET as it gives it; IB if it gives none, so that NCCL's answer is seen anyway.
    two fail-closed "NCCL_NET=${HOOK_NET:-IB}"
    d=$OUT/logs/fail-closed
    printf '{"case":"fail-closed","ok":%s,"hook_nccl_net":"%s","failed_any_net":%s,"quotes":["%s","%s"],"rank0":%s,"rank1":%s}\n' \
        "$([ "$HOOK_NET" = IB ] && ! grep -q '"sum_ok": true' "$d/rank0.json" "$d/rank1.json" 2>/dev/null \
            && [ "$(has 'Failed to initialize any NET plugin' "$d/rank0.log")" = true ] \
            && grep -qi 'invalid usage' "$d/rank0.json" 2>/dev/null && echo true || echo false)" \
        "$HOOK_NET" "$(has 'Failed to initialize any NET plugin' "$d/rank0.log")" \
        "$(quote 'Failed to initialize NET plugin IB' "$d/rank0.log")" "$(quote 'Failed to initialize any NET plugin' "$d/rank0.log")" \
        "$(result "$d/rank0.json")" "$(result "$d/rank1.json")" | tee -a "$OUT/summary.jsonl"

    two topo-missing "NCCL_TOPO_FILE=/nonexistent/x.xml"
    d=$OUT/logs/topo-missing
    printf '{"case":"topo-missing","ok":%s,"could_not_open":%s,"quotes":["%s"],"rank0":%s,"rank1":%s}\n' \
        "$(grep -q '"sum_ok": true' "$d/rank0.json" 2>/dev/null && grep -q '"sum_ok": true' "$d/rank1.json" 2>/dev/null \
            && [ "$(has 'Could not open XML topology file /nonexistent/x.xml' "$d/rank0.log")" = true ] && echo true || echo false)" \
        "$(has 'Could not open XML topology file' "$d/rank0.log")" "$(quote 'Could not open XML topology file' "$d/rank0.log")" \
        "$(result "$d/rank0.json")" "$(result "$d/rank1.json")" | tee -a "$OUT/summary.jsonl"
fi

# --- 3: our path types against NCCL's, on the host's own interface -----------------------------
# The interface: the default route's if it is a PCI function with an IPv4 address (what the
# hook can place and NCCL's socket transport can use), else the first such, else the default
# route's anyway (then the hook refuses it, and that is the result).
IF=$(awk '$2 == "00000000" { print $1; exit }' /proc/net/route)
placeable() {
    [ "$1" != lo ] && readlink -f "/sys/class/net/$1/device" | grep -q '^/sys/devices/pci' \
        && [ -n "$($IP -4 -o addr show dev "$1" 2>/dev/null)" ]
}
if [ -z "$IF" ] || ! placeable "$IF"; then
    for n in /sys/class/net/*; do
        if placeable "${n##*/}"; then IF=${n##*/}; break; fi
    done
fi
[ -n "$IF" ] || IF=eth0
ADDR=$($IP -4 -o addr show dev "$IF" | awk '{ print $4 }' | cut -d/ -f1 | head -n 1)
[ -n "$ADDR" ] || ADDR=127.0.0.1
d=$OUT/logs/classify
specs=()
for ((r = 0; r < NGPU; r++)); do
    specs+=("$r|$r|-|NCCL_HOSTID=classify-$r NCCL_NET=Socket NCCL_SOCKET_IFNAME==$IF NCCL_TOPO_DUMP_FILE=$d/topo-dump-r$r.xml NCCL_TOPO_DUMP_FILE_RANK=$r")
done
job "$d" "$NGPU" "$ADDR:$PORT" "${specs[@]}" || true
"$PYTHON" "$HELPER" merge-dumps "$OUT/topo-real.xml" "$d"/topo-dump-r*.xml || true
cp "$OUT/topo-real.xml" "$d/" 2>/dev/null || true
if [ "$ONLY" != nic ]; then
    hook_rc=0
    "$HOOK" topology --json --netdev "$IF" > "$OUT/hook-topology.json" 2> "$d/hook-topology.err" || hook_rc=$?
    cp "$OUT/hook-topology.json" "$d/"
    cls=$("$PYTHON" "$HELPER" classify "$d" "$OUT/topo-real.xml" "$OUT/hook-topology.json" "$IF" || echo '{}')
    printf '{"case":"classify","ok":%s,"netdev":"%s","addr":"%s","hook_rc":%s,"hook_stderr":"%s","result":%s,"nic_quote":"%s"}\n' \
        "$(echo "$cls" | grep -q '"ours_equals_nccl": true' && echo true || echo false)" "$IF" "$ADDR" "$hook_rc" \
        "$(head -c 300 "$d/hook-topology.err" | tr -d '"\\' | tr '\n' ' ')" "$cls" \
        "$(quote "network path (name = $IF)" "$d/rank0.log")" | tee -a "$OUT/summary.jsonl"
fi

# --- 4: two fake nodes with two NICs each ---------------------------------------------------------
$IP netns add "$C"
$IP netns add "$D"
$IP link add n0 netns "$C" type veth peer name n0 netns "$D"
$IP link add n1 netns "$C" type veth peer name n1 netns "$D"
$IP -n "$C" addr add 10.231.8.1/24 dev n0
$IP -n "$D" addr add 10.231.8.2/24 dev n0
$IP -n "$C" addr add 10.231.9.1/24 dev n1
$IP -n "$D" addr add 10.231.9.2/24 dev n1
for ns in "$C" "$D"; do
    for l in lo n0 n1; do $IP -n "$ns" link set "$l" up; done
done
TOPO=$OUT/logs/topo-files
mkdir -p "$TOPO"
"$PYTHON" "$HELPER" variants "$OUT/topo-real.xml" "$TOPO" "$GPN" 2> "$TOPO/variants.txt" || true

# nic VARIANT EXTRA [LAYOUT]: ranks 0..GPN-1 in C (node a, GPUs 0..GPN-1), the next GPN in D;
# LAYOUT "f": ranks 0..NGPU-1 in C on every GPU, one more in D on GPU 0. In EXTRA, @NODE@ is
# the rank's fake node, a or b. Only the variants NIC names, if it names any.
nic() {
    local v=$1 extra=$2 layout=${3:-}
    if [ -n "$NIC" ] && [[ " $NIC " != *" $v "* ]]; then return 0; fi
    local dir=$OUT/logs/nic-$v specs=() world r node
    if [ "$layout" = f ]; then
        world=$((NGPU + 1))
        for ((r = 0; r < NGPU; r++)); do specs+=("$r|$r|$C|NCCL_HOSTID=fake-a"); done
        specs+=("$NGPU|0|$D|NCCL_HOSTID=fake-b")
    else
        world=$((2 * GPN))
        for ((r = 0; r < world; r++)); do
            if [ "$r" -lt "$GPN" ]; then specs+=("$r|$r|$C|NCCL_HOSTID=fake-a"); else specs+=("$r|$r|$D|NCCL_HOSTID=fake-b"); fi
        done
    fi
    local i
    for i in "${!specs[@]}"; do
        r=${specs[$i]%%|*}
        node=a
        [[ ${specs[$i]} == *NCCL_HOSTID=fake-b* ]] && node=b
        specs[i]+=" NCCL_NET=Socket NCCL_SOCKET_IFNAME==n0,n1 NCCL_RUNTIME_CONNECT=0 NELEM=1048576 NCCL_GRAPH_DUMP_FILE=$dir/graph-r$r.xml NCCL_GRAPH_DUMP_FILE_RANK=$r"
        specs[i]+=" NCCL_TOPO_DUMP_FILE=$dir/topo-dump-r$r.xml NCCL_TOPO_DUMP_FILE_RANK=$r ${extra//@NODE@/$node}"
    done
    local ok=true
    job "$dir" "$world" "10.231.8.1:$PORT" "${specs[@]}" || ok=false
    local gpn=$GPN
    [ "$layout" = f ] && gpn=$NGPU
    printf '{"case":"nic-choice","variant":"%s","ok":%s,"extra":"%s","topo_loaded":%s,"table":%s}\n' \
        "$v" "$ok" "$extra" "$(has 'Loading topology file' "$dir/rank0.log")" \
        "$("$PYTHON" "$HELPER" channels "$v" "$dir" "$gpn" || echo null)" | tee -a "$OUT/summary.jsonl"
}
nic a ""
if [ -f "$TOPO/b.xml" ]; then
    nic b "NCCL_TOPO_FILE=$TOPO/b.xml"
    nic bp "NCCL_TOPO_FILE=$TOPO/bp.xml"
    nic c "NCCL_TOPO_FILE=$TOPO/c.xml"
    nic cp "NCCL_TOPO_FILE=$TOPO/cp.xml"
    if [ -f "$TOPO/c2.xml" ]; then
        nic c2 "NCCL_TOPO_FILE=$TOPO/c2.xml"
        nic c2p "NCCL_TOPO_FILE=$TOPO/c2p.xml"
        nic c2p-x0 "NCCL_TOPO_FILE=$TOPO/c2p.xml NCCL_CROSS_NIC=0"
        nic c2p-x1 "NCCL_TOPO_FILE=$TOPO/c2p.xml NCCL_CROSS_NIC=1"
    fi
    nic d0 "NCCL_TOPO_FILE=$TOPO/b.xml NCCL_CROSS_NIC=0"
    nic d1 "NCCL_TOPO_FILE=$TOPO/b.xml NCCL_CROSS_NIC=1"
    nic e "NCCL_TOPO_FILE=$TOPO/e.xml"
    if [ -f "$TOPO/s-sys-200.xml" ]; then
        nic s-sys-200 "NCCL_TOPO_FILE=$TOPO/s-sys-200.xml"
        nic s-sys-200-x0 "NCCL_TOPO_FILE=$TOPO/s-sys-200.xml NCCL_CROSS_NIC=0"
        nic s-sys-200-x1 "NCCL_TOPO_FILE=$TOPO/s-sys-200.xml NCCL_CROSS_NIC=1"
        nic s-sys-100 "NCCL_TOPO_FILE=$TOPO/s-sys-100.xml"
        nic s-phb-200 "NCCL_TOPO_FILE=$TOPO/s-phb-200.xml"
        [ -f "$TOPO/s-c2p-200.xml" ] && nic s-c2p-200 "NCCL_TOPO_FILE=$TOPO/s-c2p-200.xml"
        nic s-p2p "NCCL_TOPO_FILE=$TOPO/s-sys-200.xml OP=alltoall"
        if [ -f "$TOPO/graph-b.xml" ]; then
            nic s-graph "NCCL_TOPO_FILE=$TOPO/s-sys-200.xml NCCL_GRAPH_FILE=$TOPO/graph-@NODE@.xml"
            nic s-graph-rev "NCCL_TOPO_FILE=$TOPO/s-sys-200.xml NCCL_GRAPH_FILE=$TOPO/graph-rev-@NODE@.xml"
        fi
    fi
else
    echo '{"case":"nic-choice","variant":"b-d","ok":false,"why":"no topology dump from case classify"}' | tee -a "$OUT/summary.jsonl"
fi
[ "$NGPU" -ge 4 ] && nic f "" f

"$PYTHON" "$HELPER" report "$OUT/summary.jsonl" | tee "$OUT/report.txt"

# The verdict: cases 1 and 2 as expected, case 3's types equal.
if [ "$ONLY" = nic ]; then
    echo "nccl_topology: case 4 only (ONLY=nic), an observation (logs in $OUT)"
elif grep -q '"case":"socket-fallback","ok":true' "$OUT/summary.jsonl" \
    && grep -q '"case":"fail-closed","ok":true' "$OUT/summary.jsonl" \
    && grep -q '"case":"topo-missing","ok":true' "$OUT/summary.jsonl" \
    && grep -q '"case":"classify","ok":true' "$OUT/summary.jsonl"; then
    echo "nccl_topology: as expected (logs in $OUT)"
else
    echo "nccl_topology: NOT as expected (logs in $OUT)" >&2
    exit 1
fi
