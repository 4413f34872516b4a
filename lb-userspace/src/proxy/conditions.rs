//! Conditional sets (S-BK6): compiled once per configuration, matched per request.
//!
//! The first set whose conditions all match picks that set's list; otherwise the Default list.

use std::net::IpAddr;

use hyper::Request;
use hyper::header::{HOST, HeaderName};
use regex::{Regex, RegexBuilder};

use crate::config::{Condition, ConditionalSet, StrMatch};

/// A string test ready to run: regexes compiled at load, not per request.
#[derive(Debug)]
enum Matcher {
    Exact(String),
    Prefix(String),
    Suffix(String),
    Regex(Regex),
    /// A regex that failed to compile (validation should prevent it): never matches.
    Never,
}

impl Matcher {
    /// `fold` lowers both sides (and makes the regex case-insensitive): used for the Host.
    fn new(m: &StrMatch, fold: bool) -> Matcher {
        let norm = |s: &str| {
            if fold {
                s.to_ascii_lowercase()
            } else {
                s.to_string()
            }
        };
        match m {
            StrMatch::Exact(s) => Matcher::Exact(norm(s)),
            StrMatch::Prefix(s) => Matcher::Prefix(norm(s)),
            StrMatch::Suffix(s) => Matcher::Suffix(norm(s)),
            StrMatch::Regex(r) => match RegexBuilder::new(r).case_insensitive(fold).build() {
                Ok(re) => Matcher::Regex(re),
                Err(error) => {
                    tracing::warn!(regex = %r, %error, "condition regex does not compile; it never matches");
                    Matcher::Never
                }
            },
        }
    }

    fn test(&self, value: &str) -> bool {
        match self {
            Matcher::Exact(s) => value == s,
            Matcher::Prefix(s) => value.starts_with(s.as_str()),
            Matcher::Suffix(s) => value.ends_with(s.as_str()),
            Matcher::Regex(re) => re.is_match(value),
            Matcher::Never => false,
        }
    }
}

/// One compiled condition.
#[derive(Debug)]
enum Test {
    Host(Matcher),
    Path(Matcher),
    Header(HeaderName, Matcher),
    Method(Vec<String>),
    SourceCidr(Vec<(IpAddr, u8)>),
    /// A header name that is not a valid HTTP name: no request can carry it.
    Never,
}

/// The Conditional sets of one HTTP vService, in configuration order.
#[derive(Debug, Default)]
pub(crate) struct Conditions {
    sets: Vec<(String, Vec<Test>)>,
}

impl Conditions {
    /// Compiles the sets of a vService.
    pub(crate) fn compile(sets: &[ConditionalSet]) -> Conditions {
        let sets = sets
            .iter()
            .map(|set| {
                (
                    set.name.clone(),
                    set.conditions.iter().map(compile_one).collect(),
                )
            })
            .collect();
        Conditions { sets }
    }

    /// The name of the first set whose conditions all match, or None for the Default list.
    pub(crate) fn pick(&self, req: &impl RequestView, client: IpAddr) -> Option<&str> {
        self.sets
            .iter()
            .find(|(_, tests)| tests.iter().all(|t| matches(t, req, client)))
            .map(|(name, _)| name.as_str())
    }
}

fn compile_one(c: &Condition) -> Test {
    match c {
        Condition::Host(m) => Test::Host(Matcher::new(m, true)),
        Condition::Path(m) => Test::Path(Matcher::new(m, false)),
        Condition::Header { name, value } => match HeaderName::from_bytes(name.as_bytes()) {
            Ok(name) => Test::Header(name, Matcher::new(value, false)),
            Err(_) => Test::Never,
        },
        Condition::Method(list) => {
            Test::Method(list.iter().map(|m| m.to_ascii_uppercase()).collect())
        }
        Condition::SourceCidr(nets) => Test::SourceCidr(nets.clone()),
    }
}

/// What conditions read of a request: implemented by hyper's requests (HTTP/2) and by the
/// HTTP/1.1 path's parsed head, so both choose lists by the same rules.
pub(crate) trait RequestView {
    /// The method, as sent (upper case for the standard ones).
    fn method(&self) -> &str;
    /// The path of the request target, without the query.
    fn path(&self) -> &str;
    /// The Host header, or the URI authority when there is none (HTTP/2, absolute form).
    fn raw_host(&self) -> Option<&str>;
    /// True when some value of header `name` (lower case) passes `test`.
    fn any_header(&self, name: &HeaderName, test: &dyn Fn(&str) -> bool) -> bool;
}

