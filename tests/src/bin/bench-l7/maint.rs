//! The Maintenance run (S-MT1 under load): wrk loads our HTTP vService over two
//! Backend Services while the bench moves Maintenance from one to the other every second
//! through `lb backend maintenance NAME on|off` (the REST API). One of the two is always
//! available, so every request must succeed: failed = non-2xx answers + socket errors.
//!
//! The backends log each request's end time, which shows that the toggles really moved the
//! traffic: requests that reached a backend more than [`GRACE`] after its Maintenance call
//! returned (and before it was switched off again) are counted as `late`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use crate::peers::{MAINT_BACKENDS, maint_log};
use crate::wrk::{self, Load, WrkResult};
use lb_tests::bench::Scratch;

/// Time a Maintenance call may take to reach every new request.
const GRACE: f64 = 0.1;
/// Time between two toggles.
const STEP: Duration = Duration::from_secs(1);

/// What the Maintenance run measured.
pub struct MaintReport {
    /// How long wrk ran.
    pub duration: Duration,
    /// wrk's figures for the whole run.
    pub wrk: WrkResult,
    /// API calls that succeeded.
    pub calls_ok: usize,
    /// API calls that failed, with the reason.
    pub calls_failed: Vec<String>,
    /// The slowest API call (CLI start to answer).
    pub slowest_call: Duration,
    /// Requests each backend served during the run.
    pub served: [u64; 2],
    /// Requests a backend served while in Maintenance, later than [`GRACE`] after the call.
    pub late: u64,
}

/// Seconds since the epoch, as nginx's `$msec`.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// One `lb backend maintenance NAME on|off` call; Err holds why it failed.
fn call(lb_bin: &Path, api: u16, name: &str, on: bool) -> Result<Duration, String> {
    let start = Instant::now();
    let out = Command::new(lb_bin)
        .args([
            "backend",
            "maintenance",
            name,
            if on { "on" } else { "off" },
        ])
        .arg("--api")
        .arg(format!("http://127.0.0.1:{api}"))
        .output()
        .map_err(|e| format!("starting {}: {e}", lb_bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "maintenance {name} {}: {} {}",
            if on { "on" } else { "off" },
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(start.elapsed())
}

/// Runs the load for `load.duration` while toggling; both backends end out of Maintenance.
pub fn run(
    lb_bin: &Path,
    api: u16,
    target: SocketAddr,
    load: Load,
    scratch: &Scratch,
) -> Result<MaintReport> {
    let started = now();
    let t0 = Instant::now();
    let wrk_run = wrk::start(load, target, &scratch.path.join("wrk-maint.log"))?;
    let mut calls_ok = 0;
    let mut calls_failed = Vec::new();
    let mut slowest = Duration::ZERO;
    let mut record = |r: Result<Duration, String>| match r {
        Ok(d) => {
            calls_ok += 1;
            slowest = slowest.max(d);
            true
        }
        Err(e) => {
            calls_failed.push(e);
            false
        }
    };
    // Per backend: (Maintenance on from, until) in epoch seconds.
    let mut windows: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    let mut current: Option<(usize, f64)> = None;
    let steps = load.duration.as_secs().saturating_sub(1);
    for k in 1..=steps {
        let due = t0 + STEP * u32::try_from(k).unwrap_or(u32::MAX);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let next = usize::from(k % 2 == 0);
        // Release the other backend first, so one is always available.
        if let Some((prev, since)) = current.take() {
            windows[prev].push((since, now()));
            record(call(lb_bin, api, MAINT_BACKENDS[prev], false));
        }
        if record(call(lb_bin, api, MAINT_BACKENDS[next], true)) {
            current = Some((next, now()));
        }
    }
    if let Some((prev, since)) = current.take() {
        windows[prev].push((since, now()));
        record(call(lb_bin, api, MAINT_BACKENDS[prev], false));
    }
    let wrk = wrk::finish(wrk_run, load.duration + Duration::from_secs(15))?;
    let ended = now();
    let mut served = [0u64; 2];
    let mut late = 0u64;
    for (i, count) in served.iter_mut().enumerate() {
        let log = maint_log(scratch, i);
        let text =
            std::fs::read_to_string(&log).with_context(|| format!("reading {}", log.display()))?;
        for ts in text.lines().filter_map(|l| l.trim().parse::<f64>().ok()) {
            if ts < started || ts > ended {
                continue;
            }
            *count += 1;
            if windows[i]
                .iter()
                .any(|&(on, off)| ts > on + GRACE && ts < off)
            {
                late += 1;
            }
        }
    }
    Ok(MaintReport {
        duration: load.duration,
        wrk,
        calls_ok,
        calls_failed,
        slowest_call: slowest,
        served,
        late,
    })
}
