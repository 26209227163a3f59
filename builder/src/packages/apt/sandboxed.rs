//! Installing with the image's own dpkg, inside a sandbox over the base's root: the path a
//! build takes when a maintainer script can be neither emulated nor shown to be without effect
//! (`adduser` of a user, debconf, `ucf`, …), so that the result is what `apt-get install
//! --no-install-recommends` gives.
//!
//! The packages are the ones resolved and verified as for any build ([`super::fetch`]). The
//! base's layers are applied to a tree on disk ([`erdma_oci::rootdir`]) with the layer built so
//! far; the `.deb`s go in; the sandbox runs
//! `dpkg --purge` of what the plan removes, `dpkg --unpack` of the packages in the plan's
//! order, `dpkg --configure --pending` (every postinst in dependency order, then the triggers)
//! and the holds; the build's own files come out again, and the layer gets what differs from
//! the tree before the run.
//!
//! No `policy-rc.d` is added (the base's own, if it has one, applies): `apt-get install` in a
//! container of the base has none either, and helpers read it for more than starts (Debian 13's
//! runit-helper enables a service only where policy-rc.d allows its start). Services stay
//! stopped all the same: there is no init (`invoke-rc.d` finds no runlevel, and systemd's
//! helpers no running systemd), and whatever a script does start is killed with the sandbox's
//! PID namespace when the run ends.
use std::collections::BTreeSet;
use std::path::PathBuf;

use super::resolve;
use crate::error::{Error, Result};
use crate::packages::error::PackageError;
use crate::packages::scripts::{Outcome, ScriptRecord};
use crate::packages::{payload, Inputs, PackagesReport, SandboxRun};
use erdma_common::progress::Reporter;
use erdma_deb::deb::{self, DataKind};
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;
use erdma_oci::rootdir::RootDir;

/// Host uid and gid of the sandbox's root: the start of a range no host account uses (its
/// 65536 ids map the image's 0–65535).
const SHIFT: u32 = 1 << 30;

/// Where the `.deb`s wait inside the root during the run (removed before the layer is taken).
const DEBS: &str = "tmp/erdma-build.debs";

/// The environment the image's dpkg runs with: non-interactive, as in a Dockerfile's `RUN`.
const ENV: &[(&str, &str)] = &[
    ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
    ("HOME", "/root"),
    ("DEBIAN_FRONTEND", "noninteractive"),
    ("DEBCONF_NONINTERACTIVE_SEEN", "true"),
];

/// The commands the sandbox runs (`debs`: the names inside [`DEBS`], in the plan's order).
fn commands(res: &resolve::Resolution, debs: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let replaced: BTreeSet<&str> = res.install.iter().map(|p| p.name.as_str()).collect();
    let purge: Vec<String> = res
        .remove
        .iter()
        .filter(|r| !replaced.contains(r.name.as_str()))
        .map(|r| format!("{}:{}", r.name, r.arch))
        .collect();
    if !purge.is_empty() {
        out.push(format!("dpkg --purge --force-depends {}", purge.join(" ")));
    }
    let files: Vec<String> = debs.iter().map(|d| format!("/{DEBS}/{d}")).collect();
    // Dependencies are all in the plan; dpkg checks them again when it configures.
    out.push(format!("dpkg --force-depends --unpack {}", files.join(" ")));
    out.push("dpkg --configure --pending".to_string());
    let held: Vec<&str> = res.install.iter().filter(|p| p.hold).map(|p| p.name.as_str()).collect();
    for h in held {
        out.push(format!("echo '{h} hold' | dpkg --set-selections"));
    }
    out
}

/// The sandbox part of a plan: what a build would run and read, without running it.
pub(super) fn plan(
    res: &resolve::Resolution,
    because: String,
    base: &dyn BaseFiles,
    inputs: &Inputs<'_>,
    report: &mut PackagesReport,
) {
    let layers = base.layers();
    let debs: Vec<String> = res.install.iter().map(deb_name).collect();
    report.sandbox = Some(SandboxRun {
        because,
        commands: commands(res, &debs),
        layers_read: layers.len(),
        bytes_read: layers.iter().map(|(_, s)| s).sum(),
        not_taken: Vec::new(),
    });
    // The packages on disk (all of them after `plan --download`) name their scripts one by one.
    let on_disk: Vec<PathBuf> = res
        .install
        .iter()
        .map_while(|p| super::fetch::on_disk(&p.pkg, &inputs.cache_dir.join("debs")))
        .collect();
    let debs = if on_disk.len() == res.install.len() { on_disk } else { Vec::new() };
    record_scripts(res, &debs, report, "will be run by the image's dpkg in the sandbox");
}

/// A directory for the sandbox's tree whose every parent other users may pass through: the
/// sandbox's root is not the host's root, and reaches its tree by path (the cache under
/// `/root/.cache` would be closed to it).
fn work_place(cache: &std::path::Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let open = |dir: &std::path::Path| {
        std::fs::create_dir_all(dir).is_ok()
            && dir.canonicalize().is_ok_and(|d| {
                d.ancestors().all(|a| {
                    std::fs::metadata(a).is_ok_and(|m| m.permissions().mode() & 0o001 != 0)
                })
            })
    };
    [cache.to_path_buf(), std::env::temp_dir(), PathBuf::from("/var/tmp")]
        .into_iter()
        .find(|d| open(d))
}

