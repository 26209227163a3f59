//! System users and groups that scripts add: with adduser(8) and addgroup(8) (Debian's
//! maintainer scripts), or with shadow's useradd(8) and groupadd(8) (rpm scriptlets, and some
//! maintainer scripts), written as those tools write them: `etc/passwd`, `etc/shadow`,
//! `etc/group`, `etc/gshadow`, and the backups (`passwd-`, …) each call leaves of the file as
//! it found it. The calls are applied in the order the scripts make them ([`apply`]).
use std::collections::{BTreeMap, BTreeSet};

use crate::error::{Error, Result};
use crate::packages::PackageError;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::{Entry, EntryKind, LayerContents};

/// Whose shadow tools the image has, where they differ in what they write: Debian's (and
/// Ubuntu's) keep `shadow` and `gshadow` at 0640 root:shadow and lock a new account's password
/// with `!`; Enterprise Linux's keep them at 0000 root:root (as its `setup` package ships
/// them; the RHEL STIG's RHEL-06-000035/38 check for it) and lock it with `!!` (shadow-utils'
/// Red Hat patch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tools {
    Debian,
    RedHat,
}

impl Tools {
    fn locked(self) -> &'static str {
        match self {
            Tools::Debian => "!",
            Tools::RedHat => "!!",
        }
    }
}

/// One call that adds a system group or user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    /// `addgroup --system NAME` (adduser's allocation).
    AddGroup(Call, String),
    /// `adduser --system …`.
    AddUser(SystemUser),
    /// `groupadd --system …` (shadow's allocation).
    GroupAdd(GroupAdd),
    /// `useradd --system …`.
    UserAdd(UserAdd),
}

impl Op {
    /// The group name this call adds, if any.
    pub(crate) fn group(&self) -> Option<&str> {
        match self {
            Op::AddGroup(_, n) => Some(n),
            Op::GroupAdd(g) => Some(&g.name),
            Op::AddUser(u) if u.own_group => Some(&u.name),
            Op::UserAdd(u) if u.group.is_none() => Some(&u.name),
            _ => None,
        }
    }

    /// The user name this call adds, if any.
    pub(crate) fn user(&self) -> Option<&str> {
        match self {
            Op::AddUser(u) => Some(&u.name),
            Op::UserAdd(u) => Some(&u.name),
            _ => None,
        }
    }
}

/// Where a call comes from, for errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    pub(crate) package: String,
    /// `postinst`, `%pre`, …
    pub(crate) script: String,
    /// The command as the script has it.
    pub(crate) command: String,
}

impl Call {
    pub(crate) fn new(package: &str, script: &str, words: &[String]) -> Call {
        Call { package: package.into(), script: script.into(), command: words.join(" ") }
    }

    fn fails(&self, reason: String) -> Error {
        Error::from(PackageError::ScriptFails {
            package: self.package.clone(),
            script: self.script.clone(),
            command: self.command.clone(),
            reason,
        })
    }

    fn needs_sandbox(&self, why: &str) -> Error {
        crate::packages::scripts::needs_sandbox(
            &self.package,
            &self.script,
            format!("{} ({why})", self.command),
        )
    }
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && !n.starts_with('-')
        && n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-".contains(&b))
}

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
    (system && valid_name(&name)).then_some(name)
}

/// `groupadd --system [-f] [-g GID] NAME` (groupadd(8)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupAdd {
    pub(crate) call: Call,
    pub(crate) name: String,
    pub(crate) gid: Option<u64>,
    /// `-f`: success where the group exists.
    pub(crate) force: bool,
}

impl GroupAdd {
    /// `groupadd -r|--system [-f|--force] [-g|--gid GID] NAME`; `None` for other forms (a
    /// non-system group, `-o`, `-K`, `-p`, a prefix or root).
    pub(crate) fn parse(call: Call, words: &[String]) -> Option<GroupAdd> {
        let mut g = GroupAdd { call, name: String::new(), gid: None, force: false };
        let mut system = false;
        let mut it = words[1..].iter();
        while let Some(w) = it.next() {
            match w.as_str() {
                "-r" | "--system" => system = true,
                "-f" | "--force" => g.force = true,
                "-g" | "--gid" => g.gid = Some(it.next()?.parse().ok()?),
                n if valid_name(n) && g.name.is_empty() => g.name = n.to_string(),
                _ => return None,
            }
        }
        (system && !g.name.is_empty()).then_some(g)
    }
}

