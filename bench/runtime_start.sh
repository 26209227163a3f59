#!/usr/bin/env bash
# Container start time through erdma-runtime against plain runc: `create` + `start` + (the
# container's `true` exiting) + `delete` of a busybox `true` bundle, timed as one unit, RUNS
# times per variant (default 200), the variants interleaved so that drift on the machine hits
# all of them alike.
#
#   bench/runtime_start.sh [RUNS]
#
# Variants:
#   runc            runc itself
#   runc, edited    runc itself on the asking bundle's spec as erdma-runtime edits it (two
#                   uverbs nodes and rdma_cm, memlock, the host's network namespace): what the
#                   edit costs runc, apart from the wrapper
#   erdma, no ask   erdma-runtime over the `two` fixture; the container does not ask (the spec is
#                   read, the request found empty, then runc exec'd; start/delete exec straight)
#   erdma, ask all  the same with ERDMA_VISIBLE_DEVICES=all: discovery over the fixture sysfs,
#                   the spec edit and its atomic write (temporary file + exchange, see
#                   oci-hook/src/spec.rs) on every create. The original spec is put back
#                   between runs (outside the timing) so that every run edits a fresh spec,
#                   as an engine's new bundle would.
#   runc, net edited / erdma, ask, net
#                   the same two on a spec whose network namespace is one of its own, named by
#                   path as Podman and CRI name theirs (made here with a veth end `eth0` and an
#                   address): the wrapper also reads that namespace's interfaces for
#                   NCCL_SOCKET_IFNAME (a thread joins it, two rtnetlink dumps)
# The wrapper runs for all three calls (create, start, delete), as it does under an engine.
# "added" compares with plain runc; "wrapper" with runc on the spec the container ends up with
# (plain for "no ask", edited for "ask all"), i.e. the wrapper's own share.
# memlock is 4 MiB: the default (unlimited) is above this machine's hard limit without
# CAP_SYS_RESOURCE and runc would refuse it.
#
# A second table times single calls with the real runtime replaced by /bin/true: the wrapper's
# own cost, which the first table can only show through runc's far larger and noisier time.
# Two of its calls run over a GPU host (testdata/sysfs/gpu8-eri4: 8 GPUs and 4 ERIs on two NUMA
# nodes, a container given GPUs 4 and 5): as it is, and with its GPUs hidden (no `nvidia`
# driver directory, an empty /proc), so that their difference is what reading where the GPUs
# sit, pairing them with ERIs and deciding GPU Direct RDMA cost an asking create.
# Two more create a container from the spec Docker itself wrote (testdata/specs/README.md: 9 kB,
# 5.3 kB of it the default seccomp profile), as Docker wrote it ("no ask, Docker") and asking on
# the host's network ("ask, Docker"): the bundles above are `runc spec`'s 2.6 kB, smaller than
# any engine's.
# The floor: the same calls through a static no-op wrapper (C, musl, `execv` of the real
# runtime with the arguments it was given, nothing else), built here: what any wrapper costs
# per call. "no ask" is compared with it.
# Every wrapper call is one more execve: a do-nothing Rust wrapper costs about 0.4 ms (static)
# or 0.7 ms (dynamic, PIE) per call on a small VM, so three calls per container set the floor.
# The binary timed is the one scripts/build-runtime makes (static, non-PIE, `runtime` profile),
# as it is meant to be installed; ERDMA_RUNTIME=path times another (e.g. target/release's).
# On a busy machine run the script under `nice -n -15`.
#
# ERDMA_RUNTIME_OLD=path adds that binary's state and create calls to the per-call table (rows
# "old: …"), interleaved with the others: an old and a new build side by side in one run.
# Needs root, runc, busybox-static and musl-tools (scripts/setup). ERDMA_RUNTIME=path skips the build.
# Dated figures: docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-200}
WARMUP=10

[ "$(id -u)" -eq 0 ] || { echo "runtime_start: needs root (runc, mknod)" >&2; exit 1; }
for t in runc mknod ip musl-gcc; do command -v "$t" >/dev/null || { echo "runtime_start: $t not found (run scripts/setup)" >&2; exit 1; }; done
[ -x /bin/busybox ] || { echo "runtime_start: /bin/busybox not found (busybox-static; run scripts/setup)" >&2; exit 1; }

