//! Reading single files out of an image's layers without unpacking them.
//!
//! Layers are hostile input: nothing here writes to disk, entry names are only compared
//! after normalisation, file reads are capped, and callers hand in readers that check the
//! layer digest at end of input (we drain every layer to the end so that check runs).
use std::collections::BTreeMap;
use std::io::{self, BufRead, Read};

use crate::blob::decompressed;
use crate::error::{Error, Result};
use crate::layer::normalize;
use erdma_limits::{EntryBudget, Exceeded, Limits, DEFAULT_INFLATION, MAX_SYMLINKS};

/// What a file read is answered with: given the file's reader and size, the bytes to return.
pub type ContentFn<'a> = dyn FnMut(&mut dyn Read, u64) -> io::Result<Vec<u8>> + 'a;

/// What one layer says about a path.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Nothing,
    File(Vec<u8>),
    Symlink(String),
    /// A directory or another non-file type: not readable as a file.
    NotAFile,
    /// Whited out here (the path or a parent), or a parent is opaque: lower layers are hidden.
    Hidden,
}

/// Reads `path` as the container would see it. `open(i)` opens layer `i` counted from the
/// top (0 is the topmost) and is only called for layers that have to be looked at. Layers may
/// inflate [`DEFAULT_INFLATION`] times ([`read_file_bounded`] takes another bound).
pub fn read_file(
    layer_count: usize,
    open: &mut dyn FnMut(usize) -> Result<Box<dyn BufRead>>,
    path: &str,
    max_size: u64,
) -> Result<Option<Vec<u8>>> {
    read_file_bounded(layer_count, open, path, max_size, DEFAULT_INFLATION)
}

/// [`read_file`], with layers allowed to inflate `max_inflation` times (`--max-inflation`).
pub fn read_file_bounded(
    layer_count: usize,
    open: &mut dyn FnMut(usize) -> Result<Box<dyn BufRead>>,
    path: &str,
    max_size: u64,
    max_inflation: u64,
) -> Result<Option<Vec<u8>>> {
    let mut whole = |entry: &mut dyn Read, size: u64| -> io::Result<Vec<u8>> {
        if size > max_size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{path} is {size} bytes, more than the {max_size} allowed"),
            ));
        }
        let mut data = Vec::with_capacity(size as usize);
        entry.take(max_size).read_to_end(&mut data)?;
        Ok(data)
    };
    read_file_with(layer_count, open, path, max_inflation, &mut whole)
}

/// [`read_file`], with the file's content handed to `content` (its reader and size) as the
/// layer streams past; what `content` returns is the answer. For files too big to hold.
pub fn read_file_with(
    layer_count: usize,
    open: &mut dyn FnMut(usize) -> Result<Box<dyn BufRead>>,
    path: &str,
    max_inflation: u64,
    content: &mut ContentFn<'_>,
) -> Result<Option<Vec<u8>>> {
    let Some(mut want) = normalize(path) else { return Ok(None) };
    'resolve: for _ in 0..=MAX_SYMLINKS {
        for i in 0..layer_count {
            let mut r = open(i)?;
            match scan(&mut r, &want, max_inflation, content).map_err(|e| layer_error(e, i))? {
                Seen::Nothing => continue,
                Seen::File(data) => return Ok(Some(data)),
                Seen::NotAFile | Seen::Hidden => return Ok(None),
                Seen::Symlink(target) => {
                    let base = if target.starts_with('/') {
                        String::new()
                    } else {
                        want.rsplit_once('/').map(|(d, _)| d.to_string()).unwrap_or_default()
                    };
                    match resolve(&base, &target) {
                        Some(p) => {
                            want = p;
                            continue 'resolve;
                        }
                        None => return Ok(None),
                    }
                }
            }
        }
        return Ok(None);
    }
    Err(Error::Limit {
        what: format!("/{}", normalize(path).unwrap_or_default()),
        exceeded: Exceeded::Symlinks,
    })
}

/// Names directly inside directory `dir` as the container sees them (regular files and
/// symlinks only), sorted. Symlinked directories are not followed.
pub fn list_dir(
    layer_count: usize,
    open: &mut dyn FnMut(usize) -> Result<Box<dyn BufRead>>,
    dir: &str,
) -> Result<Vec<String>> {
    let dir = normalize(dir).unwrap_or_default();
    let mut seen: BTreeMap<String, bool> = BTreeMap::new(); // name -> visible file
    for i in 0..layer_count {
        let mut r = open(i)?;
        let (entries, hidden_below) = scan_dir(&mut r, &dir).map_err(|e| layer_error(e, i))?;
        for (name, visible) in entries {
            seen.entry(name).or_insert(visible);
        }
        if hidden_below {
            break;
        }
    }
    Ok(seen.into_iter().filter(|(_, v)| *v).map(|(n, _)| n).collect())
}

