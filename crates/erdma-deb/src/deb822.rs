//! The Debian control-file format: `DEBIAN/control`, `/var/lib/dpkg/status`, `Packages`,
//! `Release` and `.sources` files (deb822(5), deb-control(5)).
//!
//! A [`Paragraph`] keeps its fields in order with their names spelled as read, and values in
//! the form dpkg keeps them (`lib/dpkg/parse.c`): the text after `Name:` with leading blanks
//! and trailing whitespace trimmed, continuation lines joined by `\n` with their leading space
//! kept. Writing a paragraph back therefore gives the text dpkg writes, byte for byte.
use std::fmt;
use std::ops::Range;

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
        self.fields.iter().position(|f| f.name.eq_ignore_ascii_case(name))
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
            return Err(Deb822Error::InvalidName { name: name.to_owned() });
        }
        if let Some(reason) = value_problem(&value) {
            return Err(Deb822Error::InvalidValue { name: name.to_owned(), reason });
        }
        match self.position(name) {
            Some(i) => self.fields[i].value = value,
            None => self.fields.push(Field { name: name.to_owned(), value }),
        }
        Ok(())
    }

    /// Removes field `name`, returning its value.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        self.position(name).map(|i| self.fields.remove(i).value)
    }

    /// `(name, value)` pairs in file order, names spelled as read.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.fields.iter().map(|f| (f.name.as_str(), f.value.as_str()))
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
    Paragraphs { lines: text.split('\n').enumerate(), failed: false }
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
            let (name, value) =
                line.split_once(':').ok_or(Deb822Error::MissingColon { line: line_number })?;
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

/// Where [`scan`] found the value of a field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueSpan {
    /// `text[range]` is the value exactly as [`Paragraph::get`] would give it.
    Text(Range<usize>),
    /// The value's lines are not contiguous in the text in their stored form (a comment line
    /// or a carriage return inside a multi-line value): parse the paragraph to read it.
    Folded,
}

/// One paragraph found by [`scan`]: where it is, and where its wanted values are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scanned<const N: usize> {
    /// From the start of the paragraph's first field line to the end of its last line;
    /// [`parse_single`] of `text[range]` gives the paragraph [`parse`] would.
    pub range: Range<usize>,
    /// 1-based number of the line `range` starts on, to place errors in the whole text.
    pub line: usize,
    /// The wanted fields' values, in the order they were asked for; `None` when absent.
    pub values: [Option<ValueSpan>; N],
}

/// Paragraphs of a control file, located without building them (see [`scan`]).
pub struct Scanner<'a, const N: usize> {
    text: &'a str,
    wanted: [&'a str; N],
    wanted_keys: [u64; N],
    /// Start of the next line, and its 1-based number; `None` after the last line.
    next: Option<(usize, usize)>,
    /// The field names of the current paragraph, for the duplicate check.
    names: Vec<(u64, Range<usize>)>,
    failed: bool,
}

/// Finds the paragraphs of `text` and the values of the `wanted` fields in each, without
/// copying anything: for large `Packages` files, of which a caller needs a few fields of every
/// stanza and whole paragraphs for only a handful.
///
/// The syntax is checked exactly as [`paragraphs`] checks it, with the same errors and line
/// numbers, so a text that scans cleanly parses cleanly, paragraph by paragraph. After the
/// first error the iterator ends.
pub fn scan<'a, const N: usize>(text: &'a str, wanted: [&'a str; N]) -> Scanner<'a, N> {
    Scanner {
        text,
        wanted,
        wanted_keys: wanted.map(|w| name_key(w.as_bytes())),
        next: Some((0, 1)),
        names: Vec::new(),
        failed: false,
    }
}

/// [`scan`] of `text` from byte `at`, the start of line number `line` (1-based) and a place
/// where a paragraph may start (`text[..at]` ends with an empty line): the paragraphs after
/// `at`, with their ranges and line numbers in the whole text.
pub fn scan_from<'a, const N: usize>(
    text: &'a str,
    wanted: [&'a str; N],
    at: usize,
    line: usize,
) -> Scanner<'a, N> {
    Scanner { next: Some((at, line)), ..scan(text, wanted) }
}

