//! One error type; messages name the operation and the path or device.
use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{operation} {path}")]
    Io {
        operation: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("invalid config {path}")]
    Config {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },

    #[error("malformed {what} {path}: {reason}")]
    Malformed { what: &'static str, path: PathBuf, reason: String },

    #[error("eRDMA device `{name}` does not exist (found: {found})")]
    UnknownDevice { name: String, found: String },

    #[error("eRDMA device {name} has no usable uverbs node: {reason}")]
    DeviceUnusable { name: String, reason: String },

    #[error("the container asked for eRDMA but no eRDMA device was found under {sysfs}")]
    NoDevices { sysfs: PathBuf },

    #[error("invalid eRDMA request `{value}` from {source_name}: expected all, none or a comma list of device names")]
    BadRequest { value: String, source_name: &'static str },

    #[error(
        "eRDMA needs host networking, but this container's network namespace is managed by the engine; \
         run it with `--network host` (Docker, Podman) or `hostNetwork: true` (Kubernetes)"
    )]
    HostNetworkRequired,

    #[error("{0}")]
    Invalid(String),
}

impl Error {
    pub(crate) fn io(operation: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { operation, path, source }
    }
}
