//! End-to-end tests of Network vServices (XDP) in network namespaces.
//!
//! Needs root, the `lb` binary (`cargo build -p lb-userspace`) and the XDP object
//! (`cargo xtask build`). Run: `cargo test -p lb-tests --test e2e_network -- --nocapture`.
//! The tests share global resources (bpffs, the namespace list, CPU), so they run one at a
//! time through the `SERIAL` mutex: plain `cargo test` works without `--test-threads=1`.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lb_tests::netns::{
    self, HeldConn, Topology, TopologyOptions, ask_many, backend_addr, count_by_backend,
    require_data_path, tcp_ask, udp_ask,
};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    // A failed (panicked) test poisons the lock; the next test still runs.
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn vip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 99, 0, last)
}

/// `[[backend_service]]` entries b1..bN at `port` with the given weights.
fn backend_services(topo: &Topology, port: u16, weights: &[u32]) -> String {
    topo.backends
        .iter()
        .zip(weights)
        .map(|(b, w)| {
            format!(
                "[[backend_service]]\nname = \"{}\"\naddress = \"{}\"\nport = {port}\nweight = {w}\n\n",
                b.name, b.addr
            )
        })
        .collect()
}

/// One `[[vservice]]` entry; `ports` is a TOML line such as `port = 80`, or empty for ANY-L3.
fn vservice(
    name: &str,
    kind: &str,
    vip: Ipv4Addr,
    ports: &str,
    fwd: &str,
    backends: &[&str],
) -> String {
    let list: Vec<String> = backends.iter().map(|b| format!("\"{b}\"")).collect();
    format!(
        "[[vservice]]\nname = \"{name}\"\nkind = \"{kind}\"\naddress = \"{vip}\"\n{ports}\nforwarding = \"{fwd}\"\nbackends = [{}]\n\n",
        list.join(", ")
    )
}

fn all_names(topo: &Topology) -> Vec<&str> {
    topo.backends.iter().map(|b| b.name.as_str()).collect()
}

/// Asserts each backend's share is within 10 percentage points of its weight's share.
/// (Percentage points, not a relative 10 %: with 600 flows hashed at random the standard
/// deviation of a 1/3 share is 1.9 points, so relative 10 % of 1/3 would fail by chance.)
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

