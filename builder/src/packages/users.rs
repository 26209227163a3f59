//! System users and groups that maintainer scripts add with adduser(8) and addgroup(8), written
//! as adduser writes them: `etc/passwd`, `etc/shadow`, `etc/group`, `etc/gshadow` and the
//! backups (`passwd-`, …) that shadow's tools leave of the state before their last change.
use std::collections::BTreeSet;

use crate::error::{Error, Result};
use crate::packages::PackageError;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::{Entry, EntryKind, LayerContents};

/// `addgroup --system [--quiet] NAME`: the name, for exactly that form.
pub(crate) fn system_group(words: &[String]) -> Option<String> {
    let mut system = false;
    let mut name = None;
    for w in &words[1..] {
        match w.as_str() {
            "--system" => system = true,
            // Relaxes adduser's name check only; the name is checked here.
            "--quiet" | "--force-badname" => {}
            w if !w.starts_with('-') && name.is_none() => name = Some(w.to_string()),
            _ => return None,
        }
    }
    let name = name?;
    let valid = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-".contains(&b))
        && !name.starts_with('-');
    (system && valid).then_some(name)
}

/// `addgroup --system NAME` for each name, as adduser does it: the lowest free gid from
/// FIRST_SYSTEM_GID (100) to LAST_SYSTEM_GID (999), a line in group and gshadow, and the
/// previous versions kept as `group-` and `gshadow-`. A group the image has already is left
/// alone (adduser: "The group `NAME' already exists as a system group").
pub(crate) fn add_system_groups(
    names: &[String],
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
) -> Result<()> {
    let old_group = base.read("etc/group", 4 << 20)?.unwrap_or_default();
    let old_gshadow = base.read("etc/gshadow", 4 << 20)?;
    let mut group = String::from_utf8_lossy(&old_group).into_owned();
    let mut gshadow = old_gshadow.as_ref().map(|g| String::from_utf8_lossy(g).into_owned());
    // Each `addgroup` saves the file as it found it: the backups are the state before the last.
    let (mut before_group, mut before_gshadow) = (old_group.clone(), old_gshadow.clone());
    let mut added = false;
    for name in names {
        if group.lines().any(|l| l.split(':').next() == Some(name.as_str())) {
            continue;
        }
        before_group = group.clone().into_bytes();
        before_gshadow = gshadow.clone().map(String::into_bytes);
        let used: BTreeSet<u32> =
            group.lines().filter_map(|l| l.split(':').nth(2)?.parse().ok()).collect();
        let gid = (100..=999)
            .find(|g| !used.contains(g))
            .ok_or_else(|| Error::from(PackageError::NoGid { group: name.clone() }))?;
        push_line(&mut group, &format!("{name}:x:{gid}:"));
        if let Some(g) = gshadow.as_mut() {
            push_line(g, &format!("{name}:!::"));
        }
        added = true;
    }
    if !added {
        return Ok(());
    }
    layer.add_file("etc/group", group.into_bytes(), 0o644)?;
    layer.add_file("etc/group-", before_group, 0o644)?;
    if let (Some(new), Some(old)) = (gshadow, before_gshadow) {
        add_shadowed(layer, "etc/gshadow", new.into_bytes())?;
        add_shadowed(layer, "etc/gshadow-", old)?;
    }
    Ok(())
}

/// One `adduser --system` call (adduser(8), "Add a system user"), in the forms packages use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SystemUser {
    pub(crate) package: String,
    /// The script that adds it (`postinst`, `%pre`), for errors.
    pub(crate) script: String,
    /// The command as the script has it, for errors.
    pub(crate) command: String,
    pub(crate) name: String,
    /// `--ingroup GROUP`; `--group` gives the user a group of its own name (added with the
    /// system groups); neither: `nogroup`.
    pub(crate) group: String,
    pub(crate) home: String,
    /// Not `--no-create-home`: adduser makes the home where it does not exist.
    pub(crate) create_home: bool,
    pub(crate) shell: String,
    /// `--gecos`/`--comment`, which adduser sets with chfn after useradd.
    pub(crate) comment: Option<String>,
}