/// A layer's tar, decompressed and read ahead in large pieces: the tar reader asks for 512
/// bytes per header and 8 KiB per piece of content it skips, and a decompressor asked that
/// often spends more on its calls than on inflating (a Rocky 9 base's 125 MB tar).
fn layer_tar<'a>(r: &'a mut dyn BufRead, max_inflation: u64) -> io::Result<impl Read + 'a> {
    Ok(io::BufReader::with_capacity(READ_AHEAD, decompressed(r, max_inflation)?))
}

/// How far [`layer_tar`] reads ahead.
const READ_AHEAD: usize = 256 << 10;

/// One layer's entries directly under `dir`: (name, is a visible file); whiteouts give
/// `false` so lower layers cannot bring the name back. The flag says lower layers are hidden.
fn scan_dir(r: &mut dyn BufRead, dir: &str) -> io::Result<(Vec<(String, bool)>, bool)> {
    let mut out = Vec::new();
    let mut hidden = false;
    {
        erdma_limits::walk_tar(
            layer_tar(&mut *r, DEFAULT_INFLATION)?,
            |e| e,
            |entry| {
                let raw = entry.path_bytes();
                let Some(name) = normalize(&String::from_utf8_lossy(&raw)) else { return Ok(()) };
                let (parent, base) = name.rsplit_once('/').unwrap_or(("", name.as_str()));
                if base == ".wh..wh..opq" && parent == dir {
                    hidden = true;
                    return Ok(());
                }
                if let Some(w) = base.strip_prefix(".wh.") {
                    let target =
                        if parent.is_empty() { w.to_string() } else { format!("{parent}/{w}") };
                    if parent == dir {
                        out.push((w.to_string(), false));
                    } else if target == dir || is_below(dir, &target) {
                        hidden = true;
                    }
                    return Ok(());
                }
                if parent == dir {
                    let t = entry.header().entry_type();
                    out.push((base.to_string(), t.is_file() || t.is_symlink()));
                } else if (name == dir || is_below(dir, &name))
                    && !entry.header().entry_type().is_dir()
                {
                    hidden = true;
                }
                Ok(())
            },
        )?;
    }
    io::copy(r, &mut io::sink())?;
    Ok((out, hidden))
}

fn layer_error(e: io::Error, i: usize) -> Error {
    if let Some(exceeded) = erdma_limits::exceeded(&e) {
        return Error::Limit {
            what: format!("layer {i} from the top"),
            exceeded: exceeded.clone(),
        };
    }
    crate::blob::digest_error(&e).unwrap_or_else(|| Error::Corrupt {
        what: "layer",
        reference: format!("layer {i} from the top"),
        source: e,
    })
}

