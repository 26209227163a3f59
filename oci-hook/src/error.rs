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

    /// An engine's TOML configuration that does not parse.
    #[error("malformed {what} {path}")]
    Toml {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: Box<toml_edit::TomlError>,
    },

    /// JSON that does not parse, or not into the shape its specification gives it.
    #[error("malformed {what} {path}")]
    Json {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    #[error("eRDMA device `{name}` does not exist (found: {found})")]
    UnknownDevice { name: String, found: String },

    #[error("eRDMA device {name} has no usable uverbs node: {reason}")]
    DeviceUnusable { name: String, reason: String },

    #[error("the container asked for eRDMA but no eRDMA device was found under {sysfs}")]
    NoDevices { sysfs: PathBuf },

    #[error("invalid eRDMA request `{value}` from {source_name}: expected all, none or a comma list of device names")]
    BadRequest { value: String, source_name: &'static str },

    #[error(
        "eRDMA is configured to need host networking (network = \"require\"), but this container's network namespace is managed by the engine; \
         run it with `--network host` (Docker, Podman) or `hostNetwork: true` (Kubernetes), or set network = \"any\" in the config"
    )]
    HostNetworkRequired,

    /// The kernel's RDMA subsystem keeps each device to one network namespace.
    #[error(
        "this container is on its own network, but the host's RDMA namespace mode is exclusive \
         (ib_core netns_mode=N): its eRDMA devices belong to the host's namespace and cannot be opened from the container's; \
         run it with host networking, or switch the host to shared mode (`rdma system set netns shared`)"
    )]
    RdmaNetnsExclusive,

    /// A path inside a container root, resolved through `pathrs` (prestart hook).
    #[error("{operation} {path} in container root {root}")]
    InRoot {
        operation: &'static str,
        path: String,
        root: PathBuf,
        #[source]
        source: pathrs::error::Error,
    },

    /// The container root holds something we must not write through or over (CVE-2024-0132).
    #[error("refusing to change container root {root}: {reason}")]
    HostileRoot { root: PathBuf, reason: String },

    /// A system call on a process or the host (prlimit, cgroup files), with what it was for.
    #[error("{operation}")]
    Sys {
        operation: String,
        #[source]
        source: std::io::Error,
    },

    #[error("{0}")]
    Invalid(String),
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
