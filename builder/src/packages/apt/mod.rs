//! The apt backend: Debian and Ubuntu packages, installed the way `apt-get install` would.
pub mod install;
pub mod local;
pub mod resolve;
