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
    pub fn commit(mut self) -> io::Result<()> {
        self.tmp.as_file_mut().flush()?;
        self.tmp.persist(&self.path).map_err(|e| e.error)?;
        Ok(())
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
