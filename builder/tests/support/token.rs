//! A token gate in front of a [`super::Registry`]: the Docker token authentication of
//! distribution's `docs/spec/auth/token.md` and the OAuth2 refresh-token grant of
//! `docs/spec/auth/oauth.md`, small enough to read. With [`TokenGate::start_with_password`],
//! the token endpoint also answers `GET /token?service=…&scope=…` carrying HTTP basic auth
//! with the right user and password (`token.md`'s flow, what `docker login` with a password
//! and skopeo's `--creds` use).
//!
//! Requests without `Authorization: Bearer <an access token it issued>`, or whose token lacks
//! the scope the request needs, get `401` with `WWW-Authenticate: Bearer realm="http://ADDR/token",
//! service="test-registry"`. `POST /token` with `grant_type=refresh_token` and the right
//! refresh token issues an access token bound to the requested `scope`s; a wrong refresh token
//! gets `401`. Authorised requests are forwarded to the registry as [`super::proxy`] does it: one
//! request per connection, `Host` kept so that upload `Location`s point back at the gate.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::proxy::{header, read_head, write_head};

pub const SERVICE: &str = "test-registry";

/// One `POST /token` the gate answered.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// `POST` (the refresh-token grant) or `GET` (basic auth).
    pub method: String,
    /// Whether a `GET` carried `Authorization: Basic` with the right user and password.
    pub basic_ok: bool,
    /// The form fields (or query parameters) in order (`scope` may repeat).
    pub form: Vec<(String, String)>,
    pub status: u16,
}

impl Exchange {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.form.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    pub fn scopes(&self) -> Vec<&str> {
        self.form.iter().filter(|(k, _)| k == "scope").map(|(_, v)| v.as_str()).collect()
    }
}

/// One request to the registry API (anything but `/token`) and what the gate did.
#[derive(Debug, Clone)]
pub struct GatedRequest {
    pub method: String,
    pub uri: String,
    /// The `Authorization` header as sent, if any.
    pub authorization: Option<String>,
    /// Whether it was forwarded (else answered 401).
    pub forwarded: bool,
}

#[derive(Default)]
struct State {
    refresh_token: String,
    /// `Basic BASE64(user:password)` that `GET /token` accepts, if any.
    basic: Option<String>,
    /// access token → scopes (`repository:NAME:ACTIONS` split into (NAME, action) pairs).
    issued: Mutex<HashMap<String, BTreeSet<(String, String)>>>,
    exchanges: Mutex<Vec<Exchange>>,
    requests: Mutex<Vec<GatedRequest>>,
    counter: AtomicUsize,
}

pub struct TokenGate {
    addr: String,
    stop: Arc<AtomicBool>,
    state: Arc<State>,
    accept: Option<JoinHandle<()>>,
}

impl TokenGate {
    /// Listens on 127.0.0.1:<free port>, forwards to `upstream` (`HOST:PORT`) and accepts
    /// `refresh_token` in the refresh-token grant.
    pub fn start(upstream: &str, refresh_token: &str) -> TokenGate {
        Self::start_with(
            upstream,
            State { refresh_token: refresh_token.to_string(), ..Default::default() },
        )
    }

