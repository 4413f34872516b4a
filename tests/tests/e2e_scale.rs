//! Three balancers behind one ECMP router (issue 17): each runs `lb run` and BIRD 2 with
//! BFD, announcing its VIPs from the routes `lb run` keeps (S-AN1..3); the backends sit on
//! one segment in DSR mode, and every balancer builds the same Maglev table (S-CL4), so a
//! flow the router moves to another balancer keeps its backend.
//!
//! Needs root, bird2, the `lb` binary and the XDP object (see docs/development.md).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lb_tests::netns::bird::require_bird;
use lb_tests::netns::configs::validated;
use lb_tests::netns::scale::{ScaleTopology, balancer_addr, scale_backend_addr};
use lb_tests::netns::{HeldConn, require_data_path, tcp_ask};

/// The VIP every test spreads and moves flows on.
const VIP: Ipv4Addr = Ipv4Addr::new(10, 220, 0, 100);
/// A second VIP whose backends the test fails on every node.
const SPARE_VIP: Ipv4Addr = Ipv4Addr::new(10, 220, 0, 101);
const PORT: u16 = 8000;
const SPARE_PORT: u16 = 9000;

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The configuration of one balancer: `web` on [`VIP`] over `web_backends`, `spare` on
/// [`SPARE_VIP`] over s1 and s2, TCP checks each second, short reflection delays.
fn config(web_backends: &[&str]) -> String {
    let mut cfg = String::from(
        "[reflection]\nnetwork_remove_delay = 0.5\nnetwork_add_delay = 0.5\n\n\
         [bgp]\nenabled = true\ntable = 100\n\n\
         [[health_check]]\nname = \"tcp\"\ntype = \"tcp\"\nperiod = 1\ntimeout = 1\n\
         required_failures = 1\nrequired_successes = 1\n\n",
    );
    for m in 1..=3 {
        cfg += &format!(
            "[[backend_service]]\nname = \"b{m}\"\naddress = \"{}\"\nport = {PORT}\nhealth_check = \"tcp\"\n\n",
            scale_backend_addr(m)
        );
    }
    for m in 1..=2 {
        cfg += &format!(
            "[[backend_service]]\nname = \"s{m}\"\naddress = \"{}\"\nport = {SPARE_PORT}\nhealth_check = \"tcp\"\n\n",
            scale_backend_addr(m)
        );
    }
    let list: Vec<String> = web_backends.iter().map(|b| format!("\"{b}\"")).collect();
    cfg += &format!(
        "[[vservice]]\nname = \"web\"\nkind = \"tcp-l4\"\naddress = \"{VIP}\"\nport = {PORT}\n\
         forwarding = \"dsr\"\nbackends = [{}]\n\n\
         [[vservice]]\nname = \"spare\"\nkind = \"tcp-l4\"\naddress = \"{SPARE_VIP}\"\n\
         port = {SPARE_PORT}\nforwarding = \"dsr\"\nbackends = [\"s1\", \"s2\"]\n",
        list.join(", ")
    );
    validated(&cfg);
    cfg
}

/// The uplink addresses of balancers `which`: what the router's route should lead to.
fn paths(which: &[usize]) -> BTreeSet<Ipv4Addr> {
    which.iter().map(|&i| balancer_addr(i)).collect()
}

/// Builds the network, starts the servers, `lb run` and BIRD everywhere, and waits for
/// the router's three paths to both VIPs. `configs[i]` is balancer i+1's file.
fn setup(configs: [String; 3]) -> (ScaleTopology, Vec<lb_tests::netns::ServerStop>) {
    require_data_path().expect("lb and the XDP object");
    require_bird().expect("bird2");
    let mut topo = ScaleTopology::new(3, 3, &[VIP, SPARE_VIP]).expect("scale-out topology");
    let mut spare = Vec::new();
    for b in &topo.backends {
        topo.servers
            .spawn_tcp(&b.ns, &b.name, PORT)
            .expect("server");
    }
    for b in topo.backends.iter().take(2) {
        let stop = topo
            .servers
            .spawn_tcp_stoppable(&b.ns, &b.name, SPARE_PORT)
            .expect("spare server");
        spare.push(stop);
    }
    for (i, cfg) in configs.iter().enumerate() {
        topo.write_config(i + 1, cfg).expect("config");
        topo.start_lb(i + 1).expect("lb run");
    }
    for i in 1..=3 {
        topo.start_balancer_bird(i).expect("balancer bird");
    }
    topo.start_router_bird(&[VIP, SPARE_VIP])
        .expect("router bird");
    for vip in [VIP, SPARE_VIP] {
        if let Err(e) = topo.wait_paths(vip, &paths(&[1, 2, 3]), Duration::from_secs(40)) {
            panic!("{e:#}\n{}", diagnostics(&topo));
        }
    }
    (topo, spare)
}

