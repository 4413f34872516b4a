//! The check loop of one Backend Service (S-HC3): check, record, decide, wait P, repeat.
//! A check never overlaps the next one, and one that gets no answer is cut at T.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{Instant, sleep, timeout};

use crate::config::HealthCheck;
use crate::stats::Histogram;

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
    /// Where each check's duration is counted (one histogram per profile).
    pub durations: Arc<Histogram>,
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
    /// Raised when live traffic put the service in Error (passive health, S-RT3): the
    /// machine restarts from Error, so RS successes are needed to return.
    pub forced_error: Arc<ForcedError>,
}

/// Live traffic decided Error (passive health): a flag the check loop reads after each check,
/// and a wake-up for the loop of a profile with no active check, which has nothing else to
/// wait for.
#[derive(Debug, Default)]
pub(crate) struct ForcedError {
    raised: AtomicBool,
    wake: Notify,
}

impl ForcedError {
    /// Live traffic put the service in Error.
    pub(crate) fn raise(&self) {
        self.raised.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// True once after each [`ForcedError::raise`].
    fn take(&self) -> bool {
        self.raised.swap(false, Ordering::AcqRel)
    }

    /// Waits for the next [`ForcedError::raise`].
    async fn raised(&self) {
        while !self.take() {
            self.wake.notified().await;
        }
    }
}

/// The loop of a service whose profile has no active check (`type = "passive"`): live
/// traffic is its only judge. Each time it puts the service in Error, the service returns to
/// OK `return_after` later, when the next requests try it again.
pub(crate) async fn run_passive(
    name: String,
    return_after: Duration,
    forced_error: Arc<ForcedError>,
    initial: HealthState,
    clock: Clock,
    on_change: impl Fn(Transition) + Send,
) {
    let mut in_error = initial == HealthState::Error;
    loop {
        if !in_error {
            forced_error.raised().await;
        }
        sleep(return_after).await;
        // A raise while waiting belongs to this same Error.
        forced_error.take();
        in_error = false;
        let reason = format!(
            "passive profile: {} in Error without an active check; tried again",
            fmt_secs(return_after)
        );
        tracing::info!(service = %name, from = "Error", to = "OK", %reason, "health state changed");
        on_change(Transition {
            at: clock.now(),
            from: HealthState::Error,
            to: HealthState::Ok,
            reason,
            check_duration: Duration::ZERO,
        });
    }
}

/// Whole seconds as "30 s", fractions as "0.5 s".
fn fmt_secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// What happens after each check, wherever it ran (a task of its own, or the TCP driver):
/// the result is logged and counted, and the state machine decides (S-HC3, S-HC5).
pub(crate) struct CheckBook {
    name: String,
    durations: Arc<Histogram>,
    profile: Arc<HealthCheck>,
    log: Arc<Mutex<ServiceLog>>,
    clock: Clock,
    machine: StateMachine,
    forced_error: Arc<ForcedError>,
    on_change: Box<dyn Fn(Transition) + Send>,
}

impl CheckBook {
    /// The book of `task`'s service; `on_change` receives every state change.
    pub(crate) fn new(task: &CheckTask, on_change: impl Fn(Transition) + Send + 'static) -> Self {
        let profile = Arc::clone(&task.profile);
        Self {
            name: task.name.clone(),
            durations: Arc::clone(&task.durations),
            machine: StateMachine::new(profile.required_successes, profile.required_failures)
                .starting_in(task.initial),
            profile,
            log: Arc::clone(&task.log),
            clock: task.clock,
            forced_error: Arc::clone(&task.forced_error),
            on_change: Box::new(on_change),
        }
    }

    /// The profile's period, never below the shortest one honoured.
    pub(crate) fn period(&self) -> Duration {
        self.profile.period.max(MIN_PERIOD)
    }

    /// The profile's Timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.profile.timeout
    }

    /// Records one check that started at `started` and lasted `duration`.
    pub(crate) fn record(&mut self, started: Instant, duration: Duration, ok: bool, reason: &str) {
        self.durations.observe(duration);
        let record = CheckRecord {
            at: self.clock.stamp(started),
            duration,
            ok,
        };
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_check(record, reason);
        let profile = &self.profile;
        if self.forced_error.take() {
            self.machine = StateMachine::new(profile.required_successes, profile.required_failures)
                .starting_in(HealthState::Error);
        }
        let before = self.machine.state();
        if let Some(after) = self.machine.observe(ok) {
            let (count, word) = if ok {
                (profile.required_successes.max(1), "successes")
            } else {
                (profile.required_failures.max(1), "failures")
            };
            let reason = format!(
                "{count} consecutive {word}; last check: {reason} ({})",
                fmt_ms(duration)
            );
            tracing::info!(service = %self.name, from = %before, to = %after, %reason, "health state changed");
            (self.on_change)(Transition {
                at: self.clock.now(),
                from: before,
                to: after,
                reason,
                check_duration: duration,
            });
        } else {
            tracing::trace!(service = %self.name, ok, reason, "health check");
        }
    }
}

/// Runs checks until the task is aborted; `on_change` receives every state change.
pub(crate) async fn run(
    task: CheckTask,
    probe: Arc<dyn Probe>,
    on_change: impl Fn(Transition) + Send + 'static,
) {
    let mut book = CheckBook::new(&task, on_change);
    let (period, limit) = (book.period(), book.timeout());
    sleep(task.first_delay).await;
    loop {
        let started = Instant::now();
        let result = match timeout(limit, probe.check()).await {
            Ok(result) => result,
            Err(_) => ProbeResult::failure(
                format!("no answer within the timeout ({})", fmt_ms(limit)),
                limit,
            ),
        };
        book.record(started, started.elapsed(), result.ok, &result.reason);
        sleep(period).await;
    }
}
