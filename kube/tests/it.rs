//! The one integration test binary of erdma-kube (small helpers in `support`). Cases that need
//! root, containerd or kubectl say so and call `support::require`, which fails under `CI` and
//! skips locally. The runtime side's binaries (`erdma-oci-hook`, `erdma-runtime`) come from the
//! same target directory: run with `cargo nextest run --workspace`.
#![forbid(unsafe_code)]
// A test binary has no API: its helpers are `pub` for the modules beside them.
#![allow(unreachable_pub)]

mod cri_cases;
mod deploy_cases;
mod deviceplugin_cases;
mod dra_cases;
mod metrics_cases;
mod nri_cases;
mod support;
