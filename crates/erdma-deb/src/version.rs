//! Debian package versions and package relations.
//!
//! Versions follow deb-version(7) and are compared exactly as dpkg does
//! (`dpkg_version_compare` and `verrevcmp` in dpkg's `lib/dpkg/version.c`); relation fields
//! (`Depends`, `Pre-Depends`, `Breaks`, `Conflicts`, `Provides`, `Replaces`) follow Debian
//! Policy 7.1 and dpkg's `f_dependency` in `lib/dpkg/fields.c`.
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// `reason` is dpkg's own wording, so that a message can be matched against dpkg's.
    #[error("invalid version `{version}`: {reason}")]
    Invalid { version: String, reason: &'static str },

    #[error("invalid relation `{relation}`: {reason}")]
    Relation { relation: String, reason: String },

    #[error("invalid version in relation on `{package}`")]
    RelationVersion {
        package: String,
        #[source]
        source: Box<VersionError>,
    },
}

/// A dpkg version, `[epoch:]upstream[-revision]` (deb-version(7)).
///
/// Equality and ordering are dpkg's, so `1.0`, `1.00`, `0:1.0` and `1.0-0` are all equal;
/// [`Display`](fmt::Display) gives back the string as written.
#[derive(Debug, Clone)]
pub struct Version {
    epoch: u32,
    upstream: String,
    revision: String,
    /// As written (surrounding blanks trimmed), so an explicit `0:` epoch survives.
    original: String,
}

impl Version {
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    /// The Debian revision; empty when the version has none (which compares like `0`).
    pub fn revision(&self) -> &str {
        &self.revision
    }

    pub fn as_str(&self) -> &str {
        &self.original
    }

    /// What `dpkg` would warn about for this version, if anything. dpkg's `parseversion`
    /// accepts such versions (only warning), and so does [`FromStr`]; a caller checking its own
    /// input against Debian Policy 5.6.12 can reject them.
    pub fn syntax_warning(&self) -> Option<&'static str> {
        let mut upstream = self.upstream.bytes();
        if !upstream.next().is_some_and(|c| c.is_ascii_digit()) {
            return Some("version number does not start with digit");
        }
        if !upstream.all(|c| c.is_ascii_alphanumeric() || b".-+~:".contains(&c)) {
            return Some("invalid character in version number");
        }
        if !self.revision.bytes().all(|c| c.is_ascii_alphanumeric() || b".+~".contains(&c)) {
            return Some("invalid character in revision number");
        }
        None
    }
}

/// dpkg's blank characters (`c_isblank`): what `parseversion` trims and calls embedded spaces.
fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

impl FromStr for Version {
    type Err = VersionError;

    /// Mirrors dpkg's `parseversion` (`lib/dpkg/parsehelp.c`): its errors are errors here, its
    /// warnings (non-digit start, odd characters) are accepted; see [`Version::syntax_warning`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = |reason| VersionError::Invalid { version: s.to_owned(), reason };
        let text = s.trim_matches(is_blank);
        if text.is_empty() {
            return Err(invalid("version string is empty"));
        }
        if text.contains(is_blank) {
            return Err(invalid("version string has embedded spaces"));
        }
        // The epoch is everything before the first colon; later colons belong to upstream.
        let (epoch, rest) = match text.split_once(':') {
            Some((epoch, rest)) => {
                // dpkg uses strtol, which would also take a sign (`+1:0`); deb-version(7) says
                // the epoch is an unsigned integer, so only digits are taken here.
                if epoch.is_empty() {
                    return Err(invalid("epoch in version is empty"));
                }
                if !epoch.bytes().all(|c| c.is_ascii_digit()) {
                    return Err(invalid("epoch in version is not number"));
                }
                // dpkg keeps the epoch in an int: anything above INT_MAX is refused.
                let epoch = epoch
                    .parse::<u32>()
                    .ok()
                    .filter(|&e| e <= i32::MAX as u32)
                    .ok_or_else(|| invalid("epoch in version is too big"))?;
                if rest.is_empty() {
                    return Err(invalid("nothing after colon in version number"));
                }
                (epoch, rest)
            }
            None => (0, text),
        };
        // The revision is after the last hyphen; upstream may itself contain hyphens.
        let (upstream, revision) = match rest.rsplit_once('-') {
            Some((_, "")) => return Err(invalid("revision number is empty")),
            Some((upstream, revision)) => (upstream, revision),
            None => (rest, ""),
        };
        if upstream.is_empty() {
            return Err(invalid("upstream version is empty"));
        }
        Ok(Version {
            epoch,
            upstream: upstream.to_owned(),
            revision: revision.to_owned(),
            original: text.to_owned(),
        })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.original)
    }
}

