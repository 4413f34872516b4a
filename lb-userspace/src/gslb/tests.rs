//! Unit tests of the answer policy (S-GS1..3) and of reading a site's stats (S-GS4).

use std::collections::HashMap;
use std::net::IpAddr;

use serde_json::json;

use crate::config::{DnsPolicy, DnsRecord, SiteService, Unreachable};

use super::policy::{Family, View, choose};
use super::poll::evaluate;
use super::status::SiteState;

fn site(name: &str, last_octet: u8, standby: bool, weight: u32) -> SiteService {
    SiteService {
        name: name.into(),
        ipv4: Some([192, 0, 2, last_octet].into()),
        ipv6: None,
        api: "http://127.0.0.1:1".into(),
        token: None,
        vservice: "web".into(),
        standby,
        weight,
    }
}

fn record(policy: DnsPolicy, answers: u32, sites: Vec<SiteService>) -> DnsRecord {
    DnsRecord {
        name: "www.gslb.example.".into(),
        policy,
        answers,
        unreachable: Unreachable::Skip,
        sites,
    }
}

fn view(state: SiteState, sessions: Option<u64>) -> View {
    View { state, sessions }
}

fn ok() -> View {
    view(SiteState::Ok, Some(0))
}

fn ip(last_octet: u8) -> IpAddr {
    IpAddr::from([192, 0, 2, last_octet])
}

/// S-GS1: while an active site can serve, the standby is never handed out.
#[test]
fn s_gs1_standby_dark_while_an_active_serves() {
    let rec = record(
        DnsPolicy::RoundRobin,
        4,
        vec![
            site("a", 1, false, 1),
            site("b", 2, false, 1),
            site("s", 9, true, 1),
        ],
    );
    let views = [view(SiteState::NoServices, Some(0)), ok(), ok()];
    for turn in 0..10 {
        assert_eq!(choose(&rec, &views, Family::V4, turn), vec![ip(2)]);
    }
}

/// S-GS1: when every active site has failed, the standby is answered.
#[test]
fn s_gs1_standby_answers_when_every_active_failed() {
    let rec = record(
        DnsPolicy::Weighted,
        4,
        vec![
            site("a", 1, false, 1),
            site("s1", 8, true, 1),
            site("s2", 9, true, 1),
        ],
    );
    let views = [
        view(SiteState::NoServices, None),
        ok(),
        view(SiteState::NoServices, None),
    ];
    assert_eq!(choose(&rec, &views, Family::V4, 0), vec![ip(8)]);
    // No site at all can serve: an empty answer, never a failed site.
    let none = [view(SiteState::NoServices, None); 3];
    assert!(choose(&rec, &none, Family::V4, 0).is_empty());
}

/// S-GS2/S-GS3: the decision is made per query from the statuses of that moment: the
/// query after the recovery no longer names the standby.
#[test]
fn s_gs2_recovered_active_replaces_the_standby_on_the_next_query() {
    let rec = record(
        DnsPolicy::RoundRobin,
        1,
        vec![site("a", 1, false, 1), site("s", 9, true, 1)],
    );
    let failed = [view(SiteState::NoServices, None), ok()];
    let recovered = [ok(), ok()];
    assert_eq!(choose(&rec, &failed, Family::V4, 0), vec![ip(9)]);
    assert_eq!(choose(&rec, &recovered, Family::V4, 1), vec![ip(1)]);
}

/// S-GS4: unknown statuses (No Metrics, No Connection) take part only in plain round
/// robin; weighted and least loaded need an OK site, else they fall back to the standby.
#[test]
fn s_gs4_unknown_status_only_in_plain_round_robin() {
    let sites = vec![
        site("a", 1, false, 1),
        site("b", 2, false, 1),
        site("s", 9, true, 1),
    ];
    let views = [
        view(SiteState::NoConnection, None),
        view(SiteState::NoMetrics, None),
        ok(),
    ];
    let mut rr = record(DnsPolicy::RoundRobin, 4, sites.clone());
    rr.unreachable = Unreachable::Serve;
    let mut got = choose(&rr, &views, Family::V4, 0);
    got.sort();
    assert_eq!(got, vec![ip(1), ip(2)]);
    rr.unreachable = Unreachable::Skip;
    assert_eq!(
        choose(&rr, &views, Family::V4, 0),
        vec![ip(2)],
        "by default an unreachable site is left out while another can serve"
    );
    for policy in [DnsPolicy::Weighted, DnsPolicy::LeastLoaded] {
        let rec = record(policy, 4, sites.clone());
        assert_eq!(
            choose(&rec, &views, Family::V4, 0),
            vec![ip(9)],
            "{policy:?}"
        );
    }
}

