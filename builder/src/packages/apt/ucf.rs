//! `ucf` and `ucfr` as a postinst calls them on a first install, and `touch`, as ucf's own
//! postinst makes its state files: what they leave, following `/usr/bin/ucf` and
//! `/usr/bin/ucfr` of ucf 3.0043 (Debian 12) and 3.0052 (Debian 13).
//!
//! `ucf [--three-way] [--debconf-ok] SRC DEST` where DEST is absent and ucf's hashfile has no
//! line for it (the first install): `cp -pf SRC DEST` (SRC's mode and owner); the hashfile
//! (`/var/lib/ucf/hashfile`) rotated (`cp -p` of `hashfile.6`…`hashfile.0` one up, the
//! hashfile to `hashfile.0`) and rewritten with the line `MD5  DEST` last; SRC copied to
//! `/var/lib/ucf/cache/` under DEST's name with `/` as `:` when `--three-way` is given or SRC is
//! under 25600 bytes. ucf 3.0052 `unset`s IFS and then issues debconf commands (it loads its
//! templates whenever the caller did not source debconf's confmodule), which leaves IFS empty,
//! so its `for i in $(seq 6 -1 0)` runs once over one word and only `hashfile.0` is made; that
//! is reproduced (seen in Docker: two calls leave `hashfile.0` and `hashfile.1` on Debian 12,
//! only `hashfile.0` on 13).
//!
//! `ucfr PKG DEST`: the registry (`/var/lib/ucf/registry`) gets `PKG \t DEST` last, after
//! `registry.N` are rotated (`cp -f`); an association already there changes nothing.
//!
//! Not written: debconf's database under `/var/cache/debconf` (ucf loads its templates into
//! `templates.dat` on every call and rewrites it with the same bytes; ucf's own postinst on
//! Debian 12 registers them): ucf loads them again whenever it runs. Anything else (DEST
//! already there, a hashfile line for it, a caller that sourced confmodule, a symlink on the
//! way) goes to the sandbox. Held against `apt-get install` in Docker (owfs-common on
//! Debian 12 and 13).
use md5::{Digest as _, Md5};

use crate::error::Result;
use crate::packages::image;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::{EntryKind, LayerContents};
use erdma_oci::rootfs::SnapEntry;

const STATE: &str = "/var/lib/ucf";
const UCF: &str = "/usr/bin/ucf";
const CONFMODULE: &str = "/usr/share/debconf/confmodule";
/// The largest file read (SRC, the state files).
const MAX: u64 = 8 << 20;

/// One call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Call {
    Ucf {
        src: String,
        dest: String,
        three_way: bool,
    },
    Ucfr {
        package: String,
        dest: String,
    },
    /// `touch PATH`: an empty file where there is none (umask 022), else only its time.
    Touch(String),
}

impl Call {
    /// Reads `ucf`, `ucfr` and `touch` in the forms emulated; `None` for any other.
    pub(super) fn parse(words: &[String]) -> Option<Call> {
        let plain = |s: &str| {
            s.starts_with('/')
                && s.len() > 1
                && !s.ends_with('/')
                && s.bytes().all(|b| b.is_ascii_graphic() && !b"\\[]*?^$&|#'\"`".contains(&b))
        };
        let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
        match words[0].as_str() {
            "ucf" => {
                let mut three_way = false;
                let mut rest = args.as_slice();
                while let [flag, tail @ ..] = rest {
                    match *flag {
                        "--three-way" => three_way = true,
                        "--debconf-ok" => {}
                        _ => break,
                    }
                    rest = tail;
                }
                let [src, dest] = rest else { return None };
                (plain(src) && plain(dest)).then(|| Call::Ucf {
                    src: src.to_string(),
                    dest: dest.to_string(),
                    three_way,
                })
            }
            "ucfr" => {
                let [package, dest] = args.as_slice() else { return None };
                let name_ok = !package.is_empty()
                    && package.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
                (name_ok && plain(dest))
                    .then(|| Call::Ucfr { package: package.to_string(), dest: dest.to_string() })
            }
            "touch" => {
                let [path] = args.as_slice() else { return None };
                plain(path).then(|| Call::Touch(path.to_string()))
            }
            _ => None,
        }
    }
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Call::Ucf { src, dest, three_way: true } => write!(f, "ucf --three-way {src} {dest}"),
            Call::Ucf { src, dest, three_way: false } => write!(f, "ucf {src} {dest}"),
            Call::Ucfr { package, dest } => write!(f, "ucfr {package} {dest}"),
            Call::Touch(path) => write!(f, "touch {path}"),
        }
    }
}

/// Whether ucf calls can be emulated in this image: its `/usr/bin/ucf` (the layer's where the
/// plan brings one, with every package unpacked) is a version emulated; for `plan`, which
/// unpacks nothing, a `ucf` package in the plan is taken as one (the build checks it).
pub(super) fn emulable(
    base: &dyn BaseFiles,
    layer: Option<&LayerContents>,
    ucf_planned: bool,
) -> Result<bool> {
    let empty = LayerContents::new();
    let script = image::read(UCF, base, layer.unwrap_or(&empty), MAX)?;
    Ok(match script {
        Some(s) => Variant::of(&s).is_some(),
        None => layer.is_none() && ucf_planned,
    })
}

