//! Registry credentials from `REGISTRY_AUTH_FILE` and `~/.docker/config.json`
//! (`auths`, `credHelpers`, `credsStore`), as docker, podman and skopeo read them.
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;
use std::collections::HashMap;

use crate::error::{Error, Result};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuthFile {
    #[serde(default)]
    auths: HashMap<String, AuthEntry>,
    #[serde(default)]
    cred_helpers: HashMap<String, String>,
    #[serde(default)]
    creds_store: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
}

/// Candidate files, most specific first.
fn auth_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Some(f) = std::env::var_os("REGISTRY_AUTH_FILE") {
        files.push(PathBuf::from(f));
    }
    if let Some(d) = std::env::var_os("DOCKER_CONFIG") {
        files.push(PathBuf::from(d).join("config.json"));
    } else if let Some(home) = std::env::var_os("HOME") {
        files.push(PathBuf::from(home).join(".docker/config.json"));
    }
    files
}

/// Docker Hub is stored under its legacy v1 URL.
fn keys_for(registry: &str) -> Vec<String> {
    let mut keys = vec![registry.to_string(), format!("https://{registry}"), format!("http://{registry}")];
    if registry == "docker.io" || registry == "index.docker.io" || registry == "registry-1.docker.io" {
        keys.push("https://index.docker.io/v1/".into());
    }
    keys
}

/// Credentials for `registry`, anonymous when none are configured.
pub fn credentials(registry: &str) -> Result<RegistryAuth> {
    for path in auth_files() {
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("reading credentials", &path)(e)),
        };
        let file: AuthFile = serde_json::from_slice(&text).map_err(|source| Error::AuthConfig { path: path.clone(), source })?;
        if let Some(helper) = file.cred_helpers.get(registry) {
            return helper_get(helper, registry);
        }
        for key in keys_for(registry) {
            if let Some(entry) = file.auths.get(&key) {
                if let Some(auth) = entry_auth(entry, &path)? {
                    return Ok(auth);
                }
            }
        }
        if let Some(store) = &file.creds_store {
            return helper_get(store, registry);
        }
    }
    Ok(RegistryAuth::Anonymous)
}

fn entry_auth(entry: &AuthEntry, path: &std::path::Path) -> Result<Option<RegistryAuth>> {
    if let Some(token) = &entry.identitytoken {
        return Ok(Some(RegistryAuth::Bearer(token.clone())));
    }
    if let (Some(u), Some(p)) = (&entry.username, &entry.password) {
        return Ok(Some(RegistryAuth::Basic(u.clone(), p.clone())));
    }
    let Some(auth) = &entry.auth else { return Ok(None) };
    let bad = || Error::Unsupported(format!("malformed `auth` entry in {}: expected base64 of user:password", path.display()));
    let decoded = base64::engine::general_purpose::STANDARD.decode(auth.trim()).map_err(|_| bad())?;
    let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
    let (u, p) = decoded.split_once(':').ok_or_else(bad)?;
    Ok(Some(RegistryAuth::Basic(u.to_string(), p.to_string())))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HelperReply {
    username: String,
    secret: String,
}

/// Runs `docker-credential-HELPER get` with the registry on stdin (the docker-credential-helpers protocol).
fn helper_get(helper: &str, registry: &str) -> Result<RegistryAuth> {
    let fail = |reason: String| Error::CredentialHelper { helper: helper.into(), registry: registry.into(), reason };
    let mut child = Command::new(format!("docker-credential-{helper}"))
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(e.to_string()))?;
    child.stdin.take().expect("piped").write_all(registry.as_bytes()).map_err(|e| fail(e.to_string()))?;
    let out = child.wait_with_output().map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        let msg = String::from_utf8_lossy(&out.stdout).trim().to_string();
        // "credentials not found in native keychain" means: no credentials, go anonymous.
        if msg.contains("not found") {
            return Ok(RegistryAuth::Anonymous);
        }
        return Err(fail(format!("{}: {msg}", out.status)));
    }
    let reply: HelperReply = serde_json::from_slice(&out.stdout).map_err(|e| fail(e.to_string()))?;
    if reply.username == "<token>" {
        return Ok(RegistryAuth::Bearer(reply.secret));
    }
    Ok(RegistryAuth::Basic(reply.username, reply.secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_auths_and_helpers() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("auth.json");
        std::fs::write(
            &file,
            r#"{"auths":{"reg.example":{"auth":"dXNlcjpwYXNz"},"http://127.0.0.1:5000":{"username":"a","password":"b"}},
                "credHelpers":{"helped.example":"erdma-test-missing"}}"#,
        )
        .unwrap();
        // Env is process-wide; this is the only test that sets it.
        std::env::set_var("REGISTRY_AUTH_FILE", &file);
        assert!(matches!(credentials("reg.example").unwrap(), RegistryAuth::Basic(u, p) if u == "user" && p == "pass"));
        assert!(matches!(credentials("127.0.0.1:5000").unwrap(), RegistryAuth::Basic(u, _) if u == "a"));
        let e = credentials("helped.example").unwrap_err().to_string();
        assert!(e.contains("docker-credential-erdma-test-missing"), "{e}");
        std::env::remove_var("REGISTRY_AUTH_FILE");
    }
}
