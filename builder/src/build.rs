//! `plan` and `build`: read the base, choose the recipe, write one layer, merge the config,
//! and write the new image.
use std::collections::HashMap;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::StreamExt;
use serde::Serialize;
use serde_json::{json, Value};

use crate::distro::OsRelease;
use crate::env_presets::Profile;
use crate::error::{Error, Result};
use crate::inspect::{CudaFact, NcclFact, TorchFact};
use crate::packages::nccl::{Cuda, Want};
use crate::packages::prefetch::FetchAhead;
use crate::packages::{apt, rpm};
use crate::packages::{Inputs, NcclRequest, PackagesReport};
use crate::recipe::Recipe;
use erdma_common::progress::{Counters, Reporter, Transfer};
use erdma_oci::config::{rfc3339, ConfigEdit, EnvChange};
use erdma_oci::files::{cache_dir, debian_arch, ImageFiles, LayerCache};
use erdma_oci::layer::{LayerCompression, LayerContents, LayerInfo};
use erdma_oci::registry::Registries;
use erdma_oci::sink::{Reuse, Sink, Top};
use erdma_oci::source::{PlatformChoice, Source, SourceImage};
use erdma_oci::transport::ImageRef;
use std::collections::BTreeMap;

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
    /// `--insecure-registry`, `--cert-dir`.
    pub registry: erdma_oci::registry::RegistryOptions,
    /// Key files for the recipe's repositories, replacing the download from `key_url`.
    pub keyring: Option<PathBuf>,
    /// mtime of every file and the config's `created`: `SOURCE_DATE_EPOCH` or 0.
    pub epoch: u64,
    /// `--mirror [FROM=]URL`: the archive for recipes that use the base's own repositories.
    pub mirrors: Vec<crate::packages::Mirror>,
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
    pub timeouts: erdma_http::Timeouts,
    /// What a hostile base or repository may cost (`--max-layers`, `--max-inflation`,
    /// `--max-entries`).
    pub limits: erdma_limits::Limits,
    /// `plan --download`: fetch the packages into the cache to read their payloads.
    pub download: bool,
    /// `--skip-scripts` ([`crate::packages::Inputs::skip_scripts`]).
    pub skip_scripts: bool,
    /// Not `--no-sandbox` ([`crate::packages::Inputs::sandbox`]).
    pub sandbox: bool,
    /// `--install-recommends` ([`crate::packages::Inputs::install_recommends`]).
    pub install_recommends: bool,
}

