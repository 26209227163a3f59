//! The reproducible layer writer: where a layer gets written.
//!
//! Entries are sorted by path, every mtime is the build epoch, owners are root unless an
//! entry says otherwise, and compression has fixed parameters (a large layer's gzip is cut into
//! fixed blocks compressed side by side: [`crate::gzip`]), so the same entries always give the
//! same bytes and digests on every machine.
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use crate::blob::HashingWriter;
use crate::error::{Error, Result};
pub use crate::gzip::Split;

pub const MEDIA_TYPE_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
pub const MEDIA_TYPE_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const MEDIA_TYPE_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";

/// Layer compression, chosen with `--compression`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LayerCompression {
    #[default]
    Gzip,
    Zstd,
}

impl LayerCompression {
    pub fn media_type(self) -> &'static str {
        match self {
            LayerCompression::Gzip => MEDIA_TYPE_GZIP,
            LayerCompression::Zstd => MEDIA_TYPE_ZSTD,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    Dir,
    File(Vec<u8>),
    /// A regular file whose bytes wait in the layer's spool file (large package files: a
    /// layer never holds them in memory).
    Spooled {
        offset: u64,
        len: u64,
    },
    Symlink(String),
    /// An OCI whiteout: hides the path from lower layers.
    Whiteout,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: EntryKind,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
}

/// What the layer will hold, keyed by normalised relative path (`etc/apt/x.list`).
#[derive(Debug, Default, Clone)]
pub struct LayerContents {
    entries: BTreeMap<String, Entry>,
    /// Where the bytes of [`EntryKind::Spooled`] files are: an unnamed temporary file, gone
    /// with the last clone of the layer.
    spool: Option<Arc<File>>,
    spooled: u64,
    /// Entries whose mtime is their own rather than the build epoch: files from rpm packages,
    /// whose headers record each file's mtime and whose `rpm -V` compares it.
    mtimes: BTreeMap<String, u64>,
    /// Regular files that are one file under several names (hard links), by path: the same
    /// number is the same file. The first name in path order carries the bytes in the written
    /// tar, the others are link entries to it (tar writes a file before its other names).
    links: BTreeMap<String, u64>,
    next_link: u64,
    /// Extended attributes by path (`security.capability` a script's `setcap` set), written as
    /// PAX `SCHILY.xattr.NAME` records as GNU tar, Docker and containerd write and read them.
    xattrs: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
}

/// Files up to this size are held in memory; larger ones go to the spool file.
pub const INLINE_MAX: u64 = 1 << 20;

/// A written layer: the numbers that go into the manifest and config.
#[derive(Debug, Clone, Serialize)]
pub struct LayerInfo {
    pub digest: String,
    pub diff_id: String,
    pub size: u64,
    pub media_type: String,
}

pub use erdma_limits::paths::{normalize, odd_name, ODD_NAME};

/// What a package entry is, as far as placing it in the image goes (the place callbacks of
/// both package backends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placing<'t> {
    Dir,
    /// A regular file (or a hard link's copy).
    File,
    Symlink(&'t str),
}

impl LayerContents {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a regular file, creating its parent directories (0755, root).
    pub fn add_file(&mut self, path: &str, content: Vec<u8>, mode: u32) -> Result<()> {
        self.insert(path, Entry { kind: EntryKind::File(content), mode, uid: 0, gid: 0 })
    }

    pub fn add_dir(&mut self, path: &str, mode: u32) -> Result<()> {
        self.insert(path, Entry { kind: EntryKind::Dir, mode, uid: 0, gid: 0 })
    }

    pub fn add_symlink(&mut self, path: &str, target: &str) -> Result<()> {
        self.insert(
            path,
            Entry { kind: EntryKind::Symlink(target.to_string()), mode: 0o777, uid: 0, gid: 0 },
        )
    }

    pub fn add_whiteout(&mut self, path: &str) -> Result<()> {
        self.insert(path, Entry { kind: EntryKind::Whiteout, mode: 0o644, uid: 0, gid: 0 })
    }

    pub fn insert(&mut self, path: &str, entry: Entry) -> Result<()> {
        let norm = normalize(path).ok_or_else(|| Error::LayerPath { path: path.to_string() })?;
        // Every entry's parents are directories of the layer, and a directory with entries
        // under it stays one: an entry under a symlink of the same layer would be written
        // wherever the link points when a runtime extracts the layer (packages::payload).
        let under = |p: &str, e: &Entry| Error::LayerConflict {
            entry: norm.clone(),
            reason: format!(
                "lie under `{p}`, which the layer holds as a {}",
                match e.kind {
                    EntryKind::Symlink(_) => "symlink",
                    EntryKind::Whiteout => "whiteout",
                    _ => "file",
                }
            ),
        };
        if matches!(
            entry.kind,
            EntryKind::File(_) | EntryKind::Spooled { .. } | EntryKind::Symlink(_)
        ) {
            let prefix = format!("{norm}/");
            if let Some((child, _)) =
                self.entries.range(prefix.clone()..).next().filter(|(p, _)| p.starts_with(&prefix))
            {
                return Err(Error::LayerConflict {
                    entry: norm.clone(),
                    reason: format!("replace a directory that holds `{child}`"),
                });
            }
        }
        let parents: Vec<&str> = norm.match_indices('/').map(|(i, _)| &norm[..i]).collect();
        for p in &parents {
            if let Some(e) = self.entries.get(*p).filter(|e| e.kind != EntryKind::Dir) {
                return Err(under(p, e));
            }
        }
        for p in parents {
            self.entries.entry(p.to_string()).or_insert(Entry {
                kind: EntryKind::Dir,
                mode: 0o755,
                uid: 0,
                gid: 0,
            });
        }
        self.mtimes.remove(&norm);
        // A new entry is a new file: the name leaves the file it was a link of, as unlink(2)
        // and a fresh create would leave it.
        self.links.remove(&norm);
        self.xattrs.remove(&norm);
        self.entries.insert(norm, entry);
        Ok(())
    }

    /// Sets an extended attribute on the entry at `path` (every name of a hard-linked file:
    /// they are one inode).
    pub fn set_xattr(&mut self, path: &str, name: &str, value: Vec<u8>) -> Result<()> {
        let norm = normalize(path).ok_or_else(|| Error::LayerPath { path: path.to_string() })?;
        if !self.entries.contains_key(&norm) {
            return Err(Error::LayerPath { path: path.to_string() });
        }
        let mut names = self.other_names(&norm);
        names.push(norm);
        for n in names {
            self.xattrs.entry(n).or_default().insert(name.to_string(), value.clone());
        }
        Ok(())
    }

