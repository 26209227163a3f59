//! The Kubernetes installer (`deploy/`, `scripts/node-image`):
//!
//! - the manifests (`deploy/erdma-kit-*.yaml`, `deploy/examples/*.yaml`) through
//!   `kubectl apply --dry-run=client --validate=true`, against a fake API server on 127.0.0.1 that
//!   answers discovery and serves a real Kubernetes schema (`testdata/k8s/`, Kubernetes 1.34,
//!   where it comes from in its README), so kubectl maps, validates and prints every object as it
//!   would against a cluster; a misspelt field, a wrong type, a missing required field must fail
//!   there, in the DRA kinds (DeviceClass, ResourceClaimTemplate, a Pod's claims) as in the rest;
//! - what the objects say (mounts, probe, hooks, the resource, the handler; for DRA the plugin's
//!   flags and mounts, its RBAC, the DeviceClass, the examples' claims), read from kubectl's JSON
//!   of them;
//! - `deploy/node/erdma-kit-node` installing onto a fake host root (a fixture sysfs, mknod'd
//!   nodes, containerd's or CRI-O's config, `/var/run` an absolute link to `/run` as on Debian)
//!   through chroot, as the DaemonSet does, and uninstalling back to the same tree;
//! - `scripts/node-image` on the offline demo base.
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{
    assert_success, bin, copy_tree, dev_nodes, have, is_root, mknod, require, sysfs_fixtures, text,
};

const MANIFESTS: [&str; 4] = [
    "erdma-kit-nri.yaml",
    "erdma-kit-runtimeclass.yaml",
    "erdma-kit-nri-with-ack.yaml",
    "erdma-kit-dra.yaml",
];
const IMAGE_BIN: &str = "/opt/erdma/bin";
const NRI_RECORDS: &str = erdma_kube::holders::NRI_RECORDS;
/// The DRA driver's name (`erdma-dra-plugin --driver-name`'s default), its DeviceClass's name and
/// the domain of its unqualified attributes.
const DRA_DRIVER: &str = erdma_kube::dra::DRIVER;
/// The standard attribute a GPU and an ERI are matched by (the Kubernetes documentation page
/// "Standard Device Attributes for Dynamic Resource Allocation").
const PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";

fn workspace() -> PathBuf {
    crate::support::repo_root()
}

fn manifest(name: &str) -> PathBuf {
    workspace().join("deploy").join(name)
}

// ---------------------------------------------------------------------------------------------
// A fake API server: discovery for the kinds deploy/ uses and the schema at /openapi/v2.

/// The group versions the fake server discovers beside the core `v1`. `kubeflow.org/v2beta1`
/// (the MPI Operator's MPIJob, a custom resource) is mapped but has no schema, as a CRD whose
/// schema kubectl does not validate: kubectl prints it unvalidated, and
/// `dra_examples_pass_kubectl_client_dry_run_with_schema_validation` validates its pod templates
/// as Pods.
const GROUPS: [(&str, &str); 5] = [
    ("apps", "v1"),
    ("node.k8s.io", "v1"),
    ("rbac.authorization.k8s.io", "v1"),
    ("resource.k8s.io", "v1"),
    ("kubeflow.org", "v2beta1"),
];

/// The schema as kubectl asks for it (client-go `OpenAPISchema`: `GET /openapi/v2` with
/// `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`): gnostic's
/// `openapi.v2.Document` in protobuf, encoded here from `testdata/k8s/openapi-v2.json`. Field
/// numbers from gnostic's `openapiv2/OpenAPIv2.proto`: Document{swagger 1, info 2, definitions 9},
/// Info{title 1, version 2}, Definitions and Properties{additional_properties 1: NamedSchema},
/// NamedSchema{name 1, value 2}, Schema{_ref 1, format 2, required 19, additional_properties 21,
/// type 22, items 23, properties 25, vendor_extension 31}, AdditionalPropertiesItem{schema 1},
/// TypeItem{value 1}, ItemsItem{schema 1}, NamedAny{name 1, value 2}, Any{yaml 2}.
fn openapi_v2_protobuf(doc: &Value) -> Vec<u8> {
    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    fn field(tag: u64, bytes: &[u8], out: &mut Vec<u8>) {
        varint((tag << 3) | 2, out);
        varint(bytes.len() as u64, out);
        out.extend_from_slice(bytes);
    }
    fn named(name: &str, value: &[u8]) -> Vec<u8> {
        let mut o = Vec::new();
        field(1, name.as_bytes(), &mut o);
        field(2, value, &mut o);
        o
    }
    fn schema(s: &Value) -> Vec<u8> {
        let mut o = Vec::new();
        let str_of = |k: &str| s.get(k).and_then(Value::as_str);
        if let Some(r) = str_of("$ref") {
            field(1, r.as_bytes(), &mut o);
        }
        if let Some(f) = str_of("format") {
            field(2, f.as_bytes(), &mut o);
        }
        for r in s.get("required").and_then(Value::as_array).into_iter().flatten() {
            field(19, r.as_str().unwrap().as_bytes(), &mut o);
        }
        if let Some(a) = s.get("additionalProperties") {
            let mut item = Vec::new();
            field(1, &schema(a), &mut item);
            field(21, &item, &mut o);
        }
        if let Some(t) = str_of("type") {
            let mut item = Vec::new();
            field(1, t.as_bytes(), &mut item);
            field(22, &item, &mut o);
        }
        if let Some(i) = s.get("items") {
            let mut item = Vec::new();
            field(1, &schema(i), &mut item);
            field(23, &item, &mut o);
        }
        if let Some(props) = s.get("properties").and_then(Value::as_object) {
            let mut p = Vec::new();
            for (k, v) in props {
                field(1, &named(k, &schema(v)), &mut p);
            }
            field(25, &p, &mut o);
        }
        if let Some(gvks) = s.get("x-kubernetes-group-version-kind").and_then(Value::as_array) {
            // The extension's value is YAML text in gnostic's Any (kube-openapi parses it back).
            let yaml: String = gvks
                .iter()
                .map(|g| {
                    format!(
                        "- group: \"{}\"\n  kind: {}\n  version: {}\n",
                        g["group"].as_str().unwrap(),
                        g["kind"].as_str().unwrap(),
                        g["version"].as_str().unwrap()
                    )
                })
                .collect();
            let mut any = Vec::new();
            field(2, yaml.as_bytes(), &mut any);
            field(31, &named("x-kubernetes-group-version-kind", &any), &mut o);
        }
        o
    }
    let mut out = Vec::new();
    field(1, doc["swagger"].as_str().unwrap().as_bytes(), &mut out);
    let mut info = Vec::new();
    field(1, doc["info"]["title"].as_str().unwrap().as_bytes(), &mut info);
    field(2, doc["info"]["version"].as_str().unwrap().as_bytes(), &mut info);
    field(2, &info, &mut out);
    let mut defs = Vec::new();
    for (name, s) in doc["definitions"].as_object().unwrap() {
        field(1, &named(name, &schema(s)), &mut defs);
    }
    field(9, &defs, &mut out);
    out
}

/// Discovery as an API server answers it (the legacy, unaggregated form every kubectl reads):
/// `/api` (APIVersions), `/apis` (APIGroupList) and one APIResourceList per group version.
fn discovery(path: &str) -> Option<Value> {
    let verbs = json!(["create", "delete", "get", "list", "patch", "update", "watch"]);
    let resource = |name: &str, singular: &str, kind: &str, namespaced: bool| json!({"name": name, "singularName": singular, "namespaced": namespaced, "kind": kind, "verbs": verbs});
    let group = |(name, v): &(&str, &str)| json!({"name": name, "versions": [{"groupVersion": format!("{name}/{v}"), "version": v}], "preferredVersion": {"groupVersion": format!("{name}/{v}"), "version": v}});
    let list = |gv: &str, resources: Vec<Value>| json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources});
    Some(match path {
        "/api" => {
            json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
        }
        "/apis" => {
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": GROUPS.iter().map(group).collect::<Vec<_>>()})
        }
        "/api/v1" => list(
            "v1",
            vec![
                resource("namespaces", "namespace", "Namespace", false),
                resource("configmaps", "configmap", "ConfigMap", true),
                resource("serviceaccounts", "serviceaccount", "ServiceAccount", true),
                resource("pods", "pod", "Pod", true),
            ],
        ),
        "/apis/apps/v1" => {
            list("apps/v1", vec![resource("daemonsets", "daemonset", "DaemonSet", true)])
        }
        "/apis/node.k8s.io/v1" => list(
            "node.k8s.io/v1",
            vec![resource("runtimeclasses", "runtimeclass", "RuntimeClass", false)],
        ),
        "/apis/rbac.authorization.k8s.io/v1" => list(
            "rbac.authorization.k8s.io/v1",
            vec![
                resource("clusterroles", "clusterrole", "ClusterRole", false),
                resource("clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", false),
            ],
        ),
        "/apis/resource.k8s.io/v1" => list(
            "resource.k8s.io/v1",
            vec![
                resource("deviceclasses", "deviceclass", "DeviceClass", false),
                resource(
                    "resourceclaimtemplates",
                    "resourceclaimtemplate",
                    "ResourceClaimTemplate",
                    true,
                ),
                resource("resourceclaims", "resourceclaim", "ResourceClaim", true),
            ],
        ),
        "/apis/kubeflow.org/v2beta1" => {
            list("kubeflow.org/v2beta1", vec![resource("mpijobs", "mpijob", "MPIJob", true)])
        }
        _ => return None,
    })
}

