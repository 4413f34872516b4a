//! Table-driven checks of the selection rules, one or more cases per rule of
//! docs/behaviour.md.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::config::{
    ApiSettings, AttachMode, BackendGroup, BackendService, Config, Forwarding, PortSpec,
    ProxySettings, ReflectionSettings, VService, VServiceKind, XdpSettings,
};

/// Builds a Backend Service from a compact spec: `"name"` plus flags
/// `chk` (has a health check), `bk` (Backup), `mt` (Maintenance), `wN` (weight N, default 1),
/// `@A.B.C.D` (address, default 10.0.0.1).
fn svc(spec: &str) -> BackendService {
    let mut parts = spec.split_whitespace();
    let name = parts.next().unwrap().to_owned();
    let mut s = BackendService {
        name,
        address: "10.0.0.1".parse().unwrap(),
        address6: None,
        port: 80,
        weight: 1,
        health_check: None,
        maintenance: false,
        backup: false,
        max_connections: None,
        tunnel_check: None,
    };
    for flag in parts {
        match flag {
            "chk" => s.health_check = Some("hc".to_owned()),
            "bk" => s.backup = true,
            "mt" => s.maintenance = true,
            f if f.starts_with('w') => s.weight = f[1..].parse().unwrap(),
            f if f.starts_with('@') => s.address = f[1..].parse().unwrap(),
            f => panic!("unknown flag {f}"),
        }
    }
    s
}

/// Builds a Backend Group: `"name [bk] [mt] : member member ..."`.
fn group(spec: &str) -> BackendGroup {
    let (head, members) = spec.split_once(':').unwrap();
    let mut head = head.split_whitespace();
    let name = head.next().unwrap().to_owned();
    let flags: Vec<&str> = head.collect();
    BackendGroup {
        name,
        members: members.split_whitespace().map(str::to_owned).collect(),
        backup: flags.contains(&"bk"),
        maintenance: flags.contains(&"mt"),
    }
}

fn vservice(
    name: &str,
    kind: VServiceKind,
    ports: PortSpec,
    list: &[&str],
    admin: bool,
) -> VService {
    VService {
        name: name.to_owned(),
        kind,
        address: "192.0.2.10".parse().unwrap(),
        address6: None,
        ports,
        forwarding: Forwarding::Nat,
        maglev_size: 251,
        backends: list.iter().map(|s| (*s).to_owned()).collect(),
        apply_admin_state: admin,
        l7: None,
    }
}

fn config(services: &[&str], groups: &[&str], vservices: Vec<VService>) -> Config {
    Config {
        xdp: XdpSettings {
            pin_dir: PathBuf::from("/sys/fs/bpf/lb"),
            conn_table_size: 1 << 20,
            flood_guard_rate: 125_000,
            interfaces: Vec::new(),
            attach_mode: AttachMode::Driver,
            tunnel_source_v4: None,
            tunnel_source_v6: None,
            gue_port: 6080,
        },
        reflection: ReflectionSettings {
            network_remove_delay: Duration::from_secs(9),
            network_add_delay: Duration::from_secs(5),
            l7_delay: Duration::from_millis(2500),
        },
        health_checks: Vec::new(),
        backend_services: services.iter().map(|s| svc(s)).collect(),
        backend_groups: groups.iter().map(|g| group(g)).collect(),
        vservices,
        api: ApiSettings::default(),
        proxy: ProxySettings::default(),
        cluster: None,
        dns_vservices: Vec::new(),
        bgp: Default::default(),
    }
}

/// A health function from a table; services not named are OK.
fn health_of(table: &'static [(&'static str, Health)]) -> impl Fn(&str) -> Health {
    move |name| {
        table
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(Health::Ok, |(_, h)| *h)
    }
}

const NO_ADMIN: Policy = Policy {
    admin: ApplyAdmin::No,
    health: ApplyHealth::Yes,
};
const NO_HEALTH: Policy = Policy {
    admin: ApplyAdmin::Yes,
    health: ApplyHealth::No,
};

struct Case {
    rule: &'static str,
    services: &'static [&'static str],
    groups: &'static [&'static str],
    list: &'static [&'static str],
    health: &'static [(&'static str, Health)],
    policy: Policy,
    tier: Tier,
    eligible: &'static [(&'static str, u32)],
    drained: &'static [&'static str],
    down: &'static [&'static str],
}

