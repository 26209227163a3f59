//! Scriptlets of the packages an rpm build installs, accounted for in the report
//! ([`crate::packages::scripts`]). None is run yet: each `%pretrans`, `%pre`, `%post` and
//! `%posttrans` is read as rpm would run it on a first install (`$1` = 1), and every command in
//! it must be shown to be without effect in an image build; anything else stops the build
//! before anything is written ([`PackageError::Script`]), unless `--skip-scripts` lists it as
//! not run.
//!
//! Without effect here:
//! - `-p /sbin/ldconfig`, or `ldconfig` in a body: the loader searches `/usr/lib64` and `/lib64`
//!   without a cache entry (rdma-core's `libibverbs`, `librdmacm`: redhat/rdma-core.spec's
//!   `%ldconfig_scriptlets`);
//! - `udevadm` (rdma-core's `%post` runs `udevadm trigger … || true`): no udev runs while an
//!   image is built, and `dnf install` in a container gets nothing from it either (its `/sys` is
//!   read-only there);
//! - tests, output and shell state ([`crate::packages::scripts::is_inert`]).
use crate::error::{Error, Result};
use crate::packages::scripts::{commands, is_inert, Outcome, ScriptRecord};
use crate::packages::PackageError;

const HINT: &str = "drop --no-sandbox to run it as rpm does in a sandbox over the base, or pass --skip-scripts to build without running it (the report lists what was not run)";

/// The install-time scriptlets rpm runs, with their interpreter tags.
pub(super) const SCRIPTLETS: &[(u32, u32, &str)] = &[
    (1151, 1153, "%pretrans"),
    (erdma_rpm::header::tag::PREIN, erdma_rpm::header::tag::PREINPROG, "%pre"),
    (erdma_rpm::header::tag::POSTIN, erdma_rpm::header::tag::POSTINPROG, "%post"),
    (1152, 1154, "%posttrans"),
];

/// What each install-time scriptlet of a package amounts to; `skip`: `--skip-scripts`.
pub(crate) fn scriptlets(h: &erdma_rpm::header::Header, skip: bool) -> Result<Vec<ScriptRecord>> {
    let package = format!("{} {}", h.name(), h.evr());
    let mut out = Vec::new();
    for &(script, prog, what) in SCRIPTLETS {
        let body = h.string(script).unwrap_or_default();
        let interp = h.strings(prog).join(" ");
        if body.trim().is_empty() && interp.is_empty() {
            continue;
        }
        let shell = interp.is_empty() || interp == "/bin/sh" || interp == "/bin/bash";
        let shown = if body.trim().is_empty() {
            interp.clone()
        } else {
            format!(
                "{} ({} lines)",
                if interp.is_empty() { "/bin/sh".into() } else { interp.clone() },
                body.lines().count()
            )
        };
        let refuse = |command: String| -> Result<Outcome> {
            if skip {
                return Ok(Outcome::NotRun(format!("--skip-scripts (it runs `{command}`)")));
            }
            Err(Error::from(PackageError::Script {
                package: package.clone(),
                script: what.to_string(),
                command,
                hint: HINT,
            }))
        };
        let ldconfig = |w: &str| w == "ldconfig" || w.ends_with("/ldconfig");
        let outcome = if body.trim().is_empty() {
            if ldconfig(&interp) {
                Outcome::NoEffect(format!(
                    "{shown}: the libraries are in the loader's default directories, found without a cache entry"
                ))
            } else {
                refuse(interp.clone())?
            }
        } else if !shell {
            refuse(format!("{interp} script"))?
        } else {
            let mut outcome = None;
            for words in commands(&body, Some(&["1"])) {
                let cmd = words[0].rsplit('/').next().unwrap_or_default();
                if is_inert(&words) || ldconfig(cmd) || cmd == "udevadm" {
                    continue;
                }
                outcome = Some(refuse(words.join(" "))?);
                break;
            }
            outcome.unwrap_or_else(|| {
                Outcome::NoEffect(format!(
                    "{shown}: only ldconfig, udevadm (no udev while an image is built) and tests"
                ))
            })
        };
        out.push(ScriptRecord { package: package.clone(), script: what.into(), outcome });
    }
    Ok(out)
}
