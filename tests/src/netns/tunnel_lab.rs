//! A routed, dual-stack lab for tunnel forwarding (`forwarding = "ipip"`): the backends sit
//! behind a router, on subnets of their own, and receive the VIPs' packets inside an outer
//! header from the balancer (IPIP for IPv4, IP6IP6 for IPv6), which their agent (`lb decap`)
//! removes; they answer the client straight through the router.
//!
//! ```text
//!  client ns (eth0 10.60.0.2/24 fd00:60::2/64, default via the router)
//!     |  eth0 <-> cli
//!  router ns (cli 10.60.0.1 fd00:60::1; lb 10.60.1.1 fd00:60:1::1; bN 10.60.1N.1 fd00:60:1N::1;
//!             forwarding v4 and v6, rp_filter 0; the VIP prefixes via the balancer)
//!     |  lb <-> eth0                          |  bN <-> eth0
//!  balancer ns (eth0 10.60.1.2/24            backend N ns (eth0 10.60.1N.2/24 fd00:60:1N::2/64,
//!     fd00:60:1::2/64, default via the           default via the router; the VIPs on lo;
//!     router; `lb run` with XDP on eth0)         arp_ignore 1, arp_announce 2; `lb decap`)
//! ```
//!
//! VIPs live in 10.60.99.0/24 and fd00:60:99::/64 ([`TCP_VIP`], [`UDP_VIP`], [`PING_VIP`]);
//! outer sources come from [`TUNNEL_SOURCE_V4`] and [`TUNNEL_SOURCE_V6`], which nothing routes
//! back (they are only sources). The balancer has one interface, so its program sends the
//! encapsulated packets back out of the interface they came in on (XDP_TX). It is attached
//! in generic mode (`attach_mode = "skb"`): on a veth, a native XDP_TX frame waits in the
//! peer's queue until the peer's next frame when the peer runs no XDP program
//! (docs/operations.md, "Namespace lab"), which a router's end does not. The balancer holds
//! blackhole routes for the VIP prefixes, so what its program leaves to the kernel for a VIP
//! (an ICMP error about a late reply, a fragment) is dropped instead of bouncing between it
//! and the router; the health checks addressed to the VIPs (S-TN4) are routed to the router
//! by a rule on their socket marks.
//!
//! Every veth has transmit checksum offload off (frames carry complete checksums, as from a
//! real NIC, and leave in MTU-sized segments). Dropping the lab stops the servers and the
//! daemon, detaches the agents, removes every pin and file it made and deletes the
//! namespaces, also on panic. Needs root, the `lb` binary and both XDP objects (`lb-xdp`,
//! `lb-decap`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::client::tcp_ask_at;
use super::cmd;
use super::configs::{log_tail, validated};
use super::family::Family;
use super::lbctl::{self, Daemon};
use super::ns::Netns;
use super::servers::Servers;
use super::status::wait_until;
use super::topology::{offload, remove_stale_of};

/// A VIP with an address of each family.
#[derive(Clone, Copy, Debug)]
pub struct DualVip {
    pub v4: Ipv4Addr,
    pub v6: Ipv6Addr,
}

impl DualVip {
    /// The VIP's address in `family`.
    pub fn addr(self, family: Family) -> IpAddr {
        match family {
            Family::V4 => self.v4.into(),
            Family::V6 => self.v6.into(),
        }
    }
}

