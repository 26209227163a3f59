//! Where the build's packages come from: the recipe's repositories and the base's own
//! `.repo` files, their verified metadata, and the repositories the image keeps for a later
//! `dnf install`.
use std::collections::BTreeMap;
use std::path::Path;

use super::repos::{self, YumRepo};
use crate::error::{Cause, Doing, Error, Result};
use crate::packages::prefetch::Ahead;
use crate::packages::PackageError;
use crate::packages::{Mirror, Repository, Target};
use erdma_common::progress::Reporter;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;
use erdma_openpgp::{self as openpgp, Keyring};
use erdma_rpm::repo::{LoadedRepo, Prefetched, RepoError};

/// Reads one repository through [`erdma_rpm::repo::load`], saying so on `reporter`, with what
/// was fetched of it ahead (`ahead`, awaited once the read is said).
///
/// `Ok(Err(why))` when no mirror could be reached: the caller decides whether that stops the
/// build (the recipe's repositories) or not (the base's own, see [`install`](super::install)).
#[allow(clippy::too_many_arguments)]
pub(super) async fn load_repo(
    http: &erdma_http::Client,
    name: &str,
    urls: &[String],
    keyring: Keyring,
    repo_gpgcheck: bool,
    cache_dir: &Path,
    ahead: impl std::future::Future<Output = Ahead<Prefetched, RepoError>>,
    reporter: &dyn Reporter,
) -> Result<std::result::Result<LoadedRepo, String>> {
    reporter.step(&format!("reading repository {name}"));
    let ahead = match ahead.await {
        Ahead::Nothing => None,
        Ahead::Fetched(fetched) => Some(fetched),
        Ahead::Unreachable(e) => return Ok(Err(e.to_string())),
    };
    let load = erdma_rpm::repo::load(http, name, urls, keyring, repo_gpgcheck, cache_dir, ahead);
    match load.await {
        Ok(loaded) => Ok(Ok(loaded)),
        Err(e) if e.is_unreachable() => Ok(Err(e.to_string())),
        Err(e) => Err(repository(name, e)),
    }
}

/// The base's repositories a build reads: those enabled, less those in a file the recipe
/// removes (MLNX_OFED's, pointing into a directory of the machine it was installed on).
pub(super) fn wanted_base_repos(all: Vec<YumRepo>, remove_files: &[String]) -> Vec<YumRepo> {
    let removed: Vec<String> = remove_files
        .iter()
        .filter_map(|f| erdma_oci::layer::normalize(f))
        .map(|f| format!("/{f}"))
        .collect();
    all.into_iter().filter(|r| r.enabled && !removed.contains(&r.file)).collect()
}

/// The name a base repository is read and reported under.
pub(super) fn base_name(id: &str) -> String {
    format!("base {id}")
}

/// What names a repository given by a `mirrorlist` before the list is fetched (where a fetch
/// ahead files it: [`super::prefetch`]).
pub(super) fn mirrorlist_source(list: &str) -> Vec<String> {
    vec![format!("mirrorlist {list}")]
}

/// The URLs of one of the recipe's repositories: `--repo NAME=URL`, else the recipe's.
pub(super) fn recipe_repo_urls(
    repo: &Repository,
    repo_urls: &BTreeMap<String, String>,
) -> Vec<String> {
    repo_urls.get(&repo.name).map(|u| vec![u.clone()]).unwrap_or_else(|| repo.urls.clone())
}

/// The URLs of one of the base's repositories known without fetching anything: `--repo
/// ID=URL`, else its `baseurl`s with `--mirror` applied; `None` where its `mirrorlist` is to
/// give them ([`base_repo_urls`]).
pub(super) fn known_base_urls(
    repo: &YumRepo,
    repo_urls: &BTreeMap<String, String>,
    mirrors: &[Mirror],
) -> Option<Vec<String>> {
    if let Some(u) = repo_urls.get(&repo.id) {
        return Some(vec![u.clone()]);
    }
    (!repo.baseurls.is_empty())
        .then(|| repo.baseurls.iter().map(|u| mirrored(u, mirrors)).collect())
}

