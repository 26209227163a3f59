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
use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::deb822::{self, Deb822Error, Paragraph};
use erdma_http::HttpError;
pub use erdma_openpgp::SignatureError;

mod fetch;
mod release;
mod sources;
#[cfg(test)]
mod testkit;

pub use fetch::{
    fetch_index, fetch_index_cached, fetch_index_prefetched, prefetch_index, Prefetched,
};
pub use release::{verify_clearsigned, verify_detached};
pub use sources::{parse_deb822_sources, parse_one_line_sources};

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

impl IndexText {
    fn shared(text: String, url: &str, base: &str, origin: &str, repo: &str) -> Arc<IndexText> {
        Arc::new(IndexText {
            text,
            url: url.to_owned(),
            base: base.to_owned(),
            origin: origin.to_owned(),
            repo: repo.to_owned(),
        })
    }
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
/// A SHA256 in hex.
fn is_sha256(hex: &str) -> bool {
    hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A `Filename` that stays under the archive root: no scheme, no `..`.
fn is_relative_filename(filename: &str) -> bool {
    !filename.contains("://") && !filename.split('/').any(|p| p == "..")
}

/// The end of a kept index ([`IndexedPackage::to_kept`]), its trailer (magic, text length,
/// stanza count) and the size of one stanza's record (start, end, line, the fields' ranges,
/// the `.deb`'s size).
const KEPT_MAGIC: &[u8; 8] = b"ERDMAIX2";
const KEPT_TAIL: usize = 24;
const KEPT_RECORD: usize = 4 * (3 + 2 * INDEX_FIELDS.len()) + 8;
/// The size from which [`IndexedPackage::read_index`] and [`IndexedPackage::from_kept`] read
/// an index's stanzas on two threads.
const SPLIT_INDEX: usize = 1 << 20;
/// The packages `first` gives, then those `second` gives, the two run at once (`second` on a
/// thread of its own); the first half's error before the second's.
fn on_two_threads(
    first: impl FnOnce() -> Result<Vec<IndexedPackage>, RepoError>,
    second: impl FnOnce() -> Result<Vec<IndexedPackage>, RepoError> + Send,
) -> Result<Vec<IndexedPackage>, RepoError> {
    let (first, second) = std::thread::scope(|scope| {
        let second = scope.spawn(second);
        (first(), second.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    });
    let mut packages = first?;
    packages.extend(second?);
    Ok(packages)
}

/// One stanza's record of a kept index: start, end, line, the fields' ranges, the size.
type KeptRecord = (u32, u32, u32, [(u32, u32); INDEX_FIELDS.len()], u64);
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
    /// `fetch::read_streamed` reads them; `url` names the index in errors.
    pub fn read_index(
        text: String,
        url: &str,
        base: &str,
        origin: &str,
        repo: &str,
    ) -> Result<Vec<IndexedPackage>, RepoError> {
        let index = IndexText::shared(text, url, base, origin, repo);
        let text = index.text.as_str();
        // Offsets are kept in 32 bits; MAX_INDEX keeps indices well below 4 GiB.
        if u32::try_from(text.len()).is_err() {
            return Err(RepoError::MalformedIndex {
                url: url.to_owned(),
                reason: format!("it is larger than {} bytes", u32::MAX),
            });
        }
        let read = |stanzas: deb822::Scanner<'_, { INDEX_FIELDS.len() }>, len: usize| {
            // Debian's stanzas average about 800 bytes; room never written costs no memory.
            let mut packages = Vec::with_capacity(len / 512);
            for stanza in stanzas {
                let stanza = stanza
                    .map_err(|source| RepoError::IndexSyntax { url: url.to_owned(), source })?;
                packages.push(IndexedPackage::checked(&index, stanza)?);
            }
            Ok::<_, RepoError>(packages)
        };
        // A large index is read in two halves on two threads (Debian 12's 63,000 stanzas take
        // about 0.1 s on one), split after an empty line, which always ends a paragraph: the
        // same packages and, the first half's taken first, the same first error.
        let half = text.len() / 2;
        let split = (text.len() >= SPLIT_INDEX)
            .then(|| text.get(half..)?.find("\n\n").map(|at| half + at + 2))
            .flatten();
        let Some(mid) = split else {
            return read(deb822::scan(text, INDEX_FIELDS), text.len());
        };
        let line = 1 + text.as_bytes()[..mid].iter().filter(|&&b| b == b'\n').count();
        on_two_threads(
            || read(deb822::scan(&text[..mid], INDEX_FIELDS), mid),
            || read(deb822::scan_from(text, INDEX_FIELDS, mid, line), text.len() - mid),
        )
    }

    fn checked(
        index: &Arc<IndexText>,
        stanza: deb822::Scanned<{ INDEX_FIELDS.len() }>,
    ) -> Result<IndexedPackage, RepoError> {
        let pkg = IndexedPackage {
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
        pkg.validated()
    }

    /// The package once what its download needs is there and sane: its name, `Filename`,
    /// `SHA256` and `Size` (read into [`Self::size`]).
    fn validated(mut self) -> Result<IndexedPackage, RepoError> {
        if self.values.contains(&FOLDED) {
            // Rare: a value whose lines are not contiguous in the text; it is read from the
            // parsed paragraph.
            let paragraph = self.parse_paragraph()?;
            let _ = self.paragraph.set(paragraph);
        }
        let malformed =
            |reason: String| RepoError::MalformedIndex { url: self.index.url.clone(), reason };
        let name = self.name();
        if name.is_empty() {
            return Err(malformed("a stanza has no Package field".into()));
        }
        let field = |i: usize| {
            self.value(i).map(str::trim).filter(|v| !v.is_empty()).ok_or_else(|| {
                malformed(format!("package `{name}` has no {} field", INDEX_FIELDS[i]))
            })
        };
        let filename = field(FILENAME)?;
        let sha256 = field(SHA256)?;
        let size = field(SIZE)?;
        if !is_sha256(sha256) {
            return Err(malformed(format!(
                "package `{name}` has an invalid SHA256 `{}`",
                sha256.to_ascii_lowercase()
            )));
        }
        let size: u64 = size
            .parse()
            .map_err(|_| malformed(format!("package `{name}` has an invalid Size `{size}`")))?;
        if !is_relative_filename(filename) {
            return Err(malformed(format!(
                "package `{name}` has an invalid Filename `{filename}`"
            )));
        }
        self.size = size;
        Ok(self)
    }

    /// An index's packages as the cache keeps them ([`Self::from_kept`]): the text, then
    /// where each stanza and its fields are in it, so that reading them again does not scan
    /// the text, then the trailer (magic, text length, stanza count). The text comes first
    /// so that reading it back moves no bytes.
    pub fn to_kept(packages: &[IndexedPackage]) -> Vec<u8> {
        let text = packages.first().map_or("", |p| p.index.text.as_str());
        let mut out = Vec::with_capacity(text.len() + packages.len() * KEPT_RECORD + KEPT_TAIL);
        out.extend_from_slice(text.as_bytes());
        for p in packages {
            for v in [p.start, p.end, p.line] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            for (a, b) in p.values {
                out.extend_from_slice(&a.to_le_bytes());
                out.extend_from_slice(&b.to_le_bytes());
            }
            out.extend_from_slice(&p.size.to_le_bytes());
        }
        out.extend_from_slice(KEPT_MAGIC);
        out.extend_from_slice(&(text.len() as u64).to_le_bytes());
        out.extend_from_slice(&(packages.len() as u64).to_le_bytes());
        out
    }

    /// The packages [`Self::to_kept`] wrote, as [`Self::read_index`] read them. What it
    /// checked then is not checked again; each stanza's place in the text is, so that a
    /// damaged copy is an error, never a panic. `url` names the index.
    pub fn from_kept(
        kept: Vec<u8>,
        url: &str,
        base: &str,
        origin: &str,
        repo: &str,
    ) -> Result<Vec<IndexedPackage>, RepoError> {
        let damaged = |why: &str| RepoError::MalformedIndex {
            url: url.to_owned(),
            reason: format!("the cached copy is damaged ({why})"),
        };
        let Some(tail_at) = kept.len().checked_sub(KEPT_TAIL) else {
            return Err(damaged("short"));
        };
        let tail = |at: usize| {
            let at = tail_at + at;
            u64::from_le_bytes(kept[at..at + 8].try_into().expect("8 bytes"))
        };
        if !kept[tail_at..].starts_with(KEPT_MAGIC) {
            return Err(damaged("not a kept index"));
        }
        let (text_len, count) = (tail(8), tail(16));
        let records_at = usize::try_from(text_len)
            .ok()
            .filter(|&r| u32::try_from(r).is_ok())
            .ok_or_else(|| damaged("its text is too long"))?;
        let expected = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(KEPT_RECORD))
            .and_then(|r| r.checked_add(records_at));
        if expected != Some(tail_at) {
            return Err(damaged("its length does not match"));
        }
        let mut records = kept[records_at..tail_at]
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
        let mut next = || records.next().expect("counted");
        let mut raw = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let (start, end, line) = (next(), next(), next());
            let values: [(u32, u32); INDEX_FIELDS.len()] =
                std::array::from_fn(|_| (next(), next()));
            let size = u64::from(next()) | u64::from(next()) << 32;
            raw.push((start, end, line, values, size));
        }
        let mut bytes = kept;
        bytes.truncate(records_at);
        let text = String::from_utf8(bytes).map_err(|_| damaged("its text is not UTF-8"))?;
        let index = IndexText::shared(text, url, base, origin, repo);
        let text = index.text.as_str();
        let in_text = |a: u32, b: u32| {
            a <= b
                && text.is_char_boundary(a as usize)
                && text.is_char_boundary(b as usize)
                && (b as usize) <= text.len()
        };
        // Each stanza is checked on its own: a large index's two halves on two threads
        // (Debian 13's 65,000 stanzas take about 40 ms on one).
        let check = |raw: &[KeptRecord]| -> Result<Vec<IndexedPackage>, RepoError> {
            let mut packages = Vec::with_capacity(raw.len());
            for &(start, end, line, values, size) in raw {
                let fits = |&(a, b): &(u32, u32)| {
                    (a, b) == ABSENT
                        || (a, b) == FOLDED
                        || (in_text(a, b) && start <= a && b <= end)
                };
                if line == 0 || !in_text(start, end) || !values.iter().all(fits) {
                    return Err(damaged("a stanza lies outside its text"));
                }
                let pkg = IndexedPackage {
                    index: Arc::clone(&index),
                    start,
                    end,
                    line,
                    values,
                    size,
                    paragraph: OnceLock::new(),
                };
                if values.contains(&FOLDED) {
                    let paragraph = pkg.parse_paragraph()?;
                    let _ = pkg.paragraph.set(paragraph);
                }
                // What the download and the package cache make paths of is checked again.
                let (sha256, filename) = (pkg.value(SHA256), pkg.value(FILENAME));
                if pkg.name().is_empty()
                    || !sha256.map(str::trim).is_some_and(is_sha256)
                    || !filename.map(str::trim).is_some_and(is_relative_filename)
                {
                    return Err(damaged(
                        "a stanza's name, SHA256 or Filename is not what was kept",
                    ));
                }
                packages.push(pkg);
            }
            Ok(packages)
        };
        if text.len() < SPLIT_INDEX {
            return check(&raw);
        }
        let (first, second) = raw.split_at(raw.len() / 2);
        on_two_threads(|| check(first), || check(second))
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

    /// Whether [`IndexedPackage::paragraph`] has been built (the index is read lazily: a
    /// resolver that parses every stanza it passes over shows here).
    pub fn is_parsed(&self) -> bool {
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

    #[error("malformed Release file {url}")]
    ReleaseSyntax {
        url: String,
        #[source]
        source: Deb822Error,
    },

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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// An index large enough to be read on two threads gives what one reading gives: every
    /// stanza as deb822 parses it, a stanza straddling the middle whole, and the first error
    /// of the text with its line in the whole text, wherever the halves are cut.
    #[test]
    fn a_large_index_read_in_halves_is_read_as_one() {
        let sha = "ab".repeat(32);
        let stanza = |i: usize| {
            format!(
                "Package: p{i}\nVersion: 1.{i}-1\nArchitecture: amd64\nDepends: libc6 (>= 2.34), p{}\n\
                 Description: package {i}\n {}\n .\n more\nFilename: pool/p{i}.deb\nSize: {i}\nSHA256: {sha}\n",
                i + 1,
                "long line ".repeat(1 + i % 40),
            )
        };
        let mut text = String::new();
        let mut i = 0;
        while text.len() < 2 * SPLIT_INDEX {
            text.push_str(&stanza(i));
            text.push('\n');
            i += 1;
        }
        let pkgs = read(&text).unwrap();
        let parsed = deb822::parse(&text).unwrap();
        assert_eq!(pkgs.len(), parsed.len());
        assert_eq!(pkgs.len(), i);
        for (n, (pkg, parsed)) in pkgs.iter().zip(&parsed).enumerate() {
            assert_eq!(pkg.paragraph().unwrap(), parsed, "stanza {n}");
            assert_eq!(pkg.name(), format!("p{n}"));
        }
        // Kept and read back, its stanzas checked in halves too: the same packages in order.
        let back = IndexedPackage::from_kept(
            IndexedPackage::to_kept(&pkgs),
            "http://repo.test/Packages",
            "http://repo.test",
            "Test",
            "http://repo.test bookworm",
        )
        .unwrap();
        assert_eq!(back.len(), pkgs.len());
        for (n, (pkg, again)) in pkgs.iter().zip(&back).enumerate() {
            assert_eq!(pkg.paragraph().unwrap(), again.paragraph().unwrap(), "stanza {n}");
            assert_eq!((pkg.sha256(), pkg.size()), (again.sha256(), again.size()), "stanza {n}");
        }
        // A syntax error in the second half: the line of the whole text, as parse says.
        let lines = text.lines().count();
        for at_line in [lines / 2 + 3, lines - 2, lines / 4] {
            let mut bad: Vec<String> = text.lines().map(str::to_owned).collect();
            bad[at_line] = "no colon here".into();
            let bad = bad.join("\n") + "\n";
            let want = deb822::parse(&bad).unwrap_err();
            match read(&bad).unwrap_err() {
                RepoError::IndexSyntax { source, .. } => assert_eq!(source, want, "{at_line}"),
                e => panic!("{e}"),
            }
        }
        // Errors in both halves: the first half's.
        let mut bad: Vec<String> = text.lines().map(str::to_owned).collect();
        bad[lines / 4] = "no colon here".into();
        bad[3 * lines / 4] = "nor here".into();
        let bad = bad.join("\n") + "\n";
        match read(&bad).unwrap_err() {
            RepoError::IndexSyntax { source, .. } => {
                assert_eq!(source, deb822::parse(&bad).unwrap_err())
            }
            e => panic!("{e}"),
        }
    }

    #[test]
    fn kept_indices_read_back_as_parsed_and_damage_is_an_error() {
        let sha = "ab".repeat(32);
        let text = format!(
            "Package: a\nVersion: 1.0-1\nArchitecture: amd64\nFilename: pool/a.deb\nSize: 10\nSHA256: {sha}\n\n\
             Package: c\nProvides: z,\n# inside\n w\nFilename: pool/c.dëb\nSize: 30\nSHA256: {sha}\n"
        );
        let pkgs = read(&text).unwrap();
        let kept = IndexedPackage::to_kept(&pkgs);
        let from = |bytes: Vec<u8>| {
            IndexedPackage::from_kept(
                bytes,
                "http://repo.test/Packages",
                "http://repo.test",
                "Test",
                "http://repo.test bookworm",
            )
        };
        let again = from(kept.clone()).unwrap();
        let fields = |p: &IndexedPackage| {
            (
                p.name().to_owned(),
                p.version().map(str::to_owned),
                p.provides().map(str::to_owned),
                p.url(),
                p.sha256(),
                p.size(),
            )
        };
        assert_eq!(
            again.iter().map(fields).collect::<Vec<_>>(),
            pkgs.iter().map(fields).collect::<Vec<_>>()
        );
        for (p, q) in pkgs.iter().zip(&again) {
            assert_eq!(p.paragraph().unwrap(), q.paragraph().unwrap());
        }
        assert!(from(IndexedPackage::to_kept(&[])).unwrap().is_empty());
        // Every shorter copy, and every byte of the records changed, is refused or reads as
        // packages that pass the same checks: never a panic.
        for n in 0..kept.len() {
            assert!(from(kept[..n].to_vec()).is_err(), "{n} bytes");
        }
        let records = text.len();
        for at in records..kept.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut bad = kept.clone();
                bad[at] ^= flip;
                if let Ok(read) = from(bad) {
                    assert!(read.iter().all(|p| !p.name().is_empty()));
                }
            }
        }
        let mut bad = kept.clone();
        bad[kept.len() - KEPT_TAIL] = b'X';
        assert!(from(bad).unwrap_err().to_string().contains("not a kept index"));
        // Text changed in place (same length): a Filename leaving the archive root, a SHA256
        // that is not one, are refused as read_index refuses them.
        for (from_text, to_text) in
            [("pool/a.deb", "../a.deb!"), ("ab".repeat(4).as_str(), "zzzzzzzz")]
        {
            let at = kept.windows(from_text.len()).position(|w| w == from_text.as_bytes()).unwrap();
            let mut bad = kept.clone();
            bad[at..at + to_text.len().min(from_text.len())]
                .copy_from_slice(&to_text.as_bytes()[..to_text.len().min(from_text.len())]);
            assert!(from(bad).unwrap_err().to_string().contains("not what was kept"), "{to_text}");
        }
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
}
