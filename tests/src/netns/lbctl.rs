//! Driving the `lb` binary inside the balancer namespace, and reading what it reports.
//!
//! `lb` runs under `nsenter --net=/var/run/netns/NS` (not `ip netns exec`, which remounts
//! /sys and so hides the bpffs pins).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::cmd;

/// Time bound for one `lb load`/`unload`/`status`/`check-config` run.
pub const LB_TIMEOUT: Duration = Duration::from_secs(30);

/// The workspace root (the parent of the `tests` crate).
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The `lb` binary: env `LB_BIN`, else `<repo>/target/debug/lb`.
pub fn lb_binary() -> PathBuf {
    std::env::var_os("LB_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/debug/lb"))
}

/// The XDP object: env `LB_XDP_OBJECT`, else the `cargo xtask build` output.
pub fn xdp_object() -> PathBuf {
    std::env::var_os("LB_XDP_OBJECT")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("lb-ebpf/target/bpfel-unknown-none/release/lb-xdp"))
}

/// Fails with build instructions when the `lb` binary or the XDP object is missing, so a
/// test that needs the data path fails loudly instead of passing without it.
pub fn require_data_path() -> Result<()> {
    let bin = lb_binary();
    let obj = xdp_object();
    if !bin.is_file() {
        bail!(
            "{} is missing: build it with `cargo build -p lb-userspace` (or set LB_BIN)",
            bin.display()
        );
    }
    if !obj.is_file() {
        bail!(
            "{} is missing: build it with `cargo xtask build` (or set LB_XDP_OBJECT)",
            obj.display()
        );
    }
    Ok(())
}

/// Mounts bpffs on /sys/fs/bpf unless it is already there (pins need it).
pub fn ensure_bpffs() -> Result<()> {
    let kind = cmd::run("stat", &["-f", "-c", "%T", "/sys/fs/bpf"])?;
    if kind.trim() != "bpf_fs" {
        cmd::run("mount", &["-t", "bpf", "bpf", "/sys/fs/bpf"])?;
    }
    Ok(())
}

/// A `Command` running the `lb` binary inside the namespace bound at `netns_path`.
pub fn lb_command(netns_path: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!("--net={}", netns_path.display()))
        .arg(lb_binary())
        .args(args)
        .env("LB_XDP_OBJECT", xdp_object());
    cmd
}

/// Runs `lb args...` in the namespace; returns stdout, or an error with stderr.
pub fn lb(netns_path: &Path, args: &[&str]) -> Result<String> {
    cmd::checked(lb_command(netns_path, args), LB_TIMEOUT)
}

/// A background `lb run` daemon; killed (SIGKILL) if still running when dropped.
#[derive(Debug)]
pub struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    /// Starts `lb args...` in the namespace with stdout and stderr appended to `log`.
    pub fn start(netns_path: &Path, args: &[&str], log: &Path) -> Result<Daemon> {
        Self::start_filtered(netns_path, args, log, None)
    }

    /// [`Daemon::start`] with `RUST_LOG` set to `filter` (`None`: the test's own).
    pub fn start_filtered(
        netns_path: &Path,
        args: &[&str],
        log: &Path,
        filter: Option<&str>,
    ) -> Result<Daemon> {
        let out = File::options().create(true).append(true).open(log)?;
        let err = out.try_clone()?;
        let mut cmd = lb_command(netns_path, args);
        if let Some(filter) = filter {
            cmd.env("RUST_LOG", filter);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        let child = cmd.spawn().context("starting lb run")?;
        Ok(Daemon {
            child,
            log: log.to_path_buf(),
        })
    }

    /// Its pid (nsenter execs `lb` in place, so this is the daemon itself).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running (reaps it if it has exited).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`) to the daemon.
    pub fn signal(&mut self, signal: libc::c_int) -> Result<()> {
        if !self.is_running() {
            bail!("lb run has already exited; log:\n{}", self.log());
        }
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        if rc != 0 {
            bail!("kill: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout` for the daemon to exit and returns its status.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!(
            "lb run did not exit within {timeout:?}; log:\n{}",
            self.log()
        )
    }

    /// Everything the daemon printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.is_running() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Finds a counter by name anywhere in `lb status --json` output: as an object key
/// (`"nat_reply": 3`), a `[name, value]` pair, or `{"name": .., "value": ..}`. Names are
/// compared case-insensitively and without a `global_` prefix, so `GLOBAL_NAT_REPLY`,
/// `nat_reply` and `NAT_REPLY` all match `nat_reply`.
pub fn find_counter(json: &serde_json::Value, name: &str) -> Option<u64> {
    use serde_json::Value;
    let want = normalize(name);
    match json {
        Value::Object(map) => {
            for (k, v) in map {
                if normalize(k) == want
                    && let Some(n) = v.as_u64()
                {
                    return Some(n);
                }
            }
            let named = map
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| normalize(n) == want);
            if named && let Some(n) = map.get("value").and_then(Value::as_u64) {
                return Some(n);
            }
            map.values().find_map(|v| find_counter(v, name))
        }
        Value::Array(items) => {
            if let [Value::String(k), v] = items.as_slice()
                && normalize(k) == want
                && let Some(n) = v.as_u64()
            {
                return Some(n);
            }
            items.iter().find_map(|v| find_counter(v, name))
        }
        _ => None,
    }
}

fn normalize(name: &str) -> String {
    let lower = name.to_ascii_lowercase().replace(['-', ' '], "_");
    lower.strip_prefix("global_").unwrap_or(&lower).to_owned()
}
