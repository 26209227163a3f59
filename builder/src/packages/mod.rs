//! Package backends: where a package gets resolved, fetched and unpacked into the layer.
//!
//! [`install`], [`add_repositories`] and [`installed`] are the one interface `build`, `plan`
//! and `check` use; [`apt`] (Debian, Ubuntu) and [`rpm`] (Enterprise Linux) are behind it.
//! What every backend needs lives here, once, below them: the inputs and the report, NCCL's
//! build selection ([`nccl`]), the layer's payload rules ([`payload`]), the script emulations
//! both backends share (`users`, `alternatives`), ld.so.cache's format and directory scan
//! (`ldcache`) and its rewrite after an install (`ldconfig`), the sandbox ([`sandboxed`]), and
//! the repositories fetched while the base's layer is read ([`prefetch`]). OpenPGP (keys, pins,
//! signatures) is the `erdma_openpgp` crate.
pub(crate) mod alternatives;
pub mod apt;
pub mod error;
pub(crate) mod image;
pub(crate) mod ldcache;
pub(crate) mod ldconfig;
pub mod nccl;

pub mod payload;
pub mod prefetch;
pub mod rpm;
pub mod sandboxed;
pub mod scripts;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod users;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use erdma_common::progress::Reporter;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;
pub use error::PackageError;

/// A repository packages come from, as a recipe names it.
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
    /// Pinned OpenPGP fingerprint of the repository key's primary key (40 hex digits for v4,
    /// 64 for v6).
    #[serde(default)]
    pub fingerprint: Option<String>,
    /// NVIDIA's CUDA repository: read (and added to the image) only with `--nccl`, and the
    /// only origin NCCL is taken from. `{nvarch}` in its URLs is NVIDIA's name for the
    /// architecture (`x86_64`, `sbsa`).
    #[serde(default)]
    pub nccl: bool,
    /// rpm: `repo_gpgcheck`: the repository's `repomd.xml` must carry a valid signature
    /// (`repomd.xml.asc`); one present is always verified.
    #[serde(default)]
    pub repo_gpgcheck: bool,
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

/// What a backend is asked to install, from where: the part of a recipe the backends read.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The recipe's name, for messages.
    pub recipe: &'a str,
    pub repositories: &'a [Repository],
    pub packages: &'a Packages,
    /// os-release `ID`, the release's codename and its name, for a base without sources.
    pub distro_id: &'a str,
    /// os-release `VERSION_ID` of the release (`3`, `9`): dnf's `$releasever` for rpm.
    pub version_id: &'a str,
    pub codename: Option<&'a str>,
    pub pretty: &'a str,
}

impl<'a> Target<'a> {
    /// Names of the repositories NCCL may come from.
    pub fn nccl_repositories(&self) -> Vec<&'a str> {
        self.repositories.iter().filter(|r| r.nccl).map(|r| r.name.as_str()).collect()
    }
}

/// The package manager a distribution uses, and so the backend that installs into it.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Apt,
    Rpm,
}

/// What a build asks of a package backend: the recipe's target and the user's overrides.
pub struct Inputs<'a> {
    /// The one client for repositories and packages.
    pub http: &'a erdma_http::Client,
    /// The recipe's repositories, packages and release.
    pub target: Target<'a>,
    /// Debian architecture of the image (`amd64`, `arm64`).
    pub arch: &'a str,
    /// `--mirror [FROM=]URL`: stand-ins for the base's archive URLs (`from_base` repositories).
    pub mirrors: &'a [Mirror],
    /// `--repo NAME=URL`: replaces a recipe repository's URLs.
    pub repo_urls: &'a BTreeMap<String, String>,
    /// Keys of the recipe's own repositories (fetched, or from `--keyring [NAME=]FILE`), by
    /// repository name.
    pub repo_keys: &'a BTreeMap<String, Vec<u8>>,
    /// `--keyring base=FILE` or `--keyring FILE`: trusted for the base's own archive instead
    /// of the keys the image has.
    pub base_keyring: Option<Vec<u8>>,
    /// Install the recipe's packages (off with `--no-packages`).
    pub recipe_packages: bool,
    /// `--install NAME[=VERSION]`: more packages from the same repositories.
    pub extra: &'a [String],
    /// `--package FILE|URL`: `.deb`s no repository signs (allowed by the caller).
    pub local: &'a [String],
    /// `--nccl`: the `libnccl2` build to add.
    pub nccl: Option<NcclRequest>,
    /// `$XDG_CACHE_HOME/erdma-build`.
    pub cache_dir: PathBuf,
    /// `plan --download`: without a layer, download (and verify) the packages anyway, to read
    /// their payloads for the report.
    pub download: bool,
    /// `--skip-scripts`: a script that can be neither emulated nor shown to be without effect
    /// is listed as not run instead of refusing the build.
    pub skip_scripts: bool,
    /// Scripts that can be neither emulated nor shown to be without effect run in a sandbox
    /// over the base's root ([`crate::sandbox`]) instead of stopping the build (apt only);
    /// `--no-sandbox` turns it off.
    pub sandbox: bool,
    /// `--install-recommends`: Recommends are installed as `apt-get install` installs them.
    pub install_recommends: bool,
    /// The repositories fetched ahead while the base's layer was read.
    pub prefetched: Option<&'a prefetch::FetchAhead>,
}

