//! `erdma-runtime`: a runc/crun wrapper. (Being written.)
use std::ffi::OsString;

/// Runs the wrapper with `args` (without argv[0]); returns the exit code.
pub fn main_with(_args: Vec<OsString>) -> i32 {
    eprintln!("erdma-runtime: not implemented yet");
    1
}
