//! A small JSON client for the REST API, used by the CLI and by cluster pushes to peers.
//!
//! It reaches the API the three ways the daemon serves it: `http://HOST:PORT`,
//! `https://HOST:PORT` (the server verified against a CA file or the system's trust store,
//! with a client certificate for mutual TLS), and `unix:/PATH` (the local socket, where no
//! token is needed). Each call opens its own connection: the CLI makes a few calls and a push
//! one per peer, so there is nothing worth pooling.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Method;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;

/// How the client verifies an `https://` API and proves itself to it.
pub use crate::config::ClientTls;

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The URL could not be used.
    #[error("bad URL `{0}`")]
    Url(String),
    /// Connecting, sending or receiving failed.
    #[error("{url}: {message}")]
    Transport {
        /// The request URL.
        url: String,
        /// What failed.
        message: String,
    },
    /// No complete answer within the timeout.
    #[error("{0}: no answer within {1:?}")]
    Timeout(String, Duration),
    /// The CA file or the client certificate could not be used, so no request was sent.
    #[error("TLS settings of the API client: {0}")]
    Tls(String),
}

/// An answer: its status and its body (JSON, or the text as a JSON string).
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status code.
    pub status: u16,
    /// The body.
    pub body: Value,
}

impl Answer {
    /// True for 2xx.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The `error` field of an error answer, or the status.
    pub fn error_text(&self) -> String {
        self.body.get("error").and_then(Value::as_str).map_or_else(
            || format!("HTTP {}", self.status),
            |e| format!("HTTP {}: {e}", self.status),
        )
    }
}

/// Where the API is.
#[derive(Clone, Debug)]
enum Target {
    /// `http://` or `https://`: `authority` is `host:port` (what is connected to and sent as
    /// `Host`), `host` the name or address the certificate must carry.
    Tcp {
        authority: String,
        host: String,
        tls: bool,
    },
    /// `unix:/path`.
    Unix(PathBuf),
}

/// A client bound to one API base URL (`http://host:port`, `https://host:port` or
/// `unix:/path`) and its token.
#[derive(Clone)]
pub struct ApiClient {
    base: String,
    target: Result<Target, String>,
    /// Path prefix of the base URL (usually empty).
    prefix: String,
    token: Option<String>,
    timeout: Duration,
    /// The TLS client settings of an `https://` base, or why they cannot be used.
    tls: Option<Result<TlsConnector, String>>,
}

impl ApiClient {
    /// A client for `base` that sends `token` as a bearer token when given; an `https://`
    /// API is verified against the system's trust store.
    pub fn new(base: &str, token: Option<String>, timeout: Duration) -> ApiClient {
        ApiClient::with_tls(base, token, timeout, &ClientTls::default())
    }

    /// [`ApiClient::new`] with the CA file and client certificate of `tls` for an
    /// `https://` base (ignored otherwise). Files that cannot be used make every call fail
    /// with [`ClientError::Tls`], naming the file.
    pub fn with_tls(
        base: &str,
        token: Option<String>,
        timeout: Duration,
        tls: &ClientTls,
    ) -> ApiClient {
        let base = base.trim_end_matches('/').to_string();
        let parsed = parse(&base);
        let tls_wanted = matches!(parsed, Ok((Target::Tcp { tls: true, .. }, _)));
        let tls = tls_wanted.then(|| {
            tls.client_config()
                .map(TlsConnector::from)
                .map_err(|e| e.to_string())
        });
        let (target, prefix) = match parsed {
            Ok((target, prefix)) => (Ok(target), prefix),
            Err(()) => (Err(base.clone()), String::new()),
        };
        ApiClient {
            base,
            target,
            prefix,
            token,
            timeout,
            tls,
        }
    }

    /// Sends one request with an optional JSON body and reads the whole answer.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, ClientError> {
        let target = self
            .target
            .as_ref()
            .map_err(|b| ClientError::Url(b.clone()))?;
        let url = match target {
            Target::Tcp { .. } => format!("{}{}", self.base, path),
            Target::Unix(_) => format!("{path} on {}", self.base),
        };
        let connector = match &self.tls {
            Some(Ok(connector)) => Some(connector.clone()),
            Some(Err(e)) => return Err(ClientError::Tls(e.clone())),
            None => None,
        };
        let host = match target {
            Target::Tcp { authority, .. } => authority.as_str(),
            Target::Unix(_) => "localhost",
        };
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{}", self.prefix, path))
            .header(HOST, host);
        if let Some(t) = &self.token {
            req = req.header(AUTHORIZATION, format!("Bearer {t}"));
        }
        let payload = match body {
            Some(v) => {
                req = req.header(CONTENT_TYPE, "application/json");
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        let req = req
            .body(Full::new(payload))
            .map_err(|_| ClientError::Url(url.clone()))?;
        let transport = |e: &dyn std::fmt::Display| ClientError::Transport {
            url: url.clone(),
            message: e.to_string(),
        };
        let exchange = async {
            let io = connect(target, connector)
                .await
                .map_err(|e| transport(&e))?;
            let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
                .await
                .map_err(|e| transport(&chain(&e)))?;
            let driving = tokio::spawn(connection);
            let resp = sender
                .send_request(req)
                .await
                .map_err(|e| transport(&chain(&e)))?;
            let status = resp.status().as_u16();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| transport(&e))?
                .to_bytes();
            driving.abort();
            let body = serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
            Ok(Answer { status, body })
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| ClientError::Timeout(url.clone(), self.timeout))?
    }
}

