//! `.rpm` files: read (lead, signature header, main header, payload), verified as dnf with
//! `gpgcheck=1` verifies them, and their payload read without rpm, checked against the header
//! and handed to a [`PayloadSink`] (erdma-build's writes it into its layer).
//!
//! A package file is a 96-byte lead (lib/rpmlead.c), the signature header (with magic, padded
//! to 8 bytes), the main header (with magic) and the payload: a cpio archive compressed as
//! `PAYLOADCOMPRESSOR` says. What each check covers was checked against rpmsign 4.18 output
//! (see the tests): `RSAHEADER`/`DSAHEADER` and `SHA256HEADER` cover the main header's bytes
//! as they are in the file, magic included (`hdrblobDigestUpdate` in lib/header.c: magic,
//! `ril`, `rdl`, the region's index entries and data); `PAYLOADDIGEST` is the hex digest of
//! the payload as stored (compressed); the legacy `MD5`, `PGP` and `GPG` signature tags cover
//! the main header with magic followed by the payload, i.e. the file from the main header's
//! magic to its end.
//!
//! The payload is read the way rpm's lib/rpmfi.c `iterReadArchiveNext` reads it: the header
//! is authoritative (modes, owners, sizes, link targets, flags), each archive entry is mapped
//! to the header's file list by its name (`newc`) or its index (rpm's `stripped` format,
//! magic `07070X`, used when a package has a file of 4 GiB or more), hard-linked files carry
//! their content on the last link of the set, `%ghost` files are not in the archive. The
//! cpio's own uid, gid, mode and mtime come from the build machine and are ignored.
//!
//! Hand-written rather than taken from the `rpm` crate for the reasons header.rs gives (a
//! second rpgp, no streaming unpack into our layer); everything here treats the file as
//! hostile: sizes are bounded by the header, names must be in the header's file list, and
//! nothing panics.
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufReader, Cursor, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use md5::Digest as _;
use serde::Serialize;

use crate::header::{self, fileflag, sigtag, tag, Header, HeaderError};
use erdma_limits::paths;
use erdma_openpgp::{self as openpgp, Keyring, SignatureError};

#[derive(Debug, thiserror::Error)]
pub enum RpmError {
    #[error("{operation} {path}")]
    Io {
        operation: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("{path} is not a valid rpm: {reason}")]
    Malformed { path: PathBuf, reason: String },

    #[error("{path}: bad {which} header")]
    Header {
        path: PathBuf,
        which: &'static str,
        #[source]
        source: HeaderError,
    },

    #[error(
        "{path} is not signed (gpgcheck needs a signature by a key of the repository's keyring)"
    )]
    NotSigned { path: PathBuf },

    #[error("{path} is signed by key {key}, which is not in the repository's keyring")]
    UnknownKey { path: PathBuf, key: String },

    #[error("{path}: the {which} does not verify")]
    BadSignature {
        path: PathBuf,
        which: &'static str,
        #[source]
        source: SignatureError,
    },

    #[error("{path}: {which} mismatch: the package says {expected}, the file has {actual}")]
    Digest { path: PathBuf, which: String, expected: String, actual: String },

    /// A package whose payload no verified signature covers, or that needs a digest we lack.
    #[error("{path}: {reason}")]
    Unverifiable { path: PathBuf, reason: String },

    #[error("{path}: the payload uses {compression} compression, which is not supported")]
    UnsupportedCompression { path: PathBuf, compression: String },

    /// Decompression errors, a payload that ends early or grows past its bound.
    #[error("{path}: reading the payload")]
    Payload {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// A limit of [`erdma_limits`] reached reading the payload (a decompression bomb).
    #[error("{path}: the payload {exceeded}")]
    Limit { path: PathBuf, exceeded: erdma_limits::Exceeded },

    #[error("{path}: payload entry `{entry}` would be outside the image root")]
    UnsafePath { path: PathBuf, entry: String },

    #[error("{path}: payload entry `{entry}`: {reason}")]
    BadEntry { path: PathBuf, entry: String, reason: String },
}

/// `rpmlead` magic (lib/rpmlead.c).
const LEAD_MAGIC: [u8; 4] = [0xed, 0xab, 0xee, 0xdb];
const LEAD_SIZE: usize = 96;
/// `RPMSIGTYPE_HEADERSIG`: the only signature type rpm ≥ 4 reads.
const SIGTYPE_HEADERSIG: u16 = 5;
/// Legacy header+payload signatures are checked in memory (our OpenPGP wrapper takes a
/// slice); packages recent enough to be large carry `PAYLOADDIGEST` and never need this.
const MAX_LEGACY_SIGNED: u64 = 256 << 20;
/// rpm's `CPIO_NAMESIZE_MAX`.
const CPIO_NAMESIZE_MAX: u64 = 4096;
const CPIO_NEWC_MAGIC: &[u8; 6] = b"070701";
const CPIO_CRC_MAGIC: &[u8; 6] = b"070702";
const CPIO_STRIPPED_MAGIC: &[u8; 6] = b"07070X";
const CPIO_TRAILER: &[u8] = b"TRAILER!!!";
/// A symlink target longer than this is no real link (Linux's `PATH_MAX` is 4096).
const MAX_LINK: u64 = 64 << 10;

/// `PAYLOADDIGESTALGO`/`FILEDIGESTALGO` values (`pgpHashAlgo`, rpmio/rpmpgp.h).
mod hashalgo {
    pub(super) const MD5: u64 = 1;
    pub(super) const SHA1: u64 = 2;
    pub(super) const SHA256: u64 = 8;
    pub(super) const SHA384: u64 = 9;
    pub(super) const SHA512: u64 = 10;
}

/// File type bits of `FILEMODES` (`S_IFMT`).
const S_IFMT: u32 = 0o170000;
const S_IFSOCK: u32 = 0o140000;
const S_IFLNK: u32 = 0o120000;
const S_IFREG: u32 = 0o100000;
const S_IFBLK: u32 = 0o060000;
const S_IFDIR: u32 = 0o040000;
const S_IFCHR: u32 = 0o020000;
const S_IFIFO: u32 = 0o010000;

/// `rpmfileState` (include/rpm/rpmfiles.h), what the database's `FILESTATES` holds.
pub mod filestate {
    pub const NORMAL: u8 = 0;
    pub const REPLACED: u8 = 1;
    pub const NOT_INSTALLED: u8 = 2;
    pub const NETSHARED: u8 = 3;
    pub const WRONG_COLOR: u8 = 4;
}

/// A package file's headers and where its parts lie.
#[derive(Debug, Clone)]
pub struct Package {
    pub signature: Header,
    pub header: Header,
    /// Offset of the main header's magic in the file.
    pub header_offset: u64,
    /// Offset of the compressed payload.
    pub payload_offset: u64,
    /// The file's length when it was opened.
    pub file_len: u64,
}

/// What [`Package::verify`] checked.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verified {
    /// The issuers of the signatures that verified (fingerprint, or key ID).
    pub signers: Vec<String>,
    /// Each check made, e.g. `RSA header signature`, `header SHA256`, `payload SHA256`.
    pub checks: Vec<&'static str>,
}

/// One file of the package, as its header lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileInfo {
    /// Absolute, as the header gives it (`/usr/lib64/libibverbs.so.1`).
    pub path: String,
    /// `st_mode`: type and permission bits.
    pub mode: u32,
    pub size: u64,
    pub user: String,
    pub group: String,
    /// `rpmfileAttrs` ([`fileflag`]).
    pub flags: u32,
    /// Symlinks: the target; empty otherwise.
    pub link_to: String,
    /// Lower-case hex in the package's `FILEDIGESTALGO`; empty for what is not a regular file.
    pub digest: String,
    pub mtime: u32,
    pub rdev: u32,
    /// Build-time inode and device: files sharing both are hard links of one another.
    pub inode: u32,
    pub device: u32,
}

impl FileInfo {
    pub fn is_config(&self) -> bool {
        self.flags & fileflag::CONFIG != 0
    }
    pub fn is_ghost(&self) -> bool {
        self.flags & fileflag::GHOST != 0
    }
    pub fn file_type(&self) -> u32 {
        self.mode & S_IFMT
    }
}

/// Where a payload's files go, in payload order, once [`Package::unpack`] has checked them
/// against the header (erdma-build's layer: `packages/rpm/unpack.rs`).
pub trait PayloadSink {
    /// What a regular file's content became (a blob of the layer): read once for a hard link
    /// set, written under each of its names.
    type Content;
    /// The sink's own refusal of an entry.
    type Error;
    /// Reads a regular file's content: `size` bytes from `from`, each chunk also handed to
    /// `each` (the header's digest is checked before anything is written with it).
    fn content(
        &mut self,
        from: &mut dyn Read,
        size: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> io::Result<Self::Content>;
    /// Writes `file` (its path normalised: no leading `/`) as `what`. Returns where it landed,
    /// or `None` when the sink left it out (a directory the image has as a symlink).
    fn write(
        &mut self,
        file: &FileInfo,
        path: &str,
        what: Written<'_, Self::Content>,
    ) -> Result<Option<String>, Self::Error>;
}

/// One entry for a [`PayloadSink`] to write.
pub enum Written<'a, C> {
    Dir,
    /// The target, as the header gives it.
    Symlink(&'a str),
    /// A regular file; `link_to`: where an earlier name of its hard link set landed (rpm links
    /// the names of a set: lib/fsm.c `fsmMkfile`).
    File {
        content: &'a C,
        link_to: Option<&'a str>,
    },
}

/// Why [`Package::unpack`] stopped: the package, or the sink.
#[derive(Debug)]
pub enum UnpackError<E> {
    Package(RpmError),
    /// The sink refused `entry` (the path as the header gives it).
    Sink {
        entry: String,
        error: E,
    },
}

impl<E: std::fmt::Display> std::fmt::Display for UnpackError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnpackError::Package(e) => e.fmt(f),
            UnpackError::Sink { entry, error } => write!(f, "payload entry `{entry}`: {error}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for UnpackError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            UnpackError::Package(e) => e.source(),
            UnpackError::Sink { error, .. } => error.source(),
        }
    }
}

