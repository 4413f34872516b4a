//! Running wrk and reading its report (`--latency` percentiles, request rate, errors).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use lb_tests::bench::{Guard, log_tail};

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

/// A wrk script that makes every connection pause after each response, for the runs below
/// saturation (why: see the crate's doc).
#[derive(Debug)]
pub struct Pacing {
    /// The pause, whole milliseconds (wrk's timer resolution).
    pub think_ms: u64,
    /// Where the script is written.
    pub script: PathBuf,
}

impl Pacing {
    /// Writes the script for `think_ms` (at least 1) into `dir`.
    pub fn write(dir: &Path, think_ms: u64) -> Result<Self> {
        let script = dir.join(format!("think-{think_ms}ms.lua"));
        let text = format!(
            "-- Each connection pauses {think_ms} ms after every response (bench-l7).\n\
             delay = function() return {think_ms} end\n"
        );
        std::fs::write(&script, text).with_context(|| format!("writing {}", script.display()))?;
        Ok(Self { think_ms, script })
    }
}

/// Where and how wrk sends its requests.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// The proxy's address.
    pub addr: SocketAddr,
    /// `https://` instead of `http://` (wrk offers no ALPN, so HTTP/1.1 over TLS).
    pub tls: bool,
    /// Every request says `Connection: close`: one request per connection, so a run over
    /// TLS counts full handshakes.
    pub close: bool,
}

impl Target {
    /// Plain HTTP/1.1 with keep-alive.
    pub fn plain(addr: SocketAddr) -> Self {
        Self {
            addr,
            tls: false,
            close: false,
        }
    }
}

fn command(load: Load, target: Target, pacing: Option<&Pacing>) -> Command {
    let mut cmd = Command::new("/usr/bin/wrk");
    cmd.arg(format!("-t{}", load.threads))
        .arg(format!("-c{}", load.connections))
        .arg(format!("-d{}s", load.duration.as_secs().max(1)))
        .arg("--latency");
    if let Some(p) = pacing {
        cmd.arg("-s").arg(&p.script);
    }
    if target.close {
        cmd.args(["-H", "Connection: close"]);
    }
    let scheme = if target.tls { "https" } else { "http" };
    cmd.arg(format!("{scheme}://{}/", target.addr));
    cmd
}

/// Runs wrk to completion against `addr` (plain HTTP/1.1), paced when `pacing` is given.
pub fn run(load: Load, addr: SocketAddr, pacing: Option<&Pacing>) -> Result<WrkResult> {
    run_target(load, Target::plain(addr), pacing)
}

/// Runs wrk to completion against `target`, paced when `pacing` is given.
pub fn run_target(load: Load, target: Target, pacing: Option<&Pacing>) -> Result<WrkResult> {
    let out = command(load, target, pacing)
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
    Guard::spawn("wrk", &mut command(load, Target::plain(addr), None), log)
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

/// No rule of docs/behaviour.md covers the bench's wrk handling: these check the report it
/// reads and the arguments it passes.
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
    fn the_pacing_script_pauses_each_connection_for_the_think_time() {
        let dir = std::env::temp_dir().join(format!("bench-l7-pacing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = Pacing::write(&dir, 3).unwrap();
        let text = std::fs::read_to_string(&p.script).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(text.contains("delay = function() return 3 end"), "{text}");
        let cmd = command(
            Load {
                threads: 2,
                connections: 64,
                duration: Duration::from_secs(6),
            },
            Target::plain("127.0.0.1:8080".parse().unwrap()),
            Some(&p),
        );
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "-t2",
                "-c64",
                "-d6s",
                "--latency",
                "-s",
                &p.script.display().to_string(),
                "http://127.0.0.1:8080/"
            ]
        );
    }

    /// The handshake case sends `Connection: close` over https://.
    #[test]
    fn the_handshake_target_closes_every_connection_over_tls() {
        let load = Load {
            threads: 2,
            connections: 64,
            duration: Duration::from_secs(6),
        };
        let target = Target {
            addr: "127.0.0.1:8443".parse().unwrap(),
            tls: true,
            close: true,
        };
        let args: Vec<String> = command(load, target, None)
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "-t2",
                "-c64",
                "-d6s",
                "--latency",
                "-H",
                "Connection: close",
                "https://127.0.0.1:8443/"
            ]
        );
    }

    #[test]
    fn units() {
        assert_eq!(millis("2.00s"), Some(2000.0));
        assert_eq!(millis("1.50m"), Some(90000.0));
        assert_eq!(millis("12x"), None);
    }
}
