//! Files of a source image as a container would see them, read layer by layer from any
//! transport without unpacking the image: what `build`, `check` and `inspect` ask of a base.
use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::rootfs::{SnapEntry, Snapshot};
use crate::source::{Source, SourceImage};
use erdma_common::progress::{Counters, Reporter, Transfer};

/// The version of the cached layer snapshots' contents: raised whenever a snapshot keeps more
/// (a file newly of interest), so that older ones are read again instead of answering
/// without it.
const SNAPSHOT_FORMAT: u32 = 5;

/// The largest cached snapshot read: one at the default entry limit, with its kept content
/// ([`crate::rootfs::KEEP_TOTAL`]), is well under it.
const SNAPSHOT_MAX: u64 = 1 << 30;

/// Source layers fetched for reading whole (a snapshot of their files, the sandbox's root):
/// kept across builds in the user's cache by digest (`blobs/sha256/HEX` under [`cache_dir`]),
/// each checked against its digest again before it is used (by reading it, or by the check an
/// earlier build kept while the file is unchanged: [`crate::blob::check_file`]), so a
/// warm build downloads no layer it has read before. The directory may be removed at any
/// time. Where it cannot be written, layers are kept for the build's duration only.
pub struct LayerCache {
    dir: PathBuf,
    files: Mutex<HashMap<String, PathBuf>>,
}

impl LayerCache {
    /// A cache of this build's layers in `dir`, beside the user's cache: the layers kept there
    /// and the checks of those against their digests ([`crate::blob::remember_checks_in`],
    /// `checked/` under [`cache_dir`]).
    pub fn new(dir: &Path) -> LayerCache {
        crate::blob::remember_checks_in(cache_dir().join("checked"));
        LayerCache { dir: dir.to_path_buf(), files: Mutex::new(HashMap::new()) }
    }

    async fn path(
        &self,
        src: &Source,
        digest: &str,
        size: u64,
        reporter: &Arc<dyn Reporter>,
        counters: &Counters,
    ) -> Result<PathBuf> {
        if let Some(p) = self.files.lock().expect("poisoned").get(digest) {
            return Ok(p.clone());
        }
        let hex = crate::blob::digest_hex(digest)?;
        let kept = kept_blob(digest)?;
        let kept_dir = kept.parent().expect("under the cache").to_path_buf();
        if kept.is_file() {
            let check = kept.clone();
            let digest_owned = digest.to_string();
            let good = tokio::task::spawn_blocking(move || {
                std::fs::File::open(&check)
                    .is_ok_and(|f| crate::blob::check_file(&f, &digest_owned).is_ok())
            })
            .await
            .unwrap_or(false);
            if good {
                self.files.lock().expect("poisoned").insert(digest.to_string(), kept.clone());
                return Ok(kept);
            }
            let _ = std::fs::remove_file(&kept);
        }
        // Written beside where it is kept, and put there whole once verified.
        let partial_in = |dir: &Path| {
            std::fs::create_dir_all(dir)
                .and_then(|()| tempfile::Builder::new().prefix(".partial-").tempfile_in(dir))
                .map(|f| f.into_temp_path())
        };
        let (partial, path) = match partial_in(&kept_dir) {
            Ok(p) => (p, kept),
            Err(_) => (
                partial_in(&self.dir).map_err(Error::io("writing in", &self.dir))?,
                self.dir.join(hex),
            ),
        };
        let id = format!("↓{}", &digest[7..19]);
        crate::blob::with_restarts(digest, || async {
            reporter.transfer_start(&id, Transfer::Download, Some(size));
            let mut stream = src.blob_stream(digest, size).await?;
            let mut f =
                tokio::fs::File::create(&partial).await.map_err(Error::io("writing", &partial))?;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| {
                    crate::source::stream_error(e, src.registry_ref().expect("remote"))
                })?;
                counters.add(Transfer::Download, chunk.len() as u64);
                reporter.transfer_progress(&id, chunk.len() as u64);
                tokio::io::AsyncWriteExt::write_all(&mut f, &chunk)
                    .await
                    .map_err(Error::io("writing", &partial))?;
            }
            // tokio's File finishes writes in the background: flush before anyone reads it.
            tokio::io::AsyncWriteExt::flush(&mut f)
                .await
                .map_err(Error::io("writing", &partial))?;
            reporter.transfer_done(&id);
            Ok(())
        })
        .await?;
        // The stream was verified against the digest as it ended.
        partial.persist(&path).map_err(|e| Error::io("keeping", &path)(e.error))?;
        self.files.lock().expect("poisoned").insert(digest.to_string(), path.clone());
        Ok(path)
    }
}

