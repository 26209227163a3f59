//! Fetching and verifying apt repository metadata, the way apt does it.
//!
//! The chain of trust is apt's (apt-secure(8)): the `InRelease` file (or `Release` with its
//! detached `Release.gpg`) must carry a valid OpenPGP signature by a key of the repository's
//! keyring; the `Release` text lists the SHA256 and size of every index; each `Packages` index
//! is checked against that list before it is decompressed and read; each package stanza in
//! turn carries the SHA256 and size of its `.deb`, which the caller checks after downloading.
//! There is no unsigned fallback.
//!
//! Layouts (sources.list(5), <https://wiki.debian.org/DebianRepository/Format>):
//! - `deb URL bookworm main`: `URL/dists/bookworm/InRelease`,
//!   `URL/dists/bookworm/main/binary-amd64/Packages.xz`;
//! - nested suites such as Alibaba's `deb URL jammy/erdma main`: the same below
//!   `URL/dists/jammy/erdma/`;
//! - flat repositories, `deb URL subdir/` (a suite ending in `/`, no components):
//!   `URL/subdir/InRelease` and `URL/subdir/Packages.xz`.
//!
//! In every layout a stanza's `Filename` is relative to `URL`, the archive root (apt's
//! `debReleaseIndex::ArchiveURI`).
//!
//! Signatures are checked by [`erdma_openpgp`] (gpgv's policy, as apt applies it).
use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::sync::{Arc, OnceLock};

use super::deb822::{self, Deb822Error, Paragraph};
use super::index;
use erdma_common::dates::{days_from_civil, format_utc, now};
use erdma_http::{Client, Failed, HttpError, RETRIES};
pub use erdma_openpgp::SignatureError;
use erdma_openpgp::{verify_clearsigned_with, verify_detached_with, Keyring};

/// Largest `InRelease`, `Release` or `Release.gpg` accepted (Debian's are about 150 KiB).
const MAX_META: u64 = 32 << 20;
/// Largest decompressed `Packages` index accepted (Debian's main/amd64 is about 50 MiB).
const MAX_INDEX: u64 = 1 << 30;
/// How far in the future a Release `Date` may be before the file counts as not valid yet.
/// apt's `Acquire::Max-FutureTime` is 10 seconds; we allow for a less well-kept clock.
const MAX_FUTURE: i64 = 600;
/// The index files looked for, in order. apt prefers `.xz` (the smallest); we take `.gz` first
/// where the Release lists it: Debian 13's is 13.3 MB against 9.7 MB, but decompresses in about
/// 0.1 s against 0.55 s here, and as the download and the decompression overlap, it is ready
/// sooner on any link faster than about 200 Mbit/s (cloud mirrors; bench/packages_build.sh).
const INDEX_NAMES: [&str; 3] = ["Packages.gz", "Packages.xz", "Packages"];

/// One repository to read: one `deb` line with one suite.
#[derive(Clone)]
pub struct RepoSpec {
    /// The archive root, e.g. `http://deb.debian.org/debian`.
    pub url: String,
    /// `bookworm`, `jammy/erdma`, or for a flat repository a directory ending in `/`.
    pub suite: String,
    /// Empty for a flat repository.
    pub components: Vec<String>,
    /// Debian architecture name, e.g. `amd64`.
    pub arch: String,
    /// One or more OpenPGP public keys, binary or ASCII-armoured.
    pub keyring: Vec<u8>,
}

impl fmt::Debug for RepoSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RepoSpec")
            .field("url", &self.url)
            .field("suite", &self.suite)
            .field("components", &self.components)
            .field("arch", &self.arch)
            .field("keyring", &format_args!("{} bytes", self.keyring.len()))
            .finish()
    }
}

/// Every package stanza of the indices a [`RepoSpec`] names.
#[derive(Debug, Clone, Default)]
pub struct RepoIndex {
    pub packages: Vec<IndexedPackage>,
}

/// One stanza of a `Packages` index, with what is needed to download and check its `.deb`.
///
/// A full index is big (Debian's main/amd64 has about 63,000 stanzas in 50 MiB) and a build
/// looks closely at a few dozen of them, so a package keeps the fields every stanza is
/// checked or chosen by, and a place in the index text, shared by all its packages; the whole
/// [`Paragraph`] is built the first time [`IndexedPackage::paragraph`] asks for it.
#[derive(Clone)]
pub struct IndexedPackage {
    index: Arc<IndexText>,
    /// The stanza: `index.text[start..end]`, starting on line `line` of the index.
    start: u32,
    end: u32,
    line: u32,
    /// Where [`INDEX_FIELDS`] are in `index.text`, as [`deb822::scan`] found them: a byte
    /// range, [`ABSENT`] or [`FOLDED`] (32-bit offsets keep 63,000 of these small).
    values: [(u32, u32); INDEX_FIELDS.len()],
    size: u64,
    paragraph: OnceLock<Paragraph>,
}

/// A decompressed `Packages` index, shared by its packages.
struct IndexText {
    text: String,
    /// The index's URL, for messages.
    url: String,
    /// The archive root `Filename`s are relative to.
    base: String,
    /// The Release's `Origin`, else its `Label`, else the archive root.
    origin: String,
    /// The archive root and suite, for messages: `http://deb.debian.org/debian bookworm`.
    repo: String,
}

/// The fields of every stanza that are read up front, in [`IndexedPackage::values`] order.
const INDEX_FIELDS: [&str; 7] =
    ["Package", "Version", "Architecture", "Provides", "Filename", "SHA256", "Size"];
const PACKAGE: usize = 0;
const VERSION: usize = 1;
const ARCHITECTURE: usize = 2;
const PROVIDES: usize = 3;
const FILENAME: usize = 4;
const SHA256: usize = 5;
const SIZE: usize = 6;
/// A field the stanza does not have.
const ABSENT: (u32, u32) = (u32::MAX, 0);
/// A value to read from the parsed paragraph ([`deb822::ValueSpan::Folded`]).
const FOLDED: (u32, u32) = (u32::MAX, 1);

impl fmt::Debug for IndexedPackage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndexedPackage")
            .field("name", &self.name())
            .field("version", &self.version())
            .field("arch", &self.arch())
            .field("url", &self.url())
            .field("sha256", &self.sha256())
            .field("size", &self.size)
            .field("repo", &self.repo())
            .finish_non_exhaustive()
    }
}

impl IndexedPackage {
    /// The packages of an index's text, each checked for what its download needs, as
    /// [`read_streamed`] reads them; `url` names the index in errors.
    pub(crate) fn read_index(
        text: String,
        url: &str,
        base: &str,
        origin: &str,
        repo: &str,
    ) -> Result<Vec<IndexedPackage>, RepoError> {
        let index = Arc::new(IndexText {
            text,
            url: url.to_owned(),
            base: base.to_owned(),
            origin: origin.to_owned(),
            repo: repo.to_owned(),
        });
        let text = index.text.as_str();
        // Offsets are kept in 32 bits; MAX_INDEX keeps indices well below 4 GiB.
        if u32::try_from(text.len()).is_err() {
            return Err(RepoError::MalformedIndex {
                url: url.to_owned(),
                reason: format!("it is larger than {} bytes", u32::MAX),
            });
        }
        // Debian's stanzas average about 800 bytes; room that is never written costs no memory.
        let mut packages = Vec::with_capacity(text.len() / 512);
        for stanza in deb822::scan(text, INDEX_FIELDS) {
            let stanza =
                stanza.map_err(|source| RepoError::IndexSyntax { url: url.to_owned(), source })?;
            packages.push(IndexedPackage::checked(&index, stanza)?);
        }
        Ok(packages)
    }

    fn checked(
        index: &Arc<IndexText>,
        stanza: deb822::Scanned<{ INDEX_FIELDS.len() }>,
    ) -> Result<IndexedPackage, RepoError> {
        let mut pkg = IndexedPackage {
            index: Arc::clone(index),
            start: stanza.range.start as u32,
            end: stanza.range.end as u32,
            line: stanza.line as u32,
            values: stanza.values.map(|v| match v {
                None => ABSENT,
                Some(deb822::ValueSpan::Text(r)) => (r.start as u32, r.end as u32),
                Some(deb822::ValueSpan::Folded) => FOLDED,
            }),
            size: 0,
            paragraph: OnceLock::new(),
        };
        if pkg.values.contains(&FOLDED) {
            // Rare: a value whose lines are not contiguous in the text; it is read from the
            // parsed paragraph.
            let paragraph = pkg.parse_paragraph()?;
            let _ = pkg.paragraph.set(paragraph);
        }
        let malformed =
            |reason: String| RepoError::MalformedIndex { url: index.url.clone(), reason };
        let name = pkg.name();
        if name.is_empty() {
            return Err(malformed("a stanza has no Package field".into()));
        }
        let field = |i: usize| {
            pkg.value(i).map(str::trim).filter(|v| !v.is_empty()).ok_or_else(|| {
                malformed(format!("package `{name}` has no {} field", INDEX_FIELDS[i]))
            })
        };
        let filename = field(FILENAME)?;
        let sha256 = field(SHA256)?;
        let size = field(SIZE)?;
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(malformed(format!(
                "package `{name}` has an invalid SHA256 `{}`",
                sha256.to_ascii_lowercase()
            )));
        }
        let size: u64 = size
            .parse()
            .map_err(|_| malformed(format!("package `{name}` has an invalid Size `{size}`")))?;
        if filename.contains("://") || filename.split('/').any(|p| p == "..") {
            return Err(malformed(format!(
                "package `{name}` has an invalid Filename `{filename}`"
            )));
        }
        pkg.size = size;
        Ok(pkg)
    }

    /// One of [`INDEX_FIELDS`], in the form [`Paragraph::get`] gives.
    fn value(&self, i: usize) -> Option<&str> {
        match self.values[i] {
            ABSENT => None,
            // `checked` parsed the paragraph of every stanza with a folded value.
            FOLDED => self.paragraph.get().and_then(|p| p.get(INDEX_FIELDS[i])),
            (start, end) => self.index.text.get(start as usize..end as usize),
        }
    }

    fn parse_paragraph(&self) -> Result<Paragraph, RepoError> {
        let text = &self.index.text[self.start as usize..self.end as usize];
        deb822::parse_single(text).map_err(|e| RepoError::IndexSyntax {
            url: self.index.url.clone(),
            source: e.shifted(self.line as usize - 1),
        })
    }

    /// The whole stanza, parsed the first time it is asked for.
    pub fn paragraph(&self) -> Result<&Paragraph, RepoError> {
        if let Some(p) = self.paragraph.get() {
            return Ok(p);
        }
        let parsed = self.parse_paragraph()?;
        Ok(self.paragraph.get_or_init(|| parsed))
    }

    /// Whether [`IndexedPackage::paragraph`] has been built.
    #[cfg(test)]
    pub(crate) fn is_parsed(&self) -> bool {
        self.paragraph.get().is_some()
    }

    /// `Package`.
    pub fn name(&self) -> &str {
        self.value(PACKAGE).unwrap_or_default()
    }

    /// `Version`, as written.
    pub fn version(&self) -> Option<&str> {
        self.value(VERSION)
    }

    /// `Architecture`, as written.
    pub fn arch(&self) -> Option<&str> {
        self.value(ARCHITECTURE)
    }

    /// `Provides`, as written.
    pub fn provides(&self) -> Option<&str> {
        self.value(PROVIDES)
    }

    /// Absolute URL of the `.deb`: the archive root joined with `Filename`.
    pub fn url(&self) -> String {
        let filename = self.value(FILENAME).unwrap_or_default().trim();
        let filename = filename.trim_start_matches("./").trim_start_matches('/');
        format!("{}/{}", self.index.base, filename)
    }

    /// Lower-case hex SHA256 of the `.deb`, from the index.
    pub fn sha256(&self) -> String {
        self.value(SHA256).unwrap_or_default().trim().to_ascii_lowercase()
    }

    /// Size of the `.deb` in bytes, from the index.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The Release's `Origin`, else its `Label`, else the archive root.
    pub fn origin(&self) -> &str {
        &self.index.origin
    }

    /// The archive root and suite, for messages: `http://deb.debian.org/debian bookworm`.
    pub fn repo(&self) -> &str {
        &self.index.repo
    }
}

