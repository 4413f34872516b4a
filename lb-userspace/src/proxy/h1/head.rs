//! Parsed HTTP/1.x message heads (request and response) kept as spans into one owned buffer,
//! so a head costs one copy and no per-header allocation, and the framing rules of RFC 9112
//! (Content-Length, Transfer-Encoding, Connection) decided once.

use hyper::header::HeaderName;

use super::super::conditions::RequestView;
use super::super::http::MAX_RESPONSE_HEAD_BYTES;
use crate::config::HeaderLimits;

/// Most header lines a head may carry; more is answered 431 (requests) or 502 (responses).
pub(crate) const MAX_HEADERS: usize = 128;

/// Byte range in a head buffer.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Span {
    start: u32,
    end: u32,
}

impl Span {
    fn of(base: &[u8], part: &[u8]) -> Span {
        // `part` is a sub-slice of `base` (httparse hands out slices of its input).
        let start = part.as_ptr() as usize - base.as_ptr() as usize;
        Span {
            start: start as u32,
            end: (start + part.len()) as u32,
        }
    }

    fn get<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.start as usize..self.end as usize]
    }
}

/// How a message body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Exactly this many bytes (0: no body).
    Length(u64),
    /// Transfer-Encoding: chunked.
    Chunked,
    /// Until the sender closes (responses only).
    UntilClose,
}

/// Why a head was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HeadError {
    /// Not HTTP/1.x, or a framing the proxy must not guess at (request smuggling guards).
    #[error("malformed message: {0}")]
    Malformed(&'static str),
    /// Head over the size or header-count limit, or a header line over its limit.
    #[error("header section too large")]
    TooLarge,
    /// Request line over the line limit (answered 414).
    #[error("request line too long")]
    LineTooLong,
}

/// The `Connection` header's meaning for one message.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ConnectionOpts {
    /// `close` was listed.
    pub close: bool,
    /// `keep-alive` was listed (HTTP/1.0 persistence).
    pub keep_alive: bool,
    /// `upgrade` was listed and an Upgrade header names the protocol (WebSocket, RFC 9110
    /// 7.8): the Upgrade header then travels and the connection may become a tunnel.
    pub upgrade: bool,
}

/// One parsed head: the start line parts and header spans over `buf`.
#[derive(Debug, Default)]
pub(crate) struct Head {
    buf: Vec<u8>,
    /// Method (request) or reason phrase (response).
    first: Span,
    /// Request target (request).
    target: Span,
    /// Status code (response).
    pub status: u16,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    headers: Vec<(Span, Span)>,
    /// Body delimitation.
    pub framing: Option<Framing>,
    /// Connection options.
    pub connection: ConnectionOpts,
    /// Header indexes that never travel to the next hop (hop-by-hop and Connection-named).
    hop: Vec<bool>,
    /// The request carried `Expect: 100-continue`.
    pub expect_continue: bool,
}

/// Outcome of trying to parse a head from the bytes received so far.
pub(crate) enum Parsed {
    /// A whole head of this many bytes was parsed into the `Head`.
    Complete(usize),
    /// More bytes are needed.
    Partial,
}

/// Hop-by-hop headers (RFC 9110 7.6.1) plus `upgrade` (protocol switches are not proxied).
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

