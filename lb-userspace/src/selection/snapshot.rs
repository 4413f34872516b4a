//! The published result of selection for every list: what HTTP and L7 TCP vServices read
//! on each request, without a lock (an `ArcSwap` swapped whole on every change).

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::model::Model;
use super::types::{Health, ListSelection, Policy};
use crate::config::Config;

/// Selection of every list of every vService, from one consistent view of health.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selections {
    /// By vService name.
    pub lists: HashMap<String, VsSelection>,
}

/// The lists of one vService.
#[derive(Clone, Debug, PartialEq)]
pub struct VsSelection {
    /// The Default list.
    pub default: ListSelection,
    /// Each Conditional set's own list, in configuration order (S-BK6: its own backups).
    pub sets: Vec<(String, ListSelection)>,
}

impl Selections {
    /// Evaluates every vService of `cfg` against `health`.
    pub fn compute(cfg: &Config, health: &dyn Fn(&str) -> Health) -> Selections {
        let model = Model::from_config(cfg);
        let mut lists = HashMap::new();
        for vs in &cfg.vservices {
            let Ok(default) = model.select(&vs.name, health) else {
                continue;
            };
            let sets = vs
                .l7
                .iter()
                .flat_map(|l7| &l7.conditional_sets)
                .map(|set| {
                    let sel = model.select_list(&set.backends, health, Policy::FULL);
                    (set.name.clone(), sel)
                })
                .collect();
            lists.insert(vs.name.clone(), VsSelection { default, sets });
        }
        Selections { lists }
    }
}

/// The lock-free holder readers share.
#[derive(Debug, Default)]
pub struct Published {
    inner: ArcSwap<Selections>,
}

impl Published {
    /// The current selections (a cheap reference-counted load, no lock).
    pub fn load(&self) -> Arc<Selections> {
        self.inner.load_full()
    }

    /// The current selections for a short synchronous read on a hot path: no reference-count
    /// update (a shared atomic two CPUs would fight over on every request); do not hold it
    /// across an await.
    pub fn peek(&self) -> arc_swap::Guard<Arc<Selections>> {
        self.inner.load()
    }

    /// Replaces the selections readers see.
    pub fn store(&self, selections: Selections) {
        self.inner.store(Arc::new(selections));
    }
}
