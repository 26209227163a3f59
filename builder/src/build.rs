//! `plan` and `build`: read the base, choose the recipe, write one layer, merge the config,
//! and write the new image.
use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use serde::Serialize;
use serde_json::{json, Value};

use crate::config::{rfc3339, ConfigEdit, EnvChange};
use crate::env_presets::Profile;
use crate::distro::OsRelease;
use crate::rootfs::{SnapEntry, Snapshot};
use crate::error::{Error, Result};
use crate::layer::{LayerCompression, LayerContents, LayerInfo};
use crate::inspect::{CudaFact, NcclFact, TorchFact};
use crate::packages::apt::install::{self as apt, AptInputs, NcclRequest, PackagesReport};
use crate::packages::nccl::{Cuda, Want};
use std::collections::BTreeMap;
use crate::progress::{Counters, Reporter, Transfer};
use crate::recipe::{Backend, Recipe};
use crate::registry::Registries;
use crate::sink::{Reuse, Sink, Top};
use crate::source::{PlatformChoice, Source, SourceImage};
use crate::transport::ImageRef;

pub const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";
pub const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// The image label listing `--package` files installed without a signature.
pub const UNSIGNED_LABEL: &str = "com.alibabacloud.erdma.unsigned-packages";

/// Everything a build needs, resolved from the command line.
#[derive(Debug, Clone)]
pub struct Options {
    pub base: ImageRef,
    pub platform: PlatformChoice,
    /// Built-in recipe name or a path; detected from the base's os-release when unset.
    pub recipe: Option<String>,
    pub env: Vec<(String, String)>,
    /// Add the env presets ([`crate::env_presets`], the recipe's `[env]`); off with
    /// `--no-env-presets`.
    pub env_presets: bool,
    /// `--profile`: a platform whose host-specific NCCL settings are baked in too.
    pub profile: Option<Profile>,
    pub compression: LayerCompression,
    pub insecure_registries: Vec<String>,
    /// Key files for the recipe's repositories, replacing the download from `key_url`.
    pub keyring: Option<PathBuf>,
    /// mtime of every file and the config's `created`: `SOURCE_DATE_EPOCH` or 0.
    pub epoch: u64,
    /// `--mirror [FROM=]URL`: the archive for recipes that use the base's own repositories.
    pub mirrors: Vec<apt::Mirror>,
    /// `--repo NAME=URL`.
    pub repo_urls: std::collections::BTreeMap<String, String>,
    /// Install the recipe's packages (off with `--no-packages`).
    pub packages: bool,
    /// `--install NAME[=VERSION]`: more packages from the recipe's (and the base's) repositories.
    pub install: Vec<String>,
    /// `--package FILE|URL`: unsigned `.deb`s, allowed by `--allow-unsigned-package`.
    pub local_packages: Vec<String>,
    /// `--keyring NAME=FILE`: a key file for one repository (`base`: the base's archive).
    pub repo_keyrings: BTreeMap<String, PathBuf>,
    /// `--nccl [VERSION|latest]`: add NVIDIA's `libnccl2`.
    pub nccl: Option<Want>,
    /// `--nccl-dev`: and `libnccl-dev`.
    pub nccl_dev: bool,
    /// `--cuda X.Y`: the CUDA the NCCL build is for, when the base does not say.
    pub cuda: Option<Cuda>,
    /// Bounds of every repository, key and package transfer (`--read-timeout`).
    pub timeouts: crate::http::Timeouts,
}

impl Options {
    pub fn epoch_from_env() -> u64 {
        std::env::var("SOURCE_DATE_EPOCH").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0)
    }
}

#[derive(Debug, Serialize)]
pub struct BaseLayer {
    pub digest: String,
    pub size: u64,
    /// What happened to it on the way to the output (`build` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reuse: Option<Reuse>,
}

