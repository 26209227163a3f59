//! Which container engines a host has, told by what is there rather than by their config files
//! (a fresh Docker install has no `/etc/docker/daemon.json`): the engine's programs on PATH and
//! its API socket, and its version, read the way its own CLI reports it. The version decides
//! which eRDMA path fits (CDI needs Docker 25, containerd 1.7, CRI-O 1.23, Podman 4.1).
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Serialize;

use super::Engine;

/// Where to look: the PATH to search and the root the engines' sockets are under (`/` on a
/// host; a temporary tree in tests).
#[derive(Debug, Clone)]
pub struct Probe {
    pub path: OsString,
    pub root: PathBuf,
    /// How long a version command may take (a daemon that hangs must not hang `doctor`).
    pub timeout: Duration,
}

impl Default for Probe {
    fn default() -> Probe {
        Probe {
            path: std::env::var_os("PATH").unwrap_or_default(),
            root: PathBuf::from("/"),
            timeout: Duration::from_secs(5),
        }
    }
}

/// What was found of one engine.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Found {
    pub engine: Engine,
    /// Its programs found on PATH (`dockerd`, `docker`).
    pub programs: Vec<PathBuf>,
    /// Its API socket, when it exists (the daemon is, or was, running).
    pub socket: Option<PathBuf>,
    /// `25.0.3`, `1.7.24`, as the engine reports it; `None` when no version command answered.
    pub version: Option<String>,
}

impl Engine {
    /// The engine's programs, the daemon first.
    pub fn programs(self) -> &'static [&'static str] {
        match self {
            Engine::Docker => &["dockerd", "docker"],
            Engine::Containerd => &["containerd", "ctr"],
            Engine::Crio => &["crio"],
            Engine::Podman => &["podman"],
        }
    }

    /// The API sockets the engine's packages use.
    pub fn sockets(self) -> &'static [&'static str] {
        match self {
            Engine::Docker => &["run/docker.sock", "var/run/docker.sock"],
            Engine::Containerd => &["run/containerd/containerd.sock"],
            Engine::Crio => &["run/crio/crio.sock", "var/run/crio/crio.sock"],
            Engine::Podman => &["run/podman/podman.sock"],
        }
    }

    /// The first version with CDI device injection: Docker 25 (`--device vendor/class=name`),
    /// containerd 1.7 (`enable_cdi`), CRI-O 1.23, Podman 4.1.
    pub fn cdi_since(self) -> (u32, u32) {
        match self {
            Engine::Docker => (25, 0),
            Engine::Containerd => (1, 7),
            Engine::Crio => (1, 23),
            Engine::Podman => (4, 1),
        }
    }
}

/// Finds `name` on `path`.
pub fn which(path: &OsString, name: impl AsRef<Path>) -> Option<PathBuf> {
    std::env::split_paths(path).map(|d| d.join(name.as_ref())).find(|p| p.is_file())
}

/// Looks for `engine` on this host: `None` when nothing of it is there.
pub fn detect(engine: Engine, probe: &Probe) -> Option<Found> {
    let programs: Vec<PathBuf> =
        engine.programs().iter().filter_map(|p| which(&probe.path, p)).collect();
    let socket = engine.sockets().iter().map(|s| probe.root.join(s)).find(|s| is_socket(s));
    if programs.is_empty() && socket.is_none() {
        return None;
    }
    let version = version(engine, &programs, probe);
    Some(Found { engine, programs, socket, version })
}

fn is_socket(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket())
}

/// The engine's version from its own CLI: the daemon's when it answers (`docker version`),
/// else the program's (`dockerd --version`, `containerd --version`, `crio --version`,
/// `podman --version`).
fn version(engine: Engine, programs: &[PathBuf], probe: &Probe) -> Option<String> {
    let find = |name: &str| programs.iter().find(|p| p.file_name().is_some_and(|f| f == name));
    let attempts: Vec<(&PathBuf, Vec<&str>)> = match engine {
        Engine::Docker => [
            find("docker").map(|p| (p, vec!["version", "--format", "{{.Server.Version}}"])),
            find("dockerd").map(|p| (p, vec!["--version"])),
            find("docker").map(|p| (p, vec!["--version"])),
        ]
        .into_iter()
        .flatten()
        .collect(),
        Engine::Containerd => {
            find("containerd").map(|p| (p, vec!["--version"])).into_iter().collect()
        }
        Engine::Crio => find("crio").map(|p| (p, vec!["--version"])).into_iter().collect(),
        Engine::Podman => find("podman").map(|p| (p, vec!["--version"])).into_iter().collect(),
    };
    attempts
        .into_iter()
        .find_map(|(program, args)| run(program, &args, probe).and_then(|out| parse_version(&out)))
}

