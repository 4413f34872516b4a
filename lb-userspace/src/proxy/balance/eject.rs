//! Passive health's ejection cap (`max_ejection_percent`, Envoy's outlier-detection cap):
//! runs of live failures never put more than that share of a list's mains in Error at once.
//! A run that would is held back (logged) and the server keeps its state; its next run is
//! weighed again. The active check is not capped.
//!
//! The proxy is where runs of failures are seen, and it knows every list; it counts a main
//! as out when the published selection has it down (Preparing or Error) or when it reported
//! it moments ago and the selection has not caught up yet (the L7 reflection tick).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::mpsc::UnboundedSender;

use super::lock;
use super::passive::LiveFailure;
use crate::config::Config;
use crate::selection::{ListSelection, Model, Policy, Published, Selections};

/// How long a reported server counts as out before the selection shows it: well above the
/// longest L7 reflection tick (250 ms) plus the engine's publish gap.
const PENDING_FOR: Duration = Duration::from_secs(1);

/// One list's mains and where its selection is published.
#[derive(Debug)]
struct List {
    vservice: String,
    /// None: the Default list; Some(i): the i-th Conditional set.
    set: Option<usize>,
    mains: Vec<String>,
}

/// The lists of the configuration, indexed by main.
#[derive(Debug, Default)]
struct Lists {
    lists: Vec<List>,
    /// Per Backend Service: the lists it is a main of (indices into `lists`).
    of_main: HashMap<String, Vec<usize>>,
    /// Per Backend Service: its profile's `max_ejection_percent`.
    percent: HashMap<String, u8>,
}

/// The cap between the pools' runs of live failures and the health engine.
#[derive(Debug)]
pub struct Ejections {
    report: UnboundedSender<LiveFailure>,
    selections: Arc<Published>,
    lists: ArcSwap<Lists>,
    /// Servers reported recently, with when.
    pending: Mutex<HashMap<String, Instant>>,
}

impl Ejections {
    /// Reports allowed runs to `report`, weighing them against `selections`; call
    /// [`Ejections::configure`] with every configuration.
    pub fn new(report: UnboundedSender<LiveFailure>, selections: Arc<Published>) -> Ejections {
        Ejections {
            report,
            selections,
            lists: ArcSwap::from_pointee(Lists::default()),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// Takes the lists and caps of `cfg` (start and reload).
    pub fn configure(&self, cfg: &Config) {
        let model = Model::from_config(cfg);
        let mut lists = Lists::default();
        for vs in &cfg.vservices {
            let mains = model.mains(&vs.backends, Policy::for_vservice(vs));
            lists.add(&vs.name, None, mains);
            let sets = vs.l7.iter().flat_map(|l7| &l7.conditional_sets);
            for (i, set) in sets.enumerate() {
                let mains = model.mains(&set.backends, Policy::FULL);
                lists.add(&vs.name, Some(i), mains);
            }
        }
        for service in &cfg.backend_services {
            if let Some(profile) = &service.health_check {
                let percent = cfg.max_ejection_percent(profile);
                lists.percent.insert(service.name.clone(), percent);
            }
        }
        self.lists.store(Arc::new(lists));
    }

    /// A run of live failures reached its profile's `passive_failures`: reported to the
    /// health engine unless that would put more than the cap of a list's mains in Error.
    /// True when reported.
    pub(crate) fn failed(&self, failure: LiveFailure) -> bool {
        let lists = self.lists.load();
        let selections = self.selections.load();
        let now = Instant::now();
        let mut pending = lock(&self.pending);
        pending.retain(|_, at| now.saturating_duration_since(*at) < PENDING_FOR);
        let name = failure.backend.as_str();
        let percent = lists.percent.get(name).copied().unwrap_or(100);
        for &i in lists.of_main.get(name).into_iter().flatten() {
            let list = &lists.lists[i];
            let Some(sel) = selection(&selections, list) else {
                continue;
            };
            let down: HashSet<&str> = sel.down.iter().map(String::as_str).collect();
            let out = list
                .mains
                .iter()
                .filter(|m| m.as_str() != name)
                .filter(|m| down.contains(m.as_str()) || pending.contains_key(m.as_str()))
                .count();
            if out + 1 > allowed(list.mains.len(), percent) {
                tracing::warn!(
                    backend = name,
                    vservice = %list.vservice,
                    out,
                    mains = list.mains.len(),
                    max_ejection_percent = percent,
                    reason = %failure.reason,
                    "passive health: not put in Error, the list's ejection cap is reached"
                );
                return false;
            }
        }
        pending.insert(failure.backend.clone(), now);
        self.report.send(failure).is_ok()
    }
}

impl Lists {
    fn add(&mut self, vservice: &str, set: Option<usize>, mains: Vec<String>) {
        let at = self.lists.len();
        for main in &mains {
            self.of_main.entry(main.clone()).or_default().push(at);
        }
        self.lists.push(List {
            vservice: vservice.to_owned(),
            set,
            mains,
        });
    }
}

/// The published selection of `list`.
fn selection<'a>(selections: &'a Selections, list: &List) -> Option<&'a ListSelection> {
    let vs = selections.lists.get(&list.vservice)?;
    match list.set {
        None => Some(&vs.default),
        Some(i) => vs.sets.get(i).map(|(_, sel)| sel),
    }
}

/// How many of `mains` passive failures may hold in Error: the share `percent` rounded
/// down, but at least one unless the percent is 0 (as Envoy ejects at least one host), so a
/// list of one or two mains keeps passive health.
fn allowed(mains: usize, percent: u8) -> usize {
    if percent == 0 {
        return 0;
    }
    (mains * usize::from(percent) / 100).max(1)
}
