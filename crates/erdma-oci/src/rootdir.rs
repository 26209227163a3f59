//! An image's root assembled in a directory (on disk or a tmpfs): its layers applied in order,
//! whiteouts honoured, for the one job that needs the whole tree (running maintainer scripts in
//! a sandbox); then what changed in it turned back into entries of the new layer.
//!
//! Layers are hostile input and the writer here is the host's root, so:
//! - every name is normalised (no `..`, no absolute path) and no entry is written through a
//!   symlink: a parent that is a symlink is an error, and an existing entry is removed before
//!   its replacement is created (never opened for writing);
//! - a hard link must name an entry already in the tree that is not a directory (`linkat`
//!   without following);
//! - device nodes are not created (a sandbox never needs the host's devices); FIFOs and
//!   sockets are skipped too. [`Applied::skipped`] names them;
//! - owners are shifted: the tree belongs to the ids a user namespace maps (its root is host
//!   uid `shift`), never to the host's root, so a script running as the namespace's root owns
//!   nothing outside it. An id the namespace cannot map (65536 and up) becomes `nobody`.
//!
//! [`RootDir::scan`] records every entry's identity (inode, change time, size, mode, owner);
//! [`RootDir::changes`] compares two scans and adds what differs to a [`LayerContents`]: new and
//! changed entries with their real parents, hard links as links, removals as whiteouts.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::layer::{normalize, Entry, EntryKind, LayerContents};

/// How many ids the namespace maps: 0 to 65535, as container engines map a rootless user.
pub const ID_COUNT: u32 = 65536;
const NOBODY: u32 = 65534;

/// A root tree in a directory, owned by the ids of a user namespace whose root is host uid `shift`.
pub struct RootDir {
    path: PathBuf,
    shift: u32,
}

/// What applying one layer did.
#[derive(Debug, Default)]
pub struct Applied {
    pub entries: u64,
    /// Entries not created: device nodes, FIFOs, sockets (`path (what)`).
    pub skipped: Vec<String>,
}

/// What a scan saw at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub kind: Kind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    ino: u64,
    nlink: u64,
    /// Change time: any write, chmod, chown or rename moves it, and nothing can set it back.
    ctime: (i64, i64),
    mtime: (i64, i64),
    /// Extended attributes a layer carries: `security.capability`, in the image's terms
    /// ([`image_capability`]).
    pub xattrs: Vec<(String, Vec<u8>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink(String),
    /// A device node, FIFO or socket.
    Other,
}

/// Every entry of a tree by relative path (`usr/bin/x`); the root itself is not listed.
pub type Tree = BTreeMap<String, Meta>;

