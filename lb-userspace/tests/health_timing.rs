//! Health engine timing on a paused tokio clock (S-HC3, S-HC5..S-HC9, S-RF3).
//!
//! Scripted targets replace the network: each one changes behaviour (answers, never answers,
//! refuses at once, HTTP 500) at a chosen time, and the real scheduler and state machine run
//! against it. Every expected delay is checked twice: against the bound of docs/behaviour.md,
//! and against the exact value computed from the check schedule the engine actually followed.

mod support;

use std::time::Duration;

use lb::config::HealthCheck;
use lb::health::HealthState;
use support::*;
use tokio::time::sleep;

/// Runs one server that answers, then behaves as `failure` from each onset; returns the
/// decision delays after checking each one against the schedule.
async fn failure_delays(check: &HealthCheck, failure: Behaviour) -> Vec<Duration> {
    let mut delays = Vec::new();
    for onset in onsets(check, 10) {
        let engine = start(
            &[service("web", Some("hc"))],
            check,
            vec![("web", vec![(0.0, Behaviour::Answer), (onset, failure)])],
            false,
        );
        sleep(secs(onset) + 4 * (check.period + check.timeout) + secs(1.0)).await;
        assert_eq!(engine.snapshot().state("web"), Some(HealthState::Error));
        let at = decided(&engine, "web", HealthState::Error, secs(onset));
        // Exact: the decision is the end of the RF-th check that started after the onset.
        let rf = check.required_failures as usize;
        let expected = nth_check_end_after(&engine.checks("web"), secs(onset), rf);
        assert_close(
            at,
            expected,
            "decision at the end of the RF-th failing check",
        );
        delays.push(at - secs(onset));
        engine.shutdown();
    }
    delays
}

// S-HC9: defaults (P=1, T=1, RS=3, RF=2); a server that stops answering is decided within
// about RF x (P + T) = 4 s.
#[tokio::test(start_paused = true)]
async fn s_hc9_silent_server_decided_within_rf_times_p_plus_t() {
    let check = defaults();
    let delays = failure_delays(&check, Behaviour::Silent).await;
    for d in &delays {
        assert!(
            *d >= secs(2.0) && *d <= secs(4.0) + EPS,
            "delay {d:?} outside 2..4 s"
        );
    }
    // The phase of the onset matters: just before a check ~3 s, just after one ~4 s.
    assert!(delays.iter().any(|d| *d < secs(3.1)) && delays.iter().any(|d| *d > secs(3.9)));
}

// S-HC9: a closed port is decided within about RF x P = 2 s (at least (RF - 1) x P).
#[tokio::test(start_paused = true)]
async fn s_hc9_closed_port_decided_within_rf_times_p() {
    let check = defaults();
    let delays = failure_delays(&check, Behaviour::Refuse).await;
    for d in &delays {
        assert!(
            *d >= secs(1.0) - EPS && *d <= secs(2.0) + EPS,
            "delay {d:?} outside 1..2 s"
        );
    }
}

// S-HC9: HTTP 500 is decided within about RF x P (plus the answer time of the checks).
#[tokio::test(start_paused = true)]
async fn s_hc9_http_500_decided_within_rf_times_p() {
    let check = defaults();
    let delays = failure_delays(&check, Behaviour::Http500).await;
    let answers = 2 * ANSWER;
    for d in &delays {
        assert!(
            *d >= secs(1.0) && *d <= secs(2.0) + answers + EPS,
            "delay {d:?} outside 1..2 s"
        );
    }
}

// S-RF3 row P=5 s, T=10 s, RF=3: the health decision forms by RF x (P + T) = 45 s after the
// failure (and not before (RF - 1) x (P + T) + T = 40 s).
#[tokio::test(start_paused = true)]
async fn s_rf3_slow_profile_decided_by_rf_times_p_plus_t() {
    let check = profile(5.0, 10.0, 3, 3);
    let delays = failure_delays(&check, Behaviour::Silent).await;
    for d in &delays {
        assert!(
            *d >= secs(40.0) && *d <= secs(45.0) + EPS,
            "delay {d:?} outside 40..45 s"
        );
    }
}

