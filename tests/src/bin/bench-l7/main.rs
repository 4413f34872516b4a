//! `cargo xtask bench l7`: this project's HTTP proxy against HAProxy and nginx in front of
//! the same backend, on loopback, under the same wrk load, then the Maintenance run (S-MT1
//! under load).
//!
//! Each system runs `rounds` times, alternating systems and rotating which goes first, and
//! the median of each figure is reported with the ratios ours / theirs, then the ratios
//! within each round (geometric means, 95% confidence intervals) and a p99 verdict that
//! calls a difference only when its interval lies on one side of 1. Every round starts
//! each proxy afresh and warms it up: a proxy's upstream connections land on the backend's
//! two worker processes by the backend's accept race, and that split (say 61/3 or 37/27),
//! kept as long as the proxy keeps its connections, moved a proxy's p99 by up to a third
//! between otherwise identical runs. Fresh connections (and fresh thread placement) each
//! round make the medians average over that draw instead of resting on one.
//!
//! Each round measures every proxy twice: saturated (wrk's connections back to back, which
//! gives the request rate a proxy can carry) and then below saturation (each connection
//! pausing a few milliseconds after every response). Saturated, every request waits in the
//! queue in front of whichever process on the shared CPUs is slowest, so the latency says
//! more about that queue than about the proxy; below saturation the proxies' latencies are
//! compared at about the same request rate, which is how an operator meets them.
//!
//! Each round then measures, on the same process, the TLS, HTTP/2 and idle-connection
//! cases: first 10,000 idle keep-alive connections held open by the bench beside a steady
//! wrk load on 16 others (memory per idle connection = the proxy's RSS growth / 10,000, and
//! the active requests' p99; first, so that no proxy has pooled memory from the bigger
//! loads that follow), then, all over TLS 1.3 with the bench's ECDSA P-256 certificate
//! after a TLS warm-up, HTTPS with keep-alive (wrk on https://), HTTPS handshakes (wrk with
//! `Connection: close`: one request per connection, so new TLS connections per second and
//! CPU per handshake) and HTTP/2 over TLS (h2load, 100 streams on each of 16 connections).
//!
//! Then a Maintenance run counts the requests that fail while Maintenance moves between two
//! Backend Services every second (must be 0). A peer that cannot run (a package missing, a
//! process that does not start) is listed as not measured and the rest still runs; no figure
//! is printed that was not measured. The markdown report is also written to
//! `target/bench/l7.md`.
//!
//! Settings (environment): `LB_BIN` (default `target/release/lb`), `LB_BENCH_ROUNDS` (9;
//! `BENCH_ROUNDS` when it is not set),
//! `LB_BENCH_DURATION` seconds per run (6), `LB_BENCH_CONNECTIONS` (64),
//! `LB_BENCH_THREADS` wrk threads (2), `LB_BENCH_THINK_MS` the pause below saturation (1;
//! 0 skips those runs), `LB_BENCH_CASES` a comma-separated subset of `plain`, `https`,
//! `handshake`, `h2`, `idle` (all).

mod cases;
mod cert;
mod h2load;
mod idle;
mod maint;
mod peers;
mod procs;
mod report;
mod round;
mod setup;
mod wrk;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::cases::{Case, Selection};
use crate::cert::Cert;
use crate::peers::{Ports, local};
use lb_tests::bench::{Guard, Scratch, version, workspace};

use crate::procs::cpu_time;
use crate::report::{Report, SystemFigures};
use crate::wrk::{Load, WrkResult};

/// Shortest Maintenance run.
const MAINT_RUN: Duration = Duration::from_secs(10);
/// Length of the unrecorded warm-up run of each system.
const WARM_UP: Duration = Duration::from_secs(2);

