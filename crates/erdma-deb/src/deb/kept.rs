//! A package's decompressed `data.tar`, kept between builds so that a build with the package
//! already in its cache does not decompress it again (xz: about 50 MB/s on one core, most of
//! what unpacking a handful of packages costs).
//!
//! The caller names the file after the `.deb` it came from (by its verified SHA256), so a kept
//! payload only ever stands for the one package. The file is the tar as the decompressor gave
//! it, then a trailer: the tar's SHA256, the compressed member's size, and [`MAGIC`]. It is
//! read back whole ([`erdma_limits::kept`]: the user's own, not writable by others), and used
//! only when the trailer is intact, the member's size is the package's and the tar hashes as
//! the trailer says; anything else is ignored and the package decompressed again, as if
//! nothing were kept. A payload this process wrote or already read and hashed is not hashed
//! again while the file's state holds ([`erdma_limits::checked`]): a sandboxed build reads
//! each payload three times (unpacked, listed for the sandbox, handed to dpkg), and a cold
//! build reads back what it has just written, about 0.1 s of one core for `openmpi-bin`'s
//! 54 packages, while the other core waits.
//!
//! A walk keeps the payload only once it has handled every entry; [`PayloadsAhead`] keeps
//! every payload that decompresses whole, before any walk. Such a payload may hold a tar that
//! a walk then refuses (a bad entry, a path the handler refuses): the walk refuses it again on
//! every build that reads it, as it would from the `.deb`, at the cost of reading it back.
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, LazyLock, Mutex};

use sha2::{Digest, Sha256};

use super::ar::Member;

/// The end of every kept payload.
const MAGIC: &[u8; 16] = b"erdma-data.tar-1";
/// SHA256, the member's size, [`MAGIC`].
const TRAILER: usize = 32 + 8 + MAGIC.len();
/// Payloads larger than this are not kept: read back whole, they would cost their size in
/// memory (Debian's largest `data.tar`s, firmware and debug symbols, run to gigabytes).
pub const MAX: u64 = 256 << 20;

/// What a kept payload whose tar hashes to `sha256` is remembered as, once checked
/// ([`erdma_limits::checked`]): the file is the tar and its trailer, so not the tar's digest
/// alone.
pub(super) fn memo_key(sha256: &[u8]) -> String {
    format!("kept data.tar sha256:{}", hex::encode(sha256))
}

/// The `data.tar` kept at `path` for `member`, when it is there and intact; `None` otherwise.
/// `inflation` (0: none) is applied to it as to the member's decompression: a kept payload
/// larger than the member may inflate to is not used, and the member is decompressed (and
/// refused) as without a kept copy.
pub(super) fn read(path: &Path, member: &Member, inflation: u64) -> Option<Vec<u8>> {
    use erdma_limits::checked::{self, FileState};
    use erdma_limits::kept::NotKept;
    let mut file = match erdma_limits::kept::open(path, MAX + TRAILER as u64) {
        Ok(file) => file,
        Err(NotKept::Untrusted) => {
            tracing::warn!(
                "ignoring cached payload {}: not the user's own, or writable by others",
                path.display()
            );
            return None;
        }
        Err(NotKept::Missing(_) | NotKept::TooLarge) => return None,
    };
    let before = FileState::of(&file)?;
    let mut kept = Vec::with_capacity(usize::try_from(before.size).ok()?);
    file.read_to_end(&mut kept).ok()?;
    let tar_len = kept.len().checked_sub(TRAILER)?;
    let trailer = &kept[tar_len..];
    let (sha256, rest) = trailer.split_at(32);
    let (size, magic) = rest.split_at(8);
    let size = u64::from_le_bytes(size.try_into().expect("8 bytes"));
    let within = inflation == 0 || (tar_len as u64) <= member.size.saturating_mul(inflation);
    if magic != MAGIC || size != member.size || !within {
        return None;
    }
    // Read while nothing changed it: its state before the read is the bytes read.
    let key = memo_key(sha256);
    let stable = FileState::of(&file) == Some(before);
    if !(stable && checked::remembered_in(&key, &before)) {
        if Sha256::digest(&kept[..tar_len]).as_slice() != sha256 {
            tracing::warn!(
                "ignoring cached payload {}: damaged (its SHA256 differs)",
                path.display()
            );
            return None;
        }
        if stable {
            checked::remember(&key, before);
        }
    }
    kept.truncate(tar_len);
    Some(kept)
}

