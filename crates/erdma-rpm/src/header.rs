//! rpm headers: the tagged structure that holds everything about a package (its signature
//! header, its main header) and, in the rpm database, each installed package.
//!
//! A header blob is `il` and `dl` (big-endian u32), `il` index entries of 16 bytes (tag, type,
//! offset into the data store, count) and `dl` bytes of data (rpm's lib/header.c,
//! lib/header_internal.h). A package's main header starts with an *immutable region*: entry 0
//! (`HEADERIMMUTABLE`) points at a trailer entry whose negative offset says how many entries
//! the region spans. Signatures and digests cover that region byte for byte, so an installed
//! header keeps it verbatim and rpm adds what it learns at install time (install time, file
//! states, the signature header's digests) as *dribble* entries after it, which is what
//! [`Header::with_dribbles`] writes.
//!
//! Hand-written rather than taken from the `rpm` crate: that crate does not write installed
//! headers (region kept, dribbles appended) and would bring a second rpgp version; this is
//! small and every read is bounds-checked against hostile input.
use crate::{Cmp, Dep, Evr, PackageMeta};

/// What starts every header in a package file (`rpm_header_magic`), absent in the database.
pub const MAGIC: [u8; 8] = [0x8e, 0xad, 0xe8, 0x01, 0, 0, 0, 0];
/// rpm's own bounds (`hdrchkTags`, `hdrchkData` in lib/header_internal.h): 0xffff entries and
/// 256 MiB of data.
pub const MAX_ENTRIES: u32 = 0xffff;
pub const MAX_DATA: u32 = 256 << 20;

/// Tags of the main header (lib/rpmtag.h) that the backend reads or writes.
pub mod tag {
    pub const HEADERSIGNATURES: u32 = 62;
    pub const HEADERIMMUTABLE: u32 = 63;
    pub const HEADERI18NTABLE: u32 = 100;
    pub const SIGSIZE: u32 = 257;
    pub const SIGPGP: u32 = 259;
    pub const SIGMD5: u32 = 261;
    pub const SIGGPG: u32 = 262;
    pub const DSAHEADER: u32 = 267;
    pub const RSAHEADER: u32 = 268;
    pub const SHA1HEADER: u32 = 269;
    pub const LONGSIGSIZE: u32 = 270;
    pub const LONGARCHIVESIZE: u32 = 271;
    pub const SHA256HEADER: u32 = 273;
    pub const NAME: u32 = 1000;
    pub const VERSION: u32 = 1001;
    pub const RELEASE: u32 = 1002;
    pub const EPOCH: u32 = 1003;
    pub const SUMMARY: u32 = 1004;
    pub const INSTALLTIME: u32 = 1008;
    pub const SIZE: u32 = 1009;
    pub const GROUP: u32 = 1016;
    pub const ARCH: u32 = 1022;
    pub const PREIN: u32 = 1023;
    pub const POSTIN: u32 = 1024;
    pub const PREUN: u32 = 1025;
    pub const POSTUN: u32 = 1026;
    pub const OLDFILENAMES: u32 = 1027;
    pub const FILESIZES: u32 = 1028;
    pub const FILESTATES: u32 = 1029;
    pub const FILEMODES: u32 = 1030;
    pub const FILERDEVS: u32 = 1033;
    pub const FILEMTIMES: u32 = 1034;
    pub const FILEDIGESTS: u32 = 1035;
    pub const FILELINKTOS: u32 = 1036;
    pub const FILEFLAGS: u32 = 1037;
    pub const FILEUSERNAME: u32 = 1039;
    pub const FILEGROUPNAME: u32 = 1040;
    pub const SOURCERPM: u32 = 1044;
    pub const PROVIDENAME: u32 = 1047;
    pub const REQUIREFLAGS: u32 = 1048;
    pub const REQUIRENAME: u32 = 1049;
    pub const REQUIREVERSION: u32 = 1050;
    pub const CONFLICTFLAGS: u32 = 1053;
    pub const CONFLICTNAME: u32 = 1054;
    pub const CONFLICTVERSION: u32 = 1055;
    pub const ARCHIVESIZE: u32 = 1046;
    pub const PREINPROG: u32 = 1085;
    pub const POSTINPROG: u32 = 1086;
    pub const PREUNPROG: u32 = 1087;
    pub const POSTUNPROG: u32 = 1088;
    pub const OBSOLETENAME: u32 = 1090;
    pub const RECOMMENDNAME: u32 = 5046;
    pub const RECOMMENDVERSION: u32 = 5047;
    pub const RECOMMENDFLAGS: u32 = 5048;
    pub const FILEDEVICES: u32 = 1095;
    pub const FILEINODES: u32 = 1096;
    pub const PROVIDEFLAGS: u32 = 1112;
    pub const PROVIDEVERSION: u32 = 1113;
    pub const OBSOLETEFLAGS: u32 = 1114;
    pub const OBSOLETEVERSION: u32 = 1115;
    pub const DIRINDEXES: u32 = 1116;
    pub const BASENAMES: u32 = 1117;
    pub const DIRNAMES: u32 = 1118;
    pub const PAYLOADFORMAT: u32 = 1124;
    pub const PAYLOADCOMPRESSOR: u32 = 1125;
    pub const PAYLOADFLAGS: u32 = 1126;
    pub const INSTALLCOLOR: u32 = 1127;
    pub const INSTALLTID: u32 = 1128;
    pub const FILECOLORS: u32 = 1140;
    pub const LONGFILESIZES: u32 = 5008;
    pub const LONGSIZE: u32 = 5009;
    pub const FILEDIGESTALGO: u32 = 5011;
    pub const PAYLOADDIGEST: u32 = 5092;
    pub const PAYLOADDIGESTALGO: u32 = 5093;
}