/// A field name's length and first 7 bytes, lower-cased: equal keys mean equal names (for
/// names of up to 7 bytes) or names worth comparing in full.
fn name_key(name: &[u8]) -> u64 {
    let mut key = name.len() as u64 & 0xff;
    for (i, c) in name.iter().take(7).enumerate() {
        key |= u64::from(c.to_ascii_lowercase()) << (8 * (i + 1));
    }
    key
}

/// The first `\n` at or after `from`, eight bytes at a time: lines are short, and the
/// standard library's search spends most of its time lining up with a word boundary.
fn find_newline(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    const NEWLINES: u64 = ONES * b'\n' as u64;
    let mut i = from;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or_default()) ^ NEWLINES;
        // The lowest zero byte of `word` (a newline in `chunk`) sets the lowest high bit here;
        // bits above it may be set spuriously, never below.
        let zeros = word.wrapping_sub(ONES) & !word & HIGHS;
        if zeros != 0 {
            return Some(i + (zeros.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    bytes.get(i..)?.iter().position(|&c| c == b'\n').map(|p| i + p)
}

/// The value being read, for one of the wanted fields.
struct OpenValue {
    index: usize,
    start: usize,
    end: usize,
    folded: bool,
    /// The last line read had a carriage return (not part of the range, part of the text).
    cr: bool,
    /// A comment line came after the last line read.
    comment: bool,
}

impl<const N: usize> Scanner<'_, N> {
    /// The next line: its start, its end without `\n`, and its number.
    fn next_line(&mut self) -> Option<(usize, usize, usize)> {
        let (start, number) = self.next?;
        let end = match find_newline(self.text.as_bytes(), start) {
            Some(end) => {
                self.next = Some((end + 1, number + 1));
                end
            }
            None => {
                self.next = None;
                self.text.len()
            }
        };
        Some((start, end, number))
    }

    fn close(&self, open: Option<OpenValue>, values: &mut [Option<ValueSpan>; N]) {
        let Some(v) = open else { return };
        values[v.index] = Some(if v.folded {
            ValueSpan::Folded
        } else {
            // dpkg trims the whole value's trailing whitespace (see `trim_last_value`).
            let bytes = self.text.as_bytes();
            let mut end = v.end;
            while end > v.start && matches!(bytes[end - 1], b' ' | b'\t' | b'\r') {
                end -= 1;
            }
            ValueSpan::Text(v.start..end)
        });
    }

    fn next_stanza(&mut self) -> Result<Option<Scanned<N>>, Deb822Error> {
        let mut values: [Option<ValueSpan>; N] = std::array::from_fn(|_| None);
        let mut first: Option<(usize, usize)> = None;
        let mut last_end = 0;
        let mut open: Option<OpenValue> = None;
        let mut seen = 0u128;
        self.names.clear();
        while let Some((start, raw_end, line_number)) = self.next_line() {
            let bytes = self.text.as_bytes();
            // CRLF files read like LF files.
            let cr = raw_end > start && bytes[raw_end - 1] == b'\r';
            let end = if cr { raw_end - 1 } else { raw_end };
            let line = &bytes[start..end];
            if line.iter().all(|&c| c == b' ' || c == b'\t') {
                if first.is_none() {
                    continue;
                }
                break;
            }
            if line[0] == b'#' {
                if let Some(v) = &mut open {
                    v.comment = true;
                }
                continue;
            }
            if line[0] == b' ' || line[0] == b'\t' {
                if first.is_none() {
                    return Err(Deb822Error::ContinuationBeforeField { line: line_number });
                }
                if let Some(v) = &mut open {
                    v.folded |= v.cr || v.comment;
                    v.end = end;
                    v.cr = cr;
                    v.comment = false;
                }
                last_end = raw_end;
                continue;
            }
            // One pass over the name finds the colon, checks the name and builds its key.
            let mut colon = start;
            let mut valid = line[0] != b'-';
            let mut key = 0u64;
            while colon < end && bytes[colon] != b':' {
                let c = bytes[colon];
                valid &= c.is_ascii_graphic();
                if colon - start < 7 {
                    key |= u64::from(c.to_ascii_lowercase()) << (8 * (colon - start + 1));
                }
                colon += 1;
            }
            if colon == end {
                return Err(Deb822Error::MissingColon { line: line_number });
            }
            let name = &self.text[start..colon];
            if !valid || name.is_empty() {
                return Err(Deb822Error::InvalidFieldName {
                    line: line_number,
                    name: name.to_owned(),
                });
            }
            let key = key | (name.len() as u64 & 0xff);
            let same = |k: u64, other: &str| {
                k == key && (name.len() <= 7 || other.eq_ignore_ascii_case(name))
            };
            // A 128-bit filter of the names seen spares the comparisons with each of them.
            let bit = 1u128 << (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 57);
            if seen & bit != 0
                && self.names.iter().any(|(k, range)| same(*k, &self.text[range.clone()]))
            {
                return Err(Deb822Error::DuplicateField {
                    line: line_number,
                    name: name.to_owned(),
                });
            }
            seen |= bit;
            self.names.push((key, start..colon));
            let taken = open.take();
            self.close(taken, &mut values);
            if let Some(index) = (0..N).find(|&i| same(self.wanted_keys[i], self.wanted[i])) {
                let mut value = colon + 1;
                while value < end && matches!(bytes[value], b' ' | b'\t') {
                    value += 1;
                }
                open =
                    Some(OpenValue { index, start: value, end, folded: false, cr, comment: false });
            }
            first.get_or_insert((start, line_number));
            last_end = raw_end;
        }
        self.close(open, &mut values);
        Ok(first.map(|(start, line)| Scanned { range: start..last_end, line, values }))
    }
}

impl<const N: usize> Iterator for Scanner<'_, N> {
    type Item = Result<Scanned<N>, Deb822Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let result = self.next_stanza();
        self.failed = result.is_err();
        result.transpose()
    }
}

