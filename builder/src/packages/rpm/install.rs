//! `dnf install`, without dnf, rpm, root or a container: resolve against verified repository
//! metadata, download and verify the `.rpm`s, unpack their payloads into the layer and write
//! the image's rpm database so that rpm and dnf inside the image see the truth. This file is
//! the flow; the steps are `sources` (repositories and their metadata), `resolve`, `fetch`,
//! `unpack` and `scripts` (scriptlets); the database itself is `erdma_rpm::rpmdb`'s.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::fetch::{fetch, local_package, on_disk, MAX_RPM};
use super::plan::Resolved;
use super::repos;
use super::repos::basearch;
use super::sandboxed;
use super::scripts::{scriptlets, AccountFiles, Accounted};
use super::sources::{
    base_name, base_repo_keys, base_repo_urls, known_base_urls, load_repo, mirrored,
    mirrorlist_source, recipe_repo_urls, repository, wanted_base_repos, NCCL,
};
use super::unpack::{check_paths, note_special, unpack};
use crate::error::{Error, Result};
use crate::packages::prefetch::Ahead;
use crate::packages::rpm::prefetch::Listed;
use crate::packages::sandboxed::Over;
use crate::packages::users;
use crate::packages::PackageError;
use crate::packages::{Inputs, PackagesReport};
use erdma_common::progress::Reporter;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;
use erdma_openpgp::Keyring;
use erdma_rpm::repo::{LoadedRepo, Prefetched, RepoError};
use erdma_rpm::PackageMeta;

