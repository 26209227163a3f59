//! Package payloads into the layer, for both backends: where each entry of a `.deb`'s
//! `data.tar` or an `.rpm`'s cpio lands, what is refused, and which files a reviewer should see.
//!
//! The backends normalise entry names first (`./usr/bin/x`, `/usr/bin/x` → `usr/bin/x`) and
//! refuse any `..` component, as dpkg and rpm do; [`Placer`] then decides where a normalised
//! entry goes:
//! - through the directory symlinks the *base image* has, resolved inside the image as the
//!   kernel would with the image as root (merged /usr: a package's `lib/x` lands in
//!   `usr/lib/x`, as dpkg and rpm write through `/lib -> usr/lib`); resolution never leaves the
//!   root (`..` stops there, an absolute target starts there);
//! - never through a symlink that *this build* installs (an earlier entry of the same package
//!   or of another one): `usr/lib -> /` followed by `usr/lib/x` is refused. Written into the
//!   layer, such an entry would land wherever the link points when a runtime extracts the
//!   layer, and extractors that do not resolve inside the root write outside it;
//! - a file, symlink or device never replaces a directory (the base's or one this build
//!   made), as neither dpkg ("trying to overwrite directory with nondirectory") nor rpm
//!   ("File from package already exists as a directory in system") does: a layer entry
//!   `usr/lib -> /tmp` would hide the base's whole `/usr/lib`;
//! - names holding a newline or NUL are refused (dpkg: "newline not allowed in archive object
//!   name"): dpkg's `.list` files and rpm's tools are one path per line.
//!
//! Nothing here writes to disk: a build never extracts a package, it only adds entries to the
//! layer it writes ([`erdma_oci::layer::LayerContents`]), so an escape could only happen
//! where a runtime extracts that layer.
//!
//! [`special`] is the one rule for what the report lists of a payload (setuid and setgid
//! files, device nodes, FIFOs, sockets), used by `build` and `plan` for both backends.
use std::collections::HashMap;

use serde::Serialize;

use erdma_oci::files::BaseFiles;
use erdma_oci::layer::Placing;
use erdma_oci::rootfs::SnapEntry;

/// Why an entry is refused; the caller names the package and the entry.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Refused {
    #[error("it would be outside the image root")]
    Escapes,
    #[error("{}", erdma_oci::layer::ODD_NAME)]
    OddName,
    #[error("it lies under /{parent}, a symlink to `{target}` that this build installs: writing through it would put the entry wherever the link points")]
    UnderSymlink { parent: String, target: String },
    #[error("it lies under /{parent}, which this build installs as a file")]
    UnderFile { parent: String },
    #[error("it would replace the directory /{path}{whose} with a {what} (dpkg and rpm refuse this too)")]
    ReplacesDir { path: String, whose: &'static str, what: &'static str },
    /// The base image could not be read where the entry goes (shared: a refusal is kept by
    /// the caller and also handed to the package reader).
    #[error("reading the base image where it goes")]
    Image(#[source] std::sync::Arc<erdma_oci::Error>),
}

