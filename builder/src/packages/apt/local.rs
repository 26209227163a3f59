//! `--package FILE|URL`: a `.deb` that no repository signs (Alibaba's AIACC NCCL plugin is
//! published as a bare download, the ECS AI-training-cluster guide), installed beside the recipe's packages.
//!
//! Nothing vouches for such a file, so it is taken only with `--allow-unsigned-package`, and
//! the report and an image label name it with its SHA256. Its control file becomes a one-stanza
//! index, so the resolver, the download cache and the dpkg bookkeeping treat it as they treat
//! every other package; its dependencies come from the (verified) repositories. A download is
//! streamed into the cache while it is hashed, never held in memory whole.
use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Result};
use erdma_deb::deb;
use erdma_deb::repo::IndexedPackage;

/// The largest `.deb` accepted from a URL (NVIDIA's biggest packages are a few hundred MB).
const MAX_DEB: u64 = 2 << 30;

/// A local or downloaded package, checked to be a readable `.deb`.
#[derive(Debug, Clone, Serialize)]
pub struct LocalDeb {
    pub name: String,
    pub version: String,
    pub arch: String,
    /// The file or URL as the user gave it.
    pub source: String,
    pub sha256: String,
    #[serde(skip)]
    pub package: IndexedPackage,
}

impl LocalDeb {
    /// `name=version`, the request that installs exactly this file.
    pub fn request(&self) -> String {
        format!("{}={}", self.name, self.version)
    }
}

/// Reads `--package FILE|URL`: a URL is downloaded into the package cache first (keyed by its
/// SHA256, as every `.deb` is there).
pub async fn load(arg: &str, cache_dir: &Path, client: &erdma_http::Client) -> Result<LocalDeb> {
    let (path, size, sha256) =
        crate::packages::local_package(arg, &cache_dir.join("debs"), "deb", MAX_DEB, client)
            .await?;
    let control = deb::read_control(&path)
        .map_err(|e| Error::Deb { path: path.clone(), source: Box::new(e) })?
        .control;
    let field = |f: &str| {
        control.get(f).map(str::to_string).ok_or_else(|| Error::Malformed {
            what: "package control",
            reference: arg.to_string(),
            reason: format!("no {f} field").into(),
        })
    };
    let (name, version, arch) = (field("Package")?, field("Version")?, field("Architecture")?);
    // The control stanza as an index stanza: where the file is, and what it must hash to.
    let dir = path.parent().unwrap_or(Path::new("/")).to_string_lossy().into_owned();
    let file = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let mut stanza = control.clone();
    let bad = |e: erdma_deb::deb822::Deb822Error| Error::Malformed {
        what: "package control",
        reference: arg.to_string(),
        reason: e.into(),
    };
    stanza.set("Filename", file).map_err(bad)?;
    stanza.set("Size", size.to_string()).map_err(bad)?;
    stanza.set("SHA256", sha256.clone()).map_err(bad)?;
    let origin = format!("unsigned {arg}");
    let index = format!("{stanza}\n");
    let mut packages =
        IndexedPackage::read_index(index, arg, &format!("file://{dir}"), &origin, &origin)?;
    let package = packages.pop().ok_or_else(|| Error::Malformed {
        what: "package control",
        reference: arg.to_string(),
        reason: "no stanza".into(),
    })?;
    Ok(LocalDeb { name, version, arch, source: arg.to_string(), sha256, package })
}
