//! Real engines (`*_root_daemon`): a second, isolated dockerd configured by `configure docker`
//! running containers through erdma-runtime; Podman with the hooks.d file and with the CDI spec;
//! `doctor --image` proving the chain through Docker, Podman and containerd.
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{
    assert_success, bin, busybox_rootfs, have, is_root, require, text, Fixture, BUSYBOX,
};

use crate::cdi_cases::cdi_generate;
use crate::engine_cases::{read, validate_hook_like_podman};

/// A busybox image rootfs as a tar, for `docker import` / `podman import`.
fn busybox_tar(dir: &Path) -> PathBuf {
    let rootfs = busybox_rootfs(&dir.join("rootfs"));
    let tar = dir.join("rootfs.tar");
    let out =
        Command::new("tar").arg("-C").arg(&rootfs).arg("-cf").arg(&tar).arg(".").output().unwrap();
    assert_success("tar rootfs", &out);
    tar
}

/// Polls `f` until it is true or `timeout` passes.
fn wait_for(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    false
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !read(Path::new(&format!("/proc/{pid}/stat"))).contains(") Z ")
}

fn kill(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// A second dockerd of our own, isolated from the main one (scripts/setup's, which other tests
/// use): its own data root, exec root, pidfile and socket, in network and mount namespaces of
/// its own (`unshare --net --mount`), so its default bridge, iptables rules and mounts cannot
/// meet the main daemon's, and go away with it.
///
/// It runs its own containerd instead of sharing the main one: erdma-runtime is started by the
/// runc shim, which inherits the environment of the containerd that spawned it, so only a
/// containerd started by this dockerd passes `ERDMA_OCI_HOOK_CONFIG` on. dockerd 20.10 uses
/// the system containerd whenever `/run/containerd/containerd.sock` exists, so that directory
/// (and `/run/docker`) are hidden under a tmpfs in the new mount namespace.
struct Dockerd {
    dir: PathBuf,
    child: std::process::Child,
}

impl Dockerd {
    fn start(dir: &Path, daemon_json: &Path, env: (&str, &Path)) -> Dockerd {
        let log = std::fs::File::create(dir.join("dockerd.log")).unwrap();
        // In the new namespaces: the main daemons' run directories hidden, `lo` up, then
        // dockerd in the shell's place (same pid).
        let script = "set -e; for d in /run/containerd /run/docker; do mkdir -p $d; mount -t tmpfs -o mode=0711 erdma-it $d; done; \
                      ip link set lo up; exec dockerd \"$@\"";
        let child = Command::new("unshare")
            .args([
                "--net",
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                script,
                "dockerd",
            ])
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("dockerd.pid"))
            .arg("-H")
            .arg(format!("unix://{}", dir.join("docker.sock").display()))
            .arg("--config-file")
            .arg(daemon_json)
            .args(["--containerd-namespace", &format!("erdma-it-{}", std::process::id())])
            .args([
                "--containerd-plugins-namespace",
                &format!("erdma-it-{}-plugins", std::process::id()),
            ])
            .env(env.0, env.1)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start dockerd");
        let d = Dockerd { dir: dir.to_path_buf(), child };
        let up = wait_for(Duration::from_secs(60), || {
            d.docker(&["version", "--format", "{{.Server.Version}}"]).status.success()
        });
        assert!(up, "the test dockerd did not come up:\n{}", read(&dir.join("dockerd.log")));
        d
    }

    fn docker(&self, args: &[&str]) -> Output {
        Command::new("docker")
            .arg("-H")
            .arg(format!("unix://{}", self.dir.join("docker.sock").display()))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        // Ours only: the dockerd we spawned, then the containerd it spawned if it outlived it.
        let containerd = std::fs::read_to_string(self.dir.join("exec/containerd/containerd.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok());
        kill(self.child.id(), "TERM");
        let pid = self.child.id();
        if !wait_for(Duration::from_secs(30), || !pid_alive(pid)) {
            kill(pid, "KILL");
        }
        let _ = self.child.wait();
        if let Some(c) = containerd {
            if !wait_for(Duration::from_secs(10), || !pid_alive(c)) {
                kill(c, "KILL");
            }
        }
        // Mounts left under the data root would make removing it fail.
        let _ = Command::new("umount")
            .arg("-R")
            .arg("-l")
            .arg(self.dir.join("data"))
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("umount")
            .arg("-R")
            .arg("-l")
            .arg(self.dir.join("exec"))
            .stderr(Stdio::null())
            .status();
    }
}

/// Lines of `ls -l /dev/infiniband` in `out` for `node`: `crw-rw-rw- ... 231, 192 ... uverbs0`.
/// `net:[inode]` of this process's (the host's) network namespace.
fn host_netns() -> String {
    std::fs::read_link("/proc/self/ns/net").unwrap().display().to_string()
}

fn ls_line<'a>(out: &'a str, node: &str) -> Option<&'a str> {
    out.lines().find(|l| l.split_whitespace().last() == Some(node))
}

