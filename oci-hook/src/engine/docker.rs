//! Docker: `runtimes.erdma` in `daemon.json`, every other key kept as it is.
//!
//! dockerd reads `runtimes` as `{"path": ..., "runtimeArgs": [...]}` (dockerd(8), "Daemon
//! configuration file") and reloads it on SIGHUP. `features.cdi` (Docker 25+) is left to the
//! operator: `erdma-runtime` does not need it.
use std::path::Path;

use serde_json::{json, Value};

use super::{read_existing, ConfigureOptions, Engine, Entry, Plan, Planned, Registration};
use crate::config::Memlock;
use crate::error::{Error, Result};

pub(super) const DEFAULT_PATH: &str = "/etc/docker/daemon.json";
pub(super) const RUNTIME_NAME: &str = "erdma";

fn malformed(path: &Path, reason: String) -> Error {
    Error::Malformed { what: "Docker daemon config", path: path.to_path_buf(), reason }
}

/// daemon.json as dockerd reads it: a JSON object, or no configuration when the file is absent
/// or empty (dockerd accepts an empty file).
fn parse(path: &Path, text: Option<&str>) -> Result<Value> {
    let config: Value = match text {
        None => json!({}),
        Some(text) if text.trim().is_empty() => json!({}),
        Some(text) => serde_json::from_str(text).map_err(|source| Error::Json {
            what: "Docker daemon config",
            path: path.to_path_buf(),
            source,
        })?,
    };
    if !config.is_object() {
        return Err(malformed(path, "not a JSON object".into()));
    }
    Ok(config)
}

pub(super) fn plan(path: &Path, opts: &ConfigureOptions) -> Result<Plan> {
    let old = read_existing(path)?;
    let malformed = |reason: String| malformed(path, reason);
    let mut config = parse(path, old.as_deref())?;
    let root = config.as_object_mut().expect("parse returns an object");
    let runtimes = root.entry("runtimes").or_insert_with(|| json!({}));
    let runtimes =
        runtimes.as_object_mut().ok_or_else(|| malformed("`runtimes` is not an object".into()))?;
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
    Ok(Plan {
        files: vec![Planned::beside(path.to_path_buf(), old, new)],
        notes: Vec::new(),
        restart: Some(restart),
    })
}

/// `runtimes.erdma` (or a runtime under another name whose `path` is an erdma-runtime) and
/// `default-ulimits.memlock`, which containers get when nothing raises it.
pub(super) fn inspect(path: &Path) -> Result<Registration> {
    let Some(text) = read_existing(path)? else {
        return Ok(Registration::absent(Engine::Docker, path));
    };
    let malformed = |reason: String| malformed(path, reason);
    let config = parse(path, Some(&text))?;
    let root = config.as_object().expect("parse returns an object");
    let empty = serde_json::Map::new();
    let runtimes = match root.get("runtimes") {
        None => &empty,
        Some(r) => r.as_object().ok_or_else(|| malformed("`runtimes` is not an object".into()))?,
    };
    let program = |v: &Value| v.get("path").and_then(Value::as_str).map(std::path::PathBuf::from);
    let entry = runtimes
        .get_key_value(RUNTIME_NAME)
        .or_else(|| {
            runtimes.iter().find(|(_, v)| program(v).is_some_and(|p| super::is_erdma_runtime(&p)))
        })
        .map(|(name, v)| Entry {
            file: path.to_path_buf(),
            name: name.clone(),
            program: program(v),
        });
    // `{"Name": "memlock", "Hard": -1, "Soft": -1}`; -1 is unlimited (dockerd(8), --default-ulimit).
    let default_memlock = match root.get("default-ulimits").and_then(|u| u.get("memlock")) {
        None => None,
        Some(m) => match m.get("Soft").and_then(Value::as_i64) {
            Some(soft) if soft < 0 => Some(Memlock::Unlimited),
            Some(soft) => Some(Memlock::Bytes(soft as u64)),
            None => {
                return Err(malformed("`default-ulimits.memlock` has no integer `Soft`".into()))
            }
        },
    };
    Ok(Registration {
        engine: Engine::Docker,
        config_path: path.to_path_buf(),
        installed: true,
        entry,
        default_memlock,
    })
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
    let mut ser = serde_json::Serializer::with_formatter(
        &mut out,
        serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes()),
    );
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
