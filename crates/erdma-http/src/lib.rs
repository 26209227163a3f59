//! The one HTTP client for package repositories, repository keys and packages (registries have
//! their own, see `erdma-build`'s registry client).
//!
//! Every transfer is bounded three ways: a connect timeout, a read (idle) timeout that fires
//! when the server sends nothing for that long, headers or body, and an overall deadline per
//! transfer. Connection errors, timeouts, 5xx and 429 are retried ([`RETRIES`] times, backoff
//! 0.5 s, 1 s, 2 s). A server that accepts the connection and then stalls therefore fails a
//! transfer after at most `(1 + RETRIES) × read + 3.5 s`: about two minutes with the default
//! 30 s read timeout, and the error names the URL. Bodies stream: nothing larger than a
//! chunk is held in memory unless the caller asks for the bytes ([`Client::get`], for the
//! small metadata files only).
#![forbid(unsafe_code)]
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};

/// The start of every reqwest client of erdma-kit (this crate's, the registry client's): with
/// rustls over ring as the process's cryptography, set up on first use. reqwest is built without
/// a provider of its own (Cargo.toml says why) and would panic on a client made without this.
pub fn reqwest_builder() -> reqwest::ClientBuilder {
    static PROVIDER: std::sync::Once = std::sync::Once::new();
    PROVIDER.call_once(|| {
        // Err: another provider was installed first (none in erdma-kit): that one serves.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
}

/// Tries after the first for a transfer that failed in a way another try may fix.
pub const RETRIES: u32 = 3;

/// The bounds of every transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Establishing the TCP (and TLS) connection.
    pub connect: Duration,
    /// The longest the server may send nothing (`--read-timeout`).
    pub read: Duration,
    /// One whole transfer, request to last byte: NVIDIA's 200 MB packages on a slow link.
    pub deadline: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            read: Duration::from_secs(30),
            deadline: Duration::from_secs(30 * 60),
        }
    }
}

/// How a transfer failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// No connection, a timeout, or the body broke off.
    #[error("fetching {url}: {reason}")]
    Transfer { url: String, reason: String, retry: bool },
    #[error("fetching {url}: server answered {status}")]
    Status { url: String, status: reqwest::StatusCode },
    #[error("reading {url}")]
    File {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{url} is larger than {limit} bytes")]
    TooLarge { url: String, limit: u64 },
    /// Writing what came (the cache).
    #[error("writing {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The HTTP client could not be set up (its TLS configuration, for one).
    #[error("setting up the HTTP client")]
    Client(#[source] Arc<dyn std::error::Error + Send + Sync>),
}

impl HttpError {
    /// Whether another try, or another mirror, may do better: connection errors, timeouts,
    /// broken bodies, 5xx and 429. A 4xx, a local file or a size limit will not change.
    pub fn is_transient(&self) -> bool {
        match self {
            HttpError::Transfer { retry, .. } => *retry,
            HttpError::Status { status, .. } => retryable_status(*status),
            _ => false,
        }
    }
}

pub fn retryable_status(status: reqwest::StatusCode) -> bool {
    status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS
}

/// Why a TLS connection failed, as far as the handshake tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsFailure {
    UnknownIssuer,
    Expired,
    NotYetValid,
    /// The certificate names other hosts.
    WrongName,
    /// The registry asked for a client certificate and got none.
    ClientCertRequired,
    /// The registry did not accept the client certificate sent.
    ClientCertRefused,
    /// The other end answered, but not in TLS (a plain-HTTP registry).
    NotTls,
    /// Any other certificate or handshake failure, as rustls names it.
    Other(String),
}

impl std::fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TlsFailure::UnknownIssuer => "certificate signed by an unknown authority",
            TlsFailure::Expired => "certificate has expired",
            TlsFailure::NotYetValid => "certificate is not valid yet",
            TlsFailure::WrongName => "certificate is not valid for this host name",
            TlsFailure::ClientCertRequired => "the registry requires a client certificate",
            TlsFailure::ClientCertRefused => "the registry refused the client certificate",
            TlsFailure::NotTls => "the registry does not speak TLS",
            TlsFailure::Other(s) => s,
        })
    }
}

