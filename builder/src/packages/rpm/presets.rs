//! `systemctl preset UNIT…` as systemd's `systemctl` does it with no manager running (in an
//! image build; the rpm macros `%systemd_post` run it, through `systemd-update-helper
//! install-system-units` on EL9): for each unit, the first rule of the image's preset files
//! that matches its name says `enable` or `disable` (no rule: enable); enabling makes the
//! symlinks of the unit's `[Install]` section (`WantedBy=`, `RequiredBy=`, `UpheldBy=`,
//! `Alias=`, and the units its `Also=` names) under `/etc/systemd/system`, each to the unit file
//! where the unit search path finds it. Disabling a unit nothing enabled does nothing.
//!
//! Held against the real `systemctl --root` (systemd 252, as EL9 has it) in the tests. What
//! is not reproduced (templates and instances, specifiers, a link that exists and leads
//! elsewhere, a unit file that is a symlink) refuses, and the install goes to the sandbox.
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;
use erdma_oci::rootfs::SnapEntry;

use crate::error::{Error, Result};
use crate::packages::image;

/// Where preset files are read, in priority order (systemd's `system_preset_dirs`).
const PRESET_DIRS: &[&str] = &[
    "/etc/systemd/system-preset",
    "/run/systemd/system-preset",
    "/usr/local/lib/systemd/system-preset",
    "/usr/lib/systemd/system-preset",
    "/lib/systemd/system-preset",
];

/// The system unit search path with no manager running, in priority order (systemd's
/// `lookup_paths_init` for the system scope), as far as packages put units there.
const UNIT_DIRS: &[&str] = &[
    "/etc/systemd/system.control",
    "/run/systemd/system.control",
    "/run/systemd/transient",
    "/etc/systemd/system",
    "/etc/systemd/system.attached",
    "/run/systemd/system",
    "/run/systemd/system.attached",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];

/// Where `systemctl enable` puts the links (the system scope's persistent configuration).
const CONFIG: &str = "/etc/systemd/system";

/// One `systemctl preset` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Preset {
    pub(crate) call: crate::packages::users::Call,
    pub(crate) units: Vec<String>,
}

impl Preset {
    /// `systemctl [--no-reload] [-q] preset UNIT…` and EL9's
    /// `/usr/lib/systemd/systemd-update-helper install-system-units UNIT…` (which runs
    /// `systemctl --no-reload preset UNIT…`); `None` for other forms.
    pub(crate) fn parse(call: crate::packages::users::Call, words: &[String]) -> Option<Preset> {
        let cmd = words.first()?.rsplit('/').next()?;
        let rest: Vec<&String> = match cmd {
            "systemctl" => {
                let mut it = words[1..].iter().skip_while(|w| {
                    matches!(w.as_str(), "--no-reload" | "-q" | "--quiet" | "--system")
                });
                if it.next()?.as_str() != "preset" {
                    return None;
                }
                it.collect()
            }
            "systemd-update-helper" if words.get(1)?.as_str() == "install-system-units" => {
                words[2..].iter().collect()
            }
            _ => return None,
        };
        let ok = |u: &str| {
            u.contains('.')
                && !u.starts_with('-')
                && u.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:\\".contains(&b))
        };
        if rest.iter().any(|u| !ok(u)) {
            return None;
        }
        Some(Preset { call, units: rest.into_iter().cloned().collect() })
    }
}

/// A rule of a preset file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    enable: bool,
    pattern: String,
}

/// Applies the calls in order over the image (the base with `layer` over it, every package
/// unpacked) and returns the links made. An image without `systemctl` gets nothing: the call
/// fails there, and the scriptlets run it `|| :`.
pub(crate) fn apply(
    presets: &[Preset],
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
) -> Result<Vec<String>> {
    let mut made = Vec::new();
    if presets.is_empty() {
        return Ok(made);
    }
    let has_systemctl = ["/usr/bin/systemctl", "/bin/systemctl"]
        .iter()
        .map(|p| image::exists(p, base, layer))
        .collect::<Result<Vec<bool>>>()?
        .into_iter()
        .any(|e| e);
    if !has_systemctl {
        return Ok(made);
    }
    let rules = rules(base, layer)?;
    for p in presets {
        let refuse = |why: String| -> Error {
            crate::packages::scripts::needs_sandbox(
                &p.call.package,
                &p.call.script,
                format!("{} ({why})", p.call.command),
            )
        };
        for unit in &p.units {
            let enable = rules.iter().find(|r| glob(&r.pattern, unit)).is_none_or(|r| r.enable);
            if !enable {
                continue;
            }
            let mut links = Vec::new();
            install_links(unit, base, layer, &mut vec![unit.clone()], &mut links, &refuse)?;
            for (at, to) in links {
                match image::kind(&at, base, layer)? {
                    Some(SnapEntry::Symlink(t)) if t == to => continue,
                    None => {}
                    Some(_) => return Err(refuse(format!("{at} exists and is not that link"))),
                }
                let dir = image::parent(&at);
                image::ensure_dir(dir, base, layer)?;
                image::link(base, layer, &at, &to)?;
                made.push(at);
            }
        }
    }
    Ok(made)
}

