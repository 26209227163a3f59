//! Directories: what `ldconfig` finds in one it scans (elf/ldconfig.c `search_dir`): the
//! cache entries, the soname links it makes, the dangling links it removes.
use std::collections::HashMap;

use super::elf::Probe;
use super::{libcmp, Arch, Entry, Glibc, Hwcap, LdCacheError, ScanDir};

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
    /// A file, and what [`probe`](super::probe) makes of it.
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

/// `_dl_is_dso` (2.34): `lib*.so*`, `ld-*.so*`, `ld.so.*`, `ld64.so.*`; before 2.34 the
/// first two only ([`is_library_name`]).
pub(crate) fn is_dso_name(name: &str) -> bool {
    is_lib_name(name) || is_ld_so_name(name)
}

/// `lib*.so*`, `ld-*.so*`: what every `ldconfig` reads as a library's name.
fn is_lib_name(name: &str) -> bool {
    (name.starts_with("lib") || name.starts_with("ld-")) && name.contains(".so")
}

/// `ld.so.*`, `ld64.so.*`: library names since 2.34.
fn is_ld_so_name(name: &str) -> bool {
    name.starts_with("ld.so.") || name.starts_with("ld64.so.")
}

/// The names `ldconfig` of `glibc` reads as libraries.
fn is_library_name(name: &str, glibc: Glibc) -> bool {
    is_lib_name(name) || glibc.ld_so_names() && is_ld_so_name(name)
}

/// Names `ldconfig` never reads: prelink's temporaries, and since 2.39 rpm's and dpkg's;
/// `None` where the build may or may not skip the latter.
fn temporary_name(name: &str, glibc: Glibc) -> Option<bool> {
    let prelink = name.ends_with(".#prelink#")
        || name.len() >= ".#prelink#.XXXXXX".len()
            && name.as_bytes()[name.len() - ".#prelink#.XXXXXX".len()..]
                .starts_with(b".#prelink#.");
    let package = name.contains(';') || name.ends_with(".dpkg-new") || name.ends_with(".dpkg-tmp");
    match (prelink, package) {
        (true, _) => Some(true),
        (false, false) => Some(false),
        (false, true) => glibc.skips_package_temporaries(),
    }
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
        osversion: u32,
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
        if !is_library_name(name, glibc)
            && (entry.kind == Kind::File || (!in_hwcaps && !hwcap_name))
        {
            continue;
        }
        match temporary_name(name, glibc) {
            Some(true) => continue,
            Some(false) => {}
            None => {
                return Err(unsupported(
                    name,
                    "a package manager's temporary name, which this ldconfig may skip or read",
                ))
            }
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
                d.osversion = object.osversion;
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
            osversion: object.osversion,
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
            Some(sub) => {
                let isa_level = if glibc.isa_levels() { d.isa_level } else { 0 };
                (d.name, Hwcap::Subdir { name: sub.clone(), isa_level })
            }
        };
        let path = format!("{}/{file}", dir.path);
        let osversion = d.osversion;
        scan.entries.push(Entry { flags: d.flags, soname: d.soname, path, osversion, hwcap });
    }
    Ok(scan)
}
