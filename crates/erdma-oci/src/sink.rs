//! Writing an image to any transport, so that a failure leaves the destination as it was.
//!
//! - Registry: blobs first (skipped when present, cross-repository mounted on the same
//!   registry, else streamed), manifests last, so a tag never points at missing content.
//! - OCI layout: a new layout is staged beside the destination and renamed into place; an
//!   existing layout gets its new blobs first and its `index.json` replaced atomically last.
//! - Archives: written to a temporary file beside the destination and renamed.
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use oci_client::Reference;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::blob::digest_hex;
use crate::error::{Error, Result};
use crate::layout::{blob_rel_path, index_with, OCI_LAYOUT};
use crate::registry::Registries;
use crate::source::{reader_stream, Source};
use crate::transport::ImageRef;
use erdma_common::progress::{Counters, Reporter, Transfer};

/// What happened to a base layer on the way to the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reuse {
    /// Already in the destination: nothing moved.
    Present,
    /// Cross-repository mount on the same registry: nothing moved.
    Mounted,
    /// Hard-linked from a layout on the same file system.
    Linked,
    /// Streamed from the source.
    Copied,
}

/// The top object to commit: a manifest, or an index over several.
pub struct Top {
    pub digest: String,
    pub media_type: String,
    pub raw: Vec<u8>,
}

enum Kind {
    Registry { reg: Arc<Registries>, r: Reference },
    Layout { dir: PathBuf, tag: Option<String>, existing: bool },
    OciArchive { file: PathBuf, tag: Option<String> },
    DockerArchive { file: PathBuf, name: Option<String> },
}

pub struct Sink {
    kind: Kind,
    /// Blobs are staged here (an OCI layout in the making) for file outputs; removed on drop.
    staging: Option<tempfile::TempDir>,
    reporter: Arc<dyn Reporter>,
    counters: Arc<Counters>,
    /// `--max-inflation`, for base layers decompressed into a docker archive.
    max_inflation: u64,
}

fn not_writable(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::OutputNotWritable { path: path.to_path_buf(), source }
}

/// Creates the staging directory beside `dest` (same file system, so renames are atomic)
/// and fails early when the destination cannot be written.
fn stage_beside(dest: &Path) -> Result<tempfile::TempDir> {
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = tempfile::Builder::new()
        .prefix(".erdma-build-")
        .tempdir_in(&parent)
        .map_err(not_writable(dest))?;
    std::fs::create_dir_all(dir.path().join("blobs/sha256")).map_err(not_writable(dest))?;
    Ok(dir)
}

impl Sink {
    pub async fn open(
        output: &ImageRef,
        regs: &Arc<Registries>,
        reporter: Arc<dyn Reporter>,
        counters: Arc<Counters>,
        max_inflation: u64,
    ) -> Result<Sink> {
        let (kind, staging) = match output {
            ImageRef::Registry(r) => {
                regs.login(r, true).await?;
                (Kind::Registry { reg: regs.clone(), r: r.clone() }, None)
            }
            ImageRef::Layout { dir, tag } => {
                let existing = dir.join("oci-layout").exists();
                if !existing
                    && dir.exists()
                    && std::fs::read_dir(dir).map_err(not_writable(dir))?.next().is_some()
                {
                    return Err(Error::OutputNotWritable {
                        path: dir.clone(),
                        source: std::io::Error::other("it exists and is not an OCI image layout"),
                    });
                }
                let staging = if existing {
                    let s = tempfile::Builder::new()
                        .prefix(".erdma-build-")
                        .tempdir_in(dir)
                        .map_err(not_writable(dir))?;
                    std::fs::create_dir_all(s.path().join("blobs/sha256"))
                        .map_err(not_writable(dir))?;
                    s
                } else {
                    stage_beside(dir)?
                };
                (Kind::Layout { dir: dir.clone(), tag: tag.clone(), existing }, Some(staging))
            }
            ImageRef::OciArchive { file, tag } => (
                Kind::OciArchive { file: file.clone(), tag: tag.clone() },
                Some(stage_beside(file)?),
            ),
            ImageRef::DockerArchive { file, name } => (
                Kind::DockerArchive { file: file.clone(), name: name.clone() },
                Some(stage_beside(file)?),
            ),
        };
        Ok(Sink { kind, staging, reporter, counters, max_inflation })
    }

