//! Installing with the image's own package manager (dpkg, rpm) inside a sandbox over the base's
//! root, for both backends: the path a build takes when a maintainer script or scriptlet can be
//! neither emulated nor shown to be without effect, so that the result is what the package
//! manager itself gives in a container of the base.
//!
//! The packages are the ones the backend resolved and verified. A process of its own, the root
//! of a user namespace of the sandbox's ids ([`crate::sandbox::IdMap`]: root's shifted range,
//! or a rootless user's subordinate ids), applies the base's layers to a tree in memory or on
//! disk (`TreeIn`, [`erdma_oci::rootdir`]) with the layer built so far; the package files go
//! in; the sandbox ([`crate::sandbox`]) runs the backend's commands with the image's
//! `/bin/sh`; the package files come out again, and the layer gets what differs from the tree
//! before the run (`apt/sandboxed.rs` and `rpm/sandboxed.rs` say what runs).
//!
//! No `policy-rc.d` is added (the base's own, if it has one, applies): `apt-get install` in a
//! container of the base has none either, and helpers read it for more than starts (Debian 13's
//! runit-helper enables a service only where policy-rc.d allows its start). Services stay
//! stopped all the same: there is no init (`invoke-rc.d` finds no runlevel, and systemd's
//! helpers no running systemd), and whatever a script does start is killed with the sandbox's
//! PID namespace when the run ends.
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use serde::{Deserialize, Serialize};

use crate::error::{Cause, Doing, Error, Result};
use crate::packages::error::PackageError;
use crate::packages::{Inputs, SandboxRun};
use erdma_common::cgroups;
use erdma_common::progress::Reporter;
use erdma_oci::files::BaseFiles;
use erdma_oci::layer::LayerContents;
use erdma_oci::rootdir::RootDir;

/// Host uid and gid of the sandbox's root: the start of a range no host account uses (its
/// 65536 ids map the image's 0–65535).
pub(crate) const SHIFT: u32 = 1 << 30;

/// Where the package files wait inside the root during the run (removed before the layer is
/// taken).
pub(crate) const INBOX: &str = "tmp/erdma-build.packages";

/// The environment the image's package manager runs with: non-interactive, as in a
/// Dockerfile's `RUN`.
const ENV: &[(&str, &str)] = &[
    ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
    ("HOME", "/root"),
    ("DEBIAN_FRONTEND", "noninteractive"),
    ("DEBCONF_NONINTERACTIVE_SEEN", "true"),
];

/// What a run works over and on: the base, the layer so far (which gets the changes), the
/// build's inputs and its progress.
pub(crate) struct Over<'a, 'i> {
    pub base: &'a dyn BaseFiles,
    pub layer: &'a mut LayerContents,
    pub inputs: &'a Inputs<'i>,
    pub reporter: &'a dyn Reporter,
}

/// One run of the image's package manager.
pub(crate) struct Job<'a> {
    /// What made the run needed (`package script (`command`)`).
    pub because: String,
    /// The tool, for messages (`dpkg`, `rpm`).
    pub tool: &'static str,
    /// What the base must have for the run (`usr/bin/dpkg`), besides `/bin/sh`.
    pub needs: &'static str,
    /// Package files: the name inside [`INBOX`] and the verified file here.
    pub files: Vec<(String, &'a Path)>,
    /// What goes in file `i`'s place, where the backend has it in a form the tool reads the
    /// same and sooner (a `.deb` with its kept payload uncompressed); `None`: the file as it is.
    pub given: Option<Given<'a>>,
    /// Shell commands, run in order under `set -e`.
    pub commands: Vec<String>,
}

/// [`Job::given`].
pub(crate) type Given<'a> = Box<dyn Fn(usize) -> Option<Box<dyn Read>> + 'a>;

fn error(because: &str, why: impl Into<Cause>) -> Error {
    PackageError::Sandbox { because: because.to_string(), why: why.into() }.into()
}

/// What a build would run and read, for `plan`.
pub(crate) fn plan(job: Job<'_>, base: &dyn BaseFiles) -> SandboxRun {
    let layers = base.layers();
    SandboxRun {
        because: job.because,
        commands: job.commands,
        layers_read: layers.len(),
        bytes_read: layers.iter().map(|(_, s)| s).sum(),
        not_taken: Vec::new(),
        tree: String::new(),
    }
}

/// The hidden first argument that makes `erdma-build` the process that assembles the root and
/// runs a job in it ([`job_main`]).
pub const JOB: &str = "__sandbox-job";

/// What the job process is told before the data follows.
#[derive(Debug, Serialize, Deserialize)]
struct Header {
    tool: String,
    /// The base's layers, bottom first, by digest (each follows as one stream).
    layers: Vec<String>,
    /// The package files' names inside [`INBOX`] (each follows as one stream, after the layer
    /// built so far).
    files: Vec<String>,
    commands: Vec<String>,
    /// Where the job assembles the root ([`TreeIn`]).
    tree: TreeIn,
}

