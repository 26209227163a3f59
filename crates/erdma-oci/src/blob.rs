//! Digests, hashing adapters and compression sniffing shared by every transport.
use std::fs::File;
use std::io::{self, Read, Write};

use bytes::Bytes;
use erdma_limits::checked::FileState;
use futures_util::stream::BoxStream;
use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};

/// Checks that `digest` is `sha256:` followed by 64 lowercase hex digits and returns the hex.
///
/// Digests from manifests name files in layouts and archives, so an unchecked one
/// (`sha256:../../etc/passwd`) would be a path traversal.
pub fn digest_hex(digest: &str) -> Result<&str> {
    let hex = digest
        .strip_prefix("sha256:")
        .ok_or_else(|| Error::UnsupportedDigest { digest: digest.to_string() })?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(Error::MalformedDigest { digest: digest.to_string() });
    }
    Ok(hex)
}

pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A writer that hashes and counts what passes through it.
pub struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    count: u64,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        Self { inner, hasher: Sha256::new(), count: 0 }
    }
    /// Returns the inner writer, the `sha256:` digest and the byte count.
    pub fn finish(self) -> (W, String, u64) {
        (self.inner, format!("sha256:{}", hex::encode(self.hasher.finalize())), self.count)
    }
}

impl<W: Write> Write for HashingWriter<W> {
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

/// A reader that fails at end of input when the content does not match `expected`,
/// so nothing downstream can commit unverified bytes.
pub struct VerifyingReader<R> {
    inner: R,
    hasher: Hashing,
    expected: String,
    done: bool,
    /// The end was reached and the content matched.
    matched: bool,
    len: u64,
}

impl<R: Read> VerifyingReader<R> {
    pub fn new(inner: R, expected: &str) -> Self {
        Self {
            inner,
            hasher: Hashing::Here(Sha256::new()),
            expected: expected.to_string(),
            done: false,
            matched: false,
            len: 0,
        }
    }
}

/// Where a [`VerifyingReader`] hashes what it reads.
enum Hashing {
    Here(Sha256),
    /// On a thread of its own, handed the bytes read in pieces of [`ASIDE_PIECE`] (at most
    /// [`ASIDE_QUEUE`] of them waiting).
    Aside {
        piece: Vec<u8>,
        to: Option<std::sync::mpsc::SyncSender<Vec<u8>>>,
        hash: Option<std::thread::JoinHandle<String>>,
    },
}

const ASIDE_PIECE: usize = 1 << 20;
const ASIDE_QUEUE: usize = 8;

impl Hashing {
    /// Hashing on a thread of its own, or here where no thread can be made.
    fn aside() -> Hashing {
        let (to, pieces) = std::sync::mpsc::sync_channel::<Vec<u8>>(ASIDE_QUEUE);
        let hash = std::thread::Builder::new().name("hash".into()).spawn(move || {
            let mut h = Sha256::new();
            for piece in pieces {
                h.update(&piece);
            }
            format!("sha256:{}", hex::encode(h.finalize()))
        });
        match hash {
            Ok(hash) => Hashing::Aside {
                piece: Vec::with_capacity(ASIDE_PIECE),
                to: Some(to),
                hash: Some(hash),
            },
            Err(_) => Hashing::Here(Sha256::new()),
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        match self {
            Hashing::Here(h) => h.update(bytes),
            Hashing::Aside { piece, to, .. } => {
                piece.extend_from_slice(bytes);
                if piece.len() >= ASIDE_PIECE {
                    let full = std::mem::replace(piece, Vec::with_capacity(ASIDE_PIECE));
                    // A hashing thread gone has panicked: `digest` says so.
                    let _ = to.as_ref().map(|to| to.send(full));
                }
            }
        }
    }

    /// The `sha256:` digest of all bytes handed to it.
    fn digest(&mut self) -> String {
        match self {
            Hashing::Here(h) => format!("sha256:{}", hex::encode(h.clone().finalize())),
            Hashing::Aside { piece, to, hash } => {
                if let Some(to) = to.take() {
                    let _ = to.send(std::mem::take(piece));
                }
                let hash = hash.take().expect("the digest is taken once");
                hash.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
            }
        }
    }
}

impl<R: Read> Read for VerifyingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() && !self.done {
            self.done = true;
            let actual = self.hasher.digest();
            if actual != self.expected {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    Error::DigestMismatch { expected: self.expected.clone(), actual },
                ));
            }
            self.matched = true;
        }
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
}

/// Where the checks of the user's own files are kept for later builds: one small file per
/// digest, named by its hex, with the file states (`Lasting`, one per line) it was read whole
/// and matched in.
static KEPT_IN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// How many files' states one digest keeps (the kept copy, one kept again after a removal).
const KEPT_STATES: usize = 8;

/// A modification time this close to the clock is not kept for later builds: a write in the
/// same clock tick would leave it as it is. Two seconds cover the coarsest clock a Linux file
/// system keeps times by.
const SETTLED: std::time::Duration = std::time::Duration::from_secs(2);