    pub fn supports_index(&self) -> bool {
        !matches!(self.kind, Kind::DockerArchive { .. })
    }

    fn staged(&self, digest: &str) -> Result<PathBuf> {
        Ok(self.staging.as_ref().expect("file sinks stage").path().join(blob_rel_path(digest)?))
    }

    /// Where a blob already is in the destination, for file outputs that can skip it.
    fn existing_blob(&self, digest: &str) -> Result<Option<PathBuf>> {
        if let Kind::Layout { dir, existing: true, .. } = &self.kind {
            let p = dir.join(blob_rel_path(digest)?);
            if p.exists() {
                return Ok(Some(p));
            }
        }
        Ok(None)
    }

    /// Copies a base layer from `src`, moving as few bytes as the destination allows.
    pub async fn put_base_blob(&self, src: &Source, digest: &str, size: u64) -> Result<Reuse> {
        match &self.kind {
            Kind::Registry { reg, r } => {
                if reg.blob_exists(r, digest).await? {
                    return Ok(Reuse::Present);
                }
                if let Some(from) = src.registry_ref() {
                    if from.resolve_registry() == r.resolve_registry()
                        && reg.mount(r, from, digest).await?
                    {
                        return Ok(Reuse::Mounted);
                    }
                }
                crate::blob::with_restarts(digest, || async {
                    let stream = self.track(
                        src.blob_stream(digest, size).await?,
                        digest,
                        Transfer::Download,
                        Some(size),
                    );
                    let stream = self.track(stream, digest, Transfer::Upload, Some(size));
                    reg.push_blob(r, digest, size, stream).await
                })
                .await?;
                Ok(Reuse::Copied)
            }
            _ => {
                if self.existing_blob(digest)?.is_some() {
                    return Ok(Reuse::Present);
                }
                let dest = self.staged(digest)?;
                if dest.exists() {
                    return Ok(Reuse::Present);
                }
                // A layout's own file, or the copy a build kept after reading the layer whole.
                let layout_file = src.local_file(digest);
                let kept = crate::files::kept_blob(digest).ok().filter(|p| p.is_file());
                let from_layout = layout_file.is_some();
                if let Some(local) = layout_file.or(kept) {
                    // Checked before linking: the layout we read from is input we do not trust.
                    // The check reads the whole layer, on the blocking pool: a build places its
                    // base's layers while it works on the rest (a dropped future links nothing).
                    let file = File::open(&local).map_err(Error::io("opening blob", &local))?;
                    let wanted = digest.to_string();
                    let checked = tokio::task::spawn_blocking(move || {
                        crate::blob::check_file(&file, &wanted).map(|()| file)
                    })
                    .await
                    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
                    let file = match checked {
                        Ok(file) => Some(file),
                        // A kept copy that is not the layer any more: fetched again below.
                        Err(_) if !from_layout => {
                            let _ = std::fs::remove_file(&local);
                            None
                        }
                        Err(e) => {
                            return Err(crate::blob::digest_error(&e).unwrap_or(Error::Io {
                                operation: "reading blob",
                                path: local.clone(),
                                source: e,
                            }))
                        }
                    };
                    // Only a plain file is linked: a symlink in a hostile layout could point
                    // anywhere. And only the file checked: one put in its place since is
                    // unlinked again and the blob streamed (and checked) instead.
                    let plain =
                        std::fs::symlink_metadata(&local).is_ok_and(|m| m.file_type().is_file());
                    if let Some(file) = file.filter(|_| plain) {
                        if std::fs::hard_link(&local, &dest).is_ok() {
                            let linked = std::fs::symlink_metadata(&dest);
                            match (file.metadata(), linked) {
                                (Ok(a), Ok(b)) if (a.dev(), a.ino()) == (b.dev(), b.ino()) => {
                                    return Ok(Reuse::Linked)
                                }
                                _ => {
                                    let _ = std::fs::remove_file(&dest);
                                }
                            }
                        }
                    }
                }
                crate::blob::with_restarts(digest, || async {
                    let stream = self.track(
                        src.blob_stream(digest, size).await?,
                        digest,
                        Transfer::Download,
                        Some(size),
                    );
                    write_stream(stream, &dest, src).await
                })
                .await?;
                Ok(Reuse::Copied)
            }
        }
    }

