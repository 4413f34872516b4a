//! `lb run`: the daemon that ties config -> health -> selection -> {XDP maps, L7 snapshot}.
//!
//! It owns the data path while it runs and leaves it attached when it exits. [`Daemon`] is
//! the handle its parts (signals, the REST API) share: read the running configuration and
//! health, apply a new configuration, read counters.

mod announce;
mod report;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use arc_swap::ArcSwap;
use tokio::sync::watch;
use tracing::{info, warn};

pub use announce::{Announcements, VipAnnouncement, drained_path};
pub use report::{
    HealthReport, ReportService, ReportTransition, read_report, read_states, report_path,
    states_path,
};

use crate::config::{self, Config};
use crate::gslb::{Gslb, GslbReader};
use crate::health::{
    Cadence, EngineOptions, EngineThread, HealthEngine, HealthSnapshot, HealthState, View, reflect,
};
use crate::network::{self, DataPath, LoadOptions, NetworkReflector, NetworkStatus};
use crate::proxy::Proxy;
use crate::selection::{Published, Selections};

/// The running daemon, shared by its tasks and the API.
pub struct Daemon {
    config_path: PathBuf,
    config: ArcSwap<Config>,
    /// The configuration `lb run` started with: what the settings read only at start hold.
    started: Arc<Config>,
    engine: Arc<HealthEngine>,
    selections: Arc<Published>,
    l7_view: ArcSwap<View>,
    network: Mutex<Option<NetworkReflector>>,
    network_status: Option<NetworkStatus>,
    pin_dir: Option<PathBuf>,
    reload: watch::Sender<u64>,
    /// One configuration change at a time.
    applying: tokio::sync::Mutex<()>,
    /// The reload generation the published L7 selections include: an apply waits for it.
    published: watch::Sender<u64>,
    /// HTTP and L7 TCP vServices (binds nothing when there are none).
    proxy: Proxy,
    /// DNS vServices (S-GS), started with the first one configured.
    gslb: tokio::sync::Mutex<Option<Gslb>>,
    /// Their lock-free view, set when they start: the API reads it without waiting for a
    /// reload, which holds `gslb` while it polls the sites (maybe this daemon's own API).
    gslb_reader: std::sync::OnceLock<GslbReader>,
    /// VIP route announcement (S-AN) and the drained flag.
    announcer: Arc<announce::Announcer>,
    /// Runs the engine's check tasks; lives as long as the daemon.
    _engine_thread: EngineThread,
}

impl Daemon {
    /// The running configuration.
    pub fn config(&self) -> Arc<Config> {
        self.config.load_full()
    }

    /// Settings of `new` that differ from the running ones but take effect only at the next
    /// restart (one line each), for a reload to report.
    pub fn restart_only_changes(&self, new: &Config) -> Vec<String> {
        config::restart_only_changes(&self.started, new)
    }

    /// Saves every checked service's decision now (as it is saved each second), so an `lb
    /// run` taking over starts from the latest.
    pub fn save_health_states(&self) -> Result<()> {
        let states = report::current_states(&self.config(), &self.engine);
        report::save_states(&report::states_path(&self.config_path), &states)
    }

    /// Copies of every DNS vService's sockets (address, UDP, TCP), for an upgrade.
    pub async fn dns_sockets(
        &self,
    ) -> Vec<(SocketAddr, std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
        match self.gslb.lock().await.as_ref() {
            Some(gslb) => gslb.listening_sockets().await,
            None => Vec::new(),
        }
    }

