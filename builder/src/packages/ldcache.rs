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
//! elf/readelflib.c) as of 2.36 (Debian 12) and 2.41 (Debian 13), plus what Debian's
//! `ldconfig` does differently (its built-in directories: [`Arch::debian_trusted_dirs`]); they
//! are held against both real tools in the tests. Only the format glibc 2.32 and later write by
//! default (`glibc-ld.so.cache1.1` alone) is read and written: the compat format of glibc
//! before 2.32 (`ld.so-1.7.0` followed by the new one, as Enterprise Linux 8's 2.28 writes)
//! is refused with [`LdCacheError::OldFormat`]. Nothing here does I/O: files, directories and
//! configuration are read through the closures the caller passes.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};

/// `glibc-ld.so.cache` and version `1.1`: the header of the format glibc writes since 2.32.
const MAGIC_NEW: &[u8; 20] = b"glibc-ld.so.cache1.1";
/// The format before glibc 2.32 (alone, or followed by the new one: "compat").
const MAGIC_OLD: &[u8; 11] = b"ld.so-1.7.0";
/// `struct cache_file_new` (the header), and one `struct file_entry_new`.
const HEADER: usize = 48;
const ENTRY: usize = 24;
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
    /// The format of glibc before 2.32 (`ld.so-1.7.0`, alone or followed by the new one):
    /// not emulated, the caller refuses.
    #[error("ld.so.cache is in the old format of glibc before 2.32 (ld.so-1.7.0), which is not emulated")]
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

/// The glibc release whose `ldconfig` is emulated, `2.minor`. The rules are glibc's from 2.36
/// (which stopped storing the `.note.ABI-tag` kernel version in `osversion`) to 2.41; 2.36
/// and 2.41 are held against the real tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Glibc {
    pub(crate) minor: u32,
}

impl Glibc {
    #[cfg(test)]
    pub(crate) const V2_36: Glibc = Glibc { minor: 36 };
    #[cfg(test)]
    pub(crate) const V2_41: Glibc = Glibc { minor: 41 };

    /// The release named by a cache's generator string
    /// (`ldconfig (Debian GLIBC 2.36-9+deb12u14) stable release version 2.36`).
    pub(crate) fn from_generator(generator: &str) -> Option<Glibc> {
        let version = generator.rsplit("release version ").next()?;
        let mut parts = version.trim().split('.');
        if parts.next()? != "2" {
            return None;
        }
        let minor: String = parts.next()?.chars().take_while(char::is_ascii_digit).collect();
        Some(Glibc { minor: minor.parse().ok()? })
    }

    /// Before 2.37: legacy hwcap subdirectories (`tls`, `x86_64`, `haswell`…) are scanned, a
    /// configured directory may end in `=TYPE` (`libc6`), and readelflib.c reads `PT_INTERP`
    /// and `DT_NEEDED` too (to tell libc5 from libc6, which only decides when it stops).
    fn legacy(self) -> bool {
        self.minor < 37
    }

    /// Since 2.39: files that rpm (`;`) and dpkg (`.dpkg-new`, `.dpkg-tmp`) write before
    /// renaming are skipped.
    fn skips_package_temporaries(self) -> bool {
        self.minor >= 39
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
    /// `osversion_unused`: always 0 as `ldconfig` 2.36 and later write it, kept as read.
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
    /// (`ldconfig (Debian GLIBC 2.36-9+deb12u14) stable release version 2.36`); `None`: no
    /// extension section (not as any `ldconfig` since 2.33 writes it).
    pub(crate) generator: Option<String>,
    entries: Vec<Entry>,
    extra_strings: BTreeSet<String>,
}

impl Cache {
    /// An empty cache, as `ldconfig` writes it when it finds no library.
    #[cfg(test)]
    pub(crate) fn new(generator: impl Into<String>) -> Cache {
        Cache {
            generator: Some(generator.into()),
            entries: Vec::new(),
            extra_strings: BTreeSet::new(),
        }
    }

    /// Reads a cache in the new format. The old and compat formats (glibc before 2.32) are
    /// [`LdCacheError::OldFormat`]. Every offset and count is checked against the input, and
    /// what is read takes memory in proportion to the input's size (names that many entries
    /// point to are copied out at most about eight times the input's size in all).
    pub(crate) fn parse(bytes: &[u8]) -> Result<Cache, LdCacheError> {
        use LdCacheError::Malformed;
        if bytes.starts_with(MAGIC_OLD) {
            return Err(LdCacheError::OldFormat);
        }
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
            let at = u64::from(ext_offset);
            if at % 4 != 0 || at + 8 > size {
                return Err(Malformed("extension directory misplaced"));
            }
            let at = at as usize;
            if le32(bytes, at) != Some(EXT_MAGIC) {
                return Err(Malformed("extension directory without its magic"));
            }
            let count = le32(bytes, at + 4).ok_or(Malformed("truncated extension directory"))?;
            if at as u64 + 8 + u64::from(count) * 16 > size {
                return Err(Malformed("extension directory beyond the end"));
            }
            for i in 0..count as usize {
                let s = at + 8 + i * 16;
                let field = |k: usize| le32(bytes, s + 4 * k).ok_or(Malformed("truncated section"));
                let (tag, offset, len) = (field(0)?, field(2)?, field(3)?);
                if u64::from(offset) + u64::from(len) > size {
                    return Err(Malformed("extension section beyond the end"));
                }
                let data = &bytes[offset as usize..offset as usize + len as usize];
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
        Ok(Cache { generator, entries, extra_strings })
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

    /// The file `ldconfig` writes for these entries: the header, the entries in their order,
    /// the string table (tail-merged as glibc's stringtable.c does), padding to 4 bytes, and
    /// the extension directory with the glibc-hwcaps names (sorted) and the generator.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut hwcaps: Vec<&str> = self.entries.iter().filter_map(|e| e.hwcap.subdir()).collect();
        hwcaps.sort_unstable();
        hwcaps.dedup();
        let mut strings: BTreeSet<&str> = self.extra_strings.iter().map(String::as_str).collect();
        strings.extend(hwcaps.iter().copied());
        for e in &self.entries {
            strings.insert(&e.soname);
            strings.insert(&e.path);
        }
        let (table, offsets) = string_table(&strings);

        let str_offset = HEADER + ENTRY * self.entries.len();
        let ext_offset = (str_offset + table.len()).next_multiple_of(4);
        let mut out = Vec::with_capacity(ext_offset + 64);
        out.extend_from_slice(MAGIC_NEW);
        put32(&mut out, self.entries.len() as u32);
        put32(&mut out, table.len() as u32);
        out.extend_from_slice(&[ENDIAN_LITTLE, 0, 0, 0]);
        put32(&mut out, if self.generator.is_some() { ext_offset as u32 } else { 0 });
        out.extend_from_slice(&[0; 12]);
        let at = |s: &str| (str_offset + offsets[s] as usize) as u32;
        for e in &self.entries {
            put32(&mut out, e.flags as u32);
            put32(&mut out, at(&e.soname));
            put32(&mut out, at(&e.path));
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
                put32(&mut out, at(name));
            }
        }
        out.extend_from_slice(generator.as_bytes());
        out
    }
}

/// `compare` of glibc's elf/cache.c: the order of entries in the file, `Greater` when `a`
/// comes after `b`. Sonames by [`libcmp`], descending (`libz.so.1` before `libz.so`); then
/// flags, descending; then entries of glibc-hwcaps subdirectories first, by subdirectory
/// name; then (glibc before 2.37) the most legacy hwcap bits first. `signed`: whether `char`
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
    hb.count_ones().cmp(&ha.count_ones()).then(hb.cmp(&ha))
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

// ---------------------------------------------------------------------------------------------
// Shared objects: what ldconfig reads of a file.

/// What `ldconfig` makes of a file with a library's name ([`probe`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Probe {
    /// Not a library to `ldconfig` (a linker script, an executable, another machine's object,
    /// too small, no dynamic section…): skipped, without an entry.
    Skipped,
    Library(Object),
}

/// What `ldconfig` keeps of a shared object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Object {
    /// `DT_SONAME`; without one, `ldconfig` takes the file's name.
    pub(crate) soname: Option<String>,
    /// [`Arch::flags`].
    pub(crate) flags: i32,
    /// From a `GNU_PROPERTY_X86_ISA_1_NEEDED` property (the index of its highest bit; 0
    /// without one, and on Arm). Stored (in `hwcap`) only for glibc-hwcaps subdirectories,
    /// in 2.36 as in 2.41; `osversion` is always 0.
    pub(crate) isa_level: u32,
}

const ET_DYN: u16 = 3;
const EM_386: u16 = 3;
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const PT_GNU_PROPERTY: u32 = 0x6474_e553;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_SONAME: u64 = 14;
const NT_GNU_PROPERTY_TYPE_0: u32 = 5;
const GNU_PROPERTY_X86_ISA_1_NEEDED: u32 = 0xc000_8002;

