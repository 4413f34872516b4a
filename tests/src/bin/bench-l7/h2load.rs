//! Running h2load (Debian `nghttp2-client`) for the HTTP/2-over-TLS case and reading its
//! figures: the request rate and outcome from its report, p50/p99 from its per-request log
//! (its report gives only mean and spread).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::wrk::{Load, WrkResult};

/// Streams each h2load connection keeps open at once (`-m`: 100 per connection, the least
/// RFC 9113 advises a server to allow).
pub const STREAMS: u32 = 100;
/// Client connections (`-c`).
pub const CONNECTIONS: u32 = 16;

fn command(load: Load, addr: SocketAddr, log: &Path) -> Command {
    let mut cmd = Command::new("/usr/bin/h2load");
    cmd.arg(format!("-t{}", load.threads))
        .arg(format!("-c{CONNECTIONS}"))
        .arg(format!("-m{STREAMS}"))
        .arg(format!("-D{}", load.duration.as_secs().max(1)))
        .arg("--log-file")
        .arg(log)
        .arg(format!("https://{addr}/"));
    cmd
}

/// Runs h2load over TLS (ALPN h2) against `addr` for `load.duration`; `log` is its
/// per-request log, removed afterwards.
pub fn run(load: Load, addr: SocketAddr, log: &Path) -> Result<WrkResult> {
    let out = command(load, addr, log)
        .output()
        .context("starting /usr/bin/h2load")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "h2load failed ({}): {}{}",
            out.status,
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let durations =
        std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()));
    let _ = std::fs::remove_file(log);
    parse(&text, &durations?)
}

/// The `p`-quantile (0..1) of sorted values, nearest rank.
fn quantile(sorted: &[u64], p: f64) -> f64 {
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64
}

/// Reads h2load's report (`finished in …, N req/s`, `requests: … N succeeded, N failed,
/// N errored, N timeout`, `status codes: …`) and its log (one line per request: start,
/// status, microseconds taken, tab-separated).
pub fn parse(report: &str, log: &str) -> Result<WrkResult> {
    let mut r = WrkResult::default();
    let (mut rps, mut done) = (None, None);
    for line in report.lines().map(str::trim) {
        let words: Vec<&str> = line
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|w| !w.is_empty())
            .collect();
        match words.as_slice() {
            ["finished", "in", _, v, "req/s", ..] => rps = v.parse::<f64>().ok(),
            ["requests:", rest @ ..] => {
                let count = |what: &str| {
                    rest.windows(2)
                        .find(|w| w[1] == what)
                        .and_then(|w| w[0].parse::<u64>().ok())
                };
                done = count("succeeded");
                r.socket_errors = count("errored").unwrap_or(0) + count("timeout").unwrap_or(0);
            }
            ["status", "codes:", rest @ ..] => {
                r.non_2xx = rest
                    .windows(2)
                    .filter(|w| matches!(w[1], "3xx" | "4xx" | "5xx"))
                    .filter_map(|w| w[0].parse::<u64>().ok())
                    .sum();
            }
            _ => {}
        }
    }
    let mut took: Vec<u64> = log
        .lines()
        .filter_map(|l| l.split('\t').nth(2)?.trim().parse().ok())
        .collect();
    took.sort_unstable();
    match (rps, done) {
        (Some(rps), Some(done)) if !took.is_empty() => {
            r.rps = rps;
            r.requests = done;
            r.p50_ms = quantile(&took, 0.50) / 1e3;
            r.p99_ms = quantile(&took, 0.99) / 1e3;
            Ok(r)
        }
        _ => bail!(
            "cannot read h2load's report ({} request lines logged):\n{report}",
            took.len()
        ),
    }
}

/// No rule of docs/behaviour.md covers the bench's h2load handling: these check what it reads
/// and passes.
#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "starting benchmark...
finished in 6.00s, 61234.50 req/s, 2.34MB/s
requests: 367407 total, 367507 started, 367407 done, 367400 succeeded, 7 failed, 3 errored, 2 timeout
status codes: 367400 2xx, 0 3xx, 4 4xx, 1 5xx
traffic: 14.02MB (14700000) total, 1.05MB (1100000) headers (space savings 95.00%)
";

    #[test]
    fn reads_the_rate_the_outcome_and_the_percentiles_of_the_log() {
        let log: String = (1..=100)
            .map(|i| format!("1700000000{i:06}\t200\t{}\n", i * 10))
            .collect();
        let r = parse(REPORT, &log).unwrap();
        assert!((r.rps - 61234.5).abs() < 1e-6, "{r:?}");
        assert_eq!(r.requests, 367400);
        assert_eq!(r.socket_errors, 5);
        assert_eq!(r.non_2xx, 5);
        assert!((r.p50_ms - 0.5).abs() < 1e-9, "{r:?}");
        assert!((r.p99_ms - 0.99).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn an_empty_log_is_an_error_naming_what_is_missing() {
        let e = parse(REPORT, "").unwrap_err().to_string();
        assert!(e.contains("0 request lines"), "{e}");
    }

    #[test]
    fn asks_for_100_streams_on_16_connections_over_tls() {
        let load = Load {
            threads: 2,
            connections: 64,
            duration: std::time::Duration::from_secs(6),
        };
        let args: Vec<String> = command(load, "127.0.0.1:8443".parse().unwrap(), Path::new("/t/l"))
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "-t2",
                "-c16",
                "-m100",
                "-D6",
                "--log-file",
                "/t/l",
                "https://127.0.0.1:8443/"
            ]
        );
    }
}
