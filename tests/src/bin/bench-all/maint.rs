//! Control plane: time from a Maintenance API call to the first request that avoids the
//! server. A real `lb run` (no XDP) serves an HTTP vService over two backends with the
//! `first` algorithm, so every request goes to `a` until it is in Maintenance; the clock
//! starts when the API call is sent. Loopback only; every loop is bounded.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::l4::median;

const RUNS: usize = 7;
const LIMIT: Duration = Duration::from_secs(10);

/// Kills the daemon and stops the backends when dropped.
struct Guard {
    child: Child,
    stop: Arc<AtomicBool>,
    dir: std::path::PathBuf,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// An HTTP/1.1 backend answering every request with `name`, one connection per thread.
fn backend(name: &'static str, stop: Arc<AtomicBool>) -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        let started = Instant::now();
        while !stop.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(600) {
            match listener.accept() {
                Ok((mut s, _)) => {
                    let stop = stop.clone();
                    std::thread::spawn(move || {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                        let mut buf = [0u8; 4096];
                        let mut pending = Vec::new();
                        while !stop.load(Ordering::SeqCst) {
                            let Ok(n) = s.read(&mut buf) else { return };
                            if n == 0 {
                                return;
                            }
                            pending.extend_from_slice(&buf[..n]);
                            while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n")
                            {
                                pending.drain(..end + 4);
                                let resp = format!(
                                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{name}",
                                    name.len()
                                );
                                if s.write_all(resp.as_bytes()).is_err() {
                                    return;
                                }
                            }
                        }
                    });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    });
    Ok(port)
}

/// One request on a new connection; the status line's code and the body.
fn request(port: u16, head: &str, body: &str) -> Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let req = format!(
        "{head} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

fn wait_for(port: u16, want: &str) -> Result<()> {
    let started = Instant::now();
    while started.elapsed() < LIMIT {
        if let Ok((200, body)) = request(port, "GET /", "")
            && body == want
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("no request reached {want} within {LIMIT:?}")
}

fn maintenance(api: u16, on: bool) -> Result<()> {
    let (code, body) = request(
        api,
        "POST /api/v1/backends/a/maintenance",
        &format!("{{\"on\": {on}}}"),
    )?;
    if code != 200 {
        bail!("maintenance call answered {code}: {body}");
    }
    Ok(())
}

/// Returns the report section.
pub fn run() -> Result<String> {
    let lb = std::env::var("LB_BIN").context("LB_BIN (set by cargo xtask bench)")?;
    let stop = Arc::new(AtomicBool::new(false));
    let (a, b) = (backend("a", stop.clone())?, backend("b", stop.clone())?);
    let (api, web) = (free_port()?, free_port()?);
    let dir = std::env::temp_dir().join(format!("lb-bench-maint-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cfg = dir.join("lb.toml");
    std::fs::write(
        &cfg,
        format!(
            "[api]\nlisten = \"127.0.0.1:{api}\"\n\n\
             [[backend_service]]\nname = \"a\"\naddress = \"127.0.0.1\"\nport = {a}\n\n\
             [[backend_service]]\nname = \"b\"\naddress = \"127.0.0.1\"\nport = {b}\n\n\
             [[vservice]]\nname = \"web\"\nkind = \"http\"\naddress = \"127.0.0.1\"\nport = {web}\n\
             algorithm = \"first\"\nbackends = [\"a\", \"b\"]\n"
        ),
    )?;
    let child = Command::new(&lb)
        .args(["run", "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {lb}"))?;
    let _guard = Guard { child, stop, dir };
    wait_for(web, "a")?;
    let mut avoid = Vec::new();
    let mut call = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        maintenance(api, true)?;
        call.push(t.elapsed().as_secs_f64() * 1e3);
        wait_for(web, "b")?;
        avoid.push(t.elapsed().as_secs_f64() * 1e3);
        maintenance(api, false)?;
        wait_for(web, "a")?;
    }
    let (avoid, call) = (median(&avoid), median(&call));
    println!(
        "control: maintenance call {call:.1} ms, first request avoiding the server {avoid:.1} ms"
    );
    Ok(format!(
        "| from a Maintenance API call to the first request that avoids the server (median of {RUNS}, \
         the call itself writes the config file and reloads) | {avoid:.1} ms (the call returns after {call:.1} ms) |\n"
    ))
}
