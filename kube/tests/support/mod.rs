//! The runtime side's test helpers (`oci-hook/tests/support/mod.rs`: fixtures, `bin`,
//! `require`, busybox bundles), shared rather than copied, and the CRI client these tests drive
//! containerd with ([`cri`]).
#![allow(dead_code, unused_imports)]

#[path = "../../../oci-hook/tests/support/mod.rs"]
mod shared;

pub use shared::*;

pub mod cri;
