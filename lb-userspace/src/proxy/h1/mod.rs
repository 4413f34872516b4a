//! The HTTP/1.x path of an HTTP vService, plain or over TLS: one task per client connection
//! parses each request head in place (httparse), picks a backend, writes the rewritten head
//! and streams the body to a pooled backend connection it owns for the exchange, then
//! streams the response back. No per-request task, channel or header map: this is the path
//! that carries most traffic, kept as lean as HAProxy's. HTTP/2 goes through hyper
//! (`super::http`); both paths share selection, balancing, persistence, conditions and
//! local answers.

pub(crate) mod backend;
mod buffers;
mod chunked;
pub(crate) mod client;
#[cfg(test)]
mod fuzz;
mod head;
pub(crate) mod idle;
mod io;
mod parked;
mod rewrite;

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Buf;
use hyper::StatusCode;
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep_until};

use super::balance::{Lease, LiveError};
use super::headers;
use super::http::serve_h2c;
use super::listener::Ticket;
use super::responses::Local;
use super::retry::{self, Failure, Tries};
use super::runtime::VsRuntime;
use super::settings::VsSettings;
use super::tcp::tunnel;
use super::upstream::connect_backend;
use super::workers::PARK_AFTER;
use crate::config::{HeaderLimits, Persistence, Timeouts};
use buffers::Buffers;
use client::ClientStream;
use head::{Framing, HeadError, Parsed};
use io::{BodyCopy, CopyError, HEAD_READ, ReadError, fill, fill_head, send};
use rewrite::{response_head, upstream_head};

/// How long an idle keep-alive connection of a closing listener waits for a request already
/// on its way before it closes.
const CLOSING_GRACE: Duration = Duration::from_millis(250);
/// Pipelined request bytes read ahead while an answer is awaited, at most; beyond this the
/// client is no longer watched for leaving until the answer comes.
const PIPELINE_LIMIT: usize = 64 * 1024;

/// What a connection keeps while it waits for its next request: no buffer.
struct Line<C> {
    rt: Arc<VsRuntime>,
    client: C,
    peer: SocketAddr,
    /// Set when the listener closes.
    closing: Ticket,
}

impl<C> Line<C> {
    /// The connection's stream, and the rest of it to go on over another one (the same
    /// socket taken off or put back on the reactor, or handed to HTTP/2).
    fn split(self) -> (C, Line<()>) {
        let Line {
            rt,
            client,
            peer,
            closing,
        } = self;
        let rest = Line {
            rt,
            client: (),
            peer,
            closing,
        };
        (client, rest)
    }
}

impl Line<()> {
    /// The connection over `client`.
    fn join<C>(self, client: C) -> Line<C> {
        Line {
            rt: self.rt,
            client,
            peer: self.peer,
            closing: self.closing,
        }
    }
}

/// A connection with requests under way, and the buffers it holds meanwhile.
struct Conn<C> {
    rt: Arc<VsRuntime>,
    client: C,
    peer: SocketAddr,
    closing: Ticket,
    /// Lent by this thread's pool until the connection waits again.
    b: Box<Buffers>,
}

/// Why a request did not reach its server.
enum SendError {
    /// The try failed before any byte of an answer (connect, closed, silent): another
    /// server may take the request. `consumed`: its body was read off the client while
    /// being sent, so it cannot be sent again.
    Failed { failure: Failure, consumed: bool },
    /// The client was answered or left, or the exchange cannot go on: what follows.
    Done(Next),
}

/// What the connection does after an exchange.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    KeepAlive,
    Close,
}

/// Settings re-read only when a reload replaced them: no shared reference count to bump per
/// request.
type SettingsCache<'a> = arc_swap::Cache<&'a arc_swap::ArcSwap<VsSettings>, Arc<VsSettings>>;