/// dpkg's `order()`: digits (and the end of the string) weigh 0, letters their ASCII value,
/// `~` below everything, any other character above all letters.
///
/// dpkg does this on a C `char`, which is signed on amd64 (where the reference behaviour was
/// checked), so a byte of a non-ASCII character weighs `byte - 256 + 256`: more than any
/// letter, less than any ASCII punctuation. Policy forbids such bytes; this only keeps the
/// order total and identical to dpkg on amd64.
fn order(c: Option<u8>) -> i32 {
    match c {
        None => 0,
        Some(c) if c.is_ascii_digit() => 0,
        Some(c) if c.is_ascii_alphabetic() => i32::from(c),
        Some(b'~') => -1,
        Some(c) => i32::from(c as i8) + 256,
    }
}

/// dpkg's `verrevcmp`: alternate runs of non-digits (compared by [`order`]) and digits
/// (compared as numbers). Numbers are compared as digit strings after dropping leading zeros,
/// so arbitrarily long ones neither overflow nor lose precision.
fn verrevcmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    let is_digit = |s: &[u8], k: usize| s.get(k).is_some_and(u8::is_ascii_digit);
    while i < a.len() || j < b.len() {
        while (i < a.len() && !a[i].is_ascii_digit()) || (j < b.len() && !b[j].is_ascii_digit()) {
            let (ac, bc) = (order(a.get(i).copied()), order(b.get(j).copied()));
            if ac != bc {
                return ac.cmp(&bc);
            }
            i += 1;
            j += 1;
        }
        while a.get(i) == Some(&b'0') {
            i += 1;
        }
        while b.get(j) == Some(&b'0') {
            j += 1;
        }
        let mut first_diff = Ordering::Equal;
        while is_digit(a, i) && is_digit(b, j) {
            if first_diff == Ordering::Equal {
                first_diff = a[i].cmp(&b[j]);
            }
            i += 1;
            j += 1;
        }
        // The longer number (after its leading zeros) is the bigger one.
        if is_digit(a, i) {
            return Ordering::Greater;
        }
        if is_digit(b, j) {
            return Ordering::Less;
        }
        if first_diff != Ordering::Equal {
            return first_diff;
        }
    }
    Ordering::Equal
}

/// Feeds `state` a form of `s` that is the same for all strings [`verrevcmp`] finds equal:
/// the (non-digit run, digit run without leading zeros) pairs, where a last pair that is empty
/// after stripping (a trailing `0`, or an empty string) is left out, since running out of
/// string compares like a zero.
fn hash_verrev<H: Hasher>(s: &str, state: &mut H) {
    let mut rest = s.as_bytes();
    while !rest.is_empty() {
        let split = rest.iter().position(u8::is_ascii_digit).unwrap_or(rest.len());
        let (letters, tail) = rest.split_at(split);
        let digits_len = tail.iter().position(|c| !c.is_ascii_digit()).unwrap_or(tail.len());
        let (digits, tail) = tail.split_at(digits_len);
        let first_nonzero = digits.iter().position(|&c| c != b'0').unwrap_or(digits.len());
        let digits = &digits[first_nonzero..];
        rest = tail;
        if letters.is_empty() && digits.is_empty() && rest.is_empty() {
            break;
        }
        state.write(letters);
        state.write_u8(0xff);
        state.write(digits);
        state.write_u8(0xfe);
    }
    state.write_u8(0xfd);
}

impl Ord for Version {
    /// dpkg's `dpkg_version_compare`: epoch, then upstream, then revision.
    fn cmp(&self, other: &Self) -> Ordering {
        self.epoch
            .cmp(&other.epoch)
            .then_with(|| verrevcmp(&self.upstream, &other.upstream))
            .then_with(|| verrevcmp(&self.revision, &other.revision))
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Version {}

impl Hash for Version {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.epoch.hash(state);
        hash_verrev(&self.upstream, state);
        hash_verrev(&self.revision, state);
    }
}

impl serde::Serialize for Version {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.original)
    }
}

