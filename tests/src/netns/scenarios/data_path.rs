//! Data path scenarios: traffic to one VIP after one `lb load` (or, for the harness
//! self-tests, without any XDP program), for either address family.

use std::net::SocketAddr;
use std::time::Instant;

use super::{Family, assert_shares};
use crate::netns::client::{HeldConn, ask_many, count_by_backend, tcp_ask_at, udp_ask_at};
use crate::netns::configs::{all_names, backend_services, load, vservice};
use crate::netns::family::at;
use crate::netns::lbctl::require_data_path;
use crate::netns::status::{
    backend_new_flows, global, globals, pinned_map_dump, pinned_map_entries, vip_packets,
};
use crate::netns::topology::{Topology, VIP6_PREFIX};

/// Harness self-test without any XDP program: the client reaches every backend's own
/// `family` address through the balancer's kernel forwarding, with TCP (short and held) and
/// UDP, from the client's address; over IPv6 the servers' `[::]` sockets still answer IPv4
/// too. The client routes via the balancer and the balancer forwards.
pub fn harness_routes_without_xdp(family: Family) {
    let label = family.label("harness");
    let topo = family.topology(None);
    topo.tcp_servers(8000).expect("tcp servers");
    topo.udp_servers(8001).expect("udp servers");
    for (i, b) in topo.backends.iter().enumerate() {
        let addr = family.backend_addr(&topo, i);
        assert_eq!(addr, family.planned_backend_addr(i + 1));
        let (tcp, udp, mut held, tcp4) = topo
            .client
            .run(|| {
                (
                    tcp_ask_at(at(addr, 8000)),
                    udp_ask_at(at(addr, 8001)),
                    HeldConn::open_at(at(addr, 8000)),
                    (family == Family::V6).then(|| tcp_ask_at(at(b.addr, 8000))),
                )
            })
            .expect("client namespace");
        let tcp = tcp.expect("tcp answer");
        let udp = udp.expect("udp answer");
        assert_eq!((tcp.backend.as_str(), tcp.port), (b.name.as_str(), 8000));
        assert_eq!((udp.backend.as_str(), udp.port), (b.name.as_str(), 8001));
        if let Some(tcp4) = tcp4 {
            let tcp4 = tcp4.expect("tcp answer over IPv4 on the same [::] socket");
            assert_eq!(tcp4.backend, b.name);
        }
        let held = held.as_mut().expect("held connection");
        // The held connection is used from this (root-namespace) thread: sockets keep theirs.
        for n in 0..3 {
            held.echo(&format!("hello {n}")).expect("echo");
        }
        assert_eq!(held.local_addr().expect("local").ip(), family.client_addr());
        println!(
            "{label}: {} reached directly at {addr} (tcp, udp, held){}",
            b.name,
            if family == Family::V6 {
                format!(" and at {} (tcp)", b.addr)
            } else {
                String::new()
            }
        );
    }
    // The routes and forwarding the harness promises.
    let routes = topo
        .client
        .ip(&[family.ip_flag(), "route", "show"])
        .expect("routes");
    println!("{label}: client {} routes:\n{routes}", family.name());
    let gateway = family.balancer_addr();
    assert!(
        routes.contains(&format!("default via {gateway}")),
        "{routes}"
    );
    if family == Family::V6 {
        assert!(routes.contains(&format!("{VIP6_PREFIX} via {gateway}")));
    }
    let fwd = topo
        .balancer
        .exec("sysctl", &["-n", family.forwarding_sysctl()])
        .expect("sysctl");
    assert_eq!(
        fwd.trim(),
        "1",
        "{} forwarding on in the balancer",
        family.name()
    );
    let (rx, tx) = topo.balancer.link_packets("cli").expect("link stats");
    println!("{label}: balancer cli rx {rx} tx {tx} packets");
    assert!(rx > 0 && tx > 0, "traffic went through the balancer");
}

