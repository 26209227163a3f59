//! Where NCCL gets chosen: NVIDIA's `libnccl2` builds (`2.21.5-1+cuda12.4`), the CUDA version
//! they must match, the 2.19 floor eRDMA needs (the PAI-DLC eRDMA guide), and the version a `libnccl.so.2`
//! carries in itself.
use std::cmp::Ordering;
use std::fmt;
use std::io::Read;

pub use erdma_common::nccl::{Nccl, MIN};
use serde::Serialize;

/// A CUDA version, `12.4` (a patch level, `12.4.1`, is dropped: builds are per minor).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cuda {
    pub major: u32,
    pub minor: u32,
}

impl Cuda {
    pub fn parse(s: &str) -> Option<Cuda> {
        let s = s.trim();
        let mut it = s.split('.');
        let major = it.next()?.parse().ok()?;
        let minor = it.next().unwrap_or("0").parse().ok()?;
        Some(Cuda { major, minor })
    }
}

impl fmt::Display for Cuda {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Serialize for Cuda {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The NCCL release and CUDA build of a Debian version string of NVIDIA's, `2.21.5-1+cuda12.4`.
pub fn parse_build(deb_version: &str) -> Option<(Nccl, Cuda)> {
    let (upstream, rest) = deb_version.split_once('-')?;
    let cuda = rest.split_once("+cuda")?.1;
    Some((Nccl::parse(upstream)?, Cuda::parse(cuda)?))
}

/// What `--nccl` asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    Latest,
    /// `2.21.5`: that release, the build for the image's CUDA.
    Release(Nccl),
    /// `2.21.5-1+cuda12.4`: exactly that package version.
    Exact(String),
}

impl Want {
    pub fn parse(s: &str) -> Result<Want, NcclError> {
        if s == "latest" {
            return Ok(Want::Latest);
        }
        if let Some(v) = Nccl::parse(s) {
            return Ok(Want::Release(v));
        }
        match parse_build(s) {
            Some(_) => Ok(Want::Exact(s.to_string())),
            None => Err(NcclError::BadRequest(s.to_string())),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NcclError {
    #[error("invalid --nccl `{0}`: expected `latest`, a release such as `2.21.5`, or a package version such as `2.21.5-1+cuda12.4`")]
    BadRequest(String),
    #[error("NCCL {0} is older than {MIN}, the first release that works over eRDMA")]
    TooOld(Nccl),
    #[error("libnccl2 {version} is built for CUDA {built}, and the image has CUDA {image}: NCCL's CUDA major version must match the image's")]
    WrongCuda { version: String, built: Cuda, image: Cuda },
    #[error("no libnccl2 build for CUDA {cuda_major}.x in {repos}{others}")]
    NoBuildForCuda { cuda_major: u32, repos: String, others: String },
    #[error("{repos} has no libnccl2 {want} for CUDA {cuda_major}.x (it has {have})")]
    NoSuchRelease { want: String, cuda_major: u32, repos: String, have: String },
    #[error("the newest libnccl2 for CUDA {cuda_major}.x in {repos} is {newest}, older than {MIN}, the first release that works over eRDMA")]
    NewestTooOld { cuda_major: u32, repos: String, newest: String },
}

/// Picks the `libnccl2` package version to install from NVIDIA's `versions` for an image with
/// CUDA `cuda`.
///
/// Only builds for the image's CUDA major version count (`+cuda12.x` for CUDA 12; NCCL links
/// the CUDA runtime statically, and a major version's builds run on all its minors). Among the
/// builds of one NCCL release, the one for the newest CUDA minor not above the image's wins,
/// else the oldest above it; among releases, the newest (`latest`) or the one asked for.
pub fn select<'a>(
    versions: impl IntoIterator<Item = &'a str>,
    want: &Want,
    cuda: Cuda,
    repos: &str,
) -> Result<String, NcclError> {
    let all: Vec<(&str, Nccl, Cuda)> =
        versions.into_iter().filter_map(|v| parse_build(v).map(|(n, c)| (v, n, c))).collect();
    if let Want::Exact(v) = want {
        let (n, c) = parse_build(v).ok_or_else(|| NcclError::BadRequest(v.clone()))?;
        if !n.supports_erdma() {
            return Err(NcclError::TooOld(n));
        }
        if c.major != cuda.major {
            return Err(NcclError::WrongCuda { version: v.clone(), built: c, image: cuda });
        }
        // The resolver reports a version the repository does not have.
        return Ok(v.clone());
    }
    if let Want::Release(n) = want {
        if !n.supports_erdma() {
            return Err(NcclError::TooOld(*n));
        }
    }
    let matching: Vec<&(&str, Nccl, Cuda)> =
        all.iter().filter(|(_, _, c)| c.major == cuda.major).collect();
    if matching.is_empty() {
        let mut majors: Vec<u32> = all.iter().map(|(_, _, c)| c.major).collect();
        majors.sort_unstable();
        majors.dedup();
        let others = if majors.is_empty() {
            String::new()
        } else {
            format!(
                " (it has builds for CUDA {})",
                majors.iter().map(|m| format!("{m}.x")).collect::<Vec<_>>().join(", ")
            )
        };
        return Err(NcclError::NoBuildForCuda {
            cuda_major: cuda.major,
            repos: repos.into(),
            others,
        });
    }
    let release = match want {
        Want::Release(n) => {
            if !matching.iter().any(|(_, m, _)| m == n) {
                let mut have: Vec<Nccl> = matching.iter().map(|(_, m, _)| *m).collect();
                have.sort_unstable();
                have.dedup();
                return Err(NcclError::NoSuchRelease {
                    want: n.to_string(),
                    cuda_major: cuda.major,
                    repos: repos.into(),
                    have: have.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
                });
            }
            *n
        }
        _ => {
            let newest = matching.iter().map(|(_, n, _)| *n).max().expect("not empty");
            if !newest.supports_erdma() {
                return Err(NcclError::NewestTooOld {
                    cuda_major: cuda.major,
                    repos: repos.into(),
                    newest: newest.to_string(),
                });
            }
            newest
        }
    };
    let builds = matching.iter().filter(|(_, n, _)| *n == release);
    // Rank: CUDA minors not above the image's first (newest of them), then the rest (oldest
    // first); then the newest Debian revision.
    let best = builds
        .max_by(|a, b| {
            let key = |c: &Cuda| {
                if c.minor <= cuda.minor {
                    (1, c.minor as i64)
                } else {
                    (0, -(c.minor as i64))
                }
            };
            key(&a.2).cmp(&key(&b.2)).then_with(|| compare_deb(a.0, b.0))
        })
        .expect("the release has a build");
    Ok(best.0.to_string())
}

fn compare_deb(a: &str, b: &str) -> Ordering {
    match (a.parse::<erdma_deb::version::Version>(), b.parse::<erdma_deb::version::Version>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}

/// The version string a `libnccl.so` carries: NCCL's `VERSION_STRING`, printed at
/// `ncclCommInit` as `NCCL version 2.21.5+cuda12.4`. Streams: real libraries are hundreds of
/// MiB.
pub fn version_in_library(r: &mut dyn Read) -> std::io::Result<Option<(Nccl, Option<Cuda>)>> {
    const NEEDLE: &[u8] = b"NCCL version ";
    const TAIL: usize = 32;
    let mut buf = vec![0u8; 1 << 16];
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let n = r.read(&mut buf)?;
        let eof = n == 0;
        carry.extend_from_slice(&buf[..n]);
        let mut from = 0;
        while let Some(pos) = find(&carry[from..], NEEDLE) {
            let start = from + pos + NEEDLE.len();
            let end = carry[start..]
                .iter()
                .position(|b| !(b.is_ascii_alphanumeric() || *b == b'.' || *b == b'+'))
                .map(|e| start + e);
            let end = match end {
                Some(e) => e,
                // The version runs on past what we have: read more first.
                None if !eof && carry.len() - start < TAIL => break,
                None => carry.len(),
            };
            if let Some(v) = parse_version_text(&String::from_utf8_lossy(&carry[start..end])) {
                // Drain the rest: a digest check on the stream needs its end.
                std::io::copy(r, &mut std::io::sink())?;
                return Ok(Some(v));
            }
            from = start;
        }
        if eof {
            return Ok(None);
        }
        // Keep enough of the end for a needle and version split across reads.
        let keep = NEEDLE.len() + TAIL;
        if carry.len() > keep {
            carry.drain(..carry.len() - keep);
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `2.21.5+cuda12.4` or `2.21.5`.
fn parse_version_text(s: &str) -> Option<(Nccl, Option<Cuda>)> {
    let (n, c) = match s.split_once("+cuda") {
        Some((n, c)) => (n, Cuda::parse(c)),
        None => (s, None),
    };
    Some((Nccl::parse(n.trim_end_matches('.'))?, c))
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPO: &[&str] = &[
        "2.18.3-1+cuda12.2",
        "2.18.5-1+cuda11.0",
        "2.19.3-1+cuda12.3",
        "2.21.5-1+cuda11.8",
        "2.21.5-1+cuda12.2",
        "2.21.5-1+cuda12.4",
        "2.21.5-1+cuda12.6",
        "2.23.4-1+cuda12.6",
        "2.27.7-1+cuda12.9",
        "2.27.7-1+cuda13.0",
        "2.18.3-3",
    ];

    fn pick(want: &str, cuda: &str) -> Result<String, NcclError> {
        select(
            REPO.iter().copied(),
            &Want::parse(want).unwrap(),
            Cuda::parse(cuda).unwrap(),
            "cuda",
        )
    }

    #[test]
    fn builds_follow_the_image_cuda() {
        assert_eq!(pick("latest", "12.4.1").unwrap(), "2.27.7-1+cuda12.9");
        assert_eq!(pick("latest", "13.0").unwrap(), "2.27.7-1+cuda13.0");
        assert_eq!(pick("latest", "11.8.0").unwrap(), "2.21.5-1+cuda11.8");
        assert_eq!(pick("2.21.5", "12.4").unwrap(), "2.21.5-1+cuda12.4");
        assert_eq!(
            pick("2.21.5", "12.1").unwrap(),
            "2.21.5-1+cuda12.2",
            "the oldest build above 12.1"
        );
        assert_eq!(
            pick("2.21.5", "12.5").unwrap(),
            "2.21.5-1+cuda12.4",
            "the newest build not above 12.5"
        );
        assert_eq!(pick("2.21.5-1+cuda12.6", "12.1").unwrap(), "2.21.5-1+cuda12.6");
    }

    #[test]
    fn old_or_mismatched_builds_are_refused() {
        assert_eq!(
            pick("2.18.3", "12.4").unwrap_err().to_string(),
            "NCCL 2.18.3 is older than 2.19.0, the first release that works over eRDMA"
        );
        assert!(matches!(pick("2.18.3-1+cuda12.2", "12.4"), Err(NcclError::TooOld(_))));
        let e = pick("2.21.5-1+cuda11.8", "12.4").unwrap_err().to_string();
        assert!(e.contains("built for CUDA 11.8, and the image has CUDA 12.4"), "{e}");
        let e = pick("latest", "10.2").unwrap_err().to_string();
        assert_eq!(
            e,
            "no libnccl2 build for CUDA 10.x in cuda (it has builds for CUDA 11.x, 12.x, 13.x)"
        );
        let e = pick("2.23.4", "11.8").unwrap_err().to_string();
        assert_eq!(e, "cuda has no libnccl2 2.23.4 for CUDA 11.x (it has 2.18.5, 2.21.5)");
        let only_old = ["2.18.5-1+cuda11.0"];
        let e = select(only_old, &Want::Latest, Cuda::parse("11.8").unwrap(), "cuda").unwrap_err();
        assert!(matches!(e, NcclError::NewestTooOld { .. }), "{e}");
        assert!(
            Want::parse("2.21").is_ok()
                && Want::parse("two").is_err()
                && Want::parse("2.21.5-1").is_err()
        );
    }

    #[test]
    fn library_versions_are_read_in_a_stream() {
        let mut lib = vec![0u8; 200_000];
        lib.extend_from_slice(b"\0NCCL version 2.21.5+cuda12.4\0");
        lib.extend(vec![7u8; 70_000]);
        // Split across the 64 KiB reads at every offset near the boundary.
        for shift in 0..40 {
            let mut data = vec![1u8; (1 << 16) - 20 + shift];
            data.extend_from_slice(b"NCCL version 2.18.3+cuda12.2\0");
            let got = version_in_library(&mut data.as_slice()).unwrap().unwrap();
            assert_eq!(
                (got.0.to_string(), got.1.unwrap().to_string()),
                ("2.18.3".into(), "12.2".into()),
                "shift {shift}"
            );
        }
        let got = version_in_library(&mut lib.as_slice()).unwrap().unwrap();
        assert_eq!(
            got,
            (Nccl { major: 2, minor: 21, patch: 5 }, Some(Cuda { major: 12, minor: 4 }))
        );
        assert_eq!(version_in_library(&mut &b"no version here"[..]).unwrap(), None);
        assert_eq!(version_in_library(&mut &b"NCCL version x.y"[..]).unwrap(), None);
    }
}
