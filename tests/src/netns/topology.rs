//! The client / balancer / backends topology and its cleanup guard.
//!
//! ```text
//!  client ns (eth0 10.10.0.2/24, default via 10.10.0.1)
//!     |  veth eth0 <-> cli
//!  balancer ns (cli 10.10.0.1/24; bkN 10.11.N.1/24; ip_forward=1; rp_filter=0)
//!     |  veth bkN <-> eth0
//!  backend ns N (eth0 10.11.N.2/24, default via 10.11.N.1)
//! ```
//! With DSR, each backend also has a direct link to the client (client `dsrN` 10.12.N.1/24,
//! backend `dsr0` 10.12.N.2/24), a route to the client address over it, and the VIP on `lo`
//! with ARP for it suppressed. VIPs live in 10.99.0.0/24, reached by the client's default
//! route via the balancer.
//!
//! A dual-stack topology ([`Topology::dual_stack`]) gives every namespace IPv6 addresses
//! beside the IPv4 ones, one unique-local /64 per link, mirroring the IPv4 plan (all added
//! `nodad`, so usable at once):
//!
//! ```text
//!  client ns (eth0 fd00:10:10::2/64, default and fd00:10:99::/64 via fd00:10:10::1)
//!  balancer ns (cli fd00:10:10::1/64; bkN fd00:10:11:N::1/64; ipv6 forwarding=1)
//!  backend ns N (eth0 fd00:10:11:N::2/64, default via fd00:10:11:N::1)
//!  DSR links: client dsrN fd00:10:12:N::1/64, backend dsr0 fd00:10:12:N::2/64
//! ```
//! IPv6 VIPs live in fd00:10:99::/64. Without [`Topology::dual_stack`], IPv6 stays disabled
//! in every namespace, as before (no router solicitations or MLD in the link counters).
//! `N` is written in hex in the addresses (it is the 4th group), the same as decimal up to 9.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result};

use super::cmd;
use super::lbctl::{self, Daemon};
use super::ns::Netns;
use super::servers::Servers;

/// The client's address.
pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 10, 0, 2);
/// The balancer's address on the client side (the client's gateway).
pub const BALANCER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 10, 0, 1);
/// The client's IPv6 address (dual-stack topologies).
pub const CLIENT_ADDR6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0x10, 0, 0, 0, 0, 2);
/// The balancer's IPv6 address on the client side (the client's IPv6 gateway).
pub const BALANCER_ADDR6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x10, 0x10, 0, 0, 0, 0, 1);
/// The prefix IPv6 VIPs are taken from; the client routes it via the balancer.
pub const VIP6_PREFIX: &str = "fd00:10:99::/64";
/// Prefix of every namespace name the harness creates (`lbt<pid>-<n>-<role>`).
const NS_PREFIX: &str = "lbt";
/// Prefix of pin directories under /sys/fs/bpf and work directories under the temp dir.
const DIR_PREFIX: &str = "lbtest-";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The address of backend `n` (1-based).
pub fn backend_addr(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 11, n as u8, 2)
}

/// The IPv6 address of backend `n` (1-based) in a dual-stack topology: `fd00:10:11:N::2`.
pub fn backend_addr6(n: usize) -> Ipv6Addr {
    backend_link6(n, 2)
}

/// The balancer's IPv6 address towards backend `n`: `fd00:10:11:N::1`.
fn backend_gateway6(n: usize) -> Ipv6Addr {
    backend_link6(n, 1)
}

fn backend_link6(n: usize, host: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x10, 0x11, n as u16, 0, 0, 0, host)
}

/// The IPv6 address of `host` on the direct DSR link of backend `n`: `fd00:10:12:N::host`
/// (1: the client's `dsrN`, 2: the backend's `dsr0`).
fn dsr_link6(n: usize, host: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x10, 0x12, n as u16, 0, 0, 0, host)
}

/// What to build.
#[derive(Clone, Debug)]
pub struct TopologyOptions {
    /// Number of backend namespaces (1..=200).
    pub backends: usize,
    /// Set for DSR: the VIP the backends hold on `lo`, plus the direct return links.
    pub dsr_vip: Option<Ipv4Addr>,
}