/// One entry of a sources.list or `.sources` file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceEntry {
    /// `deb`, `deb-src`.
    pub types: Vec<String>,
    pub uris: Vec<String>,
    pub suites: Vec<String>,
    pub components: Vec<String>,
    /// `signed-by`: a key file path (or several, or fingerprints, space-separated as written),
    /// or an inline ASCII-armoured key block with deb822 continuation marks removed.
    pub signed_by: Option<String>,
    /// `arch=` / `Architectures:`, when given.
    pub arch: Option<Vec<String>>,
    /// `trusted=yes` / `Trusted: yes`: apt would skip signature checks; callers should refuse.
    pub trusted: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error("invalid repository {repo}: {reason}")]
    InvalidSpec { repo: String, reason: String },

    /// The transfer failed (connection, timeout, status, a body that broke off or was too large).
    #[error(transparent)]
    Http(#[from] HttpError),

    #[error("no InRelease or Release at {url}")]
    NoRelease { url: String },

    #[error("{url} is not signed: there is no Release.gpg beside it")]
    Unsigned { url: String },

    #[error("cannot use the keyring of {repo}")]
    Keyring {
        repo: String,
        #[source]
        source: SignatureError,
    },

    #[error("bad signature on {url}")]
    BadSignature {
        url: String,
        #[source]
        source: SignatureError,
    },

    /// From [`verify_clearsigned`] and [`verify_detached`], which know no URL.
    #[error(transparent)]
    Signature(#[from] SignatureError),

    #[error("malformed Release file {url}: {reason}")]
    MalformedRelease { url: String, reason: String },

    #[error("release file {url} has expired (valid until {valid_until})")]
    Expired { url: String, valid_until: String },

    #[error("release file {url} is not valid yet (dated {date})")]
    NotYetValid { url: String, date: String },

    #[error("repository {repo} has no architecture `{arch}` (has: {available})")]
    NoArchitecture { repo: String, arch: String, available: String },

    #[error("repository {repo} has no component `{component}` (has: {available})")]
    NoComponent { repo: String, component: String, available: String },

    #[error("release file {url} lists no {wanted} (nor .xz, .gz)")]
    NoIndex { url: String, wanted: String },

    #[error("{url} is listed in the Release file but the server does not have it")]
    IndexMissing { url: String },

    #[error("size mismatch for {file} from {repo}: Release says {expected} bytes, got {actual}")]
    SizeMismatch { file: String, repo: String, expected: u64, actual: String },

    #[error(
        "hash mismatch for {file} from {repo}: Release says sha256:{expected}, got sha256:{actual}"
    )]
    HashMismatch { file: String, repo: String, expected: String, actual: String },

    #[error("decompressing {url}")]
    Decompress {
        url: String,
        #[source]
        source: std::io::Error,
    },

    /// A decompression bomb ([`erdma_limits`]); one line, naming the flag.
    #[error("{url} {exceeded}")]
    Limit { url: String, exceeded: erdma_limits::Exceeded },

    #[error("malformed Packages index {url}")]
    IndexSyntax {
        url: String,
        #[source]
        source: Deb822Error,
    },

    #[error("malformed Packages index {url}: {reason}")]
    MalformedIndex { url: String, reason: String },
}

impl RepoError {
    /// The server could not be reached or failed on its side (connection error, timeout,
    /// 5xx, 429): another mirror may do. Everything else (signatures, hashes, missing
    /// files, malformed metadata) is a property of what the mirror serves.
    pub fn is_unreachable(&self) -> bool {
        match self {
            RepoError::Http(e) => e.is_transient(),
            _ => false,
        }
    }

