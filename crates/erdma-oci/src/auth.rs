//! Registry credentials as docker, podman and skopeo read them: the auth files in the order of
//! containers-auth.json(5) (see [`auth_files`]), their `auths` (keys normalised as Docker and
//! containers/image do, repository-scoped keys honoured), `credHelpers` and `credsStore`; and
//! the exchange of a stored identity token for an access token ([`access_token`]).
//!
//! Our own code rather than the `docker_credential` crate: that crate reads only Docker's
//! config.json (no Podman paths, no repository-scoped keys) and hands an identity token back
//! as is, while the exchange with the registry's token service is most of what is needed here.
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

use crate::error::{Error, Result};

/// What the configuration holds for one repository.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// Anonymous, user and password, or a registry token: `oci-client` uses these as they are.
    Auth(RegistryAuth),
    /// An OAuth2 refresh token (`identitytoken`, or a helper's `<token>` reply), to be exchanged
    /// for an access token at the registry's token service before each use.
    IdentityToken(String),
}

impl std::fmt::Debug for Credential {
    // Never print a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Auth(RegistryAuth::Anonymous) => f.write_str("Anonymous"),
            Credential::Auth(RegistryAuth::Basic(u, _)) => write!(f, "Basic({u}, <redacted>)"),
            Credential::Auth(RegistryAuth::Bearer(_)) => f.write_str("Bearer(<redacted>)"),
            Credential::IdentityToken(_) => f.write_str("IdentityToken(<redacted>)"),
        }
    }
}

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
    #[serde(default)]
    registrytoken: Option<String>,
}

/// The environment [`auth_files`] reads, apart so that tests need not touch the process's.
#[derive(Debug, Default, Clone)]
pub struct AuthEnv {
    pub registry_auth_file: Option<PathBuf>,
    pub xdg_runtime_dir: Option<PathBuf>,
    pub xdg_config_home: Option<PathBuf>,
    pub docker_config: Option<PathBuf>,
    pub home: Option<PathBuf>,
    pub uid: Option<u32>,
}

impl AuthEnv {
    pub fn from_process() -> AuthEnv {
        use std::os::unix::fs::MetadataExt as _;
        // Empty variables count as unset, as in containers/image.
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        AuthEnv {
            registry_auth_file: var("REGISTRY_AUTH_FILE"),
            xdg_runtime_dir: var("XDG_RUNTIME_DIR"),
            xdg_config_home: var("XDG_CONFIG_HOME"),
            docker_config: var("DOCKER_CONFIG"),
            home: var("HOME"),
            // The owner of /proc/self is our effective uid; no libc call needed.
            uid: std::fs::metadata("/proc/self").ok().map(|m| m.uid()),
        }
    }
}

/// One file to search, and whether it is the legacy `~/.dockercfg` format (the `auths` map alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthPath {
    pub path: PathBuf,
    pub legacy: bool,
}

