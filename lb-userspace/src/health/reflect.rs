//! Reflecting health decisions into traffic (S-RF): what a kind of traffic sees is the
//! engine's decisions, taken over on periodic ticks.
//!
//! The SPEC gives each kind of traffic a bound ("within at most 2.5 s" for HTTP and L7 TCP,
//! "about 9 s" for a Network removal and "5 s" for a re-add). A tick of that period applies
//! every decision made since the previous tick, so each decision reaches traffic after a
//! delay between 0 and the period, never more: the end-to-end figures of S-RF3 (decision
//! time plus this delay) follow. A period of 0 applies decisions at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior, interval_at};

use super::engine::{HealthEngine, HealthSnapshot};
use super::state::HealthState;

/// How often decisions are taken over: failures and recoveries separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cadence {
    /// Period of the tick that applies Error decisions (0: at once).
    pub down_every: Duration,
    /// Period of the tick that applies OK decisions (0: at once).
    pub up_every: Duration,
}

/// The longest tick of the L7 reflection: decisions closer together than this reach the
/// proxy together (a mass change republishes the selections once per tick, not once per
/// service), and no decision waits longer.
pub const L7_TICK: Duration = Duration::from_millis(250);

impl Cadence {
    /// The L7 cadence for S-RF1's bound (`[reflection] l7_delay`, default 2.5 s): every
    /// decision reaches HTTP and L7 TCP traffic within the bound, on a tick of at most
    /// [`L7_TICK`]. A tick of the whole bound would add up to 2.5 s to the decision itself and
    /// break S-RF3's rows in the worst case (a closed port decided after 2 s then waiting
    /// 2.5 s is out after 4.5 s, not "1-4 s").
    pub fn l7_within(bound: Duration) -> Cadence {
        let period = bound.min(L7_TICK);
        Cadence {
            down_every: period,
            up_every: period,
        }
    }
}

/// Per-service health as one kind of traffic sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    states: HashMap<String, HealthState>,
}

impl View {
    /// A view that starts from known states (e.g. what the XDP maps held before a restart).
    pub fn from_states(states: HashMap<String, HealthState>) -> View {
        View { states }
    }

    /// The state traffic sees; a service the view does not know is Preparing.
    pub fn get(&self, service: &str) -> HealthState {
        self.states
            .get(service)
            .copied()
            .unwrap_or(HealthState::Preparing)
    }

    /// Every service and its state.
    pub fn states(&self) -> &HashMap<String, HealthState> {
        &self.states
    }

    /// Takes over what needs no decision: services without a check are OK at once (S-HC6),
    /// new checked services start Preparing (S-HC5), services gone from the engine leave.
    /// A service the view already knows keeps its state while the engine has not decided.
    fn admit(&mut self, engine: &HealthSnapshot) -> bool {
        let before = self.states.len();
        self.states
            .retain(|name, _| engine.services.contains_key(name));
        let mut changed = self.states.len() != before;
        for (name, h) in &engine.services {
            let entry = self.states.entry(name.clone());
            if !h.checked {
                let slot = entry.or_insert(HealthState::Ok);
                changed |= *slot != HealthState::Ok;
                *slot = HealthState::Ok;
            } else if let std::collections::hash_map::Entry::Vacant(v) = entry {
                // A service new to this view takes the engine's state as it is: Preparing,
                // or the state restored from the previous run (a restart is no change).
                v.insert(h.state);
                changed = true;
            }
        }
        changed
    }

    /// Applies the engine's decisions towards `to` (Error: failures; Ok: recoveries).
    fn take(&mut self, engine: &HealthSnapshot, to: HealthState) -> bool {
        let mut changed = false;
        for (name, h) in &engine.services {
            if !h.checked || h.state != to {
                continue;
            }
            if let Some(slot) = self.states.get_mut(name).filter(|s| **s != to) {
                *slot = to;
                changed = true;
            }
        }
        changed
    }
}

/// A tick of `period`, or none when the period is 0 (then decisions apply at once).
fn ticker(period: Duration) -> Option<tokio::time::Interval> {
    if period.is_zero() {
        return None;
    }
    let mut t = interval_at(Instant::now() + period, period);
    t.set_missed_tick_behavior(MissedTickBehavior::Delay);
    Some(t)
}

async fn tick(t: &mut Option<tokio::time::Interval>) {
    match t {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// The engine's snapshot when it differs from `last` (which it then becomes).
fn newer(
    engine: &HealthEngine,
    last: &mut Option<Arc<HealthSnapshot>>,
) -> Option<Arc<HealthSnapshot>> {
    let snap = engine.snapshot();
    if last.as_ref().is_some_and(|l| Arc::ptr_eq(l, &snap)) {
        return None;
    }
    *last = Some(Arc::clone(&snap));
    Some(snap)
}

/// Keeps `view` in step with `engine` at `cadence`, calling `on_change` with every new
/// view, and also whenever `reload` changes (the caller's configuration changed). Returns
/// when `stop` becomes true or is dropped.
pub async fn reflect(
    engine: Arc<HealthEngine>,
    cadence: Cadence,
    mut view: View,
    mut reload: watch::Receiver<u64>,
    mut stop: watch::Receiver<bool>,
    mut on_change: impl FnMut(&View),
) {
    let mut changes = engine.subscribe();
    let mut down = ticker(cadence.down_every);
    let mut up = ticker(cadence.up_every);
    // The snapshot each tick last took over: taking the same one again changes nothing
    // (services the view admitted meanwhile came in with the engine's state), so a tick
    // with no new decision costs no walk over every service.
    let (mut taken_down, mut taken_up) = (None, None);
    let sync_now = |view: &mut View, snap: &HealthSnapshot| {
        let mut changed = view.admit(snap);
        if cadence.down_every.is_zero() {
            changed |= view.take(snap, HealthState::Error);
        }
        if cadence.up_every.is_zero() {
            changed |= view.take(snap, HealthState::Ok);
        }
        changed
    };
    sync_now(&mut view, &engine.snapshot());
    on_change(&view);
    loop {
        tokio::select! {
            r = changes.changed() => {
                if r.is_err() {
                    return;
                }
                if sync_now(&mut view, &engine.snapshot()) {
                    on_change(&view);
                }
            }
            r = reload.changed() => {
                if r.is_err() {
                    return;
                }
                sync_now(&mut view, &engine.snapshot());
                on_change(&view);
            }
            _ = tick(&mut down) => {
                if let Some(snap) = newer(&engine, &mut taken_down)
                    && view.take(&snap, HealthState::Error)
                {
                    on_change(&view);
                }
            }
            _ = tick(&mut up) => {
                if let Some(snap) = newer(&engine, &mut taken_up)
                    && view.take(&snap, HealthState::Ok)
                {
                    on_change(&view);
                }
            }
            r = stop.changed() => {
                if r.is_err() || *stop.borrow() {
                    return;
                }
            }
        }
    }
}
