//! The rpm backend: Alibaba Cloud Linux, CentOS, Rocky, Alma and RHEL packages, installed the
//! way `dnf install` would, without rpm, dnf, root or a container: the repositories a build
//! reads ([`repos`]), dnf's resolution ([`resolve`]) and the install into the layer and the
//! image's rpm database ([`install`]), over rpm's formats in `erdma_rpm`.
pub mod install;
pub mod repos;
pub mod resolve;