/// Tags of the signature header (lib/rpmtag.h `rpmSigTag`). Those below 1000 share the main
/// header's numbers; 1000 and up are the legacy header+payload ones.
pub mod sigtag {
    pub const SIZE: u32 = 1000;
    pub const PGP: u32 = 1002;
    pub const MD5: u32 = 1004;
    pub const GPG: u32 = 1005;
    pub const PAYLOADSIZE: u32 = 1007;
    pub const RESERVEDSPACE: u32 = 1008;
    pub const DSA: u32 = 267;
    pub const RSA: u32 = 268;
    pub const SHA1: u32 = 269;
    pub const LONGSIZE: u32 = 270;
    pub const LONGARCHIVESIZE: u32 = 271;
    pub const SHA256: u32 = 273;
}

/// Dependency flags (`rpmsenseFlags`, lib/rpmds.h).
pub mod sense {
    pub const LESS: u32 = 1 << 1;
    pub const GREATER: u32 = 1 << 2;
    pub const EQUAL: u32 = 1 << 3;
    pub const PREREQ: u32 = 1 << 6;
    pub const SCRIPT_PRE: u32 = 1 << 9;
    pub const SCRIPT_POST: u32 = 1 << 10;
    pub const SCRIPT_PREUN: u32 = 1 << 11;
    pub const SCRIPT_POSTUN: u32 = 1 << 12;
    /// `rpmlib(...)` features the installing rpm must have.
    pub const RPMLIB: u32 = 1 << 24;
    /// Weak dependencies share the tags in old rpms.
    pub const MISSINGOK: u32 = 1 << 19;
    pub const CONFIG: u32 = 1 << 28;
}

/// File flags (`rpmfileAttrs`, lib/rpmfiles.h).
pub mod fileflag {
    pub const CONFIG: u32 = 1 << 0;
    pub const DOC: u32 = 1 << 1;
    pub const MISSINGOK: u32 = 1 << 3;
    pub const NOREPLACE: u32 = 1 << 4;
    pub const GHOST: u32 = 1 << 6;
    pub const LICENSE: u32 = 1 << 7;
    pub const README: u32 = 1 << 8;
    pub const ARTIFACT: u32 = 1 << 12;
}