/// A server refusing until `onset`, then answering: returns the delay to OK.
async fn recovery_delay(check: &HealthCheck, down: Behaviour, onset: f64) -> Duration {
    let engine = start(
        &[service("web", Some("hc"))],
        check,
        vec![("web", vec![(0.0, down), (onset, Behaviour::Answer)])],
        false,
    );
    sleep(secs(onset) + 3 * (check.period + check.timeout) + secs(1.0)).await;
    assert_eq!(engine.snapshot().state("web"), Some(HealthState::Ok));
    let transitions = engine.transitions("web");
    assert_eq!(transitions[0].to, HealthState::Error, "{transitions:?}");
    let at = decided(&engine, "web", HealthState::Ok, secs(onset));
    let rs = check.required_successes as usize;
    let expected = nth_check_end_after(&engine.checks("web"), secs(onset), rs);
    assert_close(
        at,
        expected,
        "recovery at the end of the RS-th successful check",
    );
    at - secs(onset)
}

// S-HC9: recovery forms between (RS - 1) x P and RS x P (plus the successful checks' own
// durations) after the server is back, for a closed port that opens again.
#[tokio::test(start_paused = true)]
async fn s_hc9_recovery_between_rs_minus_one_and_rs_times_p() {
    let check = defaults();
    for onset in [10.001, 10.25, 10.5, 10.75, 10.999] {
        let d = recovery_delay(&check, Behaviour::Refuse, onset).await;
        let upper = secs(3.0) + 3 * ANSWER + EPS;
        assert!(
            d >= secs(2.0) && d <= upper,
            "onset {onset}: recovery {d:?} outside 2..3 s"
        );
    }
}

// S-HC9 with a silent server coming back: a check already waiting for its timeout must end
// first, so recovery can take up to T longer than RS x P.
#[tokio::test(start_paused = true)]
async fn s_hc9_recovery_after_silence_adds_at_most_one_timeout() {
    let check = defaults();
    for onset in [10.001, 10.25, 10.5, 10.75, 10.999] {
        let d = recovery_delay(&check, Behaviour::Silent, onset).await;
        let upper = secs(3.0) + secs(1.0) + 3 * ANSWER + EPS;
        assert!(
            d >= secs(2.0) && d <= upper,
            "onset {onset}: recovery {d:?} outside 2..4 s"
        );
    }
}

// S-HC5: a new check starts in Preparing and turns OK after RS successes.
#[tokio::test(start_paused = true)]
async fn s_hc5_preparing_to_ok_after_rs_successes_at_startup() {
    let check = defaults();
    let engine = start(&[service("web", Some("hc"))], &check, vec![], false);
    assert_eq!(engine.snapshot().state("web"), Some(HealthState::Preparing));
    sleep(secs(1.5)).await;
    assert_eq!(engine.snapshot().state("web"), Some(HealthState::Preparing));
    sleep(secs(2.0)).await;
    assert_eq!(engine.snapshot().state("web"), Some(HealthState::Ok));
    let transitions = engine.transitions("web");
    assert_eq!(transitions.len(), 1);
    assert_eq!(
        (transitions[0].from, transitions[0].to),
        (HealthState::Preparing, HealthState::Ok)
    );
    // Checks at 0, P + ANSWER, 2 (P + ANSWER); OK at the end of the third.
    assert_close(
        transitions[0].at.since_start,
        secs(2.0) + 3 * ANSWER,
        "startup OK",
    );
}

// S-HC5: Preparing turns Error after RF failures, without passing through OK.
#[tokio::test(start_paused = true)]
async fn s_hc5_preparing_to_error_after_rf_failures() {
    let check = defaults();
    let engine = start(
        &[service("web", Some("hc"))],
        &check,
        vec![("web", vec![(0.0, Behaviour::Refuse)])],
        false,
    );
    sleep(secs(5.0)).await;
    let transitions = engine.transitions("web");
    assert_eq!(transitions.len(), 1, "{transitions:?}");
    assert_eq!(
        (transitions[0].from, transitions[0].to),
        (HealthState::Preparing, HealthState::Error)
    );
    assert_close(
        transitions[0].at.since_start,
        secs(1.0),
        "RF=2 refusals at 0 s and 1 s",
    );
}

