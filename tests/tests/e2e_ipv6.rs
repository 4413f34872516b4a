//! End-to-end tests of IPv6 Network vServices (XDP) in network namespaces: the IPv4 tests of
//! `e2e_network` and the health timing of `e2e_health`, over IPv6, plus a dual-stack service.
//!
//! Every test builds a dual-stack topology ([`Topology::dual_stack`]): each namespace has its
//! IPv4 addresses and IPv6 ones (fd00:10:10::/64 client link, fd00:10:11:N::/64 backend links,
//! fd00:10:12:N::/64 DSR links, IPv6 VIPs in fd00:10:99::/64), and the backends' servers listen
//! on `[::]`. Traffic goes only to addresses inside those namespaces.
//!
//! Needs root, the `lb` binary (`cargo build -p lb-userspace`) and the XDP object
//! (`cargo xtask build`). Run: `cargo test -p lb-tests --test e2e_ipv6 -- --nocapture`.
//! The tests share global resources (bpffs, the namespace list, CPU), so they run one at a
//! time through the `SERIAL` mutex: plain `cargo test` works without `--test-threads=1`.
//! Every topology is deleted by its drop guard, also when a test fails.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use lb_tests::netns::{
    self, BALANCER_ADDR6, CLIENT_ADDR6, Daemon, HeldConn, Ipv6Options, Topology, TopologyOptions,
    ask_many, backend_addr6, count_by_backend, require_data_path, tcp_ask_at, udp_ask_at,
};
use serde_json::Value;

static SERIAL: Mutex<()> = Mutex::new(());

/// Interval between two `lb status` samples in the health tests (plus the time one call takes).
const POLL: Duration = Duration::from_millis(150);
/// Slack added to every health timing bound: status sampling, process start-up, a loaded host.
const MARGIN: f64 = 1.5;

fn serial() -> MutexGuard<'static, ()> {
    // A failed (panicked) test poisons the lock; the next test still runs.
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// IPv6 VIP `fd00:10:99::LAST` (tests pass `0x10` for `::10`, mirroring IPv4's `10.99.0.10`).
fn vip6(last: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x10, 0x99, 0, 0, 0, 0, last)
}

fn vip4(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 99, 0, last)
}

fn at(addr: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(addr.into(), port)
}

/// A dual-stack topology with 3 backends (and IPv6 DSR wiring when `dsr_vip` is set).
fn topology(dsr_vip: Option<Ipv6Addr>) -> Topology {
    Topology::dual_stack(&TopologyOptions::default(), &Ipv6Options { dsr_vip }).expect("topology")
}

fn addr6_of(topo: &Topology, i: usize) -> Ipv6Addr {
    topo.backends[i]
        .addr6
        .expect("dual-stack backend has an IPv6 address")
}

// ----- configuration text -----------------------------------------------------------------

/// `[[backend_service]]` entries b1..bN at their IPv6 addresses, `port`, the given weights.
fn backend_services6(topo: &Topology, port: u16, weights: &[u32]) -> String {
    topo.backends
        .iter()
        .zip(weights)
        .enumerate()
        .map(|(i, (b, w))| {
            format!(
                "[[backend_service]]\nname = \"{}\"\naddress = \"{}\"\nport = {port}\nweight = {w}\n\n",
                b.name,
                addr6_of(topo, i)
            )
        })
        .collect()
}

/// One `[[vservice]]` entry; `ports` is a TOML line such as `port = 80`, or empty for ANY-L3.
fn vservice(
    name: &str,
    kind: &str,
    vip: impl Into<IpAddr>,
    ports: &str,
    fwd: &str,
    backends: &[&str],
) -> String {
    let vip: IpAddr = vip.into();
    let list: Vec<String> = backends.iter().map(|b| format!("\"{b}\"")).collect();
    format!(
        "[[vservice]]\nname = \"{name}\"\nkind = \"{kind}\"\naddress = \"{vip}\"\n{ports}\nforwarding = \"{fwd}\"\nbackends = [{}]\n\n",
        list.join(", ")
    )
}

/// A `[[health_check]]` profile; `extra` holds further `key = value` lines (may be empty).
fn check(name: &str, kind: &str, extra: &str) -> String {
    format!("[[health_check]]\nname = \"{name}\"\ntype = \"{kind}\"\n{extra}\n")
}

/// A `[[backend_service]]` at `addr:port` checked by profile `check`.
fn checked_service(name: &str, addr: impl Into<IpAddr>, port: u16, check: &str) -> String {
    let addr: IpAddr = addr.into();
    format!(
        "[[backend_service]]\nname = \"{name}\"\naddress = \"{addr}\"\nport = {port}\nhealth_check = \"{check}\"\n\n"
    )
}

fn all_names(topo: &Topology) -> Vec<&str> {
    topo.backends.iter().map(|b| b.name.as_str()).collect()
}

/// Validates `cfg` with the library's parser (a clear error early).
fn validated(cfg: &str) {
    if let Err(e) = lb::config::parse(cfg, "e2e ipv6 test config") {
        panic!("test config invalid: {e}\n{cfg}");
    }
}

/// Validates `cfg`, then `lb load`s it.
fn load(topo: &Topology, cfg: &str) {
    validated(cfg);
    topo.lb_load(cfg).expect("lb load");
}