/// What to show when a wait fails: each balancer's table, node state and log tail.
fn diagnostics(topo: &ScaleTopology) -> String {
    let mut out = String::new();
    for b in &topo.balancers {
        out += &format!(
            "--- balancer {}: table 100: {:?}\nnode: {:?}\nlog tail: {}\n",
            b.index,
            topo.vip_routes(b.index),
            topo.api(b.index, "GET", "/api/v1/node").ok(),
            b.daemon
                .as_ref()
                .map(|d| {
                    let log = d.log();
                    log[log.len().saturating_sub(1500)..].to_owned()
                })
                .unwrap_or_default()
        );
        if let Some(bird) = &b.bird {
            out += &format!("bird: {:?}\n", bird.birdc(&["show", "protocols"]));
        }
    }
    if let Some(r) = &topo.router_bird {
        out += &format!("router bird: {:?}\n", r.birdc(&["show", "protocols"]));
    }
    out
}

/// New flows each balancer has counted so far (all VIPs), from its API.
fn new_flows(topo: &ScaleTopology) -> Vec<u64> {
    (1..=3)
        .map(|i| {
            let node = topo.api(i, "GET", "/api/v1/node").expect("node status");
            node["traffic"]["new_flows"].as_u64().expect("new_flows")
        })
        .collect()
}

/// A counter of `web` on balancer `i` (`lb status --json`).
fn vip_counter(topo: &ScaleTopology, i: usize, name: &str) -> u64 {
    let pin = topo
        .balancer(i)
        .expect("balancer")
        .pin_dir
        .display()
        .to_string();
    let out = topo
        .lb(i, &["status", "--pin-dir", &pin, "--json"])
        .expect("lb status");
    let json: serde_json::Value = serde_json::from_str(&out).expect("status json");
    let vips = json["data_path"]["vips"]
        .as_array()
        .or(json["vips"].as_array())
        .cloned();
    vips.unwrap_or_default()
        .iter()
        .filter(|v| v["name"] == "web")
        .map(|v| v["counters"][name].as_u64().unwrap_or(0))
        .sum()
}

/// Opens `count` new connections to the VIP one after another; returns how many each
/// balancer took (by its new-flow counter).
fn spread(topo: &ScaleTopology, count: usize) -> Vec<u64> {
    let before = new_flows(topo);
    let (answered, errors) = topo
        .client
        .run(|| {
            let (mut answered, mut errors) = (0, Vec::new());
            for _ in 0..count {
                match tcp_ask(SocketAddrV4::new(VIP, PORT)) {
                    Ok(_) => answered += 1,
                    Err(e) => errors.push(format!("{e:#}")),
                }
                if errors.len() >= 3 {
                    break;
                }
            }
            (answered, errors)
        })
        .expect("client");
    assert_eq!(
        answered,
        count,
        "every new connection is answered: {errors:?}\n{}",
        diagnostics(topo)
    );
    let after = new_flows(topo);
    after.iter().zip(&before).map(|(a, b)| a - b).collect()
}

/// Long-lived echo streams, each with the balancer the router sent it through.
struct Streams {
    held: Vec<(usize, HeldConn)>,
}

