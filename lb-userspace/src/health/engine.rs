//! The health engine: the checks of every Backend Service with a profile (TCP checks on the
//! process's TCP check thread, the others one task each), a lock-free snapshot of every
//! service's state for the data path, change notifications and per-service logs.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use rand::Rng;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{BackendService, Handshake, HealthCheck, HealthKind, ipv6_health_key};
use crate::stats::{Histogram, HistogramSnapshot};

use super::clock::Clock;
use super::driver::{self, TcpCheck, TcpDriver};
use super::history::{CheckRecord, ServiceLog, Transition};
use super::probe::{NetworkProbes, ProbeFactory};
use super::scheduler::{self, CheckBook, CheckTask, ForcedError};
use super::state::HealthState;

/// Health of one Backend Service as the data path sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceHealth {
    /// Current state; always Ok for a service without a profile (S-HC6).
    pub state: HealthState,
    /// True when a health check profile is assigned.
    pub checked: bool,
}

/// An immutable view of every service's health, swapped atomically on each change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthSnapshot {
    /// Increases by one on every published change; equals the `subscribe` value.
    pub generation: u64,
    /// By Backend Service name.
    pub services: HashMap<String, ServiceHealth>,
}

impl HealthSnapshot {
    /// The state of `service`, or None when the engine does not know it.
    pub fn state(&self, service: &str) -> Option<HealthState> {
        self.services.get(service).map(|s| s.state)
    }
}

/// How the engine builds probes and schedules first checks; tests swap the probes.
#[derive(Clone)]
pub struct EngineOptions {
    /// Builds the probe of each service.
    pub probes: Arc<dyn ProbeFactory>,
    /// Start each service's first check after a random delay in [0, P) so that thousands of
    /// checks do not fire in the same millisecond. On by default.
    pub spread_first_checks: bool,
    /// The runtime the check tasks run on (e.g. an [`super::EngineThread`]'s); None: the
    /// runtime the engine is started from.
    pub runtime: Option<tokio::runtime::Handle>,
    /// States decided by the previous run (a restart): a service whose address, port and
    /// profile are the same starts in its saved OK or Error state instead of Preparing, its
    /// checks running as usual. Used by the first `start` only.
    pub restored: HashMap<String, Restored>,
}

/// A service's state as a previous run decided it, with what it was decided for.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Restored {
    /// OK or Error (Preparing is never restored).
    pub state: HealthState,
    /// The address checked.
    pub address: IpAddr,
    /// The port checked.
    pub port: u16,
    /// The profile's name.
    pub check: String,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            probes: Arc::new(NetworkProbes),
            spread_first_checks: true,
            runtime: None,
            restored: HashMap::new(),
        }
    }
}

/// Runs health checks and publishes their decisions (S-HC).
pub struct HealthEngine {
    shared: Arc<Shared>,
}

struct Shared {
    snapshot: ArcSwap<HealthSnapshot>,
    generation: watch::Sender<u64>,
    registry: Mutex<Registry>,
    /// Check durations per health check profile, kept across reloads (counters never go
    /// back) and shared by the check tasks of the profile's services.
    durations: Mutex<HashMap<String, Arc<Histogram>>>,
    clock: Clock,
    options: EngineOptions,
    runtime: tokio::runtime::Handle,
    /// Where TCP checks run when the probes are real ([`ProbeFactory::tcp_on_driver`]).
    driver: Option<&'static TcpDriver>,
}

#[derive(Default)]
struct Registry {
    entries: HashMap<String, Entry>,
    next_task: u64,
    generation: u64,
    /// When the snapshot was last published by a decision.
    last_publish: Option<tokio::time::Instant>,
    /// A deferred publish is scheduled.
    publish_pending: bool,
}

/// Decisions closer together than this are published together. Each publish copies the
/// whole snapshot (readers keep the old one), so publishing every decision of a mass change
/// (10,000 services warming up or failing together) would cost N x N; coalescing keeps it
/// at N per gap while a lone decision is still published at once. Far below S-RF1's 2.5 s.
const PUBLISH_GAP: Duration = Duration::from_millis(50);

