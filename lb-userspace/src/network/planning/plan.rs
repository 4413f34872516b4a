//! What the XDP maps should hold, derived from the configuration and backend health.

use std::net::IpAddr;
use std::sync::Arc;

use anyhow::{Result, bail};

use crate::config::{
    ByName, Config, FastMap, FastSet, Forwarding, PortSpec, VService, VServiceKind,
};
use crate::selection::{ApplyAdmin, ApplyHealth, Health, Model, Policy};

/// One Network vService as the data path sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct VipPlan {
    /// vService name.
    pub name: String,
    /// The VIP.
    pub address: IpAddr,
    /// IP protocol (6, 17) or 0 for ANY-L3.
    pub proto: u8,
    /// Inclusive port range; a single port is (p, p); ANY-L3 is (0, 0).
    pub ports: (u16, u16),
    /// Replies go from the backend straight to the client (DSR or a tunnel), not through
    /// the balancer (NAT).
    pub dsr: bool,
    /// Delivered by tunnel (IPIP, IP6IP6 or GUE) rather than at L2.
    pub tunnel: bool,
    /// The tunnel is GUE.
    pub gue: bool,
    /// Maglev table size (prime).
    pub table_size: u32,
    /// The list, groups expanded, in order; shared by the VIPs whose lists, selection
    /// policies and families are the same (they plan alike).
    pub backends: Arc<[BackendPlan]>,
}

/// One backend of a VIP.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendPlan {
    /// Backend Service name (shared, not copied, by every VIP that lists it).
    pub name: Arc<str>,
    /// Its address.
    pub address: IpAddr,
    /// Its port (0 keeps the client's destination port).
    pub port: u16,
    /// Maglev weight; 0 drains (flows stay, no new ones).
    pub weight: u32,
    /// False when it may not keep flows (failed, Preparing): its flows re-hash.
    pub active: bool,
}

/// Builds the plan of every Network VIP (one per vService, two for a dual-stack one) from
/// the selection model, with `health` giving each health key's state (see
/// [`crate::config::BackendService::health_key`]) as Network traffic sees it. Eligible members are
/// active with their weight; drained ones (weight 0, or kept out by Backup/Maintenance
/// when `apply_admin_state` is on) stay active with weight 0, so their flows continue;
/// Preparing and Error members are inactive, so their flows re-hash.
pub fn plan(cfg: &Config, health: &dyn Fn(&str) -> Health) -> Result<Vec<VipPlan>> {
    let model = Model::from_config(cfg);
    let mut out = Vec::new();
    let by_name = ByName::new(cfg);
    let names: FastMap<&str, Arc<str>> = cfg
        .backend_services
        .iter()
        .map(|s| (s.name.as_str(), Arc::from(s.name.as_str())))
        .collect();
    let planner = Planner {
        model: &model,
        by_name: &by_name,
        names: &names,
        health,
    };
    // One plan per distinct list: 1,000 VIPs over one farm are planned once, not 1,000
    // times (what a backend failing on all of them costs).
    let mut lists: FastMap<ListKey<'_>, Arc<[BackendPlan]>> = FastMap::default();
    for vs in cfg.vservices.iter().filter(|v| v.kind.is_network()) {
        let (proto, ports) = match (vs.kind, vs.ports) {
            (VServiceKind::AnyL3, _) | (_, PortSpec::Any) => (0, (0, 0)),
            (VServiceKind::TcpL4, PortSpec::Single(p)) => (6, (p, p)),
            (VServiceKind::TcpL4, PortSpec::Range(a, b)) => (6, (a, b)),
            (VServiceKind::UdpL4, PortSpec::Single(p)) => (17, (p, p)),
            (VServiceKind::UdpL4, PortSpec::Range(a, b)) => (17, (a, b)),
            (VServiceKind::Http | VServiceKind::L7Tcp, _) => continue,
        };
        let policy = Policy::for_vservice(vs);
        for address in vs.vips() {
            let key = (
                vs.backends.as_slice(),
                policy.admin == ApplyAdmin::Yes,
                policy.health == ApplyHealth::Yes,
                address.is_ipv6(),
            );
            let backends = match lists.get(&key) {
                Some(b) => b.clone(),
                None => {
                    let b: Arc<[BackendPlan]> = planner.backends(vs, address, policy)?.into();
                    lists.insert(key, b.clone());
                    b
                }
            };
            out.push(VipPlan {
                name: vs.name.clone(),
                address,
                proto,
                ports,
                dsr: vs.forwarding.is_direct(),
                tunnel: vs.forwarding.is_tunnel(),
                gue: vs.forwarding == Forwarding::Gue,
                table_size: vs.maglev_size,
                backends,
            });
        }
    }
    Ok(out)
}

/// What makes two VIPs plan alike: the list as written, the policy (admin state applied,
/// health applied) and the VIP's family (which address of each backend is used).
type ListKey<'a> = (&'a [String], bool, bool, bool);

/// What planning one list reads.
struct Planner<'a> {
    model: &'a Model,
    by_name: &'a ByName<'a>,
    /// Each Backend Service's name, allocated once per plan.
    names: &'a FastMap<&'a str, Arc<str>>,
    health: &'a dyn Fn(&str) -> Health,
}