/// Serves one connection until it closes: HTTP/1.x here, on a plain socket or, after the
/// handshake, on a TLS session whose client chose HTTP/1.1 (or no protocol) by ALPN. A
/// plain connection that starts with the HTTP/2 preface (h2c) is handed over to hyper.
///
/// The task alternates between two states: waiting for a request, which holds only the
/// socket and a timer (no buffer: the thread's pool has them), and serving requests, whose
/// larger state is boxed for as long as requests keep coming, so the many idle keep-alive
/// connections of a balancer cost little more than their sockets.
pub(crate) fn serve<C: ClientStream>(
    rt: Arc<VsRuntime>,
    client: C,
    peer: SocketAddr,
    closing: Ticket,
) -> impl Future<Output = ()> + Send {
    // A plain function: the connection is the future's only captured state, not a copy
    // of its parts beside it.
    serve_line(
        Line {
            rt,
            client,
            peer,
            closing,
        },
        Start::New,
    )
}

/// Where a connection's task starts.
#[derive(Clone, Copy)]
enum Start {
    /// A new connection: its protocol is told by its first bytes, and its first request is
    /// due within the client timeout.
    New,
    /// A parked connection, woken: it waits for its next request until `deadline`, the
    /// keep-alive timeout it had when it was parked. `park_again`: see
    /// [`super::workers::Parked::resume`].
    Resumed { deadline: Instant, park_again: bool },
}

async fn serve_line<C: ClientStream>(mut line: Line<C>, start: Start) {
    let settings_of = line.rt.clone();
    let mut settings = SettingsCache::new(&settings_of.settings);
    // Over TLS, ALPN told the protocol already; a resumed connection spoke HTTP/1.x.
    if !C::TLS && matches!(start, Start::New) {
        // Boxed: waiting for the first bytes takes more room than waiting between requests.
        let client_timeout = settings.load().l7.timeouts.client;
        match Box::pin(line.client.sniff_h2(client_timeout)).await {
            Some(false) => {}
            Some(true) => {
                let (client, rest) = line.split();
                return Box::pin(serve_h2c(rest.rt, client, rest.peer, rest.closing)).await;
            }
            None => return tracing::debug!(peer = %line.peer, "client sent nothing in time"),
        }
    }
    let (mut first, mut kept_deadline, mut park) = match start {
        Start::New => (true, None, C::PARKS),
        Start::Resumed {
            deadline,
            park_again,
        } => (false, Some(deadline), park_again),
    };
    loop {
        let deadline = kept_deadline.take().unwrap_or_else(|| {
            let t = &settings.load().l7.timeouts;
            Instant::now() + if first { t.client } else { t.keep_alive }
        });
        // A keep-alive connection idle a while is parked without its task.
        let park_at = (park && !first).then(|| Instant::now() + PARK_AFTER);
        let b = match line.wait_request(deadline, first, park_at).await {
            Waited::Request(b) => b,
            Waited::End => return,
            Waited::Idle => match parked::park(line, deadline) {
                None => return,
                Some(back) => {
                    line = back;
                    park = false;
                    kept_deadline = Some(deadline);
                    continue;
                }
            },
        };
        // The first byte of a request: the whole head within the client timeout (from the
        // connection's start for its first request).
        let head_by = if first {
            deadline
        } else {
            Instant::now() + settings.load().l7.timeouts.client
        };
        first = false;
        let conn = Conn::new(line, b);
        let (mut back, b, next) = Box::pin(conn.serve_requests(&mut settings, head_by)).await;
        buffers::give_back(b);
        if next == Next::Close {
            // Boxed: the TLS close's state is not kept beside the waiting connection's.
            return Box::pin(back.client.finish()).await;
        }
        line = back;
    }
}

/// How a wait for a request ended.
enum Waited {
    /// The first bytes of a request, in buffers from this thread's pool.
    Request(Box<Buffers>),
    /// No request by the time to park the connection.
    Idle,
    /// The connection should end.
    End,
}