impl SystemUser {
    /// `adduser --system [--quiet] [--group | --ingroup G] [--home H] [--no-create-home]
    /// [--shell S] [--gecos C | --comment C] [--disabled-password] [--disabled-login] NAME`;
    /// `None` for any other form (a uid, a pool, unknown options, a name from a variable).
    /// Also the second return: whether `--group` asks for a group of the user's name.
    pub(crate) fn parse(package: &str, words: &[String]) -> Option<(SystemUser, bool)> {
        let mut system = false;
        let mut own_group = false;
        let mut user = SystemUser {
            package: package.to_string(),
            script: "postinst".into(),
            command: words.join(" "),
            name: String::new(),
            group: "nogroup".into(),
            home: "/nonexistent".into(),
            create_home: true,
            shell: "/usr/sbin/nologin".into(),
            comment: None,
        };
        let mut ingroup = None;
        let mut it = words[1..].iter();
        let safe = |v: &str| !v.is_empty() && !v.contains(['$', '`', ':', '\n']);
        while let Some(w) = it.next() {
            let (flag, inline) = match w.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
                _ => (w.as_str(), None),
            };
            let mut value = || inline.clone().or_else(|| it.next().cloned()).filter(|v| safe(v));
            match flag {
                "--system" => system = true,
                "--quiet"
                | "-q"
                | "--force-badname"
                | "--allow-badname"
                | "--disabled-password"
                | "--disabled-login" => {}
                "--group" => own_group = true,
                "--no-create-home" => user.create_home = false,
                "--ingroup" => ingroup = Some(value()?),
                "--home" => user.home = value()?,
                "--shell" => user.shell = value()?,
                "--gecos" | "--comment" => user.comment = Some(value()?),
                n if !n.starts_with('-') && user.name.is_empty() && inline.is_none() => {
                    user.name = n.to_string()
                }
                _ => return None,
            }
        }
        let valid = !user.name.is_empty()
            && user
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-".contains(&b));
        if !system || !valid || (own_group && ingroup.is_some()) || !user.home.starts_with('/') {
            return None;
        }
        if let Some(g) = ingroup {
            user.group = g;
        } else if own_group {
            user.group = user.name.clone();
        }
        Some((user, own_group))
    }
}

/// The day `useradd` records as the last password change: `SOURCE_DATE_EPOCH` where set (as
/// shadow's tools honour it), else today.
pub(crate) fn today() -> u64 {
    crate::packages::source_date_epoch().unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }) / 86_400
}

/// `adduser --system` for each user, in order, after the system groups are in, as adduser
/// 3.134 does it through `useradd -r`: a user the image has in the system uid range is left
/// alone; otherwise the lowest uid free from FIRST_SYSTEM_UID to LAST_SYSTEM_UID (100-999, or
/// as the image's `/etc/adduser.conf` sets them), `NAME:x:UID:GID::HOME:SHELL` in passwd and
/// `NAME:!:DAY::::::` in shadow (a locked password, no ageing), each file's previous version
/// kept as its backup; a comment is set after, as chfn does, so `passwd-` then holds the line
/// without it. A home adduser would create stops the emulation (the sandbox runs adduser).
/// `day`: the date shadow records ([`today`]).
pub(crate) fn add_system_users(
    users: &[SystemUser],
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
    day: u64,
) -> Result<()> {
    if users.is_empty() {
        return Ok(());
    }
    let read = |p: &str, layer: &LayerContents| -> Result<Option<String>> {
        Ok(crate::packages::image::read(p, base, layer, 4 << 20)?
            .map(|b| String::from_utf8_lossy(&b).into_owned()))
    };
    let conf = read("etc/adduser.conf", layer)?.unwrap_or_default();
    let setting = |key: &str| {
        conf.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
        })
    };
    let first: u64 = setting("FIRST_SYSTEM_UID").and_then(|v| v.parse().ok()).unwrap_or(100);
    let last: u64 = setting("LAST_SYSTEM_UID").and_then(|v| v.parse().ok()).unwrap_or(999);
    let mut passwd = read("etc/passwd", layer)?.unwrap_or_default();
    let mut shadow = read("etc/shadow", layer)?;
    let (mut before_passwd, mut before_shadow) = (None, None);
    for u in users {
        let fails = |reason: String| {
            Error::from(PackageError::ScriptFails {
                package: u.package.clone(),
                script: u.script.clone(),
                command: u.command.clone(),
                reason,
            })
        };
        if setting("UID_POOL").is_some_and(|v| !v.is_empty()) {
            return Err(crate::packages::scripts::needs_sandbox(
                &u.package,
                &u.script,
                format!("{} (the image's /etc/adduser.conf sets UID_POOL)", u.command),
            ));
        }
        if let Some(line) = passwd.lines().find(|l| l.split(':').next() == Some(u.name.as_str())) {
            let uid: u64 = line.split(':').nth(2).and_then(|v| v.parse().ok()).unwrap_or(u64::MAX);
            if (first..=last).contains(&uid) {
                continue;
            }
            return Err(fails(format!(
                "the user `{}' already exists, but is not a system user",
                u.name
            )));
        }
        let gid = image_id(base, layer, "etc/group", &u.group)?
            .ok_or_else(|| fails(format!("the group `{}' does not exist", u.group)))?;
        if u.create_home
            && !u.home.starts_with("/nonexistent")
            && !crate::packages::image::exists(&u.home, base, layer)?
        {
            return Err(crate::packages::scripts::needs_sandbox(
                &u.package,
                &u.script,
                format!("{} (it creates the home {})", u.command, u.home),
            ));
        }
        let used: BTreeSet<u64> =
            passwd.lines().filter_map(|l| l.split(':').nth(2)?.parse().ok()).collect();
        let uid = (first..=last)
            .find(|i| !used.contains(i))
            .ok_or_else(|| fails(format!("no uid is free from {first} to {last}")))?;
        before_passwd = Some(passwd.clone());
        let plain = format!("{}:x:{uid}:{gid}::{}:{}", u.name, u.home, u.shell);
        push_line(&mut passwd, &plain);
        if let Some(s) = shadow.as_mut() {
            before_shadow = Some(s.clone());
            push_line(s, &format!("{}:!:{day}::::::", u.name));
        }
        if let Some(c) = &u.comment {
            before_passwd = Some(passwd.clone());
            passwd.truncate(passwd.len() - plain.len() - 1);
            push_line(&mut passwd, &format!("{}:x:{uid}:{gid}:{c}:{}:{}", u.name, u.home, u.shell));
        }
    }
    if let Some(before) = before_passwd {
        layer.add_file("etc/passwd", passwd.into_bytes(), 0o644)?;
        layer.add_file("etc/passwd-", before.into_bytes(), 0o644)?;
    }
    if let (Some(new), Some(old)) = (shadow, before_shadow) {
        add_shadowed(layer, "etc/shadow", new.into_bytes())?;
        add_shadowed(layer, "etc/shadow-", old.into_bytes())?;
    }
    Ok(())
}