/// The tcp-l4 VIP, port [`TCP_PORT`].
pub const TCP_VIP: DualVip = DualVip {
    v4: Ipv4Addr::new(10, 60, 99, 10),
    v6: Ipv6Addr::new(0xfd00, 0x60, 0x99, 0, 0, 0, 0, 0x10),
};
/// The udp-l4 VIP, port [`UDP_PORT`].
pub const UDP_VIP: DualVip = DualVip {
    v4: Ipv4Addr::new(10, 60, 99, 11),
    v6: Ipv6Addr::new(0xfd00, 0x60, 0x99, 0, 0, 0, 0, 0x11),
};
/// The any-l3 VIP, which `ping` reaches (ICMP echo is tunnelled like any protocol).
pub const PING_VIP: DualVip = DualVip {
    v4: Ipv4Addr::new(10, 60, 99, 12),
    v6: Ipv6Addr::new(0xfd00, 0x60, 0x99, 0, 0, 0, 0, 0x12),
};
/// The tcp-l4 VIP forwarded by GUE, port [`TCP_PORT`].
pub const GUE_VIP: DualVip = DualVip {
    v4: Ipv4Addr::new(10, 60, 99, 13),
    v6: Ipv6Addr::new(0xfd00, 0x60, 0x99, 0, 0, 0, 0, 0x13),
};
/// Port of the tcp-l4 VIPs and of the backends' TCP servers.
pub const TCP_PORT: u16 = 8000;
/// Port of the udp-l4 VIP and of the backends' UDP servers.
pub const UDP_PORT: u16 = 5300;
/// The prefix the balancer takes outer IPv4 sources from.
pub const TUNNEL_SOURCE_V4: &str = "10.60.200.0/24";
/// The prefix the balancer takes outer IPv6 sources from.
pub const TUNNEL_SOURCE_V6: &str = "fd00:60:200::/64";
/// The client's addresses.
pub const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 2);
pub const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x60, 0, 0, 0, 0, 0, 2);
/// The router's interface towards the client, the balancer's only interface, and every
/// backend's interface.
pub const ROUTER_CLIENT_DEV: &str = "cli";
pub const BALANCER_DEV: &str = "eth0";
pub const BACKEND_DEV: &str = "eth0";
/// How many backends the lab has.
pub const BACKENDS: usize = 2;
/// The TCP check profile of the checked services: period, timeout (seconds), failures to
/// Error, successes back to OK.
pub const CHECK_PERIOD: u64 = 1;
pub const CHECK_TIMEOUT: u64 = 1;
pub const CHECK_FAILURES: u64 = 2;
pub const CHECK_SUCCESSES: u64 = 2;

/// The balancer's routing table for the marked health checks (the main one blackholes the
/// VIPs).
const HEALTH_TABLE: &str = "4242";

/// The name of backend `b`'s checked service on the TCP port.
pub fn checked_name(b: &TunnelBackend) -> String {
    format!("{}-tcp", b.name)
}

const VIP_PREFIX_V4: &str = "10.60.99.0/24";
const VIP_PREFIX_V6: &str = "fd00:60:99::/64";
/// The router's interface towards the balancer.
const ROUTER_BALANCER_DEV: &str = "lb";
/// Prefix of the lab's namespace names (`lbtn<pid>-<n>-<role>`).
const NS_PREFIX: &str = "lbtn";
/// Prefix of its pin directory under /sys/fs/bpf and its work directory under the temp dir.
const DIR_PREFIX: &str = "lbtest-tn-";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The address of the router (`host` 1) or of what it faces (`host` 2) on link `net`: 0 the
/// client, 1 the balancer, 10 + N backend N.
fn link_v4(net: u8, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 60, net, host)
}

/// The same in IPv6: `fd00:60:NET::HOST`, NET written as the IPv4 digits (backend 1: `11`).
fn link_v6(net: u8, host: u16) -> Ipv6Addr {
    let digits = u16::from_str_radix(&net.to_string(), 16).expect("decimal digits");
    Ipv6Addr::new(0xfd00, 0x60, digits, 0, 0, 0, 0, host)
}

/// One backend host.
#[derive(Debug)]
pub struct TunnelBackend {
    /// `b1`, `b2`: also its Backend Service name and what its servers answer.
    pub name: String,
    pub ns: Netns,
    pub addr4: Ipv4Addr,
    pub addr6: Ipv6Addr,
    /// The router's interface towards it (`bN`).
    pub router_dev: String,
    /// Where its agent pins (`lb decap --pin-dir`).
    pub agent_pins: PathBuf,
}

/// The whole lab; see the module doc.
pub struct TunnelLab {
    /// The backends' servers; stopped first on drop.
    pub servers: Servers,
    pub id: String,
    pub client: Netns,
    pub router: Netns,
    pub balancer: Netns,
    pub backends: Vec<TunnelBackend>,
    /// The balancer's pin directory (beside the agents' ones, under one directory).
    pub pin_dir: PathBuf,
    /// Configuration and daemon log.
    pub work_dir: PathBuf,
    base_pins: PathBuf,
    config: PathBuf,
    daemon: Option<Daemon>,
}

