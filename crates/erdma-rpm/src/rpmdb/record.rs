//! What rpm stores for one installed package: the header blob (lib/psm.c `dbAdd`, lib/package.c
//! `headerMergeLegacySigs` and `applyRetrofits`) and the index keys lib/rpmdb.c `tag2index`
//! derives from it. The database files that hold them are [`super`]'s.

use std::collections::BTreeMap;

use super::ImageFiles;
use super::{RpmdbError, MAX_MACROS};
use crate::header::{self, tag, Header, Value};

/// The indexes rpm keeps, in the order it fills them (lib/rpmdb.c `dbiTags`), with the tag
/// each is keyed by and whether the key is a string (`RPM_STRING_CLASS`: SQLite `TEXT`,
/// otherwise `BLOB`) and an array (SQLite indexes `hnum` too; lib/backend/sqlite.c
/// `init_index`).
pub const INDEXES: &[Index] = &[
    Index { name: "Name", tag: tag::NAME, string: true, array: false },
    Index { name: "Basenames", tag: tag::BASENAMES, string: true, array: true },
    Index { name: "Group", tag: tag::GROUP, string: true, array: false },
    Index { name: "Requirename", tag: tag::REQUIRENAME, string: true, array: true },
    Index { name: "Providename", tag: tag::PROVIDENAME, string: true, array: true },
    Index { name: "Conflictname", tag: tag::CONFLICTNAME, string: true, array: true },
    Index { name: "Obsoletename", tag: tag::OBSOLETENAME, string: true, array: true },
    Index { name: "Triggername", tag: TRIGGERNAME, string: true, array: true },
    Index { name: "Dirnames", tag: tag::DIRNAMES, string: true, array: true },
    Index { name: "Installtid", tag: tag::INSTALLTID, string: false, array: false },
    Index { name: "Sigmd5", tag: tag::SIGMD5, string: false, array: false },
    Index { name: "Sha1header", tag: tag::SHA1HEADER, string: true, array: false },
    Index { name: "Filetriggername", tag: FILETRIGGERNAME, string: true, array: true },
    Index { name: "Transfiletriggername", tag: TRANSFILETRIGGERNAME, string: true, array: true },
    Index { name: "Recommendname", tag: RECOMMENDNAME, string: true, array: true },
    Index { name: "Suggestname", tag: SUGGESTNAME, string: true, array: true },
    Index { name: "Supplementname", tag: SUPPLEMENTNAME, string: true, array: true },
    Index { name: "Enhancename", tag: ENHANCENAME, string: true, array: true },
];

/// One of rpm's secondary indexes.
#[derive(Debug, Clone, Copy)]
pub struct Index {
    /// The table (SQLite) or file (Berkeley DB) name.
    pub name: &'static str,
    pub tag: u32,
    pub string: bool,
    pub array: bool,
}

// Tags (include/rpm/rpmtag.h) header.rs has no constant for.
const TRIGGERNAME: u32 = 1066;
const PREFIXES: u32 = 1098;
const INSTPREFIXES: u32 = 1099;
const SOURCEPACKAGE: u32 = 1106;
const RECOMMENDNAME: u32 = 5046;
const SUGGESTNAME: u32 = 5049;
const SUPPLEMENTNAME: u32 = 5052;
const ENHANCENAME: u32 = 5055;
const FILETRIGGERNAME: u32 = 5069;
const FILETRIGGERINDEX: u32 = 5070;
const TRANSFILETRIGGERNAME: u32 = 5079;
const TRANSFILETRIGGERINDEX: u32 = 5080;
const FILESIGNATURES: u32 = 5090;
const FILESIGNATURELENGTH: u32 = 5091;
const VERITYSIGNATURES: u32 = 276;
const VERITYSIGNATUREALGO: u32 = 277;

