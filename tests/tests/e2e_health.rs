//! End-to-end tests of health checks reflected into Network vServices (S-HC, S-RF, S-SF):
//! the `lb run` daemon checks real servers in backend namespaces, and `lb status --json`
//! shows its decisions (`health`) and what the XDP maps hold (`active`).
//!
//! Needs root, the `lb` binary (`cargo build -p lb-userspace`) and the XDP object
//! (`cargo xtask build`). Run: `cargo test -p lb-tests --test e2e_health -- --nocapture`.
//! Tests run one at a time through the `SERIAL` mutex (shared bpffs, namespaces, CPU). Each
//! prints the times it measured; all times are seconds after the failure or recovery the
//! test caused (t0 / t1).

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use lb_tests::netns::{
    self, Daemon, Reply, Topology, TopologyOptions, count_by_backend, require_data_path, tcp_ask,
};
use serde_json::Value;

static SERIAL: Mutex<()> = Mutex::new(());

/// Interval between two `lb status` samples (plus the time one call takes).
const POLL: Duration = Duration::from_millis(150);
/// Slack added to every timing bound: status sampling, process start-up, a loaded CI host.
const MARGIN: f64 = 1.5;

fn serial() -> MutexGuard<'static, ()> {
    // A failed (panicked) test poisons the lock; the next test still runs.
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn vip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 99, 0, last)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

// ----- configuration text -----------------------------------------------------------------

/// A `[[health_check]]` profile; `extra` holds further `key = value` lines (may be empty).
fn check(name: &str, kind: &str, extra: &str) -> String {
    format!("[[health_check]]\nname = \"{name}\"\ntype = \"{kind}\"\n{extra}\n")
}

/// A `[[backend_service]]` at `addr:port` checked by profile `check`.
fn service(name: &str, addr: Ipv4Addr, port: u16, check: &str) -> String {
    format!(
        "[[backend_service]]\nname = \"{name}\"\naddress = \"{addr}\"\nport = {port}\nhealth_check = \"{check}\"\n\n"
    )
}

/// b1..bN of the topology at `port`, all checked by `check`.
fn services(topo: &Topology, port: u16, check: &str) -> String {
    topo.backends
        .iter()
        .map(|b| service(&b.name, b.addr, port, check))
        .collect()
}

/// A NAT `[[vservice]]`; `ports` is a TOML line such as `port = 80`, or empty for ANY-L3.
fn vservice(name: &str, kind: &str, vip: Ipv4Addr, ports: &str, backends: &[&str]) -> String {
    let list: Vec<String> = backends.iter().map(|b| format!("\"{b}\"")).collect();
    format!(
        "[[vservice]]\nname = \"{name}\"\nkind = \"{kind}\"\naddress = \"{vip}\"\n{ports}\nforwarding = \"nat\"\nbackends = [{}]\n\n",
        list.join(", ")
    )
}

/// Validates `cfg` with the library's parser (a clear error early), then starts `lb run`.
fn start_daemon(topo: &Topology, cfg: &str) -> Daemon {
    if let Err(e) = lb::config::parse(cfg, "e2e health config") {
        panic!("test config invalid: {e}\n{cfg}");
    }
    topo.lb_run(cfg).expect("start lb run")
}

/// Asks SIGTERM and waits; the topology's drop removes the pins (and so the program).
fn stop_daemon(mut daemon: Daemon) {
    if daemon.signal(libc::SIGTERM).is_ok() {
        let _ = daemon.wait_exit(Duration::from_secs(10));
    }
}

fn log_tail(daemon: &Daemon) -> String {
    let log = daemon.log();
    let start = log.len().saturating_sub(4000);
    let start = (start..log.len())
        .find(|&i| log.is_char_boundary(i))
        .unwrap_or(log.len());
    log[start..].to_owned()
}

// ----- reading `lb status --json` ----------------------------------------------------------

/// One health transition as `lb status --json` lists it (S-HC8).
#[derive(Clone, Debug)]
struct Transition {
    at_unix_ms: u64,
    from: String,
    to: String,
    reason: String,
    check_ms: Option<u64>,
}

