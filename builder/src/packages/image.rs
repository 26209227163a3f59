//! The image as maintainer scripts would see it while dpkg configures: the base's files with
//! this build's layer over them. Paths are absolute as scripts write them (`/lib/systemd/…`)
//! and are resolved through the base's directory symlinks (merged `/usr`) to where the layer
//! keeps them.
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::{EntryKind, LayerContents};
use erdma_oci::rootfs::SnapEntry;

use crate::error::Result;

/// `path` (absolute) where the image has it, its directories' symlinks resolved.
pub(crate) fn real(path: &str, base: &dyn BaseFiles) -> Result<String> {
    let rel = path.trim_start_matches('/');
    Ok(base.real_path(rel)?.unwrap_or_else(|| rel.to_string()))
}

/// What `path` is in the image: the layer's entry where it has one (a whiteout: nothing),
/// else the base's.
pub(crate) fn kind(
    path: &str,
    base: &dyn BaseFiles,
    layer: &LayerContents,
) -> Result<Option<SnapEntry>> {
    let real = real(path, base)?;
    Ok(match layer.get(&real).map(|e| &e.kind) {
        Some(EntryKind::Whiteout) => None,
        Some(EntryKind::Dir) => Some(SnapEntry::Dir),
        Some(EntryKind::Symlink(t)) => Some(SnapEntry::Symlink(t.clone())),
        Some(EntryKind::File(c)) => Some(SnapEntry::File(Some(c.clone()))),
        Some(EntryKind::Spooled { .. }) => Some(SnapEntry::File(None)),
        None => base.kind(&real)?,
    })
}

/// The names in a directory of the image: the base's, less the layer's whiteouts, plus the
/// layer's.
pub(crate) fn list(dir: &str, base: &dyn BaseFiles, layer: &LayerContents) -> Result<Vec<String>> {
    let real = real(dir, base)?;
    let mut names: std::collections::BTreeSet<String> = base.list(&real)?.into_iter().collect();
    let prefix = format!("{real}/");
    for (p, e) in layer.files() {
        let Some(name) = p.strip_prefix(&prefix).filter(|n| !n.contains('/')) else { continue };
        match e.kind {
            erdma_oci::layer::EntryKind::Whiteout => names.remove(name),
            _ => names.insert(name.to_string()),
        };
    }
    Ok(names.into_iter().collect())
}

/// The directory `path` is in: `/etc` for `/etc/x`, empty for `/x` (the root).
pub(crate) fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(p, _)| p)
}

/// `dir` (absolute) where the image has it, every symlink on the way resolved through the
/// base, its own last component too (`dpkg-realpath`, `realpath` of a directory); empty for the
/// root.
pub(crate) fn real_dir(dir: &str, base: &dyn BaseFiles) -> Result<String> {
    // Resolving `DIR/x` resolves every component of DIR as a directory of the path.
    let real = real(&format!("{}/x", dir.trim_end_matches('/')), base)?;
    Ok(real.strip_suffix("/x").unwrap_or("").to_string())
}

/// Whether `dir` (absolute) is a directory of the image, every symlink on the way (its own
/// too) followed through the base.
pub(crate) fn is_dir(dir: &str, base: &dyn BaseFiles, layer: &LayerContents) -> Result<bool> {
    let real = real_dir(dir, base)?;
    if real.is_empty() {
        return Ok(true);
    }
    let real = real.as_str();
    Ok(match layer.get(real).map(|e| &e.kind) {
        Some(EntryKind::Dir) => true,
        Some(_) => false,
        None => matches!(base.kind(real)?, Some(SnapEntry::Dir)),
    })
}

pub(crate) fn exists(path: &str, base: &dyn BaseFiles, layer: &LayerContents) -> Result<bool> {
    Ok(kind(path, base, layer)?.is_some())
}

/// The content of the regular file at `path` (at most `max` bytes from the base); `None` where
/// the image has no such file, or only a large one the layer spooled (no script helper reads
/// one of those).
pub(crate) fn read(
    path: &str,
    base: &dyn BaseFiles,
    layer: &LayerContents,
    max: u64,
) -> Result<Option<Vec<u8>>> {
    let real = real(path, base)?;
    match layer.get(&real).map(|e| &e.kind) {
        Some(EntryKind::File(c)) => Ok(Some(c.clone())),
        Some(_) => Ok(None),
        None => Ok(base.read(&real, max)?),
    }
}

/// A symlink at `at` (absolute) pointing to `target`, where the image has `at`.
pub(crate) fn link(
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
    at: &str,
    target: &str,
) -> Result<()> {
    let at = real(at, base)?;
    Ok(layer.add_symlink(&at, target)?)
}

/// The directory `dir` (absolute) and its missing parents, made as mkdir(2) under umask 022
/// makes them (0755), where the image lacks them.
pub(crate) fn ensure_dir(dir: &str, base: &dyn BaseFiles, layer: &mut LayerContents) -> Result<()> {
    let mut path = String::new();
    for part in dir.trim_start_matches('/').split('/') {
        path.push('/');
        path.push_str(part);
        if !exists(&path, base, layer)? {
            let real = real(&path, base)?;
            layer.add_dir(&real, 0o755)?;
        }
    }
    Ok(())
}
