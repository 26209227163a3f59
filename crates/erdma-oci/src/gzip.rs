//! The gzip writer of layers: one gzip member whose bytes depend only on the input, compressed
//! on every core once a layer is large.
//!
//! A layer of at most [`SINGLE_UP_TO`] bytes is compressed as one deflate stream, exactly as
//! flate2's `GzBuilder` (level 6, mtime 0, OS "unknown") compresses it. A larger one (OpenMPI's
//! 100 MB, NCCL's 400 MB) is cut into blocks of [`BLOCK`] bytes, compressed side by side as
//! pigz does it: each block is raw deflate primed with the 32 KiB of input before it (so the
//! ratio stays that of one stream, within a fraction of a percent) and ends with a sync flush
//! (an empty stored block, which puts the next one on a byte boundary); the last ends the
//! stream. Header, CRC-32 and length make one ordinary gzip member. The blocks are fixed, so
//! the bytes are the same whatever the number of cores: only the time differs.
use std::collections::VecDeque;
use std::io::{self, Write};
use std::thread::JoinHandle;

use flate2::{Compress, Compression, FlushCompress, Status};

/// Layers up to this size are compressed as one stream (and their bytes stay what they were
/// before the parallel writer).
pub const SINGLE_UP_TO: usize = 16 << 20;
/// The input of one block of a large layer.
pub const BLOCK: usize = 1 << 20;
/// Deflate's window: the input before a block that primes its compressor.
const WINDOW: usize = 32 << 10;
const LEVEL: u32 = 6;

/// Writes one gzip member of what is written to it, to `out`; [`LayerGz::finish`] ends it.
pub struct LayerGz<W: Write> {
    out: Option<W>,
    /// Input not yet handed to a compressor: the whole input while it may still be a small
    /// layer, then the block being filled.
    buf: Vec<u8>,
    /// The last [`WINDOW`] bytes of the input before `buf`, once in blocks.
    window: Vec<u8>,
    blocks: Option<Blocks>,
}

/// Compressing in blocks: the CRC and length of all input so far, and the blocks in flight
/// (oldest first).
struct Blocks {
    crc: flate2::Crc,
    pending: VecDeque<JoinHandle<io::Result<Vec<u8>>>>,
    threads: usize,
}

impl<W: Write> LayerGz<W> {
    pub fn new(out: W) -> LayerGz<W> {
        LayerGz { out: Some(out), buf: Vec::new(), window: Vec::new(), blocks: None }
    }

    fn out(&mut self) -> &mut W {
        self.out.as_mut().expect("not finished")
    }

    /// Switches to blocks: the gzip header written, the input so far cut into blocks.
    fn start_blocks(&mut self) -> io::Result<()> {
        // ID1 ID2 CM=deflate FLG=0 MTIME=0 XFL=0 OS=255, as GzBuilder writes it.
        self.out().write_all(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255])?;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 16);
        self.blocks = Some(Blocks { crc: flate2::Crc::new(), pending: VecDeque::new(), threads });
        let all = std::mem::take(&mut self.buf);
        let mut at = 0;
        while all.len() - at > BLOCK {
            self.send(all[at..at + BLOCK].to_vec(), false)?;
            at += BLOCK;
        }
        self.buf = all[at..].to_vec();
        Ok(())
    }

    /// Hands one block to a compressor thread, after writing out the oldest ones while as
    /// many are in flight as there are cores.
    fn send(&mut self, block: Vec<u8>, last: bool) -> io::Result<()> {
        let window = std::mem::take(&mut self.window);
        self.window = block[block.len().saturating_sub(WINDOW)..].to_vec();
        if self.window.len() < WINDOW {
            // A short last block: the window also reaches into the one before.
            let mut w = window[window.len().saturating_sub(WINDOW - self.window.len())..].to_vec();
            w.extend_from_slice(&self.window);
            self.window = w;
        }
        let b = self.blocks.as_mut().expect("in blocks");
        b.crc.update(&block);
        while b.pending.len() >= b.threads {
            let done = join(b.pending.pop_front().expect("in flight"))?;
            self.out.as_mut().expect("not finished").write_all(&done)?;
        }
        let b = self.blocks.as_mut().expect("in blocks");
        b.pending.push_back(std::thread::spawn(move || deflate_block(&window, &block, last)));
        Ok(())
    }

    /// Ends the member and returns the writer it went to.
    pub fn finish(mut self) -> io::Result<W> {
        if self.blocks.is_none() {
            // A small layer: one stream, as it always was.
            let out = self.out.take().expect("not finished");
            let mut gz = flate2::GzBuilder::new()
                .mtime(0)
                .operating_system(255)
                .write(out, Compression::new(LEVEL));
            gz.write_all(&self.buf)?;
            return gz.finish();
        }
        let last = std::mem::take(&mut self.buf);
        self.send(last, true)?;
        let b = self.blocks.take().expect("in blocks");
        let mut out = self.out.take().expect("not finished");
        for p in b.pending {
            out.write_all(&join(p)?)?;
        }
        out.write_all(&b.crc.sum().to_le_bytes())?;
        out.write_all(&(b.crc.amount()).to_le_bytes())?;
        Ok(out)
    }
}

