#!/usr/bin/env bash
# erdma-build binaries side by side on the offline demo (scripts/demo's build: testdata's tiny
# Debian 12 base, the eRDMA packages from the signed file:// repository in
# testdata/repos/debian-demo, into an OCI layout), interleaved round by round so that drift on
# the machine hits them alike. For telling whether a change to the builder's code costs time:
# resolving, unpacking, the scripts' emulation, the layer and the image written. No network,
# no registry, no root.
#
#   bench/demo_build.sh [RUNS] NAME=BINARY...        (RUNS default 15, after one warm-up each)
#
# e.g. the release before a change and after it, each unpacked from scripts/dist's tarball:
#   bench/demo_build.sh 15 before=/tmp/before/bin/erdma-build after=/tmp/after/bin/erdma-build
#
# Prints, per binary: p50 and minimum wall milliseconds, p50 CPU milliseconds (user + system)
# and p50 peak RSS (KiB), and each p50 as a ratio to the first binary's.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=15
if [[ ${1:-} =~ ^[0-9]+$ ]]; then
    runs=$1
    shift
fi
[ "$#" -ge 1 ] || { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" >&2; exit 2; }
command -v /usr/bin/time >/dev/null || { echo "demo_build: /usr/bin/time is missing (apt-get install time)" >&2; exit 1; }
names=() bins=()
for v in "$@"; do
    names+=("${v%%=*}")
    bins+=("${v#*=}")
    [ -x "${v#*=}" ] || { echo "demo_build: ${v#*=} is not executable" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
one() { # BIN OUT-FILE CACHE: one build into a fresh layout, with its own cache; appends
    # "wall_ms cpu_ms rss_kib"
    local bin=$1 out=$2 cache=$3 start end
    rm -rf "$work/out"
    start=$(date +%s%N)
    XDG_CACHE_HOME=$cache /usr/bin/time -f '%U %S %M' -o "$work/time" "$bin" --quiet build \
        --base oci:testdata/images/debian12-mini:latest \
        --mirror "file://$PWD/testdata/repos/debian-demo" \
        --keyring testdata/repos/debian-demo/demo-key.asc \
        --output "oci:$work/out:demo" >/dev/null
    end=$(date +%s%N)
    read -r user sys rss <"$work/time"
    echo "$(((end - start) / 1000000)) $(awk -v u="$user" -v s="$sys" 'BEGIN{printf "%d", (u+s)*1000}') $rss" >>"$out"
}
for i in "${!bins[@]}"; do one "${bins[$i]}" /dev/null "$work/cache-$i"; done # warm-up: each cache
for ((r = 0; r < runs; r++)); do
    for i in "${!bins[@]}"; do one "${bins[$i]}" "$work/${names[$i]}.txt" "$work/cache-$i"; done
done

p50() { sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
echo "demo_build: $runs runs per binary, interleaved, $(nproc) CPUs, $(date -u +%Y-%m-%d)"
printf '%-14s %10s %10s %10s %12s %8s\n' binary "p50 ms" "min ms" "cpu ms" "rss KiB" ratio
first=
for n in "${names[@]}"; do
    f=$work/$n.txt
    wall=$(cut -d' ' -f1 "$f" | p50)
    min=$(cut -d' ' -f1 "$f" | sort -n | head -1)
    cpu=$(cut -d' ' -f2 "$f" | p50)
    rss=$(cut -d' ' -f3 "$f" | p50)
    first=${first:-$wall}
    printf '%-14s %10s %10s %10s %12s %8s\n' "$n" "$wall" "$min" "$cpu" "$rss" \
        "$(awk -v a="$wall" -v b="$first" 'BEGIN{printf "%.3f", a/b}')"
done
