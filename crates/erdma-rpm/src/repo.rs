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

/// A repository's `repomd.xml` and its detached signature as one of its mirrors served them,
/// fetched ahead of the build ([`prefetch`]) and not yet verified: [`load`] verifies them as
/// if it had fetched them itself.
pub struct Prefetched {
    /// The base URL that answered.
    pub url: String,
    /// The mirrors before it that could not be reached or had no `repomd.xml`, with why.
    tried: Vec<String>,
    repomd: Vec<u8>,
    /// `None`: the mirror has no `repomd.xml.asc`.
    signature: Option<Vec<u8>>,
    /// The index of the `primary` that the unverified `repomd.xml` names, where this fetch
    /// built it, with the checksum its XML was checked against. [`load`] takes it in place of
    /// reading back the copy kept in the cache, and only where the verified `repomd.xml` names
    /// that same checksum: the trust a kept index is given.
    index: Option<(Checksum, PrimaryIndex)>,
}

/// A clone holds no index: the one built is handed to one [`load`].
impl Clone for Prefetched {
    fn clone(&self) -> Prefetched {
        Prefetched {
            url: self.url.clone(),
            tried: self.tried.clone(),
            repomd: self.repomd.clone(),
            signature: self.signature.clone(),
            index: None,
        }
    }
}

impl std::fmt::Debug for Prefetched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefetched")
            .field("url", &self.url)
            .field("tried", &self.tried)
            .field("repomd", &self.repomd.len())
            .field("signature", &self.signature.as_ref().map(Vec::len))
            .field("index", &self.index.as_ref().map(|(sum, _)| sum))
            .finish()
    }
}

/// One mirror's `repomd.xml` and `repomd.xml.asc`, asked for at once (a round trip less to
/// a far mirror than one after the other); `Ok(Err(why))` where another mirror may do better
/// (it has no `repomd.xml`, or cannot be reached).
async fn fetch_repomd(
    http: &Client,
    base: &str,
) -> Result<Result<(Vec<u8>, Option<Vec<u8>>), String>, RepoError> {
    let repomd_url = format!("{base}repodata/repomd.xml");
    let signature_url = format!("{repomd_url}.asc");
    let (raw, signature) =
        tokio::join!(http.get(&repomd_url, MAX_REPOMD), http.get(&signature_url, 1 << 20));
    let raw = match raw {
        Ok(Some(raw)) => raw,
        Ok(None) => return Ok(Err(format!("{repomd_url}: not found"))),
        Err(e) if e.is_transient() => return Ok(Err(e.to_string())),
        Err(e) => return Err(e.into()),
    };
    Ok(Ok((raw, signature?)))
}

fn base_of(url: &str) -> String {
    format!("{}/", url.trim_end_matches('/'))
}

/// The `primary` `repomd.xml` (`raw`, from `repomd_url`) names, with its checksum.
fn primary_of(raw: &[u8], repomd_url: &str) -> Result<(RepoMdData, Checksum), RepoError> {
    let md = repodata::parse_repomd(raw)
        .map_err(|source| RepoError::Repomd { url: repomd_url.to_string(), source })?;
    let primary = md.primary().map_err(RepoError::NoPrimary)?.clone();
    let sum = primary
        .checksum
        .clone()
        .ok_or_else(|| RepoError::NoChecksum { location: primary.location.clone() })?;
    Ok((primary, sum))
}

