//! The load-aware L7 algorithms end to end on loopback: `least-request` (power of two choices
//! over in-flight requests) and `peak-ewma` (power of two choices over a peak-sensitive
//! latency estimate). Under concurrent load a server 50 ms slower than its peer gets far
//! fewer requests; and, as with every algorithm, selection alone decides who may be chosen:
//! a member in Maintenance gets nothing (S-MT1), a backup nothing while a main is eligible
//! (S-BK1). Real backends, the real proxy and real clients (support/l7.rs). Every load loop
//! is bounded in requests and in time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hyper::StatusCode;
use lb::config::{Algorithm, BackendService, VServiceKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod ports;
mod support {
    pub mod l7;
}
use support::l7::*;

/// Requests sent in one load run.
const REQUESTS: usize = 400;
/// Clients sending them at once.
const CLIENTS: usize = 8;
/// The longest a load run may take.
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// An HTTP/1.1 keep-alive backend that answers its name `delay` after each request head,
/// counting requests (the support backends answer at once).
async fn slow_backend(name: &str, delay: Duration) -> Backend {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind backend");
    let addr = listener.local_addr().expect("addr");
    let hits = Arc::new(AtomicUsize::new(0));
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{name}",
        name.len()
    );
    let counted = hits.clone();
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            conns.spawn(answer_heads(stream, answer.clone(), delay, counted.clone()));
        }
    });
    Backend {
        addr,
        hits,
        conns: Arc::new(AtomicUsize::new(0)),
        task,
    }
}

/// Answers every request head (GETs: no body) on `stream` with `answer` after `delay`.
async fn answer_heads(
    mut stream: TcpStream,
    answer: String,
    delay: Duration,
    hits: Arc<AtomicUsize>,
) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        while let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            got.drain(..end + 4);
            hits.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(delay).await;
            if stream.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// An HTTP vService "web" over `backends` with `algorithm`, the proxy running.
async fn start(algorithm: Algorithm, services: Vec<BackendService>) -> Env {
    let names: Vec<String> = services.iter().map(|s| s.name.clone()).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut vs = vservice("web", VServiceKind::Http, &refs);
    if let Some(l7) = vs.l7.as_mut() {
        l7.algorithm = algorithm;
    }
    Env::start(config(services, vec![], vec![vs])).await
}

/// Sends [`REQUESTS`] GETs from [`CLIENTS`] concurrent clients; every answer must be a 200.
async fn load(addr: SocketAddr) {
    let left = Arc::new(AtomicUsize::new(REQUESTS));
    let run = async {
        let mut clients = tokio::task::JoinSet::new();
        for _ in 0..CLIENTS {
            let left = left.clone();
            clients.spawn(async move {
                let c = client();
                while left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
                {
                    let (status, _, body) = get_with(&c, addr, "/", &[]).await;
                    assert_eq!(status, StatusCode::OK, "{body}");
                }
            });
        }
        while let Some(done) = clients.join_next().await {
            done.expect("client task");
        }
    };
    tokio::time::timeout(RUN_LIMIT, run)
        .await
        .expect("the load run ends in time");
}

/// A server that takes 50 ms more per request gets under a third of what its fast peer gets.
async fn slow_server_gets_clearly_fewer(algorithm: Algorithm) {
    let fast = http_backend("fast").await;
    let slow = slow_backend("slow", Duration::from_millis(50)).await;
    let env = start(
        algorithm,
        vec![service("fast", fast.addr), service("slow", slow.addr)],
    )
    .await;
    load(env.addr("web")).await;
    let (f, s) = (fast.hits(), slow.hits());
    println!("{algorithm:?}: fast {f}, slow {s}");
    assert_eq!(f + s, REQUESTS);
    assert!(s * 3 < f, "{algorithm:?}: slow {s} vs fast {f}");
}

/// S-MT1: under load, a main in Maintenance gets nothing; the two others share the load.
async fn maintenance_member_gets_nothing(algorithm: Algorithm) {
    let (a, b, m) = (
        http_backend("a").await,
        http_backend("b").await,
        http_backend("m").await,
    );
    let in_maintenance = BackendService {
        maintenance: true,
        ..service("m", m.addr)
    };
    let env = start(
        algorithm,
        vec![service("a", a.addr), service("b", b.addr), in_maintenance],
    )
    .await;
    load(env.addr("web")).await;
    println!(
        "{algorithm:?}: a {}, b {}, m {}",
        a.hits(),
        b.hits(),
        m.hits()
    );
    assert_eq!(
        m.hits(),
        0,
        "{algorithm:?}: the member in Maintenance was chosen"
    );
    assert_eq!(a.hits() + b.hits(), REQUESTS);
    assert!(
        a.hits() > 0 && b.hits() > 0,
        "{algorithm:?}: both mains serve"
    );
}

/// S-BK1: under load, the backup gets nothing while a main is eligible, even when the main
/// is slow and the backup idle (and fast); once the main is in Error the backup takes over.
async fn backup_waits_for_the_mains(algorithm: Algorithm) {
    let main = slow_backend("main", Duration::from_millis(5)).await;
    let bk = http_backend("bk").await;
    let env = start(
        algorithm,
        vec![service("main", main.addr), backup("bk", bk.addr)],
    )
    .await;
    let addr = env.addr("web");
    load(addr).await;
    assert_eq!(
        bk.hits(),
        0,
        "{algorithm:?}: the backup served beside a main"
    );
    assert_eq!(main.hits(), REQUESTS);
    env.set_health("main", lb::selection::Health::Error);
    for _ in 0..5 {
        assert_eq!(get(addr, "/").await.2, "bk");
    }
}

/// The two load-aware algorithms.
const LOAD_AWARE: [Algorithm; 2] = [Algorithm::LeastRequest, Algorithm::PeakEwma];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_request_and_peak_ewma_send_a_slow_server_clearly_fewer_requests() {
    for algorithm in LOAD_AWARE {
        slow_server_gets_clearly_fewer(algorithm).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_mt1_least_request_and_peak_ewma_never_choose_a_member_in_maintenance() {
    for algorithm in LOAD_AWARE {
        maintenance_member_gets_nothing(algorithm).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_bk1_least_request_and_peak_ewma_leave_the_backup_idle_while_a_main_is_eligible() {
    for algorithm in LOAD_AWARE {
        backup_waits_for_the_mains(algorithm).await;
    }
}
