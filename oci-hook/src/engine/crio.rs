//! CRI-O: `crio.conf.d/99-erdma.conf` beside the main config, with the runtime handler
//! `[crio.runtime.runtimes.erdma]`: `runtime_path` = erdma-runtime, the rest copied from the
//! `runc` handler as the main config and the other drop-ins leave it (crio.conf.d(5): the main
//! file first, then the drop-ins in lexical order, later values winning). `99-` sorts last, so
//! nothing overrides our handler. CRI-O merges drop-ins key by key, so only the handler is
//! written. Without a `runc` entry anywhere, CRI-O's built-in one applies: `runtime_type =
//! "oci"`, `runtime_root = "/run/runc"`.
use std::path::{Path, PathBuf};

use toml_edit::{value, DocumentMut, Item, Table};

use super::{read_existing, ConfigureOptions, Engine, Entry, Plan, Planned, Registration};
use crate::error::{Error, Result};

pub(super) const DEFAULT_PATH: &str = "/etc/crio/crio.conf";
pub(super) const DROP_IN_NAME: &str = "99-erdma.conf";
pub(super) const HANDLER: &str = "erdma";

const HEADER: &str = "# Written by `erdma-oci-hook configure crio`: the runtime handler `erdma`, the `runc` handler's\n\
# settings with erdma-runtime as the runtime.\n";

fn parse(path: &Path, text: &str) -> Result<DocumentMut> {
    text.parse().map_err(|e: toml_edit::TomlError| Error::Toml {
        what: "CRI-O config",
        path: path.to_path_buf(),
        source: Box::new(e),
    })
}

fn runc_entry(doc: &DocumentMut) -> Option<Table> {
    doc.get("crio")?.get("runtime")?.get("runtimes")?.get("runc")?.clone().into_table().ok()
}

fn drop_in_dir(main_path: &Path) -> PathBuf {
    main_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join("crio.conf.d")
}

/// The files CRI-O loads, in its order: the main config, then the drop-ins sorted by name.
fn loaded_files(main_path: &Path) -> Vec<PathBuf> {
    let mut sources: Vec<PathBuf> = vec![main_path.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(drop_in_dir(main_path)) {
        let mut names: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.path())
            .collect();
        names.sort();
        sources.extend(names);
    }
    sources
}

/// The runtime handler that runs erdma-runtime, merged key by key over every file CRI-O loads.
pub(super) fn inspect(main_path: &Path) -> Result<Registration> {
    let installed = main_path.is_file() || drop_in_dir(main_path).is_dir();
    if !installed {
        return Ok(Registration::absent(Engine::Crio, main_path));
    }
    // handler -> (file of its last runtime_path, runtime_path)
    let mut handlers: Vec<(String, Option<(PathBuf, PathBuf)>)> = Vec::new();
    for path in loaded_files(main_path) {
        let Some(text) = read_existing(&path)? else { continue };
        let doc = parse(&path, &text)?;
        let Some(runtimes) = doc
            .get("crio")
            .and_then(|c| c.get("runtime"))
            .and_then(|r| r.get("runtimes"))
            .and_then(Item::as_table_like)
        else {
            continue;
        };
        for (name, h) in runtimes.iter() {
            let i = match handlers.iter().position(|(n, _)| n == name) {
                Some(i) => i,
                None => {
                    handlers.push((name.to_string(), None));
                    handlers.len() - 1
                }
            };
            if let Some(p) = h.get("runtime_path").and_then(Item::as_str) {
                handlers[i].1 = Some((path.clone(), PathBuf::from(p)));
            }
        }
    }
    let found = handlers.iter().find(|(n, _)| n == HANDLER).or_else(|| {
        handlers.iter().find(|(_, p)| p.as_ref().is_some_and(|(_, p)| super::is_erdma_runtime(p)))
    });
    let entry = found.map(|(name, p)| Entry {
        file: p.as_ref().map(|(f, _)| f.clone()).unwrap_or_else(|| main_path.to_path_buf()),
        name: name.clone(),
        program: p.as_ref().map(|(_, p)| p.clone()),
    });
    Ok(Registration {
        engine: Engine::Crio,
        config_path: main_path.to_path_buf(),
        installed,
        entry,
        default_memlock: None,
    })
}

pub(super) fn plan(main_path: &Path, opts: &ConfigureOptions) -> Result<Plan> {
    let drop_in = drop_in_dir(main_path).join(DROP_IN_NAME);

    // The configuration CRI-O would load, in its order, without our own drop-in.
    let sources: Vec<PathBuf> =
        loaded_files(main_path).into_iter().filter(|p| *p != drop_in).collect();
    let mut handler = Table::new();
    for path in &sources {
        let Some(text) = read_existing(path)? else { continue };
        if let Some(runc) = runc_entry(&parse(path, &text)?) {
            for (k, v) in runc.iter() {
                handler.insert(k, v.clone());
            }
        }
    }
    handler.remove("runtime_path");
    for (key, default) in [("runtime_type", "oci"), ("runtime_root", "/run/runc")] {
        if !handler.contains_key(key) {
            handler.insert(key, value(default));
        }
    }
    // runtime_path first, for whoever reads the file.
    let mut entry = Table::new();
    entry.insert("runtime_path", value(opts.runtime_path.to_string_lossy().as_ref()));
    for (k, v) in handler.iter() {
        let mut v = v.clone();
        if let Some(v) = v.as_value_mut() {
            v.decor_mut().clear();
        }
        entry.insert(k, v);
    }
    let mut runtimes = Table::new();
    runtimes.set_implicit(true);
    runtimes.insert(HANDLER, Item::Table(entry));
    let mut runtime = Table::new();
    runtime.set_implicit(true);
    runtime.insert("runtimes", Item::Table(runtimes));
    let mut crio = Table::new();
    crio.set_implicit(true);
    crio.insert("runtime", Item::Table(runtime));
    let mut doc = DocumentMut::new();
    doc.insert("crio", Item::Table(crio));
    super::tidy_toml(&mut doc);
    let new = format!("{HEADER}\n{doc}");
    let old = read_existing(&drop_in)?;
    let restart = Some("restart CRI-O to load the `erdma` runtime handler; Kubernetes pods then use it through a RuntimeClass with `handler: erdma`".to_string());
    Ok(Plan { files: vec![Planned::drop_in(drop_in, old, new)], notes: Vec::new(), restart })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspect_merges_drop_ins_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("crio.conf");
        assert!(!inspect(&main).unwrap().installed);
        let d = dir.path().join("crio.conf.d");
        std::fs::create_dir_all(&d).unwrap();
        // Only the drop-in directory: installed, nothing registered.
        let r = inspect(&main).unwrap();
        assert!(r.installed && r.entry.is_none());
        // A handler under another name that runs erdma-runtime counts; a later file's
        // runtime_path wins.
        std::fs::write(
            d.join("10-rdma.conf"),
            "[crio.runtime.runtimes.rdma]\nruntime_path = \"/old/erdma-runtime\"\n",
        )
        .unwrap();
        std::fs::write(
            d.join("20-rdma.conf"),
            "[crio.runtime.runtimes.rdma]\nruntime_path = \"/new/erdma-runtime\"\n",
        )
        .unwrap();
        let e = inspect(&main).unwrap().entry.unwrap();
        assert_eq!(
            (e.name.as_str(), e.file, e.program),
            ("rdma", d.join("20-rdma.conf"), Some(PathBuf::from("/new/erdma-runtime")))
        );
    }
}