/// Installed packages built by Mellanox OFED (`mlnx` in the version or release, or named in the
/// recipe's remove list): each goes, replaced by the repository build of the same name when
/// there is one, removed otherwise.
pub(crate) fn ofed_rules(
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

pub(crate) async fn resolve(
    inputs: &Inputs<'_>,
    base: &dyn BaseFiles,
    reporter: &dyn Reporter,
) -> Result<(Resolved, PackagesReport)> {
    let arch = basearch(inputs.arch);
    let db = erdma_rpm::rpmdb::open(&super::image::Image(base))
        .map_err(|e| Error::from(PackageError::ReadDatabase(Box::new(e))))?
        .ok_or_else(|| {
            Error::from(PackageError::NoDatabase {
                recipe: inputs.target.recipe.to_string(),
                distro: inputs.target.pretty.to_string(),
            })
        })?;
    let installed = db.installed();
    let mut report = PackagesReport::default();
    let cache = inputs.cache_dir.join("rpm");
    let (mut repos_loaded, unreached) =
        load_repositories(inputs, base, reporter, &cache, &mut report).await?;
    let mut install: Vec<String> = Vec::new();
    if inputs.recipe_packages {
        install.extend(inputs.target.packages.install.iter().cloned());
    }
    install.extend(inputs.extra.iter().cloned());
    let local = read_local_packages(inputs, reporter, &cache, &mut report, &mut install).await?;
    // Only the packages a resolution can reach are parsed from the repositories' metadata.
    let mut named: Vec<String> = inputs.target.packages.remove.clone();
    if inputs.nccl.is_some() {
        named.extend([NCCL.to_string(), format!("{NCCL}-devel")]);
    }
    let metas: Vec<&PackageMeta> = installed.iter().chain(local.iter().map(|(_, m)| m)).collect();
    let seeds = seeds(&install, named, &metas);
    erdma_rpm::repo::select_packages(&mut repos_loaded, seeds.iter().map(String::as_str))
        .map_err(|e| repository("cache", e))?;
    for loaded in &mut repos_loaded {
        // NCCL comes only from an NCCL repository, and an NCCL repository gives nothing else.
        let recipe =
            inputs.target.repositories.iter().find(|r| !r.from_base && r.name == loaded.name);
        if let Some(repo) = recipe {
            loaded.packages.retain(|p| p.name.starts_with("libnccl") == repo.nccl);
        }
    }
    let mut available: Vec<PackageMeta> =
        repos_loaded.iter().flat_map(|r| r.packages.iter().cloned()).collect();
    available.extend(local.iter().map(|(_, meta)| meta.clone()));
    if let Some(want) = &inputs.nccl {
        let version = choose_nccl(inputs, want, &repos_loaded, arch)?;
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
    // Through the image's directory symlinks (merged /usr: `/bin/sh` is `usr/bin/sh`).
    let has = |path: &str| {
        base.real_path(path.trim_start_matches('/'))
            .ok()
            .flatten()
            .is_some_and(|real| base.kind(&real).ok().flatten().is_some())
    };
    let mut plan = super::resolve::resolve(&request, &installed, &available, &has).map_err(
        |e| match unreached.is_empty() {
            true => Error::from(e),
            false => {
                PackageError::BaseUnreachable { why: Box::new(e), repos: unreached.join(", ") }
                    .into()
            }
        },
    )?;
    if inputs.install_recommends {
        // Each Recommends nothing satisfies yet, by name, as long as the whole still resolves;
        // what it brings has its own taken in turn (dnf's `install_weak_deps=True`).
        let mut tried: std::collections::BTreeSet<String> = Default::default();
        loop {
            let mut added = false;
            for (name, _) in unsatisfied_recommends(&plan, &installed) {
                if !tried.insert(name.clone()) {
                    continue;
                }
                let mut attempt = install.clone();
                attempt.push(name);
                let request = super::resolve::Request {
                    install: &attempt,
                    remove: &remove,
                    replace: &replace,
                    arch,
                };
                if let Ok(p) = super::resolve::resolve(&request, &installed, &available, &has) {
                    install = attempt;
                    plan = p;
                    added = true;
                }
            }
            if !added {
                break;
            }
        }
    }
    report.recommends_left_out = unsatisfied_recommends(&plan, &installed)
        .into_iter()
        .map(|(name, by)| format!("{name} (recommended by {by})"))
        .collect();
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

/// The names a resolution of this build starts from, for
/// [`erdma_rpm::repo::select_packages`]: each request as given and each name it may stand for
/// (`NAME=EVR`, `NAME.ARCH`, dnf's `NAME-V[-R]`), the `named` packages (NCCL's, the recipe's
/// removals), and the image's and local packages' (`metas`) names and the names they ask for
/// (an upgrade may have to keep an installed package's requirements met).
fn seeds(install: &[String], named: Vec<String>, metas: &[&PackageMeta]) -> Vec<String> {
    let mut seeds: Vec<String> = named;
    for text in install {
        seeds.push(text.clone());
        let name = text.split_once('=').map_or(text.as_str(), |(n, _)| n.trim());
        seeds.push(name.to_string());
        if let Some((n, _)) = name.rsplit_once('.') {
            seeds.push(n.to_string());
        }
        seeds.extend(name.match_indices('-').map(|(i, _)| name[..i].to_string()));
    }
    for p in metas {
        seeds.push(p.name.clone());
        erdma_rpm::index::asked_names(p, |n| seeds.push(n.to_string()));
    }
    seeds.sort_unstable();
    seeds.dedup();
    seeds
}

/// One repository a build reads: where, with which keys, and whose it is.
struct ToRead {
    name: String,
    urls: Vec<String>,
    /// Taken by the read.
    keyring: Option<Keyring>,
    repo_gpgcheck: bool,
    /// The base's repository id (one that cannot be reached is skipped), or `None` for the
    /// recipe's (one that cannot be reached stops the build).
    base_id: Option<String>,
    /// What was fetched of it ahead, where it was taken already (a mirrorlist's repository).
    ahead: Option<Ahead<Prefetched, RepoError>>,
}

/// The recipe's repositories and, where the recipe says so, the base's own, each read and
/// verified, all at once (their order kept); a base repository that cannot be reached is
/// skipped with a warning. Returns those read and the ids of the base's that were not.
async fn load_repositories(
    inputs: &Inputs<'_>,
    base: &dyn BaseFiles,
    reporter: &dyn Reporter,
    cache: &Path,
    report: &mut PackagesReport,
) -> Result<(Vec<LoadedRepo>, Vec<String>)> {
    let mut unreached: Vec<String> = Vec::new();
    let mut to_read: Vec<ToRead> = Vec::new();
    for repo in inputs.target.repositories {
        if repo.from_base {
            to_read.extend(base_repositories(inputs, base, report, &mut unreached).await?);
            continue;
        }
        let urls = recipe_repo_urls(repo, inputs.repo_urls);
        let key = inputs
            .repo_keys
            .get(&repo.name)
            .ok_or_else(|| Error::from(PackageError::NoKey { repo: repo.name.clone() }))?;
        let keyring = Keyring::load(key).map_err(|e| repository(&repo.name, e))?;
        to_read.push(ToRead {
            name: repo.name.clone(),
            urls,
            keyring: Some(keyring),
            repo_gpgcheck: repo.repo_gpgcheck,
            base_id: None,
            ahead: None,
        });
    }
    let reads = to_read.iter_mut().map(|r| {
        let keyring = r.keyring.take().expect("each repository is read once");
        // What was fetched of it while the base's layer was read (taken already where its
        // mirrorlist gave its URLs).
        let taken = r.ahead.take();
        let ahead = async {
            match (taken, inputs.prefetched) {
                (Some(ahead), _) => ahead,
                (None, Some(p)) => {
                    p.rpm.take(&r.name, &r.urls).await.map_or(Ahead::Nothing, Listed::ahead)
                }
                (None, None) => Ahead::Nothing,
            }
        };
        load_repo(inputs.http, &r.name, &r.urls, keyring, r.repo_gpgcheck, cache, ahead, reporter)
    });
    let mut repos_loaded = Vec::new();
    let reads = futures_util::future::join_all(reads).await;
    for (r, read) in to_read.iter().zip(reads) {
        match (read?, &r.base_id) {
            (Ok(loaded), _) => {
                report.repositories.insert(loaded.name.clone(), loaded.url.clone());
                repos_loaded.push(loaded);
            }
            (Err(why), None) => {
                return Err(PackageError::Unreachable { why, repo: r.name.clone() }.into())
            }
            // A base repository that cannot be reached (CentOS 8's retired mirrorlist, a
            // VPC-only mirror) is skipped with a warning: the base may already have every
            // dependency. It is named again if resolution then misses something.
            (Err(why), Some(id)) => {
                report
                    .warnings
                    .push(format!("{why}: skipped; hint: --repo {id}=URL for a mirror of it"));
                unreached.push(id.clone());
            }
        }
    }
    Ok((repos_loaded, unreached))
}

/// The base's own enabled repositories (`.repo` files), less those the recipe removes, to be
/// read; one whose mirrorlist cannot be reached is skipped with a warning (its id added to
/// `unreached`).
async fn base_repositories(
    inputs: &Inputs<'_>,
    base: &dyn BaseFiles,
    report: &mut PackagesReport,
    unreached: &mut Vec<String>,
) -> Result<Vec<ToRead>> {
    let (http, arch) = (inputs.http, basearch(inputs.arch));
    let mut to_read = Vec::new();
    let vars = repos::variables(base, inputs.target.version_id, arch)?;
    for yr in
        wanted_base_repos(repos::base_repos(base, &vars)?, &inputs.target.packages.remove_files)
    {
        let name = base_name(&yr.id);
        let mut ahead = None;
        // `--repo ID=URL` names one of the base's repositories by its id, too.
        let urls = match known_base_urls(&yr, inputs.repo_urls, inputs.mirrors) {
            Some(urls) => urls,
            None => {
                // Its mirrorlist fetched ahead (with the mirrors it gives), or now.
                let taken = match (inputs.prefetched, &yr.mirrorlist) {
                    (Some(p), Some(list)) => p.rpm.take(&name, &mirrorlist_source(list)).await,
                    _ => None,
                };
                match taken {
                    Some(listed) => {
                        // (No fetch ahead is made under --mirror; applied all the same.)
                        let urls =
                            listed.urls.iter().map(|u| mirrored(u, inputs.mirrors)).collect();
                        ahead = Some(listed.ahead());
                        urls
                    }
                    None => base_repo_urls(http, &yr, inputs.mirrors).await?,
                }
            }
        };
        if urls.is_empty() {
            report.warnings.push(format!("repository `base {}` ({}): its mirrorlist {} cannot be reached: skipped; hint: --repo {}=URL for a mirror of it", yr.id, yr.file, yr.mirrorlist.as_deref().unwrap_or(""), yr.id));
            unreached.push(yr.id.clone());
            continue;
        }
        let keyring = base_repo_keys(&yr, base, inputs.base_keyring.as_deref())?;
        to_read.push(ToRead {
            name,
            urls,
            keyring: Some(keyring),
            repo_gpgcheck: yr.repo_gpgcheck,
            base_id: Some(yr.id.clone()),
            ahead,
        });
    }
    Ok(to_read)
}

/// `--package` files: each read, its digests checked (no signature is, as rpm checks them),
/// its architecture the image's; each is added to `install` and the report.
async fn read_local_packages(
    inputs: &Inputs<'_>,
    reporter: &dyn Reporter,
    cache: &Path,
    report: &mut PackagesReport,
    install: &mut Vec<String>,
) -> Result<Vec<(PathBuf, PackageMeta)>> {
    let (http, arch) = (inputs.http, basearch(inputs.arch));
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
        local.push((path, meta));
    }
    Ok(local)
}

/// The NCCL build for the image's CUDA from the recipe's NCCL repositories.
fn choose_nccl(
    inputs: &Inputs<'_>,
    want: &crate::packages::NcclRequest,
    repos_loaded: &[LoadedRepo],
    arch: &str,
) -> Result<String> {
    // NVIDIA's rpm builds are `libnccl` `2.21.5-1+cuda12.4` (and `libnccl-devel`): the
    // same version shape as its `libnccl2` debs, so one selection serves both.
    let names = inputs.target.nccl_repositories();
    if names.is_empty() {
        return Err(
            PackageError::NoNcclRepository { recipe: inputs.target.recipe.to_string() }.into()
        );
    }
    let evrs: Vec<String> = repos_loaded
        .iter()
        .filter(|r| names.contains(&r.name.as_str()))
        .flat_map(|r| &r.packages)
        .filter(|p| p.name == NCCL && (p.arch == arch || p.arch == "noarch"))
        .map(|p| p.evr.to_string())
        .collect();
    let repos = names.iter().map(|n| format!("repository `{n}`")).collect::<Vec<_>>().join(", ");
    let version = crate::packages::nccl::select(
        evrs.iter().map(String::as_str),
        &want.want,
        want.cuda,
        &repos,
    )?;
    Ok(version)
}

/// The `Recommends` of the packages installed that nothing in the image or the plan provides
/// (by name, `Provides` or file), as `(name, recommended by)`: what dnf's default
/// `install_weak_deps=True` would add. Rich dependencies (`(a if b)`) are not read.
fn unsatisfied_recommends(
    plan: &super::resolve::Resolution,
    installed: &[PackageMeta],
) -> Vec<(String, String)> {
    let gone: std::collections::BTreeSet<&str> =
        plan.remove.iter().map(|r| r.nevra.as_str()).collect();
    let mut present: std::collections::BTreeSet<&str> = Default::default();
    let metas = installed
        .iter()
        .filter(|m| !gone.contains(m.nevra().as_str()))
        .chain(plan.install.iter().map(|p| &p.package));
    for m in metas {
        present.insert(&m.name);
        present.extend(m.provides.iter().map(|d| d.name.as_str()));
        present.extend(m.files.iter().map(String::as_str));
    }
    let mut out = Vec::new();
    for p in &plan.install {
        for r in &p.package.recommends {
            if !r.name.starts_with('(') && !present.contains(r.name.as_str()) {
                out.push((r.name.clone(), p.package.name.clone()));
            }
        }
    }
    out.sort();
    out.dedup();
    out
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
        let mut on_disk = Vec::new();
        for (planned, file) in resolved.plan.install.iter().zip(files) {
            match file {
                Some((path, pkg)) => {
                    check_paths(&pkg, &planned.package, &mut placer)?;
                    note_special(&pkg, &label(&planned.package), &mut report);
                    on_disk.push((path, pkg));
                }
                None => report
                    .not_inspected
                    .push(format!("{} {}", planned.package.name, planned.package.evr)),
            }
        }
        // The accounts applied to nothing but the base, for what the image refuses (a home
        // to create, no /etc/shadow): the sandbox, as a build would go to it.
        let accounted =
            match account(on_disk.iter().map(|(_, p)| p), &resolved, base, None, inputs)? {
                Ok(a) => {
                    let mut scratch = LayerContents::new();
                    match users::apply(
                        &a.in_order(),
                        base,
                        &mut scratch,
                        users::today(),
                        users::Tools::RedHat,
                    ) {
                        Ok(()) => Ok(a),
                        Err(e) => Err(needs_sandbox(&e, inputs).ok_or(e)?),
                    }
                }
                Err(because) => Err(because),
            };
        match accounted {
            Ok(a) => report.scripts = a.records,
            Err(because) => {
                let headers: Vec<_> =
                    on_disk.iter().map(|(path, p)| (path.as_path(), &p.header)).collect();
                sandboxed::plan(&resolved.plan, because, base, &headers, &mut report);
            }
        }
        return Ok((report, Vec::new()));
    };
    let files = fetch(inputs, &resolved, &mut report, reporter).await?;
    // The database written from here records each package's install time, emulated (the
    // build's time; README.md, "What each run makes at random") or by the image's rpm in the
    // sandbox (the sandbox's).
    report.dated = true;
    for (planned, (_, pkg)) in resolved.plan.install.iter().zip(&files) {
        note_special(pkg, &label(&planned.package), &mut report);
    }
    // Emulated where every scriptlet can be; otherwise (and unless --no-sandbox) rpm runs them
    // all in a sandbox, on the layer as it was before this attempt.
    let because = match account(files.iter().map(|(_, p)| p), &resolved, base, Some(layer), inputs)?
    {
        Ok(mut accounted) => {
            let mut trial = layer.clone();
            let arch = basearch(inputs.arch);
            let inflation = inputs.http.inflation();
            match unpack(&resolved, &files, &mut accounted, base, arch, &mut trial, inflation) {
                Ok(removed) => {
                    *layer = trial;
                    report.scripts = accounted.records;
                    return Ok((report, removed));
                }
                // An account the image refuses to the emulation (a home to create, no
                // /etc/shadow).
                Err(e) => needs_sandbox(&e, inputs).ok_or(e)?,
            }
        }
        Err(because) => because,
    };
    let over = Over { base, layer, inputs, reporter };
    let removed = sandboxed::install(&resolved.plan, &files, because, over, &mut report)?;
    Ok((report, removed))
}

/// A scriptlet refused only because it cannot be emulated, where the sandbox may run it: the
/// scriptlet and its command, as the report names them.
fn needs_sandbox(e: &Error, inputs: &Inputs<'_>) -> Option<String> {
    match e {
        Error::Package(PackageError::Script { package, script, command, .. }) if inputs.sandbox => {
            Some(format!("{package}'s {script} (`{command}`)"))
        }
        _ => None,
    }
}

/// Every install-time scriptlet of `packages` (plan order), accounted for in the order rpm
/// runs them, `getent` answered from the image (`layer` over `base`, where the build has one);
/// `Err(because)` (inner) when one can be neither emulated nor shown to be without effect and
/// the sandbox may run it: the command, as the report names it.
fn account<'p>(
    packages: impl Iterator<Item = &'p erdma_rpm::package::Package>,
    resolved: &Resolved,
    base: &dyn BaseFiles,
    layer: Option<&LayerContents>,
    inputs: &Inputs<'_>,
) -> Result<std::result::Result<Accounted, String>> {
    let headers: Vec<&erdma_rpm::header::Header> = packages.map(|p| &p.header).collect();
    // The file triggers the transaction fires: of the packages that stay and of the new ones,
    // on the files installed and the files of the packages that go.
    let fates = super::unpack::installed_fates(resolved);
    let staying: Vec<_> = fates.iter().filter(|(_, _, goes)| !goes).map(|(_, h, _)| *h).collect();
    let gone: Vec<_> = fates.iter().filter(|(_, _, goes)| *goes).map(|(_, h, _)| *h).collect();
    let removed: Vec<String> = gone.iter().flat_map(|h| h.file_paths()).collect();
    let added: Vec<String> = headers.iter().flat_map(|h| h.file_paths()).collect();
    let skip = inputs.skip_scripts;
    let read = |p: &str| -> Result<String> {
        let bytes = match layer {
            Some(layer) => crate::packages::image::read(p, base, layer, 4 << 20)?,
            None => base.read(p, 4 << 20)?,
        };
        Ok(String::from_utf8_lossy(&bytes.unwrap_or_default()).into_owned())
    };
    // Triggers first, then scriptlets: the first refusal is the one the report names.
    let accounted = (|| -> Result<Accounted> {
        let mut triggers = super::scripts::package_triggers(&staying, &headers, &gone, skip)?;
        triggers.extend(super::scripts::file_triggers(&staying, &headers, &added, &removed, skip)?);
        let files = AccountFiles { group: read("etc/group")?, passwd: read("etc/passwd")? };
        let mut accounted = scriptlets(&headers, &files, skip)?;
        accounted.records.extend(triggers);
        Ok(accounted)
    })();
    match accounted {
        Ok(accounted) => Ok(Ok(accounted)),
        Err(e) => needs_sandbox(&e, inputs).map(Err).ok_or(e),
    }
}