/// Joins a symlink target onto its directory, clamping `..` at the root as the kernel does.
fn resolve(base: &str, target: &str) -> Option<String> {
    let mut parts: Vec<&str> = base.split('/').filter(|p| !p.is_empty()).collect();
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// Scans one (possibly compressed) layer for `want`, then reads the rest of the input.
fn scan(
    r: &mut dyn BufRead,
    want: &str,
    max_inflation: u64,
    content: &mut ContentFn<'_>,
) -> io::Result<Seen> {
    let mut seen = Seen::Nothing;
    let mut hidden = false;
    {
        erdma_limits::walk_tar(
            layer_tar(&mut *r, max_inflation)?,
            |e| e,
            |entry| {
                let raw = entry.path_bytes();
                let name = String::from_utf8_lossy(&raw).into_owned();
                let Some(name) = normalize(&name) else { return Ok(()) };
                let (dir, base) = name.rsplit_once('/').unwrap_or(("", name.as_str()));
                if let Some(hidden_name) = base.strip_prefix(".wh.") {
                    let target = if dir.is_empty() {
                        hidden_name.to_string()
                    } else {
                        format!("{dir}/{hidden_name}")
                    };
                    if hidden_name == ".wh..opq" {
                        // Opaque directory: everything below `dir` in lower layers is hidden.
                        if is_below(want, dir) {
                            hidden = true;
                        }
                    } else if want == target || is_below(want, &target) {
                        hidden = true;
                    }
                    return Ok(());
                }
                if name == want {
                    let kind = entry.header().entry_type();
                    seen = if kind.is_file() {
                        let size = entry.size();
                        Seen::File(content(entry, size)?)
                    } else if kind.is_symlink() {
                        let target = entry
                            .link_name_bytes()
                            .map(|l| String::from_utf8_lossy(&l).into_owned())
                            .unwrap_or_default();
                        Seen::Symlink(target)
                    } else {
                        Seen::NotAFile
                    };
                } else if is_below(want, &name) && !entry.header().entry_type().is_dir() {
                    // A parent replaced by a file or symlink in this layer: the path is gone.
                    // (Symlinked parent directories are not followed; our callers read
                    // /etc and /var paths, which images keep as real directories.)
                    hidden = true;
                }
                Ok(())
            },
        )?;
        // Leave the tar reader, then drain the input so digest checks see its end.
    }
    io::copy(r, &mut io::sink())?;
    Ok(match seen {
        Seen::Nothing if hidden => Seen::Hidden,
        other => other,
    })
}

fn is_below(path: &str, dir: &str) -> bool {
    dir.is_empty() || path.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::LayerContents;

    fn layer(f: impl FnOnce(&mut LayerContents)) -> Vec<u8> {
        let mut l = LayerContents::new();
        f(&mut l);
        l.write_tar(Vec::new(), 0).unwrap()
    }

    fn read(layers: &[Vec<u8>], path: &str) -> Option<Vec<u8>> {
        let mut open = |i: usize| -> Result<Box<dyn BufRead>> {
            Ok(Box::new(io::Cursor::new(layers[i].clone())))
        };
        read_file(layers.len(), &mut open, path, 1 << 20).unwrap()
    }

    /// A snapshot the cache keeps reads back as it was: every kind of entry, whiteouts and
    /// opaque directories, content of every byte, paths not ASCII. Anything else reads as
    /// none: every cut, a byte more, another magic, a kind unknown, entries out of order or
    /// twice, a path that is not UTF-8, counts larger than what follows.
    #[test]
    fn a_cached_snapshot_reads_back_as_it_was_and_nothing_else_does() {
        let tar = layer(|l| {
            l.add_file("etc/os-release", b"ID=rocky\n".to_vec(), 0o644).unwrap();
            l.add_file("etc/bytes", (0..=255u8).collect(), 0o644).unwrap();
            l.add_file("usr/bin/tool", b"not kept".to_vec(), 0o755).unwrap();
            l.add_file("etc/caf\u{e9}.conf", vec![], 0o644).unwrap();
            l.add_symlink("etc/localtime", "../usr/share/zoneinfo/UTC").unwrap();
            l.add_whiteout("etc/gone").unwrap();
            l.add_file("var/.wh..wh..opq", vec![], 0o644).unwrap();
            l.add_file("usr/lib/.wh..wh..opq", vec![], 0o644).unwrap();
        });
        let budget = Budget::new(&Limits::default());
        let snap = Snapshot::read(&mut io::Cursor::new(tar), DEFAULT_INFLATION, &budget).unwrap();
        assert!(
            matches!(snap.entries.get("etc/bytes"), Some(SnapEntry::File(Some(b))) if b.len() == 256)
        );
        assert_eq!(snap.entries.get("usr/bin/tool"), Some(&SnapEntry::File(None)));
        assert!(matches!(snap.entries.get("etc/localtime"), Some(SnapEntry::Symlink(_))));
        assert_eq!((snap.whiteouts.len(), snap.opaque.len()), (1, 2));
        let bytes = snap.encode().unwrap();
        assert_eq!(Snapshot::decode(&bytes).as_ref(), Some(&snap));
        assert_eq!(
            Snapshot::decode(&Snapshot::default().encode().unwrap()),
            Some(Snapshot::default())
        );
        for cut in 0..bytes.len() {
            assert!(Snapshot::decode(&bytes[..cut]).is_none(), "cut at {cut}");
        }
        let changed = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = bytes.clone();
            f(&mut b);
            Snapshot::decode(&b)
        };
        assert!(changed(&|b| b.push(0)).is_none());
        assert!(changed(&|b| b[7] = b'2').is_none());
        // The first entry's kind byte follows its path: "dir"s come first (`etc`).
        let first = 8 + 12 + 4 + snap.entries.keys().next().unwrap().len();
        assert_eq!(bytes[first], 2, "etc is a directory");
        assert!(changed(&|b| b[first] = 5).is_none());
        // More entries, whiteouts or opaque directories than follow.
        for count in [8, 12, 16] {
            assert!(changed(&|b| b[count] += 1).is_none(), "count at {count}");
            assert!(changed(&|b| b[count + 3] = 0xff).is_none(), "count at {count}");
        }
        let mut two = Snapshot::default();
        two.entries.insert("a".into(), SnapEntry::Dir);
        two.entries.insert("b".into(), SnapEntry::Other);
        let two = two.encode().unwrap();
        assert!(Snapshot::decode(&two).is_some());
        let mut swapped = two.clone();
        // Past the magic and the counts.
        let at = |c: u8| 20 + two[20..].iter().position(|&x| x == c).unwrap();
        let (a, b) = (at(b'a'), at(b'b'));
        swapped[a] = b'b';
        swapped[b] = b'a';
        assert!(Snapshot::decode(&swapped).is_none(), "out of order");
        swapped[b] = b'b';
        assert!(Snapshot::decode(&swapped).is_none(), "twice");
        // In order, and not UTF-8.
        swapped[a] = b'a';
        swapped[b] = 0xff;
        assert!(Snapshot::decode(&swapped).is_none(), "not UTF-8");
        // A whiteout twice.
        let mut wh = Snapshot::default();
        wh.whiteouts.insert("a".into());
        wh.whiteouts.insert("b".into());
        let wh = wh.encode().unwrap();
        assert!(Snapshot::decode(&wh).is_some());
        let mut twice = wh.clone();
        let at = |c: u8| 20 + wh[20..].iter().position(|&x| x == c).unwrap();
        twice[at(b'b')] = b'a';
        assert!(Snapshot::decode(&twice).is_none(), "a whiteout twice");
    }

    #[test]
    fn topmost_wins_and_symlinks_resolve() {
        let bottom = layer(|l| {
            l.add_file("usr/lib/os-release", b"ID=debian\n".to_vec(), 0o644).unwrap();
            l.add_symlink("etc/os-release", "../usr/lib/os-release").unwrap();
        });
        let top =
            layer(|l| l.add_file("usr/lib/os-release", b"ID=ubuntu\n".to_vec(), 0o644).unwrap());
        assert_eq!(
            read(&[top.clone(), bottom.clone()], "/etc/os-release").unwrap(),
            b"ID=ubuntu\n"
        );
        assert_eq!(read(&[bottom], "/etc/os-release").unwrap(), b"ID=debian\n");
    }

    #[test]
    fn whiteouts_and_opaque_dirs_hide_lower_layers() {
        let bottom =
            layer(|l| l.add_file("etc/os-release", b"ID=debian\n".to_vec(), 0o644).unwrap());
        let wh = layer(|l| l.add_whiteout("etc/os-release").unwrap());
        assert_eq!(read(&[wh, bottom.clone()], "etc/os-release"), None);
        let opq = layer(|l| l.add_file("etc/.wh..wh..opq", vec![], 0o644).unwrap());
        assert_eq!(read(&[opq, bottom.clone()], "etc/os-release"), None);
        let dirwh = layer(|l| l.add_whiteout("etc").unwrap());
        assert_eq!(read(&[dirwh, bottom], "etc/os-release"), None);
    }

    #[test]
    fn lists_directories_across_layers() {
        let bottom = layer(|l| {
            l.add_file("etc/apt/sources.list.d/a.list", vec![], 0o644).unwrap();
            l.add_file("etc/apt/sources.list.d/gone.list", vec![], 0o644).unwrap();
        });
        let top = layer(|l| {
            l.add_file("etc/apt/sources.list.d/b.sources", vec![], 0o644).unwrap();
            l.add_whiteout("etc/apt/sources.list.d/gone.list").unwrap();
        });
        let layers = [top, bottom.clone()];
        let mut open = |i: usize| -> Result<Box<dyn BufRead>> {
            Ok(Box::new(io::Cursor::new(layers[i].clone())))
        };
        assert_eq!(
            list_dir(2, &mut open, "/etc/apt/sources.list.d/").unwrap(),
            ["a.list", "b.sources"]
        );
        let opq =
            layer(|l| l.add_file("etc/apt/sources.list.d/.wh..wh..opq", vec![], 0o644).unwrap());
        let layers = [opq, bottom];
        let mut open = |i: usize| -> Result<Box<dyn BufRead>> {
            Ok(Box::new(io::Cursor::new(layers[i].clone())))
        };
        assert!(list_dir(2, &mut open, "etc/apt/sources.list.d").unwrap().is_empty());
    }

    #[test]
    fn hostile_entries_are_ignored_and_sizes_capped() {
        let evil =
            layer(|l| l.add_symlink("etc/os-release", "../../../../../proc/self/environ").unwrap());
        // The link is resolved inside the image (clamped at its root), never on the host.
        assert_eq!(read(&[evil], "etc/os-release"), None);
        let big = layer(|l| l.add_file("etc/os-release", vec![b'x'; 100], 0o644).unwrap());
        let mut open =
            |_| -> Result<Box<dyn BufRead>> { Ok(Box::new(io::Cursor::new(big.clone()))) };
        assert!(read_file(1, &mut open, "etc/os-release", 10).is_err());
        // A symlink loop is refused, naming the path, as the kernel's ELOOP would.
        let loop_ = layer(|l| l.add_symlink("etc/os-release", "os-release").unwrap());
        let mut open =
            |_| -> Result<Box<dyn BufRead>> { Ok(Box::new(io::Cursor::new(loop_.clone()))) };
        let e = read_file(1, &mut open, "etc/os-release", 10).unwrap_err();
        assert!(
            matches!(&e, Error::Limit { what, exceeded: Exceeded::Symlinks } if what == "/etc/os-release"),
            "{e}"
        );
    }

    #[test]
    fn snapshots_take_their_entries_from_the_budget() {
        let l = layer(|l| {
            for i in 0..10 {
                l.add_file(&format!("etc/f{i}"), vec![b'x'; 100], 0o644).unwrap();
            }
        });
        let budget = Budget::new(&Limits { entries: 25, ..Limits::default() });
        // etc/ and ten files: 11 entries each time.
        let first = Snapshot::read(&mut io::Cursor::new(l.clone()), 100, &budget).unwrap();
        assert_eq!(first.len(), 11);
        Snapshot::read(&mut io::Cursor::new(l.clone()), 100, &budget).unwrap();
        let e = Snapshot::read(&mut io::Cursor::new(l), 100, &budget).unwrap_err();
        assert_eq!(erdma_limits::exceeded(&e), Some(&Exceeded::Entries { limit: 25 }));
    }

    #[test]
    fn package_databases_are_kept_and_payloads_are_not() {
        let kept = [
            "etc/os-release",
            "var/lib/dpkg/status",
            "var/lib/dpkg/info/bash.list",
            "var/lib/rpm/rpmdb.sqlite",
            "var/lib/rpm/rpmdb.sqlite-wal",
            "var/lib/rpm/Packages",
            "usr/lib/sysimage/rpm/rpmdb.sqlite",
        ];
        let not = ["var/lib/dpkg/info/bash.md5sums", "var/lib/dpkg/status-old", "usr/bin/rpm"];
        let l = layer(|l| {
            for p in kept.iter().chain(&not) {
                l.add_file(p, b"data".to_vec(), 0o644).unwrap();
            }
        });
        let snap =
            Snapshot::read(&mut io::Cursor::new(l), 100, &Budget::new(&Limits::default())).unwrap();
        for p in kept {
            assert!(matches!(snap.entries.get(p), Some(SnapEntry::File(Some(_)))), "{p}");
        }
        for p in not {
            assert!(matches!(snap.entries.get(p), Some(SnapEntry::File(None))), "{p}");
        }
    }

    #[test]
    fn kept_content_is_bounded_per_image() {
        // Five 16 MiB files under /etc: four fit in KEEP_TOTAL, the fifth is read when asked.
        let l = layer(|l| {
            for i in 0..5 {
                l.add_file(&format!("etc/big{i}"), vec![b'x'; 16 << 20], 0o644).unwrap();
            }
        });
        let snap =
            Snapshot::read(&mut io::Cursor::new(l), 100, &Budget::new(&Limits::default())).unwrap();
        let kept = (0..5)
            .filter(|i| {
                matches!(snap.entries.get(&format!("etc/big{i}")), Some(SnapEntry::File(Some(_))))
            })
            .count();
        assert_eq!(kept, 4);
        // Hard links to a kept file: their content counts too, past the budget not kept.
        let l = layer(|l| {
            l.add_file("etc/big", vec![b'x'; 16 << 20], 0o644).unwrap();
            for i in 0..5 {
                l.add_hardlink(&format!("etc/link{i}"), "etc/big").unwrap();
            }
        });
        let budget = Budget::new(&Limits::default());
        let snap = Snapshot::read(&mut io::Cursor::new(l), 100, &budget).unwrap();
        let kept = |snap: &Snapshot| {
            snap.entries.values().filter(|e| matches!(e, SnapEntry::File(Some(_)))).count()
        };
        assert_eq!(kept(&snap), 4);
        assert_eq!(snap.entries.get("etc/link4"), Some(&SnapEntry::File(None)));
        // A snapshot from the cache is charged alike: against what is left, its content past
        // the budget dropped, its entries taken.
        let mut cached = Snapshot::decode(&snap.encode().unwrap()).unwrap();
        let half = Budget::new(&Limits::default());
        assert!(half.keep(KEEP_TOTAL - (40 << 20)));
        cached.charge(&half).unwrap();
        assert_eq!(kept(&cached), 2);
        let few = Budget::new(&Limits { entries: 3, ..Limits::default() });
        assert!(Snapshot::decode(&snap.encode().unwrap()).unwrap().charge(&few).is_err());
    }
}

