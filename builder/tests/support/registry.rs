//! A throwaway Docker Distribution registry (Debian's `docker-registry`, 2.8) on 127.0.0.1,
//! with filesystem storage in a temporary directory and its log captured to a file.
//!
//! Request counts come from the registry's own access log. Besides its logrus lines
//! (`level=info msg="response completed" ... http.request.method=GET ...`) it writes one line
//! per request in Apache combined log format (gorilla/handlers.CombinedLoggingHandler):
//!
//! ```text
//! 127.0.0.1 - - [21/Nov/2026:07:27:34 +0000] "GET /v2/x/blobs/sha256:419f…81 HTTP/1.1" 200 119 "" "skopeo/1.9.3"
//! ```
//!
//! That line is what [`AccessLogEntry::parse`] reads: method, request URI (with query),
//! status and response body bytes written.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Debian installs the registry as /usr/bin/docker-registry.
pub const REGISTRY_BIN: &str = "docker-registry";

/// How [`Registry::start_with`] starts a registry.
#[derive(Default)]
pub struct Options<'a> {
    /// One htpasswd user and password.
    pub auth: Option<(&'a str, &'a str)>,
    pub tls: Option<Tls>,
}

/// TLS for a registry: its certificate and key, and the CA its clients' certificates must have.
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

pub struct Registry {
    child: Child,
    addr: String,
    log_path: PathBuf,
    storage: PathBuf,
    // Last: removed after the process is gone.
    dir: tempfile::TempDir,
}

/// One request as the registry's access log recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLogEntry {
    pub method: String,
    /// Request target as sent, query included.
    pub uri: String,
    pub status: u16,
    /// Response body bytes the registry wrote.
    pub bytes: u64,
}

impl AccessLogEntry {
    /// Parses one combined-log-format line; `None` for any other line (logrus lines, blank).
    pub fn parse(line: &str) -> Option<Self> {
        // `HOST - USER [DATE] "METHOD URI PROTO" STATUS BYTES "REFERER" "UA"`
        let start = line.find("] \"")? + 3;
        let rest = &line[start..];
        let end = rest.find('"')?;
        let mut request = rest[..end].split(' ');
        let method = request.next()?.to_string();
        let uri = request.next()?.to_string();
        if !request.next()?.starts_with("HTTP/") {
            return None;
        }
        let mut tail = rest[end + 1..].split_whitespace();
        let status = tail.next()?.parse().ok()?;
        let bytes = tail.next()?.parse().unwrap_or(0);
        Some(AccessLogEntry { method, uri, status, bytes })
    }

    /// The URI without its query string.
    pub fn path(&self) -> &str {
        self.uri.split('?').next().unwrap_or(&self.uri)
    }

    pub fn query(&self) -> &str {
        self.uri.split_once('?').map(|(_, q)| q).unwrap_or("")
    }

    /// `Some(digest)` when the path is `/v2/<name>/blobs/<digest>` (not an upload URL).
    pub fn blob_digest(&self) -> Option<&str> {
        let path = self.path();
        if !path.starts_with("/v2/") {
            return None;
        }
        let (_, digest) = path.rsplit_once("/blobs/")?;
        if digest.contains('/') || !digest.contains(':') {
            return None;
        }
        Some(digest)
    }

    pub fn is_upload_url(&self) -> bool {
        self.path().contains("/blobs/uploads/")
    }
}

impl Registry {
    /// Starts a registry on a free port and waits until `GET /v2/` answers 200.
    pub fn start() -> Registry {
        Self::start_inner(None)
    }

    /// Like [`Registry::start`], with HTTP basic auth (htpasswd, bcrypt) for one user.
    pub fn start_with_auth(user: &str, password: &str) -> Registry {
        Self::start_inner(Some((user, password)))
    }

    fn start_inner(auth: Option<(&str, &str)>) -> Registry {
        Self::start_with(&Options { auth, tls: None })
    }