impl TunnelLab {
    /// Builds the namespaces and links, attaches the backends' agents, starts their TCP
    /// server on `[::]:TCP_PORT` and UDP servers on each UDP VIP (so that answers leave from
    /// the VIP), and starts `lb run` with [`TunnelLab::config`]; returns once the TCP VIP
    /// answers over both families. A few seconds.
    pub fn start() -> Result<TunnelLab> {
        remove_stale_of(NS_PREFIX, DIR_PREFIX);
        lbctl::ensure_bpffs()?;
        let pid = std::process::id();
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let id = format!("{NS_PREFIX}{pid}-{n}");
        let base_pins = PathBuf::from(format!("/sys/fs/bpf/{DIR_PREFIX}{pid}-{n}"));
        let work_dir = std::env::temp_dir().join(format!("{DIR_PREFIX}{pid}-{n}"));
        std::fs::create_dir_all(&work_dir)?;
        // Each namespace is owned as soon as it exists, so an error below still deletes it.
        let client = Netns::create(&format!("{id}-c"))?;
        let router = Netns::create(&format!("{id}-r"))?;
        let balancer = Netns::create(&format!("{id}-lb"))?;
        let mut backends = Vec::new();
        for i in 1..=BACKENDS {
            let net = 10 + i as u8;
            backends.push(TunnelBackend {
                name: format!("b{i}"),
                ns: Netns::create(&format!("{id}-b{i}"))?,
                addr4: link_v4(net, 2),
                addr6: link_v6(net, 2),
                router_dev: format!("b{i}"),
                agent_pins: base_pins.join(format!("b{i}")),
            });
        }
        let mut lab = TunnelLab {
            servers: Servers::default(),
            id,
            client,
            router,
            balancer,
            backends,
            pin_dir: base_pins.join("lb"),
            config: work_dir.join("lb.toml"),
            work_dir,
            base_pins,
            daemon: None,
        };
        lab.wire()
            .with_context(|| format!("building the tunnel lab {}", lab.id))?;
        lab.attach_agents()?;
        lab.spawn_servers()?;
        lab.start_balancer()?;
        Ok(lab)
    }

    /// Every namespace of the lab.
    fn namespaces(&self) -> impl Iterator<Item = &Netns> {
        [&self.client, &self.router, &self.balancer]
            .into_iter()
            .chain(self.backends.iter().map(|b| &b.ns))
    }

    fn wire(&self) -> Result<()> {
        for ns in self.namespaces() {
            ns.enable_ipv6()?;
        }
        let (c, r, lb) = (&self.client, &self.router, &self.balancer);
        r.sysctl(&[
            ("net.ipv4.ip_forward", "1"),
            ("net.ipv6.conf.all.forwarding", "1"),
        ])?;
        // bpf_fib_lookup answers only for an ingress device that forwards. Redirects off:
        // what the kernel forwards here goes back out of the interface it came in on.
        lb.sysctl(&[
            ("net.ipv4.ip_forward", "1"),
            ("net.ipv6.conf.all.forwarding", "1"),
            ("net.ipv4.conf.all.send_redirects", "0"),
            ("net.ipv4.conf.default.send_redirects", "0"),
        ])?;
        link(c, "eth0", r, ROUTER_CLIENT_DEV, 0)?;
        link(lb, BALANCER_DEV, r, ROUTER_BALANCER_DEV, 1)?;
        for (i, b) in self.backends.iter().enumerate() {
            link(&b.ns, BACKEND_DEV, r, &b.router_dev, 11 + i as u8)?;
        }
        for (ns, net) in [(c, 0), (lb, 1)] {
            default_routes(ns, net)?;
        }
        let health_marks = format!(
            "{:#x}/{:#x}",
            lb_common::HEALTH_MARK_BASE,
            lb_common::HEALTH_MARK_MASK
        );
        for (vip_prefix, flag, via, router) in [
            (
                VIP_PREFIX_V4,
                "-4",
                link_v4(1, 2).to_string(),
                link_v4(1, 1).to_string(),
            ),
            (
                VIP_PREFIX_V6,
                "-6",
                link_v6(1, 2).to_string(),
                link_v6(1, 1).to_string(),
            ),
        ] {
            r.ip(&[flag, "route", "add", vip_prefix, "via", &via])?;
            lb.ip(&[flag, "route", "add", "blackhole", vip_prefix])?;
            // The health checks of tunnelled servers are addressed to the VIPs (S-TN4):
            // their marked sockets take a table of their own, out to the router.
            lb.ip(&[
                flag,
                "rule",
                "add",
                "fwmark",
                &health_marks,
                "lookup",
                HEALTH_TABLE,
                "priority",
                "100",
            ])?;
            lb.ip(&[
                flag,
                "route",
                "add",
                vip_prefix,
                "via",
                &router,
                "table",
                HEALTH_TABLE,
            ])?;
        }
        for (i, b) in self.backends.iter().enumerate() {
            default_routes(&b.ns, 11 + i as u8)?;
            for vip in [TCP_VIP, UDP_VIP, PING_VIP, GUE_VIP] {
                b.ns.ip(&["addr", "add", &format!("{}/32", vip.v4), "dev", "lo"])?;
                b.ns.ip(&[
                    "-6",
                    "addr",
                    "add",
                    &format!("{}/128", vip.v6),
                    "dev",
                    "lo",
                    "nodad",
                ])?;
            }
            b.ns.sysctl(&[
                ("net.ipv4.conf.all.arp_ignore", "1"),
                ("net.ipv4.conf.all.arp_announce", "2"),
            ])?;
        }
        // Neighbours resolved before the balancer's bpf_fib_lookup needs them: the balancer's
        // next hop (the router), and the router's neighbours on every other link.
        for target in [link_v4(1, 1).to_string(), link_v6(1, 1).to_string()] {
            reach(lb, &target)
                .with_context(|| format!("the balancer cannot reach the router at {target}"))?;
        }
        for b in &self.backends {
            for target in [b.addr4.to_string(), b.addr6.to_string()] {
                reach(c, &target)
                    .with_context(|| format!("the client cannot reach {} at {target}", b.name))?;
            }
        }
        Ok(())
    }