#[derive(Debug, Serialize)]
pub struct ImageReport {
    pub platform: Option<String>,
    pub recipe: String,
    /// What the recipe is for: `Debian 13 (trixie), generic recipe` for the generic one.
    pub distro: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os_release: Option<OsRelease>,
    pub files_added: Vec<String>,
    pub files_removed: Vec<String>,
    pub env: Vec<EnvChange>,
    /// Packages added, upgraded, replaced and removed (absent with `--no-packages` or when the
    /// recipe installs none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packages: Option<PackagesReport>,
    pub base_layers: Vec<BaseLayer>,
    /// What `--nccl` chose, and the NCCL the image's Python brings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl: Option<NcclSummary>,
    /// Things the user should know about the result (an old pip NCCL that PyTorch loads, a
    /// repository key trusted on first use).
    pub warnings: Vec<String>,
    /// The keys each recipe repository was verified with (and that the image gets).
    pub keys: Vec<crate::keys::Trusted>,
    /// The new layer; `plan` leaves it out when packages would be downloaded to know it.
    pub layer: Option<LayerInfo>,
    pub config_digest: Option<String>,
    pub manifest_digest: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NcclSummary {
    /// The `libnccl2` package version added (or kept).
    pub libnccl2: String,
    pub cuda: CudaFact,
    /// NCCL from pip wheels (`nvidia-nccl-cu*`) in the image's site-packages.
    pub python_nccl: Vec<NcclFact>,
    pub torch: Option<TorchFact>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub base: String,
    pub base_digest: String,
    /// `--profile`: whose host-specific NCCL settings were baked in (`null`: none were).
    pub profile: Option<Profile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The digest the output name now points at (a manifest, or an index with `--platform all`);
    /// absent from a `plan` that would need package downloads to know it.
    pub digest: Option<String>,
    pub images: Vec<ImageReport>,
    pub bytes_downloaded: u64,
    pub bytes_uploaded: u64,
}

/// Shows what a build would do; writes nothing.
pub async fn plan(opts: &Options, reporter: Arc<dyn Reporter>) -> Result<Report> {
    run(opts, None, reporter).await
}

/// Builds the image and writes it to `output`.
pub async fn build(opts: &Options, output: &ImageRef, reporter: Arc<dyn Reporter>) -> Result<Report> {
    run(opts, Some(output), reporter).await
}

/// A prepared image: the new layer, config and manifest, not yet written anywhere.
struct Prepared {
    report: ImageReport,
    layer_path: PathBuf,
    config_raw: Vec<u8>,
    manifest_raw: Vec<u8>,
    platform_json: Option<Value>,
    base_layers: Vec<(String, u64)>,
}

async fn run(opts: &Options, output: Option<&ImageRef>, reporter: Arc<dyn Reporter>) -> Result<Report> {
    let registries: Vec<&str> = [Some(&opts.base), output].into_iter().flatten().filter_map(ImageRef::registry).collect();
    let regs = Arc::new(Registries::new(&registries, &opts.insecure_registries));
    let counters = Arc::new(Counters::default());
    let work = tempfile::Builder::new().prefix("erdma-build-").tempdir().map_err(Error::io("creating work directory", std::env::temp_dir()))?;

    reporter.step(&format!("reading {}", opts.base));
    let src = Source::open(&opts.base, &regs).await?;
    let images = src.images(&opts.platform).await?;

    // Open the output before any heavy work so an unwritable destination fails fast.
    let sink = match output {
        Some(out) => {
            let sink = Sink::open(out, &regs, reporter.clone(), counters.clone()).await?;
            if images.len() > 1 && !sink.supports_index() {
                return Err(Error::Unsupported(format!("{out} holds one image; --platform all needs docker:// or oci: or oci-archive: output")));
            }
            Some(sink)
        }
        None => None,
    };

    let cache = LayerCache::new(work.path());
    let mut prepared = Vec::new();
    // One layer per recipe and architecture (platforms of one architecture share it).
    let mut layers_by_recipe: HashMap<(String, String), RecipeLayer> = HashMap::new();
    for (i, img) in images.iter().enumerate() {
        let files = ImageFiles::new(&src, img, &cache, &reporter, &counters);
        let (recipe, os_release) = choose_recipe(opts, &src, &files)?;
        for name in opts.repo_keyrings.keys() {
            if name != "base" && !recipe.repositories.iter().any(|r| &r.name == name) {
                let names: Vec<&str> = std::iter::once("base").chain(recipe.repositories.iter().filter(|r| !r.from_base).map(|r| r.name.as_str())).collect();
                return Err(Error::Unsupported(format!("--keyring {name}=…: recipe {} has no repository `{name}` (it has {})", recipe.name, names.join(", "))));
            }
        }
        let arch = debian_arch(img);
        let recipe = recipe.for_build(opts.nccl.is_some(), &arch);
        let key = (recipe.name.clone(), arch.clone());
        if !layers_by_recipe.contains_key(&key) {
            let env = crate::inspect::env_of(&img.config);
            let mut c = recipe_contents(&recipe, opts, &files, &arch, &env, output.is_some(), reporter.as_ref()).await?;
            let path = work.path().join(format!("layer-{i}"));
            c.info = Some(c.layer.write_layer(&path, opts.compression, opts.epoch)?);
            c.path = path;
            layers_by_recipe.insert(key.clone(), c);
        }
        let c = &layers_by_recipe[&key];
        prepared.push(prepare(opts, &src, img, recipe, os_release, c)?);
    }

    let top = top_object(&prepared, images.len() > 1 || src.is_multi_platform() && opts.platform == PlatformChoice::All);
    let digest = top.as_ref().map(|t| t.digest.clone());

    if let Some(sink) = sink {
        for p in prepared.iter_mut() {
            reporter.step("writing layers");
            let reuses: Vec<Result<Reuse>> = futures_util::stream::iter(p.base_layers.iter().map(|(d, s)| sink.put_base_blob(&src, d, *s)))
                .buffered(3)
                .collect()
                .await;
            for (bl, reuse) in p.report.base_layers.iter_mut().zip(reuses) {
                bl.reuse = Some(reuse?);
            }
            let top = top.as_ref().expect("a build knows its layers");
            let layer = p.report.layer.as_ref().expect("a build knows its layers");
            sink.put_file(&p.layer_path, &layer.digest, layer.size).await?;
            sink.put_bytes(&p.config_raw, p.report.config_digest.as_deref().expect("known")).await?;
            if top.media_type == INDEX_TYPE {
                sink.put_child_manifest(&p.manifest_raw, p.report.manifest_digest.as_deref().expect("known"), MANIFEST_TYPE).await?;
            }
        }
        reporter.step(&format!("committing {}", output.expect("sink implies output")));
        sink.commit(top.as_ref().expect("a build knows its layers")).await?;
    }

    Ok(Report {
        base: opts.base.to_string(),
        base_digest: src.digest().to_string(),
        profile: opts.profile,
        output: output.map(ToString::to_string),
        digest,
        images: prepared.into_iter().map(|p| p.report).collect(),
        bytes_downloaded: counters.get(Transfer::Download),
        bytes_uploaded: counters.get(Transfer::Upload),
    })
}

/// The object the output name points at: the manifest, or an index over all of them.
/// `None` for a plan that did not download its packages.
fn top_object(prepared: &[Prepared], multi: bool) -> Option<Top> {
    if prepared.iter().any(|p| p.report.manifest_digest.is_none()) {
        return None;
    }
    if !multi {
        let p = &prepared[0];
        return Some(Top { digest: p.report.manifest_digest.clone()?, media_type: MANIFEST_TYPE.into(), raw: p.manifest_raw.clone() });
    }
    let manifests: Vec<Value> = prepared
        .iter()
        .map(|p| {
            let mut d = json!({"mediaType": MANIFEST_TYPE, "digest": p.report.manifest_digest, "size": p.manifest_raw.len()});
            if let Some(pl) = &p.platform_json {
                d["platform"] = pl.clone();
            }
            d
        })
        .collect();
    let raw = serde_json::to_vec(&json!({"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": manifests})).expect("json");
    let digest = crate::blob::sha256_digest(&raw);
    Some(Top { digest, media_type: INDEX_TYPE.into(), raw })
}

/// Source layers fetched for reading files, kept for the build's duration.
pub struct LayerCache {
    dir: PathBuf,
    files: Mutex<HashMap<String, PathBuf>>,
}

impl LayerCache {
    pub(crate) fn new(dir: &Path) -> LayerCache {
        LayerCache { dir: dir.to_path_buf(), files: Mutex::new(HashMap::new()) }
    }