impl Default for TopologyOptions {
    fn default() -> Self {
        TopologyOptions {
            backends: 3,
            dsr_vip: None,
        }
    }
}

/// What a dual-stack topology adds ([`Topology::dual_stack`]).
#[derive(Clone, Debug, Default)]
pub struct Ipv6Options {
    /// Set for IPv6 DSR: the IPv6 VIP the backends hold on `lo` (as /128), plus the direct
    /// return links (shared with IPv4 DSR when [`TopologyOptions::dsr_vip`] is set too).
    pub dsr_vip: Option<Ipv6Addr>,
}

/// One backend host.
#[derive(Debug)]
pub struct BackendHost {
    /// Its name, `b1`, `b2`, ... (the tests use it as the Backend Service name too).
    pub name: String,
    /// Its namespace.
    pub ns: Netns,
    /// Its address (10.11.N.2).
    pub addr: Ipv4Addr,
    /// Its IPv6 address (fd00:10:11:N::2) in a dual-stack topology, else `None`.
    pub addr6: Option<Ipv6Addr>,
    /// The balancer-side interface leading to it (`bkN`).
    pub balancer_dev: String,
}

/// A whole test network. Dropping it stops its servers, removes the pin and work
/// directories and deletes every namespace (and with them every veth), also on panic.
pub struct Topology {
    /// Servers started in the backends; stopped first on drop.
    pub servers: Servers,
    /// Unique id of this topology (`lbt<pid>-<n>`).
    pub id: String,
    /// The client namespace.
    pub client: Netns,
    /// The balancer namespace, where `lb` runs.
    pub balancer: Netns,
    /// The backends, in order b1, b2, ...
    pub backends: Vec<BackendHost>,
    /// Per-topology bpffs pin directory (`/sys/fs/bpf/lbtest-<pid>-<n>`).
    pub pin_dir: PathBuf,
    /// Per-topology directory for configs and daemon logs.
    pub work_dir: PathBuf,
    /// Set for a dual-stack topology: what it was built with.
    pub ipv6: Option<Ipv6Options>,
}

impl Topology {
    /// Builds the topology (about a second). Stale leftovers of dead test processes are
    /// removed first.
    pub fn new(opts: &TopologyOptions) -> Result<Topology> {
        Topology::build(opts, None)
    }

    /// Builds a dual-stack topology: the same as [`Topology::new`], and every namespace gets
    /// its IPv6 addresses and routes too (see the module doc). The servers started by
    /// [`Topology::tcp_servers`] and [`Topology::udp_servers`] then listen on `[::]`, both
    /// families on one socket.
    pub fn dual_stack(opts: &TopologyOptions, v6: &Ipv6Options) -> Result<Topology> {
        Topology::build(opts, Some(v6.clone()))
    }

    fn build(opts: &TopologyOptions, v6: Option<Ipv6Options>) -> Result<Topology> {
        anyhow::ensure!((1..=200).contains(&opts.backends), "1..=200 backends");
        remove_stale();
        let pid = std::process::id();
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let id = format!("{NS_PREFIX}{pid}-{n}");
        let pin_dir = PathBuf::from(format!("/sys/fs/bpf/{DIR_PREFIX}{pid}-{n}"));
        let work_dir = std::env::temp_dir().join(format!("{DIR_PREFIX}{pid}-{n}"));
        std::fs::create_dir_all(&work_dir)?;
        // Each namespace is owned as soon as it exists, so an error below still deletes it.
        let client = Netns::create(&format!("{id}-c"))?;
        let balancer = Netns::create(&format!("{id}-lb"))?;
        let mut backends = Vec::new();
        for i in 1..=opts.backends {
            backends.push(BackendHost {
                name: format!("b{i}"),
                ns: Netns::create(&format!("{id}-b{i}"))?,
                addr: backend_addr(i),
                addr6: v6.as_ref().map(|_| backend_addr6(i)),
                balancer_dev: format!("bk{i}"),
            });
        }
        let topo = Topology {
            servers: Servers::default(),
            id,
            client,
            balancer,
            backends,
            pin_dir,
            work_dir,
            ipv6: v6,
        };
        topo.wire(opts)
            .with_context(|| format!("building topology {}", topo.id))?;
        Ok(topo)
    }