struct Entry {
    spec: Spec,
    state: HealthState,
    task: Option<(u64, Running)>,
    log: Arc<Mutex<ServiceLog>>,
    /// Tells the check task that live traffic decided Error (passive health).
    forced_error: Arc<ForcedError>,
}

/// What decides whether a reload may keep a service's state and schedule.
#[derive(Clone, Debug, PartialEq)]
struct Spec {
    address: IpAddr,
    port: u16,
    /// Where the checks go and their socket mark: the address itself and 0, or a VIP and
    /// the mark of the tunnel towards the address (S-TN4).
    route: (IpAddr, u32),
    /// Shared by every service of the profile (and its check task): one copy per profile,
    /// not per service.
    check: Option<Arc<HealthCheck>>,
}

impl HealthEngine {
    /// Starts one task per Backend Service that has a health check profile, with real
    /// network probes.
    ///
    /// # Panics
    /// When called outside a Tokio runtime (the check tasks are spawned on it).
    pub fn start(services: &[BackendService], checks: &[HealthCheck]) -> HealthEngine {
        Self::start_with(services, checks, EngineOptions::default())
    }

    /// Like `start`, with chosen probes and scheduling (the seam timing tests use).
    ///
    /// # Panics
    /// When called outside a Tokio runtime.
    pub fn start_with(
        services: &[BackendService],
        checks: &[HealthCheck],
        options: EngineOptions,
    ) -> HealthEngine {
        let (generation, _) = watch::channel(0);
        let runtime = options
            .runtime
            .clone()
            .unwrap_or_else(tokio::runtime::Handle::current);
        let driver = options
            .probes
            .tcp_on_driver()
            .then(driver::shared)
            .flatten();
        let engine = HealthEngine {
            shared: Arc::new(Shared {
                snapshot: ArcSwap::from_pointee(HealthSnapshot::default()),
                generation,
                registry: Mutex::new(Registry::default()),
                durations: Mutex::default(),
                clock: Clock::start(),
                options,
                runtime,
                driver,
            }),
        };
        let restored = engine.shared.options.restored.clone();
        engine.update_with(services, checks, &restored);
        engine
    }

    /// How long the checks of each profile took (every check, passed or failed), by
    /// profile name: what `/metrics` shows as a histogram.
    pub fn check_durations(&self) -> HashMap<String, HistogramSnapshot> {
        lock(&self.shared.durations)
            .iter()
            .map(|(name, h)| (name.clone(), h.snapshot()))
            .collect()
    }

    /// Lock-free snapshot of every service's state.
    pub fn snapshot(&self) -> Arc<HealthSnapshot> {
        self.shared.snapshot.load_full()
    }

