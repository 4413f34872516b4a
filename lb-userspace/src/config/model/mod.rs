//! The validated configuration model: what the rest of the daemon reads, re-exported as
//! `config::*`. Everything here has already passed the checks (names unique, references
//! resolved, ranges ordered, S-HC4 adjustments applied), so consumers never re-check it;
//! `restart` says which of its settings a reload cannot change.

mod bgp;
mod index;
mod restart;
mod tls;

pub use bgp::{BgpSettings, MAIN_TABLE};
pub use index::{ByName, FastMap, FastSet};
pub use restart::restart_only_changes;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;
pub use tls::{TlsError, TlsPart};

/// The whole configuration of one daemon.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Settings of the XDP data path.
    pub xdp: XdpSettings,
    /// Delays between a health decision and its effect on traffic (S-RF).
    pub reflection: ReflectionSettings,
    /// Health check profiles, by unique name.
    pub health_checks: Vec<HealthCheck>,
    /// Backend Services, by unique name.
    pub backend_services: Vec<BackendService>,
    /// Backend Groups, by unique name (unique across services and groups).
    pub backend_groups: Vec<BackendGroup>,
    /// vServices, by unique name.
    pub vservices: Vec<VService>,
    /// The REST API, Live Stats page and metrics listener.
    pub api: ApiSettings,
    /// Process-wide settings of the L7 proxy.
    pub proxy: ProxySettings,
    /// Cluster peers (S-CL); none when clustering is off.
    pub cluster: Option<ClusterSettings>,
    /// DNS vServices (global service standby, S-GS): authoritative answers with the
    /// addresses of the sites whose service is up. Kept apart from `vservices` because they
    /// have no backend lists: their "backends" are whole sites, polled over their API.
    pub dns_vservices: Vec<DnsVService>,
    /// VIP route announcement through BIRD (S-AN); off by default.
    pub bgp: BgpSettings,
}

/// Passive health's default cap: at most half of a list's mains in Error by passive
/// failures at once (Envoy's outlier detection caps ejections the same way).
pub const DEFAULT_MAX_EJECTION_PERCENT: u8 = 50;

impl Config {
    /// Passive health's `max_ejection_percent` of the profile `profile` (the default for a
    /// profile that does not write it).
    pub fn max_ejection_percent(&self, profile: &str) -> u8 {
        self.health_checks
            .iter()
            .find(|h| h.name == profile)
            .map_or(DEFAULT_MAX_EJECTION_PERCENT, |h| h.max_ejection_percent)
    }
}

/// Process-wide settings of the L7 proxy (`[proxy]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProxySettings {
    /// Worker threads serving HTTP and L7 TCP client connections, each with its own event
    /// loop and idle backend connections; None = one per CPU. Read at start: a reload that
    /// changes it takes effect at the next restart.
    pub workers: Option<u16>,
    /// The scheduler slice each worker asks the kernel for, so that a worker woken by a
    /// packet runs soon even when busy threads share its CPUs; None = the kernel's default.
    /// Read at start, like `workers`.
    pub sched_slice: Option<Duration>,
    /// How large a client's request head may be, and each line of it.
    pub header_limits: HeaderLimits,
}

impl ProxySettings {
    /// The slice workers ask for when `[proxy] sched_slice_us` is absent: the shortest the
    /// kernel grants, since a worker's bursts are far shorter than that.
    pub const DEFAULT_SCHED_SLICE: Duration = Duration::from_micros(100);
}

impl Default for ProxySettings {
    fn default() -> Self {
        Self {
            workers: None,
            sched_slice: Some(Self::DEFAULT_SCHED_SLICE),
            header_limits: HeaderLimits::default(),
        }
    }
}

/// Limits on a client's request head, as HAProxy (`tune.bufsize`) and nginx
/// (`large_client_header_buffers 4 8k`) have: a bigger head costs memory per connection and
/// is usually an attack. Over the limit is answered 431 (a header line or the whole head)
/// or 414 (the request line). Applies at once on reload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderLimits {
    /// The whole head: request line and every header (`[proxy] max_header_bytes`).
    pub head: usize,
    /// One line: the request line, or one header's name and value
    /// (`[proxy] max_header_line_bytes`).
    pub line: usize,
}

impl Default for HeaderLimits {
    fn default() -> Self {
        Self {
            head: 16 * 1024,
            line: 8 * 1024,
        }
    }
}

