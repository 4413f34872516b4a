//! A deterministic routing environment for `bpf_fib_lookup` in packet fixtures.
//!
//! One network namespace holds two veth pairs whose both ends stay inside it: the client
//! side (`fxc`, 10.0.0.1/24) and the backend side (`fxb`, 10.1.0.1/24), with fixed MACs and
//! PERMANENT neighbour entries, so the next hop of every address is known in advance. One
//! backend address (10.1.0.99) deliberately has no neighbour: its lookup fails. The calling
//! thread enters the namespace (BPF_PROG_TEST_RUN resolves the ingress ifindex and runs the
//! fib lookup in the caller's namespace) and leaves it, and the namespace is deleted, on drop.

use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, bail};

use crate::packet::{Mac, mac_text};

/// The balancer's client-side interface.
pub const CLIENT_IF: &str = "fxc";
/// The balancer's backend-side interface.
pub const BACKEND_IF: &str = "fxb";
/// MAC of `fxc` (source MAC of frames sent towards clients).
pub const LB_CLIENT_MAC: Mac = [0x02, 0, 0, 0, 0x0c, 0x01];
/// MAC of `fxc`'s peer, which plays the client.
pub const CLIENT_MAC: Mac = [0x02, 0, 0, 0, 0x0c, 0x02];
/// MAC of `fxb` (source MAC of frames sent towards backends).
pub const LB_BACKEND_MAC: Mac = [0x02, 0, 0, 0, 0x0b, 0x01];
/// MAC of `fxb`'s peer.
pub const BACKEND_PEER_MAC: Mac = [0x02, 0, 0, 0, 0x0b, 0x02];
/// The balancer's address on the client side.
pub const LB_CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// The balancer's address on the backend side.
pub const LB_BACKEND_IP: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
/// The client address (permanent neighbour on `fxc`).
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// Backend addresses with permanent neighbours on `fxb`, and their MACs.
pub const BACKENDS: [(Ipv4Addr, Mac); 3] = [
    (Ipv4Addr::new(10, 1, 0, 11), [0x02, 0, 0, 0, 0x01, 0x11]),
    (Ipv4Addr::new(10, 1, 0, 12), [0x02, 0, 0, 0, 0x01, 0x12]),
    (Ipv4Addr::new(10, 1, 0, 13), [0x02, 0, 0, 0, 0x01, 0x13]),
];
/// A backend address on `fxb`'s subnet with no neighbour entry: its fib lookup fails.
pub const UNRESOLVED_BACKEND: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 99);

/// The namespace, entered by the thread that created it. Drop leaves and deletes it.
pub struct FixtureEnv {
    name: String,
    /// The thread's namespace before entering, restored on drop.
    original: Option<File>,
    /// ifindex of `fxc` inside the namespace (client-side ingress).
    pub client_ifindex: u32,
    /// ifindex of `fxb` inside the namespace (backend-side ingress).
    pub backend_ifindex: u32,
}

/// Runs `ip` with `args`, failing with its stderr.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn setns(file: &File) -> anyhow::Result<()> {
    // SAFETY: a valid open namespace fd; setns only changes this thread's namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        bail!("setns: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

fn ifindex(name: &str) -> anyhow::Result<u32> {
    let c = std::ffi::CString::new(name)?;
    // SAFETY: a NUL-terminated name; the call only reads it.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        bail!("no interface {name} in the fixture namespace");
    }
    Ok(idx)
}

