//! One error type for the library; each variant names the operation and the object.
use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing an image: registries, layouts, archives, layers.
    #[error(transparent)]
    Image(#[from] erdma_oci::Error),

    #[error("malformed {what} in {reference}: {reason}")]
    Malformed { what: &'static str, reference: String, reason: String },

    #[error("digest mismatch for blob {expected}: got {actual}")]
    DigestMismatch { expected: String, actual: String },

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

    #[error("{operation} {path}")]
    Io {
        operation: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

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
        source: erdma_rpm::repodata::RepodataError,
    },

    #[error(transparent)]
    RpmResolve(#[from] crate::packages::rpm::resolve::ResolveError),

    #[error(transparent)]
    Package(#[from] crate::packages::error::PackageError),

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
