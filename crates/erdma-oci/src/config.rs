//! Merging the image config: the base's config is edited, never replaced.
//!
//! The config is handled as JSON rather than `oci_spec::image::ImageConfiguration` because
//! Docker images carry fields that type does not model (`Healthcheck`, `OnBuild`,
//! `container_config`, …); dropping them would change how the image runs.
use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::error::{Error, Result};

/// Where an env variable's value came from, for `plan` and the build summary.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum EnvSource {
    /// One of erdma-build's presets (`env_presets.rs`), added because the base does not set it.
    Preset,
    /// A custom recipe's `[env]`, added because the base does not set it.
    Recipe,
    /// The host-specific presets of `--profile` (PAI-DLC's), added because the base does not
    /// set them.
    Profile,
    /// `--env` on the command line (replaces the base's value if any).
    CommandLine,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct EnvChange {
    pub name: String,
    pub value: String,
    pub source: EnvSource,
    /// The base's value that `--env` replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced: Option<String>,
}

/// Everything the merge adds; computed once, shown by `plan`, applied by `build`.
#[derive(Debug, Clone)]
pub struct ConfigEdit {
    /// Added where the base does not set the variable (`env_presets::presets`).
    pub presets: BTreeMap<String, (String, EnvSource)>,
    pub overrides: Vec<(String, String)>,
    pub labels: BTreeMap<String, String>,
    pub created: String,
    pub history_comment: String,
}

/// Parses `KEY=VALUE` from `--env`.
pub fn parse_env(s: &str) -> Result<(String, String)> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !k.contains(char::is_whitespace) => {
            Ok((k.to_string(), v.to_string()))
        }
        _ => Err(Error::InvalidEnv(s.to_string())),
    }
}

/// RFC 3339 UTC for a Unix time.
pub fn rfc3339(epoch: u64) -> String {
    erdma_common::dates::rfc3339(epoch as i64)
}

