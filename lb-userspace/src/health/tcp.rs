//! TCP check (S-HC2): a connect that completes is a success; a refusal ends the check at once
//! (S-HC3) and silence lasts until the Timeout.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};

use super::probe::{BoxFuture, Probe, ProbeResult, fmt_ms};

/// Connects to one address:port.
#[derive(Clone, Debug)]
pub struct TcpProbe {
    addr: SocketAddr,
    timeout: Duration,
}

impl TcpProbe {
    /// A probe for `addr`, each check bounded by `timeout`.
    pub fn new(addr: SocketAddr, timeout: Duration) -> Self {
        Self { addr, timeout }
    }

    async fn run(&self) -> ProbeResult {
        let start = Instant::now();
        if self.addr.port() == 0 {
            return ProbeResult::failure(
                "TCP check needs a port; the service has port 0",
                start.elapsed(),
            );
        }
        match connect(self.addr, start + self.timeout).await {
            Ok(stream) => {
                // Close with RST, as HAProxy does for checks: a FIN would leave a TIME_WAIT
                // socket per check (600,000 of them at 10,000 checks per second).
                let _ = stream.set_zero_linger();
                ProbeResult::success(
                    format!("connected in {}", fmt_ms(start.elapsed())),
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

/// Turns an I/O error into a short reason such as "connect: connection refused".
pub(crate) fn describe_io(step: &str, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => format!("{step}: connection refused"),
        io::ErrorKind::ConnectionReset => format!("{step}: connection reset"),
        _ => format!("{step}: {e}"),
    }
}