/// Validates `cfg` with the library's parser (a clear error early), then `lb load`s it.
fn load(topo: &Topology, cfg: &str) {
    if let Err(e) = lb::config::parse(cfg, "e2e test config") {
        panic!("test config invalid: {e}\n{cfg}");
    }
    topo.lb_load(cfg).expect("lb load");
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

/// The `packets` counter of the VIP named `name` in `lb status --json`.
fn vip_packets(status: &serde_json::Value, name: &str) -> Option<u64> {
    status["vips"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == name)?["counters"]["packets"]
        .as_u64()
}

/// Harness self-test without any XDP program: the client reaches every backend's own address
/// through the balancer's kernel forwarding, with TCP (short and held) and UDP.
#[test]
fn harness_routes_without_xdp() {
    let _guard = serial();
    let topo = Topology::new(&TopologyOptions::default()).expect("topology");
    topo.tcp_servers(8000).expect("tcp servers");
    topo.udp_servers(8001).expect("udp servers");
    for (i, b) in topo.backends.iter().enumerate() {
        let addr = backend_addr(i + 1);
        let (tcp, udp, mut held) = topo
            .client
            .run(|| {
                (
                    tcp_ask(SocketAddrV4::new(addr, 8000)),
                    udp_ask(SocketAddrV4::new(addr, 8001)),
                    HeldConn::open(SocketAddrV4::new(addr, 8000)),
                )
            })
            .expect("client namespace");
        let tcp = tcp.expect("tcp answer");
        let udp = udp.expect("udp answer");
        assert_eq!((tcp.backend.as_str(), tcp.port), (b.name.as_str(), 8000));
        assert_eq!((udp.backend.as_str(), udp.port), (b.name.as_str(), 8001));
        let held = held.as_mut().expect("held connection");
        // The held connection is used from this (root-namespace) thread: sockets keep theirs.
        for n in 0..3 {
            held.echo(&format!("hello {n}")).expect("echo");
        }
        println!(
            "harness: {} reached directly at {addr} (tcp, udp, held)",
            b.name
        );
    }
    let (rx, tx) = topo.balancer.link_packets("cli").expect("link stats");
    println!("harness: balancer cli rx {rx} tx {tx} packets");
    assert!(rx > 0 && tx > 0, "traffic went through the balancer");
}

/// Harness self-test of the DSR wiring without XDP: a connection to a backend's own address
/// goes through the balancer, and the backend's answer comes straight back over the direct
/// link (asymmetric path accepted: rp_filter off), so the balancer receives nothing from it.
#[test]
fn harness_dsr_return_path_without_xdp() {
    let _guard = serial();
    let opts = TopologyOptions {
        backends: 3,
        dsr_vip: Some(vip(250)),
    };
    let topo = Topology::new(&opts).expect("topology");
    topo.tcp_servers(8000).expect("tcp servers");
    for (i, b) in topo.backends.iter().enumerate() {
        let dsr_dev = format!("dsr{}", i + 1);
        let (bk_rx0, _) = topo.balancer.link_packets(&b.balancer_dev).expect("stats");
        let (dsr_rx0, _) = topo.client.link_packets(&dsr_dev).expect("stats");
        let addr = SocketAddrV4::new(backend_addr(i + 1), 8000);
        let replies = ask_many(&topo.client, 5, tcp_ask, addr);
        assert!(replies.iter().all(|r| r.backend == b.name));
        let (bk_rx1, _) = topo.balancer.link_packets(&b.balancer_dev).expect("stats");
        let (dsr_rx1, _) = topo.client.link_packets(&dsr_dev).expect("stats");
        println!(
            "harness dsr: {}: balancer {} rx +{}, client {dsr_dev} rx +{}",
            b.name,
            b.balancer_dev,
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

/// DESIGN "Network vServices" (weighted Maglev) and the data path contract: 600 new TCP
/// connections to a tcp-l4 NAT VIP spread by weight 1:1:1, then 2:1:1 after `lb load` of the
/// changed weights; each share within 10 points of its weight's share.
#[test]
fn network_tcp_l4_nat_spread_follows_weights() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = Topology::new(&TopologyOptions::default()).expect("topology");
    topo.tcp_servers(8000).expect("servers");
    let addr = SocketAddrV4::new(vip(10), 8000);
    let names = all_names(&topo);
    for weights in [[1u32, 1, 1], [2, 1, 1]] {
        let cfg = backend_services(&topo, 8000, &weights)
            + &vservice("web", "tcp-l4", vip(10), "port = 8000", "nat", &names);
        load(&topo, &cfg);
        let started = Instant::now();
        let replies = ask_many(&topo.client, 600, tcp_ask, addr);
        println!(
            "tcp-l4 weights {weights:?}: 600 connections in {:?}",
            started.elapsed()
        );
        assert!(replies.iter().all(|r| r.port == 8000));
        let counts = count_by_backend(&replies);
        let pairs: Vec<(&str, u32)> = names.iter().copied().zip(weights).collect();
        assert_shares(&format!("tcp-l4 {weights:?}"), &counts, &pairs);
    }
    let status = topo.lb_status().expect("lb status");
    println!(
        "tcp-l4: VIP packets counted: {:?}",
        vip_packets(&status, "web")
    );
}

/// Data path contract, UDP-L4: 300 requests from different source ports through a udp-l4
/// NAT VIP are all answered (replies reversed to the VIP) and spread over all 3 backends.
#[test]
fn network_udp_l4_nat_requests_answered_and_spread() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = Topology::new(&TopologyOptions::default()).expect("topology");
    topo.udp_servers(5300).expect("servers");
    let names = all_names(&topo);
    let cfg = backend_services(&topo, 5300, &[1, 1, 1])
        + &vservice("dns", "udp-l4", vip(11), "port = 5300", "nat", &names);
    load(&topo, &cfg);
    let replies = ask_many(&topo.client, 300, udp_ask, SocketAddrV4::new(vip(11), 5300));
    let counts = count_by_backend(&replies);
    println!("udp-l4: 300 of 300 answered: {counts:?}");
    assert!(replies.iter().all(|r| r.port == 5300));
    assert_shares("udp-l4", &counts, &[("b1", 1), ("b2", 1), ("b3", 1)]);
}

/// Data path contract, Port Range (TCP-L4 with port_range, backend port 0): connections to
/// several ports of the range reach backends on that same port and are spread; a port
/// outside the range is not balanced (the connection fails although backends listen there).
#[test]
fn network_port_range_keeps_port_and_ignores_outside_ports() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = Topology::new(&TopologyOptions::default()).expect("topology");
    let in_range = [7000u16, 7005, 7010];
    for p in in_range.iter().copied().chain([7100]) {
        topo.tcp_servers(p).expect("servers");
    }
    let names = all_names(&topo);
    let cfg = backend_services(&topo, 0, &[1, 1, 1])
        + &vservice(
            "range",
            "tcp-l4",
            vip(12),
            "port_range = \"7000-7010\"",
            "nat",
            &names,
        );
    load(&topo, &cfg);
    for p in in_range {
        let replies = ask_many(&topo.client, 30, tcp_ask, SocketAddrV4::new(vip(12), p));
        let counts = count_by_backend(&replies);
        println!("port range: port {p}: {counts:?}");
        assert!(
            replies.iter().all(|r| r.port == p),
            "backend port differs from {p}"
        );
        assert_eq!(counts.len(), 3, "port {p} spread over all backends");
    }
    let outside = topo
        .client
        .run(|| tcp_ask(SocketAddrV4::new(vip(12), 7100)))
        .expect("client namespace");
    let shown = outside.as_ref().map_err(|e| format!("{e:#}"));
    println!("port range: port 7100 (outside) -> {shown:?}");
    assert!(
        outside.is_err(),
        "port 7100 outside the range must not be balanced"
    );
}

/// Data path contract, ANY-L3 (backend port 0): TCP to one port and UDP to another are both
/// balanced to the port asked for, and ICMP echo to the VIP is answered through NAT.
#[test]
fn network_any_l3_balances_tcp_udp_and_icmp() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = Topology::new(&TopologyOptions::default()).expect("topology");
    topo.tcp_servers(8080).expect("tcp servers");
    topo.udp_servers(5353).expect("udp servers");
    let names = all_names(&topo);
    let cfg = backend_services(&topo, 0, &[1, 1, 1])
        + &vservice("any", "any-l3", vip(13), "", "nat", &names);
    load(&topo, &cfg);
    let tcp = ask_many(&topo.client, 60, tcp_ask, SocketAddrV4::new(vip(13), 8080));
    let udp = ask_many(&topo.client, 60, udp_ask, SocketAddrV4::new(vip(13), 5353));
    let (tcp_counts, udp_counts) = (count_by_backend(&tcp), count_by_backend(&udp));
    println!("any-l3: tcp 8080 {tcp_counts:?}, udp 5353 {udp_counts:?}");
    assert!(tcp.iter().all(|r| r.port == 8080) && udp.iter().all(|r| r.port == 5353));
    assert_eq!(tcp_counts.len(), 3, "tcp spread over all backends");
    assert_eq!(udp_counts.len(), 3, "udp spread over all backends");
    let out = topo
        .client
        .exec("ping", &["-c", "3", "-W", "1", &vip(13).to_string()])
        .expect("ping the ANY-L3 VIP");
    let answered = out
        .lines()
        .filter(|l| l.contains(&format!("bytes from {}", vip(13))))
        .count();
    println!("any-l3: ping: {answered} of 3 echo replies from the VIP");
    assert_eq!(answered, 3, "ping output:\n{out}");
}

