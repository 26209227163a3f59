//! Maintainer scripts (deb-maintscripts(5)) and triggers (deb-triggers(5)) of the packages a
//! build installs and removes, accounted for one by one ([`crate::packages::scripts`]).
//!
//! dpkg runs, for a package it installs: `preinst install` (or `upgrade OLD`), then at
//! configure time `postinst configure [OLD]`, after debconf's `config`; its `triggers` file
//! activates other packages' triggers. What those scripts run is read, not run; each command is
//! one of:
//! - inert (tests, `dpkg --compare-versions`, `echo`, `set -e`, `umask`, `getent`): nothing to
//!   do;
//! - `addgroup --system [--quiet] NAME` and `adduser --system … NAME`: emulated
//!   ([`crate::packages::users`]);
//! - `update-rc.d NAME defaults`, `deb-systemd-helper enable UNIT`: emulated; `invoke-rc.d`,
//!   `deb-systemd-helper unmask` of an unmasked unit: no effect ([`super::services`]);
//! - `update-alternatives --install LINK NAME PATH PRIORITY [--slave …]`: emulated
//!   ([`crate::packages::alternatives`]);
//! - `chown`, `chgrp`, `chmod MODE` (octal, or symbolic with who given), `setcap CAPS` of a
//!   file of the same package: emulated on the layer's entry ([`apply_file_changes`]);
//!   `command -v NAME` is told from the image's `PATH` directories, and `$(dpkg-divert
//!   --truename PATH)` from its diversions; `dpkg-statoverride --list PATH` is answered from the image's
//!   statoverride database, so a script that honours an override does what dpkg would;
//! - `dpkg-maintscript-helper` on a fresh install, or `rm_conffile` after a version newer
//!   than the one it names, or on a conffile the base does not have: no effect (it acts only
//!   when upgrading from an older version that had the file);
//! - `add-shell SHELL…`, `update-shells`, and debianutils' file trigger on
//!   `/usr/share/debianutils/shells.d`: emulated ([`super::shells`]);
//! - `ldconfig`, or the `ldconfig` trigger, for a package that adds nothing under
//!   `/etc/ld.so.conf.d`: no effect that matters, as its libraries lie in directories the
//!   loader searches without a cache entry (Debian's ld.so has the multiarch directories in
//!   its default path);
//! - anything else: the build stops ([`PackageError::Script`]) unless `--skip-scripts`; the
//!   install then goes to the sandbox unless `--no-sandbox`.
//!
//! File tests on the package's own files (`[ -x /etc/init.d/NAME ]` in postinst) are answered
//! from its payload, and `DPKG_ROOT` is empty, as dpkg exports it for an install to `/`.
use std::collections::BTreeSet;

use super::dpkg::fnv_hash;
use super::file_changes::{capability_xattr, ModeChange};
use super::resolve::{Installed, Planned};
use crate::error::{Error, Result};
use crate::packages::alternatives;
use crate::packages::scripts::{self, Outcome, ScriptRecord};
use crate::packages::users;
use crate::packages::PackageError;
use erdma_deb::deb::Deb;
use erdma_deb::version::Version;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::{EntryKind, LayerContents};
use erdma_oci::rootfs::SnapEntry;

/// What the `ldconfig` emulation does ([`crate::packages::ldconfig`]).
use crate::packages::ldconfig::DONE as LDCONFIG_DONE;

/// `PATH` as `apt-get` in a container gives it to dpkg and the scripts (Debian's default for
/// root).
const SCRIPT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The scripts dpkg runs when installing, in the order it runs them.
const INSTALL_SCRIPTS: &[&str] = &["preinst", "config", "postinst"];

/// What the scripts of one installed package amount to.
#[derive(Debug, Default)]
pub(super) struct Accounted {
    pub(super) records: Vec<ScriptRecord>,
    /// The system groups and users the scripts add, in order.
    pub(super) accounts: Vec<users::Op>,
    /// `update-alternatives --install` calls, in order.
    pub(super) alternatives: Vec<alternatives::Install>,
    /// `update-rc.d` and `deb-systemd-helper enable` calls, in order.
    pub(super) services: Vec<super::services::Registration>,
    /// `chown`, `chgrp` and `chmod` of a package's own files, in order.
    pub(super) file_changes: Vec<FileChange>,
    /// `dpkg-statoverride --add`, in order.
    pub(super) stat_adds: Vec<StatAdd>,
    /// Whether the plan installs a package named `ucf` (for `plan`, which cannot read its
    /// `/usr/bin/ucf`).
    pub(super) ucf_planned: bool,
    /// File trigger interests the plan's packages declare.
    pub(super) interests: Vec<Interest>,
    /// `ucf`, `ucfr` and `touch`, in order, by package ([`super::ucf`]).
    pub(super) ucf: Vec<(String, super::ucf::Call)>,
    /// `add-shell` and `update-shells`, in order, by package ([`super::shells`]).
    pub(super) shells: Vec<(String, super::shells::Change)>,
    /// The package whose files first activate debianutils' trigger on
    /// `/usr/share/debianutils/shells.d`: `update-shells` runs once every package is
    /// configured, as dpkg processes the trigger.
    pub(super) shells_trigger: Option<String>,
    /// `(package, path, present)`: paths a script's file test answered from the base (absent:
    /// in neither the base nor the package), checked once every package is unpacked
    /// ([`check_assumed`]).
    pub(super) assumed: Vec<(String, String, bool)>,
    /// The paths the image's `var/lib/dpkg/statoverride` lists, read once per build.
    overrides: Option<BTreeSet<String>>,
    /// The base's diversions (`var/lib/dpkg/diversions`), `(FROM, TO)`, read once per build.
    diversions: Option<Vec<(String, String)>>,
    /// The first script that runs `ldconfig` or activates its trigger: `(package, script)`.
    pub(super) ldconfig: Option<(String, String)>,
    /// Whether a package of the base is interested in the `ldconfig` trigger.
    ldconfig_interest: Option<bool>,
    /// The base's `etc/group` and `etc/passwd`, for `getent`, read once per build.
    account_files: Option<(String, String)>,
    /// The file triggers the image's packages are interested in (`var/lib/dpkg/triggers/File`:
    /// `PATH PACKAGE[/noawait]` a line), read once per build.
    file_triggers: Option<Vec<(String, String)>>,
}

