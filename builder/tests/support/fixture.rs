//! OCI image layouts for tests, written with tar + flate2 + sha2 directly so that they do not
//! depend on the code under test (OCI image-spec v1.1: `image-layout.md`, `manifest.md`,
//! `config.md`, `layer.md`).
//!
//! Output is deterministic: fixed mtimes, owners and gzip header, so equal inputs give equal
//! digests.

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;
use flate2::Compression;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

pub const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const MEDIA_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const MEDIA_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const MEDIA_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// Tag used by [`fixture_image`] and [`big_layer_image`].
pub const DEFAULT_TAG: &str = "latest";

/// 2024-01-01T00:00:00Z, used for every timestamp in fixtures.
const EPOCH: u64 = 1_704_067_200;
const CREATED: &str = "2024-01-01T00:00:00Z";

/// `/etc/os-release` of Debian 12 (bookworm), as shipped by base-files 12.4+deb12u5.
pub const DEBIAN12_OS_RELEASE: &str = r#"PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
HOME_URL="https://www.debian.org/"
SUPPORT_URL="https://www.debian.org/support"
BUG_REPORT_URL="https://bugs.debian.org/"
"#;

/// One tar entry: `(path, contents, mode)`.
///
/// - `path` is relative to the image root (a leading `/` or `./` is dropped); one ending in
///   `/` is a directory and its contents are ignored.
/// - `mode` holds the permission bits; with the file-type bits `0o120000` set the entry is a
///   symlink whose target is `contents`.
/// - Missing parent directories are added (mode 0755) before their first child.
pub type Entry<'a> = (&'a str, &'a [u8], u32);

const S_IFMT: u32 = 0o170000;
const S_IFLNK: u32 = 0o120000;

#[derive(Debug, Clone)]
pub struct LayerInfo {
    /// Digest of the compressed blob, `sha256:HEX`.
    pub digest: String,
    /// Digest of the uncompressed tar, `sha256:HEX` (config `rootfs.diff_ids`).
    pub diff_id: String,
    /// Compressed size in bytes.
    pub size: u64,
}

/// An image written into an OCI layout.
#[derive(Debug, Clone)]
pub struct OciFixture {
    pub dir: PathBuf,
    pub tag: String,
    pub manifest_digest: String,
    pub manifest_size: u64,
    pub config_digest: String,
    pub layers: Vec<LayerInfo>,
}

impl OciFixture {
    /// `oci:DIR:TAG`, as skopeo and erdma-build take it.
    pub fn reference(&self) -> String {
        format!("oci:{}:{}", self.dir.display(), self.tag)
    }

    /// Path of a blob in the layout, `digest` being `sha256:HEX`.
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        blob_path(&self.dir, digest)
    }

    pub fn config(&self) -> Value {
        serde_json::from_slice(&fs::read(self.blob_path(&self.config_digest)).unwrap()).unwrap()
    }

    pub fn manifest(&self) -> Value {
        serde_json::from_slice(&fs::read(self.blob_path(&self.manifest_digest)).unwrap()).unwrap()
    }
}

pub fn blob_path(layout: &Path, digest: &str) -> PathBuf {
    let (alg, hex) = digest.split_once(':').expect("digest is ALG:HEX");
    layout.join("blobs").join(alg).join(hex)
}

