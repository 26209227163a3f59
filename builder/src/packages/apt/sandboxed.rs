//! What the image's dpkg runs in the sandbox ([`crate::packages::sandboxed`]) when a maintainer
//! script can be neither emulated nor shown to be without effect (`adduser` of a user, debconf,
//! `ucf`, …): `dpkg --purge` of what the plan removes, the packages apt configures itself
//! unpacked and configured one by one, `dpkg --unpack` of the others in the plan's order,
//! `dpkg --configure --pending` (dpkg's own order, then the triggers) and the holds, so that the
//! layer is what `apt-get install --no-install-recommends` gives.
use std::collections::BTreeSet;
use std::path::PathBuf;

use super::{order, resolve};
use crate::error::Result;
use crate::packages::sandboxed::{self, Job, Over, INBOX};
use crate::packages::scripts::{Outcome, ScriptRecord};
use crate::packages::{payload, Inputs, PackagesReport};
use erdma_deb::deb::{self, DataKind};
use erdma_deb::deb822::Paragraph;
use erdma_oci::files::BaseFiles;

fn deb_name(p: &resolve::Planned) -> String {
    sandboxed::file_name(&p.name, &p.version.to_string(), &p.arch, "deb")
}

/// The job: `debs` are the verified files (empty for a plan, which names them only). The
/// packages are unpacked and configured as `apt-get install` has dpkg do it
/// ([`order`]): the packages apt configures itself unpacked, then configured in apt's order
/// (`--no-triggers`, as apt runs it), then every other one unpacked and `dpkg --configure
/// --pending`, which chooses their order as it does under apt.
fn job<'a>(
    res: &resolve::Resolution,
    status: &[Paragraph],
    debs: &'a [PathBuf],
    because: String,
) -> Result<Job<'a>> {
    let configure = order::configure_order(&res.install, status)?;
    let names: Vec<String> = res.install.iter().map(deb_name).collect();
    let mut commands = Vec::new();
    let replaced: BTreeSet<&str> = res.install.iter().map(|p| p.name.as_str()).collect();
    let purge: Vec<String> = res
        .remove
        .iter()
        .filter(|r| !replaced.contains(r.name.as_str()))
        .map(|r| format!("{}:{}", r.name, r.arch))
        .collect();
    if !purge.is_empty() {
        commands.push(format!("dpkg --purge --force-depends {}", purge.join(" ")));
    }
    let file = |i: usize| format!("/{INBOX}/{}", names[i]);
    let by_apt = &configure.order[..configure.by_apt];
    if !by_apt.is_empty() {
        // In one call each, as apt joins its consecutive unpacks and configures: dpkg then
        // configures them in the order given, and breaks a cycle among them (dmsetup and
        // libdevmapper depend on each other) as it does under apt.
        let mut unpack: Vec<usize> = by_apt.to_vec();
        unpack.sort_unstable();
        let files: Vec<String> = unpack.into_iter().map(file).collect();
        commands.push(format!("dpkg --force-depends --unpack {}", files.join(" ")));
        let names: Vec<String> = by_apt
            .iter()
            .map(|&i| format!("{}:{}", res.install[i].name, res.install[i].arch))
            .collect();
        commands.push(format!("dpkg --no-triggers --configure {}", names.join(" ")));
    }
    let rest: Vec<String> = (0..names.len()).filter(|i| !by_apt.contains(i)).map(file).collect();
    // Dependencies are all in the plan; dpkg checks them again when it configures.
    if !rest.is_empty() {
        commands.push(format!("dpkg --force-depends --unpack {}", rest.join(" ")));
    }
    commands.push("dpkg --configure --pending".to_string());
    for h in res.install.iter().filter(|p| p.hold) {
        commands.push(format!("echo '{} hold' | dpkg --set-selections", h.name));
    }
    Ok(Job {
        because,
        tool: "dpkg",
        needs: "usr/bin/dpkg",
        files: names.into_iter().zip(debs.iter().map(PathBuf::as_path)).collect(),
        given: None,
        commands,
    })
}

