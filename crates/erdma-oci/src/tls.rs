//! TLS to registries as Docker, Podman and skopeo set it up: the certificate directories of
//! containers-certs.d(5) and Docker's "Verify repository client with certificates", and the
//! failures of a TLS handshake told apart so that each can be named with its remedy.
//!
//! A registry's directory is `HOST[:PORT]` under the first of `$HOME/.config/containers/certs.d`,
//! `/etc/containers/certs.d` and `/etc/docker/certs.d` that has one (containers/image
//! `pkg/docker/docker_client.go`, `dockerCertDir`: the first directory that exists is used, the
//! others are not read), or the directory given with `--cert-dir` (skopeo's `--cert-dir`), which
//! replaces the lookup. In it (containers/image `pkg/tlsclientconfig`, `SetupCertificates`):
//! every `*.crt` is a CA trusted beside the system store; every `*.cert` is a client
//! certificate whose key is the `*.key` of the same name, and a `.cert` without its `.key` (or
//! the reverse) is an error.
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
pub use erdma_http::{tls_failure, TlsFailure};

/// Where [`CertEnv::cert_dir`] looks, apart so that tests need not touch the process's environment.
#[derive(Debug, Clone)]
pub struct CertEnv {
    /// `--cert-dir`: this directory for every registry, nothing else.
    pub explicit: Option<PathBuf>,
    /// The directories holding one `HOST[:PORT]` folder per registry, in lookup order.
    pub roots: Vec<PathBuf>,
}

impl CertEnv {
    /// The lookup of containers-certs.d(5), with `--cert-dir` when given.
    pub fn from_process(explicit: Option<PathBuf>) -> CertEnv {
        let mut roots = Vec::new();
        if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            roots.push(PathBuf::from(home).join(".config/containers/certs.d"));
        }
        roots.push(PathBuf::from("/etc/containers/certs.d"));
        roots.push(PathBuf::from("/etc/docker/certs.d"));
        CertEnv { explicit, roots }
    }

    /// The directory for `registry` (`HOST[:PORT]`), if one exists.
    pub fn cert_dir(&self, registry: &str) -> Option<PathBuf> {
        if let Some(d) = &self.explicit {
            return Some(d.clone());
        }
        // A registry name never holds `/`; refuse one that would leave the roots.
        if registry.contains('/') || registry.starts_with('.') {
            return None;
        }
        self.roots.iter().map(|r| r.join(registry)).find(|d| d.is_dir())
    }

    /// Where a user puts the CA for `registry`, for hints.
    pub fn suggested(&self, registry: &str) -> PathBuf {
        match &self.explicit {
            Some(d) => d.clone(),
            None => PathBuf::from("/etc/containers/certs.d").join(registry),
        }
    }
}

/// What a registry's certificate directory holds.
#[derive(Default)]
pub struct CertFiles {
    /// The directory read, if any.
    pub dir: Option<PathBuf>,
    /// CAs from `*.crt`, trusted beside the system store.
    pub cas: Vec<reqwest::Certificate>,
    /// The client certificate and key (the first `*.cert`/`*.key` pair by name), as one PEM.
    pub identity: Option<reqwest::Identity>,
}

