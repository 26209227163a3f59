//! Downloading the chosen `.rpm`s into the cache, each checked against the verified metadata
//! and its signature before it is used.
use std::path::{Path, PathBuf};

use futures_util::{StreamExt, TryStreamExt};

use super::plan::Resolved;
use crate::error::{Error, Result};
use crate::packages::PackageError;
use crate::packages::{Inputs, PackagesReport};
use erdma_common::progress::Reporter;
use erdma_rpm::repodata;
use erdma_rpm::PackageMeta;

/// A `--package` URL larger than this is refused (NVIDIA's NCCL rpms are about 200 MiB).
pub(crate) const MAX_RPM: u64 = 4 << 30;

/// A planned package already on this machine: a `--package` file, or one in the package
/// cache (named by the checksum its repository gives, and verified when it was stored).
/// Its signature is checked again, as a build checks it.
pub(crate) fn on_disk(
    inputs: &Inputs<'_>,
    resolved: &Resolved,
    meta: &PackageMeta,
) -> Result<Option<(PathBuf, erdma_rpm::package::Package)>> {
    if let Some((path, _)) =
        resolved.local.iter().find(|(_, m)| m.origin == meta.origin && m.name == meta.name)
    {
        let pkg = erdma_rpm::package::open(path)
            .map_err(|e| local_package(&path.display().to_string(), e))?;
        return Ok(Some((path.clone(), pkg)));
    }
    let (Some(sum), Some(repo)) =
        (&meta.checksum, resolved.repos.iter().find(|r| r.name == meta.origin))
    else {
        return Ok(None);
    };
    let Some(stem) = sum.file_stem() else { return Ok(None) };
    let path = inputs.cache_dir.join("rpm").join("packages").join(format!("{stem}.rpm"));
    if !path.is_file() {
        return Ok(None);
    }
    let pkg = erdma_rpm::package::open(&path).map_err(|e| package_file(path.display(), e))?;
    pkg.verify(&path, &repo.keyring, erdma_common::dates::now()).map_err(|e| {
        Error::from(PackageError::Unverified {
            nevra: meta.nevra(),
            repo: repo.name.clone(),
            at: format!("cached {}", path.display()),
            why: Box::new(e),
        })
    })?;
    Ok(Some((path, pkg)))
}

/// How many packages are downloaded and checked at once.
const AT_ONCE: usize = 4;

/// Downloads (or takes from the cache) every planned package, checks it against the checksum
/// its repository's `primary.xml` gives, and verifies its OpenPGP header signature and payload
/// digest against the repository's key, as dnf with `gpgcheck=1` does. `--package` files are
/// only read. Up to [`AT_ONCE`] at a time, in the plan's order: the downloads overlap their
/// round trips, and the checks (a signature, a read of the whole payload) run on the blocking
/// pool beside them; the first package in the plan's order that fails gives the error.
pub(crate) async fn fetch(
    inputs: &Inputs<'_>,
    resolved: &Resolved,
    report: &mut PackagesReport,
    reporter: &dyn Reporter,
) -> Result<Vec<(PathBuf, erdma_rpm::package::Package)>> {
    let dir = inputs.cache_dir.join("rpm").join("packages");
    std::fs::create_dir_all(&dir).map_err(Error::io("creating cache", &dir))?;
    let fetched: Vec<Fetched> = futures_util::stream::iter(
        resolved
            .plan
            .install
            .iter()
            .map(|p| fetch_one(inputs, resolved, &dir, &p.package, reporter)),
    )
    .buffered(AT_ONCE)
    .try_collect()
    .await?;
    let mut out = Vec::new();
    for f in fetched {
        match f.downloaded {
            Some(bytes) => report.downloaded_bytes += bytes,
            None if f.local => {}
            None => report.cached_debs += 1,
        }
        out.push((f.path, f.package));
    }
    Ok(out)
}

/// One package of the plan, on disk and checked.
struct Fetched {
    path: PathBuf,
    package: erdma_rpm::package::Package,
    /// The bytes downloaded for it; `None`: it was in the cache, or a `--package` file.
    downloaded: Option<u64>,
    /// A `--package` file.
    local: bool,
}

