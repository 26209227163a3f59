//! Distro detection from `/etc/os-release` (os-release(5)).
use serde::Serialize;

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct OsRelease {
    pub id: String,
    /// `ID_LIKE`: the distributions this one derives from, closest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub id_like: Vec<String>,
    pub version_id: String,
    pub codename: Option<String>,
    /// `UBUNTU_CODENAME` (Ubuntu and its derivatives: Mint, Pop!_OS) or `DEBIAN_CODENAME`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_codename: Option<String>,
    pub pretty_name: Option<String>,
}

impl OsRelease {
    /// Parses the shell-style `KEY=value` lines; quotes and backslash escapes as os-release(5) says.
    pub fn parse(text: &str) -> OsRelease {
        let mut r = OsRelease::default();
        for line in text.lines() {
            let Some((k, v)) = line.trim().split_once('=') else { continue };
            let v = unquote(v.trim());
            match k.trim() {
                "ID" => r.id = v.to_ascii_lowercase(),
                "ID_LIKE" => {
                    r.id_like = v.split_whitespace().map(str::to_ascii_lowercase).collect()
                }
                "VERSION_ID" => r.version_id = v,
                "VERSION_CODENAME" if !v.is_empty() => r.codename = Some(v),
                "UBUNTU_CODENAME" | "DEBIAN_CODENAME" if !v.is_empty() => {
                    r.parent_codename = Some(v)
                }
                "PRETTY_NAME" => r.pretty_name = Some(v),
                _ => {}
            }
        }
        r
    }
}

/// The releases of the families we know, by codename: a derivative names its parent's
/// codename (`UBUNTU_CODENAME=noble`, or a shared `VERSION_CODENAME=bookworm`), and Debian
/// testing and unstable have a codename but no `VERSION_ID`.
const RELEASES: &[(&str, &str, &str)] = &[
    ("debian", "buster", "10"),
    ("debian", "bullseye", "11"),
    ("debian", "bookworm", "12"),
    ("debian", "trixie", "13"),
    ("debian", "forky", "14"),
    ("debian", "duke", "15"),
    ("ubuntu", "trusty", "14.04"),
    ("ubuntu", "xenial", "16.04"),
    ("ubuntu", "bionic", "18.04"),
    ("ubuntu", "focal", "20.04"),
    ("ubuntu", "jammy", "22.04"),
    ("ubuntu", "noble", "24.04"),
    ("ubuntu", "oracular", "24.10"),
    ("ubuntu", "plucky", "25.04"),
    ("ubuntu", "questing", "25.10"),
    ("ubuntu", "resolute", "26.04"),
];

/// A release of a known family that an image is (or derives from).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FamilyRelease {
    /// `debian` or `ubuntu`.
    pub family: String,
    /// `13`, `24.04`; empty for a codename we do not know (a newer one).
    pub version: String,
    pub codename: Option<String>,
    /// Whether the image is the family itself rather than a derivative.
    pub own: bool,
}

impl FamilyRelease {
    /// `Debian 13 (trixie)`, `Ubuntu 24.10`.
    pub fn pretty(&self) -> String {
        let mut chars = self.family.chars();
        let mut name: String =
            chars.next().map(|c| c.to_ascii_uppercase()).into_iter().chain(chars).collect();
        if !self.version.is_empty() {
            name = format!("{name} {}", self.version);
        }
        match &self.codename {
            Some(c) => format!("{name} ({c})"),
            None => name,
        }
    }
}

/// Compares dotted release numbers (`24.10` after `24.04`, `13` after `12`) numerically.
pub fn cmp_release(a: &str, b: &str) -> std::cmp::Ordering {
    let parts = |s: &str| s.split('.').map(|p| p.parse::<u64>().unwrap_or(0)).collect::<Vec<_>>();
    parts(a).cmp(&parts(b))
}

