//! Control plane: building and swapping the Maglev tables of 1,000 VIPs x 100 backends in a
//! private copy of the data path (`lb::network::apply`, as bench-xdp does), the Maintenance
//! avoidance time, and the configuration at 10,000+ Backend Services (`config_scale`).

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::time::Instant;

use anyhow::{Result, anyhow};
use lb::config;
use lb::network::{self, DataPath, LoadOptions};

use crate::l4::median;

const VIPS: usize = 1000;
const BACKENDS: usize = 100;
/// Prime table size; 1,000 tables of 1,021 entries bound the memory.
const MAGLEV_SIZE: u32 = 1021;
const RUNS: usize = 5;

/// `skip` leaves one backend out of every list, so consecutive applies alternate between
/// two different sets of tables (every VIP's table is rebuilt and swapped).
fn config_text(skip: Option<usize>) -> String {
    let mut s = String::new();
    for b in 0..BACKENDS {
        let addr = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 2, 0, 1)) + b as u32);
        s += &format!("[[backend_service]]\nname = \"b{b}\"\naddress = \"{addr}\"\nport = 0\n\n");
    }
    let list: Vec<String> = (0..BACKENDS)
        .filter(|b| Some(*b) != skip)
        .map(|b| format!("\"b{b}\""))
        .collect();
    for v in 0..VIPS {
        let addr = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 99, 0, 1)) + v as u32);
        s += &format!(
            "[[vservice]]\nname = \"v{v}\"\nkind = \"tcp-l4\"\naddress = \"{addr}\"\nport = 80\n\
             forwarding = \"nat\"\nmaglev_size = {MAGLEV_SIZE}\nbackends = [{}]\n\n",
            list.join(", ")
        );
    }
    s
}

/// Returns the report section.
pub fn run() -> Result<String> {
    let object = network::read_object()?;
    let mut dp = DataPath::load(
        &object,
        &LoadOptions {
            pin_dir: None,
            conn_table_size: 1 << 16,
        },
    )?;
    let full = config::parse(&config_text(None), "bench").map_err(|e| anyhow!("{e}"))?;
    let less = config::parse(&config_text(Some(0)), "bench").map_err(|e| anyhow!("{e}"))?;
    let t = Instant::now();
    network::apply(&mut dp, &full, &Default::default())?;
    let first = t.elapsed().as_secs_f64();
    let mut swaps = Vec::new();
    for i in 0..RUNS {
        let cfg = if i % 2 == 0 { &less } else { &full };
        let t = Instant::now();
        network::apply(&mut dp, cfg, &Default::default())?;
        swaps.push(t.elapsed().as_secs_f64());
    }
    let swap = median(&swaps);
    println!("control: first apply {first:.3} s, rebuild+swap median {swap:.3} s");
    let mut out = String::new();
    writeln!(
        out,
        "| what | time |\n|---|---|\n\
         | first apply, {VIPS} VIPs x {BACKENDS} backends, Maglev size {MAGLEV_SIZE} (build + write all maps) | {first:.3} s (one run) |\n\
         | rebuild and swap every VIP's table after a backend leaves/returns (median of {RUNS}) | {swap:.3} s |\n"
    )?;
    match crate::maint::run() {
        Ok(row) => writeln!(out, "| what | time |\n|---|---|\n{row}")?,
        Err(e) => writeln!(out, "Maintenance-to-avoidance time could not run: {e:#}\n")?,
    }
    match crate::config_scale::run() {
        Ok(rows) => out.push_str(&rows),
        Err(e) => writeln!(out, "Configuration at scale could not run: {e:#}\n")?,
    }
    Ok(out)
}
