//! Berkeley DB hash and btree database files, read and written without libdb.
//!
//! EL7, EL8 and Alibaba Cloud Linux 3 keep rpm's database in Berkeley DB files: `Packages` is a
//! `DB_HASH` database (key: the 4-byte header instance, value: the header blob), every index
//! (`Name`, `Basenames`, `Providename`, …) a `DB_BTREE` (rpm's `lib/backend/db3.c`: `dbtype =
//! (rpmtag == RPMDBI_PACKAGES) ? DB_HASH : DB_BTREE`, no page size, no `DB_DUP`, no checksums).
//! All three ship libdb 5.3, whose on-disk format is hash version 9 and btree version 9
//! (`src/dbinc/db.in`: `DB_HASHVERSION`, `DB_BTREEVERSION`).
//!
//! The layout follows libdb 5.3's `src/dbinc/db_page.h` (page header, `HKEYDATA`, `HOFFPAGE`,
//! `BKEYDATA`, `BOVERFLOW`, `BINTERNAL`, `HMETA`, `BTMETA`), `src/hash/hash_open.c`
//! (`__ham_init_meta`: bucket pages, masks, `spares[]`), `src/hash/hash_func.c` (`__ham_func5`),
//! `src/btree/btree.h` (`B_MINKEY_TO_OVFLSIZE`) and `src/btree/bt_split.c` (internal keys,
//! `__bam_defpfx` prefixes), checked against files Debian 11's rpm 4.16 (libdb 5.3.28) wrote:
//! page size 4096 (the file system's block size, as libdb picks when none is set), fill factor
//! 0, LSNs "not logged" (`{0, 1}`), free list empty, key and record counts 0.
//!
//! Files are written little-endian (the byte order of x86_64 and aarch64; libdb and rpm's own
//! reader swap other files). Pages are written whole and in page order, so the same records
//! and seed always give the same bytes.
//!
//! The readers take any byte order and treat the file as hostile: every page number, offset and
//! length is checked, page chains are bounded by the page count and cycles are errors.

use std::collections::BTreeMap;

/// Page size of the files written here: what libdb 5.3 chose for rpm's files on a 4 KiB-block
/// file system (`db5.3_stat -d Packages` of a Debian 11 rpm database: 4096).
pub const PAGE_SIZE: usize = 4096;

const HASH_MAGIC: u32 = 0x0006_1561;
const BTREE_MAGIC: u32 = 0x0005_3162;
/// libdb 5.3 `DB_HASHVERSION` and `DB_BTREEVERSION`.
const HASH_VERSION: u32 = 9;
const BTREE_VERSION: u32 = 9;

// Page types (db_page.h).
const P_HASH_UNSORTED: u8 = 2;
const P_IBTREE: u8 = 3;
const P_LBTREE: u8 = 5;
const P_OVERFLOW: u8 = 7;
const P_HASHMETA: u8 = 8;
const P_BTREEMETA: u8 = 9;
const P_HASH: u8 = 13;

// Hash item types.
const H_KEYDATA: u8 = 1;
const H_DUPLICATE: u8 = 2;
const H_OFFPAGE: u8 = 3;
const H_OFFDUP: u8 = 4;

// Btree item types; the top bit marks a deleted item.
const B_KEYDATA: u8 = 1;
const B_DUPLICATE: u8 = 2;
const B_OVERFLOW: u8 = 3;
const B_DELETE: u8 = 0x80;

/// `sizeof(PAGE)` without checksum or crypto space: where the index array starts.
const PAGE_HEADER: usize = 26;
/// Size of `HOFFPAGE` and `BOVERFLOW` (both 12 bytes, already 4-aligned).
const OFFPAGE_SIZE: usize = 12;
/// `BINTERNAL` without its key bytes.
const BINTERNAL_HEADER: usize = 12;
/// `BKEYDATA` without its bytes.
const BKEYDATA_HEADER: usize = 3;
/// `DB_FILE_ID_LEN`.
const FILE_ID_LEN: usize = 20;
/// The key libdb hashes to record which hash function made a file (`hash.h`; its
/// `sizeof(CHARKEY)` counts the NUL: the meta page of an rpm 4.16 Packages file holds 0x5e688dd1).
const CHARKEY: &[u8] = b"%$sniglet^&\0";
/// `DEFMINKEYPAGE`: the btree minimum keys per page libdb uses unless told otherwise.
const BT_MINKEY: usize = 2;
/// `NCACHED`: entries of the hash meta page's `spares[]`.
const NCACHED: usize = 32;
/// `BTM_RECNO` / `DBMETA_CHKSUM`.
const BTM_RECNO: u32 = 0x002;
const DBMETA_CHKSUM: u8 = 0x01;

