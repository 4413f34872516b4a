//! The L7 proxy: HTTP and L7 TCP vServices.
//!
//! Each vService has a listener, a balancing [`balance::Pool`] and settings swapped whole on
//! reload. Every request (HTTP) or connection (L7 TCP) reads the published selection snapshot
//! (`lb::selection::Published`) for its list, so health, Maintenance and Backup changes apply
//! to new traffic at once, without restarting a listener or touching open connections
//! (S-BK4, S-MT1, S-MT3).

mod activity;
pub mod balance;
mod body;
mod conditions;
mod forward;
mod h1;
mod headers;
mod http;
mod listener;
mod responses;
mod retry;
mod runtime;
pub use runtime::VsCounts;
mod settings;
mod tcp;
mod tls;
mod upstream;
mod workers;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;

pub use http::MAX_RESPONSE_HEAD_BYTES;

use crate::config::{ByName, Config, VService, VServiceKind};
use crate::selection::Published;
use crate::stats::HistogramSnapshot;
use listener::Listener;
use runtime::{VsCounters, VsRuntime};
use settings::{VsSettings, listen_addr};

/// The running HTTP and L7 TCP vServices of the daemon.
pub struct Proxy {
    selections: Arc<Published>,
    state: Mutex<State>,
    /// Threads that serve the client connections (see `workers`).
    workers: Arc<workers::Workers>,
    /// Where every pool reports runs of live failures (passive health, S-RT3), under the
    /// ejection cap.
    live: Arc<balance::Ejections>,
    /// Its other end, until the daemon takes it.
    live_rx: Mutex<Option<UnboundedReceiver<balance::LiveFailure>>>,
    /// Listening sockets handed over by the `lb run` this one replaces, by address: used
    /// instead of binding anew at start (a zero-downtime upgrade), the rest closed after.
    inherited: Mutex<HashMap<SocketAddr, std::net::TcpListener>>,
}

#[derive(Default)]
struct State {
    /// Running listeners by vService name.
    listeners: HashMap<String, Listener>,
    /// Closed listeners whose connections are still finishing.
    retired: Vec<JoinHandle<()>>,
}

/// Counters of one vService, for the REST API, live stats and metrics (S-OB1).
#[derive(Clone, Debug)]
pub struct VsStats {
    /// vService name.
    pub name: String,
    /// `"http"` or `"l7-tcp"`.
    pub kind: String,
    /// Bound address.
    pub listen: SocketAddr,
    /// Its counters.
    pub counts: VsCounts,
    /// Per-backend counters of the vService's pool.
    pub pool: balance::PoolStats,
    /// HTTP: from each request's head to its answer's last byte.
    pub request_time: HistogramSnapshot,
    /// How long connects to its backends took.
    pub connect_time: HistogramSnapshot,
}

/// What a reload does with one vService.
enum Step {
    /// Same name, kind and address: new settings in place; the listener keeps running.
    Keep(String, Box<VsSettings>),
    /// New (or moved, or of another kind): a new listener on this socket.
    Start(Box<VService>, SocketAddr, Arc<TcpListener>, Box<VsSettings>),
}

impl Proxy {
    /// Binds every HTTP and L7 TCP vService of `cfg`; each request/connection reads
    /// `selections.load()` (lb::selection::Published) for its list.
    pub async fn start(cfg: Arc<Config>, selections: Arc<Published>) -> anyhow::Result<Proxy> {
        Self::start_inheriting(cfg, selections, HashMap::new()).await
    }

    /// Like [`Proxy::start`], listening on `inherited` sockets (from the `lb run` being
    /// replaced) where their address is a vService's instead of binding: connections waiting
    /// in their accept queues are served, none is refused. Unused ones are closed.
    pub async fn start_inheriting(
        cfg: Arc<Config>,
        selections: Arc<Published>,
        inherited: HashMap<SocketAddr, std::net::TcpListener>,
    ) -> anyhow::Result<Proxy> {
        let (live, live_rx) = tokio::sync::mpsc::unbounded_channel();
        let proxy = Proxy {
            live: Arc::new(balance::Ejections::new(live, selections.clone())),
            live_rx: Mutex::new(Some(live_rx)),
            inherited: Mutex::new(inherited),
            selections,
            state: Mutex::new(State::default()),
            workers: Arc::new(workers::Workers::start(
                cfg.proxy
                    .workers
                    .map_or_else(workers::default_count, usize::from),
                cfg.proxy.sched_slice,
            )?),
        };
        proxy.update(cfg).await?;
        proxy
            .inherited
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        Ok(proxy)
    }

