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
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::mem::ManuallyDrop;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, EnteredSpan, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};
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
    let installed = tracing::subscriber::set_global_default(FileLog::new(file, filter)).is_ok();
    if !installed {
        // Already set up (a second call in the same process): keep the first.
        return Guard { _span: None };
    }
    let span = tracing::info_span!("erdma", program, pid = std::process::id());
    Guard { _span: Some(span.entered()) }
}

/// The file log's subscriber: one `write(2)` per event, each line as tracing-subscriber's `fmt`
/// writes it without colours or target (`TIME LEVEL span{fields}: message fields`), which its
/// test checks against tracing-subscriber itself. Not tracing-subscriber's own: its registry (a
/// slab of 4,096 shards, per-thread span stacks) is most of what setting up the log cost an
/// asking `create` of erdma-runtime, which logs a line or two (docs/benchmarks.md).
struct FileLog {
    file: Mutex<std::fs::File>,
    filter: Targets,
    /// Open spans: name, formatted fields, references.
    spans: Mutex<HashMap<u64, (&'static str, String, usize)>>,
    next: AtomicU64,
}

thread_local! {
    /// The spans this thread is in, outermost first. Never dropped: a thread-local that needs
    /// dropping has its destructor registered on first use, which under musl sets up a pthread
    /// key and the C library's own allocator (six system calls and their page faults, in an
    /// asking `create` that logs one line). The programs that log here are short-lived and run
    /// their work on one thread; what a thread leaves at its exit is its few ids' allocation.
    static ENTERED: ManuallyDrop<RefCell<Vec<u64>>> =
        const { ManuallyDrop::new(RefCell::new(Vec::new())) };
}

impl FileLog {
    fn new(file: std::fs::File, filter: Targets) -> FileLog {
        FileLog {
            file: Mutex::new(file),
            filter,
            spans: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        }
    }

    fn spans(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (&'static str, String, usize)>> {
        self.spans.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `event` as one line, without the time.
    fn line(&self, event: &Event<'_>) -> String {
        let mut line = String::new();
        let level = match *event.metadata().level() {
            Level::TRACE => "TRACE",
            Level::DEBUG => "DEBUG",
            Level::INFO => " INFO",
            Level::WARN => " WARN",
            Level::ERROR => "ERROR",
        };
        line.push_str(level);
        line.push(' ');
        let spans = self.spans();
        let mut seen = false;
        ENTERED.with(|e| {
            for (name, fields, _) in e.borrow().iter().filter_map(|id| spans.get(id)) {
                line.push_str(name);
                if !fields.is_empty() {
                    let _ = write!(line, "{{{fields}}}");
                }
                line.push(':');
                seen = true;
            }
        });
        drop(spans);
        if seen {
            line.push(' ');
        }
        event.record(&mut Fields(&mut line, true));
        line.push('\n');
        line
    }
}

/// Fields as tracing-subscriber's default formatter writes them: the message as it is, others
/// as ` name=value` with the value's `Debug` (a string quoted). Control characters are escaped
/// in every field, where tracing-subscriber escapes the message only: a device name or an env
/// value from a container's spec cannot drive the terminal of whoever reads the log either.
struct Fields<'a>(&'a mut String, bool);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"))
        } else {
            self.record_debug(field, &value)
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if !std::mem::take(&mut self.1) {
            self.0.push(' ');
        }
        let text = match field.name() {
            "message" => format!("{value:?}"),
            name => format!("{}={value:?}", name.strip_prefix("r#").unwrap_or(name)),
        };
        escape(self.0, &text);
    }
}

/// What tracing-subscriber escapes in a message: ESC, BEL, BS, FF, DEL and the C1 controls.
fn escape(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '\x1b' | '\x07' | '\x08' | '\x0c' | '\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (0x80..=0x9f).contains(&(c as u32)) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
}

/// The time as tracing-subscriber writes it: RFC 3339, UTC, microseconds.
fn timestamp() -> String {
    let now =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let seconds = erdma_common::dates::rfc3339(now.as_secs() as i64);
    format!("{}.{:06}Z", seconds.trim_end_matches('Z'), now.subsec_micros())
}

