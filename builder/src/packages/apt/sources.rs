//! Where the build's packages come from: the recipe's repositories and the base's own
//! sources.list and deb822 `.sources`, with the keys they are verified with; and the sources the
//! image keeps for a later `apt-get install`.
use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::packages::PackageError;
use crate::packages::{Inputs, Mirror};
use erdma_deb::repo::{self, RepoSpec, SourceEntry};
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;

/// The apt side of [`crate::packages::add_repositories`]: a `sources.list.d` entry and the
/// dearmoured key in `trusted.gpg.d` (as the eRDMA manual does; apt >= 1.4 reads it there) for
/// each of the recipe's own repositories, at the URL it was reached at.
pub(super) fn add_sources(
    target: &crate::packages::Target<'_>,
    urls: &BTreeMap<String, String>,
    keys: &BTreeMap<String, Vec<u8>>,
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
) -> Result<()> {
    // Only an NCCL repository needs the base's sources read (proving a file absent reads
    // every layer, and a build without --nccl reads none below the one with os-release).
    let base_uris: Vec<String> = if target.repositories.iter().any(|r| r.nccl) {
        base_sources(base)?
            .into_iter()
            .filter(|e| e.types.iter().any(|t| t == "deb"))
            .flat_map(|e| e.uris)
            .collect()
    } else {
        Vec::new()
    };
    for repo in target.repositories.iter().filter(|r| !r.from_base) {
        let url = &urls[&repo.name];
        // NVIDIA's CUDA images already list their repository: a second entry for it makes
        // apt warn about every index being configured twice.
        if repo.nccl
            && base_uris.iter().any(|u| u.trim_end_matches('/') == url.trim_end_matches('/'))
        {
            continue;
        }
        let suite = repo.suite.as_deref().unwrap_or("/");
        let line = if repo.components.is_empty() {
            format!(
                "deb {} {suite}\n",
                url.trim_end_matches('/').to_string() + if suite == "/" { "/" } else { "" }
            )
        } else {
            format!("deb {} {suite} {}\n", url.trim_end_matches('/'), repo.components.join(" "))
        };
        layer.add_file(
            &format!("etc/apt/sources.list.d/{}.list", repo.name),
            line.into_bytes(),
            0o644,
        )?;
        layer.add_file(
            &format!("etc/apt/trusted.gpg.d/{}.gpg", repo.name),
            keys[&repo.name].clone(),
            0o644,
        )?;
    }
    Ok(())
}

/// The repositories to read, each with its mirrors in order.
pub(crate) fn repo_specs(
    inputs: &Inputs<'_>,
    base: &dyn BaseFiles,
) -> Result<Vec<(String, Vec<RepoSpec>)>> {
    let mut out = Vec::new();
    for r in inputs.target.repositories {
        if r.from_base {
            out.extend(base_specs(inputs, base)?);
            continue;
        }
        let urls = match inputs.repo_urls.get(&r.name) {
            Some(u) => vec![u.clone()],
            None => r.urls.clone(),
        };
        let keyring = inputs.repo_keys.get(&r.name).cloned().unwrap_or_default();
        let specs = urls
            .into_iter()
            .map(|url| RepoSpec {
                url,
                suite: r.suite.clone().unwrap_or_else(|| "/".into()),
                components: r.components.clone(),
                arch: inputs.arch.to_string(),
                keyring: keyring.clone(),
            })
            .collect();
        out.push((r.name.clone(), specs));
    }
    Ok(out)
}

/// The apt sources the base is configured with: `sources.list`, and `sources.list.d`'s
/// `*.list` and deb822 `*.sources`.
pub(super) fn base_sources(base: &dyn BaseFiles) -> Result<Vec<SourceEntry>> {
    let mut entries: Vec<SourceEntry> = Vec::new();
    if let Some(text) = base.read("etc/apt/sources.list", 1 << 20)? {
        entries.extend(repo::parse_one_line_sources(&String::from_utf8_lossy(&text)));
    }
    for name in base.list("etc/apt/sources.list.d")? {
        let Some(text) = base.read(&format!("etc/apt/sources.list.d/{name}"), 1 << 20)? else {
            continue;
        };
        let text = String::from_utf8_lossy(&text);
        if name.ends_with(".sources") {
            entries.extend(repo::parse_deb822_sources(&text));
        } else if name.ends_with(".list") {
            entries.extend(repo::parse_one_line_sources(&text));
        }
    }
    Ok(entries)
}