    /// Names the file a signature error came from.
    fn at(self, url: &str) -> RepoError {
        match self {
            RepoError::Signature(source) => RepoError::BadSignature { url: url.to_owned(), source },
            other => other,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Fetching
// ---------------------------------------------------------------------------------------

/// Where a [`RepoSpec`]'s files are.
struct Layout {
    /// Archive root, no trailing slash.
    base: String,
    /// Directory of InRelease, with a trailing slash.
    meta: String,
    /// Index directories relative to `meta` (`main/binary-amd64/`, or `` for flat).
    index_dirs: Vec<String>,
    flat: bool,
    /// `URL suite`, for messages.
    display: String,
}

impl Layout {
    fn new(spec: &RepoSpec) -> Result<Self, RepoError> {
        let base = spec.url.trim_end_matches('/').to_owned();
        let display = format!("{} {}", base, spec.suite);
        let invalid = |reason: &str| RepoError::InvalidSpec {
            repo: display.clone(),
            reason: reason.to_owned(),
        };
        if base.is_empty() {
            return Err(invalid("the URL is empty"));
        }
        if spec.suite.is_empty() {
            return Err(invalid("the suite is empty"));
        }
        if spec.suite.split('/').any(|part| part == "..") {
            return Err(invalid("the suite contains `..`"));
        }
        if spec.suite.ends_with('/') {
            // sources.list(5): "if the suite is an exact path, components must be omitted".
            if !spec.components.is_empty() {
                return Err(invalid("a flat repository (suite ending in `/`) takes no components"));
            }
            let dir = spec.suite.trim_start_matches("./").trim_start_matches('/');
            Ok(Layout {
                meta: format!("{base}/{dir}"),
                base,
                index_dirs: vec![String::new()],
                flat: true,
                display,
            })
        } else {
            if spec.components.is_empty() {
                return Err(invalid("no component given"));
            }
            if spec.arch.is_empty() || spec.arch.contains('/') {
                return Err(invalid("invalid architecture"));
            }
            let mut index_dirs = Vec::new();
            for c in &spec.components {
                if c.is_empty() || c.split('/').any(|p| p == ".." || p.is_empty()) {
                    return Err(invalid(&format!("invalid component `{c}`")));
                }
                index_dirs.push(format!("{c}/binary-{}/", spec.arch));
            }
            Ok(Layout {
                meta: format!("{base}/dists/{}/", spec.suite.trim_matches('/')),
                base,
                index_dirs,
                flat: false,
                display,
            })
        }
    }
}

/// Downloads, verifies and parses the package indices of one repository.
pub async fn fetch_index(client: &Client, spec: &RepoSpec) -> Result<RepoIndex, RepoError> {
    fetch_index_cached(client, spec, None).await
}

/// [`fetch_index`], keeping downloaded index files in `cache` named by their SHA256. The
/// Release (always fetched and verified) names the hash, and a cached file is checked against
/// it like a downloaded one, so the cache cannot feed in anything the signature does not cover.
pub async fn fetch_index_cached(
    client: &Client,
    spec: &RepoSpec,
    cache: Option<&std::path::Path>,
) -> Result<RepoIndex, RepoError> {
    let mut layout = Layout::new(spec)?;
    let keyring = Keyring::load(&spec.keyring)
        .map_err(|source| RepoError::Keyring { repo: layout.display.clone(), source })?;
    let (release_url, text) = fetch_release(client, &layout.meta, &keyring).await?;
    let release = Release::parse(&text, &release_url)?;
    release.check_dates(&release_url, now())?;
    if !layout.flat {
        for c in release.check_wanted(spec, &layout.meta)? {
            tracing::warn!("skipping component `{c}` of {}: the repository does not have it (apt skips it too)", layout.display);
            let dir = format!("{c}/binary-{}/", spec.arch);
            layout.index_dirs.retain(|d| *d != dir);
        }
    }
    let origin = release
        .origin
        .clone()
        .or_else(|| release.label.clone())
        .unwrap_or_else(|| layout.base.clone());

    let mut packages = Vec::new();
    for dir in &layout.index_dirs {
        // The Release also lists the uncompressed index's hash (mirrors need not serve it):
        // a cached decompressed copy checked against it skips both download and
        // decompression, and stays covered by the signature.
        let plain = format!("{dir}Packages");
        let plain_entry =
            release.sha256.get(&plain).cloned().filter(|e| {
                e.sha256.len() == 64 && e.sha256.bytes().all(|b| b.is_ascii_hexdigit())
            });
        let plain_cache =
            cache.zip(plain_entry.as_ref()).map(|(c, e)| c.join(e.sha256.to_ascii_lowercase()));
        let context = |url: String, file: String, entry: FileEntry| IndexContext {
            url,
            file,
            repo_meta: layout.meta.clone(),
            base: layout.base.clone(),
            origin: origin.clone(),
            repo: layout.display.clone(),
            entry,
            max_inflation: crate::packages::max_inflation(client),
        };
        if let (Some(path), Some(entry)) = (&plain_cache, &plain_entry) {
            if let Ok(f) = std::fs::File::open(path) {
                let ctx =
                    context(format!("{}{}", layout.meta, plain), plain.clone(), entry.clone());
                match read_streamed(Box::new(f), None, ctx, None, None).await {
                    Ok(parsed) => {
                        packages.extend(parsed);
                        continue;
                    }
                    Err(e) => tracing::warn!("ignoring cached index {}: {e}", path.display()),
                }
            }
        }
        let listed: Vec<(String, FileEntry)> = INDEX_NAMES
            .iter()
            .map(|name| format!("{dir}{name}"))
            .filter_map(|path| release.sha256.get(&path).map(|e| (path, e.clone())))
            .collect();
        if listed.is_empty() {
            return Err(RepoError::NoIndex { url: release_url, wanted: format!("{dir}Packages") });
        }
        for (i, (path, entry)) in listed.iter().enumerate() {
            let url = format!("{}{}", layout.meta, path);
            let hex_ok =
                entry.sha256.len() == 64 && entry.sha256.bytes().all(|b| b.is_ascii_hexdigit());
            // Without a Release entry for the decompressed index, the compressed file is what
            // is cached (and checked against its own entry when read again).
            let cached = cache.filter(|_| hex_ok && plain_cache.is_none()).map(|c| {
                c.join(format!("{}{}", entry.sha256.to_ascii_lowercase(), index_suffix(path)))
            });
            let ctx = context(url.clone(), path.clone(), entry.clone());
            let mut attempt = 0;
            let parsed = loop {
                let hit = cached.as_ref().and_then(|p| std::fs::File::open(p).ok());
                let from_cache = hit.is_some();
                let (src, failed): (Box<dyn Read + Send>, Option<Failed>) = match hit {
                    Some(f) => (Box::new(f), None),
                    None => match client.open_stream(&url).await {
                        Ok(Some((src, failed))) => (src, Some(failed)),
                        Ok(None) => break None,
                        Err(e) if e.is_transient() && attempt < RETRIES => {
                            attempt += 1;
                            Client::backoff(&e, attempt).await;
                            continue;
                        }
                        Err(e) => return Err(e.into()),
                    },
                };
                // Copies for the cache, kept only when everything checked out.
                let tee = |dest: Option<&std::path::PathBuf>| {
                    dest.and_then(|d| {
                        let dir = d.parent()?;
                        std::fs::create_dir_all(dir).ok()?;
                        tempfile::NamedTempFile::new_in(dir).ok().map(|t| (t, d.clone()))
                    })
                };
                let plain_tee = tee(plain_cache.as_ref());
                let compressed_tee = if from_cache { None } else { tee(cached.as_ref()) };
                let tees = index::Tees {
                    plain: plain_tee.as_ref().and_then(|(t, _)| t.reopen().ok()),
                    compressed: compressed_tee.as_ref().and_then(|(t, _)| t.reopen().ok()),
                };
                match read_streamed(src, failed, ctx.clone(), plain_entry.clone(), Some(tees)).await
                {
                    Ok(parsed) => {
                        for (tmp, dest) in plain_tee.into_iter().chain(compressed_tee) {
                            let _ = tmp.persist(dest);
                        }
                        break Some(parsed);
                    }
                    Err(e @ RepoError::Http(HttpError::Transfer { .. })) if attempt < RETRIES => {
                        attempt += 1;
                        Client::backoff(&e, attempt).await;
                    }
                    Err(e) => return Err(e),
                }
            };
            let Some(parsed) = parsed else {
                // apt tries the next compression the Release lists (Debian lists an
                // uncompressed `Packages` that is not on the mirrors).
                if i + 1 < listed.len() {
                    tracing::debug!("{url} is missing; trying the next index format");
                    continue;
                }
                return Err(RepoError::IndexMissing { url });
            };
            packages.extend(parsed);
            break;
        }
    }
    Ok(RepoIndex { packages })
}

/// Reads, checks and parses one index from `src` on the blocking pool (see [`index`]).
async fn read_streamed(
    src: Box<dyn Read + Send>,
    failed: Option<Failed>,
    ctx: IndexContext,
    plain: Option<FileEntry>,
    tees: Option<index::Tees>,
) -> Result<Vec<IndexedPackage>, RepoError> {
    tokio::task::spawn_blocking(move || {
        let expect = index::Expect { size: ctx.entry.size, sha256: ctx.entry.sha256.clone() };
        let plain_expect =
            plain.as_ref().map(|p| index::Expect { size: p.size, sha256: p.sha256.clone() });
        let source_failed = || failed.as_ref().and_then(|f| f.lock().expect("poisoned").clone());
        let plain_name = ctx.file.trim_end_matches(".xz").trim_end_matches(".gz").to_string();
        let bound = index::Bound { max: MAX_INDEX, inflation: ctx.max_inflation };
        let text = index::read_index(
            src,
            &ctx.file,
            &expect,
            plain_expect.as_ref(),
            bound,
            tees.unwrap_or_default(),
            &source_failed,
        )
        .map_err(|e| match e {
            index::StreamError::Source { message } => RepoError::Http(HttpError::Transfer {
                url: ctx.url.clone(),
                reason: message,
                retry: true,
            }),
            index::StreamError::Size { actual } => RepoError::SizeMismatch {
                file: ctx.file.clone(),
                repo: ctx.repo_meta.clone(),
                expected: ctx.entry.size,
                actual,
            },
            index::StreamError::Hash { actual } => RepoError::HashMismatch {
                file: ctx.file.clone(),
                repo: ctx.repo_meta.clone(),
                expected: ctx.entry.sha256.clone(),
                actual,
            },
            index::StreamError::PlainSize { actual } => RepoError::SizeMismatch {
                file: plain_name.clone(),
                repo: ctx.repo_meta.clone(),
                expected: plain.as_ref().map_or(0, |p| p.size),
                actual,
            },
            index::StreamError::PlainHash { actual } => RepoError::HashMismatch {
                file: plain_name.clone(),
                repo: ctx.repo_meta.clone(),
                expected: plain.as_ref().map(|p| p.sha256.clone()).unwrap_or_default(),
                actual,
            },
            index::StreamError::Decompress(source) => {
                RepoError::Decompress { url: ctx.url.clone(), source }
            }
            index::StreamError::Limit(exceeded) => {
                RepoError::Limit { url: ctx.url.clone(), exceeded }
            }
        })?;
        IndexedPackage::read_index(text, &ctx.url, &ctx.base, &ctx.origin, &ctx.repo)
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// `.xz`, `.gz` or nothing: cached files keep their compression in the name.
fn index_suffix(path: &str) -> &'static str {
    if path.ends_with(".xz") {
        ".xz"
    } else if path.ends_with(".gz") {
        ".gz"
    } else {
        ""
    }
}

/// Fetches `InRelease`, or `Release` and `Release.gpg` when there is no `InRelease`, and
/// returns the URL and the signed text.
async fn fetch_release(
    client: &Client,
    meta: &str,
    keyring: &Keyring,
) -> Result<(String, String), RepoError> {
    let in_release = format!("{meta}InRelease");
    if let Some(body) = get_meta(client, &in_release).await? {
        // A bad InRelease is an error; apt does not fall back to Release then.
        let text = verify_clearsigned_with(&body, keyring, now())
            .map_err(|e| RepoError::from(e).at(&in_release))?;
        return Ok((in_release, text));
    }
    let release = format!("{meta}Release");
    let Some(body) = get_meta(client, &release).await? else {
        return Err(RepoError::NoRelease { url: meta.to_owned() });
    };
    let sig_url = format!("{meta}Release.gpg");
    let Some(sig) = get_meta(client, &sig_url).await? else {
        return Err(RepoError::Unsigned { url: release });
    };
    verify_detached_with(&body, &sig, keyring, now())
        .map_err(|e| RepoError::from(e).at(&release))?;
    let text = String::from_utf8(body).map_err(|_| RepoError::MalformedRelease {
        url: release.clone(),
        reason: "not UTF-8".into(),
    })?;
    Ok((release, text))
}

async fn get_meta(client: &Client, url: &str) -> Result<Option<Vec<u8>>, RepoError> {
    Ok(client.get(url, MAX_META).await?)
}

/// What [`read_streamed`] needs to know, owned so it can run on the blocking pool.
#[derive(Clone)]
struct IndexContext {
    url: String,
    /// Path relative to the Release file, as the Release names it.
    file: String,
    repo_meta: String,
    base: String,
    origin: String,
    repo: String,
    entry: FileEntry,
    /// `--max-inflation`.
    max_inflation: u64,
}

// ---------------------------------------------------------------------------------------
// The Release file
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
struct FileEntry {
    sha256: String,
    size: u64,
}

#[derive(Debug)]
struct Release {
    origin: Option<String>,
    label: Option<String>,
    date: Option<i64>,
    valid_until: Option<i64>,
    architectures: Option<Vec<String>>,
    components: Option<Vec<String>>,
    /// Path relative to the Release file -> entry.
    sha256: HashMap<String, FileEntry>,
}

impl Release {
    fn parse(text: &str, url: &str) -> Result<Self, RepoError> {
        let malformed =
            |reason: String| RepoError::MalformedRelease { url: url.to_owned(), reason };
        let paragraph = deb822::parse(text)
            .map_err(|e| malformed(e.to_string()))?
            .into_iter()
            .next()
            .ok_or_else(|| malformed("it is empty".into()))?;
        let get = |name: &str| {
            paragraph.get(name).map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned)
        };
        let date_field = |name: &str| -> Result<Option<i64>, RepoError> {
            match get(name) {
                None => Ok(None),
                Some(v) => parse_rfc2822(&v)
                    .map(Some)
                    .ok_or_else(|| malformed(format!("invalid {name} `{v}`"))),
            }
        };
        let list =
            |name: &str| get(name).map(|v| v.split_whitespace().map(str::to_owned).collect());
        let Some(sums) = get("SHA256") else {
            // apt refuses a Release with only MD5Sum/SHA1 ("no Hash entry ... strong enough").
            return Err(malformed("it has no SHA256 checksums".into()));
        };
        let mut sha256 = HashMap::new();
        for line in sums.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let parts: Vec<&str> = line.split_whitespace().collect();
            let [hash, size, path] = parts[..] else {
                return Err(malformed(format!("invalid SHA256 line `{line}`")));
            };
            let size: u64 = size
                .parse()
                .map_err(|_| malformed(format!("invalid size in SHA256 line `{line}`")))?;
            if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(malformed(format!("invalid hash in SHA256 line `{line}`")));
            }
            sha256.insert(path.to_owned(), FileEntry { sha256: hash.to_ascii_lowercase(), size });
        }
        Ok(Release {
            origin: get("Origin"),
            label: get("Label"),
            date: date_field("Date")?,
            valid_until: date_field("Valid-Until")?,
            architectures: list("Architectures"),
            components: list("Components"),
            sha256,
        })
    }

    /// apt's `Valid-Until` check (apt-secure(8): protection against replayed old metadata)
    /// and its check that the file is not dated in the future.
    fn check_dates(&self, url: &str, now: i64) -> Result<(), RepoError> {
        if let Some(until) = self.valid_until {
            if now > until {
                return Err(RepoError::Expired {
                    url: url.to_owned(),
                    valid_until: format_utc(until),
                });
            }
        }
        if let Some(date) = self.date {
            if date > now + MAX_FUTURE {
                return Err(RepoError::NotYetValid { url: url.to_owned(), date: format_utc(date) });
            }
        }
        Ok(())
    }

    /// Checks the architecture and components a source asks for against the Release's lists.
    /// Returns the components the Release lacks: apt skips those with a warning ("Skipping
    /// acquire of configured file … as repository … doesn't have the component"), and so do we,
    /// unless the Release has none of them.
    fn check_wanted(&self, spec: &RepoSpec, repo: &str) -> Result<Vec<String>, RepoError> {
        if let Some(archs) = &self.architectures {
            if !archs.contains(&spec.arch) {
                return Err(RepoError::NoArchitecture {
                    repo: repo.to_owned(),
                    arch: spec.arch.clone(),
                    available: archs.join(", "),
                });
            }
        }
        let mut missing = Vec::new();
        if let Some(comps) = &self.components {
            for c in &spec.components {
                // Old security archives list `updates/main` for the component `main`; apt
                // matches on the last path element.
                let has = comps
                    .iter()
                    .any(|have| have == c || have.rsplit('/').next() == Some(c.as_str()));
                if !has {
                    missing.push(c.clone());
                }
            }
            if !missing.is_empty() && missing.len() == spec.components.len() {
                return Err(RepoError::NoComponent {
                    repo: repo.to_owned(),
                    component: missing[0].clone(),
                    available: comps.join(", "),
                });
            }
        }
        Ok(missing)
    }
}

// ---------------------------------------------------------------------------------------
// Dates (RFC 2822 as apt writes and reads them: `Sat, 11 Jul 2026 10:16:37 UTC`)
// ---------------------------------------------------------------------------------------

/// Parses `[Day,] DD Mon YYYY HH:MM[:SS] [zone]`, zone `UTC`, `GMT`, `UT`, `Z` or `±hhmm`
/// (apt's `RFC1123StrToTime` accepts the same forms). Seconds since the epoch.
fn parse_rfc2822(s: &str) -> Option<i64> {
    let mut tokens: Vec<&str> = s.split_whitespace().collect();
    if tokens.first()?.ends_with(',') || tokens.first()?.chars().all(|c| c.is_ascii_alphabetic()) {
        tokens.remove(0);
    }
    let (day, month, year, time) = match tokens[..] {
        [d, m, y, t] | [d, m, y, t, _] => (d, m, y, t),
        _ => return None,
    };
    let zone = tokens.get(4).copied().unwrap_or("UTC");
    let day: u32 = day.parse().ok().filter(|d| (1..=31).contains(d))?;
    const MONTHS: [&str; 12] =
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
    let month = MONTHS.iter().position(|m| m.eq_ignore_ascii_case(month))? as u32 + 1;
    let year: i64 = year.parse().ok().filter(|y| (1970..=9999).contains(y))?;
    let mut hms = time.split(':').map(|p| p.parse::<i64>().ok());
    let h = hms.next()??;
    let mi = hms.next()??;
    let sec = hms.next().unwrap_or(Some(0))?;
    if hms.next().is_some()
        || !(0..24).contains(&h)
        || !(0..60).contains(&mi)
        || !(0..=60).contains(&sec)
    {
        return None;
    }
    let offset = match zone {
        z if ["UTC", "GMT", "UT", "Z"].iter().any(|u| u.eq_ignore_ascii_case(z)) => 0,
        z if z.len() == 5 && (z.starts_with('+') || z.starts_with('-')) => {
            let hh: i64 = z[1..3].parse().ok()?;
            let mm: i64 = z[3..5].parse().ok()?;
            let off = hh * 3600 + mm * 60;
            if z.starts_with('-') {
                -off
            } else {
                off
            }
        }
        _ => return None,
    };
    Some(days_from_civil(year, month, day) * 86_400 + h * 3600 + mi * 60 + sec - offset)
}

/// Verifies a clear-signed message (an `InRelease` file) against `keyring` and returns the
/// signed text only, with LF line endings.
pub fn verify_clearsigned(text: &[u8], keyring: &[u8]) -> Result<String, RepoError> {
    let keyring = Keyring::load(keyring).map_err(RepoError::Signature)?;
    Ok(verify_clearsigned_with(text, &keyring, now())?)
}

/// Verifies a detached signature (`Release.gpg`, armoured or binary) over `data`.
pub fn verify_detached(data: &[u8], sig: &[u8], keyring: &[u8]) -> Result<(), RepoError> {
    let keyring = Keyring::load(keyring).map_err(RepoError::Signature)?;
    Ok(verify_detached_with(data, sig, &keyring, now())?)
}

// ---------------------------------------------------------------------------------------
// OpenPGP
// ---------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// sources.list and .sources
// ---------------------------------------------------------------------------------------

/// apt's boolean option values (`StringToBool`).
fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "yes" | "true" | "with" | "on" | "enable" | "1" => Some(true),
        "no" | "false" | "without" | "off" | "disable" | "0" => Some(false),
        _ => None,
    }
}

