//! Tunnel forwarding end to end (`forwarding = "ipip"`, S-TN1, S-TN2, S-TN4), in a routed lab of
//! network namespaces this test builds and deletes ([`TunnelLab`]): a client, a router, a
//! balancer with one interface, and two backends on subnets of their own behind the router,
//! each running the agent (`lb decap`) and holding the VIPs on `lo`.
//!
//! - S-TN1: TCP and UDP to dual-stack VIPs, over IPv4 (IPIP) and IPv6 (IP6IP6), and TCP
//!   through GUE over both, reach both backends; the answers go from the backends through the router straight to the client,
//!   never through the balancer (interface packet counters); the balancer counts
//!   `tunnelled`, the agents `decapsulated` and drop nothing.
//! - S-TN2: with 1,500-byte links everywhere, a client's full-size packet does not fit once
//!   encapsulated. The client is told the usable MTU from the VIP (1,480 for IPv4, 1,460 for
//!   IPv6): `ping` with DF reports it, and the client's kernel keeps it as the path MTU, for
//!   an IPv4 datagram without DF too; a 200 KB exchange over TCP completes because path MTU
//!   discovery lowers the segment size; `too_big` counts.
//!
//! - S-TN4: the TCP VIP's servers are health-checked through the tunnel: a backend whose
//!   agent is detached goes to Error within its profile's failure time while its own
//!   address still answers, its traffic moves to the other backend, and it comes back when
//!   the agent does.
//!
//! Needs root, the `lb` binary (`cargo build -p lb-userspace`) and the XDP objects `lb-xdp`
//! and `lb-decap` (`cargo xtask build`; `LB_XDP_OBJECT` and `LB_DECAP_OBJECT` name them as
//! `cargo xtask test` does). Run: `cargo test -p lb-tests --test e2e_tunnel -- --nocapture`.
//! The tests run one at a time through the `SERIAL` mutex (they share bpffs and the CPU).

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lb_tests::netns::status::{MARGIN, global};
use lb_tests::netns::tunnel_lab::{
    BALANCER_DEV, CHECK_FAILURES, CHECK_PERIOD, CHECK_SUCCESSES, CHECK_TIMEOUT, GUE_VIP, PING_VIP,
    ROUTER_CLIENT_DEV, TCP_PORT, TCP_VIP, TunnelLab, UDP_PORT, UDP_VIP, checked_name, exec_any,
    named_mtu,
};
use lb_tests::netns::{
    Family, HeldConn, Reply, ask_many, at, count_by_backend, require_data_path, tcp_ask_at,
    udp_ask_at,
};
use serde_json::Value;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    // A failed (panicked) test poisons the lock; the next test still runs.
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Requests per protocol and family.
const ASKS: usize = 40;
/// Packets a link may carry besides the test's traffic in one phase (ARP, neighbour
/// discovery).
const SLACK: u64 = 12;
/// The agent's counters of packets it dropped.
const AGENT_DROPS: [&str; 5] = [
    "bad_outer",
    "fragment",
    "foreign_source",
    "bad_inner",
    "unknown_vip",
];

fn lab() -> TunnelLab {
    require_data_path().expect("data path built");
    TunnelLab::start().expect("tunnel lab")
}

/// Packet counters of the links that tell which way packets went, the balancer's
/// `tunnelled` and each agent's counters.
struct Snapshot {
    /// The client's `eth0`: (rx, tx).
    client: (u64, u64),
    /// The balancer's only interface: (rx, tx).
    balancer: (u64, u64),
    /// The router's interface towards the client: (rx, tx).
    router_client: (u64, u64),
    /// The router's interfaces towards the backends, summed: (rx, tx).
    router_backends: (u64, u64),
    tunnelled: u64,
    agents: Vec<Value>,
}

impl Snapshot {
    fn take(lab: &TunnelLab) -> Snapshot {
        let mut router_backends = (0, 0);
        for b in &lab.backends {
            let (rx, tx) = lab.router.link_packets(&b.router_dev).expect("stats");
            router_backends = (router_backends.0 + rx, router_backends.1 + tx);
        }
        let status = lab.lb_status().expect("lb status");
        Snapshot {
            client: lab.client.link_packets("eth0").expect("stats"),
            balancer: lab.balancer.link_packets(BALANCER_DEV).expect("stats"),
            router_client: lab.router.link_packets(ROUTER_CLIENT_DEV).expect("stats"),
            router_backends,
            tunnelled: global(&status, "tunnelled").expect("tunnelled in lb status"),
            agents: lab
                .backends
                .iter()
                .map(|b| lab.agent_counters(b).expect("lb decap --status"))
                .collect(),
        }
    }
}