/// A `chown USER[:GROUP] PATH`, `chgrp GROUP PATH`, `chmod MODE PATH` or `setcap CAPS PATH`
/// of a file the same package installs (openssh-client makes `ssh-agent` setgid `_ssh` this
/// way; iputils-ping gives `ping` `cap_net_raw+ep`, or setuid where setcap is missing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FileChange {
    pub(super) package: String,
    /// The command as the script has it, for errors.
    pub(super) command: String,
    pub(super) path: String,
    pub(super) user: Option<String>,
    pub(super) group: Option<String>,
    pub(super) mode: Option<ModeChange>,
    /// The `security.capability` value setcap writes.
    pub(super) caps: Option<Vec<u8>>,
}

impl FileChange {
    fn parse(package: &str, words: &[String], files: &[String]) -> Option<FileChange> {
        let [cmd, what, path] = words else { return None };
        if !files.iter().any(|f| f == path) || what.starts_with('-') {
            return None;
        }
        let name_ok = |n: &str| {
            !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        };
        let mut o = FileChange {
            package: package.to_string(),
            command: words.join(" "),
            path: path.clone(),
            user: None,
            group: None,
            mode: None,
            caps: None,
        };
        match cmd.as_str() {
            "chgrp" if name_ok(what) => o.group = Some(what.clone()),
            "chown" => {
                let (u, g) = match what.split_once(':') {
                    Some((u, g)) => (u, Some(g)),
                    None => (what.as_str(), None),
                };
                if !name_ok(u) || g.is_some_and(|g| !name_ok(g)) {
                    return None;
                }
                o.user = Some(u.to_string());
                o.group = g.map(str::to_string);
            }
            "chmod" => o.mode = Some(ModeChange::parse(what)?),
            "setcap" => o.caps = Some(capability_xattr(what)?),
            _ => return None,
        }
        Some(o)
    }
}

/// `dpkg-statoverride [--update] [--quiet] --add USER GROUP MODE PATH` (dpkg-statoverride(1)):
/// an override added to dpkg's database, and with `--update` the file given that owner and
/// mode at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StatAdd {
    pub(super) package: String,
    pub(super) command: String,
    pub(super) user: String,
    pub(super) group: String,
    pub(super) mode: u32,
    pub(super) path: String,
    pub(super) update: bool,
}

impl StatAdd {
    fn parse(package: &str, words: &[String]) -> Option<StatAdd> {
        let mut update = false;
        let mut rest = &words[1..];
        loop {
            match rest.first().map(String::as_str) {
                Some("--update") => update = true,
                Some("--quiet") => {}
                Some("--add") => break,
                _ => return None,
            }
            rest = &rest[1..];
        }
        let [_, user, group, mode, path] = rest else { return None };
        let name_ok = |n: &str| {
            !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        };
        let mode_ok =
            !mode.is_empty() && mode.len() <= 5 && mode.bytes().all(|b| (b'0'..=b'7').contains(&b));
        if !name_ok(user)
            || !name_ok(group)
            || !mode_ok
            || !path.starts_with('/')
            || path.contains(char::is_whitespace)
        {
            return None;
        }
        Some(StatAdd {
            package: package.to_string(),
            command: words.join(" "),
            user: user.clone(),
            group: group.clone(),
            mode: u32::from_str_radix(mode, 8).ok()? & 0o7777,
            path: path.clone(),
            update,
        })
    }
}

/// Adds the overrides to dpkg's database (`var/lib/dpkg/statoverride`) in order, as
/// dpkg-statoverride writes it after each call: every override, in the order of dpkg's file
/// hash table ([`dpkg_bin`]), the database as the call found it kept as `statoverride-old`;
/// with `--update` the file gets its owner and mode at once. Runs after the system users and
/// groups are in. Two paths in one bin of the hash (whose order inside a bin is not
/// reproduced) go to the sandbox.
pub(super) fn apply_stat_adds(
    adds: &[StatAdd],
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
) -> Result<()> {
    if adds.is_empty() {
        return Ok(());
    }
    let db = "var/lib/dpkg/statoverride";
    let old = base.read(db, 4 << 20)?.unwrap_or_default();
    let mut lines: Vec<String> = String::from_utf8_lossy(&old)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    let mut before = old;
    let path_of = |l: &str| l.split_whitespace().nth(3).unwrap_or_default().to_string();
    for a in adds {
        let fails = |reason: String| {
            Error::from(PackageError::ScriptFails {
                package: a.package.clone(),
                script: "postinst".into(),
                command: a.command.clone(),
                reason,
            })
        };
        let uid = users::image_id(base, layer, "etc/passwd", &a.user)?
            .ok_or_else(|| fails(format!("/etc/passwd has no `{}`", a.user)))?;
        let gid = users::image_id(base, layer, "etc/group", &a.group)?
            .ok_or_else(|| fails(format!("/etc/group has no `{}`", a.group)))?;
        if lines.iter().any(|l| path_of(l) == a.path) {
            return Err(fails(format!("an override for '{}' already exists", a.path)));
        }
        before = lines.iter().map(|l| format!("{l}\n")).collect::<String>().into_bytes();
        lines.push(format!("{} {} {:o} {}", a.user, a.group, a.mode, a.path));
        lines.sort_by_key(|l| dpkg_bin(&path_of(l)));
        let bins: BTreeSet<u32> = lines.iter().map(|l| dpkg_bin(&path_of(l))).collect();
        if bins.len() != lines.len() {
            return Err(needs_sandbox(
                &a.package,
                format!("{} (two overrides in one bin of dpkg's file hash)", a.command),
            ));
        }
        if a.update {
            let real = crate::packages::image::real(&a.path, base)?;
            if layer.get(&real).is_some_and(|e| e.kind != EntryKind::Whiteout) {
                layer.set_owner_mode(&real, a.mode, uid, gid)?;
            }
        }
    }
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    layer.add_file(db, text.into_bytes(), 0o644)?;
    layer.add_file("var/lib/dpkg/statoverride-old", before, 0o644)?;
    Ok(())
}