impl Planner<'_> {
    /// The backends of a VIP of `vs` at `address` (a dual-stack vService has two VIPs).
    /// Each backend takes part with its address of the VIP's family and that address's
    /// health.
    fn backends(&self, vs: &VService, address: IpAddr, policy: Policy) -> Result<Vec<BackendPlan>> {
        let (model, by_name, health) = (self.model, self.by_name, self.health);
        let family_health = |name: &str| match by_name.service(name) {
            Some(svc) => health(&svc.health_key(svc.address_for(address).unwrap_or(svc.address))),
            None => health(name),
        };
        let selection = model.select_list(&vs.backends, &family_health, policy);
        // By name, so a list of thousands of backends is planned in linear time.
        let eligible: FastMap<&str, u32> = selection
            .eligible
            .iter()
            .map(|e| (e.name.as_str(), e.weight))
            .collect();
        let drained: FastSet<&str> = selection.drained.iter().map(String::as_str).collect();
        let mut out = Vec::with_capacity(vs.backends.len());
        let mut seen = FastSet::default();
        for member in &vs.backends {
            let names: Vec<&str> = match by_name.group(member) {
                Some(group) => group.members.iter().map(String::as_str).collect(),
                None => vec![member.as_str()],
            };
            for name in names {
                if !seen.insert(name) {
                    continue;
                }
                let Some(svc) = model.service(name) else {
                    bail!("vservice {}: unknown backend service {name}", vs.name);
                };
                let (active, weight) = match eligible.get(name) {
                    Some(&weight) => (true, weight),
                    None => (drained.contains(name), 0),
                };
                // The configuration refuses this; a plan must never mix families either.
                let Some(backend_address) = svc.address_for(address) else {
                    bail!(
                        "vservice {}: backend service {name} has no {} address for the VIP \
                         {address} (no NAT46)",
                        vs.name,
                        family_name(address)
                    );
                };
                out.push(BackendPlan {
                    name: self
                        .names
                        .get(name)
                        .cloned()
                        .unwrap_or_else(|| Arc::from(name)),
                    address: backend_address,
                    port: svc.port,
                    weight,
                    active,
                });
            }
        }
        Ok(out)
    }
}

fn family_name(a: IpAddr) -> &'static str {
    if a.is_ipv4() { "IPv4" } else { "IPv6" }
}

/// Splits an inclusive port range into the fewest aligned prefixes (port, prefix bits).
pub fn range_prefixes(start: u16, end: u16) -> Vec<(u16, u32)> {
    let mut out = Vec::new();
    let (mut lo, hi) = (start as u32, end as u32);
    while lo <= hi {
        let mut size_bits = 0u32;
        while size_bits < 16 {
            let block = 1u32 << (size_bits + 1);
            if lo % block != 0 || lo + block - 1 > hi {
                break;
            }
            size_bits += 1;
        }
        out.push((lo as u16, 16 - size_bits));
        lo += 1 << size_bits;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covered(prefixes: &[(u16, u32)]) -> Vec<u32> {
        let mut ports = Vec::new();
        for &(base, bits) in prefixes {
            let n = 1u32 << (16 - bits);
            ports.extend((base as u32)..(base as u32 + n));
        }
        ports.sort();
        ports
    }

    /// A dual-stack vService is two VIPs over the same backends by name; each VIP uses the
    /// backends' address of its family and that address's own health.
    #[test]
    fn dual_stack_vservice_plans_one_vip_per_family() {
        let text = r#"
[[health_check]]
name = "tcp"
type = "tcp"

[[backend_service]]
name = "web1"
address = "10.0.1.1"
address6 = "2001:db8:1::1"
port = 80
health_check = "tcp"

[[backend_service]]
name = "web2"
address = "10.0.1.2"
address6 = "2001:db8:1::2"
port = 80
health_check = "tcp"

[[vservice]]
name = "web"
kind = "tcp-l4"
address = "192.0.2.1"
address6 = "2001:db8::1"
port = 80
backends = ["web1", "web2"]
"#;
        let cfg = crate::config::parse(text, "lb.toml").expect("valid");
        // web2 answers over IPv4 only.
        let health = |key: &str| {
            if key == "web2 (IPv6)" {
                Health::Error
            } else {
                Health::Ok
            }
        };
        let vips = plan(&cfg, &health).expect("plan");
        assert_eq!(vips.len(), 2);
        let [v4, v6] = [&vips[0], &vips[1]];
        assert_eq!((v4.name.as_str(), v6.name.as_str()), ("web", "web"));
        assert_eq!(v4.address.to_string(), "192.0.2.1");
        assert_eq!(v6.address.to_string(), "2001:db8::1");
        let show = |v: &VipPlan| -> Vec<(String, bool)> {
            v.backends
                .iter()
                .map(|b| (format!("{} {}", b.name, b.address), b.active))
                .collect()
        };
        assert_eq!(
            show(v4),
            [
                ("web1 10.0.1.1".to_string(), true),
                ("web2 10.0.1.2".to_string(), true)
            ]
        );
        assert_eq!(
            show(v6),
            [
                ("web1 2001:db8:1::1".to_string(), true),
                ("web2 2001:db8:1::2".to_string(), false)
            ]
        );
    }

    #[test]
    fn range_prefixes_cover_exactly_the_range() {
        for (a, b) in [
            (1000, 2000),
            (0, 65535),
            (80, 80),
            (1, 2),
            (65534, 65535),
            (1023, 1024),
        ] {
            let p = range_prefixes(a, b);
            assert_eq!(
                covered(&p),
                (a as u32..=b as u32).collect::<Vec<_>>(),
                "{a}-{b}"
            );
            assert!(p.len() <= 32, "{a}-{b} used {} prefixes", p.len());
        }
        assert_eq!(range_prefixes(0, 65535), vec![(0, 0)]);
        assert_eq!(range_prefixes(80, 80), vec![(80, 16)]);
    }
}