/// Keeps the checks of the user's own files ([`check_file`]) in `dir` for later processes,
/// and trusts the ones kept there when the user owns them and no one else may write them
/// (`erdma_limits::kept`). The first call wins.
pub fn remember_checks_in(dir: std::path::PathBuf) {
    let _ = KEPT_IN.set(dir);
}

/// What of a checked file's state a later build compares: `FileState` without the change time,
/// which linking the file into an output, or removing that output, moves (a base's layer is
/// linked into every layout output). A write moves the modification time; setting it back
/// takes the file's owner (or root): see [`check_file`] for what that leaves. The birth time,
/// which no local file system lets anyone set, is required: without it, a file made later in
/// a freed inode, with the old one's modification time, would pass for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lasting {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    btime: (i64, i64),
}

impl Lasting {
    fn of(s: &FileState) -> Option<Lasting> {
        Some(Lasting { dev: s.dev, ino: s.ino, size: s.size, mtime: s.mtime, btime: s.btime? })
    }

    /// One line of `digest`'s kept file. The digest is in it, not only in the file's name: a
    /// kept file renamed (by whoever owns a cache directory shared with others) is no check
    /// of another digest.
    fn line(&self, digest: &str) -> String {
        let Lasting { dev, ino, size, mtime: (ms, mn), btime: (bs, bn) } = self;
        format!("{digest} {dev} {ino} {size} {ms} {mn} {bs} {bn}")
    }

    /// A line of `digest`'s kept file ([`Self::line`]), none of another digest's.
    fn parse(line: &str, digest: &str) -> Option<Lasting> {
        let f: Vec<&str> = line.split(' ').collect();
        let [of, dev, ino, size, ms, mn, bs, bn] = f[..] else { return None };
        if of != digest {
            return None;
        }
        Some(Lasting {
            dev: dev.parse().ok()?,
            ino: ino.parse().ok()?,
            size: size.parse().ok()?,
            mtime: (ms.parse().ok()?, mn.parse().ok()?),
            btime: (bs.parse().ok()?, bn.parse().ok()?),
        })
    }

    /// Whether its modification and birth times are far enough behind the clock that a later
    /// write, or a later file in the same inode, has other ones.
    fn settled(&self) -> bool {
        let Ok(now) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) else {
            return false;
        };
        #[cfg(test)]
        let now = tests::clock().unwrap_or(now);
        let behind = |(secs, nanos): (i64, i64)| match (u64::try_from(secs), u32::try_from(nanos)) {
            (Ok(secs), Ok(nanos)) => std::time::Duration::new(secs, nanos) + SETTLED < now,
            _ => false,
        };
        behind(self.mtime) && behind(self.btime)
    }
}

/// The file keeping `digest`'s checks, where checks are kept.
fn kept_file(digest: &str) -> Option<std::path::PathBuf> {
    Some(KEPT_IN.get()?.join(digest_hex(digest).ok()?))
}

/// The states kept for `digest` in `path`: none unless the user owns the file and no one else
/// may write it.
fn kept_states(path: &std::path::Path, digest: &str) -> Vec<Lasting> {
    let text = erdma_limits::kept::read(path, 4096).unwrap_or_default();
    String::from_utf8_lossy(&text).lines().filter_map(|l| Lasting::parse(l, digest)).collect()
}

/// Keeps `state` for later builds as one `digest` was read whole in.
fn keep_check(digest: &str, state: &FileState) {
    let lasting = Lasting::of(state).filter(Lasting::settled);
    let (Some(lasting), Some(path)) = (lasting, kept_file(digest)) else { return };
    let mut states = kept_states(&path, digest);
    states.retain(|s| (s.dev, s.ino) != (state.dev, state.ino));
    states.push(lasting);
    let from = states.len().saturating_sub(KEPT_STATES);
    let text: String = states[from..].iter().map(|s| s.line(digest) + "\n").collect();
    // Best effort, written whole: a cache that cannot be written only costs a read later.
    let _ = erdma_limits::kept::write(&path, |f| f.write_all(text.as_bytes()));
}

/// Whether `state` was kept for later builds as one `digest` was read whole in.
fn kept_check(digest: &str, state: &FileState) -> bool {
    let Some(lasting) = Lasting::of(state) else { return false };
    kept_file(digest).is_some_and(|p| kept_states(&p, digest).contains(&lasting))
}

