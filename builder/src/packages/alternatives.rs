//! `--install` of an alternative, as the image's own tool leaves it, for both backends:
//! - dpkg's update-alternatives(1) (Debian, Ubuntu): the administrative file
//!   `/var/lib/dpkg/alternatives/NAME`, slaves sorted by name and alternatives by path, a
//!   blank line last; in auto mode the highest priority wins and the current choice stays on a
//!   tie; a slave whose file does not exist gets no link; manual mode keeps the current
//!   choice. Not written: `/var/log/alternatives.log` (a log with wall-clock times). Held
//!   against the real tool run with `--root` (the integration tests) and `apt-get install` in
//!   Docker.
//! - chkconfig's `alternatives` (EL, Alibaba Cloud Linux; `update-alternatives` there is the
//!   same program): `/var/lib/alternatives/NAME`, alternatives in the order they were added,
//!   slaves in the order given on the first install and sorted by their link on every later
//!   one, `[@FAMILY@]PRIORITY` lines, no blank line last; the first alternative of the highest
//!   priority wins; a slave link is made even where its file is missing, and removed where the
//!   chosen alternative has none; a group whose link no longer points at its best alternative
//!   is in manual mode. No log. Held against the real tool (chkconfig 1.24, EL8's 1.19.2
//!   alike), whose recorded runs are `testdata/alternatives-el/`.
//!
//! Both: `LINK -> /etc/alternatives/NAME -> PATH`, absolute. What either tool would do that is
//! not reproduced (chkconfig's reinstall of a registered path with a new priority, which
//! leaves the links on the old choice; `--initscript`; a link that is a regular file; a
//! missing directory for a link) is refused, which sends the install to the sandbox.
use crate::error::{Error, Result};
use crate::packages::image;
use crate::packages::PackageError;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;
use erdma_oci::rootfs::SnapEntry;

/// Whose alternatives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tool {
    /// dpkg's update-alternatives.
    Dpkg,
    /// chkconfig's alternatives.
    Chkconfig,
}

impl Tool {
    fn admin_dir(self) -> &'static str {
        match self {
            Tool::Dpkg => "/var/lib/dpkg/alternatives",
            Tool::Chkconfig => "/var/lib/alternatives",
        }
    }
}

const ALTDIR: &str = "/etc/alternatives";

/// One `--install`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Install {
    /// The package and script that run it, for errors.
    pub(crate) package: String,
    pub(crate) script: String,
    pub(crate) link: String,
    pub(crate) name: String,
    pub(crate) path: String,
    pub(crate) priority: i64,
    /// `(link, name, path)` of each `--slave`, in the order given.
    pub(crate) slaves: Vec<(String, String, String)>,
    /// chkconfig's `--family`.
    pub(crate) family: Option<String>,
}

impl Install {
    /// The call, for errors.
    /// This call's refusal: the install goes to the sandbox, or stops with `--no-sandbox`.
    fn needs_sandbox(&self, why: &str) -> Error {
        crate::packages::scripts::needs_sandbox(
            &self.package,
            &self.script,
            format!("{} ({why})", self.command()),
        )
    }

    /// This call's failure, as the tool would fail it: the install stops.
    fn fails(&self, reason: String) -> Error {
        Error::from(PackageError::ScriptFails {
            package: self.package.clone(),
            script: self.script.clone(),
            command: self.command(),
            reason,
        })
    }

    fn command(&self) -> String {
        format!(
            "alternatives --install {} {} {} {}",
            self.link, self.name, self.path, self.priority
        )
    }

