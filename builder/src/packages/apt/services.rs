//! Services that maintainer scripts register, as the helpers leave them in an image that is
//! being built, where no init system runs:
//! - `update-rc.d NAME defaults` (init-system-helpers' `/usr/sbin/update-rc.d`): without
//!   insserv or OpenRC in the image it links `/etc/rcN.d/S01NAME` for each runlevel of the
//!   init script's `Default-Start` and `K01NAME` for each of `Default-Stop`, all to
//!   `../init.d/NAME`, unless the script has links already; with no `/run/systemd/system` it
//!   reloads nothing.
//! - `deb-systemd-helper enable UNIT` (init-system-helpers' `/usr/bin/deb-systemd-helper`),
//!   where the image has no `systemctl` (with one, the helper runs `systemctl preset`): for each
//!   `WantedBy=`/`RequiredBy=` target of the unit and of the units its `Also=` names, the link
//!   `/etc/systemd/system/TARGET.wants/UNIT` to the unit file, and its `Alias=` link; each link
//!   recorded in `/var/lib/systemd/deb-systemd-helper-enabled/UNIT.dsh-also` and marked done
//!   by an empty file of the same name under that directory, so that a link marked done is
//!   never made again.
//! - `invoke-rc.d`, `deb-systemd-helper unmask` of a unit nobody masked, and what scripts run
//!   only where systemd is running (`[ -d /run/systemd/system ]`): nothing. A build starts no
//!   service, as `policy-rc.d` denies it in `docker build`.
//!
//! Anything these cannot reproduce (a template unit, systemctl or insserv in the image, a unit
//! file the image lacks) stops the emulation with [`PackageError::Script`](crate::packages::PackageError::Script), which sends the
//! build to the sandbox where the real helper runs.
use crate::error::{Error, Result};
use crate::packages::image;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;
use erdma_oci::rootfs::SnapEntry;

/// deb-systemd-helper's state for units of the system instance.
const ENABLED: &str = "/var/lib/systemd/deb-systemd-helper-enabled";
/// Where deb-systemd-helper looks for a unit file, in its order (`find_unit`).
const UNIT_DIRS: &[&str] =
    &["/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system"];

/// One service registration a script makes, in script order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Registration {
    pub(super) package: String,
    /// The command as the script has it, for errors.
    pub(super) command: String,
    pub(super) what: What,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum What {
    /// `update-rc.d NAME defaults` (`disabled`: `defaults-disabled`, start links as `K01`).
    RcDefaults { name: String, disabled: bool },
    /// `deb-systemd-helper enable UNIT…`.
    Enable { units: Vec<String> },
}

/// What a script command amounts to here.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Parsed {
    Emulate(Registration),
    /// Nothing to do in a build: why.
    NoEffect(String),
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && !n.starts_with('-')
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.:@\\".contains(&b))
}

