//! Control plane: writing the maps of 1,000 VIPs x 100 backends (first apply, one backend
//! failing and returning) and of 100 VIPs x 1,000 backends with 65,537-entry tables in a
//! private copy of the data path (`lb::network::apply`, as bench-xdp does; the failing and
//! returning backend also on a pinned copy, as `lb run` has it), the Maintenance
//! avoidance time, and the configuration at 10,000+ Backend Services (`config_scale`).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::PathBuf;
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
/// The large-table case: 100 VIPs x 1,000 backends with the default table size.
const BIG_VIPS: usize = 100;
const BIG_BACKENDS: usize = 1000;
const BIG_MAGLEV_SIZE: u32 = 65537;

/// VIPS tcp-l4 VIPs over the same BACKENDS TCP-checked backends (the check never runs
/// here: `network::apply` is told which services are down), so one backend failing
/// changes every VIP's table.
fn config_text(vips: usize, backends: usize, maglev_size: u32) -> String {
    let mut s = String::from("[[health_check]]\nname = \"tcp\"\ntype = \"tcp\"\n\n");
    for b in 0..backends {
        let addr = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 2, 0, 1)) + b as u32);
        s += &format!(
            "[[backend_service]]\nname = \"b{b}\"\naddress = \"{addr}\"\nport = 0\n\
             health_check = \"tcp\"\n\n"
        );
    }
    let list: Vec<String> = (0..backends).map(|b| format!("\"b{b}\"")).collect();
    for v in 0..vips {
        let addr = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 99, 0, 1)) + v as u32);
        s += &format!(
            "[[vservice]]\nname = \"v{v}\"\nkind = \"tcp-l4\"\naddress = \"{addr}\"\nport = 80\n\
             forwarding = \"nat\"\nmaglev_size = {maglev_size}\nbackends = [{}]\n\n",
            list.join(", ")
        );
    }
    s
}

/// A private data path (not pinned, not attached) with room for every flow of the bench.
fn data_path(object: &[u8]) -> Result<DataPath> {
    DataPath::load(
        object,
        &LoadOptions {
            pin_dir: None,
            conn_table_size: 1 << 16,
        },
    )
}

/// A pin directory of the bench's own on the host's bpffs, removed (with the writer's state
/// file) when dropped.
struct PinnedDir(PathBuf);

impl PinnedDir {
    fn new() -> Result<PinnedDir> {
        let dir = PathBuf::from(format!(
            "/sys/fs/bpf/lb-bench-control-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        Ok(PinnedDir(dir))
    }
}

impl Drop for PinnedDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        network::forget_state(&self.0);
    }
}

/// A data path pinned under `dir` (attached nowhere), as `lb run` loads it.
fn pinned_data_path(object: &[u8], dir: &std::path::Path) -> Result<DataPath> {
    DataPath::load(
        object,
        &LoadOptions {
            pin_dir: Some(dir.to_path_buf()),
            conn_table_size: 1 << 16,
        },
    )
}

/// Seconds `network::apply` takes to write `cfg` with `down` failed.
fn timed_apply(dp: &mut DataPath, cfg: &config::Config, down: &HashSet<String>) -> Result<f64> {
    let t = Instant::now();
    network::apply(dp, cfg, down)?;
    Ok(t.elapsed().as_secs_f64())
}

/// Returns the report section.
pub fn run() -> Result<String> {
    let object = network::read_object()?;
    let mut dp = data_path(&object)?;
    let text = config_text(VIPS, BACKENDS, MAGLEV_SIZE);
    let cfg = config::parse(&text, "bench").map_err(|e| anyhow!("{e}"))?;
    let none = HashSet::new();
    let b0_down: HashSet<String> = ["b0".to_string()].into();
    let first = timed_apply(&mut dp, &cfg, &none)?;
    println!("first apply {VIPS}x{BACKENDS}: {first:.3} s");
    // Each step changes every table: b0 fails (its slots leave all 1,000 tables), then it
    // returns. Timed from the new health to every table swapped in (plan + write).
    let (mut fails, mut returns) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        fails.push(timed_apply(&mut dp, &cfg, &b0_down)?);
        returns.push(timed_apply(&mut dp, &cfg, &none)?);
    }
    let (fail, back) = (median(&fails) * 1000.0, median(&returns) * 1000.0);
    println!("one backend of {VIPS} VIPs failing: {fail:.0} ms (all {VIPS} tables swapped)");
    println!("that backend returning: {back:.0} ms");
    drop(dp);
    // The same on a pinned data path, as `lb run` has it: each swapped table is pinned by
    // VIP id too, and the writer's state file (100,000 slots) is saved before apply returns.
    let pinned = PinnedDir::new()?;
    let mut dp = pinned_data_path(&object, &pinned.0)?;
    timed_apply(&mut dp, &cfg, &none)?;
    let (mut pinned_fails, mut pinned_returns) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        pinned_fails.push(timed_apply(&mut dp, &cfg, &b0_down)?);
        pinned_returns.push(timed_apply(&mut dp, &cfg, &none)?);
    }
    let pinned_fail = median(&pinned_fails) * 1000.0;
    let pinned_back = median(&pinned_returns) * 1000.0;
    println!(
        "pinned: one backend of {VIPS} VIPs failing: {pinned_fail:.0} ms, returning: \
         {pinned_back:.0} ms (until apply returns, state file saved)"
    );
    drop(dp);
    drop(pinned);
    let mut big = data_path(&object)?;
    let text = config_text(BIG_VIPS, BIG_BACKENDS, BIG_MAGLEV_SIZE);
    let big_cfg = config::parse(&text, "bench").map_err(|e| anyhow!("{e}"))?;
    let big_first = timed_apply(&mut big, &big_cfg, &none)?;
    println!("first apply {BIG_VIPS}x{BIG_BACKENDS} (Maglev {BIG_MAGLEV_SIZE}): {big_first:.3} s");
    drop(big);
    let mut out = String::new();
    writeln!(
        out,
        "| what | time |\n|---|---|\n\
         | first apply, {VIPS} VIPs x {BACKENDS} backends, Maglev size {MAGLEV_SIZE} (plan + build + write all maps) | {first:.3} s (one run) |\n\
         | one backend of all {VIPS} VIPs failing: plan + rebuild + swap of every table (median of {RUNS}) | {fail:.0} ms |\n\
         | the same backend returning (median of {RUNS}) | {back:.0} ms |\n\
         | the same two on a pinned data path, until apply returns (tables pinned by VIP id, state file of 100,000 slots saved) | {pinned_fail:.0} ms / {pinned_back:.0} ms |\n\
         | first apply, {BIG_VIPS} VIPs x {BIG_BACKENDS} backends, Maglev size {BIG_MAGLEV_SIZE} | {big_first:.3} s (one run) |\n"
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
