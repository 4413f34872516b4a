//! End-to-end tests of health checks reflected into Network vServices (S-HC, S-RF, S-SF):
//! the `lb run` daemon checks real servers in backend namespaces, and `lb status --json`
//! shows its decisions (`health`) and what the XDP maps hold (`active`).
//!
//! Needs root, the `lb` binary (`cargo build -p lb-userspace`) and the XDP object
//! (`cargo xtask build`). Run: `cargo test -p lb-tests --test e2e_health -- --nocapture`.
//! Tests run one at a time through the `SERIAL` mutex (shared bpffs, namespaces, CPU). Each
//! prints the times it measured; all times are seconds after the failure or recovery the
//! test caused (t0 / t1). The S-HC9 / S-RF2 timing scenario is shared with the IPv6 tests
//! (`e2e_ipv6`): it lives in `lb_tests::netns::scenarios::health` and runs here with
//! [`Family::V4`].

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lb_tests::netns::configs::{
    check, checked_service, checked_services, start_daemon, stop_daemon, vservice,
};
use lb_tests::netns::scenarios::ask_counts;
use lb_tests::netns::scenarios::health::{self, Failure};
use lb_tests::netns::status::{Sample, secs, wait_all_ok, watch};
use lb_tests::netns::{Family, Reply, require_data_path, tcp_ask, vip4 as vip};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    // A failed (panicked) test poisons the lock; the next test still runs.
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `count` new TCP connections from the client to `addr`, every one answered, by backend.
fn ask_many(
    topo: &lb_tests::netns::Topology,
    count: usize,
    addr: SocketAddrV4,
) -> std::collections::BTreeMap<String, usize> {
    ask_counts(topo, count, SocketAddr::V4(addr))
}

// ----- tests -------------------------------------------------------------------------------

/// S-HC9 (silent server decided within about RF x (P + T) = 4 s), S-HC3 (a check without an
/// answer lasts T), S-RF2 (removal reaches the XDP maps within about 9 s more, re-add within
/// 5 s) and S-HC5 recovery (RS x P): b3 of a tcp-l4 NAT VIP goes silent (link down), leaves
/// new traffic, comes back and gets new traffic again.
#[test]
fn s_rf2_silent_backend_leaves_and_rejoins_network_vservice() {
    let _guard = serial();
    health::leave_and_rejoin(Family::V4, Failure::Silent, 40);
}

/// S-HC9 (a closed port is decided within about RF x P = 2 s) and S-HC3 (a refused check
/// ends at once). b3's server process is stopped: its listening socket is closed, so the
/// kernel of b3 answers every SYN, the check's included, with RST (connection refused).
/// This is the real "service down, server up" case; the other backends keep serving.
#[test]
fn s_hc9_refused_port_decided_within_rf_times_p() {
    let _guard = serial();
    health::leave_and_rejoin(Family::V4, Failure::Refusing, 41);
}