impl<'de> serde::Deserialize<'de> for Version {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A version relation (Debian Policy 7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Relation {
    /// `<<`
    Lt,
    /// `<=`, and the obsolete `<`
    Le,
    /// `=`
    Eq,
    /// `>=`, and the obsolete `>`
    Ge,
    /// `>>`
    Gt,
}

impl Relation {
    /// Whether `candidate` stands in this relation to `wanted`: for `foo (>= 2.0)`,
    /// `Ge.satisfied_by(installed, 2.0)`.
    pub fn satisfied_by(&self, candidate: &Version, wanted: &Version) -> bool {
        let ord = candidate.cmp(wanted);
        match self {
            Relation::Lt => ord == Ordering::Less,
            Relation::Le => ord != Ordering::Greater,
            Relation::Eq => ord == Ordering::Equal,
            Relation::Ge => ord != Ordering::Less,
            Relation::Gt => ord == Ordering::Greater,
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Relation::Lt => "<<",
            Relation::Le => "<=",
            Relation::Eq => "=",
            Relation::Ge => ">=",
            Relation::Gt => ">>",
        }
    }
}

impl FromStr for Relation {
    type Err = VersionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "<<" => Relation::Lt,
            "<=" => Relation::Le,
            "=" => Relation::Eq,
            ">=" => Relation::Ge,
            ">>" => Relation::Gt,
            // Obsolete forms, which Policy 7.1 says mean `<=` and `>=` (dpkg warns).
            "<" => Relation::Le,
            ">" => Relation::Ge,
            _ => {
                return Err(VersionError::Relation {
                    relation: s.to_owned(),
                    reason: "unknown operator (expected <<, <=, =, >= or >>)".to_owned(),
                })
            }
        })
    }
}

