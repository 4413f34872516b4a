//! Reflecting health decisions into traffic (S-RF): what a kind of traffic sees is the
//! engine's decisions, taken over on periodic ticks.
//!
//! The rules give each kind of traffic a bound ("within at most 2.5 s" for HTTP and L7 TCP,
//! "about 9 s" for a Network removal and "5 s" for a re-add). A tick of that period applies
//! every decision made since the previous tick, so each decision reaches traffic after a
//! delay between 0 and the period, never more: the end-to-end figures of S-RF3 (decision
//! time plus this delay) follow. The ticks fall on the wall clock's multiples of the period
//! (every 9 s since the Unix epoch for a removal), so balancers with synchronised clocks
//! apply a decision in the same instant. A period of 0 applies decisions at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio::time::Instant;

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

/// A tick of `period` on the boundaries of the wall clock (multiples of the period since
/// the Unix epoch), so that balancers whose clocks are synchronised take the same decision
/// over in the same instant, whenever each was started: their Maglev tables then differ
/// for no longer than their clocks do. Each decision still waits at most one period.
///
/// The wall time is read through the tokio clock, anchored to `SystemTime` and anchored
/// again at every tick whose wall and tokio clocks advanced together (within
/// [`REANCHOR_SLACK`]): the slow drift between them is corrected, a step of the wall clock
/// (NTP) is taken over one tick later, and a paused test clock, which advances while the
/// wall clock does not, keeps its first anchor.
struct WallTicker {
    period: Duration,
    anchor: (Instant, SystemTime),
    next: Instant,
}

/// How far the wall clock and the tokio clock may disagree over one tick and still count as
/// having advanced together; never more than a twentieth of the period, so that a paused
/// test clock (which advances a whole period while the wall clock barely moves) is never
/// taken for one that kept time, and a re-anchoring delays a boundary by a sliver of a
/// period at most.
const REANCHOR_SLACK: Duration = Duration::from_millis(500);

impl WallTicker {
    /// `None` when the period is 0 (then decisions apply at once).
    fn new(period: Duration) -> Option<WallTicker> {
        if period.is_zero() {
            return None;
        }
        let anchor = (Instant::now(), SystemTime::now());
        let next = boundary_after(anchor, anchor.0, period);
        Some(WallTicker {
            period,
            anchor,
            next,
        })
    }

    /// Waits for the next boundary.
    async fn tick(&mut self) {
        tokio::time::sleep_until(self.next).await;
        let now = (Instant::now(), SystemTime::now());
        let tokio_went = now.0.saturating_duration_since(self.anchor.0);
        let wall_went = now.1.duration_since(self.anchor.1).unwrap_or_default();
        if tokio_went.abs_diff(wall_went) <= REANCHOR_SLACK.min(self.period / 20) {
            self.anchor = now;
        } else {
            // This tick's wall time is the anchor's projection: see the type's doc.
            self.anchor = (now.0, self.anchor.1 + tokio_went);
        }
        // The boundary after this one: a re-anchoring that moved the wall time back by a
        // moment must not make the boundary just reached come again.
        self.next = boundary_after(self.anchor, now.0 + self.period / 10, self.period);
    }
}

/// The first wall-clock multiple of `period` after the tokio instant `after`, as a tokio
/// instant, with `anchor` pairing a tokio instant and its wall time.
fn boundary_after(anchor: (Instant, SystemTime), after: Instant, period: Duration) -> Instant {
    let wall = anchor.1 + after.saturating_duration_since(anchor.0);
    let since_epoch = wall
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let period_ns = period.as_nanos().max(1);
    let wait = period_ns - since_epoch % period_ns;
    after + Duration::from_nanos(u64::try_from(wait).unwrap_or(u64::MAX))
}

async fn tick(t: &mut Option<WallTicker>) {
    match t {
        Some(t) => t.tick().await,
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
    let mut down = WallTicker::new(cadence.down_every);
    let mut up = WallTicker::new(cadence.up_every);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundary_after_is_the_next_wall_clock_multiple_of_the_period() {
        let period = Duration::from_secs(9);
        let base = Instant::now();
        // A wall time 4.25 s past a multiple of 9 s.
        let wall = UNIX_EPOCH + Duration::from_secs(9 * 1_000_000) + Duration::from_millis(4250);
        let next = boundary_after((base, wall), base, period);
        assert_eq!(next - base, Duration::from_millis(4750));
        // From exactly a boundary, the next one is a whole period away: never now.
        let on = UNIX_EPOCH + Duration::from_secs(9 * 1_000_000);
        assert_eq!(boundary_after((base, on), base, period) - base, period);
        // Later tokio instants project through the anchor.
        let later = base + Duration::from_secs(5);
        assert_eq!(
            boundary_after((base, wall), later, period) - later,
            Duration::from_millis(8750)
        );
    }
}
