//! `erdma-runtime`: a runc/crun wrapper.
//!
//! Only `create` and `run` are intercepted: the bundle's `config.json` gets the eRDMA edit
//! ([`crate::hooks::edit`]) when the container asks for eRDMA, and is not touched at all when
//! it does not. Then the real runtime replaces this process (`execve`) with the original
//! arguments, so its exit code, signals, stdio and inherited file descriptors
//! (`--preserve-fds`, console sockets) are the engine's, unchanged. Every other subcommand is
//! exec'd straight through.
//!
//! Errors are one line on stderr (and in the log), exit code 1, and the spec untouched: the
//! edit is computed fully, and the real runtime is found, before anything is written.
use std::ffi::{CStr, CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::error::Error;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("OCI runtime `{name}` not found {where_}; set `runtime` in {config}")]
    NotFound { name: String, where_: String, config: String },

    #[error("bundle {} does not exist or is not a directory", .0.display())]
    NoBundle(PathBuf),

    #[error("executing the OCI runtime {}", .path.display())]
    Exec {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(transparent)]
    Edit(#[from] Error),
}

/// Global flags of runc (urfave/cli) and crun (argp) that take a value; any other flag before
/// the subcommand is a switch (`--debug`, `--systemd-cgroup`, `--help`, `--version`).
const GLOBAL_VALUE_FLAGS: &[&str] =
    &["root", "log", "log-format", "log-level", "criu", "rootless", "cgroup-manager"];

/// Flags of `create`/`run` that take a value, so that a value is never taken for the container
/// id. `config`/`f` is crun's alternative to `config.json` (relative to the bundle).
const CREATE_VALUE_FLAGS: &[&str] =
    &["bundle", "b", "console-socket", "pid-file", "preserve-fds", "pidfd-socket", "config", "f"];

/// Subcommands runc and crun know; anything else is passed through with a warning, as it may
/// mean we misread a global flag.
const KNOWN_COMMANDS: &[&str] = &[
    "checkpoint",
    "create",
    "delete",
    "events",
    "exec",
    "features",
    "help",
    "h",
    "init",
    "kill",
    "list",
    "mounts",
    "pause",
    "ps",
    "restore",
    "resume",
    "run",
    "spec",
    "start",
    "state",
    "update",
];

/// What the arguments say, as far as the wrapper cares.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Invocation {
    /// The global `--log FILE` and `--log-format text|json`: where the engine reads the
    /// runtime's error from (containerd's runc shim takes the last `"level":"error"` line).
    pub log: Option<PathBuf>,
    pub log_format: Option<String>,
    pub command: Option<String>,
    pub bundle: Option<PathBuf>,
    /// crun's `--config FILE`.
    pub config_file: Option<PathBuf>,
    pub container_id: Option<String>,
    /// `--version` (runc's `-v`, argp's `-V`) before any subcommand.
    pub version: bool,
}

/// A flag's name and inline value: `--root=x` → (`root`, Some(`x`)), `-b` → (`b`, None).
/// Go's flag package accepts one or two dashes for every flag; `-` alone and `--` are not flags.
fn flag(arg: &OsStr) -> Option<(&str, Option<&OsStr>)> {
    let b = arg.as_bytes();
    let body = b.strip_prefix(b"--").or_else(|| b.strip_prefix(b"-"))?;
    if body.is_empty() || body[0] == b'-' {
        return None;
    }
    let (name, value) = match body.iter().position(|c| *c == b'=') {
        Some(i) => (&body[..i], Some(OsStr::from_bytes(&body[i + 1..]))),
        None => (body, None),
    };
    Some((std::str::from_utf8(name).ok()?, value))
}

/// Walks the global flags before the subcommand, handing each to `each` with its value, and
/// returns the subcommand's index (`args.len()` when there is none).
fn globals<A: AsRef<[u8]>>(args: &[A], mut each: impl FnMut(&str, Option<&OsStr>)) -> usize {
    let mut i = 0;
    while i < args.len() {
        let a = OsStr::from_bytes(args[i].as_ref());
        if a == "--" {
            return i + 1;
        }
        let (name, value, used) = match flag(a) {
            Some((name, None)) if GLOBAL_VALUE_FLAGS.contains(&name) => {
                (name, args.get(i + 1).map(|v| OsStr::from_bytes(v.as_ref())), 2)
            }
            Some((name, value)) => (name, value, 1),
            None => return i,
        };
        each(name, value);
        i += used;
    }
    i
}

/// Whether erdma-runtime only hands these arguments over to the real runtime: a subcommand runc
/// and crun know, other than `create` and `run` (which [`parse`] reads further).
pub fn hands_over<A: AsRef<[u8]>>(args: &[A]) -> bool {
    subcommand(args).is_some_and(only_hands_over)
}

/// The subcommand, after any global flags.
fn subcommand<A: AsRef<[u8]>>(args: &[A]) -> Option<&[u8]> {
    args.get(globals(args, |_, _| {})).map(AsRef::as_ref)
}

/// Whether `cmd` is one erdma-runtime only hands over ([`hands_over`]).
fn only_hands_over(cmd: &[u8]) -> bool {
    !creates(cmd) && KNOWN_COMMANDS.iter().any(|k| k.as_bytes() == cmd)
}

/// Whether `cmd` is `create` or `run`, which erdma-runtime reads further.
fn creates(cmd: &[u8]) -> bool {
    matches!(cmd, b"create" | b"run")
}