/// Fetches what [`load`] will need of a repository before the build knows its keys: the
/// first mirror's `repomd.xml` and signature, held unverified, and its `primary`, checked
/// against the checksum that unverified `repomd.xml` gives and indexed (on the blocking pool,
/// beside the base's layer read) into the index kept under that checksum. Nothing here is
/// trusted: `load` verifies the `repomd.xml`, and reads a kept index only where the verified
/// one names its checksum, i.e. only where the `primary` indexed is the one it signed for. An
/// index that cannot be built is left to `load` to meet again, and report. The index built is
/// also handed to `load` in memory, on the same terms.
pub async fn prefetch(
    http: &Client,
    name: &str,
    urls: &[String],
    cache_dir: &Path,
) -> Result<Prefetched, RepoError> {
    let mut tried = Vec::new();
    for url in urls {
        let base = base_of(url);
        let (repomd, signature) = match fetch_repomd(http, &base).await? {
            Ok(got) => got,
            Err(why) => {
                tried.push(why);
                continue;
            }
        };
        let (primary, sum) = primary_of(&repomd, &format!("{base}repodata/repomd.xml"))?;
        let kept = kept_path(&sum, cache_dir);
        let have = |p: &Path| erdma_limits::kept::open(p, MAX_PRIMARY_OPEN * 2).is_ok();
        let mut index = None;
        if let Some(kept) = kept.filter(|p| !have(p)) {
            let compressed = fetch_primary(http, &base, &primary, &sum).await?;
            let built = index_primary(compressed, &primary, http.inflation(), name, Some(kept));
            index = built.await.ok().map(|built| (sum, built));
        }
        return Ok(Prefetched { url: url.clone(), tried, repomd, signature, index });
    }
    Err(RepoError::Unreachable { name: name.to_string(), tried })
}