    fn wire(&self, opts: &TopologyOptions) -> Result<()> {
        let (c, lb) = (&self.client, &self.balancer);
        lb.sysctl(&[("net.ipv4.ip_forward", "1")])?;
        if self.ipv6.is_some() {
            for ns in self.namespaces() {
                ns.enable_ipv6()?;
            }
            lb.sysctl(&[("net.ipv6.conf.all.forwarding", "1")])?;
        }
        c.ip(&[
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            "cli",
            "netns",
            lb.name(),
        ])?;
        c.ip(&["addr", "add", "10.10.0.2/24", "dev", "eth0"])?;
        lb.ip(&["addr", "add", "10.10.0.1/24", "dev", "cli"])?;
        up(c, "eth0")?;
        up(lb, "cli")?;
        c.ip(&["route", "add", "default", "via", "10.10.0.1"])?;
        for (i, b) in self.backends.iter().enumerate() {
            let n = i + 1;
            b.ns.ip(&[
                "link",
                "add",
                "eth0",
                "type",
                "veth",
                "peer",
                "name",
                &b.balancer_dev,
                "netns",
                lb.name(),
            ])?;
            b.ns.ip(&["addr", "add", &format!("{}/24", b.addr), "dev", "eth0"])?;
            lb.ip(&[
                "addr",
                "add",
                &format!("10.11.{n}.1/24"),
                "dev",
                &b.balancer_dev,
            ])?;
            up(&b.ns, "eth0")?;
            up(lb, &b.balancer_dev)?;
            b.ns.ip(&["route", "add", "default", "via", &format!("10.11.{n}.1")])?;
        }
        // XDP_REDIRECT into a veth needs the receiving peer to run XDP or have GRO on.
        // Transmit checksum offload is turned off on every veth so frames carry complete
        // checksums, as they do from a real NIC (XDP rewrites them incrementally).
        offload(c, "eth0", true)?;
        offload(lb, "cli", false)?;
        for b in &self.backends {
            offload(&b.ns, "eth0", true)?;
            offload(lb, &b.balancer_dev, false)?;
        }
        if self.ipv6.is_some() {
            self.wire_ipv6()?;
        }
        let dsr_vip6 = self.ipv6.as_ref().and_then(|v6| v6.dsr_vip);
        if opts.dsr_vip.is_some() || dsr_vip6.is_some() {
            self.wire_dsr(opts.dsr_vip, dsr_vip6)?;
        }
        // Resolve the balancer's neighbours so bpf_fib_lookup finds them from the start.
        self.warm_neighbours()
    }

    /// Every namespace of the topology.
    fn namespaces(&self) -> impl Iterator<Item = &Netns> {
        [&self.client, &self.balancer]
            .into_iter()
            .chain(self.backends.iter().map(|b| &b.ns))
    }

    /// The IPv6 addresses and routes of a dual-stack topology, beside the IPv4 ones (the
    /// links exist already).
    fn wire_ipv6(&self) -> Result<()> {
        let (c, lb) = (&self.client, &self.balancer);
        addr6(c, CLIENT_ADDR6, "eth0")?;
        addr6(lb, BALANCER_ADDR6, "cli")?;
        let gw = BALANCER_ADDR6.to_string();
        c.ip(&["-6", "route", "add", "default", "via", &gw])?;
        // The VIP route towards the balancer (the default route covers it too; stated so the
        // VIP prefix keeps leading to the balancer whatever else a test adds).
        c.ip(&["-6", "route", "add", VIP6_PREFIX, "via", &gw])?;
        for (i, b) in self.backends.iter().enumerate() {
            let n = i + 1;
            addr6(&b.ns, backend_addr6(n), "eth0")?;
            addr6(lb, backend_gateway6(n), &b.balancer_dev)?;
            b.ns.ip(&[
                "-6",
                "route",
                "add",
                "default",
                "via",
                &backend_gateway6(n).to_string(),
            ])?;
        }
        Ok(())
    }

