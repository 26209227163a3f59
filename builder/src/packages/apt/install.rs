//! `apt-get install`, without apt, dpkg, root or a container: resolve against verified
//! indices, download and check the `.deb`s, unpack their data into the layer and write the
//! dpkg database so that dpkg and apt inside the image see the truth.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use futures_util::StreamExt;
use md5::{Digest as _, Md5};

use super::resolve::{self, Installed, Planned, Request};
use crate::error::{Error, Result};
use crate::packages::nccl;
use crate::packages::payload::{self, FileType, Placer, Refused};
use crate::packages::PackageError;
use crate::packages::{Inputs, Mirror, NcclRequest, PackageChange, PackageRef, PackagesReport};
use erdma_common::progress::Reporter;
use erdma_deb::deb::{self, DataKind, Deb};
use erdma_deb::deb822::{self, Paragraph};
use erdma_deb::repo::{self, IndexedPackage, RepoSpec, SourceEntry};
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::{Entry, EntryKind, LayerContents};

pub const STATUS: &str = "var/lib/dpkg/status";
const INFO: &str = "var/lib/dpkg/info";
/// dpkg's own status is a few MiB on big images; refuse absurd ones.
const MAX_STATUS: u64 = 64 << 20;

/// Which maintainer-script effects we reproduce (see the README).
pub const EMULATED_SCRIPTS: &[&str] = &["libibverbs1 postinst: addgroup --system rdma"];

/// The apt side of [`crate::packages::install`]: resolve, and with a layer, fetch the `.deb`s
/// and unpack them with the dpkg database. Returns the report and the paths removed.
pub async fn install(
    inputs: &Inputs<'_>,
    base: &dyn BaseFiles,
    layer: Option<&mut LayerContents>,
    reporter: &dyn Reporter,
) -> Result<(PackagesReport, Vec<String>)> {
    let (res, mut report, status) = resolve(inputs, base, reporter).await?;
    let Some(layer) = layer else {
        // `plan`: the payloads on disk (all of them with --download) for the special files.
        let debs = match inputs.download {
            true => Some(
                fetch_debs(inputs.http, &res.install, &inputs.cache_dir, &mut report, reporter)
                    .await?,
            ),
            false => None,
        };
        inspect(
            &res,
            debs.as_deref(),
            &inputs.cache_dir,
            base,
            inputs.http.inflation(),
            &mut report,
        )?;
        return Ok((report, Vec::new()));
    };
    let debs =
        fetch_debs(inputs.http, &res.install, &inputs.cache_dir, &mut report, reporter).await?;
    let removed = unpack(&res, &debs, &status, base, layer, inputs.http.inflation(), &mut report)?;
    Ok((report, removed))
}

