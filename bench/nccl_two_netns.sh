#!/usr/bin/env bash
# NCCL in two network namespaces, with the settings erdma-oci-hook derives for each: two ranks
# (one GPU each) in two namespaces joined by a veth pair, as two pods on a CNI network, with
# NCCL's peer-to-peer and shared-memory transports off so that it must use its network path.
#
#   bench/nccl_two_netns.sh [OUT_DIR]
#
# 1. `derived`: each rank gets `erdma-oci-hook env --netns /run/netns/NS` for its namespace
#    (NCCL_SOCKET_IFNAME==v0 / ==v1, read from the namespace) and runs an all-reduce; it must
#    complete with the right sum.
# 2. `host-name`: the same with NCCL_SOCKET_IFNAME==eth0, the host's interface name as
#    erdma-kit set it before it read the container's namespace; NCCL must stop at bootstrap
#    ("no socket interface found"), which shows the derivation is what makes case 1 work.
#
# There is no eRDMA device on a GPU test host: the devices come from the `one` sysfs fixture
# (testdata/sysfs), so NCCL_IB_HCA names `erdma_0`, which the host does not have, and NCCL's
# network is its socket transport (NET/Socket). What is tested is the interface derivation and
# NCCL's bootstrap over the container's own interface, not RDMA.
#
# Needs root (namespaces, mknod), two GPUs, and:
#   PYTHON       a python with torch built with NCCL     (default: the first that imports torch)
#   ERDMA_OCI_HOOK  erdma-oci-hook                       (default: on PATH)
#   IP           iproute2's ip, a command line           (default: ip)
# Prints one JSON line per case (also OUT_DIR/summary.jsonl) and writes each rank's log and
# result into OUT_DIR; exits 0 only when case 1 completes and case 2 stops at bootstrap.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT"
IP=${IP:-ip}
HOOK=${ERDMA_OCI_HOOK:-erdma-oci-hook}
. bench/nccl_common.sh
torch_python nccl_two_netns

A=erdma-nccl-a
B=erdma-nccl-b
WORK=$(mktemp -d)
cleanup() {
    $IP netns delete "$A" 2>/dev/null || true
    $IP netns delete "$B" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# The two namespaces and the veth pair between them.
netns_pair "$A" "$B"

# The fixture host: the `one` scenario's sysfs and the /dev nodes its dev.txt lists.
. bench/fixture_host.sh
fixture_host "$WORK" one

cat > "$WORK/rank.py" <<'EOF'
import json, os, sys, time
import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
torch.cuda.set_device(0)
t0 = time.monotonic()
out = {"rank": rank, "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version()))}
try:
    dist.init_process_group("nccl", init_method="tcp://10.231.7.1:29517", rank=rank, world_size=2)
    x = torch.full((1 << 22,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    out["sum_ok"] = bool((x == 3.0).all().item())
    dist.destroy_process_group()
except Exception as e:  # the failure NCCL reports is the result of case 2
    out["error"] = str(e).splitlines()[0][:300]
out["seconds"] = round(time.monotonic() - t0, 2)
with open(os.environ["RESULT"], "w") as f:  # NCCL logs to stdout: the result has a file
    f.write(json.dumps(out) + "\n")
sys.exit(0 if out.get("sum_ok") else 1)
EOF

# `env` lines of the derived settings for namespace $1, as `KEY=VALUE` words.
derived() {
    "$HOOK" env --netns "/run/netns/$1" --format env-file
}

run_case() {
    local name=$1 env_a=$2 env_b=$3
    local pids=() rc=0
    for r in 0 1; do
        local ns=$A envs=$env_a
        [ "$r" = 1 ] && ns=$B envs=$env_b
        # shellcheck disable=SC2086
        timeout 180 $IP netns exec "$ns" env $envs \
            NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
            CUDA_VISIBLE_DEVICES=$r RANK=$r RESULT="$OUT/$name-rank$r.json" "$PYTHON" "$WORK/rank.py" \
            > "$OUT/$name-rank$r.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    local transport bootstrap
    transport=$(grep -h 'NET/Socket : Using\|Using network' "$OUT/$name-rank0.log" | sed 's/.*NCCL INFO //' | sort -u | tr -d '"\\' | tr '\n' '|' || true)
    bootstrap=$(grep -h 'Bootstrap' "$OUT/$name-rank0.log" | head -n 2 | sed 's/.*NCCL [A-Z]* //' | tr -d '"\\' | tr '\n' '|' || true)
    printf '{"case":"%s","ok":%s,"socket_ifname":["%s","%s"],"transport":"%s","bootstrap":"%s","rank0":%s,"rank1":%s}\n' \
        "$name" "$([ "$rc" = 0 ] && echo true || echo false)" \
        "$(echo "$env_a" | tr ' ' '\n' | sed -n 's/^NCCL_SOCKET_IFNAME=//p')" \
        "$(echo "$env_b" | tr ' ' '\n' | sed -n 's/^NCCL_SOCKET_IFNAME=//p')" \
        "$transport" "$bootstrap" \
        "$(cat "$OUT/$name-rank0.json" 2>/dev/null || echo null)" \
        "$(cat "$OUT/$name-rank1.json" 2>/dev/null || echo null)" | tee -a "$OUT/summary.jsonl"
}

ENV_A=$(derived "$A" | tr '\n' ' ')
ENV_B=$(derived "$B" | tr '\n' ' ')
run_case derived "$ENV_A" "$ENV_B"
HOST_A=$(echo "$ENV_A" | sed 's/NCCL_SOCKET_IFNAME=[^ ]*/NCCL_SOCKET_IFNAME==eth0/')
HOST_B=$(echo "$ENV_B" | sed 's/NCCL_SOCKET_IFNAME=[^ ]*/NCCL_SOCKET_IFNAME==eth0/')
run_case host-name "$HOST_A" "$HOST_B"

# The verdict: the derived settings work, the host's name stops NCCL at bootstrap.
if grep -q '"case":"derived","ok":true' "$OUT/summary.jsonl" \
    && grep -q '"case":"host-name","ok":false' "$OUT/summary.jsonl" \
    && grep -q 'no socket interface found' "$OUT/host-name-rank0.log"; then
    echo "nccl_two_netns: as expected (logs in $OUT)"
else
    echo "nccl_two_netns: NOT as expected (logs in $OUT)" >&2
    exit 1
fi