impl RootDir {
    /// Creates the empty root at `path` (which must not exist), owned by the namespace's root.
    pub fn create(path: &Path, shift: u32) -> Result<RootDir> {
        fs::create_dir(path).map_err(Error::io("creating", path))?;
        let root = RootDir { path: path.to_path_buf(), shift };
        root.own(path, 0, 0)?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o755))
            .map_err(Error::io("setting the mode of", path))?;
        Ok(root)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn host_id(&self, id: u64) -> u32 {
        let id = if id < ID_COUNT as u64 { id as u32 } else { NOBODY };
        self.shift + id
    }

    /// The namespace's id for a host id (one the namespace does not map becomes root: only
    /// the host could have made it).
    fn ns_id(&self, host: u32) -> u64 {
        match host.checked_sub(self.shift) {
            Some(id) if id < ID_COUNT => id as u64,
            _ => 0,
        }
    }

    fn own(&self, path: &Path, uid: u64, gid: u64) -> Result<()> {
        std::os::unix::fs::lchown(path, Some(self.host_id(uid)), Some(self.host_id(gid)))
            .map_err(Error::io("setting the owner of", path))
    }

    /// Makes every parent of `rel` a directory of the tree (creating missing ones, 0755,
    /// root), refusing one that is a symlink or a file.
    fn parents(&self, layer: &str, rel: &str) -> Result<()> {
        let mut at = self.path.clone();
        let parts: Vec<&str> = rel.split('/').collect();
        for part in &parts[..parts.len() - 1] {
            at.push(part);
            match fs::symlink_metadata(&at) {
                Ok(m) if m.is_dir() => {}
                Ok(m) => {
                    return Err(Error::RootEntry {
                        layer: layer.to_string(),
                        entry: rel.to_string(),
                        reason: format!(
                            "lies under {}, which is a {} here",
                            at.strip_prefix(&self.path).unwrap_or(&at).display(),
                            if m.file_type().is_symlink() { "symlink" } else { "file" }
                        ),
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fs::create_dir(&at).map_err(Error::io("creating", &at))?;
                    self.own(&at, 0, 0)?;
                }
                Err(e) => return Err(Error::io("reading", &at)(e)),
            }
        }
        Ok(())
    }

    /// Removes whatever is at `full` (a directory with its contents); nothing there is fine.
    fn clear(full: &Path) -> Result<()> {
        match fs::symlink_metadata(full) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(full).map_err(Error::io("removing", full)),
            Ok(_) => fs::remove_file(full).map_err(Error::io("removing", full)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io("reading", full)(e)),
        }
    }

    /// Applies one layer's uncompressed tar stream (`name` for errors: its digest).
    pub fn apply(&self, name: &str, tar: &mut dyn Read) -> Result<Applied> {
        let bad = |source: io::Error| Error::Corrupt {
            what: "layer",
            reference: name.to_string(),
            source,
        };
        let mut applied = Applied::default();
        // What this layer wrote: an opaque marker hides only what lies below it.
        let mut written: BTreeSet<String> = BTreeSet::new();
        let mut archive = tar::Archive::new(tar);
        for entry in archive.entries().map_err(bad)? {
            let mut entry = entry.map_err(bad)?;
            let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            let Some(rel) = normalize(&raw) else {
                if raw.split('/').any(|c| c == "..") {
                    return Err(Error::RootEntry {
                        layer: name.to_string(),
                        entry: raw,
                        reason: "would be outside the root".into(),
                    });
                }
                continue; // the root itself
            };
            let (dir, base) = rel.rsplit_once('/').unwrap_or(("", rel.as_str()));
            if base == ".wh..wh..opq" {
                let d = self.path.join(dir);
                if let Ok(children) = fs::read_dir(&d) {
                    for c in children.flatten() {
                        let child = match dir {
                            "" => c.file_name().to_string_lossy().into_owned(),
                            d => format!("{d}/{}", c.file_name().to_string_lossy()),
                        };
                        if !written.contains(&child) {
                            Self::clear(&c.path())?;
                        }
                    }
                }
                continue;
            }
            if let Some(gone) = base.strip_prefix(".wh.") {
                let gone = if dir.is_empty() { gone.to_string() } else { format!("{dir}/{gone}") };
                self.parents(name, &gone)?;
                Self::clear(&self.path.join(&gone))?;
                continue;
            }
            self.parents(name, &rel)?;
            let full = self.path.join(&rel);
            let h = entry.header();
            let (mode, uid, gid) =
                (h.mode().map_err(bad)? & 0o7777, h.uid().map_err(bad)?, h.gid().map_err(bad)?);
            let kind = h.entry_type();
            let is_dir = fs::symlink_metadata(&full).map(|m| m.is_dir()).unwrap_or(false);
            if !(kind.is_dir() && is_dir) {
                Self::clear(&full)?;
            }
            if kind.is_dir() {
                if !is_dir {
                    fs::create_dir(&full).map_err(Error::io("creating", &full))?;
                }
            } else if kind.is_file() || kind == tar::EntryType::Continuous {
                io::copy(&mut entry, &mut Self::create_file(&full)?).map_err(bad)?;
            } else if kind.is_symlink() {
                let target = entry
                    .link_name_bytes()
                    .map(|l| String::from_utf8_lossy(&l).into_owned())
                    .unwrap_or_default();
                std::os::unix::fs::symlink(&target, &full).map_err(Error::io("creating", &full))?;
            } else if kind.is_hard_link() {
                let target = entry
                    .link_name_bytes()
                    .and_then(|l| normalize(&String::from_utf8_lossy(&l)))
                    .ok_or_else(|| Error::RootEntry {
                        layer: name.to_string(),
                        entry: rel.clone(),
                        reason: "is a hard link without a target inside the root".into(),
                    })?;
                self.parents(name, &target)?;
                let to = self.path.join(&target);
                match fs::symlink_metadata(&to) {
                    Ok(m) if !m.is_dir() => {}
                    _ => {
                        return Err(Error::RootEntry {
                            layer: name.to_string(),
                            entry: rel.clone(),
                            reason: format!("is a hard link to {target}, which is not a file here"),
                        })
                    }
                }
                fs::hard_link(&to, &full).map_err(Error::io("linking", &full))?;
                written.insert(rel);
                applied.entries += 1;
                continue; // one inode: the target's owner and mode stand
            } else {
                let what = match kind {
                    tar::EntryType::Char => "character device",
                    tar::EntryType::Block => "block device",
                    tar::EntryType::Fifo => "FIFO",
                    _ => "entry of another kind",
                };
                applied.skipped.push(format!("/{rel} ({what})"));
                continue;
            }
            self.own(&full, uid, gid)?;
            if !kind.is_symlink() {
                Self::set_mode(&full, mode)?;
            }
            written.insert(rel);
            applied.entries += 1;
        }
        Ok(applied)
    }

    /// Writes a regular file into the tree (its parents must exist), owned by the
    /// namespace's root: what the build puts in for a run and takes out again.
    pub fn put_file(&self, rel: &str, data: &mut dyn Read, mode: u32) -> Result<()> {
        let rel = normalize(rel).ok_or_else(|| Error::LayerPath { path: rel.to_string() })?;
        self.parents("(build)", &rel)?;
        let full = self.path.join(&rel);
        Self::clear(&full)?;
        io::copy(data, &mut Self::create_file(&full)?).map_err(Error::io("writing", &full))?;
        self.own(&full, 0, 0)?;
        Self::set_mode(&full, mode)
    }

    /// A new regular file at `full`, for writing: never one opened through what was there
    /// (a symlink), which [`Self::clear`] has removed.
    fn create_file(full: &Path) -> Result<fs::File> {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(full)
            .map_err(Error::io("creating", full))
    }

    /// The mode, set after the owner: chown(2) clears setuid and setgid.
    fn set_mode(full: &Path, mode: u32) -> Result<()> {
        fs::set_permissions(full, fs::Permissions::from_mode(mode))
            .map_err(Error::io("setting the mode of", full))
    }

    /// Creates a directory (parents too), owned by the namespace's root.
    pub fn put_dir(&self, rel: &str) -> Result<()> {
        let rel = normalize(rel).ok_or_else(|| Error::LayerPath { path: rel.to_string() })?;
        self.parents("(build)", &format!("{rel}/x"))
    }

    /// Removes what is at `rel`, if anything.
    pub fn remove(&self, rel: &str) -> Result<()> {
        let rel = normalize(rel).ok_or_else(|| Error::LayerPath { path: rel.to_string() })?;
        self.parents("(build)", &rel)?;
        Self::clear(&self.path.join(rel))
    }

    /// The extended attributes a layer carries of a file or directory of the tree: only
    /// `security.capability`, as Docker's and containerd's layer writers take only that one
    /// (a host's SELinux labels are not the image's).
    fn xattrs(&self, path: &Path) -> Result<Vec<(String, Vec<u8>)>> {
        const CAP: &str = "security.capability";
        let len = match rustix::fs::lgetxattr_query(path, CAP) {
            Ok(l) => l,
            Err(e) if e == rustix::io::Errno::NODATA || e == rustix::io::Errno::NOTSUP => {
                return Ok(Vec::new())
            }
            Err(e) => return Err(Error::io("reading the attributes of", path)(e.into())),
        };
        let mut value = vec![0u8; len];
        let len = rustix::fs::lgetxattr(path, CAP, &mut value[..])
            .map_err(|e| Error::io("reading the attributes of", path)(e.into()))?;
        value.truncate(len);
        Ok(vec![(CAP.to_string(), image_capability(&value, self.shift))])
    }

    /// Every entry of the tree, not following symlinks.
    pub fn scan(&self) -> Result<Tree> {
        let mut tree = Tree::new();
        let mut todo = vec![String::new()];
        while let Some(dir) = todo.pop() {
            let full = self.path.join(&dir);
            for e in fs::read_dir(&full).map_err(Error::io("reading", &full))? {
                let e = e.map_err(Error::io("reading", &full))?;
                let name = e.file_name().to_string_lossy().into_owned();
                let rel = if dir.is_empty() { name } else { format!("{dir}/{name}") };
                let m = e.metadata().map_err(Error::io("reading", e.path()))?;
                let ft = m.file_type();
                let kind = if ft.is_dir() {
                    todo.push(rel.clone());
                    Kind::Dir
                } else if ft.is_file() {
                    Kind::File
                } else if ft.is_symlink() {
                    let t = fs::read_link(e.path()).map_err(Error::io("reading", e.path()))?;
                    Kind::Symlink(t.to_string_lossy().into_owned())
                } else {
                    Kind::Other
                };
                let xattrs = if ft.is_symlink() { Vec::new() } else { self.xattrs(&e.path())? };
                tree.insert(
                    rel,
                    Meta {
                        xattrs,
                        kind,
                        mode: m.mode() & 0o7777,
                        uid: m.uid(),
                        gid: m.gid(),
                        size: m.size(),
                        ino: m.ino(),
                        nlink: m.nlink(),
                        ctime: (m.ctime(), m.ctime_nsec()),
                        mtime: (m.mtime(), m.mtime_nsec()),
                    },
                );
            }
        }
        Ok(tree)
    }

    /// Adds to `layer` what differs between `before` and `after` (two scans of this tree):
    /// new and changed entries, each with its parents as the tree has them, files read from
    /// the tree with their modification times, several names of one new file as hard links,
    /// and a whiteout for each entry
    /// gone (only the topmost of a removed subtree). Returns the paths removed (`/x`) and
    /// what was not taken (`path (what)`: device nodes, FIFOs, sockets).
    pub fn changes(
        &self,
        before: &Tree,
        after: &Tree,
        layer: &mut LayerContents,
    ) -> Result<(Vec<String>, Vec<String>)> {
        let mut removed = Vec::new();
        let mut skipped = Vec::new();
        for p in before.keys().filter(|p| !after.contains_key(*p)) {
            // A parent that is still a directory: this entry needs its own whiteout; a parent
            // gone or replaced hides it already.
            let parent_stays = match p.rsplit_once('/') {
                None => true,
                Some((parent, _)) => after.get(parent).is_some_and(|m| m.kind == Kind::Dir),
            };
            if parent_stays {
                layer.add_whiteout(p)?;
                removed.push(format!("/{p}"));
            }
        }
        let unchanged = |p: &str, m: &Meta| before.get(p).is_some_and(|b| b == m);
        // The first name of each new file with several names, by inode.
        let mut names: HashMap<u64, String> = HashMap::new();
        let mut parents: BTreeSet<String> = BTreeSet::new();
        for (p, m) in after.iter().filter(|(p, m)| !unchanged(p, m)) {
            let (uid, gid) = (self.ns_id(m.uid), self.ns_id(m.gid));
            let full = self.path.join(p);
            let kind = match &m.kind {
                Kind::Dir => EntryKind::Dir,
                Kind::Symlink(t) => EntryKind::Symlink(t.clone()),
                Kind::File => {
                    if m.nlink > 1 {
                        if let Some(first) = names.get(&m.ino) {
                            layer.add_hardlink(p, first)?;
                            parents.extend(ancestors(p));
                            continue;
                        }
                        names.insert(m.ino, p.clone());
                    }
                    let mut f = fs::File::open(&full).map_err(Error::io("reading", &full))?;
                    layer
                        .file_kind(&mut f, m.size, &mut |_| {})
                        .map_err(Error::io("reading", &full))?
                }
                Kind::Other => {
                    skipped.push(format!("/{p} (device node, FIFO or socket)"));
                    continue;
                }
            };
            let dir = matches!(kind, EntryKind::Dir);
            layer.insert(p, Entry { kind, mode: m.mode, uid, gid })?;
            // A file keeps the time the package manager gave it (the package's own, which
            // `rpm -V` checks), not the build's; directories keep the build's.
            if !dir {
                layer.set_mtime(p, m.mtime.0.max(0) as u64);
            }
            for (name, value) in &m.xattrs {
                layer.set_xattr(p, name, value.clone())?;
            }
            parents.extend(ancestors(p));
        }
        // Parents as the tree has them (a layer would otherwise give them 0755 and root).
        for p in parents {
            let Some(m) = after.get(&p).filter(|m| m.kind == Kind::Dir) else { continue };
            if layer.get(&p).is_some_and(|e| e.kind == EntryKind::Dir) {
                layer.insert(
                    &p,
                    Entry {
                        kind: EntryKind::Dir,
                        mode: m.mode,
                        uid: self.ns_id(m.uid),
                        gid: self.ns_id(m.gid),
                    },
                )?;
            }
        }
        Ok((removed, skipped))
    }
}