    /// Reads an `--install` call as `tool` takes it: dpkg's `update-alternatives [--quiet]
    /// --install LINK NAME PATH PRIORITY [--slave LINK NAME PATH]…` (a decimal priority);
    /// chkconfig's `alternatives --install LINK NAME PATH PRIORITY` with `--slave` (or
    /// `--follower`) and `--family F` anywhere after the program name (a priority as
    /// `strtol(…, 0)` reads it: `010` is 8, `0x10` 16). `None` for any other form.
    pub(crate) fn parse(
        tool: Tool,
        package: &str,
        script: &str,
        words: &[String],
    ) -> Option<Install> {
        let plain = |s: &str| !s.is_empty() && !s.contains('$') && !s.contains('`');
        let abs = |s: &str| s.starts_with('/') && plain(s);
        let name_ok = |s: &str| plain(s) && !s.contains('/');
        let mut w: Vec<&str> = words[1..].iter().map(String::as_str).collect();
        let mut family = None;
        if tool == Tool::Chkconfig {
            w.retain(|a| *a != "--quiet" && *a != "--verbose");
            if let Some(i) = w.iter().position(|a| *a == "--family") {
                let f = *w.get(i + 1)?;
                if !name_ok(f) || f.contains('@') {
                    return None;
                }
                family = Some(f.to_string());
                w.drain(i..i + 2);
            }
        } else {
            w.retain(|a| *a != "--quiet");
        }
        let ["--install", link, name, path, priority, rest @ ..] = w.as_slice() else {
            return None;
        };
        let priority = match tool {
            Tool::Dpkg => priority.parse().ok()?,
            Tool::Chkconfig => strtol0(priority)?,
        };
        if !(abs(link) && abs(path) && name_ok(name)) {
            return None;
        }
        let mut slaves = Vec::new();
        let mut rest = rest;
        loop {
            match rest {
                [flag, l, n, p, tail @ ..]
                    if *flag == "--slave" || (tool == Tool::Chkconfig && *flag == "--follower") =>
                {
                    if !(abs(l) && abs(p) && name_ok(n)) {
                        return None;
                    }
                    slaves.push((l.to_string(), n.to_string(), p.to_string()));
                    rest = tail;
                }
                [] => break,
                _ => return None,
            }
        }
        Some(Install {
            package: package.to_string(),
            script: script.to_string(),
            link: link.to_string(),
            name: name.to_string(),
            path: path.to_string(),
            priority,
            slaves,
            family,
        })
    }
}

/// A priority as C's `strtol(s, &end, 0)` reads it where the whole text must be the number,
/// within `int`: sign, then `0x` hex, `0` octal, or decimal.
fn strtol0(s: &str) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = if let Some(h) = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else if digits.len() > 1 && digits.starts_with('0') {
        i64::from_str_radix(&digits[1..], 8).ok()?
    } else {
        digits.parse::<u64>().ok().and_then(|v| i64::try_from(v).ok())?
    };
    let v = if neg { -v } else { v };
    i32::try_from(v).ok().map(i64::from)
}

/// One alternative of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Choice {
    path: String,
    priority: i64,
    /// chkconfig's `@FAMILY@`.
    family: Option<String>,
    /// chkconfig's init script after the priority (kept as read).
    initscript: Option<String>,
    /// Its path for each slave of the group, by the group's slave index.
    slaves: Vec<Option<String>>,
}

/// A link group as the administrative file holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Group {
    auto: bool,
    link: String,
    /// `(name, link)` of each slave, in the file's order.
    slaves: Vec<(String, String)>,
    /// In the file's order.
    choices: Vec<Choice>,
}

impl Group {
    fn parse(tool: Tool, text: &str) -> Option<Group> {
        let mut lines = text.split('\n');
        let auto = match lines.next()? {
            "auto" => true,
            "manual" => false,
            _ => return None,
        };
        let link = lines.next()?.to_string();
        let mut slaves = Vec::new();
        loop {
            let name = lines.next()?;
            if name.is_empty() {
                break;
            }
            slaves.push((name.to_string(), lines.next()?.to_string()));
        }
        let mut choices = Vec::new();
        loop {
            // dpkg ends the list with a blank line; chkconfig with the end of the file.
            let path = match (tool, lines.next()) {
                (Tool::Dpkg, Some("")) => break,
                (Tool::Chkconfig, None | Some("")) => break,
                (_, Some(p)) => p,
                (Tool::Dpkg, None) => return None,
            };
            let line = lines.next()?;
            let (family, rest) = match (tool, line.strip_prefix('@')) {
                (Tool::Chkconfig, Some(r)) => {
                    let (f, rest) = r.split_once('@')?;
                    (Some(f.to_string()), rest)
                }
                _ => (None, line),
            };
            let (number, initscript) = match (tool, rest.split_once(' ')) {
                (Tool::Chkconfig, Some((n, i))) => (n, Some(i.to_string())),
                _ => (rest, None),
            };
            let priority = number.parse().ok()?;
            let mut paths = Vec::new();
            for _ in &slaves {
                let p = lines.next()?;
                paths.push((!p.is_empty()).then(|| p.to_string()));
            }
            choices.push(Choice {
                path: path.to_string(),
                priority,
                family,
                initscript,
                slaves: paths,
            });
        }
        Some(Group { auto, link, slaves, choices })
    }

