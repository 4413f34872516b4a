//! The bounded clients that load every vService from the client namespace: HTTP keep-alive,
//! new-connection and cookie clients on the Default list and on the `api` set, long-lived
//! echo streams and new connections on the L7 TCP, NAT and DSR vServices, and UDP
//! request/response. Each records every outcome in the [`Log`]; each stops when `stop` turns
//! true, and every wait is bounded by a timeout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::watch;

use crate::events::{Event, Fail, Log, Op, Vs, backend_of, now_ms};

/// Connect timeout of every client.
const CONNECT: Duration = Duration::from_secs(3);
/// Longest wait for an HTTP answer (above the vService's server timeout).
const ANSWER: Duration = Duration::from_secs(10);
/// Longest wait for an echo.
const ECHO: Duration = Duration::from_secs(3);
/// Pause between two requests of one client (bounds the load on 2 shared cores).
const PACE: Duration = Duration::from_millis(10);

/// Client-side counters that are not failures.
#[derive(Default)]
pub struct Tally {
    /// Requests resent because a reused keep-alive connection was closed before any byte of
    /// the answer (what every HTTP client does for an idempotent request, RFC 9112 9.3.1).
    pub keepalive_resent: AtomicU64,
}

/// How an HTTP client uses its connection.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum HttpMode {
    /// One connection, requests back to back.
    KeepAlive,
    /// A new connection per request.
    NewConnection,
    /// Keep-alive, and sends back the persistence cookie it was given.
    Cookie,
}

/// The parts of one HTTP answer the soak reads.
struct Answer {
    status: u16,
    body: String,
    cookie: Option<String>,
    close: bool,
}

/// Why an answer could not be read, and whether any byte of it came.
struct NoAnswer {
    fail: Fail,
    got_bytes: bool,
}

async fn connect(addr: SocketAddr) -> Result<TcpStream, Fail> {
    match tokio::time::timeout(CONNECT, TcpStream::connect(addr)).await {
        Ok(Ok(c)) => {
            let _ = c.set_nodelay(true);
            Ok(c)
        }
        Ok(Err(e)) => Err(Fail::of(&e)),
        Err(_) => Err(Fail::Timeout),
    }
}

async fn read_answer(conn: &mut TcpStream) -> Result<Answer, NoAnswer> {
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + ANSWER;
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                let status = head
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                let raw_head = String::from_utf8_lossy(&got[..end]).into_owned();
                let cookie = raw_head.lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("set-cookie")
                        .then(|| v.trim().split(';').next().unwrap_or("").to_owned())
                });
                return Ok(Answer {
                    status,
                    body: String::from_utf8_lossy(&got[end + 4..end + 4 + len]).into_owned(),
                    cookie,
                    close: head.contains("connection: close"),
                });
            }
        }
        let got_bytes = !got.is_empty();
        match tokio::time::timeout_at(deadline, conn.read(&mut chunk)).await {
            Ok(Ok(0)) => {
                return Err(NoAnswer {
                    fail: Fail::Closed,
                    got_bytes,
                });
            }
            Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) => {
                return Err(NoAnswer {
                    fail: Fail::of(&e),
                    got_bytes,
                });
            }
            Err(_) => {
                return Err(NoAnswer {
                    fail: Fail::Timeout,
                    got_bytes,
                });
            }
        }
    }
}

