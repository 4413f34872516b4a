//! The pooled HTTP/1.1 client towards backends (keep-alive connections reused across requests).

use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::body::RequestBody;
use crate::config::Timeouts;

/// Connects to a backend within `limit`, with Nagle off (requests and answers are written
/// whole; waiting to coalesce them would only add latency).
pub(crate) async fn connect_backend(
    addr: std::net::SocketAddr,
    limit: std::time::Duration,
) -> std::io::Result<tokio::net::TcpStream> {
    let stream = tokio::time::timeout(limit, tokio::net::TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// One vService's upstream client; cheap to clone (shares the pool).
pub(crate) type Upstream = Client<HttpConnector, RequestBody>;

/// A client whose connect timeout is `timeouts.connect` and whose idle pooled connections
/// close after `timeouts.keep_alive`.
pub(crate) fn new_upstream(timeouts: &Timeouts) -> Upstream {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(timeouts.connect));
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(timeouts.keep_alive)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(connector)
}
