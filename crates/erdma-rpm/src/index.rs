//! A repository's `primary.xml` as an index of names, so that a build parses only the packages
//! a resolution can reach: EL's BaseOS and AppStream hold tens of thousands of packages and
//! tens of MB of XML, and `dnf install rdma-core` needs a few hundred of them.
//!
//! For each package the index keeps its name, the names it provides (its own, its `Provides`,
//! the files `primary.xml` lists) and the names it asks for (`Requires`, `Recommends`, the
//! names inside rich dependencies), and where its `<package>` element lies in the XML. The
//! names are sorted once, so that looking one up is a binary search and reading the index back
//! is a copy. [`select`] walks from the names a build starts with (what it installs, what
//! the image has and needs) to every package that provides a name some reached package asks
//! for, and parses only those: the resolver sees every package that could answer any question
//! it asks (a superset: it still chooses as dnf would among them).
//!
//! The index is kept between builds beside the XML it points into (`<checksum>.kept-N`, named
//! by the checksum the repository's `repomd.xml` gives its `primary`, which the signature
//! covers); [`erdma_limits::kept`] says which kept files are read back.
use std::collections::HashSet;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::repodata::{self, RepodataError};
use crate::version::parse_rich;
use crate::PackageMeta;

/// The kept form's version: part of its file name, so that a new form never reads an old one.
pub const KEPT_FORMAT: u32 = 1;
const MAGIC: &[u8; 8] = b"ERDMARI1";
/// The kept file's header: the magic and the XML's length.
const HEADER: u64 = 16;

/// Where the packages' XML is.
enum Xml {
    /// A file, the XML starting at the offset.
    File(File, u64),
    #[cfg(test)]
    Memory(Vec<u8>),
}

/// One package of the index.
#[derive(Clone, Copy)]
struct Entry {
    /// Its `<package>` element in the XML.
    at: u64,
    len: u32,
    /// Its name (a string id).
    name: u32,
    /// Its asked-for names: `wanted[wanted_from..next entry's wanted_from]`.
    wanted_from: u32,
}

/// A repository's packages as names (see the module's documentation).
pub struct PrimaryIndex {
    /// The names, sorted, without repeats: `strings[string_at[i]..string_at[i + 1]]`. One
    /// string, checked to be UTF-8 once, where a check per name cost more than the lookups.
    strings: String,
    string_at: Vec<u32>,
    /// The packages that provide name `i`: `providers[provided_at[i]..provided_at[i + 1]]`.
    provided_at: Vec<u32>,
    providers: Vec<u32>,
    entries: Vec<Entry>,
    wanted: Vec<u32>,
    xml: Xml,
}

/// The names a package asks for: its `Requires` and `Recommends`, a rich dependency's atoms
/// (every word of one that does not parse: more names only make the selection larger).
pub fn asked_names(p: &PackageMeta, mut each: impl FnMut(&str)) {
    for d in p.requires.iter().chain(&p.recommends) {
        if !d.is_rich() {
            each(&d.name);
            continue;
        }
        match parse_rich(&d.name) {
            Ok(rich) => rich.atoms().iter().for_each(|a| each(&a.name)),
            Err(_) => d
                .name
                .split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ',')
                .filter(|w| !w.is_empty())
                .for_each(&mut each),
        }
    }
}

/// How many distinct names an XML of `size` bytes is likely to hold: Rocky 9's BaseOS has one
/// per 144 bytes, its AppStream one per 246 (packages there list fewer files). At most 128 Ki
/// names, whatever a repository says its size is: 256 Ki buckets of 32 bytes, 8 MiB reserved
/// and touched only as names come (the table grows past it as it would have).
const MAX_NAMES_AHEAD: usize = 1 << 17;

fn names_for(size: u64) -> usize {
    usize::try_from(size / 144).unwrap_or(usize::MAX).min(MAX_NAMES_AHEAD)
}

