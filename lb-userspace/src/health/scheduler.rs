//! The check loop of one Backend Service (S-HC3): check, record, decide, wait P, repeat.
//! A check never overlaps the next one, and one that gets no answer is cut at T.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::{Instant, sleep, timeout};

use crate::config::HealthCheck;

use super::clock::Clock;
use super::history::{CheckRecord, ServiceLog, Transition};
use super::probe::{Probe, ProbeResult, fmt_ms};
use super::state::{HealthState, StateMachine};

/// Shortest period honoured, so a zero period cannot spin a core.
const MIN_PERIOD: Duration = Duration::from_millis(10);

/// Everything one service's check loop needs.
pub(crate) struct CheckTask {
    /// Backend Service name, for logs.
    pub name: String,
    /// The target.
    pub probe: Arc<dyn Probe>,
    /// Period, Timeout, RS and RF come from here (shared by the profile's services).
    pub profile: Arc<HealthCheck>,
    /// Delay before the first check, spreading many services over one period.
    pub first_delay: Duration,
    /// Where check results go.
    pub log: Arc<Mutex<ServiceLog>>,
    /// Time stamps.
    pub clock: Clock,
    /// Where the state machine starts: Preparing, or the state restored from the previous
    /// run.
    pub initial: HealthState,
    /// Set when live traffic put the service in Error (passive health, S-RT3): the machine
    /// restarts from Error, so RS successes are needed to return.
    pub forced_error: Arc<AtomicBool>,
}

/// Runs checks until the task is aborted; `on_change` receives every state change.
pub(crate) async fn run(task: CheckTask, on_change: impl Fn(Transition) + Send) {
    let CheckTask {
        name,
        probe,
        profile,
        first_delay,
        log,
        clock,
        initial,
        forced_error,
    } = task;
    let period = profile.period.max(MIN_PERIOD);
    let mut machine = StateMachine::new(profile.required_successes, profile.required_failures)
        .starting_in(initial);
    sleep(first_delay).await;
    loop {
        let started = Instant::now();
        let result = match timeout(profile.timeout, probe.check()).await {
            Ok(result) => result,
            Err(_) => ProbeResult::failure(
                format!("no answer within the timeout ({})", fmt_ms(profile.timeout)),
                profile.timeout,
            ),
        };
        let duration = started.elapsed();
        let record = CheckRecord {
            at: clock.stamp(started),
            duration,
            ok: result.ok,
        };
        log.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_check(record, &result.reason);
        if forced_error.swap(false, Ordering::AcqRel) {
            machine = StateMachine::new(profile.required_successes, profile.required_failures)
                .starting_in(HealthState::Error);
        }
        let before = machine.state();
        if let Some(after) = machine.observe(result.ok) {
            let (count, word) = if result.ok {
                (profile.required_successes.max(1), "successes")
            } else {
                (profile.required_failures.max(1), "failures")
            };
            let reason = format!(
                "{count} consecutive {word}; last check: {} ({})",
                result.reason,
                fmt_ms(duration)
            );
            tracing::info!(service = %name, from = %before, to = %after, %reason, "health state changed");
            on_change(Transition {
                at: clock.now(),
                from: before,
                to: after,
                reason,
                check_duration: duration,
            });
        } else {
            tracing::trace!(service = %name, ok = result.ok, reason = %result.reason, "health check");
        }
        sleep(period).await;
    }
}
