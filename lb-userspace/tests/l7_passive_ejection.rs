//! Passive health's ejection cap against a REAL daemon (no XDP): four mains whose TCP check
//! passes but which answer every live request 503. Runs of failures put at most half of them
//! (`max_ejection_percent`, default 50) in Error at once (S-RT3); when their active check
//! fails, all four go.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod ports;
mod servers;
use ports::free_port;
use servers::server;

/// Requests sent while passive health decides, at most.
const REQUESTS: usize = 300;

/// One GET / on a new connection (the answer is not looked at: every server says 503).
async fn get(addr: SocketAddr) {
    if let Ok(mut conn) = TcpStream::connect(addr).await {
        let request = b"GET / HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n";
        if conn.write_all(request).await.is_ok() {
            let _ = conn.read_to_end(&mut Vec::new()).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_rt3_passive_failures_put_at_most_half_of_the_mains_in_error_the_active_check_all() {
    let names = ["s1", "s2", "s3", "s4"];
    let mut servers = Vec::new();
    let mut text = String::from(
        "[[health_check]]\nname = \"tcp\"\ntype = \"tcp\"\nperiod = 1\ntimeout = 1\n\
         required_successes = 2\nrequired_failures = 2\npassive_failures = 2\n\n",
    );
    for name in names {
        let (port, task) = server(name, "503 Service Unavailable").await;
        servers.push(task);
        text += &format!(
            "[[backend_service]]\nname = \"{name}\"\naddress = \"127.0.0.1\"\nport = {port}\n\
             health_check = \"tcp\"\n\n"
        );
    }
    let web_port = free_port();
    text += &format!(
        "[[vservice]]\nname = \"web\"\nkind = \"http\"\naddress = \"127.0.0.1\"\n\
         port = {web_port}\nbackends = [\"s1\", \"s2\", \"s3\", \"s4\"]\n"
    );
    let dir = std::env::temp_dir().join(format!("lb-ejection-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("lb.toml");
    std::fs::write(&path, &text).expect("write config");
    let cfg = lb::config::load(&path).expect("valid config");
    let running = lb::daemon::start(None, cfg, path.clone())
        .await
        .expect("daemon starts");
    let engine = running.daemon.engine();
    let count = |state: &str| {
        let snapshot = engine.snapshot();
        names
            .iter()
            .filter(|n| snapshot.state(n).is_some_and(|s| s.to_string() == state))
            .count()
    };
    let started = Instant::now();
    while count("OK") < 4 {
        assert!(started.elapsed() < Duration::from_secs(10), "never all OK");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Live traffic: every answer is a 503, two in a row put a server in Error, unless the
    // cap holds it back.
    let web: SocketAddr = format!("127.0.0.1:{web_port}").parse().expect("addr");
    let load = Instant::now();
    let mut most = 0;
    for _ in 0..REQUESTS {
        if load.elapsed() > Duration::from_secs(4) {
            break;
        }
        get(web).await;
        let errors = count("Error");
        assert!(
            errors <= 2,
            "{errors} of 4 mains in Error by passive failures"
        );
        most = most.max(errors);
    }
    assert_eq!(most, 2, "passive health put two mains in Error");
    // The active check is not capped: with the servers gone, every main goes.
    for task in &servers {
        task.abort();
    }
    let gone = Instant::now();
    while count("Error") < 4 {
        assert!(
            gone.elapsed() < Duration::from_secs(8),
            "the active check did not put all four in Error"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    running.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
