//! BIRD 2 daemons inside the harness's namespaces: the scale-out topology's router and
//! balancers announce and learn VIP routes over BGP with them ([`super::scale`]).
//!
//! Each BIRD runs in the foreground (`bird -f`) as a child of the test process under
//! `ip netns exec`, with its own control socket, so dropping the handle ends exactly it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::cmd;
use super::ns::Netns;

/// A running BIRD; killed (SIGTERM, then SIGKILL) when dropped.
#[derive(Debug)]
pub struct Bird {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

/// Fails with the install hint when BIRD 2 is missing.
pub fn require_bird() -> Result<()> {
    if cmd::quiet("bird", &["--version"]) || Path::new("/usr/sbin/bird").is_file() {
        return Ok(());
    }
    bail!("BIRD 2 is missing: `apt-get install bird2` (cargo xtask setup installs it)")
}

impl Bird {
    /// Writes `config` to `<dir>/<name>.conf` (after `bird -p` checked it) and starts BIRD
    /// with it in `ns`; its log goes to `<dir>/<name>.log`.
    pub fn start(ns: &Netns, dir: &Path, name: &str, config: &str) -> Result<Bird> {
        let conf = dir.join(format!("{name}.conf"));
        let socket = dir.join(format!("{name}.ctl"));
        let log = dir.join(format!("{name}.log"));
        let text = format!("log \"{}\" all;\n{config}", log.display());
        std::fs::write(&conf, text).with_context(|| format!("writing {}", conf.display()))?;
        let conf_s = conf.display().to_string();
        cmd::run("bird", &["-p", "-c", &conf_s]).context("bird -p rejected the configuration")?;
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns.name(),
                "bird",
                "-f",
                "-c",
                &conf_s,
                "-s",
            ])
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting bird")?;
        let bird = Bird { child, socket, log };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !bird.socket.exists() {
            if Instant::now() > deadline {
                bail!("bird in {} did not open its control socket", ns.name());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(bird)
    }

    /// `birdc -s SOCKET args...`.
    pub fn birdc(&self, args: &[&str]) -> Result<String> {
        let socket = self.socket.display().to_string();
        let mut all = vec!["-s", socket.as_str()];
        all.extend_from_slice(args);
        cmd::run("birdc", &all)
    }

    /// Its log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Kills it at once (SIGKILL), like a crash.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for Bird {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // SAFETY: kill(2) on the pid of our own child, not yet reaped.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if !matches!(self.child.try_wait(), Ok(None)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.kill();
    }
}
