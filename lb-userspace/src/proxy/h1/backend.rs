//! A request that came over HTTP/2 sent to its backend the way the HTTP/1.1 path sends one:
//! on a connection from this worker's idle list (or a new one), head written whole, answer
//! head parsed in place, body streamed back as HTTP/2 data frames, and the connection
//! returned to the list once the body ended cleanly.
//!
//! hyper's pooled client would cost a task per backend connection and a channel and a
//! oneshot per request, the larger part of an HTTP/2 request's time in the proxy. Requests
//! with a body still go through that client (`super::super::upstream`).

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Response, StatusCode};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::buffers::{self, Buffers};
use super::chunked::Chunked;
use super::head::{Framing, Head, Parsed};
use super::idle;
use super::io::{ReadError, fill, send};
use crate::proxy::balance::Lease;
use crate::proxy::retry::Failure;
use crate::proxy::upstream::connect_backend;
use crate::stats::Histogram;

/// Bytes asked of the kernel per read of a response body.
const READ_SIZE: usize = 16 * 1024;

/// Why an exchange gave no answer.
#[derive(Debug)]
pub(crate) enum ExchangeError {
    /// No answer came (connect failed, closed, silent): another server may take it.
    Failed(Failure),
    /// The backend answered something that is not an HTTP/1.x response head.
    BadAnswer,
}

/// What an exchange needs to know beside the head.
pub(crate) struct Exchange<'a> {
    /// The backend's slot (its address; a replaced keep-alive connection is counted on it).
    pub lease: &'a Lease,
    /// Connect timeout.
    pub connect: Duration,
    /// The server timeout: for the answer's head, then for each silence in its body.
    pub server: Duration,
    /// How long a connection returned to the idle list stays reusable.
    pub keep_alive: Duration,
    /// The vService's connect-time histogram.
    pub connect_time: &'a Histogram,
    /// The request is a HEAD (its answer has no body).
    pub head_request: bool,
}

impl Exchange<'_> {
    /// Sends `head` (a whole HTTP/1.1 request head, no body) and reads the answer's head. A
    /// reused connection found closed is replaced once by a new one: the request has no body
    /// and is sent again whole, as the HTTP/1.1 path does.
    pub(crate) async fn send(&self, head: &[u8]) -> Result<Response<BackendBody>, ExchangeError> {
        // The answer is read into this worker's pooled buffers, as on the HTTP/1.1 path: no
        // 16 KiB buffer and head index allocated and freed per request.
        let mut b = buffers::take();
        let answered = self.answer(head, &mut b).await;
        buffers::give_back(b);
        answered
    }

    async fn answer(
        &self,
        head: &[u8],
        b: &mut Buffers,
    ) -> Result<Response<BackendBody>, ExchangeError> {
        let addr = self.lease.addr();
        let mut pooled = idle::take(addr);
        loop {
            let reused = pooled.is_some();
            let mut up = match pooled.take() {
                Some(up) => up,
                None => connect_backend(addr, self.connect, self.connect_time)
                    .await
                    .map_err(|_| ExchangeError::Failed(Failure::Connect))?,
            };
            b.ubuf.clear();
            let answered = if send(&mut up, head, self.server).await {
                self.read_head(&mut up, &mut b.ubuf, &mut b.resp).await
            } else {
                Err(ReadError::Closed)
            };
            match answered {
                Ok(Some(n)) => {
                    // The head's bytes and what came of the body after it leave the pooled
                    // buffer in allocations of their own size.
                    let raw = Bytes::copy_from_slice(&b.ubuf[..n]);
                    let rest = BytesMut::from(&b.ubuf[n..]);
                    return self.response(&b.resp, &raw, up, rest);
                }
                Ok(None) => return Err(ExchangeError::BadAnswer),
                Err(ReadError::Closed | ReadError::Io(_)) if reused => {
                    self.lease.count_retry(false);
                    continue;
                }
                Err(ReadError::TimedOut) => {
                    return Err(ExchangeError::Failed(Failure::ResponseTimeout));
                }
                Err(_) => return Err(ExchangeError::Failed(Failure::EmptyResponse)),
            }
        }
    }

    /// Reads and parses the answer's head into `resp` (interim 1xx answers skipped), within
    /// the server timeout: the head's length at the start of `buf`; None when it is not a
    /// valid response head.
    async fn read_head(
        &self,
        up: &mut TcpStream,
        buf: &mut BytesMut,
        resp: &mut Head,
    ) -> Result<Option<usize>, ReadError> {
        let deadline = Instant::now() + self.server;
        loop {
            if !buf.is_empty() {
                match resp.parse_response(buf, self.head_request) {
                    Ok(Parsed::Complete(n)) => {
                        // 101 cannot be asked for over HTTP/2 (no Upgrade goes out).
                        if (100..200).contains(&resp.status) {
                            buf.advance(n);
                            continue;
                        }
                        return Ok(Some(n));
                    }
                    Ok(Parsed::Partial) => {}
                    Err(_) => return Ok(None),
                }
            }
            fill(up, buf, deadline).await?;
        }
    }

    /// The answer as hyper sends it on: status, end-to-end headers (hop-by-hop ones, the
    /// framing among them, dropped; values shared out of the head's bytes `raw`, not copied),
    /// and the body streaming from `up`.
    fn response(
        &self,
        resp: &Head,
        raw: &Bytes,
        up: TcpStream,
        buf: BytesMut,
    ) -> Result<Response<BackendBody>, ExchangeError> {
        let status = StatusCode::from_u16(resp.status).map_err(|_| ExchangeError::BadAnswer)?;
        let framing = resp.framing.unwrap_or(Framing::UntilClose);
        let mut headers = HeaderMap::with_capacity(16);
        for (name, value) in resp.end_to_end_ranges() {
            // A header HTTP/2 cannot carry is dropped, not the whole answer.
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(&raw[name]),
                HeaderValue::from_maybe_shared(raw.slice(value)),
            ) {
                headers.append(name, value);
            }
        }
        let reusable = framing != Framing::UntilClose && resp.minor == 1 && !resp.connection.close;
        let left = match framing {
            Framing::Length(n) => n,
            _ => 0,
        };
        let mut body = BackendBody {
            up: Some(up),
            buf,
            framing,
            left,
            chunked: Chunked::default(),
            reusable,
            addr: self.lease.addr(),
            keep_alive: self.keep_alive,
        };
        // A body that is over before it starts (HEAD, 204, Content-Length: 0) is never
        // polled: the connection goes back now.
        if body.complete() {
            body.finish();
        }
        let mut out = Response::new(body);
        *out.status_mut() = status;
        *out.headers_mut() = headers;
        Ok(out)
    }
}