/// `--mirror [FROM=]URL`: where to read a source of the base's from instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirror {
    /// Only the sources with this URI; `None`: every source of the base.
    pub from: Option<String>,
    pub to: String,
}

impl Mirror {
    /// `URL`, or `FROM=URL` when both sides are URLs (`http://deb.debian.org/debian-security=file:///srv/sec`).
    pub fn parse(arg: &str) -> Mirror {
        if let Some((from, to)) = arg.split_once('=') {
            if from.contains("://") && to.contains("://") {
                return Mirror { from: Some(from.to_string()), to: to.to_string() };
            }
        }
        Mirror { from: None, to: arg.to_string() }
    }

    /// The mirror for every source: the last plain `--mirror URL`.
    fn everywhere(mirrors: &[Mirror]) -> Option<&Mirror> {
        mirrors.iter().rev().find(|m| m.from.is_none())
    }

    /// The URL to read `uri` from: a mirror named for it, else, for a suite of the
    /// distribution's own archive (`archive`), the one for every source.
    fn for_uri<'m>(mirrors: &'m [Mirror], uri: &str, archive: bool) -> Option<&'m str> {
        let same = |a: &str| a.trim_end_matches('/') == uri.trim_end_matches('/');
        let named = mirrors.iter().rev().find(|m| m.from.as_deref().is_some_and(same));
        named.or_else(|| Mirror::everywhere(mirrors).filter(|_| archive)).map(|m| m.to.as_str())
    }
}

