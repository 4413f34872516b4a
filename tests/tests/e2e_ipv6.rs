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

use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use lb_tests::netns::configs::{
    all_names, check, checked_service, start_daemon, stop_daemon, vservice,
};
use lb_tests::netns::scenarios::health::{self, Failure};
use lb_tests::netns::scenarios::{ask_counts, data_path, lifecycle};
use lb_tests::netns::status::watch;
use lb_tests::netns::{Family, Topology, at, require_data_path, vip4, vip6};
use serde_json::Value;

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

/// DESIGN "Network vServices" (NAT replies reversed from the connection table) and the data
/// path contract, "NAT reply path", over IPv6: one client address and port in two
/// connections at once, to two NAT VIPs (one a Port Range onto one server port): every
/// connection is answered by its own VIP's servers and keeps echoing.
#[test]
fn network_ipv6_tcp_l4_nat_client_port_in_two_flows() {
    let _guard = serial();
    data_path::tcp_l4_nat_client_port_in_two_flows(Family::V6);
}

/// DESIGN "Network vServices", data path contract, "NAT reply path", over IPv6: a client
/// port used again for a connection to another NAT VIP on the same server and port is
/// answered from that VIP.
#[test]
fn network_ipv6_tcp_l4_nat_client_port_reused_for_the_same_server() {
    let _guard = serial();
    data_path::tcp_l4_nat_client_port_reused_for_the_same_server(Family::V6);
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

/// The entry of the VIP of vService `name` at `address` in `lb status --json` (a dual-stack
/// vService has two entries of one name), once the daemon has written it.
fn find_vip<'a>(json: &'a Value, name: &str, address: IpAddr) -> Option<&'a Value> {
    json["vips"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == name && v["address"] == address.to_string())
}

/// [`find_vip`], which must be there.
fn vip_at<'a>(json: &'a Value, name: &str, address: IpAddr) -> &'a Value {
    find_vip(json, name, address)
        .unwrap_or_else(|| panic!("no VIP {name} at {address} in {json:#}"))
}

