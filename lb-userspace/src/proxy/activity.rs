//! Requests open on one multiplexed (HTTP/2) client connection, so that its keep-alive
//! timeout counts from the end of the last response and never runs during one.
//!
//! HTTP/1.1 connections are idle whenever they wait for a request head, so their reader
//! holds the timer; an HTTP/2 connection carries many streams at once and only the streams
//! can tell when it is idle.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Open requests and when the last one ended.
pub(crate) struct Activity {
    open: AtomicUsize,
    /// Milliseconds from `base` to the end of the last request (or the connection's start).
    idle_since_ms: AtomicU64,
    base: Instant,
    /// Signalled when the last open request ends.
    ended: Notify,
}

impl Activity {
    /// A connection that starts idle now.
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            open: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
            base: Instant::now(),
            ended: Notify::new(),
        })
    }

    /// Marks one request open until the guard is dropped (with its response body).
    pub(crate) fn open(self: &Arc<Self>) -> Open {
        self.open.fetch_add(1, Ordering::SeqCst);
        Open(self.clone())
    }

    /// When the connection will have been idle for `keep_alive`, or None while a request is
    /// open.
    pub(crate) fn idle_deadline(&self, keep_alive: Duration) -> Option<Instant> {
        if self.open.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let since = Duration::from_millis(self.idle_since_ms.load(Ordering::SeqCst));
        Some(self.base + since + keep_alive)
    }

    /// Returns once the last open request has ended (at once if that happened since the
    /// previous call).
    pub(crate) async fn ended(&self) {
        self.ended.notified().await;
    }
}

/// One open request; the connection counts as busy while any exists.
pub(crate) struct Open(Arc<Activity>);

impl Drop for Open {
    fn drop(&mut self) {
        let a = &self.0;
        let ms = u64::try_from(a.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        // The end time first, so whoever sees no request open also sees when the last ended.
        a.idle_since_ms.fetch_max(ms, Ordering::SeqCst);
        if a.open.fetch_sub(1, Ordering::SeqCst) == 1 {
            a.ended.notify_one();
        }
    }
}

/// A response body that keeps its request open until the body ends or is dropped.
pub(crate) struct Tracked<B> {
    inner: B,
    open: Option<Open>,
}

impl<B> Tracked<B> {
    /// Wraps `inner`; `open` (if any) is released when the body ends.
    pub(crate) fn new(inner: B, open: Option<Open>) -> Tracked<B> {
        Tracked { inner, open }
    }
}

impl<B> Body for Tracked<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.open = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// No rule of docs/behaviour.md covers keep-alive timeouts: these check the idle accounting.
#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_end_of_the_last_body_and_not_while_one_is_open() {
        let keep_alive = Duration::from_secs(10);
        let activity = Activity::new();
        let start = Instant::now();
        assert_eq!(activity.idle_deadline(keep_alive), Some(start + keep_alive));
        let body = Tracked::new(Full::new(Bytes::from_static(b"x")), Some(activity.open()));
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(activity.idle_deadline(keep_alive), None, "a body is open");
        let _ = body.collect().await;
        assert_eq!(
            activity.idle_deadline(keep_alive),
            Some(start + Duration::from_secs(30) + keep_alive)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_body_releases_its_request() {
        let activity = Activity::new();
        let body = Tracked::new(Full::new(Bytes::new()), Some(activity.open()));
        assert!(activity.idle_deadline(Duration::from_secs(1)).is_none());
        drop(body);
        assert!(activity.idle_deadline(Duration::from_secs(1)).is_some());
    }
}