/// What `ldconfig` of `glibc` on `arch` makes of a file (`bytes`, the whole file), as
/// readlib.c and readelflib.c read it: `Skipped` where `ldconfig` skips it, the soname, flags
/// and ISA level where it takes it. `None` where this emulation cannot say what `ldconfig`
/// does, and the caller refuses: an a.out library, a 32-bit object (i386, x32, 32-bit Arm,
/// which `ldconfig` takes with other flags), on Arm a 64-bit object of another machine (which
/// it takes as Arm's), and where `ldconfig` would read past the end of the file.
pub(crate) fn probe(bytes: &[u8], arch: Arch, glibc: Glibc) -> Option<Probe> {
    probe_at(&bytes, arch, glibc)
}

/// Random access to a file's bytes: what [`probe_at`] reads a library through, so that a large
/// one (a spooled layer file) is read only where ldconfig looks.
pub(crate) trait Source {
    fn len(&self) -> u64;
    /// Fills `buf` from `at`; `None` where the file ends first (or cannot be read).
    fn read_exact_at(&self, at: u64, buf: &mut [u8]) -> Option<()>;
}

impl Source for &[u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
    fn read_exact_at(&self, at: u64, buf: &mut [u8]) -> Option<()> {
        let start = usize::try_from(at).ok()?;
        buf.copy_from_slice(self.get(start..start.checked_add(buf.len())?)?);
        Some(())
    }
}

/// [`probe`] over a [`Source`].
pub(crate) fn probe_at(source: &dyn Source, arch: Arch, glibc: Glibc) -> Option<Probe> {
    // Smaller than `struct exec` or an ELF header: not checked.
    if source.len() < 64 {
        return Some(Probe::Skipped);
    }
    let mut head = [0u8; 64];
    source.read_exact_at(0, &mut head)?;
    let bytes = &head[..];
    let a_info = le32(bytes, 0)? & 0xffff;
    if a_info == 0o413 || a_info == 0o314 {
        return None; // a.out (ZMAGIC, QMAGIC): taken, as libc4.
    }
    if &bytes[..4] != b"\x7fELF" || le16(bytes, 16)? != ET_DYN {
        return Some(Probe::Skipped);
    }
    let class = bytes[4];
    let machine = le16(bytes, 18)?;
    match (arch, class) {
        (Arch::X86_64, 2) if machine == EM_X86_64 => {}
        (Arch::X86_64, 1) if machine == EM_X86_64 || machine == EM_386 => return None,
        (Arch::X86_64, _) => return Some(Probe::Skipped),
        (Arch::Aarch64, 1) => return None,
        (Arch::Aarch64, 2) if machine == EM_AARCH64 => {}
        (Arch::Aarch64, 2) => return None,
        (Arch::Aarch64, _) => return Some(Probe::Skipped),
    }
    Elf64 { b: source, arch, glibc }.read()
}

/// process_elf_file of readelflib.c for a 64-bit little-endian object. `check_ptr` (a pointer
/// past the end makes ldconfig skip the file) becomes `Skipped`; a read past the end, which
/// ldconfig does not guard, `None`.
struct Elf64<'a> {
    b: &'a dyn Source,
    arch: Arch,
    glibc: Glibc,
}

/// The longest string read from a library (a soname, an interpreter): ldconfig reads to the
/// NUL, however far; a longer one is refused.
const MAX_CSTR: u64 = 64 << 10;

impl Elf64<'_> {
    fn len(&self) -> u64 {
        self.b.len()
    }

    fn array<const N: usize>(&self, at: u64) -> Option<[u8; N]> {
        let mut buf = [0u8; N];
        self.b.read_exact_at(at, &mut buf)?;
        Some(buf)
    }

    fn u16_at(&self, at: u64) -> Option<u16> {
        self.array(at).map(u16::from_le_bytes)
    }

    fn u32_at(&self, at: u64) -> Option<u32> {
        self.array(at).map(u32::from_le_bytes)
    }

    fn u64_at(&self, at: u64) -> Option<u64> {
        self.array(at).map(u64::from_le_bytes)
    }

    /// The NUL-terminated string at `at`; `None` if it runs past the end (or past
    /// [`MAX_CSTR`]).
    fn cstr(&self, at: u64) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let mut chunk = [0u8; 256];
        loop {
            let pos = at.checked_add(out.len() as u64)?;
            let n = self.len().checked_sub(pos)?.min(chunk.len() as u64) as usize;
            if n == 0 || out.len() as u64 >= MAX_CSTR {
                return None;
            }
            self.b.read_exact_at(pos, &mut chunk[..n])?;
            match chunk[..n].iter().position(|&c| c == 0) {
                Some(end) => {
                    out.extend_from_slice(&chunk[..end]);
                    return Some(out);
                }
                None => out.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// `strcmp(string at at, s) == 0`, reading no further than strcmp does.
    fn cstr_eq(&self, at: u64, s: &str) -> Option<bool> {
        for (i, want) in s.bytes().chain(std::iter::once(0)).enumerate() {
            let [got] = self.array::<1>(at.checked_add(i as u64)?)?;
            if got != want {
                return Some(false);
            }
        }
        Some(true)
    }

    fn read(&self) -> Option<Probe> {
        let skipped = Some(Probe::Skipped);
        let phoff = self.u64_at(32)?;
        let phnum = u64::from(self.u16_at(56)?);
        if phoff > self.len() {
            return skipped;
        }
        let mut phdrs = Vec::new();
        let (mut dynamic_addr, mut dynamic_size) = (0u32, 0u64);
        let mut isa_level = 0;
        let mut libc6 = false; // 2.36: the flags are FLAG_ELF_LIBC6 rather than FLAG_ELF.
        for i in 0..phnum {
            let at = phoff + i * 56;
            if at > self.len() {
                return skipped;
            }
            let p_type = self.u32_at(at)?;
            let p_offset = self.u64_at(at + 8)?;
            let p_vaddr = self.u64_at(at + 16)?;
            let p_filesz = self.u64_at(at + 32)?;
            let p_align = self.u64_at(at + 48)?;
            phdrs.push((p_type, p_offset, p_vaddr, p_filesz));
            match p_type {
                PT_DYNAMIC => {
                    dynamic_addr = p_offset as u32; // an `unsigned int` in readelflib.c
                    dynamic_size = p_filesz;
                }
                PT_INTERP => {
                    if p_offset > self.len() {
                        return skipped;
                    }
                    if self.glibc.legacy() {
                        for name in self.interpreters() {
                            if self.cstr_eq(p_offset, name)? {
                                libc6 = true;
                                break;
                            }
                        }
                    }
                }
                PT_GNU_PROPERTY if p_align == 8 => {
                    if let Some(level) = self.isa_level(p_offset, p_filesz)? {
                        isa_level = level;
                    }
                }
                _ => {}
            }
        }
        if dynamic_size == 0 {
            return skipped;
        }
        let dynamic = u64::from(dynamic_addr);
        if dynamic > self.len() {
            return skipped;
        }
        let mut strings = None;
        let mut at = dynamic;
        loop {
            let tag = self.u64_at(at)?;
            if tag == DT_NULL {
                break;
            }
            let val = self.u64_at(at + 8)?;
            if tag == DT_STRTAB {
                let load = phdrs.iter().find(|&&(t, _, vaddr, filesz)| {
                    t == PT_LOAD && val >= vaddr && val - vaddr < filesz
                });
                let loadoff = load.map_or(0, |&(_, offset, vaddr, _)| vaddr.wrapping_sub(offset));
                let s = val.wrapping_sub(loadoff);
                if s > self.len() {
                    return skipped;
                }
                strings = Some(s);
                break;
            }
            at += 16;
        }
        let Some(strings) = strings else {
            return skipped;
        };
        let mut soname: Option<Vec<u8>> = None;
        let mut at = dynamic;
        loop {
            let tag = self.u64_at(at)?;
            if tag == DT_NULL {
                break;
            }
            let val = self.u64_at(at + 8)?;
            at += 16;
            if tag != DT_SONAME && !(self.glibc.legacy() && tag == DT_NEEDED) {
                continue;
            }
            let name = strings.wrapping_add(val);
            if name > self.len() {
                return skipped;
            }
            if tag == DT_NEEDED {
                // 2.36 reads DT_NEEDED to tell libc6 from ELF, and stops once it has both.
                if !libc6 {
                    libc6 = self.cstr_eq(name, "libc.so.6")? || self.cstr_eq(name, "libm.so.6")?;
                }
            } else {
                soname = Some(self.cstr(name)?);
                if !self.glibc.legacy() {
                    break;
                }
            }
            if soname.is_some() && libc6 {
                break;
            }
        }
        let soname = match soname {
            Some(s) => Some(String::from_utf8(s).ok()?),
            None => None,
        };
        Some(Probe::Library(Object { soname, flags: self.arch.flags(), isa_level }))
    }

    /// glibc 2.36's known program interpreters (readlib.c, the architecture's ldconfig.h).
    fn interpreters(&self) -> &'static [&'static str] {
        match self.arch {
            Arch::X86_64 => &[
                "/lib/ld-linux-x86-64.so.2",
                "/lib/ld-linux.so.2",
                "/libx32/ld-linux-x32.so.2",
                "/lib64/ld-linux-x86-64.so.2",
            ],
            Arch::Aarch64 => &[
                "/lib/ld-linux-aarch64.so.1",
                "/lib/ld-linux-aarch64_be.so.1",
                "/lib/ld-linux-aarch64_ilp32.so.1",
                "/lib/ld-linux-aarch64_be_ilp32.so.1",
                "/lib/ld-linux.so.3",
                "/lib/ld-linux-armhf.so.3",
            ],
        }
    }

    /// The PT_GNU_PROPERTY walk of readelflib.c: `Some(level)` where x86's read_gnu_property
    /// finds `GNU_PROPERTY_X86_ISA_1_NEEDED` (Arm's stops at the first property).
    fn isa_level(&self, start: u64, size: u64) -> Option<Option<u32>> {
        let mut note = 0u64;
        while note.checked_add(12)? < size {
            let at = start.checked_add(note)?;
            let namesz = self.u32_at(at)?;
            let descsz = self.u32_at(at + 4)?;
            let n_type = self.u32_at(at + 8)?;
            if namesz == 4
                && n_type == NT_GNU_PROPERTY_TYPE_0
                && self.u32_at(at + 12)? == 0x0055_4e47
            {
                if descsz < 8 || descsz % 8 != 0 {
                    return Some(None);
                }
                let mut ptr = at + 16;
                let end = ptr + u64::from(descsz);
                let mut last = 0;
                loop {
                    let p_type = self.u32_at(ptr)?;
                    let datasz = u64::from(self.u32_at(ptr + 4)?);
                    if p_type < last {
                        return Some(None);
                    }
                    ptr += 8;
                    if ptr + datasz > end {
                        return Some(None);
                    }
                    last = p_type;
                    if self.arch != Arch::X86_64 || p_type > GNU_PROPERTY_X86_ISA_1_NEEDED {
                        return Some(None);
                    }
                    if p_type == GNU_PROPERTY_X86_ISA_1_NEEDED {
                        if datasz == 4 {
                            let needed = self.u32_at(ptr)?;
                            if needed != 0 {
                                return Some(Some(31 - needed.leading_zeros()));
                            }
                        }
                        return Some(None);
                    }
                    ptr += datasz.next_multiple_of(8);
                    if ptr + 8 > end {
                        return Some(None);
                    }
                }
            }
            let desc = (12 + u64::from(namesz)).next_multiple_of(8);
            note = note.checked_add((desc + u64::from(descsz)).next_multiple_of(8))?;
        }
        Some(None)
    }
}

