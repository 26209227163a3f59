//! `erdma-dra-plugin` between a kubelet stand-in and an API server stand-in, over the "two"
//! fixture host with mknod'd nodes.
//!
//! - kubelet's side is played from the same protos kubelet is built from (`proto/`): its plugin
//!   watcher finds the registration socket in the registry directory, asks `GetInfo`, checks the
//!   type and versions and dials the endpoint (as `pkg/kubelet/pluginmanager` and the DRA
//!   plugin handler do), tells the plugin it is registered, then calls `NodePrepareResources` /
//!   `NodeUnprepareResources` in the version it picked and watches device health.
//! - the API server's side is `erdma_testkit::apiserver`: objects get UIDs and resource
//!   versions, a stale update gets 409, and every write is checked against the
//!   `resource.k8s.io/v1` OpenAPI schema Kubernetes publishes (`testdata/k8s/openapi-v3/`).
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use erdma_kube::dra::pb;
use erdma_testkit::apiserver::ApiServer;
use erdma_testkit::openapi::Schema;
use serde_json::{json, Value};

use crate::support::{bin, is_root, repo_root, require, Fixture};

const NODE: &str = "node-a";
const SLICE: &str = "/apis/resource.k8s.io/v1/resourceslices/node-a-erdma.aliyun.com";

fn schema() -> Schema {
    Schema::load(
        &repo_root().join("testdata/k8s/openapi-v3/apis__resource.k8s.io__v1_openapi.json"),
    )
    .expect("the resource.k8s.io/v1 OpenAPI document")
}

/// The directories a node has: kubelet's registry and plugin directories, the CDI directory.
struct Dirs {
    registry: PathBuf,
    plugin: PathBuf,
    cdi: PathBuf,
    kubeconfig: PathBuf,
}

impl Dirs {
    fn new(f: &Fixture, api: &ApiServer) -> Dirs {
        let root = f.dir.path();
        let d = Dirs {
            registry: root.join("plugins_registry"),
            plugin: root.join("plugins/erdma.aliyun.com"),
            cdi: root.join("cdi"),
            kubeconfig: root.join("kubeconfig"),
        };
        std::fs::write(&d.kubeconfig, api.kubeconfig()).unwrap();
        d
    }

    /// Every file in the CDI directory, by name.
    fn cdi_files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.cdi)
            .map(|r| r.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        names.sort();
        names
    }
}

/// The API server stand-in, knowing this node, and the node's directories.
async fn cluster(f: &Fixture) -> (ApiServer, Dirs) {
    let api = ApiServer::start(schema()).await;
    api.put("/api/v1/nodes/node-a", node());
    let d = Dirs::new(f, &api);
    (api, d)
}

/// `erdma-dra-plugin` over fixture `f`'s host, writing CDI specs to `cdi`; killed when dropped.
fn spawn_plugin(f: &Fixture, d: &Dirs, cdi: &Path) -> tokio::process::Child {
    spawn_plugin_with(f, d, cdi, &[])
}