/// The bin of dpkg's file hash table a path falls in (lib/dpkg/fsys-hash.c: 262139 bins, the
/// path without its leading `/` hashed with [`fnv_hash`]): dpkg-statoverride writes its
/// database walking the bins in order.
fn dpkg_bin(path: &str) -> u32 {
    fnv_hash(path.trim_start_matches('/')) % 262_139
}

/// A postinst command of `package` that the emulation cannot reproduce once it sees the image
/// (`command` says why): the build goes to the sandbox, or with `--no-sandbox` stops.
pub(super) fn needs_sandbox(package: &str, command: String) -> Error {
    scripts::needs_sandbox(package, "postinst", command)
}

/// The paths scripts tested, answered from the base, checked against the image once every
/// package of the plan is unpacked: one that another package installed or removed makes the
/// test's answer unknown, and the install goes to the sandbox.
pub(super) fn check_assumed(
    assumed: &[(String, String, bool)],
    base: &dyn BaseFiles,
    layer: &LayerContents,
) -> Result<()> {
    for (package, path, present) in assumed {
        if crate::packages::image::exists(path, base, layer)? != *present {
            return Err(needs_sandbox(
                package,
                format!("a test of {path}, which another package of the plan changes"),
            ));
        }
    }
    Ok(())
}

/// What a package's payload holds, as the scripts may test it.
pub(super) struct Payload<'a> {
    /// Every path (`/usr/lib/…`), in payload order.
    pub(super) list: &'a [String],
    /// The regular files with an execute bit.
    pub(super) executable: &'a BTreeSet<String>,
}

/// Accounts for the maintainer scripts and triggers of `planned`, whose control part is `deb`
/// and whose payload is `payload`; `old`: the version the base has in its place (an upgrade
/// or replacement), `None` for a fresh install; `layer`: every package of the plan unpacked,
/// where the build has it (a postinst's tests then see the image as dpkg's configure step
/// does), `None` for `plan`.
#[allow(clippy::too_many_arguments)]
pub(super) fn account(
    planned: &Planned,
    deb: &Deb,
    payload: &Payload<'_>,
    old: Option<&Version>,
    base: &dyn BaseFiles,
    layer: Option<&LayerContents>,
    skip: bool,
    out: &mut Accounted,
) -> Result<()> {
    read_base_databases(base, out)?;
    let scope = Scope {
        planned,
        package: format!("{} {}", planned.name, planned.version),
        payload,
        old,
        base,
        layer,
        skip,
    };
    for script in INSTALL_SCRIPTS {
        let Some(body) = deb.control_files.get(*script) else { continue };
        scope.script(script, &String::from_utf8_lossy(body), out)?;
    }
    scope.activated_file_triggers(out)?;
    if let Some(body) = deb.control_files.get("triggers") {
        scope.triggers(body, out)?;
    }
    Ok(())
}

/// The base's dpkg databases and account files the scripts' tests read, once per build.
fn read_base_databases(base: &dyn BaseFiles, out: &mut Accounted) -> Result<()> {
    if out.overrides.is_none() {
        let text = base.read("var/lib/dpkg/statoverride", 4 << 20)?.unwrap_or_default();
        out.overrides = Some(
            String::from_utf8_lossy(&text)
                .lines()
                .filter_map(|l| l.split_whitespace().nth(3).map(str::to_string))
                .collect(),
        );
    }
    if out.diversions.is_none() {
        // dpkg-divert's database: `FROM`, `TO`, `PACKAGE`, a line each.
        let text = base.read("var/lib/dpkg/diversions", 4 << 20)?.unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let lines: Vec<&str> = text.lines().collect();
        out.diversions =
            Some(lines.chunks_exact(3).map(|c| (c[0].to_string(), c[1].to_string())).collect());
    }
    if out.account_files.is_none() {
        let read = |p: &str| -> Result<String> {
            Ok(String::from_utf8_lossy(&base.read(p, 4 << 20)?.unwrap_or_default()).into_owned())
        };
        out.account_files = Some((read("etc/group")?, read("etc/passwd")?));
    }
    if out.ldconfig_interest.is_none() {
        // dpkg's list of the packages interested in the `ldconfig` trigger (libc-bin).
        let interested = base.read("var/lib/dpkg/triggers/ldconfig", 1 << 20)?;
        out.ldconfig_interest = Some(interested.is_some_and(|t| !t.trim_ascii().is_empty()));
    }
    Ok(())
}

/// One package whose scripts are being accounted for: what [`account`] was given.
struct Scope<'a> {
    planned: &'a Planned,
    /// `name version`, as records and errors name it.
    package: String,
    payload: &'a Payload<'a>,
    old: Option<&'a Version>,
    base: &'a dyn BaseFiles,
    layer: Option<&'a LayerContents>,
    skip: bool,
}

/// What one script's commands came to, while its commands are read.
#[derive(Default)]
struct ScriptTally {
    effects: Vec<String>,
    emulated: Vec<String>,
    unknown: Option<String>,
    /// The script has sourced debconf's confmodule.
    confmodule: bool,
}

