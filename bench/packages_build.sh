#!/usr/bin/env bash
# Installing the eRDMA packages: erdma-build against `docker build` running the PAI-DLC eRDMA
# guide's `apt install -y libibverbs1 ibverbs-providers ibverbs-utils librdmacm1` (+ `apt update`),
# on the same real Debian base (debootstrap minbase) in a throwaway local registry, both pushing the
# result there. Packages come from the Debian archive the base is configured with.
#
#   bench/packages_build.sh [SUITE...]      (default: bookworm trixie, i.e. Debian 12 and 13)
#   PACKAGES="openmpi-bin" bench/packages_build.sh bookworm
#       other packages instead of the eRDMA ones: erdma-build `--no-packages --install P…`
#       against `apt-get install -y --no-install-recommends P…`. openmpi-bin's scripts are
#       emulated; add openssh-server for the sandboxed path (dpkg runs the scripts over the
#       base's root, which erdma-build then reads: the report's `sandbox`).
#
#   MUSL=1 bench/packages_build.sh bookworm
#       erdma-build as the release ships it (static musl, scripts/dist's `dist` profile) against
#       the glibc build `cargo build --release` makes, instead of docker: each run warm (package
#       cache filled), alternating, RUNS times (default 7); p50 wall seconds, CPU seconds
#       (user + system: the fairer figure on a busy machine) and peak RSS, and the ratios
#       musl/glibc. Needs what scripts/dist needs (scripts/setup installs it).
#       ALSO="name=PATH ..." adds other erdma-build binaries to the same rounds (e.g. a musl
#       build with another allocator), each reported against glibc.
#
#   COMPARE="old=PATH new=PATH" bench/packages_build.sh bookworm
#       erdma-build binaries side by side (e.g. a commit's and its parent's), the first being
#       the one the others are reported against: the same rounds as MUSL=1, without docker
#       and without building anything. COLD=1 makes every build cold (an empty cache each).
#
# Cold: erdma-build with an empty package cache; docker without the base pulled and with its
#       build cache pruned. Before every timed build the suite's index files are read once
#       from the archive, so that its caching proxy is as fresh for one tool as for the other
#       (prime).
# ROUNDS=N (default 1) repeats the cold and warm pairs N times, erdma-build first in odd
# rounds and docker first in even ones (an even N gives each tool the first place as often);
# the walls are the medians.
# Warm: erdma-build with its package cache; docker with the base pulled (build run with
#       --no-cache: a cached RUN would skip the work being compared).
# Measured: wall seconds; bytes downloaded (erdma-build: packages + indices + registry; docker:
# what apt reports fetched + the base pull); the size of the layer each adds (compressed, as
# pushed); erdma-build's peak RSS.
# Needs root (scripts/setup, debootstrap), a running Docker, docker-registry, and the Debian
# mirror the machine's apt uses. Dated figures: docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."

SUITES=("$@")
PACKAGES=${PACKAGES:-}
if [ -n "$PACKAGES" ]; then
    ERDMA_ARGS=(--no-packages --no-env-presets)
    for p in $PACKAGES; do ERDMA_ARGS+=(--install "$p"); done
    APT_LINE="apt-get install -y --no-install-recommends $PACKAGES"
else
    ERDMA_ARGS=()
    APT_LINE="apt-get install -y libibverbs1 ibverbs-providers ibverbs-utils librdmacm1"
fi
[ "${#SUITES[@]}" -gt 0 ] || SUITES=(bookworm trixie)
WORK=$(mktemp -d /tmp/erdma-bench-pk.XXXXXX)
REG_PID=
cleanup() {
    set +e
    [ -n "$REG_PID" ] && kill "$REG_PID" 2>/dev/null && wait "$REG_PID" 2>/dev/null
    for suite in "${SUITES[@]}"; do
        [ -n "${REG:-}" ] && docker rmi -f "$REG/$suite:1" "$REG/out-docker-$suite:1" "$REG/out-docker-$suite:2" >/dev/null 2>&1
    done
    [ "${KEEP_WORK:-0}" = 1 ] && echo "kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
say() { printf '\n== %s\n' "$*" >&2; }

scripts/setup
if [ -z "${COMPARE:-}" ]; then
    cargo build --release -p erdma-build
fi
BIN=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)/release/erdma-build
if [ "${MUSL:-0}" = 1 ]; then
    RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static -C relocation-model=static" \
        cargo zigbuild --locked --profile dist --target x86_64-unknown-linux-musl -p erdma-build --bin erdma-build
    MUSL_BIN=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)/x86_64-unknown-linux-musl/dist/erdma-build
