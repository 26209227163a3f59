#!/usr/bin/env bash
# Container start through the CRI, as kubelet does it (CreateContainer + StartContainer on a
# running host-network pod; kube/examples/cri_start.rs), with the NRI plugin against plain
# containerd/runc on the same pod spec, and against erdma-runtime as a containerd runtime
# handler, in one run, the variants interleaved round by round.
#
#   bench/nri_start.sh [RUNS]            (default 100)
#   ONLY=nri bench/nri_start.sh [RUNS]   the four NRI host-network variants alone
#
# Beside each variant's percentiles, paired differences (`cri_start --pair`): per round, one
# variant's time minus another's, its median and spread.
#
# Four private containerd 1.7 instances (Debian 13's, which scripts/setup puts in
# /opt/erdma-ci/containerd-1.7; CONTAINERD17_BIN=dir overrides):
#   A: NRI off; handlers runc (default) and erdma (erdma-runtime as the runc binary)
#   B: NRI on, erdma-nri-plugin connected; handler runc
#   C: NRI on, no plugin (what containerd's NRI path costs by itself)
#   D: as A (how far two identical instances differ: the noise floor of the comparison)
# Variants:
#   plain                    A, runc, container does not ask
#   plain, 2nd containerd    D, runc, does not ask
#   nri on, no plugin        C, runc, does not ask
#   nri, no ask              B, runc, container does not ask (the plugin is called, answers nothing)
#   nri, ask all             B, runc, ERDMA_VISIBLE_DEVICES=all (nodes, memlock, NCCL env)
#   nri on, given directly   C, runc, the same device nodes and env in the container's own CRI
#                            config (`erdma-oci-hook cdi generate`'s `all`, `erdma-oci-hook
#                            env`), no plugin: what containerd and runc cost to apply what the
#                            plugin adds, so that `nri, ask all` minus this is the plugin's
#                            own cost (the memlock rlimit aside: the CRI has no field for it)
#   erdma-runtime, no ask    A, erdma, does not ask
#   erdma-runtime, ask all   A, erdma, ERDMA_VISIBLE_DEVICES=all
#   nri, no ask, pod net     B, runc, a pod on B's CNI network (`ptp`, Debian's plugins in
#                            /usr/lib/cni), does not ask
#   nri, ask all, pod net    the same asking: the plugin also reads the pod's network namespace
#                            for NCCL_SOCKET_IFNAME (a thread joins it, two rtnetlink dumps)
# Host: the `two` sysfs fixture with mknod'd nodes; memlock 4 MiB (the default, unlimited, is
# above this machine's hard limit and runc would refuse it).
# Needs root, docker (to make the busybox image archive), runc, busybox-static, jq.
# Dated figures: docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-100}
C17=${CONTAINERD17_BIN:-/opt/erdma-ci/containerd-1.7/usr/bin}
[ "$(id -u)" -eq 0 ] || { echo "nri_start: needs root" >&2; exit 1; }
[ -x "$C17/containerd" ] || { echo "nri_start: no containerd 1.7 in $C17 (run scripts/setup)" >&2; exit 1; }

cargo build -q --release -p erdma-kube --bin erdma-nri-plugin --example cri_start -p erdma-oci-hook --bin erdma-oci-hook
ERDMA_RUNTIME=${ERDMA_RUNTIME:-$(scripts/build-runtime)}
BIN=$PWD/target/release

WORK=$(mktemp -d /tmp/erdma-bench-nri.XXXXXX)
PIDS=()
cleanup() {
    set +e
    # Containers a failed run left (pods are removed by cri_start when it finishes): through
    # each instance's runc root, before containerd goes.
    for inst in a b c d; do
        for id in $(runc --root "$WORK/$inst/runc" list -q 2>/dev/null); do runc --root "$WORK/$inst/runc" delete --force "$id" 2>/dev/null; done
    done
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    for inst in a b c d; do
        grep " $WORK/$inst/" /proc/mounts | awk '{print $2}' | sort -r | xargs -r umount -l 2>/dev/null
    done
    pkill -f "containerd-shim-runc-v2 .*-address $WORK/" 2>/dev/null
    [ "${KEEP_WORK:-0}" = 1 ] && echo "kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT

. bench/fixture_host.sh
fixture_host "$WORK"
# What the plugin gives an asking host-network container on this host: the device nodes of
# the CDI spec's `all` device with the spec's own (rdma_cm), and the env `erdma-oci-hook env`
# derives for the host's network (the CDI spec leaves NCCL_SOCKET_IFNAME out: it serves
# containers on any network).
"$BIN/erdma-oci-hook" cdi generate >"$WORK/cdi.json"
"$BIN/erdma-oci-hook" env --format json >"$WORK/env.json"
jq --slurpfile env "$WORK/env.json" \
    '{env: ($env[0].env | to_entries | map("\(.key)=\(.value)")), deviceNodes: ((.containerEdits.deviceNodes // []) + (.devices[] | select(.name == "all") | .containerEdits.deviceNodes // []))}' \
    "$WORK/cdi.json" >"$WORK/edits.json"

for inst in a b c d; do
    nri=false; case $inst in a|d) nri=true ;; esac  # `disable`: NRI off in A and D
    mkdir -p "$WORK/$inst/plugins"
    cat >"$WORK/$inst/config.toml" <<EOF
