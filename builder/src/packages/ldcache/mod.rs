//! `/etc/ld.so.cache` as glibc's `ldconfig` writes it, without running `ldconfig`.
//!
//! A package that installs shared libraries ends in `ldconfig` (a dpkg trigger, an rpm
//! scriptlet). The build writes the cache itself: the base's cache is read ([`Cache::parse`]),
//! the directories `ldconfig` scans are computed from the image ([`conf_dirs`]), each directory
//! the packages change is scanned as `ldconfig` scans it ([`scan_dir`], reading shared objects
//! with [`probe`]), and its entries replace the old ones ([`Cache::remove_dir`], [`Cache::add`]). The result,
//! [`Cache::to_bytes`], is byte for byte what `ldconfig` writes after the install, when the
//! base's cache was fresh: `Cache::build` (in the tests) makes a cache from scratch the same
//! way, so the tests check that it reproduces the base's own cache.
//!
//! The rules are glibc's (elf/cache.c, elf/stringtable.c, elf/ldconfig.c, elf/readlib.c,
//! elf/readelflib.c) from 2.28 to 2.41, release by release and build by build ([`Glibc`]),
//! plus what Debian's `ldconfig` does differently (its built-in directories:
//! [`Arch::debian_trusted_dirs`]; upstream's, as Enterprise Linux builds it:
//! [`Arch::el_trusted_dirs`]); they are held against Debian 11's (2.31), 12's (2.36) and 13's
//! (2.41) real tools in the tests. Both layouts `ldconfig` writes by default are read and
//! written: the new format alone (`glibc-ld.so.cache1.1`, the default since 2.32), and
//! "compat", the old format's entries (`ld.so-1.7.0`) followed by the new format (the default
//! before 2.32: Enterprise Linux 8.0 to 8.3's 2.28; later EL8 builds write the new format,
//! Red Hat having backported 2.33's ldconfig). The string table is laid out as the
//! writer's release lays it out: one copy of each entry's name and path in entry order before
//! 2.33, tail-merged with an extension directory since ([`Cache::generator`] tells them
//! apart). The old format alone (`ldconfig -c old`) is refused with
//! [`LdCacheError::OldFormat`]. Nothing here does I/O: files, directories and configuration
//! are read through the closures the caller passes.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};

mod conf;
mod elf;
mod scan;
#[cfg(test)]
mod tests;

pub(crate) use conf::conf_dirs;
pub(crate) use elf::{probe, probe_at, Probe, Source};
pub(crate) use scan::{is_dso_name, scan_dir, DirEntry, Kind, Resolved, Target};

/// `glibc-ld.so.cache` and version `1.1`: the header of the format glibc writes since 2.32.
const MAGIC_NEW: &[u8; 20] = b"glibc-ld.so.cache1.1";
/// The format before glibc 2.32 (alone, or followed by the new one: "compat").
const MAGIC_OLD: &[u8; 11] = b"ld.so-1.7.0";
/// `struct cache_file_new` (the header), and one `struct file_entry_new`.
const HEADER: usize = 48;
const ENTRY: usize = 24;
/// `struct cache_file` (the old format's header: its magic, padded, and `nlibs`) and one
/// `struct file_entry` (flags, key, value).
const OLD_HEADER: usize = 16;
const OLD_ENTRY: usize = 12;
/// `cache_extension_magic`, `(uint32_t) -358342284`.
const EXT_MAGIC: u32 = 0xeaa4_2174;
const EXT_TAG_GENERATOR: u32 = 0;
const EXT_TAG_HWCAPS: u32 = 1;
/// The extension directory as `ldconfig` sizes it: 8 bytes and room for both sections.
const EXT_DIRECTORY: usize = 8 + 2 * 16;
/// `DL_CACHE_HWCAP_EXTENSION`: the entry is in a glibc-hwcaps subdirectory; bits 32..42 hold
/// the ISA level, the low 32 bits the index of the subdirectory's name.
const HWCAP_EXTENSION: u64 = 1 << 62;
const ISA_LEVEL_MASK: u64 = 0x3ff;
/// `cache_file_new_flags_endian_little`.
#[cfg(test)]
const ENDIAN_LITTLE: u8 = 2;
/// How many strings no entry names a cache may hold (ldconfig's are the names of empty
/// glibc-hwcaps subdirectories).
const MAX_EXTRA_STRINGS: usize = 1024;

/// `FLAG_ELF_LIBC6`: every library `ldconfig` 2.36 and 2.41 store for 64-bit x86 and Arm.
pub(crate) const FLAG_ELF_LIBC6: i32 = 0x0003;
/// `FLAG_X8664_LIB64`, `FLAG_AARCH64_LIB64`: the architecture, or'ed into the flags.
pub(crate) const FLAG_X8664_LIB64: i32 = 0x0300;
pub(crate) const FLAG_AARCH64_LIB64: i32 = 0x0a00;
const FLAG_REQUIRED_MASK: i32 = 0xff00;

