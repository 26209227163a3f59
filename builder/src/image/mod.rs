//! The image machinery, below everything that decides what goes into an image: names
//! ([`transport`]), reading ([`source`], [`registry`], [`layout`], [`blob`]), a base's files
//! ([`files`], [`rootfs`]), the new layer ([`layer`]) and config ([`config`]), and writing
//! ([`sink`]). Nothing here imports the build, the recipes or the package backends.
pub mod auth;
pub mod blob;
pub mod config;
pub mod files;
pub mod layer;
pub mod layout;
pub mod registries_conf;
pub mod registry;
pub mod rootfs;
pub mod sink;
pub mod source;
pub mod tls;
pub mod transport;