/// Why a Berkeley DB file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BdbError {
    #[error("file of {0} bytes is too short for a berkeley db meta page")]
    TooShort(usize),
    #[error("not a berkeley db {expected} database (magic {magic:#x})")]
    BadMagic { expected: &'static str, magic: u32 },
    #[error("unsupported berkeley db {kind} version {version}")]
    UnsupportedVersion { kind: &'static str, version: u32 },
    #[error("unsupported berkeley db page size {0}")]
    BadPageSize(u32),
    #[error("unsupported berkeley db feature: {0}")]
    Unsupported(&'static str),
    #[error("corrupt berkeley db page {pgno}: {reason}")]
    Corrupt { pgno: u32, reason: String },
}

fn corrupt(pgno: u32, reason: impl Into<String>) -> BdbError {
    BdbError::Corrupt { pgno, reason: reason.into() }
}

/// libdb's default hash function (`__ham_func5`, FNV-1 with an initial value of 0), used
/// unless an application sets `h_hash`; rpm sets none.
pub fn ham_func5(key: &[u8]) -> u32 {
    key.iter().fold(0u32, |h, &b| h.wrapping_mul(16_777_619) ^ u32::from(b))
}

/// `__db_log2`: the smallest `l` with `1 << l >= n`.
fn log2_ceil(n: u32) -> u32 {
    let mut l = 0;
    while l < 32 && (1u64 << l) < u64::from(n) {
        l += 1;
    }
    l
}

/// The 20-byte unique file id libdb keeps in the meta page (`__os_fileid` makes it from the
/// inode, device and time; ours comes from the seed, so builds are reproducible while two
/// files with different seeds never share an id in libdb's buffer pool).
pub fn file_id(seed: &[u8]) -> [u8; FILE_ID_LEN] {
    let mut id = [0u8; FILE_ID_LEN];
    for (round, chunk) in id.chunks_mut(8).enumerate() {
        // FNV-1a 64 over a per-round salt and the seed.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in b"erdma-bdb-fileid".iter().chain(std::iter::once(&(round as u8))).chain(seed) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        chunk.copy_from_slice(&h.to_le_bytes()[..chunk.len()]);
    }
    id
}

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

struct Reader<'a> {
    bytes: &'a [u8],
    big_endian: bool,
    page_size: usize,
    npages: u32,
}

impl<'a> Reader<'a> {
    /// Checks the meta page: magic (either byte order), version, page size, no encryption.
    fn open(bytes: &'a [u8], magic: u32, kind: &'static str) -> Result<(Self, &'a [u8]), BdbError> {
        if bytes.len() < 512 {
            return Err(BdbError::TooShort(bytes.len()));
        }
        let m = u32::from_le_bytes(bytes[12..16].try_into().unwrap_or_default());
        let big_endian = if m == magic {
            false
        } else if m == magic.swap_bytes() {
            true
        } else {
            return Err(BdbError::BadMagic { expected: kind, magic: m });
        };
        let mut r = Reader { bytes, big_endian, page_size: 512, npages: 1 };
        let page_size = r.u32_at(bytes, 20);
        if !page_size.is_power_of_two() || !(512..=65536).contains(&page_size) {
            return Err(BdbError::BadPageSize(page_size));
        }
        r.page_size = page_size as usize;
        if bytes.len() < r.page_size {
            return Err(BdbError::TooShort(bytes.len()));
        }
        r.npages = u32::try_from(bytes.len() / r.page_size).unwrap_or(u32::MAX);
        // encrypt_alg (24) and the checksum meta flag (26) move the index array (P_INP).
        if bytes[24] != 0 {
            return Err(BdbError::Unsupported("encrypted database"));
        }
        if bytes[26] & DBMETA_CHKSUM != 0 {
            return Err(BdbError::Unsupported("checksummed pages"));
        }
        let version = r.u32_at(bytes, 16);
        let ok = match kind {
            "hash" => (8..=10).contains(&version),
            _ => (9..=10).contains(&version),
        };
        if !ok {
            return Err(BdbError::UnsupportedVersion { kind, version });
        }
        let meta = &bytes[..r.page_size];
        Ok((r, meta))
    }

    fn u16_at(&self, p: &[u8], off: usize) -> u16 {
        let b = [p[off], p[off + 1]];
        if self.big_endian {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        }
    }

    fn u32_at(&self, p: &[u8], off: usize) -> u32 {
        let b = [p[off], p[off + 1], p[off + 2], p[off + 3]];
        if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }

    /// Page `pgno`, or `None` when it is all zeroes (a bucket page libdb allocated but never
    /// wrote: `__ham_new_file` writes only the last bucket page).
    fn page(&self, pgno: u32) -> Result<Option<&'a [u8]>, BdbError> {
        if pgno == 0 || pgno >= self.npages {
            return Err(corrupt(
                pgno,
                format!("page number out of range (file has {} pages)", self.npages),
            ));
        }
        let start = pgno as usize * self.page_size;
        let p = &self.bytes[start..start + self.page_size];
        if p[..PAGE_HEADER].iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let stored = self.u32_at(p, 8);
        if stored != pgno {
            return Err(corrupt(pgno, format!("page claims to be page {stored}")));
        }
        Ok(Some(p))
    }

    fn existing_page(&self, pgno: u32) -> Result<&'a [u8], BdbError> {
        self.page(pgno)?.ok_or_else(|| corrupt(pgno, "page is empty (all zeroes)"))
    }

    /// The index array of a page: `entries` offsets, each inside the page past the array.
    fn index(&self, pgno: u32, p: &[u8]) -> Result<Vec<usize>, BdbError> {
        let n = self.u16_at(p, 20) as usize;
        let end = PAGE_HEADER + 2 * n;
        if end > self.page_size {
            return Err(corrupt(pgno, format!("{n} entries do not fit in the page")));
        }
        (0..n)
            .map(|i| {
                let off = self.u16_at(p, PAGE_HEADER + 2 * i) as usize;
                if off < end || off >= self.page_size {
                    Err(corrupt(pgno, format!("item {i} at offset {off} outside the data area")))
                } else {
                    Ok(off)
                }
            })
            .collect()
    }

    /// An off-page item: `tlen` bytes in a chain of overflow pages starting at `pgno`.
    fn overflow(&self, from: u32, mut pgno: u32, tlen: u32) -> Result<Vec<u8>, BdbError> {
        let tlen = tlen as usize;
        if tlen > self.bytes.len() {
            return Err(corrupt(
                from,
                format!("off-page item of {tlen} bytes is larger than the file"),
            ));
        }
        let mut out = Vec::with_capacity(tlen);
        let mut steps = 0u32;
        while out.len() < tlen {
            steps += 1;
            if steps > self.npages {
                return Err(corrupt(from, "overflow chain loops"));
            }
            let p = self.existing_page(pgno)?;
            if p[25] != P_OVERFLOW {
                return Err(corrupt(
                    pgno,
                    format!("expected an overflow page, found type {}", p[25]),
                ));
            }
            // OV_LEN: the bytes this page holds, stored in hf_offset.
            let len = self.u16_at(p, 22) as usize;
            if len == 0 || PAGE_HEADER + len > self.page_size || len > tlen - out.len() {
                return Err(corrupt(pgno, format!("overflow page holds {len} bytes")));
            }
            out.extend_from_slice(&p[PAGE_HEADER..PAGE_HEADER + len]);
            pgno = self.u32_at(p, 16);
        }
        Ok(out)
    }
}