/// Why a cache cannot be read, or the emulation cannot say what `ldconfig` would do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LdCacheError {
    /// The old format alone (`ld.so-1.7.0` without the new one after it, `ldconfig -c old`):
    /// not emulated, the caller refuses.
    #[error("ld.so.cache is in the old format alone (ld.so-1.7.0, as `ldconfig -c old` writes it), which is not emulated")]
    OldFormat,
    #[error("not an ld.so.cache (no glibc-ld.so.cache1.1 header)")]
    NotACache,
    #[error("ld.so.cache is not little-endian (byte order flags {0})")]
    ByteOrder(u8),
    #[error("ld.so.cache is malformed: {0}")]
    Malformed(&'static str),
    #[error("ld.so.cache holds a name that is not UTF-8")]
    NotUtf8,
    /// [`Cache::parse_exact`]: writing the parsed cache back gives other bytes.
    #[error("ld.so.cache is not written as this emulation of ldconfig writes it (first difference at byte {0})")]
    NotReproduced(usize),
    /// Where a library goes among others of the same name depends on the order of their
    /// directories, and one of them is not among the directories scanned.
    #[error("ld.so.cache: {0} has the same name as {1}, whose directory is not among those ldconfig scans")]
    UnknownOrder(String, String),
    /// Something `ldconfig` would do that this emulation does not reproduce.
    #[error("ldconfig: {path}: {why}")]
    Unsupported { path: String, why: &'static str },
}

/// The `ldconfig` emulated: glibc `2.minor`, and whose build it is. The rules are upstream
/// glibc's of the release (elf/ldconfig.c, cache.c, readlib.c, readelflib.c; 2.28 to 2.41), as
/// far as the build follows them: Debian 11's 2.31, 12's 2.36 and 13's 2.41 are held against
/// the real tool. Red Hat backports ldconfig changes into Enterprise Linux 8's 2.28 (read from
/// its glibc.spec and patches): from 2.28-142, glibc 2.33's (the new format by default, the
/// extension section with a generator string, tail-merged strings, glibc-hwcaps
/// subdirectories without ISA levels); from 2.28-107, `.dynstr` found through its own
/// segment; from 2.28-243, 2.39's skipping of package managers' temporary names. Where such a
/// backport could change the result and the cache cannot tell whether the build has it, the
/// emulation refuses ([`Glibc::skips_package_temporaries`], [`Glibc::dynstr_in_first_load`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Glibc {
    pub(crate) minor: u32,
    pub(crate) build: Build,
}

/// Whose build of glibc's `ldconfig`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Build {
    /// Debian's or Ubuntu's (`ldconfig (Debian GLIBC …)`): upstream's rules of the release.
    Debian,
    /// Any other (Enterprise Linux's `ldconfig (GNU libc) …`, or a cache without a generator
    /// string on an rpm image): upstream's rules, but a distribution may have backported later
    /// ones.
    Other,
    /// Enterprise Linux 8's 2.28 with glibc 2.33's ldconfig backported (2.28-142 and later):
    /// what a cache with a generator string naming 2.28 was written by.
    El8Backport,
}

impl Glibc {
    #[cfg(test)]
    pub(crate) const V2_31: Glibc = Glibc { minor: 31, build: Build::Debian };
    #[cfg(test)]
    pub(crate) const V2_36: Glibc = Glibc { minor: 36, build: Build::Debian };
    #[cfg(test)]
    pub(crate) const V2_41: Glibc = Glibc { minor: 41, build: Build::Debian };

    /// The `ldconfig` named by a cache's generator string
    /// (`ldconfig (Debian GLIBC 2.36-9+deb12u14) stable release version 2.36`,
    /// `ldconfig (GNU libc) stable release version 2.34`).
    pub(crate) fn from_generator(generator: &str) -> Option<Glibc> {
        let minor = Glibc::minor_of(generator.rsplit("release version ").next()?)?;
        let build = if generator.contains("(Debian GLIBC ") || generator.contains("(Ubuntu GLIBC ")
        {
            Build::Debian
        } else if minor < 33 {
            // Upstream writes a generator string since 2.33 only.
            Build::El8Backport
        } else {
            Build::Other
        };
        Some(Glibc { minor, build })
    }

    /// The release of a package version (`2.28`, `2.36-9+deb12u14`), of `build`.
    pub(crate) fn from_version(version: &str, build: Build) -> Option<Glibc> {
        Some(Glibc { minor: Glibc::minor_of(version)?, build })
    }

    fn minor_of(version: &str) -> Option<u32> {
        let mut parts = version.trim().split('.');
        if parts.next()? != "2" {
            return None;
        }
        let minor: String = parts.next()?.chars().take_while(char::is_ascii_digit).collect();
        minor.parse().ok()
    }

    /// Before 2.37: legacy hwcap subdirectories (`tls`, `x86_64`, `haswell`…) are scanned, a
    /// configured directory may end in `=TYPE` (`libc6`), and readelflib.c reads `PT_INTERP`
    /// and `DT_NEEDED` too (to tell libc5 from libc6, which only decides when it stops).
    fn legacy(self) -> bool {
        self.minor < 37
    }

    /// Since 2.33 (and EL8's backport): each directory's `glibc-hwcaps` subdirectories are
    /// scanned after it.
    fn glibc_hwcaps(self) -> bool {
        self.minor >= 33 || self.build == Build::El8Backport
    }

    /// Since 2.33, but not in EL8's backport: a library's x86 ISA level goes into the hwcap
    /// field of its glibc-hwcaps entry.
    fn isa_levels(self) -> bool {
        self.minor >= 33 && self.build != Build::El8Backport
    }

