//! A small fault-injecting HTTP/1.1 proxy for putting in front of a [`super::Registry`].
//!
//! One thread per client connection and one upstream connection per client connection.
//! Every request is rewritten to `Connection: close`, so each connection carries exactly one
//! request and one response and the proxy only has to parse two heads, never a body framing
//! beyond `Content-Length`. The `Host` header is left alone: the registry builds upload
//! `Location` URLs from it, so uploads keep going through the proxy.

use std::collections::HashSet;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything unchanged.
    None,
    /// The first `GET .../blobs/<digest>` of each digest that answers 2xx gets its head and
    /// about half of its body, then the connection is closed. Later GETs of the same digest
    /// pass, so a client that retries (or resumes with `Range`) recovers.
    DropMidBlob,
    /// Like [`Fault::DropMidBlob`] but on every blob GET: a client can only fail.
    DropMidBlobAlways,
    /// Every 2xx blob GET has one byte of its body flipped (the middle one), length kept:
    /// a client that checks digests must notice.
    CorruptBlob,
    /// Like [`Fault::CorruptBlob`] but only the first GET of each digest.
    CorruptBlobOnce,
    /// The first `n` requests, of any kind, are answered `503 Service Unavailable` by the
    /// proxy itself without reaching upstream; later ones pass.
    ServerErrorTimes(usize),
    /// The first `times` requests whose URI contains `uri` are answered `503` as with
    /// [`Fault::ServerErrorTimes`]; the rest pass (`/manifests/sha256:…`: one manifest).
    ServerErrorOn { uri: String, times: usize },
}

/// What the proxy did, for assertions.
#[derive(Debug, Default)]
struct Stats {
    requests: AtomicUsize,
    faults: AtomicUsize,
    lines: Mutex<Vec<String>>,
    faulted_digests: Mutex<HashSet<String>>,
    /// Requests that [`Fault::ServerErrorOn`] matched.
    matched: AtomicUsize,
}

pub struct FaultyProxy {
    addr: String,
    stop: Arc<AtomicBool>,
    stats: Arc<Stats>,
    accept: Option<JoinHandle<()>>,
}

struct Shared {
    upstream: String,
    fault: Fault,
    only_digest: Option<String>,
    stats: Arc<Stats>,
}

impl FaultyProxy {
    /// Listens on 127.0.0.1:<free port> and forwards to `upstream_addr` (`HOST:PORT`).
    pub fn start(upstream_addr: &str, fault: Fault) -> FaultyProxy {
        Self::start_inner(upstream_addr, fault, None)
    }

    /// Like [`FaultyProxy::start`], but blob faults hit only blob GETs of `digest`
    /// (`sha256:HEX`); other blobs pass untouched.
    pub fn start_for_digest(upstream_addr: &str, fault: Fault, digest: &str) -> FaultyProxy {
        Self::start_inner(upstream_addr, fault, Some(digest.to_string()))
    }

    fn start_inner(upstream_addr: &str, fault: Fault, only_digest: Option<String>) -> FaultyProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy listener");
        let addr = listener.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Stats::default());
        let shared = Arc::new(Shared {
            upstream: upstream_addr.to_string(),
            fault,
            only_digest,
            stats: stats.clone(),
        });
        let stop2 = stop.clone();
        let accept = std::thread::Builder::new()
            .name("faulty-proxy-accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop2.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let shared = shared.clone();
                    let _ = std::thread::Builder::new().name("faulty-proxy-conn".into()).spawn(
                        move || {
                            if let Err(e) = handle(conn, &shared) {
                                // Clients hanging up early are expected with faults.
                                if !matches!(
                                    e.kind(),
                                    io::ErrorKind::BrokenPipe
                                        | io::ErrorKind::ConnectionReset
                                        | io::ErrorKind::UnexpectedEof
                                ) {
                                    eprintln!("faulty-proxy: {e}");
                                }
                            }
                        },
                    );
                }
            })
            .expect("spawn proxy accept thread");
        FaultyProxy { addr, stop, stats, accept: Some(accept) }
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// `docker://127.0.0.1:PORT/NAME_TAG`.
    pub fn reference(&self, name_tag: &str) -> String {
        format!("docker://{}/{name_tag}", self.addr)
    }

    /// Requests the proxy received (including those it answered itself).
    pub fn request_count(&self) -> usize {
        self.stats.requests.load(Ordering::SeqCst)
    }

    /// Request lines (`METHOD URI`) in arrival order.
    pub fn request_lines(&self) -> Vec<String> {
        self.stats.lines.lock().unwrap().clone()
    }

    /// How many responses were dropped, corrupted or replaced by a 503.
    pub fn faults_injected(&self) -> usize {
        self.stats.faults.load(Ordering::SeqCst)
    }
}

