//! L7 proxy (HTTP and L7 TCP vServices) end to end on loopback: the protocols and address
//! families it speaks. HTTP/2 (h2c and over TLS), TLS with ALPN, WebSocket over TLS, IPv6
//! listeners and backends, dual-stack listeners. Real backends, the real proxy and real
//! clients (support/l7.rs).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use lb::config::{Condition, ConditionalSet, TlsSettings, VServiceKind};
use lb::selection::Health;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod ports;
mod support {
    pub mod l7;
}
use support::l7::*;

// ---------------------------------------------------------------------------------------------
// Tests: protocols

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_prior_knowledge_request_works() {
    let a = http_backend("a").await;
    let env = Env::start(config(
        vec![service("a", a.addr)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["a"])],
    ))
    .await;
    let c: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(HttpConnector::new());
    let req = Request::get(format!("http://{}/", env.addr("web")))
        .body(Empty::new())
        .expect("req");
    let resp = c.request(req).await.expect("h2c response");
    assert_eq!(resp.version(), hyper::Version::HTTP_2);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], b"a");

    // Requests without a body go to the backend on the HTTP/1.1 path's connections: many
    // streams at once, a chunked answer passed on as data frames, a HEAD with no body.
    let addr = env.addr("web");
    let streams: Vec<_> = (0..50)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move {
                let req = Request::get(format!("http://{addr}/?ms=5"))
                    .body(Empty::new())
                    .expect("req");
                let resp = c.request(req).await.expect("response");
                let status = resp.status();
                let body = resp.into_body().collect().await.expect("body").to_bytes();
                (status, body)
            })
        })
        .collect();
    for stream in streams {
        let (status, body) = stream.await.expect("stream");
        assert_eq!((status, &body[..]), (StatusCode::OK, &b"a"[..]));
    }
    // Their backend connections are reused: sequential requests (plain, chunked, HEAD)
    // open none.
    let opened = a.conns();
    for _ in 0..20 {
        let req = Request::get(format!("http://{addr}/"))
            .body(Empty::new())
            .expect("req");
        let resp = c.request(req).await.expect("response");
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&body[..], b"a");
    }
    let req = Request::get(format!("http://{addr}/stream?n=4&ms=10"))
        .body(Empty::new())
        .expect("req");
    let resp = c.request(req).await.expect("response");
    assert!(resp.headers().get("transfer-encoding").is_none());
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], b"a\na\na\na\n");
    let req = Request::head(format!("http://{addr}/"))
        .body(Empty::new())
        .expect("req");
    let resp = c.request(req).await.expect("response");
    assert_eq!(resp.status(), StatusCode::OK);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert!(body.is_empty());
    let req = Request::get(format!("http://{addr}/"))
        .body(Empty::new())
        .expect("req");
    let resp = c.request(req).await.expect("response");
    assert_eq!(
        resp.into_body().collect().await.expect("body").to_bytes(),
        "a"
    );
    assert_eq!(
        a.conns(),
        opened,
        "no connection opened after the first 51 requests"
    );
    // A body goes through hyper's client.
    let posting: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(HttpConnector::new());
    let req = Request::post(format!("http://{addr}/"))
        .body(Full::new(Bytes::from_static(b"payload")))
        .expect("req");
    let resp = posting.request(req).await.expect("response");
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], b"a");
    assert_eq!(a.hits(), 75);
}

/// A backend that answers every request head it reads with `200 OK` and no body, on one
/// keep-alive connection after another.
async fn empty_ok_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                for _ in 0..1000 {
                    let Ok(n) = s.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
                        if s.write_all(ok).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// An HTTP/2 CONNECT answered 2xx makes hyper hand a tunnel to the connection's
/// executor while the stream is being run; the connection (its streams run in its own task)
/// keeps serving the requests that follow on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_connect_answered_2xx_leaves_the_connection_serving() {
    let backend = empty_ok_backend().await;
    let env = Env::start(config(
        vec![service("a", backend)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["a"])],
    ))
    .await;
    let tcp = TcpStream::connect(env.addr("web")).await.expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let connect = Request::connect("tunnel.test:443")
        .body(Empty::<Bytes>::new())
        .expect("req");
    let answered = tokio::time::timeout(Duration::from_secs(5), sender.send_request(connect))
        .await
        .expect("CONNECT answered within 5 s");
    // Whatever the answer (the tunnel itself is not proxied), the connection goes on.
    drop(answered);
    let after = Request::get(format!("http://{}/after", env.addr("web")))
        .body(Empty::<Bytes>::new())
        .expect("req");
    let resp = tokio::time::timeout(Duration::from_secs(5), sender.send_request(after))
        .await
        .expect("a request after the CONNECT answered within 5 s")
        .expect("response");
    assert_eq!(resp.status(), StatusCode::OK);
}