// ---------------------------------------------------------------------------------------------
// Directories: which ldconfig scans, and what it finds in one.

/// The kind of a directory entry, as `readdir` tells it (`d_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Symlink,
    Dir,
    /// Devices, FIFOs, sockets: never looked at.
    Other,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DirEntry {
    pub(crate) name: String,
    pub(crate) kind: Kind,
}

/// A path resolved inside the image (symlinks followed, as `stat` does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// What tells two paths to the same directory apart from others (`ldconfig` compares
    /// device and inode): the canonical path inside the image.
    pub(crate) id: String,
    pub(crate) is_dir: bool,
}

/// What a name in a scanned directory leads to, symlinks followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// Nothing: a dangling symlink.
    Missing,
    Directory,
    /// A file, and what [`probe`] makes of it.
    File(Probe),
}

/// What a scan of one directory gives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Scan {
    /// The cache entries, in the order `ldconfig` adds them.
    pub(crate) entries: Vec<Entry>,
    /// `(soname, file)`: the links `ldconfig` makes (`DIR/soname -> file`) unless `DIR/soname`
    /// already is that file (a file named as its soname needs none and is not listed).
    pub(crate) links: Vec<(String, String)>,
    /// Dangling symlinks whose name holds `.so.`: `ldconfig` removes them.
    pub(crate) stale: Vec<String>,
}

/// `_dl_is_dso`: `lib*.so*`, `ld-*.so*`, `ld.so.*`, `ld64.so.*`.
pub(crate) fn is_dso_name(name: &str) -> bool {
    ((name.starts_with("lib") || name.starts_with("ld-")) && name.contains(".so"))
        || name.starts_with("ld.so.")
        || name.starts_with("ld64.so.")
}

/// Names `ldconfig` never reads: prelink's temporaries, and since 2.39 rpm's and dpkg's.
fn temporary_name(name: &str, glibc: Glibc) -> bool {
    let prelink = name.ends_with(".#prelink#")
        || name.len() >= ".#prelink#.XXXXXX".len()
            && name.as_bytes()[name.len() - ".#prelink#.XXXXXX".len()..]
                .starts_with(b".#prelink#.");
    prelink
        || glibc.skips_package_temporaries()
            && (name.contains(';') || name.ends_with(".dpkg-new") || name.ends_with(".dpkg-tmp"))
}

/// search_dir of ldconfig.c: the cache entries (and the links) `ldconfig` of `glibc` on `arch`
/// makes for `dir`, whose entries are `listing` (in `readdir` order, which only decides
/// between files whose names [`libcmp`] finds equal). `inspect(name)` tells what a name leads
/// to; `None` refuses. Libraries with the same soname are one entry (a file is preferred to a
/// symlink, then the name [`libcmp`] finds greatest); a symlink named neither its target's
/// soname nor the `.so` name of it (`libz.so -> libz.so.1`) counts as a file; a symlink that
/// does gives an entry under its own name. Legacy hwcap subdirectories (2.36) are refused.
pub(crate) fn scan_dir(
    glibc: Glibc,
    arch: Arch,
    dir: &ScanDir,
    listing: &[DirEntry],
    mut inspect: impl FnMut(&str) -> Option<Target>,
) -> Result<Scan, LdCacheError> {
    struct Dlib {
        name: String,
        soname: String,
        flags: i32,
        is_link: bool,
        isa_level: u32,
    }
    let unsupported = |name: &str, why: &'static str| LdCacheError::Unsupported {
        path: format!("{}/{name}", dir.path),
        why,
    };
    let in_hwcaps = dir.hwcaps.is_some();
    let mut dlibs: Vec<Dlib> = Vec::new(); // in the order found; ldconfig's list is reversed
    let mut by_soname: HashMap<String, usize> = HashMap::new();
    let mut scan = Scan::default();
    for entry in listing {
        let name = entry.name.as_str();
        if entry.kind == Kind::Other {
            continue;
        }
        let hwcap_name = glibc.legacy() && !in_hwcaps && arch.legacy_subdir(name);
        if !is_dso_name(name) && (entry.kind == Kind::File || (!in_hwcaps && !hwcap_name)) {
            continue;
        }
        if temporary_name(name, glibc) {
            continue;
        }
        let mut target = None;
        let is_dir = match entry.kind {
            Kind::Symlink => {
                let t = inspect(name).ok_or_else(|| unsupported(name, "cannot be read"))?;
                if t == Target::Missing {
                    if name.contains(".so.") {
                        scan.stale.push(name.to_string());
                    }
                    continue;
                }
                let is_dir = t == Target::Directory;
                target = Some(t);
                is_dir
            }
            Kind::Dir => true,
            _ => false,
        };
        if is_dir && hwcap_name {
            return Err(unsupported(
                name,
                "a legacy hwcap subdirectory, which ldconfig 2.36 scans",
            ));
        }
        if entry.kind != Kind::File && entry.kind != Kind::Symlink {
            continue;
        }
        let target = match target {
            Some(t) => t,
            None => inspect(name).ok_or_else(|| unsupported(name, "cannot be read"))?,
        };
        let object = match target {
            Target::Missing | Target::Directory | Target::File(Probe::Skipped) => continue,
            Target::File(Probe::Library(object)) => object,
        };
        let mut soname = object.soname.unwrap_or_else(|| name.to_string());
        let mut is_link = entry.kind == Kind::Symlink;
        if is_link
            && name != soname
            && !(name.ends_with(".so") && soname.as_bytes().starts_with(name.as_bytes()))
        {
            is_link = false;
        }
        if is_link {
            soname = name.to_string();
        }
        let signed = arch.signed_char();
        if let Some(d) = by_soname.get(&soname).map(|&i| &mut dlibs[i]) {
            if (!is_link && d.is_link)
                || (is_link == d.is_link && libcmp(d.name.as_bytes(), name.as_bytes(), signed) < 0)
            {
                d.name = name.to_string();
                d.is_link = is_link;
                d.isa_level = object.isa_level;
            }
            continue;
        }
        by_soname.insert(soname.clone(), dlibs.len());
        dlibs.push(Dlib {
            name: name.to_string(),
            soname,
            flags: object.flags,
            is_link,
            isa_level: object.isa_level,
        });
    }
    for d in dlibs.into_iter().rev() {
        let (file, hwcap) = match &dir.hwcaps {
            None => {
                if !d.is_link && d.name != d.soname {
                    scan.links.push((d.soname.clone(), d.name.clone()));
                }
                (d.soname.clone(), Hwcap::None)
            }
            Some(sub) => (d.name, Hwcap::Subdir { name: sub.clone(), isa_level: d.isa_level }),
        };
        let path = format!("{}/{file}", dir.path);
        scan.entries.push(Entry { flags: d.flags, soname: d.soname, path, osversion: 0, hwcap });
    }
    Ok(scan)
}

