//! `lb node drain | resume | status`: take this balancer out of the routers' ECMP group
//! and watch it go quiet (S-AN2), put it back, or show what it announces.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Subcommand;
use hyper::Method;
use serde_json::Value;

use super::cli::ApiOpts;

/// This balancer as a node of the routers' ECMP group.
#[derive(Subcommand, Debug)]
pub enum NodeCommand {
    /// Withdraw every VIP route (the routers stop sending new flows here), keep forwarding
    /// the flows already here, and report new flows/s and packets/s until the balancer is
    /// quiet or the timeout passes. The node stays drained across restarts until `lb node
    /// resume`.
    Drain {
        /// Give up watching after this many seconds (the node stays drained); 0 does not
        /// watch.
        #[arg(long, default_value_t = 300)]
        timeout: u64,
        /// Quiet means no new flow and at most this many packets per second from clients.
        #[arg(long, default_value_t = 0)]
        quiet_packets: u64,
        #[command(flatten)]
        opts: ApiOpts,
    },
    /// Announce the VIPs again (those that can take new traffic).
    Resume {
        #[command(flatten)]
        opts: ApiOpts,
    },
    /// Which VIPs are announced, and why not the others.
    Status {
        #[command(flatten)]
        opts: ApiOpts,
    },
}

/// Runs one node subcommand.
pub(super) async fn run(cmd: NodeCommand) -> Result<()> {
    match cmd {
        NodeCommand::Drain {
            timeout,
            quiet_packets,
            opts,
        } => {
            let answer = call(&opts, Method::POST, "/api/v1/node/drain").await?;
            show(&opts, &answer);
            if !opts.json {
                println!(
                    "drained: every VIP route withdrawn; established flows are still forwarded"
                );
            }
            watch(&opts, Duration::from_secs(timeout), quiet_packets).await
        }
        NodeCommand::Resume { opts } => {
            let answer = call(&opts, Method::POST, "/api/v1/node/resume").await?;
            show(&opts, &answer);
            Ok(())
        }
        NodeCommand::Status { opts } => {
            let answer = call(&opts, Method::GET, "/api/v1/node").await?;
            show(&opts, &answer);
            Ok(())
        }
    }
}

async fn call(opts: &ApiOpts, method: Method, path: &str) -> Result<Value> {
    let answer = opts
        .client(Duration::from_secs(30))
        .call(method, path, None)
        .await?;
    if !answer.ok() {
        bail!("{}", answer.error_text());
    }
    Ok(answer.body)
}

fn show(opts: &ApiOpts, node: &Value) {
    if opts.json {
        println!("{node}");
        return;
    }
    let bgp = &node["bgp"];
    let state = match (bgp["enabled"].as_bool(), bgp["drained"].as_bool()) {
        (Some(false), _) => "announcement off ([bgp] enabled = false)",
        (_, Some(true)) => "drained",
        _ => "announcing",
    };
    println!("node: {state}, table {}", bgp["table"]);
    for v in bgp["vips"].as_array().into_iter().flatten() {
        let mark = if v["announced"].as_bool() == Some(true) {
            "announced"
        } else {
            "withdrawn"
        };
        println!(
            "  {:<40} {mark:<9} {}",
            v["address"].as_str().unwrap_or("?"),
            v["reason"].as_str().unwrap_or("")
        );
    }
    if let Some(e) = bgp["error"].as_str() {
        println!("  error: {e}");
    }
}

/// Polls the traffic totals once a second and prints the rates until two quiet seconds
/// in a row, or `timeout`.
async fn watch(opts: &ApiOpts, timeout: Duration, quiet_packets: u64) -> Result<()> {
    if timeout.is_zero() {
        return Ok(());
    }
    let totals = |node: &Value| {
        let t = &node["traffic"];
        Some((t["new_flows"].as_u64()?, t["packets"].as_u64()?))
    };
    let start = Instant::now();
    let mut last = (
        Instant::now(),
        totals(&call(opts, Method::GET, "/api/v1/node").await?),
    );
    if last.1.is_none() {
        println!("no XDP data path: nothing to wait for");
        return Ok(());
    }
    let mut quiet_rounds = 0;
    while start.elapsed() < timeout {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = (
            Instant::now(),
            totals(&call(opts, Method::GET, "/api/v1/node").await?),
        );
        let (Some((f0, p0)), Some((f1, p1))) = (last.1, now.1) else {
            bail!("the data path's counters could not be read");
        };
        let secs = now.0.duration_since(last.0).as_secs_f64().max(0.001);
        let flows = (f1.saturating_sub(f0) as f64 / secs).round() as u64;
        let packets = (p1.saturating_sub(p0) as f64 / secs).round() as u64;
        println!(
            "  {:>4} s: {flows} new flows/s, {packets} packets/s",
            start.elapsed().as_secs()
        );
        quiet_rounds = if flows == 0 && packets <= quiet_packets {
            quiet_rounds + 1
        } else {
            0
        };
        if quiet_rounds >= 2 {
            println!("quiet: no new flow, at most {quiet_packets} packets/s");
            return Ok(());
        }
        last = now;
    }
    bail!(
        "still not quiet after {} s (the node stays drained)",
        timeout.as_secs()
    )
}