/// Where a base layer read whole is kept across builds ([`LayerCache`]): unverified, as any
/// file there; whoever uses it checks it against `digest` first
/// ([`crate::blob::check_file`]).
pub fn kept_blob(digest: &str) -> Result<PathBuf> {
    Ok(cache_dir().join("blobs").join("sha256").join(crate::blob::digest_hex(digest)?))
}

/// Files of a base image, read as a container would see them: what the package backends read
/// (package databases, sources, keys, rpm's macros) without knowing where the image comes from.
pub trait BaseFiles: Sync {
    fn read(&self, path: &str, max: u64) -> Result<Option<Vec<u8>>>;
    fn list(&self, dir: &str) -> Result<Vec<String>>;
    /// `path` with the symlinks in its directories resolved inside the image.
    fn real_path(&self, path: &str) -> Result<Option<String>>;
    /// What the image has at `path` (not following a final symlink).
    fn kind(&self, path: &str) -> Result<Option<SnapEntry>>;
    /// The image's layers, bottom first, as (digest, compressed size): what assembling the
    /// whole root reads. Empty where the files do not come from layers.
    fn layers(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
    /// Layer `i` of [`Self::layers`] as an uncompressed tar stream (decompression bombs
    /// refused as everywhere else).
    fn layer_tar(&self, i: usize) -> Result<Box<dyn std::io::Read + '_>> {
        Err(Error::NoLayer { index: i })
    }
}

impl BaseFiles for ImageFiles<'_> {
    fn read(&self, path: &str, max: u64) -> Result<Option<Vec<u8>>> {
        ImageFiles::read(self, path, max)
    }
    fn list(&self, dir: &str) -> Result<Vec<String>> {
        ImageFiles::list(self, dir)
    }
    fn real_path(&self, path: &str) -> Result<Option<String>> {
        ImageFiles::real_path(self, path, false)
    }
    fn kind(&self, path: &str) -> Result<Option<SnapEntry>> {
        self.entry(path)
    }
    fn layers(&self) -> Vec<(String, u64)> {
        self.layers.iter().rev().cloned().collect()
    }
    fn layer_tar(&self, i: usize) -> Result<Box<dyn std::io::Read + '_>> {
        // `self.layers` is top first.
        let top = self.layers.len().checked_sub(i + 1).ok_or(Error::NoLayer { index: i })?;
        let raw = self.open(top)?;
        crate::blob::decompressed(raw, self.src.limits.inflation)
            .map_err(|e| self.layer_error(top, e))
    }
}

/// Files of one source image as a container would see them (topmost layer wins, whiteouts
/// honoured, symlinks resolved inside the image). Layers are read once each, top down, and
/// only as far down as a question needs.
pub struct ImageFiles<'a> {
    src: &'a Source,
    layers: Vec<(String, u64)>,
    cache: &'a LayerCache,
    pub reporter: &'a Arc<dyn Reporter>,
    counters: &'a Counters,
    handle: tokio::runtime::Handle,
    snapshots: Vec<std::sync::OnceLock<Snapshot>>,
    /// What the snapshots may hold in all (`--max-entries`).
    budget: crate::rootfs::Budget,
    /// Handed each kept file of a layer as it is read ([`ImageFiles::watching`]).
    watch: Option<Watch<'a>>,
}

/// A watcher of the files a layer's read keeps: path and content.
pub type Watch<'a> = &'a (dyn Fn(&str, &[u8]) + Sync);

impl<'a> ImageFiles<'a> {
    pub fn new(
        src: &'a Source,
        img: &SourceImage,
        cache: &'a LayerCache,
        reporter: &'a Arc<dyn Reporter>,
        counters: &'a Counters,
    ) -> Self {
        let layers: Vec<(String, u64)> =
            img.layers.iter().rev().map(|(d, s, _)| (d.clone(), *s)).collect();
        let snapshots = layers.iter().map(|_| std::sync::OnceLock::new()).collect();
        let budget = crate::rootfs::Budget::new(&src.limits);
        ImageFiles {
            src,
            layers,
            cache,
            reporter,
            counters,
            handle: tokio::runtime::Handle::current(),
            snapshots,
            budget,
            watch: None,
        }
    }

