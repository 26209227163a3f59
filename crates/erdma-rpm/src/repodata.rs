//! A yum/dnf repository's metadata: `repodata/repomd.xml`, the `primary.xml` it points to,
//! their compression and checksums.
//!
//! The formats are createrepo_c's (`src/xml_dump_primary.c`, `src/xml_dump_repomd.c`) as
//! libsolv's `ext/repo_rpmmd.c` and `ext/repo_repomdxml.c` read them. Only what resolution
//! and download need is kept; `filelists.xml` is not read: `primary.xml` already lists the
//! files dependencies name (`/etc`, `*bin/`), as dnf relies on too.
//!
//! Trust flows down from `repomd.xml`, whose signature the caller checks: its checksums
//! vouch for `primary.xml`, whose checksums vouch for each package.
use std::borrow::Cow;
use std::io::{BufRead, Read};

use quick_xml::events::Event;
use quick_xml::XmlVersion;

use crate::{Checksum, Cmp, Dep, Evr, PackageMeta};

#[derive(Debug, thiserror::Error)]
pub enum RepodataError {
    #[error("malformed {file}: {reason}")]
    Malformed { file: &'static str, reason: String },

    /// A character reference (`&#…;`) that names no character.
    #[error("malformed {file}: a character reference")]
    CharRef {
        file: &'static str,
        #[source]
        source: quick_xml::Error,
    },

    /// XML the reader cannot read, at a byte offset of the decompressed file.
    #[error("malformed {file}: at byte {at}")]
    Xml {
        file: &'static str,
        at: u64,
        #[source]
        source: quick_xml::Error,
    },

    #[error("repomd.xml lists no `{kind}` metadata")]
    MissingData { kind: String },

    #[error("decompressing {name}")]
    Decompress {
        name: String,
        #[source]
        source: std::io::Error,
    },

    /// A decompression bomb, or a limit set too low for a very large repository.
    #[error("{name} decompresses to more than {limit} bytes")]
    TooLarge { name: String, limit: u64 },

    /// A decompression bomb: more than `--max-inflation` times the compressed size.
    #[error("{name} {exceeded}")]
    Limit { name: String, exceeded: erdma_limits::Exceeded },

    /// The file the metadata is copied to or read back from.
    #[error("{file}")]
    Io {
        file: &'static str,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot decompress {name}: {reason}")]
    UnsupportedCompression { name: String, reason: &'static str },

    #[error("{kind} checksum mismatch: expected {expected}, got {actual}")]
    ChecksumMismatch { kind: String, expected: String, actual: String },

    #[error("unsupported checksum type `{kind}`: {reason}")]
    UnsupportedChecksum { kind: String, reason: &'static str },
}

/// One `<data>` entry of `repomd.xml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoMdData {
    /// `primary`, `filelists`, `other`, `primary_db`, `updateinfo`, `modules`, `group`…
    pub kind: String,
    /// `location href`, relative to the repository's base URL (`repodata/…-primary.xml.gz`).
    pub location: String,
    /// Of the file as stored (compressed).
    pub checksum: Option<Checksum>,
    /// Of the decompressed content.
    pub open_checksum: Option<Checksum>,
    pub size: Option<u64>,
    pub open_size: Option<u64>,
    pub timestamp: Option<u64>,
}

/// `repodata/repomd.xml`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepoMd {
    pub revision: Option<String>,
    pub data: Vec<RepoMdData>,
}

impl RepoMd {
    /// The entry of `kind`, if the repository has one.
    pub fn get(&self, kind: &str) -> Option<&RepoMdData> {
        self.data.iter().find(|d| d.kind == kind)
    }

    /// The `primary` entry, which every repository has.
    pub fn primary(&self) -> Result<&RepoMdData, RepodataError> {
        self.get("primary").ok_or_else(|| RepodataError::MissingData { kind: "primary".into() })
    }
}

fn malformed(file: &'static str) -> impl Fn(String) -> RepodataError {
    move |reason| RepodataError::Malformed { file, reason }
}

/// The value of attribute `key` (a local name: `href`, or `base` for `xml:base`), unescaped.
fn attr(
    e: &quick_xml::events::BytesStart,
    key: &str,
    file: &'static str,
) -> Result<Option<String>, RepodataError> {
    let [value] = attrs(e, [key], file)?;
    Ok(value.map(Cow::into_owned))
}

/// The values of attributes `keys` (local names), unescaped, read in one pass over the
/// element's attributes, however many are asked for: every attribute's syntax is checked and a
/// duplicate refused, as an XML parser refuses them; the values asked for are unescaped (a bad
/// reference in another attribute's value goes unseen, as it did before).
/// A dependency entry asks for six; reading the attributes again for each was a tenth of
/// parsing a `primary.xml`.
fn attrs<'e, const N: usize>(
    e: &'e quick_xml::events::BytesStart,
    keys: [&str; N],
    file: &'static str,
) -> Result<[Option<Cow<'e, str>>; N], RepodataError> {
    let mut out = [const { None }; N];
    for a in e.attributes() {
        let a = a.map_err(|err| malformed(file)(err.to_string()))?;
        let local = a.key.local_name();
        let Some(i) = keys.iter().position(|k| *k == local.as_ref()) else {
            continue;
        };
        if out[i].is_none() {
            out[i] = Some(
                a.normalized_value(XmlVersion::Implicit1_0)
                    .map_err(|err| malformed(file)(err.to_string()))?,
            );
        }
    }
    Ok(out)
}

/// Appends the text of an event to `text`: character data, CDATA, or an entity reference
/// (quick-xml reports `&amp;` and `&#38;` as events of their own).
fn push_text(event: &Event, text: &mut String, file: &'static str) -> Result<(), RepodataError> {
    match event {
        Event::Text(t) => text.push_str(&t.xml10_content()),
        Event::CData(t) => text.push_str(&t.xml10_content()),
        Event::GeneralRef(r) => {
            if let Some(c) =
                r.resolve_char_ref().map_err(|source| RepodataError::CharRef { file, source })?
            {
                text.push(c);
            } else {
                let name: &str = r;
                let value = quick_xml::escape::resolve_predefined_entity(name)
                    .ok_or_else(|| malformed(file)(format!("unknown entity &{name};")))?;
                text.push_str(value);
            }
        }
        _ => {}
    }
    Ok(())
}

fn number(s: &str, what: &str, file: &'static str) -> Result<u64, RepodataError> {
    // Old createrepo (python) wrote timestamps as floats: keep the whole seconds.
    let s = s.trim();
    let whole = s.split_once('.').map_or(s, |(w, _)| w);
    whole.parse().map_err(|_| malformed(file)(format!("{what} `{s}` is not a number")))
}

fn checksum(kind: Option<String>, hex: &str) -> Checksum {
    Checksum { kind: kind.unwrap_or_else(|| "sha256".into()), hex: hex.trim().to_ascii_lowercase() }
}

/// Parses `repodata/repomd.xml`.
pub fn parse_repomd(bytes: &[u8]) -> Result<RepoMd, RepodataError> {
    const FILE: &str = "repomd.xml";
    let bad = malformed(FILE);
    let mut reader = quick_xml::Reader::from_reader(bytes);
    reader.config_mut().expand_empty_elements = true;
    let mut buf = Vec::new();
    let mut md = RepoMd::default();
    let mut data: Option<RepoMdData> = None;
    let mut sum_kind: Option<String> = None;
    let mut text = String::new();
    let mut path: Vec<String> = Vec::new();
    loop {
        let event = reader.read_event_into(&mut buf).map_err(|source| RepodataError::Xml {
            file: FILE,
            at: reader.buffer_position(),
            source,
        })?;
        match &event {
            Event::Start(e) => {
                let name = e.local_name().as_ref().to_string();
                text.clear();
                match (path.last().map(String::as_str), name.as_str()) {
                    (Some("repomd"), "data") => {
                        let kind = attr(e, "type", FILE)?
                            .ok_or_else(|| bad("<data> without a type".into()))?;
                        data = Some(RepoMdData {
                            kind,
                            location: String::new(),
                            checksum: None,
                            open_checksum: None,
                            size: None,
                            open_size: None,
                            timestamp: None,
                        });
                    }
                    (Some("data"), "checksum" | "open-checksum") => {
                        sum_kind = attr(e, "type", FILE)?
                    }
                    (Some("data"), "location") => {
                        if let Some(d) = data.as_mut() {
                            d.location = attr(e, "href", FILE)?.ok_or_else(|| {
                                bad(format!(
                                    "<data type=\"{}\"> has a location without href",
                                    d.kind
                                ))
                            })?;
                        }
                    }
                    _ => {}
                }
                path.push(name);
            }
            Event::End(_) => {
                let name = path.pop().unwrap_or_default();
                match (path.last().map(String::as_str), name.as_str(), data.as_mut()) {
                    (Some("repomd"), "revision", _) => md.revision = Some(text.trim().to_string()),
                    (Some("repomd"), "data", Some(_)) => {
                        let d = data.take().expect("matched Some");
                        if d.location.is_empty() {
                            return Err(bad(format!("<data type=\"{}\"> has no location", d.kind)));
                        }
                        md.data.push(d);
                    }
                    (Some("data"), "checksum", Some(d)) => {
                        d.checksum = Some(checksum(sum_kind.take(), &text))
                    }
                    (Some("data"), "open-checksum", Some(d)) => {
                        d.open_checksum = Some(checksum(sum_kind.take(), &text))
                    }
                    (Some("data"), "size", Some(d)) => d.size = Some(number(&text, "size", FILE)?),
                    (Some("data"), "open-size", Some(d)) => {
                        d.open_size = Some(number(&text, "open-size", FILE)?)
                    }
                    (Some("data"), "timestamp", Some(d)) => {
                        d.timestamp = Some(number(&text, "timestamp", FILE)?)
                    }
                    _ => {}
                }
                text.clear();
            }
            Event::Eof => break,
            other => push_text(other, &mut text, FILE)?,
        }
        buf.clear();
    }
    if md.data.is_empty() {
        return Err(bad("no <repomd> with <data> entries".into()));
    }
    Ok(md)
}

/// The text element of a `<package>` being read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    Name,
    Arch,
    Checksum,
    File,
}