/// The DSR return path of backend `i` without XDP: 5 connections to `addr` (the backend's own
/// address) go through the balancer, and the answers come straight back over the direct link
/// (asymmetric path accepted: rp_filter off), so the balancer receives nothing from it.
pub fn assert_dsr_return_path(topo: &Topology, i: usize, addr: SocketAddr, label: &str) {
    let b = &topo.backends[i];
    let dsr_dev = format!("dsr{}", i + 1);
    let (bk_rx0, _) = topo.balancer.link_packets(&b.balancer_dev).expect("stats");
    let (dsr_rx0, _) = topo.client.link_packets(&dsr_dev).expect("stats");
    let replies = ask_many(&topo.client, 5, tcp_ask_at, addr);
    assert!(replies.iter().all(|r| r.backend == b.name));
    let (bk_rx1, _) = topo.balancer.link_packets(&b.balancer_dev).expect("stats");
    let (dsr_rx1, _) = topo.client.link_packets(&dsr_dev).expect("stats");
    println!(
        "{label}: {}: balancer {} rx +{}, client {dsr_dev} rx +{}",
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

/// 600 new TCP connections to a tcp-l4 NAT VIP spread by weight 1:1:1, then 2:1:1 after
/// `lb load` of the changed weights; each share within 10 points of its weight's share, and
/// the replies were reverse-translated by the program (`nat_reply` > 0).
pub fn tcp_l4_nat_spread_follows_weights(family: Family) {
    require_data_path().expect("data path built");
    let label = family.label("tcp-l4");
    let (vip, name) = (family.vip(10), family.vip_name("web"));
    let topo = family.topology(None);
    topo.tcp_servers(8000).expect("servers");
    let addr = at(vip, 8000);
    let names = all_names(&topo);
    for weights in [[1u32, 1, 1], [2, 1, 1]] {
        let cfg = backend_services(&topo, family, 8000, &weights)
            + &vservice(&name, "tcp-l4", vip, "port = 8000", "nat", &names);
        load(&topo, &cfg);
        let started = Instant::now();
        let replies = ask_many(&topo.client, 600, tcp_ask_at, addr);
        println!(
            "{label} weights {weights:?}: 600 connections in {:?}",
            started.elapsed()
        );
        assert!(replies.iter().all(|r| r.port == 8000));
        let counts = count_by_backend(&replies);
        let pairs: Vec<(&str, u32)> = names.iter().copied().zip(weights).collect();
        assert_shares(&format!("{label} {weights:?}"), &counts, &pairs);
    }
    let status = topo.lb_status().expect("lb status");
    println!(
        "{label}: VIP packets {:?}, new flows per backend {:?}; global {}",
        vip_packets(&status, &name),
        backend_new_flows(&status, &name),
        globals(&status)
    );
    assert!(
        global(&status, "nat_reply").unwrap_or(0) > 0,
        "replies were reverse-translated by the program: {}",
        globals(&status)
    );
}

/// Backend Services `<backend>-<port>` for the topology's three servers on `port`, whose
/// test servers are started: their configuration and names.
fn services_on_port(topo: &Topology, family: Family, port: u16) -> (String, Vec<String>) {
    topo.tcp_servers(port).expect("servers");
    let mut cfg = String::new();
    let mut names = Vec::new();
    for (i, b) in topo.backends.iter().enumerate() {
        let name = format!("{}-{port}", b.name);
        cfg += &format!(
            "[[backend_service]]\nname = \"{name}\"\naddress = \"{}\"\nport = {port}\n\n",
            family.backend_addr(topo, i)
        );
        names.push(name);
    }
    (cfg, names)
}

/// The flows in the pinned connection tables, by `bpftool map dump`: held by client endpoint
/// (`CONNS`), beside them by flow key, and under a reply's key (`CONNS_CLASH`, `dir` 0 and 1).
fn recorded_flows(topo: &Topology) -> (usize, usize, usize) {
    let maps = topo.pin_dir.join("maps");
    let conns = pinned_map_entries(&maps.join("CONNS")).expect("bpftool dump of CONNS");
    let clash = pinned_map_dump(&maps.join("CONNS_CLASH")).expect("bpftool dump of CONNS_CLASH");
    let reply = clash
        .iter()
        .filter(|e| e["formatted"]["key"]["dir"].as_u64() != Some(0))
        .count();
    (conns as usize, clash.len() - reply, reply)
}

/// A server running a service per port, for more NAT VIPs than one backend address and
/// port can name (4): six tcp-l4 NAT VIPs, each over the three backends on a port of its
/// own. 20 connections to each are answered from that VIP's port, and a flow was kept
/// under its reply's key as well only when its client port was in another flow (as many
/// `CONNS_CLASH` entries are marked as a reply's as are not): each reply found its flow
/// by its client endpoint.
pub fn tcp_l4_nat_port_per_vip_answered_from_each_port(family: Family) {
    require_data_path().expect("data path built");
    let label = family.label("port per vip");
    let topo = family.topology(None);
    let mut cfg = String::new();
    let mut vips = Vec::new();
    for v in 0..6u16 {
        let port = 8100 + v;
        let (services, names) = services_on_port(&topo, family, port);
        cfg += &services;
        let vip = family.vip(40 + v as u8);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        cfg += &vservice(
            &family.vip_name(&format!("svc{v}")),
            "tcp-l4",
            vip,
            "port = 80",
            "nat",
            &names,
        );
        vips.push((vip, port));
    }
    load(&topo, &cfg);
    for (vip, port) in vips {
        let replies = ask_many(&topo.client, 20, tcp_ask_at, at(vip, 80));
        assert!(
            replies.iter().all(|r| r.port == port),
            "{label}: every answer to {vip} comes from port {port}"
        );
    }
    let (conns, beside, reverse) = recorded_flows(&topo);
    println!(
        "{label}: 120 connections, {conns} flows recorded by client endpoint, {beside} beside \
         them, {reverse} under a reply's key"
    );
    assert!(
        conns + beside >= 120,
        "{label}: the flows are recorded ({conns} + {beside})"
    );
    assert_eq!(
        reverse, beside,
        "{label}: only the flows beside another flow of their client port are kept under \
         their reply's key"
    );
}

/// One client address and port in two TCP connections at once (`SO_REUSEADDR`), to two NAT
/// VIPs over the same three servers: `one` on port 80 (servers' port 8301), `range` a Port
/// Range 9000-9015 onto the servers' port 8302 (its replies do not tell its port). For ten
/// client ports, one connection to each VIP, `one` first for even ports and `range` first
/// for odd ones. Every connection is answered from its own VIP's port and echoes three
/// rounds. The connection table holds the first connection of each port by its client
/// endpoint, the second beside it by its whole flow key and under its reply's key (10
/// entries each).
pub fn tcp_l4_nat_client_port_in_two_flows(family: Family) {
    require_data_path().expect("data path built");
    let label = family.label("client port in two flows");
    let topo = family.topology(None);
    let (one, range) = (family.vip(50), family.vip(51));
    let mut cfg = String::new();
    let mut lists = Vec::new();
    for port in [8301u16, 8302] {
        let (services, names) = services_on_port(&topo, family, port);
        cfg += &services;
        lists.push(names);
    }
    let names = |i: usize| lists[i].iter().map(String::as_str).collect::<Vec<_>>();
    cfg += &vservice(
        &family.vip_name("one"),
        "tcp-l4",
        one,
        "port = 80",
        "nat",
        &names(0),
    );
    cfg += &vservice(
        &family.vip_name("range"),
        "tcp-l4",
        range,
        "port_range = \"9000-9015\"",
        "nat",
        &names(1),
    );
    load(&topo, &cfg);
    let client = family.client_addr();
    let mut conns = topo
        .client
        .run(|| {
            let mut conns = Vec::new();
            for k in 0..10u16 {
                let local = SocketAddr::new(client, 45100 + k);
                let mut pair = [(at(one, 80), 8301), (at(range, 9000 + k), 8302)];
                if k % 2 == 1 {
                    pair.reverse();
                }
                for (vip, port) in pair {
                    let conn = HeldConn::open_from(local, vip)
                        .unwrap_or_else(|e| panic!("{label}: {local} -> {vip}: {e:#}"));
                    conns.push((vip, port, conn));
                }
            }
            conns
        })
        .expect("client namespace");
    for (vip, port, conn) in &conns {
        assert_eq!(
            conn.reply.port, *port,
            "{label}: the connection to {vip} is answered from port {port}"
        );
    }
    for round in 0..3 {
        for (vip, _, conn) in conns.iter_mut() {
            let local = conn.local_addr().expect("local address");
            conn.echo(&format!("round {round}"))
                .unwrap_or_else(|e| panic!("{label}: echo {local} -> {vip}: {e:#}"));
        }
    }
    let (conns_n, beside, reply) = recorded_flows(&topo);
    println!(
        "{label}: 20 connections echoed 3 rounds; {conns_n} flows by client endpoint, \
         {beside} beside them, {reply} under a reply's key"
    );
    assert_eq!(
        conns_n, 10,
        "{label}: one flow per client port by client endpoint"
    );
    assert_eq!(beside, 10, "{label}: the other flow beside it");
    assert_eq!(
        reply, 10,
        "{label}: the later flows under their reply's key"
    );
}

/// One client address and port used again, after its connection closed, for a connection
/// to another NAT VIP on the same server and port (as a client's kernel does when it picks
/// a port for a new destination): `a` and `b`, port 80 each, over one server's port 8303.
/// For ten client ports, connections to `a`, `b`, `a` one after the other, each opened from
/// that port once the one before has closed: every one is answered and echoes, its replies
/// put back to its own VIP although the older flow of the port to the same server is
/// still recorded.
pub fn tcp_l4_nat_client_port_reused_for_the_same_server(family: Family) {
    require_data_path().expect("data path built");
    let label = family.label("client port reused for the same server");
    let topo = family.topology(None);
    let (a, b) = (family.vip(52), family.vip(53));
    let (mut cfg, names) = services_on_port(&topo, family, 8303);
    for (name, vip) in [("a", a), ("b", b)] {
        cfg += &vservice(
            &family.vip_name(name),
            "tcp-l4",
            vip,
            "port = 80",
            "nat",
            &[names[0].as_str()],
        );
    }
    load(&topo, &cfg);
    let client = family.client_addr();
    let answered = topo
        .client
        .run(|| {
            let mut answered = 0;
            for k in 0..10u16 {
                let local = SocketAddr::new(client, 45200 + k);
                for vip in [a, b, a] {
                    let mut conn = HeldConn::open_from(local, at(vip, 80))
                        .unwrap_or_else(|e| panic!("{label}: {local} -> {vip}: {e:#}"));
                    assert_eq!(
                        conn.reply.port, 8303,
                        "{label}: {vip} answered by its server"
                    );
                    conn.echo("again")
                        .unwrap_or_else(|e| panic!("{label}: echo {local} -> {vip}: {e:#}"));
                    conn.close()
                        .unwrap_or_else(|e| panic!("{label}: closing {local} -> {vip}: {e:#}"));
                    answered += 1;
                }
            }
            answered
        })
        .expect("client namespace");
    println!("{label}: {answered} connections from 10 client ports, each answered and echoed");
}

/// The connection table's flood guard at 1 new flow per second and CPU: nearly every flow
/// of 300 TCP connections through a tcp-l4 NAT VIP goes unrecorded, yet every connection is
/// answered (each packet and each reply finds its backend through Maglev) and they spread
/// over all 3 backends; `lb status` counts the unrecorded flows.
pub fn tcp_l4_nat_unrecorded_flows_still_connect(family: Family) {
    require_data_path().expect("data path built");
    let label = family.label("flood guard");
    let (vip, name) = (family.vip(30), family.vip_name("guarded"));
    let topo = family.topology(None);
    topo.tcp_servers(8000).expect("servers");
    let names = all_names(&topo);
    let cfg = "[xdp]\nflood_guard_rate = 1\n".to_string()
        + &backend_services(&topo, family, 8000, &[1, 1, 1])
        + &vservice(&name, "tcp-l4", vip, "port = 8000", "nat", &names);
    load(&topo, &cfg);
    let replies = ask_many(&topo.client, 300, tcp_ask_at, at(vip, 8000));
    let counts = count_by_backend(&replies);
    let status = topo.lb_status().expect("lb status");
    println!(
        "{label}: 300 connections by backend {counts:?}; global {}",
        globals(&status)
    );
    assert_eq!(
        counts.len(),
        3,
        "{label}: every backend answers: {counts:?}"
    );
    let unrecorded = global(&status, "flood_unrecorded").unwrap_or(0);
    assert!(
        unrecorded >= 250,
        "{label}: the flows went unrecorded: {}",
        globals(&status)
    );
    assert_eq!(status["flood_guard_limit"], 1, "{label}: the limit shows");
}

/// 300 UDP requests from different source ports through a udp-l4 NAT VIP are all answered
/// (connected client sockets: only answers from the VIP itself are delivered, so every
/// answer was translated back) and spread over all 3 backends.
pub fn udp_l4_nat_requests_answered_and_spread(family: Family) {
    require_data_path().expect("data path built");
    let label = family.label("udp-l4");
    let vip = family.vip(11);
    let topo = family.topology(None);
    topo.udp_servers(5300).expect("servers");
    let names = all_names(&topo);
    let cfg = backend_services(&topo, family, 5300, &[1, 1, 1])
        + &vservice(
            &family.vip_name("dns"),
            "udp-l4",
            vip,
            "port = 5300",
            "nat",
            &names,
        );
    load(&topo, &cfg);
    let replies = ask_many(&topo.client, 300, udp_ask_at, at(vip, 5300));
    let counts = count_by_backend(&replies);
    println!("{label}: 300 of 300 answered: {counts:?}");
    assert!(replies.iter().all(|r| r.port == 5300));
    assert_shares(&label, &counts, &[("b1", 1), ("b2", 1), ("b3", 1)]);
}

/// Port Range (TCP-L4 with port_range 7000-7010, backend port 0): connections to several
/// ports of the range reach backends on that same port and are spread; ports outside the
/// range (6999, 7011, 7100) are not balanced although the backends listen there.
pub fn port_range_keeps_port_and_ignores_outside_ports(family: Family) {
    require_data_path().expect("data path built");
    let label = family.label("port range");
    let vip = family.vip(12);
    let topo = family.topology(None);
    let in_range = [7000u16, 7005, 7010];
    let outside = [6999u16, 7011, 7100];
    for p in in_range.iter().chain(&outside) {
        topo.tcp_servers(*p).expect("servers");
    }
    let names = all_names(&topo);
    let cfg = backend_services(&topo, family, 0, &[1, 1, 1])
        + &vservice(
            &family.vip_name("range"),
            "tcp-l4",
            vip,
            "port_range = \"7000-7010\"",
            "nat",
            &names,
        );
    load(&topo, &cfg);
    for p in in_range {
        let replies = ask_many(&topo.client, 30, tcp_ask_at, at(vip, p));
        let counts = count_by_backend(&replies);
        println!("{label}: port {p}: {counts:?}");
        assert!(
            replies.iter().all(|r| r.port == p),
            "backend port differs from {p}"
        );
        assert_eq!(counts.len(), 3, "port {p} spread over all backends");
    }
    for p in outside {
        let result = topo
            .client
            .run(|| tcp_ask_at(at(vip, p)))
            .expect("client namespace");
        let shown = result.as_ref().map_err(|e| format!("{e:#}"));
        println!("{label}: port {p} (outside) -> {shown:?}");
        assert!(
            result.is_err(),
            "port {p} outside the range must not be balanced"
        );
    }
}

/// ANY-L3 (backend port 0): TCP to one port and UDP to another are both balanced to the port
/// asked for, and ICMP / ICMPv6 echo to the VIP is answered through NAT (the echo reply comes
/// back from the VIP).
pub fn any_l3_balances_tcp_udp_and_icmp(family: Family) {
    require_data_path().expect("data path built");
    let label = family.label("any-l3");
    let (vip, name) = (family.vip(13), family.vip_name("any"));
    let topo = family.topology(None);
    topo.tcp_servers(8080).expect("tcp servers");
    topo.udp_servers(5353).expect("udp servers");
    let names = all_names(&topo);
    let cfg = backend_services(&topo, family, 0, &[1, 1, 1])
        + &vservice(&name, "any-l3", vip, "", "nat", &names);
    load(&topo, &cfg);
    let tcp = ask_many(&topo.client, 60, tcp_ask_at, at(vip, 8080));
    let udp = ask_many(&topo.client, 60, udp_ask_at, at(vip, 5353));
    let (tcp_counts, udp_counts) = (count_by_backend(&tcp), count_by_backend(&udp));
    println!("{label}: tcp 8080 {tcp_counts:?}, udp 5353 {udp_counts:?}");
    assert!(tcp.iter().all(|r| r.port == 8080) && udp.iter().all(|r| r.port == 5353));
    assert_eq!(tcp_counts.len(), 3, "tcp spread over all backends");
    assert_eq!(udp_counts.len(), 3, "udp spread over all backends");
    let vip_s = vip.to_string();
    let mut args = family.ping_flags().to_vec();
    args.extend(["-c", "3", "-W", "1", &vip_s]);
    let ping = format!("ping {}", args.join(" "));
    let before = topo.lb_status().expect("status");
    let out = topo.client.exec("ping", &args);
    let after = topo.lb_status().expect("status");
    let out = out.unwrap_or_else(|e| {
        panic!(
            "{ping} (the ANY-L3 VIP): {e:#}\nVIP packets before {:?} after {:?}; global before {} after {}",
            vip_packets(&before, &name),
            vip_packets(&after, &name),
            globals(&before),
            globals(&after)
        )
    });
    let answered = out
        .lines()
        .filter(|l| l.contains(&format!("bytes from {vip}")))
        .count();
    println!("{label}: {ping}: {answered} of 3 echo replies from the VIP");
    assert_eq!(answered, 3, "ping output:\n{out}");
}

/// Per backend: (balancer `bkN` rx, balancer `bkN` tx, client `dsrN` rx) packets.
fn dsr_link_stats(topo: &Topology) -> Vec<(u64, u64, u64)> {
    topo.backends
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let (bk_rx, bk_tx) = topo.balancer.link_packets(&b.balancer_dev).expect("stats");
            let (dsr_rx, _) = topo
                .client
                .link_packets(&format!("dsr{}", i + 1))
                .expect("stats");
            (bk_rx, bk_tx, dsr_rx)
        })
        .collect()
}

