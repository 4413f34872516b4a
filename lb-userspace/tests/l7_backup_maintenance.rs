//! L7 proxy (HTTP and L7 TCP vServices) end to end on loopback: which server gets traffic.
//! Backups take over and give back (S-BK), Maintenance drains without a failed request and
//! moves persistence pins (S-MT), and a reload keeps, binds and stops listeners. Real
//! backends, the real proxy and real clients (support/l7.rs); each test names the rule it
//! checks.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::{Request, StatusCode};
use lb::config::{
    BackendGroup, BackendService, Condition, ConditionalSet, CookiePersistence, Persistence,
    PortSpec, SameSite, StrMatch, VServiceKind,
};
use lb::proxy::Proxy;
use lb::selection::Health;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod ports;
mod support {
    pub mod l7;
}
use support::l7::*;

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
        tunnel_check: None,
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
