//! `erdma-build`: adds the eRDMA user space to container images without a daemon or root.
//!
//! Where things happen, for a newcomer:
//! - [`transport`]: parsing `docker://`, `oci:`, `oci-archive:`, `docker-archive:` names.
//! - [`http`]: the one HTTP client for repositories, keys and packages (timeouts, retries).
//! - [`source`]: reading manifests, configs and blobs from any transport.
//! - [`sink`]: writing blobs and manifests to any transport, atomically.
//! - [`layer`]: the reproducible layer writer (where a layer gets written).
//! - [`config`]: merging the image config (env presets, labels, history).
//! - [`env_presets`]: the NCCL env presets `build` adds (one table, and `--profile pai-dlc`'s).
//! - [`rootfs`]: reading single files out of an image's layers (whiteouts honoured).
//! - [`recipe`] and [`distro`]: choosing the per-distro recipe.
//! - [`build`]: the `plan` and `build` commands tying the above together.
#![forbid(unsafe_code)]

pub mod auth;
pub mod blob;
pub mod build;
pub mod check;
pub mod cli;
pub mod config;
pub mod distro;
pub mod env_presets;
pub mod error;
pub mod http;
pub mod keys;
pub mod inspect;
pub mod packages;
pub mod layer;
pub mod layout;
pub mod progress;
pub mod recipe;
pub mod registry;
pub mod rootfs;
pub mod sink;
pub mod source;
pub mod transport;

pub use error::{Error, Result};
