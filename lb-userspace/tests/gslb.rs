//! Global service standby (S-GS): DNS vServices against site APIs. Sites are small HTTP
//! servers speaking the exact `GET /api/v1/stats/live` shape, or real `lb run` daemons
//! (`e2e_*`). Everything listens on 127.0.0.1 only.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use lb::gslb::{Gslb, SiteState, SiteStatus};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

mod ports;
use ports::free_port;

/// What a fake site's API answers.
#[derive(Clone, Debug)]
enum Mode {
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
struct SiteState_ {
    mode: Arc<Mutex<Mode>>,
    token: Option<&'static str>,
}

/// A fake site API on 127.0.0.1.
struct Site {
    url: String,
    mode: Arc<Mutex<Mode>>,
    task: tokio::task::JoinHandle<()>,
}

impl Site {
    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }
}

async fn live(State(state): State<SiteState_>, headers: HeaderMap) -> Response {
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

async fn site(mode: Mode, token: Option<&'static str>) -> Site {
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
fn site_toml(name: &str, address: &str, api: &str, standby: bool, extra: &str) -> String {
    format!(
        "[[dns_vservice.record.site]]\nname = \"{name}\"\naddress = \"{address}\"\n\
         api = \"{api}\"\nvservice = \"web\"\nstandby = {standby}\n{extra}\n"
    )
}

/// A DNS vService on `port` for zone gslb.test with one record `www`.
fn config(
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
async fn start(policy: &str, answers: u32, rate: u32, sites: &[String]) -> (Gslb, u16) {
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

fn addr_in_use(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::AddrInUse)
    })
}

fn query_bytes(name: &str, qtype: RecordType) -> Vec<u8> {
    let mut message = Message::query();
    message.metadata.id = rand_id();
    message.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    message.to_vec().unwrap()
}

fn rand_id() -> u16 {
    (Instant::now().elapsed().subsec_nanos() % 65_000) as u16 + 1
}

async fn udp(server: SocketAddr, bytes: &[u8]) -> Option<Message> {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.send_to(bytes, server).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let got = tokio::time::timeout(Duration::from_secs(1), socket.recv(&mut buf)).await;
    let len = got.ok()?.unwrap();
    Some(Message::from_vec(&buf[..len]).unwrap())
}

async fn ask(server: SocketAddr, name: &str, qtype: RecordType) -> Message {
    udp(server, &query_bytes(name, qtype))
        .await
        .expect("an answer")
}

async fn ask_tcp(server: SocketAddr, name: &str, qtype: RecordType) -> Message {
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

fn addresses(message: &Message) -> Vec<IpAddr> {
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
async fn seen(server: SocketAddr, n: usize) -> HashSet<IpAddr> {
    seen_of(server, n, RecordType::A).await
}

/// The addresses seen over `n` queries of type `qtype` for www.gslb.test.
async fn seen_of(server: SocketAddr, n: usize, qtype: RecordType) -> HashSet<IpAddr> {
    let mut all = HashSet::new();
    for _ in 0..n {
        all.extend(addresses(&ask(server, "www.gslb.test.", qtype).await));
    }
    all
}

fn status_of(gslb: &Gslb, site: &str) -> SiteStatus {
    gslb.status()
        .into_iter()
        .find(|s| s.key.site == site)
        .expect("site status")
}

/// Waits (bounded) until `site` has status `state`.
async fn wait_state(gslb: &Gslb, site: &str, state: SiteState, within: Duration) {
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

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn set(items: &[&str]) -> HashSet<IpAddr> {
    items.iter().map(|i| ip(i)).collect()
}

const LIVE: Mode = Mode::Live {
    tier: "mains",
    sessions: 0,
};
const DOWN: Mode = Mode::Live {
    tier: "none",
    sessions: 0,
};

/// S-GS1, S-GS2, S-GS3: the standby is dark while an active site serves, answered on the
/// first query after every active failed, and dark again on the first query after one
/// active recovered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_gs1_s_gs2_s_gs3_standby_only_while_every_active_failed() {
    let (a, b, s) = (
        site(LIVE, None).await,
        site(LIVE, None).await,
        site(LIVE, None).await,
    );
    let sites = [
        site_toml("a", "192.0.2.1", &a.url, false, ""),
        site_toml("b", "192.0.2.2", &b.url, false, ""),
        site_toml("s", "192.0.2.9", &s.url, true, ""),
    ];
    let (gslb, port) = start("round-robin", 1, 0, &sites).await;
    let server = SocketAddr::from(([127, 0, 0, 1], port));
    // The first poll is done before serving: statuses are already OK.
    assert_eq!(status_of(&gslb, "a").state, SiteState::Ok);
    assert_eq!(seen(server, 10).await, set(&["192.0.2.1", "192.0.2.2"]));

    a.set(DOWN);
    wait_state(&gslb, "a", SiteState::NoServices, Duration::from_secs(3)).await;
    assert_eq!(
        seen(server, 6).await,
        set(&["192.0.2.2"]),
        "one active left: standby dark"
    );

    b.set(DOWN);
    wait_state(&gslb, "b", SiteState::NoServices, Duration::from_secs(3)).await;
    assert_eq!(
        seen(server, 6).await,
        set(&["192.0.2.9"]),
        "S-GS1: standby takes over"
    );

    b.set(LIVE);
    wait_state(&gslb, "b", SiteState::Ok, Duration::from_secs(3)).await;
    assert_eq!(
        seen(server, 6).await,
        set(&["192.0.2.2"]),
        "S-GS2: back to the active"
    );
    let counters = &gslb.counters()[0];
    assert!(counters.standby_answers >= 6, "{counters:?}");
    gslb.shutdown().await;
    for site in [a, b, s] {
        site.task.abort();
    }
}

/// S-GS4: OK, No Services, No Metrics and No Connection (garbage, HTTP error, wrong token,
/// closed port), each with its reason, and every change in the transition log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_gs4_statuses_with_reasons_and_transitions() {
    let ok = site(LIVE, Some("site-token-0123456789")).await;
    let no_vs = site(Mode::NoVService, None).await;
    let garbage = site(Mode::Garbage, None).await;
    let error = site(Mode::Error(500), None).await;
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let sites = [
        site_toml(
            "ok",
            "192.0.2.1",
            &ok.url,
            false,
            "token = \"site-token-0123456789\"",
        ),
        site_toml(
            "wrong-token",
            "192.0.2.2",
            &ok.url,
            false,
            "token = \"not-the-token-0123456\"",
        ),
        site_toml("no-vs", "192.0.2.3", &no_vs.url, false, ""),
        site_toml("garbage", "192.0.2.4", &garbage.url, false, ""),
        site_toml("error", "192.0.2.5", &error.url, false, ""),
        site_toml("closed", "192.0.2.6", &closed, true, ""),
    ];
    let (gslb, _) = start("round-robin", 1, 0, &sites).await;
    let check = |name: &str, state: SiteState, reason: &str| {
        let status = status_of(&gslb, name);
        assert_eq!(status.state, state, "{status:?}");
        assert!(status.reason.contains(reason), "{name}: {status:?}");
    };
    check("ok", SiteState::Ok, "serves");
    check("wrong-token", SiteState::NoConnection, "HTTP 401");
    check(
        "no-vs",
        SiteState::NoMetrics,
        "does not report vservice `web`",
    );
    check("garbage", SiteState::NoConnection, "not JSON");
    check("error", SiteState::NoConnection, "HTTP 500");
    check("closed", SiteState::NoConnection, "request failed");
    assert_eq!(status_of(&gslb, "ok").sessions, Some(0));

    let before = Instant::now();
    ok.set(DOWN);
    wait_state(&gslb, "ok", SiteState::NoServices, Duration::from_secs(3)).await;
    check("ok", SiteState::NoServices, "no available backend");
    ok.task.abort();
    wait_state(&gslb, "ok", SiteState::NoConnection, Duration::from_secs(3)).await;
    let log: Vec<(SiteState, SiteState)> = gslb
        .transitions()
        .into_iter()
        .filter(|t| t.key.site == "ok")
        .map(|t| (t.from, t.to))
        .collect();
    assert_eq!(
        log,
        [
            (SiteState::NoConnection, SiteState::Ok),
            (SiteState::Ok, SiteState::NoServices),
            (SiteState::NoServices, SiteState::NoConnection),
        ]
    );
    assert!(before.elapsed() < Duration::from_secs(6));
    gslb.shutdown().await;
    for site in [no_vs, garbage, error] {
        site.task.abort();
    }
}

/// Answers: A with the configured TTL and AA, AAAA for IPv6 sites, UDP and TCP,
/// NXDOMAIN (with SOA) under the zone, REFUSED outside, malformed input never kills it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_gs_dns_answers_codes_and_malformed_queries() {
    let a = site(LIVE, None).await;
    let sites = [site_toml(
        "a",
        "192.0.2.1",
        &a.url,
        false,
        "address6 = \"2001:db8::1\"",
    )];
    let (gslb, port) = start("round-robin", 1, 0, &sites).await;
    let server = SocketAddr::from(([127, 0, 0, 1], port));

    let answer = ask(server, "WWW.gslb.test.", RecordType::A).await;
    assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
    assert!(answer.metadata.authoritative);
    assert_eq!(addresses(&answer), [ip("192.0.2.1")]);
    assert_eq!(answer.answers[0].ttl, 7);
    let answer = ask(server, "www.gslb.test.", RecordType::AAAA).await;
    assert_eq!(addresses(&answer), [ip("2001:db8::1")]);
    let answer = ask_tcp(server, "www.gslb.test.", RecordType::A).await;
    assert_eq!(addresses(&answer), [ip("192.0.2.1")]);
    let answer = ask(server, "www.gslb.test.", RecordType::MX).await;
    assert_eq!(
        (answer.metadata.response_code, answer.answers.len()),
        (ResponseCode::NoError, 0)
    );

    let answer = ask(server, "nope.gslb.test.", RecordType::A).await;
    assert_eq!(answer.metadata.response_code, ResponseCode::NXDomain);
    assert!(matches!(
        answer.authorities.first().map(|r| &r.data),
        Some(RData::SOA(_))
    ));
    let answer = ask(server, "www.example.org.", RecordType::A).await;
    assert_eq!(answer.metadata.response_code, ResponseCode::Refused);

    // Malformed: a header announcing a question that is not there, random bytes, a
    // response instead of a query, a truncated header. FORMERR or silence, never a crash.
    let valid = query_bytes("www.gslb.test.", RecordType::A);
    let mut no_question = valid[..12].to_vec();
    no_question[5] = 1;
    let mut response = valid.clone();
    response[2] |= 0x80;
    let junk: Vec<u8> = (0..200u32).map(|i| (i * 7919 % 251) as u8).collect();
    for bytes in [no_question, junk, response, valid[..5].to_vec()] {
        if let Some(answer) = udp(server, &bytes).await {
            assert_eq!(answer.metadata.message_type, MessageType::Response);
            assert_ne!(
                answer.metadata.response_code,
                ResponseCode::NoError,
                "{answer:?}"
            );
        }
    }
    let mut two = Message::query();
    two.add_query(Query::query(
        Name::from_ascii("www.gslb.test.").unwrap(),
        RecordType::A,
    ));
    two.add_query(Query::query(
        Name::from_ascii("www.gslb.test.").unwrap(),
        RecordType::AAAA,
    ));
    let answer = udp(server, &two.to_vec().unwrap()).await.expect("FORMERR");
    assert_eq!(answer.metadata.response_code, ResponseCode::FormErr);
    // Still serving.
    assert_eq!(
        addresses(&ask(server, "www.gslb.test.", RecordType::A).await),
        [ip("192.0.2.1")]
    );
    let counters = &gslb.counters()[0];
    assert!(
        counters.nxdomain == 1 && counters.refused == 1 && counters.formerr >= 1,
        "{counters:?}"
    );
    gslb.shutdown().await;
    a.task.abort();
}

/// Bad input: a flood from one source is bounded by the per-source limit and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_gs_query_flood_is_rate_limited_and_counted() {
    let a = site(LIVE, None).await;
    let sites = [site_toml("a", "192.0.2.1", &a.url, false, "")];
    let (gslb, port) = start("round-robin", 1, 5, &sites).await;
    let server = SocketAddr::from(([127, 0, 0, 1], port));
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let bytes = query_bytes("www.gslb.test.", RecordType::A);
    for _ in 0..100 {
        socket.send_to(&bytes, server).await.unwrap();
    }
    let mut answers = 0;
    let mut buf = [0u8; 1024];
    while let Ok(Ok(_)) =
        tokio::time::timeout(Duration::from_millis(300), socket.recv(&mut buf)).await
    {
        answers += 1;
    }
    assert!(
        (5..=8).contains(&answers),
        "{answers} answers to a flood of 100 at 5/s"
    );
    let counters = &gslb.counters()[0];
    assert_eq!(counters.queries, 100);
    assert_eq!(counters.rate_limited, 100 - answers);
    gslb.shutdown().await;
    a.task.abort();
}