/// (name, address, health, active) of every backend of a VIP entry, in list order.
fn backends_of(vip: &Value) -> Vec<(String, String, String, bool)> {
    vip["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .map(|b| {
            (
                b["name"].as_str().unwrap_or_default().to_string(),
                b["address"].as_str().unwrap_or_default().to_string(),
                b["health"].as_str().unwrap_or_default().to_string(),
                b["active"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

/// A dual-stack vService: one name, `web`, with an IPv4 VIP (`address`) and an IPv6 VIP
/// (`address6`), over three Backend Services b1..b3 that each have an IPv4 `address` and an
/// IPv6 `address6` (one `[::]` server per host answers both). The list names each backend
/// once; each VIP forwards to the backends' address of its own family. Each address is
/// checked on its own (S-HC5 per family): when b3 loses its IPv6 address, b3 is Error and
/// leaves the IPv6 VIP (S-RF2) while it stays OK and active on the IPv4 VIP. `lb status`
/// shows both VIPs under the one name, IPv6 addresses in their normal text form.
#[test]
fn network_dual_stack_vservice_shares_backends_by_name() {
    let _guard = serial();
    require_data_path().expect("data path built");
    let topo = Family::V6.topology(None);
    topo.tcp_servers(8000).expect("servers");
    let (v4, v6) = (IpAddr::V4(vip4(20)), IpAddr::V6(vip6(0x20)));
    let mut cfg = check("tcp", "tcp", "period = 1\ntimeout = 1");
    for (i, b) in topo.backends.iter().enumerate() {
        cfg += &checked_service(&b.name, b.addr, 8000, "tcp").replace(
            "port = 8000",
            &format!("address6 = \"{}\"\nport = 8000", addr6_of(&topo, i)),
        );
    }
    let names = all_names(&topo);
    cfg += &vservice("web", "tcp-l4", v4, "port = 8000", "nat", &names)
        .replace("port = 8000", &format!("address6 = \"{v6}\"\nport = 8000"));
    let mut daemon = start_daemon(&topo, &cfg);
    let all_active = |json: &Value| {
        [v4, v6].iter().all(|&vip| {
            find_vip(json, "web", vip).is_some_and(|entry| {
                backends_of(entry)
                    .iter()
                    .all(|(_, _, health, active)| health == "OK" && *active)
            })
        })
    };
    watch(
        &topo,
        &mut daemon,
        Duration::from_secs(25),
        "both VIPs OK",
        |s| all_active(&s.json),
    );

    let r4 = ask_counts(&topo, 60, at(v4, 8000));
    let r6 = ask_counts(&topo, 60, at(v6, 8000));
    println!("dual stack: web {v4}: {r4:?}; web {v6}: {r6:?}");
    assert_eq!(r4.len(), 3, "IPv4 VIP spread over all hosts");
    assert_eq!(r6.len(), 3, "IPv6 VIP spread over all hosts");

    let json = topo.lb_status().expect("lb status --json");
    for (vip, family_addr) in [
        (
            v4,
            Box::new(|i: usize| IpAddr::V4(topo.backends[i].addr)) as Box<dyn Fn(usize) -> IpAddr>,
        ),
        (v6, Box::new(|i: usize| IpAddr::V6(addr6_of(&topo, i)))),
    ] {
        let listed = backends_of(vip_at(&json, "web", vip));
        let expected: Vec<(String, String)> = (0..3)
            .map(|i| (names[i].to_string(), family_addr(i).to_string()))
            .collect();
        let got: Vec<(String, String)> = listed
            .iter()
            .map(|(n, a, _, _)| (n.clone(), a.clone()))
            .collect();
        assert_eq!(got, expected, "backends of {vip}: same names, own family");
    }
    let text = topo.lb_status_text().expect("lb status");
    println!("dual stack: lb status:\n{text}");
    for needle in [
        format!("vService web {v4}:8000/tcp"),
        format!("vService web [{v6}]:8000/tcp"),
        format!("[{}]:8000", addr6_of(&topo, 0)),
    ] {
        assert!(
            text.contains(&needle),
            "lb status shows {needle:?}:\n{text}"
        );
    }
    let servers = &json["health"]["servers"];
    for i in 0..topo.backends.len() {
        for addr in [
            IpAddr::V6(addr6_of(&topo, i)),
            IpAddr::V4(topo.backends[i].addr),
        ] {
            assert_eq!(servers[addr.to_string()], "OK", "server {addr}: {servers}");
        }
    }

    // b3 stops answering over IPv6 only.
    let b3 = &topo.backends[2];
    let b3_v6 = format!("{}/64", addr6_of(&topo, 2));
    b3.ns
        .ip(&["-6", "addr", "del", &b3_v6, "dev", "eth0"])
        .expect("drop b3's IPv6 address");
    let after = watch(
        &topo,
        &mut daemon,
        Duration::from_secs(30),
        "b3 out of the IPv6 VIP only",
        |s| {
            let on = |vip| backends_of(vip_at(&s.json, "web", vip))[2].3;
            !on(v6) && on(v4)
        },
    );
    assert_eq!(
        after.service_state("b3 (IPv6)"),
        Some("Error"),
        "{:#}",
        after.json["health"]
    );
    assert_eq!(
        after.service_state("b3"),
        Some("OK"),
        "{:#}",
        after.json["health"]
    );
    let b3_on_v6 = &backends_of(vip_at(&after.json, "web", v6))[2];
    assert_eq!(
        b3_on_v6.2, "Error",
        "lb status shows b3's IPv6 health on the IPv6 VIP"
    );
    let r4 = ask_counts(&topo, 60, at(v4, 8000));
    let r6 = ask_counts(&topo, 60, at(v6, 8000));
    println!("b3 without IPv6: web {v4}: {r4:?}; web {v6}: {r6:?}");
    assert_eq!(r4.len(), 3, "the IPv4 VIP keeps b3: {r4:?}");
    assert_eq!(
        r6.values().sum::<usize>(),
        60,
        "every IPv6 request answered: {r6:?}"
    );
    assert!(
        !r6.contains_key("b3"),
        "the IPv6 VIP no longer sends to b3: {r6:?}"
    );
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
