//! `ldconfig` after an install, without running it: the image's `/etc/ld.so.cache` rewritten
//! as its `ldconfig` would rewrite it once the packages are unpacked ([`rewrite`]), over
//! [`crate::packages::ldcache`]'s format and scan.
//!
//! The update is incremental: the base's cache is taken as `ldconfig` last left it (fresh for
//! the base's files), the directories `ldconfig` scans are computed for the image as it is now
//! (a package may add one through `/etc/ld.so.conf.d`), and only what this build changed is
//! scanned: the entries a package's libraries make are added where `ldconfig` puts them, the
//! entries of files the build removes go, and a directory no configuration names any more
//! loses its entries. The soname links `ldconfig` would make are made. What this cannot
//! reproduce without reading the base's own libraries (a newly configured directory that
//! already holds some, a stale link to delete, a cache in the format of glibc before 2.32, a
//! glibc release whose rules are not held against the real tool) is refused with the reason,
//! and the caller sends the install to the sandbox.
//!
//! Both backends use it: apt for libc-bin's trigger and `ldconfig` in maintainer scripts, rpm
//! for `ldconfig` in scriptlets and glibc's file trigger. Which `ldconfig` the image has
//! decides its built-in directories and, for a cache without a generator string (glibc
//! before 2.33), the release ([`Ldconfig`]).
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::{EntryKind, LayerContents};
use erdma_oci::rootfs::SnapEntry;

use crate::error::{Cause, Result};
use crate::packages::image;
use crate::packages::ldcache::{
    self, Arch, Build, Cache, DirEntry, Glibc, Kind, Resolved, ScanDir,
};
use crate::packages::scripts::{Outcome, ScriptRecord};

/// The glibc releases whose `ldconfig` rules are emulated: 2.31, 2.36 and 2.41 (Debian 11, 12
/// and 13) are held against the real tool; Enterprise Linux 8's 2.28, Alibaba Cloud Linux
/// 3's 2.32 and Enterprise Linux 9's 2.34 follow glibc's source.
const GLIBC: std::ops::RangeInclusive<u32> = 28..=41;

/// What the records of scripts that run `ldconfig` say when the rewrite is done.
pub(crate) const DONE: &str =
    "ldconfig: /etc/ld.so.cache rewritten as the image's ldconfig writes it, once every package is unpacked";

/// Whose `ldconfig` the image runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// Debian's and Ubuntu's: the multiarch directories built in ([`Arch::debian_trusted_dirs`]).
    Debian,
    /// Enterprise Linux's (and Alibaba Cloud Linux's): upstream's built-in directories
    /// ([`Arch::el_trusted_dirs`]), unless the cache's generator names a Debian or Ubuntu build
    /// (the test fixtures' EL images carry Debian's libc and ldconfig).
    Rpm,
}

/// The image's `ldconfig`, as far as the rewrite needs to know it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ldconfig {
    pub(crate) arch: Arch,
    pub(crate) family: Family,
    /// The glibc release the package database has installed once the plan is in (libc-bin,
    /// glibc): what tells the rules of a cache without a generator string.
    pub(crate) installed: Option<Glibc>,
}

impl Ldconfig {
    /// The built-in directories of the `ldconfig` of `glibc` (Debian's build, or another).
    fn trusted(&self, glibc: Glibc) -> Vec<String> {
        match (self.family, glibc.build) {
            (Family::Rpm, Build::Other | Build::El8Backport) => self.arch.el_trusted_dirs(),
            _ => self.arch.debian_trusted_dirs(),
        }
    }

