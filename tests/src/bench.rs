//! What the benchmark binaries share: a scratch directory, guards that stop the processes a
//! bench starts, free loopback ports, log tails, the workspace root and peers' version lines.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

/// How long a stopped process may take to exit after SIGTERM before it gets SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// A scratch directory under /tmp, removed with everything in it on drop.
pub struct Scratch {
    /// Its path.
    pub path: PathBuf,
}

impl Scratch {
    /// Creates a fresh directory named after `bench` and this process (0755, so that
    /// peers running as other users, such as nginx workers, can reach it).
    pub fn new(bench: &str) -> Result<Self> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let path = std::env::temp_dir().join(format!("{bench}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self { path })
    }

    /// Creates a subdirectory and returns its path.
    pub fn dir(&self, name: &str) -> Result<PathBuf> {
        let p = self.path.join(name);
        std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The last `lines` lines of a log file (for error messages).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A loopback TCP port nobody listens on right now.
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("finding a free loopback port")?;
    Ok(l.local_addr()?.port())
}

/// The workspace root (where `target/` is).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// First line a tool prints about its version (stdout or stderr), for a report's header.
pub fn version(bin: &str, arg: &str) -> String {
    Command::new(bin)
        .arg(arg)
        .output()
        .map(|o| {
            let mut all = String::from_utf8_lossy(&o.stdout).into_owned();
            all.push_str(&String::from_utf8_lossy(&o.stderr));
            all.lines().next().unwrap_or_default().trim().to_string()
        })
        .unwrap_or_else(|e| format!("{bin}: {e}"))
}

/// Makes the child get SIGKILL when this process dies, so that nothing outlives a bench that
/// was itself killed.
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    // SAFETY: the closure runs between fork and exec and only calls prctl, which is
    // async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        })
    }
}

/// A child process that is stopped (SIGTERM, then SIGKILL) when dropped, so an early `?`
/// return leaves nothing running; it also dies with the bench.
pub struct Guard {
    /// A short name for messages.
    pub name: String,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
    /// When it was started.
    pub started: Instant,
    child: Child,
}

impl Guard {
    /// Starts `cmd` with stdout and stderr written to `log`.
    pub fn spawn(name: &str, cmd: &mut Command, log: &Path) -> Result<Self> {
        let out =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let child = die_with_parent(cmd)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name}: {cmd:?}"))?;
        Ok(Self {
            name: name.to_string(),
            log: log.to_path_buf(),
            started: Instant::now(),
            child,
        })
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails with the end of its log if it has already exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "{} exited ({status}); end of its log:\n{}",
                self.name,
                log_tail(&self.log, 15)
            );
        }
        Ok(())
    }

    /// Waits at most `limit` for the process to exit by itself; `None` if it still runs.
    pub fn wait_for(&mut self, limit: Duration) -> Result<Option<ExitStatus>> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait()? {
                return Ok(Some(s));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops it now (what dropping it does).
    pub fn stop(self) {}
}

impl Drop for Guard {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) on the pid of a child this guard owns and has not reaped.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        if !matches!(self.wait_for(STOP_GRACE), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