/// S-RT1 over HTTP/2: a request without a body whose connect failed goes to another server;
/// one with a body streams into its first try and gets 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_rt1_an_h2_request_without_a_body_is_retried_after_a_failed_connect() {
    let a = http_backend("a").await;
    let dead = refusing_addr().await;
    let env = Env::start(config(
        vec![service("a", a.addr), service("dead", dead)],
        vec![],
        vec![vservice("web", VServiceKind::Http, &["dead", "a"])],
    ))
    .await;
    let c: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(HttpConnector::new());
    for _ in 0..10 {
        let (status, _, body) = get_with(&c, env.addr("web"), "/", &[]).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "a"));
    }
    let retries = env.stats("web").counts.retries;
    assert!(
        (3..=7).contains(&retries),
        "about half went to `dead` first: {retries}"
    );
    let with_body: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(HttpConnector::new());
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let req = Request::post(format!("http://{}/", env.addr("web")))
            .body(Full::new(Bytes::from_static(b"payload")))
            .expect("req");
        let resp = with_body.request(req).await.expect("h2 response");
        statuses.push(resp.status());
    }
    assert!(
        statuses.contains(&StatusCode::BAD_GATEWAY) && statuses.contains(&StatusCode::OK),
        "{statuses:?}"
    );
}

/// No rule of docs/behaviour.md covers keep-alive timeouts. An HTTP/2 connection
/// closes (GOAWAY) once no stream has been open for the keep-alive timeout, and a stream that
/// outlasts the timeout runs to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_connection_idle_past_keep_alive_closes_but_never_during_a_stream() {
    let a = http_backend("a").await;
    let mut vs = vservice("web", VServiceKind::Http, &["a"]);
    if let Some(l7) = vs.l7.as_mut() {
        l7.timeouts.keep_alive = Duration::from_secs(1);
    }
    let env = Env::start(config(vec![service("a", a.addr)], vec![], vec![vs])).await;
    let tcp = TcpStream::connect(env.addr("web")).await.expect("connect");
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2c handshake");
    let mut conn = tokio::spawn(conn);

    // 4 chunks 500 ms apart: the stream lasts twice the keep-alive timeout.
    let req = Request::get("http://web/stream?n=4&ms=500")
        .body(Empty::<Bytes>::new())
        .expect("req");
    let resp = send.send_request(req).await.expect("stream response");
    let body = resp
        .into_body()
        .collect()
        .await
        .expect("whole stream")
        .to_bytes();
    assert_eq!(&body[..], b"a\na\na\na\n", "the stream ran to its end");
    let ended = std::time::Instant::now();

    // A second request soon after still uses the same connection.
    let req = Request::get("http://web/")
        .body(Empty::<Bytes>::new())
        .expect("req");
    let resp = send.send_request(req).await.expect("second response");
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], b"a");
    let last = std::time::Instant::now();

    let closed = tokio::time::timeout(Duration::from_secs(5), &mut conn).await;
    assert!(
        closed.is_ok(),
        "the idle connection was closed by the proxy"
    );
    let idle_for = last.elapsed();
    assert!(
        idle_for >= Duration::from_millis(900),
        "closed {idle_for:?} after the last response, before the keep-alive timeout"
    );
    assert!(
        ended.elapsed() < Duration::from_secs(4),
        "closed {:?} after the stream ended, long past the keep-alive timeout",
        ended.elapsed()
    );
}