/// Whether a check of `file` may be kept for later builds, or a kept one used: where the user
/// owns it and no one else may write it (`erdma_limits::kept::users_own`), on a local file
/// system, where a file's owner is who the kernel says. Not on a network or FUSE file system:
/// SMB shows every file as the mounting user's, and its other clients may write it and set
/// its times; an NFS server takes other hosts' word for who they are.
fn checks_kept_for(file: &File) -> bool {
    // statfs(2)'s magic numbers (linux/magic.h), of the file systems kept checks trust.
    const LOCAL: [u32; 9] = [
        0xEF53,      // ext2, ext3, ext4
        0x5846_5342, // xfs
        0x9123_683E, // btrfs
        0x0102_1994, // tmpfs
        0xF2F5_2010, // f2fs
        0x2FC1_2FC1, // zfs
        0x794C_7630, // overlay
        0xCA45_1A4E, // bcachefs
        0x6165_676C, // ramfs
    ];
    file.metadata().is_ok_and(|m| erdma_limits::kept::users_own(&m))
        && rustix::fs::fstatfs(file).is_ok_and(|s| LOCAL.contains(&(s.f_type as u32)))
}

/// Remembers that `file`, in `state`, was read whole and matched `digest`: in this process
/// (`erdma_limits::checked`: a layout's layer checked as it was read for the base's files is
/// not read again to be checked before it is linked into the output, 51 MB, 40 ms of a core,
/// for a Rocky 9 base), and for later builds where the check may be kept ([`checks_kept_for`]).
fn remember(file: &File, digest: &str, state: FileState) {
    if checks_kept_for(file) {
        keep_check(digest, &state);
    }
    erdma_limits::checked::remember(digest, state);
}

/// From this size, [`VerifyingFile::hashed_aside`] hashes beside its reader: a Rocky 9 base's
/// 51 MB layer takes 47 ms of a core to hash, 10 % of its decompression.
pub const HASH_ASIDE_FROM: u64 = 8 << 20;

/// A file read from its start through [`VerifyingReader`]: once read to its end and matched,
/// remembered as checked ([`check_file`]), when its state at the end is the one it had
/// when opened (nothing wrote to it meanwhile) and every byte of it was read.
pub struct VerifyingFile {
    inner: VerifyingReader<File>,
    opened: Option<FileState>,
    remembered: bool,
}

impl VerifyingFile {
    /// `file`, just opened (read from its start), checked against `digest`.
    pub fn new(file: File, digest: &str) -> VerifyingFile {
        let opened = FileState::of(&file);
        VerifyingFile { inner: VerifyingReader::new(file, digest), opened, remembered: false }
    }

    /// [`Self::new`] for a reader with work of its own on what it reads (a layer's
    /// decompression): from [`HASH_ASIDE_FROM`] bytes, hashed on a thread of its own.
    pub fn hashed_aside(file: File, digest: &str) -> VerifyingFile {
        let mut f = VerifyingFile::new(file, digest);
        if f.opened.is_some_and(|s| s.size >= HASH_ASIDE_FROM) {
            f.inner.hasher = Hashing::aside();
        }
        f
    }
}

impl Read for VerifyingFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if self.inner.matched && !self.remembered {
            self.remembered = true;
            let end = FileState::of(&self.inner.inner);
            if let Some(state) = self.opened.filter(|s| Some(*s) == end && s.size == self.inner.len)
            {
                remember(&self.inner.inner, &self.inner.expected, state);
            }
        }
        Ok(n)
    }
}

/// Checks that `file` (just opened) holds `digest`'s bytes: read whole ([`check_reader`]),
/// unless this process already read this file whole and found it so, or an earlier build did
/// and kept the check ([`remember_checks_in`]), and its state is still what it was then.
///
/// A check is kept for later builds only where the user owns the file, no one else may write
/// it and the file system is local (`checks_kept_for`), and it stands while the file's
/// device, inode, size, modification and birth time hold (`Lasting`): a file others may write
/// (in a layout or a cache directory shared with others) is read by every build, as whoever
/// may write it could rewrite it.
///
/// What the memo gives up: a writer changing the file in the ways its times cannot show is
/// not caught between the first read and the caller's use, where a second read would catch
/// it. Within a build, a write in the same clock tick (`FileState`); across builds, a process
/// running as the file's owner (the user's own, or one the user started in a user namespace,
/// as a rootless container's root), which may set the modification time back. The caller
/// only links the file, and what it links is the layer's file in the layout the user gave:
/// such a writer can change the output after the link just as well, as the two share an
/// inode. Every copy out of it is checked as it copies (a registry's upload, an archive's
/// entry), and what the build learns of the layer's files comes from the snapshot made when
/// its bytes were read and matched.
pub fn check_file(file: &File, digest: &str) -> io::Result<()> {
    if erdma_limits::checked::remembered(file, digest) {
        return Ok(());
    }
    if checks_kept_for(file) && FileState::of(file).is_some_and(|s| kept_check(digest, &s)) {
        return Ok(());
    }
    let mut r = VerifyingFile::new(file.try_clone()?, digest);
    read_to_end_1m(&mut r)
}

/// Reads `r` to its end, checking it against `digest` as [`VerifyingReader`] does (the error
/// carries the mismatch; [`digest_error`]), in reads of 1 MiB: a base's gigabytes of layers in
/// few system calls, each hashed straight from the buffer it was read into.
pub fn check_reader(r: impl Read, digest: &str) -> io::Result<u64> {
    let mut r = VerifyingReader::new(r, digest);
    read_to_end_1m(&mut r)?;
    Ok(r.len)
}