    /// `lb decap` on every backend's interface, taking tunnel packets only from the
    /// balancer's source prefixes.
    fn attach_agents(&self) -> Result<()> {
        for b in &self.backends {
            self.attach_agent(b)
                .with_context(|| format!("attaching the agent on {}", b.name))?;
        }
        Ok(())
    }

    /// Runs `lb decap args... --pin-dir <its pins>` in backend `b`'s namespace.
    fn agent(&self, b: &TunnelBackend, args: &[&str]) -> Result<String> {
        let pins = b.agent_pins.display().to_string();
        let mut all = vec!["decap"];
        all.extend_from_slice(args);
        all.extend(["--pin-dir", pins.as_str()]);
        lbctl::lb(&b.ns.path(), &all)
    }

    /// The counters of backend `b`'s agent (`lb decap --status --json`): `decapsulated`,
    /// `foreign_source`, ... by name.
    pub fn agent_counters(&self, b: &TunnelBackend) -> Result<Value> {
        let out = self.agent(b, &["--status", "--iface", BACKEND_DEV, "--json"])?;
        let all: Value =
            serde_json::from_str(&out).with_context(|| format!("lb decap --status: {out}"))?;
        let counters = all[0]["counters"].clone();
        if !counters.is_object() {
            bail!("no counters in lb decap --status of {}: {out}", b.name);
        }
        Ok(counters)
    }