/// S-RF4: health is not reflected on a Port Range or an ANY-L3 Network vService. Three VIPs
/// share b1..b3 (port 0, ping check): after b3 goes silent and the decision has had more than
/// the 9 s removal delay to reach the maps, b3 is still active on the Port Range and ANY-L3
/// VIPs but removed from the single-port tcp-l4 VIP.
#[test]
fn s_rf4_port_range_and_any_l3_ignore_health() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = Family::V4.topology(None);
    topo.tcp_servers(7005).expect("servers");
    topo.tcp_servers(8000).expect("servers");
    let all = ["b1", "b2", "b3"];
    let cfg = check("ping", "ping", "")
        + &checked_services(&topo, Family::V4, 0, "ping")
        + &vservice(
            "range",
            "tcp-l4",
            vip(42),
            "port_range = \"7000-7010\"",
            "nat",
            &all,
        )
        + &vservice("any", "any-l3", vip(43), "", "nat", &all)
        + &vservice("web", "tcp-l4", vip(44), "port = 8000", "nat", &all);
    let vips = ["range", "any", "web"];
    let mut daemon = start_daemon(&topo, &cfg);
    let pairs: Vec<(&str, &[&str])> = vips.iter().map(|v| (*v, &all[..])).collect();
    wait_all_ok(&topo, &mut daemon, &pairs, Duration::from_secs(25));
    for (name, addr) in [
        ("range", SocketAddrV4::new(vip(42), 7005)),
        ("any", SocketAddrV4::new(vip(43), 8000)),
        ("web", SocketAddrV4::new(vip(44), 8000)),
    ] {
        let counts = ask_many(&topo, 30, addr);
        println!("ignore: {name}: 30 connections before the failure: {counts:?}");
        assert_eq!(counts.len(), 3, "{name}: all three backends serve");
    }

    topo.set_backend_link("b3", false).expect("b3 link down");
    let t0 = Instant::now();
    let mut t_error: Option<Instant> = None;
    let mut t_web_removed = None;
    let mut samples = 0;
    let last = watch(
        &topo,
        &mut daemon,
        Duration::from_secs(40),
        "b3 Error, removed from web, and 11 s more",
        |s| {
            samples += 1;
            for v in ["range", "any"] {
                assert_eq!(
                    s.active(v, "b3"),
                    Some(true),
                    "S-RF4: b3 must stay active on {v} ({:.2} s after silence)",
                    secs(s.answered - t0)
                );
            }
            if t_error.is_none() && s.service_state("b3") == Some("Error") {
                t_error = Some(s.answered);
            }
            if t_web_removed.is_none() && s.active("web", "b3") == Some(false) {
                t_web_removed = Some(s.answered - t0);
            }
            t_web_removed.is_some()
                && t_error
                    .is_some_and(|t| s.asked.saturating_duration_since(t).as_secs_f64() > 9.0 + 2.0)
        },
    );
    let t_error = secs(t_error.map(|t| t - t0).unwrap_or_default());
    let t_web_removed = secs(t_web_removed.unwrap_or_default());
    let t_end = secs(last.answered - t0);
    println!(
        "ignore: b3 Error at +{t_error:.2} s, removed from web at +{t_web_removed:.2} s, \
         still active on range and any at +{t_end:.2} s ({samples} samples)"
    );
    for v in vips {
        println!(
            "ignore: {v}: b3 health {:?} active {:?}",
            last.health(v, "b3"),
            last.active(v, "b3")
        );
        assert_eq!(
            last.health(v, "b3"),
            Some("Error"),
            "{v} shows the engine's decision"
        );
    }
    assert_eq!(last.active("web", "b3"), Some(false), "web reflects health");
    assert!(
        t_web_removed <= 4.0 + 9.0 + 2.0,
        "S-RF2 on web: removed at +{t_web_removed:.2} s"
    );
    // Traffic: the range VIP still spreads over the healthy backends (b3 may be hashed too,
    // and those connections fail; that is what "not reflected" means).
    let ok = topo
        .client
        .run(|| {
            (0..20)
                .filter_map(|_| tcp_ask(SocketAddrV4::new(vip(42), 7005)).ok())
                .count()
        })
        .expect("client namespace");
    println!("ignore: range: {ok} of 20 connections answered with b3 silent but active");
    assert!(ok > 0, "range VIP still forwards to b1/b2");
    stop_daemon(daemon);
}

