//! L7 proxy (HTTP and L7 TCP vServices) end to end on loopback: bad input and failing
//! servers. Malformed requests, retries after a refused or unanswered connect (S-RT1, S-RT2),
//! a server killed under load, clients that leave, timeouts, oversized headers, slowloris,
//! upstreams that close mid-answer. Real backends, the real proxy and real clients
//! (support/l7.rs).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use lb::config::VServiceKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod ports;
use ports::free_port;
mod support {
    pub mod l7;
}
use support::l7::*;

// ---------------------------------------------------------------------------------------------
// Tests: bad input and failures

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_request_gets_400_without_reaching_a_backend() {
    let a = http_backend("a").await;
    let env = Env::start(config(
        vec![service("a", a.addr)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["a"])],
    ))
    .await;
    let reply = raw(
        env.addr("web"),
        b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    let reply = raw(env.addr("web"), b"\x01\x02garbage\r\n\r\n").await;
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    assert_eq!(a.hits(), 0);
    assert_eq!(env.stats("web").counts.bad_requests, 2);
}

/// S-RT1 (like HAProxy's `retries` + `option redispatch`): a refused connect sent nothing,
/// so the request goes to another server of the list: with one of two mains refusing and no
/// health check to take it out, every request is answered by the other (retries counted);
/// with `retries = 0` the refused ones get 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connect_is_retried_on_another_server() {
    let a = http_backend("a").await;
    let dead = refusing_addr().await;
    let web = vservice("web", VServiceKind::Http, &["dead", "a"]);
    let mut strict = vservice("strict", VServiceKind::Http, &["dead", "a"]);
    if let Some(l7) = strict.l7.as_mut() {
        l7.retry.retries = 0;
    }
    let env = Env::start(config(
        vec![service("a", a.addr), service("dead", dead)],
        vec![],
        vec![web, strict],
    ))
    .await;
    for _ in 0..20 {
        let (status, _, body) = get(env.addr("web"), "/").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "a"));
    }
    assert_eq!(a.hits(), 20);
    let retries = env.stats("web").counts.retries;
    assert!(
        (5..=15).contains(&retries),
        "round robin sent about half to `dead` first: {retries}"
    );
    let mut bad_gateway = 0;
    for _ in 0..20 {
        let (status, _, _) = get(env.addr("strict"), "/").await;
        match status {
            StatusCode::OK => {}
            StatusCode::BAD_GATEWAY => bad_gateway += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert!(
        bad_gateway >= 5,
        "without retries the refused ones fail: {bad_gateway}"
    );
    assert_eq!(env.stats("strict").counts.retries, 0);
}

/// S-RT1: a retry after a refused connect is outside the retry budget: the refused server never saw
/// the request, so sending it elsewhere is no second copy. Sixteen slow requests at once, half
/// of them first picked for the refusing server: all eight retries are under way together,
/// past the budget's floor of three, and every request is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_rt1_retries_after_a_refused_connect_take_no_share_of_the_budget() {
    let a = http_backend("a").await;
    let dead = refusing_addr().await;
    let env = Env::start(config(
        vec![service("a", a.addr), service("dead", dead)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["dead", "a"])],
    ))
    .await;
    let addr = env.addr("web");
    let answers: Vec<_> = (0..16)
        .map(|_| tokio::spawn(async move { get(addr, "/?ms=300").await.0 }))
        .collect();
    for answer in answers {
        assert_eq!(answer.await.expect("client"), StatusCode::OK);
    }
    let counts = env.stats("web").counts;
    assert!(
        counts.retries >= 5,
        "about half were retried: {}",
        counts.retries
    );
    assert_eq!(counts.retries_refused, 0);
}

/// The same for an L7 TCP vService: a refused connect is retried on another server before
/// the client sees anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_l7_tcp_connect_that_fails_goes_to_another_server() {
    let t = tcp_backend("t").await;
    let dead = refusing_addr().await;
    let env = Env::start(config(
        vec![service("t", t.addr), service("dead", dead)],
        vec![],
        vec![vservice("tcp", VServiceKind::L7Tcp, &["dead", "t"])],
    ))
    .await;
    for i in 0..10 {
        let mut conn = TcpStream::connect(env.addr("tcp")).await.expect("connect");
        conn.write_all(format!("hi{i}").as_bytes())
            .await
            .expect("write");
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
            .await
            .expect("answer in time")
            .expect("read");
        assert_eq!(&buf[..n], format!("t:hi{i}").as_bytes());
    }
    assert_eq!(t.hits(), 10);
    assert!(
        env.stats("tcp").counts.retries >= 3,
        "{}",
        env.stats("tcp").counts.retries
    );
}

/// What a scripted backend does with each request it reads.
#[derive(Clone, Copy)]
enum Unanswered {
    /// Closes the connection without a byte of answer.
    Close,
    /// Keeps the connection open without answering; reports when the proxy closes it.
    Hang,
}

