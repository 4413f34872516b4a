//! One vService's balancing state, shared by all its connections.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::time::Instant;

use super::algorithm::{Algorithms, Candidate, choose_stateless};
use super::eject::Ejections;
use super::lease::{Backend, Lease};
use super::limit::WaitError;
use super::passive::Watch;
use super::persist::{CookiePin, Pin, Pins};
use super::stats::{BackendStats, PoolStats, Refusals};
use super::{BackendInfo, PickError, lock};
use crate::config::{Algorithm, L7Settings, Persistence};
use crate::selection::ListSelection;

/// Source-IP idle expiry used while persistence is not by source IP (the table is empty then).
const DEFAULT_IP_IDLE: Duration = Duration::from_secs(30 * 60);

/// The parts of the vService's settings balancing uses.
#[derive(Debug)]
struct Settings {
    algorithm: Algorithm,
    persistence: Persistence,
    queue_size: usize,
    queue_timeout: Duration,
}

impl Settings {
    fn from_l7(l7: &L7Settings) -> Settings {
        Settings {
            algorithm: l7.algorithm,
            persistence: l7.persistence.clone(),
            queue_size: l7.queue_size,
            queue_timeout: l7.timeouts.queue,
        }
    }

    fn ip_idle(&self) -> Duration {
        match self.persistence {
            Persistence::SourceIp { idle } => idle,
            _ => DEFAULT_IP_IDLE,
        }
    }
}

/// A backend chosen for a request, before its slot is taken.
struct Choice {
    info: BackendInfo,
    backend: Arc<Backend>,
    set_cookie: Option<String>,
}

/// One vService's balancing state: algorithm state, per-backend open counts and limits with
/// their queues, persistence pins, counters. Shared by all its connections (Arc).
#[derive(Debug)]
pub struct Pool {
    vservice: String,
    settings: ArcSwap<Settings>,
    /// Per-backend state by name: read lock-free on every request, copied on the rare
    /// insert or removal (under `backends_write`).
    backends: ArcSwap<HashMap<String, Arc<Backend>>>,
    backends_write: Mutex<()>,
    algorithms: Mutex<Algorithms>,
    pins: Mutex<Pins>,
    refusals: Refusals,
    /// Where runs of live failures are reported (passive health), set once at start.
    live: OnceLock<Arc<Ejections>>,
}

impl Pool {
    /// A pool for the vService `vservice` with its L7 settings.
    pub fn new(vservice: &str, l7: &L7Settings) -> Arc<Pool> {
        let settings = Settings::from_l7(l7);
        let pins = Pins::new(settings.ip_idle());
        Arc::new(Pool {
            vservice: vservice.to_owned(),
            settings: ArcSwap::from_pointee(settings),
            backends: ArcSwap::from_pointee(HashMap::new()),
            backends_write: Mutex::new(()),
            algorithms: Mutex::new(Algorithms::default()),
            pins: Mutex::new(pins),
            refusals: Refusals::default(),
            live: OnceLock::new(),
        })
    }

    /// Sends runs of live failures (passive health, S-RT3) to `report`, which caps them;
    /// set before traffic (backends already created keep reporting nowhere). A second call
    /// changes nothing.
    pub fn report_live_failures(&self, report: Arc<Ejections>) {
        let _ = self.live.set(report);
    }

    /// The vService this pool balances, for logs.
    pub fn vservice(&self) -> &str {
        &self.vservice
    }

    /// Reload: new algorithm/persistence/queue settings; keeps pins and counters of backends
    /// that still exist (see [`Pool::retain_backends`] to drop those of removed backends).
    /// Pins of a persistence kind no longer configured are dropped.
    pub fn update(&self, l7: &L7Settings) {
        let new = Settings::from_l7(l7);
        let old = self.settings.load();
        if old.algorithm != new.algorithm {
            lock(&self.algorithms).reset();
        }
        {
            let mut pins = lock(&self.pins);
            pins.keep_kinds(
                matches!(new.persistence, Persistence::SourceIp { .. }),
                matches!(new.persistence, Persistence::Cookie(_)),
            );
            pins.set_ip_idle(new.ip_idle());
        }
        self.settings.store(Arc::new(new));
    }

