//! What the HTTP/1.1 wire tests (l7_http1) use: a buffered TCP stream with bounded reads and
//! HTTP/1.1 framing, raw backends (parsed with httparse) that record exactly what reached
//! them and answer scripted bytes, and the proxy with one plain HTTP vService in front of one
//! backend, selection driven as the daemon drives it.
//!
//! A test binary takes it with `mod ports; mod support { pub mod http1; }`.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lb::config::{
    BackendService, Forwarding, Handshake, HealthCheck, HealthKind, L7Settings, Persistence,
    PortSpec, Timeouts, VService, VServiceKind,
};
use lb::proxy::Proxy;
use lb::selection::{Health, Published, Selections};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::ports::free_port;

/// Longest wait for any single read by a test client.
pub const CLIENT_READ: Duration = Duration::from_secs(5);
/// Longest wait for any single read by a test backend (longer than a test lasts).
pub const BACKEND_READ: Duration = Duration::from_secs(20);
/// Largest head or buffered excess the test parser accepts before giving up.
pub const MAX_HEAD: usize = 256 * 1024;

// ---------------------------------------------------------------------------------------------
// Wire: a buffered TCP stream with bounded reads and HTTP/1.1 framing helpers

/// A TCP stream plus the bytes read from it and not yet consumed.
pub struct Wire {
    pub s: TcpStream,
    pub buf: Vec<u8>,
    pub limit: Duration,
}

/// What a connection does within a short wait.
#[derive(Debug, PartialEq)]
pub enum Idle {
    /// Nothing arrives and the peer keeps the connection open.
    Quiet,
    /// Bytes arrive (or were already buffered).
    Data,
    /// The peer closed (EOF or reset).
    Closed,
}

impl Wire {
    pub fn new(s: TcpStream, limit: Duration) -> Wire {
        Wire {
            s,
            buf: Vec::new(),
            limit,
        }
    }

    /// Reads more bytes: Ok(false) at EOF, Err on a timeout or an I/O error.
    pub async fn fill(&mut self) -> Result<bool, String> {
        self.buf.reserve(64 * 1024);
        match tokio::time::timeout(self.limit, self.s.read_buf(&mut self.buf)).await {
            Err(_) => Err(format!("no bytes within {:?}", self.limit)),
            Ok(Err(e)) => Err(e.to_string()),
            Ok(Ok(n)) => Ok(n > 0),
        }
    }

    pub async fn fill_or_eof_error(&mut self) -> Result<(), String> {
        if self.fill().await? {
            Ok(())
        } else {
            Err(format!(
                "connection closed early ({} bytes pending)",
                self.buf.len()
            ))
        }
    }

    pub fn take(&mut self, n: usize) -> Vec<u8> {
        self.buf.drain(..n).collect()
    }