    /// Like [`TokenGate::start`], with tokens for `GET /token` with basic auth of `user` and
    /// `password` instead of a refresh token.
    pub fn start_with_password(upstream: &str, user: &str, password: &str) -> TokenGate {
        use base64::Engine as _;
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        );
        Self::start_with(
            upstream,
            State { refresh_token: String::new(), basic: Some(basic), ..Default::default() },
        )
    }

    fn start_with(upstream: &str, state: State) -> TokenGate {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind token gate");
        let addr = listener.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(state);
        let (stop2, state2, upstream, addr2) =
            (stop.clone(), state.clone(), upstream.to_string(), addr.clone());
        let accept = std::thread::Builder::new()
            .name("token-gate-accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop2.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let (state, upstream, addr) = (state2.clone(), upstream.clone(), addr2.clone());
                    let _ = std::thread::Builder::new().name("token-gate-conn".into()).spawn(
                        move || {
                            if let Err(e) = handle(conn, &state, &upstream, &addr) {
                                if !matches!(
                                    e.kind(),
                                    io::ErrorKind::BrokenPipe
                                        | io::ErrorKind::ConnectionReset
                                        | io::ErrorKind::UnexpectedEof
                                ) {
                                    eprintln!("token-gate: {e}");
                                }
                            }
                        },
                    );
                }
            })
            .expect("spawn token gate");
        TokenGate { addr, stop, state, accept: Some(accept) }
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// `docker://127.0.0.1:PORT/NAME_TAG`.
    pub fn reference(&self, name_tag: &str) -> String {
        format!("docker://{}/{name_tag}", self.addr)
    }

    /// `http://127.0.0.1:PORT/token`.
    pub fn realm(&self) -> String {
        format!("http://{}/token", self.addr)
    }

    pub fn exchanges(&self) -> Vec<Exchange> {
        self.state.exchanges.lock().unwrap().clone()
    }

    pub fn requests(&self) -> Vec<GatedRequest> {
        self.state.requests.lock().unwrap().clone()
    }

    /// Whether `token` is an access token this gate issued.
    pub fn issued(&self, token: &str) -> bool {
        self.state.issued.lock().unwrap().contains_key(token)
    }
}

