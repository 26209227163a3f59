//! Scriptlets of the packages an rpm build installs, accounted for in the report
//! ([`crate::packages::scripts`]). None is run: each `%pretrans`, `%pre`, `%post` and
//! `%posttrans` is read as rpm would run it on a first install (`$1` = 1), and every command in
//! it must be emulated or shown to be without effect in an image build; anything else sends the
//! install to the sandbox, where the image's rpm runs every scriptlet ([`super::sandboxed`]),
//! or with `--no-sandbox` stops the build before anything is written
//! ([`PackageError::Script`]), unless `--skip-scripts` lists it as not run.
//!
//! Emulated:
//! - `groupadd -r` and `useradd -r` (shadow's), in the forms of Fedora's packaging guidelines
//!   ("Users and Groups": `getent group N >/dev/null || groupadd -r N`,
//!   `getent passwd N >/dev/null || useradd -r -g N -d HOME -s /sbin/nologin -c COMMENT N`,
//!   `exit 0`), of EL8's openssh (`-g 74`/`-u 74`, `2> /dev/null || :`) and of `%sysusers_create_compat` (names in
//!   single quotes, `|| :`): written as the tools write them ([`crate::packages::users`]). rpm
//!   runs a transaction: every `%pretrans`, then for each package in plan order its `%pre`, its
//!   files, its `%post`; every `%posttrans` last. The accounts are applied in that order
//!   ([`super::unpack::unpack`]), and rpm resolves file owners by name as it unpacks, so a user
//!   that a `%pre` adds owns the package's `%attr` files. `getent group|passwd NAME` is answered
//!   from the image's account files and the accounts the scriptlets before it add.
//!
//! - `alternatives --install` (chkconfig's, also as `update-alternatives`) in `%post` and
//!   `%posttrans`: [`crate::packages::alternatives`], after the package's files.
//!
//! - `%systemd_post`'s `systemctl preset` (directly on EL8, through `systemd-update-helper
//!   install-system-units` on EL9): [`super::presets`], once every package is
//!   unpacked.
//!
//! - `-p /sbin/ldconfig`, or `ldconfig` in a body or a trigger (rdma-core's `libibverbs`,
//!   `librdmacm`: redhat/rdma-core.spec's `%ldconfig_scriptlets`; glibc's
//!   `%transfiletriggerin`): `/etc/ld.so.cache` rewritten once every package is unpacked, as
//!   the image's ldconfig writes it ([`crate::packages::ldconfig`]). Where that cannot be
//!   reproduced, the base's cache stays (the loader finds libraries in `/lib64` and
//!   `/usr/lib64` without it), unless a package adds a directory through `/etc/ld.so.conf.d`:
//!   then the sandbox runs the image's ldconfig.
//!
//! Without effect here:
//! - `udevadm` (rdma-core's `%post` runs `udevadm trigger … || true`): no udev runs while an
//!   image is built, and `dnf install` in a container gets nothing from it either (its `/sys` is
//!   read-only there);
//! - tests, output and shell state ([`crate::packages::scripts::is_inert`]).
//!
//! File triggers ([`file_triggers`]): those of the image's packages and of the new ones fire
//! on the paths installed (`in`) and removed (`un`, `postun`), and are accounted the same way:
//! ldconfig (glibc's `%transfiletriggerin`) as above, `udevadm` and `systemctl daemon-reload`
//! without effect, anything else goes to the sandbox.
use std::collections::BTreeSet;

use super::presets;
use crate::error::{Error, Result};
use crate::packages::scripts::{commands_with, is_inert, Known, Outcome, ScriptRecord, Truth};
use crate::packages::users;
use crate::packages::{alternatives, PackageError};

use crate::packages::ldconfig::DONE as LDCONFIG_DONE;

const HINT: &str = "drop --no-sandbox to run it as rpm does in a sandbox over the base, or pass --skip-scripts to build without running it (the report lists what was not run)";

/// The install-time scriptlets rpm runs, with their interpreter tags.
pub(super) const SCRIPTLETS: &[(u32, u32, &str)] = &[
    (1151, 1153, "%pretrans"),
    (erdma_rpm::header::tag::PREIN, erdma_rpm::header::tag::PREINPROG, "%pre"),
    (erdma_rpm::header::tag::POSTIN, erdma_rpm::header::tag::POSTINPROG, "%post"),
    (1152, 1154, "%posttrans"),
];