/// `update-rc.d`, `invoke-rc.d` and `deb-systemd-helper` commands this module reproduces;
/// `None` for any other form. `base`: for `unmask`, which acts only on a masked unit.
pub(super) fn parse(
    package: &str,
    words: &[String],
    base: &dyn BaseFiles,
) -> Result<Option<Parsed>> {
    let command = words.join(" ");
    let reg = |what| {
        Parsed::Emulate(Registration { package: package.into(), command: command.clone(), what })
    };
    let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
    Ok(match (words[0].rsplit('/').next().unwrap_or_default(), args.as_slice()) {
        ("update-rc.d", [name, action]) if valid_name(name) && !name.contains('/') => match *action
        {
            "defaults" => Some(reg(What::RcDefaults { name: name.to_string(), disabled: false })),
            "defaults-disabled" => {
                Some(reg(What::RcDefaults { name: name.to_string(), disabled: true }))
            }
            _ => None,
        },
        ("invoke-rc.d", rest) => {
            let rest: Vec<&str> = rest
                .iter()
                .copied()
                .filter(|a| !matches!(*a, "--quiet" | "--skip-systemd-native"))
                .collect();
            match rest.as_slice() {
                // Every action (debhelper passes `$_dh_action`, start or restart) only acts on
                // a running service.
                [name, action]
                    if valid_name(name)
                        && (action.starts_with('$')
                            || matches!(
                                *action,
                                "start" | "restart" | "stop" | "reload" | "force-reload" | "try-restart"
                            )) =>
                {
                    Some(Parsed::NoEffect(format!(
                        "invoke-rc.d {name} {action}: a build starts and stops no service (policy-rc.d denies it in docker build)"
                    )))
                }
                _ => None,
            }
        }
        ("deb-systemd-helper", rest) => {
            let rest: Vec<&str> = rest.iter().copied().filter(|a| *a != "--quiet").collect();
            match rest.as_slice() {
                ["enable", units @ ..]
                    if !units.is_empty()
                        && units.iter().all(|u| valid_name(u) && !u.contains('@')) =>
                {
                    Some(reg(What::Enable { units: units.iter().map(|u| u.to_string()).collect() }))
                }
                ["unmask", units @ ..]
                    if !units.is_empty() && units.iter().all(|u| valid_name(u)) =>
                {
                    for u in units {
                        if base.kind(&format!("etc/systemd/system/{u}"))?.is_some() {
                            return Ok(None);
                        }
                    }
                    Some(Parsed::NoEffect(format!(
                        "deb-systemd-helper unmask {}: the image masks no such unit",
                        units.join(" ")
                    )))
                }
                // Tests, answered by `truth`.
                ["was-enabled" | "debian-installed" | "is-enabled", ..] => {
                    Some(Parsed::NoEffect("a test".into()))
                }
                _ => None,
            }
        }
        _ => None,
    })
}

/// The status of a test these helpers answer, where it is certain before anything is
/// installed: `deb-systemd-helper was-enabled UNIT` (true while the base has no state for the
/// unit: "was-enabled defaults to true, so new installations run enable") and
/// `debian-installed UNIT`; `[ -d /run/systemd/system ]` (no systemd runs in a build).
pub(super) fn truth(words: &[String], base: &dyn BaseFiles) -> Option<bool> {
    let w: Vec<&str> = words.iter().map(String::as_str).filter(|w| *w != "--quiet").collect();
    match w.as_slice() {
        ["deb-systemd-helper", "was-enabled", units @ ..] if !units.is_empty() => {
            // Any state in the base: the answer depends on its links; not told here.
            let mut fresh = true;
            for u in units {
                fresh &= base.kind(&dsh_state(u)[1..]).ok()?.is_none();
            }
            fresh.then_some(true)
        }
        ["deb-systemd-helper", "debian-installed", units @ ..] if !units.is_empty() => {
            let mut any = false;
            for u in units {
                any |= base.kind(&dsh_state(u)[1..]).ok()?.is_some();
            }
            Some(any)
        }
        ["[", "-d", "/run/systemd/system", "]"] | ["test", "-d", "/run/systemd/system"] => {
            Some(false)
        }
        _ => None,
    }
}

fn dsh_state(unit: &str) -> String {
    format!("{ENABLED}/{unit}.dsh-also")
}

/// Applies the registrations in order over the base and the layer.
pub(super) fn apply(
    regs: &[Registration],
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
) -> Result<()> {
    for r in regs {
        let refuse = |why: String| {
            crate::packages::scripts::needs_sandbox(
                &r.package,
                "postinst",
                format!("{} ({why})", r.command),
            )
        };
        match &r.what {
            What::RcDefaults { name, disabled } => {
                rc_defaults(name, *disabled, base, layer, &refuse)?
            }
            What::Enable { units } => {
                for u in units {
                    enable(u, base, layer, &refuse)?;
                }
            }
        }
    }
    Ok(())
}

