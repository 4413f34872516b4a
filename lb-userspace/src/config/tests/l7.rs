//! Whole-file tests of the L7 schema: every L7 setting, `[api]` and `[cluster]` into the
//! expected model, and the defaults of each.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// A directory with a certificate, a key and an error page (contents need not be valid PEM:
/// the loader only checks that the files can be read).
fn files(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lb-config-l7-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cert.pem"), "cert").unwrap();
    std::fs::write(dir.join("key.pem"), "key").unwrap();
    std::fs::write(dir.join("503.html"), "<h1>busy</h1>\n").unwrap();
    dir
}

const BACKENDS: &str = r#"
[[backend_service]]
name = "web1"
address = "10.0.0.1"
port = 8080
weight = 3

[[backend_service]]
name = "web2"
address = "2001:db8::2"
port = 8080

[[backend_service]]
name = "spare"
address = "10.0.0.9"
port = 8080
backup = true

[[backend_service]]
name = "api1"
address = "10.0.1.1"
port = 9000

[[backend_service]]
name = "api-spare"
address = "10.0.1.9"
port = 9000
backup = true
"#;

fn full_text(dir: &Path) -> String {
    let dir = dir.display();
    format!(
        r#"
[api]
listen = "0.0.0.0:9190"
token = "0123456789abcdef"
insecure_plaintext = true

[cluster]
manual_sync = true
[[cluster.peer]]
name = "lb2"
url = "http://10.0.0.2:9180/"
[[cluster.peer]]
name = "lb3"
url = "http://[fd00::3]:9180"
token = "fedcba9876543210"
{BACKENDS}
[[vservice]]
name = "site"
kind = "http"
address = "::"
port = 8443
backends = ["web1", "web2", "spare"]
algorithm = "weighted-least-connections"
queue_size = 7
error_page = "{dir}/503.html"
forwarded_headers = false
[vservice.persistence]
type = "cookie"
cookie_name = "PIN"
http_only = false
secure = true
same_site = "strict"
[vservice.timeouts]
connect = 1.5
client = 10
server = 20
queue = 0.5
keep_alive = 90
[vservice.tls]
cert = "{dir}/cert.pem"
key = "{dir}/key.pem"
[[vservice.conditional_set]]
name = "api"
backends = ["api1", "api-spare"]
host = "*.Example.com"
path = "/api/v1/status"
path_prefix = "/api/"
path_suffix = ".json"
path_regex = "^/v[0-9]+/"
method = ["GET", "HEAD"]
source_cidr = ["10.0.0.0/8", "::1/128", "192.0.2.7"]
[vservice.conditional_set.header]
name = "X-Env"
exact = "beta"
[[vservice.conditional_set]]
name = "beta"
backends = ["web1"]
host = "Beta.example.com"
[vservice.conditional_set.header]
name = "User-Agent"
regex = "(?i)curl"

[[vservice]]
name = "db"
kind = "l7-tcp"
address = "127.0.0.1"
port = 5432
backends = ["api1"]
algorithm = "first"
[vservice.persistence]
type = "source-ip"
idle_timeout = 60
"#
    )
}

