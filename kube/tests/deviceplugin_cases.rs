//! `erdma-device-plugin` against a test kubelet that speaks the device-plugin API v1beta1 as
//! kubelet does (its `Registration` service on `kubelet.sock`; `ListAndWatch`, `Allocate`,
//! `GetPreferredAllocation` called on the plugin's socket), over the "two" fixture host with
//! mknod'd nodes: registration, health following a port that goes DOWN and comes back, the
//! allocation, and registering again after kubelet restarts.
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use erdma_kube::kubelet::pb;
use tokio::sync::mpsc;

use crate::support::{bin, is_root, require, Fixture};

/// kubelet's `Registration` service as kubelet's device manager serves it
/// (`pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go`): it dials the endpoint the plugin
/// names and fails the registration where it cannot; each registration it takes goes to the
/// test.
struct TestKubelet {
    dir: std::path::PathBuf,
    tx: mpsc::Sender<pb::RegisterRequest>,
}

#[tonic::async_trait]
impl pb::registration_server::Registration for TestKubelet {
    async fn register(
        &self,
        req: tonic::Request<pb::RegisterRequest>,
    ) -> Result<tonic::Response<pb::Empty>, tonic::Status> {
        let req = req.into_inner();
        let endpoint = self.dir.join(&req.endpoint);
        if let Err(e) = tokio::net::UnixStream::connect(&endpoint).await {
            return Err(tonic::Status::unavailable(format!(
                "failed to dial device plugin: {}: {e}",
                endpoint.display()
            )));
        }
        let _ = self.tx.send(req).await;
        Ok(tonic::Response::new(pb::Empty {}))
    }
}

/// A kubelet's registration socket at `dir/kubelet.sock`, served until the task is aborted.
/// As kubelet's start does, every socket in `dir` is removed first (the plugins' too:
/// `CleanupPluginDirectory`).
pub(crate) fn start_kubelet(
    dir: &Path,
    tx: mpsc::Sender<pb::RegisterRequest>,
) -> tokio::task::JoinHandle<()> {
    use std::os::unix::fs::FileTypeExt;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().is_ok_and(|t| t.is_socket()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let path = dir.join("kubelet.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let dir_owned = dir.to_path_buf();
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(pb::registration_server::RegistrationServer::new(TestKubelet {
                dir: dir_owned,
                tx,
            }))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
            .await;
    })
}

