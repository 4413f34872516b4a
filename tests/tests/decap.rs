//! S-TN3: "The backend agent removes the outer header only from well-formed tunnel packets
//! addressed to its host (from the configured balancers, when configured); it passes
//! everything else untouched and counts what it dropped, by reason."
//!
//! Fixtures of the agent's program (`lb-decap`) through BPF_PROG_TEST_RUN: each test loads a
//! private copy (maps of its own), writes its settings, sends frames and checks the verdict,
//! the exact output frame and the counters. Needs root and the object built by
//! `cargo xtask build` (or `LB_DECAP_OBJECT`). Run: `cargo test -p lb-tests --test decap`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use aya::programs::{TestRun, TestRunOptions};
use lb::agent::{Agent, Hook, Prefix, Settings, Snapshot};
use lb_tests::packet::checksum::internet_checksum;
use lb_tests::packet::{
    ETH_P_ARP, ETH_P_IPV4, ETH_P_IPV6, Frame, Icmp, Ipv4, Ipv6, L4, Mac, TCP_SYN, Udp, diff,
};

const DROP: u32 = 1;
const PASS: u32 = 2;

/// The router's MAC and the backend's.
const ROUTER_MAC: Mac = [0x02, 0, 0, 0, 0xaa, 0x01];
const HOST_MAC: Mac = [0x02, 0, 0, 0, 0xbb, 0x01];

/// This backend's addresses (outer destinations).
const HOST4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const HOST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xb, 0, 0, 0, 0, 0x10);
/// A balancer (outer source) inside the configured prefixes, and one outside.
const LB4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const LB6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x1b, 0, 0, 0, 0, 1);
const STRANGER4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 99);
const STRANGER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 1);
/// The client (inner source) and the VIPs (inner destinations).
const CLIENT4: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 7);
const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 7);
const VIP4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xf, 0, 0, 0, 0, 0x10);
const OTHER_VIP4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 99);

/// One private copy of the program with its maps.
struct Fx {
    agent: Agent,
}

impl Fx {
    /// The XDP program with this host's addresses and the given filters.
    fn new(sources: &[&str], vips: &[IpAddr]) -> Fx {
        Fx::with_hook(sources, vips, Hook::Xdp(Default::default()))
    }