impl HeaderLimits {
    /// Whether the request line `METHOD TARGET HTTP/1.1` (lengths of its parts) fits.
    pub fn request_line_fits(&self, method: usize, target: usize) -> bool {
        method + 1 + target + " HTTP/1.1".len() <= self.line
    }

    /// Whether the header line `NAME: VALUE` (lengths of its parts) fits.
    pub fn header_line_fits(&self, name: usize, value: usize) -> bool {
        name + ": ".len() + value <= self.line
    }
}

/// Where the REST API, the Live Stats page and /metrics listen, and how callers are told
/// apart from strangers: the token, TLS (so that the token and the pushed configurations do
/// not travel in clear) and a local Unix socket guarded by its file permissions.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiSettings {
    /// Listen address. Default 127.0.0.1:9180. Binding a non-loopback address requires a
    /// token, and TLS or `insecure_plaintext`.
    pub listen: SocketAddr,
    /// Bearer token; required on every request over TCP when set (compared in constant time).
    pub token: Option<String>,
    /// TLS on the TCP listener (`cert`, `key`, `client_ca`); None serves plain HTTP. The
    /// files are read again on every reload.
    pub tls: Option<ApiTls>,
    /// `insecure_plaintext`: the operator accepts plain HTTP on a non-loopback address (the
    /// token then travels in clear); warned about at every start.
    pub insecure_plaintext: bool,
    /// A Unix socket served alongside the TCP listener, for local tools; read at start.
    pub socket: Option<ApiSocket>,
}

impl Default for ApiSettings {
    fn default() -> Self {
        ApiSettings {
            listen: SocketAddr::from(([127, 0, 0, 1], 9180)),
            token: None,
            tls: None,
            insecure_plaintext: false,
            socket: None,
        }
    }
}

/// The API's TLS files (`[api] cert`, `key`, `client_ca`), all PEM; checked when the file is
/// loaded so that a reload with a bad file is refused and the running certificate kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiTls {
    /// Certificate chain, the API's own certificate first.
    pub cert: PathBuf,
    /// Private key of `cert`.
    pub key: PathBuf,
    /// Mutual TLS: only clients presenting a certificate signed by one of these CAs complete
    /// the handshake. None: any client may connect (and needs the token).
    pub client_ca: Option<PathBuf>,
}

/// The API's Unix socket (`[api] socket`, `socket_mode`). No token is asked on it: the
/// file's permissions are its access control, as with HAProxy's stats socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiSocket {
    /// Where the socket file is made (replaced atomically at each start).
    pub path: PathBuf,
    /// Permission bits of the socket file. Default 0o660.
    pub mode: u32,
}

impl ApiSocket {
    /// The mode when `socket_mode` is absent: owner and group may connect, others not.
    pub const DEFAULT_MODE: u32 = 0o660;
}

/// Cluster synchronisation of configuration changes (S-CL).
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterSettings {
    /// Peers, by their API base URL (e.g. `http://10.0.0.2:9180`); used by
    /// [`ClusterStore::Peers`] only.
    pub peers: Vec<ClusterPeer>,
    /// Manual Sync Mode: changes reach peers only on Synchronize (S-CL2). Default false.
    pub manual_sync: bool,
    /// How a change made here reaches the other balancers.
    pub store: ClusterStore,
    /// This balancer's name in the cluster (`cluster.node_name`, default the host name):
    /// the key it registers under in etcd.
    pub node_name: String,
    /// How this node proves itself to and verifies `https://` peers (`cluster.ca`, `cert`,
    /// `key`), so that pushed configurations and tokens do not travel in clear.
    pub peer_tls: ClientTls,
}

/// How a client of the API verifies an `https://` API and proves itself to it: towards
/// peers (`cluster.ca`, `cert`, `key`; empty with `http://` peers only) and from the CLI
/// (`--ca`, `--cert`, `--key`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// CA certificate (PEM) the API's certificate must chain to; None: the system's store.
    pub ca: Option<PathBuf>,
    /// Client certificate and key (PEM), for an API that asks for one (`api.client_ca`).
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// Where the shared configuration lives (`cluster.store`).
#[derive(Clone, Debug, PartialEq)]
pub enum ClusterStore {
    /// `"peers"` (the default): after a change this node pushes its file to each peer.
    Peers,
    /// `"etcd"`: the shared configuration is one key in etcd that every node watches
    /// (S-CL3).
    Etcd(EtcdSettings),
}

