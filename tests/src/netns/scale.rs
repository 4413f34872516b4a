//! The scale-out topology: a client behind a router that spreads flows over three
//! balancers by ECMP, the balancers announcing their VIPs over BGP (BIRD 2 with BFD) from
//! the routes `lb run` keeps (S-AN1..3, S-CL4). Where the backends live follows the
//! forwarding mode ([`ScaleForwarding`]): on one segment shared by all balancers in DSR mode,
//! or on subnets of their own behind the router with tunnel forwarding.
//!
//! ```text
//!  client ns (eth0 10.210.0.2/30, default via 10.210.0.1)
//!     |
//!  router ns (c 10.210.0.1/30; lN 10.210.N.1/30; seg 10.210.20.1/24; AS 65000;
//!             BIRD: merge paths, BFD; fib_multipath_hash_policy=1)
//!     |  lN <-> wan0                                   (ipip) |  bM <-> eth0
//!  balancer N ns (wan0 10.210.N.2/30, AS 6500N;       backend M ns (eth0 10.210.(48+M).2/24,
//!                 seg0 10.210.20.1N/24; lb run + BIRD)    default via the router; VIPs on lo,
//!     |  seg0 <-> pN (bridge port)                        ARP off; `lb decap` on eth0)
//!  segment ns (bridge br0 10.210.20.250/24: pN, pr, pbM; etcd on :2379 when a test
//!              shares the configuration through it)
//!     |  pbM <-> eth0                                  (dsr)
//!  backend M ns (eth0 10.210.20.10M/24, default via 10.210.20.1; VIPs on lo, ARP off)
//! ```
//! In DSR mode the backends answer the client directly through the router. With tunnel
//! forwarding the balancers reach the backends' subnets ([`ROUTED_BACKENDS`]) through the
//! router's address on the segment: the XDP program sends each VIP packet inside an outer
//! IPv4 header (from [`SCALE_TUNNEL_SOURCE_V4`]) into `seg0`, the router forwards it to the
//! backend, whose agent removes the outer header, and the backend answers the client
//! directly through the router. Every balancer runs `lb run` with its own copy of the same
//! configuration and its own pin directory.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::bird::Bird;
use super::etcd::NsEtcd;
use super::lbctl::{self, Daemon};
use super::ns::Netns;
use super::servers::Servers;
use super::topology::{offload, remove_stale_of};

/// The client's address.
pub const SCALE_CLIENT: Ipv4Addr = Ipv4Addr::new(10, 210, 0, 2);
/// The routing table the balancers keep their VIP routes in.
pub const VIP_TABLE: u32 = 100;
/// The segment's own address on its bridge, where etcd listens when a test starts it.
pub const SEGMENT_ETCD_ADDR: Ipv4Addr = Ipv4Addr::new(10, 210, 20, 250);
/// The router's AS.
const ROUTER_AS: u32 = 65000;
/// The subnets of the backends behind the router with tunnel forwarding: backend `m` on
/// `10.210.(48+m).0/24`.
pub const ROUTED_BACKENDS: &str = "10.210.48.0/20";
/// The prefix the balancers take outer IPv4 sources from with tunnel forwarding
/// (`[xdp] tunnel_source_v4`); the backends' agents take tunnel packets only from it.
pub const SCALE_TUNNEL_SOURCE_V4: &str = "10.210.200.0/24";
/// The router's address on the segment: the balancers' next hop towards routed backends.
const ROUTER_SEGMENT_ADDR: &str = "10.210.20.1";
/// The balancers' routing table for the marked health checks of tunnelled servers (their
/// main table blackholes the VIPs).
const HEALTH_TABLE: &str = "4242";
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The uplink address of balancer `n` (1-based), the router's BGP neighbour.
pub fn balancer_addr(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 210, n as u8, 2)
}

/// The address of backend `m` (1-based) on the shared segment.
pub fn scale_backend_addr(m: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 210, 20, 100 + m as u8)
}

/// The address of backend `m` (1-based) on its own subnet behind the router; the router is
/// `.1` there.
pub fn routed_backend_addr(m: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 210, 48 + m as u8, 2)
}

