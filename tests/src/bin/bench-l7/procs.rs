//! What the bench asks of the processes it starts (backend, proxies, wrk; stopped by
//! `lb_tests::bench::Guard`): their CPU time and their readiness.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lb_tests::bench::{Guard, log_tail};

/// Pause between two readiness probes.
const PROBE_PAUSE: Duration = Duration::from_millis(100);

/// CPU time (user + system) used so far by `guard`'s process and its direct children (the
/// nginx master's workers), or `None` when /proc cannot tell.
pub fn cpu_time(guard: &Guard) -> Option<Duration> {
    let pid = guard.pid();
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
