//! File logging for the binaries (`erdma-runtime`, `erdma-oci-hook`).
//!
//! A runtime wrapper or hook must never write to stdout: stdout belongs to the engine (the
//! `precreate` protocol, `runc state` JSON, a container's own output under `runc run`). So logs
//! go to the file the config names (`log_file`), appended, one `write(2)` per event so that
//! concurrent invocations (fifty containers created at once) do not interleave within a line.
//! Without `log_file` nothing is logged; errors still reach stderr through the binaries.
//! `RUST_LOG` overrides the config's `log_level`. Both take `target=level`
//! lists (`info`, `warn,erdma_oci_hook::discover=debug`): `filter::Targets`, not `EnvFilter`,
//! whose regex engine would double the size of the binaries and, through the relocations it
//! brings, the time an exec of `erdma-runtime` takes (bench/runtime_start.sh).
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Mutex;

use tracing::span::EnteredSpan;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::Config;

/// Keeps the per-process span (program name and pid) entered; drop it last.
#[must_use = "logging lines lose their program and pid once the guard is dropped"]
pub struct Guard {
    _span: Option<EnteredSpan>,
}

/// Sets up logging to `config.log_file` for `program`. Problems with the log file are reported
/// once on stderr and never stop the program: a broken log must not break containers.
pub fn init(config: &Config, program: &'static str) -> Guard {
    let Some(path) = config.log_file.as_deref() else {
        return Guard { _span: None };
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.is_empty() => v.parse::<Targets>().map_err(|e| format!("RUST_LOG `{v}`: {e}")),
        _ => config
            .log_level
            .parse::<Targets>()
            .map_err(|e| format!("log_level `{}`: {e}", config.log_level)),
    };
    let filter = filter.unwrap_or_else(|why| {
        eprintln!("{program}: warning: invalid log filter {why}; using `info`");
        Targets::new().with_default(LevelFilter::INFO)
    });
    let file = match open(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "{program}: warning: cannot open log file {}: {e}; not logging",
                path.display()
            );
            return Guard { _span: None };
        }
    };
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(Mutex::new(file))
        .with_ansi(false)
        .with_target(false);
    let installed =
        tracing_subscriber::registry().with(layer.with_filter(filter)).try_init().is_ok();
    if !installed {
        // Already set up (a second call in the same process): keep the first.
        return Guard { _span: None };
    }
    let span = tracing::info_span!("erdma", program, pid = std::process::id());
    Guard { _span: Some(span.entered()) }
}

/// Logs to stderr for a long-running daemon (the device plugin: its DaemonSet's log), at `info`
/// unless `RUST_LOG` says otherwise.
pub fn init_stderr() {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.is_empty())
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::INFO));
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false);
    let _ = tracing_subscriber::registry().with(layer.with_filter(filter)).try_init();
}

/// Appends, creating the file (and its directory) readable by root and the admin group only:
/// the log names containers, bundles and devices.
fn open(path: &Path) -> std::io::Result<std::fs::File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new().create(true).append(true).mode(0o640).open(path)
}

/// Whether `init` would log at debug level or finer: calls that have nothing to log otherwise
/// (the pass-through subcommands) skip setting logging up, which is most of their own cost.
pub fn wants_debug(config: &Config) -> bool {
    let spec = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| config.log_level.clone());
    spec.parse::<Targets>()
        .map(|t| {
            t.default_level().unwrap_or(LevelFilter::OFF) >= LevelFilter::DEBUG
                || t.iter().any(|(_, l)| l >= LevelFilter::DEBUG)
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters() {
        let c = |lvl: &str| Config { log_level: lvl.into(), ..Config::default() };
        if std::env::var_os("RUST_LOG").is_some() {
            return;
        }
        assert!(!wants_debug(&c("info")));
        assert!(wants_debug(&c("debug")));
        assert!(wants_debug(&c("warn,erdma_oci_hook::runtime=trace")));
        assert!(!wants_debug(&c("error")));
        assert!("nonsense=level=x".parse::<Targets>().is_err());
    }
}
