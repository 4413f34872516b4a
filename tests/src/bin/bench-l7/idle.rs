//! The idle-connection case: 10,000 keep-alive client connections that each made
//! one request and then stay open doing nothing, held by the bench itself, while wrk keeps a
//! steady load on a few others. What a proxy pays for them is the growth of its resident
//! memory divided by their number; the cost to the active requests is their p99.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use lb_tests::bench::Guard;

/// Idle connections opened per run.
pub const IDLE: usize = 10_000;
/// How long one connection may take to connect or answer its request.
const STEP_LIMIT: Duration = Duration::from_secs(5);
/// The request each idle connection makes before going quiet.
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n";
/// A response head this long without its end is not one the backend sends.
const MAX_RESPONSE: usize = 16 * 1024;

/// Raises this process's open-file limit to its hard limit (children inherit it: the proxies
/// hold the idle connections' other ends, the bench holds these). Errors when that leaves
/// too few for `IDLE` connections plus some room.
pub fn raise_nofile() -> Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit write/read only the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            bail!(
                "getrlimit(RLIMIT_NOFILE): {}",
                std::io::Error::last_os_error()
            );
        }
        lim.rlim_cur = lim.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
            bail!(
                "setrlimit(RLIMIT_NOFILE): {}",
                std::io::Error::last_os_error()
            );
        }
    }
    // The bench holds one end of each idle connection, each proxy the other (and its own).
    let need = IDLE as u64 + 1024;
    if lim.rlim_cur < need {
        bail!(
            "the open-file limit is {} and the idle case needs about {need} in the bench and \
             in each proxy",
            lim.rlim_cur
        );
    }
    Ok(lim.rlim_cur)
}

/// Opens `n` connections to `addr`, one at a time, each sending one keep-alive request and
/// reading its whole answer; returns them open. Any failure ends the case with the number
/// opened so far.
pub fn open(addr: SocketAddr, n: usize) -> Result<Vec<TcpStream>> {
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let c = one(addr).with_context(|| format!("idle connection {} of {n} to {addr}", i + 1))?;
        conns.push(c);
    }
    Ok(conns)
}

fn one(addr: SocketAddr) -> Result<TcpStream> {
    let mut s = TcpStream::connect_timeout(&addr, STEP_LIMIT)?;
    s.set_read_timeout(Some(STEP_LIMIT))?;
    s.write_all(REQUEST)?;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            bail!("closed before the whole answer ({} bytes)", buf.len());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(total) = answer_len(&buf)?
            && buf.len() >= total
        {
            return Ok(s);
        }
        if buf.len() > MAX_RESPONSE {
            bail!("answer head over {MAX_RESPONSE} bytes");
        }
    }
}

/// The whole length of a 200 answer with Content-Length once its head is in `buf`.
fn answer_len(buf: &[u8]) -> Result<Option<usize>> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    if status.get(9..12) != Some("200") {
        bail!("answered {status:?}");
    }
    let length = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .context("the answer has no Content-Length (its end cannot be told)")?;
    Ok(Some(end + 4 + length))
}

/// Resident memory (KiB) of `guard`'s process and its direct children (nginx's workers),
/// or None when /proc cannot tell.
pub fn rss_kib(guard: &Guard) -> Option<u64> {
    let pid = guard.pid();
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    let mut kib = proc_rss(pid)?;
    for c in children.split_whitespace().filter_map(|c| c.parse().ok()) {
        kib += proc_rss(c).unwrap_or(0);
    }
    Some(kib)
}

fn proc_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// No rule of docs/behaviour.md covers the bench's idle client: these check how it reads
/// the answer to its one request.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_ends_after_its_content_length() {
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel";
        assert_eq!(answer_len(head).unwrap(), Some(head.len() + 2));
        assert_eq!(answer_len(b"HTTP/1.1 200 OK\r\nContent-").unwrap(), None);
    }

    #[test]
    fn an_error_answer_or_one_without_length_is_refused() {
        let e = answer_len(b"HTTP/1.1 503 Service Unavailable\r\n\r\n").unwrap_err();
        assert!(e.to_string().contains("503"), "{e}");
        let e = answer_len(b"HTTP/1.1 200 OK\r\n\r\n").unwrap_err();
        assert!(e.to_string().contains("Content-Length"), "{e}");
    }
}