/// Reads `r` to its end in reads of 1 MiB, dropping what it reads.
fn read_to_end_1m(r: &mut impl Read) -> io::Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Turns an I/O error that carries a digest mismatch back into [`Error::DigestMismatch`].
pub fn digest_error(e: &io::Error) -> Option<Error> {
    let inner = e.get_ref()?;
    if let Some(Error::DigestMismatch { expected, actual }) = inner.downcast_ref::<Error>() {
        return Some(Error::DigestMismatch { expected: expected.clone(), actual: actual.clone() });
    }
    if let Some(oci_client::errors::DigestError::VerificationError { expected, actual }) =
        inner.downcast_ref::<oci_client::errors::DigestError>()
    {
        return Some(Error::DigestMismatch { expected: expected.clone(), actual: actual.clone() });
    }
    None
}

/// `stream` checked against `digest` (sha256) and, when known, `size`. A byte past `size`
/// fails with [`erdma_limits::Exceeded::BlobSize`] (the digest comes only at the end, and an
/// endless body would fill the disk); the digest is checked as the last byte of `size`
/// arrives, so a reader that stops there (an upload of that `Content-Length`) still gets the
/// mismatch instead of that byte, and at the end when the size is not known.
pub fn verified(
    stream: BoxStream<'static, std::io::Result<Bytes>>,
    digest: &str,
    size: Option<u64>,
) -> BoxStream<'static, std::io::Result<Bytes>> {
    struct State {
        inner: BoxStream<'static, std::io::Result<Bytes>>,
        hasher: Sha256,
        got: u64,
        size: Option<u64>,
        digest: String,
        checked: bool,
        done: bool,
    }
    let check = |st: &mut State| -> std::io::Result<()> {
        st.checked = true;
        let actual = format!("sha256:{}", hex::encode(st.hasher.finalize_reset()));
        if actual == st.digest {
            return Ok(());
        }
        Err(std::io::Error::other(Error::DigestMismatch { expected: st.digest.clone(), actual }))
    };
    let state = State {
        inner: stream,
        hasher: Sha256::new(),
        got: 0,
        size,
        digest: digest.to_string(),
        checked: false,
        done: false,
    };
    Box::pin(futures_util::stream::unfold(state, move |mut st| async move {
        if st.done {
            return None;
        }
        let item = match futures_util::StreamExt::next(&mut st.inner).await {
            Some(Ok(chunk)) => {
                st.got += chunk.len() as u64;
                match st.size {
                    Some(max) if st.got > max => {
                        Err(std::io::Error::other(erdma_limits::Exceeded::BlobSize {
                            digest: st.digest.clone(),
                            size: max,
                        }))
                    }
                    Some(max) if st.got == max => {
                        st.hasher.update(&chunk);
                        check(&mut st).map(|()| chunk)
                    }
                    _ => {
                        st.hasher.update(&chunk);
                        Ok(chunk)
                    }
                }
            }
            Some(Err(e)) => Err(e),
            None if st.checked => return None,
            None => match check(&mut st) {
                Ok(()) => return None,
                Err(e) => Err(e),
            },
        };
        st.done = item.is_err();
        Some((item, st))
    }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    /// Tells the compression from the first bytes; media types lie more often than magic numbers.
    pub fn sniff(head: &[u8]) -> Compression {
        if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }
}

/// Wraps `r` in the decompressor its first bytes call for, refusing a decompression bomb: more
/// than `max_inflation` × the compressed bytes read ([`erdma_limits::inflate`]; 0: no limit).
pub fn decompressed<'a, R: io::BufRead + 'a>(
    mut r: R,
    max_inflation: u64,
) -> io::Result<Box<dyn Read + 'a>> {
    let head = r.fill_buf()?;
    Ok(match Compression::sniff(head) {
        Compression::Gzip => Box::new(erdma_limits::inflate(r, max_inflation, u64::MAX, |c| {
            Ok(Box::new(flate2::bufread::MultiGzDecoder::new(c)))
        })?),
        Compression::Zstd => Box::new(erdma_limits::inflate(r, max_inflation, u64::MAX, |c| {
            Ok(Box::new(zstd::stream::read::Decoder::with_buffer(c)?))
        })?),
        Compression::None => Box::new(r),
    })
}

/// Whole-blob transfers that fail mid-stream (connection reset, registry gone) start again
/// from the beginning, a bounded number of times; a digest mismatch is final.
pub async fn with_restarts<T, F, Fut>(digest: &str, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    const TRANSFERS: u32 = 3;
    for attempt in 1.. {
        match f().await {
            Err(Error::Registry { registry, operation, source }) if attempt < TRANSFERS => {
                tracing::warn!(
                    "{operation} {digest} from {registry} failed ({source}); starting it again"
                );
            }
            other => return other,
        }
    }
    unreachable!("the loop returns")
}

