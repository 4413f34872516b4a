//! The client connections of an HTTP vService that speak HTTP/2, which hyper serves: over
//! TLS (chosen by ALPN) and with prior knowledge on a plain listener (h2c, told by its
//! preface), with the vService's timeouts and header limits. The TLS handshake of every
//! connection is made here too. HTTP/1.x, plain or over TLS, goes through `super::h1`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::activity::{Activity, Tracked};
use super::forward;
use super::listener::{Closing, Ticket};
use super::runtime::VsRuntime;
use crate::config::Timeouts;

/// A backend's response head larger than this is answered 502. Request heads have the
/// limits of `[proxy]` ([`crate::config::HeaderLimits`]).
pub const MAX_RESPONSE_HEAD_BYTES: usize = 64 * 1024;

/// The HTTP/2 connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Serves one accepted connection of a TLS listener until it closes: completes the TLS
/// handshake (within the client timeout), then serves HTTP/1.1 or HTTP/2 as ALPN chose;
/// never panics on client input.
pub(crate) async fn serve_tls(
    rt: Arc<VsRuntime>,
    acceptor: tokio_rustls::TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
    closing: Ticket,
) {
    let timeouts = rt.settings.load().l7.timeouts;
    let tls = match tokio::time::timeout(timeouts.client, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(error)) => return tracing::debug!(%peer, %error, "TLS handshake failed"),
        Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
    };
    if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
        run(rt, tls, peer, true, closing, timeouts).await;
    } else {
        super::h1::serve(rt, tls, peer, closing).await;
    }
}

/// Serves HTTP/2 with prior knowledge (h2c) on a plain connection until it closes; the
/// HTTP/1.1 path hands over the connections that start with the preface.
pub(crate) async fn serve_h2c<I>(rt: Arc<VsRuntime>, stream: I, peer: SocketAddr, closing: Ticket)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let timeouts = rt.settings.load().l7.timeouts;
    run(rt, stream, peer, false, closing, timeouts).await;
}

/// Tells HTTP/2 with prior knowledge (h2c) from HTTP/1.x by the first bytes, without
/// consuming them. None when the client closes or stays silent past `limit` (slowloris).
pub(crate) async fn sniff_h2(stream: &TcpStream, limit: Duration) -> Option<bool> {
    let sniff = async {
        let mut buf = [0u8; PREFACE.len()];
        loop {
            let n = stream.peek(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            if buf[..n] != PREFACE[..n] {
                return Some(false);
            }
            if n == PREFACE.len() {
                return Some(true);
            }
            // A partial preface: peek again once more bytes may have arrived.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(limit, sniff).await.ok().flatten()
}

/// Serves HTTP/2 on `io` until it closes: idle only when none of its streams is open.
async fn run<I>(
    rt: Arc<VsRuntime>,
    io: I,
    peer: SocketAddr,
    tls: bool,
    closing: Ticket,
    timeouts: Timeouts,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = rt.settings.load().header_limits;
    let activity = Activity::new();
    let service_rt = rt.clone();
    let streams = activity.clone();
    let service = service_fn(move |req| {
        let rt = service_rt.clone();
        let open = Some(streams.open());
        async move {
            let resp = forward::handle(rt, peer, tls, req).await;
            Ok::<_, Infallible>(resp.map(|body| Tracked::new(body, open)))
        }
    });
    let streams = Streams::default();
    let conn = http2::Builder::new(streams.clone())
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.head).unwrap_or(u32::MAX))
        .serve_connection(TokioIo::new(io), service);
    let result = drive(
        conn,
        |c| c.graceful_shutdown(),
        &streams,
        &closing,
        (activity, timeouts.keep_alive),
    )
    .await;
    if let Err(error) = result {
        if error.is_parse() {
            rt.counters.count_bad_request();
        }
        tracing::debug!(vservice = %rt.name, %peer, %error, "client connection ended with an error");
    }
}

/// Where hyper hands the streams of one HTTP/2 connection (its executor): they run in the
/// connection's own task ([`Running`]) rather than a task each. A task per request cost a
/// 128-byte aligned allocation of its 2 KiB future and the scheduler's bookkeeping, a few
/// percent of an HTTP/2 request's time in the proxy. Handed over through a queue,
/// not into the running set itself: a stream may hand over another (the tunnel of a CONNECT
/// answered 2xx) while it is being polled.
#[derive(Clone, Default)]
struct Streams(Arc<Mutex<Vec<StreamFuture>>>);

/// One stream's future (or a tunnel's), as hyper hands it over.
type StreamFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

impl<F> hyper::rt::Executor<F> for Streams
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, stream: F) {
        self.lock().push(Box::pin(stream));
    }
}

impl Streams {
    fn lock(&self) -> MutexGuard<'_, Vec<StreamFuture>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The streams of one connection under way; they end with it.
#[derive(Default)]
struct Running(FuturesUnordered<StreamFuture>);

impl Running {
    /// Takes the streams handed over and runs every stream until each waits (their
    /// wakeups wake the connection's task).
    fn poll(&mut self, handed: &Streams, cx: &mut Context<'_>) {
        loop {
            self.0.extend(handed.lock().drain(..));
            while let Poll::Ready(Some(())) = self.0.poll_next_unpin(cx) {}
            if handed.lock().is_empty() {
                return;
            }
        }
    }
}

/// Runs an HTTP/2 connection and its `streams` to its end. When the listener closes, or the
/// connection stays idle (no stream open) for the keep-alive timeout of `idle`, asks it to
/// finish its open streams and close (graceful shutdown: the client gets a GOAWAY).
async fn drive<C>(
    conn: C,
    shutdown: fn(Pin<&mut C>),
    streams: &Streams,
    closing: &Closing,
    idle: (Arc<Activity>, Duration),
) -> Result<(), hyper::Error>
where
    C: Future<Output = Result<(), hyper::Error>>,
{
    let (activity, keep_alive) = idle;
    let mut running = Running::default();
    tokio::pin!(conn);
    let mut draining = false;
    loop {
        let deadline = activity.idle_deadline(keep_alive);
        let expired = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            // The streams run before and after the connection: it starts new ones as it reads.
            result = std::future::poll_fn(|cx| {
                running.poll(streams, cx);
                let result = conn.as_mut().poll(cx);
                if result.is_pending() {
                    running.poll(streams, cx);
                }
                result
            }) => return result,
            () = closing.wait(), if !draining => {
                draining = true;
                shutdown(conn.as_mut());
            }
            () = expired, if !draining => {
                // A request may have opened since the deadline was read: look again.
                let still = activity.idle_deadline(keep_alive);
                if still.is_some_and(|d| d <= Instant::now()) {
                    tracing::debug!("HTTP/2 connection idle past the keep-alive timeout");
                    draining = true;
                    shutdown(conn.as_mut());
                }
            }
            // The last open request ended: the idle deadline moved.
            () = activity.ended(), if !draining => {}
        }
    }
}