struct FakeApiServer {
    port: u16,
    /// Every request path, in order.
    requests: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeApiServer {
    fn start() -> FakeApiServer {
        let doc: Value = serde_json::from_slice(
            &std::fs::read(workspace().join("testdata/k8s/openapi-v2.json")).unwrap(),
        )
        .unwrap();
        let openapi = openapi_v2_protobuf(&doc);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (requests, stop) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicBool::new(false)));
        let (seen, stopping) = (requests.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let _ = serve(conn, &openapi, &seen);
            }
        });
        FakeApiServer { port, requests, stop, thread: Some(thread) }
    }

    fn requested(&self, path: &str) -> bool {
        self.requests.lock().unwrap().iter().any(|p| p == path)
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One request per connection (`Connection: close`): GETs only, which is all a client-side dry
/// run sends; an object's GET is a 404, so `apply` takes it for a create.
fn serve(conn: TcpStream, openapi: &[u8], seen: &Mutex<Vec<String>>) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
    }
    let target = line.split_whitespace().nth(1).unwrap_or("/");
    let path = target.split('?').next().unwrap_or("/").to_string();
    seen.lock().unwrap().push(path.clone());
    let (status, ctype, body) = if path == "/openapi/v2" {
        ("200 OK", "application/com.github.proto-openapi.spec.v2.v1.0+protobuf", openapi.to_vec())
    } else if let Some(v) = discovery(&path) {
        ("200 OK", "application/json", serde_json::to_vec(&v).unwrap())
    } else {
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": format!("{path} not found"), "reason": "NotFound", "code": 404});
        ("404 Not Found", "application/json", serde_json::to_vec(&status).unwrap())
    };
    let mut conn = conn;
    write!(conn, "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())?;
    conn.write_all(&body)?;
    conn.flush()
}

/// kubectl pointed at `server`, with its own HOME and discovery cache.
struct Kubectl {
    dir: tempfile::TempDir,
}

impl Kubectl {
    fn new(server: &FakeApiServer) -> Kubectl {
        let dir = tempfile::Builder::new().prefix("erdma-kubectl-").tempdir().unwrap();
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\nusers:\n- name: fake\n  user: {{}}\n",
            server.port
        );
        std::fs::write(dir.path().join("kubeconfig"), config).unwrap();
        Kubectl { dir }
    }

    /// `kubectl apply --dry-run=client --validate=true -o json -f FILE`.
    fn dry_run(&self, file: &Path) -> Output {
        Command::new("kubectl")
            .env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            .env("HOME", self.dir.path())
            .args(["--cache-dir"])
            .arg(self.dir.path().join("cache"))
            .args(["apply", "--dry-run=client", "--validate=true", "-o", "json", "-f"])
            .arg(file)
            .stdin(Stdio::null())
            .output()
            .expect("kubectl")
    }
}

fn need_kubectl() -> bool {
    require(
        have("kubectl"),
        "kubectl is needed (Debian's kubernetes-client, or any kubectl on PATH)",
    )
}

/// The objects of a manifest file as kubectl sends them.
fn objects(kubectl: &Kubectl, file: &Path) -> Vec<Value> {
    let out = kubectl.dry_run(file);
    assert_success(&format!("kubectl apply --dry-run=client -f {}", file.display()), &out);
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("kubectl's JSON: {e}\n{}", text(&out.stdout)));
    match v["kind"].as_str() {
        Some("List") => v["items"].as_array().unwrap().clone(),
        _ => vec![v],
    }
}

/// `KIND/NAME` of each object, sorted.
fn kinds_and_names(objs: &[Value]) -> Vec<String> {
    let mut kinds: Vec<String> = objs
        .iter()
        .map(|o| {
            format!("{}/{}", o["kind"].as_str().unwrap(), o["metadata"]["name"].as_str().unwrap())
        })
        .collect();
    kinds.sort();
    kinds
}

#[test]
fn manifests_pass_kubectl_client_dry_run_with_schema_validation() {
    if !need_kubectl() {
        return;
    }
    let server = FakeApiServer::start();
    let kubectl = Kubectl::new(&server);
    for name in MANIFESTS {
        let kinds = kinds_and_names(&objects(&kubectl, &manifest(name)));
        let mut want = vec!["ConfigMap/erdma-kit-config", "DaemonSet/erdma-kit"];
        if name.contains("runtimeclass") {
            want.push("RuntimeClass/erdma");
        }
        if name.contains("dra") {
            want.extend([
                "ClusterRole/erdma-kit-dra",
                "ClusterRoleBinding/erdma-kit-dra",
                "DeviceClass/erdma.aliyun.com",
                "ServiceAccount/erdma-kit",
            ]);
            want.sort();
        }
        assert_eq!(kinds, want, "{name}");
    }
    assert!(
        server.requested("/openapi/v2"),
        "kubectl validated without reading the schema: {:?}",
        server.requests.lock().unwrap()
    );

    // The schema is really applied: a misspelt field, a wrong type and a missing required
    // field are each refused, in the kinds of 1.22 as in those DRA brought (resource.k8s.io/v1,
    // a Pod's claims) and the DRA plugin's RBAC.
    let tmp = tempfile::tempdir().unwrap();
    for (what, file, from, to, expect) in [
        (
            "misspelt field",
            "deploy/erdma-kit-nri.yaml",
            "mountPropagation: HostToContainer",
            "mountPropogation: HostToContainer",
            "unknown field \"mountPropogation\" in V1VolumeMount",
        ),
        (
            "wrong type",
            "deploy/erdma-kit-nri.yaml",
            "privileged: true",
            "privileged: [true]",
            "invalid type for V1SecurityContext.privileged: got \"array\", expected \"boolean\"",
        ),
        (
            "missing required field",
            "deploy/erdma-kit-runtimeclass.yaml",
            "handler: erdma",
            "",
            "missing required field \"handler\" in V1RuntimeClass",
        ),
        (
            "misspelt field in the DeviceClass",
            "deploy/erdma-kit-dra.yaml",
            "- cel:",
            "- cell:",
            "unknown field \"cell\" in V1DeviceSelector",
        ),
        (
            "wrong type in the ClusterRole",
            "deploy/erdma-kit-dra.yaml",
            "verbs: [\"get\"]",
            "verbs: get",
            "invalid type for V1PolicyRule.verbs: got \"string\", expected \"array\"",
        ),
        (
            "wrong type in the claim template",
            "deploy/examples/dra-one-eri.yaml",
            "count: 1",
            "count: \"1\"",
            "invalid type for V1ExactDeviceRequest.count: got \"string\", expected \"integer\"",
        ),
        (
            "missing required field in the claim template",
            "deploy/examples/dra-gpu-and-eri.yaml",
            "deviceClassName: gpu.nvidia.com",
            "",
            "missing required field \"deviceClassName\" in V1ExactDeviceRequest",
        ),
        (
            "misspelt field in the Pod's claims",
            "deploy/examples/dra-one-eri.yaml",
            "resourceClaimTemplateName: one-eri",
            "resourceClaimTemplate: one-eri",
            "unknown field \"resourceClaimTemplate\" in V1PodResourceClaim",
        ),
    ] {
        let src = std::fs::read_to_string(workspace().join(file)).unwrap();
        assert!(src.contains(from), "{what}: `{from}` is not in {file} any more");
        let bad = tmp.path().join("bad.yaml");
        std::fs::write(&bad, src.replacen(from, to, 1)).unwrap();
        let out = kubectl.dry_run(&bad);
        assert!(!out.status.success(), "{what}: kubectl accepted it\n{}", text(&out.stdout));
        let err = text(&out.stderr);
        assert!(err.contains(expect), "{what}: {err}");
    }
}