    async fn path(&self, src: &Source, digest: &str, size: u64, reporter: &Arc<dyn Reporter>, counters: &Counters) -> Result<PathBuf> {
        if let Some(p) = self.files.lock().expect("poisoned").get(digest) {
            return Ok(p.clone());
        }
        let path = self.dir.join(crate::blob::digest_hex(digest)?);
        let id = format!("↓{}", &digest[7..19]);
        crate::sink::with_restarts(digest, || async {
            reporter.transfer_start(&id, Transfer::Download, Some(size));
            let mut stream = src.blob_stream(digest, size).await?;
            let mut f = tokio::fs::File::create(&path).await.map_err(Error::io("writing", &path))?;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| crate::source::stream_error(e, src.registry_ref().expect("remote")))?;
                counters.add(Transfer::Download, chunk.len() as u64);
                reporter.transfer_progress(&id, chunk.len() as u64);
                tokio::io::AsyncWriteExt::write_all(&mut f, &chunk).await.map_err(Error::io("writing", &path))?;
            }
            // tokio's File finishes writes in the background: flush before anyone reads it.
            tokio::io::AsyncWriteExt::flush(&mut f).await.map_err(Error::io("writing", &path))?;
            reporter.transfer_done(&id);
            Ok(())
        })
        .await?;
        self.files.lock().expect("poisoned").insert(digest.to_string(), path.clone());
        Ok(path)
    }
}

/// Files of one source image as a container would see them (topmost layer wins, whiteouts
/// honoured, symlinks resolved inside the image). Layers are read once each, top down, and
/// only as far down as a question needs.
pub struct ImageFiles<'a> {
    src: &'a Source,
    layers: Vec<(String, u64)>,
    cache: &'a LayerCache,
    reporter: &'a Arc<dyn Reporter>,
    counters: &'a Counters,
    handle: tokio::runtime::Handle,
    snapshots: Vec<std::sync::OnceLock<Snapshot>>,
}

impl<'a> ImageFiles<'a> {
    pub(crate) fn new(src: &'a Source, img: &SourceImage, cache: &'a LayerCache, reporter: &'a Arc<dyn Reporter>, counters: &'a Counters) -> Self {
        let layers: Vec<(String, u64)> = img.layers.iter().rev().map(|(d, s, _)| (d.clone(), *s)).collect();
        let snapshots = layers.iter().map(|_| std::sync::OnceLock::new()).collect();
        ImageFiles { src, layers, cache, reporter, counters, handle: tokio::runtime::Handle::current(), snapshots }
    }

