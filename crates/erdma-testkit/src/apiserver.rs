//! A stand-in for kube-apiserver, for the requests a DRA driver makes (no kube-apiserver can be
//! built and run here: docs/testing.md says why): ResourceSlices created, read, replaced;
//! ResourceClaims and Nodes read. It answers as the API server does where a driver can tell:
//! objects get a `uid`, a `resourceVersion` that changes on every write and a
//! `creationTimestamp`; a replace must carry the `resourceVersion` it read or gets `409
//! Conflict`; a create of a name that exists gets `409 AlreadyExists`; a missing object `404
//! NotFound`; errors are `Status` objects. Every body written is checked against the API's own
//! OpenAPI schema ([`crate::openapi`]): one that fails gets `422 Invalid` naming each
//! violation, and the violations are kept for the test to assert there were none.
//!
//! Served over plain HTTP on 127.0.0.1 (a kubeconfig or `kube::Config::new` points there).
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use crate::openapi::Schema;

/// One request as the stand-in saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    pub status: u16,
}

struct State {
    schema: Schema,
    /// Objects by their path (`/apis/resource.k8s.io/v1/resourceslices/NAME`).
    objects: BTreeMap<String, Value>,
    version: u64,
    log: Vec<Logged>,
    violations: Vec<String>,
    /// Answer the next request whose method and path match with this status instead.
    fail_next: Vec<(Method, String, u16)>,
    /// Answer the next request whose method and path match only after this long.
    delay_next: Vec<(Method, String, std::time::Duration)>,
}

/// The stand-in, serving until dropped.
pub struct ApiServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The kind and group version of the objects under a collection (the resources a DRA driver
/// uses), or `None`.
fn kind_of(resource: &str) -> Option<(&'static str, &'static str, &'static str)> {
    match resource {
        "resourceslices" => Some(("resource.k8s.io", "v1", "ResourceSlice")),
        "resourceclaims" => Some(("resource.k8s.io", "v1", "ResourceClaim")),
        "deviceclasses" => Some(("resource.k8s.io", "v1", "DeviceClass")),
        "nodes" => Some(("", "v1", "Node")),
        _ => None,
    }
}

/// (collection path, resource, name) of a request path.
fn split(path: &str) -> Option<(String, String, Option<String>)> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/... or /apis/GROUP/VERSION/...
    let rest = match *parts.first()? {
        "api" => parts.get(2..)?,
        "apis" => parts.get(3..)?,
        _ => return None,
    };
    let prefix_len = parts.len() - rest.len();
    let (resource_at, name_at) = match rest {
        ["namespaces", _, _] | ["namespaces", _, _, _] => (2, 3),
        [_] | [_, _] => (0, 1),
        _ => return None,
    };
    let resource = rest.get(resource_at)?.to_string();
    let collection = format!("/{}", parts[..prefix_len + resource_at + 1].join("/"));
    Some((collection, resource, rest.get(name_at).map(|n| n.to_string())))
}

fn status(code: u16, reason: &str, message: String) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

impl State {
    fn stamp(&mut self, obj: &mut Value) {
        self.version += 1;
        let meta = obj["metadata"].as_object_mut().expect("checked: metadata is an object");
        meta.insert("resourceVersion".into(), json!(self.version.to_string()));
    }

    fn check(&mut self, resource: &str, body: &Value) -> Result<(), (u16, Value)> {
        let Some((group, version, kind)) = kind_of(resource) else {
            return Err(status(
                404,
                "NotFound",
                format!("the server could not find the requested resource ({resource})"),
            ));
        };
        let name = self.schema.for_kind(group, version, kind).map(str::to_string);
        let violations = match name {
            Some(n) => self.schema.validate(&n, body),
            None => vec![format!("no schema for {group}/{version} {kind}")],
        };
        if body.get("metadata").and_then(Value::as_object).is_none() {
            return Err(status(400, "BadRequest", "the object has no metadata".into()));
        }
        if violations.is_empty() {
            return Ok(());
        }
        self.violations.extend(violations.iter().map(|v| format!("{kind}: {v}")));
        Err(status(422, "Invalid", format!("{kind} is invalid: {}", violations.join("; "))))
    }

