//! Image names in the syntax of containers-transports(5), so skopeo and podman users know them.
use std::fmt;
use std::path::PathBuf;

use crate::error::{Error, Result};

/// Where an image is read from or written to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageRef {
    /// `docker://REGISTRY/REPO[:TAG|@DIGEST]`
    Registry(oci_client::Reference),
    /// `oci:DIR[:TAG]`
    Layout { dir: PathBuf, tag: Option<String> },
    /// `oci-archive:FILE[:TAG]`
    OciArchive { file: PathBuf, tag: Option<String> },
    /// `docker-archive:FILE[:REF]` (what `docker save` writes and `docker load` reads)
    DockerArchive { file: PathBuf, name: Option<String> },
}

impl ImageRef {
    pub fn parse(s: &str) -> Result<ImageRef> {
        let invalid = |reason: &str| Error::InvalidReference {
            reference: s.to_string(),
            reason: reason.to_string(),
        };
        let (transport, rest) = s.split_once(':').ok_or_else(|| {
            invalid("expected TRANSPORT:NAME, e.g. docker://registry/repo:tag, oci:DIR:TAG, oci-archive:FILE, docker-archive:FILE")
        })?;
        match transport {
            "docker" => {
                let name = rest
                    .strip_prefix("//")
                    .ok_or_else(|| invalid("docker transport needs `docker://`"))?;
                if name.is_empty() {
                    return Err(invalid("empty image name"));
                }
                let reference =
                    crate::reference::parse(name).map_err(|e| invalid(&e.to_string()))?;
                Ok(ImageRef::Registry(reference))
            }
            "oci" | "oci-archive" | "docker-archive" => {
                let (path, tag) = split_path_tag(rest);
                if path.is_empty() {
                    return Err(invalid("empty path"));
                }
                let path = PathBuf::from(path);
                Ok(match transport {
                    "oci" => ImageRef::Layout { dir: path, tag },
                    "oci-archive" => ImageRef::OciArchive { file: path, tag },
                    _ => ImageRef::DockerArchive { file: path, name: tag },
                })
            }
            other => Err(invalid(&format!(
                "unknown transport `{other}` (known: docker, oci, oci-archive, docker-archive)"
            ))),
        }
    }

    /// The registry host, for registry references.
    pub fn registry(&self) -> Option<&str> {
        match self {
            ImageRef::Registry(r) => Some(r.resolve_registry()),
            _ => None,
        }
    }
}

/// A registry name (`HOST[:PORT]`) without its port; `[::1]:5000` gives `[::1]`.
pub fn host_of(registry: &str) -> &str {
    match registry.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) && !h.ends_with(':') => h,
        _ => registry,
    }
}

/// `PATH[:TAG]` split at the first `:`, as containers/image does, so a name means the
/// same to skopeo and to us (`docker-archive:a.tar:repo/name:tag` has reference `repo/name:tag`).
fn split_path_tag(rest: &str) -> (&str, Option<String>) {
    match rest.split_once(':') {
        Some((path, "")) => (path, None),
        Some((path, tag)) => (path, Some(tag.to_string())),
        None => (rest, None),
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let opt = |t: &Option<String>| t.as_ref().map(|t| format!(":{t}")).unwrap_or_default();
        match self {
            ImageRef::Registry(r) => write!(f, "docker://{}", r.whole()),
            ImageRef::Layout { dir, tag } => write!(f, "oci:{}{}", dir.display(), opt(tag)),
            ImageRef::OciArchive { file, tag } => {
                write!(f, "oci-archive:{}{}", file.display(), opt(tag))
            }
            ImageRef::DockerArchive { file, name } => {
                write!(f, "docker-archive:{}{}", file.display(), opt(name))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_transport() {
        let r = ImageRef::parse("docker://127.0.0.1:5000/base:1").unwrap();
        let ImageRef::Registry(r) = r else { panic!() };
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.repository(), "base");
        assert_eq!(r.tag(), Some("1"));

        assert_eq!(
            ImageRef::parse("oci:out:demo").unwrap(),
            ImageRef::Layout { dir: "out".into(), tag: Some("demo".into()) }
        );
        assert_eq!(
            ImageRef::parse("oci:/a/b").unwrap(),
            ImageRef::Layout { dir: "/a/b".into(), tag: None }
        );
        assert_eq!(
            ImageRef::parse("oci-archive:/x.tar:v1").unwrap(),
            ImageRef::OciArchive { file: "/x.tar".into(), tag: Some("v1".into()) }
        );
        assert_eq!(
            ImageRef::parse("docker-archive:/x.tar:repo/name:tag").unwrap(),
            ImageRef::DockerArchive { file: "/x.tar".into(), name: Some("repo/name:tag".into()) }
        );
    }

    #[test]
    fn digest_reference() {
        let d = format!("docker://reg.example/ns/repo@sha256:{}", "a".repeat(64));
        let ImageRef::Registry(r) = ImageRef::parse(&d).unwrap() else { panic!() };
        assert_eq!(r.digest(), Some(format!("sha256:{}", "a".repeat(64)).as_str()));
    }

    #[test]
    fn rejects_bad_names() {
        for bad in ["nothing", "ftp://x", "docker:x", "oci:", "docker://"] {
            let e = ImageRef::parse(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
    }
}