/// One `lb status --json` answer and when it was asked.
struct Sample {
    /// When the call started: the state shown was read no earlier than this.
    asked: Instant,
    /// When the answer arrived: the state shown was read no later than this.
    answered: Instant,
    json: Value,
}

impl Sample {
    fn take(topo: &Topology) -> Result<Sample> {
        let asked = Instant::now();
        let json = topo.lb_status()?;
        Ok(Sample {
            asked,
            answered: Instant::now(),
            json,
        })
    }

    /// The entry of Backend Service `backend` in the VIP named `vip`.
    fn backend(&self, vip: &str, backend: &str) -> Option<&Value> {
        self.json["vips"]
            .as_array()?
            .iter()
            .find(|v| v["name"] == vip)?["backends"]
            .as_array()?
            .iter()
            .find(|b| b["name"] == backend)
    }

    /// `vips[vip].backends[backend].health`: the engine's decision.
    fn health(&self, vip: &str, backend: &str) -> Option<&str> {
        self.backend(vip, backend)?["health"].as_str()
    }

    /// `vips[vip].backends[backend].active`: usable in the XDP maps.
    fn active(&self, vip: &str, backend: &str) -> Option<bool> {
        self.backend(vip, backend)?["active"].as_bool()
    }

    /// `vips[vip].backends[backend].counters.new_flows`.
    fn new_flows(&self, vip: &str, backend: &str) -> Option<u64> {
        self.backend(vip, backend)?["counters"]["new_flows"].as_u64()
    }

    /// True while the daemon has published its health view (null before / without one).
    fn has_health(&self) -> bool {
        self.json["health"].is_object()
    }

    /// `health.services[name].state`.
    fn service_state(&self, name: &str) -> Option<&str> {
        self.json["health"]["services"][name]["state"].as_str()
    }

    /// `health.servers[addr]` (S-SF).
    fn server_state(&self, addr: Ipv4Addr) -> Option<&str> {
        self.json["health"]["servers"][addr.to_string()].as_str()
    }

    /// `health.services[name].transitions`, oldest first as listed.
    fn transitions(&self, name: &str) -> Vec<Transition> {
        let Some(list) = self.json["health"]["services"][name]["transitions"].as_array() else {
            return Vec::new();
        };
        list.iter()
            .filter_map(|t| {
                Some(Transition {
                    at_unix_ms: t["at_unix_ms"].as_u64()?,
                    from: t["from"].as_str()?.to_owned(),
                    to: t["to"].as_str()?.to_owned(),
                    reason: t["reason"].as_str().unwrap_or_default().to_owned(),
                    check_ms: t["check_ms"].as_u64(),
                })
            })
            .collect()
    }

    /// The latest transition of `name` into `to` at or after `since_unix_ms`.
    fn transition_to(&self, name: &str, to: &str, since_unix_ms: u64) -> Option<Transition> {
        self.transitions(name)
            .into_iter()
            .filter(|t| t.to == to && t.at_unix_ms + 50 >= since_unix_ms)
            .max_by_key(|t| t.at_unix_ms)
    }
}

/// Samples `lb status --json` every [`POLL`] until `step` returns true (it may also assert
/// what must hold on every sample) or `limit` passes; returns the last sample. A failed
/// `lb status` (e.g. before the daemon has loaded anything) only counts as "not yet".
fn watch(
    topo: &Topology,
    daemon: &mut Daemon,
    limit: Duration,
    what: &str,
    mut step: impl FnMut(&Sample) -> bool,
) -> Sample {
    let deadline = Instant::now() + limit;
    let mut last: Option<Sample> = None;
    let mut last_err = String::new();
    while Instant::now() < deadline {
        assert!(
            daemon.is_running(),
            "lb run exited while waiting for {what}; log:\n{}",
            log_tail(daemon)
        );
        match Sample::take(topo) {
            Ok(s) => {
                if step(&s) {
                    return s;
                }
                last = Some(s);
            }
            Err(e) => last_err = format!("{e:#}"),
        }
        std::thread::sleep(POLL);
    }
    let shown = last
        .as_ref()
        .map(|s| serde_json::to_string_pretty(&s.json).unwrap_or_default())
        .unwrap_or_else(|| format!("no status (last error: {last_err})"));
    panic!(
        "{what}: not within {limit:?}; last status:\n{shown}\ndaemon log (tail):\n{}",
        log_tail(daemon)
    );
}