/// Writes an image tagged [`DEFAULT_TAG`] into the OCI layout `dir` (created if needed; other
/// tags already in its `index.json` are kept). One gzip layer per element of `layers`;
/// `env` becomes the config's `Env` (`KEY=VALUE`, in order); `os_release`, when given, is
/// written to `etc/os-release` in the last layer (a layer is added if there is none).
pub fn fixture_image(
    dir: &Path,
    layers: &[Vec<Entry<'_>>],
    env: &[(&str, &str)],
    os_release: Option<&str>,
) -> OciFixture {
    fixture_image_tagged(dir, DEFAULT_TAG, layers, env, os_release)
}

/// [`fixture_image`] with a chosen tag.
pub fn fixture_image_tagged(
    dir: &Path,
    tag: &str,
    layers: &[Vec<Entry<'_>>],
    env: &[(&str, &str)],
    os_release: Option<&str>,
) -> OciFixture {
    let mut layers: Vec<Vec<Entry<'_>>> = layers.to_vec();
    if let Some(os) = os_release {
        if layers.is_empty() {
            layers.push(Vec::new());
        }
        layers.last_mut().unwrap().push(("etc/os-release", os.as_bytes(), 0o644));
    }
    init_layout(dir);
    let infos = layers
        .iter()
        .map(|entries| write_layer(dir, Compression::default(), |tar| append_entries(tar, entries)))
        .collect::<Vec<_>>();
    write_image(dir, tag, infos, env)
}

/// A base image whose first layer is a gzip'd tar holding one file, `data/big.bin`, of
/// `size_bytes` pseudo-random (xorshift) bytes, and whose second layer holds a Debian 12
/// `etc/os-release`. Streams to disk: memory use does not grow with `size_bytes`.
///
/// The big layer is gzip at level 1 ("fast"): random data does not compress, so a higher
/// level only costs time. Speed is bound by sha2 and flate2: about 150 MB/s with the
/// workspace's `[profile.dev.package."*"] opt-level = 3`, about 5 MB/s without it.
pub fn big_layer_image(dir: &Path, size_bytes: u64) -> OciFixture {
    init_layout(dir);
    let big = write_layer(dir, Compression::fast(), |tar| {
        append_dir(tar, "data/", 0o755)?;
        let mut h = header(tar::EntryType::Regular, 0o644, size_bytes);
        tar.append_data(&mut h, "data/big.bin", XorShiftReader::new(size_bytes))
    });
    let os = write_layer(dir, Compression::default(), |tar| {
        append_entries(tar, &[("etc/os-release", DEBIAN12_OS_RELEASE.as_bytes(), 0o644)])
    });
    write_image(
        dir,
        DEFAULT_TAG,
        vec![big, os],
        &[("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")],
    )
}

/// Cheap incompressible bytes: xorshift64* output, `len` bytes in all.
pub struct XorShiftReader {
    state: u64,
    remaining: u64,
}

impl XorShiftReader {
    pub fn new(len: u64) -> Self {
        XorShiftReader { state: 0x9E37_79B9_7F4A_7C15, remaining: len }
    }
}

impl Read for XorShiftReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (buf.len() as u64).min(self.remaining) as usize;
        let mut s = self.state;
        for chunk in buf[..n].chunks_mut(8) {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let v = s.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        self.state = s;
        self.remaining -= n as u64;
        Ok(n)
    }
}

/// A writer that hashes and counts what passes through it.
pub struct HashWriter<W> {
    inner: W,
    hasher: Sha256,
    count: u64,
}

impl<W: Write> HashWriter<W> {
    fn new(inner: W) -> Self {
        HashWriter { inner, hasher: Sha256::new(), count: 0 }
    }

    fn finish(self) -> (W, String, u64) {
        let digest = format!("sha256:{}", hex::encode(self.hasher.finalize()));
        (self.inner, digest, self.count)
    }
}

impl<W: Write> Write for HashWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The tar builder [`custom_layer`] hands its `fill` (gzip and both digests underneath).
pub type LayerTar = tar::Builder<HashWriter<GzEncoder<HashWriter<BufWriter<File>>>>>;

fn init_layout(dir: &Path) {
    fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    fs::write(dir.join("oci-layout"), "{\"imageLayoutVersion\":\"1.0.0\"}").unwrap();
}

/// Streams one layer into `blobs/sha256/` and returns its digests.
fn write_layer(
    dir: &Path,
    level: Compression,
    fill: impl FnOnce(&mut LayerTar) -> io::Result<()>,
) -> LayerInfo {
    let tmp = tempfile::NamedTempFile::new_in(dir.join("blobs/sha256")).unwrap();
    let file = BufWriter::with_capacity(1 << 20, tmp.reopen().unwrap());
    // mtime 0 and no file name in the gzip header keep the blob reproducible.
    let gz = flate2::GzBuilder::new().mtime(0).write(HashWriter::new(file), level);
    let mut tar = tar::Builder::new(HashWriter::new(gz));
    tar.mode(tar::HeaderMode::Deterministic);
    fill(&mut tar).expect("write layer entries");
    let (gz, diff_id, _) = tar.into_inner().expect("finish tar").finish();
    let (file, digest, size) = gz.finish().expect("finish gzip").finish();
    file.into_inner().expect("flush layer").sync_all().unwrap();
    tmp.persist(blob_path(dir, &digest)).unwrap();
    LayerInfo { digest, diff_id, size }
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode & 0o7777);
    h.set_size(size);
    h.set_mtime(EPOCH);
    h.set_uid(0);
    h.set_gid(0);
    h
}

