//! `apt-get install`, without apt, dpkg, root or a container: resolve against verified
//! indices, download and check the `.deb`s, unpack their data into the layer and write the
//! dpkg database so that dpkg and apt inside the image see the truth. This file is the flow;
//! the steps are `sources` (where packages come from), `resolve`, `fetch`, `unpack`, `dpkg`
//! (the database) and `scripts` (maintainer scripts).

use std::collections::BTreeSet;

use super::dpkg::{BaseStatus, MAX_STATUS, STATUS};
use super::fetch::fetch_debs;
use super::resolve::{self, Installed, Request};
use super::sandboxed;
use super::sources::repo_specs;
use super::unpack::{inspect, unpack};
use crate::error::{Error, Result};
use crate::packages::nccl;
use crate::packages::prefetch::Ahead;
use crate::packages::sandboxed::Over;
use crate::packages::PackageError;
use crate::packages::{Inputs, NcclRequest, PackageChange, PackageRef, PackagesReport};
use erdma_common::progress::Reporter;
use erdma_deb::deb822::{self, Paragraph};
use erdma_deb::repo::{self, IndexedPackage};
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;

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
                fetch_debs(
                    inputs.http,
                    &res.install,
                    &inputs.cache_dir,
                    None,
                    &mut report,
                    reporter,
                )
                .await?,
            ),
            false => None,
        };
        let mut read = report.clone();
        match inspect(&res, debs.as_deref(), &status, base, inputs, &mut read) {
            Ok(()) => return Ok((read, Vec::new())),
            Err(e) => {
                let because = needs_sandbox(&e, inputs).ok_or(e)?;
                sandboxed::plan(&res, &status.paragraphs, because, base, inputs, &mut report)?;
                return Ok((report, Vec::new()));
            }
        }
    };
    // Each package's payload is decompressed into the cache as soon as the package is at hand
    // (downloaded or found in the cache), on up to four cores, while the rest downloads and
    // while unpack() walks those already done (it waits for each in turn).
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4);
    let ahead = erdma_deb::deb::PayloadsAhead::new(threads);
    let debs = fetch_debs(
        inputs.http,
        &res.install,
        &inputs.cache_dir,
        Some(&ahead),
        &mut report,
        reporter,
    )
    .await?;
    // Emulated where every script can be; otherwise (and unless --no-sandbox) dpkg runs them
    // all in a sandbox, on the layer as it was before this attempt.
    let (mut trial, mut emulated) = (layer.clone(), report.clone());
    match unpack(&res, &debs, &status, base, &mut trial, inputs, &mut emulated) {
        Ok(removed) => {
            *layer = trial;
            Ok((emulated, removed))
        }
        Err(e) => {
            let because = needs_sandbox(&e, inputs).ok_or(e)?;
            let over = Over { base, layer, inputs, reporter };
            let removed =
                sandboxed::install(&res, &status.paragraphs, &debs, because, over, &mut report)?;
            Ok((report, removed))
        }
    }
}

/// A script refused only because it cannot be emulated, where the sandbox may run it: the
/// command, as the report names it.
fn needs_sandbox(e: &Error, inputs: &Inputs<'_>) -> Option<String> {
    match e {
        Error::Package(PackageError::Script { package, script, command, .. }) if inputs.sandbox => {
            Some(format!("{package}'s {script} (`{command}`)"))
        }
        _ => None,
    }
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
            reason: e.into(),
        })?;
    let installed = Installed::from_status(&status);

    let client = inputs.http;
    let mut available = Vec::new();
    let mut report = PackagesReport::default();
    // Where each repository's packages are in `available`.
    let mut ranges: Vec<(String, std::ops::Range<usize>)> = Vec::new();
    // The repositories are read at once (a Debian image names three suites, an NGC one five
    // repositories), each trying its mirrors in turn; their packages go in in the order the
    // sources name them.
    let repos = repo_specs(inputs, base)?;
    for (name, _) in &repos {
        reporter.step(&format!("reading repository {name}"));
    }
    let cache = inputs.cache_dir.join("indices");
    let cache = cache.as_path();
    let indices = repos.into_iter().map(|(name, specs)| async move {
        let mut last = None;
        for spec in specs {
            let ahead = match inputs.prefetched {
                Some(p) => p.apt.take(&spec).await,
                None => Ahead::Nothing,
            };
            let ahead = match ahead {
                Ahead::Nothing => None,
                Ahead::Fetched(fetched) => Some(fetched),
                // Already tried, with the client's retries: on to the next mirror.
                Ahead::Unreachable(e) => {
                    last = Some(e);
                    continue;
                }
            };
            match repo::fetch_index_prefetched(client, &spec, Some(cache), ahead).await {
                Ok(index) => return Ok(Some((name, spec.url, index))),
                // Try the next mirror only when this one cannot be reached; a bad signature
                // or hash is an attack or a broken mirror and stops the build.
                Err(e) if e.is_unreachable() => last = Some(e),
                Err(e) => return Err(Error::Repo(e)),
            }
        }
        match last {
            Some(e) => Err(Error::Repo(e)),
            None => Ok(None),
        }
    });
    let read = futures_util::future::join_all(indices).await;
    // What was fetched ahead and not taken (a suite the build did not read) holds its indices:
    // dropped now, not at the end of the build.
    if let Some(p) = inputs.prefetched {
        p.apt.stop();
    }
    for read in read {
        let Some((name, url, index)) = read? else { continue };
        report.repositories.insert(name.clone(), url);
        let start = available.len();
        available.extend(index.packages);
        ranges.push((name, start..available.len()));
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
    if inputs.install_recommends {
        res = with_recommends(res, &mut install, &replace, inputs.arch, &installed, &available)?;
    }
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
    report.recommends_left_out = recommends_left_out(&res, &installed)?;
    Ok((res, report, BaseStatus { paragraphs: status, raw }))
}