impl Streams {
    /// Opens `count` streams one by one, finding each one's balancer by whose new-flow
    /// counter moved.
    fn open(topo: &ScaleTopology, count: usize) -> Streams {
        let mut held = Vec::new();
        for _ in 0..count {
            let before = new_flows(topo);
            let conn = topo
                .client
                .run(|| HeldConn::open(SocketAddrV4::new(VIP, PORT)))
                .expect("client")
                .expect("open a stream");
            let after = new_flows(topo);
            let moved: Vec<usize> = (0..3).filter(|&k| after[k] > before[k]).collect();
            assert_eq!(
                moved.len(),
                1,
                "one balancer took the stream: {before:?} -> {after:?}"
            );
            held.push((moved[0] + 1, conn));
        }
        Streams { held }
    }

    fn per_balancer(&self) -> BTreeMap<usize, usize> {
        let mut out = BTreeMap::new();
        for (b, _) in &self.held {
            *out.entry(*b).or_default() += 1;
        }
        out
    }

    /// Sends one line on every stream; returns the failures as (balancer it started on,
    /// error), e.g. a reset from a backend that has no such connection.
    fn echo_all(&mut self, tag: &str) -> Vec<(usize, String)> {
        let mut failed = Vec::new();
        for (n, (b, conn)) in self.held.iter_mut().enumerate() {
            if let Err(e) = conn.echo(&format!("{tag}-{n}")) {
                failed.push((*b, format!("{e:#}")));
            }
        }
        failed
    }
}

fn share_ok(counts: &[u64], of: &[usize], low: f64, high: f64) -> bool {
    let total: u64 = of.iter().map(|&i| counts[i - 1]).sum();
    of.iter().all(|&i| {
        let share = counts[i - 1] as f64 / total.max(1) as f64;
        (low..=high).contains(&share)
    })
}

