//! A deterministic routing environment for `bpf_fib_lookup` in packet fixtures.
//!
//! One network namespace holds two veth pairs whose both ends stay inside it: the client
//! side (`fxc`, 10.0.0.1/24 and fd00:c::1/64) and the backend side (`fxb`, 10.1.0.1/24 and
//! fd00:b::1/64), with fixed MACs and PERMANENT neighbour entries, so the next hop of every
//! address is known in advance; IPv4 and IPv6 forwarding are on. One backend address per
//! family (10.1.0.99, fd00:b::99) deliberately has no neighbour: its lookup fails. The calling
//! thread enters the namespace (BPF_PROG_TEST_RUN resolves the ingress ifindex and runs the
//! fib lookup in the caller's namespace) and leaves it, and the namespace is deleted, on drop.

use std::fs::File;
use std::net::{Ipv4Addr, Ipv6Addr};
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
/// A backend behind a route with a smaller MTU ([`NARROW_MTU`]), with a permanent
/// neighbour (the MAC of `BACKENDS[0]`): packets bigger than that are too big for its path.
pub const NARROW_BACKEND: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 50);
/// The IPv6 backend behind a route with MTU [`NARROW_MTU6`].
pub const NARROW_BACKEND6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xb, 0, 0, 0, 0, 0, 0x50);
/// A client behind a route with MTU [`NARROW_MTU`] (neighbour: `CLIENT_MAC`).
pub const NARROW_CLIENT: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 50);
/// MTU of the IPv4 narrow routes.
pub const NARROW_MTU: u16 = 1400;
/// MTU of the IPv6 narrow route (the IPv6 minimum).
pub const NARROW_MTU6: u16 = 1280;
/// A backend address on `fxb`'s subnet with no neighbour entry: its fib lookup fails.
pub const UNRESOLVED_BACKEND: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 99);

/// A router on `fxb`'s segment (permanent neighbour), the gateway to the routed backends'
/// subnets 10.2.0.0/24 and fd00:2::/64: backends that tunnel forwarding reaches through it.
pub const ROUTER_IP: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 254);
/// The router's IPv6 address on `fxb`'s segment.
pub const ROUTER_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xb, 0, 0, 0, 0, 0, 0xfe);
/// The router's MAC.
pub const ROUTER_MAC: Mac = [0x02, 0, 0, 0, 0x0b, 0xfe];
/// A backend behind the router.
pub const ROUTED_BACKEND: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 7);
/// An IPv6 backend behind the router.
pub const ROUTED_BACKEND6: Ipv6Addr = Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 7);
/// A backend behind the router on a path of MTU [`NARROW_MTU`].
pub const ROUTED_NARROW: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 50);
/// An IPv6 backend behind the router on a path of MTU [`NARROW_MTU6`].
pub const ROUTED_NARROW6: Ipv6Addr = Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 0x50);

/// The balancer's IPv6 address on the client side (fd00:c::1/64 on `fxc`).
pub const LB_CLIENT_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xc, 0, 0, 0, 0, 0, 1);
/// The balancer's IPv6 address on the backend side (fd00:b::1/64 on `fxb`).
pub const LB_BACKEND_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xb, 0, 0, 0, 0, 0, 1);
/// The client's IPv6 address (permanent neighbour on `fxc` with `CLIENT_MAC`).
pub const CLIENT_IP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xc, 0, 0, 0, 0, 0, 2);
/// IPv6 backends with permanent neighbours on `fxb`, with the MACs of `BACKENDS` (same order).
pub const BACKENDS6: [(Ipv6Addr, Mac); 3] = [
    (
        Ipv6Addr::new(0xfd00, 0xb, 0, 0, 0, 0, 0, 0x11),
        BACKENDS[0].1,
    ),
    (
        Ipv6Addr::new(0xfd00, 0xb, 0, 0, 0, 0, 0, 0x12),
        BACKENDS[1].1,
    ),
    (
        Ipv6Addr::new(0xfd00, 0xb, 0, 0, 0, 0, 0, 0x13),
        BACKENDS[2].1,
    ),
];
/// An IPv6 backend address on `fxb`'s subnet with no neighbour entry: its fib lookup fails.
pub const UNRESOLVED_BACKEND6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xb, 0, 0, 0, 0, 0, 0x99);

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

