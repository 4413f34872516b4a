//! Issue 19 (packaging, systemd `Type=notify`): a REAL `lb run` (no XDP; an HTTP vService
//! on 127.0.0.1) started with NOTIFY_SOCKET set to a datagram socket this test binds:
//! - READY=1 is its first message, and at that moment the API and the vService answer;
//! - SIGHUP sends RELOADING=1 (with MONOTONIC_USEC) then READY=1, and a refused reload
//!   says so in STATUS= while the daemon serves on;
//! - SIGTERM sends STOPPING=1 and the daemon exits 0;
//! - a NOTIFY_SOCKET nobody listens on changes nothing but a warning.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixDatagram};

mod ports;
mod servers;
use ports::free_port;
use servers::named_server;

/// A directory for the config, the log and the socket; removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("lb-notify-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        // The health decisions the daemon saved at exit, named after its config path.
        let flat = self
            .0
            .join("lb.toml")
            .to_string_lossy()
            .trim_matches('/')
            .replace('/', "-");
        let _ = std::fs::remove_file(format!("/run/lb/{flat}.states.json"));
    }
}

/// The daemon; stopped when dropped (SIGTERM, so it removes its hand-over socket, then
/// SIGKILL after 5 s). A test that passed has already seen it exit.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.0.try_wait() {
            return;
        }
        self.signal(libc::SIGTERM);
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Daemon {
    fn signal(&self, sig: i32) {
        // SAFETY: signalling a child this test spawned.
        unsafe {
            libc::kill(self.0.id() as i32, sig);
        }
    }
}

/// Writes a config with the API on `api` and an HTTP vService `web` on `web` over one
/// unchecked backend on `backend_port`.
fn write_config(path: &Path, api: SocketAddr, web: SocketAddr, backend_port: u16) {
    let text = format!(
        "[api]\nlisten = \"{api}\"\n[reflection]\nl7_delay = 0.0\n\
         [[backend_service]]\nname = \"b1\"\naddress = \"127.0.0.1\"\nport = {backend_port}\n\
         [[vservice]]\nname = \"web\"\nkind = \"http\"\naddress = \"{}\"\nport = {}\n\
         backends = [\"b1\"]\n",
        web.ip(),
        web.port()
    );
    std::fs::write(path, text).expect("write config");
}

/// `lb run` on `config` with NOTIFY_SOCKET = `socket`, logging to `log`.
fn lb_run(config: &Path, socket: &Path, log: &Path) -> Daemon {
    let bin = std::env::var("LB_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_lb").to_owned());
    let log = std::fs::File::create(log).expect("log file");
    let child = Command::new(bin)
        .args(["run", "--config"])
        .arg(config)
        .env("NOTIFY_SOCKET", socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("lb run starts");
    Daemon(child)
}