fn deb_name(p: &resolve::Planned) -> String {
    // Names from the index: kept to the characters dpkg allows in names and versions.
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_ascii_alphanumeric() || "+-.~".contains(c) { c } else { '_' })
            .collect()
    };
    format!("{}_{}_{}.deb", clean(&p.name), clean(&p.version.to_string()), clean(&p.arch))
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
/// adds what the run changed to `layer`. Returns the paths removed.
#[allow(clippy::too_many_arguments)]
pub(super) fn install(
    res: &resolve::Resolution,
    debs: &[PathBuf],
    because: String,
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
    inputs: &Inputs<'_>,
    report: &mut PackagesReport,
    reporter: &dyn Reporter,
) -> Result<Vec<String>> {
    let sandbox_error =
        |why: String| -> Error { PackageError::Sandbox { because: because.clone(), why }.into() };
    // What stops a sandbox from working, said before any layer is read.
    if !rustix::process::geteuid().is_root() {
        return Err(sandbox_error(crate::sandbox::SandboxError::NotRoot.to_string()));
    }
    for tool in ["bin/sh", "usr/bin/dpkg"] {
        if base.real_path(tool)?.map(|p| base.kind(&p)).transpose()?.flatten().is_none() {
            return Err(sandbox_error(format!(
                "the base has no /{tool} to run them with (not a Debian-based root?)"
            )));
        }
    }
    // Special files of the payloads, for the report, as every build lists them.
    for (planned, path) in res.install.iter().zip(debs) {
        let label = format!("{} {}", planned.name, planned.version);
        deb::for_each_data_entry(path, inputs.http.inflation(), |entry, _| {
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

    let place = work_place(&inputs.cache_dir).ok_or_else(|| {
        sandbox_error(format!(
            "no place for the sandbox's root that its ids may enter: {}, {} and /var/tmp each have a parent closed to other users",
            inputs.cache_dir.display(),
            std::env::temp_dir().display()
        ))
    })?;
    let work = tempfile::Builder::new()
        .prefix("erdma-build-sandbox-")
        .tempdir_in(&place)
        .map_err(|e| Error::io("creating a sandbox in", &place)(e))?;
    // Only the sandbox's ids (and root here) may enter it.
    std::os::unix::fs::chown(work.path(), Some(SHIFT), Some(SHIFT))
        .map_err(|e| Error::io("setting the owner of", work.path())(e))?;
    let root = RootDir::create(&work.path().join("root"), SHIFT)?;
    let layers = base.layers();
    let bytes: u64 = layers.iter().map(|(_, s)| s).sum();
    reporter.step(&format!(
        "reading the base's {} layers ({:.1} MB) to run maintainer scripts in a sandbox",
        layers.len(),
        bytes as f64 / 1e6
    ));
    let mut not_taken = Vec::new();
    for (i, (digest, _)) in layers.iter().enumerate() {
        let mut tar = base.layer_tar(i)?;
        let applied = tokio::task::block_in_place(|| root.apply(digest, &mut *tar))?;
        not_taken.extend(applied.skipped);
    }
    // The layer so far (repository files, removals), as the image will have it.
    let so_far = work.path().join("so-far.tar");
    let f = std::fs::File::create(&so_far).map_err(|e| Error::io("writing", &so_far)(e))?;
    layer.write_tar(f, 0).map_err(|e| Error::io("writing", &so_far)(e))?;
    let mut f = std::fs::File::open(&so_far).map_err(|e| Error::io("reading", &so_far)(e))?;
    root.apply("(this build's layer)", &mut f)?;

    let before = root.scan()?;
    root.put_dir(DEBS)?;
    let mut names = Vec::new();
    for (planned, path) in res.install.iter().zip(debs) {
        let name = deb_name(planned);
        let mut f = std::fs::File::open(path).map_err(|e| Error::io("reading", path)(e))?;
        root.put_file(&format!("{DEBS}/{name}"), &mut f, 0o644)?;
        names.push(name);
    }
    let commands = commands(res, &names);
    reporter.step(&format!(
        "running dpkg in the sandbox for {} packages (scripts of {} included)",
        res.install.len(),
        because
    ));
    let script = format!("set -e\n{}\n", commands.join("\n"));
    let ran = crate::sandbox::run(root.path(), SHIFT, &["/bin/sh", "-c", &script], ENV)
        .map_err(|e| sandbox_error(e.to_string()))?;
    if ran.status != 0 {
        let text = String::from_utf8_lossy(&ran.output);
        let tail: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = tail[tail.len().saturating_sub(3)..].join(" / ");
        return Err(sandbox_error(format!("dpkg exited with status {}: {tail}", ran.status)));
    }
    root.remove(DEBS)?;
    let after = root.scan()?;
    let (removed, skipped) = root.changes(&before, &after, layer)?;
    not_taken.extend(skipped);
    record_scripts(res, debs, report, "run by the image's dpkg in the sandbox");
    report.sandbox = Some(SandboxRun {
        because,
        commands,
        layers_read: layers.len(),
        bytes_read: bytes,
        not_taken,
    });
    Ok(removed)
}