/// How the balancers forward to the backends, and so where the backends live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleForwarding {
    /// `forwarding = "dsr"`: the backends sit on the segment the balancers share
    /// ([`scale_backend_addr`]).
    Dsr,
    /// `forwarding = "ipip"`: each backend sits on a subnet of its own behind the router
    /// ([`routed_backend_addr`]) and runs the agent (`lb decap`), which takes tunnel packets
    /// only from [`SCALE_TUNNEL_SOURCE_V4`]. The balancers route [`ROUTED_BACKENDS`] via the
    /// router's address on the segment, blackhole the VIPs in their main table and send the
    /// marked health checks of tunnelled servers (S-TN4) to the router by a rule.
    Ipip,
}

impl ScaleForwarding {
    /// The value of a vService's `forwarding` key.
    pub fn name(self) -> &'static str {
        match self {
            ScaleForwarding::Dsr => "dsr",
            ScaleForwarding::Ipip => "ipip",
        }
    }

    /// The address of backend `m` (1-based).
    pub fn backend_addr(self, m: usize) -> Ipv4Addr {
        match self {
            ScaleForwarding::Dsr => scale_backend_addr(m),
            ScaleForwarding::Ipip => routed_backend_addr(m),
        }
    }

    /// The `[xdp]` table a balancer's configuration needs in this mode (none for DSR).
    pub fn xdp_table(self) -> String {
        match self {
            ScaleForwarding::Dsr => String::new(),
            ScaleForwarding::Ipip => {
                format!("[xdp]\ntunnel_source_v4 = \"{SCALE_TUNNEL_SOURCE_V4}\"\n\n")
            }
        }
    }
}

/// One balancer: its namespace, `lb run` and BIRD. Fields drop in order: the daemons
/// before the namespace.
pub struct Balancer {
    /// 1-based.
    pub index: usize,
    /// Its BIRD, announcing what table [`VIP_TABLE`] holds.
    pub bird: Option<Bird>,
    /// Its `lb run`.
    pub daemon: Option<Daemon>,
    /// Its namespace.
    pub ns: Netns,
    /// Its bpffs pin directory.
    pub pin_dir: PathBuf,
    /// Its configuration file (its own copy).
    pub config: PathBuf,
    /// Its own folder for logs.
    pub dir: PathBuf,
}

/// One backend host.
pub struct ScaleBackend {
    /// `b1`, `b2`, ...
    pub name: String,
    /// Its namespace.
    pub ns: Netns,
    /// Its address.
    pub addr: Ipv4Addr,
    /// Where its agent pins (`lb decap --pin-dir`), with tunnel forwarding.
    pub agent_pins: Option<PathBuf>,
}

/// BFD timers of the harness's router: those `lb bird-config` prints for the balancers, so
/// the tests run the timing operators are given.
const BFD_TIMERS: &str = lb::routing::bird::BFD_TIMERS;

/// The whole scale-out network; dropping it stops servers, daemons and BIRDs, removes
/// pins and files, and deletes every namespace.
pub struct ScaleTopology {
    /// Servers in the backends; stopped first.
    pub servers: Servers,
    /// The router's BIRD.
    pub router_bird: Option<Bird>,
    /// etcd in the segment namespace, when the balancers share their configuration
    /// through it; stopped after the daemons.
    pub etcd: Option<NsEtcd>,
    /// The balancers, 1..=3.
    pub balancers: Vec<Balancer>,
    /// The backends.
    pub backends: Vec<ScaleBackend>,
    /// The client namespace.
    pub client: Netns,
    /// The router namespace.
    pub router: Netns,
    /// The shared segment's namespace (the bridge).
    pub segment: Netns,
    /// How the balancers forward, and so where the backends live.
    pub forwarding: ScaleForwarding,
    /// Configs and logs.
    pub work_dir: PathBuf,
    /// Unique id (`lbs<pid>-<n>`).
    pub id: String,
}

impl ScaleTopology {
    /// Builds `balancers` balancers and `backends` backends with the VIPs `vips` on the
    /// backends' `lo` (DSR). No daemon runs yet.
    pub fn new(balancers: usize, backends: usize, vips: &[Ipv4Addr]) -> Result<ScaleTopology> {
        ScaleTopology::with_forwarding(balancers, backends, vips, ScaleForwarding::Dsr)
    }