    /// Before 2.36: `osversion` holds the kernel version of the library's ABI note.
    fn osversion(self) -> bool {
        self.minor < 36
    }

    /// Since 2.34 (`_dl_is_dso`): `ld.so.*` and `ld64.so.*` are libraries' names too.
    fn ld_so_names(self) -> bool {
        self.minor >= 34
    }

    /// Before 2.32 without EL8's backport: an `ld.so.conf` line `hwcap N NAME` defines a
    /// hwcap subdirectory name (2.32 ignores it).
    fn hwcap_directive(self) -> bool {
        self.minor < 32 && self.build != Build::El8Backport
    }

    /// Whether files that rpm (`;`) and dpkg (`.dpkg-new`, `.dpkg-tmp`) write before renaming
    /// are skipped: since 2.39; before, not by Debian's builds, and not known of others (EL8
    /// skips them from 2.28-243, which the cache does not tell).
    fn skips_package_temporaries(self) -> Option<bool> {
        match self.build {
            _ if self.minor >= 39 => Some(true),
            Build::Debian => Some(false),
            Build::Other | Build::El8Backport => None,
        }
    }

    /// Whether readelflib.c finds `.dynstr` at its address less the first `PT_LOAD`'s offset
    /// from its address (before 2.31, fixed by bug 25087) rather than through the segment that
    /// holds it: `None` where not known (EL8's 2.28 has the fix from 2.28-107).
    fn dynstr_in_first_load(self) -> Option<bool> {
        match self.build {
            _ if self.minor >= 31 => Some(false),
            Build::El8Backport => Some(false),
            Build::Debian => Some(true),
            Build::Other => None,
        }
    }
}

/// The architecture of the image, and of its `ldconfig`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    /// From Debian's name (`amd64`, `arm64`).
    pub(crate) fn from_debian(arch: &str) -> Option<Arch> {
        match arch {
            "amd64" => Some(Arch::X86_64),
            "arm64" => Some(Arch::Aarch64),
            _ => None,
        }
    }

    /// From rpm's name (`x86_64`, `aarch64`).
    pub(crate) fn from_rpm(arch: &str) -> Option<Arch> {
        match arch {
            "x86_64" => Some(Arch::X86_64),
            "aarch64" => Some(Arch::Aarch64),
            _ => None,
        }
    }

    pub(crate) fn triplet(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-linux-gnu",
            Arch::Aarch64 => "aarch64-linux-gnu",
        }
    }

    /// The flags `ldconfig` stores for every library of this architecture.
    pub(crate) fn flags(self) -> i32 {
        FLAG_ELF_LIBC6
            | match self {
                Arch::X86_64 => FLAG_X8664_LIB64,
                Arch::Aarch64 => FLAG_AARCH64_LIB64,
            }
    }

    /// The directories Debian's `ldconfig` scans after those of `/etc/ld.so.conf`, in order
    /// (2.36 and 2.41, `ldconfig -v`): the multiarch ones, then `/lib` and `/usr/lib`; not
    /// `/lib64`.
    pub(crate) fn debian_trusted_dirs(self) -> Vec<String> {
        let t = self.triplet();
        vec![format!("/lib/{t}"), format!("/usr/lib/{t}"), "/lib".into(), "/usr/lib".into()]
    }

    /// The directories upstream's `ldconfig` scans after those of `/etc/ld.so.conf`, as
    /// Enterprise Linux builds it (`--prefix=/usr`: slibdir `/lib64`, libdir `/usr/lib64`):
    /// `add_system_dir` (sysdeps/unix/sysv/linux/x86_64/dl-cache.h, and aarch64's) adds each
    /// with its `lib` and the other ABI's sibling, in this order.
    pub(crate) fn el_trusted_dirs(self) -> Vec<String> {
        let other = match self {
            Arch::X86_64 => "libx32",
            Arch::Aarch64 => "libilp32",
        };
        let (lib, lib64) = ("/lib".to_string(), "/lib64".to_string());
        vec![
            lib,
            lib64,
            format!("/{other}"),
            "/usr/lib".into(),
            "/usr/lib64".into(),
            format!("/usr/{other}"),
        ]
    }

    /// `char` is signed on x86 and unsigned on Arm, which orders names with bytes over 0x7f.
    fn signed_char(self) -> bool {
        self == Arch::X86_64
    }

    /// Names of legacy hwcap subdirectories `ldconfig` 2.36 descends into
    /// (`is_hwcap_platform`): the important hwcaps, the platforms and `tls`.
    fn legacy_subdir(self, name: &str) -> bool {
        match self {
            Arch::X86_64 => X86_HWCAP_NAMES.contains(&name),
            Arch::Aarch64 => name == "atomics" || name == "tls",
        }
    }

    /// Names that give a configured directory legacy hwcap bits in 2.36 (`path_hwcap`).
    fn legacy_path_component(self, name: &str) -> bool {
        match self {
            Arch::X86_64 => X86_HWCAP_NAMES.contains(&name),
            Arch::Aarch64 => name == "tls" || AARCH64_HWCAP_NAMES.contains(&name),
        }
    }
}

/// glibc 2.36's x86 hwcap names, platforms, and `tls`.
const X86_HWCAP_NAMES: &[&str] =
    &["sse2", "x86_64", "avx512_1", "i586", "i686", "haswell", "xeon_phi", "tls"];