/// Refusals compare by their fields; two image errors only when they are the same one.
impl PartialEq for Refused {
    fn eq(&self, other: &Refused) -> bool {
        use Refused::*;
        match (self, other) {
            (Escapes, Escapes) | (OddName, OddName) => true,
            (UnderSymlink { parent: a, target: b }, UnderSymlink { parent: c, target: d }) => {
                a == c && b == d
            }
            (UnderFile { parent: a }, UnderFile { parent: b }) => a == b,
            (
                ReplacesDir { path: a, whose: b, what: c },
                ReplacesDir { path: d, whose: e, what: f },
            ) => a == d && b == e && c == f,
            (Image(a), Image(b)) => std::sync::Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl From<erdma_oci::Error> for Refused {
    fn from(e: erdma_oci::Error) -> Refused {
        Refused::Image(std::sync::Arc::new(e))
    }
}

/// What this build has put at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Placed {
    Dir,
    Symlink(String),
    Other,
}

/// Places the entries of one build's packages, in order, into the base image; see the module
/// documentation. One placer serves every package of a build, so that a symlink one package
/// installs is seen by the next.
pub struct Placer<'a> {
    base: &'a dyn BaseFiles,
    placed: HashMap<String, Placed>,
}

impl<'a> Placer<'a> {
    pub fn new(base: &'a dyn BaseFiles) -> Placer<'a> {
        Placer { base, placed: HashMap::new() }
    }

    /// Where the entry `path` (normalised by the backend: relative, no `.` or `..`) lands in
    /// the layer, or `None` when nothing is written there (the root, or a directory the image
    /// has as a symlink: the link stays and is followed).
    pub fn place(&mut self, path: &str, kind: Placing<'_>) -> Result<Option<String>, Refused> {
        check_name(path)?;
        if path.starts_with('/') || path.split('/').any(|c| c == ".." || c == "." || c.is_empty()) {
            return Err(Refused::Escapes);
        }
        let placed = &self.placed;
        let base = self.base;
        let real =
            erdma_oci::rootfs::resolve_in_image(path, false, &mut |p| match placed.get(p) {
                Some(Placed::Symlink(target)) => {
                    Err(Refused::UnderSymlink { parent: p.to_string(), target: target.clone() })
                }
                Some(Placed::Other) => Err(Refused::UnderFile { parent: p.to_string() }),
                Some(Placed::Dir) | None => base.kind(p).map_err(Refused::from),
            })?
            .unwrap_or_else(|| path.to_string());
        if real.is_empty() {
            return Ok(None);
        }
        let ours = self.placed.get(&real).cloned();
        let theirs = match &ours {
            Some(_) => None,
            None => self.base.kind(&real)?,
        };
        match kind {
            Placing::Dir => {
                // dpkg and rpm keep a symlink where a package has a directory, and follow it.
                if matches!(ours, Some(Placed::Symlink(_)))
                    || matches!(theirs, Some(SnapEntry::Symlink(_)))
                {
                    return Ok(None);
                }
                self.placed.insert(real.clone(), Placed::Dir);
            }
            Placing::File | Placing::Symlink(_) => {
                let what = if matches!(kind, Placing::File) { "file" } else { "symlink" };
                if ours == Some(Placed::Dir) {
                    return Err(Refused::ReplacesDir {
                        path: real,
                        whose: " this build made",
                        what,
                    });
                }
                if ours.is_none() && matches!(theirs, Some(SnapEntry::Dir)) {
                    return Err(Refused::ReplacesDir {
                        path: real,
                        whose: " of the base image",
                        what,
                    });
                }
                let p = match kind {
                    Placing::Symlink(t) => Placed::Symlink(t.to_string()),
                    _ => Placed::Other,
                };
                self.placed.insert(real.clone(), p);
            }
        }
        // The layer gets the parents as directories: a later symlink or file there would
        // leave this entry under it, whichever package comes first.
        let mut at = real.as_str();
        while let Some((parent, _)) = at.rsplit_once('/') {
            self.placed.entry(parent.to_string()).or_insert(Placed::Dir);
            at = parent;
        }
        Ok(Some(real))
    }
}

/// Refuses names that break one-path-per-line databases (dpkg's `.list`, `rpm -ql`) or that
/// no tar header can carry.
pub fn check_name(path: &str) -> Result<(), Refused> {
    if erdma_oci::layer::odd_name(path) {
        return Err(Refused::OddName);
    }
    Ok(())
}

/// A file of a package's payload that the report lists: a regular file with the setuid or
/// setgid bit, a device node, a FIFO or a socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpecialFile {
    /// `name version` of the package.
    pub package: String,
    /// Absolute, as the package names it.
    pub path: String,
    /// `setuid`, `setgid` or `setuid+setgid` (regular files); `char`, `block`, `fifo`, `socket`.
    pub kind: &'static str,
    /// Permission bits, in octal (`4755`).
    pub mode: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub major: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub minor: Option<u32>,
    /// Whether the layer holds it: device nodes, FIFOs and sockets are not created (a layer
    /// built without root should not carry them, and Debian policy forbids them in packages).
    pub created: bool,
}

/// The type of a payload entry, for [`special`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    Dir,
    File,
    Symlink,
    Char { major: u32, minor: u32 },
    Block { major: u32, minor: u32 },
    Fifo,
    Socket,
}

