//! Progress reporting: a trait here, the terminal bars in the binary.
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    Download,
    Upload,
}

/// Receives progress events. Every method has an empty default so reporters pick what they show.
pub trait Reporter: Send + Sync {
    /// A blob transfer starts; `id` is unique for the build (the digest plus the direction).
    fn transfer_start(&self, _id: &str, _kind: Transfer, _total: Option<u64>) {}
    fn transfer_progress(&self, _id: &str, _bytes: u64) {}
    fn transfer_done(&self, _id: &str) {}
    /// A step of the build, e.g. "detecting distribution".
    fn step(&self, _message: &str) {}
}

/// Reports nothing: for `--quiet`, non-terminals and the library's tests.
pub struct Silent;
impl Reporter for Silent {}

/// Bytes moved over the network, for the build summary and the benchmark.
#[derive(Debug, Default)]
pub struct Counters {
    pub downloaded: AtomicU64,
    pub uploaded: AtomicU64,
}

impl Counters {
    pub fn add(&self, kind: Transfer, n: u64) {
        match kind {
            Transfer::Download => self.downloaded.fetch_add(n, Ordering::Relaxed),
            Transfer::Upload => self.uploaded.fetch_add(n, Ordering::Relaxed),
        };
    }
    pub fn get(&self, kind: Transfer) -> u64 {
        match kind {
            Transfer::Download => self.downloaded.load(Ordering::Relaxed),
            Transfer::Upload => self.uploaded.load(Ordering::Relaxed),
        }
    }
}