    /// The extended attributes of the entry at `path`.
    pub fn xattrs(&self, path: &str) -> Option<&BTreeMap<String, Vec<u8>>> {
        normalize(path).and_then(|n| self.xattrs.get(&n))
    }

    /// Adds `path` as another name of the regular file `target` of this layer (a hard link):
    /// the same bytes, mode and owner, written as a tar link entry.
    pub fn add_hardlink(&mut self, path: &str, target: &str) -> Result<()> {
        let norm = normalize(path).ok_or_else(|| Error::LayerPath { path: path.to_string() })?;
        let target_norm =
            normalize(target).ok_or_else(|| Error::LayerPath { path: target.to_string() })?;
        let entry = match self.entries.get(&target_norm) {
            Some(e) if matches!(e.kind, EntryKind::File(_) | EntryKind::Spooled { .. }) => {
                e.clone()
            }
            _ => {
                return Err(Error::LayerConflict {
                    entry: norm,
                    reason: format!(
                        "link to `{target_norm}`, which is not a regular file of the layer"
                    ),
                })
            }
        };
        if norm == target_norm {
            return Ok(());
        }
        self.insert(&norm, entry)?;
        let id = match self.links.get(&target_norm) {
            Some(id) => *id,
            None => {
                self.next_link += 1;
                self.links.insert(target_norm, self.next_link);
                self.next_link
            }
        };
        self.links.insert(norm, id);
        Ok(())
    }

    /// The entry at `path`, if the layer has one.
    pub fn get(&self, path: &str) -> Option<&Entry> {
        normalize(path).and_then(|n| self.entries.get(&n))
    }

