//! Debian's formats, read as apt and dpkg read them, from hostile input:
//!
//! - [`deb`]: `.deb` archives (ar, `control.tar`, `data.tar`, every compression dpkg knows),
//!   bounded by [`erdma_limits`].
//! - [`deb822`]: control-file paragraphs (Packages, Release, `status`, `.sources`).
//! - [`version`]: dpkg versions, their order and package relations.
//! - [`repo`]: apt repositories: sources, `Release`/`InRelease` verified, indices fetched and
//!   checked against it; [`index`] streams and hashes one index.
#![forbid(unsafe_code)]

pub mod deb;
pub mod deb822;
pub mod index;
mod pipe;
pub mod repo;
pub mod version;
