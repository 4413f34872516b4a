//! End-to-end tests of Network vServices (XDP) in network namespaces.
//!
//! Needs root, the `lb` binary (`cargo build -p lb-userspace`) and the XDP object
//! (`cargo xtask build`). Run: `cargo test -p lb-tests --test e2e_network -- --nocapture`.
//! The tests share global resources (bpffs, the namespace list, CPU), so they run one at a
//! time through the `SERIAL` mutex: plain `cargo test` works without `--test-threads=1`.
//! The scenarios are shared with the IPv6 tests (`e2e_ipv6`): each test here runs its
//! scenario of `lb_tests::netns::scenarios` with [`Family::V4`].

use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};

use lb_tests::netns::scenarios::{data_path, lifecycle};
use lb_tests::netns::{Family, backend_addr, vip4};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    // A failed (panicked) test poisons the lock; the next test still runs.
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Harness self-test without any XDP program: the client reaches every backend's own address
/// through the balancer's kernel forwarding, with TCP (short and held) and UDP.
#[test]
fn harness_routes_without_xdp() {
    let _guard = serial();
    data_path::harness_routes_without_xdp(Family::V4);
}

/// Harness self-test of the DSR wiring without XDP: a connection to a backend's own address
/// goes through the balancer, and the backend's answer comes straight back over the direct
/// link (asymmetric path accepted: rp_filter off), so the balancer receives nothing from it.
#[test]
fn harness_dsr_return_path_without_xdp() {
    let _guard = serial();
    let topo = Family::V4.topology(Some(vip4(250).into()));
    topo.tcp_servers(8000).expect("tcp servers");
    for i in 0..topo.backends.len() {
        let addr = SocketAddr::new(backend_addr(i + 1).into(), 8000);
        data_path::assert_dsr_return_path(&topo, i, addr, "harness dsr");
    }
}

/// DESIGN "Network vServices" (weighted Maglev) and the data path contract: 600 new TCP
/// connections to a tcp-l4 NAT VIP spread by weight 1:1:1, then 2:1:1 after `lb load` of the
/// changed weights; each share within 10 points of its weight's share.
#[test]
fn network_tcp_l4_nat_spread_follows_weights() {
    let _guard = serial();
    data_path::tcp_l4_nat_spread_follows_weights(Family::V4);
}

/// Data path contract, "NAT reply path": six NAT VIPs on the same three
/// servers, a port each, each answered from its own port, with one entry per flow.
#[test]
fn network_tcp_l4_nat_port_per_vip_answered_from_each_port() {
    let _guard = serial();
    data_path::tcp_l4_nat_port_per_vip_answered_from_each_port(Family::V4);
}

/// DESIGN "Network vServices" (NAT replies reversed from the connection table) and the data
/// path contract, "NAT reply path": one client address and port in two connections
/// at once, to two NAT VIPs (one a Port Range onto one server port): every connection is
/// answered by its own VIP's servers and keeps echoing.
#[test]
fn network_tcp_l4_nat_client_port_in_two_flows() {
    let _guard = serial();
    data_path::tcp_l4_nat_client_port_in_two_flows(Family::V4);
}

/// DESIGN "Network vServices", data path contract, "NAT reply path": a client port used
/// again for a connection to another NAT VIP on the same server and port is answered from
/// that VIP, not from the VIP of the port's older, closed connection.
#[test]
fn network_tcp_l4_nat_client_port_reused_for_the_same_server() {
    let _guard = serial();
    data_path::tcp_l4_nat_client_port_reused_for_the_same_server(Family::V4);
}

/// Data path contract, "Flood guard": with the guard at 1 new flow per second, 300 TCP
/// connections through a NAT VIP all succeed although nearly none is recorded.
#[test]
fn network_flood_guard_unrecorded_nat_flows_still_connect() {
    let _guard = serial();
    data_path::tcp_l4_nat_unrecorded_flows_still_connect(Family::V4);
}

/// Data path contract, UDP-L4: 300 requests from different source ports through a udp-l4
/// NAT VIP are all answered (replies reversed to the VIP) and spread over all 3 backends.
#[test]
fn network_udp_l4_nat_requests_answered_and_spread() {
    let _guard = serial();
    data_path::udp_l4_nat_requests_answered_and_spread(Family::V4);
}

/// Data path contract, Port Range (TCP-L4 with port_range, backend port 0): connections to
/// several ports of the range reach backends on that same port and are spread; a port
/// outside the range is not balanced (the connection fails although backends listen there).
#[test]
fn network_port_range_keeps_port_and_ignores_outside_ports() {
    let _guard = serial();
    data_path::port_range_keeps_port_and_ignores_outside_ports(Family::V4);
}

/// Data path contract, ANY-L3 (backend port 0): TCP to one port and UDP to another are both
/// balanced to the port asked for, and ICMP echo to the VIP is answered through NAT.
#[test]
fn network_any_l3_balances_tcp_udp_and_icmp() {
    let _guard = serial();
    data_path::any_l3_balances_tcp_udp_and_icmp(Family::V4);
}

/// DESIGN "Forwarding modes: dsr" and the contract's DSR rules: the balancer only rewrites
/// MACs; backends (VIP on lo, ARP suppressed) answer the client directly, so the balancer's
/// backend-side interfaces receive (almost) nothing and no NAT reply is counted.
#[test]
fn network_dsr_replies_bypass_the_balancer() {
    let _guard = serial();
    data_path::dsr_replies_bypass_the_balancer(Family::V4);
}

/// Contract "A flow whose backend slot is no longer active re-hashes; others keep theirs" and
/// S-MT7 (on Network vServices a server is taken out by removing it from the list): after
/// `lb load` of a config without b3, long connections on b1/b2 keep working and new
/// connections never reach b3.
#[test]
fn network_backend_removal_keeps_other_connections() {
    let _guard = serial();
    lifecycle::backend_removal_keeps_other_connections(Family::V4);
}

/// Contract `lb run`: SIGTERM exits without detaching (forwarding continues while the daemon
/// is down) and a restarted daemon adopts the pinned program and maps (counters continue),
/// so an established TCP connection keeps working and new ones are still balanced.
#[test]
fn network_daemon_restart_keeps_connections_and_balancing() {
    let _guard = serial();
    lifecycle::daemon_restart_keeps_connections_and_balancing(Family::V4);
}

/// S-MT3, S-MT7: with `apply_admin_state`, a Maintenance call answers once the XDP maps
/// hold it (`lb status` read right after shows the backend removed, then back).
#[test]
fn network_maintenance_holds_in_the_maps_when_the_api_answers() {
    let _guard = serial();
    lifecycle::maintenance_holds_in_the_maps_when_the_api_answers(Family::V4);
}
