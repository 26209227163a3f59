//! Per-distro recipes (`recipes/*.toml`): repositories, keys, packages, files and env presets.
//!
//! The recipes ship inside the binary so `erdma-build` works from any directory; `--recipe PATH`
//! loads another file. Unknown keys are errors, with the key named.
use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The recipes in `recipes/`, compiled in.
const BUILTIN: &[(&str, &str)] = &[
    ("debian-11", include_str!("../../recipes/debian-11.toml")),
    ("debian-12", include_str!("../../recipes/debian-12.toml")),
    ("ubuntu-18.04", include_str!("../../recipes/ubuntu-18.04.toml")),
    ("ubuntu-20.04", include_str!("../../recipes/ubuntu-20.04.toml")),
    ("ubuntu-22.04", include_str!("../../recipes/ubuntu-22.04.toml")),
    ("ubuntu-24.04", include_str!("../../recipes/ubuntu-24.04.toml")),
];

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    #[serde(skip_deserializing)]
    pub name: String,
    pub distro: Distro,
    /// Set when this distro cannot get the erdma provider: the reason, shown as the error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsupported: Option<String>,
    #[serde(default, rename(deserialize = "repository"))]
    pub repositories: Vec<Repository>,
    #[serde(default)]
    pub packages: Packages,
    #[serde(default, rename(deserialize = "file"))]
    pub files: Vec<PlainFile>,
    /// Env presets added to the image config unless the base sets the variable.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Distro {
    /// `ID` from os-release.
    pub id: String,
    /// `VERSION_ID` from os-release.
    pub version_id: String,
    #[serde(default)]
    pub codename: Option<String>,
    pub pretty: String,
    /// Package backend: `apt` today; `rpm` slots in beside it.
    pub backend: Backend,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Apt,
    Rpm,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Repository {
    pub name: String,
    /// Mirrors in order of preference; the first goes into the image's source list.
    /// Empty when `from_base` is set.
    #[serde(default)]
    pub urls: Vec<String>,
    /// Use the archive the base image is configured with (its own sources.list).
    #[serde(default)]
    pub from_base: bool,
    #[serde(default)]
    pub suite: Option<String>,
    #[serde(default)]
    pub components: Vec<String>,
    #[serde(default)]
    pub key_url: Option<String>,
    /// Pinned OpenPGP v4 fingerprint of the repository key (40 hex digits).
    #[serde(default)]
    pub fingerprint: Option<String>,
    /// NVIDIA's CUDA repository: read (and added to the image) only with `--nccl`, and the
    /// only origin NCCL is taken from. `{nvarch}` in its URLs is NVIDIA's name for the
    /// architecture (`x86_64`, `sbsa`).
    #[serde(default)]
    pub nccl: bool,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Packages {
    #[serde(default)]
    pub install: Vec<String>,
    #[serde(default)]
    pub remove: Vec<String>,
    /// Files removed (whited out) from the image, such as Mellanox's apt source.
    #[serde(default)]
    pub remove_files: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PlainFile {
    pub path: String,
    pub content: String,
    #[serde(default = "default_mode")]
    pub mode: u32,
}

fn default_mode() -> u32 {
    0o644
}

impl Recipe {
    pub fn parse(name: &str, text: &str) -> Result<Recipe> {
        let mut r: Recipe = toml::from_str(text).map_err(|source| Error::Recipe { name: name.to_string(), source })?;
        r.name = name.to_string();
        r.validate()?;
        Ok(r)
    }

    fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(Error::RecipeInvalid { name: self.name.clone(), reason });
        for repo in &self.repositories {
            if repo.from_base != repo.urls.is_empty() {
                return bad(format!("repository `{}` needs either `urls` or `from_base = true`", repo.name));
            }
            if !repo.from_base && repo.suite.is_none() {
                return bad(format!("repository `{}` has no `suite`", repo.name));
            }
            if repo.nccl && repo.from_base {
                return bad(format!("repository `{}`: an NCCL repository cannot be `from_base`", repo.name));
            }
            if let Some(fp) = &repo.fingerprint {
                if fp.len() != 40 || !fp.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return bad(format!("repository `{}`: fingerprint must be 40 hex digits", repo.name));
                }
            }
        }
        for f in self.files.iter().map(|f| &f.path).chain(&self.packages.remove_files) {
            if crate::layer::normalize(f).is_none() {
                return bad(format!("invalid path `{f}`"));
            }
        }
        Ok(())
    }

    /// The recipe as one build uses it: NCCL repositories kept only when `nccl` is asked for,
    /// with `{nvarch}` in their URLs filled in for the Debian architecture `arch`.
    pub fn for_build(&self, nccl: bool, arch: &str) -> Recipe {
        let mut r = self.clone();
        r.repositories.retain(|repo| nccl || !repo.nccl);
        let nvarch = match arch {
            "amd64" => "x86_64",
            "arm64" => "sbsa",
            "ppc64el" => "ppc64le",
            other => other,
        };
        for repo in r.repositories.iter_mut().filter(|repo| repo.nccl) {
            for u in repo.urls.iter_mut() {
                *u = u.replace("{nvarch}", nvarch);
            }
        }
        r
    }

    /// Names of the repositories NCCL may come from.
    pub fn nccl_repositories(&self) -> Vec<&str> {
        self.repositories.iter().filter(|r| r.nccl).map(|r| r.name.as_str()).collect()
    }

    /// A built-in recipe by name, or a recipe file when `name` is a path.
    pub fn load(name: &str) -> Result<Recipe> {
        if name.ends_with(".toml") || name.contains('/') {
            let path = Path::new(name);
            let text = std::fs::read_to_string(path).map_err(Error::io("reading recipe", path))?;
            return Recipe::parse(name, &text);
        }
        match BUILTIN.iter().find(|(n, _)| *n == name) {
            Some((n, text)) => Recipe::parse(n, text),
            None => Err(Error::UnknownRecipe { name: name.to_string(), available: builtin_names().join(", ") }),
        }
    }

    /// The built-in recipe for os-release `ID` and `VERSION_ID`.
    pub fn for_distro(id: &str, version_id: &str) -> Result<Recipe> {
        let name = format!("{id}-{version_id}");
        if BUILTIN.iter().any(|(n, _)| *n == name) {
            return Recipe::load(&name);
        }
        Err(Error::UnsupportedDistro { found: format!("{id} {version_id}"), supported: supported().join(", ") })
    }
}

pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

pub fn builtin() -> Result<Vec<Recipe>> {
    BUILTIN.iter().map(|(n, t)| Recipe::parse(n, t)).collect()
}

fn supported() -> Vec<String> {
    builtin()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.unsupported.is_none())
        .map(|r| r.distro.pretty)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_recipes_parse() {
        let all = builtin().unwrap();
        assert_eq!(all.len(), BUILTIN.len());
        let jammy = Recipe::load("ubuntu-22.04").unwrap();
        assert_eq!(jammy.repositories[0].suite.as_deref(), Some("jammy/erdma"));
        assert_eq!(jammy.packages.install, ["libibverbs1", "ibverbs-providers", "ibverbs-utils", "librdmacm1"]);
        assert_eq!(jammy.env["NCCL_IB_HCA"], "erdma");
        assert!(Recipe::load("debian-11").unwrap().unsupported.is_some());
        for r in all.iter().filter(|r| r.unsupported.is_none()) {
            assert_eq!(r.nccl_repositories(), ["cuda"], "{}", r.name);
        }
    }

    #[test]
    fn nccl_repositories_only_with_nccl() {
        let jammy = Recipe::load("ubuntu-22.04").unwrap();
        let plain = jammy.for_build(false, "amd64");
        assert!(plain.repositories.iter().all(|r| !r.nccl));
        let with = jammy.for_build(true, "arm64");
        let cuda = with.repositories.iter().find(|r| r.nccl).unwrap();
        assert_eq!(cuda.urls, ["https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/sbsa/"]);
        assert_eq!(cuda.suite.as_deref(), Some("/"));
    }

    #[test]
    fn unknown_keys_are_named() {
        let text = "[distro]\nid='x'\nversion_id='1'\npretty='X'\nbackend='apt'\nbogus=1\n";
        let e = Recipe::parse("t", text).unwrap_err();
        let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
        assert!(chain.contains("bogus"), "{chain}");
    }

    #[test]
    fn unsupported_distro_lists_supported() {
        let e = Recipe::for_distro("fedora", "40").unwrap_err().to_string();
        assert!(e.contains("fedora 40") && e.contains("Debian 12") && e.contains("Ubuntu 22.04"), "{e}");
        assert!(!e.contains("Debian 11"), "{e}");
    }
}
