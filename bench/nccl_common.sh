# Sourced by the NCCL benchmarks: a python with torch, and two ranks' network namespaces as two
# pods on a CNI network.

# torch_python SCRIPT: sets PYTHON to the first python that imports torch (PYTHON when set), or
# stops SCRIPT with exit 2.
torch_python() {
    local p
    if [ -z "${PYTHON:-}" ]; then
        for p in python3 /opt/*/bin/python /root/*/bin/python /workspace/*/bin/python /venv/bin/python; do
            if [ -x "$(command -v "$p" 2>/dev/null)" ] && "$p" -c 'import torch' 2>/dev/null; then
                PYTHON=$p
                break
            fi
        done
    fi
    [ -n "${PYTHON:-}" ] || { echo "$1: no python with torch (set PYTHON)" >&2; exit 2; }
}

# netns_pair A B: namespaces A and B joined by a veth pair, `v0` 10.231.7.1/24 in A and `v1`
# 10.231.7.2/24 in B, every link up. Uses $IP (iproute2's ip, a command line).
netns_pair() {
    local a=$1 b=$2 ns
    $IP netns add "$a"
    $IP netns add "$b"
    $IP link add v0 netns "$a" type veth peer name v1 netns "$b"
    $IP -n "$a" addr add 10.231.7.1/24 dev v0
    $IP -n "$b" addr add 10.231.7.2/24 dev v1
    for ns in "$a" "$b"; do $IP -n "$ns" link set lo up; done
    $IP -n "$a" link set v0 up
    $IP -n "$b" link set v1 up
}