/// Finds the subcommand and, for `create`/`run`, the bundle, config file and container id.
pub fn parse(args: &[OsString]) -> Invocation {
    let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    invocation(&bytes)
}

/// [`parse`] over the arguments' bytes.
fn invocation<A: AsRef<[u8]>>(bytes: &[A]) -> Invocation {
    let mut inv = Invocation::default();
    let args: Vec<&OsStr> = bytes.iter().map(|a| OsStr::from_bytes(a.as_ref())).collect();
    let i = globals(bytes, |name, value| match name {
        "log" => inv.log = value.map(PathBuf::from),
        "log-format" => inv.log_format = value.map(|v| v.to_string_lossy().into_owned()),
        "version" | "v" | "V" => inv.version = true,
        _ => {}
    });
    let Some(cmd) = args.get(i) else { return inv };
    let cmd = cmd.to_string_lossy().into_owned();
    let rest = &args[i + 1..];
    if cmd == "create" || cmd == "run" {
        // runc (urfave/cli v1) moves flags after the container id in front of it, so look at
        // every argument until `--`.
        let mut j = 0;
        while j < rest.len() {
            let a = rest[j];
            if a == "--" {
                if inv.container_id.is_none() {
                    inv.container_id = rest.get(j + 1).map(|s| s.to_string_lossy().into_owned());
                }
                break;
            }
            let (name, value, used) = match flag(a) {
                Some((name, Some(v))) => (name, Some(v.to_os_string()), 1),
                Some((name, None)) if CREATE_VALUE_FLAGS.contains(&name) => {
                    (name, rest.get(j + 1).map(|v| v.to_os_string()), 2)
                }
                // crun (argp) also takes `-b/path`, glued.
                Some((name, None))
                    if name.len() > 1
                        && name.starts_with('b')
                        && matches!(name.as_bytes()[1], b'/' | b'.') =>
                {
                    ("b", Some(OsString::from(&name[1..])), 1)
                }
                Some((name, None)) => (name, None, 1),
                None => {
                    if inv.container_id.is_none() {
                        inv.container_id = Some(a.to_string_lossy().into_owned());
                    }
                    ("", None, 1)
                }
            };
            match name {
                "bundle" | "b" => inv.bundle = value.map(PathBuf::from),
                "config" | "f" => inv.config_file = value.map(PathBuf::from),
                _ => {}
            }
            j += used;
        }
    }
    inv.command = Some(cmd);
    inv
}

/// The search path when `PATH` is not set.
const DEFAULT_SEARCH_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A file and the device and inode it is, when it is a regular file someone may execute.
fn executable(path: &CStr) -> Option<(u64, u64)> {
    let st = rustix::fs::stat(path).ok()?;
    let file = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile;
    (file && st.st_mode & 0o111 != 0).then_some((st.st_dev as u64, st.st_ino as u64))
}

/// The real runtime `name` names: `name` itself when it holds a `/`, else the first `dir/name`
/// over `search_path` (PATH's value; empty entries skipped) that is not this program (an
/// `erdma-runtime` installed as `runc` earlier on PATH would otherwise exec itself forever).
/// Either way an executable regular file, NUL-terminated, or `None`.
fn search(name: &[u8], search_path: &[u8]) -> Option<CString> {
    if name.contains(&b'/') {
        return CString::new(name).ok().filter(|path| executable(path).is_some());
    }
    let me = executable(c"/proc/self/exe");
    search_path.split(|c| *c == b':').filter(|d| !d.is_empty()).find_map(|dir| {
        let mut candidate = Vec::with_capacity(dir.len() + 1 + name.len() + 1);
        candidate.extend_from_slice(dir);
        if !dir.ends_with(b"/") {
            candidate.push(b'/');
        }
        candidate.extend_from_slice(name);
        let candidate = CString::new(candidate).ok()?;
        executable(&candidate).filter(|id| Some(*id) != me).map(|_| candidate)
    })
}

/// The real runtime: a path, or a name looked up on `PATH`, never this wrapper itself (an
/// `erdma-runtime` installed as `runc` earlier on `PATH` would otherwise exec itself forever).
pub fn resolve_runtime(name: &str) -> Result<PathBuf, RuntimeError> {
    let config = std::env::var(crate::config::ENV_PATH)
        .unwrap_or_else(|_| crate::config::DEFAULT_PATH.into());
    let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_SEARCH_PATH.into());
    if let Some(found) = search(name.as_bytes(), path.as_bytes()) {
        return Ok(PathBuf::from(OsStr::from_bytes(found.as_bytes())));
    }
    let where_ = match name.contains('/') {
        true => "(no executable file there)".into(),
        false => format!("on PATH ({})", path.to_string_lossy()),
    };
    Err(RuntimeError::NotFound { name: name.into(), where_, config })
}

/// What to exec for a call erdma-runtime only hands over: the program, and the name it is
/// given as `argv[0]` (the configuration's `runtime`, as [`main_with`] gives it).
#[derive(Debug, PartialEq, Eq)]
pub struct Handover {
    pub program: CString,
    pub arg0: CString,
}

