//! The env presets `build` adds to an image config and `check` expects: the one place they are
//! written down (the recipes carry none; a user's recipe may add its own in `[env]`).
//!
//! The PAI-DLC eRDMA guide's presets, split in two:
//! - [`PRESETS`]: what holds on every eRDMA host. `build` and `plan` add these by default.
//! - [`PAI_DLC_ENV`]: what describes PAI-DLC's hosts, not the image: their `eth0` interface and
//!   `erdma_N` devices, and a fixed RoCE v2 GID index. Added only with `--profile pai-dlc`
//!   (PAI-DLC runs no hook to derive them); elsewhere they break NCCL (see [`HOST_SPECIFIC`](erdma_common::nccl::HOST_SPECIFIC)),
//!   and `erdma-oci-hook` derives them per container from the host's sysfs.
//!
//! The base image's own value wins over a preset; `--env` replaces both.
use std::collections::BTreeMap;

use serde::Serialize;

use erdma_common::nccl::{PAI_DLC_ENV, PRESETS};

use erdma_oci::config::EnvSource;

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

/// Every preset for `profile`: [`PRESETS`], plus the profile's own.
pub fn for_profile(profile: Option<Profile>) -> BTreeMap<String, String> {
    PRESETS
        .iter()
        .chain(profile.map_or(&[][..], Profile::env))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The presets of one build, each with its source: [`PRESETS`], a
/// recipe's `[env]` over them (the built-in recipes have none), then the profile's host-specific
/// ones.
pub fn presets(
    recipe_env: &BTreeMap<String, String>,
    profile: Option<Profile>,
) -> BTreeMap<String, (String, EnvSource)> {
    let mut out: BTreeMap<String, (String, EnvSource)> =
        PRESETS.iter().map(|(k, v)| (k.to_string(), (v.to_string(), EnvSource::Preset))).collect();
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
        assert!(erdma_common::nccl::HOST_SPECIFIC.iter().all(|k| !plain.contains_key(*k)));
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
    }

    #[test]
    fn presets_by_source_and_profile() {
        let plain = presets(&BTreeMap::new(), None);
        assert_eq!(plain.len(), PRESETS.len());
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
        let edit = erdma_oci::config::ConfigEdit {
            presets: pai,
            overrides: vec![],
            labels: BTreeMap::new(),
            created: erdma_oci::config::rfc3339(0),
            history_comment: String::new(),
        };
        let base = json!({"config": {"Env": ["NCCL_SOCKET_IFNAME=bond0"]}, "rootfs": {"type": "layers", "diff_ids": []}});
        let out = edit.apply(&base, "sha256:bb", "x").unwrap();
        let env = out["config"]["Env"].as_array().unwrap();
        assert_eq!(env[0], "NCCL_SOCKET_IFNAME=bond0");
        assert_eq!(env.len(), 8);
    }
}