/// A proxy under test.
struct System {
    name: &'static str,
    port: u16,
    /// Its TLS listener.
    tls_port: u16,
    /// The running process; None between a stop and the next start.
    guard: Option<Guard>,
    /// Runs with wrk's connections back to back (the proxy saturated).
    full: Runs,
    /// Runs with a pause per connection (below saturation).
    paced: Runs,
    /// The TLS, HTTP/2 and idle-connection cases, in [`Case::ALL`] order.
    cases: [Runs; 4],
    broken: Option<String>,
}

/// One kind of run of one system, round after round.
#[derive(Default)]
struct Runs {
    runs: Vec<WrkResult>,
    /// The round of each run.
    rounds: Vec<u64>,
    /// CPU microseconds the proxy spent per request, per run (when /proc could tell).
    cpu_us: Vec<f64>,
    /// The idle case: the proxy's RSS growth per idle connection, KiB, per run.
    mem_kib: Vec<f64>,
    /// The idle case: the proxy's whole RSS with the idle connections open, MiB, per run.
    rss_mib: Vec<f64>,
    /// Why this case stopped being measured for this system (the others go on).
    broken: Option<String>,
}

impl Runs {
    fn push(&mut self, (r, cpu): (WrkResult, Option<f64>), round: u64) {
        self.runs.push(r);
        self.rounds.push(round);
        self.cpu_us.extend(cpu);
    }

    fn figures(&self, name: &'static str) -> SystemFigures {
        SystemFigures::new(name, &self.runs, &self.rounds, &self.cpu_us)
            .with_memory(&self.mem_kib, &self.rss_mib)
    }
}

/// One recorded wrk run against `s` (already started and warmed up), printed as it ends:
/// what wrk measured and the proxy's CPU time per request.
fn measure(
    s: &mut System,
    load: Load,
    pacing: Option<&wrk::Pacing>,
    label: &str,
) -> Result<(WrkResult, Option<f64>)> {
    let port = s.port;
    let suffix = pacing.map_or(String::new(), |p| format!("  (think {} ms)", p.think_ms));
    measure_with(s, label, &suffix, || wrk::run(load, local(port), pacing))
}

/// One recorded run made by `run` against `s`, printed as it ends: what the load generator
/// measured and the proxy's CPU time per request (per connection in the handshake case).
fn measure_with(
    s: &mut System,
    label: &str,
    suffix: &str,
    run: impl FnOnce() -> Result<WrkResult>,
) -> Result<(WrkResult, Option<f64>)> {
    let guard = s
        .guard
        .as_mut()
        .with_context(|| format!("{} is not running", s.name))?;
    let cpu_before = cpu_time(guard);
    let r = run()?;
    let cpu = cpu_before
        .zip(cpu_time(guard))
        .filter(|_| r.requests > 0)
        .map(|(a, b)| b.saturating_sub(a).as_secs_f64() * 1e6 / r.requests as f64);
    println!(
        "{label} {:<8} {:>10.0} req/s  p50 {:.3} ms  p99 {:.3} ms  failed {}  \
         proxy cpu {} us/request{suffix}",
        s.name,
        r.rps,
        r.p50_ms,
        r.p99_ms,
        r.failed(),
        cpu.map_or("?".into(), |c| format!("{c:.1}")),
    );
    Ok((r, cpu))
}

fn env_num(name: &str, default: u64) -> Result<u64> {
    match std::env::var(name) {
        Ok(v) => match v.parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => bail!("{name}={v:?}: expected a positive integer"),
        },
        Err(_) => Ok(default),
    }
}

/// Like [`env_num`], but 0 turns the feature off (None).
fn env_num_or_off(name: &str, default: u64) -> Result<Option<u64>> {
    match std::env::var(name) {
        Ok(v) if v.trim() == "0" => Ok(None),
        _ => env_num(name, default).map(Some),
    }
}