version = 2
root = "$WORK/$inst/root"
state = "$WORK/$inst/state"
[grpc]
  address = "$WORK/$inst/containerd.sock"
[plugins."io.containerd.nri.v1.nri"]
  disable = $nri
  socket_path = "$WORK/$inst/nri.sock"
  plugin_path = "$WORK/$inst/plugins"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/erdma-bench/busybox:1"
  # No CAP_SYS_RESOURCE here: containerd may not lower the pause container's OOM score below
  # its own, as in a user namespace.
  restrict_oom_score_adj = true
  # Pod network namespaces under the state directory, unmounted with the rest at the end.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$WORK/$inst/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      Root = "$WORK/$inst/runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.erdma]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.erdma.options]
      BinaryName = "$ERDMA_RUNTIME"
      Root = "$WORK/$inst/runc"
EOF
    mkdir -p "$WORK/$inst/cni"
    cat >"$WORK/$inst/cni/10-bench.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "erdma-bench-$inst", "plugins": [{"type": "ptp", "ipMasq": false,
 "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.253.$((RANDOM % 200)).0/24"}]], "dataDir": "$WORK/$inst/ipam"}}]}
EOF
    PATH="$C17:$PATH" setsid "$C17/containerd" --config "$WORK/$inst/config.toml" </dev/null >"$WORK/$inst/containerd.log" 2>&1 &
    PIDS+=($!)
done
for inst in a b c d; do
    for _ in $(seq 100); do [ -S "$WORK/$inst/containerd.sock" ] && break; sleep 0.1; done
done

# One busybox image (`sleep` as the pause process, `true` as the container): imported into
# docker from a rootfs tar, saved, and imported into both containerds' k8s.io namespace.
mkdir -p "$WORK/rootfs/bin"
cp /bin/busybox "$WORK/rootfs/bin/busybox"
for a in sh true sleep; do ln -s busybox "$WORK/rootfs/bin/$a"; done
tar -C "$WORK/rootfs" -cf "$WORK/rootfs.tar" .
IMG=localhost/erdma-bench/busybox:1
docker import -c 'CMD ["/bin/sleep", "2147483647"]' "$WORK/rootfs.tar" "$IMG" >/dev/null
docker save "$IMG" -o "$WORK/image.tar"
docker rmi -f "$IMG" >/dev/null
for inst in a b c d; do
    "$C17/ctr" --address "$WORK/$inst/containerd.sock" -n k8s.io images import --all-platforms "$WORK/image.tar" >/dev/null
done

RUST_LOG=debug "$BIN/erdma-nri-plugin" --socket "$WORK/b/nri.sock" >"$WORK/nri-plugin.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do grep -q "configured by the runtime" "$WORK/nri-plugin.log" && break; sleep 0.1; done
grep -q "configured by the runtime" "$WORK/nri-plugin.log" || { echo "nri_start: the NRI plugin did not register" >&2; cat "$WORK/nri-plugin.log" >&2; exit 1; }

echo "# $(date -u +%F) $(nproc) cores, $(uname -r); containerd $("$C17/containerd" --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}'); $RUNS runs per variant"
A=$WORK/a/containerd.sock B=$WORK/b/containerd.sock C=$WORK/c/containerd.sock D=$WORK/d/containerd.sock
if [ "${ONLY:-}" = nri ]; then
    # The NRI variants alone, for more rounds in the same time (pods bench-1 and bench-2 are
    # the plugin's host-network ones).
    VARIANTS=(
        "nri on, no plugin=$C,runc"
        "nri, no ask=$B,runc"
        "nri, ask all=$B,runc,ERDMA_VISIBLE_DEVICES=all"
        "nri on, given directly=$C,runc,edits=$WORK/edits.json,ERDMA_VISIBLE_DEVICES=all"
    )
    PODS=("1 host network, no ask" "2 host network, ask all")