/// Validates `cfg`, then starts `lb run`.
fn start_daemon(topo: &Topology, cfg: &str) -> Daemon {
    validated(cfg);
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

// ----- assertions and reading status ------------------------------------------------------

/// Asserts each backend's share is within 10 percentage points of its weight's share (the
/// tolerance of the IPv4 tests: with 600 flows the standard deviation of a 1/3 share is 1.9
/// points).
fn assert_shares(label: &str, counts: &BTreeMap<String, usize>, weights: &[(&str, u32)]) {
    let total: usize = counts.values().sum();
    let weight_sum: u32 = weights.iter().map(|(_, w)| w).sum();
    for (name, w) in weights {
        let got = counts.get(*name).copied().unwrap_or(0) as f64 / total as f64;
        let want = f64::from(*w) / f64::from(weight_sum);
        println!(
            "{label}: {name} weight {w}: {} of {total} = {:.1} % (expected {:.1} %)",
            counts.get(*name).copied().unwrap_or(0),
            got * 100.0,
            want * 100.0
        );
        assert!(
            (got - want).abs() <= 0.10,
            "{label}: {name} got {:.1} %, expected {:.1} % +- 10 points",
            got * 100.0,
            want * 100.0
        );
    }
    for name in counts.keys() {
        assert!(
            weights.iter().any(|(n, _)| n == name),
            "{label}: unexpected backend {name}"
        );
    }
}

/// Polls `f` every 100 ms until it returns true or `limit` passes.
fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// The entry of the VIP named `name` in `lb status --json`.
fn vip_entry<'a>(status: &'a Value, name: &str) -> Option<&'a Value> {
    status["vips"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == name)
}

/// The `packets` counter of the VIP named `name` in `lb status --json`.
fn vip_packets(status: &Value, name: &str) -> Option<u64> {
    vip_entry(status, name)?["counters"]["packets"].as_u64()
}