fn any_exists(
    paths: &[&str],
    base: &dyn BaseFiles,
    layer: &LayerContents,
) -> Result<Option<String>> {
    for p in paths {
        if image::exists(p, base, layer)? {
            return Ok(Some(p.to_string()));
        }
    }
    Ok(None)
}

fn rc_defaults(
    name: &str,
    disabled: bool,
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
    refuse: &dyn Fn(String) -> Error,
) -> Result<()> {
    let insserv = any_exists(&["/sbin/insserv", "/usr/lib/insserv/insserv"], base, layer)?;
    if insserv.is_some() && image::exists("/etc/insserv.conf", base, layer)? {
        return Err(refuse("insserv orders the links in this image".into()));
    }
    if image::exists("/sbin/openrc", base, layer)? {
        return Err(refuse("OpenRC is in this image".into()));
    }
    // Links the script has already, in any runlevel: left as they are.
    for lvl in ["0", "1", "2", "3", "4", "5", "6", "S"] {
        let dir = format!("/etc/rc{lvl}.d");
        let real = image::real(&dir, base)?;
        let mut names = base.list(&real)?;
        let prefix = format!("{real}/");
        names
            .extend(layer.files().filter_map(|(p, _)| p.strip_prefix(&prefix).map(str::to_string)));
        let has = names.iter().any(|n| {
            let b = n.as_bytes();
            b.len() == 3 + name.len()
                && (b[0] == b'S' || b[0] == b'K')
                && b[1].is_ascii_digit()
                && b[2].is_ascii_digit()
                && &n[3..] == name
                && image::exists(&format!("{dir}/{n}"), base, layer).unwrap_or(false)
        });
        if has {
            return Ok(());
        }
    }
    let script = format!("/etc/init.d/{name}");
    let text = image::read(&script, base, layer, 1 << 20)?
        .ok_or_else(|| refuse(format!("the image has no {script} to read")))?;
    let (start, stop) = default_runlevels(&String::from_utf8_lossy(&text));
    let start_kind = if disabled { "K" } else { "S" };
    for (levels, kind) in [(start, start_kind), (stop, "K")] {
        for lvl in levels {
            if !matches!(lvl.as_str(), "0" | "1" | "2" | "3" | "4" | "5" | "6" | "S") {
                return Err(refuse(format!("{script} names the runlevel {lvl}")));
            }
            let dir = format!("/etc/rc{lvl}.d");
            image::ensure_dir(&dir, base, layer)?;
            let at = format!("{dir}/{kind}01{name}");
            if !image::exists(&at, base, layer)? {
                image::link(base, layer, &at, &format!("../init.d/{name}"))?;
            }
        }
    }
    Ok(())
}

/// `Default-Start` and `Default-Stop` of an init script's LSB header, as update-rc.d reads
/// them (`### BEGIN INIT INFO` … `### END INIT INFO`).
fn default_runlevels(script: &str) -> (Vec<String>, Vec<String>) {
    let (mut start, mut stop) = (Vec::new(), Vec::new());
    let mut inside = false;
    for line in script.lines() {
        if line.trim_end() == "### BEGIN INIT INFO" {
            inside = true;
        } else if line.trim_end() == "### END INIT INFO" {
            break;
        } else if inside {
            let split = |v: &str| v.split_whitespace().map(str::to_string).collect();
            if let Some(v) = line.strip_prefix("# Default-Start:") {
                start = split(v);
            } else if let Some(v) = line.strip_prefix("# Default-Stop:") {
                stop = split(v);
            }
        }
    }
    (start, stop)
}

