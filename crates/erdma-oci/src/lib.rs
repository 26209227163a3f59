//! OCI images, below everything that decides what goes into one: names ([`reference`](mod@reference),
//! [`transport`]), reading ([`source`], [`registry`], [`layout`], [`blob`]), a base's files
//! ([`files`], [`rootfs`]), the whole root on disk for running scripts ([`rootdir`]), the new layer ([`layer`]) and config ([`config`]), and writing
//! ([`sink`]). Nothing here knows of builds, recipes or package backends.
#![forbid(unsafe_code)]

pub mod auth;
pub mod blob;
pub mod config;
pub mod error;
pub mod files;
pub mod gzip;
pub mod layer;
pub mod layout;
pub mod reference;
pub mod registries_conf;
pub mod registry;
pub mod rootdir;
pub mod rootfs;
pub mod sink;
pub mod source;
pub mod tls;
pub mod transport;

pub use error::{Error, Result};