/// The most verbose level `filter` lets through anywhere (`None`: nothing).
fn most_verbose(filter: &Targets) -> Option<LevelFilter> {
    filter.iter().map(|(_, l)| l).chain(filter.default_level()).max()
}

impl Subscriber for FileLog {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if self.enabled(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        self.filter.would_enable(meta.target(), meta.level())
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        most_verbose(&self.filter)
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut fields = String::new();
        span.record(&mut Fields(&mut fields, true));
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.spans().insert(id, (span.metadata().name(), fields, 1));
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        // Formatted before the lock is taken: a value's own formatting may log.
        let mut more = String::new();
        values.record(&mut Fields(&mut more, true));
        if let Some((_, fields, _)) = self.spans().get_mut(&span.into_u64()) {
            if !fields.is_empty() && !more.is_empty() {
                fields.push(' ');
            }
            fields.push_str(&more);
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let line = format!("{} {}", timestamp(), self.line(event));
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        // One write per line: concurrent processes appending to the log do not interleave.
        let _ = file.write_all(line.as_bytes());
    }

    fn enter(&self, span: &Id) {
        ENTERED.with(|e| e.borrow_mut().push(span.into_u64()));
    }

    fn exit(&self, span: &Id) {
        ENTERED.with(|e| {
            let mut e = e.borrow_mut();
            if let Some(i) = e.iter().rposition(|x| *x == span.into_u64()) {
                e.remove(i);
            }
        });
    }

    fn clone_span(&self, span: &Id) -> Id {
        if let Some((_, _, refs)) = self.spans().get_mut(&span.into_u64()) {
            *refs += 1;
        }
        span.clone()
    }

    fn try_close(&self, span: Id) -> bool {
        let mut spans = self.spans();
        let id = span.into_u64();
        match spans.get_mut(&id) {
            Some((_, _, refs)) if *refs > 1 => {
                *refs -= 1;
                false
            }
            Some(_) => {
                spans.remove(&id);
                true
            }
            None => false,
        }
    }
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
    let open = || OpenOptions::new().create(true).append(true).mode(0o640).open(path);
    match open() {
        // The directory is made only when it is missing: an asking create opens the log every
        // time, and the directory is there nearly always.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            open()
        }
        opened => opened,
    }
}

/// Whether `level`, as `log_level`, is plainly one that asks for no debug lines: `off`,
/// `error`, `warn` or `info` as they are, which [`wants_debug`] reads the same way (a test says
/// so); other filters are left to it.
pub fn plainly_quiet(level: &[u8]) -> bool {
    matches!(level, b"off" | b"error" | b"warn" | b"info")
}

