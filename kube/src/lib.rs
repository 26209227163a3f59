//! eRDMA for Kubernetes, on top of the runtime side ([`erdma_oci_hook`]): the same discovery,
//! requests and spec-edit core, spoken over kubelet's and NRI's APIs.
//!
//! - [`deviceplugin`]: what is advertised and allocated (`aliyun/erdma`), with [`kubelet`], its
//!   gRPC side (device-plugin API v1beta1, `proto/`).
//! - [`dra`]: the DRA driver `erdma.aliyun.com` (`erdma-dra-plugin`): ResourceSlices published to
//!   the API server, claims prepared as CDI specs, over kubelet's DRA and registration APIs.
//! - [`grant`]: what a container handed a set of ERIs gets, for both.
//! - [`holders`]: which containers hold which ERI, from kubelet's records and the NRI plugin's.
//! - [`metrics`]: Prometheus metrics of the node's ERIs and their holders.
//! - [`nri`]: the NRI plugin: the spec edits as an NRI adjustment, in one long-running process.
#![forbid(unsafe_code)]

pub mod deviceplugin;
pub mod dra;
pub mod grant;
pub mod holders;
pub mod kubelet;
pub mod metrics;
pub mod nri;
