//! What the DNS vService tests share (gslb, gslb_counters): fake site APIs speaking the
//! exact `GET /api/v1/stats/live` shape, real `lb run` site daemons, DNS clients and the
//! API and metrics readers. Everything listens on 127.0.0.1 only.
//!
//! A test binary takes it with `mod ports; mod support { pub mod gslb; }`.
#![allow(dead_code)]

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::ports::free_port;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use lb::gslb::{Gslb, SiteState, SiteStatus};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// What a fake site's API answers.
#[derive(Clone, Debug)]
pub enum Mode {
    /// The live stats with vService `web` in this tier and these current sessions.
    Live { tier: &'static str, sessions: u64 },
    /// The live stats without vService `web`.
    NoVService,
    /// Not JSON.
    Garbage,
    /// An HTTP error status.
    Error(u16),
}

#[derive(Clone)]
pub struct SiteState_ {
    pub mode: Arc<Mutex<Mode>>,
    pub token: Option<&'static str>,
}

/// A fake site API on 127.0.0.1.
pub struct Site {
    pub url: String,
    pub mode: Arc<Mutex<Mode>>,
    pub task: tokio::task::JoinHandle<()>,
}

impl Site {
    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }
}

pub async fn live(State(state): State<SiteState_>, headers: HeaderMap) -> Response {
    if let Some(token) = state.token {
        let wanted = format!("Bearer {token}");
        if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(&wanted) {
            return (StatusCode::UNAUTHORIZED, "{\"error\":\"token\"}").into_response();
        }
    }
    let mode = state.mode.lock().unwrap().clone();
    let vs = |tier: &str, sessions: u64| {
        json!({"name": "web", "kind": "http", "address": "127.0.0.1", "ports": "80",
               "lists": [{"name": "default", "tier": tier, "members": []}],
               "counters": {"requests": 1, "current": sessions, "bytes_in": 0,
                            "bytes_out": 0, "unavailable": 0}})
    };
    let body = match mode {
        Mode::Live { tier, sessions } => json!({"generated_unix_ms": 1,
            "vservices": [vs(tier, sessions)], "backends": []}),
        Mode::NoVService => json!({"generated_unix_ms": 1, "vservices": [], "backends": []}),
        Mode::Garbage => return (StatusCode::OK, "<html>not json").into_response(),
        Mode::Error(code) => {
            return StatusCode::from_u16(code)
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
                .into_response();
        }
    };
    axum::Json(body).into_response()
}

pub async fn site(mode: Mode, token: Option<&'static str>) -> Site {
    let mode = Arc::new(Mutex::new(mode));
    let state = SiteState_ {
        mode: mode.clone(),
        token,
    };
    let app = axum::Router::new()
        .route("/api/v1/stats/live", axum::routing::get(live))
        .with_state(state);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Site { url, mode, task }
}

/// One `[[dns_vservice.record.site]]`.
pub fn site_toml(name: &str, address: &str, api: &str, standby: bool, extra: &str) -> String {
    format!(
        "[[dns_vservice.record.site]]\nname = \"{name}\"\naddress = \"{address}\"\n\
         api = \"{api}\"\nvservice = \"web\"\nstandby = {standby}\n{extra}\n"
    )
}

/// A DNS vService on `port` for zone gslb.test with one record `www`.
pub fn config(
    port: u16,
    policy: &str,
    answers: u32,
    rate: u32,
    sites: &[String],
) -> Arc<lb::config::Config> {
    let text = format!(
        "[api]\nlisten = \"127.0.0.1:1\"\n\
         [[dns_vservice]]\nname = \"g\"\naddress = \"127.0.0.1\"\nport = {port}\n\
         zone = \"gslb.test\"\nttl = 7\npoll_period = 0.2\npoll_timeout = 0.5\nrate_limit = {rate}\n\
         [[dns_vservice.record]]\nname = \"www\"\npolicy = \"{policy}\"\nanswers = {answers}\n{}",
        sites.concat()
    );
    Arc::new(lb::config::parse(&text, "gslb.toml").unwrap())
}

