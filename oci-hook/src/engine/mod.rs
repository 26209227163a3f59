//! Registering `erdma-runtime` / the hooks with Docker, containerd, CRI-O and Podman
//! (`erdma-oci-hook configure ENGINE`), after NVIDIA's `pkg/config/engine`: each engine
//! computes the file contents it wants from what is there, and this module does the rest the
//! same way for all of them:
//!
//! - idempotent: a file whose content would not change is not written and gets no backup;
//! - atomic: temporary file in the same directory, fsync, rename, mode kept;
//! - a timestamped backup of the previous content when a file changes. A backup of a file in
//!   a drop-in directory goes into the directory above it: CRI-O reads every file in
//!   `crio.conf.d` whatever its name (`UpdateFromPath` walks the directory), so a backup there
//!   would be loaded as configuration;
//! - `--dry-run`: the unified diff, nothing written;
//! - a config that does not parse is an error naming the file, and nothing is written.
//!
//! [`inspect`] reads the same files back, as each engine would, for `erdma-oci-hook doctor`.
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::Memlock;
use crate::error::{Error, Result};

mod containerd;
mod crio;
pub mod detect;
mod docker;
mod podman;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Docker,
    Containerd,
    Crio,
    Podman,
}

impl Engine {
    pub const ALL: [Engine; 4] = [Engine::Docker, Engine::Containerd, Engine::Crio, Engine::Podman];

    /// The engine's name as its project writes it.
    pub fn display_name(self) -> &'static str {
        match self {
            Engine::Docker => "Docker",
            Engine::Containerd => "containerd",
            Engine::Crio => "CRI-O",
            Engine::Podman => "Podman",
        }
    }

    /// The name `configure` takes.
    pub fn arg(self) -> &'static str {
        match self {
            Engine::Docker => "docker",
            Engine::Containerd => "containerd",
            Engine::Crio => "crio",
            Engine::Podman => "podman",
        }
    }

    /// What `--config` names for this engine when it is not given.
    pub fn default_config_path(self) -> &'static Path {
        Path::new(match self {
            // The daemon's config file.
            Engine::Docker => docker::DEFAULT_PATH,
            // The main config; the drop-in goes into the directory it imports.
            Engine::Containerd => containerd::DEFAULT_PATH,
            // The main config; the drop-in goes into `crio.conf.d` beside it.
            Engine::Crio => crio::DEFAULT_PATH,
            // The hooks directory.
            Engine::Podman => podman::DEFAULT_DIR,
        })
    }
}

#[derive(Debug, Clone)]
pub struct ConfigureOptions {
    pub dry_run: bool,
    /// The engine's config file (Docker, containerd, CRI-O: the main config) or hooks
    /// directory (Podman), when not [`Engine::default_config_path`].
    pub config_path: Option<PathBuf>,
    /// Absolute path of `erdma-runtime`.
    pub runtime_path: PathBuf,
    /// Absolute path of `erdma-oci-hook`.
    pub hook_path: PathBuf,
}

/// One file that `configure` wrote or would write.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FileChange {
    pub path: PathBuf,
    pub changed: bool,
    pub backup: Option<PathBuf>,
    pub diff: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConfigureReport {
    /// The file that registers eRDMA with the engine (daemon.json, the drop-in, the hook).
    pub path: PathBuf,
    /// Whether any file changed (or would, with `--dry-run`).
    pub changed: bool,
    /// Backup of `path`'s previous content.
    pub backup: Option<PathBuf>,
    /// Unified diff of every change (what `--dry-run` prints).
    pub diff: String,
    /// Other files changed too: containerd's main config when it did not import the drop-in
    /// directory yet.
    pub also: Vec<FileChange>,
    /// What the operator should do or know next (reload the engine, a caveat).
    pub notes: Vec<String>,
}

/// What an engine's configuration says about eRDMA (`erdma-oci-hook doctor`), read the way
/// the engine reads it (Docker: `runtimes`; containerd: the main config and its `imports`;
/// CRI-O: the main config and `crio.conf.d` in order; Podman: the hooks directory).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Registration {
    pub engine: Engine,
    /// The main config file (Docker, containerd, CRI-O) or the hooks directory (Podman).
    pub config_path: PathBuf,
    /// Whether that configuration exists; without it the engine counts as not installed.
    pub installed: bool,
    /// The entry that makes the engine run erdma-runtime (Podman: the precreate hook).
    pub entry: Option<Entry>,
    /// Docker's `default-ulimits.memlock` (soft limit): what containers get unless raised.
    pub default_memlock: Option<Memlock>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Entry {
    /// The file that holds it (daemon.json, a drop-in, the hook file).
    pub file: PathBuf,
    /// The runtime or handler name (`erdma`), or the hook file's name (`erdma.json`).
    pub name: String,
    /// The program it runs: erdma-runtime, or erdma-oci-hook for Podman. `None` when the
    /// entry names none (the engine would then run something else).
    pub program: Option<PathBuf>,
}