fn main() -> Result<()> {
    // `BENCH_ROUNDS` (the other benches' name) counts when `LB_BENCH_ROUNDS` is not set.
    let rounds = match std::env::var_os("LB_BENCH_ROUNDS") {
        None if std::env::var_os("BENCH_ROUNDS").is_some() => env_num("BENCH_ROUNDS", 9)?,
        _ => env_num("LB_BENCH_ROUNDS", 9)?,
    };
    let load = Load {
        threads: u32::try_from(env_num("LB_BENCH_THREADS", 2)?)?,
        connections: u32::try_from(env_num("LB_BENCH_CONNECTIONS", 64)?)?,
        duration: Duration::from_secs(env_num("LB_BENCH_DURATION", 6)?),
    };
    let lb_bin = std::env::var_os("LB_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/release/lb"));
    let selection = Selection::parse(std::env::var("LB_BENCH_CASES").ok().as_deref())?;
    let tools = setup::ensure();
    let think_ms = env_num_or_off("LB_BENCH_THINK_MS", 1)?;
    let mut report = Report::new(load, rounds, think_ms);
    let mut selection = selection;
    if selection.cases.contains(&Case::Idle)
        && let Err(e) = idle::raise_nofile()
    {
        report.not_measured(format!("idle connections: {e:#}"));
        selection.cases.retain(|&c| c != Case::Idle);
    }
    if selection.cases.contains(&Case::H2) && !tools.has("nghttp2-client") {
        report.not_measured("HTTP/2 over TLS: no h2load (nghttp2-client)".into());
        selection.cases.retain(|&c| c != Case::H2);
    }
    for (pkg, why) in &tools.missing {
        report.not_measured(format!("{pkg}: {why}"));
    }
    if !tools.has("wrk") {
        report.not_measured("every figure: no load generator (wrk)".into());
        report.print_and_save(&workspace());
        bail!("wrk is not available");
    }
    if !tools.has("nginx") {
        report.not_measured("every figure: no backend (the backend is nginx)".into());
        report.print_and_save(&workspace());
        bail!("nginx is not available");
    }
    report.header(format!(
        "wrk: {}; h2load: {}; haproxy: {}; nginx: {}; lb: {} ({})",
        version("/usr/bin/wrk", "-v"),
        version("/usr/bin/h2load", "--version"),
        version("/usr/sbin/haproxy", "-v"),
        version("/usr/sbin/nginx", "-v"),
        version(&lb_bin.display().to_string(), "--version"),
        lb_bin.display(),
    ));
    let scratch = Scratch::new("lb-bench-l7")?;
    let ports = Ports::pick()?;
    let pacing = think_ms
        .map(|ms| wrk::Pacing::write(&scratch.path, ms))
        .transpose()?;
    let cert = cert::generate(&scratch.dir("cert")?)?;
    let _backend = peers::start_backend(&scratch, &ports)?;
    let mut systems = start_systems(&lb_bin, &scratch, &ports, &cert, &tools, &mut report);
    let n = systems.len();
    for round in 0..rounds {
        for i in 0..n {
            let s = &mut systems[(i + usize::try_from(round)?) % n];
            if s.broken.is_some() {
                continue;
            }
            if let Err(e) = fresh_start(s, &lb_bin, &scratch, &ports, &cert, load) {
                s.broken = Some(format!("{e:#}"));
                continue;
            }
            let label = format!("round {}/{rounds}", round + 1);
            if selection.plain {
                let measured = measure(s, load, None, &label).and_then(|full| {
                    let paced = pacing.as_ref().map(|p| measure(s, load, Some(p), &label));
                    Ok((full, paced.transpose()?))
                });
                match measured {
                    Ok((full, paced)) => {
                        s.full.push(full, round + 1);
                        if let Some(paced) = paced {
                            s.paced.push(paced, round + 1);
                        }
                    }
                    Err(e) => {
                        s.broken = Some(format!("{e:#}"));
                        continue;
                    }
                }
            }
            round::run_cases(s, &selection.cases, load, &scratch, &label, round + 1);
        }
    }
    // Maintenance toggles once a second: at least ten of them, whatever the round length.
    let maint_load = Load {
        duration: load.duration.max(MAINT_RUN),
        ..load
    };
    for s in &systems {
        if let Some(why) = &s.broken {
            report.not_measured(format!("{}: {why}", s.name));
        }
        if !s.full.runs.is_empty() {
            report.system(s.full.figures(s.name));
        }
        if !s.paced.runs.is_empty() {
            report.paced(s.paced.figures(s.name));
        }
        for &case in &selection.cases {
            let runs = &s.cases[case.index()];
            if let Some(why) = &runs.broken {
                report.not_measured(format!("{} {}: {why}", s.name, case.name()));
            }
            if !runs.runs.is_empty() {
                report.case(case, runs.figures(s.name));
            }
        }
    }
    match systems
        .iter()
        .find(|s| s.name == "lb" && s.broken.is_none() && s.guard.is_some())
    {
        Some(_) if !selection.plain => {}
        Some(_) => match maint::run(
            &lb_bin,
            ports.lb_api,
            local(ports.lb_maint),
            maint_load,
            &scratch,
        ) {
            Ok(m) => report.maintenance(m),
            Err(e) => report.not_measured(format!("maintenance run: {e:#}")),
        },
        None if systems.iter().any(|s| s.name == "lb") => {
            report.not_measured("maintenance run: lb did not run".into());
        }
        None => {}
    }
    drop(systems);
    report.print_and_save(&workspace());
    Ok(())
}

