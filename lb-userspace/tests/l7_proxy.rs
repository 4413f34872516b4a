//! L7 proxy (HTTP and L7 TCP vServices) end to end on loopback: real backends (tiny hyper and
//! tokio servers on 127.0.0.1 ephemeral ports), the real proxy, real clients. Each test names
//! the SPEC rule it checks. The selection snapshot is driven exactly as the daemon does it:
//! `Selections::compute` with a health closure, then `Published::store`.

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
    BackendGroup, BackendService, Condition, ConditionalSet, Config, CookiePersistence, Forwarding,
    Handshake, HealthCheck, HealthKind, L7Settings, Persistence, PortSpec, SameSite, StrMatch,
    Timeouts, TlsSettings, VService, VServiceKind,
};
use lb::proxy::Proxy;
use lb::selection::{Health, Published, Selections};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod ports;
use ports::free_port;

// ---------------------------------------------------------------------------------------------
// Backends

type TestBody = BoxBody<Bytes, Infallible>;

/// A tiny HTTP backend: answers its name; `/stream?n=N&ms=M` streams N chunks M ms apart;
/// `?ms=M` waits M ms first; echoes X-Forwarded-* and Host back as `seen-*` headers.
struct Backend {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    /// Connections accepted (HTTP backends only).
    conns: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Backend {
    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    fn conns(&self) -> usize {
        self.conns.load(Ordering::SeqCst)
    }
}

async fn http_backend(name: &str) -> Backend {
    http_backend_at("127.0.0.1:0", name).await
}

/// [`http_backend`] listening on `bind` (e.g. `[::1]:0` for an IPv6 backend).
async fn http_backend_at(bind: &str, name: &str) -> Backend {
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
async fn tcp_backend(name: &str) -> Backend {
    tcp_backend_at("127.0.0.1:0", name).await
}

/// [`tcp_backend`] listening on `bind`.
async fn tcp_backend_at(bind: &str, name: &str) -> Backend {
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

fn service(name: &str, addr: SocketAddr) -> BackendService {
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
    }
}

fn backup(name: &str, addr: SocketAddr) -> BackendService {
    BackendService {
        backup: true,
        ..service(name, addr)
    }
}

fn l7(timeouts: Timeouts) -> L7Settings {
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

fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        client: Duration::from_secs(10),
        server: Duration::from_secs(10),
        queue: Duration::from_secs(2),
        keep_alive: Duration::from_secs(30),
    }
}

fn vservice(name: &str, kind: VServiceKind, backends: &[&str]) -> VService {
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
fn vservice_at(address: IpAddr, name: &str, kind: VServiceKind, backends: &[&str]) -> VService {
    VService {
        address,
        ..vservice(name, kind, backends)
    }
}

fn config(services: Vec<BackendService>, groups: Vec<BackendGroup>, vs: Vec<VService>) -> Config {
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
    }];
    cfg.backend_services = services;
    cfg.backend_groups = groups;
    cfg.vservices = vs;
    cfg
}

/// The proxy plus the inputs of selection (config and health), republished on each change.
struct Env {
    cfg: Config,
    health: Mutex<HashMap<String, Health>>,
    published: Arc<Published>,
    proxy: Proxy,
}

