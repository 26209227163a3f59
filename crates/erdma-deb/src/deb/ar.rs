//! The common `ar` format (ar(5)) as `.deb` files use it: no GNU or BSD long names, names of
//! at most 15 bytes. The file is hostile: every header field and size is checked against the
//! file before it is used.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use super::DebError;

/// One member of the `ar` archive: its name and where its content lies in the file.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub(crate) name: String,
    pub(crate) offset: u64,
    pub(crate) size: u64,
}

/// The common `ar` format: `!<arch>\n`, then for each member a 60-byte header (name 16,
/// mtime 12, uid 6, gid 6, mode 8, size 10, magic "`\n") and the content, padded to an even
/// offset with `\n`.
pub(crate) struct ArReader<'p> {
    pub(crate) path: &'p Path,
    file: File,
    len: u64,
    next: u64,
}

pub(crate) const AR_MAGIC: &[u8] = b"!<arch>\n";
const AR_HEADER_LEN: u64 = 60;

impl<'p> ArReader<'p> {
    pub(crate) fn open(path: &'p Path) -> Result<Self, DebError> {
        let io_error =
            |operation| move |source| DebError::Io { operation, path: path.to_owned(), source };
        let mut file = File::open(path).map_err(io_error("opening"))?;
        let len = file.metadata().map_err(io_error("reading metadata of"))?.len();
        let mut magic = [0u8; AR_MAGIC.len()];
        if read_up_to(&mut file, &mut magic).map_err(io_error("reading"))? != magic.len()
            || magic != AR_MAGIC
        {
            return Err(DebError::Malformed {
                path: path.to_owned(),
                reason: "not an ar archive (no `!<arch>` header)".to_owned(),
            });
        }
        Ok(ArReader { path, file, len, next: AR_MAGIC.len() as u64 })
    }

    pub(crate) fn malformed(&self, reason: String) -> DebError {
        DebError::Malformed { path: self.path.to_owned(), reason }
    }

    /// The next member's header, or `None` at the end of the file.
    pub(crate) fn next_member(&mut self) -> Result<Option<Member>, DebError> {
        if self.next >= self.len {
            // `>`: the padding byte after an odd-sized last member may be missing.
            return Ok(None);
        }
        let offset = self.next + AR_HEADER_LEN;
        if offset > self.len {
            return Err(self.malformed(format!("truncated member header at offset {}", self.next)));
        }
        let mut header = [0u8; AR_HEADER_LEN as usize];
        self.file
            .seek(SeekFrom::Start(self.next))
            .and_then(|_| self.file.read_exact(&mut header))
            .map_err(|source| DebError::Io {
                operation: "reading",
                path: self.path.to_owned(),
                source,
            })?;
        if &header[58..60] != b"`\n" {
            return Err(self
                .malformed(format!("bad member header at offset {} (no end marker)", self.next)));
        }
        // deb(5): names may carry the trailing `/` GNU ar writes, and are at most 15 bytes.
        let name_field = trim_spaces(&header[..16]);
        let name_field = name_field.strip_suffix(b"/").unwrap_or(name_field);
        let name = std::str::from_utf8(name_field)
            .ok()
            .filter(|name| !name.is_empty() && name.bytes().all(|c| c.is_ascii_graphic()))
            .ok_or_else(|| {
                self.malformed(format!(
                    "bad member name `{}` at offset {}",
                    name_field.escape_ascii(),
                    self.next
                ))
            })?
            .to_owned();
        let size_field = trim_spaces(&header[48..58]);
        if size_field.is_empty() || !size_field.iter().all(u8::is_ascii_digit) {
            return Err(self.malformed(format!(
                "bad size `{}` for member `{name}`",
                header[48..58].escape_ascii()
            )));
        }
        // At most 10 digits, so this neither fails nor overflows below.
        let size: u64 =
            std::str::from_utf8(size_field).ok().and_then(|s| s.parse().ok()).unwrap_or(u64::MAX);
        if size > self.len - offset {
            return Err(self.malformed(format!(
                "member `{name}` runs past the end of the file ({size} bytes, {} left)",
                self.len - offset
            )));
        }
        self.next = offset + size + (size & 1);
        Ok(Some(Member { name, offset, size }))
    }

    /// Like [`Self::next_member`], skipping the `_`-prefixed members deb(5) reserves for
    /// additions that older readers must ignore.
    pub(crate) fn next_required_member(&mut self) -> Result<Option<Member>, DebError> {
        while let Some(member) = self.next_member()? {
            if !member.name.starts_with('_') {
                return Ok(Some(member));
            }
        }
        Ok(None)
    }

    pub(crate) fn content(&mut self, member: &Member) -> Result<io::Take<&mut File>, DebError> {
        self.file.seek(SeekFrom::Start(member.offset)).map_err(|source| DebError::Io {
            operation: "seeking in",
            path: self.path.to_owned(),
            source,
        })?;
        Ok((&mut self.file).take(member.size))
    }
}

fn trim_spaces(field: &[u8]) -> &[u8] {
    let end = field.iter().rposition(|&c| c != b' ').map_or(0, |i| i + 1);
    &field[..end]
}

/// Reads until `buf` is full or the reader ends; returns how much was read.
pub(crate) fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(name: &str, size: usize) -> Vec<u8> {
        let h = format!("{name:<16}{:<12}{:<6}{:<6}{:<8}{size:<10}`\n", 0, 0, 0, 100644);
        assert_eq!(h.len(), 60);
        h.into_bytes()
    }

    fn archive(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = b"!<arch>\n".to_vec();
        for (name, content) in members {
            out.extend(header(name, content.len()));
            out.extend(*content);
            if content.len() % 2 == 1 {
                out.push(b'\n');
            }
        }
        out
    }

    fn members(bytes: &[u8]) -> Result<Vec<(String, Vec<u8>)>, DebError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.ar");
        std::fs::write(&path, bytes).unwrap();
        let mut ar = ArReader::open(&path)?;
        let mut out = Vec::new();
        while let Some(m) = ar.next_required_member()? {
            let mut content = Vec::new();
            ar.content(&m)?.read_to_end(&mut content).unwrap();
            out.push((m.name, content));
        }
        Ok(out)
    }

    #[test]
    fn members_padding_gnu_names_and_reserved_members() {
        let bytes = archive(&[("debian-binary/", b"2.0\n"), ("_extra", b"x"), ("odd", b"abc")]);
        let got = members(&bytes).unwrap();
        assert_eq!(
            got,
            vec![("debian-binary".into(), b"2.0\n".to_vec()), ("odd".into(), b"abc".to_vec())]
        );
        // The padding byte after an odd-sized last member may be missing.
        assert_eq!(members(&bytes[..bytes.len() - 1]).unwrap().len(), 2);
    }

    #[test]
    fn hostile_headers_are_refused() {
        let reason = |bytes: &[u8]| match members(bytes) {
            Err(DebError::Malformed { reason, .. }) => reason,
            other => panic!("expected Malformed, got {other:?}"),
        };
        assert!(reason(b"<arch>\n").contains("not an ar archive"));
        let good = archive(&[("a", b"12")]);
        assert!(reason(&good[..good.len() - 30]).contains("truncated member header"));
        let mut long = good.clone();
        long[8 + 48..8 + 58].copy_from_slice(b"9999      ");
        assert!(reason(&long).contains("runs past the end"));
        let mut bad_size = good.clone();
        bad_size[8 + 48] = b'-';
        assert!(reason(&bad_size).contains("bad size"));
        let mut no_end = good;
        no_end[8 + 58] = b'x';
        assert!(reason(&no_end).contains("no end marker"));
    }
}