    /// Subscribe to state changes: the value is the snapshot generation.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.generation.subscribe()
    }

    /// The recorded transitions of `service`, oldest first (S-HC8); empty when unknown.
    pub fn transitions(&self, service: &str) -> Vec<Transition> {
        self.log_of(service)
            .map(|log| lock(&log).transitions())
            .unwrap_or_default()
    }

    /// How many transitions `service` has made since it appeared (0 when unknown); only the
    /// last ones are kept, see [`Self::transitions`].
    pub fn transition_count(&self, service: &str) -> u64 {
        self.log_of(service).map_or(0, |log| lock(&log).recorded())
    }

    /// The recent check results of `service`, oldest first, for plotting (S-OB3).
    pub fn checks(&self, service: &str) -> Vec<CheckRecord> {
        self.log_of(service)
            .map(|log| lock(&log).checks(&self.shared.clock))
            .unwrap_or_default()
    }

    /// The reason given by the latest check of `service`, if it was checked yet.
    pub fn last_reason(&self, service: &str) -> Option<String> {
        let log = self.log_of(service)?;
        let guard = lock(&log);
        let reason = guard.last_reason();
        (!reason.is_empty()).then(|| reason.to_string())
    }

    /// The latest check of every checked service (by health key) with its reason: what
    /// Live Stats shows as "last check". One pass over the services, no ring copied.
    pub fn last_checks(&self) -> HashMap<String, (CheckRecord, String)> {
        let logs: Vec<(String, Arc<Mutex<ServiceLog>>)> = {
            let registry = lock(&self.shared.registry);
            registry
                .entries
                .iter()
                .map(|(name, e)| (name.clone(), Arc::clone(&e.log)))
                .collect()
        };
        logs.into_iter()
            .filter_map(|(name, log)| {
                let guard = lock(&log);
                let (record, reason) = guard.last_check(&self.shared.clock)?;
                Some((name, (record, reason.to_string())))
            })
            .collect()
    }

    /// Replaces the set of checked services (reload). Services whose address, port and
    /// profile are unchanged keep their state and schedule; a changed or newly assigned
    /// profile starts again from Preparing (S-HC5); removed services disappear.
    pub fn update(&self, services: &[BackendService], checks: &[HealthCheck]) {
        self.update_with(services, checks, &HashMap::new());
    }

    /// [`Self::update`], new services starting in their `restored` state where it applies.
    fn update_with(
        &self,
        services: &[BackendService],
        checks: &[HealthCheck],
        restored: &HashMap<String, Restored>,
    ) {
        let targets = targets(services);
        let services = targets.as_slice();
        let shared = &self.shared;
        let mut registry = lock(&shared.registry);
        let mut changed = false;
        let profiles: HashMap<&str, Arc<HealthCheck>> = checks
            .iter()
            .map(|c| (c.name.as_str(), Arc::new(c.clone())))
            .collect();
        let wanted: HashMap<&str, Spec> = services
            .iter()
            .map(|s| (s.name.as_str(), spec_of(s, &profiles)))
            .collect();
        registry.entries.retain(|name, entry| {
            let keep = wanted.contains_key(name.as_str());
            if !keep {
                abort(entry);
                changed = true;
            }
            keep
        });
        for service in services {
            let spec = wanted[service.name.as_str()].clone();
            let existing = registry.entries.get(&service.name);
            if existing.is_some_and(|e| e.spec == spec) {
                continue;
            }
            changed = true;
            let log = existing.map_or_else(Default::default, |e| Arc::clone(&e.log));
            let previous = existing.map(|e| e.state);
            if let Some(old) = registry.entries.get_mut(&service.name) {
                abort(old);
            }
            let is_new = previous.is_none();
            let saved = restored.get(&service.name).filter(|r| {
                is_new
                    && r.state != HealthState::Preparing
                    && r.address == spec.address
                    && r.port == spec.port
                    && spec.check.as_ref().is_some_and(|c| c.name == r.check)
            });
            let state = match (&spec.check, saved) {
                (Some(_), Some(saved)) => saved.state,
                // Nothing would ever decide a passive profile's Preparing: live traffic
                // can only find it failing.
                (Some(c), None) if matches!(c.kind, HealthKind::Passive { .. }) => HealthState::Ok,
                (Some(_), None) => HealthState::Preparing,
                (None, _) => HealthState::Ok,
            };
            if saved.is_some() {
                lock(&log).push_transition(Transition {
                    at: shared.clock.now(),
                    from: HealthState::Preparing,
                    to: state,
                    reason: "restored from the previous run".to_string(),
                    check_duration: Duration::ZERO,
                });
            }
            if let Some(from) = previous.filter(|&from| from != state) {
                let reason = if spec.check.is_some() {
                    "health check (re)assigned"
                } else {
                    "health check removed: always OK"
                };
                lock(&log).push_transition(Transition {
                    at: shared.clock.now(),
                    from,
                    to: state,
                    reason: reason.to_string(),
                    check_duration: Duration::ZERO,
                });
            }
            let forced_error = Arc::new(ForcedError::default());
            let task = spec.check.as_ref().map(|profile| {
                registry.next_task += 1;
                let id = registry.next_task;
                let start = Start {
                    task_id: id,
                    log: Arc::clone(&log),
                    initial: state,
                    forced_error: Arc::clone(&forced_error),
                };
                (id, spawn_check(shared, service, profile, start))
            });
            registry.entries.insert(
                service.name.clone(),
                Entry {
                    spec,
                    state,
                    task,
                    log,
                    forced_error,
                },
            );
        }
        if changed {
            shared.publish(&mut registry);
        }
    }

    /// Passive health (S-RT3): live traffic to `service` failed as many times in a row as
    /// its profile's `passive_failures` allows. An OK service whose profile observes live
    /// traffic goes to Error at once, the transition saying why; its active check keeps
    /// running and brings it back after RS successes (S-HC5). False when nothing changed
    /// (unknown, unchecked, passive health off, not OK).
    pub fn live_failure(&self, service: &str, reason: &str) -> bool {
        let shared = &self.shared;
        let mut registry = lock(&shared.registry);
        let Some(entry) = registry.entries.get_mut(service) else {
            return false;
        };
        let observed = entry.spec.check.as_ref().and_then(|c| c.passive_failures);
        if observed.is_none() || entry.state != HealthState::Ok {
            return false;
        }
        entry.forced_error.raise();
        entry.state = HealthState::Error;
        let reason = format!("live traffic: {reason}");
        tracing::warn!(service, %reason, "health state changed: OK -> Error");
        lock(&entry.log).push_transition(Transition {
            at: shared.clock.now(),
            from: HealthState::Ok,
            to: HealthState::Error,
            reason,
            check_duration: Duration::ZERO,
        });
        registry.last_publish = Some(tokio::time::Instant::now());
        shared.publish(&mut registry);
        true
    }

    /// Stops every check task.
    pub fn shutdown(self) {
        drop(self);
    }

    fn log_of(&self, service: &str) -> Option<Arc<Mutex<ServiceLog>>> {
        let registry = lock(&self.shared.registry);
        registry.entries.get(service).map(|e| Arc::clone(&e.log))
    }
}