/// A self-signed certificate for `localhost` in a directory of this test process.
struct TestCert {
    dir: std::path::PathBuf,
    tls: TlsSettings,
    roots: rustls::RootCertStore,
}

impl TestCert {
    fn new(tag: &str) -> TestCert {
        let dir = std::env::temp_dir().join(format!("lb-l7-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
        let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert_path, cert.cert.pem()).expect("write cert");
        std::fs::write(&key_path, cert.signing_key.serialize_pem()).expect("write key");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.cert.der().clone()).expect("root");
        TestCert {
            dir,
            tls: TlsSettings {
                cert: cert_path,
                key: key_path,
            },
            roots,
        }
    }

    /// A TLS connection to `addr` offering `alpn` (none when empty).
    async fn connect(
        &self,
        addr: SocketAddr,
        alpn: &[u8],
    ) -> tokio_rustls::client::TlsStream<TcpStream> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(self.roots.clone())
            .with_no_client_auth();
        if !alpn.is_empty() {
            cfg.alpn_protocols = vec![alpn.to_vec()];
        }
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(name, tcp)
            .await
            .expect("handshake")
    }
}

impl Drop for TestCert {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An HTTP vService `web` with TLS on one backend, `name` at `addr`.
async fn tls_env(cert: &TestCert, name: &str, addr: SocketAddr) -> Env {
    let mut vs = vservice("web", VServiceKind::Http, &[name]);
    if let Some(l7) = vs.l7.as_mut() {
        l7.tls = Some(cert.tls.clone());
    }
    Env::start(config(vec![service(name, addr)], vec![], vec![vs])).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_alpn_h2_and_http11_works() {
    let a = http_backend("a").await;
    let cert = TestCert::new("tls");
    let env = tls_env(&cert, "a", a.addr).await;
    for (alpn, version) in [
        (&b"h2"[..], hyper::Version::HTTP_2),
        (&b"http/1.1"[..], hyper::Version::HTTP_11),
        (&b""[..], hyper::Version::HTTP_11),
    ] {
        let tls = cert.connect(env.addr("web"), alpn).await;
        let chosen = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        assert_eq!(chosen, (!alpn.is_empty()).then(|| alpn.to_vec()));
        let io = TokioIo::new(tls);
        let resp = if version == hyper::Version::HTTP_2 {
            let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .expect("h2");
            tokio::spawn(conn);
            let req = Request::get("https://localhost/")
                .body(Empty::<Bytes>::new())
                .expect("req");
            send.send_request(req).await.expect("response")
        } else {
            let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.expect("h1");
            tokio::spawn(conn);
            let req = Request::get("/")
                .header("host", "localhost")
                .body(Empty::<Bytes>::new())
                .expect("req");
            send.send_request(req).await.expect("response")
        };
        assert_eq!(resp.version(), version);
        assert_eq!(resp.headers()["seen-x-forwarded-proto"], "https");
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(&body[..], b"a");
    }
}

/// Reads from `tls` until `done` holds for what arrived (5 s at most).
async fn read_until<S: tokio::io::AsyncRead + Unpin>(
    tls: &mut S,
    done: impl Fn(&str) -> bool,
) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        while !done(&String::from_utf8_lossy(&got)) {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// HTTP/1.1 over TLS takes the same hand-written path as plain HTTP/1.1: requests pipelined
/// in one TLS record are all answered (the second waits decrypted in the TLS session, which
/// no socket readiness announces), a body goes to the backend, a chunked answer streams,
/// and the connection stays open between requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_http11_pipelined_requests_bodies_and_keep_alive() {
    let a = http_backend("a").await;
    let cert = TestCert::new("tls-h1");
    let env = tls_env(&cert, "a", a.addr).await;
    let mut tls = cert.connect(env.addr("web"), b"http/1.1").await;
    // Three short requests in one record, then twenty of 1 KiB (two records, more than a
    // read takes at once).
    let get = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let padded = format!(
        "GET / HTTP/1.1\r\nHost: localhost\r\nX-Pad: {}\r\n\r\n",
        "p".repeat(1000)
    );
    for (request, n) in [(get, 3), (padded.as_str(), 20)] {
        tls.write_all(request.repeat(n).as_bytes())
            .await
            .expect("write");
        tls.flush().await.expect("flush");
        let answers = read_until(&mut tls, |t| t.matches("HTTP/1.1 200").count() == n).await;
        assert_eq!(answers.matches("HTTP/1.1 200").count(), n, "{answers}");
    }
    assert_eq!(a.hits(), 23);

    let body = vec![b'x'; 100_000];
    let post = format!(
        "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(post.as_bytes()).await.expect("write");
    tls.write_all(&body).await.expect("write body");
    tls.flush().await.expect("flush");
    let posted = read_until(&mut tls, |t| t.ends_with("\r\n\r\na")).await;
    assert!(posted.starts_with("HTTP/1.1 200"), "{posted}");

    tls.write_all(b"GET /stream?n=4&ms=20 HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("write");
    tls.flush().await.expect("flush");
    let streamed = read_until(&mut tls, |t| t.ends_with("0\r\n\r\n")).await;
    assert!(streamed.starts_with("HTTP/1.1 200"), "{streamed}");
    assert!(
        streamed
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{streamed}"
    );
    assert_eq!(streamed.matches("a\n").count(), 4, "{streamed}");
    assert_eq!(a.hits(), 25);
}

/// An answer whose body ends with the backend's close reaches a TLS client whole and ends
/// with a close_notify: without one, rustls (and OpenSSL) clients cannot tell the end of
/// the body from a cut connection and report an unexpected end of file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_body_delimited_by_close_ends_with_close_notify() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let backend = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let _ = read_until(&mut s, |t| t.contains("\r\n\r\n")).await;
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nthe whole body")
            .await
            .expect("answer");
    });
    let cert = TestCert::new("tls-close");
    let env = tls_env(&cert, "old", backend).await;
    let mut tls = cert.connect(env.addr("web"), b"http/1.1").await;
    tls.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("request");
    tls.flush().await.expect("flush");
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut got)).await;
    let text = String::from_utf8_lossy(&got);
    assert!(matches!(read, Ok(Ok(_))), "{read:?}: {text}");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("\r\n\r\nthe whole body"), "{text}");
    let _ = server.await;
}