/// What woke a connection waiting for a request.
enum Woke {
    /// The client sent something, or closed, or its socket failed: a read tells which.
    Readable,
    /// The wait's deadline passed.
    TimedOut,
}

impl<C: ClientStream> Line<C> {
    /// Waits, holding no buffer, until the client sends the first bytes of a request, and
    /// reads them into buffers from this thread's pool. [`Waited::End`] when the
    /// connection should end: the client closed, or stayed silent past `deadline` (the
    /// keep-alive timeout, or the client timeout for a new connection's first request), or
    /// the listener is closing and no request came within a short grace. [`Waited::Idle`]
    /// at `park_at`, when that comes first and the listener is not closing.
    ///
    /// Written with the socket's, the timer's and the closing signal's own poll functions,
    /// not futures wrapping them: this is the state an idle connection spends its life in,
    /// and its size is most of what an idle connection costs.
    async fn wait_request(
        &mut self,
        deadline: Instant,
        first: bool,
        park_at: Option<Instant>,
    ) -> Waited {
        let mut parking = park_at.is_some_and(|at| at < deadline);
        let sleep = sleep_until(park_at.map_or(deadline, |at| at.min(deadline)));
        tokio::pin!(sleep);
        let closing = self.closing.notified();
        tokio::pin!(closing);
        let mut closing_seen = false;
        loop {
            // Read first: a TLS session may hold a pipelined request already decrypted,
            // which no socket readiness would announce.
            let mut b = buffers::take();
            b.cbuf.reserve(HEAD_READ);
            match self.client.read_now(&mut b.cbuf) {
                Ok(n) if n > 0 => return Waited::Request(b),
                // Nothing yet: wait, the buffers back in the pool.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => buffers::give_back(b),
                _ => {
                    buffers::give_back(b);
                    return Waited::End;
                }
            }
            let woke = std::future::poll_fn(|cx| {
                if self.client.poll_socket_ready(cx).is_ready() {
                    return Poll::Ready(Woke::Readable);
                }
                // The flag is read after the wakeup is registered (its first poll): a close
                // between the two is seen either way.
                if !closing_seen && (closing.as_mut().poll(cx).is_ready() || self.closing.now()) {
                    // A request sent just now may be on its way: it is served (its answer
                    // closes the connection) rather than cut by a close the client cannot
                    // tell from a failure.
                    closing_seen = true;
                    parking = false;
                    sleep
                        .as_mut()
                        .reset((Instant::now() + CLOSING_GRACE).min(deadline));
                }
                sleep.as_mut().poll(cx).map(|()| Woke::TimedOut)
            })
            .await;
            if let Woke::TimedOut = woke {
                if parking {
                    return Waited::Idle;
                }
                if first && !closing_seen {
                    tracing::debug!(vservice = %self.rt.name, peer = %self.peer,
                        "request head not received within the client timeout");
                }
                return Waited::End;
            }
        }
    }
}

impl<C: ClientStream> Conn<C> {
    fn new(line: Line<C>, b: Box<Buffers>) -> Conn<C> {
        let Line {
            rt,
            client,
            peer,
            closing,
        } = line;
        Conn {
            rt,
            client,
            peer,
            closing,
            b,
        }
    }

    /// Serves the request whose first bytes are in the buffers, then any the client
    /// pipelined after it, until the connection closes or waits with nothing pending; gives
    /// the connection and its buffers back.
    async fn serve_requests(
        self,
        settings: &mut SettingsCache<'_>,
        mut deadline: Instant,
    ) -> (Line<C>, Box<Buffers>, Next) {
        let mut conn = self;
        let next = loop {
            let settings = settings.load();
            if !conn
                .read_request(settings.header_limits, &settings.l7.timeouts, deadline)
                .await
            {
                break Next::Close;
            }
            conn.rt.counters.count_request();
            let started = std::time::Instant::now();
            let next = conn.exchange(settings).await;
            conn.rt.counters.observe_request(started.elapsed());
            if next == Next::Close || conn.b.cbuf.is_empty() {
                break next;
            }
            // A pipelined request: its whole head within the client timeout from now.
            deadline = Instant::now() + settings.l7.timeouts.client;
        };
        let Conn {
            rt,
            client,
            peer,
            closing,
            b,
        } = conn;
        let line = Line {
            rt,
            client,
            peer,
            closing,
        };
        (line, b, next)
    }

