//! `dnf install`, without dnf, rpm, root or a container: resolve against verified repository
//! metadata, download and verify the `.rpm`s, unpack their payloads into the layer and write
//! the image's rpm database so that rpm and dnf inside the image see the truth.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::repos::{self, YumRepo};
use crate::error::{Error, Result};
use crate::packages::PackageError;
use crate::packages::{Inputs, Mirror, PackagesReport, Target};
use erdma_common::progress::Reporter;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;
use erdma_openpgp::{self as openpgp, Keyring};
use erdma_rpm::repodata;
use erdma_rpm::PackageMeta;

/// `repomd.xml` is a few KiB; Fedora's `primary.xml` is about 100 MiB decompressed.
const MAX_REPOMD: u64 = 16 << 20;
const MAX_PRIMARY: u64 = 256 << 20;
const MAX_PRIMARY_OPEN: u64 = 1 << 30;
/// A `--package` URL larger than this is refused (NVIDIA's NCCL rpms are about 200 MiB).
const MAX_RPM: u64 = 4 << 30;

/// NVIDIA's NCCL package in its rpm repositories (`libnccl-devel` beside it).
pub const NCCL: &str = "libnccl";

/// `excludepkgs` patterns for NVIDIA's repository that keep a later `dnf upgrade` in the image
/// from swapping the NCCL build chosen for CUDA `major` for one built for another CUDA major
/// (NCCL links the CUDA runtime statically: a `+cuda13` build does not run on a CUDA 12
/// driver stack). The rpm counterpart of `apt-mark hold`. dnf reads each as a NEVR glob
/// (`name-version-release`), matching the `+cudaX.Y` in the release.
pub fn nccl_excludes(major: u32) -> Vec<String> {
    let others: Vec<u32> = (9..=20).filter(|m| *m != major).collect();
    [NCCL, "libnccl-devel", "libnccl-static"]
        .iter()
        .flat_map(|n| others.iter().map(move |m| format!("{n}-*-*+cuda{m}.*")))
        .collect()
}

/// rpm's name for a Debian architecture (dnf's `$basearch`).
pub fn basearch(debian_arch: &str) -> &str {
    match debian_arch {
        "amd64" => "x86_64",
        "arm64" => "aarch64",
        "ppc64el" => "ppc64le",
        other => other,
    }
}

/// A repository's packages, read from its verified metadata.
pub struct LoadedRepo {
    pub name: String,
    /// The base URL it was reached at.
    pub url: String,
    pub packages: Vec<PackageMeta>,
    pub keyring: Keyring,
}

/// Reads one repository's `repomd.xml` (verifying `repomd.xml.asc` when there is one, and
/// requiring one with `repo_gpgcheck`) and its `primary` metadata, checked against repomd's
/// checksum. Mirrors are tried in order while they cannot be reached; a bad signature or
/// checksum stops the build (an attack or a broken mirror, as apt's backend treats it).
///
/// `Ok(Err(why))` when no mirror could be reached: the caller decides whether that stops the
/// build (the recipe's repositories) or not (the base's own, see [`install`]).
pub async fn load_repo(
    http: &erdma_http::Client,
    name: &str,
    urls: &[String],
    keyring: Keyring,
    repo_gpgcheck: bool,
    cache_dir: &Path,
    reporter: &dyn Reporter,
) -> Result<std::result::Result<LoadedRepo, String>> {
    reporter.step(&format!("reading repository {name}"));
    let mut unreachable = Vec::new();
    for url in urls {
        let base = format!("{}/", url.trim_end_matches('/'));
        let repomd_url = format!("{base}repodata/repomd.xml");
        let raw = match http.get(&repomd_url, MAX_REPOMD).await {
            Ok(Some(raw)) => raw,
            Ok(None) => {
                unreachable.push(format!("{repomd_url}: not found"));
                continue;
            }
            Err(e) if e.is_transient() => {
                unreachable.push(e.to_string());
                continue;
            }
            Err(e) => return Err(repository(name, e)),
        };
        let sig_url = format!("{repomd_url}.asc");
        match http.get(&sig_url, 1 << 20).await.map_err(|e| repository(name, e))? {
            Some(sig) => erdma_openpgp::verify_detached_with(
                &raw,
                &sig,
                &keyring,
                erdma_common::dates::now(),
            )
            .map_err(|e| {
                repository(name, format!("{repomd_url} does not verify against {sig_url}: {e}"))
            })?,
            None if repo_gpgcheck => {
                return Err(repository(
                    name,
                    format!("repo_gpgcheck is set but {sig_url} does not exist"),
                ))
            }
            None => {}
        }
        let md = repodata::parse_repomd(&raw)
            .map_err(|e| repository(name, format!("{repomd_url}: {e}")))?;
        let primary = md.primary().map_err(|e| repository(name, e))?;
        let sum = primary.checksum.clone().ok_or_else(|| {
            repository(name, format!("repomd.xml gives no checksum for {}", primary.location))
        })?;
        let compressed =
            fetch_cached(http, &format!("{base}{}", primary.location), &sum, cache_dir)
                .await
                .map_err(|e| repository(name, e))?;
        let xml = repodata::decompress(
            &primary.location,
            &compressed,
            MAX_PRIMARY_OPEN,
            http.inflation(),
        )
        .map_err(|e| repository(name, format!("{}: {e}", primary.location)))?;
        let packages = repodata::parse_primary(std::io::Cursor::new(xml), name)
            .map_err(|e| repository(name, format!("{}: {e}", primary.location)))?;
        return Ok(Ok(LoadedRepo { name: name.to_string(), url: url.clone(), packages, keyring }));
    }
    Ok(Err(format!("repository `{name}` cannot be reached ({})", unreachable.join("; "))))
}