/// WebSocket over TLS (wss): an Upgrade on a TLS connection answered 101 becomes a two-way
/// tunnel through the TLS session, as on a plain one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_websocket_upgrade_becomes_a_two_way_tunnel() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let backend = listener.local_addr().expect("addr");
    let echo = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        let head = read_until(&mut s, |t| t.contains("\r\n\r\n")).await;
        assert!(
            head.to_ascii_lowercase().contains("upgrade: websocket"),
            "{head}"
        );
        s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
            .await
            .expect("101");
        let mut buf = [0u8; 1024];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => s.write_all(&buf[..n]).await.expect("echo"),
            }
        }
    });
    let cert = TestCert::new("wss");
    let env = tls_env(&cert, "ws", backend).await;
    let mut tls = cert.connect(env.addr("web"), b"http/1.1").await;
    tls.write_all(
        b"GET /chat HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Version: 13\r\n\r\n",
    )
    .await
    .expect("upgrade");
    tls.flush().await.expect("flush");
    let head = read_until(&mut tls, |t| t.contains("\r\n\r\n")).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    for message in ["frame one", "frame two, longer"] {
        tls.write_all(message.as_bytes()).await.expect("send");
        tls.flush().await.expect("flush");
        let echoed = read_until(&mut tls, |t| t.len() >= message.len()).await;
        assert_eq!(echoed, message);
    }
    drop(tls);
    let _ = tokio::time::timeout(Duration::from_secs(5), echo).await;
}