/// What a connection to the API is read and written through.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Opens a connection to `target`, with a TLS handshake through `tls` when it has one.
async fn connect(target: &Target, tls: Option<TlsConnector>) -> Result<Box<dyn Io>, String> {
    match target {
        Target::Unix(path) => tokio::net::UnixStream::connect(path)
            .await
            .map(|s| Box::new(s) as Box<dyn Io>)
            .map_err(|e| format!("connecting to {}: {e}", path.display())),
        Target::Tcp {
            authority, host, ..
        } => {
            let tcp = tokio::net::TcpStream::connect(authority.as_str())
                .await
                .map_err(|e| format!("connecting to {authority}: {e}"))?;
            let Some(tls) = tls else {
                return Ok(Box::new(tcp));
            };
            let name = ServerName::try_from(host.clone())
                .map_err(|e| format!("`{host}` cannot be verified by TLS: {e}"))?;
            let stream = tls
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS handshake with {authority}: {e}"))?;
            Ok(Box::new(stream))
        }
    }
}

/// An error with its sources, one after the other.
fn chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg = format!("{msg}: {s}");
        src = s.source();
    }
    msg
}

/// Reads a base URL: the target and the path prefix after the authority.
fn parse(base: &str) -> Result<(Target, String), ()> {
    if let Some(path) = base.strip_prefix("unix:") {
        let path = path.strip_prefix("//").unwrap_or(path);
        if path.is_empty() {
            return Err(());
        }
        return Ok((Target::Unix(PathBuf::from(path)), String::new()));
    }
    let (rest, tls, port) = match base.split_once("://") {
        Some(("http", rest)) => (rest, false, 80),
        Some(("https", rest)) => (rest, true, 443),
        _ => return Err(()),
    };
    let (authority, prefix) = match rest.find('/') {
        Some(at) => (&rest[..at], rest[at..].to_string()),
        None => (rest, String::new()),
    };
    // `[v6]:port`, `[v6]`, `host:port` or `host`.
    let (host, explicit_port) = match authority.rfind(']') {
        Some(end) if authority.starts_with('[') => {
            let port = authority[end + 1..].strip_prefix(':');
            (&authority[1..end], port)
        }
        _ => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let port = match explicit_port {
        Some(p) => p.parse::<u16>().map_err(|_| ())?,
        None => port,
    };
    if host.is_empty() {
        return Err(());
    }
    let authority = match host.contains(':') {
        true => format!("[{host}]:{port}"),
        false => format!("{host}:{port}"),
    };
    Ok((
        Target::Tcp {
            authority,
            host: host.to_string(),
            tls,
        },
        prefix,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(base: &str) -> (String, String, bool, String) {
        match parse(base) {
            Ok((
                Target::Tcp {
                    authority,
                    host,
                    tls,
                },
                prefix,
            )) => (authority, host, tls, prefix),
            other => panic!("{base}: {other:?}"),
        }
    }

    #[test]
    fn base_urls_of_each_transport() {
        assert_eq!(
            tcp("http://127.0.0.1:9180"),
            (
                "127.0.0.1:9180".into(),
                "127.0.0.1".into(),
                false,
                "".into()
            )
        );
        assert_eq!(
            tcp("https://lb1.example"),
            (
                "lb1.example:443".into(),
                "lb1.example".into(),
                true,
                "".into()
            )
        );
        assert_eq!(
            tcp("https://[::1]:9443/base"),
            ("[::1]:9443".into(), "::1".into(), true, "/base".into())
        );
        assert!(matches!(
            parse("unix:/run/lb/api.sock"),
            Ok((Target::Unix(p), _)) if p == std::path::Path::new("/run/lb/api.sock")
        ));
        assert!(matches!(
            parse("unix:///run/lb/api.sock"),
            Ok((Target::Unix(p), _)) if p == std::path::Path::new("/run/lb/api.sock")
        ));
        for bad in [
            "127.0.0.1:9180",
            "ftp://x:1",
            "http://:9180",
            "http://h:port",
            "unix:",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    /// A missing CA file is said on the first call, naming the file, before any connection.
    #[tokio::test]
    async fn unusable_tls_files_fail_every_call() {
        let tls = ClientTls {
            ca: Some("/nonexistent/ca.pem".into()),
            identity: None,
        };
        let client = ApiClient::with_tls("https://127.0.0.1:1", None, Duration::from_secs(1), &tls);
        let e = client.call(Method::GET, "/", None).await.unwrap_err();
        assert!(matches!(e, ClientError::Tls(_)), "{e}");
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    }
}
