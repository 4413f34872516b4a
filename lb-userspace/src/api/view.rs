//! One consistent read of the running daemon (configuration, health, selections, counters)
//! and the JSON views built from it, shared by the REST resources, Live Stats and metrics.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde::Serialize;

use crate::config::{BackendService, ByName, Config, PortSpec, VService, VServiceKind};
use crate::daemon::{Daemon, HealthReport};
use crate::network::Status;
use crate::proxy::VsCounts;
use crate::proxy::balance::BackendStats;
use crate::selection::{ApplyAdmin, Health, ListSelection, Model, Policy, Selections, Tier};
use crate::stats::HistogramSnapshot;

/// L7 counters of one vService, read from the proxy.
#[derive(Clone, Debug, Default)]
pub(crate) struct L7Counters {
    /// The vService's own counters.
    pub counts: VsCounts,
    /// Per backend that has served it.
    pub backends: BTreeMap<String, BackendStats>,
    /// HTTP: from each request's head to its answer's last byte.
    pub request_time: HistogramSnapshot,
    /// Connects to its backends.
    pub connect_time: HistogramSnapshot,
}

/// Everything one answer needs, read once.
pub(crate) struct Snapshot {
    /// The running configuration.
    pub cfg: Arc<Config>,
    /// Health decisions and server states.
    pub report: HealthReport,
    /// What L7 traffic follows.
    pub l7: Arc<Selections>,
    /// XDP counters, when a data path runs and could be read.
    pub net: Option<Status>,
    /// Why the XDP counters could not be read.
    pub net_error: Option<String>,
    /// Proxy counters by vService, when the proxy runs.
    pub proxy: Option<BTreeMap<String, L7Counters>>,
}

impl Snapshot {
    /// Reads the daemon.
    pub(crate) fn take(daemon: &Daemon) -> Snapshot {
        let (net, net_error) = match daemon.network_status() {
            None => (None, None),
            Some(Ok(s)) => (Some(s), None),
            Some(Err(e)) => (None, Some(format!("{e:#}"))),
        };
        Snapshot {
            cfg: daemon.config(),
            report: daemon.health_report(),
            l7: daemon.selections(),
            net,
            net_error,
            proxy: super::sessions::l7_counters(daemon),
        }
    }

    /// The engine's decision for a service ("OK" for one the engine does not know yet).
    pub(crate) fn health(&self, name: &str) -> &str {
        self.report
            .services
            .get(name)
            .map_or("OK", |s| s.state.as_str())
    }