pub fn env_list(config: &Value) -> Vec<String> {
    config
        .pointer("/config/Env")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

impl ConfigEdit {
    /// The env changes this edit makes to `base`, in the order they are applied.
    pub fn env_changes(&self, base: &Value) -> Vec<EnvChange> {
        let env = env_list(base);
        let get = |k: &str| {
            env.iter().find_map(|e| {
                e.split_once('=').filter(|(n, _)| *n == k).map(|(_, v)| v.to_string())
            })
        };
        let mut out = Vec::new();
        for (k, (v, source)) in &self.presets {
            if get(k).is_none() && !self.overrides.iter().any(|(o, _)| o == k) {
                out.push(EnvChange {
                    name: k.clone(),
                    value: v.clone(),
                    source: *source,
                    replaced: None,
                });
            }
        }
        for (k, v) in &self.overrides {
            out.push(EnvChange {
                name: k.clone(),
                value: v.clone(),
                source: EnvSource::CommandLine,
                replaced: get(k),
            });
        }
        out
    }

    /// Applies the edit and appends `diff_id` to `rootfs.diff_ids`.
    pub fn apply(&self, base: &Value, diff_id: &str, created_by: &str) -> Result<Value> {
        let malformed = |reason: &str| Error::Malformed {
            what: "image config",
            reference: "base".into(),
            reason: reason.into(),
        };
        let mut cfg = base.clone();
        let root = cfg.as_object_mut().ok_or_else(|| malformed("not a JSON object"))?;

        let changes = self.env_changes(base);
        let inner = root.entry("config").or_insert_with(|| Value::Object(Map::new()));
        if inner.is_null() {
            *inner = Value::Object(Map::new());
        }
        let inner = inner.as_object_mut().ok_or_else(|| malformed("`config` is not an object"))?;
        let mut env = env_list(base);
        for c in &changes {
            let entry = format!("{}={}", c.name, c.value);
            match env
                .iter_mut()
                .find(|e| e.split_once('=').map(|(n, _)| n) == Some(c.name.as_str()))
            {
                Some(slot) => *slot = entry,
                None => env.push(entry),
            }
        }
        inner.insert("Env".into(), json!(env));
        let labels = inner.entry("Labels").or_insert_with(|| Value::Object(Map::new()));
        if labels.is_null() {
            *labels = Value::Object(Map::new());
        }
        let labels =
            labels.as_object_mut().ok_or_else(|| malformed("`config.Labels` is not an object"))?;
        for (k, v) in &self.labels {
            labels.insert(k.clone(), json!(v));
        }

        let rootfs =
            root.entry("rootfs").or_insert_with(|| json!({"type": "layers", "diff_ids": []}));
        let ids = rootfs
            .get_mut("diff_ids")
            .and_then(Value::as_array_mut)
            .ok_or_else(|| malformed("`rootfs.diff_ids` is missing"))?;
        ids.push(json!(diff_id));

        let history = root.entry("history").or_insert_with(|| json!([]));
        let history =
            history.as_array_mut().ok_or_else(|| malformed("`history` is not an array"))?;
        history.push(json!({
            "created": self.created,
            "created_by": created_by,
            "comment": self.history_comment,
        }));
        root.insert("created".into(), json!(self.created));
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit() -> ConfigEdit {
        ConfigEdit {
            presets: [("NCCL_DEBUG", "INFO"), ("NCCL_IB_HCA", "erdma"), ("PYTHONUNBUFFERED", "1")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), (v.to_string(), EnvSource::Preset)))
                .collect(),
            overrides: vec![
                ("NCCL_IB_HCA".into(), "erdma_0".into()),
                ("PATH".into(), "/opt/bin".into()),
            ],
            labels: [(
                "org.opencontainers.image.base.name".to_string(),
                "docker://x/y:1".to_string(),
            )]
            .into(),
            created: rfc3339(0),
            history_comment: "erdma-build".into(),
        }
    }

    #[test]
    fn merge_keeps_base_and_adds_presets() {
        let base = json!({
            "architecture": "amd64", "os": "linux",
            "config": {"Env": ["PATH=/usr/bin", "NCCL_DEBUG=WARN"], "Entrypoint": ["/bin/sh"],
                       "Labels": {"a": "b"}, "Healthcheck": {"Test": ["CMD", "true"]}},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:aa"]},
            "history": [{"created_by": "base"}],
            "container_config": {"Hostname": "x"}
        });
        let out = edit().apply(&base, "sha256:bb", "erdma-build build").unwrap();
        assert_eq!(
            out["config"]["Env"],
            json!([
                "PATH=/opt/bin",
                "NCCL_DEBUG=WARN",
                "PYTHONUNBUFFERED=1",
                "NCCL_IB_HCA=erdma_0"
            ]),
            "base value kept over preset, --env replaces in place, new ones appended"
        );
        assert_eq!(out["config"]["Entrypoint"], json!(["/bin/sh"]));
        assert_eq!(out["config"]["Healthcheck"], base["config"]["Healthcheck"]);
        assert_eq!(out["container_config"], base["container_config"]);
        assert_eq!(out["config"]["Labels"]["a"], "b");
        assert_eq!(out["config"]["Labels"]["org.opencontainers.image.base.name"], "docker://x/y:1");
        assert_eq!(out["rootfs"]["diff_ids"], json!(["sha256:aa", "sha256:bb"]));
        assert_eq!(out["history"].as_array().unwrap().len(), 2);
        assert_eq!(out["history"][1]["created_by"], "erdma-build build");
        let changes = edit().env_changes(&base);
        assert_eq!(
            changes.iter().find(|c| c.name == "PATH").unwrap().replaced.as_deref(),
            Some("/usr/bin")
        );
    }

    #[test]
    fn null_config_sections_are_created() {
        let base = json!({"config": null, "rootfs": {"type": "layers", "diff_ids": []}});
        let out = edit().apply(&base, "sha256:bb", "x").unwrap();
        assert!(out["config"]["Env"].as_array().unwrap().len() >= 3);
    }

    #[test]
    fn env_and_time_parsing() {
        assert_eq!(parse_env("A=b=c").unwrap(), ("A".into(), "b=c".into()));
        assert!(parse_env("novalue").is_err());
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
