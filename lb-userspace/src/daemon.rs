//! `lb run`: the daemon that ties config -> health -> selection -> {XDP maps, L7 snapshot}.
//!
//! It owns the data path while it runs and leaves it attached when it exits; it publishes
//! what it knows about health in a report file beside the data-path state, which `lb
//! status` reads (the REST API of a later issue will serve the same facts).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::config::{self, Config};
use crate::health::{Cadence, HealthEngine, HealthState, View, reflect};
use crate::network::{DataPath, NetworkReflector};
use crate::selection::{Health, Published, Selections, server_state};

/// One health transition as reported.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReportTransition {
    /// Wall-clock time of the decision.
    pub at_unix_ms: u64,
    /// Previous state.
    pub from: String,
    /// New state.
    pub to: String,
    /// The last check's result.
    pub reason: String,
    /// The last check's duration.
    pub check_ms: u64,
}

/// One Backend Service as reported.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReportService {
    /// The engine's decision: OK, Error or Preparing.
    pub state: String,
    /// True when a health check is assigned.
    pub checked: bool,
    /// What Network traffic follows (after the S-RF2 delays).
    pub network: String,
    /// What HTTP / L7 TCP traffic follows (after the S-RF1 delay).
    pub l7: String,
    /// Recent transitions, oldest first (S-HC8).
    pub transitions: Vec<ReportTransition>,
}

/// Everything the daemon reports about health.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HealthReport {
    /// By Backend Service name.
    pub services: BTreeMap<String, ReportService>,
    /// Server state per address (S-SF): OK, Failed or Preparing.
    pub servers: BTreeMap<String, String>,
    /// Set while writing the XDP maps fails (the previous contents stay in force).
    pub network_error: Option<String>,
}

/// Where the running daemon of `pin_dir` writes its report.
pub fn report_path(pin_dir: &Path) -> PathBuf {
    let flat: String = pin_dir
        .to_string_lossy()
        .trim_matches('/')
        .chars()
        .map(|c| if c == '/' { '-' } else { c })
        .collect();
    Path::new("/run/lb").join(format!("{flat}.health.json"))
}

/// The last report of the daemon of `pin_dir`, if one ran.
pub fn read_report(pin_dir: &Path) -> Option<HealthReport> {
    let bytes = std::fs::read(report_path(pin_dir)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn health_name(h: Health) -> &'static str {
    match h {
        Health::Preparing => "Preparing",
        Health::Ok => "OK",
        Health::Error => "Error",
    }
}

fn as_health(s: HealthState) -> Health {
    match s {
        HealthState::Preparing => Health::Preparing,
        HealthState::Ok => Health::Ok,
        HealthState::Error => Health::Error,
    }
}

fn build_report(cfg: &Config, engine: &HealthEngine, net: &View, l7: &View) -> HealthReport {
    let snap = engine.snapshot();
    let mut report = HealthReport::default();
    let mut per_server: Vec<(IpAddr, Health)> = Vec::new();
    for svc in &cfg.backend_services {
        let Some(h) = snap.services.get(&svc.name) else {
            continue;
        };
        per_server.push((svc.address, as_health(h.state)));
        let transitions = engine
            .transitions(&svc.name)
            .into_iter()
            .map(|t| ReportTransition {
                at_unix_ms: t.at.unix_ms(),
                from: t.from.to_string(),
                to: t.to.to_string(),
                reason: t.reason,
                check_ms: t.check_duration.as_millis() as u64,
            })
            .collect();
        report.services.insert(
            svc.name.clone(),
            ReportService {
                state: h.state.to_string(),
                checked: h.checked,
                network: health_name(net.get(&svc.name)).into(),
                l7: health_name(l7.get(&svc.name)).into(),
                transitions,
            },
        );
    }
    for (addr, state) in server_state(&per_server) {
        let s = match state {
            crate::selection::ServerState::Ok => "OK",
            crate::selection::ServerState::Failed => "Failed",
            crate::selection::ServerState::Preparing => "Preparing",
        };
        report.servers.insert(addr.to_string(), s.into());
    }
    report
}

fn write_report(path: &Path, report: &HealthReport) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(report)?)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// The running daemon's parts, shared by its tasks.
struct Running {
    config: arc_swap::ArcSwap<Config>,
    engine: Arc<HealthEngine>,
    l7: Arc<Published>,
    l7_view: arc_swap::ArcSwap<View>,
}