/// The files to search, in order; the first one holding credentials for the repository wins.
///
/// containers-auth.json(5) (containers/image `docs/containers-auth.json.5.md`): "When searching
/// for the credential for a registry, the following files will be read in sequence until the
/// valid credential is found: first reading the primary (read/write) file, or the explicit
/// override using an option of the calling application. If credentials are not present, search
/// in `${XDG_CONFIG_HOME}/containers/auth.json` (usually `~/.config/containers/auth.json`),
/// `$HOME/.docker/config.json`, `$HOME/.dockercfg`." The primary file is
/// `${XDG_RUNTIME_DIR}/containers/auth.json`, `/run/containers/$UID/auth.json` without
/// `XDG_RUNTIME_DIR` (`getPathToAuthWithOS` in `pkg/docker/config/config.go`); podman and
/// skopeo take the override from `REGISTRY_AUTH_FILE`, and `DOCKER_CONFIG` moves Docker's file
/// (`getAuthFilePaths`). We follow the man page: the override replaces the primary file and the
/// others are still searched. (containers/image's code stops after an override; reading more
/// finds credentials it would not, never fewer.)
pub fn auth_files(env: &AuthEnv) -> Vec<AuthPath> {
    let file = |path: PathBuf| AuthPath { path, legacy: false };
    let mut files = Vec::new();
    if let Some(f) = &env.registry_auth_file {
        files.push(file(f.clone()));
    } else if let Some(d) = &env.xdg_runtime_dir {
        files.push(file(d.join("containers/auth.json")));
    } else if let Some(uid) = env.uid {
        files.push(file(PathBuf::from(format!("/run/containers/{uid}/auth.json"))));
    }
    let config_home =
        env.xdg_config_home.clone().or_else(|| env.home.as_ref().map(|h| h.join(".config")));
    if let Some(c) = config_home {
        files.push(file(c.join("containers/auth.json")));
    }
    if let Some(d) = &env.docker_config {
        files.push(file(d.join("config.json")));
    } else if let Some(h) = &env.home {
        files.push(file(h.join(".docker/config.json")));
    }
    if let Some(h) = &env.home {
        files.push(AuthPath { path: h.join(".dockercfg"), legacy: true });
    }
    files
}

/// Docker Hub's names all mean one registry (containers/image `normalizeRegistry`; Docker
/// stores Hub logins under `https://index.docker.io/v1/`).
fn normalize_host(host: &str) -> String {
    let host = host.to_ascii_lowercase();
    match host.as_str() {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" => "docker.io".into(),
        _ => host,
    }
}

/// The registry an `auths` key names, and the repository namespace it is scoped to, if any.
///
/// `https://host/v2/`, `http://host`, `host/` and `host` all mean `host`: Docker's
/// `ConvertToHostname` drops a scheme and any path, and `docker login` wrote URL keys for years
/// (Hub still has `https://index.docker.io/v1/`). A key without a scheme but with a path,
/// `host/namespace/repo`, is containers-auth.json(5)'s repository-scoped entry; the legacy
/// `.dockercfg` has none of those.
pub fn parse_key(key: &str, legacy: bool) -> (String, Option<String>) {
    let (stripped, had_scheme) = match key.split_once("://") {
        Some((_, rest)) => (rest, true),
        None => (key, false),
    };
    let (host, path) = stripped.split_once('/').unwrap_or((stripped, ""));
    let path = path.trim_end_matches('/');
    let scoped = (!had_scheme && !legacy && !path.is_empty()).then(|| path.to_string());
    (normalize_host(host), scoped)
}

/// How well an `auths` key fits `repository` on `registry`: `None` when it does not,
/// otherwise the length of its namespace (most specific wins).
fn key_fits(key: &str, legacy: bool, registry: &str, repository: &str) -> Option<usize> {
    let (host, scope) = parse_key(key, legacy);
    if host != normalize_host(registry) {
        return None;
    }
    match scope {
        None => Some(0),
        Some(ns) => {
            let inside = repository == ns
                || repository.strip_prefix(ns.as_str()).is_some_and(|rest| rest.starts_with('/'));
            inside.then_some(ns.len())
        }
    }
}

/// The address to ask a credential helper for: Docker asks for Hub as `https://index.docker.io/v1/`.
fn helper_server(registry: &str) -> String {
    if normalize_host(registry) == "docker.io" {
        "https://index.docker.io/v1/".into()
    } else {
        registry.to_string()
    }
}

/// Credentials for `repository` on `registry` from the files of the process's environment,
/// anonymous when none are configured.
pub fn credentials(registry: &str, repository: &str) -> Result<Credential> {
    credentials_in(&auth_files(&AuthEnv::from_process()), registry, repository)
}

/// Like [`credentials`], searching `files`.
pub fn credentials_in(files: &[AuthPath], registry: &str, repository: &str) -> Result<Credential> {
    for file in files {
        if let Some(c) = credentials_in_file(file, registry, repository)? {
            return Ok(c);
        }
    }
    Ok(Credential::Auth(RegistryAuth::Anonymous))
}

