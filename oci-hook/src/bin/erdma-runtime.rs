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
    let mut earlier = erdma_oci_hook::runtime::Earlier::default();
    // SAFETY: as below; returns only where it does not apply or the exec failed.
    unsafe { handover::exec(argc, argv, &mut earlier) };
    // SAFETY: the C library passes `argc` valid NUL-terminated strings in `argv`, which live
    // as long as the process.
    let args = (1..usize::try_from(argc).unwrap_or(0))
        .map(|i| unsafe { CStr::from_ptr(*argv.add(i)) })
        .map(|s| OsString::from(OsStr::from_bytes(s.to_bytes())))
        .collect();
    erdma_oci_hook::runtime::main_with(args, earlier)
}

/// A call erdma-runtime only hands over to the real runtime (start, delete, state, kill: every
/// subcommand but create and run; and the create or run of a container whose spec cannot ask
/// for eRDMA), exec'd from here when `runtime::handover` can tell what to exec, before anything
/// else of this program runs. That touches few of its pages: a pass-through call took 0.12 ms
/// less this way (docs/benchmarks.md), on a container's start, delete and whatever else its
/// engine asks. Whatever `handover` leaves (a container that may ask, a configuration that is
/// not of the plainest form, debug logging) and an exec that fails go on to `main_with`, which
/// does the same with its full readers, and reports.
#[cfg(not(test))]
#[allow(unsafe_code)]
mod handover {
    use std::ffi::{c_char, c_int, CStr};

    extern "C" {
        fn getenv(name: *const c_char) -> *const c_char;
        fn execv(path: *const c_char, argv: *const *const c_char) -> c_int;
        fn signal(signum: c_int, handler: usize) -> usize;
    }
    const SIGPIPE: c_int = 13;
    const SIG_DFL: usize = 0;
    const SIG_ERR: usize = usize::MAX;
    /// More arguments than this (engines give about ten) go the long way.
    const MAX_ARGS: usize = 64;

    /// Execs the real runtime for a call that only hands over, or returns. What it read on the
    /// way to returning is left in `earlier`.
    ///
    /// # Safety
    /// `argv` holds `argc` valid NUL-terminated strings and a null, as the C library gives them.
    pub(crate) unsafe fn exec(
        argc: c_int,
        argv: *const *const c_char,
        earlier: &mut erdma_oci_hook::runtime::Earlier,
    ) {
        let n = usize::try_from(argc).unwrap_or(0);
        if !(2..=MAX_ARGS).contains(&n) {
            return;
        }
        let mut args: [&[u8]; MAX_ARGS] = [&[]; MAX_ARGS];
        for (i, arg) in args.iter_mut().enumerate().take(n - 1) {
            // SAFETY: `i + 1 < argc`, the caller's strings.
            *arg = unsafe { CStr::from_ptr(*argv.add(i + 1)) }.to_bytes();
        }
        let env = |name: &CStr| {
            // SAFETY: `name` is NUL-terminated; the C library's environment strings live as
            // long as the process, and nothing here changes the environment.
            let value = unsafe { getenv(name.as_ptr()) };
            (!value.is_null()).then(|| unsafe { CStr::from_ptr(value) }.to_bytes())
        };
        let Some(to) = erdma_oci_hook::runtime::handover(&args[..n - 1], env, earlier) else {
            return;
        };
        let mut argv_out: [*const c_char; MAX_ARGS + 1] = [std::ptr::null(); MAX_ARGS + 1];
        argv_out[0] = to.arg0.as_ptr();
        for (i, slot) in argv_out.iter_mut().enumerate().take(n).skip(1) {
            // SAFETY: `i < argc`.
            *slot = unsafe { *argv.add(i) };
        }
        // SAFETY: plain C calls; `argv_out` is null-terminated (n <= MAX_ARGS) and its strings
        // outlive the call. SIGPIPE back to its default, as std's `Command::exec` (the long
        // way) sets it for the program it runs; and back to what the engine gave (a fresh
        // program's disposition is the default or ignored, which `signal` restores alike) if
        // the exec fails and the long way goes on, reporting it.
        unsafe {
            let engines = signal(SIGPIPE, SIG_DFL);
            execv(to.program.as_ptr(), argv_out.as_ptr());
            if engines != SIG_ERR {
                signal(SIGPIPE, engines);
            }
        }
    }
}

