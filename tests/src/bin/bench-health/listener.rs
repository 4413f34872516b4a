//! The target of every check: one listening socket on 0.0.0.0, so every 127.1.x.y address
//! has a listener on the same port. It runs in a child process (this binary re-executed with
//! `--listener PORT`) so that its work is measured apart from the checker's. The child
//! counts the connections it accepts (each one a completed handshake; a half-open check,
//! SYN, SYN-ACK, RST, never reaches accept) and answers the count on its stdout each time a
//! line arrives on its stdin.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use lb_tests::bench::die_with_parent;

/// The child exits on its own after this, even if nobody kills it (the whole bench, 50,000
/// services included, takes well under this).
const LIFETIME: Duration = Duration::from_secs(20 * 60);
/// Requested accept backlog (the kernel caps it at net.core.somaxconn).
const BACKLOG: libc::c_int = 65535;

/// The listener child; killed and reaped when dropped, also when the bench fails.
pub struct ListenerChild {
    process: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// The port every service uses.
    pub port: u16,
}

impl ListenerChild {
    /// Re-executes this binary as `--listener 0` and reads the port it bound.
    pub fn spawn() -> Result<Self> {
        let exe = std::env::current_exe().context("finding this binary")?;
        let mut process = die_with_parent(Command::new(exe).args(["--listener", "0"]))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the listener child")?;
        let stdin = process.stdin.take().context("listener stdin")?;
        let stdout = BufReader::new(process.stdout.take().context("listener stdout")?);
        let mut child = ListenerChild {
            process,
            stdin,
            stdout,
            port: 0,
        };
        let line = child.read_line()?;
        child.port = line
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .with_context(|| format!("the listener did not report its port: {line:?}"))?;
        Ok(child)
    }

    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// Connections accepted since the child started.
    pub fn accepted(&mut self) -> Result<u64> {
        writeln!(self.stdin, "count").context("asking the listener")?;
        self.stdin.flush()?;
        let line = self.read_line()?;
        line.strip_prefix("accepted ")
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("the listener answered {line:?}"))
    }

    fn read_line(&mut self) -> Result<String> {
        let mut line = String::new();
        // The child answers at once; if it died, read_line returns 0 (EOF) at once too.
        let n = self.stdout.read_line(&mut line)?;
        anyhow::ensure!(n > 0, "the listener child exited");
        Ok(line.trim().to_string())
    }
}

impl Drop for ListenerChild {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// The child: accepts and closes every connection until killed or `LIFETIME` ends; a second
/// thread answers "accepted N" to each line on stdin and ends the child at EOF.
pub fn run(port: u16) -> Result<()> {
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
    let accepted = Arc::new(AtomicU64::new(0));
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "port {}", socket.local_addr()?.port())?;
        out.flush()?;
    }
    let counter = accepted.clone();
    std::thread::spawn(move || {
        let mut out = std::io::stdout();
        for line in std::io::stdin().lines() {
            if line.is_err() {
                break;
            }
            let n = counter.load(Ordering::Relaxed);
            if writeln!(out, "accepted {n}")
                .and_then(|()| out.flush())
                .is_err()
            {
                break;
            }
        }
        // The parent closed its end: it is gone or done.
        std::process::exit(0);
    });
    let deadline = Instant::now() + LIFETIME;
    while Instant::now() < deadline {
        match socket.accept() {
            Ok((stream, _)) => {
                accepted.fetch_add(1, Ordering::Relaxed);
                drop(stream);
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            // Out of descriptors or memory for a moment: let the backlog wait a little.
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    Ok(())
}