/// `shadow`, `gshadow` and their backups as Debian keeps them: 0640, root and the `shadow`
/// group (gid 42, base-passwd's).
fn add_shadowed(layer: &mut LayerContents, path: &str, content: Vec<u8>) -> Result<()> {
    Ok(layer
        .insert(path, Entry { kind: EntryKind::File(content), mode: 0o640, uid: 0, gid: 42 })?)
}

fn push_line(text: &mut String, line: &str) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(line);
    text.push('\n');
}

/// The id of `name` in the image's `db` (`etc/passwd`, `etc/group`) as it is after this build's
/// changes: the layer's copy where the build wrote one (the system groups it added), else the
/// base's.
pub(crate) fn image_id(
    base: &dyn BaseFiles,
    layer: &LayerContents,
    db: &str,
    name: &str,
) -> Result<Option<u64>> {
    let bytes = crate::packages::image::read(db, base, layer, 4 << 20)?.unwrap_or_default();
    Ok(String::from_utf8_lossy(&bytes)
        .lines()
        .find(|l| l.split(':').next() == Some(name))
        .and_then(|l| l.split(':').nth(2)?.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use erdma_oci::rootfs::SnapEntry;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn only_the_plain_system_group_form_is_emulated() {
        assert_eq!(system_group(&w("addgroup --system --quiet rdma")).as_deref(), Some("rdma"));
        assert_eq!(system_group(&w("addgroup --system _ssh")).as_deref(), Some("_ssh"));
        // openssh-client's postinst (Debian 12).
        assert_eq!(
            system_group(&w("addgroup --system --quiet --force-badname _ssh")).as_deref(),
            Some("_ssh")
        );
        assert_eq!(system_group(&w("addgroup rdma")), None);
        assert_eq!(system_group(&w("addgroup --system --gid 5 rdma")), None);
        assert_eq!(system_group(&w("addgroup --system a b")), None);
        assert_eq!(system_group(&w("addgroup --system $GROUP")), None);
    }

    #[test]
    fn system_user_forms() {
        // uuid-runtime's postinst (Debian 12).
        let (u, own) = SystemUser::parse(
            "p",
            &w("adduser --system --quiet --ingroup uuidd --home /run/uuidd --no-create-home uuidd"),
        )
        .unwrap();
        assert!(!own);
        assert_eq!(
            (u.name.as_str(), u.group.as_str(), u.home.as_str()),
            ("uuidd", "uuidd", "/run/uuidd")
        );
        assert!(!u.create_home);
        assert_eq!(u.shell, "/usr/sbin/nologin");
        let (u, own) =
            SystemUser::parse("p", &w("adduser --system --group --home=/var/lib/x x")).unwrap();
        assert!(own);
        assert_eq!((u.group.as_str(), u.home.as_str()), ("x", "/var/lib/x"));
        assert_eq!(SystemUser::parse("p", &w("adduser --system")), None);
        assert_eq!(SystemUser::parse("p", &w("adduser x")), None);
        assert_eq!(SystemUser::parse("p", &w("adduser --system --uid 5 x")), None);
        assert_eq!(SystemUser::parse("p", &w("adduser --system --group --ingroup g x")), None);
        assert_eq!(SystemUser::parse("p", &w("adduser --system $USER")), None);
        assert_eq!(SystemUser::parse("p", &w("adduser --system --home $HOME x")), None);
    }

    fn text(layer: &LayerContents, p: &str) -> String {
        match &layer.get(p).unwrap().kind {
            EntryKind::File(c) => String::from_utf8_lossy(c).into_owned(),
            k => panic!("{p}: {k:?}"),
        }
    }

    /// uuid-runtime's `addgroup --system uuidd` then `adduser --system --ingroup uuidd …` on
    /// Debian 12's base files (the last lines of each), as adduser 3.134 left them in
    /// `docker build`: uid 100 (the first free system uid), gid 101 (100 is `users`), a locked
    /// password with no ageing, and each backup the file before the call.
    #[test]
    fn a_system_user_as_adduser_writes_it() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n_apt:x:42:65534::/nonexistent:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
        let shadow =
            "root:*:20782:0:99999:7:::\n_apt:*:20782:0:99999:7:::\nnobody:*:20782:0:99999:7:::\n";
        let group = "root:x:0:\nusers:x:100:\nnogroup:x:65534:\n";
        let f = |s: &str| SnapEntry::File(Some(s.as_bytes().to_vec()));
        let b = crate::packages::testing::base(&[
            ("etc/passwd", f(passwd)),
            ("etc/shadow", f(shadow)),
            ("etc/group", f(group)),
        ]);
        let mut layer = LayerContents::new();
        add_system_groups(&["uuidd".into()], &b, &mut layer).unwrap();
        let (u, _) = SystemUser::parse(
            "p",
            &w("adduser --system --quiet --ingroup uuidd --home /run/uuidd --no-create-home uuidd"),
        )
        .unwrap();
        let (v, own) = SystemUser::parse(
            "p",
            &w("adduser --system --no-create-home --comment Agent --home /nonexistent agent"),
        )
        .unwrap();
        assert!(!own);
        add_system_users(&[u.clone(), v], &b, &mut layer, 20783).unwrap();
        assert_eq!(
            text(&layer, "etc/passwd"),
            format!("{passwd}uuidd:x:100:101::/run/uuidd:/usr/sbin/nologin\nagent:x:101:65534:Agent:/nonexistent:/usr/sbin/nologin\n")
        );
        // chfn's change is the last one: the backup has the agent without its comment.
        assert_eq!(
            text(&layer, "etc/passwd-"),
            format!("{passwd}uuidd:x:100:101::/run/uuidd:/usr/sbin/nologin\nagent:x:101:65534::/nonexistent:/usr/sbin/nologin\n")
        );
        assert_eq!(
            text(&layer, "etc/shadow"),
            format!("{shadow}uuidd:!:20783::::::\nagent:!:20783::::::\n")
        );
        assert_eq!(text(&layer, "etc/shadow-"), format!("{shadow}uuidd:!:20783::::::\n"));
        assert_eq!(layer.get("etc/shadow").unwrap().gid, 42);
        assert_eq!(layer.get("etc/shadow").unwrap().mode, 0o640);

        // A user the image has as a system user: nothing changes; as a normal user: adduser
        // fails, and so does the install.
        let b = crate::packages::testing::base(&[
            ("etc/passwd", f("uuidd:x:100:101::/run/uuidd:/usr/sbin/nologin\n")),
            ("etc/group", f(group)),
        ]);
        let mut layer = LayerContents::new();
        add_system_users(std::slice::from_ref(&u), &b, &mut layer, 20783).unwrap();
        assert!(layer.get("etc/passwd").is_none());
        let b = crate::packages::testing::base(&[
            ("etc/passwd", f("uuidd:x:1000:1000::/home/uuidd:/bin/sh\n")),
            ("etc/group", f("uuidd:x:101:\n")),
        ]);
        let e =
            add_system_users(&[u], &b, &mut LayerContents::new(), 20783).unwrap_err().to_string();
        assert!(e.contains("not a system user"), "{e}");
    }
}
