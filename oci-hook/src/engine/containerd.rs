//! containerd: a drop-in registering the CRI runtime handler `erdma`
//! (`runtime_type = "io.containerd.runc.v2"`, the `runc` handler's options with
//! `BinaryName` = erdma-runtime), imported by the main config.
//!
//! - The drop-in goes into the directory the main config already imports (`imports =
//!   ["/etc/containerd/conf.d/*.toml"]`); if it imports none, `conf.d/*.toml` beside it is added
//!   to `imports` (the main config is edited with `toml_edit`, so its comments and layout stay).
//! - containerd before 2.0 merges imported files plugin by plugin, not key by key: a drop-in
//!   that sets anything under `plugins."io.containerd.grpc.v1.cri"` replaces the main config's
//!   whole CRI section (containerd#5837, fixed by containerd#9982 in 2.0). So for a version 2
//!   config the drop-in carries a copy of the main config's CRI section plus our handler, as
//!   NVIDIA's toolkit does (nvidia-container-toolkit#1311); run `configure` again after editing
//!   that section. Version 3 configs (containerd 2.x) merge key by key and get the handler only.
//! - `pod_annotations`/`container_annotations` let `com.alibabacloud.erdma.devices` through
//!   from the pod to the OCI spec, where erdma-runtime reads it: the CRI plugin drops
//!   annotations a handler does not list.
use std::path::{Path, PathBuf};

use toml_edit::{value, Array, DocumentMut, Item, Table};

use super::{read_existing, ConfigureOptions, Engine, Entry, Plan, Planned, Registration};
use crate::error::{Error, Result};
use crate::request::ANNOTATION;

pub(super) const DEFAULT_PATH: &str = "/etc/containerd/config.toml";
pub(super) const DROP_IN_NAME: &str = "erdma.toml";
pub(super) const HANDLER: &str = "erdma";

const HEADER: &str =
    "# Written by `erdma-oci-hook configure containerd`: the CRI runtime handler `erdma`.\n";
const HEADER_V2: &str = "# containerd < 2.0 replaces a plugin's whole section with an imported file's (containerd#5837),\n\
# so this file repeats the main config's CRI section; run `configure containerd` again after\n\
# changing that section.\n";

fn malformed(path: &Path, reason: impl Into<String>) -> Error {
    Error::Malformed { what: "containerd config", path: path.to_path_buf(), reason: reason.into() }
}

/// `*` and `?` against one path component (containerd's `imports` are `filepath.Glob`s).
fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            glob_match(&pattern[1..], name) || (!name.is_empty() && glob_match(pattern, &name[1..]))
        }
        (Some(b'?'), Some(_)) => glob_match(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => glob_match(&pattern[1..], &name[1..]),
        _ => false,
    }
}

/// The drop-in path an `imports` entry would load, if it would load one named erdma.toml.
fn drop_in_for(import: &str, main_dir: &Path) -> Option<PathBuf> {
    let import = Path::new(import);
    let import = if import.is_absolute() { import.to_path_buf() } else { main_dir.join(import) };
    let dir = import.parent()?;
    let pattern = import.file_name()?.to_str()?;
    let literal_dir = !dir.to_string_lossy().contains(['*', '?', '[']);
    (literal_dir
        && !pattern.contains('[')
        && glob_match(pattern.as_bytes(), DROP_IN_NAME.as_bytes()))
    .then(|| dir.join(DROP_IN_NAME))
}

/// The files an `imports` entry loads: the path itself, or what a wildcard in its last
/// component matches, sorted as `filepath.Glob` returns them. Wildcards in directories and
/// `[...]` classes are not followed (`configure` never writes them).
fn import_files(import: &str, main_dir: &Path) -> Vec<PathBuf> {
    let import = Path::new(import);
    let import = if import.is_absolute() { import.to_path_buf() } else { main_dir.join(import) };
    let (Some(dir), Some(pattern)) = (import.parent(), import.file_name().and_then(|p| p.to_str()))
    else {
        return Vec::new();
    };
    if !pattern.contains(['*', '?', '[']) {
        return if import.is_file() { vec![import] } else { Vec::new() };
    }
    if pattern.contains('[') || dir.to_string_lossy().contains(['*', '?', '[']) {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| {
            glob_match(pattern.as_bytes(), e.file_name().as_encoded_bytes()) && e.path().is_file()
        })
        .map(|e| e.path())
        .collect();
    files.sort();
    files
}