/// A file capability as the image must carry it. `setcap` run as a user namespace's root
/// writes a version 3 `vfs_cap_data` naming that root's host uid (`shift`), which the kernel
/// honours only in that namespace; the image's is the plain version 2 form (no root id) that
/// `setcap` writes as the real root and every runtime honours (linux/capability.h). Any other
/// value is kept as it is.
pub fn image_capability(value: &[u8], shift: u32) -> Vec<u8> {
    const REVISION_MASK: u32 = 0xFF00_0000;
    const V2: u32 = 0x0200_0000;
    const V3: u32 = 0x0300_0000;
    if value.len() == 24 {
        let magic = u32::from_le_bytes(value[0..4].try_into().expect("4 bytes"));
        let rootid = u32::from_le_bytes(value[20..24].try_into().expect("4 bytes"));
        if magic & REVISION_MASK == V3 && rootid == shift {
            let mut v2 = value[..20].to_vec();
            v2[0..4].copy_from_slice(&((magic & !REVISION_MASK) | V2).to_le_bytes());
            return v2;
        }
    }
    value.to_vec()
}

/// `a/b/c` → `a`, `a/b`.
fn ancestors(p: &str) -> impl Iterator<Item = String> + '_ {
    p.match_indices('/').map(|(i, _)| p[..i].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, tar::EntryType, &[u8], u32)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, data, mode) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(*mode);
            h.set_uid(0);
            h.set_gid(0);
            if kind.is_symlink() || kind.is_hard_link() {
                h.set_size(0);
                b.append_link(&mut h, path, std::str::from_utf8(data).unwrap()).unwrap();
            } else {
                h.set_size(data.len() as u64);
                b.append_data(&mut h, path, *data).unwrap();
            }
        }
        b.into_inner().unwrap()
    }

    /// Layers applied in order with whiteouts and an opaque directory; a write through a
    /// symlink, an escaping name and a hard link out of the tree are refused; the changes of
    /// a run come back as layer entries (a new file, a changed mode, a removal, a link).
    #[test]
    fn layers_apply_and_changes_come_back() {
        // Owners shift by the current uid so that the test runs unprivileged too.
        let me = rustix_free_uid();
        let tmp = tempfile::tempdir().unwrap();
        let root = RootDir::create(&tmp.path().join("root"), me).unwrap();
        use tar::EntryType as T;
        let lower = tar_of(&[
            ("etc/", T::Directory, b"", 0o755),
            ("etc/keep", T::Regular, b"keep", 0o644),
            ("etc/gone", T::Regular, b"gone", 0o644),
            ("opt/", T::Directory, b"", 0o755),
            ("opt/old", T::Regular, b"old", 0o644),
            ("lib", T::Symlink, b"usr/lib", 0o777),
            ("dev/null", T::Char, b"", 0o666),
        ]);
        let a = root.apply("lower", &mut lower.as_slice()).unwrap();
        assert_eq!(a.skipped, ["/dev/null (character device)"]);
        let upper = tar_of(&[
            ("etc/.wh.gone", T::Regular, b"", 0o644),
            ("opt/.wh..wh..opq", T::Regular, b"", 0o644),
            ("opt/new", T::Regular, b"new", 0o4755),
            ("opt/new2", T::Link, b"opt/new", 0o644),
        ]);
        root.apply("upper", &mut upper.as_slice()).unwrap();
        let p = root.path();
        assert!(!p.join("etc/gone").exists() && !p.join("opt/old").exists());
        assert_eq!(fs::read(p.join("opt/new2")).unwrap(), b"new");
        assert_eq!(fs::metadata(p.join("opt/new")).unwrap().mode() & 0o7777, 0o4755);
        for (bad, why) in [
            (tar_of(&[("lib/x", T::Regular, b"x", 0o644)]), "lies under lib, which is a symlink"),
            (tar_of(&[("x", T::Link, b"etc", 0o644)]), "which is not a file here"),
        ] {
            let e = root.apply("bad", &mut bad.as_slice()).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
        assert!(!p.join("usr/lib/x").exists());

        let before = root.scan().unwrap();
        fs::write(p.join("etc/added"), b"added").unwrap();
        fs::hard_link(p.join("etc/added"), p.join("etc/added2")).unwrap();
        fs::set_permissions(p.join("etc/keep"), fs::Permissions::from_mode(0o600)).unwrap();
        fs::remove_dir_all(p.join("opt")).unwrap();
        let after = root.scan().unwrap();
        let mut layer = LayerContents::new();
        let (removed, skipped) = root.changes(&before, &after, &mut layer).unwrap();
        assert_eq!(removed, ["/opt"]);
        assert!(skipped.is_empty());
        let got: Vec<(String, String, u32)> =
            layer.files().map(|(p, e)| (p.to_string(), format!("{:?}", e.kind), e.mode)).collect();
        assert_eq!(
            got,
            [
                ("etc/added".into(), "File([97, 100, 100, 101, 100])".into(), 0o644),
                ("etc/added2".into(), "File([97, 100, 100, 101, 100])".into(), 0o644),
                ("etc/keep".into(), "File([107, 101, 101, 112])".into(), 0o600),
                ("opt".into(), "Whiteout".into(), 0o644),
            ]
        );
        assert_eq!(layer.other_names("etc/added"), ["etc/added2"]);
    }

    /// `setcap cap_net_raw+ep` as a namespace's root (version 3, its root's host uid) becomes
    /// what the real root's `setcap` writes (version 2); anything else stays as it is.
    #[test]
    fn namespaced_capabilities_become_the_images() {
        let shift: u32 = 1 << 30;
        let mut v3 = Vec::new();
        v3.extend_from_slice(&0x0300_0001u32.to_le_bytes());
        v3.extend_from_slice(&[0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        v3.extend_from_slice(&shift.to_le_bytes());
        let mut v2 = 0x0200_0001u32.to_le_bytes().to_vec();
        v2.extend_from_slice(&v3[4..20]);
        assert_eq!(image_capability(&v3, shift), v2);
        assert_eq!(image_capability(&v2, shift), v2);
        // Another namespace's root: not ours to rewrite.
        assert_eq!(image_capability(&v3, 5), v3);
        let mut layer = LayerContents::new();
        layer.add_file("usr/bin/ping", b"elf".to_vec(), 0o755).unwrap();
        layer.add_hardlink("usr/bin/ping2", "usr/bin/ping").unwrap();
        layer.set_xattr("usr/bin/ping", "security.capability", v2.clone()).unwrap();
        let tar = layer.write_tar(Vec::new(), 0).unwrap();
        let mut a = tar::Archive::new(tar.as_slice());
        let mut seen = Vec::new();
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let path = e.path().unwrap().to_string_lossy().into_owned();
            let caps: Vec<Vec<u8>> = e
                .pax_extensions()
                .unwrap()
                .into_iter()
                .flatten()
                .map(|x| x.unwrap())
                .filter(|x| x.key().unwrap() == "SCHILY.xattr.security.capability")
                .map(|x| x.value_bytes().to_vec())
                .collect();
            seen.push((path, caps));
        }
        assert_eq!(
            seen,
            [
                ("usr/".to_string(), vec![]),
                ("usr/bin/".to_string(), vec![]),
                ("usr/bin/ping".to_string(), vec![v2]),
                ("usr/bin/ping2".to_string(), vec![]),
            ]
        );
        // A new file at the path is a new inode, without the old one's attributes.
        layer.add_file("usr/bin/ping", b"new".to_vec(), 0o755).unwrap();
        assert!(layer.xattrs("usr/bin/ping").is_none());
    }

    /// The uid this process runs as (the shift under which it owns what it writes).
    fn rustix_free_uid() -> u32 {
        fs::metadata("/proc/self").map(|m| m.uid()).unwrap()
    }
}
