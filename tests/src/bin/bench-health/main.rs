//! `cargo xtask bench health`: what health checking costs at scale, ours beside HAProxy.
//! 10,000 services, each with a TCP check at P = 1 s, T = 1 s, Rise 3, Fall 2, are checked
//! by `lb run` (the real daemon) and by HAProxy (`check inter 1s fall 2 rise 3`) in
//! interleaved rounds: lb, haproxy, lb, haproxy, lb, haproxy. Then one round each at 50,000
//! services with P = 5 s: the same 10,000 checks per second over five times the services,
//! which shows whether the cost grows with the check rate and the memory with the number of
//! services.
//!
//! One listening socket on 0.0.0.0 answers every 127.1.x.y address, so each service gets its
//! own loopback address and they all share one port; it lives in a child process (this
//! binary re-executed with `--listener PORT`), kept for the whole run.
//!
//! Both checkers are measured the same way, each round in a fresh process: started, warmed up
//! until every service is healthy (ours: OK in the REST API; HAProxy: UP with a passed last
//! check on its stats socket; at most 15 s x P), then after 1 s a 25 s window: user + system
//! CPU of the process from /proc/PID/stat (utime + stime, all threads) over the window as a
//! percentage of one core, and VmRSS from /proc/PID/status at its end. The listener's CPU is
//! measured the same way, and the connections it accepted per second (completed handshakes;
//! a half-open check never reaches accept). `connects/s` is TCP ActiveOpens over the window:
//! the checks started. The bench runs in a network namespace of its own (loopback only, made
//! after HAProxy is installed), so that counter sees only the checker of the round. Nothing
//! else talks to either checker during the window. The bench fails if a checker's services
//! never all become healthy; the ratios are printed as they are. The whole run, 50,000
//! services included, takes about 4.5 minutes on the 2-core VM.
//!
//! Usage: `bench-health` (the above), or `bench-health --services N --period P [--rounds R]`
//! for one comparison (R rounds each, default 3), e.g. `--services 50000 --period 5`.
//! `LB_BIN` names the `lb` binary (default `target/release/lb`).

mod listener;
mod peers;
mod procs;
mod setup;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::listener::ListenerChild;
use crate::peers::{Configs, MAX_SERVICES, Peer, Plan, THREADS};
use lb_tests::bench::{Scratch, log_tail, version, workspace};

use crate::procs::{CpuTime, Memory, net_counter};

/// The measurement window.
const WINDOW: Duration = Duration::from_secs(25);
/// Pause between warm-up and window.
const SETTLE: Duration = Duration::from_secs(1);
/// Longest warm-up per second of Period (RS = 3 at P = 1 s needs about 3-4 s).
const WARM_UP_PER_PERIOD: Duration = Duration::from_secs(15);
/// How often the warm-up asks the checker, per second of Period (a status of 50,000
/// services costs the checker more to answer, and P = 5 s warms up five times slower).
const WARM_UP_POLL: Duration = Duration::from_millis(250);

/// One comparison: services, Period, rounds per peer.
#[derive(Clone, Copy)]
struct Part {
    services: usize,
    period: u64,
    rounds: usize,
}