impl Drop for FaultyProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept().
        let _ = TcpStream::connect(&self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// Reads one HTTP head (request or response) up to and including the blank line.
pub(crate) fn read_head(r: &mut impl BufRead) -> io::Result<Vec<String>> {
    let mut lines = Vec::new();
    loop {
        let mut raw = Vec::new();
        if r.read_until(b'\n', &mut raw)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed inside an HTTP head",
            ));
        }
        let line = String::from_utf8_lossy(&raw).trim_end_matches(['\r', '\n']).to_string();
        if line.is_empty() {
            return Ok(lines);
        }
        lines.push(line);
        if lines.len() > 200 {
            return Err(io::Error::other("HTTP head too long"));
        }
    }
}

fn ctx(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// The value of header `name` (any case) in an HTTP head.
pub(crate) fn header<'a>(head: &'a [String], name: &str) -> Option<&'a str> {
    head.iter().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Writes an HTTP head and its blank line.
pub(crate) fn write_head(w: &mut impl Write, head: &[String]) -> io::Result<()> {
    let mut buf = String::new();
    for l in head {
        buf.push_str(l);
        buf.push_str("\r\n");
    }
    buf.push_str("\r\n");
    w.write_all(buf.as_bytes())
}

/// The digest of a `GET /v2/<name>/blobs/<digest>` request line, if it is one.
fn blob_get_digest(method: &str, uri: &str) -> Option<String> {
    if method != "GET" {
        return None;
    }
    let path = uri.split('?').next()?;
    let (_, digest) = path.rsplit_once("/blobs/")?;
    (path.starts_with("/v2/") && !digest.contains('/') && digest.contains(':'))
        .then(|| digest.to_string())
}

