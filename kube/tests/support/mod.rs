//! The runtime side's test helpers (erdma-testkit: fixtures, `bin`, `require`, busybox
//! bundles), shared rather than copied, and the CRI client these tests drive containerd with
//! ([`cri`]).
#![allow(dead_code, unused_imports)]

pub use erdma_testkit::*;

pub mod cri;