/// `useradd --system …` (useradd(8)), in the forms packages use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UserAdd {
    pub(crate) call: Call,
    pub(crate) name: String,
    pub(crate) uid: Option<u64>,
    /// `-g GROUP` (a name or a number); `None`: a group of the user's name (`-U`, or
    /// `USERGROUPS_ENAB yes` in login.defs without `-N`).
    pub(crate) group: Option<String>,
    pub(crate) home: Option<String>,
    pub(crate) shell: Option<String>,
    pub(crate) comment: Option<String>,
    /// `-N`: no group of the user's name.
    pub(crate) no_user_group: bool,
    /// `-U`: a group of the user's name.
    pub(crate) user_group: bool,
}

impl UserAdd {
    /// `useradd -r|--system [-u UID] [-g GROUP] [-d HOME] [-s SHELL] [-c COMMENT] [-M] [-N] [-U]
    /// [-l] NAME`; `None` for other forms (`-m`, which creates the home, `-o`, `-G`, `-p`, `-k`,
    /// a prefix or root, a non-system user, values from unknown variables).
    pub(crate) fn parse(call: Call, words: &[String]) -> Option<UserAdd> {
        let mut u = UserAdd {
            call,
            name: String::new(),
            uid: None,
            group: None,
            home: None,
            shell: None,
            comment: None,
            no_user_group: false,
            user_group: false,
        };
        let mut system = false;
        let unsafe_value = |v: &String| v.contains(['$', '`', ':', '\n']);
        let mut it = words[1..].iter();
        while let Some(w) = it.next() {
            let (flag, inline) = match w.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
                _ => (w.as_str(), None),
            };
            let mut value =
                || inline.clone().or_else(|| it.next().cloned()).filter(|v| !unsafe_value(v));
            match flag {
                "-r" | "--system" => system = true,
                "-M" | "--no-create-home" | "-l" | "--no-log-init" => {}
                "-N" | "--no-user-group" => u.no_user_group = true,
                "-U" | "--user-group" => u.user_group = true,
                "-u" | "--uid" => u.uid = Some(value()?.parse().ok()?),
                "-g" | "--gid" => u.group = Some(value().filter(|g| !g.is_empty())?),
                "-d" | "--home-dir" | "--home" => {
                    u.home = Some(value().filter(|h| h.starts_with('/'))?)
                }
                "-s" | "--shell" => u.shell = Some(value().filter(|s| s.starts_with('/'))?),
                "-c" | "--comment" => u.comment = Some(value()?),
                n if valid_name(n) && u.name.is_empty() && inline.is_none() => {
                    u.name = n.to_string()
                }
                _ => return None,
            }
        }
        let conflicting = (u.user_group && (u.no_user_group || u.group.is_some()))
            || (u.no_user_group && u.group.is_none());
        (system && !u.name.is_empty() && !conflicting).then_some(u)
    }
}

