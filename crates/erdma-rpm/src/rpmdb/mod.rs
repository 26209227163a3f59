//! The image's installed-package database, read and rewritten the way rpm itself keeps it.
//!
//! rpm has had three on-disk formats ("backends", lib/backend/): Berkeley DB (`Packages`, a
//! hash database of header blobs, plus one btree per index; EL7, EL8, Alibaba Cloud Linux 3),
//! SQLite (`rpmdb.sqlite`, rpm >= 4.16; EL9, EL10, Fedora) and ndb (`Packages.db`, SUSE), which
//! is refused. Which one the image's own rpm opens is `%_db_backend` in its macros: a database
//! in the other format would look empty to it, so a mismatch is refused too.
//!
//! What is stored per package is the blob rpm's `headerExport` makes of the package's header
//! after the install has put its tags in (lib/psm.c `dbAdd`, lib/package.c
//! `headerMergeLegacySigs` and `applyRetrofits`, lib/relocation.c `addPrefixes`): the package's
//! immutable region verbatim, then those tags as dribbles sorted by tag
//! ([`installed_header`]). The indexes hold keys that rpm's lib/rpmdb.c `tag2index` derives
//! from that header ([`index_entries`]); both are built in `record`. They were checked against
//! what rpm 4.18 writes (the tests at the end).
pub mod bdb;
mod record;
mod sqlite;

pub use record::{index_entries, installed_header, transaction_color, Index, InstallCtx, INDEXES};

use std::collections::BTreeMap;

use crate::header::{Header, HeaderError};
use crate::PackageMeta;
/// An error of an [`ImageFiles`], whatever its type.
pub type FilesError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The base image's files, as the database code reads them (erdma-build reads them from the
/// base's layers). Paths are relative to the image's root, without a leading `/`.
pub trait ImageFiles {
    /// The regular file at `path`, at most `max` bytes; `None` when there is none.
    fn read(&self, path: &str, max: u64) -> Result<Option<Vec<u8>>, FilesError>;
    /// The names in the directory `dir` (none when there is no such directory).
    fn list(&self, dir: &str) -> Result<Vec<String>, FilesError>;
    /// `path` with the symlinks of its directories resolved inside the image; `None` when one
    /// of them does not exist.
    fn real_path(&self, path: &str) -> Result<Option<String>, FilesError>;
}

/// Where rpm keeps its database (`%_dbpath`); Fedora >= 36 and EL10 link it to
/// `usr/lib/sysimage/rpm`, which [`ImageFiles::real_path`] follows.
pub const DBPATH: &str = "var/lib/rpm";
/// A database of a big image is tens of MiB; refuse absurd ones.
const MAX_DB: u64 = 2 << 30;
const MAX_MACROS: u64 = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum RpmdbError {
    #[error("reading /{path} from the base image")]
    Base {
        path: String,
        #[source]
        source: FilesError,
    },
    #[error("the rpm database at /{path} is in rpm's ndb format, which erdma-build cannot write")]
    Ndb { path: String },
    #[error("the rpm database at /{path} is {found}, but the image's rpm is configured for {expects} (%_db_backend in {macros})")]
    Mismatch { path: String, found: &'static str, expects: String, macros: String },
    #[error("the image's rpm is configured for the `{backend}` database backend (%_db_backend in {macros}), which erdma-build cannot write")]
    UnknownBackend { backend: String, macros: String },
    #[error("sqlite: {what} /{path}")]
    Sqlite {
        what: &'static str,
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("berkeley db: reading /{path}")]
    Bdb {
        path: String,
        #[source]
        source: bdb::BdbError,
    },
    #[error("header #{hnum} in /{path} is unreadable")]
    Header {
        hnum: u32,
        path: String,
        #[source]
        source: HeaderError,
    },
    #[error("the header of {package} cannot be installed")]
    InstallHeader {
        package: String,
        #[source]
        source: HeaderError,
    },
    #[error("{package}: its signature header's tag {tag} cannot be merged: {why}")]
    SignatureTag { package: String, tag: u32, why: &'static str },
    #[error("{package} is an rpm v3 package (its header has no immutable region), which erdma-build does not install")]
    NoRegion { package: String },
    #[error("no package with header instance {0} is installed")]
    NotInstalled(u32),
    #[error("{what}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

impl RpmdbError {
    fn base(path: &str, source: FilesError) -> RpmdbError {
        RpmdbError::Base { path: path.to_string(), source }
    }

    /// What the user can do about it, where there is something to say (the binary prints it
    /// as its `hint:` line).
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            RpmdbError::Ndb { .. } => Some("convert it in the base (`rpmdb --rebuilddb --define '_db_backend sqlite'`) or use a base with a sqlite or bdb database"),
            RpmdbError::Mismatch { .. } => {
                Some("run `rpmdb --rebuilddb` in the base so the database matches its rpm")
            }
            _ => None,
        }
    }
}

/// The on-disk format of a database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `rpmdb.sqlite`.
    Sqlite,
    /// `Packages` and one btree per index.
    Bdb,
}