/// What the scriptlets of a transaction amount to: the report's records and the system groups
/// and users they add, by where rpm runs them.
#[derive(Debug, Default)]
pub(crate) struct Accounted {
    /// By package in plan order, each package's in [`SCRIPTLETS`] order.
    pub(crate) records: Vec<ScriptRecord>,
    /// The `%pretrans` of every package, in plan order.
    pub(crate) pretrans: Vec<users::Op>,
    /// Each package's `%pre` (by plan index).
    pub(crate) pre: Vec<Vec<users::Op>>,
    /// Each package's `%post` (by plan index).
    pub(crate) post: Vec<Vec<users::Op>>,
    /// The `%posttrans` of every package, in plan order.
    pub(crate) posttrans: Vec<users::Op>,
    /// `systemctl preset` calls (`%systemd_post`), in the order rpm makes them; applied once
    /// every package is unpacked ([`super::presets`]).
    pub(crate) presets: Vec<presets::Preset>,
    /// Each package's `%post` `alternatives --install` calls (by plan index), applied after its
    /// files as rpm runs them ([`crate::packages::alternatives`]).
    pub(crate) post_alternatives: Vec<Vec<alternatives::Install>>,
    /// The `%posttrans` `alternatives --install` calls of every package, in plan order.
    pub(crate) posttrans_alternatives: Vec<alternatives::Install>,
}

impl Accounted {
    /// Every account call, in the order rpm makes them.
    pub(crate) fn in_order(&self) -> Vec<users::Op> {
        let mut all = self.pretrans.clone();
        for (pre, post) in self.pre.iter().zip(&self.post) {
            all.extend(pre.iter().cloned());
            all.extend(post.iter().cloned());
        }
        all.extend(self.posttrans.iter().cloned());
        all
    }
}

/// The image's account files, as `getent` reads them.
pub(crate) struct AccountFiles {
    /// `etc/group`.
    pub(crate) group: String,
    /// `etc/passwd`.
    pub(crate) passwd: String,
}

/// What each install-time scriptlet of the transaction's packages (`headers`, in plan order)
/// amounts to, read in the order rpm runs them; `accounts`: the image's account files before
/// the transaction; `skip`: `--skip-scripts`. The first scriptlet that can be neither emulated
/// nor shown to be without effect is the error ([`PackageError::Script`]), unless `skip`.
pub(crate) fn scriptlets(
    headers: &[&erdma_rpm::header::Header],
    accounts: &AccountFiles,
    skip: bool,
) -> Result<Accounted> {
    let n = headers.len();
    // (package, index in SCRIPTLETS), as rpm runs them.
    let order: Vec<(usize, usize)> = (0..n)
        .map(|p| (p, 0))
        .chain((0..n).flat_map(|p| [(p, 1), (p, 2)]))
        .chain((0..n).map(|p| (p, 3)))
        .collect();
    let mut slots: Vec<[Option<ScriptRecord>; 4]> = vec![Default::default(); n];
    let mut out = Accounted {
        pre: vec![Vec::new(); n],
        post: vec![Vec::new(); n],
        post_alternatives: vec![Vec::new(); n],
        ..Default::default()
    };
    let mut added: Vec<users::Op> = Vec::new();
    for (p, s) in order {
        let Some(Scriptlet { record, ops, units, alts }) =
            scriptlet(headers[p], s, accounts, &added, skip)?
        else {
            continue;
        };
        slots[p][s] = Some(record);
        out.presets.extend(units);
        match s {
            2 => out.post_alternatives[p] = alts,
            _ => out.posttrans_alternatives.extend(alts),
        }
        added.extend(ops.iter().cloned());
        match s {
            0 => out.pretrans.extend(ops),
            1 => out.pre[p] = ops,
            2 => out.post[p] = ops,
            _ => out.posttrans.extend(ops),
        }
    }
    out.records = slots.into_iter().flatten().flatten().collect();
    Ok(out)
}

/// What one scriptlet amounts to.
struct Scriptlet {
    record: ScriptRecord,
    /// Its account calls.
    ops: Vec<users::Op>,
    /// Its `systemctl preset` calls.
    units: Vec<presets::Preset>,
    /// Its `alternatives --install` calls (`%post` and `%posttrans` only).
    alts: Vec<alternatives::Install>,
}

impl Scriptlet {
    fn only(record: ScriptRecord) -> Scriptlet {
        Scriptlet { record, ops: Vec::new(), units: Vec::new(), alts: Vec::new() }
    }
}