    /// Stores a blob we made (our layer) from a file.
    pub async fn put_file(&self, path: &Path, digest: &str, size: u64) -> Result<()> {
        match &self.kind {
            Kind::Registry { reg, r } => {
                if reg.blob_exists(r, digest).await? {
                    return Ok(());
                }
                let f = File::open(path).map_err(Error::io("opening layer", path))?;
                let stream = reader_stream(Box::new(std::io::BufReader::new(f)));
                reg.push_blob(
                    r,
                    digest,
                    size,
                    self.track(stream, digest, Transfer::Upload, Some(size)),
                )
                .await
            }
            _ => {
                let dest = self.staged(digest)?;
                if self.existing_blob(digest)?.is_none() && !dest.exists() {
                    std::fs::copy(path, &dest).map_err(Error::io("writing blob", &dest))?;
                }
                Ok(())
            }
        }
    }

    /// Stores a small blob (config, manifest).
    pub async fn put_bytes(&self, raw: &[u8], digest: &str) -> Result<()> {
        match &self.kind {
            Kind::Registry { reg, r } => {
                if reg.blob_exists(r, digest).await? {
                    return Ok(());
                }
                self.counters.add(Transfer::Upload, raw.len() as u64);
                let data = Bytes::copy_from_slice(raw);
                let stream: BoxStream<'static, std::io::Result<Bytes>> =
                    Box::pin(futures_util::stream::once(async move { Ok(data) }));
                reg.push_blob(r, digest, raw.len() as u64, stream).await
            }
            _ => {
                let dest = self.staged(digest)?;
                std::fs::write(&dest, raw).map_err(Error::io("writing blob", &dest))
            }
        }
    }

    /// Pushes an image manifest that an index will reference (registries need it by digest).
    pub async fn put_child_manifest(
        &self,
        raw: &[u8],
        digest: &str,
        media_type: &str,
    ) -> Result<()> {
        match &self.kind {
            Kind::Registry { reg, r } => {
                let by_digest = Reference::with_digest(
                    r.registry().to_string(),
                    r.repository().to_string(),
                    digest.to_string(),
                );
                reg.push_manifest(&by_digest, Bytes::copy_from_slice(raw), media_type).await
            }
            _ => self.put_bytes(raw, digest).await,
        }
    }

    /// Makes the new image visible: the last step, and the only one that touches the name.
    pub async fn commit(mut self, top: &Top) -> Result<()> {
        match &self.kind {
            Kind::Registry { reg, r } => {
                reg.push_manifest(r, Bytes::copy_from_slice(&top.raw), &top.media_type).await
            }
            Kind::Layout { dir, tag, existing } => {
                self.put_bytes(&top.raw, &top.digest).await?;
                let staging = self.staging.take().expect("staged");
                if *existing {
                    add_to_layout(dir, staging.path(), tag.as_deref(), top)
                } else {
                    place_new_layout(dir, staging, tag.as_deref(), top)
                }
            }
            Kind::OciArchive { file, tag } => {
                self.put_bytes(&top.raw, &top.digest).await?;
                let staging = self.staging.as_ref().expect("staged").path();
                write_oci_archive(file, staging, tag.as_deref(), top)
            }
            Kind::DockerArchive { file, name } => {
                self.write_docker_archive(file, name.as_deref(), top)
            }
        }
    }