/// A decompressor's output passed on as it is read, and written to a kept payload beside.
/// Writing stops, and nothing is kept, at a write error or once the payload grows past
/// [`MAX`]; [`Tee::keep`] puts it in place once the decompressor has given all it has.
pub(super) struct Tee<'a> {
    inner: Box<dyn Read + 'a>,
    out: Option<Out>,
}

struct Out {
    path: std::path::PathBuf,
    writer: erdma_limits::kept::Writer,
    hash: Sha256,
    len: u64,
    member_size: u64,
    ended: bool,
}

impl<'a> Tee<'a> {
    /// `inner`'s bytes, kept at `path` (for `member`) when `path` is given and a file can be
    /// made there.
    pub(super) fn new(inner: Box<dyn Read + 'a>, path: Option<&Path>, member: &Member) -> Tee<'a> {
        let out = path.and_then(|path| match erdma_limits::kept::Writer::new(path) {
            Ok(writer) => Some(Out {
                path: path.to_owned(),
                writer,
                hash: Sha256::new(),
                len: 0,
                member_size: member.size,
                ended: false,
            }),
            Err(e) => {
                tracing::debug!("not keeping the payload at {}: {e}", path.display());
                None
            }
        });
        Tee { inner, out }
    }

    /// Reads what the consumer left (the tar's padding after its end blocks) and, when all
    /// of it came out and was written, puts the kept payload in place. A decompressor error
    /// here only means nothing is kept: the consumer already had all the entries.
    pub(super) fn keep(mut self) {
        if self.out.is_none() {
            return;
        }
        if let Err(e) = io::copy(&mut self, &mut io::sink()) {
            tracing::debug!("not keeping a payload: reading to its end: {e}");
            return;
        }
        let Some(mut out) = self.out.take().filter(|o| o.ended) else { return };
        let mut trailer = Vec::with_capacity(TRAILER);
        trailer.extend_from_slice(&out.hash.finalize());
        trailer.extend_from_slice(&out.member_size.to_le_bytes());
        trailer.extend_from_slice(MAGIC);
        match out.writer.file().write_all(&trailer).and_then(|()| out.writer.commit_file()) {
            // Hashed as it was written: [`read`] need not hash it again while it stays so.
            Ok(file) => {
                if let Some(state) = erdma_limits::checked::FileState::of(&file) {
                    erdma_limits::checked::remember(&memo_key(&trailer[..32]), state);
                }
            }
            Err(e) => tracing::debug!("not keeping the payload at {}: {e}", out.path.display()),
        }
    }
}

impl Read for Tee<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(out) = &mut self.out {
            if n == 0 {
                out.ended = true;
            } else if out.len + n as u64 > MAX || out.writer.file().write_all(&buf[..n]).is_err() {
                self.out = None;
            } else {
                out.len += n as u64;
                out.hash.update(&buf[..n]);
            }
        }
        Ok(n)
    }
}

impl Tee<'_> {
    /// Whether the bytes are still being written to a kept payload.
    fn keeping(&self) -> bool {
        self.out.is_some()
    }
}

/// Payloads being decompressed ahead ([`PayloadsAhead`]), by the path they are kept at.
static PENDING: LazyLock<Mutex<HashMap<PathBuf, Arc<Pending>>>> = LazyLock::new(Default::default);

/// One payload being decompressed ahead: done once it is kept, or given up.
#[derive(Default)]
struct Pending {
    done: Mutex<bool>,
    cv: Condvar,
}

