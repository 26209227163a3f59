#!/usr/bin/env bash
# Installing the eRDMA packages on an EL image: erdma-build against what a user would otherwise
# run without a container engine that has EL user space: `dnf --installroot` (dnf 4 and rpm 4.18,
# this machine's) into the base's root file system plus a layer commit (a tar of what changed,
# gzip-compressed as a registry layer is), in one run. The ECS AI-training-cluster guide's
# `yum install libibverbs rdma-core librdmacm libibverbs-utils` from a signed Alibaba-layout
# repository on 127.0.0.1, the dependencies (libnl3, pciutils) from a BaseOS-like one.
#
#   bench/rpm_build.sh
#   ERDMA_BUILD=path bench/rpm_build.sh    times that binary (e.g. a release's), with the fixtures
#                                          already in the test cache when they are there
#   SHAPE=none bench/rpm_build.sh          the five-package repositories alone (before issue 41)
#   ROUNDS=N bench/rpm_build.sh            N rounds of cold and warm builds; medians
#   ERDMA_BUILD_OLD=path bench/rpm_build.sh  another erdma-build beside it in the same rounds
#                                          (its own cache), e.g. the build before a change
#   MIRROR_RTT_MS=50 MIRROR_MBPS=100 bench/rpm_build.sh
#                                          the repositories served as a mirror that far away
#                                          (bench/far_mirror.py) instead of by a local
#                                          http.server, for both tools
#
# By default (SHAPE=rocky9) the BaseOS-like repository is padded to the shape of Rocky Linux 9's
# BaseOS, and a second one shaped like its AppStream is added (bench/rpm_md_shape.py: package
# counts, primary/filelists/other sizes and compression, with the real figures and their
# sources in its header); the base gets an `appstream` .repo file (bench/oci_add_file.py), and
# both tools read both repositories. The padding is ballast no real package needs, so both
# install the same packages as without it.
#
# Fixtures: the Rocky 9 (SQLite rpmdb) base and the rdma-core rpms the tests build from Debian's
# real binaries (builder/tests/support/rpm_repo.rs), made by running the fixture tests once; here the
# rpms are signed with a throwaway key and indexed with createrepo_c.
# Cold: erdma-build with an empty cache; dnf with an empty cache directory.
# Warm: erdma-build with its caches filled; dnf with its metadata and packages cached.
# Measured: wall seconds, peak RSS (/usr/bin/time), the layer's compressed size.
# Needs root (scripts/setup, dnf --installroot), rpm, rpmsign, createrepo_c, dnf and gpg
# (scripts/setup installs them); no Docker. Dated figures: docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."

WORK=$(mktemp -d /tmp/erdma-bench-rpm.XXXXXX)
HTTP_PID=
cleanup() {
    set +e
    [ -n "$HTTP_PID" ] && kill "$HTTP_PID" 2>/dev/null && wait "$HTTP_PID" 2>/dev/null
    [ -n "${GNUPGHOME:-}" ] && gpgconf --kill gpg-agent 2>/dev/null
    [ "${KEEP_WORK:-0}" = 1 ] && echo "kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
say() { printf '\n== %s\n' "$*" >&2; }

scripts/setup --no-docker
say "fixtures (the rpm fixture tests build them once)"
CACHE=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)/erdma-test-cache
if [ -z "${ERDMA_BUILD:-}" ] || ! ls -d "$CACHE"/el-base-rocky9-sqlite-*/ "$CACHE"/el-rpms-rdma-el9-*/rpms >/dev/null 2>&1; then
    CI=1 cargo nextest run -p erdma-build --test it -E 'test(rpm_fixtures)' >"$WORK/fixtures.log" 2>&1
fi
if [ -n "${ERDMA_BUILD:-}" ]; then
    BIN=$ERDMA_BUILD
else
    cargo build --release -p erdma-build
    BIN=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)/release/erdma-build