/// One `adduser --system` call (adduser(8), "Add a system user"), in the forms packages use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SystemUser {
    pub(crate) call: Call,
    pub(crate) name: String,
    /// `--ingroup GROUP`; `--group` gives the user a group of its own name; neither: `nogroup`.
    pub(crate) group: String,
    /// `--group`: the group of the user's name is added first, as addgroup adds it.
    pub(crate) own_group: bool,
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
    pub(crate) fn parse(call: Call, words: &[String]) -> Option<SystemUser> {
        let mut system = false;
        let mut own_group = false;
        let mut user = SystemUser {
            call,
            name: String::new(),
            group: "nogroup".into(),
            own_group: false,
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
        if !system
            || !valid_name(&user.name)
            || (own_group && ingroup.is_some())
            || !user.home.starts_with('/')
        {
            return None;
        }
        if let Some(g) = ingroup {
            user.group = g;
        } else if own_group {
            user.group = user.name.clone();
            user.own_group = true;
        }
        Some(user)
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

/// The account databases as the calls change them, and each file as the last call that changed
/// it found it (its backup).
struct Db {
    files: BTreeMap<&'static str, Option<String>>,
    before: BTreeMap<&'static str, String>,
}

const PASSWD: &str = "etc/passwd";
const SHADOW: &str = "etc/shadow";
const GROUP: &str = "etc/group";
const GSHADOW: &str = "etc/gshadow";

impl Db {
    fn load(base: &dyn BaseFiles, layer: &LayerContents) -> Result<Db> {
        let mut files = BTreeMap::new();
        for f in [PASSWD, SHADOW, GROUP, GSHADOW] {
            let text = crate::packages::image::read(f, base, layer, 4 << 20)?;
            files.insert(f, text.map(|b| String::from_utf8_lossy(&b).into_owned()));
        }
        Ok(Db { files, before: BTreeMap::new() })
    }

    fn text(&self, f: &str) -> &str {
        self.files.get(f).and_then(|t| t.as_deref()).unwrap_or_default()
    }

    fn has(&self, f: &str, name: &str) -> Option<u64> {
        self.text(f)
            .lines()
            .find(|l| l.split(':').next() == Some(name))
            .map(|l| l.split(':').nth(2).and_then(|v| v.parse().ok()).unwrap_or(u64::MAX))
    }

    fn ids(&self, f: &str) -> BTreeSet<u64> {
        self.text(f).lines().filter_map(|l| l.split(':').nth(2)?.parse().ok()).collect()
    }

    /// A group's lines in `group` and `gshadow`, as one call adds them.
    fn add_group(&mut self, name: &str, gid: u64) {
        self.append(&[(GROUP, format!("{name}:x:{gid}:")), (GSHADOW, format!("{name}:!::"))]);
    }

    /// The gid addgroup gives a system group: the lowest free from FIRST_SYSTEM_GID (100) to
    /// LAST_SYSTEM_GID (999).
    fn adduser_gid(&self, name: &str) -> Result<u64> {
        let used = self.ids(GROUP);
        (100..=999)
            .find(|g| !used.contains(g))
            .ok_or_else(|| Error::from(PackageError::NoGid { group: name.to_string() }))
    }

    /// One call's changes: `lines` appended to each file the image has (a missing `shadow` or
    /// `gshadow` stays missing), the file as it was kept as the backup.
    fn append(&mut self, lines: &[(&'static str, String)]) {
        let mut saved = BTreeSet::new();
        for (f, line) in lines {
            let Some(Some(text)) = self.files.get_mut(f) else { continue };
            if saved.insert(*f) {
                self.before.insert(f, text.clone());
            }
            push_line(text, line);
        }
    }

    /// The last line of `f` replaced (chfn's change after useradd), the file kept as backup.
    fn replace_last(&mut self, f: &'static str, old: &str, new: &str) {
        if let Some(Some(text)) = self.files.get_mut(f) {
            self.before.insert(f, text.clone());
            text.truncate(text.len() - old.len() - 1);
            push_line(text, new);
        }
    }

    fn write(self, layer: &mut LayerContents, tools: Tools) -> Result<()> {
        for (f, before) in self.before {
            let now = self.files.get(f).cloned().flatten().unwrap_or_default();
            let backup = format!("{f}-");
            if f == SHADOW || f == GSHADOW {
                add_shadowed(layer, f, now.into_bytes(), tools)?;
                add_shadowed(layer, &backup, before.into_bytes(), tools)?;
            } else {
                layer.add_file(f, now.into_bytes(), 0o644)?;
                layer.add_file(&backup, before.into_bytes(), 0o644)?;
            }
        }
        Ok(())
    }
}

/// `KEY VALUE` settings of login.defs(5), or `KEY=VALUE` of useradd's defaults file.
fn settings(text: &str, sep: char) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let (k, v) = match sep {
                '=' => l.split_once('=')?,
                _ => l.trim().split_once(char::is_whitespace)?,
            };
            Some((k.trim().to_string(), v.trim().trim_matches('"').to_string()))
        })
        .collect()
}

/// The id shadow's tools choose for a system account (`find_new_uid`/`find_new_gid`): the
/// preferred id where it is in the range and free; else one below the lowest id in use in the
/// range (the top of the range when none is); where that falls below the range, the highest
/// free id.
fn shadow_id(used: &BTreeSet<u64>, min: u64, max: u64, preferred: Option<u64>) -> Option<u64> {
    if let Some(p) = preferred.filter(|p| (min..=max).contains(p) && !used.contains(p)) {
        return Some(p);
    }
    match used.range(min..=max).next() {
        None => Some(max),
        Some(&lowest) if lowest > min => Some(lowest - 1),
        Some(_) => (min..=max).rev().find(|i| !used.contains(i)),
    }
}

/// Applies the calls in order over the image's account files, as the tools would have run
/// them during the install, and writes the files each changed (with their backups) into the
/// layer. `day`: the date shadow records ([`today`]).
///
/// - `addgroup --system NAME`: a group the image has is left alone; else the lowest free gid
///   from FIRST_SYSTEM_GID (100) to LAST_SYSTEM_GID (999), a line in group and gshadow.
/// - `adduser --system` (adduser 3.134, through `useradd -r`): a user the image has in the
///   system uid range is left alone; otherwise the lowest uid free from FIRST_SYSTEM_UID to
///   LAST_SYSTEM_UID (100-999, or as the image's `/etc/adduser.conf` sets them),
///   `NAME:x:UID:GID::HOME:SHELL` in passwd and `NAME:!:DAY::::::` in shadow (a locked password,
///   no ageing); a comment is set after, as chfn does, so `passwd-` holds the line without it.
///   A home it creates (not `--no-create-home`, not `/nonexistent`, not there yet) is made as
///   adduser's `create_homedir` makes a system user's: missing parents 0755 root's, the home
///   the user's and its primary group's with `SYS_DIR_MODE` (0755), no skeleton copied. A
///   UID_POOL goes to the sandbox.
/// - `groupadd --system` and `useradd --system` (shadow): ids as [`shadow_id`] chooses them in
///   SYS_GID_MIN..SYS_GID_MAX and SYS_UID_MIN..SYS_UID_MAX of the image's `/etc/login.defs`
///   (defaults 101 and GID_MIN/UID_MIN − 1), a user's own group (`USERGROUPS_ENAB yes`, or
///   `-U`) preferring the uid as gid; the home and shell from `-d`/`-s`, else
///   `/etc/default/useradd`'s HOME/NAME and SHELL; the home is not made (`-r`). An account
///   that exists makes the tool fail, and the install with it (`groupadd -f` excepted).
pub(crate) fn apply(
    ops: &[Op],
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
    day: u64,
    tools: Tools,
) -> Result<()> {
    if ops.is_empty() {
        return Ok(());
    }
    let settings = Settings::read(base, layer)?;
    let db = Db::load(base, layer)?;
    let mut accounts = Accounts { db, settings, day, tools };
    for op in ops {
        match op {
            Op::AddGroup(_, name) => accounts.addgroup(name)?,
            Op::GroupAdd(g) => accounts.groupadd(g)?,
            Op::AddUser(u) => accounts.adduser(u, base, layer)?,
            Op::UserAdd(u) => accounts.useradd(u)?,
        }
    }
    accounts.db.write(layer, tools)
}

/// What the image sets for the tools: adduser's `/etc/adduser.conf`, shadow's
/// `/etc/login.defs` and useradd's `/etc/default/useradd`, as [`apply`] reads them.
struct Settings {
    adduser_conf: BTreeMap<String, String>,
    /// FIRST_SYSTEM_UID and LAST_SYSTEM_UID (adduser).
    first: u64,
    last: u64,
    /// SYS_GID_MIN and SYS_GID_MAX (login.defs).
    sys_gid: (u64, u64),
    /// SYS_UID_MIN and SYS_UID_MAX (login.defs).
    sys_uid: (u64, u64),
    /// `USERGROUPS_ENAB yes`: useradd gives a user a group of its name.
    usergroups: bool,
    /// Where the image has `/etc/default/useradd`.
    useradd_defaults: Option<BTreeMap<String, String>>,
}

impl Settings {
    /// The image's settings, with the tools' defaults for what it does not set.
    fn read(base: &dyn BaseFiles, layer: &LayerContents) -> Result<Settings> {
        let read = |p: &str, layer: &LayerContents| -> Result<String> {
            Ok(crate::packages::image::read(p, base, layer, 4 << 20)?
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default())
        };
        let adduser_conf = settings(&read("etc/adduser.conf", layer)?, '=');
        let login_defs = settings(&read("etc/login.defs", layer)?, ' ');
        let useradd_defaults =
            crate::packages::image::read("etc/default/useradd", base, layer, 1 << 20)?
                .map(|b| settings(&String::from_utf8_lossy(&b), '='));
        let num = |m: &BTreeMap<String, String>, k: &str, d: u64| -> u64 {
            m.get(k).and_then(|v| v.parse().ok()).unwrap_or(d)
        };
        let (first, last) = (
            num(&adduser_conf, "FIRST_SYSTEM_UID", 100),
            num(&adduser_conf, "LAST_SYSTEM_UID", 999),
        );
        let sys_gid = (
            num(&login_defs, "SYS_GID_MIN", 101),
            num(&login_defs, "SYS_GID_MAX", num(&login_defs, "GID_MIN", 1000) - 1),
        );
        let sys_uid = (
            num(&login_defs, "SYS_UID_MIN", 101),
            num(&login_defs, "SYS_UID_MAX", num(&login_defs, "UID_MIN", 1000) - 1),
        );
        let usergroups = login_defs.get("USERGROUPS_ENAB").is_some_and(|v| v == "yes");
        Ok(Settings { adduser_conf, first, last, sys_gid, sys_uid, usergroups, useradd_defaults })
    }
}

/// The account databases as [`apply`]'s calls change them, with what each call reads.
struct Accounts {
    db: Db,
    settings: Settings,
    /// The date shadow records ([`today`]).
    day: u64,
    tools: Tools,
}

impl Accounts {
    /// `addgroup --system NAME`: nothing where the group exists.
    fn addgroup(&mut self, name: &str) -> Result<()> {
        if self.db.has(GROUP, name).is_some() {
            return Ok(());
        }
        let gid = self.db.adduser_gid(name)?;
        self.db.add_group(name, gid);
        Ok(())
    }

    /// `groupadd --system`: fails where the group exists (but with `-f`) or its `-g` gid is
    /// taken.
    fn groupadd(&mut self, g: &GroupAdd) -> Result<()> {
        let db = &mut self.db;
        if db.has(GROUP, &g.name).is_some() {
            if g.force {
                return Ok(());
            }
            return Err(g.call.fails(format!("group '{}' already exists", g.name)));
        }
        let used = db.ids(GROUP);
        let (min, max) = self.settings.sys_gid;
        let gid = match g.gid {
            Some(gid) if !used.contains(&gid) => gid,
            Some(gid) if !g.force => {
                return Err(g.call.fails(format!("GID '{gid}' already exists")))
            }
            _ => shadow_id(&used, min, max, None)
                .ok_or_else(|| g.call.fails("no free system gid".into()))?,
        };
        db.add_group(&g.name, gid);
        Ok(())
    }

    /// `adduser --system`: nothing where the user exists as a system user; else its group
    /// (with `--group`), its home where adduser makes one, its passwd and shadow lines, and
    /// the comment chfn sets after.
    fn adduser(
        &mut self,
        u: &SystemUser,
        base: &dyn BaseFiles,
        layer: &mut LayerContents,
    ) -> Result<()> {
        let (first, last) = (self.settings.first, self.settings.last);
        let db = &mut self.db;
        if let Some(uid) = db.has(PASSWD, &u.name) {
            if (first..=last).contains(&uid) {
                return Ok(());
            }
            return Err(u
                .call
                .fails(format!("the user `{}' already exists, but is not a system user", u.name)));
        }
        if self.settings.adduser_conf.get("UID_POOL").is_some_and(|v| !v.is_empty()) {
            return Err(u.call.needs_sandbox("the image's /etc/adduser.conf sets UID_POOL"));
        }
        if u.own_group && db.has(GROUP, &u.name).is_none() {
            let gid = db.adduser_gid(&u.name)?;
            db.add_group(&u.name, gid);
        }
        let gid = db
            .has(GROUP, &u.group)
            .ok_or_else(|| u.call.fails(format!("the group `{}' does not exist", u.group)))?;
        let make_home = u.create_home
            && !is_nonexistent(&u.home)
            && !crate::packages::image::exists(&u.home, base, layer)?;
        let used = db.ids(PASSWD);
        let uid = (first..=last)
            .find(|i| !used.contains(i))
            .ok_or_else(|| u.call.fails(format!("no uid is free from {first} to {last}")))?;
        if make_home {
            make_system_home(u, uid, gid, &self.settings.adduser_conf, base, layer)?;
        }
        let plain = format!("{}:x:{uid}:{gid}::{}:{}", u.name, u.home, u.shell);
        db.append(&[
            (PASSWD, plain.clone()),
            (SHADOW, format!("{}:{}:{}::::::", u.name, self.tools.locked(), self.day)),
        ]);
        if let Some(c) = &u.comment {
            let full = format!("{}:x:{uid}:{gid}:{c}:{}:{}", u.name, u.home, u.shell);
            db.replace_last(PASSWD, &plain, &full);
        }
        Ok(())
    }

    /// `useradd --system`: fails where the user exists; else its uid, its shell and home
    /// (given, else the defaults), its group ([`Accounts::useradd_gid`]), its passwd and shadow
    /// lines.
    fn useradd(&mut self, u: &UserAdd) -> Result<()> {
        if self.db.has(PASSWD, &u.name).is_some() {
            return Err(u.call.fails(format!("user '{}' already exists", u.name)));
        }
        if self.db.files.get(SHADOW).is_none_or(Option::is_none) {
            return Err(u.call.needs_sandbox("the image has no /etc/shadow"));
        }
        let defaults = self.settings.useradd_defaults.as_ref();
        let shell = match (&u.shell, defaults.and_then(|d| d.get("SHELL"))) {
            (Some(s), _) | (None, Some(s)) => s.clone(),
            (None, None) => {
                return Err(u
                    .call
                    .needs_sandbox("no -s, and the image has no SHELL in /etc/default/useradd"))
            }
        };
        let home = match &u.home {
            Some(h) => h.clone(),
            None => format!(
                "{}/{}",
                defaults.and_then(|d| d.get("HOME")).map_or("/home", String::as_str),
                u.name
            ),
        };
        let used_uids = self.db.ids(PASSWD);
        let (min, max) = self.settings.sys_uid;
        let uid = match u.uid {
            Some(uid) if used_uids.contains(&uid) => {
                return Err(u.call.fails(format!("UID {uid} is not unique")))
            }
            Some(uid) => uid,
            None => shadow_id(&used_uids, min, max, None)
                .ok_or_else(|| u.call.fails("no free system uid".into()))?,
        };
        let gid = self.useradd_gid(u, uid)?;
        let comment = u.comment.as_deref().unwrap_or_default();
        self.db.append(&[
            (PASSWD, format!("{}:x:{uid}:{gid}:{comment}:{home}:{shell}", u.name)),
            (SHADOW, format!("{}:{}:{}::::::", u.name, self.tools.locked(), self.day)),
        ]);
        Ok(())
    }

    /// The primary group of useradd's user `u` (uid `uid`): `-g` (a gid or a name) where
    /// given; else a group of its name, added with the uid as the preferred gid, where it gets
    /// one (`-U`, or `USERGROUPS_ENAB yes` without `-N`).
    fn useradd_gid(&mut self, u: &UserAdd, uid: u64) -> Result<u64> {
        let db = &mut self.db;
        let own_group =
            u.group.is_none() && (u.user_group || (self.settings.usergroups && !u.no_user_group));
        Ok(match &u.group {
            Some(g) => match g.parse::<u64>() {
                Ok(n) if db.ids(GROUP).contains(&n) => n,
                _ => db
                    .has(GROUP, g)
                    .ok_or_else(|| u.call.fails(format!("group '{g}' does not exist")))?,
            },
            None if own_group => {
                if db.has(GROUP, &u.name).is_some() {
                    return Err(u.call.fails(format!(
                        "group {} exists - if you want to add this user to that group, use -g.",
                        u.name
                    )));
                }
                let (min, max) = self.settings.sys_gid;
                let gid = shadow_id(&db.ids(GROUP), min, max, Some(uid))
                    .ok_or_else(|| u.call.fails("no free system gid".into()))?;
                db.add_group(&u.name, gid);
                gid
            }
            None => return Err(u.call.needs_sandbox("no group: useradd's default GROUP")),
        })
    }
}

/// The home adduser makes for system user `u` (uid `uid`, primary group `gid`): adduser's
/// `mktree`, each missing directory 0755 (umask 022), root's; then the home given to the
/// user and its primary group, SYS_DIR_MODE.
fn make_system_home(
    u: &SystemUser,
    uid: u64,
    gid: u64,
    adduser_conf: &BTreeMap<String, String>,
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
) -> Result<()> {
    let mode = system_home_mode(adduser_conf).ok_or_else(|| {
        u.call.needs_sandbox(
            "the image's /etc/adduser.conf sets SYS_DIR_MODE or SETGID_HOME in a form not reproduced",
        )
    })?;
    let parent = crate::packages::image::parent(&u.home);
    if !parent.is_empty() {
        crate::packages::image::ensure_dir(parent, base, layer)?;
    }
    let real = crate::packages::image::real(&u.home, base)?;
    layer.add_dir(&real, mode)?;
    layer.set_owner_mode(&real, mode, uid, gid)?;
    Ok(())
}

/// `shadow`, `gshadow` and their backups as the distribution keeps them ([`Tools`]): Debian's
/// 0640, root and the `shadow` group (gid 42, base-passwd's); Enterprise Linux's 0000 root.
fn add_shadowed(
    layer: &mut LayerContents,
    path: &str,
    content: Vec<u8>,
    tools: Tools,
) -> Result<()> {
    let (mode, gid) = match tools {
        Tools::Debian => (0o640, 42),
        Tools::RedHat => (0, 0),
    };
    Ok(layer.insert(path, Entry { kind: EntryKind::File(content), mode, uid: 0, gid })?)
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

/// adduser's test for a home it never makes (`/nonexistent`, `/nonexistent/…`, any number of
/// leading slashes).
fn is_nonexistent(home: &str) -> bool {
    let rest = home.trim_start_matches('/');
    home.starts_with('/')
        && rest.strip_prefix("nonexistent").is_some_and(|r| r.is_empty() || r.starts_with('/'))
}

/// The mode adduser 3.134 and 3.152 give a system user's new home (`get_dir_mode`):
/// `SYS_DIR_MODE` where it is three or four octal digits (default 0755), with the setgid bit
/// where `SETGID_HOME` is yes (adduser adds 2000 to the digits); `None` for a value adduser
/// would read otherwise than this does.
fn system_home_mode(conf: &BTreeMap<String, String>) -> Option<u32> {
    let given = conf.get("SYS_DIR_MODE").map(|v| v.trim_matches('"').to_string());
    let digits = match given {
        Some(v)
            if (v.len() == 3 || v.len() == 4) && v.bytes().all(|b| (b'0'..=b'7').contains(&b)) =>
        {
            v
        }
        None => "0755".to_string(),
        Some(_) => return None,
    };
    let mut mode = u32::from_str_radix(&digits, 8).ok()?;
    let setgid =
        conf.get("SETGID_HOME").is_some_and(|v| v.trim_matches('"').eq_ignore_ascii_case("yes"));
    if setgid {
        // `$mode += 2000` on the digits where they leave room for it.
        if digits.len() == 3 || matches!(digits.as_bytes()[0], b'0' | b'1' | b'4' | b'5') {
            mode |= 0o2000;
        } else {
            return None;
        }
    }
    Some(mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use erdma_oci::rootfs::SnapEntry;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn call() -> Call {
        Call::new("p", "postinst", &[])
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
        let u = SystemUser::parse(
            call(),
            &w("adduser --system --quiet --ingroup uuidd --home /run/uuidd --no-create-home uuidd"),
        )
        .unwrap();
        assert!(!u.own_group);
        assert_eq!(
            (u.name.as_str(), u.group.as_str(), u.home.as_str()),
            ("uuidd", "uuidd", "/run/uuidd")
        );
        assert!(!u.create_home);
        assert_eq!(u.shell, "/usr/sbin/nologin");
        let u =
            SystemUser::parse(call(), &w("adduser --system --group --home=/var/lib/x x")).unwrap();
        assert!(u.own_group);
        assert_eq!((u.group.as_str(), u.home.as_str()), ("x", "/var/lib/x"));
        assert_eq!(SystemUser::parse(call(), &w("adduser --system")), None);
        assert_eq!(SystemUser::parse(call(), &w("adduser x")), None);
        assert_eq!(SystemUser::parse(call(), &w("adduser --system --uid 5 x")), None);
        assert_eq!(SystemUser::parse(call(), &w("adduser --system --group --ingroup g x")), None);
        assert_eq!(SystemUser::parse(call(), &w("adduser --system $USER")), None);
        assert_eq!(SystemUser::parse(call(), &w("adduser --system --home $HOME x")), None);
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
        let u = SystemUser::parse(
            call(),
            &w("adduser --system --quiet --ingroup uuidd --home /run/uuidd --no-create-home uuidd"),
        )
        .unwrap();
        let v = SystemUser::parse(
            call(),
            &w("adduser --system --no-create-home --comment Agent --home /nonexistent agent"),
        )
        .unwrap();
        assert!(!v.own_group);
        let ops = [Op::AddGroup(call(), "uuidd".into()), Op::AddUser(u.clone()), Op::AddUser(v)];
        apply(&ops, &b, &mut layer, 20783, Tools::Debian).unwrap();
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
        apply(&[Op::AddUser(u.clone())], &b, &mut layer, 20783, Tools::Debian).unwrap();
        assert!(layer.get("etc/passwd").is_none());
        let b = crate::packages::testing::base(&[
            ("etc/passwd", f("uuidd:x:1000:1000::/home/uuidd:/bin/sh\n")),
            ("etc/group", f("uuidd:x:101:\n")),
        ]);
        let e = apply(&[Op::AddUser(u)], &b, &mut LayerContents::new(), 20783, Tools::Debian)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a system user"), "{e}");
    }

    /// groupadd and useradd as shadow 4.13 (Debian 12's `passwd`) run them with `--root` over
    /// the same files: passwd, shadow, group, gshadow and their backups byte for byte, through
    /// a sequence that exercises each way an id is chosen (the top of the range, one below the
    /// lowest in use, a given gid, a user's own group preferring the uid and not getting it,
    /// then getting it, `-f` on an existing group).
    #[test]
    fn groupadd_and_useradd_as_the_real_tools_write() {
        let tools = ["/usr/sbin/groupadd", "/usr/sbin/useradd"];
        if !tools.iter().all(|t| std::path::Path::new(t).exists())
            || !rustix::process::geteuid().is_root()
        {
            eprintln!("skipped: needs root and shadow's groupadd and useradd (passwd)");
            return;
        }
        let passwd = "root:x:0:0:root:/root:/bin/bash\n_apt:x:42:65534::/nonexistent:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
        let shadow =
            "root:*:20782:0:99999:7:::\n_apt:*:20782:0:99999:7:::\nnobody:*:20782:0:99999:7:::\n";
        let group = "root:x:0:\nshadow:x:42:\nusers:x:100:\nnogroup:x:65534:\n";
        let gshadow = "root:*::\nshadow:*::\nusers:*::\nnogroup:*::\n";
        // Debian 12's settings (login.defs: the SYS_* ranges commented out, USERGROUPS_ENAB
        // yes; /etc/default/useradd: SHELL=/bin/sh).
        let login_defs = "UID_MIN 1000\nUID_MAX 60000\n#SYS_UID_MIN 100\nGID_MIN 1000\nGID_MAX 60000\nUSERGROUPS_ENAB yes\n";
        let defaults = "SHELL=/bin/sh\n";
        let script = [
            "groupadd --system softhsm",
            "groupadd -r -g 500 fixed",
            "groupadd -r three",
            "useradd -r -g softhsm -d /var/lib/x -s /sbin/nologin -c Xuser xuser",
            "useradd -r -M -d /var/empty yuser",
            "useradd --system -U -d /z -s /bin/false zuser",
            "useradd -r -N -g 100 -d /n nuser",
            "groupadd -f -r softhsm",
        ];
        let files = [
            ("etc/passwd", passwd),
            ("etc/shadow", shadow),
            ("etc/group", group),
            ("etc/gshadow", gshadow),
            ("etc/login.defs", login_defs),
            ("etc/default/useradd", defaults),
        ];
        let root = tempfile::tempdir().unwrap();
        for (p, c) in files {
            let at = root.path().join(p);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(at, c).unwrap();
        }
        let epoch = 20783 * 86_400;
        for line in script {
            let words = w(line);
            let out = std::process::Command::new(format!("/usr/sbin/{}", words[0]))
                .arg("--root")
                .arg(root.path())
                .args(&words[1..])
                .env("SOURCE_DATE_EPOCH", epoch.to_string())
                .output()
                .unwrap();
            assert!(out.status.success(), "{line}: {out:?}");
        }
        let f = |s: &str| SnapEntry::File(Some(s.as_bytes().to_vec()));
        let b = crate::packages::testing::base(
            &files.iter().map(|(p, c)| (*p, f(c))).collect::<Vec<_>>(),
        );
        let ops: Vec<Op> = script
            .iter()
            .map(|line| {
                let words = w(line);
                let c = Call::new("p", "%pre", &words);
                match words[0].as_str() {
                    "groupadd" => Op::GroupAdd(GroupAdd::parse(c, &words).unwrap()),
                    _ => Op::UserAdd(UserAdd::parse(c, &words).unwrap()),
                }
            })
            .collect();
        let mut layer = LayerContents::new();
        apply(&ops, &b, &mut layer, 20783, Tools::Debian).unwrap();
        for p in ["passwd", "shadow", "group", "gshadow"] {
            for name in [format!("etc/{p}"), format!("etc/{p}-")] {
                let real = std::fs::read_to_string(root.path().join(&name)).unwrap();
                assert_eq!(text(&layer, &name), real, "{name}");
            }
        }
        // An existing group without -f, or user: the tool fails, and so does the emulation.
        for line in ["groupadd -r softhsm", "useradd -r -g softhsm xuser"] {
            let words = w(line);
            let c = Call::new("p", "%pre", &words);
            let op = match words[0].as_str() {
                "groupadd" => Op::GroupAdd(GroupAdd::parse(c, &words).unwrap()),
                _ => Op::UserAdd(UserAdd::parse(c, &words).unwrap()),
            };
            let ours = apply(
                &[op],
                &crate::packages::testing::base(&[
                    ("etc/passwd", f(&text(&layer, "etc/passwd"))),
                    ("etc/shadow", f(&text(&layer, "etc/shadow"))),
                    ("etc/group", f(&text(&layer, "etc/group"))),
                    ("etc/login.defs", f(login_defs)),
                ]),
                &mut LayerContents::new(),
                20783,
                Tools::Debian,
            );
            let real = std::process::Command::new(format!("/usr/sbin/{}", words[0]))
                .arg("--root")
                .arg(root.path())
                .args(&words[1..])
                .output()
                .unwrap();
            assert!(!real.status.success() && ours.is_err(), "{line}: {ours:?}");
        }
        // Forms left to the sandbox.
        for line in
            ["useradd -r -m x", "useradd x", "useradd -r -o -u 5 x", "groupadd g", "useradd -r $U"]
        {
            let words = w(line);
            let c = Call::new("p", "%pre", &words);
            assert!(
                UserAdd::parse(c.clone(), &words).is_none() && GroupAdd::parse(c, &words).is_none(),
                "{line}"
            );
        }
    }
}