    fn answer(&mut self, method: &Method, path: &str, body: &[u8]) -> (u16, Value) {
        if let Some(i) =
            self.fail_next.iter().position(|(m, p, _)| m == method && path.starts_with(p.as_str()))
        {
            let (_, _, code) = self.fail_next.remove(i);
            // The reason the API server gives with each code (apimachinery's StatusReason).
            let reason = match code {
                404 => "NotFound",
                409 => "Conflict",
                422 => "Invalid",
                429 => "TooManyRequests",
                _ => "InternalError",
            };
            return status(code, reason, format!("injected by the test: {code}"));
        }
        let Some((collection, resource, name)) = split(path) else {
            return status(
                404,
                "NotFound",
                format!("the server could not find the requested resource ({path})"),
            );
        };
        let parsed: Option<Value> = serde_json::from_slice(body).ok();
        match (method, name) {
            (&Method::GET, Some(name)) => match self.objects.get(&format!("{collection}/{name}")) {
                Some(o) => (200, o.clone()),
                None => status(404, "NotFound", format!("{resource} \"{name}\" not found")),
            },
            (&Method::POST, None) => {
                let Some(mut obj) = parsed else {
                    return status(400, "BadRequest", "the body is not JSON".into());
                };
                if let Err(e) = self.check(&resource, &obj) {
                    return e;
                }
                let Some(name) = obj["metadata"]["name"].as_str().map(str::to_string) else {
                    return status(422, "Invalid", "metadata.name: Required value".into());
                };
                let key = format!("{collection}/{name}");
                if self.objects.contains_key(&key) {
                    return status(
                        409,
                        "AlreadyExists",
                        format!("{resource} \"{name}\" already exists"),
                    );
                }
                if obj["metadata"].get("resourceVersion").is_some_and(|v| !v.is_null()) {
                    return status(
                        500,
                        "InternalError",
                        "resourceVersion should not be set on objects to be created".into(),
                    );
                }
                self.stamp(&mut obj);
                let uid = format!("00000000-0000-4000-8000-{:012x}", self.version);
                obj["metadata"]["uid"] = json!(uid);
                obj["metadata"]["creationTimestamp"] = json!("2026-11-28T00:00:00Z");
                self.objects.insert(key, obj.clone());
                (201, obj)
            }
            (&Method::PUT, Some(name)) => {
                let Some(mut obj) = parsed else {
                    return status(400, "BadRequest", "the body is not JSON".into());
                };
                if let Err(e) = self.check(&resource, &obj) {
                    return e;
                }
                if obj["metadata"]["name"].as_str() != Some(name.as_str()) {
                    return status(
                        400,
                        "BadRequest",
                        "the name of the object does not match the name on the URL".into(),
                    );
                }
                let key = format!("{collection}/{name}");
                let Some(old) = self.objects.get(&key) else {
                    return status(404, "NotFound", format!("{resource} \"{name}\" not found"));
                };
                let sent = obj["metadata"]["resourceVersion"].as_str().unwrap_or("");
                if sent.is_empty() {
                    return status(422, "Invalid", "metadata.resourceVersion: Invalid value: 0: must be specified for an update".into());
                }
                if Some(sent) != old["metadata"]["resourceVersion"].as_str() {
                    return status(409, "Conflict", format!("Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"));
                }
                obj["metadata"]["uid"] = old["metadata"]["uid"].clone();
                obj["metadata"]["creationTimestamp"] = old["metadata"]["creationTimestamp"].clone();
                self.stamp(&mut obj);
                self.objects.insert(key, obj.clone());
                (200, obj)
            }
            (&Method::DELETE, Some(name)) => {
                match self.objects.remove(&format!("{collection}/{name}")) {
                    Some(o) => (200, o),
                    None => status(404, "NotFound", format!("{resource} \"{name}\" not found")),
                }
            }
            _ => status(405, "MethodNotAllowed", format!("{method} is not supported on {path}")),
        }
    }
}

async fn serve(
    state: Arc<Mutex<State>>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let delay = {
        let mut s = state.lock().expect("not poisoned");
        let i =
            s.delay_next.iter().position(|(m, p, _)| *m == method && path.starts_with(p.as_str()));
        i.map(|i| s.delay_next.remove(i).2)
    };
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    let (code, value) = {
        let mut s = state.lock().expect("not poisoned");
        let (code, value) = s.answer(&method, &path, &body);
        s.log.push(Logged { method: method.to_string(), path: path.clone(), status: code });
        (code, value)
    };
    let mut resp = Response::new(Full::new(Bytes::from(value.to_string())));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert("content-type", "application/json".parse().expect("a header value"));
    Ok(resp)
}