fi
BASE=$(ls -d "$CACHE"/el-base-rocky9-sqlite-*/ | head -1)
RDMA=$(ls -d "$CACHE"/el-rpms-rdma-el9-*/rpms | head -1)
DEPS=$(ls -d "$CACHE"/el-rpms-deps-el9-*/rpms | head -1)

say "signed repositories on 127.0.0.1"
export GNUPGHOME=$WORK/gnupg
mkdir -m 700 "$GNUPGHOME"
gpg --batch --passphrase '' --quick-gen-key 'erdma-kit bench <bench@erdma-kit.invalid>' rsa3072 sign never 2>/dev/null
gpg --armor --export bench@erdma-kit.invalid >"$WORK/key.asc"
mkdir -p "$WORK/www/erdma/yum/redhat/9/erdma/x86_64" "$WORK/www/baseos"
cp "$RDMA"/*.rpm "$WORK/www/erdma/yum/redhat/9/erdma/x86_64/"
cp "$DEPS"/*.rpm "$WORK/www/baseos/"
REPOS=("$WORK/www/erdma/yum/redhat/9/erdma/x86_64" "$WORK/www/baseos")
SHAPE=${SHAPE:-rocky9}
[ "$SHAPE" = rocky9 ] && mkdir -p "$WORK/www/appstream" && REPOS+=("$WORK/www/appstream")
for d in "${REPOS[@]}"; do
    if ls "$d"/*.rpm >/dev/null 2>&1; then
        rpmsign --addsign --define '_gpg_name bench@erdma-kit.invalid' --define "__gpg $(command -v gpg)" "$d"/*.rpm >/dev/null 2>&1
    fi
    createrepo_c -q "$d"
    case "$SHAPE:$d" in
        rocky9:*/baseos) python3 bench/rpm_md_shape.py "$d" rocky9-baseos ;;
        rocky9:*/appstream) python3 bench/rpm_md_shape.py "$d" rocky9-appstream ;;
    esac
    gpg --batch --yes --armor --detach-sign "$d/repodata/repomd.xml"
done
BASE_OCI=${BASE}oci
EXTRA_ERDMA=()
EXTRA_DNF=()
if [ "$SHAPE" = rocky9 ]; then
    # The base as Rocky 9's images have it: BaseOS and AppStream both enabled.
    cp -a "${BASE}oci" "$WORK/base-oci"
    BASE_OCI=$WORK/base-oci
    printf '[appstream]\nname=Rocky Linux $releasever - AppStream\nmirrorlist=https://mirrors.rockylinux.org/mirrorlist?arch=$basearch&repo=AppStream-$releasever$rltype\ngpgcheck=1\nenabled=1\ngpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-Rocky-9\n' >"$WORK/appstream.repo"
    python3 bench/oci_add_file.py "$BASE_OCI" latest /etc/yum.repos.d/rocky-appstream.repo "$WORK/appstream.repo"
fi
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
if [ -n "${MIRROR_RTT_MS:-}" ]; then
    python3 bench/far_mirror.py "$WORK/www" "$PORT" --rtt-ms "$MIRROR_RTT_MS" --mbps "${MIRROR_MBPS:-100}" >"$WORK/http.log" 2>&1 &
else
    (cd "$WORK/www" && exec python3 -m http.server "$PORT" --bind 127.0.0.1) >"$WORK/http.log" 2>&1 &
fi
HTTP_PID=$!
for _ in $(seq 50); do curl -fsS "http://127.0.0.1:$PORT/" >/dev/null 2>&1 && break; sleep 0.1; done
URL=http://127.0.0.1:$PORT
if [ "$SHAPE" = rocky9 ]; then
    EXTRA_ERDMA=(--repo "appstream=$URL/appstream")
    EXTRA_DNF=(--repofrompath "appstream,$URL/appstream" --setopt "appstream.gpgkey=file://$WORK/key.asc" --setopt appstream.gpgcheck=1)
fi

now() { date +%s.%N; }
declare -A R

