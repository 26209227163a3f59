//! The gzip writer of layers: bytes that depend only on the input, compressed on every core
//! once a layer is large, or at any size where the caller asks ([`Split`]).
//!
//! With [`Split::Large`], a layer whose tar is at most [`SINGLE_UP_TO`] bytes (or of unknown
//! length) is one gzip member, one deflate stream through flate2's `GzBuilder` (zlib-rs, level
//! 6, mtime 0, OS "unknown"), fed as it is written, exactly as before this writer existed: a
//! layer that builds write alike keeps the digest earlier releases gave it. A larger one
//! (OpenMPI's 80 MB, NCCL's 400 MB) is cut into blocks of [`BLOCK`] bytes. With
//! [`Split::Always`], for a layer that no two builds write alike (an rpm database records each
//! package's install time), every layer is cut into blocks of [`SMALL_BLOCK`] bytes, so that a
//! 3 MB layer, too, is compressed on every core.
//!
//! Each block is a gzip member of its own, compressed by libdeflate at level 6 on a core of its
//! own: the same header as the single stream's, the block's deflate, its CRC-32 and length. A
//! gzip file is a series of members and a reader gives back their contents one after the
//! other (RFC 1952, "GZIP file format specification version 4.3", 2.2): Go's `compress/gzip`
//! (Docker, containerd, Podman's pgzip), `gzip -d`, `unpigz` and Python's `gzip` all read every
//! member, and eStargz layers are made the same way. libdeflate compresses a block in about
//! three quarters of zlib's time and to about 5 % fewer bytes at the same level, but writes
//! whole streams only (no sync flush, no preset dictionary), which is why each block is a
//! member and starts with an empty window. The blocks are fixed, so the bytes are the same
//! whatever the number of cores: only the time differs. For the same reason a block's member
//! depends only on its input, so a [`BlockMemo`] can keep it for a later layer holding the
//! same bytes there.
use std::collections::VecDeque;
use std::io::{self, Read as _, Write};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use flate2::Compression;

/// Layers whose tar is up to this long are compressed as one stream.
pub const SINGLE_UP_TO: u64 = 16 << 20;
/// The input of one block of a large layer.
pub const BLOCK: usize = 1 << 20;
/// The input of one block with [`Split::Always`]: a few blocks per core for a layer of a few
/// megabytes.
pub const SMALL_BLOCK: usize = 256 << 10;

/// When a layer is cut into blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Split {
    /// Beyond [`SINGLE_UP_TO`] only: below it, the bytes earlier releases wrote.
    #[default]
    Large,
    /// At any size, in blocks of [`SMALL_BLOCK`].
    Always,
}

const LEVEL: u32 = 6;

/// The header of every member: ID1 ID2, CM deflate, FLG 0, MTIME 0, XFL 0, OS 255 (unknown), as
/// flate2's `GzBuilder` writes it for the single stream and libdeflate for a block at level 6.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];

/// Writes the gzip of what is written to it; [`LayerGz::finish`] ends it.
pub enum LayerGz<W: Write> {
    Stream(flate2::write::GzEncoder<W>),
    Blocks(Blocks<W>),
}

/// Compressing in blocks: the block being filled and the members in flight (oldest first).
pub struct Blocks<W: Write> {
    out: W,
    buf: Vec<u8>,
    pending: VecDeque<JoinHandle<io::Result<Vec<u8>>>>,
    threads: usize,
    block: usize,
    memo: Option<Arc<BlockMemo>>,
    /// Blocks handed to the compressors so far.
    sent: usize,
}