/// The ucf there is, told by the lines that differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// 3.0043 (Debian 12, Ubuntu 22.04 and 24.04): `grep -Ev` and no `unset IFS`.
    Ereg,
    /// 3.0052 (Debian 13): `grep -v` of a BRE and `unset IFS`.
    Bre,
}

impl Variant {
    fn of(script: &[u8]) -> Option<Variant> {
        let s = std::str::from_utf8(script).ok()?;
        let common = s.contains("replace_md5sum ()")
            && s.contains("[ \"$file_size\" -lt 25600 ]")
            && s.contains("md5sum \"$orig_new_file\" | sed \"s|$orig_new_file|$dest_file|\" >>");
        let ereg = s
            .contains("grep -Ev \"[[:space:]]${safe_dest_file}$\" \"$statedir/hashfile\" >")
            && !s.contains("\nunset IFS\n");
        let bre = s.contains("grep -v \"${dest_file_bre}\" \"$statedir/hashfile\" >")
            && s.contains("\nunset IFS\n");
        match (common, ereg, bre) {
            (true, true, false) => Some(Variant::Ereg),
            (true, false, true) => Some(Variant::Bre),
            _ => None,
        }
    }
}

/// Applies `calls` (by the package whose postinst makes them) in order.
pub(super) fn apply(
    calls: &[(String, Call)],
    base: &dyn BaseFiles,
    layer: &mut LayerContents,
) -> Result<()> {
    for (package, call) in calls {
        let refuse = |why: String| {
            crate::packages::scripts::needs_sandbox(package, "postinst", format!("{call} ({why})"))
        };
        match call {
            Call::Touch(path) => {
                if image::exists(path, base, layer)? {
                    continue;
                }
                let parent = image::parent(path);
                if !image::is_dir(parent, base, layer)? {
                    return Err(refuse(format!("no directory {parent}")));
                }
                layer.add_file(&image::real(path, base)?, Vec::new(), 0o644)?;
            }
            Call::Ucf { src, dest, three_way } => {
                let script = image::read(UCF, base, layer, MAX)?;
                let Some(variant) = script.as_deref().and_then(Variant::of) else {
                    return Err(refuse(format!("{UCF} is not one of the versions emulated")));
                };
                let (content, mode, uid, gid) = source(src, base, layer)
                    .ok_or_else(|| refuse(format!("{src} is not a regular file of the image")))?;
                if image::exists(dest, base, layer)? {
                    return Err(refuse(format!("{dest} is there already")));
                }
                let parent = image::parent(dest);
                if !image::is_dir(parent, base, layer)? {
                    return Err(refuse(format!("no directory {parent}")));
                }
                let hashfile = format!("{STATE}/hashfile");
                let old = image::read(&hashfile, base, layer, MAX)?;
                let listed = |t: &[u8]| {
                    String::from_utf8_lossy(t).lines().any(|l| {
                        l.strip_suffix(dest.as_str())
                            .is_some_and(|head| head.ends_with(|c: char| c.is_ascii_whitespace()))
                    })
                };
                if old.as_deref().is_some_and(listed) {
                    return Err(refuse(format!("{hashfile} lists {dest} already")));
                }
                // dest: `cp -pf`.
                let real_dest = image::real(dest, base)?;
                layer.add_file(&real_dest, content.clone(), mode)?;
                layer.set_owner_mode(&real_dest, mode, uid, gid)?;
                image::ensure_dir(&format!("{STATE}/cache"), base, layer)?;
                let sum: [u8; 16] = Md5::digest(&content).into();
                let line = format!("{}  {dest}\n", hex::encode(sum));
                match old {
                    Some(old) => {
                        // With confmodule there, ucf 3.0052 has issued debconf commands and its
                        // rotation loop does not run (module doc).
                        let loop_runs =
                            variant == Variant::Ereg || !image::exists(CONFMODULE, base, layer)?;
                        if loop_runs {
                            rotate(&hashfile, base, layer)?;
                        }
                        layer.add_file(
                            &image::real(&format!("{hashfile}.0"), base)?,
                            old.clone(),
                            0o644,
                        )?;
                        let mut new = old;
                        new.extend_from_slice(line.as_bytes());
                        layer.add_file(&image::real(&hashfile, base)?, new, 0o644)?;
                    }
                    None => {
                        layer.add_file(&image::real(&hashfile, base)?, line.into_bytes(), 0o644)?
                    }
                }
                if *three_way || content.len() < 25600 {
                    let cached = format!("{STATE}/cache/{}", dest.replace('/', ":"));
                    let real = image::real(&cached, base)?;
                    layer.add_file(&real, content, mode)?;
                    layer.set_owner_mode(&real, mode, uid, gid)?;
                }
            }
            Call::Ucfr { package: owner, dest } => {
                // `readlink -m DEST`: the directories' symlinks resolved; DEST itself a symlink
                // is not reproduced.
                if let Some(SnapEntry::Symlink(_)) = image::kind(dest, base, layer)? {
                    return Err(refuse(format!("{dest} is a symlink")));
                }
                let real_dest = format!("/{}", image::real(dest, base)?);
                image::ensure_dir(STATE, base, layer)?;
                let registry = format!("{STATE}/registry");
                let old = image::read(&registry, base, layer, MAX)?.unwrap_or_default();
                let text = String::from_utf8_lossy(&old).to_string();
                let owners: Vec<&str> = text
                    .lines()
                    .filter_map(|l| {
                        let head = l.strip_suffix(real_dest.as_str())?;
                        head.ends_with(|c: char| c.is_ascii_whitespace())
                            .then(|| head.split_whitespace().next().unwrap_or_default())
                    })
                    .collect();
                match owners.as_slice() {
                    [] => {}
                    [o] if o == owner => continue,
                    _ => return Err(refuse(format!("{registry} has {dest} for {owners:?}"))),
                }
                rotate(&registry, base, layer)?;
                layer.add_file(
                    &image::real(&format!("{registry}.0"), base)?,
                    old.clone(),
                    0o644,
                )?;
                let mut new = old;
                new.extend_from_slice(format!("{owner} \t {real_dest}\n").as_bytes());
                layer.add_file(&image::real(&registry, base)?, new, 0o644)?;
            }
        }
    }
    Ok(())
}

