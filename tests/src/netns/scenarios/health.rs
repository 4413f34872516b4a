//! The health timing scenario (S-HC9, S-HC3, S-HC5 recovery, S-RF2) for either address
//! family: a backend of a Network vService fails, is decided Error and removed from the XDP
//! maps, comes back, is decided OK and re-added; every time is measured and bounded.

use std::time::{Duration, Instant};

use super::{Family, ask_counts};
use crate::netns::configs::{check, checked_services, start_daemon, stop_daemon, vservice};
use crate::netns::family::at;
use crate::netns::lbctl::Daemon;
use crate::netns::lbctl::require_data_path;
use crate::netns::status::{MARGIN, Sample, Transition, secs, unix_ms, wait_all_ok, watch};
use crate::netns::topology::Topology;

/// How a backend is taken down in [`leave_and_rejoin`].
pub enum Failure {
    /// Its link goes down: checks get no answer at all.
    Silent,
    /// Its listener closes: checks are refused (RST) at once.
    Refusing,
}

/// The health timing scenario: b3 of a tcp-l4 NAT VIP (VIP number `vip_n`), TCP health
/// check on its `family` address, fails as `how` says while b1 and b2 stay OK and active;
/// measures when the engine decides Error (S-HC9, S-HC3, S-HC8), when b3 leaves the maps and
/// the VIP's traffic (S-RF2), then restores it and measures when it is decided OK (S-HC5
/// recovery: RS x P), re-added (S-RF2), and gets new traffic again.
pub fn leave_and_rejoin(family: Family, how: Failure, vip_n: u8) {
    require_data_path().expect("data path built");
    let label = family.label(match how {
        Failure::Silent => "silent",
        Failure::Refusing => "refused",
    });
    let label = label.as_str();
    let web = family.vip_name("web");
    let web = web.as_str();
    let topo = family.topology(None);
    for b in &topo.backends[..2] {
        topo.servers
            .spawn_tcp_at(&b.ns, &b.name, topo.any_addr(8000))
            .expect("server");
    }
    let b3 = &topo.backends[2];
    let b3_server = topo
        .servers
        .spawn_tcp_stoppable_at(&b3.ns, &b3.name, topo.any_addr(8000))
        .expect("b3 server");
    let vip = family.vip(vip_n);
    let cfg = check("tcp", "tcp", "")
        + &checked_services(&topo, family, 8000, "tcp")
        + &vservice(
            web,
            "tcp-l4",
            vip,
            "port = 8000",
            "nat",
            &["b1", "b2", "b3"],
        );
    let addr = at(vip, 8000);
    let mut daemon = start_daemon(&topo, &cfg);
    wait_all_ok(
        &topo,
        &mut daemon,
        &[(web, &["b1", "b2", "b3"])],
        Duration::from_secs(25),
    );
    let before = ask_counts(&topo, 30, addr);
    println!("{label}: 30 connections before the failure: {before:?}");
    assert_eq!(
        before.len(),
        3,
        "all three backends serve before the failure"
    );

    let silent = matches!(how, Failure::Silent);
    match how {
        Failure::Silent => topo.set_backend_link("b3", false).expect("b3 link down"),
        Failure::Refusing => b3_server.close().expect("close b3's listener"),
    }
    let (decided, t_decided, t_error, t_removed) = watch_b3(
        &topo,
        &mut daemon,
        web,
        ("Error", false),
        "b3 Error and removed",
        |s| {
            for b in ["b1", "b2"] {
                assert_eq!(s.health(web, b), Some("OK"), "{b} stays OK");
                assert_eq!(s.active(web, b), Some(true), "{b} stays active");
            }
        },
    );
    println!(
        "{label}: b3 ({}) decided Error at +{t_decided:.2} s (transition {} -> {}, reason {:?}, check {:?} ms); \
         seen Error at +{t_error:.2} s; removed from the maps at +{t_removed:.2} s",
        family.backend_addr(&topo, 2),
        decided.from,
        decided.to,
        decided.reason,
        decided.check_ms
    );
    assert_eq!(decided.from, "OK", "b3 was OK before");
    assert!(
        !decided.reason.is_empty(),
        "S-HC8: the transition gives a reason"
    );
    if silent {
        // S-HC3: the deciding check got no answer, so it lasted the Timeout (1 s).
        if let Some(ms) = decided.check_ms {
            assert!(
                (900..=1500).contains(&ms),
                "silent check lasted {ms} ms, expected about T = 1000"
            );
        }
        // S-HC9: RF x (P + T) = 4 s; at least the two timeouts plus one period minus slack.
        assert!(
            (1.5..=4.0 + MARGIN).contains(&t_decided),
            "S-HC9: decision {t_decided:.2} s after silence, expected about 4 s"
        );
        assert!(
            t_error <= 4.0 + MARGIN,
            "S-HC9: Error shown {t_error:.2} s after silence"
        );
        // S-RF2: at the next removal tick, at most network_remove_delay (9 s) after the decision.
        assert!(
            t_removed <= 4.0 + 9.0 + 2.0,
            "S-RF2: removed {t_removed:.2} s after silence, expected <= 13 s + margin"
        );
    } else {
        assert!(
            decided.reason.to_ascii_lowercase().contains("refused"),
            "S-HC8: reason names the refusal: {:?}",
            decided.reason
        );
        // S-HC3: a refused connect ends at once, far below the 1 s Timeout.
        if let Some(ms) = decided.check_ms {
            assert!(ms < 300, "refused check lasted {ms} ms");
        }
        // S-HC9: two failures one period apart; the first comes within one period of t0.
        assert!(
            t_decided <= 2.0 + 1.0 && t_error <= 2.0 + MARGIN,
            "S-HC9: refused port decided at +{t_decided:.2} s (shown +{t_error:.2} s), expected <= RF*P = 2 s"
        );
        // S-RF2: removal at most 9 s after the decision.
        assert!(
            t_removed <= 2.0 + 9.0 + 2.0,
            "S-RF2: removed {t_removed:.2} s after the refusal, expected <= 11 s + margin"
        );
    }
    // Against the decision's own timestamp: the report that shows Error is written on a
    // 200 ms cadence, so a removal tick right after the decision can be seen first.
    assert!(
        t_removed >= t_decided,
        "removed ({t_removed:.2}) before Error was decided ({t_decided:.2})"
    );
    let after = ask_counts(&topo, 60, addr);
    println!("{label}: 60 new connections after the removal: {after:?}");
    assert!(
        !after.contains_key("b3"),
        "a new connection reached failed b3"
    );
    assert_eq!(after.len(), 2, "b1 and b2 share the traffic");

    let _restarted = match how {
        Failure::Silent => {
            topo.set_backend_link("b3", true).expect("b3 link up");
            None
        }
        Failure::Refusing => Some(
            topo.servers
                .spawn_tcp_stoppable_at(&b3.ns, &b3.name, topo.any_addr(8000))
                .expect("restart b3's server"),
        ),
    };
    let (recovered, t_recovered, t_ok, t_added) = watch_b3(
        &topo,
        &mut daemon,
        web,
        ("OK", true),
        "b3 OK and active again",
        |_| {},
    );
    println!(
        "{label}: b3 decided OK at +{t_recovered:.2} s (reason {:?}); seen OK at +{t_ok:.2} s; \
         back in the maps at +{t_added:.2} s",
        recovered.reason
    );
    println!(
        "{label}: figures: t_decided {t_decided:.2} s, t_error {t_error:.2} s, t_removed {t_removed:.2} s, \
         t_recovered {t_recovered:.2} s, t_ok {t_ok:.2} s, t_added {t_added:.2} s"
    );
    assert_eq!(recovered.from, "Error", "b3 recovers from Error");
    // S-HC9: recovery needs RS successes P apart: no earlier than (RS - 1) x P; 0.2 s for the
    // `ip` call or the listener start.
    assert!(
        t_recovered >= 2.0 - 0.2,
        "S-HC9: recovery decided {t_recovered:.2} s after the backend came back, before (RS-1)*P"
    );
    // RS x P = 3 s, plus up to one check cycle (P + T) before the first success.
    assert!(
        t_recovered <= 3.0 + 2.0 + MARGIN && t_ok <= 3.0 + 2.0 + MARGIN,
        "recovery decided at +{t_recovered:.2} s, shown at +{t_ok:.2} s; expected <= RS*P + P + T"
    );
    // S-RF2: re-add at the next add tick, at most network_add_delay (5 s) after the decision.
    assert!(
        t_added - t_ok <= 5.0 + MARGIN,
        "S-RF2: re-added {:.2} s after OK was shown, expected <= 5 s",
        t_added - t_ok
    );
    assert!(
        t_added >= t_recovered,
        "re-added ({t_added:.2}) before OK was decided ({t_recovered:.2})"
    );
    let back = ask_counts(&topo, 60, addr);
    println!("{label}: 60 new connections after the re-add: {back:?}");
    assert!(
        back.get("b3").copied().unwrap_or(0) > 0,
        "b3 gets new connections again"
    );
    stop_daemon(daemon);
}