    /// Writes the docker archive `file` for the manifest `top`: its config, each layer
    /// decompressed, and the `manifest.json` that lists them under the name.
    fn write_docker_archive(&self, file: &Path, name: Option<&str>, top: &Top) -> Result<()> {
        let manifest: Value = serde_json::from_slice(&top.raw).expect("we wrote it");
        let staging = self.staging.as_ref().expect("staged").path().to_path_buf();
        let config_digest = manifest["config"]["digest"].as_str().expect("we wrote it");
        let config_name = format!("{}.json", digest_hex(config_digest)?);
        let config_path = self.staged(config_digest)?;
        let config: Value = serde_json::from_slice(
            &std::fs::read(&config_path).map_err(Error::io("reading", &config_path))?,
        )
        .map_err(|source| Error::Json {
            what: "image config",
            reference: "output".into(),
            source,
        })?;
        let diff_ids = config["rootfs"]["diff_ids"].as_array().cloned().unwrap_or_default();
        let mut entries = vec![(config_name.clone(), config_path)];
        let mut layer_names = Vec::new();
        // `docker save` stores layers uncompressed, named by diff_id; we do the same
        // so every reader of the format (docker load, skopeo) accepts the archive.
        for (layer, diff_id) in manifest["layers"].as_array().expect("layers").iter().zip(&diff_ids)
        {
            let digest = layer["digest"].as_str().expect("digest");
            let diff_id = diff_id.as_str().unwrap_or_default();
            let lname = format!("{}/layer.tar", digest_hex(diff_id)?);
            if layer_names.contains(&lname) {
                // The same layer twice (a base built by us, built on again): one copy.
                layer_names.push(lname);
                continue;
            }
            let raw_path = staging.join(format!("{}.tar", digest_hex(diff_id)?));
            self.decompress_layer(file, digest, diff_id, &raw_path)?;
            entries.push((lname.clone(), raw_path));
            layer_names.push(lname);
        }
        let repo_tags: Vec<String> = name
            .iter()
            .map(|n| if n.contains(':') { n.to_string() } else { format!("{n}:latest") })
            .collect();
        let list = json!([{"Config": config_name, "RepoTags": repo_tags, "Layers": layer_names}]);
        let list_path = staging.join("manifest.json");
        std::fs::write(&list_path, serde_json::to_vec(&list).expect("json"))
            .map_err(not_writable(file))?;
        entries.push(("manifest.json".into(), list_path));
        write_archive(file, &entries)
    }

    /// Decompresses the staged layer `digest` to `raw_path` for the docker archive `file`,
    /// checks that it is `diff_id`, and removes the compressed copy.
    fn decompress_layer(
        &self,
        file: &Path,
        digest: &str,
        diff_id: &str,
        raw_path: &Path,
    ) -> Result<()> {
        let compressed = self.staged(digest)?;
        let reader = std::io::BufReader::new(
            File::open(&compressed).map_err(Error::io("reading", &compressed))?,
        );
        let mut out = crate::blob::HashingWriter::new(BufWriter::new(
            File::create(raw_path).map_err(not_writable(file))?,
        ));
        let limit = |e: std::io::Error| match erdma_limits::exceeded(&e) {
            Some(exceeded) => {
                Error::Limit { what: format!("layer {digest}"), exceeded: exceeded.clone() }
            }
            None => Error::Io { operation: "decompressing", path: compressed.clone(), source: e },
        };
        std::io::copy(
            &mut crate::blob::decompressed(reader, self.max_inflation).map_err(limit)?,
            &mut out,
        )
        .map_err(limit)?;
        let (mut w, got, _) = out.finish();
        w.flush().map_err(not_writable(file))?;
        if got != diff_id {
            return Err(Error::DigestMismatch { expected: diff_id.to_string(), actual: got });
        }
        std::fs::remove_file(&compressed).map_err(not_writable(file))?;
        Ok(())
    }

    /// Wraps a stream so progress is reported and bytes are counted.
    fn track(
        &self,
        stream: BoxStream<'static, std::io::Result<Bytes>>,
        digest: &str,
        kind: Transfer,
        total: Option<u64>,
    ) -> BoxStream<'static, std::io::Result<Bytes>> {
        let reporter = self.reporter.clone();
        let counters = self.counters.clone();
        let id = format!(
            "{}{}",
            if kind == Transfer::Download { "↓" } else { "↑" },
            &digest[7..19.min(digest.len())]
        );
        reporter.transfer_start(&id, kind, total);
        Box::pin(async_stream::stream! {
            let mut stream = stream;
            while let Some(item) = stream.next().await {
                if let Ok(chunk) = &item {
                    counters.add(kind, chunk.len() as u64);
                    reporter.transfer_progress(&id, chunk.len() as u64);
                }
                yield item;
            }
            reporter.transfer_done(&id);
        })
    }
}