    fn spawn_servers(&self) -> Result<()> {
        for b in &self.backends {
            let any = SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), TCP_PORT);
            self.servers.spawn_tcp_at(&b.ns, &b.name, any)?;
            // Bound to the VIP itself: an answer from a wildcard socket would leave from the
            // backend's own address, which the client's connected socket ignores.
            for family in [Family::V4, Family::V6] {
                let vip = SocketAddr::new(UDP_VIP.addr(family), UDP_PORT);
                self.servers.spawn_udp_at(&b.ns, &b.name, vip)?;
            }
        }
        Ok(())
    }

    /// The balancer's configuration: the backends (both families; port 0: tunnels keep the
    /// VIP's port), the same servers on the TCP port with a TCP health check (`NAME-tcp`,
    /// checked through the tunnel, S-TN4), and the three VIPs, each dual-stack with
    /// `forwarding = "ipip"`, the TCP one over the checked services.
    pub fn config(&self) -> String {
        let mut cfg = format!(
            "[xdp]\nattach_mode = \"skb\"\ntunnel_source_v4 = \"{TUNNEL_SOURCE_V4}\"\n\
             tunnel_source_v6 = \"{TUNNEL_SOURCE_V6}\"\n\n\
             [[health_check]]\nname = \"tcp\"\ntype = \"tcp\"\nperiod = {CHECK_PERIOD}\n\
             timeout = {CHECK_TIMEOUT}\nrequired_failures = {CHECK_FAILURES}\n\
             required_successes = {CHECK_SUCCESSES}\n\n"
        );
        for b in &self.backends {
            cfg += &format!(
                "[[backend_service]]\nname = \"{}\"\naddress = \"{}\"\naddress6 = \"{}\"\n\
                 port = 0\n\n\
                 [[backend_service]]\nname = \"{}\"\naddress = \"{}\"\naddress6 = \"{}\"\n\
                 port = {TCP_PORT}\nhealth_check = \"tcp\"\n\n",
                b.name,
                b.addr4,
                b.addr6,
                checked_name(b),
                b.addr4,
                b.addr6
            );
        }
        let list = |name: &dyn Fn(&TunnelBackend) -> String| {
            let names: Vec<String> = self
                .backends
                .iter()
                .map(|b| format!("\"{}\"", name(b)))
                .collect();
            names.join(", ")
        };
        let (plain, checked) = (list(&|b| b.name.clone()), list(&checked_name));
        for (name, kind, vip, port, backends) in [
            (
                "tcp",
                "tcp-l4",
                TCP_VIP,
                format!("port = {TCP_PORT}\n"),
                &checked,
            ),
            (
                "udp",
                "udp-l4",
                UDP_VIP,
                format!("port = {UDP_PORT}\n"),
                &plain,
            ),
            ("ping", "any-l3", PING_VIP, String::new(), &plain),
            (
                "gue",
                "tcp-l4",
                GUE_VIP,
                format!("port = {TCP_PORT}\n"),
                &plain,
            ),
        ] {
            let forwarding = if name == "gue" { "gue" } else { "ipip" };
            cfg += &format!(
                "[[vservice]]\nname = \"{name}\"\nkind = \"{kind}\"\naddress = \"{}\"\n\
                 address6 = \"{}\"\n{port}forwarding = \"{forwarding}\"\n\
                 backends = [{backends}]\n\n",
                vip.v4, vip.v6,
            );
        }
        cfg
    }

    /// Detaches backend `b`'s agent (`lb decap --detach`).
    pub fn detach_agent(&self, b: &TunnelBackend) -> Result<()> {
        self.agent(b, &["--detach", "--iface", BACKEND_DEV])
            .map(drop)
    }

    /// Attaches backend `b`'s agent again, as at the start.
    pub fn attach_agent(&self, b: &TunnelBackend) -> Result<()> {
        self.agent(
            b,
            &[
                "--iface",
                BACKEND_DEV,
                "--source",
                TUNNEL_SOURCE_V4,
                "--source",
                TUNNEL_SOURCE_V6,
                "--gue-port",
                &lb_common::GUE_PORT.to_string(),
            ],
        )
        .map(drop)
    }

    /// Starts `lb run` on the balancer's interface and waits until the TCP VIP answers over
    /// both families.
    fn start_balancer(&mut self) -> Result<()> {
        let cfg = self.config();
        validated(&cfg);
        std::fs::write(&self.config, &cfg)
            .with_context(|| format!("writing {}", self.config.display()))?;
        let (config, pins) = (
            self.config.display().to_string(),
            self.pin_dir.display().to_string(),
        );
        let args = [
            "run",
            "--config",
            &config,
            "--iface",
            BALANCER_DEV,
            "--pin-dir",
            &pins,
        ];
        let log = self.work_dir.join("lb.log");
        // The data path's tunnel events at DEBUG (S-TN2's "too big" among them), which the
        // tests read in the log.
        let filter = Some("info,hickory_server=warn,hickory_proto=warn,lb_xdp=debug");
        let mut daemon = Daemon::start_filtered(&self.balancer.path(), &args, &log, filter)?;
        let client = &self.client;
        let ready = wait_until(Duration::from_secs(20), || {
            daemon.is_running()
                && [Family::V4, Family::V6].into_iter().all(|family| {
                    let addr = SocketAddr::new(TCP_VIP.addr(family), TCP_PORT);
                    matches!(client.run(|| tcp_ask_at(addr)), Ok(Ok(_)))
                })
        });
        let tail = log_tail(&daemon);
        self.daemon = Some(daemon);
        if !ready {
            bail!("lb run never balanced the tunnelled TCP VIP; log:\n{tail}");
        }
        Ok(())
    }

    /// What the balancer's `lb run` has logged so far.
    pub fn daemon_log(&self) -> String {
        self.daemon.as_ref().map(Daemon::log).unwrap_or_default()
    }

    /// `lb status --json` of the balancer.
    pub fn lb_status(&self) -> Result<Value> {
        let pins = self.pin_dir.display().to_string();
        let out = lbctl::lb(
            &self.balancer.path(),
            &["status", "--pin-dir", &pins, "--json"],
        )?;
        serde_json::from_str(&out).with_context(|| format!("lb status --json printed {out}"))
    }

    /// The path MTU the client's kernel holds for `dst` (`ip route get`), if it learnt one.
    pub fn client_path_mtu(&self, dst: IpAddr) -> Result<Option<u32>> {
        let out = self.client.ip(&["route", "get", &dst.to_string()])?;
        Ok(named_mtu(&out))
    }
}