use Health::{Error, Preparing};

const CASES: &[Case] = &[
    Case {
        rule: "S-BK1 backups idle while every main is available",
        services: &["a chk", "b chk", "c chk bk"],
        groups: &[],
        list: &["a", "b", "c"],
        health: &[],
        policy: Policy::FULL,
        tier: Tier::Mains,
        eligible: &[("a", 1), ("b", 1)],
        drained: &["c"],
        down: &[],
    },
    Case {
        rule: "S-BK1 one available main is enough to keep the backup idle",
        services: &["a chk", "b chk", "c chk bk"],
        groups: &[],
        list: &["a", "b", "c"],
        health: &[("a", Error)],
        policy: Policy::FULL,
        tier: Tier::Mains,
        eligible: &[("b", 1)],
        drained: &["c"],
        down: &["a"],
    },
    Case {
        rule: "S-BK2 backup takes over when every main is Error",
        services: &["a chk", "b chk", "c chk bk"],
        groups: &[],
        list: &["a", "b", "c"],
        health: &[("a", Error), ("b", Error)],
        policy: Policy::FULL,
        tier: Tier::Backup(0),
        eligible: &[("c", 1)],
        drained: &[],
        down: &["a", "b"],
    },
    Case {
        rule: "S-BK2 S-MT2 backup takes over when mains are Error or in Maintenance",
        services: &["a chk", "b chk mt", "c chk bk"],
        groups: &[],
        list: &["a", "b", "c"],
        health: &[("a", Error)],
        policy: Policy::FULL,
        tier: Tier::Backup(0),
        eligible: &[("c", 1)],
        drained: &["b"],
        down: &["a"],
    },
    Case {
        rule: "S-BK3 first available backup gets all, never spread",
        services: &["a chk", "c chk bk w5", "d chk bk w5"],
        groups: &[],
        list: &["a", "c", "d"],
        health: &[("a", Error)],
        policy: Policy::FULL,
        tier: Tier::Backup(0),
        eligible: &[("c", 5)],
        drained: &["d"],
        down: &["a"],
    },
    Case {
        rule: "S-BK3 next backup takes over when the first becomes unavailable",
        services: &["a chk", "c chk bk", "d chk bk"],
        groups: &[],
        list: &["a", "c", "d"],
        health: &[("a", Error), ("c", Error)],
        policy: Policy::FULL,
        tier: Tier::Backup(1),
        eligible: &[("d", 1)],
        drained: &[],
        down: &["a", "c"],
    },
    Case {
        rule: "S-BK3 backups are ordered by list order, not by name",
        services: &["a chk", "c chk bk", "d chk bk"],
        groups: &[],
        list: &["a", "d", "c"],
        health: &[("a", Error)],
        policy: Policy::FULL,
        tier: Tier::Backup(0),
        eligible: &[("d", 1)],
        drained: &["c"],
        down: &["a"],
    },
    Case {
        rule: "S-BK5 a backup in Maintenance is skipped",
        services: &["a chk", "c chk bk mt", "d chk bk"],
        groups: &[],
        list: &["a", "c", "d"],
        health: &[("a", Error)],
        policy: Policy::FULL,
        tier: Tier::Backup(1),
        eligible: &[("d", 1)],
        drained: &["c"],
        down: &["a"],
    },
    Case {
        rule: "S-BK5 a backup in Maintenance is never used, even as the last resort",
        services: &["a chk", "c bk mt"],
        groups: &[],
        list: &["a", "c"],
        health: &[("a", Error)],
        policy: Policy::FULL,
        tier: Tier::None,
        eligible: &[],
        drained: &["c"],
        down: &["a"],
    },
    Case {
        rule: "S-BK5 S-HC6 a backup without a check gets traffic even while down",
        services: &["a chk", "c bk"],
        groups: &[],
        list: &["a", "c"],
        health: &[("a", Error), ("c", Error)],
        policy: Policy::FULL,
        tier: Tier::Backup(0),
        eligible: &[("c", 1)],
        drained: &[],
        down: &["a"],
    },
    Case {
        rule: "S-BK7 Backup group: only the first available member in row order",
        services: &["a chk", "x chk", "y chk", "z chk"],
        groups: &["g bk : x y z"],
        list: &["a", "g"],
        health: &[("a", Error)],
        policy: Policy::FULL,
        tier: Tier::Backup(0),
        eligible: &[("x", 1)],
        drained: &["y", "z"],
        down: &["a"],
    },
    Case {
        rule: "S-BK7 Backup group: the next member in row order takes over",
        services: &["a chk", "x chk", "y chk", "z chk"],
        groups: &["g bk : z x y"],
        list: &["a", "g"],
        health: &[("a", Error), ("z", Error)],
        policy: Policy::FULL,
        tier: Tier::Backup(1),
        eligible: &[("x", 1)],
        drained: &["y"],
        down: &["a", "z"],
    },
    Case {
        rule: "S-BK7 S-BK1 Backup group idles while a main is available",
        services: &["a chk", "x chk", "y chk"],
        groups: &["g bk : x y"],
        list: &["g", "a"],
        health: &[],
        policy: Policy::FULL,
        tier: Tier::Mains,
        eligible: &[("a", 1)],
        drained: &["x", "y"],
        down: &[],
    },
    Case {
        rule: "S-BK7 a group without Backup contributes its members as mains by weight",
        services: &["x chk w3", "y chk w2", "c chk bk"],
        groups: &["g : x y"],
        list: &["g", "c"],
        health: &[],
        policy: Policy::FULL,
        tier: Tier::Mains,
        eligible: &[("x", 3), ("y", 2)],
        drained: &["c"],
        down: &[],
    },
    Case {
        rule: "S-BK9 nothing available: tier None, nobody eligible",
        services: &["a chk", "c chk bk"],
        groups: &[],
        list: &["a", "c"],
        health: &[("a", Error), ("c", Error)],
        policy: Policy::FULL,
        tier: Tier::None,
        eligible: &[],
        drained: &[],
        down: &["a", "c"],
    },
    Case {
        rule: "S-BK10 without admin state a Backup service is just another main",
        services: &["a chk", "b chk", "c chk bk"],
        groups: &[],
        list: &["a", "b", "c"],
        health: &[("a", Error)],
        policy: NO_ADMIN,
        tier: Tier::Mains,
        eligible: &[("b", 1), ("c", 1)],
        drained: &[],
        down: &["a"],
    },
    Case {
        rule: "S-BK10 without admin state a Backup group's members are all mains",
        services: &["a chk", "x chk", "y chk"],
        groups: &["g bk : x y"],
        list: &["a", "g"],
        health: &[],
        policy: NO_ADMIN,
        tier: Tier::Mains,
        eligible: &[("a", 1), ("x", 1), ("y", 1)],
        drained: &[],
        down: &[],
    },
    Case {
        rule: "S-BK11 weight 0 main is drained, not eligible",
        services: &["a chk w0", "b chk w4", "c chk bk"],
        groups: &[],
        list: &["a", "b", "c"],
        health: &[],
        policy: Policy::FULL,
        tier: Tier::Mains,
        eligible: &[("b", 4)],
        drained: &["a", "c"],
        down: &[],
    },
    Case {
        rule: "S-BK11 mains all weight 0, Error or Maintenance hand over to the backup",
        services: &["a chk w0", "b chk", "m chk mt", "c chk bk"],
        groups: &[],
        list: &["a", "b", "m", "c"],
        health: &[("b", Error)],
        policy: Policy::FULL,
        tier: Tier::Backup(0),
        eligible: &[("c", 1)],
        drained: &["a", "m"],
        down: &["b"],
    },
    Case {
        rule: "S-BK11 a weight 0 backup is skipped",
        services: &["a chk", "c chk bk w0", "d chk bk w2"],
        groups: &[],
        list: &["a", "c", "d"],
        health: &[("a", Error)],
        policy: Policy::FULL,
        tier: Tier::Backup(1),
        eligible: &[("d", 2)],
        drained: &["c"],
        down: &["a"],
    },
    Case {
        rule: "S-BK11 without admin state weight 0 still drains",
        services: &["a chk w0", "b chk"],
        groups: &[],
        list: &["a", "b"],
        health: &[],
        policy: NO_ADMIN,
        tier: Tier::Mains,
        eligible: &[("b", 1)],
        drained: &["a"],
        down: &[],
    },
    Case {
        rule: "S-MT2 Maintenance sends new traffic to the other mains",
        services: &["a chk mt", "b chk", "c chk bk"],
        groups: &[],
        list: &["a", "b", "c"],
        health: &[],
        policy: Policy::FULL,
        tier: Tier::Mains,
        eligible: &[("b", 1)],
        drained: &["a", "c"],
        down: &[],
    },
    Case {
        rule: "S-MT2 S-BK9 every main in Maintenance and no backup: nothing",
        services: &["a chk mt", "b mt"],
        groups: &[],
        list: &["a", "b"],
        health: &[],
        policy: Policy::FULL,
        tier: Tier::None,
        eligible: &[],
        drained: &["a", "b"],
        down: &[],
    },
    Case {
        rule: "S-MT4 Maintenance off but health Error: still not eligible",
        services: &["a chk", "b chk"],
        groups: &[],
        list: &["a", "b"],
        health: &[("a", Error)],
        policy: Policy::FULL,
        tier: Tier::Mains,
        eligible: &[("b", 1)],
        drained: &[],
        down: &["a"],
    },
    Case {
        rule: "S-MT6 a group in Maintenance puts all its members in maintenance",
        services: &["x chk", "y chk", "b chk"],
        groups: &["g mt : x y"],
        list: &["g", "b"],
        health: &[],
        policy: Policy::FULL,
        tier: Tier::Mains,
        eligible: &[("b", 1)],
        drained: &["x", "y"],
        down: &[],
    },
    Case {
        rule: "S-MT6 S-BK2 a main group in Maintenance hands over to the backup",
        services: &["x chk", "y chk", "c chk bk"],
        groups: &["g mt : x y"],
        list: &["g", "c"],
        health: &[],
        policy: Policy::FULL,
        tier: Tier::Backup(0),
        eligible: &[("c", 1)],
        drained: &["x", "y"],
        down: &[],
    },
    Case {
        rule: "S-MT6 S-BK5 a Backup group in Maintenance is never used",
        services: &["a chk", "x", "y"],
        groups: &["g bk mt : x y"],
        list: &["a", "g"],
        health: &[("a", Error)],
        policy: Policy::FULL,
        tier: Tier::None,
        eligible: &[],
        drained: &["x", "y"],
        down: &["a"],
    },
    Case {
        rule: "S-MT6 a member's own Maintenance still counts inside a group",
        services: &["x chk mt", "y chk"],
        groups: &["g : x y"],
        list: &["g"],
        health: &[],
        policy: Policy::FULL,
        tier: Tier::Mains,
        eligible: &[("y", 1)],
        drained: &["x"],
        down: &[],
    },
    Case {
        rule: "S-MT7 without admin state Maintenance is ignored, health still applies",
        services: &["a chk mt", "b chk mt", "x chk"],
        groups: &["g mt : x"],
        list: &["a", "b", "g"],
        health: &[("b", Error)],
        policy: NO_ADMIN,
        tier: Tier::Mains,
        eligible: &[("a", 1), ("x", 1)],
        drained: &[],
        down: &["b"],
    },
    Case {
        rule: "S-HC5 a Preparing main gets no traffic",
        services: &["a chk", "b chk"],
        groups: &[],
        list: &["a", "b"],
        health: &[("a", Preparing)],
        policy: Policy::FULL,
        tier: Tier::Mains,
        eligible: &[("b", 1)],
        drained: &[],
        down: &["a"],
    },
    Case {
        rule: "S-HC5 S-BK2 mains all Preparing: the backup serves",
        services: &["a chk", "c bk"],
        groups: &[],
        list: &["a", "c"],
        health: &[("a", Preparing)],
        policy: Policy::FULL,
        tier: Tier::Backup(0),
        eligible: &[("c", 1)],
        drained: &[],
        down: &["a"],
    },
    Case {
        rule: "S-HC5 a Preparing backup is not used",
        services: &["a chk", "c chk bk", "d chk bk"],
        groups: &[],
        list: &["a", "c", "d"],
        health: &[("a", Error), ("c", Preparing)],
        policy: Policy::FULL,
        tier: Tier::Backup(1),
        eligible: &[("d", 1)],
        drained: &[],
        down: &["a", "c"],
    },
    Case {
        rule: "S-HC6 a service without a check is OK whatever the health source says",
        services: &["a", "b chk"],
        groups: &[],
        list: &["a", "b"],
        health: &[("a", Error), ("b", Error)],
        policy: Policy::FULL,
        tier: Tier::Mains,
        eligible: &[("a", 1)],
        drained: &[],
        down: &["b"],
    },
    Case {
        rule: "S-RF4 health not applied: Error and Preparing members stay eligible",
        services: &["a chk", "b chk", "c chk bk"],
        groups: &[],
        list: &["a", "b", "c"],
        health: &[("a", Error), ("b", Preparing)],
        policy: NO_HEALTH,
        tier: Tier::Mains,
        eligible: &[("a", 1), ("b", 1)],
        drained: &["c"],
        down: &[],
    },
    Case {
        rule: "a service listed twice counts once, at its first position",
        services: &["a chk", "x chk", "c chk bk"],
        groups: &["g bk : a x"],
        list: &["a", "g", "c"],
        health: &[],
        policy: Policy::FULL,
        tier: Tier::Mains,
        eligible: &[("a", 1)],
        drained: &["x", "c"],
        down: &[],
    },
];

