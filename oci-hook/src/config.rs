//! The operator's configuration, `/etc/erdma/oci-hook.toml` (`ERDMA_OCI_HOOK_CONFIG` names
//! another file, for tests). A missing file means the defaults; unknown keys are errors.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub const DEFAULT_PATH: &str = "/etc/erdma/oci-hook.toml";
pub const ENV_PATH: &str = "ERDMA_OCI_HOOK_CONFIG";

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The real OCI runtime `erdma-runtime` hands over to (a name on PATH or a path).
    pub runtime: String,
    /// Where `erdma-runtime` and the hooks log; never stdout, which belongs to the engine.
    pub log_file: Option<PathBuf>,
    /// `RUST_LOG`-style filter for that log.
    pub log_level: String,
    /// Root of sysfs, /dev and /proc, configurable so tests run on fixture trees (/proc for
    /// the NVIDIA driver's GPU list, `driver/nvidia/gpus`).
    pub sysfs_root: PathBuf,
    pub dev_root: PathBuf,
    pub proc_root: PathBuf,
    /// Kernel drivers whose RDMA devices count as eRDMA (add `mlx5_core` for RoCE NICs).
    pub drivers: Vec<String>,
    /// Honour `ERDMA_VISIBLE_DEVICES` from the image and container env. Off: only the
    /// annotation (set by the operator's orchestration) can ask, so an image cannot grant
    /// itself devices.
    pub accept_env: bool,
    /// What a container that does not ask gets: `none` (untouched) or `all`.
    pub default_request: String,
    /// `RLIMIT_MEMLOCK` for containers that ask: `unlimited` or a number of bytes.
    pub memlock: Memlock,
    /// Which networks a container that asks may be on: `any` (its own, with NCCL's settings
    /// read from it) or `require` (only the host's).
    pub network: NetworkPolicy,
    /// Set the NCCL environment: the settings derived from sysfs for the container's devices
    /// and the presets that hold on every eRDMA host (`nccl.rs`).
    pub env_presets: bool,
    /// Whose value wins when the container sets a variable the hook derives: `repair` (the
    /// container's, unless it cannot work on this host), `keep` (always the container's) or
    /// `replace` (always the derived one).
    pub env_policy: EnvPolicy,
    /// Let NCCL fall back to TCP sockets when eRDMA is unusable in a container that asked for
    /// it. Off (the default): such a container gets `NCCL_NET=IB`, and NCCL stops with its own
    /// error instead of running at TCP speed.
    pub tcp_fallback: bool,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum EnvPolicy {
    /// The container's value, unless it cannot work here (an `NCCL_IB_HCA` that selects none of
    /// its ACTIVE ports, an `NCCL_SOCKET_IFNAME` naming no interface of the host): replaced,
    /// with a warning.
    #[default]
    Repair,
    /// The container's value, always (a warning says when it cannot work).
    Keep,
    /// The derived value, always.
    Replace,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memlock {
    Unlimited,
    Bytes(u64),
}

impl Memlock {
    /// The value for `process.rlimits` (`u64::MAX` is RLIM_INFINITY).
    pub fn value(self) -> u64 {
        match self {
            Memlock::Unlimited => u64::MAX,
            Memlock::Bytes(b) => b,
        }
    }
}

impl Serialize for Memlock {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Memlock::Unlimited => s.serialize_str("unlimited"),
            Memlock::Bytes(b) => s.serialize_u64(*b),
        }
    }
}

