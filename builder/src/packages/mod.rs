//! Package backends: where a package gets resolved, fetched and unpacked into the layer.
//!
//! `apt` is the one backend today; an `rpm` backend slots in beside it. What every backend
//! needs lives here, once, below them: OpenPGP keys, pins and signature verification
//! ([`openpgp`]) and NCCL's build selection ([`nccl`]).
pub mod apt;
/// NCCL builds: which `libnccl2` fits an image's CUDA, and what a `libnccl.so` says it is.
pub mod nccl;
pub mod openpgp;

use serde::{Deserialize, Serialize};

/// A repository packages come from, as a recipe names it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Repository {
    pub name: String,
    /// Mirrors in order of preference; the first goes into the image's source list.
    /// Empty when `from_base` is set.
    #[serde(default)]
    pub urls: Vec<String>,
    /// Use the archive the base image is configured with (its own sources.list).
    #[serde(default)]
    pub from_base: bool,
    #[serde(default)]
    pub suite: Option<String>,
    #[serde(default)]
    pub components: Vec<String>,
    #[serde(default)]
    pub key_url: Option<String>,
    /// Pinned OpenPGP fingerprint of the repository key's primary key (40 hex digits for v4,
    /// 64 for v6).
    #[serde(default)]
    pub fingerprint: Option<String>,
    /// NVIDIA's CUDA repository: read (and added to the image) only with `--nccl`, and the
    /// only origin NCCL is taken from. `{nvarch}` in its URLs is NVIDIA's name for the
    /// architecture (`x86_64`, `sbsa`).
    #[serde(default)]
    pub nccl: bool,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Packages {
    #[serde(default)]
    pub install: Vec<String>,
    #[serde(default)]
    pub remove: Vec<String>,
    /// Files removed (whited out) from the image, such as Mellanox's apt source.
    #[serde(default)]
    pub remove_files: Vec<String>,
}

/// What a backend is asked to install, from where: the part of a recipe the backends read.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The recipe's name, for messages.
    pub recipe: &'a str,
    pub repositories: &'a [Repository],
    pub packages: &'a Packages,
    /// os-release `ID`, the release's codename and its name, for a base without sources.
    pub distro_id: &'a str,
    pub codename: Option<&'a str>,
    pub pretty: &'a str,
}

impl<'a> Target<'a> {
    /// Names of the repositories NCCL may come from.
    pub fn nccl_repositories(&self) -> Vec<&'a str> {
        self.repositories.iter().filter(|r| r.nccl).map(|r| r.name.as_str()).collect()
    }
}