    /// Hands `watch` each kept file (its path and content) of the layers read from now on, as
    /// their streams pass it: to start work that needs a few files early (fetching the
    /// repositories the base's apt sources name while the rest of the layer is read). A
    /// layer whose snapshot is cached is not read, so not watched.
    pub fn watching(mut self, watch: Watch<'a>) -> Self {
        self.watch = Some(watch);
        self
    }

    fn open(&self, i: usize) -> Result<Box<dyn BufRead>> {
        let (digest, size) = &self.layers[i];
        if self.src.is_remote() {
            // Registry blobs were verified while downloading.
            let p = tokio::task::block_in_place(|| {
                self.handle.block_on(self.cache.path(
                    self.src,
                    digest,
                    *size,
                    self.reporter,
                    self.counters,
                ))
            })?;
            let f = std::fs::File::open(&p).map_err(Error::io("reading", &p))?;
            Ok(Box::new(std::io::BufReader::new(f)))
        } else {
            Ok(Box::new(self.src.blob_reader(digest)?))
        }
    }

    fn snapshot(&self, i: usize) -> Result<&Snapshot> {
        if let Some(s) = self.snapshots[i].get() {
            return Ok(s);
        }
        // Snapshots are cached by the layer's digest (content-addressed, so a cached one is
        // the same answer): a rebuild on the same base downloads no base layer at all. Read
        // only where the user alone may write it, as every kept file is.
        let hex = crate::blob::digest_hex(&self.layers[i].0).ok();
        let cached = hex
            .as_ref()
            .map(|h| cache_dir().join("layers").join(format!("{h}.snapshot-{SNAPSHOT_FORMAT}")));
        if let Some(mut snap) = cached
            .as_ref()
            .and_then(|p| erdma_limits::kept::read(p, SNAPSHOT_MAX).ok())
            .and_then(|b| Snapshot::decode(&b))
        {
            snap.charge(&self.budget).map_err(|exceeded| Error::Limit {
                what: format!("the base {}", self.src.reference),
                exceeded,
            })?;
            return Ok(self.snapshots[i].get_or_init(|| snap));
        }
        let snap = tokio::task::block_in_place(|| {
            let mut watch = |path: &str, data: &[u8]| {
                if let Some(w) = self.watch {
                    w(path, data);
                }
            };
            Snapshot::read_watching(
                &mut *self.open(i)?,
                self.src.limits.inflation,
                &self.budget,
                &mut watch,
            )
            .map_err(|e| self.layer_error(i, e))
        })?;
        let bytes = snap.encode().filter(|b| b.len() as u64 <= SNAPSHOT_MAX);
        if let (Some(p), Some(h), Some(bytes)) = (cached, hex, bytes) {
            // Best effort: a cache that cannot be written only costs a read later. The
            // layer's files of earlier formats go.
            if erdma_limits::kept::write(&p, |f| std::io::Write::write_all(f, &bytes)).is_ok() {
                for n in 1..SNAPSHOT_FORMAT {
                    for name in [format!("{h}.snapshot-{n}"), format!("{h}.snapshot-{n}.json")] {
                        let _ = std::fs::remove_file(p.with_file_name(name));
                    }
                }
            }
        }
        Ok(self.snapshots[i].get_or_init(|| snap))
    }

    /// A layer that could not be read: a limit reached, a digest mismatch, or a bad tar.
    fn layer_error(&self, i: usize, e: std::io::Error) -> Error {
        let (digest, _) = &self.layers[i];
        match erdma_limits::exceeded(&e) {
            Some(exceeded @ erdma_limits::Exceeded::Entries { .. }) => Error::Limit {
                what: format!("the base {}", self.src.reference),
                exceeded: exceeded.clone(),
            },
            Some(exceeded) => Error::Limit {
                what: format!("layer {digest} of {}", self.src.reference),
                exceeded: exceeded.clone(),
            },
            None => crate::blob::digest_error(&e).unwrap_or_else(|| Error::Corrupt {
                what: "layer",
                reference: format!("{digest} of {}", self.src.reference),
                source: e,
            }),
        }
    }

