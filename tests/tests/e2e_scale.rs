//! Three balancers behind one ECMP router: each runs `lb run` and BIRD 2 with
//! BFD, announcing its VIPs from the routes `lb run` keeps (S-AN1..3); the backends sit on
//! one segment in DSR mode, and every balancer builds the same Maglev table (S-CL4), so a
//! flow the router moves to another balancer keeps its backend.
//!
//! A third test shares the configuration through one etcd (S-CL3) that runs in the
//! backends' segment namespace. A fourth runs the same group with tunnel forwarding
//! (`forwarding = "ipip"`, S-TN1): the backends sit on subnets of their own behind the
//! router and run the agent (`lb decap`).
//!
//! Needs root, bird2, etcd-server and etcd-client, the `lb` binary and the XDP objects
//! `lb-xdp` and `lb-decap` (see docs/development.md).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lb_tests::netns::bird::require_bird;
use lb_tests::netns::configs::validated;
use lb_tests::netns::scale::{SEGMENT_ETCD_ADDR, ScaleForwarding, ScaleTopology, balancer_addr};
use lb_tests::netns::status::global;
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
/// [`SPARE_VIP`] over s1 and s2, TCP checks each second, short reflection delays; DSR.
fn config(web_backends: &[&str]) -> String {
    config_for(ScaleForwarding::Dsr, web_backends)
}

/// [`config`] with both vServices forwarding as `forwarding` says, to the backends where
/// that mode has them.
fn config_for(forwarding: ScaleForwarding, web_backends: &[&str]) -> String {
    let mut cfg = forwarding.xdp_table();
    cfg += "[reflection]\nnetwork_remove_delay = 0.5\nnetwork_add_delay = 0.5\n\n\
            [bgp]\nenabled = true\ntable = 100\n\n\
            [[health_check]]\nname = \"tcp\"\ntype = \"tcp\"\nperiod = 1\ntimeout = 1\n\
            required_failures = 1\nrequired_successes = 1\n\n";
    for m in 1..=3 {
        cfg += &format!(
            "[[backend_service]]\nname = \"b{m}\"\naddress = \"{}\"\nport = {PORT}\nhealth_check = \"tcp\"\n\n",
            forwarding.backend_addr(m)
        );
    }
    for m in 1..=2 {
        cfg += &format!(
            "[[backend_service]]\nname = \"s{m}\"\naddress = \"{}\"\nport = {SPARE_PORT}\nhealth_check = \"tcp\"\n\n",
            forwarding.backend_addr(m)
        );
    }
    let list: Vec<String> = web_backends.iter().map(|b| format!("\"{b}\"")).collect();
    let mode = forwarding.name();
    cfg += &format!(
        "[[vservice]]\nname = \"web\"\nkind = \"tcp-l4\"\naddress = \"{VIP}\"\nport = {PORT}\n\
         forwarding = \"{mode}\"\nbackends = [{}]\n\n\
         [[vservice]]\nname = \"spare\"\nkind = \"tcp-l4\"\naddress = \"{SPARE_VIP}\"\n\
         port = {SPARE_PORT}\nforwarding = \"{mode}\"\nbackends = [\"s1\", \"s2\"]\n",
        list.join(", ")
    );
    validated(&cfg);
    cfg
}

/// Balancer `i`'s file with the shared configuration in etcd: the same `config(web)` plus
/// its own `[cluster]` table (node name `lb-i`, the etcd in the segment namespace).
fn etcd_config(i: usize) -> String {
    let mut cfg = config(&["b1", "b2", "b3"]);
    cfg += &format!(
        "\n[cluster]\nstore = \"etcd\"\nnode_name = \"lb-{i}\"\n\n\
         [cluster.etcd]\nendpoints = [\"http://{SEGMENT_ETCD_ADDR}:2379\"]\n\
         prefix = \"{ETCD_PREFIX}\"\n"
    );
    validated(&cfg);
    cfg
}

/// Where the balancers keep the shared configuration in etcd.
const ETCD_PREFIX: &str = "/lb/scale";