    /// Parses the request head the buffers hold into `self.b.req`, reading more of it
    /// before `deadline` as needed. False when the connection should end: the client closed,
    /// sent its head too slowly (client timeout: slowloris) or sent a bad head (answered
    /// 400/431 here).
    async fn read_request(
        &mut self,
        limits: HeaderLimits,
        t: &Timeouts,
        deadline: Instant,
    ) -> bool {
        loop {
            if !self.b.cbuf.is_empty() {
                match self.b.req.parse_request(&self.b.cbuf, limits) {
                    Ok(Parsed::Complete(n)) => {
                        self.b.cbuf.advance(n);
                        return true;
                    }
                    Ok(Parsed::Partial) => {}
                    Err(error) => {
                        self.refuse(error, t).await;
                        return false;
                    }
                }
            }
            match fill_head(&mut self.client, &mut self.b.cbuf, deadline).await {
                Ok(_) => {}
                Err(ReadError::TimedOut) => {
                    tracing::debug!(vservice = %self.rt.name, peer = %self.peer,
                        "request head not received within the client timeout");
                    return false;
                }
                Err(_) => return false,
            }
        }
    }

    /// Answers a head that cannot be served (400, or 431 when too large) and counts it.
    async fn refuse(&mut self, error: HeadError, t: &Timeouts) {
        tracing::debug!(vservice = %self.rt.name, peer = %self.peer, %error, "bad request");
        self.rt.counters.count_bad_request();
        let status = match error {
            HeadError::TooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            HeadError::LineTooLong => StatusCode::URI_TOO_LONG,
            HeadError::Malformed(_) => StatusCode::BAD_REQUEST,
        };
        self.b.out.clear();
        Local::status(status).write_h1(&mut self.b.out, true);
        let _ = send(&mut self.client, &self.b.out, t.client).await;
    }