fn append_dir<W: Write>(tar: &mut tar::Builder<W>, path: &str, mode: u32) -> io::Result<()> {
    let mut h = header(tar::EntryType::Directory, mode, 0);
    tar.append_data(&mut h, path, io::empty())
}

fn normalize(path: &str) -> &str {
    let mut p = path;
    loop {
        if let Some(rest) = p.strip_prefix("./") {
            p = rest;
        } else if let Some(rest) = p.strip_prefix('/') {
            p = rest;
        } else {
            return p;
        }
    }
}

fn append_entries<W: Write>(tar: &mut tar::Builder<W>, entries: &[Entry<'_>]) -> io::Result<()> {
    // Modes of directories listed explicitly, so implicit parents get them and the explicit
    // entry is not written a second time.
    let explicit: BTreeMap<&str, u32> = entries
        .iter()
        .filter_map(|(p, _, m)| {
            let p = normalize(p);
            p.ends_with('/').then(|| (p.trim_end_matches('/'), *m))
        })
        .collect();
    let mut written: HashSet<String> = HashSet::new();
    for (path, contents, mode) in entries {
        let path = normalize(path);
        let is_dir = path.ends_with('/');
        let trimmed = path.trim_end_matches('/');
        // Parents first.
        let mut parent = String::new();
        let comps: Vec<&str> = trimmed.split('/').collect();
        for comp in &comps[..comps.len().saturating_sub(1)] {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(comp);
            if written.insert(parent.clone()) {
                let m = explicit.get(parent.as_str()).copied().unwrap_or(0o755);
                append_dir(tar, &format!("{parent}/"), m)?;
            }
        }
        if is_dir {
            if written.insert(trimmed.to_string()) {
                append_dir(tar, path, *mode)?;
            }
        } else if mode & S_IFMT == S_IFLNK {
            let target = std::str::from_utf8(contents).expect("symlink target is UTF-8");
            let mut h = header(tar::EntryType::Symlink, *mode, 0);
            tar.append_link(&mut h, trimmed, target)?;
        } else {
            let mut h = header(tar::EntryType::Regular, *mode, contents.len() as u64);
            tar.append_data(&mut h, trimmed, *contents)?;
        }
    }
    Ok(())
}

/// Writes `bytes` as a blob; returns (digest, size).
fn write_blob(dir: &Path, bytes: &[u8]) -> (String, u64) {
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(bytes)));
    fs::write(blob_path(dir, &digest), bytes).unwrap();
    (digest, bytes.len() as u64)
}

fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

fn write_image(dir: &Path, tag: &str, layers: Vec<LayerInfo>, env: &[(&str, &str)]) -> OciFixture {
    image_from_layers(dir, tag, layers, env, &["/bin/sh"])
}