impl Registration {
    fn absent(engine: Engine, config_path: &Path) -> Registration {
        Registration {
            engine,
            config_path: config_path.to_path_buf(),
            installed: false,
            entry: None,
            default_memlock: None,
        }
    }
}

/// Whether `program` is an erdma-runtime (an entry registered under another name counts too).
fn is_erdma_runtime(program: &Path) -> bool {
    program.file_name().is_some_and(|n| n == "erdma-runtime")
}

/// Reads `engine`'s configuration at `config_path` ([`Engine::default_config_path`] unless
/// overridden). A config that does not parse is an error naming the file.
pub fn inspect(engine: Engine, config_path: &Path) -> Result<Registration> {
    match engine {
        Engine::Docker => docker::inspect(config_path),
        Engine::Containerd => containerd::inspect(config_path),
        Engine::Crio => crio::inspect(config_path),
        Engine::Podman => podman::inspect(config_path),
    }
}

/// A file an engine wants to have: its current content (`None`: absent) and the new one.
#[derive(Debug, Clone)]
pub(crate) struct Planned {
    pub path: PathBuf,
    pub old: Option<String>,
    pub new: String,
    /// Where a backup of `old` goes.
    pub backup_dir: PathBuf,
}

impl Planned {
    /// A file whose backups go beside it.
    pub(crate) fn beside(path: PathBuf, old: Option<String>, new: String) -> Planned {
        let backup_dir = parent(&path).to_path_buf();
        Planned { path, old, new, backup_dir }
    }

    /// A file in a drop-in directory: backups go into the directory above.
    pub(crate) fn drop_in(path: PathBuf, old: Option<String>, new: String) -> Planned {
        let backup_dir = parent(parent(&path)).to_path_buf();
        Planned { path, old, new, backup_dir }
    }

    fn changed(&self) -> bool {
        self.old.as_deref() != Some(self.new.as_str())
    }
}

pub(crate) struct Plan {
    /// The registering file first; files it depends on after it (written in that order,
    /// so a failure half way leaves nothing that points at a missing file).
    pub files: Vec<Planned>,
    pub notes: Vec<String>,
    /// How to make the engine load a change; a note only when something changed.
    pub restart: Option<String>,
}

