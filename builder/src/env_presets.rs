//! The env presets `build` adds to an image config and `check` expects: the one place they are
//! written down (the recipes carry none; a user's recipe may add its own in `[env]`).
//!
//! The PAI-DLC eRDMA guide's presets, split in two:
//! - [`ENV_PRESETS`]: what holds on every eRDMA host. `build` and `plan` add these by default.
//! - [`PAI_DLC_ENV`]: what describes PAI-DLC's hosts, not the image: their `eth0` interface and
//!   `erdma_N` devices, and a fixed RoCE v2 GID index. Added only with `--profile pai-dlc`
//!   (PAI-DLC runs no hook to derive them); elsewhere they break NCCL (see [`HOST_SPECIFIC`]),
//!   and `erdma-oci-hook` derives them per container from the host's sysfs.
//!
//! The base image's own value wins over a preset; `--env` replaces both.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::image::config::EnvSource;

/// Added to every image unless the base sets them: PAI-DLC's tuning, true on every eRDMA host
/// whatever its device and interface names (the PAI-DLC eRDMA guide). `erdma-oci-hook` adds the same ones.
pub const ENV_PRESETS: &[(&str, &str)] = &[
    ("NCCL_DEBUG", "INFO"),
    ("NCCL_IB_QPS_PER_CONNECTION", "8"),
    ("NCCL_MIN_NCHANNELS", "16"),
    ("NCCL_NET_PLUGIN", "none"),
    ("PYTHONUNBUFFERED", "1"),
];

/// Added on top of [`ENV_PRESETS`] with `--profile pai-dlc` only: PAI-DLC's hosts have `eth0`
/// and `erdma_N` devices with the IPv4-mapped RoCE v2 GID at index 1 (the PAI-DLC eRDMA guide).
pub const PAI_DLC_ENV: &[(&str, &str)] =
    &[("NCCL_SOCKET_IFNAME", "eth0"), ("NCCL_IB_HCA", "erdma"), ("NCCL_IB_GID_INDEX", "1")];

/// The variables that describe a host, not an image: `check` warns when an image bakes one in
/// (outside `--profile pai-dlc`).
pub const HOST_SPECIFIC: &[&str] = &["NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX"];

