//! Configuration and start-up of the processes under test, all on 127.0.0.1:
//!
//! - the backend: nginx answering a small static body with `return 200` (the cheapest answer
//!   nginx can give, so the backend costs every proxy the same and little; it is a real,
//!   well-known server rather than code of ours whose speed could flatter or hurt one peer),
//!   plus two more server blocks that log each request for the Maintenance run;
//! - the three proxies in front of it, configured alike: 2 workers, keep-alive towards
//!   clients and a reused upstream pool, no access logs,
//!   and X-Forwarded-For / X-Forwarded-Proto added (our HTTP vServices add them by default);
//!   each also listens with TLS (the bench's ECDSA P-256 certificate, ALPN h2 and http/1.1,
//!   session resumption as each does by default) in front of the same backend, and takes
//!   [`IDLE_ROOM`] client connections.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};

use lb_tests::bench::{Guard, Scratch, free_port};

use crate::cert::Cert;
use crate::procs::wait_http_ok;

/// Workers / threads of every proxy (`[proxy] workers` for ours, `nbthread` for HAProxy,
/// `worker_processes` for nginx).
pub const WORKERS: u32 = 2;
/// How long a started server may take to answer 200.
const READY_LIMIT: Duration = Duration::from_secs(15);
/// Client connections each proxy must hold at once: the idle case's 10,000 and the active
/// load beside them (HAProxy's `maxconn`; nginx's `worker_connections` per worker).
pub const IDLE_ROOM: u32 = 10_300;
/// The Backend Service names of the Maintenance run.
pub const MAINT_BACKENDS: [&str; 2] = ["maint-a", "maint-b"];

/// Every port the bench uses, picked free at start.
pub struct Ports {
    /// The backend measured behind all three proxies.
    pub origin: u16,
    /// The two logging backends of the Maintenance run (same order as [`MAINT_BACKENDS`]).
    pub maint: [u16; 2],
    /// Our HTTP vService in front of `origin`.
    pub lb: u16,
    /// Our HTTP vService in front of the two `maint` backends.
    pub lb_maint: u16,
    /// Our REST API.
    pub lb_api: u16,
    /// HAProxy's frontend.
    pub haproxy: u16,
    /// nginx's reverse-proxy server.
    pub nginx: u16,
    /// Our HTTP vService with TLS in front of `origin`.
    pub lb_tls: u16,
    /// HAProxy's TLS frontend.
    pub haproxy_tls: u16,
    /// nginx's TLS server.
    pub nginx_tls: u16,
}

impl Ports {
    /// Picks free loopback ports.
    pub fn pick() -> Result<Self> {
        Ok(Self {
            origin: free_port()?,
            maint: [free_port()?, free_port()?],
            lb: free_port()?,
            lb_maint: free_port()?,
            lb_api: free_port()?,
            haproxy: free_port()?,
            nginx: free_port()?,
            lb_tls: free_port()?,
            haproxy_tls: free_port()?,
            nginx_tls: free_port()?,
        })
    }
}

