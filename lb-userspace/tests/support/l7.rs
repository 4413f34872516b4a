//! What the L7 proxy tests share (l7_backup_maintenance, l7_failures, l7_protocols): real
//! backends (tiny hyper and tokio servers on 127.0.0.1 ephemeral ports), configuration and
//! selection driven exactly as the daemon drives them (`Selections::compute` with a health
//! closure, then `Published::store`), and clients.
//!
//! A test binary takes it with `mod ports; mod support { pub mod l7; }`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use lb::config::{
    BackendGroup, BackendService, Config, Forwarding, Handshake, HealthCheck, HealthKind,
    L7Settings, Persistence, PortSpec, Timeouts, VService, VServiceKind,
};
use lb::proxy::Proxy;
use lb::selection::{Health, Published, Selections};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::ports::free_port;

/// The IPv6 loopback address, for listeners and backends over IPv6.
pub const V6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

// ---------------------------------------------------------------------------------------------
// Backends

type TestBody = BoxBody<Bytes, Infallible>;

/// A tiny HTTP backend: answers its name; `/stream?n=N&ms=M` streams N chunks M ms apart;
/// `?ms=M` waits M ms first; echoes X-Forwarded-* and Host back as `seen-*` headers.
pub struct Backend {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicUsize>,
    /// Connections accepted (HTTP backends only).
    pub conns: Arc<AtomicUsize>,
    pub task: tokio::task::JoinHandle<()>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Backend {
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    pub fn conns(&self) -> usize {
        self.conns.load(Ordering::SeqCst)
    }
}

pub async fn http_backend(name: &str) -> Backend {
    http_backend_at("127.0.0.1:0", name).await
}

/// [`http_backend`] listening on `bind` (e.g. `[::1]:0` for an IPv6 backend).
pub async fn http_backend_at(bind: &str, name: &str) -> Backend {
    let listener = TcpListener::bind(bind).await.expect("bind backend");
    let addr = listener.local_addr().expect("addr");
    let hits = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicUsize::new(0));
    let (n, h, counted) = (name.to_string(), hits.clone(), accepted.clone());
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            counted.fetch_add(1, Ordering::SeqCst);
            let (n, h) = (n.clone(), h.clone());
            conns.spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let (n, h) = (n.clone(), h.clone());
                    async move { Ok::<_, Infallible>(answer(&n, &h, req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Backend {
        addr,
        hits,
        conns: accepted,
        task,
    }
}

fn query(req: &Request<Incoming>, key: &str) -> u64 {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

async fn answer(name: &str, hits: &AtomicUsize, req: Request<Incoming>) -> Response<TestBody> {
    hits.fetch_add(1, Ordering::SeqCst);
    let mut resp = Response::builder();
    for h in ["x-forwarded-for", "x-forwarded-proto", "host"] {
        if let Some(v) = req.headers().get(h) {
            resp = resp.header(format!("seen-{h}"), v.clone());
        }
    }
    let (n, ms) = (query(&req, "n"), query(&req, "ms"));
    let body: TestBody = if req.uri().path() == "/stream" {
        Chunks {
            left: n,
            every: Duration::from_millis(ms),
            name: name.to_string(),
            sleep: None,
        }
        .boxed()
    } else {
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let _ = req.into_body().collect().await;
        Full::new(Bytes::from(name.to_string())).boxed()
    };
    resp.body(body).expect("response")
}

/// `left` chunks "<name>\n", one every `every`.
struct Chunks {
    left: u64,
    every: Duration,
    name: String,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let every = self.every;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(every)));
        if sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.sleep = None;
        self.left -= 1;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(format!(
            "{}\n",
            self.name
        ))))))
    }
}

/// A TCP echo backend that prefixes every reply with its name.
pub async fn tcp_backend(name: &str) -> Backend {
    tcp_backend_at("127.0.0.1:0", name).await
}