    /// Fills `buf` from byte `at` of the regular file at `path`, held or spooled (a large
    /// file is read only where asked). `Ok(false)`: no regular file there, or it ends before
    /// `buf` is full.
    pub fn read_file_at(&self, path: &str, at: u64, buf: &mut [u8]) -> io::Result<bool> {
        match self.get(path).map(|e| &e.kind) {
            Some(EntryKind::File(data)) => {
                let Some(src) =
                    usize::try_from(at).ok().and_then(|a| data.get(a..a.checked_add(buf.len())?))
                else {
                    return Ok(false);
                };
                buf.copy_from_slice(src);
                Ok(true)
            }
            Some(EntryKind::Spooled { offset, len }) => {
                if at.checked_add(buf.len() as u64).is_none_or(|end| end > *len) {
                    return Ok(false);
                }
                self.spool_file()?.read_exact_at(buf, offset + at)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// The bytes of the regular file at `path`, held or spooled, read from the start; `None`:
    /// no regular file there.
    pub fn file_reader(&self, path: &str) -> io::Result<Option<Box<dyn Read + '_>>> {
        Ok(match self.get(path).map(|e| &e.kind) {
            Some(EntryKind::File(data)) => Some(Box::new(data.as_slice())),
            Some(EntryKind::Spooled { offset, len }) => {
                let file = self.spool_file()?;
                Some(Box::new(SpoolReader { file, at: *offset, end: offset + len }))
            }
            _ => None,
        })
    }

    /// The file spooled entries' bytes are in.
    fn spool_file(&self) -> io::Result<&File> {
        self.spool.as_deref().ok_or_else(|| io::Error::other("spooled entry without a spool file"))
    }

    /// The size of the regular file at `path`, held or spooled.
    pub fn file_len(&self, path: &str) -> Option<u64> {
        match self.get(path).map(|e| &e.kind) {
            Some(EntryKind::File(data)) => Some(data.len() as u64),
            Some(EntryKind::Spooled { len, .. }) => Some(*len),
            _ => None,
        }
    }

    /// Sets the mode and owner of the entry at `path` and, for a file with several names,
    /// of every name (they are one inode: chmod and chown change all of them).
    pub fn set_owner_mode(&mut self, path: &str, mode: u32, uid: u64, gid: u64) -> Result<()> {
        let norm = normalize(path).ok_or_else(|| Error::LayerPath { path: path.to_string() })?;
        if !self.entries.contains_key(&norm) {
            return Err(Error::LayerPath { path: path.to_string() });
        }
        let names: Vec<String> = match self.links.get(&norm) {
            Some(id) => {
                self.links.iter().filter(|(_, i)| *i == id).map(|(p, _)| p.clone()).collect()
            }
            None => vec![norm],
        };
        for n in names {
            if let Some(e) = self.entries.get_mut(&n) {
                (e.mode, e.uid, e.gid) = (mode, uid, gid);
            }
        }
        Ok(())
    }

    /// The other names of the file at `path` (its hard links in this layer), sorted.
    pub fn other_names(&self, path: &str) -> Vec<String> {
        let Some(norm) = normalize(path) else { return Vec::new() };
        match self.links.get(&norm) {
            Some(id) => self
                .links
                .iter()
                .filter(|(p, i)| *i == id && **p != norm)
                .map(|(p, _)| p.clone())
                .collect(),
            None => Vec::new(),
        }
    }

    /// Gives the entry at `path` its own mtime in the written layer (until it is replaced).
    pub fn set_mtime(&mut self, path: &str, mtime: u64) {
        if let Some(norm) = normalize(path).filter(|n| self.entries.contains_key(n)) {
            self.mtimes.insert(norm, mtime);
        }
    }

    /// Paths of the regular files, symlinks and whiteouts, sorted (directories left out).
    pub fn files(&self) -> impl Iterator<Item = (&str, &Entry)> {
        self.entries.iter().filter(|(_, e)| e.kind != EntryKind::Dir).map(|(p, e)| (p.as_str(), e))
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Reads a regular file's `size` bytes from `r` into an entry kind, showing every chunk to
    /// `inspect` (a checksum) on the way: up to [`INLINE_MAX`] in memory, larger files copied
    /// to the spool file a buffer at a time. Fewer or more than `size` bytes is an error.
    pub fn file_kind(
        &mut self,
        r: &mut dyn Read,
        size: u64,
        inspect: &mut dyn FnMut(&[u8]),
    ) -> io::Result<EntryKind> {
        let short = || {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("file shorter than its {size} bytes"),
            )
        };
        if size <= INLINE_MAX {
            let mut buf = Vec::with_capacity(size as usize);
            r.take(size + 1).read_to_end(&mut buf)?;
            if buf.len() as u64 != size {
                return Err(if (buf.len() as u64) < size {
                    short()
                } else {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("file longer than its {size} bytes"),
                    )
                });
            }
            inspect(&buf);
            return Ok(EntryKind::File(buf));
        }
        if self.spool.is_none() {
            self.spool = Some(Arc::new(tempfile::tempfile()?));
        }
        let spool = self.spool.as_ref().expect("just set");
        let offset = self.spooled;
        let mut buf = vec![0u8; 256 << 10];
        let mut done = 0u64;
        while done < size {
            let want = (size - done).min(buf.len() as u64) as usize;
            let n = r.read(&mut buf[..want])?;
            if n == 0 {
                return Err(short());
            }
            inspect(&buf[..n]);
            spool.write_all_at(&buf[..n], offset + done)?;
            done += n as u64;
        }
        self.spooled += size;
        Ok(EntryKind::Spooled { offset, len: size })
    }

    /// Writes the uncompressed tar stream to `w`, entries sorted, mtimes `mtime` except where
    /// an entry has its own ([`Self::set_mtime`]).
    pub fn write_tar<W: Write>(&self, w: W, mtime: u64) -> io::Result<W> {
        let mut tar = tar::Builder::new(w);
        // Each linked file's first name (in path order) carries the bytes.
        let mut first: BTreeMap<u64, &str> = BTreeMap::new();
        for (p, id) in &self.links {
            first.entry(*id).or_insert(p.as_str());
        }
        for (path, entry) in &self.entries {
            let mut h = tar::Header::new_gnu();
            h.set_mtime(self.mtimes.get(path).copied().unwrap_or(mtime));
            h.set_uid(entry.uid);
            h.set_gid(entry.gid);
            h.set_mode(entry.mode);
            let linked = self.links.get(path).and_then(|id| first.get(id)).copied();
            if let Some(x) = self.xattrs.get(path).filter(|_| linked.is_none_or(|to| to == path)) {
                let records: Vec<(String, &[u8])> =
                    x.iter().map(|(k, v)| (format!("SCHILY.xattr.{k}"), v.as_slice())).collect();
                tar.append_pax_extensions(records.iter().map(|(k, v)| (k.as_str(), *v)))?;
            }
            if let Some(to) = linked.filter(|to| *to != path.as_str()) {
                h.set_entry_type(tar::EntryType::Link);
                h.set_size(0);
                tar.append_link(&mut h, path, to)?;
                continue;
            }
            match &entry.kind {
                EntryKind::Dir => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_size(0);
                    tar.append_data(&mut h, format!("{path}/"), io::empty())?;
                }
                EntryKind::File(data) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(data.len() as u64);
                    tar.append_data(&mut h, path, data.as_slice())?;
                }
                EntryKind::Spooled { offset, len } => {
                    let file = self.spool_file()?;
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(*len);
                    tar.append_data(
                        &mut h,
                        path,
                        SpoolReader { file, at: *offset, end: offset + len },
                    )?;
                }
                EntryKind::Symlink(target) => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_size(0);
                    tar.append_link(&mut h, path, target)?;
                }
                EntryKind::Whiteout => {
                    let wh = match path.rsplit_once('/') {
                        Some((dir, name)) => format!("{dir}/.wh.{name}"),
                        None => format!(".wh.{path}"),
                    };
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(0);
                    tar.append_data(&mut h, wh, io::empty())?;
                }
            }
        }
        tar.into_inner()
    }

    /// Adds the entries of `tar`, a layer [`LayerContents::write_tar`] wrote in another
    /// process (the sandbox's changes), over this layer's: files (large ones spooled),
    /// directories, symlinks, hard links, whiteouts, owners, modes, `SCHILY.xattr` records, and
    /// the modification times of what is not a directory or a link to a file.
    pub fn add_tar(&mut self, r: impl Read) -> Result<()> {
        let at = Path::new("(the sandbox's changes)");
        let bad = |path: &str, reason: &str| Error::LayerConflict {
            entry: path.to_string(),
            reason: reason.to_string(),
        };
        let mut archive = tar::Archive::new(r);
        for e in archive.entries().map_err(Error::io("reading", at))? {
            let mut e = e.map_err(Error::io("reading", at))?;
            let path = e.path().map_err(Error::io("reading", at))?;
            let path = path.to_string_lossy().trim_end_matches('/').to_string();
            let h = e.header().clone();
            let num = |r: io::Result<u64>| r.map_err(Error::io("reading", at));
            let (mode, uid, gid) =
                (num(h.mode().map(u64::from))? as u32 & 0o7777, num(h.uid())?, num(h.gid())?);
            let mtime = num(h.mtime())?;
            let mut xattrs = Vec::new();
            if let Some(pax) = e.pax_extensions().map_err(Error::io("reading", at))? {
                for x in pax {
                    let x = x.map_err(Error::io("reading", at))?;
                    if let Some(name) = x.key().ok().and_then(|k| k.strip_prefix("SCHILY.xattr.")) {
                        xattrs.push((name.to_string(), x.value_bytes().to_vec()));
                    }
                }
            }
            let (dir, name) = match path.rsplit_once('/') {
                Some((d, n)) => (format!("{d}/"), n),
                None => (String::new(), path.as_str()),
            };
            if let Some(victim) = name.strip_prefix(".wh.") {
                self.add_whiteout(&format!("{dir}{victim}"))?;
                continue;
            }
            match h.entry_type() {
                tar::EntryType::Directory => {
                    self.insert(&path, Entry { kind: EntryKind::Dir, mode, uid, gid })?
                }
                tar::EntryType::Regular => {
                    let size = num(h.size())?;
                    let kind = self
                        .file_kind(&mut e, size, &mut |_| {})
                        .map_err(Error::io("reading", at))?;
                    self.insert(&path, Entry { kind, mode, uid, gid })?;
                    self.set_mtime(&path, mtime);
                }
                tar::EntryType::Symlink | tar::EntryType::Link => {
                    let target = e
                        .link_name()
                        .map_err(Error::io("reading", at))?
                        .ok_or_else(|| bad(&path, "a link without a target"))?
                        .to_string_lossy()
                        .into_owned();
                    if h.entry_type() == tar::EntryType::Link {
                        self.add_hardlink(&path, &target)?;
                    } else {
                        self.insert(
                            &path,
                            Entry { kind: EntryKind::Symlink(target), mode: 0o777, uid, gid },
                        )?;
                        self.set_mtime(&path, mtime);
                    }
                }
                _ => return Err(bad(&path, "an entry of a kind a layer of changes does not hold")),
            }
            for (n, v) in xattrs {
                self.set_xattr(&path, &n, v)?;
            }
        }
        Ok(())
    }

    /// [`Self::write_layer`], taking the blob from `kept` when a layer with the same files
    /// was compressed before, and keeping it there when not.
    pub fn write_layer_reusing(
        &self,
        dest: &Path,
        compression: LayerCompression,
        mtime: u64,
        kept: &CompressedLayers,
    ) -> Result<LayerInfo> {
        let (_, diff_id, tar_len) = self
            .write_tar(HashingWriter::new(io::sink()), mtime)
            .map_err(Error::io("writing layer", dest))?
            .finish();
        if let Some(info) = kept.reuse(&diff_id, compression, dest) {
            return Ok(info);
        }
        let info = self.write_compressed(dest, compression, mtime, tar_len, Split::Large, None)?;
        kept.keep(&info, compression, dest);
        Ok(info)
    }

    /// [`Self::write_layer`] for a layer that no later build writes alike (an rpm database
    /// records each package's install time): not kept whole, and cut into blocks at any size
    /// ([`Split::Always`]), each block's deflate taken from `kept`'s memo of blocks where an
    /// earlier layer held the same bytes there ([`crate::gzip::BlockMemo`]).
    pub fn write_layer_unalike(
        &self,
        dest: &Path,
        compression: LayerCompression,
        mtime: u64,
        kept: &CompressedLayers,
    ) -> Result<LayerInfo> {
        self.write_compressed(dest, compression, mtime, 0, Split::Always, Some(kept.blocks()))
    }

    /// Writes the compressed layer to `dest` and returns its digests; `split` says when gzip
    /// cuts it into blocks ([`crate::gzip`]).
    pub fn write_layer(
        &self,
        dest: &Path,
        compression: LayerCompression,
        mtime: u64,
        split: Split,
    ) -> Result<LayerInfo> {
        self.write_compressed(dest, compression, mtime, 0, split, None)
    }

    /// [`Self::write_layer`], knowing the tar's length (`tar_len`, 0: unknown), which decides
    /// with `split` how gzip compresses it ([`crate::gzip`]), with gzip's blocks taken from and
    /// kept in `memo` when given.
    fn write_compressed(
        &self,
        dest: &Path,
        compression: LayerCompression,
        mtime: u64,
        tar_len: u64,
        split: Split,
        memo: Option<std::sync::Arc<crate::gzip::BlockMemo>>,
    ) -> Result<LayerInfo> {
        let file = File::create(dest).map_err(Error::io("creating layer", dest))?;
        let write = || -> io::Result<(String, String, u64)> {
            let compressed = HashingWriter::new(BufWriter::new(file));
            let (compressed, diff_id) = match compression {
                LayerCompression::Gzip => {
                    // mtime 0, OS "unknown", a fixed level and fixed blocks: nothing that
                    // varies between machines, runs or numbers of cores (`gzip`).
                    let mut gz = crate::gzip::LayerGz::new(compressed, tar_len, split)?;
                    if let Some(memo) = memo {
                        gz = gz.with_memo(memo);
                    }
                    let raw = self.write_tar(HashingWriter::new(gz), mtime)?;
                    let (gz, diff_id, _) = raw.finish();
                    (gz.finish()?, diff_id)
                }
                LayerCompression::Zstd => {
                    let mut z = zstd::Encoder::new(compressed, 3)?;
                    z.include_checksum(true)?;
                    let raw = self.write_tar(HashingWriter::new(z), mtime)?;
                    let (z, diff_id, _) = raw.finish();
                    (z.finish()?, diff_id)
                }
            };
            let (mut buf, digest, size) = compressed.finish();
            buf.flush()?;
            buf.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            Ok((digest, diff_id, size))
        };
        let (digest, diff_id, size) = write().map_err(Error::io("writing layer", dest))?;
        Ok(LayerInfo { digest, diff_id, size, media_type: compression.media_type().to_string() })
    }
}