// S-HC5 for each family: a dual-stack Backend Service's IPv6 address is checked apart, so a
// server that refuses over IPv6 is Error for its IPv6 VIPs and stays OK for its IPv4 ones.
#[tokio::test(start_paused = true)]
async fn s_hc5_dual_stack_service_is_decided_per_family() {
    let check = defaults();
    let mut web = service("web", Some("hc"));
    web.address6 = Some("2001:db8::7".parse().unwrap());
    let engine = start(
        &[web],
        &check,
        vec![("web (IPv6)", vec![(0.0, Behaviour::Refuse)])],
        false,
    );
    sleep(secs(5.0)).await;
    let snapshot = engine.snapshot();
    assert_eq!(snapshot.state("web"), Some(HealthState::Ok));
    assert_eq!(snapshot.state("web (IPv6)"), Some(HealthState::Error));
    assert_eq!(snapshot.services.len(), 2, "{:?}", snapshot.services);
    let ipv6 = engine.transitions("web (IPv6)");
    assert_eq!(ipv6.len(), 1, "{ipv6:?}");
    assert_close(ipv6[0].at.since_start, secs(1.0), "RF=2 refusals over IPv6");
    assert!(
        engine
            .last_reason("web (IPv6)")
            .is_some_and(|r| r.contains("refused"))
    );
}

// S-HC5 across a restart: a service whose saved state matches its address, port
// and profile starts in that state, not Preparing, and its checks go on from there; one
// whose port changed starts in Preparing.
#[tokio::test(start_paused = true)]
async fn s_hc5_a_restart_keeps_the_saved_state_of_an_unchanged_service() {
    use lb::health::{EngineOptions, HealthEngine, Restored};
    let check = defaults();
    let saved = |port: u16| Restored {
        state: HealthState::Ok,
        address: "127.0.0.1".parse().unwrap(),
        port,
        check: "hc".into(),
    };
    let restored = [("web", saved(8080)), ("moved", saved(9999))]
        .into_iter()
        .map(|(n, r)| (n.to_string(), r))
        .collect();
    let refusing = Scripts(
        [(
            "web".to_string(),
            std::sync::Arc::new(Script {
                origin: tokio::time::Instant::now(),
                phases: vec![(secs(0.0), Behaviour::Refuse)],
            }),
        )]
        .into(),
    );
    let engine = HealthEngine::start_with(
        &[service("web", Some("hc")), service("moved", Some("hc"))],
        std::slice::from_ref(&check),
        EngineOptions {
            probes: std::sync::Arc::new(refusing),
            spread_first_checks: false,
            runtime: None,
            restored,
        },
    );
    let snapshot = engine.snapshot();
    assert_eq!(
        snapshot.state("web"),
        Some(HealthState::Ok),
        "restored at once"
    );
    assert_eq!(
        snapshot.state("moved"),
        Some(HealthState::Preparing),
        "port changed"
    );
    let restored = engine.transitions("web");
    assert_eq!(restored[0].reason, "restored from the previous run");
    // The checks go on from OK: RF = 2 refusals decide Error, from OK.
    sleep(secs(2.5)).await;
    let last = engine.transitions("web").pop().expect("a decision");
    assert_eq!((last.from, last.to), (HealthState::Ok, HealthState::Error));
}

// S-HC3: a silent check lasts exactly T, a refused one ends at once, and the next check
// starts exactly P after the previous one ended: checks never overlap.
#[tokio::test(start_paused = true)]
async fn s_hc3_checks_end_then_wait_p_and_never_overlap() {
    let check = profile(2.0, 1.5, 3, 2);
    let phases = vec![
        (0.0, Behaviour::Answer),
        (5.0, Behaviour::Silent),
        (12.0, Behaviour::Refuse),
        (18.0, Behaviour::Http500),
        (24.0, Behaviour::Answer),
    ];
    let engine = start(
        &[service("web", Some("hc"))],
        &check,
        vec![("web", phases)],
        false,
    );
    sleep(secs(30.0)).await;
    let checks = engine.checks("web");
    assert!(checks.len() >= 10, "{checks:?}");
    for pair in checks.windows(2) {
        assert_close(
            pair[1].at.since_start,
            end(&pair[0]) + check.period,
            "next start = end + P",
        );
    }
    let at = |s: f64| checks.iter().find(|c| c.at.since_start >= secs(s)).copied();
    let silent = at(5.0).expect("a check in the silent phase");
    assert_eq!((silent.ok, silent.duration), (false, check.timeout));
    let refused = at(12.0).expect("a check in the refusing phase");
    assert_eq!((refused.ok, refused.duration), (false, Duration::ZERO));
    let failed_500 = at(18.0).expect("a check in the HTTP 500 phase");
    assert_eq!((failed_500.ok, failed_500.duration), (false, ANSWER));
}