    /// Lookups for the lists of many vServices, built once per answer.
    pub(crate) fn list_index(&self) -> ListIndex<'_> {
        let network = self.cfg.vservices.iter().any(|v| v.kind.is_network());
        ListIndex {
            names: ByName::new(&self.cfg),
            model: network.then(|| Model::from_config(&self.cfg)),
        }
    }

    /// Selection of every list of `vs`: L7 lists as the proxy follows them, Network lists
    /// from the health the XDP maps follow (after the S-RF2 delays). From `idx`, built once
    /// per answer: no scan of every Backend Service per vService.
    pub(crate) fn lists_in(&self, idx: &ListIndex<'_>, vs: &VService) -> Vec<ListView> {
        let mut out = Vec::new();
        let policy = Policy::for_vservice(vs);
        let names = &idx.names;
        if vs.kind.is_network() {
            let built;
            let model = match &idx.model {
                Some(m) => m,
                None => {
                    built = Model::from_config(&self.cfg);
                    &built
                }
            };
            // A dual-stack vService's IPv6 VIP follows its backends' IPv6 health: its own list.
            for vip in vs.vips() {
                let health = |n: &str| {
                    let key = names.service(n).map_or(n.into(), |svc| {
                        svc.health_key(svc.address_for(vip).unwrap_or(svc.address))
                    });
                    let s = self
                        .report
                        .services
                        .get(key.as_ref())
                        .map_or("OK", |s| s.network.as_str());
                    parse_health(s)
                };
                let sel = model.select_list(&vs.backends, &health, policy);
                let name = if vip == vs.address {
                    "default"
                } else {
                    "default (IPv6)"
                };
                out.push(self.list_view(names, name, &vs.backends, Some(&sel), policy));
            }
            return out;
        }
        let lists = self.l7.lists.get(&vs.name);
        let default = lists.map(|l| &l.default);
        out.push(self.list_view(names, "default", &vs.backends, default, policy));
        for set in vs.l7.iter().flat_map(|l| &l.conditional_sets) {
            let sel = lists.and_then(|l| l.sets.iter().find(|(n, _)| *n == set.name));
            let sel = sel.map(|(_, s)| s);
            out.push(self.list_view(names, &set.name, &set.backends, sel, Policy::FULL));
        }
        out
    }

    fn list_view(
        &self,
        names: &ByName<'_>,
        name: &str,
        list: &[String],
        sel: Option<&ListSelection>,
        policy: Policy,
    ) -> ListView {
        let eligible: HashSet<&str> = sel
            .map(|s| s.eligible.iter().map(|e| e.name.as_str()).collect())
            .unwrap_or_default();
        let drained: HashSet<&str> = sel
            .map(|s| s.drained.iter().map(String::as_str).collect())
            .unwrap_or_default();
        let admin = policy.admin == ApplyAdmin::Yes;
        let members = expand(names, list)
            .into_iter()
            .map(|m| {
                let state = if eligible.contains(m.name.as_str()) {
                    "eligible"
                } else if drained.contains(m.name.as_str()) {
                    idle_state(&m, admin)
                } else {
                    "down"
                };
                MemberView {
                    role: if m.backup && admin { "backup" } else { "main" },
                    name: m.name,
                    state,
                }
            })
            .collect();
        ListView {
            name: name.to_string(),
            tier: sel.map_or_else(|| "none".to_string(), |s| tier_name(s.tier)),
            members,
        }
    }

    /// The counters shown for a vService: XDP ones for Network kinds, proxy ones for L7.
    pub(crate) fn counters(&self, vs: &VService) -> Option<serde_json::Value> {
        if vs.kind.is_network() {
            // Summed over its VIPs (two for a dual-stack vService).
            let mut c = lb_common::Counters::default();
            let mut found = false;
            for vip in self.net.as_ref()?.vips.iter().filter(|v| v.name == vs.name) {
                found = true;
                c.add(&vip.counters);
            }
            return found.then(|| serde_json::json!({
                "packets": c.packets, "bytes": c.bytes, "new_flows": c.new_flows, "drops": c.drops,
                "reply_packets": c.reply_packets, "reply_bytes": c.reply_bytes,
            }));
        }
        let l7 = self.proxy.as_ref()?.get(&vs.name)?;
        let mut all = BackendStats::default();
        l7.backends.values().for_each(|b| all.absorb(b));
        let c = &l7.counts;
        Some(serde_json::json!({
            "requests": c.requests, "current": all.current, "bytes_in": all.bytes_in,
            "bytes_out": all.bytes_out, "unavailable": c.unavailable, "retries": c.retries,
            "retries_refused": c.retries_refused, "client_aborts": c.client_aborts,
            "server_timeouts": c.server_timeouts, "upstream_aborts": c.upstream_aborts,
            "bad_requests": c.bad_requests, "failures": all.failures,
            "responses": StatusClasses::from(all.classes),
        }))
    }

    /// Lookups for many Backend Services, built once per answer.
    pub(crate) fn index(&self) -> BackendIndex<'_> {
        BackendIndex::build(self)
    }

    /// A Backend Service as Live Stats and `/backends` show it, from `idx` (O(1) per call).
    pub(crate) fn backend_in(&self, idx: &BackendIndex<'_>, name: &str) -> Option<BackendView> {
        let svc = *idx.services.get(name)?;
        let proxy = idx.proxy.get(name).cloned();
        let xdp: Option<lb_common::Counters> = idx.xdp.get(name).copied();
        let used_in = idx.used_in.get(name).cloned().unwrap_or_default();
        let in_l7 = used_in
            .iter()
            .any(|u| idx.l7_vservices.contains(u.vservice.as_str()));
        let proxy = proxy.or_else(|| (in_l7 && self.proxy.is_some()).then(BackendStats::default));
        let address6 = svc.address6.map(|a| a.to_string());
        let health6 = svc
            .address6
            .map(|a| self.health(&svc.health_key(a.into())).to_string());
        Some(BackendView {
            name: svc.name.clone(),
            address: svc.address.to_string(),
            address6,
            health6,
            port: svc.port,
            weight: svc.weight,
            health: self.health(name).to_string(),
            checked: self.report.services.get(name).is_some_and(|s| s.checked),
            maintenance: svc.maintenance,
            backup: svc.backup,
            server: self
                .report
                .servers
                .get(&svc.address.to_string())
                .cloned()
                .unwrap_or_else(|| "OK".into()),
            used_in,
            current_sessions: proxy.as_ref().map(|p| p.current),
            total: proxy.as_ref().map(|p| p.total),
            bytes_in: proxy.as_ref().map(|p| p.bytes_in),
            bytes_out: proxy.as_ref().map(|p| p.bytes_out),
            retries: proxy.as_ref().map(|p| p.retries),
            redispatches: proxy.as_ref().map(|p| p.redispatches),
            failures: proxy.as_ref().map(|p| p.failures),
            responses: proxy.as_ref().map(|p| StatusClasses::from(p.classes)),
            packets: xdp.map(|x| x.packets),
            bytes: xdp.map(|x| x.bytes),
            new_flows: xdp.map(|x| x.new_flows),
            reply_packets: xdp.map(|x| x.reply_packets),
            reply_bytes: xdp.map(|x| x.reply_bytes),
        })
    }

    /// A vService with its lists and counters.
    pub(crate) fn vservice(&self, vs: &VService) -> VServiceView {
        self.vservice_in(&self.list_index(), vs)
    }

    /// [`Snapshot::vservice`] from `idx`, for answers that show every vService.
    pub(crate) fn vservice_in(&self, idx: &ListIndex<'_>, vs: &VService) -> VServiceView {
        VServiceView {
            name: vs.name.clone(),
            kind: kind_name(vs.kind).to_string(),
            address: vs.address.to_string(),
            address6: vs.address6.map(|a| a.to_string()),
            ports: ports_text(vs.ports),
            mode: vs.kind.is_network().then_some(vs.forwarding.name()),
            lists: self.lists_in(idx, vs),
            counters: self.counters(vs),
        }
    }
}