impl Drop for HealthEngine {
    fn drop(&mut self) {
        let mut registry = lock(&self.shared.registry);
        for entry in registry.entries.values_mut() {
            abort(entry);
        }
    }
}

impl Shared {
    /// Applies a decision of task `task_id`, unless a reload replaced that task meanwhile.
    fn apply(self: &Arc<Self>, name: &str, task_id: u64, transition: Transition) {
        let mut registry = lock(&self.registry);
        let Some(entry) = registry.entries.get_mut(name) else {
            return;
        };
        if entry.task.as_ref().map(|(id, _)| *id) != Some(task_id) {
            return;
        }
        entry.state = transition.to;
        lock(&entry.log).push_transition(transition);
        if registry.publish_pending {
            return;
        }
        let now = tokio::time::Instant::now();
        match registry
            .last_publish
            .map(|t| t + PUBLISH_GAP)
            .filter(|due| *due > now)
        {
            None => {
                registry.last_publish = Some(now);
                self.publish(&mut registry);
            }
            Some(due) => {
                registry.publish_pending = true;
                let weak = Arc::downgrade(self);
                self.runtime.spawn(async move {
                    tokio::time::sleep_until(due).await;
                    if let Some(shared) = weak.upgrade() {
                        let mut registry = lock(&shared.registry);
                        registry.publish_pending = false;
                        registry.last_publish = Some(tokio::time::Instant::now());
                        shared.publish(&mut registry);
                    }
                });
            }
        }
    }

    /// Builds and swaps in a new snapshot, then notifies subscribers.
    fn publish(&self, registry: &mut Registry) {
        registry.generation += 1;
        let services = registry
            .entries
            .iter()
            .map(|(name, e)| {
                let health = ServiceHealth {
                    state: e.state,
                    checked: e.spec.check.is_some(),
                };
                (name.clone(), health)
            })
            .collect();
        self.snapshot.store(Arc::new(HealthSnapshot {
            generation: registry.generation,
            services,
        }));
        self.generation.send_replace(registry.generation);
    }
}