/// `[cluster.etcd]`: how to reach the etcd cluster that holds the shared configuration.
#[derive(Clone, PartialEq)]
pub struct EtcdSettings {
    /// Client URLs, `http://host:port` or `https://host:port`.
    pub endpoints: Vec<String>,
    /// Key prefix: the configuration is `<prefix>/config`, nodes `<prefix>/nodes/<name>`.
    pub prefix: String,
    /// User name and password when etcd has authentication on.
    pub auth: Option<(String, String)>,
    /// PEM files for TLS: the CA that signed etcd's certificate, and this node's client
    /// certificate and key (both or neither).
    pub tls: Option<EtcdTls>,
    /// How long one request to etcd may take before the node treats etcd as unreachable.
    pub timeout: std::time::Duration,
}

/// TLS files for etcd (`cluster.etcd.ca_file`, `cert_file`, `key_file`).
#[derive(Clone, Debug, PartialEq)]
pub struct EtcdTls {
    /// CA certificate (PEM) that etcd's server certificate must chain to.
    pub ca_file: Option<std::path::PathBuf>,
    /// Client certificate and key (PEM), for etcd's client-certificate authentication.
    pub identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl std::fmt::Debug for EtcdSettings {
    /// The password never reaches a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdSettings")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("user", &self.auth.as_ref().map(|(u, _)| u))
            .field("tls", &self.tls)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// One cluster peer.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterPeer {
    /// Unique name.
    pub name: String,
    /// API base URL of the peer, `http://host:port` or `https://host:port`.
    pub url: String,
    /// Token the peer's API requires (default: this node's own API token).
    pub token: Option<String>,
}

/// The bpffs directory of a data path's pins when `[xdp] pin_dir` names none: the place
/// every command looks by default, so that one data path per host needs no setting.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/lb";

/// How the XDP program is attached and sized.
#[derive(Clone, Debug, PartialEq)]
pub struct XdpSettings {
    /// bpffs directory holding the pinned program, maps and links. Default `/sys/fs/bpf/lb`.
    pub pin_dir: PathBuf,
    /// Connection-table size in flows. Default 1,048,576.
    pub conn_table_size: u32,
    /// New flows per second and CPU recorded in the connection table at most; above it
    /// (a SYN flood) new flows are balanced without being recorded, so they evict no
    /// established flow. 0: every flow is recorded. Default 125,000.
    pub flood_guard_rate: u32,
    /// Interfaces to attach to (may be overridden on the command line).
    pub interfaces: Vec<String>,
    /// Attach mode. Default driver (native).
    pub attach_mode: AttachMode,
    /// The prefix outer IPv4 sources of tunnel forwarding are taken from (the flow's hash
    /// fills its host bits, so routers spread flows); required by IPv4 `ipip` vServices.
    pub tunnel_source_v4: Option<ipnet::Ipv4Net>,
    /// The same for outer IPv6 sources (and IPv6 `ipip` vServices).
    pub tunnel_source_v6: Option<ipnet::Ipv6Net>,
    /// The UDP destination port of GUE tunnels (`forwarding = "gue"`). Default 6080.
    pub gue_port: u16,
}

/// XDP attach mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// Native (driver) mode.
    Driver,
    /// Generic (skb) mode, for NICs without native XDP.
    Skb,
}

/// Delays between a health decision and its effect on traffic (S-RF1, S-RF2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReflectionSettings {
    /// Network vServices: delay before a failed backend leaves the XDP maps. Default 9 s.
    pub network_remove_delay: Duration,
    /// Network vServices: delay before a recovered backend returns to the XDP maps. Default 5 s.
    pub network_add_delay: Duration,
    /// HTTP and L7 TCP vServices: delay before a decision reaches distribution. Default 2.5 s.
    pub l7_delay: Duration,
}

/// A health check profile (S-HC1..4), already adjusted per S-HC4.
#[derive(Clone, Debug, PartialEq)]
pub struct HealthCheck {
    /// Unique profile name.
    pub name: String,
    /// Probe type and its own fields.
    pub kind: HealthKind,
    /// Period P, waited between the end of one check and the start of the next.
    pub period: Duration,
    /// Timeout T of one check.
    pub timeout: Duration,
    /// Required Successes (RS).
    pub required_successes: u32,
    /// Required Failures (RF).
    pub required_failures: u32,
    /// Passive health (S-RT3; HAProxy's `observe` with `on-error mark-down`, Envoy's outlier
    /// detection): this many consecutive failures of live L7 traffic to a Backend Service
    /// (connect failed, closed or silent before answering, a 5xx answer) put it in Error at
    /// once; the active check brings it back after RS successes. None (the default): off.
    pub passive_failures: Option<u32>,
    /// Passive health's cap (Envoy's `max_ejection_percent`): passive failures never hold
    /// more than this share of a list's mains in Error at once, so a burst of 5xx cannot
    /// empty a list; the active check is not capped. 0-100.
    pub max_ejection_percent: u8,
}