fn parse(path: &Path, text: &str) -> Result<DocumentMut> {
    text.parse().map_err(|e: toml_edit::TomlError| Error::Toml {
        what: "containerd config",
        path: path.to_path_buf(),
        source: Box::new(e),
    })
}

/// The config's version and the name of the CRI plugin section that holds runtime handlers.
fn version_and_plugin(main: &DocumentMut, main_path: &Path) -> Result<(i64, &'static str)> {
    let version = match main.get("version") {
        Some(v) => v.as_integer().ok_or_else(|| malformed(main_path, "`version` is not an integer"))?,
        // No version and no plugin settings: nothing tells v1 from v2; v2 it becomes.
        None if main.get("plugins").is_none() => 2,
        None => return Err(malformed(main_path, "config version 1 (no `version` key) is not supported: set `version = 2` (its plugin sections are named `io.containerd.grpc.v1.cri`, not `cri`)")),
    };
    let plugin = match version {
        2 => "io.containerd.grpc.v1.cri",
        3 => "io.containerd.cri.v1.runtime",
        v => {
            return Err(malformed(
                main_path,
                format!("config version {v} is not supported (2 or 3)"),
            ))
        }
    };
    Ok((version, plugin))
}

fn imports_of(main: &DocumentMut, main_path: &Path) -> Result<Vec<String>> {
    match main.get("imports") {
        None => Ok(Vec::new()),
        Some(i) => i
            .as_array()
            .ok_or_else(|| malformed(main_path, "`imports` is not an array"))?
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| malformed(main_path, "`imports` holds a non-string"))
            })
            .collect(),
    }
}

/// The runtime handler that runs erdma-runtime, as containerd would load it: the main config,
/// then its imports in order. With a version 2 config an imported file that sets the CRI section
/// replaces it whole (containerd < 2.0, see the module docs), so the last such file decides.
pub(super) fn inspect(main_path: &Path) -> Result<Registration> {
    let Some(text) = read_existing(main_path)? else {
        return Ok(Registration::absent(Engine::Containerd, main_path));
    };
    let main = parse(main_path, &text)?;
    let (version, plugin) = version_and_plugin(&main, main_path)?;
    let main_dir =
        main_path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut files = vec![(main_path.to_path_buf(), main.clone())];
    for import in imports_of(&main, main_path)? {
        for file in import_files(&import, main_dir) {
            let Some(text) = read_existing(&file)? else { continue };
            let doc = parse(&file, &text)?;
            files.push((file, doc));
        }
    }
    let mut entry = None;
    for (file, doc) in &files {
        let Some(section) = doc.get("plugins").and_then(|p| p.get(plugin)) else { continue };
        let runtimes =
            section.get("containerd").and_then(|c| c.get("runtimes")).and_then(Item::as_table_like);
        let program = |handler: &Item| {
            handler
                .get("options")
                .and_then(|o| o.get("BinaryName"))
                .and_then(Item::as_str)
                .map(PathBuf::from)
        };
        let found = runtimes.and_then(|r| {
            r.get(HANDLER)
                .map(|h| (HANDLER, h))
                .or_else(|| {
                    r.iter().find(|(_, h)| program(h).is_some_and(|p| super::is_erdma_runtime(&p)))
                })
                .map(|(name, h)| Entry {
                    file: file.clone(),
                    name: name.to_string(),
                    program: program(h),
                })
        });
        if version == 2 || found.is_some() {
            entry = found;
        }
    }
    Ok(Registration {
        engine: Engine::Containerd,
        config_path: main_path.to_path_buf(),
        installed: true,
        entry,
        default_memlock: None,
    })
}