impl Top {
    /// The descriptor an `index.json` lists it by.
    fn descriptor(&self) -> Value {
        json!({"mediaType": self.media_type, "digest": self.digest, "size": self.raw.len()})
    }
}

/// Moves the blobs staged in `staging` into the existing layout `dir` (those it lacks), then
/// replaces its `index.json` atomically with one that also lists `top`.
fn add_to_layout(dir: &Path, staging: &Path, tag: Option<&str>, top: &Top) -> Result<()> {
    let index_path = dir.join("index.json");
    let old: Value = serde_json::from_slice(
        &std::fs::read(&index_path).map_err(Error::io("reading", &index_path))?,
    )
    .map_err(|source| Error::Json {
        what: "index.json",
        reference: dir.display().to_string(),
        source,
    })?;
    if !old.get("manifests").is_some_and(Value::is_array) {
        return Err(Error::Malformed {
            what: "index.json",
            reference: dir.display().to_string(),
            reason: "no `manifests` array".into(),
        });
    }
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).map_err(not_writable(dir))?;
    for entry in std::fs::read_dir(staging.join("blobs/sha256")).map_err(not_writable(dir))? {
        let entry = entry.map_err(not_writable(dir))?;
        let target = blobs.join(entry.file_name());
        if !target.exists() {
            std::fs::rename(entry.path(), &target).map_err(not_writable(dir))?;
        }
    }
    let index = index_with(Some(old), top.descriptor(), tag);
    write_atomic(&index_path, &serde_json::to_vec(&index).expect("json"))
}

/// Completes the layout staged in `staging` with an index of `top` and renames it into place
/// as `dir`; the staging is removed where the rename fails.
fn place_new_layout(
    dir: &Path,
    staging: tempfile::TempDir,
    tag: Option<&str>,
    top: &Top,
) -> Result<()> {
    let index = index_with(None, top.descriptor(), tag);
    write_layout_files(staging.path(), &index, dir)?;
    let path = staging.keep();
    if let Err(e) = std::fs::rename(&path, dir) {
        let _ = std::fs::remove_dir_all(&path);
        return Err(not_writable(dir)(e));
    }
    Ok(())
}

/// Writes the OCI archive `file`: the layout staged in `staging` with an index of `top`,
/// `oci-layout` and `index.json` first, then the blobs by name.
fn write_oci_archive(file: &Path, staging: &Path, tag: Option<&str>, top: &Top) -> Result<()> {
    let index = index_with(None, top.descriptor(), tag);
    write_layout_files(staging, &index, file)?;
    let mut names: Vec<String> = vec!["oci-layout".into(), "index.json".into()];
    let mut blobs: Vec<String> = std::fs::read_dir(staging.join("blobs/sha256"))
        .map_err(not_writable(file))?
        .filter_map(|e| e.ok().map(|e| format!("blobs/sha256/{}", e.file_name().to_string_lossy())))
        .collect();
    blobs.sort();
    names.extend(blobs);
    let entries: Vec<(String, PathBuf)> =
        names.into_iter().map(|n| (n.clone(), staging.join(n))).collect();
    write_archive(file, &entries)
}

/// Writes a staged layout's `oci-layout` and `index.json`; errors name `dest`, the output.
fn write_layout_files(staging: &Path, index: &Value, dest: &Path) -> Result<()> {
    std::fs::write(staging.join("oci-layout"), OCI_LAYOUT).map_err(not_writable(dest))?;
    std::fs::write(staging.join("index.json"), serde_json::to_vec(index).expect("json"))
        .map_err(not_writable(dest))?;
    Ok(())
}

async fn write_stream(
    mut stream: BoxStream<'static, std::io::Result<Bytes>>,
    dest: &Path,
    src: &Source,
) -> Result<()> {
    let tmp = dest.with_extension("partial");
    let io = Error::io("writing blob", dest);
    let mut f = tokio::fs::File::create(&tmp).await.map_err(Error::io("writing blob", &tmp))?;
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                let _ = tokio::fs::remove_file(&tmp).await;
                return Err(match src.registry_ref() {
                    Some(r) => crate::source::stream_error(e, r),
                    None => crate::blob::digest_error(&e).unwrap_or(Error::Io {
                        operation: "reading blob",
                        path: src.reference.to_string().into(),
                        source: e,
                    }),
                });
            }
        };
        if let Err(e) = f.write_all(&chunk).await {
            return Err(io(e));
        }
    }
    f.flush().await.map_err(Error::io("writing blob", &tmp))?;
    drop(f);
    std::fs::rename(&tmp, dest).map_err(io)?;
    Ok(())
}