/// `erdma-device-plugin` over fixture `f`'s host, serving in `dir`, with `args`; killed when
/// dropped.
pub(crate) fn spawn_plugin(f: &Fixture, dir: &Path, args: &[&str]) -> tokio::process::Child {
    tokio::process::Command::new(bin("erdma-device-plugin"))
        .env("ERDMA_OCI_HOOK_CONFIG", &f.config_path)
        .arg("--socket-dir")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// The next registration the test kubelet takes (within 20 s); `what` names it when none comes.
async fn registration(
    rx: &mut mpsc::Receiver<pb::RegisterRequest>,
    what: &str,
) -> pb::RegisterRequest {
    tokio::time::timeout(Duration::from_secs(20), rx.recv()).await.expect(what).unwrap()
}

/// The next `ListAndWatch` update (within 10 s).
async fn next(s: &mut tonic::Streaming<pb::ListAndWatchResponse>) -> Vec<pb::Device> {
    tokio::time::timeout(Duration::from_secs(10), s.message())
        .await
        .expect("a ListAndWatch update")
        .unwrap()
        .unwrap()
        .devices
}

fn health(devices: &[pb::Device]) -> Vec<(String, String)> {
    devices.iter().map(|d| (d.id.clone(), d.health.clone())).collect()
}

#[test]
fn device_plugin_registers_streams_health_and_allocates_root() {
    if !require(is_root(), "root is needed for the mknod'd device nodes") {
        return;
    }
    let f = Fixture::new("two", "");
    let dir = f.dir.path().join("device-plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (tx, mut rx) = mpsc::channel(4);
        let kubelet = start_kubelet(&dir, tx.clone());
        let mut child = spawn_plugin(&f, &dir, &["--poll-ms", "100", "--shares", "2"]);
        let reg = registration(&mut rx, "the plugin registers").await;
        assert_eq!(
            (reg.version.as_str(), reg.endpoint.as_str(), reg.resource_name.as_str()),
            ("v1beta1", "erdma.sock", "aliyun/erdma")
        );
        assert!(reg.options.unwrap().get_preferred_allocation_available);

        let channel = erdma_kube::kubelet::unix_channel(&dir.join("erdma.sock")).await.unwrap();
        let mut plugin = pb::device_plugin_client::DevicePluginClient::new(channel);
        let mut stream = plugin.list_and_watch(pb::Empty {}).await.unwrap().into_inner();
        let all_healthy: Vec<(String, String)> =
            ["erdma_0-0", "erdma_0-1", "erdma_1-0", "erdma_1-1"]
                .iter()
                .map(|i| (i.to_string(), "Healthy".to_string()))
                .collect();
        assert_eq!(health(&next(&mut stream).await), all_healthy);

        // erdma_1's port goes DOWN, then comes back: kubelet is told each time.
        let state = f.sysfs.join("class/infiniband/erdma_1/ports/1/state");
        let up = std::fs::read_to_string(&state).unwrap();
        std::fs::write(&state, "1: DOWN\n").unwrap();
        let down = health(&next(&mut stream).await);
        assert_eq!(
            down.iter()
                .filter(|(_, h)| h == "Unhealthy")
                .map(|(i, _)| i.as_str())
                .collect::<Vec<_>>(),
            ["erdma_1-0", "erdma_1-1"]
        );
        let refused = plugin
            .allocate(pb::AllocateRequest {
                container_requests: vec![pb::ContainerAllocateRequest {
                    devices_ids: vec!["erdma_1-0".into()],
                }],
            })
            .await
            .unwrap_err();
        assert!(refused.message().contains("erdma_1 is unhealthy"), "{refused:?}");
        std::fs::write(&state, up).unwrap();
        assert_eq!(health(&next(&mut stream).await), all_healthy);

        // Allocate: the device's uverbs node and rdma_cm, and the NCCL settings for it.
        let a = plugin
            .allocate(pb::AllocateRequest {
                container_requests: vec![pb::ContainerAllocateRequest {
                    devices_ids: vec!["erdma_0-1".into()],
                }],
            })
            .await
            .unwrap()
            .into_inner();
        let c = &a.container_responses[0];
        let nodes: Vec<(&str, String)> =
            c.devices.iter().map(|d| (d.container_path.as_str(), d.host_path.clone())).collect();
        assert_eq!(
            nodes,
            [
                ("/dev/infiniband/uverbs0", f.dev.join("infiniband/uverbs0").display().to_string()),
                ("/dev/infiniband/rdma_cm", f.dev.join("infiniband/rdma_cm").display().to_string())
            ]
        );
        assert!(c.devices.iter().all(|d| d.permissions == "rw"));
        assert_eq!(c.envs.get("ERDMA_VISIBLE_DEVICES").map(String::as_str), Some("erdma_0"));
        assert_eq!(
            c.envs.get("NCCL_IB_HCA").map(String::as_str),
            Some("=erdma_0:1"),
            "{:?}",
            c.envs
        );
        let p = plugin
            .get_preferred_allocation(pb::PreferredAllocationRequest {
                container_requests: vec![pb::ContainerPreferredAllocationRequest {
                    available_device_i_ds: all_healthy.iter().map(|(i, _)| i.clone()).collect(),
                    must_include_device_i_ds: vec![],
                    allocation_size: 2,
                }],
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            p.container_responses[0].device_i_ds,
            ["erdma_0-0", "erdma_1-0"],
            "distinct devices first"
        );

        // kubelet restarts: it removes the plugins' sockets and makes its own anew.
        kubelet.abort();
        let _kubelet = start_kubelet(&dir, tx);
        let again = registration(&mut rx, "the plugin registers again").await;
        assert_eq!(again.endpoint, "erdma.sock");
        assert!(dir.join("erdma.sock").exists(), "serving again");
        let _ = child.kill().await;
    });
}

/// Beside ACK's own eRDMA device plugin (its agent's `<unix time>-erdma.sock`) or Terway's
/// (`<unix time>-erdma-eni.sock`, Terway's `deviceplugin/eni.go`), the plugin does not
/// advertise `aliyun/erdma` a second time: it exits naming the other plugin and the choice to
/// make. Under another resource name it registers.
#[test]
fn device_plugin_refuses_to_advertise_beside_acks_or_terways_plugin() {
    let f = Fixture::sysfs_only("two", "");
    let dir = f.dir.path().join("device-plugins");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, whose, choice) in [
        ("1732000000-erdma.sock", "ACK's eRDMA device plugin", "remove ACK's eRDMA agent"),
        ("1732000001-erdma-eni.sock", "Terway's eRDMA device plugin", "Terway's configuration"),
    ] {
        std::fs::write(dir.join(name), "").unwrap();
        let out = std::process::Command::new(bin("erdma-device-plugin"))
            .env("ERDMA_OCI_HOOK_CONFIG", &f.config_path)
            .arg("--socket-dir")
            .arg(&dir)
            .args(["--poll-ms", "50"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("{name} is {whose}"))
                && err.contains(choice)
                && err.contains("--resource"),
            "{err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(!dir.join("erdma.sock").exists(), "nothing served");
        std::fs::remove_file(dir.join(name)).unwrap();
    }
    std::fs::write(dir.join("1732000000-erdma.sock"), "").unwrap();

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (tx, mut rx) = mpsc::channel(4);
        let _kubelet = start_kubelet(&dir, tx);
        let _child =
            spawn_plugin(&f, &dir, &["--poll-ms", "50", "--resource", "example.com/erdma"]);
        let reg = registration(&mut rx, "the plugin registers").await;
        assert_eq!(reg.resource_name, "example.com/erdma");
    });
}

