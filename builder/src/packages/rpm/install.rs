//! `dnf install`, without dnf, rpm, root or a container: resolve against verified repository
//! metadata, download and verify the `.rpm`s, unpack their payloads into the layer and write
//! the image's rpm database so that rpm and dnf inside the image see the truth.
use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::image::layer::LayerContents;
use crate::packages::{BaseFiles, Inputs, PackagesReport, Target};
use crate::progress::Reporter;

/// The rpm side of [`crate::packages::install`].
pub async fn install(inputs: &Inputs<'_>, _base: &dyn BaseFiles, _layer: Option<&mut LayerContents>, _reporter: &dyn Reporter) -> Result<(PackagesReport, Vec<String>)> {
    Err(Error::Unsupported(format!("recipe {}: the rpm backend cannot install packages yet", inputs.target.recipe)))
}

/// The rpm side of [`crate::packages::add_repositories`].
pub fn add_repos(target: &Target<'_>, _urls: &BTreeMap<String, String>, _keys: &BTreeMap<String, Vec<u8>>, _base: &dyn BaseFiles, _layer: &mut LayerContents) -> Result<()> {
    Err(Error::Unsupported(format!("recipe {}: the rpm backend cannot configure repositories yet", target.recipe)))
}

/// Installed rpm packages: name → `[E:]V-R` (empty without a database).
pub fn installed(_base: &dyn BaseFiles) -> Result<BTreeMap<String, String>> {
    Ok(BTreeMap::new())
}
