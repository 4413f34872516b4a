//! `lb` subcommands that talk to a running daemon's API: set flags, list backends and
//! vServices, transitions, sessions, reload, cluster. `--json` prints the raw answer.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use hyper::Method;
use serde_json::{Value, json};

use super::client::{ApiClient, ClientTls};

/// Where the API is and how to print.
#[derive(Args, Clone, Debug)]
pub struct ApiOpts {
    /// API base URL: http://HOST:PORT, https://HOST:PORT, or unix:/PATH for the local
    /// socket (`[api] socket`, where no token is needed).
    #[arg(long, default_value = "http://127.0.0.1:9180")]
    pub api: String,
    /// Bearer token (default: the LB_TOKEN environment variable).
    #[arg(long)]
    pub token: Option<String>,
    /// CA certificate (PEM) an https:// API's certificate must chain to (default: the
    /// LB_CA environment variable, else the system's trust store).
    #[arg(long, value_name = "FILE")]
    pub ca: Option<std::path::PathBuf>,
    /// Client certificate (PEM) for an API that asks for one (`[api] client_ca`); with
    /// --key (default: the LB_CERT environment variable).
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<std::path::PathBuf>,
    /// Private key (PEM) of --cert (default: the LB_KEY environment variable).
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<std::path::PathBuf>,
    /// Print the raw JSON answer.
    #[arg(long)]
    pub json: bool,
}

/// `on` or `off`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum OnOff {
    /// Turn the flag on.
    On,
    /// Turn the flag off.
    Off,
}

/// A flag of a Backend Service or Group.
#[derive(Subcommand, Debug)]
pub enum FlagCommand {
    /// Maintenance: stop new traffic, keep open connections.
    Maintenance {
        /// Name.
        name: String,
        /// on or off.
        state: OnOff,
        #[command(flatten)]
        opts: ApiOpts,
    },
    /// Backup: serve only while no main server of the list can.
    Backup {
        /// Name.
        name: String,
        /// on or off.
        state: OnOff,
        #[command(flatten)]
        opts: ApiOpts,
    },
}

/// What can be set on a Backend Service.
#[derive(Subcommand, Debug)]
pub enum BackendCommand {
    /// Maintenance or Backup.
    #[command(flatten)]
    Flag(FlagCommand),
    /// Weight of new requests and flows (0 drains: open ones continue, new ones go
    /// elsewhere), like HAProxy's `set server weight`.
    Weight {
        /// Name.
        name: String,
        /// 0 to 65535.
        weight: u16,
        #[command(flatten)]
        opts: ApiOpts,
    },
}

/// Session Affinity Manager: which client is pinned to which server.
#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// List the persistence pins of a vService.
    List {
        /// vService name.
        vservice: String,
        #[command(flatten)]
        opts: ApiOpts,
    },
    /// Move the pins of one backend to others (before maintenance).
    Rebalance {
        /// vService name.
        vservice: String,
        /// Backend Service whose pins move.
        backend: String,
        #[command(flatten)]
        opts: ApiOpts,
    },
    /// Drop every pin of a vService (Clear All).
    Clear {
        /// vService name.
        vservice: String,
        #[command(flatten)]
        opts: ApiOpts,
    },
}

/// Cluster commands: configuration shared with peer balancers.
#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Synchronize: push this node's configuration to every peer now (with etcd: publish
    /// the changes staged here; `--discard` drops them and runs etcd's revision again).
    Sync {
        /// With etcd: drop the changes staged here instead of publishing them.
        #[arg(long)]
        discard: bool,
        #[command(flatten)]
        opts: ApiOpts,
    },
    /// Peers, Manual Sync Mode and the last sync result per peer; with etcd: whether etcd
    /// answers, the revision applied here and every node with the revision it runs.
    Status {
        #[command(flatten)]
        opts: ApiOpts,
    },
}