impl Drop for TunnelLab {
    fn drop(&mut self) {
        self.servers.stop();
        // A daemon that does not exit is killed by its own drop.
        if let Some(mut daemon) = self.daemon.take()
            && daemon.signal(libc::SIGTERM).is_ok()
        {
            let _ = daemon.wait_exit(Duration::from_secs(10));
        }
        for b in &self.backends {
            if b.agent_pins.exists()
                && self
                    .agent(b, &["--detach", "--iface", BACKEND_DEV])
                    .is_err()
            {
                eprintln!("harness: could not detach the agent of {}", b.name);
            }
        }
        // Removing the pins releases the balancer's link (detaching XDP) and its maps.
        if self.base_pins.exists()
            && let Err(e) = std::fs::remove_dir_all(&self.base_pins)
        {
            eprintln!("harness: cannot remove {}: {e}", self.base_pins.display());
        }
        lb::network::forget_state(&self.pin_dir);
        let _ = std::fs::remove_file(lb::daemon::report_path(&self.pin_dir));
        let states = lb::daemon::states_path(&self.config);
        // The daemon's claim on its configuration, named as its saved states are.
        if let Some(run_name) = states.to_str().and_then(|s| s.strip_suffix(".states.json")) {
            let _ = std::fs::remove_file(format!("{run_name}.owner"));
        }
        let _ = std::fs::remove_file(states);
        let _ = std::fs::remove_file(lb::daemon::drained_path(&self.config));
        let _ = std::fs::remove_dir_all(&self.work_dir);
        // The namespaces (and every veth in them) are deleted by Netns::drop, after this.
    }
}

/// A veth pair from `a`'s `a_dev` (address `.2` of link `net`) to the router's `r_dev`
/// (address `.1`), both families, up, transmit checksum offload off at both ends.
fn link(a: &Netns, a_dev: &str, r: &Netns, r_dev: &str, net: u8) -> Result<()> {
    a.ip(&[
        "link",
        "add",
        a_dev,
        "type",
        "veth",
        "peer",
        "name",
        r_dev,
        "netns",
        r.name(),
    ])?;
    for (ns, dev, host) in [(a, a_dev, 2), (r, r_dev, 1)] {
        ns.ip(&[
            "addr",
            "add",
            &format!("{}/24", link_v4(net, host)),
            "dev",
            dev,
        ])?;
        ns.ip(&[
            "-6",
            "addr",
            "add",
            &format!("{}/64", link_v6(net, host.into())),
            "dev",
            dev,
            "nodad",
        ])?;
        ns.ip(&["link", "set", dev, "up"])?;
        offload(ns, dev, false)?;
    }
    Ok(())
}

/// Pings `target` from `ns` until one answer, at most 5 times: a first IPv6 neighbour
/// solicitation sent just after the links came up may go unanswered.
fn reach(ns: &Netns, target: &str) -> Result<()> {
    let mut last = None;
    for _ in 0..5 {
        match ns.exec("ping", &["-c", "1", "-W", "1", "-q", target]) {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no ping sent")))
}

/// Default routes of both families via the router on link `net`.
fn default_routes(ns: &Netns, net: u8) -> Result<()> {
    ns.ip(&[
        "route",
        "add",
        "default",
        "via",
        &link_v4(net, 1).to_string(),
    ])?;
    ns.ip(&[
        "-6",
        "route",
        "add",
        "default",
        "via",
        &link_v6(net, 1).to_string(),
    ])
    .map(drop)
}

/// Runs `program args...` in `ns` within [`cmd::SHORT`] and returns its exit success and
/// everything it printed (stdout then stderr), whatever its exit status: `ping` reports an
/// ICMP error with a failing status.
pub fn exec_any(ns: &Netns, program: &str, args: &[&str]) -> Result<(bool, String)> {
    let mut c = std::process::Command::new("ip");
    c.args(["netns", "exec", ns.name(), program]).args(args);
    let out = cmd::output_within(c, cmd::SHORT)?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.success(), text))
}

/// The MTU named last in `text`: `mtu = 1480`, `mtu=1460`, `mtu 1480` (ping's messages and
/// `ip route get`'s cache line).
pub fn named_mtu(text: &str) -> Option<u32> {
    let at = text.rfind("mtu")?;
    let rest = text[at + 3..].trim_start_matches([' ', '=', ':']);
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}