/// `name evr`, as the report names a package.
pub(crate) fn label(meta: &PackageMeta) -> String {
    format!("{} {}", meta.name, meta.evr)
}

/// Installed rpm packages: name → `[E:]V-R` (empty without a database).
pub fn installed(base: &dyn BaseFiles) -> Result<BTreeMap<String, String>> {
    let Some(db) = erdma_rpm::rpmdb::open(&super::image::Image(base))
        .map_err(|e| Error::from(PackageError::ReadDatabase(Box::new(e))))?
    else {
        return Ok(BTreeMap::new());
    };
    Ok(db.installed().into_iter().map(|p| (p.name, p.evr.to_string())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use erdma_rpm::index::{select, PrimaryIndex};
    use erdma_rpm::{Cmp, Dep};

    /// A small deterministic generator (xorshift64*).
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
        }
    }

    fn entry(d: &Dep) -> String {
        let name = d.name.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
        match &d.version {
            None => format!("<rpm:entry name=\"{name}\"/>"),
            Some((cmp, evr)) => {
                let flags = match cmp {
                    Cmp::Lt => "LT",
                    Cmp::Le => "LE",
                    Cmp::Eq => "EQ",
                    Cmp::Ge => "GE",
                    Cmp::Gt => "GT",
                };
                format!(
                    "<rpm:entry name=\"{name}\" flags=\"{flags}\" epoch=\"{}\" ver=\"{}\" rel=\"{}\"/>",
                    evr.epoch.unwrap_or(0),
                    evr.version,
                    evr.release
                )
            }
        }
    }

    /// `packages` as createrepo_c writes them into `primary.xml`.
    fn primary(packages: &[PackageMeta]) -> String {
        let mut x = String::from("<?xml version=\"1.0\"?>\n<metadata xmlns=\"http://linux.duke.edu/metadata/common\" xmlns:rpm=\"http://linux.duke.edu/metadata/rpm\">\n");
        for p in packages {
            x += &format!("<package type=\"rpm\"><name>{}</name><arch>{}</arch><version epoch=\"0\" ver=\"{}\" rel=\"{}\"/><location href=\"Packages/{}.rpm\"/><format>", p.name, p.arch, p.evr.version, p.evr.release, p.nevra());
            for (tag, list) in [
                ("provides", &p.provides),
                ("requires", &p.requires),
                ("obsoletes", &p.obsoletes),
                ("conflicts", &p.conflicts),
                ("recommends", &p.recommends),
            ] {
                if !list.is_empty() {
                    x += &format!("<rpm:{tag}>");
                    list.iter().for_each(|d| x += &entry(d));
                    x += &format!("</rpm:{tag}>");
                }
            }
            p.files.iter().for_each(|f| x += &format!("<file>{f}</file>"));
            x += "</format></package>\n";
        }
        x + "</metadata>\n"
    }

    /// A random world of `n` packages: versions, virtual provides, files, plain, versioned and
    /// rich requirements, obsoletes and conflicts among them.
    fn world(rng: &mut Rng, n: usize, origin: &str) -> Vec<PackageMeta> {
        // On packages further down (as an application needs libraries, which need fewer):
        // chains of about log n.
        let dep = |rng: &mut Rng, i: usize| -> Dep {
            let near = i * (1 + rng.below(3)) / 4;
            let d = match rng.below(5) {
                0 => format!("cap{}", near / 2),
                1 => format!("/usr/bin/f{near}"),
                2 => format!("p{near} >= 1.{}", rng.below(2)),
                3 => format!("(p{near} or cap{})", near / 2 + 1),
                _ => format!("p{near}"),
            };
            Dep::parse(&d)
        };
        let mut world = (0..n)
            .map(|i| {
                let evr =
                    erdma_rpm::version::parse_evr(&format!("1.{}-{}", rng.below(3), rng.below(2)));
                let mut p = PackageMeta {
                    name: format!("p{i}"),
                    evr: evr.clone(),
                    arch: ["i686", "noarch", "noarch", "x86_64", "x86_64", "x86_64"][rng.below(6)]
                        .into(),
                    provides: vec![Dep::this(&format!("p{i}"), &evr)],
                    requires: (0..rng.below(3)).map(|_| dep(rng, i)).collect(),
                    obsoletes: vec![],
                    conflicts: vec![],
                    recommends: (0..rng.below(2)).map(|_| dep(rng, i)).collect(),
                    files: vec![],
                    origin: origin.into(),
                    location: None,
                    checksum: None,
                    size: 0,
                };
                for _ in 0..rng.below(3) {
                    p.provides.push(Dep::named(&format!("cap{}", i / 2 + rng.below(2))));
                }
                if rng.below(2) == 0 {
                    p.files.push(format!("/usr/bin/f{i}"));
                }
                if rng.below(20) == 0 {
                    p.obsoletes.push(Dep::named(&format!("p{}", rng.below(n))));
                }
                if rng.below(20) == 0 {
                    p.conflicts.push(Dep::parse(&format!("p{} < 1.1", rng.below(n))));
                }
                p
            })
            .collect::<Vec<_>>();
        // Other builds of a quarter of them, older and newer.
        for k in 0..n / 4 {
            let mut p = world[rng.below(n)].clone();
            p.evr = erdma_rpm::version::parse_evr(&format!("{}.{k}-1", rng.below(3)));
            p.provides[0] = Dep::this(&p.name, &p.evr);
            world.push(p);
        }
        world
    }

    /// Resolving against only the packages [`select`] parses gives what resolving against
    /// every package gives, plan or error, over random worlds, images and requests.
    #[test]
    fn the_selection_resolves_as_everything_does() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut smaller, mut planned, mut failed, mut parsed, mut total) = (0, 0, 0, 0, 0);
        for round in 0..300 {
            let n = 40 + rng.below(80);
            let (a, b) = (world(&mut rng, n, "a"), world(&mut rng, n, "b"));
            let b: Vec<PackageMeta> = b
                .into_iter()
                .map(|mut p| {
                    p.name = p.name.replacen('p', "q", 1);
                    p.provides[0].name = p.name.clone();
                    p
                })
                .chain(a.iter().take(5).cloned().map(|mut p| {
                    p.origin = "b".into();
                    p
                }))
                .collect();
            let installed: Vec<PackageMeta> = world(&mut rng, 6, "installed")
                .into_iter()
                .map(|mut p| {
                    p.name = format!("p{}", rng.below(n));
                    p.provides[0].name = p.name.clone();
                    p
                })
                .collect();
            let install: Vec<String> = (0..1 + rng.below(3))
                .map(|_| match rng.below(8) {
                    0 => format!("cap{}", rng.below(n / 2)),
                    1 => format!("p{}.x86_64", rng.below(n)),
                    2 | 3 => format!("q{}", rng.below(n)),
                    _ => format!("p{}", rng.below(n)),
                })
                .collect();
            let remove: Vec<String> = vec![];
            let (xa, xb) = (primary(&a), primary(&b));
            let ia = PrimaryIndex::build(xa.as_bytes(), "primary.xml", 1 << 30, "a", None, None)
                .unwrap();
            let ib = PrimaryIndex::build(xb.as_bytes(), "primary.xml", 1 << 30, "b", None, None)
                .unwrap();
            let metas: Vec<&PackageMeta> = installed.iter().collect();
            let seeds = seeds(&install, vec![], &metas);
            let chosen =
                select(&[(&ia, "a"), (&ib, "b")], seeds.iter().map(String::as_str)).unwrap();
            let every: Vec<PackageMeta> = erdma_rpm::repodata::parse_primary(xa.as_bytes(), "a")
                .unwrap()
                .into_iter()
                .chain(erdma_rpm::repodata::parse_primary(xb.as_bytes(), "b").unwrap())
                .collect();
            let some: Vec<PackageMeta> = chosen.into_iter().flatten().collect();
            smaller += usize::from(some.len() < every.len());
            let req = super::super::resolve::Request {
                install: &install,
                remove: &remove,
                replace: &[],
                arch: "x86_64",
            };
            let has = |f: &str| f == "/usr/bin/f0";
            let show = |r: Result<
                super::super::resolve::Resolution,
                super::super::resolve::ResolveError,
            >| match r {
                Ok(plan) => format!(
                    "{:?} {:?} {:?}",
                    plan.install
                        .iter()
                        .map(|p| (p.package.nevra(), &p.package.origin, format!("{:?}", p.action)))
                        .collect::<Vec<_>>(),
                    plan.remove.iter().map(|r| &r.nevra).collect::<Vec<_>>(),
                    plan.kept.iter().map(|k| k.nevra()).collect::<Vec<_>>(),
                ),
                Err(e) => format!("error: {e}"),
            };
            let full = show(super::super::resolve::resolve(&req, &installed, &every, &has));
            let part = show(super::super::resolve::resolve(&req, &installed, &some, &has));
            assert_eq!(part, full, "round {round}: install {install:?}");
            planned += usize::from(full.starts_with("[(") && !full.starts_with("[] "));
            failed += usize::from(full.starts_with("error"));
            parsed += some.len();
            total += every.len();
        }
        eprintln!("{planned} plans, {failed} errors; {parsed} of {total} packages parsed");
        // The rounds test something: plans and refusals both, from a selection that is
        // smaller than everything.
        assert!(planned > 50 && failed > 20, "{planned} plans, {failed} errors");
        assert!(
            smaller > 200,
            "the selection was smaller than everything in {smaller} of 300 rounds"
        );
    }
}