#[test]
fn selection_rules_table() {
    for case in CASES {
        let cfg = config(case.services, case.groups, Vec::new());
        let model = Model::from_config(&cfg);
        let list: Vec<String> = case.list.iter().map(|s| (*s).to_owned()).collect();
        let got = model.select_list(&list, &health_of(case.health), case.policy);
        let want = ListSelection {
            tier: case.tier,
            eligible: case
                .eligible
                .iter()
                .map(|(n, w)| Eligible {
                    name: (*n).to_owned(),
                    weight: *w,
                })
                .collect(),
            drained: case.drained.iter().map(|s| (*s).to_owned()).collect(),
            down: case.down.iter().map(|s| (*s).to_owned()).collect(),
        };
        assert_eq!(got, want, "case: {}", case.rule);
    }
}

#[test]
fn s_bk4_mains_recovering_take_new_traffic_back_and_backup_keeps_its_flows() {
    let cfg = config(&["a chk", "c chk bk"], &[], Vec::new());
    let model = Model::from_config(&cfg);
    let list = vec!["a".to_owned(), "c".to_owned()];
    let failover = model.select_list(
        &list,
        &|n| if n == "a" { Error } else { Health::Ok },
        Policy::FULL,
    );
    assert_eq!(failover.tier, Tier::Backup(0));
    let recovered = model.select_list(&list, &|_| Health::Ok, Policy::FULL);
    assert_eq!(recovered.tier, Tier::Mains);
    assert_eq!(
        recovered.eligible,
        vec![Eligible {
            name: "a".into(),
            weight: 1
        }]
    );
    // The backup is drained, not down: its open connections are not cut.
    assert_eq!(recovered.drained, vec!["c".to_owned()]);
}