/// The runtime a call that only hands over (`args` without `argv[0]`: a subcommand that
/// [`hands_over`], or a `create` or `run` of a container that cannot ask for eRDMA) execs,
/// worked out with a few system calls and no more of this program than that, for the plainest
/// configuration files ([`crate::config::handover_plain`]) when nothing is to be logged; `None`
/// in every other case, which [`main_with`] then handles as it handles every call. `env` reads
/// the environment.
///
/// The answer is the one [`main_with`] comes to: the same file (`ERDMA_OCI_HOOK_CONFIG`, else
/// the default; a missing one is the defaults), the same keys ([`Config::load_handover`], and
/// for create and run [`Config::load_or_first_look`]), the same spec and the same judgement of it
/// ([`crate::request::may_ask`]), the same search ([`resolve_runtime`]); and no debug lines
/// wanted (`RUST_LOG` unset and a plainly quiet `log_level`), so that there, too, nothing would
/// be logged. What it leaves out is the point: an engine calls the wrapper three or more times
/// per container (create, start, delete, state, kill), most containers do not ask, and a call
/// that parses TOML, builds std's `Command` and walks its arguments as `OsString`s touches
/// pages of the program that this does not (docs/benchmarks.md).
///
/// What it reads on the way to `None` (the configuration file, a create's spec) it leaves in
/// `earlier` for [`main_with`], which takes it from there instead of reading the same files again.
pub fn handover<'e, A: AsRef<[u8]>>(
    args: &[A],
    env: impl Fn(&CStr) -> Option<&'e [u8]>,
    earlier: &mut Earlier,
) -> Option<Handover> {
    let cmd = subcommand(args)?;
    if !(creates(cmd) || only_hands_over(cmd)) || env(c"RUST_LOG").is_some_and(|v| !v.is_empty()) {
        return None;
    }
    let config = match env(crate::config::ENV_PATH_C) {
        Some(path) => CString::new(path).ok()?,
        None => CString::new(crate::config::DEFAULT_PATH).ok()?,
    };
    // A missing file is the defaults, as the full path reads it; a file that cannot be read or
    // is not a regular file ([`read_regular`]) is left to the full path to read and report.
    let text = match read_regular(&config) {
        Ok(text) => Some(text),
        Err(rustix::io::Errno::NOENT) => None,
        Err(_) => return None,
    };
    let Earlier { config, spec } = earlier;
    let text = &config.insert(crate::config::Read(text)).0;
    let plain = crate::config::handover_plain(text.as_deref().unwrap_or_default())?;
    if !crate::log::plainly_quiet(plain.log_level.unwrap_or(b"info")) {
        return None;
    }
    if creates(cmd) && !cannot_ask(args, &plain, spec) {
        return None;
    }
    let runtime = plain.runtime.unwrap_or(b"runc");
    let search_path = env(c"PATH").unwrap_or(DEFAULT_SEARCH_PATH.as_bytes());
    let program = search(runtime, search_path)?;
    Some(Handover { program, arg0: CString::new(runtime).ok()? })
}

/// Whether the container of a `create` or `run` with `args` certainly cannot ask for eRDMA,
/// under what `plain` holds of the configuration: its spec, where [`intercept`] finds it, read
/// and judged by [`crate::request::may_ask`] with the `accept_env` and `default_request` that
/// [`Config::load_or_first_look`] reads. `false` wherever that cannot be told here (a file
/// that is not a first look's, a spec that is not a regular file or cannot be read), which
/// leaves the call to the full path. The spec of a container that may ask is left in `spec`.
fn cannot_ask<A: AsRef<[u8]>>(
    args: &[A],
    plain: &crate::config::Plain,
    spec: &mut Option<Vec<u8>>,
) -> bool {
    if !plain.first_look {
        return false;
    }
    let defaults = Config::default();
    let config = Config {
        accept_env: plain.accept_env.unwrap_or(defaults.accept_env),
        default_request: match plain.default_request {
            Some(r) => String::from_utf8_lossy(r).into_owned(),
            None => defaults.default_request.clone(),
        },
        ..defaults
    };
    let inv = invocation(args);
    let bundle = inv.bundle.as_deref().unwrap_or(Path::new("."));
    // A bundle that is not a directory (or an empty name) is the full path's to report, as
    // intercept does, even where --config names a spec outside it.
    if !bundle.is_dir() {
        return false;
    }
    let path = spec_path(bundle, &inv);
    let Ok(path) = CString::new(path.into_os_string().into_vec()) else { return false };
    match read_regular(&path) {
        Ok(raw) => {
            let asks = crate::request::may_ask(&raw, &config);
            if asks {
                *spec = Some(raw);
            }
            !asks
        }
        Err(_) => false,
    }
}

/// What [`handover`] read before it left a call to the full path ([`main_with`]), which takes
/// it from here rather than read the same file a second time: the configuration file, and the
/// spec of a `create` or `run` (read from where the full path finds it, a regular file in a
/// bundle that is a directory). What is not here the full path reads itself.
#[derive(Debug, Default)]
pub struct Earlier {
    pub config: Option<crate::config::Read>,
    pub spec: Option<Vec<u8>>,
}

/// The spec of a `create` or `run` in `bundle`: `config.json`, or crun's `--config` file.
fn spec_path(bundle: &Path, inv: &Invocation) -> PathBuf {
    bundle.join(inv.config_file.as_deref().unwrap_or(Path::new("config.json")))
}