/// The apt side of [`crate::packages::add_repositories`]: a `sources.list.d` entry and the
/// dearmoured key in `trusted.gpg.d` (as the eRDMA manual does; apt >= 1.4 reads it there) for
/// each of the recipe's own repositories, at the URL it was reached at.
pub fn add_sources(
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

/// Installed dpkg packages: name → version (empty without a readable status file).
pub fn installed(base: &dyn BaseFiles) -> Result<BTreeMap<String, String>> {
    let Some(raw) = base.read(STATUS, MAX_STATUS)? else { return Ok(BTreeMap::new()) };
    let Ok(paragraphs) = deb822::parse(&String::from_utf8_lossy(&raw)) else {
        return Ok(BTreeMap::new());
    };
    Ok(Installed::from_status(&paragraphs)
        .into_iter()
        .map(|i| (i.name, i.version.to_string()))
        .collect())
}

/// The base's dpkg status, as read once by [`resolve`] and used again by [`unpack`].
pub struct BaseStatus {
    pub paragraphs: Vec<Paragraph>,
    /// The file as it was, for `status-old`; `None` when the base has none.
    pub raw: Option<Vec<u8>>,
}

/// Resolves the recipe's packages against its repositories; writes nothing.
pub async fn resolve(
    inputs: &Inputs<'_>,
    base: &dyn BaseFiles,
    reporter: &dyn Reporter,
) -> Result<(resolve::Resolution, PackagesReport, BaseStatus)> {
    let raw = base.read(STATUS, MAX_STATUS)?;
    let status = deb822::parse(&String::from_utf8_lossy(raw.as_deref().unwrap_or_default()))
        .map_err(|e| Error::Malformed {
            what: "dpkg status",
            reference: format!("/{STATUS}"),
            reason: e.to_string(),
        })?;
    let installed = Installed::from_status(&status);

    let client = inputs.http;
    let mut available = Vec::new();
    let mut report = PackagesReport::default();
    // Where each repository's packages are in `available`.
    let mut ranges: Vec<(String, std::ops::Range<usize>)> = Vec::new();
    for (name, specs) in repo_specs(inputs, base)? {
        reporter.step(&format!("reading repository {name}"));
        let mut last = None;
        for spec in specs {
            match repo::fetch_index_cached(client, &spec, Some(&inputs.cache_dir.join("indices")))
                .await
            {
                Ok(index) => {
                    report.repositories.insert(name.clone(), spec.url.clone());
                    let start = available.len();
                    available.extend(index.packages);
                    ranges.push((name.clone(), start..available.len()));
                    last = None;
                    break;
                }
                // Try the next mirror only when this one cannot be reached; a bad signature
                // or hash is an attack or a broken mirror and stops the build.
                Err(e) if e.is_unreachable() => last = Some(e),
                Err(e) => return Err(Error::Repo(e)),
            }
        }
        if let Some(e) = last {
            return Err(Error::Repo(e));
        }
    }
    let mut install: Vec<String> = Vec::new();
    let mut replace: Vec<String> = Vec::new();
    if inputs.recipe_packages {
        install.extend(inputs.target.packages.install.iter().cloned());
        replace.extend(inputs.target.packages.remove.iter().cloned());
    }
    install.extend(inputs.extra.iter().cloned());
    for arg in inputs.local {
        reporter.step(&format!("reading unsigned package {arg}"));
        let deb = super::local::load(arg, &inputs.cache_dir, client).await?;
        if deb.arch != inputs.arch && deb.arch != "all" {
            return Err(PackageError::WrongArch {
                arg: arg.to_string(),
                what: format!("{} {}", deb.name, deb.version),
                arch: deb.arch.clone(),
                image: inputs.arch.to_string(),
            }
            .into());
        }
        install.push(deb.request());
        ranges.push((format!("--package {arg}"), available.len()..available.len() + 1));
        available.push(deb.package.clone());
        report.unsigned.push(crate::packages::Unsigned {
            name: deb.name,
            version: deb.version,
            arch: deb.arch,
            source: deb.source,
            sha256: deb.sha256,
        });
    }
    let mut held: Vec<&str> = Vec::new();
    if let Some(want) = &inputs.nccl {
        let version = nccl_version(inputs, want, &available, &ranges)?;
        install.push(format!("libnccl2={version}"));
        held.push("libnccl2");
        if want.dev {
            install.push(format!("libnccl-dev={version}"));
            held.push("libnccl-dev");
        }
        report.nccl = Some(version);
    }
    let req = Request { install: &install, replace: &replace, arch: inputs.arch };
    let mut res = resolve::resolve(&req, &installed, &available)?;
    for s in &res.selected {
        reporter.step(&format!("selecting {} for {}", s.package, s.requested));
    }
    report.selected = res.selected.clone();
    for p in res.install.iter_mut() {
        p.hold = held.contains(&p.name.as_str());
    }
    report.install = res
        .install
        .iter()
        .map(|p| PackageChange {
            name: p.name.clone(),
            version: p.version.to_string(),
            arch: p.arch.clone(),
            action: p.action.clone(),
            origin: p.pkg.origin().to_string(),
            size: p.pkg.size(),
        })
        .collect();
    report.remove = res
        .remove
        .iter()
        .map(|i| PackageRef { name: i.name.clone(), version: i.version.to_string() })
        .collect();
    report.kept = res
        .kept
        .iter()
        .map(|i| PackageRef { name: i.name.clone(), version: i.version.to_string() })
        .collect();
    Ok((res, report, BaseStatus { paragraphs: status, raw }))
}

/// The `libnccl2` version for `want`, from the recipe's NCCL repositories only: a distro's
/// own `libnccl2` (Ubuntu 24.04's 2.18.3) never counts, whatever its version.
fn nccl_version(
    inputs: &Inputs<'_>,
    want: &NcclRequest,
    available: &[IndexedPackage],
    ranges: &[(String, std::ops::Range<usize>)],
) -> Result<String> {
    let names = inputs.target.nccl_repositories();
    if names.is_empty() {
        return Err(
            PackageError::NoNcclRepository { recipe: inputs.target.recipe.to_string() }.into()
        );
    }
    let versions = ranges
        .iter()
        .filter(|(n, _)| names.contains(&n.as_str()))
        .flat_map(|(_, r)| available[r.clone()].iter())
        .filter(|p| {
            p.name() == "libnccl2" && p.arch().is_none_or(|a| a == inputs.arch || a == "all")
        })
        .filter_map(|p| p.version());
    let repos = names.iter().map(|n| format!("repository `{n}`")).collect::<Vec<_>>().join(", ");
    Ok(nccl::select(versions, &want.want, want.cuda, &repos)?)
}

/// The repositories to read, each with its mirrors in order.
fn repo_specs(inputs: &Inputs<'_>, base: &dyn BaseFiles) -> Result<Vec<(String, Vec<RepoSpec>)>> {
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
pub fn base_sources(base: &dyn BaseFiles) -> Result<Vec<SourceEntry>> {
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
fn base_specs(inputs: &Inputs<'_>, base: &dyn BaseFiles) -> Result<Vec<(String, Vec<RepoSpec>)>> {
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
fn trusted_keys(base: &dyn BaseFiles) -> Result<Vec<u8>> {
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

/// Downloads (or takes from the cache) every planned `.deb`, checked against the index.
pub async fn fetch_debs(
    client: &erdma_http::Client,
    plan: &[Planned],
    cache_dir: &Path,
    report: &mut PackagesReport,
    reporter: &dyn Reporter,
) -> Result<Vec<PathBuf>> {
    let dir = cache_dir.join("debs");
    std::fs::create_dir_all(&dir).map_err(Error::io("creating cache", &dir))?;
    let results: Vec<Result<(PathBuf, u64)>> = futures_util::stream::iter(plan.iter().map(|p| {
        let client = client.clone();
        let dir = dir.clone();
        async move { fetch_one(&client, &p.pkg, &dir).await }
    }))
    .buffered(4)
    .collect()
    .await;
    let mut paths = Vec::new();
    for (r, p) in results.into_iter().zip(plan) {
        let (path, downloaded) = r?;
        if downloaded == 0 {
            report.cached_debs += 1;
        }
        report.downloaded_bytes += downloaded;
        reporter.step(&format!("got {} {}", p.name, p.version));
        paths.push(path);
    }
    Ok(paths)
}

/// The cache is keyed by SHA256, so a cached file is right by construction; a download streams
/// to a temporary name while it is hashed (never held in memory), is checked, then renamed.
async fn fetch_one(
    client: &erdma_http::Client,
    pkg: &IndexedPackage,
    dir: &Path,
) -> Result<(PathBuf, u64)> {
    let (sha256, url, size) = (pkg.sha256(), pkg.url(), pkg.size());
    let path = dir.join(format!("{sha256}.deb"));
    if erdma_oci::blob::digest_hex(&format!("sha256:{sha256}")).is_err() {
        return Err(PackageError::MalformedChecksum {
            kind: "SHA256",
            url: url.clone(),
            repo: pkg.repo().to_string(),
        }
        .into());
    }
    if path.exists() {
        return Ok((path, 0));
    }
    let fail = |reason: String| Error::Download { url: url.clone(), reason };
    // One byte more than the index says is enough to know the file is wrong.
    let (tmp, got_size, got) = match client.download(&url, dir, size).await {
        Ok(Some(d)) => d,
        Ok(None) => return Err(fail("not found (404)".into())),
        Err(erdma_http::HttpError::TooLarge { .. }) => {
            return Err(fail(format!("larger than the {size} bytes the index says")))
        }
        Err(e) => return Err(fail(e.to_string())),
    };
    if got_size != size {
        return Err(fail(format!("size {got_size} but the index says {size}")));
    }
    if got != sha256 {
        return Err(Error::DigestMismatch {
            expected: format!("sha256:{sha256} ({url})"),
            actual: format!("sha256:{got}"),
        });
    }
    tmp.persist(&path).map_err(|e| Error::io("writing cache", &path)(e.error))?;
    Ok((path, got_size))
}

/// dpkg's name for a package's info files: `pkg:arch` for `Multi-Arch: same` (info format 1).
fn info_name(control: &Paragraph, arch: &str) -> String {
    let name = control.get("Package").unwrap_or_default();
    if control.get("Multi-Arch") == Some("same") {
        format!("{name}:{arch}")
    } else {
        name.to_string()
    }
}

/// `name version (origin)`: how an error about a package's payload names it.
fn package_label(planned: &Planned) -> String {
    format!("{} {} ({})", planned.name, planned.version, planned.pkg.origin())
}

/// A refused entry, or a `.deb` that cannot be read, as one line naming the package.
fn entry_error(
    planned: &Planned,
    path: &Path,
    e: deb::DebError,
    refused: Option<(String, Refused)>,
) -> Error {
    let package = package_label(planned);
    let shown = |entry: &str| entry.escape_debug().to_string();
    match (refused, e) {
        (Some((entry, why)), _) => {
            Error::PackageEntry { package, entry: shown(&entry), reason: why.to_string() }
        }
        (None, deb::DebError::UnsafePath { entry, .. }) => Error::PackageEntry {
            package,
            entry: shown(&entry),
            reason: Refused::Escapes.to_string(),
        },
        (None, deb::DebError::BadEntry { entry, reason, .. }) => {
            Error::PackageEntry { package, entry: shown(&entry), reason }
        }
        (None, deb::DebError::Limit { member, exceeded, .. }) => {
            Error::Limit { what: format!("{member} of {package}"), exceeded }
        }
        (None, source) => Error::Deb { path: path.to_owned(), source },
    }
}

/// A hard link to anything but a regular file of the same package seen before it (tar writes
/// a file's first name before its other names): `/etc/shadow`, a directory, a later entry.
fn dangling_link(path: &Path, entry: &str, target: &str) -> deb::DebError {
    deb::DebError::BadEntry {
        path: path.to_owned(),
        member: "data.tar".into(),
        entry: entry.to_string(),
        reason: format!(
            "hard link to `{}`, which is not a regular file of this package before it",
            target.escape_debug()
        ),
    }
}

/// The `.deb` payload's entry kind, for [`payload::special`].
fn file_type(kind: &DataKind) -> FileType {
    match kind {
        DataKind::Dir => FileType::Dir,
        DataKind::File { .. } | DataKind::Hardlink(_) => FileType::File,
        DataKind::Symlink(_) => FileType::Symlink,
        DataKind::Fifo => FileType::Fifo,
        DataKind::CharDevice { major, minor } => FileType::Char { major: *major, minor: *minor },
        DataKind::BlockDevice { major, minor } => FileType::Block { major: *major, minor: *minor },
    }
}

/// Reads the payload of each package of `res` that is on disk (a `--package` file, a `.deb`
/// in the cache, one a `file://` repository serves that hashes as its index says) for the
/// report's special files, without writing anything; the others are named in
/// [`PackagesReport::not_inspected`]. `debs`: every package's file, when they were fetched.
fn inspect(
    res: &resolve::Resolution,
    debs: Option<&[PathBuf]>,
    cache_dir: &Path,
    base: &dyn BaseFiles,
    inflation: u64,
    report: &mut PackagesReport,
) -> Result<()> {
    // What a build would refuse, a plan refuses too (for the packages it can read).
    let mut placer = Placer::new(base);
    for (i, planned) in res.install.iter().enumerate() {
        let path = match debs {
            Some(d) => Some(d[i].clone()),
            None => on_disk(&planned.pkg, &cache_dir.join("debs")),
        };
        let Some(path) = path else {
            report.not_inspected.push(format!("{} {}", planned.name, planned.version));
            continue;
        };
        let label = format!("{} {}", planned.name, planned.version);
        let mut refused: Option<(String, Refused)> = None;
        let mut files: BTreeSet<String> = BTreeSet::new();
        deb::for_each_data_entry(&path, inflation, |entry, _| {
            report.special_files.extend(payload::special(
                &label,
                &entry.path,
                file_type(&entry.kind),
                entry.mode,
            ));
            let place = match &entry.kind {
                DataKind::Dir => erdma_oci::layer::Placing::Dir,
                DataKind::Symlink(t) => erdma_oci::layer::Placing::Symlink(t),
                DataKind::File { .. } => {
                    files.insert(entry.path.clone());
                    erdma_oci::layer::Placing::File
                }
                DataKind::Hardlink(target) if files.contains(target) => {
                    erdma_oci::layer::Placing::File
                }
                DataKind::Hardlink(target) => {
                    return Err(dangling_link(&path, &entry.path, target))
                }
                DataKind::Fifo | DataKind::CharDevice { .. } | DataKind::BlockDevice { .. } => {
                    return Ok(())
                }
            };
            if let Err(why) =
                payload::check_name(&entry.path).and_then(|()| placer.place(&entry.path, place))
            {
                refused = Some((entry.path.clone(), why.clone()));
                return Err(deb::DebError::Handler {
                    entry: entry.path.clone(),
                    source: Box::new(why),
                });
            }
            Ok(())
        })
        .map_err(|e| entry_error(planned, &path, e, refused.take()))?;
    }
    Ok(())
}

/// Where `pkg` already is on this machine, checked to be the file its index names.
fn on_disk(pkg: &IndexedPackage, cache: &Path) -> Option<PathBuf> {
    let sha256 = pkg.sha256();
    let cached = cache.join(format!("{sha256}.deb"));
    if erdma_oci::blob::digest_hex(&format!("sha256:{sha256}")).is_ok() && cached.is_file() {
        return Some(cached);
    }
    let url = pkg.url();
    let file = std::path::PathBuf::from(url.strip_prefix("file://")?);
    let mut hashing = erdma_http::Hashing::new(std::fs::File::open(&file).ok()?, u64::MAX, None);
    std::io::copy(&mut hashing, &mut std::io::sink()).ok()?;
    let (_, got) = hashing.finish();
    (got == sha256).then_some(file)
}

/// Unpacks the packages into `layer` and writes the dpkg database, the removals and the
/// emulated maintainer-script effects. Every entry goes where [`Placer`] says, and the
/// report gets the payloads' special files.
pub fn unpack(
    res: &resolve::Resolution,
    debs: &[PathBuf],
    status: &BaseStatus,
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
    inflation: u64,
    report: &mut PackagesReport,
) -> Result<Vec<String>> {
    let mut new_paths: BTreeSet<String> = BTreeSet::new();
    let mut stanzas: Vec<Paragraph> = Vec::new();
    // One placer for all the packages: a symlink one installs is seen by the next.
    let mut placer = Placer::new(base);
    for (planned, path) in res.install.iter().zip(debs) {
        let deb = deb::read_control(path).map_err(|e| entry_error(planned, path, e, None))?;
        let label = format!("{} {}", planned.name, planned.version);
        let mut list = vec!["/.".to_string()];
        // Each regular file's content (held when small, spooled when large) and MD5, for hard
        // links and the conffiles' checksums; a package's files are never all held at once.
        let mut files: BTreeMap<String, (EntryKind, [u8; 16])> = BTreeMap::new();
        // The entry refused and why, for the error that names the package.
        let mut refused: Option<(String, Refused)> = None;
        deb::for_each_data_entry(path, inflation, |entry, data| {
            let mut refuse = |why: Refused| {
                refused = Some((entry.path.clone(), why.clone()));
                deb::DebError::Handler { entry: entry.path.clone(), source: Box::new(why) }
            };
            payload::check_name(&entry.path).map_err(&mut refuse)?;
            list.push(format!("/{}", entry.path));
            report.special_files.extend(payload::special(
                &label,
                &entry.path,
                file_type(&entry.kind),
                entry.mode,
            ));
            let kind = match &entry.kind {
                DataKind::Dir => EntryKind::Dir,
                DataKind::File { size } => {
                    let mut md5 = Md5::new();
                    let kind = layer
                        .file_kind(data, *size, &mut |chunk| md5.update(chunk))
                        .map_err(|e| deb::DebError::Handler {
                            entry: entry.path.clone(),
                            source: Box::new(e),
                        })?;
                    files.insert(entry.path.clone(), (kind.clone(), md5.finalize().into()));
                    kind
                }
                DataKind::Symlink(target) => EntryKind::Symlink(target.clone()),
                // Hard links become copies: same content and mode, as far as apt can tell. tar
                // writes the first name of a file before its links, so a link to anything
                // else (`/etc/shadow`, a directory) is not a file of this package.
                DataKind::Hardlink(target) => match files.get(target) {
                    Some((k, _)) => k.clone(),
                    None => return Err(dangling_link(path, &entry.path, target)),
                },
                // Not created (see payload::SpecialFile::created); listed in the report.
                DataKind::Fifo | DataKind::CharDevice { .. } | DataKind::BlockDevice { .. } => {
                    return Ok(())
                }
            };
            let place = match &kind {
                EntryKind::Dir => erdma_oci::layer::Placing::Dir,
                EntryKind::Symlink(t) => erdma_oci::layer::Placing::Symlink(t),
                _ => erdma_oci::layer::Placing::File,
            };
            let Some(real) = placer.place(&entry.path, place).map_err(&mut refuse)? else {
                return Ok(());
            };
            layer
                .insert(&real, Entry { kind, mode: entry.mode, uid: entry.uid, gid: entry.gid })
                .map_err(|e| deb::DebError::Handler {
                entry: entry.path.clone(),
                source: Box::new(e),
            })?;
            if !matches!(entry.kind, DataKind::Dir) {
                new_paths.insert(real);
            }
            Ok(())
        })
        .map_err(|e| entry_error(planned, path, e, refused.take()))?;
        write_info(&deb, planned, &list, &files, layer, &mut stanzas)?;
    }

    // What the removed packages owned and nothing new provides goes, as `apt remove` would.
    let mut removed_files = Vec::new();
    for gone in &res.remove {
        let iname = info_name(&gone.paragraph, &gone.arch);
        if let Some(list) = base.read(&format!("{INFO}/{iname}.list"), 16 << 20)? {
            for p in String::from_utf8_lossy(&list).lines() {
                let Some(p) = erdma_oci::layer::normalize(p) else { continue };
                let Some(p) = base.real_path(&p)?.filter(|p| !p.is_empty()) else { continue };
                // Directories stay (dpkg leaves those other packages use), and so do paths
                // the image does not have any more.
                if new_paths.contains(&p)
                    || !matches!(
                        base.kind(&p)?,
                        Some(
                            erdma_oci::rootfs::SnapEntry::File(_)
                                | erdma_oci::rootfs::SnapEntry::Symlink(_)
                        )
                    )
                {
                    continue;
                }
                layer.add_whiteout(&p)?;
                removed_files.push(format!("/{p}"));
            }
        }
        let replaced = res.install.iter().any(|p| p.name == gone.name);
        for suffix in [
            "list",
            "md5sums",
            "conffiles",
            "shlibs",
            "symbols",
            "triggers",
            "preinst",
            "postinst",
            "prerm",
            "postrm",
            "templates",
            "config",
        ] {
            let p = format!("{INFO}/{iname}.{suffix}");
            // A replacement under the same info name has just written its own files there.
            if replaced && layer_has(layer, &p) {
                continue;
            }
            if base.read(&p, 64 << 20)?.is_some() {
                layer.add_whiteout(&p)?;
            }
        }
    }

    // The status file: the base's stanzas, less what went, plus what came, sorted by name
    // as dpkg keeps it.
    let gone: BTreeSet<(&str, &str)> =
        res.remove.iter().map(|i| (i.name.as_str(), i.arch.as_str())).collect();
    let mut all: Vec<Paragraph> = status
        .paragraphs
        .iter()
        .filter(|p| {
            let key =
                (p.get("Package").unwrap_or_default(), p.get("Architecture").unwrap_or_default());
            !gone.contains(&key)
                && !res.install.iter().any(|n| {
                    n.name == key.0 && (n.arch == key.1 || key.1 == "all" || n.arch == "all")
                })
        })
        .cloned()
        .collect();
    all.extend(stanzas);
    all.sort_by(|a, b| {
        (a.get("Package"), a.get("Architecture")).cmp(&(b.get("Package"), b.get("Architecture")))
    });
    let text: String = all.iter().map(|p| format!("{p}\n")).collect();
    layer.add_file(STATUS, text.into_bytes(), 0o644)?;
    // dpkg keeps the previous status as status-old; apt-get leaves one too.
    if let Some(old) = &status.raw {
        layer.add_file("var/lib/dpkg/status-old", old.clone(), 0o644)?;
    }

    emulate_scripts(res, base, layer)?;
    Ok(removed_files)
}

fn layer_has(layer: &LayerContents, path: &str) -> bool {
    layer.files().any(|(p, e)| p == path && e.kind != EntryKind::Whiteout)
}

fn write_info(
    deb: &Deb,
    planned: &Planned,
    list: &[String],
    files: &BTreeMap<String, (EntryKind, [u8; 16])>,
    layer: &mut LayerContents,
    stanzas: &mut Vec<Paragraph>,
) -> Result<()> {
    let iname = info_name(&deb.control, &planned.arch);
    // The name becomes a file name in /var/lib/dpkg/info: dpkg's own rule (lib/dpkg/parsehelp.c
    // `pkg_name_is_illegal`: an alphanumeric, then alphanumerics and `-+._`), the architecture
    // alphanumerics and `-`.
    let (name, arch) = iname.split_once(':').unwrap_or((&iname, "x"));
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-+._".contains(c))
        || !arch.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        || arch.is_empty()
    {
        return Err(Error::Malformed {
            what: "package control",
            reference: package_label(planned),
            reason: format!(
                "`{}` is not a valid package name and architecture for dpkg",
                iname.escape_debug()
            ),
        });
    }
    layer.add_file(
        &format!("{INFO}/{iname}.list"),
        (list.join("\n") + "\n").into_bytes(),
        0o644,
    )?;
    for (name, data) in &deb.control_files {
        // dpkg keeps each control file as info/PACKAGE.NAME: a flat name, one line.
        if name.contains('/') || payload::check_name(name).is_err() {
            return Err(Error::PackageEntry {
                package: package_label(planned),
                entry: name.escape_debug().to_string(),
                reason: "a control file must have a plain name (no `/`, newline or NUL)".into(),
            });
        }
        // Maintainer scripts stay executable, as dpkg installs them.
        let mode = if ["preinst", "postinst", "prerm", "postrm", "config"].contains(&name.as_str())
        {
            0o755
        } else {
            0o644
        };
        layer.add_file(&format!("{INFO}/{iname}.{name}"), data.clone(), mode)?;
    }
    let bad = |e: erdma_deb::deb822::Deb822Error| Error::Malformed {
        what: "package control",
        reference: planned.name.clone(),
        reason: e.to_string(),
    };
    let mut fields: Vec<(String, String)> =
        deb.control.fields().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    // `apt-mark hold` writes the same selection.
    fields.push((
        "Status".into(),
        if planned.hold { "hold ok installed" } else { "install ok installed" }.into(),
    ));
    if let Some(conffiles) = deb.control_files.get("conffiles") {
        let mut lines = Vec::new();
        for c in String::from_utf8_lossy(conffiles)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && l.starts_with('/'))
        {
            let sum = files
                .get(c.trim_start_matches('/'))
                .map(|(_, md5)| hex::encode(md5))
                .unwrap_or_else(|| "newconffile".into());
            lines.push(format!(" {c} {sum}"));
        }
        if !lines.is_empty() {
            fields.push(("Conffiles".into(), format!("\n{}", lines.join("\n"))));
        }
    }
    let mut stanza = Paragraph::default();
    for (k, v) in dpkg_order(fields) {
        stanza.set(&k, v).map_err(bad)?;
    }
    stanzas.push(stanza);
    Ok(())
}

/// The fields dpkg knows, in the order it writes them to its status file (`fieldinfos[]` in
/// dpkg's lib/dpkg/parse.c); every other field follows them, in the package's own order.
const DPKG_FIELDS: &[&str] = &[
    "Package",
    "Essential",
    "Protected",
    "Status",
    "Priority",
    "Section",
    "Installed-Size",
    "Origin",
    "Maintainer",
    "Bugs",
    "Architecture",
    "Multi-Arch",
    "Source",
    "Version",
    "Config-Version",
    "Replaces",
    "Provides",
    "Depends",
    "Pre-Depends",
    "Recommends",
    "Suggests",
    "Breaks",
    "Conflicts",
    "Enhances",
    "Conffiles",
    "Filename",
    "Size",
    "MD5sum",
    "MSDOS-Filename",
    "Description",
    "Triggers-Pending",
    "Triggers-Awaited",
];

/// `fields` as dpkg writes a status stanza: its known fields first, in its order.
fn dpkg_order(fields: Vec<(String, String)>) -> Vec<(String, String)> {
    let rank = |k: &str| {
        DPKG_FIELDS.iter().position(|f| f.eq_ignore_ascii_case(k)).unwrap_or(DPKG_FIELDS.len())
    };
    let mut fields: Vec<(usize, (String, String))> =
        fields.into_iter().map(|f| (rank(&f.0), f)).collect();
    // Stable: fields dpkg does not know keep the order the package gave them.
    fields.sort_by_key(|(r, _)| *r);
    fields.into_iter().map(|(_, f)| f).collect()
}

/// libibverbs1's postinst runs `addgroup --system --quiet rdma`; adduser picks the lowest free
/// gid from FIRST_SYSTEM_GID (100) to LAST_SYSTEM_GID (999) and writes group and gshadow,
/// keeping the previous versions as `group-` and `gshadow-`.
fn emulate_scripts(
    res: &resolve::Resolution,
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
) -> Result<()> {
    if !res.install.iter().any(|p| p.name == "libibverbs1") {
        return Ok(());
    }
    let group =
        String::from_utf8_lossy(&base.read("etc/group", 4 << 20)?.unwrap_or_default()).into_owned();
    if group.lines().any(|l| l.split(':').next() == Some("rdma")) {
        return Ok(());
    }
    let used: BTreeSet<u32> =
        group.lines().filter_map(|l| l.split(':').nth(2)?.parse().ok()).collect();
    let gid = (100..=999)
        .find(|g| !used.contains(g))
        .ok_or_else(|| Error::from(PackageError::NoGid { group: "rdma" }))?;
    let mut new_group = group.clone();
    if !new_group.is_empty() && !new_group.ends_with('\n') {
        new_group.push('\n');
    }
    new_group.push_str(&format!("rdma:x:{gid}:\n"));
    layer.add_file("etc/group", new_group.into_bytes(), 0o644)?;
    layer.add_file("etc/group-", group.into_bytes(), 0o644)?;
    if let Some(gshadow) = base.read("etc/gshadow", 4 << 20)? {
        let mut new = String::from_utf8_lossy(&gshadow).into_owned();
        if !new.is_empty() && !new.ends_with('\n') {
            new.push('\n');
        }
        new.push_str("rdma:!::\n");
        layer.insert(
            "etc/gshadow",
            Entry { kind: EntryKind::File(new.into_bytes()), mode: 0o640, uid: 0, gid: 42 },
        )?;
        layer.insert(
            "etc/gshadow-",
            Entry { kind: EntryKind::File(gshadow), mode: 0o640, uid: 0, gid: 42 },
        )?;
    }
    Ok(())
}
