//! `cargo xtask bench all|l4|control`: the comparative benchmark suite. Runs the
//! L4 comparison in namespaces it creates and deletes, the control-plane timings, and
//! writes target/bench/report.md with PNG plots beside it, folding in the outputs of
//! bench-xdp and bench-l7 that xtask saved to target/bench/.

mod config_scale;
mod control;
mod l4;
mod maint;
mod plots;
mod progs;
mod report;

use std::time::Duration;

use anyhow::{Result, bail};

fn main() -> Result<()> {
    let what = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let dir = lb_tests::netns::lbctl::repo_root().join("target/bench");
    let (run_l4, run_control) = match what.as_str() {
        "all" => (true, true),
        "l4" => (true, false),
        "control" => (false, true),
        "report" => (false, false),
        other => bail!("unknown part {other}: all, l4, control or report"),
    };
    let l4 = if run_l4 {
        Some(l4::run(rounds, Duration::from_millis(1500))?)
    } else {
        None
    };
    let control = if run_control {
        Some(control::run()?)
    } else {
        None
    };
    report::write(&dir, l4.as_ref(), control.as_deref())?;
    println!("wrote {}", dir.join("report.md").display());
    Ok(())
}