/// Nothing left behind: no container running, none left over at all.
fn assert_no_container_left(dockerd: &Dockerd) {
    let ps = dockerd.docker(&["ps", "-a", "-q"]);
    assert_success("docker ps -a", &ps);
    assert_eq!(
        text(&ps.stdout).trim(),
        "",
        "containers left: {}",
        text(&dockerd.docker(&["ps", "-a"]).stdout)
    );
}

#[test]
fn docker_runs_erdma_containers_root_daemon() {
    if !(require(is_root(), "root is needed to run dockerd")
        && require(
            have("dockerd") && have("docker") && have("containerd") && have("unshare"),
            "docker.io and containerd are needed (run scripts/setup)",
        )
        && require(
            Path::new(BUSYBOX).is_file(),
            "/bin/busybox from busybox-static is needed (run scripts/setup)",
        ))
    {
        return;
    }
    // Memlock within this machine's hard limit (no CAP_SYS_RESOURCE to raise it).
    let f = Fixture::new("two", "memlock = 4194304");
    let dir = tempfile::Builder::new().prefix("erdma-dockerd-").tempdir_in("/tmp").unwrap();
    let daemon_json = dir.path().join("daemon.json");
    let out = Command::new(bin("erdma-oci-hook"))
        .env("ERDMA_OCI_HOOK_CONFIG", &f.config_path)
        .args(["configure", "docker", "--config"])
        .arg(&daemon_json)
        .arg("--runtime-path")
        .arg(bin("erdma-runtime"))
        .output()
        .unwrap();
    assert_success("configure docker", &out);

    let dockerd =
        Dockerd::start(dir.path(), &daemon_json, ("ERDMA_OCI_HOOK_CONFIG", &f.config_path));
    let info = dockerd.docker(&["info", "--format", "{{json .Runtimes}}"]);
    assert!(
        text(&info.stdout).contains("erdma"),
        "dockerd did not load the runtime: {}",
        text(&info.stdout)
    );

    let image = format!("erdma-it/busybox:{}", std::process::id());
    let tar = busybox_tar(dir.path());
    assert_success("docker import", &dockerd.docker(&["import", tar.to_str().unwrap(), &image]));

    // Host networking: devices, env and memlock in the container.
    let script = "ls -l /dev/infiniband; echo ---; env; echo ---; ulimit -l";
    let ok = dockerd.docker(&[
        "run",
        "--rm",
        "--runtime=erdma",
        "-e",
        "ERDMA_VISIBLE_DEVICES=all",
        "--network",
        "host",
        &image,
        "sh",
        "-c",
        script,
    ]);
    assert_success(&format!("docker run --network host (log:\n{})", f.log_text()), &ok);
    let stdout = text(&ok.stdout);
    let mut parts = stdout.split("---\n");
    let (ls, env, memlock) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    for (node, major, minor) in
        [("uverbs0", "231,", "192"), ("uverbs1", "231,", "193"), ("rdma_cm", "10,", "58")]
    {
        let line = ls_line(ls, node).unwrap_or_else(|| panic!("no {node} in the container:\n{ls}"));
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert!(line.starts_with('c') && fields.windows(2).any(|w| w == [major, minor]), "{line}");
    }
    for var in [
        "NCCL_IB_HCA==erdma_0:1,erdma_1:1",
        "NCCL_DEBUG=INFO",
        "NCCL_IB_GID_INDEX=1",
        "NCCL_SOCKET_IFNAME==eth0,eth1",
        "ERDMA_VISIBLE_DEVICES=all",
    ] {
        assert!(env.lines().any(|l| l == var), "{var} missing from the container's env:\n{env}");
    }
    assert_eq!(memlock.trim(), "4096", "RLIMIT_MEMLOCK in KiB");

    // The default bridge network (`network = "any"`): the devices, memlock and NCCL settings
    // in the container's own namespace. Docker 20.10 moves the interface in only after the
    // container is created (its libnetwork-setkey hook), so NCCL_SOCKET_IFNAME is left to NCCL,
    // which picks the container's eth0 (never the host's names).
    let bridge = dockerd.docker(&[
        "run",
        "--rm",
        "--runtime=erdma",
        "-e",
        "ERDMA_VISIBLE_DEVICES=all",
        &image,
        "sh",
        "-c",
        "ls -l /dev/infiniband; echo ---; env; echo ---; ulimit -l; echo ---; readlink /proc/self/ns/net; tail -n +3 /proc/net/dev | cut -d: -f1",
    ]);
    assert_success(&format!("docker run on the bridge (log:\n{})", f.log_text()), &bridge);
    let stdout = text(&bridge.stdout);
    let parts: Vec<&str> = stdout.split("---\n").collect();
    let (ls, env, memlock, net) = (parts[0], parts[1], parts[2], parts[3]);
    for node in ["uverbs0", "uverbs1", "rdma_cm"] {
        assert!(ls_line(ls, node).is_some(), "no {node} in the bridge container:\n{ls}");
    }
    assert!(env.lines().any(|l| l == "NCCL_IB_HCA==erdma_0:1,erdma_1:1"), "{env}");
    assert!(!env.lines().any(|l| l.starts_with("NCCL_SOCKET_IFNAME=")), "{env}");
    assert_eq!(memlock.trim(), "4096", "RLIMIT_MEMLOCK in KiB");
    let mut net = net.lines();
    assert_ne!(net.next(), Some(host_netns().as_str()), "the container kept its own namespace");
    let ifaces: Vec<&str> = net.map(str::trim).collect();
    assert!(ifaces.contains(&"eth0") && ifaces.contains(&"lo"), "{ifaces:?}");
    let log = f.log_text();
    assert!(log.lines().any(|l| l.contains(" WARN ") && l.contains("rdma_cm")), "{log}");

    // `network = "require"`: the same run is refused with the host-networking message.
    f.write_config("memlock = 4194304\nnetwork = \"require\"");
    let refused = dockerd.docker(&[
        "run",
        "--rm",
        "--runtime=erdma",
        "-e",
        "ERDMA_VISIBLE_DEVICES=all",
        &image,
        "true",
    ]);
    assert!(!refused.status.success(), "a bridge-network eRDMA container started under require");
    let err = text(&refused.stderr);
    assert!(err.contains("--network host"), "no host-networking message: {err}");

    // A container that does not ask runs on the bridge through the same runtime, untouched.
    let plain = dockerd.docker(&[
        "run",
        "--rm",
        "--runtime=erdma",
        &image,
        "sh",
        "-c",
        "ls /dev/infiniband 2>&1; env",
    ]);
    assert_success("docker run (no eRDMA)", &plain);
    assert!(
        !text(&plain.stdout).contains("NCCL_") && text(&plain.stdout).contains("No such file"),
        "{}",
        text(&plain.stdout)
    );

    assert_no_container_left(&dockerd);
    drop(dockerd);
}