/// The URLs of one of the base's repositories: its `baseurl`s, or the list its `mirrorlist`
/// gives (none when the mirrorlist cannot be reached), with `--mirror` applied (`FROM=URL` replaces the prefix FROM; a plain `URL` stands
/// in for the scheme and host of every base repository, as a mirror of the same layout).
pub(super) async fn base_repo_urls(
    http: &erdma_http::Client,
    repo: &YumRepo,
    mirrors: &[Mirror],
) -> Result<Vec<String>> {
    let mut urls = repo.baseurls.clone();
    if urls.is_empty() {
        if let Some(list) = &repo.mirrorlist {
            urls =
                fetch_mirrorlist(http, list).await.map_err(|e| PackageError::BaseRepository {
                    id: repo.id.clone(),
                    file: repo.file.clone(),
                    why: Doing::new(format!("mirrorlist {list}"), e).into(),
                })?;
        }
    }
    if urls.is_empty() && repo.mirrorlist.is_none() {
        let how = if repo.metalink.is_some() {
            "only a metalink, which erdma-build does not read"
        } else {
            "no baseurl or mirrorlist"
        };
        return Err(
            PackageError::NoUrl { id: repo.id.clone(), file: repo.file.clone(), how }.into()
        );
    }
    Ok(urls.into_iter().map(|u| mirrored(&u, mirrors)).collect())
}

/// The URLs a `mirrorlist` gives, one per line. One that cannot be fetched (unreachable, or
/// not there) gives none: the repository counts as unreachable, as dnf's would.
pub(super) async fn fetch_mirrorlist(
    http: &erdma_http::Client,
    list: &str,
) -> std::result::Result<Vec<String>, erdma_http::HttpError> {
    let text = match http.get(list, 1 << 20).await {
        Ok(t) => t.unwrap_or_default(),
        Err(e) if e.is_transient() => Vec::new(),
        Err(e) => return Err(e),
    };
    Ok(String::from_utf8_lossy(&text)
        .lines()
        .map(str::trim)
        .filter(|l| l.contains("://") && !l.starts_with('#'))
        .map(String::from)
        .collect())
}

pub(crate) fn mirrored(url: &str, mirrors: &[Mirror]) -> String {
    for m in mirrors.iter().rev() {
        match &m.from {
            Some(from) if url.starts_with(from.trim_end_matches('/')) => {
                return format!(
                    "{}{}",
                    m.to.trim_end_matches('/'),
                    &url[from.trim_end_matches('/').len()..]
                )
            }
            Some(_) => {}
            None => {
                let Some((_, rest)) = url.split_once("://") else { continue };
                let path = rest.find('/').map_or("", |i| &rest[i..]);
                return format!("{}{path}", m.to.trim_end_matches('/'));
            }
        }
    }
    url.to_string()
}

/// The keys a base repository's `gpgkey=` names: `file://` keys from the image (as dnf reads
/// them), unless `--keyring base=FILE` replaces them.
pub(super) fn base_repo_keys(
    repo: &YumRepo,
    base: &dyn BaseFiles,
    base_keyring: Option<&[u8]>,
) -> Result<Keyring> {
    let bad = |why: Cause| -> Error {
        PackageError::BaseRepository { id: repo.id.clone(), file: repo.file.clone(), why }.into()
    };
    let no_key = |why: String| -> Error {
        PackageError::BaseKey { id: repo.id.clone(), file: repo.file.clone(), why }.into()
    };
    let mut raw = Vec::new();
    match base_keyring {
        Some(k) => raw.extend_from_slice(k),
        None => {
            for key in &repo.gpgkeys {
                let Some(path) = key.strip_prefix("file://") else {
                    return Err(no_key(format!("its key {key} is not a file in the image")));
                };
                let data = base
                    .read(path.trim_start_matches('/'), 1 << 20)?
                    .ok_or_else(|| bad(format!("its key {key} is not in the image").into()))?;
                raw.extend(openpgp::dearmor(&data)?);
            }
        }
    }
    if raw.is_empty() {
        return Err(no_key("it names no gpgkey, and packages are only installed verified".into()));
    }
    Keyring::load(&raw).map_err(|e| bad(e.into()))
}