/// S-SF1/S-SF2: a server is failed only when all its services have failed, and is back as
/// soon as one is healthy again. b1's address carries two Backend Services (ports 8000 and
/// 8001, each with its own check); their servers are stopped one after the other (port
/// closed: refused) and one is then restarted.
#[test]
fn s_sf2_server_state_follows_its_services() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = Family::V4.topology(None);
    let b1 = &topo.backends[0];
    let b1_addr = b1.addr;
    let main_server = topo
        .servers
        .spawn_tcp_stoppable(&b1.ns, "b1", 8000)
        .expect("b1 8000");
    let alt_server = topo
        .servers
        .spawn_tcp_stoppable(&b1.ns, "b1-alt", 8001)
        .expect("b1 8001");
    for b in &topo.backends[1..] {
        topo.servers
            .spawn_tcp(&b.ns, &b.name, 8000)
            .expect("server");
    }
    let cfg = check("tcp-main", "tcp", "")
        + &check("tcp-alt", "tcp", "")
        + &checked_services(&topo, Family::V4, 8000, "tcp-main")
        + &checked_service("b1-alt", b1_addr, 8001, "tcp-alt")
        + &vservice(
            "web",
            "tcp-l4",
            vip(45),
            "port = 8000",
            "nat",
            &["b1", "b2", "b3"],
        )
        + &vservice("alt", "tcp-l4", vip(46), "port = 8001", "nat", &["b1-alt"]);
    let mut daemon = start_daemon(&topo, &cfg);
    wait_all_ok(
        &topo,
        &mut daemon,
        &[("web", &["b1", "b2", "b3"])],
        Duration::from_secs(25),
    );
    wait_all_ok(
        &topo,
        &mut daemon,
        &[("alt", &["b1-alt"])],
        Duration::from_secs(10),
    );
    let s = Sample::take(&topo).expect("status");
    assert_eq!(s.server_state(b1_addr), Some("OK"), "{}", s.json["health"]);

    // One of b1's two services fails: the server stays OK (S-SF2), b1:8000 keeps its traffic.
    alt_server.close().expect("close 8001");
    let t0 = Instant::now();
    let mut t_alt_error = None;
    watch(
        &topo,
        &mut daemon,
        Duration::from_secs(10),
        "b1-alt Error",
        |s| {
            assert_eq!(s.service_state("b1"), Some("OK"), "b1 (8000) stays OK");
            assert_eq!(
                s.server_state(b1_addr),
                Some("OK"),
                "S-SF2: server stays OK with one service up"
            );
            if s.service_state("b1-alt") == Some("Error") {
                t_alt_error = Some(s.answered - t0);
            }
            t_alt_error.is_some()
        },
    );
    // Keep watching for 2 s: the server must not follow the failed service.
    let hold = Instant::now();
    watch(
        &topo,
        &mut daemon,
        Duration::from_secs(5),
        "server still OK for 2 s",
        |s| {
            assert_eq!(
                s.server_state(b1_addr),
                Some("OK"),
                "S-SF2: server stays OK with one service up"
            );
            assert_eq!(
                s.active("web", "b1"),
                Some(true),
                "S-SF1: b1:8000 stays in web"
            );
            hold.elapsed() > Duration::from_secs(2)
        },
    );
    let web = ask_many(&topo, 30, SocketAddrV4::new(vip(45), 8000));
    println!(
        "server: b1-alt Error at +{:.2} s; server {b1_addr} still OK; web: {web:?}",
        secs(t_alt_error.unwrap_or_default())
    );
    assert!(
        web.contains_key("b1"),
        "S-SF1: b1's healthy service still gets traffic"
    );

    // Both fail: now the server is failed.
    main_server.close().expect("close 8000");
    let t1 = Instant::now();
    let (mut t_main_error, mut t_failed) = (None, None);
    watch(
        &topo,
        &mut daemon,
        Duration::from_secs(10),
        "server Failed",
        |s| {
            if t_main_error.is_none() && s.service_state("b1") == Some("Error") {
                t_main_error = Some(s.answered - t1);
            }
            let both_error = s.service_state("b1") == Some("Error")
                && s.service_state("b1-alt") == Some("Error");
            let failed = s.server_state(b1_addr) == Some("Failed");
            assert_eq!(
                failed,
                both_error,
                "S-SF2: server {:?} while b1 is {:?} and b1-alt {:?}",
                s.server_state(b1_addr),
                s.service_state("b1"),
                s.service_state("b1-alt")
            );
            if failed {
                t_failed = Some(s.answered - t1);
            }
            assert_eq!(
                s.server_state(Ipv4Addr::new(10, 11, 2, 2)),
                Some("OK"),
                "b2's server unaffected"
            );
            t_failed.is_some()
        },
    );
    println!(
        "server: b1 (8000) Error at +{:.2} s, server {b1_addr} Failed at +{:.2} s",
        secs(t_main_error.unwrap_or_default()),
        secs(t_failed.unwrap_or_default())
    );

    // One service back: the server is back as soon as that service is OK (S-SF2).
    let _restarted = topo
        .servers
        .spawn_tcp_stoppable(&b1.ns, "b1", 8000)
        .expect("restart b1 8000");
    let t2 = Instant::now();
    let (mut t_main_ok, mut t_server_ok) = (None, None);
    watch(
        &topo,
        &mut daemon,
        Duration::from_secs(10),
        "server OK again",
        |s| {
            assert_eq!(
                s.service_state("b1-alt"),
                Some("Error"),
                "8001 is still closed"
            );
            if t_main_ok.is_none() && s.service_state("b1") == Some("OK") {
                t_main_ok = Some(s.answered - t2);
            }
            if s.server_state(b1_addr) == Some("OK") {
                t_server_ok = Some(s.answered - t2);
            }
            t_main_ok.is_some() && t_server_ok.is_some()
        },
    );
    let (t_main_ok, t_server_ok) = (
        secs(t_main_ok.unwrap_or_default()),
        secs(t_server_ok.unwrap_or_default()),
    );
    println!(
        "server: b1 (8000) OK at +{t_main_ok:.2} s, server {b1_addr} OK at +{t_server_ok:.2} s"
    );
    assert!(
        (t_server_ok - t_main_ok).abs() <= 0.5,
        "S-SF2: server back ({t_server_ok:.2} s) when its first service is OK ({t_main_ok:.2} s)"
    );
    stop_daemon(daemon);
}

