//! Where apt's sources come from in an image: one-line `sources.list` and deb822
//! `.sources`, parsed as sources.list(5) describes them.

use super::*;
use crate::deb822;

/// apt's boolean option values (`StringToBool`).
fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "yes" | "true" | "with" | "on" | "enable" | "1" => Some(true),
        "no" | "false" | "without" | "off" | "disable" | "0" => Some(false),
        _ => None,
    }
}

fn split_list(v: &str) -> Vec<String> {
    v.split([',', ' ', '\t', '\n']).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

/// Parses one-line-style sources (`/etc/apt/sources.list`, `*.list`), sources.list(5):
/// `deb [ option=value ... ] URI suite [component ...]`. Comments (`#` to the end of the
/// line) and blank lines are skipped; malformed lines are skipped with a warning, as the
/// signature gives no way to report them.
pub fn parse_one_line_sources(text: &str) -> Vec<SourceEntry> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let warn =
            |why: &str| tracing::warn!("sources.list line {}: {why}: `{}`", n + 1, raw.trim());
        let (kind, mut rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        if kind != "deb" && kind != "deb-src" {
            warn("unknown type");
            continue;
        }
        let mut entry = SourceEntry { types: vec![kind.to_owned()], ..SourceEntry::default() };
        rest = rest.trim_start();
        if let Some(opts) = rest.strip_prefix('[') {
            let Some((opts, after)) = opts.split_once(']') else {
                warn("unterminated `[` options");
                continue;
            };
            rest = after;
            for opt in opts.split_whitespace() {
                let Some((key, value)) = opt.split_once('=') else {
                    warn("option without `=`");
                    continue;
                };
                match key {
                    "arch" => entry.arch = Some(split_list(value)),
                    "signed-by" => entry.signed_by = Some(value.to_owned()),
                    "trusted" => entry.trusted = parse_bool(value).unwrap_or(false),
                    _ => tracing::debug!("sources.list line {}: ignoring option `{key}`", n + 1),
                }
            }
        }
        let mut words = rest.split_whitespace();
        let (Some(uri), Some(suite)) = (words.next(), words.next()) else {
            warn("expected a URI and a suite");
            continue;
        };
        entry.uris.push(uri.to_owned());
        entry.suites.push(suite.to_owned());
        entry.components = words.map(str::to_owned).collect();
        out.push(entry);
    }
    out
}

/// The text of an inline `Signed-By` key block, as a key file would hold it: deb822's
/// continuation indentation removed and ` .` lines turned back into blank lines.
fn inline_key_block(value: &str) -> String {
    let mut out = String::new();
    for line in value.lines() {
        let line = line.strip_prefix([' ', '\t']).unwrap_or(line).trim_end();
        if out.is_empty() && line.is_empty() {
            continue;
        }
        out.push_str(if line == "." { "" } else { line });
        out.push('\n');
    }
    out
}

/// Parses deb822-style sources (`*.sources`, sources.list(5) "DEB822-STYLE FORMAT").
/// Stanzas with `Enabled: no` are left out; malformed stanzas are skipped with a warning.
pub fn parse_deb822_sources(text: &str) -> Vec<SourceEntry> {
    // Parse stanza by stanza so that one broken stanza does not hide the others.
    let mut stanzas = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            if !current.trim().is_empty() {
                stanzas.push(std::mem::take(&mut current));
            }
            current.clear();
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    if !current.trim().is_empty() {
        stanzas.push(current);
    }
    let mut out = Vec::new();
    for stanza in stanzas {
        let paragraphs = match deb822::parse(&stanza) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("skipping a malformed .sources stanza: {e}");
                continue;
            }
        };
        for p in paragraphs {
            let list = |name: &str| p.get(name).map(split_list).unwrap_or_default();
            if p.get("Enabled").and_then(parse_bool) == Some(false) {
                continue;
            }
            let entry = SourceEntry {
                types: list("Types"),
                uris: list("URIs"),
                suites: list("Suites"),
                components: list("Components"),
                signed_by: p.get("Signed-By").map(|v| {
                    if v.contains("-----BEGIN PGP") {
                        inline_key_block(v)
                    } else {
                        v.split_whitespace().collect::<Vec<_>>().join(" ")
                    }
                }),
                arch: p.get("Architectures").map(split_list),
                trusted: p.get("Trusted").and_then(parse_bool).unwrap_or(false),
            };
            if entry.types.is_empty() || entry.uris.is_empty() || entry.suites.is_empty() {
                tracing::warn!("skipping a .sources stanza without Types, URIs or Suites");
                continue;
            }
            out.push(entry);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_one_line_sources() {
        let text = "\
# a comment
deb http://deb.debian.org/debian bookworm main contrib # trailing comment
deb-src http://deb.debian.org/debian bookworm main

deb [arch=amd64,arm64 signed-by=/usr/share/keyrings/erdma.gpg] http://mirrors.cloud.aliyuncs.com/erdma jammy/erdma main
deb [ trusted=yes ] http://insecure.example/ ./
deb [arch=amd64] http://broken.example
rpm http://x/ y z
";
        let e = parse_one_line_sources(text);
        assert_eq!(e.len(), 4, "{e:#?}");
        assert_eq!(
            e[0],
            SourceEntry {
                types: vec!["deb".into()],
                uris: vec!["http://deb.debian.org/debian".into()],
                suites: vec!["bookworm".into()],
                components: vec!["main".into(), "contrib".into()],
                ..SourceEntry::default()
            }
        );
        assert_eq!(e[1].types, ["deb-src"]);
        assert_eq!(e[2].arch.as_deref(), Some(&["amd64".to_string(), "arm64".to_string()][..]));
        assert_eq!(e[2].signed_by.as_deref(), Some("/usr/share/keyrings/erdma.gpg"));
        assert_eq!(e[2].suites, ["jammy/erdma"]);
        assert!(!e[2].trusted);
        assert!(e[3].trusted);
        assert_eq!(e[3].suites, ["./"]);
        assert!(e[3].components.is_empty());
    }

    #[test]
    fn parses_deb822_sources() {
        let text = "\
# Debian sources
Types: deb deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://disabled.example/
Suites: x
Components: main
Enabled: no

Types: deb
URIs: http://inline.example/
Suites: stable
Components: main
Architectures: amd64
Trusted: yes
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 mDMEZQ==
 =abcd
 -----END PGP PUBLIC KEY BLOCK-----

this stanza is broken
";
        let e = parse_deb822_sources(text);
        assert_eq!(e.len(), 2, "{e:#?}");
        assert_eq!(e[0].types, ["deb", "deb-src"]);
        assert_eq!(e[0].suites, ["bookworm", "bookworm-updates"]);
        assert_eq!(e[0].components, ["main", "non-free-firmware"]);
        assert_eq!(
            e[0].signed_by.as_deref(),
            Some("/usr/share/keyrings/debian-archive-keyring.gpg")
        );
        assert_eq!(e[0].arch, None);
        assert!(!e[0].trusted);
        assert_eq!(e[1].uris, ["http://inline.example/"]);
        assert!(e[1].trusted);
        assert_eq!(e[1].arch.as_deref(), Some(&["amd64".to_string()][..]));
        assert_eq!(
            e[1].signed_by.as_deref(),
            Some("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEZQ==\n=abcd\n-----END PGP PUBLIC KEY BLOCK-----\n")
        );
    }
}