/// One vService as shown.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct VServiceView {
    pub name: String,
    pub kind: String,
    pub address: String,
    /// The IPv6 VIP of a dual-stack Network vService.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address6: Option<String>,
    pub ports: String,
    /// Network vServices: "nat" (replies pass back through the balancer) or "dsr" (they
    /// bypass it, so there is nothing to count on the way out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<&'static str>,
    pub lists: Vec<ListView>,
    pub counters: Option<serde_json::Value>,
}

/// One list (Default or a Conditional set) with its tier and members.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ListView {
    /// "default" or the set's name.
    pub name: String,
    /// "mains", "backup N" (1-based) or "none".
    pub tier: String,
    /// Backend Services in list order, groups expanded.
    pub members: Vec<MemberView>,
}

/// One member of a list.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct MemberView {
    pub name: String,
    /// "main" or "backup".
    pub role: &'static str,
    /// "eligible" (takes new traffic), "standby" (healthy and available, not in use: a
    /// backup while a main or an earlier backup serves, S-BK1/S-BK3), "drained" (weight 0,
    /// S-BK11), "maintenance" (S-MT1) or "down" (health Preparing or Error). Standby,
    /// drained and maintenance members keep their open connections.
    pub state: &'static str,
}

/// Why a healthy member takes no new traffic: weight 0 drains it (S-BK11), Maintenance
/// closes it (when the list applies it), and otherwise it is a backup standing by because a
/// main or an earlier backup serves. Only weight 0 is "drained": an operator reading
/// "drained" next to a backup that merely waits would look for a drain nobody started.
fn idle_state(m: &Expanded, admin: bool) -> &'static str {
    if m.weight == 0 {
        "drained"
    } else if admin && m.maintenance {
        "maintenance"
    } else {
        "standby"
    }
}

/// Where a Backend Service (or group) is listed (S-OB2).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub(crate) struct UsedIn {
    pub vservice: String,
    /// "default" or the Conditional set's name.
    pub list: String,
}