impl<W: Write> Write for LayerGz<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.blocks.is_none() {
            self.buf.extend_from_slice(data);
            if self.buf.len() > SINGLE_UP_TO {
                self.start_blocks()?;
            }
            return Ok(data.len());
        }
        // A full block goes once more input shows it is not the last.
        if self.buf.len() == BLOCK {
            let full = std::mem::replace(&mut self.buf, Vec::with_capacity(BLOCK));
            self.send(full, false)?;
        }
        let take = (BLOCK - self.buf.len()).min(data.len());
        self.buf.extend_from_slice(&data[..take]);
        Ok(take)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn join(h: JoinHandle<io::Result<Vec<u8>>>) -> io::Result<Vec<u8>> {
    h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// One block as raw deflate primed with `window`: ended by a sync flush, or, for the `last`,
/// by the end of the stream.
fn deflate_block(window: &[u8], block: &[u8], last: bool) -> io::Result<Vec<u8>> {
    let mut c = Compress::new(Compression::new(LEVEL), false);
    if !window.is_empty() {
        c.set_dictionary(window).map_err(io::Error::other)?;
    }
    let mut out = Vec::with_capacity(block.len() / 2 + 1024);
    let flush = if last { FlushCompress::Finish } else { FlushCompress::Sync };
    loop {
        let read = c.total_in() as usize;
        if out.capacity() - out.len() < 64 {
            out.reserve(out.capacity().max(4096));
        }
        let status = c.compress_vec(&block[read..], &mut out, flush).map_err(io::Error::other)?;
        let done_in = c.total_in() as usize == block.len();
        match status {
            Status::StreamEnd => break,
            // Sync: done when all input is in and the flush left room to spare (zlib's own
            // test for a completed flush).
            _ if !last && done_in && out.capacity() - out.len() >= 64 => break,
            _ => {}
        }
    }
    Ok(out)
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
        let mut w = LayerGz::new(Vec::new());
        for part in data.chunks(chunks.max(1)) {
            w.write_all(part).unwrap();
        }
        w.finish().unwrap()
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
        let data = input(3 << 20, 7);
        let mut reference = flate2::GzBuilder::new()
            .mtime(0)
            .operating_system(255)
            .write(Vec::new(), Compression::new(6));
        reference.write_all(&data).unwrap();
        assert_eq!(gz(&data, 8191), reference.finish().unwrap());
        assert_eq!(gunzip_one_member(&gz(&[], 1)), b"");
    }

    #[test]
    fn large_layers_round_trip_whatever_the_writes() {
        for (n, seed) in [(SINGLE_UP_TO + 1, 1), (SINGLE_UP_TO + 3 * BLOCK, 2), (40 << 20, 3)] {
            let data = input(n, seed);
            let a = gz(&data, 65536);
            assert_eq!(gunzip_one_member(&a), data, "{n}");
            // The same bytes however the input arrives.
            assert_eq!(gz(&data, 1_000_003), a);
            // Primed blocks compress about as well as one stream.
            let single = {
                let mut w = flate2::write::GzEncoder::new(Vec::new(), Compression::new(6));
                w.write_all(&data).unwrap();
                w.finish().unwrap()
            };
            let ratio = a.len() as f64 / single.len() as f64;
            assert!(ratio < 1.01, "{ratio}");
        }
    }

    #[test]
    fn a_large_layer_is_read_by_the_real_gzip() {
        let data = input(SINGLE_UP_TO + 2 * BLOCK + 12345, 9);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("layer.gz");
        std::fs::write(&path, gz(&data, 100_000)).unwrap();
        let Ok(out) = std::process::Command::new("gzip").arg("-dc").arg(&path).output() else {
            assert!(std::env::var_os("CI").is_none(), "gzip is needed under CI");
            return;
        };
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stdout == data, "gzip -d gives the input back");
    }
}
