//! Streaming bodies: request bodies go to the backend and response bodies to the client as
//! they arrive (no buffering), counting bytes on the lease and holding the lease (one current
//! session of the backend) until the response ends.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

use super::balance::{Lease, LiveError};
use super::h1::backend::BackendBody;
use super::runtime::VsCounters;

/// Errors a response body can end with.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The client's request body on its way to the backend (None: the request has none, so it
/// can be sent again to another server).
pub(crate) struct RequestBody {
    inner: Option<Incoming>,
    lease: Arc<Lease>,
}

impl RequestBody {
    /// Wraps `inner`, adding its bytes to `lease` as "from client".
    pub(crate) fn new(inner: Option<Incoming>, lease: Arc<Lease>) -> RequestBody {
        RequestBody { inner, lease }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = ready!(Pin::new(inner).poll_frame(cx));
        if let Some(Ok(data)) = frame.as_ref().map(|f| f.as_ref().map(Frame::data_ref)) {
            self.lease.add_bytes(data.map_or(0, |d| d.len() as u64), 0);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Incoming::size_hint)
    }
}

/// The backend's response body on its way to the client. An error from the backend (closed
/// mid-response) or `server` timeout of silence ends the client's body with an error, so the
/// client sees an aborted response rather than a short one; both count as upstream aborts.
pub(crate) struct UpstreamBody {
    inner: Upstream,
    lease: Arc<Lease>,
    counters: Arc<VsCounters>,
    server_timeout: Duration,
    /// The silence timer, made the first time the backend keeps us waiting (most bodies
    /// arrive with their head and never need one).
    idle: Option<Pin<Box<Sleep>>>,
    /// True while the backend owes us data (the silence timer runs).
    waiting: bool,
    /// When the request's head arrived; taken when the body ends, to time the request once.
    started: Option<Instant>,
}

impl UpstreamBody {
    /// Wraps a backend response body.
    pub(crate) fn new(
        inner: Upstream,
        lease: Arc<Lease>,
        counters: Arc<VsCounters>,
        server_timeout: Duration,
        started: Instant,
    ) -> UpstreamBody {
        UpstreamBody {
            inner,
            lease,
            counters,
            server_timeout,
            idle: None,
            waiting: false,
            started: Some(started),
        }
    }

    fn abort(&self) {
        self.lease.fail(LiveError::Aborted);
        self.counters.count_abort();
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.waiting = false;
                if let Some(data) = frame.data_ref() {
                    this.lease.add_bytes(0, data.len() as u64);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => {
                tracing::debug!(backend = this.lease.backend(), %error, "upstream aborted the response");
                this.abort();
                Poll::Ready(Some(Err(error)))
            }
            Poll::Ready(None) => {
                if let Some(started) = this.started.take() {
                    this.counters.observe_request(started.elapsed());
                }
                Poll::Ready(None)
            }
            Poll::Pending => {
                if !this.waiting {
                    this.waiting = true;
                    let deadline = Instant::now() + this.server_timeout;
                    match this.idle.as_mut() {
                        Some(idle) => idle.as_mut().reset(deadline),
                        None => this.idle = Some(Box::pin(tokio::time::sleep_until(deadline))),
                    }
                }
                let timeout = this.server_timeout;
                let idle = this
                    .idle
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                ready!(idle.as_mut().poll(cx));
                tracing::debug!(
                    backend = this.lease.backend(),
                    "upstream silent past the server timeout"
                );
                this.abort();
                Poll::Ready(Some(Err("backend silent past the server timeout".into())))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Where a backend's response body comes from.
pub(crate) enum Upstream {
    /// hyper's pooled client (requests with a body).
    Hyper(Incoming),
    /// The connection itself (requests without one: `super::h1::backend`).
    Direct(BackendBody),
}

impl Upstream {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self {
            Upstream::Hyper(body) => Pin::new(body)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(BoxError::from))),
            Upstream::Direct(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Upstream::Hyper(body) => body.is_end_stream(),
            Upstream::Direct(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Upstream::Hyper(body) => body.size_hint(),
            Upstream::Direct(body) => body.size_hint(),
        }
    }
}

/// A response body: a local answer (400/502/503/504) or a streamed backend body.
pub(crate) enum ProxyBody {
    /// Generated by the proxy.
    Local(Full<Bytes>),
    /// Streamed from a backend.
    Upstream(UpstreamBody),
}

impl ProxyBody {
    /// A local body from text.
    pub(crate) fn text(text: impl Into<Bytes>) -> ProxyBody {
        ProxyBody::Local(Full::new(text.into()))
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ProxyBody::Local(full) => Pin::new(full)
                .poll_frame(cx)
                .map_err(|never| match never {}),
            ProxyBody::Upstream(up) => Pin::new(up).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Local(full) => full.is_end_stream(),
            ProxyBody::Upstream(up) => up.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Local(full) => full.size_hint(),
            ProxyBody::Upstream(up) => up.size_hint(),
        }
    }
}
