//! `config.json` I/O. The spec is not ours: it is edited as JSON so fields we do not know
//! survive, and written atomically (temporary file, fsync, rename, same mode).
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};

pub fn read(path: &Path) -> Result<(Vec<u8>, Value)> {
    let raw = std::fs::read(path).map_err(Error::io("reading", path))?;
    let spec: Value = serde_json::from_slice(&raw).map_err(|e| Error::Malformed { what: "OCI spec", path: path.to_path_buf(), reason: e.to_string() })?;
    if !spec.is_object() {
        return Err(Error::Malformed { what: "OCI spec", path: path.to_path_buf(), reason: "not a JSON object".into() });
    }
    Ok((raw, spec))
}

pub fn write_atomic(path: &Path, spec: &Value) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mode = std::fs::metadata(path).map(|m| m.permissions().mode()).unwrap_or(0o644);
    let mut tmp = tempfile::Builder::new().prefix(".config.json.").tempfile_in(dir).map_err(Error::io("writing", path))?;
    let data = serde_json::to_vec(spec).expect("a Value serialises");
    tmp.write_all(&data).map_err(Error::io("writing", path))?;
    tmp.as_file().set_permissions(std::fs::Permissions::from_mode(mode)).map_err(Error::io("writing", path))?;
    tmp.as_file().sync_all().map_err(Error::io("writing", path))?;
    tmp.persist(path).map_err(|e| Error::io("writing", path)(e.error))?;
    Ok(())
}

/// Writes `data` to `path` through a temporary file and a rename (same mode if it existed).
pub fn write_bytes_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mode = std::fs::metadata(path).map(|m| m.permissions().mode()).unwrap_or(0o644);
    let mut tmp = tempfile::Builder::new().prefix(".erdma.").tempfile_in(dir).map_err(Error::io("writing", path))?;
    tmp.write_all(data).map_err(Error::io("writing", path))?;
    tmp.as_file().set_permissions(std::fs::Permissions::from_mode(mode)).map_err(Error::io("writing", path))?;
    tmp.as_file().sync_all().map_err(Error::io("writing", path))?;
    tmp.persist(path).map_err(|e| Error::io("writing", path)(e.error))?;
    Ok(())
}
