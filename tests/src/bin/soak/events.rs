//! What the clients saw, one record per request, connection or stream, stamped in
//! milliseconds since the soak started (the clock every part of the soak shares).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

static START: OnceLock<Instant> = OnceLock::new();

/// Milliseconds since the soak started (the first call starts the clock).
pub fn now_ms() -> u64 {
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// Which vService (and for HTTP, which list) a record is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Vs {
    /// HTTP, Default list (`GET /`).
    Web,
    /// HTTP, the `api` Conditional set (`GET /api/...`).
    WebApi,
    /// L7 TCP.
    Tcp,
    /// TCP NAT (Network).
    Nat,
    /// TCP DSR (Network).
    Dsr,
    /// UDP NAT (Network).
    Udp,
}

impl Vs {
    /// Every vService, in report order.
    pub const ALL: [Vs; 6] = [Vs::Web, Vs::WebApi, Vs::Tcp, Vs::Nat, Vs::Dsr, Vs::Udp];

    /// The name the report prints.
    pub fn label(self) -> &'static str {
        match self {
            Vs::Web => "web (HTTP, Default list)",
            Vs::WebApi => "web (HTTP, set api)",
            Vs::Tcp => "tcp (L7 TCP)",
            Vs::Nat => "nat (TCP, NAT)",
            Vs::Dsr => "dsr (TCP, DSR)",
            Vs::Udp => "udp (UDP, NAT)",
        }
    }

    /// Forwarded by XDP (flows survive a daemon restart).
    pub fn is_network(self) -> bool {
        matches!(self, Vs::Nat | Vs::Dsr | Vs::Udp)
    }
}

/// What a record counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// One HTTP request or UDP datagram.
    Request,
    /// A new connection that sends a line and reads who answered.
    Connection,
    /// A long-lived echo stream, recorded when it ends.
    Stream,
}

/// Why something failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fail {
    /// An HTTP 5xx answered by the balancer or a backend.
    Status5xx,
    /// Another unexpected HTTP status.
    StatusOther,
    /// Connection reset.
    Reset,
    /// No answer in time (connect, request or echo).
    Timeout,
    /// Connection refused.
    Refused,
    /// Closed before the whole answer.
    Closed,
    /// An answer that could not be read (not from one of our backends).
    Garbled,
}

impl Fail {
    /// The name the report prints.
    pub fn label(self) -> &'static str {
        match self {
            Fail::Status5xx => "5xx",
            Fail::StatusOther => "other status",
            Fail::Reset => "reset",
            Fail::Timeout => "timeout",
            Fail::Refused => "refused",
            Fail::Closed => "closed early",
            Fail::Garbled => "garbled",
        }
    }

    /// Classifies an I/O error.
    pub fn of(e: &std::io::Error) -> Fail {
        use std::io::ErrorKind::*;
        match e.kind() {
            ConnectionReset | ConnectionAborted | BrokenPipe => Fail::Reset,
            ConnectionRefused => Fail::Refused,
            TimedOut | WouldBlock => Fail::Timeout,
            UnexpectedEof => Fail::Closed,
            _ => Fail::Closed,
        }
    }
}

/// One request, connection or stream.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// The vService.
    pub vs: Vs,
    /// What it counts.
    pub op: Op,
    /// When it was sent (a stream: when it was opened).
    pub sent: u64,
    /// When it was answered, failed or (a stream) ended.
    pub done: u64,
    /// The backend (1-based) that answered, when one did.
    pub backend: Option<u8>,
    /// Why it failed (a stream: why it was cut); None when it went well.
    pub fail: Option<Fail>,
}

/// Every record of the run, shared by the clients.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<Event>>>);

impl Log {
    /// Adds one record.
    pub fn push(&self, e: Event) {
        if let Ok(mut v) = self.0.lock() {
            v.push(e);
        }
    }

    /// Every record so far, in the order they ended.
    pub fn all(&self) -> Vec<Event> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// The backend number in an answer `b3\n` (or `b3 ...`).
pub fn backend_of(text: &str) -> Option<u8> {
    let word = text.split_whitespace().next()?;
    word.strip_prefix('b')?.parse().ok()
}
