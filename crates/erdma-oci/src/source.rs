//! Reading an image from any transport: the top manifest or index, configs and blobs.
//!
//! Every blob read here is checked against its digest before anything downstream commits it.
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use oci_client::Reference;
use serde::Serialize;
use serde_json::{json, Value};

use crate::blob::{digest_hex, sha256_digest, Compression, VerifyingReader};
use crate::error::{Error, Result};
use crate::layout::{blob_rel_path, select_from_index, TarIndex};
use crate::registry::Registries;
use crate::transport::ImageRef;
use erdma_limits::{Exceeded, Limits};

pub use erdma_limits::MAX_JSON;

enum Store {
    Registry {
        reg: Arc<Registries>,
        r: Reference,
    },
    Dir(PathBuf),
    /// An archive; `names` maps a digest to its entry when entries are not named by digest.
    Tar {
        index: Arc<TarIndex>,
        names: HashMap<String, String>,
    },
}

/// An image source, opened: the top manifest or index has been read.
pub struct Source {
    pub reference: ImageRef,
    store: Store,
    root_digest: String,
    root: Value,
    /// What reading the image may cost (`--max-*`).
    pub limits: Limits,
}

/// A platform as `os/arch[/variant]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Platform(pub String);

impl Platform {
    pub fn host() -> Platform {
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        };
        Platform(format!("linux/{arch}"))
    }
    fn of(v: &Value) -> Option<Platform> {
        let os = v.get("os")?.as_str()?;
        let arch = v.get("architecture")?.as_str()?;
        Some(Platform(match v.get("variant").and_then(Value::as_str) {
            Some(var) => format!("{os}/{arch}/{var}"),
            None => format!("{os}/{arch}"),
        }))
    }
    fn matches(&self, other: &Platform) -> bool {
        // `linux/arm64` asks for any arm64 variant; `linux/arm64/v8` only that one.
        self == other || other.0.starts_with(&format!("{}/", self.0))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlatformChoice {
    One(Platform),
    All,
}

/// One image (one platform) of the source.
#[derive(Debug, Clone)]
pub struct SourceImage {
    pub platform: Option<Platform>,
    pub manifest_digest: String,
    pub manifest: Value,
    pub config: Value,
    /// `(digest, size, media type)` of each layer, bottom first.
    pub layers: Vec<(String, u64, String)>,
}

fn is_index(v: &Value) -> bool {
    v.get("manifests").is_some()
}

impl Source {
    pub async fn open(
        reference: &ImageRef,
        regs: &Arc<Registries>,
        limits: Limits,
    ) -> Result<Source> {
        let display = reference.to_string();
        let malformed = |what: &'static str, reason: String| Error::Malformed {
            what,
            reference: display.clone(),
            reason,
        };
        let json = |what: &'static str| {
            let reference = display.clone();
            move |source| Error::Json { what, reference, source }
        };
        let (store, root_digest, raw) = match reference {
            ImageRef::Registry(r) => {
                // Through registries.conf: the mirror or location that served it is where its
                // blobs and child manifests are read.
                let (raw, digest, at) = regs.pull_manifest(r).await?;
                (Store::Registry { reg: regs.clone(), r: at }, digest, raw.to_vec())
            }
            ImageRef::Layout { dir, tag } => {
                let index_path = dir.join("index.json");
                let text = std::fs::read(&index_path)
                    .map_err(Error::io("reading image layout", &index_path))?;
                let index: Value = serde_json::from_slice(&text).map_err(json("index.json"))?;
                let desc = select_from_index(&index, tag.as_deref(), &display)?;
                let digest = desc_digest(&desc, &display)?;
                let store = Store::Dir(dir.clone());
                let raw = read_verified(&store, &digest, MAX_JSON)?;
                (store, digest, raw)
            }
            ImageRef::OciArchive { file, tag } => {
                let index = Arc::new(TarIndex::open(file)?);
                let idx: Value = serde_json::from_slice(&index.read_small("index.json", MAX_JSON)?)
                    .map_err(json("index.json"))?;
                let desc = select_from_index(&idx, tag.as_deref(), &display)?;
                let digest = desc_digest(&desc, &display)?;
                let store = Store::Tar { index, names: HashMap::new() };
                let raw = read_verified(&store, &digest, MAX_JSON)?;
                (store, digest, raw)
            }
            ImageRef::DockerArchive { file, name } => {
                docker_archive(file, name.as_deref(), &display, &limits)?
            }
        };
        let root: Value = serde_json::from_slice(&raw).map_err(json("manifest"))?;
        if !root.is_object() {
            return Err(malformed("manifest", "not a JSON object".into()));
        }
        Ok(Source { reference: reference.clone(), store, root_digest, root, limits })
    }

    /// The digest of what the reference names (a manifest or an index).
    pub fn digest(&self) -> &str {
        &self.root_digest
    }

    pub fn is_multi_platform(&self) -> bool {
        is_index(&self.root)
    }

    /// The images for `choice`, each with its manifest and config read and checked.
    pub async fn images(&self, choice: &PlatformChoice) -> Result<Vec<SourceImage>> {
        let display = self.reference.to_string();
        if !is_index(&self.root) {
            let img = self.image(self.root_digest.clone(), self.root.clone(), None).await?;
            return Ok(vec![img]);
        }
        let entries = self.root["manifests"].as_array().cloned().unwrap_or_default();
        let mut picked = Vec::new();
        let mut available = Vec::new();
        for e in &entries {
            let Some(p) = e.get("platform").and_then(Platform::of) else { continue };
            // Attestation manifests (buildx) say unknown/unknown and carry
            // `vnd.docker.reference.type`; they describe the old images.
            if p.0.starts_with("unknown/")
                || e.pointer("/annotations/vnd.docker.reference.type").is_some()
            {
                continue;
            }
            available.push(p.0.clone());
            let take = match choice {
                PlatformChoice::All => true,
                PlatformChoice::One(want) => picked.is_empty() && want.matches(&p),
            };
            if take {
                let size =
                    e.get("size").and_then(Value::as_u64).ok_or_else(|| Error::Malformed {
                        what: "index",
                        reference: display.clone(),
                        reason: format!("the entry for {} has no size", p.0),
                    })?;
                picked.push((desc_digest(e, &display)?, size, p));
            }
        }
        if picked.is_empty() {
            let platform = match choice {
                PlatformChoice::One(p) => p.0.clone(),
                PlatformChoice::All => "any".into(),
            };
            return Err(Error::NoPlatform {
                platform,
                reference: display,
                available: available.join(", "),
            });
        }
        let mut out = Vec::new();
        for (digest, size, platform) in picked {
            let raw = self.child_manifest(&digest, size, &platform).await?;
            let m: Value = serde_json::from_slice(&raw).map_err(|source| Error::Json {
                what: "manifest",
                reference: display.clone(),
                source,
            })?;
            out.push(self.image(digest, m, Some(platform)).await?);
        }
        Ok(out)
    }

    /// The manifest an index entry names, checked against the entry's digest and size. A
    /// registry serves manifests only from `/v2/NAME/manifests/DIGEST` (its blobs endpoint
    /// answers "blob unknown" for them), so they are fetched there, with the manifest media
    /// types in `Accept`; local stores keep them as blobs.
    async fn child_manifest(
        &self,
        digest: &str,
        size: u64,
        platform: &Platform,
    ) -> Result<Vec<u8>> {
        let display = self.reference.to_string();
        let mismatch =
            |reason: String| Error::Malformed { what: "index", reference: display.clone(), reason };
        if size > MAX_JSON {
            return Err(mismatch(format!("its entry for {} says manifest {digest} is {size} bytes, more than the {MAX_JSON} a manifest may have", platform.0)));
        }
        let raw = match &self.store {
            // `Registries::manifest` reads at most MAX_JSON and checks the body against the
            // digest asked for (and the registry's `Docker-Content-Digest`).
            Store::Registry { reg, r } => match reg
                .manifest(&r.clone_with_digest(digest.to_string()))
                .await
            {
                Ok((raw, _)) => raw.to_vec(),
                Err(Error::Registry {
                    source:
                        oci_client::errors::OciDistributionError::DigestError(
                            oci_client::errors::DigestError::VerificationError { expected, actual },
                        ),
                    ..
                }) => return Err(Error::DigestMismatch { expected, actual }),
                Err(e) => return Err(e),
            },
            store => read_verified(store, digest, MAX_JSON)?,
        };
        if raw.len() as u64 != size {
            return Err(mismatch(format!(
                "its entry for {} says manifest {digest} is {size} bytes, but it is {} bytes",
                platform.0,
                raw.len()
            )));
        }
        Ok(raw)
    }

    async fn image(
        &self,
        digest: String,
        manifest: Value,
        platform: Option<Platform>,
    ) -> Result<SourceImage> {
        let display = self.reference.to_string();
        let malformed = |reason: String| Error::Malformed {
            what: "manifest",
            reference: display.clone(),
            reason,
        };
        if is_index(&manifest) {
            return Err(malformed("nested index where an image manifest was expected".into()));
        }
        let config_desc = manifest.get("config").ok_or_else(|| malformed("no `config`".into()))?;
        let config_digest = desc_digest(config_desc, &display)?;
        let layers = manifest
            .get("layers")
            .and_then(Value::as_array)
            .ok_or_else(|| malformed("no `layers`".into()))?;
        // Before anything is read for them: every layer costs a download, a scan and a copy.
        check_layers(layers.len(), &self.limits, &display)?;
        let layers = layers
            .iter()
            .map(|l| {
                let d = desc_digest(l, &display)?;
                let size = l
                    .get("size")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| malformed(format!("layer {d} has no size")))?;
                let mt = l
                    .get("mediaType")
                    .and_then(Value::as_str)
                    .unwrap_or(crate::layer::MEDIA_TYPE_TAR)
                    .to_string();
                Ok((d, size, mt))
            })
            .collect::<Result<Vec<_>>>()?;
        let raw = self.read_blob(&config_digest, MAX_JSON).await?;
        let config: Value = serde_json::from_slice(&raw).map_err(|source| Error::Json {
            what: "image config",
            reference: display.clone(),
            source,
        })?;
        let n_diff = config.pointer("/rootfs/diff_ids").and_then(Value::as_array).map(Vec::len);
        if n_diff != Some(layers.len()) {
            return Err(Error::Malformed {
                what: "image config",
                reference: display,
                reason: format!(
                    "{} layers in the manifest but {} diff_ids in the config",
                    layers.len(),
                    n_diff.unwrap_or(0)
                ),
            });
        }
        let platform = platform.or_else(|| Platform::of(&config));
        Ok(SourceImage { platform, manifest_digest: digest, manifest, config, layers })
    }

    /// A small blob, read whole and checked.
    pub async fn read_blob(&self, digest: &str, max: u64) -> Result<Vec<u8>> {
        match &self.store {
            Store::Registry { reg, r } => {
                crate::blob::with_restarts(digest, || async {
                    let mut out = Vec::new();
                    let mut s = reg.blob_stream(r, digest, None).await?;
                    while let Some(chunk) = s.next().await {
                        let chunk = chunk.map_err(|e| stream_error(e, r))?;
                        out.extend_from_slice(&chunk);
                        if out.len() as u64 > max {
                            return Err(Error::Malformed {
                                what: "blob",
                                reference: digest.into(),
                                reason: format!("larger than {max} bytes"),
                            });
                        }
                    }
                    Ok(out)
                })
                .await
            }
            store => read_verified(store, digest, max),
        }
    }

    /// A stream of a blob for copying to a sink, checked against its digest and `size` as the
    /// last byte arrives ([`crate::blob::verified`]), from a registry or a local store.
    pub async fn blob_stream(
        &self,
        digest: &str,
        size: u64,
    ) -> Result<BoxStream<'static, std::io::Result<Bytes>>> {
        match &self.store {
            Store::Registry { reg, r } => reg.blob_stream(r, digest, Some(size)).await,
            // Checked at `size` as a registry's are (a reader stopping there sees a mismatch).
            store => {
                let (r, _) = open_local(store, digest)?;
                Ok(crate::blob::verified(
                    reader_stream(Box::new(BufReader::with_capacity(1 << 16, r))),
                    digest,
                    Some(size),
                ))
            }
        }
    }

    /// A checked synchronous reader for local stores; `None` for registries.
    pub fn blob_reader(&self, digest: &str) -> Result<Box<dyn BufRead + Send>> {
        if let Store::Dir(dir) = &self.store {
            // A layout's file: once read whole and matched, not read again to be checked
            // before it is linked into an output (crate::blob::check_file).
            let r = crate::blob::VerifyingFile::hashed_aside(open_dir_blob(dir, digest)?, digest);
            return Ok(Box::new(BufReader::with_capacity(1 << 16, r)));
        }
        let (r, _) = open_local(&self.store, digest)?;
        Ok(Box::new(BufReader::with_capacity(1 << 16, VerifyingReader::new(r, digest))))
    }

    /// The file holding a blob, for layouts (so a sink can hard-link instead of copying).
    pub fn local_file(&self, digest: &str) -> Option<PathBuf> {
        match &self.store {
            Store::Dir(dir) => blob_rel_path(digest).ok().map(|p| dir.join(p)),
            _ => None,
        }
    }

    /// The registry and repository, for cross-repository mounts.
    pub fn registry_ref(&self) -> Option<&Reference> {
        match &self.store {
            Store::Registry { r, .. } => Some(r),
            _ => None,
        }
    }

    pub fn is_remote(&self) -> bool {
        matches!(self.store, Store::Registry { .. })
    }
}

