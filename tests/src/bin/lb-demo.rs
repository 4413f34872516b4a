//! `cargo xtask demo`: the load balancer on a namespace network, narrated with live counters.
//!
//! Builds a client, a balancer and four backends (network namespaces joined by veth pairs),
//! runs `lb run` in the balancer with a Network vService (XDP, tcp/80) and an HTTP vService
//! (the proxy, :8080, with b4 as its backup), drives real traffic from the client, and shows
//! balancing, a failover (b1 stops answering), a maintenance drain with zero failed requests,
//! and the backup taking over. The Live Stats page is forwarded to 127.0.0.1 on this host.
//! Everything is removed at the end, or on Ctrl-C. Traffic only goes to the namespaces it
//! creates (and the page forwarder on loopback).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lb_tests::netns::{Netns, Topology, TopologyOptions, require_data_path, tcp_ask};

const VIP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
const HTTP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 10, 0, 1), 8080);
const API_PORT: u16 = 9180;
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

fn config(topo: &Topology) -> String {
    let mut s = String::from(
        "# written by lb-demo: short health and reflection times so changes show quickly\n\
         [api]\nlisten = \"127.0.0.1:9180\"\n\n\
         [reflection]\nnetwork_remove_delay = 2.0\nnetwork_add_delay = 2.0\nl7_delay = 0.5\n\n\
         [[health_check]]\nname = \"tcp\"\ntype = \"tcp\"\nperiod = 1.0\ntimeout = 1.0\n\
         required_successes = 2\nrequired_failures = 2\n\n",
    );
    for b in &topo.backends {
        s += &format!(
            "[[backend_service]]\nname = \"{0}\"\naddress = \"{1}\"\nport = 80\nhealth_check = \"tcp\"\n\n\
             [[backend_service]]\nname = \"{0}-web\"\naddress = \"{1}\"\nport = 8080\nhealth_check = \"tcp\"\nbackup = {2}\n\n",
            b.name,
            b.addr,
            b.name == "b4"
        );
    }
    s += &format!(
        "[[vservice]]\nname = \"l4\"\nkind = \"tcp-l4\"\naddress = \"{VIP}\"\nport = 80\n\
         backends = [\"b1\", \"b2\", \"b3\"]\n\n\
         [[vservice]]\nname = \"site\"\nkind = \"http\"\naddress = \"{}\"\nport = {}\n\
         backends = [\"b1-web\", \"b2-web\", \"b3-web\", \"b4-web\"]\n",
        HTTP.ip(),
        HTTP.port()
    );
    s
}

/// One HTTP/1.1 request on a new connection; the backend's name from the body.
fn http_get(addr: SocketAddrV4) -> Result<String> {
    let mut c = TcpStream::connect_timeout(&SocketAddr::V4(addr), Duration::from_secs(1))?;
    c.set_read_timeout(Some(Duration::from_secs(2)))?;
    c.write_all(b"GET / HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n")?;
    let mut text = String::new();
    c.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").context("no HTTP header end")?;
    let status = head.split(' ').nth(1).unwrap_or_default();
    if status != "200" {
        bail!("HTTP {status}");
    }
    Ok(body
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string())
}

/// Counts of the current second, per path and backend (or "fail").
#[derive(Default)]
struct Window {
    l4: BTreeMap<String, u32>,
    http: BTreeMap<String, u32>,
    http_failures: u32,
}

/// Two client threads in the client namespace, one per path (a request stuck on a failing
/// backend never holds up the other path): one request every 40 ms each.
fn start_traffic(client: &Netns, window: Arc<Mutex<Window>>, run: Arc<AtomicBool>) -> Result<()> {
    for http in [false, true] {
        let path = client.path();
        let (window, run) = (window.clone(), run.clone());
        std::thread::spawn(move || {
            if lb_tests::netns::ns::enter_path(&path).is_err() {
                return;
            }
            let started = Instant::now();
            while run.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(600) {
                let answer = if http {
                    http_get(HTTP)
                } else {
                    tcp_ask(SocketAddrV4::new(VIP, 80)).map(|r| r.backend)
                };
                if let Ok(mut w) = window.lock() {
                    let failed = answer.is_err();
                    let counts = if http { &mut w.http } else { &mut w.l4 };
                    *counts
                        .entry(answer.unwrap_or_else(|_| "fail".into()))
                        .or_default() += 1;
                    if http && failed {
                        w.http_failures += 1;
                    }
                }
                std::thread::sleep(Duration::from_millis(40));
            }
        });
    }
    Ok(())
}