/// The base image's installed-package database.
#[derive(Debug)]
pub struct Database {
    pub format: Format,
    /// Where the files are, resolved inside the image (`var/lib/rpm`, or
    /// `usr/lib/sysimage/rpm` behind a link).
    pub dir: String,
    /// Every installed header by instance number, in instance order; `gpg-pubkey`
    /// pseudo-packages included.
    pub headers: Vec<(u32, Header)>,
    /// The largest instance number ever handed out (SQLite's `sqlite_sequence`, Berkeley DB's
    /// record 0): new packages get the ones after it, as rpm does.
    pub max_instance: u32,
    /// The names in [`Self::dir`].
    files: Vec<String>,
    /// SQLite: the database with its write-ahead log applied.
    sqlite: Option<Vec<u8>>,
}

impl Database {
    /// What resolution needs of the installed packages; rpm's `gpg-pubkey` headers (imported
    /// keys, not packages) are left out here and kept in the database.
    pub fn installed(&self) -> Vec<PackageMeta> {
        self.headers
            .iter()
            .filter(|(_, h)| h.name() != "gpg-pubkey")
            .map(|(_, h)| h.meta("installed"))
            .collect()
    }

    /// Every installed header by instance number (see [`Self::headers`]).
    pub fn headers(&self) -> &[(u32, Header)] {
        &self.headers
    }

    fn path(&self, name: &str) -> String {
        format!("{}/{name}", self.dir)
    }
}

/// A file of the new database for the layer, or a path the layer removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbFile {
    File { path: String, bytes: Vec<u8>, mode: u32 },
    Whiteout { path: String },
}

/// What rpm's own configuration inside the image says: the backend it opens, and the macro
/// files that said so.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Configured {
    backend: Option<String>,
    dbpath: Option<String>,
    from: Vec<String>,
    /// Whether the image has any rpm macro file (an image without rpm has none).
    any: bool,
}

/// `%_db_backend` and `%_dbpath` from the image's macro files, in rpm's `macrofiles` order
/// (lib/rpmrc.c; later files override earlier ones): `usr/lib/rpm/macros`, `macros.d`, then
/// `etc/rpm/macros.*` and `etc/rpm/macros`.
fn configured(base: &dyn ImageFiles) -> Result<Configured, RpmdbError> {
    let mut files = vec!["usr/lib/rpm/macros".to_string()];
    let listed = |dir: &str, filter: &dyn Fn(&str) -> bool| -> Result<Vec<String>, RpmdbError> {
        let mut names: Vec<String> = base
            .list(dir)
            .map_err(|e| RpmdbError::base(dir, e))?
            .into_iter()
            .filter(|n| filter(n))
            .map(|n| format!("{dir}/{n}"))
            .collect();
        names.sort();
        Ok(names)
    };
    files.extend(listed("usr/lib/rpm/macros.d", &|n| n.starts_with("macros."))?);
    files.extend(listed("etc/rpm", &|n| n.starts_with("macros."))?);
    files.push("etc/rpm/macros".to_string());
    let mut out = Configured { backend: None, dbpath: None, from: Vec::new(), any: false };
    for f in files {
        let Some(text) = base.read(&f, MAX_MACROS).map_err(|e| RpmdbError::base(&f, e))? else {
            continue;
        };
        out.any = true;
        for line in String::from_utf8_lossy(&text).lines() {
            let mut words = line.split_whitespace();
            let (Some(name), Some(value)) = (words.next(), words.next()) else { continue };
            match name {
                "%_db_backend" => {
                    out.backend = Some(value.to_string());
                    out.from.push(format!("/{f}"));
                }
                "%_dbpath" => out.dbpath = Some(value.to_string()),
                _ => {}
            }
        }
    }
    Ok(out)
}