/// Which dependency list of `<format>` `<rpm:entry>` elements go to.
#[derive(Clone, Copy)]
enum List {
    Provides,
    Requires,
    Obsoletes,
    Conflicts,
    /// `recommends`: what dnf installs by default (`install_weak_deps=True`); erdma-build
    /// only with `--install-recommends`.
    Recommends,
    /// The other weak dependencies (`suggests`, `enhances`, `supplements`): dnf never pulls
    /// the first two in, and the reverse `supplements` is not read.
    Ignored,
}

/// An epoch attribute: `0` and none are the same to rpm; kept as none so that names print
/// as dnf prints them (`rdma-core-44.0-2.el8`, not `0:44.0`).
fn epoch(s: Option<&str>) -> Option<u32> {
    s.and_then(|e| e.trim().parse::<u32>().ok()).filter(|&e| e != 0)
}

/// The file [`for_each_package`] reads, for errors.
const PRIMARY_XML: &str = "primary.xml";

/// Reads `primary.xml` (already decompressed) one package at a time, handing each to `each`:
/// memory stays at one package however large the repository (tens of MB of XML for
/// EL's BaseOS). `origin` becomes each package's [`PackageMeta::origin`].
///
/// A package's `location` is its `href`, or `xml:base` joined with it when the repository
/// keeps its packages elsewhere (createrepo_c `--location-prefix`/`--baseurl`).
pub fn for_each_package<R: BufRead>(
    input: R,
    origin: &str,
    each: &mut dyn FnMut(PackageMeta) -> Result<(), RepodataError>,
) -> Result<(), RepodataError> {
    for_each_package_at(input, origin, &mut |p, _| each(p))
}

