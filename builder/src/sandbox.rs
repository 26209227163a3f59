//! Running a command inside an image's root, cut off from the host: where maintainer scripts
//! that cannot be emulated run ([`crate::packages::apt`] decides when).
//!
//! The root is a tree ([`erdma_oci::rootdir::RootDir`], on disk or on a tmpfs) owned by the
//! ids of a user namespace ([`IdMap`]: a range only root may hand out, or a rootless user's own
//! id and its subordinate ids). The command runs as that namespace's root, in new mount, PID,
//! network, IPC and UTS namespaces:
//! - the tree is bind-mounted and made the root with `pivot_root`, the host's root unmounted
//!   under it: no path leads out;
//! - a new `/proc` for the new PID namespace, a tmpfs `/dev` with only `null`, `zero`, `full`,
//!   `random`, `urandom` and `tty` bound in, and a tmpfs `/dev/shm` (none of it in the tree);
//! - the network namespace has only a loopback that is down: no network at all;
//! - its root holds capabilities only over its own namespaces and the files it owns, the
//!   tree's: nothing of the host is writable to it.
//!
//! Three processes, because a user namespace's id map must be written by a process outside
//! it, and `unshare(2)` of a user namespace needs a single-threaded caller (erdma-build runs
//! an async runtime): erdma-build starts itself as the helper ([`HELPER`]), which unshares
//! and says so; erdma-build writes its id maps; the helper becomes the namespace's root and
//! starts [`INIT`] (PID 1 of the new PID namespace), which mounts, pivots and executes the
//! command. All output, the helper's and the command's, comes back to erdma-build, never to
//! the terminal.
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use rustix::thread::UnshareFlags;

/// The hidden first argument that makes `erdma-build` the sandbox's helper.
pub const HELPER: &str = "__sandbox";
/// The hidden first argument of the sandbox's PID 1.
pub const INIT: &str = "__sandbox-init";

/// `unshare(2)`: the binary passes it in, the one call the workspace's no-unsafe rule cannot
/// express safely (see CONTRIBUTING.md).
pub type Unshare = fn(UnshareFlags) -> std::io::Result<()>;

/// The exit status the helper and init use for their own failures (the line before says why).
const OWN_FAILURE: i32 = 125;
/// How much of a command's output is kept (its end): enough for the error a build shows.
const KEEP_OUTPUT: usize = 256 << 10;

/// Why no command could run in a sandbox here.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("running scripts in a sandbox without root needs a range of 65535 subordinate ids for {user} in /etc/subuid and /etc/subgid, and newuidmap and newgidmap (Debian's and Ubuntu's uidmap package), as rootless Podman does: {missing}")]
    NoIds { user: String, missing: String },
    /// `source`: the error met, where there is one in hand (a helper process's own words
    /// arrive as text, in `what`).
    #[error("could not make the sandbox: {what}")]
    Setup {
        what: String,
        #[source]
        source: Option<std::io::Error>,
    },
}

impl SandboxError {
    fn setup(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SandboxError {
        let what = what.into();
        move |e| SandboxError::Setup { what, source: Some(e) }
    }

    fn said(what: impl Into<String>) -> SandboxError {
        SandboxError::Setup { what: what.into(), source: None }
    }
}

/// How the ids of a sandbox's user namespace map to this machine's: 0 to 65535
/// ([`erdma_oci::rootdir::ID_COUNT`]) in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdMap {
    /// Written straight into the id maps, by root (of this machine or of an enclosing
    /// namespace): namespace id `i` is id `shift + i` here.
    Shifted(u32),
    /// Every id of this process's own user namespace as itself, extent by extent (a map
    /// must not span two extents of its parent's): for a sandbox made inside the namespace
    /// of a job that already holds the tree's ids.
    Same,
    /// A user without privilege, as rootless Podman maps one: the namespace's root is the user
    /// itself, and its ids 1 to 65535 are the user's subordinate ids from `/etc/subuid` and
    /// `/etc/subgid`, mapped by the setuid `newuidmap` and `newgidmap`.
    Subordinate { uid: u32, gid: u32, subuid: u32, subgid: u32 },
}

