//! `erdma-build`: adds the eRDMA user space to container images without a daemon or root.
//!
//! Where things happen, for a newcomer (each layer imports only the ones below it):
//! - [`build`], [`check`]: the `plan`, `build` and `check` commands tying the rest together.
//! - [`recipe`] and [`distro`]: choosing the per-distro recipe; [`env_presets`]: the NCCL env
//!   presets `build` adds (over `erdma_common::nccl`); [`inspect`]: what a base holds.
//! - [`packages`]: where a package gets resolved and unpacked, behind one `PackageManager`
//!   trait (`packages::apt`, `packages::rpm`), and NCCL's build chosen.
//! - [`sandbox`]: running what cannot be emulated (maintainer scripts) inside the image's root,
//!   cut off from the host.
//! - Below the builder, in their own crates: images (`erdma_oci`), Debian's and rpm's formats
//!   (`erdma_deb`, `erdma_rpm`), OpenPGP (`erdma_openpgp`), the HTTP client (`erdma_http`) and
//!   the bounds on hostile input (`erdma_limits`). docs/architecture.md draws the whole graph.
#![forbid(unsafe_code)]

pub mod build;
pub mod check;
pub mod cli;
pub mod distro;
pub mod env_presets;
pub mod error;
pub mod inspect;
pub mod packages;
pub mod recipe;
pub mod sandbox;
pub mod self_image;

pub use error::{Error, Result};