/// Probe type of a health check profile.
#[derive(Clone, Debug, PartialEq)]
pub enum HealthKind {
    /// ICMP echo to the Backend Service's address.
    Ping,
    /// TCP connect to the Backend Service's address and port.
    Tcp(Handshake),
    /// HTTP request.
    Http(HttpCheck),
    /// HTTPS request.
    Https(HttpCheck),
    /// DNS query over UDP.
    Dns(DnsCheck),
    /// No active check: only live L7 traffic decides (passive health, S-RT3). The service
    /// starts OK; `passive_failures` failures in a row put it in Error, and it returns to OK
    /// after `return_after` (Envoy's outlier ejection time).
    Passive {
        /// How long Error lasts before the service is tried again (`passive_return`).
        return_after: Duration,
    },
}

/// How far a TCP check takes the handshake (`handshake` in a `type = "tcp"` profile).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Handshake {
    /// SYN, then the SYN-ACK is the success and the probe answers it with RST: the target's
    /// listener never completes a connection, never wakes its accept queue (HAProxy's
    /// layer-4 check does the same). The default.
    #[default]
    HalfOpen,
    /// SYN, SYN-ACK, ACK, then RST: for targets that must see a completed connection (e.g.
    /// a service behind a proxy that only answers SYNs once its own backend is reachable).
    Full,
}

/// Fields of an HTTP or HTTPS check.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpCheck {
    /// Request method. Default `GET`.
    pub method: String,
    /// Request path. Default `/`.
    pub path: String,
    /// Host header; default the backend's address.
    pub host: Option<String>,
    /// Status codes that count as success. Default `[200]`.
    pub expect_status: Vec<u16>,
    /// Optional substring the body must contain.
    pub body_contains: Option<String>,
    /// HTTPS only: verify the server certificate. Default false.
    pub verify_tls: bool,
}

/// Fields of a DNS check.
#[derive(Clone, Debug, PartialEq)]
pub struct DnsCheck {
    /// Name to query.
    pub query_name: String,
    /// Query type number. Default 1 (A).
    pub query_type: u16,
}

/// One address:port that serves traffic.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendService {
    /// Unique name.
    pub name: String,
    /// Server address.
    pub address: IpAddr,
    /// Its IPv6 address too, when `address` is IPv4: the server of a dual-stack vService's
    /// IPv6 VIP, checked on its own (see [`BackendService::health_key`]).
    pub address6: Option<Ipv6Addr>,
    /// Port; 0 means "the port the client asked for" (Port Range and ANY-L3 VIPs).
    pub port: u16,
    /// Weight; 0 drains the service (S-BK11). Default 1.
    pub weight: u32,
    /// Name of its health check profile; none means always OK (S-HC6).
    pub health_check: Option<String>,
    /// Maintenance Mode (S-MT).
    pub maintenance: bool,
    /// Backup flag (S-BK).
    pub backup: bool,
    /// Connection limit; none means unlimited.
    pub max_connections: Option<u32>,
    /// Set when a tunnelled vService forwards to this server: its checks then travel the
    /// tunnel to that vService's VIP (S-TN4). Derived from the vServices, not written.
    pub tunnel_check: Option<TunnelCheck>,
}

/// How the health checks of a server behind a tunnel reach it (S-TN4): addressed to a VIP
/// it serves, through the same tunnel as that VIP's traffic, so that they pass only where
/// a client's packets would (the server's agent and the VIP on its loopback).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunnelCheck {
    /// The IPv4 VIP the checks of the server's IPv4 address go to: the first tunnelled
    /// vService (in file order) with an IPv4 VIP that lists the server.
    pub vip4: Option<std::net::Ipv4Addr>,
    /// The same for its IPv6 address.
    pub vip6: Option<Ipv6Addr>,
    /// Whether the vService of `vip4` / `vip6` tunnels by GUE (else IP in IP).
    pub gue4: bool,
    pub gue6: bool,
    /// The server's position among the tunnelled servers: its checks' socket marks are
    /// derived from it ([`TunnelCheck::mark`]).
    pub index: u32,
}