impl<E> From<RpmError> for UnpackError<E> {
    fn from(e: RpmError) -> Self {
        UnpackError::Package(e)
    }
}

/// How to install, as the transaction flags and macros of the image's dnf would say.
#[derive(Debug, Clone, Copy)]
pub struct UnpackOptions {
    /// `--max-inflation`: how many times its compressed size the payload may decompress to
    /// ([`erdma_limits::inflate`]; 0: no limit). Default 100.
    pub inflation: u64,
    /// `tsflags=nodocs` (`%_excludedocs`): `%doc` files are not written and recorded as not
    /// installed; `%license` files are kept, as rpm keeps them (lib/transaction.c `skipFiles`).
    pub nodocs: bool,
}

impl Default for UnpackOptions {
    fn default() -> Self {
        UnpackOptions { inflation: erdma_limits::DEFAULT_INFLATION, nodocs: false }
    }
}

/// A device node, FIFO or socket of a payload: the layer cannot hold it, so it is reported, not
/// created (erdma-build's report turns it into one of its special files).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    pub path: String,
    /// `char`, `block`, `fifo` or `socket`.
    pub kind: &'static str,
    pub mode: u32,
    pub major: u32,
    pub minor: u32,
}

/// What [`Package::unpack`] did. Paths are absolute, as the header gives them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Unpacked {
    /// Files, directories and symlinks put into the layer, in payload order.
    pub written: Vec<String>,
    /// `%config` files written.
    pub config: Vec<String>,
    /// `%ghost` files: owned, not created.
    pub ghosts: Vec<String>,
    /// One [`filestate`] per file of the header, in header order (the database's `FILESTATES`).
    pub file_states: Vec<u8>,
    /// Regular files with the setuid or setgid bit, with their permission bits.
    pub setid: Vec<(String, u32)>,
    /// Device nodes, FIFOs and sockets (not created).
    pub nodes: Vec<Node>,
    /// Bytes of the decompressed payload.
    pub archive_size: u64,
}

/// Reads the lead and both headers of the package at `path` ([`Package::open`]).
pub fn open(path: &Path) -> Result<Package, RpmError> {
    Package::open(path)
}

impl Package {
    /// Reads the lead and both headers of the package at `path`.
    pub fn open(path: &Path) -> Result<Package, RpmError> {
        let mut file = File::open(path).map_err(io_err("opening", path))?;
        let file_len = file.metadata().map_err(io_err("reading metadata of", path))?.len();
        let mut r = BufReader::new(&mut file);
        let malformed = |reason: String| RpmError::Malformed { path: path.to_owned(), reason };
        let mut lead = [0u8; LEAD_SIZE];
        r.read_exact(&mut lead).map_err(|_| malformed("shorter than its 96-byte lead".into()))?;
        if lead[..4] != LEAD_MAGIC {
            return Err(malformed("no rpm lead magic".into()));
        }
        if !matches!(lead[4], 3 | 4) {
            return Err(malformed(format!(
                "unsupported rpm format version {}.{}",
                lead[4], lead[5]
            )));
        }
        let kind = u16::from_be_bytes([lead[6], lead[7]]);
        if kind != 0 {
            return Err(malformed(if kind == 1 {
                "a source package, not a binary one".into()
            } else {
                format!("unknown package type {kind}")
            }));
        }
        let sigtype = u16::from_be_bytes([lead[78], lead[79]]);
        if sigtype != SIGTYPE_HEADERSIG {
            return Err(malformed(format!("unsupported signature type {sigtype}")));
        }
        let header_err =
            |which| move |source| RpmError::Header { path: path.to_owned(), which, source };
        let (signature, sig_raw) =
            Header::read_with_magic(&mut r).map_err(header_err("signature"))?;
        // lib/header.c `hdrblobRead`: the signature header is padded to 8 bytes, magic included.
        let pad = (8 - sig_raw.len() % 8) % 8;
        let mut padding = [0u8; 8];
        r.read_exact(&mut padding[..pad])
            .map_err(|_| malformed("the file ends after the signature header".into()))?;
        let header_offset = (LEAD_SIZE + sig_raw.len() + pad) as u64;
        let (header, raw) = Header::read_with_magic(&mut r).map_err(header_err("main"))?;
        let payload_offset = header_offset + raw.len() as u64;
        if payload_offset > file_len {
            return Err(malformed("the file ends inside the main header".into()));
        }
        Ok(Package { signature, header, header_offset, payload_offset, file_len })
    }

    /// The main header as it is in the file, magic included: what header signatures and
    /// digests cover. Refused when entries lie outside the immutable region (no package
    /// rpmbuild makes has them; rpm ≥ 4.16.1.3 refuses them too, CVE-2021-20271), since a
    /// signature would not cover them.
    fn signed_header(&self, path: &Path) -> Result<Vec<u8>, RpmError> {
        let region = self.header.region_with_magic().ok_or_else(|| RpmError::Unverifiable {
            path: path.to_owned(),
            reason: "the main header has no immutable region, so no signature can cover it".into(),
        })?;
        let mut whole = header::MAGIC.to_vec();
        whole.extend_from_slice(self.header.blob());
        if region != whole {
            return Err(RpmError::Unverifiable {
                path: path.to_owned(),
                reason: "the main header has entries outside its signed region".into(),
            });
        }
        Ok(region)
    }

    /// Verifies the package at `path` (the file [`Package::open`] read) against `keyring` at
    /// time `now`, as rpm ≥ 4.14 does for dnf with `gpgcheck=1`: every signature present must
    /// verify with a key of the keyring, and together they must cover header and payload.
    pub fn verify(&self, path: &Path, keyring: &Keyring, now: i64) -> Result<Verified, RpmError> {
        self.verify_inner(path, keyring, now, true)
    }

    /// `use_payload_digest: false` checks the payload the pre-4.14 way even when
    /// `PAYLOADDIGEST` is present (for tests of the legacy path on packages rpmbuild makes).
    fn verify_inner(
        &self,
        path: &Path,
        keyring: &Keyring,
        now: i64,
        use_payload_digest: bool,
    ) -> Result<Verified, RpmError> {
        let mut done = Verified::default();
        let header_bytes = self.signed_header(path)?;
        let sig = &self.signature;
        let header_sigs: Vec<(u32, &'static str)> =
            [(sigtag::RSA, "RSA header signature"), (sigtag::DSA, "DSA header signature")]
                .into_iter()
                .filter(|(t, _)| sig.has(*t))
                .collect();
        let legacy_sigs: Vec<(u32, &'static str)> = [
            (sigtag::PGP, "RSA header+payload signature"),
            (sigtag::GPG, "DSA header+payload signature"),
        ]
        .into_iter()
        .filter(|(t, _)| sig.has(*t))
        .collect();
        if header_sigs.is_empty() && legacy_sigs.is_empty() {
            return Err(RpmError::NotSigned { path: path.to_owned() });
        }

        // Header digests, compared first: a clearer message than a failing signature.
        done.checks.extend(self.check_header_digest(path, &header_bytes)?);
        for (t, what) in &header_sigs {
            let blob = sig.bin(*t).ok_or_else(|| RpmError::Malformed {
                path: path.to_owned(),
                reason: format!("signature tag {t} is not binary"),
            })?;
            check_signature(path, what, &header_bytes, &blob, keyring, now)?;
            done.signers.push(issuer(&blob));
            done.checks.push(what);
        }

        // The payload: its digest in the (signed) main header, or the legacy tags.
        let payload_digest = self
            .header
            .strings(tag::PAYLOADDIGEST)
            .into_iter()
            .next()
            .filter(|_| use_payload_digest);
        let mut payload_signed = false;
        if let Some(want) = payload_digest {
            done.checks.push(self.check_payload_digest(path, &want)?);
            payload_signed = !header_sigs.is_empty();
        }
        if !payload_signed {
            done.checks.extend(self.check_md5(path)?);
            if !legacy_sigs.is_empty() {
                let len = self.file_len - self.header_offset;
                if len > MAX_LEGACY_SIGNED {
                    return Err(RpmError::Unverifiable { path: path.to_owned(), reason: format!("the package has no payload digest and is {} MiB, too large to check its legacy header+payload signature", len >> 20) });
                }
                let mut data = Vec::with_capacity(len as usize);
                self.stream_file(path, self.header_offset, &mut |c| data.extend_from_slice(c))?;
                for (t, what) in &legacy_sigs {
                    let blob = sig.bin(*t).ok_or_else(|| RpmError::Malformed {
                        path: path.to_owned(),
                        reason: format!("signature tag {t} is not binary"),
                    })?;
                    check_signature(path, what, &data, &blob, keyring, now)?;
                    done.signers.push(issuer(&blob));
                    done.checks.push(what);
                }
                payload_signed = true;
            }
        }
        if !payload_signed {
            return Err(RpmError::Unverifiable { path: path.to_owned(), reason: "no signature covers the payload (no payload digest in the signed header, no header+payload signature)".into() });
        }
        done.signers.dedup();
        Ok(done)
    }

    /// Checks the digests of a package no signature is checked on (an unsigned `--package`),
    /// as rpm ≥ 4.14.2 does at its default `%_pkgverify_level digest`: each digest present
    /// must match, and header and payload must each be covered by one (header SHA256 or the
    /// header+payload MD5; the payload digest or that MD5). Returns the checks made.
    pub fn check_digests(&self, path: &Path) -> Result<Vec<&'static str>, RpmError> {
        let header_bytes = self.signed_header(path)?;
        let mut checks: Vec<&'static str> =
            self.check_header_digest(path, &header_bytes)?.into_iter().collect();
        if let Some(want) = self.header.strings(tag::PAYLOADDIGEST).into_iter().next() {
            checks.push(self.check_payload_digest(path, &want)?);
        }
        checks.extend(self.check_md5(path)?);
        let header = checks.iter().any(|c| c.starts_with("header"));
        let payload = checks.iter().any(|c| c.starts_with("payload") || c.contains("+payload"));
        if !header || !payload {
            let missing = if header { "payload" } else { "header" };
            return Err(RpmError::Unverifiable { path: path.to_owned(), reason: format!("no digest covers its {missing} (no header SHA256, payload digest or header+payload MD5), so a damaged file could not be told apart") });
        }
        Ok(checks)
    }

