//! One service's TCP check inside the driver: its socket while a check is in flight, and
//! the words its result is logged with.

use std::fmt::Write as _;
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use std::net::SocketAddr;

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use socket2::{Domain, Socket, Type};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::health::probe::{ProbeResult, fmt_ms};
use crate::health::scheduler::CheckBook;
use crate::health::tcp::describe_io;

/// How opening a check went.
pub(super) enum Opened {
    /// The SYN is out: wait for the answer, at most this long.
    Waiting(Duration),
    /// Over already (the connect failed at once, or succeeded at once).
    Done {
        /// Whether the check succeeded.
        ok: bool,
    },
}

/// Where a slot's results go.
pub(super) enum Sink {
    /// A service's book: checks repeat every P.
    Book(CheckBook),
    /// A one-off check's caller.
    Once {
        /// Cut after this long.
        timeout: Duration,
        /// Taken by the result.
        reply: Option<oneshot::Sender<ProbeResult>>,
    },
}

/// A check target and its socket in flight.
pub(super) struct Slot {
    addr: SocketAddr,
    /// Socket mark (0: none).
    mark: u32,
    half_open: bool,
    sink: Sink,
    socket: Option<Socket>,
    started: Instant,
    /// Why the check that ended at once failed.
    error: Option<io::Error>,
}

impl Slot {
    pub(super) fn new((addr, mark): (SocketAddr, u32), half_open: bool, sink: Sink) -> Self {
        Self {
            addr,
            mark,
            half_open,
            sink,
            socket: None,
            started: Instant::now(),
            error: None,
        }
    }

    /// Sends the SYN and registers the socket for its answer under `token`.
    pub(super) fn open(&mut self, now: Instant, registry: &Registry, token: Token) -> Opened {
        self.started = now;
        self.error = None;
        match self.connect(registry, token) {
            Ok(Some(socket)) => {
                self.socket = Some(socket);
                Opened::Waiting(self.timeout())
            }
            Ok(None) => Opened::Done { ok: true },
            Err(e) => {
                self.error = Some(e);
                Opened::Done { ok: false }
            }
        }
    }

    /// The socket in flight, or None when the connect completed at once (it was closed with
    /// RST already).
    fn connect(&self, registry: &Registry, token: Token) -> io::Result<Option<Socket>> {
        let addr = self.addr;
        let socket = Socket::new(
            Domain::for_address(addr),
            Type::STREAM.nonblocking().cloexec(),
            None,
        )?;
        if self.mark != 0 {
            // The data path's tc program puts this check inside the tunnel (S-TN4).
            socket.set_mark(self.mark)?;
        }
        if self.half_open {
            // The kernel then delays the handshake's last ACK, and the zero-linger close
            // sends RST long before it would go out.
            socket.set_tcp_quickack(false)?;
        }
        match socket.connect(&addr.into()) {
            Ok(()) => {
                abort(socket);
                Ok(None)
            }
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {
                registry.register(
                    &mut SourceFd(&socket.as_raw_fd()),
                    token,
                    Interest::WRITABLE,
                )?;
                Ok(Some(socket))
            }
            Err(e) => Err(e),
        }
    }

    /// The target answered: success unless `refused` (then SO_ERROR says why). Writes the
    /// reason into `reason`.
    pub(super) fn answered(&mut self, refused: bool, reason: &mut String) -> bool {
        let Some(socket) = self.socket.take() else {
            return false;
        };
        let ok = if refused {
            self.error = Some(match socket.take_error() {
                Ok(Some(e)) => e,
                Ok(None) => io::Error::new(io::ErrorKind::ConnectionReset, "closed by the target"),
                Err(e) => e,
            });
            false
        } else {
            abort(socket);
            true
        };
        self.describe(ok, reason);
        ok
    }

    /// The Timeout passed with no answer: the SYN_SENT socket is closed.
    pub(super) fn cut(&mut self, reason: &mut String) {
        self.socket = None;
        reason.clear();
        let _ = write!(
            reason,
            "no answer within the timeout ({})",
            fmt_ms(self.timeout())
        );
    }

    /// The reason of a check that ended as `ok` says.
    pub(super) fn describe(&self, ok: bool, reason: &mut String) {
        if ok {
            let word = if self.half_open {
                "SYN-ACK"
            } else {
                "connected"
            };
            let _ = write!(reason, "{word} in {}", fmt_ms(self.started.elapsed()));
        } else if let Some(e) = &self.error {
            reason.push_str(&describe_io("connect", e));
        } else {
            reason.push_str("connect failed");
        }
    }

    fn timeout(&self) -> Duration {
        match &self.sink {
            Sink::Book(book) => book.timeout(),
            Sink::Once { timeout, .. } => *timeout,
        }
    }

    /// Records the check that ended at `now`; returns the wait before the next one, or
    /// None for a one-off check (which is over).
    pub(super) fn record(&mut self, ok: bool, now: Instant, reason: &str) -> Option<Duration> {
        let duration = now.saturating_duration_since(self.started);
        match &mut self.sink {
            Sink::Book(book) => {
                book.record(self.started, duration, ok, reason);
                Some(book.period())
            }
            Sink::Once { reply, .. } => {
                if let Some(reply) = reply.take() {
                    let _ = reply.send(ProbeResult {
                        ok,
                        reason: reason.to_string(),
                        duration,
                    });
                }
                None
            }
        }
    }
}

/// Closes a connected socket with RST, as HAProxy does for checks: a FIN would leave a
/// TIME_WAIT socket per check, and in the half-open case the RST stands in for the ACK.
fn abort(socket: Socket) {
    let _ = socket.set_linger(Some(Duration::ZERO));
}