#[test]
fn s_bk6_a_backup_covers_only_its_own_list() {
    let cfg = config(
        &["a chk", "b chk", "c chk bk"],
        &[],
        vec![
            vservice(
                "web",
                VServiceKind::TcpL4,
                PortSpec::Single(80),
                &["a", "c"],
                true,
            ),
            vservice(
                "api",
                VServiceKind::TcpL4,
                PortSpec::Single(81),
                &["b"],
                true,
            ),
        ],
    );
    let model = Model::from_config(&cfg);
    // Every main is Error; only web's backup c is OK.
    let all_down = |n: &str| if n == "c" { Health::Ok } else { Error };
    let web = model.select("web", &all_down).unwrap();
    assert_eq!(web.tier, Tier::Backup(0));
    let api = model.select("api", &all_down).unwrap();
    assert_eq!(api.tier, Tier::None);
    assert!(api.eligible.is_empty());
}

#[test]
fn s_bk10_s_mt7_network_vservice_policy_follows_apply_admin_state() {
    let services = ["a chk mt", "b chk", "c chk bk"];
    let list = ["a", "b", "c"];
    let cfg = config(
        &services,
        &[],
        vec![
            vservice(
                "plain",
                VServiceKind::TcpL4,
                PortSpec::Single(80),
                &list,
                false,
            ),
            vservice(
                "admin",
                VServiceKind::UdpL4,
                PortSpec::Single(53),
                &list,
                true,
            ),
        ],
    );
    let model = Model::from_config(&cfg);
    let ok = |_: &str| Health::Ok;
    let plain = model.select("plain", &ok).unwrap();
    let names: Vec<&str> = plain.eligible.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"], "Backup and Maintenance ignored");
    let admin = model.select("admin", &ok).unwrap();
    let names: Vec<&str> = admin.eligible.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["b"], "Backup and Maintenance applied");
}

