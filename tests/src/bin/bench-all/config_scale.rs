//! Control plane at scale, configuration side: how long `lb check-config` takes
//! for 10,000 and 50,000 Backend Services, how long `lb run` takes until 10,000 of them are
//! OK, and how long a reload (SIGHUP) of those 10,000 takes to apply when one service
//! changed, with the count of health state changes it caused (only the changed service
//! may change).
//!
//! Everything runs on loopback: one listening socket on 0.0.0.0 held by this process answers
//! the TCP checks of every 127.1.x.y service (the half-open check never reaches accept).
//! The daemon's own log says when services become OK and when a reload is applied.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::l4::median;

/// Service counts `check-config` is timed at.
const CHECKED: [usize; 2] = [10_000, 50_000];
/// Services of the running daemon that is reloaded.
const RUNNING: usize = 10_000;
/// Timed runs of each `check-config`.
const RUNS: usize = 3;
/// Longest wait for the daemon's services to become OK, and for a reload to apply.
const LIMIT: Duration = Duration::from_secs(30);
/// How long state changes are collected after a reload (more than RS x P = 3 s).
const SETTLE: Duration = Duration::from_secs(5);
/// The service the reload changes (its address), so exactly one check starts again.
const CHANGED: &str = "s5";

/// A configuration of `n` Backend Services with TCP checks at the defaults, all in one
/// l7-tcp vService's list (so the proxy, the selection model and the engine all take them).
fn config_text(n: usize, port: u16, api: u16, vs_port: u16, changed: bool) -> String {
    let mut s = format!(
        "[api]\nlisten = \"127.0.0.1:{api}\"\n\n\
         [[health_check]]\nname = \"tcp\"\ntype = \"tcp\"\nperiod = 1\ntimeout = 1\n\
         required_successes = 3\nrequired_failures = 2\n\n"
    );
    for i in 0..n {
        let addr = if changed && format!("s{i}") == CHANGED {
            Ipv4Addr::LOCALHOST
        } else {
            Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 1, 0, 1)) + i as u32)
        };
        let _ = write!(
            s,
            "[[backend_service]]\nname = \"s{i}\"\naddress = \"{addr}\"\nport = {port}\n\
             health_check = \"tcp\"\n\n"
        );
    }
    let list: Vec<String> = (0..n).map(|i| format!("\"s{i}\"")).collect();
    let _ = write!(
        s,
        "[[vservice]]\nname = \"all\"\nkind = \"l7-tcp\"\naddress = \"127.0.0.1\"\n\
         port = {vs_port}\nbackends = [{}]\n",
        list.join(", ")
    );
    s
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The scratch directory and the daemon, removed and killed on drop.
struct Scratch {
    dir: PathBuf,
    daemon: Option<Child>,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(child) = self.daemon.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Reads what a log file gained since the last call.
struct LogTail {
    file: File,
    offset: u64,
    pending: String,
}

impl LogTail {
    fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        Ok(Self {
            file,
            offset: 0,
            pending: String::new(),
        })
    }

    /// Complete new lines.
    fn lines(&mut self) -> Result<Vec<String>> {
        self.file.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        self.offset += self.file.read_to_end(&mut bytes)? as u64;
        self.pending.push_str(&String::from_utf8_lossy(&bytes));
        let Some(end) = self.pending.rfind('\n') else {
            return Ok(Vec::new());
        };
        let rest = self.pending.split_off(end + 1);
        let done = std::mem::replace(&mut self.pending, rest);
        Ok(done.lines().map(str::to_owned).collect())
    }
}

fn state_change(line: &str) -> bool {
    line.contains("health state changed")
}

