//! Fetching and verifying a yum repository's metadata, the way dnf does it: `repomd.xml`,
//! verified against `repomd.xml.asc` when there is one (and required to have one with
//! `repo_gpgcheck`), then the `primary` metadata it names, checked against repomd's checksum
//! before it is decompressed and read into a [`PrimaryIndex`] (kept by that checksum for the
//! next build); [`select_packages`] then parses the packages a resolution can reach. Each
//! package's own checksum and signature are checked by the caller after downloading it
//! ([`crate::package`]). The apt counterpart is `erdma_deb::repo`.
use std::path::{Path, PathBuf};

use crate::index::{PrimaryIndex, KEPT_FORMAT};

use erdma_http::{Client, HttpError};
use erdma_openpgp::{Keyring, SignatureError};

use crate::repodata::{self, RepoMdData, RepodataError};
use crate::{Checksum, PackageMeta};

/// `repomd.xml` is a few KiB; Fedora's `primary.xml` is about 100 MiB decompressed.
pub const MAX_REPOMD: u64 = 16 << 20;
/// The largest compressed metadata file fetched.
pub const MAX_PRIMARY: u64 = 256 << 20;
/// The largest decompressed `primary.xml` read.
pub const MAX_PRIMARY_OPEN: u64 = 1 << 30;

/// A repository's packages, read from its verified metadata.
pub struct LoadedRepo {
    pub name: String,
    /// The base URL it was reached at.
    pub url: String,
    /// Every package, as names.
    pub index: PrimaryIndex,
    /// The packages [`select_packages`] parsed: none before it.
    pub packages: Vec<PackageMeta>,
    pub keyring: Keyring,
}

/// Fills each repository's `packages` with those a resolution starting from `seeds` can
/// reach ([`crate::index::select`]).
pub fn select_packages<'a>(
    repos: &mut [LoadedRepo],
    seeds: impl IntoIterator<Item = &'a str>,
) -> Result<(), RepoError> {
    let indices: Vec<(&PrimaryIndex, &str)> =
        repos.iter().map(|r| (&r.index, r.name.as_str())).collect();
    // Only a kept index that does not match its own XML fails here (a damaged cache).
    let selected = crate::index::select(&indices, seeds).map_err(|source| RepoError::Metadata {
        at: "a kept primary.xml index (the build cache's rpm/rpm-md/; remove it to read the repository again)".into(),
        source,
    })?;
    for (repo, packages) in repos.iter_mut().zip(selected) {
        repo.packages = packages;
    }
    Ok(())
}

/// Why a repository's metadata could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    /// No mirror could be reached (each one's reason, in order).
    #[error("repository `{name}` cannot be reached ({})", tried.join("; "))]
    Unreachable { name: String, tried: Vec<String> },
    /// A transfer failed for a reason a retry elsewhere would not cure.
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("{repomd} does not verify against {signature}")]
    BadSignature {
        repomd: String,
        signature: String,
        #[source]
        source: SignatureError,
    },
    #[error("repo_gpgcheck is set but {signature} does not exist")]
    NoSignature { signature: String },
    #[error("{url}")]
    Repomd {
        url: String,
        #[source]
        source: RepodataError,
    },
    /// repomd.xml names no usable `primary`.
    #[error(transparent)]
    NoPrimary(RepodataError),
    #[error("repomd.xml gives no checksum for {location}")]
    NoChecksum { location: String },
    #[error("{url}: not found")]
    NotFound { url: String },
    /// A metadata file that is not what repomd.xml says (checksum), or cannot be read.
    #[error("{at}")]
    Metadata {
        at: String,
        #[source]
        source: RepodataError,
    },
}

impl RepoError {
    /// No mirror of the repository answered: the caller decides whether that stops the build.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, RepoError::Unreachable { .. })
    }
}

