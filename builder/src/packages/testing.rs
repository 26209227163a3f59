//! Test doubles shared by the backends' unit tests.
use std::collections::BTreeMap;

use erdma_oci::files::BaseFiles;
use erdma_oci::rootfs::SnapEntry;

/// A base image as a map of path → entry, its symlinks resolved as in an image.
pub(crate) struct MapBase(pub(crate) BTreeMap<String, SnapEntry>);

impl BaseFiles for MapBase {
    fn read(&self, path: &str, _: u64) -> erdma_oci::Result<Option<Vec<u8>>> {
        let real = self.real_path(path)?.unwrap_or_default();
        Ok(match self.0.get(&real) {
            Some(SnapEntry::File(c)) => c.clone(),
            _ => None,
        })
    }
    fn list(&self, dir: &str) -> erdma_oci::Result<Vec<String>> {
        let prefix = format!("{dir}/");
        Ok(self
            .0
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix))
            .filter(|k| !k.contains('/'))
            .map(str::to_string)
            .collect())
    }
    fn real_path(&self, path: &str) -> erdma_oci::Result<Option<String>> {
        erdma_oci::rootfs::resolve_in_image(path, false, &mut |p| self.kind(p))
    }
    fn kind(&self, path: &str) -> erdma_oci::Result<Option<SnapEntry>> {
        Ok(self.0.get(path).cloned())
    }
}

/// A merged-`/usr` Debian base (`/lib` → `usr/lib`) with `/etc` and `/var/lib`, plus `extra`.
pub(crate) fn base(extra: &[(&str, SnapEntry)]) -> MapBase {
    let mut m: BTreeMap<String, SnapEntry> = [
        ("usr", SnapEntry::Dir),
        ("usr/lib", SnapEntry::Dir),
        ("lib", SnapEntry::Symlink("usr/lib".into())),
        ("etc", SnapEntry::Dir),
        ("var", SnapEntry::Dir),
        ("var/lib", SnapEntry::Dir),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    m.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    MapBase(m)
}