impl Scope<'_> {
    /// One maintainer script (`script`, its text `text`): its commands read with the answers
    /// its tests would get, each emulated, shown to be without effect, or not placed.
    fn script(&self, script: &str, text: &str, out: &mut Accounted) -> Result<()> {
        let Scope { package, payload, old, base, layer, .. } = self;
        let (package, payload, old, base, layer) =
            (package.as_str(), *payload, *old, *base, *layer);
        let files = payload.list;
        let overrides = out.overrides.clone().unwrap_or_default();
        let diversions = out.diversions.clone().unwrap_or_default();
        let account_files = out.account_files.clone().unwrap_or_default();
        let mut tally = ScriptTally::default();
        // The arguments dpkg gives (deb-maintscripts(5)); `configure` gets the version last
        // configured, empty on a first install.
        let old_text = old.map(|v| v.to_string()).unwrap_or_default();
        let args: Vec<&str> = match (script, old) {
            ("preinst", None) => vec!["install"],
            ("preinst", Some(_)) => vec!["upgrade", &old_text],
            _ => vec!["configure", &old_text],
        };
        // `dpkg-statoverride --list PATH` succeeds when the database has an override for it;
        // a file test on a path of this package is told by its payload (dpkg has unpacked it
        // when postinst runs); the service helpers answer theirs.
        let unpacked = script == "postinst";
        // Paths a test answered from the base (absent: in neither the base nor this package),
        // which holds unless another package of the plan adds or removes one
        // ([`check_assumed`]).
        let assumed: std::cell::RefCell<Vec<(String, bool)>> = Default::default();
        // What `path` is where the script looks: with the layer of the whole plan unpacked
        // (postinst, as dpkg configures after unpacking everything), the image; else the base,
        // recorded as assumed.
        let lookup = |path: &str| -> Option<Option<SnapEntry>> {
            if let (Some(layer), true) = (layer, unpacked) {
                return crate::packages::image::kind(path, base, layer).ok();
            }
            let kind = match base.real_path(path.trim_start_matches('/')).ok()? {
                Some(p) => base.kind(&p).ok()?,
                None => None,
            };
            assumed.borrow_mut().push((path.to_string(), kind.is_some()));
            Some(kind)
        };
        // `command -v NAME`: the first regular file of that name in PATH's directories (a file
        // in those is taken as executable; a symlink there is not told).
        let command_v = |name: &str| -> Option<Option<String>> {
            for dir in SCRIPT_PATH.split(':') {
                let p = format!("{dir}/{name}");
                if unpacked && payload.executable.contains(&p) {
                    return Some(Some(p));
                }
                match lookup(&p)? {
                    Some(SnapEntry::File(_)) => return Some(Some(p)),
                    Some(SnapEntry::Symlink(_)) => return None,
                    _ => {}
                }
            }
            Some(None)
        };
        // `getent group|passwd NAME`: the base's account files and what earlier scripts add.
        let added: (BTreeSet<&str>, BTreeSet<&str>) = (
            out.accounts.iter().filter_map(users::Op::group).collect(),
            out.accounts.iter().filter_map(users::Op::user).collect(),
        );
        let status = |w: &[String]| -> scripts::Truth {
            let test: Vec<&str> = match w.first().map(String::as_str) {
                Some("[") if w.last().is_some_and(|l| l == "]") => {
                    w[1..w.len() - 1].iter().map(String::as_str).collect()
                }
                Some("test") => w[1..].iter().map(String::as_str).collect(),
                _ => Vec::new(),
            };
            match (w, test.as_slice()) {
                ([cmd, list, path], _) if cmd == "dpkg-statoverride" && list == "--list" => {
                    Some(overrides.contains(path))
                }
                ([cmd, db, name], _) if cmd == "getent" && (db == "group" || db == "passwd") => {
                    let (file, added) = match db.as_str() {
                        "group" => (&account_files.0, &added.0),
                        _ => (&account_files.1, &added.1),
                    };
                    Some(
                        added.contains(name.as_str())
                            || file.lines().any(|l| l.split(':').next() == Some(name.as_str())),
                    )
                }
                // setcap on a file of this package succeeds where its text is one setcap takes.
                ([cmd, caps, path], _) if cmd == "setcap" => (capability_xattr(caps).is_some()
                    && files.iter().any(|f| f == path))
                .then_some(true),
                // `command -v NAME`: a regular file in one of PATH's directories (a file in
                // those is taken as executable; a symlink there is not told).
                ([cmd, v, name], _) if cmd == "command" && v == "-v" && !name.contains('/') => {
                    command_v(name).map(|found| found.is_some())
                }
                (_, ["-e", path]) if unpacked && files.iter().any(|f| f == path) => Some(true),
                (_, ["-x" | "-f", path]) if unpacked && payload.executable.contains(*path) => {
                    Some(true)
                }
                (_, [op @ ("-e" | "-f" | "-d" | "-x" | "-s"), path])
                    if path.starts_with('/') && !files.iter().any(|f| f == path) =>
                {
                    let kind = lookup(path)?;
                    match (*op, &kind) {
                        (_, None) => Some(false),
                        ("-e", Some(_)) => Some(true),
                        ("-f", Some(SnapEntry::File(_))) => Some(true),
                        ("-d", Some(SnapEntry::Dir)) => Some(true),
                        ("-f" | "-d", Some(_)) => Some(false),
                        _ => None,
                    }
                }
                _ => super::services::truth(w, base),
            }
        };
        // `dpkg-divert --truename PATH`: where the base's diversions put PATH, else PATH.
        // `command -v NAME`: its path, or nothing.
        let output = |w: &[String]| -> Option<String> {
            let [cmd, flag, arg] = w else { return None };
            match (cmd.as_str(), flag.as_str()) {
                ("dpkg-divert", "--truename") => Some(
                    diversions
                        .iter()
                        .find(|(from, _)| from == arg)
                        .map_or(arg, |(_, to)| to)
                        .clone(),
                ),
                ("command", "-v") if !arg.contains('/') => {
                    command_v(arg).map(Option::unwrap_or_default)
                }
                _ => None,
            }
        };
        let known = scripts::Known { status: &status, output: &output };
        // dpkg exports DPKG_ROOT, empty when it installs to `/` (deb-maintscripts(5)).
        let env = [("DPKG_ROOT", "")];
        for words in scripts::commands_with(text, Some(&args), &env, &known) {
            if scripts::is_inert(&words) {
                continue;
            }
            self.command(script, &words, &overrides, &mut tally, out)?;
        }
        out.assumed.extend(assumed.take().into_iter().map(|(p, t)| (package.to_string(), p, t)));
        self.record(script, tally, out)
    }

    /// What the script's commands came to, for the report: emulated, without effect, or (a
    /// command that cannot be emulated) run in the sandbox or refused.
    fn record(&self, script: &str, tally: ScriptTally, out: &mut Accounted) -> Result<()> {
        let package = self.package.as_str();
        let outcome = match tally.unknown {
            Some(command) => unplaced(package, script, command, self.skip, "runs")?,
            None if !tally.emulated.is_empty() => Outcome::Emulated(tally.emulated.join(", ")),
            None => Outcome::NoEffect(if tally.effects.is_empty() {
                "only tests and shell builtins".into()
            } else {
                dedup(tally.effects).join("; ")
            }),
        };
        out.records.push(ScriptRecord {
            package: package.to_string(),
            script: script.into(),
            outcome,
        });
        Ok(())
    }

    /// One command of `script` (its words): what it does to `out`, or why it has no effect,
    /// or that it cannot be placed, told to `tally`.
    fn command(
        &self,
        script: &str,
        words: &[String],
        overrides: &BTreeSet<String>,
        tally: &mut ScriptTally,
        out: &mut Accounted,
    ) -> Result<()> {
        let (package, base, layer, old) = (&self.package, self.base, self.layer, self.old);
        let files = self.payload.list;
        let call = |words: &[String]| users::Call::new(package, script, words);
        let shown = words.join(" ");
        let (emulated, effects, unknown) =
            (&mut tally.emulated, &mut tally.effects, &mut tally.unknown);
        let confmodule = &mut tally.confmodule;
        match words[0].as_str() {
            "adduser" => match users::SystemUser::parse(call(words), words) {
                Some(user) => {
                    emulated.push(format!("system user {}", user.name));
                    out.accounts.push(users::Op::AddUser(user));
                }
                None => *unknown = unknown.take().or(Some(shown)),
            },
            "useradd" => match users::UserAdd::parse(call(words), words) {
                Some(user) => {
                    emulated.push(format!("system user {}", user.name));
                    out.accounts.push(users::Op::UserAdd(user));
                }
                None => *unknown = unknown.take().or(Some(shown)),
            },
            "groupadd" => match users::GroupAdd::parse(call(words), words) {
                Some(group) => {
                    emulated.push(format!("system group {}", group.name));
                    out.accounts.push(users::Op::GroupAdd(group));
                }
                None => *unknown = unknown.take().or(Some(shown)),
            },
            "update-rc.d" | "invoke-rc.d" | "deb-systemd-helper" => {
                match super::services::parse(package, words, base)? {
                    Some(super::services::Parsed::Emulate(r)) => {
                        emulated.push(shown);
                        out.services.push(r);
                    }
                    Some(super::services::Parsed::NoEffect(why)) => effects.push(why),
                    None => *unknown = unknown.take().or(Some(shown)),
                }
            }
            "addgroup" => match users::system_group(words) {
                Some(name) => {
                    emulated.push(format!("system group {name}"));
                    out.accounts.push(users::Op::AddGroup(call(words), name));
                }
                None => *unknown = unknown.take().or(Some(shown)),
            },
            "update-alternatives" => {
                match alternatives::Install::parse(alternatives::Tool::Dpkg, package, script, words)
                {
                    Some(i) => {
                        emulated.push(format!(
                            "alternative {} ({} -> {}, priority {})",
                            i.name, i.link, i.path, i.priority
                        ));
                        out.alternatives.push(i);
                    }
                    None => *unknown = unknown.take().or(Some(shown)),
                }
            }
            "dpkg-statoverride" if words.get(1).is_some_and(|w| w == "--list") => {}
            "dpkg-statoverride" => match StatAdd::parse(package, words) {
                Some(a) if !overrides.contains(&a.path) => {
                    emulated.push(shown);
                    out.stat_adds.push(a);
                }
                _ => *unknown = unknown.take().or(Some(shown)),
            },
            "chown" | "chgrp" | "chmod" | "setcap" => {
                match FileChange::parse(package, words, files) {
                    Some(o) => {
                        emulated.push(shown);
                        out.file_changes.push(o);
                    }
                    None => *unknown = unknown.take().or(Some(shown)),
                }
            }
            "dpkg-maintscript-helper" => match maintscript_helper(words, old, base)? {
                Some(why) => effects.push(why),
                None => *unknown = unknown.take().or(Some(shown)),
            },
            "add-shell" => match super::shells::parse_add(words) {
                Some(c) => {
                    emulated.push(shown);
                    out.shells.push((package.clone(), c));
                }
                None => *unknown = unknown.take().or(Some(shown)),
            },
            "ucf" | "ucfr" | "touch" => match super::ucf::Call::parse(words) {
                // ucf from a script that runs under debconf's frontend behaves otherwise
                // (it warns, or loads nothing): not reproduced.
                Some(super::ucf::Call::Ucf { .. })
                    if *confmodule || !super::ucf::emulable(base, layer, out.ucf_planned)? =>
                {
                    *unknown = unknown.take().or(Some(shown))
                }
                Some(c) => {
                    emulated.push(shown);
                    out.ucf.push((package.clone(), c));
                }
                None => *unknown = unknown.take().or(Some(shown)),
            },
            // The frontend, started for the script, registers the package's templates in
            // debconf's database (/var/cache/debconf, not written here: ucf and
            // dpkg-reconfigure load them again from the package's control files).
            "." if words.len() == 2 && words[1] == "/usr/share/debconf/confmodule" => {
                *confmodule = true;
                effects.push("debconf's confmodule: the package's templates are not registered in /var/cache/debconf".into());
            }
            "db_capb" if *confmodule => {}
            "update-shells" if words.len() == 1 => {
                emulated.push(shown);
                out.shells.push((package.clone(), super::shells::Change::Update));
            }
            "ldconfig" | "/sbin/ldconfig" if words.len() == 1 => {
                emulated.push(LDCONFIG_DONE.into());
                out.ldconfig.get_or_insert_with(|| (package.clone(), script.to_string()));
            }
            _ => *unknown = unknown.take().or(Some(shown)),
        }
        Ok(())
    }

    /// A base package's file trigger that this package's files activate: dpkg runs that
    /// package's postinst `triggered`. debianutils' (on /usr/share/debianutils/shells.d) is
    /// emulated; any other (man-db's on /usr/share/man) is not.
    fn activated_file_triggers(&self, out: &mut Accounted) -> Result<()> {
        let (package, base, skip, files) = (&self.package, self.base, self.skip, self.payload.list);
        if out.file_triggers.is_none() {
            let text = base.read("var/lib/dpkg/triggers/File", 4 << 20)?.unwrap_or_default();
            out.file_triggers = Some(
                String::from_utf8_lossy(&text)
                    .lines()
                    .filter_map(|l| {
                        let (path, pkg) = l.split_once(' ')?;
                        Some((path.trim_end_matches('/').to_string(), pkg.trim().to_string()))
                    })
                    .collect(),
            );
        }
        let activated: Vec<(String, String)> = out
            .file_triggers
            .as_deref()
            .unwrap_or_default()
            .iter()
            .filter(|(path, _)| {
                files.iter().any(|f| f == path || f.starts_with(&format!("{path}/")))
            })
            .cloned()
            .collect();
        for (path, interested) in activated {
            let interested = interested.split('/').next().unwrap_or_default().to_string();
            let outcome = if interested == "debianutils"
                && path == super::shells::SHELLS_D
                && super::shells::has_update_shells(base)?
            {
                out.shells_trigger.get_or_insert_with(|| package.clone());
                Outcome::Emulated(format!(
                    "the file trigger of debianutils on {path}: update-shells, once every package is configured"
                ))
            } else {
                unplaced(
                    package,
                    "payload",
                    format!("the file trigger of {interested} on {path}"),
                    skip,
                    "activates",
                )?
            };
            out.records.push(ScriptRecord {
                package: package.clone(),
                script: "payload".into(),
                outcome,
            });
        }
        Ok(())
    }

    /// The package's `triggers` control file (`body`): the ldconfig trigger it activates and the
    /// file triggers it is interested in.
    fn triggers(&self, body: &[u8], out: &mut Accounted) -> Result<()> {
        let (planned, skip) = (self.planned, self.skip);
        let package = self.package.clone();
        let mut unknown = None;
        let mut ldconfig = false;
        let mut interests = Vec::new();
        let same = planned.pkg.paragraph()?.get("Multi-Arch") == Some("same");
        for line in String::from_utf8_lossy(body).lines() {
            let line = line.split('#').next().unwrap_or_default().trim();
            let mut w = line.split_whitespace();
            let (Some(directive), Some(name)) = (w.next(), w.next()) else { continue };
            match directive {
                "activate" | "activate-noawait" | "activate-await" if name == "ldconfig" => {
                    ldconfig = true
                }
                // A file trigger this package is interested in: registered as dpkg registers
                // it; a package of the plan that installs there would fire it, which is not
                // emulated ([`check_interests`]).
                "interest" | "interest-noawait" | "interest-await"
                    if name.starts_with('/') && !same && w.next().is_none() =>
                {
                    let noawait = directive == "interest-noawait";
                    interests.push(name.trim_end_matches('/').to_string());
                    out.interests.push(Interest {
                        package: package.clone(),
                        name: planned.name.clone(),
                        path: name.trim_end_matches('/').to_string(),
                        noawait,
                    });
                }
                _ => unknown = unknown.or(Some(line.to_string())),
            }
        }
        let mut said = Vec::new();
        if !interests.is_empty() {
            said.push(format!(
                "file trigger interest in {} registered in /var/lib/dpkg/triggers/File",
                interests.join(", ")
            ));
        }
        let outcome = match unknown {
            Some(command) => unplaced(&package, "triggers", command, skip, "declares")?,
            None if ldconfig && out.ldconfig_interest == Some(true) => {
                out.ldconfig.get_or_insert_with(|| (package.clone(), "triggers".into()));
                said.push(format!("the ldconfig trigger: {LDCONFIG_DONE}"));
                Outcome::Emulated(said.join("; "))
            }
            None if !ldconfig => Outcome::Emulated(said.join("; ")),
            None if interests.is_empty() => Outcome::NoEffect(
                "the ldconfig trigger: no package of the image is interested in it (no libc-bin)"
                    .into(),
            ),
            None => {
                said.push("the ldconfig trigger: no package of the image is interested in it (no libc-bin)".into());
                Outcome::Emulated(said.join("; "))
            }
        };
        out.records.push(ScriptRecord { package, script: "triggers".into(), outcome });
        Ok(())
    }
}