/// [`tcp_backend`] listening on `bind`.
pub async fn tcp_backend_at(bind: &str, name: &str) -> Backend {
    let listener = TcpListener::bind(bind).await.expect("bind backend");
    let addr = listener.local_addr().expect("addr");
    let hits = Arc::new(AtomicUsize::new(0));
    let (n, h) = (name.to_string(), hits.clone());
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            h.fetch_add(1, Ordering::SeqCst);
            let n = n.clone();
            conns.spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(k) = stream.read(&mut buf).await {
                    if k == 0 {
                        // Half-close: answer "bye" after the client's EOF, then close.
                        let _ = stream.write_all(format!("{n}:bye").as_bytes()).await;
                        return;
                    }
                    let mut out = format!("{n}:").into_bytes();
                    out.extend_from_slice(&buf[..k]);
                    if stream.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Backend {
        addr,
        hits,
        conns: Arc::new(AtomicUsize::new(0)),
        task,
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration and selection, driven like the daemon drives them

pub fn service(name: &str, addr: SocketAddr) -> BackendService {
    BackendService {
        name: name.into(),
        address: addr.ip(),
        address6: None,
        port: addr.port(),
        weight: 1,
        // A check is assigned so that the health the test publishes counts (S-HC6).
        health_check: Some("hc".into()),
        maintenance: false,
        backup: false,
        max_connections: None,
        tunnel_check: None,
    }
}

pub fn backup(name: &str, addr: SocketAddr) -> BackendService {
    BackendService {
        backup: true,
        ..service(name, addr)
    }
}

pub fn l7(timeouts: Timeouts) -> L7Settings {
    L7Settings {
        algorithm: lb::config::Algorithm::RoundRobin,
        persistence: Persistence::None,
        timeouts,
        queue_size: 1024,
        retry: Default::default(),
        tls: None,
        error_page: None,
        forwarded_headers: true,
        conditional_sets: Vec::new(),
    }
}

pub fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        client: Duration::from_secs(10),
        server: Duration::from_secs(10),
        queue: Duration::from_secs(2),
        keep_alive: Duration::from_secs(30),
    }
}

pub fn vservice(name: &str, kind: VServiceKind, backends: &[&str]) -> VService {
    VService {
        name: name.into(),
        kind,
        address: [127, 0, 0, 1].into(),
        address6: None,
        ports: PortSpec::Single(free_port()),
        forwarding: Forwarding::Nat,
        maglev_size: 65537,
        backends: backends.iter().map(|s| s.to_string()).collect(),
        apply_admin_state: false,
        l7: Some(l7(timeouts())),
    }
}

/// [`vservice`] listening on `address` instead of 127.0.0.1.
pub fn vservice_at(address: IpAddr, name: &str, kind: VServiceKind, backends: &[&str]) -> VService {
    VService {
        address,
        ..vservice(name, kind, backends)
    }
}

pub fn config(
    services: Vec<BackendService>,
    groups: Vec<BackendGroup>,
    vs: Vec<VService>,
) -> Config {
    // Defaults for everything else come from the real parser (an empty file is valid).
    let mut cfg = lb::config::parse("", "l7-test.toml").expect("an empty config parses");
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
    cfg.backend_services = services;
    cfg.backend_groups = groups;
    cfg.vservices = vs;
    cfg
}

/// The proxy plus the inputs of selection (config and health), republished on each change.
pub struct Env {
    pub cfg: Config,
    pub health: Mutex<HashMap<String, Health>>,
    pub published: Arc<Published>,
    pub proxy: Proxy,
}

impl Env {
    pub async fn start(cfg: Config) -> Env {
        let published = Arc::new(Published::default());
        let env_health = Mutex::new(HashMap::new());
        published.store(Selections::compute(&cfg, &|_| Health::Ok));
        let proxy = Proxy::start(Arc::new(cfg.clone()), published.clone())
            .await
            .expect("proxy starts");
        Env {
            cfg,
            health: env_health,
            published,
            proxy,
        }
    }

    pub fn publish(&self) {
        let health = self.health.lock().expect("lock").clone();
        let f = move |name: &str| health.get(name).copied().unwrap_or(Health::Ok);
        self.published.store(Selections::compute(&self.cfg, &f));
    }

    pub fn set_health(&self, name: &str, h: Health) {
        self.health.lock().expect("lock").insert(name.into(), h);
        self.publish();
    }

    /// Changes the configuration (e.g. Maintenance) and applies it like the daemon: reload
    /// the proxy, then republish selection.
    pub async fn reconfigure(&mut self, change: impl FnOnce(&mut Config)) {
        change(&mut self.cfg);
        self.proxy
            .update(Arc::new(self.cfg.clone()))
            .await
            .expect("reload");
        self.publish();
    }

    pub async fn set_maintenance(&mut self, name: &str, on: bool) {
        self.reconfigure(|cfg| {
            for s in cfg.backend_services.iter_mut().filter(|s| s.name == name) {
                s.maintenance = on;
            }
        })
        .await;
    }

    pub fn addr(&self, vs: &str) -> SocketAddr {
        let vs = self
            .cfg
            .vservices
            .iter()
            .find(|v| v.name == vs)
            .expect("vservice");
        match vs.ports {
            PortSpec::Single(p) => SocketAddr::new(vs.address, p),
            _ => unreachable!("single port"),
        }
    }

    pub fn stats(&self, vs: &str) -> lb::proxy::VsStats {
        self.proxy
            .stats()
            .into_iter()
            .find(|s| s.name == vs)
            .expect("stats")
    }
}

// ---------------------------------------------------------------------------------------------
// Clients

pub fn client() -> Client<HttpConnector, Empty<Bytes>> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

/// GET `path` on `addr`: (status, headers, body).
pub async fn get(addr: SocketAddr, path: &str) -> (StatusCode, hyper::HeaderMap, String) {
    get_with(&client(), addr, path, &[]).await
}

pub async fn get_with(
    c: &Client<HttpConnector, Empty<Bytes>>,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, hyper::HeaderMap, String) {
    let mut req = Request::get(format!("http://{addr}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = tokio::time::timeout(
        Duration::from_secs(10),
        c.request(req.body(Empty::new()).expect("req")),
    )
    .await
    .expect("in time")
    .expect("response");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

/// Sends raw bytes and reads until the proxy closes or 5 s pass.
pub async fn raw(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(bytes).await.expect("write");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// An address nothing listens on: connecting is refused at once.
pub async fn refusing_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    addr
}
