//! The soak's backend servers, one set per backend namespace, on that namespace's runtime.
//! Each answers with its own name so the clients know who served them:
//! - HTTP on [`HTTP_PORT`]: `GET /health` answers 200 `ok`, or 500 while the health fault
//!   holds; any other request 200 with the body `<name>\n`; keep-alive honoured;
//! - TCP on the L7 TCP, NAT and DSR ports: the first line is answered `<name>\n`, every
//!   later byte is echoed (long-lived streams);
//! - UDP on [`UDP_PORT`]: every datagram is answered `<name>\n`.
//!
//! [`Backend::kill`] stops them like a killed process (listeners closed, open connections
//! closed); [`Backend::start`] starts them again. Every connection ends when it is idle for
//! [`IDLE`] or when the backend is killed.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::watch;

use crate::config::{DSR_PORT, HTTP_PORT, NAT_PORT, STREAM_BACKENDS, TCP_PORT, UDP_PORT};
use crate::rt::NsRuntime;

/// A connection idle this long is closed.
const IDLE: Duration = Duration::from_secs(60);
/// Longest request head or first line read.
const MAX_HEAD: usize = 16 * 1024;

/// One backend namespace's servers.
pub struct Backend {
    /// `b1`, `b2`, ...
    pub name: String,
    rt: NsRuntime,
    health_ok: Arc<AtomicBool>,
    alive: Mutex<Option<watch::Sender<()>>>,
}

impl Backend {
    /// The servers of backend `n` (1-based), not started yet.
    pub fn new(n: usize, rt: NsRuntime) -> Backend {
        Backend {
            name: format!("b{n}"),
            rt,
            health_ok: Arc::new(AtomicBool::new(true)),
            alive: Mutex::new(None),
        }
    }

    fn index(&self) -> usize {
        self.name[1..].parse().unwrap_or(0)
    }

    /// Binds every server of this backend; returns once all listen.
    pub fn start(&self) -> Result<()> {
        let (tx, rx) = watch::channel(());
        let name = self.name.clone();
        let health = self.health_ok.clone();
        let streams = self.index() <= STREAM_BACKENDS;
        let bound = self.rt.run(Duration::from_secs(5), async move {
            let any = |port| SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
            let http = TcpListener::bind(any(HTTP_PORT)).await?;
            tokio::spawn(accept(http, rx.clone(), name.clone(), Some(health)));
            if streams {
                for port in [TCP_PORT, NAT_PORT, DSR_PORT] {
                    let l = TcpListener::bind(any(port)).await?;
                    tokio::spawn(accept(l, rx.clone(), name.clone(), None));
                }
                let udp = UdpSocket::bind(any(UDP_PORT)).await?;
                tokio::spawn(udp_loop(udp, rx, name));
            }
            Ok::<_, std::io::Error>(())
        })?;
        bound.with_context(|| format!("starting the servers of {}", self.name))?;
        if let Ok(mut a) = self.alive.lock() {
            *a = Some(tx);
        }
        Ok(())
    }

    /// Stops every server and closes every open connection, like a killed process.
    pub fn kill(&self) {
        if let Ok(mut a) = self.alive.lock() {
            a.take();
        }
        // The tasks see the closed channel on their thread; give them a moment.
        std::thread::sleep(Duration::from_millis(50));
    }

    /// Makes `/health` answer 200 (`ok = true`) or 500.
    pub fn set_health(&self, ok: bool) {
        self.health_ok.store(ok, Ordering::SeqCst);
    }
}

/// Accepts until the backend is killed; HTTP when `health` is given, else line-then-echo.
async fn accept(
    listener: TcpListener,
    mut alive: watch::Receiver<()>,
    name: String,
    health: Option<Arc<AtomicBool>>,
) {
    loop {
        tokio::select! {
            _ = alive.changed() => return,
            got = listener.accept() => {
                let Ok((conn, _)) = got else { continue };
                let mut alive = alive.clone();
                let name = name.clone();
                let health = health.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = alive.changed() => {}
                        _ = serve(conn, &name, health) => {}
                    }
                });
            }
        }
    }
}

async fn serve(conn: TcpStream, name: &str, health: Option<Arc<AtomicBool>>) {
    let _ = match health {
        Some(h) => http(conn, name, &h).await,
        None => echo(conn, name).await,
    };
}

/// Reads until `buf` holds `end`; Ok(None) on EOF, idle or an over-long head.
async fn read_until(conn: &mut TcpStream, buf: &mut Vec<u8>, end: &[u8]) -> Result<Option<usize>> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(p) = buf.windows(end.len()).position(|w| w == end) {
            return Ok(Some(p));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
        match tokio::time::timeout(IDLE, conn.read(&mut chunk)).await {
            Ok(Ok(0)) | Err(_) => return Ok(None),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) => return Err(e.into()),
        }
    }
}

async fn http(mut conn: TcpStream, name: &str, health: &AtomicBool) -> Result<()> {
    let mut buf = Vec::new();
    loop {
        let Some(end) = read_until(&mut conn, &mut buf, b"\r\n\r\n").await? else {
            return Ok(());
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end + 4);
        let target = head.split(' ').nth(1).unwrap_or("/").to_owned();
        let mut body_len = 0usize;
        let mut close = false;
        for line in head.lines().skip(1) {
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    body_len = v.trim().parse().unwrap_or(0);
                } else if k.eq_ignore_ascii_case("connection") {
                    close = v.trim().eq_ignore_ascii_case("close");
                }
            }
        }
        let mut chunk = [0u8; 4096];
        while buf.len() < body_len {
            match tokio::time::timeout(IDLE, conn.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => return Ok(()),
            }
        }
        buf.drain(..body_len);
        let (status, body) = if target == "/health" {
            if health.load(Ordering::SeqCst) {
                ("200 OK", "ok\n".to_owned())
            } else {
                ("500 Internal Server Error", "failing\n".to_owned())
            }
        } else {
            ("200 OK", format!("{name}\n"))
        };
        let answer = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{}\r\n{body}",
            body.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        conn.write_all(answer.as_bytes()).await?;
        if close {
            return Ok(());
        }
    }
}

async fn echo(mut conn: TcpStream, name: &str) -> Result<()> {
    let mut buf = Vec::new();
    let Some(end) = read_until(&mut conn, &mut buf, b"\n").await? else {
        return Ok(());
    };
    conn.write_all(format!("{name}\n").as_bytes()).await?;
    buf.drain(..=end);
    if !buf.is_empty() {
        conn.write_all(&buf).await?;
    }
    let mut chunk = [0u8; 4096];
    loop {
        match tokio::time::timeout(IDLE, conn.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => conn.write_all(&chunk[..n]).await?,
            _ => return Ok(()),
        }
    }
}

async fn udp_loop(socket: UdpSocket, mut alive: watch::Receiver<()>, name: String) {
    let answer = format!("{name}\n");
    let mut buf = [0u8; 2048];
    loop {
        tokio::select! {
            _ = alive.changed() => return,
            got = socket.recv_from(&mut buf) => {
                if let Ok((_, peer)) = got {
                    let _ = socket.send_to(answer.as_bytes(), peer).await;
                }
            }
        }
    }
}