/// Entry types (`rpmTagType`) and their alignment in the data store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Type {
    Null = 0,
    Char = 1,
    Int8 = 2,
    Int16 = 3,
    Int32 = 4,
    Int64 = 5,
    String = 6,
    Bin = 7,
    StringArray = 8,
    I18nString = 9,
}

impl Type {
    fn from_u32(v: u32) -> Option<Type> {
        Some(match v {
            0 => Type::Null,
            1 => Type::Char,
            2 => Type::Int8,
            3 => Type::Int16,
            4 => Type::Int32,
            5 => Type::Int64,
            6 => Type::String,
            7 => Type::Bin,
            8 => Type::StringArray,
            9 => Type::I18nString,
            _ => return None,
        })
    }

    fn align(self) -> usize {
        match self {
            Type::Int16 => 2,
            Type::Int32 => 4,
            Type::Int64 => 8,
            _ => 1,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    #[error("the header is cut short ({0})")]
    Truncated(&'static str),
    #[error("bad header magic")]
    BadMagic,
    #[error("the header claims {il} entries and {dl} bytes of data, over rpm's limits")]
    TooBig { il: u32, dl: u32 },
    #[error("header entry {index} (tag {tag}) is malformed: {why}")]
    BadEntry { index: usize, tag: u32, why: String },
}

/// A typed header value, as [`Header::get`] decodes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Char(Vec<u8>),
    Int8(Vec<u8>),
    Int16(Vec<u16>),
    Int32(Vec<u32>),
    Int64(Vec<u64>),
    String(String),
    Bin(Vec<u8>),
    StringArray(Vec<String>),
    I18nString(Vec<String>),
}

impl Value {
    fn kind(&self) -> Type {
        match self {
            Value::Null => Type::Null,
            Value::Char(_) => Type::Char,
            Value::Int8(_) => Type::Int8,
            Value::Int16(_) => Type::Int16,
            Value::Int32(_) => Type::Int32,
            Value::Int64(_) => Type::Int64,
            Value::String(_) => Type::String,
            Value::Bin(_) => Type::Bin,
            Value::StringArray(_) => Type::StringArray,
            Value::I18nString(_) => Type::I18nString,
        }
    }

    /// The entry's count and its bytes in the data store.
    fn encode(&self) -> (u32, Vec<u8>) {
        let strings = |v: &[String]| {
            let mut out = Vec::new();
            for s in v {
                out.extend_from_slice(s.as_bytes());
                out.push(0);
            }
            out
        };
        match self {
            Value::Null => (0, Vec::new()),
            Value::Char(b) | Value::Int8(b) | Value::Bin(b) => (b.len() as u32, b.clone()),
            Value::Int16(v) => (v.len() as u32, v.iter().flat_map(|x| x.to_be_bytes()).collect()),
            Value::Int32(v) => (v.len() as u32, v.iter().flat_map(|x| x.to_be_bytes()).collect()),
            Value::Int64(v) => (v.len() as u32, v.iter().flat_map(|x| x.to_be_bytes()).collect()),
            Value::String(s) => (1, strings(std::slice::from_ref(s))),
            Value::StringArray(v) | Value::I18nString(v) => (v.len() as u32, strings(v)),
        }
    }
}

/// One index entry, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub tag: u32,
    pub kind: Type,
    pub offset: u32,
    pub count: u32,
    /// Bytes of data the entry spans (computed and checked when the header is parsed).
    pub len: u32,
}

/// A parsed header. The bytes are kept as read, so what was signed stays byte-identical.
#[derive(Debug, Clone)]
pub struct Header {
    entries: Vec<Entry>,
    /// The blob as read: `il`, `dl`, index, data (no magic).
    blob: Vec<u8>,
    /// Entries and data bytes of the immutable region, when the header has one.
    region: Option<(u32, u32)>,
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

impl Header {
    /// Parses a header blob without magic (as the rpm database stores it).
    pub fn parse(blob: Vec<u8>) -> Result<Header, HeaderError> {
        if blob.len() < 8 {
            return Err(HeaderError::Truncated("no entry and data counts"));
        }
        let (il, dl) = (be32(&blob, 0), be32(&blob, 4));
        if il == 0 || il > MAX_ENTRIES || dl > MAX_DATA {
            return Err(HeaderError::TooBig { il, dl });
        }
        let data_start = 8 + il as usize * 16;
        if blob.len() < data_start + dl as usize {
            return Err(HeaderError::Truncated("fewer bytes than its entry and data counts say"));
        }
        let data = &blob[data_start..data_start + dl as usize];
        let mut entries = Vec::with_capacity(il as usize);
        for i in 0..il as usize {
            let at = 8 + i * 16;
            let tag = be32(&blob, at);
            let bad = |why: String| HeaderError::BadEntry { index: i, tag, why };
            let kind = Type::from_u32(be32(&blob, at + 4))
                .ok_or_else(|| bad(format!("unknown type {}", be32(&blob, at + 4))))?;
            let offset = be32(&blob, at + 8);
            let count = be32(&blob, at + 12);
            let region_tag = i == 0
                && (tag == tag::HEADERIMMUTABLE || tag == tag::HEADERSIGNATURES)
                && kind == Type::Bin
                && count == 16;
            if offset as usize > data.len() {
                return Err(bad(format!("offset {offset} past the {} bytes of data", data.len())));
            }
            if !(offset as usize).is_multiple_of(kind.align()) {
                return Err(bad(format!("offset {offset} not aligned for its type")));
            }
            let len = data_len(kind, &data[offset as usize..], count).ok_or_else(|| {
                bad(format!("{count} values of type {kind:?} do not fit the data"))
            })?;
            entries.push(Entry { tag, kind, offset, count, len });
            if region_tag {
                // The trailer: an entry whose negative offset counts the region's entries.
                let trailer = &data[offset as usize..offset as usize + 16];
                let roff = be32(trailer, 8) as i32;
                let ril =
                    roff.checked_neg().filter(|n| *n > 0 && n % 16 == 0).map(|n| n as u32 / 16);
                match ril {
                    Some(ril) if ril <= il => {}
                    _ => return Err(bad(format!("region trailer offset {roff} is not a whole number of entries within the header"))),
                }
            }
        }
        let region = entries
            .first()
            .filter(|e| {
                (e.tag == tag::HEADERIMMUTABLE || e.tag == tag::HEADERSIGNATURES)
                    && e.kind == Type::Bin
                    && e.count == 16
            })
            .map(|e| {
                let trailer = &data[e.offset as usize..e.offset as usize + 16];
                let ril = (be32(trailer, 8) as i32).unsigned_abs() / 16;
                (ril, e.offset + 16)
            });
        let total = data_start + dl as usize;
        let mut blob = blob;
        blob.truncate(total);
        Ok(Header { entries, blob, region })
    }