fn split_list(v: &str) -> Vec<String> {
    v.split([',', ' ', '\t', '\n']).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

/// Parses one-line-style sources (`/etc/apt/sources.list`, `*.list`), sources.list(5):
/// `deb [ option=value ... ] URI suite [component ...]`. Comments (`#` to the end of the
/// line) and blank lines are skipped; malformed lines are skipped with a warning, as the
/// signature gives no way to report them.
pub fn parse_one_line_sources(text: &str) -> Vec<SourceEntry> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let warn =
            |why: &str| tracing::warn!("sources.list line {}: {why}: `{}`", n + 1, raw.trim());
        let (kind, mut rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        if kind != "deb" && kind != "deb-src" {
            warn("unknown type");
            continue;
        }
        let mut entry = SourceEntry { types: vec![kind.to_owned()], ..SourceEntry::default() };
        rest = rest.trim_start();
        if let Some(opts) = rest.strip_prefix('[') {
            let Some((opts, after)) = opts.split_once(']') else {
                warn("unterminated `[` options");
                continue;
            };
            rest = after;
            for opt in opts.split_whitespace() {
                let Some((key, value)) = opt.split_once('=') else {
                    warn("option without `=`");
                    continue;
                };
                match key {
                    "arch" => entry.arch = Some(split_list(value)),
                    "signed-by" => entry.signed_by = Some(value.to_owned()),
                    "trusted" => entry.trusted = parse_bool(value).unwrap_or(false),
                    _ => tracing::debug!("sources.list line {}: ignoring option `{key}`", n + 1),
                }
            }
        }
        let mut words = rest.split_whitespace();
        let (Some(uri), Some(suite)) = (words.next(), words.next()) else {
            warn("expected a URI and a suite");
            continue;
        };
        entry.uris.push(uri.to_owned());
        entry.suites.push(suite.to_owned());
        entry.components = words.map(str::to_owned).collect();
        out.push(entry);
    }
    out
}

/// The text of an inline `Signed-By` key block, as a key file would hold it: deb822's
/// continuation indentation removed and ` .` lines turned back into blank lines.
fn inline_key_block(value: &str) -> String {
    let mut out = String::new();
    for line in value.lines() {
        let line = line.strip_prefix([' ', '\t']).unwrap_or(line).trim_end();
        if out.is_empty() && line.is_empty() {
            continue;
        }
        out.push_str(if line == "." { "" } else { line });
        out.push('\n');
    }
    out
}

