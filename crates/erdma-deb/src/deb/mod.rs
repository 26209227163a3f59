//! Reading binary packages (`.deb`, deb(5)) without dpkg.
//!
//! A `.deb` is an `ar` archive (ar(5), the common format without GNU or BSD long names) of
//! `debian-binary`, `control.tar[.gz|.xz|.zst]` and `data.tar[.gz|.xz|.zst]`, in that order.
//! Packages come from the network, so everything here treats the file as hostile: sizes are
//! checked against the file, member order and compression magic are checked as dpkg-deb
//! does, paths that would leave the package root are refused, and nothing panics.
mod ar;
mod kept;

pub use kept::{PayloadsAhead, MAX as KEPT_MAX};

use std::collections::BTreeMap;
use std::io::{self, Cursor, Read};
use std::path::{Path, PathBuf};

use crate::deb822::{self, Deb822Error, Paragraph};
use ar::{read_up_to, ArReader, Member};

#[derive(Debug, thiserror::Error)]
pub enum DebError {
    #[error("{operation} {path}")]
    Io {
        operation: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("{path} is not a valid .deb: {reason}")]
    Malformed { path: PathBuf, reason: String },

    #[error("{path} has unsupported .deb format version `{version}`")]
    FormatVersion { path: PathBuf, version: String },