/// The one rule, for both backends, of what the report lists of a payload entry: `package` is
/// `name version`, `path` the entry as the package names it, `mode` its permission bits.
pub fn special(package: &str, path: &str, file_type: FileType, mode: u32) -> Option<SpecialFile> {
    let mode = mode & 0o7777;
    let (kind, device) = match file_type {
        FileType::File => match mode & 0o6000 {
            0 => return None,
            0o4000 => ("setuid", None),
            0o2000 => ("setgid", None),
            _ => ("setuid+setgid", None),
        },
        FileType::Char { major, minor } => ("char", Some((major, minor))),
        FileType::Block { major, minor } => ("block", Some((major, minor))),
        FileType::Fifo => ("fifo", None),
        FileType::Socket => ("socket", None),
        // setgid directories (/var/mail 2775) only make new files inherit the group.
        FileType::Dir | FileType::Symlink => return None,
    };
    Some(SpecialFile {
        package: package.to_string(),
        path: format!("/{}", path.trim_start_matches("./").trim_start_matches('/')),
        kind,
        mode: format!("{mode:o}"),
        major: device.map(|d| d.0),
        minor: device.map(|d| d.1),
        created: matches!(file_type, FileType::File),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A base image as a map of path → entry.
    struct Base(BTreeMap<&'static str, SnapEntry>);

    impl BaseFiles for Base {
        fn read(&self, _: &str, _: u64) -> erdma_oci::Result<Option<Vec<u8>>> {
            Ok(None)
        }
        fn list(&self, _: &str) -> erdma_oci::Result<Vec<String>> {
            Ok(Vec::new())
        }
        fn real_path(&self, path: &str) -> erdma_oci::Result<Option<String>> {
            erdma_oci::rootfs::resolve_in_image(path, false, &mut |p| self.kind(p))
        }
        fn kind(&self, path: &str) -> erdma_oci::Result<Option<SnapEntry>> {
            Ok(self.0.get(path).cloned())
        }
    }

    fn base() -> Base {
        Base(BTreeMap::from([
            ("usr", SnapEntry::Dir),
            ("usr/lib", SnapEntry::Dir),
            ("lib", SnapEntry::Symlink("usr/lib".into())),
            ("opt", SnapEntry::Dir),
            ("opt/up", SnapEntry::Symlink("../..".into())),
            ("opt/abs", SnapEntry::Symlink("/etc".into())),
            ("etc", SnapEntry::Dir),
            ("etc/passwd", SnapEntry::File(None)),
        ]))
    }

    #[test]
    fn follows_the_base_symlinks_inside_the_image() {
        let b = base();
        let mut p = Placer::new(&b);
        assert_eq!(p.place("lib/x.so", Placing::File), Ok(Some("usr/lib/x.so".into())));
        // A directory the image has as a symlink is not written; the link stays.
        assert_eq!(p.place("lib", Placing::Dir), Ok(None));
        // `..` and absolute targets stop at the image root.
        assert_eq!(p.place("opt/up/etc/evil", Placing::File), Ok(Some("etc/evil".into())));
        assert_eq!(p.place("opt/up/../x", Placing::File), Err(Refused::Escapes));
        assert_eq!(p.place("opt/abs/shadow", Placing::File), Ok(Some("etc/shadow".into())));
        assert_eq!(p.place("opt/up", Placing::Dir), Ok(None));
    }

    #[test]
    fn never_writes_through_a_symlink_of_the_build() {
        let b = base();
        let mut p = Placer::new(&b);
        assert_eq!(p.place("srv/link", Placing::Symlink("/")), Ok(Some("srv/link".into())));
        assert_eq!(
            p.place("srv/link/etc/passwd", Placing::File),
            Err(Refused::UnderSymlink { parent: "srv/link".into(), target: "/".into() })
        );
        // Not through a symlink that replaced one of the base's, either.
        assert_eq!(p.place("lib", Placing::Symlink("../tmp")), Ok(Some("lib".into())));
        assert!(matches!(p.place("lib/x", Placing::File), Err(Refused::UnderSymlink { .. })));
        // A directory entry for the link is left out, its children refused.
        assert_eq!(p.place("srv/link", Placing::Dir), Ok(None));
        assert_eq!(p.place("srv/file", Placing::File), Ok(Some("srv/file".into())));
        assert_eq!(
            p.place("srv/file/x", Placing::File),
            Err(Refused::UnderFile { parent: "srv/file".into() })
        );
        // The other order: a link where an earlier entry's parent is.
        assert_eq!(p.place("var/evil/passwd", Placing::File), Ok(Some("var/evil/passwd".into())));
        assert!(matches!(
            p.place("var/evil", Placing::Symlink("/etc")),
            Err(Refused::ReplacesDir { whose: " this build made", .. })
        ));
    }

    #[test]
    fn never_replaces_a_directory() {
        let b = base();
        let mut p = Placer::new(&b);
        let err = p.place("usr/lib", Placing::Symlink("/tmp")).unwrap_err();
        assert_eq!(err.to_string(), "it would replace the directory /usr/lib of the base image with a symlink (dpkg and rpm refuse this too)");
        assert_eq!(p.place("srv/d", Placing::Dir), Ok(Some("srv/d".into())));
        assert!(matches!(
            p.place("srv/d", Placing::File),
            Err(Refused::ReplacesDir { whose: " this build made", .. })
        ));
        // Files replace files and symlinks, as dpkg and rpm do.
        assert_eq!(p.place("etc/passwd", Placing::File), Ok(Some("etc/passwd".into())));
        assert_eq!(p.place("etc/passwd", Placing::Symlink("x")), Ok(Some("etc/passwd".into())));
    }

    #[test]
    fn refuses_odd_names() {
        let b = base();
        let mut p = Placer::new(&b);
        assert_eq!(p.place("usr/bin/a\nb", Placing::File), Err(Refused::OddName));
        assert_eq!(p.place("usr/bin/a\0b", Placing::File), Err(Refused::OddName));
        assert_eq!(p.place("/etc/x", Placing::File), Err(Refused::Escapes));
        assert_eq!(p.place("a//b", Placing::File), Err(Refused::Escapes));
        assert_eq!(p.place("", Placing::Dir), Err(Refused::Escapes));
    }

    #[test]
    fn lists_setid_files_and_devices() {
        assert_eq!(special("p 1", "usr/bin/x", FileType::File, 0o755), None);
        assert_eq!(special("p 1", "usr/share", FileType::Dir, 0o2775), None);
        let s = special("p 1", "./usr/bin/su", FileType::File, 0o104755).unwrap();
        assert_eq!(
            (s.path.as_str(), s.kind, s.mode.as_str(), s.created),
            ("/usr/bin/su", "setuid", "4755", true)
        );
        assert_eq!(special("p 1", "usr/bin/w", FileType::File, 0o2755).unwrap().kind, "setgid");
        assert_eq!(
            special("p 1", "usr/bin/b", FileType::File, 0o6755).unwrap().kind,
            "setuid+setgid"
        );
        let d = special("p 1", "/dev/null", FileType::Char { major: 1, minor: 3 }, 0o666).unwrap();
        assert_eq!((d.kind, d.major, d.minor, d.created), ("char", Some(1), Some(3), false));
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"package": "p 1", "path": "/dev/null", "kind": "char", "mode": "666", "major": 1, "minor": 3, "created": false})
        );
    }
}