/// `headerMergeLegacySigs`' table (lib/package.c `xlateTags`, rpm 4.18): signature tag, the
/// main-header tag it becomes, the type that tag must have, the count it must have (0: any),
/// and the "quirk" (the tag may be in either header, never both).
const XLATE: &[(u32, u32, header::Type, u32, bool)] = {
    use header::sigtag as s;
    use header::Type as T;
    &[
        (s::SIZE, tag::SIGSIZE, T::Int32, 1, false),
        (s::PGP, tag::SIGPGP, T::Bin, 0, false),
        (s::MD5, tag::SIGMD5, T::Bin, 16, false),
        (s::GPG, tag::SIGGPG, T::Bin, 0, false),
        (s::PAYLOADSIZE, tag::ARCHIVESIZE, T::Int32, 1, true),
        (274, FILESIGNATURES, T::StringArray, 0, true),
        (275, FILESIGNATURELENGTH, T::Int32, 1, true),
        (VERITYSIGNATURES, VERITYSIGNATURES, T::StringArray, 0, false),
        (VERITYSIGNATUREALGO, VERITYSIGNATUREALGO, T::Int32, 1, false),
        (s::SHA1, tag::SHA1HEADER, T::String, 1, false),
        (s::SHA256, tag::SHA256HEADER, T::String, 1, false),
        (s::DSA, tag::DSAHEADER, T::Bin, 0, false),
        (s::RSA, tag::RSAHEADER, T::Bin, 0, false),
        (s::LONGSIZE, tag::LONGSIGSIZE, T::Int64, 1, false),
        (s::LONGARCHIVESIZE, tag::LONGARCHIVESIZE, T::Int64, 1, false),
    ]
};

/// What the install transaction adds to a package's header besides its signature tags.
#[derive(Debug, Clone)]
pub struct InstallCtx {
    /// `INSTALLTIME`: seconds since the epoch (rpm: the transaction's time, plus one per
    /// package installed before in the same transaction under `SOURCE_DATE_EPOCH`).
    pub install_time: u32,
    /// `INSTALLTID`: the transaction's id, its start time.
    pub tid: u32,
    /// `INSTALLCOLOR`: `%_transaction_color` of the installing rpm (3 on x86_64 and aarch64
    /// Enterprise Linux; see [`transaction_color`]).
    pub color: u32,
    /// `FILESTATES`, one per file (`RPMFILE_STATE_*`: 0 normal, 2 not installed, ...);
    /// empty: every file normal, as an install without `--excludedocs` or `%_install_langs`
    /// leaves them.
    pub file_states: Vec<u8>,
}

/// `%_transaction_color` as the image's rpm has it for `arch` (rpm's platform macros,
/// `usr/lib/rpm/platform/ARCH-linux/macros`), else rpm's own default: 3 on 64-bit
/// multilib arches, 0 elsewhere.
pub fn transaction_color(base: &dyn ImageFiles, arch: &str) -> u32 {
    let path = format!("usr/lib/rpm/platform/{arch}-linux/macros");
    if let Ok(Some(text)) = base.read(&path, MAX_MACROS) {
        for line in String::from_utf8_lossy(&text).lines() {
            let mut w = line.split_whitespace();
            if w.next() == Some("%_transaction_color") {
                if let Some(v) = w.next().and_then(|v| v.parse().ok()) {
                    return v;
                }
            }
        }
    }
    match arch {
        "x86_64" | "aarch64" | "ppc64le" | "ppc64" | "s390x" => 3,
        _ => 0,
    }
}