    /// Reads a header with magic from a package file; returns it and the bytes read (magic
    /// included), which is what header signatures and digests cover.
    pub fn read_with_magic<R: std::io::Read>(r: &mut R) -> Result<(Header, Vec<u8>), HeaderError> {
        let mut head = [0u8; 16];
        r.read_exact(&mut head).map_err(|_| HeaderError::Truncated("no header"))?;
        if head[..8] != MAGIC {
            return Err(HeaderError::BadMagic);
        }
        let (il, dl) = (be32(&head, 8), be32(&head, 12));
        if il == 0 || il > MAX_ENTRIES || dl > MAX_DATA {
            return Err(HeaderError::TooBig { il, dl });
        }
        let mut raw = head.to_vec();
        let rest = il as u64 * 16 + dl as u64;
        let got = std::io::copy(&mut <&mut R as std::io::Read>::take(r, rest), &mut raw)
            .map_err(|_| HeaderError::Truncated("reading the header"))?;
        if got != rest {
            return Err(HeaderError::Truncated("the file ends inside the header"));
        }
        let header = Header::parse(raw[8..].to_vec())?;
        Ok((header, raw))
    }

    /// The blob as stored in the rpm database (no magic).
    pub fn blob(&self) -> &[u8] {
        &self.blob
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    fn data(&self) -> &[u8] {
        &self.blob[8 + self.entries.len() * 16..]
    }

    fn find(&self, tag: u32) -> Option<&Entry> {
        // The region entry is a marker, never a value.
        self.entries.iter().skip(usize::from(self.region.is_some())).find(|e| e.tag == tag)
    }

    pub fn has(&self, tag: u32) -> bool {
        self.find(tag).is_some()
    }

    /// The value of `tag`, decoded.
    pub fn get(&self, tag: u32) -> Option<Value> {
        let e = self.find(tag)?;
        let d = &self.data()[e.offset as usize..(e.offset + e.len) as usize];
        let strings = |d: &[u8]| {
            d.split(|b| *b == 0)
                .take(e.count as usize)
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
        };
        Some(match e.kind {
            Type::Null => Value::Null,
            Type::Char => Value::Char(d.to_vec()),
            Type::Int8 => Value::Int8(d.to_vec()),
            Type::Int16 => {
                Value::Int16(d.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect())
            }
            Type::Int32 => Value::Int32(d.chunks_exact(4).map(|c| be32(c, 0)).collect()),
            Type::Int64 => Value::Int64(
                d.chunks_exact(8)
                    .map(|c| u64::from_be_bytes(c.try_into().expect("8 bytes")))
                    .collect(),
            ),
            Type::String => Value::String(strings(d).into_iter().next().unwrap_or_default()),
            Type::Bin => Value::Bin(d.to_vec()),
            Type::StringArray => Value::StringArray(strings(d)),
            Type::I18nString => Value::I18nString(strings(d)),
        })
    }

    /// A string tag (`STRING`, or the first of an `I18NSTRING`/`STRING_ARRAY`).
    pub fn string(&self, tag: u32) -> Option<String> {
        match self.get(tag)? {
            Value::String(s) => Some(s),
            Value::I18nString(v) | Value::StringArray(v) => v.into_iter().next(),
            _ => None,
        }
    }

    pub fn strings(&self, tag: u32) -> Vec<String> {
        match self.get(tag) {
            Some(Value::StringArray(v) | Value::I18nString(v)) => v,
            Some(Value::String(s)) => vec![s],
            _ => Vec::new(),
        }
    }

    /// An integer array tag widened to u64 (`INT8` to `INT64`).
    pub fn ints(&self, tag: u32) -> Vec<u64> {
        match self.get(tag) {
            Some(Value::Int8(v) | Value::Char(v)) => v.into_iter().map(u64::from).collect(),
            Some(Value::Int16(v)) => v.into_iter().map(u64::from).collect(),
            Some(Value::Int32(v)) => v.into_iter().map(u64::from).collect(),
            Some(Value::Int64(v)) => v,
            _ => Vec::new(),
        }
    }

    pub fn int(&self, tag: u32) -> Option<u64> {
        self.ints(tag).first().copied()
    }

    pub fn bin(&self, tag: u32) -> Option<Vec<u8>> {
        match self.get(tag)? {
            Value::Bin(b) => Some(b),
            _ => None,
        }
    }

    /// The immutable region as a header of its own, with magic: what `SHA256HEADER`,
    /// `SHA1HEADER` and the `RSAHEADER`/`DSAHEADER` signatures cover. For a package's main
    /// header that is the whole header; for an installed one, the part before the dribbles.
    pub fn region_with_magic(&self) -> Option<Vec<u8>> {
        let (ril, rdl) = self.region?;
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&ril.to_be_bytes());
        out.extend_from_slice(&rdl.to_be_bytes());
        out.extend_from_slice(&self.blob[8..8 + ril as usize * 16]);
        out.extend_from_slice(&self.data()[..rdl as usize]);
        Some(out)
    }