/// A file trigger a package of the plan declares interest in (`interest[-noawait] PATH` in its
/// `triggers` control file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Interest {
    /// The package, for errors.
    pub(super) package: String,
    /// The name dpkg's trigger database gives it.
    pub(super) name: String,
    pub(super) path: String,
    pub(super) noawait: bool,
}

/// The file triggers the plan's packages declare: where a package of the plan installs under
/// one, dpkg would run the interested package's postinst `triggered`, which is not emulated
/// (the sandbox runs it); `new_files`: every path the plan installs (absolute).
pub(super) fn check_interests<'a>(
    interests: &[Interest],
    mut new_files: impl Iterator<Item = &'a str>,
) -> Result<()> {
    if interests.is_empty() {
        return Ok(());
    }
    if let Some((i, f)) = new_files.find_map(|f| {
        interests
            .iter()
            .find(|i| f.strip_prefix(i.path.as_str()).is_some_and(|r| r.starts_with('/')))
            .map(|i| (i, f))
    }) {
        return Err(crate::packages::scripts::needs_sandbox(
            &i.package,
            "triggers",
            format!("its file trigger on {} ({f} is installed there)", i.path),
        ));
    }
    Ok(())
}

/// Appends the plan's file trigger interests to dpkg's database
/// (`/var/lib/dpkg/triggers/File`: `PATH PACKAGE[/noawait]` a line, in the order declared,
/// after the base's, as dpkg appends them).
pub(super) fn register_interests(
    interests: &[Interest],
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
) -> Result<()> {
    if interests.is_empty() {
        return Ok(());
    }
    const FILE: &str = "var/lib/dpkg/triggers/File";
    let mut text = base.read(FILE, 4 << 20)?.unwrap_or_default();
    for i in interests {
        let line = format!("{} {}{}\n", i.path, i.name, if i.noawait { "/noawait" } else { "" });
        text.extend_from_slice(line.as_bytes());
    }
    Ok(layer.add_file(FILE, text, 0o644)?)
}