// ---------------------------------------------------------------------------------------------
// What the manifests say.

fn find<'a>(objs: &'a [Value], kind: &str) -> &'a Value {
    objs.iter().find(|o| o["kind"] == kind).unwrap_or_else(|| panic!("no {kind}"))
}

fn container<'a>(ds: &'a Value, name: &str) -> Option<&'a Value> {
    ds["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array().map(|a| a.iter().map(|s| s.as_str().unwrap()).collect()).unwrap_or_default()
}

fn env<'a>(c: &'a Value, name: &str) -> Option<&'a str> {
    c["env"].as_array()?.iter().find(|e| e["name"] == name)?["value"].as_str()
}

/// `--flag VALUE` in a command line.
fn flag<'a>(cmd: &[&'a str], name: &str) -> Option<&'a str> {
    cmd.iter().position(|a| *a == name).and_then(|i| cmd.get(i + 1).copied())
}

/// mount path -> (volume's host path, `configMap:NAME` or `projected:KIND+KIND…` naming its
/// sources' kinds, read-only, propagation).
fn mounts(ds: &Value, c: &Value) -> BTreeMap<String, (String, bool, String)> {
    let volumes = ds["spec"]["template"]["spec"]["volumes"].as_array().unwrap();
    c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let v = volumes
                .iter()
                .find(|v| v["name"] == m["name"])
                .unwrap_or_else(|| panic!("mount of an undefined volume {}", m["name"]));
            let source = match (v["hostPath"]["path"].as_str(), v["configMap"]["name"].as_str()) {
                (Some(p), _) => p.to_string(),
                (_, Some(cm)) => format!("configMap:{cm}"),
                _ if v["projected"].is_object() => {
                    let kinds: Vec<&str> = v["projected"]["sources"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|s| s.as_object().unwrap().keys().next().unwrap().as_str())
                        .collect();
                    format!("projected:{}", kinds.join("+"))
                }
                _ => panic!("volume {} is neither hostPath, configMap nor projected", v["name"]),
            };
            (
                m["mountPath"].as_str().unwrap().to_string(),
                (
                    source,
                    m["readOnly"].as_bool().unwrap_or(false),
                    m["mountPropagation"].as_str().unwrap_or("").to_string(),
                ),
            )
        })
        .collect()
}

fn is_qualified_label_key(key: &str) -> bool {
    // Kubernetes' IsQualifiedName: [prefix/]name, prefix a DNS subdomain, name 1-63 of
    // [A-Za-z0-9_.-] starting and ending alphanumeric.
    let (prefix, name) = key.rsplit_once('/').map(|(p, n)| (Some(p), n)).unwrap_or((None, key));
    let alnum_ends = |s: &str| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.chars().last().is_some_and(|c| c.is_ascii_alphanumeric())
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && alnum_ends(name)
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    let prefix_ok = prefix.is_none_or(|p| {
        p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && alnum_ends(l)
                    && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    });
    name_ok && prefix_ok
}

