//! Real-socket probe tests on loopback (S-HC2, S-HC3): each probe type against tiny servers
//! written here, including garbage answers, which must fail with a reason and never panic.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use lb::config::{DnsCheck, Handshake, HttpCheck};
use lb::health::{DnsProbe, HttpProbe, PingProbe, Probe, ProbeResult, TcpProbe};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};

/// Timeout T for the probes: short, so silent cases end quickly.
const T: Duration = Duration::from_millis(400);
/// Upper bound on connections any test server accepts.
const MAX_CONNECTIONS: usize = 4;

fn http(expect: &[u16], body: Option<&str>) -> HttpCheck {
    HttpCheck {
        method: "GET".into(),
        path: "/health".into(),
        host: None,
        expect_status: expect.to_vec(),
        body_contains: body.map(Into::into),
        verify_tls: false,
    }
}

/// Runs a check with an outer guard so a hung probe fails the test instead of hanging it.
async fn run(probe: &dyn Probe) -> ProbeResult {
    timeout(T * 3, probe.check())
        .await
        .expect("the probe bounds itself by T")
}

fn assert_failed(result: &ProbeResult, needle: &str) {
    assert!(!result.ok, "expected a failure, got {result:?}");
    assert!(
        result.reason.contains(needle),
        "reason {:?} lacks {needle:?}",
        result.reason
    );
}

/// Reads a request head (bounded) so the server answers after the request arrived.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> Vec<u8> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    head
}

/// What a test HTTP server does with each connection.
#[derive(Clone)]
enum Answer {
    /// Sends these bytes, then closes.
    Bytes(Vec<u8>),
    /// Reads the request and keeps the connection open without answering.
    Silence,
}

async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    answer: Answer,
    seen: mpsc::UnboundedSender<Vec<u8>>,
) {
    let head = read_head(&mut stream).await;
    let _ = seen.send(head);
    match answer {
        Answer::Bytes(bytes) => {
            let _ = stream.write_all(&bytes).await;
            let _ = stream.shutdown().await;
        }
        Answer::Silence => tokio::time::sleep(T * 2).await,
    }
}

/// A plain HTTP server on 127.0.0.1 that answers a bounded number of connections.
async fn http_server(
    reply: Answer,
) -> (SocketAddr, mpsc::UnboundedReceiver<Vec<u8>>, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        for _ in 0..MAX_CONNECTIONS {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(answer(stream, reply.clone(), tx.clone()));
        }
    });
    (addr, rx, task)
}

async fn http_check(reply: &[u8], check: HttpCheck) -> ProbeResult {
    let (addr, _rx, server) = http_server(Answer::Bytes(reply.to_vec())).await;
    let result = run(&HttpProbe::plain(addr, check, T)).await;
    server.abort();
    result
}

/// A port with nothing listening: bound, then released.
async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

// S-HC2 TCP: an open port is a success.
#[tokio::test]
async fn s_hc2_tcp_open_port_succeeds() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let result = run(&TcpProbe::new(addr, T, Handshake::HalfOpen)).await;
    assert!(result.ok, "{result:?}");
    assert!(result.reason.contains("SYN-ACK in"), "{result:?}");
    let result = run(&TcpProbe::new(addr, T, Handshake::Full)).await;
    assert!(result.ok, "{result:?}");
    assert!(result.reason.contains("connected in"), "{result:?}");
}

// S-HC2/S-HC3 TCP: a closed port fails at once, not after T.
#[tokio::test]
async fn s_hc3_tcp_closed_port_fails_at_once() {
    let addr = closed_port().await;
    let result = run(&TcpProbe::new(addr, T, Handshake::HalfOpen)).await;
    assert_failed(&result, "refused");
    assert!(result.duration < T / 4, "{result:?}");
}