/// Most servers whose checks travel a tunnel: two socket marks each (one per family) in the
/// block the data path reserves.
pub const MAX_TUNNEL_CHECKS: u32 = lb_common::MAX_HEALTH_TUNNELS / 2;

impl TunnelCheck {
    /// The socket mark of the checks of the server's address of `address`'s family, which
    /// the data path's `HEALTH_TUNNELS` maps to the outer header.
    pub fn mark(&self, address: IpAddr) -> u32 {
        lb_common::HEALTH_MARK_BASE + 2 * self.index + u32::from(address.is_ipv6())
    }

    /// Whether the checks of `address`'s family travel a GUE tunnel.
    pub fn gue(&self, address: IpAddr) -> bool {
        if address.is_ipv4() {
            self.gue4
        } else {
            self.gue6
        }
    }

    /// The VIP of `address`'s family, if a tunnelled vService of that family lists the
    /// server.
    pub fn vip(&self, address: IpAddr) -> Option<IpAddr> {
        match address {
            IpAddr::V4(_) => self.vip4.map(IpAddr::V4),
            IpAddr::V6(_) => self.vip6.map(IpAddr::V6),
        }
    }
}

impl BackendService {
    /// Where a check of this service's `address` goes: the VIP and the socket mark when it
    /// travels a tunnel (S-TN4), else the address itself and no mark (0).
    pub fn check_route(&self, address: IpAddr) -> (IpAddr, u32) {
        match &self.tunnel_check {
            Some(t) => match t.vip(address) {
                Some(vip) => (vip, t.mark(address)),
                None => (address, 0),
            },
            None => (address, 0),
        }
    }

    /// Its address in the family of `vip`, if it has one: a VIP forwards within its family.
    pub fn address_for(&self, vip: IpAddr) -> Option<IpAddr> {
        if self.address.is_ipv4() == vip.is_ipv4() {
            Some(self.address)
        } else {
            self.address6.filter(|_| vip.is_ipv6()).map(IpAddr::V6)
        }
    }

    /// The name the health engine knows the check of `address` by: the service's name for
    /// its main address, [`ipv6_health_key`] for the `address6` of a dual-stack service, so
    /// that a server reachable over one family only is kept out of the other family's VIP.
    pub fn health_key(&self, address: IpAddr) -> std::borrow::Cow<'_, str> {
        if address != self.address && self.address6.is_some() {
            ipv6_health_key(&self.name).into()
        } else {
            self.name.as_str().into()
        }
    }

    /// Every address with its health key: the main one, then `address6`.
    pub fn health_targets(&self) -> impl Iterator<Item = (std::borrow::Cow<'_, str>, IpAddr)> {
        std::iter::once(self.address)
            .chain(self.address6.map(IpAddr::V6))
            .map(|a| (self.health_key(a), a))
    }
}

/// The health key of the `address6` of dual-stack Backend Service `name`; the configuration
/// keeps it apart from every other name.
pub fn ipv6_health_key(name: &str) -> String {
    format!("{name} (IPv6)")
}

/// A named, ordered set of Backend Services used like one.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendGroup {
    /// Unique name (shared namespace with Backend Services).
    pub name: String,
    /// Member Backend Service names, in row order.
    pub members: Vec<String>,
    /// Backup flag of the whole group (S-BK7).
    pub backup: bool,
    /// Maintenance of the whole group (S-MT6).
    pub maintenance: bool,
}

/// A listener that distributes traffic over a list.
#[derive(Clone, Debug, PartialEq)]
pub struct VService {
    /// Unique name.
    pub name: String,
    /// Kind and protocol.
    pub kind: VServiceKind,
    /// Listening address (the VIP).
    pub address: IpAddr,
    /// Network vServices: a second VIP, IPv6, when `address` is IPv4 (dual stack). Both
    /// VIPs share the name, lists and backends; each forwards within its own family.
    pub address6: Option<Ipv6Addr>,
    /// Port or ports.
    pub ports: PortSpec,
    /// Network vServices: forwarding mode.
    pub forwarding: Forwarding,
    /// Network vServices: Maglev table size (prime). Unused by L7 vServices.
    pub maglev_size: u32,
    /// The Default list: Backend Service or Group names in order. A member whose
    /// Backup flag is on is a backup of this list.
    pub backends: Vec<String>,
    /// Network vServices: apply Backup and Maintenance (off by default, S-BK10, S-MT7).
    pub apply_admin_state: bool,
    /// HTTP and L7 TCP vServices: proxy settings (None for Network vServices).
    pub l7: Option<L7Settings>,
}

