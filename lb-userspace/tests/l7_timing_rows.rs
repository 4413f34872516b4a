//! S-RF3's rows measured end to end, five times each: the real daemon (HTTP checks at the
//! defaults P = 1 s, T = 1 s, RS = 3, RF = 2, the L7 reflection) serves five HTTP vServices,
//! each with one server of its own on 127.0.0.1, and a client polls each vService every
//! 20 ms. The five servers change together (port closed, HTTP 500, silent, then back), and
//! each row is the time from the change until the client sees the vService's answer change:
//! the proxy's own 503 once the server left, the server's 200 once it is back.
//! The rows asserted are S-RF3's: closed port or HTTP 500 out within 4.0 s, a silent
//! server out in 3-6 s, back within 6 s.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

mod ports;
use ports::free_port;

/// How many servers (and measurements per row).
const RUNS: usize = 5;

/// What a scripted server does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// 200 `ok`.
    Ok,
    /// 500 `err`.
    Error,
    /// Accepts and reads, never answers.
    Silent,
}

/// One scripted server on a fixed port; closing drops its listener (connections refused).
struct Server {
    port: u16,
    mode: watch::Sender<Mode>,
    task: Option<JoinHandle<()>>,
}

impl Server {
    async fn start(port: u16) -> Server {
        let mut server = Server {
            port,
            mode: watch::Sender::new(Mode::Ok),
            task: None,
        };
        server.open().await;
        server
    }

    async fn open(&mut self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port))
            .await
            .expect("bind the server's port");
        let mode = self.mode.subscribe();
        self.task = Some(tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mode = *mode.borrow();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut chunk = [0u8; 2048];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let answer: &[u8] = match mode {
                        Mode::Ok => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        Mode::Error => b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 3\r\nConnection: close\r\n\r\nerr",
                        Mode::Silent => {
                            tokio::time::sleep(Duration::from_secs(60)).await;
                            return;
                        }
                    };
                    let _ = conn.write_all(answer).await;
                });
            }
        }));
    }

    fn close(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.close();
    }
}

/// Every server answers as `mode` from its next connection on.
fn set_all(servers: &[Server], mode: Mode) {
    for server in servers {
        server.mode.send_replace(mode);
    }
}

/// What the client got from a vService.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    /// The server's 200.
    Served,
    /// The proxy's 503: no server to send to.
    Unavailable,
    /// Anything else (the server's 500, a 502, no answer within 200 ms).
    Other,
}

async fn poll(addr: SocketAddr) -> Seen {
    let ask = async {
        let mut conn = TcpStream::connect(addr).await.ok()?;
        let get = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
        conn.write_all(get).await.ok()?;
        let mut answer = Vec::new();
        conn.read_to_end(&mut answer).await.ok()?;
        Some(answer)
    };
    match tokio::time::timeout(Duration::from_millis(200), ask).await {
        Ok(Some(a)) if a.starts_with(b"HTTP/1.1 200") && a.ends_with(b"ok") => Seen::Served,
        Ok(Some(a)) if a.starts_with(b"HTTP/1.1 503") => Seen::Unavailable,
        _ => Seen::Other,
    }
}

/// Polls every vService from `t0` until each shows `wanted`; the time each took.
async fn until_each(addrs: &[SocketAddr], wanted: Seen, t0: Instant) -> Vec<Duration> {
    let watches = addrs.iter().map(|&addr| async move {
        loop {
            if poll(addr).await == wanted {
                return t0.elapsed();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{addr} never {wanted:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let mut times = Vec::new();
    for handle in watches.map(tokio::spawn).collect::<Vec<_>>() {
        times.push(handle.await.expect("poller"));
    }
    times
}

fn secs(times: &[Duration]) -> Vec<String> {
    times
        .iter()
        .map(|t| format!("{:.2}", t.as_secs_f64()))
        .collect()
}

/// Asserts each time lies in [low, high] seconds and prints the row.
fn row(name: &str, times: &[Duration], low: f64, high: f64) {
    println!(
        "{name}: {} s (table: {low}-{high} s)",
        secs(times).join(", ")
    );
    for t in times {
        let t = t.as_secs_f64();
        assert!(
            (low..=high).contains(&t),
            "{name}: {t:.2} s is outside {low}-{high} s"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_rf3_each_row_holds_five_times_end_to_end() {
    let mut servers = Vec::new();
    for _ in 0..RUNS {
        servers.push(Server::start(free_port()).await);
    }
    let mut text =
        String::from("[[health_check]]\nname = \"web\"\ntype = \"http\"\npath = \"/health\"\n\n");
    let mut addrs = Vec::new();
    for (i, server) in servers.iter().enumerate() {
        let port = free_port();
        addrs.push(SocketAddr::from(([127, 0, 0, 1], port)));
        text += &format!(
            "[[backend_service]]\nname = \"s{i}\"\naddress = \"127.0.0.1\"\nport = {}\n\
             health_check = \"web\"\n\n[[vservice]]\nname = \"v{i}\"\nkind = \"http\"\n\
             address = \"127.0.0.1\"\nport = {port}\nbackends = [\"s{i}\"]\n\n",
            server.port
        );
    }
    let dir = std::env::temp_dir().join(format!("lb-rows-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("lb.toml");
    std::fs::write(&path, text).expect("config");
    let _ = std::fs::remove_file(lb::daemon::states_path(&path));
    let cfg = lb::config::load(&path).expect("valid config");
    let running = lb::daemon::start(None, cfg, path.clone())
        .await
        .expect("daemon starts");
    until_each(&addrs, Seen::Served, Instant::now()).await;

    // A closed port: each check is refused at once, RF = 2 of them decide.
    let t0 = Instant::now();
    servers.iter_mut().for_each(Server::close);
    row(
        "closed port, out",
        &until_each(&addrs, Seen::Unavailable, t0).await,
        0.0,
        4.0,
    );
    let t1 = Instant::now();
    for server in &mut servers {
        server.open().await;
    }
    let back = until_each(&addrs, Seen::Served, t1).await;
    row("port open again, back", &back, 0.0, 6.0);

    // HTTP 500.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t0 = Instant::now();
    set_all(&servers, Mode::Error);
    row(
        "HTTP 500, out",
        &until_each(&addrs, Seen::Unavailable, t0).await,
        0.0,
        4.0,
    );
    let t1 = Instant::now();
    set_all(&servers, Mode::Ok);
    row(
        "HTTP 200 again, back",
        &until_each(&addrs, Seen::Served, t1).await,
        0.0,
        6.0,
    );

    // Silent: each check lasts T = 1 s, RF = 2 of them decide.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t0 = Instant::now();
    set_all(&servers, Mode::Silent);
    row(
        "silent, out",
        &until_each(&addrs, Seen::Unavailable, t0).await,
        2.9,
        6.0,
    );
    let t1 = Instant::now();
    set_all(&servers, Mode::Ok);
    row(
        "answering again, back",
        &until_each(&addrs, Seen::Served, t1).await,
        0.0,
        6.0,
    );

    running.stop().await;
    let _ = std::fs::remove_file(lb::daemon::states_path(&path));
    let _ = std::fs::remove_dir_all(&dir);
}
