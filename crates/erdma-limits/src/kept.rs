//! Files a build keeps between runs (parsed repository indices, named by the checksum their
//! signed metadata gives): read back only when the user running the build owns them and no
//! one else may write them, and written whole or not at all. A cache directory shared with
//! others reads as empty; `docs/security.md` ("The cache") says what the cache is trusted with.
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

/// Why a kept file was not opened.
#[derive(Debug)]
pub enum NotKept {
    /// There is none, or it cannot be opened.
    Missing(io::Error),
    /// It is not a regular file the user owns, or others may write it.
    Untrusted,
    /// It is larger than the caller reads.
    TooLarge,
}

/// Whether `meta` is a regular file owned by the effective user and not writable by group or
/// others: one no one else can change.
pub fn users_own(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    meta.is_file() && meta.uid() == rustix::process::geteuid().as_raw() && meta.mode() & 0o022 == 0
}

/// Opens the kept file at `path` when it is a regular file of at most `max` bytes owned by
/// the effective user and not writable by group or others ([`users_own`]).
pub fn open(path: &Path, max: u64) -> Result<File, NotKept> {
    let f = File::open(path).map_err(NotKept::Missing)?;
    let meta = f.metadata().map_err(NotKept::Missing)?;
    if !users_own(&meta) {
        return Err(NotKept::Untrusted);
    }
    if meta.len() > max {
        return Err(NotKept::TooLarge);
    }
    Ok(f)
}

/// Reads the whole kept file at `path` (see [`open`]).
pub fn read(path: &Path, max: u64) -> Result<Vec<u8>, NotKept> {
    use std::io::Read;
    let mut f = open(path, max)?;
    let len = f.metadata().map_err(NotKept::Missing)?.len();
    let mut out = Vec::with_capacity(len as usize);
    f.read_to_end(&mut out).map_err(NotKept::Missing)?;
    Ok(out)
}

/// Writes a kept file at `path` through `fill`, whole or not at all: into a temporary file
/// beside it (mode 0600, the directory made where missing), renamed over `path` once `fill`
/// succeeded.
pub fn write(path: &Path, fill: impl FnOnce(&mut File) -> io::Result<()>) -> io::Result<()> {
    let mut w = Writer::new(path)?;
    fill(w.file())?;
    w.commit()
}

/// A kept file written piece by piece, as [`write()`] writes one: [`Writer::commit`] renames it
/// into place; dropped without that, it leaves nothing behind.
pub struct Writer {
    path: std::path::PathBuf,
    tmp: tempfile::NamedTempFile,
}

impl Writer {
    /// A temporary file beside `path` (mode 0600, the directory made where missing).
    pub fn new(path: &Path) -> io::Result<Writer> {
        let dir = path.parent().ok_or_else(|| io::Error::other("no directory"))?;
        std::fs::create_dir_all(dir)?;
        Ok(Writer { path: path.to_owned(), tmp: tempfile::NamedTempFile::new_in(dir)? })
    }

    /// The file being written.
    pub fn file(&mut self) -> &mut File {
        self.tmp.as_file_mut()
    }

    /// Puts what was written in place of whatever `path` held.
    pub fn commit(self) -> io::Result<()> {
        self.commit_file().map(drop)
    }

    /// [`Self::commit`], giving back the file now at `path` (for its state once in place: a
    /// rename moves a file's change time).
    pub fn commit_file(mut self) -> io::Result<File> {
        self.tmp.as_file_mut().flush()?;
        self.tmp.persist(&self.path).map_err(|e| e.error)
    }
}

/// How many kept files [`prune`] leaves at most, and how many bytes they may hold.
#[derive(Debug, Clone, Copy)]
pub struct Most {
    pub files: usize,
    pub bytes: u64,
}

/// Removes the kept files of `dir` that `is_kept` names, those used longest ago first (a use
/// sets a kept file's modification time), until no more than `most` are left; never `spare`.
/// Best effort: what cannot be listed or removed stays.
pub fn prune(dir: &Path, is_kept: impl Fn(&Path) -> bool, most: Most, spare: Option<&Path>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut kept: Vec<(std::time::SystemTime, u64, std::path::PathBuf)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let path = e.path();
            let m = e.metadata().ok().filter(|m| m.is_file() && is_kept(&path))?;
            Some((m.modified().ok()?, m.len(), path))
        })
        .collect();
    let (mut files, mut bytes) = (kept.len(), kept.iter().map(|(_, len, _)| len).sum::<u64>());
    kept.sort();
    for (_, len, path) in kept {
        if files <= most.files && bytes <= most.bytes {
            break;
        }
        if Some(path.as_path()) != spare && std::fs::remove_file(&path).is_ok() {
            files -= 1;
            bytes -= len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn only_the_users_own_unshared_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("a.kept");
        write(&path, |f| f.write_all(b"kept")).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(read(&path, 100).unwrap(), b"kept");
        assert!(matches!(read(&path, 3), Err(NotKept::TooLarge)));
        for mode in [0o620, 0o602, 0o666] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(matches!(read(&path, 100), Err(NotKept::Untrusted)), "{mode:o}");
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(read(&path, 100).unwrap(), b"kept");
        assert!(matches!(read(&dir.path().join("none"), 100), Err(NotKept::Missing(_))));
        // A directory is not a kept file.
        assert!(matches!(read(&dir.path().join("sub"), 100), Err(NotKept::Untrusted)));
    }

    /// Those used longest ago go first, by count or by bytes; what the filter does not name
    /// and the spared file stay.
    #[test]
    fn prune_removes_those_used_longest_ago() {
        let dir = tempfile::tempdir().unwrap();
        let at = |secs: u64| std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        for (i, name) in ["a.k", "b.k", "c.k", "d.k", "other"].iter().enumerate() {
            let path = dir.path().join(name);
            write(&path, |f| f.write_all(&vec![0; 10 * (i + 1)])).unwrap();
            File::options().write(true).open(&path).unwrap().set_modified(at(i as u64)).unwrap();
        }
        let left = || {
            let mut names: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        let is_k = |p: &Path| p.extension().is_some_and(|e| e == "k");
        prune(dir.path(), is_k, Most { files: 3, bytes: u64::MAX }, None);
        assert_eq!(left(), ["b.k", "c.k", "d.k", "other"]);
        // 20 + 30 + 40 bytes, down to 50: `b.k` goes, `c.k` is spared, `d.k` goes.
        let spare = dir.path().join("c.k");
        prune(dir.path(), is_k, Most { files: usize::MAX, bytes: 50 }, Some(&spare));
        assert_eq!(left(), ["c.k", "other"]);
    }

    #[test]
    fn a_failed_write_leaves_what_was_there() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.kept");
        write(&path, |f| f.write_all(b"old")).unwrap();
        let e = write(&path, |f| {
            f.write_all(b"half")?;
            Err(io::Error::other("stopped"))
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "stopped");
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left");
        // Written piece by piece: nothing until committed, nothing left when dropped.
        let mut w = Writer::new(&path).unwrap();
        w.file().write_all(b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        drop(w);
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left");
        let mut w = Writer::new(&path).unwrap();
        w.file().write_all(b"new").unwrap();
        w.commit().unwrap();
        assert_eq!(read(&path, 100).unwrap(), b"new");
    }
}
