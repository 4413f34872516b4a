//! The two checkers compared, configured alike: every service a TCP check at the same
//! Period, a 1 s Timeout, Rise 3 and Fall 2, against the same listener port.
//!
//! - ours: the real daemon, `lb run --config FILE`, with one `[[health_check]]` of type
//!   `tcp` and the Backend Services. No vService: the engine checks every Backend Service
//!   that has a profile, referenced or not, and without a Network vService the daemon runs
//!   without XDP. Its REST API on a loopback port tells how many services are OK.
//! - HAProxy: a `server ... check inter P fall 2 rise 3` line per service, 10,000 to a
//!   backend (no frontend: none is needed for checks to run), run in the foreground, its stats
//!   socket (a unix socket in the scratch directory) telling how many servers are UP.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use lb_tests::bench::{Guard, Scratch, free_port};

use crate::procs::http_get;
use crate::setup::HAPROXY;

/// Threads of both checkers: `lb run` drives its daemon (the health engine with it) on a
/// Tokio runtime of 2 worker threads (lb-userspace/src/run.rs), so HAProxy gets
/// `nbthread 2` (also its default on this 2-core VM).
pub const THREADS: u32 = 2;
/// Servers per HAProxy backend: the 10,000-service run has exactly one backend, larger runs
/// more of the same size. HAProxy 2.6 reads a backend's server lines in time quadratic in
/// their number (`haproxy -c` here: 10,000 in one backend 2.7 s, 20,000 9 s; 50,000 in one
/// backend did not start within 75 s, in five backends it reads them in 9 s).
pub const SERVERS_PER_BACKEND: usize = 10_000;
/// Most services one listener port can take with the address layout of [`address`].
pub const MAX_SERVICES: usize = 250 * 256;

/// Which checker.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Peer {
    Lb,
    Haproxy,
}

impl Peer {
    pub fn name(self) -> &'static str {
        match self {
            Peer::Lb => "lb",
            Peer::Haproxy => "haproxy",
        }
    }
}

/// What is checked, and how often.
#[derive(Clone, Copy)]
pub struct Plan {
    pub services: usize,
    /// Period in seconds (HAProxy's `inter`).
    pub period: u64,
    /// The listener's port, shared by every service.
    pub port: u16,
}

/// Service `i` is 127.1.{i / 250}.{i % 250 + 1}.
pub fn address(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 1, (i / 250) as u8, (i % 250 + 1) as u8)
}

/// How many of the services are healthy (OK for ours, UP after a passed check for HAProxy).
#[derive(Clone, Default, Debug)]
pub struct Health {
    pub ok: usize,
    /// A short account of the others, for messages.
    pub detail: String,
}

/// A started checker; stopped when dropped.
pub struct Running {
    pub peer: Peer,
    pub guard: Guard,
    /// Our REST API.
    api: Option<SocketAddr>,
    /// HAProxy's stats socket.
    stats: Option<PathBuf>,
}

impl Running {
    /// Reads the health of every service; `Err` while the checker cannot answer yet.
    pub fn health(&mut self) -> Result<Health> {
        self.guard.check_alive()?;
        match (self.api, &self.stats) {
            (Some(api), _) => lb_health(api),
            (None, Some(sock)) => haproxy_health(sock),
            (None, None) => bail!("no way to read {}'s health", self.peer.name()),
        }
    }

    /// What the checker says of its TCP check profile (ours: the handshake it uses).
    pub fn profile_note(&self) -> Option<String> {
        let body = http_get(self.api?, "/api/v1/profiles").ok()?;
        let v: Value = serde_json::from_str(&body).ok()?;
        let p = v["profiles"].as_array()?.first()?;
        Some(match p["handshake"].as_str() {
            Some(h) => format!("handshake {h}"),
            None => "handshake not reported by this lb".into(),
        })
    }
}