/// The rules of the image's preset files: the `*.preset` files of [`PRESET_DIRS`] (a name in
/// an earlier directory hides the same name in later ones), by file name, each file's lines in
/// order.
fn rules(base: &dyn BaseFiles, layer: &LayerContents) -> Result<Vec<Rule>> {
    let mut files: std::collections::BTreeMap<String, String> = Default::default();
    for dir in PRESET_DIRS {
        for name in image::list(dir, base, layer)? {
            if name.ends_with(".preset") && !files.contains_key(&name) {
                files.insert(name.clone(), format!("{dir}/{name}"));
            }
        }
    }
    let mut rules = Vec::new();
    for path in files.values() {
        let Some(text) = image::read(path, base, layer, 1 << 20)? else { continue };
        for line in String::from_utf8_lossy(&text).lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with(['#', ';']) {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(verb), Some(pattern)) = (words.next(), words.next()) else { continue };
            match verb {
                "enable" => rules.push(Rule { enable: true, pattern: pattern.into() }),
                "disable" => rules.push(Rule { enable: false, pattern: pattern.into() }),
                _ => {}
            }
        }
    }
    Ok(rules)
}

/// The unit file of `unit`: the first directory of [`UNIT_DIRS`] holding a regular file or a
/// symlink of that name; `Err(path)` for a symlink (not followed here).
fn find_unit(
    unit: &str,
    base: &dyn BaseFiles,
    layer: &LayerContents,
) -> Result<Option<std::result::Result<String, String>>> {
    for dir in UNIT_DIRS {
        let p = format!("{dir}/{unit}");
        match image::kind(&p, base, layer)? {
            Some(SnapEntry::File(_)) => return Ok(Some(Ok(p))),
            Some(SnapEntry::Symlink(_)) => return Ok(Some(Err(p))),
            _ => {}
        }
    }
    Ok(None)
}

/// The links enabling `unit` makes (`(link, target)`), its `Also=` units' included.
fn install_links(
    unit: &str,
    base: &dyn BaseFiles,
    layer: &LayerContents,
    seen: &mut Vec<String>,
    links: &mut Vec<(String, String)>,
    refuse: &dyn Fn(String) -> Error,
) -> Result<()> {
    if unit.contains('@') {
        return Err(refuse(format!("{unit} is a template or an instance")));
    }
    let path = find_unit(unit, base, layer)?
        .ok_or_else(|| refuse(format!("the image has no unit file {unit}")))?
        .map_err(|link| refuse(format!("{link} is a symlink")))?;
    let text = image::read(&path, base, layer, 1 << 20)?
        .ok_or_else(|| refuse(format!("{path} cannot be read")))?;
    let mut section = String::new();
    for raw in String::from_utf8_lossy(&text).lines() {
        let line = raw.trim();
        if line.starts_with(['#', ';']) || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            continue;
        }
        if section != "Install" {
            continue;
        }
        if line.ends_with('\\') {
            return Err(refuse(format!("{path} continues a line in [Install]")));
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        let (key, value) = (key.trim(), value.trim());
        if value.contains(['%', '"', '\'']) {
            return Err(refuse(format!("{path} has `{key}={value}` (specifiers or quotes)")));
        }
        let suffix = match key {
            "WantedBy" => Some("wants"),
            "RequiredBy" => Some("requires"),
            "UpheldBy" => Some("upholds"),
            _ => None,
        };
        match (key, suffix) {
            (_, Some(suffix)) => {
                for target in value.split_whitespace() {
                    links.push((format!("{CONFIG}/{target}.{suffix}/{unit}"), path.clone()));
                }
            }
            ("Alias", _) => {
                for alias in value.split_whitespace() {
                    if alias != unit {
                        links.push((format!("{CONFIG}/{alias}"), path.clone()));
                    }
                }
            }
            ("Also", _) => {
                for also in value.split_whitespace() {
                    if !seen.iter().any(|s| s == also) {
                        seen.push(also.to_string());
                        install_links(also, base, layer, seen, links, refuse)?;
                    }
                }
            }
            ("DefaultInstance", _) => {
                return Err(refuse(format!("{path} is a template (DefaultInstance=)")))
            }
            _ => {}
        }
    }
    Ok(())
}