    fn open(&self, i: usize) -> Result<Box<dyn BufRead>> {
        let (digest, size) = &self.layers[i];
        if self.src.is_remote() {
            // Registry blobs were verified while downloading.
            let p = tokio::task::block_in_place(|| self.handle.block_on(self.cache.path(self.src, digest, *size, self.reporter, self.counters)))?;
            let f = std::fs::File::open(&p).map_err(Error::io("reading", &p))?;
            Ok(Box::new(std::io::BufReader::new(f)))
        } else {
            Ok(Box::new(self.src.blob_reader(digest)?))
        }
    }

    fn snapshot(&self, i: usize) -> Result<&Snapshot> {
        if let Some(s) = self.snapshots[i].get() {
            return Ok(s);
        }
        // Snapshots are cached by the layer's digest (content-addressed, so a cached one is
        // the same answer): a rebuild on the same base downloads no base layer at all.
        let cached = crate::blob::digest_hex(&self.layers[i].0).ok().map(|h| cache_dir().join("layers").join(format!("{h}.snapshot.json")));
        if let Some(snap) = cached.as_ref().and_then(|p| std::fs::read(p).ok()).and_then(|b| serde_json::from_slice::<Snapshot>(&b).ok()) {
            return Ok(self.snapshots[i].get_or_init(|| snap));
        }
        let snap = tokio::task::block_in_place(|| Snapshot::read(&mut *self.open(i)?))?;
        if let Some(p) = cached {
            if let (Some(dir), Ok(json)) = (p.parent(), serde_json::to_vec(&snap)) {
                let _ = std::fs::create_dir_all(dir);
                if let Ok(tmp) = tempfile::NamedTempFile::new_in(dir) {
                    if std::fs::write(tmp.path(), json).is_ok() {
                        let _ = tmp.persist(&p);
                    }
                }
            }
        }
        Ok(self.snapshots[i].get_or_init(|| snap))
    }

    fn entry(&self, path: &str) -> Result<Option<SnapEntry>> {
        Ok(crate::rootfs::lookup((0..self.layers.len()).map(|i| self.snapshot(i)), path)?.cloned())
    }

    /// `path` with every symlink in it resolved inside the image (the last one too when `last`).
    pub fn real_path(&self, path: &str, last: bool) -> Result<Option<String>> {
        crate::rootfs::resolve_in_image(path, last, &mut |p| self.entry(p))
    }

    /// The image's os-release(5): `/etc/os-release`, else `/usr/lib/os-release`.
    pub fn os_release(&self) -> Result<Option<OsRelease>> {
        let text = match self.read("etc/os-release", 64 << 10)? {
            Some(t) => Some(t),
            None => self.read("usr/lib/os-release", 64 << 10)?,
        };
        Ok(text.map(|t| OsRelease::parse(&String::from_utf8_lossy(&t))))
    }

    /// What the image has at `path`, symlinks followed.
    pub fn kind(&self, path: &str) -> Result<Option<SnapEntry>> {
        match self.real_path(path, true)? {
            Some(real) => self.entry(&real),
            None => Ok(None),
        }
    }

    /// Streams the file at `path` through `content` (for files too big to hold).
    pub fn scan(&self, path: &str, content: &mut crate::rootfs::ContentFn<'_>) -> Result<Option<Vec<u8>>> {
        let Some(real) = self.real_path(path, true)? else { return Ok(None) };
        match self.entry(&real)? {
            Some(SnapEntry::File(_)) => tokio::task::block_in_place(|| crate::rootfs::read_file_with(self.layers.len(), &mut |i| self.open(i), &real, content)),
            _ => Ok(None),
        }
    }

    pub fn read(&self, path: &str, max: u64) -> Result<Option<Vec<u8>>> {
        let Some(real) = self.real_path(path, true)? else { return Ok(None) };
        match self.entry(&real)? {
            Some(SnapEntry::File(Some(data))) if data.len() as u64 <= max => Ok(Some(data)),
            // Content the snapshot did not keep: one streaming pass for it.
            Some(SnapEntry::File(_)) => tokio::task::block_in_place(|| crate::rootfs::read_file(self.layers.len(), &mut |i| self.open(i), &real, max)),
            _ => Ok(None),
        }
    }

    /// Files and symlinks in `dir`.
    pub fn list(&self, dir: &str) -> Result<Vec<String>> {
        self.list_entries(dir, false)
    }

    /// Everything in `dir`, directories too.
    pub fn list_all(&self, dir: &str) -> Result<Vec<String>> {
        self.list_entries(dir, true)
    }

    fn list_entries(&self, dir: &str, dirs: bool) -> Result<Vec<String>> {
        let Some(real) = self.real_path(dir, true)? else { return Ok(Vec::new()) };
        let mut seen: BTreeMap<String, bool> = BTreeMap::new();
        for i in 0..self.layers.len() {
            let (children, hidden) = self.snapshot(i)?.children(&real, dirs);
            for (name, visible) in children {
                seen.entry(name).or_insert(visible);
            }
            if hidden {
                break;
            }
        }
        Ok(seen.into_iter().filter(|(_, v)| *v).map(|(n, _)| n).collect())
    }
}