fi
MIRROR=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/*.sources)

say "registry"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
REG=127.0.0.1:$PORT
mkdir -p "$WORK/registry"
printf 'version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n' "$WORK/registry" "$REG" >"$WORK/registry.yml"
docker-registry serve "$WORK/registry.yml" </dev/null >"$WORK/registry.log" 2>&1 &
REG_PID=$!
for _ in $(seq 100); do curl -fsS "http://$REG/v2/" >/dev/null 2>&1 && break; sleep 0.1; done

lo() { awk '$1 == "lo:" { printf "%.0f\n", $2 + $10 }' /proc/net/dev; }
eth() { awk 'NR > 2 && $1 != "lo:" { b += $2 } END { printf "%.0f\n", b }' /proc/net/dev; }
now() { date +%s.%N; }
declare -A R

# The suite's index files, at the addresses each tool asks for them (InRelease; Packages.gz,
# which erdma-build reads, and Packages.xz and Translation-en.xz, which apt-get does, each
# by its path and by its hash, as apt-get asks where the Release says Acquire-By-Hash),
# read once and thrown away just before each timed build, docker's and erdma-build's alike.
# This machine reaches the archive through a caching proxy that now and then asks upstream
# again before it answers, and the first request then waits 0.4-0.7 s (docs/benchmarks.md,
# 2026-12-02): without this, whichever build ran first after a pause paid it. The packages
# themselves are not primed.
prime() {
    local arch dists f hash
    arch=$(dpkg --print-architecture)
    dists="${MIRROR%/}/dists/$SUITE"
    curl -fsS -m 60 -o "$WORK/InRelease" "$dists/InRelease" || return 0
    for f in "main/binary-$arch/Packages.gz" "main/binary-$arch/Packages.xz" main/i18n/Translation-en.xz; do
        curl -fsS -m 60 -o /dev/null "$dists/$f" || true
        hash=$(awk -v f="$f" '/^SHA256:/ { s = 1; next } /^[^ ]/ { s = 0 } s && $3 == f { print $1 }' "$WORK/InRelease")
        [ -z "$hash" ] || curl -fsS -m 60 -o /dev/null "$dists/${f%/*}/by-hash/SHA256/$hash" || true
    done
}

make_base() { # $1 = suite
    say "$1 base (debootstrap --variant=minbase $1 $MIRROR)"
    debootstrap --variant=minbase "$1" "$WORK/rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1
    rm -rf "$WORK"/rootfs/var/cache/apt/archives/*.deb "$WORK"/rootfs/var/lib/apt/lists/*_Packages
    tar -C "$WORK/rootfs" -c . | docker import -c 'CMD ["bash"]' - "$REG/$1:1" >/dev/null
    docker push -q "$REG/$1:1" >/dev/null
    docker rmi -f "$REG/$1:1" >/dev/null
    rm -rf "$WORK/rootfs"
}

run_erdma() { # $1 = cold|warm, $2 = output tag
    local t0 t1 e0 l0 json
    e0=$(eth); l0=$(lo); t0=$(now)
    json=$(XDG_CACHE_HOME="$WORK/cache-$SUITE" /usr/bin/time -f %M -o "$WORK/rss" "$BIN" build --json "${ERDMA_ARGS[@]}" --base "docker://$REG/$SUITE:1" --output "docker://$REG/out-erdma-$SUITE:$2" 2>"$WORK/erdma-$SUITE-$1.log")
    # Where the time went: the timed step lines.
    grep -v '] got ' "$WORK/erdma-$SUITE-$1.log" | sed "s/^/  erdma-build $SUITE $1: /" >&2
    t1=$(now)
    R[erdma-$1,rss]=$(cat "$WORK/rss")
    R[erdma-$1,wall]=$(echo "$t1 - $t0" | bc)
    R[erdma-$1,walls]+=" ${R[erdma-$1,wall]}"
    R[erdma-$1,net]=$(( $(eth) - e0 + $(lo) - l0 ))
    R[erdma-$1,layer]=$(echo "$json" | jq '.images[0].layer.size')
    R[erdma-$1,debs]=$(echo "$json" | jq '.images[0].packages.downloaded_bytes')
    R[erdma-$1,sandbox]=$(echo "$json" | jq -r '.images[0].packages.sandbox.bytes_read // 0')
}

run_docker() { # $1 = cold|warm, $2 = output tag
    local t0 t1 e0 l0 fetched
    mkdir -p "$WORK/ctx"
    printf 'FROM %s/%s:1\nRUN apt-get update && %s\n' "$REG" "$SUITE" "$APT_LINE" >"$WORK/ctx/Dockerfile"
    e0=$(eth); l0=$(lo); t0=$(now)
    DOCKER_BUILDKIT=0 docker build --no-cache -t "$REG/out-docker-$SUITE:$2" "$WORK/ctx" >"$WORK/docker-$1.log" 2>&1
    docker push -q "$REG/out-docker-$SUITE:$2" >/dev/null
    t1=$(now)
    R[docker-$1,wall]=$(echo "$t1 - $t0" | bc)
    R[docker-$1,walls]+=" ${R[docker-$1,wall]}"
    R[docker-$1,net]=$(( $(eth) - e0 + $(lo) - l0 ))
    R[docker-$1,layer]=$(skopeo inspect --raw --tls-verify=false "docker://$REG/out-docker-$SUITE:$2" | jq '.layers[-1].size')
    fetched=$(grep -o 'Fetched [0-9.]* [kMG]B' "$WORK/docker-$1.log" | awk '{ v=$2; u=$3; m=(u=="kB")?1e3:(u=="MB")?1e6:1e9; s += v*m } END { printf "%.0f", s }')
    R[docker-$1,debs]=$fetched
}

# musl against glibc: the same warm build, alternating, RUNS times each.
compare_musl() {
    local runs=${RUNS:-7} i v which bin t0 t1 cache
    local variants=()
    if [ -n "${COMPARE:-}" ]; then
        for v in $COMPARE; do variants+=("$v"); done
    else
        variants=("glibc=$BIN" "musl=$MUSL_BIN")
        for v in ${ALSO:-}; do variants+=("$v"); done
    fi
    for v in "${variants[@]}"; do
        # Each binary's own cache: one program's kept files are not another's to read.
        which=${v%%=*} bin=${v#*=}
        [ "${COLD:-0}" = 1 ] || XDG_CACHE_HOME="$WORK/cache-$SUITE-$which" "$bin" build --quiet "${ERDMA_ARGS[@]}" --base "docker://$REG/$SUITE:1" --output "docker://$REG/out-erdma-$SUITE:prime" >/dev/null
    done
    : >"$WORK/musl.tsv"
    for i in $(seq "$runs"); do
        for v in "${variants[@]}"; do
            which=${v%%=*} bin=${v#*=}
            cache=$WORK/cache-$SUITE-$which
            [ "${COLD:-0}" = 1 ] && rm -rf "$cache"
            sync; sleep 1
            t0=$(now)
            XDG_CACHE_HOME="$cache" /usr/bin/time -f '%M %U %S' -o "$WORK/rss" "$bin" build --quiet "${ERDMA_ARGS[@]}" --base "docker://$REG/$SUITE:1" --output "docker://$REG/out-erdma-$SUITE:$which-$i" >/dev/null
            t1=$(now)
            read -r rss user sys <"$WORK/rss"
            printf '%s\t%s\t%s\t%s\n' "$which" "$(echo "$t1 - $t0" | bc)" "$rss" "$(echo "$user + $sys" | bc)" >>"$WORK/musl.tsv"
        done
    done
    local versions=""
    for v in "${variants[@]}"; do versions+="${v%%=*}: $("${v#*=}" --version); "; done
    python3 - "$SUITE" "$WORK/musl.tsv" "$versions" "${PACKAGES:-eRDMA packages}" "$([ "${COLD:-0}" = 1 ] && echo cold || echo warm)" <<'PY2'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[2]).read().splitlines()]
names = list(dict.fromkeys(r[0] for r in rows))
m = {w: ([float(r[1]) for r in rows if r[0] == w], [int(r[2]) for r in rows if r[0] == w],
          [float(r[3]) for r in rows if r[0] == w]) for w in names}
med = statistics.median
print(f"\n{sys.argv[1]} {sys.argv[4]}, {sys.argv[5]}, {len(m[names[0]][0])} runs each; {sys.argv[3]}")
print(f"{'':9} {'p50 wall s':>10} {'min':>7} {'max':>7} {'p50 CPU s':>10} {'min':>7} {'max':>7} {'p50 RSS KiB':>12}")
for w, (wall, rss, cpu) in m.items():
    print(f"{w:9} {med(wall):10.3f} {min(wall):7.3f} {max(wall):7.3f} {med(cpu):10.2f} {min(cpu):7.2f} {max(cpu):7.2f} {med(rss):12.0f}")
g = m[names[0]]
for w in names[1:]:
    u = m[w]
    print(f"{w}/{names[0]}: wall {med(u[0]) / med(g[0]):.2f}x, CPU {med(u[2]) / med(g[2]):.2f}x, RSS {med(u[1]) / med(g[1]):.2f}x")
PY2
}

for SUITE in "${SUITES[@]}"; do
    declare -A R=()
    make_base "$SUITE"
    if [ "${MUSL:-0}" = 1 ] || [ -n "${COMPARE:-}" ]; then
        compare_musl
        continue
    fi
    # Each measurement starts on a settled machine (dockerd keeps working for a moment after a
    # push) and with the archive's proxy fresh for its index files (prime). erdma-build goes
    # first in odd rounds, docker in even ones: a package the other tool fetched a moment
    # before is fresh in the proxy too.
    settle() { sync; sleep 3; prime; }
    for round in $(seq "${ROUNDS:-1}"); do
        say "$SUITE cold, round $round"
        rm -rf "$WORK/cache-$SUITE"
        docker rmi -f "$REG/$SUITE:1" "$REG/out-docker-$SUITE:1" "$REG/out-docker-$SUITE:2" >/dev/null 2>&1 || true
        docker builder prune -af >/dev/null 2>&1 || true
        order=(run_erdma run_docker)
        [ $((round % 2)) = 1 ] || order=(run_docker run_erdma)
        settle; "${order[0]}" cold 1
        settle; "${order[1]}" cold 1
        say "$SUITE warm, round $round"
        settle; "${order[0]}" warm 2
        settle; "${order[1]}" warm 2
    done

    python3 - "$SUITE" "$(declare -p R)" "$PACKAGES" <<'PY'
import re, sys
suite = sys.argv[1]
R = dict(re.findall(r'\[([^\]]+)\]="([^"]*)"', sys.argv[2]))
import statistics
# Wall: the median over the rounds (ROUNDS), with its range; the rest: the last round's.
walls = {t: sorted(float(w) for w in R[t + ',walls'].split()) for t in ["docker-cold", "erdma-cold", "docker-warm", "erdma-warm"]}
for t, w in walls.items():
    R[t + ',wall'] = str(statistics.median(w))
g = lambda k: float(R[k])
rounds = len(walls["erdma-cold"])
print(f"\n{suite} {sys.argv[3] or 'eRDMA packages'}, {rounds} round(s); erdma-build read {R.get('erdma-cold,sandbox', '0')} bytes of base layers for the sandbox\n{'':14} {'wall s':>8} {'min':>6} {'max':>6} {'net bytes':>12} {'apt/deb bytes':>14} {'layer bytes':>12} {'peak RSS KiB':>13}")
for t in ["docker-cold", "erdma-cold", "docker-warm", "erdma-warm"]:
    rss = R.get(t + ',rss', '')
    print(f"{t:14} {g(t+',wall'):8.2f} {walls[t][0]:6.2f} {walls[t][-1]:6.2f} {g(t+',net'):12.0f} {g(t+',debs'):14.0f} {g(t+',layer'):12.0f} {rss:>13}")
for c in ["cold", "warm"]:
    print(f"docker/erdma {c}: wall {g(f'docker-{c},wall')/g(f'erdma-{c},wall'):.1f}x, "
          f"network {g(f'docker-{c},net')/max(g(f'erdma-{c},net'),1):.1f}x, layer {g(f'docker-{c},layer')/g(f'erdma-{c},layer'):.1f}x")
PY
done