    #[error("{path}: member `{member}` uses {compression} compression, which is not supported")]
    UnsupportedCompression { path: PathBuf, member: String, compression: &'static str },

    #[error("{path}: member `{member}` is named as {expected} but holds {found} data")]
    CompressionMismatch {
        path: PathBuf,
        member: String,
        expected: &'static str,
        found: &'static str,
    },

    /// Decompression or tar errors, and data that ends early.
    #[error("{path}: reading member `{member}`")]
    Member {
        path: PathBuf,
        member: String,
        #[source]
        source: io::Error,
    },

    /// A limit of [`erdma_limits`] reached reading the member (a decompression bomb, tar
    /// headers past their bound).
    #[error("{path}: member `{member}` {exceeded}")]
    Limit { path: PathBuf, member: String, exceeded: erdma_limits::Exceeded },

    #[error("{path}: entry `{entry}` in `{member}` would be outside the package root")]
    UnsafePath { path: PathBuf, member: String, entry: String },

    #[error("{path}: entry `{entry}` in `{member}`: {reason}")]
    BadEntry { path: PathBuf, member: String, entry: String, reason: String },

    /// A tar header field the tar reader cannot read (not octal, too large).
    #[error("{path}: entry `{entry}` in `{member}`: unreadable {field}")]
    BadHeader {
        path: PathBuf,
        member: String,
        entry: String,
        field: &'static str,
        #[source]
        source: std::io::Error,
    },

    #[error("{path}: invalid control file")]
    Control {
        path: PathBuf,
        #[source]
        source: Deb822Error,
    },

    /// For callers of [`for_each_data_entry`] whose handler fails with an error of its own.
    #[error("handling entry `{entry}`")]
    Handler {
        entry: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The control part of a package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deb {
    /// The `control` file (deb-control(5)).
    pub control: Paragraph,
    /// Every other regular file of `control.tar` (`md5sums`, `conffiles`, `postinst`,
    /// `prerm`, `shlibs`, `triggers`, `symbols`, …), keyed by its path inside the control
    /// archive without `./`, which is its bare name for everything dpkg-deb builds.
    pub control_files: BTreeMap<String, Vec<u8>>,
}

/// One entry of `data.tar`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataEntry {
    /// Normalised: relative, no `./` or `/` prefix, no trailing slash, no `.` components.
    pub path: String,
    pub kind: DataKind,
    /// Permission bits including setuid, setgid and sticky (`0o7777`).
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub uname: String,
    pub gname: String,
    /// Modification time, seconds since the epoch.
    pub mtime: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataKind {
    Dir,
    File {
        size: u64,
    },
    /// The link text as stored (it may be absolute or contain `..`: it is resolved at run
    /// time inside the image, not here).
    Symlink(String),
    /// The path of the entry it is a second name for (tar writes that entry first),
    /// normalised like [`DataEntry::path`].
    Hardlink(String),
    /// dpkg's tar extractor also knows these (`lib/dpkg/tarfn.c`); packages rarely ship them.
    Fifo,
    CharDevice {
        major: u32,
        minor: u32,
    },
    BlockDevice {
        major: u32,
        minor: u32,
    },
}

/// The most we keep in memory from `control.tar` (all files together), so a small
/// compressed member cannot expand into gigabytes. The largest control areas in Debian
/// (`symbols` of big C++ libraries, `md5sums` of kernel packages) are a few MiB.
const MAX_CONTROL_BYTES: u64 = 64 << 20;

/// deb(5) allows more lines after the version in `debian-binary`; anything this long is not
/// a package.
const MAX_DEBIAN_BINARY: u64 = 1024;

/// Reads the control part of the package at `path`: the `control` paragraph and the other
/// control files. The rest of the archive is checked for shape (a `data.tar` member within the
/// file) but not read.
pub fn read_control(path: &Path) -> Result<Deb, DebError> {
    let mut ar = ArReader::open(path)?;
    let layout = read_layout(&mut ar)?;
    let member = &layout.control;
    let mut files = BTreeMap::new();
    let mut total = 0u64;
    // Control files add up to at most MAX_CONTROL_BYTES, well within the ratio's grace.
    let reader = ar.tar_stream(member, erdma_limits::DEFAULT_INFLATION)?;
    walk_tar(path, &member.name, reader, |entry| {
        let header = entry.header();
        let entry_type = header.entry_type();
        if entry_type.is_pax_global_extensions() {
            return Ok(());
        }
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let name = normalise(&entry.path_bytes())
            .map_err(|reason| entry_error(path, member, &raw, reason))?;
        if entry_type.is_dir() {
            return Ok(());
        }
        if files.contains_key(&name) {
            return Err(entry_error(path, member, &raw, PathProblem::Duplicate));
        }
        let content = if entry_type.is_file() || entry_type.is_contiguous() {
            total = total.saturating_add(entry.size());
            if total > MAX_CONTROL_BYTES {
                return Err(DebError::Malformed {
                    path: path.to_owned(),
                    reason: format!(
                        "control files add up to more than {} MiB",
                        MAX_CONTROL_BYTES >> 20
                    ),
                });
            }
            let size = entry.size();
            // The size is the archive's claim: trust it only as far as a hint.
            let mut content = Vec::with_capacity(size.min(1 << 20) as usize);
            ExactReader::new(&mut *entry, size)
                .read_to_end(&mut content)
                .map_err(|source| member_error(path, &member.name, source))?;
            content
        } else if entry_type.is_hard_link() {
            // GNU tar stores a second name of the same file as a link to the first, so two
            // identical maintainer scripts can arrive this way.
            let target = entry
                .link_name_bytes()
                .map(|target| normalise(&target))
                .transpose()
                .map_err(|reason| entry_error(path, member, &raw, reason))?;
            match target.and_then(|target| files.get(&target)) {
                Some(content) => Vec::clone(content),
                None => return Err(entry_error(path, member, &raw, PathProblem::DanglingHardlink)),
            }
        } else {
            // dpkg would follow a symlinked maintainer script; refusing is safer than
            // dropping it silently.
            return Err(entry_error(path, member, &raw, PathProblem::NotRegular));
        };
        files.insert(name, content);
        Ok(())
    })?;

    let control = files.remove("control").ok_or_else(|| DebError::Malformed {
        path: path.to_owned(),
        reason: format!("`{}` has no `control` file", member.name),
    })?;
    let text = String::from_utf8(control).map_err(|_| DebError::Malformed {
        path: path.to_owned(),
        reason: "the control file is not UTF-8".to_owned(),
    })?;
    let control = deb822::parse_single(&text)
        .map_err(|source| DebError::Control { path: path.to_owned(), source })?;
    Ok(Deb { control, control_files: files })
}

/// Calls `f` for each entry of the package's `data.tar`, in archive order, with a reader for
/// the content of regular files (empty for everything else). The root entry (`./`) is
/// skipped. Content `f` does not read is skipped; a handler error stops the walk and is
/// returned as is. `data.tar` may inflate `inflation` times ([`erdma_limits::inflate`],
/// `--max-inflation`; 0: no limit).
pub fn for_each_data_entry(
    path: &Path,
    inflation: u64,
    f: impl FnMut(DataEntry, &mut dyn Read) -> Result<(), DebError> + Send,
) -> Result<(), DebError> {
    for_each_data_entry_kept(path, inflation, None, f)
}

/// [`for_each_data_entry`], with the decompressed `data.tar` kept at `kept` (a file named
/// after the package's verified checksum): read from there when an intact copy is, written
/// there as it is decompressed otherwise. The entries handed to `f` are the same either way.
/// When a [`PayloadsAhead`] is decompressing into `kept`, the walk waits for it first.
pub fn for_each_data_entry_kept(
    path: &Path,
    inflation: u64,
    kept: Option<&Path>,
    mut f: impl FnMut(DataEntry, &mut dyn Read) -> Result<(), DebError> + Send,
) -> Result<(), DebError> {
    let mut ar = ArReader::open(path)?;
    let layout = read_layout(&mut ar)?;
    let member = &layout.data;
    if let Some(k) = kept {
        kept::wait_ahead(k);
    }
    if let Some(tar) = kept.and_then(|k| kept::read(k, member, inflation)) {
        return walk_data(path, member, Box::new(Cursor::new(tar)), &mut f);
    }
    let mut decoder = kept::Tee::new(ar.tar_stream(member, inflation)?, kept, member);
    // The payload is decompressed here while the entries are walked and handled on another
    // thread: for xz, each is about half of the work.
    std::thread::scope(|scope| {
        let (tx, rx) = crate::pipe::channel();
        let walker = scope.spawn(move || {
            let chunks: Box<dyn Read> = Box::new(crate::pipe::Chunks::new(rx));
            walk_data(path, member, chunks, &mut f)
        });
        crate::pipe::pump(&mut decoder, tx);
        let walked = walker.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        if walked.is_ok() {
            decoder.keep();
        }
        walked
    })
}

/// How far into a package [`with_kept_payload`] copies the members before `data.tar`.
const MAX_BEFORE_DATA: u64 = 64 << 20;

/// The package at `path` with its `data.tar` uncompressed, from the payload kept at `kept`
/// ([`for_each_data_entry_kept`] keeps it, under the same checks): the members before
/// `data.tar` byte for byte, then a `data.tar` member holding the tar as the package's own
/// decompresses. dpkg unpacks the same files from it (deb(5) allows an uncompressed
/// `data.tar`) without decompressing them again; it reads nothing after `data.tar`, and none
/// is given. `None` where no intact payload is kept for this package (waiting first for one
/// on its way, [`PayloadsAhead`]), its `data.tar` is not compressed, or `path` is not a
/// package: the package is then given as it is.
pub fn with_kept_payload(path: &Path, inflation: u64, kept: &Path) -> Option<impl Read> {
    let mut ar = ArReader::open(path).ok()?;
    let data = read_layout(&mut ar).ok()?.data;
    // Already uncompressed: nothing to gain. Members before data.tar past this are not a
    // package's (the control member is at most a few MiB): the package goes as it is.
    if data.name == "data.tar" || data.offset > MAX_BEFORE_DATA {
        return None;
    }
    kept::wait_ahead(kept);
    let tar = kept::read(kept, &data, inflation)?;
    let head = Member { name: String::new(), offset: 0, size: data.offset.checked_sub(60)? };
    let mut before = Vec::with_capacity(usize::try_from(head.size).ok()? + 60);
    ar.content(&head).ok()?.read_to_end(&mut before).ok()?;
    // ar(5)'s header: name, mtime, uid, gid, octal mode, size, then "`\n"; 60 bytes.
    let header =
        format!("{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n", "data.tar", 0, 0, 0, 100644, tar.len());
    debug_assert_eq!(header.len(), 60);
    before.extend_from_slice(header.as_bytes());
    // A member of odd size is followed by one byte of padding.
    let pad: &[u8] = if tar.len() % 2 == 1 { b"\n" } else { b"" };
    Some(Cursor::new(before).chain(Cursor::new(tar)).chain(pad))
}

/// The entries of a package's decompressed `data.tar` (`reader`), each handed to `f`.
fn walk_data(
    path: &Path,
    member: &Member,
    reader: Box<dyn Read + '_>,
    f: &mut dyn FnMut(DataEntry, &mut dyn Read) -> Result<(), DebError>,
) -> Result<(), DebError> {
    walk_tar(path, &member.name, reader, |entry| {
        let Some(data_entry) = data_entry(path, member, entry)? else {
            return Ok(());
        };
        let size = match data_entry.kind {
            DataKind::File { size } => size,
            _ => 0,
        };
        // A limit reached while the handler read the content is the member's, not the entry's.
        f(data_entry, &mut ExactReader::new(entry, size)).map_err(|e| {
            let limit = match &e {
                DebError::Handler { source, .. } => {
                    source.downcast_ref::<io::Error>().and_then(erdma_limits::exceeded).cloned()
                }
                _ => None,
            };
            match limit {
                Some(exceeded) => {
                    DebError::Limit { path: path.to_owned(), member: member.name.clone(), exceeded }
                }
                None => e,
            }
        })
    })
}

/// Turns a tar entry into a [`DataEntry`]; `None` for entries that are not files of the
/// package (the root directory, pax global headers).
fn data_entry<R: Read>(
    path: &Path,
    member: &Member,
    entry: &tar::Entry<'_, R>,
) -> Result<Option<DataEntry>, DebError> {
    let header = entry.header();
    let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
    let bad = |reason: String| DebError::BadEntry {
        path: path.to_owned(),
        member: member.name.clone(),
        entry: raw.clone(),
        reason,
    };
    let unreadable = |field: &'static str| {
        let (member, entry) = (&member.name, &raw);
        move |source| DebError::BadHeader {
            path: path.to_owned(),
            member: member.clone(),
            entry: entry.clone(),
            field,
            source,
        }
    };
    let entry_type = header.entry_type();
    if entry_type.is_pax_global_extensions() {
        return Ok(None);
    }
    let entry_path =
        normalise(&entry.path_bytes()).map_err(|reason| entry_error(path, member, &raw, reason))?;
    let device = || -> Result<(u32, u32), DebError> {
        let major = header.device_major().map_err(unreadable("device major"))?;
        let minor = header.device_minor().map_err(unreadable("device minor"))?;
        Ok((major.unwrap_or(0), minor.unwrap_or(0)))
    };
    let link_target = || -> Result<String, DebError> {
        let target = entry
            .link_name_bytes()
            .filter(|target| !target.is_empty())
            .ok_or_else(|| bad("link without a target".to_owned()))?;
        String::from_utf8(target.into_owned()).map_err(|_| bad("link target is not UTF-8".into()))
    };
    let kind = if entry_type.is_dir() {
        DataKind::Dir
    } else if entry_type.is_file() || entry_type.is_contiguous() || entry_type.is_gnu_sparse() {
        DataKind::File { size: entry.size() }
    } else if entry_type.is_symlink() {
        DataKind::Symlink(link_target()?)
    } else if entry_type.is_hard_link() {
        let target = normalise(link_target()?.as_bytes())
            .map_err(|reason| entry_error(path, member, &raw, reason))?;
        if target.is_empty() {
            return Err(bad("hard link to the package root".to_owned()));
        }
        DataKind::Hardlink(target)
    } else if entry_type.is_fifo() {
        DataKind::Fifo
    } else if entry_type.is_character_special() {
        let (major, minor) = device()?;
        DataKind::CharDevice { major, minor }
    } else if entry_type.is_block_special() {
        let (major, minor) = device()?;
        DataKind::BlockDevice { major, minor }
    } else {
        return Err(bad(format!(
            "unsupported tar entry type `{}`",
            entry_type.as_byte().escape_ascii()
        )));
    };
    if entry_path.is_empty() {
        return match kind {
            DataKind::Dir => Ok(None),
            _ => Err(bad("entry for the package root that is not a directory".into())),
        };
    }
    let name = |field: Result<Option<&str>, std::str::Utf8Error>, what: &str| {
        field
            .map(|name| name.unwrap_or_default().to_owned())
            .map_err(|_| bad(format!("{what} is not UTF-8")))
    };
    Ok(Some(DataEntry {
        path: entry_path,
        kind,
        mode: header.mode().map_err(unreadable("mode"))? & 0o7777,
        uid: header.uid().map_err(unreadable("uid"))?,
        gid: header.gid().map_err(unreadable("gid"))?,
        uname: name(header.username(), "user name")?,
        gname: name(header.groupname(), "group name")?,
        mtime: header.mtime().map_err(unreadable("mtime"))?,
    }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PathProblem {
    Escapes,
    NotUtf8,
    Duplicate,
    DanglingHardlink,
    NotRegular,
}

fn entry_error(path: &Path, member: &Member, entry: &str, problem: PathProblem) -> DebError {
    let reason = match problem {
        PathProblem::Escapes => {
            return DebError::UnsafePath {
                path: path.to_owned(),
                member: member.name.clone(),
                entry: entry.to_owned(),
            }
        }
        PathProblem::NotUtf8 => "path is not UTF-8",
        PathProblem::Duplicate => "appears twice",
        PathProblem::DanglingHardlink => "hard link to a file not seen before it",
        PathProblem::NotRegular => "only regular files are supported in the control archive",
    };
    DebError::BadEntry {
        path: path.to_owned(),
        member: member.name.clone(),
        entry: entry.to_owned(),
        reason: reason.to_owned(),
    }
}

/// An error reading member `member`: [`DebError::Limit`] for a limit reached.
fn member_error(path: &Path, member: &str, source: io::Error) -> DebError {
    match erdma_limits::exceeded(&source) {
        Some(exceeded) => DebError::Limit {
            path: path.to_owned(),
            member: member.to_owned(),
            exceeded: exceeded.clone(),
        },
        None => DebError::Member { path: path.to_owned(), member: member.to_owned(), source },
    }
}

/// Normalises a tar path: tar stores `./usr/bin/x` and `./usr/` (dpkg-deb) or `usr/bin/x`
/// and, from other tools, `/usr/bin/x`; all become `usr/bin/x`, the root becomes `""`. A
/// `..` component is refused outright rather than resolved: dpkg refuses it too, and no
/// legitimate package needs it.
fn normalise(raw: &[u8]) -> Result<String, PathProblem> {
    let text = std::str::from_utf8(raw).map_err(|_| PathProblem::NotUtf8)?;
    let mut out = String::with_capacity(text.len());
    for component in text.split('/') {
        match component {
            "" | "." => {}
            ".." => return Err(PathProblem::Escapes),
            _ => {
                if !out.is_empty() {
                    out.push('/');
                }
                out.push_str(component);
            }
        }
    }
    Ok(out)
}

impl ArReader<'_> {
    /// The member's decompressed content, after checking that its name and its first bytes
    /// agree on the compression; refused once it inflates more than `inflation` times the
    /// bytes read ([`erdma_limits::inflate`], `--max-inflation`; 0: no limit).
    fn tar_stream<'a>(
        &'a mut self,
        member: &Member,
        inflation: u64,
    ) -> Result<Box<dyn Read + 'a>, DebError> {
        let path = self.path;
        let expected = compression(path, member)?;
        let mut content = self.content(member)?;
        let mut head = vec![0u8; 512];
        let got = read_up_to(&mut content, &mut head)
            .map_err(|source| member_error(path, &member.name, source))?;
        head.truncate(got);
        let found = sniff(&head);
        if found != expected.format_name() {
            return Err(DebError::CompressionMismatch {
                path: path.to_owned(),
                member: member.name.clone(),
                expected: expected.format_name(),
                found,
            });
        }
        let stream = Cursor::new(head).chain(content);
        let decoder: fn(_) -> io::Result<Box<dyn Read + 'a>> = match expected {
            // Plain tar is read in 512-byte headers; the decompressors buffer their input.
            Compression::None => {
                return Ok(Box::new(io::BufReader::with_capacity(64 << 10, stream)))
            }
            // Multi-member gzip, as zlib's gzread (which dpkg uses) accepts.
            Compression::Gzip => |c| Ok(Box::new(flate2::read::MultiGzDecoder::new(c))),
            Compression::Xz => |c| Ok(Box::new(liblzma::read::XzDecoder::new_multi_decoder(c))),
            Compression::Zstd => |c| Ok(Box::new(zstd::stream::read::Decoder::new(c)?)),
        };
        erdma_limits::inflate(stream, inflation, u64::MAX, decoder)
            .map(|r| Box::new(r) as Box<dyn Read + 'a>)
            .map_err(|source| member_error(path, &member.name, source))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compression {
    None,
    Gzip,
    Xz,
    Zstd,
}

impl Compression {
    fn format_name(self) -> &'static str {
        match self {
            Compression::None => "tar",
            Compression::Gzip => "gzip",
            Compression::Xz => "xz",
            Compression::Zstd => "zstd",
        }
    }
}

/// The compression a member's name announces (deb(5) lists the suffixes dpkg-deb writes).
fn compression(path: &Path, member: &Member) -> Result<Compression, DebError> {
    let suffix = ["control.tar", "data.tar"]
        .iter()
        .find_map(|prefix| member.name.strip_prefix(prefix))
        .unwrap_or(&member.name);
    let unsupported = |compression| DebError::UnsupportedCompression {
        path: path.to_owned(),
        member: member.name.clone(),
        compression,
    };
    match suffix {
        "" => Ok(Compression::None),
        ".gz" => Ok(Compression::Gzip),
        ".xz" => Ok(Compression::Xz),
        ".zst" => Ok(Compression::Zstd),
        // dpkg still reads these from old packages; nothing current is built with them.
        ".bz2" => Err(unsupported("bzip2")),
        ".lzma" => Err(unsupported("lzma")),
        _ => Err(unsupported("an unknown")),
    }
}

/// What the first bytes of a member say it is.
fn sniff(head: &[u8]) -> &'static str {
    if head.starts_with(&[0x1f, 0x8b]) {
        "gzip"
    } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        "xz"
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        "zstd"
    } else if head.starts_with(b"BZh") {
        "bzip2"
    } else if head.len() == 512 && (&head[257..262] == b"ustar" || head.iter().all(|&c| c == 0)) {
        // POSIX `ustar\0` and GNU `ustar  \0` (what dpkg-deb writes); an all-zero block is
        // an empty archive.
        "tar"
    } else {
        "unrecognised"
    }
}

/// Where the required members lie (deb(5): `debian-binary`, `control.tar*`, `data.tar*`,
/// in this order; members after `data.tar` are ignored).
struct Layout {
    control: Member,
    data: Member,
}

fn read_layout(ar: &mut ArReader<'_>) -> Result<Layout, DebError> {
    let first = ar.next_member()?.ok_or_else(|| ar.malformed("empty archive".to_owned()))?;
    if first.name != "debian-binary" {
        return Err(
            ar.malformed(format!("first member is `{}`, expected `debian-binary`", first.name))
        );
    }
    if first.size > MAX_DEBIAN_BINARY {
        return Err(ar.malformed(format!("`debian-binary` is {} bytes long", first.size)));
    }
    let path = ar.path;
    let mut version = Vec::new();
    ar.content(&first)?
        .read_to_end(&mut version)
        .map_err(|source| member_error(path, &first.name, source))?;
    check_format_version(path, &version)?;

    let control = match ar.next_required_member()? {
        Some(m) if m.name.starts_with("control.tar") => m,
        Some(m) => {
            return Err(ar.malformed(format!("unexpected member `{}` before `control.tar`", m.name)))
        }
        None => return Err(ar.malformed("no `control.tar` member".to_owned())),
    };
    let data = match ar.next_required_member()? {
        Some(m) if m.name.starts_with("data.tar") => m,
        Some(m) if m.name.starts_with("control.tar") => {
            return Err(ar.malformed("two `control.tar` members".to_owned()))
        }
        Some(m) => {
            return Err(ar.malformed(format!("unexpected member `{}` before `data.tar`", m.name)))
        }
        None => return Err(ar.malformed("no `data.tar` member".to_owned())),
    };
    Ok(Layout { control, data })
}

/// deb(5): the first line is `<major>.<minor>`; a bigger minor number or extra lines must be
/// accepted, another major number refused (so `2.1` is read, like dpkg-deb does).
fn check_format_version(path: &Path, content: &[u8]) -> Result<(), DebError> {
    let line_end = content.iter().position(|&c| c == b'\n');
    let line = &content[..line_end.unwrap_or(content.len())];
    let shown = || String::from_utf8_lossy(line).into_owned();
    let well_formed = line_end.is_some()
        && line.split(|&c| c == b'.').count() == 2
        && line
            .split(|&c| c == b'.')
            .all(|part| !part.is_empty() && part.iter().all(u8::is_ascii_digit));
    if !well_formed {
        return Err(DebError::Malformed {
            path: path.to_owned(),
            reason: format!("bad format version `{}` in `debian-binary`", shown().escape_debug()),
        });
    }
    if !line.starts_with(b"2.") {
        return Err(DebError::FormatVersion { path: path.to_owned(), version: shown() });
    }
    Ok(())
}

/// Remembers whether the stream it wraps ran out, which tells an archive that ended at its
/// end-of-archive marker from one that was cut short at a block boundary (the tar crate
/// treats both as the end).
struct EofTracker<R> {
    inner: R,
    hit_eof: bool,
}

impl<R: Read> Read for EofTracker<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.hit_eof = true;
        }
        Ok(n)
    }
}

