#!/usr/bin/env bash
# erdma-dra-plugin's NodePrepareResources for one ERI, as kubelet calls it over the DRA socket
# (v1), each run a fresh claim: the claim read from the API server, the devices discovered, the
# CDI spec written (kube/examples/dra_prepare.rs). Beside it, run by run: the claim's GET alone
# through the same client (the API server's share, here the tests' stand-in on 127.0.0.1), and
# NodeUnprepareResources. The goal (issue 40): prepare under 5 ms at p50.
#
#   bench/dra_prepare.sh [RUNS]        (default 200, after 10 warm-up)
#
# Host: the `two` sysfs fixture with mknod'd nodes. Needs root (mknod). Dated figures:
# docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "dra_prepare: needs root (mknod'd device nodes)" >&2; exit 1; }
cargo run --quiet --release --locked -p erdma-kube --example dra_prepare -- "${1:-200}"