/// The blob rpm stores for a package it installs: the package's main header with its
/// signature header's digests and signatures merged in (`headerMergeLegacySigs`), rpm's
/// retrofits, and the install-time tags (`dbAdd`), appended after the immutable region sorted
/// by tag as `headerExport` writes them.
pub fn installed_header(
    main: &Header,
    sig: &Header,
    ctx: &InstallCtx,
) -> Result<Vec<u8>, RpmdbError> {
    let package = format!("{}-{}.{}", main.name(), main.evr(), main.arch());
    if main.region_with_magic().is_none() || !main.has(tag::NAME) {
        return Err(RpmdbError::NoRegion { package });
    }
    let mut added: Vec<(u32, Value)> = Vec::new();
    // There mustn't be one in the main header (quirk tags may be in either, never both).
    for &(stag, xtag, _, _, quirk) in XLATE {
        if main.has(xtag) {
            if quirk && !sig.has(stag) {
                continue;
            }
            return Err(RpmdbError::SignatureTag {
                package,
                tag: xtag,
                why: "it is in both the signature header and the main header",
            });
        }
    }
    for &(stag, xtag, kind, count, _) in XLATE {
        let Some(e) = sig.entries().iter().skip(1).find(|e| e.tag == stag) else { continue };
        if e.kind != kind {
            return Err(RpmdbError::SignatureTag {
                package,
                tag: stag,
                why: "it has the wrong type",
            });
        }
        if e.count < 1 || e.count > 16 * 1024 * 1024 || (count != 0 && e.count != count) {
            return Err(RpmdbError::SignatureTag {
                package,
                tag: stag,
                why: "it has the wrong count",
            });
        }
        let Some(v) = sig.get(stag) else { continue };
        added.push((xtag, v));
    }
    // applyRetrofits: a binary package without SOURCERPM gets "(none)".
    if !main.has(tag::SOURCERPM) && !main.has(SOURCEPACKAGE) {
        added.push((tag::SOURCERPM, Value::String("(none)".into())));
    }
    // addPrefixes: relocatable packages installed where they were built say so.
    if main.has(PREFIXES) && !main.has(INSTPREFIXES) {
        if let Some(v) = main.get(PREFIXES) {
            added.push((INSTPREFIXES, v));
        }
    }
    let files = main.strings(tag::BASENAMES).len().max(main.strings(tag::OLDFILENAMES).len());
    if files > 0 {
        let states =
            if ctx.file_states.is_empty() { vec![0; files] } else { ctx.file_states.clone() };
        added.push((tag::FILESTATES, Value::Char(states)));
    }
    added.push((tag::INSTALLTID, Value::Int32(vec![ctx.tid])));
    added.push((tag::INSTALLTIME, Value::Int32(vec![ctx.install_time])));
    added.push((tag::INSTALLCOLOR, Value::Int32(vec![ctx.color])));
    // Added entries all sort after the region, by tag (header.c `offsetCmp`).
    added.sort_by_key(|(t, _)| *t);
    main.with_dribbles(&added).map_err(|source| RpmdbError::InstallHeader { package, source })
}

/// rpm's `isTransientReq` (include/rpm/rpmds.h): requirements only the install needs
/// (`Requires(pre)`, `(post)`, `rpmlib()`, ...) and not the erase, which the Requirename index
/// leaves out.
fn transient_req(flags: u32) -> bool {
    use header::sense::*;
    const POSTTRANS: u32 = 1 << 5;
    const PRETRANS: u32 = 1 << 7;
    const KEYRING: u32 = 1 << 26;
    const META: u32 = 1 << 29;
    let install_only =
        (SCRIPT_PRE | SCRIPT_POST | RPMLIB | KEYRING | PRETRANS | POSTTRANS) & !PREREQ;
    let erase_only = (SCRIPT_PREUN | SCRIPT_POSTUN) & !PREREQ;
    flags & install_only != 0 && flags & erase_only == 0 && flags & META == 0
}