/// What `--nccl` asks of the resolver.
#[derive(Debug, Clone)]
pub struct NcclRequest {
    pub want: nccl::Want,
    /// The image's CUDA (or `--cuda`): the `+cudaX.Y` build must have its major version.
    pub cuda: nccl::Cuda,
    /// `libnccl-dev` too.
    pub dev: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct PackageChange {
    pub name: String,
    pub version: String,
    pub arch: String,
    #[serde(flatten)]
    pub action: Action,
    pub origin: String,
    pub size: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PackageRef {
    pub name: String,
    pub version: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct PackagesReport {
    pub install: Vec<PackageChange>,
    pub remove: Vec<PackageRef>,
    /// Requested packages the base already has.
    pub kept: Vec<PackageRef>,
    /// Requested names installed as the one package that provides them (apt's "selecting").
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub selected: Vec<Selected>,
    /// The repository URL each recipe repository was reached at.
    pub repositories: BTreeMap<String, String>,
    pub downloaded_bytes: u64,
    pub cached_debs: usize,
    /// The `libnccl2` version `--nccl` chose.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl: Option<String>,
    /// What the user should know (a base repository that could not be reached and was skipped).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// `Recommends` of the installed packages that nothing in the image satisfies, as
    /// `NAME (recommended by PACKAGE)`: left out, as `apt-get install --no-install-recommends`
    /// and dnf's `install_weak_deps=False` leave them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub recommends_left_out: Vec<String>,
    /// Every maintainer script (dpkg) and scriptlet (rpm) of the packages installed and
    /// removed, and what the build did about it ([`scripts`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scripts: Vec<scripts::ScriptRecord>,
    /// `--package` files: installed without any signature vouching for them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unsigned: Vec<Unsigned>,
    /// Setuid and setgid files, device nodes, FIFOs and sockets in the payloads read
    /// ([`payload::special`]): every package's in `build`; in `plan`, those of the packages
    /// on disk (a `--package` file, the package cache), or all with `plan --download`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub special_files: Vec<payload::SpecialFile>,
    /// `plan`: packages (`name version`) whose payload was not read because it has not been
    /// downloaded yet (`plan --download` reads them all).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_inspected: Vec<String>,
    /// Maintainer scripts run by the image's own dpkg in a sandbox, and what that cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxRun>,
    /// Whether the layer records when it was built, so that no other build writes it alike:
    /// the rpm database's install times, or the times of the files an image's dpkg wrote in
    /// the sandbox (with what its scripts made at random: an ssh server's host keys).
    #[serde(skip)]
    pub dated: bool,
}

/// Why and how the build ran the image's package manager in a sandbox ([`crate::sandbox`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct SandboxRun {
    /// The first script command that can be neither emulated nor shown to be without effect
    /// (`package script: command`): what made the build run the scripts instead.
    pub because: String,
    /// What ran inside, one command a line.
    pub commands: Vec<String>,
    /// The base's layers read to assemble its root, and their compressed size (`plan`: what a
    /// build will read).
    pub layers_read: usize,
    pub bytes_read: u64,
    /// What the run left that a layer does not take (device nodes, FIFOs, sockets).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_taken: Vec<String>,
    /// Where the sandbox's root was assembled: `memory` (a tmpfs), `disk`, or `disk (…)` with
    /// why not in memory (`build` only).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tree: String,
}

/// A `--package` file installed without a signature vouching for it.
#[derive(Debug, Clone, Serialize)]
pub struct Unsigned {
    pub name: String,
    pub version: String,
    pub arch: String,
    /// The file or URL as the user gave it.
    pub source: String,
    pub sha256: String,
}

/// What a package of the plan does to the base: one vocabulary for both backends.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", tag = "action")]
pub enum Action {
    /// Not in the base.
    Install,
    /// The base has an older version.
    Upgrade { from: String },
    /// The base has other builds in its place (Mellanox OFED's; rpm: what its `Obsoletes` or a
    /// replace rule names, or another build of the same EVR): removed, then this installed.
    /// apt names the replaced build by its version, rpm by NEVRA; the report joins them.
    Replace {
        #[serde(serialize_with = "joined")]
        from: Vec<String>,
    },
    /// A pinned version (`name=version`), or one a dependency needs exactly, older than the
    /// base's.
    Downgrade { from: String },
}

fn joined<S: serde::Serializer>(from: &[String], s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&from.join(", "))
}

/// A requested virtual name and the package installed for it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Selected {
    pub requested: String,
    pub package: String,
}

/// What a package manager does for a build: the one interface `build`, `plan` and `check`
/// reach the backends through. apt ([`apt::Apt`]) and rpm ([`rpm::Rpm`]) implement it; the
/// recipe's [`Backend`] picks one ([`install`], [`add_repositories`]).
pub trait PackageManager: Sync {
    /// Resolves the packages `inputs` asks for against the base's database and the
    /// repositories, and, given a layer, fetches and verifies them and writes their files and
    /// the updated package database into it. Without a layer (`plan`) nothing is downloaded
    /// but indices (unless [`Inputs::download`]); the payloads of the packages already on disk
    /// are read for the report's [`PackagesReport::special_files`].
    /// Returns the report and the paths the layer removes from the base.
    fn install(
        &self,
        inputs: &Inputs<'_>,
        base: &dyn BaseFiles,
        layer: Option<&mut LayerContents>,
        reporter: &dyn Reporter,
    ) -> impl std::future::Future<Output = Result<(PackagesReport, Vec<String>)>>;