impl Env {
    async fn start(cfg: Config) -> Env {
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

    fn publish(&self) {
        let health = self.health.lock().expect("lock").clone();
        let f = move |name: &str| health.get(name).copied().unwrap_or(Health::Ok);
        self.published.store(Selections::compute(&self.cfg, &f));
    }

    fn set_health(&self, name: &str, h: Health) {
        self.health.lock().expect("lock").insert(name.into(), h);
        self.publish();
    }

    /// Changes the configuration (e.g. Maintenance) and applies it like the daemon: reload
    /// the proxy, then republish selection.
    async fn reconfigure(&mut self, change: impl FnOnce(&mut Config)) {
        change(&mut self.cfg);
        self.proxy
            .update(Arc::new(self.cfg.clone()))
            .await
            .expect("reload");
        self.publish();
    }

    async fn set_maintenance(&mut self, name: &str, on: bool) {
        self.reconfigure(|cfg| {
            for s in cfg.backend_services.iter_mut().filter(|s| s.name == name) {
                s.maintenance = on;
            }
        })
        .await;
    }

    fn addr(&self, vs: &str) -> SocketAddr {
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

    fn stats(&self, vs: &str) -> lb::proxy::VsStats {
        self.proxy
            .stats()
            .into_iter()
            .find(|s| s.name == vs)
            .expect("stats")
    }
}

// ---------------------------------------------------------------------------------------------
// Clients

fn client() -> Client<HttpConnector, Empty<Bytes>> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

/// GET `path` on `addr`: (status, headers, body).
async fn get(addr: SocketAddr, path: &str) -> (StatusCode, hyper::HeaderMap, String) {
    get_with(&client(), addr, path, &[]).await
}

async fn get_with(
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
async fn raw(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(bytes).await.expect("write");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

// ---------------------------------------------------------------------------------------------
// Tests: Backup (S-BK)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_bk1_s_bk2_backup_takes_over_when_every_main_is_error_or_in_maintenance() {
    let (a, b, bk) = (
        http_backend("a").await,
        http_backend("b").await,
        http_backend("bk").await,
    );
    let vs = vservice("web", VServiceKind::Http, &["a", "b", "bk"]);
    let mut env = Env::start(config(
        vec![
            service("a", a.addr),
            service("b", b.addr),
            backup("bk", bk.addr),
        ],
        vec![],
        vec![vs],
    ))
    .await;
    let addr = env.addr("web");
    // S-BK1: with mains available the backup gets nothing.
    for _ in 0..10 {
        let (status, _, body) = get(addr, "/").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body == "a" || body == "b", "{body}");
    }
    assert_eq!(bk.hits(), 0);
    // One main in Error, the other in Maintenance: the backup takes over (S-BK2).
    env.set_health("a", Health::Error);
    env.set_maintenance("b", true).await;
    for _ in 0..5 {
        assert_eq!(get(addr, "/").await.2, "bk");
    }
    // A main is back: new requests leave the backup.
    env.set_health("a", Health::Ok);
    for _ in 0..5 {
        assert_eq!(get(addr, "/").await.2, "a");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_bk3_only_the_first_available_backup_gets_traffic() {
    let (m, b1, b2) = (
        http_backend("m").await,
        http_backend("b1").await,
        http_backend("b2").await,
    );
    let vs = vservice("web", VServiceKind::Http, &["m", "b1", "b2"]);
    let env = Env::start(config(
        vec![
            service("m", m.addr),
            backup("b1", b1.addr),
            backup("b2", b2.addr),
        ],
        vec![],
        vec![vs],
    ))
    .await;
    let addr = env.addr("web");
    env.set_health("m", Health::Error);
    for _ in 0..10 {
        assert_eq!(get(addr, "/").await.2, "b1");
    }
    assert_eq!(b2.hits(), 0, "traffic is never spread across backups");
    env.set_health("b1", Health::Error);
    for _ in 0..5 {
        assert_eq!(get(addr, "/").await.2, "b2");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_bk4_main_return_moves_new_traffic_while_open_streams_on_the_backup_finish() {
    let (m, bk) = (http_backend("m").await, http_backend("bk").await);
    let (tm, tbk) = (tcp_backend("tm").await, tcp_backend("tbk").await);
    let web = vservice("web", VServiceKind::Http, &["m", "bk"]);
    let tcp = vservice("tcp", VServiceKind::L7Tcp, &["tm", "tbk"]);
    let env = Env::start(config(
        vec![
            service("m", m.addr),
            backup("bk", bk.addr),
            service("tm", tm.addr),
            backup("tbk", tbk.addr),
        ],
        vec![],
        vec![web, tcp],
    ))
    .await;
    let (web, tcp) = (env.addr("web"), env.addr("tcp"));
    env.set_health("m", Health::Error);
    env.set_health("tm", Health::Error);
    // A streaming response (20 chunks over ~1 s) and an L7 TCP connection, both on the backups.
    let stream = tokio::spawn(get(web, "/stream?n=20&ms=50"));
    let mut conn = TcpStream::connect(tcp).await.expect("connect");
    conn.write_all(b"x").await.expect("write");
    let mut buf = [0u8; 64];
    let k = conn.read(&mut buf).await.expect("read");
    assert_eq!(&buf[..k], b"tbk:x");
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The mains return: new requests and connections go to them...
    env.set_health("m", Health::Ok);
    env.set_health("tm", Health::Ok);
    assert_eq!(get(web, "/").await.2, "m");
    let mut fresh = TcpStream::connect(tcp).await.expect("connect");
    fresh.write_all(b"y").await.expect("write");
    let k = fresh.read(&mut buf).await.expect("read");
    assert_eq!(&buf[..k], b"tm:y");
    // ...while the open ones keep going on the backups to completion.
    conn.write_all(b"z").await.expect("write");
    let k = conn.read(&mut buf).await.expect("read");
    assert_eq!(&buf[..k], b"tbk:z");
    let (status, _, body) = stream.await.expect("join");
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, "bk\n".repeat(20), "the streamed response completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_bk9_no_backend_answers_503_with_the_configured_or_built_in_page_and_closes_l7_tcp() {
    let (a, t) = (http_backend("a").await, tcp_backend("t").await);
    let plain = vservice("plain", VServiceKind::Http, &["a"]);
    let mut paged = vservice("paged", VServiceKind::Http, &["a"]);
    if let Some(l7) = paged.l7.as_mut() {
        l7.error_page = Some("<h1>down for maintenance</h1>".into());
    }
    let tcp = vservice("tcp", VServiceKind::L7Tcp, &["t"]);
    let env = Env::start(config(
        vec![service("a", a.addr), service("t", t.addr)],
        vec![],
        vec![plain, paged, tcp],
    ))
    .await;
    env.set_health("a", Health::Error);
    env.set_health("t", Health::Error);
    let (status, headers, body) = get(env.addr("plain"), "/").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        headers["content-type"]
            .to_str()
            .expect("ascii")
            .starts_with("text/plain")
    );
    assert_eq!(headers["retry-after"], "1");
    assert!(body.contains("503"), "{body}");
    let (status, headers, body) = get(env.addr("paged"), "/").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        headers["content-type"]
            .to_str()
            .expect("ascii")
            .starts_with("text/html")
    );
    assert_eq!(body, "<h1>down for maintenance</h1>");
    assert_eq!(a.hits(), 0);
    // L7 TCP: the client is closed at once, without any data.
    let started = std::time::Instant::now();
    let mut conn = TcpStream::connect(env.addr("tcp")).await.expect("connect");
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(2), conn.read(&mut buf))
        .await
        .expect("closed in time");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "closed without data: {read:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(t.hits(), 0);
    assert_eq!(env.stats("plain").counts.unavailable, 1);
    assert_eq!(env.stats("tcp").counts.unavailable, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_bk6_a_conditional_set_uses_its_own_list_and_backups() {
    let (d, dbk, api, apibk) = (
        http_backend("d").await,
        http_backend("dbk").await,
        http_backend("api").await,
        http_backend("apibk").await,
    );
    let mut vs = vservice("web", VServiceKind::Http, &["d", "dbk"]);
    if let Some(l7) = vs.l7.as_mut() {
        l7.conditional_sets = vec![ConditionalSet {
            name: "api".into(),
            conditions: vec![Condition::Path(StrMatch::Prefix("/api/".into()))],
            backends: vec!["api".into(), "apibk".into()],
        }];
    }
    let env = Env::start(config(
        vec![
            service("d", d.addr),
            backup("dbk", dbk.addr),
            service("api", api.addr),
            backup("apibk", apibk.addr),
        ],
        vec![],
        vec![vs],
    ))
    .await;
    let addr = env.addr("web");
    assert_eq!(get(addr, "/api/x").await.2, "api");
    assert_eq!(get(addr, "/index").await.2, "d");
    // The set's main fails: the set's own backup takes over, not the Default list's.
    env.set_health("api", Health::Error);
    assert_eq!(get(addr, "/api/x").await.2, "apibk");
    assert_eq!(get(addr, "/index").await.2, "d");
    // The Default list's main fails: its backup serves the default, the set keeps its own.
    env.set_health("d", Health::Error);
    assert_eq!(get(addr, "/index").await.2, "dbk");
    assert_eq!(get(addr, "/api/y").await.2, "apibk");
    // Both of the set's members down: 503 for the set, although the Default backup is up.
    env.set_health("apibk", Health::Error);
    assert_eq!(get(addr, "/api/z").await.0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(get(addr, "/index").await.2, "dbk");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_bk8_a_full_backend_makes_requests_wait_never_the_backup_and_503_on_queue_timeout() {
    let (m, bk) = (http_backend("m").await, http_backend("bk").await);
    let mut vs = vservice("web", VServiceKind::Http, &["m", "bk"]);
    if let Some(l7) = vs.l7.as_mut() {
        l7.timeouts.queue = Duration::from_millis(600);
    }
    let main = BackendService {
        max_connections: Some(1),
        ..service("m", m.addr)
    };
    let env = Env::start(config(vec![main, backup("bk", bk.addr)], vec![], vec![vs])).await;
    let addr = env.addr("web");
    // One slow request holds the only slot for 300 ms; the next waits, then gets m.
    let first = tokio::spawn(get(addr, "/?ms=300"));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = std::time::Instant::now();
    let (status, _, body) = get(addr, "/").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "m"));
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "it waited in the queue"
    );
    assert_eq!(first.await.expect("join").2, "m");
    // A slot held longer than the queue timeout: the waiter gets 503, the backup nothing.
    let long = tokio::spawn(get(addr, "/?ms=1500"));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (status, _, _) = get(addr, "/").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(long.await.expect("join").2, "m");
    assert_eq!(
        bk.hits(),
        0,
        "S-BK8: the backup never takes over for a full backend"
    );
    assert_eq!(env.stats("web").pool.queue_timeouts, 1);
}

// ---------------------------------------------------------------------------------------------
// Tests: Maintenance (S-MT)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_mt1_maintenance_drains_with_zero_failed_requests_under_load() {
    let (a, b) = (http_backend("a").await, http_backend("b").await);
    let vs = vservice("web", VServiceKind::Http, &["a", "b"]);
    let env = Arc::new(tokio::sync::Mutex::new(
        Env::start(config(
            vec![service("a", a.addr), service("b", b.addr)],
            vec![],
            vec![vs],
        ))
        .await,
    ));
    let addr = env.lock().await.addr("web");
    let failures = Arc::new(AtomicUsize::new(0));
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let failures = failures.clone();
        clients.spawn(async move {
            let c = client();
            for i in 0..200 {
                // Every 10th request is slow, so requests are in flight when maintenance flips.
                let path = if i % 10 == 0 { "/?ms=30" } else { "/" };
                let req = Request::get(format!("http://{addr}{path}"))
                    .body(Empty::new())
                    .expect("req");
                let ok = match tokio::time::timeout(Duration::from_secs(10), c.request(req)).await {
                    Ok(Ok(resp)) if resp.status() == StatusCode::OK => {
                        resp.into_body().collect().await.is_ok()
                    }
                    _ => false,
                };
                if !ok {
                    failures.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
    }
    let toggler = {
        let env = env.clone();
        tokio::spawn(async move {
            for round in 0..20 {
                let name = if round % 2 == 0 { "a" } else { "b" };
                env.lock().await.set_maintenance(name, true).await;
                tokio::time::sleep(Duration::from_millis(40)).await;
                env.lock().await.set_maintenance(name, false).await;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    while clients.join_next().await.is_some() {}
    toggler.await.expect("toggler");
    assert_eq!(
        failures.load(Ordering::SeqCst),
        0,
        "S-MT1: no request fails during maintenance"
    );
    assert_eq!(a.hits() + b.hits(), 1600);
    assert!(a.hits() > 0 && b.hits() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_mt1_s_mt3_maintenance_keeps_an_open_l7_tcp_connection_and_the_listener() {
    // Over IPv4 and over IPv6 (listener and backends).
    for (bind, vip) in [
        ("127.0.0.1:0", IpAddr::from([127, 0, 0, 1])),
        ("[::1]:0", V6),
    ] {
        maintenance_keeps_an_open_l7_tcp_connection(bind, vip).await;
    }
}

async fn maintenance_keeps_an_open_l7_tcp_connection(bind: &str, vip: IpAddr) {
    let (a, b) = (
        tcp_backend_at(bind, "a").await,
        tcp_backend_at(bind, "b").await,
    );
    let mut vs = vservice_at(vip, "tcp", VServiceKind::L7Tcp, &["a", "b"]);
    if let Some(l7) = vs.l7.as_mut() {
        l7.algorithm = lb::config::Algorithm::First;
    }
    let mut env = Env::start(config(
        vec![service("a", a.addr), service("b", b.addr)],
        vec![],
        vec![vs],
    ))
    .await;
    let addr = env.addr("tcp");
    let mut conn = TcpStream::connect(addr).await.expect("connect");
    let mut buf = [0u8; 64];
    conn.write_all(b"1").await.expect("write");
    let k = conn.read(&mut buf).await.expect("read");
    assert_eq!(&buf[..k], b"a:1");
    env.set_maintenance("a", true).await;
    // New connections go to b; the open one stays on a and keeps working (S-MT1).
    let mut fresh = TcpStream::connect(addr).await.expect("connect");
    fresh.write_all(b"2").await.expect("write");
    let k = fresh.read(&mut buf).await.expect("read");
    assert_eq!(&buf[..k], b"b:2");
    conn.write_all(b"3").await.expect("write");
    let k = conn.read(&mut buf).await.expect("read");
    assert_eq!(&buf[..k], b"a:3");
    // Half-close: the client's EOF reaches the backend, whose last words still arrive.
    conn.shutdown().await.expect("shutdown");
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut rest))
        .await
        .expect("in time")
        .expect("read");
    assert_eq!(rest, b"a:bye");
    let stats = env.stats("tcp");
    let a_stats = stats
        .pool
        .backends
        .iter()
        .find(|s| s.name == "a")
        .expect("a stats");
    assert_eq!(a_stats.bytes_in, 2);
    assert_eq!(a_stats.bytes_out, 3 + 3 + 5);
}

/// Reads the persistence cookie value out of a response's Set-Cookie.
fn set_cookie(headers: &hyper::HeaderMap, name: &str) -> Option<String> {
    headers.get_all("set-cookie").iter().find_map(|v| {
        let v = v.to_str().ok()?;
        let first = v.split(';').next()?;
        let (k, val) = first.split_once('=')?;
        (k == name).then(|| val.to_string())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_mt5_cookie_clients_pinned_to_a_server_in_maintenance_are_re_pinned() {
    let (a, b, c) = (
        http_backend("a").await,
        http_backend("b").await,
        http_backend("c").await,
    );
    let mut vs = vservice("web", VServiceKind::Http, &["a", "b", "c"]);
    if let Some(l7) = vs.l7.as_mut() {
        l7.persistence = Persistence::Cookie(CookiePersistence {
            name: "LBSERVER".into(),
            http_only: true,
            secure: true,
            same_site: SameSite::Strict,
        });
    }
    let mut env = Env::start(config(
        vec![
            service("a", a.addr),
            service("b", b.addr),
            service("c", c.addr),
        ],
        vec![],
        vec![vs],
    ))
    .await;
    let addr = env.addr("web");
    let cl = client();
    let (_, headers, first) = get_with(&cl, addr, "/", &[]).await;
    let cookie = set_cookie(&headers, "LBSERVER").expect("a persistence cookie is set");
    let raw = headers["set-cookie"].to_str().expect("ascii");
    assert!(
        raw.contains("Path=/") && raw.contains("HttpOnly") && raw.contains("Secure"),
        "{raw}"
    );
    assert!(raw.contains("SameSite=Strict"), "{raw}");
    let sent = format!("LBSERVER={cookie}");
    for _ in 0..6 {
        let (_, h, body) = get_with(&cl, addr, "/", &[("cookie", &sent)]).await;
        assert_eq!(body, first, "the pinned client stays on its server");
        assert!(
            set_cookie(&h, "LBSERVER").is_none(),
            "no new cookie while the pin is right"
        );
    }
    env.set_maintenance(&first, true).await;
    let (_, h, moved) = get_with(&cl, addr, "/", &[("cookie", &sent)]).await;
    assert_ne!(
        moved, first,
        "S-MT5: re-pinned away from the server in maintenance"
    );
    let new_cookie = set_cookie(&h, "LBSERVER").expect("re-pinned with a new cookie");
    let resent = format!("LBSERVER={new_cookie}");
    for _ in 0..4 {
        assert_eq!(
            get_with(&cl, addr, "/", &[("cookie", &resent)]).await.2,
            moved
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_mt5_source_ip_pins_move_on_maintenance_and_rebalance_and_clear_all() {
    let (a, b) = (http_backend("a").await, http_backend("b").await);
    let mut vs = vservice("web", VServiceKind::Http, &["a", "b"]);
    if let Some(l7) = vs.l7.as_mut() {
        l7.persistence = Persistence::SourceIp {
            idle: Duration::from_secs(60),
        };
    }
    let mut env = Env::start(config(
        vec![service("a", a.addr), service("b", b.addr)],
        vec![],
        vec![vs],
    ))
    .await;
    let addr = env.addr("web");
    let first = get(addr, "/").await.2;
    for _ in 0..5 {
        assert_eq!(get(addr, "/").await.2, first, "the source IP stays pinned");
    }
    let pins = env.proxy.pins("web").expect("vservice");
    assert_eq!(pins.len(), 1);
    assert_eq!(pins[0].backend, first);
    // Rebalance moves the pin onto the other server.
    assert_eq!(env.proxy.rebalance("web", &first), Some(1));
    let other = get(addr, "/").await.2;
    assert_ne!(other, first);
    assert_eq!(env.proxy.pins("web").expect("vservice")[0].backend, other);
    // Maintenance on the pinned server re-pins (S-MT5).
    env.set_maintenance(&other, true).await;
    assert_eq!(get(addr, "/").await.2, first);
    env.set_maintenance(&other, false).await;
    // Clear All drops the pins.
    assert_eq!(env.proxy.clear_pins("web"), Some(1));
    assert!(env.proxy.pins("web").expect("vservice").is_empty());
    assert!(env.proxy.pins("nope").is_none());
    assert_eq!(env.proxy.rebalance("nope", "a"), None);
    assert_eq!(env.proxy.clear_pins("nope"), None);
}

// ---------------------------------------------------------------------------------------------
// Tests: bad input and failures

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_request_gets_400_without_reaching_a_backend() {
    let a = http_backend("a").await;
    let env = Env::start(config(
        vec![service("a", a.addr)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["a"])],
    ))
    .await;
    let reply = raw(
        env.addr("web"),
        b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    let reply = raw(env.addr("web"), b"\x01\x02garbage\r\n\r\n").await;
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    assert_eq!(a.hits(), 0);
    assert_eq!(env.stats("web").counts.bad_requests, 2);
}

/// An address nothing listens on: connecting is refused at once.
async fn refusing_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    addr
}

/// No SPEC rule covers retries; issue 18 asks for HAProxy's `retries` + `option redispatch`.
/// A refused connect sent nothing, so the request goes to another server of the list: with
/// one of two mains refusing and no health check to take it out, every request is answered
/// by the other (retries counted); with `retries = 0` the refused ones get 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connect_is_retried_on_another_server() {
    let a = http_backend("a").await;
    let dead = refusing_addr().await;
    let web = vservice("web", VServiceKind::Http, &["dead", "a"]);
    let mut strict = vservice("strict", VServiceKind::Http, &["dead", "a"]);
    if let Some(l7) = strict.l7.as_mut() {
        l7.retry.retries = 0;
    }
    let env = Env::start(config(
        vec![service("a", a.addr), service("dead", dead)],
        vec![],
        vec![web, strict],
    ))
    .await;
    for _ in 0..20 {
        let (status, _, body) = get(env.addr("web"), "/").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "a"));
    }
    assert_eq!(a.hits(), 20);
    let retries = env.stats("web").counts.retries;
    assert!(
        (5..=15).contains(&retries),
        "round robin sent about half to `dead` first: {retries}"
    );
    let mut bad_gateway = 0;
    for _ in 0..20 {
        let (status, _, _) = get(env.addr("strict"), "/").await;
        match status {
            StatusCode::OK => {}
            StatusCode::BAD_GATEWAY => bad_gateway += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert!(
        bad_gateway >= 5,
        "without retries the refused ones fail: {bad_gateway}"
    );
    assert_eq!(env.stats("strict").counts.retries, 0);
}

/// S-RT1: a retry after a refused connect is outside the retry budget: the refused server never saw
/// the request, so sending it elsewhere is no second copy. Sixteen slow requests at once, half
/// of them first picked for the refusing server: all eight retries are under way together,
/// past the budget's floor of three, and every request is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_rt1_retries_after_a_refused_connect_take_no_share_of_the_budget() {
    let a = http_backend("a").await;
    let dead = refusing_addr().await;
    let env = Env::start(config(
        vec![service("a", a.addr), service("dead", dead)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["dead", "a"])],
    ))
    .await;
    let addr = env.addr("web");
    let answers: Vec<_> = (0..16)
        .map(|_| tokio::spawn(async move { get(addr, "/?ms=300").await.0 }))
        .collect();
    for answer in answers {
        assert_eq!(answer.await.expect("client"), StatusCode::OK);
    }
    let counts = env.stats("web").counts;
    assert!(
        counts.retries >= 5,
        "about half were retried: {}",
        counts.retries
    );
    assert_eq!(counts.retries_refused, 0);
}

/// The same for an L7 TCP vService: a refused connect is retried on another server before
/// the client sees anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l7_tcp_connect_that_fails_goes_to_another_server() {
    let t = tcp_backend("t").await;
    let dead = refusing_addr().await;
    let env = Env::start(config(
        vec![service("t", t.addr), service("dead", dead)],
        vec![],
        vec![vservice("tcp", VServiceKind::L7Tcp, &["dead", "t"])],
    ))
    .await;
    for i in 0..10 {
        let mut conn = TcpStream::connect(env.addr("tcp")).await.expect("connect");
        conn.write_all(format!("hi{i}").as_bytes())
            .await
            .expect("write");
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
            .await
            .expect("answer in time")
            .expect("read");
        assert_eq!(&buf[..n], format!("t:hi{i}").as_bytes());
    }
    assert_eq!(t.hits(), 10);
    assert!(
        env.stats("tcp").counts.retries >= 3,
        "{}",
        env.stats("tcp").counts.retries
    );
}

/// What a scripted backend does with each request it reads.
#[derive(Clone, Copy)]
enum Unanswered {
    /// Closes the connection without a byte of answer.
    Close,
    /// Keeps the connection open without answering; reports when the proxy closes it.
    Hang,
}

/// A backend that never answers: counts the requests it reads and, for [`Unanswered::Hang`],
/// sends how long each connection stayed open after its request.
async fn unanswering_backend(
    how: Unanswered,
) -> (
    SocketAddr,
    Arc<AtomicUsize>,
    tokio::sync::mpsc::UnboundedReceiver<Duration>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let hits = Arc::new(AtomicUsize::new(0));
    let (closed_tx, closed_rx) = tokio::sync::mpsc::unbounded_channel();
    let seen = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = seen.clone();
            let closed_tx = closed_tx.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                if !matches!(s.read(&mut buf).await, Ok(n) if n > 0) {
                    return;
                }
                seen.fetch_add(1, Ordering::SeqCst);
                if let Unanswered::Hang = how {
                    let since = tokio::time::Instant::now();
                    let wait = tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf));
                    let _ = wait.await;
                    let _ = closed_tx.send(since.elapsed());
                }
            });
        }
    });
    (addr, hits, closed_rx)
}

/// POST with a small body on a new connection: the status.
async fn post(addr: SocketAddr) -> StatusCode {
    let answer = raw(
        addr,
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx",
    )
    .await;
    let code = answer.get(9..12).and_then(|c| c.parse::<u16>().ok());
    code.and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
}

/// S-RT1: a server that closes the connection after reading the request, before any byte of
/// the answer, may have acted on it: an idempotent request (GET, here also with a body held
/// whole) goes to another server, a POST does not (502). S-RT2: a request tries each server
/// at most once, so two such servers cannot make it loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_rt1_s_rt2_an_unanswered_idempotent_request_goes_to_another_server_a_post_does_not() {
    let a = http_backend("a").await;
    let (mute, mute_hits, _) = unanswering_backend(Unanswered::Close).await;
    let (mute2, mute2_hits, _) = unanswering_backend(Unanswered::Close).await;
    let mut looping = vservice("looping", VServiceKind::Http, &["mute", "mute2"]);
    if let Some(l7) = looping.l7.as_mut() {
        l7.retry.retries = 10;
    }
    let env = Env::start(config(
        vec![
            service("a", a.addr),
            service("mute", mute),
            service("mute2", mute2),
        ],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["mute", "a"]), looping],
    ))
    .await;
    for _ in 0..10 {
        let (status, _, body) = get(env.addr("web"), "/").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "a"));
    }
    let put = raw(
        env.addr("web"),
        b"PUT / HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
    )
    .await;
    assert!(put.starts_with("HTTP/1.1 200"), "{put}");
    let sent_to_mute = mute_hits.load(Ordering::SeqCst);
    assert!(
        sent_to_mute >= 3,
        "round robin tried `mute` first: {sent_to_mute}"
    );
    let stats = env.stats("web");
    assert_eq!(stats.counts.retries as usize, sent_to_mute);
    let mute_stats = stats.pool.backends.iter().find(|b| b.name == "mute");
    let left_mute = mute_stats.map(|b| (b.retries, b.redispatches));
    assert_eq!(left_mute, Some((sent_to_mute as u64, sent_to_mute as u64)));

    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(post(env.addr("web")).await);
    }
    let bad_gateway = statuses
        .iter()
        .filter(|s| **s == StatusCode::BAD_GATEWAY)
        .count();
    assert!(
        bad_gateway >= 3,
        "POSTs that reached `mute` are not resent: {statuses:?}"
    );
    assert_eq!(env.stats("web").counts.retries as usize, sent_to_mute);

    let before = mute_hits.load(Ordering::SeqCst) + mute2_hits.load(Ordering::SeqCst);
    assert_eq!(
        get(env.addr("looping"), "/").await.0,
        StatusCode::BAD_GATEWAY
    );
    let after = mute_hits.load(Ordering::SeqCst) + mute2_hits.load(Ordering::SeqCst);
    assert_eq!(after - before, 2, "one try per server, then 502");
}

