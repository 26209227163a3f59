//! `erdma-runtime`: thin; the work is in `erdma_oci_hook::runtime`.
//!
//! No Rust `main`: the C library calls the C `main` below directly, skipping std's start-up,
//! which is an engine's cost three times per container (create, start, delete). That start-up
//! finds the main thread's stack guard (glibc: by reading `/proc/self/maps`), maps an alternate
//! signal stack with SIGSEGV/SIGBUS handlers to report stack overflows, checks with `poll`
//! that fds 0-2 are open and ignores SIGPIPE: 0.06 ms of a 0.43 ms call on a 2-vCPU VM with
//! glibc (bench/runtime_start.sh). What is lost: a stack overflow is a plain SIGSEGV, without
//! std's message; stdio closed by the engine is not replaced by /dev/null (every file this
//! program opens is close-on-exec, so the runtime still gets the descriptors the engine gave);
//! SIGPIPE keeps the disposition the engine gave, and std's `exec` resets it to the default for
//! the runtime, as before. The arguments are read from `argv` here: musl, unlike glibc, does
//! not hand them to std before `main`, so `std::env::args_os` would be empty under a C `main`.
//! (Under `cfg(test)` the test harness brings its own `main`.)
#![cfg_attr(not(test), no_main)]

/// The process entry point the C library calls.
// `no_mangle` is what the `unsafe_code` lint objects to: the symbol `main` must be defined
// once, and `#![no_main]` is what stops rustc from defining its own.
#[cfg(not(test))]
#[allow(unsafe_code)]
#[no_mangle]
extern "C" fn main(argc: std::ffi::c_int, argv: *const *const std::ffi::c_char) -> std::ffi::c_int {
    use std::ffi::{CStr, OsStr, OsString};
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: the C library passes `argc` valid NUL-terminated strings in `argv`, which live
    // as long as the process.
    let args = (1..usize::try_from(argc).unwrap_or(0))
        .map(|i| unsafe { CStr::from_ptr(*argv.add(i)) })
        .map(|s| OsString::from(OsStr::from_bytes(s.to_bytes())))
        .collect();
    erdma_oci_hook::runtime::main_with(args)
}

/// Allocations come from a fixed arena and are never given back: the process lives for well
/// under a millisecond and then execs the real runtime (or exits), which returns everything at
/// once. musl's allocator maps and unmaps pages as blocks come and go, about 50 `mmap`/`munmap`
/// calls for an asking `create`; the arena makes none and lets the kernel fault its pages in
/// on first touch. Measured per call with the real runtime replaced by `/bin/true`
/// (docs/benchmarks.md): about 0.07 ms less for a pass-through call, 0.4 ms for an asking
/// `create`.
#[cfg(not(test))]
#[global_allocator]
static ALLOC: arena::Arena<{ 4 << 20 }> = arena::Arena::new();

/// A bump allocator over a zeroed static buffer (in `.bss`, so it costs the binary nothing and
/// a page is only touched when used), thread-safe (the namespace reader runs on a thread of its
/// own). The newest block grows and shrinks in place; a freed block is not reused. Once the
/// buffer is used up, and for what does not fit, the C library's allocator takes over, so a
/// large spec costs memory, never a failure.
#[allow(unsafe_code)]
mod arena {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::UnsafeCell;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    #[repr(C, align(4096))]
    pub(crate) struct Arena<const N: usize> {
        buf: UnsafeCell<[u8; N]>,
        /// Offset of the first free byte.
        next: AtomicUsize,
    }

    // SAFETY: the buffer is only handed out in disjoint blocks, each claimed by one successful
    // compare-exchange on `next`.
    unsafe impl<const N: usize> Sync for Arena<N> {}

    impl<const N: usize> Arena<N> {
        pub(crate) const fn new() -> Self {
            Arena { buf: UnsafeCell::new([0; N]), next: AtomicUsize::new(0) }
        }

        fn base(&self) -> usize {
            self.buf.get() as usize
        }

        fn owns(&self, p: *mut u8) -> bool {
            (self.base()..self.base() + N).contains(&(p as usize))
        }

        /// Claims `size` bytes aligned to `align`, or `None` when the rest of the buffer is
        /// too small.
        fn claim(&self, size: usize, align: usize) -> Option<*mut u8> {
            let base = self.base();
            let mut cur = self.next.load(Relaxed);
            loop {
                // `align` is a power of two (Layout's guarantee).
                let start = (base + cur).checked_add(align - 1)? & !(align - 1);
                let end = (start - base).checked_add(size).filter(|e| *e <= N)?;
                match self.next.compare_exchange_weak(cur, end, Relaxed, Relaxed) {
                    Ok(_) => return Some(start as *mut u8),
                    Err(now) => cur = now,
                }
            }
        }
    }