    /// [`ScaleTopology::new`] with the backends where `forwarding` wants them; with tunnel
    /// forwarding every backend's agent is attached. No daemon runs yet.
    pub fn with_forwarding(
        balancers: usize,
        backends: usize,
        vips: &[Ipv4Addr],
        forwarding: ScaleForwarding,
    ) -> Result<ScaleTopology> {
        anyhow::ensure!((1..=9).contains(&balancers) && (1..=9).contains(&backends));
        remove_stale();
        let pid = std::process::id();
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let id = format!("lbs{pid}-{n}");
        let work_dir = std::env::temp_dir().join(format!("lbtest-scale-{pid}-{n}"));
        std::fs::create_dir_all(&work_dir)?;
        let client = Netns::create(&format!("{id}-c"))?;
        let router = Netns::create(&format!("{id}-r"))?;
        let segment = Netns::create(&format!("{id}-s"))?;
        let mut topo = ScaleTopology {
            servers: Servers::default(),
            router_bird: None,
            etcd: None,
            balancers: Vec::new(),
            backends: Vec::new(),
            client,
            router,
            segment,
            forwarding,
            work_dir,
            id,
        };
        for i in 1..=balancers {
            let dir = topo.work_dir.join(format!("l{i}"));
            std::fs::create_dir_all(&dir)?;
            topo.balancers.push(Balancer {
                index: i,
                bird: None,
                daemon: None,
                ns: Netns::create(&format!("{}-l{i}", topo.id))?,
                pin_dir: PathBuf::from(format!("/sys/fs/bpf/lbtest-scale-{pid}-{n}-l{i}")),
                config: dir.join("lb.toml"),
                dir,
            });
        }
        for m in 1..=backends {
            let agent_pins = (forwarding == ScaleForwarding::Ipip)
                .then(|| PathBuf::from(format!("/sys/fs/bpf/lbtest-scale-{pid}-{n}-b{m}")));
            topo.backends.push(ScaleBackend {
                name: format!("b{m}"),
                ns: Netns::create(&format!("{}-b{m}", topo.id))?,
                addr: forwarding.backend_addr(m),
                agent_pins,
            });
        }
        topo.wire(vips)
            .with_context(|| format!("building the scale-out topology {}", topo.id))?;
        if forwarding == ScaleForwarding::Ipip {
            lbctl::ensure_bpffs()?;
            for b in &topo.backends {
                topo.agent(b, &["--source", SCALE_TUNNEL_SOURCE_V4])
                    .with_context(|| format!("attaching the agent on {}", b.name))?;
            }
        }
        Ok(topo)
    }

    /// Runs `lb decap --iface eth0 args... --pin-dir <its pins>` in backend `b`'s namespace.
    fn agent(&self, b: &ScaleBackend, args: &[&str]) -> Result<String> {
        let pins = b
            .agent_pins
            .as_ref()
            .with_context(|| format!("{} runs no agent", b.name))?
            .display()
            .to_string();
        let mut all = vec!["decap", "--iface", "eth0"];
        all.extend_from_slice(args);
        all.extend(["--pin-dir", pins.as_str()]);
        lbctl::lb(&b.ns.path(), &all)
    }

    /// The counters of backend `m`'s agent (`lb decap --status --json`): `decapsulated`,
    /// `foreign_source`, ... by name.
    pub fn agent_counters(&self, m: usize) -> Result<serde_json::Value> {
        let b = self
            .backends
            .get(m.wrapping_sub(1))
            .with_context(|| format!("no backend {m}"))?;
        let out = self.agent(b, &["--status", "--json"])?;
        let all: serde_json::Value =
            serde_json::from_str(&out).with_context(|| format!("lb decap --status: {out}"))?;
        let counters = all[0]["counters"].clone();
        if !counters.is_object() {
            bail!("no counters in lb decap --status of {}: {out}", b.name);
        }
        Ok(counters)
    }

    /// The client's TCP connections to `port` that a backend holds established, by the
    /// client's port: the names of the backends whose namespace has that connection (`ss`).
    pub fn established(&self, port: u16) -> Result<BTreeMap<u16, Vec<String>>> {
        let mut out: BTreeMap<u16, Vec<String>> = BTreeMap::new();
        let filter = format!("sport = :{port}");
        for b in &self.backends {
            let text =
                b.ns.exec("ss", &["-Htn", "state", "established", &filter])?;
            for line in text.lines() {
                // Recv-Q Send-Q Local:Port Peer:Port (no State column with `state`).
                let Some(peer) = line.split_whitespace().nth(3) else {
                    continue;
                };
                let Some((addr, client_port)) = peer.rsplit_once(':') else {
                    continue;
                };
                let addr = addr.trim_start_matches("[::ffff:").trim_end_matches(']');
                if addr == SCALE_CLIENT.to_string()
                    && let Ok(client_port) = client_port.parse()
                {
                    out.entry(client_port).or_default().push(b.name.clone());
                }
            }
        }
        Ok(out)
    }

