//! Whole-file tests: a valid config into the expected model, defaults, warnings, and the
//! shipped example.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::*;

mod dns;
mod l7;
mod tunnel;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

const FULL: &str = r#"
[xdp]
pin_dir = "/sys/fs/bpf/test"
conn_table_size = 2048
flood_guard_rate = 50000
interfaces = ["veth0", "veth1"]
attach_mode = "skb"

[reflection]
network_remove_delay = 0
network_add_delay = 1.5
l7_delay = 3

[proxy]
workers = 3
sched_slice_us = 250

[[health_check]]
name = "tcp"
type = "tcp"
max_ejection_percent = 25

[[health_check]]
name = "web"
type = "https"
period = 2
timeout = 0.25
required_successes = 1
required_failures = 5
method = "HEAD"
path = "/up"
host = "example.org"
expect_status = [200, 301]
body_contains = "fine"
verify_tls = true

[[health_check]]
name = "dns"
type = "dns"
query_name = "example.org"
query_type = "AAAA"

[[health_check]]
name = "icmp"
type = "ping"
period = 0.2

[[backend_service]]
name = "a"
address = "10.0.0.1"
port = 80

[[backend_service]]
name = "b"
address = "10.0.0.2"
port = 0
weight = 0
health_check = "tcp"
maintenance = true
backup = true
max_connections = 7

[[backend_group]]
name = "g"
members = ["b"]
backup = true
maintenance = true

[[vservice]]
name = "v1"
kind = "tcp-l4"
address = "192.0.2.1"
port = 80
backends = ["a", "g"]

[[vservice]]
name = "v2"
kind = "udp-l4"
address = "192.0.2.1"
port_range = [1000, 2000]
forwarding = "dsr"
maglev_size = 251
backends = ["b"]
apply_admin_state = true

[[vservice]]
name = "v3"
kind = "any-l3"
address = "192.0.2.3"
backends = ["b"]
"#;

