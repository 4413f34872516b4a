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
use std::os::fd::AsRawFd;
use std::time::Duration;

use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{Instant, timeout_at};

use crate::config::Handshake;

use super::probe::{BoxFuture, Probe, ProbeResult, fmt_ms};

/// Connects to one address:port.
#[derive(Clone, Debug)]
pub struct TcpProbe {
    addr: SocketAddr,
    timeout: Duration,
    handshake: Handshake,
}

impl TcpProbe {
    /// A probe for `addr`, each check bounded by `timeout`, taking the handshake as far as
    /// `handshake` says.
    pub fn new(addr: SocketAddr, timeout: Duration, handshake: Handshake) -> Self {
        Self {
            addr,
            timeout,
            handshake,
        }
    }

    async fn run(&self) -> ProbeResult {
        let start = Instant::now();
        if self.addr.port() == 0 {
            return ProbeResult::failure(
                "TCP check needs a port; the service has port 0",
                start.elapsed(),
            );
        }
        let deadline = start + self.timeout;
        let (connected, word) = match self.handshake {
            Handshake::HalfOpen => (connect_half_open(self.addr, deadline).await, "SYN-ACK"),
            Handshake::Full => (connect(self.addr, deadline).await, "connected"),
        };
        match connected {
            Ok(stream) => {
                // Close with RST, as HAProxy does for checks: a FIN would leave a TIME_WAIT
                // socket per check (600,000 of them at 10,000 checks per second), and in the
                // half-open case the RST also stands in for the delayed ACK.
                let _ = stream.set_zero_linger();
                drop(stream);
                ProbeResult::success(
                    format!("{word} in {}", fmt_ms(start.elapsed())),
                    start.elapsed(),
                )
            }
            Err(reason) => ProbeResult::failure(reason, start.elapsed()),
        }
    }
}

impl Probe for TcpProbe {
    fn check(&self) -> BoxFuture<'_, ProbeResult> {
        Box::pin(self.run())
    }
}

/// Connects before `deadline`, naming the cause on failure; shared with the HTTP probe.
pub(crate) async fn connect(addr: SocketAddr, deadline: Instant) -> Result<TcpStream, String> {
    match timeout_at(deadline, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => {
            // Health checks are tiny exchanges; do not let Nagle delay the request.
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Ok(Err(e)) => Err(describe_io("connect", &e)),
        Err(_) => Err("connect: no answer before the timeout".to_string()),
    }
}

/// Connects before `deadline` with the final ACK of the handshake held back: in quick-ACK-off
/// ("ping-pong") mode the kernel answers the SYN-ACK with a delayed ACK (up to 200 ms later),
/// and the caller's zero-linger close sends RST long before that.
async fn connect_half_open(addr: SocketAddr, deadline: Instant) -> Result<TcpStream, String> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| describe_io("socket", &e))?;
    quick_ack_off(&socket).map_err(|e| describe_io("setsockopt TCP_QUICKACK", &e))?;
    match timeout_at(deadline, socket.connect(addr)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(describe_io("connect", &e)),
        Err(_) => Err("connect: no answer before the timeout".to_string()),
    }
}

/// Clears TCP_QUICKACK, which neither std nor tokio expose.
fn quick_ack_off(socket: &TcpSocket) -> io::Result<()> {
    let off: libc::c_int = 0;
    // SAFETY: the descriptor is open (owned by `socket`), and the option value is a c_int
    // that lives across the call, with its true size passed.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_QUICKACK,
            (&raw const off).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Turns an I/O error into a short reason such as "connect: connection refused".
pub(crate) fn describe_io(step: &str, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => format!("{step}: connection refused"),
        io::ErrorKind::ConnectionReset => format!("{step}: connection reset"),
        _ => format!("{step}: {e}"),
    }
}