/// Every L7, API and cluster setting written out becomes exactly this model.
#[test]
fn full_l7_config_round_trips_into_the_model() {
    let dir = files("full");
    let (config, warnings) = parse_with_warnings(&full_text(&dir), "l7.toml").unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(
        config.api,
        ApiSettings {
            listen: "0.0.0.0:9190".parse::<SocketAddr>().unwrap(),
            token: Some("0123456789abcdef".into()),
            tls: None,
            insecure_plaintext: true,
            socket: None,
        }
    );
    assert_eq!(
        config.cluster,
        Some(ClusterSettings {
            manual_sync: true,
            peers: vec![
                ClusterPeer {
                    name: "lb2".into(),
                    url: "http://10.0.0.2:9180".into(),
                    // S-CL: a peer without its own token gets this node's.
                    token: Some("0123456789abcdef".into()),
                },
                ClusterPeer {
                    name: "lb3".into(),
                    url: "http://[fd00::3]:9180".into(),
                    token: Some("fedcba9876543210".into()),
                },
            ],
            store: ClusterStore::Peers,
            node_name: config.cluster.as_ref().unwrap().node_name.clone(),
            peer_tls: ClientTls::default(),
        })
    );
    let site = VService {
        name: "site".into(),
        kind: VServiceKind::Http,
        address: ip("::"),
        address6: None,
        ports: PortSpec::Single(8443),
        forwarding: Forwarding::Nat,
        maglev_size: 65537,
        backends: vec!["web1".into(), "web2".into(), "spare".into()],
        apply_admin_state: false,
        l7: Some(L7Settings {
            algorithm: Algorithm::WeightedLeastConnections,
            persistence: Persistence::Cookie(CookiePersistence {
                name: "PIN".into(),
                http_only: false,
                secure: true,
                same_site: SameSite::Strict,
            }),
            timeouts: Timeouts {
                connect: Duration::from_millis(1500),
                client: Duration::from_secs(10),
                server: Duration::from_secs(20),
                queue: Duration::from_millis(500),
                keep_alive: Duration::from_secs(90),
            },
            queue_size: 7,
            retry: Default::default(),
            tls: Some(TlsSettings {
                cert: dir.join("cert.pem"),
                key: dir.join("key.pem"),
            }),
            error_page: Some("<h1>busy</h1>\n".into()),
            forwarded_headers: false,
            conditional_sets: vec![
                ConditionalSet {
                    name: "api".into(),
                    conditions: vec![
                        Condition::Host(StrMatch::Suffix(".example.com".into())),
                        Condition::Path(StrMatch::Exact("/api/v1/status".into())),
                        Condition::Path(StrMatch::Prefix("/api/".into())),
                        Condition::Path(StrMatch::Suffix(".json".into())),
                        Condition::Path(StrMatch::Regex("^/v[0-9]+/".into())),
                        Condition::Method(vec!["GET".into(), "HEAD".into()]),
                        Condition::SourceCidr(vec![
                            (ip("10.0.0.0"), 8),
                            (ip("::1"), 128),
                            (ip("192.0.2.7"), 32),
                        ]),
                        Condition::Header {
                            name: "x-env".into(),
                            value: StrMatch::Exact("beta".into()),
                        },
                    ],
                    backends: vec!["api1".into(), "api-spare".into()],
                },
                ConditionalSet {
                    name: "beta".into(),
                    conditions: vec![
                        Condition::Host(StrMatch::Exact("beta.example.com".into())),
                        Condition::Header {
                            name: "user-agent".into(),
                            value: StrMatch::Regex("(?i)curl".into()),
                        },
                    ],
                    backends: vec!["web1".into()],
                },
            ],
        }),
    };
    let db = VService {
        name: "db".into(),
        kind: VServiceKind::L7Tcp,
        address: ip("127.0.0.1"),
        address6: None,
        ports: PortSpec::Single(5432),
        forwarding: Forwarding::Nat,
        maglev_size: 65537,
        backends: vec!["api1".into()],
        apply_admin_state: false,
        l7: Some(L7Settings {
            algorithm: Algorithm::First,
            persistence: Persistence::SourceIp {
                idle: Duration::from_secs(60),
            },
            timeouts: default_timeouts(),
            queue_size: 1024,
            retry: Default::default(),
            tls: None,
            error_page: None,
            forwarded_headers: true,
            conditional_sets: Vec::new(),
        }),
    };
    assert_eq!(config.vservices, vec![site, db]);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn default_timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(5),
        client: Duration::from_secs(30),
        server: Duration::from_secs(30),
        queue: Duration::from_secs(5),
        keep_alive: Duration::from_secs(60),
    }
}

