//! rpm's formats, read and written as rpm and dnf do, from hostile input: repository metadata
//! ([`repodata`]), versions and rich dependencies ([`version`]), headers ([`header`]), `.rpm`
//! files with their signatures and payloads ([`package`]) and the installed-package database,
//! Berkeley DB and SQLite ([`rpmdb`]). The types here (a package's name, EVR, dependencies) are
//! the ones all of them share.
#![forbid(unsafe_code)]

pub mod header;
pub mod index;
pub mod package;
pub mod repo;
pub mod repodata;
pub mod rpmdb;
pub mod version;

/// A small deterministic generator (xorshift64*) for the backend's generated-input tests, so
/// failures reproduce without a crate.
#[cfg(test)]
pub(crate) struct TestRng(pub u64);

#[cfg(test)]
impl TestRng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

use serde::Serialize;

/// An epoch-version-release, as rpm compares it ([`version::compare_evr`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Evr {
    /// `None` when the package declares none (compares as 0).
    pub epoch: Option<u32>,
    pub version: String,
    /// Empty in a dependency that names none (`Requires: foo >= 1.2`): any release matches.
    pub release: String,
}

impl std::fmt::Display for Evr {
    /// `[E:]V[-R]`, as `rpm -q --qf '%{EVR}'` prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(e) = self.epoch {
            write!(f, "{e}:")?;
        }
        f.write_str(&self.version)?;
        if !self.release.is_empty() {
            write!(f, "-{}", self.release)?;
        }
        Ok(())
    }
}

/// The comparison of a versioned dependency (rpm's `RPMSENSE_LESS|GREATER|EQUAL` bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Cmp {
    Lt,
    Le,
    Eq,
    Ge,
    Gt,
}

/// One `Requires`/`Provides`/`Obsoletes`/`Conflicts` entry: `name`, or `name OP evr`. Rich
/// dependencies (`(a or b)`) keep their whole text in `name` with no version; the resolver
/// parses them ([`version::RichDep`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Dep {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<(Cmp, Evr)>,
    /// `Requires(pre)`/`(post)`: needed by a scriptlet (rpm's `RPMSENSE_SCRIPT_*` bits); still
    /// a requirement for resolution.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub pre: bool,
}

/// What resolution needs of a package, whether it comes from a repository's `primary.xml`, a
/// header in the image's rpm database, or a local `.rpm`.
#[derive(Debug, Clone, Serialize)]
pub struct PackageMeta {
    pub name: String,
    pub evr: Evr,
    /// `x86_64`, `aarch64`, `noarch`, `i686`.
    pub arch: String,
    pub provides: Vec<Dep>,
    pub requires: Vec<Dep>,
    pub obsoletes: Vec<Dep>,
    pub conflicts: Vec<Dep>,
    /// `Recommends`: the weak dependencies dnf installs with `install_weak_deps=True`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub recommends: Vec<Dep>,
    /// Files the package owns that resolution may need (`primary.xml` lists only those under
    /// `/etc`, `*bin/` and `/usr/lib/sendmail`; an installed header lists all).
    pub files: Vec<String>,
    /// Where it came from: a repository's name, `installed`, or a file path.
    pub origin: String,
    /// Repository packages: the `location href` relative to the repository's base URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Repository packages: the package file's checksum as `primary.xml` gives it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checksum: Option<Checksum>,
    /// The package file's size in bytes (0 when unknown).
    pub size: u64,
}

impl PackageMeta {
    /// `name-[epoch:]version-release.arch`, as dnf names a package.
    pub fn nevra(&self) -> String {
        format!("{}-{}.{}", self.name, self.evr, self.arch)
    }
}

/// A checksum as repodata writes it: `sha256` (or `sha512`, `sha1`, `sha`, `md5` in old
/// repositories) and lower-case hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Checksum {
    pub kind: String,
    pub hex: String,
}

impl Checksum {
    /// `KIND-HEX`, the name a cache keeps the file with this checksum under: only when both
    /// are non-empty and the hex is hex digits and the kind letters and digits, so that a
    /// hostile repository's checksum can never make a path.
    pub fn file_stem(&self) -> Option<String> {
        let safe = !self.hex.is_empty()
            && self.hex.chars().all(|c| c.is_ascii_hexdigit())
            && !self.kind.is_empty()
            && self.kind.chars().all(|c| c.is_ascii_alphanumeric());
        safe.then(|| format!("{}-{}", self.kind, self.hex))
    }
}