    /// The header's SHA256 from the signature header, checked; `None` when there is none.
    fn check_header_digest(
        &self,
        path: &Path,
        header_bytes: &[u8],
    ) -> Result<Option<&'static str>, RpmError> {
        let Some(want) = self.signature.string(sigtag::SHA256) else { return Ok(None) };
        let got = hex::encode(sha2::Sha256::digest(header_bytes));
        if !want.eq_ignore_ascii_case(&got) {
            return Err(RpmError::Digest {
                path: path.to_owned(),
                which: "header SHA256".into(),
                expected: want,
                actual: got,
            });
        }
        Ok(Some("header SHA256"))
    }

    /// The compressed payload against `want`, the main header's `PAYLOADDIGEST`.
    fn check_payload_digest(&self, path: &Path, want: &str) -> Result<&'static str, RpmError> {
        let algo = self.header.int(tag::PAYLOADDIGESTALGO).unwrap_or(hashalgo::SHA256);
        let mut h = FileHasher::new(algo).filter(|_| algo != hashalgo::MD5).ok_or_else(|| {
            RpmError::Unverifiable {
                path: path.to_owned(),
                reason: format!("unsupported payload digest algorithm {algo}"),
            }
        })?;
        self.stream_file(path, self.payload_offset, &mut |c| h.update(c))?;
        let got = h.finish();
        if !want.eq_ignore_ascii_case(&got) {
            return Err(RpmError::Digest {
                path: path.to_owned(),
                which: format!("payload {}", h.name()),
                expected: want.to_string(),
                actual: got,
            });
        }
        Ok(if algo == hashalgo::SHA256 { "payload SHA256" } else { "payload digest" })
    }

    /// The signature header's MD5 of header and payload, checked; `None` when there is none.
    fn check_md5(&self, path: &Path) -> Result<Option<&'static str>, RpmError> {
        let Some(want) = self.signature.bin(sigtag::MD5) else { return Ok(None) };
        let mut h = md5::Md5::new();
        self.stream_file(path, self.header_offset, &mut |c| h.update(c))?;
        let got = hex::encode(h.finalize());
        if !hex::encode(&want).eq_ignore_ascii_case(&got) {
            return Err(RpmError::Digest {
                path: path.to_owned(),
                which: "header+payload MD5".into(),
                expected: hex::encode(want),
                actual: got,
            });
        }
        Ok(Some("header+payload MD5"))
    }

    /// Shows the file's bytes from `from` to its end (as it was opened) to `f`.
    fn stream_file(
        &self,
        path: &Path,
        from: u64,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<(), RpmError> {
        let mut file = File::open(path).map_err(io_err("opening", path))?;
        file.seek(SeekFrom::Start(from)).map_err(io_err("seeking in", path))?;
        let mut r = file.take(self.file_len - from);
        let mut buf = vec![0u8; 256 << 10];
        let mut seen = 0u64;
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_err("reading", path)(e)),
            };
            seen += n as u64;
            f(&buf[..n]);
        }
        if seen != self.file_len - from {
            return Err(RpmError::Malformed {
                path: path.to_owned(),
                reason: "the file shrank while it was read".into(),
            });
        }
        Ok(())
    }

    /// The package's files, in header order.
    pub fn files(&self) -> Vec<FileInfo> {
        let h = &self.header;
        let paths = h.file_paths();
        let sizes = if h.has(tag::LONGFILESIZES) {
            h.ints(tag::LONGFILESIZES)
        } else {
            h.ints(tag::FILESIZES)
        };
        let modes = h.ints(tag::FILEMODES);
        let users = h.strings(tag::FILEUSERNAME);
        let groups = h.strings(tag::FILEGROUPNAME);
        let flags = h.ints(tag::FILEFLAGS);
        let links = h.strings(tag::FILELINKTOS);
        let digests = h.strings(tag::FILEDIGESTS);
        let mtimes = h.ints(tag::FILEMTIMES);
        let rdevs = h.ints(tag::FILERDEVS);
        let inodes = h.ints(tag::FILEINODES);
        let devices = h.ints(tag::FILEDEVICES);
        let int = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
        let string = |v: &[String], i: usize| v.get(i).cloned().unwrap_or_default();
        paths
            .into_iter()
            .enumerate()
            .map(|(i, path)| FileInfo {
                path,
                mode: int(&modes, i) as u32 & 0xffff,
                size: int(&sizes, i),
                user: string(&users, i),
                group: string(&groups, i),
                flags: int(&flags, i) as u32,
                link_to: string(&links, i),
                digest: string(&digests, i).to_ascii_lowercase(),
                mtime: int(&mtimes, i) as u32,
                rdev: int(&rdevs, i) as u32,
                inode: int(&inodes, i) as u32,
                device: int(&devices, i) as u32,
            })
            .collect()
    }

    /// Streams the payload of the package at `path` into `sink`: see the module
    /// documentation. On error the sink may hold part of the package.
    pub fn unpack<S: PayloadSink>(
        &self,
        path: &Path,
        sink: &mut S,
        opts: &UnpackOptions,
    ) -> Result<Unpacked, UnpackError<S::Error>> {
        let format = self.header.string(tag::PAYLOADFORMAT).unwrap_or_else(|| "cpio".into());
        if format != "cpio" {
            return Err(RpmError::Malformed {
                path: path.to_owned(),
                reason: format!("payload format `{format}` is not cpio"),
            }
            .into());
        }
        let mut file = File::open(path).map_err(io_err("opening", path))?;
        file.seek(SeekFrom::Start(self.payload_offset)).map_err(io_err("seeking in", path))?;
        let compressed =
            BufReader::with_capacity(64 << 10, file.take(self.file_len - self.payload_offset));
        let stream = decompressor(
            path,
            self.header.string(tag::PAYLOADCOMPRESSOR).as_deref(),
            compressed,
            opts.inflation,
        )?;
        self.unpack_stream(path, stream, sink, opts)
    }

    fn unpack_stream<S: PayloadSink>(
        &self,
        path: &Path,
        stream: Box<dyn Read + '_>,
        sink: &mut S,
        opts: &UnpackOptions,
    ) -> Result<Unpacked, UnpackError<S::Error>> {
        let table = FileTable::new(path, self.files(), opts)?;
        let (files, n) = (&table.files, table.files.len());
        let mut out = Unpacked { file_states: vec![filestate::NORMAL; n], ..Unpacked::default() };
        for (i, s) in table.skipped.iter().enumerate() {
            if *s {
                out.file_states[i] = filestate::NOT_INSTALLED;
            }
        }
        out.ghosts = files.iter().filter(|f| f.is_ghost()).map(|f| f.path.clone()).collect();

        // The payload can be no larger than its entries: header, name, padding and content
        // of each file (ghosts included: rpm < 4.11 sometimes archived them), and a trailer.
        let limit = files.iter().fold(512u64, |acc, f| {
            acc.saturating_add(110 + 2 + f.path.len() as u64 + 1 + 8)
                .saturating_add(f.size.saturating_add(3))
        });
        let mut cpio = Cpio { inner: stream, pos: 0, limit };
        let digest_algo = self.header.int(tag::FILEDIGESTALGO).unwrap_or(hashalgo::MD5);
        let payload_err = |source: io::Error| payload_error(path, source);
        let mut found = vec![false; n];

        while let Some((fx, cpio_size)) = table.next_entry(&mut cpio)? {
            let f = &files[fx];
            if std::mem::replace(&mut found[fx], true) {
                return Err(table.bad(&f.path, "appears twice in the payload".into()).into());
            }
            if f.is_ghost() {
                // rpm skips an archived ghost; only `newc` says how long it is.
                let size = cpio_size.ok_or_else(|| {
                    table.bad(&f.path, "a %ghost file in a stripped payload".into())
                })?;
                cpio.skip(size).map_err(payload_err)?;
                continue;
            }
            let expected = match f.file_type() {
                S_IFREG if table.link_set[fx].as_ref().is_some_and(|s| s.last() != Some(&fx)) => 0,
                S_IFREG | S_IFLNK => f.size,
                _ => 0,
            };
            if let Some(size) = cpio_size {
                if size != expected {
                    return Err(table
                        .bad(
                            &f.path,
                            format!("the payload holds {size} bytes, the header says {expected}"),
                        )
                        .into());
                }
            }
            match f.file_type() {
                S_IFDIR => {
                    if !table.skipped[fx] {
                        table.write(sink, fx, Written::Dir)?;
                        out.written.push(f.path.clone());
                    }
                }
                S_IFLNK => {
                    table.check_link_target(&mut cpio, fx, expected)?;
                    if !table.skipped[fx] {
                        table.write(sink, fx, Written::Symlink(&f.link_to))?;
                        out.written.push(f.path.clone());
                    }
                }
                S_IFREG => {
                    if expected == 0 && f.size > 0 {
                        // An earlier link of a set: the content comes with the last one.
                        continue;
                    }
                    let content = RegularContent { fx, expected, digest_algo };
                    table.write_regular(&mut cpio, sink, content, &mut out)?;
                }
                t @ (S_IFCHR | S_IFBLK | S_IFIFO | S_IFSOCK) => {
                    if !table.skipped[fx] {
                        out.nodes.push(device_node(f, t));
                    }
                }
                t => return Err(table.bad(&f.path, format!("unknown file type {t:o}")).into()),
            }
        }
        // Read the rest, so decompressors check their trailing checksums (gzip CRC32, xz and
        // zstd checks) and a payload cannot go on past its bound.
        io::copy(&mut cpio, &mut io::sink()).map_err(payload_err)?;
        out.archive_size = cpio.pos;
        if let Some(i) = (0..n).find(|i| !found[*i] && !files[*i].is_ghost()) {
            return Err(table
                .bad(&files[i].path, "in the header but not in the payload".into())
                .into());
        }
        Ok(out)
    }
}