/// The ECMP group end to end (issue 17 item 4): three equal paths and new flows spread
/// over them; a balancer dying and returning, a restart of `lb run`, a BIRD killed and
/// restarted, a drain, moving
/// established flows without a reset (S-AN1, S-AN2, S-AN3, S-CL4); a VIP whose backends
/// all fail is withdrawn by every balancer (S-AN1).
#[test]
fn scale_ecmp_failover_restart_drain_and_withdrawal() {
    let _serial = serial();
    let web = ["b1", "b2", "b3"];
    let (mut topo, spare) = setup([config(&web), config(&web), config(&web)]);

    // Three equal paths; 300 new connections spread 20-45% each.
    let counts = spread(&topo, 300);
    eprintln!("300 new connections over balancers 1/2/3: {counts:?}");
    assert_eq!(counts.iter().sum::<u64>(), 300, "{counts:?}");
    assert!(
        share_ok(&counts, &[1, 2, 3], 0.20, 0.45),
        "spread {counts:?}"
    );

    let mut streams = Streams::open(&topo, 45);
    let held = streams.per_balancer();
    eprintln!("45 echo streams over balancers: {held:?}");
    assert!(
        (1..=3).all(|i| held.get(&i).copied().unwrap_or(0) >= 3),
        "{held:?}"
    );
    assert!(streams.echo_all("before").is_empty());

    // Balancer 1 dies (its link to the router goes down): the router drops its path
    // within 2 s and the streams it carried go on through the others without a reset.
    let misses_before = vip_counter(&topo, 2, "ct_misses") + vip_counter(&topo, 3, "ct_misses");
    let t0 = Instant::now();
    topo.set_uplink(1, false).expect("link down");
    let gone = topo
        .wait_paths(VIP, &paths(&[2, 3]), Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("{e:#}\n{}", diagnostics(&topo)));
    eprintln!("balancer 1 down: the router dropped its path after {gone:?}");
    assert!(t0.elapsed() < Duration::from_secs(3));
    let failed = streams.echo_all("l1-down");
    assert!(
        failed.is_empty(),
        "streams reset after balancer 1 died: {failed:?}"
    );
    let misses =
        vip_counter(&topo, 2, "ct_misses") + vip_counter(&topo, 3, "ct_misses") - misses_before;
    eprintln!("connection-table misses re-hashed on balancers 2 and 3: {misses}");
    assert!(
        misses > 0,
        "the moved streams reached balancers that never saw their SYN"
    );
    let counts = spread(&topo, 150);
    eprintln!("150 new connections with balancer 1 down: {counts:?}");
    assert_eq!(counts[0], 0);
    assert!(share_ok(&counts, &[2, 3], 0.30, 0.70), "spread {counts:?}");

    // Balancer 1 returns: its path comes back and the streams moving back keep working.
    topo.set_uplink(1, true).expect("link up");
    let back = topo
        .wait_paths(VIP, &paths(&[1, 2, 3]), Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{e:#}\n{}", diagnostics(&topo)));
    eprintln!("balancer 1 up: its path came back after {back:?}");
    let failed = streams.echo_all("l1-back");
    assert!(
        failed.is_empty(),
        "streams reset after balancer 1 returned: {failed:?}"
    );

    // A restart of lb run withdraws nothing (S-AN3): kill -9, then SIGTERM, on balancer 3,
    // while the router's paths are watched every 10 ms.
    for signal in [libc::SIGKILL, libc::SIGTERM] {
        let routes = topo.vip_routes(3).expect("table");
        let mut daemon = topo.balancers[2].daemon.take().expect("daemon");
        daemon.signal(signal).expect("signal");
        daemon.wait_exit(Duration::from_secs(10)).expect("exit");
        drop(daemon);
        topo.start_lb(3).expect("restart lb run");
        let until = Instant::now() + Duration::from_secs(4);
        while Instant::now() < until {
            assert_eq!(
                topo.router_paths(VIP).expect("paths"),
                paths(&[1, 2, 3]),
                "a restart of lb run (signal {signal}) withdrew a path"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            topo.vip_routes(3).expect("table"),
            routes,
            "the routes stayed as they were"
        );
    }
    let failed = streams.echo_all("restarted");
    assert!(
        failed.is_empty(),
        "streams reset across restarts: {failed:?}"
    );

    // Balancer 3's BIRD is killed (lb run keeps forwarding): the router drops its path at
    // once, the streams go on elsewhere; a new BIRD announces the table again.
    let t0 = Instant::now();
    if let Some(bird) = topo.balancers[2].bird.as_mut() {
        bird.kill();
    }
    topo.wait_paths(VIP, &paths(&[1, 2]), Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("{e:#}\n{}", diagnostics(&topo)));
    eprintln!(
        "balancer 3's BIRD killed: the router dropped its path after {:?}",
        t0.elapsed()
    );
    let failed = streams.echo_all("bird-killed");
    assert!(
        failed.is_empty(),
        "streams reset when a BIRD died: {failed:?}"
    );
    topo.start_balancer_bird(3).expect("bird again");
    topo.wait_paths(VIP, &paths(&[1, 2, 3]), Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{e:#}\n{}", diagnostics(&topo)));
    let failed = streams.echo_all("bird-back");
    assert!(
        failed.is_empty(),
        "streams reset when a BIRD came back: {failed:?}"
    );

    // Drain balancer 2 (S-AN2): its routes go at once, established streams keep working,
    // and `lb node drain` reports when it has gone quiet. It stays drained across a restart.
    let drain = topo
        .lb(2, &["node", "drain", "--timeout", "20"])
        .unwrap_or_else(|e| panic!("lb node drain: {e:#}\n{}", diagnostics(&topo)));
    eprintln!("lb node drain printed:\n{drain}");
    assert!(drain.contains("quiet"), "{drain}");
    topo.wait_paths(VIP, &paths(&[1, 3]), Duration::from_secs(2))
        .expect("drained balancer's path gone");
    assert_eq!(
        topo.vip_routes(2).expect("table").trim(),
        "",
        "no route left when drained"
    );
    let failed = streams.echo_all("drained");
    assert!(failed.is_empty(), "streams reset by the drain: {failed:?}");
    let mut daemon = topo.balancers[1].daemon.take().expect("daemon");
    daemon.signal(libc::SIGTERM).expect("signal");
    daemon.wait_exit(Duration::from_secs(10)).expect("exit");
    drop(daemon);
    topo.start_lb(2).expect("restart lb run");
    std::thread::sleep(Duration::from_secs(3));
    let node = topo.api(2, "GET", "/api/v1/node").expect("node");
    assert_eq!(node["bgp"]["drained"], true, "{node}");
    assert_eq!(topo.router_paths(VIP).expect("paths"), paths(&[1, 3]));
    let resumed = topo.lb(2, &["node", "resume"]).expect("lb node resume");
    assert!(resumed.contains("announcing"), "{resumed}");
    topo.wait_paths(VIP, &paths(&[1, 2, 3]), Duration::from_secs(5))
        .expect("resumed balancer's path back");
    let failed = streams.echo_all("resumed");
    assert!(failed.is_empty(), "streams reset by the resume: {failed:?}");

    // Every backend of `spare` fails on every node: all three withdraw its VIP (S-AN1),
    // while `web` stays announced everywhere.
    for stop in spare {
        stop.close().expect("close spare server");
    }
    let withdrawn = topo
        .wait_paths(SPARE_VIP, &BTreeSet::new(), Duration::from_secs(15))
        .unwrap_or_else(|e| panic!("{e:#}\n{}", diagnostics(&topo)));
    eprintln!("spare's backends failed: the router lost its route after {withdrawn:?}");
    for i in 1..=3 {
        let node = topo.api(i, "GET", "/api/v1/node").expect("node");
        let vips = node["bgp"]["vips"].as_array().cloned().unwrap_or_default();
        let spare_vip = vips
            .iter()
            .find(|v| v["address"] == SPARE_VIP.to_string())
            .unwrap_or_else(|| panic!("{node}"));
        assert_eq!(spare_vip["announced"], false, "{node}");
        assert!(
            spare_vip["reason"]
                .as_str()
                .unwrap_or("")
                .contains("no Backend Service"),
            "{node}"
        );
    }
    assert_eq!(topo.router_paths(VIP).expect("paths"), paths(&[1, 2, 3]));
    let live = topo
        .api(1, "GET", "/api/v1/stats/live")
        .expect("live stats");
    let announced: Vec<(String, bool)> = live["bgp"]["vips"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|v| {
            (
                v["address"].as_str().unwrap_or("").to_owned(),
                v["announced"] == true,
            )
        })
        .collect();
    assert_eq!(
        announced,
        vec![(VIP.to_string(), true), (SPARE_VIP.to_string(), false)],
        "the Live Stats payload"
    );
    let status = topo.lb(1, &["node", "status"]).expect("lb node status");
    assert!(
        status.contains("no Backend Service of its vService can take new traffic"),
        "{status}"
    );
    let metrics = topo.api_text(1, "GET", "/metrics").expect("metrics");
    assert!(
        metrics.contains(&format!(
            "lb_vip_announced{{vip=\"{VIP}\",table=\"100\"}} 1"
        )) && metrics.contains(&format!(
            "lb_vip_announced{{vip=\"{SPARE_VIP}\",table=\"100\"}} 0"
        )),
        "{metrics}"
    );
}

/// The negative control (issue 17 item 4): a balancer given a different backend set builds
/// a different Maglev table (S-CL4 broken on purpose), so some of its streams that move to
/// the others when it dies land on a backend that has no such connection and are reset.
/// It shows that the zero-reset results above are not a test that cannot fail.
#[test]
fn scale_negative_control_different_backend_set_resets_moved_flows() {
    let _serial = serial();
    let all = ["b1", "b2", "b3"];
    let (topo, _spare) = setup([config(&["b1"]), config(&all), config(&all)]);
    let mut streams = Streams::open(&topo, 45);
    let held = streams.per_balancer();
    eprintln!("45 echo streams over balancers: {held:?}");
    let on_l1 = held.get(&1).copied().unwrap_or(0);
    assert!(
        on_l1 >= 5,
        "enough streams through balancer 1 to see resets: {held:?}"
    );
    assert!(streams.echo_all("before").is_empty());
    topo.set_uplink(1, false).expect("link down");
    topo.wait_paths(VIP, &paths(&[2, 3]), Duration::from_secs(2))
        .expect("path gone");
    let failed = streams.echo_all("moved");
    eprintln!(
        "with a different backend set on balancer 1: {} of its {on_l1} streams failed after \
         moving: {failed:?}",
        failed.iter().filter(|(b, _)| *b == 1).count()
    );
    assert!(
        failed.iter().any(|(b, _)| *b == 1),
        "some of balancer 1's moved streams must be reset when the tables differ"
    );
}
