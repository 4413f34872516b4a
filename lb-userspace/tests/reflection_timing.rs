//! Reflection of health decisions into traffic, on a paused tokio clock (S-RF1, S-RF2,
//! S-RF3). The real engine decides against scripted targets; `lb::health::reflect` takes the
//! decisions over at its cadence; every change of the reflected view is recorded with its
//! time, and checked against the decision time (from the transition log) and the bounds of
//! docs/behaviour.md.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lb::config::HealthCheck;
use lb::health::{Cadence, HealthEngine, HealthState, L7_TICK, View, reflect};
use lb::selection::Health;
use support::*;
use tokio::sync::watch;
use tokio::time::{Instant, sleep};

/// The view changes of service `web`, as (time since start, new reflected state).
type Events = Arc<Mutex<Vec<(Duration, Health)>>>;

/// Runs one engine + reflector for `total`, with `web` following `phases`.
async fn scenario(
    check: &HealthCheck,
    cadence: Cadence,
    phases: Vec<(f64, Behaviour)>,
    total: Duration,
) -> (Arc<HealthEngine>, Vec<(Duration, Health)>) {
    let origin = Instant::now();
    let engine = Arc::new(start(
        &[service("web", Some("hc"))],
        check,
        vec![("web", phases)],
        false,
    ));
    let events: Events = Arc::default();
    let (_reload_tx, reload_rx) = watch::channel(0u64);
    let (stop_tx, stop_rx) = watch::channel(false);
    let task = {
        let events = events.clone();
        let mut last = None;
        tokio::spawn(reflect(
            engine.clone(),
            cadence,
            View::default(),
            reload_rx,
            stop_rx,
            move |v: &View| {
                let now = v.get("web");
                if last != Some(now) {
                    last = Some(now);
                    events.lock().unwrap().push((origin.elapsed(), now));
                }
            },
        ))
    };
    sleep(total).await;
    stop_tx.send(true).unwrap();
    task.await.unwrap();
    let events = events.lock().unwrap().clone();
    (engine, events)
}

/// When the reflected view first became `to` at or after `after`.
fn reflected(events: &[(Duration, Health)], to: Health, after: Duration) -> Duration {
    events
        .iter()
        .find(|(at, h)| *h == to && *at >= after)
        .map(|(at, _)| *at)
        .unwrap_or_else(|| panic!("never reflected {to:?} after {after:?}: {events:?}"))
}

/// The daemon's L7 cadence with the default bound (S-RF1: 2.5 s).
fn l7() -> Cadence {
    Cadence::l7_within(secs(2.5))
}

fn network() -> Cadence {
    Cadence {
        down_every: secs(9.0),
        up_every: secs(5.0),
    }
}

/// For each failure onset: (decision - onset, reflected - decision), both checked.
async fn removal_delays(
    check: &HealthCheck,
    cadence: Cadence,
    failure: Behaviour,
) -> Vec<(Duration, Duration)> {
    let mut out = Vec::new();
    for onset in onsets(check, 5) {
        let total =
            secs(onset) + 4 * (check.period + check.timeout) + cadence.down_every + secs(1.0);
        let (engine, events) = scenario(
            check,
            cadence,
            vec![(0.0, Behaviour::Answer), (onset, failure)],
            total,
        )
        .await;
        let decision = decided(&engine, "web", HealthState::Error, secs(onset));
        let seen = reflected(&events, Health::Error, secs(onset));
        assert!(
            seen >= decision,
            "reflected at {seen:?} before the decision at {decision:?}"
        );
        assert!(
            seen - decision <= cadence.down_every + EPS,
            "reflected {:?} after the decision, cadence {:?}",
            seen - decision,
            cadence.down_every
        );
        out.push((decision - secs(onset), seen - decision));
    }
    out
}

// S-RF1 + S-RF3: defaults, a server that stops answering leaves HTTP/L7 TCP traffic in
// 3-6 s: decision within RF x (P + T), then at most one L7 tick (250 ms, inside S-RF1's
// 2.5 s) to reach distribution. Every onset across one check period, the worst included.
#[tokio::test(start_paused = true)]
async fn s_rf3_silent_server_leaves_l7_traffic_in_about_3_to_6_s() {
    let delays = removal_delays(&defaults(), l7(), Behaviour::Silent).await;
    for (decide, reflect) in &delays {
        let total = *decide + *reflect;
        assert!(
            total >= secs(3.0) - secs(0.1) && total <= secs(6.0),
            "left L7 traffic after {total:?}"
        );
        assert!(
            *reflect <= L7_TICK + EPS,
            "reflected {reflect:?} after the decision"
        );
    }
    println!("silent server, L7: {delays:?}");
}

