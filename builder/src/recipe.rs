//! Per-distro recipes: repositories, keys, packages and files. The built-in ones come from family
//! files (`recipes/debian-family.toml`: what the Debian/Ubuntu releases share, written once, and
//! each release's differences); a user's `--recipe PATH` is one recipe in the [`Recipe`] format.
//! The env presets are not per distro: they live in [`crate::env_presets`].
//!
//! The recipes ship inside the binary so `erdma-build` works from any directory. Unknown keys are
//! errors, with the key named.
use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::distro::{cmp_release, FamilyRelease, OsRelease};
use crate::error::{Error, Result};
pub use crate::packages::{Backend, Packages, Repository};

/// The family files in `recipes/`, compiled in: each holds what a family's releases share and,
/// per release, what differs ([`Family`]). Every release is one built-in recipe.
const FAMILIES: &[(&str, &str)] = &[
    ("debian-family", include_str!("../../recipes/debian-family.toml")),
    ("el-family", include_str!("../../recipes/el-family.toml")),
];

/// A family file: the repositories, packages and files its releases share, and the releases.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Family {
    backend: Backend,
    #[serde(default, rename = "repository")]
    repositories: Vec<Repository>,
    #[serde(default)]
    packages: Packages,
    #[serde(default, rename = "file")]
    files: Vec<PlainFile>,
    #[serde(rename = "release")]
    releases: Vec<Release>,
}

/// One release of a family: its os-release identity (or, for the generic recipe, the families
/// it serves) and which of the family's repositories it reads, by name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Release {
    name: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    version_id: String,
    #[serde(default)]
    codename: Option<String>,
    pretty: String,
    #[serde(default)]
    generic: BTreeMap<String, String>,
    #[serde(default)]
    unsupported: Option<String>,
    #[serde(default)]
    repositories: Vec<String>,
    /// NVIDIA's name for the release's CUDA repository when it is not `ID` + `VERSION_ID`
    /// (`rhel8` for Alibaba Cloud Linux 3).
    #[serde(default)]
    nvdistro: Option<String>,
}