impl VService {
    /// Its VIPs: `address`, then `address6` when the vService is dual-stack.
    pub fn vips(&self) -> impl Iterator<Item = IpAddr> {
        std::iter::once(self.address).chain(self.address6.map(IpAddr::V6))
    }
}

/// Retries per request when a vService does not set `retries`.
pub const DEFAULT_RETRIES: u32 = 2;
/// Share of a vService's requests that may be retries when it does not set `retry_budget`
/// (Envoy's default budget).
pub const DEFAULT_RETRY_BUDGET: u32 = 20;

/// When a request or connection goes to another server (S-RT1, S-RT2): HAProxy's `retries`,
/// `retry-on` and `option redispatch` together, with Envoy's retry budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Other servers one request (HTTP) or connection (L7 TCP) may try. Default 2; 0 answers
    /// 502 (closes) at the first failure.
    pub retries: u32,
    /// Connecting failed (refused, unreachable, timed out): nothing reached the server, so
    /// any method may go elsewhere. `connect-failure` in `retry_on`; on by default.
    pub on_connect_failure: bool,
    /// HTTP: the connection closed or reset after the request went and before any byte of
    /// the answer; only idempotent requests whose body was held whole are sent again.
    /// `empty-response`; on by default.
    pub on_empty_response: bool,
    /// HTTP: no answer within the server timeout; idempotent requests as above, and each try
    /// waits its own server timeout. `response-timeout`; off by default.
    pub on_response_timeout: bool,
    /// Retries a vService may make, as a percentage of its requests, so a failing server
    /// cannot double the load on the others (a few are always allowed). Default 20.
    pub budget_percent: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            retries: DEFAULT_RETRIES,
            on_connect_failure: true,
            on_empty_response: true,
            on_response_timeout: false,
            budget_percent: DEFAULT_RETRY_BUDGET,
        }
    }
}

/// Settings of an HTTP or L7 TCP vService.
#[derive(Clone, Debug, PartialEq)]
pub struct L7Settings {
    /// How a backend is chosen among the eligible ones. Default round robin.
    pub algorithm: Algorithm,
    /// Persistence of clients to backends. Default none.
    pub persistence: Persistence,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Requests (HTTP) or connections (L7 TCP) that may wait per backend at its connection
    /// limit; a full queue or a queue timeout answers 503 / closes. Default 1024.
    pub queue_size: usize,
    /// When a request or connection may go to another server of its list.
    pub retry: RetryPolicy,
    /// HTTP only: TLS towards clients (HTTP/1.1 and HTTP/2 by ALPN). None: plain (HTTP/1.1
    /// and h2c).
    pub tls: Option<TlsSettings>,
    /// HTTP only: body of the 503 answer when nothing can serve (file contents, read at load);
    /// None: a built-in plain page.
    pub error_page: Option<String>,
    /// HTTP only: add X-Forwarded-For and X-Forwarded-Proto. Default true.
    pub forwarded_headers: bool,
    /// HTTP only: Conditional Backend Services sets, in order; first match wins, else the
    /// Default list (`VService::backends`).
    pub conditional_sets: Vec<ConditionalSet>,
}

/// Backend choice algorithm of an L7 vService.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// Each eligible backend in turn.
    RoundRobin,
    /// In turn, in proportion to weights (smooth weighted round robin).
    WeightedRoundRobin,
    /// Fewest open connections.
    LeastConnections,
    /// Fewest open connections relative to weight.
    WeightedLeastConnections,
    /// Hash of the client's source address.
    SourceIpHash,
    /// The first eligible backend in list order until its connection limit, then the next.
    First,
    /// Random, in proportion to weights.
    WeightedRandom,
    /// Power of two choices over in-flight requests (Envoy's LEAST_REQUEST): of two distinct
    /// members drawn at random by weight, the one with fewer in-flight requests per unit of
    /// weight. Near least-connections' spread at the cost of two reads, with no shared turn
    /// state between proxy threads.
    LeastRequest,
    /// Latency-aware power of two choices (tower's `PeakEwma`, linkerd's default): of two
    /// members drawn at random by weight, the one with the lower peak-sensitive moving
    /// average of time to answer times (in-flight + 1), per unit of weight. A server that
    /// slows down loses traffic at its first slow answer, not after a round of timeouts.
    PeakEwma,
}

