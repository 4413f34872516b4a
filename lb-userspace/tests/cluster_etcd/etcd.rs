//! A real etcd for tests (Debian's `etcd-server`, `etcdctl` from `etcd-client`): one member
//! on loopback ports of its own, data in a temporary directory, stopped, frozen, restarted
//! and killed by the test; and a gate the test can close between the balancers and etcd
//! (a network partition) while `etcdctl` still reaches it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::ports::free_port;

/// One etcd member, killed (and its data removed) on drop.
pub struct Etcd {
    child: Option<Child>,
    dir: PathBuf,
    /// Client port on 127.0.0.1.
    pub port: u16,
    peer_port: u16,
    extra: Vec<String>,
    /// `http` or `https` (TLS with client certificates).
    scheme: &'static str,
    /// Arguments every etcdctl call gets (TLS files, `--user`).
    ctl: Vec<String>,
}

impl Etcd {
    /// Starts etcd and waits until it answers.
    pub fn start(tag: &str) -> Etcd {
        Etcd::start_on(tag, free_port())
    }

    /// Starts etcd with its client URL on `port`.
    pub fn start_on(tag: &str, port: u16) -> Etcd {
        Etcd::start_with(tag, port, &[])
    }

    /// Starts etcd with its client URL on `port` and `extra` arguments.
    pub fn start_with(tag: &str, port: u16, extra: &[&str]) -> Etcd {
        let dir = std::env::temp_dir().join(format!("lb-etcd-{tag}-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut etcd = Etcd {
            child: None,
            dir,
            port,
            peer_port: free_port(),
            extra: extra.iter().map(|a| a.to_string()).collect(),
            scheme: "http",
            ctl: Vec::new(),
        };
        etcd.spawn();
        etcd
    }

    /// Starts etcd serving TLS only, requiring client certificates signed by `ca`
    /// (`server` and `client` are (certificate, key) PEM files).
    pub fn start_tls(tag: &str, ca: &Path, server: (&Path, &Path), client: (&Path, &Path)) -> Etcd {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("lb-etcd-{tag}-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = |p: &Path| p.display().to_string();
        let mut etcd = Etcd {
            child: None,
            dir,
            port,
            peer_port: free_port(),
            extra: vec![
                "--cert-file".into(),
                path(server.0),
                "--key-file".into(),
                path(server.1),
                "--trusted-ca-file".into(),
                path(ca),
                "--client-cert-auth".into(),
            ],
            scheme: "https",
            ctl: vec![
                "--cacert".into(),
                path(ca),
                "--cert".into(),
                path(client.0),
                "--key".into(),
                path(client.1),
            ],
        };
        etcd.spawn();
        etcd
    }

    /// Adds arguments to every later etcdctl call (`--user root:...` once auth is on).
    pub fn ctl_args(&mut self, args: &[&str]) {
        self.ctl.extend(args.iter().map(|a| a.to_string()));
    }

    /// `http://127.0.0.1:PORT` (`https` with TLS).
    pub fn url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.port)
    }

    /// (Re)starts the process on the same data directory and waits until it answers.
    pub fn spawn(&mut self) {
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new("etcd")
            .args(["--name", "test", "--logger", "zap", "--log-level", "error"])
            .arg("--data-dir")
            .arg(&self.dir)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("test={peer}")])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts (Debian package etcd-server; `cargo xtask setup` installs it)");
        self.child = Some(child);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(15) {
            if self.try_etcdctl(&["endpoint", "health"]).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("etcd did not answer on {client} within 15 s");
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: i32) {
        let pid = self.child.as_ref().expect("etcd runs").id();
        // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
        let rc = unsafe { libc::kill(pid as libc::pid_t, signal) };
        assert_eq!(rc, 0, "signal {signal} to etcd");
    }

    /// SIGTERM, and waits until it exited.
    pub fn stop(&mut self) {
        self.signal(libc::SIGTERM);
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }

    fn try_etcdctl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("etcdctl")
            .args(["--endpoints", &self.url(), "--command-timeout", "3s"])
            .args(&self.ctl)
            .args(args)
            .output()
            .map_err(|e| format!("etcdctl: {e}"))?;
        match out.status.success() {
            true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
            false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        }
    }

    /// Runs etcdctl, panicking with its error when it fails.
    pub fn etcdctl(&self, args: &[&str]) -> String {
        self.try_etcdctl(args)
            .unwrap_or_else(|e| panic!("etcdctl {args:?}: {e}"))
    }

    /// Puts `value` at `key`; returns the new revision.
    pub fn put(&self, key: &str, value: &str) -> i64 {
        let out = self.etcdctl(&["put", "-w", "json", "--", key, value]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("etcdctl json");
        v["header"]["revision"].as_i64().expect("a revision")
    }

    /// The value at `key` and its mod_revision.
    pub fn get(&self, key: &str) -> Option<(String, i64)> {
        let out = self.etcdctl(&["get", "-w", "json", key]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("etcdctl json");
        let kv = v["kvs"].as_array()?.first()?.clone();
        let value = kv["value"].as_str()?;
        let bytes = base64_decode(value);
        Some((
            String::from_utf8_lossy(&bytes).into_owned(),
            kv["mod_revision"].as_i64()?,
        ))
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// etcdctl's JSON carries keys and values in base64.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes().filter_map(value) {
        acc = (acc << 6) | u32::from(c);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

/// A TCP forwarder between the balancers and etcd: while closed it drops every connection
/// it carries and every new one, as a network partition would.
pub struct Gate {
    /// The port the balancers are given.
    pub port: u16,
    open: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Gate {
    /// Forwards 127.0.0.1:`port` (a new one) to 127.0.0.1:`target`.
    pub async fn new(target: u16) -> Gate {
        let port = free_port();
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("gate binds");
        let (open, open_rx) = watch::channel(true);
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !*open_rx.borrow() {
                    continue;
                }
                let mut closed = open_rx.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = closed.wait_for(|open| !open) => {}
                    }
                });
            }
        });
        Gate { port, open, task }
    }

    /// Opens or closes the gate.
    pub fn set_open(&self, open: bool) {
        self.open.send_replace(open);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.task.abort();
    }
}
