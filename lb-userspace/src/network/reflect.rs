//! Network vServices follow health on their own cadence (S-RF2): removals reach the XDP
//! maps within `network_remove_delay` (default 9 s) of the decision, re-adds within
//! `network_add_delay` (default 5 s). ANY-L3 and Port Range VIPs ignore health (S-RF4,
//! decided by the selection model).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::config::{Config, ipv6_health_key};
use crate::health::{Cadence, HealthEngine, View, reflect};
use crate::network::loading::loader::DataPath;
use crate::network::planning::plan::plan;
use crate::network::writing::writer::apply_plan;
use crate::selection::Health;

/// The task that owns the data path while the daemon runs and rewrites its maps whenever
/// the Network view of health or the configuration changes.
pub struct NetworkReflector {
    config: Arc<ArcSwap<Config>>,
    status: NetworkStatus,
    reload: watch::Sender<u64>,
    /// The reload generation the maps were last written with.
    written: watch::Sender<u64>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// What the reflector last did, readable from other tasks.
#[derive(Clone)]
pub struct NetworkStatus {
    view: Arc<ArcSwap<View>>,
    last_error: Arc<Mutex<Option<String>>>,
    digests: Arc<ArcSwap<BTreeMap<String, String>>>,
}

impl NetworkStatus {
    /// The health states Network traffic currently follows.
    pub fn view(&self) -> Arc<View> {
        self.view.load_full()
    }

    /// The digest of every VIP's Maglev table as last written, by "vService VIP" (no entry
    /// for a VIP without a table): what other balancers compare theirs with (S-CL4).
    pub fn table_digests(&self) -> Arc<BTreeMap<String, String>> {
        self.digests.load_full()
    }

    /// The last failure to write the maps, if the last attempt failed.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// What the maps held before this process: backends active in a slot were OK, the others
/// were not. A restarted daemon starts from it, so adopting never drops a working backend.
fn initial_view(dp: &DataPath) -> View {
    let mut states = HashMap::new();
    for vip in &dp.state.vips {
        for b in &vip.backends {
            let h = if b.active { Health::Ok } else { Health::Error };
            // An IPv6 VIP's backend is a dual-stack service's IPv6 address (its own key) or
            // an IPv6-only service (its name); which one is not recorded, so both are set.
            if vip.address.is_ipv6() {
                states.entry(ipv6_health_key(&b.name)).or_insert(h);
            }
            states.entry(b.name.to_string()).or_insert(h);
        }
    }
    View::from_states(states)
}

/// The digests of the tables `dp` holds, by "vService VIP".
fn table_digests(dp: &DataPath) -> BTreeMap<String, String> {
    dp.state
        .vips
        .iter()
        .filter(|v| v.table_digest != 0)
        .map(|v| {
            (
                format!("{} {}", v.name, v.address),
                crate::network::tables::table::digest_text(v.table_digest),
            )
        })
        .collect()
}

impl NetworkReflector {
    /// Starts reflecting; the maps are written once at once. Must run in a Tokio runtime.
    pub fn start(mut dp: DataPath, cfg: Arc<Config>, engine: Arc<HealthEngine>) -> Self {
        let cadence = Cadence {
            down_every: cfg.reflection.network_remove_delay,
            up_every: cfg.reflection.network_add_delay,
        };
        let view0 = initial_view(&dp);
        let config = Arc::new(ArcSwap::new(cfg));
        let view = Arc::new(ArcSwap::from_pointee(view0.clone()));
        let last_error = Arc::new(Mutex::new(None));
        let digests = Arc::new(ArcSwap::from_pointee(table_digests(&dp)));
        let (reload, reload_rx) = watch::channel(0u64);
        let (written, _) = watch::channel(0u64);
        let (stop, stop_rx) = watch::channel(false);
        let task = {
            let (config, view, last_error) = (config.clone(), view.clone(), last_error.clone());
            let digests = digests.clone();
            let (generations, written) = (reload.subscribe(), written.clone());
            tokio::spawn(async move {
                reflect(engine, cadence, view0, reload_rx, stop_rx, |v: &View| {
                    view.store(Arc::new(v.clone()));
                    // Read first: the configuration loaded next is at least that reload's.
                    let generation = *generations.borrow();
                    let cfg = config.load();
                    let result = dp
                        .set_tunnels(&cfg)
                        .and_then(|()| plan(&cfg, &|name| v.get(name)))
                        .and_then(|vips| apply_plan(&mut dp, &vips));
                    let mut slot = last_error.lock().unwrap_or_else(PoisonError::into_inner);
                    match result {
                        Ok(()) => {
                            digests.store(Arc::new(table_digests(&dp)));
                            if slot.take().is_some() {
                                info!("Network vServices written again");
                            }
                        }
                        Err(e) => {
                            warn!("writing the Network vServices failed: {e:#}");
                            *slot = Some(format!("{e:#}"));
                        }
                    }
                    written.send_replace(generation);
                })
                .await;
            })
        };
        NetworkReflector {
            config,
            status: NetworkStatus {
                view,
                last_error,
                digests,
            },
            reload,
            written,
            stop,
            task,
        }
    }

    /// Applies a new configuration (reload); health states carry over. Returns its
    /// generation, for [`NetworkReflector::written`].
    pub fn update(&self, cfg: Arc<Config>) -> u64 {
        self.config.store(cfg);
        self.reload.send_modify(|g| *g += 1);
        *self.reload.borrow()
    }

    /// The reload generation the maps were last written with: wait on it for the maps to
    /// hold a configuration [`NetworkReflector::update`] gave.
    pub fn written(&self) -> watch::Receiver<u64> {
        self.written.subscribe()
    }

    /// A handle on the reflector's view and last error.
    pub fn status(&self) -> NetworkStatus {
        self.status.clone()
    }

    /// Stops the task; the program and maps stay as written.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}
