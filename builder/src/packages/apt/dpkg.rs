//! dpkg's database in the image: `var/lib/dpkg/status` read and written, and the
//! `info/PACKAGE.*` files, as dpkg itself leaves them after an install.
use std::collections::{BTreeMap, BTreeSet};

use super::resolve::{package_label, Installed, Planned};
use crate::error::{Error, Result};
use crate::packages::payload::{self};
use erdma_deb::deb::Deb;
use erdma_deb::deb822::{self, Paragraph};
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;

pub(super) const STATUS: &str = "var/lib/dpkg/status";

pub(crate) const INFO: &str = "var/lib/dpkg/info";

/// dpkg's own status is a few MiB on big images; refuse absurd ones.
pub(crate) const MAX_STATUS: u64 = 64 << 20;

/// Installed dpkg packages: name → version (empty without a readable status file).
pub(super) fn installed(base: &dyn BaseFiles) -> Result<BTreeMap<String, String>> {
    let Some(raw) = base.read(STATUS, MAX_STATUS)? else { return Ok(BTreeMap::new()) };
    let Ok(paragraphs) = deb822::parse(&String::from_utf8_lossy(&raw)) else {
        return Ok(BTreeMap::new());
    };
    Ok(Installed::from_status(&paragraphs)
        .into_iter()
        .map(|i| (i.name, i.version.to_string()))
        .collect())
}

/// dpkg's name for a package's info files: `pkg:arch` for `Multi-Arch: same` (info format 1).
pub(crate) fn info_name(control: &Paragraph, arch: &str) -> String {
    let name = control.get("Package").unwrap_or_default();
    if control.get("Multi-Arch") == Some("same") {
        format!("{name}:{arch}")
    } else {
        name.to_string()
    }
}

/// The MD5 sums dpkg records of a package's files: in `info/PACKAGE.md5sums`, which `dpkg -i`
/// computes for every regular file and hard link when the package has no `md5sums` member,
/// and beside each conffile in the status file. Where the package brings its `md5sums`, only
/// the conffiles' are computed: dpkg copies the member as it is.
pub(crate) enum SumsWanted {
    All,
    /// The conffiles' payload paths (`etc/x`), as [`write_info`] looks them up.
    Conffiles(BTreeSet<String>),
}

impl SumsWanted {
    pub(crate) fn of(deb: &Deb, planned: &Planned) -> Result<SumsWanted> {
        Ok(if deb.control_files.contains_key("md5sums") {
            SumsWanted::Conffiles(
                conffiles(deb, planned)?.into_iter().map(|(_, path, _)| path).collect(),
            )
        } else {
            SumsWanted::All
        })
    }

    /// Whether the file at payload path `path` needs its MD5.
    pub(crate) fn wants(&self, path: &str) -> bool {
        match self {
            SumsWanted::All => true,
            SumsWanted::Conffiles(c) => c.contains(path),
        }
    }
}

/// A package's conffiles (deb-conffiles(5): `[remove-on-upgrade] PATH`), each as dpkg names
/// it in the status file (`/etc/x`), as its payload path (`etc/x`) and with the flag dpkg
/// records after its hash (procps' `/etc/sysctl.conf` on Debian 13: ` /etc/sysctl.conf
/// newconffile remove-on-upgrade`, as dpkg writes it for a conffile the package does not ship).
/// dpkg files a name under its path without the leading run of `/` and `./`
/// (`path_skip_slash_dotslash`, lib/dpkg/path.c), so `//etc/x` and `/./etc/x` are `/etc/x`.
/// Blank lines are skipped; a line with a flag dpkg does not know, or a name that is not
/// absolute, is refused as `dpkg -i` refuses the package (src/main/unpack.c,
/// `deb_parse_conffiles`).
fn conffiles(deb: &Deb, planned: &Planned) -> Result<Vec<(String, String, &'static str)>> {
    let Some(text) = deb.control_files.get("conffiles") else { return Ok(Vec::new()) };
    let refused = |reason: String| Error::Malformed {
        what: "conffiles",
        reference: package_label(planned),
        reason: reason.into(),
    };
    let mut out = Vec::new();
    // dpkg strips a line's trailing white space only: a leading space is an empty flag.
    for line in String::from_utf8_lossy(text).lines().map(str::trim_end) {
        if line.is_empty() {
            continue;
        }
        // A line not starting with `/` starts with a flag, up to the first space.
        let (flag, c) = match line.strip_prefix('/') {
            Some(_) => (None, line),
            None => match line.split_once(' ') {
                Some((flag, name)) => (Some(flag), name),
                None => (None, line),
            },
        };
        if !c.starts_with('/') {
            return Err(refused(format!("conffile name '{c}' is not an absolute pathname")));
        }
        let flag = match flag {
            None => "",
            Some("remove-on-upgrade") => " remove-on-upgrade",
            Some(other) => {
                return Err(refused(format!("unknown flag '{other}' for conffile '{c}'")))
            }
        };
        let mut path = c;
        while let Some(rest) = path.strip_prefix('/').or_else(|| path.strip_prefix("./")) {
            path = rest;
        }
        out.push((format!("/{path}"), path.to_string(), flag));
    }
    Ok(out)
}