    /// Changes each time a configuration change is applied (a reload, the API, etcd): for
    /// the parts that follow the listeners it may open or close (systemd's socket store).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.reload.subscribe()
    }

    /// The configuration file the daemon was started with (changes are written back to it).
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// The health engine (transitions, check durations).
    pub fn engine(&self) -> &HealthEngine {
        &self.engine
    }

    /// What HTTP and L7 TCP traffic currently follows, per list (lock-free).
    pub fn selections(&self) -> Arc<Selections> {
        self.selections.load()
    }

    /// The L7 proxy: counters and the Session Affinity Manager.
    pub fn proxy(&self) -> Option<&Proxy> {
        Some(&self.proxy)
    }

    /// Site statuses, transitions and counters of the DNS vServices (None when there are none).
    pub async fn gslb_status(&self) -> Option<GslbStatus> {
        let g = self.gslb_reader.get()?;
        Some(GslbStatus {
            sites: g.status(),
            transitions: g.transitions(),
            counters: g.counters(),
            names: g.names(),
        })
    }

    /// The shared snapshot holder the proxy reads.
    pub fn published(&self) -> Arc<Published> {
        self.selections.clone()
    }

    /// Health as reported by `lb status` (engine decisions, reflected views, servers).
    pub fn health_report(&self) -> HealthReport {
        let net = self
            .network_status
            .as_ref()
            .map(NetworkStatus::view)
            .unwrap_or_default();
        let mut r = report::build_report(&self.config(), &self.engine, &net, &self.l7_view.load());
        r.network_error = self
            .network_status
            .as_ref()
            .and_then(NetworkStatus::last_error);
        r
    }

    /// The pin directory of the XDP data path, when this daemon runs one.
    pub fn pin_dir(&self) -> Option<&Path> {
        self.pin_dir.as_deref()
    }

    /// The digest of every Network VIP's Maglev table as last written, by "vService VIP";
    /// empty without a data path.
    pub fn table_digests(&self) -> std::collections::BTreeMap<String, String> {
        self.network_status
            .as_ref()
            .map(|s| (*s.table_digests()).clone())
            .unwrap_or_default()
    }

    /// XDP counters and backend slots, read from the pinned maps.
    pub fn network_status(&self) -> Option<Result<network::Status>> {
        let dir = self.pin_dir.as_ref()?;
        let opts = LoadOptions {
            pin_dir: Some(dir.clone()),
            conn_table_size: 0,
        };
        Some(DataPath::load(&[], &opts).and_then(|dp| dp.status()))
    }

    /// Which VIPs are announced to the routers, and why (S-AN).
    pub fn announcements(&self) -> Arc<Announcements> {
        self.announcer.announcements()
    }

    /// Drains the node (`true`): every VIP route is withdrawn at once while the data path
    /// keeps forwarding established flows (S-AN2); the flag is saved, so a restarted `lb
    /// run` stays drained. `false` resumes. Returns once the table has been re-read.
    pub async fn set_drained(&self, drained: bool) -> Result<()> {
        self.announcer.set_drained(drained)?;
        // The task takes the change on its next round (it was kicked): wait for it.
        for _ in 0..50 {
            if self.announcer.announcements().drained == drained {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        info!(drained, "node drain state changed");
        Ok(())
    }

    /// Re-reads the configuration file and applies it. A file that fails validation is
    /// rejected with every error and the running configuration stays. Changed settings that
    /// apply only at the next start are logged as warnings.
    pub async fn reload_from_file(&self) -> Result<()> {
        let (cfg, warnings) = config::load_with_warnings(&self.config_path)
            .map_err(|e| anyhow!("{e}"))
            .with_context(|| format!("reload of {} rejected", self.config_path.display()))?;
        let later = self.restart_only_changes(&cfg);
        self.apply(cfg).await?;
        for w in warnings.iter().chain(&later) {
            warn!("{w}");
        }
        Ok(())
    }

    /// Applies a validated configuration to every part without restarting listeners or
    /// touching open connections; health states of unchanged services carry over.
    pub async fn apply(&self, cfg: Config) -> Result<()> {
        let _one = self.applying.lock().await;
        // Plan first: a configuration the data path cannot take changes nothing.
        network::plan(&cfg, &|_| crate::selection::Health::Ok)?;
        crate::routing::check(&cfg.bgp)?;
        let cfg = Arc::new(cfg);
        // Listeners next: one that cannot bind rejects the whole change.
        self.proxy.update(cfg.clone()).await?;
        {
            let mut gslb = self.gslb.lock().await;
            match gslb.as_ref() {
                Some(g) => g.update(cfg.clone()).await?,
                None if !cfg.dns_vservices.is_empty() => {
                    let started = Gslb::start(cfg.clone()).await?;
                    let _ = self.gslb_reader.set(started.reader());
                    *gslb = Some(started)
                }
                None => {}
            }
        }
        self.config.store(cfg.clone());
        self.engine
            .update(&cfg.backend_services, &cfg.health_checks);
        let network_generation = self
            .network
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|n| n.update(cfg.clone()));
        self.reload.send_modify(|g| *g += 1);
        self.announcer.kick();
        // Admin changes (Maintenance, Backup, weight) hold for L7 traffic when this returns:
        // a request picked after the API answered sees them (S-MT3).
        let target = *self.reload.borrow();
        let mut published = self.published.subscribe();
        let wait = published.wait_for(|&generation| generation >= target);
        if tokio::time::timeout(Duration::from_secs(5), wait)
            .await
            .is_err()
        {
            warn!("the L7 selections were not republished within 5 s of a configuration change");
        }
        // And for Network vServices that follow them (`apply_admin_state`), once the maps
        // are written (S-MT3, S-MT7).
        let follows_admin = cfg
            .vservices
            .iter()
            .any(|v| v.kind.is_network() && v.apply_admin_state);
        let written = network_generation
            .filter(|_| follows_admin)
            .and_then(|generation| {
                let network = self.network.lock().unwrap_or_else(PoisonError::into_inner);
                network.as_ref().map(|n| (generation, n.written()))
            });
        if let Some((generation, mut written)) = written {
            let wait = written.wait_for(|&g| g >= generation);
            if tokio::time::timeout(Duration::from_secs(5), wait)
                .await
                .is_err()
            {
                warn!("the XDP maps were not rewritten within 5 s of a configuration change");
            }
        }
        info!("configuration applied");
        Ok(())
    }
}