    fn render(&self, tool: Tool) -> String {
        let mut s = format!("{}\n{}\n", if self.auto { "auto" } else { "manual" }, self.link);
        // dpkg: slaves by name, alternatives by path.
        let mut slave_order: Vec<usize> = (0..self.slaves.len()).collect();
        let mut choice_order: Vec<usize> = (0..self.choices.len()).collect();
        if tool == Tool::Dpkg {
            slave_order.sort_by(|a, b| self.slaves[*a].0.cmp(&self.slaves[*b].0));
            choice_order.sort_by(|a, b| self.choices[*a].path.cmp(&self.choices[*b].path));
        }
        for &i in &slave_order {
            let (n, l) = &self.slaves[i];
            s.push_str(&format!("{n}\n{l}\n"));
        }
        s.push('\n');
        for &c in &choice_order {
            let c = &self.choices[c];
            s.push_str(&c.path);
            s.push('\n');
            if let Some(f) = &c.family {
                s.push_str(&format!("@{f}@"));
            }
            s.push_str(&c.priority.to_string());
            if let Some(i) = &c.initscript {
                s.push(' ');
                s.push_str(i);
            }
            s.push('\n');
            for &i in &slave_order {
                s.push_str(c.slaves[i].as_deref().unwrap_or(""));
                s.push('\n');
            }
        }
        if tool == Tool::Dpkg {
            s.push('\n');
        }
        s
    }

    /// The slave named `name`, added (with no path for the alternatives there are) where the
    /// group lacks it.
    fn slave_index(&mut self, name: &str, link: &str) -> usize {
        match self.slaves.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                self.slaves.push((name.to_string(), link.to_string()));
                for c in &mut self.choices {
                    c.slaves.push(None);
                }
                self.slaves.len() - 1
            }
        }
    }

    /// chkconfig's best: the first alternative of the highest priority.
    fn first_best(&self) -> Option<usize> {
        let top = self.choices.iter().map(|c| c.priority).max()?;
        self.choices.iter().position(|c| c.priority == top)
    }
}

/// What one group's calls come to: its file, whether its links are (re)made, and its choice.
struct State {
    group: Group,
    /// Where `/etc/alternatives/NAME` points in the image before the build.
    current: Option<String>,
    /// chkconfig makes the links only in auto mode, or on a reinstall.
    relink: bool,
}

/// Applies `installs`, in order, over what the base and the layer hold.
pub(crate) fn apply(
    tool: Tool,
    installs: &[Install],
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
) -> Result<()> {
    let mut groups: Vec<(String, State)> = Vec::new();
    for i in installs {
        if tool == Tool::Dpkg && !image::exists(&i.path, base, layer)? {
            return Err(i.fails(format!("{} does not exist", i.path)));
        }
        let at = match groups.iter().position(|(n, _)| *n == i.name) {
            Some(at) => at,
            None => {
                groups.push((i.name.clone(), State::read(tool, i, base, layer)?));
                groups.len() - 1
            }
        };
        groups[at].1.install(tool, i)?;
    }
    for (name, state) in groups {
        state.write(tool, &name, installs, base, layer)?;
    }
    Ok(())
}

impl State {
    /// The group of `i`'s first call, as the image holds it: its administrative file (a new
    /// group where there is none) and where its link points.
    fn read(tool: Tool, i: &Install, base: &dyn BaseFiles, layer: &LayerContents) -> Result<State> {
        let admin = format!("{}/{}", tool.admin_dir(), i.name);
        let current = match image::kind(&format!("{ALTDIR}/{}", i.name), base, layer)? {
            Some(SnapEntry::Symlink(t)) => Some(t),
            _ => None,
        };
        let group = match image::read(&admin, base, layer, 1 << 20)? {
            Some(t) => Some(Group::parse(tool, &String::from_utf8_lossy(&t)).ok_or_else(|| {
                Error::Malformed {
                    what: "alternatives file",
                    reference: admin.clone(),
                    reason: "not as the image's alternatives tool writes it".into(),
                }
            })?),
            None => None,
        };
        let group = match (tool, group) {
            (_, None) => {
                Group { auto: true, link: i.link.clone(), slaves: Vec::new(), choices: Vec::new() }
            }
            (Tool::Dpkg, Some(g)) => g,
            // chkconfig reads the link: one that points at no alternative, or not at
            // the best one in auto mode, makes the group manual.
            (Tool::Chkconfig, Some(mut g)) => {
                let Some(cur) = &current else {
                    return Err(i.needs_sandbox(&format!("{admin} without its link")));
                };
                let at = g.choices.iter().position(|c| c.path == *cur);
                if at.is_none() || (g.auto && at != g.first_best()) {
                    g.auto = false;
                }
                g
            }
        };
        Ok(State { group, current, relink: false })
    }