/// Where the sandbox's root is assembled: in memory (a tmpfs of at most `limit` bytes, mounted
/// in the job's own mount namespace, gone with it), or on disk in the job's work directory.
/// In memory, nothing of the tree is written to disk: the base's files, what the package
/// manager unpacks and the removal at the end cost no disk I/O and no inode allocation, and
/// the result is the same (the layer comes from the same scans, `tree_in_memory_or_on_disk`
/// in tests/cases/sandbox.rs compares the two). A run in memory that fails, or ends with its
/// tmpfs (nearly) full, is run again on disk, whose result or error stands. What cannot be
/// seen: a script that swallows a failed write and then removes enough to leave room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum TreeIn {
    Memory { limit: u64 },
    Disk,
}

/// `ERDMA_BUILD_SANDBOX_TREE`: `disk`, `memory`, `memory:BYTES` (a limit of the tmpfs), or
/// `auto`/unset: memory where the memory this build may use leaves four times the estimate
/// (see `tree_in`).
pub const TREE_ENV: &str = "ERDMA_BUILD_SANDBOX_TREE";

/// The smallest tmpfs worth mounting.
const MIN_TMPFS: u64 = 64 << 20;

/// What a tmpfs may hold beyond twice the estimate.
const SLACK: u64 = 256 << 20;

/// Where this build's tree goes, for a base of `base_bytes` (compressed layers) and packages
/// of `package_bytes` (their files). The tree's size is estimated at four times both (gzip
/// and xz shrink a root file system 2.5 to 4 times); with the room memory has
/// (`room`, [`memory_room`]) at least four times that, the tree goes to a tmpfs limited to
/// twice the estimate and [`SLACK`], and never more than half the room: an estimate off by 2×
/// still fits, and a run that goes beyond is run again on disk.
fn tree_in(
    setting: Option<&str>,
    room: Option<u64>,
    base_bytes: u64,
    package_bytes: u64,
) -> std::result::Result<TreeIn, String> {
    let estimate = base_bytes.saturating_add(package_bytes).saturating_mul(4);
    let capped = estimate.saturating_mul(2).saturating_add(SLACK);
    let auto = || match room {
        Some(room) if estimate.saturating_mul(4) <= room && room / 2 >= MIN_TMPFS => {
            TreeIn::Memory { limit: capped.min(room / 2) }
        }
        _ => TreeIn::Disk,
    };
    match setting.map(str::trim) {
        None | Some("" | "auto") => Ok(auto()),
        Some("disk") => Ok(TreeIn::Disk),
        Some("memory") => {
            Ok(TreeIn::Memory { limit: room.map_or(capped, |r| capped.min(r / 2)).max(MIN_TMPFS) })
        }
        Some(other) => match other.strip_prefix("memory:").map(str::parse::<u64>) {
            // Never 0: a tmpfs of size 0 has no limit at all; nor so near 2^64 that the
            // kernel's rounding to pages wraps around to 0.
            Some(Ok(limit)) if limit > 0 => Ok(TreeIn::Memory { limit: limit.min(1 << 62) }),
            _ => Err(format!(
                "{TREE_ENV}={other:?}: expected `auto`, `disk`, `memory` or `memory:BYTES`"
            )),
        },
    }
}

/// The memory a tmpfs of this process may fill: the kernel's `MemAvailable`, less where the
/// memory cgroup this process is in, or any of its parents, leaves less room under its limit
/// (tmpfs pages are charged to the cgroup of the process that writes them): cgroup v2's
/// `memory.max` less `memory.current`, v1's `memory.limit_in_bytes` less
/// `memory.usage_in_bytes`, the reclaimable page cache (`inactive_file`) counted as room.
/// `None` where `/proc/meminfo` cannot be read, or the process's memory cgroup cannot be
/// found in the mounted hierarchy (`memory_cgroup`): the room is then unknown.
fn memory_room() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut room = mem_available(&meminfo)?;
    let Some((top, mut dir, v2)) = memory_cgroup(&cgroup, &mountinfo) else {
        // No memory controller and no unified hierarchy (cgroups off): no cgroup limit.
        let none =
            cgroups::v1_path(&cgroup, "memory").is_none() && cgroups::v2_path(&cgroup).is_none();
        return none.then_some(room);
    };
    if !dir.is_dir() {
        return None;
    }
    let (max, used, stat_key) = if v2 {
        ("memory.max", "memory.current", "inactive_file ")
    } else {
        ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file ")
    };
    loop {
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
        let number = |f: &str| read(f).and_then(|t| t.trim().parse::<u64>().ok());
        if let (Some(max), Some(used)) = (number(max), number(used)) {
            let reclaimable = read("memory.stat")
                .and_then(|t| {
                    t.lines().find_map(|l| l.strip_prefix(stat_key)?.trim().parse::<u64>().ok())
                })
                .unwrap_or(0);
            room = room.min(max.saturating_sub(used.saturating_sub(reclaimable)));
        }
        if dir == top || !dir.pop() {
            break;
        }
    }
    Some(room)
}