/// Runs until SIGTERM or SIGINT; SIGHUP reloads `config_path`. `dp` is the loaded (or
/// adopted) data path with `cfg` already validated.
pub fn run(dp: DataPath, cfg: Config, config_path: PathBuf) -> Result<()> {
    let pin_dir = dp.pin_dir().map(Path::to_path_buf);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let cfg = Arc::new(cfg);
        let engine = Arc::new(HealthEngine::start(
            &cfg.backend_services,
            &cfg.health_checks,
        ));
        let running = Arc::new(Running {
            config: arc_swap::ArcSwap::new(cfg.clone()),
            engine: engine.clone(),
            l7: Arc::new(Published::default()),
            l7_view: arc_swap::ArcSwap::from_pointee(View::default()),
        });
        let network = NetworkReflector::start(dp, cfg.clone(), engine.clone());
        let (reload_tx, reload_rx) = watch::channel(0u64);
        let (stop_tx, stop_rx) = watch::channel(false);
        let l7_task = {
            let running = running.clone();
            let cadence = Cadence {
                down_every: cfg.reflection.l7_delay,
                up_every: cfg.reflection.l7_delay,
            };
            tokio::spawn(reflect(
                engine.clone(),
                cadence,
                View::default(),
                reload_rx,
                stop_rx.clone(),
                move |v: &View| {
                    let cfg = running.config.load();
                    running.l7.store(Selections::compute(&cfg, &|n| v.get(n)));
                    running.l7_view.store(Arc::new(v.clone()));
                },
            ))
        };
        let report_dir = pin_dir.clone();
        let report_task = pin_dir.map(|dir| {
            let running = running.clone();
            let net = network.status();
            let mut stop = stop_rx.clone();
            tokio::spawn(async move {
                let path = report_path(&dir);
                let mut last = None;
                loop {
                    let mut report = build_report(
                        &running.config.load(),
                        &running.engine,
                        &net.view(),
                        &running.l7_view.load(),
                    );
                    report.network_error = net.last_error();
                    if last.as_ref() != Some(&report) {
                        if let Err(e) = write_report(&path, &report) {
                            warn!("writing {}: {e:#}", path.display());
                        }
                        last = Some(report);
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                        _ = stop.changed() => break,
                    }
                }
            })
        });
        let mut hup = signal(SignalKind::hangup())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        info!("running; SIGHUP reloads {}", config_path.display());
        loop {
            tokio::select! {
                _ = hup.recv() => match config::load_with_warnings(&config_path) {
                    Ok((cfg, warnings)) => {
                        for w in warnings {
                            warn!("{w}");
                        }
                        let cfg = Arc::new(cfg);
                        running.config.store(cfg.clone());
                        engine.update(&cfg.backend_services, &cfg.health_checks);
                        network.update(cfg);
                        reload_tx.send_modify(|g| *g += 1);
                        info!("reloaded {}", config_path.display());
                    }
                    Err(e) => warn!("reload rejected, the running configuration stays:\n{e}"),
                },
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
        }
        let _ = stop_tx.send(true);
        network.shutdown().await;
        let _ = l7_task.await;
        if let Some(t) = report_task {
            let _ = t.await;
        }
        // Nobody keeps the report current any more.
        if let Some(dir) = &report_dir {
            let _ = std::fs::remove_file(report_path(dir));
        }
        info!("exiting; the data path stays attached");
        Ok::<(), anyhow::Error>(())
    })?;
    Ok(())
}