/// Per backend of VIP `name`: (Backend Service name, `counters.new_flows`).
fn backend_new_flows(status: &Value, name: &str) -> Vec<(String, u64)> {
    let Some(list) = vip_entry(status, name).and_then(|v| v["backends"].as_array()) else {
        return Vec::new();
    };
    list.iter()
        .map(|b| {
            (
                b["name"].as_str().unwrap_or_default().to_owned(),
                b["counters"]["new_flows"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

fn global(status: &Value, name: &str) -> Option<u64> {
    netns::find_counter(&status["global"], name)
}

/// The global counters of `lb status --json`, for failure messages and output.
fn globals(status: &Value) -> String {
    status["global"].to_string()
}

// ----- harness self-tests ------------------------------------------------------------------

/// Harness self-test without any XDP program: over IPv6 the client reaches every backend's
/// own IPv6 address through the balancer's kernel forwarding, with TCP (short and held) and
/// UDP, on the servers' `[::]` sockets; the same sockets still answer IPv4.
#[test]
fn harness_ipv6_routes_without_xdp() {
    let _guard = serial();
    let topo = topology(None);
    topo.tcp_servers(8000).expect("tcp servers");
    topo.udp_servers(8001).expect("udp servers");
    for (i, b) in topo.backends.iter().enumerate() {
        let a6 = backend_addr6(i + 1);
        assert_eq!(b.addr6, Some(a6));
        let (tcp, udp, mut held, tcp4) = topo
            .client
            .run(|| {
                (
                    tcp_ask_at(at(a6, 8000)),
                    udp_ask_at(at(a6, 8001)),
                    HeldConn::open_at(at(a6, 8000)),
                    tcp_ask_at(at(b.addr, 8000)),
                )
            })
            .expect("client namespace");
        let tcp = tcp.expect("tcp answer over IPv6");
        let udp = udp.expect("udp answer over IPv6");
        let tcp4 = tcp4.expect("tcp answer over IPv4 on the same [::] socket");
        assert_eq!((tcp.backend.as_str(), tcp.port), (b.name.as_str(), 8000));
        assert_eq!((udp.backend.as_str(), udp.port), (b.name.as_str(), 8001));
        assert_eq!(tcp4.backend, b.name);
        let held = held.as_mut().expect("held connection");
        for n in 0..3 {
            held.echo(&format!("hello {n}")).expect("echo");
        }
        assert_eq!(
            held.local_addr().expect("local").ip(),
            IpAddr::V6(CLIENT_ADDR6)
        );
        println!(
            "harness6: {} reached directly at {a6} (tcp, udp, held) and at {} (tcp)",
            b.name, b.addr
        );
    }
    // The routes and forwarding the harness promises.
    let client_routes = topo.client.ip(&["-6", "route", "show"]).expect("routes");
    println!("harness6: client IPv6 routes:\n{client_routes}");
    assert!(client_routes.contains(&format!("default via {BALANCER_ADDR6}")));
    assert!(client_routes.contains(&format!("{} via {BALANCER_ADDR6}", netns::VIP6_PREFIX)));
    let fwd = topo
        .balancer
        .exec("sysctl", &["-n", "net.ipv6.conf.all.forwarding"])
        .expect("sysctl");
    assert_eq!(fwd.trim(), "1", "IPv6 forwarding on in the balancer");
    let (rx, tx) = topo.balancer.link_packets("cli").expect("link stats");
    println!("harness6: balancer cli rx {rx} tx {tx} packets");
    assert!(rx > 0 && tx > 0, "traffic went through the balancer");
}

/// Harness self-test of the IPv6 DSR wiring without XDP: (1) each backend holds the VIP on
/// `lo` (/128) and does NOT answer Neighbour Solicitations for it on its balancer link, with no
/// sysctl set for that (the balancer, given a route to the VIP over `bkN`, never learns a
/// link-layer address for it, while the backend's own address on the same link resolves);
/// (2) a connection to a backend's own IPv6 address goes through the balancer and the answer
/// comes straight back over the direct link.
#[test]
fn harness_ipv6_dsr_vip_on_lo_gets_no_ndp_answer() {
    let _guard = serial();
    let vip = vip6(0xfa);
    let topo = topology(Some(vip));
    topo.tcp_servers(8000).expect("tcp servers");
    for (i, b) in topo.backends.iter().enumerate() {
        let lo = b.ns.ip(&["-6", "addr", "show", "dev", "lo"]).expect("addr");
        assert!(
            lo.contains(&format!("{vip}/128")),
            "{}: VIP on lo: {lo}",
            b.name
        );
        let proxy =
            b.ns.exec("sysctl", &["-n", "net.ipv6.conf.eth0.proxy_ndp"])
                .expect("sysctl");
        assert_eq!(proxy.trim(), "0", "{}: proxy_ndp off", b.name);
        let dev = &b.balancer_dev;
        let own = addr6_of(&topo, i).to_string();
        let vip_s = vip.to_string();
        topo.balancer
            .ip(&["-6", "route", "add", &format!("{vip}/128"), "dev", dev])
            .expect("temporary VIP route");
        let ping_vip = topo
            .balancer
            .exec("ping", &["-6", "-c", "2", "-W", "1", "-q", &vip_s]);
        let vip_neigh = topo
            .balancer
            .ip(&["-6", "neigh", "show", &vip_s, "dev", dev])
            .expect("neigh");
        let own_neigh = topo
            .balancer
            .ip(&["-6", "neigh", "show", &own, "dev", dev])
            .expect("neigh");
        topo.balancer
            .ip(&["-6", "route", "del", &format!("{vip}/128"), "dev", dev])
            .expect("remove the temporary route");
        println!(
            "harness6 dsr: {}: ping VIP over {dev}: {}; neighbour VIP: {:?}; own {own}: {:?}",
            b.name,
            if ping_vip.is_ok() {
                "answered"
            } else {
                "no answer"
            },
            vip_neigh.trim(),
            own_neigh.trim()
        );
        assert!(
            ping_vip.is_err(),
            "{}: VIP on lo answered over {dev}",
            b.name
        );
        assert!(
            !vip_neigh.contains("lladdr"),
            "{}: NDP for the VIP on lo was answered on eth0: {vip_neigh}",
            b.name
        );
        assert!(
            own_neigh.contains("lladdr"),
            "control: {own} resolves: {own_neigh}"
        );

        let dsr_dev = format!("dsr{}", i + 1);
        let (bk_rx0, _) = topo.balancer.link_packets(dev).expect("stats");
        let (dsr_rx0, _) = topo.client.link_packets(&dsr_dev).expect("stats");
        let replies = ask_many(&topo.client, 5, tcp_ask_at, at(addr6_of(&topo, i), 8000));
        assert!(replies.iter().all(|r| r.backend == b.name));
        let (bk_rx1, _) = topo.balancer.link_packets(dev).expect("stats");
        let (dsr_rx1, _) = topo.client.link_packets(&dsr_dev).expect("stats");
        println!(
            "harness6 dsr: {}: balancer {dev} rx +{}, client {dsr_dev} rx +{}",
            b.name,
            bk_rx1 - bk_rx0,
            dsr_rx1 - dsr_rx0
        );
        assert!(
            bk_rx1 - bk_rx0 <= 5,
            "answers came back through the balancer"
        );
        assert!(dsr_rx1 - dsr_rx0 >= 15, "answers came over the direct link");
    }
}

// ----- data path ---------------------------------------------------------------------------

/// DESIGN "Network vServices" (weighted Maglev) and the data path contract, over IPv6
/// (NAT66): 600 new TCP connections to an IPv6 tcp-l4 NAT VIP over 3 IPv6 backends spread by
/// weight 1:1:1, then 2:1:1 after `lb load` of the changed weights; each share within 10
/// points of its weight's share.
#[test]
fn network_ipv6_tcp_l4_nat_spread_follows_weights() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = topology(None);
    topo.tcp_servers(8000).expect("servers");
    let addr = at(vip6(0x10), 8000);
    let names = all_names(&topo);
    for weights in [[1u32, 1, 1], [2, 1, 1]] {
        let cfg = backend_services6(&topo, 8000, &weights)
            + &vservice("web6", "tcp-l4", vip6(0x10), "port = 8000", "nat", &names);
        load(&topo, &cfg);
        let started = Instant::now();
        let replies = ask_many(&topo.client, 600, tcp_ask_at, addr);
        println!(
            "ipv6 tcp-l4 weights {weights:?}: 600 connections in {:?}",
            started.elapsed()
        );
        assert!(replies.iter().all(|r| r.port == 8000));
        let counts = count_by_backend(&replies);
        let pairs: Vec<(&str, u32)> = names.iter().copied().zip(weights).collect();
        assert_shares(&format!("ipv6 tcp-l4 {weights:?}"), &counts, &pairs);
    }
    let status = topo.lb_status().expect("lb status");
    println!(
        "ipv6 tcp-l4: VIP packets {:?}, new flows per backend {:?}; global {}",
        vip_packets(&status, "web6"),
        backend_new_flows(&status, "web6"),
        globals(&status)
    );
    assert!(
        global(&status, "nat_reply").unwrap_or(0) > 0,
        "replies were reverse-translated by the program: {}",
        globals(&status)
    );
}

/// Data path contract, UDP-L4 over IPv6: 300 requests from different source ports through an
/// IPv6 udp-l4 NAT VIP are all answered (connected client sockets: only answers from the VIP
/// itself are delivered, so every answer was translated back) and spread over all 3 backends.
#[test]
fn network_ipv6_udp_l4_nat_requests_answered_and_spread() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = topology(None);
    topo.udp_servers(5300).expect("servers");
    let names = all_names(&topo);
    let cfg = backend_services6(&topo, 5300, &[1, 1, 1])
        + &vservice("dns6", "udp-l4", vip6(0x11), "port = 5300", "nat", &names);
    load(&topo, &cfg);
    let replies = ask_many(&topo.client, 300, udp_ask_at, at(vip6(0x11), 5300));
    let counts = count_by_backend(&replies);
    println!("ipv6 udp-l4: 300 of 300 answered: {counts:?}");
    assert!(replies.iter().all(|r| r.port == 5300));
    assert_shares("ipv6 udp-l4", &counts, &[("b1", 1), ("b2", 1), ("b3", 1)]);
}

/// Data path contract, Port Range over IPv6 (TCP-L4 with port_range, backend port 0):
/// connections to several ports of the range reach backends on that same port and are
/// spread; a port outside the range is not balanced (the connection fails although the
/// backends listen there).
#[test]
fn network_ipv6_port_range_keeps_port_and_ignores_outside_ports() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = topology(None);
    let in_range = [7000u16, 7005, 7010];
    for p in in_range.iter().copied().chain([6999, 7011, 7100]) {
        topo.tcp_servers(p).expect("servers");
    }
    let names = all_names(&topo);
    let cfg = backend_services6(&topo, 0, &[1, 1, 1])
        + &vservice(
            "range6",
            "tcp-l4",
            vip6(0x12),
            "port_range = \"7000-7010\"",
            "nat",
            &names,
        );
    load(&topo, &cfg);
    for p in in_range {
        let replies = ask_many(&topo.client, 30, tcp_ask_at, at(vip6(0x12), p));
        let counts = count_by_backend(&replies);
        println!("ipv6 port range: port {p}: {counts:?}");
        assert!(
            replies.iter().all(|r| r.port == p),
            "backend port differs from {p}"
        );
        assert_eq!(counts.len(), 3, "port {p} spread over all backends");
    }
    for p in [6999u16, 7011, 7100] {
        let outside = topo
            .client
            .run(|| tcp_ask_at(at(vip6(0x12), p)))
            .expect("client namespace");
        let shown = outside.as_ref().map_err(|e| format!("{e:#}"));
        println!("ipv6 port range: port {p} (outside) -> {shown:?}");
        assert!(
            outside.is_err(),
            "port {p} outside the range must not be balanced"
        );
    }
}

/// Data path contract, ANY-L3 over IPv6 (backend port 0): TCP to one port and UDP to another
/// are both balanced to the port asked for, and ICMPv6 echo (`ping -6`) to the VIP is
/// answered through NAT66 (the echo reply comes back from the VIP).
#[test]
fn network_ipv6_any_l3_balances_tcp_udp_and_icmpv6() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = topology(None);
    topo.tcp_servers(8080).expect("tcp servers");
    topo.udp_servers(5353).expect("udp servers");
    let names = all_names(&topo);
    let vip = vip6(0x13);
    let cfg = backend_services6(&topo, 0, &[1, 1, 1])
        + &vservice("any6", "any-l3", vip, "", "nat", &names);
    load(&topo, &cfg);
    let tcp = ask_many(&topo.client, 60, tcp_ask_at, at(vip, 8080));
    let udp = ask_many(&topo.client, 60, udp_ask_at, at(vip, 5353));
    let (tcp_counts, udp_counts) = (count_by_backend(&tcp), count_by_backend(&udp));
    println!("ipv6 any-l3: tcp 8080 {tcp_counts:?}, udp 5353 {udp_counts:?}");
    assert!(tcp.iter().all(|r| r.port == 8080) && udp.iter().all(|r| r.port == 5353));
    assert_eq!(tcp_counts.len(), 3, "tcp spread over all backends");
    assert_eq!(udp_counts.len(), 3, "udp spread over all backends");
    let before = topo.lb_status().expect("status");
    let out = topo
        .client
        .exec("ping", &["-6", "-c", "3", "-W", "1", &vip.to_string()]);
    let after = topo.lb_status().expect("status");
    let out = out.unwrap_or_else(|e| {
        panic!(
            "ping -6 the ANY-L3 VIP: {e:#}\nVIP packets before {:?} after {:?}; global before {} after {}",
            vip_packets(&before, "any6"),
            vip_packets(&after, "any6"),
            globals(&before),
            globals(&after)
        )
    });
    let answered = out
        .lines()
        .filter(|l| l.contains(&format!("bytes from {vip}")))
        .count();
    println!("ipv6 any-l3: ping -6: {answered} of 3 echo replies from the VIP");
    assert_eq!(answered, 3, "ping output:\n{out}");
}

/// DESIGN "Forwarding modes: dsr" and the contract's DSR rules, over IPv6: the balancer only
/// rewrites MACs; backends (the IPv6 VIP on lo as /128, no NDP answer for it on the shared
/// link) answer the client directly from the VIP, so the balancer's backend-side interfaces
/// receive (almost) nothing and no NAT reply is counted.
#[test]
fn network_ipv6_dsr_replies_bypass_the_balancer() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let vip = vip6(0x14);
    let topo = topology(Some(vip));
    topo.tcp_servers(8000).expect("servers");
    let names = all_names(&topo);
    let cfg = backend_services6(&topo, 8000, &[1, 1, 1])
        + &vservice("dsr6", "tcp-l4", vip, "port = 8000", "dsr", &names);
    load(&topo, &cfg);
    let stats = |t: &Topology| -> Vec<(u64, u64, u64)> {
        t.backends
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let (bk_rx, bk_tx) = t.balancer.link_packets(&b.balancer_dev).expect("stats");
                let (dsr_rx, _) = t
                    .client
                    .link_packets(&format!("dsr{}", i + 1))
                    .expect("stats");
                (bk_rx, bk_tx, dsr_rx)
            })
            .collect()
    };
    let before = stats(&topo);
    let addr = at(vip, 8000);
    let replies = ask_many(&topo.client, 60, tcp_ask_at, addr);
    let mut held = topo
        .client
        .run(|| HeldConn::open_at(addr))
        .expect("ns")
        .expect("held");
    for n in 0..20 {
        held.echo(&format!("dsr {n}")).expect("echo over DSR");
    }
    // The client's kernel only accepts the connection's segments from the VIP itself.
    assert_eq!(held.peer_addr().expect("peer"), addr);
    drop(held);
    let after = stats(&topo);
    let counts = count_by_backend(&replies);
    println!("ipv6 dsr: 60 connections {counts:?}");
    assert_eq!(counts.len(), 3, "spread over all backends");
    let mut to_backends = 0;
    let mut direct_replies = 0;
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        let (rx, tx, dsr) = (a.0 - b.0, a.1 - b.1, a.2 - b.2);
        println!(
            "ipv6 dsr: b{}: balancer bk{} rx {rx} tx {tx} packets; client dsr{} rx {dsr} packets",
            i + 1,
            i + 1,
            i + 1
        );
        assert!(
            rx <= 5,
            "b{}: {rx} packets came back through the balancer",
            i + 1
        );
        to_backends += tx;
        direct_replies += dsr;
    }
    // Each short connection is at least SYN, ACK+data, FIN one way and SYN-ACK, data, FIN back.
    assert!(
        to_backends >= 180,
        "balancer forwarded {to_backends} packets to backends"
    );
    assert!(
        direct_replies >= 180,
        "client got {direct_replies} packets directly"
    );
    // No backend resolved the VIP as a neighbour of the balancer's (no NDP answer for it).
    let neigh = topo
        .balancer
        .ip(&["-6", "neigh", "show", &vip.to_string()])
        .expect("neigh");
    assert!(
        !neigh.contains("lladdr"),
        "the VIP was resolved by NDP: {neigh}"
    );
    let status = topo.lb_status().expect("lb status");
    let nat_replies = global(&status, "nat_reply");
    println!(
        "ipv6 dsr: lb status nat_reply = {nat_replies:?}, VIP packets {:?}",
        vip_packets(&status, "dsr6")
    );
    assert_eq!(nat_replies, Some(0), "status: {status}");
}