    // SAFETY: blocks are disjoint, aligned as asked and at least as large as asked; pointers
    // the arena did not hand out go to `System`, which did.
    unsafe impl<const N: usize> GlobalAlloc for Arena<N> {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            match self.claim(layout.size(), layout.align()) {
                Some(p) => p,
                // SAFETY: the caller's layout, passed on.
                None => unsafe { System.alloc(layout) },
            }
        }

        unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
            if !self.owns(p) {
                // SAFETY: not ours, so `System` allocated it with this layout.
                unsafe { System.dealloc(p, layout) }
            }
        }

        unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            if !self.owns(p) {
                // SAFETY: as in `dealloc`.
                return unsafe { System.realloc(p, layout, new_size) };
            }
            let off = p as usize - self.base();
            let end = off + layout.size();
            // The newest block: move the end, if the buffer has room.
            if off + new_size <= N
                && self.next.compare_exchange(end, off + new_size, Relaxed, Relaxed).is_ok()
            {
                return p;
            }
            if new_size <= layout.size() {
                return p;
            }
            // SAFETY: `new_size` is non-zero and, rounded up to the alignment, does not
            // overflow (the caller's contract for `realloc`).
            let new =
                unsafe { self.alloc(Layout::from_size_align_unchecked(new_size, layout.align())) };
            if !new.is_null() {
                // SAFETY: both blocks are at least `layout.size()` long and do not overlap.
                unsafe { std::ptr::copy_nonoverlapping(p, new, layout.size()) };
            }
            new
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn layout(size: usize, align: usize) -> Layout {
            Layout::from_size_align(size, align).unwrap()
        }

        #[test]
        fn blocks_are_aligned_disjoint_and_fall_back_when_full() {
            let a = Box::new(Arena::<4096>::new());
            unsafe {
                let p = a.alloc(layout(3, 1));
                let q = a.alloc(layout(8, 8));
                let r = a.alloc(layout(64, 64));
                assert!(a.owns(p) && a.owns(q) && a.owns(r));
                assert_eq!(q as usize % 8, 0);
                assert_eq!(r as usize % 64, 0);
                assert!(q as usize >= p as usize + 3 && r as usize >= q as usize + 8);
                // Larger than what is left: the C library's block, freed there.
                let big = a.alloc(layout(8192, 8));
                assert!(!big.is_null() && !a.owns(big));
                big.write_bytes(0xab, 8192);
                a.dealloc(big, layout(8192, 8));
                // The arena keeps going after a fallback.
                let s = a.alloc(layout(16, 8));
                assert!(a.owns(s) && s as usize >= r as usize + 64);
            }
        }

        #[test]
        fn the_newest_block_grows_in_place_and_others_move_with_their_bytes() {
            let a = Box::new(Arena::<4096>::new());
            unsafe {
                let p = a.alloc(layout(4, 1));
                p.copy_from_nonoverlapping(b"abcd".as_ptr(), 4);
                let p2 = a.realloc(p, layout(4, 1), 100);
                assert_eq!(p2, p, "the newest block grows in place");
                let q = a.alloc(layout(8, 8));
                let p3 = a.realloc(p2, layout(100, 1), 200);
                assert_ne!(p3, p2, "a block with a newer one after it moves");
                assert!(a.owns(p3) && p3 as usize >= q as usize + 8);
                assert_eq!(std::slice::from_raw_parts(p3, 4), b"abcd");
                // Growing past the buffer moves the block to the C library, bytes and all.
                let p4 = a.realloc(p3, layout(200, 1), 10_000);
                assert!(!a.owns(p4));
                assert_eq!(std::slice::from_raw_parts(p4, 4), b"abcd");
                a.dealloc(p4, layout(10_000, 1));
                // Shrinking keeps the block.
                let q2 = a.realloc(q, layout(8, 8), 4);
                assert_eq!(q2, q);
            }
        }

        #[test]
        fn threads_get_disjoint_blocks() {
            let a = std::sync::Arc::new(Arena::<{ 1 << 16 }>::new());
            let handles: Vec<_> = (0..4u8)
                .map(|t| {
                    let a = a.clone();
                    std::thread::spawn(move || {
                        (0..100)
                            .map(|_| unsafe {
                                let p = a.alloc(layout(24, 8));
                                p.write_bytes(t, 24);
                                p as usize
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            let mut all: Vec<(usize, u8)> = Vec::new();
            for (t, h) in handles.into_iter().enumerate() {
                all.extend(h.join().unwrap().into_iter().map(|p| (p, t as u8)));
            }
            all.sort();
            for w in all.windows(2) {
                assert!(w[1].0 >= w[0].0 + 24, "blocks overlap");
            }
            for (p, t) in all {
                let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, 24) };
                assert!(bytes.iter().all(|b| *b == t), "a block was written by another thread");
            }
        }
    }
}