/// The directories `ldconfig` of `glibc` scans, in its order: those of `/etc/ld.so.conf`
/// (its `include` globs read in byte order, nested includes relative to the including file),
/// then `trusted` (Debian: [`Arch::debian_trusted_dirs`]). A directory that does not exist is
/// left out; one that is the same as an earlier one (by [`Resolved::id`]) too, the earlier
/// spelling being the one the cache names. After each directory come the subdirectories of its
/// `glibc-hwcaps`. `read(path)`: a file's bytes (`None`: none there, or not a file);
/// `list(dir)`: a directory's entries (empty: none); `resolve(path)`: where a path leads,
/// symlinks followed (`None`: nowhere). Paths are absolute inside the image.
pub(crate) fn conf_dirs(
    glibc: Glibc,
    arch: Arch,
    trusted: &[String],
    mut read: impl FnMut(&str) -> Option<Vec<u8>>,
    mut list: impl FnMut(&str) -> Vec<DirEntry>,
    mut resolve: impl FnMut(&str) -> Option<Resolved>,
) -> Result<Vec<ScanDir>, LdCacheError> {
    let mut conf = Conf { glibc, arch, dirs: Vec::new(), ids: Vec::new(), files_read: 0 };
    conf.parse("/etc/ld.so.conf", 0, &mut read, &mut list, &mut resolve)?;
    for dir in trusted {
        conf.add_dir(dir, &mut list, &mut resolve)?;
    }
    Ok(conf.dirs)
}

/// How deep `include` may nest before the configuration counts as a loop (ldconfig would
/// recurse until it crashes), and how many files it may read in all.
const MAX_INCLUDE_DEPTH: usize = 16;
const MAX_CONF_FILES: usize = 4096;

struct Conf {
    glibc: Glibc,
    arch: Arch,
    dirs: Vec<ScanDir>,
    ids: Vec<String>,
    files_read: usize,
}

impl Conf {
    fn parse(
        &mut self,
        file: &str,
        depth: usize,
        read: &mut dyn FnMut(&str) -> Option<Vec<u8>>,
        list: &mut dyn FnMut(&str) -> Vec<DirEntry>,
        resolve: &mut dyn FnMut(&str) -> Option<Resolved>,
    ) -> Result<(), LdCacheError> {
        self.files_read += 1;
        if depth > MAX_INCLUDE_DEPTH || self.files_read > MAX_CONF_FILES {
            return Err(LdCacheError::Unsupported {
                path: file.into(),
                why: "includes nest too deep, or too many",
            });
        }
        let Some(bytes) = read(file) else {
            return Ok(());
        };
        for raw in bytes.split(|&b| b == b'\n') {
            // C strings: a NUL ends the line; `#` starts a comment.
            let line = raw.split(|&b| b == 0).next().unwrap_or_default();
            let line = line.split(|&b| b == b'#').next().unwrap_or_default();
            let start = line.iter().position(|&b| !is_space(b)).unwrap_or(line.len());
            let line = &line[start..];
            if line.is_empty() {
                continue;
            }
            let blank_at = |n: usize| line.get(n).is_some_and(|&b| b == b' ' || b == b'\t');
            if line.starts_with(b"include") && blank_at(7) {
                for word in line[8..].split(|&b| b == b' ' || b == b'\t').filter(|w| !w.is_empty())
                {
                    let pattern =
                        String::from_utf8(word.to_vec()).map_err(|_| LdCacheError::NotUtf8)?;
                    let pattern = if pattern.starts_with('/') {
                        pattern
                    } else {
                        match file.rfind('/') {
                            Some(0) => format!("/{pattern}"),
                            Some(i) => format!("{}/{pattern}", &file[..i]),
                            None => pattern,
                        }
                    };
                    for path in glob(&pattern, list) {
                        self.parse(&path, depth + 1, read, list, resolve)?;
                    }
                }
            } else if line.len() > 5 && line[..5].eq_ignore_ascii_case(b"hwcap") && blank_at(5) {
                // "hwcap directive ignored"
            } else {
                let mut path = line;
                if self.glibc.legacy() {
                    if let Some(eq) = path.iter().position(|&b| b == b'=') {
                        path = &path[..eq];
                    }
                }
                while let [rest @ .., last] = path {
                    if !is_space(*last) {
                        break;
                    }
                    path = rest;
                }
                while let [rest @ .., b'/'] = path {
                    path = rest;
                }
                if path.is_empty() {
                    continue;
                }
                let path = std::str::from_utf8(path).map_err(|_| LdCacheError::NotUtf8)?;
                self.add_dir(path, list, resolve)?;
            }
        }
        Ok(())
    }