    /// The release whose rules apply to `cache`: its generator's, else the installed one,
    /// which must be older than 2.33 (every `ldconfig` since writes a generator).
    fn glibc(&self, cache: &Cache) -> std::result::Result<Glibc, String> {
        let glibc = match (&cache.generator, self.installed) {
            (Some(generator), _) => cache
                .glibc()
                .ok_or_else(|| format!("the base's cache names no glibc release ({generator})"))?,
            (None, Some(g)) if g.minor < 33 => g,
            (None, Some(g)) => {
                return Err(format!(
                    "the base's cache has no generator string, as glibc before 2.33 wrote it, but glibc 2.{} is installed",
                    g.minor
                ))
            }
            (None, None) => {
                return Err("the base's cache has no generator string and no glibc package says which ldconfig wrote it".into())
            }
        };
        if !GLIBC.contains(&glibc.minor) {
            return Err(format!(
                "the base's cache was written by glibc 2.{}'s ldconfig, whose rules are not emulated (glibc 2.{}-2.{} are)",
                glibc.minor,
                GLIBC.start(),
                GLIBC.end()
            ));
        }
        Ok(glibc)
    }
}

/// The first of `records` whose script runs `ldconfig` (its outcome says [`DONE`]).
pub(crate) fn first_run(records: &[ScriptRecord]) -> Option<&ScriptRecord> {
    records.iter().find(|r| matches!(&r.outcome, Outcome::Emulated(d) if d.contains(DONE)))
}

/// The records that said `ldconfig` was emulated ([`DONE`]), where it was not (`why`) and no
/// package adds a library directory: the base's `/etc/ld.so.cache` stays as it is, which the
/// loader does without for libraries in its default directories (Debian's ld.so searches the
/// multiarch directories itself, EL's `/lib64` and `/usr/lib64`).
pub(crate) fn not_emulated(records: &mut [ScriptRecord], why: &str) {
    let kept = format!(
        "ldconfig: not emulated for this image ({why}); /etc/ld.so.cache is left as the base has it, and the new libraries lie where the loader looks without a cache entry"
    );
    for r in records.iter_mut() {
        let Outcome::Emulated(detail) = &r.outcome else { continue };
        if detail == DONE {
            r.outcome = Outcome::NoEffect(kept.clone());
        } else if let Some(prefix) = detail.strip_suffix(DONE).filter(|p| p.ends_with(": ")) {
            // A trigger's record: `the ldconfig trigger: DONE`.
            r.outcome = Outcome::NoEffect(format!("{prefix}{kept}"));
        } else if detail.contains(DONE) {
            r.outcome = Outcome::Emulated(detail.replace(DONE, &kept));
        }
    }
}

/// `ldconfig` once every package is unpacked, where a script ran it (`trigger`: the first such,
/// `(package, script)`), for both backends: `/etc/ld.so.cache` rewritten ([`rewrite`]; `image`:
/// the image's ldconfig, or why it is not emulated). Where that cannot be reproduced, the
/// base's cache stays and `records` say so ([`not_emulated`]): the loader finds libraries in
/// its default directories without a cache entry. Unless a package adds a directory through
/// `/etc/ld.so.conf.d` (`adds_conf_dir`), which only the cache makes the loader search: then
/// the image's own ldconfig must run, and the error sends the install to the sandbox.
pub(crate) fn run(
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
    image: std::result::Result<Ldconfig, String>,
    trigger: (&str, &str),
    adds_conf_dir: bool,
    records: &mut [ScriptRecord],
) -> Result<()> {
    let done = match image {
        Ok(image) => rewrite(base, layer, &image)?.map(drop),
        Err(why) => Err(why.into()),
    };
    if let Err(why) = done {
        // Said in the report and the script's record, as text with its causes.
        let why = erdma_common::errors::chain(&*why);
        if adds_conf_dir {
            return Err(crate::packages::scripts::needs_sandbox(
                trigger.0,
                trigger.1,
                format!("ldconfig ({why})"),
            ));
        }
        not_emulated(records, &why);
    }
    Ok(())
}

/// The largest base file read whole to look at its headers (a package's symlink into the base).
const MAX_BASE_READ: u64 = 64 << 20;

/// What a rewrite did.
#[derive(Debug, Default)]
pub(crate) struct Rewritten {
    /// The directories scanned for this build's files, as `ldconfig` names them.
    pub(crate) scanned: Vec<String>,
    /// The soname links made (`DIR/SONAME`).
    pub(crate) links: Vec<String>,
    /// How many entries the cache holds.
    pub(crate) entries: usize,
}

