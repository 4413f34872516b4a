//! TCP check (S-HC2): a connect that gets its SYN-ACK is a success; a refusal ends the check
//! at once (S-HC3) and silence lasts until the Timeout.
//!
//! By default the check is half-open, like HAProxy's layer-4 check: the kernel is told to
//! delay the last ACK of the handshake (TCP_QUICKACK off), and the socket is closed with a
//! zero linger as soon as the SYN-ACK arrives, so the wire carries SYN, SYN-ACK, RST. The
//! target's listener never completes a connection and never wakes its accept queue, which is
//! what 10,000 checks a second cost a target otherwise.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::time::{Instant, timeout_at};

use crate::config::Handshake;

use super::driver::{self, OnceCheck};
use super::probe::{BoxFuture, Probe, ProbeResult};

/// Connects to one address:port, on the process's TCP check thread (the engine's TCP
/// checks run there too, so this is the same check on the wire).
#[derive(Clone, Debug)]
pub struct TcpProbe {
    addr: SocketAddr,
    mark: u32,
    timeout: Duration,
    handshake: Handshake,
}

impl TcpProbe {
    /// A probe for `addr`, each check bounded by `timeout`, taking the handshake as far as
    /// `handshake` says.
    pub fn new(addr: SocketAddr, timeout: Duration, handshake: Handshake) -> Self {
        Self {
            addr,
            mark: 0,
            timeout,
            handshake,
        }
    }

    /// The same probe with its connections marked `mark` (a check through a tunnel, S-TN4).
    pub fn with_mark(mut self, mark: u32) -> Self {
        self.mark = mark;
        self
    }

    async fn run(&self) -> ProbeResult {
        let start = Instant::now();
        if self.addr.port() == 0 {
            return ProbeResult::failure(
                "TCP check needs a port; the service has port 0",
                start.elapsed(),
            );
        }
        let Some(driver) = driver::shared() else {
            return ProbeResult::failure(
                "the TCP check thread could not be started",
                start.elapsed(),
            );
        };
        let (reply, result) = oneshot::channel();
        driver.once(OnceCheck {
            addr: self.addr,
            mark: self.mark,
            half_open: self.handshake == Handshake::HalfOpen,
            timeout: self.timeout,
            reply,
        });
        result.await.unwrap_or_else(|_| {
            ProbeResult::failure("the TCP check thread dropped the check", start.elapsed())
        })
    }
}

impl Probe for TcpProbe {
    fn check(&self) -> BoxFuture<'_, ProbeResult> {
        Box::pin(self.run())
    }
}

/// Connects before `deadline` from a socket marked `mark` (0: none), naming the cause on
/// failure; shared with the HTTP probe.
pub(crate) async fn connect(
    addr: SocketAddr,
    mark: u32,
    deadline: Instant,
) -> Result<TcpStream, String> {
    match timeout_at(deadline, open(addr, mark)).await {
        Ok(Ok(stream)) => {
            // Health checks are tiny exchanges; do not let Nagle delay the request.
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Ok(Err(e)) => Err(describe_io("connect", &e)),
        Err(_) => Err("connect: no answer before the timeout".to_string()),
    }
}

/// A connection to `addr`; its socket marked `mark` first when not 0.
async fn open(addr: SocketAddr, mark: u32) -> io::Result<TcpStream> {
    if mark == 0 {
        return TcpStream::connect(addr).await;
    }
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket2::SockRef::from(&socket).set_mark(mark)?;
    socket.connect(addr).await
}

/// Turns an I/O error into a short reason such as "connect: connection refused".
pub(crate) fn describe_io(step: &str, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => format!("{step}: connection refused"),
        io::ErrorKind::ConnectionReset => format!("{step}: connection reset"),
        _ => format!("{step}: {e}"),
    }
}