/// Contract "A flow whose backend slot is no longer active re-hashes; others keep theirs" and
/// S-MT7 (on Network vServices a server is taken out by removing it from the list), over IPv6:
/// after `lb load` of a config without b3, long connections on b1/b2 keep working and new
/// connections never reach b3.
#[test]
fn network_ipv6_backend_removal_keeps_other_connections() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = topology(None);
    topo.tcp_servers(8000).expect("servers");
    let services = backend_services6(&topo, 8000, &[1, 1, 1]);
    let names = all_names(&topo);
    let addr = at(vip6(0x15), 8000);
    let web = |list: &[&str]| vservice("web6", "tcp-l4", vip6(0x15), "port = 8000", "nat", list);
    load(&topo, &(services.clone() + &web(&names)));
    // At least 10 connections and at least one on each backend (bounded: 40).
    let mut conns = topo
        .client
        .run(|| {
            let mut conns = Vec::new();
            while conns.len() < 40 {
                conns.push(HeldConn::open_at(addr).expect("open long connection"));
                let seen =
                    count_by_backend(&conns.iter().map(|c| c.reply.clone()).collect::<Vec<_>>());
                if conns.len() >= 10 && seen.len() == 3 {
                    break;
                }
            }
            conns
        })
        .expect("client namespace");
    let before = count_by_backend(&conns.iter().map(|c| c.reply.clone()).collect::<Vec<_>>());
    println!("ipv6 removal: {} long connections: {before:?}", conns.len());
    assert_eq!(before.len(), 3, "long connections on every backend");
    for (i, c) in conns.iter_mut().enumerate() {
        c.echo(&format!("before {i}")).expect("echo before reload");
    }
    load(&topo, &(services + &web(&["b1", "b2"])));
    let mut kept = 0;
    for (i, c) in conns.iter_mut().enumerate() {
        let result = c.echo(&format!("after {i}"));
        if c.reply.backend == "b3" {
            let shown = result.as_ref().map_err(|e| format!("{e:#}"));
            println!("ipv6 removal: connection {i} on removed b3 after reload: {shown:?}");
        } else {
            result.unwrap_or_else(|e| panic!("connection {i} on {} broke: {e:#}", c.reply.backend));
            kept += 1;
        }
    }
    println!("ipv6 removal: {kept} connections on b1/b2 still work after the reload");
    let replies = ask_many(&topo.client, 60, tcp_ask_at, addr);
    let counts = count_by_backend(&replies);
    println!("ipv6 removal: 60 new connections after reload: {counts:?}");
    assert!(
        !counts.contains_key("b3"),
        "new connection reached removed b3"
    );
    assert_eq!(counts.len(), 2, "both remaining backends used");
}