pub(crate) fn write_info(
    deb: &Deb,
    planned: &Planned,
    list: &[String],
    files: &BTreeMap<String, Option<[u8; 16]>>,
    sums: &[(String, [u8; 16])],
    layer: &mut LayerContents,
    stanzas: &mut Vec<Paragraph>,
) -> Result<()> {
    let iname = info_name(&deb.control, &planned.arch);
    // The name becomes a file name in /var/lib/dpkg/info: dpkg's own rule (lib/dpkg/parsehelp.c
    // `pkg_name_is_illegal`: an alphanumeric, then alphanumerics and `-+._`), the architecture
    // alphanumerics and `-`.
    let (name, arch) = iname.split_once(':').unwrap_or((&iname, "x"));
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-+._".contains(c))
        || !arch.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        || arch.is_empty()
    {
        return Err(Error::Malformed {
            what: "package control",
            reference: package_label(planned),
            reason: format!(
                "`{}` is not a valid package name and architecture for dpkg",
                iname.escape_debug()
            )
            .into(),
        });
    }
    layer.add_file(
        &format!("{INFO}/{iname}.list"),
        (list.join("\n") + "\n").into_bytes(),
        0o644,
    )?;
    for (name, data) in &deb.control_files {
        // dpkg keeps each control file as info/PACKAGE.NAME: a flat name, one line.
        if name.contains('/') || payload::check_name(name).is_err() {
            return Err(Error::PackageEntry {
                package: package_label(planned),
                entry: name.escape_debug().to_string(),
                reason: "a control file must have a plain name (no `/`, newline or NUL)".into(),
            });
        }
        // Maintainer scripts stay executable, as dpkg installs them.
        let mode = if ["preinst", "postinst", "prerm", "postrm", "config"].contains(&name.as_str())
        {
            0o755
        } else {
            0o644
        };
        layer.add_file(&format!("{INFO}/{iname}.{name}"), data.clone(), mode)?;
    }
    // A package without an md5sums member gets one, as `dpkg -i` computes it while unpacking:
    // every regular file and hard link in payload order, conffiles included.
    if !deb.control_files.contains_key("md5sums") {
        let text: String =
            sums.iter().map(|(p, sum)| format!("{}  {p}\n", hex::encode(sum))).collect();
        layer.add_file(&format!("{INFO}/{iname}.md5sums"), text.into_bytes(), 0o644)?;
    }
    let bad = |e: erdma_deb::deb822::Deb822Error| Error::Malformed {
        what: "package control",
        reference: planned.name.clone(),
        reason: e.into(),
    };
    let mut fields: Vec<(String, String)> =
        deb.control.fields().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    // `apt-mark hold` writes the same selection.
    fields.push((
        "Status".into(),
        if planned.hold { "hold ok installed" } else { "install ok installed" }.into(),
    ));
    let mut lines = Vec::new();
    for (name, path, flag) in conffiles(deb, planned)? {
        let sum = match files.get(&path) {
            Some(Some(md5)) => hex::encode(md5),
            Some(None) => {
                return Err(Error::PackageEntry {
                    package: package_label(planned),
                    entry: name,
                    reason: "a conffile's MD5 was not computed while unpacking".into(),
                })
            }
            None => "newconffile".into(),
        };
        lines.push(format!(" {name} {sum}{flag}"));
    }
    if !lines.is_empty() {
        fields.push(("Conffiles".into(), format!("\n{}", lines.join("\n"))));
    }
    let mut stanza = Paragraph::default();
    for (k, v) in dpkg_order(fields) {
        stanza.set(&k, v).map_err(bad)?;
    }
    stanzas.push(stanza);
    Ok(())
}