/// Waits until every backend in `backends` is OK and active on every VIP in `vips`.
fn wait_all_ok(
    topo: &Topology,
    daemon: &mut Daemon,
    vips: &[&str],
    backends: &[&str],
    limit: Duration,
) -> Sample {
    watch(topo, daemon, limit, "all backends OK and active", |s| {
        vips.iter().all(|v| {
            backends
                .iter()
                .all(|b| s.health(v, b) == Some("OK") && s.active(v, b) == Some(true))
        })
    })
}

// ----- traffic -----------------------------------------------------------------------------

/// `count` new TCP connections from the client, every one answered, counted by backend.
fn ask_many(topo: &Topology, count: usize, addr: SocketAddrV4) -> BTreeMap<String, usize> {
    count_by_backend(&netns::ask_many(&topo.client, count, tcp_ask, addr))
}

// ----- tests -------------------------------------------------------------------------------

/// S-HC9 (silent server decided within about RF x (P + T) = 4 s), S-HC3 (a check without an
/// answer lasts T), S-RF2 (removal reaches the XDP maps within about 9 s more, re-add within
/// 5 s) and S-HC5 recovery (RS x P): b3 of a tcp-l4 NAT VIP goes silent (link down), leaves
/// new traffic, comes back and gets new traffic again.
#[test]
fn s_rf2_silent_backend_leaves_and_rejoins_network_vservice() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = Topology::new(&TopologyOptions::default()).expect("topology");
    topo.tcp_servers(8000).expect("servers");
    let cfg = check("tcp", "tcp", "")
        + &services(&topo, 8000, "tcp")
        + &vservice("web", "tcp-l4", vip(40), "port = 8000", &["b1", "b2", "b3"]);
    let addr = SocketAddrV4::new(vip(40), 8000);
    let mut daemon = start_daemon(&topo, &cfg);
    let started = Instant::now();
    wait_all_ok(
        &topo,
        &mut daemon,
        &["web"],
        &["b1", "b2", "b3"],
        Duration::from_secs(25),
    );
    println!(
        "silent: all OK and active {:.2} s after start",
        secs(started.elapsed())
    );
    let before = ask_many(&topo, 30, addr);
    println!("silent: 30 connections before the failure: {before:?}");
    assert_eq!(
        before.len(),
        3,
        "all three backends serve before the failure"
    );

    topo.set_backend_link("b3", false).expect("b3 link down");
    let (t0, t0_ms) = (Instant::now(), unix_ms());
    let (mut t_error, mut t_removed) = (None, None);
    let last = watch(
        &topo,
        &mut daemon,
        Duration::from_secs(25),
        "b3 Error and removed",
        |s| {
            for b in ["b1", "b2"] {
                assert_eq!(s.health("web", b), Some("OK"), "{b} stays OK");
                assert_eq!(s.active("web", b), Some(true), "{b} stays active");
            }
            if t_error.is_none() && s.health("web", "b3") == Some("Error") {
                t_error = Some(s.answered - t0);
            }
            if t_removed.is_none() && s.active("web", "b3") == Some(false) {
                t_removed = Some(s.answered - t0);
            }
            t_error.is_some() && t_removed.is_some()
        },
    );
    let (t_error, t_removed) = (
        secs(t_error.unwrap_or_default()),
        secs(t_removed.unwrap_or_default()),
    );
    let decided = last.transition_to("b3", "Error", t0_ms).unwrap_or_else(|| {
        panic!(
            "no transition of b3 to Error listed: {}",
            last.json["health"]
        )
    });
    let t_decided = (decided.at_unix_ms as f64 - t0_ms as f64) / 1000.0;
    println!(
        "silent: b3 decided Error at +{t_decided:.2} s (transition {} -> {}, reason {:?}, check {:?} ms); \
         seen Error at +{t_error:.2} s; removed from the maps at +{t_removed:.2} s",
        decided.from, decided.to, decided.reason, decided.check_ms
    );
    assert_eq!(decided.from, "OK", "b3 was OK before");
    assert!(
        !decided.reason.is_empty(),
        "S-HC8: the transition gives a reason"
    );
    // S-HC3: the deciding check got no answer, so it lasted the Timeout (1 s).
    if let Some(ms) = decided.check_ms {
        assert!(
            (900..=1500).contains(&ms),
            "silent check lasted {ms} ms, expected about T = 1000"
        );
    }
    // S-HC9: RF x (P + T) = 4 s; at least the two timeouts plus one period (3 s) minus slack.
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
    assert!(
        t_removed >= t_error,
        "removed ({t_removed:.2}) before Error was shown ({t_error:.2})"
    );

    let after = ask_many(&topo, 60, addr);
    println!("silent: 60 new connections after the removal: {after:?}");
    assert!(
        !after.contains_key("b3"),
        "a new connection reached silent b3"
    );
    assert_eq!(after.len(), 2, "b1 and b2 share the traffic");

    topo.set_backend_link("b3", true).expect("b3 link up");
    let (t1, t1_ms) = (Instant::now(), unix_ms());
    let (mut t_ok, mut t_added) = (None, None);
    let last = watch(
        &topo,
        &mut daemon,
        Duration::from_secs(25),
        "b3 OK and active again",
        |s| {
            if t_ok.is_none() && s.health("web", "b3") == Some("OK") {
                t_ok = Some(s.answered - t1);
            }
            if t_added.is_none() && s.active("web", "b3") == Some(true) {
                t_added = Some(s.answered - t1);
            }
            t_ok.is_some() && t_added.is_some()
        },
    );
    let (t_ok, t_added) = (
        secs(t_ok.unwrap_or_default()),
        secs(t_added.unwrap_or_default()),
    );
    let recovered = last
        .transition_to("b3", "OK", t1_ms)
        .unwrap_or_else(|| panic!("no transition of b3 to OK listed: {}", last.json["health"]));
    let t_recovered = (recovered.at_unix_ms as f64 - t1_ms as f64) / 1000.0;
    println!(
        "silent: b3 decided OK at +{t_recovered:.2} s (reason {:?}); seen OK at +{t_ok:.2} s; \
         back in the maps at +{t_added:.2} s",
        recovered.reason
    );
    println!(
        "silent: figures: t_error {t_error:.2} s, t_removed {t_removed:.2} s, t_ok {t_ok:.2} s, \
         t_added {t_added:.2} s"
    );
    assert_eq!(recovered.from, "Error", "b3 recovers from Error");
    // S-HC9: recovery needs RS successes P apart, so it forms no earlier than (RS - 1) x P
    // after the link came back (no check can succeed before that); 0.2 s for the `ip` call.
    assert!(
        t_recovered >= 2.0 - 0.2,
        "S-HC9: recovery decided {t_recovered:.2} s after the link came up, before (RS-1)*P"
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
        t_added >= t_ok,
        "re-added ({t_added:.2}) before OK was shown ({t_ok:.2})"
    );

    let back = ask_many(&topo, 60, addr);
    println!("silent: 60 new connections after the re-add: {back:?}");
    assert!(
        back.get("b3").copied().unwrap_or(0) > 0,
        "b3 gets new connections again"
    );
    stop_daemon(daemon);
}

