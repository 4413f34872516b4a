//! Real TCP and UDP servers running in backend namespaces, in threads of the test process.
//!
//! Protocol (one text line per message, `\n`-terminated):
//! - TCP: the client sends `name`; the server answers `<backend name> <local port>` and closes.
//!   The client sends `hold`; the server answers the same line, then echoes every further
//!   line until the client closes (long-lived connections).
//! - UDP: every datagram is answered with `<backend name> <local port>`.
//! - HTTP/1.1 on the same TCP servers (recognised by the request line): every request is
//!   answered `200 OK` with the body `<backend name> <local port>\n`, keep-alive honoured.
//!
//! Every loop is bounded: servers stop when asked (on drop) or after [`MAX_LIFETIME`].
//!
//! Servers listen on `0.0.0.0:port` (IPv4) unless given another address with the `_at`
//! variants: `[::]:port` listens on both families in a dual-stack namespace (one socket,
//! IPv4 clients seen as `::ffff:a.b.c.d`), a specific IPv6 address only on that one.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};

use super::ns::{Netns, enter_path};

/// Upper bound on how long any server or connection handler thread lives.
pub const MAX_LIFETIME: Duration = Duration::from_secs(180);
/// How often blocked server threads wake up to look at the stop flag.
const POLL: Duration = Duration::from_millis(100);
/// Longest line a client may send.
const MAX_LINE: usize = 4096;

/// The servers of one topology; stops and joins all their threads when dropped.
#[derive(Default)]
pub struct Servers {
    stop: Arc<AtomicBool>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Servers {
    /// Starts a TCP server named `name` on `0.0.0.0:port` inside `ns`; returns once it listens.
    pub fn spawn_tcp(&self, ns: &Netns, name: &str, port: u16) -> Result<()> {
        self.spawn_tcp_stoppable(ns, name, port).map(drop)
    }

    /// Like [`Servers::spawn_tcp`] on the address `bind` (e.g. `[::]:8000`).
    pub fn spawn_tcp_at(&self, ns: &Netns, name: &str, bind: SocketAddr) -> Result<()> {
        self.spawn_tcp_stoppable_at(ns, name, bind).map(drop)
    }

    /// Like [`Servers::spawn_tcp`], and returns a handle that closes this one listener on its
    /// own (its port then refuses new connections with RST, like a stopped server process),
    /// while the other servers keep running. Dropping the handle leaves the server running.
    pub fn spawn_tcp_stoppable(&self, ns: &Netns, name: &str, port: u16) -> Result<ServerStop> {
        let bind = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port));
        self.spawn_tcp_stoppable_at(ns, name, bind)
    }

    /// Like [`Servers::spawn_tcp_stoppable`] on the address `bind` (e.g. `[::]:8000`).
    pub fn spawn_tcp_stoppable_at(
        &self,
        ns: &Netns,
        name: &str,
        bind: SocketAddr,
    ) -> Result<ServerStop> {
        let port = bind.port();
        let (ready_tx, ready_rx) = mpsc::channel();
        let (closed_tx, closed_rx) = mpsc::channel();
        let own = Arc::new(AtomicBool::new(false));
        let path = ns.path();
        let name = name.to_owned();
        let stop = self.stop.clone();
        let threads = self.threads.clone();
        let own_flag = own.clone();
        let handle = std::thread::spawn(move || {
            let listener = enter_path(&path).and_then(|()| {
                let l = TcpListener::bind(bind)?;
                l.set_nonblocking(true)?;
                Ok(l)
            });
            match listener {
                Ok(l) => {
                    let _ = ready_tx.send(Ok(()));
                    accept_loop(&l, &name, port, &stop, &own_flag, &threads);
                    drop(l);
                    // The handle may be gone (never closed explicitly); nothing to do then.
                    let _ = closed_tx.send(());
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            }
        });
        self.push(handle);
        wait_ready(&ready_rx, "tcp", ns.name(), bind)?;
        Ok(ServerStop {
            own,
            closed: closed_rx,
            what: format!("tcp server {} {bind}", ns.name()),
        })
    }

    /// Starts a UDP server named `name` on `0.0.0.0:port` inside `ns`; returns once bound.
    pub fn spawn_udp(&self, ns: &Netns, name: &str, port: u16) -> Result<()> {
        self.spawn_udp_at(
            ns,
            name,
            SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)),
        )
    }

    /// Like [`Servers::spawn_udp`] on the address `bind` (e.g. `[::]:5300`). A reply's
    /// source address is the one the kernel picks for the client (the backend's own address
    /// on its link), which is what NAT expects.
    pub fn spawn_udp_at(&self, ns: &Netns, name: &str, bind: SocketAddr) -> Result<()> {
        let port = bind.port();
        let (ready_tx, ready_rx) = mpsc::channel();
        let path = ns.path();
        let name = name.to_owned();
        let stop = self.stop.clone();
        let handle = std::thread::spawn(move || {
            let socket = enter_path(&path).and_then(|()| {
                let s = UdpSocket::bind(bind)?;
                s.set_read_timeout(Some(POLL))?;
                Ok(s)
            });
            match socket {
                Ok(s) => {
                    let _ = ready_tx.send(Ok(()));
                    udp_loop(&s, &name, port, &stop);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            }
        });
        self.push(handle);
        wait_ready(&ready_rx, "udp", ns.name(), bind)
    }

    /// Stops every server and handler and waits for their threads (bounded by their polls).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        loop {
            let next = self.threads.lock().map(|mut t| t.pop()).unwrap_or(None);
            match next {
                Some(handle) => {
                    let _ = handle.join();
                }
                None => break,
            }
        }
    }

    fn push(&self, handle: JoinHandle<()>) {
        if let Ok(mut threads) = self.threads.lock() {
            threads.push(handle);
        }
    }
}