/// Runs `program args` with `PATH` from the probe, giving up after its timeout: its stdout
/// when it succeeded.
fn run(program: &Path, args: &[&str], probe: &Probe) -> Option<String> {
    let out =
        output_within(Command::new(program).args(args).env("PATH", &probe.path), probe.timeout)
            .ok()??;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `cmd` (stdin closed, stdout and stderr collected) for at most `timeout`: `Ok(None)` when
/// it ran past it and was killed. Both pipes are drained while it runs, so a command that
/// prints much cannot block on them.
pub fn output_within(
    cmd: &mut Command,
    timeout: Duration,
) -> std::io::Result<Option<std::process::Output>> {
    let mut child =
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let start = std::time::Instant::now();
    let drain = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = r.read_to_end(&mut b);
            b
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped")));
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    Ok(status.map(|status| std::process::Output { status, stdout, stderr }))
}

/// The first dotted version in an engine's version output: `Docker version 20.10.24+dfsg1,
/// build 297e128` → `20.10.24`, `containerd github.com/containerd/containerd 1.6.20~ds1 …` →
/// `1.6.20`, `crio version 1.28.1`, `Version:  1.28.1` → `1.28.1`, `podman version 4.3.1`.
pub fn parse_version(out: &str) -> Option<String> {
    out.split(|c: char| c.is_whitespace() || c == ',').find_map(|w| {
        let w = w.trim_start_matches('v');
        let end = w.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(w.len());
        let v = w[..end].trim_end_matches('.');
        (v.contains('.')
            && v.split('.').all(|p| !p.is_empty() && p.len() <= 6)
            && v.starts_with(|c: char| c.is_ascii_digit()))
        .then(|| v.to_string())
    })
}

/// `major.minor` of a version string.
pub fn major_minor(v: &str) -> Option<(u32, u32)> {
    let mut it = v.split('.');
    Some((it.next()?.parse().ok()?, it.next().unwrap_or("0").parse().ok()?))
}

/// Whether `found`'s version has CDI (`None`: the version is unknown).
pub fn has_cdi(found: &Found) -> Option<bool> {
    found.version.as_deref().and_then(major_minor).map(|v| v >= found.engine.cdi_since())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_as_the_engines_print_them() {
        // Debian 12's docker.io, containerd, podman; CRI-O 1.28's two output styles.
        assert_eq!(
            parse_version("Docker version 20.10.24+dfsg1, build 297e128\n").as_deref(),
            Some("20.10.24")
        );
        assert_eq!(parse_version("20.10.24+dfsg1\n").as_deref(), Some("20.10.24"));
        assert_eq!(
            parse_version(
                "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1\n"
            )
            .as_deref(),
            Some("1.6.20")
        );
        assert_eq!(parse_version("podman version 4.3.1\n").as_deref(), Some("4.3.1"));
        assert_eq!(parse_version("crio version 1.28.1\n").as_deref(), Some("1.28.1"));
        assert_eq!(
            parse_version("Version:        1.28.1\nGitCommit: abc\n").as_deref(),
            Some("1.28.1")
        );
        assert_eq!(
            parse_version("containerd containerd.io v1.7.24 88bf19b2\n").as_deref(),
            Some("1.7.24")
        );
        assert_eq!(parse_version("no version here"), None);
    }

    #[test]
    fn found_by_programs_or_socket_and_cdi_by_version() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let script = |name: &str, body: &str| {
            use std::os::unix::fs::PermissionsExt;
            let p = bin.join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        let probe = Probe {
            path: bin.clone().into_os_string(),
            root: dir.path().to_path_buf(),
            timeout: Duration::from_secs(5),
        };
        assert_eq!(detect(Engine::Docker, &probe), None, "nothing of Docker: not installed");
        // A daemon that does not answer: the version comes from dockerd --version.
        script(
            "docker",
            "[ \"$1\" = version ] && exit 1; echo 'Docker version 20.10.24+dfsg1, build 297e128'",
        );
        script("dockerd", "echo 'Docker version 20.10.24+dfsg1, build 297e128'");
        let d = detect(Engine::Docker, &probe).unwrap();
        assert_eq!(
            (d.version.as_deref(), d.programs.len(), has_cdi(&d)),
            (Some("20.10.24"), 2, Some(false))
        );
        script("docker", "[ \"$1\" = version ] && echo 25.0.3 && exit 0; echo 'Docker version 25.0.3, build 4debf41'");
        assert_eq!(has_cdi(&detect(Engine::Docker, &probe).unwrap()), Some(true));
        // A hanging version command is given up on.
        script("podman", "sleep 30");
        let quick = Probe { timeout: Duration::from_millis(300), ..probe.clone() };
        let t = std::time::Instant::now();
        let p = detect(Engine::Podman, &quick).unwrap();
        assert!(p.version.is_none() && t.elapsed() < Duration::from_secs(5));
        // Only a socket (a daemon whose CLI is elsewhere): installed, version unknown.
        std::fs::create_dir_all(dir.path().join("run/containerd")).unwrap();
        let _l = std::os::unix::net::UnixListener::bind(
            dir.path().join("run/containerd/containerd.sock"),
        )
        .unwrap();
        let c = detect(Engine::Containerd, &probe).unwrap();
        assert!(c.programs.is_empty() && c.socket.is_some() && c.version.is_none());
    }
}