#[test]
fn s_rf4_any_l3_and_port_ranges_ignore_health() {
    let vs = |kind, ports| vservice("v", kind, ports, &[], false);
    let single = Policy::for_vservice(&vs(VServiceKind::TcpL4, PortSpec::Single(80)));
    assert_eq!(single, NO_ADMIN);
    let range = Policy::for_vservice(&vs(VServiceKind::UdpL4, PortSpec::Range(1000, 2000)));
    assert_eq!(range.health, ApplyHealth::No);
    let any = Policy::for_vservice(&vs(VServiceKind::AnyL3, PortSpec::Any));
    assert_eq!(any.health, ApplyHealth::No);

    let cfg = config(
        &["a chk", "b chk"],
        &[],
        vec![vservice(
            "any",
            VServiceKind::AnyL3,
            PortSpec::Any,
            &["a", "b"],
            false,
        )],
    );
    let got = Model::from_config(&cfg).select("any", &|_| Error).unwrap();
    assert_eq!(got.tier, Tier::Mains);
    assert_eq!(got.eligible.len(), 2);
}

#[test]
fn unknown_vservice_is_an_error() {
    let model = Model::from_config(&config(&["a"], &[], Vec::new()));
    assert_eq!(
        model.select("nope", &|_| Health::Ok),
        Err(SelectionError::UnknownVService("nope".into()))
    );
}