impl<W: Write> LayerGz<W> {
    /// A writer of the gzip of a tar of `tar_len` bytes (0: unknown) to `out`.
    pub fn new(out: W, tar_len: u64, split: Split) -> io::Result<LayerGz<W>> {
        let block = match split {
            Split::Always => SMALL_BLOCK,
            Split::Large if tar_len > SINGLE_UP_TO => BLOCK,
            Split::Large => {
                let gz = flate2::GzBuilder::new()
                    .mtime(0)
                    .operating_system(255)
                    .write(out, Compression::new(LEVEL));
                return Ok(LayerGz::Stream(gz));
            }
        };
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 16);
        Ok(LayerGz::Blocks(Blocks {
            out,
            buf: Vec::with_capacity(block),
            pending: VecDeque::new(),
            threads,
            block,
            memo: None,
            sent: 0,
        }))
    }

    /// Takes each block's member from `memo` where it holds it, and keeps the others there.
    /// A layer compressed as one stream is compressed as before.
    pub fn with_memo(mut self, memo: Arc<BlockMemo>) -> LayerGz<W> {
        if let LayerGz::Blocks(b) = &mut self {
            b.memo = Some(memo);
        }
        self
    }

    /// Ends the gzip and returns the writer it went to.
    pub fn finish(self) -> io::Result<W> {
        match self {
            LayerGz::Stream(gz) => gz.finish(),
            LayerGz::Blocks(mut b) => {
                // The last block, or the one member of an empty layer.
                if !b.buf.is_empty() || b.sent == 0 {
                    let last = std::mem::take(&mut b.buf);
                    b.send(last)?;
                }
                for p in b.pending {
                    b.out.write_all(&join(p)?)?;
                }
                if let Some(memo) = &b.memo {
                    memo.prune_after(b.sent);
                }
                Ok(b.out)
            }
        }
    }
}

impl<W: Write> Blocks<W> {
    /// Hands one block to a compressor thread, after writing out the oldest ones while as
    /// many are in flight as there are cores.
    fn send(&mut self, block: Vec<u8>) -> io::Result<()> {
        while self.pending.len() >= self.threads {
            let done = join(self.pending.pop_front().expect("in flight"))?;
            self.out.write_all(&done)?;
        }
        let memo = self.memo.clone();
        self.sent += 1;
        self.pending.push_back(std::thread::spawn(move || match memo {
            Some(memo) => memo.member(&block),
            None => member(&block),
        }));
        Ok(())
    }
}

impl<W: Write> Write for LayerGz<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let b = match self {
            LayerGz::Stream(gz) => return gz.write(data),
            LayerGz::Blocks(b) => b,
        };
        let take = (b.block - b.buf.len()).min(data.len());
        b.buf.extend_from_slice(&data[..take]);
        // A member does not depend on whether it is the last: a full block goes at once.
        if b.buf.len() == b.block {
            let full = std::mem::replace(&mut b.buf, Vec::with_capacity(b.block));
            b.send(full)?;
        }
        Ok(take)
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            LayerGz::Stream(gz) => gz.flush(),
            LayerGz::Blocks(_) => Ok(()),
        }
    }
}