    /// One `--install` over the group: its alternative added (or replaced), its slaves
    /// added to the group's, and the choice as `tool` makes it.
    fn install(&mut self, tool: Tool, i: &Install) -> Result<()> {
        let group = &mut self.group;
        if group.link != i.link {
            return Err(i.fails(format!("the link group {} has the link {}", i.name, group.link)));
        }
        let existed = !group.choices.is_empty();
        let mut paths = vec![None; group.slaves.len()];
        for (l, n, p) in &i.slaves {
            let s = group.slave_index(n, l);
            paths.resize(group.slaves.len(), None);
            paths[s] = Some(p.clone());
        }
        let choice = Choice {
            path: i.path.clone(),
            priority: i.priority,
            family: i.family.clone(),
            initscript: None,
            slaves: paths,
        };
        match tool {
            Tool::Dpkg => self.install_dpkg(i, choice),
            Tool::Chkconfig => self.install_chkconfig(i, choice, existed)?,
        }
        Ok(())
    }

    /// dpkg's `--install`: the alternative replaces the one of its path; in auto mode the
    /// current choice stays where it is among the highest priority, else the first of those by
    /// path is chosen; in manual mode it is chosen only where nothing was.
    fn install_dpkg(&mut self, i: &Install, choice: Choice) {
        let group = &mut self.group;
        match group.choices.iter_mut().find(|c| c.path == i.path) {
            Some(c) => *c = choice,
            None => group.choices.push(choice),
        }
        if group.auto {
            let best = group.choices.iter().map(|c| c.priority).max().unwrap_or(i64::MIN);
            let keep = self.current.as_ref().is_some_and(|cur| {
                group.choices.iter().any(|c| c.path == *cur && c.priority == best)
            });
            if !keep {
                let mut tops: Vec<&Choice> =
                    group.choices.iter().filter(|c| c.priority == best).collect();
                tops.sort_by(|a, b| a.path.cmp(&b.path));
                self.current = tops.first().map(|c| c.path.clone());
            }
        } else if self.current.is_none() {
            self.current = Some(i.path.clone());
        }
        self.relink = true;
    }

    /// chkconfig's `--install`: a new alternative goes last, a reinstall of one as it was
    /// remakes the links (another priority is refused); the slaves are sorted by link where the
    /// group had alternatives; in auto mode the first best is chosen.
    fn install_chkconfig(&mut self, i: &Install, choice: Choice, existed: bool) -> Result<()> {
        let group = &mut self.group;
        match group.choices.iter_mut().find(|c| c.path == i.path) {
            // A reinstall as it was: its links made again.
            Some(c) if c.priority == i.priority => {
                *c = Choice { initscript: c.initscript.clone(), ..choice };
                self.relink = true;
            }
            Some(_) => {
                return Err(i.needs_sandbox(
                    "a registered alternative again with another priority, which the tool leaves chosen by the old one",
                ))
            }
            None => group.choices.push(choice),
        }
        // Every install over a group that had alternatives sorts the slaves by link.
        if existed {
            let mut order: Vec<usize> = (0..group.slaves.len()).collect();
            order.sort_by(|a, b| group.slaves[*a].1.cmp(&group.slaves[*b].1));
            group.slaves = order.iter().map(|&k| group.slaves[k].clone()).collect();
            for c in &mut group.choices {
                c.slaves = order.iter().map(|&k| c.slaves[k].clone()).collect();
            }
        }
        if group.auto {
            self.current = group.first_best().map(|b| group.choices[b].path.clone());
            self.relink = true;
        }
        Ok(())
    }