/// S-HC9 (a closed port is decided within about RF x P = 2 s) and S-HC3 (a refused check
/// ends at once). b3's server process is stopped: its listening socket is closed, so the
/// kernel of b3 answers every SYN, the check's included, with RST (connection refused).
/// This is the real "service down, server up" case; the other backends keep serving.
#[test]
fn s_hc9_refused_port_decided_within_rf_times_p() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = Topology::new(&TopologyOptions::default()).expect("topology");
    for b in &topo.backends[..2] {
        topo.servers
            .spawn_tcp(&b.ns, &b.name, 8000)
            .expect("server");
    }
    let b3 = &topo.backends[2];
    let b3_server = topo
        .servers
        .spawn_tcp_stoppable(&b3.ns, &b3.name, 8000)
        .expect("b3 server");
    let cfg = check("tcp", "tcp", "")
        + &services(&topo, 8000, "tcp")
        + &vservice("web", "tcp-l4", vip(41), "port = 8000", &["b1", "b2", "b3"]);
    let mut daemon = start_daemon(&topo, &cfg);
    wait_all_ok(
        &topo,
        &mut daemon,
        &["web"],
        &["b1", "b2", "b3"],
        Duration::from_secs(25),
    );

    b3_server.close().expect("close b3's listener");
    let (t0, t0_ms) = (Instant::now(), unix_ms());
    let mut t_error = None;
    let last = watch(
        &topo,
        &mut daemon,
        Duration::from_secs(10),
        "b3 Error",
        |s| {
            assert_eq!(s.health("web", "b1"), Some("OK"), "b1 stays OK");
            if s.health("web", "b3") == Some("Error") {
                t_error = Some(s.answered - t0);
            }
            t_error.is_some()
        },
    );
    let t_error = secs(t_error.unwrap_or_default());
    let decided = last.transition_to("b3", "Error", t0_ms).unwrap_or_else(|| {
        panic!(
            "no transition of b3 to Error listed: {}",
            last.json["health"]
        )
    });
    let t_decided = (decided.at_unix_ms as f64 - t0_ms as f64) / 1000.0;
    println!(
        "refused: b3 decided Error at +{t_decided:.2} s (reason {:?}, check {:?} ms), seen at +{t_error:.2} s",
        decided.reason, decided.check_ms
    );
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
    stop_daemon(daemon);
}

