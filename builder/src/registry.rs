//! Registry access through `oci-client`'s blob-level calls, with credentials and bounded retries.
//!
//! Never `pull()`/`push()`: those hold whole layers in memory and re-upload everything.
use std::collections::HashSet;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};

use crate::error::{Error, Result};

pub const MANIFEST_TYPES: &[&str] = &[
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// Attempts per call, including the first. Connection resets, timeouts and 5xx are retried.
const ATTEMPTS: u32 = 4;

pub struct Registries {
    client: Client,
    authed: Mutex<HashSet<(String, String, bool)>>,
    backoff: Duration,
}

/// Registries reached over plain HTTP: loopback always, others when named with `--insecure-registry`.
pub fn is_insecure(registry: &str, insecure: &[String]) -> bool {
    let host = registry.rsplit_once(':').map(|(h, _)| h).unwrap_or(registry);
    host == "localhost" || host.starts_with("127.") || host == "[::1]" || insecure.iter().any(|i| i == registry || i == host)
}

impl Registries {
    pub fn new(registries: &[&str], insecure: &[String]) -> Self {
        let http: Vec<String> = registries.iter().filter(|r| is_insecure(r, insecure)).map(|r| r.to_string()).collect();
        let client = Client::new(ClientConfig {
            protocol: ClientProtocol::HttpsExcept(http),
            connect_timeout: Some(Duration::from_secs(15)),
            read_timeout: Some(Duration::from_secs(120)),
            user_agent: concat!("erdma-build/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        });
        let backoff = std::env::var("ERDMA_BUILD_RETRY_BACKOFF_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_millis)
            .unwrap_or(Duration::from_millis(500));
        Registries { client, authed: Mutex::new(HashSet::new()), backoff }
    }

    /// Logs in for `op` once per (registry, repository, op); credentials from [`crate::auth`].
    pub async fn login(&self, r: &Reference, push: bool) -> Result<()> {
        let key = (r.resolve_registry().to_string(), r.repository().to_string(), push);
        if self.authed.lock().expect("poisoned").contains(&key) {
            return Ok(());
        }
        let creds = crate::auth::credentials(r.resolve_registry())?;
        let op = if push { RegistryOperation::Push } else { RegistryOperation::Pull };
        self.retry(r, "logging in", || self.client.auth(r, &creds, op)).await?;
        self.client.store_auth_if_needed(r.resolve_registry(), &creds).await;
        self.authed.lock().expect("poisoned").insert(key);
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
                    tracing::warn!("{operation} at {}: {e}; retrying in {delay:?}", r.resolve_registry());
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                Err(e) => return Err(classify(r, operation, e)),
            }
        }
        unreachable!("the loop returns")
    }

    /// The raw manifest (or index) and its digest, computed from the bytes.
    pub async fn manifest(&self, r: &Reference) -> Result<(Bytes, String)> {
        self.login(r, false).await?;
        let (body, _) = self
            .retry(r, "fetching manifest", || self.client.pull_manifest_raw(r, &RegistryAuth::Anonymous, MANIFEST_TYPES))
            .await?;
        let digest = crate::blob::sha256_digest(&body);
        if let Some(want) = r.digest() {
            if want != digest {
                return Err(Error::DigestMismatch { expected: want.to_string(), actual: digest });
            }
        }
        Ok((body, digest))
    }

    /// A verified stream of a blob. Failures mid-stream surface as stream errors; callers
    /// that can restart (whole-blob copies) retry through [`Registries::retry_stream`].
    pub async fn blob_stream(&self, r: &Reference, digest: &str, size: i64) -> Result<BoxStream<'static, std::io::Result<Bytes>>> {
        let desc = OciDescriptor { digest: digest.to_string(), size, ..Default::default() };
        self.login(r, false).await?;
        let s = self.retry(r, "downloading blob", || self.client.pull_blob_stream(r, &desc)).await?;
        Ok(s.stream)
    }

    pub async fn blob_exists(&self, r: &Reference, digest: &str) -> Result<bool> {
        self.retry(r, "checking blob", || self.client.blob_exists(r, digest)).await
    }

    /// Cross-repository mount; `Ok(false)` when the registry refuses (then copy instead).
    pub async fn mount(&self, target: &Reference, from: &Reference, digest: &str) -> Result<bool> {
        match self.client.mount_blob(target, from, digest).await {
            Ok(()) => Ok(true),
            Err(e) => {
                tracing::debug!("mount of {digest} from {} refused: {e}", from.repository());
                Ok(false)
            }
        }
    }

    pub async fn push_blob(&self, r: &Reference, digest: &str, size: u64, stream: BoxStream<'static, std::io::Result<Bytes>>) -> Result<()> {
        let stream = futures_util::StreamExt::map(stream, |c| c.map_err(OciDistributionError::IoError));
        self.client
            .push_blob_stream(r, stream, digest, Some(size))
            .await
            .map(|_| ())
            .map_err(|e| classify(r, "uploading blob", e))
    }

    pub async fn push_manifest(&self, r: &Reference, body: Bytes, media_type: &str) -> Result<()> {
        let ct = reqwest_header(media_type)?;
        self.retry(r, "pushing manifest", || self.client.push_manifest_raw(r, body.clone(), ct.clone())).await?;
        Ok(())
    }
}

fn reqwest_header(v: &str) -> Result<http::HeaderValue> {
    v.parse().map_err(|_| Error::Unsupported(format!("invalid media type `{v}`")))
}

/// Connection resets, timeouts and 5xx are worth another try; the rest is final.
pub fn transient(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::RequestError(r) => r.is_connect() || r.is_timeout() || r.is_request() || r.is_body(),
        OciDistributionError::ServerError { code, .. } => *code >= 500 || *code == 429,
        OciDistributionError::IoError(io) => crate::blob::digest_error(io).is_none(),
        OciDistributionError::RegistryError { envelope, .. } => {
            envelope.errors.iter().any(|e| matches!(e.code, OciErrorCode::Toomanyrequests))
        }
        _ => false,
    }
}

fn classify(r: &Reference, operation: &str, e: OciDistributionError) -> Error {
    let registry = r.resolve_registry().to_string();
    match &e {
        OciDistributionError::ImageManifestNotFoundError(_) => return Error::ManifestUnknown { reference: r.whole() },
        OciDistributionError::UnauthorizedError { .. } | OciDistributionError::AuthenticationFailure(_) => {
            return Error::AuthRefused { registry, reference: r.whole() }
        }
        OciDistributionError::RegistryError { envelope, .. } => {
            for err in &envelope.errors {
                match err.code {
                    OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown => {
                        return Error::ManifestUnknown { reference: r.whole() }
                    }
                    OciErrorCode::Unauthorized | OciErrorCode::Denied => {
                        return Error::AuthRefused { registry, reference: r.whole() }
                    }
                    _ => {}
                }
            }
        }
        OciDistributionError::ServerError { code: 404, .. } => return Error::ManifestUnknown { reference: r.whole() },
        OciDistributionError::IoError(io) => {
            if let Some(d) = crate::blob::digest_error(io) {
                return d;
            }
        }
        _ => {}
    }
    Error::Registry { registry, operation: operation.to_string(), source: e }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_named_registries_use_http() {
        assert!(is_insecure("127.0.0.1:5000", &[]));
        assert!(is_insecure("localhost:5000", &[]));
        assert!(!is_insecure("registry.example:5000", &[]));
        assert!(is_insecure("registry.example:5000", &["registry.example".into()]));
    }
}
