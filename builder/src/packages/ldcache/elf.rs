//! Shared objects: what `ldconfig` reads of a file (readlib.c, readelflib.c): whether it takes
//! it as a library, its soname, flags and ISA level.
use super::{le16, le32, Arch, Glibc};

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
    /// without one, and on Arm). Stored (in `hwcap`) only for glibc-hwcaps subdirectories.
    pub(crate) isa_level: u32,
    /// Before 2.36: the OS and kernel version of the first `NT_GNU_ABI_TAG` note
    /// (`.note.ABI-tag`: glibc's own libraries carry Linux 3.2.0, `0x030200`); 0 without one,
    /// and always 0 since 2.36.
    pub(crate) osversion: u32,
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
const PT_NOTE: u32 = 4;
const NT_GNU_ABI_TAG: u32 = 1;
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
        let mut osversion = 0;
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
                PT_NOTE if self.glibc.osversion() && osversion == 0 => {
                    osversion = self.abi_tag(p_offset, p_filesz, p_align)?;
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
                // Before bug 25087's fix: the first PT_LOAD's (`loadaddr`, -1 without one).
                let first = phdrs.iter().find(|&&(t, ..)| t == PT_LOAD);
                let first =
                    first.map_or(u64::MAX, |&(_, offset, vaddr, _)| vaddr.wrapping_sub(offset));
                let (old, new) = (val.wrapping_sub(first), val.wrapping_sub(loadoff));
                let s = match self.glibc.dynstr_in_first_load() {
                    Some(true) => old,
                    Some(false) => new,
                    // Either rule gives the same for nearly every library.
                    None if old == new => new,
                    None => return None,
                };
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
        Some(Probe::Library(Object { soname, flags: self.arch.flags(), isa_level, osversion }))
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

    /// The PT_NOTE walk of readelflib.c before 2.36: the version an `NT_GNU_ABI_TAG` note
    /// (name "GNU", 16 bytes: OS, major, minor, patch) gives, 0 where the segment has none or
    /// is not looked at. `None` where ldconfig would read past the end of the file, which it
    /// does not guard.
    fn abi_tag(&self, offset: u64, filesz: u64, align: u64) -> Option<u32> {
        if filesz < 32 || align < 4 || (align != 4 && align != 8) {
            return Some(0);
        }
        let (mut at, mut size) = (offset, filesz);
        loop {
            let word = |k: u64| self.u32_at(at.checked_add(4 * k)?);
            let (namesz, descsz) = (word(0)?, word(1)?);
            if namesz == 4 && descsz == 16 && word(2)? == NT_GNU_ABI_TAG && word(3)? == 0x0055_4e47
            {
                let v = [word(4)?, word(5)?, word(6)?, word(7)?];
                return Some(v[0] << 24 | (v[1] & 0xff) << 16 | (v[2] & 0xff) << 8 | v[3] & 0xff);
            }
            // ELF_NOTE_NEXT_OFFSET: the header and name, then the descriptor, each aligned.
            let next = (12 + u64::from(namesz)).next_multiple_of(align)
                + u64::from(descsz).next_multiple_of(align);
            if size - 32 < next || next == 0 {
                return Some(0);
            }
            size -= next;
            at = at.checked_add(next)?;
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