/// Every API subcommand of `lb`.
#[derive(Subcommand, Debug)]
pub enum ApiCommand {
    /// Set a Backend Service's Maintenance or Backup flag or its weight (written to the
    /// config file).
    #[command(subcommand)]
    Backend(BackendCommand),
    /// Set a Backend Group's Maintenance or Backup flag (written to the config file).
    #[command(subcommand)]
    Group(FlagCommand),
    /// List Backend Services with health, flags and counters.
    Backends {
        #[command(flatten)]
        opts: ApiOpts,
    },
    /// List vServices with each list's tier and members.
    Vservices {
        #[command(flatten)]
        opts: ApiOpts,
    },
    /// Counters of every vService and of each Backend Service in it (like HAProxy's `show
    /// stat`): a table, or with `--csv` the CSV the API serves at /api/v1/stats.csv.
    Stats {
        /// Print CSV (one row per vService and per member of its lists).
        #[arg(long)]
        csv: bool,
        #[command(flatten)]
        opts: ApiOpts,
    },
    /// Health transitions and recent checks of a Backend Service.
    Transitions {
        /// Backend Service name.
        name: String,
        #[command(flatten)]
        opts: ApiOpts,
    },
    /// Session Affinity Manager: list, rebalance, clear persistence pins.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Reload the daemon's configuration file.
    Reload {
        #[command(flatten)]
        opts: ApiOpts,
    },
    /// Cluster synchronisation.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// This balancer in the routers' ECMP group: drain, resume, what it announces.
    #[command(subcommand)]
    Node(super::node_cli::NodeCommand),
}

/// Runs one API subcommand to completion (its own small runtime).
pub fn run(cmd: ApiCommand) -> Result<()> {
    block_on(run_async(cmd))
}

/// Runs one CLI command's calls to completion on a small runtime of its own.
pub(super) fn block_on<T>(calls: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(calls)
}

impl ApiOpts {
    /// A client of the API at `--api`, with `--token` or else `LB_TOKEN`, and for https://
    /// `--ca`, `--cert` and `--key` or else `LB_CA`, `LB_CERT` and `LB_KEY`.
    pub(super) fn client(&self, timeout: Duration) -> ApiClient {
        let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let token = self
            .token
            .clone()
            .or_else(|| std::env::var("LB_TOKEN").ok())
            .filter(|t| !t.is_empty());
        let ca = self.ca.clone().or_else(|| env("LB_CA").map(Into::into));
        let identity = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            _ => env("LB_CERT")
                .zip(env("LB_KEY"))
                .map(|(c, k)| (c.into(), k.into())),
        };
        ApiClient::with_tls(&self.api, token, timeout, &ClientTls { ca, identity })
    }
}

/// Epoch milliseconds as local date and time to the millisecond (`--json` keeps the
/// milliseconds); the value itself when it is not a time.
fn local_time(ms: &Value) -> String {
    let time = ms
        .as_i64()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| t.with_timezone(&chrono::Local));
    match time {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
        None => ms.to_string(),
    }
}

fn on(s: OnOff) -> Value {
    json!({ "on": matches!(s, OnOff::On) })
}