/// One layer's entries, read once: the kind of every path, whiteouts and opaque directories,
/// and the content of the small configuration files a build asks about, so repeated questions
/// (os-release, dpkg status, apt sources, keys, groups, directory symlinks) cost one pass.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    entries: BTreeMap<String, SnapEntry>,
    /// Paths whited out in this layer (hiding that path and everything below it).
    whiteouts: std::collections::HashSet<String>,
    /// Directories made opaque in this layer.
    opaque: std::collections::HashSet<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapEntry {
    /// A regular file; its content when it was small and of interest.
    File(Option<Vec<u8>>),
    Dir,
    Symlink(String),
    Other,
}

/// The first bytes of a snapshot as the cache keeps it ([`Snapshot::encode`]).
const SNAPSHOT_MAGIC: &[u8; 8] = b"erdmasn1";

impl Snapshot {
    /// The snapshot as the cache keeps it: `SNAPSHOT_MAGIC`, the numbers of entries,
    /// whiteouts and opaque directories, then each entry in path order (its path, a kind byte,
    /// and a file's kept content or a symlink's target), each whiteout and each opaque
    /// directory; every number a 32-bit little-endian one, every string or content its length
    /// and its bytes. `None` where a length does not fit.
    pub fn encode(&self) -> Option<Vec<u8>> {
        fn put(out: &mut Vec<u8>, bytes: &[u8]) -> Option<()> {
            out.extend_from_slice(&u32::try_from(bytes.len()).ok()?.to_le_bytes());
            out.extend_from_slice(bytes);
            Some(())
        }
        let mut out = SNAPSHOT_MAGIC.to_vec();
        for n in [self.entries.len(), self.whiteouts.len(), self.opaque.len()] {
            out.extend_from_slice(&u32::try_from(n).ok()?.to_le_bytes());
        }
        for (path, e) in &self.entries {
            put(&mut out, path.as_bytes())?;
            match e {
                SnapEntry::File(None) => out.push(0),
                SnapEntry::File(Some(data)) => {
                    out.push(1);
                    put(&mut out, data)?;
                }
                SnapEntry::Dir => out.push(2),
                SnapEntry::Symlink(target) => {
                    out.push(3);
                    put(&mut out, target.as_bytes())?;
                }
                SnapEntry::Other => out.push(4),
            }
        }
        for path in self.whiteouts.iter().chain(&self.opaque) {
            put(&mut out, path.as_bytes())?;
        }
        Some(out)
    }