if [ -z "${ERDMA_RUNTIME:-}" ]; then
    ERDMA_RUNTIME=$(scripts/build-runtime)
fi
[ -x "$ERDMA_RUNTIME" ] || { echo "runtime_start: $ERDMA_RUNTIME is not executable" >&2; exit 1; }

# The bundles, runc's state and the wrapper's log on a tmpfs of their own, where Docker,
# containerd and CRI-O keep them on a host: under /run (containerd's
# /run/containerd/io.containerd.runtime.v2.task/<namespace>/<id>, CRI-O's
# /run/containers/storage/overlay-containers/<id>/userdata, runc's /run/runc). Podman (as root)
# writes its bundles under its graphroot, /var/lib/containers/storage/overlay-containers/<id>/
# userdata, on disk: the per-call row "create, ask, bundle on disk" times the asking create over
# a bundle in DISK (default /var/tmp) instead. On a disk file system the spec's atomic
# replacement makes a new file, and what that costs is the file system's: on ext4 without a
# journal, inode allocation passes over every inode freed in the last minute.
WORK=$(mktemp -d /tmp/erdma-bench-rt.XXXXXX)
DISK=$(mktemp -d "${DISK:-/var/tmp}/erdma-bench-rt-disk.XXXXXX")
NETNS=erdma-bench-$$
cleanup() {
    set +e
    for id in $(runc --root "$WORK/state" list -q 2>/dev/null); do runc --root "$WORK/state" delete --force "$id"; done
    ip netns delete "$NETNS" 2>/dev/null
    if [ "${KEEP_WORK:-0}" = 1 ]; then
        echo "kept $WORK (a tmpfs: umount it) and $DISK" >&2
    else
        umount "$WORK" 2>/dev/null
        rm -rf "$WORK" "$DISK"
    fi
}
trap cleanup EXIT
mount -t tmpfs -o size=256m,mode=0700 erdma-bench-rt "$WORK"

# The floor wrapper (see above).
printf '#include <unistd.h>\nint main(int c, char **v) { (void)c; v[0] = "/bin/true"; execv(v[0], v); return 127; }\n' >"$WORK/noop.c"
musl-gcc -static -O2 -o "$WORK/noop-wrapper" "$WORK/noop.c"

# The fixture host: the `two` scenario's sysfs, its /dev nodes, a config pointing there.
. bench/fixture_host.sh
fixture_host "$WORK"
# The same with /bin/true as the real runtime: the per-call table, and the edited spec below.
sed "s|^runtime = .*|runtime = \"/bin/true\"|" "$WORK/oci-hook.toml" >"$WORK/oci-hook-true.toml"

# The GPU host, and the same host with its GPUs hidden.
for g in gpu nogpu; do
    mkdir -p "$WORK/$g"
    (fixture_host "$WORK/$g" gpu8-eri4)
    sed "s|^runtime = .*|runtime = \"/bin/true\"|" "$WORK/$g/oci-hook.toml" >"$WORK/oci-hook-$g.toml"
    echo "proc_root = \"$WORK/$g/proc\"" >>"$WORK/oci-hook-$g.toml"
done
cp -a testdata/sysfs/gpu8-eri4/proc "$WORK/gpu/proc"
mkdir -p "$WORK/nogpu/proc"
rm -rf "$WORK/nogpu/sys/bus/pci/drivers/nvidia"

# A network namespace of its own, as a CNI plugin or Podman leaves one: `eth0` up with an
# address (the veth's other end stays outside), `lo` up.
ip netns add "$NETNS"
ip link add "eb$$" type veth peer name eth0 netns "$NETNS"
ip -n "$NETNS" addr add 10.231.9.2/24 dev eth0
ip -n "$NETNS" link set eth0 up
ip -n "$NETNS" link set lo up

