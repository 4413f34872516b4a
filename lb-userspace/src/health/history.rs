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

/// A check result as stored: 8 bytes instead of `CheckRecord`'s 56, since 10,000 services
/// keep 120 each (the ring is most of the engine's memory). The wall time is rebuilt from
/// the engine's clock.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// Start of the check in milliseconds since the engine started, modulo 2^32 (49.7
    /// days). The ring only holds the last `MAX_CHECKS` checks, all within hours of now
    /// (P < 120 s), so the full value is the latest one at or before now with these bits.
    start_ms: u32,
    /// Duration in microseconds (a check lasts at most T < 120 s) with `OK_BIT` when it
    /// succeeded.
    duration_us: u32,
}

const OK_BIT: u32 = 1 << 31;

impl Slot {
    fn pack(record: &CheckRecord) -> Self {
        let duration = u32::try_from(record.duration.as_micros())
            .unwrap_or(u32::MAX)
            .min(OK_BIT - 1);
        Self {
            // Truncation is the point: the high bits are rebuilt from the clock.
            start_ms: record.at.since_start.as_millis() as u32,
            duration_us: duration | if record.ok { OK_BIT } else { 0 },
        }
    }

    /// The record, given `now_ms` (milliseconds since the engine started) to place the
    /// stored start in time.
    fn unpack(self, clock: &Clock, now_ms: u64) -> CheckRecord {
        const WRAP: u64 = 1 << 32;
        let mut start = (now_ms & !(WRAP - 1)) | u64::from(self.start_ms);
        if start > now_ms {
            start = start.saturating_sub(WRAP);
        }
        CheckRecord {
            at: clock.at(Duration::from_millis(start)),
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
    /// Transitions recorded since the service appeared, beyond the ones kept.
    recorded: u64,
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
        self.recorded += 1;
    }

    /// Transitions recorded since the service appeared (a counter: the kept ones are the
    /// last of them).
    pub(crate) fn recorded(&self) -> u64 {
        self.recorded
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

    /// Check results, oldest first, with times from `clock`.
    pub(crate) fn checks(&self, clock: &Clock) -> Vec<CheckRecord> {
        self.checks_at(clock, clock.now().since_start)
    }

    /// Check results as seen at `now` (time since the engine started).
    fn checks_at(&self, clock: &Clock, now: Duration) -> Vec<CheckRecord> {
        let now_ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
        let slots = self.checks.len().max(1);
        (0..self.len)
            .map(|i| self.checks[(self.first + i) % slots].unpack(clock, now_ms))
            .collect()
    }

    /// The reason of the latest check.
    pub(crate) fn last_reason(&self) -> &str {
        &self.last_reason
    }

    /// The latest check with its reason, without copying the ring (Live Stats reads it for
    /// every service each second).
    pub(crate) fn last_check(&self, clock: &Clock) -> Option<(CheckRecord, &str)> {
        let slots = self.checks.len();
        if self.len == 0 || slots == 0 {
            return None;
        }
        let now_ms = u64::try_from(clock.now().since_start.as_millis()).unwrap_or(u64::MAX);
        let slot = self.checks[(self.first + self.len - 1) % slots];
        Some((slot.unpack(clock, now_ms), &self.last_reason))
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
        // The count goes on past the kept ones (what /metrics shows as a counter).
        assert_eq!(log.recorded(), MAX_TRANSITIONS as u64 + 10);
        for i in 0..(MAX_CHECKS as u64 + 1) {
            let record = CheckRecord {
                at: secs(i),
                duration: Duration::from_millis(i),
                ok: i % 3 != 0,
            };
            log.push_check(record, "fine");
        }
        let checks = log.checks_at(&clock, Duration::from_secs(MAX_CHECKS as u64 + 2));
        assert_eq!(checks.len(), MAX_CHECKS);
        assert_eq!(checks[0].at, secs(1));
        assert_eq!(checks[MAX_CHECKS - 1].at, secs(MAX_CHECKS as u64));
        assert_eq!(log.last_reason(), "fine");
        let (last, reason) = log.last_check(&clock).expect("a last check");
        assert_eq!(last.duration, Duration::from_millis(MAX_CHECKS as u64));
        assert_eq!(reason, "fine");
        for (i, check) in (1..).zip(&checks) {
            assert_eq!(check.duration, Duration::from_millis(i), "check {i}");
            assert_eq!(check.ok, i % 3 != 0, "check {i}");
        }
    }

    #[tokio::test]
    async fn stored_checks_keep_milliseconds_durations_and_the_outcome_across_the_wrap() {
        let clock = Clock::start();
        let mut log = ServiceLog::default();
        // 400 days of uptime: the stored start has wrapped eight times.
        let start = Duration::from_millis(86_400_000 * 400 + 7);
        let record = CheckRecord {
            at: clock.at(start),
            duration: Duration::from_micros(119_999_999),
            ok: true,
        };
        log.push_check(record, "SYN-ACK in 0.1 ms");
        let failed = CheckRecord {
            at: clock.at(start + Duration::from_secs(1)),
            ok: false,
            duration: Duration::from_micros(3),
        };
        log.push_check(failed, "connect: connection refused");
        let now = start + Duration::from_secs(125);
        assert_eq!(log.checks_at(&clock, now), vec![record, failed]);
        // Just after a wrap of the low 32 bits, a check from just before it still reads
        // right.
        let wrap = Duration::from_millis(1 << 32);
        let mut log = ServiceLog::default();
        let before = CheckRecord {
            at: clock.at(wrap - Duration::from_millis(5)),
            ..record
        };
        log.push_check(before, "SYN-ACK in 0.1 ms");
        assert_eq!(
            log.checks_at(&clock, wrap + Duration::from_millis(3)),
            vec![before]
        );
        assert_eq!(std::mem::size_of::<Slot>(), 8);
    }
}