/// Where this process's memory cgroup is mounted, from `/proc/self/cgroup` and
/// `/proc/self/mountinfo`: the hierarchy's mount point, the cgroup's directory under it, and
/// whether it is cgroup v2. v1's hierarchy with the `memory` controller where there is one
/// (the unified hierarchy then has no memory controller), else v2's (`0::`). The cgroup's
/// path is relative to the hierarchy's root, and a mount may show only a subtree of it (its
/// root field: a container without a cgroup namespace sees its own cgroup `/docker/ID` as
/// the mount's top), so that root is taken off; a cgroup outside the mounted subtree: `None`.
fn memory_cgroup(cgroup: &str, mountinfo: &str) -> Option<(PathBuf, PathBuf, bool)> {
    let (path, v2) = match cgroups::v1_path(cgroup, "memory") {
        Some(path) => (path, false),
        None => (cgroups::v2_path(cgroup)?, true),
    };
    let (root, top) = cgroups::mount(mountinfo, (!v2).then_some("memory"))?;
    let rel = if root == "/" { Some(path) } else { path.strip_prefix(root.as_str()) }?;
    if !(rel.is_empty() || rel.starts_with('/')) || rel.split('/').any(|c| c == "..") {
        return None;
    }
    let dir = top.join(rel.trim_start_matches('/'));
    Some((top, dir, v2))
}

/// `MemAvailable` of `/proc/meminfo`'s text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kib.checked_mul(1024)
}

/// What the job process leaves in `result.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Outcome {
    /// The command's exit status (0: `changes.tar` holds what it changed).
    status: i32,
    /// The end of its output, for an error.
    output: String,
    removed: Vec<String>,
    not_taken: Vec<String>,
    /// The tree was in memory and filled its tmpfs: nothing else of this outcome holds.
    #[serde(default)]
    full: bool,
    /// Where the tree was, as the report says it (`memory`, `disk`, and why disk where memory
    /// was asked for).
    #[serde(default)]
    tree: String,
    /// The job's own failure where its root was in memory (on disk it ends the job instead):
    /// the parent runs it again on disk.
    #[serde(default)]
    error: Option<String>,
    /// The run's changes, until they are written to `changes.tar`.
    #[serde(skip)]
    changes: Option<LayerContents>,
}

/// Runs `job` over the base and the layer so far, and adds what it changed to `layer`.
/// Returns the paths removed and what to report.
///
/// The root is assembled, run and read back by a process of its own ([`job_main`]) that is
/// the root of a user namespace mapping the sandbox's ids ([`crate::sandbox::IdMap`]): the
/// hostile layers are written by ids that own nothing else here, and a user without root can
/// do it all with subordinate ids. This process streams it the layers, the layer so far and
/// the packages, and takes back a layer of the changes.
pub(crate) fn run(job: Job<'_>, over: Over<'_, '_>) -> Result<(Vec<String>, SandboxRun)> {
    let Over { base, layer, inputs, reporter } = over;
    let because = job.because.as_str();
    // What stops a sandbox from working, said before any layer is read.
    let map = crate::sandbox::IdMap::for_this_process(SHIFT).map_err(|e| error(because, e))?;
    for tool in ["bin/sh", job.needs] {
        if base.real_path(tool)?.map(|p| base.kind(&p)).transpose()?.flatten().is_none() {
            return Err(error(because, format!("the base has no /{tool} to run them with")));
        }
    }
    let place = work_place(&inputs.cache_dir).ok_or_else(|| {
        error(because, format!(
            "no place for the sandbox's root that its ids may enter: {}, $TMPDIR, /var/tmp and /tmp each have a parent closed to other users",
            inputs.cache_dir.display()
        ))
    })?;
    let work = tempfile::Builder::new()
        .prefix("erdma-build-sandbox-")
        .tempdir_in(&place)
        .map_err(|e| Error::io("creating a sandbox in", &place)(e))?;
    // Only the sandbox's ids (and root here) may enter it.
    let (uid, gid) = map.root();
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::chown(work.path(), Some(uid), Some(gid))
            .map_err(|e| Error::io("setting the owner of", work.path())(e))?;
    }
    let layers = base.layers();
    let bytes: u64 = layers.iter().map(|(_, s)| s).sum();
    let package_bytes: u64 =
        job.files.iter().filter_map(|(_, p)| std::fs::metadata(p).ok()).map(|m| m.len()).sum();
    let setting = std::env::var(TREE_ENV).ok();
    let tree = tree_in(setting.as_deref(), memory_room(), bytes, package_bytes)
        .map_err(|e| error(because, e))?;
    reporter.step(&format!(
        "reading the base's {} layers ({:.1} MB) to run maintainer scripts in a sandbox{}",
        layers.len(),
        bytes as f64 / 1e6,
        if matches!(tree, TreeIn::Memory { .. }) { ", its root in memory" } else { "" }
    ));
    let mut header = Header {
        tool: job.tool.to_string(),
        layers: layers.iter().map(|(d, _)| d.clone()).collect(),
        files: job.files.iter().map(|(n, _)| n.clone()).collect(),
        commands: job.commands.clone(),
        tree,
    };
    // Why a run in memory was run again on disk.
    let mut again = None;
    let outcome = loop {
        let outcome = tokio::task::block_in_place(|| {
            let given = job.given.as_deref();
            run_job(work.path(), &map, &header, base, layer, &job.files, given, reporter, because)
        });
        // A run whose root was in memory and did not succeed goes once more with its root on
        // disk, whose result or error then stands: a tmpfs that filled is not always seen full
        // afterwards (dpkg removes what it unpacked when a write fails). What failed outside
        // the tree (the build's own reading, the ids' mapping) is not run again.
        let TreeIn::Memory { limit } = header.tree else { break outcome? };
        let mib = limit >> 20;
        let (step, why) = match &outcome {
            Ok(o) if o.full => (
                format!("its root filled its {mib} MiB tmpfs (bytes or inodes): running the sandbox again, its root on disk"),
                format!("filled its {mib} MiB tmpfs in memory"),
            ),
            Ok(o) if o.tree == "memory" && (o.status != 0 || o.error.is_some()) => {
                let cause = match &o.error {
                    Some(e) => e.lines().next().unwrap_or_default().to_string(),
                    None => format!("{} exited with status {}", job.tool, o.status),
                };
                (
                    format!("{cause}, its root in memory ({mib} MiB): running it once more on disk, in case the limit caused it"),
                    format!("after a failed run in memory, {mib} MiB: {cause}"),
                )
            }
            _ => break outcome?,
        };
        reporter.step(&step);
        again = Some(why);
        header.tree = TreeIn::Disk;
    };
    if outcome.status != 0 {
        let tail: Vec<&str> = outcome.output.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = tail[tail.len().saturating_sub(3)..].join(" / ");
        return Err(error(
            because,
            format!("{} exited with status {}: {tail}", job.tool, outcome.status),
        ));
    }
    let changes = work.path().join("changes.tar");
    let f = std::fs::File::open(&changes).map_err(|e| Error::io("reading", &changes)(e))?;
    layer.add_tar(std::io::BufReader::new(f))?;
    Ok((
        outcome.removed,
        SandboxRun {
            because: job.because,
            commands: job.commands,
            layers_read: layers.len(),
            bytes_read: bytes,
            not_taken: outcome.not_taken,
            tree: match again {
                Some(why) => format!("disk ({why})"),
                None => outcome.tree,
            },
        },
    ))
}