/// A backend that never answers: counts the requests it reads and, for [`Unanswered::Hang`],
/// sends how long each connection stayed open after its request.
async fn unanswering_backend(
    how: Unanswered,
) -> (
    SocketAddr,
    Arc<AtomicUsize>,
    tokio::sync::mpsc::UnboundedReceiver<Duration>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let hits = Arc::new(AtomicUsize::new(0));
    let (closed_tx, closed_rx) = tokio::sync::mpsc::unbounded_channel();
    let seen = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = seen.clone();
            let closed_tx = closed_tx.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                if !matches!(s.read(&mut buf).await, Ok(n) if n > 0) {
                    return;
                }
                seen.fetch_add(1, Ordering::SeqCst);
                if let Unanswered::Hang = how {
                    let since = tokio::time::Instant::now();
                    let wait = tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf));
                    let _ = wait.await;
                    let _ = closed_tx.send(since.elapsed());
                }
            });
        }
    });
    (addr, hits, closed_rx)
}

/// POST with a small body on a new connection: the status.
async fn post(addr: SocketAddr) -> StatusCode {
    let answer = raw(
        addr,
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx",
    )
    .await;
    let code = answer.get(9..12).and_then(|c| c.parse::<u16>().ok());
    code.and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"))
}

/// S-RT1: a server that closes the connection after reading the request, before any byte of
/// the answer, may have acted on it: an idempotent request (GET, here also with a body held
/// whole) goes to another server, a POST does not (502). S-RT2: a request tries each server
/// at most once, so two such servers cannot make it loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_rt1_s_rt2_an_unanswered_idempotent_request_goes_to_another_server_a_post_does_not() {
    let a = http_backend("a").await;
    let (mute, mute_hits, _) = unanswering_backend(Unanswered::Close).await;
    let (mute2, mute2_hits, _) = unanswering_backend(Unanswered::Close).await;
    let mut looping = vservice("looping", VServiceKind::Http, &["mute", "mute2"]);
    if let Some(l7) = looping.l7.as_mut() {
        l7.retry.retries = 10;
    }
    let env = Env::start(config(
        vec![
            service("a", a.addr),
            service("mute", mute),
            service("mute2", mute2),
        ],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["mute", "a"]), looping],
    ))
    .await;
    for _ in 0..10 {
        let (status, _, body) = get(env.addr("web"), "/").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "a"));
    }
    let put = raw(
        env.addr("web"),
        b"PUT / HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
    )
    .await;
    assert!(put.starts_with("HTTP/1.1 200"), "{put}");
    let sent_to_mute = mute_hits.load(Ordering::SeqCst);
    assert!(
        sent_to_mute >= 3,
        "round robin tried `mute` first: {sent_to_mute}"
    );
    let stats = env.stats("web");
    assert_eq!(stats.counts.retries as usize, sent_to_mute);
    let mute_stats = stats.pool.backends.iter().find(|b| b.name == "mute");
    let left_mute = mute_stats.map(|b| (b.retries, b.redispatches));
    assert_eq!(left_mute, Some((sent_to_mute as u64, sent_to_mute as u64)));

    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(post(env.addr("web")).await);
    }
    let bad_gateway = statuses
        .iter()
        .filter(|s| **s == StatusCode::BAD_GATEWAY)
        .count();
    assert!(
        bad_gateway >= 3,
        "POSTs that reached `mute` are not resent: {statuses:?}"
    );
    assert_eq!(env.stats("web").counts.retries as usize, sent_to_mute);

    let before = mute_hits.load(Ordering::SeqCst) + mute2_hits.load(Ordering::SeqCst);
    assert_eq!(
        get(env.addr("looping"), "/").await.0,
        StatusCode::BAD_GATEWAY
    );
    let after = mute_hits.load(Ordering::SeqCst) + mute2_hits.load(Ordering::SeqCst);
    assert_eq!(after - before, 2, "one try per server, then 502");
}

