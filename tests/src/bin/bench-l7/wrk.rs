//! Running wrk and reading its report (`--latency` percentiles, request rate, errors).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::procs::{Guard, log_tail};

/// The load shape, the same for every system.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// wrk threads (-t).
    pub threads: u32,
    /// Open connections (-c).
    pub connections: u32,
    /// Length of one run (-d).
    pub duration: Duration,
}

/// What one wrk run measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct WrkResult {
    /// Requests per second.
    pub rps: f64,
    /// Median latency, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile latency, milliseconds.
    pub p99_ms: f64,
    /// Completed requests.
    pub requests: u64,
    /// Answers that were neither 2xx nor 3xx.
    pub non_2xx: u64,
    /// Socket errors: connect + read + write + timeout.
    pub socket_errors: u64,
}

impl WrkResult {
    /// Requests that did not succeed from the client's side.
    pub fn failed(&self) -> u64 {
        self.non_2xx + self.socket_errors
    }
}

fn command(load: Load, addr: SocketAddr) -> Command {
    let mut cmd = Command::new("/usr/bin/wrk");
    cmd.arg(format!("-t{}", load.threads))
        .arg(format!("-c{}", load.connections))
        .arg(format!("-d{}s", load.duration.as_secs().max(1)))
        .arg("--latency")
        .arg(format!("http://{addr}/"));
    cmd
}

/// Runs wrk to completion against `addr`.
pub fn run(load: Load, addr: SocketAddr) -> Result<WrkResult> {
    let out = command(load, addr)
        .output()
        .context("starting /usr/bin/wrk")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "wrk failed ({}): {}{}",
            out.status,
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse(&text)
}

/// Starts wrk in the background with its report going to `log` (read it with [`finish`]).
pub fn start(load: Load, addr: SocketAddr, log: &Path) -> Result<Guard> {
    Guard::spawn("wrk", &mut command(load, addr), log)
}

/// Waits (bounded) for a wrk started with [`start`] and reads its report.
pub fn finish(mut wrk: Guard, limit: Duration) -> Result<WrkResult> {
    let Some(status) = wrk.wait_for(limit)? else {
        bail!("wrk did not finish within {} s", limit.as_secs());
    };
    let text = std::fs::read_to_string(&wrk.log)?;
    if !status.success() {
        bail!("wrk failed ({status}): {}", log_tail(&wrk.log, 20));
    }
    parse(&text)
}

/// A wrk duration such as `635.91us`, `1.86ms`, `2.00s` or `1.00m`, in milliseconds.
fn millis(s: &str) -> Option<f64> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let scale = match unit {
        "us" => 1e-3,
        "ms" => 1.0,
        "s" => 1e3,
        "m" => 60e3,
        "h" => 3600e3,
        _ => return None,
    };
    Some(v * scale)
}

/// Reads wrk's text report. The error lines only appear when there were errors.
pub fn parse(text: &str) -> Result<WrkResult> {
    let mut r = WrkResult::default();
    let (mut rps, mut p50, mut p99, mut reqs) = (None, None, None, None);
    for line in text.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["50%", v] => p50 = millis(v),
            ["99%", v] => p99 = millis(v),
            ["Requests/sec:", v] => rps = v.parse().ok(),
            [n, "requests", "in", ..] => reqs = n.parse().ok(),
            ["Non-2xx", "or", "3xx", "responses:", n] => r.non_2xx = n.parse().unwrap_or(0),
            ["Socket", "errors:", rest @ ..] => {
                r.socket_errors = rest
                    .iter()
                    .filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok())
                    .sum();
            }
            _ => {}
        }
    }
    match (rps, p50, p99, reqs) {
        (Some(rps), Some(p50), Some(p99), Some(reqs)) => {
            r.rps = rps;
            r.p50_ms = p50;
            r.p99_ms = p99;
            r.requests = reqs;
            Ok(r)
        }
        _ => bail!("cannot read wrk's report:\n{text}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "Running 10s test @ http://127.0.0.1:8080/
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   760.55us  300.12us  12.34ms   90.00%
    Req/Sec    40.12k     2.01k   45.00k    70.00%
  Latency Distribution
     50%  635.91us
     75%  712.00us
     90%  900.00us
     99%    1.86ms
  798765 requests in 10.00s, 120.00MB read
  Socket errors: connect 0, read 3, write 1, timeout 2
  Non-2xx or 3xx responses: 7
Requests/sec:  79876.50
Transfer/sec:     12.00MB
";

    #[test]
    fn reads_every_field() {
        let r = parse(SAMPLE).unwrap();
        assert!((r.rps - 79876.5).abs() < 1e-6);
        assert!((r.p50_ms - 0.63591).abs() < 1e-9);
        assert!((r.p99_ms - 1.86).abs() < 1e-9);
        assert_eq!(r.requests, 798765);
        assert_eq!(r.socket_errors, 6);
        assert_eq!(r.non_2xx, 7);
        assert_eq!(r.failed(), 13);
    }

    #[test]
    fn units() {
        assert_eq!(millis("2.00s"), Some(2000.0));
        assert_eq!(millis("1.50m"), Some(90000.0));
        assert_eq!(millis("12x"), None);
    }
}
