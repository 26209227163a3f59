//! The NRI plugin (`erdma-nri-plugin`): containerd ≥ 1.7 and CRI-O ≥ 1.26 call it for every
//! container they create, and it answers with the edits of [`erdma_oci_hook::modify`] as an NRI
//! adjustment, in one long-running process.
//!
//! - [`adjust`]: the decisions (who asks, what they get), NRI container in, adjustment out.
//! - [`plugin`]: the daemon: connect, register, subscribe, answer, reconnect.
//! - [`wire`]: the transport, NRI's multiplexer and ttrpc, with their limits.
pub mod adjust;
pub mod plugin;
pub mod wire;

/// The NRI API's messages (`proto/nri_v1alpha1.proto`, a subset of nri v0.6.1's).
#[allow(clippy::all, missing_docs)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/nri.pkg.api.v1alpha1.rs"));
}