/// Fetches metadata by checksum, from the cache when a file with that checksum is there.
async fn fetch_cached(
    http: &erdma_http::Client,
    url: &str,
    sum: &erdma_rpm::Checksum,
    cache_dir: &Path,
) -> std::result::Result<Vec<u8>, String> {
    let dir = cache_dir.join("rpm-md");
    let cached: PathBuf = dir.join(format!("{}-{}", sum.kind, sum.hex));
    if sum.hex.chars().all(|c| c.is_ascii_hexdigit()) {
        if let Ok(bytes) = std::fs::read(&cached) {
            if repodata::verify(&bytes, sum).is_ok() {
                return Ok(bytes);
            }
        }
    }
    let bytes = http
        .get(url, MAX_PRIMARY)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{url}: not found"))?;
    repodata::verify(&bytes, sum).map_err(|e| format!("{url}: {e}"))?;
    if sum.hex.chars().all(|c| c.is_ascii_hexdigit()) && std::fs::create_dir_all(&dir).is_ok() {
        // Best effort: a cache that cannot be written only costs a download next time.
        let _ = tempfile::NamedTempFile::new_in(&dir).and_then(|mut f| {
            std::io::Write::write_all(&mut f, &bytes)?;
            f.persist(&cached).map(|_| ()).map_err(|e| e.error)
        });
    }
    Ok(bytes)
}

