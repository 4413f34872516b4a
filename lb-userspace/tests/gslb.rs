//! Global service standby (S-GS): DNS vServices against site APIs. Sites are small HTTP
//! servers speaking the exact `GET /api/v1/stats/live` shape, or real `lb run` daemons
//! (`e2e_*`). Everything listens on 127.0.0.1 only.

mod ports;
mod support {
    pub mod gslb;
}
use ports::free_port;
use support::gslb::*;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use lb::gslb::SiteState;
use tokio::net::{TcpListener, UdpSocket};

/// S-GS1, S-GS2, S-GS3: the standby is dark while an active site serves, answered on the
/// first query after every active failed, and dark again on the first query after one
/// active recovered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_gs1_s_gs2_s_gs3_standby_only_while_every_active_failed() {
    let (a, b, s) = (
        site(LIVE, None).await,
        site(LIVE, None).await,
        site(LIVE, None).await,
    );
    let sites = [
        site_toml("a", "192.0.2.1", &a.url, false, ""),
        site_toml("b", "192.0.2.2", &b.url, false, ""),
        site_toml("s", "192.0.2.9", &s.url, true, ""),
    ];
    let (gslb, port) = start("round-robin", 1, 0, &sites).await;
    let server = SocketAddr::from(([127, 0, 0, 1], port));
    // The first poll is done before serving: statuses are already OK.
    assert_eq!(status_of(&gslb, "a").state, SiteState::Ok);
    assert_eq!(seen(server, 10).await, set(&["192.0.2.1", "192.0.2.2"]));

    a.set(DOWN);
    wait_state(&gslb, "a", SiteState::NoServices, Duration::from_secs(3)).await;
    assert_eq!(
        seen(server, 6).await,
        set(&["192.0.2.2"]),
        "one active left: standby dark"
    );

    b.set(DOWN);
    wait_state(&gslb, "b", SiteState::NoServices, Duration::from_secs(3)).await;
    assert_eq!(
        seen(server, 6).await,
        set(&["192.0.2.9"]),
        "S-GS1: standby takes over"
    );

    b.set(LIVE);
    wait_state(&gslb, "b", SiteState::Ok, Duration::from_secs(3)).await;
    assert_eq!(
        seen(server, 6).await,
        set(&["192.0.2.2"]),
        "S-GS2: back to the active"
    );
    let counters = &gslb.counters()[0];
    assert!(counters.standby_answers >= 6, "{counters:?}");
    gslb.shutdown().await;
    for site in [a, b, s] {
        site.task.abort();
    }
}

/// S-GS4: OK, No Services, No Metrics and No Connection (garbage, HTTP error, wrong token,
/// closed port), each with its reason, and every change in the transition log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_gs4_statuses_with_reasons_and_transitions() {
    let ok = site(LIVE, Some("site-token-0123456789")).await;
    let no_vs = site(Mode::NoVService, None).await;
    let garbage = site(Mode::Garbage, None).await;
    let error = site(Mode::Error(500), None).await;
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let sites = [
        site_toml(
            "ok",
            "192.0.2.1",
            &ok.url,
            false,
            "token = \"site-token-0123456789\"",
        ),
        site_toml(
            "wrong-token",
            "192.0.2.2",
            &ok.url,
            false,
            "token = \"not-the-token-0123456\"",
        ),
        site_toml("no-vs", "192.0.2.3", &no_vs.url, false, ""),
        site_toml("garbage", "192.0.2.4", &garbage.url, false, ""),
        site_toml("error", "192.0.2.5", &error.url, false, ""),
        site_toml("closed", "192.0.2.6", &closed, true, ""),
    ];
    let (gslb, _) = start("round-robin", 1, 0, &sites).await;
    let check = |name: &str, state: SiteState, reason: &str| {
        let status = status_of(&gslb, name);
        assert_eq!(status.state, state, "{status:?}");
        assert!(status.reason.contains(reason), "{name}: {status:?}");
    };
    check("ok", SiteState::Ok, "serves");
    check("wrong-token", SiteState::NoConnection, "HTTP 401");
    check(
        "no-vs",
        SiteState::NoMetrics,
        "does not report vservice `web`",
    );
    check("garbage", SiteState::NoConnection, "not JSON");
    check("error", SiteState::NoConnection, "HTTP 500");
    check("closed", SiteState::NoConnection, "request failed");
    assert_eq!(status_of(&gslb, "ok").sessions, Some(0));

    let before = Instant::now();
    ok.set(DOWN);
    wait_state(&gslb, "ok", SiteState::NoServices, Duration::from_secs(3)).await;
    check("ok", SiteState::NoServices, "no available backend");
    ok.task.abort();
    wait_state(&gslb, "ok", SiteState::NoConnection, Duration::from_secs(3)).await;
    let log: Vec<(SiteState, SiteState)> = gslb
        .transitions()
        .into_iter()
        .filter(|t| t.key.site == "ok")
        .map(|t| (t.from, t.to))
        .collect();
    assert_eq!(
        log,
        [
            (SiteState::NoConnection, SiteState::Ok),
            (SiteState::Ok, SiteState::NoServices),
            (SiteState::NoServices, SiteState::NoConnection),
        ]
    );
    assert!(before.elapsed() < Duration::from_secs(6));
    gslb.shutdown().await;
    for site in [no_vs, garbage, error] {
        site.task.abort();
    }
}