/// `podman` with storage, state and hooks of the test's own.
fn podman(root: &Path, hooks: &Path, args: &[&str]) -> Output {
    Command::new("podman")
        .arg("--root")
        .arg(root.join("storage"))
        .arg("--runroot")
        .arg(root.join("run"))
        .arg("--tmpdir")
        .arg(root.join("tmp"))
        .arg("--hooks-dir")
        .arg(hooks)
        .args(["--cgroup-manager", "cgroupfs", "--events-backend", "file"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A Podman storage of its own under a new temporary directory, the precreate hook `configure
/// podman` writes into its hooks directory (with the fixture's config in the hook's env: Podman
/// runs hooks with only their own), and a busybox image imported: (directory, hooks, image).
fn podman_with_hook(f: &Fixture, prefix: &str) -> (tempfile::TempDir, PathBuf, String) {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir_in("/tmp").unwrap();
    let hooks = dir.path().join("hooks.d");
    let out = Command::new(bin("erdma-oci-hook"))
        .env("ERDMA_OCI_HOOK_CONFIG", &f.config_path)
        .args(["configure", "podman", "--config"])
        .arg(&hooks)
        .output()
        .unwrap();
    assert_success("configure podman", &out);
    let file = hooks.join("erdma.json");
    let mut hook = validate_hook_like_podman(&file);
    hook["hook"]["env"] = json!([format!("ERDMA_OCI_HOOK_CONFIG={}", f.config_path.display())]);
    std::fs::write(&file, serde_json::to_vec_pretty(&hook).unwrap()).unwrap();
    let image = format!("localhost/erdma-it-busybox:{}", std::process::id());
    let tar = busybox_tar(dir.path());
    assert_success(
        "podman import",
        &podman(dir.path(), &hooks, &["import", tar.to_str().unwrap(), &image]),
    );
    (dir, hooks, image)
}

/// Root, podman and busybox, or the test is skipped with the reason.
fn podman_ready() -> bool {
    require(is_root(), "root is needed to run podman")
        && require(have("podman"), "podman is needed (apt-get install podman)")
        && require(Path::new(BUSYBOX).is_file(), "busybox-static is needed")
}

/// Removes the test's image and unmounts the overlay storage Podman leaves mounted, before the
/// directory goes.
fn podman_cleanup(dir: &Path, hooks: &Path, image: &str) {
    let _ = podman(dir, hooks, &["rmi", "-f", image]);
    let _ = Command::new("umount")
        .arg("-R")
        .arg("-l")
        .arg(dir.join("storage/overlay"))
        .stderr(Stdio::null())
        .status();
}

#[test]
fn podman_runs_the_precreate_hook_root_daemon() {
    if !podman_ready() {
        return;
    }
    let f = Fixture::new("one", "memlock = 4194304");
    let (dir, hooks, image) = podman_with_hook(&f, "erdma-podman-");
    // Podman's default nofile/nproc exceed this machine's hard limits: ask for small ones.
    let limits = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"];
    let script = "ls -l /dev/infiniband; echo ---; env; echo ---; ulimit -l";
    let mut args = vec![
        "run",
        "--rm",
        "--network",
        "host",
        "--annotation",
        "com.alibabacloud.erdma.devices=all",
    ];
    args.extend(limits);
    args.extend([image.as_str(), "sh", "-c", script]);
    let ok = podman(dir.path(), &hooks, &args);
    assert_success(&format!("podman run with the annotation (log:\n{})", f.log_text()), &ok);
    let stdout = text(&ok.stdout);
    let mut parts = stdout.split("---\n");
    let (ls, env, memlock) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    assert!(
        ls_line(ls, "uverbs0").is_some_and(|l| l.starts_with('c'))
            && ls_line(ls, "rdma_cm").is_some(),
        "{ls}"
    );
    assert!(
        env.lines().any(|l| l == "NCCL_IB_HCA==erdma_0:1")
            && env.lines().any(|l| l == "NCCL_SOCKET_IFNAME==eth0")
            && env.lines().any(|l| l == "NCCL_DEBUG=INFO"),
        "{env}"
    );
    assert_eq!(memlock.trim(), "4096");

    // Without the annotation the hook does not run: nothing added.
    let mut args = vec!["run", "--rm", "--network", "host"];
    args.extend(limits);
    args.extend([image.as_str(), "sh", "-c", "ls /dev/infiniband 2>&1; env"]);
    let plain = podman(dir.path(), &hooks, &args);
    assert_success("podman run without the annotation", &plain);
    assert!(!text(&plain.stdout).contains("NCCL_"), "{}", text(&plain.stdout));

    let ps = podman(dir.path(), &hooks, &["ps", "-a", "-q"]);
    assert_eq!(text(&ps.stdout).trim(), "");
    podman_cleanup(dir.path(), &hooks, &image);
}

/// Podman's default network through the precreate hook: Podman sets the namespace up before
/// the container is created and names it in the spec, so NCCL_SOCKET_IFNAME is read from it:
/// the container's `eth0`, on a host (an ACK node's sysfs) whose interfaces are ens5, ens6 and
/// bond0.
#[test]
fn podman_default_network_gets_its_own_interface_root_daemon() {
    if !podman_ready() {
        return;
    }
    let f = Fixture::new("rocep-ens5", "memlock = 4194304");
    let (dir, hooks, image) = podman_with_hook(&f, "erdma-podman-net-");
    let mut args = vec![
        "run",
        "--rm",
        "--annotation",
        "com.alibabacloud.erdma.devices=all",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
    ];
    let script = "ls -l /dev/infiniband; echo ---; env; echo ---; ulimit -l; echo ---; readlink /proc/self/ns/net; tail -n +3 /proc/net/dev | cut -d: -f1";
    args.extend([image.as_str(), "sh", "-c", script]);
    let ok = podman(dir.path(), &hooks, &args);
    assert_success(&format!("podman run on its default network (log:\n{})", f.log_text()), &ok);
    let stdout = text(&ok.stdout);
    let parts: Vec<&str> = stdout.split("---\n").collect();
    let (ls, env, memlock, net) = (parts[0], parts[1], parts[2], parts[3]);
    for node in ["uverbs0", "uverbs1", "rdma_cm"] {
        assert!(ls_line(ls, node).is_some_and(|l| l.starts_with('c')), "no {node}:\n{ls}");
    }
    let mut net = net.lines();
    assert_ne!(net.next(), Some(host_netns().as_str()), "the container kept its own namespace");
    let ifaces: Vec<&str> = net.map(str::trim).filter(|i| *i != "lo").collect();
    assert_eq!(ifaces, ["eth0"], "Podman's default network gives one interface");
    assert!(
        env.lines().any(|l| l == "NCCL_SOCKET_IFNAME==eth0")
            && env.lines().any(|l| l == "NCCL_IB_HCA==rocep26s0:1"),
        "{env}"
    );
    assert_eq!(memlock.trim(), "4096");
    let log = f.log_text();
    assert_eq!(
        log.lines().filter(|l| l.contains(" WARN ") && l.contains("rdma_cm")).count(),
        1,
        "{log}"
    );
    podman_cleanup(dir.path(), &hooks, &image);
}

/// Removes the CDI spec a test put into the system's CDI directory (and the directory, if the
/// test created it).
struct CdiSpecFile {
    path: PathBuf,
    created_dir: bool,
}

impl Drop for CdiSpecFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        if self.created_dir {
            let _ = std::fs::remove_dir(self.path.parent().unwrap());
        }
    }
}

/// The generated CDI spec as Podman 4.3 consumes it (`--device aliyun.com/erdma=...`, its
/// vendored container-device-interface library): accepted at the cdiVersion we chose, nodes
/// created, env set, and the device-cgroup rule (`rw`) letting the container open the nodes.
///
/// Podman 4.3 only reads `/etc/cdi` and `/var/run/cdi` (no `cdi_spec_dirs` before 4.4), so the
/// spec goes to `/var/run/cdi/erdma-it-PID.json` for the test and is removed after.
#[test]
fn podman_injects_the_cdi_spec_root_daemon() {
    if !podman_ready() {
        return;
    }
    let f = Fixture::new("two", "");
    let cdi_dir = Path::new("/var/run/cdi");
    let created_dir = !cdi_dir.exists();
    let spec = CdiSpecFile {
        path: cdi_dir.join(format!("erdma-it-{}.json", std::process::id())),
        created_dir,
    };
    let out = cdi_generate(&f, &["--output", spec.path.to_str().unwrap()]);
    assert_success("cdi generate --output", &out);

    let dir = tempfile::Builder::new().prefix("erdma-podman-cdi-").tempdir_in("/tmp").unwrap();
    let hooks = dir.path().join("no-hooks.d");
    std::fs::create_dir_all(&hooks).unwrap();
    let image = format!("localhost/erdma-it-busybox:{}", std::process::id());
    let tar = busybox_tar(dir.path());
    assert_success(
        "podman import",
        &podman(dir.path(), &hooks, &["import", tar.to_str().unwrap(), &image]),
    );
    let run = |device: &str, script: &str| {
        // MKNOD for the control node below (Podman 4 leaves it out of the default capabilities).
        podman(
            dir.path(),
            &hooks,
            &[
                "run",
                "--rm",
                "--network",
                "host",
                "--cap-add",
                "MKNOD",
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=1024:1024",
                "--device",
                device,
                &image,
                "sh",
                "-c",
                script,
            ],
        )
    };
    // Opening a fake node the cgroup allows fails with ENXIO (no driver behind 231:193); one it
    // does not allow (made in the container, 231:199) fails with EPERM.
    let script = "ls -l /dev/infiniband; echo ---; env; echo ---; cat /dev/infiniband/uverbs1 2>&1; busybox mknod /tmp/ctl c 231 199 2>&1 && cat /tmp/ctl 2>&1; true";
    let all = run("aliyun.com/erdma=all", script);
    assert_success("podman run --device aliyun.com/erdma=all", &all);
    let stdout = text(&all.stdout);
    let mut parts = stdout.split("---\n");
    let (ls, env, opens) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    for node in ["uverbs0", "uverbs1", "rdma_cm"] {
        assert!(ls_line(ls, node).is_some_and(|l| l.starts_with('c')), "no {node}:\n{ls}");
    }
    assert!(
        env.lines().any(|l| l == "NCCL_IB_HCA==erdma_0:1,erdma_1:1")
            && env.lines().any(|l| l == "NCCL_IB_GID_INDEX=1"),
        "{env}"
    );
    let mut opens = opens.lines();
    assert!(
        opens.next().is_some_and(|l| l.contains("No such device or address")),
        "uverbs1 not openable: {stdout}"
    );
    assert!(
        opens.next().is_some_and(|l| l.contains("Operation not permitted")),
        "control node not denied: {stdout}"
    );

    // One device: its node and rdma_cm, not the other's.
    let one = run("aliyun.com/erdma=erdma_0", "ls /dev/infiniband");
    assert_success("podman run --device aliyun.com/erdma=erdma_0", &one);
    assert_eq!(text(&one.stdout).split_whitespace().collect::<Vec<_>>(), ["rdma_cm", "uverbs0"]);

    podman_cleanup(dir.path(), &hooks, &image);
    drop(spec);
}

/// A Debian 12 image built by erdma-build: the offline demo (testdata's tiny Debian 12 base with
/// the real rdma-core .debs of testdata/repos/debian-demo, erdma provider included), flattened,
/// with a static busybox for a shell (the tiny base has no binaries of its own), as a tar for
/// `docker import`. `None` when erdma-build is not built (the workspace builds it).
fn erdma_built_image_tar(dir: &Path) -> Option<PathBuf> {
    let builder = Path::new(env!("CARGO_BIN_EXE_erdma-oci-hook")).with_file_name("erdma-build");
    if !builder.is_file() {
        return None;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let layout = dir.join("demo");
    let out = Command::new(&builder)
        .arg("build")
        .arg("--base")
        .arg(format!("oci:{}:latest", repo.join("testdata/images/debian12-mini").display()))
        .arg("--mirror")
        .arg(format!("file://{}", repo.join("testdata/repos/debian-demo").display()))
        .arg("--keyring")
        .arg(repo.join("testdata/repos/debian-demo/demo-key.asc"))
        .arg("--output")
        .arg(format!("oci:{}:demo", layout.display()))
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .output()
        .unwrap();
    assert_success("erdma-build build (the offline demo)", &out);
    let rootfs = dir.join("demo-rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    let blob = |d: &str| layout.join("blobs/sha256").join(d.trim_start_matches("sha256:"));
    let index: Value = serde_json::from_str(&read(&layout.join("index.json"))).unwrap();
    let manifest: Value =
        serde_json::from_str(&read(&blob(index["manifests"][0]["digest"].as_str().unwrap())))
            .unwrap();
    for l in manifest["layers"].as_array().unwrap() {
        let out = Command::new("tar")
            .arg("-xf")
            .arg(blob(l["digest"].as_str().unwrap()))
            .arg("-C")
            .arg(&rootfs)
            .arg("--exclude=.wh.*")
            .output()
            .unwrap();
        assert_success("tar -x layer", &out);
    }
    // Merged /usr: bin -> usr/bin.
    let bin_dir = rootfs.join("usr/bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::fs::copy(BUSYBOX, bin_dir.join("busybox")).unwrap();
    for a in ["sh", "ls", "env", "grep", "cat"] {
        let _ = std::os::unix::fs::symlink("busybox", bin_dir.join(a));
    }
    for d in ["proc", "sys", "dev", "tmp"] {
        std::fs::create_dir_all(rootfs.join(d)).unwrap();
    }
    let tar = dir.join("demo-rootfs.tar");
    assert_success(
        "tar demo rootfs",
        &Command::new("tar").arg("-C").arg(&rootfs).arg("-cf").arg(&tar).arg(".").output().unwrap(),
    );
    Some(tar)
}

/// `doctor --image` through real Docker (a private dockerd with erdma-runtime registered by
/// `configure docker`, the "two" fixture host with mknod'd nodes): one container per image, the
/// findings checked, nothing left behind. An image erdma-build made has the erdma provider; a
/// plain one fails naming `erdma-build build`.
#[test]
fn doctor_image_proves_the_chain_through_docker_root_daemon() {
    if !(require(is_root(), "root is needed to run dockerd")
        && require(
            have("dockerd") && have("docker") && have("containerd") && have("unshare"),
            "docker.io and containerd are needed (run scripts/setup)",
        )
        && require(
            Path::new(BUSYBOX).is_file(),
            "/bin/busybox from busybox-static is needed (run scripts/setup)",
        ))
    {
        return;
    }
    let f = Fixture::new("two", "memlock = 4194304");
    let dir = tempfile::Builder::new().prefix("erdma-doctor-img-").tempdir_in("/tmp").unwrap();
    let daemon_json = dir.path().join("daemon.json");
    let out = Command::new(bin("erdma-oci-hook"))
        .env("ERDMA_OCI_HOOK_CONFIG", &f.config_path)
        .args(["configure", "docker", "--config"])
        .arg(&daemon_json)
        .arg("--runtime-path")
        .arg(bin("erdma-runtime"))
        .output()
        .unwrap();
    assert_success("configure docker", &out);
    let dockerd =
        Dockerd::start(dir.path(), &daemon_json, ("ERDMA_OCI_HOOK_CONFIG", &f.config_path));
    let host = format!("unix://{}", dir.path().join("docker.sock").display());
    let doctor = |image: &str| -> Value {
        let out = f
            .command("erdma-oci-hook")
            .env("DOCKER_HOST", &host)
            .args(["doctor", "--json", "--docker-config"])
            .arg(&daemon_json)
            .args(["--image", image, "--engine", "docker", "--timeout", "60"])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("doctor --json ({e}): {}{}", text(&out.stdout), text(&out.stderr))
        })
    };
    let check = |r: &Value, id: &str| -> Value {
        r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no {id} in {r}"))
            .clone()
    };

    // A plain image: the chain works (devices, memlock, env), the image lacks the provider.
    let plain = format!("erdma-it/plain:{}", std::process::id());
    assert_success(
        "docker import",
        &dockerd.docker(&["import", busybox_tar(dir.path()).to_str().unwrap(), &plain]),
    );
    let r = doctor(&plain);
    assert_eq!(check(&r, "container.start")["status"], "ok", "{r}");
    let devices = check(&r, "container.devices");
    assert_eq!(devices["status"], "ok", "{devices}");
    assert_eq!(devices["details"]["expected"], json!(["uverbs0", "uverbs1", "rdma_cm"]));
    let memlock = check(&r, "container.memlock");
    assert_eq!(
        (memlock["status"].as_str(), memlock["details"]["ulimit_l"].as_str()),
        (Some("warn"), Some("4096")),
        "{memlock}"
    );
    assert_eq!(check(&r, "container.nccl-env")["status"], "ok", "{r}");
    let provider = check(&r, "container.provider");
    assert_eq!(provider["status"], "fail");
    assert!(
        provider["hint"].as_str().unwrap().contains(&format!("erdma-build build --base {plain}")),
        "{provider}"
    );
    assert_eq!(r["ready"], false);

    // An image erdma-build made: the provider is there.
    match erdma_built_image_tar(dir.path()) {
        Some(tar) => {
            let built = format!("erdma-it/built:{}", std::process::id());
            assert_success(
                "docker import (built)",
                &dockerd.docker(&["import", tar.to_str().unwrap(), &built]),
            );
            let r = doctor(&built);
            let provider = check(&r, "container.provider");
            assert_eq!(provider["status"], "ok", "{provider}");
            assert!(
                provider["message"].as_str().unwrap().contains("liberdma-rdmav34.so"),
                "{provider}"
            );
            // ibv_devinfo is in it (ibverbs-utils) but the tiny base has no C library for it,
            // and this host's devices are fixtures: it cannot list them.
            assert_eq!(check(&r, "container.ibv_devinfo")["status"], "fail", "{r}");
            assert_eq!(check(&r, "container.devices")["status"], "ok");
        }
        // Under CI a failure; locally a skip note.
        None => {
            require(false, "erdma-build is built next to erdma-oci-hook (cargo build --workspace)");
        }
    }

    // An engine without the runtime: the start fails, with the configure hint.
    let bare = tempfile::Builder::new().prefix("erdma-doctor-bare-").tempdir_in("/tmp").unwrap();
    let bare_json = bare.path().join("daemon.json");
    std::fs::write(&bare_json, "{}").unwrap();
    drop(dockerd);
    let dockerd =
        Dockerd::start(bare.path(), &bare_json, ("ERDMA_OCI_HOOK_CONFIG", &f.config_path));
    assert_success(
        "docker import",
        &dockerd.docker(&["import", busybox_tar(bare.path()).to_str().unwrap(), &plain]),
    );
    let out = f
        .command("erdma-oci-hook")
        .env("DOCKER_HOST", format!("unix://{}", bare.path().join("docker.sock").display()))
        .args(["doctor", "--json", "--image", &plain])
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let start = check(&r, "container.start");
    assert_eq!(start["status"], "fail", "{start}");
    assert!(start["hint"].as_str().unwrap().contains("erdma-oci-hook configure docker"), "{start}");
    // Nothing left behind.
    let ps = dockerd.docker(&["ps", "-a", "-q"]);
    assert!(text(&ps.stdout).trim().is_empty(), "containers left: {}", text(&ps.stdout));
}

/// `doctor --image … --engine podman` through real Podman and the precreate hook `configure
/// podman` wrote. The `podman` doctor runs is a wrapper that adds this test's isolation (its own
/// storage, run root and hooks directory) and small nofile/nproc limits (Podman's defaults exceed
/// this machine's hard limits) to what doctor asks for.
#[test]
fn doctor_image_proves_the_chain_through_podman_root_daemon() {
    if !podman_ready() {
        return;
    }
    let f = Fixture::new("one", "memlock = 4194304");
    let (dir, hooks, image) = podman_with_hook(&f, "erdma-podman-doctor-");

    let real = text(&Command::new("sh").args(["-c", "command -v podman"]).output().unwrap().stdout)
        .trim()
        .to_string();
    let wrappers = dir.path().join("wrappers");
    std::fs::create_dir_all(&wrappers).unwrap();
    let common = format!(
        "--root {} --runroot {} --tmpdir {} --hooks-dir {} --cgroup-manager cgroupfs --events-backend file",
        dir.path().join("storage").display(),
        dir.path().join("run").display(),
        dir.path().join("tmp").display(),
        hooks.display()
    );
    let wrapper = wrappers.join("podman");
    std::fs::write(&wrapper, format!("#!/bin/sh\nsub=$1; shift\nif [ \"$sub\" = run ]; then exec {real} {common} run --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \"$@\"; fi\nexec {real} {common} \"$sub\" \"$@\"\n")).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", wrappers.display(), std::env::var("PATH").unwrap());
    let out = f
        .command("erdma-oci-hook")
        .env("PATH", &path)
        .args(["doctor", "--json", "--podman-hooks-dir"])
        .arg(&hooks)
        .args(["--image", &image, "--engine", "podman", "--timeout", "60"])
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("doctor --json ({e}): {}{}", text(&out.stdout), text(&out.stderr))
    });
    let check = |id: &str| -> Value {
        r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no {id} in {r}"))
            .clone()
    };
    assert_eq!(check("container.start")["status"], "ok", "{r}");
    assert!(
        check("container.start")["details"]["command"]
            .as_str()
            .unwrap()
            .contains("--annotation com.alibabacloud.erdma.devices=all"),
        "{r}"
    );
    let devices = check("container.devices");
    assert_eq!(
        (devices["status"].as_str(), devices["details"]["expected"].clone()),
        (Some("ok"), json!(["uverbs0", "rdma_cm"])),
        "{devices}"
    );
    assert_eq!(check("container.memlock")["details"]["ulimit_l"], "4096");
    assert_eq!(check("container.provider")["status"], "fail");
    assert_eq!(
        check("container.ibv_devinfo")["status"],
        "ok",
        "busybox has no ibv_devinfo: skipped"
    );
    let ps = podman(dir.path(), &hooks, &["ps", "-a", "-q"]);
    assert!(text(&ps.stdout).trim().is_empty(), "containers left: {}", text(&ps.stdout));
}

/// `doctor --image … --engine containerd` through a containerd of our own (its own root, state,
/// socket, and network and mount namespaces; the CRI plugin off: no kubelet here) with
/// erdma-runtime registered by `configure containerd`: `ctr run --runc-binary` as a containerd
/// user runs a container, the image imported with `ctr images import`.
#[test]
fn doctor_image_proves_the_chain_through_containerd_root_daemon() {
    if !(require(is_root(), "root is needed to run containerd")
        && require(
            have("containerd") && have("ctr") && have("docker") && have("unshare"),
            "containerd and docker.io are needed (run scripts/setup)",
        )
        && require(Path::new(BUSYBOX).is_file(), "busybox-static is needed"))
    {
        return;
    }
    let f = Fixture::new("one", "memlock = 4194304");
    let dir =
        tempfile::Builder::new().prefix("erdma-containerd-doctor-").tempdir_in("/tmp").unwrap();
    let main = dir.path().join("config.toml");
    std::fs::write(&main, format!("version = 2\nroot = \"{}\"\nstate = \"{}\"\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n", dir.path().join("root").display(), dir.path().join("state").display())).unwrap();
    let out = Command::new(bin("erdma-oci-hook"))
        .env("ERDMA_OCI_HOOK_CONFIG", &f.config_path)
        .args(["configure", "containerd", "--config"])
        .arg(&main)
        .arg("--runtime-path")
        .arg(bin("erdma-runtime"))
        .output()
        .unwrap();
    assert_success("configure containerd", &out);
    let sock = dir.path().join("containerd.sock");
    let log = std::fs::File::create(dir.path().join("containerd.log")).unwrap();
    let mut child = Command::new("unshare")
        .args([
            "--net",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            "ip link set lo up; exec containerd \"$@\"",
            "containerd",
            "--config",
        ])
        .arg(&main)
        .arg("--address")
        .arg(&sock)
        .env("ERDMA_OCI_HOOK_CONFIG", &f.config_path)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let ctr = |args: &[&str]| {
        Command::new("ctr")
            .arg("--address")
            .arg(&sock)
            .args(["-n", "erdma-it"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let up = wait_for(Duration::from_secs(30), || ctr(&["version"]).status.success());
    assert!(up, "containerd did not come up:\n{}", read(&dir.path().join("containerd.log")));
    // The image, as `docker save` writes it, imported into our containerd.
    let name = format!("erdma-it/ctr-doctor:{}", std::process::id());
    assert_success(
        "docker import",
        &Command::new("docker")
            .args(["import", busybox_tar(dir.path()).to_str().unwrap(), &name])
            .output()
            .unwrap(),
    );
    let archive = dir.path().join("image.tar");
    assert_success(
        "docker save",
        &Command::new("docker")
            .args(["save", "-o", archive.to_str().unwrap(), &name])
            .output()
            .unwrap(),
    );
    let _ = Command::new("docker").args(["rmi", "-f", &name]).output();
    assert_success("ctr images import", &ctr(&["images", "import", archive.to_str().unwrap()]));
    let image = format!("docker.io/{name}");
    let out = f
        .command("erdma-oci-hook")
        .env("CONTAINERD_ADDRESS", &sock)
        .env("CONTAINERD_NAMESPACE", "erdma-it")
        .args(["doctor", "--json", "--containerd-config"])
        .arg(&main)
        .args(["--image", &image, "--engine", "containerd", "--timeout", "60"])
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("doctor --json ({e}): {}{}", text(&out.stdout), text(&out.stderr))
    });
    let check = |id: &str| -> Value {
        r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap_or_else(|| panic!("no {id} in {r}"))
            .clone()
    };
    let start = check("container.start");
    assert_eq!(
        start["status"],
        "ok",
        "{start}\ncontainerd log:\n{}",
        read(&dir.path().join("containerd.log"))
    );
    assert!(
        start["details"]["command"]
            .as_str()
            .unwrap()
            .contains(&format!("--runc-binary {}", bin("erdma-runtime").display())),
        "{start}"
    );
    assert_eq!(check("container.devices")["status"], "ok", "{r}");
    assert_eq!(check("container.memlock")["details"]["ulimit_l"], "4096");
    assert_eq!(check("container.nccl-env")["status"], "ok", "{r}");
    assert_eq!(check("container.provider")["status"], "fail");
    let left = ctr(&["containers", "list", "-q"]);
    assert!(text(&left.stdout).trim().is_empty(), "containers left: {}", text(&left.stdout));
    kill(child.id(), "TERM");
    let pid = child.id();
    if !wait_for(Duration::from_secs(20), || !pid_alive(pid)) {
        kill(pid, "KILL");
    }
    let _ = child.wait();
}
