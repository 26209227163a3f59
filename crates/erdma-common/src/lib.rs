//! What both sides of erdma-kit agree on, with no dependency beyond serde: the builder bakes
//! these into images and the runtime side into containers, so each lives here once.
//!
//! - [`nccl`]: the NCCL environment contract of eRDMA (presets, host-specific names, the MTU
//!   rule, the NCCL floor).
//! - [`check`]: the status and finding of a readiness check (`erdma-build check`, `doctor`).
//! - [`cgroups`]: where a process's cgroup is mounted (the hook's device rules, the builder's
//!   memory room).
//! - [`dates`]: UTC civil dates from Unix seconds and back.
//! - [`errors`]: an error and its causes on one line.
//! - [`progress`]: progress events a library reports and a binary shows.
#![forbid(unsafe_code)]

pub mod cgroups;
pub mod check;
pub mod dates;
pub mod errors;
pub mod nccl;
pub mod progress;