/// The archive the base image is configured with: its sources.list and sources.list.d, with
/// the keys they name (`signed-by`), else the keys in trusted.gpg.d, read from the image.
pub(crate) fn base_specs(
    inputs: &Inputs<'_>,
    base: &dyn BaseFiles,
) -> Result<Vec<(String, Vec<RepoSpec>)>> {
    let mut entries = base_sources(base)?;
    // Images that carry Mellanox's repository lose it; we never read it.
    entries.retain(|e| {
        e.types.iter().any(|t| t == "deb")
            && !e.uris.iter().any(|u| u.contains("mellanox") || u.contains("/mlnx"))
    });
    let everywhere = Mirror::everywhere(inputs.mirrors);
    if entries.is_empty() {
        // Slimmed images delete their lists: with --mirror, read the release's main suite.
        let t = &inputs.target;
        let (Some(m), Some(codename)) = (everywhere, t.codename) else {
            return Err(PackageError::NoSources {
                distro: if t.pretty.is_empty() { "distribution's" } else { t.pretty }.to_string(),
            }
            .into());
        };
        let components = if t.distro_id == "ubuntu" {
            vec!["main".to_string(), "universe".to_string()]
        } else {
            vec!["main".to_string()]
        };
        entries.push(SourceEntry {
            types: vec!["deb".into()],
            uris: vec![m.to.clone()],
            suites: vec![codename.to_string()],
            components,
            signed_by: None,
            arch: None,
            trusted: false,
        });
    }
    let default_keys = trusted_keys(base)?;
    let mut out = Vec::new();
    for e in entries {
        if e.trusted {
            return Err(PackageError::TrustedYes { uris: e.uris.join(" ") }.into());
        }
        let keyring = match &e.signed_by {
            _ if inputs.base_keyring.is_some() => inputs.base_keyring.clone().unwrap_or_default(),
            Some(s) if s.contains("BEGIN PGP PUBLIC KEY BLOCK") => {
                erdma_openpgp::dearmor(s.as_bytes())?
            }
            Some(path) => {
                let data = base.read(path, 4 << 20)?.ok_or_else(|| {
                    Error::from(PackageError::MissingKey { path: path.to_string() })
                })?;
                erdma_openpgp::dearmor(&data)?
            }
            None => default_keys.clone(),
        };
        for suite in &e.suites {
            // --mirror URL stands in for every source of the distribution's archive (main,
            // -updates, -security, -backports); FROM=URL for the sources at FROM, whatever
            // they are. Other repositories the base lists (NVIDIA's flat `deb URL /`) keep
            // their own URLs.
            let ours = inputs
                .target
                .codename
                .is_none_or(|c| suite == c || suite.starts_with(&format!("{c}-")));
            let mut uris: Vec<String> = e
                .uris
                .iter()
                .map(|u| Mirror::for_uri(inputs.mirrors, u, ours).unwrap_or(u).to_string())
                .collect();
            uris.dedup();
            let specs = uris
                .iter()
                .map(|url| RepoSpec {
                    url: url.clone(),
                    suite: suite.clone(),
                    components: e.components.clone(),
                    arch: inputs.arch.to_string(),
                    keyring: keyring.clone(),
                })
                .collect();
            out.push((format!("base {suite}"), specs));
        }
    }
    Ok(out)
}

/// apt's default trust: /etc/apt/trusted.gpg and /etc/apt/trusted.gpg.d/*.{gpg,asc}.
pub(crate) fn trusted_keys(base: &dyn BaseFiles) -> Result<Vec<u8>> {
    let mut keys = Vec::new();
    if let Some(k) = base.read("etc/apt/trusted.gpg", 4 << 20)? {
        keys.extend(erdma_openpgp::dearmor(&k)?);
    }
    for name in base.list("etc/apt/trusted.gpg.d")? {
        if name.ends_with(".gpg") || name.ends_with(".asc") {
            if let Some(k) = base.read(&format!("etc/apt/trusted.gpg.d/{name}"), 4 << 20)? {
                keys.extend(erdma_openpgp::dearmor(&k)?);
            }
        }
    }
    Ok(keys)
}