# One build by erdma-build: $1 = erdma|old (the binary: $BIN or $ERDMA_BUILD_OLD, each with
# its own cache), $2 = cold|warm. Each figure is appended to R, one value per round.
run_erdma() {
    local t0 t1 bin=$BIN
    [ "$1" = old ] && bin=$ERDMA_BUILD_OLD
    [ "$2" = cold ] && rm -rf "$WORK/cache-$1"
    rm -rf "$WORK/out"
    t0=$(now)
    XDG_CACHE_HOME="$WORK/cache-$1" /usr/bin/time -f %M -o "$WORK/rss" "$bin" build --json --base "oci:$BASE_OCI:latest" \
        --repo "erdma=$URL/erdma/yum/redhat/9/erdma/x86_64" --repo "baseos=$URL/baseos" "${EXTRA_ERDMA[@]}" \
        --keyring "erdma=$WORK/key.asc" --keyring "base=$WORK/key.asc" \
        --output "oci:$WORK/out:erdma" >"$WORK/$1-$2.json" 2>"$WORK/$1-$2.log"
    t1=$(now)
    R[$1-$2,wall]+="$(echo "$t1 - $t0" | bc) "
    R[$1-$2,rss]+="$(cat "$WORK/rss") "
    R[$1-$2,layer]+="$(jq '.images[0].layer.size' "$WORK/$1-$2.json") "
}

run_dnf() { # $1 = cold|warm
    local t0 t1
    rm -rf "$WORK/root" "$WORK/layer.tar.gz"
    cp -a "${BASE}rootfs" "$WORK/root"
    # What the root holds before: the commit below takes what dnf added or changed (rpm gives
    # files their packaged mtimes, so a timestamp cannot tell).
    (cd "$WORK/root" && find . -path ./var/cache/dnf-bench -prune -o ! -type d -printf '%p %s %T@ %m %l\n' | sort) >"$WORK/before"
    # dnf keeps its cache inside the install root: carried from the cold run's root for warm.
    if [ "$1" = warm ]; then mkdir -p "$WORK/root/var/cache" && cp -a "$WORK/dnf-cache" "$WORK/root/var/cache/dnf-bench"; fi
    mkdir -p "$WORK/home" "$WORK/reposdir"
    printf '%%_dbpath /var/lib/rpm\n%%_db_backend sqlite\n' >"$WORK/home/.rpmmacros"
    # The base's packages, from its copy (rpm opening the fixture's own would change it).
    if [ "$1" = cold ]; then HOME=$WORK/home rpm -qa --root "$WORK/root" --qf '%{NEVRA}\n' | sort >"$WORK/base-installed"; fi
    printf '[main]\ngpgcheck=1\nreposdir=%s\nplugins=0\ninstall_weak_deps=0\ncachedir=%s\nkeepcache=1\n' "$WORK/reposdir" /var/cache/dnf-bench >"$WORK/dnf.conf"
    t0=$(now)
    HOME=$WORK/home /usr/bin/time -f %M -o "$WORK/rss" dnf -q -y -c "$WORK/dnf.conf" --installroot "$WORK/root" --releasever 9 \
        --repofrompath "erdma,$URL/erdma/yum/redhat/9/erdma/x86_64" --repofrompath "baseos,$URL/baseos" \
        --setopt "erdma.gpgkey=file://$WORK/key.asc" --setopt "baseos.gpgkey=file://$WORK/key.asc" \
        --setopt erdma.gpgcheck=1 --setopt baseos.gpgcheck=1 "${EXTRA_DNF[@]}" ${DNF_CACHEONLY:-} \
        install libibverbs rdma-core librdmacm libibverbs-utils >"$WORK/dnf-$1.log" 2>&1
    # The layer commit: what changed, as a gzip tar (dnf's cache left out, as `dnf clean all`
    # in the same RUN would).
    (cd "$WORK/root" && find . -path ./var/cache/dnf-bench -prune -o ! -type d -printf '%p %s %T@ %m %l\n' | sort) >"$WORK/after"
    comm -13 "$WORK/before" "$WORK/after" | cut -d' ' -f1 >"$WORK/changed"
    (cd "$WORK/root" && tar -czf "$WORK/layer.tar.gz" -T "$WORK/changed")
    t1=$(now)
    if [ "$1" = cold ]; then rm -rf "$WORK/dnf-cache" && cp -a "$WORK/root/var/cache/dnf-bench" "$WORK/dnf-cache"; fi
    R[dnf-$1,wall]+="$(echo "$t1 - $t0" | bc) "
    R[dnf-$1,rss]+="$(cat "$WORK/rss") "
    R[dnf-$1,layer]+="$(stat -c %s "$WORK/layer.tar.gz") "
}