# One read-only busybox rootfs, three bundles: plain, asking, and asking on its own network.
mkdir -p "$WORK/rootfs/bin" "$WORK/rootfs/proc" "$WORK/rootfs/dev" "$WORK/rootfs/sys"
cp /bin/busybox "$WORK/rootfs/bin/busybox"
for a in sh true; do ln -s busybox "$WORK/rootfs/bin/$a"; done
for b in plain ask asknet askgpu; do
    mkdir -p "$WORK/$b"
    runc spec --bundle "$WORK/$b"
    jq --arg root "$WORK/rootfs" --arg b "$b" --arg ns "/run/netns/$NETNS" '
        .root = {path: $root, readonly: true}
        | .process.terminal = false
        | .process.args = ["true"]
        | if $b != "plain" then .process.env += ["ERDMA_VISIBLE_DEVICES=all"] else . end
        | if $b == "askgpu" then .process.env += ["NVIDIA_VISIBLE_DEVICES=4,5"] else . end
        | if $b == "asknet" then .linux.namespaces |= map(if .type == "network" then .path = $ns else . end) else . end' \
        "$WORK/$b/config.json" >"$WORK/$b/config.json.orig"
    cp "$WORK/$b/config.json.orig" "$WORK/$b/config.json"
done
# Docker's own spec (testdata/specs: Docker 20.10, default seccomp profile, 9 kB) for the
# per-call table: as Docker wrote it (does not ask), and asking on the host's network (its
# network namespace left out, as `--network host` leaves it).
for b in dnoask dask; do
    mkdir -p "$WORK/$b"
    jq -c --arg b "$b" 'if $b == "dask" then .process.env += ["ERDMA_VISIBLE_DEVICES=all"] | .linux.namespaces |= map(select(.type != "network")) else . end' \
        testdata/specs/docker-20.10-bridge.json >"$WORK/$b/config.json.orig"
    cp "$WORK/$b/config.json.orig" "$WORK/$b/config.json"
done
# The asking specs as erdma-runtime edits them, for runc alone.
for e in edited:ask ednet:asknet; do
    mkdir -p "$WORK/${e%%:*}"
    cp "$WORK/${e#*:}/config.json.orig" "$WORK/${e%%:*}/config.json"
    ERDMA_OCI_HOOK_CONFIG="$WORK/oci-hook-true.toml" "$ERDMA_RUNTIME" create --bundle "$WORK/${e%%:*}" edit-only
    cp "$WORK/${e%%:*}/config.json" "$WORK/${e%%:*}/config.json.orig"
    cmp -s "$WORK/${e%%:*}/config.json" "$WORK/${e#*:}/config.json.orig" && { echo "runtime_start: the $e spec was not edited" >&2; exit 1; }
done
# The asking bundle once more, on disk (see DISK above).
mkdir -p "$DISK/ask"
cp "$WORK/ask/config.json.orig" "$DISK/ask/config.json.orig"
cp "$DISK/ask/config.json.orig" "$DISK/ask/config.json"
jq -e '.process.env | index("NCCL_SOCKET_IFNAME==eth0")' "$WORK/ednet/config.json" >/dev/null \
    || { echo "runtime_start: the own-network spec did not get the namespace's eth0" >&2; exit 1; }

STATE="$WORK/state"
n=0
# Waits, without forking, until the container's `true` has exited (gone, or a zombie, which runc
# counts as stopped): `delete --force` on a still-running container would SIGKILL it and make
# runc retry removing busy cgroups, which is noise, not start time.
wait_exit() { # PIDFILE
    local pid stat
    read -r pid <"$1" || [ -n "$pid" ]  # runc writes no newline
    while [ -e "/proc/$pid" ]; do
        read -r stat <"/proc/$pid/stat" 2>/dev/null || break
        stat=${stat##*) }
        case "${stat%% *}" in Z|X) break ;; esac
    done
}
# A fresh config.json for each run, as an engine writes one into each new bundle. Not `cp` over
# the previous one: that truncates it, and ext4 then writes the new data out at close
# (auto_da_alloc), so the wrapper's replacement of the spec would pay for freeing (and, mounted
# with `discard`, trimming) disk blocks that an engine's just-written spec does not have yet.
fresh_spec() { # BUNDLE
    rm -f "$1/config.json"
    cp "$1/config.json.orig" "$1/config.json"
}
one() { # VARIANT RUNTIME BUNDLE OUTFILE: one timed create+start+delete, milliseconds appended
    local rt=$2 bundle=$3 id t0 t1
    n=$((n + 1)); id="bench-$n"
    fresh_spec "$bundle"
    t0=$EPOCHREALTIME
    "$rt" --root "$STATE" create --bundle "$bundle" --pid-file "$WORK/pid" "$id" </dev/null >/dev/null
    "$rt" --root "$STATE" start "$id"
    wait_exit "$WORK/pid"
    "$rt" --root "$STATE" delete "$id"
    t1=$EPOCHREALTIME
    # EPOCHREALTIME is seconds.microseconds; keep integer microseconds.
    echo $(( (${t1/./} - ${t0/./}) )) >>"$4"
}

