//! One client connection of an L7 TCP vService: pick a backend (source-IP persistence only),
//! connect, copy bytes both ways with half-close until either side is done or the pair stays
//! idle past the client timeout.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::balance::{Lease, LiveError};
use super::retry::{Failure, Tries};
use super::runtime::VsRuntime;
use super::upstream::connect_backend;

/// Serves one accepted connection; nothing available closes the client at once (S-BK9).
pub(crate) async fn serve(rt: Arc<VsRuntime>, client: TcpStream, peer: SocketAddr) {
    rt.counters.count_request();
    let settings = rt.settings.load_full();
    let timeouts = settings.l7.timeouts;
    let client_ip = peer.ip().to_canonical();
    // A refused or timed-out connect sent nothing: the client may go to another server of
    // the list before it sees anything (S-RT1).
    let mut tries = Tries::new(&rt, settings.l7.retry);
    let mut failed_on: Option<Arc<Lease>> = None;
    let (lease, mut backend) = loop {
        let acquire = rt.acquire_other(&settings, None, client_ip, None, tries.failed());
        let lease = match acquire.await {
            Ok(lease) => Arc::new(lease),
            Err(error) => {
                tracing::debug!(vservice = %rt.name, %peer, %error, "closing the client");
                if failed_on.is_none() {
                    rt.counters.count_unavailable();
                }
                return;
            }
        };
        if let Some(failed) = failed_on.take() {
            tries.count(&failed);
        }
        match connect_backend(lease.addr(), timeouts.connect, &settings.connect_time).await {
            Ok(stream) => {
                lease.answered(0);
                break (lease, stream);
            }
            Err(error) => {
                tracing::debug!(vservice = %rt.name, backend = lease.backend(), %error, "connect failed");
                lease.fail(LiveError::Connect);
                if !tries.again(Failure::Connect, &lease, false) {
                    return;
                }
                failed_on = Some(lease);
            }
        }
    };
    drop(tries);
    let _ = client.set_nodelay(true);
    let mut client = client;
    match tunnel(&mut client, &mut backend, &lease, timeouts.client).await {
        Ok(()) => {}
        Err(TunnelEnd::Idle) => {
            tracing::debug!(vservice = %rt.name, %peer, "idle past the client timeout: closed");
        }
        Err(TunnelEnd::Failed(error)) => {
            tracing::debug!(vservice = %rt.name, backend = lease.backend(), %error, "connection ended with an error");
            lease.fail(LiveError::Aborted);
        }
    }
}

/// How a tunnel ended early.
#[derive(Debug)]
pub(crate) enum TunnelEnd {
    /// Neither side sent anything for the idle limit.
    Idle,
    /// A side failed (reset, ...).
    Failed(io::Error),
}

/// Copies bytes both ways between `client` and `backend`, passing a half-close on, until
/// both directions are done (Ok) or the pair stays silent for `idle`; counts the bytes on
/// `lease`. Serves L7 TCP connections and upgraded HTTP/1.1 connections (WebSocket).
pub(crate) async fn tunnel<C: AsyncRead + AsyncWrite + Unpin>(
    client: &mut C,
    backend: &mut TcpStream,
    lease: &Lease,
    idle: Duration,
) -> Result<(), TunnelEnd> {
    let origin = Instant::now();
    let last = AtomicU64::new(0);
    let mut client = Tracked::new(client, lease, true, origin, &last);
    let mut backend = Tracked::new(backend, lease, false, origin, &last);
    let copy = tokio::io::copy_bidirectional(&mut client, &mut backend);
    tokio::select! {
        result = copy => result.map(|_| ()).map_err(TunnelEnd::Failed),
        () = idle_cut(origin, &last, idle) => Err(TunnelEnd::Idle),
    }
}

/// Returns once neither side has sent anything for `limit`.
async fn idle_cut(origin: Instant, last: &AtomicU64, limit: Duration) {
    loop {
        let since = Duration::from_millis(last.load(Ordering::Relaxed));
        let deadline = origin + since + limit;
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// A stream that counts the bytes read from it on the lease and stamps the last activity.
struct Tracked<'a, S> {
    inner: &'a mut S,
    lease: &'a Lease,
    from_client: bool,
    origin: Instant,
    last: &'a AtomicU64,
}

impl<'a, S> Tracked<'a, S> {
    fn new(
        inner: &'a mut S,
        lease: &'a Lease,
        from_client: bool,
        origin: Instant,
        last: &'a AtomicU64,
    ) -> Tracked<'a, S> {
        Tracked {
            inner,
            lease,
            from_client,
            origin,
            last,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<'_, S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut *this.inner).poll_read(cx, buf);
        let n = (buf.filled().len() - before) as u64;
        if n > 0 {
            let now = this.origin.elapsed().as_millis() as u64;
            this.last.fetch_max(now, Ordering::Relaxed);
            if this.from_client {
                this.lease.add_bytes(n, 0);
            } else {
                this.lease.add_bytes(0, n);
            }
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<'_, S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().inner).poll_shutdown(cx)
    }
}
