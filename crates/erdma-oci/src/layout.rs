//! On-disk image formats: the OCI image layout (directory or tar) and `docker save` archives.
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::blob::digest_hex;
use crate::error::{Error, Result};

pub const REF_NAME: &str = "org.opencontainers.image.ref.name";
pub const OCI_LAYOUT: &str = r#"{"imageLayoutVersion":"1.0.0"}"#;

/// `blobs/sha256/<hex>` for a validated digest.
pub fn blob_rel_path(digest: &str) -> Result<String> {
    Ok(format!("blobs/sha256/{}", digest_hex(digest)?))
}

/// Where the entries of a tar archive start, so blobs can be read in place without unpacking.
#[derive(Debug)]
pub struct TarIndex {
    pub file: PathBuf,
    entries: HashMap<String, (u64, u64)>,
}

impl TarIndex {
    pub fn open(file: &Path) -> Result<TarIndex> {
        let f = File::open(file).map_err(Error::io("opening archive", file))?;
        let mut entries = HashMap::new();
        let mut links = Vec::new();
        let malformed = |e: std::io::Error| match erdma_limits::exceeded(&e) {
            Some(exceeded) => {
                Error::Limit { what: file.display().to_string(), exceeded: exceeded.clone() }
            }
            None => {
                Error::Corrupt { what: "archive", reference: file.display().to_string(), source: e }
            }
        };
        erdma_limits::walk_tar_seek(std::io::BufReader::new(f), malformed, |entry| {
            let Some(name) = crate::layer::normalize(&String::from_utf8_lossy(&entry.path_bytes()))
            else {
                return Ok(());
            };
            let kind = entry.header().entry_type();
            if kind.is_file() {
                entries.insert(name, (entry.raw_file_position(), entry.size()));
            } else if kind.is_symlink() || kind.is_hard_link() {
                // `docker save` links repeated layers to their first copy.
                if let Some(target) = entry.link_name_bytes() {
                    let target = String::from_utf8_lossy(&target).into_owned();
                    let base = if kind.is_symlink() {
                        name.rsplit_once('/').map(|(d, _)| d).unwrap_or("").to_string()
                    } else {
                        String::new()
                    };
                    if let Some(t) = crate::layer::normalize(&format!("{base}/{target}")) {
                        links.push((name, t));
                    }
                }
            }
            Ok(())
        })?;
        for (name, target) in links {
            if let Some(pos) = entries.get(&target).copied() {
                entries.insert(name, pos);
            }
        }
        Ok(TarIndex { file: file.to_path_buf(), entries })
    }

    pub fn size(&self, name: &str) -> Option<u64> {
        self.entries.get(name).map(|(_, s)| *s)
    }

    /// Opens entry `name` for reading (a fresh file handle, so readers can run side by side).
    pub fn open_entry(&self, name: &str) -> Result<(std::io::Take<File>, u64)> {
        let (offset, size) = *self.entries.get(name).ok_or_else(|| Error::Malformed {
            what: "archive",
            reference: self.file.display().to_string(),
            reason: format!("missing entry {name}"),
        })?;
        let mut f = File::open(&self.file).map_err(Error::io("opening archive", &self.file))?;
        f.seek(SeekFrom::Start(offset)).map_err(Error::io("reading archive", &self.file))?;
        Ok((f.take(size), size))
    }

    /// Reads a small entry (index.json, manifest.json, configs), capped at `max` bytes.
    pub fn read_small(&self, name: &str, max: u64) -> Result<Vec<u8>> {
        let (r, size) = self.open_entry(name)?;
        if size > max {
            return Err(Error::Malformed {
                what: "archive",
                reference: self.file.display().to_string(),
                reason: format!("{name} is larger than {max} bytes"),
            });
        }
        let mut out = Vec::with_capacity(size as usize);
        r.take(max).read_to_end(&mut out).map_err(Error::io("reading archive", &self.file))?;
        Ok(out)
    }
}

/// Picks the descriptor for `tag` from an OCI `index.json`: by `org.opencontainers.image.ref.name`,
/// or the only entry when no tag is given.
pub fn select_from_index(index: &Value, tag: Option<&str>, reference: &str) -> Result<Value> {
    let manifests =
        index.get("manifests").and_then(Value::as_array).ok_or_else(|| Error::Malformed {
            what: "index.json",
            reference: reference.into(),
            reason: "no `manifests` array".into(),
        })?;
    let name_of = |m: &Value| {
        m.pointer("/annotations/org.opencontainers.image.ref.name")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    match tag {
        Some(tag) => {
            manifests.iter().find(|m| name_of(m).as_deref() == Some(tag)).cloned().ok_or_else(
                || Error::ManifestUnknown {
                    reference: format!(
                        "{reference} (tags: {})",
                        manifests.iter().filter_map(name_of).collect::<Vec<_>>().join(", ")
                    ),
                },
            )
        }
        None if manifests.len() == 1 => Ok(manifests[0].clone()),
        None => Err(Error::ManifestUnknown {
            reference: format!(
                "{reference}: {} images in the layout, name one with :TAG",
                manifests.len()
            ),
        }),
    }
}

/// The layout's `index.json` with `desc` under `tag`, replacing what had that tag before.
pub fn index_with(existing: Option<Value>, mut desc: Value, tag: Option<&str>) -> Value {
    let mut index = existing.unwrap_or_else(|| json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []}));
    if let Some(tag) = tag {
        desc["annotations"] = json!({ REF_NAME: tag });
    }
    let manifests = index["manifests"].as_array_mut().expect("index.json manifests checked before");
    match tag {
        Some(tag) => manifests.retain(|m| {
            m.pointer("/annotations/org.opencontainers.image.ref.name").and_then(Value::as_str)
                != Some(tag)
        }),
        None => manifests.retain(|m| m.get("digest") != desc.get("digest")),
    }
    manifests.push(desc);
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_tags_replace_and_select() {
        let d = |x: &str| json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": x, "size": 1});
        let i = index_with(None, d("sha256:a"), Some("v1"));
        let i = index_with(Some(i), d("sha256:b"), Some("v2"));
        let i = index_with(Some(i), d("sha256:c"), Some("v1"));
        assert_eq!(i["manifests"].as_array().unwrap().len(), 2);
        assert_eq!(select_from_index(&i, Some("v1"), "x").unwrap()["digest"], "sha256:c");
        assert!(select_from_index(&i, None, "x").is_err());
        let e = select_from_index(&i, Some("v9"), "oci:x").unwrap_err().to_string();
        assert!(e.contains("v1") && e.contains("v2"), "{e}");
    }
}