VARIANTS=("runc" "runc, edited" "erdma, no ask" "erdma, ask all" "runc, net edited" "erdma, ask, net")
SAME_SPEC=(- - 0 1 - 4)  # the runc variant each one ends up running the same spec as
ALL="0 1 2 3 4 5"
run_variant() { # INDEX OUTFILE
    case "$1" in
        0) one runc "$(command -v runc)" "$WORK/plain" "$2" ;;
        1) one runc "$(command -v runc)" "$WORK/edited" "$2" ;;
        2) one erdma "$ERDMA_RUNTIME" "$WORK/plain" "$2" ;;
        3) one erdma "$ERDMA_RUNTIME" "$WORK/ask" "$2" ;;
        4) one runc "$(command -v runc)" "$WORK/ednet" "$2" ;;
        5) one erdma "$ERDMA_RUNTIME" "$WORK/asknet" "$2" ;;
    esac
}

echo "runtime_start: $WARMUP warm-up + $RUNS runs per variant, $(nproc) CPUs, $(runc --version | head -1), $ERDMA_RUNTIME" >&2
for _ in $(seq "$WARMUP"); do for v in $ALL; do run_variant "$v" /dev/null; done; done
for v in $ALL; do : >"$WORK/times.$v"; done
for i in $(seq "$RUNS"); do
    for v in $ALL; do run_variant "$v" "$WORK/times.$v"; done
    [ $((i % 50)) -eq 0 ] && echo "  $i/$RUNS" >&2
done

# The asking bundle's last edit, to show the work was done.
jq -e '[.linux.devices[].path] == ["/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1", "/dev/infiniband/rdma_cm"]' "$WORK/ask/config.json" >/dev/null \
    || { echo "runtime_start: the asking bundle was not edited" >&2; exit 1; }
cmp -s "$WORK/plain/config.json" "$WORK/plain/config.json.orig" || { echo "runtime_start: the plain bundle was changed" >&2; exit 1; }

# The wrapper's own cost per call, with the real runtime replaced by /bin/true: what the
# table above measures through runc's much larger and noisier start time.
CALLS=("true" "erdma state" "erdma create, no ask" "erdma create, ask all" "erdma create, ask, net" "create, ask, 8 GPUs" "create, ask, GPUs hidden" "floor: no-op wrapper" "create, no ask, Docker" "create, ask, Docker" "old: erdma state" "old: create, no ask" "old: create, ask all" "old: no ask, Docker" "old: ask, Docker" "create, ask, bundle on disk" "old: ask, bundle on disk")
OLD_OF=(1 2 3 8 9 - 15)  # the call each "old: …" row (10 to 14, 16) makes
call() { # INDEX OUTFILE
    local t0 t1 b=$WORK/plain conf=$WORK/oci-hook-true.toml rt=$ERDMA_RUNTIME c=$1
    [ "$c" -ge 10 ] && [ "${OLD_OF[$((c - 10))]}" != - ] && { rt=$ERDMA_RUNTIME_OLD; c=${OLD_OF[$((c - 10))]}; }
    case "$c" in
        3) b=$WORK/ask ;;
        4) b=$WORK/asknet ;;
        5) b=$WORK/askgpu; conf=$WORK/oci-hook-gpu.toml ;;
        6) b=$WORK/askgpu; conf=$WORK/oci-hook-nogpu.toml ;;
        8) b=$WORK/dnoask ;;
        9) b=$WORK/dask ;;
        15) b=$DISK/ask ;;
    esac
    [ "$c" -ge 2 ] && fresh_spec "$b"
    t0=$EPOCHREALTIME
    case "$c" in
        0) /bin/true --root "$STATE" state x ;;
        7) "$WORK/noop-wrapper" --root "$STATE" create --bundle "$b" x ;;
        1) ERDMA_OCI_HOOK_CONFIG="$conf" "$rt" --root "$STATE" state x ;;
        *) ERDMA_OCI_HOOK_CONFIG="$conf" "$rt" --root "$STATE" create --bundle "$b" x ;;
    esac
    t1=$EPOCHREALTIME
    echo $(( (${t1/./} - ${t0/./}) )) >>"$2"
}
CALL_ALL="0 1 2 3 4 5 6 7 8 9 15"
if [ -n "${ERDMA_RUNTIME_OLD:-}" ]; then
    [ -x "$ERDMA_RUNTIME_OLD" ] || { echo "runtime_start: $ERDMA_RUNTIME_OLD is not executable" >&2; exit 1; }
    CALL_ALL="$CALL_ALL 10 11 12 13 14 16"
