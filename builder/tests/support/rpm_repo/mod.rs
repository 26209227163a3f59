//! RPM fixtures for the rpm backend: real rdma-core binaries repackaged as EL rpms, signed
//! yum repositories served on 127.0.0.1, and EL-like base images whose rpm database real rpm
//! wrote (SQLite with this machine's rpm 4.18, Berkeley DB with Debian 11's rpm 4.16 on
//! libdb 5.3). Where every fact comes from: `testdata/rpm/README.md`.
//!
//! No EL repository or image can be downloaded here, so:
//! - the binaries are Debian 12's rdma-core 44.0-2 builds ([`super::debs::real_debs`]), laid
//!   out as EL packages (`/usr/lib64`, `/usr/lib64/libibverbs/`) and built with `rpmbuild -bb`
//!   from a generated spec whose package names, Requires, Provides and scriptlets follow
//!   rdma-core's `redhat/rdma-core.spec` (v44.0) and RHEL 9's downstream spec; the soname
//!   Provides/Requires are rpmbuild's own (`elfdeps` on the real ELF files);
//! - the base system packages (`setup`, `filesystem`, `glibc`, `bash`, `*-release`) are small
//!   stand-ins on top of a Debian 12 minbase (which carries the real libc): `glibc` provides
//!   what `elfdeps` finds in Debian's real libc, without shipping the libraries again.
//!
//! Two things make Debian-built binaries work in an EL layout (documented in the README):
//! Debian's ld.so does not search `/usr/lib64` by default, so the `glibc` stand-in ships
//! `/etc/ld.so.conf.d/erdma-kit-lib64.conf` (`/usr/lib64`) and an ld.so.cache must be
//! written after installing (glibc's file trigger does it with real rpm/dnf); and libibverbs
//! looks for providers in its compiled-in `/usr/lib/x86_64-linux-gnu/libibverbs`, so the bases
//! carry an unowned symlink from there to `/usr/lib64/libibverbs` ([`PROVIDER_DIR_LINK`]).
//!
//! Cache layout (under [`debian::cache_root`]): `el-rpms-*-HASH/` (rpm sets, keyed by a hash
//! of the generated specs and their inputs), `debian11-rpm/` (a bullseye minbase with rpm
//! 4.16, the Berkeley DB writer), `debian12-rpm/` (a bookworm one with rpm 4.18 on SQLite), `el-base-*-HASH/{rootfs,oci,build-info.json}`.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::apt_repo::Served;
use super::debian::{self, cache_root, cached_dir, lock_file, run_ok};
use super::debs::{self, real_debs};
use super::fixture::{self, OciFixture};

mod bases;
mod ofed;
mod packages;
mod repo;

pub use bases::*;
pub use ofed::*;
pub use packages::*;
pub use repo::*;

/// Bump to rebuild every cached rpm set and base (the hash covers the generated specs, not
/// this file's code).
const FIXTURE_REV: &str = "rpm-fixtures-2";

/// rdma-core upstream version of Debian 12's packages (44.0-2): the EL packages get
/// `44.0-2%{dist}`.
pub const RDMA_VERSION: &str = "44.0";
pub const RDMA_RELEASE_BASE: &str = "2";

/// The Debian packages whose files become the EL rdma-core packages.
pub const RDMA_DEBS: [&str; 6] = [
    "libibverbs1",
    "ibverbs-providers",
    "ibverbs-utils",
    "librdmacm1",
    "rdmacm-utils",
    "rdma-core",
];
pub const LIBNL_DEBS: [&str; 2] = ["libnl-3-200", "libnl-route-3-200"];

/// An unowned symlink every base carries: Debian's libibverbs looks for providers in its
/// compiled-in directory first (`VERBS_PROVIDER_DIR`), which the EL layout does not have.
pub const PROVIDER_DIR_LINK: (&str, &str) =
    ("usr/lib/x86_64-linux-gnu/libibverbs", "../../lib64/libibverbs");

/// The EL flavour packages are built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum El {
    /// Alibaba Cloud Linux 3 (EL8-compatible, `.al8` packages, `$releasever` 3).
    Al8,
    /// CentOS/Rocky 8 (`.el8`).
    El8,
    /// Rocky/Alma/RHEL 9 (`.el9`).
    El9,
}

impl El {
    pub fn dist(self) -> &'static str {
        match self {
            El::Al8 => ".al8",
            El::El8 => ".el8",
            El::El9 => ".el9",
        }
    }

    fn key(self) -> &'static str {
        &self.dist()[1..]
    }

    /// `2.el9`.
    pub fn release(self) -> String {
        format!("{RDMA_RELEASE_BASE}{}", self.dist())
    }

    /// `44.0-2.el9`.
    pub fn evr(self) -> String {
        format!("{RDMA_VERSION}-{}", self.release())
    }

    /// Payload compression of the distribution's own packages: xz level 2 on EL8 (and
    /// Alinux 3), zstd level 19 on EL9 (redhat-rpm-config's `_binary_payload`).
    fn payload(self) -> &'static str {
        match self {
            El::Al8 | El::El8 => "w2.xzdio",
            El::El9 => "w19.zstdio",
        }
    }

    /// EL8's rpmsign adds header-only and header+payload (v3) signatures, EL9's only the
    /// header one.
    pub fn rpmv3_signatures(self) -> bool {
        !matches!(self, El::El9)
    }

    /// Whether the rdma-core libraries carry `%post -p /sbin/ldconfig`: `%ldconfig_scriptlets`
    /// expands to them on EL8 and to nothing on EL9, where glibc's file trigger runs ldconfig.
    fn ldconfig_scriptlets(self) -> bool {
        !matches!(self, El::El9)
    }
}
