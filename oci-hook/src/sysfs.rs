//! Reading sysfs: one attribute's value as the kernel hands it over.
use std::path::Path;

/// A sysfs attribute's value, trimmed; `None` when it cannot be read or is not UTF-8.
///
/// An attribute is at most a page, which sysfs hands over whole in one `read`. So: one buffer,
/// no `fstat` for a size hint, and no second `read` to see the end when the first one left
/// room (a regular file, as a fixture's attributes are, returns less than asked only at its
/// end too): three system calls, not six as `std::fs::read_to_string` makes, for each of the
/// twenty-odd attributes an asking `create` reads.
pub(crate) fn read_trim(path: &Path) -> Option<String> {
    use rustix::fs::{open, Mode, OFlags};
    let fd = open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let mut buf = [0u8; 4096];
    let len = loop {
        match rustix::io::read(&fd, &mut buf) {
            Ok(n) if n < buf.len() => break n,
            // Not a sysfs attribute after all (a fixture's, or a file put there).
            Ok(_) => return std::fs::read_to_string(path).ok().map(|s| s.trim().to_string()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return None,
        }
    };
    std::str::from_utf8(&buf[..len]).ok().map(|s| s.trim().to_string())
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