    fn wire(&self, vips: &[Ipv4Addr]) -> Result<()> {
        let (c, r, s) = (&self.client, &self.router, &self.segment);
        let ipip = self.forwarding == ScaleForwarding::Ipip;
        r.sysctl(&[
            ("net.ipv4.ip_forward", "1"),
            ("net.ipv4.fib_multipath_hash_policy", "1"),
        ])?;
        if ipip {
            // The tunnel's outer sources are routed nowhere: no reverse-path filter for them.
            r.sysctl(&[
                ("net.ipv4.conf.all.rp_filter", "0"),
                ("net.ipv4.conf.default.rp_filter", "0"),
            ])?;
        }
        veth(c, "eth0", r, "c")?;
        c.ip(&["addr", "add", "10.210.0.2/30", "dev", "eth0"])?;
        r.ip(&["addr", "add", "10.210.0.1/30", "dev", "c"])?;
        up(c, "eth0")?;
        up(r, "c")?;
        c.ip(&["route", "add", "default", "via", "10.210.0.1"])?;
        s.ip(&["link", "add", "br0", "type", "bridge"])?;
        s.ip(&[
            "addr",
            "add",
            &format!("{SEGMENT_ETCD_ADDR}/24"),
            "dev",
            "br0",
        ])?;
        up(s, "br0")?;
        veth(r, "seg", s, "pr")?;
        r.ip(&["addr", "add", "10.210.20.1/24", "dev", "seg"])?;
        port(s, "pr")?;
        up(r, "seg")?;
        for b in &self.balancers {
            let i = b.index;
            let l = &b.ns;
            // bpf_fib_lookup answers only for an ingress device that forwards.
            l.sysctl(&[("net.ipv4.ip_forward", "1")])?;
            veth(r, &format!("l{i}"), l, "wan0")?;
            r.ip(&[
                "addr",
                "add",
                &format!("10.210.{i}.1/30"),
                "dev",
                &format!("l{i}"),
            ])?;
            l.ip(&[
                "addr",
                "add",
                &format!("{}/30", balancer_addr(i)),
                "dev",
                "wan0",
            ])?;
            up(r, &format!("l{i}"))?;
            up(l, "wan0")?;
            l.ip(&["route", "add", "default", "via", &format!("10.210.{i}.1")])?;
            veth(l, "seg0", s, &format!("p{i}"))?;
            l.ip(&["addr", "add", &format!("10.210.20.1{i}/24"), "dev", "seg0"])?;
            up(l, "seg0")?;
            port(s, &format!("p{i}"))?;
            // Frames XDP redirects into `seg0` arrive on the bridge port: GRO on there.
            offload(l, "wan0", false)?;
            offload(l, "seg0", false)?;
            offload(s, &format!("p{i}"), true)?;
            offload(r, &format!("l{i}"), true)?;
            if ipip {
                self.route_tunnels(l, vips)?;
            }
        }
        for (k, b) in self.backends.iter().enumerate() {
            let m = k + 1;
            if ipip {
                let dev = format!("b{m}");
                veth(&b.ns, "eth0", r, &dev)?;
                r.ip(&[
                    "addr",
                    "add",
                    &format!("10.210.{}.1/24", 48 + m),
                    "dev",
                    &dev,
                ])?;
                up(r, &dev)?;
                offload(r, &dev, false)?;
            } else {
                veth(&b.ns, "eth0", s, &format!("pb{m}"))?;
                port(s, &format!("pb{m}"))?;
                offload(s, &format!("pb{m}"), true)?;
            }
            b.ns.ip(&["addr", "add", &format!("{}/24", b.addr), "dev", "eth0"])?;
            up(&b.ns, "eth0")?;
            offload(&b.ns, "eth0", !ipip)?;
            let gateway = if ipip {
                format!("10.210.{}.1", 48 + m)
            } else {
                ROUTER_SEGMENT_ADDR.to_owned()
            };
            b.ns.ip(&["route", "add", "default", "via", &gateway])?;
            for vip in vips {
                b.ns.ip(&["addr", "add", &format!("{vip}/32"), "dev", "lo"])?;
            }
            b.ns.sysctl(&[
                ("net.ipv4.conf.all.arp_ignore", "1"),
                ("net.ipv4.conf.all.arp_announce", "2"),
            ])?;
        }
        offload(c, "eth0", true)?;
        offload(r, "c", false)?;
        offload(r, "seg", true)?;
        // Neighbours resolved before XDP's bpf_fib_lookup needs them.
        for l in &self.balancers {
            for b in &self.backends {
                l.ns.exec("ping", &["-c", "1", "-W", "1", "-q", &b.addr.to_string()])
                    .with_context(|| format!("balancer {} cannot reach {}", l.index, b.name))?;
            }
        }
        let first = self.forwarding.backend_addr(1).to_string();
        c.exec("ping", &["-c", "1", "-W", "1", "-q", &first])
            .context("the client cannot reach the backends through the router")?;
        Ok(())
    }

