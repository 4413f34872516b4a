//! What an operator's script relies on, against a REAL daemon (no XDP) serving an HTTP
//! vService over plain HTTP/1.1 backends on 127.0.0.1:
//! - S-MT3 ("Maintenance applies at once"): once `POST .../maintenance {"on": true}` has
//!   answered, no request sent after the answer reaches that server, while four keep-alive
//!   clients send requests back to back (each records when it sent and who answered);
//! - a restart keeps the health decisions: the new `lb run` serves at once instead of
//!   holding every checked server in Preparing for RS checks;
//! - S-RT3 (passive health): failing live traffic puts a server in Error at once, its active
//!   check brings it back.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::Method;
use lb::api::client::ApiClient;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

mod ports;
mod servers;
use ports::free_port;
use servers::{named_server, server};

const TOKEN: &str = "test-token-0123456789abcdef";

/// One keep-alive client: sends GET / back to back until `stop`, recording (sent at,
/// server that answered) per request.
async fn client(
    addr: SocketAddr,
    stop: watch::Receiver<bool>,
    log: Arc<Mutex<Vec<(Instant, String)>>>,
) {
    let mut conn = TcpStream::connect(addr).await.expect("connect");
    let mut buf = vec![0u8; 4096];
    while !*stop.borrow() {
        let sent = Instant::now();
        conn.write_all(b"GET / HTTP/1.1\r\nHost: web\r\n\r\n")
            .await
            .expect("send");
        let mut got = Vec::new();
        // Each answer is small: read until its body (the server's name, 2 bytes) is in.
        loop {
            let n = conn.read(&mut buf).await.expect("read");
            assert!(n > 0, "the proxy closed a keep-alive connection");
            got.extend_from_slice(&buf[..n]);
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n")
                && got.len() >= end + 4 + 2
            {
                let body = String::from_utf8_lossy(&got[end + 4..end + 6]).to_string();
                assert!(
                    got.starts_with(b"HTTP/1.1 200"),
                    "{}",
                    String::from_utf8_lossy(&got)
                );
                log.lock().unwrap().push((sent, body));
                break;
            }
        }
    }
}