/// The keys rpm's `tag2index` (lib/rpmdb.c) stores for header `hnum`, by index name, each
/// with its `idx` (the position in the tag's array; the trigger index for file triggers), in
/// the order rpm inserts them. Strings are keys without their NUL; `Installtid` is the u32 in
/// native (little-endian) byte order and `Sigmd5` the 16 raw bytes. Rich dependencies are
/// indexed whole and by each name in them (`updateRichDep`), `!`-prefixed inside conditions.
pub fn index_entries(h: &Header, hnum: u32) -> BTreeMap<&'static str, Vec<(Vec<u8>, u32)>> {
    let _ = hnum;
    let mut out = BTreeMap::new();
    for ix in INDEXES {
        let mut keys: Vec<(Vec<u8>, u32)> = Vec::new();
        let Some(value) = h.get(ix.tag) else {
            // XXX preserve legacy behavior: a package without a group is in "Unknown".
            if ix.tag == tag::GROUP {
                keys.push((b"Unknown".to_vec(), 0));
                out.insert(ix.name, keys);
            }
            continue;
        };
        let trig_index = match ix.tag {
            FILETRIGGERNAME => h.ints(FILETRIGGERINDEX),
            TRANSFILETRIGGERNAME => h.ints(TRANSFILETRIGGERINDEX),
            _ => Vec::new(),
        };
        let req_flags =
            if ix.tag == tag::REQUIRENAME { h.ints(tag::REQUIREFLAGS) } else { Vec::new() };
        let (items, array): (Vec<Vec<u8>>, bool) = match value {
            Value::String(s) => (vec![s.into_bytes()], false),
            // I18N strings come back as one string: the untranslated one.
            Value::I18nString(v) => {
                (v.into_iter().take(1).map(String::into_bytes).collect(), false)
            }
            Value::StringArray(v) => (v.into_iter().map(String::into_bytes).collect(), true),
            // A BIN value is one key of all its bytes.
            Value::Bin(b) => (vec![b], false),
            Value::Char(b) | Value::Int8(b) => (b.into_iter().map(|x| vec![x]).collect(), false),
            Value::Int16(v) => (v.into_iter().map(|x| x.to_le_bytes().to_vec()).collect(), false),
            Value::Int32(v) => (v.into_iter().map(|x| x.to_le_bytes().to_vec()).collect(), false),
            Value::Int64(v) => (v.into_iter().map(|x| x.to_le_bytes().to_vec()).collect(), false),
            Value::Null => (Vec::new(), false),
        };
        for (i, key) in items.iter().enumerate() {
            let idx = match ix.tag {
                FILETRIGGERNAME | TRANSFILETRIGGERNAME => {
                    trig_index.get(i).copied().unwrap_or(0) as u32
                }
                _ => i as u32,
            };
            if ix.tag == tag::REQUIRENAME
                && req_flags.get(i).is_some_and(|f| transient_req(*f as u32))
            {
                continue;
            }
            if ix.tag == TRIGGERNAME && items[..i].contains(key) {
                continue;
            }
            keys.push((key.clone(), idx));
            let rich = matches!(
                ix.tag,
                tag::REQUIRENAME
                    | tag::CONFLICTNAME
                    | SUGGESTNAME
                    | SUPPLEMENTNAME
                    | RECOMMENDNAME
                    | ENHANCENAME
            );
            if rich && array && key.first() == Some(&b'(') {
                for name in rich_names(key) {
                    keys.push((name, idx));
                }
            }
        }
        if !keys.is_empty() {
            out.insert(ix.name, keys);
        }
    }
    out
}