impl ApiServer {
    /// Serves on a free port of 127.0.0.1, checking writes against `schema`.
    pub async fn start(schema: Schema) -> ApiServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        let state = Arc::new(Mutex::new(State {
            schema,
            objects: BTreeMap::new(),
            version: 1000,
            log: Vec::new(),
            violations: Vec::new(),
            fail_next: Vec::new(),
            delay_next: Vec::new(),
        }));
        let shared = Arc::clone(&state);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let state = Arc::clone(&shared);
                tokio::spawn(async move {
                    let service =
                        hyper::service::service_fn(move |req| serve(Arc::clone(&state), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        ApiServer { url, state, task }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("not poisoned")
    }

    /// Stores `obj` at `path` as if created there by someone else (a claim the scheduler
    /// allocated, a Node): checked against the schema like any write, stamped like one.
    /// Panics when the schema refuses it: a test's fixture must be a valid object.
    pub fn put(&self, path: &str, mut obj: Value) -> Value {
        let mut s = self.state();
        let (_, resource, _) = split(path).unwrap_or_else(|| panic!("not an object path: {path}"));
        // Nodes are outside resource.k8s.io's schema, and only read.
        if resource != "nodes" {
            if let Err((_, e)) = s.check(&resource, &obj) {
                panic!("the test's {path} is not a valid object: {e}");
            }
        }
        s.stamp(&mut obj);
        if obj["metadata"].get("creationTimestamp").is_none() {
            obj["metadata"]["creationTimestamp"] = json!("2026-11-28T00:00:00Z");
        }
        s.objects.insert(path.to_string(), obj.clone());
        obj
    }

    /// The object at `path`.
    pub fn get(&self, path: &str) -> Option<Value> {
        self.state().objects.get(path).cloned()
    }

    /// Removes the object at `path`.
    pub fn remove(&self, path: &str) -> Option<Value> {
        self.state().objects.remove(path)
    }

    /// Changes the object at `path` as another writer would: a new `resourceVersion`.
    pub fn modify(&self, path: &str, f: impl FnOnce(&mut Value)) {
        let mut s = self.state();
        let mut obj = s.objects.get(path).cloned().unwrap_or_else(|| panic!("no object at {path}"));
        f(&mut obj);
        s.stamp(&mut obj);
        s.objects.insert(path.to_string(), obj);
    }

    /// Answers the next `method` request to a path starting with `path` with `code`.
    pub fn fail_next(&self, method: Method, path: &str, code: u16) {
        self.state().fail_next.push((method, path.to_string(), code));
    }

    /// Answers the next `method` request to a path starting with `path` only after `delay`.
    pub fn delay_next(&self, method: Method, path: &str, delay: std::time::Duration) {
        self.state().delay_next.push((method, path.to_string(), delay));
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Logged> {
        self.state().log.clone()
    }

    /// The writes (method, path, status) so far: what changed, or tried to.
    pub fn writes(&self) -> Vec<Logged> {
        self.requests().into_iter().filter(|l| l.method != "GET").collect()
    }

    /// Every schema violation any write had.
    pub fn violations(&self) -> Vec<String> {
        self.state().violations.clone()
    }

    /// A kubeconfig pointing at this server, for a binary's `--kubeconfig`.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n    server: {}\ncontexts:\n- name: standin\n  context:\n    cluster: standin\n    user: standin\ncurrent-context: standin\nusers:\n- name: standin\n  user: {{}}\n",
            self.url
        )
    }
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn paths_split_into_collection_resource_and_name() {
        assert_eq!(
            split("/apis/resource.k8s.io/v1/resourceslices/n-erdma.aliyun.com"),
            Some((
                "/apis/resource.k8s.io/v1/resourceslices".into(),
                "resourceslices".into(),
                Some("n-erdma.aliyun.com".into())
            ))
        );
        assert_eq!(
            split("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c"),
            Some((
                "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims".into(),
                "resourceclaims".into(),
                Some("c".into())
            ))
        );
        assert_eq!(
            split("/apis/resource.k8s.io/v1/resourceslices"),
            Some(("/apis/resource.k8s.io/v1/resourceslices".into(), "resourceslices".into(), None))
        );
        assert_eq!(
            split("/api/v1/nodes/n1"),
            Some(("/api/v1/nodes".into(), "nodes".into(), Some("n1".into())))
        );
        assert_eq!(split("/healthz"), None);
    }
}
