//! A `Packages` index read as it streams in: the download, its decompression, the SHA256 and
//! size checks against the signed Release and the parse all happen in one pass, with the
//! download running beside the decompression instead of before it.
//!
//! Only the fields the resolver and the download read are kept ([`KEPT_FIELDS`]): Debian 13's
//! index is 57 MB decompressed, half of it descriptions, tags and maintainers. Nothing of an
//! index is used unless the whole compressed file matched the Release's SHA256 and size (and the
//! decompressed one the Release's entry for it, when there is one): the text parsed from a file
//! that fails is dropped.
use std::io::{BufRead, BufReader, Read};

use erdma_http::Hashing;

/// The fields of a `Packages` stanza that are kept.
pub const KEPT_FIELDS: [&str; 14] = [
    "Package",
    "Version",
    "Architecture",
    "Multi-Arch",
    "Provides",
    "Depends",
    "Pre-Depends",
    // Not followed (erdma-build installs as --no-install-recommends), but reported.
    "Recommends",
    "Breaks",
    "Conflicts",
    "Replaces",
    "Filename",
    "Size",
    "SHA256",
];

/// What an index file must be: its size and SHA256 as the Release lists them.
#[derive(Debug, Clone)]
pub struct Expect {
    pub size: u64,
    pub sha256: String,
}

/// How reading an index failed.
#[derive(Debug)]
pub enum StreamError {
    /// The source (network or file) failed: trying again may help.
    Source {
        message: String,
    },
    /// The compressed file is not what the Release says.
    Size {
        actual: String,
    },
    Hash {
        actual: String,
    },
    /// The decompressed index is not what the Release says.
    PlainSize {
        actual: String,
    },
    PlainHash {
        actual: String,
    },
    /// Decompression failed, or the index is larger than `bound.max`.
    Decompress(std::io::Error),
    /// The compressed index inflates more than `bound.inflation` times: a decompression bomb
    /// (in a file that matched the Release's size and hash).
    Limit(erdma_limits::Exceeded),
}

/// How large a decompressed index may be: `max` bytes, and `inflation` times the compressed
/// bytes read (`--max-inflation`, [`erdma_limits::inflate`]; 0: no ratio limit).
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub max: u64,
    pub inflation: u64,
}

