//! `config.json` I/O. The spec is not ours: it is edited as JSON so fields we do not know
//! survive, and written atomically (temporary file, rename, same mode; see [`write_atomic`] for
//! why a bundle's spec is not fsync'd). Files that outlive a boot (engine configs, CDI specs)
//! go through [`write_bytes_atomic`], which is.
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};

pub fn read(path: &Path) -> Result<(Vec<u8>, Value)> {
    let raw = std::fs::read(path).map_err(Error::io("reading", path))?;
    let spec: Value = serde_json::from_slice(&raw).map_err(|source| Error::Json {
        what: "OCI spec",
        path: path.to_path_buf(),
        source,
    })?;
    if !spec.is_object() {
        return Err(Error::Malformed {
            what: "OCI spec",
            path: path.to_path_buf(),
            reason: "not a JSON object".into(),
        });
    }
    Ok((raw, spec))
}

/// Replaces a bundle's `config.json` (the runtime wrapper's edit) atomically: the new spec goes
/// to a temporary file in the same directory, which then takes the original's name in one step,
/// so every reader (the runtime exec'd right after us, an engine) opens either the old file or
/// the new one, complete, through the page cache. There is no fsync, unlike CONTRIBUTING.md's rule for files we own:
/// fsync only adds durability across a host crash, and this file has no use after one: the
/// container dies with the host, and engines write a new spec before they run a container
/// again (containerd, and Docker through it, into a new bundle directory at every task create;
/// the kubelet creates new containers; Podman rewrites `config.json` at every container init).
/// It was a journal commit on every asking `create` when the bundle is on a disk filesystem
/// (`/run` is one on some hosts, this project's CI machine among them): 0.22 ms on an idle
/// machine, several ms while anything else writes. On a tmpfs it costs and buys nothing.
///
/// The step is `renameat2(RENAME_EXCHANGE)`, then the old spec, now under the temporary name,
/// is unlinked: as atomic for readers as a rename, but ext4 starts writing the new file out at
/// once when a rename replaces a file (`auto_da_alloc`, its guard for programs that rename
/// without fsync), and not on an exchange. Measured over a freshly written spec, as an engine
/// leaves it: on ext4 0.06 ms for the replacing rename, 0.03 ms for exchange and unlink; on
/// tmpfs 0.016 and 0.019 ms. Where the exchange is not supported (or there is nothing to
/// exchange with), a plain rename.
pub fn write_atomic(path: &Path, spec: &Value) -> Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    let dir = path.parent().unwrap_or(Path::new("."));
    let mode = std::fs::metadata(path).map(|m| m.permissions().mode()).unwrap_or(0o644);
    let mut tmp = tempfile::Builder::new()
        .prefix(".config.json.")
        .tempfile_in(dir)
        .map_err(Error::io("writing", path))?;
    let data = serde_json::to_vec(spec).expect("a Value serialises");
    tmp.write_all(&data).map_err(Error::io("writing", path))?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(Error::io("writing", path))?;
    match renameat_with(CWD, tmp.path(), CWD, path, RenameFlags::EXCHANGE) {
        // The new spec is in place; the temporary's name now holds the old one. A failure to
        // remove it leaves a stray hidden file in the bundle, not a wrong spec.
        Ok(()) => {
            if let Err(e) = tmp.close() {
                tracing::warn!("removing the previous {} after the edit: {e}", path.display());
            }
        }
        Err(_) => {
            tmp.persist(path).map_err(|e| Error::io("writing", path)(e.error))?;
        }
    }
    Ok(())
}

/// Writes `data` to `path` through a temporary file, fsync'd, and a rename (same mode if it
/// existed): for files that must survive a crash whole (engine configs, CDI specs).
pub fn write_bytes_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mode = std::fs::metadata(path).map(|m| m.permissions().mode()).unwrap_or(0o644);
    let mut tmp = tempfile::Builder::new()
        .prefix(".erdma.")
        .tempfile_in(dir)
        .map_err(Error::io("writing", path))?;
    tmp.write_all(data).map_err(Error::io("writing", path))?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(Error::io("writing", path))?;
    tmp.as_file().sync_all().map_err(Error::io("writing", path))?;
    tmp.persist(path).map_err(|e| Error::io("writing", path)(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn write_atomic_replaces_keeps_the_mode_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.json");
        std::fs::write(&p, b"{\"old\": true}").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        write_atomic(&p, &json!({"new": 1})).unwrap();
        assert_eq!(read(&p).unwrap().1, json!({"new": 1}));
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(names(dir.path()), ["config.json"]);
        // Nothing to exchange with: a plain rename, default mode.
        let q = dir.path().join("alt.json");
        write_atomic(&q, &json!({"alt": []})).unwrap();
        assert_eq!(read(&q).unwrap().1, json!({"alt": []}));
        assert_eq!(std::fs::metadata(&q).unwrap().permissions().mode() & 0o777, 0o644);
        assert_eq!(names(dir.path()), ["alt.json", "config.json"]);
    }
}