    /// A registry as `opts` say: basic auth, TLS (with client certificates required when
    /// `client_ca` is given: distribution's `http.tls.clientcas`).
    pub fn start_with(opts: &Options<'_>) -> Registry {
        let auth = opts.auth;
        assert!(
            super::have(REGISTRY_BIN),
            "{REGISTRY_BIN} not found on PATH (Debian package docker-registry; run scripts/setup)"
        );
        let dir = tempfile::Builder::new()
            .prefix("erdma-registry-")
            .tempdir()
            .expect("create registry tempdir");
        let storage = dir.path().join("storage");
        fs::create_dir_all(&storage).unwrap();
        let log_path = dir.path().join("registry.log");
        let config = dir.path().join("config.yml");

        // The port is free when we pick it but another process may take it before the
        // registry binds: retry with a new one when the registry exits early.
        let mut last_err = String::new();
        for _attempt in 0..5 {
            let port = super::free_port();
            let addr = format!("127.0.0.1:{port}");
            let mut yaml = config_yaml(&storage, &addr);
            if let Some(tls) = &opts.tls {
                yaml.push_str(&format!(
                    "  tls:\n    certificate: {}\n    key: {}\n",
                    tls.cert.display(),
                    tls.key.display()
                ));
                if let Some(ca) = &tls.client_ca {
                    yaml.push_str(&format!("    clientcas:\n      - {}\n", ca.display()));
                }
            }
            if let Some((user, password)) = auth {
                let htpasswd = dir.path().join("htpasswd");
                let out = Command::new("htpasswd")
                    .args(["-Bbn", user, password])
                    .output()
                    .expect("htpasswd (apache2-utils)");
                assert!(out.status.success(), "htpasswd failed");
                fs::write(&htpasswd, &out.stdout).unwrap();
                yaml.push_str(&format!(
                    "auth:\n  htpasswd:\n    realm: erdma-test\n    path: {}\n",
                    htpasswd.display()
                ));
            }
            fs::write(&config, yaml).unwrap();
            let log = File::options().create(true).append(true).open(&log_path).unwrap();
            let mut child = Command::new(REGISTRY_BIN)
                .arg("serve")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {REGISTRY_BIN}: {e}"));
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    last_err = format!("registry exited with {status}");
                    break;
                }
                // A TLS registry is up once it accepts connections (its handshake is what
                // the tests examine).
                let up = match opts.tls {
                    Some(_) => TcpStream::connect(&addr).is_ok(),
                    None => matches!(http_request(&addr, "GET", "/v2/"), Ok((200 | 401, _))),
                };
                if up {
                    return Registry { child, addr, log_path, storage, dir };
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    last_err = "registry did not answer GET /v2/ within 15s".into();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!(
            "cannot start {REGISTRY_BIN}: {last_err}\n--- log\n{}",
            fs::read_to_string(&log_path).unwrap_or_default()
        );
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// `docker://127.0.0.1:PORT/NAME_TAG`, e.g. `reference("base:1")`.
    pub fn reference(&self, name_tag: &str) -> String {
        format!("docker://{}/{name_tag}", self.addr)
    }

    /// The registry's root directory (`rootdirectory` of the filesystem driver).
    pub fn storage(&self) -> &Path {
        &self.storage
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The whole log so far, after letting in-flight lines land (see [`Registry::settle`]).
    pub fn log(&self) -> String {
        self.settle();
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The registry writes an access-log line after the response is complete, so a client
    /// can be done before the line is. Waits until the log stops growing for 100 ms (2 s max).
    pub fn settle(&self) {
        let len = || fs::metadata(&self.log_path).map(|m| m.len()).unwrap_or(0);
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut last = len();
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let now = len();
            if now == last || Instant::now() > deadline {
                return;
            }
            last = now;
        }
    }

    /// Every request in the access log so far, in order.
    pub fn requests(&self) -> Vec<AccessLogEntry> {
        self.log().lines().filter_map(AccessLogEntry::parse).collect()
    }

    /// GETs of `/v2/*/blobs/DIGEST` (any status, ranged or not). `digest` is `sha256:HEX`.
    pub fn count_blob_gets(&self, digest: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.method == "GET" && r.blob_digest() == Some(digest))
            .count()
    }

    /// Blob uploads that completed: the closing `PUT .../blobs/uploads/<id>?digest=…` (201)
    /// of a chunked or streamed upload, or a monolithic `POST .../blobs/uploads/?digest=…`
    /// (201). Cross-repository mounts are not uploads: see [`Registry::count_blob_mounts`].
    pub fn count_blob_uploads(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| {
                r.status == 201
                    && r.is_upload_url()
                    && (r.method == "PUT"
                        || (r.method == "POST"
                            && r.query().contains("digest=")
                            && !r.query().contains("mount=")))
            })
            .count()
    }

    /// Successful cross-repository mounts (`POST .../blobs/uploads/?mount=…&from=…` → 201).
    pub fn count_blob_mounts(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| {
                r.method == "POST"
                    && r.status == 201
                    && r.is_upload_url()
                    && r.query().contains("mount=")
            })
            .count()
    }

    /// Successful manifest PUTs.
    pub fn count_manifest_puts(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.method == "PUT" && r.status == 201 && r.path().contains("/manifests/"))
            .count()
    }

    /// Response bytes the registry sent, over all requests so far.
    pub fn bytes_sent(&self) -> u64 {
        self.requests().iter().map(|r| r.bytes).sum()
    }

    /// Distinct blobs in storage (`docker/registry/v2/blobs/sha256/XX/HEX/data`). The
    /// registry stores manifests there as well, so one pushed image with N layers counts
    /// N + 2 (layers, config, manifest).
    pub fn blob_count(&self) -> usize {
        self.blob_digests().len()
    }

    /// `sha256:HEX` of every blob in storage, sorted.
    pub fn blob_digests(&self) -> Vec<String> {
        let root = self.storage.join("docker/registry/v2/blobs/sha256");
        let mut out = Vec::new();
        let Ok(prefixes) = fs::read_dir(&root) else {
            return out;
        };
        for prefix in prefixes.flatten() {
            let Ok(blobs) = fs::read_dir(prefix.path()) else {
                continue;
            };
            for blob in blobs.flatten() {
                if blob.path().join("data").is_file() {
                    out.push(format!("sha256:{}", blob.file_name().to_string_lossy()));
                }
            }
        }
        out.sort();
        out
    }

    /// Copies `src` (any skopeo reference, e.g. `oci:DIR:TAG`) to `NAME:TAG` here.
    pub fn push(&self, src: &str, name_tag: &str) {
        let out = super::skopeo([
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
            src,
            &self.reference(name_tag),
        ]);
        super::assert_success(&format!("skopeo copy {src} {name_tag}"), &out);
    }

    /// Kills the registry now (it is also killed on drop).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

fn config_yaml(storage: &Path, addr: &str) -> String {
    format!(
        r#"version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: {storage}
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: {addr}
  secret: erdma-kit-tests
"#,
        storage = storage.display()
    )
}

/// A bare HTTP/1.1 request with `Connection: close`; returns the status and body bytes
/// (chunked bodies are returned still chunk-encoded).
pub fn http_request(addr: &str, method: &str, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: erdma-kit-tests\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let head_end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of response head"))?;
    let head = String::from_utf8_lossy(&buf[..head_end]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line: {head}")))?;
    Ok((status, buf[head_end + 4..].to_vec()))
}