/// Parses deb822-style sources (`*.sources`, sources.list(5) "DEB822-STYLE FORMAT").
/// Stanzas with `Enabled: no` are left out; malformed stanzas are skipped with a warning.
pub fn parse_deb822_sources(text: &str) -> Vec<SourceEntry> {
    // Parse stanza by stanza so that one broken stanza does not hide the others.
    let mut stanzas = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            if !current.trim().is_empty() {
                stanzas.push(std::mem::take(&mut current));
            }
            current.clear();
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    if !current.trim().is_empty() {
        stanzas.push(current);
    }
    let mut out = Vec::new();
    for stanza in stanzas {
        let paragraphs = match deb822::parse(&stanza) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("skipping a malformed .sources stanza: {e}");
                continue;
            }
        };
        for p in paragraphs {
            let list = |name: &str| p.get(name).map(split_list).unwrap_or_default();
            if p.get("Enabled").and_then(parse_bool) == Some(false) {
                continue;
            }
            let entry = SourceEntry {
                types: list("Types"),
                uris: list("URIs"),
                suites: list("Suites"),
                components: list("Components"),
                signed_by: p.get("Signed-By").map(|v| {
                    if v.contains("-----BEGIN PGP") {
                        inline_key_block(v)
                    } else {
                        v.split_whitespace().collect::<Vec<_>>().join(" ")
                    }
                }),
                arch: p.get("Architectures").map(split_list),
                trusted: p.get("Trusted").and_then(parse_bool).unwrap_or(false),
            };
            if entry.types.is_empty() || entry.uris.is_empty() || entry.suites.is_empty() {
                tracing::warn!("skipping a .sources stanza without Types, URIs or Suites");
                continue;
            }
            out.push(entry);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use erdma_common::dates::civil_from_days;
    use sha2::{Digest as _, Sha256};
    use std::io::Write as _;
    use std::net::{TcpListener, TcpStream};
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::time::Duration;
    use std::time::Instant;

    // -----------------------------------------------------------------------------------
    // Helpers: a throw-away GnuPG home, a local HTTP server, a signed repository.
    // -----------------------------------------------------------------------------------

    /// A temporary GNUPGHOME; its gpg-agent is stopped on drop.
    struct Gpg {
        home: tempfile::TempDir,
    }

    impl Gpg {
        fn new() -> Self {
            // Short path: the agent's socket lives in it (sockaddr_un holds 108 bytes).
            let home = tempfile::Builder::new()
                .prefix("gpg")
                .tempdir_in("/tmp")
                .expect("creating a GNUPGHOME");
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
            Gpg { home }
        }

        fn run(&self, args: &[&str]) -> Vec<u8> {
            let out = Command::new("gpg")
                .env("GNUPGHOME", self.home.path())
                .args(["--batch", "--no-tty", "--pinentry-mode", "loopback", "--passphrase", ""])
                .args(args)
                .stdin(Stdio::null())
                .output()
                .expect("running gpg (is gnupg installed?)");
            assert!(
                out.status.success(),
                "gpg {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        }

        /// `gpg --quick-gen-key`; returns the primary key's fingerprint.
        fn gen_key(
            &self,
            email: &str,
            algo: &str,
            usage: &str,
            expire: &str,
            extra: &[&str],
        ) -> String {
            let uid = format!("Test {email} <{email}>");
            let mut args = extra.to_vec();
            args.extend(["--quick-gen-key", &uid, algo, usage, expire]);
            self.run(&args);
            self.fingerprints(email)[0].clone()
        }

        /// Fingerprints of the primary key and subkeys of `email`, in order.
        fn fingerprints(&self, email: &str) -> Vec<String> {
            let out = self.run(&["--with-colons", "--list-keys", email]);
            String::from_utf8(out)
                .unwrap()
                .lines()
                .filter(|l| l.starts_with("fpr:"))
                .map(|l| l.split(':').nth(9).unwrap().to_owned())
                .collect()
        }

        fn export(&self, who: &str, armor: bool) -> Vec<u8> {
            let mut args = vec!["--export"];
            if armor {
                args.insert(0, "--armor");
            }
            args.push(who);
            let out = self.run(&args);
            assert!(!out.is_empty(), "gpg exported nothing for {who}");
            out
        }

        fn sign(&self, signer: &str, data: &[u8], mode: &[&str], extra: &[&str]) -> Vec<u8> {
            let input = self.home.path().join("input");
            let output = self.home.path().join("output");
            std::fs::write(&input, data).unwrap();
            let _ = std::fs::remove_file(&output);
            let mut args = extra.to_vec();
            args.extend(["--yes", "--local-user", signer]);
            args.extend(mode);
            args.extend(["--output", output.to_str().unwrap(), input.to_str().unwrap()]);
            self.run(&args);
            std::fs::read(&output).unwrap()
        }

        fn clearsign(&self, signer: &str, data: &[u8]) -> Vec<u8> {
            self.sign(signer, data, &["--clearsign"], &[])
        }

        /// `gpg -abs` (armoured) or `gpg -bs` (binary).
        fn detach_sign(&self, signer: &str, data: &[u8], armor: bool) -> Vec<u8> {
            let mode: &[&str] =
                if armor { &["--armor", "--detach-sign"] } else { &["--detach-sign"] };
            self.sign(signer, data, mode, &[])
        }
    }

    impl Drop for Gpg {
        fn drop(&mut self) {
            let _ = Command::new("gpgconf")
                .env("GNUPGHOME", self.home.path())
                .args(["--kill", "gpg-agent"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// `python3 -m http.server` serving a directory on 127.0.0.1; killed on drop.
    struct HttpServer {
        child: Child,
        url: String,
    }

    impl HttpServer {
        fn start(dir: &Path) -> Self {
            let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let child = Command::new("python3")
                .args([
                    "-m",
                    "http.server",
                    "--bind",
                    "127.0.0.1",
                    &port.to_string(),
                    "--directory",
                ])
                .arg(dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("starting python3 -m http.server");
            let server = HttpServer { child, url: format!("http://127.0.0.1:{port}") };
            let deadline = Instant::now() + Duration::from_secs(30);
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(Instant::now() < deadline, "http.server did not start on port {port}");
                std::thread::sleep(Duration::from_millis(50));
            }
            server
        }
    }

    impl Drop for HttpServer {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    const DEB_SHA: &str = "5d41402abc4b2a76b9719d911017c592aaf4c6f8c2a0c8f8f4c6f8c2a0c8f8f4";

    fn packages_text(prefix: &str) -> String {
        format!(
            "Package: erdma-tools\n\
             Version: 1.0-1\n\
             Architecture: amd64\n\
             Depends: libc6 (>= 2.34), liberdma1 (= 1.0-1)\n\
             Filename: {prefix}erdma-tools_1.0-1_amd64.deb\n\
             Size: 1234\n\
             SHA256: {DEB_SHA}\n\
             Description: eRDMA tools\n \
             Tools for the Alibaba Cloud elastic RDMA adapter.\n\
             \n\
             Package: liberdma1\n\
             Version: 1.0-1\n\
             Architecture: amd64\n\
             Filename: {prefix}liberdma1_1.0-1_amd64.deb\n\
             Size: 99\n\
             SHA256: {}\n\
             Description: eRDMA provider for libibverbs\n",
            "AB".repeat(32)
        )
    }

    fn compress(name: &str, data: &[u8]) -> Vec<u8> {
        if name.ends_with(".xz") {
            let mut e = liblzma::write::XzEncoder::new(Vec::new(), 6);
            e.write_all(data).unwrap();
            e.finish().unwrap()
        } else if name.ends_with(".gz") {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        } else {
            data.to_vec()
        }
    }

    fn rfc2822(secs: i64) -> String {
        const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
        const MONTHS: [&str; 12] =
            ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
        let days = secs.div_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        let s = secs.rem_euclid(86_400);
        format!(
            "{}, {d:02} {} {y} {:02}:{:02}:{:02} UTC",
            DAYS[days.rem_euclid(7) as usize],
            MONTHS[m as usize - 1],
            s / 3600,
            s / 60 % 60,
            s % 60
        )
    }

    fn apt_ftparchive_available() -> bool {
        Command::new("apt-ftparchive")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// A Release written by hand: `header`, then the SHA256 of every index under `meta`.
    fn hand_release(meta: &Path, header: &str) -> String {
        fn walk(dir: &Path, base: &Path, out: &mut Vec<(String, Vec<u8>)>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, base, out);
                } else if p.file_name().unwrap().to_str().unwrap().starts_with("Packages") {
                    let rel = p.strip_prefix(base).unwrap().to_str().unwrap().to_owned();
                    out.push((rel, std::fs::read(&p).unwrap()));
                }
            }
        }
        let mut files = Vec::new();
        walk(meta, meta, &mut files);
        files.sort();
        let mut text = header.to_owned();
        text.push_str("SHA256:\n");
        for (rel, data) in files {
            text.push_str(&format!(
                " {} {:>8} {rel}\n",
                hex::encode(Sha256::digest(&data)),
                data.len()
            ));
        }
        text
    }

    /// A signed repository in a temporary directory, to be served over HTTP.
    struct Fixture {
        root: tempfile::TempDir,
        gpg: Gpg,
        fpr: String,
        keyring: Vec<u8>,
    }

    impl Fixture {
        fn new() -> Self {
            let gpg = Gpg::new();
            let fpr = gpg.gen_key("repo@example.org", "ed25519", "sign", "never", &[]);
            let keyring = gpg.export(&fpr, false);
            Fixture { root: tempfile::tempdir().unwrap(), gpg, fpr, keyring }
        }

        /// Writes `index_dir/Packages.{formats}` below `root/meta_rel`, a Release for them
        /// (by apt-ftparchive unless `header` asks for a hand-written one), InRelease and
        /// Release.gpg. Returns the metadata directory.
        fn publish(
            &self,
            meta_rel: &str,
            index_dir: &str,
            formats: &[&str],
            filename_prefix: &str,
            components: Option<&str>,
            header: Option<&str>,
        ) -> PathBuf {
            let meta = self.root.path().join(meta_rel);
            let idx = meta.join(index_dir);
            std::fs::create_dir_all(&idx).unwrap();
            let text = packages_text(filename_prefix);
            for f in formats {
                let name = format!("Packages{f}");
                std::fs::write(idx.join(&name), compress(&name, text.as_bytes())).unwrap();
            }
            let release = match header {
                None if apt_ftparchive_available() => {
                    let mut cmd = Command::new("apt-ftparchive");
                    for (k, v) in [
                        ("Origin", "erdma-test"),
                        ("Label", "erdma"),
                        ("Suite", "bookworm"),
                        ("Codename", "bookworm"),
                        ("Architectures", "amd64 arm64"),
                    ] {
                        cmd.arg("-o").arg(format!("APT::FTPArchive::Release::{k}={v}"));
                    }
                    if let Some(c) = components {
                        cmd.arg("-o").arg(format!("APT::FTPArchive::Release::Components={c}"));
                    }
                    let out = cmd.args(["release", "."]).current_dir(&meta).output().unwrap();
                    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                    String::from_utf8(out.stdout).unwrap()
                }
                None => {
                    let mut h = format!(
                        "Origin: erdma-test\nLabel: erdma\nSuite: bookworm\nCodename: bookworm\n\
                         Date: {}\nArchitectures: amd64 arm64\n",
                        rfc2822(now())
                    );
                    if let Some(c) = components {
                        h.push_str(&format!("Components: {c}\n"));
                    }
                    hand_release(&meta, &h)
                }
                Some(h) => hand_release(&meta, h),
            };
            self.sign_release(&meta, release.as_bytes());
            meta
        }

        fn sign_release(&self, meta: &Path, release: &[u8]) {
            std::fs::write(meta.join("Release"), release).unwrap();
            std::fs::write(meta.join("InRelease"), self.gpg.clearsign(&self.fpr, release)).unwrap();
            std::fs::write(
                meta.join("Release.gpg"),
                self.gpg.detach_sign(&self.fpr, release, true),
            )
            .unwrap();
        }

        fn spec(&self, url: &str, suite: &str, components: &[&str]) -> RepoSpec {
            RepoSpec {
                url: url.to_owned(),
                suite: suite.to_owned(),
                components: components.iter().map(|c| c.to_string()).collect(),
                arch: "amd64".into(),
                keyring: self.keyring.clone(),
            }
        }
    }

    fn client() -> Client {
        Client::new(erdma_http::Timeouts::default()).unwrap()
    }

    fn err_chain(e: &dyn std::error::Error) -> String {
        let mut s = e.to_string();
        let mut cur = e.source();
        while let Some(c) = cur {
            s.push_str(": ");
            s.push_str(&c.to_string());
            cur = c.source();
        }
        s
    }

    const RELEASE: &str = "Origin: erdma-test\nLabel: erdma\nSuite: bookworm\n\
        Description: a line\n -starting with a dash inside a continuation\n\
        -----\nSHA256:\n 0000000000000000000000000000000000000000000000000000000000000000 1 main/x\n";

    // -----------------------------------------------------------------------------------
    // OpenPGP
    // -----------------------------------------------------------------------------------

    #[test]
    fn clearsigned_verifies_with_binary_and_armoured_keyrings() {
        let gpg = Gpg::new();
        for (email, algo) in [("ed@example.org", "ed25519"), ("rsa@example.org", "rsa3072")] {
            let fpr = gpg.gen_key(email, algo, "sign", "never", &[]);
            let signed = gpg.clearsign(&fpr, RELEASE.as_bytes());
            for armor in [false, true] {
                let keyring = gpg.export(&fpr, armor);
                let text = verify_clearsigned(&signed, &keyring)
                    .unwrap_or_else(|e| panic!("{algo}, armour {armor}: {}", err_chain(&e)));
                assert_eq!(text, RELEASE, "{algo}: the signed text, dash-escaping undone");
            }
        }
    }

    #[test]
    fn tampered_clearsigned_text_is_refused() {
        let gpg = Gpg::new();
        let fpr = gpg.gen_key("t@example.org", "ed25519", "sign", "never", &[]);
        let signed = String::from_utf8(gpg.clearsign(&fpr, RELEASE.as_bytes())).unwrap();
        let keyring = gpg.export(&fpr, false);
        let tampered = signed.replace("Suite: bookworm", "Suite: bookwarm");
        assert_ne!(tampered, signed);
        let e = verify_clearsigned(tampered.as_bytes(), &keyring).unwrap_err();
        assert!(matches!(e, RepoError::Signature(SignatureError::Bad { .. })), "{e:?}");
        assert!(e.to_string().contains(&fpr), "{e}");

        // Text outside the signed block is refused, not silently dropped or used.
        let before = format!("Injected: yes\n\n{signed}");
        assert!(verify_clearsigned(before.as_bytes(), &keyring).is_err());
        let after = format!("{signed}\nInjected: yes\n");
        assert!(verify_clearsigned(after.as_bytes(), &keyring).is_err());
        // Not a signed message at all.
        let e = verify_clearsigned(RELEASE.as_bytes(), &keyring).unwrap_err();
        assert!(e.to_string().contains("not a clear-signed message"), "{e}");
    }

    #[test]
    fn signature_by_a_key_outside_the_keyring_is_refused() {
        let gpg = Gpg::new();
        let trusted = gpg.gen_key("trusted@example.org", "ed25519", "sign", "never", &[]);
        let other = gpg.gen_key("other@example.org", "ed25519", "sign", "never", &[]);
        let keyring = gpg.export(&trusted, false);
        let signed = gpg.clearsign(&other, RELEASE.as_bytes());
        let e = verify_clearsigned(&signed, &keyring).unwrap_err();
        let msg = err_chain(&e);
        assert!(msg.contains("not in the keyring") && msg.contains(&other), "{msg}");
        let sig = gpg.detach_sign(&other, RELEASE.as_bytes(), true);
        assert!(verify_detached(RELEASE.as_bytes(), &sig, &keyring).is_err());
        // An empty keyring is an error of its own.
        let e = verify_clearsigned(&signed, b"").unwrap_err();
        assert!(matches!(e, RepoError::Signature(SignatureError::EmptyKeyring)), "{e:?}");
    }

    #[test]
    fn any_key_of_a_keyring_of_several_may_sign() {
        let gpg = Gpg::new();
        let first = gpg.gen_key("first@example.org", "ed25519", "sign", "never", &[]);
        let second = gpg.gen_key("second@example.org", "rsa3072", "sign", "never", &[]);
        let signed = gpg.clearsign(&second, RELEASE.as_bytes());
        // Binary keys concatenated, as in debian-archive-keyring.gpg.
        let mut binary = gpg.export(&first, false);
        binary.extend(gpg.export(&second, false));
        assert_eq!(verify_clearsigned(&signed, &binary).unwrap(), RELEASE);
        // Two armour blocks one after the other, as `cat a.asc b.asc` makes.
        let mut armoured = b"# keys of the test archive\n".to_vec();
        armoured.extend(gpg.export(&first, true));
        armoured.extend(b"\n");
        armoured.extend(gpg.export(&second, true));
        assert_eq!(verify_clearsigned(&signed, &armoured).unwrap(), RELEASE);
        // One armour block holding both keys.
        let both = gpg.run(&["--armor", "--export", &first, &second]);
        assert_eq!(verify_clearsigned(&signed, &both).unwrap(), RELEASE);
    }

    #[test]
    fn detached_signatures_armoured_and_binary() {
        let gpg = Gpg::new();
        let fpr = gpg.gen_key("d@example.org", "rsa3072", "sign", "never", &[]);
        let keyring = gpg.export(&fpr, true);
        for armor in [true, false] {
            let sig = gpg.detach_sign(&fpr, RELEASE.as_bytes(), armor);
            verify_detached(RELEASE.as_bytes(), &sig, &keyring)
                .unwrap_or_else(|e| panic!("armour {armor}: {}", err_chain(&e)));
            let mut tampered = RELEASE.as_bytes().to_vec();
            tampered[0] = b'o';
            let e = verify_detached(&tampered, &sig, &keyring).unwrap_err();
            assert!(matches!(e, RepoError::Signature(SignatureError::Bad { .. })), "{e:?}");
        }
        let e = verify_detached(RELEASE.as_bytes(), b"garbage", &keyring).unwrap_err();
        assert!(matches!(e, RepoError::Signature(SignatureError::Malformed(_))), "{e:?}");
    }

    #[test]
    fn signing_subkey_verifies() {
        let gpg = Gpg::new();
        let primary = gpg.gen_key("sub@example.org", "ed25519", "cert", "never", &[]);
        gpg.run(&["--quick-add-key", &primary, "rsa3072", "sign", "never"]);
        let fprs = gpg.fingerprints("sub@example.org");
        assert_eq!(fprs.len(), 2);
        let signed = gpg.clearsign(&format!("{}!", fprs[1]), RELEASE.as_bytes());
        let keyring = gpg.export(&primary, false);
        assert_eq!(verify_clearsigned(&signed, &keyring).unwrap(), RELEASE);
    }

    #[test]
    fn expired_key_is_refused() {
        let gpg = Gpg::new();
        // Made and used in 2020, valid for one day.
        let fpr = gpg.gen_key(
            "old@example.org",
            "ed25519",
            "sign",
            "1d",
            &["--faked-system-time", "20200101T000000!"],
        );
        let signed = gpg.sign(
            &fpr,
            RELEASE.as_bytes(),
            &["--clearsign"],
            &["--faked-system-time", "20200101T010000!"],
        );
        let keyring = gpg.export(&fpr, false);
        let e = verify_clearsigned(&signed, &keyring).unwrap_err();
        let msg = err_chain(&e);
        assert!(msg.contains("expired since 2020-01-02"), "{msg}");
        // The same key and signature were fine back then.
        let k = Keyring::load(&keyring).unwrap();
        let then = parse_rfc2822("1 Jan 2020 12:00:00 UTC").unwrap();
        verify_clearsigned_with(&signed, &k, then).unwrap();
    }

    #[test]
    fn revoked_key_is_refused() {
        let gpg = Gpg::new();
        let fpr = gpg.gen_key("rev@example.org", "ed25519", "sign", "never", &[]);
        let signed = gpg.clearsign(&fpr, RELEASE.as_bytes());
        verify_clearsigned(&signed, &gpg.export(&fpr, false)).unwrap();
        // gpg stores a revocation certificate at key generation, its armour line
        // prefixed with ':' against accidental import.
        let rev = gpg.home.path().join(format!("openpgp-revocs.d/{fpr}.rev"));
        let cert = std::fs::read_to_string(&rev).unwrap().replace(":-----BEGIN", "-----BEGIN");
        std::fs::write(&rev, cert).unwrap();
        gpg.run(&["--import", rev.to_str().unwrap()]);
        let e = verify_clearsigned(&signed, &gpg.export(&fpr, false)).unwrap_err();
        assert!(err_chain(&e).contains("key revoked"), "{}", err_chain(&e));
    }

    #[test]
    fn loads_the_debian_archive_keyring() {
        let path = Path::new("/usr/share/keyrings/debian-archive-keyring.gpg");
        let Ok(data) = std::fs::read(path) else {
            eprintln!("skipping: {} is not installed", path.display());
            return;
        };
        let k = Keyring::load(&data).unwrap();
        assert!(k.keys.len() >= 3, "{} keys", k.keys.len());
    }

    // -----------------------------------------------------------------------------------
    // Release, dates, layouts, sources
    // -----------------------------------------------------------------------------------

    #[test]
    fn parses_rfc2822_dates() {
        assert_eq!(parse_rfc2822("Sat, 11 Jul 2026 10:16:37 UTC"), Some(1_783_764_997));
        assert_eq!(parse_rfc2822("Thu, 29 Feb 2024 23:59:59 +0200"), Some(1_709_243_999));
        assert_eq!(parse_rfc2822("1 Mar 2000 00:00 GMT"), Some(951_868_800));
        assert_eq!(parse_rfc2822("Thu, 01 Jan 1970 00:00:00 Z"), Some(0));
        assert_eq!(parse_rfc2822("2026-07-11 10:16:37"), None);
        assert_eq!(parse_rfc2822("Sat, 11 Foo 2026 10:16:37 UTC"), None);
        assert_eq!(parse_rfc2822("Sat, 11 Jul 2026 10:16:37 CEST"), None);
        assert_eq!(format_utc(1_783_764_997), "2026-07-11 10:16:37 UTC");
        for t in [0, 951_868_800, 1_709_243_999, 1_783_764_997] {
            assert_eq!(parse_rfc2822(&rfc2822(t)), Some(t), "{}", rfc2822(t));
        }
    }

    const RELEASE_FIELDS: &str = "Origin: Debian\nLabel: Debian-Security\nSuite: oldstable-security\n\
        Date: Sat, 11 Jul 2026 10:16:37 UTC\nValid-Until: Sat, 18 Jul 2026 10:16:37 UTC\n\
        Architectures: amd64 arm64\nComponents: updates/main contrib\n\
        MD5Sum:\n 0ed6d4c8891eb86358b94bb35d9e4da4 1 main/binary-amd64/Packages.xz\n\
        SHA256:\n 9E0B5AABB2465B3D2E7A7FE27F9913846277833F7A2826E7767ACCCFF5B588C5  8790396 main/binary-amd64/Packages.xz\n \
        515e692f2c4121c6fcec444ef100cc18f79a991910615f3a88c8b7becfc94d2f 50060337 main/binary-amd64/Packages\n";

    fn read(text: &str) -> Result<Vec<IndexedPackage>, RepoError> {
        IndexedPackage::read_index(
            text.to_owned(),
            "http://repo.test/Packages",
            "http://repo.test",
            "Test",
            "http://repo.test bookworm",
        )
    }

    #[test]
    fn index_stanzas_are_read_lazily() {
        let sha = "AB".repeat(32);
        let text = format!(
            "Package: a\nVersion: 1.0-1\nArchitecture: amd64\nDepends: b (>= 2)\nFilename: ./pool/a.deb\nSize: 10\nSHA256: {sha}\n\n\
             # a comment between stanzas\n\
             Package: b\r\nVersion: 2\r\nProvides: x,\r\n y (= 1)\r\nFilename: pool/b.deb \r\nSize: 20\r\nSHA256: {sha}\r\n\r\n\
             Package: c\nProvides: z,\n# inside\n w\nFilename: pool/c.deb\nSize: 30\nSHA256: {sha}\n"
        );
        let pkgs = read(&text).unwrap();
        assert_eq!(pkgs.len(), 3);
        let [a, b, c] = &pkgs[..] else { unreachable!() };
        assert_eq!(
            (a.name(), a.version(), a.arch(), a.provides()),
            ("a", Some("1.0-1"), Some("amd64"), None)
        );
        assert_eq!(a.url(), "http://repo.test/pool/a.deb");
        assert_eq!(a.sha256(), "ab".repeat(32));
        assert_eq!((a.size(), a.origin(), a.repo()), (10, "Test", "http://repo.test bookworm"));
        assert!(a.paragraph.get().is_none(), "not parsed until asked");
        assert_eq!(a.paragraph().unwrap().get("Depends"), Some("b (>= 2)"));
        assert!(a.paragraph.get().is_some());
        // A CRLF continuation and a comment inside a value read as deb822 reads them.
        assert_eq!((b.name(), b.provides(), b.size()), ("b", Some("x,\n y (= 1)"), 20));
        assert_eq!(b.url(), "http://repo.test/pool/b.deb");
        assert_eq!(c.provides(), Some("z,\n w"));
        for (pkg, parsed) in pkgs.iter().zip(deb822::parse(&text).unwrap()) {
            assert_eq!(pkg.paragraph().unwrap(), &parsed);
        }
        // Debug names the package, not the whole index.
        let debug = format!("{a:?}");
        assert!(debug.contains("\"a\"") && !debug.contains("Package: b"), "{debug}");
        assert!(read("").unwrap().is_empty());
    }

    #[test]
    fn malformed_index_stanzas_are_refused() {
        let sha = "ab".repeat(32);
        let good = format!("Package: a\nFilename: a.deb\nSize: 1\nSHA256: {sha}\n\n");
        let err = |text: &str| read(&format!("{good}{text}")).unwrap_err().to_string();
        let at = "malformed Packages index http://repo.test/Packages";
        // Syntax errors are found in every stanza, with the line in the whole index.
        assert_eq!(
            read(&format!("{good}Package: b\nFilename: b.deb\npackage: c\n"))
                .unwrap_err()
                .to_string(),
            at
        );
        match read(&format!("{good}Package: b\nFilename: b.deb\npackage: c\n")).unwrap_err() {
            RepoError::IndexSyntax { source, .. } => {
                assert_eq!(source, Deb822Error::DuplicateField { line: 8, name: "package".into() })
            }
            e => panic!("{e}"),
        }
        assert_eq!(err("Version: 1\n"), format!("{at}: a stanza has no Package field"));
        assert_eq!(
            err("Package: b\nSize: 1\nSHA256: {sha}\n"),
            format!("{at}: package `b` has no Filename field")
        );
        assert_eq!(
            err(&format!("Package: b\nFilename: b.deb\nSHA256: {sha}\n")),
            format!("{at}: package `b` has no Size field")
        );
        assert_eq!(
            err("Package: b\nFilename: b.deb\nSize: 1\nSHA256:\n"),
            format!("{at}: package `b` has no SHA256 field")
        );
        assert_eq!(
            err("Package: b\nFilename: b.deb\nSize: 1\nSHA256: XYZ\n"),
            format!("{at}: package `b` has an invalid SHA256 `xyz`")
        );
        assert_eq!(
            err(&format!("Package: b\nFilename: b.deb\nSize: -1\nSHA256: {sha}\n")),
            format!("{at}: package `b` has an invalid Size `-1`")
        );
        assert_eq!(
            err(&format!("Package: b\nFilename: ../b.deb\nSize: 1\nSHA256: {sha}\n")),
            format!("{at}: package `b` has an invalid Filename `../b.deb`")
        );
        assert_eq!(
            err(&format!("Package: b\nFilename: http://x/b.deb\nSize: 1\nSHA256: {sha}\n")),
            format!("{at}: package `b` has an invalid Filename `http://x/b.deb`")
        );
    }

    #[test]
    fn parses_and_checks_release_fields() {
        let r = Release::parse(RELEASE_FIELDS, "URL").unwrap();
        assert_eq!(r.origin.as_deref(), Some("Debian"));
        assert_eq!(r.sha256.len(), 2);
        assert_eq!(
            r.sha256["main/binary-amd64/Packages.xz"],
            FileEntry {
                sha256: "9e0b5aabb2465b3d2e7a7fe27f9913846277833f7a2826e7767acccff5b588c5".into(),
                size: 8_790_396
            }
        );
        let date = 1_783_764_997;
        r.check_dates("URL", date + 3600).unwrap();
        let e = r.check_dates("URL", date + 8 * 86_400).unwrap_err();
        assert_eq!(
            e.to_string(),
            "release file URL has expired (valid until 2026-07-18 10:16:37 UTC)"
        );
        let e = r.check_dates("URL", date - 86_400).unwrap_err();
        assert!(e.to_string().contains("is not valid yet"), "{e}");

        let mut spec = RepoSpec {
            url: "u".into(),
            suite: "bookworm-security".into(),
            components: vec!["main".into(), "contrib".into()],
            arch: "amd64".into(),
            keyring: vec![],
        };
        assert!(r.check_wanted(&spec, "REPO").unwrap().is_empty());
        // A component the Release lacks is skipped, as apt does; none at all is an error.
        spec.components.push("x".into());
        assert_eq!(r.check_wanted(&spec, "REPO").unwrap(), ["x"]);
        let mut only_missing = spec.clone();
        only_missing.components = vec!["x".into()];
        assert_eq!(
            r.check_wanted(&only_missing, "REPO").unwrap_err().to_string(),
            "repository REPO has no component `x` (has: updates/main, contrib)"
        );
        spec.components.pop();
        spec.arch = "riscv64".into();
        assert_eq!(
            r.check_wanted(&spec, "REPO").unwrap_err().to_string(),
            "repository REPO has no architecture `riscv64` (has: amd64, arm64)"
        );

        let no_sha = "Origin: x\nMD5Sum:\n 0ed6d4c8891eb86358b94bb35d9e4da4 1 Packages\n";
        let e = Release::parse(no_sha, "URL").unwrap_err();
        assert!(e.to_string().contains("no SHA256"), "{e}");
        let bad_date = "Valid-Until: tomorrow\nSHA256:\n";
        assert!(Release::parse(bad_date, "URL").is_err());
    }

    #[test]
    fn layouts() {
        let spec = |url: &str, suite: &str, comps: &[&str]| RepoSpec {
            url: url.into(),
            suite: suite.into(),
            components: comps.iter().map(|c| c.to_string()).collect(),
            arch: "amd64".into(),
            keyring: vec![],
        };
        let l = Layout::new(&spec("http://m/debian/", "bookworm", &["main", "contrib"])).unwrap();
        assert_eq!(l.meta, "http://m/debian/dists/bookworm/");
        assert_eq!(l.index_dirs, ["main/binary-amd64/", "contrib/binary-amd64/"]);
        assert_eq!(l.display, "http://m/debian bookworm");
        let l = Layout::new(&spec("http://m/erdma", "jammy/erdma", &["main"])).unwrap();
        assert_eq!(l.meta, "http://m/erdma/dists/jammy/erdma/");
        for (suite, meta) in
            [("/", "http://m/r/"), ("./", "http://m/r/"), ("sub/", "http://m/r/sub/")]
        {
            let l = Layout::new(&spec("http://m/r", suite, &[])).unwrap();
            assert_eq!((l.meta.as_str(), l.flat), (meta, true), "{suite}");
            assert_eq!(l.index_dirs, [""]);
        }
        assert!(Layout::new(&spec("http://m/r", "sub/", &["main"])).is_err());
        assert!(Layout::new(&spec("http://m/r", "bookworm", &[])).is_err());
        assert!(Layout::new(&spec("http://m/r", "../x", &["main"])).is_err());
        assert!(Layout::new(&spec("http://m/r", "bookworm", &["../main"])).is_err());
    }

    #[test]
    fn parses_one_line_sources() {
        let text = "\
# a comment
deb http://deb.debian.org/debian bookworm main contrib # trailing comment
deb-src http://deb.debian.org/debian bookworm main

deb [arch=amd64,arm64 signed-by=/usr/share/keyrings/erdma.gpg] http://mirrors.cloud.aliyuncs.com/erdma jammy/erdma main
deb [ trusted=yes ] http://insecure.example/ ./
deb [arch=amd64] http://broken.example
rpm http://x/ y z
";
        let e = parse_one_line_sources(text);
        assert_eq!(e.len(), 4, "{e:#?}");
        assert_eq!(
            e[0],
            SourceEntry {
                types: vec!["deb".into()],
                uris: vec!["http://deb.debian.org/debian".into()],
                suites: vec!["bookworm".into()],
                components: vec!["main".into(), "contrib".into()],
                ..SourceEntry::default()
            }
        );
        assert_eq!(e[1].types, ["deb-src"]);
        assert_eq!(e[2].arch.as_deref(), Some(&["amd64".to_string(), "arm64".to_string()][..]));
        assert_eq!(e[2].signed_by.as_deref(), Some("/usr/share/keyrings/erdma.gpg"));
        assert_eq!(e[2].suites, ["jammy/erdma"]);
        assert!(!e[2].trusted);
        assert!(e[3].trusted);
        assert_eq!(e[3].suites, ["./"]);
        assert!(e[3].components.is_empty());
    }

    #[test]
    fn parses_deb822_sources() {
        let text = "\
# Debian sources
Types: deb deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://disabled.example/
Suites: x
Components: main
Enabled: no

Types: deb
URIs: http://inline.example/
Suites: stable
Components: main
Architectures: amd64
Trusted: yes
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 mDMEZQ==
 =abcd
 -----END PGP PUBLIC KEY BLOCK-----

this stanza is broken
";
        let e = parse_deb822_sources(text);
        assert_eq!(e.len(), 2, "{e:#?}");
        assert_eq!(e[0].types, ["deb", "deb-src"]);
        assert_eq!(e[0].suites, ["bookworm", "bookworm-updates"]);
        assert_eq!(e[0].components, ["main", "non-free-firmware"]);
        assert_eq!(
            e[0].signed_by.as_deref(),
            Some("/usr/share/keyrings/debian-archive-keyring.gpg")
        );
        assert_eq!(e[0].arch, None);
        assert!(!e[0].trusted);
        assert_eq!(e[1].uris, ["http://inline.example/"]);
        assert!(e[1].trusted);
        assert_eq!(e[1].arch.as_deref(), Some(&["amd64".to_string()][..]));
        assert_eq!(
            e[1].signed_by.as_deref(),
            Some("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEZQ==\n=abcd\n-----END PGP PUBLIC KEY BLOCK-----\n")
        );
    }

    // -----------------------------------------------------------------------------------
    // Repositories over HTTP
    // -----------------------------------------------------------------------------------

    #[tokio::test]
    async fn nested_and_flat_repositories_over_http() {
        let fx = Fixture::new();
        fx.publish(
            "dists/bookworm/erdma",
            "main/binary-amd64",
            &[".xz", ""],
            "pool/main/e/erdma/",
            Some("main"),
            None,
        );
        fx.publish("flat", "", &[".gz"], "flat/", None, None);
        let server = HttpServer::start(fx.root.path());
        let client = client();

        // Nested suite (Alibaba's layout); a trailing slash on the URL is fine.
        let spec = fx.spec(&format!("{}/", server.url), "bookworm/erdma", &["main"]);
        let index =
            fetch_index(&client, &spec).await.unwrap_or_else(|e| panic!("{}", err_chain(&e)));
        assert_eq!(index.packages.len(), 2);
        let tools = &index.packages[0];
        assert_eq!(tools.paragraph().unwrap().get("Package"), Some("erdma-tools"));
        assert_eq!(tools.paragraph().unwrap().get("version"), Some("1.0-1"));
        assert_eq!(
            tools.url(),
            format!("{}/pool/main/e/erdma/erdma-tools_1.0-1_amd64.deb", server.url)
        );
        assert_eq!(tools.sha256(), DEB_SHA);
        assert_eq!(tools.size(), 1234);
        assert_eq!(tools.origin(), "erdma-test");
        assert_eq!(tools.repo(), format!("{} bookworm/erdma", server.url));
        assert_eq!(index.packages[1].sha256(), "ab".repeat(32));

        // What the Release does not have is named, with what it has.
        let mut wrong = spec.clone();
        wrong.components = vec!["contrib".into()];
        let e = fetch_index(&client, &wrong).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "repository {}/dists/bookworm/erdma/ has no component `contrib` (has: main)",
                server.url
            )
        );
        let mut wrong = spec.clone();
        wrong.arch = "s390x".into();
        let e = fetch_index(&client, &wrong).await.unwrap_err();
        assert!(e.to_string().contains("has no architecture `s390x` (has: amd64, arm64)"), "{e}");

        // Flat repository: `deb URL flat/`, only Packages.gz, Filename relative to URL.
        let flat = fx.spec(&server.url, "flat/", &[]);
        let index =
            fetch_index(&client, &flat).await.unwrap_or_else(|e| panic!("{}", err_chain(&e)));
        assert_eq!(index.packages.len(), 2);
        assert_eq!(
            index.packages[1].url(),
            format!("{}/flat/liberdma1_1.0-1_amd64.deb", server.url)
        );

        // A suite that is not there.
        let e = fetch_index(&client, &fx.spec(&server.url, "trixie", &["main"])).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("no InRelease or Release at {}/dists/trixie/", server.url)
        );
        assert!(!e.is_unreachable());
    }

    #[tokio::test]
    async fn tampering_and_fallbacks_over_http() {
        let fx = Fixture::new();
        let meta = fx.publish(
            "dists/bookworm",
            "main/binary-amd64",
            &[".xz"],
            "pool/main/",
            Some("main"),
            None,
        );
        let server = HttpServer::start(fx.root.path());
        let client = client();
        let spec = fx.spec(&server.url, "bookworm", &["main"]);
        let meta_url = format!("{}/dists/bookworm/", server.url);
        fetch_index(&client, &spec).await.unwrap();

        // Packages.xz changed after signing: same size, different bytes.
        let xz = meta.join("main/binary-amd64/Packages.xz");
        let good = std::fs::read(&xz).unwrap();
        let mut bad = good.clone();
        let mid = bad.len() / 2;
        bad[mid] ^= 0xff;
        std::fs::write(&xz, &bad).unwrap();
        let e = fetch_index(&client, &spec).await.unwrap_err();
        let want = format!(
            "hash mismatch for main/binary-amd64/Packages.xz from {meta_url}: Release says sha256:{}, got sha256:{}",
            hex::encode(Sha256::digest(&good)),
            hex::encode(Sha256::digest(&bad))
        );
        assert_eq!(e.to_string(), want);
        // A longer file is caught by its size, without reading it all.
        let mut longer = good.clone();
        longer.extend([0u8; 4096]);
        std::fs::write(&xz, &longer).unwrap();
        let e = fetch_index(&client, &spec).await.unwrap_err();
        assert!(
            e.to_string().starts_with("size mismatch for main/binary-amd64/Packages.xz"),
            "{e}"
        );
        std::fs::write(&xz, &good).unwrap();

        // InRelease tampered: a bad signature, and no fallback to Release.
        let in_release = std::fs::read_to_string(meta.join("InRelease")).unwrap();
        let forged = in_release.replace("Origin: erdma-test", "Origin: erdma-evil");
        assert_ne!(forged, in_release);
        std::fs::write(meta.join("InRelease"), forged).unwrap();
        let e = fetch_index(&client, &spec).await.unwrap_err();
        assert_eq!(e.to_string(), format!("bad signature on {meta_url}InRelease"));
        assert!(!e.is_unreachable());

        // InRelease signed by a key outside the keyring.
        let other = fx.gpg.gen_key("mallory@example.org", "ed25519", "sign", "never", &[]);
        let release = std::fs::read(meta.join("Release")).unwrap();
        std::fs::write(meta.join("InRelease"), fx.gpg.clearsign(&other, &release)).unwrap();
        let e = fetch_index(&client, &spec).await.unwrap_err();
        let msg = err_chain(&e);
        assert!(msg.starts_with(&format!("bad signature on {meta_url}InRelease")), "{msg}");
        assert!(msg.contains("not in the keyring"), "{msg}");

        // No InRelease: Release + Release.gpg.
        std::fs::remove_file(meta.join("InRelease")).unwrap();
        let index =
            fetch_index(&client, &spec).await.unwrap_or_else(|e| panic!("{}", err_chain(&e)));
        assert_eq!(index.packages.len(), 2);

        // Release.gpg over other content.
        std::fs::write(meta.join("Release.gpg"), fx.gpg.detach_sign(&fx.fpr, b"other", true))
            .unwrap();
        let e = fetch_index(&client, &spec).await.unwrap_err();
        assert_eq!(e.to_string(), format!("bad signature on {meta_url}Release"));

        // Release without Release.gpg: never used unsigned.
        std::fs::remove_file(meta.join("Release.gpg")).unwrap();
        let e = fetch_index(&client, &spec).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{meta_url}Release is not signed: there is no Release.gpg beside it")
        );

        // Neither.
        std::fs::remove_file(meta.join("Release")).unwrap();
        let e = fetch_index(&client, &spec).await.unwrap_err();
        assert_eq!(e.to_string(), format!("no InRelease or Release at {meta_url}"));

        // Properly signed but expired metadata.
        let past = now() - 2 * 86_400;
        let header = format!(
            "Origin: erdma-test\nSuite: bookworm\nDate: {}\nValid-Until: {}\nArchitectures: amd64\nComponents: main\n",
            rfc2822(past),
            rfc2822(past + 86_400)
        );
        fx.publish(
            "dists/bookworm",
            "main/binary-amd64",
            &[".xz"],
            "pool/main/",
            Some("main"),
            Some(&header),
        );
        let e = fetch_index(&client, &spec).await.unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "release file {meta_url}InRelease has expired (valid until "
            )),
            "{e}"
        );

        // Release lists only an index the server does not have.
        let header = "Origin: erdma-test\nSuite: bookworm\nComponents: main\n";
        fx.publish(
            "dists/bookworm",
            "main/binary-amd64",
            &[".xz"],
            "pool/main/",
            Some("main"),
            Some(header),
        );
        std::fs::remove_file(&xz).unwrap();
        let e = fetch_index(&client, &spec).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{meta_url}main/binary-amd64/Packages.xz is listed in the Release file but the server does not have it")
        );
    }

    #[tokio::test]
    async fn packages_without_checksums_are_malformed() {
        let fx = Fixture::new();
        let meta = fx.root.path().join("dists/bookworm");
        let idx = meta.join("main/binary-amd64");
        std::fs::create_dir_all(&idx).unwrap();
        std::fs::write(
            idx.join("Packages"),
            "Package: a\nVersion: 1\nFilename: pool/a.deb\nSize: 1\n",
        )
        .unwrap();
        let release = hand_release(&meta, "Origin: x\nComponents: main\n");
        fx.sign_release(&meta, release.as_bytes());
        let server = HttpServer::start(fx.root.path());
        let e =
            fetch_index(&client(), &fx.spec(&server.url, "bookworm", &["main"])).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "malformed Packages index {}/dists/bookworm/main/binary-amd64/Packages: package `a` has no SHA256 field",
                server.url
            )
        );
    }

    #[tokio::test]
    async fn unreachable_server_is_reported_as_such() {
        // Nothing listens on a port we just released; every retry is refused.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let spec = RepoSpec {
            url: format!("http://127.0.0.1:{port}"),
            suite: "bookworm".into(),
            components: vec!["main".into()],
            arch: "amd64".into(),
            keyring: Gpg::new_key_for_tests(),
        };
        let started = Instant::now();
        let e = fetch_index(&client(), &spec).await.unwrap_err();
        assert!(e.is_unreachable(), "{e:?}");
        assert!(
            e.to_string()
                .starts_with(&format!("fetching http://127.0.0.1:{port}/dists/bookworm/InRelease")),
            "{e}"
        );
        // Three retries with backoff happened.
        assert!(
            started.elapsed() >= Duration::from_millis(500 + 1000 + 2000),
            "{:?}",
            started.elapsed()
        );
    }

    impl Gpg {
        fn new_key_for_tests() -> Vec<u8> {
            let gpg = Gpg::new();
            let fpr = gpg.gen_key("k@example.org", "ed25519", "sign", "never", &[]);
            gpg.export(&fpr, false)
        }
    }

    // -----------------------------------------------------------------------------------
    // The real Debian archive
    // -----------------------------------------------------------------------------------

    /// The first `deb` URI configured for `bookworm` in /etc/apt/sources.list.d/*.sources.
    fn configured_debian_mirror() -> Option<String> {
        let mut names: Vec<_> = std::fs::read_dir("/etc/apt/sources.list.d")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "sources"))
            .collect();
        names.sort();
        names.into_iter().find_map(|p| {
            let text = std::fs::read_to_string(p).ok()?;
            parse_deb822_sources(&text).into_iter().find_map(|e| {
                let wanted =
                    e.types.iter().any(|t| t == "deb") && e.suites.iter().any(|s| s == "bookworm");
                wanted.then(|| e.uris.first().cloned()).flatten()
            })
        })
    }

    #[tokio::test]
    async fn fetches_bookworm_main_needs_debian_archive() {
        let ci = std::env::var_os("CI").is_some();
        let skip = |why: String| {
            assert!(!ci, "CI is set, so this test may not be skipped: {why}");
            eprintln!("skipping fetches_bookworm_main_needs_debian_archive: {why}");
        };
        let Some(url) = configured_debian_mirror() else {
            return skip("no bookworm mirror in /etc/apt/sources.list.d/*.sources".into());
        };
        let keyring = std::fs::read("/usr/share/keyrings/debian-archive-keyring.gpg")
            .expect("reading /usr/share/keyrings/debian-archive-keyring.gpg");
        let spec = RepoSpec {
            url,
            suite: "bookworm".into(),
            components: vec!["main".into()],
            arch: "amd64".into(),
            keyring,
        };
        let client = Client::new(erdma_http::Timeouts {
            connect: Duration::from_secs(15),
            ..Default::default()
        })
        .unwrap();
        let index = match fetch_index(&client, &spec).await {
            Ok(i) => i,
            Err(e) if e.is_unreachable() => return skip(err_chain(&e)),
            Err(e) => panic!("{}", err_chain(&e)),
        };
        assert!(index.packages.len() > 50_000, "{} packages", index.packages.len());
        let ibverbs: Vec<_> = index.packages.iter().filter(|p| p.name() == "libibverbs1").collect();
        assert!(!ibverbs.is_empty(), "libibverbs1 not in bookworm main");
        let p = ibverbs[0];
        let version = p.version().unwrap();
        assert!(version.starts_with("44."), "libibverbs1 {version}");
        assert!(p.url().starts_with(&spec.url) && p.url().ends_with("_amd64.deb"), "{}", p.url());
        assert!(p.url().contains("/pool/main/r/rdma-core/"), "{}", p.url());
        assert_eq!(p.sha256().len(), 64);
        assert!(p.size() > 0);
        assert_eq!(p.origin(), "Debian");
        assert_eq!(p.repo(), format!("{} bookworm", spec.url.trim_end_matches('/')));
    }
}