/// Writes a tar of `entries` (name, file) to a temporary file beside `dest`, then renames it.
/// Headers carry fixed owners, modes and mtimes so the same content gives the same archive.
/// A blob (`blobs/sha256/HEX`) is checked against its name as it is copied: a layout's layer
/// linked into the staging directory may have been rewritten since it was checked, by
/// whoever may write that layout, and the archive is a copy no later change reaches.
fn write_archive(dest: &Path, entries: &[(String, PathBuf)]) -> Result<()> {
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let tmp = tempfile::Builder::new()
        .prefix(".erdma-build-")
        .suffix(".tar")
        .tempfile_in(&parent)
        .map_err(not_writable(dest))?;
    let write = || -> std::io::Result<()> {
        let mut tar = tar::Builder::new(BufWriter::new(tmp.as_file()));
        for (name, path) in entries {
            let mut f = File::open(path)?;
            let mut h = tar::Header::new_gnu();
            h.set_size(f.metadata()?.len());
            h.set_mode(0o644);
            h.set_mtime(0);
            h.set_uid(0);
            h.set_gid(0);
            h.set_entry_type(tar::EntryType::Regular);
            match name.strip_prefix("blobs/sha256/") {
                Some(hex) => {
                    let digest = format!("sha256:{hex}");
                    let mut checked = crate::blob::VerifyingReader::new(f, &digest);
                    tar.append_data(&mut h, name, &mut checked)?
                }
                None => tar.append_data(&mut h, name, &mut f)?,
            }
        }
        tar.into_inner()?.flush()?;
        tmp.as_file().sync_all()
    };
    write().map_err(|e| crate::blob::digest_error(&e).unwrap_or_else(|| not_writable(dest)(e)))?;
    tmp.persist(dest).map_err(|e| not_writable(dest)(e.error))?;
    Ok(())
}

/// Replaces `path` with `data` through a temporary file and a rename.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let parent = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".erdma-build-")
        .tempfile_in(parent)
        .map_err(not_writable(path))?;
    tmp.write_all(data).map_err(not_writable(path))?;
    tmp.as_file().sync_all().map_err(not_writable(path))?;
    tmp.persist(path).map_err(|e| not_writable(path)(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An archive's blob that does not hold its name's bytes (a layout's layer rewritten after
    /// its check) fails the archive, which is then not written; the right bytes go in whole.
    #[test]
    fn an_archive_checks_its_blobs_as_it_copies_them() {
        let dir = tempfile::tempdir().unwrap();
        let hex = &crate::blob::sha256_digest(b"layer bytes")["sha256:".len()..];
        let blob = dir.path().join(hex);
        let layout = dir.path().join("oci-layout");
        std::fs::write(&layout, br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        let entries = vec![
            ("oci-layout".to_string(), layout.clone()),
            (format!("blobs/sha256/{hex}"), blob.clone()),
        ];
        let dest = dir.path().join("out.tar");
        std::fs::write(&blob, b"LAYER BYTES").unwrap();
        let e = write_archive(&dest, &entries).unwrap_err();
        assert!(matches!(e, Error::DigestMismatch { .. }), "{e}");
        assert!(!dest.exists());
        std::fs::write(&blob, b"layer bytes").unwrap();
        write_archive(&dest, &entries).unwrap();
        let mut archive = tar::Archive::new(File::open(&dest).unwrap());
        let got: Vec<(String, Vec<u8>)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let name = e.path().unwrap().to_string_lossy().into_owned();
                let mut data = Vec::new();
                std::io::Read::read_to_end(&mut e, &mut data).unwrap();
                (name, data)
            })
            .collect();
        assert_eq!(got[1], (format!("blobs/sha256/{hex}"), b"layer bytes".to_vec()));
        assert_eq!(got.len(), 2);
    }
}
