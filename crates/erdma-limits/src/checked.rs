//! Files this process read (or wrote) whole and found to hold the bytes a digest names,
//! remembered with their state then: a second use of the same file in the same build is not
//! read again to be checked while its state holds ([`FileState`]). A base's layer checked as
//! it was read for the base's files and then linked into the output, a package's payload kept
//! as it was decompressed and then read back to be unpacked: each is hashed once per build.
//!
//! What the memo gives up: a writer changing the file in a way its times cannot show (a write
//! in the same clock tick as the last change, or through a shared mapping before the page is
//! written back) between the first check and a later use. The files remembered are the
//! build's own, in the user's cache or output, which only the user may write; the callers say
//! what else stands on them (`erdma_oci::blob::check_file`, `erdma_deb`'s kept payloads).
use std::collections::HashMap;
use std::fs::File;
use std::sync::Mutex;

/// What `fstat` says of a file, as far as its content goes: the same device, inode and size,
/// and the same modification and change times (no one can set a change time back; a `write`,
/// `truncate` or `utimes` moves it) stand for the same bytes. Not for every writer: a write
/// within the same clock tick as the last change, or through a shared mapping before the page
/// is written back, leaves both times as they were. The birth time, where the file system
/// keeps one, tells a file from a later one given the same inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileState {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
    pub btime: Option<(i64, i64)>,
}

impl FileState {
    /// The state of `f`, a regular file; `None` for anything else or where `fstat` fails.
    pub fn of(f: &File) -> Option<FileState> {
        use std::os::unix::fs::MetadataExt;
        let m = f.metadata().ok().filter(|m| m.is_file())?;
        Some(FileState {
            dev: m.dev(),
            ino: m.ino(),
            size: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
            btime: m
                .created()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| (d.as_secs() as i64, i64::from(d.subsec_nanos()))),
        })
    }
}

/// The files remembered, by the digest each matched and its device and inode, with its state
/// then: one entry per digest and file, found without a search (a build may keep the payloads
/// of thousands of packages).
type Checked = HashMap<(String, u64, u64), FileState>;

static CHECKED: Mutex<Option<Checked>> = Mutex::new(None);

/// Remembers that the file in `state` was read or written whole and holds `digest`'s bytes.
pub fn remember(digest: &str, state: FileState) {
    let mut checked = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
    checked
        .get_or_insert_with(HashMap::new)
        .insert((digest.to_string(), state.dev, state.ino), state);
}

/// Whether `f` was remembered as holding `digest`'s bytes ([`remember`]) and its state is still
/// the one it had then.
pub fn remembered(f: &File, digest: &str) -> bool {
    FileState::of(f).is_some_and(|now| remembered_in(digest, &now))
}

/// [`remembered`] for a file whose state the caller has just taken.
pub fn remembered_in(digest: &str, now: &FileState) -> bool {
    let checked = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
    let key = (digest.to_string(), now.dev, now.ino);
    checked.as_ref().and_then(|c| c.get(&key)).is_some_and(|s| s == now)
}

/// Forgets every file remembered: for tests that play a later process.
pub fn forget_all() {
    *CHECKED.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_file_is_remembered_for_its_digest_while_its_state_holds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"bytes").unwrap();
        let f = File::open(&path).unwrap();
        let digest = "sha256:checked-module-test";
        assert!(!remembered(&f, digest));
        remember(digest, FileState::of(&f).unwrap());
        assert!(remembered(&f, digest));
        assert!(!remembered(&f, "sha256:another"));
        // Another file with the same bytes is not this one.
        let copy = dir.path().join("copy");
        std::fs::copy(&path, &copy).unwrap();
        assert!(!remembered(&File::open(&copy).unwrap(), digest));
        // Appended to: its size and times move, and it is no longer remembered.
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"!").unwrap();
        assert!(!remembered(&File::open(&path).unwrap(), digest));
        // A directory has no state.
        assert!(FileState::of(&File::open(dir.path()).unwrap()).is_none());
    }
}