#[test]
fn manifests_mount_probe_and_name_what_the_node_needs() {
    if !need_kubectl() {
        return;
    }
    let server = FakeApiServer::start();
    let kubectl = Kubectl::new(&server);
    let all: BTreeMap<&str, Vec<Value>> =
        MANIFESTS.iter().map(|m| (*m, objects(&kubectl, &manifest(m)))).collect();
    let nri = &all["erdma-kit-nri.yaml"];
    let ds = find(nri, "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(ds["metadata"]["namespace"], "kube-system");

    // Where it runs: the operator's label, every taint, the host network, critical priority.
    let selector = pod["nodeSelector"].as_object().unwrap();
    assert_eq!(selector.len(), 1);
    let (label, value) = selector.iter().next().unwrap();
    assert!(is_qualified_label_key(label), "{label}");
    assert_eq!(value, "true");
    assert_eq!(pod["tolerations"], json!([{"operator": "Exists"}]));
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    assert_eq!(pod["automountServiceAccountToken"], false, "it talks to no API server");

    // The installer: the host root, the probe, the undo.
    let node = container(ds, "node").unwrap();
    let m = mounts(ds, node);
    assert_eq!(m["/host"], ("/".to_string(), false, "HostToContainer".to_string()));
    assert_eq!(
        m["/etc/erdma-kit"],
        ("configMap:erdma-kit-config".to_string(), true, String::new())
    );
    let script = format!("{IMAGE_BIN}/erdma-kit-node");
    assert_eq!(strings(&node["command"]), [script.as_str(), "run"]);
    assert_eq!(strings(&node["readinessProbe"]["exec"]["command"]), [script.as_str(), "doctor"]);
    assert!(
        node["livenessProbe"].is_null(),
        "a liveness failure would run preStop and undo the install"
    );
    assert_eq!(
        strings(&node["lifecycle"]["preStop"]["exec"]["command"]),
        [script.as_str(), "stop"]
    );
    assert_eq!(env(node, "ERDMA_HOST_ROOT"), Some("/host"));
    assert_eq!(env(node, "ERDMA_MODE"), Some("nri"));
    let cdi = env(node, "ERDMA_CDI_SPEC").unwrap();
    assert!(
        erdma_oci_hook::cdi::SPEC_DIRS
            .iter()
            .any(|d| Path::new(cdi).parent() == Some(Path::new(d))),
        "{cdi}"
    );
    let config_file = env(node, "ERDMA_CONFIG").unwrap();
    assert!(config_file.starts_with("/etc/erdma-kit/"));

    // The hook config parses as the binaries will read it (unknown keys are errors) and is the
    // host's view (the installer copies it to the host for erdma-runtime).
    let cm = find(nri, "ConfigMap");
    let toml_text =
        cm["data"][Path::new(config_file).file_name().unwrap().to_str().unwrap()].as_str().unwrap();
    let config: erdma_oci_hook::config::Config = toml::from_str(toml_text).unwrap();
    assert_eq!(
        (config.sysfs_root.as_path(), config.dev_root.as_path()),
        (Path::new("/sys"), Path::new("/dev"))
    );
    assert_eq!(config.memlock, erdma_oci_hook::config::Memlock::Unlimited);

    // The daemons: narrow mounts at the paths the config and their flags name.
    let dp = container(ds, "device-plugin").unwrap();
    let cmd = strings(&dp["command"]);
    assert_eq!(cmd[0], format!("{IMAGE_BIN}/erdma-device-plugin"));
    assert_eq!(flag(&cmd, "--resource"), Some(erdma_kube::deviceplugin::RESOURCE));
    let socket_dir = flag(&cmd, "--socket-dir").unwrap();
    assert_eq!(socket_dir, erdma_kube::kubelet::DEFAULT_DIR);
    let nri_c = container(ds, "nri-plugin").unwrap();
    let ncmd = strings(&nri_c["command"]);
    assert_eq!(ncmd[0], format!("{IMAGE_BIN}/erdma-nri-plugin"));
    let socket = flag(&ncmd, "--socket").unwrap();
    assert_eq!((flag(&ncmd, "--name"), flag(&ncmd, "--idx")), (Some("erdma"), Some("10")));
    let nri_dir = Path::new(socket).parent().unwrap().to_str().unwrap();
    assert_daemon_containers(ds, [(dp, socket_dir), (nri_c, nri_dir)], node, config_file);

    // The other two files: the same DaemonSet name and the same parts, so a node runs one mode
    // and the files cannot drift apart.
    let rt = &all["erdma-kit-runtimeclass.yaml"];
    let ack = &all["erdma-kit-nri-with-ack.yaml"];
    assert_eq!(find(rt, "ConfigMap")["data"], cm["data"]);
    // Beside ACK's controller the same settings: pods on any network, as ACK's and Terway's
    // own eRDMA set-ups allow.
    assert_eq!(find(ack, "ConfigMap")["data"], cm["data"]);
    assert_eq!(config.network, erdma_oci_hook::config::NetworkPolicy::Any);
    for objs in [rt, ack] {
        let other = find(objs, "DaemonSet");
        assert_eq!(other["metadata"]["name"], ds["metadata"]["name"]);
        let (a, b) = (&other["spec"]["template"]["spec"], pod);
        for key in ["nodeSelector", "tolerations", "hostNetwork", "priorityClassName"] {
            assert_eq!(a[key], b[key], "{key}");
        }
        let mut n = container(other, "node").unwrap().clone();
        let mut want = node.clone();
        for c in [&mut n, &mut want] {
            c["env"]
                .as_array_mut()
                .unwrap()
                .retain(|e| e["name"] != "ERDMA_MODE" && e["name"] != "ERDMA_ENGINE");
        }
        assert_eq!(n, want, "the installer container differs beyond its mode");
    }
    let rt_ds = find(rt, "DaemonSet");
    assert_eq!(env(container(rt_ds, "node").unwrap(), "ERDMA_MODE"), Some("runtime"));
    assert_eq!(container(rt_ds, "device-plugin"), Some(dp));
    assert!(container(rt_ds, "nri-plugin").is_none());
    let ack_ds = find(ack, "DaemonSet");
    assert!(
        container(ack_ds, "device-plugin").is_none(),
        "beside ACK's plugin, ours must not advertise aliyun/erdma too"
    );
    assert_eq!(container(ack_ds, "nri-plugin"), Some(nri_c));
    assert_eq!(env(container(ack_ds, "node").unwrap(), "ERDMA_MODE"), Some("nri"));

    // The RuntimeClass: the handler `configure` registers, only on the labelled nodes.
    let rc = find(rt, "RuntimeClass");
    assert_eq!(
        (rc["metadata"]["name"].as_str(), rc["handler"].as_str()),
        (Some("erdma"), Some("erdma"))
    );
    assert_eq!(rc["scheduling"]["nodeSelector"], pod["nodeSelector"]);

    // Every daemon's command line parses in the binary it names (clap reads the arguments
    // before `--help`, so an unknown or misspelt flag fails), in each manifest.
    let mut checked = 0;
    for (file, objs) in &all {
        let ds = find(objs, "DaemonSet");
        for c in ds["spec"]["template"]["spec"]["containers"].as_array().unwrap() {
            let cmd = strings(&c["command"]);
            let Some(name) = cmd[0].strip_prefix(&format!("{IMAGE_BIN}/")) else { continue };
            if !name.ends_with("-plugin") {
                continue; // erdma-kit-node: node_image_builds_offline_on_the_demo_base's
            }
            let out = std::process::Command::new(crate::support::bin(name))
                .args(&cmd[1..])
                .arg("--help")
                .env("NODE_NAME", "node-1")
                .output()
                .unwrap();
            assert_success(&format!("{file}: {}", cmd.join(" ")), &out);
            checked += 1;
        }
    }
    assert_eq!(checked, 6, "the plugins of the four DaemonSets");
}

/// The two daemons of the NRI DaemonSet (the device plugin and the NRI plugin, each with its
/// socket directory): narrow mounts at the paths the config and their flags name, no more
/// privilege than each needs, the same config and image as the installer.
fn assert_daemon_containers(
    ds: &Value,
    daemons: [(&Value, &str); 2],
    node: &Value,
    config_file: &str,
) {
    let nri_c = daemons[1].0;
    for (c, own) in daemons {
        let m = mounts(ds, c);
        let name = c["name"].as_str().unwrap();
        assert_eq!(
            m[own],
            (own.to_string(), false, String::new()),
            "{name}: its socket directory, the host's, writable"
        );
        assert_eq!(m["/sys"], ("/sys".to_string(), true, String::new()), "{name}");
        assert_eq!(
            m["/dev/infiniband"],
            ("/dev/infiniband".to_string(), true, String::new()),
            "{name}: the nodes under dev_root"
        );
        if c == nri_c {
            // The pods' network namespaces, also those made after it started (NCCL_SOCKET_IFNAME
            // is read from the pod's), and only the capability setns(2) into them needs.
            assert_eq!(
                m["/var/run/netns"],
                ("/var/run/netns".to_string(), true, "HostToContainer".to_string()),
                "{name}"
            );
            assert_eq!(
                c["securityContext"]["capabilities"]["add"],
                json!(["CAP_SYS_ADMIN"]),
                "{name}"
            );
            // Kubernetes' ValidateSecurityContext refuses allowPrivilegeEscalation: false
            // beside CAP_SYS_ADMIN.
            assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], Value::Null, "{name}");
            // Its records of the ERIs it gives, where the metrics read them: the host's
            // directory (they outlive a restart of the pod), writable.
            let records = flag(&strings(&c["command"]), "--records").unwrap();
            assert_eq!(records, NRI_RECORDS, "{name}");
            assert_eq!(m[records], (records.to_string(), false, String::new()), "{name}");
            assert_eq!(m.len(), 6, "{name}: {m:?}");
        } else {
            assert_eq!(c["securityContext"]["capabilities"]["add"], Value::Null, "{name}");
            assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], json!(false), "{name}");
            // The metrics: on the port the flag names, the pods from kubelet's PodResources
            // socket (read-only), the node's name from the downward API.
            let pr = std::path::Path::new(erdma_kube::holders::PODRESOURCES_SOCKET);
            let pr = pr.parent().unwrap().to_str().unwrap();
            assert_eq!(m[pr], (pr.to_string(), true, String::new()), "{name}");
            let cmd = strings(&c["command"]);
            assert_eq!(flag(&cmd, "--metrics-address"), Some(":9435"), "{name}");
            assert_eq!(
                c["ports"],
                json!([{"name": "metrics", "containerPort": 9435, "protocol": "TCP"}])
            );
            let node_name = c["env"].as_array().unwrap().iter().find(|e| e["name"] == "NODE_NAME");
            assert_eq!(node_name.unwrap()["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName");
            // The NRI plugin's records, read-only.
            assert_eq!(flag(&cmd, "--nri-records"), Some(NRI_RECORDS), "{name}");
            assert_eq!(m[NRI_RECORDS], (NRI_RECORDS.to_string(), true, String::new()), "{name}");
            assert_eq!(m.len(), 6, "{name}: {m:?}");
        }
        assert!(!m.contains_key("/host"), "{name}");
        assert_eq!(
            env(c, erdma_oci_hook::config::ENV_PATH),
            Some(config_file),
            "{name}: the same config"
        );
        assert_eq!(c["securityContext"]["privileged"], Value::Null, "{name}");
        assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]), "{name}");
        assert_eq!(c["image"], node["image"], "{name}: one image");
    }
}

// ---------------------------------------------------------------------------------------------
// Dynamic Resource Allocation: deploy/erdma-kit-dra.yaml and deploy/examples/.