fn join(h: JoinHandle<io::Result<Vec<u8>>>) -> io::Result<Vec<u8>> {
    h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// One block as one gzip member: [`HEADER`], libdeflate's deflate at [`LEVEL`], CRC-32 and
/// length.
fn member(block: &[u8]) -> io::Result<Vec<u8>> {
    let level = libdeflater::CompressionLvl::new(LEVEL as i32)
        .map_err(|e| io::Error::other(format!("{e:?}")))?;
    let mut c = libdeflater::Compressor::new(level);
    let mut out = vec![0; c.gzip_compress_bound(block.len())];
    let n = c.gzip_compress(block, &mut out).map_err(|e| io::Error::other(format!("{e:?}")))?;
    out.truncate(n);
    if !out.starts_with(&HEADER) {
        // libdeflate's header for this level is the one the single stream has; another
        // libdeflate that wrote another would change every layer's bytes unseen.
        return Err(io::Error::other("libdeflate wrote an unexpected gzip header"));
    }
    Ok(out)
}

/// Blocks' members kept across builds by what they were made from, for layers that no two
/// builds write alike but that mostly hold the same bytes at the same places: an rpm layer
/// differs from the last build's only where its database records the install time. One file
/// per block, named by the SHA-256 of its input; one taken from here is used only when it is
/// exactly one member, with the header every member has, that gives back exactly its input;
/// anything else is dropped and compressed again. The [`MEMO_BLOCKS`] used last are kept, and
/// never fewer than the layers written through this memo used (a build of several platforms
/// writes a layer for each).
pub struct BlockMemo {
    dir: PathBuf,
    /// How many blocks the prune keeps at least ([`MEMO_BLOCKS`]).
    keep: usize,
    /// Blocks the layers written through this memo have used so far.
    used: std::sync::atomic::AtomicUsize,
}

/// How many blocks a [`BlockMemo`] keeps at least: at [`SMALL_BLOCK`] each, the blocks of 64
/// MB of layers (the eRDMA packages' rpm layer is eleven), about 25 MB of deflate. Larger
/// layers keep all of their own (OpenMPI's with openssh-server, 90 MB of tar, is 350), so that
/// the next build of them finds every block it did not change. Each build of erdma-build keeps
/// its own ([`BlockMemo::new`]).
pub const MEMO_BLOCKS: usize = 256;

impl BlockMemo {
    /// A memo in `dir` (made when first written; it may be removed at any time). `dir` must
    /// belong to one compressor: another may deflate the same input to other bytes.
    pub fn new(dir: PathBuf) -> BlockMemo {
        BlockMemo { dir, keep: MEMO_BLOCKS, used: Default::default() }
    }

    /// The name of the member made from `block`.
    fn name(block: &[u8]) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        // What the member is: not a name a block of the earlier format (raw deflate primed
        // with a window) could have.
        h.update(b"gzip member, libdeflate\0");
        h.update([LEVEL as u8]);
        h.update(block);
        hex::encode(h.finalize())
    }

    /// `block`'s member ([`member`]): kept, or made and kept.
    fn member(&self, block: &[u8]) -> io::Result<Vec<u8>> {
        let path = self.dir.join(Self::name(block));
        // The user's own file only, and no larger than a block's member can be (stored blocks
        // of 64 KiB, five bytes each, header and trailer).
        let most = block.len() as u64 + block.len() as u64 / 4096 * 5 + 64;
        if let Ok(mut f) = erdma_limits::kept::open(&path, most) {
            let mut kept = Vec::new();
            if f.read_to_end(&mut kept).is_ok() && is_member_of(&kept, block) {
                // Used last now: the prune keeps it.
                let _ = f.set_modified(std::time::SystemTime::now());
                return Ok(kept);
            }
            tracing::warn!("dropping kept gzip block {}: not what it stands for", path.display());
            let _ = std::fs::remove_file(&path);
        }
        let made = member(block)?;
        // Best effort, written whole: a memo that cannot be written only costs time.
        let _ = erdma_limits::kept::write(&path, |f| f.write_all(&made));
        Ok(made)
    }

    /// Counts the `sent` blocks of a layer just written, then removes all but the
    /// [`MEMO_BLOCKS`] used last, or all the blocks the layers written through this memo used
    /// where they are more (they are the newest: each was written or touched by them).
    fn prune_after(&self, sent: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let used = self.used.fetch_add(sent, Relaxed) + sent;
        // A block's name is its SHA-256 in hex: not a block being written (a temporary file).
        let is_block = |p: &Path| {
            p.file_name()
                .is_some_and(|n| n.len() == 64 && n.as_bytes().iter().all(u8::is_ascii_hexdigit))
        };
        let most = erdma_limits::kept::Most { files: used.max(self.keep), bytes: u64::MAX };
        erdma_limits::kept::prune(&self.dir, is_block, most, None);
    }
}