/// A script with `command` the build can neither emulate nor show to be without effect: the
/// build stops, unless `--skip-scripts` (`skip`) lists it as not run.
fn unplaced(
    package: &str,
    script: &str,
    command: String,
    skip: bool,
    verb: &str,
) -> Result<Outcome> {
    if !skip {
        return Err(Error::from(PackageError::Script {
            package: package.to_string(),
            script: script.to_string(),
            command,
            hint: "drop --no-sandbox to run it as dpkg does in a sandbox over the base, or pass --skip-scripts to build without running it (the report lists what was not run)",
        }));
    }
    Ok(Outcome::NotRun(format!("--skip-scripts (it {verb} `{command}`)")))
}

/// The removal scripts (`prerm`, `postrm`) of a package the build removes, from the base's
/// dpkg database: listed as not run.
pub(super) fn removed(
    gone: &Installed,
    info_name: &str,
    base: &dyn BaseFiles,
    out: &mut Accounted,
) -> Result<()> {
    for script in ["prerm", "postrm"] {
        if base.read(&format!("{}/{info_name}.{script}", super::dpkg::INFO), 1 << 20)?.is_some() {
            out.records.push(ScriptRecord {
                package: format!("{} {}", gone.name, gone.version),
                script: script.into(),
                outcome: Outcome::NotRun(
                    "removal scripts of packages the build removes are not run; their files and database entries are removed".into(),
                ),
            });
        }
    }
    Ok(())
}