/// Reads exactly `size` bytes from an entry: ending early is an error, not a short file.
struct ExactReader<R> {
    inner: R,
    remaining: u64,
}

impl<R: Read> ExactReader<R> {
    fn new(inner: R, size: u64) -> Self {
        ExactReader { inner, remaining: size }
    }
}

impl<R: Read> Read for ExactReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf.len().min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("archive ends {} bytes before the end of the entry", self.remaining),
            ));
        }
        self.remaining -= n as u64;
        Ok(n)
    }
}

/// Runs `on_entry` over every entry of a tar stream, then checks that the archive ended
/// with its end-of-archive marker and reads the rest of the stream, so decompressors check
/// their trailing checksums (gzip CRC32, xz and zstd checks) over the whole member.
fn walk_tar<'a>(
    path: &Path,
    member_name: &str,
    reader: Box<dyn Read + 'a>,
    on_entry: impl FnMut(
        &mut tar::Entry<'_, erdma_limits::TarInput<EofTracker<Box<dyn Read + 'a>>>>,
    ) -> Result<(), DebError>,
) -> Result<(), DebError> {
    let error = |source| member_error(path, member_name, source);
    let input = EofTracker { inner: reader, hit_eof: false };
    let mut rest = erdma_limits::walk_tar(input, error, on_entry)?;
    if rest.hit_eof {
        return Err(error(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "tar archive ends without its end-of-archive marker",
        )));
    }
    io::copy(&mut rest, &mut io::sink()).map_err(error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::ar::AR_MAGIC;
    use super::*;
    use std::collections::BTreeSet;
    use std::os::unix::fs::PermissionsExt;
    use std::process::Command;

    /// dpkg-deb builds the fixtures, so the reader is checked against the real tool. Without
    /// it (not a Debian system) the tests skip, except in CI where every test must run.
    fn have_dpkg_deb() -> bool {
        let found = Command::new("dpkg-deb")
            .arg("--version")
            .output()
            .is_ok_and(|out| out.status.success());
        if !found {
            assert!(std::env::var_os("CI").is_none(), "dpkg-deb is needed for this test in CI");
            eprintln!("skipping: dpkg-deb not found");
        }
        found
    }

    const CONTROL: &str = "Package: erdma-test\nVersion: 1:1.0-1\nArchitecture: all\n\
                           Maintainer: Test <test@example.org>\nMulti-Arch: foreign\n\
                           Depends: libc6 (>= 2.34)\n\
                           Description: test package\n long description\n .\n more\n";

    /// A package with a directory, an empty directory, a regular file, a setuid file, a
    /// symlink, a hard link and a conffile, plus md5sums, conffiles and postinst.
    fn build_deb(dir: &Path, compression: &str) -> PathBuf {
        let root = dir.join(format!("pkg-{compression}"));
        let write = |rel: &str, content: &[u8], mode: u32| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, content).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write("DEBIAN/control", CONTROL.as_bytes(), 0o644);
        write("usr/bin/tool", b"#!/bin/sh\necho tool\n", 0o4755);
        write("usr/share/doc/erdma-test/README", b"readme\n", 0o644);
        write("etc/erdma/erdma.conf", b"setting = 1\n", 0o644);
        write("DEBIAN/conffiles", b"/etc/erdma/erdma.conf\n", 0o644);
        write("DEBIAN/postinst", b"#!/bin/sh\nset -e\nexit 0\n", 0o755);
        write("DEBIAN/md5sums", b"d41d8cd98f00b204e9800998ecf8427e  usr/bin/tool\n", 0o644);
        std::fs::create_dir_all(root.join("var/lib/erdma")).unwrap();
        std::os::unix::fs::symlink("tool", root.join("usr/bin/tool-link")).unwrap();
        std::fs::hard_link(
            root.join("usr/share/doc/erdma-test/README"),
            root.join("usr/share/doc/erdma-test/README.hard"),
        )
        .unwrap();
        let out = dir.join(format!("erdma-test-{compression}.deb"));
        let status = Command::new("dpkg-deb")
            .env("SOURCE_DATE_EPOCH", "1700000000")
            .args(["--root-owner-group", &format!("-Z{compression}"), "--build"])
            .arg(&root)
            .arg(&out)
            .output()
            .unwrap();
        assert!(status.status.success(), "dpkg-deb: {status:?}");
        out
    }

    fn collect(path: &Path) -> Result<Vec<(DataEntry, Vec<u8>)>, DebError> {
        collect_from(path, None, erdma_limits::DEFAULT_INFLATION)
    }

    /// Every entry with its content, through [`for_each_data_entry_kept`].
    fn collect_from(
        path: &Path,
        kept: Option<&Path>,
        inflation: u64,
    ) -> Result<Vec<(DataEntry, Vec<u8>)>, DebError> {
        let mut entries = Vec::new();
        for_each_data_entry_kept(path, inflation, kept, |entry, content| {
            let mut buf = Vec::new();
            content.read_to_end(&mut buf).map_err(|e| DebError::Handler {
                entry: entry.path.clone(),
                source: Box::new(e),
            })?;
            entries.push((entry, buf));
            Ok(())
        })?;
        Ok(entries)
    }

    #[test]
    fn reads_packages_built_by_dpkg_deb_in_every_compression() {
        if !have_dpkg_deb() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        for compression in ["xz", "gzip", "zstd", "none"] {
            let deb_path = build_deb(dir.path(), compression);
            let deb = read_control(&deb_path).unwrap();
            assert_eq!(deb.control.to_string(), CONTROL, "{compression}");
            assert_eq!(deb.control.get("version"), Some("1:1.0-1"));
            assert_eq!(
                deb.control_files.keys().collect::<Vec<_>>(),
                ["conffiles", "md5sums", "postinst"],
                "{compression}"
            );
            assert_eq!(deb.control_files["conffiles"], b"/etc/erdma/erdma.conf\n");
            assert_eq!(deb.control_files["postinst"], b"#!/bin/sh\nset -e\nexit 0\n");

            let entries = collect(&deb_path).unwrap();
            let by_path: BTreeMap<_, _> =
                entries.iter().map(|(e, content)| (e.path.as_str(), (e, content))).collect();
            assert_eq!(by_path.len(), entries.len(), "no duplicate paths");
            assert!(!by_path.contains_key(""), "the root entry is skipped");
            let paths: BTreeSet<_> = by_path.keys().copied().collect();
            let want: BTreeSet<_> = [
                "etc",
                "etc/erdma",
                "etc/erdma/erdma.conf",
                "usr",
                "usr/bin",
                "usr/bin/tool",
                "usr/bin/tool-link",
                "usr/share",
                "usr/share/doc",
                "usr/share/doc/erdma-test",
                "usr/share/doc/erdma-test/README",
                "usr/share/doc/erdma-test/README.hard",
                "var",
                "var/lib",
                "var/lib/erdma",
            ]
            .into_iter()
            .collect();
            assert_eq!(paths, want, "{compression}");

            let (tool, content) = by_path["usr/bin/tool"];
            assert_eq!(tool.kind, DataKind::File { size: 20 });
            assert_eq!(content.as_slice(), b"#!/bin/sh\necho tool\n");
            assert_eq!(tool.mode, 0o4755, "setuid bit kept");
            assert_eq!((tool.uid, tool.gid), (0, 0));
            assert_eq!((tool.uname.as_str(), tool.gname.as_str()), ("root", "root"));
            assert_eq!(tool.mtime, 1700000000, "SOURCE_DATE_EPOCH clamps mtimes");

            let (link, content) = by_path["usr/bin/tool-link"];
            assert_eq!(link.kind, DataKind::Symlink("tool".into()));
            assert!(content.is_empty());
            assert_eq!(by_path["var/lib/erdma"].0.kind, DataKind::Dir);
            assert_eq!(by_path["var/lib/erdma"].0.mode, 0o755);

            // GNU tar stores the second name of the file as a hard link to the first.
            let readme = "usr/share/doc/erdma-test/README";
            let hard = "usr/share/doc/erdma-test/README.hard";
            let (first, second) = if by_path[readme].0.kind == DataKind::Hardlink(hard.into()) {
                (hard, readme)
            } else {
                (readme, hard)
            };
            assert_eq!(by_path[first].0.kind, DataKind::File { size: 7 });
            assert_eq!(by_path[first].1.as_slice(), b"readme\n");
            assert_eq!(by_path[second].0.kind, DataKind::Hardlink(first.into()));
            let position = |p: &str| entries.iter().position(|(e, _)| e.path == p);
            assert!(position(first) < position(second), "target comes first");
        }
    }

    #[test]
    fn handler_errors_and_partial_reads() {
        if !have_dpkg_deb() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let deb_path = build_deb(dir.path(), "xz");
        // A handler that stops the walk: its error comes back as is.
        let err = for_each_data_entry(&deb_path, erdma_limits::DEFAULT_INFLATION, |entry, _| {
            if entry.path == "usr/bin/tool" {
                return Err(DebError::Handler { entry: entry.path, source: "disk full".into() });
            }
            Ok(())
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "handling entry `usr/bin/tool`");
        // A handler that reads part of a file, or nothing: the walk goes on.
        let mut seen = 0;
        for_each_data_entry(&deb_path, erdma_limits::DEFAULT_INFLATION, |_, content| {
            let mut byte = [0u8; 1];
            let _ = content.read(&mut byte);
            seen += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, 15);
    }

    /// The entries' paths and contents, the payload kept at `kept`.
    fn collect_kept(path: &Path, kept: &Path, inflation: u64) -> Vec<(String, Vec<u8>)> {
        let entries = collect_from(path, Some(kept), inflation).unwrap();
        entries.into_iter().map(|(e, c)| (e.path, c)).collect()
    }

    /// The package's `data.tar` member, where its `ar` header puts it.
    fn data_member(deb: &Path) -> Member {
        let mut ar = ArReader::open(deb).unwrap();
        read_layout(&mut ar).unwrap().data
    }

    /// A kept payload as [`kept`] writes one: `tar`, its SHA256, `member_size`, the magic.
    fn kept_file(tar: &[u8], member_size: u64) -> Vec<u8> {
        use sha2::Digest;
        let mut out = tar.to_vec();
        out.extend_from_slice(&sha2::Sha256::digest(tar));
        out.extend_from_slice(&member_size.to_le_bytes());
        out.extend_from_slice(b"erdma-data.tar-1");
        out
    }

    #[test]
    fn a_kept_payload_is_what_dpkg_deb_extracts_and_is_read_only_when_intact() {
        if !have_dpkg_deb() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let deb_path = build_deb(dir.path(), "xz");
        let kept = dir.path().join("payloads").join("x.tar");
        let inflation = erdma_limits::DEFAULT_INFLATION;
        let plain: Vec<_> =
            collect(&deb_path).unwrap().into_iter().map(|(e, c)| (e.path, c)).collect();
        let member_size = data_member(&deb_path).size;
        // The first walk keeps the payload: the tar dpkg-deb itself extracts, byte for byte.
        assert_eq!(collect_kept(&deb_path, &kept, inflation), plain);
        let out = Command::new("dpkg-deb").arg("--fsys-tarfile").arg(&deb_path).output().unwrap();
        assert!(out.status.success());
        let written = std::fs::read(&kept).unwrap();
        assert_eq!(written, kept_file(&out.stdout, member_size));
        assert_eq!(std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(collect_kept(&deb_path, &kept, inflation), plain, "read back");

        // What the kept copy says is what the walk gives: another tar, intact, stands in.
        let other = tar(&[file("./a", b"a")]);
        std::fs::write(&kept, kept_file(&other, member_size)).unwrap();
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o600)).unwrap();
        let a = vec![("a".to_string(), b"a".to_vec())];
        assert_eq!(collect_kept(&deb_path, &kept, inflation), a);
        // Not intact, not this member's, beyond the inflation asked for, or writable by
        // others: ignored, the package decompressed and its payload kept again.
        let damaged = |bytes: &mut Vec<u8>| bytes[0] ^= 1;
        let other_member = |bytes: &mut Vec<u8>| {
            let at = bytes.len() - 24;
            bytes[at] ^= 1;
        };
        let short = |bytes: &mut Vec<u8>| bytes.truncate(10);
        for (why, spoil) in [
            ("damaged", &damaged as &dyn Fn(&mut Vec<u8>)),
            ("another member's", &other_member),
            ("short", &short),
        ] {
            let mut bytes = kept_file(&other, member_size);
            spoil(&mut bytes);
            std::fs::write(&kept, &bytes).unwrap();
            // As a later build finds it: this process checked the copy before, and a rewrite
            // at the same size within the same clock tick would leave its state as it was.
            erdma_limits::checked::forget_all();
            assert_eq!(collect_kept(&deb_path, &kept, inflation), plain, "{why}");
            assert_eq!(std::fs::read(&kept).unwrap(), written, "{why}: kept again");
        }
        std::fs::write(&kept, kept_file(&other, member_size)).unwrap();
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(collect_kept(&deb_path, &kept, inflation), plain, "writable by others");
        let large = tar(&[file("./a", &vec![b'a'; member_size as usize * 3])]);
        std::fs::write(&kept, kept_file(&large, member_size)).unwrap();
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(collect_kept(&deb_path, &kept, 2), plain, "past the inflation limit");
        assert_eq!(std::fs::read(&kept).unwrap(), written);

        // A walk its handler stops keeps nothing.
        std::fs::remove_file(&kept).unwrap();
        for_each_data_entry_kept(&deb_path, inflation, Some(&kept), |entry, _| {
            Err(DebError::Handler { entry: entry.path, source: "stop".into() })
        })
        .unwrap_err();
        assert!(!kept.exists());
        assert_eq!(std::fs::read_dir(kept.parent().unwrap()).unwrap().count(), 0, "no temporary");
    }

    /// A payload this process kept, or read back and found intact, is remembered as checked
    /// while its file's state holds, so that the next read does not hash it again; a file put
    /// in its place, or changed, is not, and is checked when read.
    #[test]
    fn a_payload_kept_or_checked_here_is_remembered_while_its_file_holds() {
        if !have_dpkg_deb() {
            return;
        }
        use std::io::Write;
        let inflation = erdma_limits::DEFAULT_INFLATION;
        let dir = tempfile::tempdir().unwrap();
        let deb = build_deb(dir.path(), "xz");
        let kept_at = dir.path().join("kept").join("payload.tar");
        let plain = collect_kept(&deb, &kept_at, inflation);
        let bytes = std::fs::read(&kept_at).unwrap();
        let sha256 = &bytes[bytes.len() - 56..][..32];
        let key = kept::memo_key(sha256);
        let remembered =
            || erdma_limits::checked::remembered(&std::fs::File::open(&kept_at).unwrap(), &key);
        assert!(remembered(), "kept as it was decompressed");
        assert_eq!(collect_kept(&deb, &kept_at, inflation), plain, "read back");
        // Put in its place by another writer, the same bytes: not this file, checked as it
        // is read, then remembered.
        std::fs::remove_file(&kept_at).unwrap();
        erdma_limits::kept::write(&kept_at, |f| f.write_all(&bytes)).unwrap();
        assert!(!remembered());
        assert_eq!(collect_kept(&deb, &kept_at, inflation), plain, "checked");
        assert!(remembered(), "checked as it was read");
        // Grown in place: no longer remembered; a payload whose trailer is not at its end is
        // not used, and the package is decompressed and its payload kept again.
        std::fs::OpenOptions::new().append(true).open(&kept_at).unwrap().write_all(b"!").unwrap();
        assert!(!remembered());
        assert_eq!(collect_kept(&deb, &kept_at, inflation), plain, "kept again");
        assert_eq!(std::fs::read(&kept_at).unwrap(), bytes);
        assert!(remembered(), "kept again as it was decompressed");
    }

    /// A walk of `deb` with its payload kept at `kept`, on a thread of its own: whether the
    /// kept copy was in place when the first entry came, and the entries; `None` when it has
    /// not ended within `within`.
    #[allow(clippy::type_complexity)]
    fn walk_aside(
        deb: &Path,
        kept: &Path,
        inflation: u64,
    ) -> impl FnOnce(std::time::Duration) -> Option<Result<(Option<bool>, Vec<String>), String>>
    {
        let (tx, rx) = std::sync::mpsc::channel();
        let (deb, kept) = (deb.to_owned(), kept.to_owned());
        std::thread::spawn(move || {
            let (mut first, mut paths) = (None, Vec::new());
            let walked = for_each_data_entry_kept(&deb, inflation, Some(&kept), |entry, _| {
                first.get_or_insert(kept.exists());
                paths.push(entry.path);
                Ok(())
            });
            let _ = tx.send(walked.map(|()| (first, paths)).map_err(|e| e.to_string()));
        });
        move |within| rx.recv_timeout(within).ok()
    }

    /// A FIFO standing in for a `.deb`: a thread of [`PayloadsAhead`] that opens it is held
    /// until [`release`] opens it too.
    fn fifo(path: &Path) -> PathBuf {
        assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
        path.to_owned()
    }

    /// `fifo`'s writing end, once a thread has opened it for reading (and is held there): an
    /// open without blocking fails (ENXIO) while no one reads, so it is tried until one does.
    /// Opening it before the reader would lose what is written, as a FIFO's data goes with
    /// its last opener, and leave the reader held for good.
    fn read_by_someone(fifo: &Path) -> std::fs::File {
        use rustix::fs::{Mode, OFlags};
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            match rustix::fs::open(
                fifo,
                OFlags::WRONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => return fd.into(),
                Err(e) if e == rustix::io::Errno::NXIO && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5))
                }
                Err(e) => panic!("{}: no reader in 20 s: {e}", fifo.display()),
            }
        }
    }

    /// Lets go of the thread that opened `fifo` (its writing end, from [`read_by_someone`]):
    /// written to and closed.
    fn release(mut writer: std::fs::File) {
        std::io::Write::write_all(&mut writer, b"not a package").unwrap();
    }

    /// A package given with its kept payload uncompressed is, to dpkg-deb, the same package:
    /// the same control fields and the same `data.tar`, byte for byte; without an intact
    /// payload there is nothing to give.
    #[test]
    fn a_package_with_its_kept_payload_uncompressed_is_the_same_to_dpkg_deb() {
        if !have_dpkg_deb() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let inflation = erdma_limits::DEFAULT_INFLATION;
        let output = |args: &[&str], deb: &Path| {
            let out = Command::new("dpkg-deb").args(args).arg(deb).output().unwrap();
            assert!(out.status.success(), "dpkg-deb {args:?}: {out:?}");
            out.stdout
        };
        for compression in ["xz", "gzip", "zstd"] {
            let deb = build_deb(dir.path(), compression);
            let kept = dir.path().join(format!("{compression}.tar"));
            assert!(with_kept_payload(&deb, inflation, &kept).is_none(), "nothing kept yet");
            let plain = collect_kept(&deb, &kept, inflation);
            let mut bytes = Vec::new();
            let given = with_kept_payload(&deb, inflation, &kept).expect("kept by the walk");
            std::io::copy(&mut { given }, &mut bytes).unwrap();
            let given = dir.path().join(format!("given-{compression}.deb"));
            std::fs::write(&given, &bytes).unwrap();
            // The members before data.tar as they were; data.tar last, uncompressed.
            let data = data_member(&deb);
            let head = (data.offset - 60) as usize;
            assert_eq!(bytes[..head], std::fs::read(&deb).unwrap()[..head]);
            let given_data = data_member(&given);
            assert_eq!(given_data.name, "data.tar");
            assert_eq!(
                given_data.offset + given_data.size + given_data.size % 2,
                bytes.len() as u64
            );
            for args in
                [&["--fsys-tarfile"][..], &["--field"], &["--ctrl-tarfile"], &["--contents"]]
            {
                assert_eq!(
                    output(args, &given),
                    output(args, &deb),
                    "dpkg-deb {args:?}, {compression}"
                );
            }
            assert_eq!(
                collect(&given).unwrap().into_iter().map(|(e, c)| (e.path, c)).collect::<Vec<_>>(),
                plain
            );
            // Past the inflation limit: not used, as a walk would not use it.
            assert!(with_kept_payload(&deb, 1, &kept).is_none(), "{compression}");
            // A damaged payload is not used.
            let mut damaged = std::fs::read(&kept).unwrap();
            damaged[0] ^= 1;
            std::fs::write(&kept, damaged).unwrap();
            erdma_limits::checked::forget_all(); // as a later build finds it (see above)
            assert!(with_kept_payload(&deb, inflation, &kept).is_none(), "{compression}");
        }
        // An uncompressed package is given as it is, though its payload is kept.
        let deb = build_deb(dir.path(), "none");
        let kept = dir.path().join("none.tar");
        collect_kept(&deb, &kept, inflation);
        assert!(kept.is_file());
        assert!(with_kept_payload(&deb, inflation, &kept).is_none());
        // Not a package (a kept payload beside it or not): nothing.
        let not_a_package = dir.path().join("not.deb");
        std::fs::write(&not_a_package, b"!<arch>\n").unwrap();
        assert!(with_kept_payload(&not_a_package, inflation, &kept).is_none());
    }

    #[test]
    fn payloads_decompressed_ahead_are_kept_as_a_walk_keeps_them_and_waited_for() {
        if !have_dpkg_deb() {
            return;
        }
        let long = std::time::Duration::from_secs(20);
        let dir = tempfile::tempdir().unwrap();
        let deb_path = build_deb(dir.path(), "xz");
        let inflation = erdma_limits::DEFAULT_INFLATION;
        let plain: Vec<_> =
            collect(&deb_path).unwrap().into_iter().map(|(e, c)| (e.path, c)).collect();
        let paths: Vec<String> = plain.iter().map(|(p, _)| p.clone()).collect();
        let walked = dir.path().join("walked").join("x.tar");
        assert_eq!(collect_kept(&deb_path, &walked, inflation), plain);

        // Ahead: the file a walk keeps, byte for byte. A walk started while it is on its way
        // waits for it: the kept copy is in place before the first entry comes. (The one
        // thread is held first by a "package" that is a FIFO.)
        let kept = dir.path().join("ahead").join("x.tar");
        let held = fifo(&dir.path().join("held.deb"));
        let ahead = PayloadsAhead::new(1);
        ahead.keep(held.clone(), inflation, dir.path().join("ahead").join("held.tar"));
        ahead.keep(deb_path.clone(), inflation, kept.clone());
        let walk = walk_aside(&deb_path, &kept, inflation);
        let writer = read_by_someone(&held);
        // 300 ms for a walk that would not wait to end; one that waits cannot while the one
        // thread is held.
        let early = walk(std::time::Duration::from_millis(300));
        release(writer);
        assert!(early.is_none(), "the walk did not wait for the payload on its way");
        let got = walk_aside(&deb_path, &kept, inflation)(long).expect("a walk never ended");
        assert_eq!(got, Ok((Some(true), paths.clone())));
        assert_eq!(std::fs::read(&kept).unwrap(), std::fs::read(&walked).unwrap());
        assert_eq!(collect_kept(&deb_path, &kept, inflation), plain);

        // Already kept: not written again (another payload put there stays, and is what the
        // walk reads, as in the test above).
        let other = tar(&[file("./a", b"a")]);
        std::fs::write(&kept, kept_file(&other, data_member(&deb_path).size)).unwrap();
        ahead.keep(deb_path.clone(), inflation, kept.clone());
        let a = vec![("a".to_string(), b"a".to_vec())];
        assert_eq!(collect_kept(&deb_path, &kept, inflation), a);
        drop(ahead);
        assert_eq!(collect_kept(&deb_path, &kept, inflation), a);

        // A damaged member, and a low inflation limit: whatever is kept ahead, the walk gives
        // what it gives alone (an error, the entries) and keeps nothing from a damaged member.
        let mut bytes = std::fs::read(&deb_path).unwrap();
        let data = data_member(&deb_path);
        bytes[(data.offset + data.size / 2) as usize] ^= 0x55;
        let damaged = dir.path().join("damaged.deb");
        std::fs::write(&damaged, &bytes).unwrap();
        let ahead = PayloadsAhead::new(2);
        let damaged_kept = dir.path().join("ahead").join("damaged.tar");
        ahead.keep(damaged.clone(), inflation, damaged_kept.clone());
        let low = dir.path().join("ahead").join("low.tar");
        ahead.keep(deb_path.clone(), 2, low.clone());
        let alone = for_each_data_entry(&damaged, inflation, |_, _| Ok(())).unwrap_err();
        let got = walk_aside(&damaged, &damaged_kept, inflation)(long).expect("a walk never ended");
        assert_eq!(got, Err(alone.to_string()));
        assert!(!damaged_kept.exists(), "kept from a damaged member");
        let alone = collect(&deb_path).map(|v| v.into_iter().map(|(e, _)| e.path).collect());
        let got = walk_aside(&deb_path, &low, 2)(long).expect("a walk never ended");
        assert_eq!(got.map(|(_, p)| p), alone.map_err(|e| e.to_string()));
        drop(ahead);

        // Dropped with work queued behind a held thread: what had not started is given up
        // (nothing kept), and no walk waits for it.
        let held = fifo(&dir.path().join("held2.deb"));
        let ahead = PayloadsAhead::new(1);
        ahead.keep(held.clone(), inflation, dir.path().join("dropped").join("held.tar"));
        let many: Vec<PathBuf> =
            (0..3).map(|i| dir.path().join("dropped").join(format!("{i}.tar"))).collect();
        for k in &many {
            ahead.keep(deb_path.clone(), inflation, k.clone());
        }
        // The one thread held in the first package; then the drop under way (its stop set)
        // before that package ends, so that what is queued behind it is never started.
        let writer = read_by_someone(&held);
        let stopping = ahead.stop_flag();
        let dropping = std::thread::spawn(move || drop(ahead));
        let deadline = std::time::Instant::now() + long;
        while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
            assert!(std::time::Instant::now() < deadline, "the drop never began");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        release(writer);
        dropping.join().unwrap();
        for k in &many {
            assert!(!k.exists(), "{} kept after the drop", k.display());
            let got = walk_aside(&deb_path, k, inflation)(long).expect("a walk never ended");
            assert_eq!(got, Ok((Some(false), paths.clone())));
        }
    }

    type Members<'a> = &'a [(&'a str, &'a [u8])];

    /// An `ar` archive as dpkg-deb writes it, from raw members.
    fn ar(members: Members) -> Vec<u8> {
        let mut out = AR_MAGIC.to_vec();
        for (name, content) in members {
            let size = content.len();
            let header = format!("{name:<16}{:<12}{:<6}{:<6}{:<8}{size:<10}`\n", 0, 0, 0, 100644);
            assert_eq!(header.len(), 60);
            out.extend_from_slice(header.as_bytes());
            out.extend_from_slice(content);
            if size % 2 == 1 {
                out.push(b'\n');
            }
        }
        out
    }

    /// A tar archive with raw entries `(path, type, content, link target)`, paths written
    /// byte for byte (the tar crate's own path setters refuse `..`, which these tests need).
    fn tar(entries: &[(&str, tar::EntryType, &[u8], &str)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, kind, content, link) in entries {
            let mut header = tar::Header::new_gnu();
            header.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
            header.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
            header.set_entry_type(*kind);
            header.set_mode(0o644);
            header.set_uid(0);
            header.set_gid(0);
            header.set_mtime(0);
            header.set_size(content.len() as u64);
            header.set_cksum();
            builder.append(&header, *content).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn file<'a>(path: &'a str, content: &'a [u8]) -> (&'a str, tar::EntryType, &'a [u8], &'a str) {
        (path, tar::EntryType::Regular, content, "")
    }

    fn plain_control() -> Vec<u8> {
        tar(&[
            ("./", tar::EntryType::Directory, b"", ""),
            file("./control", b"Package: x\nVersion: 1\n"),
        ])
    }

    fn plain_data() -> Vec<u8> {
        tar(&[file("./a", b"a")])
    }

    /// A package of uncompressed `control.tar` and `data.tar`.
    fn package(control: &[u8], data: &[u8]) -> Vec<u8> {
        ar(&[("debian-binary", b"2.0\n"), ("control.tar", control), ("data.tar", data)])
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    /// Writes `bytes` as a package and reads all of it, which must fail; the error must name
    /// the file (unless it is a handler's own).
    fn error_for(bytes: &[u8]) -> DebError {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("test.deb");
        std::fs::write(&path, bytes).unwrap();
        let err = read_control(&path)
            .and_then(|_| collect(&path).map(|_| ()))
            .expect_err("a bad package read fine");
        if !matches!(err, DebError::Handler { .. }) {
            assert!(err.to_string().contains(path.to_str().unwrap()), "{err}");
        }
        err
    }

    fn malformed(bytes: &[u8]) -> String {
        match error_for(bytes) {
            DebError::Malformed { reason, .. } => reason,
            other => panic!("expected a malformed-package error, got {other:?}"),
        }
    }

    fn bad_entry(bytes: &[u8]) -> String {
        match error_for(bytes) {
            DebError::BadEntry { reason, .. } => reason,
            other => panic!("expected a bad-entry error, got {other:?}"),
        }
    }

    #[test]
    fn reads_hand_made_archives() {
        let dir = tempfile::tempdir().unwrap();
        let data = tar(&[
            ("./", tar::EntryType::Directory, b"", ""),
            file("/abs/file", b"abc"),
            ("usr//lib/./x/", tar::EntryType::Directory, b"", ""),
            ("./usr/lib/y", tar::EntryType::Link, b"", "/abs/file"),
            ("./usr/lib/z", tar::EntryType::Symlink, b"", "../../abs/file"),
        ]);
        let control = gzip(&plain_control());
        // GNU ar's trailing slash, `_` members, a newer minor format, extra lines, and a
        // member after data.tar are all accepted (deb(5)).
        let deb = ar(&[
            ("debian-binary/", b"2.1\nfuture\n"),
            ("_gpgorigin", b"sig"),
            ("control.tar.gz/", &control),
            ("_extra", b""),
            ("data.tar", &data),
            ("future-member", b"x"),
        ]);
        let path = dir.path().join("hand.deb");
        std::fs::write(&path, deb).unwrap();
        let parsed = read_control(&path).unwrap();
        assert_eq!(parsed.control.get("Package"), Some("x"));
        assert!(parsed.control_files.is_empty());
        let entries = collect(&path).unwrap();
        let summary: Vec<_> =
            entries.iter().map(|(e, c)| (e.path.as_str(), e.kind.clone(), c.as_slice())).collect();
        assert_eq!(
            summary,
            [
                ("abs/file", DataKind::File { size: 3 }, b"abc".as_slice()),
                ("usr/lib/x", DataKind::Dir, b""),
                ("usr/lib/y", DataKind::Hardlink("abs/file".into()), b""),
                ("usr/lib/z", DataKind::Symlink("../../abs/file".into()), b""),
            ]
        );
    }

    #[test]
    fn control_archive_hard_links_share_content() {
        let dir = tempfile::tempdir().unwrap();
        let control = tar(&[
            file("./control", b"Package: x\n"),
            file("./prerm", b"#!/bin/sh\n"),
            ("./postrm", tar::EntryType::Link, b"", "./prerm"),
        ]);
        let path = dir.path().join("links.deb");
        std::fs::write(&path, package(&control, &plain_data())).unwrap();
        let deb = read_control(&path).unwrap();
        assert_eq!(deb.control_files["postrm"], b"#!/bin/sh\n");
        assert_eq!(deb.control_files["prerm"], b"#!/bin/sh\n");
    }

    #[test]
    fn rejects_bad_ar_structure() {
        let (control, data) = (plain_control(), plain_data());
        let v2 = &b"2.0\n"[..];
        assert!(malformed(b"").contains("not an ar archive"));
        assert!(malformed(b"Package: x\n").contains("not an ar archive"));
        assert!(malformed(AR_MAGIC).contains("empty archive"));
        let cases: [(Members, &str); 5] = [
            (
                &[("control.tar", &control), ("debian-binary", v2)],
                "first member is `control.tar`, expected `debian-binary`",
            ),
            (
                &[("debian-binary", v2), ("data.tar", &data), ("control.tar", &control)],
                "unexpected member `data.tar` before `control.tar`",
            ),
            (
                &[("debian-binary", v2), ("control.tar", &control), ("control.tar.gz", &control)],
                "two `control.tar` members",
            ),
            (
                &[("debian-binary", v2), ("control.tar", &control), ("evil", b"")],
                "unexpected member `evil` before `data.tar`",
            ),
            (&[("debian-binary", v2), ("control.tar", &control)], "no `data.tar` member"),
        ];
        for (members, reason) in cases {
            assert_eq!(malformed(&ar(members)), reason);
        }

        let with_version =
            |v: &[u8]| ar(&[("debian-binary", v), ("control.tar", &control), ("data.tar", &data)]);
        assert!(matches!(
            error_for(&with_version(b"3.0\n")),
            DebError::FormatVersion { version, .. } if version == "3.0"
        ));
        for bad in [&b"2.0"[..], b"2\n", b"2.x\n", b"\n", b" 2.0\n", b"!<arch>\n"] {
            let reason = malformed(&with_version(bad));
            assert!(reason.starts_with("bad format version"), "{reason}");
        }
        let reason = malformed(&with_version(&[b'2'; 2000]));
        assert_eq!(reason, "`debian-binary` is 2000 bytes long");

        // Header fields that lie or are not numbers, headers cut short. The first member
        // header starts right after the 8-byte magic; its size field is at 48..58.
        let good = package(&control, &data);
        let patched = |at: usize, bytes: &[u8]| {
            let mut out = good.clone();
            out[at..at + bytes.len()].copy_from_slice(bytes);
            out
        };
        let reason = malformed(&patched(8 + 48, b"9999999999"));
        assert!(reason.contains("runs past the end of the file"), "{reason}");
        assert!(malformed(&patched(8 + 48, b"-4        ")).starts_with("bad size"));
        assert!(malformed(&patched(8 + 48, b"          ")).starts_with("bad size"));
        assert!(malformed(&patched(8 + 48, b"0x10      ")).starts_with("bad size"));
        assert!(malformed(&patched(8 + 58, b"x")).contains("no end marker"));
        assert!(malformed(&patched(8, b"debian-binar\x01")).starts_with("bad member name"));
        assert!(malformed(&good[..8 + 30]).starts_with("truncated member header"));
        let data_size_at = good.len() - data.len() - 60 + 48;
        let bigger = format!("{:<10}", data.len() + 1);
        let reason = malformed(&patched(data_size_at, bigger.as_bytes()));
        assert!(reason.contains("member `data.tar` runs past the end"), "{reason}");
    }

    #[test]
    fn rejects_unsupported_or_mislabelled_compression() {
        let (control, data) = (plain_control(), plain_data());
        let with_data = |name: &str, content: &[u8]| {
            ar(&[("debian-binary", b"2.0\n"), ("control.tar", &control), (name, content)])
        };
        let with_control = |name: &str, content: &[u8]| {
            ar(&[("debian-binary", b"2.0\n"), (name, content), ("data.tar", &data)])
        };
        assert!(matches!(
            error_for(&with_data("data.tar.bz2", b"BZh91AY")),
            DebError::UnsupportedCompression { compression: "bzip2", .. }
        ));
        assert!(matches!(
            error_for(&with_data("data.tar.lzma", b"]\0\0")),
            DebError::UnsupportedCompression { compression: "lzma", .. }
        ));
        assert!(matches!(
            error_for(&with_data("data.tar.lz4", b"")),
            DebError::UnsupportedCompression { .. }
        ));
        for (bytes, want_expected, want_found) in [
            (with_control("control.tar.xz", &gzip(&control)), "xz", "gzip"),
            (with_control("control.tar.gz", &control), "gzip", "tar"),
            (with_control("control.tar.zst", b"BZh91AY"), "zstd", "bzip2"),
            (with_data("data.tar", &gzip(&data)), "tar", "gzip"),
            (with_control("control.tar", b"garbage"), "tar", "unrecognised"),
            (with_control("control.tar.gz", b""), "gzip", "unrecognised"),
        ] {
            match error_for(&bytes) {
                DebError::CompressionMismatch { expected, found, .. } => {
                    assert_eq!((expected, found), (want_expected, want_found))
                }
                other => panic!("expected a compression mismatch, got {other:?}"),
            }
        }
        // Right magic, broken stream.
        let mut broken = gzip(&data);
        let middle = broken.len() / 2;
        broken[middle] ^= 0xff;
        assert!(matches!(error_for(&with_data("data.tar.gz", &broken)), DebError::Member { .. }));
    }

    #[test]
    fn rejects_bad_control_archives() {
        let data = plain_data();
        let with_control =
            |entries: &[(&str, tar::EntryType, &[u8], &str)]| package(&tar(entries), &data);
        let reason = malformed(&with_control(&[file("./md5sums", b"")]));
        assert_eq!(reason, "`control.tar` has no `control` file");
        assert!(matches!(
            error_for(&with_control(&[file("./control", b" x\n")])),
            DebError::Control { source: Deb822Error::ContinuationBeforeField { line: 1 }, .. }
        ));
        let reason = malformed(&with_control(&[file("./control", b"Maintainer: J\xf6rg\n")]));
        assert_eq!(reason, "the control file is not UTF-8");
        let reason = bad_entry(&with_control(&[
            file("./control", b"Package: x\n"),
            ("./postinst", tar::EntryType::Symlink, b"", "/bin/evil"),
        ]));
        assert!(reason.starts_with("only regular files"), "{reason}");
        let reason = bad_entry(&with_control(&[
            file("./control", b"Package: x\n"),
            file("control", b"Package: y\n"),
        ]));
        assert_eq!(reason, "appears twice");
        let reason = bad_entry(&with_control(&[
            file("./control", b"Package: x\n"),
            ("./postrm", tar::EntryType::Link, b"", "./prerm"),
        ]));
        assert_eq!(reason, "hard link to a file not seen before it");
        assert!(matches!(
            error_for(&with_control(&[file("./../control", b"Package: x\n")])),
            DebError::UnsafePath { entry, .. } if entry == "./../control"
        ));
        // A small member that expands past the limit is refused before it is read.
        let mut huge = tar(&[file("./control", b"")]);
        let mut header = tar::Header::new_old();
        header.as_mut_bytes().copy_from_slice(&huge[..512]);
        header.set_size(MAX_CONTROL_BYTES + 1);
        header.set_cksum();
        huge[..512].copy_from_slice(header.as_bytes());
        let reason = malformed(&package(&huge, &data));
        assert!(reason.starts_with("control files add up to more than"), "{reason}");
    }

    #[test]
    fn rejects_unsafe_or_odd_data_entries() {
        let control = plain_control();
        let with_data =
            |entry: (&str, tar::EntryType, &[u8], &str)| package(&control, &tar(&[entry]));
        for entry in [
            file("./usr/../../etc/passwd", b"x"),
            ("../", tar::EntryType::Directory, b"", ""),
            ("./a", tar::EntryType::Link, b"", "../../etc/shadow"),
        ] {
            assert!(
                matches!(error_for(&with_data(entry)), DebError::UnsafePath { .. }),
                "{entry:?}"
            );
        }
        for (entry, want) in [
            (file("./", b""), "entry for the package root that is not a directory"),
            (("./a", tar::EntryType::Symlink, b"", ""), "link without a target"),
            (("./a", tar::EntryType::Link, b"", "./"), "hard link to the package root"),
            (("./a", tar::EntryType::new(b'V'), b"", ""), "unsupported tar entry type `V`"),
        ] {
            assert_eq!(bad_entry(&with_data(entry)), want, "{entry:?}");
        }

        // A name that is not UTF-8 (`./caf` and Latin-1 `é`).
        let mut latin1 = tar(&[file("./cafX", b"")]);
        let mut header = tar::Header::new_old();
        header.as_mut_bytes().copy_from_slice(&latin1[..512]);
        header.as_old_mut().name[5] = 0xe9;
        header.set_cksum();
        latin1[..512].copy_from_slice(header.as_bytes());
        assert_eq!(bad_entry(&package(&control, &latin1)), "path is not UTF-8");

        // A tar cut at a block boundary: no end-of-archive marker.
        let data = tar(&[file("./a", b"a"), file("./b", b"b")]);
        let cut = package(&control, &data[..1024]);
        assert!(matches!(
            error_for(&cut),
            DebError::Member { source, .. } if source.kind() == io::ErrorKind::UnexpectedEof
        ));
        // A header claiming more content than the archive holds: the handler's read fails.
        let mut lying = data[..1024].to_vec();
        let mut header = tar::Header::new_old();
        header.as_mut_bytes().copy_from_slice(&lying[..512]);
        header.set_size(4096);
        header.set_cksum();
        lying[..512].copy_from_slice(header.as_bytes());
        match error_for(&package(&control, &lying)) {
            DebError::Handler { source, .. } => {
                let source = source.downcast::<io::Error>().unwrap();
                assert_eq!(source.kind(), io::ErrorKind::UnexpectedEof);
            }
            other => panic!("expected the handler's read to fail, got {other:?}"),
        }
    }

    /// Cutting a real package anywhere, or flipping any byte, gives an error or (for bytes
    /// that do not matter, such as a timestamp) a result, but never a panic.
    #[test]
    fn survives_truncation_and_corruption() {
        if !have_dpkg_deb() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        for compression in ["xz", "gzip", "zstd", "none"] {
            let original = std::fs::read(build_deb(dir.path(), compression)).unwrap();
            let path = dir.path().join("damaged.deb");
            let try_all = |bytes: &[u8]| {
                std::fs::write(&path, bytes).unwrap();
                let control = read_control(&path);
                let data = collect(&path);
                (control, data)
            };
            let (control, data) = try_all(&original);
            assert!(control.is_ok() && data.is_ok(), "{compression}: the original reads");

            let step = if original.len() > 4000 { 7 } else { 1 };
            for len in (0..original.len()).step_by(step) {
                let (control, data) = try_all(&original[..len]);
                // Only a missing padding byte after an odd-sized data member is harmless.
                if len + 1 < original.len() {
                    assert!(control.is_err(), "{compression}: cut at {len} read fine");
                    assert!(data.is_err(), "{compression}: cut at {len} read fine");
                }
            }
            for position in (0..original.len()).step_by(step) {
                let mut damaged = original.clone();
                damaged[position] ^= 0x55;
                let _ = try_all(&damaged);
            }
        }
    }

    /// A real package from the Debian archive (needs the network and a working apt).
    #[test]
    fn reads_libibverbs1_from_the_archive_needs_debian_archive() {
        let dir = tempfile::tempdir().unwrap();
        let download = Command::new("apt-get")
            .args(["download", "libibverbs1"])
            .current_dir(dir.path())
            .output();
        let deb_path = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|ext| ext == "deb"));
        let Some(deb_path) = deb_path else {
            assert!(
                std::env::var_os("CI").is_none(),
                "apt-get download libibverbs1 failed in CI: {download:?}"
            );
            eprintln!("skipping: apt-get download libibverbs1 failed: {download:?}");
            return;
        };

        let deb = read_control(&deb_path).unwrap();
        assert_eq!(deb.control.get("Package"), Some("libibverbs1"));
        assert_eq!(deb.control.get("Source"), Some("rdma-core"));
        assert_eq!(deb.control.get("Multi-Arch"), Some("same"));
        let version: crate::version::Version = deb.control.get("Version").unwrap().parse().unwrap();
        assert!(version >= "44.0-2".parse().unwrap());
        let depends = crate::version::parse_relations(deb.control.get("Depends").unwrap()).unwrap();
        assert!(depends.iter().flatten().any(|d| d.name == "libc6"));
        for name in ["md5sums", "shlibs", "triggers"] {
            assert!(deb.control_files.contains_key(name), "{name}");
        }
        let shlibs = String::from_utf8(deb.control_files["shlibs"].clone()).unwrap();
        assert!(shlibs.starts_with("libibverbs 1 libibverbs1"), "{shlibs}");

        // Every regular file's MD5 matches the package's own md5sums.
        let md5sums: BTreeMap<String, String> =
            String::from_utf8(deb.control_files["md5sums"].clone())
                .unwrap()
                .lines()
                .map(|line| {
                    let (sum, file) = line.split_once("  ").unwrap();
                    (file.to_owned(), sum.to_owned())
                })
                .collect();
        let triplet = match deb.control.get("Architecture") {
            Some("amd64") => "x86_64-linux-gnu",
            Some("arm64") => "aarch64-linux-gnu",
            other => panic!("unexpected architecture {other:?}"),
        };
        let library = format!("usr/lib/{triplet}/libibverbs.so.1");
        let mut checked = 0;
        let mut library_kind = None;
        for_each_data_entry(&deb_path, erdma_limits::DEFAULT_INFLATION, |entry, content| {
            if entry.path == library {
                library_kind = Some(entry.kind.clone());
            }
            if let DataKind::File { .. } = entry.kind {
                use md5::Digest;
                let mut hasher = md5::Md5::new();
                io::copy(content, &mut hasher).unwrap();
                assert_eq!(
                    md5sums.get(&entry.path).map(String::as_str),
                    Some(hex::encode(hasher.finalize()).as_str()),
                    "{}",
                    entry.path
                );
                checked += 1;
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(checked, md5sums.len());
        match &library_kind {
            Some(DataKind::Symlink(target)) => assert!(target.starts_with("libibverbs.so.1.")),
            other => panic!("{library}: expected a symlink, found {other:?}"),
        }
    }
}