#[cfg(test)]
mod tests {
    use super::*;
    use erdma_limits::checked::remembered;

    /// The time `Lasting::settled` takes as now (since the epoch), where a test sets one: a
    /// test's files, made just now, cannot be given an old birth time, and a clock of its own
    /// puts each step a known distance from the file's times however slowly the test runs.
    static CLOCK: std::sync::Mutex<Option<std::time::Duration>> = std::sync::Mutex::new(None);

    pub(super) fn clock() -> Option<std::time::Duration> {
        *CLOCK.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets [`CLOCK`] to `at` (since the epoch); the real clock again once dropped.
    struct TestClock;

    impl TestClock {
        fn at(&self, at: std::time::SystemTime) {
            let since = at.duration_since(std::time::UNIX_EPOCH).unwrap();
            *CLOCK.lock().unwrap_or_else(|e| e.into_inner()) = Some(since);
        }
    }

    impl Drop for TestClock {
        fn drop(&mut self) {
            *CLOCK.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// The tests of what this process remembers, one at a time (they clear it, and set its
    /// clock), where tests share a process.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn digest_validation_blocks_traversal() {
        assert!(digest_hex(&format!("sha256:{}", "0".repeat(64))).is_ok());
        assert!(digest_hex("sha256:../../etc/passwd").is_err());
        assert!(digest_hex(&format!("sha256:{}", "A".repeat(64))).is_err());
        assert!(digest_hex(&format!("sha512:{}", "0".repeat(128))).is_err());
    }

    /// A file read whole and matched is not read again by `check_file` while its state holds;
    /// any change to it, a partial read, a mismatch or another file is checked by reading.
    #[test]
    fn a_file_read_whole_is_checked_once_while_unchanged() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blob");
        let content = b"layer bytes ".repeat(1000);
        std::fs::write(&path, &content).unwrap();
        // An old mtime: a rewrite below moves it, whatever the clock's granularity.
        let f = File::options().write(true).open(&path).unwrap();
        let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1000);
        f.set_modified(old).unwrap();
        let digest = sha256_digest(&content);
        let other = sha256_digest(b"other");
        let read_whole = |digest: &str| {
            let mut r = VerifyingFile::new(File::open(&path).unwrap(), digest);
            let _ = r.read_to_end(&mut Vec::new());
        };
        // Read in part: not remembered.
        let mut r = VerifyingFile::new(File::open(&path).unwrap(), &digest);
        r.read_exact(&mut [0u8; 100]).unwrap();
        drop(r);
        assert!(!remembered(&File::open(&path).unwrap(), &digest));
        // Read whole against another digest: refused, not remembered.
        read_whole(&other);
        assert!(!remembered(&File::open(&path).unwrap(), &other));
        // Written to (the same bytes) between its opening and its end: it matches, but what
        // was read may not be what the file holds, so it is not remembered.
        let mut r = VerifyingFile::new(File::open(&path).unwrap(), &digest);
        r.read_exact(&mut [0u8; 100]).unwrap();
        f.write_all_at(b"layer", 0).unwrap();
        r.read_to_end(&mut Vec::new()).unwrap();
        drop(r);
        assert!(!remembered(&File::open(&path).unwrap(), &digest));
        f.set_modified(old).unwrap();
        // Read whole and matched: remembered, for this digest only.
        read_whole(&digest);
        assert!(remembered(&File::open(&path).unwrap(), &digest));
        assert!(!remembered(&File::open(&path).unwrap(), &other));
        check_file(&File::open(&path).unwrap(), &digest).unwrap();
        // Another file with the same bytes: a file of its own, checked by reading.
        let copy = dir.path().join("copy");
        std::fs::copy(&path, &copy).unwrap();
        assert!(!remembered(&File::open(&copy).unwrap(), &digest));
        // Rewritten in place at the same size: no longer remembered, and the check reads it.
        f.write_all_at(b"LAYER", 0).unwrap();
        assert!(!remembered(&File::open(&path).unwrap(), &digest));
        let e = check_file(&File::open(&path).unwrap(), &digest).unwrap_err();
        assert!(digest_error(&e).is_some(), "{e}");
        // Put back: checked by reading, then remembered again.
        f.write_all_at(b"layer", 0).unwrap();
        check_file(&File::open(&path).unwrap(), &digest).unwrap();
        assert!(remembered(&File::open(&path).unwrap(), &digest));
        // Grown: not remembered.
        f.write_all_at(b"x", content.len() as u64).unwrap();
        assert!(!remembered(&File::open(&path).unwrap(), &digest));
    }