    /// A snapshot [`Snapshot::encode`] wrote: `None` for anything else (another format, cut
    /// short, trailing bytes, a string that is not UTF-8, entries out of order or twice, a
    /// whiteout or opaque directory twice, a kind unknown).
    pub fn decode(bytes: &[u8]) -> Option<Snapshot> {
        struct At<'b>(&'b [u8]);
        impl<'b> At<'b> {
            fn take(&mut self, n: usize) -> Option<&'b [u8]> {
                let (head, rest) = self.0.split_at_checked(n)?;
                self.0 = rest;
                Some(head)
            }
            fn number(&mut self) -> Option<usize> {
                let b = self.take(4)?;
                usize::try_from(u32::from_le_bytes(b.try_into().ok()?)).ok()
            }
            fn bytes(&mut self) -> Option<&'b [u8]> {
                let n = self.number()?;
                self.take(n)
            }
            fn string(&mut self) -> Option<String> {
                std::str::from_utf8(self.bytes()?).ok().map(str::to_string)
            }
        }
        let mut at = At(bytes);
        if at.take(SNAPSHOT_MAGIC.len())? != SNAPSHOT_MAGIC {
            return None;
        }
        let (n_entries, n_whiteouts, n_opaque) = (at.number()?, at.number()?, at.number()?);
        // Each entry takes at least five bytes: a count past them is not believed.
        let mut entries = Vec::with_capacity(n_entries.min(at.0.len() / 5).min(1 << 20));
        for _ in 0..n_entries {
            let path = at.string()?;
            let e = match at.take(1)?[0] {
                0 => SnapEntry::File(None),
                1 => SnapEntry::File(Some(at.bytes()?.to_vec())),
                2 => SnapEntry::Dir,
                3 => SnapEntry::Symlink(at.string()?),
                4 => SnapEntry::Other,
                _ => return None,
            };
            if entries.last().is_some_and(|(last, _): &(String, SnapEntry)| *last >= path) {
                return None;
            }
            entries.push((path, e));
        }
        // Each path once, as sets hold them.
        let mut paths = |n: usize| {
            let set: std::collections::HashSet<String> =
                (0..n).map(|_| at.string()).collect::<Option<_>>()?;
            (set.len() == n).then_some(set)
        };
        let whiteouts = paths(n_whiteouts)?;
        let opaque = paths(n_opaque)?;
        if !at.0.is_empty() {
            return None;
        }
        Some(Snapshot { entries: entries.into_iter().collect(), whiteouts, opaque })
    }

    /// Takes this snapshot's entries from `budget`, and its kept content while the budget has
    /// room; content past it is dropped, to be read from the layer when asked for, as a layer
    /// read now would have left it. For a snapshot from the cache.
    pub fn charge(&mut self, budget: &Budget) -> std::result::Result<(), Exceeded> {
        budget.take_entries(self.len())?;
        for e in self.entries.values_mut() {
            if let SnapEntry::File(Some(data)) = e {
                if !budget.keep(data.len() as u64) {
                    *e = SnapEntry::File(None);
                }
            }
        }
        Ok(())
    }
}

