//! The Debian control-file format: `DEBIAN/control`, `/var/lib/dpkg/status`, `Packages`,
//! `Release` and `.sources` files (deb822(5), deb-control(5)).
//!
//! A [`Paragraph`] keeps its fields in order with their names spelled as read, and values in
//! the form dpkg keeps them (`lib/dpkg/parse.c`): the text after `Name:` with leading blanks
//! and trailing whitespace trimmed, continuation lines joined by `\n` with their leading space
//! kept. Writing a paragraph back therefore gives the text dpkg writes, byte for byte.
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Deb822Error {
    #[error("line {line}: continuation line before any field")]
    ContinuationBeforeField { line: usize },

    #[error("line {line}: expected `Name: value`, found no colon")]
    MissingColon { line: usize },

    #[error("line {line}: invalid field name `{name}`")]
    InvalidFieldName { line: usize, name: String },

    #[error("line {line}: duplicate field `{name}`")]
    DuplicateField { line: usize, name: String },

    #[error("invalid field name `{name}`")]
    InvalidName { name: String },

    #[error("value of field `{name}` cannot be written: {reason}")]
    InvalidValue { name: String, reason: &'static str },

    #[error("expected exactly one paragraph, found {found}")]
    ParagraphCount { found: usize },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Field {
    name: String,
    value: String,
}

/// One paragraph (stanza) of a control file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Paragraph {
    fields: Vec<Field>,
}

/// deb822(5): field names are printable US-ASCII without space or colon, and do not start
/// with `#` (a comment) or `-` (which would read as a PGP armour line).
fn valid_field_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(['#', '-'])
        && name.bytes().all(|c| c.is_ascii_graphic() && c != b':')
}

/// deb822(5): only space and tab count as whitespace for blank lines and continuations.
fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

fn is_blank_line(line: &str) -> bool {
    line.chars().all(is_blank)
}

/// Why `value` could not come out of [`parse`] unchanged, if it could not.
fn value_problem(value: &str) -> Option<&'static str> {
    let mut lines = value.split('\n');
    let first = lines.next().unwrap_or_default();
    if first.starts_with(is_blank) {
        return Some("it starts with whitespace");
    }
    if value.ends_with(|c: char| is_blank(c) || c == '\n' || c == '\r') {
        return Some("it ends with whitespace");
    }
    if value.contains('\r') {
        return Some("it contains a carriage return");
    }
    for line in lines {
        if !line.starts_with(is_blank) {
            return Some("a continuation line does not start with a space or tab");
        }
        if is_blank_line(line) {
            return Some("a continuation line is blank (it would end the paragraph)");
        }
    }
    None
}

impl Paragraph {
    pub fn new() -> Self {
        Self::default()
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.fields
            .iter()
            .position(|f| f.name.eq_ignore_ascii_case(name))
    }

    /// The value of field `name`, compared case-insensitively as deb822(5) says.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.position(name).map(|i| self.fields[i].value.as_str())
    }

    pub fn contains(&self, name: &str) -> bool {
        self.position(name).is_some()
    }

    /// Sets field `name` to `value`: in place (keeping the existing name's spelling and
    /// position) if the paragraph has it, else appended.
    ///
    /// `value` is in the stored form (see the module documentation: continuation lines start
    /// with a space or tab, a `.` line stands for an empty line in descriptions); a value that
    /// would not read back the same is refused rather than written into a broken file.
    pub fn set(&mut self, name: &str, value: impl Into<String>) -> Result<(), Deb822Error> {
        let value = value.into();
        if !valid_field_name(name) {
            return Err(Deb822Error::InvalidName {
                name: name.to_owned(),
            });
        }
        if let Some(reason) = value_problem(&value) {
            return Err(Deb822Error::InvalidValue {
                name: name.to_owned(),
                reason,
            });
        }
        match self.position(name) {
            Some(i) => self.fields[i].value = value,
            None => self.fields.push(Field {
                name: name.to_owned(),
                value,
            }),
        }
        Ok(())
    }

    /// Removes field `name`, returning its value.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        self.position(name).map(|i| self.fields.remove(i).value)
    }

    /// `(name, value)` pairs in file order, names spelled as read.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.fields
            .iter()
            .map(|f| (f.name.as_str(), f.value.as_str()))
    }

    pub fn len(&self) -> usize {
        self.fields.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }
}