// S-HC3 TCP: a target that never answers the SYN fails after T, not before and not much
// later. A listener whose accept queue is full (backlog 0, one connection waiting) drops
// every further SYN, which is what a silent server looks like on the wire.
#[tokio::test]
async fn s_hc3_tcp_silent_target_fails_after_timeout() {
    use socket2::{Domain, Socket, Type};
    let listener = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    listener
        .bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())
        .unwrap();
    listener.listen(0).unwrap();
    let addr = listener.local_addr().unwrap().as_socket().unwrap();
    let _waiting = std::net::TcpStream::connect(addr).unwrap();
    for handshake in [Handshake::HalfOpen, Handshake::Full] {
        let started = Instant::now();
        let result = run(&TcpProbe::new(addr, T, handshake)).await;
        assert_failed(&result, "no answer within the timeout");
        assert!(
            started.elapsed() >= T && started.elapsed() < T * 2,
            "{handshake:?}: {result:?} after {:?}",
            started.elapsed()
        );
    }
}

// S-HC2 HTTP: 200 succeeds, and the request is a minimal HTTP/1.1 request.
#[tokio::test]
async fn s_hc2_http_200_succeeds_with_minimal_request() {
    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec();
    let (addr, mut rx, server) = http_server(Answer::Bytes(ok)).await;
    let result = run(&HttpProbe::plain(addr, http(&[200], None), T)).await;
    server.abort();
    assert!(result.ok, "{result:?}");
    let request = String::from_utf8(rx.recv().await.unwrap()).unwrap();
    assert!(request.starts_with("GET /health HTTP/1.1\r\n"), "{request}");
    assert!(
        request.contains(&format!("Host: 127.0.0.1:{}\r\n", addr.port())),
        "{request}"
    );
    assert!(request.contains("Connection: close\r\n"), "{request}");
}

// S-HC2/S-HC3 HTTP: a wrong status fails at once with the status in the reason.
#[tokio::test]
async fn s_hc3_http_500_fails_at_once() {
    let reply = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n";
    let result = http_check(reply, http(&[200], None)).await;
    assert_failed(&result, "status 500");
    assert!(result.duration < T / 2, "{result:?}");
    let redirect = b"HTTP/1.0 301 Moved\r\nLocation: /x\r\n\r\n";
    assert!(http_check(redirect, http(&[200, 301], None)).await.ok);
}

// S-HC2 HTTP: garbage, truncated and empty answers are failures with a reason.
#[tokio::test]
async fn s_hc2_http_garbage_and_truncated_answers_fail_with_reason() {
    let cases: [(&[u8], &str); 6] = [
        (b"SSH-2.0-OpenSSH_9.2\r\n", "not an HTTP response"),
        (b"\x00\xff\x13\x37binary", "not an HTTP response"),
        (b"HTTP/1.1 200", "truncated"),
        (b"HTTP/1.1 OK 200\r\n\r\n", "malformed status line"),
        (
            b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
            "malformed header",
        ),
        (b"", "closed without a response"),
    ];
    for (reply, reason) in cases {
        let result = http_check(reply, http(&[200], None)).await;
        assert_failed(&result, reason);
    }
}

// S-HC3 HTTP: a server that accepts but never answers fails after T.
#[tokio::test]
async fn s_hc3_http_silent_server_fails_after_timeout() {
    let (addr, _rx, server) = http_server(Answer::Silence).await;
    let started = Instant::now();
    let result = run(&HttpProbe::plain(addr, http(&[200], None), T)).await;
    server.abort();
    assert_failed(&result, "timeout");
    assert!(
        started.elapsed() >= T && started.elapsed() < T * 2,
        "{result:?}"
    );
}

// S-HC2 HTTP body match: found, missing, chunked across chunks, truncated, beyond 64 KiB.
#[tokio::test]
async fn s_hc2_http_body_match() {
    let check = http(&[200], Some("healthy"));
    let found = b"HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\nstatus: healthy\r\n";
    assert!(http_check(found, check.clone()).await.ok);

    let missing = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\ndegraded";
    assert_failed(
        &http_check(missing, check.clone()).await,
        "does not contain",
    );

    let chunked =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nheal\r\n3\r\nthy\r\n0\r\n\r\n";
    assert!(http_check(chunked, check.clone()).await.ok);

    let until_close = b"HTTP/1.0 200 OK\r\n\r\nall healthy here";
    assert!(http_check(until_close, check.clone()).await.ok);

    let truncated = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort";
    assert_failed(&http_check(truncated, check.clone()).await, "truncated");

    let mut huge = b"HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n".to_vec();
    huge.extend(std::iter::repeat_n(b'x', 100_000));
    huge.extend_from_slice(b"healthy");
    assert_failed(&http_check(&huge, check.clone()).await, "64 KiB");

    let wrong_status = b"HTTP/1.1 503 Unavailable\r\nContent-Length: 7\r\n\r\nhealthy";
    assert_failed(&http_check(wrong_status, check).await, "status 503");
}