/// S-RT1, issue 18's first case: one of two mains is killed (its process and every
/// connection gone) under keep-alive load, with no health check to take it out: requests in
/// flight on it and new ones picked for it go to the other main. Not one request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_rt1_a_main_killed_under_load_fails_no_request() {
    let a = http_backend("a").await;
    let b = http_backend("b").await;
    let env = Env::start(config(
        vec![service("a", a.addr), service("b", b.addr)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["a", "b"])],
    ))
    .await;
    let addr = env.addr("web");
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let load: Vec<_> = (0..4)
        .map(|_| {
            let stop_rx = stop_rx.clone();
            tokio::spawn(async move {
                let c = client();
                let (mut ok, mut failed) = (0u64, Vec::new());
                while !*stop_rx.borrow() {
                    let req = Request::get(format!("http://{addr}/"))
                        .body(Empty::new())
                        .expect("req");
                    match c.request(req).await {
                        Ok(resp) if resp.status() == StatusCode::OK => ok += 1,
                        Ok(resp) => failed.push(resp.status().to_string()),
                        Err(e) => failed.push(e.to_string()),
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let served_by_b = b.hits();
    drop(b);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let _ = stop.send(true);
    let (mut ok, mut failed) = (0, Vec::new());
    for task in load {
        let (o, f) = task.await.expect("client");
        ok += o;
        failed.extend(f);
    }
    let retries = env.stats("web").counts.retries;
    println!(
        "{ok} answered, {} failed, {retries} retried; b served {served_by_b} before it died",
        failed.len()
    );
    assert!(served_by_b > 10, "b took its share first");
    assert!(
        failed.is_empty(),
        "{} failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(
        retries > 10,
        "requests picked for the dead main were retried: {retries}"
    );
    let answered_2xx: u64 = env
        .stats("web")
        .pool
        .backends
        .iter()
        .map(|b| b.classes[1])
        .sum();
    assert_eq!(
        answered_2xx, ok,
        "every answer is counted as a 2xx of its backend"
    );
}

/// S-RT1: a client that leaves while its request waits for an answer cancels it: the proxy
/// closes the backend connection at once (it is not left open until the server answers, nor
/// pooled), and counts a client abort.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_rt1_a_client_that_leaves_cancels_its_upstream_request() {
    let (hang, hits, mut closed) = unanswering_backend(Unanswered::Hang).await;
    let env = Env::start(config(
        vec![service("hang", hang)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["hang"])],
    ))
    .await;
    let mut client = TcpStream::connect(env.addr("web")).await.expect("connect");
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "the request reached the server"
    );
    drop(client);
    let open = tokio::time::timeout(Duration::from_secs(5), closed.recv())
        .await
        .expect("the backend connection closes soon after the client left")
        .expect("reported");
    assert!(
        open < Duration::from_secs(2),
        "closed {open:?} after the request"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(env.stats("web").counts.client_aborts, 1);
}

/// A server silent past the server timeout gets 504, counted; by default a timeout is not
/// retried (`retry_on` lacks `response-timeout`), so the server saw one try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_is_answered_504_and_counted() {
    let (hang, hits, _closed) = unanswering_backend(Unanswered::Hang).await;
    let (hang2, hits2, _closed2) = unanswering_backend(Unanswered::Hang).await;
    let mut web = vservice("web", VServiceKind::Http, &["hang", "hang2"]);
    if let Some(l7) = web.l7.as_mut() {
        l7.timeouts.server = Duration::from_millis(300);
    }
    let env = Env::start(config(
        vec![service("hang", hang), service("hang2", hang2)],
        vec![],
        vec![web],
    ))
    .await;
    assert_eq!(
        get(env.addr("web"), "/").await.0,
        StatusCode::GATEWAY_TIMEOUT
    );
    let tries = hits.load(Ordering::SeqCst) + hits2.load(Ordering::SeqCst);
    assert_eq!(tries, 1);
    let counts = env.stats("web").counts;
    assert_eq!((counts.server_timeouts, counts.retries), (1, 0));
}

/// No SPEC rule covers header sizes; issue 18 asks for `[proxy] max_header_bytes` (16 KiB)
/// and `max_header_line_bytes` (8 KiB) with 431, over HTTP/1.1 and HTTP/2 alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_headers_get_431() {
    let a = http_backend("a").await;
    let env = Env::start(config(
        vec![service("a", a.addr)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["a"])],
    ))
    .await;
    // The defaults: 16 KiB for the head, 8 KiB per line, like HAProxy and nginx. A 20 KB
    // header; a 9 KB one (the head fits, its line does not); two 6 KB ones (each line fits,
    // the head does not); a 9 KB request target (414).
    let h = |n: usize| "x".repeat(n);
    let cases = [
        (
            format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", h(20_000)),
            "431",
        ),
        (
            format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", h(9_000)),
            "431",
        ),
        (
            format!(
                "GET / HTTP/1.1\r\nHost: x\r\nA: {}\r\nB: {}\r\n\r\n",
                h(6_000),
                h(6_000)
            ),
            "",
        ),
        (
            format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", h(9_000)),
            "414",
        ),
    ];
    for (req, status) in &cases {
        let reply = raw(env.addr("web"), req.as_bytes()).await;
        let want = format!(
            "HTTP/1.1 {}",
            if status.is_empty() { "200" } else { status }
        );
        assert!(
            reply.starts_with(&want),
            "{want}: {}",
            &reply[..reply.len().min(200)]
        );
    }
    assert_eq!(
        a.hits(),
        1,
        "only the head within both limits reached the server"
    );
    let three = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nA: {}\r\nB: {}\r\nC: {}\r\n\r\n",
        h(6_000),
        h(6_000),
        h(6_000)
    );
    let reply = raw(env.addr("web"), three.as_bytes()).await;
    assert!(
        reply.starts_with("HTTP/1.1 431"),
        "18 KB head: {}",
        &reply[..reply.len().min(200)]
    );
    assert_eq!(a.hits(), 1);
    // Over HTTP/2 (h2c) a header line over 8 KiB is refused too.
    let c: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(HttpConnector::new());
    let req = Request::get(format!("http://{}/", env.addr("web")))
        .header("x-big", h(9_000))
        .body(Empty::new())
        .expect("req");
    let resp = c.request(req).await.expect("h2c response");
    assert_eq!(resp.status(), 431);
    assert_eq!(a.hits(), 1);
    // A normal request is fine.
    assert_eq!(get(env.addr("web"), "/").await.2, "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_is_cut_at_the_client_timeout() {
    let a = http_backend("a").await;
    let mut vs = vservice("web", VServiceKind::Http, &["a"]);
    if let Some(l7) = vs.l7.as_mut() {
        l7.timeouts.client = Duration::from_millis(500);
    }
    let env = Env::start(config(vec![service("a", a.addr)], vec![], vec![vs])).await;
    for opening in [&b"GET / HTTP/1.1\r\nHost: x\r\n"[..], &b"G"[..]] {
        let mut s = TcpStream::connect(env.addr("web")).await.expect("connect");
        s.write_all(opening).await.expect("write");
        let started = std::time::Instant::now();
        // Trickle a header byte every 100 ms: never completes the headers.
        let mut closed = false;
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if s.write_all(b"X").await.is_err() {
                closed = true;
                break;
            }
            let mut buf = [0u8; 256];
            match tokio::time::timeout(Duration::from_millis(1), s.read(&mut buf)).await {
                Ok(Ok(_)) | Ok(Err(_)) => {
                    closed = true;
                    break;
                }
                Err(_) => {}
            }
        }
        let took = started.elapsed();
        assert!(closed, "the connection was cut");
        assert!(
            took < Duration::from_millis(2000),
            "cut near the 500 ms client timeout, took {took:?}"
        );
    }
    assert_eq!(a.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_closing_mid_response_aborts_that_response_only_and_is_counted() {
    // A backend that promises 1000 bytes, sends 10 and closes.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let bad_addr = listener.local_addr().expect("addr");
    let bad = tokio::spawn(async move {
        for _ in 0..10 {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789")
                .await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let good = http_backend("good").await;
    let mut bad_vs = vservice("bad", VServiceKind::Http, &["bad"]);
    if let Some(l7) = bad_vs.l7.as_mut() {
        l7.forwarded_headers = false;
    }
    let env = Env::start(config(
        vec![service("bad", bad_addr), service("good", good.addr)],
        vec![],
        vec![bad_vs, vservice("ok", VServiceKind::Http, &["good"])],
    ))
    .await;
    let c = client();
    let req = Request::get(format!("http://{}/", env.addr("bad")))
        .body(Empty::new())
        .expect("req");
    let resp = c.request(req).await.expect("headers arrive");
    assert_eq!(resp.status(), StatusCode::OK);
    let body = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect())
        .await
        .expect("in time");
    assert!(
        body.is_err(),
        "the client sees the response aborted, not a short success"
    );
    // Counted, and other requests are unaffected.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stats = env.stats("bad");
    assert_eq!(stats.counts.upstream_aborts, 1);
    assert_eq!(
        stats
            .pool
            .backends
            .iter()
            .find(|b| b.name == "bad")
            .map(|b| b.failures),
        Some(1)
    );
    for _ in 0..5 {
        assert_eq!(get(env.addr("ok"), "/").await.2, "good");
    }
    bad.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_refusing_connections_gets_502() {
    let port = free_port();
    let dead: SocketAddr = ([127, 0, 0, 1], port).into();
    let env = Env::start(config(
        vec![service("dead", dead)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["dead"])],
    ))
    .await;
    assert_eq!(get(env.addr("web"), "/").await.0, StatusCode::BAD_GATEWAY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_headers_and_host_reach_the_backend() {
    let a = http_backend("a").await;
    let env = Env::start(config(
        vec![service("a", a.addr)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["a"])],
    ))
    .await;
    let (_, h, _) = get_with(
        &client(),
        env.addr("web"),
        "/",
        &[("x-forwarded-for", "203.0.113.9")],
    )
    .await;
    assert_eq!(h["seen-x-forwarded-for"], "203.0.113.9, 127.0.0.1");
    assert_eq!(h["seen-x-forwarded-proto"], "http");
    assert_eq!(h["seen-host"], env.addr("web").to_string());
}

// ---------------------------------------------------------------------------------------------
// Tests: protocols

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_prior_knowledge_request_works() {
    let a = http_backend("a").await;
    let env = Env::start(config(
        vec![service("a", a.addr)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["a"])],
    ))
    .await;
    let c: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(HttpConnector::new());
    let req = Request::get(format!("http://{}/", env.addr("web")))
        .body(Empty::new())
        .expect("req");
    let resp = c.request(req).await.expect("h2c response");
    assert_eq!(resp.version(), hyper::Version::HTTP_2);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], b"a");

    // Requests without a body go to the backend on the HTTP/1.1 path's connections: many
    // streams at once, a chunked answer passed on as data frames, a HEAD with no body.
    let addr = env.addr("web");
    let streams: Vec<_> = (0..50)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move {
                let req = Request::get(format!("http://{addr}/?ms=5"))
                    .body(Empty::new())
                    .expect("req");
                let resp = c.request(req).await.expect("response");
                let status = resp.status();
                let body = resp.into_body().collect().await.expect("body").to_bytes();
                (status, body)
            })
        })
        .collect();
    for stream in streams {
        let (status, body) = stream.await.expect("stream");
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"a"[..]));
    }
    // Their backend connections are reused: sequential requests (plain, chunked, HEAD)
    // open none.
    let opened = a.conns();
    for _ in 0..20 {
        let req = Request::get(format!("http://{addr}/"))
            .body(Empty::new())
            .expect("req");
        let resp = c.request(req).await.expect("response");
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&body[..], b"a");
    }
    let req = Request::get(format!("http://{addr}/stream?n=4&ms=10"))
        .body(Empty::new())
        .expect("req");
    let resp = c.request(req).await.expect("response");
    assert!(resp.headers().get("transfer-encoding").is_none());
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], b"a\na\na\na\n");
    let req = Request::head(format!("http://{addr}/"))
        .body(Empty::new())
        .expect("req");
    let resp = c.request(req).await.expect("response");
    assert_eq!(resp.status(), StatusCode::OK);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert!(body.is_empty());
    let req = Request::get(format!("http://{addr}/"))
        .body(Empty::new())
        .expect("req");
    let resp = c.request(req).await.expect("response");
    assert_eq!(
        resp.into_body().collect().await.expect("body").to_bytes(),
        "a"
    );
    assert_eq!(
        a.conns(),
        opened,
        "no connection opened after the first 51 requests"
    );
    // A body goes through hyper's client.
    let posting: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(HttpConnector::new());
    let req = Request::post(format!("http://{addr}/"))
        .body(Full::new(Bytes::from_static(b"payload")))
        .expect("req");
    let resp = posting.request(req).await.expect("response");
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], b"a");
    assert_eq!(a.hits(), 75);
}

