//! Reading sysfs: one attribute's value as the kernel hands it over, and directories held open
//! so that what is under them is opened relative to them.
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

/// A sysfs attribute's value, trimmed; `None` when it cannot be read or is not UTF-8.
///
/// An attribute is at most a page, which sysfs hands over whole in one `read`. So: one buffer,
/// no `fstat` for a size hint, and no second `read` to see the end when the first one left
/// room (a regular file, as a fixture's attributes are, returns less than asked only at its
/// end too): three system calls, not six as `std::fs::read_to_string` makes, for each of the
/// twenty-odd attributes an asking `create` reads.
pub(crate) fn read_trim(path: &Path) -> Option<String> {
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    read_fd(fd)
}

/// [`read_trim`] of an open file.
fn read_fd(fd: OwnedFd) -> Option<String> {
    let mut buf = [0u8; 4096];
    let len = loop {
        match rustix::io::read(&fd, &mut buf) {
            Ok(n) if n < buf.len() => break n,
            // Not a sysfs attribute after all (a fixture's, or a file put there): the rest of it.
            Ok(n) => {
                let mut all = buf[..n].to_vec();
                std::io::Read::read_to_end(&mut std::fs::File::from(fd), &mut all).ok()?;
                return String::from_utf8(all).ok().map(|s| s.trim().to_string());
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return None,
        }
    };
    std::str::from_utf8(&buf[..len]).ok().map(|s| s.trim().to_string())
}

/// A sysfs directory held open. What is under it is opened relative to it, so the kernel walks
/// only the rest of the path for each attribute, not the root, the class directory and the
/// device's symbolic link (`class/infiniband/erdma_0` leads into `devices/pci…`) again and
/// again. The same files are reached as by their whole paths: symbolic links below are followed
/// alike, and a directory only walked through is opened with `O_PATH`, which asks for no more
/// permission than the walk did.
pub(crate) struct SysDir(OwnedFd);

const LIST: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);
const THROUGH: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

impl SysDir {
    /// The directory at `path`, to list ([`SysDir::names`]) and to read below.
    pub(crate) fn open(path: &Path) -> std::io::Result<SysDir> {
        Ok(SysDir(rustix::fs::open(path, LIST, Mode::empty())?))
    }

    /// The directory `rel` under this one, to list and to read below.
    pub(crate) fn list<P: rustix::path::Arg>(&self, rel: P) -> std::io::Result<SysDir> {
        Ok(SysDir(rustix::fs::openat(&self.0, rel, LIST, Mode::empty())?))
    }

    /// The directory `rel` under this one, only to read below: [`SysDir::names`] of it is
    /// empty.
    pub(crate) fn through<P: rustix::path::Arg>(&self, rel: P) -> std::io::Result<SysDir> {
        Ok(SysDir(rustix::fs::openat(&self.0, rel, THROUGH, Mode::empty())?))
    }

    /// [`read_trim`] of the attribute `rel` under this directory.
    pub(crate) fn read_trim<P: rustix::path::Arg>(&self, rel: P) -> Option<String> {
        read_fd(
            rustix::fs::openat(&self.0, rel, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
                .ok()?,
        )
    }

    /// The last component of where the symbolic link `rel` points (a driver's name from
    /// `device/driver`).
    pub(crate) fn link_name<P: rustix::path::Arg>(&self, rel: P) -> Option<String> {
        use std::os::unix::ffi::OsStrExt;
        let target = rustix::fs::readlinkat(&self.0, rel, Vec::new()).ok()?;
        let name = Path::new(std::ffi::OsStr::from_bytes(target.as_bytes())).file_name()?;
        Some(name.to_string_lossy().into_owned())
    }

    /// The names of the entries (not `.` and `..`), as the kernel gives them, in its order; a
    /// read that fails ends the list, as a directory removed under us would.
    pub(crate) fn names(&self) -> Vec<OsString> {
        use std::os::unix::ffi::OsStrExt;
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 2048];
        let mut dir = rustix::fs::RawDir::new(&self.0, &mut buf);
        let mut out = Vec::new();
        while let Some(Ok(e)) = dir.next() {
            let name = e.file_name().to_bytes();
            if name != b"." && name != b".." {
                out.push(std::ffi::OsStr::from_bytes(name).to_os_string());
            }
        }
        out
    }

    /// [`SysDir::names`] as text, a name that is not UTF-8 with U+FFFD in its place: what
    /// the devices and interfaces are called in reports and settings.
    pub(crate) fn text_names(&self) -> Vec<String> {
        self.names().iter().map(|n| n.to_string_lossy().into_owned()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_trim_reads_whole_files_of_any_size() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        std::fs::write(p("state"), "4: ACTIVE\n").unwrap();
        assert_eq!(read_trim(&p("state")).as_deref(), Some("4: ACTIVE"));
        std::fs::write(p("empty"), "").unwrap();
        assert_eq!(read_trim(&p("empty")).as_deref(), Some(""));
        // Exactly one buffer, and more than one: read whole, not cut at the buffer.
        for len in [4096, 4097, 10_000] {
            let body = "x".repeat(len);
            std::fs::write(p("big"), format!(" {body}\n")).unwrap();
            assert_eq!(read_trim(&p("big")).as_deref(), Some(body.as_str()), "{len} bytes");
        }
        std::fs::write(p("bin"), b"\xff\xfe").unwrap();
        assert_eq!(read_trim(&p("bin")), None);
        assert_eq!(read_trim(&p("missing")), None);
        assert_eq!(read_trim(dir.path()), None, "a directory");
    }
}