// ---------------------------------------------------------------------------------------------
// Tests: IPv6 listeners and backends

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_bk1_s_bk2_s_mt1_over_ipv6_listener_and_backends() {
    let (a, bk) = (
        http_backend_at("[::1]:0", "a").await,
        http_backend_at("[::1]:0", "bk").await,
    );
    assert!(a.addr.is_ipv6() && bk.addr.is_ipv6());
    let vs = vservice_at(V6, "web6", VServiceKind::Http, &["a", "bk"]);
    let mut env = Env::start(config(
        vec![service("a", a.addr), backup("bk", bk.addr)],
        vec![],
        vec![vs],
    ))
    .await;
    let addr = env.addr("web6");
    assert!(addr.is_ipv6(), "{addr}");
    for _ in 0..5 {
        assert_eq!(get(addr, "/").await.2, "a");
    }
    assert_eq!(
        bk.hits(),
        0,
        "a backup serves only while no main can (S-BK1)"
    );
    // The only main fails: the backup takes over (S-BK2).
    env.set_health("a", Health::Error);
    assert_eq!(get(addr, "/").await.2, "bk");
    env.set_health("a", Health::Ok);
    assert_eq!(get(addr, "/").await.2, "a");
    // The main in Maintenance: new requests go to the backup, none fails (S-MT1, S-BK2).
    env.set_maintenance("a", true).await;
    let before = a.hits();
    for _ in 0..5 {
        let (status, _, body) = get(addr, "/").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "bk"));
    }
    assert_eq!(
        a.hits(),
        before,
        "no new request reaches a server in Maintenance"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_client_is_appended_to_x_forwarded_for() {
    let a = http_backend_at("[::1]:0", "a").await;
    let env = Env::start(config(
        vec![service("a", a.addr)],
        vec![],
        vec![vservice_at(V6, "web6", VServiceKind::Http, &["a"])],
    ))
    .await;
    let (_, h, _) = get_with(
        &client(),
        env.addr("web6"),
        "/",
        &[("x-forwarded-for", "2001:db8::9")],
    )
    .await;
    assert_eq!(h["seen-x-forwarded-for"], "2001:db8::9, ::1");
    assert_eq!(h["seen-host"], env.addr("web6").to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_stack_listener_on_the_unspecified_address_serves_both_families() {
    // One backend of each family behind one vService listening on `::`.
    let (a, b) = (
        http_backend("a").await,
        http_backend_at("[::1]:0", "b").await,
    );
    let mut vs = vservice_at(
        IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        "dual",
        VServiceKind::Http,
        &["a", "b"],
    );
    if let Some(l7) = vs.l7.as_mut() {
        l7.algorithm = lb::config::Algorithm::RoundRobin;
    }
    let env = Env::start(config(
        vec![service("a", a.addr), service("b", b.addr)],
        vec![],
        vec![vs],
    ))
    .await;
    let port = env.addr("dual").port();
    let v4: SocketAddr = ([127, 0, 0, 1], port).into();
    let v6: SocketAddr = (Ipv6Addr::LOCALHOST, port).into();
    let mut seen = Vec::new();
    for addr in [v4, v6, v4, v6] {
        let (status, _, body) = get(addr, "/").await;
        assert_eq!(status, StatusCode::OK, "{addr}");
        seen.push(body);
    }
    seen.sort();
    assert_eq!(
        seen,
        ["a", "a", "b", "b"],
        "both backends, over both families"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_bk6_source_cidr_condition_matches_an_ipv6_prefix() {
    let (d, local) = (
        http_backend_at("[::1]:0", "d").await,
        http_backend_at("[::1]:0", "local").await,
    );
    let mut vs = vservice_at(V6, "web6", VServiceKind::Http, &["d"]);
    if let Some(l7) = vs.l7.as_mut() {
        l7.conditional_sets = vec![
            ConditionalSet {
                name: "elsewhere".into(),
                conditions: vec![Condition::SourceCidr(vec![(
                    "2001:db8::".parse().expect("net"),
                    32,
                )])],
                backends: vec!["d".into()],
            },
            ConditionalSet {
                name: "loopback".into(),
                conditions: vec![Condition::SourceCidr(vec![(
                    "::1".parse().expect("net"),
                    128,
                )])],
                backends: vec!["local".into()],
            },
        ];
    }
    let env = Env::start(config(
        vec![service("d", d.addr), service("local", local.addr)],
        vec![],
        vec![vs],
    ))
    .await;
    assert_eq!(get(env.addr("web6"), "/").await.2, "local");
    assert_eq!(d.hits(), 0);
}