fi
for _ in $(seq "$WARMUP"); do for c in $CALL_ALL; do call "$c" /dev/null; done; done
# The GPU host's edit, to show the work was done: GPUs 4 and 5 get node 1's ERIs and the level.
fresh_spec "$WORK/askgpu"
ERDMA_OCI_HOOK_CONFIG="$WORK/oci-hook-gpu.toml" "$ERDMA_RUNTIME" --root "$STATE" create --bundle "$WORK/askgpu" x
jq -e '([.linux.devices[].path] == ["/dev/infiniband/uverbs2", "/dev/infiniband/uverbs3", "/dev/infiniband/rdma_cm"]) and (.process.env | index("NCCL_NET_GDR_LEVEL=PHB"))' "$WORK/askgpu/config.json" >/dev/null \
    || { echo "runtime_start: the GPU host's edit is not the expected one" >&2; exit 1; }
for c in $CALL_ALL; do : >"$WORK/calls.$c"; done
for _ in $(seq "$RUNS"); do for c in $CALL_ALL; do call "$c" "$WORK/calls.$c"; done; done
# Docker's spec, asking, edited once more by the binary timed (the old one's rows run last in
# each round): the devices added, the seccomp profile as it was. Docker, jq -c and serde_json
# all write it compact, so this shows its content, not that its bytes were kept (the unit tests
# of oci-hook/src/spec.rs show that).
fresh_spec "$WORK/dask"
ERDMA_OCI_HOOK_CONFIG="$WORK/oci-hook-true.toml" "$ERDMA_RUNTIME" --root "$STATE" create --bundle "$WORK/dask" x
jq -e '[.linux.devices[].path] == ["/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1", "/dev/infiniband/rdma_cm"]' "$WORK/dask/config.json" >/dev/null \
    && grep -qF "\"seccomp\":$(jq -c .linux.seccomp "$WORK/dask/config.json.orig")" "$WORK/dask/config.json" \
    || { echo "runtime_start: Docker's asking spec was not edited as expected" >&2; exit 1; }
cmp -s "$WORK/dnoask/config.json" "$WORK/dnoask/config.json.orig" || { echo "runtime_start: Docker's spec that does not ask was changed" >&2; exit 1; }

