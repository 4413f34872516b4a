//! The processes the bench starts (backend, proxies, wrk) and the scratch directory their
//! configuration files live in. Everything started here is stopped by its own pid when its
//! guard drops, so an early `?` return leaves nothing running.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

/// How long a stopped process may take to exit after SIGTERM before it gets SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// Pause between two readiness probes.
const PROBE_PAUSE: Duration = Duration::from_millis(100);

/// A scratch directory under /tmp, removed with everything in it on drop.
pub struct Scratch {
    /// Its path.
    pub path: PathBuf,
}

impl Scratch {
    /// Creates a fresh, uniquely named directory (0755: nginx workers must reach it).
    pub fn new() -> Result<Self> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let path = std::env::temp_dir().join(format!("lb-bench-l7-{}-{nanos}", std::process::id()));
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

/// A child process that is stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Guard {
    /// A short name for messages.
    pub name: String,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
    child: Child,
}

impl Guard {
    /// Starts `cmd` with stdout and stderr appended to `log`.
    pub fn spawn(name: &str, cmd: &mut Command, log: &Path) -> Result<Self> {
        let out =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name}: {cmd:?}"))?;
        Ok(Self {
            name: name.to_string(),
            log: log.to_path_buf(),
            child,
        })
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

    /// Waits at most `limit` for the process to exit by itself; `None` if it is still running.
    pub fn wait_for(&mut self, limit: Duration) -> Result<Option<std::process::ExitStatus>> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait()? {
                return Ok(Some(s));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// CPU time (user + system) used so far by the process and its direct children (the
    /// nginx master's workers), or `None` when /proc cannot tell.
    pub fn cpu_time(&self) -> Option<Duration> {
        let pid = self.child.id();
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        let mut ticks = proc_ticks(pid)?;
        for c in children.split_whitespace().filter_map(|c| c.parse().ok()) {
            ticks += proc_ticks(c).unwrap_or(0);
        }
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let hz = u64::try_from(hz).ok().filter(|&h| h > 0)?;
        Some(Duration::from_secs_f64(ticks as f64 / hz as f64))
    }

    fn signal(&self, sig: libc::c_int) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) on the pid of a child this guard owns and has not reaped.
            unsafe {
                libc::kill(pid, sig);
            }
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        self.signal(libc::SIGTERM);
        if !matches!(self.wait_for(STOP_GRACE), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// utime + stime of one process, in clock ticks (fields 14 and 15 of /proc/PID/stat,
/// counted after the parenthesised command name, which may hold spaces).
fn proc_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
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

/// One `GET /` with `Connection: close`; the status code of the answer.
pub fn get_status(addr: SocketAddr) -> Result<u16> {
    let timeout = Duration::from_secs(1);
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.write_all(b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")?;
    let mut head = [0u8; 64];
    let mut n = 0;
    while n < 12 {
        let r = s.read(&mut head[n..])?;
        if r == 0 {
            break;
        }
        n += r;
    }
    let line = String::from_utf8_lossy(&head[..n]).into_owned();
    line.get(9..12)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("not an HTTP answer: {line:?}"))
}

/// Waits (bounded by `limit`) until `GET /` on `addr` answers 200; the guard's process
/// must stay alive meanwhile.
pub fn wait_http_ok(guard: &mut Guard, addr: SocketAddr, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    let mut last = String::from("no attempt");
    while Instant::now() < deadline {
        guard.check_alive()?;
        match get_status(addr) {
            Ok(200) => return Ok(()),
            Ok(code) => last = format!("answered {code}"),
            Err(e) => last = format!("{e:#}"),
        }
        std::thread::sleep(PROBE_PAUSE);
    }
    bail!(
        "{} did not answer 200 on {addr} within {} s (last: {last}); end of its log:\n{}",
        guard.name,
        limit.as_secs(),
        log_tail(&guard.log, 15)
    )
}
