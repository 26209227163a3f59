//! `update-alternatives --install` as dpkg's update-alternatives(1) leaves the image: the
//! administrative file `/var/lib/dpkg/alternatives/NAME`, the link `LINK -> /etc/alternatives/NAME`
//! and `/etc/alternatives/NAME -> PATH`, and the same for each slave the chosen alternative has.
//!
//! What the real tool does that this follows (checked against it in the tests): in the
//! administrative file slaves are sorted by name and alternatives by path; in auto mode the
//! highest priority wins, the current choice staying on a tie; a slave whose file does not
//! exist gets no link; manual mode keeps the current choice. Not written:
//! `/var/log/alternatives.log` (a log with wall-clock times).
use std::collections::BTreeMap;

use crate::packages::image;

use crate::error::{Error, Result};
use crate::packages::PackageError;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;

const ADMIN: &str = "var/lib/dpkg/alternatives";

/// One `update-alternatives --install`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Install {
    /// The package whose script runs it, for errors.
    pub(super) package: String,
    pub(super) link: String,
    pub(super) name: String,
    pub(super) path: String,
    pub(super) priority: i64,
    /// `(link, name, path)` of each `--slave`.
    pub(super) slaves: Vec<(String, String, String)>,
}

impl Install {
    /// The call, for errors.
    fn command(&self) -> String {
        format!(
            "update-alternatives --install {} {} {} {}",
            self.link, self.name, self.path, self.priority
        )
    }

    /// Reads `update-alternatives [--quiet] --install LINK NAME PATH PRIORITY [--slave LINK
    /// NAME PATH]…`; `None` for any other form.
    pub(super) fn parse(package: &str, words: &[String]) -> Option<Install> {
        let mut w: Vec<&str> = words[1..].iter().map(String::as_str).collect();
        w.retain(|a| *a != "--quiet");
        let ["--install", link, name, path, priority, rest @ ..] = w.as_slice() else {
            return None;
        };
        let priority: i64 = priority.parse().ok()?;
        let plain = |s: &str| !s.is_empty() && !s.contains('$') && !s.contains('`');
        let abs = |s: &str| s.starts_with('/') && plain(s);
        let name_ok = |s: &str| plain(s) && !s.contains('/');
        if !(abs(link) && abs(path) && name_ok(name)) {
            return None;
        }
        let mut slaves = Vec::new();
        let mut rest = rest;
        while let ["--slave", l, n, p, tail @ ..] = rest {
            if !(abs(l) && abs(p) && name_ok(n)) {
                return None;
            }
            slaves.push((l.to_string(), n.to_string(), p.to_string()));
            rest = tail;
        }
        rest.is_empty().then(|| Install {
            package: package.to_string(),
            link: link.to_string(),
            name: name.to_string(),
            path: path.to_string(),
            priority,
            slaves,
        })
    }
}

/// A link group as the administrative file holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Group {
    auto: bool,
    link: String,
    /// name -> link, sorted by name.
    slaves: BTreeMap<String, String>,
    /// path -> (priority, slave name -> path), sorted by path.
    choices: BTreeMap<String, (i64, BTreeMap<String, String>)>,
}

impl Group {
    fn parse(text: &str) -> Option<Group> {
        let mut lines = text.split('\n');
        let auto = match lines.next()? {
            "auto" => true,
            "manual" => false,
            _ => return None,
        };
        let link = lines.next()?.to_string();
        let mut slave_names = Vec::new();
        let mut slaves = BTreeMap::new();
        loop {
            let name = lines.next()?;
            if name.is_empty() {
                break;
            }
            let l = lines.next()?;
            slave_names.push(name.to_string());
            slaves.insert(name.to_string(), l.to_string());
        }
        let mut choices = BTreeMap::new();
        loop {
            let path = lines.next()?;
            if path.is_empty() {
                break;
            }
            let priority = lines.next()?.parse().ok()?;
            let mut paths = BTreeMap::new();
            for n in &slave_names {
                let p = lines.next()?;
                if !p.is_empty() {
                    paths.insert(n.clone(), p.to_string());
                }
            }
            choices.insert(path.to_string(), (priority, paths));
        }
        Some(Group { auto, link, slaves, choices })
    }