/// Starts a GSLB with [`config`] on a port picked free, and returns it with that port. A
/// parallel test can still take the port between the pick and the bind (once in CI), so a
/// bind that finds the address in use picks another port, a few times.
pub async fn start(policy: &str, answers: u32, rate: u32, sites: &[String]) -> (Gslb, u16) {
    let mut attempt = 0;
    loop {
        let port = free_port();
        match Gslb::start(config(port, policy, answers, rate, sites)).await {
            Ok(gslb) => return (gslb, port),
            Err(e) if attempt < 5 && addr_in_use(&e) => attempt += 1,
            Err(e) => panic!("starting the GSLB on port {port}: {e:#}"),
        }
    }
}

pub fn addr_in_use(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::AddrInUse)
    })
}

pub fn query_bytes(name: &str, qtype: RecordType) -> Vec<u8> {
    let mut message = Message::query();
    message.metadata.id = rand_id();
    message.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    message.to_vec().unwrap()
}

pub fn rand_id() -> u16 {
    (Instant::now().elapsed().subsec_nanos() % 65_000) as u16 + 1
}

pub async fn udp(server: SocketAddr, bytes: &[u8]) -> Option<Message> {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.send_to(bytes, server).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let got = tokio::time::timeout(Duration::from_secs(1), socket.recv(&mut buf)).await;
    let len = got.ok()?.unwrap();
    Some(Message::from_vec(&buf[..len]).unwrap())
}

pub async fn ask(server: SocketAddr, name: &str, qtype: RecordType) -> Message {
    udp(server, &query_bytes(name, qtype))
        .await
        .expect("an answer")
}

pub async fn ask_tcp(server: SocketAddr, name: &str, qtype: RecordType) -> Message {
    let bytes = query_bytes(name, qtype);
    let mut stream = TcpStream::connect(server).await.unwrap();
    let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
    framed.extend(&bytes);
    stream.write_all(&framed).await.unwrap();
    let mut len = [0u8; 2];
    tokio::time::timeout(Duration::from_secs(2), stream.read_exact(&mut len))
        .await
        .unwrap()
        .unwrap();
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut buf).await.unwrap();
    Message::from_vec(&buf).unwrap()
}

pub fn addresses(message: &Message) -> Vec<IpAddr> {
    message
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(a) => Some(IpAddr::V6(a.0)),
            _ => None,
        })
        .collect()
}

/// The addresses seen over `n` A queries of www.gslb.test.
pub async fn seen(server: SocketAddr, n: usize) -> HashSet<IpAddr> {
    seen_of(server, n, RecordType::A).await
}

/// The addresses seen over `n` queries of type `qtype` for www.gslb.test.
pub async fn seen_of(server: SocketAddr, n: usize, qtype: RecordType) -> HashSet<IpAddr> {
    let mut all = HashSet::new();
    for _ in 0..n {
        all.extend(addresses(&ask(server, "www.gslb.test.", qtype).await));
    }
    all
}

pub fn status_of(gslb: &Gslb, site: &str) -> SiteStatus {
    gslb.status()
        .into_iter()
        .find(|s| s.key.site == site)
        .expect("site status")
}

