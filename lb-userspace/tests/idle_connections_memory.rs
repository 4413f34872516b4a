//! The memory a real `lb run` keeps per idle keep-alive HTTP/1.1 connection, one request
//! made on each: at most what HAProxy keeps (about 0.8 KiB), so that a balancer holding tens
//! of thousands of idle clients costs little more than their sockets. With its buffers and a
//! task sized by the TLS and HTTP/2 paths one would cost about 15 KiB in a release build;
//! with no buffer and a small task, about 1.2 KiB (debug build); parked without a task, as
//! it is, about 0.4 KiB in a debug build (0.2 KiB in release).
//!
//! Measured: the daemon's anonymous resident memory (`RssAnon`: the heap) before and after
//! the connections are open and parked, divided by their number. The bound sits between
//! what a task per idle connection costs and what a parked one does, with room for the
//! heap's other movements.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod daemon;
mod ports;
mod servers;
use daemon::{lb_run, rss_anon};
use ports::free_port;
use servers::named_server;

/// Idle connections opened.
const IDLE: usize = 2000;
/// Anonymous memory one idle connection may keep at most (about 1.2 KiB with a task each,
/// 0.3-0.7 KiB parked, in a debug build).
const PER_IDLE_BOUND_KIB: f64 = 1.0;

/// A new keep-alive connection that made one request and read its whole answer.
async fn one_request(addr: SocketAddr) -> Result<TcpStream, String> {
    let mut c = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    c.write_all(b"GET / HTTP/1.1\r\nHost: web\r\n\r\n")
        .await
        .map_err(|e| format!("send: {e}"))?;
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"ok") {
        let read = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf)).await;
        let n = read
            .map_err(|_| "no answer within 5 s".to_owned())?
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err(format!("closed after {} bytes", got.len()));
        }
        got.extend_from_slice(&buf[..n]);
    }
    if !got.starts_with(b"HTTP/1.1 200") {
        return Err(format!("answered {:?}", String::from_utf8_lossy(&got)));
    }
    Ok(c)
}

/// Raises this process's open-file limit (the daemon inherits it) so both ends of every
/// idle connection fit.
fn raise_nofile(need: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write only the struct passed.
    unsafe {
        assert_eq!(
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim),
            0,
            "getrlimit"
        );
        if lim.rlim_cur < need {
            lim.rlim_cur = need.min(lim.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0, "setrlimit");
        }
    }
    assert!(
        lim.rlim_cur >= need,
        "the open-file limit is {} and this test needs {need}",
        lim.rlim_cur
    );
}

/// 2,000 keep-alive connections, one request each, then idle (parked): each keeps
/// at most 1 KiB of the daemon's heap, and the daemon still answers beside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_hold_no_buffers() {
    raise_nofile(2 * IDLE as u64 + 512);
    let (http, _backend) = named_server("ok").await;
    let (api_port, web_port) = (free_port(), free_port());
    let dir: PathBuf = std::env::temp_dir().join(format!("lb-idle-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("lb.toml");
    let log = dir.join("lb.log");
    std::fs::write(
        &config,
        format!(
            "[api]\nlisten = \"127.0.0.1:{api_port}\"\n\n[proxy]\nworkers = 2\n\n\
             [[health_check]]\nname = \"tcp\"\ntype = \"tcp\"\nperiod = 1\ntimeout = 1\n\n\
             [[backend_service]]\nname = \"web1\"\naddress = \"127.0.0.1\"\nport = {http}\n\
             health_check = \"tcp\"\n\n\
             [[vservice]]\nname = \"web\"\nkind = \"http\"\naddress = \"127.0.0.1\"\n\
             port = {web_port}\nbackends = [\"web1\"]\n"
        ),
    )
    .expect("config");
    let _ = std::fs::remove_file(lb::daemon::states_path(&config));
    let web: SocketAddr = ([127, 0, 0, 1], web_port).into();
    let daemon = lb_run(&config, &log);
    let pid = daemon.0.id();
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    let started = Instant::now();
    while one_request(web).await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "lb run never served; log:\n{}",
            log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Warm-up: the path runs once on both workers, its buffers pooled.
    for _ in 0..3 {
        let mut warm = Vec::new();
        for _ in 0..50 {
            warm.push(one_request(web).await.expect("warm-up request"));
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let before = rss_anon(pid).await;
    let mut idle = Vec::with_capacity(IDLE);
    for i in 0..IDLE {
        let c = one_request(web)
            .await
            .unwrap_or_else(|e| panic!("idle connection {}: {e}; log:\n{}", i + 1, log_text()));
        idle.push(c);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_anon(pid).await;
    let per = after.saturating_sub(before) as f64 / IDLE as f64;
    eprintln!(
        "RssAnon before {before} KiB, with {IDLE} idle connections {after} KiB: {per:.2} KiB each"
    );
    assert!(
        per <= PER_IDLE_BOUND_KIB,
        "each idle connection keeps {per:.2} KiB (bound {PER_IDLE_BOUND_KIB} KiB): \
         {before} KiB before, {after} KiB with {IDLE} open"
    );
    let beside = one_request(web).await;
    assert!(
        beside.is_ok(),
        "a request beside the idle connections failed: {beside:?}"
    );
    drop(idle);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}