/// `--install-recommends`: each Recommends group nothing satisfies yet gets its first
/// alternative that resolves with everything else, as apt takes them; the packages that brings
/// have their Recommends taken in turn, until none is left that can be installed.
fn with_recommends(
    mut res: resolve::Resolution,
    install: &mut Vec<String>,
    replace: &[String],
    arch: &str,
    installed: &[Installed],
    available: &[IndexedPackage],
) -> Result<resolve::Resolution> {
    let mut tried: BTreeSet<String> = BTreeSet::new();
    loop {
        let mut added = false;
        for group in unsatisfied_recommends(&res, installed)? {
            for name in group.alternatives {
                if !tried.insert(name.clone()) {
                    continue;
                }
                let mut attempt = install.clone();
                attempt.push(name);
                let req = Request { install: &attempt, replace, arch };
                // One that cannot be installed is left out, as apt leaves it.
                if let Ok(r) = resolve::resolve(&req, installed, available) {
                    *install = attempt;
                    res = r;
                    added = true;
                    break;
                }
            }
        }
        if !added {
            return Ok(res);
        }
    }
}

/// A Recommends group that neither the base nor the plan satisfies.
struct Unsatisfied {
    alternatives: Vec<String>,
    by: String,
}

/// The `Recommends` of the packages installed that neither the base nor the plan satisfies by
/// name or `Provides`, as `NAME (recommended by PACKAGE)`: what `apt-get install` would have
/// added without `--no-install-recommends`, which erdma-build behaves as by default.
fn recommends_left_out(res: &resolve::Resolution, installed: &[Installed]) -> Result<Vec<String>> {
    Ok(unsatisfied_recommends(res, installed)?
        .into_iter()
        .map(|u| format!("{} (recommended by {})", u.alternatives.join(" | "), u.by))
        .collect())
}

fn unsatisfied_recommends(
    res: &resolve::Resolution,
    installed: &[Installed],
) -> Result<Vec<Unsatisfied>> {
    let provides = |p: &Paragraph| -> Vec<String> {
        p.get("Provides")
            .and_then(|v| erdma_deb::version::parse_relations(v).ok())
            .into_iter()
            .flatten()
            .flatten()
            .map(|d| d.name)
            .collect()
    };
    let gone: BTreeSet<&str> = res.remove.iter().map(|i| i.name.as_str()).collect();
    let mut present: BTreeSet<String> = BTreeSet::new();
    for i in installed.iter().filter(|i| !gone.contains(i.name.as_str())) {
        present.insert(i.name.clone());
        present.extend(provides(&i.paragraph));
    }
    for p in &res.install {
        present.insert(p.name.clone());
        present.extend(provides(p.pkg.paragraph()?));
    }
    let mut out = Vec::new();
    for p in &res.install {
        let Some(field) = p.pkg.paragraph()?.get("Recommends") else { continue };
        let Ok(groups) = erdma_deb::version::parse_relations(field) else { continue };
        for group in groups {
            if !group.iter().any(|d| present.contains(&d.name)) {
                let alternatives = group.iter().map(|d| d.name.clone()).collect();
                out.push(Unsatisfied { alternatives, by: p.name.clone() });
            }
        }
    }
    Ok(out)
}

/// The `libnccl2` version for `want`, from the recipe's NCCL repositories only: a distro's
/// own `libnccl2` (Ubuntu 24.04's 2.18.3) never counts, whatever its version.
pub(crate) fn nccl_version(
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
