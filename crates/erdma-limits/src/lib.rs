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
//! | one tar entry's headers (GNU long name and link, PAX, sparse map), in a layer, a `docker save` archive or a `.deb` | bytes read | 4 MiB ([`MAX_TAR_HEADERS`]) | none |
//! | a `.deb`'s `data.tar`, an rpm's payload | as a layer: ratio × compressed bytes read + [`GRACE`] | 100 | `--max-inflation` |
//! | a token service's reply; a registry's error answer | bytes read (`erdma_http::capped_body`) | 1 MiB; 64 KiB | none |
//! | base files a build keeps in memory (os-release, dpkg status, sources, keys) | `KEEP_TOTAL` (erdma-build's image rootfs), then read again when asked | 64 MiB | none |
//!
//! Fixed caps elsewhere, far above any genuine file: manifests and configs 8 MiB
//! ([`MAX_JSON`]), `InRelease`/`Release` 32 MiB and a decompressed `Packages`
//! 1 GiB (`erdma_deb::repo`), `primary.xml` 1 GiB (erdma-build's `packages::rpm::install`); a package
//! or index body longer than its signed size is cut off there (`http`).
#![forbid(unsafe_code)]

pub mod checked;
pub mod kept;
pub mod paths;
use std::cell::Cell;
use std::io::{self, BufRead, Read, Seek};
use std::rc::Rc;
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

/// What the headers of one tar entry may take, read into memory before the entry is seen:
/// its GNU long name and long link, its PAX extensions, the header blocks and a GNU sparse
/// map. Go's archive/tar, which Docker, containerd and the registries' tools use, refuses any
/// one special header over 1 MiB since CVE-2022-2879 (`maxSpecialFileSize`); three of them and
/// their blocks fit in this.
pub const MAX_TAR_HEADERS: u64 = 4 << 20;

pub const DEFAULT_LAYERS: usize = 125;
pub const DEFAULT_INFLATION: u64 = 100;
pub const DEFAULT_ENTRIES: u64 = 2_000_000;

impl Default for Limits {
    fn default() -> Self {
        Limits { layers: DEFAULT_LAYERS, inflation: DEFAULT_INFLATION, entries: DEFAULT_ENTRIES }
    }
}

/// A limit a hostile (or unusually large) input reached. Each message is a predicate of the
/// thing named before it (erdma-build's `Error::Limit`), naming the limit and how to raise it.
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
    #[error(
        "sent more of blob {digest} than the {size} bytes its descriptor gives (an endless body?)"
    )]
    BlobSize { digest: String, size: u64 },
    #[error("sent more than {limit} bytes of manifest for {reference}, the most a manifest or index may have (an endless body?)")]
    Manifest { reference: String, limit: u64 },
    #[error("has a tar entry whose headers (GNU long name or link, PAX extensions, sparse map) take more than {limit} bytes (Go's archive/tar, which Docker and containerd use, refuses any one of them over 1 MiB)")]
    TarHeaders { limit: u64 },
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
        let room = usize::try_from(self.max.saturating_sub(self.out).saturating_add(1))
            .unwrap_or(usize::MAX);
        let want = buf.len().min(room);
        let n = self.inner.read(&mut buf[..want])?;
        self.out += n as u64;
        if self.out > self.max {
            return Err(io::Error::other(Exceeded::Size { max: self.max }));
        }
        if self.ratio > 0 && self.out > GRACE {
            let input = self.input.load(Ordering::Relaxed);
            if self.out - GRACE > input.saturating_mul(self.ratio) {
                return Err(io::Error::other(Exceeded::Inflation {
                    ratio: self.ratio,
                    out: self.out,
                    input,
                }));
            }
        }
        Ok(n)
    }
}

/// `decoder` run over `input`, bounded as [`Inflated`] says (`ratio` 0: no ratio limit; `max`
/// `u64::MAX`: no size limit). The one place decompressed input is bounded: base layers,
/// `Packages` indices and rpm repository metadata all go through it.
pub fn inflate<'a, R: 'a>(
    input: R,
    ratio: u64,
    max: u64,
    decoder: impl FnOnce(Counting<R>) -> io::Result<Box<dyn Read + 'a>>,
) -> io::Result<Inflated<Box<dyn Read + 'a>>> {
    let count = Arc::new(AtomicU64::new(0));
    let inner = decoder(Counting { inner: input, count: count.clone() })?;
    Ok(Inflated { inner, input: count, out: 0, ratio, max })
}

