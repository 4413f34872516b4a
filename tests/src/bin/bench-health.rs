//! `cargo xtask bench health`: what the health engine costs at scale. 10,000 Backend Services
//! with TCP checks at the defaults (P = 1 s, T = 1 s, RS = 3, RF = 2, S-HC1) are checked
//! against local listeners, and the engine's CPU share of one core and its memory are printed.
//!
//! One listening socket on 0.0.0.0 answers every 127.x.y.z address, so each service gets its
//! own loopback address and they all share one port. The listener runs in a child process
//! (this binary re-executed with `--listener PORT`) so that its accept work is not counted as
//! the engine's: the CPU figure is this process's own user + system time (getrusage), which
//! also holds the kernel's work for the engine's connects. The engine runs on a current-thread
//! tokio runtime, as in the `lb` daemon. The whole run lasts about 25 s and stops by itself.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use lb::config::{BackendService, HealthCheck, HealthKind};
use lb::health::{HealthEngine, HealthState};

/// Backend Services checked.
const SERVICES: usize = 10_000;
/// Period and Timeout of the check profile (the S-HC1 defaults).
const PERIOD: Duration = Duration::from_secs(1);
/// Longest wait for every service to reach OK (RS = 3 checks at P = 1 s need about 3-4 s).
const WARM_UP_LIMIT: Duration = Duration::from_secs(10);
/// How often the warm-up looks at the snapshot.
const WARM_UP_POLL: Duration = Duration::from_millis(100);
/// The measurement window.
const WINDOW: Duration = Duration::from_secs(20);
/// The listener child exits on its own after this, even if nobody kills it.
const LISTENER_LIFETIME: Duration = Duration::from_secs(90);
/// Requested accept backlog (the kernel caps it at net.core.somaxconn).
const BACKLOG: libc::c_int = 65535;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, port] = args.as_slice()
        && flag == "--listener"
    {
        return listener(port.parse().context("--listener PORT")?);
    }
    let nofile = raise_nofile()?;
    let child = ListenerChild::spawn()?;
    let services = services(child.port);
    let check = tcp_profile();
    println!(
        "bench health: {SERVICES} Backend Services, TCP check P = T = {} s, RS = {}, RF = {};\n\
         services at 127.1.0.1 .. 127.1.39.250, port {}, all answered by one listener in a child\n\
         process (pid {}); engine on a current-thread tokio runtime; RLIMIT_NOFILE {nofile}.\n\
         cpu = this process's user + system time / wall time over a {} s window after warm-up.",
        PERIOD.as_secs(),
        check.required_successes,
        check.required_failures,
        child.port,
        child.process.id(),
        WINDOW.as_secs(),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let baseline = memory()?;
    let report = runtime.block_on(measure(&services, &check))?;
    drop(child);
    report.print(baseline);
    if report.ok_after_warm_up < SERVICES {
        bail!(
            "only {}/{SERVICES} services reached OK within {} s: the window did not measure \
             the steady state",
            report.ok_after_warm_up,
            WARM_UP_LIMIT.as_secs()
        );
    }
    if report.failed > 0 {
        bail!("{} checks failed in the window", report.failed);
    }
    Ok(())
}

/// What one run measured.
struct Report {
    ok_after_warm_up: usize,
    warm_up: Duration,
    wall: Duration,
    user: Duration,
    system: Duration,
    checks: usize,
    failed: usize,
    mean_check: Duration,
    max_check: Duration,
    changes_in_window: usize,
    sample_failure: Option<String>,
    memory: Memory,
}

impl Report {
    fn print(&self, baseline: Memory) {
        let secs = self.wall.as_secs_f64();
        println!(
            "warm-up: {}/{SERVICES} OK after {:.1} s",
            self.ok_after_warm_up,
            self.warm_up.as_secs_f64()
        );
        println!(
            "checks {:.0}/s ({} started in {secs:.1} s, {} failed); duration mean {:.3} ms, \
             max {:.1} ms; state changes in the window: {}",
            self.checks as f64 / secs,
            self.checks,
            self.failed,
            self.mean_check.as_secs_f64() * 1e3,
            self.max_check.as_secs_f64() * 1e3,
            self.changes_in_window,
        );
        if let Some(reason) = &self.sample_failure {
            println!("first service that failed or is not OK, its last check: {reason}");
        }
        let cpu = (self.user + self.system).as_secs_f64() / secs * 100.0;
        println!(
            "cpu {cpu:.1}% of one core (user {:.2} s + system {:.2} s over {secs:.1} s; target < 25%)",
            self.user.as_secs_f64(),
            self.system.as_secs_f64(),
        );
        println!(
            "memory {:.1} MiB over the baseline (RSS {:.1} MiB, baseline {:.1} MiB, peak {:.1} MiB)",
            mib(self.memory.rss.saturating_sub(baseline.rss)),
            mib(self.memory.rss),
            mib(baseline.rss),
            mib(self.memory.peak),
        );
    }
}