/// Policies over real polls: least loaded follows the sites' sessions, weighted the weights.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_gs_least_loaded_and_weighted_from_polled_metrics() {
    let a = site(
        Mode::Live {
            tier: "mains",
            sessions: 50,
        },
        None,
    )
    .await;
    let b = site(
        Mode::Live {
            tier: "mains",
            sessions: 3,
        },
        None,
    )
    .await;
    let sites = [
        site_toml("a", "192.0.2.1", &a.url, false, "weight = 3"),
        site_toml("b", "192.0.2.2", &b.url, false, "weight = 1"),
    ];
    let (gslb, port) = start("least-loaded", 1, 0, &sites).await;
    let server = SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(seen(server, 5).await, set(&["192.0.2.2"]));
    b.set(Mode::Live {
        tier: "mains",
        sessions: 80,
    });
    let start = Instant::now();
    while seen(server, 1).await != set(&["192.0.2.1"]) {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "least loaded did not follow"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Reload to weighted: same listener, statuses kept (no new transition), weights apply.
    let transitions = gslb.transitions().len();
    gslb.update(config(port, "weighted", 1, 0, &sites))
        .await
        .unwrap();
    assert_eq!(gslb.transitions().len(), transitions);
    let mut a_count = 0;
    for _ in 0..40 {
        if addresses(&ask(server, "www.gslb.test.", RecordType::A).await) == [ip("192.0.2.1")] {
            a_count += 1;
        }
    }
    assert_eq!(a_count, 30, "weight 3 of 4");
    gslb.shutdown().await;
    for site in [a, b] {
        site.task.abort();
    }
}