    /// Tunnel forwarding on balancer namespace `l`: the backends' subnets via the router's
    /// address on the segment; the VIPs blackholed in the main table, so that VIP packets
    /// the program leaves to the kernel do not go back to the router; the marked health
    /// checks of tunnelled servers (S-TN4) routed to the router on the segment by a rule,
    /// where the tc program puts them inside the tunnel.
    fn route_tunnels(&self, l: &Netns, vips: &[Ipv4Addr]) -> Result<()> {
        l.ip(&[
            "route",
            "add",
            ROUTED_BACKENDS,
            "via",
            ROUTER_SEGMENT_ADDR,
            "dev",
            "seg0",
        ])?;
        let marks = format!(
            "{:#x}/{:#x}",
            lb_common::HEALTH_MARK_BASE,
            lb_common::HEALTH_MARK_MASK
        );
        l.ip(&[
            "rule",
            "add",
            "fwmark",
            &marks,
            "lookup",
            HEALTH_TABLE,
            "priority",
            "100",
        ])?;
        for vip in vips {
            let host = format!("{vip}/32");
            l.ip(&["route", "add", "blackhole", &host])?;
            l.ip(&[
                "route",
                "add",
                &host,
                "via",
                ROUTER_SEGMENT_ADDR,
                "dev",
                "seg0",
                "table",
                HEALTH_TABLE,
            ])?;
        }
        Ok(())
    }

    /// Starts the router's BIRD: one eBGP session per balancer, BFD, `merge paths on` so
    /// the kernel gets one multipath route per VIP, imports limited to `vips`.
    pub fn start_router_bird(&mut self, vips: &[Ipv4Addr]) -> Result<()> {
        let filter: Vec<String> = vips.iter().map(|v| format!("{v}/32")).collect();
        let mut conf = format!(
            "router id 10.210.0.1;\n\
             protocol device {{ scan time 10; }}\n\
             protocol kernel kern {{\n  ipv4 {{ import none; export where source = RTS_BGP; }};\n  merge paths on;\n}}\n\
             protocol bfd {{ interface \"l*\" {{ {BFD_TIMERS} }}; }}\n\
             template bgp lb {{\n  local as {ROUTER_AS};\n  hold time 3; keepalive time 1; connect retry time 1; connect delay time 1;\n  error wait time 1, 5;\n  bfd on;\n  ipv4 {{ import where net ~ [ {} ]; export none; }};\n}}\n",
            filter.join(", ")
        );
        for b in &self.balancers {
            conf.push_str(&format!(
                "protocol bgp l{0} from lb {{ neighbor {1} as {2}; }}\n",
                b.index,
                balancer_addr(b.index),
                65000 + b.index
            ));
        }
        self.router_bird = Some(Bird::start(&self.router, &self.work_dir, "router", &conf)?);
        Ok(())
    }

    /// Starts etcd in the segment namespace on [`SEGMENT_ETCD_ADDR`], where every balancer
    /// reaches it through `seg0`; returns its endpoint URL.
    pub fn start_etcd(&mut self) -> Result<String> {
        let etcd = NsEtcd::start(&self.segment, SEGMENT_ETCD_ADDR, &self.work_dir)?;
        let url = etcd.url();
        self.etcd = Some(etcd);
        Ok(url)
    }