/// Every key/value pair of a hash database, bucket by bucket and along each bucket's page
/// chain (the order `db_dump` and rpm's iterator use). On-page duplicate sets give one pair
/// per duplicate.
#[allow(clippy::type_complexity)] // the signature rpmdb.rs is written against
pub fn read_hash(bytes: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>, BdbError> {
    let (r, meta) = Reader::open(bytes, HASH_MAGIC, "hash")?;
    if meta[25] != P_HASHMETA {
        return Err(corrupt(0, format!("meta page has type {}", meta[25])));
    }
    let max_bucket = r.u32_at(meta, 72);
    if max_bucket >= r.npages {
        return Err(corrupt(
            0,
            format!("max_bucket {max_bucket} beyond the file's {} pages", r.npages),
        ));
    }
    let spares: Vec<u32> = (0..NCACHED).map(|i| r.u32_at(meta, 96 + 4 * i)).collect();
    let mut visited = vec![false; r.npages as usize];
    let mut out = Vec::new();
    for bucket in 0..=max_bucket {
        let spare = spares[log2_ceil(bucket + 1) as usize];
        let mut pgno = bucket
            .checked_add(spare)
            .ok_or_else(|| corrupt(0, format!("bucket {bucket} maps past the last page")))?;
        let mut first = true;
        while pgno != 0 {
            if pgno >= r.npages {
                return Err(corrupt(pgno, format!("bucket {bucket} chain leaves the file")));
            }
            if std::mem::replace(&mut visited[pgno as usize], true) {
                return Err(corrupt(pgno, "hash page reached twice"));
            }
            let Some(p) = r.page(pgno)? else {
                if first {
                    break; // a bucket page libdb allocated but never wrote: empty
                }
                return Err(corrupt(pgno, "empty page in a bucket chain"));
            };
            first = false;
            if p[25] != P_HASH && p[25] != P_HASH_UNSORTED {
                return Err(corrupt(pgno, format!("expected a hash page, found type {}", p[25])));
            }
            let inp = r.index(pgno, p)?;
            if inp.len() % 2 != 0 {
                return Err(corrupt(pgno, "odd number of entries on a hash page"));
            }
            // Items are packed downwards in index order; each ends where the previous begins.
            let mut end = r.page_size;
            let mut items = Vec::with_capacity(inp.len());
            for (i, &off) in inp.iter().enumerate() {
                if off >= end {
                    return Err(corrupt(pgno, format!("item {i} overlaps the one before it")));
                }
                items.push(&p[off..end]);
                end = off;
            }
            for pair in items.chunks(2) {
                let key = hash_item(&r, pgno, pair[0], false)?;
                let Some(key) = key.into_iter().next() else {
                    return Err(corrupt(pgno, "empty key item"));
                };
                for value in hash_item(&r, pgno, pair[1], true)? {
                    out.push((key.clone(), value));
                }
            }
            pgno = r.u32_at(p, 16);
        }
    }
    Ok(out)
}

/// The bytes of a hash item (`HKEYDATA`, `HOFFPAGE`, or for data an on-page duplicate set).
fn hash_item(
    r: &Reader<'_>,
    pgno: u32,
    item: &[u8],
    is_data: bool,
) -> Result<Vec<Vec<u8>>, BdbError> {
    match item[0] {
        H_KEYDATA => Ok(vec![item[1..].to_vec()]),
        H_OFFPAGE => {
            if item.len() != OFFPAGE_SIZE {
                return Err(corrupt(pgno, format!("off-page item of {} bytes", item.len())));
            }
            Ok(vec![r.overflow(pgno, r.u32_at(item, 4), r.u32_at(item, 8))?])
        }
        H_DUPLICATE if is_data => {
            // len (u16), element, len (u16), repeated (db_page.h, HKEYDATA).
            let mut dups = Vec::new();
            let mut rest = &item[1..];
            while !rest.is_empty() {
                if rest.len() < 4 {
                    return Err(corrupt(pgno, "truncated duplicate set"));
                }
                let len = r.u16_at(rest, 0) as usize;
                if rest.len() < 4 + len {
                    return Err(corrupt(pgno, "truncated duplicate set"));
                }
                dups.push(rest[2..2 + len].to_vec());
                rest = &rest[4 + len..];
            }
            Ok(dups)
        }
        H_OFFDUP => Err(BdbError::Unsupported("off-page duplicate trees")),
        t => Err(corrupt(pgno, format!("unknown hash item type {t}"))),
    }
}

/// Every key/value pair of a btree database in key order (the leaf pages left to right).
#[allow(clippy::type_complexity)] // the signature rpmdb.rs is written against
pub fn read_btree(bytes: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>, BdbError> {
    let (r, meta) = Reader::open(bytes, BTREE_MAGIC, "btree")?;
    if meta[25] != P_BTREEMETA {
        return Err(corrupt(0, format!("meta page has type {}", meta[25])));
    }
    if r.u32_at(meta, 48) & BTM_RECNO != 0 {
        return Err(BdbError::Unsupported("recno databases"));
    }
    let mut visited = vec![false; r.npages as usize];
    let mut visit = |pgno: u32| -> Result<(), BdbError> {
        match visited.get_mut(pgno as usize) {
            Some(v) if !*v => {
                *v = true;
                Ok(())
            }
            Some(_) => Err(corrupt(pgno, "btree page reached twice")),
            None => Err(corrupt(pgno, "page number out of range")),
        }
    };
    // Down the left edge to the first leaf.
    let mut pgno = r.u32_at(meta, 88);
    let mut p;
    loop {
        visit(pgno)?;
        p = r.existing_page(pgno)?;
        match p[25] {
            P_LBTREE => break,
            P_IBTREE => {
                let inp = r.index(pgno, p)?;
                let Some(&off) = inp.first() else {
                    return Err(corrupt(pgno, "internal page without entries"));
                };
                if off + BINTERNAL_HEADER > r.page_size {
                    return Err(corrupt(pgno, "internal item runs off the page"));
                }
                pgno = r.u32_at(p, off + 4);
            }
            t => return Err(corrupt(pgno, format!("expected a btree page, found type {t}"))),
        }
    }
    let mut out = Vec::new();
    loop {
        let inp = r.index(pgno, p)?;
        if inp.len() % 2 != 0 {
            return Err(corrupt(pgno, "odd number of entries on a leaf page"));
        }
        for pair in inp.chunks(2) {
            let (koff, voff) = (pair[0], pair[1]);
            if koff + 3 > r.page_size || voff + 3 > r.page_size {
                return Err(corrupt(pgno, "leaf item runs off the page"));
            }
            if (p[koff + 2] | p[voff + 2]) & B_DELETE != 0 {
                continue;
            }
            let key = btree_item(&r, pgno, p, koff)?;
            let value = btree_item(&r, pgno, p, voff)?;
            out.push((key, value));
        }
        let next = r.u32_at(p, 16);
        if next == 0 {
            break;
        }
        pgno = next;
        visit(pgno)?;
        p = r.existing_page(pgno)?;
        if p[25] != P_LBTREE {
            return Err(corrupt(pgno, format!("expected a leaf page, found type {}", p[25])));
        }
    }
    Ok(out)
}

/// The bytes of a `BKEYDATA` or `BOVERFLOW` item at `off` (checked by the caller to have its
/// first 3 bytes on the page).
fn btree_item(r: &Reader<'_>, pgno: u32, p: &[u8], off: usize) -> Result<Vec<u8>, BdbError> {
    match p[off + 2] & !B_DELETE {
        B_KEYDATA => {
            let len = r.u16_at(p, off) as usize;
            let start = off + BKEYDATA_HEADER;
            if start + len > r.page_size {
                return Err(corrupt(pgno, "leaf item runs off the page"));
            }
            Ok(p[start..start + len].to_vec())
        }
        B_OVERFLOW => {
            if off + OFFPAGE_SIZE > r.page_size {
                return Err(corrupt(pgno, "overflow item runs off the page"));
            }
            r.overflow(pgno, r.u32_at(p, off + 4), r.u32_at(p, off + 8))
        }
        B_DUPLICATE => Err(BdbError::Unsupported("off-page duplicate trees")),
        t => Err(corrupt(pgno, format!("unknown btree item type {t}"))),
    }
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

/// An item as stored on a page: its bytes, or a reference to overflow pages holding them.
#[derive(Clone, Copy)]
enum Item<'a> {
    OnPage(&'a [u8]),
    OffPage(&'a [u8]),
}

/// Items longer than `limit` go to overflow pages.
fn classify(b: &[u8], limit: usize) -> Item<'_> {
    if b.len() > limit {
        Item::OffPage(b)
    } else {
        Item::OnPage(b)
    }
}

/// The pages of a file being written; page `i` is `pages[i]`.
struct Pages {
    pages: Vec<Vec<u8>>,
}

impl Pages {
    fn new(count: usize) -> Self {
        Pages { pages: vec![vec![0u8; PAGE_SIZE]; count] }
    }

    /// A new page at the end of the file.
    fn push(&mut self) -> u32 {
        self.pages.push(vec![0u8; PAGE_SIZE]);
        (self.pages.len() - 1) as u32
    }

    /// Writes `data` to a fresh chain of overflow pages (as `__db_poff` does) and returns the
    /// first page's number.
    fn overflow(&mut self, data: &[u8]) -> u32 {
        let space = PAGE_SIZE - PAGE_HEADER;
        let mut first = 0;
        let mut prev = 0u32;
        for chunk in data.chunks(space) {
            let pgno = self.push();
            if prev == 0 {
                first = pgno;
            } else {
                put32(&mut self.pages[prev as usize], 16, pgno);
            }
            let p = &mut self.pages[pgno as usize];
            // OV_REF (entries) is 1 and OV_LEN (hf_offset) the bytes held, as __db_poff sets.
            header(p, pgno, prev, 0, 1, chunk.len() as u16, 0, P_OVERFLOW);
            p[PAGE_HEADER..PAGE_HEADER + chunk.len()].copy_from_slice(chunk);
            prev = pgno;
        }
        first
    }

    fn into_bytes(self) -> Vec<u8> {
        self.pages.concat()
    }
}

fn put16(p: &mut [u8], off: usize, v: u16) {
    p[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

fn put32(p: &mut [u8], off: usize, v: u32) {
    p[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// The generic page header (`P_INIT`), with the "not logged" LSN `{0, 1}` libdb gives pages
/// of environments without logging, as rpm's are.
#[allow(clippy::too_many_arguments)]
fn header(
    p: &mut [u8],
    pgno: u32,
    prev: u32,
    next: u32,
    entries: u16,
    hf_offset: u16,
    level: u8,
    ptype: u8,
) {
    put32(p, 0, 0);
    put32(p, 4, 1);
    put32(p, 8, pgno);
    put32(p, 12, prev);
    put32(p, 16, next);
    put16(p, 20, entries);
    put16(p, 22, hf_offset);
    p[24] = level;
    p[25] = ptype;
}

/// The generic meta page header (`DBMETA33`).
fn meta_header(p: &mut [u8], magic: u32, version: u32, ptype: u8, last_pgno: u32, seed: &[u8]) {
    put32(p, 0, 0);
    put32(p, 4, 1);
    put32(p, 8, 0);
    put32(p, 12, magic);
    put32(p, 16, version);
    put32(p, 20, PAGE_SIZE as u32);
    p[24] = 0; // encrypt_alg
    p[25] = ptype;
    p[26] = 0; // metaflags: no checksums
    put32(p, 28, 0); // free list: empty
    put32(p, 32, last_pgno);
    // nparts, key_count, record_count, flags: 0, as a fresh rpm database has them.
    p[52..52 + FILE_ID_LEN].copy_from_slice(&file_id(seed));
}

/// Records sorted by key (memcmp, shorter first: libdb's `__bam_defcmp`), a repeated key
/// keeping its last value as `DB->put` without `DB_DUP` would.
fn sorted(records: &[(Vec<u8>, Vec<u8>)]) -> Vec<(&[u8], &[u8])> {
    let map: BTreeMap<&[u8], &[u8]> =
        records.iter().map(|(k, v)| (k.as_slice(), v.as_slice())).collect();
    map.into_iter().collect()
}

/// A complete hash database holding `records` (a repeated key keeps its last value), with the
/// file id derived from `seed`.
///
/// Like a file libdb made with `h_nelem` set: a power-of-two number of buckets on pages
/// 1..=N (`spares[0..=log2 N] = 1`), chosen so buckets start about half full; a bucket that
/// does not fit one page continues on chained pages after the bucket pages; items larger
/// than a quarter page (`ISBIG`) go to overflow pages. Pairs on each page are sorted by key
/// (`P_HASH` pages, libdb ≥ 4.6). Fill factor 0 (libdb then splits a bucket when it needs a
/// new page) and `nelem` the record count, as rpm's files have them.
pub fn write_hash(records: &[(Vec<u8>, Vec<u8>)], seed: &[u8]) -> Vec<u8> {
    let records = sorted(records);
    let big = PAGE_SIZE / 4; // ISBIG: MINFILL = 4
    let isize_ = |i: &Item<'_>| match i {
        Item::OnPage(b) => 1 + b.len(),
        Item::OffPage(_) => OFFPAGE_SIZE,
    };
    let pairs: Vec<(Item<'_>, Item<'_>, usize)> = records
        .iter()
        .map(|&(k, v)| {
            let (k, v) = (classify(k, big), classify(v, big));
            let size = isize_(&k) + isize_(&v) + 4;
            (k, v, size)
        })
        .collect();
    let usable = PAGE_SIZE - PAGE_HEADER;
    let total: usize = pairs.iter().map(|p| p.2).sum();
    let mut nbuckets: u32 = 2;
    while total > nbuckets as usize * usable / 2 && nbuckets < (1 << 30) {
        nbuckets *= 2;
    }
    let high_mask = nbuckets - 1;
    let low_mask = (nbuckets >> 1) - 1;

    // Pairs into buckets (sorted order kept), then onto pages.
    let mut buckets: Vec<Vec<usize>> = vec![Vec::new(); nbuckets as usize];
    for (i, &(k, _)) in records.iter().enumerate() {
        // `& high_mask`, then `& low_mask` past max_bucket: never here, as max_bucket is
        // high_mask.
        buckets[(ham_func5(k) & high_mask) as usize].push(i);
    }
    let chains: Vec<Vec<Vec<usize>>> = buckets
        .iter()
        .map(|members| {
            let mut pages = vec![Vec::new()];
            let mut used = 0;
            for &i in members {
                if used + pairs[i].2 > usable {
                    pages.push(Vec::new());
                    used = 0;
                }
                used += pairs[i].2;
                pages.last_mut().unwrap_or_else(|| unreachable!()).push(i);
            }
            pages
        })
        .collect();

    // Page numbers: meta 0, bucket b at 1 + b, chained pages next, overflow pages last.
    let chained: usize = chains.iter().map(|c| c.len() - 1).sum();
    let mut file = Pages::new(1 + nbuckets as usize + chained);
    let mut next_chained = 1 + nbuckets;
    for (b, chain) in chains.iter().enumerate() {
        let pgnos: Vec<u32> = (0..chain.len())
            .map(|j| {
                if j == 0 {
                    1 + b as u32
                } else {
                    next_chained += 1;
                    next_chained - 1
                }
            })
            .collect();
        for (j, members) in chain.iter().enumerate() {
            let pgno = pgnos[j];
            let prev = if j == 0 { 0 } else { pgnos[j - 1] };
            let next = pgnos.get(j + 1).copied().unwrap_or(0);
            // Overflow pages first: they need page numbers before the items can be written.
            let mut bytes: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(members.len());
            for &i in members {
                let (k, v, _) = pairs[i];
                bytes.push((hash_bytes(&mut file, k), hash_bytes(&mut file, v)));
            }
            let p = &mut file.pages[pgno as usize];
            let mut off = PAGE_SIZE;
            let mut index = PAGE_HEADER;
            for (k, v) in &bytes {
                for item in [k, v] {
                    off -= item.len();
                    p[off..off + item.len()].copy_from_slice(item);
                    put16(p, index, off as u16);
                    index += 2;
                }
            }
            header(p, pgno, prev, next, (2 * bytes.len()) as u16, off as u16, 0, P_HASH);
        }
    }

    let last_pgno = (file.pages.len() - 1) as u32;
    let m = &mut file.pages[0];
    meta_header(m, HASH_MAGIC, HASH_VERSION, P_HASHMETA, last_pgno, seed);
    put32(m, 72, high_mask); // max_bucket
    put32(m, 76, high_mask);
    put32(m, 80, low_mask);
    put32(m, 84, 0); // ffactor
    put32(m, 88, records.len() as u32); // nelem
    put32(m, 92, ham_func5(CHARKEY));
    for i in 0..=log2_ceil(nbuckets) as usize {
        put32(m, 96 + 4 * i, 1); // spares: every bucket page b is page 1 + b
    }
    file.into_bytes()
}

/// The bytes of a hash item (`HKEYDATA` or `HOFFPAGE`), writing its overflow pages.
fn hash_bytes(file: &mut Pages, item: Item<'_>) -> Vec<u8> {
    match item {
        Item::OnPage(b) => {
            let mut out = Vec::with_capacity(1 + b.len());
            out.push(H_KEYDATA);
            out.extend_from_slice(b);
            out
        }
        Item::OffPage(b) => {
            let pgno = file.overflow(b);
            let mut out = vec![0u8; OFFPAGE_SIZE];
            out[0] = H_OFFPAGE;
            put32(&mut out, 4, pgno);
            put32(&mut out, 8, b.len() as u32);
            out
        }
    }
}

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Largest item kept on a btree page (`B_MINKEY_TO_OVFLSIZE` with minkey 2: 1007 for 4 KiB
/// pages, as `db5.3_stat -d` of rpm's index files reports).
const fn bt_ovflsize() -> usize {
    (PAGE_SIZE - PAGE_HEADER) / (BT_MINKEY * 2) - (align4(BKEYDATA_HEADER) + 2 + 4)
}

/// On-page size of a leaf item (`BKEYDATA_SIZE` or `BOVERFLOW_SIZE`).
fn leaf_size(i: &Item<'_>) -> usize {
    match i {
        Item::OnPage(b) => align4(BKEYDATA_HEADER + b.len()),
        Item::OffPage(_) => OFFPAGE_SIZE,
    }
}

/// On-page size of an internal item (`BINTERNAL_SIZE`).
fn internal_size(i: &Item<'_>) -> usize {
    match i {
        Item::OnPage(b) => align4(BINTERNAL_HEADER + b.len()),
        Item::OffPage(_) => align4(BINTERNAL_HEADER + OFFPAGE_SIZE),
    }
}

/// `__bam_defpfx`: how many bytes of `b` tell it apart from the smaller `a`.
fn defpfx(a: &[u8], b: &[u8]) -> usize {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    if common < a.len().min(b.len()) {
        common + 1
    } else if a.len() < b.len() {
        a.len() + 1
    } else {
        b.len()
    }
}

/// One page of the tree being built: leaf pairs or internal (key, child) entries.
enum Node<'a> {
    Leaf(Vec<(Item<'a>, Item<'a>)>),
    /// Children are indexes into the level below.
    Internal(Vec<(Item<'a>, usize)>),
}

/// A complete btree database holding `records` in key order (memcmp, libdb's default
/// comparator, which rpm uses), a repeated key keeping its last value, with the file id
/// derived from `seed`.
///
/// Leaves are filled in key order and linked left to right; internal levels hold, as libdb's
/// splits leave them, an empty first key on the leftmost page of each level, `__bam_defpfx`
/// prefixes above leaves and copies of the child's first key above internal pages. The root
/// is page 1 (where libdb keeps it); items over 1007 bytes go to overflow pages.
pub fn write_btree(records: &[(Vec<u8>, Vec<u8>)], seed: &[u8]) -> Vec<u8> {
    let records = sorted(records);
    let ovfl = bt_ovflsize();
    let usable = PAGE_SIZE - PAGE_HEADER;

    // Leaves.
    let mut leaves: Vec<Vec<(Item<'_>, Item<'_>)>> = vec![Vec::new()];
    let mut used = 0;
    for &(k, v) in &records {
        let (k, v) = (classify(k, ovfl), classify(v, ovfl));
        let size = leaf_size(&k) + leaf_size(&v) + 4;
        if used + size > usable {
            leaves.push(Vec::new());
            used = 0;
        }
        used += size;
        leaves.last_mut().unwrap_or_else(|| unreachable!()).push((k, v));
    }

    // Separator keys for each leaf after the first (bt_split.c, __bam_pinsert).
    let mut levels: Vec<Vec<Node<'_>>> = Vec::new();
    let mut seps: Vec<Item<'_>> = Vec::with_capacity(leaves.len());
    for (i, leaf) in leaves.iter().enumerate() {
        let sep = if i == 0 {
            Item::OnPage(&[])
        } else {
            let (a, b) = (leaves[i - 1].last().map(|p| p.0), leaf.first().map(|p| p.0));
            match (a, b) {
                (Some(Item::OnPage(a)), Some(Item::OnPage(b))) => Item::OnPage(&b[..defpfx(a, b)]),
                (_, Some(b)) => b,
                (_, None) => Item::OnPage(&[]),
            }
        };
        seps.push(sep);
    }
    levels.push(leaves.into_iter().map(Node::Leaf).collect());

    // Internal levels until one page is left.
    while levels.last().map_or(0, Vec::len) > 1 {
        let mut pages: Vec<Vec<(Item<'_>, usize)>> = vec![Vec::new()];
        let mut used = 0;
        for (child, &sep) in seps.iter().enumerate() {
            let size = internal_size(&sep) + 2;
            if used + size > usable {
                pages.push(Vec::new());
                used = 0;
            }
            used += size;
            pages.last_mut().unwrap_or_else(|| unreachable!()).push((sep, child));
        }
        // An internal page of one entry is legal but pointless: borrow one from the left.
        let n = pages.len();
        if n > 1 && pages[n - 1].len() == 1 {
            let moved = pages[n - 2].pop().unwrap_or_else(|| unreachable!());
            pages[n - 1].insert(0, moved);
        }
        seps = pages.iter().map(|p| p[0].0).collect();
        seps[0] = Item::OnPage(&[]);
        levels.push(pages.into_iter().map(Node::Internal).collect());
    }

    // Page numbers: root 1, then the levels below it top-down, overflow pages last.
    let depth = levels.len();
    let mut pgnos: Vec<Vec<u32>> = levels.iter().map(|l| vec![0; l.len()]).collect();
    let mut next = 1u32;
    for l in (0..depth).rev() {
        for slot in pgnos[l].iter_mut() {
            *slot = next;
            next += 1;
        }
    }
    let mut file = Pages::new(next as usize);
    for (l, level) in levels.iter().enumerate() {
        for (i, node) in level.iter().enumerate() {
            let pgno = pgnos[l][i];
            let mut items: Vec<Vec<u8>> = Vec::new();
            match node {
                Node::Leaf(pairs) => {
                    for &(k, v) in pairs {
                        items.push(leaf_bytes(&mut file, k));
                        items.push(leaf_bytes(&mut file, v));
                    }
                }
                Node::Internal(entries) => {
                    for &(k, child) in entries {
                        items.push(internal_bytes(&mut file, k, pgnos[l - 1][child]));
                    }
                }
            }
            let p = &mut file.pages[pgno as usize];
            let mut off = PAGE_SIZE;
            for (j, it) in items.iter().enumerate() {
                off -= it.len();
                p[off..off + it.len()].copy_from_slice(it);
                put16(p, PAGE_HEADER + 2 * j, off as u16);
            }
            let (prev, next, ptype) = match node {
                Node::Leaf(_) => (
                    if i == 0 { 0 } else { pgnos[l][i - 1] },
                    pgnos[l].get(i + 1).copied().unwrap_or(0),
                    P_LBTREE,
                ),
                // next_pgno/prev_pgno are not kept on internal pages (db_page.h).
                Node::Internal(_) => (0, 0, P_IBTREE),
            };
            header(p, pgno, prev, next, items.len() as u16, off as u16, (l + 1) as u8, ptype);
        }
    }

    let last_pgno = (file.pages.len() - 1) as u32;
    let m = &mut file.pages[0];
    meta_header(m, BTREE_MAGIC, BTREE_VERSION, P_BTREEMETA, last_pgno, seed);
    put32(m, 76, BT_MINKEY as u32);
    put32(m, 80, 0); // re_len
    put32(m, 84, u32::from(b' ')); // re_pad, libdb's default
    put32(m, 88, 1); // root
    file.into_bytes()
}

/// A leaf item (`BKEYDATA` padded to 4 bytes, or `BOVERFLOW`), writing its overflow pages.
fn leaf_bytes(file: &mut Pages, item: Item<'_>) -> Vec<u8> {
    let mut out = vec![0u8; leaf_size(&item)];
    match item {
        Item::OnPage(b) => {
            put16(&mut out, 0, b.len() as u16);
            out[2] = B_KEYDATA;
            out[BKEYDATA_HEADER..BKEYDATA_HEADER + b.len()].copy_from_slice(b);
        }
        Item::OffPage(b) => {
            out[2] = B_OVERFLOW;
            put32(&mut out, 4, file.overflow(b));
            put32(&mut out, 8, b.len() as u32);
        }
    }
    out
}

/// An internal item (`BINTERNAL`, its key on the page or a `BOVERFLOW` to a copy of it).
fn internal_bytes(file: &mut Pages, item: Item<'_>, child: u32) -> Vec<u8> {
    let mut out = vec![0u8; internal_size(&item)];
    put32(&mut out, 4, child);
    // nrecs (8..12) stays 0: it is only kept for DB_RECNUM trees.
    match item {
        Item::OnPage(b) => {
            put16(&mut out, 0, b.len() as u16);
            out[2] = B_KEYDATA;
            out[BINTERNAL_HEADER..BINTERNAL_HEADER + b.len()].copy_from_slice(b);
        }
        Item::OffPage(b) => {
            put16(&mut out, 0, OFFPAGE_SIZE as u16);
            out[2] = B_OVERFLOW;
            let o = BINTERNAL_HEADER;
            out[o + 2] = B_OVERFLOW;
            put32(&mut out, o + 4, file.overflow(b));
            put32(&mut out, o + 8, b.len() as u32);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    type Records = Vec<(Vec<u8>, Vec<u8>)>;

    use crate::TestRng as Rng;

    /// Whether `db5.3_<tool>` runs here: `false` (with the reason printed) when it does not,
    /// a failure instead under CI, where every test must run.
    fn have_db_util(tool: &str) -> bool {
        let ok = Command::new(format!("db5.3_{tool}"))
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            assert!(
                std::env::var_os("CI").is_none(),
                "db5.3_{tool} (Debian package db5.3-util) is required under CI"
            );
            eprintln!("skipping the db5.3_{tool} check: db5.3_{tool} not found (apt-get install db5.3-util)");
        }
        ok
    }

    /// A file in the temporary directory for the db5.3 tools, removed when dropped.
    struct Scratch(PathBuf);
    impl std::ops::Deref for Scratch {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn scratch_file(name: &str, bytes: &[u8]) -> Scratch {
        let path =
            std::env::temp_dir().join(format!("erdma-bdb-test-{}-{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        Scratch(path)
    }

    /// `db5.3_verify` must call the file clean.
    fn assert_verifies(path: &Path) {
        if !have_db_util("verify") {
            return;
        }
        let out = Command::new("db5.3_verify").arg(path).output().unwrap();
        assert!(
            out.status.success(),
            "db5.3_verify {}: {}{}",
            path.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// How `db_dump -p` prints bytes (`__db_prdbt`): printable ASCII as is, `\` doubled,
    /// everything else as `\xx` in lowercase hex.
    fn dump_escape(b: &[u8]) -> String {
        let mut s = String::from(" ");
        for &c in b {
            match c {
                b'\\' => s.push_str("\\\\"),
                0x20..=0x7e => s.push(c as char),
                _ => s.push_str(&format!("\\{c:02x}")),
            }
        }
        s
    }

    /// The records `db5.3_dump -p` lists, in its order, as escaped lines; `None` when the
    /// tool is missing.
    fn dump(path: &Path) -> Option<Vec<(String, String)>> {
        if !have_db_util("dump") {
            return None;
        }
        let out = Command::new("db5.3_dump").arg("-p").arg(path).output().unwrap();
        assert!(
            out.status.success(),
            "db5.3_dump {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let body: Vec<String> = text
            .lines()
            .skip_while(|l| *l != "HEADER=END")
            .skip(1)
            .take_while(|l| *l != "DATA=END")
            .map(str::to_owned)
            .collect();
        assert_eq!(body.len() % 2, 0, "odd dump of {}", path.display());
        Some(body.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect())
    }

    fn escaped(records: &[(Vec<u8>, Vec<u8>)]) -> Vec<(String, String)> {
        records.iter().map(|(k, v)| (dump_escape(k), dump_escape(v))).collect()
    }

    fn sorted_records(mut r: Records) -> Records {
        r.sort();
        r
    }

    /// Packages-like records: 4-byte instance keys (plus some odd-sized and over-a-quarter-page
    /// keys) and values from 4 bytes to 300 KiB.
    fn hash_records(n: usize, seed: u64) -> Records {
        let mut rng = Rng(seed);
        (0..n)
            .map(|i| {
                let key = match i % 97 {
                    13 => {
                        let n = 1 + (rng.next() % 40) as usize;
                        rng.bytes(n)
                    }
                    29 => {
                        let n = 1025 + (rng.next() % 3000) as usize;
                        rng.bytes(n)
                    }
                    _ => (i as u32).to_le_bytes().to_vec(),
                };
                let len = match i % 500 {
                    7 => 300 * 1024,
                    _ => [4usize, 17, 100, 1024, 1025, 2000, 4070, 4071, 9000]
                        [(rng.next() % 9) as usize],
                };
                (key, rng.bytes(len))
            })
            .collect()
    }

    #[test]
    fn func5_and_charkey_match_libdb() {
        // h_charkey of a hash file rpm 4.16 (libdb 5.3.28) wrote.
        assert_eq!(ham_func5(CHARKEY), 0x5e68_8dd1);
        assert_eq!(bt_ovflsize(), 1007);
    }

    #[test]
    fn hash_round_trips_and_verifies() {
        for (n, seed) in [(0usize, 1u64), (1, 2), (50, 3), (2000, 4)] {
            let records = hash_records(n, seed);
            let file = write_hash(&records, format!("hash-{n}").as_bytes());
            assert_eq!(file.len() % PAGE_SIZE, 0);
            let back = read_hash(&file).unwrap();
            assert_eq!(
                sorted_records(back.clone()),
                sorted_records(records.clone()),
                "{n} records"
            );
            let path = scratch_file(&format!("hash-{n}.db"), &file);
            assert_verifies(&path);
            if let Some(listed) = dump(&path) {
                assert_eq!(listed, escaped(&back), "db5.3_dump of {n} records");
            }
        }
    }

    #[test]
    fn hash_keeps_the_last_value_of_a_repeated_key() {
        let records = vec![(b"k".to_vec(), b"first".to_vec()), (b"k".to_vec(), b"second".to_vec())];
        let back = read_hash(&write_hash(&records, b"dup")).unwrap();
        assert_eq!(back, vec![(b"k".to_vec(), b"second".to_vec())]);
    }

    #[test]
    fn btree_round_trips_and_verifies() {
        let mut rng = Rng(7);
        let mut sets: Vec<(&str, Records)> = vec![("empty", Vec::new())];
        sets.push(("one", vec![(b"bash".to_vec(), vec![1, 0, 0, 0, 0, 0, 0, 0])]));
        // rpm index values: (hdrNum u32, tagNum u32) pairs, native endian.
        let index: Records = (0..20_000u32)
            .map(|i| {
                let key = format!("/usr/share/doc/package-{:05}/file-{}", i * 7 % 20_000, i % 13)
                    .into_bytes();
                let pairs = 1 + (rng.next() % 300) as u32;
                let value = (0..pairs)
                    .flat_map(|j| [(i + j).to_le_bytes(), j.to_le_bytes()].concat())
                    .collect();
                (key, value)
            })
            .collect();
        sets.push(("index", index));
        // Keys over the overflow size, sharing long prefixes, so internal pages get overflow
        // separators.
        let big: Records = (0..600u32)
            .map(|i| {
                let mut key = vec![b'x'; 1000 + (i as usize % 5) * 300];
                key.extend_from_slice(format!("{i:06}").as_bytes());
                (key, {
                    let n = (rng.next() % 3000) as usize;
                    rng.bytes(n)
                })
            })
            .collect();
        sets.push(("big-keys", big));
        for (name, records) in sets {
            let file = write_btree(&records, name.as_bytes());
            let back = read_btree(&file).unwrap();
            assert_eq!(back, sorted_records(records.clone()), "{name}");
            let path = scratch_file(&format!("btree-{name}.db"), &file);
            assert_verifies(&path);
            if let Some(listed) = dump(&path) {
                assert_eq!(listed, escaped(&back), "db5.3_dump of {name}");
            }
        }
    }

    #[test]
    fn btree_with_many_keys_has_internal_levels() {
        let records: Records = (0..50_000u32)
            .map(|i| (format!("{i:08}").into_bytes(), i.to_le_bytes().to_vec()))
            .collect();
        let file = write_btree(&records, b"levels");
        let root = &file[PAGE_SIZE..2 * PAGE_SIZE];
        assert_eq!(root[25], P_IBTREE);
        assert!(root[24] >= 3, "root level {}", root[24]);
        assert_eq!(read_btree(&file).unwrap(), records);
    }

    #[test]
    fn writing_is_deterministic_and_seeded() {
        let records = hash_records(60, 9);
        assert_eq!(write_hash(&records, b"a"), write_hash(&records, b"a"));
        assert_ne!(write_hash(&records, b"a")[52..72], write_hash(&records, b"b")[52..72]);
        assert_eq!(write_btree(&records, b"a"), write_btree(&records, b"a"));
        assert_ne!(write_btree(&records, b"a")[52..72], write_btree(&records, b"b")[52..72]);
    }

    // Files Debian 11's rpm 4.16 (libdb 5.3.28) wrote; testdata/rpm/bdb/README.md says how.
    const REAL_PACKAGES: &[u8] = include_bytes!("../../../../testdata/rpm/bdb/Packages");
    const REAL_NAME: &[u8] = include_bytes!("../../../../testdata/rpm/bdb/Name");
    const REAL_BASENAMES: &[u8] = include_bytes!("../../../../testdata/rpm/bdb/Basenames");

    #[test]
    fn reads_files_rpm_wrote() {
        let packages = read_hash(REAL_PACKAGES).unwrap();
        let keys: Vec<u32> = packages
            .iter()
            .map(|(k, _)| u32::from_le_bytes(k.as_slice().try_into().unwrap()))
            .collect();
        assert_eq!(keys, vec![0, 2, 1, 3]);
        // Key 0 holds the last header instance given out.
        assert_eq!(packages[0].1, 3u32.to_le_bytes());
        for (_, header) in &packages[1..] {
            // A header blob: index count and data length (big-endian), then the entries.
            let il = u32::from_be_bytes(header[..4].try_into().unwrap()) as usize;
            let dl = u32::from_be_bytes(header[4..8].try_into().unwrap()) as usize;
            assert_eq!(header.len(), 8 + 16 * il + dl);
        }
        let names = read_btree(REAL_NAME).unwrap();
        let names: Vec<(&[u8], &[u8])> =
            names.iter().map(|(k, v)| (k.as_slice(), v.as_slice())).collect();
        assert_eq!(
            names,
            vec![
                (&b"alpha"[..], &[3, 0, 0, 0, 0, 0, 0, 0][..]),
                (&b"beta"[..], &[2, 0, 0, 0, 0, 0, 0, 0][..]),
                (&b"gamma"[..], &[1, 0, 0, 0, 0, 0, 0, 0][..]),
            ]
        );
        let basenames = read_btree(REAL_BASENAMES).unwrap();
        assert_eq!(basenames.len(), 7);
        assert_eq!(basenames[2].0, b"file.txt");
        assert_eq!(basenames[2].1.len(), 24);
    }

    #[test]
    fn rewrites_files_rpm_wrote() {
        let packages = read_hash(REAL_PACKAGES).unwrap();
        let rewritten = write_hash(&packages, b"Packages");
        // Same bucket layout as libdb's: the bucket pages are byte for byte rpm's.
        assert_eq!(rewritten.len(), REAL_PACKAGES.len());
        assert_eq!(rewritten[..52], REAL_PACKAGES[..52]);
        assert_eq!(rewritten[72..PAGE_SIZE], REAL_PACKAGES[72..PAGE_SIZE]);
        assert_eq!(rewritten[PAGE_SIZE..PAGE_SIZE + 64], REAL_PACKAGES[PAGE_SIZE..PAGE_SIZE + 64]);
        assert_eq!(read_hash(&rewritten).unwrap(), packages);
        let name = read_btree(REAL_NAME).unwrap();
        let rewritten_name = write_btree(&name, b"Name");
        assert_eq!(rewritten_name[..52], REAL_NAME[..52]);
        assert_eq!(rewritten_name[72..PAGE_SIZE], REAL_NAME[72..PAGE_SIZE]);
        assert_eq!(read_btree(&rewritten_name).unwrap(), name);
        for (file, bytes) in [("Packages", &rewritten), ("Name", &rewritten_name)] {
            let path = scratch_file(&format!("rewritten-{file}"), bytes);
            assert_verifies(&path);
            let original = scratch_file(
                &format!("real-{file}"),
                if file == "Name" { REAL_NAME } else { REAL_PACKAGES },
            );
            if let (Some(a), Some(b)) = (dump(&path), dump(&original)) {
                assert_eq!(a, b, "db5.3_dump of {file}");
            }
        }
    }

    /// Reading must end (with records or an error) and never panic.
    fn read_all(bytes: &[u8]) {
        let _ = read_hash(bytes);
        let _ = read_btree(bytes);
    }

    #[test]
    fn hostile_files_do_not_panic_or_hang() {
        let hash = write_hash(&hash_records(300, 11), b"hostile");
        let btree_records: Records = (0..3000u32)
            .map(|i| {
                (
                    format!("key-{i:05}").into_bytes(),
                    vec![i as u8; if i % 50 == 0 { 5000 } else { 8 }],
                )
            })
            .collect();
        let btree = write_btree(&btree_records, b"hostile");
        let mut rng = Rng(12);
        for file in [&hash, &btree, &REAL_PACKAGES.to_vec(), &REAL_NAME.to_vec()] {
            for len in (0..file.len()).step_by(509).chain([file.len() - 1]) {
                read_all(&file[..len]);
            }
            for _ in 0..3000 {
                let mut bad = file.clone();
                for _ in 0..1 + rng.next() % 4 {
                    let at = (rng.next() % bad.len() as u64) as usize;
                    bad[at] ^= 1 << (rng.next() % 8);
                }
                read_all(&bad);
            }
            for _ in 0..500 {
                // Page-number-shaped damage: a small number in a 4-byte field.
                let mut bad = file.clone();
                let at = (rng.next() % (bad.len() as u64 - 4)) as usize;
                let v = (rng.next() % (bad.len() / PAGE_SIZE + 2) as u64) as u32;
                bad[at..at + 4].copy_from_slice(&v.to_le_bytes());
                read_all(&bad);
            }
        }
    }

    #[test]
    fn page_cycles_are_errors() {
        // An overflow chain pointing back at itself.
        let big = vec![(b"k".to_vec(), vec![7u8; 3 * PAGE_SIZE])];
        let mut hash = write_hash(&big, b"cycle");
        let first_overflow = 3 * PAGE_SIZE; // meta, two buckets, then the overflow pages
        assert_eq!(hash[first_overflow + 25], P_OVERFLOW);
        put32(&mut hash[first_overflow..], 16, 3);
        assert!(matches!(read_hash(&hash), Err(BdbError::Corrupt { .. })));

        // A bucket chain pointing back at its first page.
        let mut hash = write_hash(&[(b"k".to_vec(), b"v".to_vec())], b"cycle");
        put32(&mut hash[PAGE_SIZE..], 16, 1);
        put32(&mut hash[2 * PAGE_SIZE..], 16, 1);
        assert!(matches!(read_hash(&hash), Err(BdbError::Corrupt { .. })));

        // Leaves linked in a ring.
        let records: Records =
            (0..2000u32).map(|i| (format!("{i:06}").into_bytes(), vec![0; 8])).collect();
        let mut btree = write_btree(&records, b"cycle");
        let npages = btree.len() / PAGE_SIZE;
        let last_leaf = (1..npages).rev().find(|&p| btree[p * PAGE_SIZE + 25] == P_LBTREE).unwrap();
        let first_leaf = (1..npages).find(|&p| btree[p * PAGE_SIZE + 25] == P_LBTREE).unwrap();
        put32(&mut btree[last_leaf * PAGE_SIZE..], 16, first_leaf as u32);
        assert!(matches!(read_btree(&btree), Err(BdbError::Corrupt { .. })));

        // An absurd bucket count.
        let mut hash = write_hash(&[], b"buckets");
        put32(&mut hash, 72, u32::MAX);
        assert!(matches!(read_hash(&hash), Err(BdbError::Corrupt { .. })));
    }

    #[test]
    fn rejects_other_files() {
        assert!(matches!(read_hash(b"short"), Err(BdbError::TooShort(5))));
        let btree = write_btree(&[], b"x");
        assert!(matches!(read_hash(&btree), Err(BdbError::BadMagic { .. })));
        let hash = write_hash(&[], b"x");
        assert!(matches!(read_btree(&hash), Err(BdbError::BadMagic { .. })));
    }
}
