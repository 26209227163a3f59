//! What a hostile base image or repository may cost a build, and the one reader that bounds
//! decompression.
//!
//! Base layers, `Packages` indices and `primary.xml` are compressed input we do not control.
//! An input past a limit is refused with [`Exceeded`], whose message names the limit (and the
//! flag that raises it, where there is one), before anything is written:
//!
//! | input | limit | default | flag |
//! | --- | --- | --- | --- |
//! | a layer, a `Packages.xz`/`.gz`, `primary.xml.*` | decompressed bytes ≤ ratio × compressed bytes read + [`GRACE`] | 100 | `--max-inflation` (0: none) |
//! | the base's layers | entries (files, directories, links, whiteouts) of the layers read, in all | 2 000 000 | `--max-entries` |
//! | the base's manifest | layers | 125 | `--max-layers` |
//! | a path in the base | symbolic links followed | 40 (the kernel's) | none |
//! | a registry blob | bytes received ≤ the size its descriptor gives | — | none |
//! | a registry manifest or index (by tag or digest) | bytes received | 8 MiB ([`MAX_JSON`]) | none |
//! | base files a build keeps in memory (os-release, dpkg status, sources, keys) | [`crate::image::rootfs::KEEP_TOTAL`], then read again when asked | 64 MiB | none |
//!
//! Fixed caps elsewhere, far above any genuine file: manifests and configs 8 MiB
//! ([`MAX_JSON`]), `InRelease`/`Release` 32 MiB and a decompressed `Packages`
//! 1 GiB (`packages::apt::repo`), `primary.xml` 1 GiB (`packages::rpm::install`); a package
//! or index body longer than its signed size is cut off there (`http`).
use std::io::{self, BufRead, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Decompressed bytes always allowed before the ratio applies: a small layer holding a
/// zero-filled file (a preallocated database, a sparse `/var/log/lastlog` stored whole)
/// inflates far more than 100× and is still cheap to read. A genuine layer with gigabytes of
/// zeros (`useradd` without `-l` for a large UID) needs `--max-inflation` raised.
pub const GRACE: u64 = 64 << 20;

/// The kernel's `MAXSYMLINKS` (include/linux/namei.h): a path needing more hops fails with
/// `ELOOP` in the container, so it is refused here too.
pub const MAX_SYMLINKS: usize = 40;

/// Bounds on what reading a base image and its repositories may cost (`--max-*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `--max-layers`: layers in a base image's manifest. Docker's layer store refuses images
    /// of more than 125 (moby `layer/layer_store.go`, `maxLayerDepth`, "to account for the 127
    /// max in some graphdrivers"), so a base with more cannot run there anyway.
    pub layers: usize,
    /// `--max-inflation`: how many times its compressed size a layer, `Packages` index or
    /// `primary.xml` may decompress to (after [`GRACE`]); 0 lifts the limit. 100, as Apache
    /// POI's zip-bomb check (`ZipSecureFile`, minimum inflate ratio 0.01): gzip'd layers and
    /// indices inflate 3–10×, gzip itself at most about 1032×, zstd far more.
    pub inflation: u64,
    /// `--max-entries`: tar entries of the base's layers read, in all. A snapshot of each
    /// layer's entries is held for the build: about 170 bytes of memory each.
    pub entries: u64,
}

/// Manifests and configs larger than this are refused: they are JSON of a few KiB.
pub const MAX_JSON: u64 = 8 << 20;

pub const DEFAULT_LAYERS: usize = 125;
pub const DEFAULT_INFLATION: u64 = 100;
pub const DEFAULT_ENTRIES: u64 = 2_000_000;

impl Default for Limits {
    fn default() -> Self {
        Limits { layers: DEFAULT_LAYERS, inflation: DEFAULT_INFLATION, entries: DEFAULT_ENTRIES }
    }
}

/// A limit a hostile (or unusually large) input reached. Each message is a predicate of the
/// thing named before it ([`crate::Error::Limit`]), naming the limit and how to raise it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Exceeded {
    #[error("inflates more than {ratio}× ({out} bytes decompressed from {input} compressed): a decompression bomb? (limit --max-inflation {ratio}; raise it, or 0 for none, if the input is genuine)")]
    Inflation { ratio: u64, out: u64, input: u64 },
    #[error("decompresses to more than {max} bytes")]
    Size { max: u64 },
    #[error("has more than {limit} tar entries in the layers read (limit --max-entries {limit}; raise it if the image is genuine)")]
    Entries { limit: u64 },
    #[error("lists {count} layers (limit --max-layers {limit}; Docker runs images of at most 125; raise it if the image is genuine)")]
    Layers { count: usize, limit: usize },
    #[error("takes more than {MAX_SYMLINKS} symbolic links to resolve (a symlink loop; the kernel fails such a path with ELOOP)")]
    Symlinks,
    #[error("sent more of blob {digest} than the {size} bytes its descriptor gives (an endless body?)")]
    BlobSize { digest: String, size: u64 },
    #[error("sent more than {limit} bytes of manifest for {reference}, the most a manifest or index may have (an endless body?)")]
    Manifest { reference: String, limit: u64 },
}