/// Closes one TCP listener started by [`Servers::spawn_tcp_stoppable`].
#[derive(Debug)]
pub struct ServerStop {
    own: Arc<AtomicBool>,
    closed: mpsc::Receiver<()>,
    what: String,
}

impl ServerStop {
    /// Stops accepting and waits (at most 2 s) until the listening socket is closed, so the
    /// port refuses connections when this returns. Accepted connections are not cut.
    pub fn close(self) -> Result<()> {
        self.own.store(true, Ordering::SeqCst);
        self.closed
            .recv_timeout(Duration::from_secs(2))
            .map_err(|_| anyhow!("{} did not close within 2 s", self.what))
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop();
    }
}

fn wait_ready(
    rx: &mpsc::Receiver<Result<()>>,
    kind: &str,
    ns: &str,
    bind: SocketAddr,
) -> Result<()> {
    rx.recv_timeout(Duration::from_secs(5))
        .map_err(|_| anyhow!("{kind} server on {ns} {bind} did not start"))?
        .with_context(|| format!("{kind} server on {ns} {bind}"))
}

fn expired(stop: &AtomicBool, started: Instant) -> bool {
    stop.load(Ordering::SeqCst) || started.elapsed() > MAX_LIFETIME
}

fn accept_loop(
    listener: &TcpListener,
    name: &str,
    port: u16,
    stop: &Arc<AtomicBool>,
    own: &AtomicBool,
    threads: &Arc<Mutex<Vec<JoinHandle<()>>>>,
) {
    let started = Instant::now();
    while !expired(stop, started) && !own.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _peer)) => {
                let answer = format!("{name} {port}\n");
                let stop = stop.clone();
                let handle = std::thread::spawn(move || {
                    // A failing connection only ends that connection.
                    let _ = serve_tcp(stream, &answer, &stop);
                });
                if let Ok(mut t) = threads.lock() {
                    t.push(handle);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Reads one line (without its `\n`) into `line`; `Ok(false)` on EOF, stop or expiry.
fn read_line(
    stream: &mut TcpStream,
    pending: &mut Vec<u8>,
    stop: &AtomicBool,
    started: Instant,
) -> std::io::Result<Option<String>> {
    let mut buf = [0u8; 1024];
    loop {
        if let Some(pos) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=pos).collect();
            return Ok(Some(String::from_utf8_lossy(&line[..pos]).into_owned()));
        }
        if expired(stop, started) || pending.len() > MAX_LINE {
            return Ok(None);
        }
        match stream.read(&mut buf) {
            Ok(0) => return Ok(None),
            Ok(n) => pending.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(e),
        }
    }
}

fn serve_tcp(mut stream: TcpStream, answer: &str, stop: &AtomicBool) -> std::io::Result<()> {
    let started = Instant::now();
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(POLL))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut pending = Vec::new();
    let Some(first) = read_line(&mut stream, &mut pending, stop, started)? else {
        return Ok(());
    };
    if is_http_request_line(&first) {
        return serve_http(stream, pending, first, answer, stop, started);
    }
    stream.write_all(answer.as_bytes())?;
    if first.trim() != "hold" {
        return Ok(());
    }
    while let Some(line) = read_line(&mut stream, &mut pending, stop, started)? {
        stream.write_all(format!("{line}\n").as_bytes())?;
    }
    Ok(())
}

fn is_http_request_line(line: &str) -> bool {
    let line = line.trim_end_matches('\r');
    let mut parts = line.split(' ');
    let method = parts.next().unwrap_or_default();
    !method.is_empty()
        && method.bytes().all(|b| b.is_ascii_uppercase())
        && parts.next().is_some_and(|target| target.starts_with('/'))
        && parts.next().is_some_and(|v| v.starts_with("HTTP/1."))
}

/// Answers HTTP/1.1 requests on one connection until the client closes or asks to.
fn serve_http(
    mut stream: TcpStream,
    mut pending: Vec<u8>,
    mut request_line: String,
    answer: &str,
    stop: &AtomicBool,
    started: Instant,
) -> std::io::Result<()> {
    loop {
        let head = request_line.trim_end_matches('\r').starts_with("HEAD ");
        let mut body_len = 0usize;
        let mut close = false;
        loop {
            let Some(line) = read_line(&mut stream, &mut pending, stop, started)? else {
                return Ok(());
            };
            let line = line.trim_end_matches('\r');
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    body_len = value.parse().unwrap_or(0);
                } else if name.eq_ignore_ascii_case("connection") {
                    close = value.eq_ignore_ascii_case("close");
                }
            }
        }
        // Discard the request body.
        while pending.len() < body_len {
            let mut buf = [0u8; 4096];
            match stream.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => pending.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if expired(stop, started) {
                        return Ok(());
                    }
                }
                Err(e) => return Err(e),
            }
        }
        pending.drain(..body_len);
        let body = if head { "" } else { answer };
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{}\r\n{body}",
            answer.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        stream.write_all(response.as_bytes())?;
        if close {
            return Ok(());
        }
        match read_line(&mut stream, &mut pending, stop, started)? {
            Some(next) => request_line = next,
            None => return Ok(()),
        }
    }
}

fn udp_loop(socket: &UdpSocket, name: &str, port: u16, stop: &AtomicBool) {
    let started = Instant::now();
    let answer = format!("{name} {port}\n");
    let mut buf = [0u8; 2048];
    while !expired(stop, started) {
        if let Ok((_, peer)) = socket.recv_from(&mut buf) {
            let _ = socket.send_to(answer.as_bytes(), peer);
        }
    }
}