/// S-GS1: with the default `unreachable = "skip"`, an active site whose daemon does not
/// answer (No Connection) hands over to its standby; it is answered only when no site of
/// the name is known to serve. `"serve"` keeps answering it.
#[test]
fn an_unreachable_active_site_hands_over_to_its_standby_by_default() {
    let sites = vec![site("a", 1, false, 1), site("s", 9, true, 1)];
    let mut rr = record(DnsPolicy::RoundRobin, 1, sites);
    let unreachable_and_ok = [view(SiteState::NoConnection, None), ok()];
    assert_eq!(choose(&rr, &unreachable_and_ok, Family::V4, 0), vec![ip(9)]);
    let both_unreachable = [
        view(SiteState::NoConnection, None),
        view(SiteState::NoConnection, None),
    ];
    assert_eq!(
        choose(&rr, &both_unreachable, Family::V4, 0),
        vec![ip(1)],
        "nothing known to serve: the active site is still answered"
    );
    let down_and_unreachable = [
        view(SiteState::NoServices, None),
        view(SiteState::NoConnection, None),
    ];
    assert_eq!(
        choose(&rr, &down_and_unreachable, Family::V4, 0),
        vec![ip(9)]
    );
    rr.unreachable = Unreachable::Serve;
    assert_eq!(choose(&rr, &unreachable_and_ok, Family::V4, 0), vec![ip(1)]);
}

/// Round robin: each active site comes first in turn.
#[test]
fn s_gs_round_robin_rotates() {
    let rec = record(
        DnsPolicy::RoundRobin,
        1,
        vec![
            site("a", 1, false, 1),
            site("b", 2, false, 1),
            site("c", 3, false, 1),
        ],
    );
    let views = [ok(), ok(), ok()];
    let firsts: Vec<IpAddr> = (0..6)
        .flat_map(|t| choose(&rec, &views, Family::V4, t))
        .collect();
    assert_eq!(firsts, vec![ip(1), ip(2), ip(3), ip(1), ip(2), ip(3)]);
    let two = record(DnsPolicy::RoundRobin, 2, rec.sites.clone());
    assert_eq!(choose(&two, &views, Family::V4, 2), vec![ip(3), ip(1)]);
}

/// Weighted: over one cycle, each site comes first exactly its weight times.
#[test]
fn s_gs_weighted_in_proportion() {
    let rec = record(
        DnsPolicy::Weighted,
        1,
        vec![
            site("a", 1, false, 3),
            site("b", 2, false, 1),
            site("c", 3, false, 2),
        ],
    );
    let views = [ok(), ok(), ok()];
    let mut counts: HashMap<IpAddr, u32> = HashMap::new();
    for turn in 0..60 {
        for address in choose(&rec, &views, Family::V4, turn) {
            *counts.entry(address).or_default() += 1;
        }
    }
    assert_eq!(counts[&ip(1)], 30);
    assert_eq!(counts[&ip(2)], 10);
    assert_eq!(counts[&ip(3)], 20);
}

/// Least loaded: the site with the fewest current sessions comes first.
#[test]
fn s_gs_least_loaded_first() {
    let rec = record(
        DnsPolicy::LeastLoaded,
        3,
        vec![
            site("a", 1, false, 1),
            site("b", 2, false, 1),
            site("c", 3, false, 1),
        ],
    );
    let views = [
        view(SiteState::Ok, Some(40)),
        view(SiteState::Ok, Some(5)),
        view(SiteState::Ok, Some(12)),
    ];
    for turn in 0..5 {
        assert_eq!(
            choose(&rec, &views, Family::V4, turn),
            vec![ip(2), ip(3), ip(1)]
        );
    }
}

/// AAAA answers use the sites' IPv6 addresses only.
#[test]
fn s_gs_families_are_separate() {
    let mut v6 = site("b", 2, false, 1);
    v6.ipv4 = None;
    v6.ipv6 = Some("2001:db8::2".parse().unwrap());
    let rec = record(DnsPolicy::RoundRobin, 4, vec![site("a", 1, false, 1), v6]);
    let views = [ok(), ok()];
    assert_eq!(choose(&rec, &views, Family::V4, 0), vec![ip(1)]);
    assert_eq!(
        choose(&rec, &views, Family::V6, 0),
        vec!["2001:db8::2".parse::<IpAddr>().unwrap()]
    );
}

fn live(tier: &str, counters: serde_json::Value, sessions: serde_json::Value) -> serde_json::Value {
    json!({
        "generated_unix_ms": 1,
        "vservices": [{"name": "web", "kind": "http", "address": "127.0.0.1", "ports": "80",
            "lists": [{"name": "default", "tier": tier, "members": []}],
            "counters": counters}],
        "backends": [{"name": "b1", "used_in": [{"vservice": "web", "list": "default"}],
                      "current_sessions": sessions},
                     {"name": "b2", "used_in": [{"vservice": "other", "list": "default"}],
                      "current_sessions": 100}]
    })
}

