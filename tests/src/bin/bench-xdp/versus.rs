//! Our program beside Katran's on the same IPv4 frames, in the same rounds: one new TCP
//! flow, a TCP and a UDP connection-table hit, and a packet to no VIP, for 1 VIP x 3 backends
//! and for 100 VIPs x 1,000 backends with 1,000,000 flows already in the tables. In the large
//! case every timed packet belongs to a flow no program has touched since it was put in, so
//! its lookups miss the CPU caches as a busy balancer's do; the small case cycles through a
//! few thousand flows that stay cached: each program goes through its frames once, untimed,
//! before its turn (the other programs' turns push them out of the caches). Every program
//! runs each frame once per call (NAT and both IPIP encapsulations rewrite the frame in
//! place); in each round each program takes its turn on the same frames; the medians of many
//! calls, less the fixed cost of a call, are the programs' own costs. Katran only
//! encapsulates, so its figure stands beside all our modes; `ipip`, ours encapsulating too
//! (IPIP to the backend, through the FIB's next hop), is the like-for-like one, with a target
//! of at most 0.8 times Katran's cost in every case.
//!
//! NAT is timed twice. In `nat` every VIP sends to the same backends on the same port, as
//! Katran's reals are: a backend cannot tell the VIPs apart, so its replies cannot name their
//! VIP and each new flow also writes a reverse entry. In `nat/port-per-vip` each VIP's service
//! runs on its own port of the same servers (what NAT deployments do), and a new flow writes
//! one entry, as DSR's do.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lb::config;
use lb::network::{self, DataPath, LoadOptions};
use lb_tests::fixture_env;
use lb_tests::packet::Frame;

use super::katran::{self, FlowKey, Katran};
use super::{Family, REPEAT, TCP_ACK, TCP_SYN, config_text, macs, median};

/// Our programs' names in the report, in the order of `Programs::ours`.
const MODES: [&str; 4] = ["nat", "dsr", "nat/port-per-vip", "ipip"];
/// The mode that forwards as Katran does, and its target: ours / Katran at most this.
const IPIP: &str = "ipip";
const IPIP_TARGET: f64 = 0.8;
/// The outer source prefix of `ipip` (`[xdp] tunnel_source_v4`).
const TUNNEL_SOURCE: &str = "[xdp]\ntunnel_source_v4 = \"10.255.0.0/24\"\n\n";

impl Programs {
    /// Our programs, in the order of `MODES`.
    fn ours(&self) -> [&DataPath; 4] {
        [&self.nat, &self.dsr, &self.nat_ports, &self.ipip]
    }
}

/// Calls per case per round (each a single run of the program).
const CALLS: usize = 10_000;
/// Rounds; every round times each case on all three programs in turn.
const ROUNDS: usize = 5;
/// Flows already in the tables for the large case.
const PREFILLED: usize = 1_000_000;
/// Distinct flows the timed frames of the small case cycle through (they stay cached).
const WARM_FLOWS: usize = 4096;
/// Distinct flows of the large case: more than the calls of all rounds, so that no timed
/// packet's flow is touched twice.
const COLD_FLOWS: usize = 65_536;
/// Least time between two new flows sent to Katran: its flood guard stops recording new
/// flows above about 125,000 a second per CPU, which would time another path.
const SYN_GAP: Duration = Duration::from_micros(10);
/// XDP verdicts.
const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;
const XDP_REDIRECT: u32 = 4;

/// A small deterministic generator (xorshift), so every run times the same flows.
struct Flows(u64);

impl Flows {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A client address in 11.0.0.0/8 and a port above 1023.
    fn client(&mut self) -> (Ipv4Addr, u16) {
        let r = self.next();
        let addr = Ipv4Addr::from(0x0b00_0000 | (r as u32 & 0x00ff_ffff));
        (addr, 1024 + (r >> 32) as u16 % 60_000)
    }
}

/// The programs under test, all holding the same VIPs and backends.
struct Programs {
    nat: DataPath,
    dsr: DataPath,
    /// NAT with each VIP's backends on a port of their own.
    nat_ports: DataPath,
    /// Tunnel forwarding (IPIP), as Katran forwards.
    ipip: DataPath,
    katran: Katran,
}

fn vip(n: usize) -> Ipv4Addr {
    match Family::V4.vip(n) {
        std::net::IpAddr::V4(a) => a,
        std::net::IpAddr::V6(_) => unreachable!("an IPv4 family gives IPv4 VIPs"),
    }
}

fn backend(n: usize) -> Ipv4Addr {
    match Family::V4.backend(n) {
        std::net::IpAddr::V4(a) => a,
        std::net::IpAddr::V6(_) => unreachable!("an IPv4 family gives IPv4 backends"),
    }
}