/// Watches `lb status` (up to 25 s, from now: t0) until b3 of VIP `web` shows `health` and
/// `active` as `want` says, asserting `invariant` on every sample. Returns b3's transition
/// into that health (S-HC8), the seconds after t0 at which the engine decided it (from the
/// transition's time), at which status first showed the health, and at which it first showed
/// `active`.
fn watch_b3(
    topo: &Topology,
    daemon: &mut Daemon,
    web: &str,
    want: (&str, bool),
    what: &str,
    mut invariant: impl FnMut(&Sample),
) -> (Transition, f64, f64, f64) {
    let (health, active) = want;
    let (t0, t0_ms) = (Instant::now(), unix_ms());
    let (mut t_health, mut t_active) = (None, None);
    let last = watch(topo, daemon, Duration::from_secs(25), what, |s| {
        invariant(s);
        if t_health.is_none() && s.health(web, "b3") == Some(health) {
            t_health = Some(s.answered - t0);
        }
        if t_active.is_none() && s.active(web, "b3") == Some(active) {
            t_active = Some(s.answered - t0);
        }
        t_health.is_some() && t_active.is_some()
    });
    let transition = last.transition_to("b3", health, t0_ms).unwrap_or_else(|| {
        panic!(
            "no transition of b3 to {health} listed: {}",
            last.json["health"]
        )
    });
    let t_decided = (transition.at_unix_ms as f64 - t0_ms as f64) / 1000.0;
    (
        transition,
        t_decided,
        secs(t_health.unwrap_or_default()),
        secs(t_active.unwrap_or_default()),
    )
}
