//! The apt backend: Debian and Ubuntu packages, installed the way `apt-get install` would.
pub mod deb;
pub mod deb822;
pub mod index;
pub mod install;
pub mod local;
pub mod repo;
pub mod resolve;
pub mod version;