/// Why a `dpkg-maintscript-helper` call has no effect in this install, or `None` when it may
/// have one. dpkg-maintscript-helper(1): the conffile commands act only when the version being
/// upgraded from is older than (or equal to) the one named (`rm_conffile`, `mv_conffile`);
/// `symlink_to_dir` and `dir_to_symlink` likewise.
fn maintscript_helper(
    words: &[String],
    old: Option<&Version>,
    base: &dyn BaseFiles,
) -> Result<Option<String>> {
    let Some(old) = old else {
        return Ok(Some(
            "dpkg-maintscript-helper: no earlier version of the package is installed".into(),
        ));
    };
    let args: Vec<&str> =
        words[1..].iter().map(String::as_str).take_while(|w| *w != "--").collect();
    if let ["rm_conffile", conffile, rest @ ..] = args.as_slice() {
        let last = rest.first().copied().unwrap_or("");
        let newer = match last.parse::<Version>() {
            Ok(last) if !last.to_string().is_empty() => old > &last,
            _ => false,
        };
        let absent = base.read(conffile.trim_start_matches('/'), 1 << 20)?.is_none();
        if newer {
            return Ok(Some(format!(
                "dpkg-maintscript-helper rm_conffile {conffile}: the installed version {old} is newer than {last}"
            )));
        }
        if absent {
            return Ok(Some(format!(
                "dpkg-maintscript-helper rm_conffile {conffile}: the base has no such file"
            )));
        }
    }
    Ok(None)
}

fn dedup(v: Vec<String>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    v.into_iter().filter(|s| seen.insert(s.clone())).collect()
}

/// dpkg's stat overrides (`/var/lib/dpkg/statoverride`, `USER GROUP MODE PATH` a line) for the
/// files this build unpacks: dpkg gives an overridden file that owner and mode as it unpacks it,
/// whatever the package says. Names are looked up in the image's passwd and group as they are
/// after the scripts (`#N` is a number); an override naming a user or group the image lacks is
/// left alone here, as one dpkg could not apply either.
pub(super) fn apply_statoverrides(
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
    unpacked: &BTreeSet<String>,
) -> Result<()> {
    let text = base.read("var/lib/dpkg/statoverride", 4 << 20)?.unwrap_or_default();
    for line in String::from_utf8_lossy(&text).lines() {
        let [user, group, mode, path] = line.split_whitespace().collect::<Vec<_>>()[..] else {
            continue;
        };
        let real = crate::packages::image::real(path, base)?;
        if !unpacked.contains(&real) {
            continue;
        }
        let id = |db: &str, name: &str| -> Result<Option<u64>> {
            match name.strip_prefix('#') {
                Some(n) => Ok(n.parse().ok()),
                None => users::image_id(base, layer, db, name),
            }
        };
        let (Some(uid), Some(gid), Ok(mode)) =
            (id("etc/passwd", user)?, id("etc/group", group)?, u32::from_str_radix(mode, 8))
        else {
            continue;
        };
        layer.set_owner_mode(&real, mode & 0o7777, uid, gid)?;
    }
    Ok(())
}

/// The xattr setcap writes.
const CAPABILITY: &str = "security.capability";

