//! One HTTP request: choose the list (Conditional sets), pick a backend, forward the request
//! and stream the response back.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use hyper::body::{Body, Incoming};
use hyper::header::{HOST, HeaderName, HeaderValue, SET_COOKIE};
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode, Uri, Version};
use tokio::time::Instant;

use super::balance::LiveError;
use super::body::{ProxyBody, RequestBody, Upstream, UpstreamBody};
use super::h1::backend::{Exchange, ExchangeError};
use super::headers;
use super::responses;
use super::retry::{self, Failure, Tries};
use super::runtime::VsRuntime;
use crate::config::{HeaderLimits, Persistence};

/// Serves one request of an HTTP vService. Never fails: every problem becomes a response.
/// Its duration is counted when a local answer is made, or when a backend's body ends.
pub(crate) async fn handle(
    rt: Arc<VsRuntime>,
    peer: SocketAddr,
    tls: bool,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let started = Instant::now();
    let counters = rt.counters.clone();
    let resp = answer(rt, peer, tls, req, started).await;
    if matches!(resp.body(), ProxyBody::Local(_)) {
        counters.observe_request(started.elapsed());
    }
    resp
}

/// [`handle`] without the timing of local answers.
async fn answer(
    rt: Arc<VsRuntime>,
    peer: SocketAddr,
    tls: bool,
    req: Request<Incoming>,
    started: Instant,
) -> Response<ProxyBody> {
    rt.counters.count_request();
    let settings = rt.settings.load_full();
    if let Some(status) = over_limits(&req, settings.header_limits) {
        rt.counters.count_bad_request();
        return responses::status(status);
    }
    let client = peer.ip().to_canonical();
    let cookie_cfg = match &settings.l7.persistence {
        Persistence::Cookie(c) => Some(c),
        _ => None,
    };
    let pin_key = cookie_cfg
        .and_then(|c| headers::cookie(req.headers(), &c.name))
        .map(str::to_owned);
    let pin_key = pin_key.as_deref();
    let set = settings.conditions.pick(&req, client);
    let acquire = rt.acquire(&settings, set, client, pin_key);
    let mut lease = match acquire.await {
        Ok(lease) => Arc::new(lease),
        Err(error) => {
            tracing::debug!(vservice = %rt.name, %error, "503");
            rt.counters.count_unavailable();
            return responses::unavailable(&settings.l7);
        }
    };
    let Some(upstream) = settings.upstream.clone() else {
        return responses::status(StatusCode::INTERNAL_SERVER_ERROR);
    };
    let forwarded = settings.l7.forwarded_headers.then_some((client, tls));
    let (parts, body) = req.into_parts();
    // A request without a body can be sent again whole: after a failed connect to another
    // server whatever its method, after a failure once sent only when idempotent (S-RT1).
    // One with a body streams into its first try and is not retried.
    let mut body = (!body.is_end_stream()).then_some(body);
    let resendable = body.is_none();
    let idempotent = retry::idempotent(parts.method.as_str());
    let mut tries = Tries::new(&rt, settings.l7.retry);
    let server_timeout = settings.l7.timeouts.server;
    // Without a body, the request goes the HTTP/1.1 path's way (`h1::backend`): its head is
    // the same for every try.
    let direct_head = if resendable {
        match direct_head(&parts, forwarded) {
            Some(head) => Some(head),
            None => return responses::status(StatusCode::BAD_REQUEST),
        }
    } else {
        None
    };
    let resp = loop {
        let failure = if let Some(head) = &direct_head {
            let exchange = Exchange {
                lease: &lease,
                connect: settings.l7.timeouts.connect,
                server: server_timeout,
                keep_alive: settings.l7.timeouts.keep_alive,
                connect_time: &settings.connect_time,
                head_request: parts.method == Method::HEAD,
            };
            match exchange.send(head).await {
                Ok(resp) => break resp.map(Upstream::Direct),
                Err(ExchangeError::Failed(failure)) => {
                    tracing::debug!(vservice = %rt.name, backend = lease.backend(), ?failure, "no answer");
                    failure
                }
                Err(ExchangeError::BadAnswer) => {
                    tracing::debug!(vservice = %rt.name, backend = lease.backend(), "502: invalid response head");
                    lease.fail(LiveError::BadAnswer);
                    return responses::status(StatusCode::BAD_GATEWAY);
                }
            }
        } else {
            let body = RequestBody::new(body.take(), lease.clone());
            let Some(req) = to_upstream(&parts, body, lease.addr(), forwarded) else {
                return responses::status(StatusCode::BAD_REQUEST);
            };
            match tokio::time::timeout(server_timeout, upstream.request(req)).await {
                Ok(Ok(resp)) => break resp.map(Upstream::Hyper),
                Ok(Err(error)) => {
                    tracing::debug!(vservice = %rt.name, backend = lease.backend(), %error, "no answer");
                    if error.is_connect() {
                        Failure::Connect
                    } else {
                        Failure::EmptyResponse
                    }
                }
                Err(_) => {
                    tracing::debug!(vservice = %rt.name, backend = lease.backend(), "no answer within the server timeout");
                    Failure::ResponseTimeout
                }
            }
        };
        lease.fail(failure.into());
        let replayable = resendable && (failure == Failure::Connect || idempotent);
        if resendable
            && tries.again(failure, &lease, replayable)
            && let Ok(other) = rt
                .acquire_other(&settings, set, client, pin_key, tries.failed())
                .await
        {
            tries.count(&lease);
            lease = Arc::new(other);
            continue;
        }
        if failure == Failure::ResponseTimeout {
            rt.counters.count_server_timeout();
            return responses::status(StatusCode::GATEWAY_TIMEOUT);
        }
        return responses::status(StatusCode::BAD_GATEWAY);
    };
    drop(tries);
    lease.answered(resp.status().as_u16());
    let set_cookie = cookie_cfg
        .zip(lease.set_cookie())
        .and_then(|(c, value)| headers::set_cookie(c, value));
    let (mut parts, body) = resp.into_parts();
    headers::strip_hop_by_hop(&mut parts.headers);
    if let Some(value) = set_cookie {
        parts.headers.append(SET_COOKIE, value);
    }
    let body = UpstreamBody::new(body, lease, rt.counters.clone(), server_timeout, started);
    Response::from_parts(parts, ProxyBody::Upstream(body))
}