/// S-RT1 over HTTP/2: a request without a body whose connect
/// failed goes to another server; one with a body streams into its first try and gets 502.
/// A backend that answers every request head it reads with `200 OK` and no body, on one
/// keep-alive connection after another.
async fn empty_ok_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                for _ in 0..1000 {
                    let Ok(n) = s.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
                        if s.write_all(ok).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// issue 22: an HTTP/2 CONNECT answered 2xx makes hyper hand a tunnel to the connection's
/// executor while the stream is being run; the connection (its streams run in its own task)
/// keeps serving the requests that follow on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_connect_answered_2xx_leaves_the_connection_serving() {
    let backend = empty_ok_backend().await;
    let env = Env::start(config(
        vec![service("a", backend)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["a"])],
    ))
    .await;
    let tcp = TcpStream::connect(env.addr("web")).await.expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let connect = Request::connect("tunnel.test:443")
        .body(Empty::<Bytes>::new())
        .expect("req");
    let answered = tokio::time::timeout(Duration::from_secs(5), sender.send_request(connect))
        .await
        .expect("CONNECT answered within 5 s");
    // Whatever the answer (the tunnel itself is not proxied), the connection goes on.
    drop(answered);
    let after = Request::get(format!("http://{}/after", env.addr("web")))
        .body(Empty::<Bytes>::new())
        .expect("req");
    let resp = tokio::time::timeout(Duration::from_secs(5), sender.send_request(after))
        .await
        .expect("a request after the CONNECT answered within 5 s")
        .expect("response");
    assert_eq!(resp.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_rt1_an_h2_request_without_a_body_is_retried_after_a_failed_connect() {
    let a = http_backend("a").await;
    let dead = refusing_addr().await;
    let env = Env::start(config(
        vec![service("a", a.addr), service("dead", dead)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["dead", "a"])],
    ))
    .await;
    let c: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(HttpConnector::new());
    for _ in 0..10 {
        let (status, _, body) = get_with(&c, env.addr("web"), "/", &[]).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "a"));
    }
    let retries = env.stats("web").counts.retries;
    assert!(
        (3..=7).contains(&retries),
        "about half went to `dead` first: {retries}"
    );
    let with_body: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(HttpConnector::new());
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let req = Request::post(format!("http://{}/", env.addr("web")))
            .body(Full::new(Bytes::from_static(b"payload")))
            .expect("req");
        let resp = with_body.request(req).await.expect("h2 response");
        statuses.push(resp.status());
    }
    assert!(
        statuses.contains(&StatusCode::BAD_GATEWAY) && statuses.contains(&StatusCode::OK),
        "{statuses:?}"
    );
}

