//! eRDMA in containers: host discovery, the OCI spec edits a container that asks for eRDMA
//! gets, and the pieces that apply them in each engine.
//!
//! Where things happen, for a newcomer:
//! - [`config`]: the operator's settings in `/etc/erdma/oci-hook.toml`.
//! - [`discover`]: eRDMA devices from sysfs and /dev.
//! - [`request`]: whether and what a container asks for.
//! - [`modify`]: where a spec gets edited (devices, cgroup rules, memlock, network, env).
//! - [`nccl`]: the NCCL settings derived from sysfs for a container's devices.
//! - [`topology`]: where GPUs sit beside the eRDMA devices (NCCL's PCIe path types), GPU
//!   Direct RDMA, and which ERI each GPU goes with.
//! - [`netns`]: the network a container is in, read from its namespace, and the host's RDMA
//!   namespace mode.
//! - [`spec`]: reading and atomically writing `config.json` as JSON, unknown fields kept.
//! - [`doctor`]: the host readiness report (`erdma-oci-hook doctor`).
//! - Kubernetes (the device plugin and the NRI plugin, on these same pieces): the `erdma-kube`
//!   crate.
#![forbid(unsafe_code)]

pub mod cdi;
pub mod check;
pub mod config;
pub mod counters;
pub mod discover;
pub mod doctor;
pub mod engine;
pub mod error;
pub mod hooks;
pub mod log;
pub mod modify;
pub mod nccl;
pub mod netns;
pub mod prestart;
pub mod request;
pub mod runtime;
pub mod spec;
pub mod stat;
mod sysfs;
pub mod topology;
pub mod trial;

pub use error::{Error, Result};