impl Options {
    pub fn epoch_from_env() -> u64 {
        crate::packages::source_date_epoch().unwrap_or(0)
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
    pub keys: Vec<erdma_openpgp::Trusted>,
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
    /// Where the base was read from, when registries.conf sent the pull elsewhere (a mirror, a
    /// location), as `REGISTRY/REPOSITORY[:TAG|@DIGEST]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_read_from: Option<String>,
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
pub async fn build(
    opts: &Options,
    output: &ImageRef,
    reporter: Arc<dyn Reporter>,
) -> Result<Report> {
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

async fn run(
    opts: &Options,
    output: Option<&ImageRef>,
    reporter: Arc<dyn Reporter>,
) -> Result<Report> {
    let regs = Arc::new(Registries::new(&opts.registry));
    let counters = Arc::new(Counters::default());
    let work = tempfile::Builder::new()
        .prefix("erdma-build-")
        .tempdir()
        .map_err(Error::io("creating work directory", std::env::temp_dir()))?;

    reporter.step(&format!("reading {}", opts.base));
    let src = Source::open(&opts.base, &regs, opts.limits).await?;
    let images = src.images(&opts.platform).await?;

    // Open the output before any heavy work so an unwritable destination fails fast.
    let sink = match output {
        Some(out) => {
            let sink =
                Sink::open(out, &regs, reporter.clone(), counters.clone(), opts.limits.inflation)
                    .await?;
            if images.len() > 1 && !sink.supports_index() {
                return Err(Error::OutputHoldsOneImage { output: out.to_string() });
            }
            Some(sink)
        }
        None => None,
    };

    let cache = LayerCache::new(work.path());
    let http = erdma_http::Client::new(opts.timeouts).max_inflation(opts.limits.inflation);
    let building = async {
        let mut prepared = Vec::new();
        // One layer per recipe and architecture (platforms of one architecture share it).
        let mut layers_by_recipe: HashMap<(String, String), RecipeLayer> = HashMap::new();
        // One for the build: a memo of blocks keeps every block of all the layers it wrote.
        let kept_layers = compressed_layers();
        for (i, img) in images.iter().enumerate() {
            // The repositories of the base's apt sources or yum `.repo` files, and the recipe's,
            // start their fetches as its layers stream past (packages::prefetch; not where
            // --mirror stands in for them, or no package is fetched; ERDMA_BUILD_FETCH_AHEAD=0
            // turns it off, for measuring it).
            let arch = debian_arch(img);
            let fetches = (opts.packages || opts.nccl.is_some() || !opts.install.is_empty())
                && std::env::var_os("ERDMA_BUILD_FETCH_AHEAD").is_none_or(|v| v != "0");
            let ahead = (opts.mirrors.is_empty() && fetches).then(|| {
                // The recipe the build will pick, from the os-release as it streams past.
                let (named, nccl, image_arch) =
                    (opts.recipe.clone(), opts.nccl.is_some(), arch.clone());
                let recipe_of = move |os_release: &[u8]| {
                    let os = OsRelease::parse(&String::from_utf8_lossy(os_release));
                    let (recipe, _) = pick_recipe(named.as_deref(), || Ok(os)).ok()?;
                    Some(recipe.for_build(nccl, &image_arch).picked())
                };
                FetchAhead {
                    apt: apt::prefetch::Prefetches::new(http.clone(), &cache_dir(), &arch),
                    rpm: rpm::prefetch::Prefetches::new(
                        http.clone(),
                        &cache_dir(),
                        &arch,
                        opts.repo_urls.clone(),
                        Box::new(recipe_of),
                    ),
                }
            });
            let watch = |path: &str, data: &[u8]| {
                if let Some(a) = &ahead {
                    a.watch(path, data);
                }
            };
            let files = ImageFiles::new(&src, img, &cache, &reporter, &counters).watching(&watch);
            let (recipe, os_release) = choose_recipe(opts, &src, &files)?;
            for name in opts.repo_keyrings.keys() {
                if name != "base" && !recipe.repositories.iter().any(|r| &r.name == name) {
                    let names: Vec<&str> = std::iter::once("base")
                        .chain(
                            recipe
                                .repositories
                                .iter()
                                .filter(|r| !r.from_base)
                                .map(|r| r.name.as_str()),
                        )
                        .collect();
                    return Err(Error::UnknownKeyringRepository {
                        name: name.clone(),
                        recipe: recipe.name.clone(),
                        available: names.join(", "),
                    });
                }
            }
            let recipe = recipe.for_build(opts.nccl.is_some(), &arch);
            let key = (recipe.name.clone(), arch.clone());
            if !layers_by_recipe.contains_key(&key) {
                let env = crate::inspect::env_of(&img.config);
                let mut c = recipe_contents(
                    &recipe,
                    opts,
                    &files,
                    &http,
                    ahead.as_ref(),
                    &arch,
                    &env,
                    output.is_some(),
                    reporter.as_ref(),
                )
                .await?;
                let path = work.path().join(format!("layer-{i}"));
                // Another build of the same recipe on the same base writes the same layer,
                // unless the packages' database records the time (`PackagesReport::dated`).
                let dated = c.packages.as_ref().is_some_and(|p| p.dated);
                c.info = Some(if !dated {
                    c.layer.write_layer_reusing(
                        &path,
                        opts.compression,
                        opts.epoch,
                        &kept_layers,
                    )?
                } else {
                    // No later build writes this layer alike: it is not kept whole for one,
                    // and it is compressed on every core whatever its size, its blocks kept
                    // for a later build whose layer holds the same bytes there.
                    c.layer.write_layer_unalike(
                        &path,
                        opts.compression,
                        opts.epoch,
                        &kept_layers,
                    )?
                });
                c.path = path;
                layers_by_recipe.insert(key.clone(), c);
            }
            let c = &layers_by_recipe[&key];
            prepared.push(prepare(opts, &src, img, recipe, os_release, c)?);
        }
        Ok::<_, Error>(prepared)
    };
    // The base's layers at hand in a local layout go to the output while the build works on
    // the rest (each is checked against its digest on the way: a whole read of the layer);
    // those of a registry wait for the build's own read of them, so as not to download twice.
    // A build that fails drops the sink, and with it what was staged.
    let placing = async {
        let Some(sink) = &sink else { return Ok(HashMap::new()) };
        let mut seen = std::collections::HashSet::new();
        let at_hand: Vec<(&str, u64)> = images
            .iter()
            .flat_map(|img| &img.layers)
            .filter(|(digest, _, _)| src.local_file(digest).is_some() && seen.insert(digest))
            .map(|(digest, size, _)| (digest.as_str(), *size))
            .collect();
        let placed: Vec<erdma_oci::Result<Reuse>> = futures_util::stream::iter(
            at_hand.iter().map(|(d, s)| sink.put_base_blob(&src, d, *s)),
        )
        .buffered(3)
        .collect()
        .await;
        at_hand
            .iter()
            .zip(placed)
            .map(|((d, _), reuse)| Ok((d.to_string(), reuse?)))
            .collect::<Result<HashMap<String, Reuse>>>()
    };
    let (mut prepared, placed) = futures_util::future::try_join(building, placing).await?;

    let top = top_object(
        &prepared,
        images.len() > 1 || src.is_multi_platform() && opts.platform == PlatformChoice::All,
    );
    let digest = top.as_ref().map(|t| t.digest.clone());

    if let Some(sink) = sink {
        for p in prepared.iter_mut() {
            reporter.step("writing layers");
            let reuses: Vec<erdma_oci::Result<Reuse>> =
                futures_util::stream::iter(p.base_layers.iter().map(|(d, s)| async {
                    match placed.get(d) {
                        Some(reuse) => Ok(*reuse),
                        None => sink.put_base_blob(&src, d, *s).await,
                    }
                }))
                .buffered(3)
                .collect()
                .await;
            for (bl, reuse) in p.report.base_layers.iter_mut().zip(reuses) {
                bl.reuse = Some(reuse?);
            }
            let top = top.as_ref().expect("a build knows its layers");
            let layer = p.report.layer.as_ref().expect("a build knows its layers");
            sink.put_file(&p.layer_path, &layer.digest, layer.size).await?;
            sink.put_bytes(&p.config_raw, p.report.config_digest.as_deref().expect("known"))
                .await?;
            if top.media_type == INDEX_TYPE {
                sink.put_child_manifest(
                    &p.manifest_raw,
                    p.report.manifest_digest.as_deref().expect("known"),
                    MANIFEST_TYPE,
                )
                .await?;
            }
        }
        reporter.step(&format!("committing {}", output.expect("sink implies output")));
        sink.commit(top.as_ref().expect("a build knows its layers")).await?;
    }

    Ok(Report {
        base: opts.base.to_string(),
        base_digest: src.digest().to_string(),
        base_read_from: match (&opts.base, src.registry_ref()) {
            (ImageRef::Registry(named), Some(at)) if at.whole() != named.whole() => {
                Some(at.whole())
            }
            _ => None,
        },
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
        return Some(Top {
            digest: p.report.manifest_digest.clone()?,
            media_type: MANIFEST_TYPE.into(),
            raw: p.manifest_raw.clone(),
        });
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
    let raw = serde_json::to_vec(
        &json!({"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": manifests}),
    )
    .expect("json");
    let digest = erdma_oci::blob::sha256_digest(&raw);
    Some(Top { digest, media_type: INDEX_TYPE.into(), raw })
}

fn choose_recipe(
    opts: &Options,
    src: &Source,
    files: &ImageFiles,
) -> Result<(Recipe, Option<OsRelease>)> {
    let os_release = || -> Result<OsRelease> {
        files.reporter.step("detecting the distribution");
        crate::distro::of_image(files)?
            .ok_or_else(|| Error::NoOsRelease { reference: src.reference.to_string() })
    };
    pick_recipe(opts.recipe.as_deref(), os_release)
}

/// The recipe `named` (`--recipe`; a generic one filled in with the release), else the one
/// for the release; `os_release` reads the base's os-release where that is needed.
fn pick_recipe(
    named: Option<&str>,
    os_release: impl FnOnce() -> Result<OsRelease>,
) -> Result<(Recipe, Option<OsRelease>)> {
    let (recipe, os) = match named {
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
        return Err(Error::DistroRefused {
            found: recipe.distro.pretty.clone(),
            reason: why.clone(),
        });
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
    keys: Vec<erdma_openpgp::Trusted>,
    /// False for a plan whose packages were resolved but not downloaded.
    complete: bool,
    path: PathBuf,
    info: Option<LayerInfo>,
}

/// The files the recipe puts in the image: apt sources and keys for its repositories, the
/// packages it installs (with the dpkg database), plain files, and whiteouts for what it removes.
#[allow(clippy::too_many_arguments)]
async fn recipe_contents(
    recipe: &Recipe,
    opts: &Options,
    base: &ImageFiles<'_>,
    http: &erdma_http::Client,
    prefetched: Option<&FetchAhead>,
    arch: &str,
    env: &[(String, String)],
    build: bool,
    reporter: &dyn Reporter,
) -> Result<RecipeLayer> {
    let mut layer = LayerContents::new();
    let mut warnings = Vec::new();
    let (keys, trusted) = repository_keys(http, recipe, opts, &mut warnings).await?;
    let mut packages = None;
    let mut complete = true;
    let mut removed: Vec<String> = Vec::new();
    let mut used_urls = BTreeMap::new();
    let nccl = match &opts.nccl {
        Some(want) => Some(nccl_plan(want, opts, base, arch, env, reporter, &mut warnings)?),
        None => None,
    };
    if (opts.packages && !recipe.packages.install.is_empty())
        || nccl.is_some()
        || !opts.install.is_empty()
        || !opts.local_packages.is_empty()
    {
        let nccl_request = nccl.as_ref().map(|(req, _)| req.clone());
        let inputs = package_inputs(http, recipe, opts, arch, &keys, nccl_request, prefetched)?;
        let (report, gone) = crate::packages::install(
            recipe.distro.backend,
            &inputs,
            base,
            build.then_some(&mut layer),
            reporter,
        )
        .await
        .map_err(|e| signed_by_dropped_key(e, &trusted))?;
        if build {
            removed = gone;
            check_erdma_provider(recipe, opts, nccl.is_some(), &layer, base, &report)?;
        } else {
            complete = false;
        }
        used_urls = report.repositories.clone();
        warnings.extend(report.warnings.iter().cloned());
        packages = Some(report);
    }
    crate::packages::add_repositories(
        recipe.distro.backend,
        &recipe.target(),
        &repository_urls(recipe, opts, &used_urls),
        &keys,
        nccl.as_ref().map(|(req, _)| req.cuda),
        base,
        &mut layer,
    )?;
    add_recipe_files(recipe, &mut layer, &mut removed)?;
    let added = layer
        .files()
        .filter(|(_, e)| e.kind != erdma_oci::layer::EntryKind::Whiteout)
        .map(|(p, _)| format!("/{p}"))
        .collect();
    removed.sort();
    removed.dedup();
    let nccl = nccl.map(|(_, mut summary)| {
        summary.libnccl2 = packages.as_ref().and_then(|p| p.nccl.clone()).unwrap_or_default();
        summary
    });
    Ok(RecipeLayer {
        layer,
        added,
        removed,
        packages,
        nccl,
        warnings,
        keys: trusted,
        complete,
        path: PathBuf::new(),
        info: None,
    })
}

/// The key of each of the recipe's own repositories (not the base's), by repository name, and
/// how each came to be trusted; a key trusted on first use, or one dropped from a download,
/// adds a warning.
async fn repository_keys(
    http: &erdma_http::Client,
    recipe: &Recipe,
    opts: &Options,
    warnings: &mut Vec<String>,
) -> Result<(BTreeMap<String, Vec<u8>>, Vec<erdma_openpgp::Trusted>)> {
    let mut keys = BTreeMap::new();
    let mut trusted = Vec::new();
    for repo in recipe.repositories.iter().filter(|r| !r.from_base) {
        let keyring = opts.repo_keyrings.get(&repo.name).or(opts.keyring.as_ref());
        let (binary, t) = repo_key(http, recipe, repo, keyring.map(PathBuf::as_path)).await?;
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
            warnings.push(format!(
                "repository `{}`: {} also holds key {d}, which the recipe does not pin: dropped",
                t.repository, t.source
            ));
        }
        keys.insert(repo.name.clone(), binary);
        trusted.push(t);
    }
    Ok((keys, trusted))
}

/// What the package backend is given: the options, the recipe's repository `keys`, and the
/// base's keyring from `--keyring base=FILE` (or `--keyring FILE`), read here.
fn package_inputs<'a>(
    http: &'a erdma_http::Client,
    recipe: &'a Recipe,
    opts: &'a Options,
    arch: &'a str,
    keys: &'a BTreeMap<String, Vec<u8>>,
    nccl: Option<NcclRequest>,
    prefetched: Option<&'a FetchAhead>,
) -> Result<Inputs<'a>> {
    // The recipe's own repositories have their keys in `keys` already.
    let base_keyring = match opts.repo_keyrings.get("base").or(opts.keyring.as_ref()) {
        Some(p) => Some(erdma_openpgp::dearmor(
            &std::fs::read(p).map_err(Error::io("reading keyring", p))?,
        )?),
        None => None,
    };
    Ok(Inputs {
        http,
        target: recipe.target(),
        arch,
        mirrors: &opts.mirrors,
        repo_urls: &opts.repo_urls,
        repo_keys: keys,
        base_keyring,
        recipe_packages: opts.packages,
        extra: &opts.install,
        local: &opts.local_packages,
        nccl,
        cache_dir: cache_dir(),
        download: opts.download,
        skip_scripts: opts.skip_scripts,
        sandbox: opts.sandbox,
        install_recommends: opts.install_recommends,
        prefetched,
    })
}

/// Refuses a build whose image would have no erdma provider for libibverbs, naming the
/// rdma-core that came out of `report`.
fn check_erdma_provider(
    recipe: &Recipe,
    opts: &Options,
    nccl: bool,
    layer: &LayerContents,
    base: &ImageFiles<'_>,
    report: &PackagesReport,
) -> Result<()> {
    // The whole point: an image whose libibverbs has no erdma provider silently falls
    // back to TCP. Refuse it (rdma-core gained the provider in v43).
    // (`--no-packages --install X` asks for no eRDMA packages: nothing to refuse.)
    let has_provider = !(opts.packages || nccl)
        || layer.files().any(|(p, _)| p == "etc/libibverbs.d/erdma.driver")
        || base.read("etc/libibverbs.d/erdma.driver", 4096)?.is_some();
    if has_provider {
        return Ok(());
    }
    // Name the rdma-core that came out: what was installed, else what the base kept.
    let found = report
        .install
        .iter()
        .map(|p| (p.name.as_str(), p.version.as_str(), p.origin.as_str()))
        .chain(report.kept.iter().map(|p| (p.name.as_str(), p.version.as_str(), "the base")))
        .find(|(n, _, _)| ["ibverbs-providers", "libibverbs1", "libibverbs"].contains(n))
        .map(|(n, v, o)| format!("rdma-core {v} ({n} from {o})"))
        .unwrap_or_else(|| "the rdma-core installed".into());
    Err(Error::NoErdmaProvider { found, recipe: recipe.name.clone() })
}

/// The URL of each of the recipe's own repositories: the one the packages came from, else
/// `--repo NAME=URL`, else the recipe's first.
fn repository_urls(
    recipe: &Recipe,
    opts: &Options,
    used_urls: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    recipe
        .repositories
        .iter()
        .filter(|r| !r.from_base)
        .map(|r| {
            (
                r.name.clone(),
                used_urls
                    .get(&r.name)
                    .or_else(|| opts.repo_urls.get(&r.name))
                    .or(r.urls.first())
                    .expect("validated: urls or from_base")
                    .clone(),
            )
        })
        .collect()
}

/// The recipe's plain files, and a whiteout for each file it removes (listed in `removed`).
fn add_recipe_files(
    recipe: &Recipe,
    layer: &mut LayerContents,
    removed: &mut Vec<String>,
) -> Result<()> {
    for f in &recipe.files {
        layer.add_file(&f.path, f.content.clone().into_bytes(), f.mode)?;
    }
    let whiteouts: Vec<String> = recipe
        .packages
        .remove_files
        .iter()
        .filter_map(|p| erdma_oci::layer::normalize(p))
        .collect();
    for p in &whiteouts {
        layer.add_whiteout(p)?;
        removed.push(format!("/{p}"));
    }
    Ok(())
}

/// A repository whose signature names a key the pin dropped from its key download: say so,
/// rather than only "no valid signature".
fn signed_by_dropped_key(e: Error, trusted: &[erdma_openpgp::Trusted]) -> Error {
    use erdma_deb::repo::RepoError;
    use erdma_openpgp::SignatureError;
    let Error::Repo(RepoError::BadSignature {
        source: SignatureError::NoValidSignature { outside, .. },
        ..
    }) = &e
    else {
        return e;
    };
    // A signature names its issuer by fingerprint or key ID (v4: the last 16 digits, v6: the first 16).
    let issued = |d: &str| {
        outside.iter().any(|i| {
            i == d || (i.len() == 16 && (d.ends_with(i.as_str()) || d.starts_with(i.as_str())))
        })
    };
    let Some((t, key)) =
        trusted.iter().find_map(|t| t.dropped.iter().find(|d| issued(d)).map(|d| (t, d.clone())))
    else {
        return e;
    };
    match e {
        Error::Repo(cause) => Error::UnpinnedSigner {
            repository: t.repository.clone(),
            key,
            keyring: t.source.clone(),
            pinned: t.fingerprints.join(", "),
            cause: Box::new(cause),
        },
        e => e,
    }
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
        None => facts.cuda.clone().ok_or(Error::NoCuda)?,
    };
    if !opts.packages && !facts.rdma.has_erdma() {
        return Err(Error::NcclNeedsErdma);
    }
    if let (Some(t), Some(p)) =
        (&facts.torch, facts.python_nccl.iter().find(|p| !p.version.supports_erdma()))
    {
        if t.loads == Some(crate::inspect::Loads::Python) {
            let cu = cuda.version.major;
            warnings.push(format!(
                "PyTorch in {} loads its own NCCL {} ({}), not the system NCCL added here, and NCCL {} is older than 2.19, which eRDMA needs; fix: pip install -U nvidia-nccl-cu{cu}",
                t.path, p.version, p.path, p.version
            ));
        }
    }
    let req = NcclRequest { want: want.clone(), cuda: cuda.version, dev: opts.nccl_dev };
    Ok((
        req,
        NcclSummary {
            libnccl2: String::new(),
            cuda,
            python_nccl: facts.python_nccl,
            torch: facts.torch,
        },
    ))
}

/// The keys repository `repo` is verified with and that go into the image: a `--keyring` file
/// the user names (their own trust decision: a mirror re-signed with a site key), else the
/// download from `key_url`, of which only the key the recipe pins is kept (any other key in
/// the download is dropped), or every key, trusted on first use, when the recipe pins none.
async fn repo_key(
    http: &erdma_http::Client,
    recipe: &Recipe,
    repo: &crate::recipe::Repository,
    keyring: Option<&Path>,
) -> Result<(Vec<u8>, erdma_openpgp::Trusted)> {
    let what = format!("the key of repository `{}` (recipe {})", repo.name, recipe.name);
    let (raw, source) = match (keyring, &repo.key_url) {
        (Some(path), _) => (
            std::fs::read(path).map_err(Error::io("reading keyring", path))?,
            path.display().to_string(),
        ),
        (None, Some(url)) => (
            fetch_key(http, url).await.map_err(|reason| Error::KeyFetch {
                what: what.clone(),
                url: url.clone(),
                reason,
                repository: repo.name.clone(),
            })?,
            url.clone(),
        ),
        (None, None) => {
            return Err(Error::RecipeInvalid {
                name: recipe.name.clone(),
                reason: format!("repository `{}` has no key_url; pass --keyring FILE", repo.name),
            })
        }
    };
    let pin = repo.fingerprint.as_deref().filter(|_| keyring.is_none());
    let (keys, dropped) = erdma_openpgp::select(&raw, pin, &format!("{what} from {source}"))?;
    let trust = match (keyring, pin) {
        (Some(_), _) => "keyring",
        (None, Some(_)) => "pinned",
        (None, None) => "first-use",
    };
    let trusted = erdma_openpgp::Trusted {
        repository: repo.name.clone(),
        fingerprints: keys.iter().map(erdma_openpgp::fingerprint).collect(),
        source,
        trust,
        dropped,
    };
    Ok((erdma_openpgp::to_binary(&keys)?, trusted))
}

/// A key file is a few KiB; NVIDIA's and Alibaba's are under 4 KiB.
const MAX_KEY: u64 = 1 << 20;

async fn fetch_key(
    http: &erdma_http::Client,
    url: &str,
) -> std::result::Result<Vec<u8>, crate::error::Cause> {
    match http.get(url, MAX_KEY).await {
        Ok(Some(body)) => Ok(body),
        Ok(None) => Err("not found (404)".into()),
        Err(e) => Err(e.into()),
    }
}

/// An index entry's `platform` from `os/arch[/variant]`.
pub(crate) fn platform_json(platform: &str) -> Value {
    let mut parts = platform.splitn(3, '/');
    let mut v = json!({"os": parts.next(), "architecture": parts.next()});
    if let Some(var) = parts.next() {
        v["variant"] = json!(var);
    }
    v
}

/// Maps Docker schema 2 media types to their OCI equivalents: the bytes are the same, and an
/// OCI manifest may not mix the two (and `tar+zstd` has no Docker type).
fn oci_layer_type(mt: &str) -> &str {
    match mt {
        "application/vnd.docker.image.rootfs.diff.tar.gzip" => erdma_oci::layer::MEDIA_TYPE_GZIP,
        "application/vnd.docker.image.rootfs.diff.tar" => erdma_oci::layer::MEDIA_TYPE_TAR,
        "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip" => {
            "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
        }
        other => other,
    }
}

fn prepare(
    opts: &Options,
    src: &Source,
    img: &SourceImage,
    recipe: Recipe,
    os_release: Option<OsRelease>,
    c: &RecipeLayer,
) -> Result<Prepared> {
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
    let unsigned: Vec<String> = c
        .packages
        .iter()
        .flat_map(|p| &p.unsigned)
        .map(|d| format!("{}={} sha256:{} ({})", d.name, d.version, d.sha256, d.source))
        .collect();
    if !unsigned.is_empty() {
        labels.insert(UNSIGNED_LABEL.to_string(), unsigned.join(", "));
    }
    let edit = ConfigEdit {
        presets: if opts.env_presets {
            crate::env_presets::presets(&recipe.env, opts.profile)
        } else {
            Default::default()
        },
        overrides: opts.env.clone(),
        labels,
        created: rfc3339(opts.epoch),
        history_comment: format!("eRDMA layer from recipe {}", recipe.name),
    };
    let env = edit.env_changes(&img.config);
    let created_by =
        format!("erdma-build build --recipe {} (added {})", recipe.name, files_added.join(" "));
    let config = edit.apply(&img.config, &info.diff_id, &created_by)?;
    let config_raw = serde_json::to_vec(&config).expect("json");
    let config_digest = erdma_oci::blob::sha256_digest(&config_raw);

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
    let manifest_digest = erdma_oci::blob::sha256_digest(&manifest_raw);
    let platform_json = img.platform.as_ref().map(|p| platform_json(&p.0));
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
            base_layers: img
                .layers
                .iter()
                .map(|(d, s, _)| crate::build::BaseLayer {
                    digest: d.clone(),
                    size: *s,
                    reuse: None,
                })
                .collect(),
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

/// Where layers this program compressed are kept by their contents
/// ([`erdma_oci::layer::CompressedLayers`]): named for this release and this very binary (its
/// size and modification time), so that no other compressor's bytes are taken for its own.
fn compressed_layers() -> erdma_oci::layer::CompressedLayers {
    use std::os::unix::fs::MetadataExt as _;
    let binary = std::env::current_exe()
        .and_then(std::fs::metadata)
        .map(|m| format!("{} {}.{}", m.size(), m.mtime(), m.mtime_nsec()))
        .unwrap_or_else(|_| "unknown".into());
    erdma_oci::layer::CompressedLayers::new(
        &cache_dir(),
        &format!("{} {binary}", env!("ERDMA_VERSION")),
    )
}