/// Writes both configurations for `plan` into the scratch directory.
pub struct Configs {
    lb: PathBuf,
    lb_api: SocketAddr,
    haproxy: PathBuf,
    haproxy_stats: PathBuf,
    scratch: PathBuf,
}

impl Configs {
    pub fn write(scratch: &Scratch, plan: Plan) -> Result<Self> {
        let tag = format!("{}x{}s", plan.services, plan.period);
        let lb_api = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let configs = Self {
            lb: scratch.path.join(format!("lb-{tag}.toml")),
            lb_api,
            haproxy: scratch.path.join(format!("haproxy-{tag}.cfg")),
            haproxy_stats: scratch.path.join("haproxy.sock"),
            scratch: scratch.path.clone(),
        };
        write(&configs.lb, &lb_config(plan, lb_api))?;
        write(
            &configs.haproxy,
            &haproxy_config(plan, &configs.haproxy_stats, &scratch.path),
        )?;
        Ok(configs)
    }

    /// `lb check-config` on our file, so a rejected config says why before any round.
    pub fn check_lb(&self, lb_bin: &Path) -> Result<String> {
        let out = Command::new(lb_bin)
            .arg("check-config")
            .arg(&self.lb)
            .output()
            .with_context(|| format!("running {} check-config", lb_bin.display()))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            bail!("lb check-config rejected the bench's config:\n{text}");
        }
        Ok(text.trim().to_string())
    }

    /// Starts `peer` on this configuration.
    pub fn start(&self, peer: Peer, lb_bin: &Path) -> Result<Running> {
        match peer {
            Peer::Lb => {
                // Every round warms up from Preparing: the states the previous round saved
                // would otherwise be restored (a restart within 30 s keeps its decisions).
                let _ = std::fs::remove_file(lb::daemon::states_path(&self.lb));
                let guard = Guard::spawn(
                    "lb run",
                    Command::new(lb_bin)
                        .arg("run")
                        .arg("--config")
                        .arg(&self.lb)
                        .env("RUST_LOG", "warn"),
                    &self.scratch.join("lb.log"),
                )?;
                Ok(Running {
                    peer,
                    guard,
                    api: Some(self.lb_api),
                    stats: None,
                })
            }
            Peer::Haproxy => {
                let _ = std::fs::remove_file(&self.haproxy_stats);
                let guard = Guard::spawn(
                    "haproxy",
                    Command::new(HAPROXY)
                        .arg("-f")
                        .arg(&self.haproxy)
                        .arg("-db"),
                    &self.scratch.join("haproxy.log"),
                )?;
                Ok(Running {
                    peer,
                    guard,
                    api: None,
                    stats: Some(self.haproxy_stats.clone()),
                })
            }
        }
    }
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Our configuration: the API on loopback, one TCP profile, the Backend Services.
fn lb_config(plan: Plan, api: SocketAddr) -> String {
    let mut s = format!(
        "[api]\nlisten = \"{api}\"\n\n\
         [[health_check]]\nname = \"tcp\"\ntype = \"tcp\"\nperiod = {}\ntimeout = 1\n\
         required_successes = 3\nrequired_failures = 2\n",
        plan.period
    );
    for i in 0..plan.services {
        s.push_str(&format!(
            "\n[[backend_service]]\nname = \"be-{i:05}\"\naddress = \"{}\"\nport = {}\n\
             health_check = \"tcp\"\n",
            address(i),
            plan.port
        ));
    }
    s
}