// S-HC3: the first checks of many services are spread over one period, not fired together.
#[tokio::test(start_paused = true)]
async fn s_hc3_first_checks_spread_over_one_period() {
    let check = defaults();
    let services: Vec<_> = (0..200)
        .map(|i| service(&format!("s{i}"), Some("hc")))
        .collect();
    let engine = start(&services, &check, vec![], true);
    sleep(secs(1.5)).await;
    let firsts: Vec<Duration> = services
        .iter()
        .map(|s| engine.checks(&s.name)[0].at.since_start)
        .collect();
    // Jitter is drawn in [0, P); tokio timers round up to whole milliseconds.
    assert!(firsts.iter().all(|t| *t <= check.period), "{firsts:?}");
    let mut distinct = firsts.clone();
    distinct.sort();
    distinct.dedup();
    assert!(
        distinct.len() > 150,
        "only {} distinct start times",
        distinct.len()
    );
    let first_half = firsts.iter().filter(|t| **t < secs(0.5)).count();
    assert!(
        (50..150).contains(&first_half),
        "{first_half} of 200 in the first half period"
    );
    // Spread does not change the rule: each is OK within P + (RS - 1) x P + answers.
    sleep(secs(2.0)).await;
    let snapshot = engine.snapshot();
    assert!(
        services
            .iter()
            .all(|s| snapshot.state(&s.name) == Some(HealthState::Ok))
    );
}

// S-HC6: a Backend Service without a health check is always OK and never checked.
#[tokio::test(start_paused = true)]
async fn s_hc6_service_without_profile_is_always_ok() {
    let check = defaults();
    let engine = start(
        &[service("plain", None), service("web", Some("hc"))],
        &check,
        vec![],
        false,
    );
    let health = engine.snapshot().services["plain"];
    assert_eq!((health.state, health.checked), (HealthState::Ok, false));
    sleep(secs(10.0)).await;
    assert_eq!(engine.snapshot().state("plain"), Some(HealthState::Ok));
    assert!(engine.checks("plain").is_empty());
    assert!(engine.transitions("plain").is_empty());
    assert!(engine.snapshot().services["web"].checked);
}

// S-HC7: Maintenance does not stop checking; the state keeps showing the check result.
#[tokio::test(start_paused = true)]
async fn s_hc7_maintenance_does_not_stop_checks() {
    let check = defaults();
    let mut svc = service("web", Some("hc"));
    svc.maintenance = true;
    let engine = start(
        &[svc],
        &check,
        vec![(
            "web",
            vec![(0.0, Behaviour::Answer), (6.0, Behaviour::Refuse)],
        )],
        false,
    );
    sleep(secs(4.0)).await;
    assert_eq!(engine.snapshot().state("web"), Some(HealthState::Ok));
    sleep(secs(4.0)).await;
    assert_eq!(engine.snapshot().state("web"), Some(HealthState::Error));
    assert!(engine.checks("web").len() >= 7);
}

// S-HC8: each change is recorded with time, old and new state, reason and check duration.
#[tokio::test(start_paused = true)]
async fn s_hc8_transitions_carry_time_states_reason_and_duration() {
    let check = defaults();
    let engine = start(
        &[service("web", Some("hc"))],
        &check,
        vec![(
            "web",
            vec![
                (0.0, Behaviour::Answer),
                (5.5, Behaviour::Http500),
                (9.5, Behaviour::Answer),
            ],
        )],
        false,
    );
    sleep(secs(15.0)).await;
    let log = engine.transitions("web");
    let states: Vec<_> = log.iter().map(|t| (t.from, t.to)).collect();
    use HealthState::*;
    assert_eq!(states, [(Preparing, Ok), (Ok, Error), (Error, Ok)]);
    assert!(
        log[1].reason.contains("2 consecutive failures") && log[1].reason.contains("status 500")
    );
    assert!(log[2].reason.contains("3 consecutive successes"));
    assert!(log.iter().all(|t| t.check_duration == ANSWER));
    assert!(log.windows(2).all(|w| w[0].at < w[1].at));
    // Wall time follows the tokio clock: the gaps match.
    let wall_gap = log[1].at.at.duration_since(log[0].at.at).unwrap();
    assert_eq!(wall_gap, log[1].at.since_start - log[0].at.since_start);
    assert!(log[0].at.unix_ms() > 1_600_000_000_000);
    assert!(engine.last_reason("web").is_some_and(|r| r.contains("200")));
}