    /// The program `hook` runs, with this host's addresses and the given filters.
    fn with_hook(sources: &[&str], vips: &[IpAddr], hook: Hook) -> Fx {
        let path = lb::agent::object_path();
        let object = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "reading the agent's object {} (build it with `cargo xtask build`): {e}",
                path.display()
            )
        });
        let mut agent = Agent::load_for(&object, None, hook).expect("loading the agent's program");
        let settings = Settings {
            local: vec![HOST4.into(), HOST6.into()],
            sources: sources
                .iter()
                .map(|s| s.parse::<Prefix>().expect("a prefix"))
                .collect(),
            vips: vips.to_vec(),
            gue_port: None,
        };
        agent.maps.write(&settings).expect("writing the settings");
        Fx { agent }
    }

    fn plain() -> Fx {
        Fx::new(&[], &[])
    }

    /// No filters, GUE taken on `GUE_PORT`.
    fn gue() -> Fx {
        let mut fx = Fx::plain();
        let mut settings = fx.counters().settings;
        settings.gue_port = Some(GUE_PORT);
        fx.agent
            .maps
            .write(&settings)
            .expect("writing the settings");
        fx
    }

    fn run(&self, frame: &[u8]) -> (u32, Vec<u8>) {
        if self.agent.is_tc() {
            return self.run_tc(frame);
        }
        let prog = self.agent.program().expect("the program");
        let run = lb::network::run_xdp(prog, frame, 1, None).expect("BPF_PROG_TEST_RUN");
        (run.verdict, run.output)
    }

    /// The tc program on `frame`, its verdict in XDP's terms (TC_ACT_OK: pass, TC_ACT_SHOT:
    /// drop) so that both programs are checked alike.
    fn run_tc(&self, frame: &[u8]) -> (u32, Vec<u8>) {
        let prog = self.agent.tc_program().expect("the tc program");
        let mut out = vec![0u8; frame.len() + 256];
        let opts = TestRunOptions {
            data_in: Some(frame),
            data_out: Some(&mut out),
            repeat: 1,
            ..Default::default()
        };
        let res = prog.test_run(opts).expect("BPF_PROG_TEST_RUN");
        out.truncate(res.data_size_out as usize);
        let verdict = match res.return_value {
            0 => PASS,
            2 => DROP,
            other => panic!("tc verdict {other}"),
        };
        (verdict, out)
    }

    fn counters(&self) -> Snapshot {
        self.agent.maps.read().expect("reading the maps")
    }

    /// `frame` must come out as `want` with `verdict`.
    fn expect(&self, what: &str, frame: &[u8], verdict: u32, want: &[u8]) {
        let (got, out) = self.run(frame);
        assert_eq!(got, verdict, "{what}: verdict");
        if verdict != DROP
            && let Some(d) = diff(want, &out)
        {
            panic!("{what}: output frame differs:\n{d}");
        }
    }

    /// `frame` must be decapsulated into `inner` (with the inner family's ethertype).
    fn decapsulated(&self, what: &str, frame: &[u8], inner: &[u8], ethertype: u16) {
        self.expect(what, frame, PASS, &eth(ethertype, inner));
    }

    /// `frame` must go to the kernel byte for byte as it came.
    fn untouched(&self, what: &str, frame: &[u8]) {
        self.expect(what, frame, PASS, frame);
    }

    fn dropped(&self, what: &str, frame: &[u8]) {
        self.expect(what, frame, DROP, &[]);
    }

    /// Every counter but `name` is `others`' value; `name` is `n` more.
    fn assert_only(&self, before: &Snapshot, name: &str, n: u64) {
        let after = self.counters();
        for (counter, value) in &after.counters {
            let was = before.counter(counter);
            let want = if *counter == name {
                was + n
            } else if *counter == "bytes" && name == "decapsulated" {
                *value
            } else {
                was
            };
            assert_eq!(
                *value, want,
                "counter {counter} (expected only {name} +{n})"
            );
        }
    }
}

/// An Ethernet header from the router to the host, then `body`.
fn eth(ethertype: u16, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + body.len());
    f.extend_from_slice(&HOST_MAC);
    f.extend_from_slice(&ROUTER_MAC);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(body);
    f
}

/// How an outer IPv4 header differs from a well-formed one.
#[derive(Default, Clone, Copy)]
struct Twist {
    /// Total length written instead of the real one.
    total: Option<u16>,
    /// Added to the right checksum (0: right).
    checksum_off: u16,
    /// IPv4 options (4 NOP bytes, IHL 6).
    options: bool,
    more_fragments: bool,
    frag_offset: u16,
}