/// Writes config, manifest and the `index.json` entry for `tag` over layers already in the
/// layout `dir` (from [`tree_layer`] or [`import_layer`]); `cmd` becomes the config's `Cmd`.
pub fn image_from_layers(
    dir: &Path,
    tag: &str,
    layers: Vec<LayerInfo>,
    env: &[(&str, &str)],
    cmd: &[&str],
) -> OciFixture {
    image_for_platform(dir, tag, layers, env, cmd, &Platform::host())
}

/// A platform as an image config and an index entry give it (`os`, `architecture`, `variant`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    pub architecture: String,
    pub variant: Option<String>,
}

impl Platform {
    /// The machine's own (`linux/amd64` here).
    pub fn host() -> Platform {
        Platform { architecture: oci_arch().to_string(), variant: None }
    }

    /// `linux/arm64/v8`, as Debian's arm64 images (and `docker manifest`) describe themselves.
    pub fn arm64() -> Platform {
        Platform { architecture: "arm64".into(), variant: Some("v8".into()) }
    }

    /// `linux/amd64`.
    pub fn amd64() -> Platform {
        Platform { architecture: "amd64".into(), variant: None }
    }

    /// The `platform` object of an index entry.
    pub fn json(&self) -> Value {
        let mut v = json!({"os": "linux", "architecture": self.architecture});
        if let Some(var) = &self.variant {
            v["variant"] = json!(var);
        }
        v
    }

    /// `linux/ARCH[/VARIANT]`, as `--platform` takes it.
    pub fn name(&self) -> String {
        match &self.variant {
            Some(v) => format!("linux/{}/{v}", self.architecture),
            None => format!("linux/{}", self.architecture),
        }
    }
}

/// [`image_from_layers`] for `platform`: the config's `architecture` (and `variant`).
pub fn image_for_platform(
    dir: &Path,
    tag: &str,
    layers: Vec<LayerInfo>,
    env: &[(&str, &str)],
    cmd: &[&str],
    platform: &Platform,
) -> OciFixture {
    let mut config = json!({
        "created": CREATED,
        "architecture": platform.architecture,
        "os": "linux",
        "config": {
            "Env": env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
            "Cmd": cmd,
        },
        "rootfs": {
            "type": "layers",
            "diff_ids": layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>(),
        },
        "history": layers.iter().enumerate().map(|(i, _)| json!({
            "created": CREATED,
            "created_by": format!("erdma-kit test fixture layer {i}"),
        })).collect::<Vec<_>>(),
    });
    if let Some(v) = &platform.variant {
        config["variant"] = json!(v);
    }
    let (config_digest, config_size) = write_blob(dir, &serde_json::to_vec(&config).unwrap());
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {
            "mediaType": MEDIA_CONFIG,
            "digest": config_digest,
            "size": config_size,
        },
        "layers": layers.iter().map(|l| json!({
            "mediaType": MEDIA_LAYER_GZIP,
            "digest": l.digest,
            "size": l.size,
        })).collect::<Vec<_>>(),
    });
    let (manifest_digest, manifest_size) = write_blob(dir, &serde_json::to_vec(&manifest).unwrap());

    // Keep other tags already in the layout; replace this one.
    let index_path = dir.join("index.json");
    let mut manifests: Vec<Value> = fs::read(&index_path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v.get("manifests").and_then(|m| m.as_array()).cloned())
        .unwrap_or_default();
    manifests.retain(|m| m["annotations"][REF_NAME].as_str() != Some(tag));
    manifests.push(json!({
        "mediaType": MEDIA_MANIFEST,
        "digest": manifest_digest,
        "size": manifest_size,
        "annotations": { REF_NAME: tag },
    }));
    let index = json!({
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": manifests,
    });
    fs::write(&index_path, serde_json::to_vec_pretty(&index).unwrap()).unwrap();

    OciFixture {
        dir: dir.to_path_buf(),
        tag: tag.to_string(),
        manifest_digest,
        manifest_size,
        config_digest,
        layers,
    }
}

