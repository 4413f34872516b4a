//! `lb status`: what runs on this machine at a glance. The XDP part is read from the data
//! path's pins (it works without a daemon: forwarding survives `lb run`'s restarts), the
//! rest from the daemon's API: its L7 and DNS vServices and every Backend Service's health.
//! Either part may be absent; only when both are does the command fail.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, bail};
use hyper::Method;
use serde_json::{Value, json};

use super::cli::{ApiOpts, Print, block_on, host_port, items, s};
use crate::daemon::HealthReport;
use crate::network::{self, DataPath, LoadOptions, Status};

/// `lb status`'s options.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// bpffs directory of the data path's pins.
    #[arg(long, default_value = "/sys/fs/bpf/lb")]
    pub pin_dir: PathBuf,
    #[command(flatten)]
    pub opts: ApiOpts,
}

/// The XDP data path as its pins show it.
struct Xdp {
    status: Status,
    ifaces: Vec<String>,
    report: Option<HealthReport>,
}

/// Runs `lb status`.
pub fn run(args: &StatusArgs) -> Result<()> {
    let xdp = if args.pin_dir.join("prog").exists() {
        Some(read_xdp(&args.pin_dir)?)
    } else {
        None
    };
    let daemon = read_daemon(&args.opts);
    if xdp.is_none()
        && let Err(e) = &daemon
    {
        bail!(
            "nothing is running: no XDP data path is loaded under {} and the daemon's API at {} \
             did not answer ({e:#})",
            args.pin_dir.display(),
            args.opts.api
        );
    }
    if args.opts.json {
        // The data path's fields stay at the top, where scripts of earlier versions read them.
        let mut v = match &xdp {
            Some(x) => xdp_json(x)?,
            None => json!({ "interfaces": [], "vips": [], "global": {}, "health": null }),
        };
        v["data_path_loaded"] = xdp.is_some().into();
        v["daemon"] = daemon.as_ref().ok().cloned().unwrap_or(Value::Null);
        v["daemon_error"] = daemon
            .as_ref()
            .err()
            .map_or(Value::Null, |e| format!("{e:#}").into());
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    match &xdp {
        Some(x) => print_xdp(x),
        None => println!(
            "XDP data path: not in use (nothing loaded under {})",
            args.pin_dir.display()
        ),
    }
    println!();
    match &daemon {
        Ok(d) => print_daemon(d),
        Err(e) => println!(
            "daemon: its API at {} did not answer ({e:#}); the XDP data path forwards on its own",
            args.opts.api
        ),
    }
    Ok(())
}

fn read_xdp(pin_dir: &Path) -> Result<Xdp> {
    let object = network::read_object().unwrap_or_default();
    let opts = LoadOptions {
        pin_dir: Some(pin_dir.to_path_buf()),
        conn_table_size: 0,
    };
    let dp = DataPath::load(&object, &opts)?;
    Ok(Xdp {
        status: dp.status()?,
        ifaces: network::attached_interfaces(pin_dir),
        report: crate::daemon::read_report(pin_dir),
    })
}

/// The daemon's status, vServices, Backend Services and DNS sites, read in one go.
fn read_daemon(opts: &ApiOpts) -> Result<Value> {
    block_on(async {
        let client = opts.client(Duration::from_secs(5));
        let mut out = serde_json::Map::new();
        for (key, path) in [
            ("status", "/api/v1/status"),
            ("vservices", "/api/v1/vservices"),
            ("backends", "/api/v1/backends"),
            ("gslb", "/api/v1/gslb"),
        ] {
            let answer = client.call(Method::GET, path, None).await?;
            if !answer.ok() {
                bail!("{path}: {}", answer.error_text());
            }
            out.insert(key.into(), answer.body);
        }
        Ok(Value::Object(out))
    })
}

fn xdp_json(x: &Xdp) -> Result<Value> {
    let mut vips = serde_json::to_value(&x.status.vips)?;
    for vip in vips.as_array_mut().into_iter().flatten() {
        let ipv6 = vip["address"].as_str().is_some_and(|a| a.contains(':'));
        for b in vip["backends"].as_array_mut().into_iter().flatten() {
            let name = b["name"].as_str().unwrap_or_default().to_string();
            b["health"] = health_of(x.report.as_ref(), &name, ipv6).map_or(Value::Null, Into::into);
        }
    }
    let global: std::collections::BTreeMap<String, u64> = x
        .status
        .global
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    Ok(json!({
        "interfaces": x.ifaces,
        "vips": vips,
        "global": global,
        "flood_guard_limit": x.status.flood_limit,
        "health": x.report
    }))
}

/// The engine's decision for a Backend Service, when a daemon reported one; behind an IPv6
/// VIP, that of its `address6` when it is dual-stack.
fn health_of(report: Option<&HealthReport>, name: &str, ipv6: bool) -> Option<String> {
    let services = &report?.services;
    ipv6.then(|| services.get(&crate::config::ipv6_health_key(name)))
        .flatten()
        .or_else(|| services.get(name))
        .map(|s| s.state.clone())
}

fn print_xdp(x: &Xdp) {
    let st = &x.status;
    let report = x.report.as_ref();
    println!(
        "XDP data path: attached to {}",
        if x.ifaces.is_empty() {
            "-".into()
        } else {
            x.ifaces.join(", ")
        }
    );
    for v in &st.vips {
        let c = &v.counters;
        println!(
            "\nvService {} {}/{} {} table={} digest={} packets={} bytes={} reply_packets={} \
             reply_bytes={} new_flows={} drops={} ct_misses={}",
            v.name,
            host_port(&v.address, &v.ports),
            v.proto,
            v.mode,
            v.table_size,
            if v.table_digest.is_empty() {
                "-"
            } else {
                &v.table_digest
            },
            c.packets,
            c.bytes,
            c.reply_packets,
            c.reply_bytes,
            c.new_flows,
            c.drops,
            c.ct_misses
        );
        println!(
            "  {:<20} {:<29} {:>6} {:<9} {:<9} {:>10} {:>12} {:>10} {:>9}",
            "backend",
            "address",
            "weight",
            "health",
            "state",
            "packets",
            "bytes",
            "replies",
            "new_flows"
        );
        for b in &v.backends {
            println!(
                "  {:<20} {:<29} {:>6} {:<9} {:<9} {:>10} {:>12} {:>10} {:>9}",
                b.name,
                host_port(&b.address, b.port),
                b.weight,
                health_of(report, &b.name, v.address.contains(':')).unwrap_or_else(|| "-".into()),
                if b.active { "active" } else { "removed" },
                b.counters.packets,
                b.counters.bytes,
                b.counters.reply_packets,
                b.counters.new_flows
            );
        }
    }
    let line: Vec<String> = st.global.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("\nglobal: {}", line.join(" "));
    match st.flood_limit {
        0 => println!("flood guard: off (every new flow is recorded)"),
        n => println!("flood guard: {n} new flows per second and CPU recorded at most"),
    }
    if let Some(r) = report {
        let servers: Vec<String> = r.servers.iter().map(|(a, s)| format!("{a}={s}")).collect();
        println!("servers: {}", servers.join(" "));
        if let Some(e) = &r.network_error {
            println!("last map write failed: {e}");
        }
    }
}

fn print_daemon(d: &Value) {
    let st = &d["status"];
    let by = &st["backend_services"]["by_health"];
    println!(
        "daemon: lb {} with {}; XDP {}, L7 proxy {}",
        s(&st["version"]),
        s(&st["config_path"]),
        if st["data_path"] == true {
            "loaded"
        } else {
            "not in use"
        },
        if st["proxy"] == true {
            "running"
        } else {
            "not in use"
        },
    );
    println!(
        "Backend Services: {} (OK {}, Error {}, Preparing {}; Maintenance {}, Backup {})",
        s(&st["backend_services"]["total"]),
        s(&by["OK"]),
        s(&by["Error"]),
        s(&by["Preparing"]),
        s(&st["backend_services"]["maintenance"]),
        s(&st["backend_services"]["backup"]),
    );
    let l7: Vec<Value> = items(&d["vservices"], "vservices")
        .filter(|v| matches!(v["kind"].as_str(), Some("http" | "l7-tcp")))
        .cloned()
        .collect();
    if !l7.is_empty() {
        println!("\nL7 vServices:");
        Print::VServices.show(&json!({ "vservices": l7 }));
    }
    println!("\nBackend Services:");
    Print::Backends.show(&d["backends"]);
    let sites: Vec<&Value> = items(&d["gslb"], "sites").collect();
    if !sites.is_empty() {
        println!("\nDNS vServices (sites):");
        println!(
            "{:<16} {:<28} {:<14} {:<8} {:<14} reason",
            "dns vservice", "name", "site", "role", "status"
        );
        for site in sites {
            let key = &site["key"];
            println!(
                "{:<16} {:<28} {:<14} {:<8} {:<14} {}",
                s(&key["dns_vservice"]),
                s(&key["record"]),
                s(&key["site"]),
                if site["standby"] == true {
                    "standby"
                } else {
                    "active"
                },
                s(&site["state"]),
                s(&site["reason"]),
            );
        }
    }
}
