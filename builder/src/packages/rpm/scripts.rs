//! Scriptlets of the packages an rpm build installs, accounted for in the report
//! ([`crate::packages::scripts`]). None is run or emulated yet: a bare `/sbin/ldconfig` is shown
//! to have no effect that matters, every other `%pre`/`%post` is listed as not run.
use crate::packages::scripts::{Outcome, ScriptRecord};

/// What each install-time scriptlet of a package amounts to. rdma-core's packages
/// (redhat/rdma-core.spec) have `%post -p /sbin/ldconfig` (libibverbs, librdmacm: their
/// libraries are in /usr/lib64, which the dynamic loader searches without a cache entry) and
/// rdma-core's `%post` (udevadm trigger, systemd presets).
pub(crate) fn scriptlets(h: &erdma_rpm::header::Header) -> Vec<ScriptRecord> {
    use erdma_rpm::header::tag;
    let package = format!("{} {}", h.name(), h.evr());
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
        let outcome = if interp.ends_with("ldconfig") && body.trim().is_empty() {
            Outcome::NoEffect(format!(
                "{shown}: the libraries are in the loader's default directories, found without a cache entry"
            ))
        } else {
            Outcome::NotRun(format!(
                "{shown}: the rpm backend does not run or emulate scriptlets yet"
            ))
        };
        out.push(ScriptRecord { package: package.clone(), script: what.into(), outcome });
    }
    out
}