impl<'de> Deserialize<'de> for Memlock {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            S(String),
            N(u64),
        }
        match Raw::deserialize(d)? {
            Raw::S(s) if s == "unlimited" => Ok(Memlock::Unlimited),
            Raw::S(s) => Err(serde::de::Error::custom(format!(
                "memlock must be \"unlimited\" or a number of bytes, not `{s}`"
            ))),
            Raw::N(n) => Ok(Memlock::Bytes(n)),
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum NetworkPolicy {
    /// Refuse a container whose network namespace an engine manages (a pod without
    /// `hostNetwork: true`, `docker run` without `--network host`): for clusters that want
    /// every eRDMA job on the host's network.
    Require,
    /// Any network: a container on its own gets the devices, memlock and NCCL settings read
    /// from its namespace (`nccl.rs`), and one warning that `rdma_cm`-based programs need host
    /// networking. `warn`, its name before, is read as this.
    #[default]
    #[serde(alias = "warn")]
    Any,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            runtime: "runc".into(),
            log_file: None,
            log_level: "info".into(),
            sysfs_root: "/sys".into(),
            dev_root: "/dev".into(),
            proc_root: "/proc".into(),
            drivers: vec!["erdma".into()],
            accept_env: true,
            default_request: "none".into(),
            memlock: Memlock::Unlimited,
            network: NetworkPolicy::Any,
            env_presets: true,
            env_policy: EnvPolicy::Repair,
            tcp_fallback: false,
        }
    }
}

impl Config {
    /// Loads the file named by `ERDMA_OCI_HOOK_CONFIG`, else `/etc/erdma/oci-hook.toml`.
    pub fn load() -> Result<Config> {
        Self::load_from(&Self::path())
    }

    /// The file [`Config::load`] reads (it need not exist).
    pub fn path() -> PathBuf {
        std::env::var_os(ENV_PATH).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_PATH))
    }

    pub fn load_from(path: &Path) -> Result<Config> {
        match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str(&text)
                .map_err(|source| Error::Config { path: path.to_path_buf(), source }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(e) => Err(Error::io("reading config", path)(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file the packages install as `/etc/erdma/oci-hook.toml`: as shipped (every key
    /// commented out) and with every key uncommented, it says the defaults, and it shows every
    /// key there is.
    #[test]
    fn shipped_file_shows_every_key_at_its_default() {
        let shipped = include_str!("../oci-hook.toml");
        assert_eq!(toml::from_str::<Config>(shipped).unwrap(), Config::default());
        let keys: Vec<&str> = shipped
            .lines()
            .filter_map(|l| l.strip_prefix('#'))
            .filter(|l| l.contains(" = ") && !l.starts_with(' '))
            .collect();
        let uncommented = keys.iter().map(|l| format!("{l}\n")).collect::<String>();
        let all: Config = toml::from_str(&uncommented).unwrap();
        // log_file is shown with an example path; unset is its default.
        assert_eq!(Config { log_file: None, ..all.clone() }, Config::default());
        assert_eq!(all.log_file.as_deref(), Some(Path::new("/var/log/erdma-oci-hook.log")));
        let table = toml::Value::try_from(Config::default()).unwrap();
        let mut names: Vec<String> =
            keys.iter().map(|l| l.split(" = ").next().unwrap().to_string()).collect();
        names.sort();
        let mut want: Vec<String> = table.as_table().unwrap().keys().cloned().collect();
        want.push("log_file".into());
        want.sort();
        assert_eq!(names, want);
    }

    #[test]
    fn defaults_and_overrides() {
        let c: Config =
            toml::from_str("memlock = 8388608\nnetwork = \"warn\"\naccept_env = false\n").unwrap();
        assert_eq!(c.memlock, Memlock::Bytes(8 << 20));
        assert_eq!(c.network, NetworkPolicy::Any, "`warn` is read as `any`");
        assert_eq!(Config::default().network, NetworkPolicy::Any);
        let r: Config = toml::from_str("network = \"require\"\n").unwrap();
        assert_eq!(r.network, NetworkPolicy::Require);
        let e = toml::from_str::<Config>("network = \"host\"\n").unwrap_err().to_string();
        assert!(e.contains("require") && e.contains("any"), "{e}");
        assert!(!c.accept_env);
        assert_eq!(c.runtime, "runc");
        assert_eq!(Config::default().memlock.value(), u64::MAX);
        let e = toml::from_str::<Config>("memlok = 1\n").unwrap_err().to_string();
        assert!(e.contains("memlok"), "{e}");
        let e = toml::from_str::<Config>("memlock = \"lots\"\n").unwrap_err().to_string();
        assert!(e.contains("unlimited"), "{e}");
    }

    #[test]
    fn missing_file_is_defaults() {
        assert_eq!(
            Config::load_from(Path::new("/nonexistent/erdma.toml")).unwrap(),
            Config::default()
        );
    }
}
