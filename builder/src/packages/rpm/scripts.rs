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
//!   install-system-units` on EL9): [`crate::packages::presets`], once every package is
//!   unpacked.
//!
//! Without effect here:
//! - `-p /sbin/ldconfig`, or `ldconfig` in a body: the loader searches `/usr/lib64` and `/lib64`
//!   without a cache entry (rdma-core's `libibverbs`, `librdmacm`: redhat/rdma-core.spec's
//!   `%ldconfig_scriptlets`);
//! - `udevadm` (rdma-core's `%post` runs `udevadm trigger … || true`): no udev runs while an
//!   image is built, and `dnf install` in a container gets nothing from it either (its `/sys` is
//!   read-only there);
//! - tests, output and shell state ([`crate::packages::scripts::is_inert`]).
use std::collections::BTreeSet;

use crate::error::{Error, Result};
use crate::packages::scripts::{commands_with, is_inert, Known, Outcome, ScriptRecord, Truth};
use crate::packages::users;
use crate::packages::{alternatives, presets, PackageError};

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
    /// every package is unpacked ([`crate::packages::presets`]).
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
            Outcome::NoEffect(format!(
                "{shown}: the libraries are in the loader's default directories, found without a cache entry"
            ))
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
    for words in commands_with(&body, Some(&["1"]), &[], &known) {
        let cmd = words[0].rsplit('/').next().unwrap_or_default();
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
    let outcome = if emulated.is_empty() {
        Outcome::NoEffect(format!(
            "{shown}: only ldconfig, udevadm (no udev while an image is built) and tests"
        ))
    } else {
        Outcome::Emulated(emulated.join(", "))
    };
    Ok(Some(Scriptlet { record: record(outcome), ops, units, alts }))
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
        // ldconfig and udevadm alone: no effect, as before.
        let h = header("p", &[(tag::POSTIN, "/sbin/ldconfig\nudevadm trigger || true\n")]);
        let acc = scriptlets(&[&h], &files(), false).unwrap();
        assert!(matches!(acc.records[0].outcome, Outcome::NoEffect(_)));
    }
}