    /// Reload: forgets the counters and pins of backends `exists` rejects (removed from the
    /// configuration). A backend still serving or queueing keeps its state until idle.
    pub fn retain_backends(&self, exists: &dyn Fn(&str) -> bool) {
        {
            let _write = lock(&self.backends_write);
            let mut backends = HashMap::clone(&self.backends.load());
            backends.retain(|name, backend| {
                let usage = backend.gate.usage();
                exists(name) || usage.open > 0 || usage.queued > 0
            });
            self.backends.store(Arc::new(backends));
        }
        lock(&self.pins).retain_backends(exists);
    }

    /// Chooses a backend for a new request (HTTP) or connection (L7 TCP).
    /// `sel` is the list's selection from the snapshot; `info` resolves names (None = unknown).
    /// Persistence: `pin_key` is the cookie value (cookie persistence; None when the request
    /// had no valid cookie) or ignored for source-ip persistence (the pool uses `client`). A
    /// pinned backend is kept when it is in `sel.eligible`, or in `sel.drained` with configured
    /// weight 0 and not in maintenance (S-BK11: pinned clients of a drained backend continue);
    /// otherwise the client is re-pinned (S-MT5). At the connection limit the request WAITS in
    /// that backend's queue (bounded by queue_size; waits at most timeouts.queue) and never
    /// moves to another backend or the backup (S-BK8).
    ///
    /// The choice is made when this is called; the returned future (`Send`, borrowing only the
    /// pool, so it can run in spawned tasks) waits for the slot.
    pub fn acquire<'p>(
        &'p self,
        sel: &ListSelection,
        info: &dyn Fn(&str) -> Option<BackendInfo>,
        client: IpAddr,
        pin_key: Option<&str>,
    ) -> impl Future<Output = Result<Lease, PickError>> + Send + use<'p> {
        let (choice, queue_size, queue_timeout) = {
            let settings = self.settings.load();
            let choice = self.choose(&settings, sel, info, client, pin_key);
            (choice, settings.queue_size, settings.queue_timeout)
        };
        async move {
            let Some(choice) = choice else {
                self.refusals.no_backend.add(1);
                return Err(PickError::NoBackend);
            };
            match choice.backend.gate.enter(queue_size, queue_timeout).await {
                Ok(()) => Ok(Lease::new(choice.info, choice.set_cookie, choice.backend)),
                Err(WaitError::Full) => {
                    self.refusals.queue_full.add(1);
                    Err(PickError::QueueFull)
                }
                Err(WaitError::Timeout) => {
                    self.refusals.queue_timeouts.add(1);
                    Err(PickError::QueueTimeout)
                }
            }
        }
    }

    /// Counters per backend (S-OB1), sorted by backend name.
    pub fn stats(&self) -> PoolStats {
        let mut backends: Vec<BackendStats> = self
            .backends
            .load()
            .iter()
            .map(|(name, backend)| {
                let usage = backend.gate.usage();
                let counters = &backend.counters;
                BackendStats {
                    name: name.clone(),
                    current: usage.open,
                    total: counters.total.get(),
                    queued: usage.queued,
                    bytes_in: counters.bytes_in.get(),
                    bytes_out: counters.bytes_out.get(),
                    failures: counters.failures.get(),
                    retries: counters.retries.get(),
                    redispatches: counters.redispatches.get(),
                    classes: std::array::from_fn(|i| counters.classes[i].get()),
                }
            })
            .collect();
        backends.sort_by(|a, b| a.name.cmp(&b.name));
        PoolStats {
            backends,
            no_backend: self.refusals.no_backend.get(),
            queue_full: self.refusals.queue_full.get(),
            queue_timeouts: self.refusals.queue_timeouts.get(),
        }
    }

    /// True when `backend` is at its connection limit with its queue full: a retry does not
    /// go there (S-RT2), it would only be refused.
    pub fn full(&self, backend: &str) -> bool {
        let queue_size = self.settings.load().queue_size as u64;
        self.backends.load().get(backend).is_some_and(|b| {
            let usage = b.gate.usage();
            !usage.has_room && usage.queued >= queue_size
        })
    }

    /// Requests or connections holding a slot on any backend now (what a retry budget is a
    /// share of).
    pub fn current(&self) -> u64 {
        self.backends
            .load()
            .values()
            .map(|b| b.gate.usage().open)
            .sum()
    }

    /// Live persistence pins (Session Affinity Manager), sorted by key.
    pub fn pins(&self) -> Vec<Pin> {
        lock(&self.pins).list(Instant::now())
    }

    /// Moves every pin of `backend` onto the other eligible backends of `sel` (Rebalance),
    /// spread by weight. Cookie clients of `backend` are re-pinned elsewhere on their next
    /// request. Returns how many pins moved (0, and nothing changes, when no other backend
    /// is eligible).
    pub fn rebalance(
        &self,
        backend: &str,
        sel: &ListSelection,
        info: &dyn Fn(&str) -> Option<BackendInfo>,
    ) -> usize {
        let targets: Vec<&crate::selection::Eligible> = sel
            .eligible
            .iter()
            .filter(|e| e.name != backend && info(&e.name).is_some())
            .collect();
        if targets.is_empty() {
            tracing::warn!(vservice = %self.vservice, backend, "rebalance: no other eligible backend");
            return 0;
        }
        let cands: Vec<Candidate<'_>> = targets
            .iter()
            .map(|e| Candidate {
                name: &e.name,
                weight: e.weight,
                load: 0,
                has_room: true,
                latency: None,
            })
            .collect();
        let mut spread = Algorithms::default();
        let unspecified = IpAddr::from([0, 0, 0, 0]);
        let mut next = || {
            let at = spread
                .choose(Algorithm::WeightedRoundRobin, &cands, unspecified)
                .unwrap_or(0);
            cands[at].name.to_owned()
        };
        let moved = lock(&self.pins).rebalance(backend, &mut next);
        tracing::info!(vservice = %self.vservice, backend, moved, "rebalanced persistence pins");
        moved
    }

    /// Clear All: drops every pin (cookie clients are re-balanced on their next request).
    /// Returns how many pins were dropped.
    pub fn clear_pins(&self) -> usize {
        let dropped = lock(&self.pins).clear();
        tracing::info!(vservice = %self.vservice, dropped, "cleared persistence pins");
        dropped
    }

    /// Applies persistence and the algorithm; None when nothing can serve.
    fn choose(
        &self,
        settings: &Settings,
        sel: &ListSelection,
        info: &dyn Fn(&str) -> Option<BackendInfo>,
        client: IpAddr,
        pin_key: Option<&str>,
    ) -> Option<Choice> {
        // An IPv4 client seen on a dual-stack socket pins (and hashes) as itself.
        let client = client.to_canonical();
        let algorithm = settings.algorithm;
        match &settings.persistence {
            Persistence::None => self.pick(algorithm, sel, info, client, None),
            Persistence::SourceIp { .. } => {
                let now = Instant::now();
                let mut pins = lock(&self.pins);
                let pinned = pins.ip_pin(client, now);
                if let Some(kept) = pinned.as_deref().and_then(|n| self.keep(n, sel, info)) {
                    return Some(kept);
                }
                let choice = self.pick(algorithm, sel, info, client, None)?;
                if let Some(old) = pinned {
                    tracing::debug!(vservice = %self.vservice, %client, old, new = %choice.info.name, "re-pinned");
                }
                pins.pin_ip(client, &choice.info.name, now);
                Some(choice)
            }
            Persistence::Cookie(_) => {
                let now = Instant::now();
                let mut pins = lock(&self.pins);
                let presented = pin_key.map(|value| pins.cookie_pin(value, members(sel, info)));
                let mut choice = match presented {
                    Some(CookiePin::Valid(name)) => self
                        .keep(&name, sel, info)
                        .or_else(|| self.pick(algorithm, sel, info, client, None)),
                    Some(CookiePin::Moved(name)) => self
                        .pick(algorithm, sel, info, client, Some(&name))
                        .or_else(|| self.pick(algorithm, sel, info, client, None)),
                    Some(CookiePin::Stale) | None => self.pick(algorithm, sel, info, client, None),
                }?;
                let value = pins.cookie_value(&choice.info.name, choice.info.addr);
                pins.note_cookie(&value, &choice.info.name, now);
                if pin_key != Some(value.as_str()) {
                    choice.set_cookie = Some(value);
                }
                Some(choice)
            }
        }
    }

    /// The pinned backend `name`, if the pin still holds: it is eligible, or drained by
    /// weight 0 and not in maintenance (S-BK11). Otherwise (maintenance, down, backup on
    /// standby, unknown) the client must be re-pinned (S-MT5).
    fn keep(
        &self,
        name: &str,
        sel: &ListSelection,
        info: &dyn Fn(&str) -> Option<BackendInfo>,
    ) -> Option<Choice> {
        let bi = info(name)?;
        let eligible = sel.eligible.iter().any(|e| e.name == name);
        let drained = sel.drained.iter().any(|d| d == name) && bi.weight == 0 && !bi.maintenance;
        (eligible || drained).then(|| {
            let backend = self.backend(name);
            backend.gate.set_limit(bi.max_connections);
            Choice {
                backend,
                info: bi,
                set_cookie: None,
            }
        })
    }

    /// Runs the algorithm over the eligible backends of `sel` (except `exclude`).
    fn pick(
        &self,
        algorithm: Algorithm,
        sel: &ListSelection,
        info: &dyn Fn(&str) -> Option<BackendInfo>,
        client: IpAddr,
        exclude: Option<&str>,
    ) -> Option<Choice> {
        let mut found: Vec<(BackendInfo, u32, Arc<Backend>)> = sel
            .eligible
            .iter()
            .filter(|e| Some(e.name.as_str()) != exclude)
            .filter_map(|e| info(&e.name).map(|bi| (bi, e.weight)))
            .map(|(bi, weight)| {
                let backend = self.backend(&bi.name);
                backend.gate.set_limit(bi.max_connections);
                (bi, weight, backend)
            })
            .collect();
        let cands: Vec<Candidate<'_>> = found
            .iter()
            .map(|(bi, weight, backend)| {
                let usage = backend.gate.usage();
                Candidate {
                    name: &bi.name,
                    weight: *weight,
                    load: usage.open + usage.queued,
                    has_room: usage.has_room,
                    latency: Some(&backend.latency),
                }
            })
            .collect();
        let at = match cands.len() {
            0 => return None,
            1 => 0,
            _ => match choose_stateless(algorithm, &cands, client) {
                Some(at) => at,
                None => lock(&self.algorithms).choose(algorithm, &cands, client)?,
            },
        };
        let (info, _, backend) = found.swap_remove(at);
        Some(Choice {
            info,
            backend,
            set_cookie: None,
        })
    }

    /// The state of backend `name`, created on first use.
    fn backend(&self, name: &str) -> Arc<Backend> {
        if let Some(backend) = self.backends.load().get(name) {
            return Arc::clone(backend);
        }
        let _write = lock(&self.backends_write);
        let mut backends = HashMap::clone(&self.backends.load());
        let backend = backends.entry(name.to_owned()).or_insert_with(|| {
            Arc::new(Backend {
                watch: Watch::new(self.live.get().cloned()),
                ..Backend::default()
            })
        });
        let backend = Arc::clone(backend);
        self.backends.store(Arc::new(backends));
        backend
    }
}

/// Every member of the list (eligible, drained, down) with its address, for cookie lookup.
fn members<'a>(
    sel: &'a ListSelection,
    info: &'a dyn Fn(&str) -> Option<BackendInfo>,
) -> impl Iterator<Item = (&'a str, std::net::SocketAddr)> {
    sel.eligible
        .iter()
        .map(|e| e.name.as_str())
        .chain(sel.drained.iter().map(String::as_str))
        .chain(sel.down.iter().map(String::as_str))
        .filter_map(move |name| info(name).map(|bi| (name, bi.addr)))
}