/// Names while the index is built: each string once, numbered in order of first sight. One
/// lookup per name (hashed once, the key allocated only when new): most names of a
/// `primary.xml` are file paths seen once. std's SipHash with a random key, as for any map of
/// names a repository chooses.
struct Interner {
    ids: hashbrown::HashMap<String, u32, std::hash::RandomState>,
}

impl Interner {
    /// Room for `n` names from the start: the table grows otherwise by doubling, hashing every
    /// name again each time (a tenth of indexing Rocky 9's AppStream).
    fn with_capacity(n: usize) -> Interner {
        Interner { ids: hashbrown::HashMap::with_capacity_and_hasher(n, Default::default()) }
    }

    fn id(&mut self, s: &str) -> u32 {
        let next = self.ids.len() as u32;
        *self.ids.entry_ref(s).or_insert(next)
    }

    /// The names by id.
    fn into_names(self) -> Vec<String> {
        let mut names = vec![String::new(); self.ids.len()];
        for (name, id) in self.ids {
            names[id as usize] = name;
        }
        names
    }
}

impl PrimaryIndex {
    /// Reads a decompressed `primary.xml` from `input` once: the index is built while the
    /// XML is copied to `keep` (the kept file, written whole or not at all) or, without one or
    /// when it cannot be written, to an unnamed temporary file. `input` is a
    /// [`repodata::decompressor`] of `name` bounded at `limit` (for its errors); `origin` as
    /// for [`repodata::for_each_package`]. `expected_size`, the XML's size where `repomd.xml`
    /// gives it (`open-size`), sizes the table of names up front; it bounds nothing.
    pub fn build(
        input: impl Read,
        name: &str,
        limit: u64,
        origin: &str,
        keep: Option<&Path>,
        expected_size: Option<u64>,
    ) -> Result<PrimaryIndex, RepodataError> {
        let io = |source: std::io::Error| RepodataError::Io { file: "primary.xml", source };
        let mut named = keep.and_then(|path| {
            let dir = path.parent()?;
            std::fs::create_dir_all(dir).ok()?;
            tempfile::NamedTempFile::new_in(dir).ok()
        });
        let mut file = match &named {
            Some(tmp) => tmp.reopen().map_err(io)?,
            None => tempfile::tempfile().map_err(io)?,
        };
        file.write_all(MAGIC).map_err(io)?;
        file.write_all(&0u64.to_le_bytes()).map_err(io)?;
        let mut interner = Interner::with_capacity(names_for(expected_size.unwrap_or(0)));
        let mut entries: Vec<Entry> = Vec::new();
        let mut provided: Vec<(u32, u32)> = Vec::new();
        let mut wanted: Vec<u32> = Vec::new();
        let xml_len = {
            let mut tee = Tee {
                input,
                copy: BufWriter::with_capacity(1 << 16, &mut file),
                n: 0,
                failed: None,
            };
            let mut reader = BufReader::with_capacity(1 << 16, &mut tee);
            let parsed = repodata::for_each_package_at(&mut reader, origin, &mut |p, at| {
                let id = entries.len() as u32;
                let name = interner.id(&p.name);
                provided.push((name, id));
                for d in &p.provides {
                    provided.push((interner.id(&d.name), id));
                }
                for f in &p.files {
                    provided.push((interner.id(f), id));
                }
                let wanted_from = wanted.len() as u32;
                asked_names(&p, |n| wanted.push(interner.id(n)));
                let len =
                    u32::try_from(at.end - at.start).map_err(|_| RepodataError::Malformed {
                        file: "primary.xml",
                        reason: format!("package {} is over 4 GiB of XML", p.name),
                    })?;
                entries.push(Entry { at: at.start, len, name, wanted_from });
                Ok(())
            });
            // What the parser left unread (after `</metadata>`) is copied too.
            let rest = parsed.and_then(|()| {
                std::io::copy(&mut reader, &mut std::io::sink()).map(drop).map_err(io)
            });
            drop(reader);
            if let Some(e) = tee.failed.take() {
                return Err(repodata::read_error(name, limit, e));
            }
            rest?;
            tee.copy.flush().map_err(io)?;
            tee.n
        };
        // Names sorted: ids renumbered by rank.
        let names = interner.into_names();
        let mut order: Vec<u32> = (0..names.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| names[a as usize].cmp(&names[b as usize]));
        let mut rank = vec![0u32; order.len()];
        let mut strings = String::new();
        let mut string_at = Vec::with_capacity(order.len() + 1);
        for (r, &old) in order.iter().enumerate() {
            rank[old as usize] = r as u32;
            string_at.push(strings.len() as u32);
            strings.push_str(&names[old as usize]);
        }
        string_at.push(strings.len() as u32);
        drop(names);
        for e in &mut entries {
            e.name = rank[e.name as usize];
        }
        for w in &mut wanted {
            *w = rank[*w as usize];
        }
        let mut provided: Vec<(u32, u32)> =
            provided.into_iter().map(|(s, p)| (rank[s as usize], p)).collect();
        provided.sort_unstable();
        provided.dedup();
        let mut provided_at = Vec::with_capacity(string_at.len());
        let mut providers = Vec::with_capacity(provided.len());
        let mut next = 0;
        for s in 0..order.len() as u32 {
            provided_at.push(providers.len() as u32);
            while next < provided.len() && provided[next].0 == s {
                providers.push(provided[next].1);
                next += 1;
            }
        }
        provided_at.push(providers.len() as u32);
        let index = PrimaryIndex {
            strings,
            string_at,
            provided_at,
            providers,
            entries,
            wanted,
            xml: Xml::File(file.try_clone().map_err(io)?, HEADER),
        };
        let mut f = &file;
        (|| {
            f.seek(SeekFrom::Start(8))?;
            f.write_all(&xml_len.to_le_bytes())?;
            f.seek(SeekFrom::Start(HEADER + xml_len))?;
            let mut w = BufWriter::new(&mut f);
            index.write_tables(&mut w)?;
            w.flush()
        })()
        .map_err(io)?;
        if let (Some(tmp), Some(path)) = (named.take(), keep) {
            // Best effort: a copy that cannot be kept costs a download and a parse next time.
            let _ = tmp.persist(path);
        }
        Ok(index)
    }

