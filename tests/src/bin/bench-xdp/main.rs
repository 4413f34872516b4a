//! `cargo xtask bench xdp`: the data path's cost per packet, measured in the kernel with
//! BPF_PROG_TEST_RUN, and the Maglev build time.
//!
//! NAT rewrites the frame in place, so repeating it inside one call would time another path
//! from the second run on: each NAT case runs once per call and reports the median of many
//! calls. Those single runs carry a fixed cost of the test-run machinery (timer, softirq
//! guard), which is measured in the same process on the non-VIP path (the frame is not
//! modified, so it can also run 100,000 times in one call) and subtracted: `net` is the
//! program's own cost. DSR only rewrites MACs, so its cases run 100,000 times per call
//! and need no correction: they cross-check the NAT figures.
//!
//! Both families' VIPs are in the maps at once and their cases are timed in turns, round
//! after round, so the IPv6/IPv4 ratios compare packets measured at the same moment.
//! Then `versus` times Katran's program beside ours on the same frames (its own module), and
//! `decap` the backend agent's program beside a pass-only program and Katran's decapsulation.

mod decap;
mod katran;
mod versus;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lb::config;
use lb::network::{self, DataPath, LoadOptions, maglev};
use lb_tests::fixture_env::{self, FixtureEnv};
use lb_tests::packet::{Frame, Mac};

const RUNS: usize = 20_000;
const REPEAT: u32 = 100_000;
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;

fn macs() -> (Mac, Mac) {
    (fixture_env::CLIENT_MAC, fixture_env::LB_CLIENT_MAC)
}

fn median_ns(dp: &DataPath, frame: &[u8]) -> Result<f64> {
    let mut samples: Vec<Duration> = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        samples.push(dp.bench_run(frame, 1)?);
    }
    samples.sort();
    Ok(samples[RUNS / 2].as_nanos() as f64)
}

/// The address family a case runs in.
#[derive(Clone, Copy, PartialEq)]
enum Family {
    V4,
    V6,
}

impl Family {
    /// The `n`th backend: 10.2.0.0/16 or fd02::/64, routed through the fixture
    /// namespace's first backend (so every fib lookup succeeds).
    fn backend(self, n: usize) -> IpAddr {
        match self {
            Family::V4 => Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 2, 0, 1)) + n as u32).into(),
            Family::V6 => Ipv6Addr::from(0xfd02_u128 << 112 | (n as u128 + 1)).into(),
        }
    }

    /// The `n`th VIP, counting from 10.99.0.1 or fd99::1.
    fn vip(self, n: usize) -> IpAddr {
        match self {
            Family::V4 => Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 99, 0, 1)) + n as u32).into(),
            Family::V6 => Ipv6Addr::from(0xfd99_u128 << 112 | (n as u128 + 1)).into(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Family::V4 => "ipv4",
            Family::V6 => "ipv6",
        }
    }
}

/// `vips` VIPs of each of `families` on port 80/tcp (the first also on udp/53), each over
/// `backends` backends of its family: both families share the maps, so their cases can be
/// timed in turns on one data path.
fn config_text(vips: usize, backends: usize, forwarding: &str, families: &[Family]) -> String {
    let mut s = String::new();
    for &family in families {
        let fam = family.name();
        for b in 0..backends {
            let addr = family.backend(b);
            s += &format!(
                "[[backend_service]]\nname = \"b{b}-{fam}\"\naddress = \"{addr}\"\nport = 0\n\n"
            );
        }
        let list: Vec<String> = (0..backends).map(|b| format!("\"b{b}-{fam}\"")).collect();
        for v in 0..vips {
            let addr = family.vip(v);
            // UDP on the first VIP only: 100 more tables would time the writer, not packets.
            let kinds: &[(&str, u16)] = if v == 0 {
                &[("tcp-l4", 80), ("udp-l4", 53)]
            } else {
                &[("tcp-l4", 80)]
            };
            for &(kind, port) in kinds {
                s += &format!(
                    "[[vservice]]\nname = \"v{v}-{kind}-{fam}\"\nkind = \"{kind}\"\naddress = \"{addr}\"\nport = {port}\nforwarding = \"{forwarding}\"\nbackends = [{}]\n\n",
                    list.join(", ")
                );
            }
        }
    }
    s
}

