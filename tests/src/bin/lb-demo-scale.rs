//! `cargo xtask demo scale`: three balancers behind one ECMP router, narrated with live
//! counters.
//!
//! Builds the scale-out topology of the end-to-end tests (a client, a router with BIRD and
//! ECMP, three balancer namespaces each running `lb run` and BIRD with BFD, three DSR
//! backends on one shared segment), then shows: new connections spread over three paths; a
//! balancer's link going down and the long-lived streams it carried going on through the
//! others; the balancer returning; `lb node drain` and `lb node resume`; and the identical
//! Maglev tables that make this work in DSR. Every load loop is bounded in count and time.
//! Everything is removed at the end, on Ctrl-C and on a panic (the topology's drop). Traffic
//! only goes to the namespaces it creates.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lb_tests::netns::bird::require_bird;
use lb_tests::netns::scale::{ScaleTopology, balancer_addr, scale_backend_addr};
use lb_tests::netns::{HeldConn, require_data_path};

const VIP: Ipv4Addr = Ipv4Addr::new(10, 220, 0, 100);
const PORT: u16 = 8000;
/// Long-lived echo streams opened at the start.
const STREAMS: usize = 30;
/// The new-connection load: at most this many, for at most [`LOAD_LIMIT`].
const LOAD_MAX: u64 = 6000;
const LOAD_LIMIT: Duration = Duration::from_secs(240);
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn interrupted() -> Result<()> {
    if STOP.load(Ordering::SeqCst) {
        bail!("interrupted: cleaning up");
    }
    Ok(())
}

/// Every balancer's configuration (the same file on all three, as in production): `web`
/// on the VIP over b1..b3 in DSR mode, announced over BGP from table 100.
fn config() -> Result<String> {
    let mut cfg = String::from(
        "# written by lb-demo-scale: the same file on every balancer\n\
         [reflection]\nnetwork_remove_delay = 0.5\nnetwork_add_delay = 0.5\n\n\
         [bgp]\nenabled = true\ntable = 100\n\n\
         [[health_check]]\nname = \"tcp\"\ntype = \"tcp\"\nperiod = 1\ntimeout = 1\n\
         required_failures = 2\nrequired_successes = 1\n\n",
    );
    for m in 1..=3 {
        cfg += &format!(
            "[[backend_service]]\nname = \"b{m}\"\naddress = \"{}\"\nport = {PORT}\nhealth_check = \"tcp\"\n\n",
            scale_backend_addr(m)
        );
    }
    cfg += &format!(
        "[[vservice]]\nname = \"web\"\nkind = \"tcp-l4\"\naddress = \"{VIP}\"\nport = {PORT}\n\
         forwarding = \"dsr\"\nbackends = [\"b1\", \"b2\", \"b3\"]\n"
    );
    lb::config::parse(&cfg, "the demo's configuration")
        .map_err(|e| anyhow::anyhow!("the demo's configuration is invalid: {e}"))?;
    Ok(cfg)
}

/// New flows and packets from clients each balancer has counted so far (its API's node
/// status); `None` for a balancer whose API did not answer.
fn traffic(topo: &ScaleTopology) -> Vec<Option<(u64, u64)>> {
    (1..=3)
        .map(|i| {
            let node = topo.api(i, "GET", "/api/v1/node").ok()?;
            let t = &node["traffic"];
            Some((t["new_flows"].as_u64()?, t["packets"].as_u64()?))
        })
        .collect()
}

/// The balancers (1-based) the router's route for the VIP leads to.
fn paths(topo: &ScaleTopology) -> Vec<usize> {
    let now = topo.router_paths(VIP).unwrap_or_default();
    (1..=3)
        .filter(|&i| now.contains(&balancer_addr(i)))
        .collect()
}

