//! Which VIPs this balancer announces (S-AN), and the task that keeps the routing table
//! (through [`crate::routing`]) in step: a VIP is announced while the data path is loaded,
//! its vService can take new traffic and the node is not drained; otherwise withdrawn.
//! Nothing is withdrawn when `lb run` stops (S-AN3): forwarding goes on without it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use arc_swap::ArcSwap;
use serde::Serialize;
use tokio::sync::{Notify, watch};
use tracing::{info, warn};

use crate::config::{BgpSettings, Config};
use crate::network::{self, NetworkStatus, VipPlan};
use crate::routing::{VipRoutes, withdraw_all};

/// How often the decisions are re-read when nothing kicks the task.
const TICK: Duration = Duration::from_millis(200);

/// What is announced and why, for the API, `/metrics` and the Live Stats page.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Announcements {
    /// `[bgp] enabled`.
    pub enabled: bool,
    /// The routing table of the VIP routes.
    pub table: u32,
    /// The device the routes point at, if any.
    pub device: Option<String>,
    /// The node is drained (`lb node drain`): nothing is announced.
    pub drained: bool,
    /// Still waiting out `bgp.announce_delay` after the start: the table is left as it is.
    pub waiting: bool,
    /// Every Network VIP with its announcement.
    pub vips: Vec<VipAnnouncement>,
    /// The last failure to change the table, while it lasts.
    pub error: Option<String>,
}

/// One VIP address (the vServices sharing it are announced together).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct VipAnnouncement {
    /// The VIP.
    pub address: IpAddr,
    /// The vServices on it.
    pub vservices: Vec<String>,
    /// Its route is in the table (routers may send its traffic here).
    pub announced: bool,
    /// Why, in the operator's words.
    pub reason: String,
}

impl Announcements {
    /// How many VIPs are announced now.
    pub fn announced_count(&self) -> usize {
        self.vips.iter().filter(|v| v.announced).count()
    }
}

/// The drained flag of the daemon of `config_path`, kept in a file so that a restarted
/// `lb run` stays drained (S-AN2) until `lb node resume`.
pub fn drained_path(config_path: &Path) -> PathBuf {
    let absolute = std::fs::canonicalize(config_path).unwrap_or_else(|_| config_path.into());
    network::run_file(&absolute, "drained")
}

/// The shared state of the announcer.
pub(crate) struct Announcer {
    drained: AtomicBool,
    drained_file: PathBuf,
    kick: Notify,
    now: ArcSwap<Announcements>,
}

impl Announcer {
    /// Reads the drained flag left by an earlier `lb run`.
    pub fn new(config_path: &Path) -> Self {
        let drained_file = drained_path(config_path);
        Announcer {
            drained: AtomicBool::new(drained_file.exists()),
            drained_file,
            kick: Notify::new(),
            now: ArcSwap::from_pointee(Announcements::default()),
        }
    }

    /// What is announced now.
    pub fn announcements(&self) -> Arc<Announcements> {
        self.now.load_full()
    }

    /// Drains (true) or resumes (false): saved first, then the table follows at once.
    pub fn set_drained(&self, drained: bool) -> Result<()> {
        if drained {
            network::write_atomically(&self.drained_file, b"drained\n")?;
        } else {
            match std::fs::remove_file(&self.drained_file) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("removing {}", self.drained_file.display()));
                }
            }
        }
        self.drained.store(drained, Ordering::SeqCst);
        self.kick.notify_one();
        Ok(())
    }

    /// Re-reads the decisions now (after a reload or a change of state).
    pub fn kick(&self) {
        self.kick.notify_one();
    }

    fn drained(&self) -> bool {
        self.drained.load(Ordering::SeqCst)
    }
}

/// What the task reads each round.
pub(crate) struct Inputs {
    /// The daemon, for its running configuration; the task ends with it.
    pub daemon: std::sync::Weak<super::Daemon>,
    /// The Network view and write errors; None without a data path.
    pub network: Option<NetworkStatus>,
}

/// Each VIP address with its vServices and whether one of them can take new traffic.
fn decide(
    cfg: &Config,
    network: Option<&NetworkStatus>,
) -> BTreeMap<IpAddr, (Vec<String>, String, bool)> {
    let mut out: BTreeMap<IpAddr, (Vec<String>, String, bool)> = BTreeMap::new();
    let Some(status) = network else {
        for vs in cfg.vservices.iter().filter(|v| v.kind.is_network()) {
            for a in vs.vips() {
                let e = out
                    .entry(a)
                    .or_insert_with(|| (Vec::new(), String::new(), false));
                e.0.push(vs.name.clone());
                e.1 = "the XDP data path is not loaded".into();
            }
        }
        return out;
    };
    let view = status.view();
    let plans: Vec<VipPlan> = match network::plan(cfg, &|n| view.get(n)) {
        Ok(p) => p,
        Err(e) => {
            warn!("deciding the VIP announcements: {e:#}");
            Vec::new()
        }
    };
    let write_error = status.last_error();
    for p in plans {
        let can = p.backends.iter().any(|b| b.active && b.weight > 0);
        let e = out
            .entry(p.address)
            .or_insert_with(|| (Vec::new(), String::new(), false));
        e.0.push(p.name.clone());
        if can && write_error.is_none() {
            e.2 = true;
        }
    }
    for (_, (names, reason, can)) in out.iter_mut() {
        *reason = match (*can, &write_error) {
            (true, _) => "can take new traffic".into(),
            (false, Some(err)) => format!("the XDP maps could not be written: {err}"),
            (false, None) if names.len() == 1 => {
                "no Backend Service of its vService can take new traffic".into()
            }
            (false, None) => "no Backend Service of its vServices can take new traffic".into(),
        };
    }
    out
}