fn credentials_in_file(
    file: &AuthPath,
    registry: &str,
    repository: &str,
) -> Result<Option<Credential>> {
    let path = &file.path;
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("reading credentials", path)(e)),
    };
    let bad_json = |source| Error::AuthConfig { path: path.clone(), source };
    let parsed: AuthFile = if file.legacy {
        AuthFile { auths: serde_json::from_slice(&text).map_err(bad_json)?, ..Default::default() }
    } else {
        serde_json::from_slice(&text).map_err(bad_json)?
    };
    // A helper for the registry comes first (helpers know no repository scopes).
    let mut helpers: Vec<(&String, &String)> = parsed
        .cred_helpers
        .iter()
        .filter(|(k, _)| parse_key(k, false) == (normalize_host(registry), None))
        .collect();
    helpers.sort();
    if let Some((_, helper)) = helpers.first() {
        return helper_get(helper, &helper_server(registry)).map(Some);
    }
    // The most specific key; among equals, the one spelled as the bare host, then by name, so
    // that the choice never depends on the map's order.
    let best = parsed
        .auths
        .iter()
        .filter_map(|(k, e)| key_fits(k, file.legacy, registry, repository).map(|n| (n, k, e)))
        .max_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| (b.1 != registry).cmp(&(a.1 != registry)))
                .then_with(|| b.1.cmp(a.1))
        });
    if let Some((_, _, entry)) = best {
        if let Some(c) = entry_credential(entry, path)? {
            return Ok(Some(c));
        }
    }
    // `docker login` with a credsStore leaves `{}` in `auths`: the store has the secret.
    if let Some(store) = parsed.creds_store.as_deref().filter(|s| !s.is_empty()) {
        return helper_get(store, &helper_server(registry)).map(Some);
    }
    Ok(None)
}

fn entry_credential(entry: &AuthEntry, path: &Path) -> Result<Option<Credential>> {
    let nonempty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
    if let Some(token) = nonempty(&entry.identitytoken) {
        return Ok(Some(Credential::IdentityToken(token)));
    }
    if let Some(token) = nonempty(&entry.registrytoken) {
        return Ok(Some(Credential::Auth(RegistryAuth::Bearer(token))));
    }
    if let (Some(u), Some(p)) = (nonempty(&entry.username), &entry.password) {
        return Ok(Some(Credential::Auth(RegistryAuth::Basic(u, p.clone()))));
    }
    let Some(auth) = nonempty(&entry.auth) else { return Ok(None) };
    let bad = || Error::Malformed {
        what: "`auth` entry",
        reference: path.display().to_string(),
        reason: "expected base64 of user:password".into(),
    };
    let decoded =
        base64::engine::general_purpose::STANDARD.decode(auth.trim()).map_err(|_| bad())?;
    let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
    let (u, p) = decoded.split_once(':').ok_or_else(bad)?;
    // containers/image trims NULs some tools padded the password with.
    Ok(Some(Credential::Auth(RegistryAuth::Basic(u.to_string(), p.trim_matches('\0').to_string()))))
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HelperReply {
    username: String,
    secret: String,
}

/// Runs `docker-credential-HELPER get` with the server address on stdin (the
/// docker-credential-helpers protocol). A `<token>` user means the secret is an identity token.
fn helper_get(helper: &str, server: &str) -> Result<Credential> {
    let fail = |reason: &str, source: Option<crate::error::Cause>| Error::CredentialHelper {
        helper: helper.into(),
        registry: server.into(),
        reason: reason.into(),
        source,
    };
    use crate::error::cause;
    let mut child = Command::new(format!("docker-credential-{helper}"))
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail("cannot run it", cause(e)))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(server.as_bytes())
        .map_err(|e| fail("writing the server address to it", cause(e)))?;
    let out = child.wait_with_output().map_err(|e| fail("reading its answer", cause(e)))?;
    if !out.status.success() {
        let msg = String::from_utf8_lossy(&out.stdout).trim().to_string();
        // "credentials not found in native keychain" means: no credentials, go anonymous.
        if msg.contains("not found") {
            return Ok(Credential::Auth(RegistryAuth::Anonymous));
        }
        return Err(fail(&format!("{}: {msg}", out.status), None));
    }
    let reply: HelperReply =
        serde_json::from_slice(&out.stdout).map_err(|e| fail("unreadable reply", cause(e)))?;
    if reply.username == "<token>" {
        return Ok(Credential::IdentityToken(reply.secret));
    }
    Ok(Credential::Auth(RegistryAuth::Basic(reply.username, reply.secret)))
}