/// S-GS4: the four statuses as read from a site's live stats.
#[test]
fn s_gs4_statuses_from_live_stats() {
    let counters =
        json!({"requests": 9, "current": 7, "bytes_in": 0, "bytes_out": 0, "unavailable": 0});
    let seen = evaluate(&live("mains", counters.clone(), json!(3)), "web");
    assert_eq!((seen.state, seen.sessions), (SiteState::Ok, Some(7)));
    let seen = evaluate(&live("backup 1", json!(null), json!(3)), "web");
    assert_eq!((seen.state, seen.sessions), (SiteState::Ok, Some(3)));
    let seen = evaluate(&live("none", counters.clone(), json!(0)), "web");
    assert_eq!(seen.state, SiteState::NoServices);
    let seen = evaluate(&live("mains", json!(null), json!(null)), "web");
    assert_eq!(seen.state, SiteState::NoMetrics);
    assert!(
        seen.reason.contains("no session counters"),
        "{}",
        seen.reason
    );
    let seen = evaluate(&live("mains", counters, json!(0)), "absent");
    assert_eq!(seen.state, SiteState::NoMetrics);
    assert!(seen.reason.contains("does not report vservice `absent`"));
}

/// A DNS vService `g` for zone gslb.test with one name `www` and one site `a`, answering
/// without sockets.
fn handler() -> super::server::Handler {
    use std::sync::Arc;

    use arc_swap::ArcSwap;

    use super::rate::RateLimiter;
    use super::server::{Counters, Handler, Shared, Zone};
    use super::status::{Board, SiteKey};

    let text = "[api]\nlisten = \"127.0.0.1:1\"\n\
        [[dns_vservice]]\nname = \"g\"\naddress = \"127.0.0.1\"\nport = 5353\n\
        zone = \"gslb.test\"\nrate_limit = 0\n\
        [[dns_vservice.record]]\nname = \"www\"\n\
        [[dns_vservice.record.site]]\nname = \"a\"\naddress = \"192.0.2.1\"\n\
        api = \"http://127.0.0.1:1\"\nvservice = \"web\"\n";
    let cfg = crate::config::parse(text, "g.toml").expect("config");
    let dns = cfg.dns_vservices[0].clone();
    let board = Board::default();
    let key = SiteKey {
        dns_vservice: "g".into(),
        record: "www.gslb.test.".into(),
        site: "a".into(),
    };
    board.retain(vec![(key, "web".into(), false)], |_| false);
    Handler {
        shared: Arc::new(Shared {
            zone: ArcSwap::from_pointee(Zone::new(dns)),
            board,
            limiter: ArcSwap::from_pointee(RateLimiter::new(0)),
            counters: Counters::default(),
        }),
    }
}

/// Bad input counted: every message counts once in `queries` and once in exactly one answer
/// code (when sent) or reason for no answer; an undecodable one is answered FORMERR with its
/// id; answers are counted per site.
#[test]
fn s_gs_every_message_counted_once_by_answer_code_or_reason() {
    use std::sync::atomic::Ordering;

    use super::server::{Code, Reply, Transport};

    let handler = handler();
    let src: std::net::SocketAddr = "127.0.0.1:40000".parse().unwrap();
    // A query for www.gslb.test A, id 0x1234.
    let mut query = vec![0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in ["www", "gslb", "test"] {
        query.push(label.len() as u8);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    let mut undecodable = query[..12].to_vec();
    undecodable[5] = 1;
    undecodable.extend_from_slice(&[40, b'x']);
    let mut response = query.clone();
    response[2] |= 0x80;
    let cases: [(&[u8], std::net::SocketAddr, Option<Code>); 5] = [
        (&query, src, Some(Code::Answered)),
        (&undecodable, src, Some(Code::FormErr)),
        (&query[..11], src, None),
        (&response, src, None),
        (&query, "0.0.0.0:53".parse().unwrap(), None),
    ];
    for (bytes, from, expected) in cases {
        let reply = handler.reply(bytes, from, Transport::Udp);
        let code = match reply {
            Reply::Send {
                bytes: answer,
                code,
            } => {
                assert_eq!(
                    answer[..2],
                    [0x12, 0x34],
                    "the answer carries the query's id"
                );
                assert_eq!(answer[2] & 0x80, 0x80, "a response");
                handler.shared.counters.sent(code);
                Some(code)
            }
            Reply::Nothing => None,
        };
        assert_eq!(code, expected, "{bytes:?} from {from}");
    }
    let c = &handler.shared.counters;
    let get = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    let counted = [
        ("queries", get(&c.queries)),
        ("answered", get(&c.answered)),
        ("formerr", get(&c.formerr)),
        ("malformed", get(&c.malformed)),
        ("too_short", get(&c.too_short)),
        ("ignored", get(&c.ignored)),
        ("rate_limited", get(&c.rate_limited)),
    ];
    let expected = [
        ("queries", 5),
        ("answered", 1),
        ("formerr", 1),
        ("malformed", 1),
        ("too_short", 1),
        ("ignored", 2),
        ("rate_limited", 0),
    ];
    assert_eq!(counted, expected);
    let site = handler.shared.board.statuses();
    assert_eq!(site[0].answers, 1, "{site:?}");
}
