#!/usr/bin/env bash
# Registry-to-registry build: erdma-build versus `docker build` + `docker push`, on the same
# base with one large (default 1 GiB, incompressible) layer, in a throwaway local registry.
#
#   bench/registry_build.sh [SIZE_BYTES]
#
# Environment:
#   ERDMA_BUILD_EXTRA_ARGS  extra arguments for `erdma-build build` (e.g. a plain-HTTP flag)
#   ERDMA_BUILD_BIN         use this binary instead of building target/release/erdma-build
#   KEEP_WORK=1             keep the work directory (logs, layouts) instead of removing it
#
# What is measured, per tool:
#   wall       elapsed seconds
#   cpu        user+sys seconds of erdma-build; of dockerd (from /proc/PID/stat) for docker
#   peak_rss   erdma-build's max RSS (/usr/bin/time); dockerd's VmHWM, reset first through
#              /proc/PID/clear_refs, for docker (the CLI itself does no image work)
#   reg_out    bytes of response bodies the registry sent (its access log)
#   lo         bytes that crossed the loopback interface (/proc/net/dev, both directions,
#              headers included): mostly the pull plus the push
#   reqs       HTTP requests the registry served
#
# docker starts cold: images from 127.0.0.1 registries are removed and the build cache is
# pruned, so it pulls the base. Docker treats 127.0.0.0/8 as an insecure (plain HTTP)
# registry by default: `docker info` lists it under "Insecure Registries", nothing to set.
#
# Needs root or sudo (scripts/setup), a running Docker and docker-registry. Dated figures:
# docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

SIZE=${1:-$((1 << 30))}
WORK=$(mktemp -d /tmp/erdma-bench.XXXXXX)
REG_PID=
PORT=

say() { printf '\n== %s\n' "$*" >&2; }

cleanup() {
    set +e
    if [ -n "$REG_PID" ]; then kill "$REG_PID" 2>/dev/null; wait "$REG_PID" 2>/dev/null; fi
    if [ -n "$PORT" ] && docker info >/dev/null 2>&1; then
        docker rmi -f "127.0.0.1:$PORT/base:1" "127.0.0.1:$PORT/out-docker:1" >/dev/null 2>&1
    fi
    if [ "${KEEP_WORK:-0}" = 1 ]; then
        echo "work directory kept: $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

# --- prerequisites --------------------------------------------------------------------------
say "setup"
scripts/setup
if [ -n "${ERDMA_BUILD_BIN:-}" ]; then
    BIN=$ERDMA_BUILD_BIN
else
    cargo build --release -p erdma-build
    BIN=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)/release/erdma-build
fi
[ -x "$BIN" ] || { echo "no $BIN" >&2; exit 1; }

# --- registry ---------------------------------------------------------------------------------
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
REG=127.0.0.1:$PORT
mkdir -p "$WORK/registry"
cat >"$WORK/registry.yml" <<EOF
version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $WORK/registry
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: $REG
  secret: erdma-kit-bench
EOF
say "starting docker-registry on $REG"
docker-registry serve "$WORK/registry.yml" </dev/null >"$WORK/registry.log" 2>&1 &
REG_PID=$!
for _ in $(seq 100); do
    curl -fsS "http://$REG/v2/" >/dev/null 2>&1 && break
    kill -0 "$REG_PID" 2>/dev/null || { cat "$WORK/registry.log" >&2; exit 1; }
    sleep 0.1
done
curl -fsS "http://$REG/v2/" >/dev/null

# --- base image -------------------------------------------------------------------------------
say "generating base with a $SIZE-byte layer"
/usr/bin/time -f "generated in %e s" python3 bench/make_base.py "$WORK/base" base "$SIZE" >"$WORK/base.json"
skopeo copy --quiet --dest-tls-verify=false "oci:$WORK/base:base" "docker://$REG/base:1"
rm -rf "$WORK/base" # the registry has it now

# --- measurement helpers ----------------------------------------------------------------------
lo_bytes() { awk '$1 == "lo:" { print $2 }' /proc/net/dev; }
log_lines() { wc -l <"$WORK/registry.log"; }
# Combined-log-format lines after line $1: "<requests> <response bytes>".
registry_since() {
    sleep 0.3 # access-log lines are written after the response completes
    tail -n +"$(($1 + 1))" "$WORK/registry.log" |
        awk -F'"' '/^[0-9.]+ - - \[/ { split($3, a, " "); n++; b += a[2] } END { printf "%d %d\n", n, b }'
}
proc_cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hwm_kb() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }
CLK_TCK=$(getconf CLK_TCK)

declare -A R # results: R[tool,metric]

# --- erdma-build -----------------------------------------------------------------------------
say "erdma-build"
lo0=$(lo_bytes); l0=$(log_lines)
ERDMA_OK=1
# A fresh cache directory, so that nothing from an earlier run is reused.
# shellcheck disable=SC2086 # ERDMA_BUILD_EXTRA_ARGS is a list of arguments
if ! XDG_CACHE_HOME=$WORK/erdma-cache /usr/bin/time -f '%e %U %S %M' -o "$WORK/time.erdma" \
    "$BIN" build --base "docker://$REG/base:1" --output "docker://$REG/out:1" \
    --recipe debian-12 --no-packages --env FOO=bar ${ERDMA_BUILD_EXTRA_ARGS:-} >"$WORK/erdma.log" 2>&1; then
    ERDMA_OK=0
    echo "erdma-build failed; its output:" >&2
    tail -n 40 "$WORK/erdma.log" >&2