    /// One request/response exchange for the parsed `self.b.req`.
    async fn exchange(&mut self, settings: &VsSettings) -> Next {
        let t = settings.l7.timeouts;
        let client_ip = self.peer.ip().to_canonical();
        if self.b.req.method_str() == "CONNECT" {
            self.rt.counters.count_bad_request();
            return self.local(Local::status(StatusCode::BAD_REQUEST), &t).await;
        }
        let mut lease = match self.acquire(settings, client_ip, &[]).await {
            Some(lease) => lease,
            None => {
                self.rt.counters.count_unavailable();
                return self.local(Local::unavailable(&settings.l7), &t).await;
            }
        };
        let framing = self.b.req.framing.unwrap_or(Framing::Length(0));
        if self.b.req.expect_continue && framing != Framing::Length(0) {
            // The client waits for this before sending its body; the backend is chosen.
            if !send(&mut self.client, b"HTTP/1.1 100 Continue\r\n\r\n", t.client).await {
                return Next::Close;
            }
        }
        let forwarded = if settings.l7.forwarded_headers {
            // An IPv4 client on a dual-stack socket as itself.
            if self.b.peer_text.is_empty() {
                let _ = write!(self.b.peer_text, "{client_ip}");
            }
            Some(self.b.peer_text.as_str())
        } else {
            None
        };
        let mut head = std::mem::take(&mut self.b.uphead);
        upstream_head(&self.b.req, forwarded, C::TLS, &mut head);
        // A try that failed before any answer byte may go to another server of the list
        // (S-RT1): any request whose connect failed, an idempotent one held whole otherwise.
        let rt = self.rt.clone();
        let mut tries = Tries::new(&rt, settings.l7.retry);
        let idempotent = retry::idempotent(self.b.req.method_str());
        let sent = loop {
            let (failure, consumed) = match self.send_request(&lease, &head, framing, &t).await {
                Ok(sent) => break Ok(sent),
                Err(SendError::Done(next)) => break Err(next),
                Err(SendError::Failed { failure, consumed }) => (failure, consumed),
            };
            if tries.again(failure, &lease, idempotent && !consumed)
                && let Some(other) = self.acquire(settings, client_ip, tries.failed()).await
            {
                tries.count(&lease);
                lease = other;
                continue;
            }
            let next = if consumed {
                Next::KeepAlive
            } else {
                self.discard_body(framing)
            };
            let status = if failure == Failure::ResponseTimeout {
                self.rt.counters.count_server_timeout();
                StatusCode::GATEWAY_TIMEOUT
            } else {
                StatusCode::BAD_GATEWAY
            };
            break Err(self.answer(Local::status(status), next, &t).await);
        };
        self.b.uphead = head;
        let (up, head_bytes, body_sent) = match sent {
            Ok(sent) => sent,
            Err(next) => return next,
        };
        drop(tries);
        lease.add_bytes(head_bytes, 0);
        let next = self
            .relay_response(settings, &lease, up, body_sent, &t)
            .await;
        self.b.ubuf.clear();
        // A backend that answered before taking the whole body leaves the rest of it on the
        // client connection, where it cannot be told from a next request.
        if body_sent { next } else { Next::Close }
    }

    /// Chooses the list (Conditional sets) and a backend slot under the pool's rules,
    /// leaving out the servers in `tried` (failed connects of this request).
    async fn acquire(
        &mut self,
        settings: &VsSettings,
        client: IpAddr,
        tried: &[String],
    ) -> Option<Lease> {
        let set = settings.conditions.pick(&self.b.req, client);
        let pin_key = match &settings.l7.persistence {
            Persistence::Cookie(c) => headers::cookie_in(self.b.req.header_all("cookie"), &c.name),
            _ => None,
        };
        let acquire = self.rt.acquire_other(settings, set, client, pin_key, tried);
        match acquire.await {
            Ok(lease) => Some(lease),
            Err(error) => {
                tracing::debug!(vservice = %self.rt.name, %error, "503");
                None
            }
        }
    }

