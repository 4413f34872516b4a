//! `cargo xtask soak [--minutes N] [--seed S]`: a long run of the namespace
//! topology under real load and a fault schedule, with invariant checks. Needs root.
//!
//! Topology: client, balancer and five backend namespaces (b1..b5, DSR links to b1..b5).
//! vServices: `web` (HTTP on 10.10.0.1:80: mains w1..w3, backups w4 then w5, cookie
//! persistence, the Conditional set `api` for `/api/` with mains w2, w3 and backup w5),
//! `tcp` (L7 TCP on 10.10.0.1:9000 over t1..t3), `nat` (TCP NAT 10.99.0.12:9100 over
//! n1..n3), `udp` (UDP NAT 10.99.0.12:5300 over u1..u3), `dsr` (TCP DSR 10.99.0.13:7000
//! over d1..d3). Every backend answers with its own name.
//!
//! Load (client namespace, one runtime): HTTP keep-alive, new-connection and cookie clients
//! on `/`, a keep-alive client on `/api/x`; on tcp, nat and dsr two long-lived echo streams
//! (a line every 200 ms, echoed within 3 s) and a client opening a connection per exchange;
//! UDP request/response every 20 ms. Faults (see `faults.rs`): one at a time from a printed
//! seed, every 5-10 s, from 10 s after the start until 10 s before the end.
//!
//! How each invariant is decided (after the run, from the records):
//! - S-MT3: a Maintenance call's interval runs from the moment its "on" call answered to the
//!   moment the "off" call was sent. Any HTTP request (either list) or L7 TCP connection or
//!   stream *sent* in that interval and answered by that server is a violation. No
//!   tolerance: the API answers once traffic follows the change. Records are stamped in
//!   whole milliseconds, so the interval starts with the millisecond after the answer's (a
//!   request stamped in the same one may have been sent before the answer).
//! - S-BK1 / S-BK3 (HTTP, per answer from a backup): the daemon's own lists are polled from
//!   `GET /api/v1/vservices/web` every 100 ms (what the proxy follows; a returning main is
//!   not "available" until the daemon's list shows it eligible, so the reflection delays are
//!   already in it). An answer from member X of list L (sent at s, answered at d) is judged
//!   against the snapshots from the last one answered by s - 300 ms to the first one asked
//!   after d + 300 ms, when no two of them are more than 600 ms apart (else it is counted
//!   as not judged: a daemon restart, a slow API). It is judged only when every one of them
//!   has X with the backup role, and is fine when any of them has X eligible. Otherwise it
//!   is an S-BK1 violation when every one of them has a main eligible, and an S-BK3
//!   violation when every one of them has another backup eligible. Besides, every snapshot
//!   whose list serves from its backups must have exactly one eligible member (S-BK3).
//! - Established L4 flows: a nat or dsr stream that is cut (reset, closed or not echoed in
//!   3 s) is a violation unless its own backend was killed or made silent by a fault that
//!   started before the cut and ended at most 5 s before it. A reload, SIGHUP, weight
//!   change, upgrade or kill -9 of `lb run` must not cut them.
//! - `lb run` dying on its own (not killed by the schedule) is a violation.
//!
//! Failures are counted per vService with their reason and blamed on the latest fault that
//! can touch that vService, started before them and ended at most 15 s before them (an
//! upgrade: 45 s, its old process's drain timeout on top); the report separates failures
//! outside any fault, failures under a fault the balancer covers (retry, drain, data path
//! kept across restarts) and failures under a fault it cannot cover (L7 traffic through a
//! killed `lb run`, new Network flows to a dead backend before its removal).
//!
//! Output: the report on stdout (last line `invariant violations: N`), and in the output
//! directory (default `target/soak`) `report.txt`, `samples.csv` (RSS, fds, XDP table each
//! second), `failures.csv` (every failure and cut stream, with the fault it is blamed on),
//! `lb-run.log` (every `lb run`'s log) and `soak.png`. Exit status 1 on any violation.