/// Contract `lb run`, over IPv6: SIGTERM exits without detaching (forwarding continues while
/// the daemon is down) and a restarted daemon adopts the pinned program and maps (counters
/// continue), so an established IPv6 TCP connection keeps working and new ones are still
/// balanced.
#[test]
fn network_ipv6_daemon_restart_keeps_connections_and_balancing() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = topology(None);
    topo.tcp_servers(8000).expect("servers");
    let names = all_names(&topo);
    let cfg = backend_services6(&topo, 8000, &[1, 1, 1])
        + &vservice("web6", "tcp-l4", vip6(0x16), "port = 8000", "nat", &names);
    validated(&cfg);
    let addr = at(vip6(0x16), 8000);
    let mut daemon = topo.lb_run(&cfg).expect("start lb run");
    let ready = wait_until(Duration::from_secs(15), || {
        daemon.is_running()
            && topo
                .client
                .run(|| tcp_ask_at(addr))
                .map(|r| r.is_ok())
                .unwrap_or(false)
    });
    assert!(
        ready,
        "lb run never balanced the IPv6 VIP; log:\n{}",
        log_tail(&daemon)
    );
    let mut held = topo
        .client
        .run(|| HeldConn::open_at(addr))
        .expect("ns")
        .expect("held");
    held.echo("before").expect("echo before restart");
    println!("ipv6 restart: long connection on {}", held.reply.backend);

    daemon.signal(libc::SIGTERM).expect("SIGTERM");
    let status = daemon
        .wait_exit(Duration::from_secs(10))
        .expect("daemon exits");
    println!("ipv6 restart: daemon exited with {status}");
    let packets_down = vip_packets(&topo.lb_status().expect("status"), "web6");
    for n in 0..3 {
        held.echo(&format!("down {n}"))
            .expect("echo while the daemon is down");
    }
    let while_down = ask_many(&topo.client, 10, tcp_ask_at, addr);
    println!(
        "ipv6 restart: while down: {:?}",
        count_by_backend(&while_down)
    );

    let mut daemon = topo.lb_run(&cfg).expect("restart lb run");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        daemon.is_running(),
        "restarted lb run exited; log:\n{}",
        log_tail(&daemon)
    );
    for n in 0..3 {
        held.echo(&format!("restarted {n}"))
            .expect("echo after restart");
    }
    let replies = ask_many(&topo.client, 60, tcp_ask_at, addr);
    let counts = count_by_backend(&replies);
    println!("ipv6 restart: 60 new connections after restart: {counts:?}");
    assert_eq!(counts.len(), 3, "spread over all backends");
    let packets_after = vip_packets(&topo.lb_status().expect("status"), "web6");
    println!(
        "ipv6 restart: VIP packets when down {packets_down:?}, after restart {packets_after:?}"
    );
    let (Some(down), Some(after)) = (packets_down, packets_after) else {
        panic!("lb status --json has no vips[name=web6].counters.packets");
    };
    assert!(
        after > down,
        "counters continued (maps adopted, not recreated)"
    );
    stop_daemon(daemon);
    drop(held);
}