/// Starts one proxy (its configuration written afresh).
fn start(
    name: &str,
    lb_bin: &Path,
    scratch: &Scratch,
    ports: &Ports,
    cert: &Cert,
) -> Result<Guard> {
    match name {
        "lb" => peers::start_lb(lb_bin, scratch, ports, cert),
        "haproxy" => peers::start_haproxy(scratch, ports, cert),
        _ => peers::start_nginx(scratch, ports, cert),
    }
}

/// Stops `s` if it runs, starts it again (no upstream connection left from a previous
/// round) and warms it up with an unrecorded run.
fn fresh_start(
    s: &mut System,
    lb_bin: &Path,
    scratch: &Scratch,
    ports: &Ports,
    cert: &Cert,
    load: Load,
) -> Result<()> {
    // Dropping the guard stops the process and waits for it (the port is free again).
    s.guard = None;
    let guard = start(s.name, lb_bin, scratch, ports, cert)
        .with_context(|| format!("restarting {}", s.name))?;
    s.guard = Some(guard);
    let warm = Load {
        duration: WARM_UP,
        ..load
    };
    wrk::run(warm, local(s.port), None).context("warm-up failed")?;
    if let Some(g) = s.guard.as_mut() {
        g.check_alive()?;
    }
    Ok(())
}

/// Starts our proxy, HAProxy and nginx once, to report the ones that cannot start; each
/// round then restarts them (`fresh_start`).
fn start_systems(
    lb_bin: &Path,
    scratch: &Scratch,
    ports: &Ports,
    cert: &Cert,
    tools: &setup::Tools,
    report: &mut Report,
) -> Vec<System> {
    let mut names: Vec<(&'static str, u16, u16)> = Vec::new();
    if lb_bin.exists() {
        names.push(("lb", ports.lb, ports.lb_tls));
    } else {
        report.not_measured(format!(
            "lb: {} does not exist (cargo build --release -p lb-userspace)",
            lb_bin.display()
        ));
    }
    if tools.has("haproxy") {
        names.push(("haproxy", ports.haproxy, ports.haproxy_tls));
    }
    names.push(("nginx", ports.nginx, ports.nginx_tls));
    let mut out = Vec::new();
    for (name, port, tls_port) in names {
        match start(name, lb_bin, scratch, ports, cert) {
            Ok(guard) => out.push(System {
                name,
                port,
                tls_port,
                guard: Some(guard),
                full: Runs::default(),
                paced: Runs::default(),
                cases: Default::default(),
                broken: None,
            }),
            Err(e) => report.not_measured(format!("{name}: could not start: {e:#}")),
        }
    }
    out
}