/// Starts the job process in `work`, maps its ids, streams it what it needs and waits for it.
#[allow(clippy::too_many_arguments)]
fn run_job(
    work: &Path,
    map: &crate::sandbox::IdMap,
    header: &Header,
    base: &dyn BaseFiles,
    layer: &LayerContents,
    files: &[(String, &Path)],
    given: Option<&dyn Fn(usize) -> Option<Box<dyn Read>>>,
    reporter: &dyn Reporter,
    because: &str,
) -> Result<Outcome> {
    let setup = |what: &str, e: Cause| error(because, Doing::new(what, e));
    let exe = std::env::current_exe().map_err(|e| setup("finding erdma-build itself", e.into()))?;
    let mut child = Command::new(exe)
        .arg(JOB)
        .arg(work)
        .env_clear()
        .env("TMPDIR", work)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| setup("starting the sandbox's job", e.into()))?;
    let mut err = child.stderr.take().expect("piped");
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let fail = |child: &mut std::process::Child,
                err_reader: std::thread::JoinHandle<Vec<u8>>,
                why: Cause| {
        let _ = child.kill();
        let _ = child.wait();
        // The job says why it stopped on its stderr, as text.
        let own =
            String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).trim().to_string();
        error(because, if own.is_empty() { why } else { own.into() })
    };
    let mut line = String::new();
    let _ = BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line);
    if line != "ready\n" {
        return Err(fail(&mut child, err_reader, "the sandbox's job did not start".into()));
    }
    if let Err(e) = map.write(child.id()) {
        return Err(fail(&mut child, err_reader, e.into()));
    }
    // Large writes: the layers cross the pipe in as few system calls as the pipe allows. The
    // pipe holds 1 MiB (the most an unprivileged process may ask for by default,
    // /proc/sys/fs/pipe-max-size) rather than 64 KiB: with the smaller one, this side
    // (inflating the base) and the job (writing its files) took turns, each waiting on the
    // other, and the machine's cores stood idle for a third of the time (docs/benchmarks.md).
    // Where it cannot be grown, the pipe stays as it was, only slower.
    let stdin = child.stdin.take().expect("piped");
    let _ = rustix::pipe::fcntl_setpipe_size(&stdin, 1 << 20);
    let mut stdin = std::io::BufWriter::with_capacity(1 << 20, stdin);
    /// Why feeding the job stopped: the pipe (the job stopped reading, and says why on its
    /// stderr), or reading what was to be sent.
    enum Stop {
        Pipe(std::io::Error),
        Input(Box<Error>),
    }
    let streamed = (|| -> std::result::Result<(), Stop> {
        let pipe = Stop::Pipe;
        stdin.write_all(b"go\n").map_err(pipe)?;
        let text = serde_json::to_string(header)
            .map_err(|e| Stop::Input(Box::new(setup("the job", e.into()))))?;
        stdin.write_all(text.as_bytes()).and_then(|()| stdin.write_all(b"\n")).map_err(pipe)?;
        for i in 0..header.layers.len() {
            let mut tar = base.layer_tar(i).map_err(|e| Stop::Input(Box::new(e.into())))?;
            send(&mut stdin, &mut tar).map_err(pipe)?;
        }
        // The layer so far (repository files, removals), as the image will have it.
        let mut frames = Frames::new(&mut stdin);
        layer.write_tar(&mut frames, 0).map_err(pipe)?;
        frames.finish().map_err(pipe)?;
        for (i, (_, path)) in files.iter().enumerate() {
            if let Some(mut given) = given.and_then(|g| g(i)) {
                send(&mut stdin, &mut given).map_err(pipe)?;
                continue;
            }
            let mut f = std::fs::File::open(path)
                .map_err(|e| Stop::Input(Box::new(Error::io("reading", *path)(e))))?;
            send(&mut stdin, &mut f).map_err(pipe)?;
        }
        stdin.flush().map_err(pipe)
    })();
    drop(stdin);
    match streamed {
        Ok(()) => {}
        Err(Stop::Pipe(e)) => {
            let why = Doing::new("feeding the sandbox's job", e);
            return Err(fail(&mut child, err_reader, why.into()));
        }
        Err(Stop::Input(e)) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(*e);
        }
    }
    reporter.step(&format!(
        "running {} in the sandbox for {} packages (scripts of {because} included)",
        header.tool,
        header.files.len()
    ));
    let status = child.wait().map_err(|e| setup("waiting for the sandbox's job", e.into()))?;
    let own = String::from_utf8_lossy(&err_reader.join().unwrap_or_default()).trim().to_string();
    if !status.success() {
        return Err(error(
            because,
            if own.is_empty() { format!("the sandbox's job ended with {status}") } else { own },
        ));
    }
    let result = work.join("result.json");
    let text = std::fs::read(&result).map_err(|e| Error::io("reading", &result)(e))?;
    serde_json::from_slice(&text).map_err(|e| setup("reading the sandbox's result", e.into()))
}

