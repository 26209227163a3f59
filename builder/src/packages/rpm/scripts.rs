//! Scriptlets: which ones a package carries, for the report.

/// What each install-time scriptlet of a package is replaced by: nothing is run in a build.
/// rdma-core's packages (redhat/rdma-core.spec) have `%post -p /sbin/ldconfig` (libibverbs,
/// librdmacm: their libraries are in /usr/lib64, which the dynamic loader searches without a
/// cache entry) and rdma-core's `%post` (udevadm trigger, systemd presets: a container runs
/// neither udev nor systemd).
pub(crate) fn scriptlets(h: &erdma_rpm::header::Header) -> Vec<String> {
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