/// One scriptlet (`SCRIPTLETS[which]` of `h`): its record, the account calls and the
/// `systemctl preset` calls it makes; `None` where the package has no such scriptlet. `added`: the accounts the scriptlets rpm
/// runs before it add.
fn scriptlet(
    h: &erdma_rpm::header::Header,
    which: usize,
    accounts: &AccountFiles,
    added: &[users::Op],
    skip: bool,
) -> Result<Option<Scriptlet>> {
    let (script, prog, what) = SCRIPTLETS[which];
    let package = format!("{} {}", h.name(), h.evr());
    let body = h.string(script).unwrap_or_default();
    let interp = h.strings(prog).join(" ");
    if body.trim().is_empty() && interp.is_empty() {
        return Ok(None);
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
    let record =
        |outcome: Outcome| ScriptRecord { package: package.clone(), script: what.into(), outcome };
    let ldconfig = |w: &str| w == "ldconfig" || w.ends_with("/ldconfig");
    if body.trim().is_empty() {
        let outcome = if ldconfig(&interp) {
            Outcome::Emulated(LDCONFIG_DONE.into())
        } else {
            refuse(interp.clone())?
        };
        return Ok(Some(Scriptlet::only(record(outcome))));
    }
    if !shell {
        return Ok(Some(Scriptlet::only(record(refuse(format!("{interp} script"))?))));
    }
    // `getent group|passwd NAME`: the image's files and what earlier scriptlets add.
    let groups: BTreeSet<&str> = added.iter().filter_map(users::Op::group).collect();
    let users_added: BTreeSet<&str> = added.iter().filter_map(users::Op::user).collect();
    let status = |w: &[String]| -> Truth {
        let [cmd, db, name] = w else { return None };
        let (file, added) = match (cmd.as_str(), db.as_str()) {
            ("getent", "group") => (&accounts.group, &groups),
            ("getent", "passwd") => (&accounts.passwd, &users_added),
            _ => return None,
        };
        Some(
            added.contains(name.as_str())
                || file.lines().any(|l| l.split(':').next() == Some(name.as_str())),
        )
    };
    let known = Known { status: &status, output: &|_| None };
    let call = |words: &[String]| users::Call::new(&package, what, words);
    let mut ops = Vec::new();
    let mut units = Vec::new();
    let mut alts = Vec::new();
    let mut emulated: Vec<String> = Vec::new();
    let mut ran_ldconfig = false;
    for words in commands_with(&body, Some(&["1"]), &[], &known) {
        let cmd = words[0].rsplit('/').next().unwrap_or_default();
        ran_ldconfig |= ldconfig(cmd);
        if is_inert(&words) || ldconfig(cmd) || cmd == "udevadm" {
            continue;
        }
        if let Some(p) = presets::Preset::parse(call(&words), &words) {
            emulated.push(format!("systemctl preset {}", p.units.join(" ")));
            units.push(p);
            continue;
        }
        if cmd == "alternatives" || cmd == "update-alternatives" {
            // Only where rpm has the package's files in place (`%post`, `%posttrans`).
            let parsed = (which >= 2)
                .then(|| {
                    alternatives::Install::parse(
                        alternatives::Tool::Chkconfig,
                        &package,
                        what,
                        &words,
                    )
                })
                .flatten();
            if let Some(i) = parsed {
                emulated.push(format!(
                    "alternative {} ({} -> {}, priority {})",
                    i.name, i.link, i.path, i.priority
                ));
                alts.push(i);
                continue;
            }
        }
        let op = match cmd {
            "groupadd" => users::GroupAdd::parse(call(&words), &words).map(users::Op::GroupAdd),
            "useradd" => users::UserAdd::parse(call(&words), &words).map(users::Op::UserAdd),
            _ => None,
        };
        match op {
            Some(users::Op::GroupAdd(g)) => {
                emulated.push(format!("system group {}", g.name));
                ops.push(users::Op::GroupAdd(g));
            }
            Some(users::Op::UserAdd(u)) => {
                emulated.push(format!("system user {}", u.name));
                ops.push(users::Op::UserAdd(u));
            }
            _ => {
                // Not run at all (`--skip-scripts`): nor are the accounts it adds.
                return Ok(Some(Scriptlet::only(record(refuse(words.join(" "))?))));
            }
        }
    }
    if ran_ldconfig {
        emulated.push(LDCONFIG_DONE.into());
    }
    let outcome = if emulated.is_empty() {
        Outcome::NoEffect(format!(
            "{shown}: only udevadm (no udev while an image is built) and tests"
        ))
    } else {
        Outcome::Emulated(emulated.join(", "))
    };
    Ok(Some(Scriptlet { record: record(outcome), ops, units, alts }))
}

/// File triggers (`%filetriggerin`, `%transfiletriggerin`, and their `un`/`postun` forms):
/// the prefixes, flags and script index of each (rpm's `FILETRIGGER*` and
/// `TRANSFILETRIGGER*` tags, one entry per prefix; lib/rpmscript.c, `rpmScriptFromTriggerTag`).
const FILE_TRIGGERS: &[FileTriggerTags] = &[
    FileTriggerTags {
        scripts: 5066,
        progs: 5067,
        names: 5069,
        index: 5070,
        flags: 5072,
        what: "%filetrigger",
    },
    FileTriggerTags {
        scripts: 5076,
        progs: 5077,
        names: 5079,
        index: 5080,
        flags: 5082,
        what: "%transfiletrigger",
    },
];
/// `RPMSENSE_TRIGGERIN`, `RPMSENSE_TRIGGERUN`, `RPMSENSE_TRIGGERPOSTUN` (rpmds.h).
const TRIGGER_IN: u64 = 1 << 16;
const TRIGGER_UN: u64 = 1 << 17;
const TRIGGER_POSTUN: u64 = 1 << 18;

struct FileTriggerTags {
    scripts: u32,
    progs: u32,
    names: u32,
    index: u32,
    flags: u32,
    what: &'static str,
}

/// The file triggers this transaction fires, accounted as [`scriptlets`] accounts scriptlets:
/// those of the image's installed packages that stay (`installed`) and of the packages
/// installed (`planned`), whose prefix a path of `added` (the files installed) starts with
/// (`in`), or of `removed` (the files of erased and replaced packages: `un`, `postun`), as a
/// plain string prefix. Each fires once per script. `ldconfig` is emulated once every package
/// is unpacked ([`crate::packages::ldconfig`]); `udevadm` and `systemctl daemon-reload` (no
/// systemd runs while an image is built) are without effect here; anything else is refused as an unknown
/// scriptlet command is: the sandbox, where the image's rpm fires them, or `--skip-scripts`.
pub(crate) fn file_triggers(
    installed: &[&erdma_rpm::header::Header],
    planned: &[&erdma_rpm::header::Header],
    added: &[String],
    removed: &[String],
    skip: bool,
) -> Result<Vec<ScriptRecord>> {
    let mut out = Vec::new();
    for h in installed.iter().chain(planned) {
        for tags in FILE_TRIGGERS {
            let names = h.strings(tags.names);
            let index = h.ints(tags.index);
            let flags = h.ints(tags.flags);
            let scripts = h.strings(tags.scripts);
            let progs = h.strings(tags.progs);
            let mut fired: Vec<(usize, &str, &str)> = Vec::new();
            for (i, prefix) in names.iter().enumerate() {
                let (Some(&ix), Some(&f)) = (index.get(i), flags.get(i)) else { continue };
                let ix = ix as usize;
                let (sense, paths) = if f & TRIGGER_IN != 0 {
                    ("in", added)
                } else if f & TRIGGER_UN != 0 {
                    ("un", removed)
                } else if f & TRIGGER_POSTUN != 0 {
                    ("postun", removed)
                } else {
                    continue;
                };
                // A plain string prefix, as rpm 4.18 matches it: `/usr/lib` fires for
                // `/usr/lib64/a` too, `/opt/x/` not for `/opt/xy/b`.
                if paths.iter().any(|p| p.starts_with(prefix.as_str()))
                    && !fired.iter().any(|(x, _, _)| *x == ix)
                {
                    fired.push((ix, sense, prefix));
                }
            }
            for (ix, sense, prefix) in fired {
                let body = scripts.get(ix).cloned().unwrap_or_default();
                let prog = progs.get(ix).cloned().unwrap_or_default();
                let script = format!("{}{sense} ({prefix})", tags.what);
                out.push(trigger_record(h, script, &body, &prog, skip)?);
            }
        }
    }
    Ok(out)
}

/// `RPMSENSE_TRIGGERPREIN` (rpmds.h).
const TRIGGER_PREIN: u64 = 1 << 25;

/// Classic triggers (`%triggerin -- NAME`, `%triggerun`, `%triggerpostun`, `%triggerprein`;
/// rpm's `TRIGGERNAME`, `TRIGGERFLAGS`, `TRIGGERVERSION`, `TRIGGERINDEX`, `TRIGGERSCRIPTS`,
/// `TRIGGERSCRIPTPROG`), accounted as [`file_triggers`] accounts file triggers. One fires when
/// the package it names is installed (`in`, `prein`: one of `planned`) or erased (`un`,
/// `postun`: one of `gone`) at a version its condition accepts, or when its own package is
/// installed (or erased) while the named one is in the image.
pub(crate) fn package_triggers(
    staying: &[&erdma_rpm::header::Header],
    planned: &[&erdma_rpm::header::Header],
    gone: &[&erdma_rpm::header::Header],
    skip: bool,
) -> Result<Vec<ScriptRecord>> {
    use erdma_rpm::header::Header;
    let as_provide = |h: &Header| erdma_rpm::Dep {
        name: h.name(),
        version: Some((erdma_rpm::Cmp::Eq, h.evr())),
        pre: false,
    };
    let named = |set: &[&Header], dep: &erdma_rpm::Dep| {
        set.iter().any(|h| h.name() == dep.name && dep.satisfied_by(&as_provide(h)))
    };
    let mut out = Vec::new();
    let roles = staying
        .iter()
        .map(|h| (*h, 0))
        .chain(planned.iter().map(|h| (*h, 1)))
        .chain(gone.iter().map(|h| (*h, 2)));
    for (h, role) in roles {
        let deps = h.deps(1066, 1068, 1067);
        let flags = h.ints(1068);
        let index = h.ints(1069);
        let scripts = h.strings(1065);
        let progs = h.strings(1092);
        let mut fired: Vec<usize> = Vec::new();
        for (i, dep) in deps.iter().enumerate() {
            let (Some(&f), Some(&ix)) = (flags.get(i), index.get(i)) else { continue };
            let ix = ix as usize;
            let (sense, installing) = if f & TRIGGER_IN != 0 {
                ("in", true)
            } else if f & TRIGGER_PREIN != 0 {
                ("prein", true)
            } else if f & TRIGGER_UN != 0 {
                ("un", false)
            } else if f & TRIGGER_POSTUN != 0 {
                ("postun", false)
            } else {
                continue;
            };
            let present: Vec<&Header> = staying.iter().chain(planned).copied().collect();
            let fires = if installing {
                named(planned, dep) || (role == 1 && named(&present, dep))
            } else {
                named(gone, dep) || (role == 2 && named(staying, dep))
            };
            if !fires || fired.contains(&ix) {
                continue;
            }
            fired.push(ix);
            let body = scripts.get(ix).cloned().unwrap_or_default();
            let prog = progs.get(ix).cloned().unwrap_or_default();
            out.push(trigger_record(
                h,
                format!("%trigger{sense} ({})", dep.name),
                &body,
                &prog,
                skip,
            )?);
        }
    }
    Ok(out)
}

/// The record of a trigger that fires: without effect, not run (`skip`), or the refusal that
/// sends the install to the sandbox.
fn trigger_record(
    h: &erdma_rpm::header::Header,
    script: String,
    body: &str,
    prog: &str,
    skip: bool,
) -> Result<ScriptRecord> {
    let package = format!("{} {}", h.name(), h.evr());
    let outcome = match trigger_outcome(body, prog) {
        Ok(outcome) => outcome,
        Err(_) if skip => {
            Outcome::NotRun(format!("--skip-scripts (it runs `{}`)", shown_command(body, prog)))
        }
        Err(command) => {
            return Err(Error::from(PackageError::Script { package, script, command, hint: HINT }))
        }
    };
    Ok(ScriptRecord { package, script, outcome })
}

/// What a trigger's script amounts to in an image build (ldconfig emulated, or nothing), or
/// the first command that may change something else.
fn trigger_outcome(body: &str, prog: &str) -> std::result::Result<Outcome, String> {
    let prog_name = prog.split_whitespace().next().unwrap_or("/bin/sh");
    let ldconfig = |w: &str| w == "ldconfig" || w.ends_with("/ldconfig");
    if !matches!(prog_name, "/bin/sh" | "/bin/bash" | "/usr/bin/sh" | "/usr/bin/bash") {
        return if ldconfig(prog_name) && body.trim().is_empty() {
            Ok(Outcome::Emulated(LDCONFIG_DONE.into()))
        } else {
            Err(format!("{prog} script"))
        };
    }
    let mut ran_ldconfig = false;
    for words in commands_with(body, Some(&[]), &[], &Known::NOTHING) {
        let cmd = words[0].rsplit('/').next().unwrap_or_default();
        let reload = cmd == "systemctl"
            && words.iter().skip(1).filter(|w| !w.starts_with('-')).eq(["daemon-reload"].iter());
        ran_ldconfig |= ldconfig(cmd);
        if is_inert(&words) || ldconfig(cmd) || cmd == "udevadm" || reload {
            continue;
        }
        return Err(words.join(" "));
    }
    Ok(if ran_ldconfig {
        Outcome::Emulated(LDCONFIG_DONE.into())
    } else {
        Outcome::NoEffect(
            "only udevadm and systemctl daemon-reload (no udev or systemd runs while an image is built)"
                .into(),
        )
    })
}

/// The command a trigger runs, for `--skip-scripts`' record.
fn shown_command(body: &str, prog: &str) -> String {
    match body.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')) {
        Some(line) => line.to_string(),
        None => prog.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use erdma_rpm::header::{tag, Header, Value};

    fn header(name: &str, scripts: &[(u32, &str)]) -> Header {
        let mut e = vec![
            (tag::NAME, Value::String(name.into())),
            (tag::VERSION, Value::String("1.0".into())),
            (tag::RELEASE, Value::String("1.el9".into())),
        ];
        e.extend(scripts.iter().map(|(t, s)| (*t, Value::String(s.to_string()))));
        Header::build(&e).unwrap()
    }

    fn files() -> AccountFiles {
        AccountFiles {
            group: "root:x:0:\nsshd:x:74:\n".into(),
            passwd: "root:x:0:0:root:/root:/bin/bash\n".into(),
        }
    }

    fn commands(ops: &[users::Op]) -> Vec<String> {
        ops.iter()
            .map(|o| match o {
                users::Op::GroupAdd(g) => g.call.command.clone(),
                users::Op::UserAdd(u) => u.call.command.clone(),
                o => panic!("{o:?}"),
            })
            .collect()
    }

    /// `%systemd_post` as EL9 (systemd 252's macros.systemd: through systemd-update-helper)
    /// and EL8 (systemd 239's: `systemctl --no-reload preset … &>/dev/null || :`) expand it:
    /// emulated as `systemctl preset` of the units, applied once every package is unpacked.
    #[test]
    fn systemd_post_is_a_preset() {
        let el9 = "\nif [ $1 -eq 1 ] && [ -x \"/usr/lib/systemd/systemd-update-helper\" ]; then\n    # Initial installation\n    /usr/lib/systemd/systemd-update-helper install-system-units sshd.service sshd.socket || :\nfi\n";
        let el8 = "\nif [ $1 -eq 1 ] ; then\n        # Initial installation\n        systemctl --no-reload preset chronyd.service &>/dev/null || :\nfi\n";
        let a = header("a", &[(tag::POSTIN, el9)]);
        let b = header("b", &[(tag::POSTIN, el8)]);
        let acc = scriptlets(&[&a, &b], &files(), false).unwrap();
        let units: Vec<&[String]> = acc.presets.iter().map(|p| p.units.as_slice()).collect();
        assert_eq!(units, [&["sshd.service", "sshd.socket"][..], &["chronyd.service"][..]]);
        assert_eq!(
            acc.records[0].outcome,
            Outcome::Emulated("systemctl preset sshd.service sshd.socket".into())
        );
        // `systemctl enable` is not a preset: the sandbox runs it.
        let c = header("c", &[(tag::POSTIN, "systemctl enable x.service\n")]);
        assert!(scriptlets(&[&c], &files(), false).is_err());
    }

    /// `alternatives --install` (python3's unversioned-python form, by either name) in `%post`
    /// and `%posttrans`: emulated, by package, after its files; in `%pre`, where the package's
    /// files are not there yet, it goes to the sandbox.
    #[test]
    fn alternatives_in_post_are_emulated() {
        let post = "if [ $1 -eq 1 ]; then\n  /usr/sbin/alternatives --install /usr/bin/unversioned-python python /usr/bin/python3 300 \\\n    --slave /usr/bin/python python-py /usr/bin/python3 || :\nfi\n";
        let a = header("a", &[(tag::POSTIN, post)]);
        let b =
            header("b", &[(1152, "update-alternatives --install /usr/bin/t t /usr/bin/t2 0x10\n")]);
        let acc = scriptlets(&[&a, &b], &files(), false).unwrap();
        assert_eq!(acc.post_alternatives[0].len(), 1);
        let i = &acc.post_alternatives[0][0];
        assert_eq!((i.name.as_str(), i.priority, i.slaves.len()), ("python", 300, 1));
        assert!(acc.post_alternatives[1].is_empty());
        assert_eq!(acc.posttrans_alternatives[0].priority, 16);
        assert_eq!(
            acc.records[0].outcome,
            Outcome::Emulated("alternative python (/usr/bin/unversioned-python -> /usr/bin/python3, priority 300)".into())
        );
        let c = header("c", &[(tag::PREIN, "alternatives --install /usr/bin/t t /usr/bin/t2 1\n")]);
        assert!(scriptlets(&[&c], &files(), false).is_err());
    }

    /// Fedora's guidelines' `%pre` (unbound's), EL8 openssh's with fixed ids, `2> /dev/null`
    /// and `|| :`, and `%sysusers_create_compat`'s quoted form: the calls that run, with the
    /// words as the tools get them; `getent` told from the image and earlier scriptlets.
    #[test]
    fn system_account_scriptlets_are_emulated_in_transaction_order() {
        let unbound = "getent group unbound >/dev/null || groupadd -r unbound\ngetent passwd unbound >/dev/null || \\\n  useradd -r -g unbound -d /etc/unbound -s /sbin/nologin -c \"Unbound DNS resolver\" unbound\nexit 0\n";
        let openssh = "getent group sshd >/dev/null || groupadd -g 74 -r sshd || :\ngetent passwd sshd >/dev/null || \\\n  useradd -c \"Privilege-separated SSH\" -u 74 -g sshd \\\n  -s /sbin/nologin -r -d /var/empty/sshd sshd 2> /dev/null || :\n";
        let sysusers = "getent group 'foo' >/dev/null || groupadd -r 'foo' || :\ngetent passwd 'foo' >/dev/null || useradd -r -g 'foo' -d '/var/lib/foo' -s '/sbin/nologin' -c 'Foo daemon' 'foo' || :\n";
        // A later package's %pretrans runs before the first one's %pre; its group is known to
        // the %pre's getent.
        let a = header("a", &[(tag::PREIN, unbound), (tag::POSTIN, openssh)]);
        let b = header("b", &[(tag::PREIN, sysusers), (1151, "groupadd -r unbound\n")]);
        let acc = scriptlets(&[&a, &b], &files(), false).unwrap();
        assert_eq!(commands(&acc.pretrans), ["groupadd -r unbound"]);
        // unbound's group is there: only its user is added.
        assert_eq!(
            commands(&acc.pre[0]),
            ["useradd -r -g unbound -d /etc/unbound -s /sbin/nologin -c Unbound DNS resolver unbound"]
        );
        // sshd's group is in the image: only the user, its redirection dropped.
        assert_eq!(
            commands(&acc.post[0]),
            ["useradd -c Privilege-separated SSH -u 74 -g sshd -s /sbin/nologin -r -d /var/empty/sshd sshd"]
        );
        assert_eq!(
            commands(&acc.pre[1]),
            [
                "groupadd -r foo",
                "useradd -r -g foo -d /var/lib/foo -s /sbin/nologin -c Foo daemon foo"
            ]
        );
        assert!(acc.post[1].is_empty() && acc.posttrans.is_empty());
        let users::Op::UserAdd(u) = &acc.post[0][0] else { panic!() };
        assert_eq!((u.uid, u.group.as_deref()), (Some(74), Some("sshd")));
        assert_eq!(u.comment.as_deref(), Some("Privilege-separated SSH"));
        assert_eq!(acc.in_order().len(), 5);
        // The records: by package, each in %pretrans, %pre, %post, %posttrans order.
        let got: Vec<String> = acc.records.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "a 1.0-1.el9 %pre: emulated: system user unbound",
                "a 1.0-1.el9 %post: emulated: system user sshd",
                "b 1.0-1.el9 %pretrans: emulated: system group unbound",
                "b 1.0-1.el9 %pre: emulated: system group foo, system user foo",
            ]
        );
        // Without the earlier %pretrans, the %pre adds both.
        let acc = scriptlets(&[&a], &files(), false).unwrap();
        let got: Vec<String> = acc.records.iter().map(ToString::to_string).collect();
        assert_eq!(got[0], "a 1.0-1.el9 %pre: emulated: system group unbound, system user unbound");
    }

    /// A form the emulation does not reproduce (`-m` creates a home; a non-system user) is the
    /// scriptlet's refusal, which sends the install to the sandbox; with `--skip-scripts` the
    /// scriptlet is not run, nor are its accounts added.
    #[test]
    fn other_account_forms_refuse() {
        for body in [
            "getent passwd x >/dev/null || useradd -r -m -d /var/lib/x x\n",
            "groupadd x\n",
            "useradd -r $USER\n",
            "groupadd -r x && chown x /var/lib/x\n",
        ] {
            let h = header("p", &[(tag::PREIN, body)]);
            let e = scriptlets(&[&h], &files(), false).unwrap_err();
            assert!(
                matches!(&e, Error::Package(PackageError::Script { script, .. }) if script == "%pre"),
                "{body}: {e}"
            );
            let acc = scriptlets(&[&h], &files(), true).unwrap();
            assert!(acc.in_order().is_empty(), "{body}");
            assert!(matches!(acc.records[0].outcome, Outcome::NotRun(_)), "{body}");
        }
        // ldconfig and udevadm: the cache rewritten (once every package is in), udevadm without
        // effect; udevadm alone: no effect.
        let h = header("p", &[(tag::POSTIN, "/sbin/ldconfig\nudevadm trigger || true\n")]);
        let acc = scriptlets(&[&h], &files(), false).unwrap();
        assert_eq!(acc.records[0].outcome, Outcome::Emulated(LDCONFIG_DONE.into()));
        assert_eq!(
            crate::packages::ldconfig::first_run(&acc.records).map(|r| r.script.as_str()),
            Some("%post")
        );
        let h = header("p", &[(tag::POSTIN, "udevadm trigger || true\n")]);
        let acc = scriptlets(&[&h], &files(), false).unwrap();
        assert!(matches!(acc.records[0].outcome, Outcome::NoEffect(_)));
        assert!(crate::packages::ldconfig::first_run(&acc.records).is_none());
    }

    /// Packages built by the real rpmbuild: a base package with file triggers (as glibc's
    /// `%transfiletriggerin -- /lib /usr/lib /lib64 /usr/lib64` running ldconfig, and one that
    /// writes a file), read back as installed headers; the prefixes match as rpm 4.18 matches
    /// them when it installs (seen with `rpm -i`: `/usr/lib` fires for `/usr/lib64/a`, `/opt/x/`
    /// does not for `/opt/xy/b`).
    #[test]
    fn file_triggers_fire_as_rpm_fires_them_real_rpm() {
        let dir = tempfile::tempdir().unwrap();
        let triggers = "%transfiletriggerin -- /lib /usr/lib /lib64 /usr/lib64\n/sbin/ldconfig\n\
            %transfiletriggerpostun -- /lib /usr/lib /lib64 /usr/lib64\n/sbin/ldconfig\n\
            %transfiletriggerin -- /usr/lib/systemd/system\nsystemctl daemon-reload\n\
            %filetriggerin -- /opt/x/\necho \"$(cat)\" >> /var/lib/trig.log\n";
        let Some(pkg) =
            crate::packages::testing::rpmbuild_noarch(dir.path(), "trig", "1", triggers)
        else {
            return;
        };
        let base = [&pkg.header];
        let files = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let fire = |added: &[&str], removed: &[&str], skip: bool| {
            file_triggers(&base, &[], &files(added), &files(removed), skip)
        };
        // A library under /usr/lib64: the ldconfig trigger, once, whichever prefixes match.
        let r =
            fire(&["/usr/lib64/libibverbs.so.1", "/usr/lib64/libmlx5.so.1"], &[], false).unwrap();
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(
            (r[0].package.as_str(), r[0].script.as_str()),
            ("trig 1-1", "%transfiletriggerin (/usr/lib)")
        );
        assert_eq!(r[0].outcome, Outcome::Emulated(LDCONFIG_DONE.into()), "{r:?}");
        // A unit file: ldconfig too (`/usr/lib` is its prefix), and daemon-reload, without
        // effect; files elsewhere fire nothing.
        let r = fire(&["/usr/lib/systemd/system/rdma.service"], &[], false).unwrap();
        let outcomes: Vec<&Outcome> = r.iter().map(|t| &t.outcome).collect();
        assert!(matches!(outcomes[..], [Outcome::Emulated(_), Outcome::NoEffect(_)]), "{r:?}");
        assert!(fire(&["/usr/share/doc/x", "/opt/xy/b"], &[], false).unwrap().is_empty());
        // A removed library (OFED's, replaced): the postun trigger.
        let r = fire(&[], &["/usr/lib64/libmlx5.so.1.24.58"], false).unwrap();
        assert_eq!(
            r.iter().map(|t| t.script.as_str()).collect::<Vec<_>>(),
            ["%transfiletriggerpostun (/usr/lib)"]
        );
        // A trigger that writes a file: refused naming it (the sandbox runs it), or not run
        // with --skip-scripts.
        let e = fire(&["/opt/x/c"], &[], false).unwrap_err().to_string();
        assert!(
            e.contains("trig 1-1") && e.contains("%filetriggerin (/opt/x/)") && e.contains("echo"),
            "{e}"
        );
        let r = fire(&["/opt/x/c"], &[], true).unwrap();
        assert!(
            matches!(&r[0].outcome, Outcome::NotRun(w) if w.contains("--skip-scripts")),
            "{r:?}"
        );
    }

    /// Classic triggers, in packages built by the real rpmbuild: `%triggerin -- libibverbs < 40`
    /// fires only for a libibverbs that old, `%triggerpostun -- mlnx-ofa_kernel` when OFED's goes.
    #[test]
    fn package_triggers_fire_on_the_named_package_at_its_version_real_rpm() {
        let dir = tempfile::tempdir().unwrap();
        let build = |name: &str, version: &str, body: &str| {
            crate::packages::testing::rpmbuild_noarch(dir.path(), name, version, body)
                .map(|p| p.header)
        };
        let Some(base) = build(
            "watcher",
            "1",
            "%triggerin -- libibverbs < 40\ntouch /var/lib/old-verbs\n%triggerpostun -- mlnx-ofa_kernel\n/sbin/ldconfig\n",
        ) else {
            return;
        };
        let [new, old, ofed] =
            [("libibverbs", "46.0"), ("libibverbs", "39.0"), ("mlnx-ofa_kernel", "5.8")]
                .map(|(n, v)| build(n, v, "").unwrap());
        assert!(package_triggers(&[&base], &[&new], &[], false).unwrap().is_empty());
        let e = package_triggers(&[&base], &[&old], &[], false).unwrap_err().to_string();
        assert!(
            e.contains("watcher 1-1")
                && e.contains("%triggerin (libibverbs)")
                && e.contains("touch"),
            "{e}"
        );
        let r = package_triggers(&[&base], &[&new], &[&ofed], false).unwrap();
        assert_eq!(
            r.iter().map(|t| t.script.as_str()).collect::<Vec<_>>(),
            ["%triggerpostun (mlnx-ofa_kernel)"]
        );
        // It runs ldconfig.
        assert_eq!(r[0].outcome, Outcome::Emulated(LDCONFIG_DONE.into()), "{r:?}");
        // The trigger package itself installed while the named one is there: fires too.
        let r = package_triggers(&[&old], &[&base], &[], true).unwrap();
        assert!(matches!(&r[0].outcome, Outcome::NotRun(w) if w.contains("touch")), "{r:?}");
    }
}