/// A Backend Service with its state and counters (S-OB1).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct BackendView {
    pub name: String,
    pub address: String,
    /// The IPv6 address of a dual-stack service, checked on its own (`health6`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address6: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health6: Option<String>,
    pub port: u16,
    pub weight: u32,
    pub health: String,
    pub checked: bool,
    pub maintenance: bool,
    pub backup: bool,
    pub server: String,
    pub used_in: Vec<UsedIn>,
    pub current_sessions: Option<u64>,
    pub total: Option<u64>,
    pub bytes_in: Option<u64>,
    pub bytes_out: Option<u64>,
    /// L7: requests or connections sent again after failing on it.
    pub retries: Option<u64>,
    /// L7: of those, the ones that went to another Backend Service.
    pub redispatches: Option<u64>,
    /// L7: requests or connections that failed on it (refused, reset, timed out).
    pub failures: Option<u64>,
    /// HTTP: its answers by status class.
    pub responses: Option<StatusClasses>,
    /// XDP: packets and bytes from clients to it, new flows given to it.
    pub packets: Option<u64>,
    pub bytes: Option<u64>,
    pub new_flows: Option<u64>,
    /// XDP, NAT mode: its replies translated back to clients.
    pub reply_packets: Option<u64>,
    pub reply_bytes: Option<u64>,
}

/// HTTP answers by status class (the `code_class` of `lb_l7_responses_total`).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub(crate) struct StatusClasses {
    #[serde(rename = "1xx")]
    pub c1xx: u64,
    #[serde(rename = "2xx")]
    pub c2xx: u64,
    #[serde(rename = "3xx")]
    pub c3xx: u64,
    #[serde(rename = "4xx")]
    pub c4xx: u64,
    #[serde(rename = "5xx")]
    pub c5xx: u64,
}

impl From<[u64; 5]> for StatusClasses {
    fn from(c: [u64; 5]) -> Self {
        StatusClasses {
            c1xx: c[0],
            c2xx: c[1],
            c3xx: c[2],
            c4xx: c[3],
            c5xx: c[4],
        }
    }
}

/// Name lookups and the selection model, built once for the lists of every vService of one
/// answer (rebuilding them per vService costs services x vServices).
pub(crate) struct ListIndex<'c> {
    names: ByName<'c>,
    /// Only when there are Network vServices (it copies every Backend Service).
    model: Option<Model>,
}

/// Per Backend Service lookups built in one pass over the configuration and counters, so
/// Live Stats with 10,000 Backend Services costs O(services + list entries) per poll rather
/// than a scan of every list and counter per service.
pub(crate) struct BackendIndex<'s> {
    services: HashMap<&'s str, &'s BackendService>,
    /// Proxy counters summed over the vServices each one serves.
    proxy: HashMap<&'s str, BackendStats>,
    /// XDP counters summed over the VIPs.
    xdp: HashMap<&'s str, lb_common::Counters>,
    used_in: HashMap<&'s str, Vec<UsedIn>>,
    l7_vservices: HashSet<&'s str>,
}

