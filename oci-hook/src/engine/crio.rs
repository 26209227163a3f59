//! CRI-O: `crio.conf.d/99-erdma.conf` beside the main config, with the runtime handler
//! `[crio.runtime.runtimes.erdma]`: `runtime_path` = erdma-runtime, the rest copied from the
//! `runc` handler as the main config and the other drop-ins leave it (crio.conf.d(5): the main
//! file first, then the drop-ins in lexical order, later values winning). `99-` sorts last, so
//! nothing overrides our handler. CRI-O merges drop-ins key by key, so only the handler is
//! written. Without a `runc` entry anywhere, CRI-O's built-in one applies: `runtime_type =
//! "oci"`, `runtime_root = "/run/runc"`.
use std::path::{Path, PathBuf};

use toml_edit::{value, DocumentMut, Item, Table};

use super::{read_existing, ConfigureOptions, Plan, Planned};
use crate::error::{Error, Result};

pub const DEFAULT_PATH: &str = "/etc/crio/crio.conf";
pub const DROP_IN_NAME: &str = "99-erdma.conf";
pub const HANDLER: &str = "erdma";

const HEADER: &str = "# Written by `erdma-oci-hook configure crio`: the runtime handler `erdma`, the `runc` handler's\n\
# settings with erdma-runtime as the runtime.\n";

fn parse(path: &Path, text: &str) -> Result<DocumentMut> {
    text.parse().map_err(|e: toml_edit::TomlError| Error::Malformed { what: "CRI-O config", path: path.to_path_buf(), reason: e.to_string() })
}

fn runc_entry(doc: &DocumentMut) -> Option<Table> {
    doc.get("crio")?.get("runtime")?.get("runtimes")?.get("runc")?.clone().into_table().ok()
}

pub(super) fn plan(main_path: &Path, opts: &ConfigureOptions) -> Result<Plan> {
    let main_dir = main_path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let drop_in_dir = main_dir.join("crio.conf.d");
    let drop_in = drop_in_dir.join(DROP_IN_NAME);

    // The configuration CRI-O would load, in its order, without our own drop-in.
    let mut sources: Vec<PathBuf> = vec![main_path.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(&drop_in_dir) {
        let mut names: Vec<PathBuf> = entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_file())).map(|e| e.path()).filter(|p| *p != drop_in).collect();
        names.sort();
        sources.extend(names);
    }
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