impl Head {
    /// Parses a request head from the start of `input`, within `limits`.
    pub(crate) fn parse_request(
        &mut self,
        input: &[u8],
        limits: HeaderLimits,
    ) -> Result<Parsed, HeadError> {
        let mut raw = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut raw);
        let parsed = req.parse(input);
        let Some(n) = head_length(parsed, input, limits.head, "invalid request head")? else {
            return Ok(Parsed::Partial);
        };
        check_lines(&req, limits)?;
        self.reset(&input[..n]);
        let (method, path) = (req.method.unwrap_or(""), req.path.unwrap_or(""));
        self.first = Span::of(input, method.as_bytes());
        self.target = Span::of(input, path.as_bytes());
        self.minor = req.version.unwrap_or(1);
        self.take_headers(input, req.headers);
        self.framing = Some(self.request_framing()?);
        Ok(Parsed::Complete(n))
    }

    /// Parses a response head from the start of `input`; `head_request` marks the answer
    /// to a HEAD (never a body).
    pub(crate) fn parse_response(
        &mut self,
        input: &[u8],
        head_request: bool,
    ) -> Result<Parsed, HeadError> {
        let mut raw = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut raw);
        let parsed = resp.parse(input);
        let Some(n) = head_length(
            parsed,
            input,
            MAX_RESPONSE_HEAD_BYTES,
            "invalid response head",
        )?
        else {
            return Ok(Parsed::Partial);
        };
        self.reset(&input[..n]);
        self.first = Span::of(input, resp.reason.unwrap_or("").as_bytes());
        self.status = resp.code.unwrap_or(0);
        self.minor = resp.version.unwrap_or(1);
        self.take_headers(input, resp.headers);
        self.framing = Some(self.response_framing(head_request)?);
        Ok(Parsed::Complete(n))
    }

    /// Bytes this head holds allocated (its copy of the head and the header index).
    pub(crate) fn footprint(&self) -> usize {
        self.buf.capacity()
            + self.headers.capacity() * std::mem::size_of::<(Span, Span)>()
            + self.hop.capacity()
    }

    fn reset(&mut self, head: &[u8]) {
        self.buf.clear();
        self.buf.extend_from_slice(head);
        self.headers.clear();
        self.hop.clear();
        self.connection = ConnectionOpts::default();
        self.expect_continue = false;
        self.status = 0;
        self.framing = None;
    }

    /// Records header spans (relative to `base`, which `self.buf` copies) and classifies them.
    fn take_headers(&mut self, base: &[u8], headers: &[httparse::Header<'_>]) {
        for h in headers {
            let name = Span::of(base, h.name.as_bytes());
            let value = Span::of(base, h.value);
            self.headers.push((name, value));
            let hop = HOP_BY_HOP.iter().any(|x| h.name.eq_ignore_ascii_case(x));
            self.hop.push(hop);
        }
        let mut named: Vec<&[u8]> = Vec::new();
        for (i, (name, value)) in self.headers.iter().enumerate() {
            let name = name.get(&self.buf);
            if name.eq_ignore_ascii_case(b"connection") {
                for token in tokens(value.get(&self.buf)) {
                    if token.eq_ignore_ascii_case(b"close") {
                        self.connection.close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        self.connection.keep_alive = true;
                    } else if token.eq_ignore_ascii_case(b"upgrade") {
                        self.connection.upgrade = true;
                    } else {
                        named.push(token);
                    }
                }
            } else if name.eq_ignore_ascii_case(b"expect") {
                let v = trim(value.get(&self.buf));
                self.expect_continue |= v.eq_ignore_ascii_case(b"100-continue");
                // The proxy answers 100 Continue itself (see the connection loop).
                self.hop[i] = self.expect_continue;
            }
        }
        if self.connection.upgrade {
            let mut asked = false;
            for (i, (name, _)) in self.headers.iter().enumerate() {
                if name.get(&self.buf).eq_ignore_ascii_case(b"upgrade") {
                    self.hop[i] = false;
                    asked = true;
                }
            }
            self.connection.upgrade = asked;
        }
        if !named.is_empty() {
            for (i, (name, _)) in self.headers.iter().enumerate() {
                let name = name.get(&self.buf);
                if named.iter().any(|n| n.eq_ignore_ascii_case(name)) {
                    self.hop[i] = true;
                }
            }
        }
    }

    /// RFC 9112 6.3 for requests: chunked when Transfer-Encoding ends with it; Content-Length
    /// otherwise; anything ambiguous is refused rather than guessed (request smuggling).
    fn request_framing(&self) -> Result<Framing, HeadError> {
        match (self.transfer_chunked(), self.content_length()?) {
            (Some(_), Some(_)) => Err(HeadError::Malformed(
                "both Transfer-Encoding and Content-Length",
            )),
            (Some(true), None) => Ok(Framing::Chunked),
            (Some(false), None) => Err(HeadError::Malformed(
                "Transfer-Encoding without chunked last",
            )),
            (None, Some(n)) => Ok(Framing::Length(n)),
            (None, None) => Ok(Framing::Length(0)),
        }
    }

    /// RFC 9112 6.3 for responses.
    fn response_framing(&self, head_request: bool) -> Result<Framing, HeadError> {
        if head_request || self.status == 204 || self.status == 304 || self.status < 200 {
            return Ok(Framing::Length(0));
        }
        match self.transfer_chunked() {
            Some(true) => return Ok(Framing::Chunked),
            Some(false) => return Ok(Framing::UntilClose),
            None => {}
        }
        match self.content_length() {
            Ok(Some(n)) => Ok(Framing::Length(n)),
            Ok(None) => Ok(Framing::UntilClose),
            Err(_) => Err(HeadError::Malformed(
                "invalid Content-Length from the backend",
            )),
        }
    }

    /// Some(true) when Transfer-Encoding is present with chunked as the final coding,
    /// Some(false) when present otherwise, None when absent.
    fn transfer_chunked(&self) -> Option<bool> {
        let mut last: Option<&[u8]> = None;
        let mut present = false;
        for v in self.values(b"transfer-encoding") {
            present = true;
            if let Some(t) = tokens(v).last() {
                last = Some(t);
            }
        }
        present.then(|| last.is_some_and(|t| t.eq_ignore_ascii_case(b"chunked")))
    }

    /// The Content-Length, when every value (and list element) agrees on one number.
    fn content_length(&self) -> Result<Option<u64>, HeadError> {
        let mut found: Option<u64> = None;
        for v in self.values(b"content-length") {
            for t in v.split(|&b| b == b',').map(trim) {
                let n = parse_decimal(t).ok_or(HeadError::Malformed("invalid Content-Length"))?;
                if found.is_some_and(|f| f != n) {
                    return Err(HeadError::Malformed("conflicting Content-Length values"));
                }
                found = Some(n);
            }
        }
        Ok(found)
    }

    fn values<'a, 'n>(&'a self, name: &'n [u8]) -> impl Iterator<Item = &'a [u8]> + use<'a, 'n> {
        self.headers
            .iter()
            .filter(move |(n, _)| n.get(&self.buf).eq_ignore_ascii_case(name))
            .map(|(_, v)| v.get(&self.buf))
    }

    /// The first value of header `name` (lower case), as text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.values(name.as_bytes())
            .next()
            .and_then(|v| std::str::from_utf8(v).ok())
    }

    /// Every value of header `name` (lower case) that is text.
    pub(crate) fn header_all<'a, 'n>(
        &'a self,
        name: &'n str,
    ) -> impl Iterator<Item = &'a str> + use<'a, 'n> {
        self.values(name.as_bytes())
            .filter_map(|v| std::str::from_utf8(v).ok())
    }

    /// Request method.
    pub(crate) fn method_str(&self) -> &str {
        std::str::from_utf8(self.first.get(&self.buf)).unwrap_or("")
    }

    /// Response reason phrase.
    pub(crate) fn reason(&self) -> &[u8] {
        self.first.get(&self.buf)
    }

    /// The request target as sent (origin, absolute, authority or asterisk form).
    pub(crate) fn target(&self) -> &str {
        std::str::from_utf8(self.target.get(&self.buf)).unwrap_or("/")
    }

    /// The target to send upstream (`/path?query`; just `?query` when an absolute-form
    /// target has an empty path, which the writer completes with "/"), and the authority of
    /// an absolute-form target.
    pub(crate) fn origin_form(&self) -> (&str, Option<&str>) {
        let t = self.target();
        let has_scheme = |scheme: &str| {
            t.get(..scheme.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(scheme))
        };
        let rest = if has_scheme("http://") {
            &t[7..]
        } else if has_scheme("https://") {
            &t[8..]
        } else {
            return (t, None);
        };
        match rest.find(['/', '?']) {
            Some(i) => (&rest[i..], Some(&rest[..i])),
            None => ("/", Some(rest)),
        }
    }

    /// True when the client expects the connection to stay open after this exchange.
    pub(crate) fn wants_keep_alive(&self) -> bool {
        if self.minor == 0 {
            self.connection.keep_alive && !self.connection.close
        } else {
            !self.connection.close
        }
    }

    /// [`Head::end_to_end`] as byte ranges of the head that was parsed (the first bytes of
    /// the input of `parse_*`), for a caller that keeps those bytes and shares them out.
    pub(crate) fn end_to_end_ranges(
        &self,
    ) -> impl Iterator<Item = (std::ops::Range<usize>, std::ops::Range<usize>)> + '_ {
        let range = |s: &Span| s.start as usize..s.end as usize;
        self.headers
            .iter()
            .zip(self.hop.iter())
            .filter(|(_, hop)| !**hop)
            .map(move |((n, v), _)| (range(n), range(v)))
    }

    /// Headers that travel to the next hop: (name, value) in order, minus hop-by-hop ones
    /// and those `skip` rejects.
    pub(crate) fn end_to_end<'a>(
        &'a self,
        skip: &'a dyn Fn(&[u8]) -> bool,
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        self.headers
            .iter()
            .zip(self.hop.iter())
            .filter(|(_, hop)| !**hop)
            .map(|((n, v), _)| (n.get(&self.buf), v.get(&self.buf)))
            .filter(move |(n, _)| !skip(n))
    }
}