/// Where a tar walk stands: bytes read so far, and while the tar reader looks for the next
/// entry, the position it may not read past.
#[derive(Debug, Default)]
struct TarState {
    pos: Cell<u64>,
    until: Cell<Option<u64>>,
}

/// The input of a tar walk ([`walk_tar`]): fails with [`Exceeded::TarHeaders`] when the tar
/// reader, looking for the next entry, reads more than [`MAX_TAR_HEADERS`] past where the
/// entry before it ends.
pub struct TarInput<R> {
    inner: R,
    state: Rc<TarState>,
}

impl<R: Read> Read for TarInput<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let pos = self.state.pos.get();
        let want = match self.state.until.get() {
            Some(until) if pos >= until && !buf.is_empty() => {
                return Err(io::Error::other(Exceeded::TarHeaders { limit: MAX_TAR_HEADERS }))
            }
            Some(until) => buf.len().min(usize::try_from(until - pos).unwrap_or(usize::MAX)),
            None => buf.len(),
        };
        let n = self.inner.read(&mut buf[..want])?;
        self.state.pos.set(pos + n as u64);
        Ok(n)
    }
}

impl<R: Seek> Seek for TarInput<R> {
    fn seek(&mut self, to: io::SeekFrom) -> io::Result<u64> {
        let pos = self.inner.seek(to)?;
        self.state.pos.set(pos);
        Ok(pos)
    }
}