    /// Starts BIRD on balancer `i` with the configuration `lb bird-config` prints for its
    /// `lb.toml`, the capitals filled in.
    pub fn start_balancer_bird(&mut self, i: usize) -> Result<()> {
        let b = self.balancer(i)?;
        let config = b.config.display().to_string();
        let snippet = lbctl::lb(&b.ns.path(), &["bird-config", "--config", &config])?;
        let filled = snippet
            .replace("ROUTER_ID", &balancer_addr(i).to_string())
            .replace("LOCAL_AS", &(65000 + i).to_string())
            .replace("PEER_ADDRESS", &format!("10.210.{i}.1"))
            .replace("PEER_AS", &ROUTER_AS.to_string())
            .replace("UPLINK", "wan0");
        let bird = Bird::start(&b.ns, &b.dir, "bird", &filled)?;
        self.balancers[i - 1].bird = Some(bird);
        Ok(())
    }

    /// Writes `toml` as balancer `i`'s configuration.
    pub fn write_config(&self, i: usize, toml: &str) -> Result<()> {
        let b = self.balancer(i)?;
        std::fs::write(&b.config, toml).with_context(|| format!("writing {}", b.config.display()))
    }

    /// Starts `lb run` on balancer `i` (XDP on `wan0` and `seg0`, its own pin directory).
    pub fn start_lb(&mut self, i: usize) -> Result<()> {
        lbctl::ensure_bpffs()?;
        let b = self.balancer(i)?;
        let (config, pin) = (
            b.config.display().to_string(),
            b.pin_dir.display().to_string(),
        );
        let args = [
            "run",
            "--config",
            &config,
            "--iface",
            "wan0",
            "--iface",
            "seg0",
            "--pin-dir",
            &pin,
        ];
        let daemon = Daemon::start(&b.ns.path(), &args, &b.dir.join("lb.log"))?;
        self.balancers[i - 1].daemon = Some(daemon);
        Ok(())
    }

    /// Balancer `i` (1-based).
    pub fn balancer(&self, i: usize) -> Result<&Balancer> {
        self.balancers
            .get(i.wrapping_sub(1))
            .with_context(|| format!("no balancer {i}"))
    }

    /// Runs `lb args...` in balancer `i`'s namespace.
    pub fn lb(&self, i: usize, args: &[&str]) -> Result<String> {
        lbctl::lb(&self.balancer(i)?.ns.path(), args)
    }

    /// GET (or POST) `path` of balancer `i`'s API (127.0.0.1:9180 in its namespace).
    pub fn api(&self, i: usize, method: &str, path: &str) -> Result<serde_json::Value> {
        let ns = &self.balancer(i)?.ns;
        let text = ns.run(|| http(method, path, ""))??;
        serde_json::from_str(&text).with_context(|| format!("{method} {path} answered {text}"))
    }