// --- Layers from directory trees (used for the debootstrapped Debian bases) ------------------

/// Creates the OCI layout skeleton (`oci-layout`, `blobs/sha256/`) in `dir`.
pub fn init_oci_layout(dir: &Path) {
    init_layout(dir);
}

/// One entry of a tree walked by [`walk_tree`]: its path relative to the root (no leading
/// `./`, no trailing `/`) and its `lstat` metadata.
pub type TreeEntry = (PathBuf, fs::Metadata);

/// Every entry under `root` (not `root` itself), depth first, siblings sorted by their byte
/// names, parents before children, never following symlinks and never crossing into another
/// file system (like `tar --one-file-system`: a `proc` or `sys` left mounted by an
/// interrupted debootstrap is listed as a directory but not entered).
pub fn walk_tree(root: &Path) -> Vec<TreeEntry> {
    use std::os::unix::fs::MetadataExt;
    let dev = fs::symlink_metadata(root)
        .unwrap_or_else(|e| panic!("lstat {}: {e}", root.display()))
        .dev();
    let mut out = Vec::new();
    walk_into(root, Path::new(""), dev, &mut out);
    out
}

fn walk_into(root: &Path, rel: &Path, dev: u64, out: &mut Vec<TreeEntry>) {
    use std::os::unix::fs::MetadataExt;
    let dir = root.join(rel);
    let mut names: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort_by(|a, b| a.as_encoded_bytes().cmp(b.as_encoded_bytes()));
    for name in names {
        let rel = rel.join(&name);
        let meta = fs::symlink_metadata(root.join(&rel))
            .unwrap_or_else(|e| panic!("lstat {}: {e}", root.join(&rel).display()));
        let descend = meta.is_dir() && meta.dev() == dev;
        out.push((rel.clone(), meta));
        if descend {
            walk_into(root, &rel, dev, out);
        }
    }
}

/// Writes one gzip layer of the tree under `root` into the layout `layout` (see
/// [`init_oci_layout`]) and returns its digests.
///
/// - Entries come from [`walk_tree`]; `keep(rel, meta)` selects them. A directory that is not
///   selected is still written when something below it is (or a whiteout is), so that every
///   entry's parents precede it.
/// - Directories, regular files and symlinks are written with their permission bits
///   (setuid, setgid and sticky included), uid, gid and mtime; hard links become separate
///   regular files; device nodes, FIFOs and sockets are skipped (a container runtime
///   provides `/dev`). Extended attributes are not written.
/// - `whiteouts` are paths (relative to the root) deleted relative to the lower layers; each
///   becomes an empty `DIR/.wh.NAME` file (OCI image-spec `layer.md`, "Whiteouts").
pub fn tree_layer(
    layout: &Path,
    root: &Path,
    keep: &dyn Fn(&Path, &fs::Metadata) -> bool,
    whiteouts: &[PathBuf],
) -> LayerInfo {
    let entries = walk_tree(root);
    let mut wanted: HashSet<PathBuf> = HashSet::new();
    let add_parents = |p: &Path, wanted: &mut HashSet<PathBuf>| {
        let mut a = p.parent();
        while let Some(d) = a {
            if d.as_os_str().is_empty() || !wanted.insert(d.to_path_buf()) {
                break;
            }
            a = d.parent();
        }
    };
    for (rel, meta) in &entries {
        if keep(rel, meta) {
            wanted.insert(rel.clone());
            add_parents(rel, &mut wanted);
        }
    }
    for w in whiteouts {
        add_parents(w, &mut wanted);
    }
    let missing_parents: Vec<PathBuf> = {
        let present: HashSet<&PathBuf> = entries.iter().map(|(p, _)| p).collect();
        let mut v: Vec<PathBuf> = wanted.iter().filter(|p| !present.contains(p)).cloned().collect();
        v.sort();
        v
    };
    write_layer(layout, Compression::default(), |tar| {
        for dir in &missing_parents {
            append_dir(tar, &format!("{}/", dir.display()), 0o755)?;
        }
        for (rel, meta) in &entries {
            if wanted.contains(rel) {
                append_tree_entry(tar, root, rel, meta)?;
            }
        }
        for w in whiteouts {
            let name = w.file_name().expect("whiteout path has a file name");
            let mut wh = std::ffi::OsString::from(".wh.");
            wh.push(name);
            let path = w.with_file_name(wh);
            let mut h = header(tar::EntryType::Regular, 0o644, 0);
            tar.append_data(&mut h, &path, io::empty())?;
        }
        Ok(())
    })
}