/// Started as a boot-time service before kubelet, the plugin finds no kubelet and keeps trying;
/// kubelet's start then removes its socket, so the endpoint it registers cannot be dialled and
/// kubelet refuses the registration. The plugin serves again on a fresh socket and registers
/// again: kubelet takes it and can dial it.
#[test]
fn device_plugin_started_before_kubelet_registers_once_kubelet_is_up_root() {
    if !require(is_root(), "root is needed for the mknod'd device nodes") {
        return;
    }
    let f = Fixture::new("two", "");
    let dir = f.dir.path().join("device-plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut child = spawn_plugin(&f, &dir, &["--poll-ms", "100"]);
        // The plugin is serving, and failing to register, before kubelet comes.
        let sock = dir.join("erdma.sock");
        for _ in 0..100 {
            if sock.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(sock.exists(), "the plugin serves before kubelet is up");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (tx, mut rx) = mpsc::channel(4);
        let _kubelet = start_kubelet(&dir, tx);
        let reg = registration(&mut rx, "the plugin registers an endpoint kubelet can dial").await;
        assert_eq!(reg.endpoint, "erdma.sock");
        // kubelet's side: the endpoint answers the device plugin API.
        let channel = erdma_kube::kubelet::unix_channel(&dir.join("erdma.sock")).await.unwrap();
        let mut plugin = pb::device_plugin_client::DevicePluginClient::new(channel);
        let options = plugin.get_device_plugin_options(pb::Empty {}).await.unwrap().into_inner();
        assert!(options.get_preferred_allocation_available);
        let _ = child.kill().await;
    });
}
