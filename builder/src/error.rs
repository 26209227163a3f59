//! One error type for the library; each variant names the operation and the object.
use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid image reference `{reference}`: {reason}")]
    InvalidReference { reference: String, reason: String },

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
    RegistriesConf(#[from] crate::image::registries_conf::ConfError),

    #[error("certificate file {path}: {reason}")]
    CertFile { path: PathBuf, reason: String },

    #[error("manifest unknown: {reference}")]
    ManifestUnknown { reference: String },

    #[error("malformed {what} in {reference}: {reason}")]
    Malformed { what: &'static str, reference: String, reason: String },

    #[error("digest mismatch for blob {expected}: got {actual}")]
    DigestMismatch { expected: String, actual: String },

    #[error("no manifest for platform {platform} in {reference} (available: {available})")]
    NoPlatform { platform: String, reference: String, available: String },

    #[error("unsupported distribution `{found}`; supported: {supported}")]
    UnsupportedDistro { found: String, supported: String },

    #[error("cannot build for {found}: {reason}")]
    DistroRefused { found: String, reason: String },

    #[error("cannot find /etc/os-release in {reference}; pass --recipe to choose a recipe")]
    NoOsRelease { reference: String },

    #[error("unknown recipe `{name}`; available: {available}")]
    UnknownRecipe { name: String, available: String },

    #[error("invalid recipe {name}")]
    Recipe {
        name: String,
        #[source]
        source: toml::de::Error,
    },

    #[error("invalid recipe {name}: {reason}")]
    RecipeInvalid { name: String, reason: String },

    #[error("invalid --env `{0}`: expected KEY=VALUE")]
    InvalidEnv(String),

    #[error("output {path} is not writable")]
    OutputNotWritable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{operation} {path}")]
    Io {
        operation: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("reading credentials from {path}")]
    AuthConfig {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    #[error("credential helper docker-credential-{helper} failed for {registry}: {reason}")]
    CredentialHelper { helper: String, registry: String, reason: String },

    /// The hint is in the message: the binary's hints are per variant and this one names the registry.
    #[error("registry {registry}: exchanging the stored identity token at {url} failed: {reason}; log in again with `docker login {registry}`")]
    TokenExchange { registry: String, url: String, reason: String },

    #[error("registry {registry}: getting an access token from {url} failed: {reason}")]
    TokenService { registry: String, url: String, reason: String },

    #[error(transparent)]
    Key(#[from] erdma_openpgp::KeyError),

    #[error(transparent)]
    Repo(#[from] erdma_deb::repo::RepoError),

    #[error(transparent)]
    Resolve(#[from] crate::packages::apt::resolve::ResolveError),

    #[error(transparent)]
    Nccl(#[from] crate::packages::nccl::NcclError),

    #[error("repository `{repo}`: {source}")]
    Repodata {
        repo: String,
        #[source]
        source: crate::packages::rpm::repodata::RepodataError,
    },

    #[error(transparent)]
    RpmResolve(#[from] crate::packages::rpm::resolve::ResolveError),

    #[error("reading package {path}")]
    Deb {
        path: PathBuf,
        #[source]
        source: erdma_deb::deb::DebError,
    },

    /// A payload entry refused before anything is written ([`crate::packages::payload`]):
    /// `package` is `name version (origin)`, `entry` the name as the package gives it, escaped
    /// so that the message stays one line.
    #[error("package {package}: refusing entry `{entry}`: {reason}")]
    PackageEntry { package: String, entry: String, reason: String },

    #[error("downloading {url} failed: {reason}")]
    Download { url: String, reason: String },

    #[error("{0}")]
    Unsupported(String),

    /// A bound on what a hostile input may cost ([`erdma_limits`]): `what` names the input,
    /// the limit says how to raise it. One line, so that it is the `error:` line.
    #[error("{what} {exceeded}")]
    Limit { what: String, exceeded: erdma_limits::Exceeded },
}

impl Error {
    pub(crate) fn io(
        operation: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { operation, path, source }
    }
}