fn parent(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Lays out a generated TOML document the same way whatever the formatting of the tables it
/// was copied from: no comments or indentation inside, tables in the order they were inserted.
pub(crate) fn tidy_toml(doc: &mut toml_edit::DocumentMut) {
    fn walk(t: &mut toml_edit::Table, next: &mut usize) {
        t.decor_mut().clear();
        t.set_position(*next);
        *next += 1;
        t.fmt();
        for (_, item) in t.iter_mut() {
            match item {
                toml_edit::Item::Table(sub) => walk(sub, next),
                toml_edit::Item::ArrayOfTables(a) => a.iter_mut().for_each(|sub| walk(sub, next)),
                _ => {}
            }
        }
    }
    let mut next = 0;
    walk(doc.as_table_mut(), &mut next);
}

/// Reads `path` as UTF-8 text; `None` when it does not exist.
pub(crate) fn read_existing(path: &Path) -> Result<Option<String>> {
    match std::fs::read(path) {
        Ok(raw) => String::from_utf8(raw).map(Some).map_err(|_| Error::Malformed {
            what: "config file",
            path: path.to_path_buf(),
            reason: "not UTF-8 text".into(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("reading", path)(e)),
    }
}

pub fn configure(engine: Engine, opts: &ConfigureOptions) -> Result<ConfigureReport> {
    for (what, p) in [("runtime path", &opts.runtime_path), ("hook path", &opts.hook_path)] {
        if !p.is_absolute() {
            return Err(Error::Invalid(format!(
                "the {what} must be absolute, not {}",
                p.display()
            )));
        }
    }
    let config_path =
        opts.config_path.clone().unwrap_or_else(|| engine.default_config_path().to_path_buf());
    let mut plan = match engine {
        Engine::Docker => docker::plan(&config_path, opts)?,
        Engine::Containerd => containerd::plan(&config_path, opts)?,
        Engine::Crio => crio::plan(&config_path, opts)?,
        Engine::Podman => podman::plan(&config_path, opts)?,
    };
    if engine != Engine::Podman && !opts.runtime_path.exists() {
        plan.notes.push(format!(
            "{} does not exist (yet): the engine will fail to start eRDMA containers until it does",
            opts.runtime_path.display()
        ));
    }
    let mut changes = Vec::new();
    for file in &plan.files {
        changes.push(commit(file, opts.dry_run)?);
    }
    let mut changes = changes.into_iter();
    let main = changes.next().expect("every engine plans at least one file");
    let also: Vec<FileChange> = changes.collect();
    let diff = std::iter::once(&main).chain(&also).map(|c| c.diff.as_str()).collect::<String>();
    let changed = main.changed || also.iter().any(|c| c.changed);
    let mut notes = plan.notes;
    if changed {
        notes.extend(plan.restart);
    }
    Ok(ConfigureReport { changed, path: main.path, backup: main.backup, diff, also, notes })
}

/// Unified diff of `old` (absent: `/dev/null`) to `new`, labelled with `path`.
pub(crate) fn unified_diff(path: &Path, old: Option<&str>, new: &str) -> String {
    if old == Some(new) {
        return String::new();
    }
    let label = path.display().to_string();
    let from = if old.is_some() { label.clone() } else { "/dev/null".to_string() };
    similar::TextDiff::from_lines(old.unwrap_or(""), new)
        .unified_diff()
        .context_radius(3)
        .header(&from, &label)
        .to_string()
}

fn commit(file: &Planned, dry_run: bool) -> Result<FileChange> {
    let diff = unified_diff(&file.path, file.old.as_deref(), &file.new);
    if !file.changed() {
        return Ok(FileChange { path: file.path.clone(), changed: false, backup: None, diff });
    }
    if dry_run {
        return Ok(FileChange { path: file.path.clone(), changed: true, backup: None, diff });
    }
    // A config that is a symlink (to a file managed elsewhere) is updated where it points.
    let target = match std::fs::symlink_metadata(&file.path) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(&file.path).map_err(Error::io("resolving", &file.path))?
        }
        _ => file.path.clone(),
    };
    let dir = parent(&target);
    std::fs::create_dir_all(dir).map_err(Error::io("creating directory", dir))?;
    let backup = match &file.old {
        Some(old) => Some(write_backup(&target, &file.backup_dir, old.as_bytes())?),
        None => None,
    };
    crate::spec::write_bytes_atomic(&target, file.new.as_bytes())?;
    Ok(FileChange { path: file.path.clone(), changed: true, backup, diff })
}

/// `NAME.erdma-backup-YYYYMMDDTHHMMSSZ` in `dir`, never overwriting an earlier backup, with
/// the original's mode.
fn write_backup(original: &Path, dir: &Path, content: &[u8]) -> Result<PathBuf> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let name = original
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config".into());
    let mode =
        std::fs::metadata(original).map(|m| m.permissions().mode() & 0o7777).unwrap_or(0o644);
    std::fs::create_dir_all(dir).map_err(Error::io("creating directory", dir))?;
    let stamp = utc_stamp(std::time::SystemTime::now());
    for n in 0u32.. {
        let suffix = if n == 0 { String::new() } else { format!(".{n}") };
        let path = dir.join(format!("{name}.erdma-backup-{stamp}{suffix}"));
        match std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&path) {
            Ok(mut f) => {
                f.write_all(content).map_err(Error::io("writing backup", &path))?;
                f.set_permissions(std::fs::Permissions::from_mode(mode))
                    .map_err(Error::io("writing backup", &path))?;
                f.sync_all().map_err(Error::io("writing backup", &path))?;
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io("writing backup", &path)(e)),
        }
    }
    unreachable!("u32 backups in one second")
}

/// `YYYYMMDDTHHMMSSZ` (UTC) for `t`.
fn utc_stamp(t: std::time::SystemTime) -> String {
    let secs = t.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (y, m, d, hh, mm, ss) = erdma_common::dates::civil(secs as i64);
    format!("{y:04}{m:02}{d:02}T{hh:02}{mm:02}{ss:02}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps() {
        let at = |s: u64| utc_stamp(std::time::UNIX_EPOCH + std::time::Duration::from_secs(s));
        assert_eq!(at(0), "19700101T000000Z");
        assert_eq!(at(951_782_400), "20000229T000000Z");
        assert_eq!(at(1_767_225_599), "20251231T235959Z");
    }

    #[test]
    fn diff_labels() {
        let p = Path::new("/etc/x.json");
        assert_eq!(unified_diff(p, Some("a\n"), "a\n"), "");
        let d = unified_diff(p, None, "a\n");
        assert!(d.starts_with("--- /dev/null\n+++ /etc/x.json\n"), "{d}");
        let d = unified_diff(p, Some("a\nb\n"), "a\nc\n");
        assert!(d.contains("-b\n+c\n"), "{d}");
    }
}