/// Applies the `chown`/`chgrp`/`chmod`/`setcap` calls to the layer's entries in order, after
/// the system groups are in: names are looked up in the image's passwd and group as they are
/// after the scripts.
pub(super) fn apply_file_changes(
    changes: &[FileChange],
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
) -> Result<()> {
    for c in changes {
        let id = |db: &str, name: &str| -> Result<u64> {
            users::image_id(base, layer, db, name)?.ok_or_else(|| {
                Error::from(PackageError::ScriptFails {
                    package: c.package.clone(),
                    script: "postinst".into(),
                    command: c.command.clone(),
                    reason: format!("/{db} has no `{name}`"),
                })
            })
        };
        let uid = c.user.as_deref().map(|u| id("etc/passwd", u)).transpose()?;
        let gid = c.group.as_deref().map(|g| id("etc/group", g)).transpose()?;
        let real = crate::packages::image::real(&c.path, base)?;
        let Some(mut entry) = layer.get(&real).filter(|e| e.kind != EntryKind::Whiteout).cloned()
        else {
            return Err(Error::from(PackageError::ScriptFails {
                package: c.package.clone(),
                script: "postinst".into(),
                command: c.command.clone(),
                reason: format!("the layer does not hold {}", c.path),
            }));
        };
        // chown(2) by root clears setuid, and setgid where the group may execute.
        if (uid.is_some() || gid.is_some()) && !matches!(entry.kind, EntryKind::Dir) {
            entry.mode &= !0o4000;
            if entry.mode & 0o010 != 0 {
                entry.mode &= !0o2000;
            }
        }
        if let Some(u) = uid {
            entry.uid = u;
        }
        if let Some(g) = gid {
            entry.gid = g;
        }
        if let Some(m) = &c.mode {
            entry.mode = m.apply(entry.mode);
        }
        // chown(2) also drops file capabilities: not followed here.
        let capable = layer.xattrs(&real).is_some_and(|x| x.contains_key(CAPABILITY));
        if (uid.is_some() || gid.is_some()) && capable {
            return Err(needs_sandbox(
                &c.package,
                format!("{} (after setcap: chown drops the file's capabilities)", c.command),
            ));
        }
        // One inode: every name of a hard-linked file changes with it.
        layer.set_owner_mode(&real, entry.mode, entry.uid, entry.gid)?;
        if let Some(caps) = &c.caps {
            layer.set_xattr(&real, CAPABILITY, caps.clone())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use erdma_oci::rootfs::SnapEntry;

    fn text(layer: &LayerContents, p: &str) -> String {
        match &layer.get(p).unwrap().kind {
            EntryKind::File(c) => String::from_utf8_lossy(c).into_owned(),
            k => panic!("{p}: {k:?}"),
        }
    }

    /// Where the image's ldconfig is not emulated (Ubuntu 22.04's glibc 2.35) and no package
    /// adds a library directory, the records say the cache was left alone.
    #[test]
    fn ldconfig_left_alone_is_said_so() {
        let rec = |script: &str, outcome: Outcome| ScriptRecord {
            package: "p 1".into(),
            script: script.into(),
            outcome,
        };
        let mut records = vec![
            rec("triggers", Outcome::Emulated(format!("the ldconfig trigger: {LDCONFIG_DONE}"))),
            rec("postinst", Outcome::Emulated(format!("system group g, {LDCONFIG_DONE}"))),
            rec("preinst", Outcome::Emulated(LDCONFIG_DONE.into())),
            rec("config", Outcome::Emulated("system group h".into())),
        ];
        crate::packages::ldconfig::not_emulated(&mut records, "glibc 2.35");
        let Outcome::NoEffect(d) = &records[0].outcome else { panic!("{:?}", records[0]) };
        assert!(d.starts_with("the ldconfig trigger: ldconfig: not emulated for this image (glibc 2.35); /etc/ld.so.cache is left"), "{d}");
        let Outcome::Emulated(d) = &records[1].outcome else { panic!("{:?}", records[1]) };
        assert!(d.starts_with("system group g, ldconfig: not emulated for this image"), "{d}");
        assert!(
            matches!(&records[2].outcome, Outcome::NoEffect(d) if d.starts_with("ldconfig: not emulated"))
        );
        assert_eq!(records[3].outcome, Outcome::Emulated("system group h".into()));
    }

    /// Several `dpkg-statoverride --add` calls over a database with one override already, held
    /// against the real dpkg-statoverride (`--admindir`, dpkg 1.21 as Debian 12 has it): the
    /// database and `statoverride-old` byte for byte (dpkg orders them by its file hash).
    #[test]
    fn stat_overrides_as_dpkg_statoverride_writes_them() {
        let tool = std::path::Path::new("/usr/bin/dpkg-statoverride");
        if !tool.exists() {
            eprintln!("skipped: needs dpkg-statoverride (dpkg)");
            return;
        }
        let calls = [
            "dpkg-statoverride --add root root 0750 /etc/softhsm",
            "dpkg-statoverride --add root nogroup 02770 /var/lib/softhsm",
            "dpkg-statoverride --add root nogroup 02770 /var/lib/softhsm/tokens",
            "dpkg-statoverride --quiet --add nobody root 0640 /etc/softhsm/softhsm2.conf",
            "dpkg-statoverride --add root root 4755 /usr/bin/a",
        ];
        let existing = "root root 755 /usr/bin/b\n";
        let admin = tempfile::tempdir().unwrap();
        for d in ["updates", "triggers"] {
            std::fs::create_dir(admin.path().join(d)).unwrap();
        }
        std::fs::write(admin.path().join("status"), "").unwrap();
        std::fs::write(admin.path().join("statoverride"), existing).unwrap();
        for c in calls {
            let words: Vec<&str> = c.split_whitespace().collect();
            let out = std::process::Command::new(tool)
                .arg("--admindir")
                .arg(admin.path())
                .args(&words[1..])
                .output()
                .unwrap();
            assert!(out.status.success(), "{c}: {out:?}");
        }
        let f = |s: &str| SnapEntry::File(Some(s.as_bytes().to_vec()));
        let b = crate::packages::testing::base(&[
            ("etc/passwd", f("root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/bin/sh\n")),
            ("etc/group", f("root:x:0:\nnogroup:x:65534:\n")),
            ("var/lib/dpkg/statoverride", f(existing)),
        ]);
        let adds: Vec<StatAdd> = calls
            .iter()
            .map(|c| {
                let words: Vec<String> = c.split_whitespace().map(String::from).collect();
                StatAdd::parse("p", &words).unwrap()
            })
            .collect();
        let mut layer = LayerContents::new();
        apply_stat_adds(&adds, &b, &mut layer).unwrap();
        for name in ["statoverride", "statoverride-old"] {
            let real = std::fs::read_to_string(admin.path().join(name)).unwrap();
            assert_eq!(text(&layer, &format!("var/lib/dpkg/{name}")), real, "{name}");
        }
    }
}