pub(super) fn plan(main_path: &Path, opts: &ConfigureOptions) -> Result<Plan> {
    let old_main = read_existing(main_path)?;
    let mut main = parse(main_path, old_main.as_deref().unwrap_or(""))?;
    let (version, plugin) = version_and_plugin(&main, main_path)?;
    let main_dir = main_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();

    // Where the drop-in goes, and whether the main config must learn to import it.
    let imports = imports_of(&main, main_path)?;
    let imported = imports.iter().find_map(|i| drop_in_for(i, &main_dir));
    let (drop_in, add_import) = match imported {
        Some(p) => (p, None),
        None => (
            main_dir.join("conf.d").join(DROP_IN_NAME),
            Some(main_dir.join("conf.d/*.toml").to_string_lossy().into_owned()),
        ),
    };

    // The handler: the runc handler's settings, our binary, our annotation let through.
    let cri = main.get("plugins").and_then(|p| p.get(plugin)).and_then(Item::as_table_like);
    let runc = cri
        .and_then(|c| c.get("containerd"))
        .and_then(|c| c.get("runtimes"))
        .and_then(|r| r.get("runc"))
        .cloned();
    let mut handler = runc.and_then(|r| r.into_table().ok()).unwrap_or_default();
    handler.decor_mut().clear();
    handler.insert("runtime_type", value("io.containerd.runc.v2"));
    for key in ["pod_annotations", "container_annotations"] {
        let mut list = handler.get(key).and_then(Item::as_array).cloned().unwrap_or_default();
        if !list.iter().any(|v| v.as_str() == Some(ANNOTATION)) {
            list.push(ANNOTATION);
        }
        handler.insert(key, value(list));
    }
    let mut options =
        handler.get("options").cloned().and_then(|o| o.into_table().ok()).unwrap_or_default();
    options.decor_mut().clear();
    options.insert("BinaryName", value(opts.runtime_path.to_string_lossy().as_ref()));
    handler.insert("options", Item::Table(options));

    let mut out = DocumentMut::new();
    out.insert("version", value(version));
    let mut plugins = Table::new();
    plugins.set_implicit(true);
    // The copy of the main config's CRI section (version 2 only, see the module docs).
    let mut section = match main.get("plugins").and_then(|p| p.get(plugin)) {
        Some(item) if version == 2 => item
            .clone()
            .into_table()
            .map_err(|_| malformed(main_path, format!("plugins.\"{plugin}\" is not a table")))?,
        _ => implicit_table(),
    };
    let containerd = section.entry("containerd").or_insert_with(|| implicit_table().into());
    let containerd = containerd.as_table_mut().ok_or_else(|| {
        malformed(main_path, format!("plugins.\"{plugin}\".containerd is not a table"))
    })?;
    let runtimes = containerd.entry("runtimes").or_insert_with(|| implicit_table().into());
    let runtimes = runtimes.as_table_mut().ok_or_else(|| {
        malformed(main_path, format!("plugins.\"{plugin}\".containerd.runtimes is not a table"))
    })?;
    runtimes.insert(HANDLER, Item::Table(handler));
    plugins.insert(plugin, Item::Table(section));
    out.insert("plugins", Item::Table(plugins));
    super::tidy_toml(&mut out);
    let header = if version == 2 { format!("{HEADER}{HEADER_V2}") } else { HEADER.to_string() };
    let new_drop_in = format!("{header}\n{out}");
    let old_drop_in = read_existing(&drop_in)?;

    let mut files = vec![Planned::drop_in(drop_in.clone(), old_drop_in, new_drop_in)];
    let restart = Some("restart containerd to load the `erdma` runtime handler; Kubernetes pods then use it through a RuntimeClass with `handler: erdma`".to_string());
    let mut notes = Vec::new();
    if let Some(import) = add_import {
        if main.get("version").is_none() {
            main.insert("version", value(version));
        }
        let list = main.entry("imports").or_insert_with(|| value(Array::new()));
        list.as_array_mut().expect("checked above").push(import.as_str());
        notes.push(format!(
            "{} did not import {}: `{import}` added to its `imports`",
            main_path.display(),
            drop_in.parent().map(|p| p.display().to_string()).unwrap_or_default()
        ));
        let new_main = match old_main {
            Some(_) => main.to_string(),
            None => format!("# Written by `erdma-oci-hook configure containerd` to import its drop-in directory.\n{main}"),
        };
        files.push(Planned::beside(main_path.to_path_buf(), old_main, new_main));
    }
    // Another drop-in that also sets the CRI section wins or loses against ours wholesale
    // (containerd < 2.0, see above).
    if version == 2 {
        if let Ok(entries) = std::fs::read_dir(drop_in.parent().unwrap_or(Path::new("."))) {
            let mut others: Vec<String> = entries
                .flatten()
                .filter(|e| {
                    e.file_name() != DROP_IN_NAME
                        && e.file_name().to_string_lossy().ends_with(".toml")
                })
                .filter(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains(plugin)))
                .map(|e| e.path().display().to_string())
                .collect();
            others.sort();
            if !others.is_empty() {
                notes.push(format!("{} also set(s) the CRI plugin section: containerd < 2.0 keeps only the last imported file's section, so merge them by hand", others.join(", ")));
            }
        }
    }
    Ok(Plan { files, notes, restart })
}