/// Times `lb check-config` of `n` services (median of `RUNS`), failing if it rejects the file.
fn time_check_config(lb: &str, file: &Path) -> Result<f64> {
    let mut times = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let out = Command::new(lb)
            .arg("check-config")
            .arg(file)
            .output()
            .with_context(|| format!("running {lb} check-config"))?;
        times.push(t.elapsed().as_secs_f64());
        if !out.status.success() {
            bail!(
                "lb check-config {} failed: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    Ok(median(&times))
}

/// Returns the report section.
pub fn run() -> Result<String> {
    let lb = std::env::var("LB_BIN").context("LB_BIN (set by cargo xtask bench)")?;
    let dir = std::env::temp_dir().join(format!("lb-bench-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut scratch = Scratch {
        dir: dir.clone(),
        daemon: None,
    };
    let target = TcpListener::bind("0.0.0.0:0").context("binding the checks' target")?;
    let port = target.local_addr()?.port();
    let (api, vs_port) = (free_port()?, free_port()?);
    let mut out = String::from("| what | time |\n|---|---|\n");
    for n in CHECKED {
        let file = dir.join(format!("check-{n}.toml"));
        std::fs::write(&file, config_text(n, port, api, vs_port, false))?;
        let secs = time_check_config(&lb, &file)?;
        println!("control: check-config {n} Backend Services: {secs:.2} s");
        let _ = writeln!(
            out,
            "| `lb check-config`, {n} Backend Services (median of {RUNS}) | {secs:.2} s |"
        );
    }

    let file = dir.join("run.toml");
    std::fs::write(&file, config_text(RUNNING, port, api, vs_port, false))?;
    let log = dir.join("lb.log");
    let started = Instant::now();
    let child = Command::new(&lb)
        .args(["run", "--config"])
        .arg(&file)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(File::create(&log)?)
        .spawn()
        .with_context(|| format!("starting {lb} run"))?;
    let pid = child.id();
    scratch.daemon = Some(child);
    let mut tail = LogTail::open(&log)?;
    let mut ok = 0;
    while ok < RUNNING {
        if started.elapsed() > LIMIT {
            bail!(
                "only {ok}/{RUNNING} services OK after {} s",
                LIMIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
        ok += tail
            .lines()?
            .iter()
            .filter(|l| state_change(l) && l.contains("to=OK"))
            .count();
    }
    let all_ok = started.elapsed().as_secs_f64();
    println!("control: lb run to {RUNNING} services OK: {all_ok:.2} s");
    let _ = writeln!(
        out,
        "| `lb run` start until {RUNNING} services are OK (RS = 3 at P = 1 s) | {all_ok:.2} s |"
    );

    std::fs::write(&file, config_text(RUNNING, port, api, vs_port, true))?;
    let t = Instant::now();
    let sent = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()?;
    if !sent.success() {
        bail!("kill -HUP {pid} failed");
    }
    let mut changes = Vec::new();
    let applied = loop {
        if t.elapsed() > LIMIT {
            bail!("the reload was not applied within {} s", LIMIT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(5));
        let lines = tail.lines()?;
        changes.extend(lines.iter().filter(|l| state_change(l)).cloned());
        if lines.iter().any(|l| l.contains("configuration applied")) {
            break t.elapsed().as_secs_f64();
        }
    };
    std::thread::sleep(SETTLE);
    changes.extend(tail.lines()?.into_iter().filter(|l| state_change(l)));
    let marker = format!("service={CHANGED} ");
    let others = changes.iter().filter(|l| !l.contains(&marker)).count();
    println!(
        "control: reload of {RUNNING} services applied in {applied:.2} s; state changes in the \
         next {} s: {} of the changed service, {others} of the others",
        SETTLE.as_secs(),
        changes.len() - others
    );
    let _ = writeln!(
        out,
        "| reload (SIGHUP) of {RUNNING} services, one changed: applied | {applied:.2} s |\n\
         | health state changes of unchanged services in the {} s after the reload | {others} |\n",
        SETTLE.as_secs()
    );
    drop(target);
    if others > 0 {
        bail!("the reload changed the health state of {others} unchanged services");
    }
    Ok(out)
}