/// A dual-stack service: two Network vServices, `web4` on an IPv4 VIP and `web6` on an IPv6
/// VIP, over the same three backend hosts (one `[::]` server each, answering both families).
/// A vService keeps to one family, so each host has a Backend Service per family (`b1` at its
/// IPv4 address, `b1-v6` at its IPv6 address), each with its own TCP check. `lb run` checks
/// both families (all OK and active), both VIPs answer and spread over all hosts, and
/// `lb status` shows both vServices, the IPv6 ones with their address in normal text form
/// (`fd00:10:99::20`, bracketed with a port in the text view).
#[test]
fn network_dual_stack_vservices_share_backend_hosts() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = topology(None);
    topo.tcp_servers(8000).expect("servers");
    let (v4, v6) = (vip4(20), vip6(0x20));
    let mut cfg = check("tcp", "tcp", "");
    for (i, b) in topo.backends.iter().enumerate() {
        cfg += &checked_service(&b.name, b.addr, 8000, "tcp");
        cfg += &checked_service(&format!("{}-v6", b.name), addr6_of(&topo, i), 8000, "tcp");
    }
    let names4 = all_names(&topo);
    let names6: Vec<String> = names4.iter().map(|n| format!("{n}-v6")).collect();
    let names6: Vec<&str> = names6.iter().map(String::as_str).collect();
    cfg += &vservice("web4", "tcp-l4", v4, "port = 8000", "nat", &names4);
    cfg += &vservice("web6", "tcp-l4", v6, "port = 8000", "nat", &names6);
    let mut daemon = start_daemon(&topo, &cfg);
    wait_all_ok(
        &topo,
        &mut daemon,
        &[("web4", &names4), ("web6", &names6)],
        Duration::from_secs(25),
    );

    let r4 = count_by_backend(&ask_many(&topo.client, 60, tcp_ask_at, at(v4, 8000)));
    let r6 = count_by_backend(&ask_many(&topo.client, 60, tcp_ask_at, at(v6, 8000)));
    println!("dual stack: web4 {v4}: {r4:?}; web6 {v6}: {r6:?}");
    assert_eq!(r4.len(), 3, "IPv4 VIP spread over all hosts");
    assert_eq!(r6.len(), 3, "IPv6 VIP spread over all hosts");

    let json = topo.lb_status().expect("lb status --json");
    let web6 = vip_entry(&json, "web6").expect("web6 in lb status --json");
    let web4 = vip_entry(&json, "web4").expect("web4 in lb status --json");
    assert_eq!(web4["address"], v4.to_string());
    assert_eq!(
        web6["address"],
        v6.to_string(),
        "IPv6 VIP in normal text form"
    );
    for (i, b) in web6["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .enumerate()
    {
        assert_eq!(b["name"], names6[i]);
        assert_eq!(b["address"], addr6_of(&topo, i).to_string());
    }
    let text = topo.lb_status_text().expect("lb status");
    println!("dual stack: lb status:\n{text}");
    for needle in [
        format!("vService web4 {v4}:8000/tcp"),
        format!("vService web6 [{v6}]:8000/tcp"),
    ] {
        assert!(
            text.contains(&needle),
            "lb status shows {needle:?}:\n{text}"
        );
    }
    for (i, name) in names6.iter().enumerate() {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no line for {name} in:\n{text}"));
        assert!(
            line.contains(&format!("[{}]:8000", addr6_of(&topo, i))),
            "{name}'s IPv6 address in normal text form: {line}"
        );
    }
    let servers = &json["health"]["servers"];
    for i in 0..topo.backends.len() {
        assert_eq!(
            servers[addr6_of(&topo, i).to_string()],
            "OK",
            "server state of the IPv6 address: {servers}"
        );
        assert_eq!(
            servers[topo.backends[i].addr.to_string()],
            "OK",
            "{servers}"
        );
    }
    stop_daemon(daemon);
}