/// DSR: the balancer only rewrites MACs; backends (VIP on lo, no ARP / NDP answer for it)
/// answer the client directly from the VIP, so the balancer's backend-side interfaces
/// receive (almost) nothing, the balancer never resolves the VIP as a neighbour, and no NAT
/// reply is counted.
pub fn dsr_replies_bypass_the_balancer(family: Family) {
    require_data_path().expect("data path built");
    let label = family.label("dsr");
    let (vip, name) = (family.vip(14), family.vip_name("dsr"));
    let topo = family.topology(Some(vip));
    topo.tcp_servers(8000).expect("servers");
    let names = all_names(&topo);
    let cfg = backend_services(&topo, family, 8000, &[1, 1, 1])
        + &vservice(&name, "tcp-l4", vip, "port = 8000", "dsr", &names);
    load(&topo, &cfg);
    let before = dsr_link_stats(&topo);
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
    let after = dsr_link_stats(&topo);
    let counts = count_by_backend(&replies);
    println!("{label}: 60 connections {counts:?}");
    assert_eq!(counts.len(), 3, "spread over all backends");
    let mut to_backends = 0;
    let mut direct_replies = 0;
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        let (rx, tx, dsr) = (a.0 - b.0, a.1 - b.1, a.2 - b.2);
        println!(
            "{label}: b{}: balancer bk{} rx {rx} tx {tx} packets; client dsr{} rx {dsr} packets",
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
    // No backend resolved the VIP as a neighbour of the balancer's (no ARP / NDP answer).
    let neigh = topo
        .balancer
        .ip(&[family.ip_flag(), "neigh", "show", &vip.to_string()])
        .expect("neigh");
    assert!(
        !neigh.contains("lladdr"),
        "the VIP was resolved as a neighbour: {neigh}"
    );
    let status = topo.lb_status().expect("lb status");
    let nat_replies = global(&status, "nat_reply");
    println!(
        "{label}: lb status nat_reply = {nat_replies:?}, VIP packets {:?}",
        vip_packets(&status, &name)
    );
    assert_eq!(nat_replies, Some(0), "status: {status}");
}