/// What the snapshots of one image's layers may hold in all: entries ([`Limits::entries`]),
/// and [`KEEP_TOTAL`] bytes of file content (past it, content is read again when asked for).
#[derive(Debug)]
pub struct Budget {
    entries: EntryBudget,
    kept: std::sync::atomic::AtomicU64,
}

/// File content (os-release, dpkg status, apt sources, keys) the snapshots of one image keep:
/// a real base's `/etc` and dpkg status are a few MiB; a hostile one with thousands of 16 MiB
/// files under `/etc` would otherwise be held whole.
pub const KEEP_TOTAL: u64 = 64 << 20;

impl Budget {
    pub fn new(limits: &Limits) -> Budget {
        Budget {
            entries: EntryBudget::new(limits.entries),
            kept: std::sync::atomic::AtomicU64::new(KEEP_TOTAL),
        }
    }

    /// Takes `n` entries for a snapshot.
    pub fn take_entries(&self, n: u64) -> std::result::Result<(), Exceeded> {
        self.entries.take(n)
    }

    /// Whether `size` more bytes of content may be kept (and takes them).
    fn keep(&self, size: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.kept.fetch_update(Relaxed, Relaxed, |left| left.checked_sub(size)).is_ok()
    }
}

/// Whether a file's content is kept in the snapshot.
fn of_interest(path: &str, size: u64) -> bool {
    const KEEP: &[&str] = &[
        "etc/",
        "usr/share/keyrings/",
        "usr/lib/os-release",
        "var/lib/dpkg/",
        // rpm's database (EL's place, and Fedora's and EL10's `usr/lib/sysimage/rpm`), which
        // every rpm build reads: SQLite's file and its journal, or Berkeley DB's `Packages`
        // and indices (larger than the bound below in big images, then read from the layer).
        "var/lib/rpm/",
        "usr/lib/sysimage/rpm/",
    ];
    if size > 16 << 20 || !KEEP.iter().any(|k| path.starts_with(k)) {
        return false;
    }
    // dpkg's database as every apt build reads it (status, diversions, stat overrides,
    // alternatives, triggers), without its backups; of `info/`, only what a build may ask of
    // an installed package (its file list and maintainer scripts, read when it is replaced),
    // not the checksums, which are most of it.
    match path.strip_prefix("var/lib/dpkg/") {
        None => true,
        Some(rest) => {
            !rest.ends_with("-old")
                && match rest.strip_prefix("info/") {
                    None => true,
                    Some(name) => {
                        name == "format"
                            || [".list", ".preinst", ".postinst", ".prerm", ".postrm"]
                                .iter()
                                .any(|s| name.ends_with(s))
                    }
                }
        }
    }
}