/// Answers: A with the configured TTL and AA, AAAA for IPv6 sites, UDP and TCP,
/// NXDOMAIN (with SOA) under the zone, REFUSED outside, malformed input never kills it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_gs_dns_answers_codes_and_malformed_queries() {
    let a = site(LIVE, None).await;
    let sites = [site_toml(
        "a",
        "192.0.2.1",
        &a.url,
        false,
        "address6 = \"2001:db8::1\"",
    )];
    let (gslb, port) = start("round-robin", 1, 0, &sites).await;
    let server = SocketAddr::from(([127, 0, 0, 1], port));

    let answer = ask(server, "WWW.gslb.test.", RecordType::A).await;
    assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
    assert!(answer.metadata.authoritative);
    assert_eq!(addresses(&answer), [ip("192.0.2.1")]);
    assert_eq!(answer.answers[0].ttl, 7);
    let answer = ask(server, "www.gslb.test.", RecordType::AAAA).await;
    assert_eq!(addresses(&answer), [ip("2001:db8::1")]);
    let answer = ask_tcp(server, "www.gslb.test.", RecordType::A).await;
    assert_eq!(addresses(&answer), [ip("192.0.2.1")]);
    let answer = ask(server, "www.gslb.test.", RecordType::MX).await;
    assert_eq!(
        (answer.metadata.response_code, answer.answers.len()),
        (ResponseCode::NoError, 0)
    );

    let answer = ask(server, "nope.gslb.test.", RecordType::A).await;
    assert_eq!(answer.metadata.response_code, ResponseCode::NXDomain);
    assert!(matches!(
        answer.authorities.first().map(|r| &r.data),
        Some(RData::SOA(_))
    ));
    let answer = ask(server, "www.example.org.", RecordType::A).await;
    assert_eq!(answer.metadata.response_code, ResponseCode::Refused);

    // Malformed: a header announcing a question that is not there, random bytes, a
    // response instead of a query, a truncated header. FORMERR or silence, never a crash.
    let valid = query_bytes("www.gslb.test.", RecordType::A);
    let mut no_question = valid[..12].to_vec();
    no_question[5] = 1;
    let mut response = valid.clone();
    response[2] |= 0x80;
    let junk: Vec<u8> = (0..200u32).map(|i| (i * 7919 % 251) as u8).collect();
    for bytes in [no_question, junk, response, valid[..5].to_vec()] {
        if let Some(answer) = udp(server, &bytes).await {
            assert_eq!(answer.metadata.message_type, MessageType::Response);
            assert_ne!(
                answer.metadata.response_code,
                ResponseCode::NoError,
                "{answer:?}"
            );
        }
    }
    let mut two = Message::query();
    two.add_query(Query::query(
        Name::from_ascii("www.gslb.test.").unwrap(),
        RecordType::A,
    ));
    two.add_query(Query::query(
        Name::from_ascii("www.gslb.test.").unwrap(),
        RecordType::AAAA,
    ));
    let answer = udp(server, &two.to_vec().unwrap()).await.expect("FORMERR");
    assert_eq!(answer.metadata.response_code, ResponseCode::FormErr);
    // Still serving.
    assert_eq!(
        addresses(&ask(server, "www.gslb.test.", RecordType::A).await),
        [ip("192.0.2.1")]
    );
    let counters = &gslb.counters()[0];
    assert!(
        counters.nxdomain == 1 && counters.refused == 1 && counters.formerr >= 1,
        "{counters:?}"
    );
    gslb.shutdown().await;
    a.task.abort();
}