impl Deb822Error {
    /// The error with its line number moved down by `lines`: for a paragraph parsed on its
    /// own, as [`scan`] located it, to name the line in the whole file.
    pub fn shifted(self, lines: usize) -> Self {
        use Deb822Error::*;
        match self {
            ContinuationBeforeField { line } => ContinuationBeforeField { line: line + lines },
            MissingColon { line } => MissingColon { line: line + lines },
            InvalidFieldName { line, name } => InvalidFieldName { line: line + lines, name },
            DuplicateField { line, name } => DuplicateField { line: line + lines, name },
            other => other,
        }
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
        assert_eq!(all[1].to_string(), "A: spaced\nB: value\n  cont  \n\tcont2\nC:\n");
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
            Deb822Error::InvalidFieldName { line: 2, name: String::new() }
        );
        assert_eq!(
            parse("A: 1\n\nBad Name: x\n").unwrap_err(),
            Deb822Error::InvalidFieldName { line: 3, name: "Bad Name".into() }
        );
        assert_eq!(
            parse("A: 1\n-----BEGIN PGP SIGNATURE: x\n").unwrap_err(),
            Deb822Error::InvalidFieldName { line: 2, name: "-----BEGIN PGP SIGNATURE".into() }
        );
        assert_eq!(
            parse("Package: a\npackage: b\n").unwrap_err(),
            Deb822Error::DuplicateField { line: 2, name: "package".into() }
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
        assert_eq!(parse_single("\n").unwrap_err(), Deb822Error::ParagraphCount { found: 0 });
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
            assert!(matches!(p.set(bad, "x"), Err(Deb822Error::InvalidName { .. })), "{bad:?}");
        }
        for bad in [" leading", "trailing ", "two\nlines", "blank\n \n line", "ends\n", "cr\r\n x"]
        {
            assert!(matches!(p.set("X", bad), Err(Deb822Error::InvalidValue { .. })), "{bad:?}");
        }
        assert!(!p.contains("X"), "a refused value leaves the paragraph alone");
        p.set("Empty", "").unwrap();
        assert!(p.to_string().ends_with("Empty:\n"));
    }

    /// [`scan`] against [`parse`]: the same paragraphs, the same values, the same first error.
    fn assert_scan_agrees(text: &str) {
        const WANTED: [&str; 4] = ["Package", "b", "Long-Field-Name", "C"];
        let scanned: Result<Vec<_>, _> = scan(text, WANTED).collect();
        let parsed = parse(text);
        let (scanned, parsed) = match (scanned, parsed) {
            (Ok(s), Ok(p)) => (s, p),
            (s, p) => {
                assert_eq!(s.map(|_| ()), p.map(|_| ()), "{text:?}");
                return;
            }
        };
        assert_eq!(scanned.len(), parsed.len(), "{text:?}");
        for (s, p) in scanned.iter().zip(&parsed) {
            let alone = parse_single(&text[s.range.clone()]).unwrap();
            assert_eq!(&alone, p, "{text:?}");
            let first_line = text[..s.range.start].matches('\n').count() + 1;
            assert_eq!(s.line, first_line, "{text:?}");
            for (name, value) in WANTED.iter().zip(&s.values) {
                match value {
                    None => assert_eq!(p.get(name), None, "{name} in {text:?}"),
                    Some(ValueSpan::Text(r)) => {
                        assert_eq!(Some(&text[r.clone()]), p.get(name), "{name} in {text:?}")
                    }
                    Some(ValueSpan::Folded) => {
                        let v = p.get(name).unwrap();
                        assert!(v.contains('\n'), "{name} folded in {text:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn scan_agrees_with_parse() {
        for text in [
            CONTROL,
            "",
            "\n\n",
            "Package: a\nB: 1\n more \n\t# not a comment\nC: x\r\n\r\nPackage: b\n",
            "# lead\nPackage: a\nB: x\r\n y\r\nC: 1\n# c\n z\n",
            "Package:\n\nB:   \t\n",
            "Long-Field-Name: 1\nlong-field-name: 2\n",
            "Long-Field-Name: 1\nLong-Field-Namf: 2\nB: é\n",
            "A: 1\n\n cont\n",
            "A: 1\nno colon\n",
            "A: 1\n-x: 2\n",
            "Bé: 1\n",
        ] {
            assert_scan_agrees(text);
        }
        // Random texts from lines that exercise every rule.
        const LINES: [&str; 22] = [
            "Package: p",
            "package: q",
            "B: x ",
            "b:",
            "B:\t y\t",
            " cont",
            "\tcont\t",
            " ",
            "",
            "\t \r",
            "# c",
            "#",
            "Version: 1\r",
            "C: y\r",
            " more\r",
            " \r\r",
            "no colon",
            "-x: 1",
            "Long-Field-Name: v",
            "long-field-NAME: w",
            "Long-Field-Namf: z",
            "Cé: 1",
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let n = next() % 12;
            let text: Vec<&str> =
                (0..n).map(|_| LINES[(next() % LINES.len() as u64) as usize]).collect();
            let mut text = text.join("\n");
            if next() % 2 == 0 {
                text.push('\n');
            }
            assert_scan_agrees(&text);
        }
    }

    #[test]
    fn shifted_errors_name_the_line_in_the_whole_text() {
        assert_eq!(
            Deb822Error::DuplicateField { line: 2, name: "A".into() }.shifted(10),
            Deb822Error::DuplicateField { line: 12, name: "A".into() }
        );
        assert_eq!(
            Deb822Error::ParagraphCount { found: 2 }.shifted(10),
            Deb822Error::ParagraphCount { found: 2 }
        );
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

    /// A synthetic `Packages` file the size of Debian main (~60k paragraphs) parses whole
    /// (how fast is the benchmarks' business, not a test's: the time is printed, not asserted).
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
        let text: String = (0..60_000).map(|i| stanza.replace("{}", &i.to_string())).collect();
        let start = std::time::Instant::now();
        let mut count = 0;
        for paragraph in paragraphs(&text) {
            paragraph.unwrap();
            count += 1;
        }
        let elapsed = start.elapsed();
        assert_eq!(count, 60_000);
        eprintln!("parsed {count} paragraphs ({} MB) in {elapsed:?}", text.len() >> 20);
    }
}
