//! The live state of one L7 vService shared by its listener and every connection.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::balance::{BackendInfo, Counter, Lease, PickError, Pool};
use super::retry::RetryBudget;
use super::settings::VsSettings;
use crate::config::VServiceKind;
use crate::selection::{ListSelection, Published, Selections, Tier};
use crate::stats::{Histogram, HistogramSnapshot};

/// Counters of one vService (S-OB1), beside the pool's per-backend ones.
#[derive(Debug, Default)]
pub(crate) struct VsCounters {
    requests: Counter,
    bad_requests: Counter,
    unavailable: Counter,
    upstream_aborts: Counter,
    retries: Counter,
    retries_refused: Counter,
    client_aborts: Counter,
    server_timeouts: Counter,
    /// From a request's head to the end of its answer (HTTP).
    request_time: Histogram,
}

impl VsCounters {
    /// One request answered in `d`, from its head to its answer's last byte.
    pub(crate) fn observe_request(&self, d: std::time::Duration) {
        self.request_time.observe(d);
    }

    /// The request durations so far.
    pub(crate) fn request_times(&self) -> HistogramSnapshot {
        self.request_time.snapshot()
    }

    /// One more request (HTTP) or connection (L7 TCP).
    pub(crate) fn count_request(&self) {
        self.requests.add(1);
    }
    /// One more malformed request (answered 400/431 by the HTTP server).
    pub(crate) fn count_bad_request(&self) {
        self.bad_requests.add(1);
    }
    /// One more 503 or closed-at-once connection (S-BK9, queue full or timeout).
    pub(crate) fn count_unavailable(&self) {
        self.unavailable.add(1);
    }
    /// One more response or connection a backend cut short.
    pub(crate) fn count_abort(&self) {
        self.upstream_aborts.add(1);
    }

    /// One more request or connection sent to another server after a failed try.
    pub(crate) fn count_retry(&self) {
        self.retries.add(1);
    }
    /// One more retry the vService's retry budget did not allow.
    pub(crate) fn count_retry_refused(&self) {
        self.retries_refused.add(1);
    }
    /// One more request whose client left before its answer (the upstream was cancelled).
    pub(crate) fn count_client_abort(&self) {
        self.client_aborts.add(1);
    }
    /// One more request answered 504: its server stayed silent past the server timeout.
    pub(crate) fn count_server_timeout(&self) {
        self.server_timeouts.add(1);
    }

    /// Every counter at this moment.
    pub(crate) fn read(&self) -> VsCounts {
        VsCounts {
            requests: self.requests.get(),
            bad_requests: self.bad_requests.get(),
            unavailable: self.unavailable.get(),
            upstream_aborts: self.upstream_aborts.get(),
            retries: self.retries.get(),
            retries_refused: self.retries_refused.get(),
            client_aborts: self.client_aborts.get(),
            server_timeouts: self.server_timeouts.get(),
        }
    }
}

/// The counters of one vService at one moment (S-OB1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VsCounts {
    /// Requests (HTTP) or connections (L7 TCP) received.
    pub requests: u64,
    /// Malformed requests refused with 400/414/431 before reaching a backend.
    pub bad_requests: u64,
    /// 503 answers, or L7 TCP connections closed at once, for want of a backend (S-BK9) or
    /// a full or timed-out queue (S-BK8).
    pub unavailable: u64,
    /// Responses or connections a backend cut short.
    pub upstream_aborts: u64,
    /// Requests or connections sent to another server after a failed try (`retries`).
    pub retries: u64,
    /// Retries not made because the vService's retry budget was spent.
    pub retries_refused: u64,
    /// Requests whose client left before the answer came: the upstream request was
    /// cancelled (its connection closed, not reused).
    pub client_aborts: u64,
    /// 504 answers: a server stayed silent past the server timeout.
    pub server_timeouts: u64,
}