/// No SPEC rule covers timeouts; issue 4 asks for a keep-alive timeout. An HTTP/2 connection
/// closes (GOAWAY) once no stream has been open for the keep-alive timeout, and a stream that
/// outlasts the timeout runs to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_connection_idle_past_keep_alive_closes_but_never_during_a_stream() {
    let a = http_backend("a").await;
    let mut vs = vservice("web", VServiceKind::Http, &["a"]);
    if let Some(l7) = vs.l7.as_mut() {
        l7.timeouts.keep_alive = Duration::from_secs(1);
    }
    let env = Env::start(config(vec![service("a", a.addr)], vec![], vec![vs])).await;
    let tcp = TcpStream::connect(env.addr("web")).await.expect("connect");
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2c handshake");
    let mut conn = tokio::spawn(conn);

    // 4 chunks 500 ms apart: the stream lasts twice the keep-alive timeout.
    let req = Request::get("http://web/stream?n=4&ms=500")
        .body(Empty::<Bytes>::new())
        .expect("req");
    let resp = send.send_request(req).await.expect("stream response");
    let body = resp
        .into_body()
        .collect()
        .await
        .expect("whole stream")
        .to_bytes();
    assert_eq!(&body[..], b"a\na\na\na\n", "the stream ran to its end");
    let ended = std::time::Instant::now();

    // A second request soon after still uses the same connection.
    let req = Request::get("http://web/")
        .body(Empty::<Bytes>::new())
        .expect("req");
    let resp = send.send_request(req).await.expect("second response");
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], b"a");
    let last = std::time::Instant::now();

    let closed = tokio::time::timeout(Duration::from_secs(5), &mut conn).await;
    assert!(
        closed.is_ok(),
        "the idle connection was closed by the proxy"
    );
    let idle_for = last.elapsed();
    assert!(
        idle_for >= Duration::from_millis(900),
        "closed {idle_for:?} after the last response, before the keep-alive timeout"
    );
    assert!(
        ended.elapsed() < Duration::from_secs(4),
        "closed {:?} after the stream ended, long past the keep-alive timeout",
        ended.elapsed()
    );
}

