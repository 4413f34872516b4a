//! What serde reads: the file as written, before any check. [`document`] turns TOML text
//! into these structs section by section (one bad entry does not hide the others),
//! [`recover`] reports every problem of a table rather than serde's first, and [`syntax`]
//! keeps a TOML syntax error from stopping the checks of the other tables. The structs
//! mirror the schema with spans kept on every value a check may point at. Nothing here
//! knows a behaviour rule (docs/behaviour.md).
//!
//! Numbers are read as `i64` (and durations as `f64`) so that range errors can be reported
//! in the operator's terms rather than as a serde integer-overflow message.

pub(in crate::config) mod dns;
pub(in crate::config) mod document;
pub(in crate::config) mod l7;
pub(in crate::config) mod recover;
pub(in crate::config) mod syntax;
mod tree;
use serde::Deserialize;
use serde_spanned::Spanned;

pub(in crate::config) use l7::{
    RawAlgorithm, RawConditionalSet, RawHeader, RawPersistence, RawPersistenceType, RawSameSite,
    RawTimeouts, RawTls,
};

/// `[xdp]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawXdp {
    pub pin_dir: Option<Spanned<String>>,
    pub conn_table_size: Option<Spanned<i64>>,
    pub flood_guard_rate: Option<Spanned<i64>>,
    pub interfaces: Option<Vec<Spanned<String>>>,
    pub attach_mode: Option<RawAttachMode>,
    pub tunnel_source_v4: Option<Spanned<String>>,
    pub tunnel_source_v6: Option<Spanned<String>>,
    pub gue_port: Option<Spanned<i64>>,
}

/// `xdp.attach_mode`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(in crate::config) enum RawAttachMode {
    Drv,
    Skb,
}

/// `[proxy]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawProxy {
    pub workers: Option<Spanned<i64>>,
    pub sched_slice_us: Option<Spanned<i64>>,
    pub max_header_bytes: Option<Spanned<i64>>,
    pub max_header_line_bytes: Option<Spanned<i64>>,
}

/// `[reflection]`: durations in seconds.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawReflection {
    pub network_remove_delay: Option<Spanned<f64>>,
    pub network_add_delay: Option<Spanned<f64>>,
    pub l7_delay: Option<Spanned<f64>>,
}

/// One `[[health_check]]`: common fields plus every type-specific one, checked per type.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawHealthCheck {
    pub name: Spanned<String>,
    #[serde(rename = "type")]
    pub kind: Spanned<RawHealthType>,
    pub period: Option<Spanned<f64>>,
    pub timeout: Option<Spanned<f64>>,
    pub required_successes: Option<Spanned<i64>>,
    pub required_failures: Option<Spanned<i64>>,
    pub passive_failures: Option<Spanned<i64>>,
    pub passive_return: Option<Spanned<f64>>,
    pub max_ejection_percent: Option<Spanned<i64>>,
    pub method: Option<Spanned<String>>,
    pub path: Option<Spanned<String>>,
    pub host: Option<Spanned<String>>,
    pub expect_status: Option<Spanned<Vec<Spanned<i64>>>>,
    pub body_contains: Option<Spanned<String>>,
    pub verify_tls: Option<Spanned<bool>>,
    pub query_name: Option<Spanned<String>>,
    pub query_type: Option<Spanned<toml::Value>>,
    pub handshake: Option<Spanned<String>>,
}

/// `health_check.type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(in crate::config) enum RawHealthType {
    Ping,
    Tcp,
    Http,
    Https,
    Dns,
    Passive,
}

impl RawHealthType {
    /// The TOML spelling, for messages.
    pub(in crate::config) fn as_str(self) -> &'static str {
        match self {
            Self::Ping => "ping",
            Self::Tcp => "tcp",
            Self::Http => "http",
            Self::Https => "https",
            Self::Dns => "dns",
            Self::Passive => "passive",
        }
    }
}

/// One `[[backend_service]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawBackendService {
    pub name: Spanned<String>,
    pub address: Spanned<String>,
    pub address6: Option<Spanned<String>>,
    pub port: Spanned<i64>,
    pub weight: Option<Spanned<i64>>,
    pub health_check: Option<Spanned<String>>,
    #[serde(default)]
    pub maintenance: bool,
    #[serde(default)]
    pub backup: bool,
    pub max_connections: Option<Spanned<i64>>,
}