impl FixtureEnv {
    /// Creates `lbfix-<pid>-<n>`, configures it and enters it from the calling thread.
    pub fn create() -> anyhow::Result<Self> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("lbfix-{}-{n}", std::process::id());
        if Path::new("/var/run/netns").join(&name).exists() {
            ip(&["netns", "del", &name])?;
        }
        ip(&["netns", "add", &name])?;
        let mut env = Self {
            name,
            original: None,
            client_ifindex: 0,
            backend_ifindex: 0,
        };
        env.configure()?;
        env.enter()?;
        Ok(env)
    }

    /// The namespace's name (for `nsenter --net=/var/run/netns/NAME` when debugging).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn configure(&self) -> anyhow::Result<()> {
        let ns = self.name.as_str();
        let links = [
            (CLIENT_IF, "fxc-p", LB_CLIENT_MAC, CLIENT_MAC, "10.0.0.1/24"),
            (
                BACKEND_IF,
                "fxb-p",
                LB_BACKEND_MAC,
                BACKEND_PEER_MAC,
                "10.1.0.1/24",
            ),
        ];
        for (dev, peer, dev_mac, peer_mac, cidr) in links {
            ip(&[
                "-n", ns, "link", "add", dev, "type", "veth", "peer", "name", peer,
            ])?;
            ip(&[
                "-n",
                ns,
                "link",
                "set",
                "dev",
                dev,
                "address",
                &mac_text(&dev_mac),
            ])?;
            ip(&[
                "-n",
                ns,
                "link",
                "set",
                "dev",
                peer,
                "address",
                &mac_text(&peer_mac),
            ])?;
            ip(&["-n", ns, "addr", "add", cidr, "dev", dev])?;
            ip(&["-n", ns, "link", "set", "dev", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "dev", peer, "up"])?;
        }
        ip(&["-n", ns, "link", "set", "dev", "lo", "up"])?;
        for dev in ["all", "default", "lo", CLIENT_IF, BACKEND_IF] {
            let key = format!("net.ipv4.conf.{dev}.forwarding=1");
            let out = Command::new("ip")
                .args(["netns", "exec", ns, "sysctl", "-q", "-w", &key])
                .output()
                .context("running sysctl")?;
            if !out.status.success() {
                bail!(
                    "sysctl {key}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        let client = CLIENT_IP.to_string();
        let client_mac = mac_text(&CLIENT_MAC);
        ip(&[
            "-n",
            ns,
            "neigh",
            "replace",
            &client,
            "lladdr",
            &client_mac,
            "dev",
            CLIENT_IF,
            "nud",
            "permanent",
        ])?;
        for (addr, m) in BACKENDS {
            let (a, m) = (addr.to_string(), mac_text(&m));
            ip(&[
                "-n",
                ns,
                "neigh",
                "replace",
                &a,
                "lladdr",
                &m,
                "dev",
                BACKEND_IF,
                "nud",
                "permanent",
            ])?;
        }
        Ok(())
    }

    fn enter(&mut self) -> anyhow::Result<()> {
        let original = File::open("/proc/thread-self/ns/net").context("opening own netns")?;
        let target = File::open(Path::new("/var/run/netns").join(&self.name))
            .context("opening fixture netns")?;
        setns(&target)?;
        self.original = Some(original);
        self.client_ifindex = ifindex(CLIENT_IF)?;
        self.backend_ifindex = ifindex(BACKEND_IF)?;
        Ok(())
    }
}

impl Drop for FixtureEnv {
    fn drop(&mut self) {
        if let Some(original) = self.original.take()
            && let Err(e) = setns(&original)
        {
            eprintln!("fixture env: cannot return to the original namespace: {e:#}");
        }
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("fixture env: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The environment routes each backend via `fxb` and the client via `fxc`, and leaves
    /// no namespace behind. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
    #[test]
    fn builds_routes_and_cleans_up() {
        let env = FixtureEnv::create().unwrap();
        let name = env.name().to_string();
        assert_ne!(env.client_ifindex, env.backend_ifindex);
        let route = |dst: &str| {
            let out = Command::new("ip")
                .args(["-n", &name, "route", "get", dst])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        assert!(route("10.1.0.11").contains("dev fxb"));
        assert!(route("10.0.0.2").contains("dev fxc"));
        let neigh = Command::new("ip")
            .args(["-n", &name, "neigh", "show", "dev", "fxb"])
            .output()
            .unwrap();
        let neigh = String::from_utf8_lossy(&neigh.stdout).into_owned();
        assert!(
            neigh.contains("10.1.0.12 lladdr 02:00:00:00:01:12 PERMANENT"),
            "{neigh}"
        );
        assert!(!neigh.contains("10.1.0.99"), "{neigh}");
        drop(env);
        assert!(!Path::new("/var/run/netns").join(&name).exists());
    }
}