    /// The tables after the XML: counts, then each table, then the tables' length.
    fn write_tables(&self, w: &mut impl Write) -> std::io::Result<()> {
        let mut n = 0u64;
        let mut put = |w: &mut dyn Write, b: &[u8]| -> std::io::Result<()> {
            n += b.len() as u64;
            w.write_all(b)
        };
        let u32s = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        for count in [
            self.strings.len(),
            self.string_at.len(),
            self.providers.len(),
            self.entries.len(),
            self.wanted.len(),
        ] {
            put(w, &(count as u64).to_le_bytes())?;
        }
        put(w, self.strings.as_bytes())?;
        put(w, &u32s(&self.string_at))?;
        put(w, &u32s(&self.provided_at))?;
        put(w, &u32s(&self.providers))?;
        for e in &self.entries {
            put(w, &e.at.to_le_bytes())?;
            put(w, &e.len.to_le_bytes())?;
            put(w, &e.name.to_le_bytes())?;
            put(w, &e.wanted_from.to_le_bytes())?;
        }
        put(w, &u32s(&self.wanted))?;
        w.write_all(&n.to_le_bytes())
    }

    /// Reads a kept index back from `file` (written by [`PrimaryIndex::build`]), checking
    /// that every offset and id lies within what it points into and that the names are sorted.
    pub fn read_kept(mut file: File) -> Result<PrimaryIndex, String> {
        let len = file.metadata().map_err(|e| e.to_string())?.len();
        let mut head = [0u8; HEADER as usize];
        file.read_exact(&mut head).map_err(|e| e.to_string())?;
        if &head[..8] != MAGIC {
            return Err("not a kept index".into());
        }
        let xml_len = u64::from_le_bytes(head[8..].try_into().expect("8 bytes"));
        let tables_at = HEADER.checked_add(xml_len).filter(|&t| t + 8 <= len).ok_or("truncated")?;
        file.seek(SeekFrom::Start(tables_at)).map_err(|e| e.to_string())?;
        let mut tables = Vec::with_capacity((len - tables_at) as usize);
        file.read_to_end(&mut tables).map_err(|e| e.to_string())?;
        let (body, tail) = tables.split_at(tables.len() - 8);
        if u64::from_le_bytes(tail.try_into().expect("8 bytes")) != body.len() as u64 {
            return Err("truncated".into());
        }
        let mut r = Cursor { b: body, at: 0 };
        let mut counts = [0usize; 5];
        for c in &mut counts {
            *c = usize::try_from(r.u64()?).map_err(|_| "a count is too large")?;
        }
        let [n_bytes, n_strings_at, n_providers, n_entries, n_wanted] = counts;
        let strings =
            String::from_utf8(r.take(n_bytes)?.to_vec()).map_err(|_| "a name is not UTF-8")?;
        let string_at = r.u32s(n_strings_at)?;
        let provided_at = r.u32s(n_strings_at)?;
        let providers = r.u32s(n_providers)?;
        let mut entries = Vec::with_capacity(n_entries.min(body.len() / 20));
        for _ in 0..n_entries {
            let at = r.u64()?;
            let (len, name, wanted_from) = (r.u32()?, r.u32()?, r.u32()?);
            entries.push(Entry { at, len, name, wanted_from });
        }
        let wanted = r.u32s(n_wanted)?;
        if r.at != body.len() {
            return Err("trailing bytes".into());
        }
        let n_strings = string_at.len().checked_sub(1).ok_or("no name table")?;
        let ascending = |v: &[u32], end: usize| {
            v.first() == Some(&0)
                && v.windows(2).all(|w| w[0] <= w[1])
                && v.last().map(|&l| l as usize) == Some(end)
        };
        if !ascending(&string_at, strings.len())
            || !ascending(&provided_at, providers.len())
            || providers.iter().any(|&p| p as usize >= entries.len())
            || wanted.iter().any(|&w| w as usize >= n_strings)
        {
            return Err("an offset or id out of range".into());
        }
        let index = PrimaryIndex {
            strings,
            string_at,
            provided_at,
            providers,
            entries,
            wanted,
            xml: Xml::File(file, HEADER),
        };
        let mut last_wanted = 0;
        for e in &index.entries {
            if e.name as usize >= n_strings
                || e.wanted_from < last_wanted
                || e.wanted_from as usize > index.wanted.len()
                || e.at.checked_add(u64::from(e.len)).is_none_or(|end| end > xml_len)
            {
                return Err("an offset or id out of range".into());
            }
            last_wanted = e.wanted_from;
        }
        for i in 1..n_strings {
            // As bytes: UTF-8 orders as its bytes do, and a name split inside a character
            // (which [`PrimaryIndex::string`] reads as empty) is still compared as written.
            if index.name_bytes(i as u32 - 1) >= index.name_bytes(i as u32) {
                return Err("the names are not sorted".into());
            }
        }
        Ok(index)
    }

