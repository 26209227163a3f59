//! `erdma-build`: adds the eRDMA user space to container images without a daemon or root.
//!
//! Where things happen, for a newcomer (each layer imports only the ones below it):
//! - [`build`], [`check`]: the `plan`, `build` and `check` commands tying the rest together.
//! - [`recipe`] and [`distro`]: choosing the per-distro recipe; [`env_presets`]: the NCCL env
//!   presets `build` adds (one table, and `--profile pai-dlc`'s); [`inspect`]: what a base holds.
//! - [`packages`]: where a package gets resolved and unpacked (`packages::apt`), and NCCL's
//!   build chosen; `packages::openpgp`: which repository keys are trusted and signatures verified; [`http`]: the one HTTP client for
//!   repositories, keys and packages (timeouts, retries, streaming).
//! - [`limits`]: what a hostile base or repository may cost (`--max-layers`, `--max-inflation`,
//!   `--max-entries`), and the one reader that bounds decompression.
//! - [`image`]: the image machinery below all of it: names (`image::transport`), reading
//!   (`image::source`, `registry`, `layout`, `blob`), a base's files (`image::files`, `rootfs`),
//!   where a layer gets written (`image::layer`), the config merge (`image::config`), writing
//!   atomically (`image::sink`).
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

pub use error::{Error, Result};