/// A package's files as the header lists them, checked before anything of the payload is
/// written: each path normalised and safe, listed once, under none of the package's own
/// symlinks; the hard link sets; which `--nodocs` leaves out.
struct FileTable<'a> {
    /// The `.rpm`, for errors.
    path: &'a Path,
    files: Vec<FileInfo>,
    /// Each file's normalised path (no leading `/`).
    norm: Vec<String>,
    /// Normalised path -> index in `files`.
    index: HashMap<String, usize>,
    /// The hard link set of each regular file that has one.
    link_set: Vec<Option<std::rc::Rc<Vec<usize>>>>,
    /// Files `--nodocs` leaves out.
    skipped: Vec<bool>,
}

/// One regular file's content to read from the payload: its index, its size in the archive
/// and the algorithm of the header's digests.
struct RegularContent {
    fx: usize,
    expected: u64,
    digest_algo: u64,
}

impl<'a> FileTable<'a> {
    fn new(path: &'a Path, files: Vec<FileInfo>, opts: &UnpackOptions) -> Result<Self, RpmError> {
        let n = files.len();
        let bad = |entry: &str, reason: String| RpmError::BadEntry {
            path: path.to_owned(),
            entry: entry.to_owned(),
            reason,
        };
        // Every path checked before anything is written.
        let mut index: HashMap<String, usize> = HashMap::with_capacity(n);
        let mut norm = Vec::with_capacity(n);
        for (i, f) in files.iter().enumerate() {
            let p = paths::normalize(&f.path).ok_or_else(|| RpmError::UnsafePath {
                path: path.to_owned(),
                entry: f.path.clone(),
            })?;
            if paths::odd_name(&p) {
                return Err(bad(&f.path, paths::ODD_NAME.into()));
            }
            if index.insert(p.clone(), i).is_some() {
                return Err(bad(&f.path, "listed twice in the header".into()));
            }
            norm.push(p);
        }
        // A file under one of the package's own symlinks would be written through it when
        // the layer is extracted, wherever it points.
        let symlinks: HashSet<&str> = files
            .iter()
            .zip(&norm)
            .filter(|(f, _)| f.file_type() == S_IFLNK && !f.is_ghost())
            .map(|(_, p)| p.as_str())
            .collect();
        for (f, p) in files.iter().zip(&norm) {
            let mut at = p.as_str();
            while let Some((parent, _)) = at.rsplit_once('/') {
                if symlinks.contains(parent) {
                    return Err(bad(
                        &f.path,
                        format!("lies under /{parent}, a symlink of the package"),
                    ));
                }
                at = parent;
            }
        }
        // Hard link sets: regular non-ghost files sharing build-time device and inode, in
        // header order; the archive holds the content on the last one (lib/rpmfi.c
        // `rpmfilesBuildNLink`, `iterReadArchiveNext`).
        let mut by_inode: HashMap<(u32, u32), Vec<usize>> = HashMap::new();
        for (i, f) in files.iter().enumerate() {
            if f.file_type() == S_IFREG && !f.is_ghost() && f.inode > 0 {
                by_inode.entry((f.device, f.inode)).or_default().push(i);
            }
        }
        let mut link_set: Vec<Option<std::rc::Rc<Vec<usize>>>> = vec![None; n];
        for set in by_inode.into_values().filter(|s| s.len() > 1) {
            let set = std::rc::Rc::new(set);
            for &i in set.iter() {
                link_set[i] = Some(set.clone());
            }
        }
        let skipped: Vec<bool> = files
            .iter()
            .map(|f| {
                opts.nodocs && f.flags & fileflag::DOC != 0 && f.flags & fileflag::LICENSE == 0
            })
            .collect();
        Ok(FileTable { path, files, norm, index, link_set, skipped })
    }

    fn bad(&self, entry: &str, reason: String) -> RpmError {
        RpmError::BadEntry { path: self.path.to_owned(), entry: entry.to_owned(), reason }
    }

    /// The next entry's header: the index of its file and, for `newc`, its size; `None` at the
    /// trailer.
    fn next_entry(&self, cpio: &mut Cpio<'_>) -> Result<Option<(usize, Option<u64>)>, RpmError> {
        let path = self.path;
        let payload_err = |source: io::Error| payload_error(path, source);
        let malformed = |reason: String| RpmError::Malformed { path: path.to_owned(), reason };
        cpio.pad().map_err(payload_err)?;
        let mut magic = [0u8; 6];
        cpio.read_exact(&mut magic).map_err(payload_err)?;
        if &magic == CPIO_NEWC_MAGIC || &magic == CPIO_CRC_MAGIC {
            let mut h = [0u8; 104];
            cpio.read_exact(&mut h).map_err(payload_err)?;
            let mut fields = [0u64; 13];
            for (k, v) in fields.iter_mut().enumerate() {
                *v = hex_field(&h[k * 8..k * 8 + 8]).ok_or_else(|| {
                    malformed(format!("bad cpio header at payload offset {}", cpio.pos))
                })?;
            }
            let (size, namesize) = (fields[6], fields[11]);
            if namesize == 0 || namesize > CPIO_NAMESIZE_MAX {
                return Err(malformed(format!(
                    "cpio name of {namesize} bytes at payload offset {}",
                    cpio.pos
                )));
            }
            let mut name = vec![0u8; namesize as usize];
            cpio.read_exact(&mut name).map_err(payload_err)?;
            if name.pop() != Some(0) || name.contains(&0) {
                return Err(malformed(format!(
                    "cpio name without its NUL at payload offset {}",
                    cpio.pos
                )));
            }
            cpio.pad().map_err(payload_err)?;
            if name == CPIO_TRAILER {
                return Ok(None);
            }
            let shown = String::from_utf8_lossy(&name).into_owned();
            let key =
                std::str::from_utf8(&name).ok().and_then(paths::normalize).ok_or_else(|| {
                    RpmError::UnsafePath { path: path.to_owned(), entry: shown.clone() }
                })?;
            let fx = *self
                .index
                .get(&key)
                .ok_or_else(|| self.bad(&shown, "not in the header's file list".into()))?;
            Ok(Some((fx, Some(size))))
        } else if &magic == CPIO_STRIPPED_MAGIC {
            let mut h = [0u8; 8];
            cpio.read_exact(&mut h).map_err(payload_err)?;
            let fx = hex_field(&h).ok_or_else(|| {
                malformed(format!("bad stripped cpio header at payload offset {}", cpio.pos))
            })?;
            cpio.pad().map_err(payload_err)?;
            if fx == 0xffff_ffff {
                return Ok(None);
            }
            let n = self.files.len();
            if fx >= n as u64 {
                return Err(malformed(format!("stripped cpio entry for file {fx} of {n}")));
            }
            Ok(Some((fx as usize, None)))
        } else {
            Err(malformed(format!(
                "bad cpio magic `{}` at payload offset {}",
                magic.escape_ascii(),
                cpio.pos - 6
            )))
        }
    }

    /// Hands file `i` to the sink as `what`; returns where it landed.
    fn write<S: PayloadSink>(
        &self,
        sink: &mut S,
        i: usize,
        what: Written<'_, S::Content>,
    ) -> Result<Option<String>, UnpackError<S::Error>> {
        let f = &self.files[i];
        sink.write(f, &self.norm[i], what)
            .map_err(|error| UnpackError::Sink { entry: f.path.clone(), error })
    }

    /// A symlink's target in the payload (`expected` bytes) is the one the header names.
    fn check_link_target(
        &self,
        cpio: &mut Cpio<'_>,
        fx: usize,
        expected: u64,
    ) -> Result<(), RpmError> {
        let f = &self.files[fx];
        if expected > MAX_LINK {
            return Err(self.bad(&f.path, format!("a symlink target of {expected} bytes")));
        }
        let mut target = vec![0u8; expected as usize];
        cpio.read_exact(&mut target).map_err(|e| payload_error(self.path, e))?;
        if f.link_to.is_empty() || target != f.link_to.as_bytes() {
            return Err(self.bad(
                &f.path,
                format!(
                    "the payload's link target `{}` is not the header's `{}`",
                    target.escape_ascii(),
                    f.link_to
                ),
            ));
        }
        Ok(())
    }