/// `memcpy` and `memmove` for the static musl build on x86_64, in place of musl's, which copy
/// with `rep movsq` at every size (and `memmove` backwards with `rep movsb` under the direction
/// flag). A microcoded string instruction costs tens of cycles to start, and this program makes
/// about 1,500 copies per asking `create`, nearly all of them under 64 bytes (the spec's
/// strings and the tree's nodes): 0.06 ms of a 0.5 ms call on a 2-vCPU AMD EPYC VM
/// (docs/benchmarks.md). Up to 64 bytes, every byte is loaded before any is stored, with
/// overlapping loads of 1, 2, 4, 8 and 16 bytes and no loop, so the same code serves both
/// functions whatever the overlap; longer copies are one `rep movsb`, forwards or (for a
/// `memmove` onto a later, overlapping address) backwards. No loops at all: the compiler turns
/// a copy loop into a call to `memcpy`, which here would be this function itself.
///
/// Being defined here, in the program's own object, both symbols are resolved before the C
/// library's archive is searched, so neither of musl's copies (nor `memcpy.o`'s internal
/// `__memcpy_fwd`, which only musl's `memmove` uses) is linked in; a symbol defined twice would
/// stop the link, not change behaviour silently. glibc's builds and other architectures keep
/// their C library's functions; the tests (on x86_64) call these under their module's path
/// and compare them with `copy_within` at every size and overlap up to 160 bytes.
#[cfg(all(target_arch = "x86_64", any(test, target_env = "musl")))]
#[allow(unsafe_code)]
mod mem {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};

    /// Copies `n` bytes, up to 64, from `s` to `d`; the two ranges may overlap in any way.
    /// Every load comes before every store.
    ///
    /// # Safety
    /// `s` readable and `d` writable for `n` bytes, `n <= 64`.
    #[inline(always)]
    unsafe fn small(d: *mut u8, s: *const u8, n: usize) {
        // SAFETY (all blocks below): each access lies within the first or last `k` bytes
        // of a range of `n >= k` bytes, which the caller's contract covers.
        unsafe {
            match n {
                0 => {}
                1..=3 => {
                    let (a, b, c) = (*s, *s.add(n / 2), *s.add(n - 1));
                    (*d, *d.add(n / 2), *d.add(n - 1)) = (a, b, c);
                }
                4..=7 => {
                    let a = s.cast::<u32>().read_unaligned();
                    let b = s.add(n - 4).cast::<u32>().read_unaligned();
                    d.cast::<u32>().write_unaligned(a);
                    d.add(n - 4).cast::<u32>().write_unaligned(b);
                }
                8..=16 => {
                    let a = s.cast::<u64>().read_unaligned();
                    let b = s.add(n - 8).cast::<u64>().read_unaligned();
                    d.cast::<u64>().write_unaligned(a);
                    d.add(n - 8).cast::<u64>().write_unaligned(b);
                }
                17..=32 => {
                    let a = _mm_loadu_si128(s.cast::<__m128i>());
                    let b = _mm_loadu_si128(s.add(n - 16).cast::<__m128i>());
                    _mm_storeu_si128(d.cast::<__m128i>(), a);
                    _mm_storeu_si128(d.add(n - 16).cast::<__m128i>(), b);
                }
                _ => {
                    let a = _mm_loadu_si128(s.cast::<__m128i>());
                    let b = _mm_loadu_si128(s.add(16).cast::<__m128i>());
                    let c = _mm_loadu_si128(s.add(n - 32).cast::<__m128i>());
                    let e = _mm_loadu_si128(s.add(n - 16).cast::<__m128i>());
                    _mm_storeu_si128(d.cast::<__m128i>(), a);
                    _mm_storeu_si128(d.add(16).cast::<__m128i>(), b);
                    _mm_storeu_si128(d.add(n - 32).cast::<__m128i>(), c);
                    _mm_storeu_si128(d.add(n - 16).cast::<__m128i>(), e);
                }
            }
        }
    }

    /// `rep movsb` forwards: correct for any ranges where `d` is not inside `s`'s after its
    /// start (the string instruction's result is that of a byte-by-byte copy).
    ///
    /// # Safety
    /// As `memcpy`'s; `d` not in `s + 1 .. s + n`.
    #[inline(always)]
    unsafe fn forwards(d: *mut u8, s: *const u8, n: usize) {
        // SAFETY: the caller's; the direction flag is clear on entry, as the ABI requires.
        unsafe {
            std::arch::asm!("rep movsb", inout("rcx") n => _, inout("rdi") d => _,
                inout("rsi") s => _, options(nostack, preserves_flags));
        }
    }

    /// `memcpy(3)`.
    ///
    /// # Safety
    /// The C function's contract: `s` readable and `d` writable for `n` bytes.
    #[cfg_attr(not(test), no_mangle)]
    pub(crate) unsafe extern "C" fn memcpy(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
        // SAFETY: the caller's contract, and non-overlapping ranges are fine for both.
        unsafe {
            if n <= 64 {
                small(d, s, n);
            } else {
                forwards(d, s, n);
            }
        }
        d
    }

    /// `memmove(3)`.
    ///
    /// # Safety
    /// As `memcpy`'s; the ranges may overlap.
    #[cfg_attr(not(test), no_mangle)]
    pub(crate) unsafe extern "C" fn memmove(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
        // SAFETY: the caller's contract; `small` takes any overlap, and a forward copy is
        // right unless `d` lies inside `s`'s range after its start, which is then copied from
        // its last byte down with the direction flag set (and cleared again, as the ABI wants).
        unsafe {
            if n <= 64 {
                small(d, s, n);
            } else if (d as usize).wrapping_sub(s as usize) >= n {
                forwards(d, s, n);
            } else {
                std::arch::asm!("std", "rep movsb", "cld", inout("rcx") n => _,
                    inout("rdi") d.add(n - 1) => _, inout("rsi") s.add(n - 1) => _,
                    options(nostack));
            }
        }
        d
    }

    #[cfg(test)]
    mod tests {
        /// A buffer of distinct bytes (a prime stride over 0..=250).
        fn pattern(len: usize) -> Vec<u8> {
            (0..len).map(|i| (i * 7 % 251) as u8).collect()
        }

        #[test]
        fn memmove_matches_copy_within_at_every_size_and_overlap() {
            const MAX: usize = 160;
            let buf = pattern(3 * MAX);
            for n in 0..=MAX {
                for src in [0, 1, 7, MAX / 2, MAX] {
                    for dst in 0..=2 * MAX {
                        let mut want = buf.clone();
                        want.copy_within(src..src + n, dst);
                        let mut got = buf.clone();
                        let p = got.as_mut_ptr();
                        // SAFETY: both ranges lie within `got` (src + n and dst + n <= 3 * MAX).
                        let r = unsafe { super::memmove(p.add(dst), p.add(src), n) };
                        assert_eq!(r, p.wrapping_add(dst));
                        assert!(got == want, "memmove n={n} src={src} dst={dst}");
                    }
                }
            }
        }

        #[test]
        fn memcpy_copies_every_size_between_distinct_buffers() {
            let from = pattern(1000);
            for n in (0..=300).chain([511, 512, 513, 999]) {
                for off in 0..8 {
                    let mut to = vec![0xeeu8; 1008];
                    // SAFETY: `from` has `n` bytes; `to` has `off + n` and more.
                    let r = unsafe { super::memcpy(to.as_mut_ptr().add(off), from.as_ptr(), n) };
                    assert_eq!(r, to.as_mut_ptr().wrapping_add(off));
                    assert_eq!(&to[off..off + n], &from[..n], "n={n} off={off}");
                    assert!(to[..off].iter().chain(&to[off + n..]).all(|b| *b == 0xee), "n={n}");
                }
            }
        }
    }
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

    /// `next` comes first, in the same page as the buffer's first bytes: the first
    /// allocations then touch one page, not two (each page touched is a page fault).
    #[repr(C, align(4096))]
    pub(crate) struct Arena<const N: usize> {
        /// Offset of the first free byte.
        next: AtomicUsize,
        buf: UnsafeCell<[u8; N]>,
    }

    // SAFETY: the buffer is only handed out in disjoint blocks, each claimed by one successful
    // compare-exchange on `next`.
    unsafe impl<const N: usize> Sync for Arena<N> {}

    impl<const N: usize> Arena<N> {
        pub(crate) const fn new() -> Self {
            Arena { next: AtomicUsize::new(0), buf: UnsafeCell::new([0; N]) }
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