/// deb-systemd-helper's `find_unit`: the first of its directories with a regular file of that
/// name, as the path there (not resolved: `/lib/systemd/system/…` on a merged-`/usr` image).
fn find_unit(unit: &str, base: &dyn BaseFiles, layer: &LayerContents) -> Result<Option<String>> {
    for dir in UNIT_DIRS {
        let p = format!("{dir}/{unit}");
        if matches!(image::kind(&p, base, layer)?, Some(SnapEntry::File(_))) {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

/// A link deb-systemd-helper makes: `src` (under /etc/systemd/system) to `dest`.
struct Link {
    src: String,
    dest: String,
}

/// `get_link_closure`: the links enabling `unit` makes, its `Also=` units' included.
fn closure(
    unit: &str,
    base: &dyn BaseFiles,
    layer: &LayerContents,
    visited: &mut Vec<String>,
    refuse: &dyn Fn(String) -> Error,
) -> Result<Vec<Link>> {
    let path = find_unit(unit, base, layer)?
        .ok_or_else(|| refuse(format!("the image has no unit file {unit}")))?;
    let text = image::read(&path, base, layer, 1 << 20)?
        .ok_or_else(|| refuse(format!("{path} cannot be read")))?;
    let text = String::from_utf8_lossy(&text);
    let mut links = Vec::new();
    let mut wants = Vec::new();
    let unquote = |v: &str| -> String {
        let v = v.trim();
        for q in ['"', '\''] {
            if let Some(inner) = v.strip_prefix(q).and_then(|x| x.strip_suffix(q)) {
                return inner.to_string();
            }
        }
        v.to_string()
    };
    for line in text.lines() {
        let line = line.trim_start();
        let Some((key, value)) = line.split_once('=') else { continue };
        let lower = key.to_ascii_lowercase();
        // The helper matches the keys in any case but names the directory only for these
        // spellings.
        if matches!(lower.as_str(), "wantedby" | "requiredby")
            && !matches!(key, "WantedBy" | "RequiredBy")
        {
            return Err(refuse(format!("{path} spells the key {key}")));
        }
        match lower.as_str() {
            k @ ("wantedby" | "requiredby") => {
                let suffix = if k == "wantedby" { "wants" } else { "requires" };
                for v in value.split_whitespace() {
                    wants.push(format!("/etc/systemd/system/{}.{suffix}", unquote(v)));
                }
            }
            "also" => {
                for v in value.split_whitespace() {
                    let v = unquote(v);
                    if v != unit && !visited.contains(&v) {
                        visited.push(v.clone());
                        links.extend(closure(&v, base, layer, visited, refuse)?);
                    }
                }
            }
            "alias" => {
                let values: Vec<&str> = value.split_whitespace().collect();
                // The helper names the link after the whole value: one name, no blanks.
                if values.len() > 1 || value.trim() != value {
                    return Err(refuse(format!("{path} has `Alias={value}`")));
                }
                if let Some(v) = values.first() {
                    if unquote(v) != unit {
                        links.push(Link {
                            src: format!("/etc/systemd/system/{value}"),
                            dest: path.clone(),
                        });
                    }
                }
            }
            "defaultinstance" => {
                return Err(refuse(format!("{path} is a template (DefaultInstance=)")))
            }
            _ => {}
        }
    }
    for w in wants {
        links.push(Link { src: format!("{w}/{unit}"), dest: path.clone() });
    }
    Ok(links)
}

/// `deb-systemd-helper enable UNIT` where the image has no systemctl (`make_systemd_links`).
fn enable(
    unit: &str,
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
    refuse: &dyn Fn(String) -> Error,
) -> Result<()> {
    if let Some(s) = any_exists(&["/bin/systemctl", "/usr/bin/systemctl"], base, layer)? {
        return Err(refuse(format!("the image has {s}, and the helper runs it")));
    }
    let links = closure(unit, base, layer, &mut Vec::new(), refuse)?;
    let state = dsh_state(unit);
    for link in links {
        // record_in_statefile: the link's line, once.
        let mut text = image::read(&state, base, layer, 1 << 20)?
            .map(|t| String::from_utf8_lossy(&t).into_owned())
            .unwrap_or_default();
        if !text.lines().any(|l| l == link.src) {
            text.push_str(&link.src);
            text.push('\n');
        }
        image::ensure_dir(ENABLED, base, layer)?;
        layer.add_file(&image::real(&state, base)?, text.into_bytes(), 0o644)?;
        let done = link.src.replacen("/etc/systemd/system/", &format!("{ENABLED}/"), 1);
        if image::exists(&done, base, layer)? {
            continue;
        }
        if !matches!(image::kind(&link.src, base, layer)?, Some(SnapEntry::Symlink(_))) {
            image::ensure_dir(parent(&link.src), base, layer)?;
            image::link(base, layer, &link.src, &link.dest)?;
        }
        image::ensure_dir(parent(&done), base, layer)?;
        layer.add_file(&image::real(&done, base)?, Vec::new(), 0o644)?;
    }
    Ok(())
}

fn parent(p: &str) -> &str {
    p.rsplit_once('/').map(|(d, _)| d).unwrap_or("/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packages::testing::base;
    use erdma_oci::layer::EntryKind;

    /// uuid-runtime 2.38.1-5+deb12u3's units (Debian 12), as its package lays them out.
    fn uuidd(layer: &mut LayerContents) {
        layer
            .add_file(
                "usr/lib/systemd/system/uuidd.service",
                b"[Unit]\nRequires=uuidd.socket\n[Install]\nAlso=uuidd.socket\n".to_vec(),
                0o644,
            )
            .unwrap();
        layer
            .add_file(
                "usr/lib/systemd/system/uuidd.socket",
                b"[Socket]\nListenStream=/run/uuidd/request\n\n[Install]\nWantedBy=sockets.target\n"
                    .to_vec(),
                0o644,
            )
            .unwrap();
    }

    fn refuse(why: String) -> Error {
        crate::packages::apt::scripts::needs_sandbox("p", why)
    }

    fn file(layer: &LayerContents, p: &str) -> Option<String> {
        match &layer.get(p)?.kind {
            EntryKind::File(c) => Some(String::from_utf8_lossy(c).into_owned()),
            EntryKind::Symlink(t) => Some(format!("-> {t}")),
            k => Some(format!("{k:?}")),
        }
    }

    /// What deb-systemd-helper left for uuid-runtime's postinst in `docker build` (Debian
    /// 12): the socket's link under the path the helper found first (`/lib/…`), each enable's
    /// state file listing it, and one mark that it was made.
    #[test]
    fn enable_follows_also_and_marks_each_link_once() {
        let b = base(&[]);
        let mut layer = LayerContents::new();
        uuidd(&mut layer);
        enable("uuidd.service", &b, &mut layer, &refuse).unwrap();
        enable("uuidd.socket", &b, &mut layer, &refuse).unwrap();
        let link = "etc/systemd/system/sockets.target.wants/uuidd.socket";
        assert_eq!(file(&layer, link).unwrap(), "-> /lib/systemd/system/uuidd.socket");
        let line = "/etc/systemd/system/sockets.target.wants/uuidd.socket\n";
        let state = "var/lib/systemd/deb-systemd-helper-enabled";
        assert_eq!(file(&layer, &format!("{state}/uuidd.service.dsh-also")).unwrap(), line);
        assert_eq!(file(&layer, &format!("{state}/uuidd.socket.dsh-also")).unwrap(), line);
        assert_eq!(
            file(&layer, &format!("{state}/sockets.target.wants/uuidd.socket")).unwrap(),
            ""
        );
        assert_eq!(layer.get(&format!("{state}/sockets.target.wants")).unwrap().mode, 0o755);
    }

    /// With systemctl in the image the helper runs `systemctl preset`; a unit the image lacks
    /// fails it: neither is emulated.
    #[test]
    fn systemctl_or_a_missing_unit_is_not_emulated() {
        let b = base(&[("usr/bin", SnapEntry::Dir), ("usr/bin/systemctl", SnapEntry::File(None))]);
        let mut layer = LayerContents::new();
        uuidd(&mut layer);
        let e = enable("uuidd.service", &b, &mut layer, &refuse).unwrap_err().to_string();
        assert!(e.contains("/usr/bin/systemctl"), "{e}");
        let b = base(&[]);
        let e = enable("uuidd.service", &b, &mut LayerContents::new(), &refuse).unwrap_err();
        assert!(e.to_string().contains("no unit file uuidd.service"), "{e}");
    }

    #[test]
    fn rc_links_from_the_lsb_header_unless_the_script_has_some() {
        let script = b"#!/bin/sh\n### BEGIN INIT INFO\n# Default-Start:     2 3 4 5\n# Default-Stop:      0 1 6\n### END INIT INFO\n".to_vec();
        let b = base(&[]);
        let mut layer = LayerContents::new();
        layer.add_file("etc/init.d/uuidd", script.clone(), 0o755).unwrap();
        rc_defaults("uuidd", false, &b, &mut layer, &refuse).unwrap();
        assert_eq!(file(&layer, "etc/rc2.d/S01uuidd").unwrap(), "-> ../init.d/uuidd");
        assert_eq!(file(&layer, "etc/rc6.d/K01uuidd").unwrap(), "-> ../init.d/uuidd");
        assert!(layer.get("etc/rcS.d").is_none());
        // A link in any runlevel (the admin's K20): nothing is added.
        let b = base(&[
            ("etc/rc3.d", SnapEntry::Dir),
            ("etc/rc3.d/K20uuidd", SnapEntry::Symlink("../init.d/uuidd".into())),
        ]);
        let mut layer = LayerContents::new();
        layer.add_file("etc/init.d/uuidd", script, 0o755).unwrap();
        rc_defaults("uuidd", false, &b, &mut layer, &refuse).unwrap();
        assert!(layer.get("etc/rc2.d/S01uuidd").is_none());
        // insserv orders the links where it is installed.
        let b = base(&[
            ("sbin", SnapEntry::Dir),
            ("sbin/insserv", SnapEntry::File(None)),
            ("etc/insserv.conf", SnapEntry::File(None)),
        ]);
        assert!(rc_defaults("uuidd", false, &b, &mut layer, &refuse).is_err());
    }

    #[test]
    fn lsb_header_runlevels_as_update_rc_d_reads_them() {
        let script = "#!/bin/sh\n### BEGIN INIT INFO\n# Provides:          uuidd\n# Required-Start:    $time $local_fs $remote_fs\n# Default-Start:     2 3 4 5\n# Default-Stop:      0 1 6\n### END INIT INFO\n# Default-Start: 1\n";
        let (start, stop) = default_runlevels(script);
        assert_eq!(start, ["2", "3", "4", "5"]);
        assert_eq!(stop, ["0", "1", "6"]);
        assert_eq!(default_runlevels("# Default-Start: 2\n"), (vec![], vec![]));
    }

    #[test]
    fn helper_tests_answered_before_anything_is_installed() {
        let w = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let b = base(&[]);
        assert_eq!(
            truth(&w("deb-systemd-helper --quiet was-enabled uuidd.service"), &b),
            Some(true)
        );
        assert_eq!(truth(&w("deb-systemd-helper debian-installed uuidd.service"), &b), Some(false));
        assert_eq!(truth(&w("[ -d /run/systemd/system ]"), &b), Some(false));
        let b = base(&[(
            "var/lib/systemd/deb-systemd-helper-enabled/uuidd.service.dsh-also",
            SnapEntry::File(None),
        )]);
        assert_eq!(truth(&w("deb-systemd-helper --quiet was-enabled uuidd.service"), &b), None);
        assert_eq!(truth(&w("deb-systemd-helper debian-installed uuidd.service"), &b), Some(true));
    }
}