/// The next datagram, within `limit`.
async fn next_message(socket: &UnixDatagram, limit: Duration, log: &Path) -> String {
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(limit, socket.recv(&mut buf)).await {
        Ok(Ok(n)) => String::from_utf8_lossy(&buf[..n]).into_owned(),
        Ok(Err(e)) => panic!("receiving a notification: {e}"),
        Err(_) => panic!(
            "no notification within {limit:?}; the daemon's log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        ),
    }
}

/// One GET on a new connection that closes after the answer: the answer's status line.
async fn get(addr: SocketAddr, path: &str) -> String {
    let mut conn = match TcpStream::connect(addr).await {
        Ok(conn) => conn,
        Err(e) => return format!("connect: {e}"),
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: lb\r\nConnection: close\r\n\r\n");
    if let Err(e) = conn.write_all(request.as_bytes()).await {
        return format!("send: {e}");
    }
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

fn lines(message: &str) -> Vec<&str> {
    message.lines().collect()
}

/// Issue 19: READY=1 only once the API and the listeners answer; RELOADING=1/READY=1
/// around SIGHUP (with the refusal in STATUS= when the file is bad); STOPPING=1 at SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lb_run_tells_systemd_ready_reloading_and_stopping() {
    let dir = Dir::new("ready");
    let (backend_port, _backend) = named_server("b1").await;
    let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = dir.0.join("lb.toml");
    write_config(&config, api, web, backend_port);
    let socket_path = dir.0.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind the notify socket");
    let log = dir.0.join("lb.log");
    let mut daemon = lb_run(&config, &socket_path, &log);

    let first = next_message(&socket, Duration::from_secs(30), &log).await;
    assert!(
        lines(&first).contains(&"READY=1"),
        "the first notification is not READY=1: {first:?}"
    );
    // At this moment, without waiting: the API and the vService's listener answer.
    let status = get(api, "/api/v1/status").await;
    assert!(
        status.starts_with("HTTP/1.1 200"),
        "the API at READY=1: {status}"
    );
    let served = get(web, "/").await;
    assert!(
        served.starts_with("HTTP/1.1 200"),
        "the vService at READY=1: {served}"
    );

    daemon.signal(libc::SIGHUP);
    let reloading = next_message(&socket, Duration::from_secs(10), &log).await;
    assert!(lines(&reloading).contains(&"RELOADING=1"), "{reloading:?}");
    assert!(
        reloading.contains("MONOTONIC_USEC="),
        "RELOADING=1 without MONOTONIC_USEC: {reloading:?}"
    );
    let ready = next_message(&socket, Duration::from_secs(10), &log).await;
    assert!(lines(&ready).contains(&"READY=1"), "{ready:?}");
    assert!(lines(&ready).contains(&"STATUS=serving"), "{ready:?}");

    std::fs::write(&config, "[api]\nlisten = 5\n").expect("break the config");
    daemon.signal(libc::SIGHUP);
    let reloading = next_message(&socket, Duration::from_secs(10), &log).await;
    assert!(lines(&reloading).contains(&"RELOADING=1"), "{reloading:?}");
    let refused = next_message(&socket, Duration::from_secs(10), &log).await;
    assert!(lines(&refused).contains(&"READY=1"), "{refused:?}");
    assert!(
        refused.contains("STATUS=serving the previous configuration; the reload failed"),
        "{refused:?}"
    );
    let status = get(api, "/api/v1/status").await;
    assert!(
        status.starts_with("HTTP/1.1 200"),
        "after a refused reload: {status}"
    );

    daemon.signal(libc::SIGTERM);
    let stopping = next_message(&socket, Duration::from_secs(10), &log).await;
    assert!(lines(&stopping).contains(&"STOPPING=1"), "{stopping:?}");
    let exit = tokio::task::spawn_blocking(move || {
        let status = daemon.0.wait();
        (daemon, status)
    });
    let (_daemon, status) = tokio::time::timeout(Duration::from_secs(15), exit)
        .await
        .expect("lb run exits after SIGTERM")
        .expect("join");
    assert!(status.expect("wait").success(), "lb run's exit status");
}

/// Issue 19: a NOTIFY_SOCKET that nobody listens on (a daemon started by hand from a
/// shell that had one) costs a warning, not the daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_notify_socket_is_only_a_warning() {
    let dir = Dir::new("dead");
    let (backend_port, _backend) = named_server("b1").await;
    let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = dir.0.join("lb.toml");
    write_config(&config, api, web, backend_port);
    let log = dir.0.join("lb.log");
    let _daemon = lb_run(&config, &dir.0.join("nobody.sock"), &log);
    let started = std::time::Instant::now();
    let mut status = String::new();
    while started.elapsed() < Duration::from_secs(30) {
        status = get(api, "/api/v1/status").await;
        if status.starts_with("HTTP/1.1 200") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(status.starts_with("HTTP/1.1 200"), "the API: {status}");
    assert!(
        get(web, "/").await.starts_with("HTTP/1.1 200"),
        "the vService"
    );
    // The warning is written right after the listeners are up, before the loop.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains("cannot tell systemd the daemon's state"),
        "no warning in the log:\n{text}"
    );
}
