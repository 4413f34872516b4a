//! One HTTP request: choose the list (Conditional sets), pick a backend, forward the request
//! and stream the response back.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::{HOST, HeaderName, HeaderValue, SET_COOKIE};
use hyper::{Request, Response, StatusCode, Uri, Version};

use super::body::{ProxyBody, RequestBody, UpstreamBody};
use super::headers;
use super::responses;
use super::runtime::VsRuntime;
use crate::config::{HeaderLimits, Persistence};

/// Serves one request of an HTTP vService. Never fails: every problem becomes a response.
pub(crate) async fn handle(
    rt: Arc<VsRuntime>,
    peer: SocketAddr,
    tls: bool,
    req: Request<Incoming>,
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
    let pin_key = cookie_cfg.and_then(|c| headers::cookie(req.headers(), &c.name));
    let set = settings.conditions.pick(&req, client);
    let acquire = rt.acquire(&settings, set, client, pin_key);
    let lease = match acquire.await {
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
    let set_cookie = cookie_cfg
        .zip(lease.set_cookie())
        .and_then(|(c, value)| headers::set_cookie(c, value));
    let forwarded = settings.l7.forwarded_headers.then_some((client, tls));
    let req = match to_upstream(req, lease.addr(), forwarded, lease.clone()) {
        Some(req) => req,
        None => return responses::status(StatusCode::BAD_REQUEST),
    };
    let server_timeout = settings.l7.timeouts.server;
    let resp = match tokio::time::timeout(server_timeout, upstream.request(req)).await {
        Ok(Ok(resp)) => resp,
        Ok(Err(error)) => {
            tracing::debug!(vservice = %rt.name, backend = lease.backend(), %error, "502");
            lease.fail();
            return responses::status(StatusCode::BAD_GATEWAY);
        }
        Err(_) => {
            tracing::debug!(vservice = %rt.name, backend = lease.backend(), "504");
            lease.fail();
            return responses::status(StatusCode::GATEWAY_TIMEOUT);
        }
    };
    let (mut parts, body) = resp.into_parts();
    headers::strip_hop_by_hop(&mut parts.headers);
    if let Some(value) = set_cookie {
        parts.headers.append(SET_COOKIE, value);
    }
    let body = UpstreamBody::new(body, lease, rt.counters.clone(), server_timeout);
    Response::from_parts(parts, ProxyBody::Upstream(body))
}

/// The request as sent to `backend` over HTTP/1.1: absolute URI to the backend, Host kept
/// (taken from the HTTP/2 authority if there is no Host header), hop-by-hop headers removed,
/// X-Forwarded-For/-Proto added when `forwarded` is set. None if the URI cannot be rebuilt.
fn to_upstream(
    req: Request<Incoming>,
    backend: SocketAddr,
    forwarded: Option<(IpAddr, bool)>,
    lease: Arc<super::balance::Lease>,
) -> Option<Request<RequestBody>> {
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let host = parts.uri.authority().map(|a| a.as_str().to_string());
    parts.uri = Uri::try_from(format!("http://{backend}{path}")).ok()?;
    parts.version = Version::HTTP_11;
    headers::strip_hop_by_hop(&mut parts.headers);
    if !parts.headers.contains_key(HOST) {
        let value = host.and_then(|h| HeaderValue::from_str(&h).ok());
        if let Some(value) = value {
            parts.headers.insert(HOST, value);
        }
    }
    if let Some((client, tls)) = forwarded {
        headers::add_forwarded(&mut parts.headers, client, tls);
    }
    Some(Request::from_parts(parts, RequestBody::new(body, lease)))
}

/// The answer to a request (HTTP/2, or HTTP/1.1 over TLS) with a line over
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