    /// The database blob of this header with `added` appended after it as dribble entries,
    /// as rpm's `headerExport` writes an imported header it has put tags into: the original
    /// entries and data verbatim, then each new entry with its data aligned for its type, in
    /// increasing data offsets (which `hdrblobVerifyInfo` requires). A tag already present is
    /// an error: the region must stay as signed.
    pub fn with_dribbles(&self, added: &[(u32, Value)]) -> Result<Vec<u8>, HeaderError> {
        let mut index = self.blob[8..8 + self.entries.len() * 16].to_vec();
        let mut data = self.data().to_vec();
        for (i, (t, v)) in added.iter().enumerate() {
            if self.has(*t) || added[..i].iter().any(|(o, _)| o == t) {
                return Err(HeaderError::BadEntry {
                    index: self.entries.len() + i,
                    tag: *t,
                    why: "the tag is already in the header".into(),
                });
            }
            let kind = v.kind();
            while !data.len().is_multiple_of(kind.align()) {
                data.push(0);
            }
            let (count, bytes) = v.encode();
            index.extend_from_slice(&t.to_be_bytes());
            index.extend_from_slice(&(kind as u32).to_be_bytes());
            index.extend_from_slice(&(data.len() as u32).to_be_bytes());
            index.extend_from_slice(&count.to_be_bytes());
            data.extend_from_slice(&bytes);
        }
        let il = (index.len() / 16) as u32;
        let dl = data.len() as u32;
        if il > MAX_ENTRIES || dl > MAX_DATA {
            return Err(HeaderError::TooBig { il, dl });
        }
        let mut out = Vec::with_capacity(8 + index.len() + data.len());
        out.extend_from_slice(&il.to_be_bytes());
        out.extend_from_slice(&dl.to_be_bytes());
        out.extend_from_slice(&index);
        out.extend_from_slice(&data);
        Ok(out)
    }

