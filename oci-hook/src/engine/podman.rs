//! Podman: `erdma.json` in an OCI hooks directory, running `erdma-oci-hook precreate` for
//! containers with the `com.alibabacloud.erdma.devices` annotation.
//!
//! Schema 1.0.0 of oci-hooks(5): `version`, `hook` (an OCI runtime-spec hook entry), `when`
//! (here `annotations`: key and value are POSIX EREs that must both match), `stages`.
//! `precreate` is Podman's extension stage (podman(1), `--hooks-dir`): the hook gets the
//! proposed OCI config on stdin and returns the edited one on stdout, before the runtime
//! reads it, so it can change rlimits and namespaces (Podman 1.x and later, so Debian 12's
//! 4.3). Podman reads `/usr/share/containers/oci/hooks.d` and then `/etc/containers/oci/hooks.d`
//! for root when `hooks_dir` is not set; the `/etc` one is the administrator's and wins.
//!
//! Caveats, reported as notes:
//! - a hook whose `hook.path` does not exist makes Podman refuse the whole directory
//!   (containers/common `pkg/hooks/1.0.0`, `Validate`), so that is checked here first;
//! - CRI-O reads the same two directories but knows no `precreate` stage and rejects the
//!   file; on a host with both, give Podman a hooks directory of its own (`hooks_dir` in
//!   containers.conf) and write the hook there with `--config`;
//! - the hook is matched on the annotation only: `ERDMA_VISIBLE_DEVICES` alone does not run it.
use std::path::Path;

use serde_json::{json, Value};

use super::{read_existing, ConfigureOptions, Engine, Entry, Plan, Planned, Registration};
use crate::error::{Error, Result};
use crate::request::ANNOTATION;

pub(super) const DEFAULT_DIR: &str = "/etc/containers/oci/hooks.d";
/// The directories Podman and CRI-O both read by default.
const SHARED_DIRS: &[&str] = &["/etc/containers/oci/hooks.d", "/usr/share/containers/oci/hooks.d"];
pub(super) const FILE_NAME: &str = "erdma.json";

/// The hook definition for `hook_path`.
pub(super) fn hook_json(hook_path: &Path) -> Value {
    // An ERE for the exact annotation key: dots escaped, anchored.
    let key = format!("^{}$", ANNOTATION.replace('.', "\\."));
    json!({
        "version": "1.0.0",
        "hook": {"path": hook_path, "args": ["erdma-oci-hook", "precreate"]},
        "when": {"annotations": {key: ".+"}},
        "stages": ["precreate"],
    })
}

/// The precreate hook that runs erdma-oci-hook in `dir`: `erdma.json`, else any hook file
/// whose program is an `erdma-oci-hook` with the `precreate` stage.
pub(super) fn inspect(dir: &Path) -> Result<Registration> {
    if !dir.is_dir() {
        return Ok(Registration::absent(Engine::Podman, dir));
    }
    let entries = std::fs::read_dir(dir).map_err(Error::io("reading hooks directory", dir))?;
    let mut files: Vec<std::path::PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    // Ours first, then the others in name order.
    files.sort_by_key(|p| (p.file_name() != Some(FILE_NAME.as_ref()), p.clone()));
    let mut entry = None;
    for path in files {
        let Some(text) = read_existing(&path)? else { continue };
        let ours = path.file_name() == Some(FILE_NAME.as_ref());
        let hook: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            // Podman refuses the whole directory over a hook that does not parse.
            Err(e) if ours => {
                return Err(Error::Malformed { what: "OCI hook", path, reason: e.to_string() })
            }
            Err(_) => continue,
        };
        let program =
            hook.pointer("/hook/path").and_then(Value::as_str).map(std::path::PathBuf::from);
        let precreate = hook
            .get("stages")
            .and_then(Value::as_array)
            .is_some_and(|s| s.iter().any(|x| x == "precreate"));
        let is_hook =
            program.as_ref().is_some_and(|p| p.file_name().is_some_and(|n| n == "erdma-oci-hook"));
        if precreate && (ours || is_hook) {
            let name =
                path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            entry = Some(Entry { file: path, name, program });
            break;
        }
    }
    Ok(Registration {
        engine: Engine::Podman,
        config_path: dir.to_path_buf(),
        installed: true,
        entry,
        default_memlock: None,
    })
}

pub(super) fn plan(dir: &Path, opts: &ConfigureOptions) -> Result<Plan> {
    if !opts.hook_path.is_file() {
        return Err(Error::Invalid(format!(
            "hook {} does not exist: Podman refuses every hook in {} when one names a missing program",
            opts.hook_path.display(),
            dir.display()
        )));
    }
    let path = dir.join(FILE_NAME);
    let old = read_existing(&path)?;
    let want = hook_json(&opts.hook_path);
    // The file is ours: one that does not parse is replaced (its content kept in the backup).
    let same = old
        .as_deref()
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .is_some_and(|v| v == want);
    let new = if same {
        old.clone().unwrap_or_default()
    } else {
        serde_json::to_string_pretty(&want).expect("a Value serialises") + "\n"
    };
    let restart = Some(format!("no restart needed: Podman runs the hook for containers started with `--annotation {ANNOTATION}=all` (or a device list)"));
    let mut notes = Vec::new();
    let crio_here = Path::new("/etc/crio").exists()
        || Path::new("/usr/bin/crio").exists()
        || Path::new("/usr/local/bin/crio").exists();
    if crio_here && SHARED_DIRS.iter().any(|d| Path::new(d) == dir) {
        notes.push(format!("CRI-O also reads {} and rejects the `precreate` stage: give Podman its own `hooks_dir` (containers.conf) and use --config", dir.display()));
    }
    Ok(Plan { files: vec![Planned::drop_in(path, old, new)], notes, restart })
}