/// Rewrites `/etc/ld.so.cache` into `layer` as the image's `ldconfig` (`image`: glibc 2.28 to
/// 2.41, its built-in directories) would after the install. `Ok(Err(why))`: not reproduced
/// here, for the reason given.
pub(crate) fn rewrite(
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
    image: &Ldconfig,
) -> Result<std::result::Result<Rewritten, Cause>> {
    let arch = image.arch;
    let cache_path = image::real("/etc/ld.so.cache", base)?;
    let Some(bytes) = base.read(&cache_path, 64 << 20)? else {
        return Ok(Err("the base has no /etc/ld.so.cache to update".into()));
    };
    let mut cache = match Cache::parse_exact(&bytes) {
        Ok(c) => c,
        Err(e) => return Ok(Err(e.into())),
    };
    let glibc = match image.glibc(&cache) {
        Ok(g) => g,
        Err(why) => return Ok(Err(why.into())),
    };
    if cache.compat
        && cache.generator.is_some()
        && cache.entries().iter().any(|e| e.hwcap.is_legacy())
    {
        // glibc 2.33 to 2.41 fill the old format's entries from the wrong index once a legacy
        // hwcap entry has come (`-c compat` only): nothing to reproduce.
        return Ok(Err("the base's cache is in the compat layout of glibc 2.33 or later with legacy hwcap entries, which that ldconfig writes wrongly".into()));
    }
    let trusted = &image.trusted(glibc)[..];
    let view = View { base, layer: &*layer };
    let before = match view.dirs(glibc, arch, trusted, false) {
        Ok(d) => d,
        Err(e) => return Ok(Err(e.into())),
    };
    let dirs = match view.dirs(glibc, arch, trusted, true) {
        Ok(d) => d,
        Err(e) => return Ok(Err(e.into())),
    };
    let mut done = Rewritten::default();
    let mut links: Vec<(String, String)> = Vec::new();
    for gone in before.iter().filter(|d| !dirs.contains(d)) {
        cache.remove_dir(gone);
    }
    for dir in &dirs {
        let Some(real) = view.resolve(&dir_path(dir)).filter(|r| r.is_dir).map(|r| r.id) else {
            continue;
        };
        let (listing, removed) = view.layer_listing(&real);
        let new_dir = !before.contains(dir);
        if new_dir && view.base_has_libraries(&real)? {
            return Ok(Err(format!(
                "{} is newly configured and already holds libraries of the base",
                dir_path(dir)
            )
            .into()));
        }
        if listing.is_empty() && removed.is_empty() && !new_dir {
            continue;
        }
        for name in &removed {
            let path = format!("{}/{name}", dir_path(dir));
            cache.remove(|e| e.path == path);
        }
        let scan = match ldcache::scan_dir(glibc, arch, dir, &listing, |name| {
            view.inspect(&format!("{real}/{name}"), arch, glibc)
        }) {
            Ok(s) => s,
            Err(e) => return Ok(Err(e.into())),
        };
        if let Some(stale) = scan.stale.first() {
            return Ok(Err(
                format!("ldconfig would delete the dangling link {real}/{stale}").into()
            ));
        }
        // ldconfig leaves a link that already leads to the chosen file (it compares inodes:
        // libpmix2's `libpmix.so.2 -> pmix2/lib/libpmix.so.2.6.2` beside a
        // `libpmix.so.2.6.2` link to the same file stays as it is).
        for (soname, file) in scan.links {
            let at = format!("{real}/{soname}");
            let same =
                match (view.resolve(&format!("/{at}")), view.resolve(&format!("/{real}/{file}"))) {
                    (Some(a), Some(b)) => a.id == b.id,
                    _ => false,
                };
            if !same {
                links.push((at, file));
            }
        }
        if let Err(e) = cache.add(dir, scan.entries, &dirs) {
            return Ok(Err(e.into()));
        }
        done.scanned.push(dir_path(dir));
    }
    for (at, file) in links {
        layer.add_symlink(&at, &file)?;
        done.links.push(format!("/{at}"));
    }
    done.entries = cache.entries().len();
    let mode = match base.kind(&cache_path)? {
        Some(SnapEntry::File(_)) => 0o644,
        _ => return Ok(Err("/etc/ld.so.cache is not a regular file".into())),
    };
    layer.add_file(&cache_path, cache.to_bytes(), mode)?;
    Ok(Ok(done))
}

