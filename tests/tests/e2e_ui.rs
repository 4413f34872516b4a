//! End-to-end test of the Live Stats page (S-OB1..3, S-MT8) in headless Chromium.
//!
//! Starts a real `lb run` daemon without XDP (L7 vServices only) on loopback, with Backend
//! Services that are plain TCP listeners started here, then runs
//! `node tests/ui/livestats.spec.mjs URL`: the page must show the health the daemon decided,
//! turn Maintenance on and off through its toggle (the tier of a list whose only main goes
//! into Maintenance moves to the backup), and plot check durations. Meanwhile this test
//! watches the configuration file: Maintenance must be written to it (S-MT8) and removed again.
//!
//! A thread sends paced HTTP load through the `web` vService (bounded in count and time,
//! loopback only) from a few seconds before the page opens: the page's first render must
//! already show the rates and charts of those seconds, from the history the daemon sampled
//! (no "…"); then its requests/s must move, with sparkline and overview charts, 2xx counts,
//! each backend's last check, its duration and time in state, and what the DNS vService's
//! name answers now. A backup that stands by reads "standby", a weight-0 main "drained"
//! (S-BK1, S-BK11).
//!
//! `s_ob1_first_live_payload_carries_the_last_seconds` needs no browser: after a few seconds
//! under load, the first `GET /api/v1/stats/live?history=1` carries those seconds' rates.
//!
//! Needs the `lb` binary (env `LB_BIN`, else `<repo>/target/debug/lb`: run
//! `cargo build -p lb-userspace` first), node, and Debian's chromium (installed with apt-get
//! when missing; the node packages with `npm ci` when missing).
//! Run: `cargo test -p lb-tests --test e2e_ui -- --nocapture`.
//! Screenshots are written to `<repo>/target/ui-livestats.png` (and `-token.png`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Longest time the browser test may take before it is killed.
const SPEC_TIMEOUT: Duration = Duration::from_secs(180);
/// Longest wait for the daemon's API to answer after start.
const API_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections sent through the L7 TCP vService before the page is checked.
const TRAFFIC: usize = 3;
/// A comment in the configuration that the API's write-back must keep.
const MARKER_COMMENT: &str = "# Live Stats e2e: this comment must survive write-back";
/// The address the DNS vService's one site hands out.
const DNS_SITE: &str = "192.0.2.10";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

// ----- prerequisites (idempotent) ---------------------------------------------------------

/// Runs a command to completion, failing with its name when it does not succeed.
fn run_checked(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd.status().with_context(|| format!("starting {what}"))?;
    if !status.success() {
        bail!("{what} failed: {status}");
    }
    Ok(())
}

fn apt_install(packages: &[&str]) -> Result<()> {
    let install = |quiet_update: bool| -> Result<()> {
        if quiet_update {
            run_checked(Command::new("apt-get").arg("update"), "apt-get update")?;
        }
        run_checked(
            Command::new("apt-get")
                .args(["install", "-y", "--no-install-recommends"])
                .args(packages)
                .env("DEBIAN_FRONTEND", "noninteractive"),
            &format!("apt-get install {}", packages.join(" ")),
        )
    };
    // The package lists may be missing or stale on a fresh machine: update once and retry.
    install(false).or_else(|_| install(true))
}

/// Debian's chromium at /usr/bin/chromium; installs it when missing.
fn ensure_chromium() -> Result<()> {
    if Path::new("/usr/bin/chromium").exists() {
        return Ok(());
    }
    eprintln!("e2e_ui: /usr/bin/chromium missing, installing Debian's chromium");
    apt_install(&["chromium"])?;
    if !Path::new("/usr/bin/chromium").exists() {
        bail!("apt-get installed chromium but /usr/bin/chromium is still missing");
    }
    Ok(())
}

