#!/bin/bash
# Replays the scenarios in this directory against a real EL `alternatives`
# binary (chkconfig project) and rewrites the recorded outputs.
#
# usage: regenerate.sh ALTERNATIVES_BINARY [DEST_DIR]
#
#   ALTERNATIVES_BINARY  a *statically linked* build of chkconfig's
#                        alternatives.c (see README.md for the build command).
#   DEST_DIR             where to write outputs (default: this directory).
#                        Inputs (SCENARIO/setup, SCENARIO/commands) are always
#                        read from this directory.
#
# Path mapping: no chkconfig version has a --root option, so every scenario
# runs in a fresh scratch root and the binary is executed with
# `chroot SCRATCH /.oracle-alternatives --altdir /etc/alternatives
#  --admindir /var/lib/alternatives ARGS...`.
# Inside the chroot the in-image absolute paths of the `commands` file are
# used verbatim, so the admin files and symlink targets come out exactly as
# they would on an EL image; nothing is rewritten afterwards.
# Needs root, or unprivileged user namespaces (then `unshare -r` is used).
set -euo pipefail
export LC_ALL=C
umask 022

BIN=${1:?usage: regenerate.sh ALTERNATIVES_BINARY [DEST_DIR]}
HERE=$(cd "$(dirname "$0")" && pwd)
DEST=${2:-$HERE}
BIN=$(readlink -f "$BIN")

if ldd "$BIN" 2>/dev/null | grep -q '=>'; then
    echo "error: $BIN is dynamically linked; build it with -static (see README.md)" >&2
    exit 1
fi

if [ "$(id -u)" = 0 ]; then CHROOT=(chroot); else CHROOT=(unshare -r chroot); fi
ORACLE=/.oracle-alternatives

# run_in ROOT ARGS... : run the oracle inside ROOT with a clean environment.
run_in() {
    local root=$1; shift
    env -i LC_ALL=C PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        "${CHROOT[@]}" "$root" "$ORACLE" \
        --altdir /etc/alternatives --admindir /var/lib/alternatives "$@"
}

new_root() {
    local root=$1
    rm -rf "$root"
    mkdir -p "$root/etc/alternatives" "$root/var/lib/alternatives"
    chmod 0755 "$root" "$root/etc" "$root/etc/alternatives" "$root/var" \
        "$root/var/lib" "$root/var/lib/alternatives"
    cp "$BIN" "$root$ORACLE"
}

# apply_setup ROOT FILE : lines `dir P`, `file P`, `symlink P TARGET`, `#...`
apply_setup() {
    local root=$1 file=$2 kind p t
    [ -f "$file" ] || return 0
    while read -r kind p t; do
        case "$kind" in
            ''|'#'*) ;;
            dir) mkdir -p "$root$p"; chmod 0755 "$root$p" ;;
            file) mkdir -p "$(dirname "$root$p")"; printf 'payload of %s\n' "$p" >"$root$p"; chmod 0755 "$root$p" ;;
            symlink) mkdir -p "$(dirname "$root$p")"; ln -s "$t" "$root$p" ;;
            *) echo "bad setup line: $kind $p $t" >&2; exit 1 ;;
        esac
    done <"$file"
}

# snapshot ROOT OUT : admin/ files, sorted `links`, sorted `tree`
snapshot() {
    local root=$1 out=$2 f
    mkdir -p "$out/admin"
    for f in "$root"/var/lib/alternatives/* "$root"/var/lib/alternatives/.[!.]*; do
        [ -e "$f" ] || [ -L "$f" ] || continue
        cp -P "$f" "$out/admin/"
    done
    (cd "$root" && find . -mindepth 1 -type l -printf '/%P -> %l\n') | sort >"$out/links"
    (cd "$root" && find . -mindepth 1 ! -path "./${ORACLE#/}" \( \
        \( -type d -printf 'd %m /%P\n' \) -o \
        \( -type l -printf 'l %m /%P -> %l\n' \) -o \
        \( -type f -printf 'f %m /%P size=%s\n' \) -o -printf '? %m /%P\n' \)) |
        awk '{ m = sprintf("%04d", $2); $2 = m; print }' | sort -k3 >"$out/tree"
}

# Version stamp.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
new_root "$tmp/v"
{
    run_in "$tmp/v" --version
    echo "binary sha256: $(sha256sum "$BIN" | cut -d' ' -f1)"
} >"$DEST/GENERATED-WITH"

for sdir in "$HERE"/*/; do
    name=$(basename "$sdir")
    [ -f "$sdir/commands" ] || continue
    out="$DEST/$name"
    mkdir -p "$out"
    rm -rf "$out/steps" "$out/admin" "$out/links" "$out/tree" "$out/exit"
    if [ "$out" != "${sdir%/}" ]; then cp "$sdir/commands" "$out/"; [ -f "$sdir/setup" ] && cp "$sdir/setup" "$out/"; fi
    root="$tmp/root-$name"
    new_root "$root"
    apply_setup "$root" "$sdir/setup"
    n=0
    : >"$out/exit"
    while IFS= read -r line; do
        case "$line" in ''|'#'*) continue ;; esac
        n=$((n + 1))
        read -r -a argv <<<"$line"
        case "${argv[0]}" in
            alternatives|update-alternatives|/usr/sbin/alternatives|/usr/sbin/update-alternatives) ;;
            *) echo "$name: command must start with alternatives: $line" >&2; exit 1 ;;
        esac
        step="$out/steps/$n"
        mkdir -p "$step"
        set +e
        run_in "$root" "${argv[@]:1}" >"$step/stdout" 2>"$step/stderr" </dev/null
        rc=$?
        set -e
        echo "$rc" >"$step/exit"
        echo "$rc" >>"$out/exit"
        snapshot "$root" "$step"
    done <"$sdir/commands"
    snapshot "$root" "$out"
    rm -rf "$root"
    echo "$name: $(tr '\n' ' ' <"$out/exit")"
done