impl RequestView for Head {
    fn method(&self) -> &str {
        self.method_str()
    }
    fn path(&self) -> &str {
        let (p, _) = self.origin_form();
        match p.split('?').next() {
            Some("") | None => "/",
            Some(path) => path,
        }
    }
    fn raw_host(&self) -> Option<&str> {
        self.header("host").or_else(|| self.origin_form().1)
    }
    fn any_header(&self, name: &HeaderName, test: &dyn Fn(&str) -> bool) -> bool {
        self.header_all(name.as_str()).any(test)
    }
}

/// The length of a complete head (None: incomplete so far), for requests and responses alike:
/// a head, complete or not, may not exceed `max` bytes nor MAX_HEADERS lines.
fn head_length(
    parsed: httparse::Result<usize>,
    input: &[u8],
    max: usize,
    malformed: &'static str,
) -> Result<Option<usize>, HeadError> {
    let (n, complete) = match parsed {
        Ok(httparse::Status::Complete(n)) => (n, true),
        Ok(httparse::Status::Partial) => (input.len(), false),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(_) => return Err(HeadError::Malformed(malformed)),
    };
    if n > max {
        return Err(HeadError::TooLarge);
    }
    Ok(complete.then_some(n))
}

/// Refuses a complete request head with a line over `limits.line`: the request line (414),
/// or a header's `name: value` (431).
fn check_lines(req: &httparse::Request<'_, '_>, limits: HeaderLimits) -> Result<(), HeadError> {
    let (method, target) = (req.method.unwrap_or(""), req.path.unwrap_or(""));
    if !limits.request_line_fits(method.len(), target.len()) {
        return Err(HeadError::LineTooLong);
    }
    if !req
        .headers
        .iter()
        .all(|h| limits.header_line_fits(h.name.len(), h.value.len()))
    {
        return Err(HeadError::TooLarge);
    }
    Ok(())
}