/// Persistence (session affinity) of an L7 vService.
#[derive(Clone, Debug, PartialEq)]
pub enum Persistence {
    /// None.
    None,
    /// HTTP only: an inserted cookie naming the backend.
    Cookie(CookiePersistence),
    /// The client's source address is pinned to a backend until idle for `idle`.
    SourceIp {
        /// Idle expiry. Default 30 min.
        idle: Duration,
    },
}

/// The inserted persistence cookie.
#[derive(Clone, Debug, PartialEq)]
pub struct CookiePersistence {
    /// Cookie name. Default `LBSERVER`.
    pub name: String,
    /// HttpOnly attribute. Default true.
    pub http_only: bool,
    /// Secure attribute. Default false.
    pub secure: bool,
    /// SameSite attribute. Default Lax.
    pub same_site: SameSite,
}

/// SameSite attribute of the persistence cookie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SameSite {
    /// `SameSite=Strict`.
    Strict,
    /// `SameSite=Lax`.
    Lax,
    /// `SameSite=None`.
    None,
}

/// Timeouts of an L7 vService.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Connecting to a backend. Default 5 s.
    pub connect: Duration,
    /// Client inactivity: headers must arrive, and a client may stay idle, this long
    /// (cuts slowloris). Default 30 s.
    pub client: Duration,
    /// Backend inactivity while a response is awaited or streamed. Default 30 s.
    pub server: Duration,
    /// Waiting in a backend's queue at its connection limit. Default 5 s.
    pub queue: Duration,
    /// Idle keep-alive connections: a client's between HTTP/1.1 requests or with no HTTP/2
    /// stream open, and pooled upstream ones. Default 60 s.
    pub keep_alive: Duration,
}

/// TLS certificate and key (PEM files).
#[derive(Clone, Debug, PartialEq)]
pub struct TlsSettings {
    /// Certificate chain, PEM.
    pub cert: PathBuf,
    /// Private key, PEM.
    pub key: PathBuf,
}

/// One Conditional Backend Services set of an HTTP vService.
#[derive(Clone, Debug, PartialEq)]
pub struct ConditionalSet {
    /// Unique within its vService.
    pub name: String,
    /// All must match (AND); at least one.
    pub conditions: Vec<Condition>,
    /// The set's own list (mains and backups by their Backup flag, S-BK6).
    pub backends: Vec<String>,
}

/// One condition of a Conditional set.
#[derive(Clone, Debug, PartialEq)]
pub enum Condition {
    /// The Host header (without port), case-insensitive.
    Host(StrMatch),
    /// The request path (without query).
    Path(StrMatch),
    /// A request header's value (name case-insensitive); absent header never matches.
    Header {
        /// Header name.
        name: String,
        /// How its value must match.
        value: StrMatch,
    },
    /// One of these methods (upper case).
    Method(Vec<String>),
    /// The client's source address is in one of these networks (`addr/len`).
    SourceCidr(Vec<(IpAddr, u8)>),
}

/// How a string must match.
#[derive(Clone, Debug, PartialEq)]
pub enum StrMatch {
    /// Equal.
    Exact(String),
    /// Starts with.
    Prefix(String),
    /// Ends with.
    Suffix(String),
    /// Matches this regular expression (validated at load).
    Regex(String),
}

/// Kind of a vService.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VServiceKind {
    /// Network vService, TCP-L4.
    TcpL4,
    /// Network vService, UDP-L4.
    UdpL4,
    /// Network vService, every protocol to the VIP.
    AnyL3,
    /// HTTP vService (L7): a backend per request.
    Http,
    /// L7 TCP vService: the proxy opens its own connection to a backend.
    L7Tcp,
}

impl VServiceKind {
    /// True for kinds forwarded by the XDP data path.
    pub fn is_network(self) -> bool {
        matches!(self, Self::TcpL4 | Self::UdpL4 | Self::AnyL3)
    }
}

/// The port part of a vService.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortSpec {
    /// One port.
    Single(u16),
    /// An inclusive Port Range, start <= end.
    Range(u16, u16),
    /// Every port and protocol (ANY-L3).
    Any,
}

/// Forwarding mode of a Network vService.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forwarding {
    /// Destination NAT; replies come back through the balancer.
    Nat,
    /// Direct server return; only the destination MAC changes.
    Dsr,
    /// Tunnel forwarding (S-TN1): the packet goes unchanged inside an outer IP header of its
    /// family (IPIP, IP6IP6) addressed to the backend, which may sit behind routers; its
    /// agent (`lb decap`) removes the outer header and it answers the client directly.
    Ipip,
    /// Tunnel forwarding through GUE (S-TN1): the packet goes unchanged after an outer IP
    /// header, UDP to `[xdp] gue_port` and a GUE header; the rest as `Ipip`.
    Gue,
}