fn handle(client: TcpStream, shared: &Shared) -> io::Result<()> {
    client.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut client_r = BufReader::new(client.try_clone()?);
    let mut client_w = client;
    // Clients that try TLS first (skopeo with --tls-verify=false, Go's default for
    // registries) open with a handshake record (0x16): close so they fall back to HTTP.
    if client_r.fill_buf()?.first().is_none_or(|&b| b == 0x16) {
        return Ok(());
    }
    let mut head = read_head(&mut client_r).map_err(|e| ctx(e, "reading request head"))?;
    let request_line = head.first().cloned().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let method = parts.next().unwrap_or("").to_string();
    let uri = parts.next().unwrap_or("").to_string();

    let stats = &shared.stats;
    let n = stats.requests.fetch_add(1, Ordering::SeqCst);
    stats.lines.lock().unwrap().push(format!("{method} {uri}"));

    let refuse = match &shared.fault {
        Fault::ServerErrorTimes(times) => n < *times,
        Fault::ServerErrorOn { uri: part, times } => {
            uri.contains(part.as_str()) && stats.matched.fetch_add(1, Ordering::SeqCst) < *times
        }
        _ => false,
    };
    if refuse {
        stats.faults.fetch_add(1, Ordering::SeqCst);
        // Closing a socket with unread request bytes makes the kernel send RST, and the
        // client may then never see our 503: read a sized body before answering, and a
        // chunked one (whose end we do not parse) after, until the client hangs up.
        if let Some(len) = header(&head, "content-length").and_then(|v| v.parse::<u64>().ok()) {
            if len <= 64 << 20 {
                let _ = io::copy(&mut (&mut client_r).take(len), &mut io::sink());
            }
        }
        let body =
            "{\"errors\":[{\"code\":\"UNAVAILABLE\",\"message\":\"injected by faulty proxy\"}]}";
        write!(
            client_w,
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
        client_w.flush()?;
        if header(&head, "transfer-encoding").is_some() {
            client_w.set_read_timeout(Some(Duration::from_secs(1)))?;
            let _ = io::copy(&mut (&mut client_r).take(64 << 20), &mut io::sink());
        }
        let _ = client_w.shutdown(Shutdown::Both);
        return Ok(());
    }

    // One request per connection: make both ends close after this exchange.
    head.retain(|l| {
        let name = l.split(':').next().unwrap_or("").trim();
        !(name.eq_ignore_ascii_case("connection")
            || name.eq_ignore_ascii_case("keep-alive")
            || name.eq_ignore_ascii_case("proxy-connection"))
    });
    head.push("Connection: close".into());

    let upstream = TcpStream::connect(&shared.upstream)?;
    upstream.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut up_w = upstream.try_clone()?;
    write_head(&mut up_w, &head)?;

    // Request body (uploads): pump whatever the client sends after the head. It ends when
    // the client closes or when the response side shuts the sockets down. No half-close
    // towards upstream: the body is framed already, and Go's server cancels a request whose
    // connection reads EOF.
    let pump = {
        let mut up_w = up_w;
        std::thread::spawn(move || {
            let _ = io::copy(&mut client_r, &mut up_w);
        })
    };

    let result = respond(&upstream, &mut client_w, shared, &method, &uri);
    let _ = client_w.shutdown(Shutdown::Both);
    let _ = upstream.shutdown(Shutdown::Both);
    let _ = pump.join();
    result
}

fn respond(
    upstream: &TcpStream,
    client_w: &mut TcpStream,
    shared: &Shared,
    method: &str,
    uri: &str,
) -> io::Result<()> {
    let mut up_r = BufReader::with_capacity(64 << 10, upstream.try_clone()?);
    let mut head = read_head(&mut up_r)
        .map_err(|e| ctx(e, &format!("reading response head for {method} {uri}")))?;
    // Interim 1xx responses (100 Continue) go through as they are.
    while head.first().and_then(|l| l.split(' ').nth(1)).is_some_and(|s| s.starts_with('1')) {
        write_head(client_w, &head)?;
        head = read_head(&mut up_r)?;
    }
    let status: u16 =
        head.first().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let content_length = header(&head, "content-length").and_then(|v| v.parse::<u64>().ok());

    let blob = blob_get_digest(method, uri)
        .filter(|_| (200..300).contains(&status))
        .filter(|d| shared.only_digest.as_ref().is_none_or(|only| only == d));
    let stats = &shared.stats;
    let first_time = |d: &str| stats.faulted_digests.lock().unwrap().insert(d.to_string());
    enum Action {
        Pass,
        Drop,
        Corrupt,
    }
    let action = match (&shared.fault, &blob) {
        (Fault::DropMidBlobAlways, Some(_)) => Action::Drop,
        (Fault::DropMidBlob, Some(d)) if first_time(d) => Action::Drop,
        (Fault::CorruptBlob, Some(_)) => Action::Corrupt,
        (Fault::CorruptBlobOnce, Some(d)) if first_time(d) => Action::Corrupt,
        _ => Action::Pass,
    };

    write_head(client_w, &head)?;
    match action {
        Action::Pass => {
            io::copy(&mut up_r, client_w)?;
        }
        Action::Drop => {
            stats.faults.fetch_add(1, Ordering::SeqCst);
            // Without a length, send a little and cut.
            let half = content_length.map(|l| l / 2).unwrap_or(1024);
            io::copy(&mut (&mut up_r).take(half), client_w)?;
            client_w.flush()?;
            // Caller shuts both sockets down: the client sees a short body.
        }
        Action::Corrupt => {
            stats.faults.fetch_add(1, Ordering::SeqCst);
            let target = content_length.map(|l| l / 2).unwrap_or(0);
            let mut offset = 0u64;
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n = up_r.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                if (offset..offset + n as u64).contains(&target) {
                    buf[(target - offset) as usize] ^= 0xff;
                }
                offset += n as u64;
                client_w.write_all(&buf[..n])?;
            }
        }
    }
    client_w.flush()
}