    /// A header made of `entries` only, with no region (tests, and rpm's own headers of
    /// no package such as the `gpg-pubkey` ones are not built here).
    pub fn build(entries: &[(u32, Value)]) -> Result<Header, HeaderError> {
        let mut index = Vec::new();
        let mut data = Vec::new();
        let mut sorted: Vec<&(u32, Value)> = entries.iter().collect();
        sorted.sort_by_key(|(t, _)| *t);
        for (t, v) in sorted {
            let kind = v.kind();
            while !data.len().is_multiple_of(kind.align()) {
                data.push(0);
            }
            let (count, bytes) = v.encode();
            index.extend_from_slice(&t.to_be_bytes());
            index.extend_from_slice(&(kind as u32).to_be_bytes());
            index.extend_from_slice(&(data.len() as u32).to_be_bytes());
            index.extend_from_slice(&count.to_be_bytes());
            data.extend_from_slice(&bytes);
        }
        let mut blob = Vec::new();
        blob.extend_from_slice(&((index.len() / 16) as u32).to_be_bytes());
        blob.extend_from_slice(&(data.len() as u32).to_be_bytes());
        blob.extend_from_slice(&index);
        blob.extend_from_slice(&data);
        Header::parse(blob)
    }

    pub fn name(&self) -> String {
        self.string(tag::NAME).unwrap_or_default()
    }

    pub fn evr(&self) -> Evr {
        Evr {
            epoch: self.int(tag::EPOCH).map(|e| e as u32),
            version: self.string(tag::VERSION).unwrap_or_default(),
            release: self.string(tag::RELEASE).unwrap_or_default(),
        }
    }

    /// `ARCH`; rpm's own `gpg-pubkey` headers and source packages have none.
    pub fn arch(&self) -> String {
        self.string(tag::ARCH).unwrap_or_else(|| "(none)".into())
    }

    /// The paths of the package's files: `DIRNAMES[DIRINDEXES[i]] + BASENAMES[i]`, or the
    /// `OLDFILENAMES` of packages built before rpm 4.
    pub fn file_paths(&self) -> Vec<String> {
        let base = self.strings(tag::BASENAMES);
        if base.is_empty() {
            return self.strings(tag::OLDFILENAMES);
        }
        let dirs = self.strings(tag::DIRNAMES);
        let idx = self.ints(tag::DIRINDEXES);
        base.iter()
            .zip(idx.iter().chain(std::iter::repeat(&u64::MAX)))
            .map(|(b, i)| format!("{}{b}", dirs.get(*i as usize).map(String::as_str).unwrap_or("")))
            .collect()
    }