/// Waits while the payload kept at `path` is being decompressed ahead, so that a walk reads
/// what [`PayloadsAhead`] keeps there instead of decompressing the package a second time.
pub(super) fn wait_ahead(path: &Path) {
    let pending = PENDING.lock().unwrap_or_else(|e| e.into_inner()).get(path).cloned();
    if let Some(p) = pending {
        let mut done = p.done.lock().unwrap_or_else(|e| e.into_inner());
        while !*done {
            done = p.cv.wait(done).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// One package for [`PayloadsAhead`]. It is marked done when dropped, wherever that is (its
/// work finished or given up, its thread unwinding, the queue dropped with it still in it),
/// waking whoever waits for it.
struct Job {
    deb: PathBuf,
    inflation: u64,
    kept: PathBuf,
    pending: Arc<Pending>,
}

impl Drop for Job {
    fn drop(&mut self) {
        let mut map = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(&self.kept).is_some_and(|p| Arc::ptr_eq(p, &self.pending)) {
            map.remove(&self.kept);
        }
        drop(map);
        *self.pending.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.pending.cv.notify_all();
    }
}

/// Decompresses packages' payloads into their kept files on threads of their own, in the
/// order they are given, while the caller does something else (downloads the next packages,
/// walks the ones already kept). A walk of a package given here
/// ([`super::for_each_data_entry_kept`] with the same kept path) waits for its payload, then
/// reads it as a kept one. Nothing here is trusted more than a kept payload from an earlier
/// build: the walk checks it the same way, and decompresses the package itself when it is not
/// there (a decompressor error, a payload past [`MAX`], a cache that cannot be written).
/// Dropping it gives up what has not started and stops what has at its next chunk.
pub struct PayloadsAhead {
    jobs: Option<mpsc::Sender<Job>>,
    workers: Vec<std::thread::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl PayloadsAhead {
    /// `threads` decompressors (at least one).
    pub fn new(threads: usize) -> PayloadsAhead {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let stop = Arc::new(AtomicBool::new(false));
        let workers = (0..threads.max(1))
            .filter_map(|i| {
                let (rx, stop) = (rx.clone(), stop.clone());
                std::thread::Builder::new()
                    .name(format!("payload-{i}"))
                    .spawn(move || loop {
                        let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        let Ok(job) = job else { break };
                        keep_payload(&job.deb, job.inflation, &job.kept, &stop);
                    })
                    .ok()
            })
            .collect();
        PayloadsAhead { jobs: Some(tx), workers, stop }
    }

    /// Decompresses the `data.tar` of the `.deb` at `deb` (its member inflating at most
    /// `inflation` times, 0: no limit) into a kept payload at `kept`, unless one is there or
    /// on its way.
    pub fn keep(&self, deb: PathBuf, inflation: u64, kept: PathBuf) {
        if kept.exists() {
            return;
        }
        let pending = Arc::new(Pending::default());
        {
            let mut map = PENDING.lock().unwrap_or_else(|e| e.into_inner());
            if map.contains_key(&kept) {
                return;
            }
            map.insert(kept.clone(), pending.clone());
        }
        // Not sent (no thread left to take it): dropped here, and so done.
        if let Some(tx) = &self.jobs {
            let _ = tx.send(Job { deb, inflation, kept, pending });
        }
    }
}

#[cfg(test)]
impl PayloadsAhead {
    /// The flag a drop sets first, for a test to see that the drop has begun.
    pub(crate) fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }
}

impl Drop for PayloadsAhead {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.jobs = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// [`PayloadsAhead`]'s work for one package: its payload decompressed into `kept`, given up
/// when it cannot be kept or once `stop` is set.
fn keep_payload(deb: &Path, inflation: u64, kept: &Path, stop: &AtomicBool) {
    let run = || -> Result<(), super::DebError> {
        if kept.exists() || stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut ar = super::ArReader::open(deb)?;
        let layout = super::read_layout(&mut ar)?;
        let member = &layout.data;
        let mut tee = Tee::new(ar.tar_stream(member, inflation)?, Some(kept), member);
        let mut buf = vec![0u8; 256 << 10];
        let io =
            |source| super::DebError::Io { operation: "decompressing", path: deb.into(), source };
        while tee.keeping() && !stop.load(Ordering::Relaxed) {
            match tee.read(&mut buf) {
                Ok(0) => {
                    tee.keep();
                    break;
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        }
        Ok(())
    };
    if let Err(e) = run() {
        // The walk decompresses it again and reports what is wrong.
        tracing::debug!("not decompressing {} ahead: {e}", deb.display());
    }
}