/// The frames a case times: SYN, ACK and UDP to the first VIP, and a TCP ACK to no VIP.
fn frames(family: Family) -> [Vec<u8>; 4] {
    match family {
        Family::V4 => {
            let client = fixture_env::CLIENT_IP;
            let vip = Ipv4Addr::new(10, 99, 0, 1);
            let other = Ipv4Addr::new(10, 98, 0, 1);
            [
                Frame::tcp(macs(), (client, 40000), (vip, 80), TCP_SYN).to_bytes(),
                Frame::tcp(macs(), (client, 40000), (vip, 80), TCP_ACK).to_bytes(),
                Frame::udp(macs(), (client, 40001), (vip, 53), b"bench").to_bytes(),
                Frame::tcp(macs(), (client, 40000), (other, 80), TCP_ACK).to_bytes(),
            ]
        }
        Family::V6 => {
            let client = fixture_env::CLIENT_IP6;
            let vip = Ipv6Addr::from(0xfd99_u128 << 112 | 1);
            let other = Ipv6Addr::from(0xfd98_u128 << 112 | 1);
            [
                Frame::tcp6(macs(), (client, 40000), (vip, 80), TCP_SYN).to_bytes(),
                Frame::tcp6(macs(), (client, 40000), (vip, 80), TCP_ACK).to_bytes(),
                Frame::udp6(macs(), (client, 40001), (vip, 53), b"bench").to_bytes(),
                Frame::tcp6(macs(), (client, 40000), (other, 80), TCP_ACK).to_bytes(),
            ]
        }
    }
}

/// Rounds per mode; each round times every case of both families in turn, so that a drift
/// of the machine's speed shows in both and not in their ratio.
const ROUNDS: usize = 5;