fn implicit_table() -> Table {
    let mut t = Table::new();
    t.set_implicit(true);
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match(b"*.toml", b"erdma.toml"));
        assert!(glob_match(b"*", b"erdma.toml"));
        assert!(glob_match(b"erdma.toml", b"erdma.toml"));
        assert!(glob_match(b"e?dma.*", b"erdma.toml"));
        assert!(!glob_match(b"*.conf", b"erdma.toml"));
        let d = Path::new("/etc/containerd");
        assert_eq!(
            drop_in_for("/etc/containerd/conf.d/*.toml", d),
            Some(PathBuf::from("/etc/containerd/conf.d/erdma.toml"))
        );
        assert_eq!(
            drop_in_for("config.d/*.toml", d),
            Some(PathBuf::from("/etc/containerd/config.d/erdma.toml"))
        );
        assert_eq!(drop_in_for("/etc/containerd/*/x.toml", d), None);
        assert_eq!(drop_in_for("/etc/containerd/runtimes.toml", d), None);
    }

    #[test]
    fn inspect_follows_imports_as_containerd_merges_them() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("config.toml");
        let conf_d = dir.path().join("conf.d");
        std::fs::create_dir_all(&conf_d).unwrap();
        let handler = "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.erdma.options]\nBinaryName = \"/opt/erdma-runtime\"\n";
        std::fs::write(conf_d.join("erdma.toml"), format!("version = 2\n{handler}")).unwrap();
        std::fs::write(conf_d.join("notes.txt"), "not matched by the glob").unwrap();
        std::fs::write(&main, "version = 2\nimports = [\"conf.d/*.toml\"]\n").unwrap();
        let r = inspect(&main).unwrap();
        let e = r.entry.expect("the imported handler");
        assert_eq!(
            (e.file, e.name.as_str(), e.program),
            (conf_d.join("erdma.toml"), "erdma", Some(PathBuf::from("/opt/erdma-runtime")))
        );
        // A later import that sets the CRI section replaces it whole (version 2, containerd < 2.0)...
        std::fs::write(
            conf_d.join("zz.toml"),
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nenable_cdi = true\n",
        )
        .unwrap();
        assert_eq!(inspect(&main).unwrap().entry, None);
        // ...while version 3 merges key by key.
        std::fs::write(
            conf_d.join("erdma.toml"),
            handler.replace("io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"),
        )
        .unwrap();
        std::fs::write(
            conf_d.join("zz.toml"),
            "[plugins.\"io.containerd.cri.v1.runtime\"]\nenable_cdi = true\n",
        )
        .unwrap();
        std::fs::write(&main, "version = 3\nimports = [\"conf.d/*.toml\"]\n").unwrap();
        assert!(inspect(&main).unwrap().entry.is_some());
        // Not there: not installed; not TOML: an error naming the file.
        assert!(!inspect(&dir.path().join("absent.toml")).unwrap().installed);
        std::fs::write(&main, "version = [").unwrap();
        assert!(inspect(&main).unwrap_err().to_string().contains(&main.display().to_string()));
    }
}