/// A real `lb run` daemon (binary from env LB_BIN, else this package's `lb`), killed on drop.
struct Daemon {
    child: std::process::Child,
    api: String,
    _dir: PathGuard,
}

struct PathGuard(std::path::PathBuf);

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
async fn daemon(tag: &str, backend_port: u16) -> Daemon {
    daemon_at("127.0.0.1".parse().unwrap(), tag, backend_port).await
}

/// [`daemon`] with its API, vService and backend on the loopback address `ip` (`::1` for
/// an IPv6 site).
async fn daemon_at(ip: IpAddr, tag: &str, backend_port: u16) -> Daemon {
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
async fn backend(port: u16) -> tokio::task::JoinHandle<()> {
    backend_at("127.0.0.1".parse().unwrap(), port).await
}

/// [`backend`] on the loopback address `ip`.
async fn backend_at(ip: IpAddr, port: u16) -> tokio::task::JoinHandle<()> {
    let listener = TcpListener::bind((ip, port)).await.unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    })
}

/// Waits (bounded) until A queries of www answer exactly `want`.
async fn wait_answers(server: SocketAddr, want: &[&str], within: Duration) {
    wait_answers_of(server, RecordType::A, want, within).await
}

/// Waits (bounded) until `qtype` queries of www answer exactly `want`.
async fn wait_answers_of(server: SocketAddr, qtype: RecordType, want: &[&str], within: Duration) {
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

/// End to end with real site daemons: S-GS1 (the standby appears when the active site's
/// backends stop), S-GS2 (and disappears when they are back), S-GS4 (a stopped daemon is
/// No Connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_s_gs1_s_gs2_s_gs4_real_site_daemons() {
    let (port_a, port_s) = (free_port(), free_port());
    let mut backend_a = backend(port_a).await;
    let backend_s = backend(port_s).await;
    let mut site_a = daemon("a", port_a).await;
    let site_s = daemon("s", port_s).await;
    let sites = [
        site_toml("a", "192.0.2.1", &site_a.api, false, ""),
        site_toml("s", "192.0.2.9", &site_s.api, true, ""),
    ];
    let (gslb, dns_port) = start("round-robin", 2, 0, &sites).await;
    let server = SocketAddr::from(([127, 0, 0, 1], dns_port));
    wait_state(&gslb, "a", SiteState::Ok, Duration::from_secs(10)).await;
    wait_state(&gslb, "s", SiteState::Ok, Duration::from_secs(10)).await;
    wait_answers(server, &["192.0.2.1"], Duration::from_secs(2)).await;

    backend_a.abort();
    let _ = (&mut backend_a).await;
    wait_state(&gslb, "a", SiteState::NoServices, Duration::from_secs(10)).await;
    wait_answers(server, &["192.0.2.9"], Duration::from_secs(2)).await;

    let backend_a = backend(port_a).await;
    wait_state(&gslb, "a", SiteState::Ok, Duration::from_secs(10)).await;
    wait_answers(server, &["192.0.2.1"], Duration::from_secs(2)).await;

    let _ = site_a.child.kill();
    let _ = site_a.child.wait();
    wait_state(&gslb, "a", SiteState::NoConnection, Duration::from_secs(5)).await;
    let status = status_of(&gslb, "a");
    assert!(status.reason.contains(&site_a.api), "{status:?}");
    gslb.shutdown().await;
    backend_a.abort();
    backend_s.abort();
}