/// Compressed layers kept across builds by what they hold (their diff_id) and how they were
/// compressed, for the program that compressed them (`identity`: its version and binary; a
/// compressor of another release may write other bytes for the same tar). A build whose layer
/// holds the same files then writes the same blob without compressing it again. A kept blob is
/// the blob as written, then a trailer: its SHA-256, a magic string naming its compression, its
/// diff_id and its length. It is used only while the file is the user's own, not writable by
/// others ([`erdma_limits::kept`]), its trailer names the diff_id and compression asked for,
/// and its bytes hash as the trailer says; a damaged one is dropped. That it holds the diff_id it is
/// named by is trusted as a kept index is: the build that kept it compressed it from that tar.
/// The layers used last are kept, up to [`KEPT_LAYER_BYTES`].
pub struct CompressedLayers {
    dir: std::path::PathBuf,
    /// Bytes of whole layers kept at most ([`KEPT_LAYER_BYTES`]).
    budget: u64,
    /// The memo of blocks, one for all the layers written through this.
    blocks: std::sync::Arc<crate::gzip::BlockMemo>,
}

/// How many bytes of whole compressed layers one program keeps: those used last, and always
/// the one kept last whatever its size. A layer with NCCL is a few hundred megabytes, the
/// eRDMA packages' one megabyte.
pub const KEPT_LAYER_BYTES: u64 = 2 << 30;

impl CompressedLayers {
    pub fn new(root: &Path, identity: &str) -> CompressedLayers {
        let id = crate::blob::sha256_digest(identity.as_bytes());
        let dir = root.join("compressed").join(&id["sha256:".len()..][..16]);
        let blocks = std::sync::Arc::new(crate::gzip::BlockMemo::new(dir.join("blocks")));
        CompressedLayers { dir, budget: KEPT_LAYER_BYTES, blocks }
    }

    /// The memo of gzip blocks for layers no two builds write alike
    /// ([`LayerContents::write_layer_unalike`]), beside the kept layers of the same compressor.
    pub fn blocks(&self) -> std::sync::Arc<crate::gzip::BlockMemo> {
        self.blocks.clone()
    }

    fn path(&self, diff_id: &str, compression: LayerCompression) -> Option<std::path::PathBuf> {
        let hex = crate::blob::digest_hex(diff_id).ok()?;
        let ext = match compression {
            LayerCompression::Gzip => "gz",
            LayerCompression::Zstd => "zst",
        };
        Some(self.dir.join(format!("{hex}.{ext}")))
    }