/// The request as sent to `backend` over HTTP/1.1: absolute URI to the backend, Host kept
/// (taken from the HTTP/2 authority if there is no Host header), hop-by-hop headers removed,
/// X-Forwarded-For/-Proto added when `forwarded` is set. Built from the client's request
/// head each try. None if the URI cannot be rebuilt.
fn to_upstream(
    client: &Parts,
    body: RequestBody,
    backend: SocketAddr,
    forwarded: Option<(IpAddr, bool)>,
) -> Option<Request<RequestBody>> {
    let path = client.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut req = Request::new(body);
    *req.method_mut() = client.method.clone();
    *req.uri_mut() = Uri::try_from(format!("http://{backend}{path}")).ok()?;
    *req.version_mut() = Version::HTTP_11;
    let headers = req.headers_mut();
    *headers = client.headers.clone();
    headers::strip_hop_by_hop(headers);
    if !headers.contains_key(HOST) {
        let host = client.uri.authority().map(|a| a.as_str());
        if let Some(value) = host.and_then(|h| HeaderValue::from_str(h).ok()) {
            headers.insert(HOST, value);
        }
    }
    if let Some((client, tls)) = forwarded {
        headers::add_forwarded(headers, client, tls);
    }
    Some(req)
}

/// The HTTP/1.1 head of a request without a body, as the HTTP/1.1 path writes one and with
/// the headers of [`to_upstream`], written straight from the client's header map (no copy
/// of it): origin-form target, hop-by-hop headers left out, Host from the authority when
/// there is none, X-Forwarded-For appended to and X-Forwarded-Proto set when `forwarded` is.
/// None if the target is not in origin form.
fn direct_head(client: &Parts, forwarded: Option<(IpAddr, bool)>) -> Option<Vec<u8>> {
    use std::io::Write as _;
    let path = client.uri.path_and_query().map_or("/", |p| p.as_str());
    if !path.starts_with('/') && path != "*" {
        return None;
    }
    let xff = HeaderName::from_static("x-forwarded-for");
    let xfp = HeaderName::from_static("x-forwarded-proto");
    // Names a Connection header lists travel no further (HTTP/2 forbids the header; a
    // request that has one anyway is served right, only slower).
    let named: Vec<HeaderName> = client
        .headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(client.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut has_host = false;
    for (name, value) in &client.headers {
        if headers::is_hop_by_hop(name)
            || named.contains(name)
            || (forwarded.is_some() && (name == xff || name == xfp))
        {
            continue;
        }
        has_host |= name == HOST;
        header_line(&mut out, name.as_str().as_bytes(), value.as_bytes());
    }
    if !has_host && let Some(authority) = client.uri.authority() {
        header_line(&mut out, b"host", authority.as_str().as_bytes());
    }
    if let Some((ip, tls)) = forwarded {
        out.extend_from_slice(b"x-forwarded-for: ");
        for prior in client.headers.get_all(&xff) {
            out.extend_from_slice(prior.as_bytes());
            out.extend_from_slice(b", ");
        }
        let _ = write!(out, "{}", ip.to_canonical());
        out.extend_from_slice(if tls {
            b"\r\nx-forwarded-proto: https\r\n"
        } else {
            b"\r\nx-forwarded-proto: http\r\n"
        });
    }
    out.extend_from_slice(b"\r\n");
    Some(out)
}

fn header_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The answer to an HTTP/2 request with a line over
/// `[proxy] max_header_line_bytes`: 414 for the target, 431 for a header. The whole head's
/// limit is enforced by hyper while reading it.
fn over_limits(req: &Request<Incoming>, limits: HeaderLimits) -> Option<StatusCode> {
    let target = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if !limits.request_line_fits(req.method().as_str().len(), target) {
        return Some(StatusCode::URI_TOO_LONG);
    }
    let fits = |(name, value): (&HeaderName, &HeaderValue)| {
        limits.header_line_fits(name.as_str().len(), value.len())
    };
    (!req.headers().iter().all(fits)).then_some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_h2_request_without_a_body_gets_the_http1_paths_head() {
        let req = Request::get("https://a.test/p?q=1")
            .header("te", "trailers")
            .header("x-forwarded-for", "10.0.0.1")
            .header("x-forwarded-proto", "gopher")
            .header("accept", "*/*")
            .body(())
            .expect("request");
        let (parts, ()) = req.into_parts();
        let client = Some(("192.0.2.7".parse().expect("ip"), true));
        let head = direct_head(&parts, client).expect("origin form");
        assert_eq!(
            String::from_utf8_lossy(&head),
            "GET /p?q=1 HTTP/1.1\r\naccept: */*\r\nhost: a.test\r\n\
             x-forwarded-for: 10.0.0.1, 192.0.2.7\r\nx-forwarded-proto: https\r\n\r\n"
        );
        let head = direct_head(&parts, None).expect("origin form");
        assert_eq!(
            String::from_utf8_lossy(&head),
            "GET /p?q=1 HTTP/1.1\r\nx-forwarded-for: 10.0.0.1\r\nx-forwarded-proto: gopher\r\n\
             accept: */*\r\nhost: a.test\r\n\r\n"
        );
    }
}