/// S-GS1/S-GS2 with IPv6 site daemons: each site's API, vService and backend on `::1`, the
/// DNS vService polling them over IPv6 and answering AAAA with the sites' IPv6 addresses;
/// the standby's address appears when the active site's backend stops, and goes when it is
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_s_gs1_s_gs2_ipv6_site_daemons_answer_aaaa() {
    let v6: IpAddr = "::1".parse().unwrap();
    let (port_a, port_s) = (free_port(), free_port());
    let mut backend_a = backend_at(v6, port_a).await;
    let backend_s = backend_at(v6, port_s).await;
    let site_a = daemon_at(v6, "a6", port_a).await;
    let site_s = daemon_at(v6, "s6", port_s).await;
    assert!(site_a.api.starts_with("http://[::1]:"), "{}", site_a.api);
    let sites = [
        site_toml(
            "a",
            "192.0.2.1",
            &site_a.api,
            false,
            "address6 = \"2001:db8::a\"",
        ),
        site_toml(
            "s",
            "192.0.2.9",
            &site_s.api,
            true,
            "address6 = \"2001:db8::9\"",
        ),
    ];
    let (gslb, dns_port) = start("round-robin", 2, 0, &sites).await;
    let server = SocketAddr::from(([127, 0, 0, 1], dns_port));
    wait_state(&gslb, "a", SiteState::Ok, Duration::from_secs(10)).await;
    wait_state(&gslb, "s", SiteState::Ok, Duration::from_secs(10)).await;
    let aaaa = RecordType::AAAA;
    wait_answers_of(server, aaaa, &["2001:db8::a"], Duration::from_secs(2)).await;

    backend_a.abort();
    let _ = (&mut backend_a).await;
    wait_state(&gslb, "a", SiteState::NoServices, Duration::from_secs(10)).await;
    wait_answers_of(server, aaaa, &["2001:db8::9"], Duration::from_secs(2)).await;

    let backend_a = backend_at(v6, port_a).await;
    wait_state(&gslb, "a", SiteState::Ok, Duration::from_secs(10)).await;
    wait_answers_of(server, aaaa, &["2001:db8::a"], Duration::from_secs(2)).await;
    gslb.shutdown().await;
    backend_a.abort();
    backend_s.abort();
}