/// An outer IPv4 header from `src` to `dst` with protocol `proto` around `inner`.
fn outer4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, inner: &[u8], t: Twist) -> Vec<u8> {
    let opts: &[u8] = if t.options { &[1, 1, 1, 1] } else { &[] };
    let hlen = 20 + opts.len();
    let total = t.total.unwrap_or((hlen + inner.len()) as u16);
    // DF on whole packets; MF and the offset on fragments.
    let df = u16::from(!t.more_fragments && t.frag_offset == 0) << 14;
    let mf = u16::from(t.more_fragments) << 13;
    let flags = df | mf | t.frag_offset;
    let mut h = vec![0x40 | (hlen / 4) as u8, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&7u16.to_be_bytes());
    h.extend_from_slice(&flags.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(opts);
    let c = internet_checksum(&h).wrapping_add(t.checksum_off);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(inner);
    h
}

/// An outer IPv6 header from `src` to `dst` with next header `next` around `inner`;
/// `payload_len` written instead of the real one when given.
fn outer6(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    next: u8,
    inner: &[u8],
    payload_len: Option<u16>,
) -> Vec<u8> {
    let mut h = 0x6000_0000u32.to_be_bytes().to_vec();
    h.extend_from_slice(&payload_len.unwrap_or(inner.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(inner);
    h
}

/// The client's datagram to the VIP.
fn datagram() -> L4 {
    L4::Udp(Udp {
        sport: 40000,
        dport: 80,
        no_checksum: false,
        payload: b"hello from the client".to_vec(),
    })
}

/// The client's packet to a VIP, as the balancer put it inside the tunnel.
fn inner4(dst: Ipv4Addr) -> Vec<u8> {
    Ipv4::new(CLIENT4, dst, datagram()).to_bytes()
}

fn inner6(dst: Ipv6Addr) -> Vec<u8> {
    Ipv6::new(CLIENT6, dst, datagram()).to_bytes()
}

/// The GUE port of these tests (the balancers' default).
const GUE_PORT: u16 = lb_common::GUE_PORT;

/// UDP to `dport` of `udp_len` bytes (the real length when `None`), then a GUE header whose
/// first byte is `first` and whose protocol is `proto`, then `inner`.
fn udp_gue(dport: u16, udp_len: Option<u16>, (first, proto): (u8, u8), inner: &[u8]) -> Vec<u8> {
    let len = udp_len.unwrap_or((12 + inner.len()) as u16);
    let mut u = 50000u16.to_be_bytes().to_vec();
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&len.to_be_bytes());
    u.extend_from_slice(&[0, 0, first, proto, 0, 0]);
    u.extend_from_slice(inner);
    u
}

/// GUE over IPv4 from the balancer to this host, carrying `inner` of protocol `proto`.
fn gue4(proto: u8, inner: &[u8]) -> Vec<u8> {
    let udp = udp_gue(GUE_PORT, None, (0, proto), inner);
    eth(ETH_P_IPV4, &outer4(LB4, HOST4, 17, &udp, Twist::default()))
}

/// IPIP from the balancer to this host.
fn ipip(inner: &[u8]) -> Vec<u8> {
    eth(ETH_P_IPV4, &outer4(LB4, HOST4, 4, inner, Twist::default()))
}

fn ip6ip6(inner: &[u8]) -> Vec<u8> {
    eth(ETH_P_IPV6, &outer6(LB6, HOST6, 41, inner, None))
}

#[test]
fn s_tn3_ipip_decapsulated() {
    let fx = Fx::plain();
    if let Some(n) = fx.agent.verified_instructions() {
        println!("verifier: lb_decap processed {n} instructions (limit 1000000)");
    }
    let before = fx.counters();
    let inner = inner4(VIP4);
    fx.decapsulated("IPIP", &ipip(&inner), &inner, ETH_P_IPV4);
    fx.assert_only(&before, "decapsulated", 1);
    assert_eq!(fx.counters().counter("bytes"), inner.len() as u64);
}

#[test]
fn s_tn3_ip6ip6_decapsulated() {
    let fx = Fx::plain();
    let before = fx.counters();
    let inner = inner6(VIP6);
    fx.decapsulated("IP6IP6", &ip6ip6(&inner), &inner, ETH_P_IPV6);
    fx.assert_only(&before, "decapsulated", 1);
    assert_eq!(fx.counters().counter("bytes"), inner.len() as u64);
}

#[test]
fn s_tn3_4in6_decapsulated() {
    let fx = Fx::plain();
    let inner = inner4(VIP4);
    let frame = eth(ETH_P_IPV6, &outer6(LB6, HOST6, 4, &inner, None));
    fx.decapsulated("4in6", &frame, &inner, ETH_P_IPV4);
    assert_eq!(fx.counters().counter("decapsulated"), 1);
}

#[test]
fn s_tn3_6in4_decapsulated() {
    let fx = Fx::plain();
    let inner = inner6(VIP6);
    let frame = eth(
        ETH_P_IPV4,
        &outer4(LB4, HOST4, 41, &inner, Twist::default()),
    );
    fx.decapsulated("6in4", &frame, &inner, ETH_P_IPV6);
    assert_eq!(fx.counters().counter("decapsulated"), 1);
}

/// An inner IPv4 header with options (checksummed over them), and a frame with the link's
/// padding after the outer packet: the padding stays behind the inner packet (the kernel
/// trims it by the inner length).
#[test]
fn s_tn3_inner_options_and_link_padding() {
    let fx = Fx::plain();
    let mut ip = Ipv4::new(CLIENT4, VIP4, datagram());
    ip.options = vec![1, 1, 1, 0x44, 8, 5, 0, 0, 0, 0, 0, 0];
    let inner = ip.to_bytes();
    fx.decapsulated("inner options", &ipip(&inner), &inner, ETH_P_IPV4);
    let icmp = Ipv4::new(
        CLIENT4,
        VIP4,
        L4::Icmp(Icmp {
            kind: 8,
            code: 0,
            ident: 1,
            seq: 1,
            payload: Vec::new(),
        }),
    )
    .to_bytes();
    let mut frame = ipip(&icmp);
    let padded_len = 60 + 14;
    let padding = vec![0xee; padded_len - frame.len()];
    frame.extend_from_slice(&padding);
    let mut want = icmp.clone();
    want.extend_from_slice(&padding);
    fx.decapsulated("padded", &frame, &want, ETH_P_IPV4);
    assert_eq!(fx.counters().counter("decapsulated"), 2);
}

/// Traffic that is no tunnel packet goes to the kernel untouched: TCP to the host, ARP,
/// ICMP, IPv6 TCP and ping, UDP, a tunnel behind an IPv6 extension header, a VLAN-tagged
/// tunnel packet, an IPv4 header cut short.
#[test]
fn s_tn3_non_tunnel_packets_untouched() {
    let fx = Fx::plain();
    let before = fx.counters();
    let tcp = Frame::tcp(
        (ROUTER_MAC, HOST_MAC),
        (CLIENT4, 5555),
        (HOST4, 22),
        TCP_SYN,
    );
    let arp = Frame::raw(
        (ROUTER_MAC, HOST_MAC),
        ETH_P_ARP,
        vec![0, 1, 8, 0, 6, 4, 0, 1],
    );
    let ping = Frame::icmp_echo((ROUTER_MAC, HOST_MAC), CLIENT4, HOST4, false, 9);
    let udp = Frame::udp((ROUTER_MAC, HOST_MAC), (CLIENT4, 53), (HOST4, 53), b"dns");
    let tcp6 = Frame::tcp6(
        (ROUTER_MAC, HOST_MAC),
        (CLIENT6, 5555),
        (HOST6, 22),
        TCP_SYN,
    );
    let mut behind_ext = outer6(LB6, HOST6, 60, &[], None);
    // A destination-options header whose next header is 41, then the inner packet.
    let inner = inner6(VIP6);
    let mut ext = vec![41, 0, 1, 4, 0, 0, 0, 0];
    ext.extend_from_slice(&inner);
    behind_ext.truncate(40);
    behind_ext[4..6].copy_from_slice(&(ext.len() as u16).to_be_bytes());
    behind_ext.extend_from_slice(&ext);
    let tagged = {
        let mut f = ipip(&inner4(VIP4));
        let tag = [0x81, 0x00, 0x00, 0x0a];
        f.splice(12..12, tag);
        f
    };
    let short = eth(ETH_P_IPV4, &[0x45, 0, 0, 20, 0, 0, 0, 0, 64, 4]);
    let frames: Vec<(&str, Vec<u8>)> = vec![
        ("TCP to the host", tcp.to_bytes()),
        ("ARP", arp.to_bytes()),
        ("ICMP echo", ping.to_bytes()),
        ("UDP", udp.to_bytes()),
        ("IPv6 TCP", tcp6.to_bytes()),
        (
            "41 behind an extension header",
            eth(ETH_P_IPV6, &behind_ext),
        ),
        ("VLAN-tagged IPIP", tagged),
        ("IPv4 header cut short", short),
    ];
    for (what, frame) in &frames {
        fx.untouched(what, frame);
    }
    fx.assert_only(&before, "not_tunnel", frames.len() as u64);
}

/// A tunnel packet to another address is someone else's: passed untouched, even when it is
/// malformed too (the destination is decided first).
#[test]
fn s_tn3_not_local_passed_untouched() {
    let fx = Fx::plain();
    let before = fx.counters();
    let inner = inner4(VIP4);
    let elsewhere = Ipv4Addr::new(192, 0, 2, 77);
    let other = eth(
        ETH_P_IPV4,
        &outer4(LB4, elsewhere, 4, &inner, Twist::default()),
    );
    let bad = Twist {
        checksum_off: 1,
        ..Twist::default()
    };
    let other_bad = eth(ETH_P_IPV4, &outer4(LB4, elsewhere, 4, &inner, bad));
    let other6 = eth(
        ETH_P_IPV6,
        &outer6(
            LB6,
            "2001:db8:b::77".parse().expect("an address"),
            41,
            &inner6(VIP6),
            None,
        ),
    );
    fx.untouched("IPIP to another address", &other);
    fx.untouched("malformed IPIP to another address", &other_bad);
    fx.untouched("IP6IP6 to another address", &other6);
    fx.assert_only(&before, "not_local", 3);
}

/// Malformed tunnel packets to this host are dropped, each counted under its reason.
#[test]
fn s_tn3_malformed_tunnel_packets_dropped_by_reason() {
    let fx = Fx::plain();
    let inner = inner4(VIP4);
    let v4 = |t: Twist| eth(ETH_P_IPV4, &outer4(LB4, HOST4, 4, &inner, t));
    let mut wrong_len_inner = inner.clone();
    wrong_len_inner[3] = wrong_len_inner[3].wrapping_add(4);
    let fix_sum = |p: &mut Vec<u8>| {
        p[10] = 0;
        p[11] = 0;
        let c = internet_checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
    };
    fix_sum(&mut wrong_len_inner);
    let mut bad_sum_inner = inner.clone();
    bad_sum_inner[11] ^= 0x55;
    let mut short_ihl = inner.clone();
    short_ihl[0] = 0x44;
    fix_sum(&mut short_ihl);
    let mut extra = inner.clone();
    extra.extend_from_slice(&[0; 8]);
    let inner6_bad_len = Ipv6 {
        payload_len_override: Some(9),
        ..Ipv6::new(CLIENT6, VIP6, datagram())
    }
    .to_bytes();
    let truncated = {
        let mut f = v4(Twist::default());
        f.truncate(14 + 20 + 10);
        f
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "outer total length past the frame",
            v4(Twist {
                total: Some((20 + inner.len() + 1) as u16),
                ..Twist::default()
            }),
            "bad_outer",
        ),
        ("frame cut inside the inner packet", truncated, "bad_outer"),
        (
            "outer total length under 20",
            v4(Twist {
                total: Some(12),
                ..Twist::default()
            }),
            "bad_outer",
        ),
        (
            "bad outer checksum",
            v4(Twist {
                checksum_off: 1,
                ..Twist::default()
            }),
            "bad_outer",
        ),
        (
            "outer options",
            v4(Twist {
                options: true,
                ..Twist::default()
            }),
            "bad_outer",
        ),
        (
            "outer IPv6 payload length past the frame",
            eth(
                ETH_P_IPV6,
                &outer6(LB6, HOST6, 41, &inner6(VIP6), Some(500)),
            ),
            "bad_outer",
        ),
        (
            "first fragment (MF)",
            v4(Twist {
                more_fragments: true,
                ..Twist::default()
            }),
            "fragment",
        ),
        (
            "later fragment (offset)",
            v4(Twist {
                frag_offset: 100,
                ..Twist::default()
            }),
            "fragment",
        ),
        (
            "inner length above the outer payload",
            eth(
                ETH_P_IPV4,
                &outer4(LB4, HOST4, 4, &wrong_len_inner, Twist::default()),
            ),
            "bad_inner",
        ),
        (
            "inner length under the outer payload",
            eth(ETH_P_IPV4, &outer4(LB4, HOST4, 4, &extra, Twist::default())),
            "bad_inner",
        ),
        (
            "bad inner checksum",
            eth(
                ETH_P_IPV4,
                &outer4(LB4, HOST4, 4, &bad_sum_inner, Twist::default()),
            ),
            "bad_inner",
        ),
        (
            "inner IHL under 5",
            eth(
                ETH_P_IPV4,
                &outer4(LB4, HOST4, 4, &short_ihl, Twist::default()),
            ),
            "bad_inner",
        ),
        (
            "IPv6 inside protocol 4",
            eth(
                ETH_P_IPV4,
                &outer4(LB4, HOST4, 4, &inner6(VIP6), Twist::default()),
            ),
            "bad_inner",
        ),
        (
            "IPv4 inside next header 41",
            eth(ETH_P_IPV6, &outer6(LB6, HOST6, 41, &inner, None)),
            "bad_inner",
        ),
        (
            "inner IPv6 payload length wrong",
            eth(ETH_P_IPV6, &outer6(LB6, HOST6, 41, &inner6_bad_len, None)),
            "bad_inner",
        ),
        (
            "outer payload too short for an inner header",
            eth(
                ETH_P_IPV4,
                &outer4(LB4, HOST4, 4, &inner[..10], Twist::default()),
            ),
            "bad_inner",
        ),
    ];
    for (what, frame, counter) in &cases {
        let before = fx.counters();
        fx.dropped(what, frame);
        let after = fx.counters();
        for (name, value) in &after.counters {
            let want = before.counter(name) + u64::from(name == counter);
            assert_eq!(
                *value, want,
                "{what}: counter {name} (expected {counter} +1)"
            );
        }
    }
}

/// With balancer prefixes configured, other outer sources are dropped; without, any source
/// is taken. A malformed outer header from a stranger is counted as malformed (the outer
/// checks come first).
#[test]
fn s_tn3_source_filter_on_and_off() {
    let on = Fx::new(&["198.51.100.0/24", "2001:db8:1b::/48"], &[]);
    let inner = inner4(VIP4);
    let inner_6 = inner6(VIP6);
    on.decapsulated("IPIP from a balancer", &ipip(&inner), &inner, ETH_P_IPV4);
    on.decapsulated(
        "IP6IP6 from a balancer",
        &ip6ip6(&inner_6),
        &inner_6,
        ETH_P_IPV6,
    );
    let before = on.counters();
    let stranger = eth(
        ETH_P_IPV4,
        &outer4(STRANGER4, HOST4, 4, &inner, Twist::default()),
    );
    let stranger6 = eth(ETH_P_IPV6, &outer6(STRANGER6, HOST6, 41, &inner_6, None));
    // An IPv4 balancer prefix never matches an IPv6 source and the other way round.
    let mapped = eth(
        ETH_P_IPV6,
        &outer6(
            "::ffff:198.51.100.1".parse().expect("an address"),
            HOST6,
            4,
            &inner,
            None,
        ),
    );
    on.dropped("IPIP from a stranger", &stranger);
    on.dropped("IP6IP6 from a stranger", &stranger6);
    on.dropped("4in6 from a mapped IPv4 balancer", &mapped);
    on.assert_only(&before, "foreign_source", 3);
    let bad = Twist {
        checksum_off: 3,
        ..Twist::default()
    };
    let before = on.counters();
    on.dropped(
        "malformed, from a stranger",
        &eth(ETH_P_IPV4, &outer4(STRANGER4, HOST4, 4, &inner, bad)),
    );
    on.assert_only(&before, "bad_outer", 1);

    let off = Fx::plain();
    off.decapsulated("IPIP from anyone", &stranger, &inner, ETH_P_IPV4);
    off.decapsulated("IP6IP6 from anyone", &stranger6, &inner_6, ETH_P_IPV6);
}

/// With VIPs configured, an inner packet to another address is dropped; without, any inner
/// destination is taken.
#[test]
fn s_tn3_vip_filter_on_and_off() {
    let on = Fx::new(&[], &[VIP4.into(), VIP6.into()]);
    let to_vip = inner4(VIP4);
    let to_vip6 = inner6(VIP6);
    on.decapsulated("to a VIP", &ipip(&to_vip), &to_vip, ETH_P_IPV4);
    on.decapsulated("to an IPv6 VIP", &ip6ip6(&to_vip6), &to_vip6, ETH_P_IPV6);
    let before = on.counters();
    let elsewhere = inner4(OTHER_VIP4);
    on.dropped("to another address", &ipip(&elsewhere));
    on.dropped(
        "to another IPv6 address",
        &ip6ip6(&inner6("2001:db8:f::99".parse().expect("an address"))),
    );
    on.assert_only(&before, "unknown_vip", 2);

    let off = Fx::plain();
    off.decapsulated("to any address", &ipip(&elsewhere), &elsewhere, ETH_P_IPV4);
}

/// A second write of other settings leaves exactly those in the maps (the update of
/// `lb decap --iface` run again), and switching a filter off takes any source again.
#[test]
fn s_tn3_settings_rewritten_in_place() {
    let mut fx = Fx::new(&["198.51.100.0/24"], &[VIP4.into()]);
    let stranger = eth(
        ETH_P_IPV4,
        &outer4(STRANGER4, HOST4, 4, &inner4(VIP4), Twist::default()),
    );
    fx.dropped("stranger before", &stranger);
    let next = Settings {
        local: vec![HOST4.into()],
        sources: vec!["203.0.113.0/24".parse().expect("a prefix")],
        vips: vec![VIP6.into(), OTHER_VIP4.into()],
        gue_port: None,
    };
    fx.agent.maps.write(&next).expect("rewriting");
    let mut want = next.clone();
    want.vips.sort();
    assert_eq!(fx.counters().settings, want);
    fx.dropped("to a VIP no longer configured", &stranger);
    let unfiltered = Settings {
        local: vec![HOST4.into()],
        ..Settings::default()
    };
    fx.agent.maps.write(&unfiltered).expect("rewriting");
    assert_eq!(fx.counters().settings, unfiltered);
    let inner = inner4(VIP4);
    fx.decapsulated("any source again", &stranger, &inner, ETH_P_IPV4);
    let before = fx.counters();
    fx.untouched("IP6IP6 to a removed address", &ip6ip6(&inner6(VIP6)));
    fx.assert_only(&before, "not_local", 1);
}

#[test]
fn s_tn3_gue_decapsulated_over_both_families() {
    let fx = Fx::gue();
    let before = fx.counters();
    let inner = inner4(VIP4);
    fx.decapsulated("GUE v4 in v4", &gue4(4, &inner), &inner, ETH_P_IPV4);
    let inner = inner6(VIP6);
    let udp = udp_gue(GUE_PORT, None, (0, 41), &inner);
    let frame = eth(ETH_P_IPV6, &outer6(LB6, HOST6, 17, &udp, None));
    fx.decapsulated("GUE v6 in v6", &frame, &inner, ETH_P_IPV6);
    fx.assert_only(&before, "decapsulated", 2);
    assert_eq!(fx.counters().settings.gue_port, Some(GUE_PORT));
}

#[test]
fn s_tn3_gue_only_on_its_port_and_only_when_configured() {
    let inner = inner4(VIP4);
    // Without a GUE port, UDP is never a tunnel packet.
    let fx = Fx::plain();
    let before = fx.counters();
    fx.untouched("GUE with GUE off", &gue4(4, &inner));
    fx.assert_only(&before, "not_tunnel", 1);
    // With one, UDP to another port is someone's service.
    let fx = Fx::gue();
    let before = fx.counters();
    let udp = udp_gue(GUE_PORT + 1, None, (0, 4), &inner);
    let other = eth(ETH_P_IPV4, &outer4(LB4, HOST4, 17, &udp, Twist::default()));
    fx.untouched("UDP to another port", &other);
    fx.assert_only(&before, "not_tunnel", 1);
}

#[test]
fn s_tn3_malformed_gue_dropped_as_bad_outer() {
    let fx = Fx::gue();
    let inner = inner4(VIP4);
    let cases = [
        ("GUE version 1", udp_gue(GUE_PORT, None, (0x40, 4), &inner)),
        (
            "GUE control message",
            udp_gue(GUE_PORT, None, (0x20, 4), &inner),
        ),
        (
            "GUE with options",
            udp_gue(GUE_PORT, None, (0x01, 4), &inner),
        ),
        ("GUE naming UDP", udp_gue(GUE_PORT, None, (0, 17), &inner)),
        (
            "UDP length short",
            udp_gue(GUE_PORT, Some(20), (0, 4), &inner),
        ),
        (
            "UDP length long",
            udp_gue(GUE_PORT, Some(2000), (0, 4), &inner),
        ),
    ];
    for (what, udp) in cases {
        let before = fx.counters();
        let frame = eth(ETH_P_IPV4, &outer4(LB4, HOST4, 17, &udp, Twist::default()));
        fx.dropped(what, &frame);
        fx.assert_only(&before, "bad_outer", 1);
    }
}

/// S-TN3 where XDP cannot attach: the tc ingress program (`lb decap --mode tc`) gives every
/// frame the XDP program's verdict, output frame and counter: each tunnel form and family
/// mix, inner options, a frame that is no tunnel packet, a malformed outer header, an outer
/// fragment, a foreign source and a VIP outside the list.
#[test]
fn s_tn3_tc_program_decides_every_frame_as_the_xdp_one() {
    let filters = (
        ["198.51.100.0/24", "2001:db8:1b::/48"],
        [IpAddr::from(VIP4), VIP6.into()],
    );
    let xdp = Fx::new(&filters.0, &filters.1);
    let tc = Fx::with_hook(&filters.0, &filters.1, Hook::Tc);
    if let Some(n) = tc.agent.verified_instructions() {
        println!("verifier: lb_decap_tc processed {n} instructions (limit 1000000)");
    }
    let mut with_options = Ipv4::new(CLIENT4, VIP4, datagram());
    with_options.options = vec![1, 1, 1, 0x44, 8, 5, 0, 0, 0, 0, 0, 0];
    let bad_checksum = Twist {
        checksum_off: 1,
        ..Twist::default()
    };
    let fragment = Twist {
        more_fragments: true,
        ..Twist::default()
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("IPIP", ipip(&inner4(VIP4)), "decapsulated"),
        ("IP6IP6", ip6ip6(&inner6(VIP6)), "decapsulated"),
        (
            "4in6",
            eth(ETH_P_IPV6, &outer6(LB6, HOST6, 4, &inner4(VIP4), None)),
            "decapsulated",
        ),
        (
            "6in4",
            eth(
                ETH_P_IPV4,
                &outer4(LB4, HOST4, 41, &inner6(VIP6), Twist::default()),
            ),
            "decapsulated",
        ),
        (
            "inner options",
            ipip(&with_options.to_bytes()),
            "decapsulated",
        ),
        (
            "UDP to the host",
            eth(
                ETH_P_IPV4,
                &Ipv4::new(CLIENT4, HOST4, datagram()).to_bytes(),
            ),
            "not_tunnel",
        ),
        (
            "bad outer checksum",
            eth(
                ETH_P_IPV4,
                &outer4(LB4, HOST4, 4, &inner4(VIP4), bad_checksum),
            ),
            "bad_outer",
        ),
        (
            "outer fragment",
            eth(ETH_P_IPV4, &outer4(LB4, HOST4, 4, &inner4(VIP4), fragment)),
            "fragment",
        ),
        (
            "foreign source",
            eth(
                ETH_P_IPV4,
                &outer4(STRANGER4, HOST4, 4, &inner4(VIP4), Twist::default()),
            ),
            "foreign_source",
        ),
        (
            "VIP outside the list",
            ipip(&inner4(OTHER_VIP4)),
            "unknown_vip",
        ),
    ];
    for (what, frame, counter) in cases {
        let (want_verdict, want_out) = xdp.run(&frame);
        let before = tc.counters();
        let (verdict, out) = tc.run(&frame);
        assert_eq!(verdict, want_verdict, "{what}: verdict");
        if verdict == PASS
            && let Some(d) = diff(&want_out, &out)
        {
            panic!("{what}: the tc program's frame differs from XDP's:\n{d}");
        }
        tc.assert_only(&before, counter, 1);
    }
}
