//! What the image's rpm runs in the sandbox ([`crate::packages::sandboxed`]) when a scriptlet
//! can be neither emulated nor shown to be without effect (`useradd`, `alternatives`, systemd
//! presets, …): `rpm -e` of what the plan removes or replaces under another name, then one
//! `rpm -U` of the plan's packages, which orders them and runs their `%pretrans`, `%pre`,
//! `%post`, `%posttrans` and the triggers as rpm runs them for `dnf install`. Dependencies were
//! resolved and signatures checked by the build (`--nodeps --nosignature`); the image's rpm
//! writes its own database.
use std::path::{Path, PathBuf};

use super::resolve::Resolution;
use crate::error::Result;
use crate::packages::sandboxed::{self, Job, Over, INBOX};
use crate::packages::scripts::{Outcome, ScriptRecord};
use crate::packages::{Action, PackagesReport};
use erdma_oci::files::BaseFiles;

fn job<'a>(plan: &Resolution, files: &'a [PathBuf], because: String) -> Job<'a> {
    let names: Vec<String> = plan
        .install
        .iter()
        .map(|p| {
            let m = &p.package;
            sandboxed::file_name(&m.name, &m.evr.to_string(), &m.arch, "rpm")
        })
        .collect();
    let mut erase: Vec<String> = plan.remove.iter().map(|r| r.nevra.clone()).collect();
    for p in &plan.install {
        if let Action::Replace { from } = &p.action {
            erase.extend(from.iter().cloned());
        }
    }
    let mut commands = Vec::new();
    if !erase.is_empty() {
        commands.push(format!("rpm -e --nodeps {}", erase.join(" ")));
    }
    let paths: Vec<String> = names.iter().map(|n| format!("/{INBOX}/{n}")).collect();
    commands.push(format!("rpm -U --nodeps --nosignature --oldpackage {}", paths.join(" ")));
    Job {
        because,
        tool: "rpm",
        needs: "usr/bin/rpm",
        files: names.into_iter().zip(files.iter().map(PathBuf::as_path)).collect(),
        given: None,
        commands,
    }
}

/// The scriptlets of the packages installed, as run in the sandbox.
fn record(packages: &[(&Path, &erdma_rpm::header::Header)], how: &str) -> Vec<ScriptRecord> {
    let mut out = Vec::new();
    for (_, h) in packages {
        let package = format!("{} {}", h.name(), h.evr());
        for (script, prog, what) in super::scripts::SCRIPTLETS {
            if !h.string(*script).unwrap_or_default().trim().is_empty()
                || !h.strings(*prog).is_empty()
            {
                out.push(ScriptRecord {
                    package: package.clone(),
                    script: what.to_string(),
                    outcome: Outcome::Run(how.to_string()),
                });
            }
        }
    }
    out
}

/// The sandbox part of a plan (`headers`: those of the packages on disk).
pub(super) fn plan(
    plan: &Resolution,
    because: String,
    base: &dyn BaseFiles,
    headers: &[(&Path, &erdma_rpm::header::Header)],
    report: &mut PackagesReport,
) {
    report.sandbox = Some(sandboxed::plan(job(plan, &[], because), base));
    report.scripts = record(headers, "will be run by the image's rpm in the sandbox");
}

/// Installs the plan's packages (`files`, verified, with their headers) with the image's rpm in
/// a sandbox and adds what the run changed to the layer. Returns the paths removed.
pub(super) fn install(
    plan: &Resolution,
    files: &[(PathBuf, erdma_rpm::package::Package)],
    because: String,
    over: Over<'_, '_>,
    report: &mut PackagesReport,
) -> Result<Vec<String>> {
    let paths: Vec<PathBuf> = files.iter().map(|(p, _)| p.clone()).collect();
    let (removed, run) = sandboxed::run(job(plan, &paths, because), over)?;
    let headers: Vec<(&Path, &erdma_rpm::header::Header)> =
        files.iter().map(|(p, pkg)| (p.as_path(), &pkg.header)).collect();
    report.scripts = record(&headers, "run by the image's rpm in the sandbox");
    report.sandbox = Some(run);
    Ok(removed)
}