/// Reads one repository (`name`, its mirrors `urls`, tried in order while they cannot be
/// reached) with the keys of `keyring`; `cache_dir`: where metadata is kept by checksum. A bad
/// signature or checksum is an error at once (an attack or a broken mirror, as apt's backend
/// treats it), not a reason to try the next mirror. `prefetched`, where it is one of `urls`,
/// stands in for fetching that mirror's `repomd.xml` and signature (and for trying the
/// mirrors before it again), and its index, if it built one, for the kept one.
pub async fn load(
    http: &Client,
    name: &str,
    urls: &[String],
    keyring: Keyring,
    repo_gpgcheck: bool,
    cache_dir: &Path,
    prefetched: Option<Prefetched>,
) -> Result<LoadedRepo, RepoError> {
    let mut ahead = prefetched.and_then(|p| Some((urls.iter().position(|u| *u == p.url)?, p)));
    let (mut tried, skip) = match &ahead {
        Some((at, p)) => (p.tried.clone(), *at),
        None => (Vec::new(), 0),
    };
    for url in &urls[skip..] {
        let base = base_of(url);
        let repomd_url = format!("{base}repodata/repomd.xml");
        let mine = ahead.take_if(|(_, p)| p.url == *url).map(|(_, p)| p);
        let (raw, signature, index_ahead) = match mine {
            Some(p) => (p.repomd, p.signature, p.index),
            None => match fetch_repomd(http, &base).await? {
                Ok((raw, signature)) => (raw, signature, None),
                Err(why) => {
                    tried.push(why);
                    continue;
                }
            },
        };
        // The signature check and the kept index's read (below) run on the blocking pool, so
        // that repositories read at once use every core.
        let (raw, keyring, repomd_url) = blocking(move || {
            verify_repomd(&raw, signature.as_deref(), &repomd_url, &keyring, repo_gpgcheck)?;
            Ok::<_, RepoError>((raw, keyring, repomd_url))
        })
        .await?;
        let (primary, sum) = primary_of(&raw, &repomd_url)?;
        // The index built ahead is of a `primary` checked against the checksum that the
        // unverified `repomd.xml` gave: taken only where the verified one gives the same. (They
        // are the same bytes today, verified here, not fetched again; the check keeps that
        // so should this ever fetch the `repomd.xml` anew.)
        let index = match index_ahead.filter(|(built_for, _)| *built_for == sum) {
            Some((_, index)) => index,
            None => read_primary(http, &base, &primary, &sum, cache_dir, name).await?,
        };
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
fn verify_repomd(
    raw: &[u8],
    signature: Option<&[u8]>,
    url: &str,
    keyring: &Keyring,
    repo_gpgcheck: bool,
) -> Result<(), RepoError> {
    let sig_url = format!("{url}.asc");
    match signature {
        Some(sig) => {
            erdma_openpgp::verify_detached_with(raw, sig, keyring, erdma_common::dates::now())
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

/// Where the index of the `primary` of checksum `sum` is kept.
fn kept_path(sum: &Checksum, cache_dir: &Path) -> Option<PathBuf> {
    sum.file_stem().map(|stem| cache_dir.join("rpm-md").join(format!("{stem}.kept-{KEPT_FORMAT}")))
}

/// A mirror's `primary` (`data`, under `base`), checked against `sum`.
async fn fetch_primary(
    http: &Client,
    base: &str,
    data: &RepoMdData,
    sum: &Checksum,
) -> Result<Vec<u8>, RepoError> {
    let url = format!("{base}{}", data.location);
    let compressed = http
        .get(&url, MAX_PRIMARY)
        .await?
        .ok_or_else(|| RepoError::NotFound { url: url.clone() })?;
    repodata::verify(&compressed, sum).map_err(|source| RepoError::Metadata { at: url, source })?;
    Ok(compressed)
}

/// The index of a repository's `primary` (`data`, checked against `sum`): the one kept under
/// `cache_dir` by that checksum (by an earlier build, or by [`prefetch`] for this one), else
/// fetched from `base`, verified, and indexed as it is decompressed, the index kept for the
/// next build.
async fn read_primary(
    http: &Client,
    base: &str,
    data: &RepoMdData,
    sum: &Checksum,
    cache_dir: &Path,
    origin: &str,
) -> Result<PrimaryIndex, RepoError> {
    let kept = kept_path(sum, cache_dir);
    if let Some(path) = &kept {
        if let Ok(file) = erdma_limits::kept::open(path, MAX_PRIMARY_OPEN * 2) {
            match blocking(move || PrimaryIndex::read_kept(file)).await {
                Ok(index) => return Ok(index),
                Err(_) => {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
    }
    let compressed = fetch_primary(http, base, data, sum).await?;
    index_primary(compressed, data, http.inflation(), origin, kept)
        .await
        .map_err(|source| RepoError::Metadata { at: data.location.clone(), source })
}

/// The index of `compressed`, the `primary` `data` names (checked against its checksum by the
/// caller), decompressed and read on the blocking pool; kept at `kept` where given.
async fn index_primary(
    compressed: Vec<u8>,
    data: &RepoMdData,
    inflation: u64,
    origin: &str,
    kept: Option<PathBuf>,
) -> Result<PrimaryIndex, RepodataError> {
    let (location, origin, size) = (data.location.clone(), origin.to_string(), data.open_size);
    blocking(move || {
        let input =
            repodata::decompressor(&location, &compressed[..], MAX_PRIMARY_OPEN, inflation)?;
        PrimaryIndex::build(input, &location, MAX_PRIMARY_OPEN, &origin, kept.as_deref(), size)
    })
    .await
}

/// `f` on the blocking pool (a panic in it goes on in the caller).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
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
        Client::new(erdma_http::Timeouts::default())
    }

    async fn names(url: &str, cache: &Path) -> Result<Vec<String>, RepoError> {
        let keyring = Keyring::of(Vec::new());
        let repo = load(&client(), "base", &[url.to_string()], keyring, false, cache, None).await?;
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

    /// What a fetch ahead holds is used as fetched, and verified as if it were: the mirror's
    /// `repomd.xml` and `primary` can be gone by then (the `primary` is indexed and kept under
    /// its checksum), a mirror it found empty is not tried again, and a missing or bad
    /// signature fails the load as it would have.
    #[tokio::test]
    async fn a_fetch_ahead_stands_in_for_the_fetch_and_is_verified_as_one() {
        let (empty, repo, cache) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        let urls = [empty.path(), repo.path()].map(|p| format!("file://{}", p.display()));
        let sum = publish(repo.path(), &[("rdma-core", "46.0"), ("glibc", "2.34")]);
        let mut ahead = prefetch(&client(), "base", &urls, cache.path()).await.unwrap();
        assert_eq!(ahead.url, urls[1]);
        assert_eq!(ahead.tried.len(), 1, "{:?}", ahead.tried);
        // The primary, indexed under its checksum.
        let kept = cache.path().join(format!("rpm-md/sha256-{sum}.kept-{KEPT_FORMAT}"));
        assert!(kept.exists());
        assert_eq!(std::fs::read_dir(cache.path().join("rpm-md")).unwrap().count(), 1);

        // The mirror is emptied, and the one it found empty filled with another repository.
        std::fs::remove_dir_all(repo.path().join("repodata")).unwrap();
        publish(empty.path(), &[("rdma-core", "99.0")]);
        let none = || Keyring::of(Vec::new());
        let load = |ahead: Option<Prefetched>, gpgcheck: bool| {
            let (urls, cache) = (urls.clone(), cache.path().to_path_buf());
            async move { load(&client(), "base", &urls, none(), gpgcheck, &cache, ahead).await }
        };
        // A damaged index is not read (and, its mirror emptied, the load fails), and is
        // dropped. (Damaged in a new file put in its place, as the cache's files are written:
        // the index held by the fetch ahead reads the old one's inode.)
        let index = std::fs::read(&kept).unwrap();
        let damaged = kept.with_extension("damaged");
        std::fs::write(&damaged, &index[..index.len() - 3]).unwrap();
        std::fs::rename(&damaged, &kept).unwrap();
        let e = load(Some(ahead.clone()), false).await.err().unwrap();
        assert!(matches!(e, RepoError::NotFound { .. }), "{e}");
        assert!(!kept.exists());
        std::fs::write(&kept, &index).unwrap();
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o600)).unwrap();
        let loaded = load(Some(ahead.clone()), false).await.unwrap();
        assert_eq!(loaded.url, urls[1]);
        let mut repos = [loaded];
        select_packages(&mut repos, ["rdma-core"]).unwrap();
        assert_eq!(repos[0].packages[0].evr.to_string(), "46.0-1.el9");
        // Without it, the first mirror answers now.
        assert_eq!(load(None, false).await.unwrap().url, urls[0]);

        // repo_gpgcheck: the prefetched signature is required, and checked.
        let e = load(Some(ahead.clone()), true).await.err().unwrap();
        assert!(matches!(e, RepoError::NoSignature { .. }), "{e}");
        let forged = Prefetched { signature: Some(b"not a signature".to_vec()), ..ahead.clone() };
        let e = load(Some(forged), false).await.err().unwrap();
        assert!(matches!(e, RepoError::BadSignature { .. }), "{e}");

        // The index the fetch ahead built is handed over whole: neither the kept copy nor the
        // mirror is needed for it, and it is the repository's. Only for the checksum the
        // verified repomd.xml gives.
        std::fs::remove_file(&kept).unwrap();
        let e = load(Some(ahead.clone()), false).await.err().unwrap();
        assert!(matches!(e, RepoError::NotFound { .. }), "a clone holds no index: {e}");
        let (built_for, index) = ahead.index.take().expect("an index built ahead");
        let handed = Prefetched { index: Some((built_for.clone(), index)), ..ahead.clone() };
        let mut repos = [load(Some(handed), false).await.unwrap()];
        assert_eq!(repos[0].url, urls[1]);
        select_packages(&mut repos, ["rdma-core"]).unwrap();
        assert_eq!(repos[0].packages[0].evr.to_string(), "46.0-1.el9");
        let [loaded] = repos;
        let elsewhere = Checksum { hex: "0".repeat(64), ..built_for };
        let not_its = Prefetched { index: Some((elsewhere, loaded.index)), ..ahead.clone() };
        let e = load(Some(not_its), false).await.err().unwrap();
        assert!(matches!(e, RepoError::NotFound { .. }), "an index of another primary: {e}");

        // One for another repository's URL stands in for nothing.
        let other = Prefetched { url: "file:///nowhere".into(), ..ahead };
        assert_eq!(load(Some(other), false).await.unwrap().url, urls[0]);
    }
}