/// glibc 2.36's `_dl_aarch64_cap_flags`.
const AARCH64_HWCAP_NAMES: &[&str] = &[
    "fp", "asimd", "evtstrm", "aes", "pmull", "sha1", "sha2", "crc32", "atomics", "fphp",
    "asimdhp", "cpuid", "asimdrdm", "jscvt", "fcma", "lrcpc", "dcpop", "sha3", "sm3", "sm4",
    "asimddp", "sha512", "sve", "asimdfhm", "dit", "uscat", "ilrcpc", "flagm", "ssbs", "sb",
    "paca", "pacg",
];

/// What an entry says about the hardware its library needs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Hwcap {
    /// Nothing: every library of a directory from the configuration (the field is 0).
    None,
    /// A library in `DIR/glibc-hwcaps/NAME`, with the x86 ISA level its
    /// `GNU_PROPERTY_X86_ISA_1_NEEDED` note asks for (0 elsewhere).
    Subdir { name: String, isa_level: u32 },
    /// The bits of a legacy hwcap subdirectory (glibc before 2.37), kept as read.
    Legacy(u64),
}

impl Hwcap {
    /// An entry of a legacy hwcap subdirectory.
    pub(crate) fn is_legacy(&self) -> bool {
        self.legacy_bits() != 0
    }

    fn legacy_bits(&self) -> u64 {
        match self {
            Hwcap::Legacy(bits) => *bits,
            _ => 0,
        }
    }

    fn subdir(&self) -> Option<&str> {
        match self {
            Hwcap::Subdir { name, .. } => Some(name),
            _ => None,
        }
    }
}

/// One library in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// `FLAG_ELF_LIBC6` and the architecture's flag ([`Arch::flags`]).
    pub(crate) flags: i32,
    /// The key: the soname (or a symlink's own name: `libz.so` for `libz.so -> libz.so.1`).
    pub(crate) soname: String,
    /// The value: the directory as configured, `/`, the soname (in glibc-hwcaps
    /// subdirectories, the file's own name).
    pub(crate) path: String,
    /// The kernel version the library's ABI note asks for, as `ldconfig` wrote it before 2.36
    /// ([`Object::osversion`](elf::Object::osversion)); `osversion_unused`, always 0, since.
    pub(crate) osversion: u32,
    pub(crate) hwcap: Hwcap,
}

/// A directory `ldconfig` scans, named as it names it (the first spelling configured).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ScanDir {
    pub(crate) path: String,
    /// `Some(NAME)` for `DIR/glibc-hwcaps/NAME`.
    pub(crate) hwcaps: Option<String>,
}

impl ScanDir {
    /// Whether `entry` is one of the libraries a scan of this directory adds.
    fn holds(&self, entry: &Entry) -> bool {
        match (&self.hwcaps, &entry.hwcap) {
            (None, Hwcap::Subdir { .. }) | (Some(_), Hwcap::None | Hwcap::Legacy(_)) => false,
            (None, _) => entry
                .path
                .strip_suffix(entry.soname.as_str())
                .and_then(|p| p.strip_suffix('/'))
                .is_some_and(|dir| dir == self.path),
            (Some(name), Hwcap::Subdir { name: n, .. }) => {
                n == name && entry.path.rsplit_once('/').is_some_and(|(dir, _)| dir == self.path)
            }
        }
    }
}

/// An `ld.so.cache` in the format of glibc 2.32 and later: its entries in file order, the
/// generator string, and the strings its string table holds that no entry points to (names of
/// glibc-hwcaps subdirectories without libraries, which `ldconfig` adds all the same).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cache {
    /// The extension section's generator string, kept as read
    /// (`ldconfig (Debian GLIBC 2.36-9+deb12u14) stable release version 2.36`), as every
    /// `ldconfig` since 2.33 writes it, with the strings tail-merged. `None`: as `ldconfig`
    /// wrote before 2.33: no extension section, no byte-order flags, and each entry's name and
    /// path copied into the string table in entry order.
    pub(crate) generator: Option<String>,
    /// Whether the old format's entries come first ("compat", `ld.so-1.7.0`).
    pub(crate) compat: bool,
    /// The header's byte-order flags, kept as read: `cache_file_new_flags_endian_little` (2)
    /// as glibc writes them since 2.33 (and Debian's 2.31), 0 as glibc wrote before.
    pub(crate) byte_order: u8,
    entries: Vec<Entry>,
    extra_strings: BTreeSet<String>,
}

impl Cache {
    /// An empty cache, as `ldconfig` writes it when it finds no library.
    #[cfg(test)]
    pub(crate) fn new(generator: impl Into<String>) -> Cache {
        Cache {
            generator: Some(generator.into()),
            compat: false,
            byte_order: ENDIAN_LITTLE,
            entries: Vec::new(),
            extra_strings: BTreeSet::new(),
        }
    }