/// A self-signed certificate for `localhost` in a directory of this test process.
struct TestCert {
    dir: std::path::PathBuf,
    tls: TlsSettings,
    roots: rustls::RootCertStore,
}

impl TestCert {
    fn new(tag: &str) -> TestCert {
        let dir = std::env::temp_dir().join(format!("lb-l7-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
        let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert_path, cert.cert.pem()).expect("write cert");
        std::fs::write(&key_path, cert.signing_key.serialize_pem()).expect("write key");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.cert.der().clone()).expect("root");
        TestCert {
            dir,
            tls: TlsSettings {
                cert: cert_path,
                key: key_path,
            },
            roots,
        }
    }

    /// A TLS connection to `addr` offering `alpn` (none when empty).
    async fn connect(
        &self,
        addr: SocketAddr,
        alpn: &[u8],
    ) -> tokio_rustls::client::TlsStream<TcpStream> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(self.roots.clone())
            .with_no_client_auth();
        if !alpn.is_empty() {
            cfg.alpn_protocols = vec![alpn.to_vec()];
        }
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(name, tcp)
            .await
            .expect("handshake")
    }
}

impl Drop for TestCert {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An HTTP vService `web` with TLS on one backend, `name` at `addr`.
async fn tls_env(cert: &TestCert, name: &str, addr: SocketAddr) -> Env {
    let mut vs = vservice("web", VServiceKind::Http, &[name]);
    if let Some(l7) = vs.l7.as_mut() {
        l7.tls = Some(cert.tls.clone());
    }
    Env::start(config(vec![service(name, addr)], vec![], vec![vs])).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_alpn_h2_and_http11_works() {
    let a = http_backend("a").await;
    let cert = TestCert::new("tls");
    let env = tls_env(&cert, "a", a.addr).await;
    for (alpn, version) in [
        (&b"h2"[..], hyper::Version::HTTP_2),
        (&b"http/1.1"[..], hyper::Version::HTTP_11),
        (&b""[..], hyper::Version::HTTP_11),
    ] {
        let tls = cert.connect(env.addr("web"), alpn).await;
        let chosen = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        assert_eq!(chosen, (!alpn.is_empty()).then(|| alpn.to_vec()));
        let io = TokioIo::new(tls);
        let resp = if version == hyper::Version::HTTP_2 {
            let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .expect("h2");
            tokio::spawn(conn);
            let req = Request::get("https://localhost/")
                .body(Empty::<Bytes>::new())
                .expect("req");
            send.send_request(req).await.expect("response")
        } else {
            let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.expect("h1");
            tokio::spawn(conn);
            let req = Request::get("/")
                .header("host", "localhost")
                .body(Empty::<Bytes>::new())
                .expect("req");
            send.send_request(req).await.expect("response")
        };
        assert_eq!(resp.version(), version);
        assert_eq!(resp.headers()["seen-x-forwarded-proto"], "https");
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&body[..], b"a");
    }
}

/// Reads from `tls` until `done` holds for what arrived (5 s at most).
async fn read_until<S: tokio::io::AsyncRead + Unpin>(
    tls: &mut S,
    done: impl Fn(&str) -> bool,
) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        while !done(&String::from_utf8_lossy(&got)) {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// HTTP/1.1 over TLS takes the same hand-written path as plain HTTP/1.1: requests pipelined
/// in one TLS record are all answered (the second waits decrypted in the TLS session, which
/// no socket readiness announces), a body goes to the backend, a chunked answer streams,
/// and the connection stays open between requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_http11_pipelined_requests_bodies_and_keep_alive() {
    let a = http_backend("a").await;
    let cert = TestCert::new("tls-h1");
    let env = tls_env(&cert, "a", a.addr).await;
    let mut tls = cert.connect(env.addr("web"), b"http/1.1").await;
    // Three short requests in one record, then twenty of 1 KiB (two records, more than a
    // read takes at once).
    let get = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let padded = format!(
        "GET / HTTP/1.1\r\nHost: localhost\r\nX-Pad: {}\r\n\r\n",
        "p".repeat(1000)
    );
    for (request, n) in [(get, 3), (padded.as_str(), 20)] {
        tls.write_all(request.repeat(n).as_bytes())
            .await
            .expect("write");
        tls.flush().await.expect("flush");
        let answers = read_until(&mut tls, |t| t.matches("HTTP/1.1 200").count() == n).await;
        assert_eq!(answers.matches("HTTP/1.1 200").count(), n, "{answers}");
    }
    assert_eq!(a.hits(), 23);

    let body = vec![b'x'; 100_000];
    let post = format!(
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(post.as_bytes()).await.expect("write");
    tls.write_all(&body).await.expect("write body");
    tls.flush().await.expect("flush");
    let posted = read_until(&mut tls, |t| t.ends_with("\r\n\r\na")).await;
    assert!(posted.starts_with("HTTP/1.1 200"), "{posted}");

    tls.write_all(b"GET /stream?n=4&ms=20 HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("write");
    tls.flush().await.expect("flush");
    let streamed = read_until(&mut tls, |t| t.ends_with("0\r\n\r\n")).await;
    assert!(streamed.starts_with("HTTP/1.1 200"), "{streamed}");
    assert!(
        streamed
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{streamed}"
    );
    assert_eq!(streamed.matches("a\n").count(), 4, "{streamed}");
    assert_eq!(a.hits(), 25);
}

/// An answer whose body ends with the backend's close reaches a TLS client whole and ends
/// with a close_notify: without one, rustls (and OpenSSL) clients cannot tell the end of
/// the body from a cut connection and report an unexpected end of file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_body_delimited_by_close_ends_with_close_notify() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let backend = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let _ = read_until(&mut s, |t| t.contains("\r\n\r\n")).await;
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nthe whole body")
            .await
            .expect("answer");
    });
    let cert = TestCert::new("tls-close");
    let env = tls_env(&cert, "old", backend).await;
    let mut tls = cert.connect(env.addr("web"), b"http/1.1").await;
    tls.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("request");
    tls.flush().await.expect("flush");
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut got)).await;
    let text = String::from_utf8_lossy(&got);
    assert!(matches!(read, Ok(Ok(_))), "{read:?}: {text}");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("\r\n\r\nthe whole body"), "{text}");
    let _ = server.await;
}