/// A scan directory's path, its glibc-hwcaps subdirectory included.
fn dir_path(dir: &ScanDir) -> String {
    match &dir.hwcaps {
        Some(name) => format!("{}/glibc-hwcaps/{name}", dir.path),
        None => dir.path.clone(),
    }
}

/// The image as `ldconfig` reads it: the base, with or without this build's layer over it.
struct View<'a> {
    base: &'a dyn BaseFiles,
    layer: &'a LayerContents,
}

impl View<'_> {
    /// The directories `ldconfig` scans, for the base alone or for the image (`with_layer`).
    fn dirs(
        &self,
        glibc: Glibc,
        arch: Arch,
        trusted: &[String],
        with_layer: bool,
    ) -> std::result::Result<Vec<ScanDir>, ldcache::LdCacheError> {
        let layer = with_layer.then_some(self.layer);
        ldcache::conf_dirs(
            glibc,
            arch,
            trusted,
            |p| self.read(p, layer),
            |d| self.list(d, layer),
            |p| self.resolve_in(p, layer),
        )
    }

    fn kind_in(&self, path: &str, layer: Option<&LayerContents>) -> Result<Option<SnapEntry>> {
        match layer {
            Some(l) => image::kind(path, self.base, l),
            None => {
                let real = image::real(path, self.base)?;
                Ok(self.base.kind(&real)?)
            }
        }
    }

    fn kind(&self, path: &str) -> Result<Option<SnapEntry>> {
        self.kind_in(path, Some(self.layer))
    }

    fn read(&self, path: &str, layer: Option<&LayerContents>) -> Option<Vec<u8>> {
        match layer {
            Some(l) => image::read(path, self.base, l, 1 << 20).ok().flatten(),
            None => {
                let real = image::real(path, self.base).ok()?;
                self.base.read(&real, 1 << 20).ok().flatten()
            }
        }
    }

    /// The entries of a directory: the base's, less the layer's whiteouts, plus the layer's.
    fn list(&self, dir: &str, layer: Option<&LayerContents>) -> Vec<DirEntry> {
        let Some(real) = self.resolve_in(dir, layer).filter(|r| r.is_dir).map(|r| r.id) else {
            return Vec::new();
        };
        let mut names: std::collections::BTreeMap<String, Kind> = Default::default();
        for name in self.base.list(&real).unwrap_or_default() {
            let kind = match self.base.kind(&format!("{real}/{name}")) {
                Ok(Some(SnapEntry::Dir)) => Kind::Dir,
                Ok(Some(SnapEntry::Symlink(_))) => Kind::Symlink,
                Ok(Some(SnapEntry::File(_))) => Kind::File,
                _ => Kind::Other,
            };
            names.insert(name, kind);
        }
        if let Some(l) = layer {
            for (name, kind) in layer_children(l, &real) {
                match kind {
                    Some(k) => names.insert(name, k),
                    None => names.remove(&name),
                };
            }
        }
        names.into_iter().map(|(name, kind)| DirEntry { name, kind }).collect()
    }

    /// Where `path` leads in the image (with the layer or without), symlinks followed.
    fn resolve_in(&self, path: &str, layer: Option<&LayerContents>) -> Option<Resolved> {
        let mut path = path.to_string();
        for _ in 0..40 {
            let real = image::real(&path, self.base).ok()?;
            match self.kind_in(&path, layer).ok()? {
                Some(SnapEntry::Dir) => return Some(Resolved { id: real, is_dir: true }),
                Some(SnapEntry::File(_) | SnapEntry::Other) => {
                    return Some(Resolved { id: real, is_dir: false })
                }
                Some(SnapEntry::Symlink(t)) => {
                    path = if t.starts_with('/') {
                        t
                    } else {
                        let parent = real.rsplit_once('/').map_or("", |(p, _)| p);
                        format!("/{parent}/{t}")
                    };
                }
                None => return None,
            }
        }
        None
    }

    fn resolve(&self, path: &str) -> Option<Resolved> {
        self.resolve_in(path, Some(self.layer))
    }

    /// The layer's entries directly in `real` (a directory's real path): names, and what
    /// each is (`None`: a whiteout), as two lists: present ones, and removed names.
    fn layer_listing(&self, real: &str) -> (Vec<DirEntry>, Vec<String>) {
        let mut present = Vec::new();
        let mut removed = Vec::new();
        for (name, kind) in layer_children(self.layer, real) {
            match kind {
                Some(kind) => present.push(DirEntry { name, kind }),
                None => removed.push(name),
            }
        }
        (present, removed)
    }

    /// Whether the base has a file with a library's name in `real`.
    fn base_has_libraries(&self, real: &str) -> Result<bool> {
        Ok(self.base.list(real)?.iter().any(|n| ldcache::is_dso_name(n)))
    }

    /// What `path` leads to, for [`ldcache::scan_dir`]; `None` where it cannot be told.
    fn inspect(&self, path: &str, arch: Arch, glibc: Glibc) -> Option<ldcache::Target> {
        let Some(to) = self.resolve(&format!("/{path}")) else {
            return Some(ldcache::Target::Missing);
        };
        if to.is_dir {
            return Some(ldcache::Target::Directory);
        }
        // A device, FIFO or socket: ldconfig takes only regular files.
        if matches!(self.kind(&format!("/{}", to.id)).ok()?, Some(SnapEntry::Other)) {
            return Some(ldcache::Target::File(ldcache::Probe::Skipped));
        }
        let probe = if self.layer.file_len(&to.id).is_some() {
            ldcache::probe_at(&LayerFile { layer: self.layer, path: &to.id }, arch, glibc)?
        } else if matches!(self.layer.get(&to.id).map(|e| &e.kind), Some(EntryKind::Whiteout)) {
            return Some(ldcache::Target::Missing);
        } else {
            let bytes = self.base.read(&to.id, MAX_BASE_READ).ok()??;
            ldcache::probe(&bytes, arch, glibc)?
        };
        Some(ldcache::Target::File(probe))
    }
}