    /// A regular file's content, checked against the header's digest, written once under
    /// each name of its hard link set that is installed (the others link to the first).
    fn write_regular<S: PayloadSink>(
        &self,
        cpio: &mut Cpio<'_>,
        sink: &mut S,
        content: RegularContent,
        out: &mut Unpacked,
    ) -> Result<(), UnpackError<S::Error>> {
        let RegularContent { fx, expected, digest_algo } = content;
        let (f, path) = (&self.files[fx], self.path);
        let payload_err = |source: io::Error| payload_error(path, source);
        let targets: Vec<usize> = match &self.link_set[fx] {
            Some(s) => s.iter().copied().filter(|i| !self.skipped[*i]).collect(),
            None if !self.skipped[fx] => vec![fx],
            None => Vec::new(),
        };
        let mut hasher = FileHasher::new(digest_algo).ok_or_else(|| RpmError::Unverifiable {
            path: path.to_owned(),
            reason: format!("unsupported file digest algorithm {digest_algo}"),
        })?;
        if targets.is_empty() {
            cpio.skip(expected).map_err(payload_err)?;
            return Ok(());
        }
        let mut stream = cpio.take(expected);
        let kind =
            sink.content(&mut stream, expected, &mut |c| hasher.update(c)).map_err(payload_err)?;
        if !f.digest.is_empty() {
            let got = hasher.finish();
            if got != f.digest {
                return Err(RpmError::Digest {
                    path: path.to_owned(),
                    which: format!("{} of {}", hasher.name(), f.path),
                    expected: f.digest.clone(),
                    actual: got,
                }
                .into());
            }
        }
        let mut first: Option<String> = None;
        for i in targets {
            let fi = &self.files[i];
            let landed =
                self.write(sink, i, Written::File { content: &kind, link_to: first.as_deref() })?;
            first = first.or(landed);
            out.written.push(fi.path.clone());
            if fi.is_config() {
                out.config.push(fi.path.clone());
            }
            if fi.mode & 0o6000 != 0 {
                out.setid.push((fi.path.clone(), fi.mode & 0o7777));
            }
        }
        Ok(())
    }
}

/// A device node, FIFO or socket of the payload (`t`, its file type), as the report lists it:
/// never written to the layer.
fn device_node(f: &FileInfo, t: u32) -> Node {
    let kind = match t {
        S_IFCHR => "char",
        S_IFBLK => "block",
        S_IFIFO => "fifo",
        _ => "socket",
    };
    // Linux's `new_encode_dev` (include/linux/kdev_t.h).
    let (major, minor) = ((f.rdev >> 8) & 0xfff, (f.rdev & 0xff) | ((f.rdev >> 12) & 0xfff00));
    Node { path: f.path.clone(), kind, mode: f.mode & 0o7777, major, minor }
}

fn io_err<'p>(operation: &'static str, path: &'p Path) -> impl Fn(io::Error) -> RpmError + 'p {
    move |source| RpmError::Io { operation, path: path.to_owned(), source }
}

/// Checks one OpenPGP signature of the signature header, naming the key when it is not in
/// the keyring.
fn check_signature(
    path: &Path,
    which: &'static str,
    data: &[u8],
    sig: &[u8],
    keyring: &Keyring,
    now: i64,
) -> Result<(), RpmError> {
    match openpgp::verify_detached_with(data, sig, keyring, now) {
        Ok(()) => Ok(()),
        Err(SignatureError::NoValidSignature { outside, .. }) if !outside.is_empty() => {
            Err(RpmError::UnknownKey { path: path.to_owned(), key: outside.join(", ") })
        }
        Err(source) => Err(RpmError::BadSignature { path: path.to_owned(), which, source }),
    }
}

/// How a signature packet names its issuer: fingerprint, else key ID.
fn issuer(sig: &[u8]) -> String {
    use pgp::composed::Deserializable as _;
    let Ok((mut sigs, _)) = pgp::composed::DetachedSignature::from_reader_many(sig) else {
        return "(unreadable)".into();
    };
    match sigs.next() {
        Some(Ok(s)) => {
            let s = s.signature;
            if let Some(fp) = s.issuer_fingerprint().first() {
                format!("{fp:X}")
            } else if let Some(id) = s.issuer_key_id().first() {
                id.to_string().to_ascii_uppercase()
            } else {
                "(unnamed)".into()
            }
        }
        _ => "(unreadable)".into(),
    }
}

/// 8 hex digits of a cpio header field, all of them (rpm's `GET_NUM_FIELD`).
fn hex_field(b: &[u8]) -> Option<u64> {
    if b.len() != 8 || !b.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(b).ok()?, 16).ok()
}

/// An error reading the payload: [`RpmError::Limit`] for a limit reached.
fn payload_error(path: &Path, source: io::Error) -> RpmError {
    match erdma_limits::exceeded(&source) {
        Some(exceeded) => RpmError::Limit { path: path.to_owned(), exceeded: exceeded.clone() },
        None => RpmError::Payload { path: path.to_owned(), source },
    }
}

/// The decompressed payload, after checking that `PAYLOADCOMPRESSOR` and the first bytes
/// agree, refused once it inflates more than `inflation` times the bytes read
/// ([`erdma_limits::inflate`]; 0: no limit). bzip2 is refused: the crate is in Cargo.lock
/// (through pgp) but not a dependency of ours, and no current distribution builds bzip2
/// payloads.
fn decompressor<'a>(
    path: &Path,
    compressor: Option<&str>,
    mut r: impl Read + 'a,
    inflation: u64,
) -> Result<Box<dyn Read + 'a>, RpmError> {
    // rpm reads a package without the tag as gzip (lib/psm.c, rpm2cpio).
    let name = compressor.unwrap_or("gzip");
    let mut head = vec![0u8; 6];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => return Err(RpmError::Payload { path: path.to_owned(), source }),
        }
    }
    head.truncate(got);
    let magic: &[u8] = match name {
        "gzip" => &[0x1f, 0x8b],
        "xz" => &[0xfd, b'7', b'z', b'X', b'Z', 0],
        "zstd" => &[0x28, 0xb5, 0x2f, 0xfd],
        // lzma_alone has no magic, only properties (0x5d for every preset).
        "lzma" => &[],
        other => {
            return Err(RpmError::UnsupportedCompression {
                path: path.to_owned(),
                compression: other.to_string(),
            })
        }
    };
    if !head.starts_with(magic) {
        return Err(RpmError::Malformed {
            path: path.to_owned(),
            reason: format!("the payload is said to be {name} but does not start like it"),
        });
    }
    let stream = Cursor::new(head).chain(r);
    let decoder: fn(_) -> io::Result<Box<dyn Read + 'a>> = match name {
        "gzip" => |c| Ok(Box::new(flate2::read::MultiGzDecoder::new(c))),
        "xz" => |c| Ok(Box::new(liblzma::read::XzDecoder::new_multi_decoder(c))),
        "lzma" => |c| {
            let s =
                liblzma::stream::Stream::new_lzma_decoder(u64::MAX).map_err(io::Error::other)?;
            Ok(Box::new(liblzma::read::XzDecoder::new_stream(c, s)))
        },
        _ => |c| Ok(Box::new(zstd::stream::read::Decoder::new(c)?)),
    };
    erdma_limits::inflate(stream, inflation, u64::MAX, decoder)
        .map(|r| Box::new(r) as Box<dyn Read + 'a>)
        .map_err(|source| payload_error(path, source))
}

/// The decompressed archive: counts its offset (cpio pads to 4 bytes from the start) and
/// refuses to go past `limit`.
struct Cpio<'a> {
    inner: Box<dyn Read + 'a>,
    pos: u64,
    limit: u64,
}

impl Read for Cpio<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let room = self.limit - self.pos;
        if room == 0 {
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the payload is larger than its files allow ({} bytes)", self.limit),
                )),
            };
        }
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Cpio<'_> {
    fn pad(&mut self) -> io::Result<()> {
        let pad = (4 - self.pos % 4) % 4;
        self.skip(pad)
    }

    fn skip(&mut self, n: u64) -> io::Result<()> {
        let copied = io::copy(&mut self.take(n), &mut io::sink())?;
        if copied != n {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the payload ends early"));
        }
        Ok(())
    }
}

/// A file or payload digest in one of rpm's algorithms.
enum FileHasher {
    Md5(md5::Md5),
    Sha256(sha2::Sha256),
    Sha384(sha2::Sha384),
    Sha512(sha2::Sha512),
}

impl FileHasher {
    /// `None` for an algorithm we lack (SHA-1, `hashalgo::SHA1`, which no current distribution
    /// uses for files; it is not a dependency of ours).
    fn new(algo: u64) -> Option<FileHasher> {
        Some(match algo {
            hashalgo::MD5 => FileHasher::Md5(md5::Md5::new()),
            hashalgo::SHA256 => FileHasher::Sha256(sha2::Sha256::new()),
            hashalgo::SHA384 => FileHasher::Sha384(sha2::Sha384::new()),
            hashalgo::SHA512 => FileHasher::Sha512(sha2::Sha512::new()),
            hashalgo::SHA1 => return None,
            _ => return None,
        })
    }