/// [`for_each_package`], with where each `<package>` element lies in the input: from its `<`
/// to just past its closing tag, so that [`for_each_package`] reads the same package again
/// from those bytes alone.
pub fn for_each_package_at<R: BufRead>(
    input: R,
    origin: &str,
    each: &mut dyn FnMut(PackageMeta, std::ops::Range<u64>) -> Result<(), RepodataError>,
) -> Result<(), RepodataError> {
    let bad = malformed(PRIMARY_XML);
    let mut reader = quick_xml::Reader::from_reader(input);
    reader.config_mut().expand_empty_elements = true;
    let mut buf = Vec::new();
    let mut primary = Primary {
        origin,
        pkg: None,
        start: 0,
        field: None,
        list: None,
        sum_kind: None,
        text: String::new(),
    };
    loop {
        let before = reader.buffer_position();
        let event = reader.read_event_into(&mut buf).map_err(|source| RepodataError::Xml {
            file: PRIMARY_XML,
            at: reader.buffer_position(),
            source,
        })?;
        match &event {
            Event::Start(e) => {
                let opens = primary.pkg.is_none();
                primary.start(e)?;
                if opens && primary.pkg.is_some() {
                    primary.start = before;
                }
            }
            Event::End(e) => primary.end(e, reader.buffer_position(), each)?,
            Event::Eof => break,
            other => primary.characters(other)?,
        }
        buf.clear();
    }
    if primary.pkg.is_some() {
        return Err(bad("truncated inside a <package>".into()));
    }
    Ok(())
}

/// Where [`for_each_package`] is in `primary.xml`: the package being read, the text element
/// and dependency list it is in, and the text read so far.
struct Primary<'a> {
    origin: &'a str,
    pkg: Option<PackageMeta>,
    /// Where the `<package>` being read starts.
    start: u64,
    field: Option<Field>,
    list: Option<List>,
    /// The `type` of the `<checksum>` being read.
    sum_kind: Option<String>,
    text: String,
}