fn append_tree_entry<W: Write>(
    tar: &mut tar::Builder<W>,
    root: &Path,
    rel: &Path,
    meta: &fs::Metadata,
) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let ft = meta.file_type();
    let kind = if ft.is_dir() {
        tar::EntryType::Directory
    } else if ft.is_symlink() {
        tar::EntryType::Symlink
    } else if ft.is_file() {
        tar::EntryType::Regular
    } else {
        return Ok(());
    };
    let size = if ft.is_file() { meta.len() } else { 0 };
    let mut h = header(kind, meta.mode(), size);
    h.set_uid(meta.uid().into());
    h.set_gid(meta.gid().into());
    h.set_mtime(meta.mtime().max(0) as u64);
    let full = root.join(rel);
    if ft.is_dir() {
        let mut name = rel.as_os_str().to_owned();
        name.push("/");
        tar.append_data(&mut h, Path::new(&name), io::empty())
    } else if ft.is_symlink() {
        let target = fs::read_link(&full)?;
        tar.append_link(&mut h, rel, target)
    } else {
        tar.append_data(&mut h, rel, File::open(&full)?)
    }
}

/// One gzip layer of `entries` written into the layout `dir` (initialised if needed), for
/// [`image_from_layers`].
pub fn entries_layer(dir: &Path, entries: &[Entry<'_>]) -> LayerInfo {
    init_layout(dir);
    write_layer(dir, Compression::default(), |tar| append_entries(tar, entries))
}

/// One gzip layer of whatever `fill` appends (streamed: millions of entries cost no memory),
/// written into the layout `dir` (initialised if needed), for [`image_from_layers`].
pub fn custom_layer(
    dir: &Path,
    level: Compression,
    fill: impl FnOnce(&mut LayerTar) -> io::Result<()>,
) -> LayerInfo {
    init_layout(dir);
    write_layer(dir, level, fill)
}

/// The `KEY=VALUE` pairs of `image`'s config `Env`.
pub fn env_of(image: &OciFixture) -> Vec<(String, String)> {
    image.config()["config"]["Env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e.as_str()?.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

/// Copies layer `index` of `from` into the layout `to` (initialised if needed), for an image
/// built on top of another one.
pub fn import_layer(from: &OciFixture, index: usize, to: &Path) -> LayerInfo {
    init_layout(to);
    let layer = from.layers[index].clone();
    let dest = blob_path(to, &layer.digest);
    if !dest.exists() {
        let tmp = tempfile::NamedTempFile::new_in(to.join("blobs/sha256")).unwrap();
        fs::copy(from.blob_path(&layer.digest), tmp.path()).unwrap();
        tmp.persist(&dest).unwrap();
    }
    layer
}

/// The image tagged `tag` in an existing OCI layout (single-manifest images only).
pub fn read_fixture(dir: &Path, tag: &str) -> OciFixture {
    let index: Value = serde_json::from_slice(
        &fs::read(dir.join("index.json"))
            .unwrap_or_else(|e| panic!("read {}/index.json: {e}", dir.display())),
    )
    .unwrap();
    let desc = index["manifests"]
        .as_array()
        .and_then(|m| m.iter().find(|d| d["annotations"][REF_NAME].as_str() == Some(tag)))
        .unwrap_or_else(|| panic!("no tag {tag} in {}", dir.display()))
        .clone();
    let manifest_digest = desc["digest"].as_str().unwrap().to_string();
    let manifest: Value =
        serde_json::from_slice(&fs::read(blob_path(dir, &manifest_digest)).unwrap()).unwrap();
    let config_digest = manifest["config"]["digest"].as_str().unwrap().to_string();
    let config: Value =
        serde_json::from_slice(&fs::read(blob_path(dir, &config_digest)).unwrap()).unwrap();
    let diff_ids = config["rootfs"]["diff_ids"].as_array().unwrap();
    let layers = manifest["layers"]
        .as_array()
        .unwrap()
        .iter()
        .zip(diff_ids)
        .map(|(l, d)| LayerInfo {
            digest: l["digest"].as_str().unwrap().to_string(),
            diff_id: d.as_str().unwrap().to_string(),
            size: l["size"].as_u64().unwrap(),
        })
        .collect();
    OciFixture {
        dir: dir.to_path_buf(),
        tag: tag.to_string(),
        manifest_digest,
        manifest_size: desc["size"].as_u64().unwrap(),
        config_digest,
        layers,
    }
}

/// An image index in an OCI layout: its digest and size, and its entries' manifests.
#[derive(Debug, Clone)]
pub struct IndexFixture {
    pub dir: PathBuf,
    pub tag: String,
    pub digest: String,
    pub size: u64,
    /// `(manifest digest, manifest size, platform)` of each image entry, in order.
    pub manifests: Vec<(String, u64, Platform)>,
}

impl IndexFixture {
    /// `oci:DIR:TAG`.
    pub fn reference(&self) -> String {
        format!("oci:{}:{}", self.dir.display(), self.tag)
    }
}

/// A multi-platform image: the layout `dir` (created) gets the blobs of each of `images`
/// (hard-linked where the file system allows, else copied), an image index whose entries name
/// their manifests with each one's platform, plus `extra` entries as they are (an attestation
/// manifest's, say, whose blobs the caller writes), and the index tagged `tag` in `index.json`.
pub fn index_layout(
    dir: &Path,
    tag: &str,
    images: &[(&OciFixture, Platform)],
    extra: &[Value],
) -> IndexFixture {
    init_layout(dir);
    for (img, _) in images {
        for e in fs::read_dir(img.dir.join("blobs/sha256")).unwrap() {
            let e = e.unwrap();
            let dest = dir.join("blobs/sha256").join(e.file_name());
            if !dest.exists() && fs::hard_link(e.path(), &dest).is_err() {
                fs::copy(e.path(), &dest).unwrap();
            }
        }
    }
    let mut manifests: Vec<Value> = images
        .iter()
        .map(|(img, p)| json!({"mediaType": MEDIA_MANIFEST, "digest": img.manifest_digest, "size": img.manifest_size, "platform": p.json()}))
        .collect();
    manifests.extend(extra.iter().cloned());
    let raw = serde_json::to_vec(
        &json!({"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": manifests}),
    )
    .unwrap();
    let (digest, size) = write_blob(dir, &raw);
    let top = json!({"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": [
        {"mediaType": MEDIA_INDEX, "digest": digest, "size": size, "annotations": {REF_NAME: tag}},
    ]});
    fs::write(dir.join("index.json"), serde_json::to_vec_pretty(&top).unwrap()).unwrap();
    IndexFixture {
        dir: dir.to_path_buf(),
        tag: tag.to_string(),
        digest,
        size,
        manifests: images
            .iter()
            .map(|(img, p)| (img.manifest_digest.clone(), img.manifest_size, p.clone()))
            .collect(),
    }
}

/// Writes `bytes` as a blob of the layout `dir`; returns (digest, size).
pub fn add_blob(dir: &Path, bytes: &[u8]) -> (String, u64) {
    write_blob(dir, bytes)
}