/// Runs `sysctl -w key` inside the namespace `ns`.
fn sysctl(ns: &str, key: &str) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "sysctl", "-q", "-w", key])
        .output()
        .context("running sysctl")?;
    if !out.status.success() {
        bail!(
            "sysctl {key}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Adds a PERMANENT neighbour entry `addr` -> `lladdr` on `dev`.
fn neighbour(ns: &str, addr: &str, lladdr: &Mac, dev: &str) -> anyhow::Result<()> {
    ip(&[
        "-n",
        ns,
        "neigh",
        "replace",
        addr,
        "lladdr",
        &mac_text(lladdr),
        "dev",
        dev,
        "nud",
        "permanent",
    ])
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
            (
                CLIENT_IF,
                "fxc-p",
                LB_CLIENT_MAC,
                CLIENT_MAC,
                "10.0.0.1/24",
                format!("{LB_CLIENT_IP6}/64"),
            ),
            (
                BACKEND_IF,
                "fxb-p",
                LB_BACKEND_MAC,
                BACKEND_PEER_MAC,
                "10.1.0.1/24",
                format!("{LB_BACKEND_IP6}/64"),
            ),
        ];
        // IPv6 on, and forwarding on before any address exists (so no device is a host).
        for key in [
            "net.ipv6.conf.all.disable_ipv6=0",
            "net.ipv6.conf.default.disable_ipv6=0",
            "net.ipv6.conf.all.forwarding=1",
            "net.ipv6.conf.default.forwarding=1",
        ] {
            sysctl(ns, key)?;
        }
        for (dev, peer, dev_mac, peer_mac, cidr, cidr6) in links {
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
            // nodad: usable at once, never "tentative".
            ip(&["-n", ns, "-6", "addr", "add", &cidr6, "dev", dev, "nodad"])?;
            ip(&["-n", ns, "link", "set", "dev", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "dev", peer, "up"])?;
        }
        ip(&["-n", ns, "link", "set", "dev", "lo", "up"])?;
        for dev in ["all", "default", "lo", CLIENT_IF, BACKEND_IF] {
            sysctl(ns, &format!("net.ipv4.conf.{dev}.forwarding=1"))?;
            sysctl(ns, &format!("net.ipv6.conf.{dev}.forwarding=1"))?;
        }
        neighbour(ns, &CLIENT_IP.to_string(), &CLIENT_MAC, CLIENT_IF)?;
        neighbour(ns, &CLIENT_IP6.to_string(), &CLIENT_MAC, CLIENT_IF)?;
        for (addr, m) in BACKENDS {
            neighbour(ns, &addr.to_string(), &m, BACKEND_IF)?;
        }
        for (addr, m) in BACKENDS6 {
            neighbour(ns, &addr.to_string(), &m, BACKEND_IF)?;
        }
        let narrow = [
            (NARROW_BACKEND.to_string() + "/32", BACKEND_IF, NARROW_MTU),
            (
                NARROW_BACKEND6.to_string() + "/128",
                BACKEND_IF,
                NARROW_MTU6,
            ),
            (NARROW_CLIENT.to_string() + "/32", CLIENT_IF, NARROW_MTU),
        ];
        for (dst, dev, mtu) in narrow {
            let mtu = mtu.to_string();
            ip(&[
                "-n", ns, "route", "add", &dst, "dev", dev, "mtu", "lock", &mtu,
            ])?;
        }
        neighbour(ns, &ROUTER_IP.to_string(), &ROUTER_MAC, BACKEND_IF)?;
        neighbour(ns, &ROUTER_IP6.to_string(), &ROUTER_MAC, BACKEND_IF)?;
        let routed = [
            ("10.2.0.0/24".to_string(), ROUTER_IP.to_string(), None),
            ("fd00:2::/64".to_string(), ROUTER_IP6.to_string(), None),
            (
                format!("{ROUTED_NARROW}/32"),
                ROUTER_IP.to_string(),
                Some(NARROW_MTU),
            ),
            (
                format!("{ROUTED_NARROW6}/128"),
                ROUTER_IP6.to_string(),
                Some(NARROW_MTU6),
            ),
        ];
        for (dst, via, mtu) in routed {
            let mut args = vec!["-n", ns, "route", "add", &dst, "via", &via];
            let mtu = mtu.map(|m| m.to_string());
            if let Some(mtu) = &mtu {
                args.extend(["mtu", "lock", mtu]);
            }
            ip(&args)?;
        }
        neighbour(ns, &NARROW_BACKEND.to_string(), &BACKENDS[0].1, BACKEND_IF)?;
        neighbour(ns, &NARROW_BACKEND6.to_string(), &BACKENDS[0].1, BACKEND_IF)?;
        neighbour(ns, &NARROW_CLIENT.to_string(), &CLIENT_MAC, CLIENT_IF)?;
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
        // Routed backends: through the router.
        assert!(route("10.2.0.7").contains("via 10.1.0.254 dev fxb"));
        assert!(route("fd00:2::7").contains("via fd00:b::fe dev fxb"));
        // IPv6: connected routes, permanent neighbours, forwarding, no tentative address.
        assert!(route("fd00:b::11").contains("dev fxb"));
        assert!(route("fd00:b::99").contains("dev fxb"));
        assert!(route("fd00:c::2").contains("dev fxc"));
        for (addr, m) in BACKENDS6 {
            let want = format!("{addr} lladdr {} PERMANENT", mac_text(&m));
            assert!(neigh.contains(&want), "{want} in {neigh}");
        }
        assert!(neigh.contains("fd00:b::13 lladdr 02:00:00:00:01:13 PERMANENT"));
        assert!(!neigh.contains("fd00:b::99"), "{neigh}");
        let neigh_c = Command::new("ip")
            .args(["-n", &name, "neigh", "show", "dev", "fxc"])
            .output()
            .unwrap();
        let neigh_c = String::from_utf8_lossy(&neigh_c.stdout).into_owned();
        assert!(
            neigh_c.contains("fd00:c::2 lladdr 02:00:00:00:0c:02 PERMANENT"),
            "{neigh_c}"
        );
        let addrs = Command::new("ip")
            .args(["-n", &name, "-6", "addr", "show", "dev", "fxb"])
            .output()
            .unwrap();
        let addrs = String::from_utf8_lossy(&addrs.stdout).into_owned();
        let global = addrs.lines().find(|l| l.contains("inet6 fd00:b::1/64"));
        assert!(global.is_some_and(|l| !l.contains("tentative")), "{addrs}");
        for dev in ["all", CLIENT_IF, BACKEND_IF] {
            let out = Command::new("ip")
                .args(["netns", "exec", &name, "sysctl", "-n"])
                .arg(format!("net.ipv6.conf.{dev}.forwarding"))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1", "{dev}");
        }
        drop(env);
        assert!(!Path::new("/var/run/netns").join(&name).exists());
    }
}