# What each installed: dnf's by the root's rpm database against the base's, erdma-build's by its
# report. They must be the same packages, or the comparison means nothing.
installed_sets() {
    comm -13 "$WORK/base-installed" \
        <(HOME=$WORK/home rpm -qa --root "$WORK/root" --qf '%{NEVRA}\n' | sort) |
        grep -v '^gpg-pubkey-' >"$WORK/dnf-installed" # the repository key dnf imported
    for b in "${BUILDS[@]}"; do
        jq -r '.images[0].packages.install[] | "\(.name)-\(.version).\(.arch)"' "$WORK/$b-cold.json" | sort >"$WORK/$b-installed"
        if ! diff "$WORK/dnf-installed" "$WORK/$b-installed" >"$WORK/installed.diff"; then
            echo "dnf and $b installed different packages:" >&2
            cat "$WORK/installed.diff" >&2
            exit 1
        fi
    done
    echo "dnf and ${BUILDS[*]} installed the same $(wc -l <"$WORK/dnf-installed") packages" >&2
}

settle() { sync; sleep 2; }
BUILDS=(erdma)
[ -n "${ERDMA_BUILD_OLD:-}" ] && BUILDS+=(old)
for round in $(seq "${ROUNDS:-1}"); do
    # With two binaries, they take turns at going first (right after dnf's build), so that
    # neither gains from its place in the order.
    ORDER=("${BUILDS[@]}")
    [ $((round % 2)) = 0 ] && [ "${#BUILDS[@]}" = 2 ] && ORDER=("${BUILDS[1]}" "${BUILDS[0]}")
    say "round $round: cold"
    for b in "${ORDER[@]}"; do settle; run_erdma "$b" cold; done
    settle; run_dnf cold
    [ "$round" = 1 ] && installed_sets
    say "round $round: warm"
    for b in "${ORDER[@]}"; do settle; run_erdma "$b" warm; done
    settle; DNF_CACHEONLY=-C run_dnf warm
done

python3 - "$(declare -p R)" "${BUILDS[*]}" <<'PY'
import re, statistics, sys
R = {k: [float(x) for x in v.split()] for k, v in re.findall(r'\[([^\]]+)\]="([^"]*)"', sys.argv[1])}
builds = sys.argv[2].split()
m = lambda k: statistics.median(R[k])
n = len(R["dnf-cold,wall"])
print(f"\nmedians of {n} round(s); erdma = this binary, old = ERDMA_BUILD_OLD")
print(f"{'':12} {'wall s':>8} {'peak RSS KiB':>13} {'layer bytes':>12}  all walls")
for c in ["cold", "warm"]:
    for t in [f"dnf-{c}"] + [f"{b}-{c}" for b in builds]:
        print(f"{t:12} {m(t+',wall'):8.3f} {m(t+',rss'):13.0f} {m(t+',layer'):12.0f}  {' '.join(f'{x:.3f}' for x in R[t+',wall'])}")
for c in ["cold", "warm"]:
    for b in builds:
        print(f"dnf/{b} {c}: wall {m(f'dnf-{c},wall')/m(f'{b}-{c},wall'):.1f}x, peak RSS {m(f'dnf-{c},rss')/m(f'{b}-{c},rss'):.1f}x")
PY
