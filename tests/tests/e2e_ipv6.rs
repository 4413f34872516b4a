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
//! The scenarios are shared with the IPv4 tests (`e2e_network`, `e2e_health`): each test
//! here runs its scenario of `lb_tests::netns::scenarios` with [`Family::V6`].

use std::net::Ipv6Addr;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use lb_tests::netns::configs::{
    all_names, check, checked_service, start_daemon, stop_daemon, vservice,
};
use lb_tests::netns::scenarios::health::{self, Failure};
use lb_tests::netns::scenarios::{ask_counts, data_path, lifecycle};
use lb_tests::netns::status::{vip_entry, wait_all_ok};
use lb_tests::netns::{Family, Topology, at, require_data_path, vip4, vip6};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    // A failed (panicked) test poisons the lock; the next test still runs.
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn addr6_of(topo: &Topology, i: usize) -> Ipv6Addr {
    topo.backends[i]
        .addr6
        .expect("dual-stack backend has an IPv6 address")
}

// ----- harness self-tests ------------------------------------------------------------------

/// Harness self-test without any XDP program: over IPv6 the client reaches every backend's
/// own IPv6 address through the balancer's kernel forwarding, with TCP (short and held) and
/// UDP, on the servers' `[::]` sockets; the same sockets still answer IPv4.
#[test]
fn harness_ipv6_routes_without_xdp() {
    let _guard = serial();
    data_path::harness_routes_without_xdp(Family::V6);
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
    let topo = Family::V6.topology(Some(vip.into()));
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

        let addr = at(addr6_of(&topo, i), 8000);
        data_path::assert_dsr_return_path(&topo, i, addr, "harness6 dsr");
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
    data_path::tcp_l4_nat_spread_follows_weights(Family::V6);
}

/// Data path contract, UDP-L4 over IPv6: 300 requests from different source ports through an
/// IPv6 udp-l4 NAT VIP are all answered (connected client sockets: only answers from the VIP
/// itself are delivered, so every answer was translated back) and spread over all 3 backends.
#[test]
fn network_ipv6_udp_l4_nat_requests_answered_and_spread() {
    let _guard = serial();
    data_path::udp_l4_nat_requests_answered_and_spread(Family::V6);
}

/// Data path contract, Port Range over IPv6 (TCP-L4 with port_range, backend port 0):
/// connections to several ports of the range reach backends on that same port and are
/// spread; a port outside the range is not balanced (the connection fails although the
/// backends listen there).
#[test]
fn network_ipv6_port_range_keeps_port_and_ignores_outside_ports() {
    let _guard = serial();
    data_path::port_range_keeps_port_and_ignores_outside_ports(Family::V6);
}

/// Data path contract, ANY-L3 over IPv6 (backend port 0): TCP to one port and UDP to another
/// are both balanced to the port asked for, and ICMPv6 echo (`ping -6`) to the VIP is
/// answered through NAT66 (the echo reply comes back from the VIP).
#[test]
fn network_ipv6_any_l3_balances_tcp_udp_and_icmpv6() {
    let _guard = serial();
    data_path::any_l3_balances_tcp_udp_and_icmp(Family::V6);
}

/// DESIGN "Forwarding modes: dsr" and the contract's DSR rules, over IPv6: the balancer only
/// rewrites MACs; backends (the IPv6 VIP on lo as /128, no NDP answer for it on the shared
/// link) answer the client directly from the VIP, so the balancer's backend-side interfaces
/// receive (almost) nothing and no NAT reply is counted.
#[test]
fn network_ipv6_dsr_replies_bypass_the_balancer() {
    let _guard = serial();
    data_path::dsr_replies_bypass_the_balancer(Family::V6);
}

/// Contract "A flow whose backend slot is no longer active re-hashes; others keep theirs" and
/// S-MT7 (on Network vServices a server is taken out by removing it from the list), over IPv6:
/// after `lb load` of a config without b3, long connections on b1/b2 keep working and new
/// connections never reach b3.
#[test]
fn network_ipv6_backend_removal_keeps_other_connections() {
    let _guard = serial();
    lifecycle::backend_removal_keeps_other_connections(Family::V6);
}

/// Contract `lb run`, over IPv6: SIGTERM exits without detaching (forwarding continues while
/// the daemon is down) and a restarted daemon adopts the pinned program and maps (counters
/// continue), so an established IPv6 TCP connection keeps working and new ones are still
/// balanced.
#[test]
fn network_ipv6_daemon_restart_keeps_connections_and_balancing() {
    let _guard = serial();
    lifecycle::daemon_restart_keeps_connections_and_balancing(Family::V6);
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
    let topo = Family::V6.topology(None);
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

    let r4 = ask_counts(&topo, 60, at(v4, 8000));
    let r6 = ask_counts(&topo, 60, at(v6, 8000));
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

/// S-HC9 (silent server decided within about RF x (P + T) = 4 s), S-HC3 (a check without an
/// answer lasts T), S-RF2 (removal reaches the XDP maps within about 9 s more, re-add within
/// 5 s) and S-HC5 recovery (RS x P), over IPv6: b3 of an IPv6 tcp-l4 NAT VIP, checked by TCP
/// on its IPv6 address, goes silent (link down), leaves new traffic, comes back and gets new
/// traffic again.
#[test]
fn s_rf2_ipv6_silent_backend_leaves_and_rejoins_network_vservice() {
    let _guard = serial();
    health::leave_and_rejoin(Family::V6, Failure::Silent, 40);
}

/// S-HC9 (a closed port is decided within about RF x P = 2 s), S-HC3 (a refused check ends at
/// once) and S-RF2, over IPv6: b3's server closes its `[::]` listener, so its kernel refuses
/// the IPv6 checks with RST; b3 leaves the IPv6 VIP's traffic, its server starts again and b3
/// rejoins.
#[test]
fn s_hc9_ipv6_refused_port_decided_within_rf_times_p() {
    let _guard = serial();
    health::leave_and_rejoin(Family::V6, Failure::Refusing, 41);
}
