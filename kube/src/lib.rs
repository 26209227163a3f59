//! eRDMA for Kubernetes, on top of the runtime side ([`erdma_oci_hook`]): the same discovery,
//! requests and spec-edit core, spoken over kubelet's and NRI's APIs.
//!
//! - [`deviceplugin`]: what is advertised and allocated (`aliyun/erdma`), with [`kubelet`], its
//!   gRPC side (device-plugin API v1beta1, `proto/`).
//! - [`grant`]: what a container handed a set of ERIs gets.
//! - [`nri`]: the NRI plugin: the spec edits as an NRI adjustment, in one long-running process.
#![forbid(unsafe_code)]

pub mod deviceplugin;
pub mod grant;
pub mod kubelet;
pub mod nri;