/// The TLS failure behind `e`, if a TLS handshake (or the alert that ended one) caused it.
pub fn tls_failure(e: &(dyn std::error::Error + 'static)) -> Option<TlsFailure> {
    use rustls::{AlertDescription as A, CertificateError as C};
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        // rustls's error travels inside io::Errors (reqwest's connector wraps tokio-rustls's
        // in another), and an io::Error's `source()` skips what it wraps: look inside.
        if let Some(inner) = err.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            cur = Some(inner as &(dyn std::error::Error + 'static));
            continue;
        }
        if let Some(t) = err.downcast_ref::<rustls::Error>() {
            return Some(match t {
                rustls::Error::InvalidCertificate(c) => match c {
                    C::UnknownIssuer => TlsFailure::UnknownIssuer,
                    C::Expired | C::ExpiredContext { .. } => TlsFailure::Expired,
                    C::NotValidYet | C::NotValidYetContext { .. } => TlsFailure::NotYetValid,
                    C::NotValidForName | C::NotValidForNameContext { .. } => TlsFailure::WrongName,
                    _ => TlsFailure::Other(t.to_string()),
                },
                // TLS 1.3 (RFC 8446 §4.4.2.4): "certificate_required" when none was sent; a
                // server that cannot verify the one sent says bad_certificate or unknown_ca.
                rustls::Error::AlertReceived(A::CertificateRequired) => {
                    TlsFailure::ClientCertRequired
                }
                rustls::Error::AlertReceived(
                    A::BadCertificate
                    | A::UnknownCA
                    | A::CertificateUnknown
                    | A::UnsupportedCertificate
                    | A::AccessDenied,
                ) => TlsFailure::ClientCertRefused,
                rustls::Error::InvalidMessage(_) => TlsFailure::NotTls,
                other => TlsFailure::Other(other.to_string()),
            });
        }
        cur = err.source();
    }
    None
}

/// Set by a streamed download when it fails midway (read by the blocking side).
pub type Failed = Arc<Mutex<Option<String>>>;

/// The client: cheap to clone (one connection pool).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Setup>,
    timeouts: Timeouts,
    /// `--max-inflation`: how far what this client fetches may inflate when decompressed
    /// (`None`: the default of `limits`, which this module does not import: it stays a leaf).
    max_inflation: Option<u64>,
}

/// The reqwest client, set up on a thread of its own: setting up TLS reads and parses the
/// system's CA certificates (rustls-native-certs' PEM decoding is constant-time, 5-10 ms for
/// Debian's 140), which need not hold up what a build does before its first request (reading
/// the base's files). The first request waits for it.
struct Setup {
    client: std::sync::OnceLock<Result<reqwest::Client, SetupError>>,
    thread: Mutex<Option<std::thread::JoinHandle<reqwest::Result<reqwest::Client>>>>,
}

/// Why the client could not be set up, kept for every request that asks.
type SetupError = Arc<dyn std::error::Error + Send + Sync>;

impl Client {
    /// A client with these bounds. TLS is set up beside the caller; an error there (the TLS
    /// configuration) comes with each request ([`HttpError::Client`]), not retried.
    pub fn new(timeouts: Timeouts) -> Client {
        let build = move || {
            reqwest_builder()
                .connect_timeout(timeouts.connect)
                .read_timeout(timeouts.read)
                .user_agent(concat!("erdma-build/", env!("CARGO_PKG_VERSION")))
                .build()
        };
        let setup = match std::thread::Builder::new().name("http-setup".into()).spawn(build) {
            Ok(thread) => Setup { client: Default::default(), thread: Mutex::new(Some(thread)) },
            // No thread to be had: set up here.
            Err(_) => Setup {
                client: build().map_err(|e| Arc::new(e) as SetupError).into(),
                thread: Mutex::new(None),
            },
        };
        Client { inner: Arc::new(setup), timeouts, max_inflation: None }
    }