/// WebSocket over TLS (wss): an Upgrade on a TLS connection answered 101 becomes a two-way
/// tunnel through the TLS session, as on a plain one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_websocket_upgrade_becomes_a_two_way_tunnel() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let backend = listener.local_addr().expect("addr");
    let echo = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let head = read_until(&mut s, |t| t.contains("\r\n\r\n")).await;
        assert!(
            head.to_ascii_lowercase().contains("upgrade: websocket"),
            "{head}"
        );
        s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
            .await
            .expect("101");
        let mut buf = [0u8; 1024];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => s.write_all(&buf[..n]).await.expect("echo"),
            }
        }
    });
    let cert = TestCert::new("wss");
    let env = tls_env(&cert, "ws", backend).await;
    let mut tls = cert.connect(env.addr("web"), b"http/1.1").await;
    tls.write_all(
        b"GET /chat HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Version: 13\r\n\r\n",
    )
    .await
    .expect("upgrade");
    tls.flush().await.expect("flush");
    let head = read_until(&mut tls, |t| t.contains("\r\n\r\n")).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    for message in ["frame one", "frame two, longer"] {
        tls.write_all(message.as_bytes()).await.expect("send");
        tls.flush().await.expect("flush");
        let echoed = read_until(&mut tls, |t| t.len() >= message.len()).await;
        assert_eq!(echoed, message);
    }
    drop(tls);
    let _ = tokio::time::timeout(Duration::from_secs(5), echo).await;
}