impl Primary<'_> {
    /// An element opens: a `<package>` (not inside another), or, inside one, a text element,
    /// an element whose attributes say the version, location or size, a dependency list, or an
    /// entry of one.
    fn start(&mut self, e: &quick_xml::events::BytesStart) -> Result<(), RepodataError> {
        const FILE: &str = PRIMARY_XML;
        let bad = malformed(FILE);
        let name = e.local_name();
        let name = name.as_ref();
        if name == "package" {
            if self.pkg.is_some() {
                return Err(bad("nested <package>".into()));
            }
            self.pkg = Some(empty_package(self.origin));
            return Ok(());
        }
        let Some(p) = self.pkg.as_mut() else { return Ok(()) };
        self.text.clear();
        match name {
            "name" if self.list.is_none() => self.field = Some(Field::Name),
            "arch" => self.field = Some(Field::Arch),
            "checksum" => {
                self.sum_kind = attr(e, "type", FILE)?;
                self.field = Some(Field::Checksum);
            }
            "file" => self.field = Some(Field::File),
            "version" => p.evr = evr_attributes(e)?,
            "location" => {
                let href = attr(e, "href", FILE)?.ok_or_else(|| {
                    bad(format!("package {} has a location without href", p.name))
                })?;
                p.location = Some(match attr(e, "base", FILE)? {
                    Some(base) if !base.is_empty() => {
                        format!("{}/{}", base.trim_end_matches('/'), href)
                    }
                    _ => href,
                });
            }
            "size" => {
                if let Some(s) = attr(e, "package", FILE)? {
                    p.size = number(&s, "package size", FILE)?;
                }
            }
            "provides" => self.list = Some(List::Provides),
            "requires" => self.list = Some(List::Requires),
            "obsoletes" => self.list = Some(List::Obsoletes),
            "conflicts" => self.list = Some(List::Conflicts),
            "recommends" => self.list = Some(List::Recommends),
            "suggests" | "enhances" | "supplements" => self.list = Some(List::Ignored),
            "entry" if self.list.is_some() => {
                let which = self.list.expect("matched");
                let dep = dependency(e, &p.name)?;
                match which {
                    List::Provides => p.provides.push(dep),
                    List::Requires => p.requires.push(dep),
                    List::Obsoletes => p.obsoletes.push(dep),
                    List::Conflicts => p.conflicts.push(dep),
                    List::Recommends => p.recommends.push(dep),
                    List::Ignored => {}
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// An element closes: a `<package>` goes to `each` once it has a name, arch and version
    /// (`position`, the reader's, for the error); a dependency list ends; a text element takes
    /// the text read.
    fn end(
        &mut self,
        e: &quick_xml::events::BytesEnd,
        position: u64,
        each: &mut dyn FnMut(PackageMeta, std::ops::Range<u64>) -> Result<(), RepodataError>,
    ) -> Result<(), RepodataError> {
        let name = e.local_name();
        match name.as_ref() {
            "package" => {
                if let Some(p) = self.pkg.take() {
                    if p.name.is_empty() || p.arch.is_empty() || p.evr.version.is_empty() {
                        return Err(malformed(PRIMARY_XML)(format!(
                            "a package lacks a name, arch or version (near byte {position})"
                        )));
                    }
                    each(p, self.start..position)?;
                }
            }
            "provides" | "requires" | "obsoletes" | "conflicts" | "suggests" | "recommends"
            | "enhances" | "supplements" => self.list = None,
            _ => {}
        }
        if let (Some(f), Some(p)) = (self.field.take(), self.pkg.as_mut()) {
            let value = std::mem::take(&mut self.text);
            match f {
                Field::Name => p.name = value.trim().to_string(),
                Field::Arch => p.arch = value.trim().to_string(),
                Field::Checksum => p.checksum = Some(checksum(self.sum_kind.take(), &value)),
                Field::File => p.files.push(value),
            }
        }
        Ok(())
    }

    /// Any other event: text kept while inside a text element.
    fn characters(&mut self, event: &Event) -> Result<(), RepodataError> {
        if self.field.is_some() {
            push_text(event, &mut self.text, PRIMARY_XML)?;
        }
        Ok(())
    }
}

/// A `<package>` just opened: nothing read yet but where it comes from.
fn empty_package(origin: &str) -> PackageMeta {
    PackageMeta {
        name: String::new(),
        evr: Evr { epoch: None, version: String::new(), release: String::new() },
        arch: String::new(),
        provides: Vec::new(),
        requires: Vec::new(),
        obsoletes: Vec::new(),
        conflicts: Vec::new(),
        recommends: Vec::new(),
        files: Vec::new(),
        origin: origin.to_string(),
        location: None,
        checksum: None,
        size: 0,
    }
}

/// The `epoch`, `ver` and `rel` attributes of a `<version>` or an `<rpm:entry>`.
fn evr_attributes(e: &quick_xml::events::BytesStart) -> Result<Evr, RepodataError> {
    let [epoch_, ver, rel] = attrs(e, ["epoch", "ver", "rel"], PRIMARY_XML)?;
    Ok(evr(epoch_, ver, rel))
}

fn evr(epoch_: Option<Cow<str>>, ver: Option<Cow<str>>, rel: Option<Cow<str>>) -> Evr {
    Evr {
        epoch: epoch(epoch_.as_deref()),
        version: ver.map(Cow::into_owned).unwrap_or_default(),
        release: rel.map(Cow::into_owned).unwrap_or_default(),
    }
}

/// An `<rpm:entry>` of `package`'s dependency lists: the name, the version where `flags`
/// bound it, and `pre`.
fn dependency(e: &quick_xml::events::BytesStart, package: &str) -> Result<Dep, RepodataError> {
    const FILE: &str = PRIMARY_XML;
    let bad = malformed(FILE);
    let [name, flags, epoch_, ver, rel, pre] =
        attrs(e, ["name", "flags", "epoch", "ver", "rel", "pre"], FILE)?;
    let dep_name = name
        .ok_or_else(|| bad(format!("package {package} has an entry without a name")))?
        .into_owned();
    let version = match flags {
        None => None,
        Some(flags) => {
            let cmp = Cmp::from_flags(&flags).ok_or_else(|| {
                bad(format!("package {package}: unknown flags `{flags}` on {dep_name}"))
            })?;
            Some((cmp, evr(epoch_, ver, rel)))
        }
    };
    let pre = matches!(pre.as_deref(), Some("1" | "true"));
    Ok(Dep { name: dep_name, version, pre })
}

/// Reads all of `primary.xml` (decompressed) into memory: [`for_each_package`] collected.
pub fn parse_primary<R: BufRead>(
    input: R,
    origin: &str,
) -> Result<Vec<PackageMeta>, RepodataError> {
    let mut out = Vec::new();
    for_each_package(input, origin, &mut |p| {
        out.push(p);
        Ok(())
    })?;
    Ok(out)
}

/// A reader of the decompressed content of `name` (chosen by its extension: `.gz`, `.xz`,
/// `.zst`, or none), failing with [`RepodataError::TooLarge`] (through
/// [`read_decompressed`]) past `limit` bytes, and with [`RepodataError::Limit`] past
/// `inflation` times the compressed bytes read ([`erdma_limits::inflate`]). `.bz2` (createrepo_c's
/// `--compress-type=bz2`) and `.zck` (zchunk) are refused: dnf reads them, but nothing
/// writes them by default and we keep no decoder for them.
pub fn decompressor<'a, R: Read + 'a>(
    name: &str,
    input: R,
    limit: u64,
    inflation: u64,
) -> Result<Box<dyn Read + 'a>, RepodataError> {
    use erdma_limits::inflate;
    let base = name.rsplit('/').next().unwrap_or(name);
    let ext = base.rsplit_once('.').map_or("", |(_, e)| e);
    let bounded = match ext {
        "gz" => inflate(input, inflation, limit, |c| Ok(Box::new(flate2::read::MultiGzDecoder::new(c)))),
        "xz" => inflate(input, inflation, limit, |c| Ok(Box::new(liblzma::read::XzDecoder::new_multi_decoder(c)))),
        "zst" | "zstd" => inflate(input, inflation, limit, |c| Ok(Box::new(zstd::stream::read::Decoder::new(c)?))),
        "bz2" => return Err(RepodataError::UnsupportedCompression { name: name.into(), reason: "bzip2 is not supported; rebuild the repository with createrepo_c's default (gz) or xz/zstd" }),
        "zck" => return Err(RepodataError::UnsupportedCompression { name: name.into(), reason: "zchunk is not supported; use the repository's non-zchunk metadata" }),
        "lzma" => return Err(RepodataError::UnsupportedCompression { name: name.into(), reason: "lzma (not xz) is not supported" }),
        _ => inflate(input, 0, limit, |c| Ok(Box::new(c))),
    };
    Ok(Box::new(bounded.map_err(|source| RepodataError::Decompress { name: name.into(), source })?))
}

/// Reads all of a [`decompressor`], mapping its limit to [`RepodataError::TooLarge`].
pub fn read_decompressed(
    name: &str,
    mut reader: impl Read,
    limit: u64,
) -> Result<Vec<u8>, RepodataError> {
    let mut out = Vec::new();
    match reader.read_to_end(&mut out) {
        Ok(_) => Ok(out),
        Err(e) => Err(read_error(name, limit, e)),
    }
}

/// What a [`decompressor`] of `name` with `limit` failing with `e` means.
pub fn read_error(name: &str, limit: u64, e: std::io::Error) -> RepodataError {
    match erdma_limits::exceeded(&e) {
        Some(erdma_limits::Exceeded::Size { .. }) => {
            RepodataError::TooLarge { name: name.into(), limit }
        }
        Some(exceeded) => RepodataError::Limit { name: name.into(), exceeded: exceeded.clone() },
        None => RepodataError::Decompress { name: name.into(), source: e },
    }
}

/// Decompresses `bytes` of the file `name` by its extension (see [`decompressor`]),
/// refusing more than `limit` bytes of output: the metadata is checked against
/// `open-checksum` only after decompression, so a hostile mirror could otherwise send a
/// small file that fills the memory. `inflation`: `--max-inflation`.
pub fn decompress(
    name: &str,
    bytes: &[u8],
    limit: u64,
    inflation: u64,
) -> Result<Vec<u8>, RepodataError> {
    read_decompressed(name, decompressor(name, bytes, limit, inflation)?, limit)
}

/// Checks `bytes` against a repodata checksum. `sha256` (createrepo_c's default since
/// 0.1), `sha512`, `sha384`, `sha224` and `sha1`/`sha` (old createrepo; computed with
/// collision detection, as git does, through the OpenPGP library's SHA-1) are accepted;
/// `md5` is refused: MD5 collisions are cheap to make, and no maintained tool writes it.
pub fn verify(bytes: &[u8], sum: &Checksum) -> Result<(), RepodataError> {
    use pgp::crypto::hash::HashAlgorithm;
    use sha2::Digest;
    let actual = match sum.kind.to_ascii_lowercase().as_str() {
        "sha256" => hex::encode(sha2::Sha256::digest(bytes)),
        "sha512" => hex::encode(sha2::Sha512::digest(bytes)),
        "sha384" => hex::encode(sha2::Sha384::digest(bytes)),
        "sha224" => hex::encode(sha2::Sha224::digest(bytes)),
        "sha1" | "sha" => match HashAlgorithm::Sha1.digest(bytes) {
            Ok(d) => hex::encode(d),
            Err(_) => return Err(RepodataError::UnsupportedChecksum { kind: sum.kind.clone(), reason: "the data is a SHA-1 collision attack" }),
        },
        "md5" => return Err(RepodataError::UnsupportedChecksum { kind: sum.kind.clone(), reason: "md5 is insecure (collisions are cheap); regenerate the repository with createrepo_c's default sha256" }),
        _ => return Err(RepodataError::UnsupportedChecksum { kind: sum.kind.clone(), reason: "expected sha256, sha512, sha384, sha224 or sha1" }),
    };
    if !actual.eq_ignore_ascii_case(sum.hex.trim()) {
        return Err(RepodataError::ChecksumMismatch {
            kind: sum.kind.clone(),
            expected: sum.hex.clone(),
            actual,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    const REPOMD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<repomd xmlns="http://linux.duke.edu/metadata/repo" xmlns:rpm="http://linux.duke.edu/metadata/rpm">
  <revision>1700000000</revision>
  <data type="primary">
    <checksum type="sha256">AB12</checksum>
    <open-checksum type="sha256">cd34</open-checksum>
    <location href="repodata/ab12-primary.xml.gz"/>
    <timestamp>1700000000</timestamp>
    <size>1234</size>
    <open-size>5678</open-size>
  </data>
  <data type="filelists"><checksum type="sha256">ee</checksum><location href="repodata/ee-filelists.xml.gz"/><timestamp>1.5</timestamp></data>
</repomd>"#;

    #[test]
    fn repomd_entries() {
        let md = parse_repomd(REPOMD.as_bytes()).unwrap();
        assert_eq!(md.revision.as_deref(), Some("1700000000"));
        let p = md.primary().unwrap();
        assert_eq!(p.location, "repodata/ab12-primary.xml.gz");
        assert_eq!(p.checksum, Some(Checksum { kind: "sha256".into(), hex: "ab12".into() }));
        assert_eq!(p.open_checksum.as_ref().unwrap().hex, "cd34");
        assert_eq!((p.size, p.open_size, p.timestamp), (Some(1234), Some(5678), Some(1700000000)));
        assert_eq!(md.get("filelists").unwrap().timestamp, Some(1));
        assert!(md.get("other").is_none());
        assert!(matches!(parse_repomd(b"<repomd></repomd>"), Err(RepodataError::Malformed { .. })));
        assert!(parse_repomd(b"<repomd><data type='primary'></data></repomd>").is_err());
        assert!(matches!(
            parse_repomd(b"<repomd><data type='x'><location href='x'/></data></repomd>")
                .unwrap()
                .primary(),
            Err(RepodataError::MissingData { .. })
        ));
    }

    const PRIMARY: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<metadata xmlns="http://linux.duke.edu/metadata/common" xmlns:rpm="http://linux.duke.edu/metadata/rpm" packages="1">
<package type="rpm">
  <name>libibverbs</name>
  <arch>x86_64</arch>
  <version epoch="0" ver="44.0" rel="2.el8.1"/>
  <checksum type="sha256" pkgid="YES">0123abcd</checksum>
  <summary>A library &amp; drivers</summary>
  <description><![CDATA[x < y]]></description>
  <size package="400000" installed="1000000" archive="1001000"/>
  <location xml:base="https://mirror.example/el8/" href="Packages/libibverbs-44.0-2.el8.1.x86_64.rpm"/>
  <format>
    <rpm:license>GPLv2 or BSD</rpm:license>
    <rpm:provides>
      <rpm:entry name="libibverbs" flags="EQ" epoch="0" ver="44.0" rel="2.el8.1"/>
      <rpm:entry name="libibverbs.so.1()(64bit)"/>
      <rpm:entry name="liberdma" flags="EQ" epoch="0" ver="44.0" rel="2.el8.1"/>
    </rpm:provides>
    <rpm:requires>
      <rpm:entry name="/sbin/ldconfig" pre="1"/>
      <rpm:entry name="rdma-core(x86-64)" flags="EQ" epoch="1" ver="44.0"/>
      <rpm:entry name="(a &gt;= 1 or b)"/>
    </rpm:requires>
    <rpm:obsoletes><rpm:entry name="liberdma" flags="LT" epoch="0" ver="44.0" rel="2.el8.1"/></rpm:obsoletes>
    <rpm:recommends><rpm:entry name="perl"/></rpm:recommends>
    <file>/etc/libibverbs.d/erdma.driver</file>
    <file type="dir">/etc/libibverbs.d</file>
    <file>/usr/bin/a&amp;b&#x21;</file>
  </format>
</package>
</metadata>"#;

    #[test]
    fn primary_fields() {
        let pkgs = parse_primary(PRIMARY.as_bytes(), "erdma").unwrap();
        assert_eq!(pkgs.len(), 1);
        let p = &pkgs[0];
        assert_eq!(p.nevra(), "libibverbs-44.0-2.el8.1.x86_64");
        assert_eq!(p.origin, "erdma");
        assert_eq!(p.checksum, Some(Checksum { kind: "sha256".into(), hex: "0123abcd".into() }));
        assert_eq!(p.size, 400000);
        assert_eq!(
            p.location.as_deref(),
            Some("https://mirror.example/el8/Packages/libibverbs-44.0-2.el8.1.x86_64.rpm")
        );
        assert_eq!(
            p.provides.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
            ["libibverbs = 44.0-2.el8.1", "libibverbs.so.1()(64bit)", "liberdma = 44.0-2.el8.1"]
        );
        assert_eq!(
            p.requires.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
            ["/sbin/ldconfig", "rdma-core(x86-64) = 1:44.0", "(a >= 1 or b)"]
        );
        assert!(p.requires[0].pre && !p.requires[1].pre);
        assert_eq!(p.obsoletes.len(), 1);
        assert!(p.conflicts.is_empty());
        assert_eq!(
            p.files,
            ["/etc/libibverbs.d/erdma.driver", "/etc/libibverbs.d", "/usr/bin/a&b!"]
        );
        // Truncated or broken input is an error, not a short list.
        let cut = &PRIMARY[..PRIMARY.find("</format>").unwrap()];
        assert!(parse_primary(cut.as_bytes(), "erdma").is_err());
        assert!(parse_primary(PRIMARY.replace("flags=\"LT\"", "flags=\"XX\"").as_bytes(), "erdma")
            .is_err());
        // An attribute given twice is not well-formed XML (expat, under libsolv, refuses it),
        // also after every attribute asked for.
        for (from, to) in [
            (r#"rel="2.el8.1"/>"#, r#"rel="2.el8.1" rel="3"/>"#),
            (r#"<rpm:entry name="perl"/>"#, r#"<rpm:entry name="perl" pre="1" x="a" x="b"/>"#),
            (r#"href="Packages"#, r#"href="a" href="Packages"#),
        ] {
            let doubled = PRIMARY.replacen(from, to, 1);
            assert_ne!(doubled, PRIMARY);
            let e = parse_primary(doubled.as_bytes(), "erdma").unwrap_err();
            assert!(e.to_string().contains("primary.xml"), "{to}: {e}");
        }
    }

    #[test]
    fn decompression_and_its_limit() {
        use std::io::Write;
        let data = PRIMARY.repeat(50);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(data.as_bytes()).unwrap();
        let gz = gz.finish().unwrap();
        let xz = {
            let mut e = liblzma::write::XzEncoder::new(Vec::new(), 6);
            e.write_all(data.as_bytes()).unwrap();
            e.finish().unwrap()
        };
        let zst = zstd::encode_all(data.as_bytes(), 3).unwrap();
        let n = data.len() as u64;
        for (name, bytes) in [
            ("repodata/x-primary.xml.gz", &gz),
            ("x-primary.xml.xz", &xz),
            ("x-primary.xml.zst", &zst),
            ("primary.xml", &data.as_bytes().to_vec()),
        ] {
            assert_eq!(decompress(name, bytes, n, 100).unwrap(), data.as_bytes(), "{name}");
            assert!(
                matches!(decompress(name, bytes, n - 1, 100), Err(RepodataError::TooLarge { .. })),
                "{name}"
            );
        }
        // A bomb: 1 GiB of zeros in about a megabyte, stopped at the limit, or (a higher limit)
        // once it inflates more than 100×.
        let bomb = zstd::encode_all(std::io::repeat(0).take(1 << 30), 19).unwrap();
        assert!(matches!(
            decompress("bomb.zst", &bomb, 1 << 20, 100),
            Err(RepodataError::TooLarge { .. })
        ));
        let e = decompress("bomb.zst", &bomb, 2 << 30, 100).unwrap_err();
        assert!(
            matches!(
                e,
                RepodataError::Limit {
                    exceeded: erdma_limits::Exceeded::Inflation { ratio: 100, .. },
                    ..
                }
            ),
            "{e}"
        );
        assert!(matches!(
            decompress("x.xml.bz2", b"BZh", 10, 100),
            Err(RepodataError::UnsupportedCompression { .. })
        ));
        assert!(matches!(
            decompress("x.xml.gz", b"not gzip", 100, 100),
            Err(RepodataError::Decompress { .. })
        ));
    }

    #[test]
    fn checksums() {
        let sum = |kind: &str, hex: &str| Checksum { kind: kind.into(), hex: hex.into() };
        verify(
            b"abc",
            &sum("sha256", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        )
        .unwrap();
        verify(b"abc", &sum("sha1", "a9993e364706816aba3e25717850c26c9cd0d89d")).unwrap();
        verify(b"abc", &sum("sha", "A9993E364706816ABA3E25717850C26C9CD0D89D")).unwrap();
        verify(b"abc", &sum("sha512", "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f")).unwrap();
        assert!(matches!(
            verify(
                b"abd",
                &sum("sha256", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
            ),
            Err(RepodataError::ChecksumMismatch { .. })
        ));
        assert!(matches!(
            verify(b"abc", &sum("md5", "900150983cd24fb0d6963f7d28e17f72")),
            Err(RepodataError::UnsupportedChecksum { .. })
        ));
        assert!(matches!(
            verify(b"abc", &sum("crc32", "00")),
            Err(RepodataError::UnsupportedChecksum { .. })
        ));
    }

    /// Whether rpmbuild and createrepo_c are here; in CI they must be.
    fn have_tools() -> bool {
        let missing: Vec<&str> = ["rpmbuild", "createrepo_c"]
            .into_iter()
            .filter(|t| {
                !Command::new(t).arg("--version").output().is_ok_and(|o| o.status.success())
            })
            .collect();
        if !missing.is_empty() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set, so this test may not be skipped: {} missing",
                missing.join(", ")
            );
            eprintln!("skipping: {} not found", missing.join(", "));
        }
        missing.is_empty()
    }

    const SPEC: &str = r#"Name: erdma-test
Epoch: 2
Version: 1.2^git3
Release: 4.al8
Summary: test
License: MIT
BuildArch: noarch
Requires: libibverbs >= 44.0
Requires: librdmacm = 1:44.0-2
Requires(post): /bin/sh
Requires: (libnl3 >= 3.5 or libnl)
Provides: erdma-test-virtual = 7
Provides: erdma-extra
Obsoletes: erdma-old < 2.0
Conflicts: mlnx-ofa_kernel <= 5.8
%description
test

%package -n erdma-test-utils
Summary: tools
Requires: erdma-test = %{epoch}:%{version}-%{release}
%description -n erdma-test-utils
tools

%install
mkdir -p %{buildroot}/usr/bin %{buildroot}/etc/erdma %{buildroot}/usr/share/doc/erdma-test
echo 'echo hi' > %{buildroot}/usr/bin/erdma-hello
chmod 755 %{buildroot}/usr/bin/erdma-hello
echo 'x=1' > %{buildroot}/etc/erdma/erdma.conf
echo doc > %{buildroot}/usr/share/doc/erdma-test/README
echo u > %{buildroot}/usr/bin/erdma-util

%post
true

%files
/usr/bin/erdma-hello
%config /etc/erdma/erdma.conf
%dir /etc/erdma
/usr/share/doc/erdma-test/README

%files -n erdma-test-utils
/usr/bin/erdma-util
"#;

    fn run(cmd: &mut Command) {
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Builds rpms with rpmbuild, indexes them with createrepo_c (gz, xz, zstd) and reads
    /// the metadata back.
    #[test]
    fn reads_createrepo_c_output() {
        if !have_tools() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("top");
        std::fs::write(tmp.path().join("t.spec"), SPEC).unwrap();
        run(Command::new("rpmbuild")
            .arg("--define")
            .arg(format!("_topdir {}", top.display()))
            .args(["--quiet", "-bb"])
            .arg(tmp.path().join("t.spec")));
        let rpms = top.join("RPMS/noarch");
        for compress in [None, Some("xz"), Some("zstd")] {
            let repo = tmp.path().join(format!("repo-{}", compress.unwrap_or("gz")));
            std::fs::create_dir_all(repo.join("Packages")).unwrap();
            for f in std::fs::read_dir(&rpms).unwrap() {
                let f = f.unwrap().path();
                std::fs::copy(&f, repo.join("Packages").join(f.file_name().unwrap())).unwrap();
            }
            let mut cmd = Command::new("createrepo_c");
            cmd.arg("--quiet");
            if let Some(c) = compress {
                cmd.arg(format!("--general-compress-type={c}"));
            }
            let out = cmd.arg(&repo).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() && err.contains("Unsupported compression type") {
                // createrepo_c writes zstd from 0.20 on; Debian 12 has 0.17.
                eprintln!("createrepo_c here cannot write {compress:?}: {err}");
                continue;
            }
            assert!(out.status.success(), "{cmd:?}: {err}");
            check_repo(&repo, compress);
        }
    }

    fn check_repo(repo: &Path, compress: Option<&str>) {
        let md = parse_repomd(&std::fs::read(repo.join("repodata/repomd.xml")).unwrap()).unwrap();
        let primary = md.primary().unwrap();
        let ext = match compress {
            None => ".gz",
            Some("xz") => ".xz",
            _ => ".zst",
        };
        assert!(
            primary.location.starts_with("repodata/")
                && primary.location.ends_with(&format!("primary.xml{ext}")),
            "{}",
            primary.location
        );
        let sum = primary.checksum.clone().unwrap();
        assert_eq!(sum.kind, "sha256");
        let bytes = std::fs::read(repo.join(&primary.location)).unwrap();
        assert_eq!(primary.size, Some(bytes.len() as u64));
        verify(&bytes, &sum).unwrap();
        assert!(md.get("filelists").is_some() && md.get("other").is_some());
        let xml = decompress(&primary.location, &bytes, 1 << 24, 100).unwrap();
        assert_eq!(primary.open_size, Some(xml.len() as u64));
        verify(&xml, primary.open_checksum.as_ref().unwrap()).unwrap();
        let mut pkgs = parse_primary(xml.as_slice(), "local").unwrap();
        pkgs.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(
            pkgs.iter().map(PackageMeta::nevra).collect::<Vec<_>>(),
            ["erdma-test-2:1.2^git3-4.al8.noarch", "erdma-test-utils-2:1.2^git3-4.al8.noarch"]
        );
        let (main, utils) = (&pkgs[0], &pkgs[1]);
        let texts = |v: &[Dep]| v.iter().map(|d| d.to_string()).collect::<Vec<_>>();
        // createrepo_c drops a package's requires on what it provides itself and on rpmlib().
        let mut req = texts(&main.requires);
        req.sort();
        assert_eq!(
            req,
            ["(libnl3 >= 3.5 or libnl)", "/bin/sh", "libibverbs >= 44.0", "librdmacm = 1:44.0-2"]
        );
        assert!(main.requires.iter().find(|d| d.name == "/bin/sh").unwrap().pre);
        let mut prov = texts(&main.provides);
        prov.sort();
        // `config(NAME)` is rpm's automatic provide for a package with %config files.
        assert_eq!(
            prov,
            [
                "config(erdma-test) = 2:1.2^git3-4.al8",
                "erdma-extra",
                "erdma-test = 2:1.2^git3-4.al8",
                "erdma-test-virtual = 7"
            ]
        );
        assert_eq!(texts(&main.obsoletes), ["erdma-old < 2.0"]);
        assert_eq!(texts(&main.conflicts), ["mlnx-ofa_kernel <= 5.8"]);
        // primary.xml lists /etc and bin files only, not /usr/share.
        let mut files = main.files.clone();
        files.sort();
        assert_eq!(files, ["/etc/erdma", "/etc/erdma/erdma.conf", "/usr/bin/erdma-hello"]);
        assert_eq!(texts(&utils.requires), ["erdma-test = 2:1.2^git3-4.al8"]);
        assert_eq!(utils.files, ["/usr/bin/erdma-util"]);
        let loc = main.location.as_deref().unwrap();
        assert_eq!(loc, "Packages/erdma-test-1.2^git3-4.al8.noarch.rpm");
        let rpm = std::fs::read(repo.join(loc)).unwrap();
        assert_eq!(main.size, rpm.len() as u64);
        verify(&rpm, main.checksum.as_ref().unwrap()).unwrap();
    }
}