    /// Checks of the user's own files kept for later builds: a file read whole and matched is
    /// taken as checked by a later process (here: this one, its memory cleared) while its
    /// device, inode, size, modification and birth time hold, whatever links to it do to its
    /// change time; not when a time was within `SETTLED` of the check, nor once modified, nor
    /// from a kept file that is not one or not the user's alone, nor for a file others may
    /// write. A file read whole for its content (a layout's layer read for the base's files)
    /// is kept alike.
    #[test]
    fn checks_of_the_users_files_are_kept_for_later_builds_while_the_file_holds() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        use std::os::unix::fs::{FileExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        // A file of a file system whose owners kept checks do not take on trust: /proc's,
        // though the user's own and no one else's to write.
        let proc_file = File::open("/proc/self/status").unwrap();
        assert!(erdma_limits::kept::users_own(&proc_file.metadata().unwrap()));
        assert!(!checks_kept_for(&proc_file));
        let probe = dir.path().join("probe");
        std::fs::write(&probe, b"").unwrap();
        let probe = File::open(&probe).unwrap();
        if probe.metadata().and_then(|m| m.created()).is_err() || !checks_kept_for(&probe) {
            eprintln!("skipped: {} keeps no birth times or is not local", dir.path().display());
            return;
        }
        remember_checks_in(dir.path().join("checked"));
        let forget_this_process = || erdma_limits::checked::forget_all();
        let path = dir.path().join("blob");
        let content = b"cached layer bytes ".repeat(1000);
        std::fs::write(&path, &content).unwrap();
        let digest = sha256_digest(&content);
        let kept = dir.path().join("checked").join(digest_hex(&digest).unwrap());
        let open = || File::open(&path).unwrap();
        let taken_as_checked = |f: &File| {
            FileState::of(f).is_some_and(|s| remembered(f, &digest) || kept_check(&digest, &s))
        };
        // Just written (the clock a second after the file's birth and modification, within
        // SETTLED of both): taken as checked by this process only.
        let clock = TestClock;
        let meta = open().metadata().unwrap();
        let born = meta.created().unwrap();
        let second = std::time::Duration::from_secs(1);
        clock.at(born.max(meta.modified().unwrap()) + second);
        check_file(&open(), &digest).unwrap();
        assert!(taken_as_checked(&open()));
        assert!(!kept.exists());
        forget_this_process();
        assert!(!taken_as_checked(&open()));
        // An old modification time, but born just now: still not kept.
        let f = File::options().write(true).open(&path).unwrap();
        let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1000);
        f.set_modified(old).unwrap();
        check_file(&open(), &digest).unwrap();
        assert!(!kept.exists());
        forget_this_process();
        // Born long enough ago (the clock ten seconds on), but modified later than the clock:
        // not kept.
        clock.at(born + 10 * second);
        f.set_modified(born + 60 * second).unwrap();
        check_file(&open(), &digest).unwrap();
        assert!(!kept.exists());
        forget_this_process();
        // Both settled, the clock three seconds after the birth (just past SETTLED): kept for
        // later builds.
        f.set_modified(old).unwrap();
        clock.at(born + 3 * second);
        check_file(&open(), &digest).unwrap();
        assert!(kept.exists());
        // What the test makes from here on is settled, with a minute to spare.
        clock.at(std::time::SystemTime::now() + 60 * second);
        forget_this_process();
        assert!(taken_as_checked(&open()));
        assert!(!remembered(&open(), &digest));
        // A link to it (as into an output) and its removal move the change time only.
        let link = dir.path().join("link");
        std::fs::hard_link(&path, &link).unwrap();
        std::fs::remove_file(&link).unwrap();
        assert!(taken_as_checked(&open()));
        // Only for this digest, and only for this file.
        assert!(!kept_check(&sha256_digest(b"other"), &FileState::of(&open()).unwrap()));
        let copy = dir.path().join("copy");
        std::fs::copy(&path, &copy).unwrap();
        assert!(!taken_as_checked(&File::open(&copy).unwrap()));
        // Rewritten in place: the modification time moves, and the next check reads it.
        f.write_all_at(b"CACHED", 0).unwrap();
        assert!(!taken_as_checked(&open()));
        let e = check_file(&open(), &digest).unwrap_err();
        assert!(digest_error(&e).is_some(), "{e}");
        // Rewritten again, its modification time set back: taken as checked, unread (setting
        // the time back takes the file's owner), so `check_file` uses what was kept.
        f.write_all_at(b"CACHED", 0).unwrap();
        f.set_modified(old).unwrap();
        assert!(taken_as_checked(&open()));
        check_file(&open(), &digest).unwrap();
        // Put back.
        f.write_all_at(b"cached", 0).unwrap();
        f.set_modified(old).unwrap();
        assert!(taken_as_checked(&open()));
        // Kept for another file born in the same inode, with the same size and modification
        // time: not this file's.
        let line = std::fs::read_to_string(&kept).unwrap();
        let mut fields: Vec<String> = line.trim().split(' ').map(str::to_string).collect();
        assert_eq!(fields.len(), 8, "{line}");
        fields[6] = (fields[6].parse::<i64>().unwrap() - 100).to_string();
        std::fs::write(&kept, fields.join(" ") + "\n").unwrap();
        assert!(!taken_as_checked(&open()));
        std::fs::write(&kept, &line).unwrap();
        assert!(taken_as_checked(&open()));
        // Another digest's kept file, renamed to this digest's name: not this digest's check.
        let other_content = b"other cached bytes".to_vec();
        let other_path = dir.path().join("other");
        std::fs::write(&other_path, &other_content).unwrap();
        File::options().write(true).open(&other_path).unwrap().set_modified(old).unwrap();
        let other_digest = sha256_digest(&other_content);
        check_file(&File::open(&other_path).unwrap(), &other_digest).unwrap();
        let other_kept = dir.path().join("checked").join(digest_hex(&other_digest).unwrap());
        std::fs::rename(&other_kept, &kept).unwrap();
        forget_this_process();
        assert!(!FileState::of(&File::open(&other_path).unwrap())
            .is_some_and(|s| kept_check(&digest, &s)));
        std::fs::write(&kept, &line).unwrap();
        assert!(taken_as_checked(&open()));
        // Writable by others: not trusted.
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(!taken_as_checked(&open()));
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(taken_as_checked(&open()));
        // Not a kept check.
        std::fs::write(&kept, "garbage\n1 2 3\n").unwrap();
        assert!(!taken_as_checked(&open()));
        // Several files per digest, the last `KEPT_STATES` of them.
        let copies: Vec<_> = (0..KEPT_STATES + 1)
            .map(|i| {
                let p = dir.path().join(format!("copy{i}"));
                std::fs::write(&p, &content).unwrap();
                File::options().write(true).open(&p).unwrap().set_modified(old).unwrap();
                check_file(&File::open(&p).unwrap(), &digest).unwrap();
                p
            })
            .collect();
        forget_this_process();
        let taken: Vec<bool> =
            copies.iter().map(|p| taken_as_checked(&File::open(p).unwrap())).collect();
        let mut expected = vec![true; KEPT_STATES + 1];
        expected[0] = false;
        assert_eq!(taken, expected);
        // A file others may write is checked by reading, and nothing is kept; nor is a check
        // kept of one taken as the user's only.
        let shared = dir.path().join("shared");
        std::fs::write(&shared, b"shared bytes").unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o666)).unwrap();
        File::options().write(true).open(&shared).unwrap().set_modified(old).unwrap();
        let shared_digest = sha256_digest(b"shared bytes");
        check_file(&File::open(&shared).unwrap(), &shared_digest).unwrap();
        let shared_kept = dir.path().join("checked").join(digest_hex(&shared_digest).unwrap());
        assert!(!shared_kept.exists());
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o644)).unwrap();
        forget_this_process();
        check_file(&File::open(&shared).unwrap(), &shared_digest).unwrap();
        assert!(shared_kept.exists());
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o664)).unwrap();
        forget_this_process();
        let shared_file = File::open(&shared).unwrap();
        assert!(kept_check(&shared_digest, &FileState::of(&shared_file).unwrap()));
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o644)).unwrap();
        File::options().write(true).open(&shared).unwrap().write_all_at(b"SHARED", 0).unwrap();
        File::options().write(true).open(&shared).unwrap().set_modified(old).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o664)).unwrap();
        let e = check_file(&File::open(&shared).unwrap(), &shared_digest).unwrap_err();
        assert!(digest_error(&e).is_some(), "{e}");
        // A layout's layer read whole for the base's files: its check kept too.
        let layout = dir.path().join("layout");
        std::fs::write(&layout, b"layout bytes").unwrap();
        File::options().write(true).open(&layout).unwrap().set_modified(old).unwrap();
        let layout_digest = sha256_digest(b"layout bytes");
        let mut r = VerifyingFile::new(File::open(&layout).unwrap(), &layout_digest);
        r.read_to_end(&mut Vec::new()).unwrap();
        forget_this_process();
        assert!(kept_check(&layout_digest, &FileState::of(&File::open(&layout).unwrap()).unwrap()));
    }

    /// Hashed on a thread of its own, a large file is checked as one hashed here: the same
    /// verdict whatever the reads, a mismatch at the end, remembered once read whole; dropped
    /// half read, nothing waits.
    #[test]
    fn a_large_file_hashed_aside_is_checked_alike() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("large");
        let content: Vec<u8> =
            (0..HASH_ASIDE_FROM as usize + 12345).map(|i| (i * 31 % 251) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let digest = sha256_digest(&content);
        let aside = |digest: &str| VerifyingFile::hashed_aside(File::open(&path).unwrap(), digest);
        assert!(matches!(aside(&digest).inner.hasher, Hashing::Aside { .. }));
        for piece in [1000, 1 << 16, 3 << 20] {
            erdma_limits::checked::forget_all();
            let mut r = aside(&digest);
            let mut buf = vec![0u8; piece];
            let mut got = Vec::new();
            loop {
                let n = r.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            assert!(got == content, "{piece}");
            assert!(remembered(&File::open(&path).unwrap(), &digest), "{piece}");
        }
        assert!(remembered(&File::open(&path).unwrap(), &digest));
        let other = sha256_digest(b"other");
        let e = aside(&other).read_to_end(&mut Vec::new()).unwrap_err();
        assert!(matches!(digest_error(&e), Some(Error::DigestMismatch { .. })), "{e}");
        let mut half = aside(&digest);
        half.read_exact(&mut vec![0u8; 5 << 20]).unwrap();
        drop(half);
        // Small files are hashed here.
        std::fs::write(dir.path().join("small"), b"small").unwrap();
        let small = VerifyingFile::hashed_aside(
            File::open(dir.path().join("small")).unwrap(),
            &sha256_digest(b"small"),
        );
        assert!(matches!(small.inner.hasher, Hashing::Here(_)));
    }

    #[test]
    fn verifying_reader_rejects_wrong_content() {
        let good = sha256_digest(b"hello");
        let mut out = Vec::new();
        VerifyingReader::new(&b"hello"[..], &good).read_to_end(&mut out).unwrap();
        let err = VerifyingReader::new(&b"hellO"[..], &good).read_to_end(&mut out).unwrap_err();
        assert!(matches!(digest_error(&err), Some(Error::DigestMismatch { .. })), "{err}");
    }

    #[test]
    fn sniffs_compression() {
        assert_eq!(Compression::sniff(&[0x1f, 0x8b, 8]), Compression::Gzip);
        assert_eq!(Compression::sniff(&[0x28, 0xb5, 0x2f, 0xfd]), Compression::Zstd);
        assert_eq!(Compression::sniff(b"etc/"), Compression::None);
    }

    /// Reads `chunks` through [`verified`] the way an upload of `Content-Length: take` does:
    /// it stops once `take` bytes came. Returns the bytes and the first error.
    fn read_verified(
        chunks: &[&'static [u8]],
        digest: &str,
        size: Option<u64>,
        take: u64,
    ) -> (Vec<u8>, Option<std::io::Error>) {
        let items: Vec<std::io::Result<Bytes>> =
            chunks.iter().map(|c| Ok(Bytes::from_static(c))).collect();
        let mut s = verified(Box::pin(futures_util::stream::iter(items)), digest, size);
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
            let mut out = Vec::new();
            while (out.len() as u64) < take {
                match futures_util::StreamExt::next(&mut s).await {
                    Some(Ok(c)) => out.extend_from_slice(&c),
                    Some(Err(e)) => return (out, Some(e)),
                    None => break,
                }
            }
            (out, None)
        })
    }

    #[test]
    fn blobs_are_checked_as_their_last_byte_arrives() {
        let digest = sha256_digest(b"hello world");
        let is_mismatch = |e: &Option<std::io::Error>| {
            e.as_ref()
                .and_then(digest_error)
                .is_some_and(|e| matches!(e, Error::DigestMismatch { .. }))
        };
        // Whole and right: every byte, no error, with the size known or not.
        for size in [Some(11), None] {
            let (got, e) = read_verified(&[b"hello ", b"world"], &digest, size, u64::MAX);
            assert_eq!(got, b"hello world");
            assert!(e.is_none(), "{e:?}");
        }
        // Wrong bytes of the right length, read by a consumer that stops at 11 bytes: the
        // last chunk is the mismatch, not the bytes.
        let (got, e) = read_verified(&[b"hello ", b"WORLD"], &digest, Some(11), 11);
        assert_eq!(got, b"hello ");
        assert!(is_mismatch(&e), "{e:?}");
        // Size unknown: the mismatch comes at the end.
        let (got, e) = read_verified(&[b"hello ", b"WORLD"], &digest, None, u64::MAX);
        assert_eq!(got, b"hello WORLD");
        assert!(is_mismatch(&e), "{e:?}");
        // More than the size: refused at the first byte too many; a size of 0 is a size.
        let (got, e) = read_verified(&[b"hello ", b"world", b"!"], &digest, Some(11), u64::MAX);
        assert_eq!(got, b"hello world");
        assert!(
            matches!(
                e.as_ref().and_then(erdma_limits::exceeded),
                Some(erdma_limits::Exceeded::BlobSize { size: 11, .. })
            ),
            "{e:?}"
        );
        let (got, e) = read_verified(&[b"hello world!"], &digest, Some(11), u64::MAX);
        assert!(got.is_empty());
        assert!(
            matches!(
                e.as_ref().and_then(erdma_limits::exceeded),
                Some(erdma_limits::Exceeded::BlobSize { size: 11, .. })
            ),
            "{e:?}"
        );
        let (_, e) = read_verified(&[b"x"], &digest, Some(0), u64::MAX);
        assert!(
            matches!(
                e.as_ref().and_then(erdma_limits::exceeded),
                Some(erdma_limits::Exceeded::BlobSize { size: 0, .. })
            ),
            "{e:?}"
        );
        // Short: the mismatch at the end.
        let (_, e) = read_verified(&[b"hello "], &digest, Some(11), u64::MAX);
        assert!(is_mismatch(&e), "{e:?}");
    }
}
