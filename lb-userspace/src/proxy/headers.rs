//! Header rewriting between client and backend: hop-by-hop headers, X-Forwarded-*, the
//! persistence cookie.

use std::net::IpAddr;

use hyper::HeaderMap;
use hyper::header::{self, HeaderName, HeaderValue};

use crate::config::{CookiePersistence, SameSite};

/// Headers that describe one connection, not the message (RFC 9110 7.6.1); never forwarded.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// True for a header that never travels to the next hop by its name alone (those a
/// `Connection` header lists aside): the hop-by-hop ones and `Upgrade`.
pub(crate) fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name) || name == header::UPGRADE
}

/// Removes hop-by-hop headers, including those the `Connection` header names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    headers.remove(header::UPGRADE);
}

/// Appends the client to X-Forwarded-For and sets X-Forwarded-Proto.
pub(crate) fn add_forwarded(headers: &mut HeaderMap, client: IpAddr, tls: bool) {
    let client = client.to_canonical().to_string();
    let xff = HeaderName::from_static("x-forwarded-for");
    let prior: Vec<&str> = headers
        .get_all(&xff)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let value = if prior.is_empty() {
        client
    } else {
        format!("{}, {client}", prior.join(", "))
    };
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(xff, value);
    }
    let proto = if tls { "https" } else { "http" };
    headers.insert(
        HeaderName::from_static("x-forwarded-proto"),
        HeaderValue::from_static(proto),
    );
}

/// The value of the cookie `name` in the request's Cookie headers, if any.
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let values = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok());
    cookie_in(values, name)
}

/// The value of the cookie `name` among Cookie header values, if any.
pub(crate) fn cookie_in<'a>(values: impl Iterator<Item = &'a str>, name: &str) -> Option<&'a str> {
    values
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim_matches('"'))
        .filter(|v| !v.is_empty())
}

/// The Set-Cookie value that pins the client with `value`.
pub(crate) fn set_cookie(p: &CookiePersistence, value: &str) -> Option<HeaderValue> {
    let mut s = format!("{}={value}; Path=/", p.name);
    if p.http_only {
        s.push_str("; HttpOnly");
    }
    // SameSite=None is only honoured by browsers together with Secure.
    if p.secure || p.same_site == SameSite::None {
        s.push_str("; Secure");
    }
    s.push_str(match p.same_site {
        SameSite::Strict => "; SameSite=Strict",
        SameSite::Lax => "; SameSite=Lax",
        SameSite::None => "; SameSite=None",
    });
    HeaderValue::from_str(&s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_connection_named_headers_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, X-Secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-kept"));
    }

    #[test]
    fn forwarded_for_appends() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("1.1.1.1"));
        add_forwarded(&mut h, "::ffff:10.0.0.7".parse().expect("ip"), true);
        assert_eq!(h["x-forwarded-for"], "1.1.1.1, 10.0.0.7");
        assert_eq!(h["x-forwarded-proto"], "https");
    }

    #[test]
    fn persistence_cookie_is_read_and_written() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_static("a=1; LB=abc; b=2"));
        assert_eq!(cookie(&h, "LB"), Some("abc"));
        assert_eq!(cookie(&h, "c"), None);
        let p = CookiePersistence {
            name: "LB".into(),
            http_only: true,
            secure: false,
            same_site: SameSite::Strict,
        };
        let v = set_cookie(&p, "abc").expect("valid");
        assert_eq!(v, "LB=abc; Path=/; HttpOnly; SameSite=Strict");
    }
}
