//! A private containerd 1.7 driven through the CRI API as kubelet drives it, with NRI and CDI
//! on: the harness for the Kubernetes cases (`cri_cases`, and the NRI plugin's).
//!
//! Debian 12's containerd is 1.6, which has no NRI, so scripts/setup unpacks Debian 13's 1.7
//! into `/opt/erdma-ci/containerd-1.7` (`ERDMA_CI_CONTAINERD17_DIR` points elsewhere). Each
//! [`Containerd17`] is a daemon of its own, beside the system one that dockerd uses:
//! - its root, state, socket, NRI socket, CDI spec directory, runc state (`Root`), log
//!   directories and CNI directories (empty: pods use the host's network) in one temp dir;
//! - a mount namespace of its own (`unshare --mount`), so the overlay and shm mounts it and its
//!   shims make never reach the host's table and go away with them;
//! - pods under a cgroup parent of its own (`/erdma-cri-…/pod<uid>`, cgroupfs as kubelet's
//!   `cgroupDriver: cgroupfs`), removed on drop;
//! - two images built here from Debian's static busybox and imported with 1.7's `ctr` into
//!   `k8s.io`: [`PAUSE_IMAGE`] (the CRI `sandbox_image`, so nothing is ever pulled) and
//!   [`BUSYBOX_IMAGE`].
//!
//! Debugging: `ERDMA_CRI_LOG_LEVEL=debug` (containerd's log level; the log's tail is printed
//! when a test panics with a harness alive) and `ERDMA_CRI_RUNC=PATH` (the `runc` handler's
//! `BinaryName`, e.g. a script running `runc --debug` with its own `--log`).
//!
//! Calls are synchronous (a runtime of the harness's own runs them, also when called from a
//! test's async code) and bounded by [`RPC_TIMEOUT`]; a failure panics with the CRI status and
//! the tail of containerd's log. [`Containerd17::client`] gives the raw CRI client for anything
//! else. Drop stops and removes every pod, stops containerd and whatever shim or runc container
//! outlived it, and removes the cgroups and the temp dir.
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tonic::transport::Channel;

use super::{assert_success, busybox_rootfs, have, is_root, require, text, BUSYBOX};

/// The CRI API v1 (a subset: `proto/cri_v1.proto`).
pub mod pb {
    #![allow(clippy::all)]
    tonic::include_proto!("runtime.v1");
}

pub type RuntimeClient = pb::runtime_service_client::RuntimeServiceClient<Channel>;

/// Where scripts/setup unpacks containerd 1.7 (its `usr/bin` holds containerd, the shims, ctr).
pub const DEFAULT_DIR: &str = "/opt/erdma-ci/containerd-1.7";
/// The sandbox ("pause") image: busybox's `sleep` as PID 1 (containerd kills it with SIGKILL).
pub const PAUSE_IMAGE: &str = "localhost/erdma-it/pause:1";
/// The test image: Debian's static busybox with the applets the cases use, `sh` as its command.
pub const BUSYBOX_IMAGE: &str = "localhost/erdma-it/busybox:1";
/// Debian's CNI plugins, for [`Options::cni_loopback`].
pub const CNI_BIN: &str = "/usr/lib/cni";
/// The CRI runtime handler [`Options::erdma_runtime`] registers.
pub const ERDMA_HANDLER: &str = "erdma";
/// The longest any one CRI call may take.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(30);
/// How long containerd gets to answer `Version` and open its NRI socket.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// The applets the test image has, beyond [`super::APPLETS`].
const MORE_APPLETS: &[&str] =
    &["cut", "tail", "wc", "uname", "hostname", "dd", "printf", "seq", "xargs"];
/// The namespace the CRI plugin keeps its images and containers in.
const NAMESPACE: &str = "k8s.io";