impl<'s> BackendIndex<'s> {
    /// The Backend Service called `name`.
    pub(crate) fn service(&self, name: &str) -> Option<&'s BackendService> {
        self.services.get(name).copied()
    }

    /// True for a Network vService (`vservice` names one the configuration has).
    pub(crate) fn is_network(&self, vservice: &str) -> bool {
        !self.l7_vservices.contains(vservice)
    }

    fn build(snap: &'s Snapshot) -> Self {
        let cfg = &snap.cfg;
        let services = cfg
            .backend_services
            .iter()
            .map(|s| (s.name.as_str(), s))
            .collect();
        let mut proxy: HashMap<&str, BackendStats> = HashMap::new();
        for (name, stats) in snap
            .proxy
            .iter()
            .flat_map(|p| p.values())
            .flat_map(|vs| &vs.backends)
        {
            proxy.entry(name.as_str()).or_default().absorb(stats);
        }
        let mut xdp: HashMap<&str, lb_common::Counters> = HashMap::new();
        for b in snap
            .net
            .iter()
            .flat_map(|n| &n.vips)
            .flat_map(|v| &v.backends)
        {
            xdp.entry(b.name.as_str()).or_default().add(&b.counters);
        }
        let groups: HashMap<&str, &[String]> = cfg
            .backend_groups
            .iter()
            .map(|g| (g.name.as_str(), g.members.as_slice()))
            .collect();
        let mut used_in: HashMap<&str, Vec<UsedIn>> = HashMap::new();
        let mut note = |list: &'s [String], vservice: &str, list_name: &str| {
            for entry in list {
                let members = groups
                    .get(entry.as_str())
                    .copied()
                    .unwrap_or(std::slice::from_ref(entry));
                for m in members {
                    let seen = used_in.entry(m.as_str()).or_default();
                    // A list naming a service twice (directly and through a group) counts once.
                    let dup = seen
                        .last()
                        .is_some_and(|u| u.vservice == vservice && u.list == list_name);
                    if !dup {
                        seen.push(UsedIn {
                            vservice: vservice.to_string(),
                            list: list_name.to_string(),
                        });
                    }
                }
            }
        };
        for vs in &cfg.vservices {
            note(&vs.backends, &vs.name, "default");
            for set in vs.l7.iter().flat_map(|l| &l.conditional_sets) {
                note(&set.backends, &vs.name, &set.name);
            }
        }
        let l7_vservices = cfg
            .vservices
            .iter()
            .filter(|v| !v.kind.is_network())
            .map(|v| v.name.as_str())
            .collect();
        BackendIndex {
            services,
            proxy,
            xdp,
            used_in,
            l7_vservices,
        }
    }
}

/// A member of a list with what decides its state besides health.
pub(crate) struct Expanded {
    /// Backend Service name.
    pub name: String,
    /// Its Backup flag, or its group's.
    pub backup: bool,
    /// Its Maintenance flag, or its group's.
    pub maintenance: bool,
    /// Its weight (0: drained, S-BK11).
    pub weight: u32,
}

/// The members of a list in order, groups expanded, each once, with its Backup role
/// (a group's flag decides for its members, as in the selection model), Maintenance (its
/// own or its group's) and weight.
pub(crate) fn expand(names: &ByName<'_>, list: &[String]) -> Vec<Expanded> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut out: Vec<Expanded> = Vec::new();
    for entry in list {
        if let Some(s) = names.service(entry) {
            if seen.insert(s.name.as_str()) {
                out.push(Expanded {
                    name: s.name.clone(),
                    backup: s.backup,
                    maintenance: s.maintenance,
                    weight: s.weight,
                });
            }
        } else if let Some(g) = names.group(entry) {
            for m in &g.members {
                if !seen.insert(m.as_str()) {
                    continue;
                }
                let svc = names.service(m);
                out.push(Expanded {
                    name: m.clone(),
                    backup: g.backup,
                    maintenance: g.maintenance || svc.is_some_and(|s| s.maintenance),
                    weight: svc.map_or(1, |s| s.weight),
                });
            }
        }
    }
    out
}

/// Every list that holds `name` directly or, for a Backend Service, through a group.
pub(crate) fn used_in(cfg: &Config, name: &str) -> Vec<UsedIn> {
    let holds = |list: &[String]| {
        list.iter().any(|entry| {
            entry == name
                || cfg
                    .backend_groups
                    .iter()
                    .any(|g| g.name == *entry && g.members.iter().any(|m| m == name))
        })
    };
    let mut out = Vec::new();
    for vs in &cfg.vservices {
        if holds(&vs.backends) {
            out.push(UsedIn {
                vservice: vs.name.clone(),
                list: "default".into(),
            });
        }
        for set in vs.l7.iter().flat_map(|l| &l.conditional_sets) {
            if holds(&set.backends) {
                out.push(UsedIn {
                    vservice: vs.name.clone(),
                    list: set.name.clone(),
                });
            }
        }
    }
    out
}

/// "mains", "backup N" (1-based, as operators count) or "none".
pub(crate) fn tier_name(tier: Tier) -> String {
    match tier {
        Tier::Mains => "mains".into(),
        Tier::Backup(i) => format!("backup {}", i + 1),
        Tier::None => "none".into(),
    }
}

/// The TOML spelling of a vService kind.
pub(crate) fn kind_name(kind: VServiceKind) -> &'static str {
    match kind {
        VServiceKind::TcpL4 => "tcp-l4",
        VServiceKind::UdpL4 => "udp-l4",
        VServiceKind::AnyL3 => "any-l3",
        VServiceKind::Http => "http",
        VServiceKind::L7Tcp => "l7-tcp",
    }
}

