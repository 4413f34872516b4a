//! Counters per backend and per pool (S-OB1): what the Live Stats page and metrics read.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Running totals of one backend, updated without a lock from every connection.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Requests (HTTP) or connections (L7 TCP) granted a slot.
    pub total: Counter,
    /// Bytes received from clients and sent to the backend.
    pub bytes_in: Counter,
    /// Bytes received from the backend and sent to clients.
    pub bytes_out: Counter,
    /// Requests or connections that failed upstream.
    pub failures: Counter,
    /// Requests or connections sent again after failing on this backend.
    pub retries: Counter,
    /// Of those, the ones sent to another backend (HAProxy's redispatches).
    pub redispatches: Counter,
    /// HTTP answers by status class: 1xx, 2xx, 3xx, 4xx, 5xx.
    pub classes: [Counter; 5],
}

/// Pool-wide refusals, by cause.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    /// Nothing could serve (S-BK9).
    pub no_backend: Counter,
    /// The chosen backend's queue was full.
    pub queue_full: Counter,
    /// The wait in the queue lasted too long.
    pub queue_timeouts: Counter,
}

/// Shards of a [`Counter`]; threads beyond this many share them.
const SHARDS: usize = 8;

/// One shard, alone on its cache line.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Shard(AtomicU64);

/// A counter every proxy worker bumps on every request: each thread adds to its own shard,
/// so two workers never fight over one cache line (a shared atomic costs a cross-CPU
/// transfer per request, like HAProxy's per-thread counters avoid). Reading sums the shards.
#[derive(Debug, Default)]
pub(crate) struct Counter([Shard; SHARDS]);

impl Counter {
    /// Adds `n` (nothing to do for 0).
    pub(crate) fn add(&self, n: u64) {
        if n != 0 {
            self.0[shard()].0.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The total over every thread.
    pub(crate) fn get(&self) -> u64 {
        self.0
            .iter()
            .fold(0u64, |sum, s| sum.wrapping_add(s.0.load(Ordering::Relaxed)))
    }
}

/// The calling thread's shard, given out in turn the first time a thread counts.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
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
    /// Requests or connections sent again after failing on it.
    pub retries: u64,
    /// Of those, the ones sent to another Backend Service.
    pub redispatches: u64,
    /// HTTP answers it gave, by status class: 1xx, 2xx, 3xx, 4xx, 5xx.
    pub classes: [u64; 5],
}

impl BackendStats {
    /// Adds the counters of the same Backend Service in another vService (its totals over
    /// every vService it serves).
    pub fn absorb(&mut self, other: &BackendStats) {
        self.current += other.current;
        self.total += other.total;
        self.queued += other.queued;
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
        self.failures += other.failures;
        self.retries += other.retries;
        self.redispatches += other.redispatches;
        for (mine, theirs) in self.classes.iter_mut().zip(other.classes) {
            *mine += theirs;
        }
    }
}
