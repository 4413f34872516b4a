//! A real `lb run` as a child process, and what the memory tests read of it.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A field of /proc/PID/status in KiB.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("lb run is alive");
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// The daemon's anonymous resident memory: the median of five readings 100 ms apart.
pub async fn rss_anon(pid: u32) -> u64 {
    let mut v = Vec::new();
    for _ in 0..5 {
        v.push(status_kib(pid, "RssAnon"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    v.sort_unstable();
    v[2]
}

/// A child process killed when the test ends, also on a failed assertion.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `lb run` on `config`, its log in `log`.
pub fn lb_run(config: &Path, log: &Path) -> KillOnDrop {
    let log = std::fs::File::create(log).expect("log file");
    let bin = std::env::var("LB_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_lb").to_owned());
    let child = Command::new(bin)
        .arg("run")
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("lb run starts");
    KillOnDrop(child)
}