    /// What the image has at `path` (not following a final symlink).
    pub fn entry(&self, path: &str) -> Result<Option<SnapEntry>> {
        Ok(crate::rootfs::lookup((0..self.layers.len()).map(|i| self.snapshot(i)), path)?.cloned())
    }

    /// `path` with every symlink in it resolved inside the image (the last one too when `last`).
    pub fn real_path(&self, path: &str, last: bool) -> Result<Option<String>> {
        crate::rootfs::resolve_in_image(path, last, &mut |p| self.entry(p))
            .map_err(|e| self.name_image(e))
    }

    /// A limit reached at a path of the image: name the image too.
    fn name_image(&self, e: Error) -> Error {
        match e {
            Error::Limit { what, exceeded } if what.starts_with('/') => {
                Error::Limit { what: format!("{what} in {}", self.src.reference), exceeded }
            }
            other => other,
        }
    }

    /// What the image has at `path`, symlinks followed.
    pub fn kind(&self, path: &str) -> Result<Option<SnapEntry>> {
        match self.real_path(path, true)? {
            Some(real) => self.entry(&real),
            None => Ok(None),
        }
    }

    /// Streams the file at `path` through `content` (for files too big to hold).
    pub fn scan(
        &self,
        path: &str,
        content: &mut crate::rootfs::ContentFn<'_>,
    ) -> Result<Option<Vec<u8>>> {
        let Some(real) = self.real_path(path, true)? else { return Ok(None) };
        match self.entry(&real)? {
            Some(SnapEntry::File(_)) => tokio::task::block_in_place(|| {
                tracing::debug!("streaming /{real} from the layers");
                crate::rootfs::read_file_with(
                    self.layers.len(),
                    &mut |i| self.open(i),
                    &real,
                    self.src.limits.inflation,
                    content,
                )
            })
            .map_err(|e| self.name_image(e)),
            _ => Ok(None),
        }
    }

    pub fn read(&self, path: &str, max: u64) -> Result<Option<Vec<u8>>> {
        let Some(real) = self.real_path(path, true)? else { return Ok(None) };
        match self.entry(&real)? {
            Some(SnapEntry::File(Some(data))) if data.len() as u64 <= max => Ok(Some(data)),
            // Content the snapshot did not keep: one streaming pass for it.
            Some(SnapEntry::File(_)) => tokio::task::block_in_place(|| {
                tracing::debug!("reading /{real} from the layers: the snapshot did not keep it");
                crate::rootfs::read_file_bounded(
                    self.layers.len(),
                    &mut |i| self.open(i),
                    &real,
                    max,
                    self.src.limits.inflation,
                )
            })
            .map_err(|e| self.name_image(e)),
            _ => Ok(None),
        }
    }

    /// Files and symlinks in `dir`.
    pub fn list(&self, dir: &str) -> Result<Vec<String>> {
        self.list_entries(dir, false)
    }

    /// Everything in `dir`, directories too.
    pub fn list_all(&self, dir: &str) -> Result<Vec<String>> {
        self.list_entries(dir, true)
    }

    fn list_entries(&self, dir: &str, dirs: bool) -> Result<Vec<String>> {
        let Some(real) = self.real_path(dir, true)? else { return Ok(Vec::new()) };
        let mut seen: BTreeMap<String, bool> = BTreeMap::new();
        for i in 0..self.layers.len() {
            let (children, hidden) = self.snapshot(i)?.children(&real, dirs);
            for (name, visible) in children {
                seen.entry(name).or_insert(visible);
            }
            if hidden {
                break;
            }
        }
        Ok(seen.into_iter().filter(|(_, v)| *v).map(|(n, _)| n).collect())
    }
}

/// Debian's name for the image's architecture.
pub fn debian_arch(img: &SourceImage) -> String {
    let arch = img.config.get("architecture").and_then(Value::as_str).unwrap_or("amd64");
    let variant = img.config.get("variant").and_then(Value::as_str);
    match (arch, variant) {
        ("arm", Some("v5")) => "armel",
        ("arm", _) => "armhf",
        ("386", _) => "i386",
        ("ppc64le", _) => "ppc64el",
        (a, _) => a,
    }
    .to_string()
}