/// One running vService.
pub(crate) struct VsRuntime {
    /// vService name (the key in the selection snapshot).
    pub(crate) name: String,
    /// Http or L7Tcp.
    pub(crate) kind: VServiceKind,
    /// Bound address.
    pub(crate) listen: SocketAddr,
    /// Balancing state shared by all connections.
    pub(crate) pool: Arc<Pool>,
    /// Settings swapped whole on reload.
    pub(crate) settings: ArcSwap<VsSettings>,
    /// Counters.
    pub(crate) counters: Arc<VsCounters>,
    /// Retries under way, against `retry_budget`.
    pub(crate) retry_budget: RetryBudget,
    /// The selection snapshot the daemon publishes.
    pub(crate) selections: Arc<Published>,
}

/// The list to use when the snapshot does not know the vService yet: nothing is available.
static EMPTY: ListSelection = ListSelection {
    tier: Tier::None,
    eligible: Vec::new(),
    drained: Vec::new(),
    down: Vec::new(),
};

impl VsRuntime {
    /// The current snapshot (hold it across the pick; it is immutable).
    pub(crate) fn snapshot(&self) -> Arc<Selections> {
        self.selections.load()
    }

    /// The selection of one list of this vService in `snap`: the Default list (`None`) or a
    /// Conditional set's own list (S-BK6).
    pub(crate) fn list<'a>(&self, snap: &'a Selections, set: Option<&str>) -> &'a ListSelection {
        let Some(vs) = snap.lists.get(&self.name) else {
            return &EMPTY;
        };
        match set {
            None => &vs.default,
            Some(set) => vs
                .sets
                .iter()
                .find(|(name, _)| name == set)
                .map_or(&EMPTY, |(_, sel)| sel),
        }
    }

    /// Chooses a backend of the Default list (`set` None) or a Conditional set's list from the
    /// current snapshot, with persistence (`pin_key`: the request's persistence cookie), and
    /// returns the wait for its slot (S-BK8). The choice is made now; the future only waits.
    pub(crate) fn acquire<'s>(
        &'s self,
        settings: &VsSettings,
        set: Option<&str>,
        client: IpAddr,
        pin_key: Option<&str>,
    ) -> impl Future<Output = Result<Lease, PickError>> + Send + use<'s> {
        self.acquire_other(settings, set, client, pin_key, &[])
    }

    /// Like [`Self::acquire`], leaving out `tried`: the servers this request or connection
    /// already failed on (a retry goes to another server of the same list; a client pinned
    /// to a tried server is re-pinned, S-MT5), and servers full with a full queue.
    pub(crate) fn acquire_other<'s>(
        &'s self,
        settings: &VsSettings,
        set: Option<&str>,
        client: IpAddr,
        pin_key: Option<&str>,
        tried: &[String],
    ) -> impl Future<Output = Result<Lease, PickError>> + Send + use<'s> {
        let snap = self.selections.peek();
        let infos = settings.info(set);
        let info = |name: &str| -> Option<BackendInfo> { infos.get(name).cloned() };
        let list = self.list(&snap, set);
        if tried.is_empty() {
            return self.pool.acquire(list, &info, client, pin_key);
        }
        // A retry goes neither where this request failed nor where it would be refused
        // (S-RT2); selection already left out Maintenance and Error.
        let avoid = |name: &String| tried.contains(name) || self.pool.full(name);
        let mut others = list.clone();
        others.eligible.retain(|e| !avoid(&e.name));
        others.drained.retain(|name| !avoid(name));
        self.pool.acquire(&others, &info, client, pin_key)
    }

    /// Rebalance (S-MT5): moves the pins of `backend` onto the other eligible backends of the
    /// first list (Default, then the sets) that has it as a member.
    pub(crate) fn rebalance(&self, backend: &str) -> usize {
        let snap = self.snapshot();
        let settings = self.settings.load();
        let sets = settings.set_info.keys().map(|s| Some(s.as_str()));
        let list = std::iter::once(None)
            .chain(sets)
            .find(|set| settings.info(*set).contains_key(backend));
        let set = list.flatten();
        let sel = self.list(&snap, set);
        let infos = settings.info(set);
        let info = |name: &str| -> Option<BackendInfo> { infos.get(name).cloned() };
        self.pool.rebalance(backend, sel, &info)
    }
}