    /// Sends the request head and body to the lease's backend on a pooled or new
    /// connection, and waits for the first bytes of the answer: Ok((connection, head bytes,
    /// whether the whole body went)). A body already received whole is held (sent from the
    /// client buffer, consumed only once answered) so the request can be sent again; a
    /// longer or chunked body streams. A reused connection that turns out closed is replaced
    /// once for an idempotent request held whole (it may have reached the server).
    async fn send_request(
        &mut self,
        lease: &Lease,
        head: &[u8],
        framing: Framing,
        t: &Timeouts,
    ) -> Result<(TcpStream, u64, bool), SendError> {
        let addr = lease.addr();
        let held = match framing {
            Framing::Length(n) if self.b.cbuf.len() as u64 >= n => Some(n as usize),
            _ => None,
        };
        let resend = held.is_some() && retry::idempotent(self.b.req.method_str());
        let mut pooled = idle::take(addr);
        loop {
            let reused = pooled.is_some();
            let mut up = match pooled.take() {
                Some(up) => up,
                None => {
                    match connect_backend(addr, t.connect, &self.rt.settings.load().connect_time)
                        .await
                    {
                        Ok(up) => up,
                        Err(error) => {
                            tracing::debug!(vservice = %self.rt.name, backend = lease.backend(), %error, "connect failed");
                            lease.fail(LiveError::Connect);
                            return Err(SendError::Failed {
                                failure: Failure::Connect,
                                consumed: false,
                            });
                        }
                    }
                }
            };
            if let Some(body) = held {
                // Most requests have no body: their head goes as it is, without a copy.
                let wire = if body == 0 {
                    head
                } else {
                    self.b.out.clear();
                    self.b.out.extend_from_slice(head);
                    self.b.out.extend_from_slice(&self.b.cbuf[..body]);
                    &self.b.out
                };
                let answered = if send(&mut up, wire, t.server).await {
                    self.first_response_bytes(&mut up, t).await
                } else {
                    Err(ReadError::Closed)
                };
                let failure = match answered {
                    Ok(()) => {
                        self.b.cbuf.advance(body);
                        lease.add_bytes(body as u64, 0);
                        return Ok((up, head.len() as u64, true));
                    }
                    Err(ReadError::Cancelled) => return Err(self.client_left(lease)),
                    Err(ReadError::Closed | ReadError::Io(_)) if reused && resend => {
                        lease.count_retry(false);
                        continue;
                    }
                    Err(ReadError::TimedOut) => Failure::ResponseTimeout,
                    Err(error) => {
                        tracing::debug!(vservice = %self.rt.name, backend = lease.backend(), %error, "no answer");
                        Failure::EmptyResponse
                    }
                };
                lease.fail(failure.into());
                return Err(SendError::Failed {
                    failure,
                    consumed: false,
                });
            }
            self.b.out.clear();
            self.b.out.extend_from_slice(head);
            let copy = BodyCopy {
                framing,
                dechunk: false,
                src_idle: t.client,
                dst_limit: t.server,
            };
            return match copy
                .run(&mut self.client, &mut self.b.cbuf, &mut up, &mut self.b.out)
                .await
            {
                Ok(n) => {
                    lease.add_bytes(n, 0);
                    match self.first_response_bytes(&mut up, t).await {
                        Ok(()) => Ok((up, head.len() as u64, true)),
                        Err(ReadError::Cancelled) => Err(self.client_left(lease)),
                        Err(error) => {
                            tracing::debug!(vservice = %self.rt.name, backend = lease.backend(), %error, "no answer");
                            let failure = match error {
                                ReadError::TimedOut => Failure::ResponseTimeout,
                                _ => Failure::EmptyResponse,
                            };
                            lease.fail(failure.into());
                            Err(SendError::Failed {
                                failure,
                                consumed: true,
                            })
                        }
                    }
                }
                Err(CopyError::Source(why)) => {
                    tracing::debug!(vservice = %self.rt.name, peer = %self.peer, why, "client request body incomplete");
                    Err(SendError::Done(Next::Close))
                }
                Err(CopyError::Sink) => {
                    // The backend stopped taking the body: it may have answered early.
                    match self.first_response_bytes(&mut up, t).await {
                        Ok(()) => Ok((up, head.len() as u64, false)),
                        Err(ReadError::Cancelled) => Err(self.client_left(lease)),
                        Err(error) => {
                            let _ = self.backend_failed(lease, &error, t).await;
                            Err(SendError::Done(Next::Close))
                        }
                    }
                }
            };
        }
    }

    /// Waits (server timeout) until the backend sends the first bytes of its answer, watching
    /// the client meanwhile: a client that closes cancels the request
    /// ([`ReadError::Cancelled`]; the caller drops the backend connection instead of pooling
    /// it). Bytes the client pipelines meanwhile wait in its buffer.
    async fn first_response_bytes(
        &mut self,
        up: &mut TcpStream,
        t: &Timeouts,
    ) -> Result<(), ReadError> {
        self.b.ubuf.clear();
        let deadline = Instant::now() + t.server;
        let Conn { client, b, .. } = self;
        let Buffers { cbuf, ubuf, .. } = &mut **b;
        let answer = fill(up, ubuf, deadline);
        tokio::pin!(answer);
        loop {
            if cbuf.len() >= PIPELINE_LIMIT {
                return answer.await.map(|_| ());
            }
            tokio::select! {
                biased;
                answered = &mut answer => return answered.map(|_| ()),
                read = fill_head(client, cbuf, deadline) => match read {
                    Ok(_) => {}
                    Err(ReadError::TimedOut) => return Err(ReadError::TimedOut),
                    Err(_) => return Err(ReadError::Cancelled),
                },
            }
        }
    }

