//! Downloading the chosen `.deb`s into the cache, each checked against the verified index
//! before it is used.
use std::path::{Path, PathBuf};

use futures_util::StreamExt;

use super::resolve::Planned;
use crate::error::{Error, Result};
use crate::packages::PackageError;
use crate::packages::PackagesReport;
use erdma_common::progress::Reporter;
use erdma_deb::repo::IndexedPackage;

/// Downloads (or takes from the cache) every planned `.deb`, checked against the index. With
/// `ahead`, each package's payload is decompressed into the cache as soon as the package is
/// at hand, beside the downloads still running ([`erdma_deb::deb::PayloadsAhead`]).
pub(super) async fn fetch_debs(
    client: &erdma_http::Client,
    plan: &[Planned],
    cache_dir: &Path,
    ahead: Option<&erdma_deb::deb::PayloadsAhead>,
    report: &mut PackagesReport,
    reporter: &dyn Reporter,
) -> Result<Vec<PathBuf>> {
    let dir = cache_dir.join("debs");
    std::fs::create_dir_all(&dir).map_err(Error::io("creating cache", &dir))?;
    let mut fetched = futures_util::stream::iter(plan.iter().map(|p| {
        let client = client.clone();
        let dir = dir.clone();
        async move { fetch_one(&client, &p.pkg, &dir).await }
    }))
    .buffered(4);
    // In the plan's order, which is the order the packages are unpacked in.
    let mut results: Vec<Result<(PathBuf, u64)>> = Vec::with_capacity(plan.len());
    while let Some(r) = fetched.next().await {
        if let (Some(ahead), Ok((path, _))) = (ahead, &r) {
            decompress_ahead(ahead, &plan[results.len()].pkg, path, cache_dir, client.inflation());
        }
        results.push(r);
    }
    let mut paths = Vec::new();
    for (r, p) in results.into_iter().zip(plan) {
        let (path, downloaded) = r?;
        if downloaded == 0 {
            report.cached_debs += 1;
        }
        report.downloaded_bytes += downloaded;
        reporter.step(&format!("got {} {}", p.name, p.version));
        paths.push(path);
    }
    Ok(paths)
}

/// The cache is keyed by SHA256: a cached file is used when it still hashes as its name says
/// (checked again on every build, on the blocking pool; anything else is fetched again); a
/// download streams to a temporary name while it is hashed (never held in memory), is
/// checked, then renamed.
pub(crate) async fn fetch_one(
    client: &erdma_http::Client,
    pkg: &IndexedPackage,
    dir: &Path,
) -> Result<(PathBuf, u64)> {
    let (sha256, url, size) = (pkg.sha256(), pkg.url(), pkg.size());
    let path = dir.join(format!("{sha256}.deb"));
    if erdma_oci::blob::digest_hex(&format!("sha256:{sha256}")).is_err() {
        return Err(PackageError::MalformedChecksum {
            kind: "SHA256",
            url: url.clone(),
            repo: pkg.repo().to_string(),
        }
        .into());
    }
    if path.exists() {
        let (pkg, dir) = (pkg.clone(), dir.to_owned());
        let intact = tokio::task::spawn_blocking(move || cached(&pkg, &dir))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        if let Some(path) = intact {
            return Ok((path, 0));
        }
        // Damaged, or not the user's own: fetched again below, the download replacing it
        // (the report counts it as downloaded, not cached).
    }
    let fail = |reason: crate::error::Cause| Error::Download { url: url.clone(), reason };
    // One byte more than the index says is enough to know the file is wrong.
    let (tmp, got_size, got) = match client.download(&url, dir, size).await {
        Ok(Some(d)) => d,
        Ok(None) => return Err(fail("not found (404)".into())),
        Err(erdma_http::HttpError::TooLarge { .. }) => {
            return Err(fail(format!("larger than the {size} bytes the index says").into()))
        }
        Err(e) => return Err(fail(e.into())),
    };
    if got_size != size {
        return Err(fail(format!("size {got_size} but the index says {size}").into()));
    }
    if got != sha256 {
        return Err(Error::DigestMismatch {
            expected: format!("sha256:{sha256} ({url})"),
            actual: format!("sha256:{got}"),
        });
    }
    tmp.persist(&path).map_err(|e| Error::io("writing cache", &path)(e.error))?;
    Ok((path, got_size))
}

/// The cache's copy of `pkg` in `dir` (`HASH.deb`), when it is the user's own, not writable by
/// others ([`erdma_limits::kept`]), and still the size and SHA256 its index gives.
fn cached(pkg: &IndexedPackage, dir: &Path) -> Option<PathBuf> {
    let (sha256, size) = (pkg.sha256(), pkg.size());
    let digest = format!("sha256:{sha256}");
    erdma_oci::blob::digest_hex(&digest).ok()?;
    let path = dir.join(format!("{sha256}.deb"));
    let file = erdma_limits::kept::open(&path, size).ok()?;
    let read = erdma_oci::blob::check_reader(file, &digest).ok()?;
    (read == size).then_some(path)
}

/// Where the decompressed payload of `path` is kept between builds
/// ([`erdma_deb::deb::for_each_data_entry_kept`]): `payloads/` in the cache, by the package's
/// SHA256, when `path` is the cache's copy of `pkg` (checked against that SHA256 when it came);
/// `None` for any other file.
pub(crate) fn kept_payload(pkg: &IndexedPackage, path: &Path, cache_dir: &Path) -> Option<PathBuf> {
    let sha256 = pkg.sha256();
    erdma_oci::blob::digest_hex(&format!("sha256:{sha256}")).ok()?;
    (path == cache_dir.join("debs").join(format!("{sha256}.deb")))
        .then(|| cache_dir.join("payloads").join(format!("{sha256}.tar")))
}

/// Puts `pkg`'s payload (the `.deb` at `path`) on `ahead`'s threads, when it is to be kept
/// ([`kept_payload`]) and likely to fit ([`erdma_deb::deb::KEPT_MAX`]): a package is taken
/// when its `.deb` is at most a sixteenth of that, as xz seldom shrinks a `data.tar` more.
/// A larger one (NCCL's, CUDA's) is decompressed by its walk alone, not once ahead up to the
/// limit and again after; a smaller one that still does not fit costs that once.
fn decompress_ahead(
    ahead: &erdma_deb::deb::PayloadsAhead,
    pkg: &IndexedPackage,
    path: &Path,
    cache_dir: &Path,
    inflation: u64,
) {
    let Some(kept) = kept_payload(pkg, path, cache_dir) else { return };
    if pkg.size().saturating_mul(16) <= erdma_deb::deb::KEPT_MAX {
        ahead.keep(path.to_owned(), inflation, kept);
    }
}

/// Where `pkg` already is on this machine, checked to be the file its index names: the
/// cache's copy ([`cached`]), or the file a `file://` repository serves.
pub(crate) fn on_disk(pkg: &IndexedPackage, cache: &Path) -> Option<PathBuf> {
    if let Some(path) = cached(pkg, cache) {
        return Some(path);
    }
    let url = pkg.url();
    let file = std::path::PathBuf::from(url.strip_prefix("file://")?);
    let opened = std::fs::File::open(&file).ok()?;
    erdma_oci::blob::check_reader(opened, &format!("sha256:{}", pkg.sha256())).ok()?;
    Some(file)
}
