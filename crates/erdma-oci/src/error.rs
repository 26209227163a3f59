//! The image crate's error: each variant names the operation and the object (a registry, a
//! reference, a path), in one line, so that it can be the `error:` line a user reads.
use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The error under one of ours, of any type, kept for `Caused by:`: it shows as the error it
/// holds, and its sources are that error's. A `reason` field beside it says what we were
/// doing, never the cause's text again.
#[derive(Debug)]
pub struct Cause(Box<dyn std::error::Error + Send + Sync + 'static>);

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// `e` as the optional cause of one of ours (none where our own check found the problem).
pub fn cause(e: impl std::error::Error + Send + Sync + 'static) -> Option<Cause> {
    Some(Cause(Box::new(e)))
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid --env `{0}`: expected KEY=VALUE")]
    InvalidEnv(String),

    #[error("invalid image reference `{reference}`: {reason}")]
    InvalidReference { reference: String, reason: String },

    /// A reference registries.conf rewrote (a mirror, a prefix) into one that does not parse.
    #[error("invalid image reference `{reference}` from registries.conf")]
    RewrittenReference {
        reference: String,
        #[source]
        source: oci_client::ParseError,
    },

    #[error("registry {registry}: {operation} failed")]
    Registry {
        registry: String,
        operation: String,
        #[source]
        source: oci_client::errors::OciDistributionError,
    },

    #[error("registry {registry} refused the credentials for {reference} ({answer})")]
    AuthRefused { registry: String, reference: String, answer: String },

    /// A TLS handshake with a registry failed; not retried. `hint` says where certificates go.
    #[error("registry {registry}: TLS handshake failed: {failure}")]
    Tls { registry: String, failure: String, hint: String },

    /// containers-registries.conf(5): a file we cannot use, or a name it blocks.
    #[error(transparent)]
    RegistriesConf(#[from] crate::registries_conf::ConfError),

    #[error("certificate file {path}: {reason}")]
    CertFile {
        path: PathBuf,
        reason: String,
        #[source]
        source: Option<Cause>,
    },

    #[error("no manifest for platform {platform} in {reference} (available: {available})")]
    NoPlatform { platform: String, reference: String, available: String },

    #[error("reading credentials from {path}")]
    AuthConfig {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    #[error("credential helper docker-credential-{helper} failed for {registry}: {reason}")]
    CredentialHelper {
        helper: String,
        registry: String,
        reason: String,
        #[source]
        source: Option<Cause>,
    },

    #[error("registry {registry}: exchanging the stored identity token at {url} failed: {reason}")]
    TokenExchange {
        registry: String,
        url: String,
        reason: String,
        #[source]
        source: Option<Cause>,
    },

    #[error("registry {registry}: getting an access token from {url} failed: {reason}")]
    TokenService {
        registry: String,
        url: String,
        reason: String,
        #[source]
        source: Option<Cause>,
    },

    #[error("output {path} is not writable")]
    OutputNotWritable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("manifest unknown: {reference}")]
    ManifestUnknown { reference: String },

    #[error("malformed {what} in {reference}: {reason}")]
    Malformed { what: &'static str, reference: String, reason: String },

    /// Data that cannot be read as what it should be (a tar stream, a compressed layer), with
    /// the reader's error.
    #[error("malformed {what} in {reference}")]
    Corrupt {
        what: &'static str,
        reference: String,
        #[source]
        source: std::io::Error,
    },

    /// JSON that does not parse, or not into the shape the specification gives it.
    #[error("malformed {what} in {reference}")]
    Json {
        what: &'static str,
        reference: String,
        #[source]
        source: serde_json::Error,
    },

    #[error("digest mismatch for blob {expected}: got {actual}")]
    DigestMismatch { expected: String, actual: String },

    #[error("{operation} {path}")]
    Io {
        operation: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("unsupported digest `{digest}`: only sha256 is supported")]
    UnsupportedDigest { digest: String },

    #[error("malformed digest `{digest}`")]
    MalformedDigest { digest: String },

    #[error("invalid media type `{value}`")]
    MediaType { value: String },

    #[error("invalid path `{path}` for a layer entry")]
    LayerPath { path: String },

    /// An image root assembled on disk ([`crate::rootdir`]) met a layer entry it cannot
    /// write safely.
    #[error("layer {layer}: entry `{entry}` {reason}")]
    RootEntry { layer: String, entry: String, reason: String },

    #[error("the image has no layer {index}")]
    NoLayer { index: usize },

    /// Two entries of one layer that a runtime could not extract as written: `reason` says
    /// which entry is in the way.
    #[error("layer entry `{entry}` would {reason}")]
    LayerConflict { entry: String, reason: String },

    /// A bound on what a hostile input may cost ([`erdma_limits`]): `what` names the input,
    /// the limit says how to raise it. One line, so that it is the `error:` line.
    #[error("{what} {exceeded}")]
    Limit { what: String, exceeded: erdma_limits::Exceeded },
}

impl Error {
    /// What the user can do about it, where there is something to say: the binary prints it
    /// as the `hint:` line after the error and its causes.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            Error::AuthRefused { .. } => {
                "log in with `docker login` or `skopeo login`, or set REGISTRY_AUTH_FILE".into()
            }
            Error::Registry { .. } => "check the registry address; --insecure-registry HOST skips certificate checks and allows plain HTTP".into(),
            Error::Tls { hint, .. } => hint.clone(),
            Error::TokenExchange { registry, .. } => {
                format!("log in again with `docker login {registry}`")
            }
            Error::RegistriesConf(crate::registries_conf::ConfError::Blocked { .. }) => "containers-registries.conf(5): remove `blocked = true` from that entry, or name another registry".into(),
            Error::DigestMismatch { .. } => DIGEST_HINT.into(),
            _ => return None,
        })
    }

    pub fn io(
        operation: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { operation, path, source }
    }
}

/// The hint for content that does not match its digest, here and in the builder's own check.
pub const DIGEST_HINT: &str = "the source served corrupt or tampered content; nothing was written";