fn delta(after: (u64, u64), before: (u64, u64)) -> (u64, u64) {
    (after.0 - before.0, after.1 - before.1)
}

fn counter(counters: &Value, name: &str) -> u64 {
    counters[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name} in {counters}"))
}

/// S-TN1: TCP and UDP through tunnelled VIPs, over IPv4 and IPv6, reach both backends, and
/// the answers come back to the client without passing through the balancer.
#[test]
fn s_tn1_tunnelled_requests_reach_every_backend_and_answers_bypass_the_balancer() {
    let _guard = serial();
    let lab = lab();
    let started = Instant::now();
    let before = Snapshot::take(&lab);
    type Ask = fn(SocketAddr) -> anyhow::Result<Reply>;
    let mut requests = 0;
    for family in [Family::V4, Family::V6] {
        let kinds: [(&str, Ask, SocketAddr); 3] = [
            ("tcp", tcp_ask_at, at(TCP_VIP.addr(family), TCP_PORT)),
            ("udp", udp_ask_at, at(UDP_VIP.addr(family), UDP_PORT)),
            (
                "tcp over gue",
                tcp_ask_at,
                at(GUE_VIP.addr(family), TCP_PORT),
            ),
        ];
        for (proto, ask, addr) in kinds {
            let replies = ask_many(&lab.client, ASKS, ask, addr);
            let counts = count_by_backend(&replies);
            println!("{} {proto} {addr}: {counts:?}", family.name());
            assert_eq!(
                counts.len(),
                lab.backends.len(),
                "{} {proto}: every backend serves some of {ASKS} requests: {counts:?}",
                family.name()
            );
            requests += ASKS as u64;
        }
    }
    let after = Snapshot::take(&lab);
    let (client_rx, client_tx) = delta(after.client, before.client);
    let (lb_rx, lb_tx) = delta(after.balancer, before.balancer);
    let (_, to_client) = delta(after.router_client, before.router_client);
    let (from_backends, to_backends) = delta(after.router_backends, before.router_backends);
    let tunnelled = after.tunnelled - before.tunnelled;
    println!(
        "{requests} requests in {:?}: client sent {client_tx} and received {client_rx} \
         packets; balancer rx {lb_rx} tx {lb_tx}, tunnelled +{tunnelled}; router: from the \
         backends {from_backends}, to them {to_backends}, to the client {to_client}",
        started.elapsed()
    );
    // Every packet the client sent went through the balancer, encapsulated, to a backend...
    assert!(
        lb_rx.abs_diff(client_tx) <= SLACK,
        "the balancer received {lb_rx} packets, the client sent {client_tx}"
    );
    assert!(
        tunnelled + SLACK >= client_tx && tunnelled <= lb_rx,
        "tunnelled +{tunnelled} for {client_tx} packets sent by the client ({lb_rx} received)"
    );
    assert!(
        lb_tx.abs_diff(tunnelled) <= SLACK && to_backends.abs_diff(tunnelled) <= SLACK,
        "tunnelled +{tunnelled}, but the balancer sent {lb_tx} and the router passed {to_backends} \
         to the backends"
    );
    // ...and every answer came from the backends' links straight to the client (through the
    // balancer, they would have added about `client_rx` to what it received).
    assert!(
        client_rx >= requests,
        "the client received {client_rx} packets for {requests} requests"
    );
    assert!(
        to_client.abs_diff(client_rx) <= SLACK && from_backends + SLACK >= client_rx,
        "the client received {client_rx} packets, the router sent it {to_client} and \
         received {from_backends} from the backends"
    );
    let mut decapsulated = 0;
    for (i, b) in lab.backends.iter().enumerate() {
        let (now, then) = (&after.agents[i], &before.agents[i]);
        let got = counter(now, "decapsulated") - counter(then, "decapsulated");
        println!("{}: agent decapsulated +{got}; counters {now}", b.name);
        assert!(got > 0, "{}: the agent decapsulated nothing", b.name);
        for name in AGENT_DROPS {
            assert_eq!(
                counter(now, name),
                0,
                "{}: the agent dropped {name}",
                b.name
            );
        }
        decapsulated += got;
    }
    assert!(
        decapsulated.abs_diff(tunnelled) <= SLACK,
        "the agents decapsulated {decapsulated} of {tunnelled} tunnelled packets"
    );
}