async fn run_async(cmd: ApiCommand) -> Result<()> {
    use ApiCommand as C;
    let flag = |kind: &'static str, f: FlagCommand| match f {
        FlagCommand::Maintenance { name, state, opts } => (
            opts,
            Method::POST,
            format!("/api/v1/{kind}/{}/maintenance", enc(&name)),
            Some(on(state)),
            Print::Done,
        ),
        FlagCommand::Backup { name, state, opts } => (
            opts,
            Method::POST,
            format!("/api/v1/{kind}/{}/backup", enc(&name)),
            Some(on(state)),
            Print::Done,
        ),
    };
    let (opts, method, path, body, print) = match cmd {
        C::Backend(BackendCommand::Flag(f)) => flag("backends", f),
        C::Backend(BackendCommand::Weight { name, weight, opts }) => (
            opts,
            Method::POST,
            format!("/api/v1/backends/{}/weight", enc(&name)),
            Some(json!({ "weight": weight })),
            Print::Done,
        ),
        C::Group(f) => flag("groups", f),
        C::Backends { opts } => (
            opts,
            Method::GET,
            "/api/v1/backends".into(),
            None,
            Print::Backends,
        ),
        C::Vservices { opts } => (
            opts,
            Method::GET,
            "/api/v1/vservices".into(),
            None,
            Print::VServices,
        ),
        C::Stats { csv, opts } => (
            opts,
            Method::GET,
            "/api/v1/stats.csv".into(),
            None,
            if csv { Print::Csv } else { Print::Stats },
        ),
        C::Transitions { name, opts } => (
            opts,
            Method::GET,
            format!("/api/v1/backends/{}/transitions", enc(&name)),
            None,
            Print::Transitions,
        ),
        C::Sessions(SessionsCommand::List { vservice, opts }) => (
            opts,
            Method::GET,
            format!("/api/v1/vservices/{}/sessions", enc(&vservice)),
            None,
            Print::Sessions,
        ),
        C::Sessions(SessionsCommand::Rebalance {
            vservice,
            backend,
            opts,
        }) => (
            opts,
            Method::POST,
            format!("/api/v1/vservices/{}/sessions/rebalance", enc(&vservice)),
            Some(json!({ "backend": backend })),
            Print::Done,
        ),
        C::Sessions(SessionsCommand::Clear { vservice, opts }) => (
            opts,
            Method::DELETE,
            format!("/api/v1/vservices/{}/sessions", enc(&vservice)),
            None,
            Print::Done,
        ),
        C::Reload { opts } => (
            opts,
            Method::POST,
            "/api/v1/reload".into(),
            None,
            Print::Done,
        ),
        C::Cluster(ClusterCommand::Sync { discard, opts }) => (
            opts,
            Method::POST,
            "/api/v1/cluster/sync".into(),
            discard.then(|| json!({ "discard": true })),
            Print::Cluster,
        ),
        C::Node(node) => return super::node_cli::run(node).await,
        C::Cluster(ClusterCommand::Status { opts }) => (
            opts,
            Method::GET,
            "/api/v1/cluster".into(),
            None,
            Print::Cluster,
        ),
    };
    let client = opts.client(Duration::from_secs(30));
    let answer = client.call(method, &path, body.as_ref()).await?;
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&answer.body)?);
    } else if answer.ok() {
        print.show(&answer.body);
    }
    if !answer.ok() {
        if !opts.json {
            for issue in answer
                .body
                .get("issues")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                eprintln!("  {}", issue.as_str().unwrap_or_default());
            }
            if let Some(results) = answer.body.get("results") {
                Print::Cluster.show(&json!({ "results": results }));
            }
        }
        bail!("{}", answer.error_text());
    }
    Ok(())
}

/// Percent-encodes a path segment.
fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// How an answer is shown as text.
pub(super) enum Print {
    Done,
    Backends,
    VServices,
    Transitions,
    Sessions,
    Cluster,
    Csv,
    Stats,
}

/// The columns `lb stats` shows of the CSV (those empty in every row are left out).
const STATS_COLUMNS: [&str; 15] = [
    "vservice",
    "backend",
    "list",
    "state",
    "health",
    "weight",
    "current",
    "total",
    "bytes_in",
    "bytes_out",
    "http_5xx",
    "retries",
    "packets",
    "bytes",
    "reply_packets",
];

