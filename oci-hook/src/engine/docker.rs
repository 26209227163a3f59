//! Docker: `runtimes.erdma` in `daemon.json`, every other key kept as it is.
//!
//! dockerd reads `runtimes` as `{"path": ..., "runtimeArgs": [...]}` (dockerd(8), "Daemon
//! configuration file") and reloads it on SIGHUP. `features.cdi` (Docker 25+) is left to the
//! operator: `erdma-runtime` does not need it.
use std::path::Path;

use serde_json::{json, Value};

use super::{read_existing, ConfigureOptions, Plan, Planned};
use crate::error::{Error, Result};

pub const DEFAULT_PATH: &str = "/etc/docker/daemon.json";
pub const RUNTIME_NAME: &str = "erdma";

pub(super) fn plan(path: &Path, opts: &ConfigureOptions) -> Result<Plan> {
    let old = read_existing(path)?;
    let malformed = |reason: String| Error::Malformed { what: "Docker daemon config", path: path.to_path_buf(), reason };
    let mut config: Value = match old.as_deref() {
        // dockerd accepts an empty file as no configuration.
        None => json!({}),
        Some(text) if text.trim().is_empty() => json!({}),
        Some(text) => serde_json::from_str(text).map_err(|e| malformed(e.to_string()))?,
    };
    let root = config.as_object_mut().ok_or_else(|| malformed("not a JSON object".into()))?;
    let runtimes = root.entry("runtimes").or_insert_with(|| json!({}));
    let runtimes = runtimes.as_object_mut().ok_or_else(|| malformed("`runtimes` is not an object".into()))?;
    let want = json!({"path": opts.runtime_path, "runtimeArgs": []});
    let new = if runtimes.get(RUNTIME_NAME) == Some(&want) {
        // Already there: keep the file byte for byte, whatever its formatting.
        old.clone().unwrap_or_default()
    } else {
        runtimes.insert(RUNTIME_NAME.into(), want);
        pretty(&config, old.as_deref().and_then(indent_of).unwrap_or("  "))
    };
    let restart = format!(
        "reload dockerd to pick up the runtime (`kill -HUP $(pidof dockerd)` or restart it), then `docker run --runtime={RUNTIME_NAME} -e ERDMA_VISIBLE_DEVICES=all --network host ...`"
    );
    Ok(Plan { files: vec![Planned::beside(path.to_path_buf(), old, new)], notes: Vec::new(), restart: Some(restart) })
}

/// The indentation the file already uses (its first indented line's), so that the diff shows
/// our change rather than a reformatting.
fn indent_of(text: &str) -> Option<&str> {
    text.lines().find_map(|l| {
        let rest = l.trim_start_matches([' ', '\t']);
        let indent = &l[..l.len() - rest.len()];
        (!indent.is_empty() && !rest.is_empty()).then_some(indent)
    })
}

fn pretty(v: &Value, indent: &str) -> String {
    use serde::Serialize;
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes()));
    v.serialize(&mut ser).expect("a Value serialises");
    String::from_utf8(out).expect("JSON is UTF-8") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_indentation() {
        assert_eq!(indent_of("{\n\t\"a\": 1\n}\n"), Some("\t"));
        assert_eq!(indent_of("{\n    \"a\": 1\n}\n"), Some("    "));
        assert_eq!(indent_of("{\"a\": 1}"), None);
        assert_eq!(pretty(&json!({"a": [1]}), "\t"), "{\n\t\"a\": [\n\t\t1\n\t]\n}\n");
    }
}