/// Runs `ping -M do` (DF) from the client: `size` bytes of payload to `vip`. Returns whether
/// it was answered and what it printed.
fn ping_df(lab: &TunnelLab, family: Family, vip: IpAddr, size: usize) -> (bool, String) {
    let (size, vip) = (size.to_string(), vip.to_string());
    let mut args: Vec<&str> = family.ping_flags().to_vec();
    args.extend(["-M", "do", "-s", &size, "-c", "1", "-W", "1", &vip]);
    exec_any(&lab.client, "ping", &args).expect("ping runs")
}

/// From the client namespace: one UDP datagram of `payload` bytes to `vip` with
/// fragmentation allowed (IPv4 without DF). No answer is expected: the balancer refuses it.
fn send_without_df(lab: &TunnelLab, vip: SocketAddr, payload: usize) {
    lab.client
        .run(|| {
            let s = UdpSocket::bind("0.0.0.0:0").expect("bind");
            let dont: i32 = libc::IP_PMTUDISC_DONT;
            // SAFETY: a valid descriptor and a pointer to an i32 of the size given.
            let rc = unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::IPPROTO_IP,
                    libc::IP_MTU_DISCOVER,
                    (&raw const dont).cast(),
                    size_of::<i32>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, 0, "setsockopt: {}", std::io::Error::last_os_error());
            s.connect(vip).expect("connect");
            s.send(&vec![0x42u8; payload]).expect("send");
        })
        .expect("enter the client namespace");
}