impl fmt::Display for Relation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One package reference of a relation field: `name[:arch] [(op version)]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Dependency {
    pub name: String,
    /// The `:any`, `:native` or `:<arch>` qualifier (without the colon), if any.
    pub arch: Option<String>,
    pub constraint: Option<(Relation, Version)>,
}

impl Dependency {
    /// Whether a package at `version` meets this reference's version constraint (any version
    /// does when there is none). The name and architecture are the caller's to match.
    pub fn version_matches(&self, version: &Version) -> bool {
        self.constraint
            .as_ref()
            .is_none_or(|(relation, wanted)| relation.satisfied_by(version, wanted))
    }
}

impl fmt::Display for Dependency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if let Some(arch) = &self.arch {
            write!(f, ":{arch}")?;
        }
        if let Some((relation, version)) = &self.constraint {
            write!(f, " ({relation} {version})")?;
        }
        Ok(())
    }
}

/// dpkg's `c_isspace`: relation fields may be folded over several lines.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
}

/// Parses a relation field into AND groups (`,`) of alternatives (`|`).
///
/// Follows dpkg's `f_dependency`, plus what apt accepts in source-package fields: an
/// `[arch restriction]` and any number of `<build profile>` lists after each reference are
/// skipped (dpkg never sees them: `dpkg-source` evaluates them when it builds the binary
/// package's fields). As in dpkg, an empty field gives no groups, an empty element (`a,,b`,
/// a trailing comma) is an error, and a constraint without an operator means `=`.
pub fn parse_relations(field: &str) -> Result<Vec<Vec<Dependency>>, VersionError> {
    let mut groups = Vec::new();
    if field.bytes().all(is_space) {
        return Ok(groups);
    }
    for group_text in field.split(',') {
        let mut group = Vec::new();
        for alternative in group_text.split('|') {
            group.push(parse_reference(alternative, group_text)?);
        }
        groups.push(group);
    }
    Ok(groups)
}

/// Parses one alternative; `group` is the comma-separated element it came from, for errors.
fn parse_reference(text: &str, group: &str) -> Result<Dependency, VersionError> {
    let error = |reason: &str| VersionError::Relation {
        relation: group.trim_matches(|c: char| c.is_ascii() && is_space(c as u8)).to_owned(),
        reason: reason.to_owned(),
    };
    let bytes = text.as_bytes();
    let skip_space = |mut i: usize| {
        while i < bytes.len() && is_space(bytes[i]) {
            i += 1;
        }
        i
    };
    // All delimiters are ASCII, so every index below is on a character boundary.
    let mut i = skip_space(0);
    let start = i;
    while i < bytes.len() && !is_space(bytes[i]) && !b":([<".contains(&bytes[i]) {
        i += 1;
    }
    let name = &text[start..i];
    if name.is_empty() {
        return Err(error("missing package name, or garbage where package name expected"));
    }
    if let Some(reason) = package_name_problem(name) {
        return Err(error(&format!("invalid package name `{name}`: {reason}")));
    }

    let mut arch = None;
    if bytes.get(i) == Some(&b':') {
        i += 1;
        let start = i;
        while i < bytes.len() && !is_space(bytes[i]) && !b"([<".contains(&bytes[i]) {
            i += 1;
        }
        if i == start {
            return Err(error(
                "missing architecture name, or garbage where architecture name expected",
            ));
        }
        arch = Some(text[start..i].to_owned());
    }
    i = skip_space(i);

    let mut constraint = None;
    if bytes.get(i) == Some(&b'(') {
        i = skip_space(i + 1);
        let op_start = i;
        while i < bytes.len() && b"<=>".contains(&bytes[i]) {
            i += 1;
        }
        let relation = match &text[op_start..i] {
            // dpkg: "implicit exact match on version number, suggest using '=' instead".
            "" => Relation::Eq,
            op => op
                .parse::<Relation>()
                .map_err(|_| error(&format!("bad version relationship `{op}`")))?,
        };
        i = skip_space(i);
        let version_start = i;
        while i < bytes.len() && !is_space(bytes[i]) && !b"()".contains(&bytes[i]) {
            i += 1;
        }
        let version_text = &text[version_start..i];
        i = skip_space(i);
        match bytes.get(i) {
            Some(b')') => i += 1,
            None => return Err(error("version unterminated")),
            Some(_) => return Err(error("version contains `(` or a space")),
        }
        let version = version_text.parse::<Version>().map_err(|source| {
            VersionError::RelationVersion { package: name.to_owned(), source: Box::new(source) }
        })?;
        constraint = Some((relation, version));
        i = skip_space(i);
    }

    // `[arch restriction]` and `<build profile>` lists: dropped (see `parse_relations`).
    if bytes.get(i) == Some(&b'[') {
        let end =
            text[i..].find(']').ok_or_else(|| error("unterminated architecture restriction"))?;
        i = skip_space(i + end + 1);
    }
    while bytes.get(i) == Some(&b'<') {
        let end =
            text[i..].find('>').ok_or_else(|| error("unterminated build profile restriction"))?;
        i = skip_space(i + end + 1);
    }

    if i != bytes.len() {
        return Err(error(&format!("syntax error after reference to package `{name}`")));
    }
    Ok(Dependency { name: name.to_owned(), arch, constraint })
}

/// dpkg's `pkg_name_is_illegal` (Policy 5.6.1: lower case letters, digits, `+ - .`, starting
/// with an alphanumeric; dpkg also lets `_` and upper case through, and so do we).
fn package_name_problem(name: &str) -> Option<&'static str> {
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Some("must start with an alphanumeric character");
    }
    if !name.bytes().all(|c| c.is_ascii_alphanumeric() || b"-+._".contains(&c)) {
        return Some("character not allowed (only letters, digits and characters '-+._')");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn v(s: &str) -> Version {
        s.parse().unwrap_or_else(|e| panic!("parsing version {s:?}: {e}"))
    }

    fn hash_of(version: &Version) -> u64 {
        let mut hasher = DefaultHasher::new();
        version.hash(&mut hasher);
        hasher.finish()
    }

    /// Every expectation below was checked with `dpkg --compare-versions` (dpkg 1.21.22,
    /// amd64); the test itself does not run dpkg.
    const VECTORS: &[(&str, char, &str)] = &[
        // From the brief and the packages we install.
        ("1.0~rc1", '<', "1.0"),
        ("2:1.0", '>', "1:9.9"),
        ("1:0", '>', "0:99999"),
        ("44.0-2", '>', "44.0-1"),
        ("2307mlnx47-1.2310036", '>', "44.0-2"),
        ("1.0+cuda12.4", '>', "1.0"),
        ("1.0+cuda12.4", '>', "1.0+cuda11.8"),
        ("2.21.5-1+cuda12.4", '>', "2.21.5-1+cuda11.8"),
        ("1.2.3+dfsg1-1~bpo12+1", '<', "1.2.3+dfsg1-1"),
        ("1.2.3-1~bpo12+1", '>', "1.2.3-0"),
        ("5.10.0-1+deb11u1", '>', "5.10.0-1"),
        ("2.36-9+deb12u4", '<', "2.36-9+deb12u10"),
        ("2.7.4+reformed2-2ubuntu1", '>', "2.7.4-2"),
        // Tilde sorts before everything, even the end of the string.
        ("a~", '<', "a"),
        ("~~", '<', "~~a"),
        ("~~a", '<', "~"),
        ("~", '<', "0"),
        ("1~~", '<', "1~~a"),
        ("1~~a", '<', "1~"),
        ("1~", '<', "1"),
        ("1~1", '>', "1~"),
        ("1.0~", '=', "1.0~0"),
        ("1-1", '>', "1-1~"),
        ("1.0-1~", '<', "1.0-1"),
        ("1.0-0~", '<', "1.0"),
        ("1.0-~", '<', "1.0"),
        // Letters sort before non-letters; the end sorts before anything but `~`.
        ("1", '<', "1a"),
        ("1a", '<', "1+"),
        ("1a", '<', "1."),
        ("1.a", '<', "1.+"),
        ("1+", '<', "1."),
        ("1.0", '<', "1.0+"),
        ("1.0", '<', "1.0a"),
        ("1.0", '<', "1.0."),
        ("1", '<', "1.0"),
        ("1.0.0", '>', "1.0"),
        ("1.0a", '>', "1.0"),
        ("1.0a", '<', "1.0b"),
        ("1.0A", '<', "1.0a"),
        ("1a1", '<', "1b"),
        ("a", '>', "0a"),
        ("a0b", '<', "ab"),
        // Numbers compare numerically, leading zeros ignored, no overflow.
        ("1.2.3", '<', "1.2.10"),
        ("1.10", '>', "1.9"),
        ("10", '>', "9"),
        ("1.002", '=', "1.2"),
        ("1.0", '=', "1.00"),
        ("0", '=', "00"),
        ("a", '=', "a0"),
        ("000000000000000000000000000001", '=', "1"),
        ("99999999999999999999999999999999999999", '<', "100000000000000000000000000000000000000"),
        // A missing revision compares like `0`; a missing epoch is `0`.
        ("1.0", '=', "1.0-0"),
        ("1:1.0", '=', "1:1.0-0"),
        ("1.0", '<', "1.0-1"),
        ("0:1.0", '=', "1.0"),
        ("0:1", '=', "1"),
        ("1:1.0", '>', "1.0"),
        ("1:0.4", '>', "10.3"),
        ("1.0-1", '<', "1.0-1.1"),
        // From dpkg's own t/t-version.c and debian-policy examples.
        ("7.6p2-4", '>', "7.6-0"),
        ("1.0.3-3", '>', "1.0-1"),
        ("1.3", '>', "1.2.2-2"),
        ("1.3", '>', "1.2.2"),
        ("0-pre", '=', "0-pre"),
        ("0-pre", '<', "0-pree"),
        ("1.1.6r2-2", '>', "1.1.6r-1"),
        ("2.6b2-1", '>', "2.6b-2"),
        ("98.1p5-1", '<', "98.1-pre2-b6-2"),
        ("0.4a6-2", '>', "0.4-1"),
        ("1:3.0.5-2", '<', "1:3.0.5.1"),
        ("1:1.25-4", '<', "1:1.25-8"),
        ("0:1.18.36", '=', "1.18.36"),
        ("1.18.36", '>', "1.18.35"),
        ("0:1.18.36", '>', "1.18.35"),
        ("9:1.18.36:5.4-20", '<', "10:0.5.1-22"),
        ("9:1.18.36:5.4-20", '<', "9:1.18.36:5.5-1"),
        ("9:1.18.36:5.4-20", '<', "9:1.18.37:4.3-22"),
        ("1.18.36-0.17.35-18", '>', "1.18.36-19"),
        ("1:1.2.13-3", '<', "1:1.2.13-3.1"),
        ("2.0.7pre1-4", '<', "2.0.7r-1"),
        ("0:0-0-0", '>', "0-0"),
        ("0:0:0-0", '>', "0:0-0"),
        ("0:0:0:0-0", '>', "0:0:0-0"),
        ("0:0-0:0-0", '<', "0:0:0-0"),
        ("1:2:3", '<', "1:2:4"),
        // Non-ASCII bytes (dpkg warns): signed `char` on amd64 puts them between letters
        // and ASCII punctuation.
        ("1é", '<', "1."),
        ("1é", '>', "1z"),
        ("1é", '>', "1~"),
        ("1é", '>', "1"),
        ("1.é", '<', "1.+"),
        ("1é", '<', "1ÿ"),
    ];

    #[test]
    fn compares_like_dpkg() {
        for &(a, op, b) in VECTORS {
            let (va, vb) = (v(a), v(b));
            let want = match op {
                '<' => Ordering::Less,
                '=' => Ordering::Equal,
                '>' => Ordering::Greater,
                _ => unreachable!(),
            };
            assert_eq!(va.cmp(&vb), want, "{a} {op} {b}");
            assert_eq!(vb.cmp(&va), want.reverse(), "{b} vs {a} (reversed)");
            assert_eq!(va == vb, want == Ordering::Equal, "{a} == {b}");
            if want == Ordering::Equal {
                assert_eq!(hash_of(&va), hash_of(&vb), "equal {a} and {b} must hash alike");
            }
        }
    }

    #[test]
    fn ordering_is_total_over_the_vectors() {
        // Sorting must be consistent: every pair agrees with the sorted order.
        let mut all: Vec<Version> = VECTORS.iter().flat_map(|&(a, _, b)| [v(a), v(b)]).collect();
        all.sort();
        for (i, x) in all.iter().enumerate() {
            for y in &all[i..] {
                assert!(x <= y, "{x} sorted before {y}");
            }
        }
    }

    #[test]
    fn tilde_chain_from_the_brief() {
        // `~~ < ~~a < ~ < (empty)`: the empty string is not a version, so compare the
        // upstream-less forms through the revision, where empty is allowed.
        let chain = ["1-~~", "1-~~a", "1-~", "1"];
        for pair in chain.windows(2) {
            assert!(v(pair[0]) < v(pair[1]), "{} < {}", pair[0], pair[1]);
        }
        assert_eq!(verrevcmp("~~", "~~a"), Ordering::Less);
        assert_eq!(verrevcmp("~~a", "~"), Ordering::Less);
        assert_eq!(verrevcmp("~", ""), Ordering::Less);
        assert_eq!(verrevcmp("", "0"), Ordering::Equal);
    }

    #[test]
    fn parses_parts_and_keeps_the_original() {
        let x = v("2:1.2-3-4");
        assert_eq!((x.epoch(), x.upstream(), x.revision()), (2, "1.2-3", "4"));
        assert_eq!(x.to_string(), "2:1.2-3-4");

        let x = v("0:1.0");
        assert_eq!((x.epoch(), x.upstream(), x.revision()), (0, "1.0", ""));
        assert_eq!(x.to_string(), "0:1.0", "an explicit 0 epoch survives");
        assert_eq!(v("1.0").to_string(), "1.0");

        let x = v("1:2:3");
        assert_eq!((x.epoch(), x.upstream(), x.revision()), (1, "2:3", ""));

        // dpkg trims surrounding blanks.
        assert_eq!(v(" 1.0\t").to_string(), "1.0");
        assert_eq!(v("01:1").epoch(), 1);
        assert_eq!(v("2147483647:1").epoch(), 2147483647);
    }

    #[test]
    fn rejects_what_dpkg_rejects() {
        for (input, reason) in [
            ("", "version string is empty"),
            ("  ", "version string is empty"),
            ("1.0 2", "version string has embedded spaces"),
            ("1:", "nothing after colon in version number"),
            (":1", "epoch in version is empty"),
            ("x:1", "epoch in version is not number"),
            ("1.0:0", "epoch in version is not number"),
            ("-1:0", "epoch in version is not number"),
            ("2147483648:1", "epoch in version is too big"),
            ("99999999999:1", "epoch in version is too big"),
            ("1-", "revision number is empty"),
            ("-1", "upstream version is empty"),
            ("1:-1", "upstream version is empty"),
        ] {
            match input.parse::<Version>() {
                Err(VersionError::Invalid { reason: got, .. }) => {
                    assert_eq!(got, reason, "{input:?}")
                }
                other => panic!("{input:?}: expected an error, got {other:?}"),
            }
        }
        let err = "1.0 2".parse::<Version>().unwrap_err();
        assert_eq!(err.to_string(), "invalid version `1.0 2`: version string has embedded spaces");
    }

    #[test]
    fn accepts_what_dpkg_only_warns_about() {
        assert_eq!(v("a").syntax_warning(), Some("version number does not start with digit"));
        assert_eq!(v("~").syntax_warning(), Some("version number does not start with digit"));
        assert_eq!(v("1.0_2").syntax_warning(), Some("invalid character in version number"));
        assert_eq!(v("1.0-a_b").syntax_warning(), Some("invalid character in revision number"));
        assert_eq!(v("1:2.21.5-1+cuda12.4").syntax_warning(), None);
        assert_eq!(v("1.0~rc1-0ubuntu1").syntax_warning(), None);
    }

    #[test]
    fn relations() {
        let (old, new) = (v("44.0-1"), v("44.0-2"));
        let cases = [
            (Relation::Lt, [true, false, false]),
            (Relation::Le, [true, true, false]),
            (Relation::Eq, [false, true, false]),
            (Relation::Ge, [false, true, true]),
            (Relation::Gt, [false, false, true]),
        ];
        for (relation, [below, equal, above]) in cases {
            assert_eq!(relation.satisfied_by(&old, &new), below, "{relation:?} below");
            assert_eq!(relation.satisfied_by(&new, &new), equal, "{relation:?} equal");
            assert_eq!(relation.satisfied_by(&new, &old), above, "{relation:?} above");
        }
        // Equality is dpkg's, not textual.
        assert!(Relation::Eq.satisfied_by(&v("1.0"), &v("0:1.00-0")));

        for (text, relation) in [
            ("<<", Relation::Lt),
            ("<=", Relation::Le),
            ("=", Relation::Eq),
            (">=", Relation::Ge),
            (">>", Relation::Gt),
            ("<", Relation::Le),
            (">", Relation::Ge),
        ] {
            assert_eq!(text.parse::<Relation>().unwrap(), relation, "{text}");
        }
        for bad in ["", "==", "<>", "><", "=>", "=<", "!="] {
            assert!(bad.parse::<Relation>().is_err(), "{bad:?}");
        }
        assert_eq!(Relation::Le.to_string(), "<=");
    }

    fn dep(name: &str, arch: Option<&str>, constraint: Option<(Relation, &str)>) -> Dependency {
        Dependency {
            name: name.to_owned(),
            arch: arch.map(str::to_owned),
            constraint: constraint.map(|(r, s)| (r, v(s))),
        }
    }

    #[test]
    fn parses_real_relation_fields() {
        // libibverbs1 44.0-2 (bookworm) Depends.
        assert_eq!(
            parse_relations(
                "libc6 (>= 2.34), libnl-3-200 (>= 3.2.7), libnl-route-3-200 (>= 3.2.7), adduser"
            )
            .unwrap(),
            vec![
                vec![dep("libc6", None, Some((Relation::Ge, "2.34")))],
                vec![dep("libnl-3-200", None, Some((Relation::Ge, "3.2.7")))],
                vec![dep("libnl-route-3-200", None, Some((Relation::Ge, "3.2.7")))],
                vec![dep("adduser", None, None)],
            ]
        );
        assert_eq!(
            parse_relations("ibverbs-providers (= 44.0-2)").unwrap(),
            vec![vec![dep("ibverbs-providers", None, Some((Relation::Eq, "44.0-2")))]]
        );
        assert_eq!(
            parse_relations("libibverbs1 (<< 44.0-2)").unwrap(),
            vec![vec![dep("libibverbs1", None, Some((Relation::Lt, "44.0-2")))]]
        );
        assert_eq!(
            parse_relations("debconf (>= 0.5) | debconf-2.0").unwrap(),
            vec![vec![
                dep("debconf", None, Some((Relation::Ge, "0.5"))),
                dep("debconf-2.0", None, None),
            ]]
        );
        assert_eq!(
            parse_relations("python3:any (>= 3.7~)").unwrap(),
            vec![vec![dep("python3", Some("any"), Some((Relation::Ge, "3.7~")))]]
        );
        // A Pre-Depends as apt-cache shows it, and qualifiers.
        assert_eq!(
            parse_relations("perl:native, libc6:amd64 (>= 2.36), init-system-helpers (>= 1.54~)")
                .unwrap(),
            vec![
                vec![dep("perl", Some("native"), None)],
                vec![dep("libc6", Some("amd64"), Some((Relation::Ge, "2.36")))],
                vec![dep("init-system-helpers", None, Some((Relation::Ge, "1.54~")))],
            ]
        );
    }

    #[test]
    fn relation_syntax_variants() {
        // Folded over lines, odd spacing, obsolete and missing operators (dpkg accepts all).
        let field = "libfoo1 (>=1.0),\n libbar (<2),\tlibbaz(> 3) |\n  libqux ( 4.0 ) ,x";
        assert_eq!(
            parse_relations(field).unwrap(),
            vec![
                vec![dep("libfoo1", None, Some((Relation::Ge, "1.0")))],
                vec![dep("libbar", None, Some((Relation::Le, "2")))],
                vec![
                    dep("libbaz", None, Some((Relation::Ge, "3"))),
                    dep("libqux", None, Some((Relation::Eq, "4.0"))),
                ],
                vec![dep("x", None, None)],
            ]
        );
        // Build-Depends style restrictions are dropped.
        assert_eq!(
            parse_relations(
                "debhelper-compat (= 13), libnl-3-dev [linux-any], \
                 valgrind [amd64 arm64] <!nocheck> <!nodoc>, python3-docutils <!nodoc>"
            )
            .unwrap(),
            vec![
                vec![dep("debhelper-compat", None, Some((Relation::Eq, "13")))],
                vec![dep("libnl-3-dev", None, None)],
                vec![dep("valgrind", None, None)],
                vec![dep("python3-docutils", None, None)],
            ]
        );
        assert_eq!(
            parse_relations("foo (>= 1) [!i386] <stage1 cross>").unwrap(),
            vec![vec![dep("foo", None, Some((Relation::Ge, "1")))]]
        );
        assert_eq!(parse_relations("").unwrap(), Vec::<Vec<Dependency>>::new());
        assert_eq!(parse_relations(" \n ").unwrap(), Vec::<Vec<Dependency>>::new());
    }

    #[test]
    fn relation_errors() {
        for bad in [
            "foo,",
            ", foo",
            "foo,,bar",
            "foo | ",
            "foo (>= 1.0",
            "foo (>= )",
            "foo (>= 1.0 2)",
            "foo (<> 1)",
            "foo (>=> 1)",
            "foo:",
            "foo bar",
            "foo (= 1) bar",
            "-foo",
            "fo/o",
            "foo [amd64",
            "foo <stage1",
            "foo (= 1:)",
        ] {
            assert!(parse_relations(bad).is_err(), "{bad:?} should fail");
        }
        let err = parse_relations("libc6 (>= 2.34), libfoo (>= a b)").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid relation `libfoo (>= a b)`: version contains `(` or a space"
        );
        let err = parse_relations("libc6 (>= :1)").unwrap_err();
        assert_eq!(err.to_string(), "invalid version in relation on `libc6`");
        assert!(matches!(err, VersionError::RelationVersion { .. }));
    }

    #[test]
    fn dependency_display_and_matching() {
        let deps = parse_relations("python3:any (>= 3.7~), adduser").unwrap();
        assert_eq!(deps[0][0].to_string(), "python3:any (>= 3.7~)");
        assert_eq!(deps[1][0].to_string(), "adduser");
        assert!(deps[0][0].version_matches(&v("3.11.2-1+b1")));
        // `3.7~` is the usual "3.7 or its pre-releases" floor: `3.7~rc1` is above it.
        assert!(deps[0][0].version_matches(&v("3.7~rc1")));
        assert!(!deps[0][0].version_matches(&v("3.6.9")));
        assert!(deps[1][0].version_matches(&v("0")));
    }

    #[test]
    fn serde_round_trip() {
        let x = v("0:1.0-1");
        let json = serde_json::to_string(&x).unwrap();
        assert_eq!(json, "\"0:1.0-1\"");
        let back: Version = serde_json::from_str(&json).unwrap();
        assert_eq!(back.to_string(), "0:1.0-1");
        assert!(serde_json::from_str::<Version>("\"1:\"").is_err());
    }

    /// Every `Version` and relation field of the machine's apt lists (Debian main is ~63k
    /// packages) must parse. The lists may be compressed; apt's own helper reads them.
    #[test]
    fn parses_every_version_and_relation_in_the_apt_lists() {
        let lists = match std::fs::read_dir("/var/lib/apt/lists") {
            Ok(dir) => dir,
            Err(e) => {
                eprintln!("skipping: no apt lists: {e}");
                return;
            }
        };
        let mut checked = 0;
        for entry in lists.flatten() {
            let path = entry.path();
            if !path.to_string_lossy().contains("_Packages") {
                continue;
            }
            let output = std::process::Command::new("/usr/lib/apt/apt-helper")
                .arg("cat-file")
                .arg(&path)
                .output();
            let text = match output {
                Ok(out) if out.status.success() => String::from_utf8(out.stdout).unwrap(),
                other => {
                    eprintln!("skipping {}: apt-helper cat-file: {other:?}", path.display());
                    continue;
                }
            };
            for paragraph in crate::deb822::paragraphs(&text) {
                let paragraph = paragraph.unwrap();
                let version: Version = paragraph.get("Version").unwrap().parse().unwrap();
                assert_eq!(version.syntax_warning(), None, "{version}");
                for field in [
                    "Depends",
                    "Pre-Depends",
                    "Recommends",
                    "Suggests",
                    "Breaks",
                    "Conflicts",
                    "Provides",
                    "Replaces",
                    "Enhances",
                    "Built-Using",
                ] {
                    if let Some(value) = paragraph.get(field) {
                        parse_relations(value)
                            .unwrap_or_else(|e| panic!("{field}: {value:?}: {e}"));
                    }
                }
                checked += 1;
            }
        }
        eprintln!("checked {checked} packages");
    }
}
