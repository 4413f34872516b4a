//! DNS vService counters and shutdown (S-GS): every message counted once by answer code in
//! the API and /metrics, and a stopping DNS vService answers every query it read, through
//! real `lb run` daemons on 127.0.0.1.

mod ports;
mod support {
    pub mod gslb;
}
use ports::free_port;
use support::gslb::*;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use lb::gslb::Gslb;
use tokio::net::UdpSocket;

/// Bad input counted: every message a DNS vService receives is counted once, in the API
/// (`GET /api/v1/gslb`) and in `/metrics`, by the code of the answer it got or by why it got
/// none. 300 datagrams that do not decode (FORMERR), too-short and response datagrams
/// (no answer) and good queries of every outcome, through a real `lb run`: the counters move
/// by exactly what was sent and answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_gs_every_dns_message_is_counted_by_answer_code_in_the_api_and_metrics() {
    let a = site(LIVE, None).await;
    let (api_port, dns_port) = (free_port(), free_port());
    let api = SocketAddr::from(([127, 0, 0, 1], api_port));
    let server = SocketAddr::from(([127, 0, 0, 1], dns_port));
    let dir = std::env::temp_dir().join(format!("lb-gslb-counted-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("lb.toml");
    let text = format!(
        "[api]\nlisten = \"{api}\"\n\
         [[dns_vservice]]\nname = \"g\"\naddress = \"127.0.0.1\"\nport = {dns_port}\n\
         zone = \"gslb.test\"\npoll_period = 0.2\npoll_timeout = 0.5\nrate_limit = 0\n\
         [[dns_vservice.record]]\nname = \"www\"\n{}",
        site_toml("a", "192.0.2.1", &a.url, false, "")
    );
    std::fs::write(&config, text).unwrap();
    let bin = std::env::var("LB_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_lb").to_owned());
    let child = std::process::Command::new(bin)
        .args(["run", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _daemon = Daemon {
        child,
        api: format!("http://{api}"),
        _dir: PathGuard(dir),
    };
    // The daemon starts (bounded): queries until one is answered with the site.
    let started = Instant::now();
    let valid = query_bytes("www.gslb.test.", RecordType::A);
    while udp(server, &valid).await.map(|m| addresses(&m)) != Some(vec![ip("192.0.2.1")]) {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "lb run never answered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = api_counters(api).await;
    let metrics_before = api_get(api, "/metrics").await;

    // Undecodable past the header: a question announced but absent, or a label running
    // past the end.
    let mut no_question = valid[..12].to_vec();
    no_question[5] = 1;
    let mut cut_label = valid[..14].to_vec();
    cut_label[12] = 60;
    let mut response = valid.clone();
    response[2] |= 0x80;
    let mut status = valid.clone();
    status[2] = (status[2] & 0x87) | (2 << 3); // opcode STATUS
    let mut two = Message::query();
    for qtype in [RecordType::A, RecordType::AAAA] {
        two.add_query(Query::query(
            Name::from_ascii("www.gslb.test.").unwrap(),
            qtype,
        ));
    }
    let two = two.to_vec().unwrap();
    let malformed = 300;
    let mut load: Vec<(Vec<u8>, Option<ResponseCode>)> = Vec::new();
    for i in 0..malformed {
        let bytes = if i % 2 == 0 { &no_question } else { &cut_label };
        load.push((bytes.clone(), Some(ResponseCode::FormErr)));
    }
    load.push((two, Some(ResponseCode::FormErr)));
    for _ in 0..3 {
        load.push((valid[..5].to_vec(), None));
    }
    for _ in 0..2 {
        load.push((response.clone(), None));
    }
    for _ in 0..5 {
        load.push((valid.clone(), Some(ResponseCode::NoError)));
    }
    let mx = query_bytes("www.gslb.test.", RecordType::MX);
    load.push((mx, Some(ResponseCode::NoError)));
    for _ in 0..2 {
        let nope = query_bytes("nope.gslb.test.", RecordType::A);
        load.push((nope, Some(ResponseCode::NXDomain)));
        let outside = query_bytes("www.example.org.", RecordType::A);
        load.push((outside, Some(ResponseCode::Refused)));
    }
    load.push((status, Some(ResponseCode::NotImp)));
    // One socket, one datagram at a time, each answer (or silence) awaited: bounded by the
    // 317 datagrams above, 1 s each at most.
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut buf = vec![0u8; 4096];
    for (bytes, expected) in &load {
        socket.send_to(bytes, server).await.unwrap();
        let wait = Duration::from_millis(if expected.is_some() { 1000 } else { 100 });
        let code = match tokio::time::timeout(wait, socket.recv(&mut buf)).await {
            Ok(Ok(len)) => Some(
                Message::from_vec(&buf[..len])
                    .unwrap()
                    .metadata
                    .response_code,
            ),
            _ => None,
        };
        assert_eq!(code, *expected, "the answer to {bytes:?}");
    }
    let after = api_counters(api).await;
    let metrics = api_get(api, "/metrics").await;
    let delta =
        |field: &str| after[field].as_u64().unwrap_or(0) - before[field].as_u64().unwrap_or(0);
    let sent = load.len() as u64;
    let expected = [
        ("queries", sent),
        ("formerr", malformed + 1),
        ("malformed", malformed),
        ("too_short", 3),
        ("ignored", 2),
        ("answered", 5),
        ("no_data", 1),
        ("nxdomain", 2),
        ("refused", 2),
        ("notimp", 1),
        ("servfail", 0),
        ("rate_limited", 0),
        ("send_failed", 0),
    ];
    let moved: Vec<(&str, u64)> = expected.iter().map(|(f, _)| (*f, delta(f))).collect();
    assert_eq!(moved, expected, "how far the API's counters moved");

    let g = "dns_vservice=\"g\"";
    let moved = |name: &str, labels: &str| {
        sample(&metrics, name, labels) - sample(&metrics_before, name, labels)
    };
    assert_eq!(moved("lb_dns_queries_total", g), sent, "{metrics}");
    let rcodes = [
        "NOERROR", "NXDOMAIN", "REFUSED", "FORMERR", "NOTIMP", "SERVFAIL",
    ];
    let by_rcode: Vec<(&str, u64)> = rcodes
        .into_iter()
        .map(|rcode| {
            let labels = format!("{g},rcode=\"{rcode}\"");
            (rcode, moved("lb_dns_responses_total", &labels))
        })
        .collect();
    let answered = [
        ("NOERROR", 6),
        ("NXDOMAIN", 2),
        ("REFUSED", 2),
        ("FORMERR", malformed + 1),
        ("NOTIMP", 1),
        ("SERVFAIL", 0),
    ];
    assert_eq!(by_rcode, answered, "{metrics}");
    let reasons = ["rate_limited", "too_short", "ignored", "send_failed"];
    let unanswered: Vec<(&str, u64)> = reasons
        .into_iter()
        .map(|reason| {
            let labels = format!("{g},reason=\"{reason}\"");
            (reason, moved("lb_dns_unanswered_total", &labels))
        })
        .collect();
    let silent = [
        ("rate_limited", 0),
        ("too_short", 3),
        ("ignored", 2),
        ("send_failed", 0),
    ];
    assert_eq!(unanswered, silent, "{metrics}");
    assert_eq!(moved("lb_dns_malformed_total", g), malformed, "{metrics}");
    let site_a = format!("{g},name=\"www.gslb.test.\",site=\"a\"");
    assert_eq!(moved("lb_dns_site_answers_total", &site_a), 5, "{metrics}");
    a.task.abort();
}

/// A stopping DNS vService (the old process of an upgrade) answers every query it read: it
/// reads no more once told to stop, and sends the answer of each datagram it took. The test
/// keeps a copy of the UDP socket, as the new process of an upgrade does; queries flow while
/// the DNS vService stops, then every query sent is either answered or still unread on the
/// copy: none is lost. At most 64 queries are in flight, plus a last burst of 64 as the stop
/// begins, so the copy's receive buffer never overflows (that loss would be the kernel's).
/// Bounded: at most 20,000 queries, 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_gs_a_stopping_dns_vservice_answers_every_query_it_read() {
    let a = site(LIVE, None).await;
    let sites = [site_toml("a", "192.0.2.1", &a.url, false, "")];
    let port = free_port();
    let server = SocketAddr::from(([127, 0, 0, 1], port));
    let udp = std::net::UdpSocket::bind(server).unwrap();
    let copy = udp.try_clone().unwrap();
    let mut inherited = lb::gslb::DnsSockets::default();
    inherited.udp.insert(server, udp);
    inherited
        .tcp
        .insert(server, std::net::TcpListener::bind(server).unwrap());
    let cfg = config(port, "round-robin", 1, 0, &sites);
    let gslb = Gslb::start_inheriting(cfg, inherited).await.unwrap();

    let client = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let sending = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sender = {
        let (client, sending, answered) = (client.clone(), sending.clone(), answered.clone());
        tokio::spawn(async move {
            let mut sent = 0u16;
            let started = Instant::now();
            let mut tail = 64;
            while tail > 0 && sent < 20_000 && started.elapsed() < Duration::from_secs(10) {
                let stopping = !sending.load(std::sync::atomic::Ordering::SeqCst);
                let in_flight = usize::from(sent)
                    .saturating_sub(answered.load(std::sync::atomic::Ordering::SeqCst));
                if !stopping && in_flight >= 64 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                let mut query = sent.to_be_bytes().to_vec();
                query.extend_from_slice(&query_bytes("www.gslb.test.", RecordType::A)[2..]);
                client.send_to(&query, server).await.unwrap();
                sent += 1;
                if stopping {
                    tail -= 1;
                }
            }
            sent
        })
    };
    let receiver = {
        let (client, count) = (client.clone(), answered.clone());
        tokio::spawn(async move {
            let mut answered = HashSet::new();
            let mut buf = [0u8; 512];
            // Until the answers stop coming for 1 s.
            while let Ok(Ok(len)) =
                tokio::time::timeout(Duration::from_secs(1), client.recv(&mut buf)).await
            {
                if len >= 12 {
                    answered.insert(u16::from_be_bytes([buf[0], buf[1]]));
                    count.store(answered.len(), std::sync::atomic::Ordering::SeqCst);
                }
            }
            answered.len()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    sending.store(false, std::sync::atomic::Ordering::SeqCst);
    gslb.shutdown().await;
    let sent = sender.await.unwrap();
    let answered = receiver.await.unwrap();
    copy.set_nonblocking(true).unwrap();
    let mut unread = 0;
    let mut buf = [0u8; 512];
    while copy.recv_from(&mut buf).is_ok() {
        unread += 1;
    }
    assert!(
        answered > 100,
        "the DNS vService served ({answered} answered)"
    );
    assert_eq!(
        answered + unread,
        usize::from(sent),
        "{sent} sent: {answered} answered, {unread} left unread for the next process"
    );
    a.task.abort();
}
