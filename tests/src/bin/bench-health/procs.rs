//! What /proc says about the processes the bench starts (which `lb_tests::bench::Guard`
//! stops), and the API's HTTP answers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Largest HTTP answer read from the API.
const MAX_ANSWER: u64 = 64 << 20;

/// utime + stime of one process (all its threads), in seconds: fields 14 and 15 of
/// /proc/PID/stat, counted after the parenthesised command name (which may hold spaces), in
/// clock ticks of sysconf(_SC_CLK_TCK).
#[derive(Clone, Copy, Default)]
pub struct CpuTime {
    pub user: f64,
    pub system: f64,
}

impl CpuTime {
    pub fn of(pid: u32) -> Result<Self> {
        let path = format!("/proc/{pid}/stat");
        let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let rest = stat
            .rfind(')')
            .map(|i| &stat[i + 1..])
            .with_context(|| format!("{path}: no command name"))?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |i: usize| -> Result<u64> {
            fields
                .get(i)
                .and_then(|f| f.parse().ok())
                .with_context(|| format!("{path}: field {}", i + 3))
        };
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let hz = u64::try_from(hz)
            .ok()
            .filter(|&h| h > 0)
            .context("sysconf(_SC_CLK_TCK)")? as f64;
        Ok(Self {
            user: field(11)? as f64 / hz,
            system: field(12)? as f64 / hz,
        })
    }

    /// The time spent between `self` (earlier) and `later`.
    pub fn until(self, later: CpuTime) -> CpuTime {
        CpuTime {
            user: (later.user - self.user).max(0.0),
            system: (later.system - self.system).max(0.0),
        }
    }

    pub fn total(self) -> f64 {
        self.user + self.system
    }
}

/// VmRSS, its anonymous part (RssAnon: heap and stacks, not the binary's mapped pages) and
/// VmHWM of a process, in bytes.
#[derive(Clone, Copy, Default)]
pub struct Memory {
    pub rss: u64,
    pub anon: u64,
    pub peak: u64,
}

impl Memory {
    pub fn of(pid: u32) -> Result<Self> {
        let path = format!("/proc/{pid}/status");
        let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let field = |name: &str| -> Result<u64> {
            let line = status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .with_context(|| format!("{name} missing in {path}"))?;
            let kib: u64 = line
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .with_context(|| format!("{name} {line:?}"))?;
            Ok(kib * 1024)
        };
        Ok(Self {
            rss: field("VmRSS:")?,
            anon: field("RssAnon:")?,
            peak: field("VmHWM:")?,
        })
    }
}

/// One counter of /proc/net/snmp or /proc/net/netstat (`Tcp`, `ActiveOpens`), which hold
/// pairs of lines: names, then values, each line starting with the group.
pub fn net_counter(file: &str, group: &str, name: &str) -> Result<u64> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?;
    let prefix = format!("{group}:");
    let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let value = names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.parse().ok());
        if let Some(v) = value {
            return Ok(v);
        }
    }
    bail!("{group}:{name} not found in {file}")
}

/// `GET path` with `Connection: close`; the body of a 200 answer.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<String> {
    let timeout = Duration::from_secs(5);
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.take(MAX_ANSWER).read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("GET {path}: no end of headers"))?;
    let status = head.get(9..12).unwrap_or_default();
    if status != "200" {
        bail!("GET {path} answered {status}: {}", body.trim());
    }
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if chunked {
        return dechunk(body).with_context(|| format!("GET {path}: bad chunked body"));
    }
    Ok(body.to_string())
}

fn dechunk(mut body: &str) -> Result<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").context("chunk size")?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)?;
        if size == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..size).context("short chunk")?);
        body = rest.get(size + 2..).context("chunk end")?;
    }
}
