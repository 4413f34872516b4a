//! Scripted health-check targets on a paused tokio clock, shared by the timing tests.
//!
//! Each target changes behaviour (answers, never answers, refuses at once, HTTP 500) at a
//! chosen time; the real engine, scheduler and state machine run against it.
//!
//! `mod support;` brings this file only. The other files of this folder are helpers of other
//! test binaries, each taken on its own as `mod support { pub mod NAME; }` so that a binary
//! compiles only what it uses: l7.rs (l7_backup_maintenance, l7_failures, l7_protocols),
//! http1.rs (l7_http1), api_node.rs (api_reads, api_changes), config_issues.rs
//! (config_errors_fields, config_errors_vservices, config_errors_all_at_once) and gslb.rs
//! (gslb, gslb_counters).
#![allow(dead_code)]

use std::collections::HashMap;
use std::future::pending;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use lb::config::{BackendService, Handshake, HealthCheck, HealthKind};
use lb::health::{
    BoxFuture, CheckRecord, EngineOptions, HealthEngine, HealthState, Probe, ProbeFactory,
    ProbeResult,
};
use tokio::time::{Instant, sleep};

/// How long a scripted answer (success or HTTP 500) takes, like a fast LAN backend.
pub const ANSWER: Duration = Duration::from_millis(2);
/// Slack for comparisons of times that are exact on the paused clock.
pub const EPS: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    /// Answers correctly after ANSWER.
    Answer,
    /// Never answers: the engine must cut the check at T.
    Silent,
    /// Port closed: fails at once.
    Refuse,
    /// Answers HTTP 500 after ANSWER.
    Http500,
}

/// A target whose behaviour changes at given times since the test's origin.
pub struct Script {
    pub origin: Instant,
    /// (start offset, behaviour), sorted by offset; the first starts at zero.
    pub phases: Vec<(Duration, Behaviour)>,
}

impl Script {
    fn behaviour(&self) -> Behaviour {
        let now = self.origin.elapsed();
        self.phases
            .iter()
            .rev()
            .find(|(from, _)| *from <= now)
            .map_or(Behaviour::Answer, |(_, b)| *b)
    }
}

impl Probe for Script {
    fn check(&self) -> BoxFuture<'_, ProbeResult> {
        let behaviour = self.behaviour();
        Box::pin(async move {
            match behaviour {
                Behaviour::Answer => {
                    sleep(ANSWER).await;
                    ProbeResult::success("status 200", ANSWER)
                }
                Behaviour::Silent => pending().await,
                Behaviour::Refuse => {
                    ProbeResult::failure("connect: connection refused", Duration::ZERO)
                }
                Behaviour::Http500 => {
                    sleep(ANSWER).await;
                    ProbeResult::failure("status 500, expected one of [200]", ANSWER)
                }
            }
        })
    }
}

/// Hands each service its script; a service without one answers always.
pub struct Scripts(pub HashMap<String, Arc<Script>>);

impl ProbeFactory for Scripts {
    fn build(&self, service: &BackendService, _check: &HealthCheck) -> Option<Arc<dyn Probe>> {
        Some(match self.0.get(&service.name) {
            Some(script) => script.clone(),
            None => Arc::new(Script {
                origin: Instant::now(),
                phases: vec![],
            }),
        })
    }
}

pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

pub fn profile(p: f64, t: f64, rs: u32, rf: u32) -> HealthCheck {
    HealthCheck {
        name: "hc".into(),
        kind: HealthKind::Tcp(Handshake::HalfOpen),
        period: secs(p),
        timeout: secs(t),
        required_successes: rs,
        required_failures: rf,
        passive_failures: None,
        max_ejection_percent: 50,
    }
}

pub fn defaults() -> HealthCheck {
    profile(1.0, 1.0, 3, 2)
}

pub fn service(name: &str, check: Option<&str>) -> BackendService {
    BackendService {
        name: name.into(),
        address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        address6: None,
        port: 8080,
        weight: 1,
        health_check: check.map(Into::into),
        maintenance: false,
        backup: false,
        max_connections: None,
        tunnel_check: None,
    }
}

/// Starts an engine whose services follow `scripts`; spreading is off so tests are exact.
pub fn start(
    services: &[BackendService],
    check: &HealthCheck,
    scripts: Vec<(&str, Vec<(f64, Behaviour)>)>,
    spread: bool,
) -> HealthEngine {
    let origin = Instant::now();
    let scripts = scripts
        .into_iter()
        .map(|(name, phases)| {
            let phases = phases.into_iter().map(|(at, b)| (secs(at), b)).collect();
            (name.to_string(), Arc::new(Script { origin, phases }))
        })
        .collect();
    let options = EngineOptions {
        probes: Arc::new(Scripts(scripts)),
        spread_first_checks: spread,
        ..EngineOptions::default()
    };
    HealthEngine::start_with(services, std::slice::from_ref(check), options)
}

/// Time (since start) of the first transition of `name` into `to` at or after `after`.
pub fn decided(engine: &HealthEngine, name: &str, to: HealthState, after: Duration) -> Duration {
    engine
        .transitions(name)
        .iter()
        .find(|t| t.to == to && t.at.since_start >= after)
        .map(|t| t.at.since_start)
        .unwrap_or_else(|| {
            panic!(
                "{name}: no transition to {to} after {after:?}: {:?}",
                engine.transitions(name)
            )
        })
}

pub fn end(record: &CheckRecord) -> Duration {
    record.at.since_start + record.duration
}

/// The end of the `n`-th check (1-based) that started at or after `from`.
pub fn nth_check_end_after(checks: &[CheckRecord], from: Duration, n: usize) -> Duration {
    let record = checks
        .iter()
        .filter(|c| c.at.since_start >= from)
        .nth(n - 1)
        .unwrap_or_else(|| panic!("fewer than {n} checks after {from:?}"));
    end(record)
}

pub fn assert_close(actual: Duration, expected: Duration, what: &str) {
    let diff = actual.abs_diff(expected);
    assert!(diff <= EPS, "{what}: got {actual:?}, expected {expected:?}");
}

/// Failure onsets spread over one period after the `k`-th check (whose start drifts by
/// ANSWER per check): from just after that check ended to just before the next one starts.
pub fn onsets(check: &HealthCheck, k: u32) -> Vec<f64> {
    let step = (check.period + ANSWER).as_secs_f64();
    let first = k as f64 * step + ANSWER.as_secs_f64() + 0.001;
    let last = (k + 1) as f64 * step - 0.001;
    (0..5)
        .map(|i| first + (last - first) * i as f64 / 4.0)
        .collect()
}