/// The URLs of one of the base's repositories: its `baseurl`s, or the list its `mirrorlist`
/// gives (none when the mirrorlist cannot be reached), with `--mirror` applied (`FROM=URL` replaces the prefix FROM; a plain `URL` stands
/// in for the scheme and host of every base repository, as a mirror of the same layout).
pub async fn base_repo_urls(
    http: &erdma_http::Client,
    repo: &YumRepo,
    mirrors: &[Mirror],
) -> Result<Vec<String>> {
    let mut urls = repo.baseurls.clone();
    if urls.is_empty() {
        if let Some(list) = &repo.mirrorlist {
            // A mirrorlist that cannot be fetched gives no URL: the repository counts as
            // unreachable (below), as dnf's would.
            let text = match http.get(list, 1 << 20).await {
                Ok(t) => t.unwrap_or_default(),
                Err(e) if e.is_transient() => Vec::new(),
                Err(e) => {
                    return Err(PackageError::BaseRepository {
                        id: repo.id.clone(),
                        file: repo.file.clone(),
                        why: format!("mirrorlist: {e}"),
                    }
                    .into())
                }
            };
            urls = String::from_utf8_lossy(&text)
                .lines()
                .map(str::trim)
                .filter(|l| l.contains("://") && !l.starts_with('#'))
                .map(String::from)
                .collect();
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

fn mirrored(url: &str, mirrors: &[Mirror]) -> String {
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
pub fn base_repo_keys(
    repo: &YumRepo,
    base: &dyn BaseFiles,
    base_keyring: Option<&[u8]>,
) -> Result<Keyring> {
    let bad = |why: String| -> Error {
        PackageError::BaseRepository { id: repo.id.clone(), file: repo.file.clone(), why }.into()
    };
    let mut raw = Vec::new();
    match base_keyring {
        Some(k) => raw.extend_from_slice(k),
        None => {
            for key in &repo.gpgkeys {
                let Some(path) = key.strip_prefix("file://") else {
                    return Err(bad(format!(
                        "its key {key} is not a file in the image; hint: --keyring base=FILE"
                    )));
                };
                let data = base
                    .read(path.trim_start_matches('/'), 1 << 20)?
                    .ok_or_else(|| bad(format!("its key {key} is not in the image")))?;
                raw.extend(openpgp::dearmor(&data)?);
            }
        }
    }
    if raw.is_empty() {
        return Err(bad("it names no gpgkey, and packages are only installed verified; hint: --keyring base=FILE".into()));
    }
    Keyring::load(&raw).map_err(|e| bad(e.to_string()))
}

/// What each install-time scriptlet of a package is replaced by: nothing is run in a build.
/// rdma-core's packages (redhat/rdma-core.spec) have `%post -p /sbin/ldconfig` (libibverbs,
/// librdmacm: their libraries are in /usr/lib64, which the dynamic loader searches without a
/// cache entry) and rdma-core's `%post` (udevadm trigger, systemd presets: a container runs
/// neither udev nor systemd).
fn scriptlets(h: &erdma_rpm::header::Header) -> Vec<String> {
    use erdma_rpm::header::tag;
    let name = h.name();
    let mut out = Vec::new();
    for (script, prog, what) in
        [(tag::PREIN, tag::PREINPROG, "%pre"), (tag::POSTIN, tag::POSTINPROG, "%post")]
    {
        let body = h.string(script).unwrap_or_default();
        let interp = h.strings(prog).join(" ");
        if body.trim().is_empty() && interp.is_empty() {
            continue;
        }
        let shown = if body.trim().is_empty() {
            interp.clone()
        } else {
            format!(
                "{} ({} lines)",
                if interp.is_empty() { "/bin/sh".into() } else { interp.clone() },
                body.lines().count()
            )
        };
        let instead = if interp.ends_with("ldconfig") && body.trim().is_empty() {
            "not run: the libraries are in the loader's default directories, found without a cache entry"
        } else {
            "not run: a build runs nothing in the image"
        };
        out.push(format!("{name} {what}: {shown}: {instead}"));
    }
    out
}

/// What a build of an rpm image knows about its database and repositories after resolving.
struct Resolved {
    db: erdma_rpm::rpmdb::Database,
    plan: super::resolve::Resolution,
    repos: Vec<LoadedRepo>,
    local: Vec<(PathBuf, PackageMeta)>,
}

/// Installed packages built by Mellanox OFED (`mlnx` in the version or release, or named in the
/// recipe's remove list): each goes, replaced by the repository build of the same name when
/// there is one, removed otherwise.
fn ofed_rules(
    installed: &[PackageMeta],
    available: &[PackageMeta],
    remove: &[String],
) -> (Vec<super::resolve::Replace>, Vec<String>) {
    let mut replace = Vec::new();
    let mut gone = Vec::new();
    for p in installed {
        let mlnx =
            format!("{}-{}", p.evr.version, p.evr.release).to_ascii_lowercase().contains("mlnx");
        let listed = remove.iter().any(|r| r == &p.name);
        if !(mlnx || listed) {
            continue;
        }
        if available.iter().any(|a| a.name == p.name) && mlnx {
            replace
                .push(super::resolve::Replace { installed: p.name.clone(), with: p.name.clone() });
        } else if mlnx || (listed && !available.iter().any(|a| a.name == p.name)) {
            gone.push(p.name.clone());
        }
    }
    (replace, gone)
}

async fn resolve(
    inputs: &Inputs<'_>,
    base: &dyn BaseFiles,
    reporter: &dyn Reporter,
) -> Result<(Resolved, PackagesReport)> {
    let arch = basearch(inputs.arch);
    let db = erdma_rpm::rpmdb::open(base)
        .map_err(|e| Error::from(PackageError::ReadDatabase(e.to_string())))?
        .ok_or_else(|| {
            Error::from(PackageError::NoDatabase {
                recipe: inputs.target.recipe.to_string(),
                distro: inputs.target.pretty.to_string(),
            })
        })?;
    let installed = db.installed();
    let mut report = PackagesReport::default();
    let mut repos_loaded = Vec::new();
    let mut unreached: Vec<String> = Vec::new();
    let http = inputs.http;
    let cache = inputs.cache_dir.join("rpm");
    for repo in inputs.target.repositories {
        if repo.from_base {
            let vars = repos::variables(base, inputs.target.version_id, arch)?;
            // Repository files the recipe removes (MLNX_OFED's, pointing into a directory of
            // the machine it was installed on) are not read.
            let removed: Vec<String> = inputs
                .target
                .packages
                .remove_files
                .iter()
                .filter_map(|f| erdma_oci::layer::normalize(f))
                .map(|f| format!("/{f}"))
                .collect();
            for yr in repos::base_repos(base, &vars)?
                .into_iter()
                .filter(|r| r.enabled && !removed.contains(&r.file))
            {
                // `--repo ID=URL` names one of the base's repositories by its id, too.
                let urls = match inputs.repo_urls.get(&yr.id) {
                    Some(u) => vec![u.clone()],
                    None => base_repo_urls(http, &yr, inputs.mirrors).await?,
                };
                if urls.is_empty() {
                    report.warnings.push(format!("repository `base {}` ({}): its mirrorlist {} cannot be reached: skipped; hint: --repo {}=URL for a mirror of it", yr.id, yr.file, yr.mirrorlist.as_deref().unwrap_or(""), yr.id));
                    unreached.push(yr.id.clone());
                    continue;
                }
                let keyring = base_repo_keys(&yr, base, inputs.base_keyring.as_deref())?;
                // A base repository that cannot be reached (CentOS 8's retired mirrorlist, a
                // VPC-only mirror) is skipped with a warning: the base may already have every
                // dependency. It is named again if resolution then misses something.
                match load_repo(
                    http,
                    &format!("base {}", yr.id),
                    &urls,
                    keyring,
                    yr.repo_gpgcheck,
                    &cache,
                    reporter,
                )
                .await?
                {
                    Ok(loaded) => {
                        report.repositories.insert(loaded.name.clone(), loaded.url.clone());
                        repos_loaded.push(loaded);
                    }
                    Err(why) => {
                        report.warnings.push(format!(
                            "{why}: skipped; hint: --repo {}=URL for a mirror of it",
                            yr.id
                        ));
                        unreached.push(yr.id.clone());
                    }
                }
            }
            continue;
        }
        let urls = inputs
            .repo_urls
            .get(&repo.name)
            .map(|u| vec![u.clone()])
            .unwrap_or_else(|| repo.urls.clone());
        let key = inputs
            .repo_keys
            .get(&repo.name)
            .ok_or_else(|| Error::from(PackageError::NoKey { repo: repo.name.clone() }))?;
        let keyring = Keyring::load(key).map_err(|e| repository(&repo.name, e))?;
        let mut loaded =
            load_repo(http, &repo.name, &urls, keyring, repo.repo_gpgcheck, &cache, reporter)
                .await?
                .map_err(|why| {
                    Error::from(PackageError::Unreachable { why, repo: repo.name.clone() })
                })?;
        // NCCL comes only from an NCCL repository, and an NCCL repository gives nothing else.
        let nccl_name = |n: &str| n.starts_with("libnccl");
        loaded.packages.retain(|p| nccl_name(&p.name) == repo.nccl);
        report.repositories.insert(repo.name.clone(), loaded.url.clone());
        repos_loaded.push(loaded);
    }
    let mut available: Vec<PackageMeta> =
        repos_loaded.iter().flat_map(|r| r.packages.iter().cloned()).collect();
    let mut install: Vec<String> = Vec::new();
    if inputs.recipe_packages {
        install.extend(inputs.target.packages.install.iter().cloned());
    }
    install.extend(inputs.extra.iter().cloned());
    let mut local = Vec::new();
    for arg in inputs.local {
        reporter.step(&format!("reading unsigned package {arg}"));
        let (path, _, sha256) =
            crate::packages::local_package(arg, &cache.join("packages"), "rpm", MAX_RPM, http)
                .await?;
        let pkg = erdma_rpm::package::open(&path).map_err(|e| local_package(arg, e))?;
        // No signature is checked on it, but its digests are, as rpm checks them.
        pkg.check_digests(&path).map_err(|e| local_package(arg, e))?;
        let meta = pkg.header.meta(&format!("unsigned {arg}"));
        if meta.arch != arch && meta.arch != "noarch" {
            return Err(PackageError::WrongArch {
                arg: arg.to_string(),
                what: meta.nevra(),
                arch: meta.arch.clone(),
                image: arch.to_string(),
            }
            .into());
        }
        install.push(format!("{}={}", meta.name, meta.evr));
        report.unsigned.push(crate::packages::Unsigned {
            name: meta.name.clone(),
            version: meta.evr.to_string(),
            arch: meta.arch.clone(),
            source: arg.clone(),
            sha256,
        });
        available.push(meta.clone());
        local.push((path, meta));
    }
    if let Some(want) = &inputs.nccl {
        // NVIDIA's rpm builds are `libnccl` `2.21.5-1+cuda12.4` (and `libnccl-devel`): the
        // same version shape as its `libnccl2` debs, so one selection serves both.
        let names = inputs.target.nccl_repositories();
        if names.is_empty() {
            return Err(PackageError::NoNcclRepository {
                recipe: inputs.target.recipe.to_string(),
            }
            .into());
        }
        let evrs: Vec<String> = repos_loaded
            .iter()
            .filter(|r| names.contains(&r.name.as_str()))
            .flat_map(|r| &r.packages)
            .filter(|p| p.name == NCCL && (p.arch == arch || p.arch == "noarch"))
            .map(|p| p.evr.to_string())
            .collect();
        let repos =
            names.iter().map(|n| format!("repository `{n}`")).collect::<Vec<_>>().join(", ");
        let version = crate::packages::nccl::select(
            evrs.iter().map(String::as_str),
            &want.want,
            want.cuda,
            &repos,
        )?;
        install.push(format!("{NCCL}={version}"));
        if want.dev {
            install.push(format!("{NCCL}-devel={version}"));
        }
        report.nccl = Some(version);
    }
    let (replace, remove) = ofed_rules(&installed, &available, &inputs.target.packages.remove);
    let request =
        super::resolve::Request { install: &install, remove: &remove, replace: &replace, arch };
    reporter.step("resolving packages");
    let has = |path: &str| base.kind(path.trim_start_matches('/')).ok().flatten().is_some();
    let plan =
        super::resolve::resolve(&request, &installed, &available, &has).map_err(
            |e| match unreached.is_empty() {
                true => Error::from(e),
                false => PackageError::BaseUnreachable {
                    why: e.to_string(),
                    repos: unreached.join(", "),
                }
                .into(),
            },
        )?;
    for p in &plan.install {
        let action = match &p.action {
            // A Mellanox build swapped for ours is a replacement, whichever EVR is higher.
            crate::packages::Action::Downgrade { from }
            | crate::packages::Action::Upgrade { from }
                if replace.iter().any(|r| r.installed == p.package.name) =>
            {
                crate::packages::Action::Replace { from: vec![from.clone()] }
            }
            action => action.clone(),
        };
        report.install.push(crate::packages::PackageChange {
            name: p.package.name.clone(),
            version: p.package.evr.to_string(),
            arch: p.package.arch.clone(),
            action,
            origin: p.package.origin.clone(),
            size: p.package.size,
        });
    }
    for r in &plan.remove {
        report
            .remove
            .push(crate::packages::PackageRef { name: r.name.clone(), version: r.evr.to_string() });
    }
    for k in &plan.kept {
        report
            .kept
            .push(crate::packages::PackageRef { name: k.name.clone(), version: k.evr.to_string() });
    }
    Ok((Resolved { db, plan, repos: repos_loaded, local }, report))
}

/// The rpm side of [`crate::packages::install`].
pub async fn install(
    inputs: &Inputs<'_>,
    base: &dyn BaseFiles,
    layer: Option<&mut LayerContents>,
    reporter: &dyn Reporter,
) -> Result<(PackagesReport, Vec<String>)> {
    let (resolved, mut report) = resolve(inputs, base, reporter).await?;
    let Some(layer) = layer else {
        // `plan`: the headers of the packages on disk (all of them with --download) for the
        // special files; a header lists every file's mode and device numbers.
        let files = match inputs.download {
            true => fetch(inputs, &resolved, &mut report, reporter)
                .await?
                .into_iter()
                .map(Some)
                .collect(),
            false => resolved
                .plan
                .install
                .iter()
                .map(|p| on_disk(inputs, &resolved, &p.package))
                .collect::<Result<Vec<_>>>()?,
        };
        // What a build would refuse, a plan refuses too (for the packages it can read).
        let mut placer = crate::packages::payload::Placer::new(base);
        for (planned, file) in resolved.plan.install.iter().zip(files) {
            match file {
                Some((_, pkg)) => {
                    check_paths(&pkg, &planned.package, &mut placer)?;
                    note_special(&pkg, &label(&planned.package), &mut report);
                }
                None => report
                    .not_inspected
                    .push(format!("{} {}", planned.package.name, planned.package.evr)),
            }
        }
        return Ok((report, Vec::new()));
    };
    let files = fetch(inputs, &resolved, &mut report, reporter).await?;
    report.scriptlets = files.iter().flat_map(|(_, p)| scriptlets(&p.header)).collect();
    for (planned, (_, pkg)) in resolved.plan.install.iter().zip(&files) {
        note_special(pkg, &label(&planned.package), &mut report);
    }
    let removed =
        unpack(&resolved, &files, base, basearch(inputs.arch), layer, inputs.http.inflation())?;
    Ok((report, removed))
}

/// The header's file list through [`crate::packages::payload::Placer`], as an unpack would
/// place it (header order: a directory or symlink before what is under it).
fn check_paths(
    pkg: &erdma_rpm::package::Package,
    meta: &PackageMeta,
    placer: &mut crate::packages::payload::Placer<'_>,
) -> Result<()> {
    use crate::packages::payload::{check_name, Refused};
    use erdma_oci::layer::Placing;
    for f in pkg.files().iter().filter(|f| !f.is_ghost()) {
        let refuse = |why: Refused| Error::PackageEntry {
            package: format!("{} ({})", meta.nevra(), meta.origin),
            entry: f.path.escape_debug().to_string(),
            reason: why.to_string(),
        };
        let norm = erdma_oci::layer::normalize(&f.path).ok_or_else(|| refuse(Refused::Escapes))?;
        check_name(&norm).map_err(refuse)?;
        let kind = match f.file_type() {
            0o040000 => Placing::Dir,
            0o100000 => Placing::File,
            0o120000 => Placing::Symlink(&f.link_to),
            _ => continue,
        };
        placer.place(&norm, kind).map_err(refuse)?;
    }
    Ok(())
}

/// `name evr`, as the report names a package.
fn label(meta: &PackageMeta) -> String {
    format!("{} {}", meta.name, meta.evr)
}

/// The package's setuid and setgid files, device nodes, FIFOs and sockets, from its header
/// ([`crate::packages::payload::special`]); `%ghost` files are not in the payload.
fn note_special(pkg: &erdma_rpm::package::Package, label: &str, report: &mut PackagesReport) {
    use crate::packages::payload::{special, FileType};
    for f in pkg.files().iter().filter(|f| !f.is_ghost()) {
        // Linux's `new_encode_dev` (include/linux/kdev_t.h), as rpm stores `FILERDEVS`.
        let (major, minor) = ((f.rdev >> 8) & 0xfff, (f.rdev & 0xff) | ((f.rdev >> 12) & 0xfff00));
        let t = match f.file_type() {
            0o040000 => FileType::Dir,
            0o100000 => FileType::File,
            0o120000 => FileType::Symlink,
            0o020000 => FileType::Char { major, minor },
            0o060000 => FileType::Block { major, minor },
            0o010000 => FileType::Fifo,
            0o140000 => FileType::Socket,
            _ => continue,
        };
        report.special_files.extend(special(label, &f.path, t, f.mode));
    }
}

/// A planned package already on this machine: a `--package` file, or one in the package
/// cache (named by the checksum its repository gives, and verified when it was stored).
/// Its signature is checked again, as a build checks it.
fn on_disk(
    inputs: &Inputs<'_>,
    resolved: &Resolved,
    meta: &PackageMeta,
) -> Result<Option<(PathBuf, erdma_rpm::package::Package)>> {
    if let Some((path, _)) =
        resolved.local.iter().find(|(_, m)| m.origin == meta.origin && m.name == meta.name)
    {
        let pkg = erdma_rpm::package::open(path)
            .map_err(|e| local_package(&path.display().to_string(), e))?;
        return Ok(Some((path.clone(), pkg)));
    }
    let (Some(sum), Some(repo)) =
        (&meta.checksum, resolved.repos.iter().find(|r| r.name == meta.origin))
    else {
        return Ok(None);
    };
    if sum.hex.is_empty()
        || !sum.hex.chars().all(|c| c.is_ascii_hexdigit())
        || !sum.kind.chars().all(|c| c.is_ascii_alphanumeric())
    {
        return Ok(None);
    }
    let path =
        inputs.cache_dir.join("rpm").join("packages").join(format!("{}-{}.rpm", sum.kind, sum.hex));
    if !path.is_file() {
        return Ok(None);
    }
    let pkg = erdma_rpm::package::open(&path).map_err(|e| package_file(path.display(), e))?;
    pkg.verify(&path, &repo.keyring, erdma_common::dates::now()).map_err(|e| {
        Error::from(PackageError::Unverified {
            nevra: meta.nevra(),
            repo: repo.name.clone(),
            at: format!("cached {}", path.display()),
            why: e.to_string(),
        })
    })?;
    Ok(Some((path, pkg)))
}

/// Downloads (or takes from the cache) every planned package, checks it against the checksum
/// its repository's `primary.xml` gives, and verifies its OpenPGP header signature and payload
/// digest against the repository's key, as dnf with `gpgcheck=1` does. `--package` files are
/// only read.
async fn fetch(
    inputs: &Inputs<'_>,
    resolved: &Resolved,
    report: &mut PackagesReport,
    reporter: &dyn Reporter,
) -> Result<Vec<(PathBuf, erdma_rpm::package::Package)>> {
    let dir = inputs.cache_dir.join("rpm").join("packages");
    std::fs::create_dir_all(&dir).map_err(Error::io("creating cache", &dir))?;
    let mut out = Vec::new();
    for planned in &resolved.plan.install {
        let meta = &planned.package;
        if let Some((path, _)) =
            resolved.local.iter().find(|(_, m)| m.origin == meta.origin && m.name == meta.name)
        {
            let pkg = erdma_rpm::package::open(path)
                .map_err(|e| local_package(&path.display().to_string(), e))?;
            out.push((path.clone(), pkg));
            continue;
        }
        let repo = resolved
            .repos
            .iter()
            .find(|r| r.name == meta.origin)
            .ok_or_else(|| Error::from(PackageError::NoOrigin { nevra: meta.nevra() }))?;
        let location = meta.location.as_deref().ok_or_else(|| {
            Error::from(PackageError::NoLocation { nevra: meta.nevra(), repo: repo.name.clone() })
        })?;
        let url =
            format!("{}/{}", repo.url.trim_end_matches('/'), location.trim_start_matches('/'));
        let sum = meta.checksum.clone().ok_or_else(|| {
            Error::from(PackageError::NoChecksum { nevra: meta.nevra(), repo: repo.name.clone() })
        })?;
        // The cache file is named from these two: hex digits and an algorithm name only.
        if !sum.hex.chars().all(|c| c.is_ascii_hexdigit())
            || sum.hex.is_empty()
            || !sum.kind.chars().all(|c| c.is_ascii_alphanumeric())
            || sum.kind.is_empty()
        {
            return Err(PackageError::MalformedChecksum {
                kind: "checksum",
                url,
                repo: repo.name.clone(),
            }
            .into());
        }
        let path = dir.join(format!("{}-{}.rpm", sum.kind, sum.hex));
        if !path.exists() {
            reporter.step(&format!("downloading {}", meta.nevra()));
            let fail = |reason: String| Error::Download { url: url.clone(), reason };
            let limit = if meta.size > 0 { meta.size } else { MAX_RPM };
            let (tmp, got_size, got_sha256) = match inputs.http.download(&url, &dir, limit).await {
                Ok(Some(d)) => d,
                Ok(None) => return Err(fail("not found (404)".into())),
                Err(erdma_http::HttpError::TooLarge { .. }) => {
                    return Err(fail(format!("larger than the {limit} bytes primary.xml says")))
                }
                Err(e) => return Err(fail(e.to_string())),
            };
            if meta.size > 0 && got_size != meta.size {
                return Err(fail(format!("size {got_size} but primary.xml says {}", meta.size)));
            }
            // SHA256 (what createrepo_c writes) was computed as the file streamed by; another
            // kind is checked from the file.
            if sum.kind == "sha256" {
                if got_sha256 != sum.hex {
                    return Err(Error::DigestMismatch {
                        expected: format!("sha256:{} ({url})", sum.hex),
                        actual: format!("sha256:{got_sha256}"),
                    });
                }
            } else {
                let bytes =
                    std::fs::read(tmp.path()).map_err(Error::io("reading download", tmp.path()))?;
                repodata::verify(&bytes, &sum).map_err(|e| Error::DigestMismatch {
                    expected: format!("{}:{} ({url})", sum.kind, sum.hex),
                    actual: e.to_string(),
                })?;
            }
            tmp.persist(&path).map_err(|e| Error::io("writing cache", &path)(e.error))?;
            report.downloaded_bytes += got_size;
        } else {
            report.cached_debs += 1;
        }
        let pkg = erdma_rpm::package::open(&path).map_err(|e| package_file(&url, e))?;
        pkg.verify(&path, &repo.keyring, erdma_common::dates::now()).map_err(|e| {
            Error::from(PackageError::Unverified {
                nevra: meta.nevra(),
                repo: repo.name.clone(),
                at: url.clone(),
                why: e.to_string(),
            })
        })?;
        out.push((path, pkg));
    }
    Ok(out)
}

/// `name → id` from an `/etc/passwd` or `/etc/group` of the base (or the layer, when a
/// package writes them: `setup` on EL).
fn ids(text: &str) -> BTreeMap<String, u32> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?.to_string();
            let id = f.nth(1)?.parse().ok()?;
            Some((name, id))
        })
        .collect()
}

/// Writes the planned packages' payloads into the layer, whites out the files of the packages
/// that go (replaced, upgraded, removed) that nothing new puts back and no package that stays
/// owns, and writes the rpm database with the gone packages' headers removed and the new ones
/// added as rpm stores them. Returns the paths removed.
fn unpack(
    resolved: &Resolved,
    files: &[(PathBuf, erdma_rpm::package::Package)],
    base: &dyn BaseFiles,
    arch: &str,
    layer: &mut LayerContents,
    inflation: u64,
) -> Result<Vec<String>> {
    let passwd =
        ids(&String::from_utf8_lossy(&base.read("etc/passwd", 4 << 20)?.unwrap_or_default()));
    let group =
        ids(&String::from_utf8_lossy(&base.read("etc/group", 4 << 20)?.unwrap_or_default()));
    // rpm resolves file owners by name at install time and falls back to root (with a warning)
    // for a name the image does not know (lib/fsm.c, lib/rpmug.c).
    let owners = |user: &str, grp: &str| {
        (passwd.get(user).copied().unwrap_or(0), group.get(grp).copied().unwrap_or(0))
    };
    // rpm writes through the directory symlinks the image has (merged /usr on EL9: /sbin ->
    // usr/sbin), and never replaces such a symlink with a directory; nothing is written
    // through a symlink this build installs (one placer for every package).
    let placer = std::cell::RefCell::new(crate::packages::payload::Placer::new(base));
    let place = |p: &str, kind: erdma_oci::layer::Placing<'_>| {
        placer.borrow_mut().place(p, kind).map_err(|why| why.to_string())
    };
    let now = erdma_common::dates::now().max(0) as u32;
    let color = erdma_rpm::rpmdb::transaction_color(base, arch);
    let mut blobs = Vec::new();
    for ((path, pkg), planned) in files.iter().zip(&resolved.plan.install) {
        let entry_error = |e: erdma_rpm::package::RpmError| {
            let package = format!("{} ({})", planned.package.nevra(), planned.package.origin);
            match e {
                erdma_rpm::package::RpmError::UnsafePath { entry, .. } => Error::PackageEntry {
                    package,
                    entry: entry.escape_debug().to_string(),
                    reason: crate::packages::payload::Refused::Escapes.to_string(),
                },
                erdma_rpm::package::RpmError::BadEntry { entry, reason, .. } => {
                    Error::PackageEntry { package, entry: entry.escape_debug().to_string(), reason }
                }
                erdma_rpm::package::RpmError::Limit { exceeded, .. } => {
                    Error::Limit { what: format!("the payload of {package}"), exceeded }
                }
                e => package_file(path.display(), e),
            }
        };
        let unpacked = pkg
            .unpack(
                path,
                layer,
                &owners,
                &erdma_rpm::package::UnpackOptions {
                    place: Some(&place),
                    inflation,
                    nodocs: false,
                },
            )
            .map_err(entry_error)?;
        let ctx = erdma_rpm::rpmdb::InstallCtx {
            install_time: now,
            tid: now,
            color,
            file_states: unpacked.file_states.clone(),
        };
        blobs.push(
            erdma_rpm::rpmdb::installed_header(&pkg.header, &pkg.signature, &ctx)
                .map_err(|e| package_file(path.display(), e))?,
        );
    }
    // The installed packages that go: removed, or replaced by a new build.
    let mut gone: Vec<String> = resolved.plan.remove.iter().map(|r| r.nevra.clone()).collect();
    for p in &resolved.plan.install {
        match &p.action {
            super::resolve::Action::Install => {}
            // `from` is the EVR the same name had.
            super::resolve::Action::Upgrade { from }
            | super::resolve::Action::Downgrade { from } => {
                gone.push(format!("{}-{from}", p.package.name))
            }
            super::resolve::Action::Replace { from } => gone.extend(from.iter().cloned()),
        }
    }
    let mut gone_hnums = Vec::new();
    let mut gone_files: Vec<String> = Vec::new();
    let mut kept_files: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    for (hnum, h) in resolved.db.headers() {
        let meta = h.meta("installed");
        let nevra = meta.nevra();
        // A removal may name the package as `name-evr.arch` or by its EVR alone.
        if gone
            .iter()
            .any(|g| g == &nevra || g == &format!("{}-{}", meta.name, meta.evr) || g == &meta.name)
        {
            gone_hnums.push(*hnum);
            gone_files.extend(meta.files);
        } else {
            kept_files.extend(meta.files);
        }
    }
    let mut removed = Vec::new();
    for f in gone_files {
        let Some(rel) = erdma_oci::layer::normalize(&f) else { continue };
        let Some(rel) = base.real_path(&rel)?.filter(|p| !p.is_empty()) else { continue };
        if kept_files.contains(&f) || layer.files().any(|(p, _)| p == rel) {
            continue;
        }
        // Directories stay: other packages' files may live in them, and rpm -e keeps a
        // directory that is not empty.
        if matches!(base.kind(&rel)?, Some(erdma_oci::rootfs::SnapEntry::Dir) | None) {
            continue;
        }
        layer.add_whiteout(&rel)?;
        removed.push(f);
    }
    for db_file in erdma_rpm::rpmdb::write(&resolved.db, &gone_hnums, &blobs)
        .map_err(|e| Error::from(PackageError::WriteDatabase(e.to_string())))?
    {
        db_file.apply(layer)?;
    }
    removed.sort();
    Ok(removed)
}