/// A platform whose hosts and requirements erdma-build knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// Alibaba Cloud PAI-DLC: its hosts use `eth0` and `erdma_N` devices and run no hook, so
    /// `build` bakes [`PAI_DLC_ENV`]; `check` also asks for CUDA 12.1 or later, NCCL 2.19 or
    /// later and Python 3.
    PaiDlc,
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::PaiDlc => "pai-dlc",
        }
    }

    /// The platform's own name, for messages.
    pub fn platform(self) -> &'static str {
        match self {
            Profile::PaiDlc => "PAI-DLC",
        }
    }

    /// The host-specific presets this platform's hosts call for.
    pub fn env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Profile::PaiDlc => PAI_DLC_ENV,
        }
    }
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Every preset for `profile`: [`ENV_PRESETS`], plus the profile's own.
pub fn for_profile(profile: Option<Profile>) -> BTreeMap<String, String> {
    ENV_PRESETS
        .iter()
        .chain(profile.map_or(&[][..], Profile::env))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Why `name=value` in an image config breaks NCCL on some hosts; `None` when it is not host
/// data (`NCCL_IB_GID_INDEX=-1` asks NCCL to choose, which is right everywhere).
pub fn host_specific(name: &str, value: &str) -> Option<String> {
    let v = value.trim();
    let names = || {
        v.trim_start_matches(['^', '='])
            .split(',')
            .map(|n| n.split(':').next().unwrap_or(n).trim())
            .filter(|n| !n.is_empty())
            .collect::<Vec<_>>()
            .join(" or ")
    };
    let why = match name {
        // NCCL stops with "Bootstrap : no socket interface found" (the PAI-DLC eRDMA guide notes; NCCL #1837).
        "NCCL_SOCKET_IFNAME" if v.starts_with('^') => "it excludes interfaces by this host's names: where they differ, NCCL may bootstrap over the wrong interface".to_string(),
        "NCCL_SOCKET_IFNAME" => format!("on a host without {} every NCCL job stops at start (\"Bootstrap : no socket interface found\")", names()),
        // A prefix filter: `erdma` matches erdma_0, not udev's rocep26s0; with no device left
        // NCCL quietly uses TCP sockets.
        "NCCL_IB_HCA" if v.starts_with('^') => "it excludes RDMA devices by this host's names: where they differ, NCCL may pick devices it should not".to_string(),
        "NCCL_IB_HCA" => format!("on a host whose RDMA devices are not named {} (udev names them rocep26s0) it matches none, and NCCL silently falls back to TCP sockets, many times slower", names()),
        // NCCL chooses the RoCE v2 GID itself since 2.21; the right index differs per host and
        // even per device (erdma-controller's docs/erdma-benchmark: 2 and 1 on one node).
        "NCCL_IB_GID_INDEX" if v == "-1" => return None,
        "NCCL_IB_GID_INDEX" => "it overrides NCCL's own RoCE v2 GID choice (automatic since NCCL 2.21) and is wrong wherever the IPv4-mapped RoCE v2 GID is at another index (mlx5 RoCE: usually 3; two eRDMA devices of one node seen at 2 and 1)".to_string(),
        _ => return None,
    };
    Some(format!("{name}={value} is host data: {why}"))
}

/// The presets of one build, each with its source: [`ENV_PRESETS`], a
/// recipe's `[env]` over them (the built-in recipes have none), then the profile's host-specific
/// ones.
pub fn presets(
    recipe_env: &BTreeMap<String, String>,
    profile: Option<Profile>,
) -> BTreeMap<String, (String, EnvSource)> {
    let mut out: BTreeMap<String, (String, EnvSource)> = ENV_PRESETS
        .iter()
        .map(|(k, v)| (k.to_string(), (v.to_string(), EnvSource::Preset)))
        .collect();
    out.extend(recipe_env.iter().map(|(k, v)| (k.clone(), (v.clone(), EnvSource::Recipe))));
    out.extend(
        profile
            .map_or(&[][..], Profile::env)
            .iter()
            .map(|(k, v)| (k.to_string(), (v.to_string(), EnvSource::Profile))),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_profile_adds_the_host_specific_three() {
        let plain = for_profile(None);
        assert_eq!(
            plain.keys().map(String::as_str).collect::<Vec<_>>(),
            [
                "NCCL_DEBUG",
                "NCCL_IB_QPS_PER_CONNECTION",
                "NCCL_MIN_NCHANNELS",
                "NCCL_NET_PLUGIN",
                "PYTHONUNBUFFERED"
            ]
        );
        assert!(HOST_SPECIFIC.iter().all(|k| !plain.contains_key(*k)));
        let pai = for_profile(Some(Profile::PaiDlc));
        assert_eq!(pai.len(), 8);
        assert_eq!(
            (
                pai["NCCL_SOCKET_IFNAME"].as_str(),
                pai["NCCL_IB_HCA"].as_str(),
                pai["NCCL_IB_GID_INDEX"].as_str()
            ),
            ("eth0", "erdma", "1")
        );
        let mut host: Vec<&str> = PAI_DLC_ENV.iter().map(|(k, _)| *k).collect();
        host.sort_unstable();
        let mut want = HOST_SPECIFIC.to_vec();
        want.sort_unstable();
        assert_eq!(host, want, "the profile sets exactly the host-specific variables");
    }

    #[test]
    fn host_data_says_what_breaks_where() {
        assert_eq!(
            host_specific("NCCL_SOCKET_IFNAME", "eth0").unwrap(),
            "NCCL_SOCKET_IFNAME=eth0 is host data: on a host without eth0 every NCCL job stops at start (\"Bootstrap : no socket interface found\")"
        );
        assert!(host_specific("NCCL_SOCKET_IFNAME", "=eth0,eth1")
            .unwrap()
            .contains("without eth0 or eth1"));
        assert!(host_specific("NCCL_IB_HCA", "erdma")
            .unwrap()
            .contains("not named erdma (udev names them rocep26s0)"));
        assert!(host_specific("NCCL_IB_HCA", "=erdma_0:1").unwrap().contains("not named erdma_0 "));
        assert!(host_specific("NCCL_IB_GID_INDEX", "1").unwrap().contains("mlx5 RoCE: usually 3"));
        assert_eq!(host_specific("NCCL_IB_GID_INDEX", "-1"), None, "-1 lets NCCL choose");
        assert_eq!(host_specific("NCCL_DEBUG", "INFO"), None);
    }

    #[test]
    fn presets_by_source_and_profile() {
        let plain = presets(&BTreeMap::new(), None);
        assert_eq!(plain.len(), ENV_PRESETS.len());
        assert!(plain.values().all(|(_, s)| *s == EnvSource::Preset));
        assert!(
            !plain.contains_key("NCCL_SOCKET_IFNAME")
                && !plain.contains_key("NCCL_IB_HCA")
                && !plain.contains_key("NCCL_IB_GID_INDEX")
        );
        let recipe: BTreeMap<String, String> = [
            ("NCCL_DEBUG".to_string(), "WARN".to_string()),
            ("NCCL_IB_HCA".to_string(), "=erdma_0".to_string()),
        ]
        .into();
        let pai = presets(&recipe, Some(Profile::PaiDlc));
        assert_eq!(pai.len(), 8);
        assert_eq!(
            pai["NCCL_DEBUG"],
            ("WARN".to_string(), EnvSource::Recipe),
            "a recipe's [env] wins over the built-in table"
        );
        assert_eq!(
            pai["NCCL_IB_HCA"],
            ("erdma".to_string(), EnvSource::Profile),
            "--profile is asked for on this run"
        );
        assert_eq!(pai["NCCL_SOCKET_IFNAME"], ("eth0".to_string(), EnvSource::Profile));
        assert_eq!(pai["NCCL_IB_GID_INDEX"], ("1".to_string(), EnvSource::Profile));
        // The base's value wins over every kind of preset.
        let edit = crate::image::config::ConfigEdit {
            presets: pai,
            overrides: vec![],
            labels: BTreeMap::new(),
            created: crate::image::config::rfc3339(0),
            history_comment: String::new(),
        };
        let base = json!({"config": {"Env": ["NCCL_SOCKET_IFNAME=bond0"]}, "rootfs": {"type": "layers", "diff_ids": []}});
        let out = edit.apply(&base, "sha256:bb", "x").unwrap();
        let env = out["config"]["Env"].as_array().unwrap();
        assert_eq!(env[0], "NCCL_SOCKET_IFNAME=bond0");
        assert_eq!(env.len(), 8);
    }
}