/// containerd 1.7's `usr/bin`: `$ERDMA_CI_CONTAINERD17_DIR/usr/bin` or [`DEFAULT_DIR`]'s.
pub fn bin_dir() -> PathBuf {
    let dir = std::env::var_os("ERDMA_CI_CONTAINERD17_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR));
    dir.join("usr/bin")
}

/// `containerd --version`'s version (`1.7.24~ds1`), when that binary is there and runs.
pub fn version() -> Option<String> {
    let out = Command::new(bin_dir().join("containerd"))
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    // "containerd github.com/containerd/containerd 1.7.24~ds1 1.7.24~ds1-6+deb13u1"
    text(&out.stdout).split_whitespace().nth(2).map(str::to_string)
}

/// Root, runc, busybox, unshare and tar, and containerd 1.7 where scripts/setup puts it (see
/// [`super::require`]: fails under `CI`, skips otherwise).
pub fn require_containerd17() -> bool {
    require(is_root(), "root is needed to run containerd")
        && require(
            have("runc") && have("unshare") && have("tar") && have("sha256sum"),
            "runc, unshare, tar and sha256sum are needed (run scripts/setup)",
        )
        && require(
            Path::new(BUSYBOX).is_file(),
            "/bin/busybox from busybox-static is needed (run scripts/setup)",
        )
        && require(
            version().is_some_and(|v| v.starts_with("1.7.")),
            &format!(
                "containerd 1.7 is needed in {} (run scripts/setup; found {:?})",
                bin_dir().display(),
                version()
            ),
        )
}

/// What a harness is started with.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// A second CRI runtime handler, [`ERDMA_HANDLER`]: the `runc` handler's options with this
    /// `BinaryName` (erdma-runtime), and `com.alibabacloud.erdma.devices` let through as pod
    /// and container annotation: what `erdma-oci-hook configure containerd` registers.
    pub erdma_runtime: Option<PathBuf>,
    /// Variables set for containerd, and so for its shims and the runtimes they run (e.g.
    /// `ERDMA_OCI_HOOK_CONFIG` for erdma-runtime).
    pub env: Vec<(String, String)>,
    /// containerd's `[debug] level` (default `$ERDMA_CRI_LOG_LEVEL`, else `info`).
    pub log_level: Option<String>,
    /// CNI for pods without host networking: Debian's plugins (`containernetworking-plugins`,
    /// /usr/lib/cni), a `ptp` network on a private /24 per harness, so such a pod gets a network
    /// namespace of its own, as a pod on a cluster network has (without any route out).
    pub cni_loopback: bool,
}

/// A device for [`Container::devices`]: CRI's `Device`, as kubelet passes a device plugin's
/// `DeviceSpec`.
#[derive(Debug, Clone)]
pub struct Device {
    pub host_path: PathBuf,
    pub container_path: String,
    /// Cgroup permissions, `r`, `w`, `m` (e.g. `rw`).
    pub permissions: String,
}

/// What [`Containerd17::create_and_start`] creates.
#[derive(Debug, Clone, Default)]
pub struct Container {
    /// The container's name in its pod (`ContainerMetadata.name`; default `c`).
    pub name: String,
    /// The image (default [`BUSYBOX_IMAGE`]).
    pub image: String,
    /// The process: CRI's `command` (the image's entrypoint replaced, as a pod's `command:`);
    /// default `sleep 3600`.
    pub args: Vec<String>,
    pub envs: Vec<(String, String)>,
    pub devices: Vec<Device>,
    pub annotations: Vec<(String, String)>,
    /// Fully qualified CDI device names (`vendor.com/class=name`), in CRI's `CDI_devices` as
    /// kubelet passes a device plugin's `CDIDevice`s.
    pub cdi_devices: Vec<String>,
}

/// A pod of ours: what CreateContainer needs again and what Drop must remove.
struct Pod {
    id: String,
    config: pb::PodSandboxConfig,
}

/// A private containerd 1.7 with CRI, NRI and CDI on (see the module docs).
pub struct Containerd17 {
    /// `containerd --version`'s version.
    pub version: String,
    dir: tempfile::TempDir,
    child: Option<Child>,
    rt: Option<tokio::runtime::Runtime>,
    client: Option<RuntimeClient>,
    /// `/erdma-cri-PID-N`: the cgroup every pod's parent lives under.
    cgroup_root: String,
    /// This harness's number in the process.
    seq: usize,
    pods: Mutex<Vec<Pod>>,
    counter: AtomicUsize,
}