/// fnmatch(3) without flags, for the patterns preset files use: `*`, `?`, literals.
fn glob(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packages::users::Call;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn preset_forms() {
        let c = || Call::new("p", "%post", &[]);
        let p = Preset::parse(c(), &w("systemctl --no-reload preset sshd.service sshd.socket"));
        assert_eq!(p.unwrap().units, ["sshd.service", "sshd.socket"]);
        let p = Preset::parse(
            c(),
            &w("/usr/lib/systemd/systemd-update-helper install-system-units chronyd.service"),
        );
        assert_eq!(p.unwrap().units, ["chronyd.service"]);
        for refused in [
            "systemctl enable x.service",
            "systemctl preset $UNIT",
            "systemctl preset",
            "systemd-update-helper remove-system-units x.service",
        ] {
            let p = Preset::parse(c(), &w(refused));
            assert!(p.is_none() || p.unwrap().units.is_empty(), "{refused}");
        }
        assert!(glob("*", "a.service") && glob("sshd.*", "sshd.service"));
        assert!(!glob("sshd.service", "sshd.socket") && glob("s?hd.service", "sshd.service"));
    }

    /// The real `systemctl --root` (systemd 252, Debian 12's, the release EL9 has) is the
    /// oracle: over a root with preset files like EL9's (`90-default.preset` enabling some
    /// units, `99-default-disable.preset` disabling the rest) and units with `WantedBy=`,
    /// `RequiredBy=`, `Alias=`, `Also=`, the links `systemctl preset` makes are the links
    /// the emulation makes.
    #[test]
    fn presets_as_systemctl_applies_them() {
        let systemctl = std::path::Path::new("/usr/bin/systemctl");
        if !systemctl.exists() || !rustix::process::geteuid().is_root() {
            eprintln!("skipped: needs root and systemctl (systemd)");
            return;
        }
        let files: &[(&str, &str)] = &[
            ("usr/lib/systemd/system-preset/90-default.preset", "# EL-like\nenable sshd.service\nenable chronyd.service\nenable erdma-a.*\n"),
            ("usr/lib/systemd/system-preset/99-default-disable.preset", "disable *\n"),
            ("etc/systemd/system-preset/10-local.preset", "disable chronyd.service\n"),
            ("usr/lib/systemd/system/sshd.service", "[Unit]\nDescription=x\nWantedBy=nothing.target\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\nAlso=sshd-keygen.target\n"),
            ("usr/lib/systemd/system/sshd-keygen.target", "[Unit]\nDescription=k\n[Install]\nWantedBy=sshd.service\n"),
            ("usr/lib/systemd/system/chronyd.service", "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"),
            ("usr/lib/systemd/system/erdma-a.service", "[Service]\nExecStart=/bin/true\n[Install]\nRequiredBy=network.target\nAlias=erdma-alias.service\n"),
            ("usr/lib/systemd/system/other.service", "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"),
        ];
        let units = ["sshd.service", "chronyd.service", "erdma-a.service", "other.service"];
        let root = tempfile::tempdir().unwrap();
        for (p, c) in files {
            let at = root.path().join(p);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(at, c).unwrap();
        }
        std::fs::create_dir_all(root.path().join("etc/systemd/system")).unwrap();
        let out = std::process::Command::new(systemctl)
            .arg(format!("--root={}", root.path().display()))
            .arg("preset")
            .args(units)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let mut real = Vec::new();
        for e in walk(&root.path().join("etc/systemd/system")) {
            let rel = e.strip_prefix(root.path()).unwrap().to_string_lossy().into_owned();
            let to = std::fs::read_link(&e).unwrap().to_string_lossy().into_owned();
            real.push((format!("/{rel}"), to));
        }
        real.sort();

        let f = |s: &str| SnapEntry::File(Some(s.as_bytes().to_vec()));
        let mut entries: Vec<(&str, SnapEntry)> = files.iter().map(|(p, c)| (*p, f(c))).collect();
        entries.push(("usr/bin/systemctl", f("")));
        for d in [
            "usr/lib/systemd",
            "usr/lib/systemd/system",
            "usr/lib/systemd/system-preset",
            "etc/systemd",
            "etc/systemd/system",
            "etc/systemd/system-preset",
        ] {
            entries.push((d, SnapEntry::Dir));
        }
        let b = crate::packages::testing::base(&entries);
        let mut layer = LayerContents::new();
        let preset = Preset::parse(
            Call::new("p", "%post", &[]),
            &w(&format!("systemctl --no-reload preset {}", units.join(" "))),
        )
        .unwrap();
        let mut ours: Vec<(String, String)> = apply(&[preset], &b, &mut layer)
            .unwrap()
            .into_iter()
            .map(|at| {
                let real = at.trim_start_matches('/').to_string();
                match &layer.get(&real).unwrap().kind {
                    erdma_oci::layer::EntryKind::Symlink(t) => (at, t.clone()),
                    k => panic!("{at}: {k:?}"),
                }
            })
            .collect();
        ours.sort();
        eprintln!("systemctl preset made {real:?}");
        assert_eq!(ours, real);
        assert!(!real.is_empty());
    }

    fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_symlink() {
                out.push(p);
            } else if p.is_dir() {
                out.extend(walk(&p));
            }
        }
        out
    }
}
