//! Registry access, with credentials and bounded retries: the distribution API's few calls
//! erdma-build needs, made here with one HTTP client.
//!
//! What a registry sends is read bounded: access tokens from its token service
//! ([`crate::auth::access_token`], 1 MiB of reply), manifests (8 MiB), blobs (their
//! descriptor's size, the digest checked as they stream) and any other answer (64 KiB). Blobs
//! go up in one streamed `PUT`. oci-client is kept for its types (references, errors); its
//! client read token replies, manifests and error answers whole, and is not used.
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::stream::BoxStream;
use oci_client::errors::{DigestError, OciDistributionError, OciEnvelope, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::Reference;

use crate::auth::Credential;
use crate::error::{Error, Result};
use crate::registries_conf::{ConfEnv, RegistriesConf};
use crate::tls::{CertEnv, TlsFailure};
use crate::transport::host_of;
use erdma_limits::Exceeded;
use erdma_limits::MAX_JSON;

pub const MANIFEST_TYPES: &[&str] = &[
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// Attempts per call, including the first. Connection resets, timeouts and 5xx are retried.
const ATTEMPTS: u32 = 4;

/// How long before its end an access token is replaced: the token specification promises at
/// least 60 s when `expires_in` is missing, and no longer is assumed.
const TOKEN_MARGIN: Duration = Duration::from_secs(15);
const TOKEN_LIFETIME_DEFAULT: u64 = 60;

/// How much of a registry's error answer is read: an OCI error envelope is a few hundred bytes.
const ERROR_BODY: u64 = 64 << 10;

/// How erdma-build reaches registries: `--insecure-registry` and `--cert-dir` (build, plan
/// and check take the same).
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// Registries (host or host:port) whose certificates are not verified and that may be
    /// reached over plain HTTP.
    pub insecure: Vec<String>,
    /// One directory of certificates for every registry, in place of the certs.d lookup.
    pub cert_dir: Option<std::path::PathBuf>,
}

pub struct Registries {
    backoff: Duration,
    insecure: Vec<String>,
    /// Where each registry's CAs and client certificate are ([`crate::tls`]).
    certs: CertEnv,
    /// containers-registries.conf(5): mirrors and locations for pulls, blocked names; read on
    /// first use, so that a build touching no registry does not depend on it.
    conf: Mutex<Option<Arc<RegistriesConf>>>,
    /// (registry, repository) of the mirrors and locations pulls went to whose registries.conf
    /// entry says `insecure`.
    conf_insecure: Mutex<BTreeSet<(String, String)>>,
    /// How each registry is reached, per (registry, insecure), found on first use
    /// ([`Registries::endpoint`]).
    endpoints: Mutex<HashMap<(String, bool), EndpointCell>>,
    /// Credentials per (registry, repository), read once.
    creds: Mutex<HashMap<(String, String), Credential>>,
    /// Access tokens we got from the registries' token services, per (registry, repository,
    /// push). One exchange at a time, so that parallel blob copies do not each make their own.
    exchanged: tokio::sync::Mutex<HashMap<(String, String, bool), Exchanged>>,
}

/// One registry as it is reached: `SCHEME://HOST[:PORT]`, and a client holding its TLS set-up
/// (timeouts: connect 15 s, read 120 s).
struct Endpoint {
    base: String,
    client: reqwest::Client,
}

/// An endpoint once it is decided; requests racing to it wait for the one decision.
type EndpointCell = Arc<tokio::sync::OnceCell<Arc<Endpoint>>>;

/// An access token for a repository.
struct Exchanged {
    /// Other repositories of the registry the token may pull from (cross-repository mounts).
    also_pull: BTreeSet<String>,
    renew_at: Instant,
    /// The access token; `None` when the registry asked for none.
    token: Option<String>,
}

/// `REGISTRY/REPOSITORY` as the user named it (`docker.io`, not the host it resolves to): what
/// registries.conf prefixes match.
fn conf_name(r: &Reference) -> String {
    format!("{}/{}", r.registry(), r.repository())
}

/// `r`'s tag or digest on the image `name`.
fn with_name(r: &Reference, name: &str) -> Result<Reference> {
    let whole = match (r.digest(), r.tag()) {
        (Some(d), _) => format!("{name}@{d}"),
        (None, Some(t)) => format!("{name}:{t}"),
        (None, None) => name.to_string(),
    };
    crate::reference::parse(&whole)
        .map_err(|source| Error::RewrittenReference { reference: whole.clone(), source })
}

/// Loopback registries (`127.0.0.0/8`, `::1`, `localhost`): tried over HTTPS first, then plain
/// HTTP (`Registries::new_endpoint`). Addresses are parsed, not matched as text: a name such
/// as `127.0.0.1.example` is a host name like any other.
pub fn is_loopback(registry: &str) -> bool {
    let host = host_of(registry);
    if host == "localhost" {
        return true;
    }
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Registries named with `--insecure-registry` (as `HOST` or `HOST:PORT`).
pub fn is_named_insecure(registry: &str, insecure: &[String]) -> bool {
    insecure.iter().any(|i| i == registry || i == host_of(registry))
}

impl Registries {
    pub fn new(opts: &RegistryOptions) -> Self {
        let backoff = std::env::var("ERDMA_BUILD_RETRY_BACKOFF_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_millis)
            .unwrap_or(Duration::from_millis(500));
        Registries {
            backoff,
            insecure: opts.insecure.clone(),
            certs: CertEnv::from_process(opts.cert_dir.clone()),
            conf: Mutex::default(),
            conf_insecure: Mutex::default(),
            endpoints: Default::default(),
            creds: Mutex::default(),
            exchanged: Default::default(),
        }
    }

    /// registries.conf, read the first time a registry is named.
    fn conf(&self) -> Result<Arc<RegistriesConf>> {
        let mut conf = self.conf.lock().expect("poisoned");
        if let Some(c) = conf.as_ref() {
            return Ok(c.clone());
        }
        let loaded = Arc::new(RegistriesConf::load(&ConfEnv::from_process())?);
        for unknown in &loaded.unknown_keys {
            tracing::warn!("{unknown} (ignored, as Podman and skopeo ignore it)");
        }
        *conf = Some(loaded.clone());
        Ok(loaded)
    }

    /// The manifest (or index) `r` names, from the first source registries.conf gives for it
    /// that serves it: its mirrors in order, then its location (containers-registries.conf(5),
    /// "Remapping and mirroring registries"), with the reference it was read from. A mirror that
    /// fails is passed over with a warning; the last source's failure is the error.
    pub async fn pull_manifest(&self, r: &Reference) -> Result<(Bytes, String, Reference)> {
        let sources = self.conf()?.pull_sources(&conf_name(r), r.digest().is_some())?;
        let last = sources.len().saturating_sub(1);
        let mut failed = None;
        for (i, source) in sources.into_iter().enumerate() {
            let got = match with_name(r, &source.name) {
                Ok(at) => {
                    if source.insecure {
                        self.conf_insecure.lock().expect("poisoned").insert((
                            at.resolve_registry().to_string(),
                            at.repository().to_string(),
                        ));
                    }
                    self.manifest(&at).await.map(|(body, digest)| (body, digest, at))
                }
                Err(e) => Err(e),
            };
            match got {
                Ok(got) => return Ok(got),
                Err(e) if i < last => {
                    let why = erdma_common::errors::chain(&e);
                    let kind = if source.mirror { "mirror" } else { "location" };
                    tracing::warn!("reading {} from {kind} {} failed ({why}); trying the next source registries.conf names", r.whole(), source.name);
                }
                Err(e) => failed = Some(e),
            }
        }
        Err(failed.unwrap_or_else(|| Error::ManifestUnknown { reference: r.whole() }))
    }

    /// Whether `r` may be reached without checking certificates, and over plain HTTP where its
    /// registry does not speak HTTPS: `--insecure-registry` names its host, registries.conf's
    /// entry for it says `insecure`, or it is the mirror or location a pull went to and that
    /// one's entry says so. Per repository, as containers/image decides it per reference: an
    /// insecure entry for one prefix leaves the rest of its host checked.
    fn insecure_for(&self, r: &Reference) -> Result<bool> {
        let host = r.resolve_registry();
        Ok(is_named_insecure(host, &self.insecure)
            || self
                .conf_insecure
                .lock()
                .expect("poisoned")
                .contains(&(host.to_string(), r.repository().to_string()))
            || self.conf()?.insecure(&conf_name(r)))
    }

    /// How `r`'s registry is reached, decided on first use (one decision per registry and
    /// `insecure`, made once even when requests race to it, without holding up other registries).
    async fn endpoint(&self, r: &Reference) -> Result<Arc<Endpoint>> {
        let registry = r.resolve_registry().to_string();
        let insecure = self.insecure_for(r)?;
        let cell = self
            .endpoints
            .lock()
            .expect("poisoned")
            .entry((registry.clone(), insecure))
            .or_default()
            .clone();
        cell.get_or_try_init(|| self.new_endpoint(&registry, insecure)).await.cloned()
    }

    /// HTTPS, with the CAs and client certificate of the registry's certs.d folder beside the
    /// system store. A loopback registry, or an insecure one, is pinged over HTTPS first and
    /// reached over plain HTTP only when it answers in plain HTTP, not TLS, or when HTTPS fails
    /// and plain HTTP answers (Docker's rule for insecure registries, "Test an insecure registry"
    /// in Docker's documentation; containers/image pings both the same way). Only an insecure one
    /// also skips certificate checks: a loopback registry that speaks TLS has its certificate
    /// verified, and a certificate failure the ping meets is reported at once.
    async fn new_endpoint(&self, registry: &str, insecure: bool) -> Result<Arc<Endpoint>> {
        let files = crate::tls::cert_files(&self.certs, registry)?;
        let mut builder = erdma_http::reqwest_builder()
            .connect_timeout(Duration::from_secs(15))
            .read_timeout(Duration::from_secs(120))
            .user_agent(concat!("erdma-build/", env!("CARGO_PKG_VERSION")))
            .tls_certs_merge(files.cas)
            .tls_danger_accept_invalid_certs(insecure);
        if let Some(id) = files.identity {
            builder = builder.identity(id);
        }
        let client = builder.build().map_err(|e| Error::CertFile {
            path: files.dir.unwrap_or_else(|| self.certs.suggested(registry)),
            reason: "cannot set up TLS with these certificates".into(),
            source: crate::error::cause(e),
        })?;
        let (https, http) = (format!("https://{registry}"), format!("http://{registry}"));
        let mut base = https.clone();
        if insecure || is_loopback(registry) {
            let ping = |base: &str| {
                client.get(format!("{base}/v2/")).timeout(Duration::from_secs(15)).send()
            };
            if let Err(e) = ping(&https).await {
                let plain = match erdma_http::tls_failure(&e) {
                    Some(TlsFailure::NotTls) => true,
                    // A certificate we cannot trust, or a client certificate it wants: never a
                    // reason for plain HTTP, and said now. The requests after it would meet it
                    // again, but not always as clearly: under TLS 1.3 the registry refuses a
                    // client certificate after the handshake, and a request racing that close
                    // fails as "connection was not ready", which is retried.
                    Some(f) => return Err(self.tls_error(registry, f)),
                    // Refused, reset, timed out: plain HTTP only if it answers there, and not
                    // with the 400 a TLS server gives a plain request (Go's "client sent an HTTP
                    // request to an HTTPS server", nginx's "plain HTTP request was sent to HTTPS
                    // port"). A 5xx is a plain-HTTP registry having a bad moment: still HTTP.
                    None => ping(&http)
                        .await
                        .is_ok_and(|res| res.status() != reqwest::StatusCode::BAD_REQUEST),
                };
                if plain {
                    base = http;
                    if !is_loopback(registry) {
                        tracing::warn!("{registry} does not speak HTTPS: using plain HTTP, as it is named insecure");
                    }
                }
            }
        }
        Ok(Arc::new(Endpoint { base, client }))
    }

    /// [`Error::Tls`] for `failure` at `registry`, with where its certificates go.
    fn tls_error(&self, registry: &str, failure: TlsFailure) -> Error {
        // TLS 1.2 has no "certificate required" alert: a server wanting a certificate it did not
        // get says bad_certificate or handshake_failure, as for one it refuses.
        let failure = match failure {
            TlsFailure::ClientCertRefused
                if !crate::tls::has_client_cert(&self.certs, registry) =>
            {
                TlsFailure::ClientCertRequired
            }
            f => f,
        };
        let hint = crate::tls::hint(&failure, registry, &self.certs);
        Error::Tls { registry: registry.to_string(), failure: failure.to_string(), hint }
    }

    /// The credentials for `r`'s repository, from [`crate::auth`] the first time.
    fn credential(&self, r: &Reference) -> Result<Credential> {
        let key = (r.resolve_registry().to_string(), r.repository().to_string());
        if let Some(c) = self.creds.lock().expect("poisoned").get(&key) {
            return Ok(c.clone());
        }
        let c = crate::auth::credentials(&key.0, &key.1)?;
        self.creds.lock().expect("poisoned").insert(key, c.clone());
        Ok(c)
    }

    /// Logs in for pulling from `r`, or pushing to it (which includes pulling): once per
    /// (registry, repository, op) with user and password, and again before an access token
    /// from an identity token runs out.
    pub async fn login(&self, r: &Reference, push: bool) -> Result<()> {
        self.login_also_pulling(r, push, None).await
    }

    /// [`Registries::login`], with pull access to `from` (another repository of the same
    /// registry) as well: a cross-repository mount needs both.
    async fn login_also_pulling(
        &self,
        r: &Reference,
        push: bool,
        from: Option<&Reference>,
    ) -> Result<()> {
        use crate::auth::Grant;
        if push {
            // Pushes go to the name itself, never a mirror or a location; blocked names are refused.
            // (Its `insecure` is the entry's, which insecure_for reads.)
            self.conf()?.push_destination(&conf_name(r))?;
        }
        let cred = self.credential(r)?;
        let grant = match &cred {
            Credential::IdentityToken(t) => Grant::Refresh(t),
            Credential::Auth(RegistryAuth::Basic(user, password)) => {
                Grant::Password(user, password)
            }
            Credential::Auth(RegistryAuth::Anonymous) => Grant::Anonymous,
            // A registry token given as it is: sent as it is ([`Registries::authorization`]).
            Credential::Auth(RegistryAuth::Bearer(_)) => return Ok(()),
        };
        self.exchange(r, push, from, grant).await
    }

    /// Gets an access token to `r` (and `from`) from the registry's token service unless one
    /// that covers them is still fresh; [`Registries::authorization`] sends it. A push token
    /// serves pulls from the repository too.
    async fn exchange(
        &self,
        r: &Reference,
        push: bool,
        from: Option<&Reference>,
        grant: crate::auth::Grant<'_>,
    ) -> Result<()> {
        let registry = r.resolve_registry().to_string();
        let repo = r.repository().to_string();
        let from = from.map(|f| f.repository().to_string()).filter(|f| *f != repo);
        let mut exchanged = self.exchanged.lock().await;
        let now = Instant::now();
        let fresh = |push: bool| {
            exchanged
                .get(&(registry.clone(), repo.clone(), push))
                .filter(|e| {
                    e.renew_at > now && from.as_ref().is_none_or(|f| e.also_pull.contains(f))
                })
                .is_some()
        };
        if fresh(push) || (!push && fresh(true)) {
            return Ok(());
        }
        // A repository pushed to keeps a push token: a pull-only one in its place would refuse
        // the pushes after it (and a registry may refuse pulls of a repository not yet made).
        let push = push || exchanged.contains_key(&(registry.clone(), repo.clone(), true));
        let key = (registry.clone(), repo.clone(), push);
        let mut also_pull = exchanged.get(&key).map(|e| e.also_pull.clone()).unwrap_or_default();
        also_pull.extend(from);
        let mut scopes =
            vec![format!("repository:{repo}:{}", if push { "pull,push" } else { "pull" })];
        scopes.extend(also_pull.iter().map(|f| format!("repository:{f}:pull")));
        let endpoint = self.endpoint(r).await?;
        let got = self
            .retry(r, "logging in", || async {
                use crate::auth::{Grant, TokenError};
                match crate::auth::access_token(&endpoint.client, &endpoint.base, grant, &scopes)
                    .await
                {
                    Ok(t) => Ok(Ok(t)),
                    // Unreachable: retried, then reported as any registry request.
                    Err(TokenError::Transport(e)) => Err(OciDistributionError::RequestError(e)),
                    Err(TokenError::Refused(status)) => Ok(Err(Error::AuthRefused {
                        registry: registry.clone(),
                        reference: r.whole(),
                        answer: format!("the token service answered HTTP {status}"),
                    })),
                    Err(TokenError::Failed { url, reason, source }) => Ok(Err(match grant {
                        Grant::Refresh(_) => {
                            Error::TokenExchange { registry: registry.clone(), url, reason, source }
                        }
                        _ => {
                            Error::TokenService { registry: registry.clone(), url, reason, source }
                        }
                    })),
                }
            })
            .await??;
        let token = got.as_ref().map(|t| t.token.clone());
        let renew_at = match got {
            Some(t) => {
                let life = Duration::from_secs(
                    t.expires_in.unwrap_or(TOKEN_LIFETIME_DEFAULT).min(TOKEN_LIFETIME_DEFAULT),
                );
                now + life.saturating_sub(TOKEN_MARGIN)
            }
            // No bearer challenge: nothing to get, requests go without a token.
            None => now + Duration::from_secs(24 * 60 * 60),
        };
        exchanged.insert(key, Exchanged { also_pull, renew_at, token });
        Ok(())
    }

    /// Runs `f` until it succeeds, fails for good, or the attempts run out.
    pub async fn retry<T, F, Fut>(&self, r: &Reference, operation: &str, mut f: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, OciDistributionError>>,
    {
        let mut delay = self.backoff;
        for attempt in 1.. {
            match f().await {
                Ok(v) => return Ok(v),
                Err(e) if attempt < ATTEMPTS && transient(&e) => {
                    // The cause, not reqwest's "error sending request": what went wrong is what a user can act on.
                    let why = match &e {
                        OciDistributionError::RequestError(re) => erdma_common::errors::chain(re),
                        other => other.to_string(),
                    };
                    tracing::warn!("{operation} at {} failed ({why}); retrying in {delay:?} (attempt {} of {ATTEMPTS})", r.resolve_registry(), attempt + 1);
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                Err(e) => return Err(self.classify(r, operation, e)),
            }
        }
        unreachable!("the loop returns")
    }

    /// The raw manifest (or index) and its digest, computed from the bytes: a body past
    /// [`MAX_JSON`] is refused as it streams, with [`Exceeded::Manifest`].
    pub async fn manifest(&self, r: &Reference) -> Result<(Bytes, String)> {
        let auth = self.authorization(r, false).await?;
        let (client, api) = self.api(r).await?;
        let got = self
            .retry(r, "fetching manifest", || self.manifest_once(&client, &api, r, auth.clone()))
            .await?;
        let body = got.map_err(|exceeded| Error::Limit {
            what: format!("registry {}", r.resolve_registry()),
            exceeded,
        })?;
        let digest = crate::blob::sha256_digest(&body);
        if let Some(want) = r.digest() {
            if want != digest {
                return Err(Error::DigestMismatch { expected: want.to_string(), actual: digest });
            }
        }
        Ok((body, digest))
    }

    /// The `Authorization` for requests to `r`: the access token of a login for pulling (with
    /// `push`, for pushing), or HTTP basic auth where the registry asks for no bearer token.
    async fn authorization(&self, r: &Reference, push: bool) -> Result<Option<http::HeaderValue>> {
        self.login(r, push).await?;
        let key = |push| (r.resolve_registry().to_string(), r.repository().to_string(), push);
        let token = {
            let exchanged = self.exchanged.lock().await;
            let keys = if push { vec![key(true)] } else { vec![key(false), key(true)] };
            keys.iter()
                .filter_map(|k| exchanged.get(k))
                .max_by_key(|e| e.renew_at)
                .and_then(|e| e.token.clone())
        };
        match (token, self.credential(r)?) {
            (Some(t), _) => reqwest_header(&format!("Bearer {t}")).map(Some),
            (None, Credential::Auth(RegistryAuth::Basic(user, password))) => {
                use base64::Engine as _;
                let basic =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                let mut v = reqwest_header(&format!("Basic {basic}"))?;
                v.set_sensitive(true);
                Ok(Some(v))
            }
            (None, Credential::Auth(RegistryAuth::Bearer(t))) => {
                reqwest_header(&format!("Bearer {t}")).map(Some)
            }
            (None, _) => Ok(None),
        }
    }

    /// The client for `r`'s registry and `SCHEME://REGISTRY/v2/REPOSITORY/`.
    async fn api(&self, r: &Reference) -> Result<(reqwest::Client, String)> {
        let e = self.endpoint(r).await?;
        Ok((e.client.clone(), format!("{}/v2/{}/", e.base, r.repository())))
    }

    /// One GET of `r`'s manifest: `Ok(Err(_))` once the body passes [`MAX_JSON`] (final, not
    /// retried); a non-2xx answer as oci-client reports it, its body read up to [`ERROR_BODY`].
    async fn manifest_once(
        &self,
        client: &reqwest::Client,
        api: &str,
        r: &Reference,
        auth: Option<http::HeaderValue>,
    ) -> std::result::Result<std::result::Result<Bytes, Exceeded>, OciDistributionError> {
        let url = format!(
            "{api}manifests/{}{}",
            r.digest().or(r.tag()).unwrap_or("latest"),
            r.namespace().map(|ns| format!("?ns={ns}")).unwrap_or_default()
        );
        let mut res = self
            .send(client.get(&url).header(http::header::ACCEPT, MANIFEST_TYPES.join(", ")), auth)
            .await?;
        let status = res.status();
        let header = match res.headers().get("Docker-Content-Digest") {
            Some(v) => {
                Some(v.to_str().map_err(DigestError::from)?.to_owned()).filter(|v| !v.is_empty())
            }
            None => None,
        };
        let limit = if status == reqwest::StatusCode::OK { MAX_JSON } else { ERROR_BODY };
        let (body, over) = erdma_http::capped_body(&mut res, limit).await?;
        drop(res);
        match status {
            reqwest::StatusCode::OK if over => {
                Ok(Err(Exceeded::Manifest { reference: r.whole(), limit: MAX_JSON }))
            }
            reqwest::StatusCode::OK => {
                check_digests(&body, header.as_deref(), r.digest())?;
                Ok(Ok(Bytes::from(body)))
            }
            s => Err(answer_error(s, url, &body, over)),
        }
    }

    /// One GET of blob `digest` of `r`: the response once it says 200 (its body not read);
    /// any other answer as oci-client reports it, its body read up to [`ERROR_BODY`].
    async fn blob_once(
        &self,
        client: &reqwest::Client,
        api: &str,
        r: &Reference,
        digest: &str,
        auth: Option<http::HeaderValue>,
    ) -> std::result::Result<reqwest::Response, OciDistributionError> {
        let url = format!(
            "{api}blobs/{digest}{}",
            r.namespace().map(|ns| format!("?ns={ns}")).unwrap_or_default()
        );
        // reqwest follows the registry's redirect (to its storage) and drops `Authorization`
        // when that leaves the registry's host.
        let res = self.send(client.get(&url), auth).await?;
        if res.status() == reqwest::StatusCode::OK {
            return Ok(res);
        }
        Err(unexpected(res, url).await)
    }

    /// A verified stream of a blob ([`crate::blob::verified`]). Failures mid-stream surface as stream
    /// errors; callers that can restart (whole-blob copies) retry through
    /// [`crate::blob::with_restarts`]. `size`: the descriptor's, when known.
    pub async fn blob_stream(
        &self,
        r: &Reference,
        digest: &str,
        size: Option<u64>,
    ) -> Result<BoxStream<'static, std::io::Result<Bytes>>> {
        crate::blob::digest_hex(digest)?;
        let auth = self.authorization(r, false).await?;
        let (client, api) = self.api(r).await?;
        let res = self
            .retry(r, "downloading blob", || self.blob_once(&client, &api, r, digest, auth.clone()))
            .await?;
        let body =
            futures_util::StreamExt::map(res.bytes_stream(), |c| c.map_err(std::io::Error::other));
        Ok(crate::blob::verified(Box::pin(body), digest, size))
    }

    pub async fn blob_exists(&self, r: &Reference, digest: &str) -> Result<bool> {
        let auth = self.authorization(r, false).await?;
        let (client, api) = self.api(r).await?;
        let url = format!("{api}blobs/{digest}");
        self.retry(r, "checking blob", || async {
            let res = self.send(client.head(&url), auth.clone()).await?;
            match res.status() {
                reqwest::StatusCode::OK => Ok(true),
                reqwest::StatusCode::NOT_FOUND => Ok(false),
                // A HEAD answer has no body.
                status => Err(answer_error(status, url.clone(), &[], false)),
            }
        })
        .await
    }

    /// Cross-repository mount; `Ok(false)` when the registry refuses (then copy instead).
    pub async fn mount(&self, target: &Reference, from: &Reference, digest: &str) -> Result<bool> {
        self.login_also_pulling(target, true, Some(from)).await?;
        let auth = self.authorization(target, true).await?;
        let (client, api) = self.api(target).await?;
        let url = format!("{api}blobs/uploads/?mount={digest}&from={}", from.repository());
        let got = self.send(client.post(&url).header(http::header::CONTENT_LENGTH, 0), auth).await;
        match got {
            Ok(res) if res.status() == reqwest::StatusCode::CREATED => Ok(true),
            Ok(res) => {
                // 202: the registry opened an upload instead; it expires unused.
                tracing::debug!(
                    "mount of {digest} from {} refused: {}",
                    from.repository(),
                    unexpected(res, url).await
                );
                Ok(false)
            }
            Err(e) => {
                tracing::debug!("mount of {digest} from {} refused: {e}", from.repository());
                Ok(false)
            }
        }
    }

    /// Uploads a blob in one `PUT` (the distribution spec's monolithic upload: `POST` opens the
    /// upload, `PUT LOCATION?digest=` sends it), streaming; not retried (the stream is
    /// consumed). The upload stops at `size` bytes: `stream` must be checked by then, as
    /// [`crate::source::Source::blob_stream`]'s are. Answers other than the expected ones are read up to `ERROR_BODY` (64 KiB).
    pub async fn push_blob(
        &self,
        r: &Reference,
        digest: &str,
        size: u64,
        stream: BoxStream<'static, std::io::Result<Bytes>>,
    ) -> Result<()> {
        let auth = self.authorization(r, true).await?;
        let fail = |e: OciDistributionError| self.classify(r, "uploading blob", e);
        let (client, api) = self.api(r).await?;
        let start = format!("{api}blobs/uploads/");
        let location = self
            .retry(r, "uploading blob", || self.upload_location(&client, &start, auth.clone()))
            .await?;
        let mut put = reqwest::Url::parse(&start)
            .and_then(|base| base.join(&location))
            .map_err(|e| fail(OciDistributionError::UrlParseError(e.to_string())))?;
        put.query_pairs_mut().append_pair("digest", digest);
        // Credentials go to the registry only (same scheme, host and port), never to another
        // origin its Location names.
        let same_host = reqwest::Url::parse(&start).is_ok_and(|s| s.origin() == put.origin());
        let req = client
            .put(put)
            .header(http::header::CONTENT_TYPE, "application/octet-stream")
            .header(http::header::CONTENT_LENGTH, size)
            .body(reqwest::Body::wrap_stream(stream));
        let res = self.send(req, auth.filter(|_| same_host)).await.map_err(fail)?;
        if res.status() == reqwest::StatusCode::CREATED {
            return Ok(());
        }
        let url = res.url().to_string();
        Err(fail(unexpected(res, url).await))
    }

    /// `POST …/blobs/uploads/`: the upload's `Location` (202).
    async fn upload_location(
        &self,
        client: &reqwest::Client,
        url: &str,
        auth: Option<http::HeaderValue>,
    ) -> std::result::Result<String, OciDistributionError> {
        let res = self.send(client.post(url).header(http::header::CONTENT_LENGTH, 0), auth).await?;
        if res.status() == reqwest::StatusCode::ACCEPTED {
            let location = res
                .headers()
                .get(http::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            return location.ok_or(OciDistributionError::RegistryNoLocationError);
        }
        Err(unexpected(res, url.to_string()).await)
    }

    pub async fn push_manifest(&self, r: &Reference, body: Bytes, media_type: &str) -> Result<()> {
        let ct = reqwest_header(media_type)?;
        let auth = self.authorization(r, true).await?;
        let (client, api) = self.api(r).await?;
        let url = format!("{api}manifests/{}", r.digest().or(r.tag()).unwrap_or("latest"));
        self.retry(r, "pushing manifest", || async {
            let res = self
                .send(
                    client
                        .put(&url)
                        .header(http::header::CONTENT_TYPE, ct.clone())
                        .body(body.clone()),
                    auth.clone(),
                )
                .await?;
            if res.status() == reqwest::StatusCode::CREATED {
                return Ok(());
            }
            Err(unexpected(res, url.clone()).await)
        })
        .await
    }

    /// Sends `req` with `auth`.
    async fn send(
        &self,
        req: reqwest::RequestBuilder,
        auth: Option<http::HeaderValue>,
    ) -> std::result::Result<reqwest::Response, OciDistributionError> {
        let req = match auth {
            Some(a) => req.header(http::header::AUTHORIZATION, a),
            None => req,
        };
        Ok(req.send().await?)
    }
}

/// `res`, an answer other than the one expected, as [`answer_error`] reports it, its body read
/// up to [`ERROR_BODY`] (a body that cannot be read is reported as the failure).
async fn unexpected(mut res: reqwest::Response, url: String) -> OciDistributionError {
    let status = res.status();
    match erdma_http::capped_body(&mut res, ERROR_BODY).await {
        Ok((body, over)) => answer_error(status, url, &body, over),
        Err(e) => e.into(),
    }
}

/// A registry's answer other than the one expected, as oci-client reports it (`body`: at most
/// [`ERROR_BODY`] of it; `over`: it had more).
fn answer_error(
    status: reqwest::StatusCode,
    url: String,
    body: &[u8],
    over: bool,
) -> OciDistributionError {
    match status {
        reqwest::StatusCode::UNAUTHORIZED => OciDistributionError::UnauthorizedError { url },
        s if s.is_success() => OciDistributionError::SpecViolationError(format!(
            "Expected HTTP Status {}, got {s} instead",
            reqwest::StatusCode::OK
        )),
        s => {
            if s.is_client_error() {
                if let Ok(envelope) = serde_json::from_slice::<OciEnvelope>(body) {
                    return OciDistributionError::RegistryError { envelope, url };
                }
            }
            let mut message = String::from_utf8_lossy(body).into_owned();
            if over {
                message.push('…');
            }
            OciDistributionError::ServerError { code: s.as_u16(), url, message }
        }
    }
}

/// What oci-client's `validate_digest` checks of a manifest: the digest of the reference, then
/// the `Docker-Content-Digest` the registry sent.
fn check_digests(
    body: &[u8],
    header: Option<&str>,
    reference: Option<&str>,
) -> std::result::Result<(), DigestError> {
    use sha2::Digest as _;
    let mut wanted: Vec<&str> = reference.into_iter().collect();
    wanted.extend(header.filter(|h| Some(*h) != reference));
    for want in wanted {
        let (algorithm, _) = want.split_once(':').ok_or(DigestError::MissingAlgorithm)?;
        let actual = match algorithm {
            "sha256" => hex::encode(sha2::Sha256::digest(body)),
            "sha384" => hex::encode(sha2::Sha384::digest(body)),
            "sha512" => hex::encode(sha2::Sha512::digest(body)),
            other => return Err(DigestError::UnsupportedAlgorithm(other.to_string())),
        };
        let actual = format!("{algorithm}:{actual}");
        if actual != want {
            return Err(DigestError::VerificationError { expected: want.to_string(), actual });
        }
    }
    Ok(())
}

fn reqwest_header(v: &str) -> Result<http::HeaderValue> {
    v.parse().map_err(|_| Error::MediaType { value: v.to_string() })
}

/// Connection resets, timeouts and 5xx are worth another try; the rest is final, a TLS
/// handshake's failure too (a certificate does not become trusted on the next try).
pub fn transient(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::RequestError(r) if erdma_http::tls_failure(r).is_some() => false,
        OciDistributionError::RequestError(r) => {
            r.is_connect() || r.is_timeout() || r.is_request() || r.is_body()
        }
        OciDistributionError::ServerError { code, .. } => *code >= 500 || *code == 429,
        OciDistributionError::IoError(io) => crate::blob::digest_error(io).is_none(),
        OciDistributionError::RegistryError { envelope, .. } => {
            envelope.errors.iter().any(|e| matches!(e.code, OciErrorCode::Toomanyrequests))
        }
        _ => false,
    }
}

impl Registries {
    /// The error a user sees for `e`, a final failure of `operation` on `r`.
    fn classify(&self, r: &Reference, operation: &str, e: OciDistributionError) -> Error {
        let registry = r.resolve_registry().to_string();
        let refused = |answer: String| Error::AuthRefused {
            registry: registry.clone(),
            reference: r.whole(),
            answer,
        };
        match &e {
            OciDistributionError::ImageManifestNotFoundError(_) => {
                return Error::ManifestUnknown { reference: r.whole() }
            }
            OciDistributionError::UnauthorizedError { .. }
            | OciDistributionError::AuthenticationFailure(_) => {
                return refused("HTTP 401 Unauthorized".into())
            }
            OciDistributionError::RegistryError { envelope, .. } => {
                for err in &envelope.errors {
                    match err.code {
                        OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown => {
                            return Error::ManifestUnknown { reference: r.whole() }
                        }
                        // The registry's own words, on one line and short: they are not ours.
                        OciErrorCode::Unauthorized | OciErrorCode::Denied => {
                            let said: String = err
                                .message
                                .chars()
                                .map(|c| if c.is_control() { ' ' } else { c })
                                .take(200)
                                .collect();
                            return refused(format!(
                                "{}: {said}",
                                format!("{:?}", err.code).to_uppercase()
                            ));
                        }
                        _ => {}
                    }
                }
            }
            OciDistributionError::ServerError { code: 404, .. } => {
                return Error::ManifestUnknown { reference: r.whole() }
            }
            OciDistributionError::IoError(io) => {
                if let Some(d) = crate::blob::digest_error(io) {
                    return d;
                }
            }
            OciDistributionError::RequestError(re) => {
                if let Some(f) = erdma_http::tls_failure(re) {
                    return self.tls_error(&registry, f);
                }
            }
            _ => {}
        }
        Error::Registry { registry, operation: operation.to_string(), source: e }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real reqwest error from a TLS handshake (a server answering the ClientHello in plain
    /// HTTP) is a TLS failure, and never retried.
    #[tokio::test]
    async fn a_tls_failure_is_not_transient() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut hello = [0u8; 512];
            let _ = s.read(&mut hello).await;
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n").await;
        });
        let client = erdma_http::reqwest_builder().build().unwrap();
        let e = client.get(format!("https://{addr}/v2/")).send().await.unwrap_err();
        assert_eq!(
            erdma_http::tls_failure(&e),
            Some(TlsFailure::NotTls),
            "{}",
            erdma_common::errors::chain(&e)
        );
        assert!(e.is_connect(), "a connect error, which alone would be retried");
        assert!(!transient(&OciDistributionError::RequestError(e)));
    }

    #[test]
    fn loopback_and_named_registries_may_fall_back_to_http() {
        assert!(is_loopback("127.0.0.1:5000"));
        assert!(is_loopback("localhost:5000"));
        assert!(is_loopback("localhost"));
        assert!(is_loopback("[::1]:5000"));
        assert!(!is_loopback("registry.example:5000"));
        assert!(is_loopback("127.1.2.3:5000"));
        assert!(!is_loopback("127.0.0.1.nip.io:5000"));
        assert!(!is_loopback("127.attacker.example"));
        assert!(!is_loopback("localhost.example"));
        assert!(!is_named_insecure("registry.example:5000", &[]));
        assert!(is_named_insecure("registry.example:5000", &["registry.example".into()]));
        assert!(is_named_insecure("registry.example:5000", &["registry.example:5000".into()]));
        assert!(!is_named_insecure("registry.example:5000", &["registry.example:5001".into()]));
    }
}