mod abuse;
mod api;
mod backends;
mod config;
mod daemon;
mod events;
mod faults;
mod invariants;
mod lists;
mod load;
mod report;
mod rt;
mod sampler;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lb_tests::netns::{Topology, TopologyOptions, require_data_path};
use tokio::sync::watch;

use crate::abuse::AbuseTally;
use crate::backends::Backend;
use crate::config::{
    BACKENDS, DSR_PORT, DSR_VIP, L7_ADDR, NAT_PORT, NAT_VIP, TCP_PORT, UDP_PORT, Variant, WEB_PORT,
};
use crate::daemon::DaemonCtl;
use crate::events::{Log, Vs, now_ms};
use crate::faults::{Ctx, FaultKind, Rng};
use crate::load::{HttpMode, Tally};
use crate::rt::NsRuntime;

/// What the command line asks.
struct Options {
    minutes: f64,
    seed: u64,
    out: PathBuf,
    faults: Vec<FaultKind>,
}

/// How long after a hostile burst ends its memory may still be held: the balancer closes
/// slowloris connections at its client timeout, and hands freed memory back once usage has
/// stayed low for 5 s (`lb run`'s trim).
const BURST_SETTLE_MS: u64 = 10_000;

/// How long a daemon process started after the run's warm-up (an upgrade, a restart after
/// kill -9) warms up before its memory is measured: under the soak's load a new process's
/// heap rises for about 30 s (buffer pools, idle backend connections, the allocator's
/// arenas) and then levels off.
const PROCESS_WARM_MS: u64 = 30_000;

const USAGE: &str = "usage: soak [--minutes N] [--seed S] [--out DIR] [--faults KIND,...]";