    /// `method path` with a JSON `body` on balancer `i`'s API; a non-2xx answer is an error
    /// carrying its status line.
    pub fn api_json(
        &self,
        i: usize,
        method: &str,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value> {
        let ns = &self.balancer(i)?.ns;
        let body = body.to_string();
        let text = ns.run(|| http(method, path, &body))??;
        serde_json::from_str(&text).with_context(|| format!("{method} {path} answered {text}"))
    }

    /// The body of `method path` on balancer `i`'s API as text (e.g. `/metrics`).
    pub fn api_text(&self, i: usize, method: &str, path: &str) -> Result<String> {
        let ns = &self.balancer(i)?.ns;
        ns.run(|| http(method, path, ""))?
    }

    /// The VIP routes balancer `i` keeps in [`VIP_TABLE`] (`ip route show table 100`).
    pub fn vip_routes(&self, i: usize) -> Result<String> {
        self.balancer(i)?
            .ns
            .ip(&["route", "show", "table", &VIP_TABLE.to_string()])
    }

    /// The balancers the router's route for `vip` leads to (their uplink addresses).
    pub fn router_paths(&self, vip: Ipv4Addr) -> Result<BTreeSet<Ipv4Addr>> {
        let out = self.router.ip(&["route", "show", &format!("{vip}/32")])?;
        Ok(out
            .split_whitespace()
            .collect::<Vec<_>>()
            .windows(2)
            .filter(|w| w[0] == "via")
            .filter_map(|w| w[1].parse().ok())
            .collect())
    }

    /// Waits until the router's route for `vip` leads to exactly `want` (uplink addresses of
    /// balancers); returns how long it took.
    pub fn wait_paths(
        &self,
        vip: Ipv4Addr,
        want: &BTreeSet<Ipv4Addr>,
        timeout: Duration,
    ) -> Result<Duration> {
        let start = Instant::now();
        loop {
            let now = self.router_paths(vip)?;
            if &now == want {
                return Ok(start.elapsed());
            }
            if start.elapsed() > timeout {
                bail!("the router's paths for {vip} are {now:?}, not {want:?}, after {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Takes balancer `i`'s uplink down in the router (`up = false`: the balancer is gone
    /// for the router, as when it dies) or back up.
    pub fn set_uplink(&self, i: usize, up_: bool) -> Result<()> {
        let dev = format!("l{i}");
        self.router
            .ip(&["link", "set", &dev, if up_ { "up" } else { "down" }])?;
        if up_ {
            // Only the router's end went down, so the balancer's default route normally
            // survives; `replace` restores it if the kernel dropped it with the carrier.
            let b = self.balancer(i)?;
            b.ns.ip(&[
                "route",
                "replace",
                "default",
                "via",
                &format!("10.210.{i}.1"),
            ])?;
        }
        Ok(())
    }
}

/// One plain HTTP/1.1 request to 127.0.0.1:9180 (in the calling thread's namespace), with
/// `body` as JSON when not empty.
fn http(method: &str, path: &str, body: &str) -> Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(
        &"127.0.0.1:9180".parse().context("address")?,
        Duration::from_secs(2),
    )
    .context("connecting to the balancer's API")?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{}Content-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        if body.is_empty() {
            ""
        } else {
            "Content-Type: application/json\r\n"
        },
        body.len()
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").context("no HTTP head")?;
    if !head.starts_with("HTTP/1.1 2") {
        bail!("{method} {path}: {head}\n{body}");
    }
    Ok(body.to_owned())
}

impl Drop for ScaleTopology {
    fn drop(&mut self) {
        self.servers.stop();
        // SIGTERM first, all at once, so each `lb run` removes its own files; the drop
        // of a daemon that did not exit kills it.
        for b in &mut self.balancers {
            if let Some(d) = b.daemon.as_mut() {
                let _ = d.signal(libc::SIGTERM);
            }
        }
        for b in &mut self.balancers {
            if let Some(d) = b.daemon.as_mut() {
                let _ = d.wait_exit(Duration::from_secs(10));
            }
            b.daemon = None;
            b.bird = None;
            if b.pin_dir.exists() && std::fs::remove_dir_all(&b.pin_dir).is_err() {
                eprintln!("harness: cannot remove {}", b.pin_dir.display());
            }
            lb::network::forget_state(&b.pin_dir);
            let _ = std::fs::remove_file(lb::daemon::report_path(&b.pin_dir));
            let _ = std::fs::remove_file(lb::daemon::states_path(&b.config));
            let _ = std::fs::remove_file(lb::daemon::drained_path(&b.config));
        }
        for b in &self.backends {
            let Some(pins) = &b.agent_pins else { continue };
            if pins.exists() && self.agent(b, &["--detach"]).is_err() {
                eprintln!("harness: could not detach the agent of {}", b.name);
            }
            if pins.exists() && std::fs::remove_dir_all(pins).is_err() {
                eprintln!("harness: cannot remove {}", pins.display());
            }
        }
        self.router_bird = None;
        self.etcd = None;
        let _ = std::fs::remove_dir_all(&self.work_dir);
    }
}

fn veth(a: &Netns, a_dev: &str, b: &Netns, b_dev: &str) -> Result<()> {
    a.ip(&[
        "link",
        "add",
        a_dev,
        "type",
        "veth",
        "peer",
        "name",
        b_dev,
        "netns",
        b.name(),
    ])
    .map(drop)
}

fn up(ns: &Netns, dev: &str) -> Result<()> {
    ns.ip(&["link", "set", dev, "up"]).map(drop)
}

fn port(segment: &Netns, dev: &str) -> Result<()> {
    segment
        .ip(&["link", "set", dev, "master", "br0", "up"])
        .map(drop)
}

/// Deletes scale-out namespaces, pin directories and work directories left by test
/// processes that no longer exist (a run killed with SIGKILL).
fn remove_stale() {
    remove_stale_of("lbs", "lbtest-scale-");
}
