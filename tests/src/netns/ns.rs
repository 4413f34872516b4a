//! One named network namespace (`/var/run/netns/NAME`) and ways to act inside it.
//!
//! Sockets stay in the namespace they were created in, so test code enters the namespace
//! in a short-lived thread ([`Netns::run`]), creates its sockets there, and may then use
//! them from any thread.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::cmd;

/// A network namespace created by the harness; deleted when dropped.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates the namespace, brings `lo` up, disables IPv6 (no router solicitations or
    /// MLD noise in the link counters) and turns reverse-path filtering off (DSR replies
    /// and NAT'd packets arrive on interfaces the strict filter would reject). A dual-stack
    /// topology turns IPv6 back on with [`Netns::enable_ipv6`].
    pub fn create(name: &str) -> Result<Netns> {
        cmd::run("ip", &["netns", "add", name])?;
        let ns = Netns {
            name: name.to_owned(),
        };
        ns.sysctl(&[
            ("net.ipv6.conf.all.disable_ipv6", "1"),
            ("net.ipv6.conf.default.disable_ipv6", "1"),
            ("net.ipv4.conf.all.rp_filter", "0"),
            ("net.ipv4.conf.default.rp_filter", "0"),
        ])?;
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Turns IPv6 back on for a dual-stack topology, before its links are made (interfaces
    /// created afterwards inherit the `default` settings). Quiet and usable at once: no
    /// duplicate address detection (every address is usable when added; link-local ones
    /// too), no router advertisements accepted and no solicitations sent (routes are static),
    /// addresses kept while a link is down (a backend made silent keeps its address), and
    /// `[::]` sockets dual-stack (`bindv6only = 0`, the Linux default, set explicitly: the
    /// backends' servers answer both families on one socket).
    pub fn enable_ipv6(&self) -> Result<()> {
        let mut settings = vec![("net.ipv6.bindv6only".to_owned(), "0")];
        for scope in ["all", "default"] {
            for (key, value) in [
                ("accept_dad", "0"),
                ("accept_ra", "0"),
                ("router_solicitations", "0"),
                ("keep_addr_on_down", "1"),
                ("disable_ipv6", "0"),
            ] {
                settings.push((format!("net.ipv6.conf.{scope}.{key}"), value));
            }
        }
        let refs: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        self.sysctl(&refs)
    }

    /// The namespace's name as `ip netns` knows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The bind-mounted namespace file, for `nsenter --net=` and `setns`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/var/run/netns").join(&self.name)
    }

    /// Moves the CALLING THREAD into this namespace (only network namespace; the rest of the
    /// process is untouched). Use it in threads the test spawned itself.
    pub fn enter(&self) -> Result<()> {
        enter_path(&self.path())
    }

    /// Runs `f` in a fresh thread that has entered this namespace and returns its result.
    /// A panic in `f` (a failed assertion) is propagated to the caller.
    pub fn run<F, R>(&self, f: F) -> Result<R>
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        std::thread::scope(|scope| {
            let handle = scope.spawn(|| -> Result<R> {
                self.enter()?;
                Ok(f())
            });
            match handle.join() {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Runs `ip -n NAME args...` and returns its stdout.
    pub fn ip(&self, args: &[&str]) -> Result<String> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        cmd::run("ip", &all)
    }

    /// Runs `program args...` inside the namespace (`ip netns exec`) and returns its stdout.
    pub fn exec(&self, program: &str, args: &[&str]) -> Result<String> {
        let mut all = vec!["netns", "exec", self.name.as_str(), program];
        all.extend_from_slice(args);
        cmd::run("ip", &all)
    }

    /// Sets sysctls of this namespace (all in one `sysctl` run).
    pub fn sysctl(&self, settings: &[(&str, &str)]) -> Result<()> {
        let pairs: Vec<String> = settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut args = vec!["-q", "-w"];
        args.extend(pairs.iter().map(String::as_str));
        self.exec("sysctl", &args).map(drop)
    }

    /// Packet counters `(rx_packets, tx_packets)` of one interface, from `ip -s -j link`.
    pub fn link_packets(&self, dev: &str) -> Result<(u64, u64)> {
        let out = self.ip(&["-s", "-j", "link", "show", "dev", dev])?;
        let json: serde_json::Value =
            serde_json::from_str(&out).with_context(|| format!("parsing ip -j output {out}"))?;
        let stats = &json[0]["stats64"];
        let get = |dir: &str| {
            stats[dir]["packets"]
                .as_u64()
                .with_context(|| format!("no stats64.{dir}.packets for {dev} in {out}"))
        };
        Ok((get("rx")?, get("tx")?))
    }
}

/// Moves the calling thread into the network namespace bound at `path`.
pub fn enter_path(path: &Path) -> Result<()> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: setns(2) with a valid open fd of a network namespace file; it only changes
    // the calling thread's network namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        bail!(
            "setns({}) failed: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

impl Drop for Netns {
    fn drop(&mut self) {
        if !cmd::quiet("ip", &["netns", "del", &self.name]) {
            eprintln!("harness: could not delete network namespace {}", self.name);
        }
    }
}