/// An L7 vService with only the required keys gets the documented defaults; no `[api]`
/// means the loopback default without a token; no `[cluster]` means clustering off.
#[test]
fn l7_defaults() {
    let text = format!(
        "{BACKENDS}\n[[vservice]]\nname = \"s\"\nkind = \"http\"\naddress = \"127.0.0.1\"\n\
         port = 8080\nbackends = [\"web1\"]\n"
    );
    let config = parse(&text, "d.toml").unwrap();
    assert_eq!(config.api, ApiSettings::default());
    assert_eq!(config.api.listen, SocketAddr::from(([127, 0, 0, 1], 9180)));
    assert_eq!(config.cluster, None);
    let expected = L7Settings {
        algorithm: Algorithm::RoundRobin,
        persistence: Persistence::None,
        timeouts: default_timeouts(),
        queue_size: 1024,
        retry: Default::default(),
        tls: None,
        error_page: None,
        forwarded_headers: true,
        conditional_sets: Vec::new(),
    };
    assert_eq!(config.vservices[0].l7, Some(expected));
}

/// Cookie and source-IP persistence defaults: LBSERVER, HttpOnly, not Secure, Lax; 30 min.
#[test]
fn persistence_defaults() {
    let base = format!(
        "{BACKENDS}\n[[vservice]]\nname = \"s\"\nkind = \"http\"\naddress = \"127.0.0.1\"\n\
         port = 8080\nbackends = [\"web1\"]\n[vservice.persistence]\n"
    );
    let cookie = parse(&format!("{base}type = \"cookie\"\n"), "p.toml").unwrap();
    let l7 = cookie.vservices[0].l7.clone().unwrap();
    assert_eq!(
        l7.persistence,
        Persistence::Cookie(CookiePersistence {
            name: "LBSERVER".into(),
            http_only: true,
            secure: false,
            same_site: SameSite::Lax,
        })
    );
    let source = parse(&format!("{base}type = \"source-ip\"\n"), "p.toml").unwrap();
    let l7 = source.vservices[0].l7.clone().unwrap();
    assert_eq!(
        l7.persistence,
        Persistence::SourceIp {
            idle: Duration::from_secs(1800)
        }
    );
    let none = parse(&format!("{base}type = \"none\"\n"), "p.toml").unwrap();
    let l7 = none.vservices[0].l7.clone().unwrap();
    assert_eq!(l7.persistence, Persistence::None);
}

/// A loopback API (v4 or v6) needs no token; each algorithm name maps to its variant.
#[test]
fn loopback_api_without_token_and_every_algorithm() {
    let config = parse("[api]\nlisten = \"[::1]:9000\"\n", "a.toml").unwrap();
    assert_eq!(
        config.api.listen,
        "[::1]:9000".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(config.api.token, None);
    let names = [
        ("round-robin", Algorithm::RoundRobin),
        ("weighted-round-robin", Algorithm::WeightedRoundRobin),
        ("least-connections", Algorithm::LeastConnections),
        (
            "weighted-least-connections",
            Algorithm::WeightedLeastConnections,
        ),
        ("source-ip-hash", Algorithm::SourceIpHash),
        ("first", Algorithm::First),
        ("weighted-random", Algorithm::WeightedRandom),
        ("least-request", Algorithm::LeastRequest),
        ("peak-ewma", Algorithm::PeakEwma),
    ];
    for (name, algorithm) in names {
        let text = format!(
            "{BACKENDS}\n[[vservice]]\nname = \"s\"\nkind = \"l7-tcp\"\naddress = \"127.0.0.1\"\n\
             port = 8080\nbackends = [\"web1\"]\nalgorithm = \"{name}\"\n"
        );
        let config = parse(&text, "a.toml").unwrap();
        assert_eq!(
            config.vservices[0].l7.as_ref().unwrap().algorithm,
            algorithm
        );
    }
}