/// Every address of every service as a service of its own: the `address6` of a dual-stack
/// service is checked apart, under its health key, since a server may answer over one
/// family and not the other. Single-address services are borrowed, not copied.
fn targets(services: &[BackendService]) -> Vec<Cow<'_, BackendService>> {
    let mut out = Vec::with_capacity(services.len());
    for service in services {
        let Some(v6) = service.address6 else {
            out.push(Cow::Borrowed(service));
            continue;
        };
        out.push(Cow::Owned(BackendService {
            address6: None,
            ..service.clone()
        }));
        out.push(Cow::Owned(BackendService {
            name: ipv6_health_key(&service.name),
            address: IpAddr::V6(v6),
            address6: None,
            ..service.clone()
        }));
    }
    out
}

fn spec_of(service: &BackendService, profiles: &HashMap<&str, Arc<HealthCheck>>) -> Spec {
    let check = service.health_check.as_ref().and_then(|wanted| {
        let found = profiles.get(wanted.as_str()).cloned();
        if found.is_none() {
            tracing::warn!(service = %service.name, profile = %wanted, "unknown health check profile; treating the service as unchecked");
        }
        found
    });
    Spec {
        address: service.address,
        port: service.port,
        route: service.check_route(service.address),
        check,
    }
}

/// How one check task starts.
struct Start {
    /// Its id: decisions of a replaced task are ignored.
    task_id: u64,
    log: Arc<Mutex<ServiceLog>>,
    /// Preparing, or a restored state.
    initial: HealthState,
    forced_error: Arc<ForcedError>,
}

fn spawn_check(
    shared: &Arc<Shared>,
    service: &BackendService,
    profile: &Arc<HealthCheck>,
    start: Start,
) -> Running {
    let Start {
        task_id,
        log,
        initial,
        forced_error,
    } = start;
    // The task holds a weak handle so a dropped engine is not kept alive by its own tasks.
    let weak = Arc::downgrade(shared);
    let name = service.name.clone();
    let on_change = move |transition| {
        if let Some(shared) = weak.upgrade() {
            shared.apply(&name, task_id, transition);
        }
    };
    let Some(probe) = shared.options.probes.build(service, profile) else {
        // No active check: live traffic decides, and Error lasts `return_after`.
        let return_after = match profile.kind {
            HealthKind::Passive { return_after } => return_after,
            _ => profile.period,
        };
        let name = service.name.clone();
        let clock = shared.clock;
        let passive =
            scheduler::run_passive(name, return_after, forced_error, initial, clock, on_change);
        return Running::Task(shared.runtime.spawn(passive));
    };
    let first_delay = if shared.options.spread_first_checks && !profile.period.is_zero() {
        rand::rng().random_range(Duration::ZERO..profile.period)
    } else {
        Duration::ZERO
    };
    let durations = Arc::clone(
        lock(&shared.durations)
            .entry(profile.name.clone())
            .or_default(),
    );
    let task = CheckTask {
        name: service.name.clone(),
        durations,
        profile: Arc::clone(profile),
        first_delay,
        log,
        clock: shared.clock,
        initial,
        forced_error,
    };
    if let (Some(driver), HealthKind::Tcp(handshake)) = (&shared.driver, &profile.kind)
        && service.port != 0
    {
        let (to, mark) = service.check_route(service.address);
        let id = driver.add(TcpCheck {
            addr: std::net::SocketAddr::new(to, service.port),
            mark,
            half_open: *handshake == Handshake::HalfOpen,
            first_delay,
            book: CheckBook::new(&task, on_change),
        });
        return Running::Driver(driver, id);
    }
    Running::Task(shared.runtime.spawn(scheduler::run(task, probe, on_change)))
}

/// Where a service's checks run.
enum Running {
    /// A task of its own on the engine's runtime.
    Task(JoinHandle<()>),
    /// The TCP driver's thread, under the id it gave.
    Driver(&'static TcpDriver, u64),
}

fn abort(entry: &mut Entry) {
    match entry.task.take() {
        Some((_, Running::Task(handle))) => handle.abort(),
        Some((_, Running::Driver(driver, id))) => driver.remove(id),
        None => {}
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