/// Calls `f` on each entry of the tar archive `input`, then gives the input back (for the
/// caller to drain or check). The one way a tar archive from outside is read: the `tar` crate
/// reads GNU long names and links and PAX extensions whole into memory, and a GNU sparse
/// map block after block, before it shows an entry; here that costs at most
/// [`MAX_TAR_HEADERS`] per entry, past it the walk fails with [`Exceeded::TarHeaders`]
/// (through `io_err`).
pub fn walk_tar<R: Read, E>(
    input: R,
    io_err: impl Fn(io::Error) -> E,
    f: impl FnMut(&mut tar::Entry<'_, TarInput<R>>) -> Result<(), E>,
) -> Result<R, E> {
    let state = Rc::new(TarState::default());
    let mut archive = tar::Archive::new(TarInput { inner: input, state: state.clone() });
    walk_entries(&state, archive.entries().map_err(&io_err)?, &io_err, f)?;
    Ok(archive.into_inner().inner)
}

/// [`walk_tar`] over a file, skipping the content `f` does not read by seeking.
pub fn walk_tar_seek<R: Read + Seek, E>(
    input: R,
    io_err: impl Fn(io::Error) -> E,
    f: impl FnMut(&mut tar::Entry<'_, TarInput<R>>) -> Result<(), E>,
) -> Result<R, E> {
    let state = Rc::new(TarState::default());
    let mut archive = tar::Archive::new(TarInput { inner: input, state: state.clone() });
    walk_entries(&state, archive.entries_with_seek().map_err(&io_err)?, &io_err, f)?;
    Ok(archive.into_inner().inner)
}

fn walk_entries<R: Read, E>(
    state: &TarState,
    mut entries: tar::Entries<'_, TarInput<R>>,
    io_err: &impl Fn(io::Error) -> E,
    mut f: impl FnMut(&mut tar::Entry<'_, TarInput<R>>) -> Result<(), E>,
) -> Result<(), E> {
    // Where the entry before ends: the tar reader skips what `f` left of it, then reads the
    // next entry's headers.
    let mut end = 0u64;
    loop {
        state.until.set(Some(end.max(state.pos.get()).saturating_add(MAX_TAR_HEADERS)));
        let next = entries.next();
        state.until.set(None);
        let Some(entry) = next else { return Ok(()) };
        let mut entry = entry.map_err(io_err)?;
        // The content starts here: the tar reader has read the headers (a sparse map's
        // extension blocks included) and nothing of the content.
        let start = state.pos.get();
        // The content as stored, as the tar reader counts it: a PAX `size` over the header's;
        // a GNU sparse entry's `size()` is the file's, its stored data is the header's (or
        // PAX's) size.
        let stored = match entry.header().entry_type().is_gnu_sparse() {
            true => match pax_size(&mut entry) {
                Some(size) => size,
                None => entry.header().entry_size().map_err(io_err)?,
            },
            false => entry.size(),
        };
        end = start.saturating_add(stored.saturating_add(511) & !511);
        f(&mut entry)?;
    }
}

/// The PAX `size` record of `entry`, as the tar reader reads it (a number, else none).
fn pax_size<R: Read>(entry: &mut tar::Entry<'_, R>) -> Option<u64> {
    let records = entry.pax_extensions().ok()??;
    records.flatten().find(|r| r.key_bytes() == b"size").and_then(|r| r.value().ok()?.parse().ok())
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
        let mut r =
            inflate(packed, ratio, max, |c| Ok(Box::new(flate2::read::MultiGzDecoder::new(c))))?;
        io::copy(&mut r, &mut io::sink())
    }

    #[test]
    fn bombs_stop_early_and_genuine_data_passes() {
        // 256 MiB of zeros: about 250 KiB of gzip, 1000× and more.
        let bomb = gzip(&vec![0u8; 256 << 20]);
        let e = read_all(&bomb, 100, u64::MAX).unwrap_err();
        let Some(Exceeded::Inflation { ratio: 100, out, input }) = exceeded(&e).cloned() else {
            panic!("{e}")
        };
        // Stopped as soon as past the grace and 100× what was read: not at the bomb's end.
        assert!(
            out > GRACE + 100 * input && out < GRACE + 100 * input + (1 << 20),
            "{out} {input}"
        );
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
        assert!(matches!(
            exceeded(&read_all(&text, 100, 9).unwrap_err()),
            Some(Exceeded::Size { max: 9 })
        ));
    }

    /// Counts what the walk reads, to show where it stopped.
    struct Meter<R> {
        inner: R,
        read: Rc<Cell<u64>>,
    }
    impl<R: Read> Read for Meter<R> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.inner.read(buf)?;
            self.read.set(self.read.get() + n as u64);
            Ok(n)
        }
    }

    fn names(tar: &[u8]) -> Result<Vec<(String, u64)>, io::Error> {
        let mut out = Vec::new();
        walk_tar(
            tar,
            |e| e,
            |e| {
                out.push((String::from_utf8_lossy(&e.path_bytes()).into_owned(), e.size()));
                Ok(())
            },
        )?;
        Ok(out)
    }

    /// A raw header block: name, type, size (octal), checksum.
    fn block(name: &str, kind: u8, size: u64) -> Vec<u8> {
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_entry_type(tar::EntryType::new(kind));
        h.set_mode(0o644);
        h.set_size(size);
        h.set_cksum();
        h.as_bytes().to_vec()
    }

    /// One PAX record: `LEN key=value\n`, LEN counting itself.
    fn pax_record(key: &str, value: &str) -> String {
        let rest = key.len() + value.len() + 3;
        let mut len = rest + 1;
        while len != rest + len.to_string().len() {
            len = rest + len.to_string().len();
        }
        format!("{len} {key}={value}\n")
    }

    fn padded(data: &[u8]) -> Vec<u8> {
        let mut v = data.to_vec();
        v.resize(data.len().div_ceil(512) * 512, 0);
        v
    }

    /// Appends a GNU long name of 64 MiB, a file under it, and the end of the archive.
    fn long_name_then_file(tar: &mut Vec<u8>) {
        tar.extend(block("././@LongLink", b'L', 64 << 20));
        tar.extend(vec![b'a'; 64 << 20]);
        tar.extend(block("x", b'0', 0));
        tar.extend([0u8; 1024]);
    }

    /// Walks `tar`, asserting it is refused for its headers about where the limit says.
    #[track_caller]
    fn refused_early(tar: &[u8]) -> io::Error {
        let read = Rc::new(Cell::new(0));
        let e = walk_tar(Meter { inner: tar, read: read.clone() }, |e| e, |_| Ok(()))
            .map(|_| ())
            .unwrap_err();
        assert_eq!(exceeded(&e), Some(&Exceeded::TarHeaders { limit: MAX_TAR_HEADERS }), "{e}");
        assert!(read.get() <= MAX_TAR_HEADERS + (64 << 10), "{}", read.get());
        e
    }

    #[test]
    fn a_huge_long_name_is_refused_after_the_limit_not_read_whole() {
        // A GNU long name of 64 MiB (the tar crate would hold it all), then a file.
        let mut tar = Vec::new();
        long_name_then_file(&mut tar);
        let e = refused_early(&tar);
        assert!(e.to_string().contains("more than 4194304 bytes"), "{e}");
        // The same for PAX extensions.
        let mut tar = block("pax", b'x', 8 << 20);
        tar.extend(vec![b'1'; 8 << 20]);
        tar.extend(block("x", b'0', 0));
        tar.extend([0u8; 1024]);
        assert!(matches!(exceeded(&names(&tar).unwrap_err()), Some(Exceeded::TarHeaders { .. })));
    }

    #[test]
    fn genuine_long_headers_and_large_contents_pass() {
        // A 900 KiB long name, a 900 KiB long link and 900 KiB of PAX records on one entry
        // (each under Go's 1 MiB), after a 20 MiB file nobody reads: all within the limit.
        let mut tar = block("big", b'0', 20 << 20);
        tar.extend(vec![7u8; 20 << 20]);
        let long = "d/".repeat(900 << 9);
        tar.extend(block("././@LongLink", b'L', long.len() as u64));
        tar.extend(padded(long.as_bytes()));
        tar.extend(block("././@LongLink", b'K', long.len() as u64));
        tar.extend(padded(long.as_bytes()));
        let value = "v".repeat(900 << 10);
        let record = pax_record("SCHILY.xattr.user.x", &value);
        tar.extend(block("pax", b'x', record.len() as u64));
        tar.extend(padded(record.as_bytes()));
        tar.extend(block("short", b'1', 0));
        tar.extend([0u8; 1024]);
        let got = names(&tar).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], ("big".to_string(), 20 << 20));
        assert!(got[1].0 == long, "the second name is {} bytes", got[1].0.len());
    }

    #[test]
    fn a_pax_size_moves_the_next_header() {
        // Go writes a file's size that does not fit the octal field as a PAX `size` record and
        // leaves the field 0: the walk must expect the next header after the PAX size.
        let content = vec![3u8; 6 << 20];
        let record = pax_record("size", &content.len().to_string());
        let mut tar = block("pax", b'x', record.len() as u64);
        tar.extend(padded(record.as_bytes()));
        tar.extend(block("big", b'0', 0));
        tar.extend(padded(&content));
        tar.extend(block("after", b'0', 0));
        tar.extend([0u8; 1024]);
        assert_eq!(
            names(&tar).unwrap(),
            vec![("big".to_string(), 6 << 20), ("after".to_string(), 0)]
        );
    }

    #[test]
    fn a_sparse_header_cannot_move_the_limit_away() {
        // A PAX `size=0`, then a GNU sparse entry whose header says 8 GiB and whose map is
        // empty (real size 0): the tar reader takes the PAX size, so the next header follows at
        // once; a walk that believed the header would let the 64 MiB long name through.
        let record = pax_record("size", "0");
        let mut tar = block("pax", b'x', record.len() as u64);
        tar.extend(padded(record.as_bytes()));
        let mut sparse = tar::Header::new_gnu();
        sparse.as_old_mut().name[..6].copy_from_slice(b"sparse");
        sparse.set_entry_type(tar::EntryType::GNUSparse);
        sparse.set_mode(0o644);
        sparse.set_size(8 << 30);
        sparse.as_gnu_mut().unwrap().realsize.copy_from_slice(b"00000000000\0");
        sparse.set_cksum();
        tar.extend(sparse.as_bytes());
        long_name_then_file(&mut tar);
        refused_early(&tar);
    }

    #[test]
    fn gnu_tar_sparse_files_with_extended_maps_pass() {
        // GNU tar's own sparse format ('S'), with more data segments than the header holds,
        // so the map continues in extension blocks; then a file after it.
        let dir = tempfile::tempdir().unwrap();
        let sparse = dir.path().join("sparse");
        let mut f = std::fs::File::create(&sparse).unwrap();
        for i in 0..200u64 {
            f.seek(io::SeekFrom::Start(i * (1 << 20))).unwrap();
            f.write_all(&[1u8; 4096]).unwrap();
        }
        f.set_len(300 << 20).unwrap();
        std::fs::write(dir.path().join("after"), b"x").unwrap();
        let out = std::process::Command::new("tar")
            .args(["--sparse", "--format=gnu", "-cf", "-", "sparse", "after"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut kinds = Vec::new();
        walk_tar(
            out.stdout.as_slice(),
            |e| e,
            |e| {
                kinds.push((
                    String::from_utf8_lossy(&e.path_bytes()).into_owned(),
                    e.header().entry_type().as_byte(),
                ));
                // Read part of the sparse file only: the walk skips the rest.
                if e.header().entry_type().is_gnu_sparse() {
                    let mut head = [0u8; 4096];
                    e.read_exact(&mut head)?;
                    assert_eq!(head, [1u8; 4096]);
                }
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(kinds, vec![("sparse".to_string(), b'S'), ("after".to_string(), b'0')]);
    }

    #[test]
    fn the_entry_budget_is_shared() {
        let b = EntryBudget::new(10);
        b.take(6).unwrap();
        b.take(4).unwrap();
        assert_eq!(b.take(1), Err(Exceeded::Entries { limit: 10 }));
    }
}