/// A config with every field set (or left to its default) becomes exactly this model.
#[test]
fn full_config_round_trips_into_the_model() {
    let (config, warnings) = parse_with_warnings(FULL, "full.toml").unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let expected = Config {
        xdp: XdpSettings {
            pin_dir: PathBuf::from("/sys/fs/bpf/test"),
            conn_table_size: 2048,
            flood_guard_rate: 50_000,
            interfaces: vec!["veth0".into(), "veth1".into()],
            attach_mode: AttachMode::Skb,
            tunnel_source_v4: None,
            tunnel_source_v6: None,
            gue_port: 6080,
        },
        proxy: ProxySettings {
            workers: Some(3),
            sched_slice: Some(Duration::from_micros(250)),
            header_limits: HeaderLimits::default(),
        },
        reflection: ReflectionSettings {
            network_remove_delay: Duration::ZERO,
            network_add_delay: Duration::from_millis(1500),
            l7_delay: Duration::from_secs(3),
        },
        health_checks: vec![
            HealthCheck {
                name: "tcp".into(),
                kind: HealthKind::Tcp(Handshake::HalfOpen),
                period: Duration::from_secs(1),
                timeout: Duration::from_secs(1),
                required_successes: 3,
                required_failures: 2,
                passive_failures: None,
                max_ejection_percent: 25,
            },
            HealthCheck {
                name: "web".into(),
                kind: HealthKind::Https(HttpCheck {
                    method: "HEAD".into(),
                    path: "/up".into(),
                    host: Some("example.org".into()),
                    expect_status: vec![200, 301],
                    body_contains: Some("fine".into()),
                    verify_tls: true,
                }),
                period: Duration::from_secs(2),
                timeout: Duration::from_millis(250),
                required_successes: 1,
                required_failures: 5,
                passive_failures: None,
                max_ejection_percent: 50,
            },
            HealthCheck {
                name: "dns".into(),
                kind: HealthKind::Dns(DnsCheck {
                    query_name: "example.org".into(),
                    query_type: 28,
                }),
                period: Duration::from_secs(1),
                timeout: Duration::from_secs(1),
                required_successes: 3,
                required_failures: 2,
                passive_failures: None,
                max_ejection_percent: 50,
            },
            HealthCheck {
                name: "icmp".into(),
                kind: HealthKind::Ping,
                period: Duration::from_millis(200),
                timeout: Duration::from_secs(1),
                required_successes: 3,
                required_failures: 2,
                passive_failures: None,
                max_ejection_percent: 50,
            },
        ],
        backend_services: vec![
            BackendService {
                name: "a".into(),
                address: ip("10.0.0.1"),
                address6: None,
                port: 80,
                weight: 1,
                health_check: None,
                maintenance: false,
                backup: false,
                max_connections: None,
                tunnel_check: None,
            },
            BackendService {
                name: "b".into(),
                address: ip("10.0.0.2"),
                address6: None,
                port: 0,
                weight: 0,
                health_check: Some("tcp".into()),
                maintenance: true,
                backup: true,
                max_connections: Some(7),
                tunnel_check: None,
            },
        ],
        backend_groups: vec![BackendGroup {
            name: "g".into(),
            members: vec!["b".into()],
            backup: true,
            maintenance: true,
        }],
        vservices: vec![
            VService {
                name: "v1".into(),
                kind: VServiceKind::TcpL4,
                address: ip("192.0.2.1"),
                address6: None,
                ports: PortSpec::Single(80),
                forwarding: Forwarding::Nat,
                maglev_size: 65537,
                backends: vec!["a".into(), "g".into()],
                apply_admin_state: false,
                l7: None,
            },
            VService {
                name: "v2".into(),
                kind: VServiceKind::UdpL4,
                address: ip("192.0.2.1"),
                address6: None,
                ports: PortSpec::Range(1000, 2000),
                forwarding: Forwarding::Dsr,
                maglev_size: 251,
                backends: vec!["b".into()],
                apply_admin_state: true,
                l7: None,
            },
            VService {
                name: "v3".into(),
                kind: VServiceKind::AnyL3,
                address: ip("192.0.2.3"),
                address6: None,
                ports: PortSpec::Any,
                forwarding: Forwarding::Nat,
                maglev_size: 65537,
                backends: vec!["b".into()],
                apply_admin_state: false,
                l7: None,
            },
        ],
        api: ApiSettings::default(),
        cluster: None,
        dns_vservices: Vec::new(),
        bgp: Default::default(),
    };
    assert_eq!(config, expected);
}

/// Missing optional tables get the documented defaults (S-RF1/S-RF2 delays included).
#[test]
fn empty_file_gives_defaults() {
    let config = parse("", "empty.toml").unwrap();
    assert_eq!(config.xdp.pin_dir, PathBuf::from("/sys/fs/bpf/lb"));
    assert_eq!(config.xdp.conn_table_size, 1_048_576);
    assert_eq!(config.xdp.flood_guard_rate, 125_000);
    assert!(config.xdp.interfaces.is_empty());
    assert_eq!(config.xdp.attach_mode, AttachMode::Driver);
    assert_eq!(
        config.reflection.network_remove_delay,
        Duration::from_secs(9)
    );
    assert_eq!(config.reflection.network_add_delay, Duration::from_secs(5));
    assert_eq!(config.reflection.l7_delay, Duration::from_millis(2500));
    assert!(config.vservices.is_empty());
}

/// The string form of a port range equals the array form.
#[test]
fn port_range_string_form() {
    let text = FULL.replace("port_range = [1000, 2000]", "port_range = \"1000 - 2000\"");
    let config = parse(&text, "t.toml").unwrap();
    assert_eq!(config.vservices[1].ports, PortSpec::Range(1000, 2000));
}