pub fn stream_error(e: std::io::Error, r: &Reference) -> Error {
    if let Some(exceeded) = erdma_limits::exceeded(&e) {
        return Error::Limit {
            what: format!("registry {}", r.resolve_registry()),
            exceeded: exceeded.clone(),
        };
    }
    crate::blob::digest_error(&e).unwrap_or_else(|| Error::Registry {
        registry: r.resolve_registry().to_string(),
        operation: "downloading blob".into(),
        source: oci_client::errors::OciDistributionError::IoError(e),
    })
}

/// Turns a blocking reader into a stream of 64 KiB chunks read on the blocking pool.
pub fn reader_stream(
    mut reader: Box<dyn BufRead + Send>,
) -> BoxStream<'static, std::io::Result<Bytes>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    tokio::task::spawn_blocking(move || loop {
        let mut buf = vec![0u8; 1 << 16];
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                buf.truncate(n);
                if tx.blocking_send(Ok(Bytes::from(buf))).is_err() {
                    break;
                }
            }
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                break;
            }
        }
    });
    Box::pin(async_stream::stream! {
        let mut rx = rx;
        while let Some(item) = rx.recv().await {
            yield item;
        }
    })
}

/// [`Exceeded::Layers`] for an image of more than `--max-layers` layers.
fn check_layers(count: usize, limits: &Limits, reference: &str) -> Result<()> {
    if count > limits.layers {
        return Err(Error::Limit {
            what: format!("the base {reference}"),
            exceeded: Exceeded::Layers { count, limit: limits.layers },
        });
    }
    Ok(())
}