    /// A message head through its blank line; None on a clean EOF before any byte.
    pub async fn head(&mut self) -> Result<Option<Vec<u8>>, String> {
        for _ in 0..100_000 {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                return Ok(Some(self.take(end + 4)));
            }
            if self.buf.len() > MAX_HEAD {
                return Err("head too large".into());
            }
            if !self.fill().await? {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(format!(
                        "EOF inside a head: {:?}",
                        String::from_utf8_lossy(&self.buf)
                    ))
                };
            }
        }
        Err("head never completed".into())
    }

    /// One line without its CRLF.
    pub async fn line(&mut self) -> Result<Vec<u8>, String> {
        for _ in 0..100_000 {
            if let Some(end) = find(&self.buf, b"\r\n") {
                let mut line = self.take(end + 2);
                line.truncate(end);
                return Ok(line);
            }
            if self.buf.len() > MAX_HEAD {
                return Err("line too long".into());
            }
            self.fill_or_eof_error().await?;
        }
        Err("line never completed".into())
    }

    pub async fn exact(&mut self, n: usize) -> Result<Vec<u8>, String> {
        for _ in 0..1_000_000 {
            if self.buf.len() >= n {
                return Ok(self.take(n));
            }
            self.fill_or_eof_error().await?;
        }
        Err("body never completed".into())
    }

    pub async fn until_eof(&mut self) -> Result<Vec<u8>, String> {
        for _ in 0..1_000_000 {
            if !self.fill().await? {
                return Ok(std::mem::take(&mut self.buf));
            }
        }
        Err("the peer never closed".into())
    }

    /// Decodes a chunked body (RFC 9112 7.1), trailers included and discarded.
    pub async fn chunked(&mut self) -> Result<Vec<u8>, String> {
        let mut body = Vec::new();
        for _ in 0..1_000_000 {
            let line = self.line().await?;
            let line = String::from_utf8_lossy(&line).into_owned();
            let size = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size, 16)
                .map_err(|_| format!("bad chunk size line {line:?}"))?;
            if size == 0 {
                // Trailer section, ended by an empty line.
                for _ in 0..1_000 {
                    if self.line().await?.is_empty() {
                        return Ok(body);
                    }
                }
                return Err("endless trailers".into());
            }
            body.extend(self.exact(size).await?);
            if !self.line().await?.is_empty() {
                return Err("chunk data not followed by CRLF".into());
            }
        }
        Err("endless chunks".into())
    }

    pub async fn read_body(&mut self, framing: Framing) -> Result<Vec<u8>, String> {
        match framing {
            Framing::None => Ok(Vec::new()),
            Framing::Length(n) => self.exact(n).await,
            Framing::Chunked => self.chunked().await,
            Framing::Close => self.until_eof().await,
        }
    }

    /// Whether bytes arrive, the peer closes, or nothing happens within `within`.
    pub async fn idle(&mut self, within: Duration) -> Idle {
        if !self.buf.is_empty() {
            return Idle::Data;
        }
        self.buf.reserve(4096);
        match tokio::time::timeout(within, self.s.read_buf(&mut self.buf)).await {
            Err(_) => Idle::Quiet,
            Ok(Ok(0)) | Ok(Err(_)) => Idle::Closed,
            Ok(Ok(_)) => Idle::Data,
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        tokio::time::timeout(CLIENT_READ, self.s.write_all(bytes))
            .await
            .expect("write in time")
            .expect("write");
    }
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// How a message body is delimited (RFC 9112 6.3).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Framing {
    None,
    Length(usize),
    Chunked,
    Close,
}

/// Header fields in wire order, names as received.
#[derive(Clone, Debug, Default)]
pub struct Headers(pub Vec<(String, String)>);

