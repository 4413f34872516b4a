//! One etcd member inside a test namespace (Debian's `etcd-server`, `etcdctl` from
//! `etcd-client`), so balancers in other namespaces reach it over the harness's own links
//! and nothing listens on the host. Data in a temporary directory; stopped with SIGTERM and
//! restarted on the same data by the test; killed and removed on drop, also on a panic.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::cmd;
use super::ns::Netns;

/// The client port etcd listens on inside its namespace.
pub const ETCD_CLIENT_PORT: u16 = 2379;
/// The peer port (one member: only itself).
const ETCD_PEER_PORT: u16 = 2380;

/// A single-member etcd running in a namespace; the guard that stops it.
pub struct NsEtcd {
    child: Option<Child>,
    ns: String,
    addr: Ipv4Addr,
    dir: PathBuf,
}

impl NsEtcd {
    /// Starts etcd in `ns` on `addr` (an address of that namespace) with its data under
    /// `work_dir`, and waits until it answers.
    pub fn start(ns: &Netns, addr: Ipv4Addr, work_dir: &std::path::Path) -> Result<NsEtcd> {
        let mut etcd = NsEtcd {
            child: None,
            ns: ns.name().to_owned(),
            addr,
            dir: work_dir.join("etcd-data"),
        };
        etcd.spawn()?;
        Ok(etcd)
    }

    /// `http://ADDR:2379`, what the balancers' `[cluster.etcd] endpoints` name.
    pub fn url(&self) -> String {
        format!("http://{}:{ETCD_CLIENT_PORT}", self.addr)
    }

    /// (Re)starts the process on the same data directory and waits until it answers.
    pub fn spawn(&mut self) -> Result<()> {
        if self.child.is_some() {
            bail!("etcd already runs");
        }
        let client = self.url();
        let peer = format!("http://{}:{ETCD_PEER_PORT}", self.addr);
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, "etcd"])
            .args(["--name", "scale", "--logger", "zap", "--log-level", "error"])
            .arg("--data-dir")
            .arg(&self.dir)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("scale={peer}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting etcd (Debian package etcd-server)")?;
        self.child = Some(child);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(15) {
            if self.ctl(&["endpoint", "health"]).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("etcd did not answer on {client} within 15 s")
    }

    /// SIGTERM, and waits until it exited (10 s at most, then SIGKILL).
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            bail!("etcd does not run");
        };
        // SAFETY: kill(2) on the pid of a child this guard started and has not reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        bail!("etcd did not exit within 10 s of SIGTERM")
    }

    /// Runs `etcdctl --endpoints URL args...` inside the namespace; its stdout.
    pub fn ctl(&self, args: &[&str]) -> Result<String> {
        let url = self.url();
        let mut all = vec!["netns", "exec", &self.ns, "etcdctl", "--endpoints", &url];
        all.extend_from_slice(args);
        let mut command = Command::new("ip");
        command.args(&all);
        cmd::checked(command, Duration::from_secs(10))
    }
}

impl Drop for NsEtcd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