/// Polls the client's path MTU towards `dst` for up to 2 s (an ICMP error may still be on
/// its way).
fn learnt_mtu(lab: &TunnelLab, dst: IpAddr) -> Option<u32> {
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        let mtu = lab.client_path_mtu(dst).expect("ip route get");
        if mtu.is_some() || Instant::now() >= until {
            return mtu;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// S-TN2: packets that do not fit once encapsulated are answered from the VIP with the
/// usable MTU (the link's 1,500 minus 20 or 40), which a real client's kernel takes: `ping`
/// reports it, `ip route get` shows it, `lb run` logs it at DEBUG, and a bulk TCP exchange
/// completes.
#[test]
fn s_tn2_client_learns_the_tunnel_mtu_and_tcp_completes() {
    let _guard = serial();
    let lab = lab();
    let started = Instant::now();
    let too_big = |lab: &TunnelLab| {
        global(&lab.lb_status().expect("lb status"), "too_big").expect("too_big in lb status")
    };
    let too_big_before = too_big(&lab);
    for (family, usable, overhead) in [(Family::V4, 1480, 28), (Family::V6, 1460, 48)] {
        let vip = PING_VIP.addr(family);
        let name = family.name();
        // The largest payload the client's own link takes: 1,500 with the IP and ICMP headers.
        let (answered, text) = ping_df(&lab, family, vip, 1500 - overhead);
        println!("{name} ping -M do -s {}: {}", 1500 - overhead, text.trim());
        assert!(
            !answered,
            "{name}: a 1,500-byte ping went through the tunnel"
        );
        assert_eq!(
            named_mtu(&text),
            Some(usable),
            "{name}: ping did not report the tunnel's MTU: {text}"
        );
        assert!(
            text.contains(&format!("From {vip}")),
            "{name}: the error does not come from the VIP: {text}"
        );
        assert_eq!(
            learnt_mtu(&lab, vip),
            Some(usable),
            "{name}: client's path MTU"
        );
        let (answered, text) = ping_df(&lab, family, vip, usable as usize - overhead);
        assert!(
            answered,
            "{name}: a ping of the usable MTU is answered: {text}"
        );
        // The daemon shows the data path's record of it at DEBUG.
        let said = format!("ICMP too big sent, MTU {usable}");
        let log = lab.daemon_log();
        assert!(
            log.lines()
                .any(|l| l.contains("lb_xdp::events") && l.contains(&said)),
            "{name}: lb run did not log {said:?}; log:\n{log}"
        );
    }

    // IPv4 without DF: answered the same, since the tunnel does not fragment.
    let udp4 = at(UDP_VIP.v4, UDP_PORT);
    assert_eq!(lab.client_path_mtu(UDP_VIP.v4.into()).expect("route"), None);
    send_without_df(&lab, udp4, 1472);
    assert_eq!(
        learnt_mtu(&lab, UDP_VIP.v4.into()),
        Some(1480),
        "IPv4 without DF: the client's path MTU to {udp4}"
    );

    // TCP: full-size segments first, then the path MTU discovery lowers them.
    let line: String = "0123456789".repeat(400);
    for (family, usable) in [(Family::V4, 1480), (Family::V6, 1460)] {
        let vip = TCP_VIP.addr(family);
        let name = family.name();
        assert_eq!(
            lab.client_path_mtu(vip).expect("route"),
            None,
            "{name}: fresh path"
        );
        let t = Instant::now();
        let mut conn = lab
            .client
            .run(|| HeldConn::open_at(at(vip, TCP_PORT)))
            .expect("enter the client namespace")
            .expect("a TCP connection to the VIP");
        for n in 0..50 {
            conn.echo(&line)
                .unwrap_or_else(|e| panic!("{name}: echo {n} of 50 x 4,000 bytes: {e:#}"));
        }
        let backend = conn.reply.backend.clone();
        conn.close().expect("close");
        println!("{name}: 200 KB echoed by {backend} in {:?}", t.elapsed());
        assert_eq!(
            learnt_mtu(&lab, vip),
            Some(usable),
            "{name}: the client's path MTU to the TCP VIP"
        );
    }
    let counted = too_big(&lab) - too_big_before;
    println!("too_big +{counted}; {:?}", started.elapsed());
    // Two pings, the datagram without DF, and at least one segment per TCP connection.
    assert!(counted >= 5, "too_big counted {counted}");
}

/// `health.services[name].state` in the balancer's `lb status --json`.
fn state(lab: &TunnelLab, name: &str) -> Option<String> {
    let status = lab.lb_status().ok()?;
    status["health"]["services"][name]["state"]
        .as_str()
        .map(str::to_owned)
}

/// Waits until both families of `service` are `want`; returns how long that took.
fn wait_state(lab: &TunnelLab, service: &str, want: &str, limit: Duration) -> Duration {
    let start = Instant::now();
    let v6 = format!("{service} (IPv6)");
    while start.elapsed() < limit {
        let now = [state(lab, service), state(lab, &v6)];
        if now.iter().all(|s| s.as_deref() == Some(want)) {
            return start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "{service} not {want} on both families within {limit:?}: {:?}",
        [state(lab, service), state(lab, &v6)]
    );
}

// S-TN4: the checks of a tunnelled server go through the tunnel to the VIP: detaching its
// agent puts it in Error within the profile's failure time, although its own address still
// answers the same port; traffic then goes to the other backend only; the agent back, it
// returns to OK within the profile's success time.
#[test]
fn s_tn4_a_backend_without_its_agent_goes_to_error_though_its_address_answers() {
    let _serial = serial();
    let lab = lab();
    let (b1, b2) = (&lab.backends[0], &lab.backends[1]);
    let checked = checked_name(b1);
    let settle = Duration::from_secs(20);
    wait_state(&lab, &checked, "OK", settle);
    wait_state(&lab, &checked_name(b2), "OK", settle);

    lab.detach_agent(b1).expect("agent detached");
    // S-HC: RF x (P + T) after the last success, with the usual margin.
    let bound = (CHECK_FAILURES * (CHECK_PERIOD + CHECK_TIMEOUT)) as f64 * MARGIN;
    let took = wait_state(
        &lab,
        &checked,
        "Error",
        Duration::from_secs_f64(bound + 1.0),
    );
    println!("agent detached: Error after {took:?} (bound {bound:.1} s)");
    // The server's own address still answers the checked port: only the tunnel is gone.
    for addr in [IpAddr::V4(b1.addr4), IpAddr::V6(b1.addr6)] {
        let reply = lab
            .balancer
            .run(|| tcp_ask_at(SocketAddr::new(addr, TCP_PORT)))
            .expect("in the balancer's namespace");
        assert!(reply.is_ok(), "{addr} should answer on its own: {reply:?}");
    }
    // Once the removal is reflected (S-RF2: about 9 s), every request goes to b2.
    std::thread::sleep(Duration::from_secs(10));
    for family in [Family::V4, Family::V6] {
        let vip = at(TCP_VIP.addr(family), TCP_PORT);
        let replies: Vec<Reply> = ask_many(&lab.client, 20, tcp_ask_at, vip);
        let by = count_by_backend(&replies);
        assert_eq!(by.get(&b2.name), Some(&20), "{family:?}: {by:?}");
    }

    lab.attach_agent(b1).expect("agent attached again");
    let bound = (CHECK_SUCCESSES * CHECK_PERIOD + CHECK_TIMEOUT) as f64 * MARGIN;
    let took = wait_state(&lab, &checked, "OK", Duration::from_secs_f64(bound + 1.0));
    println!("agent back: OK after {took:?} (bound {bound:.1} s)");
}
