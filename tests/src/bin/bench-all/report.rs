//! target/bench/report.md: tables of medians, ratios measured in the same round, the plots,
//! and the outputs of the other benches (bench-xdp, bench-l7) when they ran.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use crate::l4::{L4Results, System, Workload, median};
use crate::plots;

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cpu}, {} CPUs, Linux {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        kernel.trim()
    )
}

fn date() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn l4_section(out: &mut String, dir: &Path, r: &L4Results) -> Result<()> {
    writeln!(
        out,
        "## L4 forwarding (netns topology, 1 client, 3 backends, 64-byte frames)\n\n\
         Source: BPF_PROG_TEST_RUN live frames (generator rewrites each frame from a template) \
         on CPU 0; balancer ingress NAPI thread on CPU 1; backends count and drop in XDP. \
         {} rounds of {:.1} s windows, systems alternated every round; figures are medians over \
         rounds. `ns/pkt` = CPU time of the balancer's NAPI thread / frames delivered. Ratios \
         are computed inside each round, then the median is taken.\n",
        r.rounds,
        r.window.as_secs_f64()
    )?;
    let font = plots::init_font();
    for wl in Workload::ALL {
        writeln!(out, "### {}\n", wl.label())?;
        writeln!(
            out,
            "| system | Mpps delivered | balancer ns/pkt | x nftables numgen (pps) | x minimal XDP (ns/pkt) | runs |\n|---|---|---|---|---|---|"
        )?;
        let mut bars = Vec::new();
        for sys in System::ALL {
            let Some(s) = r.samples.get(&(sys, wl)) else {
                continue;
            };
            let pps = median(&s.iter().map(|x| x.pps).collect::<Vec<_>>());
            let ns = median(&s.iter().map(|x| x.ns_per_pkt).collect::<Vec<_>>());
            let ratio = |m: &std::collections::BTreeMap<(System, Workload), Vec<f64>>| {
                m.get(&(sys, wl))
                    .map(|v| format!("{:.2}", median(v)))
                    .unwrap_or_else(|| "-".into())
            };
            writeln!(
                out,
                "| {} | {:.3} | {:.0} | {} | {} | {} |",
                sys.label(),
                pps / 1e6,
                ns,
                ratio(&r.ratios_vs_nft),
                ratio(&r.cpu_vs_min),
                s.len()
            )?;
            bars.push((sys.label().to_owned(), pps / 1e6));
        }
        let png = format!("l4-{wl:?}.png").to_lowercase();
        match &font {
            Ok(()) if !bars.is_empty() => {
                plots::bars(&dir.join(&png), wl.label(), "Mpps (median)", &bars)?;
                writeln!(out, "\n![{}]({png})\n", wl.label())?;
            }
            Ok(()) => {}
            Err(e) => writeln!(out, "\n(no plot: {e:#})\n")?,
        }
    }
    targets(out, r)?;
    if !r.skipped.is_empty() {
        writeln!(out, "### Could not run\n")?;
        for (sys, why) in &r.skipped {
            writeln!(out, "- {}: {why}", sys.label())?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// The three figures the XDP data path has targets for, as same-round medians of this
/// project's NAT data path against nftables and the minimal forwarder.
fn targets(out: &mut String, r: &L4Results) -> Result<()> {
    let figure = |m: &std::collections::BTreeMap<(System, Workload), Vec<f64>>, wl| {
        m.get(&(System::LbNat, wl)).map(|v| median(v))
    };
    let line = |what: &str, got: Option<f64>, target: f64, more_is_better: bool| match got {
        Some(x) => {
            let met = if more_is_better {
                x >= target
            } else {
                x <= target
            };
            let verdict = if met { "met" } else { "not met" };
            format!("- {what}: {x:.2}x (target {target}x, {verdict})")
        }
        None => format!("- {what}: not measured"),
    };
    writeln!(out, "### Targets (XDP nat, same-round medians)\n")?;
    writeln!(
        out,
        "{}\n{}\n{}\n",
        line(
            "packets/s against nftables DNAT, UDP 65,536 flows",
            figure(&r.ratios_vs_nft, Workload::UdpMany),
            4.0,
            true
        ),
        line(
            "balancer CPU per packet against the minimal XDP forwarder, UDP 65,536 flows",
            figure(&r.cpu_vs_min, Workload::UdpMany),
            1.3,
            false
        ),
        line(
            "new TCP connections/s against the minimal XDP forwarder",
            figure(&r.pps_vs_min, Workload::TcpNew),
            0.8,
            true
        ),
    )?;
    Ok(())
}

fn text_section(out: &mut String, dir: &Path, file: &str, title: &str) -> Result<()> {
    writeln!(out, "## {title}\n")?;
    match std::fs::read_to_string(dir.join(file)) {
        Ok(t) if !t.trim().is_empty() => writeln!(
            out,
            "Output of the bench, as printed (target/bench/{file}):\n\n```\n{}\n```\n",
            t.trim()
        )?,
        _ => writeln!(
            out,
            "Not run in this invocation (target/bench/{file} absent).\n"
        )?,
    }
    Ok(())
}

/// Writes `<dir>/report.md` (and the plots) from what was measured.
pub fn write(dir: &Path, l4: Option<&L4Results>, control: Option<&str>) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut out = String::new();
    writeln!(
        out,
        "# Benchmark report\n\n{} on {}. Every figure is a median; nothing here is estimated.\n",
        date(),
        machine()
    )?;
    match l4 {
        Some(r) => l4_section(&mut out, dir, r)?,
        None => writeln!(out, "## L4 forwarding\n\nNot run in this invocation.\n")?,
    }
    text_section(
        &mut out,
        dir,
        "xdp.txt",
        "XDP per-packet cost (BPF_PROG_TEST_RUN, bench-xdp)",
    )?;
    text_section(
        &mut out,
        dir,
        "l7.txt",
        "L7 (bench-l7: this proxy vs HAProxy vs nginx)",
    )?;
    writeln!(out, "## Control plane\n")?;
    match control {
        Some(c) => writeln!(out, "{c}")?,
        None => writeln!(out, "Not run in this invocation.\n")?,
    }
    std::fs::write(dir.join("report.md"), out)?;
    Ok(())
}