// S-HC2 HTTP: a closed port fails at once.
#[tokio::test]
async fn s_hc3_http_closed_port_fails_at_once() {
    let addr = closed_port().await;
    let result = run(&HttpProbe::plain(addr, http(&[200], None), T)).await;
    assert_failed(&result, "refused");
    assert!(result.duration < T / 4);
}

/// An HTTPS server with a fresh self-signed certificate for "localhost".
async fn https_server(reply: &[u8]) -> (SocketAddr, JoinHandle<()>) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let reply = reply.to_vec();
    let task = tokio::spawn(async move {
        let (tx, _rx) = mpsc::unbounded_channel();
        for _ in 0..MAX_CONNECTIONS {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let (reply, tx) = (reply.clone(), tx.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    answer(tls, Answer::Bytes(reply), tx).await;
                }
            });
        }
    });
    (addr, task)
}

// S-HC2 HTTPS: a self-signed backend passes with verify_tls off (the default) and fails
// with a reason when verification is on.
#[tokio::test]
async fn s_hc2_https_self_signed_accepted_unless_verified() {
    let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nhealthy";
    let (addr, server) = https_server(reply).await;
    let mut check = http(&[200], Some("healthy"));
    check.host = Some("localhost".into());
    let result = run(&HttpProbe::tls(addr, check.clone(), T)).await;
    assert!(result.ok, "{result:?}");

    check.verify_tls = true;
    let result = run(&HttpProbe::tls(addr, check, T)).await;
    assert!(!result.ok && result.reason.contains("TLS"), "{result:?}");
    server.abort();

    // Plain HTTP spoken to by an HTTPS check is a handshake failure, not a panic.
    let (plain, _rx, server) = http_server(Answer::Bytes(reply.to_vec())).await;
    let result = run(&HttpProbe::tls(plain, http(&[200], None), T)).await;
    server.abort();
    assert_failed(&result, "TLS handshake");
}

/// What the test DNS responder sends back for each query.
#[derive(Clone, Copy)]
enum DnsReply {
    /// The query echoed back as a reply (QR set, NOERROR, no answers).
    Good,
    /// A reply whose id differs from the query's.
    WrongId,
    /// Only the first five bytes.
    Truncated,
}

/// A UDP responder on 127.0.0.1 answering a bounded number of queries.
async fn dns_server(kind: DnsReply) -> (SocketAddr, JoinHandle<()>) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut buf = [0u8; 512];
        for _ in 0..MAX_CONNECTIONS {
            let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                return;
            };
            let mut reply = buf[..n].to_vec();
            reply[2] |= 0x80;
            match kind {
                DnsReply::Good => {}
                DnsReply::WrongId => reply[0] ^= 0xff,
                DnsReply::Truncated => reply.truncate(5),
            }
            let _ = socket.send_to(&reply, from).await;
        }
    });
    (addr, task)
}

fn dns() -> DnsCheck {
    DnsCheck {
        query_name: "health.example.".into(),
        query_type: 1,
    }
}

// S-HC2 DNS: a query that must be answered; any well-formed reply with our id is a success.
#[tokio::test]
async fn s_hc2_dns_answered_wrong_id_truncated_and_closed() {
    let (addr, server) = dns_server(DnsReply::Good).await;
    let result = run(&DnsProbe::new(addr, dns(), T)).await;
    server.abort();
    assert!(result.ok, "{result:?}");
    assert!(result.reason.contains("NOERROR"));

    let (addr, server) = dns_server(DnsReply::WrongId).await;
    let result = run(&DnsProbe::new(addr, dns(), T)).await;
    server.abort();
    assert_failed(&result, "ignored");
    assert!(
        result.duration >= T,
        "a wrong id is ignored until the timeout: {result:?}"
    );

    let (addr, server) = dns_server(DnsReply::Truncated).await;
    let result = run(&DnsProbe::new(addr, dns(), T)).await;
    server.abort();
    assert_failed(&result, "truncated");

    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let closed = socket.local_addr().unwrap();
    drop(socket);
    let result = run(&DnsProbe::new(closed, dns(), T)).await;
    assert_failed(&result, "unreachable");
    assert!(result.duration < T / 2);
}

