//! Package backends: where a package gets resolved, fetched and unpacked into the layer.
//!
//! `apt` is the one backend today; an `rpm` backend slots in beside it. What every backend
//! needs lives here, once, below them: OpenPGP keys, pins and signature verification
//! ([`openpgp`]) and NCCL's build selection ([`nccl`]).
pub mod apt;
/// NCCL builds: which `libnccl2` fits an image's CUDA, and what a `libnccl.so` says it is.
pub mod nccl;
pub mod openpgp;