/// The sandbox part of a plan: what a build would run and read, without running it.
pub(super) fn plan(
    res: &resolve::Resolution,
    status: &[Paragraph],
    because: String,
    base: &dyn BaseFiles,
    inputs: &Inputs<'_>,
    report: &mut PackagesReport,
) -> Result<()> {
    report.sandbox = Some(sandboxed::plan(job(res, status, &[], because)?, base));
    // The packages on disk (all of them after `plan --download`) name their scripts one by one.
    let on_disk: Vec<PathBuf> = res
        .install
        .iter()
        .map_while(|p| super::fetch::on_disk(&p.pkg, &inputs.cache_dir.join("debs")))
        .collect();
    let debs = if on_disk.len() == res.install.len() { on_disk } else { Vec::new() };
    record_scripts(res, &debs, report, "will be run by the image's dpkg in the sandbox");
    Ok(())
}

/// Every maintainer script of the packages installed (read from `debs` where given) and
/// removed, as run in the sandbox.
fn record_scripts(
    res: &resolve::Resolution,
    debs: &[PathBuf],
    report: &mut PackagesReport,
    how: &str,
) {
    report.scripts.clear();
    let mut add = |package: String, script: &str| {
        report.scripts.push(ScriptRecord {
            package,
            script: script.to_string(),
            outcome: Outcome::Run(how.to_string()),
        })
    };
    for (i, p) in res.install.iter().enumerate() {
        let package = format!("{} {}", p.name, p.version);
        match debs.get(i).and_then(|d| deb::read_control(d).ok()) {
            Some(deb) => {
                for script in ["preinst", "config", "postinst", "triggers"] {
                    if deb.control_files.contains_key(script) {
                        add(package.clone(), script);
                    }
                }
            }
            None => add(package, "maintainer scripts"),
        }
    }
    for r in &res.remove {
        add(format!("{} {}", r.name, r.version), "prerm and postrm");
    }
}

/// Installs `res` (its `.deb`s at `debs`, verified) with the image's dpkg in a sandbox and
/// adds what the run changed to the layer. Returns the paths removed.
pub(super) fn install(
    res: &resolve::Resolution,
    status: &[Paragraph],
    debs: &[PathBuf],
    because: String,
    over: Over<'_, '_>,
    report: &mut PackagesReport,
) -> Result<Vec<String>> {
    let inputs = over.inputs;
    let inflation = inputs.http.inflation();
    // Where each package's payload is kept (`None`: it is not).
    let kept: Vec<Option<PathBuf>> = res
        .install
        .iter()
        .zip(debs)
        .map(|(planned, path)| super::fetch::kept_payload(&planned.pkg, path, &inputs.cache_dir))
        .collect();
    // Special files of the payloads, for the report, as every build lists them.
    for ((planned, path), kept) in res.install.iter().zip(debs).zip(&kept) {
        let label = format!("{} {}", planned.name, planned.version);
        deb::for_each_data_entry_kept(path, inflation, kept.as_deref(), |entry, _| {
            let kind = super::unpack::file_type(&entry.kind);
            if !matches!(entry.kind, DataKind::Hardlink(_)) {
                report.special_files.extend(payload::special(
                    &label,
                    &entry.path,
                    kind,
                    entry.mode,
                ));
            }
            Ok(())
        })
        .map_err(|e| super::unpack::entry_error(planned, path, e, None))?;
    }
    // Each package's payload was kept by the walk above: dpkg gets it uncompressed, and
    // unpacks the same files without decompressing them again (xz: most of its unpacking).
    let mut job = job(res, status, debs, because)?;
    job.given = Some(Box::new(move |i| {
        let given = deb::with_kept_payload(debs.get(i)?, inflation, kept.get(i)?.as_deref()?)?;
        Some(Box::new(given) as Box<dyn std::io::Read>)
    }));
    let (removed, run) = sandboxed::run(job, over)?;
    // What dpkg and the scripts wrote carries the time they wrote it.
    report.dated = true;
    record_scripts(res, debs, report, "run by the image's dpkg in the sandbox");
    report.sandbox = Some(run);
    Ok(removed)
}