impl<B> RequestView for Request<B> {
    fn method(&self) -> &str {
        self.method().as_str()
    }
    fn path(&self) -> &str {
        self.uri().path()
    }
    fn raw_host(&self) -> Option<&str> {
        match self.headers().get(HOST).and_then(|v| v.to_str().ok()) {
            Some(h) => Some(h),
            None => self.uri().authority().map(|a| a.as_str()),
        }
    }
    fn any_header(&self, name: &HeaderName, test: &dyn Fn(&str) -> bool) -> bool {
        self.headers()
            .get_all(name)
            .iter()
            .any(|v| v.to_str().is_ok_and(test))
    }
}

fn matches(test: &Test, req: &impl RequestView, client: IpAddr) -> bool {
    match test {
        Test::Host(m) => request_host(req).is_some_and(|h| m.test(&h)),
        Test::Path(m) => m.test(req.path()),
        Test::Header(name, m) => req.any_header(name, &|v| m.test(v)),
        Test::Method(list) => list.iter().any(|m| m == req.method()),
        Test::SourceCidr(nets) => nets.iter().any(|&(net, len)| in_network(client, net, len)),
        Test::Never => false,
    }
}

/// The Host the client asked for, lower case and without port: the Host header (HTTP/1.1)
/// or the URI authority (HTTP/2).
pub(crate) fn request_host(req: &impl RequestView) -> Option<String> {
    Some(strip_port(req.raw_host()?).to_ascii_lowercase())
}

fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        // An IPv6 literal: `[addr]` or `[addr]:port`; the brackets are part of the host.
        return match rest.find(']') {
            Some(end) => &host[..end + 2],
            None => host,
        };
    }
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

/// True when `ip` lies in `net/len` (IPv4-mapped IPv6 clients count as IPv4).
pub(crate) fn in_network(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    match (ip.to_canonical(), net.to_canonical()) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let len = u32::from(len.min(32));
            let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let len = u32::from(len.min(128));
            let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(host: &str, path: &str) -> Request<()> {
        Request::builder()
            .uri(path)
            .header(HOST, host)
            .body(())
            .expect("valid request")
    }

    fn set(name: &str, conditions: Vec<Condition>) -> ConditionalSet {
        ConditionalSet {
            name: name.into(),
            conditions,
            backends: vec![],
        }
    }

    #[test]
    fn s_bk6_first_matching_set_wins_else_default() {
        let c = Conditions::compile(&[
            set(
                "api",
                vec![
                    Condition::Host(StrMatch::Suffix("Example.com".into())),
                    Condition::Path(StrMatch::Prefix("/api/".into())),
                ],
            ),
            set(
                "img",
                vec![Condition::Path(StrMatch::Regex(r"\.(png|jpg)$".into()))],
            ),
            set(
                "any-api",
                vec![Condition::Path(StrMatch::Prefix("/api/".into()))],
            ),
        ]);
        let ip: IpAddr = "10.1.2.3".parse().expect("ip");
        assert_eq!(
            c.pick(&req("WWW.example.COM:8080", "/api/x"), ip),
            Some("api")
        );
        assert_eq!(c.pick(&req("other.org", "/api/x"), ip), Some("any-api"));
        assert_eq!(c.pick(&req("other.org", "/a/b.png?x=1"), ip), Some("img"));
        assert_eq!(c.pick(&req("other.org", "/index.html"), ip), None);
    }

    #[test]
    fn s_bk6_header_method_and_cidr_conditions() {
        let c = Conditions::compile(&[set(
            "s",
            vec![
                Condition::Header {
                    name: "X-Tier".into(),
                    value: StrMatch::Exact("gold".into()),
                },
                Condition::Method(vec!["POST".into()]),
                Condition::SourceCidr(vec![("10.0.0.0".parse().expect("ip"), 8)]),
            ],
        )]);
        let mut r = Request::builder()
            .method("POST")
            .uri("/")
            .header("x-tier", "gold")
            .body(())
            .expect("valid request");
        assert_eq!(c.pick(&r, "10.9.9.9".parse().expect("ip")), Some("s"));
        assert_eq!(
            c.pick(&r, "::ffff:10.9.9.9".parse().expect("ip")),
            Some("s")
        );
        assert_eq!(c.pick(&r, "11.0.0.1".parse().expect("ip")), None);
        *r.method_mut() = hyper::Method::GET;
        assert_eq!(c.pick(&r, "10.9.9.9".parse().expect("ip")), None);
    }

    #[test]
    fn host_port_is_stripped() {
        assert_eq!(strip_port("a.b:80"), "a.b");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
        assert_eq!(strip_port("a.b"), "a.b");
    }
}
