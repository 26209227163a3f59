#!/usr/bin/env bash
# One Prometheus scrape of erdma-device-plugin's /metrics (--metrics-address) on a host with
# four ERIs (the `four` sysfs fixture: 55 counters per port, as Alibaba's erdma driver has
# them), the pods read from a PodResources stand-in (kubelet's API: 8 pods holding the ERIs),
# timed as Prometheus sees it (HTTP GET on 127.0.0.1; kube/examples/metrics_scrape.rs). Beside
# it, run by run: reading the same counter files and nothing else (the floor). Then the plugin's
# peak RSS. The goals: a scrape under 5 ms, the exporter under 20 MB.
#
#   bench/metrics_scrape.sh [RUNS]        (default 500, after 20 warm-up)
#
# No root needed. Dated figures: docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release --locked -p erdma-kube --bins --examples
target_dir=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)
"$target_dir/release/examples/metrics_scrape" "${1:-500}"