    /// One dependency kind (`REQUIRE*`, `PROVIDE*`, …) as [`Dep`]s. `rpmlib(...)` requires
    /// (features of the installing rpm) are dropped: the database's writer is us.
    pub fn deps(&self, names: u32, flags: u32, versions: u32) -> Vec<Dep> {
        let n = self.strings(names);
        let f = self.ints(flags);
        let v = self.strings(versions);
        n.into_iter()
            .enumerate()
            .filter(|(i, _)| f.get(*i).copied().unwrap_or(0) as u32 & sense::RPMLIB == 0)
            .map(|(i, name)| {
                let fl = f.get(i).copied().unwrap_or(0) as u32;
                let ver = v.get(i).filter(|s| !s.is_empty());
                let cmp =
                    match (fl & sense::LESS != 0, fl & sense::GREATER != 0, fl & sense::EQUAL != 0)
                    {
                        (true, false, false) => Some(Cmp::Lt),
                        (true, false, true) => Some(Cmp::Le),
                        (false, false, true) => Some(Cmp::Eq),
                        (false, true, true) => Some(Cmp::Ge),
                        (false, true, false) => Some(Cmp::Gt),
                        _ => None,
                    };
                let version = match (cmp, ver) {
                    (Some(c), Some(s)) => Some((c, crate::version::parse_evr(s))),
                    _ => None,
                };
                let pre = fl & (sense::PREREQ | sense::SCRIPT_PRE | sense::SCRIPT_POST) != 0;
                Dep { name, version, pre }
            })
            .collect()
    }