    /// How many packages the repository has.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Name `i`. Names are checked to be UTF-8 and split at offsets the index gives, which
    /// [`PrimaryIndex::read_kept`] checked; a split inside a character reads as empty.
    fn string(&self, i: u32) -> &str {
        let (a, b) = self.name_span(i);
        self.strings.get(a..b).unwrap_or("")
    }

    fn name_bytes(&self, i: u32) -> &[u8] {
        let (a, b) = self.name_span(i);
        &self.strings.as_bytes()[a..b]
    }

    fn name_span(&self, i: u32) -> (usize, usize) {
        (self.string_at[i as usize] as usize, self.string_at[i as usize + 1] as usize)
    }

    fn find(&self, name: &str) -> Option<u32> {
        let (mut lo, mut hi) = (0u32, self.string_at.len() as u32 - 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.string(mid).cmp(name) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    /// The packages that provide `name` (as their name, a `Provides` or a listed file).
    fn providers_of(&self, name: &str) -> &[u32] {
        match self.find(name) {
            Some(i) => {
                &self.providers[self.provided_at[i as usize] as usize
                    ..self.provided_at[i as usize + 1] as usize]
            }
            None => &[],
        }
    }

    /// The names package `p` asks for.
    fn wanted_by(&self, p: u32) -> impl Iterator<Item = &str> {
        let from = self.entries[p as usize].wanted_from as usize;
        let to =
            self.entries.get(p as usize + 1).map_or(self.wanted.len(), |e| e.wanted_from as usize);
        self.wanted[from..to].iter().map(|&w| self.string(w))
    }

    /// The `<package>` elements of `which` (ascending), parsed, each checked to be the
    /// package the index names.
    fn parse(&self, which: &[u32], origin: &str) -> Result<Vec<PackageMeta>, RepodataError> {
        let mut out = Vec::with_capacity(which.len());
        let mut buf = Vec::new();
        for &p in which {
            let e = self.entries[p as usize];
            buf.resize(e.len as usize, 0);
            match &self.xml {
                Xml::File(file, base) => {
                    use std::os::unix::fs::FileExt;
                    file.read_exact_at(&mut buf, base + e.at)
                        .map_err(|source| RepodataError::Io { file: "primary.xml", source })?;
                }
                #[cfg(test)]
                Xml::Memory(xml) => buf.copy_from_slice(&xml[e.at as usize..][..e.len as usize]),
            }
            let mut one = Vec::with_capacity(1);
            repodata::for_each_package(&buf[..], origin, &mut |m| {
                one.push(m);
                Ok(())
            })?;
            match one.pop() {
                Some(m) if one.is_empty() && m.name == self.string(e.name) => out.push(m),
                _ => {
                    return Err(RepodataError::Malformed {
                        file: "primary.xml",
                        reason: format!(
                            "the kept index does not match its XML at package {}",
                            self.string(e.name)
                        ),
                    })
                }
            }
        }
        Ok(out)
    }
}

/// Reads `input` while copying what is read to `copy`; the input's own error is kept in
/// `failed` (the XML reader sees only that the input failed).
struct Tee<R, W> {
    input: R,
    copy: W,
    n: u64,
    failed: Option<std::io::Error>,
}

impl<R: Read, W: Write> Read for Tee<R, W> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = match self.input.read(buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Err(e),
            Err(e) => {
                self.failed = Some(e);
                return Err(std::io::Error::other("the metadata could not be read"));
            }
        };
        self.copy.write_all(&buf[..n])?;
        self.n += n as u64;
        Ok(n)
    }
}