/// A `Bearer` challenge from `WWW-Authenticate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BearerChallenge {
    pub realm: String,
    pub service: Option<String>,
}

/// Finds the `Bearer` challenge among `WWW-Authenticate` values (RFC 7235 §4.1: a value may
/// hold several challenges, each `scheme` followed by `name=value` or `name="quoted"` params).
pub fn bearer_challenge<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<BearerChallenge> {
    for value in values {
        let mut scheme: Option<String> = None;
        let mut params: HashMap<String, String> = HashMap::new();
        let mut rest = value.trim();
        let done = |scheme: &Option<String>, params: &mut HashMap<String, String>| {
            let bearer = scheme.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("bearer"));
            let realm = params.remove("realm").filter(|_| bearer)?;
            Some(BearerChallenge { realm, service: params.remove("service") })
        };
        while !rest.is_empty() {
            rest = rest.trim_start_matches([',', ' ', '\t']);
            let end = rest.find(['=', ',', ' ', '\t']).unwrap_or(rest.len());
            let (token, after) = rest.split_at(end);
            if token.is_empty() {
                break;
            }
            if let Some(after) = after.strip_prefix('=') {
                let after = after.trim_start();
                let (val, next) = if let Some(q) = after.strip_prefix('"') {
                    let mut val = String::new();
                    let mut chars = q.char_indices();
                    let mut end = q.len();
                    while let Some((i, c)) = chars.next() {
                        match c {
                            '\\' => val.extend(chars.next().map(|(_, c)| c)),
                            '"' => {
                                end = i + 1;
                                break;
                            }
                            c => val.push(c),
                        }
                    }
                    (val, &q[end..])
                } else {
                    let end = after.find([',', ' ', '\t']).unwrap_or(after.len());
                    (after[..end].to_string(), &after[end..])
                };
                params.insert(token.to_ascii_lowercase(), val);
                rest = next;
            } else {
                // A new scheme: the previous challenge is complete.
                if let Some(c) = done(&scheme, &mut params) {
                    return Some(c);
                }
                params.clear();
                scheme = Some(token.to_string());
                rest = after;
            }
        }
        if let Some(c) = done(&scheme, &mut params) {
            return Some(c);
        }
    }
    None
}

/// An access token from the registry's token service.
#[derive(Clone)]
pub struct AccessToken {
    pub token: String,
    /// Seconds, when the service said (`expires_in`).
    pub expires_in: Option<u64>,
}