    /// The direct client <-> backend links for DSR, with the VIP(s) on each backend's `lo`.
    ///
    /// IPv4: the VIP on `lo` as /32, `arp_ignore = 1` (answer ARP only for addresses of the
    /// receiving interface) and `arp_announce = 2` (never use the VIP as ARP source), so the
    /// balancer alone answers ARP for the VIP on the shared link.
    ///
    /// IPv6: the VIP on `lo` as /128 with `nodad` (`ip -6 addr add VIP/128 dev lo nodad`), and
    /// nothing else. Linux answers a Neighbour Solicitation only for an address configured on
    /// the interface it arrived on (`ndisc_recv_ns` looks the target up strictly on that
    /// device; there is no weak-host NDP like IPv4's ARP), so a VIP on `lo` gets no NDP
    /// answer on `eth0` without any sysctl; `proxy_ndp` must stay 0 (its default) and no
    /// `ip -6 neigh add proxy VIP` entry may exist. The backend still accepts packets to the
    /// VIP on any interface (the local route is per host), and answers from the VIP. The
    /// harness test `harness_ipv6_dsr_vip_on_lo_gets_no_ndp_answer` checks this. Nor is
    /// there an IPv6 rp_filter to turn off for the asymmetric return path.
    fn wire_dsr(&self, vip: Option<Ipv4Addr>, vip6: Option<Ipv6Addr>) -> Result<()> {
        let c = &self.client;
        for (i, b) in self.backends.iter().enumerate() {
            let n = i + 1;
            let cdev = format!("dsr{n}");
            c.ip(&[
                "link",
                "add",
                &cdev,
                "type",
                "veth",
                "peer",
                "name",
                "dsr0",
                "netns",
                b.ns.name(),
            ])?;
            c.ip(&["addr", "add", &format!("10.12.{n}.1/24"), "dev", &cdev])?;
            b.ns.ip(&["addr", "add", &format!("10.12.{n}.2/24"), "dev", "dsr0"])?;
            up(c, &cdev)?;
            up(&b.ns, "dsr0")?;
            b.ns.ip(&[
                "route",
                "add",
                &format!("{CLIENT_ADDR}/32"),
                "via",
                &format!("10.12.{n}.1"),
                "dev",
                "dsr0",
            ])?;
            if let Some(vip) = vip {
                b.ns.ip(&["addr", "add", &format!("{vip}/32"), "dev", "lo"])?;
            }
            b.ns.sysctl(&[
                ("net.ipv4.conf.all.arp_ignore", "1"),
                ("net.ipv4.conf.all.arp_announce", "2"),
                ("net.ipv4.conf.all.rp_filter", "0"),
                ("net.ipv4.conf.dsr0.rp_filter", "0"),
                ("net.ipv4.conf.eth0.rp_filter", "0"),
            ])?;
            c.sysctl(&[(&format!("net.ipv4.conf.{cdev}.rp_filter"), "0")])?;
            if self.ipv6.is_some() {
                addr6(c, dsr_link6(n, 1), &cdev)?;
                addr6(&b.ns, dsr_link6(n, 2), "dsr0")?;
                b.ns.ip(&[
                    "-6",
                    "route",
                    "add",
                    &format!("{CLIENT_ADDR6}/128"),
                    "via",
                    &dsr_link6(n, 1).to_string(),
                    "dev",
                    "dsr0",
                ])?;
            }
            if let Some(vip6) = vip6 {
                b.ns.ip(&[
                    "-6",
                    "addr",
                    "add",
                    &format!("{vip6}/128"),
                    "dev",
                    "lo",
                    "nodad",
                ])?;
            }
        }
        Ok(())
    }

    fn warm_neighbours(&self) -> Result<()> {
        let mut targets = vec![CLIENT_ADDR.to_string()];
        targets.extend(self.backends.iter().map(|b| b.addr.to_string()));
        if self.ipv6.is_some() {
            targets.push(CLIENT_ADDR6.to_string());
            targets.extend(
                self.backends
                    .iter()
                    .filter_map(|b| b.addr6.map(|a| a.to_string())),
            );
        }
        for t in &targets {
            self.balancer
                .exec("ping", &["-c", "1", "-W", "1", "-q", t])
                .with_context(|| format!("balancer cannot reach {t}"))?;
        }
        Ok(())
    }