    fn render(&self) -> String {
        let mut s = format!("{}\n{}\n", if self.auto { "auto" } else { "manual" }, self.link);
        for (n, l) in &self.slaves {
            s.push_str(&format!("{n}\n{l}\n"));
        }
        s.push('\n');
        for (path, (priority, paths)) in &self.choices {
            s.push_str(&format!("{path}\n{priority}\n"));
            for n in self.slaves.keys() {
                s.push_str(paths.get(n).map_or("", String::as_str));
                s.push('\n');
            }
        }
        s.push('\n');
        s
    }
}

/// Applies `installs`, in order, over what the base and the layer hold.
pub(super) fn apply(
    installs: &[Install],
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
) -> Result<()> {
    let mut groups: BTreeMap<String, (Group, Option<String>)> = BTreeMap::new();
    for i in installs {
        if !image::exists(&i.path, base, layer)? {
            return Err(Error::from(PackageError::ScriptFails {
                package: i.package.clone(),
                script: "postinst".into(),
                command: i.command(),
                reason: format!("{} does not exist", i.path),
            }));
        }
        if !groups.contains_key(&i.name) {
            let admin = format!("{ADMIN}/{}", i.name);
            let text = base.read(&admin, 1 << 20)?;
            let group = match text {
                Some(t) => {
                    Group::parse(&String::from_utf8_lossy(&t)).ok_or_else(|| Error::Malformed {
                        what: "alternatives file",
                        reference: format!("/{admin}"),
                        reason: "not as update-alternatives writes it".into(),
                    })?
                }
                None => Group {
                    auto: true,
                    link: i.link.clone(),
                    slaves: BTreeMap::new(),
                    choices: BTreeMap::new(),
                },
            };
            let current = match base.kind(&format!("etc/alternatives/{}", i.name))? {
                Some(erdma_oci::rootfs::SnapEntry::Symlink(t)) => Some(t),
                _ => None,
            };
            groups.insert(i.name.clone(), (group, current));
        }
        let (group, current) = groups.get_mut(&i.name).expect("inserted above");
        if group.link != i.link {
            return Err(Error::from(PackageError::ScriptFails {
                package: i.package.clone(),
                script: "postinst".into(),
                command: i.command(),
                reason: format!("the link group {} has the link {}", i.name, group.link),
            }));
        }
        for (l, n, _) in &i.slaves {
            group.slaves.insert(n.clone(), l.clone());
        }
        let paths = i.slaves.iter().map(|(_, n, p)| (n.clone(), p.clone())).collect();
        group.choices.insert(i.path.clone(), (i.priority, paths));
        if group.auto {
            let best = group.choices.values().map(|(p, _)| *p).max().unwrap_or(i64::MIN);
            let keep = current
                .as_ref()
                .and_then(|c| group.choices.get(c))
                .is_some_and(|(p, _)| *p == best);
            if !keep {
                *current =
                    group.choices.iter().find(|(_, (p, _))| *p == best).map(|(k, _)| k.clone());
            }
        } else if current.is_none() {
            *current = Some(i.path.clone());
        }
    }
    for (name, (group, current)) in groups {
        layer.add_file(&format!("{ADMIN}/{name}"), group.render().into_bytes(), 0o644)?;
        let Some(chosen) = current else { continue };
        image::link(base, layer, &group.link, &format!("/etc/alternatives/{name}"))?;
        image::link(base, layer, &format!("/etc/alternatives/{name}"), &chosen)?;
        let paths = &group.choices[&chosen].1;
        for (sname, slink) in &group.slaves {
            match paths.get(sname) {
                Some(p) if image::exists(p, base, layer)? => {
                    image::link(base, layer, slink, &format!("/etc/alternatives/{sname}"))?;
                    image::link(base, layer, &format!("/etc/alternatives/{sname}"), p)?;
                }
                _ => {}
            }
        }
    }
    Ok(())
}