    /// The client left before its answer: the upstream request is abandoned (its
    /// connection closes with the caller's handle) and counted.
    fn client_left(&self, lease: &Lease) -> SendError {
        tracing::debug!(vservice = %self.rt.name, peer = %self.peer, backend = lease.backend(), "client left before the answer: upstream request cancelled");
        self.rt.counters.count_client_abort();
        SendError::Done(Next::Close)
    }

    /// 502 (closed or failed) or 504 (silent) after the request went out.
    async fn backend_failed(&mut self, lease: &Lease, error: &ReadError, t: &Timeouts) -> Next {
        lease.fail(match error {
            ReadError::TimedOut => LiveError::Timeout,
            _ => LiveError::NoAnswer,
        });
        let status = match error {
            ReadError::TimedOut => {
                self.rt.counters.count_server_timeout();
                StatusCode::GATEWAY_TIMEOUT
            }
            _ => StatusCode::BAD_GATEWAY,
        };
        tracing::debug!(vservice = %self.rt.name, backend = lease.backend(), %error, "{status}");
        self.answer(Local::status(status), Next::KeepAlive, t).await
    }

    /// Reads the backend's response head (skipping interim 1xx answers), writes the
    /// rewritten head and streams the body to the client; returns the connection to the
    /// pool when the exchange ended cleanly (`body_sent`: the backend took the whole request).
    async fn relay_response(
        &mut self,
        settings: &VsSettings,
        lease: &Lease,
        mut up: TcpStream,
        body_sent: bool,
        t: &Timeouts,
    ) -> Next {
        let head_request = self.b.req.method_str() == "HEAD";
        loop {
            match self.b.resp.parse_response(&self.b.ubuf, head_request) {
                Ok(Parsed::Complete(n)) => {
                    self.b.ubuf.advance(n);
                    if (100..200).contains(&self.b.resp.status) && self.b.resp.status != 101 {
                        continue;
                    }
                    break;
                }
                Ok(Parsed::Partial) => {}
                Err(error) => {
                    tracing::debug!(vservice = %self.rt.name, backend = lease.backend(), %error, "502");
                    lease.fail(LiveError::BadAnswer);
                    return self
                        .answer(Local::status(StatusCode::BAD_GATEWAY), Next::KeepAlive, t)
                        .await;
                }
            }
            if let Err(error) = fill(&mut up, &mut self.b.ubuf, Instant::now() + t.server).await {
                return self.backend_failed(lease, &error, t).await;
            }
        }
        lease.answered(self.b.resp.status);
        if self.b.resp.status == 101 {
            return self.switch_protocols(lease, &mut up, t).await;
        }
        let framing = self.b.resp.framing.unwrap_or(Framing::UntilClose);
        let client_minor = self.b.req.minor;
        let dechunk = framing == Framing::Chunked && client_minor == 0;
        let mut next = if self.b.req.wants_keep_alive() && !self.closing.now() {
            Next::KeepAlive
        } else {
            Next::Close
        };
        if framing == Framing::UntilClose || dechunk {
            next = Next::Close;
        }
        let set_cookie = match &settings.l7.persistence {
            Persistence::Cookie(c) => lease.set_cookie().and_then(|v| headers::set_cookie(c, v)),
            _ => None,
        };
        self.b.out.clear();
        response_head(
            &self.b.resp,
            framing,
            dechunk,
            client_minor,
            next == Next::Close,
            set_cookie.as_ref().map(|v| v.as_bytes()),
            &mut self.b.out,
        );
        let head_bytes = self.b.out.len() as u64;
        let copy = BodyCopy {
            framing,
            dechunk,
            src_idle: t.server,
            dst_limit: t.client,
        };
        let result = copy
            .run(&mut up, &mut self.b.ubuf, &mut self.client, &mut self.b.out)
            .await;
        match result {
            Ok(n) => {
                lease.add_bytes(0, head_bytes + n);
                let reusable = body_sent
                    && framing != Framing::UntilClose
                    && self.b.resp.minor == 1
                    && !self.b.resp.connection.close
                    && self.b.ubuf.is_empty();
                if reusable {
                    idle::give_back(lease.addr(), up, t.keep_alive);
                }
                next
            }
            Err(CopyError::Source(why)) => {
                tracing::debug!(vservice = %self.rt.name, backend = lease.backend(), why, "upstream aborted the response");
                lease.fail(LiveError::Aborted);
                self.rt.counters.count_abort();
                Next::Close
            }
            Err(CopyError::Sink) => Next::Close,
        }
    }