    /// The kept blob for `diff_id` copied to `dest`, when there is one and it checks out.
    fn reuse(
        &self,
        diff_id: &str,
        compression: LayerCompression,
        dest: &Path,
    ) -> Option<LayerInfo> {
        use erdma_limits::kept::NotKept;
        let kept = self.path(diff_id, compression)?;
        let want = trailer_for(diff_id, compression)?;
        let from = match erdma_limits::kept::open(&kept, u64::MAX) {
            Ok(f) => f,
            Err(NotKept::Missing(_)) => return None,
            Err(NotKept::Untrusted | NotKept::TooLarge) => {
                tracing::warn!(
                    "ignoring kept layer {}: not the user's own, or writable by others",
                    kept.display()
                );
                return None;
            }
        };
        // What the file says of itself: Err is a damaged file, dropped.
        let checked = || -> io::Result<(u64, [u8; 32])> {
            let damaged = |why: &str| io::Error::other(why.to_string());
            let len = from.metadata()?.len();
            let blob_len =
                len.checked_sub(KEPT_TRAILER as u64).ok_or_else(|| damaged("too short"))?;
            let mut trailer = [0u8; KEPT_TRAILER];
            from.read_exact_at(&mut trailer, blob_len)?;
            let (sha256, rest) = trailer.split_at(32);
            let (what, recorded_len) = rest.split_at(want.len());
            if what != want.as_slice() {
                return Err(damaged("its trailer names another layer or compression"));
            }
            if u64::from_le_bytes(recorded_len.try_into().expect("8 bytes")) != blob_len {
                return Err(damaged("its length is not its trailer's"));
            }
            Ok((blob_len, sha256.try_into().expect("32 bytes")))
        };
        let drop_damaged = |e: io::Error| {
            tracing::warn!("dropping kept layer {}: {e}", kept.display());
            let _ = std::fs::remove_file(&kept);
        };
        let (blob_len, sha256) = checked().map_err(drop_damaged).ok()?;
        let copy = || -> io::Result<(String, u64)> {
            let mut to = HashingWriter::new(BufWriter::new(File::create(dest)?));
            io::copy(&mut (&from).take(blob_len), &mut to)?;
            let (buf, digest, size) = to.finish();
            buf.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            Ok((digest, size))
        };
        match copy() {
            Ok((digest, size))
                if size == blob_len && digest == format!("sha256:{}", hex::encode(sha256)) =>
            {
                // Used last now: the prune keeps it longest.
                let _ = from.set_modified(std::time::SystemTime::now());
                Some(LayerInfo {
                    digest,
                    diff_id: diff_id.to_string(),
                    size,
                    media_type: compression.media_type().to_string(),
                })
            }
            Ok(_) => {
                drop_damaged(io::Error::other("its SHA-256 differs from its trailer's"));
                None
            }
            // Not the kept file's fault (the output could not be written): it stays.
            Err(e) => {
                tracing::debug!("not reusing kept layer {}: {e}", kept.display());
                None
            }
        }
    }

    /// Keeps the blob at `written` (just compressed) for `info.diff_id`, with its trailer:
    /// only when the bytes kept are the ones `info` describes.
    fn keep(&self, info: &LayerInfo, compression: LayerCompression, written: &Path) {
        let Some(kept) = self.path(&info.diff_id, compression) else { return };
        let Some(what) = trailer_for(&info.diff_id, compression) else { return };
        let done = erdma_limits::kept::write(&kept, |f| {
            let mut to = HashingWriter::new(&mut *f);
            io::copy(&mut File::open(written)?, &mut to)?;
            let (_, digest, size) = to.finish();
            if digest != info.digest || size != info.size {
                return Err(io::Error::other("the blob changed before it was kept"));
            }
            let sha256 = hex::decode(&digest["sha256:".len()..]).map_err(io::Error::other)?;
            f.write_all(&sha256)?;
            f.write_all(&what)?;
            f.write_all(&size.to_le_bytes())
        });
        match done {
            Ok(()) => self.prune(&kept),
            Err(e) => tracing::debug!("not keeping layer {}: {e}", info.diff_id),
        }
    }

    /// Removes the kept layers used longest ago while they hold more than the budget; never
    /// `newest`, the one just kept.
    fn prune(&self, newest: &Path) {
        // Kept layers only: not the memo of blocks beside them, nor a file being written.
        let is_layer = |p: &Path| p.extension().is_some_and(|e| e == "gz" || e == "zst");
        let most = erdma_limits::kept::Most { files: usize::MAX, bytes: self.budget };
        erdma_limits::kept::prune(&self.dir, is_layer, most, Some(newest));
    }
}

/// What a kept compressed layer's trailer says of it after the blob's SHA-256, and before its
/// length: a magic string naming the compression, then the diff_id's 32 bytes. A blob renamed
/// to another diff_id or compression is then refused as a damaged one is. `None` for a
/// diff_id that is not a SHA-256.
fn trailer_for(diff_id: &str, compression: LayerCompression) -> Option<Vec<u8>> {
    let magic: &[u8; 16] = match compression {
        LayerCompression::Gzip => b"erdma-layer-gz-2",
        LayerCompression::Zstd => b"erdma-layer-zs-2",
    };
    let mut out = magic.to_vec();
    out.extend(hex::decode(crate::blob::digest_hex(diff_id).ok()?).ok()?);
    Some(out)
}

/// A kept compressed layer's trailer: the blob's SHA-256, [`trailer_for`]'s 48 bytes, the
/// blob's length.
const KEPT_TRAILER: usize = 32 + 48 + 8;

/// One spooled file's bytes, read in place.
struct SpoolReader<'a> {
    file: &'a File,
    at: u64,
    end: u64,
}