// ---------------------------------------------------------------------------------------------
// Tests: reload

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_mt3_reload_keeps_listeners_binds_new_and_stops_removed_and_fails_cleanly() {
    let (a, t) = (http_backend("a").await, tcp_backend("t").await);
    let mut env = Env::start(config(
        vec![service("a", a.addr), service("t", t.addr)],
        vec![],
        vec![
            vservice("web", VServiceKind::Http, &["a"]),
            vservice("tcp", VServiceKind::L7Tcp, &["t"]),
        ],
    ))
    .await;
    let (web, tcp) = (env.addr("web"), env.addr("tcp"));
    // An open L7 TCP connection and a keep-alive HTTP client survive the reload.
    let mut conn = TcpStream::connect(tcp).await.expect("connect");
    let cl = client();
    assert_eq!(get_with(&cl, web, "/", &[]).await.2, "a");
    let added = vservice("added", VServiceKind::Http, &["a"]);
    let added_addr = SocketAddr::new(
        added.address,
        match added.ports {
            PortSpec::Single(p) => p,
            _ => 0,
        },
    );
    env.reconfigure(|cfg| {
        cfg.vservices.retain(|v| v.name != "tcp");
        cfg.vservices.push(added);
        if let Some(l7) = cfg.vservices[0].l7.as_mut() {
            l7.error_page = Some("reloaded".into());
        }
    })
    .await;
    assert_eq!(get_with(&cl, web, "/", &[]).await.2, "a");
    assert_eq!(get(added_addr, "/").await.2, "a");
    // The removed vService no longer accepts, but its open connection still works.
    assert!(TcpStream::connect(tcp).await.is_err());
    conn.write_all(b"k").await.expect("write");
    let mut buf = [0u8; 16];
    let k = conn.read(&mut buf).await.expect("read");
    assert_eq!(&buf[..k], b"t:k");
    // A changed setting applies to new requests.
    env.set_health("a", Health::Error);
    assert_eq!(get(web, "/").await.2, "reloaded");
    // A listener that cannot bind fails the reload and changes nothing.
    let blocker = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken = blocker.local_addr().expect("addr").port();
    let before = env.proxy.stats().len();
    let mut broken = env.cfg.clone();
    let mut clash = vservice("clash", VServiceKind::Http, &["a"]);
    clash.ports = PortSpec::Single(taken);
    broken.vservices.push(clash);
    broken.vservices.retain(|v| v.name != "added");
    assert!(env.proxy.update(Arc::new(broken)).await.is_err());
    assert_eq!(env.proxy.stats().len(), before);
    env.set_health("a", Health::Ok);
    assert_eq!(get(added_addr, "/").await.2, "a");
    let proxy = std::mem::replace(
        &mut env.proxy,
        Proxy::start(
            Arc::new(config(vec![], vec![], vec![])),
            env.published.clone(),
        )
        .await
        .expect("empty"),
    );
    proxy.shutdown(Duration::from_millis(200)).await;
    assert!(TcpStream::connect(web).await.is_err(), "shut down");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_mt6_group_maintenance_applies_to_its_members() {
    let (a, b, c) = (
        http_backend("a").await,
        http_backend("b").await,
        http_backend("c").await,
    );
    let vs = vservice("web", VServiceKind::Http, &["g", "c"]);
    let group = BackendGroup {
        name: "g".into(),
        members: vec!["a".into(), "b".into()],
        backup: false,
        maintenance: false,
    };
    let mut env = Env::start(config(
        vec![
            service("a", a.addr),
            service("b", b.addr),
            service("c", c.addr),
        ],
        vec![group],
        vec![vs],
    ))
    .await;
    env.reconfigure(|cfg| cfg.backend_groups[0].maintenance = true)
        .await;
    for _ in 0..6 {
        assert_eq!(get(env.addr("web"), "/").await.2, "c");
    }
}

// ---------------------------------------------------------------------------------------------
// Tests: IPv6 listeners and backends

const V6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_bk1_s_bk2_s_mt1_over_ipv6_listener_and_backends() {
    let (a, bk) = (
        http_backend_at("[::1]:0", "a").await,
        http_backend_at("[::1]:0", "bk").await,
    );
    assert!(a.addr.is_ipv6() && bk.addr.is_ipv6());
    let vs = vservice_at(V6, "web6", VServiceKind::Http, &["a", "bk"]);
    let mut env = Env::start(config(
        vec![service("a", a.addr), backup("bk", bk.addr)],
        vec![],
        vec![vs],
    ))
    .await;
    let addr = env.addr("web6");
    assert!(addr.is_ipv6(), "{addr}");
    for _ in 0..5 {
        assert_eq!(get(addr, "/").await.2, "a");
    }
    assert_eq!(
        bk.hits(),
        0,
        "a backup serves only while no main can (S-BK1)"
    );
    // The only main fails: the backup takes over (S-BK2).
    env.set_health("a", Health::Error);
    assert_eq!(get(addr, "/").await.2, "bk");
    env.set_health("a", Health::Ok);
    assert_eq!(get(addr, "/").await.2, "a");
    // The main in Maintenance: new requests go to the backup, none fails (S-MT1, S-BK2).
    env.set_maintenance("a", true).await;
    let before = a.hits();
    for _ in 0..5 {
        let (status, _, body) = get(addr, "/").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "bk"));
    }
    assert_eq!(
        a.hits(),
        before,
        "no new request reaches a server in Maintenance"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_client_is_appended_to_x_forwarded_for() {
    let a = http_backend_at("[::1]:0", "a").await;
    let env = Env::start(config(
        vec![service("a", a.addr)],
        vec![],
        vec![vservice_at(V6, "web6", VServiceKind::Http, &["a"])],
    ))
    .await;
    let (_, h, _) = get_with(
        &client(),
        env.addr("web6"),
        "/",
        &[("x-forwarded-for", "2001:db8::9")],
    )
    .await;
    assert_eq!(h["seen-x-forwarded-for"], "2001:db8::9, ::1");
    assert_eq!(h["seen-host"], env.addr("web6").to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_stack_listener_on_the_unspecified_address_serves_both_families() {
    // One backend of each family behind one vService listening on `::`.
    let (a, b) = (
        http_backend("a").await,
        http_backend_at("[::1]:0", "b").await,
    );
    let mut vs = vservice_at(
        IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        "dual",
        VServiceKind::Http,
        &["a", "b"],
    );
    if let Some(l7) = vs.l7.as_mut() {
        l7.algorithm = lb::config::Algorithm::RoundRobin;
    }
    let env = Env::start(config(
        vec![service("a", a.addr), service("b", b.addr)],
        vec![],
        vec![vs],
    ))
    .await;
    let port = env.addr("dual").port();
    let v4: SocketAddr = ([127, 0, 0, 1], port).into();
    let v6: SocketAddr = (Ipv6Addr::LOCALHOST, port).into();
    let mut seen = Vec::new();
    for addr in [v4, v6, v4, v6] {
        let (status, _, body) = get(addr, "/").await;
        assert_eq!(status, StatusCode::OK, "{addr}");
        seen.push(body);
    }
    seen.sort();
    assert_eq!(
        seen,
        ["a", "a", "b", "b"],
        "both backends, over both families"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_bk6_source_cidr_condition_matches_an_ipv6_prefix() {
    let (d, local) = (
        http_backend_at("[::1]:0", "d").await,
        http_backend_at("[::1]:0", "local").await,
    );
    let mut vs = vservice_at(V6, "web6", VServiceKind::Http, &["d"]);
    if let Some(l7) = vs.l7.as_mut() {
        l7.conditional_sets = vec![
            ConditionalSet {
                name: "elsewhere".into(),
                conditions: vec![Condition::SourceCidr(vec![(
                    "2001:db8::".parse().expect("net"),
                    32,
                )])],
                backends: vec!["d".into()],
            },
            ConditionalSet {
                name: "loopback".into(),
                conditions: vec![Condition::SourceCidr(vec![(
                    "::1".parse().expect("net"),
                    128,
                )])],
                backends: vec!["local".into()],
            },
        ];
    }
    let env = Env::start(config(
        vec![service("d", d.addr), service("local", local.addr)],
        vec![],
        vec![vs],
    ))
    .await;
    assert_eq!(get(env.addr("web6"), "/").await.2, "local");
    assert_eq!(d.hits(), 0);
}
