//! Digests, hashing adapters and compression sniffing shared by every transport.
use std::io::{self, Read, Write};

use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};

/// Checks that `digest` is `sha256:` followed by 64 lowercase hex digits and returns the hex.
///
/// Digests from manifests name files in layouts and archives, so an unchecked one
/// (`sha256:../../etc/passwd`) would be a path traversal.
pub fn digest_hex(digest: &str) -> Result<&str> {
    let hex = digest
        .strip_prefix("sha256:")
        .ok_or_else(|| Error::Unsupported(format!("unsupported digest `{digest}`: only sha256 is supported")))?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(Error::Unsupported(format!("malformed digest `{digest}`")));
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
    hasher: Sha256,
    expected: String,
    done: bool,
}

impl<R: Read> VerifyingReader<R> {
    pub fn new(inner: R, expected: &str) -> Self {
        Self { inner, hasher: Sha256::new(), expected: expected.to_string(), done: false }
    }
}

impl<R: Read> Read for VerifyingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() && !self.done {
            self.done = true;
            let actual = format!("sha256:{}", hex::encode(self.hasher.clone().finalize()));
            if actual != self.expected {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    Error::DigestMismatch { expected: self.expected.clone(), actual },
                ));
            }
        }
        self.hasher.update(&buf[..n]);
        Ok(n)
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
/// than `max_inflation` × the compressed bytes read ([`crate::limits::inflate`]; 0: no limit).
pub fn decompressed<'a, R: io::BufRead + 'a>(mut r: R, max_inflation: u64) -> io::Result<Box<dyn Read + 'a>> {
    let head = r.fill_buf()?;
    Ok(match Compression::sniff(head) {
        Compression::Gzip => Box::new(crate::limits::inflate(r, max_inflation, u64::MAX, |c| Ok(Box::new(flate2::bufread::MultiGzDecoder::new(c))))?),
        Compression::Zstd => Box::new(crate::limits::inflate(r, max_inflation, u64::MAX, |c| Ok(Box::new(zstd::stream::read::Decoder::with_buffer(c)?)))?),
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
                tracing::warn!("{operation} {digest} from {registry} failed ({source}); starting it again");
            }
            other => return other,
        }
    }
    unreachable!("the loop returns")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_validation_blocks_traversal() {
        assert!(digest_hex(&format!("sha256:{}", "0".repeat(64))).is_ok());
        assert!(digest_hex("sha256:../../etc/passwd").is_err());
        assert!(digest_hex(&format!("sha256:{}", "A".repeat(64))).is_err());
        assert!(digest_hex(&format!("sha512:{}", "0".repeat(128))).is_err());
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
}