fn desc_digest(desc: &Value, reference: &str) -> Result<String> {
    let d = desc.get("digest").and_then(Value::as_str).ok_or_else(|| Error::Malformed {
        what: "descriptor",
        reference: reference.into(),
        reason: "no `digest`".into(),
    })?;
    digest_hex(d)?;
    Ok(d.to_string())
}

/// A layout's blob file.
fn open_dir_blob(dir: &std::path::Path, digest: &str) -> Result<std::fs::File> {
    let path = dir.join(blob_rel_path(digest)?);
    std::fs::File::open(&path).map_err(Error::io("opening blob", &path))
}

fn open_local(store: &Store, digest: &str) -> Result<(Box<dyn Read + Send>, u64)> {
    match store {
        Store::Dir(dir) => {
            let f = open_dir_blob(dir, digest)?;
            let size = f.metadata().map(|m| m.len()).unwrap_or(0);
            Ok((Box::new(f), size))
        }
        Store::Tar { index, names } => {
            let name = match names.get(digest) {
                Some(n) => n.clone(),
                None => blob_rel_path(digest)?,
            };
            let (r, size) = index.open_entry(&name)?;
            Ok((Box::new(r), size))
        }
        Store::Registry { .. } => unreachable!("registry blobs are streamed"),
    }
}

