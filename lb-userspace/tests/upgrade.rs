//! Zero-downtime restarts (no rule of docs/behaviour.md covers upgrades): the real `lb`
//! binary is restarted three times with `lb run --upgrade` while clients load an HTTP
//! vService (keep-alive clients and a client opening a connection per request), an L7 TCP
//! vService (a connection per exchange) and a DNS vService (UDP queries) on 127.0.0.1. Each
//! new process takes the listening sockets of the running one, which finishes its open
//! requests and exits. Every request must be answered 200 and every exchange echoed: no
//! refused connection, no connection closed before its answer.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

mod ports;
mod servers;
use ports::free_port;
use servers::named_server;

/// What the clients saw.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
    refused: AtomicU64,
}

impl Tally {
    fn fail(&self, what: &str) {
        if self.failed.fetch_add(1, Ordering::SeqCst) < 5 {
            eprintln!("failure: {what}");
        }
    }
}

/// A keep-alive HTTP/1.1 backend answering `ok`, and a TCP echo backend.
async fn backends() -> (u16, u16) {
    let (http, _) = named_server("ok").await;
    let echo = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let echo_port = echo.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = echo.accept().await {
            tokio::spawn(async move {
                let mut chunk = [0u8; 4096];
                while let Ok(n) = conn.read(&mut chunk).await {
                    if n == 0 || conn.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (http, echo_port)
}

/// Reads one answer to GET: Ok(keep the connection) when it is a 200 with body `ok`.
async fn read_answer(conn: &mut TcpStream) -> Result<bool, String> {
    let mut got = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n")
            && got.len() >= end + 4 + 2
        {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            if !head.starts_with("http/1.1 200") || &got[end + 4..end + 6] != b"ok" {
                return Err(String::from_utf8_lossy(&got).into_owned());
            }
            return Ok(!head.contains("connection: close"));
        }
        match tokio::time::timeout(Duration::from_secs(10), conn.read(&mut chunk)).await {
            Ok(Ok(0)) => return Err(format!("closed after {} bytes of answer", got.len())),
            Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) => return Err(format!("read: {e}")),
            Err(_) => return Err("no answer in 10 s".into()),
        }
    }
}

/// Connects, counting a refusal.
async fn connect(addr: SocketAddr, tally: &Tally) -> Option<TcpStream> {
    match TcpStream::connect(addr).await {
        Ok(conn) => Some(conn),
        Err(e) => {
            tally.refused.fetch_add(1, Ordering::SeqCst);
            eprintln!("connect to {addr}: {e}");
            tokio::time::sleep(Duration::from_millis(10)).await;
            None
        }
    }
}

/// GET / back to back on one connection, reconnecting when an answer says it closes.
async fn keep_alive_client(addr: SocketAddr, tally: Arc<Tally>, stop: watch::Receiver<bool>) {
    let mut conn = None;
    while !*stop.borrow() {
        if conn.is_none() {
            conn = connect(addr, &tally).await;
            continue;
        }
        let Some(c) = conn.as_mut() else { continue };
        if let Err(e) = c.write_all(b"GET / HTTP/1.1\r\nHost: web\r\n\r\n").await {
            tally.fail(&format!("keep-alive write: {e}"));
            conn = None;
            continue;
        }
        match read_answer(c).await {
            Ok(keep) => {
                tally.ok.fetch_add(1, Ordering::SeqCst);
                if !keep {
                    conn = None;
                }
            }
            Err(e) => {
                tally.fail(&format!("keep-alive: {e}"));
                conn = None;
            }
        }
    }
}

/// A new connection per GET.
async fn new_connection_client(addr: SocketAddr, tally: Arc<Tally>, stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        let Some(mut conn) = connect(addr, &tally).await else {
            continue;
        };
        let request = b"GET / HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n";
        let answered = match conn.write_all(request).await {
            Ok(()) => read_answer(&mut conn).await,
            Err(e) => Err(format!("write: {e}")),
        };
        match answered {
            Ok(_) => tally.ok.fetch_add(1, Ordering::SeqCst),
            Err(e) => {
                tally.fail(&format!("new connection: {e}"));
                0
            }
        };
    }
}

/// A new L7 TCP connection per exchange: a line out, the same line back.
async fn tcp_client(addr: SocketAddr, tally: Arc<Tally>, stop: watch::Receiver<bool>) {
    let mut n = 0u64;
    while !*stop.borrow() {
        let Some(mut conn) = connect(addr, &tally).await else {
            continue;
        };
        n += 1;
        let line = format!("exchange {n}\n");
        let mut back = vec![0u8; line.len()];
        let echoed = async {
            conn.write_all(line.as_bytes()).await?;
            conn.read_exact(&mut back).await?;
            Ok::<_, std::io::Error>(())
        };
        match tokio::time::timeout(Duration::from_secs(10), echoed).await {
            Ok(Ok(())) if back == line.as_bytes() => {
                tally.ok.fetch_add(1, Ordering::SeqCst);
            }
            other => tally.fail(&format!("l7 tcp exchange {n}: {other:?}")),
        }
    }
}

/// One GET on a new connection is answered.
async fn http_serves(addr: SocketAddr) -> bool {
    let Ok(mut conn) = TcpStream::connect(addr).await else {
        return false;
    };
    let get = b"GET / HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n";
    conn.write_all(get).await.is_ok() && read_answer(&mut conn).await.is_ok()
}

/// One exchange on a new L7 TCP connection is echoed.
async fn tcp_echoes(addr: SocketAddr) -> bool {
    let Ok(mut conn) = TcpStream::connect(addr).await else {
        return false;
    };
    let mut back = [0u8; 5];
    conn.write_all(b"ping\n").await.is_ok()
        && conn.read_exact(&mut back).await.is_ok()
        && &back == b"ping\n"
}

/// A DNS query for www.gslb.test (A) with id `id`, in wire form.
fn dns_query(id: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in ["www", "gslb", "test"] {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// How often the DNS client sends a burst of queries during the upgrades.
const DNS_EVERY: Duration = Duration::from_millis(20);
/// Queries per burst: several in flight at any time, so a process that stops has some read
/// and not yet answered.
const DNS_BURST: u16 = 10;
/// How long a DNS query may wait for its answer; there is no second try.
const DNS_PATIENCE: Duration = Duration::from_secs(1);
/// Most queries the DNS client sends: a bound on the load (500 a second; the three upgrades
/// take a few seconds).
const DNS_MOST: u16 = 30_000;

/// UDP queries in bursts 20 ms apart without waiting for the answers (so some are always in
/// flight while a process stops), each to be answered (by id) within 1 s, and never sent
/// twice: an upgrade must lose no DNS query, as the old process answers every datagram it
/// read before it exits and leaves the rest to the new one on the shared socket.
async fn dns_client(addr: SocketAddr, tally: Arc<Tally>, stop: watch::Receiver<bool>) {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let mut pending: HashMap<u16, Instant> = HashMap::new();
    let mut tick = tokio::time::interval(DNS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent = 0u16;
    let mut buf = [0u8; 512];
    loop {
        let now = Instant::now();
        pending.retain(|id, at| {
            let late = now.duration_since(*at) > DNS_PATIENCE;
            if late {
                tally.fail(&format!("dns query {id}: no answer within 1 s"));
            }
            !late
        });
        let sending = !*stop.borrow() && sent < DNS_MOST;
        if !sending && pending.is_empty() {
            return;
        }
        tokio::select! {
            _ = tick.tick(), if sending => {
                for _ in 0..DNS_BURST {
                    sent += 1;
                    match socket.send_to(&dns_query(sent), addr).await {
                        Ok(_) => {
                            pending.insert(sent, Instant::now());
                        }
                        Err(e) => tally.fail(&format!("dns query {sent}: send: {e}")),
                    }
                }
            }
            got = socket.recv(&mut buf) => {
                let Ok(n) = got else { continue };
                let id = u16::from_be_bytes([buf[0], buf[1]]);
                // An answer: QR set, NOERROR.
                let answer = n >= 12 && buf[2] & 0x80 != 0 && buf[3] & 0x0f == 0;
                if pending.remove(&id).is_some() {
                    match answer {
                        true => tally.ok.fetch_add(1, Ordering::SeqCst),
                        false => {
                            tally.fail(&format!("dns query {id}: answer {:?}", &buf[..n]));
                            0
                        }
                    };
                }
            }
            // Wakes the expiry above while nothing else happens.
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// `lb run` on `config`, logging to `log`.
fn lb_run(config: &Path, upgrade: bool, log: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("log file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lb"));
    cmd.arg("run")
        .arg("--config")
        .arg(config)
        .args(["--drain-timeout", "10"]);
    if upgrade {
        cmd.arg("--upgrade");
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("lb run starts")
}

/// Waits for `child` to exit within `limit`.
fn exits_within(child: &mut Child, limit: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn stop(mut child: Child) {
    // SAFETY: signalling a child this test spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    if !exits_within(&mut child, Duration::from_secs(15)) {
        let _ = child.kill();
    }
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_upgrades_under_load_fail_no_request_and_refuse_no_connection() {
    let (http, echo) = backends().await;
    let (api_port, web_port, tcp_port, dns_port) =
        (free_port(), free_port(), free_port(), free_port());
    let dir: PathBuf = std::env::temp_dir().join(format!("lb-upgrade-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("lb.toml");
    let log = dir.join("lb.log");
    std::fs::write(
        &config,
        format!(
            r#"[api]
listen = "127.0.0.1:{api_port}"

[[health_check]]
name = "tcp"
type = "tcp"
period = 1
timeout = 1

[[backend_service]]
name = "web1"
address = "127.0.0.1"
port = {http}
health_check = "tcp"

[[backend_service]]
name = "echo1"
address = "127.0.0.1"
port = {echo}
health_check = "tcp"

[[vservice]]
name = "web"
kind = "http"
address = "127.0.0.1"
port = {web_port}
backends = ["web1"]

[[vservice]]
name = "tcp"
kind = "l7-tcp"
address = "127.0.0.1"
port = {tcp_port}
backends = ["echo1"]

[[dns_vservice]]
name = "g"
address = "127.0.0.1"
port = {dns_port}
zone = "gslb.test"
poll_period = 0.5
# The DNS client sends 500 queries a second from one address.
rate_limit = 0

[[dns_vservice.record]]
name = "www"

[[dns_vservice.record.site]]
name = "here"
address = "192.0.2.1"
api = "http://127.0.0.1:{api_port}"
vservice = "web"
"#
        ),
    )
    .expect("config");
    let _ = std::fs::remove_file(lb::daemon::states_path(&config));
    let web: SocketAddr = ([127, 0, 0, 1], web_port).into();
    let tcp: SocketAddr = ([127, 0, 0, 1], tcp_port).into();
    let dns: SocketAddr = ([127, 0, 0, 1], dns_port).into();

    let mut current = lb_run(&config, false, &log);
    let started = Instant::now();
    // Both vServices serve once their backends' first checks passed (RS = 3).
    while !(http_serves(web).await && tcp_echoes(tcp).await) {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "lb run never served; log: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let tally = Arc::new(Tally::default());
    let (stop_load, stop_rx) = watch::channel(false);
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(tokio::spawn(keep_alive_client(
            web,
            tally.clone(),
            stop_rx.clone(),
        )));
    }
    clients.push(tokio::spawn(new_connection_client(
        web,
        tally.clone(),
        stop_rx.clone(),
    )));
    for _ in 0..2 {
        clients.push(tokio::spawn(tcp_client(
            tcp,
            tally.clone(),
            stop_rx.clone(),
        )));
    }
    let dns_tally = Arc::new(Tally::default());
    clients.push(tokio::spawn(dns_client(
        dns,
        dns_tally.clone(),
        stop_rx.clone(),
    )));
    tokio::time::sleep(Duration::from_millis(700)).await;
    for round in 1..=3 {
        let before = tally.ok.load(Ordering::SeqCst);
        let next = lb_run(&config, true, &log);
        let mut old = std::mem::replace(&mut current, next);
        let drained =
            tokio::task::spawn_blocking(move || exits_within(&mut old, Duration::from_secs(20)))
                .await
                .expect("wait");
        assert!(
            drained,
            "round {round}: the old lb run did not exit; log: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(700)).await;
        let served = tally.ok.load(Ordering::SeqCst) - before;
        println!("round {round}: {served} answered across the upgrade");
        assert!(served > 50, "round {round}: the load ran ({served})");
    }
    let _ = stop_load.send(true);
    for c in clients {
        c.await.expect("client");
    }
    stop(current);
    let (ok, failed, refused) = (
        tally.ok.load(Ordering::SeqCst),
        tally.failed.load(Ordering::SeqCst),
        tally.refused.load(Ordering::SeqCst),
    );
    let (dns_ok, dns_lost) = (
        dns_tally.ok.load(Ordering::SeqCst),
        dns_tally.failed.load(Ordering::SeqCst),
    );
    println!(
        "{ok} answered, {failed} failed, {refused} refused over three upgrades; \
         DNS: {dns_ok} answered, {dns_lost} lost"
    );
    assert!(dns_ok > 100, "the DNS load ran ({dns_ok} answered)");
    assert_eq!(
        dns_lost, 0,
        "every DNS query answered within 1 s on its only try across the upgrades"
    );
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        (failed, refused),
        (0, 0),
        "every request answered across the upgrades; log:\n{text}"
    );
    assert_eq!(
        text.matches("took over from the previous lb run").count(),
        3,
        "{text}"
    );
    let _ = std::fs::remove_file(lb::daemon::states_path(&config));
    let _ = std::fs::remove_dir_all(&dir);
}