/// Reads the index `file` (named as the Release names it: its suffix says the compression)
/// from `src`, checks it against `expect` (and the decompressed data against `plain`, when the
/// Release lists it), and returns the stanzas with [`KEPT_FIELDS`] only. `source_failed` tells a
/// failure of `src` from bad data.
pub fn read_index(
    src: impl Read,
    file: &str,
    expect: &Expect,
    plain: Option<&Expect>,
    bound: Bound,
    source_failed: &dyn Fn() -> Option<String>,
) -> Result<String, StreamError> {
    let mut compressed = Hashing::new(src, expect.size, None);
    let plain_limit = plain.map_or(bound.max, |p| p.size.min(bound.max));
    let (result, plain_over, plain_read, plain_sha) = {
        let mut decoder: Box<dyn Read + '_> = if file.ends_with(".xz") {
            Box::new(
                erdma_limits::inflate(&mut compressed, bound.inflation, u64::MAX, |c| {
                    Ok(Box::new(liblzma::read::XzDecoder::new_multi_decoder(c)))
                })
                .map_err(StreamError::Decompress)?,
            )
        } else if file.ends_with(".gz") {
            Box::new(
                erdma_limits::inflate(&mut compressed, bound.inflation, u64::MAX, |c| {
                    Ok(Box::new(flate2::read::MultiGzDecoder::new(c)))
                })
                .map_err(StreamError::Decompress)?,
            )
        } else {
            Box::new(&mut compressed)
        };
        // Decompressing (this thread) and hashing and keeping fields (another) overlap: each
        // is about half of the work on an index of Debian's size.
        std::thread::scope(|scope| {
            let (tx, rx) = crate::pipe::channel();
            let consumer = scope.spawn(move || {
                let mut decompressed =
                    Hashing::new(crate::pipe::Chunks::new(rx), plain_limit, None);
                let result =
                    keep_fields(&mut BufReader::with_capacity(256 << 10, &mut decompressed));
                let over = decompressed.over();
                let (read, sha256) = decompressed.finish();
                (result, over, read, sha256)
            });
            crate::pipe::pump(&mut decoder, tx);
            consumer.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    };
    let out = match result {
        Ok(text) => text,
        Err(e) => {
            if let Some(message) = source_failed() {
                return Err(StreamError::Source { message });
            }
            if compressed.over() {
                return Err(StreamError::Size { actual: format!("more than {}", expect.size) });
            }
            if plain_over && plain.is_some() {
                return Err(StreamError::PlainSize { actual: format!("more than {plain_limit}") });
            }
            // Data that does not decompress is usually data that is not what the Release
            // signed: say so when the whole file's hash shows it.
            if std::io::copy(&mut compressed, &mut std::io::sink()).is_ok() {
                let (read, got) = compressed.finish();
                if read != expect.size {
                    return Err(StreamError::Size { actual: read.to_string() });
                }
                if !got.eq_ignore_ascii_case(&expect.sha256) {
                    return Err(StreamError::Hash { actual: got });
                }
            } else if compressed.over() {
                return Err(StreamError::Size { actual: format!("more than {}", expect.size) });
            }
            // The file is what the Release signed, and a bomb.
            if let Some(exceeded) = erdma_limits::exceeded(&e) {
                return Err(StreamError::Limit(exceeded.clone()));
            }
            return Err(StreamError::Decompress(e));
        }
    };
    let plain_hash = (plain_read, plain_sha);
    // What the decoder left unread still counts for the compressed file's size and hash.
    if let Err(e) = std::io::copy(&mut compressed, &mut std::io::sink()) {
        if let Some(message) = source_failed() {
            return Err(StreamError::Source { message });
        }
        return Err(if compressed.over() {
            StreamError::Size { actual: format!("more than {}", expect.size) }
        } else {
            StreamError::Decompress(e)
        });
    }
    let (read, got) = compressed.finish();
    if read != expect.size {
        return Err(StreamError::Size { actual: read.to_string() });
    }
    if !got.eq_ignore_ascii_case(&expect.sha256) {
        return Err(StreamError::Hash { actual: got });
    }
    if let Some(p) = plain {
        if plain_hash.0 != p.size {
            return Err(StreamError::PlainSize { actual: plain_hash.0.to_string() });
        }
        if !plain_hash.1.eq_ignore_ascii_case(&p.sha256) {
            return Err(StreamError::PlainHash { actual: plain_hash.1 });
        }
    }
    Ok(out)
}

/// The stanzas of a deb822 stream with only [`KEPT_FIELDS`], continuation lines included. This
/// runs over every byte of every index (57 MB for Debian 13), so it works on bytes, line by
/// line, without allocating per line.
fn keep_fields(r: &mut impl BufRead) -> std::io::Result<String> {
    let mut out: Vec<u8> = Vec::new();
    let mut line: Vec<u8> = Vec::with_capacity(4096);
    let mut keep = false;
    loop {
        line.clear();
        if r.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        let mut end = line.len();
        while end > 0 && matches!(line[end - 1], b'\n' | b'\r') {
            end -= 1;
        }
        let text = &line[..end];
        if text.iter().all(u8::is_ascii_whitespace) {
            if !out.is_empty() && !out.ends_with(b"\n\n") {
                out.push(b'\n');
            }
            keep = false;
            continue;
        }
        if matches!(text[0], b' ' | b'\t') {
            if keep {
                out.extend_from_slice(text);
                out.push(b'\n');
            }
            continue;
        }
        let name = text.split(|&b| b == b':').next().unwrap_or_default().trim_ascii();
        keep = KEPT_FIELDS
            .iter()
            .any(|f| f.len() == name.len() && f.as_bytes().eq_ignore_ascii_case(name));
        if keep {
            out.extend_from_slice(text);
            out.push(b'\n');
        }
    }
    Ok(String::from_utf8(out)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Sha256;

    const INDEX: &str = "Package: librdmacm1t64\nSource: rdma-core\nVersion: 56.1-1\nInstalled-Size: 160\nMaintainer: Benjamin Drung <bdrung@ubuntu.com>\nArchitecture: amd64\nMulti-Arch: same\nReplaces: librdmacm1\nProvides: librdmacm1 (= 56.1-1)\nDepends: libc6 (>= 2.38),\n libibverbs1 (>= 31)\nBreaks: librdmacm1 (<< 56.1-1)\nDescription: Library for managing RDMA connections\n This library provides a connection manager.\n .\n More text.\nHomepage: https://github.com/linux-rdma/rdma-core\nSection: libs\nPriority: optional\nFilename: pool/main/r/rdma-core/librdmacm1t64_56.1-1_amd64.deb\nSize: 70396\nSHA256: 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n\nPackage: adduser\nVersion: 3.152\nArchitecture: all\nDescription: add and remove users\nFilename: pool/main/a/adduser/adduser_3.152_all.deb\nSize: 190932\nSHA256: ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100\n";

    const MIB: Bound = Bound { max: 1 << 20, inflation: 100 };

    fn expect(data: &[u8]) -> Expect {
        Expect {
            size: data.len() as u64,
            sha256: hex::encode(<Sha256 as sha2::Digest>::digest(data)),
        }
    }

    fn xz(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        liblzma::read::XzEncoder::new(data, 6).read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn keeps_the_fields_the_resolver_reads() {
        let text = keep_fields(&mut INDEX.as_bytes()).unwrap();
        assert_eq!(
            text,
            "Package: librdmacm1t64\nVersion: 56.1-1\nArchitecture: amd64\nMulti-Arch: same\nReplaces: librdmacm1\nProvides: librdmacm1 (= 56.1-1)\nDepends: libc6 (>= 2.38),\n libibverbs1 (>= 31)\nBreaks: librdmacm1 (<< 56.1-1)\nFilename: pool/main/r/rdma-core/librdmacm1t64_56.1-1_amd64.deb\nSize: 70396\nSHA256: 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n\nPackage: adduser\nVersion: 3.152\nArchitecture: all\nFilename: pool/main/a/adduser/adduser_3.152_all.deb\nSize: 190932\nSHA256: ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100\n"
        );
    }

    #[test]
    fn checks_both_hashes_and_sizes() {
        let packed = xz(INDEX.as_bytes());
        let none = || None;
        let ok = read_index(
            packed.as_slice(),
            "main/binary-amd64/Packages.xz",
            &expect(&packed),
            Some(&expect(INDEX.as_bytes())),
            MIB,
            &none,
        )
        .unwrap();
        assert!(ok.starts_with("Package: librdmacm1t64\n"));
        // A flipped byte of the compressed file: its hash (or its decompression) fails.
        let mut bad = packed.clone();
        let at = bad.len() / 2;
        bad[at] ^= 1;
        assert!(
            read_index(bad.as_slice(), "Packages.xz", &expect(&packed), None, MIB, &none).is_err()
        );
        // Longer and shorter than the Release says.
        let mut long = packed.clone();
        long.extend_from_slice(b"junk");
        assert!(matches!(
            read_index(long.as_slice(), "Packages.xz", &expect(&packed), None, MIB, &none),
            Err(StreamError::Size { .. } | StreamError::Decompress(_))
        ));
        // The decompressed index against the Release's entry for it.
        let other = expect(b"something else");
        assert!(matches!(
            read_index(
                packed.as_slice(),
                "Packages.xz",
                &expect(&packed),
                Some(&other),
                MIB,
                &none
            ),
            Err(StreamError::PlainSize { .. })
        ));
        // A bomb: more decompressed bytes than allowed.
        assert!(matches!(
            read_index(
                packed.as_slice(),
                "Packages.xz",
                &expect(&packed),
                None,
                Bound { max: 100, inflation: 100 },
                &none
            ),
            Err(StreamError::Decompress(_))
        ));
        // Plain.
        let text =
            read_index(INDEX.as_bytes(), "Packages", &expect(INDEX.as_bytes()), None, MIB, &none)
                .unwrap();
        assert!(text.ends_with("Size: 190932\nSHA256: ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100\n"));
        // A bomb that is what the Release signed: refused once it inflates past the ratio, and
        // read whole with the ratio lifted.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut gz, &vec![0u8; 160 << 20]).unwrap();
        let bomb = gz.finish().unwrap();
        let e = read_index(
            bomb.as_slice(),
            "Packages.gz",
            &expect(&bomb),
            None,
            Bound { max: 1 << 30, inflation: 100 },
            &none,
        )
        .unwrap_err();
        assert!(
            matches!(e, StreamError::Limit(erdma_limits::Exceeded::Inflation { ratio: 100, .. })),
            "{e:?}"
        );
        assert_eq!(
            read_index(
                bomb.as_slice(),
                "Packages.gz",
                &expect(&bomb),
                None,
                Bound { max: 1 << 30, inflation: 0 },
                &none
            )
            .unwrap(),
            ""
        );
        // A failing source is said to be one, to be retried.
        let failing = || Some("connection reset".to_string());
        let e = read_index(&packed[..10], "Packages.xz", &expect(&packed), None, MIB, &failing)
            .unwrap_err();
        assert!(matches!(e, StreamError::Source { .. }), "{e:?}");
    }
}