/// `for i in 6 … 0: [ -e FILE.i ] && cp FILE.i FILE.(i+1)`: 0644 copies, as both `cp -p` of
/// ucf's 0644 files (the hashfile) and `cp -f` under umask 022 (the registry) make them.
fn rotate(file: &str, base: &dyn BaseFiles, layer: &mut LayerContents) -> Result<()> {
    for i in (0..=6).rev() {
        if let Some(t) = image::read(&format!("{file}.{i}"), base, layer, MAX)? {
            layer.add_file(&image::real(&format!("{file}.{}", i + 1), base)?, t, 0o644)?;
        }
    }
    Ok(())
}

/// SRC's bytes, mode and owner: a regular file of the layer (the package's); one of the base
/// is not taken (its metadata is not kept here).
fn source(
    src: &str,
    base: &dyn BaseFiles,
    layer: &LayerContents,
) -> Option<(Vec<u8>, u32, u64, u64)> {
    let real = image::real(src, base).ok()?;
    match layer.get(&real) {
        Some(e) => match &e.kind {
            EntryKind::File(c) => Some((c.clone(), e.mode & 0o7777, e.uid, e.gid)),
            _ => None,
        },
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    /// The forms read, and some that are not.
    #[test]
    fn forms() {
        assert_eq!(
            Call::parse(&w("ucf --three-way /usr/share/owfs/owfs.conf /etc/owfs.conf")),
            Some(Call::Ucf {
                src: "/usr/share/owfs/owfs.conf".into(),
                dest: "/etc/owfs.conf".into(),
                three_way: true
            })
        );
        assert_eq!(
            Call::parse(&w("ucfr owfs-common /etc/owfs.conf")),
            Some(Call::Ucfr { package: "owfs-common".into(), dest: "/etc/owfs.conf".into() })
        );
        assert_eq!(
            Call::parse(&w("touch /var/lib/ucf/hashfile")),
            Some(Call::Touch("/var/lib/ucf/hashfile".into()))
        );
        for s in [
            "ucf --purge /etc/x",
            "ucf usr/share/x /etc/x",
            "ucf --src-dir /a /b /c",
            "ucfr --force p /etc/x",
            "touch -d now /x",
            "touch /a /b",
        ] {
            assert_eq!(Call::parse(&w(s)), None, "{s}");
        }
    }

    /// The lines that tell ucf 3.0043 from 3.0052 (read from `/usr/bin/ucf` of each, in the
    /// Debian 12 and 13 archives); anything else is neither.
    #[test]
    fn the_variant_is_read_from_the_image_script() {
        let common = "replace_md5sum () {\n    if [ \"$file_size\" -lt 25600 ]; then\n\t    md5sum \"$orig_new_file\" | sed \"s|$orig_new_file|$dest_file|\" >> \\\n";
        let d12 = "\t    grep -Ev \"[[:space:]]${safe_dest_file}$\" \"$statedir/hashfile\" > \\\n";
        let d13 =
            "\t    grep -v \"${dest_file_bre}\" \"$statedir/hashfile\" > \\\nIFS=,\nunset IFS\n";
        assert_eq!(Variant::of(format!("{common}{d12}").as_bytes()), Some(Variant::Ereg));
        assert_eq!(Variant::of(format!("{common}{d13}").as_bytes()), Some(Variant::Bre));
        assert_eq!(Variant::of(common.as_bytes()), None);
        assert_eq!(Variant::of(d12.as_bytes()), None);
    }
}
