//! `cargo xtask demo`: the load balancer on a namespace network, narrated.
//!
//! Builds a client, a balancer and three backends (network namespaces joined by veth
//! pairs), runs `lb run` in the balancer, then drives real TCP and UDP traffic through a
//! Network vService and shows weights, a drain, a removal and a daemon restart with live
//! counters. Everything is removed at the end, or on Ctrl-C. Traffic only goes to the
//! namespaces it creates.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lb_tests::netns::{
    Daemon, HeldConn, Topology, TopologyOptions, require_data_path, tcp_ask, udp_ask,
};

const VIP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
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

fn config(topo: &Topology, weights: [u32; 3], listed: &[&str]) -> String {
    let mut s = String::from("# written by lb-demo\n");
    for (b, w) in topo.backends.iter().zip(weights) {
        s += &format!(
            "[[backend_service]]\nname = \"{}\"\naddress = \"{}\"\nport = 0\nweight = {w}\n\n",
            b.name, b.addr
        );
    }
    let list: Vec<String> = listed.iter().map(|n| format!("\"{n}\"")).collect();
    for (name, kind, port) in [("web", "tcp-l4", 80), ("dns", "udp-l4", 53)] {
        s += &format!(
            "[[vservice]]\nname = \"{name}\"\nkind = \"{kind}\"\naddress = \"{VIP}\"\nport = {port}\nbackends = [{}]\n\n",
            list.join(", ")
        );
    }
    s
}

fn phase(title: &str) {
    println!("\n\x1b[1m== {title}\x1b[0m");
}

/// Opens `tcp` new connections and sends `udp` requests from the client; prints who answered.
fn traffic(topo: &Topology, tcp: usize, udp: usize) -> Result<()> {
    let started = Instant::now();
    let (tcp_counts, udp_counts) = topo.client.run(|| -> Result<_> {
        let mut t: BTreeMap<String, usize> = BTreeMap::new();
        let mut u: BTreeMap<String, usize> = BTreeMap::new();
        for _ in 0..tcp {
            let r = tcp_ask(SocketAddrV4::new(VIP, 80))?;
            *t.entry(r.backend).or_default() += 1;
        }
        for _ in 0..udp {
            let r = udp_ask(SocketAddrV4::new(VIP, 53))?;
            *u.entry(r.backend).or_default() += 1;
        }
        Ok((t, u))
    })??;
    let show = |m: &BTreeMap<String, usize>| {
        m.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "  {tcp} TCP connections -> {}   {udp} UDP requests -> {}   ({:.1} s)",
        show(&tcp_counts),
        show(&udp_counts),
        started.elapsed().as_secs_f64()
    );
    interrupted()
}

fn status(topo: &Topology) -> Result<()> {
    let pin = topo.pin_dir.display().to_string();
    let out = topo.lb(&["status", "--pin-dir", &pin])?;
    for line in out.lines() {
        println!("  | {line}");
    }
    Ok(())
}

fn reload(topo: &Topology, daemon: &mut Daemon, cfg: &str) -> Result<()> {
    topo.write_config("run.toml", cfg)?;
    daemon.signal(libc::SIGHUP)?;
    std::thread::sleep(Duration::from_millis(500));
    Ok(())
}

fn run() -> Result<()> {
    require_data_path()?;
    println!("Building the namespaces: client -- balancer -- backends b1, b2, b3 ...");
    let topo = Topology::new(&TopologyOptions::default()).context("building the demo network")?;
    topo.tcp_servers(80)?;
    topo.udp_servers(53)?;
    let all = ["b1", "b2", "b3"];
    let mut daemon = topo.lb_run(&config(&topo, [2, 1, 1], &all))?;
    std::thread::sleep(Duration::from_millis(800));
    if !daemon.is_running() {
        bail!("lb run exited:\n{}", daemon.log());
    }
    println!(
        "lb run is up in namespace {} (XDP on {}), VIP {VIP}: tcp/80 and udp/53",
        topo.balancer.name(),
        topo.interfaces().join(", ")
    );
    println!(
        "inspect it meanwhile: bpftool map dump pinned {}/maps/VIPS",
        topo.pin_dir.display()
    );

    phase("1. Weights 2:1:1 — Maglev spreads new flows in proportion");
    traffic(&topo, 400, 200)?;
    status(&topo)?;

    phase("2. Drain b2 (weight 0): its open connection continues, new flows avoid it");
    let mut held = None;
    for _ in 0..20 {
        let conn = topo
            .client
            .run(|| HeldConn::open(SocketAddrV4::new(VIP, 80)))??;
        if conn.reply.backend == "b2" {
            held = Some(conn);
            break;
        }
    }
    let mut held = held.context("no connection reached b2")?;
    reload(&topo, &mut daemon, &config(&topo, [2, 0, 1], &all))?;
    traffic(&topo, 200, 100)?;
    held.echo("still here")?;
    println!("  the connection held on b2 still echoes after the drain");

    phase("3. Remove b3 from the list: its flows re-hash, the others keep theirs");
    reload(&topo, &mut daemon, &config(&topo, [2, 1, 1], &["b1", "b2"]))?;
    traffic(&topo, 200, 100)?;
    held.echo("still here")?;
    println!("  the held connection (on b2) still works");

    phase("4. Stop the daemon: the kernel keeps forwarding; a new daemon adopts the maps");
    daemon.signal(libc::SIGTERM)?;
    daemon.wait_exit(Duration::from_secs(5))?;
    traffic(&topo, 100, 50)?;
    held.echo("daemon down")?;
    println!("  forwarding continued with no daemon running");
    let mut daemon = topo.lb_run(&config(&topo, [1, 1, 1], &all))?;
    std::thread::sleep(Duration::from_millis(800));
    traffic(&topo, 300, 150)?;
    held.echo("adopted")?;
    status(&topo)?;
    daemon.signal(libc::SIGTERM)?;
    let _ = daemon.wait_exit(Duration::from_secs(5));
    println!("\nDone: removing the namespaces and pins.");
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
        eprintln!("lb-demo: {e:#}");
        std::process::exit(1);
    }
}