    /// The reqwest client, once set up (waiting for its thread the first time).
    fn http(&self) -> Result<&reqwest::Client, HttpError> {
        let setup = &self.inner;
        let built = setup.client.get_or_init(|| {
            let thread = setup.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
            match thread.map(std::thread::JoinHandle::join) {
                Some(Ok(built)) => built.map_err(|e| Arc::new(e) as SetupError),
                // A panic in reqwest's or rustls' setup: an error for every request.
                Some(Err(_)) | None => {
                    Err(Arc::new(std::io::Error::other("the TLS setup thread panicked")))
                }
            }
        });
        built.as_ref().map_err(|e| HttpError::Client(e.clone()))
    }

    /// The client, with indices it fetches allowed to inflate `n` times (`--max-inflation`;
    /// 0: no limit).
    pub fn max_inflation(self, n: u64) -> Client {
        Client { max_inflation: Some(n), ..self }
    }

    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// How far what this client downloads may inflate when decompressed (`--max-inflation`,
    /// [`erdma_limits::inflate`]): indices, repository metadata and package payloads alike;
    /// [`erdma_limits::DEFAULT_INFLATION`] unless set.
    pub fn inflation(&self) -> u64 {
        self.max_inflation.unwrap_or(erdma_limits::DEFAULT_INFLATION)
    }

    /// Says why in the log, and gives the wait before try `attempt` (1-based). Not an `async
    /// fn`, so that the error is not held across the wait (the future stays `Send`).
    pub fn backoff(e: &dyn std::fmt::Display, attempt: u32) -> tokio::time::Sleep {
        let delay = Duration::from_millis(250 << attempt);
        tracing::warn!("{e}; retrying in {delay:?}");
        tokio::time::sleep(delay)
    }

