//! Socket reads and writes with deadlines, and streaming one framed body from a socket to
//! another without buffering it whole.

use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, timeout, timeout_at};

use super::chunked::Chunked;
use super::head::Framing;

/// Bytes asked of the kernel per read of a body or a response.
const READ_SIZE: usize = 16 * 1024;
/// Room made per read of a request head: most heads fit in one read, and a client that
/// trickles its head (slowloris) holds this much, not a body-sized buffer; a longer head
/// grows the buffer up to the header limits.
pub(crate) const HEAD_READ: usize = 2 * 1024;
/// Body bytes up to this size ride in the same write as the head before them.
const COALESCE: usize = 16 * 1024;

/// Why a read gave nothing.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The peer closed (end of stream).
    Closed,
    /// The deadline passed.
    TimedOut,
    /// The socket failed (reset, ...).
    Io(std::io::Error),
    /// The client left while the read from its backend was awaited.
    Cancelled,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Closed => f.write_str("connection closed"),
            ReadError::TimedOut => f.write_str("timed out"),
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Cancelled => f.write_str("client left"),
        }
    }
}

/// Reads more bytes into `buf` before `deadline`.
pub(crate) async fn fill<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    deadline: Instant,
) -> Result<usize, ReadError> {
    buf.reserve(READ_SIZE);
    match timeout_at(deadline, stream.read_buf(buf)).await {
        Ok(Ok(0)) => Err(ReadError::Closed),
        Ok(Ok(n)) => Ok(n),
        Ok(Err(e)) => Err(ReadError::Io(e)),
        Err(_) => Err(ReadError::TimedOut),
    }
}

/// Reads more bytes of a request head into `buf` before `deadline`, making room for
/// [`HEAD_READ`] bytes at a time (not a body-sized read: a client that trickles its head
/// holds little).
pub(crate) async fn fill_head<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    deadline: Instant,
) -> Result<usize, ReadError> {
    buf.reserve(HEAD_READ);
    match timeout_at(deadline, stream.read_buf(buf)).await {
        Ok(Ok(0)) => Err(ReadError::Closed),
        Ok(Ok(n)) => Ok(n),
        Ok(Err(e)) => Err(ReadError::Io(e)),
        Err(_) => Err(ReadError::TimedOut),
    }
}

/// Writes all of `bytes` within `limit`; false when the peer is gone or too slow. Flushed:
/// a TLS stream holds written bytes in its session until then (a no-op on a socket).
pub(crate) async fn send<S: AsyncWrite + Unpin>(
    stream: &mut S,
    bytes: &[u8],
    limit: Duration,
) -> bool {
    let write = async {
        stream.write_all(bytes).await?;
        stream.flush().await
    };
    matches!(timeout(limit, write).await, Ok(Ok(())))
}

/// How a body copy failed, and on which side.
#[derive(Debug)]
pub(crate) enum CopyError {
    /// The sending side closed, failed or fell silent before the body ended, or broke the
    /// chunked coding.
    Source(&'static str),
    /// The receiving side could not take the bytes.
    Sink,
}

/// One body on its way from `src` to `dst`.
pub(crate) struct BodyCopy {
    /// How the body is delimited on `src`.
    pub framing: Framing,
    /// Pass only the payload of a chunked body (for a receiver that cannot take chunked; the
    /// end is then marked by closing).
    pub dechunk: bool,
    /// Silence allowed from `src` between reads.
    pub src_idle: Duration,
    /// Time allowed for each write to `dst`.
    pub dst_limit: Duration,
}

impl BodyCopy {
    /// Copies the body, taking first what `sbuf` already holds and leaving in it whatever
    /// follows the body (a pipelined request). `pending` holds bytes to write before the
    /// body (a head): small bodies ride in the same write. Returns the body bytes copied.
    pub(crate) async fn run<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
        &self,
        src: &mut R,
        sbuf: &mut BytesMut,
        dst: &mut W,
        pending: &mut Vec<u8>,
    ) -> Result<u64, CopyError> {
        let mut left = match self.framing {
            Framing::Length(n) => n,
            _ => 0,
        };
        let mut chunked = Chunked::default();
        let mut total = 0u64;
        loop {
            let (take, done) = match self.framing {
                Framing::Length(_) => {
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(sbuf.len());
                    left -= take as u64;
                    (take, left == 0)
                }
                Framing::UntilClose => (sbuf.len(), false),
                Framing::Chunked => {
                    let dechunk = self.dechunk;
                    let mut payload = |p: &[u8]| {
                        if dechunk {
                            pending.extend_from_slice(p);
                        }
                    };
                    let n = chunked
                        .feed(sbuf, &mut payload)
                        .map_err(|_| CopyError::Source("invalid chunked encoding"))?;
                    (n, chunked.is_done())
                }
            };
            let raw = &sbuf[..take];
            if !(self.framing == Framing::Chunked && self.dechunk) {
                if raw.len() <= COALESCE {
                    pending.extend_from_slice(raw);
                } else {
                    self.flush(dst, pending).await?;
                    if !send(dst, raw, self.dst_limit).await {
                        return Err(CopyError::Sink);
                    }
                }
            }
            total += take as u64;
            sbuf.advance(take);
            if done {
                self.flush(dst, pending).await?;
                return Ok(total);
            }
            // Stream what we have before waiting for more.
            self.flush(dst, pending).await?;
            match fill(src, sbuf, Instant::now() + self.src_idle).await {
                Ok(_) => {}
                Err(ReadError::Closed) if self.framing == Framing::UntilClose => return Ok(total),
                Err(ReadError::Closed) => return Err(CopyError::Source("closed before the end")),
                Err(ReadError::TimedOut) => return Err(CopyError::Source("silent too long")),
                Err(ReadError::Io(_) | ReadError::Cancelled) => {
                    return Err(CopyError::Source("connection failed"));
                }
            }
        }
    }

    async fn flush<W: AsyncWrite + Unpin>(
        &self,
        dst: &mut W,
        pending: &mut Vec<u8>,
    ) -> Result<(), CopyError> {
        if pending.is_empty() {
            return Ok(());
        }
        let ok = send(dst, pending, self.dst_limit).await;
        pending.clear();
        if ok { Ok(()) } else { Err(CopyError::Sink) }
    }
}