impl Snapshot {
    /// Reads a whole (possibly compressed) layer, inflating at most `max_inflation` times and
    /// taking its entries from `budget`; the input is drained for its digest check. A limit
    /// reached is an error carrying [`Exceeded`].
    pub fn read(r: &mut dyn BufRead, max_inflation: u64, budget: &Budget) -> io::Result<Snapshot> {
        Snapshot::read_watching(r, max_inflation, budget, &mut |_, _| {})
    }

    /// [`Snapshot::read`], handing `watch` each kept file's path and content as the layer
    /// streams past (before the layer is read whole: a later entry may still replace it).
    pub fn read_watching(
        r: &mut dyn BufRead,
        max_inflation: u64,
        budget: &Budget,
        watch: &mut dyn FnMut(&str, &[u8]),
    ) -> io::Result<Snapshot> {
        let mut snap = Snapshot::default();
        {
            erdma_limits::walk_tar(
                layer_tar(&mut *r, max_inflation)?,
                |e| e,
                |entry| {
                    budget.take_entries(1).map_err(io::Error::other)?;
                    let raw = entry.path_bytes();
                    let Some(name) = normalize(&String::from_utf8_lossy(&raw)) else {
                        return Ok(());
                    };
                    let (dir, base) = name.rsplit_once('/').unwrap_or(("", name.as_str()));
                    if base == ".wh..wh..opq" {
                        snap.opaque.insert(dir.to_string());
                        return Ok(());
                    }
                    if let Some(w) = base.strip_prefix(".wh.") {
                        snap.whiteouts.insert(if dir.is_empty() {
                            w.to_string()
                        } else {
                            format!("{dir}/{w}")
                        });
                        return Ok(());
                    }
                    let t = entry.header().entry_type();
                    let e = if t.is_file() {
                        if of_interest(&name, entry.size()) && budget.keep(entry.size()) {
                            let mut data = Vec::with_capacity(entry.size() as usize);
                            Read::take(&mut *entry, 16 << 20).read_to_end(&mut data)?;
                            watch(&name, &data);
                            SnapEntry::File(Some(data))
                        } else {
                            SnapEntry::File(None)
                        }
                    } else if t.is_dir() {
                        SnapEntry::Dir
                    } else if t.is_symlink() {
                        SnapEntry::Symlink(
                            entry
                                .link_name_bytes()
                                .map(|l| String::from_utf8_lossy(&l).into_owned())
                                .unwrap_or_default(),
                        )
                    } else if t.is_hard_link() {
                        // Content lives under the link target; resolve it inside this layer.
                        let target = entry
                            .link_name_bytes()
                            .and_then(|l| normalize(&String::from_utf8_lossy(&l)));
                        // Its content kept again only while the budget has room: links are
                        // cheap to write, content is not to hold.
                        match target.and_then(|t| snap.entries.get(&t)) {
                            Some(SnapEntry::File(Some(data))) if budget.keep(data.len() as u64) => {
                                SnapEntry::File(Some(data.clone()))
                            }
                            Some(SnapEntry::File(_)) => SnapEntry::File(None),
                            _ => SnapEntry::Other,
                        }
                    } else {
                        SnapEntry::Other
                    };
                    snap.entries.insert(name, e);
                    Ok(())
                },
            )?;
        }
        io::copy(r, &mut io::sink())?;
        Ok(snap)
    }