pct() { # FILE P: nearest-rank percentile, in ms with two decimals
    sort -n "$1" | awk -v p="$2" '{ v[NR] = $1 } END { r = int((p / 100) * NR + 0.999999); if (r < 1) r = 1; printf "%.2f", v[r] / 1000 }'
}
# Runs are interleaved, so run i of every variant saw the same moment of the machine: the
# median of the per-run differences ("paired") is less disturbed by drift than the difference
# of the medians.
paired() { # FILE BASEFILE: p50 of the per-run differences, signed ms
    paste "$1" "$2" | awk '{ print $1 - $2 }' >"$WORK/diff"
    sort -n "$WORK/diff" | awk '{ v[NR] = $1 } END { r = int(0.5 * NR + 0.999999); printf "%+.2f", v[r] / 1000 }'
}
base50=$(pct "$WORK/times.0" 50)
printf '\n%-16s %6s %9s %9s %14s %16s %14s\n' "variant" "runs" "p50 ms" "p95 ms" "added p50 ms" "wrapper p50 ms" "paired p50 ms"
for v in $ALL; do
    p50=$(pct "$WORK/times.$v" 50)
    p95=$(pct "$WORK/times.$v" 95)
    added=$(awk -v a="$p50" -v b="$base50" 'BEGIN { printf "%+.2f", a - b }')
    [ "$v" -eq 0 ] && added="-"
    wrapper=-
    if [ "${SAME_SPEC[$v]}" != - ]; then
        wrapper=$(awk -v a="$p50" -v b="$(pct "$WORK/times.${SAME_SPEC[$v]}" 50)" 'BEGIN { printf "%+.2f", a - b }')
    fi
    pair=-
    [ "${SAME_SPEC[$v]}" != - ] && pair=$(paired "$WORK/times.$v" "$WORK/times.${SAME_SPEC[$v]}")
    printf '%-16s %6d %9s %9s %14s %16s %14s\n' "${VARIANTS[$v]}" "$(wc -l <"$WORK/times.$v")" "$p50" "$p95" "$added" "$wrapper" "$pair"
done

base50=$(pct "$WORK/calls.0" 50)
printf '\nper call, real runtime = /bin/true\n%-22s %6s %9s %9s %14s\n' "call" "runs" "p50 ms" "p95 ms" "added p50 ms"
for c in $CALL_ALL; do
    p50=$(pct "$WORK/calls.$c" 50)
    added=$(awk -v a="$p50" -v b="$base50" 'BEGIN { printf "%+.2f", a - b }')
    [ "$c" -eq 0 ] && added="-"
    printf '%-22s %6d %9s %9s %14s\n' "${CALLS[$c]}" "$(wc -l <"$WORK/calls.$c")" "$p50" "$(pct "$WORK/calls.$c" 95)" "$added"
done
# A container is one create and two pass-through calls (start, delete) through the wrapper.
st=$(pct "$WORK/calls.1" 50); t=$(pct "$WORK/calls.0" 50)
for c in 2 3 8 9 15; do
    cr=$(pct "$WORK/calls.$c" 50)
    awk -v cr="$cr" -v st="$st" -v t="$t" -v what="${CALLS[$c]#*create, }" \
        'BEGIN { printf "per container, %s: create + start + delete = %+.2f ms\n", what, (cr - t) + 2 * (st - t) }'
done
fl=$(pct "$WORK/calls.7" 50)
awk -v f="$fl" -v t="$t" 'BEGIN { printf "per container, floor (a static no-op wrapper, 3 calls): %+.2f ms\n", 3 * (f - t) }'
awk -v cr="$(pct "$WORK/calls.2" 50)" -v st="$st" -v f="$fl" \
    'BEGIN { printf "per container, no ask, over the floor: %+.2f ms\n", (cr - f) + 2 * (st - f) }'
echo "placing 8 GPUs beside 4 ERIs, per asking create: $(paired "$WORK/calls.5" "$WORK/calls.6") ms (paired p50)"
if [ -n "${ERDMA_RUNTIME_OLD:-}" ]; then
    ost=$(pct "$WORK/calls.10" 50)
    for c in 11 12 13 14 16; do
        awk -v cr="$(pct "$WORK/calls.$c" 50)" -v st="$ost" -v t="$t" -v what="${CALLS[$c]#old: }" \
            'BEGIN { printf "per container, old binary, %s: create + start + delete = %+.2f ms\n", what, (cr - t) + 2 * (st - t) }'
    done
    printf 'new - old, paired p50 per call:'
    for c in 10 11 12 13 14 16; do printf ' %s %s ms;' "${CALLS[$c]#old: }" "$(paired "$WORK/calls.${OLD_OF[$((c - 10))]}" "$WORK/calls.$c")"; done
    echo
fi
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
