//! The apt backend: Debian and Ubuntu packages, installed the way `apt-get install` would.
mod dpkg;
mod fetch;
pub mod file_changes;
pub mod install;
pub mod local;
mod order;
pub mod prefetch;
pub mod resolve;
mod sandboxed;
mod scripts;
mod services;
mod shells;
mod sources;
mod ucf;
mod unpack;

use std::collections::BTreeMap;

use erdma_common::progress::Reporter;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;

use crate::error::Result;
use crate::packages::{nccl, Inputs, PackageManager, PackagesReport, Target};

/// The apt backend behind [`PackageManager`].
pub struct Apt;

impl PackageManager for Apt {
    fn install(
        &self,
        inputs: &Inputs<'_>,
        base: &dyn BaseFiles,
        layer: Option<&mut LayerContents>,
        reporter: &dyn Reporter,
    ) -> impl std::future::Future<Output = Result<(PackagesReport, Vec<String>)>> {
        install::install(inputs, base, layer, reporter)
    }

    fn add_repositories(
        &self,
        target: &Target<'_>,
        urls: &BTreeMap<String, String>,
        keys: &BTreeMap<String, Vec<u8>>,
        // apt keeps NCCL's build by holding the package in dpkg's status (`Planned::hold`).
        _nccl_cuda: Option<nccl::Cuda>,
        base: &dyn BaseFiles,
        layer: &mut LayerContents,
    ) -> Result<()> {
        sources::add_sources(target, urls, keys, base, layer)
    }

    fn installed(&self, base: &dyn BaseFiles) -> Result<BTreeMap<String, String>> {
        dpkg::installed(base)
    }
}