/// The directory an in-cluster client reads its service account's token, CA and namespace from.
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// `erdma-kit-dra.yaml` is the NRI file with the device plugin replaced by the DRA plugin: the
/// same ConfigMap, installer and NRI plugin (which gives a claim's containers the memlock limit),
/// and the DRA plugin with its node's name, kubelet's plugin registry, its own plugin directory
/// and the CDI directory; a service account whose token only the DRA plugin mounts, bound to
/// exactly the access it needs; the DeviceClass pods claim ERIs of.
#[test]
fn dra_manifest_runs_the_dra_plugin_beside_the_nri_plugin() {
    if !need_kubectl() {
        return;
    }
    let server = FakeApiServer::start();
    let kubectl = Kubectl::new(&server);
    let nri = objects(&kubectl, &manifest("erdma-kit-nri.yaml"));
    let dra = objects(&kubectl, &manifest("erdma-kit-dra.yaml"));
    let (nri_ds, ds) = (find(&nri, "DaemonSet"), find(&dra, "DaemonSet"));
    let (nri_pod, pod) = (&nri_ds["spec"]["template"]["spec"], &ds["spec"]["template"]["spec"]);

    // The NRI file's parts, unchanged, under the same DaemonSet name: a node runs one variant.
    assert_eq!(find(&dra, "ConfigMap")["data"], find(&nri, "ConfigMap")["data"]);
    for key in ["name", "namespace"] {
        assert_eq!(ds["metadata"][key], nri_ds["metadata"][key], "{key}");
    }
    for key in ["nodeSelector", "tolerations", "hostNetwork", "priorityClassName"] {
        assert_eq!(pod[key], nri_pod[key], "{key}");
    }
    let names: Vec<&str> =
        pod["containers"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["node", "dra-plugin", "nri-plugin"]);
    for name in ["node", "nri-plugin"] {
        let (c, want) = (container(ds, name).unwrap(), container(nri_ds, name).unwrap());
        assert_eq!(c, want, "{name}");
        assert_eq!(mounts(ds, c), mounts(nri_ds, want), "{name}: its volumes");
    }
    assert_eq!(env(container(ds, "node").unwrap(), "ERDMA_MODE"), Some("nri"));

    // The DRA plugin: the driver, kubelet's directories and the CDI directory at the host's
    // paths, writable; the rest read-only, as the device plugin had them.
    let dp = container(ds, "dra-plugin").unwrap();
    let cmd = strings(&dp["command"]);
    assert_eq!(cmd[0], format!("{IMAGE_BIN}/erdma-dra-plugin"));
    assert_eq!(flag(&cmd, "--driver-name"), Some(DRA_DRIVER));
    assert_eq!(flag(&cmd, "--shares"), Some("1"), "an ERI goes to one claim at a time");
    let registry = flag(&cmd, "--registry-dir").unwrap();
    let plugin_dir = flag(&cmd, "--plugin-dir").unwrap();
    let cdi_dir = flag(&cmd, "--cdi-dir").unwrap();
    // The plugin's own defaults, spelt out so that the manifest says where kubelet looks.
    assert_eq!(registry, erdma_kube::dra::REGISTRY_DIR);
    assert_eq!(plugin_dir, erdma_kube::dra::PLUGIN_DIR);
    assert_eq!(cdi_dir, erdma_kube::dra::CDI_DIR);
    assert!(
        erdma_oci_hook::cdi::SPEC_DIRS.iter().any(|d| Path::new(cdi_dir) == Path::new(d)),
        "{cdi_dir}: not a directory the runtimes read CDI specs from"
    );
    let m = mounts(ds, dp);
    for dir in [registry, plugin_dir, cdi_dir] {
        assert_eq!(m[dir], (dir.to_string(), false, String::new()), "{dir}: the host's, writable");
    }
    assert_eq!(m["/sys"], ("/sys".to_string(), true, String::new()));
    assert_eq!(m["/dev/infiniband"], ("/dev/infiniband".to_string(), true, String::new()));
    let config_file = env(dp, erdma_oci_hook::config::ENV_PATH).unwrap();
    assert_eq!(
        Some(config_file),
        env(container(ds, "nri-plugin").unwrap(), erdma_oci_hook::config::ENV_PATH),
        "the same config"
    );
    assert_eq!(
        m[Path::new(config_file).parent().unwrap().to_str().unwrap()],
        ("configMap:erdma-kit-config".to_string(), true, String::new())
    );
    assert_eq!(
        m[SERVICE_ACCOUNT_DIR],
        ("projected:serviceAccountToken+configMap+downwardAPI".to_string(), true, String::new())
    );
    // The metrics, as the device plugin serves them in the other DaemonSets, with the claims'
    // devices from kubelet's PodResources.
    assert_eq!(flag(&cmd, "--metrics-address"), Some(":9435"));
    assert_eq!(flag(&cmd, "--nri-records"), Some(NRI_RECORDS));
    assert_eq!(m[NRI_RECORDS], (NRI_RECORDS.to_string(), true, String::new()));
    let pr = Path::new(erdma_kube::holders::PODRESOURCES_SOCKET).parent().unwrap();
    let pr = pr.to_str().unwrap();
    assert_eq!(m[pr], (pr.to_string(), true, String::new()));
    assert_eq!(dp["ports"], json!([{"name": "metrics", "containerPort": 9435, "protocol": "TCP"}]));
    assert_eq!(m.len(), 9, "{m:?}");
    let node_name = dp["env"].as_array().unwrap().iter().find(|e| e["name"] == "NODE_NAME");
    assert_eq!(
        node_name.map(|e| &e["valueFrom"]),
        Some(&json!({"fieldRef": {"fieldPath": "spec.nodeName"}})),
        "the ResourceSlice's node, from the downward API"
    );
    assert_eq!(
        dp["securityContext"],
        json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}})
    );
    assert_eq!(dp["image"], container(ds, "node").unwrap()["image"], "one image");

    // Its identity: the service account's token in this one container, at the in-cluster path.
    let sa = find(&dra, "ServiceAccount");
    assert_eq!(pod["serviceAccountName"], sa["metadata"]["name"]);
    assert_eq!(sa["metadata"]["namespace"], ds["metadata"]["namespace"]);
    assert_eq!(pod["automountServiceAccountToken"], false, "not in every container");
    for c in pod["containers"].as_array().unwrap() {
        let token =
            mounts(ds, c).values().any(|(source, ..)| source.contains("serviceAccountToken"));
        assert_eq!(token, c["name"] == "dra-plugin", "{}: the token", c["name"]);
    }
    let token = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|v| {
            v["projected"]["sources"].as_array()?.iter().find_map(|s| s.get("serviceAccountToken"))
        })
        .unwrap();
    assert_eq!(token["path"], "token");

    // Bound to exactly what the plugin does: its node's ResourceSlice, the claims it prepares,
    // its node.
    let role = find(&dra, "ClusterRole");
    let binding = find(&dra, "ClusterRoleBinding");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}])
    );
    let mut granted = Vec::new();
    for rule in role["rules"].as_array().unwrap() {
        let keys: Vec<&str> = rule.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["apiGroups", "resources", "verbs"], "no names, no URLs: {rule}");
        for g in strings(&rule["apiGroups"]) {
            for r in strings(&rule["resources"]) {
                for v in strings(&rule["verbs"]) {
                    granted.push(format!("{g}/{r} {v}"));
                }
            }
        }
    }
    granted.sort();
    let mut want: Vec<String> = ["get", "list", "watch", "create", "update", "delete"]
        .iter()
        .map(|v| format!("resource.k8s.io/resourceslices {v}"))
        .chain(["resource.k8s.io/resourceclaims get".to_string(), "/nodes get".to_string()])
        .collect();
    want.sort();
    assert_eq!(granted, want);

    // The DeviceClass: this driver's ERIs whose port is ACTIVE.
    let class = find(&dra, "DeviceClass");
    assert_eq!(class["metadata"]["name"], DRA_DRIVER);
    assert_eq!(
        class["spec"]["selectors"],
        json!([{"cel": {"expression": format!("device.driver == \"{DRA_DRIVER}\" && device.attributes[\"{DRA_DRIVER}\"].portState == \"ACTIVE\"")}}])
    );

    // The whole of what the DRA variant adds, as kubectl prints it.
    let nri_volumes = nri_pod["volumes"].as_array().unwrap();
    let volumes: Vec<&Value> =
        pod["volumes"].as_array().unwrap().iter().filter(|v| !nri_volumes.contains(v)).collect();
    let added = json!({
        "dra-plugin": dp,
        "volumes": volumes,
        "ClusterRole": role["rules"],
        "DeviceClass": class["spec"],
    });
    insta::assert_json_snapshot!("dra_plugin_rbac_and_device_class", added);
}

/// An MPIJob's replicas' pod templates as Pods (`NAME-ROLE`), each written as JSON into `dir`
/// for kubectl: what the MPI Operator makes of them.
fn mpijob_pods(job: &Value, dir: &Path) -> Vec<PathBuf> {
    let name = job["metadata"]["name"].as_str().unwrap();
    job["spec"]["mpiReplicaSpecs"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(role, replica)| {
            let pod = json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": format!("{name}-{}", role.to_lowercase())},
                "spec": replica["template"]["spec"],
            });
            let path = dir.join(format!("{name}-{role}.json"));
            std::fs::write(&path, serde_json::to_vec(&pod).unwrap()).unwrap();
            path
        })
        .collect()
}