fn health(topo: &Topology) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Ok(st) = topo.lb_status()
        && let Some(services) = st["health"]["services"].as_object()
    {
        for (name, s) in services {
            out.insert(name.clone(), s["state"].as_str().unwrap_or("-").to_string());
        }
    }
    out
}

/// Prints one line per second for `secs` seconds (or until `until` holds); returns the
/// HTTP failures seen.
fn watch(
    topo: &Topology,
    window: &Mutex<Window>,
    secs: u32,
    mut until: impl FnMut(&BTreeMap<String, String>, &Window) -> bool,
) -> Result<u32> {
    let mut failures = 0;
    for t in 1..=secs {
        std::thread::sleep(Duration::from_secs(1));
        interrupted()?;
        let w = std::mem::take(&mut *window.lock().map_err(|_| anyhow::anyhow!("lock"))?);
        failures += w.http_failures;
        let h = health(topo);
        let show = |m: &BTreeMap<String, u32>| {
            m.iter()
                .map(|(k, v)| format!("{k}={v:<3}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let states: Vec<String> = ["b1", "b2", "b3", "b4"]
            .iter()
            .map(|b| {
                format!(
                    "{b}:{}",
                    h.get(&format!("{b}-web")).map_or("-", |s| s.as_str())
                )
            })
            .collect();
        println!(
            "  {t:>2}s  L4(XDP) {:<30} HTTP {:<38} health {}",
            show(&w.l4),
            show(&w.http),
            states.join(" ")
        );
        if until(&h, &w) {
            break;
        }
    }
    Ok(failures)
}

/// Every Backend Service starts Preparing and gets no traffic until its checks pass
/// (S-HC5): the demo sends its first request once all are OK and the tables have taken them
/// in, so its first counters show balancing rather than the Preparing phase's refusals.
fn wait_for_health(topo: &Topology) -> Result<()> {
    phase("0. Waiting for the health checks: 2 successes each (Preparing -> OK)");
    let started = Instant::now();
    let mut shown = String::new();
    loop {
        interrupted()?;
        let h = health(topo);
        let line = h
            .iter()
            .map(|(name, state)| format!("{name}:{state}"))
            .collect::<Vec<_>>()
            .join(" ");
        if line != shown {
            println!("  {:>4.1}s  {line}", started.elapsed().as_secs_f64());
            shown = line;
        }
        if h.len() >= 8 && h.values().all(|s| s == "OK") {
            break;
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("the backends did not pass their health checks within 30 s: {shown}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    // The Network vService takes an OK in at its next re-add tick (network_add_delay, 2 s).
    std::thread::sleep(Duration::from_millis(2200));
    println!("  every backend is OK and in its tables: traffic starts");
    Ok(())
}

fn phase(title: &str) {
    println!("\n\x1b[1m== {title}\x1b[0m");
}

fn maintenance(topo: &Topology, name: &str, on: bool) -> Result<()> {
    let api = format!("http://127.0.0.1:{API_PORT}");
    topo.lb(&[
        "backend",
        "maintenance",
        name,
        if on { "on" } else { "off" },
        "--api",
        &api,
    ])
    .with_context(|| format!("maintenance {name}"))?;
    Ok(())
}

/// Forwards 127.0.0.1:`port` on this host into the balancer namespace's API, so a browser
/// here can open the Live Stats page. Returns the local address.
fn forward_page(balancer: &Netns) -> Result<SocketAddr> {
    let listener = (API_PORT..API_PORT + 20)
        .find_map(|p| TcpListener::bind(("127.0.0.1", p)).ok())
        .context("no free local port for the Live Stats forwarder")?;
    let local = listener.local_addr()?;
    let path = balancer.path();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut client) = conn else { continue };
            let path = path.clone();
            std::thread::spawn(move || {
                // The upstream socket is created inside the balancer namespace.
                if lb_tests::netns::ns::enter_path(&path).is_err() {
                    return;
                }
                let Ok(mut up) = TcpStream::connect(("127.0.0.1", API_PORT)) else {
                    return;
                };
                let (Ok(mut c2), Ok(mut u2)) = (client.try_clone(), up.try_clone()) else {
                    return;
                };
                let t = std::thread::spawn(move || std::io::copy(&mut u2, &mut c2));
                let _ = std::io::copy(&mut client, &mut up);
                let _ = up.shutdown(std::net::Shutdown::Write);
                let _ = t.join();
            });
        }
    });
    Ok(local)
}

fn run() -> Result<()> {
    require_data_path()?;
    println!("Building the namespaces: client -- balancer -- backends b1..b4 ...");
    let opts = TopologyOptions {
        backends: 4,
        ..TopologyOptions::default()
    };
    let topo = Topology::new(&opts).context("building the demo network")?;
    topo.tcp_servers(80)?;
    topo.tcp_servers(8080)?;
    let mut daemon = topo.lb_run(&config(&topo))?;
    let page = forward_page(&topo.balancer)?;
    std::thread::sleep(Duration::from_millis(800));
    if !daemon.is_running() {
        bail!("lb run exited:\n{}", daemon.log());
    }
    println!(
        "lb run is up in namespace {} (XDP on {})",
        topo.balancer.name(),
        topo.interfaces().join(", ")
    );
    println!("  Network vService l4: {VIP}:80 over b1 b2 b3 (XDP, NAT)");
    println!("  HTTP vService site: {HTTP} over b1 b2 b3, backup b4 (proxy)");
    println!(
        "  \x1b[1mLive Stats: http://{page}/\x1b[0m   (bpftool map dump pinned {}/maps/VIPS)",
        topo.pin_dir.display()
    );

    wait_for_health(&topo)?;
    let window = Arc::new(Mutex::new(Window::default()));
    let running = Arc::new(AtomicBool::new(true));
    start_traffic(&topo.client, window.clone(), running.clone())?;

    phase("1. Health checks pass, traffic spreads (backup b4 idle)");
    watch(&topo, &window, 10, |h, w| {
        ["b1-web", "b2-web", "b3-web"]
            .iter()
            .all(|b| h.get(*b).is_some_and(|s| s == "OK"))
            && w.http.len() >= 3
    })?;
    watch(&topo, &window, 3, |_, _| false)?;

    phase("2. Failover: b1 stops answering (its link goes down)");
    topo.set_backend_link("b1", false)?;
    let clean = |m: &BTreeMap<String, u32>| {
        m.values().sum::<u32>() >= 10 && !m.contains_key("b1") && !m.contains_key("fail")
    };
    watch(&topo, &window, 25, |h, w| {
        h.get("b1-web").is_some_and(|s| s == "Error") && clean(&w.l4) && clean(&w.http)
    })?;
    println!("  b1 is out of both vServices; bringing it back");
    topo.set_backend_link("b1", true)?;
    watch(&topo, &window, 15, |_, w| {
        w.l4.contains_key("b1") && w.http.contains_key("b1")
    })?;

    phase("3. Maintenance drain of b2 (HTTP): no new requests, none failed");
    maintenance(&topo, "b2-web", true)?;
    let failed = watch(&topo, &window, 4, |_, _| false)?;
    println!(
        "  failed HTTP requests during the drain: {failed} (S-MT1); L4 ignores maintenance (S-MT7)"
    );
    maintenance(&topo, "b2-web", false)?;

    phase("4. Every main in maintenance: the backup b4 takes over (S-BK2), then the mains return");
    for b in ["b1-web", "b2-web", "b3-web"] {
        maintenance(&topo, b, true)?;
    }
    watch(&topo, &window, 3, |_, _| false)?;
    for b in ["b1-web", "b2-web", "b3-web"] {
        maintenance(&topo, b, false)?;
    }
    watch(&topo, &window, 3, |_, _| false)?;
    running.store(false, Ordering::SeqCst);

    let hold: u64 = std::env::var("LB_DEMO_HOLD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    println!("\nLive Stats stays at http://{page}/ for {hold} s (LB_DEMO_HOLD; Ctrl-C ends now).");
    for _ in 0..hold {
        if STOP.load(Ordering::SeqCst) {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    daemon.signal(libc::SIGTERM)?;
    let _ = daemon.wait_exit(Duration::from_secs(5));
    println!("Done: removing the namespaces and pins.");
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