    /// Entries, whiteouts and opaque directories: what [`Budget::take_entries`] counts (a
    /// snapshot read from the cache is counted again).
    pub fn len(&self) -> u64 {
        (self.entries.len() + self.whiteouts.len() + self.opaque.len()) as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether this layer hides `path` in the layers below it: a whiteout of it or of a parent,
    /// an opaque parent, or a parent replaced by something that is not a directory.
    fn hides(&self, path: &str) -> bool {
        if self.whiteouts.contains(path) || self.opaque.contains("") {
            return true;
        }
        let mut at = 0;
        while let Some(i) = path[at..].find('/') {
            let parent = &path[..at + i];
            if self.whiteouts.contains(parent)
                || self.opaque.contains(parent)
                || self.entries.get(parent).is_some_and(|e| !matches!(e, SnapEntry::Dir))
            {
                return true;
            }
            at += i + 1;
        }
        false
    }
}

impl Snapshot {
    /// Names directly in `dir` that this layer has (true) or whites out (false), and whether
    /// lower layers' contents of `dir` are hidden.
    /// Directories count as children only with `dirs`.
    pub fn children(&self, dir: &str, dirs: bool) -> (Vec<(String, bool)>, bool) {
        let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        let mut out = Vec::new();
        for (p, e) in
            self.entries.range(prefix.clone()..).take_while(|(p, _)| p.starts_with(&prefix))
        {
            let rest = &p[prefix.len()..];
            if !rest.contains('/') {
                out.push((
                    rest.to_string(),
                    matches!(e, SnapEntry::File(_) | SnapEntry::Symlink(_))
                        || (dirs && matches!(e, SnapEntry::Dir)),
                ));
            }
        }
        for w in &self.whiteouts {
            if let Some(rest) = w.strip_prefix(&prefix) {
                if !rest.contains('/') {
                    out.push((rest.to_string(), false));
                }
            }
        }
        let hidden = self.opaque.contains(dir)
            || (!dir.is_empty()
                && (self.hides(dir)
                    || self.entries.get(dir).is_some_and(|e| !matches!(e, SnapEntry::Dir))));
        (out, hidden)
    }
}

/// What the merged view of `snapshots` (topmost first) has at `path`, without following a
/// final symlink: `None` when nothing is there. `Err(i)` means layer `i` has a file whose
/// content the snapshot did not keep.
pub fn lookup<'a>(
    snapshots: impl Iterator<Item = Result<&'a Snapshot>>,
    path: &str,
) -> Result<Option<&'a SnapEntry>> {
    for snap in snapshots {
        let snap = snap?;
        if let Some(e) = snap.entries.get(path) {
            return Ok(Some(e));
        }
        if snap.hides(path) {
            return Ok(None);
        }
    }
    Ok(None)
}

/// Resolves symlinks in `path`'s directories (and in the path itself when `last` is set)
/// inside the image, as the kernel would with the image as root. `kind(p)` answers what the
/// merged image has at `p`. More than [`MAX_SYMLINKS`] links (a loop) is
/// [`Exceeded::Symlinks`], as the kernel's `ELOOP`. `kind` may stop the walk with an error of
/// the caller's own type (a package backend refusing to write through a link it placed).
pub fn resolve_in_image<E: From<Error>>(
    path: &str,
    last: bool,
    kind: &mut dyn FnMut(&str) -> Result<Option<SnapEntry>, E>,
) -> Result<Option<String>, E> {
    let mut parts: Vec<String> =
        normalize(path).map(|p| p.split('/').map(str::to_string).collect()).unwrap_or_default();
    let mut done: Vec<String> = Vec::new();
    let mut hops = 0;
    while !parts.is_empty() {
        let comp = parts.remove(0);
        done.push(comp);
        if parts.is_empty() && !last {
            break;
        }
        let here = done.join("/");
        if let Some(SnapEntry::Symlink(target)) = kind(&here)? {
            hops += 1;
            if hops > MAX_SYMLINKS {
                return Err(Error::Limit {
                    what: format!("/{}", normalize(path).unwrap_or_default()),
                    exceeded: Exceeded::Symlinks,
                }
                .into());
            }
            done.pop();
            let base = if target.starts_with('/') { String::new() } else { done.join("/") };
            let resolved = resolve(&base, &target).unwrap_or_default();
            let mut rest: Vec<String> =
                resolved.split('/').filter(|p| !p.is_empty()).map(str::to_string).collect();
            rest.extend(parts);
            parts = rest;
            done.clear();
        }
    }
    Ok(Some(done.join("/")))
}
