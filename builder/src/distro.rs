//! Distro detection from `/etc/os-release` (os-release(5)).
use serde::Serialize;

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct OsRelease {
    pub id: String,
    pub version_id: String,
    pub codename: Option<String>,
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
                "ID" => r.id = v,
                "VERSION_ID" => r.version_id = v,
                "VERSION_CODENAME" => r.codename = Some(v),
                "PRETTY_NAME" => r.pretty_name = Some(v),
                _ => {}
            }
        }
        r
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_debian_and_ubuntu() {
        let d = OsRelease::parse("PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nVERSION_CODENAME=bookworm\nID=debian\n");
        assert_eq!((d.id.as_str(), d.version_id.as_str(), d.codename.as_deref()), ("debian", "12", Some("bookworm")));
        let u = OsRelease::parse("ID=ubuntu\nVERSION_ID='22.04'\n# comment\nVERSION_CODENAME=jammy");
        assert_eq!(u.version_id, "22.04");
    }
}