/// `vips` NAT VIPs on port 80/tcp (the first also on udp/53), each over `backends` servers
/// that run each VIP's service on a port of its own.
fn port_per_vip_text(vips: usize, backends: usize) -> String {
    let mut s = String::new();
    for v in 0..vips {
        let kinds: &[(&str, u16)] = if v == 0 {
            &[("tcp-l4", 80), ("udp-l4", 53)]
        } else {
            &[("tcp-l4", 80)]
        };
        for &(kind, port) in kinds {
            let backend_port = if kind == "udp-l4" { 53 } else { 10_000 + v };
            let mut list = Vec::with_capacity(backends);
            for b in 0..backends {
                let name = format!("b{b}-{backend_port}");
                s += &format!(
                    "[[backend_service]]\nname = \"{name}\"\naddress = \"{}\"\nport = {backend_port}\n\n",
                    backend(b)
                );
                list.push(format!("\"{name}\""));
            }
            s += &format!(
                "[[vservice]]\nname = \"v{v}-{kind}\"\nkind = \"{kind}\"\naddress = \"{}\"\nport = {port}\nforwarding = \"nat\"\nbackends = [{}]\n\n",
                vip(v),
                list.join(", ")
            );
        }
    }
    s
}

fn ours(object: &[u8], text: &str) -> Result<DataPath> {
    let mut dp = DataPath::load(
        object,
        &LoadOptions {
            pin_dir: None,
            conn_table_size: 1 << 20,
        },
    )?;
    let cfg = config::parse(text, "versus").map_err(|e| anyhow::anyhow!("{e}"))?;
    network::apply(&mut dp, &cfg, &Default::default())?;
    Ok(dp)
}

fn load(object: &[u8], vips: usize, backends: usize) -> Result<Programs> {
    let mut k = Katran::load(&katran::object_path(), fixture_env::BACKENDS[0].1)?;
    let reals: Vec<u32> = (1..=backends as u32).collect();
    for (id, b) in reals.iter().zip(0..) {
        k.add_real(*id, backend(b))?;
    }
    for v in 0..vips {
        k.add_vip(v as u32, vip(v), 80, katran::TCP, &reals)?;
    }
    k.add_vip(vips as u32, vip(0), 53, katran::UDP, &reals)?;
    let text = |forwarding| config_text(vips, backends, forwarding, &[Family::V4]);
    Ok(Programs {
        nat: ours(object, &text("nat"))?,
        dsr: ours(object, &text("dsr"))?,
        nat_ports: ours(object, &port_per_vip_text(vips, backends))?,
        ipip: ours(object, &format!("{TUNNEL_SOURCE}{}", text("ipip")))?,
        katran: k,
    })
}

/// The frames of one case: each call takes the next.
struct Case {
    name: &'static str,
    frames: Vec<Vec<u8>>,
    /// New flows: paced for Katran's flood guard.
    new_flows: bool,
}

fn tcp(client: (Ipv4Addr, u16), vip: Ipv4Addr, flags: u8) -> Vec<u8> {
    Frame::tcp(macs(), client, (vip, 80), flags).to_bytes()
}

fn udp(client: (Ipv4Addr, u16), vip: Ipv4Addr) -> Vec<u8> {
    Frame::udp(macs(), client, (vip, 53), b"bench").to_bytes()
}