/// The layer's entries directly in `dir`: `(name, Some(kind))`, or `(name, None)` for a
/// whiteout.
fn layer_children(layer: &LayerContents, dir: &str) -> Vec<(String, Option<Kind>)> {
    let prefix = format!("{dir}/");
    layer
        .files()
        .filter_map(|(p, e)| {
            let name = p.strip_prefix(&prefix)?;
            if name.is_empty() || name.contains('/') {
                return None;
            }
            let kind = match &e.kind {
                EntryKind::Whiteout => None,
                EntryKind::Dir => Some(Kind::Dir),
                EntryKind::Symlink(_) => Some(Kind::Symlink),
                EntryKind::File(_) | EntryKind::Spooled { .. } => Some(Kind::File),
            };
            Some((name.to_string(), kind))
        })
        .collect()
}

/// A regular file of the layer, read where [`ldcache::probe_at`] looks.
struct LayerFile<'a> {
    layer: &'a LayerContents,
    path: &'a str,
}

impl ldcache::Source for LayerFile<'_> {
    fn len(&self) -> u64 {
        self.layer.file_len(self.path).unwrap_or(0)
    }
    fn read_exact_at(&self, at: u64, buf: &mut [u8]) -> Option<()> {
        self.layer.read_file_at(self.path, at, buf).ok()?.then_some(())
    }
}
