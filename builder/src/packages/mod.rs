//! Package backends: where a package gets resolved, fetched and unpacked into the layer.
//!
//! `apt` is the one backend today; an `rpm` backend slots in beside it behind the same
//! entry points, without touching the image code in `build.rs`.
pub mod apt;
/// NCCL builds: which `libnccl2` fits an image's CUDA, and what a `libnccl.so` says it is.
pub mod nccl;