/// "80", "1000-2000" or "*".
pub(crate) fn ports_text(ports: PortSpec) -> String {
    match ports {
        PortSpec::Single(p) => p.to_string(),
        PortSpec::Range(a, b) => format!("{a}-{b}"),
        PortSpec::Any => "*".into(),
    }
}

fn parse_health(s: &str) -> Health {
    match s {
        "Error" => Health::Error,
        "Preparing" => Health::Preparing,
        _ => Health::Ok,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An HTTP vService whose list holds a weight-0 main, a main in Maintenance, a serving
    /// main, a backup standing by and a grouped backup in Maintenance; and a Network one
    /// (admin state applied) where the backup serves and a second backup waits.
    const CONFIG: &str = r#"
[[backend_service]]
name = "zero"
address = "127.0.0.1"
port = 8001
weight = 0

[[backend_service]]
name = "closed"
address = "127.0.0.1"
port = 8002
maintenance = true

[[backend_service]]
name = "main"
address = "127.0.0.1"
port = 8003

[[backend_service]]
name = "spare"
address = "127.0.0.1"
port = 8004
backup = true

[[backend_service]]
name = "g1"
address = "127.0.0.1"
port = 8005

[[backend_group]]
name = "spares"
members = ["g1"]
backup = true
maintenance = true

[[vservice]]
name = "web"
kind = "http"
address = "127.0.0.1"
port = 8080
backends = ["zero", "closed", "main", "spare", "spares"]

[[backend_service]]
name = "n1"
address = "127.0.0.1"
port = 9001
weight = 0

[[backend_service]]
name = "n2"
address = "127.0.0.1"
port = 9002
backup = true

[[backend_service]]
name = "n3"
address = "127.0.0.1"
port = 9003
backup = true

[[vservice]]
name = "net"
kind = "tcp-l4"
address = "10.0.0.1"
port = 80
apply_admin_state = true
backends = ["n1", "n2", "n3"]
"#;

    fn snapshot() -> Snapshot {
        let cfg = crate::config::parse(CONFIG, "test.toml").unwrap();
        let l7 = Selections::compute(&cfg, &|_| Health::Ok);
        Snapshot {
            cfg: Arc::new(cfg),
            report: HealthReport::default(),
            l7: Arc::new(l7),
            net: None,
            net_error: None,
            proxy: None,
        }
    }

    fn states(snap: &Snapshot, vs: &str) -> (String, Vec<(String, &'static str, &'static str)>) {
        let vs = snap.cfg.vservices.iter().find(|v| v.name == vs).unwrap();
        let list = snap.lists_in(&snap.list_index(), vs).remove(0);
        let members = list
            .members
            .into_iter()
            .map(|m| (m.name, m.role, m.state))
            .collect();
        (list.tier, members)
    }

    /// S-BK1, S-BK11, S-MT1: a backup that stands by is "standby", a weight-0 member is
    /// "drained" and one in Maintenance "maintenance"; only the main that serves is eligible.
    #[test]
    fn s_bk11_only_weight_zero_reads_drained_a_waiting_backup_reads_standby() {
        let snap = snapshot();
        let (tier, members) = states(&snap, "web");
        assert_eq!(tier, "mains");
        let want = [
            ("zero", "main", "drained"),
            ("closed", "main", "maintenance"),
            ("main", "main", "eligible"),
            ("spare", "backup", "standby"),
            ("g1", "backup", "maintenance"),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(n, r, s)| (n.to_string(), *r, *s))
            .collect();
        assert_eq!(members, want);
    }

    /// S-BK3 on a Network vService with admin state: the first backup serves, the second
    /// stands by, the weight-0 main is drained.
    #[test]
    fn s_bk3_the_second_backup_stands_by_while_the_first_serves() {
        let snap = snapshot();
        let (tier, members) = states(&snap, "net");
        assert_eq!(tier, "backup 1");
        let want = [
            ("n1", "main", "drained"),
            ("n2", "backup", "eligible"),
            ("n3", "backup", "standby"),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(n, r, s)| (n.to_string(), *r, *s))
            .collect();
        assert_eq!(members, want);
    }
}