fn choose_recipe(opts: &Options, src: &Source, files: &ImageFiles) -> Result<(Recipe, Option<OsRelease>)> {
    let os_release = || -> Result<OsRelease> {
        files.reporter.step("detecting the distribution");
        files.os_release()?.ok_or_else(|| Error::NoOsRelease { reference: src.reference.to_string() })
    };
    let (recipe, os) = match &opts.recipe {
        Some(name) => {
            let recipe = Recipe::load(name)?;
            if recipe.is_generic() {
                // Named by hand: the release still fills in the generic recipe.
                let os = os_release()?;
                (recipe.for_image(&os)?, Some(os))
            } else {
                (recipe, None)
            }
        }
        None => {
            let os = os_release()?;
            (Recipe::for_os(&os)?, Some(os))
        }
    };
    if let Some(why) = &recipe.unsupported {
        return Err(Error::DistroRefused { found: recipe.distro.pretty.clone(), reason: why.clone() });
    }
    if recipe.distro.backend != Backend::Apt {
        return Err(Error::Unsupported(format!("recipe {}: the {:?} backend is not implemented yet", recipe.name, recipe.distro.backend)));
    }
    Ok((recipe, os))
}

/// What the recipe puts in the image, before it is written as a layer.
#[derive(Clone)]
struct RecipeLayer {
    layer: LayerContents,
    added: Vec<String>,
    removed: Vec<String>,
    packages: Option<PackagesReport>,
    nccl: Option<NcclSummary>,
    warnings: Vec<String>,
    keys: Vec<crate::keys::Trusted>,
    /// False for a plan whose packages were resolved but not downloaded.
    complete: bool,
    path: PathBuf,
    info: Option<LayerInfo>,
}

/// Debian's name for the image's architecture.
pub(crate) fn debian_arch(img: &SourceImage) -> String {
    let arch = img.config.get("architecture").and_then(Value::as_str).unwrap_or("amd64");
    let variant = img.config.get("variant").and_then(Value::as_str);
    match (arch, variant) {
        ("arm", Some("v5")) => "armel",
        ("arm", _) => "armhf",
        ("386", _) => "i386",
        ("ppc64le", _) => "ppc64el",
        (a, _) => a,
    }
    .to_string()
}

fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("erdma-build")
}