// S-RF3: a closed port (or HTTP 500) leaves L7 traffic in 1-4 s, in every run.
#[tokio::test(start_paused = true)]
async fn s_rf3_closed_port_or_http_500_leaves_l7_traffic_in_about_1_to_4_s() {
    for failure in [Behaviour::Refuse, Behaviour::Http500] {
        for (decide, reflect) in removal_delays(&defaults(), l7(), failure).await {
            let total = decide + reflect;
            assert!(
                total >= secs(1.0) - EPS && total <= secs(4.0),
                "{failure:?}: left L7 traffic after {total:?}"
            );
        }
    }
}

// S-RF3: with P = 5 s, T = 10 s, RF = 3 a silent server leaves L7 traffic in about 40-48 s.
#[tokio::test(start_paused = true)]
async fn s_rf3_slow_profile_leaves_l7_traffic_in_about_40_to_48_s() {
    let check = profile(5.0, 10.0, 3, 3);
    for (decide, reflect) in removal_delays(&check, l7(), Behaviour::Silent).await {
        let total = decide + reflect;
        assert!(
            total >= secs(40.0) - EPS && total <= secs(48.0),
            "left after {total:?}"
        );
    }
}

// S-RF2: a removal reaches the Network vService maps within 9 s of the decision.
#[tokio::test(start_paused = true)]
async fn s_rf2_network_removal_within_9_s_of_the_decision() {
    let delays = removal_delays(&defaults(), network(), Behaviour::Silent).await;
    assert!(delays.iter().all(|(_, r)| *r <= secs(9.0) + EPS));
    println!("network removals (decision, reflection): {delays:?}");
}

// S-RF2 + S-RF3 recovery: RS = 3 successes form OK within (RS - 1) x P .. RS x P of the first
// good answer; L7 sees it at most 2.5 s later (about 2-6 s in all), Network at most 5 s later.
#[tokio::test(start_paused = true)]
async fn s_rf2_s_rf3_recovery_reaches_l7_and_network_within_their_delays() {
    for (cadence, limit) in [(l7(), 6.0), (network(), 8.5)] {
        for back in [20.3, 20.9] {
            let (engine, events) = scenario(
                &defaults(),
                cadence,
                vec![
                    (0.0, Behaviour::Answer),
                    (4.0, Behaviour::Refuse),
                    (back, Behaviour::Answer),
                ],
                secs(back + 10.0),
            )
            .await;
            let ok = decided(&engine, "web", HealthState::Ok, secs(back));
            let seen = reflected(&events, Health::Ok, secs(back));
            assert!(
                seen >= ok && seen - ok <= cadence.up_every + EPS,
                "{seen:?} vs {ok:?}"
            );
            let total = seen - secs(back);
            assert!(
                total >= secs(2.0) - EPS && total <= secs(limit),
                "back after {total:?}"
            );
        }
    }
}

// S-RF1/S-RF2 with a delay of 0: decisions apply at once.
#[tokio::test(start_paused = true)]
async fn s_rf_zero_delay_applies_decisions_at_once() {
    let zero = Cadence {
        down_every: Duration::ZERO,
        up_every: Duration::ZERO,
    };
    for (decide, reflect) in removal_delays(&defaults(), zero, Behaviour::Silent).await {
        assert!(
            reflect <= EPS,
            "decided after {decide:?}, reflected {reflect:?} later"
        );
    }
}

// S-HC5: a newly checked service is Preparing (no traffic) at once, OK only after RS
// successes and the next tick.
#[tokio::test(start_paused = true)]
async fn s_hc5_new_service_is_preparing_until_ok_is_reflected() {
    let (engine, events) = scenario(
        &defaults(),
        network(),
        vec![(0.0, Behaviour::Answer)],
        secs(12.0),
    )
    .await;
    assert_eq!(events.first().map(|e| e.1), Some(Health::Preparing));
    let ok = decided(&engine, "web", HealthState::Ok, Duration::ZERO);
    let seen = reflected(&events, Health::Ok, Duration::ZERO);
    assert!(seen >= ok && seen - ok <= secs(5.0) + EPS);
}