else
    VARIANTS=(
        "plain=$A,runc"
        "plain, 2nd containerd=$D,runc"
        "nri on, no plugin=$C,runc"
        "nri, no ask=$B,runc"
        "nri, ask all=$B,runc,ERDMA_VISIBLE_DEVICES=all"
        "nri on, given directly=$C,runc,edits=$WORK/edits.json,ERDMA_VISIBLE_DEVICES=all"
        "erdma-runtime, no ask=$A,erdma"
        "erdma-runtime, ask all=$A,erdma,ERDMA_VISIBLE_DEVICES=all"
        "nri, no ask, pod net=$B,runc,pod-network"
        "nri, ask all, pod net=$B,runc,pod-network,ERDMA_VISIBLE_DEVICES=all"
    )
    # By pod: bench-3 and bench-4 are the host-network pod's `nri, no ask` and `nri, ask all`,
    # bench-8 and bench-9 the pod-network ones (the variants' order above).
    PODS=("3 host network, no ask" "4 host network, ask all" "8 pod network, no ask" "9 pod network, ask all")
fi
ARGS=()
for v in "${VARIANTS[@]}"; do ARGS+=(--variant "$v"); done
# Paired differences print only where both variants ran.
for p in "plain, 2nd containerd/plain" "nri, no ask/nri on, no plugin" "nri, ask all/nri on, no plugin" \
    "nri, ask all/nri on, given directly" "nri on, given directly/nri on, no plugin" \
    "erdma-runtime, ask all/erdma-runtime, no ask"; do
    have_a=0 have_b=0
    for v in "${VARIANTS[@]}"; do
        [ "${v%%=*}" = "${p%%/*}" ] && have_a=1
        [ "${v%%=*}" = "${p#*/}" ] && have_b=1
    done
    if [ "$have_a$have_b" = 11 ]; then ARGS+=(--pair "$p"); fi
done
"$BIN/examples/cri_start" --image "$IMG" --runs "$RUNS" "${ARGS[@]}"
# The plugin really edited the asking containers; and its own time per call (from reading the
# request to writing the answer), which is all a container start waits on in this process.
grep -c "eRDMA given" "$WORK/nri-plugin.log" | sed 's/^/nri plugin: containers given eRDMA: /'
grep "eRDMA given" "$WORK/nri-plugin.log" | { grep -c 'NCCL_SOCKET_IFNAME==eth0"' || true; } | sed "s/^/nri plugin: of those, on the pod network with the pod's eth0: /"
# What the plugin gave the last host-network asking container against what the direct variant
# was given: the same nodes and env, compared (the plugin adds NCCL_SOCKET_IFNAME only for a
# pod on its own network; both containers carry ERDMA_VISIBLE_DEVICES=all besides).
given=$(grep "eRDMA given" "$WORK/nri-plugin.log" | grep -v 'NCCL_SOCKET_IFNAME==eth0"' | tail -1 || true)
echo "nri plugin: last given: ${given#*nodes=}"
plugin_items=$(printf '%s\n' "${given#*nodes=}" | { grep -o '"[^"]*"' || true; } | tr -d '"' | sort)
direct_items=$(jq -r '.deviceNodes[].path, .env[]' "$WORK/edits.json" | sort)
if [ "$plugin_items" = "$direct_items" ]; then
    echo "given directly: the same nodes and env as the plugin gave"
else
    echo "given directly: NOT the plugin's edits (the comparison is void):"
    diff <(echo "$plugin_items") <(echo "$direct_items") || true
fi
for v in "${PODS[@]}"; do
    grep "CreateContainer decided" "$WORK/nri-plugin.log" | grep "pod=bench/bench-${v%% *} " | grep -o 'elapsed_us=[0-9]*' | cut -d= -f2 | sort -n |
        awk -v what="${v#* }" '{a[NR]=$1} END {if (NR) printf "nri plugin: CreateContainer decided in p50 %.3f ms, max %.3f ms (%d calls, %s)\n", a[int((NR+1)/2)]/1000, a[NR]/1000, NR, what}'
done