// ----- health timing over IPv6 -------------------------------------------------------------

/// One health transition as `lb status --json` lists it (S-HC8).
#[derive(Clone, Debug)]
struct Transition {
    at_unix_ms: u64,
    from: String,
    reason: String,
    check_ms: Option<u64>,
}

/// One `lb status --json` answer and when it arrived.
struct Sample {
    answered: Instant,
    json: Value,
}

impl Sample {
    fn take(topo: &Topology) -> Result<Sample> {
        let json = topo.lb_status()?;
        Ok(Sample {
            answered: Instant::now(),
            json,
        })
    }

    fn backend(&self, vip: &str, backend: &str) -> Option<&Value> {
        vip_entry(&self.json, vip)?["backends"]
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

    /// The latest transition of `name` into `to` at or after `since_unix_ms`.
    fn transition_to(&self, name: &str, to: &str, since_unix_ms: u64) -> Option<Transition> {
        let list = self.json["health"]["services"][name]["transitions"].as_array()?;
        list.iter()
            .filter_map(|t| {
                let at_unix_ms = t["at_unix_ms"].as_u64()?;
                (t["to"].as_str()? == to && at_unix_ms + 50 >= since_unix_ms).then(|| Transition {
                    at_unix_ms,
                    from: t["from"].as_str().unwrap_or_default().to_owned(),
                    reason: t["reason"].as_str().unwrap_or_default().to_owned(),
                    check_ms: t["check_ms"].as_u64(),
                })
            })
            .max_by_key(|t| t.at_unix_ms)
    }
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

/// Samples `lb status --json` every [`POLL`] until `step` returns true (it may also assert
/// what must hold on every sample) or `limit` passes; returns the last sample.
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

/// Waits until every listed backend is OK and active on its VIP.
fn wait_all_ok(topo: &Topology, daemon: &mut Daemon, vips: &[(&str, &[&str])], limit: Duration) {
    let started = Instant::now();
    watch(topo, daemon, limit, "all backends OK and active", |s| {
        vips.iter().all(|(v, list)| {
            list.iter()
                .all(|b| s.health(v, b) == Some("OK") && s.active(v, b) == Some(true))
        })
    });
    println!(
        "all OK and active {:.2} s after start",
        secs(started.elapsed())
    );
}

/// How a backend is taken down in [`health_leave_and_rejoin`].
enum Failure {
    /// Its link goes down: checks get no answer at all.
    Silent,
    /// Its listener closes: checks are refused (RST) at once.
    Refusing,
}

/// The common part of the two IPv6 health timing tests: b3 of an IPv6 tcp-l4 NAT VIP, TCP
/// health check on its IPv6 address, fails as `how` says; the test measures when the engine
/// decides Error, when b3 leaves the maps and the VIP's traffic, then restores it and measures
/// when it is decided OK, re-added, and gets new traffic again. Returns nothing; asserts the
/// S-HC9 and S-RF2 bounds of the IPv4 tests.
fn health_leave_and_rejoin(label: &str, how: Failure, vip_last: u16) {
    require_data_path().expect("data path built");
    let topo = topology(None);
    for b in &topo.backends[..2] {
        topo.servers
            .spawn_tcp_at(&b.ns, &b.name, topo.any_addr(8000))
            .expect("server");
    }
    let b3 = &topo.backends[2];
    let b3_server = topo
        .servers
        .spawn_tcp_stoppable_at(&b3.ns, &b3.name, at(Ipv6Addr::UNSPECIFIED, 8000))
        .expect("b3 server");
    let mut cfg = check("tcp", "tcp", "");
    for (i, b) in topo.backends.iter().enumerate() {
        cfg += &checked_service(&b.name, addr6_of(&topo, i), 8000, "tcp");
    }
    let vip = vip6(vip_last);
    cfg += &vservice(
        "web6",
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
        &[("web6", &["b1", "b2", "b3"])],
        Duration::from_secs(25),
    );
    let before = count_by_backend(&ask_many(&topo.client, 30, tcp_ask_at, addr));
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
    let (t0, t0_ms) = (Instant::now(), unix_ms());
    let (mut t_error, mut t_removed) = (None, None);
    let last = watch(
        &topo,
        &mut daemon,
        Duration::from_secs(25),
        "b3 Error and removed",
        |s| {
            for b in ["b1", "b2"] {
                assert_eq!(s.health("web6", b), Some("OK"), "{b} stays OK");
                assert_eq!(s.active("web6", b), Some(true), "{b} stays active");
            }
            if t_error.is_none() && s.health("web6", "b3") == Some("Error") {
                t_error = Some(s.answered - t0);
            }
            if t_removed.is_none() && s.active("web6", "b3") == Some(false) {
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
        "{label}: b3 ({}) decided Error at +{t_decided:.2} s (from {}, reason {:?}, check {:?} ms); \
         seen Error at +{t_error:.2} s; removed from the maps at +{t_removed:.2} s",
        addr6_of(&topo, 2),
        decided.from,
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
    assert!(
        t_removed >= t_error,
        "removed ({t_removed:.2}) before Error was shown ({t_error:.2})"
    );
    let after = count_by_backend(&ask_many(&topo.client, 60, tcp_ask_at, addr));
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
                .spawn_tcp_stoppable_at(&b3.ns, &b3.name, at(Ipv6Addr::UNSPECIFIED, 8000))
                .expect("restart b3's server"),
        ),
    };
    let (t1, t1_ms) = (Instant::now(), unix_ms());
    let (mut t_ok, mut t_added) = (None, None);
    let last = watch(
        &topo,
        &mut daemon,
        Duration::from_secs(25),
        "b3 OK and active again",
        |s| {
            if t_ok.is_none() && s.health("web6", "b3") == Some("OK") {
                t_ok = Some(s.answered - t1);
            }
            if t_added.is_none() && s.active("web6", "b3") == Some(true) {
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
        t_added >= t_ok,
        "re-added ({t_added:.2}) before OK was shown ({t_ok:.2})"
    );
    let back = count_by_backend(&ask_many(&topo.client, 60, tcp_ask_at, addr));
    println!("{label}: 60 new connections after the re-add: {back:?}");
    assert!(
        back.get("b3").copied().unwrap_or(0) > 0,
        "b3 gets new connections again"
    );
    stop_daemon(daemon);
}

/// S-HC9 (silent server decided within about RF x (P + T) = 4 s), S-HC3 (a check without an
/// answer lasts T), S-RF2 (removal reaches the XDP maps within about 9 s more, re-add within
/// 5 s) and S-HC5 recovery (RS x P), over IPv6: b3 of an IPv6 tcp-l4 NAT VIP, checked by TCP
/// on its IPv6 address, goes silent (link down), leaves new traffic, comes back and gets new
/// traffic again.
#[test]
fn s_rf2_ipv6_silent_backend_leaves_and_rejoins_network_vservice() {
    let _guard = serial();
    health_leave_and_rejoin("ipv6 silent", Failure::Silent, 0x40);
}

/// S-HC9 (a closed port is decided within about RF x P = 2 s), S-HC3 (a refused check ends at
/// once) and S-RF2, over IPv6: b3's server closes its `[::]` listener, so its kernel refuses
/// the IPv6 checks with RST; b3 leaves the IPv6 VIP's traffic, its server starts again and b3
/// rejoins.
#[test]
fn s_hc9_ipv6_refused_port_decided_within_rf_times_p() {
    let _guard = serial();
    health_leave_and_rejoin("ipv6 refused", Failure::Refusing, 0x41);
}
