//! HTTP/1.1 wire-level conformance of the L7 proxy's plain (non-TLS) path: raw TCP clients
//! write exact bytes, raw TCP backends (parsed with httparse) record exactly what reached them
//! and answer scripted bytes. Each test checks one behaviour of RFC 9110 / RFC 9112 that any
//! implementation of the proxy must keep (the regression suite of the HTTP/1.1 forwarder).
//! No rule of docs/behaviour.md covers HTTP framing itself: these check streamed bodies,
//! pooled upstream connections, forwarded headers and bad input; the test that also reads
//! the byte counters names S-OB1.
//! All traffic stays on 127.0.0.1; every read is bounded by a timeout and every loop by a count.
//! The wire reader, the raw backends and the proxy set-up are in support/http1.rs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

mod ports;
mod support {
    pub mod http1;
}
use support::http1::*;

// ---------------------------------------------------------------------------------------------
// Tests: message bodies and framing (RFC 9112 6, 7)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_response_written_in_pieces_reaches_the_client_exactly() {
    let ms = Duration::from_millis(30);
    let b = raw_backend(None, move |seen| {
        if seen.target != "/chunked" {
            return ok(b"next");
        }
        let piece = |s: &str| (ms, s.as_bytes().to_vec());
        Reply {
            pieces: vec![
                (
                    Duration::ZERO,
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
                ),
                piece("5\r\nhello\r\n"),
                // One chunk split across writes, and a chunk extension.
                piece("7;ext=1\r\n, wo"),
                piece("rld\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n"),
                piece("0\r\n\r\n"),
            ],
            close: false,
        }
    })
    .await;
    let env = Env::start(b.addr).await;
    let mut c = connect(env.addr).await;
    let r = exchange(&mut c, &get_req("/chunked"), "GET").await;
    assert_eq!((r.version, r.status), (1, 200), "an HTTP/1.1 200: {r:?}");
    assert_eq!(r.text(), "hello, worldabcdefghijklmnopqrstuvwxyz");
    // The body ended where it should: the same connection serves the next request.
    let r = exchange(&mut c, &get_req("/after"), "GET").await;
    assert_eq!((r.status, r.text().as_str()), (200, "next"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_with_1_mib_content_length_body_reaches_the_backend_intact() {
    let b = raw_backend(None, |seen| ok(length_and_sum(&seen.body).as_bytes())).await;
    let env = Env::start(b.addr).await;
    let body = payload(1 << 20);
    let mut c = connect(env.addr).await;
    c.send(
        format!(
            "POST /upload HTTP/1.1\r\nHost: web.test\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await;
    c.send(&body).await;
    let r = read_response(&mut c, "POST").await.expect("response");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), length_and_sum(&body));
    let seen = b.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].body.len(), body.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_with_chunked_request_body_reaches_the_backend_decoded() {
    let b = raw_backend(None, |seen| ok(length_and_sum(&seen.body).as_bytes())).await;
    let env = Env::start(b.addr).await;
    let mut c = connect(env.addr).await;
    let pieces: [&[u8]; 5] = [
        b"POST /chunks HTTP/1.1\r\nHost: web.test\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"4\r\nWiki\r\n",
        b"5\r\npedia\r\nE\r\n in\r\n",
        b"\r\nchunks.\r\n",
        b"0\r\n\r\n",
    ];
    for piece in pieces {
        c.send(piece).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = read_response(&mut c, "POST").await.expect("response");
    let expected = b"Wikipedia in\r\n\r\nchunks.";
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), length_and_sum(expected));
    let seen = b.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_in_one_write_get_responses_in_order() {
    let b = echo_backend().await;
    let env = Env::start(b.addr).await;
    let mut c = connect(env.addr).await;
    let mut both = get_req("/one");
    both.extend(get_req("/two"));
    c.send(&both).await;
    let first = read_response(&mut c, "GET").await.expect("first");
    let second = read_response(&mut c, "GET").await.expect("second");
    assert_eq!((first.status, first.text().as_str()), (200, "/one"));
    assert_eq!((second.status, second.text().as_str()), (200, "/two"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_1_0_request_without_keep_alive_gets_a_whole_response_then_close() {
    // The backend answers chunked: an HTTP/1.0 client must not get Transfer-Encoding
    // (RFC 9112 6.1).
    let b = raw_backend(None, |_| {
        reply(&b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nold-fa\r\n5\r\nshion\r\n0\r\n\r\n"[..])
    })
    .await;
    let env = Env::start(b.addr).await;
    let mut c = connect(env.addr).await;
    let r = exchange(
        &mut c,
        b"GET /old HTTP/1.0\r\nHost: web.test\r\n\r\n",
        "GET",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "old-fashion");
    assert!(
        !r.headers.has("transfer-encoding"),
        "no chunked to 1.0: {r:?}"
    );
    assert_eq!(c.idle(Duration::from_secs(2)).await, Idle::Closed);
}

/// A keep-alive connection idle long enough to be parked (no task of its own
/// while it waits) serves its next requests as before, pipelined ones included, and is
/// still closed at its keep-alive timeout counted from its last answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_idle_connection_serves_its_next_requests_and_closes_at_its_keep_alive_timeout() {
    let b = raw_backend(None, |seen| ok(seen.target.as_bytes())).await;
    let keep_alive = Duration::from_millis(1500);
    let env = Env::start_with(b.addr, keep_alive).await;
    let mut c = connect(env.addr).await;
    let r = exchange(&mut c, &get_req("/one"), "GET").await;
    assert_eq!((r.status, r.text().as_str()), (200, "/one"));
    // Idle well past the moment an idle connection is parked (100 ms).
    assert_eq!(c.idle(Duration::from_millis(600)).await, Idle::Quiet);
    let r = exchange(&mut c, &get_req("/two"), "GET").await;
    assert_eq!((r.status, r.text().as_str()), (200, "/two"));
    assert_eq!(c.idle(Duration::from_millis(600)).await, Idle::Quiet);
    let mut both = get_req("/three");
    both.extend_from_slice(&get_req("/four"));
    c.send(&both).await;
    let third = read_response(&mut c, "GET").await.expect("third");
    let fourth = read_response(&mut c, "GET").await.expect("fourth");
    assert_eq!((third.status, third.text().as_str()), (200, "/three"));
    assert_eq!((fourth.status, fourth.text().as_str()), (200, "/four"));
    let answered = std::time::Instant::now();
    assert_eq!(
        c.idle(keep_alive - Duration::from_millis(300)).await,
        Idle::Quiet,
        "closed before its keep-alive timeout"
    );
    assert_eq!(
        c.idle(Duration::from_secs(3)).await,
        Idle::Closed,
        "left open past its keep-alive timeout"
    );
    let waited = answered.elapsed();
    assert!(
        waited < keep_alive + Duration::from_millis(1000),
        "closed {waited:?} after its last answer (keep-alive timeout {keep_alive:?})"
    );
    assert_eq!(b.seen().len(), 4);
}

/// When its vService goes away, a parked idle connection is closed within the
/// short grace a waiting one gets, not left open until its keep-alive timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_idle_connection_closes_when_its_vservice_is_removed() {
    let b = raw_backend(None, |seen| ok(seen.target.as_bytes())).await;
    let env = Env::start_with(b.addr, Duration::from_secs(30)).await;
    let mut c = connect(env.addr).await;
    let r = exchange(&mut c, &get_req("/one"), "GET").await;
    assert_eq!(r.status, 200);
    assert_eq!(c.idle(Duration::from_millis(600)).await, Idle::Quiet);
    let empty = lb::config::parse("", "l7-http1-test.toml").expect("an empty config parses");
    env.proxy.update(Arc::new(empty)).await.expect("update");
    let removed = std::time::Instant::now();
    assert_eq!(c.idle(Duration::from_secs(5)).await, Idle::Closed);
    let waited = removed.elapsed();
    assert!(
        waited < Duration::from_secs(1),
        "closed {waited:?} after its vService was removed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_response_keeps_content_length_has_no_body_and_the_connection_goes_on() {
    let b = raw_backend(None, |seen| {
        if seen.method == "HEAD" {
            reply(
                &b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1234\r\n\r\n"[..],
            )
        } else {
            ok(seen.target.as_bytes())
        }
    })
    .await;
    let env = Env::start(b.addr).await;
    let mut c = connect(env.addr).await;
    let r = exchange(
        &mut c,
        b"HEAD /doc HTTP/1.1\r\nHost: web.test\r\n\r\n",
        "HEAD",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers.get("content-length"), Some("1234"), "{r:?}");
    assert_eq!(
        c.idle(Duration::from_millis(200)).await,
        Idle::Quiet,
        "no body bytes after a HEAD response"
    );
    let r = exchange(&mut c, &get_req("/next"), "GET").await;
    assert_eq!((r.status, r.text().as_str()), (200, "/next"));
    assert_eq!(b.seen()[0].method, "HEAD");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_204_and_304_without_body_keep_the_connection_usable() {
    let b = raw_backend(None, |seen| match seen.target.as_str() {
        "/none" => reply(&b"HTTP/1.1 204 No Content\r\nX-Id: 204\r\n\r\n"[..]),
        "/same" => reply(&b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n"[..]),
        other => ok(other.as_bytes()),
    })
    .await;
    let env = Env::start(b.addr).await;
    let mut c = connect(env.addr).await;
    let r = exchange(&mut c, &get_req("/none"), "GET").await;
    assert_eq!(r.status, 204);
    assert_eq!(r.headers.get("x-id"), Some("204"));
    assert!(
        !r.headers.has("transfer-encoding"),
        "no framing on 204: {r:?}"
    );
    assert_eq!(c.idle(Duration::from_millis(100)).await, Idle::Quiet);
    let r = exchange(
        &mut c,
        b"GET /same HTTP/1.1\r\nHost: web.test\r\nIf-None-Match: \"v1\"\r\n\r\n",
        "GET",
    )
    .await;
    assert_eq!(r.status, 304);
    assert_eq!(r.headers.get("etag"), Some("\"v1\""));
    assert_eq!(c.idle(Duration::from_millis(100)).await, Idle::Quiet);
    let r = exchange(&mut c, &get_req("/after"), "GET").await;
    assert_eq!((r.status, r.text().as_str()), (200, "/after"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_body_ended_by_close_reaches_the_client_whole() {
    let ms = Duration::from_millis(20);
    let b = raw_backend(None, move |_| Reply {
        pieces: vec![
            (
                Duration::ZERO,
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n".to_vec(),
            ),
            (ms, b"until ".to_vec()),
            (ms, b"the ".to_vec()),
            (ms, b"end".to_vec()),
        ],
        close: true,
    })
    .await;
    let env = Env::start(b.addr).await;
    let mut c = connect(env.addr).await;
    let r = exchange(&mut c, &get_req("/eof"), "GET").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "until the end");
    if r.framing != Framing::Close {
        // Framed for the client: the next request on this connection works too.
        let r = exchange(&mut c, &get_req("/eof"), "GET").await;
        assert_eq!((r.status, r.text().as_str()), (200, "until the end"));
    }
}

/// Sends a POST with `Expect: 100-continue`, waits up to 2 s for the interim 100, then sends
/// the body. Returns whether a 100 came first, and the final response.
async fn expect_continue_exchange(env: &Env, body: &[u8]) -> (bool, Resp) {
    let mut c = connect(env.addr).await;
    c.send(
        format!(
            "POST /expect HTTP/1.1\r\nHost: web.test\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await;
    let interim = tokio::time::timeout(Duration::from_secs(2), read_response(&mut c, "POST")).await;
    let continued = match interim {
        Ok(Ok(r)) => {
            assert_eq!(r.status, 100, "no final answer before the body: {r:?}");
            true
        }
        Ok(Err(e)) => panic!("reading the interim response: {e}"),
        Err(_) => false,
    };
    c.send(body).await;
    for _ in 0..3 {
        let r = read_response(&mut c, "POST").await.expect("final response");
        if r.status != 100 {
            return (continued, r);
        }
    }
    panic!("only interim responses");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_gets_interim_100_then_the_body_reaches_the_backend() {
    let b = raw_backend(None, |seen| ok(length_and_sum(&seen.body).as_bytes())).await;
    let env = Env::start(b.addr).await;
    let body = payload(10_000);
    let (continued, r) = expect_continue_exchange(&env, &body).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), length_and_sum(&body));
    assert_eq!(b.seen()[0].body, body);
    assert!(
        continued,
        "the client got 100 Continue before sending its body"
    );
}

// ---------------------------------------------------------------------------------------------
// Tests: connections (RFC 9112 9)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_sequential_requests_reuse_at_most_two_backend_connections() {
    let b = echo_backend().await;
    let env = Env::start(b.addr).await;
    let mut c = connect(env.addr).await;
    for i in 0..50 {
        let path = format!("/r{i}");
        let r = exchange(&mut c, &get_req(&path), "GET").await;
        assert_eq!((r.status, r.text()), (200, path));
    }
    assert!(b.accepts() <= 2, "{} backend connections", b.accepts());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_connection_close_after_each_response_never_gives_502() {
    let b = raw_backend(None, |seen| {
        let body = seen.target.as_bytes();
        let mut out = format!(
            "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(body);
        Reply {
            close: true,
            ..reply(out)
        }
    })
    .await;
    let env = Env::start(b.addr).await;
    let mut c = connect(env.addr).await;
    for i in 0..10 {
        let path = format!("/c{i}");
        let r = exchange(&mut c, &get_req(&path), "GET").await;
        assert_eq!((r.status, r.text()), (200, path));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(b.accepts(), 10, "one backend connection per request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_silently_closing_idle_connections_never_gives_502() {
    let b = raw_backend(Some(Duration::from_millis(200)), |seen| {
        ok(seen.target.as_bytes())
    })
    .await;
    let env = Env::start(b.addr).await;
    let mut c = connect(env.addr).await;
    for i in 0..10 {
        let path = format!("/i{i}");
        let r = exchange(&mut c, &get_req(&path), "GET").await;
        assert_eq!((r.status, r.text()), (200, path));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(b.seen().len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_connection_close_gets_the_answer_then_the_proxy_closes() {
    let b = echo_backend().await;
    let env = Env::start(b.addr).await;
    let mut c = connect(env.addr).await;
    let r = exchange(
        &mut c,
        b"GET /bye HTTP/1.1\r\nHost: web.test\r\nConnection: close\r\n\r\n",
        "GET",
    )
    .await;
    assert_eq!((r.status, r.text().as_str()), (200, "/bye"));
    assert_eq!(c.idle(Duration::from_secs(2)).await, Idle::Closed);
}

// ---------------------------------------------------------------------------------------------
// Tests: request smuggling guards (RFC 9112 6.1, 6.3): refused before any backend

/// Sends `req`, expects 400 and a closed connection, and that the backend saw nothing.
async fn assert_refused(req: &[u8]) {
    let b = echo_backend().await;
    let env = Env::start(b.addr).await;
    let mut c = connect(env.addr).await;
    let r = exchange(&mut c, req, "POST").await;
    assert_eq!(r.status, 400, "{r:?}");
    assert_eq!(
        c.idle(Duration::from_secs(2)).await,
        Idle::Closed,
        "the proxy closes after refusing a message it cannot frame"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(b.accepts(), 0, "the backend saw nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggling_content_length_with_transfer_encoding_gets_400() {
    assert_refused(
        b"POST / HTTP/1.1\r\nHost: web.test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggling_non_numeric_content_length_gets_400() {
    assert_refused(b"POST / HTTP/1.1\r\nHost: web.test\r\nContent-Length: 1x\r\n\r\n1x").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggling_two_different_content_lengths_get_400() {
    assert_refused(
        b"POST / HTTP/1.1\r\nHost: web.test\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nabcde",
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Tests: header fields (RFC 9110 7.6)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_request_headers_are_removed_and_forwarded_headers_added() {
    let b = echo_backend().await;
    let env = Env::start(b.addr).await;
    let mut c = connect(env.addr).await;
    let r = exchange(
        &mut c,
        b"GET /h HTTP/1.1\r\nHost: example.test:8080\r\nConnection: keep-alive, X-Secret\r\n\
          X-Secret: 1\r\nKeep-Alive: timeout=5\r\nX-Kept: yes\r\n\r\n",
        "GET",
    )
    .await;
    assert_eq!(r.status, 200);
    let seen = b.seen();
    let h = &seen[0].headers;
    assert!(!h.has("x-secret"), "{h:?}");
    assert!(!h.has("keep-alive"), "{h:?}");
    assert!(
        h.all("connection")
            .iter()
            .all(|v| !v.to_ascii_lowercase().contains("x-secret")),
        "{h:?}"
    );
    assert_eq!(h.get("x-kept"), Some("yes"));
    assert_eq!(h.all("x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(h.all("x-forwarded-proto"), ["http"]);
    assert_eq!(h.all("host"), ["example.test:8080"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_response_headers_reach_the_client_except_hop_by_hop() {
    let b = raw_backend(None, |_| {
        reply(
            &b"HTTP/1.1 200 OK\r\nX-Backend-Id: b-17\r\nSet-Cookie: a=1; Path=/\r\n\
               Set-Cookie: b=2; HttpOnly\r\nKeep-Alive: timeout=5, max=100\r\n\
               Connection: keep-alive, X-Internal\r\nX-Internal: secret\r\n\
               Content-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"[..],
        )
    })
    .await;
    let env = Env::start(b.addr).await;
    let mut c = connect(env.addr).await;
    let r = exchange(&mut c, &get_req("/"), "GET").await;
    assert_eq!((r.status, r.text().as_str()), (200, "ok"));
    let h = &r.headers;
    assert_eq!(h.all("x-backend-id"), ["b-17"]);
    assert_eq!(h.all("set-cookie"), ["a=1; Path=/", "b=2; HttpOnly"]);
    assert_eq!(h.all("content-type"), ["text/plain"]);
    assert!(!h.has("keep-alive"), "{h:?}");
    assert!(!h.has("x-internal"), "{h:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_form_request_target_is_forwarded_in_origin_form() {
    let b = echo_backend().await;
    let env = Env::start(b.addr).await;
    let mut c = connect(env.addr).await;
    let r = exchange(
        &mut c,
        b"GET http://example.test/x HTTP/1.1\r\nHost: example.test\r\n\r\n",
        "GET",
    )
    .await;
    assert_eq!((r.status, r.text().as_str()), (200, "/x"));
    let r = exchange(
        &mut c,
        b"GET http://example.test/y/z?q=1&r=2 HTTP/1.1\r\nHost: example.test\r\n\r\n",
        "GET",
    )
    .await;
    assert_eq!((r.status, r.text().as_str()), (200, "/y/z?q=1&r=2"));
    assert_eq!(b.seen()[0].headers.all("host"), ["example.test"]);
}

// ---------------------------------------------------------------------------------------------
// Tests: large bodies and their accounting (S-OB1)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_ob1_8_mib_response_streams_intact_and_is_counted_as_bytes_out() {
    const SIZE: usize = 8 << 20;
    let data = Arc::new(payload(SIZE));
    let d = data.clone();
    let b = raw_backend(None, move |_| {
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {SIZE}\r\n\r\n");
        let mut pieces = vec![(Duration::ZERO, head.into_bytes())];
        pieces.extend(d.chunks(1 << 20).map(|c| (Duration::ZERO, c.to_vec())));
        Reply {
            pieces,
            close: false,
        }
    })
    .await;
    let env = Env::start(b.addr).await;
    let mut c = connect(env.addr).await;
    let r = exchange(&mut c, &get_req("/big"), "GET").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), SIZE);
    assert_eq!(fnv(&r.body), fnv(&data));
    // The counter follows the stream; allow it a moment to settle.
    let mut out = 0;
    for _ in 0..50 {
        out = env.bytes_out();
        if out >= SIZE as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(out >= SIZE as u64, "bytes_out {out} < {SIZE}");
}

/// A backend that accepts one WebSocket-style upgrade: it checks the request carries
/// `Upgrade: websocket` and `Connection: upgrade`, answers 101, then echoes every byte.
async fn upgrade_echo_backend() -> (SocketAddr, tokio::task::JoinHandle<Result<(), String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let (s, _) = tokio::time::timeout(CLIENT_READ, listener.accept())
            .await
            .map_err(|_| "no connection".to_string())?
            .map_err(|e| e.to_string())?;
        let mut w = Wire::new(s, CLIENT_READ);
        let head = w.head().await?.ok_or("no request")?;
        let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
        if !text.contains("upgrade: websocket") || !text.contains("connection: upgrade") {
            return Err(format!("upgrade headers missing: {text}"));
        }
        w.send(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
            .await;
        for _ in 0..100 {
            if w.buf.is_empty() && !w.fill().await? {
                return Ok(());
            }
            let echo = std::mem::take(&mut w.buf);
            w.send(&echo).await;
        }
        Ok(())
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrade_becomes_a_two_way_tunnel() {
    let (backend, task) = upgrade_echo_backend().await;
    let env = Env::start(backend).await;
    let mut w = connect(env.addr).await;
    w.send(
        b"GET /chat HTTP/1.1\r\nHost: web.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Version: 13\r\n\r\n",
    )
    .await;
    let head = w.head().await.expect("read").expect("a 101 head");
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 101"), "{text}");
    assert!(text.contains("upgrade: websocket"), "{text}");
    assert!(text.contains("connection: upgrade"), "{text}");
    for message in [&b"frame one"[..], b"frame two, longer"] {
        w.send(message).await;
        let echoed = w.exact(message.len()).await.expect("echo");
        assert_eq!(echoed, message);
    }
    drop(w);
    let ended = tokio::time::timeout(Duration::from_secs(5), task).await;
    assert!(
        matches!(ended, Ok(Ok(Ok(())))),
        "backend saw the close: {ended:?}"
    );
}
