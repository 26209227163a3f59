//! The rpm backend: Alibaba Cloud Linux, CentOS, Rocky, Alma and RHEL packages, installed the
//! way `dnf install` would, without rpm, dnf, root or a container: the repositories a build
//! reads ([`repos`]), dnf's resolution ([`resolve`]) and the install into the layer and the
//! image's rpm database ([`install`]), over rpm's formats in `erdma_rpm`.
mod fetch;
mod image;
pub mod install;
mod plan;
pub mod prefetch;
mod presets;
pub mod repos;
pub mod resolve;
mod sandboxed;
mod scripts;
mod sources;
mod unpack;

use std::collections::BTreeMap;

use erdma_common::progress::Reporter;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;

use crate::error::Result;
use crate::packages::{nccl, Inputs, PackageManager, PackagesReport, Target};

/// The rpm backend behind [`PackageManager`].
pub struct Rpm;

impl PackageManager for Rpm {
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
        nccl_cuda: Option<nccl::Cuda>,
        base: &dyn BaseFiles,
        layer: &mut LayerContents,
    ) -> Result<()> {
        sources::add_repos(target, urls, keys, nccl_cuda, base, layer)
    }

    fn installed(&self, base: &dyn BaseFiles) -> Result<BTreeMap<String, String>> {
        install::installed(base)
    }
}