impl Headers {
    pub fn parse(raw: &[httparse::Header<'_>]) -> Headers {
        Headers(
            raw.iter()
                .map(|h| {
                    (
                        h.name.to_string(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect(),
        )
    }

    pub fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.all(name).first().copied()
    }

    pub fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Framing of a body from its headers; `otherwise` when neither TE nor CL is present.
    pub fn framing(&self, otherwise: Framing) -> Result<Framing, String> {
        let te = self.all("transfer-encoding").join(",");
        if !te.is_empty() {
            let last = te.rsplit(',').next().unwrap_or("").trim();
            return if last.eq_ignore_ascii_case("chunked") {
                Ok(Framing::Chunked)
            } else {
                Err(format!("unsupported transfer-encoding {te:?}"))
            };
        }
        match self.get("content-length") {
            Some(v) => v
                .trim()
                .parse()
                .map(Framing::Length)
                .map_err(|_| format!("bad content-length {v:?}")),
            None => Ok(otherwise),
        }
    }
}

/// A response as the client read it.
#[derive(Debug)]
pub struct Resp {
    pub version: u8,
    pub status: u16,
    pub headers: Headers,
    pub body: Vec<u8>,
    pub framing: Framing,
}

impl Resp {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Reads one response to a request of `method` (HEAD, 1xx, 204 and 304 have no body).
pub async fn read_response(w: &mut Wire, method: &str) -> Result<Resp, String> {
    let head = w.head().await?.ok_or("closed before a response")?;
    let mut raw = [httparse::EMPTY_HEADER; 128];
    let mut parsed = httparse::Response::new(&mut raw);
    match parsed.parse(&head) {
        Ok(httparse::Status::Complete(_)) => {}
        other => {
            return Err(format!(
                "unparsable response head {other:?}: {:?}",
                String::from_utf8_lossy(&head)
            ));
        }
    }
    let status = parsed.code.ok_or("no status")?;
    let version = parsed.version.ok_or("no version")?;
    let headers = Headers::parse(parsed.headers);
    let framing = if method == "HEAD" || status < 200 || status == 204 || status == 304 {
        Framing::None
    } else {
        headers.framing(Framing::Close)?
    };
    let body = w.read_body(framing).await?;
    Ok(Resp {
        version,
        status,
        headers,
        body,
        framing,
    })
}

pub async fn connect(addr: SocketAddr) -> Wire {
    let s = tokio::time::timeout(CLIENT_READ, TcpStream::connect(addr))
        .await
        .expect("connect in time")
        .expect("connect");
    Wire::new(s, CLIENT_READ)
}

/// Sends `req` and reads the response to it.
pub async fn exchange(w: &mut Wire, req: &[u8], method: &str) -> Resp {
    w.send(req).await;
    read_response(w, method).await.expect("a response")
}

pub fn get_req(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: web.test\r\n\r\n").into_bytes()
}

// ---------------------------------------------------------------------------------------------
// Raw backends

/// One request as the backend received it (body decoded).
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub target: String,
    pub headers: Headers,
    pub body: Vec<u8>,
}

/// A scripted answer: byte pieces, each written after its pause; then close or keep alive.
pub struct Reply {
    pub pieces: Vec<(Duration, Vec<u8>)>,
    pub close: bool,
}

pub fn reply(bytes: impl Into<Vec<u8>>) -> Reply {
    Reply {
        pieces: vec![(Duration::ZERO, bytes.into())],
        close: false,
    }
}

/// 200 with a Content-Length body.
pub fn ok(body: &[u8]) -> Reply {
    let mut out = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    reply(out)
}

pub type Script = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// A raw HTTP/1.1 backend on 127.0.0.1: counts accepted connections, records every request.
pub struct RawBackend {
    pub addr: SocketAddr,
    pub accepts: Arc<AtomicUsize>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    pub task: tokio::task::JoinHandle<()>,
}

impl Drop for RawBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RawBackend {
    pub fn accepts(&self) -> usize {
        self.accepts.load(Ordering::SeqCst)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }
}

/// Starts a backend answering each request with `script`; with `idle_close`, a connection
/// that stays idle that long between requests is closed without a word.
pub async fn raw_backend(
    idle_close: Option<Duration>,
    script: impl Fn(&Seen) -> Reply + Send + Sync + 'static,
) -> RawBackend {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepts = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let script: Script = Arc::new(script);
    let (a, s) = (accepts.clone(), seen.clone());
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        for _ in 0..10_000 {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            a.fetch_add(1, Ordering::SeqCst);
            conns.spawn(serve_backend_conn(
                Wire::new(stream, BACKEND_READ),
                script.clone(),
                s.clone(),
                idle_close,
            ));
        }
    });
    RawBackend {
        addr,
        accepts,
        seen,
        task,
    }
}

/// A backend echoing the request target as a Content-Length body.
pub async fn echo_backend() -> RawBackend {
    raw_backend(None, |seen| ok(seen.target.as_bytes())).await
}

pub async fn serve_backend_conn(
    mut w: Wire,
    script: Script,
    seen: Arc<Mutex<Vec<Seen>>>,
    idle_close: Option<Duration>,
) {
    for _ in 0..10_000 {
        if let Some(idle) = idle_close
            && w.buf.is_empty()
            && !matches!(tokio::time::timeout(idle, w.fill()).await, Ok(Ok(true)))
        {
            // Idle too long (or closed): drop the socket silently.
            return;
        }
        let Ok(Some(head)) = w.head().await else {
            return;
        };
        let mut raw = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut raw);
        if !matches!(req.parse(&head), Ok(httparse::Status::Complete(_))) {
            return;
        }
        let headers = Headers::parse(req.headers);
        let (method, target) = (
            req.method.unwrap_or("").to_string(),
            req.path.unwrap_or("").to_string(),
        );
        let expects = headers
            .get("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
        if expects
            && w.s
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .is_err()
        {
            return;
        }
        let Ok(framing) = headers.framing(Framing::None) else {
            return;
        };
        let Ok(body) = w.read_body(framing).await else {
            return;
        };
        let request = Seen {
            method,
            target,
            headers,
            body,
        };
        let answer = script(&request);
        seen.lock().expect("lock").push(request);
        for (pause, bytes) in answer.pieces {
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            if w.s.write_all(&bytes).await.is_err() {
                return;
            }
        }
        if answer.close {
            let _ = w.s.shutdown().await;
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The proxy: one plain HTTP vService in front of one backend, selection as the daemon drives it

pub struct Env {
    pub proxy: Proxy,
    pub addr: SocketAddr,
}

impl Env {
    pub async fn start(backend: SocketAddr) -> Env {
        Env::start_with(backend, Duration::from_secs(30)).await
    }

    /// A proxy whose vService closes connections idle for `keep_alive`.
    pub async fn start_with(backend: SocketAddr, keep_alive: Duration) -> Env {
        let cfg = Env::config(backend, keep_alive);
        let published = Arc::new(Published::default());
        published.store(Selections::compute(&cfg, &|_| Health::Ok));
        let PortSpec::Single(port) = cfg.vservices[0].ports else {
            panic!("the test vService has one port");
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let proxy = Proxy::start(Arc::new(cfg), published)
            .await
            .expect("proxy starts");
        Env { proxy, addr }
    }

    pub fn config(backend: SocketAddr, keep_alive: Duration) -> lb::config::Config {
        let port = free_port();
        let mut cfg = lb::config::parse("", "l7-http1-test.toml").expect("an empty config parses");
        cfg.health_checks = vec![HealthCheck {
            name: "hc".into(),
            kind: HealthKind::Tcp(Handshake::HalfOpen),
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            required_successes: 3,
            required_failures: 2,
            passive_failures: None,
            max_ejection_percent: 50,
        }];
        cfg.backend_services = vec![BackendService {
            name: "a".into(),
            address: backend.ip(),
            address6: None,
            port: backend.port(),
            weight: 1,
            health_check: Some("hc".into()),
            maintenance: false,
            backup: false,
            max_connections: None,
            tunnel_check: None,
        }];
        cfg.vservices = vec![VService {
            name: "web".into(),
            kind: VServiceKind::Http,
            address: [127, 0, 0, 1].into(),
            address6: None,
            ports: PortSpec::Single(port),
            forwarding: Forwarding::Nat,
            maglev_size: 65537,
            backends: vec!["a".into()],
            apply_admin_state: false,
            l7: Some(L7Settings {
                algorithm: lb::config::Algorithm::RoundRobin,
                persistence: Persistence::None,
                timeouts: Timeouts {
                    connect: Duration::from_secs(2),
                    client: Duration::from_secs(10),
                    server: Duration::from_secs(10),
                    queue: Duration::from_secs(2),
                    keep_alive,
                },
                queue_size: 1024,
                retry: Default::default(),
                tls: None,
                error_page: None,
                forwarded_headers: true,
                conditional_sets: Vec::new(),
            }),
        }];
        cfg
    }

    /// Bytes the vService's pool counted from backend "a" to clients.
    pub fn bytes_out(&self) -> u64 {
        self.proxy
            .stats()
            .into_iter()
            .find(|s| s.name == "web")
            .and_then(|s| s.pool.backends.into_iter().find(|b| b.name == "a"))
            .map_or(0, |b| b.bytes_out)
    }
}

/// A deterministic, non-periodic test payload.
pub fn payload(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i * 7 + i / 251 + i / 65_521) as u8)
        .collect()
}

/// FNV-1a 64: a cheap checksum to compare payloads.
pub fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

pub fn length_and_sum(data: &[u8]) -> String {
    format!("{} {:016x}", data.len(), fnv(data))
}
