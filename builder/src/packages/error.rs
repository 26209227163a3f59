//! Why a package backend stopped: one error type for apt and rpm, one kind a variant, each
//! message naming the repository, the package or the file, as apt's and dnf's would. (What
//! the formats themselves refuse has its own types in `erdma_deb` and `erdma_rpm`; the
//! resolvers' in `apt::resolve` and `rpm::resolve`.)
//!
//! A variant that has a cause keeps it as its source, so that the binary prints it as a
//! `Caused by:` line; what the user can do about it is [`PackageError::hint`].
use crate::error::Cause;

#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    /// A maintainer script or scriptlet the build can neither reproduce nor show to be without
    /// effect ([`crate::packages::scripts`]); nothing has been written.
    #[error("package {package}: its {script} runs `{command}`, which erdma-build can neither emulate nor show to be without effect here")]
    Script { package: String, script: String, command: String, hint: &'static str },
    /// The sandbox that runs what cannot be emulated could not be made or its run failed;
    /// nothing has been written.
    #[error("running maintainer scripts in a sandbox (needed for {because})")]
    Sandbox {
        because: String,
        #[source]
        why: Cause,
    },
    /// A maintainer script command that would fail in this image, failing the install as it
    /// would under dpkg.
    #[error("package {package}: its {script} runs `{command}`, which would fail here: {reason}")]
    ScriptFails { package: String, script: String, command: String, reason: String },
    /// A repository's metadata (repomd.xml, its signature, primary.xml) or key is unusable.
    #[error("repository `{repo}`")]
    Repository {
        repo: String,
        #[source]
        why: Cause,
    },
    /// One of the base's own repositories (`.repo` files) is unusable.
    #[error("repository `{id}` ({file})")]
    BaseRepository {
        id: String,
        file: String,
        #[source]
        why: Cause,
    },
    /// One of the base's own repositories has no key to verify it with in the image.
    #[error("repository `{id}` ({file}): {why}")]
    BaseKey { id: String, file: String, why: String },
    #[error("repository `{id}` ({file}) has {how}")]
    NoUrl { id: String, file: String, how: &'static str },
    #[error("repository `{repo}` has no key")]
    NoKey { repo: String },
    /// No mirror of a recipe repository answered.
    #[error("{why}")]
    Unreachable { why: String, repo: String },
    /// Resolution failed while some of the base's repositories could not be read.
    #[error("resolving the packages while the base's repositories {repos} could not be reached")]
    BaseUnreachable {
        #[source]
        why: Box<crate::packages::rpm::resolve::ResolveError>,
        repos: String,
    },
    #[error("reading the base's rpm database")]
    ReadDatabase(#[source] Box<erdma_rpm::rpmdb::RpmdbError>),
    #[error("recipe {recipe} is for {distro}, but the base has no rpm database (/var/lib/rpm)")]
    NoDatabase { recipe: String, distro: String },
    #[error("writing the rpm database")]
    WriteDatabase(#[source] Box<erdma_rpm::rpmdb::RpmdbError>),
    #[error("recipe {recipe} names no NCCL repository (`nccl = true`)")]
    NoNcclRepository { recipe: String },
    /// A `--package` file that cannot be read.
    #[error("--package {arg}")]
    LocalPackage {
        arg: String,
        #[source]
        why: Cause,
    },
    /// `what`: `name version` (apt) or the NEVRA (rpm).
    #[error("--package {arg} is {what} for {arch}, not for the image's {image}")]
    WrongArch { arg: String, what: String, arch: String, image: String },
    /// A package file (named by its path or URL) that cannot be read or installed.
    #[error("{at}")]
    Package {
        at: String,
        #[source]
        why: Cause,
    },
    /// A package whose signature or digests do not verify against its repository's keys.
    #[error("verifying {nevra} from repository `{repo}` ({at})")]
    Unverified {
        nevra: String,
        repo: String,
        at: String,
        #[source]
        why: Box<erdma_rpm::package::RpmError>,
    },
    #[error("{nevra} comes from no repository read")]
    NoOrigin { nevra: String },
    #[error("{nevra} has no location in {repo}")]
    NoLocation { nevra: String, repo: String },
    #[error("{nevra} has no checksum in {repo}'s primary.xml")]
    NoChecksum { nevra: String, repo: String },
    /// `kind`: `checksum` (rpm's primary.xml) or `SHA256` (an apt index).
    #[error("malformed {kind} for {url} in {repo}")]
    MalformedChecksum { kind: &'static str, url: String, repo: String },
    #[error("the base image configures no apt repository (its /etc/apt/sources.list and sources.list.d list none)")]
    NoSources { distro: String },
    #[error(
        "the base's apt source {uris} is marked trusted=yes; unsigned repositories are not used"
    )]
    TrustedYes { uris: String },
    #[error("the base's apt source names key {path}, which the image does not have")]
    MissingKey { path: String },
    /// No gid left in the system range for a group a package's scripts would add.
    #[error("no free system gid for group {group}")]
    NoGid { group: String },
}

impl PackageError {
    /// What the user can do about it, where there is something to say (see
    /// [`crate::error::hint`]).
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            PackageError::Script { hint, .. } => (*hint).into(),
            PackageError::Sandbox { .. } => "--no-sandbox to refuse such scripts instead, or --skip-scripts to build without them".into(),
            PackageError::NoUrl { .. } => {
                "--mirror URL for a mirror of it, or disable it in the base".into()
            }
            PackageError::BaseKey { .. } => "--keyring base=FILE".into(),
            PackageError::Unreachable { repo, .. } => format!("--repo {repo}=URL or --mirror"),
            // What resolving says, and what reaching the base's repositories would add.
            PackageError::BaseUnreachable { why, .. } => match why.hint() {
                Some(h) => format!("{h}; or --repo ID=URL for a mirror of each"),
                None => "--repo ID=URL for a mirror of each".into(),
            },
            PackageError::ReadDatabase(e) | PackageError::WriteDatabase(e) => {
                return e.hint().map(String::from)
            }
            PackageError::NoSources { distro } => {
                format!("pass --mirror URL, the {distro} archive to install from")
            }
            _ => return None,
        })
    }
}