/// `deploy/examples/*.yaml` through kubectl like the manifests. The MPIJob is a custom resource
/// the fake server maps but has no schema for (as kubectl skips validating a CRD without one), so
/// its replicas' pod templates are validated as Pods of their own. Then what the claims say: each
/// pod claims through a ResourceClaimTemplate of its file and each container names one of its
/// pod's claims; each request is one device, an ERI from the DeviceClass of erdma-kit-dra.yaml or
/// a GPU from NVIDIA's; a GPU and an ERI are matched by PCIe root.
#[test]
fn dra_examples_pass_kubectl_client_dry_run_with_schema_validation() {
    if !need_kubectl() {
        return;
    }
    let server = FakeApiServer::start();
    let kubectl = Kubectl::new(&server);
    let tmp = tempfile::tempdir().unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(workspace().join("deploy/examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut examples = BTreeMap::new();
    for file in &files {
        let name = file.file_name().unwrap().to_str().unwrap().to_string();
        let objs = objects(&kubectl, file);
        let mut pods = Vec::new();
        for o in &objs {
            match o["kind"].as_str().unwrap() {
                "Pod" => pods.push(o.clone()),
                "MPIJob" => {
                    for path in mpijob_pods(o, tmp.path()) {
                        pods.extend(objects(&kubectl, &path));
                    }
                }
                "ResourceClaimTemplate" => {}
                other => panic!("{name}: a {other}"),
            }
        }
        examples.insert(name, (objs, pods));
    }
    let names: Vec<&String> = examples.keys().collect();
    assert_eq!(names, ["dra-gpu-and-eri.yaml", "dra-mpijob.yaml", "dra-one-eri.yaml"]);
    for (name, want) in [
        ("dra-gpu-and-eri.yaml", ["Pod/gpu-eri-check", "ResourceClaimTemplate/gpu-and-eri"]),
        ("dra-mpijob.yaml", ["MPIJob/nccl-allreduce", "ResourceClaimTemplate/nccl-gpu-and-eri"]),
        ("dra-one-eri.yaml", ["Pod/eri-check", "ResourceClaimTemplate/one-eri"]),
    ] {
        assert_eq!(kinds_and_names(&examples[name].0), want, "{name}");
    }
    assert!(server.requested("/apis/resource.k8s.io/v1"), "kubectl did not map resource.k8s.io");

    for (name, (objs, pods)) in &examples {
        let templates: BTreeMap<&str, &Value> = objs
            .iter()
            .filter(|o| o["kind"] == "ResourceClaimTemplate")
            .map(|t| (t["metadata"]["name"].as_str().unwrap(), &t["spec"]["spec"]["devices"]))
            .collect();
        let mut used = Vec::new();
        for pod in pods {
            let pod_name = pod["metadata"]["name"].as_str().unwrap();
            let claims: Vec<&str> = pod["spec"]["resourceClaims"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    let template = c["resourceClaimTemplateName"].as_str().unwrap();
                    assert!(
                        templates.contains_key(template),
                        "{name}: {pod_name} claims through {template}, not in the file"
                    );
                    used.push(template);
                    c["name"].as_str().unwrap()
                })
                .collect();
            for c in pod["spec"]["containers"].as_array().unwrap() {
                for claim in c["resources"]["claims"].as_array().into_iter().flatten() {
                    let claim = claim["name"].as_str().unwrap();
                    assert!(
                        claims.contains(&claim),
                        "{name}: {pod_name}/{}: no pod claim {claim}",
                        c["name"]
                    );
                }
            }
        }
        for (template, devices) in &templates {
            assert!(used.contains(template), "{name}: {template} is claimed by no pod");
            let mut requests: Vec<&str> = Vec::new();
            for r in devices["requests"].as_array().unwrap() {
                let request = r["name"].as_str().unwrap();
                let class = match request {
                    "eri" => DRA_DRIVER,
                    "gpu" => "gpu.nvidia.com",
                    other => panic!("{name}: {template}: request {other}"),
                };
                assert_eq!(r["exactly"]["deviceClassName"], class, "{name}: {template}/{request}");
                assert_eq!(r["exactly"]["count"], 1, "{name}: {template}/{request}");
                requests.push(request);
            }
            if requests.contains(&"gpu") {
                assert_eq!(requests, ["gpu", "eri"], "{name}: {template}");
                assert_eq!(
                    devices["constraints"],
                    json!([{"requests": ["gpu", "eri"], "matchAttribute": PCIE_ROOT}]),
                    "{name}: {template}: the GPU and the ERI on one PCIe root"
                );
            } else {
                assert_eq!(requests, ["eri"], "{name}: {template}");
                assert!(devices["constraints"].is_null(), "{name}: {template}");
            }
        }
    }

    // The MPIJob is not validated as such (kubectl has no schema for it), its pods are: a
    // misspelt field in the worker's template passes the first and fails the second.
    let src = std::fs::read_to_string(workspace().join("deploy/examples/dra-mpijob.yaml")).unwrap();
    let from = "resourceClaimTemplateName: nccl-gpu-and-eri";
    assert!(src.contains(from));
    let bad = tmp.path().join("bad-mpijob.yaml");
    std::fs::write(&bad, src.replacen(from, "resourceClaimTemplate: nccl-gpu-and-eri", 1)).unwrap();
    let job = objects(&kubectl, &bad).into_iter().find(|o| o["kind"] == "MPIJob").unwrap();
    let refused: Vec<String> = mpijob_pods(&job, tmp.path())
        .iter()
        .map(|p| kubectl.dry_run(p))
        .filter(|out| !out.status.success())
        .map(|out| text(&out.stderr))
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains("unknown field \"resourceClaimTemplate\" in V1PodResourceClaim"),
        "{}",
        refused[0]
    );

    // The MPIJob: each worker claims its own pair, the launcher none; sshd's sessions get the
    // claim's settings from the file each worker writes before it starts sshd.
    let (_, pods) = &examples["dra-mpijob.yaml"];
    let pod = |role: &str| {
        pods.iter()
            .find(|p| p["metadata"]["name"] == format!("nccl-allreduce-{role}"))
            .unwrap_or_else(|| panic!("no {role}"))
    };
    let (launcher, worker) = (pod("launcher"), pod("worker"));
    assert!(launcher["spec"]["resourceClaims"].is_null());
    assert_eq!(worker["spec"]["resourceClaims"].as_array().unwrap().len(), 1);
    let script = |p: &Value| strings(&p["spec"]["containers"][0]["args"]).join(" ");
    assert!(
        script(worker).contains("> /tmp/erdma-env.sh && exec /usr/sbin/sshd -De"),
        "{}",
        script(worker)
    );
    assert!(
        script(launcher).contains(" . /tmp/erdma-env.sh && exec all_reduce_perf"),
        "{}",
        script(launcher)
    );

    // The resource.k8s.io objects also hold against the API server's own OpenAPI document,
    // the one the DRA driver's writes are checked against (testdata/k8s/openapi-v3/).
    let schema = erdma_testkit::openapi::Schema::load(
        &workspace().join("testdata/k8s/openapi-v3/apis__resource.k8s.io__v1_openapi.json"),
    )
    .unwrap();
    let dra = objects(&kubectl, &manifest("erdma-kit-dra.yaml"));
    let mut checked = Vec::new();
    for o in examples.values().flat_map(|(objs, _)| objs).chain(&dra) {
        if o["apiVersion"] != "resource.k8s.io/v1" {
            continue;
        }
        let kind = o["kind"].as_str().unwrap();
        let name = format!("{kind}/{}", o["metadata"]["name"].as_str().unwrap());
        let def = schema.for_kind("resource.k8s.io", "v1", kind).unwrap();
        assert_eq!(schema.validate(def, o), Vec::<String>::new(), "{name}");
        checked.push(name);
    }
    checked.sort();
    assert_eq!(
        checked,
        [
            "DeviceClass/erdma.aliyun.com",
            "ResourceClaimTemplate/gpu-and-eri",
            "ResourceClaimTemplate/nccl-gpu-and-eri",
            "ResourceClaimTemplate/one-eri"
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// erdma-kit-node on a fake host.

/// How a tree is, entry by entry: type, mode, owner, content (hashed) or link target or device
/// number. Not times: a directory's mtime changes with every file made and removed in it.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap()).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            let ft = md.file_type();
            let perm = format!("{:o} {}:{}", md.mode() & 0o7777, md.uid(), md.gid());
            let what = if ft.is_symlink() {
                format!("link -> {}", std::fs::read_link(&p).unwrap().display())
            } else if ft.is_dir() {
                walk(root, &p, out);
                format!("dir {perm}")
            } else if ft.is_char_device() || ft.is_block_device() {
                format!("dev {perm} {:x}", md.rdev())
            } else if ft.is_file() {
                let mut h = std::hash::DefaultHasher::new();
                std::hash::Hash::hash(&std::fs::read(&p).unwrap(), &mut h);
                format!("file {perm} {} {:016x}", md.len(), std::hash::Hasher::finish(&h))
            } else {
                format!("other {perm}")
            };
            out.insert(p.strip_prefix(root).unwrap().to_path_buf(), what);
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn assert_same_tree(before: &BTreeMap<PathBuf, String>, after: &BTreeMap<PathBuf, String>) {
    let mut diff = Vec::new();
    for (p, w) in before {
        match after.get(p) {
            None => diff.push(format!("- {} {w}", p.display())),
            Some(a) if a != w => diff.push(format!("~ {} {w} => {a}", p.display())),
            _ => {}
        }
    }
    diff.extend(
        after
            .iter()
            .filter(|(p, _)| !before.contains_key(*p))
            .map(|(p, a)| format!("+ {} {a}", p.display())),
    );
    assert!(diff.is_empty(), "the host tree is not as it was:\n{}", diff.join("\n"));
}

/// The hook config of the ConfigMap, as the DaemonSet mounts it: the `oci-hook.toml: |` block.
fn configmap_toml() -> String {
    let text = std::fs::read_to_string(manifest("erdma-kit-nri.yaml")).unwrap();
    let mut lines = text.lines().skip_while(|l| l.trim() != "oci-hook.toml: |").skip(1);
    let first = lines.next().unwrap();
    let indent = first.len() - first.trim_start().len();
    std::iter::once(first)
        .chain(lines.take_while(|l| l.len() > indent && l[..indent].trim().is_empty()))
        .map(|l| format!("{}\n", &l[indent..]))
        .collect()
}

/// A copy of `from` at `to`, stripped of its debug info when `strip` is there (the debug
/// binaries are over 100 MB).
fn copy_stripped(from: &Path, to: &Path) {
    let stripped = have("strip")
        && Command::new("strip").arg("-o").arg(to).arg(from).status().is_ok_and(|s| s.success());
    if !stripped {
        std::fs::copy(from, to).unwrap();
    }
}

struct FakeHost {
    dir: tempfile::TempDir,
}

impl FakeHost {
    /// A host root: the `two` fixture's sysfs and its device nodes, the shared libraries our
    /// (dynamically linked, test-built) binaries need, `/proc/self/exe` (a link naming the hook,
    /// which is all `configure` reads of /proc), `/var/run` -> `/run` (absolute, as on Debian and
    /// Ubuntu), a hook config of the host's own, containerd's and CRI-O's configs; no /opt. Then
    /// the payload (the image's /opt/erdma/bin) beside it.
    fn new() -> FakeHost {
        let dir = tempfile::Builder::new().prefix("erdma-fake-host-").tempdir().unwrap();
        let root = dir.path().join("root");
        copy_tree(&sysfs_fixtures().join("two/sys"), &root.join("sys"));
        for n in dev_nodes("two") {
            mknod(&root.join("dev").join(&n.path), n.kind, n.major, n.minor);
        }
        let ldd = Command::new("ldd").arg(bin("erdma-oci-hook")).output().unwrap();
        for lib in text(&ldd.stdout).split_whitespace().filter(|w| w.starts_with('/')) {
            let dst = root.join(lib.trim_start_matches('/'));
            std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
            std::fs::copy(lib, &dst).unwrap();
        }
        std::fs::create_dir_all(root.join("proc/self")).unwrap();
        symlink("/opt/erdma/bin/erdma-oci-hook", root.join("proc/self/exe")).unwrap();
        std::fs::create_dir_all(root.join("run")).unwrap();
        std::fs::create_dir_all(root.join("var")).unwrap();
        symlink("/run", root.join("var/run")).unwrap();
        std::fs::create_dir_all(root.join("etc/erdma")).unwrap();
        std::fs::write(
            root.join("etc/erdma/oci-hook.toml"),
            "# the host's own\nlog_level = \"debug\"\n",
        )
        .unwrap();
        std::fs::create_dir_all(root.join("etc/containerd")).unwrap();
        std::fs::write(
            root.join("etc/containerd/config.toml"),
            "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n",
        )
        .unwrap();
        std::fs::create_dir_all(root.join("etc/crio")).unwrap();
        std::fs::write(root.join("etc/crio/crio.conf"), "[crio.runtime.runtimes.runc]\nruntime_path = \"/usr/bin/runc\"\nruntime_root = \"/run/runc\"\n").unwrap();
        std::fs::create_dir_all(dir.path().join("tmp")).unwrap();

        let payload = dir.path().join("payload");
        std::fs::create_dir_all(&payload).unwrap();
        for b in ["erdma-oci-hook", "erdma-runtime"] {
            copy_stripped(&bin(b), &payload.join(b));
        }
        std::fs::write(dir.path().join("oci-hook.toml"), configmap_toml()).unwrap();
        FakeHost { dir }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// `sh deploy/node/erdma-kit-node ARGS` as the DaemonSet's installer container runs it.
    fn node(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new("sh");
        cmd.arg(workspace().join("deploy/node/erdma-kit-node"))
            .args(args)
            .env("ERDMA_HOST_ROOT", self.root())
            .env("ERDMA_CONFIG", self.dir.path().join("oci-hook.toml"))
            .env("ERDMA_PAYLOAD", self.dir.path().join("payload"))
            .env("ERDMA_CDI_SPEC", "/var/run/cdi/erdma.json")
            .env("TMPDIR", self.dir.path().join("tmp"))
            .env_remove(erdma_oci_hook::config::ENV_PATH)
            .env_remove("ERDMA_MODE")
            .env_remove("ERDMA_ENGINE")
            .env_remove("ERDMA_UNINSTALL_ON_STOP")
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }

    fn ok(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let out = self.node(args, env);
        assert_success(&format!("erdma-kit-node {}", args.join(" ")), &out);
        text(&out.stderr)
    }

    fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.root().join(path.trim_start_matches('/')))
            .unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn record(&self) -> Vec<String> {
        let mut lines: Vec<String> =
            self.read("/opt/erdma/state/record").lines().map(str::to_string).collect();
        lines.sort();
        lines
    }
}

fn need_root_and_chroot() -> bool {
    require(
        is_root(),
        "root is needed to mknod the fixture's nodes and to chroot into the fake host",
    ) && require(
        have("chroot") && have("ldd") && have("sha256sum") && have("flock"),
        "chroot, ldd, sha256sum and flock are needed",
    )
}

#[test]
fn node_install_then_uninstall_leaves_the_host_as_it_was_root() {
    if !need_root_and_chroot() {
        return;
    }
    for (mode, engine) in
        [("nri", None), ("runtime", Some("containerd")), ("runtime", Some("crio"))]
    {
        let host = FakeHost::new();
        let root = host.root();
        let before = snapshot(&root);
        let mut env = vec![("ERDMA_MODE", mode)];
        if let Some(e) = engine {
            env.push(("ERDMA_ENGINE", e));
        }
        let what = format!("{mode} {}", engine.unwrap_or(""));
        let log = host.ok(&["install"], &env);
        assert!(log.contains(&format!("installed ({mode} mode)")), "{what}: {log}");

        // Between: the binaries, the host's config replaced, the CDI spec under the real /run.
        for b in ["erdma-oci-hook", "erdma-runtime"] {
            let installed = root.join("opt/erdma/bin").join(b);
            assert_eq!(
                std::fs::read(&installed).unwrap(),
                std::fs::read(host.dir.path().join("payload").join(b)).unwrap(),
                "{what}: {b}"
            );
            assert_eq!(installed.metadata().unwrap().mode() & 0o777, 0o755);
        }
        assert_eq!(
            host.read("/opt/erdma/bin/erdma-kit-node"),
            std::fs::read_to_string(workspace().join("deploy/node/erdma-kit-node")).unwrap()
        );
        assert_eq!(host.read("/etc/erdma/oci-hook.toml"), configmap_toml(), "{what}");
        assert!(root.join("var/run").is_symlink(), "the link stays a link");
        let spec: Value = serde_json::from_str(&host.read("/run/cdi/erdma.json")).unwrap();
        assert_eq!(spec["kind"], erdma_oci_hook::cdi::KIND);
        let names: Vec<&str> = spec["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["erdma_0", "erdma_1", "all"], "{what}");
        // Made inside the host root: device paths are the host's, with no hostPath of ours.
        assert_eq!(
            spec["devices"][0]["containerEdits"]["deviceNodes"][0],
            json!({"path": "/dev/infiniband/uverbs0", "type": "c", "major": 231, "minor": 192, "permissions": "rw"})
        );
        match engine {
            Some("containerd") => {
                let drop_in = host.read("/etc/containerd/conf.d/erdma.toml");
                assert!(
                    drop_in.contains("BinaryName = \"/opt/erdma/bin/erdma-runtime\""),
                    "{drop_in}"
                );
                assert!(
                    drop_in.contains("SystemdCgroup = true"),
                    "the runc handler's options are kept: {drop_in}"
                );
                // The import the host's containerd will follow: a host path, not ours.
                assert!(host
                    .read("/etc/containerd/config.toml")
                    .contains("imports = [\"/etc/containerd/conf.d/*.toml\"]"));
            }
            Some("crio") => {
                let drop_in = host.read("/etc/crio/crio.conf.d/99-erdma.conf");
                assert!(
                    drop_in.contains("[crio.runtime.runtimes.erdma]")
                        && drop_in.contains("runtime_path = \"/opt/erdma/bin/erdma-runtime\""),
                    "{drop_in}"
                );
            }
            _ => {
                assert!(
                    !root.join("etc/containerd/conf.d").exists()
                        && !root.join("etc/crio/crio.conf.d").exists(),
                    "NRI mode writes no engine config"
                );
                assert!(log.contains("no NRI socket at /var/run/nri/nri.sock"), "{log}");
            }
        }

        // The readiness probe: doctor on the host, through the host root.
        let doctor = host.node(&["doctor"], &env);
        assert_success(&format!("{what}: doctor"), &doctor);
        let report = text(&doctor.stdout);
        assert!(report.contains("CDI spec /var/run/cdi/erdma.json is current"), "{report}");
        if engine == Some("containerd") {
            assert!(report.contains("runtime handler `erdma` in /etc/containerd/conf.d/erdma.toml runs /opt/erdma/bin/erdma-runtime"), "{report}");
        }

        // A container restart installs again: nothing new on record, no second backup.
        let record = host.record();
        host.ok(&["install"], &env);
        assert_eq!(host.record(), record, "{what}: a second install changed the record");
        let backups = std::fs::read_dir(root.join("etc/containerd"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains("erdma-backup"))
            .count();
        assert!(backups <= 1, "{what}: {backups} backups of config.toml");

        // A device goes: refresh rewrites the spec (and its record), and back.
        std::fs::remove_file(root.join("dev/infiniband/uverbs1")).unwrap();
        assert!(host.ok(&["refresh"], &env).contains("wrote the CDI spec"));
        assert!(!host.read("/run/cdi/erdma.json").contains("erdma_1"));
        mknod(&root.join("dev/infiniband/uverbs1"), 'c', 231, 193);
        host.ok(&["refresh"], &env);
        assert!(host.read("/run/cdi/erdma.json").contains("erdma_1"));
        assert!(host.ok(&["refresh"], &env).is_empty(), "nothing changed, nothing written");

        // preStop with uninstall turned off leaves everything.
        let mid = snapshot(&root);
        assert!(host
            .ok(&["stop"], &[("ERDMA_UNINSTALL_ON_STOP", "false")])
            .contains("leaving the host as it is"));
        assert_same_tree(&mid, &snapshot(&root));

        let log = host.ok(&["stop"], &env);
        assert!(log.ends_with("erdma-kit-node: uninstalled\n"), "{what}: {log}");
        if engine.is_some() {
            assert!(log.contains("keeps it until it restarts"), "{log}");
        }
        assert_same_tree(&before, &snapshot(&root));
        // And once more: nothing to undo.
        assert!(host.ok(&["uninstall"], &env).contains("nothing to undo"));
        assert_same_tree(&before, &snapshot(&root));
    }
}

#[test]
fn node_uninstall_leaves_what_was_changed_since_root() {
    if !need_root_and_chroot() {
        return;
    }
    let host = FakeHost::new();
    let root = host.root();
    host.ok(&["install"], &[("ERDMA_MODE", "nri")]);
    std::fs::write(root.join("etc/erdma/oci-hook.toml"), "memlock = 8388608\n").unwrap();
    let log = host.ok(&["uninstall"], &[]);
    assert!(log.contains("warning: /etc/erdma/oci-hook.toml changed since it was installed: left in place, its original is /opt/erdma/state/backup/%etc%erdma%oci-hook.toml"), "{log}");
    assert!(log.contains("warning: /opt/erdma/state/backup is not empty"), "{log}");
    assert_eq!(
        host.read("/etc/erdma/oci-hook.toml"),
        "memlock = 8388608\n",
        "the operator's edit is kept"
    );
    assert!(
        host.read("/opt/erdma/state/backup/%etc%erdma%oci-hook.toml").contains("the host's own"),
        "and so is the original"
    );
    assert!(
        !root.join("opt/erdma/bin").exists() && !root.join("run/cdi").exists(),
        "the rest is gone"
    );
}

// ---------------------------------------------------------------------------------------------
// scripts/node-image

/// `erdma-build`, built (or found up to date) by cargo; its path from cargo's own report.
fn erdma_build() -> PathBuf {
    // The workspace's test build has it already (builder's tests need the binary): beside this
    // test binary's `deps/`. Built here only when this package's tests run alone.
    if let Some(built) = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("erdma-build")))
        .filter(|p| p.is_file())
    {
        return built;
    }
    let out = Command::new(std::env::var_os("CARGO").unwrap_or("cargo".into()))
        .args([
            "build",
            "--quiet",
            "-p",
            "erdma-build",
            "--bin",
            "erdma-build",
            "--message-format",
            "json",
        ])
        .current_dir(workspace())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo build -p erdma-build failed");
    text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "erdma-build")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo named no erdma-build executable")
}

#[test]
fn node_image_builds_offline_on_the_demo_base() {
    if !require(have("dpkg-deb") && have("tar"), "dpkg-deb and tar are needed") {
        return;
    }
    let tmp = tempfile::Builder::new().prefix("erdma-node-image-").tempdir().unwrap();
    let bins = tmp.path().join("bin");
    std::fs::create_dir_all(&bins).unwrap();
    for b in [
        "erdma-oci-hook",
        "erdma-runtime",
        "erdma-device-plugin",
        "erdma-dra-plugin",
        "erdma-nri-plugin",
    ] {
        copy_stripped(&bin(b), &bins.join(b));
    }
    let layout = tmp.path().join("out");
    let started = std::time::Instant::now();
    let out = Command::new(workspace().join("scripts/node-image"))
        .args(["--demo", "--bin-dir"])
        .arg(&bins)
        .arg("--erdma-build")
        .arg(erdma_build())
        .arg("--output")
        .arg(format!("oci:{}:node", layout.display()))
        .current_dir(workspace())
        .env("XDG_CACHE_HOME", tmp.path().join("cache"))
        .output()
        .unwrap();
    assert_success("scripts/node-image --demo", &out);
    eprintln!("scripts/node-image --demo took {:?}", started.elapsed());

    // The layout's image: its top layer holds the binaries and the script, byte for byte.
    let blob =
        |digest: &str| layout.join("blobs/sha256").join(digest.trim_start_matches("sha256:"));
    let read_json = |p: PathBuf| -> Value {
        serde_json::from_slice(
            &std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
        )
        .unwrap()
    };
    let index = read_json(layout.join("index.json"));
    let m = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == "node")
        .expect("the tag");
    let manifest = read_json(blob(m["digest"].as_str().unwrap()));
    let layer =
        blob(manifest["layers"].as_array().unwrap().last().unwrap()["digest"].as_str().unwrap());
    let list = Command::new("tar").arg("-tzf").arg(&layer).output().unwrap();
    assert_success("tar -t", &list);
    let entries: Vec<String> =
        text(&list.stdout).lines().map(|l| l.trim_start_matches("./").to_string()).collect();
    for b in [
        "erdma-oci-hook",
        "erdma-runtime",
        "erdma-device-plugin",
        "erdma-dra-plugin",
        "erdma-nri-plugin",
        "erdma-kit-node",
    ] {
        let path = format!("{}/{b}", IMAGE_BIN.trim_start_matches('/'));
        assert!(entries.contains(&path), "{path} not in the layer: {entries:?}");
        let content = Command::new("tar").arg("-xzOf").arg(&layer).arg(&path).output().unwrap();
        let want = if b == "erdma-kit-node" {
            workspace().join("deploy/node/erdma-kit-node")
        } else {
            bins.join(b)
        };
        assert!(
            content.stdout == std::fs::read(&want).unwrap(),
            "{path} differs from {}",
            want.display()
        );
    }
    assert!(
        entries.iter().any(|e| e == "var/lib/dpkg/info/erdma-kit-node.list"),
        "installed the dpkg way"
    );
    let config = read_json(blob(manifest["config"]["digest"].as_str().unwrap()));
    let env: Vec<&str> = strings(&config["config"]["Env"]);
    assert!(env.iter().any(|e| e.starts_with("PATH=/opt/erdma/bin:")), "{env:?}");
    assert!(
        !env.iter().any(|e| e.starts_with("NCCL_")),
        "no NCCL presets in the node image: {env:?}"
    );
    assert!(
        config["config"]["Labels"]["com.alibabacloud.erdma.unsigned-packages"]
            .as_str()
            .is_some_and(|l| l.contains("erdma-kit-node")),
        "{}",
        config["config"]["Labels"]
    );
}