/// Bad input: a flood from one source is bounded by the per-source limit and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_gs_query_flood_is_rate_limited_and_counted() {
    let a = site(LIVE, None).await;
    let sites = [site_toml("a", "192.0.2.1", &a.url, false, "")];
    let (gslb, port) = start("round-robin", 1, 5, &sites).await;
    let server = SocketAddr::from(([127, 0, 0, 1], port));
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let bytes = query_bytes("www.gslb.test.", RecordType::A);
    for _ in 0..100 {
        socket.send_to(&bytes, server).await.unwrap();
    }
    let mut answers = 0;
    let mut buf = [0u8; 1024];
    while let Ok(Ok(_)) =
        tokio::time::timeout(Duration::from_millis(300), socket.recv(&mut buf)).await
    {
        answers += 1;
    }
    assert!(
        (5..=8).contains(&answers),
        "{answers} answers to a flood of 100 at 5/s"
    );
    let counters = &gslb.counters()[0];
    assert_eq!(counters.queries, 100);
    assert_eq!(counters.rate_limited, 100 - answers);
    gslb.shutdown().await;
    a.task.abort();
}

/// Policies over real polls: least loaded follows the sites' sessions, weighted the weights.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_gs_least_loaded_and_weighted_from_polled_metrics() {
    let a = site(
        Mode::Live {
            tier: "mains",
            sessions: 50,
        },
        None,
    )
    .await;
    let b = site(
        Mode::Live {
            tier: "mains",
            sessions: 3,
        },
        None,
    )
    .await;
    let sites = [
        site_toml("a", "192.0.2.1", &a.url, false, "weight = 3"),
        site_toml("b", "192.0.2.2", &b.url, false, "weight = 1"),
    ];
    let (gslb, port) = start("least-loaded", 1, 0, &sites).await;
    let server = SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(seen(server, 5).await, set(&["192.0.2.2"]));
    b.set(Mode::Live {
        tier: "mains",
        sessions: 80,
    });
    let start = Instant::now();
    while seen(server, 1).await != set(&["192.0.2.1"]) {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "least loaded did not follow"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Reload to weighted: same listener, statuses kept (no new transition), weights apply.
    let transitions = gslb.transitions().len();
    gslb.update(config(port, "weighted", 1, 0, &sites))
        .await
        .unwrap();
    assert_eq!(gslb.transitions().len(), transitions);
    let mut a_count = 0;
    for _ in 0..40 {
        if addresses(&ask(server, "www.gslb.test.", RecordType::A).await) == [ip("192.0.2.1")] {
            a_count += 1;
        }
    }
    assert_eq!(a_count, 30, "weight 3 of 4");
    gslb.shutdown().await;
    for site in [a, b] {
        site.task.abort();
    }
}

/// End to end with real site daemons: S-GS1 (the standby appears when the active site's
/// backends stop), S-GS2 (and disappears when they are back), S-GS4 (a stopped daemon is
/// No Connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_s_gs1_s_gs2_s_gs4_real_site_daemons() {
    let (port_a, port_s) = (free_port(), free_port());
    let mut backend_a = backend(port_a).await;
    let backend_s = backend(port_s).await;
    let mut site_a = daemon("a", port_a).await;
    let site_s = daemon("s", port_s).await;
    let sites = [
        site_toml("a", "192.0.2.1", &site_a.api, false, ""),
        site_toml("s", "192.0.2.9", &site_s.api, true, ""),
    ];
    let (gslb, dns_port) = start("round-robin", 2, 0, &sites).await;
    let server = SocketAddr::from(([127, 0, 0, 1], dns_port));
    wait_state(&gslb, "a", SiteState::Ok, Duration::from_secs(10)).await;
    wait_state(&gslb, "s", SiteState::Ok, Duration::from_secs(10)).await;
    wait_answers(server, &["192.0.2.1"], Duration::from_secs(2)).await;

    backend_a.abort();
    let _ = (&mut backend_a).await;
    wait_state(&gslb, "a", SiteState::NoServices, Duration::from_secs(10)).await;
    wait_answers(server, &["192.0.2.9"], Duration::from_secs(2)).await;

    let backend_a = backend(port_a).await;
    wait_state(&gslb, "a", SiteState::Ok, Duration::from_secs(10)).await;
    wait_answers(server, &["192.0.2.1"], Duration::from_secs(2)).await;

    let _ = site_a.child.kill();
    let _ = site_a.child.wait();
    wait_state(&gslb, "a", SiteState::NoConnection, Duration::from_secs(5)).await;
    let status = status_of(&gslb, "a");
    assert!(status.reason.contains(&site_a.api), "{status:?}");
    gslb.shutdown().await;
    backend_a.abort();
    backend_s.abort();
}