/// The files the recipe puts in the image: apt sources and keys for its repositories, the
/// packages it installs (with the dpkg database), plain files, and whiteouts for what it removes.
#[allow(clippy::too_many_arguments)]
async fn recipe_contents(recipe: &Recipe, opts: &Options, base: &ImageFiles<'_>, arch: &str, env: &[(String, String)], build: bool, reporter: &dyn Reporter) -> Result<RecipeLayer> {
    let mut layer = LayerContents::new();
    let http = crate::http::Client::new(opts.timeouts).map_err(|e| Error::Unsupported(e.to_string()))?;
    let mut keys = BTreeMap::new();
    let mut trusted = Vec::new();
    let mut warnings = Vec::new();
    for repo in recipe.repositories.iter().filter(|r| !r.from_base) {
        let keyring = opts.repo_keyrings.get(&repo.name).or(opts.keyring.as_ref());
        let (binary, t) = repo_key(&http, recipe, repo, keyring.map(PathBuf::as_path)).await?;
        if t.trust == "first-use" {
            warnings.push(format!(
                "repository `{}`: trusted key {} from {} on first use (the recipe pins no fingerprint); check it, then pin it with --keyring {}=FILE",
                t.repository,
                t.fingerprints.join(", "),
                t.source,
                t.repository
            ));
        }
        for d in &t.dropped {
            warnings.push(format!("repository `{}`: {} also holds key {d}, which the recipe does not pin: dropped", t.repository, t.source));
        }
        keys.insert(repo.name.clone(), binary);
        trusted.push(t);
    }
    let mut packages = None;
    let mut complete = true;
    let mut removed: Vec<String> = Vec::new();
    let mut used_urls = BTreeMap::new();
    let nccl = match &opts.nccl {
        Some(want) => Some(nccl_plan(want, opts, base, arch, env, reporter, &mut warnings)?),
        None => None,
    };
    if (opts.packages && !recipe.packages.install.is_empty()) || nccl.is_some() || !opts.install.is_empty() || !opts.local_packages.is_empty() {
        // The recipe's own repositories have their keys in `keys` already.
        let base_keyring = match opts.repo_keyrings.get("base").or(opts.keyring.as_ref()) {
            Some(p) => Some(crate::keys::dearmor(&std::fs::read(p).map_err(Error::io("reading keyring", p))?)?),
            None => None,
        };
        let inputs = AptInputs {
            http: &http,
            recipe,
            arch,
            mirrors: &opts.mirrors,
            repo_urls: &opts.repo_urls,
            repo_keys: &keys,
            base_keyring,
            recipe_packages: opts.packages,
            extra: &opts.install,
            local: &opts.local_packages,
            nccl: nccl.as_ref().map(|(req, _)| req.clone()),
            cache_dir: cache_dir(),
        };
        let (res, mut report, status) = apt::resolve(&inputs, base, reporter).await.map_err(|e| signed_by_dropped_key(e, &trusted))?;
        if build {
            let debs = apt::fetch_debs(&http, &res.install, &inputs.cache_dir, &mut report, reporter).await?;
            removed = apt::unpack(&res, &debs, &status, base, &mut layer)?;
            // The whole point: an image whose libibverbs has no erdma provider silently falls
            // back to TCP. Refuse it (rdma-core gained the provider in v43).
            // (`--no-packages --install X` asks for no eRDMA packages: nothing to refuse.)
            let has_provider = !(opts.packages || nccl.is_some())
                || layer.files().any(|(p, _)| p == "etc/libibverbs.d/erdma.driver")
                || base.read("etc/libibverbs.d/erdma.driver", 4096)?.is_some();
            if !has_provider {
                // Name the rdma-core that came out: what was installed, else what the base kept.
                let found = report
                    .install
                    .iter()
                    .map(|p| (p.name.as_str(), p.version.as_str(), p.origin.as_str()))
                    .chain(report.kept.iter().map(|p| (p.name.as_str(), p.version.as_str(), "the base")))
                    .find(|(n, _, _)| ["ibverbs-providers", "libibverbs1"].contains(n))
                    .map(|(n, v, o)| format!("rdma-core {v} ({n} from {o})"))
                    .unwrap_or_else(|| "the rdma-core installed".into());
                return Err(Error::Unsupported(format!(
                    "{found} has no erdma provider (/etc/libibverbs.d/erdma.driver is missing; rdma-core gained it in 43.0), so recipe {} cannot give this image eRDMA; hint: use a repository with eRDMA builds (--repo, --mirror) or another base",
                    recipe.name
                )));
            }
        } else {
            complete = false;
        }
        used_urls = report.repositories.clone();
        packages = Some(report);
    }
    // Only an NCCL repository needs the base's sources read (proving a file absent reads
    // every layer, and a build without --nccl reads none below the one with os-release).
    let base_uris: Vec<String> = if recipe.repositories.iter().any(|r| r.nccl) {
        apt::base_sources(base)?.into_iter().filter(|e| e.types.iter().any(|t| t == "deb")).flat_map(|e| e.uris).collect()
    } else {
        Vec::new()
    };
    for repo in recipe.repositories.iter().filter(|r| !r.from_base) {
        let url = used_urls.get(&repo.name).or_else(|| opts.repo_urls.get(&repo.name)).or(repo.urls.first()).expect("validated: urls or from_base");
        // NVIDIA's CUDA images already list their repository: a second entry for it makes
        // apt warn about every index being configured twice.
        if repo.nccl && base_uris.iter().any(|u| u.trim_end_matches('/') == url.trim_end_matches('/')) {
            continue;
        }
        let suite = repo.suite.as_deref().unwrap_or("/");
        let line = if repo.components.is_empty() {
            format!("deb {} {suite}\n", url.trim_end_matches('/').to_string() + if suite == "/" { "/" } else { "" })
        } else {
            format!("deb {} {suite} {}\n", url.trim_end_matches('/'), repo.components.join(" "))
        };
        layer.add_file(&format!("etc/apt/sources.list.d/{}.list", repo.name), line.into_bytes(), 0o644)?;
        // Dearmoured into trusted.gpg.d as the eRDMA manual does; apt >= 1.4 reads it there.
        layer.add_file(&format!("etc/apt/trusted.gpg.d/{}.gpg", repo.name), keys[&repo.name].clone(), 0o644)?;
    }
    for f in &recipe.files {
        layer.add_file(&f.path, f.content.clone().into_bytes(), f.mode)?;
    }
    let whiteouts: Vec<String> = recipe.packages.remove_files.iter().filter_map(|p| crate::layer::normalize(p)).collect();
    for p in &whiteouts {
        layer.add_whiteout(p)?;
        removed.push(format!("/{p}"));
    }
    let added = layer
        .files()
        .filter(|(_, e)| e.kind != crate::layer::EntryKind::Whiteout)
        .map(|(p, _)| format!("/{p}"))
        .collect();
    removed.sort();
    removed.dedup();
    let nccl = nccl.map(|(_, mut summary)| {
        summary.libnccl2 = packages.as_ref().and_then(|p| p.nccl.clone()).unwrap_or_default();
        summary
    });
    Ok(RecipeLayer { layer, added, removed, packages, nccl, warnings, keys: trusted, complete, path: PathBuf::new(), info: None })
}