    /// The backend accepted a protocol upgrade (WebSocket): the 101 goes to the client, then
    /// bytes flow both ways as an L7 tunnel until either side closes or the pair stays idle
    /// past the client timeout. The backend connection is never reused.
    async fn switch_protocols(&mut self, lease: &Lease, up: &mut TcpStream, t: &Timeouts) -> Next {
        if !self.b.req.connection.upgrade {
            tracing::debug!(vservice = %self.rt.name, backend = lease.backend(), "101 without an upgrade request: 502");
            lease.fail(LiveError::BadAnswer);
            return self
                .answer(Local::status(StatusCode::BAD_GATEWAY), Next::Close, t)
                .await;
        }
        self.b.out.clear();
        response_head(
            &self.b.resp,
            Framing::Length(0),
            false,
            1,
            false,
            None,
            &mut self.b.out,
        );
        // Bytes either side sent right after the heads belong to the new protocol.
        self.b.out.extend_from_slice(&self.b.ubuf);
        lease.add_bytes(self.b.cbuf.len() as u64, self.b.out.len() as u64);
        if !send(&mut self.client, &self.b.out, t.client).await
            || !send(up, &self.b.cbuf, t.server).await
        {
            return Next::Close;
        }
        self.b.cbuf.clear();
        self.b.ubuf.clear();
        if let Err(end) = tunnel(&mut self.client, up, lease, t.client).await {
            tracing::debug!(vservice = %self.rt.name, backend = lease.backend(), ?end, "upgraded connection ended");
        }
        Next::Close
    }

    /// Answers with a local response after the request body (if any) is read off.
    async fn local(&mut self, answer: Local, t: &Timeouts) -> Next {
        let framing = self.b.req.framing.unwrap_or(Framing::Length(0));
        let next = self.discard_body(framing);
        self.answer(answer, next, t).await
    }

    /// Writes a local answer; closes when `next` says so, the client asked, or the listener
    /// is closing.
    async fn answer(&mut self, answer: Local, next: Next, t: &Timeouts) -> Next {
        let close = next == Next::Close || !self.b.req.wants_keep_alive() || self.closing.now();
        self.b.out.clear();
        answer.write_h1(&mut self.b.out, close);
        if !send(&mut self.client, &self.b.out, t.client).await || close {
            return Next::Close;
        }
        Next::KeepAlive
    }

    /// Reads off a request body that will not be forwarded when it is already here; a body
    /// still on its way makes the connection close after the answer instead of waiting.
    fn discard_body(&mut self, framing: Framing) -> Next {
        match framing {
            Framing::Length(0) => Next::KeepAlive,
            Framing::Length(n) if (self.b.cbuf.len() as u64) >= n => {
                self.b.cbuf.advance(n as usize);
                Next::KeepAlive
            }
            _ => Next::Close,
        }
    }
}