/// Opens one echo stream from the client; tries three times, since the router can lose
/// every path for a moment when BFD misses its packets on a busy host.
fn open_stream(topo: &ScaleTopology) -> Result<HeldConn> {
    let mut last = None;
    for _ in 0..3 {
        match topo
            .client
            .run(|| HeldConn::open(SocketAddrV4::new(VIP, PORT)))?
        {
            Ok(conn) => return Ok(conn),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Err(last.map_or_else(
        || anyhow::anyhow!("no attempt"),
        |e| e.context("opening a stream"),
    ))
}

/// Long-lived echo streams from the client, each with the balancer that carries it now.
struct Streams {
    held: Vec<(usize, HeldConn)>,
}

impl Streams {
    /// Opens `count` streams one by one (no other load yet), each one's balancer found by
    /// whose new-flow counter moved.
    fn open(topo: &ScaleTopology, count: usize) -> Result<Streams> {
        let mut held = Vec::new();
        for _ in 0..count {
            interrupted()?;
            let before = traffic(topo);
            let conn = open_stream(topo)?;
            let after = traffic(topo);
            let moved = (0..3).find(|&k| match (before[k], after[k]) {
                (Some(b), Some(a)) => a.0 > b.0,
                _ => false,
            });
            held.push((moved.map_or(0, |k| k + 1), conn));
        }
        Ok(Streams { held })
    }

    /// How many streams each balancer carries (0: not known).
    fn per_balancer(&self) -> BTreeMap<usize, usize> {
        let mut out: BTreeMap<usize, usize> = (1..=3).map(|i| (i, 0)).collect();
        for (b, _) in &self.held {
            *out.entry(*b).or_default() += 1;
        }
        out
    }

    /// One line on every stream; returns (answered, failed).
    fn echo_all(&mut self, tag: &str) -> (usize, usize) {
        let mut failed = 0;
        for (n, (_, conn)) in self.held.iter_mut().enumerate() {
            if conn.echo(&format!("{tag}-{n}")).is_err() {
                failed += 1;
            }
        }
        (self.held.len() - failed, failed)
    }

    /// Finds which balancer carries each stream now (after the router moved some): with
    /// the new-connection load paused, one echo per stream and the balancer whose packet
    /// counter moved most.
    fn locate(&mut self, topo: &ScaleTopology) -> Result<()> {
        for (n, (carrier, conn)) in self.held.iter_mut().enumerate() {
            interrupted()?;
            let before = traffic(topo);
            if conn.echo(&format!("locate-{n}")).is_err() {
                *carrier = 0;
                continue;
            }
            // The client's ACK of the echo goes the same way: let it arrive.
            std::thread::sleep(Duration::from_millis(60));
            let after = traffic(topo);
            let grew: Vec<(usize, u64)> = (0..3)
                .filter_map(|k| match (before[k], after[k]) {
                    (Some(b), Some(a)) => Some((k + 1, a.1.saturating_sub(b.1))),
                    _ => None,
                })
                .collect();
            *carrier = grew
                .iter()
                .filter(|(_, d)| *d > 0)
                .max_by_key(|(_, d)| *d)
                .map_or(0, |(i, _)| *i);
        }
        Ok(())
    }
}

/// New connections from the client to the VIP, about 25 a second, bounded by
/// [`LOAD_MAX`] and [`LOAD_LIMIT`]; `paused` holds it, `run` ends it.
struct Load {
    run: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Load {
    fn start(topo: &ScaleTopology) -> Load {
        let run = Arc::new(AtomicBool::new(true));
        let paused = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let path = topo.client.path();
        let (r, p, a, f) = (
            run.clone(),
            paused.clone(),
            answered.clone(),
            failed.clone(),
        );
        let thread = std::thread::spawn(move || {
            if lb_tests::netns::ns::enter_path(&path).is_err() {
                return;
            }
            let started = Instant::now();
            let mut sent = 0;
            while r.load(Ordering::SeqCst) && started.elapsed() < LOAD_LIMIT && sent < LOAD_MAX {
                if !p.load(Ordering::SeqCst) {
                    sent += 1;
                    match lb_tests::netns::tcp_ask(SocketAddrV4::new(VIP, PORT)) {
                        Ok(_) => a.fetch_add(1, Ordering::SeqCst),
                        Err(_) => f.fetch_add(1, Ordering::SeqCst),
                    };
                }
                std::thread::sleep(Duration::from_millis(40));
            }
        });
        Load {
            run,
            paused,
            answered,
            failed,
            thread: Some(thread),
        }
    }

    /// New connections answered and failed so far.
    fn totals(&self) -> (u64, u64) {
        (
            self.answered.load(Ordering::SeqCst),
            self.failed.load(Ordering::SeqCst),
        )
    }

    fn pause(&self, on: bool) {
        self.paused.store(on, Ordering::SeqCst);
        if on {
            // A connection in flight finishes; its last ACK arrives.
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.run.store(false, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The live view: one line a second with each balancer's new flows/s, packets/s and the
/// streams it carries, the router's paths, and how the streams answered.
struct Watch<'a> {
    topo: &'a ScaleTopology,
    last: Vec<Option<(u64, u64)>>,
    t: u32,
    stream_failures: usize,
    /// The balancers the router should lead to after the last step; a line that differs
    /// is marked (BFD can miss its packets for a moment on a busy host).
    expect: Vec<usize>,
}

impl<'a> Watch<'a> {
    fn new(topo: &'a ScaleTopology) -> Watch<'a> {
        println!(
            "  time  {:<24}{:<24}{:<24}router paths  streams (echo each second)",
            "balancer 1", "balancer 2", "balancer 3"
        );
        println!("        {0:<24}{0:<24}{0:<24}", "new/s  pkt/s  streams");
        Watch {
            topo,
            last: traffic(topo),
            t: 0,
            stream_failures: 0,
            expect: vec![1, 2, 3],
        }
    }

    /// Prints `secs` lines, one a second (or until `until` holds).
    fn run(
        &mut self,
        streams: &mut Streams,
        secs: u32,
        mut until: impl FnMut(&[usize]) -> bool,
    ) -> Result<()> {
        for _ in 0..secs {
            std::thread::sleep(Duration::from_secs(1));
            interrupted()?;
            self.t += 1;
            let (ok, failed) = streams.echo_all(&format!("t{}", self.t));
            self.stream_failures += failed;
            let now = traffic(self.topo);
            let held = streams.per_balancer();
            let mut line = format!("  {:>3}s  ", self.t);
            for (k, (last, now)) in self.last.iter().zip(&now).enumerate() {
                let cell = match (last, now) {
                    (Some(b), Some(a)) => format!(
                        "{:>5}  {:>5}  {:>7}",
                        a.0.saturating_sub(b.0),
                        a.1.saturating_sub(b.1),
                        held.get(&(k + 1)).copied().unwrap_or(0)
                    ),
                    _ => format!("{:^21}", "(no answer)"),
                };
                line += &format!("{cell:<24}");
            }
            let p = paths(self.topo);
            let shown: Vec<String> = p.iter().map(|i| format!("l{i}")).collect();
            line += &format!(
                "{:<14}{ok} ok, {failed} failed",
                if shown.is_empty() {
                    "none".to_owned()
                } else {
                    shown.join(",")
                }
            );
            if p != self.expect {
                line += "  <- not the planned paths: BFD missed packets (busy host)";
            }
            println!("{line}");
            self.last = now;
            if until(&p) {
                break;
            }
        }
        Ok(())
    }
}

fn phase(title: &str) {
    println!("\n\x1b[1m== {title}\x1b[0m");
}

/// Pauses `LB_DEMO_HOLD` seconds (default 2) between steps, so a viewer can read.
fn hold() -> Result<()> {
    let secs: u64 = std::env::var("LB_DEMO_HOLD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    for _ in 0..secs {
        interrupted()?;
        std::thread::sleep(Duration::from_secs(1));
    }
    Ok(())
}

fn want(which: &[usize]) -> std::collections::BTreeSet<Ipv4Addr> {
    which.iter().map(|&i| balancer_addr(i)).collect()
}

/// Each balancer's `lb table web --digest` line.
fn digests(topo: &ScaleTopology) -> Result<Vec<String>> {
    (1..=3)
        .map(|i| {
            let pin = topo.balancer(i)?.pin_dir.display().to_string();
            let out = topo.lb(i, &["table", "web", "--pin-dir", &pin, "--digest"])?;
            Ok(out.trim().to_owned())
        })
        .collect()
}

/// Waits (at most 20 s) until every balancer has all three backends OK and the three
/// tables agree twice in a row: a VIP is announced as soon as one backend is healthy, and
/// a stream opened while one balancer's table still lacks a backend would be reset when
/// it moves (the tables differ then).
fn settle(topo: &ScaleTopology) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut agreed = 0;
    loop {
        interrupted()?;
        let all_ok = (1..=3).all(|i| {
            topo.api(i, "GET", "/api/v1/status")
                .is_ok_and(|st| st["backend_services"]["by_health"]["OK"].as_u64() == Some(3))
        });
        let d = digests(topo)?;
        agreed = if all_ok && d.windows(2).all(|w| w[0] == w[1]) {
            agreed + 1
        } else {
            0
        };
        if agreed >= 2 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the balancers' tables did not agree within 20 s: {d:?}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn setup() -> Result<ScaleTopology> {
    require_data_path()?;
    require_bird()?;
    println!(
        "Building the namespaces: client -- router (BIRD, ECMP) -- balancers l1 l2 l3 \
         (lb run + BIRD, BFD) -- shared segment -- backends b1 b2 b3 (DSR) ..."
    );
    let mut topo = ScaleTopology::new(3, 3, &[VIP]).context("building the demo network")?;
    for b in &topo.backends {
        topo.servers.spawn_tcp(&b.ns, &b.name, PORT)?;
    }
    let cfg = config()?;
    for i in 1..=3 {
        topo.write_config(i, &cfg)?;
        topo.start_lb(i)?;
    }
    for i in 1..=3 {
        topo.start_balancer_bird(i)?;
    }
    topo.start_router_bird(&[VIP])?;
    println!("Waiting for the three balancers to announce {VIP} (health first, then BGP) ...");
    topo.wait_paths(VIP, &want(&[1, 2, 3]), Duration::from_secs(40))?;
    settle(&topo)?;
    Ok(topo)
}

fn run() -> Result<()> {
    let topo = setup()?;
    let route = topo.router.ip(&["route", "show", &format!("{VIP}/32")])?;

    phase("1. Three balancers announce the VIP; the router spreads new connections");
    println!("  The router's route for the Network vService web ({VIP}:{PORT}, DSR):");
    for l in route.lines() {
        println!("    {}", l.trim());
    }
    println!("  Opening {STREAMS} long-lived echo streams, then ~25 new connections a second.");
    let mut streams = Streams::open(&topo, STREAMS)?;
    let load = Load::start(&topo);
    let mut watch = Watch::new(&topo);
    watch.run(&mut streams, 6, |_| false)?;
    hold()?;

    phase("2. Balancer 1's link goes down (as if it died)");
    topo.set_uplink(1, false)?;
    watch.expect = vec![2, 3];
    let gone = topo.wait_paths(VIP, &want(&[2, 3]), Duration::from_secs(3))?;
    println!(
        "  The router dropped balancer 1's path after {} ms (BFD); the {} streams it carried \
         now reach balancers 2 and 3, which pick the same backend (same Maglev table).",
        gone.as_millis(),
        streams.per_balancer().get(&1).copied().unwrap_or(0)
    );
    watch.run(&mut streams, 2, |_| false)?;
    load.pause(true);
    streams.locate(&topo)?;
    load.pause(false);
    let (ok, failed) = streams.echo_all("moved");
    println!(
        "  Where the streams are now: {:?} (balancer: streams); {ok} answer, {failed} failed.",
        streams.per_balancer()
    );
    watch.run(&mut streams, 5, |_| false)?;
    hold()?;

    phase("3. Balancer 1 returns; then balancer 2 is drained and resumed");
    topo.set_uplink(1, true)?;
    watch.expect = vec![1, 2, 3];
    let back = topo.wait_paths(VIP, &want(&[1, 2, 3]), Duration::from_secs(20))?;
    println!(
        "  Balancer 1's path is back after {:.1} s (BGP session up again).",
        back.as_secs_f64()
    );
    watch.run(&mut streams, 3, |_| false)?;
    load.pause(true);
    streams.locate(&topo)?;
    load.pause(false);
    println!("  Streams per balancer now: {:?}", streams.per_balancer());
    println!("  $ lb node drain --timeout 20 --quiet-packets 5   (on balancer 2)");
    let ns2 = topo.balancer(2)?.ns.path();
    watch.expect = vec![1, 3];
    let drain = std::thread::spawn(move || {
        lb_tests::netns::lbctl::lb(
            &ns2,
            &["node", "drain", "--timeout", "20", "--quiet-packets", "5"],
        )
    });
    watch.run(&mut streams, 25, |_| drain.is_finished())?;
    let out = drain
        .join()
        .map_err(|_| anyhow::anyhow!("lb node drain thread panicked"))??;
    for l in out.lines() {
        println!("    | {l}");
    }
    load.pause(true);
    streams.locate(&topo)?;
    load.pause(false);
    println!(
        "  Balancer 2 withdrew its route: paths {:?}; its streams moved on and still answer: \
         {:?}",
        paths(&topo),
        streams.per_balancer()
    );
    watch.run(&mut streams, 3, |_| false)?;
    println!("  $ lb node resume   (on balancer 2)");
    let resumed = topo.lb(2, &["node", "resume"])?;
    watch.expect = vec![1, 2, 3];
    for l in resumed.lines() {
        println!("    | {l}");
    }
    let again = topo.wait_paths(VIP, &want(&[1, 2, 3]), Duration::from_secs(10))?;
    println!(
        "  Balancer 2 announces again after {} ms.",
        again.as_millis()
    );
    watch.run(&mut streams, 4, |_| false)?;
    let (new_ok, new_failed) = load.totals();
    drop(load);
    let (ok, failed) = streams.echo_all("end");
    hold()?;

    phase("4. Summary");
    println!("  The three balancers' Maglev tables (lb table web --digest):");
    for (i, d) in digests(&topo)?.iter().enumerate() {
        println!("    balancer {}: {d}", i + 1);
    }
    let stream_failures = watch.stream_failures + failed;
    println!(
        "  {STREAMS} long-lived streams: {ok} answer at the end; failed echoes during the whole \
         demo: {stream_failures}."
    );
    println!(
        "  New connections during the demo: {new_ok} answered, {new_failed} failed (those sent \
         in the moment a path went away, before BFD noticed, can time out)."
    );
    println!(
        "  In DSR mode a balancer keeps no state a flow depends on: every balancer with the same \
         backends builds the same table, so when the router moves a flow (a balancer lost, \
         drained or back) the next one sends it to the same backend, and the backend answers \
         the client directly."
    );
    println!(
        "  In NAT mode this does not hold: the backend answers the balancer that translated the \
         flow, so the connections of a lost balancer break (the clients reconnect); only new \
         connections spread over the others."
    );
    println!("Done: removing the namespaces, BIRDs and pins.");
    Ok(())
}

fn main() {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_interrupt as *const () as libc::sighandler_t,
        );
    }
    if let Err(e) = run() {
        eprintln!("lb-demo-scale: {e:#}");
        std::process::exit(1);
    }
}