fn has_command(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// node and the locked node packages of tests/ui (playwright-core, no browser download).
fn ensure_node_deps(ui: &Path) -> Result<()> {
    if !has_command("node") || !has_command("npm") {
        eprintln!("e2e_ui: node/npm missing, installing Debian's nodejs and npm");
        apt_install(&["nodejs", "npm"])?;
    }
    if ui
        .join("node_modules/playwright-core/package.json")
        .exists()
    {
        return Ok(());
    }
    eprintln!("e2e_ui: installing node packages with npm ci");
    run_checked(
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--prefix"])
            .arg(ui)
            .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1"),
        "npm ci --prefix tests/ui",
    )
}

fn lb_binary() -> Result<PathBuf> {
    let bin = std::env::var_os("LB_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/debug/lb"));
    if !bin.exists() {
        bail!(
            "{} not found: run `cargo build -p lb-userspace` or set LB_BIN",
            bin.display()
        );
    }
    Ok(bin)
}

// ----- backends and daemon ----------------------------------------------------------------

/// A server on 127.0.0.1 that answers one HTTP request per connection (200, or 404 for
/// `/missing` and 500 for `/fail`, so the page has status classes to show) and closes
/// anything else at once (TCP health checks and the L7 TCP vService's connections).
struct Backend {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Backend {
    fn start() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        thread::spawn(move || answer_http(conn));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(Backend {
            port,
            stop,
            thread: Some(thread),
        })
    }
}

/// Reads one request head and answers it; closes at once what does not look like HTTP.
fn answer_http(mut conn: TcpStream) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if !head.starts_with(b"GET ") || head.len() > 16 * 1024 {
            return;
        }
        if head.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let status = if head.starts_with(b"GET /missing ") {
        "404 Not Found"
    } else if head.starts_with(b"GET /fail ") {
        "500 Internal Server Error"
    } else {
        "200 OK"
    };
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n"
    );
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A loopback port nothing listens on once this returns (connection refused: health Error).
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The `lb run` child; killed on drop so a failed assertion leaves nothing running.
struct DaemonProcess {
    child: Child,
    log: PathBuf,
}

