//! The health state machine of one Backend Service (S-HC5): consecutive results move it
//! between Preparing, OK and Error.

use std::fmt;

/// Health of a Backend Service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum HealthState {
    /// A newly assigned check has not yet decided; the service gets no traffic (S-HC5).
    Preparing,
    /// Healthy, or without a health check (S-HC6).
    #[serde(rename = "OK")]
    Ok,
    /// Failed its check RF times in a row.
    Error,
}

impl fmt::Display for HealthState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Preparing => "Preparing",
            Self::Ok => "OK",
            Self::Error => "Error",
        })
    }
}

/// Counts consecutive results and decides transitions per S-HC5.
#[derive(Clone, Debug)]
pub struct StateMachine {
    state: HealthState,
    successes: u32,
    failures: u32,
    required_successes: u32,
    required_failures: u32,
}

impl StateMachine {
    /// Starts in Preparing. RS and RF below 1 are taken as 1 (one result always decides).
    pub fn new(required_successes: u32, required_failures: u32) -> Self {
        Self {
            state: HealthState::Preparing,
            successes: 0,
            failures: 0,
            required_successes: required_successes.max(1),
            required_failures: required_failures.max(1),
        }
    }

    /// The same machine starting in `state` (a state restored from a previous run).
    pub fn starting_in(mut self, state: HealthState) -> Self {
        self.state = state;
        self
    }

    /// The current state.
    pub fn state(&self) -> HealthState {
        self.state
    }

    /// Feeds one check result; returns the new state when it changed.
    pub fn observe(&mut self, ok: bool) -> Option<HealthState> {
        if ok {
            self.failures = 0;
            self.successes = self.successes.saturating_add(1);
        } else {
            self.successes = 0;
            self.failures = self.failures.saturating_add(1);
        }
        let next = match self.state {
            HealthState::Preparing | HealthState::Error
                if self.successes >= self.required_successes =>
            {
                HealthState::Ok
            }
            HealthState::Preparing | HealthState::Ok if self.failures >= self.required_failures => {
                HealthState::Error
            }
            current => current,
        };
        if next == self.state {
            return None;
        }
        self.state = next;
        self.successes = 0;
        self.failures = 0;
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use HealthState::*;

    fn feed(machine: &mut StateMachine, results: &[bool]) -> Vec<Option<HealthState>> {
        results.iter().map(|&ok| machine.observe(ok)).collect()
    }

    #[test]
    fn s_hc5_preparing_to_ok_after_rs_successes() {
        let mut m = StateMachine::new(3, 2);
        assert_eq!(feed(&mut m, &[true, true, true]), [None, None, Some(Ok)]);
    }

    #[test]
    fn s_hc5_preparing_to_error_after_rf_failures() {
        let mut m = StateMachine::new(3, 2);
        assert_eq!(
            feed(&mut m, &[true, false, false]),
            [None, None, Some(Error)]
        );
    }

    #[test]
    fn s_hc5_ok_to_error_needs_consecutive_failures() {
        let mut m = StateMachine::new(1, 3);
        m.observe(true);
        assert_eq!(feed(&mut m, &[false, false, true, false, false]), [None; 5]);
        assert_eq!(m.observe(false), Some(Error));
    }

    #[test]
    fn s_hc5_error_to_ok_needs_consecutive_successes() {
        let mut m = StateMachine::new(3, 1);
        m.observe(false);
        assert_eq!(m.state(), Error);
        assert_eq!(feed(&mut m, &[true, true, false, true, true]), [None; 5]);
        assert_eq!(m.observe(true), Some(Ok));
        // Successes in OK and failures in Error change nothing.
        assert_eq!(m.observe(true), None);
    }

    #[test]
    fn s_hc5_zero_thresholds_act_as_one() {
        let mut m = StateMachine::new(0, 0);
        assert_eq!(m.observe(false), Some(Error));
        assert_eq!(m.observe(true), Some(Ok));
    }
}