/// 127.0.0.1:`port`.
pub fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// The access log of a Maintenance-run backend (one `$msec` line per request).
pub fn maint_log(scratch: &Scratch, i: usize) -> PathBuf {
    scratch
        .path
        .join(format!("backend/{}.log", MAINT_BACKENDS[i]))
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn nginx_command(prefix: &Path, conf: &Path) -> Command {
    let mut cmd = Command::new("/usr/sbin/nginx");
    cmd.arg("-p")
        .arg(prefix)
        .arg("-c")
        .arg(conf)
        .arg("-e")
        .arg(prefix.join("error.log"))
        .args(["-g", "daemon off;"]);
    cmd
}

/// Starts the backend nginx and waits until it answers.
pub fn start_backend(scratch: &Scratch, ports: &Ports) -> Result<Guard> {
    let dir = scratch.dir("backend")?;
    let conf = dir.join("nginx.conf");
    let mut maint = String::new();
    for (i, port) in ports.maint.iter().enumerate() {
        maint.push_str(&format!(
            "  server {{ listen 127.0.0.1:{port}; access_log {} msec;\n    \
             location / {{ return 200 \"{}\\n\"; }} }}\n",
            maint_log(scratch, i).display(),
            MAINT_BACKENDS[i],
        ));
    }
    write(
        &conf,
        &format!(
            "user www-data;\nworker_processes {WORKERS};\nworker_rlimit_nofile 65536;\n\
             pid {pid};\nerror_log {err} warn;\nevents {{ worker_connections 8192; }}\n\
             http {{\n  access_log off;\n  default_type text/plain;\n  \
             keepalive_requests 10000000;\n  keepalive_timeout 120s;\n  \
             log_format msec '$msec';\n  \
             server {{ listen 127.0.0.1:{origin};\n    \
             location / {{ return 200 \"hello from the bench backend\\n\"; }} }}\n{maint}}}\n",
            pid = dir.join("nginx.pid").display(),
            err = dir.join("error.log").display(),
            origin = ports.origin,
        ),
    )?;
    let mut g = Guard::spawn(
        "backend nginx",
        &mut nginx_command(&dir, &conf),
        &dir.join("stdout.log"),
    )?;
    wait_http_ok(&mut g, local(ports.origin), READY_LIMIT)?;
    for port in ports.maint {
        wait_http_ok(&mut g, local(port), READY_LIMIT)?;
    }
    Ok(g)
}

/// Starts nginx as a reverse proxy in front of the backend.
pub fn start_nginx(scratch: &Scratch, ports: &Ports, cert: &Cert) -> Result<Guard> {
    let dir = scratch.dir("nginx")?;
    let conf = dir.join("nginx.conf");
    write(
        &conf,
        &format!(
            "user www-data;\nworker_processes {WORKERS};\nworker_rlimit_nofile 65536;\n\
             pid {pid};\nerror_log {err} warn;\n\
             events {{ worker_connections {IDLE_ROOM}; }}\n\
             http {{\n  access_log off;\n  keepalive_requests 10000000;\n  \
             keepalive_timeout 60s;\n  \
             upstream origin {{ server 127.0.0.1:{origin}; keepalive 64; \
             keepalive_requests 10000000; }}\n  \
             server {{ listen 127.0.0.1:{port};\n    location / {{\n      \
             proxy_pass http://origin;\n      proxy_http_version 1.1;\n      \
             proxy_set_header Connection \"\";\n      \
             proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n      \
             proxy_set_header X-Forwarded-Proto $scheme;\n    }}\n  }}\n  \
             server {{ listen 127.0.0.1:{tls} ssl http2;\n    \
             ssl_certificate {cert};\n    ssl_certificate_key {key};\n    \
             ssl_protocols TLSv1.3;\n    location / {{\n      \
             proxy_pass http://origin;\n      proxy_http_version 1.1;\n      \
             proxy_set_header Connection \"\";\n      \
             proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n      \
             proxy_set_header X-Forwarded-Proto $scheme;\n    }}\n  }}\n}}\n",
            pid = dir.join("nginx.pid").display(),
            err = dir.join("error.log").display(),
            origin = ports.origin,
            port = ports.nginx,
            tls = ports.nginx_tls,
            cert = cert.cert.display(),
            key = cert.key.display(),
        ),
    )?;
    let mut g = Guard::spawn(
        "nginx proxy",
        &mut nginx_command(&dir, &conf),
        &dir.join("stdout.log"),
    )?;
    wait_http_ok(&mut g, local(ports.nginx), READY_LIMIT)?;
    Ok(g)
}

/// Starts HAProxy (`mode http`, `http-reuse always`, no log lines) in the foreground.
/// `no strict-limits`: HAProxy reserves two descriptors per `maxconn` (client and server
/// side), more than a 20,000 open-file hard limit allows for [`IDLE_ROOM`], though idle
/// client connections hold one each.
pub fn start_haproxy(scratch: &Scratch, ports: &Ports, cert: &Cert) -> Result<Guard> {
    let dir = scratch.dir("haproxy")?;
    let conf = dir.join("haproxy.cfg");
    write(
        &conf,
        &format!(
            "global\n  nbthread {WORKERS}\n  maxconn {IDLE_ROOM}\n  no strict-limits\n  \
             pidfile {pid}\n\
             defaults\n  mode http\n  option http-keep-alive\n  option forwardfor\n  \
             http-reuse always\n  timeout connect 5s\n  timeout client 30s\n  \
             timeout server 30s\n  timeout http-keep-alive 60s\n\
             frontend fe\n  bind 127.0.0.1:{port}\n  \
             http-request set-header X-Forwarded-Proto http\n  default_backend be\n\
             frontend fe_tls\n  \
             bind 127.0.0.1:{tls} ssl crt {bundle} alpn h2,http/1.1 ssl-min-ver TLSv1.3\n  \
             http-request set-header X-Forwarded-Proto https\n  default_backend be\n\
             backend be\n  server origin 127.0.0.1:{origin}\n",
            pid = dir.join("haproxy.pid").display(),
            origin = ports.origin,
            port = ports.haproxy,
            tls = ports.haproxy_tls,
            bundle = cert.bundle.display(),
        ),
    )?;
    let mut g = Guard::spawn(
        "haproxy",
        Command::new("/usr/sbin/haproxy")
            .arg("-f")
            .arg(&conf)
            .arg("-db"),
        &dir.join("stdout.log"),
    )?;
    wait_http_ok(&mut g, local(ports.haproxy), READY_LIMIT)?;
    Ok(g)
}

/// Starts `lb run` with three HTTP vServices (the measured one over `origin`, the same with
/// TLS, and the Maintenance run's over the two logging backends) and its API; no Network vService, so
/// it runs without XDP. Health reflection is immediate and no health check is configured,
/// so every backend is OK from the start. Logs at `warn` only, like the others' logs off.
pub fn start_lb(lb_bin: &Path, scratch: &Scratch, ports: &Ports, cert: &Cert) -> Result<Guard> {
    let dir = scratch.dir("lb")?;
    let conf = dir.join("lb.toml");
    let [a, b] = MAINT_BACKENDS;
    write(
        &conf,
        &format!(
            "[reflection]\nl7_delay = 0.0\n\n[proxy]\nworkers = {WORKERS}\n\n\
             [api]\nlisten = \"127.0.0.1:{api}\"\n\n\
             [[backend_service]]\nname = \"origin\"\naddress = \"127.0.0.1\"\nport = {origin}\n\n\
             [[backend_service]]\nname = \"{a}\"\naddress = \"127.0.0.1\"\nport = {pa}\n\n\
             [[backend_service]]\nname = \"{b}\"\naddress = \"127.0.0.1\"\nport = {pb}\n\n\
             [[vservice]]\nname = \"bench\"\nkind = \"http\"\naddress = \"127.0.0.1\"\n\
             port = {port}\nbackends = [\"origin\"]\n\n\
             [[vservice]]\nname = \"maint\"\nkind = \"http\"\naddress = \"127.0.0.1\"\n\
             port = {mport}\nbackends = [\"{a}\", \"{b}\"]\n\n\
             [[vservice]]\nname = \"bench-tls\"\nkind = \"http\"\naddress = \"127.0.0.1\"\n\
             port = {tls}\nbackends = [\"origin\"]\n\n\
             [vservice.tls]\ncert = \"{cert}\"\nkey = \"{key}\"\n",
            api = ports.lb_api,
            origin = ports.origin,
            pa = ports.maint[0],
            pb = ports.maint[1],
            port = ports.lb,
            mport = ports.lb_maint,
            tls = ports.lb_tls,
            cert = cert.cert.display(),
            key = cert.key.display(),
        ),
    )?;
    let mut g = Guard::spawn(
        "lb run",
        Command::new(lb_bin)
            .arg("run")
            .arg("--config")
            .arg(&conf)
            .env("RUST_LOG", "warn"),
        &dir.join("lb.log"),
    )?;
    wait_http_ok(&mut g, local(ports.lb), READY_LIMIT)?;
    wait_http_ok(&mut g, local(ports.lb_maint), READY_LIMIT)?;
    Ok(g)
}