/// S-RT1: one of two mains is killed (its process and every
/// connection gone) under keep-alive load, with no health check to take it out: requests in
/// flight on it and new ones picked for it go to the other main. Not one request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_rt1_a_main_killed_under_load_fails_no_request() {
    let a = http_backend("a").await;
    let b = http_backend("b").await;
    let env = Env::start(config(
        vec![service("a", a.addr), service("b", b.addr)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["a", "b"])],
    ))
    .await;
    let addr = env.addr("web");
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let load: Vec<_> = (0..4)
        .map(|_| {
            let stop_rx = stop_rx.clone();
            tokio::spawn(async move {
                let c = client();
                let (mut ok, mut failed) = (0u64, Vec::new());
                while !*stop_rx.borrow() {
                    let req = Request::get(format!("http://{addr}/"))
                        .body(Empty::new())
                        .expect("req");
                    match c.request(req).await {
                        Ok(resp) if resp.status() == StatusCode::OK => ok += 1,
                        Ok(resp) => failed.push(resp.status().to_string()),
                        Err(e) => failed.push(e.to_string()),
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let served_by_b = b.hits();
    drop(b);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let _ = stop.send(true);
    let (mut ok, mut failed) = (0, Vec::new());
    for task in load {
        let (o, f) = task.await.expect("client");
        ok += o;
        failed.extend(f);
    }
    let retries = env.stats("web").counts.retries;
    println!(
        "{ok} answered, {} failed, {retries} retried; b served {served_by_b} before it died",
        failed.len()
    );
    assert!(served_by_b > 10, "b took its share first");
    assert!(
        failed.is_empty(),
        "{} failed: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(
        retries > 10,
        "requests picked for the dead main were retried: {retries}"
    );
    let answered_2xx: u64 = env
        .stats("web")
        .pool
        .backends
        .iter()
        .map(|b| b.classes[1])
        .sum();
    assert_eq!(
        answered_2xx, ok,
        "every answer is counted as a 2xx of its backend"
    );
}

/// S-RT1: a client that leaves while its request waits for an answer cancels it: the proxy
/// closes the backend connection at once (it is not left open until the server answers, nor
/// pooled), and counts a client abort.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_rt1_a_client_that_leaves_cancels_its_upstream_request() {
    let (hang, hits, mut closed) = unanswering_backend(Unanswered::Hang).await;
    let env = Env::start(config(
        vec![service("hang", hang)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["hang"])],
    ))
    .await;
    let mut client = TcpStream::connect(env.addr("web")).await.expect("connect");
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "the request reached the server"
    );
    drop(client);
    let open = tokio::time::timeout(Duration::from_secs(5), closed.recv())
        .await
        .expect("the backend connection closes soon after the client left")
        .expect("reported");
    assert!(
        open < Duration::from_secs(2),
        "closed {open:?} after the request"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(env.stats("web").counts.client_aborts, 1);
}

/// A server silent past the server timeout gets 504, counted; by default a timeout is not
/// retried (`retry_on` lacks `response-timeout`), so the server saw one try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_is_answered_504_and_counted() {
    let (hang, hits, _closed) = unanswering_backend(Unanswered::Hang).await;
    let (hang2, hits2, _closed2) = unanswering_backend(Unanswered::Hang).await;
    let mut web = vservice("web", VServiceKind::Http, &["hang", "hang2"]);
    if let Some(l7) = web.l7.as_mut() {
        l7.timeouts.server = Duration::from_millis(300);
    }
    let env = Env::start(config(
        vec![service("hang", hang), service("hang2", hang2)],
        vec![],
        vec![web],
    ))
    .await;
    assert_eq!(
        get(env.addr("web"), "/").await.0,
        StatusCode::GATEWAY_TIMEOUT
    );
    let tries = hits.load(Ordering::SeqCst) + hits2.load(Ordering::SeqCst);
    assert_eq!(tries, 1);
    let counts = env.stats("web").counts;
    assert_eq!((counts.server_timeouts, counts.retries), (1, 0));
}

/// No rule of docs/behaviour.md covers header sizes: `[proxy] max_header_bytes` (16 KiB)
/// and `max_header_line_bytes` (8 KiB) answer 431, over HTTP/1.1 and HTTP/2 alike, so a
/// client cannot make the proxy hold an unbounded head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_headers_get_431() {
    let a = http_backend("a").await;
    let env = Env::start(config(
        vec![service("a", a.addr)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["a"])],
    ))
    .await;
    // The defaults: 16 KiB for the head, 8 KiB per line, like HAProxy and nginx. A 20 KB
    // header; a 9 KB one (the head fits, its line does not); two 6 KB ones (each line fits,
    // the head does not); a 9 KB request target (414).
    let h = |n: usize| "x".repeat(n);
    let cases = [
        (
            format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", h(20_000)),
            "431",
        ),
        (
            format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", h(9_000)),
            "431",
        ),
        (
            format!(
                "GET / HTTP/1.1\r\nHost: x\r\nA: {}\r\nB: {}\r\n\r\n",
                h(6_000),
                h(6_000)
            ),
            "",
        ),
        (
            format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", h(9_000)),
            "414",
        ),
    ];
    for (req, status) in &cases {
        let reply = raw(env.addr("web"), req.as_bytes()).await;
        let want = format!(
            "HTTP/1.1 {}",
            if status.is_empty() { "200" } else { status }
        );
        assert!(
            reply.starts_with(&want),
            "{want}: {}",
            &reply[..reply.len().min(200)]
        );
    }
    assert_eq!(
        a.hits(),
        1,
        "only the head within both limits reached the server"
    );
    let three = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nA: {}\r\nB: {}\r\nC: {}\r\n\r\n",
        h(6_000),
        h(6_000),
        h(6_000)
    );
    let reply = raw(env.addr("web"), three.as_bytes()).await;
    assert!(
        reply.starts_with("HTTP/1.1 431"),
        "18 KB head: {}",
        &reply[..reply.len().min(200)]
    );
    assert_eq!(a.hits(), 1);
    // Over HTTP/2 (h2c) a header line over 8 KiB is refused too.
    let c: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(HttpConnector::new());
    let req = Request::get(format!("http://{}/", env.addr("web")))
        .header("x-big", h(9_000))
        .body(Empty::new())
        .expect("req");
    let resp = c.request(req).await.expect("h2c response");
    assert_eq!(resp.status(), 431);
    assert_eq!(a.hits(), 1);
    // A normal request is fine.
    assert_eq!(get(env.addr("web"), "/").await.2, "a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_is_cut_at_the_client_timeout() {
    let a = http_backend("a").await;
    let mut vs = vservice("web", VServiceKind::Http, &["a"]);
    if let Some(l7) = vs.l7.as_mut() {
        l7.timeouts.client = Duration::from_millis(500);
    }
    let env = Env::start(config(vec![service("a", a.addr)], vec![], vec![vs])).await;
    for opening in [&b"GET / HTTP/1.1\r\nHost: x\r\n"[..], &b"G"[..]] {
        let mut s = TcpStream::connect(env.addr("web")).await.expect("connect");
        s.write_all(opening).await.expect("write");
        let started = std::time::Instant::now();
        // Trickle a header byte every 100 ms: never completes the headers.
        let mut closed = false;
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if s.write_all(b"X").await.is_err() {
                closed = true;
                break;
            }
            let mut buf = [0u8; 256];
            match tokio::time::timeout(Duration::from_millis(1), s.read(&mut buf)).await {
                Ok(Ok(_)) | Ok(Err(_)) => {
                    closed = true;
                    break;
                }
                Err(_) => {}
            }
        }
        let took = started.elapsed();
        assert!(closed, "the connection was cut");
        assert!(
            took < Duration::from_millis(2000),
            "cut near the 500 ms client timeout, took {took:?}"
        );
    }
    assert_eq!(a.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_closing_mid_response_aborts_that_response_only_and_is_counted() {
    // A backend that promises 1000 bytes, sends 10 and closes.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let bad_addr = listener.local_addr().expect("addr");
    let bad = tokio::spawn(async move {
        for _ in 0..10 {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789")
                .await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let good = http_backend("good").await;
    let mut bad_vs = vservice("bad", VServiceKind::Http, &["bad"]);
    if let Some(l7) = bad_vs.l7.as_mut() {
        l7.forwarded_headers = false;
    }
    let env = Env::start(config(
        vec![service("bad", bad_addr), service("good", good.addr)],
        vec![],
        vec![bad_vs, vservice("ok", VServiceKind::Http, &["good"])],
    ))
    .await;
    let c = client();
    let req = Request::get(format!("http://{}/", env.addr("bad")))
        .body(Empty::new())
        .expect("req");
    let resp = c.request(req).await.expect("headers arrive");
    assert_eq!(resp.status(), StatusCode::OK);
    let body = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect())
        .await
        .expect("in time");
    assert!(
        body.is_err(),
        "the client sees the response aborted, not a short success"
    );
    // Counted, and other requests are unaffected.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stats = env.stats("bad");
    assert_eq!(stats.counts.upstream_aborts, 1);
    assert_eq!(
        stats
            .pool
            .backends
            .iter()
            .find(|b| b.name == "bad")
            .map(|b| b.failures),
        Some(1)
    );
    for _ in 0..5 {
        assert_eq!(get(env.addr("ok"), "/").await.2, "good");
    }
    bad.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_refusing_connections_gets_502() {
    let port = free_port();
    let dead: SocketAddr = ([127, 0, 0, 1], port).into();
    let env = Env::start(config(
        vec![service("dead", dead)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["dead"])],
    ))
    .await;
    assert_eq!(get(env.addr("web"), "/").await.0, StatusCode::BAD_GATEWAY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_headers_and_host_reach_the_backend() {
    let a = http_backend("a").await;
    let env = Env::start(config(
        vec![service("a", a.addr)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["a"])],
    ))
    .await;
    let (_, h, _) = get_with(
        &client(),
        env.addr("web"),
        "/",
        &[("x-forwarded-for", "203.0.113.9")],
    )
    .await;
    assert_eq!(h["seen-x-forwarded-for"], "203.0.113.9, 127.0.0.1");
    assert_eq!(h["seen-x-forwarded-proto"], "http");
    assert_eq!(h["seen-host"], env.addr("web").to_string());
}