/// Finds and reads the base's rpm database: `None` when the image has none. The format is
/// told by the files present (`rpmdb.sqlite`, `Packages`, `Packages.db`) and must be the one
/// the image's rpm is configured for.
pub fn open(base: &dyn ImageFiles) -> Result<Option<Database>, RpmdbError> {
    let conf = configured(base)?;
    // `%_dbpath` moved to /usr/lib/sysimage/rpm in Fedora 36, with /var/lib/rpm a link to it.
    let mut dirs = vec![DBPATH.to_string()];
    if let Some(p) = conf.dbpath.as_deref() {
        let p =
            p.replace("%{_var}", "/var").replace("%{_usr}", "/usr").replace("%{_prefix}", "/usr");
        if !p.contains('%') {
            let p = p.trim_matches('/').to_string();
            if !p.is_empty() && !dirs.contains(&p) {
                dirs.insert(0, p);
            }
        }
    }
    let mut found = None;
    for d in &dirs {
        let probe = format!("{d}/Packages");
        let Some(real) = base.real_path(&probe).map_err(|e| RpmdbError::base(&probe, e))? else {
            continue;
        };
        let dir = real.rsplit_once('/').map(|(d, _)| d.to_string()).unwrap_or_default();
        let files = base.list(&dir).map_err(|e| RpmdbError::base(&dir, e))?;
        if ["rpmdb.sqlite", "Packages", "Packages.db"].iter().any(|n| files.iter().any(|f| f == n))
        {
            found = Some((dir, files));
            break;
        }
    }
    let Some((dir, files)) = found else { return Ok(None) };
    let has = |n: &str| files.iter().any(|f| f == n);
    let macros =
        if conf.from.is_empty() { "/usr/lib/rpm/macros".to_string() } else { conf.from.join(", ") };
    // rpm before 4.15 has no %_db_backend and only Berkeley DB. An image with no rpm macros at
    // all has no rpm to disagree with the files: they say.
    let expects = match conf.backend.as_deref() {
        None if !conf.any && has("rpmdb.sqlite") => Some(Format::Sqlite),
        None | Some("bdb") => Some(Format::Bdb),
        Some("sqlite") => Some(Format::Sqlite),
        Some("ndb") => None,
        Some(other) => {
            return Err(RpmdbError::UnknownBackend { backend: other.to_string(), macros })
        }
    };
    let format = match expects {
        Some(Format::Sqlite) if has("rpmdb.sqlite") => Format::Sqlite,
        Some(Format::Bdb) if has("Packages") => Format::Bdb,
        None if has("Packages.db") => {
            return Err(RpmdbError::Ndb { path: format!("{dir}/Packages.db") })
        }
        _ => {
            let (found, file) = if has("rpmdb.sqlite") {
                ("sqlite", "rpmdb.sqlite")
            } else if has("Packages.db") {
                return Err(RpmdbError::Ndb { path: format!("{dir}/Packages.db") });
            } else {
                ("berkeley db", "Packages")
            };
            let expects = conf.backend.clone().unwrap_or_else(|| "bdb".into());
            return Err(RpmdbError::Mismatch {
                path: format!("{dir}/{file}"),
                found,
                expects,
                macros,
            });
        }
    };
    let read = |name: &str| -> Result<Option<Vec<u8>>, RpmdbError> {
        let p = format!("{dir}/{name}");
        base.read(&p, MAX_DB).map_err(|e| RpmdbError::base(&p, e))
    };
    match format {
        Format::Sqlite => {
            let path = format!("{dir}/rpmdb.sqlite");
            let db = read("rpmdb.sqlite")?.unwrap_or_default();
            let wal = if has("rpmdb.sqlite-wal") { read("rpmdb.sqlite-wal")? } else { None };
            let read = sqlite::read(&db, wal.as_deref(), &path)?;
            let headers = parse_all(read.blobs, &path)?;
            Ok(Some(Database {
                format,
                dir,
                headers,
                max_instance: read.max_instance,
                files,
                sqlite: Some(read.db),
            }))
        }
        Format::Bdb => {
            let path = format!("{dir}/Packages");
            let bytes = read("Packages")?.unwrap_or_default();
            let records = bdb::read_hash(&bytes)
                .map_err(|source| RpmdbError::Bdb { path: path.clone(), source })?;
            let mut blobs = Vec::new();
            let mut max_instance = 0;
            for (k, v) in records {
                // Native byte order: x86_64 and aarch64 (the images erdma-build writes).
                let Ok(k) = <[u8; 4]>::try_from(k.as_slice()) else { continue };
                let hnum = u32::from_le_bytes(k);
                if hnum == 0 {
                    // Record 0 holds the largest instance handed out (db3.c `pkgInstance`).
                    if let Ok(v) = <[u8; 4]>::try_from(v.get(..4).unwrap_or_default()) {
                        max_instance = max_instance.max(u32::from_le_bytes(v));
                    }
                    continue;
                }
                blobs.push((hnum, v));
            }
            blobs.sort_by_key(|(h, _)| *h);
            max_instance = max_instance.max(blobs.last().map_or(0, |(h, _)| *h));
            let headers = parse_all(blobs, &path)?;
            Ok(Some(Database { format, dir, headers, max_instance, files, sqlite: None }))
        }
    }
}

fn parse_all(blobs: Vec<(u32, Vec<u8>)>, path: &str) -> Result<Vec<(u32, Header)>, RpmdbError> {
    blobs
        .into_iter()
        .map(|(hnum, b)| {
            Header::parse(b).map(|h| (hnum, h)).map_err(|source| RpmdbError::Header {
                hnum,
                path: path.to_string(),
                source,
            })
        })
        .collect()
}

/// rpm's default permissions for its database files (`%_dbi_perms`... lib/rpmdb.c `perms =
/// 0644`); the base's own modes are not visible through [`ImageFiles`].
const DB_MODE: u32 = 0o644;