/// What the DNS vServices report (S-GS4).
#[derive(Clone, Debug, serde::Serialize)]
pub struct GslbStatus {
    /// Every site of every record, with its status.
    pub sites: Vec<crate::gslb::SiteStatus>,
    /// Status changes, oldest first.
    pub transitions: Vec<crate::gslb::SiteTransition>,
    /// Query counters per DNS vService.
    pub counters: Vec<crate::gslb::DnsCounters>,
    /// What each name answers now, with its policy.
    pub names: Vec<crate::gslb::NameNow>,
}

/// A started daemon: its handle and the tasks that keep it current.
pub struct Running {
    /// The shared handle.
    pub daemon: Arc<Daemon>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Stops the tasks; the data path (if any) stays attached as last written.
    pub async fn stop(self) {
        self.finish(false).await;
    }

    /// Ends this daemon after another `lb run` took over its listening sockets (an
    /// upgrade): it stops accepting, lets open requests and connections finish within
    /// `drain` while health checking goes on, then stops, leaving the data path and the
    /// files the successor now keeps current.
    pub async fn hand_over(self, drain: Duration) {
        self.daemon.proxy.shutdown(drain).await;
        self.finish(true).await;
    }

    async fn finish(self, handed_over: bool) {
        let _ = self.stop.send(true);
        let network = self
            .daemon
            .network
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(n) = network {
            n.shutdown().await;
        }
        for t in self.tasks {
            let _ = t.await;
        }
        if !handed_over {
            self.daemon.proxy.shutdown(Duration::from_secs(5)).await;
        }
        if let Some(g) = self.daemon.gslb.lock().await.take() {
            g.shutdown().await;
        }
        // Nobody keeps the report current any more (unless a successor does).
        if let Some(dir) = self.daemon.pin_dir.as_ref().filter(|_| !handed_over) {
            let _ = std::fs::remove_file(report_path(dir));
        }
    }
}

/// Starts health checking, reflection, the L7 proxy and (with `dp`) the Network reflector
/// inside the current Tokio runtime. Without a data path (a configuration with no Network
/// vService) everything else runs the same. Fails when an L7 listener cannot bind.
pub async fn start(dp: Option<DataPath>, cfg: Config, config_path: PathBuf) -> Result<Running> {
    start_with(dp, cfg, config_path, StartOptions::default()).await
}

/// How a daemon starts besides its configuration.
#[derive(Debug)]
pub struct StartOptions {
    /// Listening sockets handed over by the `lb run` this one replaces, by address: the L7
    /// vServices listen on them instead of binding.
    pub inherited: HashMap<SocketAddr, std::net::TcpListener>,
    /// The same for the DNS vServices' sockets.
    pub dns: crate::gslb::DnsSockets,
    /// Saved health decisions younger than this are restored (`lb run --restore-within`,
    /// default 30 s; zero restores none).
    pub restore_within: Duration,
}

impl Default for StartOptions {
    fn default() -> Self {
        StartOptions {
            inherited: HashMap::new(),
            dns: Default::default(),
            restore_within: report::RESTORE_WITHIN,
        }
    }
}