/// All of `r` as one stream of [`Frames`] on `out`.
fn send(out: &mut impl Write, r: &mut dyn Read) -> std::io::Result<()> {
    let mut frames = Frames::new(out);
    std::io::copy(r, &mut frames)?;
    frames.finish()
}

/// One stream of many on a pipe: chunks of `[length: u64 LE][bytes]`, ended by a length of 0.
struct Frames<W: Write> {
    out: W,
}

impl<W: Write> Frames<W> {
    fn new(out: W) -> Self {
        Frames { out }
    }

    fn finish(mut self) -> std::io::Result<()> {
        self.out.write_all(&0u64.to_le_bytes())
    }
}

impl<W: Write> Write for Frames<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.out.write_all(&(buf.len() as u64).to_le_bytes())?;
        self.out.write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// The reading side of [`Frames`]: one stream, ending where its writer finished it.
struct Unframe<'r> {
    input: &'r mut dyn BufRead,
    left: u64,
    done: bool,
}

impl<'r> Unframe<'r> {
    fn new(input: &'r mut dyn BufRead) -> Self {
        Unframe { input, left: 0, done: false }
    }

    /// Reads what its reader left of the stream (a tar reader stops at its end marker).
    fn drain(mut self) -> std::io::Result<()> {
        std::io::copy(&mut self, &mut std::io::sink()).map(|_| ())
    }
}

impl Read for Unframe<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.left == 0 {
            if self.done {
                return Ok(0);
            }
            let mut len = [0u8; 8];
            self.input.read_exact(&mut len)?;
            self.left = u64::from_le_bytes(len);
            self.done = self.left == 0;
        }
        let n = (buf.len() as u64).min(self.left) as usize;
        let got = self.input.read(&mut buf[..n])?;
        if got == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.left -= got as u64;
        Ok(got)
    }
}