/// The fields dpkg knows, in the order it writes them to its status file (`fieldinfos[]` in
/// dpkg's lib/dpkg/parse.c); every other field follows them, in the package's own order.
pub(crate) const DPKG_FIELDS: &[&str] = &[
    "Package",
    "Essential",
    "Protected",
    "Status",
    "Priority",
    "Section",
    "Installed-Size",
    "Origin",
    "Maintainer",
    "Bugs",
    "Architecture",
    "Multi-Arch",
    "Source",
    "Version",
    "Config-Version",
    "Replaces",
    "Provides",
    "Depends",
    "Pre-Depends",
    "Recommends",
    "Suggests",
    "Breaks",
    "Conflicts",
    "Enhances",
    "Conffiles",
    "Filename",
    "Size",
    "MD5sum",
    "MSDOS-Filename",
    "Description",
    "Triggers-Pending",
    "Triggers-Awaited",
];

/// `fields` as dpkg writes a status stanza: its known fields first, in its order.
pub(crate) fn dpkg_order(fields: Vec<(String, String)>) -> Vec<(String, String)> {
    let rank = |k: &str| {
        DPKG_FIELDS.iter().position(|f| f.eq_ignore_ascii_case(k)).unwrap_or(DPKG_FIELDS.len())
    };
    let mut fields: Vec<(usize, (String, String))> =
        fields.into_iter().map(|f| (rank(&f.0), f)).collect();
    // Stable: fields dpkg does not know keep the order the package gave them.
    fields.sort_by_key(|(r, _)| *r);
    fields.into_iter().map(|(_, f)| f).collect()
}

/// The base's dpkg status, as read once by [`super::install::resolve`] and used again by [`super::unpack::unpack`].
pub struct BaseStatus {
    pub paragraphs: Vec<Paragraph>,
    /// The file as it was, for `status-old`; `None` when the base has none.
    pub raw: Option<Vec<u8>>,
}

/// dpkg's string hash (FNV-1a, 32 bits: `str_fnv_hash` in lib/dpkg/strhash.c), which places
/// files and packages in its hash tables, and so the order it walks them in.
pub(super) fn fnv_hash(s: &str) -> u32 {
    let mut h: u32 = 2_166_136_261;
    for b in s.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(16_777_619);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// dpkg's own vectors (lib/dpkg/t/t-string.c, `test_str_fnv_hash`).
    #[test]
    fn fnv_hash_is_dpkgs() {
        for (s, h) in
            [("", 0x811c_9dc5), ("a", 0xe40c_292c), ("b", 0xe70c_2de5), ("d", 0xe10c_2473)]
        {
            assert_eq!(fnv_hash(s), h, "{s:?}");
        }
    }

    /// Names as `dpkg -i` (1.21) records them in the status file for the same conffiles list,
    /// and the lines it refuses the package for, with its words.
    #[test]
    fn conffiles_are_named_as_dpkg_names_them() {
        let pkg = crate::packages::apt::resolve::tests::available_from(
            "Package: cfx\nVersion: 1\nArchitecture: all",
        )
        .remove(0);
        let planned = Planned {
            name: "cfx".into(),
            arch: "all".into(),
            version: "1".parse().unwrap(),
            pkg,
            action: crate::packages::Action::Install,
            hold: false,
        };
        let deb = |list: &[u8]| Deb {
            control: Paragraph::default(),
            control_files: BTreeMap::from([("conffiles".to_string(), list.to_vec())]),
        };
        let list = b"/etc/a\r\n//etc/b\n\n   \n/./etc/c  \nremove-on-upgrade /etc/d\n";
        let got = conffiles(&deb(list), &planned).unwrap();
        let want = [
            ("/etc/a", "etc/a", ""),
            ("/etc/b", "etc/b", ""),
            ("/etc/c", "etc/c", ""),
            ("/etc/d", "etc/d", " remove-on-upgrade"),
        ];
        let got: Vec<_> = got.iter().map(|(n, p, f)| (n.as_str(), p.as_str(), *f)).collect();
        assert_eq!(got, want);
        for (list, why) in [
            (&b"/etc/a\netc/rel\n"[..], "conffile name 'etc/rel' is not an absolute pathname"),
            (b"# c\n", "conffile name 'c' is not an absolute pathname"),
            (b"foo /etc/a\n", "unknown flag 'foo' for conffile '/etc/a'"),
            (b" /etc/a\n", "unknown flag '' for conffile '/etc/a'"),
            (b"remove-on-upgrade  /etc/a\n", "conffile name ' /etc/a' is not an absolute pathname"),
        ] {
            let e = conffiles(&deb(list), &planned).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("malformed conffiles in {}", package_label(&planned))
            );
            let Error::Malformed { reason, .. } = e else { panic!("{e:?}") };
            assert_eq!(reason.to_string(), why);
        }
    }
}