/// HAProxy's configuration, [`SERVERS_PER_BACKEND`] servers per backend. `balance static-rr`
/// because `roundrobin` (the default) is limited to 4095 active servers per backend; the
/// algorithm plays no part in checks. `maxconn` bounds client connections, of which there are
/// none here; HAProxy sizes its descriptor limit from it plus one per checked server (18,219
/// with 10,000 servers). The stats socket is also what HAProxy needs to start at all: without
/// a listener of some kind it refuses ("will not start (no listener)"); no frontend is needed.
/// `no strict-limits`: HAProxy wants 2 x maxconn plus one descriptor per checked server
/// (58,219 with 50,000 servers) and by default exits when it cannot raise RLIMIT_NOFILE that
/// far, which it cannot past this VM's hard limit of 20,000; without strict limits it warns
/// and runs with the limit it has. The checks hold a few descriptors at a time (each lasts
/// under 1 ms).
fn haproxy_config(plan: Plan, stats: &Path, dir: &Path) -> String {
    let mut s = format!(
        "global\n  nbthread {THREADS}\n  maxconn 4096\n  no strict-limits\n  \
         pidfile {pid}\n  \
         stats socket {sock} mode 600 level user\n\
         defaults\n  mode tcp\n  timeout connect 1s\n  timeout check 1s\n  \
         timeout client 30s\n  timeout server 30s\n",
        pid = dir.join("haproxy.pid").display(),
        sock = stats.display(),
    );
    for i in 0..plan.services {
        if i % SERVERS_PER_BACKEND == 0 {
            s.push_str(&format!(
                "backend be{}\n  balance static-rr\n",
                i / SERVERS_PER_BACKEND
            ));
        }
        s.push_str(&format!(
            "  server s{i} {}:{} check inter {}s fall 2 rise 3\n",
            address(i),
            plan.port,
            plan.period
        ));
    }
    s
}

/// `GET /api/v1/status`: services by health.
fn lb_health(api: SocketAddr) -> Result<Health> {
    let body = http_get(api, "/api/v1/status")?;
    let v: Value = serde_json::from_str(&body).context("/api/v1/status is not JSON")?;
    let by = &v["backend_services"]["by_health"];
    let n = |k: &str| by[k].as_u64().unwrap_or(0);
    Ok(Health {
        ok: n("OK") as usize,
        detail: format!(
            "OK {}, Preparing {}, Error {}",
            n("OK"),
            n("Preparing"),
            n("Error")
        ),
    })
}

/// `show stat` on the stats socket: servers of backend `be` that are UP and whose last check
/// passed (HAProxy starts servers UP before any check, so UP alone says nothing yet).
fn haproxy_health(sock: &Path) -> Result<Health> {
    let mut s =
        UnixStream::connect(sock).with_context(|| format!("connecting to {}", sock.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"show stat\n")?;
    let mut csv = String::new();
    s.read_to_string(&mut csv)?;
    let mut lines = csv.lines();
    let header: Vec<&str> = lines
        .next()
        .and_then(|h| h.strip_prefix("# "))
        .context("show stat: no header")?
        .split(',')
        .collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .with_context(|| format!("show stat: no column {name}"))
    };
    let (px, sv, status, check) = (
        col("pxname")?,
        col("svname")?,
        col("status")?,
        col("check_status")?,
    );
    let (mut ok, mut servers) = (0, 0);
    let mut other: std::collections::BTreeMap<String, usize> = Default::default();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        let ours = f.get(px).is_some_and(|p| p.starts_with("be"));
        if !ours || matches!(f.get(sv), Some(&"BACKEND" | &"FRONTEND") | None) {
            continue;
        }
        servers += 1;
        let (st, ck) = (
            f.get(status).copied().unwrap_or(""),
            f.get(check).copied().unwrap_or(""),
        );
        // A check under way shows as "* L4OK": the status of the last one, with a marker.
        if st == "UP" && ck.trim_start_matches("* ").starts_with("L4OK") {
            ok += 1;
        } else {
            *other.entry(format!("{st} {ck}")).or_default() += 1;
        }
    }
    let rest: Vec<String> = other.iter().map(|(k, n)| format!("{k}: {n}")).collect();
    Ok(Health {
        ok,
        detail: format!(
            "{servers} servers, UP and last check L4OK {ok}; others {}",
            if rest.is_empty() {
                "none".into()
            } else {
                rest.join(", ")
            }
        ),
    })
}