/// The job process (`erdma-build __sandbox-job WORK`): becomes the root of a user namespace
/// whose ids its parent maps, reads the job and its data on stdin, assembles the root in
/// `WORK/root`, or in memory on a tmpfs at `WORK/tree` in a mount namespace of its own
/// (`TreeIn`), from the layers (owned by the namespace's ids), puts the packages in, runs the
/// commands in the sandbox ([`crate::sandbox::run`], its ids the same as this namespace's),
/// and leaves the changes as a layer in `WORK/changes.tar` and the outcome in
/// `WORK/result.json`. Its own failures go to stderr with exit status 125.
pub fn job_main(args: &[std::ffi::OsString], unshare: crate::sandbox::Unshare) -> ExitCode {
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("{e}");
        ExitCode::from(125)
    };
    let Some(work) = args.first().map(PathBuf::from) else {
        return fail(&"sandbox job: no work directory");
    };
    // Read in large pieces: stdin's own buffer (8 KiB) makes the layers' tens of megabytes
    // thousands of small reads of the pipe.
    let mut input = BufReader::with_capacity(1 << 20, std::io::stdin());
    if let Err(e) = crate::sandbox::become_namespace_root(
        unshare,
        // A mount namespace of its own, for a tree in memory: its tmpfs is seen by no one
        // else, and goes when this process and the sandbox's are gone.
        rustix::thread::UnshareFlags::NEWNS,
        &mut input,
    ) {
        return fail(&e);
    }
    let done = job(&work, &mut input);
    let tmpfs = work.join(TMPFS);
    if tmpfs.exists() {
        let _ = rustix::mount::unmount(&tmpfs, rustix::mount::UnmountFlags::DETACH);
        let _ = std::fs::remove_dir(&tmpfs);
    }
    // The tree belongs to the namespace's ids: a user without root could not remove it from
    // outside (its subordinate ids own most of it), so it goes here, whatever happened.
    let root = work.join("root");
    if root.exists() {
        if let Err(e) = std::fs::remove_dir_all(&root) {
            if done.is_ok() {
                return fail(&format!("removing the sandbox's root {}: {e}", root.display()));
            }
        }
    }
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&erdma_common::errors::chain(&*e)),
    }
}

/// The job's own failures are said in its parent's words: a line without a prefix, the
/// causes after it ([`erdma_common::errors::chain`]).
fn job(work: &Path, input: &mut dyn BufRead) -> std::result::Result<(), Cause> {
    let mut line = String::new();
    input.read_line(&mut line)?;
    let header: Header = serde_json::from_str(&line)?;
    let mut outcome = Outcome::default();
    let (root, in_memory) = match header.tree {
        TreeIn::Memory { limit } => match mount_tmpfs(&work.join(TMPFS), limit) {
            Ok(()) => {
                outcome.tree = "memory".into();
                (work.join(TMPFS).join("root"), true)
            }
            Err(e) => {
                let _ = std::fs::remove_dir(work.join(TMPFS));
                outcome.tree = format!("disk (no tmpfs: {e})");
                (work.join("root"), false)
            }
        },
        TreeIn::Disk => {
            outcome.tree = "disk".into();
            (work.join("root"), false)
        }
    };
    let ran = assemble_and_run(&root, &header, input, &mut outcome);
    // A tree in memory that ends (nearly) filling its tmpfs, in bytes or inodes, whether the
    // run failed or a script went on past a failed write: the parent runs it again on disk.
    let full = in_memory
        && rustix::fs::statvfs(work.join(TMPFS)).is_ok_and(|s| {
            s.f_bavail.saturating_mul(s.f_frsize) < FULL_BELOW || s.f_favail < FULL_INODES
        });
    if full || (in_memory && ran.is_err()) {
        // The rest of what the parent sends, read to its end, so that it comes to read this.
        std::io::copy(input, &mut std::io::sink())?;
        let error = ran.err().filter(|_| !full).map(|e| erdma_common::errors::chain(&*e));
        outcome = Outcome { full, error, tree: outcome.tree, ..Outcome::default() };
    } else {
        ran?;
        if outcome.status == 0 {
            let path = work.join("changes.tar");
            let f = std::fs::File::create(&path).map_err(erdma_oci::Error::io("writing", &path))?;
            outcome
                .changes
                .take()
                .expect("a run that succeeded leaves its changes")
                .write_tar(std::io::BufWriter::new(f), 0)
                .and_then(|mut w| w.flush())
                .map_err(erdma_oci::Error::io("writing", &path))?;
        }
    }
    let path = work.join("result.json");
    let text = serde_json::to_vec(&outcome)?;
    std::fs::write(&path, text).map_err(erdma_oci::Error::io("writing", &path))?;
    Ok(())
}

/// Where a tree in memory is mounted, inside the job's work directory.
const TMPFS: &str = "tree";

/// Free space under which a tmpfs counts as filled (a file that did not fit).
const FULL_BELOW: u64 = 1 << 20;

/// Free inodes under which a tmpfs counts as filled.
const FULL_INODES: u64 = 64;

/// Bytes of a tmpfs's limit per inode it may have: a Debian root averages 20 kB a file. The
/// kernel keeps about 1 kB per inode outside the limit, so inodes cap that at a quarter of it.
const BYTES_PER_INODE: u64 = 4096;

/// Mounts a tmpfs of at most `limit` bytes and `limit / BYTES_PER_INODE` inodes at `mnt`
/// (created here), in this process's mount namespace (made with its user namespace, so no
/// mount event reaches the host's).
fn mount_tmpfs(mnt: &Path, limit: u64) -> std::io::Result<()> {
    use rustix::mount::{mount, mount_change, MountFlags, MountPropagationFlags};
    mount_change("/", MountPropagationFlags::PRIVATE | MountPropagationFlags::REC)?;
    std::fs::create_dir(mnt)?;
    let inodes = (limit / BYTES_PER_INODE).max(1024);
    let data = std::ffi::CString::new(format!("size={limit},nr_inodes={inodes},mode=0755"))
        .expect("no NUL in the tmpfs options");
    mount("erdma-build-sandbox", mnt, "tmpfs", MountFlags::empty(), data.as_c_str())?;
    Ok(())
}