/// Reads a kept index's tables.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or("truncated")?;
        let out = &self.b[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u32s(&mut self, n: usize) -> Result<Vec<u32>, String> {
        let bytes = self.take(n.checked_mul(4).ok_or("a count is too large")?)?;
        Ok(bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4"))).collect())
    }
}

/// The packages of each index (with its origin) that a resolution starting from `seeds` can
/// reach, parsed: every package that provides a seed, and, for every package reached, every
/// package that provides a name it asks for or has its name. In each repository's order.
pub fn select<'a>(
    indices: &[(&PrimaryIndex, &str)],
    seeds: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<Vec<PackageMeta>>, RepodataError> {
    let mut reached: Vec<Vec<bool>> = indices.iter().map(|(i, _)| vec![false; i.len()]).collect();
    let mut looked: HashSet<String> = HashSet::new();
    let mut names: Vec<String> = seeds.into_iter().map(str::to_string).collect();
    while let Some(name) = names.pop() {
        if !looked.insert(name.clone()) {
            continue;
        }
        for (r, (index, _)) in indices.iter().enumerate() {
            for &p in index.providers_of(&name) {
                if std::mem::replace(&mut reached[r][p as usize], true) {
                    continue;
                }
                names.push(index.string(index.entries[p as usize].name).to_string());
                names.extend(
                    index.wanted_by(p).filter(|w| !looked.contains(*w)).map(str::to_string),
                );
            }
        }
    }
    indices
        .iter()
        .zip(&reached)
        .map(|((index, origin), reached)| {
            let which: Vec<u32> =
                (0..index.len() as u32).filter(|&p| reached[p as usize]).collect();
            index.parse(&which, origin)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const XML: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<metadata xmlns="http://linux.duke.edu/metadata/common" xmlns:rpm="http://linux.duke.edu/metadata/rpm" packages="5">
<package type="rpm"><name>rdma-core</name><arch>x86_64</arch><version epoch="0" ver="46.0" rel="1.el9"/><checksum type="sha256" pkgid="YES">aa</checksum><location href="Packages/r/rdma-core.rpm"/><format><rpm:provides><rpm:entry name="rdma-core" flags="EQ" epoch="0" ver="46.0" rel="1.el9"/></rpm:provides><rpm:requires><rpm:entry name="libnl3(x86-64)"/><rpm:entry name="/usr/bin/sh"/><rpm:entry name="(pciutils if kernel)"/></rpm:requires></format></package>
<package type="rpm"><name>libnl3</name><arch>x86_64</arch><version epoch="0" ver="3.9.0" rel="1.el9"/><location href="Packages/l/libnl3.rpm"/><format><rpm:provides><rpm:entry name="libnl3(x86-64)"/><rpm:entry name="libnl-3.so.200()(64bit)"/></rpm:provides><rpm:requires><rpm:entry name="libc.so.6()(64bit)"/></rpm:requires></format></package>
<package type="rpm"><name>bash</name><arch>x86_64</arch><version epoch="0" ver="5.1.8" rel="9.el9"/><location href="Packages/b/bash.rpm"/><format><rpm:requires><rpm:entry name="filesystem"/></rpm:requires><file>/usr/bin/sh</file></format></package>
<package type="rpm"><name>pciutils</name><arch>x86_64</arch><version epoch="0" ver="3.7.0" rel="5.el9"/><location href="Packages/p/pciutils.rpm"/></package>
<package type="rpm"><name>unrelated</name><arch>noarch</arch><version epoch="0" ver="1" rel="1"/><location href="Packages/u/unrelated.rpm"/><format><rpm:requires><rpm:entry name="rdma-core"/></rpm:requires></format></package>
</metadata>
"#;

    fn built(keep: Option<&Path>) -> PrimaryIndex {
        PrimaryIndex::build(XML.as_bytes(), "primary.xml", 1 << 20, "repo", keep, None).unwrap()
    }

    fn names(v: &[PackageMeta]) -> Vec<&str> {
        v.iter().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn selects_what_a_resolution_can_reach() {
        let index = built(None);
        assert_eq!(index.len(), 5);
        let got = select(&[(&index, "repo")], ["rdma-core"]).unwrap();
        // libnl3 by a provide, bash by a file, pciutils from inside a rich dependency;
        // `unrelated` asks for rdma-core but nothing reached asks for it.
        assert_eq!(names(&got[0]), ["rdma-core", "libnl3", "bash", "pciutils"]);
        let all: Vec<PackageMeta> = repodata::parse_primary(XML.as_bytes(), "repo").unwrap();
        for p in &got[0] {
            let whole = all.iter().find(|q| q.name == p.name).unwrap();
            assert_eq!(format!("{p:?}"), format!("{whole:?}"), "parsed alone as in the whole");
        }
        assert!(select(&[(&index, "repo")], ["nothing"]).unwrap()[0].is_empty());
        // The size repomd.xml gives only sizes the table of names: none, a byte, or more than
        // any file (a hostile repository's word), the same index and the same selection.
        assert_eq!((names_for(0), names_for(144 * 1000)), (0, 1000));
        assert_eq!(names_for(u64::MAX), MAX_NAMES_AHEAD);
        for size in [Some(1), Some(u64::MAX)] {
            let sized =
                PrimaryIndex::build(XML.as_bytes(), "primary.xml", 1 << 20, "repo", None, size)
                    .unwrap();
            let again = select(&[(&sized, "repo")], ["rdma-core"]).unwrap();
            assert_eq!(format!("{again:?}"), format!("{got:?}"), "{size:?}");
        }
    }

    #[test]
    fn names_reach_across_repositories() {
        let a = PrimaryIndex::build(
            XML.replace("<name>libnl3</name>", "<name>libnl3-other</name>")
                .replace(
                    "libnl3(x86-64)\"/><rpm:entry name=\"libnl-3",
                    "x\"/><rpm:entry name=\"libnl-3",
                )
                .as_bytes(),
            "primary.xml",
            1 << 20,
            "a",
            None,
            None,
        )
        .unwrap();
        let b_xml = XML.split("<package").nth(2).unwrap();
        let b = PrimaryIndex::build(
            format!("<metadata><package{}</metadata>", b_xml.trim_end_matches("</metadata>\n"))
                .as_bytes(),
            "primary.xml",
            1 << 20,
            "b",
            None,
            None,
        )
        .unwrap();
        let got = select(&[(&a, "a"), (&b, "b")], ["rdma-core"]).unwrap();
        assert_eq!(names(&got[0]), ["rdma-core", "bash", "pciutils"]);
        assert_eq!(names(&got[1]), ["libnl3"]);
        assert_eq!(got[1][0].origin, "b");
    }

    #[test]
    fn kept_index_reads_back_and_refuses_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.kept-1");
        let first = built(Some(&path));
        let kept = std::fs::read(&path).unwrap();
        assert_eq!(&kept[..8], MAGIC);
        assert_eq!(&kept[16..16 + XML.len()], XML.as_bytes(), "the XML is kept as read");
        let back = PrimaryIndex::read_kept(File::open(&path).unwrap()).unwrap();
        let want = select(&[(&first, "repo")], ["rdma-core"]).unwrap();
        let got = select(&[(&back, "repo")], ["rdma-core"]).unwrap();
        assert_eq!(format!("{got:?}"), format!("{want:?}"));
        // Every truncation is refused; no flipped byte of the tables panics, and one that
        // reads back still parses only whole packages or fails.
        let tables = 16 + XML.len();
        for cut in 0..kept.len() {
            std::fs::write(&path, &kept[..cut]).unwrap();
            assert!(PrimaryIndex::read_kept(File::open(&path).unwrap()).is_err(), "cut at {cut}");
        }
        for i in tables..kept.len() {
            let mut bad = kept.clone();
            bad[i] ^= 0x41;
            std::fs::write(&path, &bad).unwrap();
            if let Ok(index) = PrimaryIndex::read_kept(File::open(&path).unwrap()) {
                let _ = select(&[(&index, "repo")], ["rdma-core", "bash", "unrelated"]);
            }
        }
    }

    #[test]
    fn parse_checks_the_xml_against_the_index() {
        let mut index = built(None);
        let Xml::File(f, _) = &index.xml else { unreachable!() };
        let mut xml = vec![0; XML.len()];
        use std::os::unix::fs::FileExt;
        f.read_exact_at(&mut xml, HEADER).unwrap();
        assert_eq!(xml, XML.as_bytes());
        index.xml = Xml::Memory(XML.replace("<name>libnl3</name>", "<name>libnl4</name>").into());
        let e = select(&[(&index, "repo")], ["rdma-core"]).unwrap_err();
        assert!(e.to_string().contains("does not match"), "{e}");
    }
}