/// Writes `text` as `lb.toml` in a fresh directory named after `tag`; returns its path.
fn config_file(tag: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lb-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("lb.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

/// `lb run` (without XDP) on the configuration at `path`.
async fn start_daemon(path: &std::path::Path) -> lb::daemon::Running {
    let cfg = lb::config::load(path).expect("valid config");
    lb::daemon::start(None, cfg, path.to_path_buf())
        .await
        .expect("daemon starts")
}

/// Deletes the directory `config_file` made.
fn remove_config(path: &std::path::Path) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// True when one GET / on a new connection is answered 200.
async fn serves(addr: SocketAddr) -> bool {
    get_once(addr).await.starts_with("HTTP/1.1 200")
}

/// One GET / on a new connection that closes after the answer: the whole answer (empty
/// when nothing answered).
async fn get_once(addr: SocketAddr) -> String {
    let Ok(mut conn) = TcpStream::connect(addr).await else {
        return String::new();
    };
    let request = b"GET / HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n";
    if conn.write_all(request).await.is_err() {
        return String::new();
    }
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// S-MT3: 20 times, Maintenance on b1 then off, under keep-alive load from 4 clients: no
/// request sent after an "on" call answered and before the next "off" call was sent is
/// served by b1, and b1 serves again between the calls (the load really runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_mt3_maintenance_holds_once_the_api_answers() {
    let (p1, _s1) = named_server("b1").await;
    let (p2, _s2) = named_server("b2").await;
    let (api_port, web_port) = (free_port(), free_port());
    let text = format!(
        r#"[api]
listen = "127.0.0.1:{api_port}"
token = "{TOKEN}"

[[backend_service]]
name = "b1"
address = "127.0.0.1"
port = {p1}

[[backend_service]]
name = "b2"
address = "127.0.0.1"
port = {p2}

[[vservice]]
name = "web"
kind = "http"
address = "127.0.0.1"
port = {web_port}
backends = ["b1", "b2"]
"#
    );
    // Enough other vServices that publishing the selections takes milliseconds, as in a
    // large configuration: a daemon that answers before publishing is caught in that gap.
    let mut text = text;
    for b in 0..50 {
        text += &format!(
            "\n[[backend_service]]\nname = \"n{b}\"\naddress = \"10.1.0.{}\"\nport = 80\n",
            b + 1
        );
    }
    let list: Vec<String> = (0..50).map(|b| format!("\"n{b}\"")).collect();
    for v in 0..200 {
        text += &format!(
            "\n[[vservice]]\nname = \"net{v}\"\nkind = \"tcp-l4\"\naddress = \"10.2.{}.{}\"\n\
             port = 80\nmaglev_size = 251\nbackends = [{}]\n",
            v / 250,
            v % 250 + 1,
            list.join(", ")
        );
    }
    let path = config_file("admin-holds", &text);
    let running = start_daemon(&path).await;
    let (stop_api, stop_api_rx) = watch::channel(false);
    let listen: SocketAddr = format!("127.0.0.1:{api_port}").parse().expect("addr");
    let server = tokio::spawn(lb::api::serve(
        running.daemon.clone(),
        listen,
        Some(TOKEN.into()),
        stop_api_rx,
    ));
    let api = ApiClient::new(
        &format!("http://127.0.0.1:{api_port}"),
        Some(TOKEN.into()),
        Duration::from_secs(20),
    );
    let started = Instant::now();
    while api.call(Method::GET, "/api/v1/status", None).await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "API never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let web: SocketAddr = format!("127.0.0.1:{web_port}").parse().expect("addr");
    // The first selections are published by the health reflection once it has run.
    while !serves(web).await {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "web never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = Arc::new(Mutex::new(Vec::new()));
    let (stop, stop_rx) = watch::channel(false);
    let clients: Vec<_> = (0..4)
        .map(|_| tokio::spawn(client(web, stop_rx.clone(), log.clone())))
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // [answer of "on", sending of "off") for each round.
    let mut held = Vec::new();
    let maintenance = |on: bool| {
        let api = &api;
        async move {
            let answer = api
                .call(
                    Method::POST,
                    "/api/v1/backends/b1/maintenance",
                    Some(&json!({ "on": on })),
                )
                .await
                .expect("API call");
            assert_eq!(answer.status, 200, "{}", answer.body);
        }
    };
    for _ in 0..20 {
        maintenance(true).await;
        let on = Instant::now();
        tokio::time::sleep(Duration::from_millis(40)).await;
        let off = Instant::now();
        maintenance(false).await;
        held.push((on, off));
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let _ = stop.send(true);
    for c in clients {
        c.await.expect("client");
    }
    let log = log.lock().unwrap().clone();
    let violations: Vec<_> = log
        .iter()
        .filter(|(sent, server)| {
            server == "b1" && held.iter().any(|(on, off)| sent >= on && sent < off)
        })
        .collect();
    let b1 = log.iter().filter(|(_, s)| s == "b1").count();
    println!(
        "{} requests, {b1} served by b1, {} sent during Maintenance and served by b1",
        log.len(),
        violations.len()
    );
    assert!(
        b1 > 20,
        "b1 served between the calls: {b1} of {}",
        log.len()
    );
    assert!(
        violations.is_empty(),
        "{} requests reached b1 after the API answered",
        violations.len()
    );

    let _ = stop_api.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), server).await;
    running.stop().await;
    remove_config(&path);
}

/// S-HC5 across a restart: `lb run` saves its health decisions (every second and when it
/// stops) and a restart within 30 s starts from them: a server checked OK before the
/// restart takes requests at once, where Preparing would refuse them (503) for
/// RS x P = 3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_health_decisions() {
    let (p1, _s1) = named_server("b1").await;
    let (api_port, web_port) = (free_port(), free_port());
    let text = format!(
        r#"[api]
listen = "127.0.0.1:{api_port}"

[[health_check]]
name = "tcp"
type = "tcp"
period = 1
timeout = 1
required_successes = 3

[[backend_service]]
name = "b1"
address = "127.0.0.1"
port = {p1}
health_check = "tcp"

[[vservice]]
name = "web"
kind = "http"
address = "127.0.0.1"
port = {web_port}
backends = ["b1"]
"#
    );
    let path = config_file("restart", &text);
    let web: SocketAddr = format!("127.0.0.1:{web_port}").parse().expect("addr");
    let first = start_daemon(&path).await;
    let started = Instant::now();
    while !serves(web).await {
        assert!(started.elapsed() < Duration::from_secs(10), "never OK");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let warm_up = started.elapsed();
    assert!(
        warm_up >= Duration::from_millis(1500),
        "a fresh start waits for RS checks: {warm_up:?}"
    );
    first.stop().await;
    let second = start_daemon(&path).await;
    let restarted = Instant::now();
    while !serves(web).await {
        assert!(
            restarted.elapsed() < Duration::from_secs(10),
            "never served after the restart"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after_restart = restarted.elapsed();
    println!("first start served after {warm_up:?}, the restart after {after_restart:?}");
    assert!(
        after_restart < Duration::from_millis(1000),
        "the restart served after {after_restart:?}: the saved OK was not kept"
    );
    second.stop().await;
    let _ = std::fs::remove_file(lb::daemon::states_path(&path));
    remove_config(&path);
}

/// The saved health states are confirmed every second even when nothing changes (the
/// file's time brought forward), so a restart after a crash (SIGKILL: no save at exit) more
/// than 30 s after the last change still finds them fresh. Saved only on changes, they
/// would be stale after a quiet half-minute, and the restart would put every service in
/// Preparing: 503s for RS x P. The soak's crashes check the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saved_health_states_stay_fresh_while_nothing_changes() {
    let (p1, _s1) = named_server("b1").await;
    let (api_port, web_port) = (free_port(), free_port());
    let text = format!(
        "[api]\nlisten = \"127.0.0.1:{api_port}\"\n\n\
         [[health_check]]\nname = \"tcp\"\ntype = \"tcp\"\nrequired_successes = 2\n\n\
         [[backend_service]]\nname = \"b1\"\naddress = \"127.0.0.1\"\nport = {p1}\n\
         health_check = \"tcp\"\n\n\
         [[vservice]]\nname = \"web\"\nkind = \"http\"\naddress = \"127.0.0.1\"\n\
         port = {web_port}\nbackends = [\"b1\"]\n"
    );
    let path = config_file("fresh-states", &text);
    let web: SocketAddr = format!("127.0.0.1:{web_port}").parse().expect("addr");
    let running = start_daemon(&path).await;
    let started = Instant::now();
    while !serves(web).await {
        assert!(started.elapsed() < Duration::from_secs(10), "never OK");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // b1 turned OK just now; nothing changes from here on.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    // What a restart would read: states confirmed within the last 2 s (the daemon brings
    // the file's time forward each second while nothing changes).
    let states =
        lb::daemon::read_states(&lb::daemon::states_path(&path), Duration::from_millis(2000));
    assert_eq!(
        states.get("b1").map(|r| r.state),
        Some(lb::health::HealthState::Ok),
        "after 3.5 quiet seconds the saved states are not fresh: a crash now and a restart \
         27 s later would find them older than 30 s ({states:?})"
    );
    running.stop().await;
    let _ = std::fs::remove_file(lb::daemon::states_path(&path));
    remove_config(&path);
}

/// S-RT3: with `passive_failures = 3` on its profile, a server whose TCP check passes but
/// which answers live requests 503 goes to Error at the third 503 in a row (the transition
/// says "live traffic"), without waiting for a check; its active check brings it back after
/// RS successes (S-HC5), and the next 503s put it out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_rt3_live_5xx_answers_put_a_server_in_error_and_its_check_brings_it_back() {
    let (good, _s1) = named_server("ok").await;
    let (bad, _s2) = server("xx", "503 Service Unavailable").await;
    let web_port = free_port();
    let text = format!(
        r#"[[health_check]]
name = "tcp"
type = "tcp"
period = 1
timeout = 1
required_successes = 2
passive_failures = 3

[[backend_service]]
name = "good"
address = "127.0.0.1"
port = {good}
health_check = "tcp"

[[backend_service]]
name = "bad"
address = "127.0.0.1"
port = {bad}
health_check = "tcp"

[[vservice]]
name = "web"
kind = "http"
address = "127.0.0.1"
port = {web_port}
backends = ["good", "bad"]
"#
    );
    let path = config_file("passive", &text);
    let _ = std::fs::remove_file(lb::daemon::states_path(&path));
    let running = start_daemon(&path).await;
    let engine = running.daemon.engine();
    let state = |name: &str| {
        engine
            .snapshot()
            .state(name)
            .map(|s| s.to_string())
            .unwrap_or_default()
    };
    let started = Instant::now();
    while state("bad") != "OK" || state("good") != "OK" {
        assert!(started.elapsed() < Duration::from_secs(10), "never OK");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let web: SocketAddr = format!("127.0.0.1:{web_port}").parse().expect("addr");
    // Round robin alternates: `bad` has answered three 503s in a row within six requests
    // once the first selections are published.
    let mut third_503 = None;
    let mut fails = 0;
    while third_503.is_none() {
        assert!(started.elapsed() < Duration::from_secs(20), "no 503s seen");
        let answer = get_once(web).await;
        if answer.starts_with("HTTP/1.1 503") && answer.ends_with("xx") {
            fails += 1;
            if fails == 3 {
                third_503 = Some(Instant::now());
            }
        }
    }
    let third_503 = third_503.expect("seen");
    while state("bad") != "Error" {
        assert!(
            third_503.elapsed() < Duration::from_millis(500),
            "Error not decided at once"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let decided = third_503.elapsed();
    let out = engine.transitions("bad");
    let last = out.last().expect("a transition");
    assert_eq!(last.to.to_string(), "Error");
    assert_eq!(
        last.reason,
        "live traffic: 3 consecutive failures, the last: HTTP 503 answer"
    );
    assert_eq!(state("good"), "OK");
    // The TCP check passes: RS = 2 successes, 1 s apart, bring it back.
    while state("bad") != "OK" {
        assert!(
            third_503.elapsed() < Duration::from_secs(5),
            "the active check did not bring it back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let back = third_503.elapsed();
    println!("Error {decided:?} after the third 503, OK again after {back:?}");
    assert!(
        back >= Duration::from_millis(900),
        "RS successes, not one check: {back:?}"
    );
    running.stop().await;
    let _ = std::fs::remove_file(lb::daemon::states_path(&path));
    remove_config(&path);
}

/// S-RT3 without an active check: a `type = "passive"` profile starts OK (nothing would
/// decide a Preparing), two 503s in a row put the server in Error at once, and it is tried
/// again `passive_return` (1.5 s) later; the next 503s put it out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_rt3_a_passive_profile_returns_its_server_after_passive_return() {
    let (bad, _s) = server("xx", "503 Service Unavailable").await;
    let web_port = free_port();
    let text = format!(
        r#"[[health_check]]
name = "live"
type = "passive"
passive_failures = 2
passive_return = 1.5

[[backend_service]]
name = "bad"
address = "127.0.0.1"
port = {bad}
health_check = "live"

[[vservice]]
name = "web"
kind = "http"
address = "127.0.0.1"
port = {web_port}
backends = ["bad"]
"#
    );
    let path = config_file("passive-only", &text);
    let _ = std::fs::remove_file(lb::daemon::states_path(&path));
    let running = start_daemon(&path).await;
    let engine = running.daemon.engine();
    let state = |name: &str| engine.snapshot().state(name).map(|s| s.to_string());
    assert_eq!(state("bad").as_deref(), Some("OK"), "no Preparing");
    let web: SocketAddr = format!("127.0.0.1:{web_port}").parse().expect("addr");
    for round in 0..2 {
        let started = Instant::now();
        let mut from_server = 0;
        while from_server < 2 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "no 503 from the server"
            );
            if get_once(web).await.ends_with("xx") {
                from_server += 1;
            }
        }
        let failed = Instant::now();
        while state("bad").as_deref() != Some("Error") {
            assert!(
                failed.elapsed() < Duration::from_millis(500),
                "round {round}: not Error at once"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        while state("bad").as_deref() != Some("OK") {
            assert!(
                failed.elapsed() < Duration::from_secs(5),
                "round {round}: never tried again"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let back = failed.elapsed();
        println!("round {round}: Error, then OK again {back:?} later");
        assert!(
            back >= Duration::from_millis(1400),
            "passive_return is 1.5 s: {back:?}"
        );
        let last = engine
            .transitions("bad")
            .last()
            .cloned()
            .expect("a transition");
        assert!(
            last.reason.starts_with("passive profile: 1.5 s in Error"),
            "{}",
            last.reason
        );
    }
    running.stop().await;
    let _ = std::fs::remove_file(lb::daemon::states_path(&path));
    remove_config(&path);
}