/// The job itself: the tree assembled at `root` from the layers on `input`, the packages put
/// in, the commands run, and on success the changes in `outcome`.
fn assemble_and_run(
    root: &Path,
    header: &Header,
    input: &mut dyn BufRead,
    outcome: &mut Outcome,
) -> std::result::Result<(), Cause> {
    // The namespace's ids are the tree's: no shift inside it.
    let root = RootDir::create(root, 0)?;
    for digest in &header.layers {
        let mut tar = Unframe::new(input);
        let applied = root.apply(digest, &mut tar)?;
        outcome.not_taken.extend(applied.skipped);
        tar.drain()?;
    }
    let mut tar = Unframe::new(input);
    root.apply("(this build's layer)", &mut tar)?;
    tar.drain()?;

    let before = root.scan()?;
    root.put_dir(INBOX)?;
    for name in &header.files {
        let mut f = Unframe::new(input);
        root.put_file(&format!("{INBOX}/{name}"), &mut f, 0o644)?;
        f.drain()?;
    }
    let script = format!("set -e\n{}\n", header.commands.join("\n"));
    let ran = crate::sandbox::run(
        root.path(),
        &crate::sandbox::IdMap::Same,
        &["/bin/sh", "-c", &script],
        ENV,
    )?;
    outcome.status = ran.status;
    outcome.output = String::from_utf8_lossy(&ran.output).into_owned();
    if ran.status == 0 {
        root.remove(INBOX)?;
        let after = root.scan()?;
        let mut changes = LayerContents::new();
        let (removed, skipped) = root.changes(&before, &after, &mut changes)?;
        outcome.removed = removed;
        outcome.not_taken.extend(skipped);
        outcome.changes = Some(changes);
    }
    Ok(())
}

/// A directory for the sandbox's tree whose every parent other users may pass through: the
/// sandbox's root is not the host's root, and reaches its tree by path (the cache under
/// `/root/.cache` would be closed to it). Then `$TMPDIR` if set, then `/var/tmp` (on disk where
/// `/tmp` may be a tmpfs too small for a large base), then `/tmp`.
fn work_place(cache: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let open = |dir: &Path| {
        std::fs::create_dir_all(dir).is_ok()
            && dir.canonicalize().is_ok_and(|d| {
                d.ancestors().all(|a| {
                    std::fs::metadata(a).is_ok_and(|m| m.permissions().mode() & 0o001 != 0)
                })
            })
    };
    let tmpdir = std::env::var_os("TMPDIR").map(PathBuf::from);
    [Some(cache.to_path_buf()), tmpdir, Some("/var/tmp".into()), Some("/tmp".into())]
        .into_iter()
        .flatten()
        .find(|d| open(d))
}