fn read_verified(store: &Store, digest: &str, max: u64) -> Result<Vec<u8>> {
    let (r, size) = open_local(store, digest)?;
    if size > max {
        return Err(Error::Malformed {
            what: "blob",
            reference: digest.into(),
            reason: format!("larger than {max} bytes"),
        });
    }
    let mut out = Vec::new();
    VerifyingReader::new(r.take(max), digest).read_to_end(&mut out).map_err(|e| {
        crate::blob::digest_error(&e).unwrap_or(Error::Io {
            operation: "reading blob",
            path: digest.into(),
            source: e,
        })
    })?;
    Ok(out)
}

/// Opens a `docker save` archive as an OCI image: the manifest is synthesised from
/// `manifest.json`, and each layer is named by its digest (the file name when the archive
/// uses `blobs/sha256/`, the config's diff_id for uncompressed layers, else hashed).
fn docker_archive(
    file: &std::path::Path,
    name: Option<&str>,
    display: &str,
    limits: &Limits,
) -> Result<(Store, String, Vec<u8>)> {
    let malformed = |reason: String| Error::Malformed {
        what: "docker archive manifest.json",
        reference: display.into(),
        reason,
    };
    let json =
        |what: &'static str| move |source| Error::Json { what, reference: display.into(), source };
    let index = TarIndex::open(file)?;
    let list: Value = serde_json::from_slice(&index.read_small("manifest.json", MAX_JSON)?)
        .map_err(json("docker archive manifest.json"))?;
    let list = list.as_array().ok_or_else(|| malformed("not an array".into()))?;
    let entry = match name {
        Some(n) => list.iter().find(|e| {
            e.get("RepoTags").and_then(Value::as_array).is_some_and(|t| {
                t.iter()
                    .any(|t| t.as_str().is_some_and(|t| t == n || t.ends_with(&format!("/{n}"))))
            })
        }),
        None if list.len() == 1 => list.first(),
        None => {
            return Err(Error::ManifestUnknown {
                reference: format!("{display}: {} images in the archive, name one", list.len()),
            })
        }
    }
    .ok_or_else(|| Error::ManifestUnknown { reference: display.into() })?;
    let config_name =
        entry.get("Config").and_then(Value::as_str).ok_or_else(|| malformed("no Config".into()))?;
    let config_name =
        crate::layer::normalize(config_name).ok_or_else(|| malformed("bad Config path".into()))?;
    let config_raw = index.read_small(&config_name, MAX_JSON)?;
    let config_digest = sha256_digest(&config_raw);
    let config: Value =
        serde_json::from_slice(&config_raw).map_err(json("docker archive config"))?;
    let diff_ids: Vec<String> = config
        .pointer("/rootfs/diff_ids")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    let layer_names = entry
        .get("Layers")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed("no Layers".into()))?;
    // Each layer is hashed below unless the archive names it by digest.
    check_layers(layer_names.len(), limits, display)?;
    let mut names = HashMap::new();
    names.insert(config_digest.clone(), config_name);
    let mut layers = Vec::new();
    for (i, l) in layer_names.iter().enumerate() {
        let lname = l
            .as_str()
            .and_then(crate::layer::normalize)
            .ok_or_else(|| malformed("bad layer path".into()))?;
        let size = index.size(&lname).ok_or_else(|| malformed(format!("missing layer {lname}")))?;
        let (mut r, _) = index.open_entry(&lname)?;
        let mut head = [0u8; 4];
        let n = r.read(&mut head).map_err(Error::io("reading archive", file))?;
        let compression = Compression::sniff(&head[..n]);
        let digest = if let Some(hex) = lname.strip_prefix("blobs/sha256/") {
            format!("sha256:{hex}")
        } else if compression == Compression::None && i < diff_ids.len() {
            diff_ids[i].clone()
        } else {
            let (r, _) = index.open_entry(&lname)?;
            let mut w = crate::blob::HashingWriter::new(std::io::sink());
            std::io::copy(&mut { r }, &mut w).map_err(Error::io("reading archive", file))?;
            w.finish().1
        };
        digest_hex(&digest)?;
        let media_type = match compression {
            Compression::Gzip => crate::layer::MEDIA_TYPE_GZIP,
            Compression::Zstd => crate::layer::MEDIA_TYPE_ZSTD,
            Compression::None => crate::layer::MEDIA_TYPE_TAR,
        };
        names.insert(digest.clone(), lname);
        layers.push(json!({"mediaType": media_type, "digest": digest, "size": size}));
    }
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_raw.len()},
        "layers": layers,
    });
    let raw = serde_json::to_vec(&manifest).expect("serialisable");
    let digest = sha256_digest(&raw);
    Ok((Store::Tar { index: Arc::new(index), names }, digest, raw))
}
