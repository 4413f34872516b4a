//! Connections towards backends: the timed connect of the HTTP/1.1 and L7 TCP paths, and the
//! pooled client of HTTP/2 requests with a body (keep-alive connections reused across
//! requests; HTTP/2 requests without one use the HTTP/1.1 path's, `h1::backend`).
//! Every successful connect is timed into the vService's connect-time histogram.
//!
//! The pooled client is one per worker thread, like the HTTP/1.1 path's idle connections: a
//! backend connection is driven by a task on the worker that opened it, and a pool shared by
//! the workers would hand it to requests of the other worker too, so each of their requests
//! would cross threads twice (request in, answer back) and the workers' shares of the pool
//! would be left to chance at start-up.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use hyper::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower_service::Service;

use super::body::RequestBody;
use crate::config::Timeouts;
use crate::stats::Histogram;

/// Connects to a backend within `limit`, with Nagle off (requests and answers are written
/// whole; waiting to coalesce them would only add latency), and times the connect.
pub(crate) async fn connect_backend(
    addr: std::net::SocketAddr,
    limit: std::time::Duration,
    times: &Histogram,
) -> std::io::Result<tokio::net::TcpStream> {
    let started = Instant::now();
    let stream = tokio::time::timeout(limit, tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    times.observe(started.elapsed());
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Threads that may each have a client of their own; more threads than this (more workers
/// than that) share clients, which is correct, only slower.
const THREAD_SLOTS: usize = 64;

/// The next thread's slot.
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's slot, taken the first time it sends a request upstream.
    static SLOT: usize = NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % THREAD_SLOTS;
}

/// hyper's pooled client over [`TimedConnector`].
type Pooled = Client<TimedConnector, RequestBody>;

/// One vService's upstream clients, one per thread that sends requests (the workers), each
/// built on first use; cheap to clone (shares them).
#[derive(Clone)]
pub(crate) struct Upstream {
    clients: Arc<[OnceLock<Pooled>]>,
    timeouts: Timeouts,
    times: Arc<Histogram>,
}

impl Upstream {
    /// Sends `req` on this thread's pool (its own backend connections).
    pub(crate) fn request(
        &self,
        req: hyper::Request<RequestBody>,
    ) -> hyper_util::client::legacy::ResponseFuture {
        let slot = SLOT.with(|s| *s);
        let client = self.clients[slot % self.clients.len()]
            .get_or_init(|| pooled(&self.timeouts, self.times.clone()));
        client.request(req)
    }
}

/// Upstream clients whose connect timeout is `timeouts.connect`, whose idle pooled
/// connections close after `timeouts.keep_alive`, and whose connects are timed into `times`.
pub(crate) fn new_upstream(timeouts: &Timeouts, times: Arc<Histogram>) -> Upstream {
    Upstream {
        clients: (0..THREAD_SLOTS).map(|_| OnceLock::new()).collect(),
        timeouts: *timeouts,
        times,
    }
}

fn pooled(timeouts: &Timeouts, times: Arc<Histogram>) -> Pooled {
    let mut inner = HttpConnector::new();
    inner.set_connect_timeout(Some(timeouts.connect));
    inner.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(timeouts.keep_alive)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(TimedConnector { inner, times })
}

/// hyper's connector, with the time of each successful connect recorded.
#[derive(Clone)]
pub(crate) struct TimedConnector {
    inner: HttpConnector,
    times: Arc<Histogram>,
}

/// What [`HttpConnector`] answers.
type Connected = <HttpConnector as Service<Uri>>::Response;
type ConnectError = <HttpConnector as Service<Uri>>::Error;

impl Service<Uri> for TimedConnector {
    type Response = Connected;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Connected, ConnectError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let started = Instant::now();
        let times = Arc::clone(&self.times);
        let connecting = self.inner.call(dst);
        Box::pin(async move {
            let connected = connecting.await;
            if connected.is_ok() {
                times.observe(started.elapsed());
            }
            connected
        })
    }
}