/// A file name for a package inside [`INBOX`]: the characters package names and versions
/// use, anything else as `_`.
pub(crate) fn file_name(name: &str, version: &str, arch: &str, ext: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_ascii_alphanumeric() || "+-.~".contains(c) { c } else { '_' })
            .collect()
    };
    format!("{}_{}_{}.{ext}", clean(name), clean(version), clean(arch))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_tree_goes_to_memory_only_with_room_for_four_times_the_estimate() {
        // A 50 MB base and 23 MB of packages: an estimate of 292 MB.
        let (base, debs) = (50_000_000, 23_000_000);
        let estimate = 4 * (base + debs);
        // Just the room: half of it, twice the estimate.
        assert_eq!(
            tree_in(None, Some(4 * estimate), base, debs),
            Ok(TreeIn::Memory { limit: 2 * estimate })
        );
        // Plenty of room: twice the estimate and the slack, not half the host.
        assert_eq!(
            tree_in(Some("auto"), Some(64 << 30), base, debs),
            Ok(TreeIn::Memory { limit: 2 * estimate + SLACK })
        );
        assert_eq!(tree_in(Some("auto"), Some(4 * estimate - 1), base, debs), Ok(TreeIn::Disk));
        // Unknown room, or none (a cgroup at its limit): disk.
        assert_eq!(tree_in(None, None, base, debs), Ok(TreeIn::Disk));
        assert_eq!(tree_in(None, Some(0), 0, 0), Ok(TreeIn::Disk));
        assert_eq!(tree_in(None, Some(2 * MIN_TMPFS - 1), 0, 0), Ok(TreeIn::Disk));
        // A 15 GB base (NGC PyTorch) on a 64 GiB host: disk.
        assert_eq!(tree_in(None, Some(64 << 30), 15_000_000_000, 0), Ok(TreeIn::Disk));
    }

    #[test]
    fn the_setting_overrides_and_is_checked() {
        assert_eq!(tree_in(Some("disk"), Some(1 << 40), 1, 1), Ok(TreeIn::Disk));
        // `memory` whatever the estimate: capped by half the room, never under the minimum,
        // never 0 (which would be a tmpfs without a limit).
        assert_eq!(
            tree_in(Some("memory"), Some(1 << 30), 1 << 30, 0),
            Ok(TreeIn::Memory { limit: 512 * MIB })
        );
        assert_eq!(
            tree_in(Some("memory"), Some(0), 1 << 30, 0),
            Ok(TreeIn::Memory { limit: MIN_TMPFS })
        );
        assert_eq!(
            tree_in(Some("memory"), None, MIB, 0),
            Ok(TreeIn::Memory { limit: 8 * MIB + SLACK })
        );
        assert_eq!(tree_in(Some(" memory:4096 "), None, 0, 0), Ok(TreeIn::Memory { limit: 4096 }));
        for bad in ["ram", "memory:", "memory:0", "memory:1G", "Disk"] {
            let e = tree_in(Some(bad), Some(1 << 30), 0, 0).unwrap_err();
            assert!(e.starts_with(&format!("{TREE_ENV}=")) && e.contains("memory:BYTES"), "{e}");
        }
    }

    #[test]
    fn the_memory_cgroup_is_found_in_either_version() {
        let mount = |root: &str, point: &str, fs: &str, opts: &str| {
            format!("35 24 0:31 {root} {point} rw,nosuid shared:9 - {fs} cgroup {opts}\n")
        };
        let p = |s: &str| PathBuf::from(s);
        // cgroup v1 with the unified hierarchy beside it (this project's CI machine).
        let v1 = "9:name=systemd:/\n4:memory:/process_api/e17a\n3:cpuset:/\n0::/\n";
        let mounts = mount("/", "/sys/fs/cgroup/cpuset", "cgroup", "rw,cpuset")
            + &mount("/", "/sys/fs/cgroup/memory", "cgroup", "rw,memory")
            + &mount("/", "/sys/fs/cgroup/unified", "cgroup2", "rw");
        assert_eq!(
            memory_cgroup(v1, &mounts),
            Some((p("/sys/fs/cgroup/memory"), p("/sys/fs/cgroup/memory/process_api/e17a"), false))
        );
        // Controllers joined in one hierarchy, mounted under another name.
        let joined = "5:cpu,memory:/a/b\n";
        let mounts = mount("/", "/sys/fs/cgroup/cpu,memory", "cgroup", "rw,cpu,memory");
        assert_eq!(
            memory_cgroup(joined, &mounts),
            Some((p("/sys/fs/cgroup/cpu,memory"), p("/sys/fs/cgroup/cpu,memory/a/b"), false))
        );
        // A container without a cgroup namespace: its own cgroup is the mount's top.
        let docker = "4:memory:/docker/abc\n";
        let mounts = mount("/docker/abc", "/sys/fs/cgroup/memory", "cgroup", "rw,memory");
        assert_eq!(
            memory_cgroup(docker, &mounts),
            Some((p("/sys/fs/cgroup/memory"), p("/sys/fs/cgroup/memory"), false))
        );
        // A cgroup outside the mounted subtree.
        assert_eq!(memory_cgroup("4:memory:/other\n", &mounts), None);
        assert_eq!(memory_cgroup("4:memory:/docker/abcd\n", &mounts), None);
        // v2 alone, and v1 without a memory controller.
        let v2 = "0::/user.slice/session-1.scope\n";
        let mounts = mount("/", "/sys/fs/cgroup", "cgroup2", "rw,nsdelegate");
        assert_eq!(
            memory_cgroup(v2, &mounts),
            Some((p("/sys/fs/cgroup"), p("/sys/fs/cgroup/user.slice/session-1.scope"), true))
        );
        assert_eq!(
            memory_cgroup("2:cpu:/x\n0::/y\n", &mounts),
            Some((p("/sys/fs/cgroup"), p("/sys/fs/cgroup/y"), true))
        );
        assert_eq!(memory_cgroup("2:cpu:/x\n", &mounts), None);
        // No mount of the hierarchy, or a path climbing out.
        assert_eq!(memory_cgroup(v2, ""), None);
        assert_eq!(memory_cgroup("0::/../x\n", &mounts), None);
    }

    #[test]
    fn mem_available_is_read_in_bytes() {
        let meminfo = "MemTotal:       24731708 kB\nMemFree:         1234567 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(mem_available(meminfo), Some(20_000_000 * 1024));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
        assert_eq!(mem_available("MemAvailable: lots\n"), None);
        // This machine's own: never more than all its memory.
        let total = std::fs::read_to_string("/proc/meminfo").unwrap();
        let total = total.lines().find_map(|l| l.strip_prefix("MemTotal:")).unwrap();
        let total: u64 = total.trim().trim_end_matches("kB").trim().parse().unwrap();
        assert!(memory_room().is_none_or(|r| r <= total * 1024));
    }
}