/// Like [`start`], with `options`.
pub async fn start_with(
    dp: Option<DataPath>,
    cfg: Config,
    config_path: PathBuf,
    options: StartOptions,
) -> Result<Running> {
    let StartOptions {
        inherited,
        dns,
        restore_within,
    } = options;
    let pin_dir = dp.as_ref().and_then(|d| d.pin_dir().map(Path::to_path_buf));
    crate::routing::check(&cfg.bgp)?;
    let cfg = Arc::new(cfg);
    let selections = Arc::new(Published::default());
    let engine_thread = EngineThread::start().context("starting the health checks' thread")?;
    // A restart (an upgrade, a crash) within 30 s (by default) keeps every service's decision
    // instead of sending them all back to Preparing, which would refuse traffic until RS
    // checks pass.
    let states_path = report::states_path(&config_path);
    let engine = Arc::new(HealthEngine::start_with(
        &cfg.backend_services,
        &cfg.health_checks,
        EngineOptions {
            runtime: Some(engine_thread.handle()),
            restored: match restore_within.is_zero() {
                true => HashMap::new(),
                false => report::read_states(&states_path, restore_within),
            },
            ..EngineOptions::default()
        },
    ));
    // The first selections before the first connection is accepted: the restored (or
    // Preparing) states as they are, so an upgrade's new process never answers from an
    // empty snapshot while the reflection task starts.
    let first = engine.snapshot();
    let health = |name: &str| first.state(name).unwrap_or(HealthState::Preparing);
    selections.store(Selections::compute(&cfg, &health));
    let proxy = Proxy::start_inheriting(cfg.clone(), selections.clone(), inherited).await?;
    let gslb = match cfg.dns_vservices.is_empty() {
        true => None,
        false => Some(Gslb::start_inheriting(cfg.clone(), dns).await?),
    };
    let network = dp.map(|dp| NetworkReflector::start(dp, cfg.clone(), engine.clone()));
    let (reload, reload_rx) = watch::channel(0u64);
    let announcer = Arc::new(announce::Announcer::new(&config_path));
    let daemon = Arc::new(Daemon {
        config_path,
        config: ArcSwap::new(cfg.clone()),
        started: cfg.clone(),
        engine: engine.clone(),
        selections,
        l7_view: ArcSwap::from_pointee(View::default()),
        network_status: network.as_ref().map(NetworkReflector::status),
        network: Mutex::new(network),
        pin_dir: pin_dir.clone(),
        reload,
        applying: tokio::sync::Mutex::new(()),
        published: watch::channel(0).0,
        proxy,
        gslb_reader: gslb
            .as_ref()
            .map_or_else(std::sync::OnceLock::new, |g| g.reader().into()),
        gslb: tokio::sync::Mutex::new(gslb),
        announcer: announcer.clone(),
        _engine_thread: engine_thread,
    });
    let (stop, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let d = daemon.clone();
    let cadence = Cadence::l7_within(cfg.reflection.l7_delay);
    tasks.push(tokio::spawn(reflect(
        engine,
        cadence,
        View::default(),
        reload_rx,
        stop_rx.clone(),
        move |v: &View| {
            // Read first: the configuration loaded next is at least that reload's.
            let generation = *d.reload.borrow();
            let cfg = d.config.load();
            d.selections.store(Selections::compute(&cfg, &|n| v.get(n)));
            d.l7_view.store(Arc::new(v.clone()));
            d.published.send_replace(generation);
        },
    )));
    {
        let d = daemon.clone();
        let mut stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            // What the file was last written from: while neither changed, the states are
            // the same and only the file's time is brought forward (not 50,000 entries
            // serialized every second).
            let mut last: Option<(Arc<HealthSnapshot>, Arc<Config>)> = None;
            loop {
                let stopping = tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => false,
                    _ = stop.changed() => true,
                };
                // Saved every second, changed or not, and once more at the end: a restart
                // after a crash (no save at exit) reads the file's time against
                // --restore-within, so a file saved only on changes would be too old after
                // 30 quiet seconds and every service would restart in Preparing (503s).
                let (snap, cfg) = (d.engine.snapshot(), d.config());
                let unchanged = last
                    .as_ref()
                    .is_some_and(|(s, c)| Arc::ptr_eq(s, &snap) && Arc::ptr_eq(c, &cfg));
                let saved = if unchanged {
                    report::touch_states(&states_path)
                } else {
                    report::save_states(&states_path, &report::current_states(&cfg, &d.engine))
                };
                match saved {
                    Ok(()) => last = Some((snap, cfg)),
                    Err(e) => {
                        warn!("saving health states to {}: {e:#}", states_path.display());
                        last = None;
                    }
                }
                if stopping {
                    break;
                }
            }
        }));
    }
    {
        let inputs = announce::Inputs {
            daemon: Arc::downgrade(&daemon),
            network: daemon.network_status.clone(),
        };
        tasks.push(tokio::spawn(announce::run(
            announcer,
            inputs,
            stop_rx.clone(),
        )));
    }
    if let Some(mut live) = daemon.proxy.take_live_failures() {
        // Passive health (S-RT3): runs of failed live traffic the proxy saw decide Error.
        let engine = daemon.engine.clone();
        let mut stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let failure = tokio::select! {
                    failure = live.recv() => failure,
                    _ = stop.changed() => None,
                };
                let Some(failure) = failure else { break };
                engine.live_failure(&failure.backend, &failure.reason);
            }
        }));
    }
    if let Some(dir) = pin_dir {
        let d = daemon.clone();
        let mut stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            let path = report_path(&dir);
            let mut last = None;
            loop {
                let r = d.health_report();
                if last.as_ref() != Some(&r) {
                    if let Err(e) = report::write_report(&path, &r) {
                        warn!("writing {}: {e:#}", path.display());
                    }
                    last = Some(r);
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    _ = stop.changed() => break,
                }
            }
        }));
    }
    Ok(Running {
        daemon,
        stop,
        tasks,
    })
}
