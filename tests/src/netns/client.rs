//! Client side of the test protocol (see [`super::servers`]).
//!
//! These functions use the CALLING THREAD's network namespace: call them inside
//! [`Netns::run`](super::Netns::run) for the client namespace. A [`HeldConn`] opened there
//! may afterwards be used from any thread.
//!
//! The functions taking a [`SocketAddrV4`] are the IPv4 ones the IPv4 tests use; the `_at`
//! variants take any [`SocketAddr`], e.g. an IPv6 VIP `[fd00:10:99::10]:8000`.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Connect and read/write timeout of every client operation.
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// What a server answered: which backend and on which local port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The backend's name (the Backend Service name in the tests' configs).
    pub backend: String,
    /// The port the server listens on.
    pub port: u16,
}

impl Reply {
    fn parse(line: &str) -> Result<Reply> {
        let mut parts = line.split_whitespace();
        let (Some(backend), Some(port), None) = (parts.next(), parts.next(), parts.next()) else {
            bail!("unexpected answer {line:?}");
        };
        Ok(Reply {
            backend: backend.to_owned(),
            port: port.parse().with_context(|| format!("port in {line:?}"))?,
        })
    }
}

/// Opens a new TCP connection (new source port), asks which backend serves it, closes.
pub fn tcp_ask(addr: SocketAddrV4) -> Result<Reply> {
    tcp_ask_at(SocketAddr::V4(addr))
}

/// [`tcp_ask`] to an address of either family.
pub fn tcp_ask_at(addr: SocketAddr) -> Result<Reply> {
    let mut conn = connect(addr)?;
    conn.write_all(b"name\n")?;
    let mut pending = Vec::new();
    let line = read_line(&mut conn, &mut pending)?;
    Reply::parse(&line)
}

/// Sends one datagram from a new socket (new source port) and reads the answer.
pub fn udp_ask(addr: SocketAddrV4) -> Result<Reply> {
    udp_ask_at(SocketAddr::V4(addr))
}

/// [`udp_ask`] to an address of either family (the socket is bound in the same family).
pub fn udp_ask_at(addr: SocketAddr) -> Result<Reply> {
    let local = match addr {
        SocketAddr::V4(_) => SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0),
        SocketAddr::V6(_) => SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), 0),
    };
    let socket = UdpSocket::bind(local)?;
    // Connected: the kernel only delivers answers whose source is exactly `addr`, so an
    // answer proves the reply was translated back to the VIP.
    socket.connect(addr)?;
    socket.set_read_timeout(Some(IO_TIMEOUT))?;
    socket.send(b"name\n")?;
    let mut buf = [0u8; 512];
    let n = socket
        .recv(&mut buf)
        .with_context(|| format!("no UDP answer from {addr}"))?;
    Reply::parse(String::from_utf8_lossy(&buf[..n]).trim())
}

/// A long-lived TCP connection in "hold" mode: the server echoes every line.
#[derive(Debug)]
pub struct HeldConn {
    stream: TcpStream,
    pending: Vec<u8>,
    /// Which backend accepted the connection.
    pub reply: Reply,
}

impl HeldConn {
    /// Connects to `addr` and switches the connection to echo mode.
    pub fn open(addr: SocketAddrV4) -> Result<HeldConn> {
        HeldConn::open_at(SocketAddr::V4(addr))
    }

    /// [`HeldConn::open`] to an address of either family.
    pub fn open_at(addr: SocketAddr) -> Result<HeldConn> {
        HeldConn::hold(connect(addr)?)
    }

    /// [`HeldConn::open_at`] from the client address and port `local`, which other
    /// connections to other destinations may use at the same time (`SO_REUSEADDR`).
    pub fn open_from(local: SocketAddr, addr: SocketAddr) -> Result<HeldConn> {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        socket.set_reuse_address(true)?;
        socket
            .bind(&local.into())
            .with_context(|| format!("binding {local}"))?;
        socket
            .connect_timeout(&addr.into(), IO_TIMEOUT)
            .with_context(|| format!("connecting from {local} to {addr}"))?;
        let stream: TcpStream = socket.into();
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        stream.set_nodelay(true)?;
        HeldConn::hold(stream)
    }