impl IdMap {
    /// The map a sandbox of this process gets: [`IdMap::Shifted`] from `shift` when it runs as
    /// root, else the user's subordinate ids (refused, saying what is missing, without them).
    pub fn for_this_process(shift: u32) -> Result<IdMap, SandboxError> {
        let uid = rustix::process::geteuid().as_raw();
        if uid == 0 {
            return Ok(IdMap::Shifted(shift));
        }
        let gid = rustix::process::getegid().as_raw();
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let user = passwd
            .lines()
            .find(|l| l.split(':').nth(2) == Some(&uid.to_string()))
            .and_then(|l| l.split(':').next())
            .unwrap_or_default()
            .to_string();
        let shown = if user.is_empty() { format!("uid {uid}") } else { user.clone() };
        let need = erdma_oci::rootdir::ID_COUNT - 1;
        let range = |file: &str, id: u32| -> Result<u32, SandboxError> {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            text.lines()
                .filter_map(|l| {
                    let mut f = l.trim().split(':');
                    let (who, start, count) = (f.next()?, f.next()?, f.next()?);
                    let ours = who == id.to_string() || (!user.is_empty() && who == user);
                    let (start, count) = (start.parse::<u32>().ok()?, count.parse::<u32>().ok()?);
                    (ours && count >= need).then_some(start)
                })
                .next()
                .ok_or_else(|| SandboxError::NoIds {
                    user: shown.clone(),
                    missing: format!("{file} has no range of {need} ids for it (usermod --add-subuids/--add-subgids)"),
                })
        };
        let subuid = range("/etc/subuid", uid)?;
        let subgid = range("/etc/subgid", gid)?;
        for tool in ["newuidmap", "newgidmap"] {
            if find_in_path(tool).is_none() {
                return Err(SandboxError::NoIds {
                    user: shown.clone(),
                    missing: format!("{tool} is not installed"),
                });
            }
        }
        Ok(IdMap::Subordinate { uid, gid, subuid, subgid })
    }

    /// This machine's uid and gid for the namespace's root.
    pub fn root(&self) -> (u32, u32) {
        match self {
            IdMap::Shifted(shift) => (*shift, *shift),
            IdMap::Same => (0, 0),
            IdMap::Subordinate { uid, gid, .. } => (*uid, *gid),
        }
    }