/// A repository whose signature names a key the pin dropped from its key download: say so,
/// rather than only "no valid signature".
fn signed_by_dropped_key(e: Error, trusted: &[crate::keys::Trusted]) -> Error {
    let Error::Repo(repo_err @ crate::packages::apt::repo::RepoError::BadSignature { .. }) = &e else { return e };
    let text = {
        let mut t = repo_err.to_string();
        let mut cause = std::error::Error::source(repo_err);
        while let Some(c) = cause {
            t.push_str(&c.to_string());
            cause = c.source();
        }
        t
    };
    for t in trusted {
        // A signature names its issuer by fingerprint or key ID (v4: the last 16 digits, v6: the first 16).
        if let Some(d) = t.dropped.iter().find(|d| text.contains(d.as_str()) || text.contains(&d[d.len() - 16..]) || text.contains(&d[..16])) {
            return Error::Unsupported(format!(
                "repository `{}` is signed by key {d}, which {} holds beside the pinned key {} but the recipe does not pin: refusing it ({repo_err})",
                t.repository,
                t.source,
                t.fingerprints.join(", ")
            ));
        }
    }
    e
}

/// Checks what `--nccl` needs of the base and finds its CUDA; warns about a pip NCCL older
/// than eRDMA needs that PyTorch would load instead of the one we add.
fn nccl_plan(
    want: &Want,
    opts: &Options,
    base: &ImageFiles<'_>,
    arch: &str,
    env: &[(String, String)],
    reporter: &dyn Reporter,
    warnings: &mut Vec<String>,
) -> Result<(NcclRequest, NcclSummary)> {
    reporter.step("looking for CUDA, NCCL and PyTorch in the base");
    let facts = crate::inspect::facts(base, arch, env)?;
    let cuda = match opts.cuda {
        Some(c) => CudaFact { version: c, source: "--cuda".into() },
        None => facts.cuda.clone().ok_or_else(|| {
            Error::Unsupported(
                "the base has no CUDA (no CUDA_VERSION in its config, no /usr/local/cuda/version.json), and NCCL builds are per CUDA major version; hint: pass --cuda X.Y".into(),
            )
        })?,
    };
    if !opts.packages && !facts.rdma.has_erdma() {
        return Err(Error::Unsupported(
            "--nccl with --no-packages needs a base whose libibverbs has the erdma provider: NCCL opens libibverbs with dlopen and, without it, silently falls back to TCP; hint: drop --no-packages to add the eRDMA packages".into(),
        ));
    }
    if let (Some(t), Some(p)) = (&facts.torch, facts.python_nccl.iter().find(|p| !p.version.supports_erdma())) {
        if t.loads == Some(crate::inspect::Loads::Python) {
            let cu = cuda.version.major;
            warnings.push(format!(
                "PyTorch in {} loads its own NCCL {} ({}), not the system NCCL added here, and NCCL {} is older than 2.19, which eRDMA needs; fix: pip install -U nvidia-nccl-cu{cu}",
                t.path, p.version, p.path, p.version
            ));
        }
    }
    let req = NcclRequest { want: want.clone(), cuda: cuda.version, dev: opts.nccl_dev };
    Ok((req, NcclSummary { libnccl2: String::new(), cuda, python_nccl: facts.python_nccl, torch: facts.torch }))
}

impl apt::BaseFiles for ImageFiles<'_> {
    fn read(&self, path: &str, max: u64) -> Result<Option<Vec<u8>>> {
        ImageFiles::read(self, path, max)
    }
    fn list(&self, dir: &str) -> Result<Vec<String>> {
        ImageFiles::list(self, dir)
    }
    fn real_path(&self, path: &str) -> Result<Option<String>> {
        ImageFiles::real_path(self, path, false)
    }
    fn kind(&self, path: &str) -> Result<Option<SnapEntry>> {
        self.entry(path)
    }
}

/// The keys repository `repo` is verified with and that go into the image: a `--keyring` file
/// the user names (their own trust decision: a mirror re-signed with a site key), else the
/// download from `key_url`, of which only the key the recipe pins is kept (any other key in
/// the download is dropped), or every key, trusted on first use, when the recipe pins none.
async fn repo_key(http: &crate::http::Client, recipe: &Recipe, repo: &crate::recipe::Repository, keyring: Option<&Path>) -> Result<(Vec<u8>, crate::keys::Trusted)> {
    let what = format!("the key of repository `{}` (recipe {})", repo.name, recipe.name);
    let (raw, source) = match (keyring, &repo.key_url) {
        (Some(path), _) => (std::fs::read(path).map_err(Error::io("reading keyring", path))?, path.display().to_string()),
        (None, Some(url)) => (
            fetch_key(http, url).await.map_err(|reason| Error::Unsupported(format!("fetching {what} from {url} failed: {reason}; hint: pass --keyring {}=FILE", repo.name)))?,
            url.clone(),
        ),
        (None, None) => {
            return Err(Error::RecipeInvalid { name: recipe.name.clone(), reason: format!("repository `{}` has no key_url; pass --keyring FILE", repo.name) })
        }
    };
    let pin = repo.fingerprint.as_deref().filter(|_| keyring.is_none());
    let (keys, dropped) = crate::keys::select(&raw, pin, &format!("{what} from {source}"))?;
    let trust = match (keyring, pin) {
        (Some(_), _) => "keyring",
        (None, Some(_)) => "pinned",
        (None, None) => "first-use",
    };
    let trusted = crate::keys::Trusted { repository: repo.name.clone(), fingerprints: keys.iter().map(crate::keys::fingerprint).collect(), source, trust, dropped };
    Ok((crate::keys::to_binary(&keys)?, trusted))
}

