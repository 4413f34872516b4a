//! The client side of an HTTP/1.1 connection, plain or TLS: the hand-written path serves
//! both, so HTTPS keeps the plain path's cost per request instead of going
//! through hyper.

use std::io;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// How long closing a TLS connection may wait for the client to take the close_notify.
const FINISH_LIMIT: Duration = Duration::from_secs(1);

/// A client connection the HTTP/1.1 path reads requests from and writes answers to.
///
/// Beside reading and writing, an idle connection must be waited on without a buffer (the
/// socket's readiness) and read without waiting once woken: that is what lets ten thousand
/// idle keep-alive connections hold no buffers.
pub(crate) trait ClientStream:
    AsyncRead + AsyncWrite + Unpin + Send + Sync + Sized + 'static
{
    /// The connection is TLS: the backend is told `X-Forwarded-Proto: https`.
    const TLS: bool;

    /// Idle connections of this kind are parked without a task (plain ones: a TLS
    /// session's state stays with its task).
    const PARKS: bool;

    /// Takes the socket off this worker's reactor, to park the connection.
    fn detach(self) -> Detach<Self>;

    /// Ready once the socket under the connection has bytes, or closed or failed.
    fn poll_socket_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// Reads what has arrived into `buf` without waiting: `WouldBlock` when nothing has.
    fn read_now(&mut self, buf: &mut BytesMut) -> io::Result<usize>;

    /// Tells HTTP/2 with prior knowledge (true) from HTTP/1.x (false) by the first bytes,
    /// without consuming them; None when the client closes or stays silent past `limit`.
    fn sniff_h2(&self, limit: Duration) -> impl Future<Output = Option<bool>> + Send + '_;

    /// Ends the connection after its last answer: over TLS a close_notify alert, so that a
    /// client reading a body delimited by the close can tell its end from a cut (rustls
    /// and OpenSSL clients report a close without one as an unexpected end of file).
    fn finish(&mut self) -> impl Future<Output = ()> + Send + '_;
}

/// What taking a connection's socket off the reactor gave.
pub(crate) enum Detach<C> {
    /// The socket, off the reactor.
    Off(std::net::TcpStream),
    /// This kind of connection is not parked: it is given back as it was.
    Kept(C),
    /// The socket could not be taken off; the connection is gone.
    Failed(io::Error),
}

impl ClientStream for TcpStream {
    const TLS: bool = false;
    const PARKS: bool = true;

    fn detach(self) -> Detach<Self> {
        match self.into_std() {
            Ok(socket) => Detach::Off(socket),
            Err(error) => Detach::Failed(error),
        }
    }

    fn poll_socket_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_read_ready(cx)
    }

    fn read_now(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        self.try_read_buf(buf)
    }

    fn sniff_h2(&self, limit: Duration) -> impl Future<Output = Option<bool>> + Send + '_ {
        super::super::http::sniff_h2(self, limit)
    }

    /// Closing the socket is the end.
    fn finish(&mut self) -> impl Future<Output = ()> + Send + '_ {
        std::future::ready(())
    }
}

impl ClientStream for TlsStream<TcpStream> {
    const TLS: bool = true;
    const PARKS: bool = false;

    fn detach(self) -> Detach<Self> {
        Detach::Kept(self)
    }

    fn poll_socket_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_ref().0.poll_read_ready(cx)
    }

    /// Decrypts what the socket and the TLS session hold. Records already decrypted (a
    /// pipelined request that arrived with the previous one) are returned although the
    /// socket has nothing new, which is why a waiting connection tries this before it
    /// waits on the socket.
    fn read_now(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        // A waker that does nothing: the caller registers its own with
        // `poll_socket_ready` after a `WouldBlock`, replacing this one.
        let mut cx = Context::from_waker(Waker::noop());
        match std::pin::pin!(self.read_buf(buf)).poll(&mut cx) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// ALPN chose HTTP/1.1 already (not asked: [`ClientStream::TLS`] tells).
    fn sniff_h2(&self, _limit: Duration) -> impl Future<Output = Option<bool>> + Send + '_ {
        std::future::ready(Some(false))
    }

    /// Sends close_notify (and the records still held), within a short time: a client
    /// that stopped reading does not hold the connection open.
    async fn finish(&mut self) {
        let _ = tokio::time::timeout(FINISH_LIMIT, self.shutdown()).await;
    }
}