/// Times of one case of one family, one per round.
type Samples = Vec<(Family, &'static str, Vec<f64>)>;

fn record(samples: &mut Samples, family: Family, key: &'static str, ns: f64) {
    match samples
        .iter_mut()
        .find(|(f, k, _)| *f == family && *k == key)
    {
        Some((_, _, v)) => v.push(ns),
        None => samples.push((family, key, vec![ns])),
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

/// Loads `forwarding`'s configuration of `vips` x `backends` per family, checks that each
/// frame takes the path it claims to time, and times both families' cases in turns.
fn mode(
    object: &[u8],
    vips: usize,
    backends: usize,
    forwarding: &'static str,
    samples: &mut Samples,
) -> Result<()> {
    let mut dp = DataPath::load(
        object,
        &LoadOptions {
            pin_dir: None,
            conn_table_size: 1 << 20,
        },
    )?;
    let label = format!("{vips}x{backends}/family {forwarding}");
    let cfg = config::parse(
        &config_text(vips, backends, forwarding, &[Family::V4, Family::V6]),
        "bench",
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let t = Instant::now();
    network::apply(&mut dp, &cfg, &Default::default())?;
    println!(
        "{label}: maps of both families written in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    let nat = forwarding == "nat";
    for family in [Family::V4, Family::V6] {
        let [syn, ack, udp, other] = frames(family);
        let cases: &[(&str, &Vec<u8>, u32)] = if nat {
            &[
                ("syn", &syn, 4),
                ("ack", &ack, 4),
                ("udp", &udp, 4),
                ("non-vip", &other, 2),
            ]
        } else {
            &[("syn", &syn, 4), ("ack", &ack, 4)]
        };
        for (name, frame, want) in cases {
            let (verdict, _) = dp.test_run(frame, None)?;
            if verdict != *want {
                bail!(
                    "{label} {} {name}: verdict {verdict}, expected {want}",
                    family.name()
                );
            }
        }
    }
    let [.., v4_other] = frames(Family::V4);
    for _ in 0..ROUNDS {
        // The test-run machinery's fixed cost, on the same IPv4 frame to no VIP for both
        // families, so that their rows compare.
        let overhead = if nat {
            let single = median_ns(&dp, &v4_other)?;
            (single - dp.bench_run(&v4_other, REPEAT)?.as_nanos() as f64).max(0.0)
        } else {
            0.0
        };
        for family in [Family::V4, Family::V6] {
            let [syn, ack, udp, other] = frames(family);
            if nat {
                for (key, frame) in [
                    ("nat syn", &syn),
                    ("nat hit-tcp", &ack),
                    ("nat hit-udp", &udp),
                ] {
                    record(samples, family, key, median_ns(&dp, frame)? - overhead);
                }
                let pass = dp.bench_run(&other, REPEAT)?.as_nanos() as f64;
                record(samples, family, "non-vip", pass);
                record(samples, family, "overhead", overhead);
            } else {
                for (key, frame) in [("dsr syn", &syn), ("dsr hit-tcp", &ack)] {
                    let ns = dp.bench_run(frame, REPEAT)?.as_nanos() as f64;
                    record(samples, family, key, ns);
                }
            }
        }
    }
    if nat {
        let arp = Frame::raw(macs(), 0x0806, vec![0u8; 28]).to_bytes();
        let floor = dp.bench_run(&arp, REPEAT)?.as_nanos() as f64;
        println!("xdp {vips}x{backends}/family non-IP (parse floor) {floor:.0} ns/packet");
    }
    Ok(())
}

/// What each case times, for the rows.
fn describe(key: &str) -> &'static str {
    match key {
        "nat syn" | "dsr syn" => "SYN (new flow)",
        "nat hit-tcp" | "dsr hit-tcp" => "ACK (connection-table hit)",
        "nat hit-udp" => "UDP (connection-table hit)",
        "non-vip" => "TCP to no VIP (pass)",
        _ => "single-run overhead (subtracted from nat rows)",
    }
}

fn maglev_build() {
    let keys: Vec<String> = (0..1000)
        .map(|i| format!("10.2.{}.{}:80", i / 250, i % 250))
        .collect();
    let members: Vec<maglev::MaglevBackend<'_>> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| maglev::MaglevBackend {
            key: k,
            weight: 1 + (i % 3) as u32,
            value: i as u32,
        })
        .collect();
    let mut times = Vec::new();
    for _ in 0..11 {
        let t = Instant::now();
        let table = maglev::build(&members, 65537);
        times.push(t.elapsed());
        assert!(table.is_some());
    }
    times.sort();
    println!(
        "maglev build 1000 backends x 65537 entries: {:.2} ms (median of 11)",
        times[5].as_secs_f64() * 1e3
    );
}

/// How much of the verifier's budget each program takes: a data-path change that nears
/// 1,000,000 is one branch away from being refused at load.
fn verifier_report(object: &[u8]) -> Result<()> {
    let dp = DataPath::load(
        object,
        &LoadOptions {
            pin_dir: None,
            conn_table_size: 1 << 20,
        },
    )?;
    for (program, insns) in dp.verified_instructions() {
        println!("verifier: {program} processed {insns} instructions (limit 1000000)");
    }
    Ok(())
}

fn main() -> Result<()> {
    let env = FixtureEnv::create().context("creating the benchmark namespace")?;
    let routes = [
        ("10.2.0.0/16", fixture_env::BACKENDS[0].0.to_string()),
        ("fd02::/64", fixture_env::BACKENDS6[0].0.to_string()),
    ];
    for (net, gw) in routes {
        let out = std::process::Command::new("ip")
            .args(["-n", env.name(), "route", "add", net, "via", &gw])
            .output()?;
        if !out.status.success() {
            bail!(
                "ip route add {net}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let object = network::read_object()?;
    verifier_report(&object)?;
    if std::env::args().nth(1).as_deref() == Some("verifier") {
        drop(env);
        return Ok(());
    }
    // `bench-xdp versus` times only the comparison with Katran, `bench-xdp decap` only the
    // backend agent's.
    match std::env::args().nth(1).as_deref() {
        Some("versus") => {
            versus::run(&object)?;
            drop(env);
            return Ok(());
        }
        Some("decap") => {
            decap::run_decap()?;
            drop(env);
            return Ok(());
        }
        _ => {}
    }
    let mut ratios = Vec::new();
    // Per family: 1 VIP x 3 backends, and 50 VIPs x 1,000 backends (100 VIPs x 1,000 in
    // all, within the 131,072 backend slots the maps hold).
    for (vips, backends) in [(1, 3), (50, 1000)] {
        let mut samples = Samples::new();
        for forwarding in ["nat", "dsr"] {
            mode(&object, vips, backends, forwarding, &mut samples)?;
        }
        for (family, key, v) in &samples {
            println!(
                "xdp {vips}x{backends}/family {} {key:<12} {:<48} {:>6.0} ns/packet (median of {ROUNDS} rounds)",
                family.name(),
                describe(key),
                median(v)
            );
        }
        for (_, key, v4) in samples
            .iter()
            .filter(|(f, k, _)| *f == Family::V4 && *k != "overhead")
        {
            let Some((_, _, v6)) = samples
                .iter()
                .find(|(f, k, _)| *f == Family::V6 && k == key)
            else {
                continue;
            };
            let (v4, v6) = (median(v4), median(v6));
            ratios.push(format!(
                "{vips}x{backends}/family {key}: ipv4 {v4:.0} ns, ipv6 {v6:.0} ns, ratio ipv6/ipv4: {:.2}",
                v6 / v4
            ));
        }
    }
    for line in ratios {
        println!("{line}");
    }
    maglev_build();
    versus::run(&object)?;
    decap::run_decap()?;
    drop(env);
    Ok(())
}