/// S-RF4: health is not reflected on a Port Range or an ANY-L3 Network vService. Three VIPs
/// share b1..b3 (port 0, ping check): after b3 goes silent and the decision has had more than
/// the 9 s removal delay to reach the maps, b3 is still active on the Port Range and ANY-L3
/// VIPs but removed from the single-port tcp-l4 VIP.
#[test]
fn s_rf4_port_range_and_any_l3_ignore_health() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = Topology::new(&TopologyOptions::default()).expect("topology");
    topo.tcp_servers(7005).expect("servers");
    topo.tcp_servers(8000).expect("servers");
    let all = ["b1", "b2", "b3"];
    let cfg = check("ping", "ping", "")
        + &services(&topo, 0, "ping")
        + &vservice(
            "range",
            "tcp-l4",
            vip(42),
            "port_range = \"7000-7010\"",
            &all,
        )
        + &vservice("any", "any-l3", vip(43), "", &all)
        + &vservice("web", "tcp-l4", vip(44), "port = 8000", &all);
    let vips = ["range", "any", "web"];
    let mut daemon = start_daemon(&topo, &cfg);
    wait_all_ok(&topo, &mut daemon, &vips, &all, Duration::from_secs(25));
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
    let topo = Topology::new(&TopologyOptions::default()).expect("topology");
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
        + &services(&topo, 8000, "tcp-main")
        + &service("b1-alt", b1_addr, 8001, "tcp-alt")
        + &vservice("web", "tcp-l4", vip(45), "port = 8000", &["b1", "b2", "b3"])
        + &vservice("alt", "tcp-l4", vip(46), "port = 8001", &["b1-alt"]);
    let mut daemon = start_daemon(&topo, &cfg);
    wait_all_ok(
        &topo,
        &mut daemon,
        &["web"],
        &["b1", "b2", "b3"],
        Duration::from_secs(25),
    );
    wait_all_ok(
        &topo,
        &mut daemon,
        &["alt"],
        &["b1-alt"],
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
    let topo = Topology::new(&TopologyOptions::default()).expect("topology");
    topo.tcp_servers(8000).expect("servers");
    let all = ["b1", "b2", "b3"];
    let cfg = check("tcp-rs5", "tcp", "required_successes = 5")
        + &services(&topo, 8000, "tcp-rs5")
        + &vservice("web", "tcp-l4", vip(47), "port = 8000", &all);
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