/// Whether `init` would log at debug level or finer: calls that have nothing to log otherwise
/// (the pass-through subcommands) skip setting logging up, which is most of their own cost.
pub fn wants_debug(config: &Config) -> bool {
    let spec = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| config.log_level.clone());
    spec.parse::<Targets>().is_ok_and(|t| most_verbose(&t) >= Some(LevelFilter::DEBUG))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a program logs, in spans and out of them, with every kind of field.
    fn events() {
        let span = tracing::info_span!("erdma", program = "erdma-runtime", pid = 4242u32);
        let entered = span.enter();
        tracing::info!(
            devices = %"erdma_0,erdma_1",
            memlock = 4194304u64,
            network = ?Some("host"),
            env_added = %"",
            quoted = "a \"b\"",
            "eRDMA edit of {} ({})",
            "container x",
            "/run/b/config.json"
        );
        tracing::warn!("a \x1b[31mred\x1b[0m \u{85}\x07\x7f line with \"quotes\"\nand a newline");
        tracing::debug!("below the filter");
        {
            let inner = tracing::info_span!("inner", n = 1i64, ok = true);
            let _i = inner.enter();
            tracing::error!(r#type = "x", ratio = 1.5f64, "boom");
            let empty = tracing::info_span!("empty");
            let _e = empty.enter();
            tracing::info!(later = tracing::field::Empty, "nested twice");
        }
        let recorded = tracing::info_span!("recorded", a = 1u8, b = tracing::field::Empty);
        recorded.record("b", "set later");
        recorded.in_scope(|| tracing::info!("after a record"));
        drop(entered);
        tracing::info!(x = -3i32, "outside any span");
    }

    #[test]
    fn lines_are_what_tracing_subscribers_fmt_writes() {
        let filter: Targets = "info".parse().unwrap();
        // tracing-subscriber's fmt layer, set up as the file log was before FileLog.
        #[derive(Clone, Default)]
        struct Buf(std::sync::Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_target(false);
        let reference = tracing_subscriber::registry().with(layer.with_filter(filter.clone()));
        tracing::subscriber::with_default(reference, events);
        let theirs = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let file = open(&path).unwrap();
        tracing::subscriber::with_default(FileLog::new(file, filter), events);
        let ours = std::fs::read_to_string(&path).unwrap();

        // Each event starts with the time, RFC 3339 in microseconds; the rest is the same.
        let untimed = |text: &str| -> Vec<String> {
            text.split_inclusive('\n')
                .map(|l| match l.split_once(' ') {
                    Some((t, rest)) if t.len() == 27 && t.ends_with('Z') && &t[10..11] == "T" => {
                        format!("<time> {rest}")
                    }
                    _ => l.to_string(),
                })
                .collect()
        };
        assert_eq!(untimed(&ours), untimed(&theirs), "ours:\n{ours}\ntheirs:\n{theirs}");
        assert_eq!(untimed(&ours).iter().filter(|l| l.starts_with("<time> ")).count(), 6, "{ours}");
        assert!(ours.contains(r#" INFO erdma{program="erdma-runtime" pid=4242}: eRDMA edit of"#));
    }

    #[test]
    fn control_characters_are_escaped_in_every_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let log = FileLog::new(open(&path).unwrap(), "info".parse().unwrap());
        tracing::subscriber::with_default(log, || {
            let span = tracing::info_span!("s", name = "a\x1bb", n = tracing::field::Empty);
            span.record("n", "\u{9b}");
            let _in = span.enter();
            tracing::warn!(devices = %"erdma_0\x1b[31m", env = ?"X=\x07", "m\x7f");
        });
        let line = std::fs::read_to_string(&path).unwrap();
        // Quoted values are escaped by their `Debug` already; the message and `%` values here.
        let want =
            r#" WARN s{name="a\u{1b}b" n="\u{9b}"}: m\x7f devices=erdma_0\x1b[31m env="X=\u{7}""#;
        assert!(line.ends_with(&format!("{want}\n")), "{line}");
        assert!(!line.contains('\x1b') && !line.contains('\x07') && !line.contains('\u{9b}'));
    }

    /// The log's directory is made when it is missing, not otherwise; the file is the admin's.
    #[test]
    fn the_log_and_its_directory_are_made_when_missing() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/erdma.log");
        std::io::Write::write_all(&mut open(&path).unwrap(), b"one\n").unwrap();
        std::io::Write::write_all(&mut open(&path).unwrap(), b"two\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntwo\n");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o640);
        // A parent that is a file: the error, not a second try elsewhere.
        assert!(open(&path.join("x")).is_err());
    }

    #[test]
    fn filters() {
        let c = |lvl: &str| Config { log_level: lvl.into(), ..Config::default() };
        if std::env::var_os("RUST_LOG").is_some() {
            return;
        }
        for quiet in ["off", "error", "warn", "info"] {
            assert!(plainly_quiet(quiet.as_bytes()) && !wants_debug(&c(quiet)), "{quiet}");
        }
        for other in ["debug", "trace", "INFO", "info,erdma_oci_hook=debug", ""] {
            assert!(!plainly_quiet(other.as_bytes()), "{other}");
        }
        assert!(!wants_debug(&c("info")));
        assert!(wants_debug(&c("debug")));
        assert!(wants_debug(&c("warn,erdma_oci_hook::runtime=trace")));
        assert!(!wants_debug(&c("error")));
        assert!("nonsense=level=x".parse::<Targets>().is_err());
    }
}
