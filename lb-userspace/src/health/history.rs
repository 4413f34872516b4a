//! Bounded per-service records: state transitions (S-HC8) and recent check results for
//! plotting check durations (S-OB3).

use std::collections::VecDeque;
use std::time::Duration;

use super::clock::{Clock, Stamp};
use super::state::HealthState;

/// Transitions kept per Backend Service: about a day of a service that fails and recovers
/// every half hour, at about 150 bytes each (S-HC8).
pub const MAX_TRANSITIONS: usize = 64;
/// Check results kept per Backend Service (two minutes at P = 1 s), for the duration plot.
pub const MAX_CHECKS: usize = 120;

/// One recorded state change (S-HC8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// When the change was decided (the end of the deciding check).
    pub at: Stamp,
    /// State before.
    pub from: HealthState,
    /// State after.
    pub to: HealthState,
    /// Why: the last check's result, or the configuration change that caused it.
    pub reason: String,
    /// Duration of the deciding check (zero for configuration changes).
    pub check_duration: Duration,
}

/// One check result, for plotting (S-OB3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckRecord {
    /// When the check started.
    pub at: Stamp,
    /// How long it lasted.
    pub duration: Duration,
    /// Whether it succeeded.
    pub ok: bool,
}

/// A check result as stored: 16 bytes instead of `CheckRecord`'s 56, since 10,000 services
/// keep 120 each (the ring is most of the engine's memory). Microseconds keep what the
/// timing rules and the plot need; the wall time is rebuilt from the engine's clock.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// Start of the check, microseconds since the engine started.
    start_us: u64,
    /// Duration in microseconds (a check lasts at most T < 120 s) with `OK_BIT` when it
    /// succeeded.
    duration_us: u32,
}

const OK_BIT: u32 = 1 << 31;

impl Slot {
    fn pack(record: &CheckRecord) -> Self {
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let duration = u32::try_from(micros(record.duration))
            .unwrap_or(u32::MAX)
            .min(OK_BIT - 1);
        Self {
            start_us: micros(record.at.since_start),
            duration_us: duration | if record.ok { OK_BIT } else { 0 },
        }
    }

    fn unpack(self, clock: &Clock) -> CheckRecord {
        let since_start = Duration::from_micros(self.start_us);
        CheckRecord {
            at: clock.at(since_start),
            duration: Duration::from_micros(u64::from(self.duration_us & !OK_BIT)),
            ok: self.duration_us & OK_BIT != 0,
        }
    }
}

/// The records of one Backend Service. The check ring is allocated whole at the first check,
/// so the engine's memory is at its steady state from then on instead of growing for two
/// minutes, and a service without a health check costs none of it.
#[derive(Debug, Default)]
pub(crate) struct ServiceLog {
    transitions: VecDeque<Transition>,
    checks: Box<[Slot]>,
    /// Index of the oldest check in `checks`.
    first: usize,
    /// Checks stored (at most `MAX_CHECKS`).
    len: usize,
    last_reason: String,
}

impl ServiceLog {
    /// Appends a transition, dropping the oldest beyond the bound.
    pub(crate) fn push_transition(&mut self, transition: Transition) {
        if self.transitions.len() >= MAX_TRANSITIONS {
            self.transitions.pop_front();
        }
        self.transitions.push_back(transition);
    }

    /// Appends a check result, dropping the oldest beyond the bound, and remembers its
    /// reason.
    pub(crate) fn push_check(&mut self, record: CheckRecord, reason: &str) {
        if self.checks.is_empty() {
            self.checks = vec![Slot::default(); MAX_CHECKS].into_boxed_slice();
        }
        let slots = self.checks.len();
        if self.len < slots {
            self.checks[(self.first + self.len) % slots] = Slot::pack(&record);
            self.len += 1;
        } else {
            self.checks[self.first] = Slot::pack(&record);
            self.first = (self.first + 1) % slots;
        }
        reason.clone_into(&mut self.last_reason);
    }

    /// Transitions, oldest first.
    pub(crate) fn transitions(&self) -> Vec<Transition> {
        self.transitions.iter().cloned().collect()
    }

    /// Check results, oldest first, with wall times from `clock`.
    pub(crate) fn checks(&self, clock: &Clock) -> Vec<CheckRecord> {
        let slots = self.checks.len().max(1);
        (0..self.len)
            .map(|i| self.checks[(self.first + i) % slots].unpack(clock))
            .collect()
    }

    /// The reason of the latest check.
    pub(crate) fn last_reason(&self) -> &str {
        &self.last_reason
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn s_hc8_logs_are_bounded_and_keep_the_newest() {
        let clock = Clock::start();
        let secs = |s: u64| clock.at(Duration::from_secs(s));
        let mut log = ServiceLog::default();
        for i in 0..(MAX_TRANSITIONS as u64 + 10) {
            log.push_transition(Transition {
                at: secs(i),
                from: HealthState::Ok,
                to: HealthState::Error,
                reason: format!("#{i}"),
                check_duration: Duration::ZERO,
            });
        }
        let all = log.transitions();
        assert_eq!(all.len(), MAX_TRANSITIONS);
        assert_eq!(all[0].reason, "#10");
        for i in 0..(MAX_CHECKS as u64 + 1) {
            let record = CheckRecord {
                at: secs(i),
                duration: Duration::from_millis(i),
                ok: i % 3 != 0,
            };
            log.push_check(record, "fine");
        }
        let checks = log.checks(&clock);
        assert_eq!(checks.len(), MAX_CHECKS);
        assert_eq!(checks[0].at, secs(1));
        assert_eq!(checks[MAX_CHECKS - 1].at, secs(MAX_CHECKS as u64));
        assert_eq!(log.last_reason(), "fine");
        for (i, check) in (1..).zip(&checks) {
            assert_eq!(check.duration, Duration::from_millis(i), "check {i}");
            assert_eq!(check.ok, i % 3 != 0, "check {i}");
        }
    }

    #[tokio::test]
    async fn stored_checks_keep_microseconds_and_the_outcome() {
        let clock = Clock::start();
        let mut log = ServiceLog::default();
        let record = CheckRecord {
            at: clock.at(Duration::from_micros(86_400_000_000 * 400 + 7)),
            duration: Duration::from_micros(119_999_999),
            ok: true,
        };
        log.push_check(record, "SYN-ACK in 0.1 ms");
        let failed = CheckRecord {
            ok: false,
            duration: Duration::from_micros(3),
            ..record
        };
        log.push_check(failed, "connect: connection refused");
        assert_eq!(log.checks(&clock), vec![record, failed]);
        assert_eq!(std::mem::size_of::<Slot>(), 16);
    }
}
