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

/// A noarch package built by the real rpmbuild from `name`, `version` and the spec's `%files`
/// section onwards (`body`: files, scriptlets, triggers), read back; `None` (with a note) where
/// rpmbuild is not installed.
pub(crate) fn rpmbuild_noarch(
    dir: &std::path::Path,
    name: &str,
    version: &str,
    body: &str,
) -> Option<erdma_rpm::package::Package> {
    if std::process::Command::new("rpmbuild").arg("--version").output().is_err() {
        eprintln!("skipped: rpmbuild is not installed (apt-get install rpm)");
        return None;
    }
    let spec = format!(
        "Name: {name}\nVersion: {version}\nRelease: 1\nSummary: t\nLicense: MIT\nBuildArch: noarch\n%description\nt\n%files\n{body}"
    );
    let path = dir.join(format!("{name}-{version}.spec"));
    std::fs::write(&path, spec).unwrap();
    let top = dir.join(format!("top-{name}-{version}"));
    let o = std::process::Command::new("rpmbuild")
        .arg("--define")
        .arg(format!("_topdir {}", top.display()))
        .args(["-bb", "--quiet"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(o.status.success(), "rpmbuild: {}", String::from_utf8_lossy(&o.stderr));
    let rpm = top.join(format!("RPMS/noarch/{name}-{version}-1.noarch.rpm"));
    Some(erdma_rpm::package::Package::open(&rpm).unwrap())
}