impl Drop for TokenGate {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn percent_decode(s: &str) -> String {
    let s = s.replace('+', " ");
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_form(s: &str) -> Vec<(String, String)> {
    s.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// The (repository, action) pairs a registry request needs: pull for reads, push for writes,
/// and pull on the source of a cross-repository mount. Empty for `/v2/` itself.
fn needed(method: &str, uri: &str) -> BTreeSet<(String, String)> {
    let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
    let mut out = BTreeSet::new();
    let Some(rest) = path.strip_prefix("/v2/") else { return out };
    let name =
        ["/manifests/", "/blobs/", "/tags/"].iter().find_map(|m| rest.find(m).map(|i| &rest[..i]));
    let Some(name) = name else { return out };
    let action = if matches!(method, "GET" | "HEAD") { "pull" } else { "push" };
    out.insert((name.to_string(), action.to_string()));
    if action == "push" {
        out.insert((name.to_string(), "pull".to_string()));
    }
    let form = parse_form(query);
    if form.iter().any(|(k, _)| k == "mount") {
        if let Some((_, from)) = form.iter().find(|(k, _)| k == "from") {
            out.insert((from.clone(), "pull".to_string()));
        }
    }
    out
}

/// Reads a request body framed by `Content-Length` (what the gate answers itself).
fn read_body(r: &mut impl Read, head: &[String]) -> io::Result<Vec<u8>> {
    let len = header(head, "content-length").and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let mut body = Vec::new();
    r.take(len.min(64 << 20)).read_to_end(&mut body)?;
    Ok(body)
}

fn respond(w: &mut TcpStream, status: &str, extra: &[String], body: &str) -> io::Result<()> {
    let mut head = vec![
        format!("HTTP/1.1 {status}"),
        "Content-Type: application/json".into(),
        format!("Content-Length: {}", body.len()),
        "Connection: close".into(),
    ];
    head.extend(extra.iter().cloned());
    write_head(w, &head)?;
    w.write_all(body.as_bytes())?;
    w.flush()?;
    let _ = w.shutdown(Shutdown::Both);
    Ok(())
}

fn handle(client: TcpStream, state: &State, upstream: &str, addr: &str) -> io::Result<()> {
    client.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut client_r = BufReader::new(client.try_clone()?);
    let mut client_w = client;
    // A TLS handshake first (skopeo, Go clients): close so that they fall back to HTTP.
    if client_r.fill_buf()?.first().is_none_or(|&b| b == 0x16) {
        return Ok(());
    }
    let mut head = read_head(&mut client_r)?;
    let line = head.first().cloned().unwrap_or_default();
    let mut parts = line.split(' ');
    let method = parts.next().unwrap_or("").to_string();
    let uri = parts.next().unwrap_or("").to_string();

    if uri.split('?').next() == Some("/token") {
        let body = read_body(&mut client_r, &head)?;
        let (form, ok, basic_ok) = if method == "GET" {
            let form = parse_form(uri.split_once('?').map_or("", |(_, q)| q));
            let basic_ok =
                state.basic.is_some() && header(&head, "authorization") == state.basic.as_deref();
            (form, basic_ok, basic_ok)
        } else {
            let form = parse_form(&String::from_utf8_lossy(&body));
            let field = |n: &str| form.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
            let ok = method == "POST"
                && !state.refresh_token.is_empty()
                && field("grant_type") == Some("refresh_token")
                && field("refresh_token") == Some(state.refresh_token.as_str());
            (form, ok, false)
        };
        let status = if ok { 200 } else { 401 };
        state.exchanges.lock().unwrap().push(Exchange {
            method: method.clone(),
            basic_ok,
            form: form.clone(),
            status,
        });
        if !ok {
            return respond(&mut client_w, "401 Unauthorized", &[], r#"{"error":"invalid_grant"}"#);
        }
        let mut scopes = BTreeSet::new();
        for (_, s) in form.iter().filter(|(k, _)| k == "scope") {
            // repository:NAME:ACTION[,ACTION]; NAME may hold no colon here (no port in names).
            let mut p = s.splitn(3, ':');
            if let (Some("repository"), Some(name), Some(actions)) = (p.next(), p.next(), p.next())
            {
                for a in actions.split(',') {
                    scopes.insert((name.to_string(), a.to_string()));
                }
            }
        }
        let token = format!(
            "access-{}-{}",
            state.counter.fetch_add(1, Ordering::SeqCst),
            std::process::id()
        );
        state.issued.lock().unwrap().insert(token.clone(), scopes);
        return respond(
            &mut client_w,
            "200 OK",
            &[],
            &format!(
                r#"{{"access_token":"{token}","expires_in":300,"issued_at":"2026-01-01T00:00:00Z"}}"#
            ),
        );
    }

    let authorization = header(&head, "authorization").map(str::to_string);
    let granted = authorization
        .as_deref()
        .and_then(|a| a.strip_prefix("Bearer "))
        .and_then(|t| state.issued.lock().unwrap().get(t).cloned());
    let need = needed(&method, &uri);
    let allowed = granted.as_ref().is_some_and(|g| need.is_subset(g));
    state.requests.lock().unwrap().push(GatedRequest {
        method: method.clone(),
        uri: uri.clone(),
        authorization,
        forwarded: allowed,
    });
    if !allowed {
        // Read a sized body first: closing with unread bytes makes the kernel send RST.
        let _ = read_body(&mut client_r, &head);
        let mut challenge =
            format!(r#"WWW-Authenticate: Bearer realm="http://{addr}/token",service="{SERVICE}""#);
        if let Some((name, action)) = need.iter().find(|(_, a)| a == "push").or(need.iter().next())
        {
            challenge.push_str(&format!(r#",scope="repository:{name}:{action}""#));
        }
        return respond(
            &mut client_w,
            "401 Unauthorized",
            &[challenge],
            r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#,
        );
    }

    head.retain(|l| {
        let name = l.split(':').next().unwrap_or("").trim();
        !(name.eq_ignore_ascii_case("connection") || name.eq_ignore_ascii_case("keep-alive"))
    });
    head.push("Connection: close".into());
    let upstream = TcpStream::connect(upstream)?;
    upstream.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut up_w = upstream.try_clone()?;
    write_head(&mut up_w, &head)?;
    let pump = std::thread::spawn(move || {
        let _ = io::copy(&mut client_r, &mut up_w);
    });
    let result = (|| {
        let mut up_r = BufReader::new(upstream.try_clone()?);
        io::copy(&mut up_r, &mut client_w)?;
        client_w.flush()
    })();
    let _ = client_w.shutdown(Shutdown::Both);
    let _ = upstream.shutdown(Shutdown::Both);
    let _ = pump.join();
    result
}