impl OsRelease {
    /// Which release of `family` this image is: its own `VERSION_ID` when `ID` is the family,
    /// else (a derivative naming it in `ID_LIKE`) the release its codename names. `None` when
    /// the image is not of the family.
    pub fn release_of(&self, family: &str) -> Option<FamilyRelease> {
        let by_codename = |c: &str| {
            RELEASES.iter().find(|(f, n, _)| *f == family && *n == c).map(|(_, _, v)| v.to_string())
        };
        if self.id == family {
            let codename = self.codename.clone().or_else(|| {
                RELEASES
                    .iter()
                    .find(|(f, _, v)| *f == family && *v == self.version_id)
                    .map(|(_, n, _)| n.to_string())
            });
            let version = if self.version_id.is_empty() {
                codename.as_deref().and_then(by_codename).unwrap_or_default()
            } else {
                self.version_id.clone()
            };
            return Some(FamilyRelease { family: family.into(), version, codename, own: true });
        }
        if !self.id_like.iter().any(|l| l == family) {
            return None;
        }
        // A derivative: Mint and Pop!_OS name Ubuntu's release in UBUNTU_CODENAME; Raspberry
        // Pi OS shares Debian's VERSION_CODENAME.
        for c in self.parent_codename.iter().chain(&self.codename) {
            if let Some(v) = by_codename(c) {
                return Some(FamilyRelease {
                    family: family.into(),
                    version: v,
                    codename: Some(c.clone()),
                    own: false,
                });
            }
        }
        Some(FamilyRelease {
            family: family.into(),
            version: String::new(),
            codename: self.parent_codename.clone().or(self.codename.clone()),
            own: false,
        })
    }

    /// The families this image is or derives from, closest first (`ID`, then `ID_LIKE`).
    pub fn families(&self) -> Vec<&str> {
        std::iter::once(self.id.as_str()).chain(self.id_like.iter().map(String::as_str)).collect()
    }

    /// `PRETTY_NAME`, else `ID VERSION_ID`.
    pub fn describe(&self) -> String {
        self.pretty_name
            .clone()
            .unwrap_or_else(|| format!("{} {}", self.id, self.version_id).trim().to_string())
    }
}

fn unquote(v: &str) -> String {
    let inner = v
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
        .unwrap_or(v);
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.extend(chars.next());
        } else {
            out.push(c);
        }
    }
    out
}

/// The names `/etc/redhat-release` and `/etc/system-release` start with, and the os-release
/// `ID` each stands for (CentOS 6 and other images from before os-release).
const RELEASE_FILE_NAMES: &[(&str, &str)] = &[
    ("CentOS", "centos"),
    ("Red Hat Enterprise Linux", "rhel"),
    ("Rocky Linux", "rocky"),
    ("AlmaLinux", "almalinux"),
    ("Alibaba Cloud Linux", "alinux"),
    ("Anolis OS", "anolis"),
    ("Oracle Linux", "ol"),
];

impl OsRelease {
    /// Reads a `/etc/redhat-release`-style line (`CentOS Linux release 7.9.2009 (Core)`): the
    /// distribution by its name, the release's major version as `VERSION_ID`, as dnf's
    /// `$releasever` is. `None` for a line naming no distribution we know.
    pub fn from_release_file(text: &str) -> Option<OsRelease> {
        let line = text.lines().next()?.trim();
        let id = RELEASE_FILE_NAMES.iter().find(|(name, _)| line.starts_with(name))?.1;
        let version = line
            .split_whitespace()
            .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()))?;
        let major = version.split('.').next()?.to_string();
        Some(OsRelease {
            id: id.to_string(),
            id_like: Vec::new(),
            version_id: major,
            codename: None,
            parent_codename: None,
            pretty_name: Some(line.to_string()),
        })
    }
}