async fn fetch_one(
    inputs: &Inputs<'_>,
    resolved: &Resolved,
    dir: &Path,
    meta: &PackageMeta,
    reporter: &dyn Reporter,
) -> Result<Fetched> {
    if let Some((path, _)) =
        resolved.local.iter().find(|(_, m)| m.origin == meta.origin && m.name == meta.name)
    {
        let package = erdma_rpm::package::open(path)
            .map_err(|e| local_package(&path.display().to_string(), e))?;
        return Ok(Fetched { path: path.clone(), package, downloaded: None, local: true });
    }
    let repo = resolved
        .repos
        .iter()
        .find(|r| r.name == meta.origin)
        .ok_or_else(|| Error::from(PackageError::NoOrigin { nevra: meta.nevra() }))?;
    let location = meta.location.as_deref().ok_or_else(|| {
        Error::from(PackageError::NoLocation { nevra: meta.nevra(), repo: repo.name.clone() })
    })?;
    let url = format!("{}/{}", repo.url.trim_end_matches('/'), location.trim_start_matches('/'));
    let sum = meta.checksum.clone().ok_or_else(|| {
        Error::from(PackageError::NoChecksum { nevra: meta.nevra(), repo: repo.name.clone() })
    })?;
    // The cache file is named from the checksum: hex digits and an algorithm name only.
    let Some(stem) = sum.file_stem() else {
        return Err(PackageError::MalformedChecksum {
            kind: "checksum",
            url,
            repo: repo.name.clone(),
        }
        .into());
    };
    let path = dir.join(format!("{stem}.rpm"));
    let mut downloaded = None;
    if !path.exists() {
        reporter.step(&format!("downloading {}", meta.nevra()));
        let fail = |reason: crate::error::Cause| Error::Download { url: url.clone(), reason };
        let limit = if meta.size > 0 { meta.size } else { MAX_RPM };
        let (tmp, got_size, got_sha256) = match inputs.http.download(&url, dir, limit).await {
            Ok(Some(d)) => d,
            Ok(None) => return Err(fail("not found (404)".into())),
            Err(erdma_http::HttpError::TooLarge { .. }) => {
                return Err(fail(format!("larger than the {limit} bytes primary.xml says").into()))
            }
            Err(e) => return Err(fail(e.into())),
        };
        if meta.size > 0 && got_size != meta.size {
            return Err(fail(format!("size {got_size} but primary.xml says {}", meta.size).into()));
        }
        // SHA256 (what createrepo_c writes) was computed as the file streamed by; another
        // kind is checked from the file.
        if sum.kind == "sha256" {
            if got_sha256 != sum.hex {
                return Err(Error::DigestMismatch {
                    expected: format!("sha256:{} ({url})", sum.hex),
                    actual: format!("sha256:{got_sha256}"),
                });
            }
        } else {
            let bytes =
                std::fs::read(tmp.path()).map_err(Error::io("reading download", tmp.path()))?;
            repodata::verify(&bytes, &sum).map_err(|e| match e {
                repodata::RepodataError::ChecksumMismatch { kind, actual, .. } => {
                    Error::DigestMismatch {
                        expected: format!("{}:{} ({url})", sum.kind, sum.hex),
                        actual: format!("{kind}:{actual}"),
                    }
                }
                source => Error::Repodata { repo: repo.name.clone(), source },
            })?;
        }
        tmp.persist(&path).map_err(|e| Error::io("writing cache", &path)(e.error))?;
        downloaded = Some(got_size);
    }
    let (keyring, checked) = (repo.keyring.clone(), path.clone());
    let package = tokio::task::spawn_blocking(move || {
        let pkg = erdma_rpm::package::open(&checked).map_err(|e| (true, e))?;
        pkg.verify(&checked, &keyring, erdma_common::dates::now()).map_err(|e| (false, e))?;
        Ok(pkg)
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    .map_err(|(opening, e)| match opening {
        true => package_file(&url, e),
        false => Error::from(PackageError::Unverified {
            nevra: meta.nevra(),
            repo: repo.name.clone(),
            at: url.clone(),
            why: Box::new(e),
        }),
    })?;
    Ok(Fetched { path, package, downloaded, local: false })
}

pub(crate) fn local_package(arg: &str, why: impl Into<crate::error::Cause>) -> Error {
    PackageError::LocalPackage { arg: arg.to_string(), why: why.into() }.into()
}

pub(crate) fn package_file(
    at: impl std::fmt::Display,
    why: impl Into<crate::error::Cause>,
) -> Error {
    PackageError::Package { at: at.to_string(), why: why.into() }.into()
}