    /// Writes group `name`'s administrative file into the layer and, where its links are
    /// (re)made, the master link and each slave's of the chosen alternative.
    fn write(
        self,
        tool: Tool,
        name: &str,
        installs: &[Install],
        base: &dyn BaseFiles,
        layer: &mut LayerContents,
    ) -> Result<()> {
        let group = &self.group;
        let admin = format!("{}/{name}", tool.admin_dir());
        if tool == Tool::Chkconfig && !image::is_dir(tool.admin_dir(), base, layer)? {
            return Err(refuse_group(
                installs,
                name,
                &format!("no {} in the image", tool.admin_dir()),
            ));
        }
        layer.add_file(&image::real(&admin, base)?, group.render(tool).into_bytes(), 0o644)?;
        let Some(chosen) = self.current.filter(|_| self.relink) else { return Ok(()) };
        let Some(choice) = group.choices.iter().find(|c| c.path == chosen) else { return Ok(()) };
        make_link(tool, base, layer, &group.link, &format!("{ALTDIR}/{name}"), installs, name)?;
        make_link(tool, base, layer, &format!("{ALTDIR}/{name}"), &chosen, installs, name)?;
        for ((sname, slink), path) in group.slaves.iter().zip(&choice.slaves) {
            let alt = format!("{ALTDIR}/{sname}");
            match (tool, path) {
                (Tool::Dpkg, Some(p)) if !image::exists(p, base, layer)? => {}
                (_, Some(p)) => {
                    make_link(tool, base, layer, slink, &alt, installs, name)?;
                    make_link(tool, base, layer, &alt, p, installs, name)?;
                }
                (Tool::Dpkg, None) => {}
                // chkconfig removes the links of a slave the chosen one lacks.
                (Tool::Chkconfig, None) => {
                    for p in [slink.as_str(), alt.as_str()] {
                        let real = image::real(p, base)?;
                        if let Some(SnapEntry::Symlink(_)) = base.kind(&real)? {
                            layer.add_whiteout(&real)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// The refusal of group `name`'s first call.
fn refuse_group(installs: &[Install], name: &str, why: &str) -> Error {
    installs.iter().find(|i| i.name == name).expect("a call made the group").needs_sandbox(why)
}

/// `at -> target`, where `at` may be made: dpkg and chkconfig replace a symlink (theirs or a
/// foreign one); a regular file there, or a missing directory for it, is refused (chkconfig
/// leaves such a file and fails on a missing directory).
fn make_link(
    tool: Tool,
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
    at: &str,
    target: &str,
    installs: &[Install],
    name: &str,
) -> Result<()> {
    match image::kind(at, base, layer)? {
        None | Some(SnapEntry::Symlink(_)) => {}
        Some(_) => return Err(refuse_group(installs, name, &format!("{at} is not a symlink"))),
    }
    let parent = image::parent(at);
    if tool == Tool::Chkconfig && !image::is_dir(parent, base, layer)? {
        return Err(refuse_group(installs, name, &format!("no directory {parent} for {at}")));
    }
    image::link(base, layer, at, target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packages::testing::MapBase;
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    const ORACLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/alternatives-el");

    /// A base from a scenario's `setup` (`dir P`, `file P`, `symlink P TARGET`), with every
    /// parent directory, `/etc/alternatives` and `/var/lib/alternatives`.
    fn setup_base(setup: &str) -> MapBase {
        let mut m: BTreeMap<String, SnapEntry> = BTreeMap::new();
        let add_dirs = |m: &mut BTreeMap<String, SnapEntry>, p: &str| {
            let mut acc = String::new();
            for part in p.trim_start_matches('/').split('/') {
                if !acc.is_empty() {
                    acc.push('/');
                }
                acc.push_str(part);
                m.entry(acc.clone()).or_insert(SnapEntry::Dir);
            }
        };
        add_dirs(&mut m, "/etc/alternatives");
        add_dirs(&mut m, "/var/lib/alternatives");
        for line in setup.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let w: Vec<&str> = line.split_whitespace().collect();
            let (parent, _) = w[1].rsplit_once('/').unwrap();
            if !parent.is_empty() {
                add_dirs(&mut m, parent);
            }
            let key = w[1].trim_start_matches('/').to_string();
            let entry = match w[0] {
                "dir" => SnapEntry::Dir,
                "file" => SnapEntry::File(Some(format!("payload of {}\n", w[1]).into_bytes())),
                "symlink" => SnapEntry::Symlink(w[2].to_string()),
                other => panic!("setup: {other}"),
            };
            m.insert(key, entry);
        }
        MapBase(m)
    }

    /// Every symlink of the image (the base's less the layer's whiteouts, plus the layer's), as
    /// the oracle's `links` lists them.
    fn links(base: &MapBase, layer: &LayerContents) -> String {
        let mut out: BTreeMap<String, String> = BTreeMap::new();
        for (p, e) in &base.0 {
            if let SnapEntry::Symlink(t) = e {
                out.insert(format!("/{p}"), t.clone());
            }
        }
        for (p, e) in layer.files() {
            match &e.kind {
                erdma_oci::layer::EntryKind::Symlink(t) => {
                    out.insert(format!("/{p}"), t.clone());
                }
                erdma_oci::layer::EntryKind::Whiteout => {
                    out.remove(&format!("/{p}"));
                }
                _ => {}
            }
        }
        out.iter().map(|(p, t)| format!("{p} -> {t}\n")).collect()
    }

    /// Where the emulation refuses what the tool does (a link that is a regular file,
    /// a reinstall with another priority, a missing directory): from which step on.
    fn refused_from(scenario: &str) -> Option<usize> {
        match scenario {
            "f1-link-is-regular-file" => Some(1),
            "h-reinstall-same-path-new-priority" => Some(3),
            "i-slave-link-parent-dir-missing" => Some(1),
            _ => None,
        }
    }

    /// Every recorded run of chkconfig's alternatives (`testdata/alternatives-el/`), replayed
    /// step by step: after each call, the administrative file is byte for byte the tool's and
    /// the image's symlinks are the tool's, or the emulation refuses where it says it does.
    #[test]
    fn chkconfig_alternatives_as_the_real_tool_leaves_them() {
        let mut seen = BTreeSet::new();
        for entry in std::fs::read_dir(ORACLE).unwrap() {
            let dir = entry.unwrap().path();
            if !dir.join("commands").exists() {
                continue;
            }
            let scenario = dir.file_name().unwrap().to_string_lossy().to_string();
            let read = |p: &Path| std::fs::read_to_string(p).unwrap();
            let base = setup_base(&read(&dir.join("setup")));
            let calls: Vec<Install> = read(&dir.join("commands"))
                .lines()
                .map(|l| {
                    let words: Vec<String> = l.split_whitespace().map(str::to_string).collect();
                    Install::parse(Tool::Chkconfig, "p", "%post", &words)
                        .unwrap_or_else(|| panic!("{scenario}: {l}"))
                })
                .collect();
            for n in 1..=calls.len() {
                let step = dir.join(format!("steps/{n}"));
                let mut layer = LayerContents::new();
                let got = apply(Tool::Chkconfig, &calls[..n], &base, &mut layer);
                if refused_from(&scenario).is_some_and(|from| n >= from) {
                    let e = got.expect_err(&format!("{scenario} step {n} is refused"));
                    assert!(
                        matches!(&e, Error::Package(PackageError::Script { .. })),
                        "{scenario} step {n}: {e}"
                    );
                    continue;
                }
                got.unwrap_or_else(|e| panic!("{scenario} step {n}: {e}"));
                for admin in std::fs::read_dir(step.join("admin")).unwrap() {
                    let admin = admin.unwrap();
                    let name = admin.file_name().to_string_lossy().to_string();
                    let ours =
                        match layer.get(&format!("var/lib/alternatives/{name}")).map(|e| &e.kind) {
                            Some(erdma_oci::layer::EntryKind::File(c)) => {
                                String::from_utf8(c.clone()).unwrap()
                            }
                            other => panic!("{scenario} step {n}: no admin file {name}: {other:?}"),
                        };
                    assert_eq!(ours, read(&admin.path()), "{scenario} step {n}: {name}");
                }
                assert_eq!(links(&base, &layer), read(&step.join("links")), "{scenario} step {n}");
            }
            seen.insert(scenario);
        }
        assert!(seen.len() >= 12, "{seen:?}");
    }

    /// The priority forms chkconfig reads with `strtol(…, 0)`, and what it refuses.
    #[test]
    fn priorities_as_strtol_reads_them() {
        assert_eq!(strtol0("010"), Some(8));
        assert_eq!(strtol0("0x10"), Some(16));
        assert_eq!(strtol0("-5"), Some(-5));
        assert_eq!(strtol0("50"), Some(50));
        assert_eq!(strtol0("0"), Some(0));
        assert_eq!(strtol0("08"), None);
        assert_eq!(strtol0("1e3"), None);
        assert_eq!(strtol0("4294967296"), None);
        let w = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        let i = Install::parse(
            Tool::Dpkg,
            "p",
            "postinst",
            &w("update-alternatives --install /usr/bin/t t /usr/bin/a 010"),
        )
        .unwrap();
        assert_eq!(i.priority, 10);
        assert!(Install::parse(
            Tool::Dpkg,
            "p",
            "postinst",
            &w("update-alternatives --install /usr/bin/t t /usr/bin/a 10 --family f")
        )
        .is_none());
        assert!(Install::parse(
            Tool::Chkconfig,
            "p",
            "%post",
            &w("alternatives --install /usr/bin/t t /usr/bin/a 10 --initscript x")
        )
        .is_none());
    }
}
