//! Which directories `ldconfig` scans: `/etc/ld.so.conf` and its `include` globs (elf/ldconfig.c
//! `parse_conf`, `parse_conf_include`), then the built-in trusted directories.
use super::scan::{DirEntry, Kind, Resolved};
use super::{Arch, Glibc, LdCacheError, ScanDir};

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
                if self.glibc.hwcap_directive() {
                    return Err(LdCacheError::Unsupported {
                        path: file.into(),
                        why: "a hwcap directive, which ldconfig before 2.32 honours",
                    });
                }
                // Since 2.32: "hwcap directive ignored".
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
        if !self.glibc.glibc_hwcaps() {
            return Ok(());
        }
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
pub(super) fn fnmatch(pattern: &[u8], name: &[u8]) -> bool {
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