/// [`spawn_plugin`] with `extra` arguments.
fn spawn_plugin_with(
    f: &Fixture,
    d: &Dirs,
    cdi: &Path,
    extra: &[&std::ffi::OsStr],
) -> tokio::process::Child {
    tokio::process::Command::new(bin("erdma-dra-plugin"))
        .env("ERDMA_OCI_HOOK_CONFIG", &f.config_path)
        .env_remove("KUBECONFIG")
        .args(["--node-name", NODE, "--poll-ms", "100"])
        .arg("--kubeconfig")
        .arg(&d.kubeconfig)
        .arg("--registry-dir")
        .arg(&d.registry)
        .arg("--plugin-dir")
        .arg(&d.plugin)
        .arg("--cdi-dir")
        .arg(cdi)
        .args(extra)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Waits (up to 20 s) until `f` gives something.
async fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    for _ in 0..400 {
        if let Some(v) = f() {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

/// The clients kubelet has once a plugin is registered.
struct Registered {
    info: pb::registration::PluginInfo,
    v1: pb::v1::dra_plugin_client::DraPluginClient<tonic::transport::Channel>,
    v1beta1: pb::v1beta1::dra_plugin_client::DraPluginClient<tonic::transport::Channel>,
    health: pb::health_v1alpha1::dra_resource_health_client::DraResourceHealthClient<
        tonic::transport::Channel,
    >,
}

/// kubelet's plugin watcher and DRA handler: the socket found in `registry`, `GetInfo`, the
/// checks kubelet makes (a DRAPlugin, a version it speaks, an endpoint it can dial), the
/// registration confirmed.
async fn register(registry: &Path) -> Registered {
    use std::os::unix::fs::FileTypeExt;
    let socket = until("a registration socket", || {
        std::fs::read_dir(registry)
            .ok()?
            .flatten()
            .find_map(|e| e.file_type().ok().filter(|t| t.is_socket()).map(|_| e.path()))
    })
    .await;
    let mut reg = None;
    for _ in 0..100 {
        if let Ok(ch) = erdma_kube::kubelet::unix_channel(&socket).await {
            reg = Some(pb::registration::registration_client::RegistrationClient::new(ch));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut reg = reg.expect("the registration socket answers");
    let info = reg.get_info(pb::registration::InfoRequest {}).await.unwrap().into_inner();
    assert_eq!(info.r#type, "DRAPlugin");
    assert!(info.supported_versions.iter().any(|v| v == "v1.DRAPlugin"), "{info:?}");
    let ch = erdma_kube::kubelet::unix_channel(Path::new(&info.endpoint))
        .await
        .unwrap_or_else(|e| panic!("kubelet dials {}: {e}", info.endpoint));
    reg.notify_registration_status(pb::registration::RegistrationStatus {
        plugin_registered: true,
        error: String::new(),
    })
    .await
    .unwrap();
    Registered {
        info,
        v1: pb::v1::dra_plugin_client::DraPluginClient::new(ch.clone()),
        v1beta1: pb::v1beta1::dra_plugin_client::DraPluginClient::new(ch.clone()),
        health: pb::health_v1alpha1::dra_resource_health_client::DraResourceHealthClient::new(ch),
    }
}

/// A ResourceClaim `ns/name` with `uid`, allocated `devices` ((request, pool, device)) of our
/// driver, as the scheduler leaves it.
fn claim(ns: &str, name: &str, uid: &str, devices: &[(&str, &str, &str)]) -> Value {
    let results: Vec<Value> = devices
        .iter()
        .map(|(request, pool, device)| {
            json!({"request": request, "driver": "erdma.aliyun.com", "pool": pool, "device": device})
        })
        .collect();
    let requests: Vec<Value> = devices
        .iter()
        .map(|(request, _, _)| json!({"name": request, "exactly": {"deviceClassName": "erdma.aliyun.com"}}))
        .collect();
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {"devices": {"requests": requests}},
        "status": {"allocation": {"devices": {"results": results}}}
    })
}

fn claim_path(ns: &str, name: &str) -> String {
    format!("/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}")
}

fn node() -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": "5d7e0c1a-0000-4000-8000-00000000a0de"}})
}

fn pb_claim(ns: &str, name: &str, uid: &str) -> pb::v1::Claim {
    pb::v1::Claim { namespace: ns.into(), name: name.into(), uid: uid.into() }
}

async fn prepare(
    r: &mut Registered,
    claims: Vec<pb::v1::Claim>,
) -> std::collections::HashMap<String, pb::v1::NodePrepareResourceResponse> {
    r.v1.node_prepare_resources(pb::v1::NodePrepareResourcesRequest { claims })
        .await
        .unwrap()
        .into_inner()
        .claims
}

/// The slice's devices: (name, portState).
fn slice_devices(slice: &Value) -> Vec<(String, String)> {
    slice["spec"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap().to_string(),
                d["attributes"]["portState"]["string"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The "two" fixture host with its device nodes and a runtime; `None` where the test is skipped
/// (no root for mknod).
fn two_host() -> Option<(Fixture, tokio::runtime::Runtime)> {
    if !require(is_root(), "root is needed for the mknod'd device nodes") {
        return None;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    Some((Fixture::new("two", ""), rt))
}

const UID_A: &str = "3f1c2b7e-5d0a-4c1e-9a63-0d2b9e7f1a44";

#[test]
fn dra_plugin_publishes_prepares_and_survives_a_restart_root() {
    let Some((f, rt)) = two_host() else { return };
    rt.block_on(async {
        let (api, d) = cluster(&f).await;
        // With its metrics, over a PodResources stand-in where a pod's claim holds erdma-1.
        let podresources = f.dir.path().join("pod-resources.sock");
        let _kubelet = crate::metrics_cases::start_podresources(&podresources);
        let metrics: std::net::SocketAddr =
            format!("127.0.0.1:{}", crate::metrics_cases::free_port()).parse().unwrap();
        let metrics_arg = metrics.to_string();
        let mut child = spawn_plugin_with(
            &f,
            &d,
            &d.cdi,
            &[
                "--metrics-address".as_ref(),
                metrics_arg.as_ref(),
                "--podresources-socket".as_ref(),
                podresources.as_os_str(),
            ],
        );
        let mut r = register(&d.registry).await;
        assert_eq!(r.info.name, "erdma.aliyun.com");
        let body = tokio::task::spawn_blocking(move || crate::metrics_cases::scrape(metrics))
            .await
            .unwrap();
        let info: Vec<&str> =
            body.lines().filter(|l| l.starts_with("erdma_device_container_info")).collect();
        assert_eq!(info.len(), 1, "{body}");
        assert!(
            info[0]
                .contains(r#"device="erdma_1",namespace="ml",pod="claimed-0",container="rank0""#),
            "{body}"
        );
        assert_eq!(r.info.supported_versions, ["v1.DRAPlugin", "v1beta1.DRAPlugin"]);
        assert_eq!(Path::new(&r.info.endpoint), d.plugin.join("dra.sock"));

        // One slice for the node: both ERIs, with their attributes, owned by the Node.
        let slice = until("the ResourceSlice", || api.get(SLICE)).await;
        assert_eq!(
            slice_devices(&slice),
            [("erdma-0".into(), "ACTIVE".into()), ("erdma-1".into(), "ACTIVE".into())]
        );
        let spec = &slice["spec"];
        assert_eq!(
            (spec["driver"].as_str(), spec["nodeName"].as_str(), &spec["pool"]),
            (
                Some("erdma.aliyun.com"),
                Some(NODE),
                &json!({"name": NODE, "generation": 1, "resourceSliceCount": 1})
            )
        );
        let owner = &slice["metadata"]["ownerReferences"][0];
        assert_eq!(
            (owner["kind"].as_str(), owner["uid"].as_str()),
            (Some("Node"), node()["metadata"]["uid"].as_str())
        );
        insta::assert_json_snapshot!("dra_slice_attributes_two", spec["devices"]);

        // A claim for erdma-1: its CDI spec, and the ID kubelet hands the runtime.
        api.put(
            &claim_path("ns1", "claim-a"),
            claim("ns1", "claim-a", UID_A, &[("eri", NODE, "erdma-1")]),
        );
        let answer = prepare(&mut r, vec![pb_claim("ns1", "claim-a", UID_A)]).await;
        let a = &answer[UID_A];
        assert_eq!(a.error, "");
        assert_eq!(
            a.devices,
            [pb::v1::Device {
                request_names: vec!["eri".into()],
                pool_name: NODE.into(),
                device_name: "erdma-1".into(),
                cdi_device_ids: vec![format!("erdma.aliyun.com/claim={UID_A}-erdma_1")],
            }]
        );
        let spec_file = d.cdi.join(format!("erdma.aliyun.com-claim_{UID_A}.json"));
        let text = std::fs::read_to_string(&spec_file).unwrap();
        let cdi: Value = serde_json::from_str(&text).unwrap();
        let env: Vec<&str> = cdi["containerEdits"]["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(env.contains(&"NCCL_IB_HCA==erdma_1:1"), "{env:?}");
        assert!(env.contains(&"ERDMA_VISIBLE_DEVICES=erdma_1"), "{env:?}");
        let dev = f.dev.display().to_string();
        insta::with_settings!({filters => vec![(dev.as_str(), "[DEV]"), (UID_A, "[UID]")]}, {
            insta::assert_snapshot!("dra_claim_cdi_spec_two", text);
        });

        // kubelet retries: the same answer, the same file.
        let again = prepare(&mut r, vec![pb_claim("ns1", "claim-a", UID_A)]).await;
        assert_eq!(again[UID_A], *a);
        assert_eq!(std::fs::read_to_string(&spec_file).unwrap(), text);

        // erdma_0's port goes DOWN: the slice is written once for it (generation 2), not on
        // every poll; health says so.
        let mut health = r
            .health
            .node_watch_resources(pb::health_v1alpha1::NodeWatchResourcesRequest {})
            .await
            .unwrap()
            .into_inner();
        let first = health.message().await.unwrap().unwrap();
        assert!(first
            .devices
            .iter()
            .all(|h| h.health == pb::health_v1alpha1::HealthStatus::Healthy as i32));
        // Someone else's write wins the race: the plugin's update gets 409 Conflict, and it
        // reads the slice again and writes once more.
        api.fail_next(http::Method::PUT, SLICE, 409);
        let state = f.sysfs.join("class/infiniband/erdma_0/ports/1/state");
        std::fs::write(&state, "1: DOWN\n").unwrap();
        let slice = until("the slice with erdma-0 DOWN", || {
            api.get(SLICE).filter(|s| slice_devices(s)[0].1 == "DOWN")
        })
        .await;
        assert_eq!(slice["spec"]["pool"]["generation"], 2);
        let unhealthy = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let m = health.message().await.unwrap().expect("the health stream goes on");
                let h: Vec<(String, i32)> = m
                    .devices
                    .iter()
                    .map(|h| (h.device.as_ref().unwrap().device_name.clone(), h.health))
                    .collect();
                if h.iter().any(|(_, s)| *s == pb::health_v1alpha1::HealthStatus::Unhealthy as i32)
                {
                    break h;
                }
            }
        })
        .await
        .expect("erdma-0 reported unhealthy");
        assert_eq!(
            unhealthy,
            [
                ("erdma-0".to_string(), pb::health_v1alpha1::HealthStatus::Unhealthy as i32),
                ("erdma-1".to_string(), pb::health_v1alpha1::HealthStatus::Healthy as i32)
            ]
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        let writes: Vec<(String, u16)> =
            api.writes().into_iter().map(|w| (w.method, w.status)).collect();
        assert_eq!(
            writes,
            [("POST".to_string(), 201), ("PUT".to_string(), 409), ("PUT".to_string(), 200)],
            "one write per change, and one again after the conflict"
        );

        // The plugin restarts: kubelet finds it again, the slice is left as it is, and the claim
        // prepared before is unprepared (v1beta1 this time) from its file alone.
        child.kill().await.unwrap();
        let _ = child.wait().await;
        drop(r);
        let mut child = spawn_plugin(&f, &d, &d.cdi);
        let mut r = register(&d.registry).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(api.writes().len(), 3, "nothing written after the restart: {:?}", api.writes());
        let un = r
            .v1beta1
            .node_unprepare_resources(pb::v1beta1::NodeUnprepareResourcesRequest {
                claims: vec![pb::v1beta1::Claim {
                    namespace: "ns1".into(),
                    name: "claim-a".into(),
                    uid: UID_A.into(),
                }],
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(un.claims[UID_A].error, "");
        assert_eq!(d.cdi_files(), Vec::<String>::new());
        // Again: already unprepared.
        let un =
            r.v1.node_unprepare_resources(pb::v1::NodeUnprepareResourcesRequest {
                claims: vec![pb_claim("ns1", "claim-a", UID_A)],
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(un.claims[UID_A].error, "");
        assert_eq!(api.violations(), Vec::<String>::new());
        child.kill().await.unwrap();
    });
}

#[test]
fn dra_plugin_refuses_bad_claims_and_leaves_nothing_root() {
    let Some((f, rt)) = two_host() else { return };
    rt.block_on(async {
        let (api, d) = cluster(&f).await;
        let mut child = spawn_plugin(&f, &d, &d.cdi);
        let mut r = register(&d.registry).await;
        until("the ResourceSlice", || api.get(SLICE)).await;

        let uid = |i: u32| format!("3f1c2b7e-5d0a-4c1e-9a63-0000000000{i:02}");
        let cases: Vec<(&str, Value, &str)> = vec![
            ("unknown", claim("ns1", "unknown", &uid(1), &[("eri", NODE, "erdma-9")]), "device erdma-9 is not published on this node"),
            ("other-pool", claim("ns1", "other-pool", &uid(2), &[("eri", "node-b", "erdma-0")]), "allocated from pool node-b, not from this node's (node-a)"),
            ("recreated", claim("ns1", "recreated", "11111111-2222-4333-8444-555555555555", &[("eri", NODE, "erdma-0")]), "the API server has uid 11111111-2222-4333-8444-555555555555 under that name"),
            ("unallocated", {
                let mut c = claim("ns1", "unallocated", &uid(4), &[("eri", NODE, "erdma-0")]);
                c.as_object_mut().unwrap().remove("status");
                c
            }, "has no allocation in its status"),
            ("parameters", {
                let mut c = claim("ns1", "parameters", &uid(5), &[("eri", NODE, "erdma-0")]);
                c["status"]["allocation"]["devices"]["config"] = json!([{"source": "FromClaim", "opaque": {"driver": "erdma.aliyun.com", "parameters": {"mtu": 9000}}}]);
                c
            }, "gives erdma.aliyun.com opaque parameters"),
        ];
        for (name, obj, _) in &cases {
            api.put(&claim_path("ns1", name), obj.clone());
        }
        let mut asked: Vec<pb::v1::Claim> = cases
            .iter()
            .map(|(name, obj, _)| {
                let uid = if *name == "recreated" { uid(3) } else { obj["metadata"]["uid"].as_str().unwrap().to_string() };
                pb_claim("ns1", name, &uid)
            })
            .collect();
        asked.push(pb_claim("ns1", "missing", &uid(6)));
        asked.push(pb_claim("ns1", "escape", "../../etc/passwd"));
        let answer = prepare(&mut r, asked.clone()).await;
        assert_eq!(answer.len(), asked.len(), "every claim answered: {answer:?}");
        for (c, (name, _, want)) in asked.iter().zip(cases.iter().map(|c| (c.0, (), c.2)).chain([
            ("missing", (), "reading it from the API server"),
            ("escape", (), "is not a Kubernetes UID"),
        ])) {
            let got = &answer[&c.uid];
            assert!(got.error.contains(want), "{name}: {:?} lacks {want:?}", got.error);
            assert!(got.devices.is_empty(), "{name}");
        }

        // The API server fails mid-prepare: an error, nothing written.
        api.put(&claim_path("ns1", "good"), claim("ns1", "good", &uid(7), &[("eri", NODE, "erdma-0")]));
        api.fail_next(http::Method::GET, &claim_path("ns1", "good"), 500);
        let answer = prepare(&mut r, vec![pb_claim("ns1", "good", &uid(7))]).await;
        assert!(answer[&uid(7)].error.contains("reading it from the API server"), "{:?}", answer[&uid(7)]);

        // kubelet gives up on a call midway (it restarts, or its deadline passes) while the
        // plugin waits for the API server: nothing is written, and the call made again works.
        api.delay_next(http::Method::GET, &claim_path("ns1", "good"), Duration::from_secs(2));
        let cut = tokio::time::timeout(
            Duration::from_millis(300),
            prepare(&mut r, vec![pb_claim("ns1", "good", &uid(7))]),
        )
        .await;
        assert!(cut.is_err(), "the call was cut");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(d.cdi_files(), Vec::<String>::new(), "nothing from the cut call");
        let again = prepare(&mut r, vec![pb_claim("ns1", "good", &uid(7))]).await;
        assert_eq!(again[&uid(7)].error, "");
        assert_eq!(d.cdi_files(), [format!("erdma.aliyun.com-claim_{}.json", uid(7))]);
        let un = r
            .v1
            .node_unprepare_resources(pb::v1::NodeUnprepareResourcesRequest {
                claims: vec![pb_claim("ns1", "good", &uid(7))],
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(un.claims[&uid(7)].error, "");

        // A CDI directory that cannot be written: its parent is a file.
        child.kill().await.unwrap();
        let _ = child.wait().await;
        let blocked = f.dir.path().join("not-a-dir");
        std::fs::write(&blocked, "").unwrap();
        let mut child = spawn_plugin(&f, &d, &blocked.join("cdi"));
        let mut r = register(&d.registry).await;
        let answer = prepare(&mut r, vec![pb_claim("ns1", "good", &uid(7))]).await;
        assert!(answer[&uid(7)].error.contains("writing its CDI spec"), "{:?}", answer[&uid(7)]);
        child.kill().await.unwrap();
        let _ = child.wait().await;

        // A device gone between publish and prepare: erdma_1 leaves sysfs after the slice
        // named it.
        let mut child = spawn_plugin(&f, &d, &d.cdi);
        let mut r = register(&d.registry).await;
        api.put(&claim_path("ns1", "gone"), claim("ns1", "gone", &uid(8), &[("eri", NODE, "erdma-1")]));
        std::fs::remove_file(f.sysfs.join("class/infiniband/erdma_1")).unwrap();
        let answer = prepare(&mut r, vec![pb_claim("ns1", "gone", &uid(8))]).await;
        assert!(answer[&uid(8)].error.contains("device erdma-1 is not published on this node"), "{:?}", answer[&uid(8)]);

        assert_eq!(d.cdi_files(), Vec::<String>::new(), "nothing left in the CDI directory");
        assert_eq!(api.violations(), Vec::<String>::new());
        child.kill().await.unwrap();
    });
}