#[test]
fn every_member_lands_in_exactly_one_bucket() {
    for case in CASES {
        let cfg = config(case.services, case.groups, Vec::new());
        let model = Model::from_config(&cfg);
        let list: Vec<String> = case.list.iter().map(|s| (*s).to_owned()).collect();
        let got = model.select_list(&list, &health_of(case.health), case.policy);
        let mut all: Vec<&str> = got
            .eligible
            .iter()
            .map(|e| e.name.as_str())
            .chain(got.drained.iter().map(String::as_str))
            .chain(got.down.iter().map(String::as_str))
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "case: {}", case.rule);
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn s_sf1_one_failed_service_leaves_the_server_and_its_other_services_up() {
    let host = "10.0.0.7";
    let state = server_state(&[(ip(host), Error), (ip(host), Health::Ok)]);
    assert_eq!(state[&ip(host)], ServerState::Ok);
    // The same server's healthy service stays in its own vService.
    let cfg = config(
        &["http chk @10.0.0.7", "dns chk @10.0.0.7"],
        &[],
        vec![
            vservice(
                "web",
                VServiceKind::TcpL4,
                PortSpec::Single(80),
                &["http"],
                true,
            ),
            vservice(
                "ns",
                VServiceKind::UdpL4,
                PortSpec::Single(53),
                &["dns"],
                true,
            ),
        ],
    );
    let model = Model::from_config(&cfg);
    let health = |n: &str| if n == "http" { Error } else { Health::Ok };
    assert_eq!(model.select("web", &health).unwrap().tier, Tier::None);
    assert_eq!(model.select("ns", &health).unwrap().eligible.len(), 1);
}

#[test]
fn s_sf2_server_fails_only_when_all_services_fail_and_returns_with_the_first() {
    let a = ip("10.0.0.1");
    let b = ip("2001:db8::2");
    let all_failed = server_state(&[(a, Error), (a, Error), (b, Error)]);
    assert_eq!(all_failed[&a], ServerState::Failed);
    assert_eq!(all_failed[&b], ServerState::Failed);
    let first_back = server_state(&[(a, Error), (a, Health::Ok), (b, Error)]);
    assert_eq!(first_back[&a], ServerState::Ok);
    assert_eq!(
        first_back[&b],
        ServerState::Failed,
        "addresses are independent"
    );
    let ok_first = server_state(&[(a, Health::Ok), (a, Error), (a, Preparing)]);
    assert_eq!(
        ok_first[&a],
        ServerState::Ok,
        "order of services does not matter"
    );
    let undecided = server_state(&[(a, Error), (a, Preparing)]);
    assert_eq!(undecided[&a], ServerState::Preparing);
    assert!(server_state(&[]).is_empty());
}