/// Comma-separated tokens of a header value, trimmed, empty ones skipped.
fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim)
        .filter(|t| !t.is_empty())
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// A non-empty run of ASCII digits that fits u64.
fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(text: &str) -> Result<Head, HeadError> {
        let mut h = Head::default();
        match h.parse_request(text.as_bytes(), HeaderLimits::default())? {
            Parsed::Complete(n) => assert_eq!(n, text.len()),
            Parsed::Partial => panic!("partial"),
        }
        Ok(h)
    }

    #[test]
    fn request_framing_follows_rfc_9112() {
        let h = req("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n").expect("ok");
        assert_eq!(h.framing, Some(Framing::Length(5)));
        let h = req("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n").expect("ok");
        assert_eq!(h.framing, Some(Framing::Chunked));
        let h = req("GET / HTTP/1.1\r\n\r\n").expect("ok");
        assert_eq!(h.framing, Some(Framing::Length(0)));
        let h = req("POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n").expect("ok");
        assert_eq!(h.framing, Some(Framing::Length(5)));
    }

    #[test]
    fn ambiguous_request_framing_is_refused() {
        for bad in [
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: five\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        ] {
            assert!(
                matches!(req(bad), Err(HeadError::Malformed(_))),
                "refused: {bad:?}"
            );
        }
    }

    #[test]
    fn hop_by_hop_and_connection_named_headers_do_not_travel() {
        let h = req(
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, X-Secret\r\n\
                     X-Secret: 1\r\nKeep-Alive: 5\r\nX-Kept: 2\r\nUpgrade: h2c\r\n\r\n",
        )
        .expect("ok");
        let kept: Vec<&[u8]> = h.end_to_end(&|_| false).map(|(n, _)| n).collect();
        assert_eq!(kept, vec![&b"Host"[..], &b"X-Kept"[..]]);
        assert!(h.connection.keep_alive && !h.connection.close);
    }

    #[test]
    fn keep_alive_defaults_by_version() {
        assert!(
            req("GET / HTTP/1.1\r\n\r\n")
                .expect("ok")
                .wants_keep_alive()
        );
        assert!(
            !req("GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
                .expect("ok")
                .wants_keep_alive()
        );
        assert!(
            !req("GET / HTTP/1.0\r\n\r\n")
                .expect("ok")
                .wants_keep_alive()
        );
        assert!(
            req("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
                .expect("ok")
                .wants_keep_alive()
        );
    }

    #[test]
    fn absolute_form_becomes_origin_form() {
        let h = req("GET http://Example.test/x?y=1 HTTP/1.1\r\n\r\n").expect("ok");
        assert_eq!(h.origin_form(), ("/x?y=1", Some("Example.test")));
        assert_eq!(h.raw_host(), Some("Example.test"));
        assert_eq!(RequestView::path(&h), "/x");
        let h = req("GET http://a.test HTTP/1.1\r\n\r\n").expect("ok");
        assert_eq!(h.origin_form(), ("/", Some("a.test")));
        let h = req("GET HTTP://a.test?q=1 HTTP/1.1\r\n\r\n").expect("ok");
        assert_eq!(h.origin_form(), ("?q=1", Some("a.test")));
        assert_eq!(RequestView::path(&h), "/");
        let h = req("GET /p?q HTTP/1.1\r\nHost: h\r\n\r\n").expect("ok");
        assert_eq!(h.origin_form(), ("/p?q", None));
    }

    #[test]
    fn response_framing() {
        let mut h = Head::default();
        let parse = |h: &mut Head, t: &str, head: bool| {
            h.parse_response(t.as_bytes(), head).map(|_| h.framing)
        };
        let ok = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(parse(&mut h, ok, false), Ok(Some(Framing::Length(3))));
        assert_eq!(parse(&mut h, ok, true), Ok(Some(Framing::Length(0))));
        let t = "HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(parse(&mut h, t, false), Ok(Some(Framing::Length(0))));
        let t = "HTTP/1.1 200 OK\r\n\r\n";
        assert_eq!(parse(&mut h, t, false), Ok(Some(Framing::UntilClose)));
        let t = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n";
        assert_eq!(parse(&mut h, t, false), Ok(Some(Framing::Chunked)));
        assert_eq!(h.reason(), b"OK");
        assert_eq!(h.status, 200);
    }

    #[test]
    fn oversized_and_partial_heads() {
        let limits = HeaderLimits::default();
        let mut h = Head::default();
        assert!(matches!(
            h.parse_request(b"GET / HTTP/1.1\r\nHost: a\r\n", limits),
            Ok(Parsed::Partial)
        ));
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', limits.head + 1));
        assert_eq!(
            h.parse_request(&big, limits).err(),
            Some(HeadError::TooLarge)
        );
        big.extend_from_slice(b"\r\n\r\n");
        assert_eq!(
            h.parse_request(&big, limits).err(),
            Some(HeadError::TooLarge)
        );
    }

    /// One header line or the request line over `line` is refused even when the whole
    /// head fits; a line of exactly `line` bytes passes.
    #[test]
    fn a_line_over_its_limit_is_refused() {
        let limits = HeaderLimits {
            head: 4096,
            line: 256,
        };
        let mut h = Head::default();
        let header = |len: usize| format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(len - 3));
        let fits = header(256);
        assert!(matches!(
            h.parse_request(fits.as_bytes(), limits),
            Ok(Parsed::Complete(_))
        ));
        let over = header(257);
        assert_eq!(
            h.parse_request(over.as_bytes(), limits).err(),
            Some(HeadError::TooLarge)
        );
        let long_target = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(300));
        assert_eq!(
            h.parse_request(long_target.as_bytes(), limits).err(),
            Some(HeadError::LineTooLong)
        );
    }

    #[test]
    fn an_oversized_response_head_is_refused_complete_or_not() {
        let mut h = Head::default();
        let mut big = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', MAX_RESPONSE_HEAD_BYTES + 1));
        assert_eq!(
            h.parse_response(&big, false).err(),
            Some(HeadError::TooLarge)
        );
        big.extend_from_slice(b"\r\n\r\n");
        assert_eq!(
            h.parse_response(&big, false).err(),
            Some(HeadError::TooLarge)
        );
        assert!(matches!(
            h.parse_response(b"HTTP/1.1 204 No Content\r\n\r\n", false),
            Ok(Parsed::Complete(_))
        ));
    }
}