/// The names `updateRichDep` indexes for a rich dependency: each simple dependency's name,
/// `!`-prefixed where it is a condition (`if`/`unless`, inverted again after `else`), without
/// `rpmlib(...)`, sorted and without duplicates; nothing when it does not parse.
fn rich_names(dep: &[u8]) -> Vec<Vec<u8>> {
    struct P<'a> {
        s: &'a [u8],
        at: usize,
        argv: Vec<Vec<u8>>,
        neg: bool,
        levels: Vec<usize>,
    }
    fn white(c: u8) -> bool {
        c.is_ascii_whitespace() || c == b','
    }
    impl P<'_> {
        fn peek(&self) -> u8 {
            self.s.get(self.at).copied().unwrap_or(0)
        }
        fn skip_white(&mut self) {
            while self.peek() != 0 && white(self.peek()) {
                self.at += 1;
            }
        }
        /// `SKIPNONWHITEX`: up to white space, or a `)` closing no `(` of this token.
        fn skip_nonwhite(&mut self) {
            let mut bl = 0i32;
            while self.peek() != 0 && !white(self.peek()) {
                if self.peek() == b')' {
                    let stop = bl <= 0;
                    bl -= 1;
                    if stop {
                        break;
                    }
                }
                if self.peek() == b'(' {
                    bl += 1;
                }
                self.at += 1;
            }
        }
        fn simple(&mut self) -> Option<()> {
            let n = self.at;
            self.skip_nonwhite();
            let s = self.s;
            let name = &s[n..self.at];
            if name.is_empty() {
                return None;
            }
            self.skip_white();
            if self.peek() != 0 {
                let p = self.at;
                self.skip_nonwhite();
                let op = &s[p..self.at];
                if [&b"<="[..], b"=<", b"<", b"==", b"=", b">=", b"=>", b">"].contains(&op) {
                    self.skip_white();
                    let e = self.at;
                    self.skip_nonwhite();
                    if self.at == e {
                        return None;
                    }
                } else {
                    self.at = p;
                }
            }
            if !(name.len() > 7 && name.starts_with(b"rpmlib(")) {
                let mut v = vec![if self.neg { b'!' } else { b' ' }];
                v.extend_from_slice(name);
                self.argv.push(v);
            }
            Some(())
        }
        fn rich(&mut self) -> Option<()> {
            self.levels.push(self.argv.len());
            if self.peek() != b'(' {
                return None;
            }
            self.at += 1;
            let mut op: &[u8] = b"";
            loop {
                self.skip_white();
                if self.peek() == b')' {
                    return None;
                }
                if self.peek() == b'(' {
                    self.rich()?;
                } else {
                    self.simple()?;
                }
                self.skip_white();
                if self.peek() == 0 {
                    return None;
                }
                if self.peek() == b')' {
                    break;
                }
                let start = self.at;
                while self.peek() != 0
                    && !self.peek().is_ascii_whitespace()
                    && self.peek() != b'('
                    && self.peek() != b')'
                {
                    self.at += 1;
                }
                let s = self.s;
                op = &s[start..self.at];
                if !matches!(
                    op,
                    b"and" | b"or" | b"if" | b"unless" | b"else" | b"with" | b"without"
                ) {
                    return None;
                }
                let level = self.levels.len() - 1;
                match op {
                    b"if" | b"unless" => {
                        self.levels[level] = self.argv.len();
                        self.neg = !self.neg;
                    }
                    b"else" => {
                        let from = self.levels[level];
                        let flipped: Vec<Vec<u8>> = self.argv[from..]
                            .iter()
                            .map(|n| {
                                let mut n = n.clone();
                                n[0] = if n[0] == b' ' { b'!' } else { b' ' };
                                n
                            })
                            .collect();
                        self.argv.extend(flipped);
                        self.neg = !self.neg;
                    }
                    _ => {}
                }
            }
            self.at += 1;
            self.levels.pop();
            if matches!(op, b"if" | b"unless") {
                self.neg = !self.neg;
            }
            Some(())
        }
    }
    let mut p = P { s: dep, at: 0, argv: Vec::new(), neg: false, levels: Vec::new() };
    if p.rich().is_none() {
        return Vec::new();
    }
    let mut argv = p.argv;
    argv.sort();
    argv.dedup();
    argv.into_iter().map(|n| if n[0] == b' ' { n[1..].to_vec() } else { n }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rich_dependencies_index_their_names() {
        let n = |s: &str| {
            rich_names(s.as_bytes())
                .into_iter()
                .map(|v| String::from_utf8(v).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(n("(a or b)"), ["a", "b"]);
        assert_eq!(n("(foo >= 1.0 and (bar if baz))"), ["bar", "foo", "!baz"]);
        assert_eq!(n("(p >= 2 if q else r)"), ["p", "q", "r", "!q"]);
        assert_eq!(n("(a unless b)"), ["a", "!b"]);
        assert_eq!(n("(rpmlib(Foo) and x)"), ["x"]);
        assert!(n("(a or").is_empty() && n("(a foo b)").is_empty());
    }

    #[test]
    fn transient_requirements_are_not_indexed() {
        use header::sense::*;
        assert!(
            transient_req(SCRIPT_PRE)
                && transient_req(SCRIPT_POST)
                && transient_req(RPMLIB | LESS | EQUAL)
        );
        assert!(
            !transient_req(0)
                && !transient_req(SCRIPT_PREUN)
                && !transient_req(SCRIPT_PRE | SCRIPT_POSTUN)
                && !transient_req(PREREQ)
        );
    }
}
