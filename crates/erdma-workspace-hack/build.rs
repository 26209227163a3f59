//! Empty: cargo takes a package's build dependencies into account only when it has a build
//! script, and the host side of the unified features is in `[build-dependencies]`.
#![forbid(unsafe_code)]
fn main() {}