/// A key file is a few KiB; NVIDIA's and Alibaba's are under 4 KiB.
const MAX_KEY: u64 = 1 << 20;

async fn fetch_key(http: &crate::http::Client, url: &str) -> std::result::Result<Vec<u8>, String> {
    match http.get(url, MAX_KEY).await {
        Ok(Some(body)) if body.len() as u64 > MAX_KEY => Err(format!("larger than {MAX_KEY} bytes")),
        Ok(Some(body)) => Ok(body),
        Ok(None) => Err("not found (404)".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Maps Docker schema 2 media types to their OCI equivalents: the bytes are the same, and an
/// OCI manifest may not mix the two (and `tar+zstd` has no Docker type).
fn oci_layer_type(mt: &str) -> &str {
    match mt {
        "application/vnd.docker.image.rootfs.diff.tar.gzip" => crate::layer::MEDIA_TYPE_GZIP,
        "application/vnd.docker.image.rootfs.diff.tar" => crate::layer::MEDIA_TYPE_TAR,
        "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip" => "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
        other => other,
    }
}

fn prepare(opts: &Options, src: &Source, img: &SourceImage, recipe: Recipe, os_release: Option<OsRelease>, c: &RecipeLayer) -> Result<Prepared> {
    let info = c.info.clone().expect("layer written before prepare");
    let files_added = c.added.clone();
    let files_removed = c.removed.clone();
    let base_name = src.reference.to_string();
    let base_digest = src.digest().to_string();
    let mut labels: BTreeMap<String, String> = [
        ("org.opencontainers.image.base.name".to_string(), base_name.clone()),
        ("org.opencontainers.image.base.digest".to_string(), base_digest.clone()),
    ]
    .into();
    // Whoever runs the image can tell that something in it was never signed.
    let unsigned: Vec<String> = c.packages.iter().flat_map(|p| &p.unsigned).map(|d| format!("{}={} sha256:{} ({})", d.name, d.version, d.sha256, d.source)).collect();
    if !unsigned.is_empty() {
        labels.insert(UNSIGNED_LABEL.to_string(), unsigned.join(", "));
    }
    let edit = ConfigEdit {
        presets: if opts.env_presets { crate::config::presets(&recipe.env, opts.profile) } else { Default::default() },
        overrides: opts.env.clone(),
        labels,
        created: rfc3339(opts.epoch),
        history_comment: format!("eRDMA layer from recipe {}", recipe.name),
    };
    let env = edit.env_changes(&img.config);
    let created_by = format!("erdma-build build --recipe {} (added {})", recipe.name, files_added.join(" "));
    let config = edit.apply(&img.config, &info.diff_id, &created_by)?;
    let config_raw = serde_json::to_vec(&config).expect("json");
    let config_digest = crate::blob::sha256_digest(&config_raw);

    let mut layers: Vec<Value> = img
        .layers
        .iter()
        .zip(img.manifest["layers"].as_array().into_iter().flatten())
        .map(|((d, s, mt), orig)| {
            let mut l = json!({"mediaType": oci_layer_type(mt), "digest": d, "size": s});
            if let Some(a) = orig.get("annotations") {
                l["annotations"] = a.clone();
            }
            l
        })
        .collect();
    layers.push(json!({"mediaType": info.media_type, "digest": info.digest, "size": info.size}));
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": config_raw.len()},
        "layers": layers,
        "annotations": {
            "org.opencontainers.image.base.name": base_name,
            "org.opencontainers.image.base.digest": base_digest,
        },
    });
    let manifest_raw = serde_json::to_vec(&manifest).expect("json");
    let manifest_digest = crate::blob::sha256_digest(&manifest_raw);
    let platform_json = img.platform.as_ref().map(|p| {
        let mut parts = p.0.splitn(3, '/');
        let mut v = json!({"os": parts.next(), "architecture": parts.next()});
        if let Some(var) = parts.next() {
            v["variant"] = json!(var);
        }
        v
    });
    Ok(Prepared {
        report: ImageReport {
            platform: img.platform.as_ref().map(|p| p.0.clone()),
            distro: recipe.distro.pretty.clone(),
            recipe: recipe.name,
            os_release,
            files_added,
            files_removed,
            env,
            packages: c.packages.clone(),
            nccl: c.nccl.clone(),
            warnings: c.warnings.clone(),
            keys: c.keys.clone(),
            base_layers: img.layers.iter().map(|(d, s, _)| crate::build::BaseLayer { digest: d.clone(), size: *s, reuse: None }).collect(),
            layer: c.complete.then_some(info),
            config_digest: c.complete.then_some(config_digest),
            manifest_digest: c.complete.then_some(manifest_digest),
        },
        layer_path: c.path.clone(),
        config_raw,
        manifest_raw,
        platform_json,
        base_layers: img.layers.iter().map(|(d, s, _)| (d.clone(), *s)).collect(),
    })
}
