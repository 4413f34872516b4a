//! A granted slot on a backend, and the per-backend state it holds on to.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use super::latency::Latency;
use super::limit::Gate;
use super::passive::{LiveError, Watch};
use super::stats::Counters;

/// One backend's limit, queue and counters within a pool.
#[derive(Debug, Default)]
pub(crate) struct Backend {
    /// Connection limit and queue.
    pub gate: Gate,
    /// Running totals.
    pub counters: Counters,
    /// Its run of live failures (passive health).
    pub watch: Watch,
    /// Its time-to-answer estimate (`peak-ewma`), fed by every answer.
    pub latency: Latency,
}

/// A granted slot on a backend: counts as one current session until dropped, when the slot
/// goes to the backend's longest waiter.
#[derive(Debug)]
pub struct Lease {
    name: String,
    addr: SocketAddr,
    set_cookie: Option<String>,
    /// Its profile's `passive_failures` (None: passive health off).
    passive_failures: Option<u32>,
    backend: Arc<Backend>,
    /// When the slot was granted: an answer's latency sample is measured from here.
    granted: Instant,
}

impl Lease {
    /// Wraps a slot already taken on `backend` (counted in `total` here).
    pub(crate) fn new(
        info: super::BackendInfo,
        set_cookie: Option<String>,
        backend: Arc<Backend>,
    ) -> Lease {
        backend.counters.total.add(1);
        Lease {
            name: info.name,
            addr: info.addr,
            set_cookie,
            passive_failures: info.passive_failures,
            backend,
            granted: Instant::now(),
        }
    }

    /// Name of the Backend Service to forward to.
    pub fn backend(&self) -> &str {
        &self.name
    }

    /// Address of the Backend Service to connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cookie persistence: the cookie value to Set-Cookie on the response when the client was
    /// (re)pinned by this pick (None when its cookie was already right or no cookie
    /// persistence).
    pub fn set_cookie(&self) -> Option<&str> {
        self.set_cookie.as_deref()
    }

    /// Adds transferred bytes to the backend's counters.
    pub fn add_bytes(&self, from_client: u64, to_client: u64) {
        self.backend.counters.bytes_in.add(from_client);
        self.backend.counters.bytes_out.add(to_client);
    }

    /// Marks the request/connection as failed upstream (`error` says how), counting
    /// towards passive health.
    pub fn fail(&self, error: LiveError) {
        self.backend.counters.failures.add(1);
        let limit = self.passive_failures;
        self.backend.watch.failed(&self.name, limit, error);
    }

    /// The backend answered with `status` (HTTP) or took the connection (L7 TCP, 0): a 5xx
    /// counts towards passive health, anything else ends a run of failures. The time since
    /// the slot was granted (connect and time to the answer's head) feeds the backend's
    /// latency estimate.
    pub fn answered(&self, status: u16) {
        let now = Instant::now();
        let took = now.saturating_duration_since(self.granted);
        self.backend.latency.record(took, now);
        if let Some(class) = (100..600)
            .contains(&status)
            .then(|| usize::from(status / 100 - 1))
        {
            self.backend.counters.classes[class].add(1);
        }
        if status >= 500 {
            let limit = self.passive_failures;
            let error = LiveError::Status(status);
            self.backend.watch.failed(&self.name, limit, error);
        } else {
            self.backend.watch.ok();
        }
    }

    /// Counts the request/connection leaving this backend for another try: on another
    /// backend (`redispatch`) or on a new connection to this one.
    pub fn count_retry(&self, redispatch: bool) {
        self.backend.counters.retries.add(1);
        if redispatch {
            self.backend.counters.redispatches.add(1);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.backend.gate.leave();
    }
}