impl Forwarding {
    /// The mode's name in the configuration file and the API.
    pub fn name(self) -> &'static str {
        match self {
            Forwarding::Nat => "nat",
            Forwarding::Dsr => "dsr",
            Forwarding::Ipip => "ipip",
            Forwarding::Gue => "gue",
        }
    }

    /// True when replies go from the backend straight to the client (DSR, tunnels): the
    /// balancer keeps no reverse translation and leaves ports and hop limits alone.
    pub fn is_direct(self) -> bool {
        !matches!(self, Forwarding::Nat)
    }

    /// True for the tunnel modes (`ipip`, `gue`): backends may sit behind routers, run the
    /// agent, and are health-checked through the tunnel.
    pub fn is_tunnel(self) -> bool {
        matches!(self, Forwarding::Ipip | Forwarding::Gue)
    }
}

/// A DNS vService (S-GS): authoritative for one zone, answering each configured name with
/// the addresses of the sites that can serve it, standbys only when no active site can.
#[derive(Clone, Debug, PartialEq)]
pub struct DnsVService {
    /// Unique name (shared namespace with the other vServices).
    pub name: String,
    /// Listening address (UDP and TCP).
    pub address: IpAddr,
    /// Listening port (UDP and TCP). Default 53.
    pub port: u16,
    /// Zone it is authoritative for: lower case, absolute (trailing dot), e.g. `gslb.example.`.
    pub zone: String,
    /// TTL of the answers, in seconds. Default 30.
    pub ttl: u32,
    /// Period between two polls of a site's API. Default 2 s.
    pub poll_period: Duration,
    /// Timeout of one poll. Default 1 s.
    pub poll_timeout: Duration,
    /// Queries per second accepted from one source address (the burst is the same number);
    /// more are dropped and counted. 0 turns the limit off. Default 50.
    pub rate_limit: u32,
    /// The names it answers, each with its site services.
    pub records: Vec<DnsRecord>,
}

/// One name of a DNS vService and the site services behind it.
#[derive(Clone, Debug, PartialEq)]
pub struct DnsRecord {
    /// Absolute lower-case name inside the zone, with a trailing dot (`www.gslb.example.`).
    pub name: String,
    /// How the answer orders the sites that can serve. Default round robin.
    pub policy: DnsPolicy,
    /// Most addresses in one answer. Default 1.
    pub answers: u32,
    /// What round robin does with a site whose daemon does not answer (No Connection).
    pub unreachable: Unreachable,
    /// Site services, in configuration order.
    pub sites: Vec<SiteService>,
}

/// A site whose daemon cannot be reached (No Connection) may be up or down: nothing says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unreachable {
    /// Answered only when no site of the name is known to be able to serve, so an
    /// unreachable active site hands over to its standby (`unreachable = "skip"`). The
    /// default.
    #[default]
    Skip,
    /// Answered like a site that can serve (`unreachable = "serve"`): for sites whose
    /// daemons are often unreachable from here while they serve well.
    Serve,
}

/// Order of the sites in a DNS answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnsPolicy {
    /// Each site in turn. Sites whose status is unknown (No Metrics, No Connection) take
    /// part too, since nothing says they are down.
    RoundRobin,
    /// In turn, in proportion to the sites' weights; only sites with status OK.
    Weighted,
    /// Fewest current sessions at the site first; only sites with status OK (fresh metrics).
    LeastLoaded,
}

/// One site's instance of the service behind a DNS name.
#[derive(Clone, Debug, PartialEq)]
pub struct SiteService {
    /// Unique within its name.
    pub name: String,
    /// IPv4 address handed out in A answers (the site's VIP), if any.
    pub ipv4: Option<Ipv4Addr>,
    /// IPv6 address handed out in AAAA answers, if any.
    pub ipv6: Option<Ipv6Addr>,
    /// The site daemon's API base URL, `http://host:port`, polled for the status (S-GS4).
    pub api: String,
    /// Bearer token of the site's API, if it needs one.
    pub token: Option<String>,
    /// Name of the vService at that site.
    pub vservice: String,
    /// Standby: handed out only while no active site of the name can serve (S-GS1).
    pub standby: bool,
    /// Weight for the weighted policy (1..=1000). Default 1.
    pub weight: u32,
}