/// DESIGN "Forwarding modes: dsr" and the contract's DSR rules: the balancer only rewrites
/// MACs; backends (VIP on lo, ARP suppressed) answer the client directly, so the balancer's
/// backend-side interfaces receive (almost) nothing and no NAT reply is counted.
#[test]
fn network_dsr_replies_bypass_the_balancer() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let opts = TopologyOptions {
        backends: 3,
        dsr_vip: Some(vip(14)),
    };
    let topo = Topology::new(&opts).expect("topology");
    topo.tcp_servers(8000).expect("servers");
    let names = all_names(&topo);
    let cfg = backend_services(&topo, 8000, &[1, 1, 1])
        + &vservice("dsr", "tcp-l4", vip(14), "port = 8000", "dsr", &names);
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
    let addr = SocketAddrV4::new(vip(14), 8000);
    let replies = ask_many(&topo.client, 60, tcp_ask, addr);
    let mut held = topo
        .client
        .run(|| HeldConn::open(addr))
        .expect("ns")
        .expect("held");
    for n in 0..20 {
        held.echo(&format!("dsr {n}")).expect("echo over DSR");
    }
    drop(held);
    let after = stats(&topo);
    let counts = count_by_backend(&replies);
    println!("dsr: 60 connections {counts:?}");
    assert_eq!(counts.len(), 3, "spread over all backends");
    let mut to_backends = 0;
    let mut direct_replies = 0;
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        let (rx, tx, dsr) = (a.0 - b.0, a.1 - b.1, a.2 - b.2);
        println!(
            "dsr: b{}: balancer bk{} rx {rx} tx {tx} packets; client dsr{} rx {dsr} packets",
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
    let status = topo.lb_status().expect("lb status");
    let nat_replies = netns::find_counter(&status, "nat_reply");
    println!("dsr: lb status nat_reply = {nat_replies:?}");
    assert_eq!(nat_replies, Some(0), "status: {status}");
}