    /// What a reqwest failure means, in words a user can act on.
    fn failure(&self, url: &str, started: Instant) -> impl Fn(reqwest::Error) -> HttpError + '_ {
        let url = url.to_owned();
        move |e: reqwest::Error| {
            let reason = if e.is_timeout() {
                if e.is_connect() {
                    format!(
                        "no connection within {} s (connect timeout)",
                        self.timeouts.connect.as_secs()
                    )
                } else if started.elapsed() >= self.timeouts.deadline {
                    format!(
                        "not done within the {} s transfer deadline",
                        self.timeouts.deadline.as_secs()
                    )
                } else {
                    format!(
                        "the server sent nothing for {} s (read timeout; --read-timeout SECS)",
                        self.timeouts.read.as_secs()
                    )
                }
            } else {
                erdma_common::errors::chain(&e)
            };
            // A certificate that failed to verify fails again: not retried.
            let retry = !e.is_builder() && !e.is_redirect() && tls_failure(&e).is_none();
            HttpError::Transfer { url: url.clone(), reason, retry }
        }
    }

    /// One GET whose answer is a body to read: `None` for 404 and 410.
    pub async fn send(&self, url: &str) -> Result<Option<(reqwest::Response, Instant)>, HttpError> {
        let started = Instant::now();
        let resp = self
            .http()?
            .get(url)
            .timeout(self.timeouts.deadline)
            .send()
            .await
            .map_err(self.failure(url, started))?;
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND || status == reqwest::StatusCode::GONE {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(HttpError::Status { url: url.to_owned(), status });
        }
        Ok(Some((resp, started)))
    }

    /// GETs `url` (http, https, or `file://` as apt's file method reads it); a body longer than
    /// `limit` is [`HttpError::TooLarge`] (read no further than one byte past it); `None` for
    /// 404/410 or a missing file. Transient failures are retried. For small files: the body is
    /// held.
    pub async fn get(&self, url: &str, limit: u64) -> Result<Option<Vec<u8>>, HttpError> {
        let mut attempt = 0;
        loop {
            match self.get_once(url, limit).await {
                Err(e) if e.is_transient() && attempt < RETRIES => {
                    attempt += 1;
                    Self::backoff(&e, attempt).await;
                }
                other => return other,
            }
        }
    }

    async fn get_once(&self, url: &str, limit: u64) -> Result<Option<Vec<u8>>, HttpError> {
        if let Some(path) = url.strip_prefix("file://") {
            let Some(f) = open_file(url, path)? else { return Ok(None) };
            let mut body = Vec::new();
            f.take(limit.saturating_add(1))
                .read_to_end(&mut body)
                .map_err(|source| HttpError::File { url: url.to_owned(), source })?;
            return within(url, body, limit);
        }
        let Some((mut resp, started)) = self.send(url).await? else { return Ok(None) };
        let cap = usize::try_from(limit.saturating_add(1)).unwrap_or(usize::MAX);
        let mut body = Vec::with_capacity(
            resp.content_length()
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(0)
                .min(cap)
                .min(1 << 20),
        );
        while let Some(chunk) = resp.chunk().await.map_err(self.failure(url, started))? {
            let room = cap - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= cap {
                break;
            }
        }
        within(url, body, limit)
    }

    /// Opens `url` as a stream: a file for `file://`, else the body of one GET, pumped from the
    /// async side while a blocking reader takes it (read it on the blocking pool only). `None`
    /// for 404/410 or a missing file. Not retried: the caller knows what it had read.
    pub async fn open_stream(
        &self,
        url: &str,
    ) -> Result<Option<(Box<dyn Read + Send>, Failed)>, HttpError> {
        if let Some(path) = url.strip_prefix("file://") {
            return Ok(open_file(url, path)?
                .map(|f| (Box::new(f) as Box<dyn Read + Send>, Failed::default())));
        }
        let Some((resp, started)) = self.send(url).await? else { return Ok(None) };
        let (reader, tx) = ChannelReader::new(16);
        let failed = reader.failed.clone();
        let this = self.clone();
        let url = url.to_owned();
        tokio::spawn(async move {
            let mut resp = resp;
            loop {
                match resp.chunk().await {
                    Ok(Some(chunk)) => {
                        // The reader stopped (done, or refused the data): stop downloading.
                        if tx.send(Ok(chunk)).await.is_err() {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        let reason = match this.failure(&url, started)(e) {
                            HttpError::Transfer { reason, .. } => reason,
                            other => other.to_string(),
                        };
                        let _ = tx.send(Err(format!("the download broke off: {reason}"))).await;
                        break;
                    }
                }
            }
        });
        Ok(Some((Box::new(reader), failed)))
    }

    /// Downloads `url` into a new file in `dir`, hashing it as it streams by (at most `limit`
    /// bytes; nothing is held in memory but a chunk), retrying transient failures from the
    /// start. Returns the temporary file (the caller checks and names it), its size and its
    /// SHA256; `None` for 404/410.
    pub async fn download(
        &self,
        url: &str,
        dir: &Path,
        limit: u64,
    ) -> Result<Option<(tempfile::NamedTempFile, u64, String)>, HttpError> {
        let mut attempt = 0;
        loop {
            match self.download_once(url, dir, limit).await {
                Err(e) if e.is_transient() && attempt < RETRIES => {
                    attempt += 1;
                    Self::backoff(&e, attempt).await;
                }
                other => return other,
            }
        }
    }

    async fn download_once(
        &self,
        url: &str,
        dir: &Path,
        limit: u64,
    ) -> Result<Option<(tempfile::NamedTempFile, u64, String)>, HttpError> {
        let write = |source| HttpError::Write { path: dir.to_owned(), source };
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(write)?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut take = |chunk: &[u8], tmp: &mut tempfile::NamedTempFile| -> Result<(), HttpError> {
            size += chunk.len() as u64;
            if size > limit {
                return Err(HttpError::TooLarge { url: url.to_owned(), limit });
            }
            hasher.update(chunk);
            tmp.write_all(chunk).map_err(write)
        };
        if let Some(path) = url.strip_prefix("file://") {
            let Some(mut f) = open_file(url, path)? else { return Ok(None) };
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n = f
                    .read(&mut buf)
                    .map_err(|source| HttpError::File { url: url.to_owned(), source })?;
                if n == 0 {
                    break;
                }
                take(&buf[..n], &mut tmp)?;
            }
        } else {
            let Some((mut resp, started)) = self.send(url).await? else { return Ok(None) };
            while let Some(chunk) = resp.chunk().await.map_err(self.failure(url, started))? {
                take(&chunk, &mut tmp)?;
            }
        }
        tmp.flush().map_err(write)?;
        Ok(Some((tmp, size, hex::encode(hasher.finalize()))))
    }
}

