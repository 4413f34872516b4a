//! The validated configuration model: what the rest of the daemon reads.
//!
//! Everything here has already passed validation (names unique, references resolved,
//! ranges ordered, S-HC4 adjustments applied), so consumers never re-check it.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

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
}

/// How the XDP program is attached and sized.
#[derive(Clone, Debug, PartialEq)]
pub struct XdpSettings {
    /// bpffs directory holding the pinned program, maps and links. Default `/sys/fs/bpf/lb`.
    pub pin_dir: PathBuf,
    /// Connection-table size in flows. Default 1,048,576.
    pub conn_table_size: u32,
    /// Interfaces to attach to (may be overridden on the command line).
    pub interfaces: Vec<String>,
    /// Attach mode. Default driver (native).
    pub attach_mode: AttachMode,
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
}

/// Probe type of a health check profile.
#[derive(Clone, Debug, PartialEq)]
pub enum HealthKind {
    /// ICMP echo to the Backend Service's address.
    Ping,
    /// TCP connect to the Backend Service's address and port.
    Tcp,
    /// HTTP request.
    Http(HttpCheck),
    /// HTTPS request.
    Https(HttpCheck),
    /// DNS query over UDP.
    Dns(DnsCheck),
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
    /// Port or ports.
    pub ports: PortSpec,
    /// Network vServices: forwarding mode.
    pub forwarding: Forwarding,
    /// Network vServices: Maglev table size (prime).
    pub maglev_size: u32,
    /// The Default list: Backend Service or Group names in order. A member whose
    /// Backup flag is on is a backup of this list.
    pub backends: Vec<String>,
    /// Network vServices: apply Backup and Maintenance (off by default, S-BK10, S-MT7).
    pub apply_admin_state: bool,
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
}