/// Puts `PREFILLED` flows (or none for the small case) into every program's table, and
/// builds the timed cases: hits on `timed` flows each program has seen once since, new
/// flows that none has seen.
fn cases(p: &mut Programs, vips: usize, prefill: usize, timed: usize) -> Result<Vec<Case>> {
    let mut flows = Flows(0x9e37_79b9_7f4a_7c15);
    let started = Instant::now();
    let mut keys = Vec::with_capacity(prefill);
    for i in 0..prefill {
        let client = flows.client();
        let v = vip(i % vips);
        let syn = tcp(client, v, TCP_SYN);
        for dp in p.ours() {
            dp.test_run(&syn, None)?;
        }
        keys.push(FlowKey::v4(client.0, client.1, v, 80, katran::TCP));
    }
    p.katran.fill_flows(0, &keys, 1)?;
    if prefill > 0 {
        println!(
            "versus: {prefill} flows put in each program's table in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    // Hits: flows each program has seen once (Katran learns a flow from any packet).
    let mut hit_tcp = Vec::new();
    let mut hit_udp = Vec::new();
    let mut last = Instant::now();
    for i in 0..timed {
        let client = flows.client();
        let v = vip(i % vips);
        let ack = tcp(client, v, TCP_ACK);
        let dgram = udp(client, vip(0));
        for frame in [&ack, &dgram] {
            pace(&mut last, SYN_GAP);
            for dp in p.ours() {
                dp.test_run(frame, None)?;
            }
            p.katran.test_run(frame)?;
        }
        hit_tcp.push(ack);
        hit_udp.push(dgram);
    }
    let syn = (0..timed)
        .map(|i| {
            let client = flows.client();
            tcp(client, vip(i % vips), TCP_SYN)
        })
        .collect();
    let other = Ipv4Addr::new(10, 98, 0, 1);
    let non_vip = vec![tcp((fixture_env::CLIENT_IP, 40000), other, TCP_ACK)];
    Ok(vec![
        Case {
            name: "syn",
            frames: syn,
            new_flows: true,
        },
        Case {
            name: "hit-tcp",
            frames: hit_tcp,
            new_flows: false,
        },
        Case {
            name: "hit-udp",
            frames: hit_udp,
            new_flows: false,
        },
        Case {
            name: "non-vip",
            frames: non_vip,
            new_flows: false,
        },
    ])
}

/// Checks that every program takes the path its case claims to time on the case's first
/// frame: forwarded (our REDIRECT, IPIP for `ipip`; Katran's TX with a 20-byte IPIP header
/// to a real) or passed to the kernel untouched.
fn check(p: &Programs, case: &Case, backends: usize) -> Result<()> {
    let (case, frame) = (case.name, &case.frames[0]);
    let forwarded = case != "non-vip";
    for (mode, dp) in MODES.iter().zip(p.ours()) {
        let (verdict, out) = dp.test_run(frame, None)?;
        let want = if forwarded { XDP_REDIRECT } else { XDP_PASS };
        if verdict != want {
            bail!("ours {mode} {case}: verdict {verdict}, expected {want}");
        }
        if *mode == IPIP {
            let what = format!("ours {mode} {case}");
            if forwarded {
                encapsulated(&what, frame, &out, backends)?;
                // The outer source: the configured prefix, the flow's hash in the host bits.
                if out[26..29] != [10, 255, 0] {
                    bail!(
                        "{what}: outer source {:?}, expected 10.255.0.x",
                        &out[26..30]
                    );
                }
            } else if out != *frame {
                bail!("{what}: expected an untouched pass");
            }
        }
    }
    let (verdict, out) = p.katran.test_run(frame)?;
    if !forwarded {
        if verdict != XDP_PASS || out != *frame {
            bail!("katran {case}: verdict {verdict}, expected an untouched pass");
        }
        return Ok(());
    }
    if verdict != XDP_TX {
        bail!("katran {case}: verdict {verdict}, expected TX");
    }
    encapsulated(&format!("katran {case}"), frame, &out, backends)
}

/// `out` must be `frame` inside a 20-byte outer IPv4 header, protocol 4 (IPIP), to a real,
/// the inner packet unchanged.
fn encapsulated(what: &str, frame: &[u8], out: &[u8], backends: usize) -> Result<()> {
    if out.len() != frame.len() + 20 || out[12..14] != [0x08, 0x00] {
        bail!(
            "{what}: {} bytes out, expected {} with an IPIP header",
            out.len(),
            frame.len() + 20
        );
    }
    // Outer IPv4 header after the Ethernet header: protocol 4 (IPIP), destination a real.
    let dst = Ipv4Addr::new(out[30], out[31], out[32], out[33]);
    if out[23] != 4 || !(0..backends).any(|b| backend(b) == dst) {
        bail!(
            "{what}: outer protocol {} to {dst}, expected IPIP to a real",
            out[23]
        );
    }
    if out[34..] != frame[14..] {
        bail!("{what}: the inner packet changed");
    }
    Ok(())
}

/// One program's timed single run of a frame.
type Runner<'a> = dyn Fn(&[u8]) -> Result<Duration> + 'a;

/// Waits until `gap` has passed since `last`, then restarts it.
fn pace(last: &mut Instant, gap: Duration) {
    while last.elapsed() < gap {
        std::hint::spin_loop();
    }
    *last = Instant::now();
}

/// Median single-run time of `run` over `CALLS` calls through `frames` from `first` on.
fn median_single(
    frames: &[Vec<u8>],
    first: usize,
    gap: Option<Duration>,
    run: impl Fn(&[u8]) -> Result<Duration>,
) -> Result<f64> {
    let mut samples = Vec::with_capacity(CALLS);
    let mut last = Instant::now();
    for i in 0..CALLS {
        if let Some(gap) = gap {
            pace(&mut last, gap);
        }
        samples.push(run(&frames[(first + i) % frames.len()])?.as_nanos() as f64);
    }
    Ok(median(&samples))
}

/// Runs `run` once, untimed, on each frame that [`median_single`] from `first` will time,
/// so that their flows' entries are in the CPU caches when the timing starts.
fn warm_up(frames: &[Vec<u8>], first: usize, run: &Runner) -> Result<()> {
    for i in 0..CALLS.min(frames.len()) {
        run(&frames[(first + i) % frames.len()])?;
    }
    Ok(())
}

/// Keeps the timing thread on one CPU: Katran keys its connection tables by CPU, and both
/// programs should see the same caches.
pub(super) fn pin_to_cpu0() -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the calls only read and write it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error()).context("pinning to CPU 0");
        }
    }
    Ok(())
}