/// Reads `registry`'s certificate directory (none: nothing added).
pub fn cert_files(env: &CertEnv, registry: &str) -> Result<CertFiles> {
    let Some(dir) = env.cert_dir(registry) else { return Ok(CertFiles::default()) };
    let bad = |path: &Path, reason: String| Error::CertFile {
        path: path.to_path_buf(),
        reason,
        source: None,
    };
    let failed = |path: &Path, reason: &str, source: std::io::Error| Error::CertFile {
        path: path.to_path_buf(),
        reason: reason.into(),
        source: crate::error::cause(source),
    };
    let mut names: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        // `--cert-dir` naming nothing is a mistake; a certs.d folder we found is there.
        Err(e) => return Err(failed(&dir, "cannot list it", e)),
    };
    names.sort();
    let read = |p: &Path| std::fs::read(p).map_err(|e| failed(p, "cannot read it", e));
    let mut files = CertFiles { dir: Some(dir.clone()), ..CertFiles::default() };
    for path in &names {
        match path.extension().and_then(|e| e.to_str()) {
            Some("crt") => {
                let certs = reqwest::Certificate::from_pem_bundle(&read(path)?).map_err(|e| {
                    Error::CertFile {
                        path: path.clone(),
                        reason: "not a PEM certificate".into(),
                        source: crate::error::cause(e),
                    }
                })?;
                if certs.is_empty() {
                    return Err(bad(path, "holds no PEM certificate".into()));
                }
                files.cas.extend(certs);
            }
            Some("cert") => {
                let key = path.with_extension("key");
                if !key.exists() {
                    return Err(bad(
                        path,
                        format!("client certificate without its key {}", key.display()),
                    ));
                }
                if files.identity.is_none() {
                    let mut pem = read(path)?;
                    pem.push(b'\n');
                    pem.extend(read(&key)?);
                    let id = reqwest::Identity::from_pem(&pem).map_err(|e| Error::CertFile {
                        path: path.clone(),
                        reason: "not a PEM certificate and key".into(),
                        source: crate::error::cause(e),
                    })?;
                    files.identity = Some(id);
                }
            }
            Some("key") => {
                let cert = path.with_extension("cert");
                if !cert.exists() {
                    return Err(bad(
                        path,
                        format!("key without its client certificate {}", cert.display()),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(files)
}

/// Whether `registry`'s certificate directory gives a client certificate, by [`cert_files`]'s
/// own reading of it.
pub fn has_client_cert(env: &CertEnv, registry: &str) -> bool {
    cert_files(env, registry).is_ok_and(|f| f.identity.is_some())
}

/// What to do about `failure` at `registry`, whose certificates `env` looks up.
pub fn hint(failure: &TlsFailure, registry: &str, env: &CertEnv) -> String {
    let dir = env.suggested(registry);
    match failure {
        TlsFailure::UnknownIssuer => format!("put the registry's CA certificate in {}/ca.crt (containers-certs.d(5); /etc/docker/certs.d/{registry}/ and ~/.config/containers/certs.d/{registry}/ are read too), or pass --cert-dir DIR", dir.display()),
        TlsFailure::Expired | TlsFailure::NotYetValid => "the registry's certificate must be renewed (check this machine's clock too)".into(),
        TlsFailure::WrongName => format!("the certificate must name {} in its subject alternative names; reach the registry by a name it carries", crate::transport::host_of(registry)),
        TlsFailure::ClientCertRequired => format!("put a client certificate and its key in {}/client.cert and client.key, or pass --cert-dir DIR", dir.display()),
        TlsFailure::ClientCertRefused => format!("the client certificate in {} is not signed by a CA the registry trusts", env.cert_dir(registry).unwrap_or(dir).display()),
        TlsFailure::NotTls => format!("reach it over plain HTTP with --insecure-registry {registry}"),
        TlsFailure::Other(_) => format!("check the registry's certificate and {}", dir.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_existing_root_wins_and_explicit_replaces_all() {
        let t = tempfile::tempdir().unwrap();
        let (home, etc) = (t.path().join("home"), t.path().join("etc"));
        std::fs::create_dir_all(etc.join("reg.example:5000")).unwrap();
        let env = CertEnv { explicit: None, roots: vec![home.clone(), etc.clone()] };
        assert_eq!(env.cert_dir("reg.example:5000"), Some(etc.join("reg.example:5000")));
        std::fs::create_dir_all(home.join("reg.example:5000")).unwrap();
        assert_eq!(env.cert_dir("reg.example:5000"), Some(home.join("reg.example:5000")));
        assert_eq!(env.cert_dir("other.example"), None);
        assert_eq!(env.cert_dir("../etc"), None);
        let env = CertEnv { explicit: Some(t.path().join("x")), roots: vec![home] };
        assert_eq!(env.cert_dir("reg.example:5000"), Some(t.path().join("x")));
    }

    #[test]
    fn a_cert_without_its_key_is_named() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("reg.example");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("client.cert"), "x").unwrap();
        let env = CertEnv { explicit: None, roots: vec![t.path().into()] };
        let e = cert_files(&env, "reg.example").err().unwrap().to_string();
        assert!(e.contains("client.cert") && e.contains("without its key"), "{e}");
        std::fs::remove_file(d.join("client.cert")).unwrap();
        std::fs::write(d.join("client.key"), "x").unwrap();
        let e = cert_files(&env, "reg.example").err().unwrap().to_string();
        assert!(e.contains("client.key") && e.contains("without its client certificate"), "{e}");
        std::fs::remove_file(d.join("client.key")).unwrap();
        std::fs::write(d.join("ca.crt"), "not pem").unwrap();
        let e = cert_files(&env, "reg.example").err().unwrap().to_string();
        assert!(e.contains("ca.crt"), "{e}");
    }
}