    /// Configures the image's package manager for the recipe's own repositories (`urls`: the
    /// URL each was reached at; `keys`: each one's verified key), so a later install inside the
    /// image reaches them with the same trust. `nccl_cuda`: the CUDA an NCCL build was chosen
    /// for, whose other majors' builds a later upgrade in the image must not bring (apt holds
    /// the package in dpkg's status instead).
    fn add_repositories(
        &self,
        target: &Target<'_>,
        urls: &BTreeMap<String, String>,
        keys: &BTreeMap<String, Vec<u8>>,
        nccl_cuda: Option<nccl::Cuda>,
        base: &dyn BaseFiles,
        layer: &mut LayerContents,
    ) -> Result<()>;

    /// The packages installed in the base, name → version, from this manager's database;
    /// empty when the base has none.
    fn installed(&self, base: &dyn BaseFiles) -> Result<BTreeMap<String, String>>;
}

/// [`PackageManager::install`] by the recipe's backend.
pub async fn install(
    backend: Backend,
    inputs: &Inputs<'_>,
    base: &dyn BaseFiles,
    layer: Option<&mut LayerContents>,
    reporter: &dyn Reporter,
) -> Result<(PackagesReport, Vec<String>)> {
    match backend {
        Backend::Apt => apt::Apt.install(inputs, base, layer, reporter).await,
        Backend::Rpm => rpm::Rpm.install(inputs, base, layer, reporter).await,
    }
}

/// [`PackageManager::add_repositories`] by the recipe's backend.
pub fn add_repositories(
    backend: Backend,
    target: &Target<'_>,
    urls: &BTreeMap<String, String>,
    keys: &BTreeMap<String, Vec<u8>>,
    nccl_cuda: Option<nccl::Cuda>,
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
) -> Result<()> {
    match backend {
        Backend::Apt => apt::Apt.add_repositories(target, urls, keys, nccl_cuda, base, layer),
        Backend::Rpm => rpm::Rpm.add_repositories(target, urls, keys, nccl_cuda, base, layer),
    }
}

/// The packages installed in the base, name → version, from whichever database it has
/// (dpkg's status, or rpm's database); empty when it has none.
pub fn installed(base: &dyn BaseFiles) -> Result<BTreeMap<String, String>> {
    let dpkg = apt::Apt.installed(base)?;
    if !dpkg.is_empty() {
        return Ok(dpkg);
    }
    rpm::Rpm.installed(base)
}

/// `--package FILE|URL` on disk, with its size and SHA256: a URL is downloaded into `dir`
/// (named by its SHA256 and `ext`, as the cache names every package), a file read where it is;
/// either hashed as it streams by, never held whole (a package can be hundreds of MB).
pub async fn local_package(
    arg: &str,
    dir: &std::path::Path,
    ext: &str,
    max: u64,
    client: &erdma_http::Client,
) -> Result<(PathBuf, u64, String)> {
    use crate::error::Error;
    if arg.starts_with("http://") || arg.starts_with("https://") {
        std::fs::create_dir_all(dir).map_err(Error::io("creating cache", dir))?;
        let fail = |reason: crate::error::Cause| Error::Download { url: arg.to_string(), reason };
        let (tmp, size, sha256) = match client.download(arg, dir, max).await {
            Ok(Some(d)) => d,
            Ok(None) => return Err(fail("not found (404)".into())),
            Err(erdma_http::HttpError::TooLarge { .. }) => {
                return Err(fail(format!("larger than {max} bytes").into()))
            }
            Err(e) => return Err(fail(e.into())),
        };
        let path = dir.join(format!("{sha256}.{ext}"));
        tmp.persist(&path).map_err(|e| Error::io("writing cache", &path)(e.error))?;
        return Ok((path, size, sha256));
    }
    let p = std::path::Path::new(arg.strip_prefix("file://").unwrap_or(arg));
    let path = std::path::absolute(p).map_err(Error::io("reading package", p))?;
    let file = std::fs::File::open(&path).map_err(Error::io("reading package", &path))?;
    let mut body = erdma_http::Hashing::new(file, u64::MAX, None);
    std::io::copy(&mut body, &mut std::io::sink()).map_err(Error::io("reading package", &path))?;
    let (size, sha256) = body.finish();
    Ok((path, size, sha256))
}

/// `SOURCE_DATE_EPOCH` (reproducible-builds.org's specification) where set to a number.
pub fn source_date_epoch() -> Option<u64> {
    std::env::var("SOURCE_DATE_EPOCH").ok().and_then(|v| v.trim().parse().ok())
}