/// S-HC4: adjusted values come back as warnings with the field and line, and the
/// adjusted value is in the model.
#[test]
fn s_hc4_adjustments_are_warnings() {
    let text = "[[health_check]]\nname = \"h\"\ntype = \"http\"\nperiod = 0.5\ntimeout = 130\n\
                \n[[health_check]]\nname = \"p\"\ntype = \"ping\"\nperiod = 120\n";
    let (config, warnings) = parse_with_warnings(text, "w.toml").unwrap();
    assert_eq!(config.health_checks[0].period, Duration::from_secs(1));
    assert_eq!(config.health_checks[0].timeout, Duration::from_secs(1));
    assert_eq!(config.health_checks[1].period, Duration::from_secs(1));
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(warnings[0].starts_with("w.toml:4:10: health_check[0].period: period 0.5 s"));
    assert!(warnings[0].ends_with("applied as 1 s per S-HC4"));
    assert!(warnings[1].starts_with("w.toml:5:11: health_check[0].timeout: timeout 130 s"));
    assert!(warnings[2].starts_with("w.toml:10:10: health_check[1].period: period 120 s"));
}

/// The shipped example parses into what its comments describe.
#[test]
fn example_config_parses() {
    let text = include_str!("../../../conf/example.toml");
    let (config, warnings) = parse_with_warnings(text, "example.toml").unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let web = &config.vservices[0];
    assert_eq!(web.kind, VServiceKind::TcpL4);
    assert_eq!(web.forwarding, Forwarding::Nat);
    let weights: Vec<u32> = ["web1", "web2", "web3"]
        .iter()
        .map(|n| {
            config
                .backend_services
                .iter()
                .find(|s| s.name == *n)
                .unwrap()
                .weight
        })
        .collect();
    assert_eq!(weights, [2, 1, 1]);
    let kinds: Vec<(VServiceKind, PortSpec, Forwarding)> = config
        .vservices
        .iter()
        .map(|v| (v.kind, v.ports, v.forwarding))
        .collect();
    assert!(kinds.contains(&(VServiceKind::UdpL4, PortSpec::Single(53), Forwarding::Nat)));
    assert!(kinds.contains(&(
        VServiceKind::UdpL4,
        PortSpec::Range(10000, 20000),
        Forwarding::Nat
    )));
    assert!(kinds.contains(&(VServiceKind::AnyL3, PortSpec::Any, Forwarding::Nat)));
    assert!(kinds.iter().any(|k| k.2 == Forwarding::Dsr));
    let types: Vec<&HealthKind> = config.health_checks.iter().map(|h| &h.kind).collect();
    assert!(types.contains(&&HealthKind::Ping));
    assert!(types.contains(&&HealthKind::Tcp(Handshake::HalfOpen)));
    assert!(types.iter().any(|k| matches!(k, HealthKind::Http(_))));
    assert!(types.iter().any(|k| matches!(k, HealthKind::Https(_))));
    assert!(types.iter().any(|k| matches!(k, HealthKind::Dns(_))));
    assert_eq!(config.backend_groups.len(), 1);
    assert_eq!(config.api, ApiSettings::default());
    assert_eq!(config.cluster, None);
    let site = config.vservices.iter().find(|v| v.name == "site").unwrap();
    assert_eq!(site.kind, VServiceKind::Http);
    let l7 = site.l7.as_ref().unwrap();
    assert!(matches!(l7.persistence, Persistence::Cookie(_)));
    assert_eq!(l7.conditional_sets.len(), 1);
    assert!(
        l7.conditional_sets[0]
            .backends
            .contains(&"api-spare".to_owned())
    );
    assert!(site.backends.contains(&"web-sorry".to_owned()));
    let db = config.vservices.iter().find(|v| v.name == "db").unwrap();
    assert_eq!(db.kind, VServiceKind::L7Tcp);
    assert_eq!(
        db.l7.as_ref().unwrap().persistence,
        Persistence::SourceIp {
            idle: Duration::from_secs(1800)
        }
    );
}

/// `load` reads a file; an unreadable file is one issue naming the path.
#[test]
fn load_reads_files_and_reports_missing_ones() {
    let dir = std::env::temp_dir().join(format!("lb-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("lb.toml");
    std::fs::write(&path, FULL).unwrap();
    assert_eq!(load(&path).unwrap().vservices.len(), 3);
    let missing = dir.join("missing.toml");
    let err = load(&missing).unwrap_err();
    assert_eq!(err.errors.len(), 1);
    assert!(
        err.to_string()
            .starts_with(&format!("{}: cannot read the file", missing.display()))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
