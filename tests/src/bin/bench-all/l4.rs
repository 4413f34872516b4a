//! L4 forwarding in the netns topology: this project's XDP (nat, dsr), nftables DNAT
//! (numgen and jhash maps + conntrack, as kube-proxy does), plain kernel routing (ceiling of
//! the kernel paths) and the minimal XDP forwarder (ceiling of XDP paths).
//!
//! Source: the live-frames generator on CPU 0 in the client namespace. The balancer's
//! ingress veth runs threaded NAPI pinned to CPU 1, so everything the balancer does for a
//! packet is the CPU time of that one kthread; the backends' NAPI threads (count-and-drop)
//! run on CPU 0. Systems are alternated within each round; every figure is a median over
//! rounds, every ratio is computed inside a round.

use std::collections::{BTreeMap, HashSet};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use aya::programs::xdp::XdpLinkId;
use lb_tests::netns::ns::Netns;
use lb_tests::netns::topology::{Topology, TopologyOptions};
use lb_tests::packet::{Frame, Mac};

use crate::progs::{FRAME, FwdTarget, GenCfg, Progs, Sender};

/// The VIP every balancing system serves.
const VIP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
const UDP_PORT: u16 = 9;
const TCP_PORT: u16 = 80;
const BACKENDS: usize = 3;
/// Settling time after the source starts, before the measured window.
const WARMUP: Duration = Duration::from_millis(400);

/// A forwarding system under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum System {
    Plain,
    NftNumgen,
    NftJhash,
    XdpMin,
    LbNat,
    LbDsr,
}

impl System {
    /// Every system, in report order.
    pub const ALL: [System; 6] = [
        System::Plain,
        System::NftNumgen,
        System::NftJhash,
        System::XdpMin,
        System::LbNat,
        System::LbDsr,
    ];

    /// Label in the report.
    pub fn label(self) -> &'static str {
        match self {
            System::Plain => "kernel routing, no balancing (ceiling)",
            System::NftNumgen => "nftables DNAT numgen + conntrack",
            System::NftJhash => "nftables DNAT jhash + conntrack",
            System::XdpMin => "minimal XDP forwarder (ceiling)",
            System::LbNat => "this project XDP, nat",
            System::LbDsr => "this project XDP, dsr",
        }
    }
}

/// A traffic pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Workload {
    UdpMany,
    UdpFew,
    TcpNew,
}

impl Workload {
    /// Every workload, in report order.
    pub const ALL: [Workload; 3] = [Workload::UdpMany, Workload::UdpFew, Workload::TcpNew];

    /// Label in the report.
    pub fn label(self) -> &'static str {
        match self {
            Workload::UdpMany => "UDP, 65,536 flows (packets/s)",
            Workload::UdpFew => "UDP, 16 flows (packets/s)",
            Workload::TcpNew => "TCP SYN, every packet a new connection (new connections/s)",
        }
    }
}

/// One measured window.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Frames the backends received per second.
    pub pps: f64,
    /// CPU time of the balancer's NAPI thread per delivered frame.
    pub ns_per_pkt: f64,
}

/// Everything the L4 part measured.
pub struct L4Results {
    /// Samples per (system, workload), one per round.
    pub samples: BTreeMap<(System, Workload), Vec<Sample>>,
    /// Per-round ratio of a system's pps to nftables numgen's, per workload.
    pub ratios_vs_nft: BTreeMap<(System, Workload), Vec<f64>>,
    /// Per-round ratio of a system's CPU/packet to the minimal forwarder's, per workload.
    pub cpu_vs_min: BTreeMap<(System, Workload), Vec<f64>>,
    /// Per-round ratio of a system's pps to the minimal forwarder's, per workload.
    pub pps_vs_min: BTreeMap<(System, Workload), Vec<f64>>,
    /// Systems that could not run, with why.
    pub skipped: Vec<(System, String)>,
    /// Rounds and window.
    pub rounds: usize,
    pub window: Duration,
}

fn ifindex(ns: &Netns, dev: &str) -> Result<u32> {
    let out = ns.ip(&["-o", "link", "show", dev])?;
    out.split(':')
        .next()
        .and_then(|s| s.trim().parse().ok())
        .with_context(|| format!("ifindex of {dev}: {out}"))
}