    /// What resolution needs of this header.
    pub fn meta(&self, origin: &str) -> PackageMeta {
        PackageMeta {
            name: self.name(),
            evr: self.evr(),
            arch: self.arch(),
            provides: self.deps(tag::PROVIDENAME, tag::PROVIDEFLAGS, tag::PROVIDEVERSION),
            requires: self.deps(tag::REQUIRENAME, tag::REQUIREFLAGS, tag::REQUIREVERSION),
            obsoletes: self.deps(tag::OBSOLETENAME, tag::OBSOLETEFLAGS, tag::OBSOLETEVERSION),
            conflicts: self.deps(tag::CONFLICTNAME, tag::CONFLICTFLAGS, tag::CONFLICTVERSION),
            recommends: self.deps(tag::RECOMMENDNAME, tag::RECOMMENDFLAGS, tag::RECOMMENDVERSION),
            files: self.file_paths(),
            origin: origin.to_string(),
            location: None,
            checksum: None,
            size: self.int(tag::LONGSIZE).or_else(|| self.int(tag::SIZE)).unwrap_or(0),
        }
    }
}

/// Bytes that `count` values of `kind` span at the start of `d`, or `None` when they do not
/// fit (strings must end in NUL inside the data, as `dataLength` checks).
fn data_len(kind: Type, d: &[u8], count: u32) -> Option<u32> {
    let fixed = |size: u64| {
        let n = size.checked_mul(count as u64)?;
        (n <= d.len() as u64).then_some(n as u32)
    };
    match kind {
        Type::Null => Some(0),
        Type::Char | Type::Int8 | Type::Bin => fixed(1),
        Type::Int16 => fixed(2),
        Type::Int32 => fixed(4),
        Type::Int64 => fixed(8),
        Type::String | Type::StringArray | Type::I18nString => {
            if kind == Type::String && count != 1 {
                return None;
            }
            let mut at = 0usize;
            for _ in 0..count {
                let end = d[at..].iter().position(|b| *b == 0)?;
                at += end + 1;
            }
            Some(at as u32)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header::build(&[
            (tag::NAME, Value::String("libibverbs".into())),
            (tag::VERSION, Value::String("44.0".into())),
            (tag::RELEASE, Value::String("2.al8".into())),
            (tag::ARCH, Value::String("x86_64".into())),
            (tag::SIZE, Value::Int32(vec![1234])),
            (tag::FILEMODES, Value::Int16(vec![0o100755, 0o40755])),
            (
                tag::REQUIRENAME,
                Value::StringArray(vec![
                    "rdma-core(x86-64)".into(),
                    "rpmlib(PayloadIsZstd)".into(),
                    "/sbin/ldconfig".into(),
                ]),
            ),
            (
                tag::REQUIREFLAGS,
                Value::Int32(vec![
                    sense::EQUAL,
                    sense::RPMLIB | sense::LESS | sense::EQUAL,
                    sense::SCRIPT_POST,
                ]),
            ),
            (
                tag::REQUIREVERSION,
                Value::StringArray(vec!["44.0-2.al8".into(), "5.4.18-1".into(), String::new()]),
            ),
            (
                tag::BASENAMES,
                Value::StringArray(vec!["libibverbs.so.1".into(), "libibverbs".into()]),
            ),
            (tag::DIRNAMES, Value::StringArray(vec!["/usr/lib64/".into()])),
            (tag::DIRINDEXES, Value::Int32(vec![0, 0])),
        ])
        .unwrap()
    }

    #[test]
    fn values_round_trip_and_deps_decode() {
        let h = sample();
        assert_eq!(h.name(), "libibverbs");
        assert_eq!(h.evr().to_string(), "44.0-2.al8");
        assert_eq!(h.ints(tag::FILEMODES), vec![0o100755, 0o40755]);
        assert_eq!(h.file_paths(), vec!["/usr/lib64/libibverbs.so.1", "/usr/lib64/libibverbs"]);
        let req = h.deps(tag::REQUIRENAME, tag::REQUIREFLAGS, tag::REQUIREVERSION);
        assert_eq!(req.len(), 2, "rpmlib() dropped: {req:?}");
        assert_eq!(
            req[0].version,
            Some((Cmp::Eq, Evr { epoch: None, version: "44.0".into(), release: "2.al8".into() }))
        );
        assert!(req[1].pre && req[1].version.is_none());
    }

    #[test]
    fn dribbles_keep_the_original_bytes_and_parse_back() {
        let h = sample();
        let blob = h
            .with_dribbles(&[
                (tag::INSTALLTIME, Value::Int32(vec![1700000000])),
                (tag::FILESTATES, Value::Char(vec![0, 0])),
                (tag::INSTALLTID, Value::Int32(vec![1700000000])),
            ])
            .unwrap();
        let back = Header::parse(blob.clone()).unwrap();
        assert_eq!(back.int(tag::INSTALLTIME), Some(1700000000));
        assert_eq!(back.name(), "libibverbs");
        // The original data is a prefix of the new data store, and offsets only grow.
        let offsets: Vec<u32> = back.entries().iter().map(|e| e.offset).collect();
        assert!(offsets.windows(2).skip(h.entries().len() - 1).all(|w| w[0] < w[1]), "{offsets:?}");
        assert!(
            h.with_dribbles(&[(tag::NAME, Value::String("x".into()))]).is_err(),
            "a tag in the header cannot be added again"
        );
    }

    #[test]
    fn hostile_headers_are_refused_not_panicked_on() {
        let good = sample().blob().to_vec();
        for cut in 0..good.len() {
            let _ = Header::parse(good[..cut].to_vec());
        }
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0xff;
            if let Ok(h) = Header::parse(b) {
                for e in h.entries().to_vec() {
                    let _ = h.get(e.tag);
                }
                let _ = h.file_paths();
            }
        }
        let mut huge = good.clone();
        huge[0..4].copy_from_slice(&0x10000u32.to_be_bytes());
        assert!(matches!(Header::parse(huge), Err(HeaderError::TooBig { .. })));
    }
}
