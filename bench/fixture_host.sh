# Sourced by the container-start benchmarks: the fixture host they run over.
# fixture_host DIR [SCENARIO]: DIR/sys (the scenario's sysfs, default `two`), DIR/dev (its nodes,
# mknod'd), DIR/oci-hook.toml pointing at both (runc as the real runtime, log in DIR/erdma.log,
# memlock 4 MiB: the default, unlimited, is above this machine's hard limit without
# CAP_SYS_RESOURCE, and runc would refuse it), exported as ERDMA_OCI_HOOK_CONFIG.
fixture_host() {
    local dir=$1 fix=testdata/sysfs/${2:-two} path type major minor
    cp -a "$fix/sys" "$dir/sys"
    while read -r path type major minor; do
        case "$path" in ''|'#'*) continue ;; esac
        mkdir -p "$dir/dev/$(dirname "$path")"
        mknod -m 0666 "$dir/dev/$path" "$type" "$major" "$minor"
    done <"$fix/dev.txt"
    cat >"$dir/oci-hook.toml" <<EOT
runtime = "$(command -v runc)"
sysfs_root = "$dir/sys"
dev_root = "$dir/dev"
log_file = "$dir/erdma.log"
memlock = 4194304
EOT
    export ERDMA_OCI_HOOK_CONFIG="$dir/oci-hook.toml"
    unset RUST_LOG
}
