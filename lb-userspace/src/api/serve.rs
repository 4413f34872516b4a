//! The API's two ways in: the TCP listener, over TLS when `[api]` has a certificate, and the
//! Unix socket for local tools, whose file permissions are its access control.
//!
//! TLS handshakes run in tasks of their own, so a client that stalls in its handshake holds
//! up nobody; the handshaken streams are handed to axum like plain ones.

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::task::JoinSet;
use tracing::{info, warn};

use super::tls::{Handshake, ServerTls};
use crate::config::ApiSocket;

/// How long a client may take to complete its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to the TCP listener: plain, or TLS once handshaken.
pub(crate) enum ApiStream {
    /// Plain HTTP (`[api]` without `cert`).
    Plain(TcpStream),
    /// HTTP over TLS.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl AsyncRead for ApiStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ApiStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ApiStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ApiStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ApiStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            ApiStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ApiStream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ApiStream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ApiStream::Plain(s) => s.is_write_vectored(),
            ApiStream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ApiStream::Plain(s) => Pin::new(s).poll_flush(cx),
            ApiStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ApiStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            ApiStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The TCP listener as axum sees it: accepted connections come out plain or handshaken,
/// as the running configuration says at the moment each is accepted.
pub(crate) struct TcpApiListener {
    tcp: TcpListener,
    tls: Arc<ServerTls>,
    handshakes: JoinSet<Option<(ApiStream, std::net::SocketAddr)>>,
}

impl TcpApiListener {
    /// Serves `tcp` with the TLS settings `tls` follows.
    pub(crate) fn new(tcp: TcpListener, tls: Arc<ServerTls>) -> TcpApiListener {
        TcpApiListener {
            tcp,
            tls,
            handshakes: JoinSet::new(),
        }
    }
}

impl axum::serve::Listener for TcpApiListener {
    type Io = ApiStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (ApiStream, std::net::SocketAddr) {
        loop {
            tokio::select! {
                accepted = self.tcp.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(accepted) => accepted,
                        Err(e) => {
                            // Out of descriptors and the like: wait rather than spin.
                            warn!("the API listener could not accept: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    match self.tls.handshake() {
                        Handshake::Plain => return (ApiStream::Plain(stream), peer),
                        Handshake::Tls(acceptor) => {
                            self.handshakes.spawn(async move {
                                let done =
                                    tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
                                match done.await {
                                    Ok(Ok(tls)) => Some((ApiStream::Tls(Box::new(tls)), peer)),
                                    Ok(Err(e)) => {
                                        info!(%peer, "API connection refused at the TLS handshake: {e}");
                                        None
                                    }
                                    Err(_) => {
                                        info!(%peer, "API connection dropped: no TLS handshake within {HANDSHAKE_TIMEOUT:?}");
                                        None
                                    }
                                }
                            });
                        }
                        Handshake::Refuse => {
                            warn!(%peer, "API connection refused: its TLS files could not be read");
                        }
                    }
                }
                Some(done) = self.handshakes.join_next() => {
                    if let Ok(Some(ready)) = done {
                        return ready;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.tcp.local_addr()
    }
}

/// The API's Unix socket file, made by this process. Dropping it removes the file only
/// while the path still names this socket: after an upgrade the new `lb run` has put its
/// own there, which must stay.
pub struct LocalSocket {
    listener: Option<UnixListener>,
    path: PathBuf,
    /// Device and inode of the socket file this process made.
    made: (u64, u64),
}

impl LocalSocket {
    /// The listener, taken once to be served.
    pub(crate) fn take(&mut self) -> Option<UnixListener> {
        self.listener.take()
    }

    /// Where the socket is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LocalSocket {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|meta| (meta.dev(), meta.ino()) == self.made);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Makes the socket `socket.path` with mode `socket.mode`, atomically: it is bound under a
/// temporary name beside it, given its mode, then renamed over the path. A client never
/// finds the path missing or with other permissions, and on an upgrade (`lb run --upgrade`)
/// the new process takes the path over while the old one still serves the connections it
/// accepted. The directory is made when missing.
pub fn bind_socket(socket: &ApiSocket) -> anyhow::Result<LocalSocket> {
    let path = &socket.path;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating {} for api.socket", dir.display()))?;
    let name = path
        .file_name()
        .with_context(|| format!("api.socket {} names no file", path.display()))?;
    let temporary = dir.join(format!(
        ".{}.{}.new",
        name.to_string_lossy(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&temporary);
    let listener = std::os::unix::net::UnixListener::bind(&temporary)
        .with_context(|| format!("binding the API socket {}", temporary.display()))?;
    let placed = std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(socket.mode))
        .and_then(|()| std::fs::symlink_metadata(&temporary))
        .and_then(|meta| {
            std::fs::rename(&temporary, path)?;
            Ok((meta.dev(), meta.ino()))
        });
    let made = match placed {
        Ok(made) => made,
        Err(e) => {
            let _ = std::fs::remove_file(&temporary);
            return Err(e).with_context(|| format!("placing the API socket at {}", path.display()));
        }
    };
    listener.set_nonblocking(true).context("the API socket")?;
    let listener = UnixListener::from_std(listener).context("the API socket")?;
    Ok(LocalSocket {
        listener: Some(listener),
        path: path.clone(),
        made,
    })
}