/// The rpm side of [`crate::packages::add_repositories`]: for each of the recipe's own
/// repositories, `/etc/yum.repos.d/NAME.repo` at the URL the build reached, with `gpgcheck=1`
/// and its verified key armoured at `/etc/pki/rpm-gpg/RPM-GPG-KEY-NAME`, as the ECS AI-training-cluster guide sets up
/// Alibaba's. An NCCL repository the base already lists (NVIDIA's CUDA images) is not added
/// twice: its section in the base's file gains the `excludepkgs` that hold NCCL to the CUDA
/// major it was chosen for ([`nccl_excludes`]), as ours has them.
pub fn add_repos(
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

/// Installed rpm packages: name → `[E:]V-R` (empty without a database).
pub fn installed(base: &dyn BaseFiles) -> Result<BTreeMap<String, String>> {
    let Some(db) = erdma_rpm::rpmdb::open(base)
        .map_err(|e| Error::from(PackageError::ReadDatabase(e.to_string())))?
    else {
        return Ok(BTreeMap::new());
    };
    Ok(db.installed().into_iter().map(|p| (p.name, p.evr.to_string())).collect())
}

fn repository(repo: &str, why: impl std::fmt::Display) -> Error {
    PackageError::Repository { repo: repo.to_string(), why: why.to_string() }.into()
}

fn local_package(arg: &str, why: impl std::fmt::Display) -> Error {
    PackageError::LocalPackage { arg: arg.to_string(), why: why.to_string() }.into()
}

fn package_file(at: impl std::fmt::Display, why: impl std::fmt::Display) -> Error {
    PackageError::Package { at: at.to_string(), why: why.to_string() }.into()
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