/// A backend's response body read straight off its connection, which goes back to this
/// worker's idle list once the body ended cleanly (and is closed otherwise).
pub(crate) struct BackendBody {
    /// None once the body ended.
    up: Option<TcpStream>,
    /// Bytes read and not yet passed on.
    buf: BytesMut,
    framing: Framing,
    /// Bytes still owed of a Content-Length body.
    left: u64,
    chunked: Chunked,
    /// The connection may carry another request after this body.
    reusable: bool,
    addr: SocketAddr,
    keep_alive: Duration,
}

impl BackendBody {
    /// The body ended cleanly: the connection goes back for reuse when nothing follows it.
    fn finish(&mut self) {
        if let Some(up) = self.up.take()
            && self.reusable
            && self.buf.is_empty()
        {
            idle::give_back(self.addr, up, self.keep_alive);
        }
    }

    /// The next data frame from what `buf` holds, or None when more must be read.
    fn take_data(&mut self) -> Result<Option<Bytes>, BoxError> {
        match self.framing {
            Framing::Length(_) => {
                let take = usize::try_from(self.left)
                    .unwrap_or(usize::MAX)
                    .min(self.buf.len());
                self.left -= take as u64;
                Ok((take > 0).then(|| self.buf.split_to(take).freeze()))
            }
            Framing::UntilClose => Ok((!self.buf.is_empty()).then(|| self.buf.split().freeze())),
            Framing::Chunked => {
                let mut payload = Vec::new();
                let n = self
                    .chunked
                    .feed(&self.buf, &mut |p| payload.extend_from_slice(p))?;
                let _ = self.buf.split_to(n);
                Ok((!payload.is_empty()).then(|| Bytes::from(payload)))
            }
        }
    }

    /// True once the whole body went by.
    fn complete(&self) -> bool {
        match self.framing {
            Framing::Length(_) => self.left == 0,
            Framing::Chunked => self.chunked.is_done(),
            Framing::UntilClose => false,
        }
    }
}

/// Errors a backend body can end with.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Body for BackendBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            if this.up.is_none() {
                return Poll::Ready(None);
            }
            match this.take_data() {
                Ok(Some(data)) => {
                    // hyper asks no more once the body says it ended: the connection goes
                    // back with the last frame, not on a poll that may never come.
                    if this.complete() {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Ok(None) => {}
                Err(error) => {
                    this.up = None;
                    return Poll::Ready(Some(Err(error)));
                }
            }
            if this.complete() {
                this.finish();
                return Poll::Ready(None);
            }
            let Some(up) = this.up.as_mut() else {
                return Poll::Ready(None);
            };
            this.buf.reserve(READ_SIZE);
            // A fresh read each poll: it holds nothing between polls but the borrows.
            let read = ready!(std::pin::pin!(up.read_buf(&mut this.buf)).poll(cx));
            match read {
                Ok(0) if this.framing == Framing::UntilClose => {
                    this.up = None;
                    return Poll::Ready(None);
                }
                Ok(0) => {
                    this.up = None;
                    return Poll::Ready(Some(Err(
                        "backend closed before the end of the body".into()
                    )));
                }
                Ok(_) => {}
                Err(error) => {
                    this.up = None;
                    return Poll::Ready(Some(Err(error.into())));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.up.is_none() || (self.complete() && self.buf.is_empty())
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing {
            Framing::Length(_) => SizeHint::with_exact(self.left),
            _ => SizeHint::default(),
        }
    }
}