fn mac(ns: &Netns, dev: &str) -> Result<Mac> {
    let out = ns.ip(&["-o", "link", "show", dev])?;
    let text = out
        .split("link/ether ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .with_context(|| format!("MAC of {dev}: {out}"))?;
    let mut m = [0u8; 6];
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() != 6 {
        bail!("MAC of {dev}: {text}");
    }
    for (i, p) in parts.iter().enumerate() {
        m[i] = u8::from_str_radix(p, 16)?;
    }
    Ok(m)
}

fn napi_threads() -> HashSet<u32> {
    let mut set = HashSet::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.starts_with("napi/"))
            {
                set.insert(pid);
            }
        }
    }
    set
}

/// Switches `dev` to threaded NAPI and returns its new kthread(s), pinned to `cpu`.
fn threaded(ns: &Netns, dev: &str, cpu: usize) -> Result<Vec<u32>> {
    let before = napi_threads();
    ns.exec(
        "ip",
        &[
            "netns",
            "exec",
            ns.name(),
            "sh",
            "-c",
            &format!("echo 1 > /sys/class/net/{dev}/threaded"),
        ],
    )?;
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let new: Vec<u32> = napi_threads().difference(&before).copied().collect();
        if !new.is_empty() {
            for pid in &new {
                // SAFETY: a zeroed cpu_set_t with one bit set.
                unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    libc::sched_setaffinity(
                        *pid as i32,
                        std::mem::size_of::<libc::cpu_set_t>(),
                        &set,
                    );
                }
            }
            return Ok(new);
        }
        if Instant::now() > deadline {
            bail!("no NAPI thread appeared for {dev}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn thread_cpu_ns(pids: &[u32]) -> Result<u64> {
    let mut sum = 0;
    for pid in pids {
        let s = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))?;
        sum += s
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .context("schedstat")?;
    }
    Ok(sum)
}

fn nft_available() -> Result<(), String> {
    match std::process::Command::new("nft").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("nft (apt nftables) is not installed".into()),
    }
}

fn nft_rules(kind: System) -> String {
    let pick = if kind == System::NftNumgen {
        "numgen random mod 3".to_owned()
    } else {
        "jhash ip saddr . th sport mod 3 seed 0x5eed".to_owned()
    };
    format!(
        "table ip lbbench {{\n chain pre {{\n  type nat hook prerouting priority dstnat; policy accept;\n  \
         ip daddr {VIP} meta l4proto {{ tcp, udp }} dnat to {pick} map {{ 0 : 10.11.1.2, 1 : 10.11.2.2, 2 : 10.11.3.2 }}\n }}\n}}\n"
    )
}

fn lb_config(forwarding: &str) -> String {
    let mut s = String::new();
    for n in 1..=BACKENDS {
        s += &format!(
            "[[backend_service]]\nname = \"b{n}\"\naddress = \"10.11.{n}.2\"\nport = 0\n\n"
        );
    }
    for (kind, port) in [("udp-l4", UDP_PORT), ("tcp-l4", TCP_PORT)] {
        s += &format!(
            "[[vservice]]\nname = \"v-{kind}\"\nkind = \"{kind}\"\naddress = \"{VIP}\"\nport = {port}\n\
             forwarding = \"{forwarding}\"\nbackends = [\"b1\", \"b2\", \"b3\"]\n\n"
        );
    }
    s
}