/// `GET path` on the API at `api` (plain HTTP on loopback): the body of a 200.
async fn api_get(api: SocketAddr, path: &str) -> String {
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
async fn api_counters(api: SocketAddr) -> serde_json::Value {
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
fn sample(text: &str, name: &str, labels: &str) -> u64 {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |value| value.trim().parse().unwrap())
}

/// Bad input counted: every message a DNS vService receives is counted once, in the API
/// (`GET /api/v1/gslb`) and in `/metrics`, by the code of the answer it got or by why it got
/// none. 300 datagrams that do not decode (FORMERR), too-short and response datagrams
/// (no answer) and good queries of every outcome, through a real `lb run`: the counters move
/// by exactly what was sent and answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_gs_every_dns_message_is_counted_by_answer_code_in_the_api_and_metrics() {
    let a = site(LIVE, None).await;
    let (api_port, dns_port) = (free_port(), free_port());
    let api = SocketAddr::from(([127, 0, 0, 1], api_port));
    let server = SocketAddr::from(([127, 0, 0, 1], dns_port));
    let dir = std::env::temp_dir().join(format!("lb-gslb-counted-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("lb.toml");
    let text = format!(
        "[api]\nlisten = \"{api}\"\n\
         [[dns_vservice]]\nname = \"g\"\naddress = \"127.0.0.1\"\nport = {dns_port}\n\
         zone = \"gslb.test\"\npoll_period = 0.2\npoll_timeout = 0.5\nrate_limit = 0\n\
         [[dns_vservice.record]]\nname = \"www\"\n{}",
        site_toml("a", "192.0.2.1", &a.url, false, "")
    );
    std::fs::write(&config, text).unwrap();
    let bin = std::env::var("LB_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_lb").to_owned());
    let child = std::process::Command::new(bin)
        .args(["run", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _daemon = Daemon {
        child,
        api: format!("http://{api}"),
        _dir: PathGuard(dir),
    };
    // The daemon starts (bounded): queries until one is answered with the site.
    let started = Instant::now();
    let valid = query_bytes("www.gslb.test.", RecordType::A);
    while udp(server, &valid).await.map(|m| addresses(&m)) != Some(vec![ip("192.0.2.1")]) {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "lb run never answered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = api_counters(api).await;
    let metrics_before = api_get(api, "/metrics").await;

    // Undecodable past the header: a question announced but absent, or a label running
    // past the end.
    let mut no_question = valid[..12].to_vec();
    no_question[5] = 1;
    let mut cut_label = valid[..14].to_vec();
    cut_label[12] = 60;
    let mut response = valid.clone();
    response[2] |= 0x80;
    let mut status = valid.clone();
    status[2] = (status[2] & 0x87) | (2 << 3); // opcode STATUS
    let mut two = Message::query();
    for qtype in [RecordType::A, RecordType::AAAA] {
        two.add_query(Query::query(
            Name::from_ascii("www.gslb.test.").unwrap(),
            qtype,
        ));
    }
    let two = two.to_vec().unwrap();
    let malformed = 300;
    let mut load: Vec<(Vec<u8>, Option<ResponseCode>)> = Vec::new();
    for i in 0..malformed {
        let bytes = if i % 2 == 0 { &no_question } else { &cut_label };
        load.push((bytes.clone(), Some(ResponseCode::FormErr)));
    }
    load.push((two, Some(ResponseCode::FormErr)));
    for _ in 0..3 {
        load.push((valid[..5].to_vec(), None));
    }
    for _ in 0..2 {
        load.push((response.clone(), None));
    }
    for _ in 0..5 {
        load.push((valid.clone(), Some(ResponseCode::NoError)));
    }
    let mx = query_bytes("www.gslb.test.", RecordType::MX);
    load.push((mx, Some(ResponseCode::NoError)));
    for _ in 0..2 {
        let nope = query_bytes("nope.gslb.test.", RecordType::A);
        load.push((nope, Some(ResponseCode::NXDomain)));
        let outside = query_bytes("www.example.org.", RecordType::A);
        load.push((outside, Some(ResponseCode::Refused)));
    }
    load.push((status, Some(ResponseCode::NotImp)));
    // One socket, one datagram at a time, each answer (or silence) awaited: bounded by the
    // 317 datagrams above, 1 s each at most.
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut buf = vec![0u8; 4096];
    for (bytes, expected) in &load {
        socket.send_to(bytes, server).await.unwrap();
        let wait = Duration::from_millis(if expected.is_some() { 1000 } else { 100 });
        let code = match tokio::time::timeout(wait, socket.recv(&mut buf)).await {
            Ok(Ok(len)) => Some(
                Message::from_vec(&buf[..len])
                    .unwrap()
                    .metadata
                    .response_code,
            ),
            _ => None,
        };
        assert_eq!(code, *expected, "the answer to {bytes:?}");
    }
    let after = api_counters(api).await;
    let metrics = api_get(api, "/metrics").await;
    let delta =
        |field: &str| after[field].as_u64().unwrap_or(0) - before[field].as_u64().unwrap_or(0);
    let sent = load.len() as u64;
    let expected = [
        ("queries", sent),
        ("formerr", malformed + 1),
        ("malformed", malformed),
        ("too_short", 3),
        ("ignored", 2),
        ("answered", 5),
        ("no_data", 1),
        ("nxdomain", 2),
        ("refused", 2),
        ("notimp", 1),
        ("servfail", 0),
        ("rate_limited", 0),
        ("send_failed", 0),
    ];
    let moved: Vec<(&str, u64)> = expected.iter().map(|(f, _)| (*f, delta(f))).collect();
    assert_eq!(moved, expected, "how far the API's counters moved");

    let g = "dns_vservice=\"g\"";
    let moved = |name: &str, labels: &str| {
        sample(&metrics, name, labels) - sample(&metrics_before, name, labels)
    };
    assert_eq!(moved("lb_dns_queries_total", g), sent, "{metrics}");
    let rcodes = [
        "NOERROR", "NXDOMAIN", "REFUSED", "FORMERR", "NOTIMP", "SERVFAIL",
    ];
    let by_rcode: Vec<(&str, u64)> = rcodes
        .into_iter()
        .map(|rcode| {
            let labels = format!("{g},rcode=\"{rcode}\"");
            (rcode, moved("lb_dns_responses_total", &labels))
        })
        .collect();
    let answered = [
        ("NOERROR", 6),
        ("NXDOMAIN", 2),
        ("REFUSED", 2),
        ("FORMERR", malformed + 1),
        ("NOTIMP", 1),
        ("SERVFAIL", 0),
    ];
    assert_eq!(by_rcode, answered, "{metrics}");
    let reasons = ["rate_limited", "too_short", "ignored", "send_failed"];
    let unanswered: Vec<(&str, u64)> = reasons
        .into_iter()
        .map(|reason| {
            let labels = format!("{g},reason=\"{reason}\"");
            (reason, moved("lb_dns_unanswered_total", &labels))
        })
        .collect();
    let silent = [
        ("rate_limited", 0),
        ("too_short", 3),
        ("ignored", 2),
        ("send_failed", 0),
    ];
    assert_eq!(unanswered, silent, "{metrics}");
    assert_eq!(moved("lb_dns_malformed_total", g), malformed, "{metrics}");
    let site_a = format!("{g},name=\"www.gslb.test.\",site=\"a\"");
    assert_eq!(moved("lb_dns_site_answers_total", &site_a), 5, "{metrics}");
    a.task.abort();
}

/// A stopping DNS vService (the old process of an upgrade) answers every query it read: it
/// reads no more once told to stop, and sends the answer of each datagram it took. The test
/// keeps a copy of the UDP socket, as the new process of an upgrade does; queries flow while
/// the DNS vService stops, then every query sent is either answered or still unread on the
/// copy: none is lost. At most 64 queries are in flight, plus a last burst of 64 as the stop
/// begins, so the copy's receive buffer never overflows (that loss would be the kernel's).
/// Bounded: at most 20,000 queries, 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_gs_a_stopping_dns_vservice_answers_every_query_it_read() {
    let a = site(LIVE, None).await;
    let sites = [site_toml("a", "192.0.2.1", &a.url, false, "")];
    let port = free_port();
    let server = SocketAddr::from(([127, 0, 0, 1], port));
    let udp = std::net::UdpSocket::bind(server).unwrap();
    let copy = udp.try_clone().unwrap();
    let mut inherited = lb::gslb::DnsSockets::default();
    inherited.udp.insert(server, udp);
    inherited
        .tcp
        .insert(server, std::net::TcpListener::bind(server).unwrap());
    let cfg = config(port, "round-robin", 1, 0, &sites);
    let gslb = Gslb::start_inheriting(cfg, inherited).await.unwrap();

    let client = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let sending = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sender = {
        let (client, sending, answered) = (client.clone(), sending.clone(), answered.clone());
        tokio::spawn(async move {
            let mut sent = 0u16;
            let started = Instant::now();
            let mut tail = 64;
            while tail > 0 && sent < 20_000 && started.elapsed() < Duration::from_secs(10) {
                let stopping = !sending.load(std::sync::atomic::Ordering::SeqCst);
                let in_flight = usize::from(sent)
                    .saturating_sub(answered.load(std::sync::atomic::Ordering::SeqCst));
                if !stopping && in_flight >= 64 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                let mut query = sent.to_be_bytes().to_vec();
                query.extend_from_slice(&query_bytes("www.gslb.test.", RecordType::A)[2..]);
                client.send_to(&query, server).await.unwrap();
                sent += 1;
                if stopping {
                    tail -= 1;
                }
            }
            sent
        })
    };
    let receiver = {
        let (client, count) = (client.clone(), answered.clone());
        tokio::spawn(async move {
            let mut answered = HashSet::new();
            let mut buf = [0u8; 512];
            // Until the answers stop coming for 1 s.
            while let Ok(Ok(len)) =
                tokio::time::timeout(Duration::from_secs(1), client.recv(&mut buf)).await
            {
                if len >= 12 {
                    answered.insert(u16::from_be_bytes([buf[0], buf[1]]));
                    count.store(answered.len(), std::sync::atomic::Ordering::SeqCst);
                }
            }
            answered.len()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    sending.store(false, std::sync::atomic::Ordering::SeqCst);
    gslb.shutdown().await;
    let sent = sender.await.unwrap();
    let answered = receiver.await.unwrap();
    copy.set_nonblocking(true).unwrap();
    let mut unread = 0;
    let mut buf = [0u8; 512];
    while copy.recv_from(&mut buf).is_ok() {
        unread += 1;
    }
    assert!(
        answered > 100,
        "the DNS vService served ({answered} answered)"
    );
    assert_eq!(
        answered + unread,
        usize::from(sent),
        "{sent} sent: {answered} answered, {unread} left unread for the next process"
    );
    a.task.abort();
}

/// The DNS side, fuzzed. Datagrams of random bytes, and queries with random names,
/// types, flags and counts, get an answer or silence (never a crash); after each one a
/// valid query is still answered. `PROPTEST_CASES` sets the count (a tenth of it here: a
/// datagram left unanswered costs a 50 ms wait).
#[test]
fn any_datagram_leaves_the_dns_vservice_answering() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (a, gslb, server) = rt.block_on(async {
        let a = site(LIVE, None).await;
        let sites = [site_toml("a", "192.0.2.1", &a.url, false, "")];
        let (gslb, port) = start("round-robin", 1, 0, &sites).await;
        (a, gslb, SocketAddr::from(([127, 0, 0, 1], port)))
    });
    rt.block_on(wait_answers(
        server,
        &["192.0.2.1"],
        Duration::from_secs(10),
    ));
    let shaped = (
        any::<u16>(),
        any::<u16>(),
        "[a-zA-Z0-9.*_-]{0,70}",
        any::<u16>(),
        prop::collection::vec(any::<u8>(), 0..32),
    )
        .prop_map(|(id, flags, name, qtype, tail)| {
            let mut bytes = Vec::new();
            bytes.extend_from_slice(&id.to_be_bytes());
            bytes.extend_from_slice(&flags.to_be_bytes());
            bytes.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
            for label in name.split('.') {
                let label = &label.as_bytes()[..label.len().min(63)];
                bytes.push(label.len() as u8);
                bytes.extend_from_slice(label);
            }
            bytes.push(0);
            bytes.extend_from_slice(&qtype.to_be_bytes());
            bytes.extend_from_slice(&[0, 1]);
            bytes.extend_from_slice(&tail);
            bytes
        });
    let datagram = prop_oneof![prop::collection::vec(any::<u8>(), 0..600), shaped];
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
        .map_or(128, |n| (n / 10).max(128));
    let mut runner = TestRunner::new(Config::with_cases(cases));
    let result = runner.run(&datagram, |bytes| {
        rt.block_on(async {
            let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
            socket.send_to(&bytes, server).await.expect("send");
            let mut buf = vec![0u8; 4096];
            let got = tokio::time::timeout(Duration::from_millis(50), socket.recv(&mut buf));
            if let Ok(Ok(len)) = got.await {
                prop_assert!(Message::from_vec(&buf[..len]).is_ok(), "an answer is DNS");
            }
            let answer = udp(server, &query_bytes("www.gslb.test.", RecordType::A)).await;
            prop_assert!(answer.is_some(), "still answering after {bytes:?}");
            Ok(())
        })
    });
    rt.block_on(async {
        gslb.shutdown().await;
        a.task.abort();
    });
    result.expect("the DNS vService answers on");
}
