//! Answers the proxy gives itself: 503 when nothing can serve (S-BK9), 502 and 504 for
//! backend failures.

use hyper::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{Response, StatusCode};

use super::body::ProxyBody;
use crate::config::L7Settings;

/// The built-in 503 page, plain text.
const BUILT_IN_503: &str =
    "503 Service Unavailable: no server is available to handle this request.\n";

/// 503 with the configured error page (`text/html`) or the built-in one (`text/plain`), and
/// `Retry-After: 1`.
pub(crate) fn unavailable(l7: &L7Settings) -> Response<ProxyBody> {
    let (body, kind) = match &l7.error_page {
        Some(page) => (ProxyBody::text(page.clone()), "text/html; charset=utf-8"),
        None => (ProxyBody::text(BUILT_IN_503), "text/plain; charset=utf-8"),
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    resp.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

/// A short plain-text answer with `status` (502 bad gateway, 504 gateway timeout).
pub(crate) fn status(status: StatusCode) -> Response<ProxyBody> {
    let text = format!("{status}\n");
    let mut resp = Response::new(ProxyBody::text(text));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}