impl fmt::Display for Paragraph {
    /// The dpkg form: `Name: value` lines; a value that starts on the next line (such as
    /// `Conffiles`) or is empty gets no space after the colon, as dpkg writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for field in &self.fields {
            f.write_str(&field.name)?;
            f.write_str(":")?;
            if !field.value.is_empty() && !field.value.starts_with('\n') {
                f.write_str(" ")?;
            }
            f.write_str(&field.value)?;
            f.write_str("\n")?;
        }
        Ok(())
    }
}

/// Paragraphs of a control file, parsed one at a time (for large `Packages` files).
pub struct Paragraphs<'a> {
    lines: std::iter::Enumerate<std::str::Split<'a, char>>,
    failed: bool,
}

/// Iterates over the paragraphs of `text`; after the first error it ends.
pub fn paragraphs(text: &str) -> Paragraphs<'_> {
    Paragraphs {
        lines: text.split('\n').enumerate(),
        failed: false,
    }
}

impl Paragraphs<'_> {
    fn next_paragraph(&mut self) -> Result<Option<Paragraph>, Deb822Error> {
        let mut paragraph = Paragraph::new();
        for (index, raw) in self.lines.by_ref() {
            let line_number = index + 1;
            // CRLF files read like LF files.
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            if is_blank_line(line) {
                if paragraph.is_empty() {
                    continue;
                }
                break;
            }
            // deb822(5): comment lines are ignored, even between continuation lines.
            if line.starts_with('#') {
                continue;
            }
            if line.starts_with(is_blank) {
                let field = paragraph
                    .fields
                    .last_mut()
                    .ok_or(Deb822Error::ContinuationBeforeField { line: line_number })?;
                field.value.push('\n');
                field.value.push_str(line);
                continue;
            }
            let (name, value) = line
                .split_once(':')
                .ok_or(Deb822Error::MissingColon { line: line_number })?;
            if !valid_field_name(name) {
                return Err(Deb822Error::InvalidFieldName {
                    line: line_number,
                    name: name.to_owned(),
                });
            }
            if paragraph.contains(name) {
                return Err(Deb822Error::DuplicateField {
                    line: line_number,
                    name: name.to_owned(),
                });
            }
            trim_last_value(&mut paragraph);
            paragraph.fields.push(Field {
                name: name.to_owned(),
                value: value.trim_start_matches(is_blank).to_owned(),
            });
        }
        trim_last_value(&mut paragraph);
        Ok((!paragraph.is_empty()).then_some(paragraph))
    }
}

/// dpkg trims trailing whitespace off a whole value once it has all its lines.
fn trim_last_value(paragraph: &mut Paragraph) {
    if let Some(field) = paragraph.fields.last_mut() {
        let len = field.value.trim_end_matches([' ', '\t', '\r']).len();
        field.value.truncate(len);
    }
}

impl Iterator for Paragraphs<'_> {
    type Item = Result<Paragraph, Deb822Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let result = self.next_paragraph();
        self.failed = result.is_err();
        result.transpose()
    }
}

/// Parses every paragraph of `text`. Paragraphs are separated by one or more blank lines
/// (lines of only spaces and tabs count as blank); `#` comment lines are skipped.
pub fn parse(text: &str) -> Result<Vec<Paragraph>, Deb822Error> {
    paragraphs(text).collect()
}