/// The CSV of /api/v1/stats.csv as an aligned table of [`STATS_COLUMNS`].
fn stats_table(text: &str) -> Result<String> {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header = reader.headers().context("reading the CSV header")?.clone();
    let picked: Vec<usize> = STATS_COLUMNS
        .iter()
        .filter_map(|c| header.iter().position(|h| h == *c))
        .collect();
    let mut rows: Vec<Vec<String>> = vec![picked.iter().map(|&i| header[i].to_string()).collect()];
    for record in reader.records() {
        let record = record.context("reading a CSV row")?;
        rows.push(
            picked
                .iter()
                .map(|&i| record.get(i).unwrap_or_default().to_string())
                .collect(),
        );
    }
    let used: Vec<usize> = (0..picked.len())
        .filter(|&c| rows.iter().skip(1).any(|r| !r[c].is_empty()))
        .collect();
    let widths: Vec<usize> = used
        .iter()
        .map(|&c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = used
            .iter()
            .zip(&widths)
            .map(|(&c, &w)| {
                let cell = if row[c].is_empty() { "-" } else { &row[c] };
                // Names left, numbers right.
                if c < 6 {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    Ok(out)
}

pub(super) fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(super) fn items<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key).and_then(Value::as_array).into_iter().flatten()
}

impl Print {
    pub(super) fn show(&self, v: &Value) {
        match self {
            Print::Done => {
                let text = v.as_object().map_or_else(
                    || s(v),
                    |o| {
                        o.iter()
                            .map(|(k, x)| format!("{k}={}", s(x)))
                            .collect::<Vec<_>>()
                            .join(" ")
                    },
                );
                println!("ok: {text}");
            }
            Print::Backends => {
                println!(
                    "{:<20} {:<22} {:>6} {:<9} {:<5} {:<6} {:<9} {:>8} {:>10}  used in",
                    "backend",
                    "address",
                    "weight",
                    "health",
                    "maint",
                    "backup",
                    "server",
                    "current",
                    "total"
                );
                for b in items(v, "backends") {
                    let used: Vec<String> = items(b, "used_in")
                        .map(|u| format!("{}({})", s(&u["vservice"]), s(&u["list"])))
                        .collect();
                    println!(
                        "{:<20} {:<22} {:>6} {:<9} {:<5} {:<6} {:<9} {:>8} {:>10}  {}",
                        s(&b["name"]),
                        host_port(&s(&b["address"]), s(&b["port"])),
                        s(&b["weight"]),
                        s(&b["health"]),
                        if b["maintenance"] == true { "on" } else { "-" },
                        if b["backup"] == true { "on" } else { "-" },
                        s(&b["server"]),
                        s(&b["current_sessions"]),
                        s(&b["total"]),
                        used.join(", ")
                    );
                    // A dual-stack service's IPv6 address, checked on its own.
                    if b["address6"].is_string() {
                        println!(
                            "{:<20} {:<22} {:>6} {:<9}",
                            crate::config::ipv6_health_key(&s(&b["name"])),
                            host_port(&s(&b["address6"]), s(&b["port"])),
                            "",
                            s(&b["health6"]),
                        );
                    }
                }
            }
            Print::VServices => {
                for vs in items(v, "vservices") {
                    let mut vips = vec![host_port(&s(&vs["address"]), s(&vs["ports"]))];
                    if vs["address6"].is_string() {
                        vips.push(host_port(&s(&vs["address6"]), s(&vs["ports"])));
                    }
                    println!("{} {} {}", s(&vs["name"]), s(&vs["kind"]), vips.join(" "));
                    for l in items(vs, "lists") {
                        let members: Vec<String> = items(l, "members")
                            .map(|m| {
                                format!("{}[{},{}]", s(&m["name"]), s(&m["role"]), s(&m["state"]))
                            })
                            .collect();
                        println!(
                            "  list {:<16} tier {:<9} {}",
                            s(&l["name"]),
                            s(&l["tier"]),
                            members.join(" ")
                        );
                    }
                    if let Some(c) = vs["counters"].as_object() {
                        let line: Vec<String> =
                            c.iter().map(|(k, x)| format!("{k}={}", s(x))).collect();
                        println!("  counters: {}", line.join(" "));
                    }
                }
            }
            Print::Transitions => {
                println!(
                    "{:<23} {:<10} {:<10} {:>8}  reason",
                    "at (local time)", "from", "to", "check_ms"
                );
                for t in items(v, "transitions") {
                    println!(
                        "{:<23} {:<10} {:<10} {:>8}  {}",
                        local_time(&t["at_unix_ms"]),
                        s(&t["from"]),
                        s(&t["to"]),
                        s(&t["check_ms"]),
                        s(&t["reason"])
                    );
                }
                let checks: Vec<&Value> = items(v, "checks").collect();
                let failed = checks.iter().filter(|c| c["ok"] == false).count();
                println!("recent checks: {} ({} failed)", checks.len(), failed);
            }
            Print::Csv => print!("{}", v.as_str().unwrap_or_default()),
            Print::Stats => match stats_table(v.as_str().unwrap_or_default()) {
                Ok(table) => print!("{table}"),
                Err(e) => eprintln!("error: {e:#}"),
            },
            Print::Sessions => {
                println!("{:<40} {:<20} idle", "key", "backend");
                for p in items(v, "pins") {
                    println!(
                        "{:<40} {:<20} {}",
                        s(&p["key"]),
                        s(&p["backend"]),
                        s(&p["idle_ms"])
                    );
                }
            }
            Print::Cluster => {
                if v["store"] == "etcd" {
                    return etcd_status(v);
                }
                if v.get("revision").is_some() {
                    println!("published: revision {}", s(&v["revision"]));
                    return;
                }
                if let Some(m) = v.get("manual_sync") {
                    println!("enabled={} manual_sync={}", s(&v["enabled"]), s(m));
                }
                for p in items(v, "peers") {
                    let last = &p["last_sync"];
                    println!(
                        "peer {:<16} {:<28} last sync: {}",
                        s(&p["name"]),
                        s(&p["url"]),
                        if last.is_null() {
                            "never".into()
                        } else {
                            sync_line(last)
                        }
                    );
                }
                for r in items(v, "results") {
                    println!("peer {:<16} {}", s(&r["peer"]), sync_line(r));
                }
            }
        }
    }
}

/// `lb cluster status` with `store = "etcd"`: this node's view of etcd, then every node
/// registered there and whether it runs the revision etcd holds.
fn etcd_status(v: &Value) {
    let st = &v["status"];
    println!(
        "node {} (etcd {}, prefix {}), manual_sync={}",
        s(&v["node"]),
        v["endpoints"]
            .as_array()
            .map(|a| a.iter().map(s).collect::<Vec<_>>().join(","))
            .unwrap_or_default(),
        s(&v["prefix"]),
        s(&v["manual_sync"])
    );
    if st["store_reachable"] == true {
        println!(
            "etcd: reachable, holds revision {}",
            s(&st["store_revision"])
        );
    } else {
        println!(
            "etcd: UNREACHABLE ({}): running on the last applied revision",
            s(&st["store_error"])
        );
    }
    println!(
        "applied here: revision {}{}",
        s(&st["applied_revision"]),
        if st["staged"] == true {
            ", with changes staged for Synchronize"
        } else {
            ""
        }
    );
    if !st["refused"].is_null() {
        println!(
            "REFUSED revision {}: {}",
            s(&st["refused"]["revision"]),
            s(&st["refused"]["error"])
        );
    }
    println!("{:<20} {:<22} {:>9}  agrees", "node", "api", "revision");
    for n in items(v, "nodes") {
        let refused = match n["refused"].is_null() {
            true => String::new(),
            false => format!("  refused revision {}", s(&n["refused"]["revision"])),
        };
        println!(
            "{:<20} {:<22} {:>9}  {}{refused}",
            s(&n["name"]),
            s(&n["api"]),
            s(&n["applied_revision"]),
            if n["agrees"] == true { "yes" } else { "NO" }
        );
    }
}

fn sync_line(r: &Value) -> String {
    if r["ok"] == true {
        format!("ok at {}", local_time(&r["at_unix_ms"]))
    } else {
        format!(
            "FAILED at {}: {}",
            local_time(&r["at_unix_ms"]),
            s(&r["error"])
        )
    }
}

/// `address:port` as an operator writes it: IPv6 addresses in brackets (`[2001:db8::1]:80`).
pub fn host_port(address: &str, port: impl std::fmt::Display) -> String {
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_times_read_as_local_dates_to_the_millisecond() {
        let shown = local_time(&json!(1_700_000_000_123_i64));
        let expected = chrono::DateTime::from_timestamp_millis(1_700_000_000_123).map(|t| {
            t.with_timezone(&chrono::Local)
                .format("%Y-%m-%d %H:%M:%S%.3f")
                .to_string()
        });
        assert_eq!(Some(shown.clone()), expected);
        assert!(
            shown.ends_with(".123") && shown.starts_with("2023-11-1"),
            "{shown}"
        );
        assert_eq!(local_time(&json!("soon")), "\"soon\"");
    }
}
