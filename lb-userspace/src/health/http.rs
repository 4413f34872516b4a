//! HTTP and HTTPS checks (S-HC2): a minimal HTTP/1.1 request written by hand, the status line
//! compared with the expected codes, and optionally a bounded body searched for a substring.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, timeout_at};

use crate::config::HttpCheck;

use super::http_response::read_response;
use super::probe::{BoxFuture, Probe, ProbeResult};
use super::tcp::{connect, describe_io};
use super::tls;

/// Checks one backend over HTTP or HTTPS.
#[derive(Clone, Debug)]
pub struct HttpProbe {
    addr: SocketAddr,
    /// Socket mark (0: none).
    mark: u32,
    check: HttpCheck,
    timeout: Duration,
    tls: bool,
    /// The request bytes, built once; an error names the invalid field.
    request: Result<Vec<u8>, String>,
}

impl HttpProbe {
    /// A plain HTTP probe.
    pub fn plain(addr: SocketAddr, check: HttpCheck, timeout: Duration) -> Self {
        Self::new(addr, check, timeout, false)
    }

    /// An HTTPS probe; certificates are verified only when `check.verify_tls` is set.
    pub fn tls(addr: SocketAddr, check: HttpCheck, timeout: Duration) -> Self {
        Self::new(addr, check, timeout, true)
    }

    fn new(addr: SocketAddr, check: HttpCheck, timeout: Duration, tls: bool) -> Self {
        let default_port = if tls { 443 } else { 80 };
        let request = build_request(&check, addr, default_port);
        Self {
            addr,
            mark: 0,
            check,
            timeout,
            tls,
            request,
        }
    }

    /// The same probe with its connections marked `mark` (a check through a tunnel, S-TN4).
    pub fn with_mark(mut self, mark: u32) -> Self {
        self.mark = mark;
        self
    }

    async fn run(&self) -> ProbeResult {
        let start = Instant::now();
        let deadline = start + self.timeout;
        let outcome = match &self.request {
            Err(reason) => Err(reason.clone()),
            Ok(request) => self.exchange_once(request, deadline).await,
        };
        match outcome {
            Ok(reason) => ProbeResult::success(reason, start.elapsed()),
            Err(reason) => ProbeResult::failure(reason, start.elapsed()),
        }
    }

    async fn exchange_once(&self, request: &[u8], deadline: Instant) -> Result<String, String> {
        if self.addr.port() == 0 {
            return Err("HTTP check needs a port; the service has port 0".to_string());
        }
        let tcp = connect(self.addr, self.mark, deadline).await?;
        if !self.tls {
            return exchange(tcp, request, &self.check, deadline).await;
        }
        let connector = tls::connector(self.check.verify_tls)?;
        let name = tls::server_name(self.check.host.as_deref(), self.addr.ip());
        let stream = match timeout_at(deadline, connector.connect(name, tcp)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(describe_io("TLS handshake", &e)),
            Err(_) => return Err("TLS handshake: no answer before the timeout".to_string()),
        };
        exchange(stream, request, &self.check, deadline).await
    }
}

impl Probe for HttpProbe {
    fn check(&self) -> BoxFuture<'_, ProbeResult> {
        Box::pin(self.run())
    }
}

/// Sends `request` and judges the response; generic so HTTP and HTTPS share it.
async fn exchange<S>(
    mut stream: S,
    request: &[u8],
    check: &HttpCheck,
    deadline: Instant,
) -> Result<String, String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match timeout_at(deadline, stream.write_all(request)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(describe_io("send request", &e)),
        Err(_) => return Err("send request: blocked until the timeout".to_string()),
    }
    read_response(&mut stream, check, deadline).await
}

/// Builds `METHOD path HTTP/1.1` with Host and `Connection: close`, refusing fields that
/// would break the request line (a validated config never has them, but this is cheap).
pub(crate) fn build_request(
    check: &HttpCheck,
    addr: SocketAddr,
    default_port: u16,
) -> Result<Vec<u8>, String> {
    let method_ok = !check.method.is_empty()
        && check
            .method
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !method_ok {
        return Err(format!("invalid request: method {:?}", check.method));
    }
    if !check.path.starts_with('/') || check.path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(format!("invalid request: path {:?}", check.path));
    }
    let host = match &check.host {
        Some(h) if h.bytes().any(|b| b < b' ' || b == 0x7f) || h.is_empty() => {
            return Err(format!("invalid request: host {h:?}"));
        }
        Some(h) => h.clone(),
        None => default_host(addr, default_port),
    };
    let text = format!(
        "{} {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: lb-health/{}\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        check.method,
        check.path,
        env!("CARGO_PKG_VERSION"),
    );
    Ok(text.into_bytes())
}

/// The Host header for a backend without a configured one: its address, bracketed for IPv6,
/// with the port unless it is the scheme's default.
fn default_host(addr: SocketAddr, default_port: u16) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    };
    if addr.port() == default_port {
        ip
    } else {
        format!("{ip}:{}", addr.port())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check() -> HttpCheck {
        HttpCheck {
            method: "GET".into(),
            path: "/health".into(),
            host: None,
            expect_status: vec![200],
            body_contains: None,
            verify_tls: false,
        }
    }

    // S-HC2: the request is a minimal HTTP/1.1 request with Host and Connection: close.
    #[test]
    fn s_hc2_request_has_host_and_connection_close() {
        let addr: SocketAddr = "10.0.0.1:8080".parse().unwrap();
        let req = String::from_utf8(build_request(&check(), addr, 80).unwrap()).unwrap();
        assert!(req.starts_with("GET /health HTTP/1.1\r\n"));
        assert!(req.contains("\r\nHost: 10.0.0.1:8080\r\n"));
        assert!(req.contains("\r\nConnection: close\r\n"));
        assert!(req.ends_with("\r\n\r\n"));
    }

    #[test]
    fn s_hc2_ipv6_host_is_bracketed_and_default_port_omitted() {
        let addr: SocketAddr = "[fd00::1]:443".parse().unwrap();
        let req = String::from_utf8(build_request(&check(), addr, 443).unwrap()).unwrap();
        assert!(req.contains("\r\nHost: [fd00::1]\r\n"));
    }

    #[test]
    fn s_hc2_fields_that_break_the_request_are_refused() {
        let addr: SocketAddr = "127.0.0.1:80".parse().unwrap();
        let mut bad = check();
        bad.path = "/a b".into();
        assert!(build_request(&bad, addr, 80).unwrap_err().contains("path"));
        let mut bad = check();
        bad.method = "GET\r\nX".into();
        assert!(
            build_request(&bad, addr, 80)
                .unwrap_err()
                .contains("method")
        );
        let mut bad = check();
        bad.host = Some("a\r\nb".into());
        assert!(build_request(&bad, addr, 80).unwrap_err().contains("host"));
    }
}