/// `$XDG_CACHE_HOME/erdma-build` (`$HOME/.cache/erdma-build`): packages, indices and layer
/// snapshots. Without either variable, a directory of the user's own in the temporary
/// directory (`private_cache_dir`).
pub fn cache_dir() -> PathBuf {
    static PRIVATE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    match std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
    {
        Some(base) => base.join("erdma-build"),
        None => PRIVATE.get_or_init(|| private_cache_dir(&std::env::temp_dir())).clone(),
    }
}

/// `erdma-build-UID` in `tmp`, made with mode 0700 where missing and taken only while it is a
/// directory (not a link) that the user owns and no one else may enter. The temporary
/// directory is everyone's: one made there first by someone else, or left open to others,
/// could be read and written by them (they could remove what the cache keeps, or plant
/// links). Then `erdma-build-UID-1` to `-8` are tried alike, and the process says which it
/// took. Where none will do, or `tmp` itself lets others move what is in it (writable by
/// others without the sticky bit, or someone else's), a path under `/dev/null`, where
/// nothing can be made: a build that needs its cache then stops, naming it, and this says why.
fn private_cache_dir(tmp: &Path) -> PathBuf {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let uid = rustix::process::geteuid().as_raw();
    let first = tmp.join(format!("erdma-build-{uid}"));
    let tmp_holds = std::fs::metadata(tmp).is_ok_and(|m| {
        m.is_dir()
            && (m.uid() == uid || m.uid() == 0)
            && (m.mode() & 0o022 == 0 || m.mode() & 0o1000 != 0)
    });
    let ours = |dir: &Path| {
        let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
        std::fs::symlink_metadata(dir)
            .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
    };
    if tmp_holds {
        if ours(&first) {
            return first;
        }
        for n in 1..=8 {
            let dir = tmp.join(format!("erdma-build-{uid}-{n}"));
            if ours(&dir) {
                tracing::warn!(
                    "{} is not a private directory of yours: the cache is {} (set XDG_CACHE_HOME to choose one)",
                    first.display(),
                    dir.display()
                );
                return dir;
            }
        }
    }
    tracing::warn!(
        "no private directory for the cache in {} (set XDG_CACHE_HOME to choose one)",
        tmp.display()
    );
    PathBuf::from("/dev/null/erdma-build")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// Without `XDG_CACHE_HOME` and `HOME`: `erdma-build-UID`, made private, and kept while it
    /// is the user's alone; one that others may enter, a link in its place, or one someone
    /// else owns gives way to `-1` and on, checked alike; none at all, or a temporary
    /// directory that lets others move what is in it, gives a path where nothing can be made.
    #[test]
    fn the_cache_in_the_temporary_directory_is_the_users_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let uid = rustix::process::geteuid().as_raw();
        let named = |n: &str| tmp.path().join(format!("erdma-build-{uid}{n}"));
        let first = private_cache_dir(tmp.path());
        assert_eq!(first, named(""));
        let m = std::fs::symlink_metadata(&first).unwrap();
        assert!(m.is_dir() && m.mode() & 0o777 == 0o700, "{:o}", m.mode());
        assert_eq!(private_cache_dir(tmp.path()), named(""), "kept while it is private");
        std::fs::set_permissions(named(""), std::fs::Permissions::from_mode(0o710)).unwrap();
        assert_eq!(private_cache_dir(tmp.path()), named("-1"), "open to others");
        assert_eq!(private_cache_dir(tmp.path()), named("-1"), "the same one next time");
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::remove_dir(named("-1")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, named("-1")).unwrap();
        assert_eq!(private_cache_dir(tmp.path()), named("-2"), "a link");
        if uid == 0 && std::os::unix::fs::chown(named("-2"), Some(1), Some(1)).is_ok() {
            assert_eq!(private_cache_dir(tmp.path()), named("-3"), "someone else's");
        }
        for n in 1..=8 {
            let p = named(&format!("-{n}"));
            let _ = std::fs::remove_file(&p);
            let _ = std::fs::remove_dir(&p);
            std::fs::write(&p, b"").unwrap();
        }
        let nowhere = private_cache_dir(tmp.path());
        assert!(std::fs::create_dir_all(nowhere.join("debs")).is_err(), "{}", nowhere.display());
        // A temporary directory others may write, without the sticky bit.
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(std::fs::create_dir_all(private_cache_dir(&open).join("debs")).is_err());
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(private_cache_dir(&open), open.join(format!("erdma-build-{uid}")));
    }
}