/// Starts the engine, waits for warm-up, measures the window, then reads the check logs.
async fn measure(services: &[BackendService], check: &HealthCheck) -> Result<Report> {
    let started = Instant::now();
    let engine = HealthEngine::start(services, std::slice::from_ref(check));
    let mut ok = 0;
    while started.elapsed() < WARM_UP_LIMIT {
        ok = count_ok(&engine);
        if ok == SERVICES {
            break;
        }
        tokio::time::sleep(WARM_UP_POLL).await;
    }
    let warm_up = started.elapsed();

    let (cpu0, t0, w0) = (cpu_time()?, Instant::now(), SystemTime::now());
    tokio::time::sleep(WINDOW).await;
    let (cpu1, wall, w1) = (cpu_time()?, t0.elapsed(), SystemTime::now());
    let memory = memory()?;

    // Read the logs after the window so that this reading is not counted as engine work.
    let in_window = |at: SystemTime| at >= w0 && at < w1;
    let (mut checks, mut failed, mut total, mut max_check) = (0, 0, Duration::ZERO, Duration::ZERO);
    let mut changes_in_window = 0;
    let mut sample_failure = None;
    let snapshot = engine.snapshot();
    for service in services {
        let mut service_failed = false;
        for record in engine.checks(&service.name) {
            if in_window(record.at.at) {
                checks += 1;
                total += record.duration;
                max_check = max_check.max(record.duration);
                if !record.ok {
                    failed += 1;
                    service_failed = true;
                }
            }
        }
        let transitions = engine.transitions(&service.name);
        changes_in_window += transitions.iter().filter(|t| in_window(t.at.at)).count();
        let unhealthy = service_failed || snapshot.state(&service.name) != Some(HealthState::Ok);
        if sample_failure.is_none() && unhealthy {
            sample_failure = engine
                .last_reason(&service.name)
                .map(|reason| format!("{}: {reason}", service.name));
        }
    }
    engine.shutdown();
    Ok(Report {
        ok_after_warm_up: ok,
        warm_up,
        wall,
        user: cpu1.0.saturating_sub(cpu0.0),
        system: cpu1.1.saturating_sub(cpu0.1),
        checks,
        failed,
        mean_check: total.checked_div(checks.max(1) as u32).unwrap_or_default(),
        max_check,
        changes_in_window,
        sample_failure,
        memory,
    })
}

fn count_ok(engine: &HealthEngine) -> usize {
    let snapshot = engine.snapshot();
    snapshot
        .services
        .values()
        .filter(|s| s.state == HealthState::Ok)
        .count()
}

/// Service `i` listens on 127.1.{i / 250}.{i % 250 + 1}, all on `port`.
fn services(port: u16) -> Vec<BackendService> {
    (0..SERVICES)
        .map(|i| BackendService {
            name: format!("be-{i:05}"),
            address: IpAddr::V4(Ipv4Addr::new(127, 1, (i / 250) as u8, (i % 250 + 1) as u8)),
            port,
            weight: 1,
            health_check: Some("tcp".into()),
            maintenance: false,
            backup: false,
            max_connections: None,
        })
        .collect()
}

fn tcp_profile() -> HealthCheck {
    HealthCheck {
        name: "tcp".into(),
        kind: HealthKind::Tcp,
        period: PERIOD,
        timeout: PERIOD,
        required_successes: 3,
        required_failures: 2,
    }
}

/// The listener child; killed and reaped when dropped, also when the bench fails.
struct ListenerChild {
    process: Child,
    port: u16,
}

impl ListenerChild {
    /// Re-executes this binary as `--listener 0` and reads the port it bound.
    fn spawn() -> Result<Self> {
        let exe = std::env::current_exe().context("finding this binary")?;
        let process = Command::new(exe)
            .args(["--listener", "0"])
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the listener child")?;
        let mut child = ListenerChild { process, port: 0 };
        let stdout = child.process.stdout.take().context("listener stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        child.port = line
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .with_context(|| format!("the listener did not report its port: {line:?}"))?;
        Ok(child)
    }
}

impl Drop for ListenerChild {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// The child: accepts and closes every connection until killed or `LISTENER_LIFETIME` ends.
fn listener(port: u16) -> Result<()> {
    // SAFETY: prctl with PR_SET_PDEATHSIG only sets a flag of this process.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let socket = TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)))?;
    let fd = socket.as_raw_fd();
    // A second listen() only raises the backlog of the listening socket.
    // SAFETY: `fd` is the listening socket owned by `socket`, alive for this call.
    if unsafe { libc::listen(fd, BACKLOG) } != 0 {
        return Err(std::io::Error::last_os_error()).context("listen");
    }
    // accept() gives up after one second without a connection, so the loop sees its deadline.
    let timeout = libc::timeval {
        tv_sec: 1,
        tv_usec: 0,
    };
    // SAFETY: a valid timeval of the size passed, on a socket we own.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const timeout).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("SO_RCVTIMEO");
    }
    let mut out = std::io::stdout();
    writeln!(out, "port {}", socket.local_addr()?.port())?;
    out.flush()?;
    let deadline = Instant::now() + LISTENER_LIFETIME;
    while Instant::now() < deadline {
        match socket.accept() {
            Ok((stream, _)) => drop(stream),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            // Out of descriptors or memory for a moment: let the backlog wait a little.
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    Ok(())
}

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the new limit.
fn raise_nofile() -> Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read or write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(std::io::Error::last_os_error()).context("getrlimit");
        }
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
            return Err(std::io::Error::last_os_error()).context("setrlimit");
        }
    }
    Ok(limit.rlim_cur)
}

/// This process's (user, system) CPU time, all threads included, children excluded.
fn cpu_time() -> Result<(Duration, Duration)> {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to the struct above.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Err(std::io::Error::last_os_error()).context("getrusage");
    }
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    Ok((time(usage.ru_utime), time(usage.ru_stime)))
}

/// Resident memory now and at its peak, in bytes.
#[derive(Clone, Copy)]
struct Memory {
    rss: u64,
    peak: u64,
}

fn memory() -> Result<Memory> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let field = |name: &str| -> Result<u64> {
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .with_context(|| format!("{name} missing in /proc/self/status"))?;
        let kib: u64 = line
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .with_context(|| format!("{name} {line:?}"))?;
        Ok(kib * 1024)
    };
    Ok(Memory {
        rss: field("VmRSS:")?,
        peak: field("VmHWM:")?,
    })
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