/// An HTTP client of `vs` sending `GET path` until `stop`.
pub async fn http_client(
    addr: SocketAddr,
    vs: Vs,
    path: &'static str,
    mode: HttpMode,
    log: Log,
    tally: Arc<Tally>,
    stop: watch::Receiver<bool>,
) {
    let mut conn: Option<TcpStream> = None;
    let mut cookie: Option<String> = None;
    while !*stop.borrow() {
        let sent = now_ms();
        let record = |backend, fail| Event {
            vs,
            op: Op::Request,
            sent,
            done: now_ms(),
            backend,
            fail,
        };
        let reused = conn.is_some();
        let mut c = match conn.take() {
            Some(c) => c,
            None => match connect(addr).await {
                Ok(c) => c,
                Err(fail) => {
                    log.push(record(None, Some(fail)));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let close = mode == HttpMode::NewConnection;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: soak\r\n{}{}\r\n",
            cookie
                .as_ref()
                .map(|c| format!("Cookie: {c}\r\n"))
                .unwrap_or_default(),
            if close { "Connection: close\r\n" } else { "" }
        );
        let answer = match c.write_all(request.as_bytes()).await {
            Ok(()) => read_answer(&mut c).await,
            Err(e) => Err(NoAnswer {
                fail: Fail::of(&e),
                got_bytes: false,
            }),
        };
        match answer {
            Ok(a) => {
                let backend = backend_of(&a.body);
                let fail = match a.status {
                    200 if backend.is_some() => None,
                    200 => Some(Fail::Garbled),
                    500..=599 => Some(Fail::Status5xx),
                    _ => Some(Fail::StatusOther),
                };
                log.push(record(backend, fail));
                if mode == HttpMode::Cookie
                    && let Some(new) = a.cookie
                {
                    cookie = Some(new);
                }
                if !close && !a.close {
                    conn = Some(c);
                }
            }
            Err(e) if reused && !e.got_bytes && matches!(e.fail, Fail::Closed | Fail::Reset) => {
                // A reused connection closed under the request: resent on a new one.
                tally.keepalive_resent.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Err(e) => log.push(record(None, Some(e.fail))),
        }
        tokio::time::sleep(PACE).await;
    }
}

/// Sends `line` and reads one line back (who answered); the connection is left open.
async fn hello(addr: SocketAddr) -> Result<(TcpStream, u8), Fail> {
    let mut c = connect(addr).await?;
    let exchange = async {
        c.write_all(b"hello\n").await.map_err(|e| Fail::of(&e))?;
        let mut got = Vec::new();
        let mut chunk = [0u8; 256];
        while !got.contains(&b'\n') {
            match c.read(&mut chunk).await {
                Ok(0) => return Err(Fail::Closed),
                Ok(n) => got.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(Fail::of(&e)),
            }
        }
        backend_of(&String::from_utf8_lossy(&got)).ok_or(Fail::Garbled)
    };
    match tokio::time::timeout(ECHO, exchange).await {
        Ok(Ok(b)) => Ok((c, b)),
        Ok(Err(f)) => Err(f),
        Err(_) => Err(Fail::Timeout),
    }
}

/// New connections to `vs` back to back: each says hello, reads who answered, closes.
pub async fn connection_client(addr: SocketAddr, vs: Vs, log: Log, stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        let sent = now_ms();
        let (backend, fail) = match hello(addr).await {
            Ok((_, b)) => (Some(b), None),
            Err(f) => (None, Some(f)),
        };
        log.push(Event {
            vs,
            op: Op::Connection,
            sent,
            done: now_ms(),
            backend,
            fail,
        });
        tokio::time::sleep(Duration::from_millis(if fail.is_some() { 100 } else { 20 })).await;
    }
}

/// Long-lived echo streams to `vs`, one at a time: a line every 200 ms must come back within
/// [`ECHO`]; a stream that fails is recorded as cut (with its backend) and a new one opens.
pub async fn stream_client(addr: SocketAddr, vs: Vs, log: Log, mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        let sent = now_ms();
        let (mut c, backend) = match hello(addr).await {
            Ok(x) => x,
            Err(f) => {
                log.push(Event {
                    vs,
                    op: Op::Connection,
                    sent,
                    done: now_ms(),
                    backend: None,
                    fail: Some(f),
                });
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let mut n = 0u64;
        let fail = loop {
            tokio::select! {
                _ = stop.changed() => break None,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
            if *stop.borrow() {
                break None;
            }
            n += 1;
            let line = format!("ping {n}\n");
            let mut back = vec![0u8; line.len()];
            let echoed = async {
                c.write_all(line.as_bytes()).await?;
                c.read_exact(&mut back).await?;
                Ok::<_, std::io::Error>(())
            };
            match tokio::time::timeout(ECHO, echoed).await {
                Ok(Ok(())) if back == line.as_bytes() => {}
                Ok(Ok(())) => break Some(Fail::Garbled),
                Ok(Err(e)) => break Some(Fail::of(&e)),
                Err(_) => break Some(Fail::Timeout),
            }
        };
        log.push(Event {
            vs,
            op: Op::Stream,
            sent,
            done: now_ms(),
            backend: Some(backend),
            fail,
        });
    }
}

/// UDP requests to `addr` every 20 ms, each answered within a second by who served it.
pub async fn udp_client(addr: SocketAddr, log: Log, stop: watch::Receiver<bool>) {
    let Ok(socket) = UdpSocket::bind("0.0.0.0:0").await else {
        return;
    };
    let mut buf = [0u8; 512];
    while !*stop.borrow() {
        let sent = now_ms();
        let got = async {
            socket.send_to(b"query\n", addr).await?;
            let (n, _) = socket.recv_from(&mut buf).await?;
            Ok::<_, std::io::Error>(n)
        };
        let (backend, fail) = match tokio::time::timeout(Duration::from_secs(1), got).await {
            Ok(Ok(n)) => match backend_of(&String::from_utf8_lossy(&buf[..n])) {
                Some(b) => (Some(b), None),
                None => (None, Some(Fail::Garbled)),
            },
            Ok(Err(e)) => (None, Some(Fail::of(&e))),
            Err(_) => (None, Some(Fail::Timeout)),
        };
        log.push(Event {
            vs: Vs::Udp,
            op: Op::Request,
            sent,
            done: now_ms(),
            backend,
            fail,
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