/// Reads one repository (`name`, its mirrors `urls`, tried in order while they cannot be
/// reached) with the keys of `keyring`; `cache_dir`: where metadata is kept by checksum. A bad
/// signature or checksum is an error at once (an attack or a broken mirror, as apt's backend
/// treats it), not a reason to try the next mirror.
pub async fn load(
    http: &Client,
    name: &str,
    urls: &[String],
    keyring: Keyring,
    repo_gpgcheck: bool,
    cache_dir: &Path,
) -> Result<LoadedRepo, RepoError> {
    let mut tried = Vec::new();
    for url in urls {
        let base = format!("{}/", url.trim_end_matches('/'));
        let repomd_url = format!("{base}repodata/repomd.xml");
        let raw = match http.get(&repomd_url, MAX_REPOMD).await {
            Ok(Some(raw)) => raw,
            Ok(None) => {
                tried.push(format!("{repomd_url}: not found"));
                continue;
            }
            Err(e) if e.is_transient() => {
                tried.push(e.to_string());
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        verify_repomd(http, &raw, &repomd_url, &keyring, repo_gpgcheck).await?;
        let md = repodata::parse_repomd(&raw)
            .map_err(|source| RepoError::Repomd { url: repomd_url.clone(), source })?;
        let primary = md.primary().map_err(RepoError::NoPrimary)?;
        let sum = primary
            .checksum
            .clone()
            .ok_or_else(|| RepoError::NoChecksum { location: primary.location.clone() })?;
        let index = read_primary(http, &base, primary, &sum, cache_dir, name).await?;
        return Ok(LoadedRepo {
            name: name.to_string(),
            url: url.clone(),
            index,
            packages: Vec::new(),
            keyring,
        });
    }
    Err(RepoError::Unreachable { name: name.to_string(), tried })
}

/// `repomd.xml` (`raw`, read from `url`) against its detached signature, where there is one.
async fn verify_repomd(
    http: &Client,
    raw: &[u8],
    url: &str,
    keyring: &Keyring,
    repo_gpgcheck: bool,
) -> Result<(), RepoError> {
    let sig_url = format!("{url}.asc");
    match http.get(&sig_url, 1 << 20).await? {
        Some(sig) => {
            erdma_openpgp::verify_detached_with(raw, &sig, keyring, erdma_common::dates::now())
                .map_err(|source| RepoError::BadSignature {
                    repomd: url.to_string(),
                    signature: sig_url,
                    source,
                })?;
        }
        None if repo_gpgcheck => return Err(RepoError::NoSignature { signature: sig_url }),
        None => {}
    }
    Ok(())
}

/// The index of a repository's `primary` (`data`, checked against `sum`): the one kept under
/// `cache_dir` by that checksum, else fetched from `base`, verified, and indexed as it is
/// decompressed, the index kept for the next build.
async fn read_primary(
    http: &Client,
    base: &str,
    data: &RepoMdData,
    sum: &Checksum,
    cache_dir: &Path,
    origin: &str,
) -> Result<PrimaryIndex, RepoError> {
    let kept: Option<PathBuf> = sum
        .file_stem()
        .map(|stem| cache_dir.join("rpm-md").join(format!("{stem}.kept-{KEPT_FORMAT}")));
    if let Some(path) = &kept {
        if let Ok(file) = erdma_limits::kept::open(path, MAX_PRIMARY_OPEN * 2) {
            match PrimaryIndex::read_kept(file) {
                Ok(index) => return Ok(index),
                Err(_) => {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
    }
    let url = format!("{base}{}", data.location);
    let compressed = http
        .get(&url, MAX_PRIMARY)
        .await?
        .ok_or_else(|| RepoError::NotFound { url: url.clone() })?;
    repodata::verify(&compressed, sum)
        .map_err(|source| RepoError::Metadata { at: url.clone(), source })?;
    let (location, inflation) = (data.location.clone(), http.inflation());
    let origin = origin.to_string();
    tokio::task::spawn_blocking(move || {
        let input =
            repodata::decompressor(&location, &compressed[..], MAX_PRIMARY_OPEN, inflation)?;
        PrimaryIndex::build(input, &location, MAX_PRIMARY_OPEN, &origin, kept.as_deref())
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    .map_err(|source| RepoError::Metadata { at: data.location.clone(), source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    /// A repository of `packages` (name, version) under `dir`: its `primary.xml.gz` and a
    /// `repomd.xml` giving its SHA256, as createrepo_c lays them out.
    fn publish(dir: &Path, packages: &[(&str, &str)]) -> String {
        let mut xml = String::from("<?xml version=\"1.0\"?>\n<metadata xmlns=\"http://linux.duke.edu/metadata/common\" xmlns:rpm=\"http://linux.duke.edu/metadata/rpm\">\n");
        for (name, ver) in packages {
            xml += &format!("<package type=\"rpm\"><name>{name}</name><arch>x86_64</arch><version epoch=\"0\" ver=\"{ver}\" rel=\"1.el9\"/><location href=\"Packages/{name}.rpm\"/><format><rpm:requires><rpm:entry name=\"libc.so.6()(64bit)\"/></rpm:requires></format></package>\n");
        }
        xml += "</metadata>\n";
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(xml.as_bytes()).unwrap();
        let gz = gz.finish().unwrap();
        let sum = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&gz));
        std::fs::create_dir_all(dir.join("repodata")).unwrap();
        std::fs::write(dir.join(format!("repodata/{sum}-primary.xml.gz")), &gz).unwrap();
        std::fs::write(dir.join("repodata/repomd.xml"), format!("<?xml version=\"1.0\"?>\n<repomd xmlns=\"http://linux.duke.edu/metadata/repo\"><data type=\"primary\"><checksum type=\"sha256\">{sum}</checksum><location href=\"repodata/{sum}-primary.xml.gz\"/></data></repomd>\n")).unwrap();
        sum
    }

    fn client() -> Client {
        Client::new(erdma_http::Timeouts::default()).unwrap()
    }

    async fn names(url: &str, cache: &Path) -> Result<Vec<String>, RepoError> {
        let keyring = Keyring { keys: Vec::new() };
        let repo = load(&client(), "base", &[url.to_string()], keyring, false, cache).await?;
        let mut repos = [repo];
        select_packages(&mut repos, ["glibc", "rdma-core", "pciutils"])?;
        Ok(repos[0].packages.iter().map(|p| format!("{}-{}", p.name, p.evr)).collect())
    }

    #[test]
    fn only_hex_and_an_algorithm_name_make_a_cache_name() {
        let sum = |kind: &str, hex: &str| Checksum { kind: kind.into(), hex: hex.into() };
        assert_eq!(sum("sha256", "00aF").file_stem().as_deref(), Some("sha256-00aF"));
        for (kind, hex) in
            [("sha256", ""), ("", "00"), ("sha256", "../00"), ("sha/256", "00"), ("sha256", "0 0")]
        {
            assert_eq!(sum(kind, hex).file_stem(), None, "{kind:?} {hex:?}");
        }
    }

    #[tokio::test]
    async fn a_kept_index_serves_while_the_verified_repomd_names_it() {
        let (repo, cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let url = format!("file://{}", repo.path().display());
        let sum = publish(repo.path(), &[("rdma-core", "46.0"), ("glibc", "2.34"), ("other", "1")]);
        let first = names(&url, cache.path()).await.unwrap();
        assert_eq!(first, ["rdma-core-46.0-1.el9", "glibc-2.34-1.el9"]);
        let kept = cache.path().join(format!("rpm-md/sha256-{sum}.kept-{KEPT_FORMAT}"));
        assert_eq!(std::fs::metadata(&kept).unwrap().permissions().mode() & 0o077, 0);

        // With primary gone from the server, repomd (still read) names the kept index.
        let primary = repo.path().join(format!("repodata/{sum}-primary.xml.gz"));
        let gz = std::fs::read(&primary).unwrap();
        std::fs::remove_file(&primary).unwrap();
        assert_eq!(names(&url, cache.path()).await.unwrap(), first);

        // A copy others may write is not read: primary is fetched, and is missing.
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o664)).unwrap();
        let e = names(&url, cache.path()).await.unwrap_err();
        assert!(matches!(e, RepoError::NotFound { .. }), "{e}");
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(names(&url, cache.path()).await.unwrap(), first);

        // A damaged copy is dropped, and primary fetched again.
        let bytes = std::fs::read(&kept).unwrap();
        std::fs::write(&kept, &bytes[..bytes.len() - 3]).unwrap();
        assert!(names(&url, cache.path()).await.is_err());
        assert!(!kept.exists(), "the damaged copy is removed");
        std::fs::write(&primary, &gz).unwrap();
        assert_eq!(names(&url, cache.path()).await.unwrap(), first);
        assert_eq!(std::fs::read(&kept).unwrap(), bytes, "kept again, the same");

        // A new primary (another checksum) is read and kept beside the old.
        let new = publish(repo.path(), &[("rdma-core", "47.0"), ("glibc", "2.34")]);
        assert_eq!(
            names(&url, cache.path()).await.unwrap(),
            ["rdma-core-47.0-1.el9", "glibc-2.34-1.el9"]
        );
        assert!(cache.path().join(format!("rpm-md/sha256-{new}.kept-{KEPT_FORMAT}")).exists());
    }
}
