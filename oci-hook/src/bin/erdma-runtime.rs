//! `erdma-runtime`: thin; the work is in `erdma_oci_hook::runtime`.
//!
//! No Rust `main`: glibc calls the C `main` below directly, skipping std's start-up, which is
//! an engine's cost three times per container (create, start, delete). That start-up reads
//! `/proc/self/maps` to find the main thread's stack guard, maps an alternate signal stack with
//! SIGSEGV/SIGBUS handlers to report stack overflows, checks that fds 0-2 are open and ignores
//! SIGPIPE: 0.06 ms of a 0.43 ms call on a 2-vCPU VM (bench/runtime_start.sh). What is lost:
//! a stack overflow is a plain SIGSEGV, without std's message; stdio closed by the engine is
//! not replaced by /dev/null (every file this program opens is close-on-exec, so the runtime
//! still gets the descriptors the engine gave); SIGPIPE keeps the disposition the engine gave,
//! and std's `exec` resets it to the default for the runtime, as before. `std::env::args_os`
//! still works: std reads the arguments from glibc's `.init_array` call, not from `main`.
//! musl passes no arguments to `.init_array` functions, so there `std::env::args_os` would be
//! empty under a C `main`: other C libraries get std's own `main` (below).
//! (Under `cfg(test)` the test harness brings its own `main`.)
#![cfg_attr(all(not(test), target_env = "gnu"), no_main)]

/// The process entry point glibc calls.
// `no_mangle` is what the `unsafe_code` lint objects to: the symbol `main` must be defined
// once, and `#![no_main]` is what stops rustc from defining its own. Nothing here is unsafe.
#[cfg(all(not(test), target_env = "gnu"))]
#[allow(unsafe_code)]
#[no_mangle]
pub extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    erdma_oci_hook::runtime::main_with(std::env::args_os().skip(1).collect())
}

/// std's start-up, where the C library does not hand the arguments to std before `main`.
#[cfg(not(target_env = "gnu"))]
fn main() {
    std::process::exit(erdma_oci_hook::runtime::main_with(std::env::args_os().skip(1).collect()))
}