    /// The balancer interfaces XDP is attached to: the client side and every backend side.
    pub fn interfaces(&self) -> Vec<String> {
        let mut all = vec!["cli".to_owned()];
        all.extend(self.backends.iter().map(|b| b.balancer_dev.clone()));
        all
    }

    /// The backend host called `name`.
    pub fn backend(&self, name: &str) -> Option<&BackendHost> {
        self.backends.iter().find(|b| b.name == name)
    }

    /// Starts a TCP server on `port` in every backend, named after the backend: on
    /// `0.0.0.0`, or on `[::]` (both families) in a dual-stack topology.
    pub fn tcp_servers(&self, port: u16) -> Result<()> {
        for b in &self.backends {
            self.servers
                .spawn_tcp_at(&b.ns, &b.name, self.any_addr(port))?;
        }
        Ok(())
    }

    /// `0.0.0.0:port`, or `[::]:port` (both families) in a dual-stack topology.
    pub fn any_addr(&self, port: u16) -> SocketAddr {
        let any: IpAddr = if self.ipv6.is_some() {
            Ipv6Addr::UNSPECIFIED.into()
        } else {
            Ipv4Addr::UNSPECIFIED.into()
        };
        SocketAddr::new(any, port)
    }

    /// Makes backend `name` silent (`up = false`: its `eth0` goes down, so nothing it is
    /// sent gets an answer, not even a refusal) or brings it back (`up = true`: link up and
    /// its default route restored, which the kernel deleted with the link; in a dual-stack
    /// topology its IPv6 address and default route too).
    pub fn set_backend_link(&self, name: &str, up: bool) -> Result<()> {
        let b = self
            .backend(name)
            .with_context(|| format!("no backend {name}"))?;
        if !up {
            return b.ns.ip(&["link", "set", "eth0", "down"]).map(drop);
        }
        b.ns.ip(&["link", "set", "eth0", "up"])?;
        let gateway = b.addr.octets();
        let gateway = Ipv4Addr::new(gateway[0], gateway[1], gateway[2], 1).to_string();
        b.ns.ip(&["route", "replace", "default", "via", &gateway])?;
        if let Some(a6) = b.addr6 {
            let mut gateway6 = a6.segments();
            gateway6[7] = 1;
            // Kept across the down (keep_addr_on_down); replaced in case it was not.
            b.ns.ip(&[
                "-6",
                "addr",
                "replace",
                &format!("{a6}/64"),
                "dev",
                "eth0",
                "nodad",
            ])?;
            b.ns.ip(&[
                "-6",
                "route",
                "replace",
                "default",
                "via",
                &Ipv6Addr::from(gateway6).to_string(),
            ])?;
        }
        Ok(())
    }

    /// Starts a UDP server on `port` in every backend, named after the backend: on
    /// `0.0.0.0`, or on `[::]` (both families) in a dual-stack topology.
    pub fn udp_servers(&self, port: u16) -> Result<()> {
        for b in &self.backends {
            self.servers
                .spawn_udp_at(&b.ns, &b.name, self.any_addr(port))?;
        }
        Ok(())
    }