    /// add_dir_1 and add_single_dir: a directory that exists and is not there yet, then its
    /// glibc-hwcaps subdirectories.
    fn add_dir(
        &mut self,
        path: &str,
        list: &mut dyn FnMut(&str) -> Vec<DirEntry>,
        resolve: &mut dyn FnMut(&str) -> Option<Resolved>,
    ) -> Result<(), LdCacheError> {
        let Some(found) = resolve(path) else {
            return Ok(());
        };
        if self.ids.contains(&found.id) {
            return Ok(());
        }
        if self.glibc.legacy() {
            let last = path.rsplit('/').next().unwrap_or(path);
            if self.arch.legacy_path_component(last) {
                return Err(LdCacheError::Unsupported {
                    path: path.into(),
                    why: "a directory with legacy hwcap bits (ldconfig 2.36's path_hwcap)",
                });
            }
        }
        self.ids.push(found.id.clone());
        self.dirs.push(ScanDir { path: path.to_string(), hwcaps: None });
        let mut subdirs: Vec<String> = list(&format!("{path}/glibc-hwcaps"))
            .into_iter()
            .filter(|e| !e.name.starts_with('.') && e.kind != Kind::File && !e.name.contains(':'))
            .map(|e| e.name)
            .collect();
        subdirs.sort();
        for name in subdirs {
            let sub = format!("{path}/glibc-hwcaps/{name}");
            match resolve(&sub) {
                Some(r) if r.is_dir && !self.ids.contains(&r.id) => {
                    self.ids.push(r.id);
                    self.dirs.push(ScanDir { path: sub, hwcaps: Some(name) });
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// C's `isspace` in the C locale.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// `glob(pattern, 0)`: the paths that match, in byte order; a component without wildcards is
/// taken as it is (reading it tells whether it exists).
fn glob(pattern: &str, list: &mut dyn FnMut(&str) -> Vec<DirEntry>) -> Vec<String> {
    let absolute = pattern.starts_with('/');
    let mut paths = vec![String::new()];
    let components: Vec<&str> = pattern.split('/').filter(|c| !c.is_empty()).collect();
    for component in &components {
        let mut next = Vec::new();
        for base in &paths {
            let join = |name: &str| {
                if base.is_empty() && !absolute {
                    name.to_string()
                } else {
                    format!("{base}/{name}")
                }
            };
            if component.contains(['*', '?', '[', '\\']) {
                let dir = if base.is_empty() {
                    if absolute {
                        "/"
                    } else {
                        "."
                    }
                } else {
                    base
                };
                for e in list(dir) {
                    if fnmatch(component.as_bytes(), e.name.as_bytes()) {
                        next.push(join(&e.name));
                    }
                }
            } else {
                next.push(join(component));
            }
        }
        paths = next;
    }
    if components.is_empty() {
        return Vec::new();
    }
    paths.sort();
    paths
}

/// `fnmatch(pattern, name, FNM_PERIOD)` for one path component: `*`, `?`, `[…]` (with `!` or
/// `^`, ranges), `\` escapes; a leading `.` only matches a `.` in the pattern. Backtracks to
/// the last `*` only, so it takes time in proportion to the lengths' product at worst.
fn fnmatch(pattern: &[u8], name: &[u8]) -> bool {
    if name.first() == Some(&b'.') && pattern.first() != Some(&b'.') {
        return false;
    }
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if pattern.get(p) == Some(&b'*') {
            p += 1;
            star = Some((p, n));
            continue;
        }
        if let Some(len) = match_one(&pattern[p.min(pattern.len())..], name[n]) {
            p += len;
            n += 1;
            continue;
        }
        match star {
            Some((after, from)) => {
                p = after;
                n = from + 1;
                star = Some((after, from + 1));
            }
            None => return false,
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&c| c == b'*')
}

/// Whether the first element of `pattern` (not `*`) matches `c`; its length if so.
fn match_one(pattern: &[u8], c: u8) -> Option<usize> {
    match *pattern.first()? {
        b'?' => Some(1),
        b'\\' if pattern.len() > 1 => (pattern[1] == c).then_some(2),
        b'[' => {
            let mut i = 1;
            let negate = matches!(pattern.get(i), Some(b'!' | b'^'));
            if negate {
                i += 1;
            }
            let mut matched = false;
            let mut first = true;
            loop {
                let Some(&lo) = pattern.get(i) else {
                    // No closing bracket: `[` is an ordinary character.
                    return (c == b'[').then_some(1);
                };
                if lo == b']' && !first {
                    return (matched != negate).then_some(i + 1);
                }
                first = false;
                if pattern.get(i + 1) == Some(&b'-')
                    && pattern.get(i + 2).is_some_and(|&h| h != b']')
                {
                    matched |= lo <= c && c <= pattern[i + 2];
                    i += 3;
                } else {
                    matched |= lo == c;
                    i += 1;
                }
            }
        }
        literal => (literal == c).then_some(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    const FIXTURE: &[u8] = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/ldcache/debian13-hwcaps.ld.so.cache"
    ));

    /// `$ERDMA_TEST_CACHE`, else `target/erdma-test-cache`: the debootstrapped roots.
    fn test_cache() -> PathBuf {
        match std::env::var_os("ERDMA_TEST_CACHE") {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/erdma-test-cache"),
        }
    }

    /// The root file system of a debootstrapped test root, when it is there.
    fn debian_root(name: &str) -> Option<PathBuf> {
        let root = test_cache().join(name).join("rootfs");
        if root.join("etc/ld.so.cache").is_file() {
            Some(root)
        } else {
            eprintln!(
                "skipped {name}: no {} (the integration tests debootstrap it)",
                root.display()
            );
            None
        }
    }

    fn root_user() -> bool {
        let root = rustix::process::geteuid().is_root();
        if !root {
            eprintln!("skipped: running ldconfig in a chroot needs root");
        }
        root
    }

    /// A directory seen as an image root: paths resolve inside it as `ldconfig` in a chroot
    /// resolves them.
    struct HostRoot {
        root: PathBuf,
    }

    impl HostRoot {
        /// chroot_canon: the host path of `path`, symlinks followed inside the root.
        fn canon(&self, path: &str) -> Option<PathBuf> {
            let mut todo: Vec<String> =
                path.split('/').filter(|c| !c.is_empty()).rev().map(String::from).collect();
            let mut done: Vec<String> = Vec::new();
            let mut hops = 0;
            while let Some(c) = todo.pop() {
                if c == "." {
                    continue;
                }
                if c == ".." {
                    done.pop();
                    continue;
                }
                let host = self.host(&done).join(&c);
                let meta = fs::symlink_metadata(&host).ok()?;
                if meta.file_type().is_symlink() {
                    hops += 1;
                    if hops > 40 {
                        return None;
                    }
                    let link = fs::read_link(&host).ok()?;
                    let link = link.to_str()?;
                    if link.starts_with('/') {
                        done.clear();
                    }
                    todo.extend(link.split('/').filter(|c| !c.is_empty()).rev().map(String::from));
                } else {
                    done.push(c);
                }
            }
            Some(self.host(&done))
        }

        fn host(&self, components: &[String]) -> PathBuf {
            let mut p = self.root.clone();
            p.extend(components);
            p
        }

        fn read(&self, path: &str) -> Option<Vec<u8>> {
            let p = self.canon(path)?;
            if p.is_file() {
                fs::read(p).ok()
            } else {
                None
            }
        }

        fn list(&self, dir: &str) -> Vec<DirEntry> {
            let Some(p) = self.canon(dir) else { return Vec::new() };
            let Ok(rd) = fs::read_dir(p) else { return Vec::new() };
            rd.filter_map(|e| {
                let e = e.ok()?;
                let t = e.file_type().ok()?;
                let kind = if t.is_symlink() {
                    Kind::Symlink
                } else if t.is_dir() {
                    Kind::Dir
                } else if t.is_file() {
                    Kind::File
                } else {
                    Kind::Other
                };
                Some(DirEntry { name: e.file_name().into_string().ok()?, kind })
            })
            .collect()
        }

        fn resolve(&self, path: &str) -> Option<Resolved> {
            let p = self.canon(path)?;
            Some(Resolved { id: p.to_string_lossy().into_owned(), is_dir: p.is_dir() })
        }

        fn inspect(&self, path: &str, arch: Arch, glibc: Glibc) -> Option<Target> {
            match self.canon(path) {
                None => Some(Target::Missing),
                Some(p) if p.is_dir() => Some(Target::Directory),
                Some(p) => probe(&fs::read(p).ok()?, arch, glibc).map(Target::File),
            }
        }

        fn conf_dirs(&self, glibc: Glibc, arch: Arch) -> Vec<ScanDir> {
            conf_dirs(
                glibc,
                arch,
                &arch.debian_trusted_dirs(),
                |p| self.read(p),
                |p| self.list(p),
                |p| self.resolve(p),
            )
            .expect("conf_dirs")
        }

        fn scan(&self, glibc: Glibc, arch: Arch, dir: &ScanDir) -> Scan {
            let listing = self.list(&dir.path);
            scan_dir(glibc, arch, dir, &listing, |name| {
                self.inspect(&format!("{}/{name}", dir.path), arch, glibc)
            })
            .expect("scan_dir")
        }

        /// What `ldconfig` would write for this root, from scratch.
        fn build(&self, glibc: Glibc, arch: Arch, generator: &str) -> Cache {
            let dirs = self.conf_dirs(glibc, arch);
            Cache::build(generator, &dirs, |d| Ok(self.scan(glibc, arch, d).entries))
                .expect("build")
        }

        fn cache(&self) -> Vec<u8> {
            fs::read(self.root.join("etc/ld.so.cache")).expect("ld.so.cache")
        }
    }

    /// A real `ldconfig` over a tree: the host's (`-r`), or a static one copied into the tree
    /// and run in a chroot.
    enum Tool {
        Host,
        Static(PathBuf),
    }

    impl Tool {
        fn run(&self, tree: &Path) {
            let status = match self {
                Tool::Host => Command::new("/sbin/ldconfig").arg("-r").arg(tree).status(),
                Tool::Static(binary) => {
                    fs::copy(binary, tree.join(".ldconfig")).expect("copy ldconfig");
                    let status = Command::new("chroot").arg(tree).arg("/.ldconfig").status();
                    fs::remove_file(tree.join(".ldconfig")).expect("remove ldconfig");
                    status
                }
            };
            assert!(status.expect("ldconfig runs").success(), "ldconfig failed");
        }

        /// The host's ldconfig (2.36 on Debian 12) and, when its root is there, Debian 13's.
        fn available() -> Vec<(Tool, &'static str)> {
            let mut tools = Vec::new();
            if Path::new("/sbin/ldconfig").is_file() {
                tools.push((Tool::Host, "host"));
            } else {
                eprintln!("skipped the host's ldconfig: no /sbin/ldconfig");
            }
            if let Some(root) = debian_root("debian13-minbase") {
                tools.push((Tool::Static(root.join("usr/sbin/ldconfig")), "debian13"));
            }
            tools
        }
    }

    const MULTIARCH: &str = "/usr/lib/x86_64-linux-gnu";

    /// The host's file behind a soname link of its multiarch directory.
    fn host_lib(soname: &str) -> Option<PathBuf> {
        fs::canonicalize(Path::new(MULTIARCH).join(soname)).ok()
    }

    /// Copies the host's `soname` into `dir` of the tree under its file name, with the soname
    /// link when `link`; returns the file name.
    fn install(tree: &Path, dir: &str, soname: &str, link: bool) -> String {
        let src = host_lib(soname).expect("host library");
        let file = src.file_name().unwrap().to_str().unwrap().to_string();
        let dest = tree.join(dir.trim_start_matches('/'));
        fs::create_dir_all(&dest).unwrap();
        fs::copy(&src, dest.join(&file)).unwrap();
        if link && file != soname {
            std::os::unix::fs::symlink(&file, dest.join(soname)).unwrap();
        }
        file
    }

    fn write(tree: &Path, path: &str, text: &str) {
        let p = tree.join(path.trim_start_matches('/'));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    /// A merged-/usr tree configured as Debian's (`/lib -> usr/lib`, the multiarch
    /// ld.so.conf.d files) with zlib and bzip2 in the multiarch directory.
    fn debian_like_tree() -> Option<tempfile::TempDir> {
        for soname in ["libz.so.1", "libbz2.so.1.0", "libuuid.so.1", "liblzma.so.5"] {
            if host_lib(soname).is_none() {
                eprintln!("skipped: the host has no {MULTIARCH}/{soname}");
                return None;
            }
        }
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        for d in ["usr/lib/x86_64-linux-gnu", "usr/local/lib", "var/cache/ldconfig", "etc"] {
            fs::create_dir_all(t.join(d)).unwrap();
        }
        std::os::unix::fs::symlink("usr/lib", t.join("lib")).unwrap();
        write(t, "/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n\n");
        write(t, "/etc/ld.so.conf.d/libc.conf", "# libc default configuration\n/usr/local/lib\n");
        write(
            t,
            "/etc/ld.so.conf.d/x86_64-linux-gnu.conf",
            "# Multiarch support\n/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n",
        );
        install(t, MULTIARCH, "libz.so.1", true);
        std::os::unix::fs::symlink("libz.so.1", t.join("usr/lib/x86_64-linux-gnu/libz.so"))
            .unwrap();
        install(t, MULTIARCH, "libbz2.so.1.0", true);
        Some(tree)
    }

    #[test]
    fn host_cache_round_trips() {
        let Ok(bytes) = fs::read("/etc/ld.so.cache") else {
            eprintln!("skipped: no /etc/ld.so.cache");
            return;
        };
        let cache = Cache::parse_exact(&bytes).expect("the host's cache reads and writes back");
        assert!(!cache.entries().is_empty());
        assert!(cache.glibc().is_some(), "{:?}", cache.generator);
    }

    #[test]
    fn debian_root_caches_round_trip() {
        for (name, glibc) in [
            ("debian12-minbase", Glibc::V2_36),
            ("debian12-minbase-arm64", Glibc::V2_36),
            ("debian13-minbase", Glibc::V2_41),
        ] {
            let Some(root) = debian_root(name) else { continue };
            let bytes = HostRoot { root }.cache();
            let cache = Cache::parse_exact(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(cache.glibc(), Some(glibc), "{name}");
            assert!(cache.entries().iter().any(|e| e.soname == "libc.so.6"), "{name}");
        }
    }

    #[test]
    fn fixture_round_trips() {
        let cache = Cache::parse_exact(FIXTURE).expect("the fixture reads and writes back");
        assert_eq!(cache.glibc(), Some(Glibc::V2_41));
        let paths: Vec<&str> = cache.entries().iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/opt/x/lib/libz.so.1",
                "/lib/x86_64-linux-gnu/libz.so.1",
                "/lib/x86_64-linux-gnu/libz.so",
                "/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libv.so.1",
                "/lib/x86_64-linux-gnu/libv.so.1",
                "/lib/x86_64-linux-gnu/libbz2.so.1.0",
            ]
        );
        assert_eq!(
            cache.entries()[3].hwcap,
            Hwcap::Subdir { name: "x86-64-v3".into(), isa_level: 2 }
        );
        assert!(cache
            .entries()
            .iter()
            .all(|e| e.flags == Arch::X86_64.flags() && e.osversion == 0));
        // The unused x86-64-v4 subdirectory's name stays in the string table.
        assert_eq!(cache.extra_strings.iter().collect::<Vec<_>>(), ["x86-64-v4"]);
        let mut without = cache.clone();
        without.extra_strings.clear();
        assert_ne!(without.to_bytes(), FIXTURE);
        assert_eq!(without.remove(|e| e.soname == "libz.so.1"), 2);
        assert_eq!(without.entries().len(), 4);
    }

    #[test]
    fn old_format_is_refused() {
        let mut compat = b"ld.so-1.7.0".to_vec();
        compat.extend_from_slice(&[0; 5]);
        compat.extend_from_slice(FIXTURE);
        assert_eq!(Cache::parse(&compat), Err(LdCacheError::OldFormat));
        assert_eq!(Cache::parse(b"hello"), Err(LdCacheError::NotACache));
    }

    /// The Debian roots' caches, made by their own ldconfig, are what scanning their
    /// directories from scratch gives (arm64 too: no tool runs).
    #[test]
    fn rebuilt_from_scratch_as_ldconfig_wrote_it() {
        for (name, arch) in [
            ("debian12-minbase", "amd64"),
            ("debian12-minbase-arm64", "arm64"),
            ("debian13-minbase", "amd64"),
        ] {
            let arch = Arch::from_debian(arch).unwrap();
            let Some(root) = debian_root(name) else { continue };
            let root = HostRoot { root };
            let bytes = root.cache();
            let base = Cache::parse(&bytes).unwrap();
            let glibc = base.glibc().unwrap();
            let rebuilt = root.build(glibc, arch, base.generator.as_deref().unwrap());
            assert_eq!(rebuilt.entries(), base.entries(), "{name}");
            assert!(rebuilt.to_bytes() == bytes, "{name}: the rebuilt cache differs");
        }
    }

    /// The incremental update of a package install held against the real tool: a new
    /// directory through ld.so.conf.d (with a library of the same soname as one in the
    /// multiarch directory, which it precedes), a new library in the multiarch directory, and
    /// the same soname in the trusted /usr/lib, which comes after it.
    #[test]
    fn incremental_update_as_ldconfig_writes_it() {
        if !root_user() {
            return;
        }
        for (tool, what) in Tool::available() {
            let Some(tree) = debian_like_tree() else { return };
            let t = tree.path();
            tool.run(t);
            let base = Cache::parse_exact(&fs::read(t.join("etc/ld.so.cache")).unwrap())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let glibc = base.glibc().unwrap();
            let root = HostRoot { root: t.to_path_buf() };
            assert_eq!(root.build(glibc, Arch::X86_64, base.generator.as_deref().unwrap()), base);

            // The "package": /opt/x/lib with libuuid (no soname link: ldconfig makes it) and a
            // libz of its own; liblzma into the multiarch directory; a libz in /usr/lib.
            write(t, "/etc/ld.so.conf.d/x.conf", "/opt/x/lib/\n");
            let uuid = install(t, "/opt/x/lib", "libuuid.so.1", false);
            install(t, "/opt/x/lib", "libz.so.1", true);
            install(t, MULTIARCH, "liblzma.so.5", true);
            install(t, "/usr/lib", "libz.so.1", true);
            let changed: Vec<String> = ["/opt/x/lib", MULTIARCH, "/usr/lib"]
                .iter()
                .map(|d| root.resolve(d).unwrap().id)
                .collect();

            let dirs = root.conf_dirs(glibc, Arch::X86_64);
            let mut ours = base.clone();
            for dir in &dirs {
                if changed.contains(&root.resolve(&dir.path).unwrap().id) {
                    let scan = root.scan(glibc, Arch::X86_64, dir);
                    if dir.path == "/opt/x/lib" {
                        assert!(scan.links.contains(&("libuuid.so.1".into(), uuid.clone())));
                    }
                    ours.replace_dir(dir, scan.entries, &dirs).unwrap();
                }
            }
            tool.run(t);
            let real = fs::read(t.join("etc/ld.so.cache")).unwrap();
            let zs: Vec<&str> = ours
                .entries()
                .iter()
                .filter(|e| e.soname == "libz.so.1")
                .map(|e| e.path.as_str())
                .collect();
            assert_eq!(
                zs,
                ["/opt/x/lib/libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1", "/lib/libz.so.1"]
            );
            assert!(ours.to_bytes() == real, "{what}: the updated cache differs from ldconfig's");
            assert_eq!(fs::read_link(t.join("opt/x/lib/libuuid.so.1")).unwrap(), Path::new(&uuid));
            let again = root.build(glibc, Arch::X86_64, base.generator.as_deref().unwrap());
            assert!(again.to_bytes() == real, "{what}: the rebuilt cache differs from ldconfig's");
        }
    }

    /// glibc-hwcaps subdirectories (libraries built with an ISA level, an empty one) added to
    /// a tree, against the real tool; needs a C compiler.
    #[test]
    fn hwcaps_subdirectories_as_ldconfig_writes_them() {
        if !root_user() {
            return;
        }
        if Command::new("cc").arg("--version").output().is_err() {
            eprintln!("skipped: no cc to build libraries with an ISA level");
            return;
        }
        for (tool, what) in Tool::available() {
            let Some(tree) = debian_like_tree() else { return };
            let t = tree.path();
            tool.run(t);
            let base = Cache::parse_exact(&fs::read(t.join("etc/ld.so.cache")).unwrap()).unwrap();
            let glibc = base.glibc().unwrap();
            let root = HostRoot { root: t.to_path_buf() };
            let hw = t.join("usr/lib/x86_64-linux-gnu/glibc-hwcaps");
            fs::create_dir_all(hw.join("x86-64-v4")).unwrap();
            let src = t.join("v.c");
            fs::write(&src, "int v(void) { return 3; }\n").unwrap();
            for (dir, level) in [("x86-64-v3", Some("x86-64-v3")), ("x86-64-v2", None), ("", None)]
            {
                let out =
                    if dir.is_empty() { t.join("usr/lib/x86_64-linux-gnu") } else { hw.join(dir) };
                fs::create_dir_all(&out).unwrap();
                let mut cc = Command::new("cc");
                cc.args(["-shared", "-fPIC", "-Wl,-soname,libv.so.1", "-o"])
                    .arg(out.join("libv.so.1.0"));
                if let Some(level) = level {
                    cc.arg(format!("-Wl,-z,{level}"));
                }
                assert!(cc.arg(&src).status().unwrap().success());
            }
            fs::remove_file(src).unwrap();
            let dirs = root.conf_dirs(glibc, Arch::X86_64);
            let mut ours = base.clone();
            for dir in
                dirs.iter().filter(|d| d.hwcaps.is_some() || d.path == "/lib/x86_64-linux-gnu")
            {
                let scan = root.scan(glibc, Arch::X86_64, dir);
                ours.replace_dir(dir, scan.entries, &dirs).unwrap();
            }
            tool.run(t);
            let real = fs::read(t.join("etc/ld.so.cache")).unwrap();
            let parsed = Cache::parse_exact(&real).unwrap();
            assert!(parsed
                .entries()
                .iter()
                .any(|e| e.hwcap == Hwcap::Subdir { name: "x86-64-v3".into(), isa_level: 2 }
                    && e.path.ends_with("/x86-64-v3/libv.so.1.0")));
            assert_eq!(ours.entries(), parsed.entries(), "{what}");
            assert!(ours.to_bytes() == real, "{what}: the cache differs from ldconfig's");
        }
    }

    /// What a directory may hold besides plain libraries, from scratch against the real tool:
    /// a symlink named neither as the soname nor as its `.so` (a "file" that wins by name), two
    /// files of one soname, dpkg's temporary name, a dangling link, a linker script, a PIE
    /// executable (ET_DYN, no soname), a directory named like a library.
    #[test]
    fn odd_directory_contents_as_ldconfig() {
        if !root_user() {
            return;
        }
        for (tool, what) in Tool::available() {
            let Some(tree) = debian_like_tree() else { return };
            let t = tree.path();
            write(t, "/etc/ld.so.conf.d/odd.conf", "/opt/odd\n");
            let odd = "/opt/odd";
            let z = install(t, odd, "libz.so.1", true);
            install(t, "/usr/local/lib", "libz.so.1", true);
            let o = t.join("opt/odd");
            std::os::unix::fs::symlink(&z, o.join("libzother.so")).unwrap();
            std::os::unix::fs::symlink("libz.so.1", o.join("libz.so")).unwrap();
            let bz2 = install(t, odd, "libbz2.so.1.0", false);
            fs::copy(o.join(&bz2), o.join("libbz2.so.1.0.10")).unwrap();
            fs::copy(host_lib("libuuid.so.1").unwrap(), o.join("libuuid.so.1.dpkg-new")).unwrap();
            std::os::unix::fs::symlink("libgone.so.1.0", o.join("libgone.so.1")).unwrap();
            fs::write(o.join("libfake.so"), "/* GNU ld script */\nGROUP ( libz.so.1 )\n").unwrap();
            if let Ok(exe) = fs::canonicalize("/usr/bin/true") {
                fs::copy(exe, o.join("libtrue.so.1")).unwrap();
            }
            fs::create_dir(o.join("libdir.so.1")).unwrap();
            let root = HostRoot { root: t.to_path_buf() };
            let dir = ScanDir { path: odd.into(), hwcaps: None };
            let glibc = if what == "host" { Glibc::V2_36 } else { Glibc::V2_41 };
            let scan = root.scan(glibc, Arch::X86_64, &dir);
            assert_eq!(scan.stale, ["libgone.so.1"]);
            assert!(scan.links.contains(&("libbz2.so.1.0".into(), "libbz2.so.1.0.10".into())));
            tool.run(t);
            let real = fs::read(t.join("etc/ld.so.cache")).unwrap();
            let parsed = Cache::parse_exact(&real).unwrap();
            assert_eq!(parsed.glibc(), Some(glibc));
            let ours = root.build(glibc, Arch::X86_64, parsed.generator.as_deref().unwrap());
            assert_eq!(ours.entries(), parsed.entries(), "{what}");
            assert!(ours.to_bytes() == real, "{what}: the cache differs from ldconfig's");
            assert!(fs::symlink_metadata(o.join("libgone.so.1")).is_err(), "ldconfig removes it");
            assert_eq!(
                fs::read_link(o.join("libbz2.so.1.0")).unwrap(),
                Path::new("libbz2.so.1.0.10")
            );
        }
    }

    #[test]
    fn truncated_and_corrupted_caches_are_errors() {
        let mut samples = vec![FIXTURE.to_vec()];
        if let Ok(host) = fs::read("/etc/ld.so.cache") {
            samples.push(host);
        }
        for bytes in &samples {
            for n in 0..bytes.len() {
                assert!(Cache::parse(&bytes[..n]).is_err(), "a cache cut at {n} bytes");
            }
        }
        let bytes = FIXTURE;
        for i in 0..bytes.len() {
            for v in [0, 0xff, bytes[i] ^ 0x80, bytes[i].wrapping_add(1)] {
                let mut b = bytes.to_vec();
                b[i] = v;
                if let Ok(cache) = Cache::parse(&b) {
                    cache.to_bytes();
                }
            }
        }
        let with = |at: usize, v: u32| {
            let mut b = FIXTURE.to_vec();
            b[at..at + 4].copy_from_slice(&v.to_le_bytes());
            Cache::parse(&b)
        };
        assert!(matches!(with(20, u32::MAX), Err(LdCacheError::Malformed(_))), "nlibs");
        assert!(matches!(with(24, u32::MAX), Err(LdCacheError::Malformed(_))), "len_strings");
        assert!(matches!(with(32, u32::MAX - 3), Err(LdCacheError::Malformed(_))), "extension");
        assert!(matches!(with(HEADER + 4, u32::MAX), Err(LdCacheError::Malformed(_))), "key");
        assert!(matches!(with(HEADER + 8, 0), Err(LdCacheError::Malformed(_))), "value");
        let ext = le32(FIXTURE, 32).unwrap() as usize;
        assert!(matches!(with(ext + 4, u32::MAX), Err(LdCacheError::Malformed(_))), "sections");
        assert!(matches!(with(ext + 8 + 12, u32::MAX), Err(LdCacheError::Malformed(_))), "size");
        let mut b = FIXTURE.to_vec();
        b[28] = 3;
        assert_eq!(Cache::parse(&b), Err(LdCacheError::ByteOrder(3)));
        // A thousand entries naming one long string: refused before it is copied a thousand
        // times.
        let (n, long) = (1000u32, 10_000);
        let mut b = MAGIC_NEW.to_vec();
        let table = HEADER as u32 + n * ENTRY as u32;
        for v in [n, long + 1, 2, 0, 0, 0, 0] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(b.len(), HEADER);
        for _ in 0..n {
            for v in [0x303, table, table, 0, 0, 0] {
                b.extend_from_slice(&u32::to_le_bytes(v));
            }
        }
        b.resize(b.len() + long as usize, b'x');
        b.push(0);
        assert_eq!(Cache::parse(&b), Err(LdCacheError::Malformed("names repeat beyond reason")));
    }

    #[test]
    fn shared_objects_read_as_ldconfig_reads_them() {
        let Some(path) = host_lib("libz.so.1") else {
            eprintln!("skipped: no host libz");
            return;
        };
        let bytes = fs::read(path).unwrap();
        let want = Object { soname: Some("libz.so.1".into()), flags: 0x0303, isa_level: 0 };
        for glibc in [Glibc::V2_36, Glibc::V2_41] {
            assert_eq!(probe(&bytes, Arch::X86_64, glibc), Some(Probe::Library(want.clone())));
        }
        // Another machine's 64-bit object: skipped by x86's ldconfig, refused for Arm's.
        assert_eq!(probe(&bytes, Arch::Aarch64, Glibc::V2_41), None);
        assert_eq!(
            probe(b"/* GNU ld script */ GROUP ( libc.so.6 )", Arch::X86_64, Glibc::V2_36),
            Some(Probe::Skipped)
        );
        let mut text = b"INPUT(-lz)".to_vec();
        text.resize(200, b' ');
        assert_eq!(probe(&text, Arch::X86_64, Glibc::V2_41), Some(Probe::Skipped));
        let mut elf32 = bytes[..64].to_vec();
        elf32[4] = 1;
        elf32[18] = 3; // EM_386
        assert_eq!(probe(&elf32, Arch::X86_64, Glibc::V2_36), None);
        let mut aout = vec![0u8; 64];
        aout[..2].copy_from_slice(&0o413u16.to_le_bytes());
        assert_eq!(probe(&aout, Arch::X86_64, Glibc::V2_36), None);
        let mut exec = bytes.clone();
        exec[16] = 2; // ET_EXEC
        assert_eq!(probe(&exec, Arch::X86_64, Glibc::V2_36), Some(Probe::Skipped));
        if let Some(arm) = debian_root("debian12-minbase-arm64") {
            let arm = HostRoot { root: arm };
            let bytes = arm.read("/lib/aarch64-linux-gnu/libz.so.1").unwrap();
            let want = Object { soname: Some("libz.so.1".into()), flags: 0x0a03, isa_level: 0 };
            assert_eq!(probe(&bytes, Arch::Aarch64, Glibc::V2_36), Some(Probe::Library(want)));
            assert_eq!(probe(&bytes, Arch::X86_64, Glibc::V2_36), Some(Probe::Skipped));
        }
        // Hostile bytes: cut anywhere, or with bytes changed, never a panic.
        for n in (0..bytes.len()).step_by(7).chain(0..512) {
            probe(&bytes[..n], Arch::X86_64, Glibc::V2_36);
            probe(&bytes[..n], Arch::X86_64, Glibc::V2_41);
        }
        for i in (0..bytes.len().min(64 * 1024)).step_by(3) {
            let mut b = bytes.clone();
            b[i] ^= 0xa5;
            probe(&b, Arch::X86_64, Glibc::V2_36);
            b[i] = 0xff;
            probe(&b, Arch::X86_64, Glibc::V2_41);
        }
    }

    #[test]
    fn include_patterns_match_as_glob() {
        assert!(fnmatch(b"*.conf", b"x86_64-linux-gnu.conf"));
        assert!(!fnmatch(b"*.conf", b".hidden.conf"));
        assert!(!fnmatch(b"*.conf", b"x.conf.bak"));
        assert!(fnmatch(b".*", b".hidden"));
        assert!(fnmatch(b"[a-c]?.c*f", b"b1.conf"));
        assert!(!fnmatch(b"[!a-c]*", b"b"));
        assert!(fnmatch(b"[]x]", b"]"));
        assert!(fnmatch(b"\\*", b"*"));
        assert!(!fnmatch(b"\\*", b"a"));
        assert!(fnmatch(b"a*b*c", b"axxbyyc"));
        assert!(!fnmatch(b"a*b*c", b"axxbyy"));
        assert!(fnmatch(b"[", b"["));
        assert!(fnmatch(b"*", b""));
        // Many stars cost no more than the lengths' product.
        let stars = "*a".repeat(200);
        assert!(!fnmatch(stars.as_bytes(), "a".repeat(199).as_bytes()));
        let mut fs = MemFs::default();
        fs.dirs.insert("/etc".into());
        fs.files.insert("/etc/ld.so.conf".into(), b"include /etc/ld.so.conf\n".to_vec());
        assert!(matches!(fs.conf_dirs(Glibc::V2_41), Err(LdCacheError::Unsupported { .. })));
    }

    #[test]
    fn sonames_sort_as_dl_cache_libcmp() {
        let cmp = |a: &str, b: &str| libcmp(a.as_bytes(), b.as_bytes(), true).signum();
        assert_eq!(cmp("libfoo.so.10", "libfoo.so.9"), 1);
        assert_eq!(cmp("libz.so.1", "libz.so"), 1);
        assert_eq!(cmp("libz.so", "libz.so"), 0);
        assert_eq!(cmp("libfoo.so.01", "libfoo.so.1"), 0);
        assert_eq!(cmp("lib2", "liba"), 1);
        assert_eq!(cmp("libA", "liba"), -1);
        // Bytes over 0x7f: below NUL for a signed char (x86), above for Arm's.
        assert_eq!(libcmp("lib\u{e9}".as_bytes(), b"lib", true).signum(), -1);
        assert_eq!(libcmp("lib\u{e9}".as_bytes(), b"lib", false).signum(), 1);
    }

    /// An image as a map of files, directories and symlinks.
    #[derive(Default)]
    struct MemFs {
        files: HashMap<String, Vec<u8>>,
        dirs: BTreeSet<String>,
        links: HashMap<String, String>,
    }

    impl MemFs {
        fn canon(&self, path: &str) -> String {
            let mut out = String::new();
            for c in path.split('/').filter(|c| !c.is_empty()) {
                out = format!("{out}/{c}");
                if let Some(target) = self.links.get(&out) {
                    out = target.clone();
                }
            }
            out
        }

        fn list(&self, dir: &str) -> Vec<DirEntry> {
            let dir = self.canon(dir);
            let child = |p: &String| {
                p.strip_prefix(&dir)?
                    .strip_prefix('/')
                    .filter(|n| !n.contains('/'))
                    .map(String::from)
            };
            let mut out: Vec<DirEntry> = Vec::new();
            for (set, kind) in [
                (self.files.keys().collect::<Vec<_>>(), Kind::File),
                (self.dirs.iter().collect(), Kind::Dir),
                (self.links.keys().collect(), Kind::Symlink),
            ] {
                out.extend(set.into_iter().filter_map(child).map(|name| DirEntry { name, kind }));
            }
            out
        }

        fn conf_dirs(&self, glibc: Glibc) -> Result<Vec<ScanDir>, LdCacheError> {
            conf_dirs(
                glibc,
                Arch::X86_64,
                &Arch::X86_64.debian_trusted_dirs(),
                |p| self.files.get(&self.canon(p)).cloned(),
                |p| self.list(p),
                |p| {
                    let id = self.canon(p);
                    let is_dir = self.dirs.contains(&id);
                    (is_dir || self.files.contains_key(&id)).then_some(Resolved { id, is_dir })
                },
            )
        }
    }

    #[test]
    fn configured_directories_as_ldconfig_reads_them() {
        let mut fs = MemFs::default();
        for d in [
            "/etc",
            "/etc/ld.so.conf.d",
            "/etc/ld.so.conf.d/extra",
            "/usr/lib",
            "/usr/lib/x86_64-linux-gnu",
            "/usr/local/lib",
            "/opt/a",
            "/opt/a/glibc-hwcaps",
            "/opt/a/glibc-hwcaps/x86-64-v3",
            "/opt/a/glibc-hwcaps/.hidden",
            "/opt/b",
            "/opt/c",
            "/opt/d d",
        ] {
            fs.dirs.insert(d.into());
        }
        fs.links.insert("/lib".into(), "/usr/lib".into());
        let mut file = |p: &str, text: &str| fs.files.insert(p.into(), text.as_bytes().to_vec());
        file("/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
        file("/etc/ld.so.conf.d/libc.conf", "# libc default configuration\n/usr/local/lib\n");
        file(
            "/etc/ld.so.conf.d/x86_64-linux-gnu.conf",
            "# Multiarch support\n/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n",
        );
        file(
            "/etc/ld.so.conf.d/zz.conf",
            "  /opt/a//  # a comment\n/opt/b=libc6\nHWCAP 1 x\n\t\ninclude extra/*.conf nothing/*.conf\n/opt/d d\n",
        );
        file("/etc/ld.so.conf.d/.hidden.conf", "/opt/c\n");
        file("/etc/ld.so.conf.d/extra/1.conf", "/opt/c\n/usr/local/lib/\n");
        file("/opt/a/glibc-hwcaps/not-a-dir", "");
        let paths = |glibc| -> Vec<String> {
            fs.conf_dirs(glibc).unwrap().into_iter().map(|d| d.path).collect()
        };
        let mut want = vec![
            "/usr/local/lib",
            "/lib/x86_64-linux-gnu",
            "/opt/a",
            "/opt/a/glibc-hwcaps/x86-64-v3",
            "/opt/b",
            "/opt/c",
            "/opt/d d",
            "/lib",
        ];
        assert_eq!(paths(Glibc::V2_36), want);
        want.remove(4); // 2.41 takes `/opt/b=libc6` as the name of a directory
        assert_eq!(paths(Glibc::V2_41), want);
        let dirs = fs.conf_dirs(Glibc::V2_41).unwrap();
        assert_eq!(dirs[3].hwcaps.as_deref(), Some("x86-64-v3"));

        // 2.36 scans legacy hwcap subdirectories, which are refused.
        fs.dirs.insert("/usr/local/lib/tls".into());
        let dir = ScanDir { path: "/usr/local/lib".into(), hwcaps: None };
        let listing = fs.list("/usr/local/lib");
        let scan =
            |glibc| scan_dir(glibc, Arch::X86_64, &dir, &listing, |_| Some(Target::Directory));
        assert!(matches!(scan(Glibc::V2_36), Err(LdCacheError::Unsupported { .. })));
        assert_eq!(scan(Glibc::V2_41), Ok(Scan::default()));
    }

    #[test]
    fn a_directory_scans_as_search_dir() {
        let lib = |soname: &str| {
            Some(Target::File(Probe::Library(Object {
                soname: Some(soname.into()),
                flags: 0x0303,
                isa_level: 0,
            })))
        };
        let listing = [
            ("libfoo.so.1.2", Kind::File),
            ("libfoo.so.1.10", Kind::File),
            ("libfoo.so.1", Kind::Symlink),
            ("libfoo.so", Kind::Symlink),
            ("libbar.so", Kind::Symlink),
            ("libgone.so.1", Kind::Symlink),
            ("libc.so", Kind::File),
            ("notalib.so.1", Kind::File),
            ("libnew.so.1.dpkg-new", Kind::File),
            ("libdir.so", Kind::Dir),
        ]
        .map(|(name, kind)| DirEntry { name: name.into(), kind });
        let dir = ScanDir { path: "/usr/lib/x86_64-linux-gnu".into(), hwcaps: None };
        let inspect = |name: &str| match name {
            "libfoo.so.1.2" | "libfoo.so.1.10" | "libfoo.so.1" | "libfoo.so" => lib("libfoo.so.1"),
            "libbar.so" => lib("libbaz.so.3"),
            "libnew.so.1.dpkg-new" => lib("libnew.so.1"),
            "libgone.so.1" => Some(Target::Missing),
            "libc.so" => Some(Target::File(Probe::Skipped)),
            other => panic!("{other} is not read by ldconfig"),
        };
        let keys = |scan: &Scan| -> Vec<(String, String)> {
            scan.entries.iter().map(|e| (e.soname.clone(), e.path.clone())).collect()
        };
        let d = "/usr/lib/x86_64-linux-gnu";
        let scan = scan_dir(Glibc::V2_41, Arch::X86_64, &dir, &listing, inspect).unwrap();
        assert_eq!(
            keys(&scan),
            [
                ("libbaz.so.3".to_string(), format!("{d}/libbaz.so.3")),
                ("libfoo.so".into(), format!("{d}/libfoo.so")),
                ("libfoo.so.1".into(), format!("{d}/libfoo.so.1")),
            ]
        );
        assert_eq!(
            scan.links,
            [
                ("libbaz.so.3".to_string(), "libbar.so".to_string()),
                ("libfoo.so.1".into(), "libfoo.so.1.10".into())
            ]
        );
        assert_eq!(scan.stale, ["libgone.so.1"]);
        // 2.36 still reads dpkg's temporary files.
        let scan = scan_dir(Glibc::V2_36, Arch::X86_64, &dir, &listing, inspect).unwrap();
        assert!(scan.entries.iter().any(|e| e.soname == "libnew.so.1"));
    }
}
