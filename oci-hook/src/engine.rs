//! Registering erdma-runtime / the hooks with Docker, containerd, CRI-O and Podman. (Being written.)
use std::path::PathBuf;

use serde::Serialize;

use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    Docker,
    Containerd,
    Crio,
    Podman,
}

#[derive(Debug, Clone)]
pub struct ConfigureOptions {
    pub dry_run: bool,
    /// The engine's config file or drop-in directory, when not the default.
    pub config_path: Option<PathBuf>,
    /// Absolute path of `erdma-runtime`.
    pub runtime_path: PathBuf,
    /// Absolute path of `erdma-oci-hook`.
    pub hook_path: PathBuf,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConfigureReport {
    pub path: PathBuf,
    pub changed: bool,
    pub backup: Option<PathBuf>,
    /// Unified diff of the change (what `--dry-run` prints).
    pub diff: String,
}

pub fn configure(_engine: Engine, _opts: &ConfigureOptions) -> Result<ConfigureReport> {
    Err(Error::Invalid("configure is not implemented yet".into()))
}