/// The bench's network, programs and what each system attached.
struct Bench {
    topo: Topology,
    progs: Progs,
    client_ifindex: u32,
    lb_threads: Vec<u32>,
    client_mac: Mac,
    cli_mac: Mac,
    /// What is attached to `cli` by this bench right now (program name, link).
    cli_link: Option<(&'static str, XdpLinkId)>,
}

impl Bench {
    fn new() -> Result<Bench> {
        let topo = Topology::new(&TopologyOptions {
            backends: BACKENDS,
            dsr_vip: None,
        })?;
        let mut progs = Progs::load()?;
        let (c, lb) = (&topo.client, &topo.balancer);
        // GRO keeps the veth in NAPI mode whatever XDP program comes and goes.
        lb.exec("ethtool", &["-K", "cli", "gro", "on"])?;
        for b in &topo.backends {
            progs.attach("bench_sink", &b.ns, "eth0")?;
        }
        let lb_threads = threaded(lb, "cli", 1)?;
        for b in &topo.backends {
            threaded(&b.ns, "eth0", 0)?;
        }
        let mut targets = Vec::new();
        for b in &topo.backends {
            targets.push(FwdTarget {
                addr: b.addr.octets(),
                ifindex: ifindex(lb, &b.balancer_dev)?,
                dmac: mac(&b.ns, "eth0")?,
                smac: mac(lb, &b.balancer_dev)?,
            });
        }
        progs.set_fwd(VIP.octets(), &targets)?;
        Ok(Bench {
            client_ifindex: ifindex(c, "eth0")?,
            client_mac: mac(c, "eth0")?,
            cli_mac: mac(lb, "cli")?,
            lb_threads,
            progs,
            cli_link: None,
            topo,
        })
    }

    fn attach_cli(&mut self, name: &'static str) -> Result<()> {
        let link = self.progs.attach(name, &self.topo.balancer, "cli")?;
        self.cli_link = Some((name, link));
        Ok(())
    }

    fn setup(&mut self, sys: System) -> Result<()> {
        match sys {
            System::Plain => self.attach_cli("bench_pass"),
            System::XdpMin => self.attach_cli("bench_fwd"),
            System::NftNumgen | System::NftJhash => {
                self.attach_cli("bench_pass")?;
                let path = self.topo.write_config("nft.conf", &nft_rules(sys))?;
                let p = path.display().to_string();
                self.topo.balancer.exec("nft", &["-f", &p]).map(drop)
            }
            System::LbNat | System::LbDsr => self
                .topo
                .lb_load(&lb_config(if sys == System::LbNat { "nat" } else { "dsr" })),
        }
    }

    fn teardown(&mut self, sys: System) -> Result<()> {
        if let Some((name, link)) = self.cli_link.take() {
            self.progs.detach(name, link)?;
        }
        match sys {
            System::NftNumgen | System::NftJhash => {
                self.topo
                    .balancer
                    .exec("nft", &["delete", "table", "ip", "lbbench"])?;
                // Forget the flows, so the next round starts from an empty table too.
                let _ = self.topo.balancer.exec("conntrack", &["-F"]);
            }
            System::LbNat | System::LbDsr => {
                let ifaces = self.topo.interfaces().join(",");
                let pin = self.topo.pin_dir.display().to_string();
                self.topo
                    .lb(&["unload", "--iface", &ifaces, "--pin-dir", &pin])?;
            }
            _ => {}
        }
        Ok(())
    }

    fn gen_cfg(&self, sys: System, wl: Workload) -> GenCfg {
        let macs = (self.client_mac, self.cli_mac);
        let src = Ipv4Addr::new(10, 10, 0, 2);
        // Plain routing has no VIP: spread over the backends' own addresses instead.
        let (dst, dst_count, dst_step) = if sys == System::Plain {
            (Ipv4Addr::new(10, 11, 1, 2), BACKENDS as u32, 256)
        } else {
            (VIP, 1, 0)
        };
        let bytes = match wl {
            Workload::TcpNew => Frame::tcp(macs, (src, 1024), (dst, TCP_PORT), 0x02).to_bytes(),
            _ => Frame::udp(macs, (src, 1024), (dst, UDP_PORT), &[0u8; FRAME - 42]).to_bytes(),
        };
        let mut template = [0u8; FRAME];
        let n = bytes.len().min(FRAME);
        template[..n].copy_from_slice(&bytes[..n]);
        GenCfg {
            template,
            flows: match wl {
                Workload::UdpMany => 65_536,
                Workload::UdpFew => 16,
                Workload::TcpNew => 0,
            },
            tcp: u32::from(wl == Workload::TcpNew),
            dst_count,
            dst_step,
        }
    }