/// The new database: `db` without the packages `remove` (instance numbers) and with the
/// installed-header blobs `add` (from [`installed_header`]), given new instance numbers after
/// the largest ever handed out. Returns the files for the layer and the paths it whites out.
pub fn write(db: &Database, remove: &[u32], add: &[Vec<u8>]) -> Result<Vec<DbFile>, RpmdbError> {
    for r in remove {
        if !db.headers.iter().any(|(h, _)| h == r) {
            return Err(RpmdbError::NotInstalled(*r));
        }
    }
    let added: Vec<(u32, Header)> = add
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let hnum = db.max_instance + 1 + i as u32;
            Header::parse(b.clone()).map(|h| (hnum, h)).map_err(|source| {
                RpmdbError::InstallHeader { package: format!("new package #{i}"), source }
            })
        })
        .collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    match db.format {
        Format::Sqlite => {
            let path = db.path("rpmdb.sqlite");
            let bytes =
                sqlite::write(db.sqlite.as_deref().unwrap_or_default(), remove, &added, &path)?;
            out.push(DbFile::File { path, bytes, mode: DB_MODE });
            // The log and its index belong to the old file: rpm starts new ones.
            for name in ["rpmdb.sqlite-wal", "rpmdb.sqlite-shm", "rpmdb.sqlite-journal"] {
                if db.files.iter().any(|f| f == name) {
                    out.push(DbFile::Whiteout { path: db.path(name) });
                }
            }
        }
        Format::Bdb => {
            let mut kept: Vec<(u32, &Header)> = db
                .headers
                .iter()
                .filter(|(h, _)| !remove.contains(h))
                .map(|(n, h)| (*n, h))
                .collect();
            kept.extend(added.iter().map(|(n, h)| (*n, h)));
            kept.sort_by_key(|(n, _)| *n);
            let max = db.max_instance + added.len() as u32;
            let mut packages: Vec<(Vec<u8>, Vec<u8>)> =
                vec![(0u32.to_le_bytes().to_vec(), max.to_le_bytes().to_vec())];
            packages
                .extend(kept.iter().map(|(n, h)| (n.to_le_bytes().to_vec(), h.blob().to_vec())));
            out.push(DbFile::File {
                path: db.path("Packages"),
                bytes: bdb::write_hash(&packages, &seed("Packages", &packages)),
                mode: DB_MODE,
            });
            // Each index: key -> (hnum, idx) pairs in native order, appended as rpm adds
            // packages, so in instance order (db3.c `set2dbt`, `dbiIndexSetAppend`).
            let mut indexes: BTreeMap<&str, BTreeMap<Vec<u8>, Vec<u8>>> =
                INDEXES.iter().map(|ix| (ix.name, BTreeMap::new())).collect();
            for (hnum, h) in &kept {
                for (name, keys) in index_entries(h, *hnum) {
                    let ix = indexes.get_mut(name).expect("every index");
                    for (mut key, idx) in keys {
                        if key.is_empty() {
                            // db3.c `db3_idxdbPutOne`: the "/" fixup, an empty key is one NUL.
                            key = vec![0];
                        }
                        let v = ix.entry(key).or_default();
                        v.extend_from_slice(&hnum.to_le_bytes());
                        v.extend_from_slice(&idx.to_le_bytes());
                    }
                }
            }
            for (name, recs) in indexes {
                let recs: Vec<(Vec<u8>, Vec<u8>)> = recs.into_iter().collect();
                out.push(DbFile::File {
                    path: db.path(name),
                    bytes: bdb::write_btree(&recs, &seed(name, &recs)),
                    mode: DB_MODE,
                });
            }
            // The environment caches pages of the old files: rpm recreates it.
            for f in &db.files {
                if f.starts_with("__db.") {
                    out.push(DbFile::Whiteout { path: db.path(f) });
                }
            }
        }
    }
    Ok(out)
}

/// What feeds a Berkeley DB file's unique id: its name and content, so the same database
/// gives the same bytes.
fn seed(name: &str, recs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    for (k, v) in recs {
        h.update((k.len() as u64).to_le_bytes());
        h.update(k);
        h.update((v.len() as u64).to_le_bytes());
        h.update(v);
    }
    h.finalize().to_vec()
}

#[cfg(test)]
mod tests {
    //! The tests named `*_real_rpm` build packages with `rpmbuild` and install them with the
    //! real rpm (4.18 on Debian: `apt-get install rpm sqlite3`), and are skipped without it.
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use super::*;

    /// A base image that is a directory on this machine.
    struct DirBase(PathBuf);

    impl ImageFiles for DirBase {
        fn read(&self, path: &str, _max: u64) -> Result<Option<Vec<u8>>, FilesError> {
            Ok(std::fs::read(self.0.join(path)).ok())
        }
        fn list(&self, dir: &str) -> Result<Vec<String>, FilesError> {
            let Ok(rd) = std::fs::read_dir(self.0.join(dir)) else { return Ok(Vec::new()) };
            Ok(rd
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect())
        }
        fn real_path(&self, path: &str) -> Result<Option<String>, FilesError> {
            let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
            let root = self.0.canonicalize().unwrap();
            let Ok(real) = self.0.join(dir).canonicalize() else { return Ok(None) };
            let rel =
                real.strip_prefix(&root).expect("inside the root").to_string_lossy().into_owned();
            Ok(Some(if rel.is_empty() { name.to_string() } else { format!("{rel}/{name}") }))
        }
    }

    fn have_rpm() -> bool {
        let ok =
            |c: &str| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success());
        if ok("rpm") && ok("rpmbuild") {
            return true;
        }
        eprintln!("skipped: rpm and rpmbuild are not installed (apt-get install rpm)");
        false
    }

    const SPEC_A: &str = r#"
Name: erdma-testa
Version: 1.0
Release: 1
Summary: test a
License: MIT
Group: System/Test
BuildArch: x86_64
Provides: testcap = 2.0
Requires(pre): /bin/sh
Requires(preun): /bin/rm
Requires: erdma-libfoo >= 1:1.0
Requires: (erdma-x or erdma-y)
Requires: (erdma-p >= 2 if erdma-q else erdma-r)
Recommends: erdma-rec
Suggests: erdma-sug
Supplements: (erdma-s and erdma-t)
Enhances: erdma-enh
Conflicts: erdma-conflicting
Obsoletes: erdma-old < 1.0
%description
a
%install
mkdir -p %{buildroot}/usr/lib/erdma-testa %{buildroot}/etc %{buildroot}/usr/bin
echo hello > %{buildroot}/usr/lib/erdma-testa/data.txt
echo conf > %{buildroot}/etc/erdma-testa.conf
printf '#!/bin/sh\necho a\n' > %{buildroot}/usr/bin/erdma-testa
chmod 755 %{buildroot}/usr/bin/erdma-testa
ln -s erdma-testa %{buildroot}/usr/bin/erdma-testa-link
%triggerin -- erdma-libfoo
true
%triggerun -- erdma-libfoo
true
%filetriggerin -- /usr/share/erdma-libfoo
true
%transfiletriggerpostun -- /usr/lib
true
%post
true
%files
%dir /usr/lib/erdma-testa
/usr/lib/erdma-testa/data.txt
%config(noreplace) /etc/erdma-testa.conf
%ghost /etc/erdma-testa.state
/usr/bin/erdma-testa
/usr/bin/erdma-testa-link
"#;

    const SPEC_B: &str = r#"