    /// Switches a fresh connection to echo mode.
    fn hold(mut stream: TcpStream) -> Result<HeldConn> {
        stream.write_all(b"hold\n")?;
        let mut pending = Vec::new();
        let line = read_line(&mut stream, &mut pending)?;
        Ok(HeldConn {
            stream,
            pending,
            reply: Reply::parse(&line)?,
        })
    }

    /// Sends `msg` and checks that the same line comes back within [`IO_TIMEOUT`].
    pub fn echo(&mut self, msg: &str) -> Result<()> {
        self.stream.write_all(format!("{msg}\n").as_bytes())?;
        let line = read_line(&mut self.stream, &mut self.pending)?;
        if line != msg {
            bail!("echo mismatch: sent {msg:?}, got {line:?}");
        }
        Ok(())
    }

    /// Closes the connection the way a client ends it first: its FIN, then the server's
    /// (read as end of stream), so the server has let the connection go when this returns
    /// and the client end waits in TIME_WAIT.
    pub fn close(mut self) -> Result<()> {
        self.stream.shutdown(std::net::Shutdown::Write)?;
        let mut rest = Vec::new();
        self.stream
            .read_to_end(&mut rest)
            .context("waiting for the server to close")?;
        Ok(())
    }

    /// The local (client) address of the connection.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        Ok(self.stream.local_addr()?)
    }

    /// The remote address of the connection, as the client's kernel sees it (the VIP).
    pub fn peer_addr(&self) -> Result<SocketAddr> {
        Ok(self.stream.peer_addr()?)
    }
}

fn connect(addr: SocketAddr) -> Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Reads one `\n`-terminated line within [`IO_TIMEOUT`] (total, not per read).
fn read_line(stream: &mut TcpStream, pending: &mut Vec<u8>) -> Result<String> {
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut buf = [0u8; 512];
    loop {
        if let Some(pos) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=pos).collect();
            return Ok(String::from_utf8_lossy(&line[..pos]).into_owned());
        }
        if Instant::now() >= deadline || pending.len() > 4096 {
            bail!("no complete line within {IO_TIMEOUT:?}");
        }
        match stream.read(&mut buf) {
            Ok(0) => bail!("connection closed before a complete line"),
            Ok(n) => pending.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                bail!("read timed out after {IO_TIMEOUT:?}")
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Runs up to `count` asks of `ask` in the `client` namespace; every one must be answered
/// (a test assertion: panics listing the errors). Stops early after 5 failures or 20 s, so a
/// broken path fails fast (each failed ask costs up to the 2 s client timeout).
/// `addr` is a [`SocketAddrV4`] with [`tcp_ask`] / [`udp_ask`], or a [`SocketAddr`] of
/// either family with [`tcp_ask_at`] / [`udp_ask_at`].
pub fn ask_many<A: Copy + Display + Send + Sync>(
    client: &super::Netns,
    count: usize,
    ask: fn(A) -> Result<Reply>,
    addr: A,
) -> Vec<Reply> {
    let (replies, errors) = client
        .run(|| {
            let started = Instant::now();
            let (mut replies, mut errors) = (Vec::new(), Vec::new());
            for _ in 0..count {
                match ask(addr) {
                    Ok(reply) => replies.push(reply),
                    Err(e) => errors.push(format!("{e:#}")),
                }
                if errors.len() >= 5 || started.elapsed() > Duration::from_secs(20) {
                    break;
                }
            }
            (replies, errors)
        })
        .expect("enter client namespace");
    assert!(
        errors.is_empty() && replies.len() == count,
        "{} of {count} requests to {addr} answered; errors: {errors:?}",
        replies.len()
    );
    replies
}

/// How many replies each backend gave.
pub fn count_by_backend(replies: &[Reply]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for r in replies {
        *counts.entry(r.backend.clone()).or_insert(0) += 1;
    }
    counts
}