/// Whether `gz` is exactly one gzip member with [`HEADER`] whose contents are `block`: its
/// CRC-32 and length checked (flate2's reader), nothing after it, and no more than `block`
/// inflated, whatever the member holds.
fn is_member_of(gz: &[u8], block: &[u8]) -> bool {
    if !gz.starts_with(&HEADER) {
        return false;
    }
    let mut d = flate2::bufread::GzDecoder::new(gz);
    let mut out = Vec::with_capacity(block.len() + 1);
    // One byte more than the block: a member that gives more is not this block's. A read that
    // ends short of it reached the member's end, where the reader checks CRC and length.
    match (&mut d).take(block.len() as u64 + 1).read_to_end(&mut out) {
        Ok(_) => out == block && d.into_inner().is_empty(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Input that compresses as layers do: text-like runs with repeats far apart.
    fn input(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        let words: Vec<Vec<u8>> =
            (0..500).map(|i| format!("word{i}{} ", "x".repeat(i % 7)).into_bytes()).collect();
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x.is_multiple_of(50) {
                out.extend((0..64).map(|i| (x >> (i % 56)) as u8));
            } else {
                out.extend_from_slice(&words[(x % 500) as usize]);
            }
        }
        out.truncate(n);
        out
    }

    fn gz(data: &[u8], chunks: usize) -> Vec<u8> {
        gz_split(data, chunks, Split::Large)
    }

    fn gz_split(data: &[u8], chunks: usize, split: Split) -> Vec<u8> {
        let mut w = LayerGz::new(Vec::new(), data.len() as u64, split).unwrap();
        for part in data.chunks(chunks.max(1)) {
            w.write_all(part).unwrap();
        }
        w.finish().unwrap()
    }

    /// The contents of each member of `gz`, in order; each member has [`HEADER`].
    fn members(gz: &[u8]) -> Vec<Vec<u8>> {
        let mut rest = gz;
        let mut all = Vec::new();
        while !rest.is_empty() {
            assert!(rest.starts_with(&HEADER), "member {} starts with the header", all.len());
            let mut d = flate2::bufread::GzDecoder::new(rest);
            let mut out = Vec::new();
            d.read_to_end(&mut out).unwrap();
            rest = d.into_inner();
            all.push(out);
        }
        all
    }

    /// What any gzip reader gives back: every member's contents, one after the other.
    fn gunzip(gz: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(gz).read_to_end(&mut out).unwrap();
        assert_eq!(out, members(gz).concat());
        out
    }

    fn gunzip_one_member(gz: &[u8]) -> Vec<u8> {
        // GzDecoder reads exactly one member: anything after it would be left unread.
        let mut d = flate2::read::GzDecoder::new(gz);
        let mut out = Vec::new();
        d.read_to_end(&mut out).unwrap();
        let mut rest = Vec::new();
        d.into_inner().read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "one member, nothing after it");
        out
    }

    #[test]
    fn small_layers_keep_their_single_stream_bytes() {
        // Fed as the tar writer feeds it, write by write (deflate's output depends on how its
        // input arrives): the same bytes as GzBuilder given the same writes, as before.
        let data = input(3 << 20, 7);
        for chunks in [512, 8191, 1 << 20] {
            let mut reference = flate2::GzBuilder::new()
                .mtime(0)
                .operating_system(255)
                .write(Vec::new(), Compression::new(6));
            for part in data.chunks(chunks) {
                reference.write_all(part).unwrap();
            }
            assert_eq!(gz(&data, chunks), reference.finish().unwrap(), "{chunks}");
        }
        // Unknown length: one stream too.
        let mut w = LayerGz::new(Vec::new(), 0, Split::Large).unwrap();
        w.write_all(&data).unwrap();
        assert_eq!(gunzip_one_member(&w.finish().unwrap()), data);
        assert_eq!(gunzip_one_member(&gz(&[], 1)), b"");
    }

    #[test]
    fn large_layers_round_trip_whatever_the_writes() {
        let single_up_to = SINGLE_UP_TO as usize;
        for (n, seed) in [(single_up_to + 1, 1), (single_up_to + 3 * BLOCK, 2), (40 << 20, 3)] {
            let data = input(n, seed);
            let a = gz(&data, 65536);
            assert_eq!(gunzip(&a), data, "{n}");
            // A member per block, each holding its block.
            let parts = members(&a);
            assert_eq!(parts.len(), n.div_ceil(BLOCK), "{n}");
            assert!(parts.iter().zip(data.chunks(BLOCK)).all(|(p, b)| p == b), "{n}");
            // The same bytes however the input arrives.
            assert_eq!(gz(&data, 1_000_003), a);
            // Blocks compress about as well as one stream of zlib's: on this input, whose
            // repeats are far apart, a little worse (a member starts with an empty window); on
            // real layers better (docs/benchmarks.md).
            let single = {
                let mut w = flate2::write::GzEncoder::new(Vec::new(), Compression::new(6));
                w.write_all(&data).unwrap();
                w.finish().unwrap()
            };
            let ratio = a.len() as f64 / single.len() as f64;
            assert!(ratio < 1.05, "{ratio}");
        }
    }

    #[test]
    fn split_always_cuts_small_layers_too() {
        for n in [0, 1, SMALL_BLOCK - 1, SMALL_BLOCK, SMALL_BLOCK + 1, 3 << 20, (3 << 20) + 77] {
            let data = input(n, n as u64);
            let a = gz_split(&data, 65536, Split::Always);
            assert_eq!(gunzip(&a), data, "{n}");
            assert_eq!(gz_split(&data, 1_000_003, Split::Always), a, "{n}");
            assert_eq!(gz_split(&data, 4097, Split::Always), a, "{n}");
            // A member per block; an empty layer is one empty member.
            assert_eq!(members(&a).len(), n.div_ceil(SMALL_BLOCK).max(1), "{n}");
            if n >= 2 * SMALL_BLOCK {
                // Not one stream: members...
                assert_ne!(a, gz(&data, 65536), "{n}");
                // ...and about as small (as above).
                let ratio = a.len() as f64 / gz(&data, 65536).len() as f64;
                assert!(ratio < 1.05, "{n}: {ratio}");
            }
        }
    }

    fn gz_memo(data: &[u8], chunks: usize, memo: &Arc<BlockMemo>) -> Vec<u8> {
        let mut w = LayerGz::new(Vec::new(), data.len() as u64, Split::Always)
            .unwrap()
            .with_memo(memo.clone());
        for part in data.chunks(chunks.max(1)) {
            w.write_all(part).unwrap();
        }
        w.finish().unwrap()
    }

    fn memo_files(dir: &std::path::Path) -> Vec<String> {
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        files
    }

    /// A memo of blocks changes no byte of a layer: kept members are the ones compressing
    /// writes, a layer that differs in one place compresses only the block that place is in,
    /// and a kept member that is not what it stands for is dropped and made again.
    #[test]
    fn a_memo_of_blocks_gives_the_bytes_compressing_gives() {
        let dir = tempfile::tempdir().unwrap();
        let blocks = dir.path().join("blocks");
        let memo = Arc::new(BlockMemo::new(blocks.clone()));
        let n = 8 * SMALL_BLOCK + 777;
        let data = input(n, 21);
        let plain = gz_split(&data, 65536, Split::Always);
        // Made and kept: one file per block.
        assert_eq!(gz_memo(&data, 65536, &memo), plain);
        let first = memo_files(&blocks);
        assert_eq!(first.len(), n.div_ceil(SMALL_BLOCK));
        // Taken from the memo: the same bytes, nothing new kept.
        assert_eq!(gz_memo(&data, 4097, &memo), plain);
        assert_eq!(memo_files(&blocks), first);
        // A byte changed at the start of the fourth block: that block is new. One near its
        // end: that block again, and not the next (a member starts with an empty window).
        let mut changed = data.clone();
        changed[3 * SMALL_BLOCK + 100] ^= 0x55;
        assert_eq!(gz_memo(&changed, 65536, &memo), gz_split(&changed, 65536, Split::Always));
        assert_eq!(memo_files(&blocks).len(), first.len() + 1);
        changed[4 * SMALL_BLOCK - 100] ^= 0x55;
        assert_eq!(gz_memo(&changed, 65536, &memo), gz_split(&changed, 65536, Split::Always));
        assert_eq!(memo_files(&blocks).len(), first.len() + 2);
        // Kept members that are not what they stand for, each dropped and made again.
        let head = &data[..SMALL_BLOCK];
        let kept = blocks.join(BlockMemo::name(head));
        let good = std::fs::read(&kept).unwrap();
        assert_eq!(good, member(head).unwrap());
        let mut flipped = good.clone();
        flipped[good.len() / 3] ^= 1;
        let mut bad_crc = good.clone();
        let at = good.len() - 8;
        bad_crc[at] ^= 1;
        let with_name = {
            let mut w = flate2::GzBuilder::new()
                .mtime(0)
                .operating_system(255)
                .filename("block")
                .write(Vec::new(), Compression::new(LEVEL));
            w.write_all(head).unwrap();
            w.finish().unwrap()
        };
        let tampered = [
            ("cut short", good[..good.len() / 2].to_vec()),
            ("a byte changed", flipped),
            ("a CRC that is not the contents'", bad_crc),
            ("a member of other bytes", member(&input(SMALL_BLOCK, 5)).unwrap()),
            ("the block in two members", {
                let mut two = member(&head[..100]).unwrap();
                two.extend(member(&head[100..]).unwrap());
                two
            }),
            ("bytes after the member", {
                let mut more = good.clone();
                more.extend_from_slice(&[0, 0, 0xff, 0xff]);
                more
            }),
            ("another header (a file name)", with_name),
            ("raw deflate, no header", good[HEADER.len()..good.len() - 8].to_vec()),
        ];
        for (what, bytes) in tampered {
            assert_ne!(bytes, good);
            std::fs::write(&kept, bytes).unwrap();
            assert_eq!(gz_memo(&data, 65536, &memo), plain, "{what}");
            assert_eq!(std::fs::read(&kept).unwrap(), good, "{what}: made again");
        }
        // A kept member is what the layer gets: one deflated otherwise (zlib, level 2, whose
        // header is the same: level 1 would mark it "fastest"), but giving back the block, is
        // taken as it is, and the layer still gives the input back.
        let other = {
            let mut w = flate2::GzBuilder::new()
                .mtime(0)
                .operating_system(255)
                .write(Vec::new(), Compression::new(2));
            w.write_all(head).unwrap();
            w.finish().unwrap()
        };
        assert_ne!(other, good);
        std::fs::write(&kept, &other).unwrap();
        let long_ago = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1 << 20);
        std::fs::File::options().write(true).open(&kept).unwrap().set_modified(long_ago).unwrap();
        let with_other = gz_memo(&data, 65536, &memo);
        assert_ne!(with_other, plain);
        assert_eq!(members(&with_other)[0], head);
        assert!(with_other.starts_with(&other));
        assert_eq!(gunzip(&with_other), data);
        // Taken as used now: the prune keeps it.
        let used = std::fs::metadata(&kept).unwrap().modified().unwrap();
        assert!(used > long_ago + std::time::Duration::from_secs(1 << 20), "{used:?}");
        std::fs::write(&kept, &good).unwrap();
        // A memo that cannot be written only costs time.
        std::fs::write(dir.path().join("file"), b"a file").unwrap();
        let blocked = Arc::new(BlockMemo::new(dir.path().join("file").join("blocks")));
        assert_eq!(gz_memo(&data, 65536, &blocked), plain);
    }

    /// The memo keeps the blocks used last, [`MEMO_BLOCKS`] of them.
    #[test]
    fn a_memo_keeps_the_blocks_used_last() {
        let dir = tempfile::tempdir().unwrap();
        let blocks = dir.path().join("blocks");
        std::fs::create_dir_all(&blocks).unwrap();
        let set_used = |name: &str, at: std::time::SystemTime| {
            let f = std::fs::File::options().write(true).open(blocks.join(name)).unwrap();
            f.set_modified(at).unwrap();
        };
        let long_ago = |i: u64| std::time::UNIX_EPOCH + std::time::Duration::from_secs(1 << 20 | i);
        for i in 0..MEMO_BLOCKS + 10 {
            let name = format!("{i:064x}");
            std::fs::write(blocks.join(&name), b"").unwrap();
            set_used(&name, long_ago(i as u64));
        }
        std::fs::write(blocks.join(".tmp-being-written"), b"").unwrap();
        // The oldest, used again now, stays; the block of a layer written now is new.
        set_used(&format!("{:064x}", 0), std::time::SystemTime::now());
        let data = input(SMALL_BLOCK / 2, 3);
        let a = gz_memo(&data, 65536, &Arc::new(BlockMemo::new(blocks.clone())));
        assert_eq!(gunzip(&a), data);
        let left = memo_files(&blocks);
        // Not a block: neither counted nor removed.
        assert!(left.contains(&".tmp-being-written".to_string()));
        assert_eq!(left.len(), MEMO_BLOCKS + 1);
        assert!(left.contains(&format!("{:064x}", 0)));
        assert!(left.contains(&BlockMemo::name(&data)));
        // The eleven used longest ago went, but the one used again.
        for i in 1..=11 {
            assert!(!left.contains(&format!("{i:064x}")), "{i}");
        }
        assert!(left.contains(&format!("{:064x}", 12)));
    }

    /// Layers of more blocks than the memo keeps at least keep every one of their own, so
    /// that the next build of them finds them all; another build's smaller layer prunes back.
    #[test]
    fn a_memo_keeps_all_of_its_large_layers() {
        let dir = tempfile::tempdir().unwrap();
        let blocks = dir.path().join("blocks");
        let memo =
            |keep| Arc::new(BlockMemo { dir: blocks.clone(), keep, used: Default::default() });
        // One build, two layers of eight blocks (two platforms): all sixteen kept.
        let build = memo(3);
        let (one, two) = (input(8 * SMALL_BLOCK, 17), input(8 * SMALL_BLOCK, 18));
        let (plain_one, plain_two) =
            (gz_split(&one, 65536, Split::Always), gz_split(&two, 65536, Split::Always));
        assert_eq!(gz_memo(&one, 65536, &build), plain_one);
        assert_eq!(gz_memo(&two, 65536, &build), plain_two);
        let all = memo_files(&blocks);
        assert_eq!(all.len(), 16);
        // The next build of both takes all sixteen from the memo: nothing new, nothing dropped.
        let next = memo(3);
        assert_eq!(gz_memo(&one, 65536, &next), plain_one);
        assert_eq!(gz_memo(&two, 65536, &next), plain_two);
        assert_eq!(memo_files(&blocks), all);
        // Another build's one-block layer: the three used last stay, its block among them.
        let long_ago = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1 << 20);
        for name in &all {
            let f = std::fs::File::options().write(true).open(blocks.join(name)).unwrap();
            f.set_modified(long_ago).unwrap();
        }
        let small = input(SMALL_BLOCK / 4, 4);
        gz_memo(&small, 65536, &memo(3));
        let left = memo_files(&blocks);
        assert_eq!(left.len(), 3, "{left:?}");
        assert!(left.contains(&BlockMemo::name(&small)));
    }

    #[test]
    fn a_large_layer_is_read_by_the_real_gzip() {
        let data = input(SINGLE_UP_TO as usize + 2 * BLOCK + 12345, 9);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("layer.gz");
        std::fs::write(&path, gz(&data, 100_000)).unwrap();
        let small = input((3 << 20) + 5, 10);
        std::fs::write(dir.path().join("small.gz"), gz_split(&small, 100_000, Split::Always))
            .unwrap();
        let Ok(out) = std::process::Command::new("gzip").arg("-dc").arg(&path).output() else {
            assert!(std::env::var_os("CI").is_none(), "gzip is needed under CI");
            return;
        };
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stdout == data, "gzip -d gives the input back");
        let out =
            std::process::Command::new("gzip").arg("-dc").arg(dir.path().join("small.gz")).output();
        let out = out.unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stdout == small, "gzip -d gives the small layer back");
    }
}