/// The [`Exceeded`] an I/O error carries, if it carries one.
pub fn exceeded(e: &io::Error) -> Option<&Exceeded> {
    e.get_ref()?.downcast_ref::<Exceeded>()
}

/// Counts the bytes a decoder takes from its input: by `read`, or by `consume` for decoders
/// that read through [`BufRead`].
pub struct Counting<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counting<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }
    fn consume(&mut self, amt: usize) {
        self.count.fetch_add(amt as u64, Ordering::Relaxed);
        self.inner.consume(amt);
    }
}

/// A decompressed stream that fails with [`Exceeded::Inflation`] once it has given more than
/// `ratio` × the compressed bytes read so far + [`GRACE`], and with [`Exceeded::Size`] past
/// `max` bytes (checked as the data comes, so a bomb costs at most about that much work).
pub struct Inflated<R> {
    inner: R,
    input: Arc<AtomicU64>,
    out: u64,
    ratio: u64,
    max: u64,
}

impl<R: Read> Read for Inflated<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // One byte past `max` at most, so that exactly `max` passes.
        let room = usize::try_from(self.max.saturating_sub(self.out).saturating_add(1)).unwrap_or(usize::MAX);
        let want = buf.len().min(room);
        let n = self.inner.read(&mut buf[..want])?;
        self.out += n as u64;
        if self.out > self.max {
            return Err(io::Error::other(Exceeded::Size { max: self.max }));
        }
        if self.ratio > 0 && self.out > GRACE {
            let input = self.input.load(Ordering::Relaxed);
            if self.out - GRACE > input.saturating_mul(self.ratio) {
                return Err(io::Error::other(Exceeded::Inflation { ratio: self.ratio, out: self.out, input }));
            }
        }
        Ok(n)
    }
}

/// `decoder` run over `input`, bounded as [`Inflated`] says (`ratio` 0: no ratio limit; `max`
/// `u64::MAX`: no size limit). The one place decompressed input is bounded: base layers,
/// `Packages` indices and rpm repository metadata all go through it.
pub fn inflate<'a, R: 'a>(input: R, ratio: u64, max: u64, decoder: impl FnOnce(Counting<R>) -> io::Result<Box<dyn Read + 'a>>) -> io::Result<Inflated<Box<dyn Read + 'a>>> {
    let count = Arc::new(AtomicU64::new(0));
    let inner = decoder(Counting { inner: input, count: count.clone() })?;
    Ok(Inflated { inner, input: count, out: 0, ratio, max })
}

/// Entries left to the layers of one image ([`Limits::entries`]), shared by their snapshots.
#[derive(Debug)]
pub struct EntryBudget {
    limit: u64,
    left: AtomicU64,
}

impl EntryBudget {
    pub fn new(limit: u64) -> Self {
        EntryBudget { limit, left: AtomicU64::new(limit) }
    }

    /// Takes `n` entries; [`Exceeded::Entries`] when fewer are left.
    pub fn take(&self, n: u64) -> Result<(), Exceeded> {
        self.left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(n))
            .map(|_| ())
            .map_err(|_| Exceeded::Entries { limit: self.limit })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn read_all(packed: &[u8], ratio: u64, max: u64) -> io::Result<u64> {
        let mut r = inflate(packed, ratio, max, |c| Ok(Box::new(flate2::read::MultiGzDecoder::new(c))))?;
        io::copy(&mut r, &mut io::sink())
    }

    #[test]
    fn bombs_stop_early_and_genuine_data_passes() {
        // 256 MiB of zeros: about 250 KiB of gzip, 1000× and more.
        let bomb = gzip(&vec![0u8; 256 << 20]);
        let e = read_all(&bomb, 100, u64::MAX).unwrap_err();
        let Some(Exceeded::Inflation { ratio: 100, out, input }) = exceeded(&e).cloned() else { panic!("{e}") };
        // Stopped as soon as past the grace and 100× what was read: not at the bomb's end.
        assert!(out > GRACE + 100 * input && out < GRACE + 100 * input + (1 << 20), "{out} {input}");
        assert!(input < bomb.len() as u64 / 2, "{input}");
        assert!(e.to_string().contains("--max-inflation 100"), "{e}");
        // Lifted with 0; a higher ratio lets it through too.
        assert_eq!(read_all(&bomb, 0, u64::MAX).unwrap(), 256 << 20);
        assert_eq!(read_all(&bomb, 5000, u64::MAX).unwrap(), 256 << 20);
        // Under the grace, any ratio passes.
        assert_eq!(read_all(&gzip(&vec![0u8; 1 << 20]), 100, u64::MAX).unwrap(), 1 << 20);
        // The absolute size: exactly the limit passes, a byte more fails.
        let text = gzip(b"0123456789");
        assert_eq!(read_all(&text, 100, 10).unwrap(), 10);
        assert!(matches!(exceeded(&read_all(&text, 100, 9).unwrap_err()), Some(Exceeded::Size { max: 9 })));
    }

    #[test]
    fn the_entry_budget_is_shared() {
        let b = EntryBudget::new(10);
        b.take(6).unwrap();
        b.take(4).unwrap();
        assert_eq!(b.take(1), Err(Exceeded::Entries { limit: 10 }));
    }
}