impl DaemonProcess {
    fn start(bin: &Path, config: &Path, log: PathBuf) -> Result<Self> {
        let out = std::fs::File::create(&log)?;
        let child = Command::new(bin)
            .args(["run", "--config"])
            .arg(config)
            .env("RUST_LOG", "info")
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(DaemonProcess { child, log })
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config_text(
    api: SocketAddr,
    token: Option<&str>,
    ports: &[u16; 5],
    web: u16,
    tcp: u16,
    dns: u16,
) -> String {
    let token = token
        .map(|t| format!("token = \"{t}\"\n"))
        .unwrap_or_default();
    format!(
        r#"[reflection]
l7_delay = 0.0

[api]
listen = "{api}"
{token}

[[health_check]]
name = "tcp-fast"
type = "tcp"
period = 1.0
timeout = 0.5
required_successes = 1
required_failures = 1

{MARKER_COMMENT}
[[backend_service]]
name = "b1"
address = "127.0.0.1"
port = {p1}
health_check = "tcp-fast"

[[backend_service]]
name = "b2"
address = "127.0.0.1"
port = {p2}
health_check = "tcp-fast"
backup = true

[[backend_service]]
name = "b3"
address = "127.0.0.1"
port = {p3}
weight = 2
health_check = "tcp-fast"

# Nothing listens on b4's port: its health is Error.
[[backend_service]]
name = "b4"
address = "127.0.0.1"
port = {p4}
health_check = "tcp-fast"

# b1 is the only main: Maintenance on b1 hands the list to the backup b2.
[[vservice]]
name = "web"
kind = "http"
address = "127.0.0.1"
port = {web}
backends = ["b1", "b2"]

# Weight 0: drained (S-BK11), healthy but given no new connections.
[[backend_service]]
name = "b5"
address = "127.0.0.1"
port = {p5}
weight = 0
health_check = "tcp-fast"

# b3 stays eligible here when b1 is in Maintenance.
[[vservice]]
name = "tcp"
kind = "l7-tcp"
address = "127.0.0.1"
port = {tcp}
backends = ["b1", "b3", "b5"]

# A DNS vService whose one site is this daemon's own `web` vService.
[[dns_vservice]]
name = "g"
address = "127.0.0.1"
port = {dns}
zone = "gslb.test"
poll_period = 0.5

[[dns_vservice.record]]
name = "www"

[[dns_vservice.record.site]]
name = "here"
address = "{DNS_SITE}"
api = "http://{api}"
vservice = "web"
{token}
"#,
        p1 = ports[0],
        p2 = ports[1],
        p3 = ports[2],
        p4 = ports[3],
        p5 = ports[4],
    )
}

/// A minimal HTTP/1.1 GET on loopback, with a Bearer token when given: (status, body).
fn http_get(addr: SocketAddr, path: &str, token: Option<&str>) -> Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(3)))?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("bad HTTP answer: {text:.80}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

fn wait_for_api(addr: SocketAddr, token: Option<&str>, daemon: &mut DaemonProcess) -> Result<()> {
    let start = Instant::now();
    loop {
        if let Ok((200, body)) = http_get(addr, "/api/v1/stats/live", token)
            && body.contains("\"backends\"")
        {
            return Ok(());
        }
        if let Some(status) = daemon.child.try_wait()? {
            bail!("lb run exited with {status}:\n{}", daemon.log_text());
        }
        if start.elapsed() > API_TIMEOUT {
            bail!(
                "the API did not answer on {addr} within {API_TIMEOUT:?}:\n{}",
                daemon.log_text()
            );
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until the API shows `list` tier of vService `vs`'s default list (traffic sent
/// before the backends are OK would be refused, not counted per backend).
fn wait_for_tier(addr: SocketAddr, token: Option<&str>, vs: &str, tier: &str) -> Result<()> {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < API_TIMEOUT {
        if let Ok((200, body)) = http_get(addr, "/api/v1/stats/live", token) {
            let v: serde_json::Value = serde_json::from_str(&body)?;
            let now = v["vservices"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|x| x["name"] == vs)
                .map(|x| x["lists"][0]["tier"].as_str().unwrap_or("").to_string())
                .unwrap_or_default();
            if now == tier {
                return Ok(());
            }
            last = now;
        }
        thread::sleep(Duration::from_millis(100));
    }
    bail!("vService {vs} never reached tier {tier} (last: {last:?})")
}

/// The first live payload with the daemon's history, as the page asks for it on opening.
fn history_payload(addr: SocketAddr, token: Option<&str>) -> Result<serde_json::Value> {
    let (status, body) = http_get(addr, "/api/v1/stats/live?history=1", token)?;
    if status != 200 {
        bail!("GET /api/v1/stats/live?history=1 answered {status}: {body:.200}");
    }
    Ok(serde_json::from_str(&body)?)
}

/// The non-zero requests/s of `vs` in a payload's history.
fn busy_seconds(live: &serde_json::Value, vs: &str) -> usize {
    live["history"]["vservices"][vs]["main"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r.as_f64().is_some_and(|r| r > 0.0))
        .count()
}

/// Waits until the daemon's history holds `seconds` seconds of requests through `vs`, so
/// that a page opened now has them to show at once.
fn wait_for_history(addr: SocketAddr, token: Option<&str>, vs: &str, seconds: usize) -> Result<()> {
    let start = Instant::now();
    let mut seen = 0;
    while start.elapsed() < API_TIMEOUT {
        seen = busy_seconds(&history_payload(addr, token)?, vs);
        if seen >= seconds {
            return Ok(());
        }
        thread::sleep(Duration::from_millis(250));
    }
    bail!("the history of {vs} has {seen} busy seconds, not {seconds}")
}

/// Opens `count` connections through the L7 TCP vService (the proxy forwards each to b1 or
/// b3, which close it at once), so the page has non-zero totals to show (S-OB1).
fn send_traffic(vs: SocketAddr, count: usize) -> Result<()> {
    let start = Instant::now();
    let mut done = 0;
    while done < count {
        if start.elapsed() > API_TIMEOUT {
            bail!("only {done} of {count} connections through {vs} succeeded");
        }
        let Ok(mut s) = TcpStream::connect_timeout(&vs, Duration::from_secs(1)) else {
            thread::sleep(Duration::from_millis(200));
            continue;
        };
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        let _ = s.write_all(b"hello\n");
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
        done += 1;
    }
    Ok(())
}

/// HTTP load through the `web` vService while the page is open, from a thread: paced at
/// 25 requests/s and 80 requests/s in turns of 4 s (so the page's rate moves), one request
/// in 10 to `/missing` (404) and one in 25 to `/fail` (500); loopback only, at most
/// `LOAD_MAX` requests and `LOAD_TIME`.
struct Load {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<u64>>,
}

/// Most requests the load sends.
const LOAD_MAX: u64 = 20_000;
/// Longest time the load runs.
const LOAD_TIME: Duration = Duration::from_secs(150);

impl Load {
    fn start(vs: SocketAddr) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = thread::spawn(move || {
            let start = Instant::now();
            let mut next = start;
            let mut sent = 0u64;
            while !flag.load(Ordering::Relaxed) && sent < LOAD_MAX && start.elapsed() < LOAD_TIME {
                let rate = if (start.elapsed().as_secs() / 4).is_multiple_of(2) {
                    25.0
                } else {
                    80.0
                };
                next += Duration::from_secs_f64(1.0 / rate);
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    thread::sleep(wait);
                }
                let path = match sent {
                    n if n % 25 == 24 => "/fail",
                    n if n % 10 == 9 => "/missing",
                    _ => "/",
                };
                sent += 1;
                let Ok(mut s) = TcpStream::connect_timeout(&vs, Duration::from_secs(1)) else {
                    continue;
                };
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = write!(
                    s,
                    "GET {path} HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n"
                );
                let mut sink = Vec::new();
                let _ = s.read_to_end(&mut sink);
            }
            sent
        });
        Load {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the load and returns how many requests it sent.
    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or(0)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sends `count` A queries for `name` to the DNS vService on `addr` (UDP, loopback) and
/// returns how many were answered, so its query counters are not all zero.
fn dns_queries(addr: SocketAddr, name: &str, count: u16) -> Result<u16> {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0")?;
    sock.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut answered = 0;
    for id in 0..count {
        let mut q = Vec::new();
        q.extend_from_slice(&id.to_be_bytes());
        q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
        for label in name.trim_end_matches('.').split('.') {
            q.push(u8::try_from(label.len())?);
            q.extend_from_slice(label.as_bytes());
        }
        q.extend_from_slice(&[0, 0, 1, 0, 1]);
        sock.send_to(&q, addr)?;
        let mut buf = [0u8; 512];
        if sock.recv_from(&mut buf).is_ok() {
            answered += 1;
        }
    }
    Ok(answered)
}

/// b1's maintenance flag as the configuration file says, through the library's parser.
fn b1_maintenance_in_file(path: &Path) -> Option<bool> {
    let cfg = lb::config::load(path).ok()?;
    cfg.backend_services
        .iter()
        .find(|b| b.name == "b1")
        .map(|b| b.maintenance)
}

/// Runs the browser test while sampling the config file: (exit status, b1 seen in Maintenance).
fn run_spec(
    root: &Path,
    url: &str,
    token: Option<&str>,
    config: &Path,
    screenshot: &Path,
) -> Result<(ExitStatus, bool)> {
    let mut cmd = Command::new("node");
    cmd.arg(root.join("tests/ui/livestats.spec.mjs"))
        .arg(url)
        .args([
            "--backend",
            "b1",
            "--expect",
            "b1=OK,b2=OK,b3=OK,b4=Error,b5=OK",
        ])
        .args(["--history", "web"])
        .args(["--standby", "web/default/b2", "--drained", "tcp/default/b5"])
        .args(["--traffic", &TRAFFIC.to_string()])
        .args(["--load", "web", "--settle", "20"])
        .args(["--dns", &format!("g/www.gslb.test.={DNS_SITE}")])
        .arg("--screenshot")
        .arg(screenshot)
        .env_remove("LB_TOKEN");
    if let Some(t) = token {
        cmd.env("LB_TOKEN", t);
    }
    let mut child = cmd.spawn().context("starting node")?;
    let start = Instant::now();
    let mut seen_on = false;
    loop {
        if b1_maintenance_in_file(config) == Some(true) {
            seen_on = true;
        }
        if let Some(status) = child.try_wait()? {
            return Ok((status, seen_on));
        }
        if start.elapsed() > SPEC_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!("livestats.spec.mjs did not finish within {SPEC_TIMEOUT:?}");
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// One run of the page against a fresh daemon; `token` configures `api.token`.
fn scenario(name: &str, token: Option<&str>) -> Result<()> {
    let root = repo_root();
    let ui = root.join("tests/ui");
    ensure_chromium()?;
    ensure_node_deps(&ui)?;
    let bin = lb_binary()?;

    let backends = [
        Backend::start()?,
        Backend::start()?,
        Backend::start()?,
        Backend::start()?,
    ];
    let ports = [
        backends[0].port,
        backends[1].port,
        backends[2].port,
        free_port()?,
        backends[3].port,
    ];
    let api: SocketAddr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let dir = std::env::temp_dir().join(format!("lb-e2e-ui-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let config = dir.join("lb.toml");
    let tcp_vs = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let web_vs = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let dns_vs = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let text = config_text(
        api,
        token,
        &ports,
        web_vs.port(),
        tcp_vs.port(),
        dns_vs.port(),
    );
    std::fs::write(&config, text)?;
    lb::config::load(&config).map_err(|e| anyhow::anyhow!("test config rejected: {e}"))?;
    assert_eq!(b1_maintenance_in_file(&config), Some(false));

    let mut daemon = DaemonProcess::start(&bin, &config, dir.join("lb.log"))?;
    wait_for_api(api, token, &mut daemon)?;
    let (index_status, index) = http_get(api, "/", token)?;
    assert_eq!(index_status, 200, "GET / answered {index_status}");
    assert!(
        index.contains("/ui/app.js"),
        "GET / is not the Live Stats page"
    );
    if token.is_some() {
        let (status, _) = http_get(api, "/api/v1/stats/live", None)?;
        assert_eq!(status, 401, "the API answered {status} without the token");
    }

    wait_for_tier(api, token, "tcp", "mains")?;
    send_traffic(tcp_vs, TRAFFIC)?;
    wait_for_tier(api, token, "web", "mains")?;
    let load = Load::start(web_vs);
    let answered = dns_queries(dns_vs, "www.gslb.test.", 5)?;
    eprintln!("e2e_ui: {answered} of 5 DNS queries answered");
    // The page opens on a daemon that has been busy for a while: its first render must
    // show those seconds.
    wait_for_history(api, token, "web", 4)?;

    let screenshot = root.join(format!("target/ui-livestats{name}.png"));
    let url = format!("http://{api}/");
    let spec = run_spec(&root, &url, token, &config, &screenshot);
    let sent = load.finish();
    eprintln!("e2e_ui: {sent} HTTP requests sent through the web vService during the spec");
    let (status, seen_on) = spec?;
    if !status.success() {
        bail!(
            "livestats.spec.mjs failed ({status}); daemon log:\n{}",
            daemon.log_text()
        );
    }
    assert!(
        seen_on,
        "maintenance = true never appeared in {} for b1",
        config.display()
    );
    assert_eq!(
        b1_maintenance_in_file(&config),
        Some(false),
        "b1 is still in Maintenance in the file after the page turned it off"
    );
    let text = std::fs::read_to_string(&config)?;
    assert!(
        text.contains(MARKER_COMMENT),
        "write-back lost the file's comments:\n{text}"
    );
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// S-OB1 without a browser: after a few seconds of requests, the first live payload that
/// asks for the history carries them (requests/s per vService and in total, one sample a
/// second, oldest first), and a payload that does not ask carries none.
fn first_payload_carries_the_last_seconds() -> Result<()> {
    let bin = lb_binary()?;
    let backends = [
        Backend::start()?,
        Backend::start()?,
        Backend::start()?,
        Backend::start()?,
    ];
    let ports = [
        backends[0].port,
        backends[1].port,
        backends[2].port,
        free_port()?,
        backends[3].port,
    ];
    let api: SocketAddr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let dir = std::env::temp_dir().join(format!("lb-e2e-history-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let config = dir.join("lb.toml");
    let web_vs = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let (tcp, dns) = (free_port()?, free_port()?);
    std::fs::write(
        &config,
        config_text(api, None, &ports, web_vs.port(), tcp, dns),
    )?;
    let mut daemon = DaemonProcess::start(&bin, &config, dir.join("lb.log"))?;
    wait_for_api(api, None, &mut daemon)?;
    wait_for_tier(api, None, "web", "mains")?;
    let load = Load::start(web_vs);
    thread::sleep(Duration::from_secs(6));
    let live = history_payload(api, None)?;
    let sent = load.finish();
    let h = &live["history"];
    eprintln!("e2e_ui: {sent} requests sent; history: {h}");
    assert_eq!(h["step_ms"], 1000, "{h}");
    let t: Vec<u64> = serde_json::from_value(h["t"].clone())?;
    assert!(t.len() >= 5, "only {} samples after 6 s: {h}", t.len());
    assert!(
        t.windows(2).all(|w| w[1] > w[0] && w[1] - w[0] < 2000),
        "sample times not one a second in order: {t:?}"
    );
    let generated = live["generated_unix_ms"].as_u64().unwrap_or(0);
    let newest = t.last().copied().unwrap_or(0);
    assert!(
        newest <= generated && generated - newest < 2000,
        "newest sample {newest}, payload {generated}"
    );
    let web = &h["vservices"]["web"];
    let main = web["main"].as_array().map_or(0, Vec::len);
    assert!(main <= t.len(), "web has more samples than times: {h}");
    let busy = busy_seconds(&live, "web");
    assert!(busy >= 3, "{busy} seconds of requests through web in {h}");
    let total = h["total"]["requests"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(total.len(), t.len(), "{h}");
    let total_busy = total
        .iter()
        .filter(|r| r.as_f64().is_some_and(|r| r > 0.0))
        .count();
    assert!(total_busy >= 3, "total requests/s: {total:?}");
    assert!(
        h["backends"]["b1"]["main"]
            .as_f64()
            .is_some_and(|r| r > 0.0),
        "b1 serves web: {h}"
    );
    assert!(
        h["vservices"]["tcp"]["main"].is_array(),
        "every vService: {h}"
    );
    let (_, plain) = http_get(api, "/api/v1/stats/live", None)?;
    let plain: serde_json::Value = serde_json::from_str(&plain)?;
    assert!(plain.get("history").is_none(), "history sent unasked");
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// One browser and one daemon at a time (2 cores).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// S-OB1..3 and S-MT8 through the page: health badges, the amber Maintenance marker and the
/// tier change, the transitions chart; Maintenance is written to the file and removed again.
/// The screenshot is `<repo>/target/ui-livestats.png`.
#[test]
fn s_ob1_live_stats_page_shows_health_and_toggles_maintenance() -> Result<()> {
    let _one = serial();
    scenario("", None)
}

/// The same with `api.token` set: the page shows the 401 in its banner until the operator
/// enters the token, keeps it in localStorage and sends it as a Bearer header.
#[test]
fn s_ob1_live_stats_page_with_api_token() -> Result<()> {
    let _one = serial();
    scenario("-token", Some("e2e-ui-secret-token-0123456789"))
}

/// S-OB1: the daemon keeps the last minutes of rates, sampled every second whether or not a
/// page is open, and serves them with the first payload a page asks for.
#[test]
fn s_ob1_first_live_payload_carries_the_last_seconds() -> Result<()> {
    let _one = serial();
    first_payload_carries_the_last_seconds()
}