impl Containerd17 {
    /// Starts the daemon and imports the images; panics (with the log's tail) if it is not
    /// serving CRI within [`STARTUP_TIMEOUT`]. Call [`require_containerd17`] first.
    pub fn start(opts: Options) -> Containerd17 {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let started = Instant::now();
        let version =
            version().unwrap_or_else(|| panic!("no containerd in {}", bin_dir().display()));
        // Short paths: unix socket paths must fit in 108 bytes.
        let dir = tempfile::Builder::new().prefix("erdma-cri-").tempdir_in("/tmp").unwrap();
        for d in [
            "root",
            "state",
            "cdi",
            "nri/plugins",
            "nri/conf.d",
            "cni/bin",
            "cni/net.d",
            "runc",
            "opt",
            "pods",
            "images",
        ] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let cgroup_root = format!("/erdma-cri-{}-{seq}", std::process::id());
        let mut h = Containerd17 {
            version,
            dir,
            child: None,
            rt: Some(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap(),
            ),
            client: None,
            cgroup_root,
            seq,
            pods: Mutex::new(Vec::new()),
            counter: AtomicUsize::new(0),
        };
        std::fs::write(h.config_path(), h.config_toml(&opts)).unwrap();
        if opts.cni_loopback {
            // containerd wants an address for the pod's eth0, so loopback alone is not enough:
            // a point-to-point veth (removed by CNI DEL) with an address from a private range,
            // no masquerading, no route beyond the host end.
            let net = json!({"cniVersion": "1.0.0", "name": "erdma-it", "plugins": [{
                "type": "ptp", "ipMasq": false, "mtu": 1500,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": format!("10.254.{}.0/24", 100 + seq % 100)}]], "dataDir": h.dir.path().join("cni/ipam")}
            }]});
            std::fs::write(
                h.dir.path().join("cni/net.d/10-erdma-it.conflist"),
                serde_json::to_vec_pretty(&net).unwrap(),
            )
            .unwrap();
        }

        let log = std::fs::File::create(h.log_path()).unwrap();
        let path = format!("{}:{}", bin_dir().display(), std::env::var("PATH").unwrap_or_default());
        // 1.7's own shim first on PATH: containerd looks `containerd-shim-runc-v2` up there
        // before beside itself, and Debian 12's 1.6 shim is in /usr/bin.
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "--"])
            .arg(bin_dir().join("containerd"))
            .arg("--config")
            .arg(h.config_path())
            .env("PATH", path)
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        h.child = Some(cmd.spawn().expect("spawn unshare containerd"));

        // Serving CRI: Version answers (the CRI plugin registers its service only once loaded).
        let sock = h.socket();
        let deadline = started + STARTUP_TIMEOUT;
        let client = loop {
            if let Some(status) = h.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("containerd exited during start-up ({status})\n{}", h.log_section());
            }
            if Instant::now() > deadline {
                panic!(
                    "containerd {} did not serve CRI on {} within {STARTUP_TIMEOUT:?}\n{}",
                    h.version,
                    sock.display(),
                    h.log_section()
                );
            }
            if sock.exists() {
                let s = sock.clone();
                let answer = h.block(async move {
                    let channel = tokio::time::timeout(
                        Duration::from_secs(2),
                        erdma_kube::kubelet::unix_channel(&s),
                    )
                    .await
                    .ok()?
                    .ok()?;
                    let mut c = RuntimeClient::new(channel);
                    let v = tokio::time::timeout(
                        Duration::from_secs(2),
                        c.version(pb::VersionRequest { version: "v1".into() }),
                    )
                    .await
                    .ok()?
                    .ok()?;
                    Some((c, v.into_inner()))
                });
                if let Some((c, v)) = answer {
                    assert_eq!(v.runtime_api_version, "v1", "{v:?}");
                    break c;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        h.client = Some(client);
        while !h.nri_socket().exists() {
            if Instant::now() > deadline {
                panic!(
                    "containerd serves CRI but opened no NRI socket at {}\n{}",
                    h.nri_socket().display(),
                    h.log_section()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        h.import_images();
        h
    }

    /// The temp dir everything of this daemon lives in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// containerd's gRPC socket (CRI, and containerd's own API for `ctr`).
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("containerd.sock")
    }

    /// The socket NRI plugins connect to (`plugins."io.containerd.nri.v1.nri".socket_path`).
    /// Its mount namespace (`/proc/PID/ns/mnt`), with its network namespace directory (its
    /// `netns_mounts_under`, containerd's /var/run/netns) made a shared mount point in it: the
    /// pods' network namespaces (nsfs bind mounts containerd makes there) then reach a process
    /// started as a slave of this namespace, as they reach a DaemonSet's container with
    /// `mountPropagation: HostToContainer` on a systemd host, whose `/` is shared. The host's
    /// own table is not touched.
    pub fn mount_ns_sharing_netns(&self) -> PathBuf {
        let pid = self.child.as_ref().expect("containerd running").id();
        let ns = PathBuf::from(format!("/proc/{pid}/ns/mnt"));
        let dir = self.dir.path().join("state/io.containerd.grpc.v1.cri/netns");
        let script = "mkdir -p \"$1\" && mount --bind \"$1\" \"$1\" && mount --make-shared \"$1\"";
        let out = Command::new("nsenter")
            .arg(format!("--mount={}", ns.display()))
            .args(["sh", "-c", script, "sh"])
            .arg(&dir)
            .output()
            .expect("nsenter (util-linux)");
        assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
        ns
    }

    pub fn nri_socket(&self) -> PathBuf {
        self.dir.path().join("nri/nri.sock")
    }

    /// The CDI spec directory (`cdi_spec_dirs`), empty at start; specs written here are seen
    /// by the next CreateContainer.
    pub fn cdi_dir(&self) -> PathBuf {
        self.dir.path().join("cdi")
    }

    /// runc's state root of both handlers (`runc --root DIR/k8s.io list`).
    pub fn runc_root(&self) -> PathBuf {
        self.dir.path().join("runc")
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("containerd.log")
    }

    /// The last `n` lines of containerd's log.
    pub fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    fn log_section(&self) -> String {
        format!(
            "--- containerd log ({}), last lines:\n{}",
            self.log_path().display(),
            self.log_tail(40)
        )
    }

    /// The CRI client (a clone: cheap, shares the connection).
    pub fn client(&self) -> RuntimeClient {
        self.client.clone().expect("containerd is serving")
    }

    /// Runs `f` on the harness's runtime; from inside another runtime too (on a scoped thread).
    pub fn block<T: Send>(&self, f: impl Future<Output = T> + Send) -> T {
        let rt = self.rt.as_ref().expect("runtime");
        if tokio::runtime::Handle::try_current().is_err() {
            return rt.block_on(f);
        }
        std::thread::scope(|s| match s.spawn(|| rt.block_on(f)).join() {
            Ok(v) => v,
            Err(panic) => std::panic::resume_unwind(panic),
        })
    }

    /// A CRI call bounded by [`RPC_TIMEOUT`]; a timeout is `DeadlineExceeded`.
    pub fn try_rpc<T: Send>(
        &self,
        f: impl Future<Output = Result<tonic::Response<T>, tonic::Status>> + Send,
    ) -> Result<T, tonic::Status> {
        self.block(async {
            match tokio::time::timeout(RPC_TIMEOUT, f).await {
                Ok(r) => r.map(tonic::Response::into_inner),
                Err(_) => {
                    Err(tonic::Status::deadline_exceeded(format!("no answer in {RPC_TIMEOUT:?}")))
                }
            }
        })
    }

    /// [`Self::try_rpc`], panicking with the status and the log's tail.
    #[track_caller]
    pub fn rpc<T: Send>(
        &self,
        what: &str,
        f: impl Future<Output = Result<tonic::Response<T>, tonic::Status>> + Send,
    ) -> T {
        self.try_rpc(f).unwrap_or_else(|s| {
            panic!("CRI {what}: {:?}: {}\n{}", s.code(), s.message(), self.log_section())
        })
    }

    /// A pod as kubelet runs one: metadata, the `io.kubernetes.pod.*` labels, a log directory,
    /// the cgroup parent `/erdma-cri-…/pod<uid>`, namespaces (network NODE with `host_network`,
    /// else POD; pid CONTAINER; ipc POD), `annotations`, and the runtime handler (`""`: the
    /// default, runc). Returns the sandbox id. A pod without host networking needs CNI, which
    /// this harness does not set up: containerd refuses it.
    #[track_caller]
    pub fn run_pod(
        &self,
        name: &str,
        host_network: bool,
        annotations: &[(&str, &str)],
        runtime_handler: &str,
    ) -> String {
        self.try_run_pod(name, host_network, annotations, runtime_handler).unwrap_or_else(|s| {
            panic!(
                "CRI RunPodSandbox {name}: {:?}: {}\n{}",
                s.code(),
                s.message(),
                self.log_section()
            )
        })
    }

    /// [`Self::run_pod`], returning containerd's refusal (an NRI plugin's, say) instead.
    pub fn try_run_pod(
        &self,
        name: &str,
        host_network: bool,
        annotations: &[(&str, &str)],
        runtime_handler: &str,
    ) -> Result<String, tonic::Status> {
        // Unique in this process (harness, pod) and across processes (pid), shaped as a UUID.
        let uid = format!(
            "{:08x}-{:04x}-4000-8000-{:012x}",
            std::process::id(),
            self.seq,
            self.counter.fetch_add(1, Ordering::Relaxed)
        );
        let namespace = "erdma-it";
        let log_dir = self.dir.path().join("pods").join(format!("{namespace}_{name}_{uid}"));
        std::fs::create_dir_all(&log_dir).unwrap();
        let labels = HashMap::from([
            ("io.kubernetes.pod.name".to_string(), name.to_string()),
            ("io.kubernetes.pod.namespace".to_string(), namespace.to_string()),
            ("io.kubernetes.pod.uid".to_string(), uid.clone()),
        ]);
        let config = pb::PodSandboxConfig {
            metadata: Some(pb::PodSandboxMetadata {
                name: name.into(),
                uid: uid.clone(),
                namespace: namespace.into(),
                attempt: 0,
            }),
            hostname: if host_network { String::new() } else { name.into() },
            log_directory: log_dir.display().to_string(),
            labels,
            annotations: annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            linux: Some(pb::LinuxPodSandboxConfig {
                cgroup_parent: format!("{}/pod{uid}", self.cgroup_root),
                security_context: Some(pb::LinuxSandboxSecurityContext {
                    namespace_options: Some(namespaces(host_network)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let req = pb::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: runtime_handler.into(),
        };
        let mut c = self.client();
        let id = self.try_rpc(async move { c.run_pod_sandbox(req).await })?.pod_sandbox_id;
        self.pods.lock().unwrap().push(Pod { id: id.clone(), config });
        Ok(id)
    }

    /// CreateContainer then StartContainer in pod `sandbox`, as kubelet does (the pod's config
    /// passed again, the namespaces of the pod, a log path); returns the container id.
    #[track_caller]
    pub fn create_and_start(&self, sandbox: &str, c: &Container) -> String {
        self.try_create_and_start(sandbox, c).unwrap_or_else(|s| {
            panic!(
                "CRI CreateContainer/StartContainer in {sandbox}: {:?}: {}\n{}",
                s.code(),
                s.message(),
                self.log_section()
            )
        })
    }

    /// [`Self::create_and_start`], returning containerd's refusal instead.
    pub fn try_create_and_start(
        &self,
        sandbox: &str,
        c: &Container,
    ) -> Result<String, tonic::Status> {
        let sandbox_config = self
            .pods
            .lock()
            .unwrap()
            .iter()
            .find(|p| p.id == sandbox)
            .map(|p| p.config.clone())
            .unwrap_or_else(|| panic!("no pod {sandbox} of this harness"));
        let host_network = sandbox_config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .is_some_and(|n| n.network == pb::NamespaceMode::Node as i32);
        let name = if c.name.is_empty() { "c" } else { c.name.as_str() };
        let image = if c.image.is_empty() { BUSYBOX_IMAGE } else { c.image.as_str() };
        let command = if c.args.is_empty() {
            vec!["sleep".to_string(), "3600".to_string()]
        } else {
            c.args.clone()
        };
        let config = pb::ContainerConfig {
            metadata: Some(pb::ContainerMetadata { name: name.into(), attempt: 0 }),
            image: Some(pb::ImageSpec { image: image.into(), ..Default::default() }),
            command,
            envs: c
                .envs
                .iter()
                .map(|(k, v)| pb::KeyValue { key: k.clone(), value: v.clone() })
                .collect(),
            devices: c
                .devices
                .iter()
                .map(|d| pb::Device {
                    container_path: d.container_path.clone(),
                    host_path: d.host_path.display().to_string(),
                    permissions: d.permissions.clone(),
                })
                .collect(),
            labels: HashMap::from([("io.kubernetes.container.name".to_string(), name.to_string())]),
            annotations: c.annotations.iter().cloned().collect(),
            log_path: format!("{name}/0.log"),
            linux: Some(pb::LinuxContainerConfig {
                resources: Some(pb::LinuxContainerResources::default()),
                security_context: Some(pb::LinuxContainerSecurityContext {
                    namespace_options: Some(namespaces(host_network)),
                    ..Default::default()
                }),
            }),
            cdi_devices: c.cdi_devices.iter().map(|n| pb::CdiDevice { name: n.clone() }).collect(),
            ..Default::default()
        };
        let req = pb::CreateContainerRequest {
            pod_sandbox_id: sandbox.into(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        };
        let mut client = self.client();
        let id = self.try_rpc(async move { client.create_container(req).await })?.container_id;
        let mut client = self.client();
        let start = pb::StartContainerRequest { container_id: id.clone() };
        self.try_rpc(async move { client.start_container(start).await })?;
        Ok(id)
    }

    /// ExecSync `cmd` in `container` (10 s at most): (exit code, stdout, stderr).
    #[track_caller]
    pub fn exec_sync(&self, container: &str, cmd: &[&str]) -> (i32, String, String) {
        let req = pb::ExecSyncRequest {
            container_id: container.into(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout: 10,
        };
        let mut c = self.client();
        let r = self.rpc("ExecSync", async move { c.exec_sync(req).await });
        (r.exit_code, text(&r.stdout), text(&r.stderr))
    }

    /// ContainerStatus; `verbose` adds `info["info"]`, containerd's JSON with the OCI
    /// `runtimeSpec` it created the container with.
    #[track_caller]
    pub fn container_status(&self, container: &str, verbose: bool) -> pb::ContainerStatusResponse {
        let req = pb::ContainerStatusRequest { container_id: container.into(), verbose };
        let mut c = self.client();
        self.rpc("ContainerStatus", async move { c.container_status(req).await })
    }

    /// The OCI runtime spec containerd created `container` with (from the verbose status).
    #[track_caller]
    pub fn runtime_spec(&self, container: &str) -> Value {
        let status = self.container_status(container, true);
        let info = status.info.get("info").unwrap_or_else(|| {
            panic!("no info in the verbose status of {container}: {:?}", status.info.keys())
        });
        let info: Value = serde_json::from_str(info).unwrap();
        info["runtimeSpec"].clone()
    }

    /// StopContainer (`timeout` seconds before SIGKILL) then RemoveContainer.
    #[track_caller]
    pub fn stop_and_remove_container(&self, container: &str, timeout: i64) {
        let mut c = self.client();
        let req = pb::StopContainerRequest { container_id: container.into(), timeout };
        self.rpc("StopContainer", async move { c.stop_container(req).await });
        let mut c = self.client();
        let req = pb::RemoveContainerRequest { container_id: container.into() };
        self.rpc("RemoveContainer", async move { c.remove_container(req).await });
    }

    /// StopPodSandbox then RemovePodSandbox (its containers with it), as kubelet does.
    pub fn remove_pod(&self, sandbox: &str) -> Result<(), tonic::Status> {
        let mut c = self.client();
        let id = sandbox.to_string();
        self.try_rpc(async move {
            c.stop_pod_sandbox(pb::StopPodSandboxRequest { pod_sandbox_id: id }).await
        })?;
        let mut c = self.client();
        let id = sandbox.to_string();
        self.try_rpc(async move {
            c.remove_pod_sandbox(pb::RemovePodSandboxRequest { pod_sandbox_id: id }).await
        })?;
        self.pods.lock().unwrap().retain(|p| p.id != sandbox);
        Ok(())
    }

    /// `config.toml`, version 2 as containerd 1.7 reads it.
    fn config_toml(&self, opts: &Options) -> String {
        let d = |p: &str| toml_str(&self.dir.path().join(p).display().to_string());
        let runc = toml_str(
            &std::env::var("ERDMA_CRI_RUNC")
                .map(PathBuf::from)
                .unwrap_or_else(|_| which("runc"))
                .display()
                .to_string(),
        );
        let cri = "plugins.\"io.containerd.grpc.v1.cri\"";
        let mut s = format!(
            r#"version = 2
root = {root}
state = {state}
# Plugins that cannot work here, left out of the log.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = {sock}

[debug]
  level = {level}

# Where containerd installs managed "opt" content (default /opt/containerd).
[plugins."io.containerd.internal.v1.opt"]
  path = {opt}

[plugins."io.containerd.nri.v1.nri"]
  disable = false
  disable_connections = false
  socket_path = {nri_sock}
  plugin_path = {nri_plugins}
  plugin_config_path = {nri_conf}
  plugin_registration_timeout = "5s"
  plugin_request_timeout = "2s"

[{cri}]
  sandbox_image = {pause}
  enable_cdi = true
  cdi_spec_dirs = [{cdi}]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  restrict_oom_score_adj = {restrict_oom}
  # The pods' network namespaces under the CRI plugin's state directory
  # (STATE/io.containerd.grpc.v1.cri/netns) instead of /var/run/netns: none is left on the
  # host when the harness goes.
  netns_mounts_under_state_dir = true

[{cri}.cni]
  bin_dir = {cni_bin}
  conf_dir = {cni_conf}

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  BinaryName = {runc}
  Root = {runc_root}
  SystemdCgroup = false
"#,
            root = d("root"),
            state = d("state"),
            sock = toml_str(&self.socket().display().to_string()),
            level = toml_str(
                &opts
                    .log_level
                    .clone()
                    .or_else(|| std::env::var("ERDMA_CRI_LOG_LEVEL").ok())
                    .unwrap_or_else(|| "info".into())
            ),
            opt = d("opt"),
            nri_sock = toml_str(&self.nri_socket().display().to_string()),
            nri_plugins = d("nri/plugins"),
            nri_conf = d("nri/conf.d"),
            pause = toml_str(PAUSE_IMAGE),
            cdi = d("cdi"),
            cni_bin = if opts.cni_loopback { toml_str(CNI_BIN) } else { d("cni/bin") },
            cni_conf = d("cni/net.d"),
            runc_root = d("runc"),
            restrict_oom = !has_cap_sys_resource(),
        );
        if let Some(erdma) = &opts.erdma_runtime {
            let annotation = toml_str(erdma_oci_hook::request::ANNOTATION);
            s.push_str(&format!(
                r#"
[{cri}.containerd.runtimes.{ERDMA_HANDLER}]
  runtime_type = "io.containerd.runc.v2"
  pod_annotations = [{annotation}]
  container_annotations = [{annotation}]

[{cri}.containerd.runtimes.{ERDMA_HANDLER}.options]
  BinaryName = {bin}
  Root = {runc_root}
  SystemdCgroup = false
"#,
                bin = toml_str(&erdma.display().to_string()),
                runc_root = d("runc"),
            ));
        }
        s
    }

    /// Builds the two images as one OCI archive (one busybox layer, two configs) and imports
    /// it with 1.7's `ctr` into `k8s.io`, unpacked for overlayfs as the CRI plugin wants.
    fn import_images(&self) {
        let work = self.dir.path().join("images");
        let rootfs = busybox_rootfs(&work.join("rootfs"));
        for a in MORE_APPLETS {
            let _ = std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(a));
        }
        let layout = work.join("layout");
        let blobs = layout.join("blobs/sha256");
        std::fs::create_dir_all(&blobs).unwrap();
        let layer = work.join("layer.tar");
        let out = Command::new("tar")
            .arg("-C")
            .arg(&rootfs)
            .args(["--numeric-owner", "--owner=0", "--group=0", "-cf"])
            .arg(&layer)
            .arg(".")
            .output()
            .unwrap();
        assert_success("tar the busybox layer", &out);
        let (layer_digest, layer_size) = add_blob(&blobs, &std::fs::read(&layer).unwrap());
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        };
        let path_env = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
        let mut manifests = Vec::new();
        for (name, config) in [
            (PAUSE_IMAGE, json!({"Env": [path_env], "Entrypoint": ["/bin/sleep", "2147483647"]})),
            (BUSYBOX_IMAGE, json!({"Env": [path_env], "Cmd": ["sh"]})),
        ] {
            let config = json!({
                "architecture": arch,
                "os": "linux",
                "config": config,
                "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
            });
            let (config_digest, config_size) =
                add_blob(&blobs, &serde_json::to_vec(&config).unwrap());
            let manifest = json!({
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_size},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer_size}],
            });
            let (digest, size) = add_blob(&blobs, &serde_json::to_vec(&manifest).unwrap());
            manifests.push(json!({
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest,
                "size": size,
                "platform": {"architecture": arch, "os": "linux"},
                // containerd's importer names an image after this annotation.
                "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name.rsplit(':').next().unwrap()},
            }));
        }
        std::fs::write(layout.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        std::fs::write(
            layout.join("index.json"),
            serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": manifests})).unwrap(),
        )
        .unwrap();
        let archive = work.join("images.tar");
        let out = Command::new("tar")
            .arg("-C")
            .arg(&layout)
            .arg("-cf")
            .arg(&archive)
            .args(["oci-layout", "index.json", "blobs"])
            .output()
            .unwrap();
        assert_success("tar the image archive", &out);
        let out = self.ctr(&[
            "images",
            "import",
            "--snapshotter",
            "overlayfs",
            archive.to_str().unwrap(),
        ]);
        if !out.status.success() {
            panic!(
                "ctr images import failed ({}): {}{}\n{}",
                out.status,
                text(&out.stdout),
                text(&out.stderr),
                self.log_section()
            );
        }
        // The CRI plugin learns of imported images from containerd's events, asynchronously,
        // and labels each one it has taken in `io.cri-containerd.image=managed`: wait for both
        // labels, so that the first RunPodSandbox cannot race it (and try to pull).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let listed = text(&self.ctr(&["images", "list"]).stdout);
            let managed = |name: &str| {
                listed.lines().any(|l| {
                    l.split_whitespace().next() == Some(name)
                        && l.contains("io.cri-containerd.image=managed")
                })
            };
            if managed(PAUSE_IMAGE) && managed(BUSYBOX_IMAGE) {
                break;
            }
            if Instant::now() > deadline {
                panic!(
                    "the CRI plugin did not take in the imported images within 10 s:\n{listed}\n{}",
                    self.log_section()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir_all(&work);
    }

    /// containerd 1.7's `ctr` against this daemon, namespace `k8s.io`, bounded to 60 s.
    pub fn ctr(&self, args: &[&str]) -> std::process::Output {
        Command::new("timeout")
            .arg("60")
            .arg(bin_dir().join("ctr"))
            .arg("--address")
            .arg(self.socket())
            .args(["--namespace", NAMESPACE])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Processes other than containerd whose command line names our socket: the shims.
    fn shims(&self) -> Vec<u32> {
        let sock = self.socket().display().to_string();
        let me = self.child.as_ref().map(Child::id);
        let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| Some(*pid) != me)
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == sock.as_bytes()))
            })
            .collect()
    }
}

impl Drop for Containerd17 {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("cri harness dropped while panicking; {}", self.log_section());
        }
        // Pods first, while containerd runs: their containers, shims and mounts go with them.
        if self.client.is_some() {
            let ids: Vec<String> = self.pods.lock().unwrap().iter().map(|p| p.id.clone()).collect();
            for id in ids {
                if let Err(s) = self.remove_pod(&id) {
                    eprintln!("cri harness: removing pod {id}: {:?}: {}", s.code(), s.message());
                }
            }
        }
        self.client = None;
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "TERM");
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        // What outlived it (a failed removal): its shims (given a moment: those of pods just
        // removed may still be exiting), then runc's containers.
        let deadline = Instant::now() + Duration::from_secs(2);
        while !self.shims().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        for pid in self.shims() {
            eprintln!("cri harness: killing shim {pid} left running");
            signal(pid, "KILL");
        }
        if let Ok(entries) = std::fs::read_dir(self.runc_root().join(NAMESPACE)) {
            for e in entries.flatten() {
                eprintln!("cri harness: deleting runc container {:?} left behind", e.file_name());
                let _ = Command::new("runc")
                    .arg("--root")
                    .arg(self.runc_root().join(NAMESPACE))
                    .args(["delete", "--force"])
                    .arg(e.file_name())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
        remove_cgroups(&self.cgroup_root);
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Kubelet's namespace options for a pod with or without `hostNetwork`.
fn namespaces(host_network: bool) -> pb::NamespaceOption {
    pb::NamespaceOption {
        network: if host_network { pb::NamespaceMode::Node } else { pb::NamespaceMode::Pod } as i32,
        pid: pb::NamespaceMode::Container as i32,
        ipc: pb::NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

/// Writes `data` as a blob; returns its digest (`sha256:…`) and size.
fn add_blob(blobs: &Path, data: &[u8]) -> (String, usize) {
    let tmp = blobs.join("incoming");
    std::fs::write(&tmp, data).unwrap();
    let out = Command::new("sha256sum").arg(&tmp).output().unwrap();
    assert_success("sha256sum", &out);
    let hex = text(&out.stdout).split_whitespace().next().unwrap().to_string();
    std::fs::rename(&tmp, blobs.join(&hex)).unwrap();
    (format!("sha256:{hex}"), data.len())
}

/// Whether this process has CAP_SYS_RESOURCE (capability 24). Without it (a VM sandbox that
/// drops it) runc cannot give the pause container the `oom_score_adj` -998 the CRI plugin asks
/// for ("failed to update /proc/self/oom_score_adj: Permission denied"), so the harness sets
/// `restrict_oom_score_adj`: containerd then clamps scores to its own, as in a user namespace.
fn has_cap_sys_resource() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    eff & (1 << 24) != 0
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    toml::Value::String(s.into()).to_string()
}

/// `name` on PATH (for runc: the system's, which the CRI handler's `BinaryName` names).
fn which(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|p| p.is_file()))
        .unwrap_or_else(|| panic!("no {name} on PATH"))
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// Removes the cgroup `path` (and below, deepest first) from every mounted hierarchy: runc
/// removes a container's own cgroup, not the pod parents kubelet would remove.
fn remove_cgroups(path: &str) {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else { return };
    for line in mountinfo.lines() {
        // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS... - FSTYPE SOURCE SUPER"
        let (fields, tail) = line.split_once(" - ").unwrap_or((line, ""));
        if !matches!(tail.split_whitespace().next(), Some("cgroup" | "cgroup2")) {
            continue;
        }
        let Some(mountpoint) = fields.split_whitespace().nth(4) else { continue };
        let dir = Path::new(mountpoint).join(path.trim_start_matches('/'));
        if dir.is_dir() {
            rmdir_tree(&dir);
        }
    }
}

fn rmdir_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                rmdir_tree(&e.path());
            }
        }
    }
    if let Err(e) = std::fs::remove_dir(dir) {
        eprintln!("cri harness: rmdir {}: {e}", dir.display());
    }
}