// S-HC2 Ping: ICMP echo to loopback is answered (raw socket; needs root or ping sockets).
#[tokio::test]
async fn s_hc2_ping_loopback_answers() {
    let result = run(&PingProbe::new(IpAddr::V4(Ipv4Addr::LOCALHOST), T)).await;
    assert!(result.ok, "{result:?}");
    assert!(result.reason.contains("echo reply"));
    // Several pings in a row each match their own reply (sequence numbers advance).
    let probe = PingProbe::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), T);
    for _ in 0..3 {
        assert!(run(&probe).await.ok);
    }
}

// S-HC2 Ping over ICMPv6, when the machine has IPv6 loopback.
#[tokio::test]
async fn s_hc2_ping_ipv6_loopback_answers() {
    if std::net::UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)).is_err() {
        eprintln!("no IPv6 loopback here; skipping");
        return;
    }
    let result = run(&PingProbe::new(IpAddr::V6(Ipv6Addr::LOCALHOST), T)).await;
    assert!(result.ok, "{result:?}");
}

/// Waits (real time, at most 3 s) until `service` is in `state`.
async fn wait_state(
    engine: &lb::health::HealthEngine,
    service: &str,
    state: lb::health::HealthState,
) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while engine.snapshot().state(service) != Some(state) {
        assert!(Instant::now() < deadline, "{service} never reached {state}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// S-HC5 with real TCP checks, as the daemon runs them (one thread for every TCP check): a
// listening service reaches OK after RS checks, Error after RF refusals, and a service a
// reload removed is no longer checked (its target sees no more connections).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_hc5_engine_tcp_checks_decide_and_stop_with_their_service() {
    use lb::config::{BackendService, HealthCheck, HealthKind};
    use lb::health::{HealthEngine, HealthState};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    let server = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        }
    });
    let check = HealthCheck {
        name: "hc".into(),
        // The full handshake, so the listener counts every check.
        kind: HealthKind::Tcp(Handshake::Full),
        period: Duration::from_millis(50),
        timeout: Duration::from_millis(300),
        required_successes: 2,
        required_failures: 2,
        passive_failures: None,
        max_ejection_percent: 50,
    };
    let service = BackendService {
        name: "web".into(),
        address: addr.ip(),
        address6: None,
        port: addr.port(),
        weight: 1,
        health_check: Some("hc".into()),
        maintenance: false,
        backup: false,
        max_connections: None,
        tunnel_check: None,
    };
    let closed = closed_port().await;
    let refused = BackendService {
        name: "gone".into(),
        port: closed.port(),
        ..service.clone()
    };
    let engine = HealthEngine::start(
        &[service.clone(), refused.clone()],
        std::slice::from_ref(&check),
    );
    wait_state(&engine, "web", HealthState::Ok).await;
    wait_state(&engine, "gone", HealthState::Error).await;
    let last = engine.transitions("gone").pop().expect("a transition");
    assert!(
        last.reason.contains("connection refused"),
        "{}",
        last.reason
    );
    let ok = engine.transitions("web").pop().expect("a transition");
    assert!(ok.reason.contains("connected in"), "{}", ok.reason);

    // Removed by a reload: no check reaches the target after the removal settled.
    engine.update(&[refused], std::slice::from_ref(&check));
    assert_eq!(engine.snapshot().state("web"), None);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after_removal = accepted.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        after_removal,
        "checks went on"
    );
    assert!(
        after_removal >= 2,
        "the checks reached the target: {after_removal}"
    );
    engine.shutdown();
    server.abort();
}