fn options() -> Result<Options> {
    let mut o = Options {
        minutes: 10.0,
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
        out: lb_tests::netns::lbctl::repo_root().join("target/soak"),
        faults: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .with_context(|| format!("{a} needs a value; {USAGE}"))
        };
        match a.as_str() {
            "--minutes" => {
                let v = value()?;
                o.minutes = v
                    .parse()
                    .ok()
                    .filter(|m: &f64| *m >= 0.5 && *m <= 24.0 * 60.0)
                    .with_context(|| format!("--minutes {v}: a number of minutes from 0.5"))?;
            }
            "--seed" => {
                let v = value()?;
                o.seed = v
                    .parse()
                    .with_context(|| format!("--seed {v}: a whole number"))?;
            }
            "--out" => o.out = PathBuf::from(value()?),
            "--faults" => o.faults = FaultKind::parse_list(&value()?)?,
            other => bail!("unknown argument {other}; {USAGE}"),
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    let result = options().and_then(|o| run(&o));
    match result {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("soak: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The load tasks on the client runtime.
fn start_load(
    client: &NsRuntime,
    log: &Log,
    tally: &Arc<Tally>,
    stop: &watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let web: SocketAddr = (L7_ADDR, WEB_PORT).into();
    let tcp: SocketAddr = (L7_ADDR, TCP_PORT).into();
    let nat: SocketAddr = (NAT_VIP, NAT_PORT).into();
    let dsr: SocketAddr = (DSR_VIP, DSR_PORT).into();
    let udp: SocketAddr = (NAT_VIP, UDP_PORT).into();
    let mut tasks = Vec::new();
    for (vs, path, mode) in [
        (Vs::Web, "/", HttpMode::KeepAlive),
        (Vs::Web, "/", HttpMode::KeepAlive),
        (Vs::Web, "/", HttpMode::NewConnection),
        (Vs::Web, "/", HttpMode::Cookie),
        (Vs::WebApi, "/api/x", HttpMode::KeepAlive),
    ] {
        tasks.push(client.spawn(load::http_client(
            web,
            vs,
            path,
            mode,
            log.clone(),
            tally.clone(),
            stop.clone(),
        )));
    }
    for (vs, addr) in [(Vs::Tcp, tcp), (Vs::Nat, nat), (Vs::Dsr, dsr)] {
        for _ in 0..2 {
            tasks.push(client.spawn(load::stream_client(addr, vs, log.clone(), stop.clone())));
        }
        tasks.push(client.spawn(load::connection_client(addr, vs, log.clone(), stop.clone())));
    }
    tasks.push(client.spawn(load::udp_client(udp, log.clone(), stop.clone())));
    tasks
}

/// The harness routes everything a backend sends to the client over the direct DSR link;
/// here NAT replies (from the backend's own address) must go back through the balancer, so
/// only packets from the DSR VIP take the direct link (a policy rule and table 100).
fn dsr_replies_only(topo: &Topology) -> Result<()> {
    let client = lb_tests::netns::CLIENT_ADDR.to_string() + "/32";
    for (i, b) in topo.backends.iter().enumerate() {
        let via = format!("10.12.{}.1", i + 1);
        b.ns.ip(&["route", "del", &client])?;
        b.ns.ip(&[
            "route", "add", &client, "via", &via, "dev", "dsr0", "table", "100",
        ])?;
        b.ns.ip(&["rule", "add", "from", &DSR_VIP.to_string(), "table", "100"])?;
    }
    Ok(())
}

/// Waits until the HTTP Default list serves from its three mains and a NAT flow answers.
fn wait_ready(balancer: &NsRuntime, client: &NsRuntime) -> Result<()> {
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < Duration::from_secs(40) {
        let mains = balancer.run(Duration::from_secs(3), async {
            let Ok((200, v)) = api::call("GET", "/api/v1/vservices/web", None).await else {
                return 0;
            };
            v["lists"][0]["members"]
                .as_array()
                .map_or(0, |m| m.iter().filter(|m| m["state"] == "eligible").count())
        });
        let nat: SocketAddr = (NAT_VIP, NAT_PORT).into();
        let flows = client.run(Duration::from_secs(5), async move {
            tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(nat))
                .await
                .is_ok_and(|c| c.is_ok())
        });
        if matches!(mains, Ok(3)) && matches!(flows, Ok(true)) {
            return Ok(());
        }
        last = format!(
            "eligible members of web's Default list: {mains:?}; a NAT connection: {flows:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    bail!("the vServices did not become ready within 40 s ({last})")
}

fn run(o: &Options) -> Result<usize> {
    now_ms();
    require_data_path()?;
    let total_ms = (o.minutes * 60_000.0) as u64;
    let warm_ms = (total_ms / 5).max(30_000).min(total_ms / 2);
    println!(
        "soak seed: {} ({} min; rerun with --seed {})",
        o.seed, o.minutes, o.seed
    );
    std::fs::create_dir_all(&o.out).with_context(|| format!("creating {}", o.out.display()))?;

    let topo = Topology::new(&TopologyOptions {
        backends: BACKENDS,
        dsr_vip: Some(DSR_VIP),
    })?;
    dsr_replies_only(&topo)?;
    let client = NsRuntime::start(&topo.client.path(), "client")?;
    let balancer = NsRuntime::start(&topo.balancer.path(), "balancer")?;
    let mut backends = Vec::new();
    for (i, b) in topo.backends.iter().enumerate() {
        let backend = Backend::new(i + 1, NsRuntime::start(&b.ns.path(), &b.name)?);
        backend.start()?;
        backends.push(backend);
    }
    let config_path = topo.work_dir.join("soak.toml");
    let base = config::text(&topo, Variant::Base);
    lb::config::parse(&base, "soak config").map_err(|e| anyhow::anyhow!("{e}"))?;
    std::fs::write(&config_path, &base)?;
    let mut daemon = DaemonCtl::new(&topo, &config_path);
    daemon.start(&balancer)?;
    if let Err(e) = wait_ready(&balancer, &client) {
        let status = topo.lb_status_text().unwrap_or_else(|e| format!("{e:#}"));
        bail!("{e:#}\nlb status:\n{status}\nlog:\n{}", daemon.log_tail());
    }
    println!(
        "ready after {:.1} s; load and faults start",
        now_ms() as f64 / 1000.0
    );

    let run_start = now_ms();
    let until = run_start + total_ms;
    let (stop_tx, stop_rx) = watch::channel(false);
    let log = Log::default();
    let tally = Arc::new(Tally::default());
    let snaps = lists::Snapshots::default();
    let poller = balancer.spawn(lists::poll(snaps.clone(), stop_rx.clone()));
    let sampler = sampler::Sampler::start(daemon.pid.clone(), &topo.pin_dir);
    let tasks = start_load(&client, &log, &tally, &stop_rx);
    std::thread::sleep(Duration::from_secs(10));

    let abuse = Arc::new(AbuseTally::default());
    let mut rng = Rng::new(o.seed);
    let api_times;
    let outcome = {
        let mut ctx = Ctx {
            topo: &topo,
            backends: &backends,
            balancer: &balancer,
            client: &client,
            daemon: &mut daemon,
            config: config_path.clone(),
            abuse: abuse.clone(),
            api_times: Default::default(),
        };
        let out = faults::run(&mut ctx, &mut rng, &o.faults, until);
        api_times = ctx.api_times.take();
        out
    };
    while now_ms() < until {
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = stop_tx.send(true);
    let stopping = Instant::now();
    while !(tasks.iter().all(|t| t.is_finished()) && poller.is_finished())
        && stopping.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let unfinished = tasks.iter().filter(|t| !t.is_finished()).count();
    let samples = sampler.finish();
    let alive_at_end = daemon.alive();
    let log_errors = daemon.log_errors();
    let slow_exits = daemon.slow_exits;
    daemon.stop();

    let events = log.all();
    let snapshots = snaps.all();
    let findings = invariants::check(&events, &snapshots, &outcome.records, &outcome.mt);
    let mut violations = findings.violations.clone();
    for (at, tail) in &outcome.deaths {
        violations.push(invariants::Violation {
            rule: "daemon",
            at: *at,
            what: format!("lb run exited on its own; log tail: {tail}"),
        });
    }
    if !alive_at_end {
        violations.push(invariants::Violation {
            rule: "daemon",
            at: now_ms(),
            what: "lb run was not running at the end".into(),
        });
    }

    let mut text = String::new();
    let _ = writeln!(
        text,
        "soak report: seed {}, {:.1} min of load, warm-up {:.0} s",
        o.seed,
        total_ms as f64 / 60_000.0,
        warm_ms as f64 / 1000.0
    );
    let _ = writeln!(text, "{}", report::faults(&outcome.records));
    for e in &outcome.errors {
        let _ = writeln!(text, "fault not applied as planned: {e}");
    }
    text += &report::vservices(&report::figures(&events, &outcome.records, &snapshots));
    let _ = writeln!(
        text,
        "HTTP requests resent after a reused keep-alive connection closed under them: {}",
        tally.keepalive_resent.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        text,
        "slowloris: {} opened, {} closed by the balancer; malformed: {} sent, {} answered 4xx, {} closed without answer, {} answered otherwise",
        abuse.slow_opened.load(Ordering::Relaxed),
        abuse.slow_closed.load(Ordering::Relaxed),
        abuse.bad_sent.load(Ordering::Relaxed),
        abuse.bad_4xx.load(Ordering::Relaxed),
        abuse.bad_closed.load(Ordering::Relaxed),
        abuse.bad_other.load(Ordering::Relaxed)
    );
    // Samples are stamped from the soak's start; warm-up counts from the load's start.
    let warm_at = run_start + warm_ms;
    // While hostile clients hold connections open (and until the daemon has closed them
    // and handed their memory back) the figures measure the burst, not growth.
    let burst = |at: u64| {
        outcome.records.iter().any(|f| {
            matches!(f.kind, FaultKind::Slowloris | FaultKind::Malformed)
                && f.start <= at
                && at <= f.end + BURST_SETTLE_MS
        })
    };
    match sampler::growth(&samples, warm_at, PROCESS_WARM_MS.min(warm_ms), &burst) {
        Some(g) => {
            let _ = writeln!(
                text,
                "lb run memory (longest-lived process, pid {}, {:.0} s after its warm-up; first and last figures outside slowloris and malformed bursts): RSS {:.1} -> {:.1} MiB ({:+.1}%; over its second half {:+.1}%; peak {:.1} MiB), of which heap (RssAnon) {:.1} -> {:.1} MiB ({:+.1}%), open fds {} -> {} (range {}..{})",
                g.pid,
                g.seconds,
                g.rss_first as f64 / 1024.0,
                g.rss_last as f64 / 1024.0,
                g.rss_percent(),
                g.rss_second_half_percent(),
                g.rss_peak as f64 / 1024.0,
                g.anon_first_last.0 as f64 / 1024.0,
                g.anon_first_last.1 as f64 / 1024.0,
                g.anon_percent(),
                g.fds_first_last.0,
                g.fds_first_last.1,
                g.fds.0,
                g.fds.1
            );
        }
        None => {
            let _ = writeln!(
                text,
                "lb run memory: no process lived 20 s past warm-up; see samples.csv"
            );
        }
    }
    if !api_times.is_empty() {
        let mut ms: Vec<u64> = api_times.iter().map(|a| a.1).collect();
        ms.sort_unstable();
        let slowest = api_times.iter().max_by_key(|a| a.1).map(|a| a.0.clone());
        let _ = writeln!(
            text,
            "API writes (Maintenance, Backup, weight, reload): {}, answered in median {} ms, 90th percentile {} ms, max {} ms ({})",
            ms.len(),
            ms[ms.len() / 2],
            ms[ms.len() * 9 / 10],
            ms[ms.len() - 1],
            slowest.unwrap_or_default()
        );
    }
    let peaks: Vec<String> = sampler::peaks(&samples)
        .iter()
        .map(|(_, kb)| format!("{:.1}", *kb as f64 / 1024.0))
        .collect();
    let _ = writeln!(
        text,
        "lb run peak RSS of each process in turn (MiB): {}",
        peaks.join(", ")
    );
    let conns: Vec<u64> = samples.iter().filter_map(|s| s.conns).collect();
    let _ = writeln!(
        text,
        "XDP connection table (65536 entries): {} samples, max {} entries, last {}",
        conns.len(),
        conns.iter().max().copied().unwrap_or(0),
        conns.last().copied().unwrap_or(0)
    );
    let _ = writeln!(
        text,
        "lb run log lines with ERROR or a panic: {}{}",
        log_errors.len(),
        log_errors
            .iter()
            .take(5)
            .map(|l| format!("\n  {l}"))
            .collect::<String>()
    );
    if slow_exits > 0 || unfinished > 0 {
        let _ = writeln!(
            text,
            "upgraded processes still running 40 s later: {slow_exits}; clients not stopped in 20 s: {unfinished}"
        );
    }
    let _ = writeln!(
        text,
        "invariant checks: {} API snapshots; {} answers from a backup judged, {} across a snapshot gap not judged; {} Maintenance intervals",
        findings.snapshots,
        findings.backup_answers_judged,
        findings.backup_answers_unjudged,
        outcome.mt.len()
    );
    for v in violations.iter().take(20) {
        let _ = writeln!(
            text,
            "VIOLATION {} at {:.1} s: {}",
            v.rule,
            v.at as f64 / 1000.0,
            v.what
        );
    }
    let _ = writeln!(text, "invariant violations: {}", violations.len());

    if let Err(e) = sampler::write_csv(&o.out, &samples) {
        eprintln!("soak: {e:#}");
    }
    let restarts: Vec<u64> = outcome
        .records
        .iter()
        .filter(|r| matches!(r.kind, FaultKind::Upgrade | FaultKind::DaemonKill))
        .map(|r| r.start)
        .collect();
    let title = format!(
        "soak, seed {}, {:.0} min (grey: lb run restarts)",
        o.seed, o.minutes
    );
    if let Err(e) = sampler::plot(&o.out, &samples, &restarts, &title) {
        eprintln!("soak: no plot: {e:#}");
    }
    std::fs::write(o.out.join("report.txt"), &text)?;
    let _ = std::fs::copy(topo.work_dir.join("run.log"), o.out.join("lb-run.log"));
    std::fs::write(
        o.out.join("failures.csv"),
        report::failures_csv(&events, &outcome.records),
    )?;
    print!("{text}");
    drop(client);
    drop(balancer);
    drop(backends);
    Ok(violations.len())
}
