//! Decompressing on one thread while the bytes are used on another: an index's hashing and
//! field filtering, a package's tar walk. [`pump`] reads the decoder here; [`Chunks`] reads
//! what it sent there.
use std::io::Read;
use std::sync::mpsc::{Receiver, SyncSender};

/// One chunk of decompressed bytes, or the decoder's error (passed on as it is, so that a
/// limit it reached is still recognised: [`erdma_limits::exceeded`]).
pub(crate) type Chunk = std::io::Result<Vec<u8>>;

/// A channel for [`pump`] and [`Chunks`]: a few chunks in flight.
pub(crate) fn channel() -> (SyncSender<Chunk>, Receiver<Chunk>) {
    std::sync::mpsc::sync_channel(8)
}

/// Sends what `decoder` gives, chunk by chunk, until its end, its error, or until the other
/// side stops reading.
pub(crate) fn pump(decoder: &mut dyn Read, tx: SyncSender<Chunk>) {
    loop {
        let mut chunk = vec![0u8; 256 << 10];
        let sent = match decoder.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                chunk.truncate(n);
                tx.send(Ok(chunk))
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = tx.send(Err(e));
                break;
            }
        };
        // The reading side stopped (an error of its own, or it has read all it wanted).
        if sent.is_err() {
            break;
        }
    }
}

/// The decompressed bytes as they come over from the [`pump`].
pub(crate) struct Chunks {
    rx: Receiver<Chunk>,
    current: Vec<u8>,
    at: usize,
}

impl Chunks {
    pub(crate) fn new(rx: Receiver<Chunk>) -> Chunks {
        Chunks { rx, current: Vec::new(), at: 0 }
    }
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.current.len() {
            match self.rx.recv() {
                Ok(chunk) => {
                    self.current = chunk?;
                    self.at = 0;
                }
                // The pump is done.
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len() - self.at);
        buf[..n].copy_from_slice(&self.current[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}