/// Runs the comparison for each size and prints one line per case and mode, each ending in
/// `ratio vs katran: X.XX`.
pub fn run(object: &[u8]) -> Result<()> {
    let path = katran::object_path();
    if !path.exists() {
        println!(
            "versus katran: skipped, Katran's object is not at {} (set KATRAN_OBJECT)",
            path.display()
        );
        return Ok(());
    }
    pin_to_cpu0()?;
    let mut lines = Vec::new();
    let mut targets = Vec::new();
    for (vips, backends, prefill, timed) in
        [(1, 3, 0, WARM_FLOWS), (100, 1000, PREFILLED, COLD_FLOWS)]
    {
        let mut p = load(object, vips, backends)?;
        let cases = cases(&mut p, vips, prefill, timed)?;
        for case in &cases {
            check(&p, case, backends)?;
        }
        let non_vip = &cases[3].frames[0];
        // (case, program) -> per-round medians; programs 0 katran, then ours in MODES' order.
        let mut times = vec![vec![Vec::new(); 1 + MODES.len()]; cases.len()];
        let katran = |f: &[u8]| p.katran.bench_run(f, 1);
        let nat = |f: &[u8]| p.nat.bench_run(f, 1);
        let dsr = |f: &[u8]| p.dsr.bench_run(f, 1);
        let nat_ports = |f: &[u8]| p.nat_ports.bench_run(f, 1);
        let ipip = |f: &[u8]| p.ipip.bench_run(f, 1);
        let runs: [&Runner; 5] = [&katran, &nat, &dsr, &nat_ports, &ipip];
        for round in 0..ROUNDS {
            // The test-run machinery's fixed cost: a single run less the mean of many, on
            // a frame our program passes untouched.
            let single = median_single(std::slice::from_ref(non_vip), 0, None, nat)?;
            let overhead = (single - p.nat.bench_run(non_vip, REPEAT)?.as_nanos() as f64).max(0.0);
            for (c, case) in cases.iter().enumerate() {
                let gap = case.new_flows.then_some(SYN_GAP);
                // Hits and packets to no VIP of the small case are timed warm. (New flows
                // would be recorded by the warm-up, so they are not.)
                let warm = prefill == 0 && !case.new_flows;
                // Each round goes on where the last stopped: in the large case, on frames
                // no round has timed.
                for (times, run) in times[c].iter_mut().zip(runs) {
                    if warm {
                        warm_up(&case.frames, round * CALLS, run)?;
                    }
                    let ns = median_single(&case.frames, round * CALLS, gap, run)?;
                    times.push((ns - overhead).max(0.0));
                }
            }
        }
        // A timed hit that missed our table would time the re-hash path instead.
        for (mode, dp) in MODES.iter().zip(p.ours()) {
            let missed: u64 = dp.status()?.vips.iter().map(|v| v.counters.ct_misses).sum();
            let warmed = 2 * timed as u64;
            if missed > warmed {
                println!(
                    "versus {vips}x{backends} ours {mode}: {} timed packets missed the connection table",
                    missed - warmed
                );
            }
        }
        for (c, case) in cases.iter().enumerate() {
            let katran = median(&times[c][0]);
            for (m, mode) in MODES.iter().enumerate() {
                let ours = median(&times[c][m + 1]);
                let ratio = ours / katran.max(1.0);
                let mut line = format!(
                    "{vips}x{backends} {mode} {}: katran {katran:.0} ns, ours {ours:.0} ns, ratio vs katran: {ratio:.2}",
                    case.name,
                );
                if *mode == IPIP {
                    let met = if ratio <= IPIP_TARGET {
                        "met"
                    } else {
                        "NOT met"
                    };
                    line += &format!(" (target <= {IPIP_TARGET:.1}: {met})");
                    targets.push(format!("{vips}x{backends} {}: {ratio:.2} {met}", case.name));
                }
                lines.push(line);
            }
        }
    }
    println!(
        "\nPer packet beside Katran (medians of {ROUNDS} rounds, the fixed cost of a call subtracted):"
    );
    for line in lines {
        println!("{line}");
    }
    println!(
        "ipip vs katran, target <= {IPIP_TARGET:.1}x: {}",
        targets.join("; ")
    );
    Ok(())
}