fi
lo1=$(lo_bytes)
read -r reqs reg_out < <(registry_since "$l0")
R[erdma,reqs]=$reqs; R[erdma,reg_out]=$reg_out
R[erdma,lo]=$((lo1 - lo0))
read -r wall user sys rss < <(tail -n 1 "$WORK/time.erdma")
R[erdma,wall]=$wall
R[erdma,cpu]=$(python3 -c "print(f'{$user + $sys:.2f}')")
R[erdma,rss_kb]=$rss

# --- docker build + push ------------------------------------------------------------------------
say "docker build + push (cold: base not pulled, build cache pruned)"
docker images --format '{{.Repository}}:{{.Tag}}' | grep '^127\.0\.0\.1:' | xargs -r docker rmi -f >/dev/null || true
docker image prune -f >/dev/null
docker builder prune -af >/dev/null 2>"$WORK/prune.log" || { cat "$WORK/prune.log" >&2; exit 1; }
mkdir -p "$WORK/ctx"
echo "erdma-kit bench payload" >"$WORK/ctx/hello.txt"
cat >"$WORK/ctx/Dockerfile" <<EOF
FROM $REG/base:1
COPY hello.txt /opt/erdma/hello.txt
ENV FOO=bar
EOF
DPID=$(cat /var/run/docker.pid)
echo 5 >"/proc/$DPID/clear_refs" # reset VmHWM (Documentation/filesystems/proc.rst)
cpu0=$(proc_cpu_ticks "$DPID"); lo0=$(lo_bytes); l0=$(log_lines)
t0=$(date +%s.%N)
DOCKER_BUILDKIT=0 docker build -t "$REG/out-docker:1" "$WORK/ctx" >"$WORK/docker-build.log" 2>&1 ||
    { tail -n 40 "$WORK/docker-build.log" >&2; exit 1; }
t1=$(date +%s.%N)
docker push "$REG/out-docker:1" >"$WORK/docker-push.log" 2>&1 ||
    { tail -n 40 "$WORK/docker-push.log" >&2; exit 1; }
t2=$(date +%s.%N)
lo1=$(lo_bytes); cpu1=$(proc_cpu_ticks "$DPID")
read -r reqs reg_out < <(registry_since "$l0")
R[docker,reqs]=$reqs; R[docker,reg_out]=$reg_out
R[docker,lo]=$((lo1 - lo0))
R[docker,wall]=$(python3 -c "print(f'{$t2 - $t0:.2f}')")
R[docker,build_wall]=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
R[docker,push_wall]=$(python3 -c "print(f'{$t2 - $t1:.2f}')")
R[docker,cpu]=$(python3 -c "print(f'{($cpu1 - $cpu0) / $CLK_TCK:.2f}')")
R[docker,rss_kb]=$(hwm_kb "$DPID")

# --- outputs ---------------------------------------------------------------------------------
say "outputs"
for ref in out:1 out-docker:1; do
    if skopeo inspect --tls-verify=false "docker://$REG/$ref" >"$WORK/inspect.json" 2>/dev/null; then
        printf '%-14s layers=%s env=%s\n' "$ref" "$(jq '.Layers | length' "$WORK/inspect.json")" \
            "$(jq -c '[.Env[]? | select(startswith("FOO="))]' "$WORK/inspect.json")"
    else
        printf '%-14s missing\n' "$ref"
    fi
done

# --- report ----------------------------------------------------------------------------------
python3 - "$SIZE" "$ERDMA_OK" <<EOF
import sys
size, erdma_ok = int(sys.argv[1]), sys.argv[2] == "1"
MiB = 1 << 20
rows = {
    "erdma-build": dict(wall=float("${R[erdma,wall]}"), cpu=float("${R[erdma,cpu]}"),
                        rss=int("${R[erdma,rss_kb]}") * 1024, reg_out=int("${R[erdma,reg_out]}"),
                        lo=int("${R[erdma,lo]}"), reqs=int("${R[erdma,reqs]}")),
    "docker build+push": dict(wall=float("${R[docker,wall]}"), cpu=float("${R[docker,cpu]}"),
                        rss=int("${R[docker,rss_kb]}") * 1024, reg_out=int("${R[docker,reg_out]}"),
                        lo=int("${R[docker,lo]}"), reqs=int("${R[docker,reqs]}")),
}
print(f"\nbase layer: {size / MiB:.0f} MiB incompressible; docker build {float('${R[docker,build_wall]}'):.2f} s + push {float('${R[docker,push_wall]}'):.2f} s")
if not erdma_ok:
    print("erdma-build FAILED: its figures below are not a result")
def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
hdr = f"{'':18} {'wall s':>8} {'cpu s':>8} {'peak RSS':>11} {'reg out':>11} {'lo':>11} {'reqs':>6}"
print(hdr)
print("-" * len(hdr))
for name, r in rows.items():
    print(f"{name:18} {r['wall']:8.2f} {r['cpu']:8.2f} {human(r['rss']):>11} {human(r['reg_out']):>11} {human(r['lo']):>11} {r['reqs']:6d}")
e, d = rows["erdma-build"], rows["docker build+push"]
ratio = lambda a, b: (f"{a / b:.0f}x" if a / b >= 100 else f"{a / b:.2f}x") if b else "n/a"
print(f"{'docker / erdma':18} {ratio(d['wall'], e['wall']):>8} {ratio(d['cpu'], e['cpu']):>8} "
      f"{ratio(d['rss'], e['rss']):>11} {ratio(d['reg_out'], e['reg_out']):>11} {ratio(d['lo'], e['lo']):>11} "
      f"{ratio(d['reqs'], e['reqs']):>6}")
print("(peak RSS for docker is dockerd's; cpu for docker is dockerd's)")
EOF
[ "$ERDMA_OK" = 1 ]