    /// Writes `toml` as `<work_dir>/<file>` and returns its path.
    pub fn write_config(&self, file: &str, toml: &str) -> Result<PathBuf> {
        let path = self.work_dir.join(file);
        std::fs::write(&path, toml).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    /// Runs `lb args...` in the balancer namespace.
    pub fn lb(&self, args: &[&str]) -> Result<String> {
        lbctl::lb(&self.balancer.path(), args)
    }

    /// `lb load` of `toml` on every balancer interface with this topology's pin dir.
    /// Running it again with a changed config applies the change.
    pub fn lb_load(&self, toml: &str) -> Result<()> {
        lbctl::ensure_bpffs()?;
        let config = self.write_config("load.toml", toml)?;
        let args = self.attach_args("load", &config);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.lb(&refs).map(drop)
    }

    /// Starts `lb run` of `toml` in the background (log in `<work_dir>/run.log`).
    pub fn lb_run(&self, toml: &str) -> Result<Daemon> {
        lbctl::ensure_bpffs()?;
        let config = self.write_config("run.toml", toml)?;
        let args = self.attach_args("run", &config);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        Daemon::start(&self.balancer.path(), &refs, &self.work_dir.join("run.log"))
    }

    /// `lb status` as text (what an operator reads).
    pub fn lb_status_text(&self) -> Result<String> {
        let pin = self.pin_dir.display().to_string();
        self.lb(&["status", "--pin-dir", &pin])
    }

    /// `lb status --json` parsed.
    pub fn lb_status(&self) -> Result<serde_json::Value> {
        let pin = self.pin_dir.display().to_string();
        let out = self.lb(&["status", "--pin-dir", &pin, "--json"])?;
        serde_json::from_str(&out).with_context(|| format!("lb status --json printed {out}"))
    }

    fn attach_args(&self, verb: &str, config: &std::path::Path) -> Vec<String> {
        let mut args = vec![
            verb.to_owned(),
            "--config".to_owned(),
            config.display().to_string(),
        ];
        for dev in self.interfaces() {
            args.push("--iface".to_owned());
            args.push(dev);
        }
        args.push("--pin-dir".to_owned());
        args.push(self.pin_dir.display().to_string());
        args
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        self.servers.stop();
        // Removing the pins releases the pinned links (detaching XDP) and maps.
        if self.pin_dir.exists()
            && let Err(e) = std::fs::remove_dir_all(&self.pin_dir)
        {
            eprintln!("harness: cannot remove {}: {e}", self.pin_dir.display());
        }
        let _ = std::fs::remove_dir_all(&self.work_dir);
        // The writer's and the daemon's files about those pins under /run/lb.
        lb::network::forget_state(&self.pin_dir);
        let _ = std::fs::remove_file(lb::daemon::report_path(&self.pin_dir));
        // The namespaces (and every veth in them) are deleted by Netns::drop, after this.
    }
}

/// Adds an IPv6 address with its /64 on `dev`, usable at once (`nodad`).
fn addr6(ns: &Netns, addr: Ipv6Addr, dev: &str) -> Result<()> {
    ns.ip(&[
        "-6",
        "addr",
        "add",
        &format!("{addr}/64"),
        "dev",
        dev,
        "nodad",
    ])
    .map(drop)
}

fn up(ns: &Netns, dev: &str) -> Result<()> {
    ns.ip(&["link", "set", dev, "up"]).map(drop)
}

/// Turns TX offload off on `dev` and, with `gro`, GRO on: the settings every veth of the
/// harnesses gets (the single-balancer topology and the scale-out one).
pub(super) fn offload(ns: &Netns, dev: &str, gro: bool) -> Result<()> {
    ns.exec("ethtool", &["-K", dev, "tx", "off"])?;
    if gro {
        ns.exec("ethtool", &["-K", dev, "gro", "on"])?;
    }
    Ok(())
}

/// Deletes namespaces, pin directories and work directories left by harness processes
/// that no longer exist (e.g. a test run killed with SIGKILL). Only names with this
/// harness's prefixes and the pid of a dead process are touched.
fn remove_stale() {
    remove_stale_of(NS_PREFIX, DIR_PREFIX);
}

/// Deletes the namespaces named `<ns_prefix><pid>-...` and the directories (bpffs pins, work
/// directories) named `<dir_prefix><pid>-...` whose pid is no longer a live process.
pub(super) fn remove_stale_of(ns_prefix: &str, dir_prefix: &str) {
    let dead =
        |pid: &str| pid.parse::<u32>().is_ok() && !PathBuf::from(format!("/proc/{pid}")).exists();
    if let Ok(entries) = std::fs::read_dir("/var/run/netns") {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(rest) = name.strip_prefix(ns_prefix)
                && let Some((pid, _)) = rest.split_once('-')
                && dead(pid)
            {
                cmd::quiet("ip", &["netns", "del", &name]);
            }
        }
    }
    for dir in [PathBuf::from("/sys/fs/bpf"), std::env::temp_dir()] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(rest) = name.strip_prefix(dir_prefix)
                && let Some((pid, _)) = rest.split_once('-')
                && dead(pid)
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}