/// The uplink addresses of balancers `which`: what the router's route should lead to.
fn paths(which: &[usize]) -> BTreeSet<Ipv4Addr> {
    which.iter().map(|&i| balancer_addr(i)).collect()
}

/// Builds the network, starts the servers, `lb run` and BIRD everywhere, and waits for
/// the router's three paths to both VIPs. `configs[i]` is balancer i+1's file.
fn setup(configs: [String; 3]) -> (ScaleTopology, Vec<lb_tests::netns::ServerStop>) {
    setup_with(configs, false, ScaleForwarding::Dsr)
}

/// [`setup`], with etcd started in the segment namespace first when `etcd` is true, and the
/// backends where `forwarding` has them (configs made by [`config_for`] in that mode).
fn setup_with(
    configs: [String; 3],
    etcd: bool,
    forwarding: ScaleForwarding,
) -> (ScaleTopology, Vec<lb_tests::netns::ServerStop>) {
    require_data_path().expect("lb and the XDP object");
    require_bird().expect("bird2");
    let mut topo = ScaleTopology::with_forwarding(3, 3, &[VIP, SPARE_VIP], forwarding)
        .expect("scale-out topology");
    if etcd {
        let url = topo.start_etcd().expect("etcd in the segment namespace");
        eprintln!("etcd answers on {url} in the segment namespace");
    }
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
        if let Some(d) = &b.daemon {
            let log = d.log();
            let changes: Vec<&str> = log
                .lines()
                .filter(|l| l.contains("health state changed"))
                .collect();
            out += &format!(
                "health changes:\n{}\nweb's table: {:?}\n",
                changes.join("\n"),
                web_digest(topo, b.index)
            );
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

/// `lb status --json` of balancer `i`.
fn lb_status(topo: &ScaleTopology, i: usize) -> serde_json::Value {
    let pin = topo
        .balancer(i)
        .expect("balancer")
        .pin_dir
        .display()
        .to_string();
    let out = topo
        .lb(i, &["status", "--pin-dir", &pin, "--json"])
        .expect("lb status");
    serde_json::from_str(&out).expect("status json")
}

/// A counter of `web` on balancer `i` (`lb status --json`).
fn vip_counter(topo: &ScaleTopology, i: usize, name: &str) -> u64 {
    let json = lb_status(topo, i);
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

    /// How many streams each backend accepted (the name its `hold` answer gave).
    fn per_backend(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for (_, conn) in &self.held {
            *out.entry(conn.reply.backend.clone()).or_default() += 1;
        }
        out
    }

    /// The streams that are not established on exactly the backend that accepted them, as
    /// the backends' sockets (`ss` in each backend's namespace) show: (stream, that backend,
    /// the backends holding its client port).
    fn off_home(&self, topo: &ScaleTopology) -> Vec<(usize, String, Vec<String>)> {
        let held = topo.established(PORT).expect("ss in the backends");
        let mut off = Vec::new();
        for (n, (_, conn)) in self.held.iter().enumerate() {
            let client_port = conn.local_addr().expect("local address").port();
            let holders = held.get(&client_port).cloned().unwrap_or_default();
            if holders != [conn.reply.backend.clone()] {
                off.push((n, conn.reply.backend.clone(), holders));
            }
        }
        off
    }

    /// Sends one line on every stream; returns the failures as (balancer it started on,
    /// error), e.g. a reset from a backend that has no such connection.
    fn echo_all(&mut self, tag: &str) -> Vec<(usize, String)> {
        let mut failed = Vec::new();
        for (n, (b, conn)) in self.held.iter_mut().enumerate() {
            if let Err(e) = conn.echo(&format!("{tag}-{n}")) {
                let port = conn.local_addr().map(|a| a.port()).unwrap_or(0);
                let backend = &conn.reply.backend;
                failed.push((*b, format!("{backend}, client port {port}: {e:#}")));
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

/// The ECMP group end to end (S-AN1..3): three equal paths and new flows spread
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

/// The negative control: a balancer given a different backend set builds
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

/// Waits until the three balancers' kernel tables for `web` send flows to `count` backends
/// each and agree (one digest); returns how long that took. A balancer announces a VIP once
/// one of its backends is OK, and the others join its table as their own checks pass
/// (plus `network_add_delay`), at slightly different times on each balancer: a flow opened
/// before the tables agree may have been given a backend the others would not give it.
fn wait_full_tables(topo: &ScaleTopology, count: usize) -> Duration {
    let start = Instant::now();
    loop {
        let mut digests = BTreeSet::new();
        let mut sizes = Vec::new();
        for i in 1..=3 {
            let view = topo.api(i, "GET", "/api/v1/vservices/web/table");
            let tables = view
                .as_ref()
                .ok()
                .and_then(|v| v["tables"].as_array().cloned())
                .unwrap_or_default();
            let backends: BTreeSet<&str> = tables
                .iter()
                .flat_map(|t| t["entries"].as_array().into_iter().flatten())
                .filter_map(|e| e.as_str())
                .collect();
            sizes.push(backends.len());
            for t in &tables {
                digests.insert(t["digest"].as_str().unwrap_or("").to_owned());
            }
        }
        if digests.len() == 1 && sizes.iter().all(|&n| n == count) {
            return start.elapsed();
        }
        if start.elapsed() > Duration::from_secs(15) {
            panic!(
                "web's tables: backends per balancer {sizes:?}, digests {digests:?}\n{}",
                diagnostics(topo)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The agents' counters of packets they dropped.
const AGENT_DROPS: [&str; 5] = [
    "bad_outer",
    "fragment",
    "foreign_source",
    "bad_inner",
    "unknown_vip",
];

/// Losing a balancer keeps every established flow, on the same backend, through the
/// survivors, with tunnel forwarding as with DSR (S-TN1, S-CL4). The three balancers run
/// `web` and `spare` with `forwarding = "ipip"` over the same backends, which sit on subnets
/// of their own behind the router, hold the VIPs on `lo` and run the agent (`lb decap`).
/// Once the three balancers' tables hold every backend and agree, 90 new connections spread
/// over the three and 45 long-lived echo streams are held; balancer 1's link goes down and
/// the router drops its path. Then every stream still echoes (0 resets) and is established
/// on the backend that accepted it (the name its `hold` answer gave) and on no other (`ss` in
/// every backend's namespace); balancers 2 and 3 re-hash the moved packets (`ct_misses`) to
/// the same backends and tunnel them; new connections are answered through balancers 2 and
/// 3 only. Balancer 1 comes back, the streams move back and still echo on their backends; no
/// agent dropped a packet.
///
/// Run as root: `cargo test -p lb-tests --test e2e_scale -- --nocapture scale_ipip`, with
/// `LB_BIN`, `LB_XDP_OBJECT` and `LB_DECAP_OBJECT` naming `lb` and the objects as
/// `cargo xtask test` does (bird2 too). About 10 s.
#[test]
fn scale_ipip_established_flows_survive_losing_a_balancer() {
    let _serial = serial();
    let started = Instant::now();
    let ipip = ScaleForwarding::Ipip;
    let web = ["b1", "b2", "b3"];
    let configs = [
        config_for(ipip, &web),
        config_for(ipip, &web),
        config_for(ipip, &web),
    ];
    let (topo, _spare) = setup_with(configs, false, ipip);
    let settled = wait_full_tables(&topo, 3);
    eprintln!(
        "three balancers announce the tunnelled VIPs {:?} after the start; their tables hold \
         the three backends and agree {settled:?} later",
        started.elapsed() - settled
    );

    let counts = spread(&topo, 90);
    eprintln!("90 new connections over balancers 1/2/3: {counts:?}");
    assert!(counts.iter().all(|&c| c >= 10), "spread {counts:?}");

    let mut streams = Streams::open(&topo, 45);
    let held = streams.per_balancer();
    let homes = streams.per_backend();
    eprintln!("45 echo streams over balancers {held:?}, over backends {homes:?}");
    assert!(
        (1..=3).all(|i| held.get(&i).copied().unwrap_or(0) >= 3),
        "{held:?}"
    );
    assert_eq!(homes.len(), 3, "every backend accepted streams: {homes:?}");
    assert!(streams.echo_all("before").is_empty());
    let off = streams.off_home(&topo);
    assert!(off.is_empty(), "streams away from their backend: {off:?}");

    let survivors = |name: &str| vip_counter(&topo, 2, name) + vip_counter(&topo, 3, name);
    let tunnelled = || {
        [2, 3]
            .iter()
            .map(|&i| global(&lb_status(&topo, i), "tunnelled").expect("tunnelled counter"))
            .sum::<u64>()
    };
    let (misses_before, tunnelled_before) = (survivors("ct_misses"), tunnelled());

    // Balancer 1 is lost: the router moves its flows to balancers 2 and 3, which send every
    // one to the backend balancer 1 did, inside the same outer header.
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
        "streams reset after balancer 1 was lost: {failed:?}\n{}",
        diagnostics(&topo)
    );
    let off = streams.off_home(&topo);
    assert!(off.is_empty(), "streams away from their backend: {off:?}");
    let misses = survivors("ct_misses") - misses_before;
    let moved = tunnelled() - tunnelled_before;
    eprintln!(
        "45 streams echo on their backends; balancers 2 and 3 re-hashed {misses} packets of \
         flows they never saw open (ct_misses) and tunnelled {moved} packets"
    );
    assert!(
        misses > 0,
        "the moved streams reached balancers that never saw their SYN"
    );
    assert!(
        moved >= 45,
        "every stream went through balancer 2 or 3: {moved}"
    );
    let counts = spread(&topo, 90);
    eprintln!("90 new connections with balancer 1 down: {counts:?}");
    assert_eq!(counts[0], 0, "{counts:?}");
    assert!(counts[1] > 0 && counts[2] > 0, "{counts:?}");

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
    let off = streams.off_home(&topo);
    assert!(off.is_empty(), "streams away from their backend: {off:?}");

    for m in 1..=3 {
        let counters = topo.agent_counters(m).expect("lb decap --status");
        for name in AGENT_DROPS {
            assert_eq!(
                counters[name].as_u64(),
                Some(0),
                "backend {m}'s agent dropped packets ({name}): {counters}"
            );
        }
        assert!(
            counters["decapsulated"].as_u64().unwrap_or(0) > 0,
            "backend {m}'s agent: {counters}"
        );
    }
    eprintln!("the test took {:?}", started.elapsed());
}

/// `GET /api/v1/cluster` on balancer `i`.
fn cluster(topo: &ScaleTopology, i: usize) -> serde_json::Value {
    topo.api(i, "GET", "/api/v1/cluster")
        .unwrap_or_else(|e| panic!("balancer {i}'s API: {e:#}"))
}

/// Whether balancer `i` runs `backend` in Maintenance.
fn in_maintenance(topo: &ScaleTopology, i: usize, backend: &str) -> bool {
    let b = topo
        .api(i, "GET", &format!("/api/v1/backends/{backend}"))
        .unwrap_or_else(|e| panic!("balancer {i}'s API: {e:#}"));
    b["maintenance"] == true
}

/// `web`'s Maglev table digest as balancer `i`'s kernel holds it.
fn web_digest(topo: &ScaleTopology, i: usize) -> Result<String, String> {
    let t = topo
        .api(i, "GET", "/api/v1/vservices/web/table")
        .map_err(|e| format!("balancer {i}: {e:#}"))?;
    let digests: Vec<String> = t["tables"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|t| t["digest"].as_str().unwrap_or("").to_owned())
        .collect();
    match digests.as_slice() {
        [one] if !one.is_empty() => Ok(one.clone()),
        _ => Err(format!("balancer {i}: web's tables {t}")),
    }
}

/// The revision and `web`'s table digest all three nodes agree on (S-CL3, S-CL4): etcd
/// lists three nodes that run the revision it holds with equal recorded table digests, and
/// every kernel holds the same table for `web`; else what differs.
fn agreement(topo: &ScaleTopology) -> Result<(u64, String), String> {
    let view = topo
        .api(1, "GET", "/api/v1/cluster")
        .map_err(|e| format!("{e:#}"))?;
    let nodes = view["nodes"].as_array().cloned().unwrap_or_default();
    if nodes.len() != 3 || !nodes.iter().all(|n| n["agrees"] == true) {
        return Err(format!("not three nodes that agree: {view}"));
    }
    let revisions: BTreeSet<u64> = nodes
        .iter()
        .filter_map(|n| n["applied_revision"].as_u64())
        .collect();
    let recorded: BTreeSet<String> = nodes
        .iter()
        .map(|n| n["table_digests"].to_string())
        .collect();
    if recorded.contains("{}") {
        return Err(format!("a node recorded no table digests: {view}"));
    }
    let kernel = (1..=3)
        .map(|i| web_digest(topo, i))
        .collect::<Result<BTreeSet<String>, String>>()?;
    match (revisions.len(), recorded.len(), kernel.first()) {
        (1, 1, Some(digest)) if kernel.len() == 1 => {
            Ok((*revisions.first().unwrap_or(&0), digest.clone()))
        }
        _ => Err(format!(
            "revisions {revisions:?}, recorded digests {recorded:?}, kernel digests {kernel:?}"
        )),
    }
}

/// Waits until [`agreement`] holds with a revision and digest that satisfy `want`; returns
/// them and how long it took.
fn wait_agreement(
    topo: &ScaleTopology,
    timeout: Duration,
    what: &str,
    want: impl Fn(u64, &str) -> bool,
) -> (u64, String, Duration) {
    let start = Instant::now();
    let mut last;
    loop {
        match agreement(topo) {
            Ok((rev, digest)) if want(rev, &digest) => return (rev, digest, start.elapsed()),
            Ok((rev, digest)) => last = format!("revision {rev}, digest {digest}"),
            Err(e) => last = e,
        }
        if start.elapsed() > timeout {
            panic!(
                "{what}: not within {timeout:?}: {last}\n{}",
                diagnostics(topo)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `check` every 10 ms until it holds; how long that took, or a panic naming `what`.
fn wait_until(
    topo: &ScaleTopology,
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        if check() {
            return start.elapsed();
        }
        if start.elapsed() > timeout {
            panic!("{what}: not within {timeout:?}\n{}", diagnostics(topo));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The three balancers share their configuration through one etcd (S-CL3): they agree on
/// the revision and on `web`'s Maglev table (S-CL4); a Maintenance change made on balancer
/// 3's API reaches balancers 1 and 2 within 1 s; etcd stopped for 10 s, every balancer
/// keeps forwarding long-lived streams and new connections (S-AN1: no path withdrawn),
/// serves its API and reports the store unreachable, refuses a change with 503; a change
/// written to etcd while the nodes are still cut off is applied by all three once etcd is
/// back, and they agree again.
#[test]
fn scale_etcd_shared_configuration_maintenance_and_outage() {
    let _serial = serial();
    let configs = [etcd_config(1), etcd_config(2), etcd_config(3)];
    let (mut topo, _spare) = setup_with(configs, true, ScaleForwarding::Dsr);

    // (1) One revision, one table.
    let (first_rev, first_digest, took) = wait_agreement(
        &topo,
        Duration::from_secs(15),
        "three nodes agree",
        |_, _| true,
    );
    eprintln!(
        "the three nodes agree on revision {first_rev}, web digest {first_digest} ({took:?})"
    );

    // (2) Maintenance on balancer 3 reaches balancers 1 and 2 within 1 s.
    let made = Instant::now();
    let answer = topo
        .api_json(
            3,
            "POST",
            "/api/v1/backends/b1/maintenance",
            &serde_json::json!({"on": true}),
        )
        .unwrap_or_else(|e| panic!("Maintenance on balancer 3: {e:#}"));
    let answered = made.elapsed();
    let seen = wait_until(
        &topo,
        Duration::from_secs(5),
        "b1 in Maintenance on 1 and 2",
        || in_maintenance(&topo, 1, "b1") && in_maintenance(&topo, 2, "b1"),
    );
    eprintln!(
        "Maintenance made on balancer 3 (answered {answer} after {answered:?}): on balancers 1 \
         and 2 {seen:?} after the answer, {:?} after the call",
        made.elapsed()
    );
    assert!(seen < Duration::from_secs(1), "took {seen:?}");
    let (rev, digest, _) = wait_agreement(
        &topo,
        Duration::from_secs(10),
        "agreement after the Maintenance",
        |rev, _| rev > first_rev,
    );
    eprintln!("after the Maintenance: revision {rev}, web digest {digest} on all three");

    // (3) etcd stopped for 10 s.
    let mut streams = Streams::open(&topo, 30);
    let held = streams.per_balancer();
    eprintln!("30 echo streams over balancers: {held:?}");
    assert!(
        (1..=3).all(|i| held.get(&i).copied().unwrap_or(0) >= 2),
        "{held:?}"
    );
    assert!(streams.echo_all("before").is_empty());
    let key = format!("{ETCD_PREFIX}/config");
    let etcd = topo.etcd.as_mut().expect("etcd");
    etcd.stop().expect("stop etcd");
    let down = Instant::now();
    let noticed = wait_until(&topo, Duration::from_secs(5), "store unreachable", || {
        (1..=3).all(|i| cluster(&topo, i)["status"]["store_reachable"] == false)
    });
    eprintln!("etcd stopped: all three report the store unreachable after {noticed:?}");
    let refused = topo.api_json(
        2,
        "POST",
        "/api/v1/backends/b2/maintenance",
        &serde_json::json!({"on": true}),
    );
    match &refused {
        Err(e) if format!("{e:#}").contains(" 503") => {}
        other => panic!("a change while etcd is down must get 503: {other:?}"),
    }
    let (mut rounds, mut connections) = (0, 0);
    while down.elapsed() < Duration::from_secs(10) {
        let failed = streams.echo_all(&format!("down-{rounds}"));
        assert!(
            failed.is_empty(),
            "streams reset while etcd is down: {failed:?}"
        );
        connections += spread(&topo, 20).iter().sum::<u64>();
        for i in 1..=3 {
            let view = cluster(&topo, i);
            assert_eq!(view["status"]["store_reachable"], false, "{view}");
        }
        assert_eq!(topo.router_paths(VIP).expect("paths"), paths(&[1, 2, 3]));
        rounds += 1;
        std::thread::sleep(Duration::from_millis(300));
    }
    eprintln!(
        "etcd down {:?}: {rounds} rounds of echoes on 30 streams, {connections} new \
         connections, every API answered, no path withdrawn",
        down.elapsed()
    );
    assert!(
        (1..=3).all(|i| !in_maintenance(&topo, i, "b2")),
        "the 503 change was made nowhere"
    );

    // etcd back: a change written straight into it before the nodes reconnect reaches all.
    let etcd = topo.etcd.as_mut().expect("etcd");
    etcd.spawn().expect("restart etcd");
    let text = etcd
        .ctl(&["get", &key, "--print-value-only"])
        .expect("etcdctl get");
    let text = text.strip_suffix('\n').unwrap_or(&text);
    assert_eq!(text.matches("maintenance = true").count(), 1, "{text}");
    let edited = text.replace("maintenance = true", "maintenance = false");
    etcd.ctl(&["put", &key, &edited]).expect("etcdctl put");
    let put = Instant::now();
    let applied = wait_until(
        &topo,
        Duration::from_secs(15),
        "b1 back on all three",
        || (1..=3).all(|i| !in_maintenance(&topo, i, "b1")),
    );
    eprintln!(
        "etcd back after {:?} down: the change put with etcdctl ran on all three {applied:?} \
         after the put",
        put.duration_since(down)
    );
    assert!(applied < Duration::from_secs(10), "took {applied:?}");

    // (4) Agreement again; the streams never noticed.
    let (rev, digest, took) = wait_agreement(
        &topo,
        Duration::from_secs(15),
        "agreement at the end",
        |r, d| r > rev && d == first_digest,
    );
    eprintln!("at the end: revision {rev}, web digest {digest} on all three ({took:?})");
    for i in 1..=3 {
        assert_eq!(cluster(&topo, i)["status"]["store_reachable"], true);
    }
    let failed = streams.echo_all("after");
    assert!(
        failed.is_empty(),
        "streams reset after etcd came back: {failed:?}"
    );
    let counts = spread(&topo, 60);
    assert_eq!(counts.iter().sum::<u64>(), 60, "{counts:?}");
}