#[derive(Deserialize)]
struct TokenReply {
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// `application/x-www-form-urlencoded` (WHATWG URL §5.2): unreserved bytes as they are, space as `+`.
fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The OAuth2 refresh-token grant of the Docker token specification
/// (distribution `docs/spec/auth/oauth.md`), as Docker and containers/image send it.
pub fn refresh_form(refresh_token: &str, service: Option<&str>, scopes: &[String]) -> String {
    let mut fields = vec![("grant_type", "refresh_token"), ("refresh_token", refresh_token)];
    if let Some(s) = service {
        fields.push(("service", s));
    }
    fields.extend(scopes.iter().map(|s| ("scope", s.as_str())));
    fields.push(("client_id", "erdma-build"));
    fields.iter().map(|(k, v)| format!("{k}={}", form_encode(v))).collect::<Vec<_>>().join("&")
}

pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// How [`access_token`] asks the registry's token service for an access token.
#[derive(Clone, Copy)]
pub enum Grant<'a> {
    /// The OAuth2 refresh-token grant with an identity token (`POST`, `oauth.md`).
    Refresh(&'a str),
    /// User and password, as HTTP basic auth on `GET realm?service=…&scope=…` (`token.md`).
    Password(&'a str, &'a str),
    /// `GET realm?service=…&scope=…` without credentials: the anonymous token of a public
    /// repository.
    Anonymous,
}

/// The most of a token service's reply that is read: a JWT of a few KiB, far below.
pub const MAX_TOKEN_REPLY: u64 = 1 << 20;

/// Why [`access_token`] got no token.
#[derive(Debug)]
pub enum TokenError {
    /// The registry or its realm could not be reached (retried as any registry request).
    Transport(reqwest::Error),
    /// The realm refused the password, or an anonymous token (401, 403), with its status.
    Refused(reqwest::StatusCode),
    /// Any other failure of the token service at `url`: what went wrong, and the error
    /// under it where there was one.
    Failed { url: String, reason: String, source: Option<crate::error::Cause> },
}

/// An access token covering `scopes` (e.g. `repository:NAME:pull,push`) from the registry's
/// token service, as `docker` and containers/image get one: ping `BASE/v2/`, read the `Bearer`
/// challenge, ask its realm with `grant`. `base` is `https://HOST` (or `http://` for
/// plain-HTTP registries). `Ok(None)` when the registry asks for no bearer token (requests go
/// without one, or with basic auth). The reply is read up to [`MAX_TOKEN_REPLY`]; the whole
/// exchange is bounded by [`EXCHANGE_TIMEOUT`]. `client` is the registry's, with its TLS set-up,
/// which serves its token service too (as Docker's token handler uses the registry's transport).
pub async fn access_token(
    client: &reqwest::Client,
    base: &str,
    grant: Grant<'_>,
    scopes: &[String],
) -> std::result::Result<Option<AccessToken>, TokenError> {
    let ping = format!("{base}/v2/");
    match tokio::time::timeout(EXCHANGE_TIMEOUT, exchange(client, &ping, grant, scopes)).await {
        Ok(r) => r,
        Err(_) => Err(TokenError::Failed {
            url: ping,
            reason: format!("no answer within {}s", EXCHANGE_TIMEOUT.as_secs()),
            source: None,
        }),
    }
}

async fn exchange(
    client: &reqwest::Client,
    ping: &str,
    grant: Grant<'_>,
    scopes: &[String],
) -> std::result::Result<Option<AccessToken>, TokenError> {
    let fail =
        |url: &str, reason: String| TokenError::Failed { url: url.into(), reason, source: None };
    let res = client.get(ping).send().await.map_err(TokenError::Transport)?;
    let values: Vec<&str> = res
        .headers()
        .get_all(reqwest::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let Some(challenge) = bearer_challenge(values) else {
        if res.status() == reqwest::StatusCode::UNAUTHORIZED && matches!(grant, Grant::Refresh(_)) {
            tracing::warn!(
                "{ping} asks for no bearer token; the stored identity token is not used"
            );
        }
        return Ok(None);
    };
    let realm = challenge.realm.as_str();
    // A secret goes to the realm only as protected as to the registry itself.
    if ping.starts_with("https://")
        && !realm.starts_with("https://")
        && !matches!(grant, Grant::Anonymous)
    {
        return Err(fail(realm, "the registry's token service is not HTTPS; refusing to send credentials to it in the clear".into()));
    }
    let request = match grant {
        Grant::Refresh(token) => client
            .post(realm)
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(refresh_form(token, challenge.service.as_deref(), scopes)),
        Grant::Password(..) | Grant::Anonymous => {
            let mut query: Vec<(&str, &str)> =
                challenge.service.as_deref().map(|s| ("service", s)).into_iter().collect();
            query.extend(scopes.iter().map(|s| ("scope", s.as_str())));
            let request = client.get(realm).query(&query);
            match grant {
                Grant::Password(user, password) => request.basic_auth(user, Some(password)),
                _ => request,
            }
        }
    };
    let mut res = request.send().await.map_err(TokenError::Transport)?;
    let status = res.status();
    if matches!(grant, Grant::Password(..) | Grant::Anonymous)
        && matches!(status, reqwest::StatusCode::UNAUTHORIZED | reqwest::StatusCode::FORBIDDEN)
    {
        return Err(TokenError::Refused(status));
    }
    if !status.is_success() {
        return Err(fail(realm, format!("HTTP {status}")));
    }
    let (body, over) = erdma_http::capped_body(&mut res, MAX_TOKEN_REPLY).await.map_err(|e| {
        TokenError::Failed {
            url: realm.into(),
            reason: "reading the reply".into(),
            source: crate::error::cause(e),
        }
    })?;
    if over {
        return Err(fail(realm, format!("the reply is longer than {MAX_TOKEN_REPLY} bytes, far more than any token (an endless body?)")));
    }
    token_reply(&body).map(Some).map_err(|e| {
        let reason = e.to_string();
        let source = match e {
            ReplyError::Unreadable(e) => crate::error::cause(e),
            ReplyError::NoToken => None,
        };
        TokenError::Failed { url: realm.into(), reason, source }
    })
}

/// Why a token service's reply gives no token.
#[derive(Debug, thiserror::Error)]
pub enum ReplyError {
    #[error("unreadable reply")]
    Unreadable(#[source] serde_json::Error),
    #[error("the reply holds no access_token")]
    NoToken,
}

/// A token service's reply (`token.md`, `oauth.md`): `access_token`, else `token`, and
/// `expires_in`.
pub fn token_reply(body: &[u8]) -> std::result::Result<AccessToken, ReplyError> {
    let reply: TokenReply = serde_json::from_slice(body).map_err(ReplyError::Unreadable)?;
    let token =
        reply.access_token.or(reply.token).filter(|t| !t.is_empty()).ok_or(ReplyError::NoToken)?;
    Ok(AccessToken { token, expires_in: reply.expires_in })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(c: Credential) -> (String, String) {
        match c {
            Credential::Auth(RegistryAuth::Basic(u, p)) => (u, p),
            other => panic!("not basic: {other:?}"),
        }
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

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
        let files = [AuthPath { path: file, legacy: false }];
        assert_eq!(
            basic(credentials_in(&files, "reg.example", "x").unwrap()),
            ("user".into(), "pass".into())
        );
        assert_eq!(basic(credentials_in(&files, "127.0.0.1:5000", "x").unwrap()).0, "a");
        let e = credentials_in(&files, "helped.example", "x").unwrap_err().to_string();
        assert!(e.contains("docker-credential-erdma-test-missing"), "{e}");
        assert_eq!(
            credentials_in(&files, "other.example", "x").unwrap(),
            Credential::Auth(RegistryAuth::Anonymous)
        );
    }

    #[test]
    fn keys_normalise_to_the_host() {
        for key in [
            "https://reg.example/v2/",
            "http://reg.example",
            "reg.example/",
            "reg.example",
            "https://reg.example",
            "REG.example",
        ] {
            assert_eq!(parse_key(key, false), ("reg.example".into(), None), "{key}");
        }
        assert_eq!(parse_key("http://127.0.0.1:5000/v2/", false), ("127.0.0.1:5000".into(), None));
        for key in
            ["https://index.docker.io/v1/", "docker.io", "registry-1.docker.io", "index.docker.io"]
        {
            assert_eq!(parse_key(key, false), ("docker.io".into(), None), "{key}");
        }
        assert_eq!(parse_key("quay.io/ns/repo", false), ("quay.io".into(), Some("ns/repo".into())));
        assert_eq!(parse_key("quay.io/ns/", false), ("quay.io".into(), Some("ns".into())));
        // The legacy .dockercfg has URL keys only.
        assert_eq!(parse_key("quay.io/v1/", true), ("quay.io".into(), None));
        // A scheme means a URL: its path is the API's, not a namespace.
        assert_eq!(parse_key("https://quay.io/ns/repo", false), ("quay.io".into(), None));
        assert_eq!(helper_server("index.docker.io"), "https://index.docker.io/v1/");
        assert_eq!(helper_server("quay.io"), "quay.io");
    }

    #[test]
    fn most_specific_key_wins() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("auth.json");
        let json = serde_json::json!({"auths": {
            "https://quay.io/v2/": {"auth": b64("host:1")},
            "quay.io/ns": {"auth": b64("ns:2")},
            "quay.io/ns/repo": {"auth": b64("repo:3")},
            "quay.io/nsx": {"auth": b64("nsx:4")},
            "https://index.docker.io/v1/": {"auth": b64("hub:5")},
            "docker.io/library": {"identitytoken": "REFRESH"},
        }});
        std::fs::write(&file, json.to_string()).unwrap();
        let files = [AuthPath { path: file, legacy: false }];
        let user = |reg: &str, repo: &str| basic(credentials_in(&files, reg, repo).unwrap()).0;
        assert_eq!(user("quay.io", "ns/repo"), "repo");
        assert_eq!(user("quay.io", "ns/repo/sub"), "repo");
        assert_eq!(user("quay.io", "ns/other"), "ns");
        assert_eq!(user("quay.io", "ns"), "ns");
        // A namespace matches whole path segments only.
        assert_eq!(user("quay.io", "nsxy/a"), "host");
        assert_eq!(user("quay.io", "nsx/a"), "nsx");
        assert_eq!(user("quay.io", "other/x"), "host");
        // Hub's legacy key, under the name oci-client resolves Hub to.
        assert_eq!(user("index.docker.io", "someone/app"), "hub");
        assert_eq!(
            credentials_in(&files, "index.docker.io", "library/debian").unwrap(),
            Credential::IdentityToken("REFRESH".into())
        );
    }

    #[test]
    fn the_bare_host_key_wins_over_its_url_spellings() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.json");
        let json = serde_json::json!({"auths": {
            "https://reg.example/v1/": {"auth": b64("url:1")},
            "reg.example": {"auth": b64("bare:2")},
            "http://reg.example": {"auth": b64("http:3")},
        }});
        std::fs::write(&file, json.to_string()).unwrap();
        let files = [AuthPath { path: file, legacy: false }];
        assert_eq!(basic(credentials_in(&files, "reg.example", "a/b").unwrap()).0, "bare");
    }

    #[test]
    fn files_follow_containers_auth_json_order() {
        let p = PathBuf::from;
        let env = AuthEnv {
            registry_auth_file: None,
            xdg_runtime_dir: Some(p("/run/user/1000")),
            xdg_config_home: None,
            docker_config: None,
            home: Some(p("/home/u")),
            uid: Some(1000),
        };
        let paths = |env: &AuthEnv| {
            auth_files(env).into_iter().map(|a| (a.path, a.legacy)).collect::<Vec<_>>()
        };
        assert_eq!(
            paths(&env),
            vec![
                (p("/run/user/1000/containers/auth.json"), false),
                (p("/home/u/.config/containers/auth.json"), false),
                (p("/home/u/.docker/config.json"), false),
                (p("/home/u/.dockercfg"), true),
            ]
        );
        let env = AuthEnv {
            registry_auth_file: Some(p("/etc/auth.json")),
            xdg_config_home: Some(p("/cfg")),
            docker_config: Some(p("/dc")),
            ..env
        };
        assert_eq!(
            paths(&env),
            vec![
                (p("/etc/auth.json"), false),
                (p("/cfg/containers/auth.json"), false),
                (p("/dc/config.json"), false),
                (p("/home/u/.dockercfg"), true)
            ]
        );
        // Without XDG_RUNTIME_DIR the primary file is per uid under /run; without HOME only that.
        let env = AuthEnv { uid: Some(0), ..Default::default() };
        assert_eq!(paths(&env), vec![(p("/run/containers/0/auth.json"), false)]);
    }

    #[test]
    fn first_file_with_credentials_wins() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = dir.path().join("run/containers/auth.json");
        let docker = dir.path().join("docker/config.json");
        let legacy = dir.path().join(".dockercfg");
        std::fs::create_dir_all(runtime.parent().unwrap()).unwrap();
        std::fs::create_dir_all(docker.parent().unwrap()).unwrap();
        std::fs::write(&runtime, serde_json::json!({"auths": {"podman.example": {"auth": b64("podman:1")}, "both.example": {"auth": b64("podman:2")}}}).to_string()).unwrap();
        std::fs::write(&docker, serde_json::json!({"auths": {"both.example": {"auth": b64("docker:3")}, "docker.example": {"identitytoken": "T"}}}).to_string()).unwrap();
        std::fs::write(
            &legacy,
            serde_json::json!({"https://old.example/v1/": {"auth": b64("old:4"), "email": "x@y"}})
                .to_string(),
        )
        .unwrap();
        let env = AuthEnv {
            xdg_runtime_dir: Some(dir.path().join("run")),
            docker_config: Some(dir.path().join("docker")),
            home: Some(dir.path().to_path_buf()),
            ..Default::default()
        };
        let files = auth_files(&env);
        assert_eq!(basic(credentials_in(&files, "podman.example", "r").unwrap()).0, "podman");
        assert_eq!(basic(credentials_in(&files, "both.example", "r").unwrap()).0, "podman");
        assert_eq!(
            credentials_in(&files, "docker.example", "r").unwrap(),
            Credential::IdentityToken("T".into())
        );
        assert_eq!(basic(credentials_in(&files, "old.example", "r").unwrap()).0, "old");
        // A broken file is an error naming it, not a silent anonymous pull.
        std::fs::write(&runtime, "{").unwrap();
        let e = credentials_in(&files, "docker.example", "r").unwrap_err().to_string();
        assert!(e.contains(&runtime.display().to_string()), "{e}");
    }

    #[test]
    fn bearer_challenges() {
        let c = bearer_challenge([r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/debian:pull""#]).unwrap();
        assert_eq!(
            c,
            BearerChallenge {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into())
            }
        );
        let c = bearer_challenge([
            r#"Basic realm="x""#,
            r#"Basic realm="y", bearer realm=http://127.0.0.1:1/token, service="a \"q\" b""#,
        ])
        .unwrap();
        assert_eq!(
            c,
            BearerChallenge {
                realm: "http://127.0.0.1:1/token".into(),
                service: Some(r#"a "q" b"#.into())
            }
        );
        assert_eq!(bearer_challenge([r#"Basic realm="registry""#]), None);
        assert_eq!(bearer_challenge([]), None);
    }

    #[test]
    fn refresh_grant_form() {
        let scopes = vec!["repository:a/b:pull,push".to_string(), "repository:c:pull".to_string()];
        assert_eq!(
            refresh_form("t&k=+ n", Some("reg service"), &scopes),
            "grant_type=refresh_token&refresh_token=t%26k%3D%2B+n&service=reg+service&scope=repository%3Aa%2Fb%3Apull%2Cpush&scope=repository%3Ac%3Apull&client_id=erdma-build"
        );
    }
}