/// `body`, unless it is longer than `limit`.
fn within(url: &str, body: Vec<u8>, limit: u64) -> Result<Option<Vec<u8>>, HttpError> {
    if body.len() as u64 > limit {
        return Err(HttpError::TooLarge { url: url.to_owned(), limit });
    }
    Ok(Some(body))
}

/// A `file://` URL's file, as apt's file method reads it; `None` when it is missing.
fn open_file(url: &str, path: &str) -> Result<Option<std::fs::File>, HttpError> {
    match std::fs::File::open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(HttpError::File { url: url.to_owned(), source }),
    }
}

/// Counts and hashes what passes through, copies it to `tee`, and stops at more than `limit`.
pub struct Hashing<R> {
    inner: R,
    hasher: Sha256,
    read: u64,
    limit: u64,
    over: bool,
    tee: Option<std::fs::File>,
}

impl<R> Hashing<R> {
    pub fn new(inner: R, limit: u64, tee: Option<std::fs::File>) -> Self {
        Hashing { inner, hasher: Sha256::new(), read: 0, limit, over: false, tee }
    }

    /// Whether more than `limit` bytes came.
    pub fn over(&self) -> bool {
        self.over
    }

    /// The bytes read and their SHA256 (hex).
    pub fn finish(self) -> (u64, String) {
        (self.read, hex::encode(self.hasher.finalize()))
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if self.read > self.limit {
            self.over = true;
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("more than {} bytes", self.limit),
            ));
        }
        self.hasher.update(&buf[..n]);
        if let Some(t) = &mut self.tee {
            t.write_all(&buf[..n])?;
        }
        Ok(n)
    }
}

/// The body of an HTTP response, fed chunk by chunk from the async side.
pub struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<Result<bytes::Bytes, String>>,
    current: bytes::Bytes,
    /// Set when the sender failed: a network error, not a decoding one.
    pub failed: Failed,
}

impl ChannelReader {
    /// A reader and the sender to feed it; at most `depth` chunks wait in between.
    pub fn new(
        depth: usize,
    ) -> (ChannelReader, tokio::sync::mpsc::Sender<Result<bytes::Bytes, String>>) {
        let (tx, rx) = tokio::sync::mpsc::channel(depth);
        (ChannelReader { rx, current: bytes::Bytes::new(), failed: Arc::default() }, tx)
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            // Read on the blocking pool only.
            match self.rx.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => {
                    *self.failed.lock().expect("poisoned") = Some(e.clone());
                    return Err(std::io::Error::other(e));
                }
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        Ok(n)
    }
}