/// Waits (bounded) until `site` has status `state`.
pub async fn wait_state(gslb: &Gslb, site: &str, state: SiteState, within: Duration) {
    let start = Instant::now();
    while status_of(gslb, site).state != state {
        assert!(
            start.elapsed() < within,
            "{site}: {:?}, wanted {state}",
            status_of(gslb, site)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

pub fn set(items: &[&str]) -> HashSet<IpAddr> {
    items.iter().map(|i| ip(i)).collect()
}

pub const LIVE: Mode = Mode::Live {
    tier: "mains",
    sessions: 0,
};
pub const DOWN: Mode = Mode::Live {
    tier: "none",
    sessions: 0,
};

/// A real `lb run` daemon (binary from env LB_BIN, else this package's `lb`), killed on drop.
pub struct Daemon {
    pub child: std::process::Child,
    pub api: String,
    pub _dir: PathGuard,
}

pub struct PathGuard(pub std::path::PathBuf);

impl Drop for PathGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a site daemon with an HTTP vService `web` over one backend on `backend_port`,
/// checked by TCP every second (RS = RF = 1), decisions reflected at once.
pub async fn daemon(tag: &str, backend_port: u16) -> Daemon {
    daemon_at("127.0.0.1".parse().unwrap(), tag, backend_port).await
}

/// [`daemon`] with its API, vService and backend on the loopback address `ip` (`::1` for
/// an IPv6 site).
pub async fn daemon_at(ip: IpAddr, tag: &str, backend_port: u16) -> Daemon {
    let (api_port, vs_port) = (free_port(), free_port());
    let api = SocketAddr::new(ip, api_port);
    let dir = std::env::temp_dir().join(format!("lb-gslb-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("lb.toml");
    let text = format!(
        "[api]\nlisten = \"{api}\"\n[reflection]\nl7_delay = 0.0\n\
         [[health_check]]\nname = \"t\"\ntype = \"tcp\"\nperiod = 1.0\ntimeout = 1.0\n\
         required_successes = 1\nrequired_failures = 1\n\
         [[backend_service]]\nname = \"b\"\naddress = \"{ip}\"\nport = {backend_port}\n\
         health_check = \"t\"\n\
         [[vservice]]\nname = \"web\"\nkind = \"http\"\naddress = \"{ip}\"\n\
         port = {vs_port}\nbackends = [\"b\"]\n"
    );
    std::fs::write(&config, text).unwrap();
    let bin = std::env::var("LB_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_lb").to_owned());
    let child = std::process::Command::new(bin)
        .arg("run")
        .arg("--config")
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    Daemon {
        child,
        api: format!("http://{api}"),
        _dir: PathGuard(dir),
    }
}

/// A TCP backend that accepts (and closes) connections until aborted.
pub async fn backend(port: u16) -> tokio::task::JoinHandle<()> {
    backend_at("127.0.0.1".parse().unwrap(), port).await
}

/// [`backend`] on the loopback address `ip`.
pub async fn backend_at(ip: IpAddr, port: u16) -> tokio::task::JoinHandle<()> {
    let listener = TcpListener::bind((ip, port)).await.unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    })
}

/// Waits (bounded) until A queries of www answer exactly `want`.
pub async fn wait_answers(server: SocketAddr, want: &[&str], within: Duration) {
    wait_answers_of(server, RecordType::A, want, within).await
}

/// Waits (bounded) until `qtype` queries of www answer exactly `want`.
pub async fn wait_answers_of(
    server: SocketAddr,
    qtype: RecordType,
    want: &[&str],
    within: Duration,
) {
    let start = Instant::now();
    loop {
        let got = seen_of(server, 4, qtype).await;
        if got == set(want) {
            return;
        }
        assert!(start.elapsed() < within, "answers {got:?}, wanted {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `GET path` on the API at `api` (plain HTTP on loopback): the body of a 200.
pub async fn api_get(api: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(api).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: lb\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8(got).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// The DNS vService `g`'s counters as `GET /api/v1/gslb` reports them.
pub async fn api_counters(api: SocketAddr) -> serde_json::Value {
    let body = api_get(api, "/api/v1/gslb").await;
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    doc["counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["dns_vservice"] == "g")
        .cloned()
        .unwrap()
}

/// The value of sample `name{labels}` in a Prometheus text, 0 when absent.
pub fn sample(text: &str, name: &str, labels: &str) -> u64 {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |value| value.trim().parse().unwrap())
}