/// The image's os-release(5): `/etc/os-release`, else `/usr/lib/os-release`, else (an
/// Enterprise Linux image from before os-release) `/etc/redhat-release` or
/// `/etc/system-release`.
pub fn of_image(
    files: &erdma_oci::files::ImageFiles<'_>,
) -> crate::error::Result<Option<OsRelease>> {
    for path in ["etc/os-release", "usr/lib/os-release"] {
        if let Some(t) = files.read(path, 64 << 10)? {
            return Ok(Some(OsRelease::parse(&String::from_utf8_lossy(&t))));
        }
    }
    for path in ["etc/redhat-release", "etc/system-release"] {
        if let Some(t) = files.read(path, 64 << 10)? {
            if let Some(os) = OsRelease::from_release_file(&String::from_utf8_lossy(&t)) {
                return Ok(Some(os));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_debian_and_ubuntu() {
        let d = OsRelease::parse("PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nVERSION_CODENAME=bookworm\nID=debian\n");
        assert_eq!(
            (d.id.as_str(), d.version_id.as_str(), d.codename.as_deref()),
            ("debian", "12", Some("bookworm"))
        );
        let u =
            OsRelease::parse("ID=ubuntu\nVERSION_ID='22.04'\n# comment\nVERSION_CODENAME=jammy");
        assert_eq!(u.version_id, "22.04");
    }

    #[test]
    fn enterprise_linux_release_files() {
        // CentOS 7.9's /etc/redhat-release and Alibaba Cloud Linux 3's /etc/system-release.
        let c = OsRelease::from_release_file("CentOS Linux release 7.9.2009 (Core)\n").unwrap();
        assert_eq!((c.id.as_str(), c.version_id.as_str()), ("centos", "7"));
        let a = OsRelease::from_release_file("Alibaba Cloud Linux release 3 (Soaring Falcon)\n")
            .unwrap();
        assert_eq!((a.id.as_str(), a.version_id.as_str()), ("alinux", "3"));
        let r = OsRelease::from_release_file("Rocky Linux release 9.3 (Blue Onyx)").unwrap();
        assert_eq!((r.id.as_str(), r.version_id.as_str()), ("rocky", "9"));
        assert_eq!(OsRelease::from_release_file("Fedora release 40 (Forty)"), None);
    }

    #[test]
    fn releases_of_families_and_derivatives() {
        // Debian 13's /etc/os-release as the debian:trixie image has it.
        let trixie = OsRelease::parse("PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"13\"\nVERSION=\"13 (trixie)\"\nVERSION_CODENAME=trixie\nDEBIAN_VERSION_FULL=13.1\nID=debian\n");
        assert_eq!(trixie.release_of("debian").unwrap().pretty(), "Debian 13 (trixie)");
        assert_eq!(trixie.release_of("ubuntu"), None);
        // Debian testing/unstable: a codename, no VERSION_ID.
        let sid = OsRelease::parse("PRETTY_NAME=\"Debian GNU/Linux forky/sid\"\nNAME=\"Debian GNU/Linux\"\nVERSION_CODENAME=forky\nID=debian\n");
        assert_eq!(sid.release_of("debian").unwrap().version, "14");
        // Linux Mint 22 (Ubuntu 24.04 based), as its os-release says.
        let mint = OsRelease::parse("NAME=\"Linux Mint\"\nVERSION=\"22 (Wilma)\"\nID=linuxmint\nID_LIKE=\"ubuntu debian\"\nVERSION_ID=\"22\"\nVERSION_CODENAME=wilma\nUBUNTU_CODENAME=noble\n");
        assert_eq!(mint.families(), ["linuxmint", "ubuntu", "debian"]);
        let r = mint.release_of("ubuntu").unwrap();
        assert_eq!((r.version.as_str(), r.own), ("24.04", false));
        assert_eq!(
            mint.release_of("debian").unwrap().version,
            "",
            "Mint does not say which Debian"
        );
        assert!(
            cmp_release("24.10", "24.04").is_gt()
                && cmp_release("9", "12").is_lt()
                && cmp_release("26.04", "26.04").is_eq()
        );
    }
}