/// Parses a file that must hold exactly one paragraph, such as `DEBIAN/control`.
pub fn parse_single(text: &str) -> Result<Paragraph, Deb822Error> {
    let mut all = parse(text)?;
    if all.len() != 1 {
        return Err(Deb822Error::ParagraphCount { found: all.len() });
    }
    Ok(all.remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTROL: &str = "\
Package: libibverbs1
Source: rdma-core
Version: 44.0-2
Architecture: amd64
Multi-Arch: same
Depends: libc6 (>= 2.34), libnl-3-200 (>= 3.2.7),
 libnl-route-3-200 (>= 3.2.7), adduser
Conffiles:
 /etc/libibverbs.d/foo.driver 0123456789abcdef0123456789abcdef
Description: Library for direct userspace use of RDMA (InfiniBand/iWARP)
 libibverbs is a library that allows userspace processes to use RDMA
 .
 \"verbs\" as described in the InfiniBand Architecture Specification.
";

    #[test]
    fn parses_fields_in_order_with_continuations() {
        let p = parse_single(CONTROL).unwrap();
        let names: Vec<_> = p.fields().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "Package",
                "Source",
                "Version",
                "Architecture",
                "Multi-Arch",
                "Depends",
                "Conffiles",
                "Description"
            ]
        );
        assert_eq!(p.get("package"), Some("libibverbs1"));
        assert_eq!(p.get("MULTI-ARCH"), Some("same"));
        assert_eq!(
            p.get("Depends"),
            Some(
                "libc6 (>= 2.34), libnl-3-200 (>= 3.2.7),\n libnl-route-3-200 (>= 3.2.7), adduser"
            )
        );
        assert_eq!(
            p.get("Conffiles"),
            Some("\n /etc/libibverbs.d/foo.driver 0123456789abcdef0123456789abcdef")
        );
        assert!(p.get("Description").unwrap().contains("\n .\n \"verbs\""));
        assert_eq!(p.get("Missing"), None);
        assert_eq!(p.to_string(), CONTROL);
    }

    #[test]
    fn separators_comments_and_trimming() {
        let text = "# a sources file\nTypes: deb\n# between\nURIs: http://deb.debian.org/debian\n\
                    \n \t\n\n\
                    A:   spaced   \t\nB:value\n  cont  \n# inside a value\n\tcont2\nC:\n";
        let all = parse(text).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].get("types"), Some("deb"));
        assert_eq!(all[0].get("URIs"), Some("http://deb.debian.org/debian"));
        assert_eq!(all[1].get("A"), Some("spaced"));
        assert_eq!(all[1].get("B"), Some("value\n  cont  \n\tcont2"));
        assert_eq!(all[1].get("C"), Some(""));
        assert_eq!(
            all[1].to_string(),
            "A: spaced\nB: value\n  cont  \n\tcont2\nC:\n"
        );
        assert!(parse("").unwrap().is_empty());
        assert!(parse("\n\n  \n# only a comment\n").unwrap().is_empty());
        // CRLF reads like LF.
        let crlf = parse("A: 1\r\nB: 2\r\n more\r\n\r\nC: 3\r\n").unwrap();
        assert_eq!(crlf[0].get("B"), Some("2\n more"));
        assert_eq!(crlf[1].get("C"), Some("3"));
    }

    #[test]
    fn errors_name_the_line() {
        assert_eq!(
            parse(" continuation\nA: 1\n").unwrap_err(),
            Deb822Error::ContinuationBeforeField { line: 1 }
        );
        assert_eq!(
            parse("A: 1\n\n cont\n").unwrap_err(),
            Deb822Error::ContinuationBeforeField { line: 3 }
        );
        assert_eq!(
            parse("A: 1\nno colon here\n").unwrap_err(),
            Deb822Error::MissingColon { line: 2 }
        );
        assert_eq!(
            parse("A: 1\n: empty name\n").unwrap_err(),
            Deb822Error::InvalidFieldName {
                line: 2,
                name: String::new()
            }
        );
        assert_eq!(
            parse("A: 1\n\nBad Name: x\n").unwrap_err(),
            Deb822Error::InvalidFieldName {
                line: 3,
                name: "Bad Name".into()
            }
        );
        assert_eq!(
            parse("A: 1\n-----BEGIN PGP SIGNATURE: x\n").unwrap_err(),
            Deb822Error::InvalidFieldName {
                line: 2,
                name: "-----BEGIN PGP SIGNATURE".into()
            }
        );
        assert_eq!(
            parse("Package: a\npackage: b\n").unwrap_err(),
            Deb822Error::DuplicateField {
                line: 2,
                name: "package".into()
            }
        );
        assert_eq!(
            parse("A: 1\n\nB: 2\n").map(|_| ()),
            Ok(()),
            "the same name in two paragraphs is fine"
        );
        assert_eq!(
            parse("A: 1\n\n cont\n").unwrap_err().to_string(),
            "line 3: continuation line before any field"
        );
        assert_eq!(
            parse_single("A: 1\n\nA: 2\n").unwrap_err(),
            Deb822Error::ParagraphCount { found: 2 }
        );
        assert_eq!(
            parse_single("\n").unwrap_err(),
            Deb822Error::ParagraphCount { found: 0 }
        );
        // The iterator stops after an error.
        let mut it = paragraphs("A: 1\n\n x\n\nB: 2\n");
        assert!(it.next().unwrap().is_ok());
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }

    #[test]
    fn set_and_remove() {
        let mut p =
            parse_single("Package: foo\nStatus: install ok unpacked\nVersion: 1\n").unwrap();
        p.set("status", "install ok installed").unwrap();
        p.set("Conffiles", "\n /etc/foo 0123").unwrap();
        p.set("Description", "short\n long\n .\n more").unwrap();
        assert_eq!(
            p.to_string(),
            "Package: foo\nStatus: install ok installed\nVersion: 1\n\
             Conffiles:\n /etc/foo 0123\nDescription: short\n long\n .\n more\n"
        );
        assert_eq!(p.remove("VERSION").as_deref(), Some("1"));
        assert_eq!(p.remove("Version"), None);
        assert_eq!(p.len(), 4);
        // What was written reads back the same.
        assert_eq!(parse_single(&p.to_string()).unwrap(), p);

        for bad in ["", "a b", "a:b", "#a", "-a", "é"] {
            assert!(
                matches!(p.set(bad, "x"), Err(Deb822Error::InvalidName { .. })),
                "{bad:?}"
            );
        }
        for bad in [
            " leading",
            "trailing ",
            "two\nlines",
            "blank\n \n line",
            "ends\n",
            "cr\r\n x",
        ] {
            assert!(
                matches!(p.set("X", bad), Err(Deb822Error::InvalidValue { .. })),
                "{bad:?}"
            );
        }
        assert!(
            !p.contains("X"),
            "a refused value leaves the paragraph alone"
        );
        p.set("Empty", "").unwrap();
        assert!(p.to_string().ends_with("Empty:\n"));
    }

    /// The machine's own dpkg database: parsing and writing it back must give the same bytes.
    #[test]
    fn round_trips_the_dpkg_status_file() {
        let path = "/var/lib/dpkg/status";
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) => {
                eprintln!("skipping: cannot read {path}: {e} (not a Debian-based system?)");
                return;
            }
        };
        let start = std::time::Instant::now();
        let all = parse(&text).unwrap();
        let elapsed = start.elapsed();
        assert!(!all.is_empty());
        assert!(all.iter().all(|p| p.get("Package").is_some()));
        let written: String = all.iter().map(|p| format!("{p}\n")).collect();
        assert!(written == text, "status file did not round-trip");
        eprintln!("parsed {} paragraphs in {elapsed:?}", all.len());
    }

    /// A synthetic `Packages` file the size of Debian main (~60k paragraphs) parses quickly
    /// even in a debug build.
    #[test]
    fn parses_a_large_packages_file() {
        let stanza = "Package: libfoo{}\nVersion: 1.0-{}\nInstalled-Size: 123\n\
                      Maintainer: Debian Foo <foo@example.org>\nArchitecture: amd64\n\
                      Depends: libc6 (>= 2.34), libbar1 (>= 1.2)\n\
                      Description: a library\nMulti-Arch: same\n\
                      Homepage: https://example.org\nDescription-md5: 0123456789abcdef\n\
                      Section: libs\nPriority: optional\nFilename: pool/main/f/foo/libfoo.deb\n\
                      Size: 12345\nMD5sum: 0123456789abcdef0123456789abcdef\n\
                      SHA256: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n\n";
        let text: String = (0..60_000)
            .map(|i| stanza.replace("{}", &i.to_string()))
            .collect();
        let start = std::time::Instant::now();
        let mut count = 0;
        for paragraph in paragraphs(&text) {
            paragraph.unwrap();
            count += 1;
        }
        let elapsed = start.elapsed();
        assert_eq!(count, 60_000);
        eprintln!(
            "parsed {count} paragraphs ({} MB) in {elapsed:?}",
            text.len() >> 20
        );
        assert!(elapsed.as_secs() < 20, "took {elapsed:?}");
    }
}
