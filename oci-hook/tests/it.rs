//! The one integration test binary of erdma-oci-hook (one per crate; its helpers, `support`,
//! are erdma-testkit's, shared with erdma-kube's tests). Cases that need root or real runc say so and call
//! `support::require`, which fails under `CI` and skips locally.
#![forbid(unsafe_code)]
// A test binary has no API: its helpers are `pub` for the modules beside them.
#![allow(unreachable_pub)]

mod cdi_cases;
mod doctor_cases;
mod engine_cases;
mod nccl_cases;
mod prestart_cases;
mod real_engine_cases;
mod runtime_cases;
mod stat_cases;
use erdma_testkit as support;
mod topology_cases;