    fn name(&self) -> &'static str {
        match self {
            FileHasher::Md5(_) => "MD5",
            FileHasher::Sha256(_) => "SHA256",
            FileHasher::Sha384(_) => "SHA384",
            FileHasher::Sha512(_) => "SHA512",
        }
    }

    fn update(&mut self, b: &[u8]) {
        match self {
            FileHasher::Md5(h) => h.update(b),
            FileHasher::Sha256(h) => h.update(b),
            FileHasher::Sha384(h) => h.update(b),
            FileHasher::Sha512(h) => h.update(b),
        }
    }

    /// Lower-case hex; the hasher starts over.
    fn finish(&mut self) -> String {
        match self {
            FileHasher::Md5(h) => hex::encode(h.finalize_reset()),
            FileHasher::Sha256(h) => hex::encode(h.finalize_reset()),
            FileHasher::Sha384(h) => hex::encode(h.finalize_reset()),
            FileHasher::Sha512(h) => hex::encode(h.finalize_reset()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::Value;
    use std::collections::BTreeMap;
    use std::process::Command;

    /// rpmbuild, rpmsign, gpg, rpm2cpio and cpio build and check the fixtures, so the reader
    /// is compared with the real tools. Without them the tests skip, except in CI.
    fn have_tools() -> bool {
        let on_path = |t: &str| {
            std::env::var_os("PATH")
                .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(t).is_file()))
        };
        let missing: Vec<&str> = ["rpmbuild", "rpmsign", "rpm", "gpg", "rpm2cpio", "cpio"]
            .into_iter()
            .filter(|t| !on_path(t))
            .collect();
        if !missing.is_empty() {
            assert!(std::env::var_os("CI").is_none(), "{missing:?} needed for this test in CI");
            eprintln!("skipping: {missing:?} not found");
        }
        missing.is_empty()
    }

    fn run(cmd: &mut Command) -> Vec<u8> {
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    }

    /// A throwaway signing key in its own GNUPGHOME: (home, armoured public key, fingerprint).
    fn gpg_key(dir: &Path, name: &str) -> (PathBuf, Vec<u8>, String) {
        let home = dir.join(format!("gnupg-{name}"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        let gpg = || {
            let mut c = Command::new("gpg");
            c.env("GNUPGHOME", &home).args([
                "--batch",
                "--pinentry-mode",
                "loopback",
                "--passphrase",
                "",
            ]);
            c
        };
        run(gpg().args([
            "--quick-gen-key",
            &format!("{name} <{name}@example.invalid>"),
            "rsa3072",
            "sign",
            "never",
        ]));
        let armoured = run(gpg().args(["--armor", "--export", name]));
        let colons =
            String::from_utf8(run(gpg().args(["--with-colons", "--fingerprint", name]))).unwrap();
        let fpr = colons
            .lines()
            .find(|l| l.starts_with("fpr:"))
            .unwrap()
            .split(':')
            .nth(9)
            .unwrap()
            .to_string();
        (home, armoured, fpr)
    }

    const SPEC: &str = r#"Name: erdmatest
Version: 1.0
Release: 1
Summary: test package
License: MIT
BuildArch: x86_64
%description
test
%install
mkdir -p %{buildroot}/usr/bin %{buildroot}/usr/lib64 %{buildroot}/etc %{buildroot}/var/lib/erdmatest %{buildroot}/usr/share/doc/erdmatest
printf '#!/bin/sh\necho hi\n' > %{buildroot}/usr/bin/tool
printf 'conf=1\n' > %{buildroot}/etc/erdmatest.conf
head -c @BIG@ /dev/urandom > %{buildroot}/usr/lib64/libbig.so.1.0
ln -s libbig.so.1.0 %{buildroot}/usr/lib64/libbig.so.1
printf 'hard\n' > %{buildroot}/usr/bin/h1
ln %{buildroot}/usr/bin/h1 %{buildroot}/usr/bin/h2
printf 'suid\n' > %{buildroot}/usr/bin/su1
chmod 4755 %{buildroot}/usr/bin/su1
: > %{buildroot}/usr/lib64/empty
printf 'doc\n' > %{buildroot}/usr/share/doc/erdmatest/README
%files
%attr(0755,root,root) /usr/bin/tool
%config(noreplace) /etc/erdmatest.conf
%ghost /var/log/erdmatest.log
%dir %attr(0750,nobody,nobody) /var/lib/erdmatest
%attr(0640,nobody,root) /usr/lib64/libbig.so.1.0
/usr/lib64/libbig.so.1
/usr/lib64/empty
/usr/bin/h1
/usr/bin/h2
%attr(4755,root,root) /usr/bin/su1
%doc /usr/share/doc/erdmatest/README
"#;

    /// Builds the test package with `rpmbuild -bb`; `big` bytes of random data in one file
    /// (over 1 MiB: spooled).
    fn build(dir: &Path, payload: &str, big: usize) -> PathBuf {
        let top = dir.join(format!("top-{payload}-{big}"));
        std::fs::create_dir_all(top.join("SPECS")).unwrap();
        let spec = top.join("SPECS/t.spec");
        std::fs::write(&spec, SPEC.replace("@BIG@", &big.to_string())).unwrap();
        run(Command::new("rpmbuild")
            .arg("-bb")
            .arg("--define")
            .arg(format!("_topdir {}", top.display()))
            .arg("--define")
            .arg(format!("_binary_payload {payload}"))
            .arg(&spec));
        let built = top.join("RPMS/x86_64/erdmatest-1.0-1.x86_64.rpm");
        let out = dir.join(format!("erdmatest-{payload}-{big}.rpm"));
        std::fs::copy(built, &out).unwrap();
        out
    }

    fn sign(home: &Path, rpm: &Path, v3: bool) -> PathBuf {
        let out = rpm.with_extension(if v3 { "v3.signed.rpm" } else { "signed.rpm" });
        std::fs::copy(rpm, &out).unwrap();
        let mut c = Command::new("rpmsign");
        c.arg("--addsign");
        if v3 {
            c.arg("--rpmv3");
        }
        // Distributions call it gpg2 and rpm runs it by its full path; here it may only be gpg.
        let gpg = std::env::split_paths(&std::env::var_os("PATH").unwrap())
            .map(|d| d.join("gpg"))
            .find(|p| p.is_file())
            .unwrap();
        c.arg("--define")
            .arg(format!("__gpg {}", gpg.display()))
            .args(["--define", "_gpg_name test"])
            .arg("--define")
            .arg(format!("_gpg_path {}", home.display()))
            .arg(&out);
        run(&mut c);
        out
    }

    fn owners(user: &str, group: &str) -> (u32, u32) {
        let id = |n: &str| match n {
            "root" => 0,
            "nobody" => 65534,
            other => panic!("unexpected owner {other}"),
        };
        (id(user), id(group))
    }

    /// What the payload wrote: path → (type, mode, uid, gid, content or link target), with
    /// the parent directories a layer would add (0755, root), as `cpio -idm` makes them too.
    /// Hard links: (name, the earlier name it links to).
    #[derive(Default)]
    struct Entries(BTreeMap<String, (char, u32, u64, u64, Vec<u8>)>, Vec<(String, String)>);

    impl PayloadSink for Entries {
        type Content = Vec<u8>;
        type Error = std::convert::Infallible;
        fn content(
            &mut self,
            from: &mut dyn Read,
            size: u64,
            each: &mut dyn FnMut(&[u8]),
        ) -> io::Result<Vec<u8>> {
            let mut data = Vec::with_capacity(size as usize);
            from.read_to_end(&mut data)?;
            each(&data);
            Ok(data)
        }
        fn write(
            &mut self,
            file: &FileInfo,
            path: &str,
            what: Written<'_, Vec<u8>>,
        ) -> Result<Option<String>, Self::Error> {
            let (uid, gid) = owners(&file.user, &file.group);
            let (uid, gid) = (u64::from(uid), u64::from(gid));
            let mode = file.mode & 0o7777;
            let entry = match what {
                Written::Dir => ('d', mode, uid, gid, Vec::new()),
                Written::Symlink(to) => ('l', 0o777, uid, gid, to.as_bytes().to_vec()),
                Written::File { content, link_to } => {
                    if let Some(to) = link_to {
                        self.1.push((path.to_string(), to.to_string()));
                    }
                    ('-', mode, uid, gid, content.clone())
                }
            };
            let mut at = path;
            while let Some((parent, _)) = at.rsplit_once('/') {
                self.0.entry(parent.to_string()).or_insert(('d', 0o755, 0, 0, Vec::new()));
                at = parent;
            }
            self.0.insert(path.to_string(), entry);
            Ok(Some(path.to_string()))
        }
    }

    type Written3 =
        (Unpacked, BTreeMap<String, (char, u32, u64, u64, Vec<u8>)>, Vec<(String, String)>);

    /// Unpacks the package at `path` into [`Entries`].
    fn unpack_entries(
        pkg: &Package,
        path: &Path,
        opts: &UnpackOptions,
    ) -> Result<Written3, RpmError> {
        let mut sink = Entries::default();
        match pkg.unpack(path, &mut sink, opts) {
            Ok(u) => Ok((u, sink.0, sink.1)),
            Err(UnpackError::Package(e)) => Err(e),
            Err(UnpackError::Sink { error, .. }) => match error {},
        }
    }

    /// What `rpm2cpio | cpio -idm` extracts: path → (type, content or link target).
    fn cpio_extract(rpm: &Path, dir: &Path) -> BTreeMap<String, (char, Vec<u8>)> {
        std::fs::create_dir_all(dir).unwrap();
        run(Command::new("sh")
            .arg("-c")
            .arg(format!(
                "rpm2cpio '{}' | cpio -idm --quiet --no-absolute-filenames",
                rpm.display()
            ))
            .current_dir(dir));
        let mut out = BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                let rel = e.path().strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                let ft = e.file_type().unwrap();
                if ft.is_symlink() {
                    out.insert(
                        rel,
                        (
                            'l',
                            std::fs::read_link(e.path())
                                .unwrap()
                                .into_os_string()
                                .into_encoded_bytes(),
                        ),
                    );
                } else if ft.is_dir() {
                    out.insert(rel, ('d', Vec::new()));
                    stack.push(e.path());
                } else {
                    out.insert(rel, ('-', std::fs::read(e.path()).unwrap()));
                }
            }
        }
        out
    }

    /// `rpm -qp --dump`: path → (mode, owner, group, symlink target).
    fn rpm_dump(rpm: &Path) -> BTreeMap<String, (u32, String, String, String)> {
        let text =
            String::from_utf8(run(Command::new("rpm").args(["-qp", "--dump"]).arg(rpm))).unwrap();
        text.lines()
            .map(|l| {
                // path size mtime digest mode owner group isconfig isdoc rdev symlink
                let f: Vec<&str> = l.split(' ').collect();
                (
                    f[0].to_string(),
                    (
                        u32::from_str_radix(f[4], 8).unwrap(),
                        f[5].to_string(),
                        f[6].to_string(),
                        f[10..].join(" "),
                    ),
                )
            })
            .collect()
    }

    #[test]
    fn real_packages_verify_and_unpack_like_rpm2cpio_and_rpm_dump() {
        if !have_tools() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (home, public, fpr) = gpg_key(dir.path(), "test");
        let (_, other_public, _) = gpg_key(dir.path(), "other");
        let keyring = Keyring::load(&public).unwrap();
        let other = Keyring::load(&other_public).unwrap();
        let now = erdma_common::dates::now();
        for (payload, compressor) in
            [("w19.zstdio", "zstd"), ("w9.gzdio", "gzip"), ("w6.xzdio", "xz"), ("w6.lzdio", "lzma")]
        {
            let unsigned = build(dir.path(), payload, 3 << 20);
            let signed = sign(&home, &unsigned, false);
            let pkg = open(&signed).unwrap();
            assert_eq!(pkg.header.name(), "erdmatest");
            assert_eq!(pkg.header.string(tag::PAYLOADCOMPRESSOR).as_deref(), Some(compressor));
            assert!(pkg.payload_offset > pkg.header_offset && pkg.payload_offset < pkg.file_len);

            let v = pkg.verify(&signed, &keyring, now).unwrap();
            assert_eq!(v.signers, std::slice::from_ref(&fpr), "{payload}");
            assert_eq!(
                v.checks,
                ["header SHA256", "RSA header signature", "payload SHA256"],
                "{payload}"
            );
            let e = pkg.verify(&signed, &other, now).unwrap_err();
            assert!(matches!(&e, RpmError::UnknownKey { key, .. } if *key == fpr), "{e}");
            let e = open(&unsigned).unwrap().verify(&unsigned, &keyring, now).unwrap_err();
            assert!(matches!(e, RpmError::NotSigned { .. }), "{e}");

            let (u, got, links) = unpack_entries(&pkg, &signed, &UnpackOptions::default()).unwrap();
            let want = cpio_extract(&signed, &dir.path().join(format!("x-{payload}")));
            assert_eq!(
                got.keys().collect::<Vec<_>>(),
                want.keys().collect::<Vec<_>>(),
                "{payload}: same paths as rpm2cpio | cpio"
            );
            for (p, (t, data)) in &want {
                assert_eq!((got[p].0, &got[p].4), (*t, data), "{payload}: {p}");
            }
            let dump = rpm_dump(&signed);
            for (p, (mode, user, group, link)) in &dump {
                let rel = &p[1..];
                if p == "/var/log/erdmatest.log" {
                    assert!(!got.contains_key(rel), "ghost not created");
                    continue;
                }
                let (t, m, uid, gid, data) = &got[rel];
                assert_eq!(*m, mode & 0o7777, "{p}");
                assert_eq!((*uid as u32, *gid as u32), owners(user, group), "{p}");
                if *t == 'l' {
                    assert_eq!(data, link.as_bytes(), "{p}");
                } else {
                    assert_eq!(link, "X", "{p}");
                }
            }
            assert_eq!(got["usr/lib64/libbig.so.1.0"].4.len(), 3 << 20);
            assert_eq!(got["usr/bin/h1"].4, b"hard\n");
            assert_eq!(got["usr/bin/h2"].4, b"hard\n");
            // One file with two names, as rpm links them.
            assert_eq!(links, [("usr/bin/h2".to_string(), "usr/bin/h1".to_string())], "{payload}");
            assert_eq!(u.ghosts, ["/var/log/erdmatest.log"]);
            assert_eq!(u.config, ["/etc/erdmatest.conf"]);
            assert_eq!(u.setid, [("/usr/bin/su1".to_string(), 0o4755)]);
            assert!(u.nodes.is_empty());
            assert_eq!(u.file_states, vec![filestate::NORMAL; pkg.files().len()]);
            assert_eq!(u.written.len(), pkg.files().len() - 1, "everything but the ghost");
            // rpmbuild records the archive's size in the signature header (unsigned, so not our bound).
            assert_eq!(
                Some(u.archive_size),
                pkg.signature
                    .int(sigtag::PAYLOADSIZE)
                    .or_else(|| pkg.signature.int(sigtag::LONGARCHIVESIZE))
            );

            // nodocs: the %doc file is skipped and recorded as not installed.
            let (u, got, _) = unpack_entries(
                &pkg,
                &signed,
                &UnpackOptions { nodocs: true, ..UnpackOptions::default() },
            )
            .unwrap();
            assert!(!got.contains_key("usr/share/doc/erdmatest/README"));
            let doc = pkg
                .files()
                .iter()
                .position(|f| f.path == "/usr/share/doc/erdmatest/README")
                .unwrap();
            assert_eq!(u.file_states[doc], filestate::NOT_INSTALLED);
        }
    }

    fn flipped(src: &Path, at: u64) -> PathBuf {
        let mut b = std::fs::read(src).unwrap();
        b[at as usize] ^= 0x01;
        let out = src.with_extension(format!("flip{at}.rpm"));
        std::fs::write(&out, b).unwrap();
        out
    }

    #[test]
    fn tampered_packages_are_refused() {
        if !have_tools() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (home, public, _) = gpg_key(dir.path(), "test");
        let keyring = Keyring::load(&public).unwrap();
        let now = erdma_common::dates::now();
        let signed = sign(&home, &build(dir.path(), "w19.zstdio", 1000), false);
        let pkg = open(&signed).unwrap();
        // A byte of the main header's data (its last one: the end of some string).
        let bad = flipped(&signed, pkg.payload_offset - 1);
        let e = open(&bad).and_then(|p| p.verify(&bad, &keyring, now)).unwrap_err();
        assert!(matches!(e, RpmError::Digest { ref which, .. } if which == "header SHA256"), "{e}");
        // A byte of the payload: its digest in the signed header no longer matches.
        let bad = flipped(&signed, (pkg.payload_offset + pkg.file_len) / 2);
        let p = open(&bad).unwrap();
        let e = p.verify(&bad, &keyring, now).unwrap_err();
        assert!(
            matches!(e, RpmError::Digest { ref which, .. } if which == "payload SHA256"),
            "{e}"
        );
        assert!(
            unpack_entries(&p, &bad, &UnpackOptions::default()).is_err(),
            "zstd's checksum or a file digest catches it"
        );
        // A header signature that no longer matches, digests left intact: BADSIG.
        let sig = &pkg.signature;
        let e = sig.entries().iter().find(|e| e.tag == sigtag::RSA).unwrap();
        let il = sig.entries().len() as u64;
        let at = 96 + 16 + il * 16 + u64::from(e.offset) + u64::from(e.len) - 1;
        let bad = flipped(&signed, at);
        let err = open(&bad).unwrap().verify(&bad, &keyring, now).unwrap_err();
        assert!(matches!(err, RpmError::BadSignature { .. }), "{err}");
    }

    #[test]
    fn unsigned_packages_have_their_digests_checked() {
        if !have_tools() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        // rpmbuild's own output, unsigned: every digest rpm 4.18 writes is there and checked.
        let rpm = build(dir.path(), "w19.zstdio", 1000);
        let pkg = open(&rpm).unwrap();
        assert_eq!(
            pkg.check_digests(&rpm).unwrap(),
            vec!["header SHA256", "payload SHA256", "header+payload MD5"]
        );
        // rpm itself agrees the file is whole (`rpm -K`: digests only, no key).
        let out = Command::new("rpm").arg("-K").arg("--nosignature").arg(&rpm).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
        // A byte of the main header, then one of the payload: refused, naming the digest, as
        // `rpm -K` refuses them.
        for (at, which) in [
            (pkg.payload_offset - 1, "header SHA256"),
            ((pkg.payload_offset + pkg.file_len) / 2, "payload SHA256"),
        ] {
            let bad = flipped(&rpm, at);
            let e = open(&bad).unwrap().check_digests(&bad).unwrap_err();
            assert!(matches!(e, RpmError::Digest { which: ref w, .. } if w == which), "{e}");
            let out =
                Command::new("rpm").arg("-K").arg("--nosignature").arg(&bad).output().unwrap();
            assert!(
                !out.status.success(),
                "rpm -K took {which} damage: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }

    #[test]
    fn legacy_header_and_payload_signatures() {
        if !have_tools() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (home, public, fpr) = gpg_key(dir.path(), "test");
        let keyring = Keyring::load(&public).unwrap();
        let now = erdma_common::dates::now();
        let signed = sign(&home, &build(dir.path(), "w9.gzdio", 1000), true);
        let pkg = open(&signed).unwrap();
        assert!(
            pkg.signature.has(sigtag::PGP),
            "rpmsign --rpmv3 adds the header+payload signature"
        );
        // As an rpm without payload digests checks it.
        let v = pkg.verify_inner(&signed, &keyring, now, false).unwrap();
        assert_eq!(
            v.checks,
            [
                "header SHA256",
                "RSA header signature",
                "header+payload MD5",
                "RSA header+payload signature"
            ]
        );
        assert_eq!(v.signers, [fpr]);
        let bad = flipped(&signed, (pkg.payload_offset + pkg.file_len) / 2);
        let e = open(&bad).unwrap().verify_inner(&bad, &keyring, now, false).unwrap_err();
        assert!(
            matches!(e, RpmError::Digest { ref which, .. } if which == "header+payload MD5"),
            "{e}"
        );
    }

    #[test]
    fn truncated_packages_never_panic() {
        if !have_tools() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (home, public, _) = gpg_key(dir.path(), "test");
        let keyring = Keyring::load(&public).unwrap();
        let signed = sign(&home, &build(dir.path(), "w19.zstdio", 1000), false);
        let bytes = std::fs::read(&signed).unwrap();
        let cut_path = dir.path().join("cut.rpm");
        for cut in (0..bytes.len()).step_by(97) {
            std::fs::write(&cut_path, &bytes[..cut]).unwrap();
            if let Ok(p) = open(&cut_path) {
                assert!(p.verify(&cut_path, &keyring, 0).is_err(), "cut at {cut}");
                assert!(
                    unpack_entries(&p, &cut_path, &UnpackOptions::default()).is_err(),
                    "cut at {cut}"
                );
            }
        }
    }

    /// A package file around `entries` as its main header (no region: unsigned) and a
    /// gzip payload.
    fn synthetic(dir: &Path, name: &str, entries: &[(u32, Value)], cpio: &[u8]) -> PathBuf {
        let mut out = vec![0u8; LEAD_SIZE];
        out[..4].copy_from_slice(&LEAD_MAGIC);
        out[4] = 3;
        out[78..80].copy_from_slice(&SIGTYPE_HEADERSIG.to_be_bytes());
        let sig = Header::build(&[(sigtag::SIZE, Value::Int32(vec![0]))]).unwrap();
        out.extend_from_slice(&header::MAGIC);
        out.extend_from_slice(sig.blob());
        while !out.len().is_multiple_of(8) {
            out.push(0);
        }
        out.extend_from_slice(&header::MAGIC);
        out.extend_from_slice(Header::build(entries).unwrap().blob());
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        io::Write::write_all(&mut gz, cpio).unwrap();
        out.extend_from_slice(&gz.finish().unwrap());
        let path = dir.join(name);
        std::fs::write(&path, out).unwrap();
        path
    }

    fn pad4(v: &mut Vec<u8>) {
        while !v.len().is_multiple_of(4) {
            v.push(0);
        }
    }

    fn newc(v: &mut Vec<u8>, name: &str, mode: u32, content: &[u8]) {
        pad4(v);
        v.extend_from_slice(CPIO_NEWC_MAGIC);
        let fields =
            [1, mode, 0, 0, 1, 0, content.len() as u32, 0, 0, 0, 0, name.len() as u32 + 1, 0];
        for f in fields {
            v.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        v.extend_from_slice(name.as_bytes());
        v.push(0);
        pad4(v);
        v.extend_from_slice(content);
    }

    fn stripped(v: &mut Vec<u8>, fx: u32, content: &[u8]) {
        pad4(v);
        v.extend_from_slice(CPIO_STRIPPED_MAGIC);
        v.extend_from_slice(format!("{fx:08x}").as_bytes());
        pad4(v);
        v.extend_from_slice(content);
    }

    fn trailer(v: &mut Vec<u8>) {
        newc(v, "TRAILER!!!", 0, b"");
        pad4(v);
    }

    fn sha256(b: &[u8]) -> String {
        hex::encode(sha2::Sha256::digest(b))
    }

    /// Two files, `/usr/bin/a` (regular) and `/usr/lib64/b` (a symlink to `a`), with
    /// `LONGFILESIZES` as rpm writes them for a stripped payload.
    fn two_files(dirs: &[&str], bases: &[&str], a: &[u8]) -> Vec<(u32, Value)> {
        vec![
            (tag::NAME, Value::String("synthetic".into())),
            (tag::PAYLOADCOMPRESSOR, Value::String("gzip".into())),
            (tag::DIRNAMES, Value::StringArray(dirs.iter().map(|s| s.to_string()).collect())),
            (tag::BASENAMES, Value::StringArray(bases.iter().map(|s| s.to_string()).collect())),
            (tag::DIRINDEXES, Value::Int32(vec![0, 1])),
            (tag::FILEMODES, Value::Int16(vec![0o100755, 0o120777])),
            (tag::LONGFILESIZES, Value::Int64(vec![a.len() as u64, 1])),
            (tag::FILEUSERNAME, Value::StringArray(vec!["root".into(), "root".into()])),
            (tag::FILEGROUPNAME, Value::StringArray(vec!["root".into(), "root".into()])),
            (tag::FILEFLAGS, Value::Int32(vec![0, 0])),
            (tag::FILELINKTOS, Value::StringArray(vec![String::new(), "a".into()])),
            (tag::FILEDIGESTS, Value::StringArray(vec![sha256(a), String::new()])),
            (tag::FILEDIGESTALGO, Value::Int32(vec![8])),
            (tag::FILEINODES, Value::Int32(vec![1, 2])),
            (tag::FILEDEVICES, Value::Int32(vec![1, 1])),
        ]
    }

    #[test]
    fn stripped_payloads_and_hostile_entries() {
        let dir = tempfile::tempdir().unwrap();
        let content = b"#!/bin/sh\n";
        let entries = two_files(&["/usr/bin/", "/usr/lib64/"], &["a", "b"], content);
        let unpack = |path: &Path| {
            unpack_entries(&Package::open(path).unwrap(), path, &UnpackOptions::default())
        };

        // rpm's stripped format (rpm ≥ 4.12, files of 4 GiB or more): index, content, and
        // the newc trailer rpm still writes.
        let mut cpio = Vec::new();
        stripped(&mut cpio, 1, b"a");
        stripped(&mut cpio, 0, content);
        trailer(&mut cpio);
        let path = synthetic(dir.path(), "stripped.rpm", &entries, &cpio);
        let pkg = Package::open(&path).unwrap();
        let (u, got, _) = unpack_entries(&pkg, &path, &UnpackOptions::default()).unwrap();
        assert_eq!(u.written, ["/usr/lib64/b", "/usr/bin/a"]);
        assert_eq!(got["usr/bin/a"], ('-', 0o755, 0, 0, content.to_vec()));
        assert_eq!(got["usr/lib64/b"].4, b"a");
        // The header has no region: nothing can be verified.
        let keyring_err = pkg.signed_header(&path).unwrap_err();
        assert!(matches!(keyring_err, RpmError::Unverifiable { .. }), "{keyring_err}");

        // The same in newc, names as rpm writes them.
        let mut cpio = Vec::new();
        newc(&mut cpio, "./usr/bin/a", 0o100755, content);
        newc(&mut cpio, "./usr/lib64/b", 0o120777, b"a");
        trailer(&mut cpio);
        assert!(unpack(&synthetic(dir.path(), "newc.rpm", &entries, &cpio)).is_ok());

        // Content that does not match its digest.
        let mut cpio = Vec::new();
        newc(&mut cpio, "./usr/bin/a", 0o100755, b"#!/bin/sX\n");
        newc(&mut cpio, "./usr/lib64/b", 0o120777, b"a");
        trailer(&mut cpio);
        let e = unpack(&synthetic(dir.path(), "digest.rpm", &entries, &cpio)).unwrap_err();
        assert!(matches!(e, RpmError::Digest { .. }), "{e}");

        // An entry the header does not list, and one that climbs out.
        for (name, what) in
            [("./usr/bin/other", "not in the header"), ("./usr/../../etc/passwd", "outside")]
        {
            let mut cpio = Vec::new();
            newc(&mut cpio, name, 0o100644, b"x");
            trailer(&mut cpio);
            let e = unpack(&synthetic(dir.path(), "entry.rpm", &entries, &cpio)).unwrap_err();
            assert!(e.to_string().contains(what), "{e}");
        }
        // A file missing from the payload; a file twice.
        let mut cpio = Vec::new();
        newc(&mut cpio, "./usr/bin/a", 0o100755, content);
        trailer(&mut cpio);
        let e = unpack(&synthetic(dir.path(), "missing.rpm", &entries, &cpio)).unwrap_err();
        assert!(e.to_string().contains("not in the payload"), "{e}");
        let mut cpio = Vec::new();
        stripped(&mut cpio, 0, content);
        stripped(&mut cpio, 0, content);
        let e = unpack(&synthetic(dir.path(), "twice.rpm", &entries, &cpio)).unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        // A payload that goes on past its files: refused before it is all read.
        let mut cpio = Vec::new();
        stripped(&mut cpio, 1, b"a");
        stripped(&mut cpio, 0, content);
        trailer(&mut cpio);
        cpio.extend(std::iter::repeat_n(0u8, 1 << 20));
        let e = unpack(&synthetic(dir.path(), "long.rpm", &entries, &cpio)).unwrap_err();
        assert!(matches!(e, RpmError::Payload { .. }), "{e}");

        // Header paths that climb out, or run under the package's own symlink.
        let e = unpack(&synthetic(
            dir.path(),
            "dotdot.rpm",
            &two_files(&["/usr/../../", "/usr/lib64/"], &["a", "b"], content),
            b"",
        ))
        .unwrap_err();
        assert!(matches!(e, RpmError::UnsafePath { .. }), "{e}");
        let e = unpack(&synthetic(
            dir.path(),
            "under.rpm",
            &two_files(&["/usr/lib64/b/", "/usr/lib64/"], &["a", "b"], content),
            b"",
        ))
        .unwrap_err();
        assert!(e.to_string().contains("a symlink of the package"), "{e}");

        // bzip2 is named, and refused.
        let mut e2 = entries.clone();
        e2[1] = (tag::PAYLOADCOMPRESSOR, Value::String("bzip2".into()));
        let e = unpack(&synthetic(dir.path(), "bz.rpm", &e2, b"")).unwrap_err();
        assert!(matches!(e, RpmError::UnsupportedCompression { .. }), "{e}");
    }

    #[test]
    fn leads_that_are_not_binary_packages() {
        let dir = tempfile::tempdir().unwrap();
        let path =
            synthetic(dir.path(), "ok.rpm", &two_files(&["/a/", "/b/"], &["a", "b"], b""), b"");
        let good = std::fs::read(&path).unwrap();
        for (at, value, why) in [
            (0, 0u8, "magic"),
            (4, 2, "version"),
            (7, 1, "source package"),
            (79, 1, "signature type"),
        ] {
            let mut b = good.clone();
            b[at] = value;
            std::fs::write(&path, &b).unwrap();
            let e = Package::open(&path).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }
}