/// S-GS1/S-GS2 with IPv6 site daemons: each site's API, vService and backend on `::1`, the
/// DNS vService polling them over IPv6 and answering AAAA with the sites' IPv6 addresses;
/// the standby's address appears when the active site's backend stops, and goes when it is
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_s_gs1_s_gs2_ipv6_site_daemons_answer_aaaa() {
    let v6: IpAddr = "::1".parse().unwrap();
    let (port_a, port_s) = (free_port(), free_port());
    let mut backend_a = backend_at(v6, port_a).await;
    let backend_s = backend_at(v6, port_s).await;
    let site_a = daemon_at(v6, "a6", port_a).await;
    let site_s = daemon_at(v6, "s6", port_s).await;
    assert!(site_a.api.starts_with("http://[::1]:"), "{}", site_a.api);
    let sites = [
        site_toml(
            "a",
            "192.0.2.1",
            &site_a.api,
            false,
            "address6 = \"2001:db8::a\"",
        ),
        site_toml(
            "s",
            "192.0.2.9",
            &site_s.api,
            true,
            "address6 = \"2001:db8::9\"",
        ),
    ];
    let (gslb, dns_port) = start("round-robin", 2, 0, &sites).await;
    let server = SocketAddr::from(([127, 0, 0, 1], dns_port));
    wait_state(&gslb, "a", SiteState::Ok, Duration::from_secs(10)).await;
    wait_state(&gslb, "s", SiteState::Ok, Duration::from_secs(10)).await;
    let aaaa = RecordType::AAAA;
    wait_answers_of(server, aaaa, &["2001:db8::a"], Duration::from_secs(2)).await;

    backend_a.abort();
    let _ = (&mut backend_a).await;
    wait_state(&gslb, "a", SiteState::NoServices, Duration::from_secs(10)).await;
    wait_answers_of(server, aaaa, &["2001:db8::9"], Duration::from_secs(2)).await;

    let backend_a = backend_at(v6, port_a).await;
    wait_state(&gslb, "a", SiteState::Ok, Duration::from_secs(10)).await;
    wait_answers_of(server, aaaa, &["2001:db8::a"], Duration::from_secs(2)).await;
    gslb.shutdown().await;
    backend_a.abort();
    backend_s.abort();
}

/// The DNS side, fuzzed. Datagrams of random bytes, and queries with random names,
/// types, flags and counts, get an answer or silence (never a crash); after each one a
/// valid query is still answered. `PROPTEST_CASES` sets the count (a tenth of it here: a
/// datagram left unanswered costs a 50 ms wait).
#[test]
fn any_datagram_leaves_the_dns_vservice_answering() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (a, gslb, server) = rt.block_on(async {
        let a = site(LIVE, None).await;
        let sites = [site_toml("a", "192.0.2.1", &a.url, false, "")];
        let (gslb, port) = start("round-robin", 1, 0, &sites).await;
        (a, gslb, SocketAddr::from(([127, 0, 0, 1], port)))
    });
    rt.block_on(wait_answers(
        server,
        &["192.0.2.1"],
        Duration::from_secs(10),
    ));
    let shaped = (
        any::<u16>(),
        any::<u16>(),
        "[a-zA-Z0-9.*_-]{0,70}",
        any::<u16>(),
        prop::collection::vec(any::<u8>(), 0..32),
    )
        .prop_map(|(id, flags, name, qtype, tail)| {
            let mut bytes = Vec::new();
            bytes.extend_from_slice(&id.to_be_bytes());
            bytes.extend_from_slice(&flags.to_be_bytes());
            bytes.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
            for label in name.split('.') {
                let label = &label.as_bytes()[..label.len().min(63)];
                bytes.push(label.len() as u8);
                bytes.extend_from_slice(label);
            }
            bytes.push(0);
            bytes.extend_from_slice(&qtype.to_be_bytes());
            bytes.extend_from_slice(&[0, 1]);
            bytes.extend_from_slice(&tail);
            bytes
        });
    let datagram = prop_oneof![prop::collection::vec(any::<u8>(), 0..600), shaped];
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse::<u32>().ok())
        .map_or(128, |n| (n / 10).max(128));
    let mut runner = TestRunner::new(Config::with_cases(cases));
    let result = runner.run(&datagram, |bytes| {
        rt.block_on(async {
            let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
            socket.send_to(&bytes, server).await.expect("send");
            let mut buf = vec![0u8; 4096];
            let got = tokio::time::timeout(Duration::from_millis(50), socket.recv(&mut buf));
            if let Ok(Ok(len)) = got.await {
                prop_assert!(Message::from_vec(&buf[..len]).is_ok(), "an answer is DNS");
            }
            let answer = udp(server, &query_bytes("www.gslb.test.", RecordType::A)).await;
            prop_assert!(answer.is_some(), "still answering after {bytes:?}");
            Ok(())
        })
    });
    rt.block_on(async {
        gslb.shutdown().await;
        a.task.abort();
    });
    result.expect("the DNS vService answers on");
}