/// A response's body, read up to `limit` bytes as it comes: the bytes, and whether the body
/// had more (then the rest is not read). Every answer whose length a server chooses and that
/// is held whole (registry manifests, error bodies, token replies) is read through this.
pub async fn capped_body(
    res: &mut reqwest::Response,
    limit: u64,
) -> reqwest::Result<(Vec<u8>, bool)> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut body = Vec::with_capacity(
        res.content_length()
            .map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX))
            .min(limit)
            .min(1 << 20),
    );
    while let Some(chunk) = res.chunk().await? {
        let room = limit.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if chunk.len() > room {
            return Ok((body, true));
        }
    }
    Ok((body, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_errors_are_told_apart() {
        use rustls::{AlertDescription as A, CertificateError as C};
        // As reqwest's connector hands them on: an io::Error around tokio-rustls's.
        let io = |e: rustls::Error| {
            std::io::Error::other(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        };
        let cases = [
            (io(rustls::Error::InvalidCertificate(C::UnknownIssuer)), TlsFailure::UnknownIssuer),
            (io(rustls::Error::InvalidCertificate(C::Expired)), TlsFailure::Expired),
            (io(rustls::Error::InvalidCertificate(C::NotValidForName)), TlsFailure::WrongName),
            (
                io(rustls::Error::AlertReceived(A::CertificateRequired)),
                TlsFailure::ClientCertRequired,
            ),
            (io(rustls::Error::AlertReceived(A::BadCertificate)), TlsFailure::ClientCertRefused),
            // What a plain-HTTP server's answer looks like to a TLS client: the fallback's cue.
            (
                io(rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)),
                TlsFailure::NotTls,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(tls_failure(&e), Some(want));
        }
        assert_eq!(tls_failure(&std::io::Error::other("connection refused")), None);
    }

    use std::net::TcpListener;

    /// A server on 127.0.0.1 that answers every request with headers for `len` bytes and then
    /// sends nothing, holding the connection open; counts the connections.
    fn stalling_server(len: usize) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = count.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n");
                let _ = s.write_all(b"partial");
                held.push(s);
            }
        });
        (format!("http://{addr}/pool/x.deb"), count)
    }

    fn quick() -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(2),
            read: Duration::from_millis(300),
            deadline: Duration::from_secs(60),
        }
    }

    #[tokio::test]
    async fn a_stalled_body_fails_after_the_retries_naming_the_url() {
        let (url, count) = stalling_server(1000);
        let client = Client::new(quick());
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let e = client.download(&url, dir.path(), 1 << 20).await.unwrap_err();
        let took = started.elapsed();
        let text = e.to_string();
        assert!(text.contains(&url) && text.contains("sent nothing for"), "{text}");
        assert_eq!(count.load(std::sync::atomic::Ordering::SeqCst), 1 + RETRIES as usize);
        // 4 × 0.3 s of silence + 3.5 s of backoff, with room for a slow machine.
        assert!(took < Duration::from_secs(10), "{took:?}");
        // Nothing is left behind in the cache directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn the_deadline_bounds_a_trickling_transfer() {
        // One byte every 100 ms never trips the read timeout; the deadline stops it.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/slow", l.local_addr().unwrap());
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf);
                    let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
                    while s.write_all(b"x").is_ok() {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                });
            }
        });
        let client = Client::new(Timeouts {
            connect: Duration::from_secs(2),
            read: Duration::from_secs(5),
            deadline: Duration::from_millis(700),
        });
        let started = Instant::now();
        let e = client.get(&url, 1 << 20).await.unwrap_err();
        assert!(e.to_string().contains("transfer deadline"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[tokio::test]
    async fn downloads_hash_as_they_stream_and_refuse_oversized_bodies() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src.bin");
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&src, &data).unwrap();
        let client = Client::new(quick());
        let url = format!("file://{}", src.display());
        let (tmp, size, sha) = client.download(&url, dir.path(), 1 << 20).await.unwrap().unwrap();
        assert_eq!(size, data.len() as u64);
        assert_eq!(sha, hex::encode(Sha256::digest(&data)));
        assert_eq!(std::fs::read(tmp.path()).unwrap(), data);
        let e = client.download(&url, dir.path(), 1000).await.unwrap_err();
        assert!(matches!(e, HttpError::TooLarge { limit: 1000, .. }), "{e}");
        // The same limit for bodies that are held.
        assert_eq!(client.get(&url, data.len() as u64).await.unwrap().unwrap(), data);
        let e = client.get(&url, data.len() as u64 - 1).await.unwrap_err();
        assert!(matches!(e, HttpError::TooLarge { .. }) && e.to_string().contains(&url), "{e}");
        assert!(client
            .download(&format!("file://{}/missing", dir.path().display()), dir.path(), 10)
            .await
            .unwrap()
            .is_none());
    }
}
