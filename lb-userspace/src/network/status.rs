//! Reading back what the data path holds and counts, for `lb status` and tests.

use anyhow::Result;
use lb_common::*;
use serde::Serialize;

use crate::network::loading::loader::DataPath;
use crate::network::writing::maps::Maps;

/// Names of the global counters, in index order.
const GLOBAL_NAMES: [(&str, u32); 18] = [
    ("malformed", GLOBAL_MALFORMED),
    ("not_ip", GLOBAL_NOT_IP),
    ("fragment", GLOBAL_FRAGMENT),
    ("no_vip", GLOBAL_NO_VIP),
    ("no_backend_drop", GLOBAL_NO_BACKEND),
    ("fib_pass", GLOBAL_FIB_PASS),
    ("ttl_expired", GLOBAL_TTL_EXPIRED),
    ("nat_reply", GLOBAL_NAT_REPLY),
    ("fib_lookup", GLOBAL_FIB_LOOKUP),
    ("ipv6_ext", GLOBAL_IPV6_EXT),
    ("too_big", GLOBAL_TOO_BIG),
    ("icmp_too_big", GLOBAL_ICMP_TOO_BIG),
    ("flood_unrecorded", GLOBAL_FLOOD_UNRECORDED),
    ("bad_checksum", GLOBAL_BAD_CHECKSUM),
    ("bad_ip_options", GLOBAL_BAD_IP_OPTIONS),
    ("martian_source", GLOBAL_MARTIAN_SOURCE),
    ("tunnelled", GLOBAL_TUNNELLED),
    ("tunnel_failed", GLOBAL_TUNNEL_FAILED),
];

/// Everything `lb status` shows.
#[derive(Clone, Debug, Serialize)]
pub struct Status {
    /// One entry per Network vService.
    pub vips: Vec<VipStatus>,
    /// Global counters by name.
    pub global: Vec<(&'static str, u64)>,
    /// New flows per second and CPU the connection table records at most (0: all).
    pub flood_limit: u32,
}

/// One VIP with its counters and backends.
#[derive(Clone, Debug, Serialize)]
pub struct VipStatus {
    /// vService name.
    pub name: String,
    /// VIP address.
    pub address: String,
    /// "tcp", "udp" or "any".
    pub proto: String,
    /// "80", "1000-2000" or "*".
    pub ports: String,
    /// "nat" or "dsr".
    pub mode: String,
    /// Maglev table size in use (0: no backend takes new flows).
    pub table_size: u32,
    /// Digest of the table in use (16 hex digits; empty without table): balancers whose
    /// digests agree send every flow of this VIP to the same backend.
    pub table_digest: String,
    /// Counters summed over CPUs.
    #[serde(serialize_with = "ser_counters")]
    pub counters: Counters,
    /// Backends in list order.
    pub backends: Vec<BackendStatus>,
}

/// One backend slot with its counters.
#[derive(Clone, Debug, Serialize)]
pub struct BackendStatus {
    /// Backend Service name.
    pub name: String,
    /// Address.
    pub address: String,
    /// Port (0: the client's destination port).
    pub port: u16,
    /// Weight.
    pub weight: u32,
    /// False when removed for failure.
    pub active: bool,
    /// Counters summed over CPUs.
    #[serde(serialize_with = "ser_counters")]
    pub counters: Counters,
}

fn ser_counters<S: serde::Serializer>(c: &Counters, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct;
    let mut st = s.serialize_struct("Counters", 7)?;
    st.serialize_field("packets", &c.packets)?;
    st.serialize_field("bytes", &c.bytes)?;
    st.serialize_field("new_flows", &c.new_flows)?;
    st.serialize_field("drops", &c.drops)?;
    st.serialize_field("ct_misses", &c.ct_misses)?;
    st.serialize_field("reply_packets", &c.reply_packets)?;
    st.serialize_field("reply_bytes", &c.reply_bytes)?;
    st.end()
}

impl DataPath {
    /// Reads every VIP's counters and the global counters.
    pub fn status(&self) -> Result<Status> {
        let mut vips = Vec::new();
        for v in &self.state.vips {
            let mut backends = Vec::new();
            for b in &v.backends {
                backends.push(BackendStatus {
                    name: b.name.to_string(),
                    address: b.address.to_string(),
                    port: b.port,
                    weight: b.weight,
                    active: b.active,
                    counters: self.maps.backend_stats.sum(b.counters)?,
                });
            }
            vips.push(VipStatus {
                name: v.name.clone(),
                address: v.address.to_string(),
                proto: match v.proto {
                    6 => "tcp".into(),
                    17 => "udp".into(),
                    _ => "any".into(),
                },
                ports: if v.proto == PROTO_ANY {
                    "*".into()
                } else if v.ports.0 == v.ports.1 {
                    v.ports.0.to_string()
                } else {
                    format!("{}-{}", v.ports.0, v.ports.1)
                },
                mode: match (v.tunnel, v.gue, v.dsr) {
                    (true, true, _) => "gue".into(),
                    (true, false, _) => "ipip".into(),
                    (false, _, true) => "dsr".into(),
                    (false, _, false) => "nat".into(),
                },
                table_size: v.table_size,
                table_digest: crate::network::tables::table::digest_text(v.table_digest),
                counters: Maps::sum_counters(&self.maps.vip_stats, v.vip_id)?,
                backends,
            });
        }
        let mut global = Vec::new();
        for (name, index) in GLOBAL_NAMES {
            let per_cpu = self.maps.global_stats.get(&index, 0)?;
            global.push((name, per_cpu.iter().sum()));
        }
        Ok(Status {
            vips,
            global,
            flood_limit: self.maps.flood_limit()?,
        })
    }
}