/// S-HC5: a Preparing backend gets no traffic. A fresh `lb run` with a check of RS = 5 keeps
/// b1..b3 Preparing for about 4 s; meanwhile a client keeps opening connections. No
/// connection may be answered by a backend that a later status sample still shows as
/// Preparing, and a Preparing backend must be inactive or take no new flows. Once OK, traffic
/// flows to all three.
#[test]
fn s_hc5_preparing_backend_gets_no_traffic() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = Family::V4.topology(None);
    topo.tcp_servers(8000).expect("servers");
    let all = ["b1", "b2", "b3"];
    let cfg = check("tcp-rs5", "tcp", "required_successes = 5")
        + &checked_services(&topo, Family::V4, 8000, "tcp-rs5")
        + &vservice("web", "tcp-l4", vip(47), "port = 8000", "nat", &all);
    let addr = SocketAddrV4::new(vip(47), 8000);
    let mut daemon = start_daemon(&topo, &cfg);
    let started = Instant::now();
    let stop = AtomicBool::new(false);
    // Per backend: when it was last seen Preparing, and (active, new_flows) while Preparing.
    let mut last_preparing: HashMap<&str, Instant> = HashMap::new();
    let mut preparing_samples: HashMap<&str, Vec<(bool, u64)>> = HashMap::new();
    let mut t_all_ok = None;
    let asks = std::thread::scope(|scope| {
        let client = scope.spawn(|| {
            topo.client.enter().expect("enter client namespace");
            let mut asks = Vec::new();
            while !stop.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(40) {
                let result = tcp_ask(addr);
                asks.push((Instant::now(), result.map_err(|e| format!("{e:#}"))));
                std::thread::sleep(Duration::from_millis(50));
            }
            asks
        });
        let watched = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            watch(
                &topo,
                &mut daemon,
                Duration::from_secs(30),
                "all OK and active",
                |s| {
                    if !s.has_health() {
                        return false;
                    }
                    for b in all {
                        if s.health("web", b) == Some("Preparing") {
                            last_preparing.insert(b, s.asked);
                            let active = s.active("web", b).unwrap_or(true);
                            let flows = s.new_flows("web", b).unwrap_or(0);
                            preparing_samples
                                .entry(b)
                                .or_default()
                                .push((active, flows));
                        }
                    }
                    let ok = all.iter().all(|b| {
                        s.health("web", b) == Some("OK") && s.active("web", b) == Some(true)
                    });
                    if ok {
                        t_all_ok = Some(s.answered - started);
                    }
                    ok
                },
            );
        }));
        stop.store(true, Ordering::SeqCst);
        let asks = client.join().expect("client thread");
        if let Err(panic) = watched {
            std::panic::resume_unwind(panic);
        }
        asks
    });
    let answered: Vec<&(Instant, Result<Reply, String>)> =
        asks.iter().filter(|(_, r)| r.is_ok()).collect();
    println!(
        "preparing: all OK and active {:.2} s after start; client made {} connections, {} answered",
        secs(t_all_ok.unwrap_or_default()),
        asks.len(),
        answered.len()
    );
    for b in all {
        let samples = preparing_samples.get(b).cloned().unwrap_or_default();
        let last = last_preparing.get(b).map(|t| secs(*t - started));
        println!(
            "preparing: {b}: {} samples Preparing (last at +{:.2} s); (active, new_flows) first {:?} last {:?}",
            samples.len(),
            last.unwrap_or(f64::NAN),
            samples.first(),
            samples.last()
        );
        assert!(
            !samples.is_empty(),
            "S-HC5: {b} was never seen Preparing (RS = 5 gives ~4 s)"
        );
        // Inactive, or active but taking no new flows while Preparing.
        let first_flows = samples[0].1;
        for (active, flows) in &samples {
            assert!(
                !active || *flows == first_flows,
                "S-HC5: {b} active and took new flows while Preparing: {samples:?}"
            );
        }
        // No connection answered by b before a sample that still showed b Preparing.
        if let Some(&t_prep) = last_preparing.get(b) {
            let early: Vec<f64> = answered
                .iter()
                .filter(|(t, r)| *t < t_prep && r.as_ref().is_ok_and(|r| r.backend == b))
                .map(|(t, _)| secs(*t - started))
                .collect();
            assert!(
                early.is_empty(),
                "S-HC5: {b} answered connections while Preparing at +{early:?} s"
            );
        }
    }
    let counts = ask_many(&topo, 60, addr);
    println!("preparing: 60 connections once OK: {counts:?}");
    assert_eq!(counts.len(), 3, "all three backends get traffic once OK");
    stop_daemon(daemon);
}