/// One `[[backend_group]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawBackendGroup {
    pub name: Spanned<String>,
    pub members: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    pub backup: bool,
    #[serde(default)]
    pub maintenance: bool,
}

/// One `[[vservice]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawVService {
    pub name: Spanned<String>,
    pub kind: Spanned<RawVServiceKind>,
    pub address: Spanned<String>,
    pub address6: Option<Spanned<String>>,
    pub port: Option<Spanned<i64>>,
    pub port_range: Option<Spanned<toml::Value>>,
    pub forwarding: Option<Spanned<RawForwarding>>,
    pub maglev_size: Option<Spanned<i64>>,
    pub backends: Option<Spanned<Vec<Spanned<String>>>>,
    pub apply_admin_state: Option<Spanned<bool>>,
    pub algorithm: Option<Spanned<RawAlgorithm>>,
    pub queue_size: Option<Spanned<i64>>,
    pub retries: Option<Spanned<i64>>,
    pub retry_on: Option<Spanned<Vec<Spanned<String>>>>,
    pub retry_budget: Option<Spanned<i64>>,
    pub error_page: Option<Spanned<String>>,
    pub forwarded_headers: Option<Spanned<bool>>,
    pub persistence: Option<Spanned<RawPersistence>>,
    pub timeouts: Option<Spanned<RawTimeouts>>,
    pub tls: Option<Spanned<RawTls>>,
    pub conditional_set: Option<Spanned<Vec<Spanned<RawConditionalSet>>>>,
}

/// `vservice.kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(in crate::config) enum RawVServiceKind {
    TcpL4,
    UdpL4,
    AnyL3,
    Http,
    L7Tcp,
}

impl RawVServiceKind {
    /// The TOML spelling, for messages.
    pub(in crate::config) fn as_str(self) -> &'static str {
        match self {
            Self::TcpL4 => "tcp-l4",
            Self::UdpL4 => "udp-l4",
            Self::AnyL3 => "any-l3",
            Self::Http => "http",
            Self::L7Tcp => "l7-tcp",
        }
    }

    /// True for the kinds served by the userspace proxy (http, l7-tcp).
    pub(in crate::config) fn is_l7(self) -> bool {
        matches!(self, Self::Http | Self::L7Tcp)
    }
}

/// `vservice.forwarding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(in crate::config) enum RawForwarding {
    Nat,
    Dsr,
    Ipip,
    Gue,
}

/// `[api]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawApi {
    pub listen: Option<Spanned<String>>,
    pub token: Option<Spanned<String>>,
    pub cert: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
    pub client_ca: Option<Spanned<String>>,
    pub insecure_plaintext: Option<Spanned<bool>>,
    pub socket: Option<Spanned<String>>,
    pub socket_mode: Option<Spanned<String>>,
}

/// `[bgp]`: route announcement through BIRD (S-AN).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawBgp {
    pub enabled: Option<Spanned<bool>>,
    pub table: Option<Spanned<RawTable>>,
    pub device: Option<Spanned<String>>,
    pub announce_delay: Option<Spanned<f64>>,
}

/// `bgp.table`: a number or a name from `/etc/iproute2/rt_tables`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(in crate::config) enum RawTable {
    Id(i64),
    Name(String),
}

/// `[cluster]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawCluster {
    pub store: Option<Spanned<String>>,
    pub node_name: Option<Spanned<String>>,
    pub etcd: Option<Spanned<RawEtcd>>,
    pub manual_sync: Option<Spanned<bool>>,
    pub peer: Option<Spanned<Vec<Spanned<RawPeer>>>>,
    pub ca: Option<Spanned<String>>,
    pub cert: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
}

/// `[cluster.etcd]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawEtcd {
    pub endpoints: Spanned<Vec<Spanned<String>>>,
    pub prefix: Option<Spanned<String>>,
    pub username: Option<Spanned<String>>,
    pub password: Option<Spanned<String>>,
    pub ca_file: Option<Spanned<String>>,
    pub cert_file: Option<Spanned<String>>,
    pub key_file: Option<Spanned<String>>,
    pub timeout: Option<Spanned<f64>>,
}

/// One `[[cluster.peer]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawPeer {
    pub name: Spanned<String>,
    pub url: Spanned<String>,
    pub token: Option<Spanned<String>>,
}