/// The regular file at `path`, whole. Any other kind of file is an error (`EINVAL`): a FIFO,
/// or `/dev/stdin`: what is read from it here the full path would not find again, so it is not
/// read here at all; opened without blocking, which a FIFO's open otherwise does.
fn read_regular(path: &CStr) -> rustix::io::Result<Vec<u8>> {
    use rustix::fs::{FileType, Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let fd = rustix::fs::open(path, flags, Mode::empty())?;
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(rustix::io::Errno::INVAL);
    }
    let mut text = Vec::with_capacity(4096);
    loop {
        if text.len() == text.capacity() {
            text.reserve(4096);
        }
        match rustix::io::read(&fd, rustix::buffer::spare_capacity(&mut text)) {
            Ok(0) => return Ok(text),
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Logging to the config's `log_file`, set up on first use. Setting it up (the log file opened,
/// its directory created, the subscriber built) is a noticeable part of a call that has nothing
/// to log: the pass-through subcommands (several per container) and the `create` of a container
/// that does not ask. So it happens only for debug level, an unknown subcommand, an edit's
/// report or an error.
struct Log<'a> {
    config: &'a Config,
    guard: Option<crate::log::Guard>,
}

impl Log<'_> {
    fn on(&mut self) {
        if self.guard.is_none() {
            self.guard = Some(crate::log::init(self.config, "erdma-runtime"));
        }
    }
}

/// Edits the bundle's spec for `create`/`run` when the container asks for eRDMA. `config` is
/// the whole file, or where that was refused (`refused`), what [`Config::load_or_first_look`]
/// read: enough to tell a container that cannot ask, which is left as it is whatever the
/// edit's settings say; one that may ask gets the refusal. `earlier` is the spec as [`handover`]
/// read it, if it did.
fn intercept(
    inv: &Invocation,
    config: &Config,
    refused: Option<Error>,
    earlier: Option<Vec<u8>>,
    log: &mut Log,
) -> Result<(), RuntimeError> {
    let bundle = match &inv.bundle {
        Some(b) => b.clone(),
        None => std::env::current_dir()
            .map_err(|e| Error::io("getting the current directory (the default bundle)", ".")(e))?,
    };
    let path = spec_path(&bundle, inv);
    let raw = match earlier {
        Some(raw) => raw,
        None if !bundle.is_dir() => return Err(RuntimeError::NoBundle(bundle)),
        None => std::fs::read(&path).map_err(Error::io("reading", &path))?,
    };
    let id = inv.container_id.as_deref().unwrap_or("?");
    if !crate::request::may_ask(&raw, config) {
        tracing::debug!("container {id}: cannot ask for eRDMA; {} untouched", path.display());
        return Ok(());
    }
    if let Some(e) = refused {
        return Err(e.into());
    }
    // On error nothing is written.
    match crate::hooks::edit_bytes(&raw, &path, config)? {
        None => {
            tracing::debug!("container {id}: does not ask for eRDMA; {} untouched", path.display())
        }
        Some((spec, report)) => {
            log.on();
            crate::spec::write_atomic(&path, &spec.to_vec())?;
            crate::hooks::log_report(&format!("container {id} ({})", path.display()), &report);
            // The real runtime replaces this process next, which frees everything at once;
            // dropping the tree would walk every node of it first.
            std::mem::forget(spec);
        }
    }
    Ok(())
}

fn run(
    args: &[OsString],
    inv: &Invocation,
    earlier: Earlier,
) -> Result<std::convert::Infallible, RuntimeError> {
    let intercepted = inv.command.as_deref().is_some_and(|c| creates(c.as_bytes()));
    // A call that only hands over reads only the runtime and the log settings. Create and run
    // read the whole file; where it is refused, what tells whether the container can ask, and
    // the refusal is for a container that may.
    let (config, refused) = match intercepted {
        true => Config::load_or_first_look(earlier.config)?,
        false => (Config::load_handover(earlier.config)?, None),
    };
    let unknown = inv.command.as_deref().is_some_and(|c| !KNOWN_COMMANDS.contains(&c));
    let mut log = Log { config: &config, guard: None };
    if unknown || crate::log::wants_debug(&config) {
        log.on();
    }
    // Found before the spec is edited: a missing runtime must leave no edit behind.
    let runtime = resolve_runtime(&config.runtime).inspect_err(|e| {
        log.on();
        tracing::error!("{e}");
    })?;
    if intercepted {
        intercept(inv, &config, refused, earlier.spec, &mut log).inspect_err(|e| {
            log.on();
            tracing::error!("{}", one_line(e));
        })?;
    } else if unknown {
        tracing::warn!(
            "unknown subcommand `{}` in {args:?}: passed through without an eRDMA edit",
            inv.command.as_deref().unwrap_or_default()
        );
    }
    tracing::debug!("exec {} {args:?}", runtime.display());
    let err = std::process::Command::new(&runtime).arg0(&config.runtime).args(args).exec();
    let err = RuntimeError::Exec { path: runtime, source: err };
    log.on();
    tracing::error!("{}", one_line(&err));
    Err(err)
}

/// `error: outer: cause: cause`, on one line: engines keep the runtime's stderr line by line.
fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut cur = Some(e);
    while let Some(c) = cur {
        // toml's Display is a multi-line snippet; its message names the key and the problem.
        match c.downcast_ref::<toml::de::Error>() {
            Some(t) => parts.push(t.message().trim().to_string()),
            None => parts.push(
                c.to_string()
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
        }
        cur = c.source();
    }
    parts.join(": ")
}

/// Runs the wrapper with `args` (without `argv[0]`) and what [`handover`] read of its files;
/// returns only on error, with the exit code.
pub fn main_with(args: Vec<OsString>, earlier: Earlier) -> i32 {
    let inv = parse(&args);
    if inv.version && inv.command.is_none() {
        return version(&args);
    }
    match run(&args, &inv, earlier) {
        Ok(never) => match never {},
        Err(e) => {
            let msg = one_line(&e);
            eprintln!("erdma-runtime: error: {msg}");
            if let Some(log) = &inv.log {
                // Where the engine looks for the runtime's error: without this line Docker
                // only says "unable to retrieve OCI runtime error (open .../log.json)".
                if let Err(e) = runtime_log_error(log, inv.log_format.as_deref(), &msg) {
                    eprintln!("erdma-runtime: error: writing the error to {}: {e}", log.display());
                }
            }
            1
        }
    }
}

/// `--version`: the real runtime's own lines first, as tools read them (go-runc takes the
/// first line; `docker info` the last naming a version and the `commit:` line), then ours,
/// which names neither. The runtime runs as a child here, not exec'd, so that our line can
/// follow it. Without a runtime to ask, our line alone answers, with a note; the exit code is
/// the runtime's.
fn version(args: &[OsString]) -> i32 {
    let runtime = Config::load_handover(None)
        .map_err(RuntimeError::from)
        .and_then(|config| Ok((resolve_runtime(&config.runtime)?, config.runtime)));
    let code = match runtime {
        Ok((path, name)) => {
            match std::process::Command::new(&path).arg0(&name).args(args).status() {
                Ok(status) => status.code().unwrap_or(1),
                Err(e) => {
                    eprintln!(
                        "erdma-runtime: note: no runtime version: running {}: {e}",
                        path.display()
                    );
                    0
                }
            }
        }
        Err(e) => {
            eprintln!("erdma-runtime: note: no runtime version: {}", one_line(&e));
            0
        }
    };
    println!("erdma-runtime {}", env!("ERDMA_VERSION"));
    code
}

/// Appends `msg` at level error to the runtime log the engine gave with `--log`, in runc's
/// format (logrus: JSON lines with `--log-format json`, else `key=value` text).
fn runtime_log_error(path: &Path, format: Option<&str>, msg: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let time = rfc3339_now();
    let line = if format == Some("json") {
        serde_json::json!({"level": "error", "msg": msg, "time": time}).to_string()
    } else {
        let quoted = serde_json::Value::from(msg).to_string();
        format!("time=\"{time}\" level=error msg={quoted}")
    };
    let mut f = std::fs::OpenOptions::new().create(true).append(true).mode(0o644).open(path)?;
    f.write_all(format!("{line}\n").as_bytes())
}

/// The current UTC time as RFC 3339 (`2006-01-02T15:04:05Z`), which Go's `time.Time` decodes.
fn rfc3339_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

fn rfc3339(secs: u64) -> String {
    erdma_common::dates::rfc3339(secs as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Invocation {
        parse(&args.iter().map(OsString::from).collect::<Vec<_>>())
    }

    fn inv(cmd: &str, bundle: Option<&str>, id: Option<&str>) -> Invocation {
        Invocation {
            command: Some(cmd.into()),
            bundle: bundle.map(PathBuf::from),
            container_id: id.map(String::from),
            ..Default::default()
        }
    }

    #[test]
    fn errors_reach_the_engines_log() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400 + 3_723), "2000-02-29T01:02:03Z");
        assert_eq!(rfc3339(1_795_251_196), "2026-11-21T08:53:16Z");
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("log.json");
        runtime_log_error(&json, Some("json"), "eRDMA needs \"host\" networking").unwrap();
        let v: serde_json::Value =
            serde_json::from_str(std::fs::read_to_string(&json).unwrap().trim()).unwrap();
        assert_eq!(
            (v["level"].as_str(), v["msg"].as_str()),
            (Some("error"), Some("eRDMA needs \"host\" networking"))
        );
        let txt = dir.path().join("log");
        runtime_log_error(&txt, None, "bad \"x\"").unwrap();
        let line = std::fs::read_to_string(&txt).unwrap();
        assert!(
            line.starts_with("time=\"") && line.ends_with(" level=error msg=\"bad \\\"x\\\"\"\n"),
            "{line}"
        );
    }

    #[test]
    fn bundle_flag_spellings() {
        for args in [
            &["create", "--bundle", "/b", "c1"][..],
            &["create", "-b", "/b", "c1"],
            &["create", "--bundle=/b", "c1"],
            &["create", "-bundle", "/b", "c1"],
            &["create", "-bundle=/b", "c1"],
            &["create", "-b=/b", "c1"],
            &["create", "--b", "/b", "c1"],
            &["create", "-b/b", "c1"],
            // Flags after the id (urfave/cli reorders them).
            &["create", "c1", "--bundle", "/b"],
            &["create", "--pid-file", "/p", "--console-socket", "/s", "c1", "-b", "/b"],
            &["create", "--no-pivot", "--bundle", "/b", "--preserve-fds=2", "c1"],
        ] {
            assert_eq!(p(args), inv("create", Some("/b"), Some("c1")), "{args:?}");
        }
        assert_eq!(p(&["run", "-d", "--keep", "c1"]), inv("run", None, Some("c1")));
        // A value is never the id.
        assert_eq!(p(&["create", "--pid-file", "c0", "c1"]), inv("create", None, Some("c1")));
        assert_eq!(p(&["create", "--", "-odd-id"]), inv("create", None, Some("-odd-id")));
        let crun = p(&["create", "--config", "alt.json", "-b", "/b", "c1"]);
        assert_eq!(crun.config_file.as_deref(), Some(Path::new("alt.json")));
    }

    #[test]
    fn global_flags_before_the_subcommand() {
        let args = [
            "--root",
            "/run/x",
            "--log",
            "/l.json",
            "--log-format",
            "json",
            "--systemd-cgroup",
            "create",
            "--bundle",
            "/b",
            "c1",
        ];
        assert_eq!(
            p(&args),
            Invocation {
                log: Some("/l.json".into()),
                log_format: Some("json".into()),
                ..inv("create", Some("/b"), Some("c1"))
            }
        );
        let args = [
            "-root",
            "/r",
            "-debug",
            "--log=/l",
            "--rootless",
            "false",
            "--cgroup-manager=systemd",
            "run",
            "c1",
        ];
        assert_eq!(p(&args), Invocation { log: Some("/l".into()), ..inv("run", None, Some("c1")) });
        // Values that look like subcommands are still values.
        assert_eq!(
            p(&["--root", "create", "--log", "run", "state", "c1"]),
            Invocation {
                command: Some("state".into()),
                log: Some("run".into()),
                ..Default::default()
            }
        );
        let version = Invocation { version: true, ..Default::default() };
        assert_eq!(p(&["--version"]), version);
        assert_eq!(p(&["-v"]), version);
        assert!(!p(&["state", "--version", "c1"]).version);
        assert_eq!(p(&[]), Invocation::default());
        assert_eq!(
            p(&["--root", "/r", "delete", "--force", "c1"]).command.as_deref(),
            Some("delete")
        );
        // Only create and run look for a bundle.
        assert_eq!(
            p(&["exec", "-b", "/b", "c1"]),
            Invocation { command: Some("exec".into()), ..Default::default() }
        );
    }

    /// `hands_over` says what `parse` and `run` do with the same arguments: hand over every
    /// subcommand runc and crun know but create and run, after any global flags.
    #[test]
    fn hands_over_what_parse_finds_to_hand_over() {
        let cases: &[&[&str]] = &[
            &["state", "c1"],
            &["--root", "/r", "--log", "/l", "--log-format", "json", "delete", "--force", "c1"],
            &["--root=/r", "-debug", "start", "c1"],
            &["--root", "create", "--log", "run", "state", "c1"],
            &["--systemd-cgroup", "kill", "c1", "9"],
            &["--", "state", "c1"],
            &["create", "--bundle", "/b", "c1"],
            &["--root", "/r", "run", "c1"],
            &["--version"],
            &["--version", "state", "c1"],
            &["frobnicate", "c1"],
            &["--root", "/r"],
            &[],
            &["-"],
        ];
        for args in cases {
            let inv = p(args);
            let want = inv
                .command
                .as_deref()
                .is_some_and(|c| c != "create" && c != "run" && KNOWN_COMMANDS.contains(&c));
            let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            assert_eq!(hands_over(&bytes), want, "{args:?}");
        }
    }

    /// An executable script at `path`.
    fn program(path: &Path) {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// `handover` over a configuration file and an environment of the test's own.
    fn handover_with(
        config: Option<&str>,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Option<Handover> {
        handover_leaving(config, env, args).0
    }

    /// [`handover_with`], and what it left for the full path.
    fn handover_leaving(
        config: Option<&str>,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> (Option<Handover>, Earlier) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("oci-hook.toml");
        if let Some(text) = config {
            std::fs::write(&path, text).unwrap();
        }
        let path = path.to_str().unwrap().to_string();
        let mut vars: Vec<(String, String)> =
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        vars.push((crate::config::ENV_PATH.into(), path));
        let get = |name: &CStr| {
            let name = name.to_str().unwrap();
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_bytes())
        };
        let mut earlier = Earlier::default();
        (handover(args, get, &mut earlier), earlier)
    }

    #[test]
    fn handover_finds_the_runtime_the_long_way_finds_or_leaves_it() {
        let bin = tempfile::tempdir().unwrap();
        let (a, b) = (bin.path().join("a"), bin.path().join("b"));
        for d in [&a, &b] {
            std::fs::create_dir(d).unwrap();
        }
        program(&b.join("runc"));
        // Not executable, a directory: passed over, as the long way passes them over.
        std::fs::write(a.join("runc"), "").unwrap();
        std::fs::create_dir(a.join("crun")).unwrap();
        program(&b.join("crun"));
        let search = format!("::{}:{}/", a.display(), b.display());
        let path = [("PATH", search.as_str())];
        let state = ["--root", "/run/runc", "state", "c1"];
        let found = |config: Option<&str>, env: &[(&str, &str)]| {
            handover_with(config, env, &state)
                .map(|h| (h.program.into_string().unwrap(), h.arg0.into_string().unwrap()))
        };
        let runc = (format!("{}/runc", b.display()), "runc".to_string());
        // The defaults (no file, or every key commented out): `runc` on PATH.
        assert_eq!(found(None, &path), Some(runc.clone()));
        assert_eq!(found(Some(include_str!("../oci-hook.toml")), &path), Some(runc.clone()));
        assert_eq!(found(Some("runtime = 'runc'\nlog_level = \"info\"\n"), &path), Some(runc));
        assert_eq!(
            found(Some("runtime = \"crun\"\nmemlock = \"lots\"\n"), &path),
            Some((format!("{}/crun", b.display()), "crun".into())),
            "what only the edit reads is not checked here, as in Config::load_handover"
        );
        let direct = b.join("crun").display().to_string();
        assert_eq!(
            found(Some(&format!("runtime = \"{direct}\"\n")), &[]),
            Some((direct.clone(), direct.clone()))
        );
        // Left to the long way: debug lines wanted, a file not of the plainest form, a runtime
        // not found (the long way reports it), and every call but one that only hands over.
        let runc_cfg = Some("runtime = \"runc\"\n");
        assert_eq!(found(runc_cfg, &[("PATH", search.as_str()), ("RUST_LOG", "info")]), None);
        assert_eq!(found(Some("log_level = \"debug\"\n"), &path), None);
        assert_eq!(found(Some("log_level = \"info,erdma=debug\"\n"), &path), None);
        assert_eq!(found(Some("runtime = \"\\u0072unc\"\n"), &path), None);
        assert_eq!(found(Some("runtime = \"runc-missing\"\n"), &path), None);
        assert_eq!(found(Some("runtime = \"/nonexistent/runc\"\n"), &path), None);
        assert_eq!(found(Some(&format!("runtime = \"{}\"\n", a.display())), &path), None);
        for args in
            [&["create", "--bundle", "/b", "c1"][..], &["run", "c1"], &["--version"], &["odd"]]
        {
            assert_eq!(handover_with(None, &path, args), None, "{args:?}");
        }
        // A config that is not a regular file is not read here (what is read from a FIFO or
        // the engine's stdin would be gone for the full path); a FIFO without a writer would
        // block a plain open.
        let fifo = bin.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let fifo_env =
            [("PATH", search.as_str()), (crate::config::ENV_PATH, fifo.to_str().unwrap())];
        let get = |name: &CStr| {
            let name = name.to_str().unwrap();
            fifo_env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_bytes())
        };
        let mut earlier = Earlier::default();
        assert_eq!(handover(&state, get, &mut earlier), None);
        assert_eq!(earlier.config, None, "the full path reads and reports it");
        let dir_env = [("PATH", search.as_str()), (crate::config::ENV_PATH, "/")];
        let get = |name: &CStr| {
            let name = name.to_str().unwrap();
            dir_env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_bytes())
        };
        let mut earlier = Earlier::default();
        assert_eq!(handover(&state, get, &mut earlier), None);
        assert_eq!(earlier.config, None, "the full path reads and reports it");
        // An empty RUST_LOG asks for nothing, as for `wants_debug`.
        assert!(found(runc_cfg, &[("PATH", search.as_str()), ("RUST_LOG", "")]).is_some());
    }

    /// A `create` or `run` of a container whose spec cannot ask is handed over as `state` is;
    /// one that may ask, or one whose answer takes more than the first look, is left to the
    /// full path.
    #[test]
    fn handover_takes_a_create_that_cannot_ask() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        program(&bin.join("runc"));
        let search = bin.display().to_string();
        let path = [("PATH", search.as_str())];
        let bundle = dir.path().join("bundle");
        std::fs::create_dir(&bundle).unwrap();
        let b = bundle.to_str().unwrap();
        let spec = |text: &str| std::fs::write(bundle.join("config.json"), text).unwrap();
        let runc = Some(format!("{search}/runc"));
        let found = |config: Option<&str>, args: &[&str]| {
            handover_with(config, &path, args).map(|h| h.program.into_string().unwrap())
        };
        let create = ["--root", "/run/runc", "create", "--bundle", b, "c1"];
        let plain = r#"{"ociVersion":"1.0.2","process":{"env":["PATH=/bin"]}}"#;
        let env_asks = r#"{"process":{"env":["ERDMA_VISIBLE_DEVICES=all"]}}"#;
        let annotation_asks =
            format!(r#"{{"annotations":{{"{}":"all"}}}}"#, crate::request::ANNOTATION);
        spec(plain);
        assert_eq!(found(None, &create), runc);
        assert_eq!(found(Some(include_str!("../oci-hook.toml")), &create), runc);
        assert_eq!(found(None, &["run", "-b", b, "c1"]), runc);
        assert_eq!(found(None, &["create", &format!("--bundle={b}"), "c1"]), runc);
        // What only the edit reads is not looked at for a container that cannot ask.
        assert_eq!(found(Some("memlock = \"lots\"\n"), &create), runc);
        assert_eq!(found(Some("default_request = \"none\"\n"), &create), runc);
        // crun's --config, relative to the bundle.
        std::fs::write(bundle.join("other.json"), env_asks).unwrap();
        assert_eq!(found(None, &["create", "--bundle", b, "--config", "other.json", "c1"]), None);
        std::fs::write(bundle.join("other.json"), plain).unwrap();
        assert_eq!(found(None, &["create", "--bundle", b, "--config", "other.json", "c1"]), runc);
        // Asking by env, honoured or not; by annotation.
        spec(env_asks);
        assert_eq!(found(None, &create), None);
        // What it read is left for the full path: the file (or that there is none) and the
        // spec of the container that may ask.
        let (none, earlier) = handover_leaving(Some("accept_env = true\n"), &path, &create);
        assert_eq!(none, None);
        assert_eq!(earlier.config, Some(crate::config::Read(Some(b"accept_env = true\n".into()))));
        assert_eq!(earlier.spec.as_deref(), Some(env_asks.as_bytes()));
        let earlier = handover_leaving(None, &path, &create).1;
        assert_eq!(earlier.config, Some(crate::config::Read(None)));
        assert_eq!(earlier.spec.as_deref(), Some(env_asks.as_bytes()));
        assert_eq!(found(Some("accept_env = false\n"), &create), runc);
        spec(&annotation_asks);
        assert_eq!(found(Some("accept_env = false\n"), &create), None);
        // Left to the full path: a default that gives every container eRDMA, a key the first
        // look does not know or a value of the wrong type (the full path refuses those), a
        // spec that is missing or is not a regular file, debug lines wanted.
        spec(plain);
        for config in [
            "default_request = \"all\"\n",
            "default_requst = \"none\"\n",
            "accept_env = \"no\"\n",
            "default_request = 1\n",
            "log_level = \"debug\"\n",
        ] {
            assert_eq!(found(Some(config), &create), None, "{config}");
        }
        assert_eq!(found(None, &["create", "--bundle", "/nonexistent", "c1"]), None);
        // Not a bundle, though the spec is there to read: an empty name (the current
        // directory's config.json otherwise), a spec named outside a missing bundle.
        let elsewhere = bundle.join("config.json").display().to_string();
        assert_eq!(found(None, &["create", "--bundle=", "c1"]), None);
        assert_eq!(found(None, &["create", "-b", "", "c1"]), None);
        let outside = ["create", "--bundle", "/nonexistent", "--config", &elsewhere, "c1"];
        assert_eq!(found(None, &outside), None);
        assert_eq!(found(None, &["create", "--bundle", b, "--config", &elsewhere, "c1"]), runc);
        std::fs::remove_file(bundle.join("config.json")).unwrap();
        let made =
            std::process::Command::new("mkfifo").arg(bundle.join("config.json")).status().unwrap();
        assert!(made.success());
        assert_eq!(found(None, &create), None);
    }

    /// The spec the quick way read is the one judged and edited: the file is not read again.
    #[test]
    fn intercept_takes_the_spec_handover_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.json");
        let plain = r#"{"process":{"env":["PATH=/bin"]}}"#;
        let asks = r#"{"process":{"env":["ERDMA_VISIBLE_DEVICES=all"]}}"#;
        let inv = Invocation {
            command: Some("create".into()),
            bundle: Some(dir.path().into()),
            ..Invocation::default()
        };
        let config = Config::default();
        let mut log = Log { config: &config, guard: None };
        let refused = || Some(Error::Invalid("a test's refusal".into()));
        // A container that may ask gets the refusal; one that cannot is left as it is.
        std::fs::write(&file, plain).unwrap();
        let e = intercept(&inv, &config, refused(), Some(asks.into()), &mut log).unwrap_err();
        assert!(one_line(&e).contains("a test's refusal"), "{e}");
        std::fs::write(&file, asks).unwrap();
        intercept(&inv, &config, refused(), Some(plain.into()), &mut log).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), asks);
        // Nothing read before: the file.
        assert!(intercept(&inv, &config, refused(), None, &mut log).is_err());
        std::fs::write(&file, plain).unwrap();
        intercept(&inv, &config, refused(), None, &mut log).unwrap();
        // Edited: what was read before, not the file (which does not ask), on the `two` host.
        use crate::discover::tests::{dev_root, FIXTURES};
        let Some(dev) = dev_root("two") else { return };
        let config = Config {
            sysfs_root: format!("{FIXTURES}/two/sys").into(),
            dev_root: dev.path().into(),
            ..Config::default()
        };
        let mut log = Log { config: &config, guard: None };
        intercept(&inv, &config, None, Some(asks.into()), &mut log).unwrap();
        let edited: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        let env = edited["process"]["env"].as_array().unwrap();
        assert!(env.iter().any(|e| e == "ERDMA_VISIBLE_DEVICES=all"), "{edited}");
        assert!(env.iter().any(|e| e == "NCCL_IB_HCA==erdma_0:1,erdma_1:1"), "{edited}");
        let nodes = edited["linux"]["devices"].as_array().unwrap();
        assert!(nodes.iter().any(|d| d["path"] == "/dev/infiniband/uverbs1"), "{edited}");
    }

    #[test]
    fn runtime_lookup() {
        assert_eq!(resolve_runtime("sh").unwrap().file_name().unwrap(), "sh");
        assert_eq!(resolve_runtime("/bin/sh").unwrap(), Path::new("/bin/sh"));
        let e = resolve_runtime("erdma-no-such-runtime").unwrap_err().to_string();
        assert!(e.starts_with("OCI runtime `erdma-no-such-runtime` not found on PATH"), "{e}");
        let e = resolve_runtime("/nonexistent/runc").unwrap_err().to_string();
        assert!(e.contains("`/nonexistent/runc` not found (no executable file there)"), "{e}");
        // A directory or a non-executable file is not a runtime.
        assert!(resolve_runtime("/etc").is_err());
        assert!(resolve_runtime("/etc/passwd").is_err());
    }
}