/// Keeps the table in step until `stop` (or the daemon is gone); leaves every route in
/// place when it stops (S-AN3).
pub(crate) async fn run(
    announcer: Arc<Announcer>,
    inputs: Inputs,
    mut stop: watch::Receiver<bool>,
) {
    let started = Instant::now();
    let mut keeper = Keeper::default();
    while let Some(cfg) = inputs.daemon.upgrade().map(|d| d.config()) {
        let bgp = cfg.bgp.clone();
        let decided = decide(&cfg, inputs.network.as_ref());
        let drained = announcer.drained();
        let waiting = bgp.enabled && started.elapsed() < bgp.announce_delay;
        let want: BTreeSet<IpAddr> = match (bgp.enabled, drained) {
            (true, false) => decided
                .iter()
                .filter(|(_, d)| d.2)
                .map(|(a, _)| *a)
                .collect(),
            _ => BTreeSet::new(),
        };
        let (present, error) = keeper.round(&bgp, &want, waiting).await;
        let state = State {
            bgp: &bgp,
            drained,
            waiting,
            present: &present,
        };
        let now = Announcements {
            enabled: bgp.enabled,
            table: bgp.table,
            device: bgp.device.clone(),
            drained,
            waiting,
            vips: describe(decided, &state),
            error,
        };
        if **announcer.now.load() != now {
            announcer.now.store(Arc::new(now));
        }
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = announcer.kick.notified() => {}
            _ = stop.changed() => break,
        }
    }
}

/// The netlink side across rounds: the open table and the last error (logged once).
#[derive(Default)]
struct Keeper {
    routes: Option<(BgpSettings, VipRoutes)>,
    last_error: Option<String>,
}

impl Keeper {
    /// Makes the table hold `want` (unless still `waiting`, when it is only read); returns
    /// the VIPs whose route is in it and the error of this round, if any. Settings changed
    /// by a reload move the routes: the old table's are withdrawn first.
    async fn round(
        &mut self,
        bgp: &BgpSettings,
        want: &BTreeSet<IpAddr>,
        waiting: bool,
    ) -> (BTreeSet<IpAddr>, Option<String>) {
        if let Some((old, _)) = self.routes.as_ref().filter(|(s, _)| s != bgp) {
            if let Err(e) = withdraw_all(old).await {
                warn!("withdrawing the VIP routes from table {}: {e}", old.table);
            }
            self.routes = None;
        }
        if !bgp.enabled {
            return (BTreeSet::new(), self.note(None));
        }
        if self.routes.is_none() {
            match VipRoutes::open(bgp).await {
                Ok(r) => self.routes = Some((bgp.clone(), r)),
                Err(e) => return (BTreeSet::new(), self.note(Some(e.to_string()))),
            }
        }
        let Some((_, r)) = self.routes.as_mut() else {
            return (BTreeSet::new(), None);
        };
        if waiting {
            return (r.owned().await.unwrap_or_default(), self.note(None));
        }
        match r.sync(want).await {
            Ok((added, deleted)) => {
                for vip in added {
                    info!(%vip, table = r.table(), "VIP announced");
                }
                for vip in deleted {
                    info!(%vip, table = r.table(), "VIP withdrawn");
                }
                (want.clone(), self.note(None))
            }
            Err(e) => {
                let present = r.owned().await.unwrap_or_default();
                // Read the table again next round.
                self.routes = None;
                (present, self.note(Some(e.to_string())))
            }
        }
    }

    /// Logs an error when it starts or changes, and its end; returns it.
    fn note(&mut self, error: Option<String>) -> Option<String> {
        if error != self.last_error {
            match &error {
                Some(e) => warn!("VIP announcement: {e}"),
                None => info!("VIP routes written again"),
            }
            self.last_error = error.clone();
        }
        error
    }
}

/// What the reasons depend on besides each VIP's own decision.
struct State<'a> {
    bgp: &'a BgpSettings,
    drained: bool,
    waiting: bool,
    present: &'a BTreeSet<IpAddr>,
}

/// Each VIP with its announcement and the reason, node-wide reasons first.
fn describe(
    decided: BTreeMap<IpAddr, (Vec<String>, String, bool)>,
    state: &State<'_>,
) -> Vec<VipAnnouncement> {
    decided
        .into_iter()
        .map(|(address, (vservices, reason, can))| {
            let announced = state.present.contains(&address);
            let reason = if !state.bgp.enabled {
                "announcement is off ([bgp] enabled = false)".to_owned()
            } else if state.drained {
                "the node is drained (lb node resume announces again)".to_owned()
            } else if state.waiting {
                "waiting for bgp.announce_delay after the start".to_owned()
            } else if can && !announced {
                "can take new traffic, but its route could not be added".to_owned()
            } else {
                reason
            };
            VipAnnouncement {
                address,
                vservices,
                announced,
                reason,
            }
        })
        .collect()
}