const DEFAULT_PARTS: [Part; 2] = [
    Part {
        services: 10_000,
        period: 1,
        rounds: 3,
    },
    Part {
        services: 50_000,
        period: 5,
        rounds: 1,
    },
];

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, port] = args.as_slice()
        && flag == "--listener"
    {
        return listener::run(port.parse().context("--listener PORT")?);
    }
    let parts = parse_args(&args)?;
    let started = Instant::now();
    let lb_bin = std::env::var_os("LB_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/release/lb"));
    if !lb_bin.exists() {
        bail!(
            "{} is missing: build it with `cargo build --release -p lb-userspace`",
            lb_bin.display()
        );
    }
    let haproxy = setup::ensure_haproxy();
    // After the install (which needs the network) and before any process starts.
    let isolation = own_network_namespace();
    let nofile = raise_nofile()?;
    let scratch = Scratch::new("lb-bench-health")?;
    let mut listener = ListenerChild::spawn()?;
    println!(
        "bench health: TCP checks, T = 1 s, Rise 3, Fall 2, against 127.1.0.1 .. 127.1.x.y \
         port {}, all answered by one listener child (pid {}) on 0.0.0.0; RLIMIT_NOFILE {nofile}.",
        listener.port,
        listener.pid(),
    );
    match &isolation {
        Ok(()) => println!(
            "everything runs in a network namespace of its own (loopback only), so the TCP \
             counters count only the checker of the round."
        ),
        Err(e) => println!(
            "could not get a network namespace of its own ({e:#}): connects/s counts every \
             process of the machine."
        ),
    }
    println!(
        "lb: `{} run --config FILE` ({}), the health engine on its {THREADS}-worker Tokio \
         runtime, logs at warn.",
        lb_bin.display(),
        version(&lb_bin.display().to_string(), "--version"),
    );
    match &haproxy {
        Ok(()) => println!(
            "haproxy: {} -db, nbthread {THREADS} (= our runtime's workers; also HAProxy's \
             default here), 10,000 servers per backend, `check inter P fall 2 rise 3`, no logs.",
            version(setup::HAPROXY, "-v"),
        ),
        Err(why) => println!("haproxy: not measured: {why}"),
    }
    println!(
        "each round: a fresh process, warm-up until all healthy (ours: Preparing -> OK after \
         3 successes; HAProxy starts servers UP, so its warm-up ends at the first passed \
         check), {} s pause, {} s window; cpu = (utime + stime) / window of /proc/PID/stat \
         as % of one core; rss = VmRSS at the window's end.",
        SETTLE.as_secs(),
        WINDOW.as_secs(),
    );
    let peers: &[Peer] = match haproxy {
        Ok(()) => &[Peer::Lb, Peer::Haproxy],
        Err(_) => &[Peer::Lb],
    };
    let mut results: Vec<(Part, Vec<Sample>)> = Vec::new();
    for part in &parts {
        let plan = Plan {
            services: part.services,
            period: part.period,
            port: listener.port,
        };
        println!(
            "\n== {} services, P = {} s ({:.0} checks/s expected), {} round(s) per peer ==",
            fmt_int(part.services as f64),
            part.period,
            part.services as f64 / part.period as f64,
            part.rounds
        );
        let configs = Configs::write(&scratch, plan)?;
        println!("lb check-config: {}", configs.check_lb(&lb_bin)?);
        let mut samples = Vec::new();
        for round in 1..=part.rounds {
            for &peer in peers {
                let s = measure(&configs, peer, plan, round, &lb_bin, &mut listener)?;
                println!("{}", s.line(part.services));
                samples.push(s);
            }
        }
        print_medians(&samples, peers, part);
        results.push((*part, samples));
    }
    if let [(small, a), (large, b)] = results.as_slice() {
        print_scaling((small, a), (large, b), peers);
    }
    if parts.len() == 1 && parts[0].services == DEFAULT_PARTS[0].services {
        println!(
            "\nthe 50,000-service run: cargo run --release -p lb-tests --bin bench-health -- \
             --services 50000 --period 5"
        );
    }
    println!("\ntotal run time {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// No arguments: [`DEFAULT_PARTS`]; otherwise one part from `--services`, `--period`,
/// `--rounds`.
fn parse_args(args: &[String]) -> Result<Vec<Part>> {
    if args.is_empty() {
        return Ok(DEFAULT_PARTS.to_vec());
    }
    let mut part = Part {
        rounds: 3,
        ..DEFAULT_PARTS[0]
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .with_context(|| format!("{flag} needs a value"))?
            .parse::<usize>()
            .with_context(|| format!("{flag}: not a whole number"))?;
        match flag.as_str() {
            "--services" => part.services = value,
            "--period" => part.period = value as u64,
            "--rounds" => part.rounds = value,
            other => bail!(
                "unknown argument {other}; usage: bench-health [--services N] [--period SECONDS] \
                 [--rounds R]"
            ),
        }
    }
    if !(1..=MAX_SERVICES).contains(&part.services) {
        bail!("--services must be 1 ..= {MAX_SERVICES}");
    }
    if !(1..=60).contains(&part.period) || !(1..=20).contains(&part.rounds) {
        bail!("--period must be 1 ..= 60 and --rounds 1 ..= 20");
    }
    Ok(vec![part])
}

/// What one round of one peer measured.
struct Sample {
    peer: Peer,
    round: usize,
    warm_up: Duration,
    /// Seconds of the window.
    wall: f64,
    cpu: CpuTime,
    memory: Memory,
    listener_cpu: CpuTime,
    accepted: u64,
    connects: u64,
    listen_drops: u64,
    ok_at_end: usize,
    note: Option<String>,
}

impl Sample {
    fn pct(&self, t: f64) -> f64 {
        t / self.wall * 100.0
    }
    fn cpu_pct(&self) -> f64 {
        self.pct(self.cpu.total())
    }
    fn rss_mib(&self) -> f64 {
        mib(self.memory.rss)
    }
    fn listener_pct(&self) -> f64 {
        self.pct(self.listener_cpu.total())
    }
    fn handshakes(&self) -> f64 {
        self.accepted as f64 / self.wall
    }
    fn connects(&self) -> f64 {
        self.connects as f64 / self.wall
    }

    fn line(&self, services: usize) -> String {
        let mut s = format!(
            "round {} {:<8} warm-up {:>4.1} s | cpu {:>5.1}% (user {:.1}%, sys {:.1}%) | rss \
             {:>6.1} MiB (anon {:.1}, peak {:.1}) | connects {:>6}/s | listener cpu {:>4.1}%, handshakes \
             {:>6}/s | healthy at end {}/{}",
            self.round,
            self.peer.name(),
            self.warm_up.as_secs_f64(),
            self.cpu_pct(),
            self.pct(self.cpu.user),
            self.pct(self.cpu.system),
            self.rss_mib(),
            mib(self.memory.anon),
            mib(self.memory.peak),
            fmt_int(self.connects()),
            self.listener_pct(),
            fmt_int(self.handshakes()),
            self.ok_at_end,
            services,
        );
        if self.listen_drops > 0 {
            s += &format!(" | listen drops {}", self.listen_drops);
        }
        if let Some(note) = &self.note {
            s += &format!(" | {note}");
        }
        s
    }
}

/// One round of `peer`: start, warm up, measure the window, read the health, stop.
fn measure(
    configs: &Configs,
    peer: Peer,
    plan: Plan,
    round: usize,
    lb_bin: &Path,
    listener: &mut ListenerChild,
) -> Result<Sample> {
    let mut running = configs.start(peer, lb_bin)?;
    let limit = WARM_UP_PER_PERIOD * plan.period as u32;
    let mut last = Err(anyhow::anyhow!("not asked yet"));
    while running.guard.started.elapsed() < limit {
        running.guard.check_alive()?;
        last = running.health();
        if matches!(&last, Ok(h) if h.ok == plan.services) {
            break;
        }
        std::thread::sleep(WARM_UP_POLL * plan.period as u32);
    }
    let warm_up = running.guard.started.elapsed();
    match &last {
        Ok(h) if h.ok == plan.services => {}
        Ok(h) => bail!(
            "{}: only {}/{} services healthy after {:.0} s ({}): the window would not measure \
             the steady state; end of its log:\n{}",
            peer.name(),
            h.ok,
            plan.services,
            warm_up.as_secs_f64(),
            h.detail,
            log_tail(&running.guard.log, 15)
        ),
        Err(e) => bail!(
            "{}: its health could not be read within {:.0} s ({e:#}); end of its log:\n{}",
            peer.name(),
            warm_up.as_secs_f64(),
            log_tail(&running.guard.log, 15)
        ),
    }
    let note = running.profile_note();
    std::thread::sleep(SETTLE);

    let pid = running.guard.pid();
    let counters = || -> Result<(u64, u64)> {
        let connects = net_counter("/proc/net/snmp", "Tcp", "ActiveOpens")?;
        let drops = net_counter("/proc/net/netstat", "TcpExt", "ListenDrops")?;
        Ok((connects, drops))
    };
    let (cpu0, lcpu0, acc0, (conn0, drop0), t0) = (
        CpuTime::of(pid)?,
        CpuTime::of(listener.pid())?,
        listener.accepted()?,
        counters()?,
        Instant::now(),
    );
    std::thread::sleep(WINDOW);
    let (cpu1, lcpu1, acc1, (conn1, drop1), wall) = (
        CpuTime::of(pid)?,
        CpuTime::of(listener.pid())?,
        listener.accepted()?,
        counters()?,
        t0.elapsed(),
    );
    let memory = Memory::of(pid)?;
    running.guard.check_alive()?;
    // Read after the window, so that this reading is not counted as the checker's work.
    let end = running.health()?;
    let warnings = log_warnings(&running.guard.log);
    running.guard.stop();
    Ok(Sample {
        peer,
        round,
        warm_up,
        wall: wall.as_secs_f64(),
        cpu: cpu0.until(cpu1),
        memory,
        listener_cpu: lcpu0.until(lcpu1),
        accepted: acc1.saturating_sub(acc0),
        connects: conn1.saturating_sub(conn0),
        listen_drops: drop1.saturating_sub(drop0),
        ok_at_end: end.ok,
        note: [
            (end.ok < plan.services).then(|| format!("at end: {}", end.detail)),
            note,
            warnings,
        ]
        .into_iter()
        .flatten()
        .reduce(|a, b| format!("{a} | {b}")),
    })
}

/// The warnings and errors a checker logged (HAProxy's `[WARNING]`/`[ALERT]`, our `WARN`/
/// `ERROR`): how many, and the first.
fn log_warnings(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let bad: Vec<&str> = text
        .lines()
        .filter(|l| {
            ["[WARNING]", "[ALERT]", " WARN ", " ERROR "]
                .iter()
                .any(|w| l.contains(w))
        })
        .collect();
    let first: String = bad.first()?.chars().take(200).collect();
    Some(format!(
        "log: {} warning line(s), first: {first}",
        bad.len()
    ))
}

/// Medians of one figure over a peer's rounds.
struct Medians {
    cpu: f64,
    rss: f64,
    listener: f64,
    handshakes: f64,
    connects: f64,
    warm_up: f64,
}

impl Medians {
    fn of(samples: &[Sample], peer: Peer) -> Option<Self> {
        let mine: Vec<&Sample> = samples.iter().filter(|s| s.peer == peer).collect();
        if mine.is_empty() {
            return None;
        }
        let m = |f: &dyn Fn(&Sample) -> f64| median(mine.iter().map(|s| f(s)).collect());
        Some(Self {
            cpu: m(&Sample::cpu_pct),
            rss: m(&Sample::rss_mib),
            listener: m(&Sample::listener_pct),
            handshakes: m(&Sample::handshakes),
            connects: m(&Sample::connects),
            warm_up: m(&|s| s.warm_up.as_secs_f64()),
        })
    }
}

fn print_medians(samples: &[Sample], peers: &[Peer], part: &Part) {
    println!("medians over {} round(s):", part.rounds);
    for &peer in peers {
        if let Some(m) = Medians::of(samples, peer) {
            println!(
                "  {:<8} cpu {:>5.1}% | rss {:>6.1} MiB ({:.0} bytes per service) | connects \
                 {:>6}/s | listener cpu {:>4.1}%, handshakes {:>6}/s | warm-up {:.1} s",
                peer.name(),
                m.cpu,
                m.rss,
                m.rss * 1024.0 * 1024.0 / part.services as f64,
                fmt_int(m.connects),
                m.listener,
                fmt_int(m.handshakes),
                m.warm_up,
            );
        }
    }
    let (Some(ours), Some(theirs)) = (
        Medians::of(samples, Peer::Lb),
        Medians::of(samples, Peer::Haproxy),
    ) else {
        println!("cpu ratio vs haproxy: not measured\nrss ratio vs haproxy: not measured");
        return;
    };
    let label = if part.services == DEFAULT_PARTS[0].services && part.period == 1 {
        String::new()
    } else {
        format!(
            " ({} services, P = {} s)",
            fmt_int(part.services as f64),
            part.period
        )
    };
    println!("cpu ratio vs haproxy{label}: {:.2}", ours.cpu / theirs.cpu);
    println!("rss ratio vs haproxy{label}: {:.2}", ours.rss / theirs.rss);
    println!("(targets: both <= 1.00; ours / haproxy, medians)");
}

/// How each peer's figures moved from the small part to the large one.
fn print_scaling(small: (&Part, &[Sample]), large: (&Part, &[Sample]), peers: &[Peer]) {
    let (sp, ss) = small;
    let (lp, ls) = large;
    println!(
        "\nscaling {} services at P = {} s -> {} at P = {} s (the same check rate):",
        fmt_int(sp.services as f64),
        sp.period,
        fmt_int(lp.services as f64),
        lp.period
    );
    let added = lp.services.saturating_sub(sp.services).max(1) as f64;
    for &peer in peers {
        let (Some(a), Some(b)) = (Medians::of(ss, peer), Medians::of(ls, peer)) else {
            continue;
        };
        println!(
            "  {:<8} cpu {:.1}% -> {:.1}% (x{:.2}; per 1,000 connects/s {:.2}% -> {:.2}%) | rss \
             {:.1} -> {:.1} MiB (x{:.2}; {:.0} bytes per added service)",
            peer.name(),
            a.cpu,
            b.cpu,
            b.cpu / a.cpu,
            a.cpu / (a.connects / 1000.0),
            b.cpu / (b.connects / 1000.0),
            a.rss,
            b.rss,
            b.rss / a.rss,
            (b.rss - a.rss) * 1024.0 * 1024.0 / added,
        );
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// A whole number with thousands separators.
fn fmt_int(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Moves this process (single-threaded here, so all of it) into a new network namespace with
/// only loopback, up; the processes it starts afterwards inherit it. /proc/net/snmp read
/// from here then counts only their connections.
fn own_network_namespace() -> Result<()> {
    // SAFETY: unshare(2) with CLONE_NEWNET only changes this thread's network namespace; no
    // other thread exists yet.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error()).context("unshare(CLONE_NEWNET)");
    }
    let up = Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status()
        .context("running `ip link set lo up`")?;
    if !up.success() {
        bail!("`ip link set lo up` failed ({up}) in the new network namespace");
    }
    Ok(())
}

/// Descriptors wanted: HAProxy asks for 2 x maxconn plus one per checked server and more
/// (58,219 with 50,000 servers) and does not raise the hard limit itself.
const NOFILE_WANTED: u64 = 262_144;

/// Raises RLIMIT_NOFILE (soft and, as root may, hard) to [`NOFILE_WANTED`], or the soft limit
/// to the hard one when the hard one cannot move; the children inherit it. Returns the new
/// soft limit.
fn raise_nofile() -> Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read or write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(std::io::Error::last_os_error()).context("getrlimit");
        }
        let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(NOFILE_WANTED);
        let wanted = NOFILE_WANTED.min(nr_open).max(limit.rlim_max);
        let raised = libc::rlimit {
            rlim_cur: wanted,
            rlim_max: wanted,
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
            return Ok(wanted);
        }
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
            return Err(std::io::Error::last_os_error()).context("setrlimit");
        }
    }
    Ok(limit.rlim_cur)
}