    /// A copy of every listening socket, with its address, for the `lb run` that takes over
    /// (the copies share the sockets: closing ours later leaves theirs listening).
    pub fn listening_sockets(&self) -> Vec<(SocketAddr, std::os::fd::OwnedFd)> {
        use std::os::fd::AsFd;
        let state = self.lock();
        let mut out = Vec::new();
        for l in state.listeners.values() {
            match l.socket.as_fd().try_clone_to_owned() {
                Ok(fd) => out.push((l.rt.listen, fd)),
                Err(e) => {
                    tracing::warn!(vservice = %l.rt.name, "cannot copy the listening socket: {e}")
                }
            }
        }
        out
    }

    /// The runs of live failures that passive health acts on (S-RT3), for the daemon to
    /// hand to the health engine; None after the first call.
    pub fn take_live_failures(&self) -> Option<UnboundedReceiver<balance::LiveFailure>> {
        self.live_rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Reload: unchanged listeners keep running and open connections are untouched (S-MT3);
    /// new vServices bind; removed ones stop accepting (their open connections finish);
    /// changed settings (algorithm, persistence, timeouts, conditions, error page) apply to new
    /// requests. Fails without changing anything if a new listener cannot bind.
    pub async fn update(&self, cfg: Arc<Config>) -> anyhow::Result<()> {
        let mut state = self.lock();
        let steps = {
            let mut inherited = self
                .inherited
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            plan(&cfg, &state.listeners, &mut inherited)?
        };
        let wanted: Vec<&str> = steps
            .iter()
            .map(|s| match s {
                Step::Keep(name, _) => name.as_str(),
                Step::Start(vs, ..) => vs.name.as_str(),
            })
            .collect();
        let gone: Vec<String> = state
            .listeners
            .keys()
            .filter(|name| !wanted.contains(&name.as_str()))
            .cloned()
            .collect();
        let mut retired = Vec::new();
        for step in steps {
            match step {
                Step::Keep(name, settings) => {
                    if let Some(l) = state.listeners.get(&name) {
                        apply_in_place(&l.rt, *settings);
                    }
                }
                Step::Start(vs, listen, socket, settings) => {
                    let rt = self.runtime(&vs, listen, *settings);
                    tracing::info!(vservice = %vs.name, %listen, "L7 listener started");
                    let new = Listener::spawn(rt, socket, self.workers.clone());
                    if let Some(old) = state.listeners.insert(vs.name.clone(), new) {
                        retired.push(old.close());
                    }
                }
            }
        }
        for name in gone {
            if let Some(old) = state.listeners.remove(&name) {
                tracing::info!(vservice = %name, "L7 listener stopped accepting");
                retired.push(old.close());
            }
        }
        state.retired.retain(|t| !t.is_finished());
        state.retired.extend(retired);
        self.live.configure(&cfg);
        Ok(())
    }

    /// Per vService: kind, listen address, counters (requests, 400s, 503s, upstream aborts) and
    /// the pool's per-backend stats (lb::proxy::balance::PoolStats). Sorted by name.
    pub fn stats(&self) -> Vec<VsStats> {
        let state = self.lock();
        let mut out: Vec<VsStats> = state
            .listeners
            .values()
            .map(|l| {
                let rt = &l.rt;
                VsStats {
                    name: rt.name.clone(),
                    kind: kind_name(rt.kind).to_string(),
                    listen: rt.listen,
                    counts: rt.counters.read(),
                    pool: rt.pool.stats(),
                    request_time: rt.counters.request_times(),
                    connect_time: rt.settings.load().connect_time.snapshot(),
                }
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Session Affinity Manager (S-MT5): the pins of a vService; None if no such vService.
    pub fn pins(&self, vservice: &str) -> Option<Vec<balance::Pin>> {
        self.runtime_of(vservice).map(|rt| rt.pool.pins())
    }

    /// Rebalance: moves the pins of `backend` onto the other eligible backends of its list,
    /// e.g. before Maintenance (S-MT5). Returns how many moved; None if no such vService.
    pub fn rebalance(&self, vservice: &str, backend: &str) -> Option<usize> {
        self.runtime_of(vservice).map(|rt| rt.rebalance(backend))
    }

    /// Clear All: drops every pin of a vService. Returns how many; None if no such vService.
    pub fn clear_pins(&self, vservice: &str) -> Option<usize> {
        self.runtime_of(vservice).map(|rt| rt.pool.clear_pins())
    }

    /// Stops accepting; open connections get `grace` to finish, then are cut.
    pub async fn shutdown(&self, grace: Duration) {
        let mut tasks = {
            let mut state = self.lock();
            let mut tasks = std::mem::take(&mut state.retired);
            tasks.extend(state.listeners.drain().map(|(_, l)| l.close()));
            tasks
        };
        let deadline = tokio::time::Instant::now() + grace;
        for task in &mut tasks {
            if tokio::time::timeout_at(deadline, &mut *task).await.is_err() {
                task.abort();
            }
        }
        tracing::info!("L7 proxy stopped");
    }

    fn runtime(&self, vs: &VService, listen: SocketAddr, settings: VsSettings) -> Arc<VsRuntime> {
        let pool = balance::Pool::new(&vs.name, &settings.l7);
        pool.report_live_failures(self.live.clone());
        Arc::new(VsRuntime {
            name: vs.name.clone(),
            kind: vs.kind,
            listen,
            pool,
            settings: ArcSwap::from_pointee(settings),
            counters: Arc::new(VsCounters::default()),
            retry_budget: Default::default(),
            selections: self.selections.clone(),
        })
    }

    fn runtime_of(&self, vservice: &str) -> Option<Arc<VsRuntime>> {
        self.lock().listeners.get(vservice).map(|l| l.rt.clone())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Decides what happens to every L7 vService of `cfg`, building settings and binding new
/// sockets first so that any failure leaves the running proxy untouched. A new listener on
/// an address a running one gives up (renamed or changed vService) takes over its socket.
fn plan(
    cfg: &Config,
    running: &HashMap<String, Listener>,
    inherited: &mut HashMap<SocketAddr, std::net::TcpListener>,
) -> anyhow::Result<Vec<Step>> {
    let mut steps = Vec::new();
    let names = ByName::new(cfg);
    let limits = cfg.proxy.header_limits;
    for vs in cfg.vservices.iter().filter(|v| !v.kind.is_network()) {
        let listen = listen_addr(vs)?;
        let current = running.get(&vs.name);
        let same = current.filter(|l| l.rt.kind == vs.kind && l.rt.listen == listen);
        if let Some(l) = same {
            let previous = l.rt.settings.load();
            steps.push(Step::Keep(
                vs.name.clone(),
                Box::new(VsSettings::build(&names, vs, limits, Some(&previous))?),
            ));
            continue;
        }
        let kept = |l: &&Listener| {
            cfg.vservices.iter().any(|v| {
                v.name == l.rt.name
                    && v.kind == l.rt.kind
                    && listen_addr(v).ok() == Some(l.rt.listen)
            })
        };
        let handover = running
            .values()
            .find(|l| l.rt.listen == listen && !kept(l))
            .map(|l| l.socket.clone());
        let socket = match (handover, inherited.remove(&listen)) {
            (Some(socket), _) => socket,
            (None, Some(socket)) => Arc::new(
                socket
                    .set_nonblocking(true)
                    .and_then(|()| TcpListener::from_std(socket))
                    .with_context(|| format!("vService {}: the socket handed over", vs.name))?,
            ),
            (None, None) => Arc::new(
                bind(listen)
                    .with_context(|| format!("vService {}: cannot listen on {listen}", vs.name))?,
            ),
        };
        let settings = VsSettings::build(&names, vs, limits, None)?;
        steps.push(Step::Start(
            Box::new(vs.clone()),
            listen,
            socket,
            Box::new(settings),
        ));
    }
    Ok(steps)
}

/// Installs reloaded settings of a running vService; new requests use them.
fn apply_in_place(rt: &VsRuntime, settings: VsSettings) {
    rt.pool.update(&settings.l7);
    let known = |name: &str| {
        settings.default_info.contains_key(name)
            || settings.set_info.values().any(|m| m.contains_key(name))
    };
    rt.pool.retain_backends(&known);
    rt.settings.store(Arc::new(settings));
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

fn kind_name(kind: VServiceKind) -> &'static str {
    match kind {
        VServiceKind::L7Tcp => "l7-tcp",
        _ => "http",
    }
}
