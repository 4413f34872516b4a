//! Counters per backend and per pool (S-OB1): what the Live Stats page and metrics read.

use std::sync::atomic::{AtomicU64, Ordering};

/// Running totals of one backend, updated without a lock from every connection.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Requests (HTTP) or connections (L7 TCP) granted a slot.
    pub total: AtomicU64,
    /// Bytes received from clients and sent to the backend.
    pub bytes_in: AtomicU64,
    /// Bytes received from the backend and sent to clients.
    pub bytes_out: AtomicU64,
    /// Requests or connections that failed upstream.
    pub failures: AtomicU64,
}

/// Pool-wide refusals, by cause.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    /// Nothing could serve (S-BK9).
    pub no_backend: AtomicU64,
    /// The chosen backend's queue was full.
    pub queue_full: AtomicU64,
    /// The wait in the queue lasted too long.
    pub queue_timeouts: AtomicU64,
}

/// Adds `n` to a counter.
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// Reads a counter.
pub(crate) fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// A snapshot of one vService's balancing counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Per Backend Service that has served this vService, sorted by name.
    pub backends: Vec<BackendStats>,
    /// Requests or connections refused because no backend was available (S-BK9).
    pub no_backend: u64,
    /// Refused because the chosen backend's queue was full.
    pub queue_full: u64,
    /// Refused because the queue wait exceeded the queue timeout.
    pub queue_timeouts: u64,
}

/// Counters of one Backend Service within one vService (S-OB1).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackendStats {
    /// Backend Service name.
    pub name: String,
    /// Current sessions: requests or connections holding a slot now.
    pub current: u64,
    /// Requests or connections served since start.
    pub total: u64,
    /// Requests or connections waiting in its queue now.
    pub queued: u64,
    /// Bytes from clients to the backend.
    pub bytes_in: u64,
    /// Bytes from the backend to clients.
    pub bytes_out: u64,
    /// Requests or connections that failed upstream.
    pub failures: u64,
}
