//! Bounded per-service records: state transitions (S-HC8) and recent check results for
//! plotting check durations (S-OB3).

use std::collections::VecDeque;
use std::time::Duration;

use super::clock::Stamp;
use super::state::HealthState;

/// Transitions kept per Backend Service.
pub const MAX_TRANSITIONS: usize = 256;
/// Check results kept per Backend Service (about two minutes at P = 1 s).
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

/// The records of one Backend Service.
#[derive(Debug, Default)]
pub(crate) struct ServiceLog {
    transitions: VecDeque<Transition>,
    checks: VecDeque<CheckRecord>,
    last_reason: String,
}

impl ServiceLog {
    /// Appends a transition, dropping the oldest beyond the bound.
    pub(crate) fn push_transition(&mut self, transition: Transition) {
        push_bounded(&mut self.transitions, transition, MAX_TRANSITIONS);
    }

    /// Appends a check result and remembers its reason.
    pub(crate) fn push_check(&mut self, record: CheckRecord, reason: &str) {
        push_bounded(&mut self.checks, record, MAX_CHECKS);
        reason.clone_into(&mut self.last_reason);
    }

    /// Transitions, oldest first.
    pub(crate) fn transitions(&self) -> Vec<Transition> {
        self.transitions.iter().cloned().collect()
    }

    /// Check results, oldest first.
    pub(crate) fn checks(&self) -> Vec<CheckRecord> {
        self.checks.iter().copied().collect()
    }

    /// The reason of the latest check.
    pub(crate) fn last_reason(&self) -> &str {
        &self.last_reason
    }
}

fn push_bounded<T>(queue: &mut VecDeque<T>, item: T, bound: usize) {
    if queue.len() >= bound {
        queue.pop_front();
    }
    queue.push_back(item);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn stamp(s: u64) -> Stamp {
        Stamp {
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(s),
            since_start: Duration::from_secs(s),
        }
    }

    #[test]
    fn s_hc8_logs_are_bounded_and_keep_the_newest() {
        let mut log = ServiceLog::default();
        for i in 0..(MAX_TRANSITIONS as u64 + 10) {
            log.push_transition(Transition {
                at: stamp(i),
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
                at: stamp(i),
                duration: Duration::from_millis(i),
                ok: true,
            };
            log.push_check(record, "fine");
        }
        assert_eq!(log.checks().len(), MAX_CHECKS);
        assert_eq!(log.checks()[0].at, stamp(1));
        assert_eq!(log.last_reason(), "fine");
    }
}