/// The rpm side of [`crate::packages::add_repositories`]: for each of the recipe's own
/// repositories, `/etc/yum.repos.d/NAME.repo` at the URL the build reached, with `gpgcheck=1`
/// and its verified key armoured at `/etc/pki/rpm-gpg/RPM-GPG-KEY-NAME`, as the ECS AI-training-cluster guide sets up
/// Alibaba's. An NCCL repository the base already lists (NVIDIA's CUDA images) is not added
/// twice: its section in the base's file gains the `excludepkgs` that hold NCCL to the CUDA
/// major it was chosen for ([`nccl_excludes`]), as ours has them.
pub(super) fn add_repos(
    target: &Target<'_>,
    urls: &BTreeMap<String, String>,
    keys: &BTreeMap<String, Vec<u8>>,
    nccl_cuda: Option<crate::packages::nccl::Cuda>,
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
) -> Result<()> {
    let listed: Vec<YumRepo> = if target.repositories.iter().any(|r| r.nccl) {
        repos::base_repos(base, &BTreeMap::new())?
    } else {
        Vec::new()
    };
    for repo in target.repositories.iter().filter(|r| !r.from_base) {
        let url = &urls[&repo.name];
        let exclude = match (repo.nccl, nccl_cuda) {
            (true, Some(c)) => nccl_excludes(c.major),
            _ => Vec::new(),
        };
        let same = |u: &String| u.trim_end_matches('/') == url.trim_end_matches('/');
        if let Some(theirs) = listed.iter().find(|r| repo.nccl && r.baseurls.iter().any(same)) {
            if !exclude.is_empty() {
                let path = theirs.file.trim_start_matches('/');
                let text = String::from_utf8_lossy(&base.read(path, 1 << 20)?.unwrap_or_default())
                    .into_owned();
                layer.add_file(
                    path,
                    repos::add_excludes(&text, &theirs.id, &exclude).into_bytes(),
                    0o644,
                )?;
            }
            continue;
        }
        let key_path = format!("etc/pki/rpm-gpg/RPM-GPG-KEY-{}", repo.name);
        layer.add_file(
            &key_path,
            openpgp::to_armored(&openpgp::parse(&keys[&repo.name])?)?,
            0o644,
        )?;
        layer.add_file(
            &format!("etc/yum.repos.d/{}.repo", repo.name),
            repos::repo_file(&repo.name, url, &key_path, repo.repo_gpgcheck, &exclude).into_bytes(),
            0o644,
        )?;
    }
    Ok(())
}

/// NVIDIA's NCCL package in its rpm repositories (`libnccl-devel` beside it).
pub(crate) const NCCL: &str = "libnccl";

/// `excludepkgs` patterns for NVIDIA's repository that keep a later `dnf upgrade` in the image
/// from swapping the NCCL build chosen for CUDA `major` for one built for another CUDA major
/// (NCCL links the CUDA runtime statically: a `+cuda13` build does not run on a CUDA 12
/// driver stack). The rpm counterpart of `apt-mark hold`. dnf reads each as a NEVR glob
/// (`name-version-release`), matching the `+cudaX.Y` in the release.
pub(crate) fn nccl_excludes(major: u32) -> Vec<String> {
    let others: Vec<u32> = (9..=20).filter(|m| *m != major).collect();
    [NCCL, "libnccl-devel", "libnccl-static"]
        .iter()
        .flat_map(|n| others.iter().map(move |m| format!("{n}-*-*+cuda{m}.*")))
        .collect()
}

pub(crate) fn repository(repo: &str, why: impl Into<crate::error::Cause>) -> Error {
    PackageError::Repository { repo: repo.to_string(), why: why.into() }.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_stand_in_for_base_repositories() {
        let all = [Mirror::parse("http://127.0.0.1:8080")];
        assert_eq!(
            mirrored("http://mirrors.cloud.aliyuncs.com/alinux/3/os/x86_64/", &all),
            "http://127.0.0.1:8080/alinux/3/os/x86_64/"
        );
        let one = [Mirror::parse("http://mirrors.cloud.aliyuncs.com/alinux=file:///srv/alinux")];
        assert_eq!(
            mirrored("http://mirrors.cloud.aliyuncs.com/alinux/3/os/x86_64/", &one),
            "file:///srv/alinux/3/os/x86_64/"
        );
        assert_eq!(mirrored("https://other.example/x/", &one), "https://other.example/x/");
    }
}