impl Read for SpoolReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = (self.end - self.at).min(buf.len() as u64) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.at)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "spool file shorter than written",
            ));
        }
        self.at += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What another process wrote with write_tar reads back into the same entries: the
    /// sandbox's changes come back whole.
    #[test]
    fn files_read_at_held_or_spooled() {
        let mut l = LayerContents::new();
        let small = b"\x7fELF small".to_vec();
        let big: Vec<u8> = (0..(INLINE_MAX as usize + 12_345)).map(|i| (i % 251) as u8).collect();
        for (p, data) in [("a/small", &small), ("a/big", &big), ("a/big2", &big)] {
            let kind = l.file_kind(&mut data.as_slice(), data.len() as u64, &mut |_| {}).unwrap();
            l.insert(p, Entry { kind, mode: 0o644, uid: 0, gid: 0 }).unwrap();
        }
        assert!(matches!(l.get("a/big2").unwrap().kind, EntryKind::Spooled { .. }));
        for (p, data) in [("a/small", &small), ("a/big", &big), ("a/big2", &big)] {
            assert_eq!(l.file_len(p), Some(data.len() as u64));
            let mut buf = [0u8; 7];
            for at in [0, 3, data.len() as u64 - 7] {
                assert!(l.read_file_at(p, at, &mut buf).unwrap(), "{p} {at}");
                assert_eq!(&buf[..], &data[at as usize..at as usize + 7], "{p} {at}");
            }
            assert!(!l.read_file_at(p, data.len() as u64 - 6, &mut buf).unwrap(), "{p}");
            assert!(!l.read_file_at(p, u64::MAX, &mut buf).unwrap(), "{p}");
            let mut whole = Vec::new();
            l.file_reader(p).unwrap().expect("a file").read_to_end(&mut whole).unwrap();
            assert_eq!(&whole, data, "{p}");
        }
        assert!(!l.read_file_at("a", 0, &mut [0u8; 1]).unwrap());
        assert_eq!(l.file_len("nothing"), None);
        assert!(l.file_reader("nothing").unwrap().is_none());
    }

    #[test]
    fn a_written_layer_reads_back_entry_for_entry() {
        let mut l = LayerContents::new();
        l.insert("var/lib/x", Entry { kind: EntryKind::Dir, mode: 0o2775, uid: 100, gid: 101 })
            .unwrap();
        l.insert(
            "usr/bin/ping",
            Entry { kind: EntryKind::File(b"elf".to_vec()), mode: 0o755, uid: 0, gid: 0 },
        )
        .unwrap();
        l.set_mtime("usr/bin/ping", 1_700_000_000);
        l.set_xattr("usr/bin/ping", "security.capability", vec![1, 0, 0, 2]).unwrap();
        l.add_hardlink("usr/bin/ping6", "usr/bin/ping").unwrap();
        l.add_symlink("etc/alternatives/x", "/usr/bin/ping").unwrap();
        l.set_mtime("etc/alternatives/x", 1_600_000_000);
        l.add_whiteout("etc/gone").unwrap();
        let tar = l.write_tar(Vec::new(), 7).unwrap();
        let mut back = LayerContents::new();
        back.add_tar(tar.as_slice()).unwrap();
        assert_eq!(back.write_tar(Vec::new(), 7).unwrap(), tar);
        assert_eq!(back.other_names("usr/bin/ping"), ["usr/bin/ping6"]);
        assert_eq!(back.get("var/lib/x").unwrap().mode, 0o2775);
        // Not a layer of changes: refused, not guessed at.
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Fifo);
        h.set_size(0);
        let mut b = tar::Builder::new(Vec::new());
        b.append_data(&mut h, "run/fifo", io::empty()).unwrap();
        assert!(LayerContents::new().add_tar(b.into_inner().unwrap().as_slice()).is_err());
    }

    fn sample() -> LayerContents {
        let mut l = LayerContents::new();
        l.add_file("/etc/apt/sources.list.d/erdma.list", b"deb x y z\n".to_vec(), 0o644).unwrap();
        l.add_file("etc/apt/trusted.gpg.d/erdma.asc", b"key".to_vec(), 0o644).unwrap();
        l.add_symlink("usr/lib/libx.so", "libx.so.1").unwrap();
        l.add_whiteout("etc/apt/sources.list.d/mellanox_mlnx_ofed.list").unwrap();
        l
    }

    #[test]
    fn entries_sorted_with_parents_and_fixed_metadata() {
        let tar = sample().write_tar(Vec::new(), 1234).unwrap();
        let mut a = tar::Archive::new(tar.as_slice());
        let mut names = Vec::new();
        for e in a.entries().unwrap() {
            let e = e.unwrap();
            assert_eq!(e.header().mtime().unwrap(), 1234);
            assert_eq!(e.header().uid().unwrap(), 0);
            names.push(e.path().unwrap().to_string_lossy().into_owned());
        }
        assert_eq!(
            names,
            [
                "etc/",
                "etc/apt/",
                "etc/apt/sources.list.d/",
                "etc/apt/sources.list.d/erdma.list",
                "etc/apt/sources.list.d/.wh.mellanox_mlnx_ofed.list",
                "etc/apt/trusted.gpg.d/",
                "etc/apt/trusted.gpg.d/erdma.asc",
                "usr/",
                "usr/lib/",
                "usr/lib/libx.so",
            ]
        );
    }

    #[test]
    fn same_contents_same_digest_for_both_compressions() {
        let dir = tempfile::tempdir().unwrap();
        for c in [LayerCompression::Gzip, LayerCompression::Zstd] {
            let a = sample().write_layer(&dir.path().join("a"), c, 0, Split::Large).unwrap();
            let b = sample().write_layer(&dir.path().join("b"), c, 0, Split::Large).unwrap();
            assert_eq!(a.digest, b.digest);
            assert_eq!(
                std::fs::read(dir.path().join("a")).unwrap(),
                std::fs::read(dir.path().join("b")).unwrap()
            );
            // The diff_id is the digest of the uncompressed tar.
            let f = std::io::BufReader::new(File::open(dir.path().join("a")).unwrap());
            let mut raw = Vec::new();
            crate::blob::decompressed(f, 0).unwrap().read_to_end(&mut raw).unwrap();
            assert_eq!(crate::blob::sha256_digest(&raw), a.diff_id);
            assert_eq!(a.size, std::fs::metadata(dir.path().join("a")).unwrap().len());
        }
    }

    #[test]
    fn a_kept_compressed_layer_is_the_blob_compressing_writes() {
        let dir = tempfile::tempdir().unwrap();
        let kept = CompressedLayers::new(dir.path(), "erdma-build 1.0 (test)");
        for c in [LayerCompression::Gzip, LayerCompression::Zstd] {
            let fresh =
                sample().write_layer(&dir.path().join("fresh"), c, 0, Split::Large).unwrap();
            let first = sample().write_layer_reusing(&dir.path().join("a"), c, 0, &kept).unwrap();
            let blob = kept.path(&fresh.diff_id, c).unwrap();
            assert!(blob.is_file());
            let again = sample().write_layer_reusing(&dir.path().join("b"), c, 0, &kept).unwrap();
            for info in [&first, &again] {
                assert_eq!(
                    (&info.digest, &info.diff_id, info.size, &info.media_type),
                    (&fresh.digest, &fresh.diff_id, fresh.size, &fresh.media_type)
                );
            }
            let bytes = std::fs::read(dir.path().join("fresh")).unwrap();
            assert_eq!(std::fs::read(dir.path().join("b")).unwrap(), bytes);
            let kept_bytes = std::fs::read(&blob).unwrap();
            assert_eq!(&kept_bytes[..bytes.len()], bytes, "the blob, then its trailer");
            // A kept blob without this release's trailer (an earlier release's, a layer
            // written there) is dropped, and the layer compressed and kept again.
            let mut other = LayerContents::new();
            other.add_file("etc/other", b"x".to_vec(), 0o644).unwrap();
            other.write_layer(&blob, c, 0, Split::Large).unwrap();
            let third = sample().write_layer_reusing(&dir.path().join("c"), c, 0, &kept).unwrap();
            assert_eq!(third.digest, fresh.digest);
            assert_eq!(std::fs::read(dir.path().join("c")).unwrap(), bytes);
            assert_eq!(std::fs::read(&blob).unwrap(), kept_bytes, "kept again, good this time");
            // Damaged, each way: dropped, the layer compressed and kept again. One byte of the
            // blob changed (its SHA-256 is not the trailer's); the last byte gone; the length
            // the trailer records changed; another layer's kept file under this one's name
            // (the trailer's diff_id).
            let mut changed = kept_bytes.clone();
            changed[bytes.len() / 2] ^= 1;
            let short = kept_bytes[..kept_bytes.len() - 1].to_vec();
            let mut misread = kept_bytes.clone();
            let at = misread.len() - 8;
            misread[at] ^= 1;
            let mut other_sample = sample();
            other_sample.add_file("etc/more", b"y".to_vec(), 0o644).unwrap();
            let o = other_sample.write_layer_reusing(&dir.path().join("o"), c, 0, &kept).unwrap();
            let renamed = std::fs::read(kept.path(&o.diff_id, c).unwrap()).unwrap();
            for damaged in [changed, short, misread, renamed] {
                erdma_limits::kept::write(&blob, |f| f.write_all(&damaged)).unwrap();
                let d = sample().write_layer_reusing(&dir.path().join("d"), c, 0, &kept).unwrap();
                assert_eq!(d.digest, fresh.digest);
                assert_eq!(std::fs::read(dir.path().join("d")).unwrap(), bytes);
                assert_eq!(std::fs::read(&blob).unwrap(), kept_bytes, "kept again");
            }
            // A good blob that others may write is not used: the layer is compressed and kept
            // again, the user's alone.
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            std::fs::set_permissions(&blob, std::fs::Permissions::from_mode(0o666)).unwrap();
            let fifth = sample().write_layer_reusing(&dir.path().join("e"), c, 0, &kept).unwrap();
            assert_eq!(fifth.digest, fresh.digest);
            assert_eq!(std::fs::read(dir.path().join("e")).unwrap(), bytes);
            assert_eq!(mode(&blob), 0o600, "compressed and kept again");
            // And the user's own is used as it is (nothing written over it).
            std::fs::set_permissions(&blob, std::fs::Permissions::from_mode(0o400)).unwrap();
            let sixth = sample().write_layer_reusing(&dir.path().join("f"), c, 0, &kept).unwrap();
            assert_eq!(sixth.digest, fresh.digest);
            assert_eq!(mode(&blob), 0o400, "used, not kept again");
            std::fs::remove_file(&blob).unwrap();
            // Another program's blobs are elsewhere.
            let newer = CompressedLayers::new(dir.path(), "erdma-build 1.1 (test)");
            assert_ne!(newer.path(&fresh.diff_id, c), kept.path(&fresh.diff_id, c));
        }
        // The same layer's zstd blob under its gzip name: the trailer names the compression.
        let diff_id = sample()
            .write_layer_reusing(&dir.path().join("z"), LayerCompression::Zstd, 0, &kept)
            .unwrap()
            .diff_id;
        let zst = std::fs::read(kept.path(&diff_id, LayerCompression::Zstd).unwrap()).unwrap();
        let gz = kept.path(&diff_id, LayerCompression::Gzip).unwrap();
        erdma_limits::kept::write(&gz, |f| f.write_all(&zst)).unwrap();
        let g = sample()
            .write_layer_reusing(&dir.path().join("g"), LayerCompression::Gzip, 0, &kept)
            .unwrap();
        assert_eq!(g.media_type, LayerCompression::Gzip.media_type());
        assert_ne!(std::fs::read(&gz).unwrap(), zst, "dropped, and the gzip blob kept there");
        let raw = crate::blob::decompressed(
            io::BufReader::new(std::fs::File::open(dir.path().join("g")).unwrap()),
            0,
        );
        let mut tar = Vec::new();
        raw.unwrap().read_to_end(&mut tar).unwrap();
        assert_eq!(crate::blob::sha256_digest(&tar), diff_id);
    }

    /// Kept layers are pruned to their budget, those used longest ago first; one just used
    /// counts as new, and the one just kept stays whatever its size.
    #[test]
    fn kept_layers_are_pruned_to_their_budget_used_last_kept_longest() {
        let dir = tempfile::tempdir().unwrap();
        let mut kept = CompressedLayers::new(dir.path(), "erdma-build 1.0 (test)");
        let c = LayerCompression::Gzip;
        let layer = |name: &str| {
            let mut l = sample();
            l.add_file(&format!("etc/{name}"), name.as_bytes().to_vec(), 0o644).unwrap();
            l
        };
        let path = |name: &str, kept: &CompressedLayers| {
            let info = layer(name).write_layer_reusing(&dir.path().join(name), c, 0, kept);
            kept.path(&info.unwrap().diff_id, c).unwrap()
        };
        let (a, b) = (path("a", &kept), path("b", &kept));
        let len = |p: &Path| std::fs::metadata(p).unwrap().len();
        let set_used = |p: &Path, secs: u64| {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1 << 20 | secs);
            File::options().write(true).open(p).unwrap().set_modified(at).unwrap();
        };
        set_used(&a, 1);
        set_used(&b, 2);
        // `a` used again: newer than `b` now. Room for two: `b` goes when `c` comes.
        kept.budget = len(&a) + len(&b);
        layer("a").write_layer_reusing(&dir.path().join("a2"), c, 0, &kept).unwrap();
        let read = |name: &str| std::fs::read(dir.path().join(name)).unwrap();
        assert_eq!(read("a2"), read("a"));
        let cc = path("c", &kept);
        assert!(a.is_file() && cc.is_file(), "used last, and kept last");
        assert!(!b.exists(), "used longest ago");
        // No room at all: the one just kept stays, alone; the memo of blocks is not a layer.
        std::fs::create_dir_all(kept.dir.join("blocks")).unwrap();
        kept.budget = 0;
        let d = path("d", &kept);
        assert!(d.is_file() && !a.exists() && !cc.exists());
        assert!(kept.dir.join("blocks").is_dir());
    }

    /// A layer no two builds write alike is not kept whole; its gzip blocks are, beside the
    /// kept layers of the same program, and a later layer with the same bytes gets the same
    /// blob as compressing gives.
    #[test]
    fn an_unalike_layer_keeps_its_blocks_not_itself() {
        let dir = tempfile::tempdir().unwrap();
        let kept = CompressedLayers::new(dir.path(), "erdma-build 1.0 (test)");
        let c = LayerCompression::Gzip;
        let fresh = sample().write_layer(&dir.path().join("fresh"), c, 0, Split::Always).unwrap();
        let first = sample().write_layer_unalike(&dir.path().join("a"), c, 0, &kept).unwrap();
        let again = sample().write_layer_unalike(&dir.path().join("b"), c, 0, &kept).unwrap();
        assert_eq!((&first.digest, &first.diff_id), (&fresh.digest, &fresh.diff_id));
        assert_eq!((&again.digest, &again.diff_id), (&fresh.digest, &fresh.diff_id));
        let bytes = std::fs::read(dir.path().join("fresh")).unwrap();
        assert_eq!(std::fs::read(dir.path().join("b")).unwrap(), bytes);
        assert!(!kept.path(&fresh.diff_id, c).unwrap().exists(), "not kept whole");
        let blocks = std::fs::read_dir(kept.dir.join("blocks")).unwrap().count();
        assert_eq!(blocks, 1, "the sample's one block");
        // Zstd: no blocks, the same blob as compressing gives.
        let z = LayerCompression::Zstd;
        let zf = sample().write_layer(&dir.path().join("zf"), z, 0, Split::Always).unwrap();
        let za = sample().write_layer_unalike(&dir.path().join("za"), z, 0, &kept).unwrap();
        assert_eq!(za.digest, zf.digest);
    }

    #[test]
    fn large_files_are_spooled_and_written_the_same_as_held_ones() {
        let big: Vec<u8> =
            (0..(INLINE_MAX as usize * 3 + 17)).map(|i| (i * 7 % 253) as u8).collect();
        let mut seen = 0usize;
        let mut spooled = LayerContents::new();
        let kind = spooled
            .file_kind(&mut big.as_slice(), big.len() as u64, &mut |c| seen += c.len())
            .unwrap();
        assert!(matches!(kind, EntryKind::Spooled { offset: 0, .. }), "{kind:?}");
        assert_eq!(seen, big.len());
        spooled
            .insert("usr/lib/big.so", Entry { kind: kind.clone(), mode: 0o644, uid: 0, gid: 0 })
            .unwrap();
        // A hard link's copy shares the spooled bytes.
        spooled.insert("usr/lib/big-link.so", Entry { kind, mode: 0o644, uid: 0, gid: 0 }).unwrap();
        let mut held = LayerContents::new();
        held.add_file("usr/lib/big.so", big.clone(), 0o644).unwrap();
        held.add_file("usr/lib/big-link.so", big.clone(), 0o644).unwrap();
        assert_eq!(
            spooled.write_tar(Vec::new(), 0).unwrap(),
            held.write_tar(Vec::new(), 0).unwrap()
        );
        // Small files stay in memory; a short or long source is an error.
        let mut l = LayerContents::new();
        assert_eq!(
            l.file_kind(&mut &b"abc"[..], 3, &mut |_| {}).unwrap(),
            EntryKind::File(b"abc".to_vec())
        );
        assert!(l.file_kind(&mut &b"ab"[..], 3, &mut |_| {}).is_err());
        assert!(l.file_kind(&mut &b"abcd"[..], 3, &mut |_| {}).is_err());
        assert!(l.file_kind(&mut &big[..10], big.len() as u64, &mut |_| {}).is_err());
    }

    #[test]
    fn rejects_escaping_paths() {
        assert!(LayerContents::new().add_file("../etc/passwd", vec![], 0o644).is_err());
        assert_eq!(normalize("/./a//b/"), Some("a/b".into()));
        assert_eq!(normalize("/"), None);
    }

    /// Nothing goes under a symlink, file or whiteout of the same layer, and a directory with
    /// entries stays one: an extractor would otherwise write through the link.
    #[test]
    fn entries_never_lie_under_a_non_directory() {
        let mut l = LayerContents::new();
        l.add_symlink("usr/lib", "/tmp").unwrap();
        let e = l.add_file("usr/lib/x", vec![], 0o644).unwrap_err().to_string();
        assert_eq!(
            e,
            "layer entry `usr/lib/x` would lie under `usr/lib`, which the layer holds as a symlink"
        );
        assert!(!l.entries.contains_key("usr/lib/x"));
        l.add_file("etc/f", vec![], 0o644).unwrap();
        assert!(l.add_dir("etc/f/d", 0o755).is_err());
        l.add_whiteout("opt/gone").unwrap();
        assert!(l.add_file("opt/gone/x", vec![], 0o644).is_err());
        let e = l.add_symlink("etc", "/").unwrap_err().to_string();
        assert_eq!(e, "layer entry `etc` would replace a directory that holds `etc/f`");
        // Replacing a file, a symlink or an empty directory is fine.
        l.add_symlink("etc/f", "g").unwrap();
        l.add_dir("srv", 0o755).unwrap();
        l.add_file("srv", vec![], 0o644).unwrap();
        l.add_file("usr/lib", vec![], 0o644).unwrap();
    }

    /// A file with several names is written once, under its first name in path order, and
    /// linked under the others; chmod and chown change every name; a name replaced by a new
    /// file leaves the group, and the remaining names still share the old bytes.
    #[test]
    fn hard_links_are_one_file_under_several_names() {
        let names = |l: &LayerContents| -> Vec<(String, Option<String>, u32)> {
            let tar = l.write_tar(Vec::new(), 0).unwrap();
            let mut a = tar::Archive::new(tar.as_slice());
            a.entries()
                .unwrap()
                .map(|e| {
                    let e = e.unwrap();
                    let link =
                        e.header().entry_type().is_hard_link().then(|| {
                            e.link_name().unwrap().unwrap().to_string_lossy().into_owned()
                        });
                    (
                        e.path().unwrap().to_string_lossy().into_owned(),
                        link,
                        e.header().mode().unwrap(),
                    )
                })
                .filter(|(p, _, _)| !p.ends_with('/'))
                .collect()
        };
        let mut l = LayerContents::new();
        l.add_file("usr/bin/z", b"bytes".to_vec(), 0o755).unwrap();
        l.add_hardlink("usr/bin/a", "usr/bin/z").unwrap();
        l.add_hardlink("usr/bin/m", "usr/bin/a").unwrap();
        assert!(l.add_hardlink("usr/bin/q", "usr/bin/none").is_err());
        l.set_owner_mode("usr/bin/m", 0o2755, 0, 42).unwrap();
        assert_eq!(l.get("usr/bin/z").unwrap().gid, 42);
        assert_eq!(l.other_names("usr/bin/z"), ["usr/bin/a", "usr/bin/m"]);
        assert_eq!(
            names(&l),
            [
                ("usr/bin/a".into(), None, 0o2755),
                ("usr/bin/m".into(), Some("usr/bin/a".into()), 0o2755),
                ("usr/bin/z".into(), Some("usr/bin/a".into()), 0o2755),
            ]
        );
        l.add_file("usr/bin/a", b"new".to_vec(), 0o644).unwrap();
        assert_eq!(
            names(&l),
            [
                ("usr/bin/a".into(), None, 0o644),
                ("usr/bin/m".into(), None, 0o2755),
                ("usr/bin/z".into(), Some("usr/bin/m".into()), 0o2755),
            ]
        );
        assert_eq!(l.get("usr/bin/m").unwrap().kind, EntryKind::File(b"bytes".to_vec()));
    }
}