    fn measure(&mut self, sys: System, wl: Workload, window: Duration) -> Result<Sample> {
        self.progs.set_gen(self.gen_cfg(sys, wl))?;
        let fd = self.progs.gen_fd()?;
        let sender = Sender::start(fd, &self.topo.client, self.client_ifindex)?;
        std::thread::sleep(WARMUP);
        let (p0, c0, t0) = (
            self.progs.sunk()?,
            thread_cpu_ns(&self.lb_threads)?,
            Instant::now(),
        );
        std::thread::sleep(window);
        let (p1, c1, t1) = (
            self.progs.sunk()?,
            thread_cpu_ns(&self.lb_threads)?,
            Instant::now(),
        );
        let alive = sender.running();
        sender.stop()?;
        if !alive {
            bail!("the sender ended before the window closed");
        }
        let pkts = p1.saturating_sub(p0);
        if pkts == 0 {
            bail!("{sys:?} {wl:?}: nothing reached the backends");
        }
        Ok(Sample {
            pps: pkts as f64 / (t1 - t0).as_secs_f64(),
            ns_per_pkt: (c1.saturating_sub(c0)) as f64 / pkts as f64,
        })
    }
}

/// Median of a non-empty list (NaN when empty).
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

/// Runs every system `rounds` times, alternating the order each round.
pub fn run(rounds: usize, window: Duration) -> Result<L4Results> {
    crate::progs::install_stop_handler();
    lb_tests::netns::lbctl::require_data_path()?;
    let mut bench = Bench::new()?;
    let mut skipped = Vec::new();
    let mut systems: Vec<System> = Vec::new();
    for sys in System::ALL {
        if matches!(sys, System::NftNumgen | System::NftJhash)
            && let Err(why) = nft_available()
        {
            skipped.push((sys, why));
            continue;
        }
        systems.push(sys);
    }
    let mut samples: BTreeMap<(System, Workload), Vec<Sample>> = BTreeMap::new();
    let mut ratios_vs_nft = BTreeMap::new();
    let mut cpu_vs_min = BTreeMap::new();
    let mut pps_vs_min = BTreeMap::new();
    for round in 0..rounds {
        let mut order = systems.clone();
        let n = order.len().max(1);
        order.rotate_left(round % n);
        if round % 2 == 1 {
            order.reverse();
        }
        let mut this: BTreeMap<(System, Workload), Sample> = BTreeMap::new();
        for &sys in &order {
            if skipped.iter().any(|(s, _)| *s == sys) {
                continue;
            }
            if let Err(e) = bench.setup(sys) {
                let _ = bench.teardown(sys);
                eprintln!("l4: {} could not be set up: {e:#}", sys.label());
                skipped.push((sys, format!("setup failed: {e:#}")));
                continue;
            }
            for wl in Workload::ALL {
                match bench.measure(sys, wl, window) {
                    Ok(s) => {
                        println!(
                            "l4 round {round} {:<42} {:<10} {:>6.3} Mpps {:>7.0} ns/pkt",
                            sys.label(),
                            format!("{wl:?}"),
                            s.pps / 1e6,
                            s.ns_per_pkt
                        );
                        this.insert((sys, wl), s);
                        samples.entry((sys, wl)).or_default().push(s);
                    }
                    Err(e) => eprintln!("l4 round {round} {sys:?} {wl:?}: {e:#}"),
                }
            }
            bench.teardown(sys)?;
        }
        for (&(sys, wl), s) in &this {
            if let Some(n) = this.get(&(System::NftNumgen, wl)) {
                ratios_vs_nft
                    .entry((sys, wl))
                    .or_insert_with(Vec::new)
                    .push(s.pps / n.pps);
            }
            if let Some(m) = this.get(&(System::XdpMin, wl)) {
                cpu_vs_min
                    .entry((sys, wl))
                    .or_insert_with(Vec::new)
                    .push(s.ns_per_pkt / m.ns_per_pkt);
                pps_vs_min
                    .entry((sys, wl))
                    .or_insert_with(Vec::new)
                    .push(s.pps / m.pps);
            }
        }
    }
    drop(bench);
    Ok(L4Results {
        samples,
        ratios_vs_nft,
        cpu_vs_min,
        pps_vs_min,
        skipped,
        rounds,
        window,
    })
}