    /// Reads a cache in the new format, alone or after the old one's entries (compat); the old
    /// format alone is [`LdCacheError::OldFormat`]. Every offset and count is checked against the input, and
    /// what is read takes memory in proportion to the input's size (names that many entries
    /// point to are copied out at most about eight times the input's size in all).
    pub(crate) fn parse(file: &[u8]) -> Result<Cache, LdCacheError> {
        use LdCacheError::Malformed;
        // Compat: the new format follows the old one's entries, aligned as `struct
        // cache_file_new` (8 bytes); its string offsets count from its own header, the
        // extension's from the start of the file.
        let (new_at, compat) = if file.starts_with(MAGIC_OLD) {
            let nlibs = le32(file, OLD_HEADER - 4).ok_or(Malformed("truncated header"))?;
            let at = (OLD_HEADER as u64 + u64::from(nlibs) * OLD_ENTRY as u64).next_multiple_of(8);
            match usize::try_from(at) {
                Ok(at) if file.get(at..).is_some_and(|rest| rest.starts_with(MAGIC_NEW)) => {
                    (at, true)
                }
                _ => return Err(LdCacheError::OldFormat),
            }
        } else {
            (0, false)
        };
        let bytes = &file[new_at..];
        if !bytes.starts_with(MAGIC_NEW) {
            return Err(LdCacheError::NotACache);
        }
        if bytes.len() < HEADER {
            return Err(Malformed("truncated header"));
        }
        let nlibs = le32(bytes, 20).ok_or(Malformed("truncated header"))?;
        let len_strings = le32(bytes, 24).ok_or(Malformed("truncated header"))?;
        let byte_order = bytes[28];
        if matches!(byte_order & 3, 1 | 3) {
            return Err(LdCacheError::ByteOrder(byte_order));
        }
        let ext_offset = le32(bytes, 32).ok_or(Malformed("truncated header"))?;
        let size = bytes.len() as u64;
        let table_start = HEADER as u64 + u64::from(nlibs) * ENTRY as u64;
        let table_end = table_start + u64::from(len_strings);
        if table_end > size {
            return Err(Malformed("entries or string table beyond the end"));
        }
        let (table_start, table_end) = (table_start as usize, table_end as usize);
        // Entries may point many times into one long string: what is copied out is bounded by
        // a few times the input (a real cache copies out about twice its string table).
        let budget = std::cell::Cell::new(8 * bytes.len() + 4096);
        let string_at = |offset: u32| -> Result<String, LdCacheError> {
            let offset = offset as usize;
            if offset < table_start || offset >= table_end {
                return Err(Malformed("string offset outside the string table"));
            }
            let rest = &bytes[offset..table_end];
            let len = rest.iter().position(|&b| b == 0).ok_or(Malformed("unterminated string"))?;
            let left =
                budget.get().checked_sub(len).ok_or(Malformed("names repeat beyond reason"))?;
            budget.set(left);
            String::from_utf8(rest[..len].to_vec()).map_err(|_| LdCacheError::NotUtf8)
        };

        // The extension directory: the generator string and the glibc-hwcaps names.
        let mut generator = None;
        let mut hwcaps_names: Option<Vec<String>> = None;
        if ext_offset != 0 {
            let file_size = file.len() as u64;
            let at = u64::from(ext_offset);
            if at % 4 != 0 || at + 8 > file_size {
                return Err(Malformed("extension directory misplaced"));
            }
            let at = at as usize;
            if le32(file, at) != Some(EXT_MAGIC) {
                return Err(Malformed("extension directory without its magic"));
            }
            let count = le32(file, at + 4).ok_or(Malformed("truncated extension directory"))?;
            if at as u64 + 8 + u64::from(count) * 16 > file_size {
                return Err(Malformed("extension directory beyond the end"));
            }
            for i in 0..count as usize {
                let s = at + 8 + i * 16;
                let field = |k: usize| le32(file, s + 4 * k).ok_or(Malformed("truncated section"));
                let (tag, offset, len) = (field(0)?, field(2)?, field(3)?);
                if u64::from(offset) + u64::from(len) > file_size {
                    return Err(Malformed("extension section beyond the end"));
                }
                let data = &file[offset as usize..offset as usize + len as usize];
                match tag {
                    EXT_TAG_GENERATOR => {
                        let text = std::str::from_utf8(data).map_err(|_| LdCacheError::NotUtf8)?;
                        generator = Some(text.to_string());
                    }
                    // ldconfig ignores a misaligned or empty section (cache_extension_verify).
                    EXT_TAG_HWCAPS if len != 0 && offset % 4 == 0 && len % 4 == 0 => {
                        let names = data
                            .chunks_exact(4)
                            .map(|c| string_at(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                            .collect::<Result<Vec<_>, _>>()?;
                        hwcaps_names = Some(names);
                    }
                    _ => {}
                }
            }
        }

        let mut entries = Vec::with_capacity(nlibs as usize);
        for i in 0..nlibs as usize {
            let at = HEADER + i * ENTRY;
            let flags = le32(bytes, at).ok_or(Malformed("truncated entry"))? as i32;
            let key = le32(bytes, at + 4).ok_or(Malformed("truncated entry"))?;
            let value = le32(bytes, at + 8).ok_or(Malformed("truncated entry"))?;
            let osversion = le32(bytes, at + 12).ok_or(Malformed("truncated entry"))?;
            let raw = le64(bytes, at + 16).ok_or(Malformed("truncated entry"))?;
            let hwcap = if raw == 0 {
                Hwcap::None
            } else if (raw >> 32) & !ISA_LEVEL_MASK == HWCAP_EXTENSION >> 32 {
                let index = (raw & 0xffff_ffff) as usize;
                let name = hwcaps_names
                    .as_ref()
                    .and_then(|names| names.get(index))
                    .ok_or(Malformed("glibc-hwcaps index without a name"))?;
                Hwcap::Subdir {
                    name: name.clone(),
                    isa_level: ((raw >> 32) & ISA_LEVEL_MASK) as u32,
                }
            } else {
                Hwcap::Legacy(raw)
            };
            let (soname, path) = (string_at(key)?, string_at(value)?);
            entries.push(Entry { flags, soname, path, osversion, hwcap });
        }

        // Every string that starts the table or follows a NUL was written whole; those no entry
        // names are the names of unused glibc-hwcaps subdirectories, a few at most. (Strings
        // merged into the tail of another never change the layout, so they need not be kept.)
        let mut referenced: std::collections::HashSet<&str> =
            entries.iter().flat_map(|e| [e.soname.as_str(), e.path.as_str()]).collect();
        referenced.extend(hwcaps_names.iter().flatten().map(String::as_str));
        let mut extra_strings = BTreeSet::new();
        let table = &bytes[table_start..table_end];
        // A piece without its NUL is the unterminated tail, which no entry can name.
        for piece in table.split_inclusive(|&b| b == 0).filter_map(|p| p.strip_suffix(&[0])) {
            let s = std::str::from_utf8(piece).map_err(|_| LdCacheError::NotUtf8)?;
            if !s.is_empty() && !referenced.contains(s) && !extra_strings.contains(s) {
                if extra_strings.len() == MAX_EXTRA_STRINGS {
                    return Err(Malformed("many strings no entry names"));
                }
                extra_strings.insert(s.to_string());
            }
        }
        Ok(Cache { generator, compat, byte_order, entries, extra_strings })
    }

    /// [`Cache::parse`], and [`LdCacheError::NotReproduced`] where [`Cache::to_bytes`] would
    /// not give back the same bytes (a cache of glibc 2.32, without tail merging; a cache
    /// changed by hand): the caller then knows that the emulation does not hold for it.
    pub(crate) fn parse_exact(bytes: &[u8]) -> Result<Cache, LdCacheError> {
        let cache = Cache::parse(bytes)?;
        let again = cache.to_bytes();
        if again != bytes {
            let at = again.iter().zip(bytes).position(|(a, b)| a != b);
            return Err(LdCacheError::NotReproduced(at.unwrap_or(again.len().min(bytes.len()))));
        }
        Ok(cache)
    }

    /// The entries in file order (the order `ldconfig` sorts them in).
    pub(crate) fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The glibc release that wrote the cache, from its generator string.
    pub(crate) fn glibc(&self) -> Option<Glibc> {
        self.generator.as_deref().and_then(Glibc::from_generator)
    }

    /// A cache from scratch, as `ldconfig` builds one: every directory of `dirs` (in the order
    /// [`conf_dirs`] gives) is scanned by `scan` ([`scan_dir`]'s entries) and its entries added.
    #[cfg(test)]
    pub(crate) fn build(
        generator: impl Into<String>,
        dirs: &[ScanDir],
        mut scan: impl FnMut(&ScanDir) -> Result<Vec<Entry>, LdCacheError>,
    ) -> Result<Cache, LdCacheError> {
        let mut cache = Cache::new(generator);
        for dir in dirs {
            let entries = scan(dir)?;
            cache.add(dir, entries, dirs)?;
        }
        Ok(cache)
    }

    /// Adds the entries a scan of `dir` found ([`scan_dir`]), each where `ldconfig` would
    /// have put it: sorted by [`compare`], and among entries that compare equal (the same
    /// soname in several directories) in the order of their directories in `order` (all the
    /// directories `ldconfig` scans, [`conf_dirs`]). An entry with the path of one already
    /// there replaces it. The name of a glibc-hwcaps `dir` goes into the string table even
    /// without entries, as `ldconfig` puts it there.
    pub(crate) fn add(
        &mut self,
        dir: &ScanDir,
        entries: Vec<Entry>,
        order: &[ScanDir],
    ) -> Result<(), LdCacheError> {
        let dir_index = |d: &ScanDir| order.iter().position(|o| o == d);
        let Some(index) = dir_index(dir) else {
            return Err(LdCacheError::Unsupported {
                path: dir.path.clone(),
                why: "not among the directories ldconfig scans",
            });
        };
        if let Some(name) = &dir.hwcaps {
            self.extra_strings.insert(name.clone());
        }
        for entry in entries {
            self.entries.retain(|e| e.path != entry.path);
            let signed = (entry.flags & FLAG_REQUIRED_MASK) != FLAG_AARCH64_LIB64;
            let mut at = self.entries.len();
            for (i, old) in self.entries.iter().enumerate() {
                match compare(old, &entry, signed) {
                    Ordering::Greater => {
                        at = i;
                        break;
                    }
                    Ordering::Equal => {
                        let old_dir = order.iter().position(|d| d.holds(old)).ok_or_else(|| {
                            LdCacheError::UnknownOrder(entry.path.clone(), old.path.clone())
                        })?;
                        if old_dir > index {
                            at = i;
                            break;
                        }
                    }
                    Ordering::Less => {}
                }
            }
            self.entries.insert(at, entry);
        }
        Ok(())
    }

    /// Removes the entries a scan of `dir` adds, and returns them.
    pub(crate) fn remove_dir(&mut self, dir: &ScanDir) -> Vec<Entry> {
        let (gone, kept) =
            std::mem::take(&mut self.entries).into_iter().partition(|e| dir.holds(e));
        self.entries = kept;
        gone
    }

    /// Removes the entries `pred` picks; returns how many.
    pub(crate) fn remove(&mut self, mut pred: impl FnMut(&Entry) -> bool) -> usize {
        let before = self.entries.len();
        self.entries.retain(|e| !pred(e));
        before - self.entries.len()
    }

    /// The entries of `dir` become those of a new scan of it: the incremental update after a
    /// package changed the directory.
    #[cfg(test)]
    pub(crate) fn replace_dir(
        &mut self,
        dir: &ScanDir,
        entries: Vec<Entry>,
        order: &[ScanDir],
    ) -> Result<(), LdCacheError> {
        self.remove_dir(dir);
        self.add(dir, entries, order)
    }

    /// The file `ldconfig` writes for these entries (save_cache in glibc's elf/cache.c). In
    /// compat layout first the old format: its header and one entry per library outside a
    /// legacy hwcap subdirectory (flags, and the offsets of the same strings as the new
    /// format's), their count rounded up to even by repeating the last (so that the new format
    /// lands 8-aligned, without padding). Then the new format: the header, the entries in
    /// their order, the string table, and since 2.33 (a generator) padding to 4 bytes and the
    /// extension directory with the glibc-hwcaps names (sorted) and the generator.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut hwcaps: Vec<&str> = self.entries.iter().filter_map(|e| e.hwcap.subdir()).collect();
        hwcaps.sort_unstable();
        hwcaps.dedup();
        // Where each entry's name and path lie in the string table, and where the hwcaps'
        // names do.
        let mut hwcap_at = HashMap::new();
        let (table, strings_at): (Vec<u8>, Vec<(u32, u32)>) = if self.generator.is_some() {
            let mut strings: BTreeSet<&str> =
                self.extra_strings.iter().map(String::as_str).collect();
            strings.extend(hwcaps.iter().copied());
            for e in &self.entries {
                strings.insert(&e.soname);
                strings.insert(&e.path);
            }
            let (table, offsets) = string_table(&strings);
            hwcap_at = hwcaps.iter().map(|h| (*h, offsets[h])).collect();
            let at = self.entries.iter().map(|e| (offsets[&*e.soname], offsets[&*e.path]));
            let at = at.collect();
            (table, at)
        } else {
            let mut table = Vec::new();
            let mut at = Vec::with_capacity(self.entries.len());
            for e in &self.entries {
                let key = table.len() as u32;
                table.extend_from_slice(e.soname.as_bytes());
                table.push(0);
                let value = table.len() as u32;
                table.extend_from_slice(e.path.as_bytes());
                table.push(0);
                at.push((key, value));
            }
            (table, at)
        };

        // String offsets count from the new format's header, in both formats.
        let str_offset = (HEADER + ENTRY * self.entries.len()) as u32;
        let mut out = Vec::new();
        if self.compat {
            let old: Vec<(i32, (u32, u32))> = self
                .entries
                .iter()
                .zip(&strings_at)
                .filter(|(e, _)| e.hwcap.legacy_bits() == 0)
                .map(|(e, &at)| (e.flags, at))
                .collect();
            let count = old.len().next_multiple_of(2);
            out.extend_from_slice(MAGIC_OLD);
            out.push(0);
            put32(&mut out, count as u32);
            for &(flags, (key, value)) in old.iter().chain(old.last().filter(|_| old.len() < count))
            {
                put32(&mut out, flags as u32);
                put32(&mut out, str_offset + key);
                put32(&mut out, str_offset + value);
            }
        }
        let new_at = out.len();
        let ext_offset = (new_at + str_offset as usize + table.len()).next_multiple_of(4);
        out.extend_from_slice(MAGIC_NEW);
        put32(&mut out, self.entries.len() as u32);
        put32(&mut out, table.len() as u32);
        out.extend_from_slice(&[self.byte_order, 0, 0, 0]);
        put32(&mut out, if self.generator.is_some() { ext_offset as u32 } else { 0 });
        out.extend_from_slice(&[0; 12]);
        for (e, (key, value)) in self.entries.iter().zip(&strings_at) {
            put32(&mut out, e.flags as u32);
            put32(&mut out, str_offset + key);
            put32(&mut out, str_offset + value);
            put32(&mut out, e.osversion);
            let raw = match &e.hwcap {
                Hwcap::None => 0,
                Hwcap::Legacy(bits) => *bits,
                Hwcap::Subdir { name, isa_level } => {
                    let index = hwcaps.binary_search(&name.as_str()).unwrap_or(0) as u64;
                    HWCAP_EXTENSION | ((u64::from(*isa_level) & ISA_LEVEL_MASK) << 32) | index
                }
            };
            out.extend_from_slice(&raw.to_le_bytes());
        }
        out.extend_from_slice(&table);
        let Some(generator) = &self.generator else {
            return out;
        };
        out.resize(ext_offset, 0);

        let hwcaps_offset = ext_offset + EXT_DIRECTORY;
        let hwcaps_size = 4 * hwcaps.len();
        let generator_offset =
            if hwcaps.is_empty() { hwcaps_offset - 16 } else { hwcaps_offset + hwcaps_size };
        put32(&mut out, EXT_MAGIC);
        put32(&mut out, if hwcaps.is_empty() { 1 } else { 2 });
        for v in [EXT_TAG_GENERATOR, 0, generator_offset as u32, generator.len() as u32] {
            put32(&mut out, v);
        }
        if !hwcaps.is_empty() {
            for v in [EXT_TAG_HWCAPS, 0, hwcaps_offset as u32, hwcaps_size as u32] {
                put32(&mut out, v);
            }
            for name in &hwcaps {
                put32(&mut out, str_offset + hwcap_at[name]);
            }
        }
        out.extend_from_slice(generator.as_bytes());
        out
    }
}

/// `compare` of glibc's elf/cache.c: the order of entries in the file, `Greater` when `a`
/// comes after `b`. Sonames by [`libcmp`], descending (`libz.so.1` before `libz.so`); then
/// flags, descending; then entries of glibc-hwcaps subdirectories first, by subdirectory
/// name; then (glibc before 2.37) the most legacy hwcap bits first; then (before 2.36) the
/// highest `osversion` first. `signed`: whether `char`
/// is signed for the `ldconfig` that sorts (x86).
pub(crate) fn compare(a: &Entry, b: &Entry, signed: bool) -> Ordering {
    let res = libcmp(b.soname.as_bytes(), a.soname.as_bytes(), signed);
    if res != 0 {
        return res.cmp(&0);
    }
    if a.flags != b.flags {
        return b.flags.cmp(&a.flags);
    }
    match (a.hwcap.subdir(), b.hwcap.subdir()) {
        (Some(_), None) => return Ordering::Less,
        (None, Some(_)) => return Ordering::Greater,
        (Some(x), Some(y)) if x != y => return x.as_bytes().cmp(y.as_bytes()),
        _ => {}
    }
    let (ha, hb) = (a.hwcap.legacy_bits(), b.hwcap.legacy_bits());
    // The newest kernel a library's ABI note asks for first (written before 2.36 only).
    hb.count_ones().cmp(&ha.count_ones()).then(hb.cmp(&ha)).then(b.osversion.cmp(&a.osversion))
}

/// glibc's `_dl_cache_libcmp`: runs of digits compare as numbers (in a C `int`, wrapping),
/// a digit sorts after any other character, other characters by value (`char`, signed on x86).
pub(crate) fn libcmp(p1: &[u8], p2: &[u8], signed: bool) -> i32 {
    let ch = |s: &[u8], i: usize| -> i32 {
        let c = s.get(i).copied().unwrap_or(0);
        if signed {
            i32::from(c as i8)
        } else {
            i32::from(c)
        }
    };
    let digit = |c: i32| (i32::from(b'0')..=i32::from(b'9')).contains(&c);
    let (mut i, mut j) = (0, 0);
    while ch(p1, i) != 0 {
        let (c1, c2) = (ch(p1, i), ch(p2, j));
        if digit(c1) {
            if !digit(c2) {
                return 1;
            }
            let mut v1: i32 = 0;
            while digit(ch(p1, i)) {
                v1 = v1.wrapping_mul(10).wrapping_add(ch(p1, i) - i32::from(b'0'));
                i += 1;
            }
            let mut v2: i32 = 0;
            while digit(ch(p2, j)) {
                v2 = v2.wrapping_mul(10).wrapping_add(ch(p2, j) - i32::from(b'0'));
                j += 1;
            }
            if v1 != v2 {
                return v1.wrapping_sub(v2);
            }
        } else if digit(c2) {
            return -1;
        } else if c1 != c2 {
            return c1 - c2;
        } else {
            i += 1;
            j += 1;
        }
    }
    ch(p1, i) - ch(p2, j)
}

/// glibc's stringtable_finalize (since 2.33): the strings sorted by their reversed bytes,
/// descending (so a string comes right after the longer ones that end with it), each one that
/// is the tail of the string before it placed inside that one, the others one after the other
/// with their NUL. Returns the table and each string's offset in it.
fn string_table<'a>(strings: &BTreeSet<&'a str>) -> (Vec<u8>, HashMap<&'a str, u32>) {
    let mut sorted: Vec<&'a str> = strings.iter().copied().collect();
    sorted.sort_unstable_by(|a, b| b.bytes().rev().cmp(a.bytes().rev()));
    let mut offsets = HashMap::with_capacity(sorted.len());
    let mut previous: Option<(usize, &str)> = None;
    let mut size = 0;
    for s in sorted {
        let offset = match previous {
            None => 0,
            Some((at, p)) if p.len() >= s.len() && p.as_bytes().ends_with(s.as_bytes()) => {
                at + p.len() - s.len()
            }
            Some((at, p)) => at + p.len() + 1,
        };
        offsets.insert(s, offset as u32);
        size = size.max(offset + s.len() + 1);
        previous = Some((offset, s));
    }
    let mut table = vec![0; size];
    for (s, &at) in &offsets {
        table[at as usize..at as usize + s.len()].copy_from_slice(s.as_bytes());
    }
    (table, offsets)
}

fn put32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn le64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}