    /// Writes the maps of process `pid`, which has just made its user namespace.
    pub fn write(&self, pid: u32) -> Result<(), SandboxError> {
        let count = erdma_oci::rootdir::ID_COUNT;
        match self {
            IdMap::Shifted(shift) => {
                for file in ["uid_map", "gid_map"] {
                    let path = format!("/proc/{pid}/{file}");
                    std::fs::write(&path, format!("0 {shift} {count}\n"))
                        .map_err(SandboxError::setup(format!("writing {path}")))?;
                }
            }
            IdMap::Same => {
                for file in ["uid_map", "gid_map"] {
                    let own = std::fs::read_to_string(format!("/proc/self/{file}"))
                        .map_err(SandboxError::setup(format!("reading /proc/self/{file}")))?;
                    let same: String = own
                        .lines()
                        .filter_map(|l| {
                            let f: Vec<&str> = l.split_whitespace().collect();
                            Some(format!("{} {} {}\n", f.first()?, f.first()?, f.get(2)?))
                        })
                        .collect();
                    let path = format!("/proc/{pid}/{file}");
                    std::fs::write(&path, same)
                        .map_err(SandboxError::setup(format!("writing {path}")))?;
                }
            }
            IdMap::Subordinate { uid, gid, subuid, subgid } => {
                for (tool, own, sub) in [("newuidmap", uid, subuid), ("newgidmap", gid, subgid)] {
                    let out = Command::new(tool)
                        .arg(pid.to_string())
                        .args(["0", &own.to_string(), "1", "1", &sub.to_string()])
                        .arg((count - 1).to_string())
                        .stdin(Stdio::null())
                        .output()
                        .map_err(SandboxError::setup(format!("running {tool}")))?;
                    if !out.status.success() {
                        return Err(SandboxError::said(format!(
                            "{tool} refused the map: {}",
                            String::from_utf8_lossy(&out.stderr).trim()
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

fn find_in_path(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path).map(|d| d.join(tool)).find(|p| p.is_file())
}

/// Makes this process (single-threaded, just started) the root of a user namespace of its
/// own (and of the other namespaces `flags` adds), whose maps its parent writes: says `ready`
/// on stdout, waits for `go` on `input`, then takes uid and gid 0 there. With `NEWUSER` alone
/// the process sees the host's files, with only what the mapped ids own (or anyone may write)
/// writable to it.
pub fn become_namespace_root(
    unshare: Unshare,
    flags: UnshareFlags,
    input: &mut dyn BufRead,
) -> Result<(), String> {
    unshare(UnshareFlags::NEWUSER | flags).map_err(|e| {
        format!("user namespaces are not available here (unshare: {e}); a container needs them allowed (e.g. Docker's --security-opt seccomp=unconfined, or a host with kernel.unprivileged_userns_clone=1)")
    })?;
    println!("ready");
    let _ = std::io::stdout().flush();
    let mut go = String::new();
    if input.read_line(&mut go).is_err() || go != "go\n" {
        return Err("erdma-build did not map the ids".into());
    }
    let root = rustix::process::Gid::ROOT;
    let uid = rustix::process::Uid::ROOT;
    rustix::thread::set_thread_res_gid(root, root, root)
        .and_then(|()| rustix::thread::set_thread_groups(&[]))
        .and_then(|()| rustix::thread::set_thread_res_uid(uid, uid, uid))
        .map_err(|e| format!("becoming the namespace's root: {e}"))
}

/// What a command did in the sandbox.
#[derive(Debug)]
pub struct Ran {
    /// The command's exit status (a signal `N` as 128 + N).
    pub status: i32,
    /// Its standard output and error, interleaved, the last `KEEP_OUTPUT` bytes.
    pub output: Vec<u8>,
}

/// Runs `argv` (a path inside the root and its arguments) with exactly `env` in a sandbox over
/// `root`, whose files belong to the namespace ids `map` gives.
pub fn run(
    root: &Path,
    map: &IdMap,
    argv: &[&str],
    env: &[(&str, &str)],
) -> Result<Ran, SandboxError> {
    let exe = std::env::current_exe().map_err(SandboxError::setup("finding erdma-build itself"))?;
    let mut cmd = Command::new(exe);
    cmd.arg(HELPER).arg(root);
    for (k, v) in env {
        cmd.arg("--env").arg(format!("{k}={v}"));
    }
    cmd.arg("--").args(argv);
    let mut child = cmd
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(SandboxError::setup("starting the sandbox helper"))?;
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut err = child.stderr.take().expect("piped");
    let mut line = String::new();
    let _ = out.read_line(&mut line);
    if line != "ready\n" {
        let _ = child.kill();
        let _ = child.wait();
        let mut why = String::new();
        let _ = err.read_to_string(&mut why);
        return Err(SandboxError::said(why.trim()));
    }
    if let Err(e) = map.write(child.id()) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    let mut stdin = child.stdin.take().expect("piped");
    let _ = stdin.write_all(b"go\n");
    drop(stdin);
    // The helper's own errors come on stderr; the command's output, both streams, on stdout.
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let mut output = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match out.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                output.extend_from_slice(&buf[..n]);
                if output.len() > 2 * KEEP_OUTPUT {
                    output.drain(..output.len() - KEEP_OUTPUT);
                }
            }
        }
    }
    if output.len() > KEEP_OUTPUT {
        output.drain(..output.len() - KEEP_OUTPUT);
    }
    let status = child.wait().map_err(SandboxError::setup("waiting for the sandbox"))?;
    let own = err_reader.join().unwrap_or_default();
    let code = match status.code() {
        Some(c) => c,
        None => 128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0),
    };
    if code == OWN_FAILURE && !own.is_empty() {
        return Err(SandboxError::said(String::from_utf8_lossy(&own).trim()));
    }
    Ok(Ran { status: code, output })
}

/// `ROOT [--env K=V]… -- ARGV…` as the helper and init take them.
struct Args {
    root: PathBuf,
    env: Vec<(String, String)>,
    argv: Vec<OsString>,
}

fn parse(args: &[OsString]) -> Result<Args, String> {
    let mut it = args.iter();
    let root = PathBuf::from(it.next().ok_or("no root")?);
    let mut env = Vec::new();
    loop {
        match it.next().and_then(|a| a.to_str()) {
            Some("--env") => {
                let kv = it.next().and_then(|a| a.to_str()).ok_or("--env without K=V")?;
                let (k, v) = kv.split_once('=').ok_or("--env without K=V")?;
                env.push((k.to_string(), v.to_string()));
            }
            Some("--") => break,
            _ => return Err("expected --env or --".into()),
        }
    }
    let argv: Vec<OsString> = it.cloned().collect();
    if argv.is_empty() {
        return Err("no command".into());
    }
    Ok(Args { root, env, argv })
}

fn own_failure(what: &str, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("{what}: {e}");
    ExitCode::from(OWN_FAILURE as u8)
}

/// The helper: new namespaces, wait for the id maps, become the namespace's root, start
/// PID 1 and pass its exit status on.
pub fn helper_main(args: &[OsString], unshare: Unshare) -> ExitCode {
    if let Err(e) = parse(args) {
        return own_failure("sandbox helper", e);
    }
    let flags = UnshareFlags::NEWNS
        | UnshareFlags::NEWPID
        | UnshareFlags::NEWNET
        | UnshareFlags::NEWIPC
        | UnshareFlags::NEWUTS;
    if let Err(e) = become_namespace_root(unshare, flags, &mut std::io::stdin().lock()) {
        return own_failure("sandbox helper", e);
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return own_failure("finding erdma-build itself", e),
    };
    // stdout is the command's output (init sends its stderr there too); stderr is init's own.
    let status = Command::new(exe).arg(INIT).args(args).stdin(Stdio::null()).status();
    match status {
        Ok(s) => match s.code() {
            Some(c) => ExitCode::from(c as u8),
            None => ExitCode::from(
                (128 + std::os::unix::process::ExitStatusExt::signal(&s).unwrap_or(0)) as u8,
            ),
        },
        Err(e) => own_failure("starting the sandbox's init", e),
    }
}

/// The devices a script may use, bound from the host's `/dev` (character devices that give
/// nothing of the host away).
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// PID 1 of the sandbox: mount `/proc` and `/dev`, make the tree the root, execute the command
/// with only the environment given.
pub fn init_main(args: &[OsString]) -> ExitCode {
    let a = match parse(args) {
        Ok(a) => a,
        Err(e) => return own_failure("sandbox init", e),
    };
    if let Err(e) = enter(&a.root) {
        return own_failure("making the sandbox's root", e);
    }
    // The command's errors go with its output, in order; init's own stay on stderr.
    let merged: Stdio = match std::os::fd::AsFd::as_fd(&std::io::stdout()).try_clone_to_owned() {
        Ok(fd) => fd.into(),
        Err(e) => return own_failure("sandbox init", e),
    };
    let e = Command::new(&a.argv[0])
        .args(&a.argv[1..])
        .stderr(merged)
        .env_clear()
        .envs(a.env.iter().map(|(k, v)| (k, v)))
        .current_dir("/")
        .exec();
    let name = a.argv[0].to_string_lossy().into_owned();
    if e.raw_os_error() == Some(8) {
        // ENOEXEC: a binary of another architecture with no binfmt handler for it.
        return own_failure(
            &format!("running the image's {name}"),
            "it is built for another architecture; register qemu-user-static's binfmt handlers to run it",
        );
    }
    own_failure(&format!("running the image's {name}"), e)
}

fn enter(root: &Path) -> Result<(), String> {
    use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};
    let at = |what: &str, e: rustix::io::Errno| format!("{what}: {e}");
    rustix::mount::mount_change("/", MountPropagationFlags::REC | MountPropagationFlags::PRIVATE)
        .map_err(|e| at("making the mounts private", e))?;
    rustix::mount::mount_bind_recursive(root, root).map_err(|e| at("binding the root", e))?;
    let quiet = MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
    // Without /proc (a container whose /proc is partly masked refuses a new one) scripts still
    // run; most never look.
    if root.join("proc").is_dir() {
        let _ = rustix::mount::mount("proc", root.join("proc"), "proc", quiet, None);
    }
    let dev = root.join("dev");
    if dev.is_dir() {
        rustix::mount::mount(
            "tmpfs",
            &dev,
            "tmpfs",
            MountFlags::NOSUID | MountFlags::NOEXEC,
            Some(c"mode=755"),
        )
        .map_err(|e| at("mounting /dev", e))?;
        for d in DEVICES {
            let target = dev.join(d);
            std::fs::File::create(&target).map_err(|e| format!("creating /dev/{d}: {e}"))?;
            rustix::mount::mount_bind(Path::new("/dev").join(d), &target)
                .map_err(|e| at(&format!("binding /dev/{d}"), e))?;
        }
        for (name, target) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            std::os::unix::fs::symlink(target, dev.join(name))
                .map_err(|e| format!("creating /dev/{name}: {e}"))?;
        }
        let shm = dev.join("shm");
        std::fs::create_dir(&shm).map_err(|e| format!("creating /dev/shm: {e}"))?;
        rustix::mount::mount(
            "tmpfs",
            &shm,
            "tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV,
            Some(c"mode=1777"),
        )
        .map_err(|e| at("mounting /dev/shm", e))?;
    }
    rustix::process::chdir(root).map_err(|e| at("entering the root", e))?;
    rustix::process::pivot_root(".", ".").map_err(|e| at("pivot_root", e))?;
    rustix::mount::unmount(".", UnmountFlags::DETACH)
        .map_err(|e| at("unmounting the host's root", e))?;
    rustix::process::chdir("/").map_err(|e| at("entering the root", e))?;
    Ok(())
}
