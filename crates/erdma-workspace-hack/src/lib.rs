//! No code: this crate's dependencies carry the features a workspace build gives them, so that
//! building one product crate alone compiles each dependency as the workspace build does (see
//! the workspace's Cargo.toml). `cargo hakari generate` writes its Cargo.toml.
#![forbid(unsafe_code)]