/// Contract "A flow whose backend slot is no longer active re-hashes; others keep theirs" and
/// S-MT7 (on Network vServices a server is taken out by removing it from the list): after
/// `lb load` of a config without b3, long connections on b1/b2 keep working and new
/// connections never reach b3.
#[test]
fn network_backend_removal_keeps_other_connections() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = Topology::new(&TopologyOptions::default()).expect("topology");
    topo.tcp_servers(8000).expect("servers");
    let services = backend_services(&topo, 8000, &[1, 1, 1]);
    let names = all_names(&topo);
    let addr = SocketAddrV4::new(vip(15), 8000);
    let web = |list: &[&str]| vservice("web", "tcp-l4", vip(15), "port = 8000", "nat", list);
    load(&topo, &(services.clone() + &web(&names)));
    // At least 10 connections and at least one on each backend (bounded: 40).
    let mut conns = topo
        .client
        .run(|| {
            let mut conns = Vec::new();
            while conns.len() < 40 {
                conns.push(HeldConn::open(addr).expect("open long connection"));
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
    println!("removal: {} long connections: {before:?}", conns.len());
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
            println!("removal: connection {i} on removed b3 after reload: {shown:?}");
        } else {
            result.unwrap_or_else(|e| panic!("connection {i} on {} broke: {e:#}", c.reply.backend));
            kept += 1;
        }
    }
    println!("removal: {kept} connections on b1/b2 still work after the reload");
    let replies = ask_many(&topo.client, 60, tcp_ask, addr);
    let counts = count_by_backend(&replies);
    println!("removal: 60 new connections after reload: {counts:?}");
    assert!(
        !counts.contains_key("b3"),
        "new connection reached removed b3"
    );
    assert_eq!(counts.len(), 2, "both remaining backends used");
}

/// Contract `lb run`: SIGTERM exits without detaching (forwarding continues while the daemon
/// is down) and a restarted daemon adopts the pinned program and maps (counters continue),
/// so an established TCP connection keeps working and new ones are still balanced.
#[test]
fn network_daemon_restart_keeps_connections_and_balancing() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = Topology::new(&TopologyOptions::default()).expect("topology");
    topo.tcp_servers(8000).expect("servers");
    let names = all_names(&topo);
    let cfg = backend_services(&topo, 8000, &[1, 1, 1])
        + &vservice("web", "tcp-l4", vip(16), "port = 8000", "nat", &names);
    let addr = SocketAddrV4::new(vip(16), 8000);
    let mut daemon = topo.lb_run(&cfg).expect("start lb run");
    let ready = wait_until(Duration::from_secs(15), || {
        daemon.is_running()
            && topo
                .client
                .run(|| tcp_ask(addr))
                .map(|r| r.is_ok())
                .unwrap_or(false)
    });
    assert!(
        ready,
        "lb run never balanced the VIP; log:\n{}",
        daemon.log()
    );
    let mut held = topo
        .client
        .run(|| HeldConn::open(addr))
        .expect("ns")
        .expect("held");
    held.echo("before").expect("echo before restart");
    println!("restart: long connection on {}", held.reply.backend);

    daemon.signal(libc::SIGTERM).expect("SIGTERM");
    let status = daemon
        .wait_exit(Duration::from_secs(10))
        .expect("daemon exits");
    println!("restart: daemon exited with {status}");
    let packets_down = vip_packets(&topo.lb_status().expect("status"), "web");
    for n in 0..3 {
        held.echo(&format!("down {n}"))
            .expect("echo while the daemon is down");
    }
    let while_down = ask_many(&topo.client, 10, tcp_ask, addr);
    println!("restart: while down: {:?}", count_by_backend(&while_down));

    let mut daemon = topo.lb_run(&cfg).expect("restart lb run");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        daemon.is_running(),
        "restarted lb run exited; log:\n{}",
        daemon.log()
    );
    for n in 0..3 {
        held.echo(&format!("restarted {n}"))
            .expect("echo after restart");
    }
    let replies = ask_many(&topo.client, 60, tcp_ask, addr);
    let counts = count_by_backend(&replies);
    println!("restart: 60 new connections after restart: {counts:?}");
    assert_eq!(counts.len(), 3, "spread over all backends");
    let packets_after = vip_packets(&topo.lb_status().expect("status"), "web");
    println!("restart: VIP packets when down {packets_down:?}, after restart {packets_after:?}");
    let (Some(down), Some(after)) = (packets_down, packets_after) else {
        panic!("lb status --json has no vips[name=web].counters.packets");
    };
    assert!(
        after > down,
        "counters continued (maps adopted, not recreated)"
    );
    daemon.signal(libc::SIGTERM).expect("SIGTERM");
    daemon
        .wait_exit(Duration::from_secs(10))
        .expect("daemon exits");
    drop(held);
}
