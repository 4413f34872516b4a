//! Balancing for HTTP and L7 TCP vServices: which backend serves a request, under its
//! connection limit, with persistence and counters.
//!
//! The proxy asks a vService's [`Pool`] for a [`Lease`] per request (HTTP) or connection
//! (L7 TCP), passing the list's current [`ListSelection`](crate::selection::ListSelection):
//! eligibility is decided by selection alone, never here. The pool then applies persistence
//! (S-MT5, S-BK11), the configured algorithm, and the backend's connection limit with its
//! bounded queue (S-BK8).

mod algorithm;
mod eject;
mod hash;
mod latency;
mod lease;
mod limit;
mod p2c;
mod passive;
mod persist;
mod pool;
mod stats;

use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};

pub use eject::Ejections;
pub use lease::Lease;
pub use passive::{LiveError, LiveFailure};
pub use persist::Pin;
pub use pool::Pool;
pub(crate) use stats::Counter;
pub use stats::{BackendStats, PoolStats};

/// What the proxy knows of one Backend Service at pick time (computed by the caller from the
/// current Config: address:port, weight, limit, and effective maintenance = the service's own
/// flag OR the flag of a Backend Group in this list that contains it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendInfo {
    /// Backend Service name.
    pub name: String,
    /// Where to connect.
    pub addr: SocketAddr,
    /// Configured weight (0 = drained, S-BK11).
    pub weight: u32,
    /// Connection limit; None = unlimited.
    pub max_connections: Option<u32>,
    /// Effective Maintenance Mode (S-MT1, S-MT6).
    pub maintenance: bool,
    /// Its health profile's `passive_failures` (S-RT3); None: live traffic is not watched.
    pub passive_failures: Option<u32>,
}

/// Why no slot was granted; the proxy answers 503 (HTTP) or closes (L7 TCP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PickError {
    /// No main and no backup is available, and no valid pin (S-BK9).
    #[error("no backend available")]
    NoBackend,
    /// The chosen backend is at its limit and its queue is full.
    #[error("queue full")]
    QueueFull,
    /// The chosen backend stayed at its limit for longer than the queue timeout.
    #[error("queue timeout")]
    QueueTimeout,
}

/// Locks a mutex, going on with the data if a holder panicked: every critical section here
/// leaves the data consistent, and failing every later request would be worse.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
