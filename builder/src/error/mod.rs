//! One error type for the library; each variant names the operation and the object.
mod cause;
pub use cause::{Cause, Doing};

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing an image: registries, layouts, archives, layers.
    #[error(transparent)]
    Image(#[from] erdma_oci::Error),

    #[error("malformed {what} in {reference}")]
    Malformed {
        what: &'static str,
        reference: String,
        #[source]
        reason: Cause,
    },

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

    #[error("repository `{repo}`")]
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
        source: Box<erdma_deb::deb::DebError>,
    },

    /// A payload entry refused before anything is written ([`crate::packages::payload`]):
    /// `package` is `name version (origin)`, `entry` the name as the package gives it, escaped
    /// so that the message stays one line.
    #[error("package {package}: refusing entry `{entry}`: {reason}")]
    PackageEntry { package: String, entry: String, reason: String },

    /// The layer did not take a package's entry (it conflicts with what the layer holds).
    #[error("package {package}: entry `{entry}`")]
    PackageLayer {
        package: String,
        entry: String,
        #[source]
        source: Box<erdma_oci::Error>,
    },

    /// A `.deb`'s data entry whose tar header holds a field the tar reader cannot read.
    #[error("package {package}: refusing entry `{entry}`: unreadable {field}")]
    PackageEntryHeader {
        package: String,
        entry: String,
        field: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// A payload entry whose place in the base image could not be read.
    #[error("package {package}: entry `{entry}`")]
    PackageEntryBase {
        package: String,
        entry: String,
        #[source]
        source: crate::packages::payload::Refused,
    },

    #[error("downloading {url} failed")]
    Download {
        url: String,
        #[source]
        reason: Cause,
    },

    /// A command-line value that does not parse: `option` as typed (`--repo`), `expected` what
    /// it takes.
    #[error("invalid {option} `{value}`: expected {expected}")]
    Usage { option: &'static str, value: String, expected: &'static str },

    #[error("--package {path} is not signed by any repository")]
    UnsignedPackage { path: String, label: &'static str },

    #[error(
        "{output} holds one image; --platform all needs docker:// or oci: or oci-archive: output"
    )]
    OutputHoldsOneImage { output: String },

    #[error("self-image: {}: {problem}", path.display())]
    SelfImageInput { path: PathBuf, problem: String },

    #[error("{reference} holds no image")]
    NoImage { reference: String },

    #[error("--keyring {name}=…: recipe {recipe} has no repository `{name}` (it has {available})")]
    UnknownKeyringRepository { name: String, recipe: String, available: String },

    #[error(transparent)]
    Http(#[from] erdma_http::HttpError),

    #[error("fetching {what} from {url} failed")]
    KeyFetch {
        what: String,
        url: String,
        #[source]
        reason: Cause,
        repository: String,
    },

    /// A repository's Release is signed by a key that came with the pinned one but is not
    /// pinned itself; `cause` is the verification error that this explains.
    #[error("repository `{repository}` is signed by key {key}, which {keyring} holds beside the pinned key {pinned} but the recipe does not pin: refusing it")]
    UnpinnedSigner {
        repository: String,
        key: String,
        keyring: String,
        pinned: String,
        #[source]
        cause: Box<erdma_deb::repo::RepoError>,
    },

    /// After resolving, the image's libibverbs still lacks the erdma provider.
    #[error("{found} has no erdma provider (/etc/libibverbs.d/erdma.driver is missing; rdma-core gained it in 43.0), so recipe {recipe} cannot give this image eRDMA")]
    NoErdmaProvider { found: String, recipe: String },

    #[error("the base has no CUDA (no CUDA_VERSION in its config, no /usr/local/cuda/version.json), and NCCL builds are per CUDA major version")]
    NoCuda,

    #[error("--nccl with --no-packages needs a base whose libibverbs has the erdma provider: NCCL opens libibverbs with dlopen and, without it, silently falls back to TCP")]
    NcclNeedsErdma,

    /// A bound on what a hostile input may cost ([`erdma_limits`]): `what` names the input,
    /// the limit says how to raise it. One line, so that it is the `error:` line.
    #[error("{what} {exceeded}")]
    Limit { what: String, exceeded: erdma_limits::Exceeded },
}

impl Error {
    /// A payload entry refused before anything is written, by either backend: `entry` as the
    /// package names it (escaped here). The base image unreadable where it goes keeps that error
    /// as the cause; every other refusal is the reason on the one line.
    pub(crate) fn refused(
        package: String,
        entry: &str,
        why: crate::packages::payload::Refused,
    ) -> Error {
        let entry = entry.escape_debug().to_string();
        match why {
            crate::packages::payload::Refused::Image(_) => {
                Error::PackageEntryBase { package, entry, source: why }
            }
            _ => Error::PackageEntry { package, entry, reason: why.to_string() },
        }
    }

    /// What the user can do about this error, where there is something to say; the binary
    /// prints it as the `hint:` line after the error and its causes ([`hint`] asks each cause).
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            Error::Image(e) => return e.hint(),
            Error::Package(e) => return e.hint(),
            Error::RpmResolve(e) => return e.hint(),
            Error::UnsupportedDistro { .. } | Error::NoOsRelease { .. } => {
                "`erdma-build recipes` lists the recipes; --recipe NAME|PATH picks one".into()
            }
            Error::DigestMismatch { .. } => erdma_oci::error::DIGEST_HINT.into(),
            Error::UnsignedPackage { label, .. } => format!("pass --allow-unsigned-package to install it anyway (it is then named in the report and the image label {label})"),
            Error::KeyFetch { repository, .. } => format!("pass --keyring {repository}=FILE"),
            Error::NoErdmaProvider { .. } => {
                "use a repository with eRDMA builds (--repo, --mirror) or another base".into()
            }
            Error::NoCuda => "pass --cuda X.Y".into(),
            Error::NcclNeedsErdma => "drop --no-packages to add the eRDMA packages".into(),
            _ => return None,
        })
    }
    pub(crate) fn io(
        operation: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { operation, path, source }
    }
}

/// The one place hints come from: the hint of `cause`, if it is an error of ours that has
/// one. The binary asks each error of a chain in turn, outermost first, and prints the first.
pub fn hint(cause: &(dyn std::error::Error + 'static)) -> Option<String> {
    if let Some(e) = cause.downcast_ref::<Error>() {
        e.hint()
    } else if let Some(e) = cause.downcast_ref::<crate::packages::error::PackageError>() {
        e.hint()
    } else if let Some(e) = cause.downcast_ref::<crate::packages::rpm::resolve::ResolveError>() {
        e.hint()
    } else if let Some(e) = cause.downcast_ref::<erdma_oci::Error>() {
        e.hint()
    } else if let Some(e) = cause.downcast_ref::<erdma_rpm::rpmdb::RpmdbError>() {
        e.hint().map(String::from)
    } else {
        None
    }
}