/// The recipes of the family file `text`: for each release, the family's repositories it names
/// with `{codename}` and `{nvdistro}` (NVIDIA's name: `debian12`, `ubuntu2204`) filled in (a
/// generic recipe keeps `{nvdistro}` until it is made concrete for a release).
fn family_recipes(family: &str, text: &str) -> Result<Vec<Recipe>> {
    let f: Family = toml::from_str(text)
        .map_err(|source| Error::Recipe { name: family.to_string(), source })?;
    let mut out = Vec::new();
    for rel in f.releases {
        let nvdistro = rel
            .nvdistro
            .clone()
            .unwrap_or_else(|| format!("{}{}", rel.id, rel.version_id.replace('.', "")));
        let mut repositories = Vec::new();
        for want in &rel.repositories {
            let mut repo =
                f.repositories.iter().find(|r| &r.name == want).cloned().ok_or_else(|| {
                    Error::RecipeInvalid {
                        name: rel.name.clone(),
                        reason: format!(
                            "no repository `{want}` in family {family} (has: {})",
                            f.repositories
                                .iter()
                                .map(|r| r.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    }
                })?;
            let fill = |s: &mut String| {
                if let Some(c) = &rel.codename {
                    *s = s.replace("{codename}", c);
                }
                if rel.generic.is_empty() {
                    *s =
                        s.replace("{nvdistro}", &nvdistro).replace("{releasever}", &rel.version_id);
                }
            };
            repo.urls
                .iter_mut()
                .chain(repo.key_url.iter_mut())
                .chain(repo.suite.iter_mut())
                .for_each(fill);
            repositories.push(repo);
        }
        let recipe = Recipe {
            name: rel.name,
            distro: Distro {
                id: rel.id,
                version_id: rel.version_id,
                generic: rel.generic,
                codename: rel.codename,
                pretty: rel.pretty,
                backend: f.backend,
            },
            unsupported: rel.unsupported,
            repositories,
            packages: f.packages.clone(),
            files: f.files.clone(),
            env: BTreeMap::new(),
        };
        recipe.validate()?;
        out.push(recipe);
    }
    Ok(out)
}

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
    /// A custom recipe's own env presets, added over [`erdma_common::nccl::PRESETS`] unless
    /// the base sets the variable. The built-in recipes have none.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Distro {
    /// `ID` from os-release (a generic recipe's is filled in when it is chosen).
    #[serde(default)]
    pub id: String,
    /// `VERSION_ID` from os-release.
    #[serde(default)]
    pub version_id: String,
    /// A generic recipe: the families it serves (os-release `ID`, or `ID_LIKE` for their
    /// derivatives), each from the release given, for releases without a recipe of their own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub generic: BTreeMap<String, String>,
    #[serde(default)]
    pub codename: Option<String>,
    pub pretty: String,
    /// Package backend: `apt` (Debian, Ubuntu) or `rpm` (Enterprise Linux).
    pub backend: Backend,
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
        let mut r: Recipe = toml::from_str(text)
            .map_err(|source| Error::Recipe { name: name.to_string(), source })?;
        r.name = name.to_string();
        r.validate()?;
        Ok(r)
    }

    fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(Error::RecipeInvalid { name: self.name.clone(), reason });
        if self.distro.generic.is_empty()
            == (self.distro.id.is_empty() || self.distro.version_id.is_empty())
        {
            return bad("[distro] needs `id` and `version_id`, or `generic` (and not both)".into());
        }
        for repo in &self.repositories {
            if repo.from_base != repo.urls.is_empty() {
                return bad(format!(
                    "repository `{}` needs either `urls` or `from_base = true`",
                    repo.name
                ));
            }
            if !repo.from_base && repo.suite.is_none() && self.distro.backend == Backend::Apt {
                return bad(format!("repository `{}` has no `suite`", repo.name));
            }
            if repo.nccl && repo.from_base {
                return bad(format!(
                    "repository `{}`: an NCCL repository cannot be `from_base`",
                    repo.name
                ));
            }
            if let Some(fp) = &repo.fingerprint {
                if erdma_openpgp::normalise_pin(fp).is_none() {
                    return bad(format!("repository `{}`: fingerprint must be a primary key's, 40 hex digits (v4) or 64 (v6)", repo.name));
                }
            }
        }
        for f in self.files.iter().map(|f| &f.path).chain(&self.packages.remove_files) {
            if erdma_oci::layer::normalize(f).is_none() {
                return bad(format!("invalid path `{f}`"));
            }
        }
        Ok(())
    }

    /// The recipe as one build uses it: NCCL repositories kept only when `nccl` is asked for,
    /// with `{nvarch}` and `{basearch}` in their URLs filled in for the Debian architecture `arch`.
    pub fn for_build(&self, nccl: bool, arch: &str) -> Recipe {
        let mut r = self.clone();
        r.repositories.retain(|repo| nccl || !repo.nccl);
        let nvarch = match arch {
            "amd64" => "x86_64",
            "arm64" => "sbsa",
            "ppc64el" => "ppc64le",
            other => other,
        };
        // rpm's name for the architecture, dnf's `$basearch`.
        let basearch = crate::packages::rpm::repos::basearch(arch);
        for repo in r.repositories.iter_mut() {
            for u in repo.urls.iter_mut().chain(repo.key_url.iter_mut()) {
                *u = u.replace("{nvarch}", nvarch).replace("{basearch}", basearch);
            }
        }
        r
    }

    /// What the package backends read of this recipe.
    pub fn target(&self) -> crate::packages::Target<'_> {
        crate::packages::Target {
            recipe: &self.name,
            repositories: &self.repositories,
            packages: &self.packages,
            distro_id: &self.distro.id,
            version_id: &self.distro.version_id,
            codename: self.distro.codename.as_deref(),
            pretty: &self.distro.pretty,
        }
    }

    /// What a fetch ahead of an rpm build needs of this recipe (as [`Recipe::for_build`]
    /// made it).
    pub fn picked(&self) -> crate::packages::rpm::prefetch::Picked {
        crate::packages::rpm::prefetch::Picked {
            backend: self.distro.backend,
            version_id: self.distro.version_id.clone(),
            repositories: self.repositories.clone(),
            remove_files: self.packages.remove_files.clone(),
        }
    }

    /// Names of the repositories NCCL may come from.
    pub fn nccl_repositories(&self) -> Vec<&str> {
        self.target().nccl_repositories()
    }

    /// A built-in recipe by name, or a recipe file when `name` is a path.
    pub fn load(name: &str) -> Result<Recipe> {
        if name.ends_with(".toml") || name.contains('/') {
            let path = Path::new(name);
            let text = std::fs::read_to_string(path).map_err(Error::io("reading recipe", path))?;
            return Recipe::parse(name, &text);
        }
        let all = builtin()?;
        match all.iter().find(|r| r.name == name) {
            Some(r) => Ok(r.clone()),
            None => Err(Error::UnknownRecipe {
                name: name.to_string(),
                available: all.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(", "),
            }),
        }
    }

    /// Whether this recipe is for the release `version_id`: the same `VERSION_ID`, or, for the
    /// rpm distributions, whose point releases (`9.4`, `8.10`) share one major version's
    /// repositories (dnf's `$releasever`), the same major version.
    fn serves_version(&self, version_id: &str) -> bool {
        self.distro.version_id == version_id
            || (self.distro.backend == Backend::Rpm
                && version_id.split('.').next() == Some(self.distro.version_id.as_str()))
    }

    /// Whether this recipe serves whole families rather than one release.
    pub fn is_generic(&self) -> bool {
        !self.distro.generic.is_empty()
    }

    /// A generic recipe made concrete for one release: its `[distro]` filled in, and
    /// `{nvdistro}` (NVIDIA's repository name, `debian13`, `ubuntu2404`) in its URLs.
    pub fn for_release(&self, rel: &FamilyRelease) -> Recipe {
        let mut r = self.clone();
        r.distro.id = rel.family.clone();
        r.distro.version_id = rel.version.clone();
        r.distro.codename = rel.codename.clone();
        r.distro.pretty = format!("{}, generic recipe", rel.pretty());
        let nvdistro = format!("{}{}", rel.family, rel.version.replace('.', ""));
        for repo in r.repositories.iter_mut() {
            for u in repo.urls.iter_mut().chain(repo.key_url.iter_mut()) {
                *u = u.replace("{nvdistro}", &nvdistro);
            }
        }
        r
    }

    /// A generic recipe named by hand (`--recipe apt-generic`), made concrete for the image's
    /// release; any other recipe as it is.
    pub fn for_image(self, os: &OsRelease) -> Result<Recipe> {
        if !self.is_generic() {
            return Ok(self);
        }
        let rel = os
            .families()
            .into_iter()
            .filter(|f| self.distro.generic.contains_key(*f))
            .find_map(|f| os.release_of(f))
            .ok_or_else(|| Error::DistroRefused {
                found: os.describe(),
                reason: format!(
                    "recipe {} is for {} and their derivatives",
                    self.name,
                    self.distro.generic.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            })?;
        Ok(self.for_release(&rel))
    }

    /// The built-in recipe for an image's os-release: the release's own recipe; else, for
    /// a release of a family the generic recipe serves (or a derivative naming the family in
    /// `ID_LIKE`), the generic one; releases older than the first recipe are refused with the
    /// reason.
    pub fn for_os(os: &OsRelease) -> Result<Recipe> {
        let all = builtin()?;
        if let Some(r) =
            all.iter().find(|r| r.distro.id == os.id && r.serves_version(&os.version_id))
        {
            return Ok(r.clone());
        }
        // An Enterprise Linux rebuild without a recipe of its own (Oracle Linux, OpenCloudOS)
        // follows the RHEL or CentOS release its major version names, as its ID_LIKE says.
        for family in &os.id_like {
            if let Some(r) = all.iter().find(|r| {
                r.distro.backend == Backend::Rpm
                    && &r.distro.id == family
                    && r.serves_version(&os.version_id)
            }) {
                let mut r = r.clone();
                r.distro.pretty = format!("{} (based on {})", os.describe(), r.distro.pretty);
                return Ok(r);
            }
        }
        for family in os.families() {
            let Some(generic) = all.iter().find(|r| r.distro.generic.contains_key(family)) else {
                continue;
            };
            let own: Vec<&Recipe> = all.iter().filter(|r| r.distro.id == family).collect();
            let supported: Vec<&&Recipe> = own.iter().filter(|r| r.unsupported.is_none()).collect();
            let Some(from) = generic.distro.generic.get(family) else { continue };
            let Some(rel) = os.release_of(family) else { continue };
            let found = if rel.own {
                os.describe()
            } else {
                format!("{} (based on {})", os.describe(), rel.pretty())
            };
            if rel.version.is_empty() {
                // A derivative of a release we cannot place, or a newer codename: the result
                // is checked for the erdma provider all the same.
                return Ok(generic.for_release(&rel));
            }
            if let Some(r) = own.iter().find(|r| r.serves_version(&rel.version)) {
                return Ok((*r).clone());
            }
            let first = supported
                .iter()
                .min_by(|a, b| cmp_release(&a.distro.version_id, &b.distro.version_id));
            if let Some(first) =
                first.filter(|f| cmp_release(&rel.version, &f.distro.version_id).is_lt())
            {
                return Err(Error::DistroRefused {
                    found,
                    reason: format!(
                        "{} is older than {}, the first release erdma-build supports: its rdma-core has no erdma provider (added in rdma-core 43) and Alibaba's eRDMA repository has no packages for it",
                        rel.pretty(),
                        first.distro.pretty
                    ),
                });
            }
            if cmp_release(&rel.version, from).is_lt() {
                return Err(Error::DistroRefused {
                    found,
                    reason: format!(
                        "no recipe for {}: before {family} {from}, only the releases with a recipe are supported ({}); pass --recipe to choose one",
                        rel.pretty(),
                        supported.iter().map(|r| r.distro.pretty.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                });
            }
            return Ok(generic.for_release(&rel));
        }
        Err(Error::UnsupportedDistro { found: os.describe(), supported: supported().join(", ") })
    }
}

/// Every built-in recipe, one per release of each family file.
pub fn builtin() -> Result<Vec<Recipe>> {
    let mut all = Vec::new();
    for (family, text) in FAMILIES {
        all.extend(family_recipes(family, text)?);
    }
    Ok(all)
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
        let names: Vec<&str> = all.iter().map(|r| r.name.as_str()).collect();
        // Family files, one recipe per release; placeholders filled per release.
        assert_eq!(
            names,
            [
                "debian-11",
                "debian-12",
                "ubuntu-18.04",
                "ubuntu-20.04",
                "ubuntu-22.04",
                "ubuntu-24.04",
                "apt-generic",
                "alinux-3",
                "centos-7",
                "centos-8",
                "anolis-8",
                "rocky-8",
                "rocky-9",
                "almalinux-8",
                "almalinux-9",
                "rhel-8",
                "rhel-9"
            ]
        );
        assert_eq!(all.iter().filter(|r| r.is_generic()).count(), 1, "one generic recipe (apt's)");
        let jammy = Recipe::load("ubuntu-22.04").unwrap();
        assert!(jammy.repositories[0].from_base, "the base archive, for the dependencies");
        assert_eq!(jammy.repositories[1].suite.as_deref(), Some("jammy/erdma"));
        assert_eq!(
            jammy.packages.install,
            ["libibverbs1", "ibverbs-providers", "ibverbs-utils", "librdmacm1"]
        );
        for r in &all {
            assert!(
                r.env.is_empty(),
                "{}: the presets live in env_presets, not in recipes",
                r.name
            );
        }
        assert!(Recipe::load("debian-11").unwrap().unsupported.is_some());
        for r in all.iter().filter(|r| r.unsupported.is_none()) {
            assert_eq!(r.nccl_repositories(), ["cuda"], "{}", r.name);
        }
    }

    #[test]
    fn family_files_fill_placeholders_and_name_bad_references() {
        let focal = Recipe::load("ubuntu-20.04").unwrap();
        let erdma = focal.repositories.iter().find(|r| r.name == "erdma").unwrap();
        assert_eq!(erdma.suite.as_deref(), Some("focal/erdma"));
        let cuda = focal.repositories.iter().find(|r| r.nccl).unwrap();
        assert_eq!(cuda.key_url.as_deref(), Some("https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2004/x86_64/3bf863cc.pub"));
        // Debian 12 and Ubuntu 24.04 read no Alibaba repository; the generic recipe keeps
        // {nvdistro} until it is made concrete for a release.
        assert!(Recipe::load("debian-12").unwrap().repositories.iter().all(|r| r.name != "erdma"));
        assert!(Recipe::load("apt-generic")
            .unwrap()
            .repositories
            .iter()
            .any(|r| r.urls.iter().any(|u| u.contains("{nvdistro}"))));
        let bad = "backend = \"apt\"\n[[repository]]\nname = \"base\"\nfrom_base = true\n[[release]]\nname = \"x-1\"\nid = \"x\"\nversion_id = \"1\"\npretty = \"X 1\"\nrepositories = [\"base\", \"nope\"]\n";
        let e = family_recipes("test-family", bad).unwrap_err().to_string();
        assert!(e.contains("nope") && e.contains("x-1"), "{e}");
    }

    #[test]
    fn enterprise_linux_recipes_by_major_version_and_rebuilds() {
        let os = |text: &str| crate::distro::OsRelease::parse(text);
        // Rocky Linux 9.3's and Alibaba Cloud Linux 3's os-release, as their images have them.
        let rocky = Recipe::for_os(&os("NAME=\"Rocky Linux\"\nVERSION=\"9.3 (Blue Onyx)\"\nID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\nVERSION_ID=\"9.3\"\n")).unwrap();
        assert_eq!(rocky.name, "rocky-9");
        let alinux = Recipe::for_os(&os("NAME=\"Alibaba Cloud Linux\"\nVERSION=\"3 (Soaring Falcon)\"\nID=\"alinux\"\nID_LIKE=\"rhel fedora centos anolis\"\nVERSION_ID=\"3\"\n")).unwrap();
        assert_eq!(alinux.name, "alinux-3");
        let erdma = alinux
            .for_build(false, "amd64")
            .repositories
            .into_iter()
            .find(|r| r.name == "erdma")
            .unwrap();
        assert_eq!(
            erdma.urls[1], "https://mirrors.aliyun.com/erdma/yum/redhat/3/erdma/x86_64",
            "the ECS AI-training-cluster guide's baseurl with $releasever and $basearch expanded"
        );
        // A rebuild without a recipe follows the RHEL release its ID_LIKE and major version name.
        let ol = Recipe::for_os(&os("NAME=\"Oracle Linux Server\"\nID=\"ol\"\nID_LIKE=\"fedora rhel\"\nVERSION_ID=\"8.9\"\n")).unwrap();
        assert_eq!(ol.name, "rhel-8");
        assert!(
            ol.distro.pretty.contains("based on Red Hat Enterprise Linux 8"),
            "{}",
            ol.distro.pretty
        );
        let cuda = Recipe::load("alinux-3")
            .unwrap()
            .for_build(true, "arm64")
            .repositories
            .into_iter()
            .find(|r| r.nccl)
            .unwrap();
        assert_eq!(
            cuda.urls,
            ["https://developer.download.nvidia.com/compute/cuda/repos/rhel8/sbsa/"]
        );
    }

    #[test]
    fn nccl_repositories_only_with_nccl() {
        let jammy = Recipe::load("ubuntu-22.04").unwrap();
        let plain = jammy.for_build(false, "amd64");
        assert!(plain.repositories.iter().all(|r| !r.nccl));
        let with = jammy.for_build(true, "arm64");
        let cuda = with.repositories.iter().find(|r| r.nccl).unwrap();
        assert_eq!(
            cuda.urls,
            ["https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/sbsa/"]
        );
        assert_eq!(cuda.suite.as_deref(), Some("/"));
    }

    #[test]
    fn a_custom_recipe_may_still_set_env() {
        let r = Recipe::parse("t", "[distro]\nid='x'\nversion_id='1'\npretty='X'\nbackend='apt'\n[env]\nNCCL_IB_HCA='=mlx5_0'\n").unwrap();
        assert_eq!(r.env["NCCL_IB_HCA"], "=mlx5_0");
    }

    #[test]
    fn unknown_keys_are_named() {
        let text = "[distro]\nid='x'\nversion_id='1'\npretty='X'\nbackend='apt'\nbogus=1\n";
        let e = Recipe::parse("t", text).unwrap_err();
        let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
        assert!(chain.contains("bogus"), "{chain}");
    }

    fn os(text: &str) -> OsRelease {
        OsRelease::parse(text)
    }

    #[test]
    fn unsupported_distro_lists_supported() {
        let e = Recipe::for_os(&os("ID=fedora\nVERSION_ID=40\n")).unwrap_err().to_string();
        assert!(
            e.contains("fedora 40") && e.contains("Debian 12") && e.contains("Ubuntu 22.04"),
            "{e}"
        );
        assert!(!e.contains("Debian 11"), "{e}");
    }

    #[test]
    fn every_release_of_a_known_family_finds_its_recipe() {
        let pick = |text: &str| {
            Recipe::for_os(&os(text)).map(|r| (r.name.clone(), r.distro.pretty.clone()))
        };
        // Releases with a recipe of their own.
        assert_eq!(
            pick("ID=debian\nVERSION_ID=\"12\"\nVERSION_CODENAME=bookworm\n").unwrap().0,
            "debian-12"
        );
        assert_eq!(pick("ID=ubuntu\nVERSION_ID=\"22.04\"\n").unwrap().0, "ubuntu-22.04");
        // Newer ones: the generic recipe, named for the release.
        for (text, pretty) in [
            (
                "ID=debian\nVERSION_ID=\"13\"\nVERSION_CODENAME=trixie\n",
                "Debian 13 (trixie), generic recipe",
            ),
            (
                "ID=debian\nVERSION_ID=\"14\"\nVERSION_CODENAME=forky\n",
                "Debian 14 (forky), generic recipe",
            ),
            (
                "ID=debian\nVERSION_CODENAME=forky\nPRETTY_NAME=\"Debian GNU/Linux forky/sid\"\n",
                "Debian 14 (forky), generic recipe",
            ),
            (
                "ID=ubuntu\nVERSION_ID=\"24.10\"\nVERSION_CODENAME=oracular\n",
                "Ubuntu 24.10 (oracular), generic recipe",
            ),
            ("ID=ubuntu\nVERSION_ID=\"25.04\"\n", "Ubuntu 25.04 (plucky), generic recipe"),
            (
                "ID=ubuntu\nVERSION_ID=\"25.10\"\nVERSION_CODENAME=questing\n",
                "Ubuntu 25.10 (questing), generic recipe",
            ),
            (
                "ID=ubuntu\nVERSION_ID=\"26.04\"\nVERSION_CODENAME=resolute\n",
                "Ubuntu 26.04 (resolute), generic recipe",
            ),
            // A derivative of a release without a recipe (Raspberry Pi OS style).
            (
                "ID=raspbian\nID_LIKE=debian\nVERSION_ID=\"13\"\nVERSION_CODENAME=trixie\n",
                "Debian 13 (trixie), generic recipe",
            ),
        ] {
            assert_eq!(pick(text).unwrap().1, pretty, "{text}");
        }
        // A derivative of a release with a recipe takes that recipe (Linux Mint 21 is jammy).
        assert_eq!(pick("ID=linuxmint\nID_LIKE=\"ubuntu debian\"\nVERSION_ID=\"21.3\"\nUBUNTU_CODENAME=jammy\n").unwrap().0, "ubuntu-22.04");
        assert_eq!(
            pick(
                "ID=pop\nID_LIKE=\"ubuntu debian\"\nVERSION_ID=\"24.04\"\nUBUNTU_CODENAME=noble\n"
            )
            .unwrap()
            .0,
            "ubuntu-24.04"
        );
        // NVIDIA's repository for the release.
        let r =
            Recipe::for_os(&os("ID=debian\nVERSION_ID=\"13\"\n")).unwrap().for_build(true, "amd64");
        let cuda = r.repositories.iter().find(|r| r.nccl).unwrap();
        assert_eq!(
            cuda.urls,
            ["https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/"]
        );
        assert_eq!(cuda.key_url.as_deref(), Some("https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/3bf863cc.pub"));
    }

    #[test]
    fn older_releases_keep_their_reasoned_refusal() {
        let refused = |text: &str| Recipe::for_os(&os(text)).unwrap_err().to_string();
        let e = refused("ID=ubuntu\nVERSION_ID=\"16.04\"\nPRETTY_NAME=\"Ubuntu 16.04.7 LTS\"\n");
        assert_eq!(e, "cannot build for Ubuntu 16.04.7 LTS: Ubuntu 16.04 (xenial) is older than Ubuntu 18.04 (bionic), the first release erdma-build supports: its rdma-core has no erdma provider (added in rdma-core 43) and Alibaba's eRDMA repository has no packages for it");
        let e = refused("ID=debian\nVERSION_ID=\"10\"\n");
        assert!(e.contains("Debian 10 (buster) is older than Debian 12 (bookworm)"), "{e}");
        // Debian 11 has its own recipe, which says why.
        assert!(Recipe::for_os(&os("ID=debian\nVERSION_ID=\"11\"\n"))
            .unwrap()
            .unsupported
            .unwrap()
            .contains("33.2"));
        // Non-LTS Ubuntu between the recipes: no repository serves it.
        let e = refused("ID=ubuntu\nVERSION_ID=\"23.10\"\n");
        assert!(e.contains("no recipe for Ubuntu 23.10") && e.contains("--recipe"), "{e}");
        // A derivative placed by its codename is refused the same way.
        let e =
            refused("ID=linuxmint\nID_LIKE=ubuntu\nVERSION_ID=\"18\"\nUBUNTU_CODENAME=xenial\n");
        assert!(e.contains("(based on Ubuntu 16.04 (xenial))"), "{e}");
    }
}