Name: erdma-libfoo
Version: 1.2
Release: 3
Epoch: 1
Summary: test b
License: MIT
BuildArch: noarch
Prefix: /usr
%description
b
%install
mkdir -p %{buildroot}/usr/share/erdma-libfoo
echo b > %{buildroot}/usr/share/erdma-libfoo/b.txt
ln -s b.txt %{buildroot}/usr/share/erdma-libfoo/link
%files
/usr/share/erdma-libfoo
"#;

    /// Builds the two test packages; returns their paths (a, b).
    fn build(dir: &Path) -> (PathBuf, PathBuf) {
        let mut out = Vec::new();
        for (name, spec) in [("a", SPEC_A), ("b", SPEC_B)] {
            let path = dir.join(format!("{name}.spec"));
            std::fs::write(&path, spec).unwrap();
            let top = dir.join("top");
            let o = Command::new("rpmbuild")
                .arg("--define")
                .arg(format!("_topdir {}", top.display()))
                .arg("-bb")
                .arg(&path)
                .output()
                .unwrap();
            assert!(o.status.success(), "rpmbuild: {}", String::from_utf8_lossy(&o.stderr));
            let arch = if name == "a" { "x86_64" } else { "noarch" };
            let rpm = std::fs::read_dir(top.join("RPMS").join(arch))
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
                .path();
            out.push(rpm);
        }
        (out[0].clone(), out[1].clone())
    }

    fn rpm(root: &Path, args: &[&str], env: Option<u32>) -> std::process::Output {
        let mut c = Command::new("rpm");
        c.arg("--root")
            .arg(root)
            .args(["--dbpath", "/var/lib/rpm", "--define", "_db_backend sqlite"])
            .args(args);
        if let Some(t) = env {
            c.env("SOURCE_DATE_EPOCH", t.to_string());
        }
        c.output().unwrap()
    }

    fn install(root: &Path, pkg: &Path, time: u32) {
        let o = rpm(root, &["-i", "--nodeps", "--noscripts", pkg.to_str().unwrap()], Some(time));
        assert!(o.status.success(), "rpm -i: {}", String::from_utf8_lossy(&o.stderr));
    }

    /// The signature and main headers of a package file.
    fn headers(pkg: &Path) -> (Header, Header) {
        let bytes = std::fs::read(pkg).unwrap();
        let mut r = &bytes[96..];
        let (sig, raw) = Header::read_with_magic(&mut r).unwrap();
        let pad = (8 - raw.len() % 8) % 8;
        let mut r = &r[pad..];
        let (main, _) = Header::read_with_magic(&mut r).unwrap();
        (sig, main)
    }

    fn blobs(db: &Path) -> Vec<(u32, Vec<u8>)> {
        let c =
            rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        let mut s = c.prepare("SELECT hnum, blob FROM Packages ORDER BY hnum").unwrap();
        s.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect()
    }

    /// Every table's rows in rowid order with each value's type, and the schema: what
    /// `sqlite3 .dump` shows, compared exactly.
    fn dump(db: &Path) -> Vec<String> {
        let c =
            rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        let mut out: Vec<String> = Vec::new();
        let tables: Vec<(String, String)> = {
            let mut s = c.prepare("SELECT name, sql FROM sqlite_master ORDER BY rowid").unwrap();
            s.query_map([], |r| Ok((r.get(0)?, r.get::<_, Option<String>>(1)?.unwrap_or_default())))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        for (name, sql) in tables {
            out.push(sql.clone());
            if !sql.starts_with("CREATE TABLE") {
                continue;
            }
            let mut s = c.prepare(&format!("SELECT * FROM '{name}'")).unwrap();
            let n = s.column_count();
            let rows: Vec<String> = s
                .query_map([], |r| {
                    Ok((0..n)
                        .map(|i| match r.get_ref(i).unwrap() {
                            rusqlite::types::ValueRef::Text(t) => {
                                format!("text:{}", hex::encode(t))
                            }
                            rusqlite::types::ValueRef::Blob(b) => {
                                format!("blob:{}", hex::encode(b))
                            }
                            v => format!("{v:?}"),
                        })
                        .collect::<Vec<_>>()
                        .join("|"))
                })
                .unwrap()
                .map(Result::unwrap)
                .collect();
            out.extend(rows.into_iter().map(|r| format!("{name}: {r}")));
        }
        out
    }

    fn copy_tree(from: &Path, to: &Path) {
        let o = Command::new("cp").arg("-a").arg(from).arg(to).output().unwrap();
        assert!(o.status.success());
    }

    /// Writes `files` into the directory tree `root` (the layer applied on the base).
    fn apply(root: &Path, files: &[DbFile]) {
        for f in files {
            match f {
                DbFile::File { path, bytes, .. } => std::fs::write(root.join(path), bytes).unwrap(),
                DbFile::Whiteout { path } => {
                    let _ = std::fs::remove_file(root.join(path));
                }
            }
        }
    }

    const T1: u32 = 1_700_000_000;
    const T2: u32 = 1_700_000_100;

    struct Fixture {
        _dir: tempfile::TempDir,
        a: PathBuf,
        /// Only b installed, by rpm at T1.
        one: PathBuf,
        /// b at T1, then a at T2, by rpm.
        both: PathBuf,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = build(dir.path());
        let one = dir.path().join("one");
        let both = dir.path().join("both");
        std::fs::create_dir_all(&one).unwrap();
        std::fs::create_dir_all(&both).unwrap();
        for root in [&one, &both] {
            // What EL9's rpm says (its /usr/lib/rpm/macros).
            std::fs::create_dir_all(root.join("usr/lib/rpm")).unwrap();
            std::fs::write(
                root.join("usr/lib/rpm/macros"),
                "%_dbpath\t\t%{_var}/lib/rpm\n%_db_backend\t  sqlite\n",
            )
            .unwrap();
        }
        install(&one, &b, T1);
        install(&both, &b, T1);
        install(&both, &a, T2);
        Fixture { _dir: dir, a, one, both }
    }

    fn color() -> u32 {
        let o = Command::new("rpm").args(["--eval", "%{?_transaction_color}"]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap_or(0)
    }

    #[test]
    fn installed_header_and_index_keys_match_real_rpm() {
        if !have_rpm() {
            return;
        }
        let f = fixture();
        let real = blobs(&f.both.join("var/lib/rpm/rpmdb.sqlite"));
        let (sig, main) = headers(&f.a);
        let ours = installed_header(
            &main,
            &sig,
            &InstallCtx { install_time: T2, tid: T2, color: color(), file_states: Vec::new() },
        )
        .unwrap();
        assert_eq!(real.len(), 2);
        assert_eq!(
            hex::encode(&ours),
            hex::encode(&real[1].1),
            "the blob rpm stored for erdma-testa"
        );
        // The relocatable one gets INSTPREFIXES, and noarch the same color.
        let (sig_b, main_b) = headers(
            &std::fs::read_dir(f._dir.path().join("top/RPMS/noarch"))
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
                .path(),
        );
        let ours_b = installed_header(
            &main_b,
            &sig_b,
            &InstallCtx { install_time: T1, tid: T1, color: color(), file_states: Vec::new() },
        )
        .unwrap();
        assert_eq!(
            hex::encode(&ours_b),
            hex::encode(&real[0].1),
            "the blob rpm stored for erdma-libfoo"
        );

        // Every index row rpm wrote for each package, in rowid order.
        let c = rusqlite::Connection::open_with_flags(
            f.both.join("var/lib/rpm/rpmdb.sqlite"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .unwrap();
        for (hnum, blob) in &real {
            let h = Header::parse(blob.clone()).unwrap();
            let ours = index_entries(&h, *hnum);
            for ix in INDEXES {
                let mut s = c
                    .prepare(&format!(
                        "SELECT key, idx FROM '{}' WHERE hnum = ? ORDER BY rowid",
                        ix.name
                    ))
                    .unwrap();
                let rows: Vec<(Vec<u8>, u32)> = s
                    .query_map([hnum], |r| {
                        let k = match r.get_ref(0)? {
                            rusqlite::types::ValueRef::Text(t) => t.to_vec(),
                            rusqlite::types::ValueRef::Blob(b) => b.to_vec(),
                            v => panic!("key {v:?}"),
                        };
                        Ok((k, r.get(1)?))
                    })
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                let show = |v: &[(Vec<u8>, u32)]| {
                    v.iter()
                        .map(|(k, i)| format!("{}#{i}", String::from_utf8_lossy(k)))
                        .collect::<Vec<_>>()
                };
                assert_eq!(
                    show(ours.get(ix.name).map(Vec::as_slice).unwrap_or_default()),
                    show(&rows),
                    "index {} of #{hnum}",
                    ix.name
                );
            }
        }
    }

    #[test]
    fn sqlite_database_written_matches_real_rpm() {
        if !have_rpm() {
            return;
        }
        let f = fixture();
        let base = DirBase(f.one.clone());
        let db = open(&base).unwrap().expect("a database");
        assert_eq!(db.format, Format::Sqlite);
        assert_eq!(db.dir, "var/lib/rpm");
        assert_eq!(
            db.installed().iter().map(|p| p.nevra()).collect::<Vec<_>>(),
            ["erdma-libfoo-1:1.2-3.noarch"]
        );
        let (sig, main) = headers(&f.a);
        let blob = installed_header(
            &main,
            &sig,
            &InstallCtx { install_time: T2, tid: T2, color: color(), file_states: Vec::new() },
        )
        .unwrap();
        let files = write(&db, &[], &[blob]).unwrap();
        // rpm leaves an empty log and its index beside the database: both go.
        assert_eq!(
            files.iter().filter(|f| matches!(f, DbFile::Whiteout { .. })).count(),
            2,
            "{files:?}"
        );

        // The image: the files real rpm installed, with our database.
        let ours = f._dir.path().join("ours");
        copy_tree(&f.both, &ours);
        let dbdir = ours.join("var/lib/rpm");
        for e in std::fs::read_dir(&dbdir).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
        apply(&ours, &files);
        let real_dump = dump(&f.both.join("var/lib/rpm/rpmdb.sqlite"));
        let our_dump = dump(&dbdir.join("rpmdb.sqlite"));
        let diff: Vec<_> = real_dump.iter().zip(&our_dump).filter(|(a, b)| a != b).collect();
        let only = |a: &[String], b: &[String]| {
            a.iter().filter(|l| !b.contains(l)).cloned().collect::<Vec<_>>()
        };
        assert!(
            diff.is_empty() && real_dump.len() == our_dump.len(),
            "tables differ from real rpm's: {diff:#?}\nonly real: {:#?}\nonly ours: {:#?}",
            only(&real_dump, &our_dump),
            only(&our_dump, &real_dump)
        );

        // Real rpm reads it.
        let q = |args: &[&str]| {
            let o = rpm(&ours, args, None);
            (
                o.status.success(),
                String::from_utf8_lossy(&o.stdout).into_owned()
                    + &String::from_utf8_lossy(&o.stderr),
            )
        };
        let (ok, out) = q(&["-qa", "--qf", "%{NEVRA}\n"]);
        assert!(
            ok && out.contains("erdma-testa-1.0-1.x86_64")
                && out.contains("erdma-libfoo-1:1.2-3.noarch"),
            "{out}"
        );
        let (ok, out) = q(&["-q", "--whatprovides", "testcap"]);
        assert!(ok && out.starts_with("erdma-testa-1.0-1"), "{out}");
        let (ok, out) = q(&["-qf", "/usr/bin/erdma-testa"]);
        assert!(ok && out.starts_with("erdma-testa-1.0-1"), "{out}");
        let (ok, out) = q(&["-q", "--whatrequires", "erdma-libfoo"]);
        assert!(ok && out.starts_with("erdma-testa-1.0-1"), "{out}");
        let (ok, out) = q(&["-V", "--nodeps", "erdma-testa", "erdma-libfoo"]);
        assert!(ok, "rpm -V: {out}");
        let (ok, out) = q(&["-e", "--nodeps", "--noscripts", "erdma-testa"]);
        assert!(ok, "rpm -e: {out}");
        let (ok, out) = q(&["-qa", "--qf", "%{NEVRA}\n"]);
        assert!(ok && out.trim() == "erdma-libfoo-1:1.2-3.noarch", "{out}");
        assert!(!ours.join("usr/bin/erdma-testa").exists(), "rpm -e removed the files");
    }

    #[test]
    fn removal_and_reopen_of_a_written_sqlite_database() {
        if !have_rpm() {
            return;
        }
        let f = fixture();
        let db = open(&DirBase(f.both.clone())).unwrap().unwrap();
        assert_eq!(db.max_instance, 2);
        let files = write(&db, &[2], &[]).unwrap();
        let root = f._dir.path().join("removed");
        copy_tree(&f.both, &root);
        apply(&root, &files);
        let back = open(&DirBase(root.clone())).unwrap().unwrap();
        assert_eq!(
            back.headers.iter().map(|(n, h)| (*n, h.name())).collect::<Vec<_>>(),
            [(1, "erdma-libfoo".to_string())]
        );
        // The sequence survives: the next package is #3, as rpm would number it.
        assert_eq!(back.max_instance, 2);
        let o = rpm(&root, &["-qa"], None);
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "erdma-libfoo-1.2-3.noarch");
        assert!(matches!(write(&db, &[7], &[]), Err(RpmdbError::NotInstalled(7))));
    }

    #[test]
    fn an_unchecked_write_ahead_log_is_applied() {
        if !have_rpm() {
            return;
        }
        let f = fixture();
        let root = f._dir.path().join("wal");
        copy_tree(&f.both, &root);
        let db = root.join("var/lib/rpm/rpmdb.sqlite");
        // A transaction left in the log only, as a crashed or still-running rpm leaves it.
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch("PRAGMA foreign_keys = OFF; PRAGMA wal_autocheckpoint = 0; DELETE FROM Name WHERE hnum = 2; DELETE FROM Packages WHERE hnum = 2;").unwrap();
        let snap = f._dir.path().join("snap");
        std::fs::create_dir_all(snap.join("var/lib/rpm")).unwrap();
        std::fs::create_dir_all(snap.join("usr/lib/rpm")).unwrap();
        std::fs::copy(root.join("usr/lib/rpm/macros"), snap.join("usr/lib/rpm/macros")).unwrap();
        for n in ["rpmdb.sqlite", "rpmdb.sqlite-wal"] {
            std::fs::copy(root.join("var/lib/rpm").join(n), snap.join("var/lib/rpm").join(n))
                .unwrap();
        }
        drop(c);
        assert!(std::fs::metadata(snap.join("var/lib/rpm/rpmdb.sqlite-wal")).unwrap().len() > 0);
        let read = open(&DirBase(snap)).unwrap().unwrap();
        assert_eq!(read.headers.len(), 1, "the log's delete is seen");
        let files = write(&read, &[], &[]).unwrap();
        assert!(
            files.contains(&DbFile::Whiteout { path: "var/lib/rpm/rpmdb.sqlite-wal".into() }),
            "{files:?}"
        );
    }

    #[test]
    fn bdb_database_written_reads_back_and_in_real_rpm() {
        if !have_rpm() {
            return;
        }
        let f = fixture();
        let sq = open(&DirBase(f.both.clone())).unwrap().unwrap();
        // A Berkeley DB base: the same packages, as our writer lays them out.
        let db = Database {
            format: Format::Bdb,
            dir: "var/lib/rpm".into(),
            headers: Vec::new(),
            max_instance: 0,
            files: vec!["__db.001".into()],
            sqlite: None,
        };
        let blobs: Vec<Vec<u8>> = sq.headers.iter().map(|(_, h)| h.blob().to_vec()).collect();
        let files = write(&db, &[], &blobs).unwrap();
        assert!(files.contains(&DbFile::Whiteout { path: "var/lib/rpm/__db.001".into() }));
        let root = f._dir.path().join("bdb");
        copy_tree(&f.both, &root);
        for e in std::fs::read_dir(root.join("var/lib/rpm")).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
        apply(&root, &files);
        // Reading it back: the same headers, numbered 1 and 2, record 0 not a package.
        std::fs::create_dir_all(root.join("usr/lib/rpm")).unwrap();
        std::fs::write(root.join("usr/lib/rpm/macros"), "%_db_backend\tbdb\n").unwrap();
        let back = open(&DirBase(root.clone())).unwrap().unwrap();
        assert_eq!(back.format, Format::Bdb);
        assert_eq!(back.max_instance, 2);
        assert_eq!(
            back.headers.iter().map(|(n, h)| (*n, h.blob().to_vec())).collect::<Vec<_>>(),
            sq.headers.iter().map(|(n, h)| (*n, h.blob().to_vec())).collect::<Vec<_>>()
        );
        // rpm's read-only Berkeley DB backend (Debian's rpm cannot write one) finds them.
        let o = Command::new("rpm")
            .arg("--root")
            .arg(&root)
            .args(["--dbpath", "/var/lib/rpm", "--define", "_db_backend bdb_ro", "-qa"])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("erdma-testa-1.0-1.x86_64") && out.contains("erdma-libfoo-1.2-3.noarch"),
            "{out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        for (args, want) in [
            (&["-qf", "/usr/bin/erdma-testa"][..], "erdma-testa"),
            (&["-q", "--whatprovides", "testcap"][..], "erdma-testa"),
            (&["-q", "erdma-libfoo"][..], "erdma-libfoo"),
        ] {
            let o = Command::new("rpm")
                .arg("--root")
                .arg(&root)
                .args(["--dbpath", "/var/lib/rpm", "--define", "_db_backend bdb_ro"])
                .args(args)
                .output()
                .unwrap();
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                out.starts_with(want),
                "rpm {args:?}: {out}{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }

    #[test]
    fn formats_are_told_by_files_and_macros() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let base = DirBase(root.to_path_buf());
        assert!(open(&base).unwrap().is_none(), "no database");
        std::fs::create_dir_all(root.join("usr/lib/sysimage/rpm")).unwrap();
        std::fs::create_dir_all(root.join("var/lib")).unwrap();
        std::os::unix::fs::symlink("../../usr/lib/sysimage/rpm", root.join("var/lib/rpm")).unwrap();
        std::fs::write(root.join("usr/lib/sysimage/rpm/Packages.db"), b"").unwrap();
        assert!(
            matches!(open(&base), Err(RpmdbError::Ndb { path }) if path == "usr/lib/sysimage/rpm/Packages.db")
        );
        std::fs::remove_file(root.join("usr/lib/sysimage/rpm/Packages.db")).unwrap();
        std::fs::write(root.join("usr/lib/sysimage/rpm/rpmdb.sqlite"), b"").unwrap();
        // No rpm macros at all (an image without rpm): the files say.
        assert!(!matches!(open(&base), Err(RpmdbError::Mismatch { .. })));
        // Macros without %_db_backend: an rpm older than 4.15, Berkeley DB only.
        std::fs::create_dir_all(root.join("usr/lib/rpm")).unwrap();
        std::fs::write(root.join("usr/lib/rpm/macros"), "%_dbpath\t\t%{_var}/lib/rpm\n").unwrap();
        let e = open(&base).unwrap_err();
        assert!(matches!(&e, RpmdbError::Mismatch { found: "sqlite", .. }), "{e}");
        std::fs::write(
            root.join("usr/lib/rpm/macros"),
            "%_dbpath\t\t%{_var}/lib/rpm\n%_db_backend\t  sqlite\n",
        )
        .unwrap();
        let db = open(&base).unwrap().unwrap();
        assert_eq!(
            (db.format, db.dir.as_str(), db.headers.len(), db.max_instance),
            (Format::Sqlite, "usr/lib/sysimage/rpm", 0, 0)
        );
        // /etc/rpm/macros.* override the vendor's.
        std::fs::create_dir_all(root.join("etc/rpm")).unwrap();
        std::fs::write(root.join("etc/rpm/macros.db"), "%_db_backend bdb\n").unwrap();
        let e = open(&base).unwrap_err();
        assert!(
            e.to_string().contains("/etc/rpm/macros.db")
                && e.hint().is_some_and(|h| h.contains("rpmdb --rebuilddb")),
            "{e}"
        );
    }
}