// S-HC5 on reload: unchanged services keep state and schedule; a changed profile starts
// again from Preparing; a removed profile means always OK (S-HC6); removed services vanish.
#[tokio::test(start_paused = true)]
async fn s_hc5_reload_keeps_unchanged_and_restarts_changed() {
    let check = defaults();
    let services = [
        service("keep", Some("hc")),
        service("change", Some("hc")),
        service("drop", Some("hc")),
        service("uncheck", Some("hc")),
    ];
    let engine = start(&services, &check, vec![], false);
    sleep(secs(5.0)).await;
    let snapshot = engine.snapshot();
    assert!(
        services
            .iter()
            .all(|s| snapshot.state(&s.name) == Some(HealthState::Ok))
    );
    let keep_checks = engine.checks("keep").len();

    let mut other = check.clone();
    other.name = "other".into();
    other.required_successes = 2;
    let reloaded = [
        service("keep", Some("hc")),
        service("change", Some("other")),
        service("uncheck", None),
        service("new", Some("hc")),
    ];
    let rx = engine.subscribe();
    engine.update(&reloaded, &[check.clone(), other]);
    assert!(rx.has_changed().unwrap());
    let snapshot = engine.snapshot();
    assert_eq!(snapshot.state("keep"), Some(HealthState::Ok));
    assert_eq!(snapshot.state("change"), Some(HealthState::Preparing));
    assert_eq!(snapshot.state("uncheck"), Some(HealthState::Ok));
    assert!(!snapshot.services["uncheck"].checked);
    assert_eq!(snapshot.state("new"), Some(HealthState::Preparing));
    assert_eq!(snapshot.state("drop"), None);

    sleep(secs(5.0)).await;
    // "keep" went on with the same schedule: no extra transition, checks continued.
    assert_eq!(engine.transitions("keep").len(), 1);
    let checks = engine.checks("keep");
    assert!(checks.len() > keep_checks);
    for pair in checks.windows(2) {
        assert_close(
            pair[1].at.since_start,
            end(&pair[0]) + check.period,
            "schedule kept",
        );
    }
    let change: Vec<_> = engine
        .transitions("change")
        .iter()
        .map(|t| (t.from, t.to))
        .collect();
    use HealthState::*;
    assert_eq!(change, [(Preparing, Ok), (Ok, Preparing), (Preparing, Ok)]);
    let uncheck = engine.checks("uncheck").len();
    sleep(secs(3.0)).await;
    assert_eq!(
        engine.checks("uncheck").len(),
        uncheck,
        "no more checks once unassigned"
    );
    assert_eq!(engine.snapshot().state("new"), Some(HealthState::Ok));
}

// S-RF1 needs reaction to decisions: subscribers see a new generation on each change, and the
// snapshot carries the same generation.
#[tokio::test(start_paused = true)]
async fn s_hc8_subscribers_are_notified_of_each_change() {
    let check = defaults();
    let engine = start(
        &[service("web", Some("hc"))],
        &check,
        vec![(
            "web",
            vec![(0.0, Behaviour::Answer), (4.5, Behaviour::Refuse)],
        )],
        false,
    );
    let mut rx = engine.subscribe();
    let start_generation = *rx.borrow_and_update();
    rx.changed().await.unwrap();
    let snapshot = engine.snapshot();
    assert_eq!(snapshot.state("web"), Some(HealthState::Ok));
    assert_eq!(snapshot.generation, *rx.borrow_and_update());
    assert!(snapshot.generation > start_generation);
    rx.changed().await.unwrap();
    assert_eq!(engine.snapshot().state("web"), Some(HealthState::Error));
    assert_eq!(engine.snapshot().generation, *rx.borrow());
}
