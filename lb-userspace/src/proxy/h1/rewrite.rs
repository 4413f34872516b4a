//! The heads the proxy writes: the request as the backend gets it and the response as the
//! client gets it (hop-by-hop headers dropped, X-Forwarded-For/-Proto, framing and
//! connection headers of this hop, the persistence cookie).

use super::head::{Framing, Head};

/// Writes the request head for the backend into `out` (cleared first): origin-form target,
/// HTTP/1.1, end-to-end headers, Host from an absolute-form target when the client sent
/// none, chunked framing kept, and X-Forwarded-For (appended to the client's) and
/// X-Forwarded-Proto (`https` when `tls`) when `forwarded` carries the client address (as
/// text: it is formatted once per connection, not per request).
pub(crate) fn upstream_head(req: &Head, forwarded: Option<&str>, tls: bool, out: &mut Vec<u8>) {
    out.clear();
    let (path, authority) = req.origin_form();
    out.extend_from_slice(req.method_str().as_bytes());
    out.push(b' ');
    if path.starts_with('?') {
        out.push(b'/');
    }
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let skip_forwarded = |name: &[u8]| {
        forwarded.is_some()
            && (name.eq_ignore_ascii_case(b"x-forwarded-for")
                || name.eq_ignore_ascii_case(b"x-forwarded-proto"))
    };
    let mut has_host = false;
    for (name, value) in req.end_to_end(&skip_forwarded) {
        has_host |= name.eq_ignore_ascii_case(b"host");
        header(out, name, value);
    }
    if !has_host && let Some(authority) = authority {
        header(out, b"host", authority.as_bytes());
    }
    if req.framing == Some(Framing::Chunked) {
        header(out, b"transfer-encoding", b"chunked");
    }
    if req.connection.upgrade {
        header(out, b"connection", b"upgrade");
    }
    if let Some(client) = forwarded {
        out.extend_from_slice(b"x-forwarded-for: ");
        for prior in req.header_all("x-forwarded-for") {
            out.extend_from_slice(prior.trim().as_bytes());
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(client.as_bytes());
        out.extend_from_slice(if tls {
            b"\r\nx-forwarded-proto: https\r\n"
        } else {
            b"\r\nx-forwarded-proto: http\r\n"
        });
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends a status code's three digits (the parser accepts no other form).
fn push_status(out: &mut Vec<u8>, status: u16) {
    let digit = |d: u16| b'0' + u8::try_from(d % 10).unwrap_or(0);
    out.extend_from_slice(&[digit(status / 100), digit(status / 10), digit(status)]);
}

/// Writes the response head for the client into `out`: HTTP/1.1 status line, end-to-end
/// headers (a Content-Length beside chunked framing dropped), `Transfer-Encoding: chunked`
/// when the chunks pass through, the persistence cookie, and this hop's connection header.
pub(crate) fn response_head(
    resp: &Head,
    framing: Framing,
    dechunk: bool,
    client_minor: u8,
    close: bool,
    set_cookie: Option<&[u8]>,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_status(out, resp.status);
    out.push(b' ');
    out.extend_from_slice(resp.reason());
    out.extend_from_slice(b"\r\n");
    let chunked = framing == Framing::Chunked;
    let skip = |name: &[u8]| chunked && name.eq_ignore_ascii_case(b"content-length");
    for (name, value) in resp.end_to_end(&skip) {
        header(out, name, value);
    }
    if chunked && !dechunk {
        header(out, b"transfer-encoding", b"chunked");
    }
    if let Some(cookie) = set_cookie {
        header(out, b"set-cookie", cookie);
    }
    if resp.status == 101 {
        header(out, b"connection", b"upgrade");
    } else if close {
        header(out, b"connection", b"close");
    } else if client_minor == 0 {
        header(out, b"connection", b"keep-alive");
    }
    out.extend_from_slice(b"\r\n");
}

fn header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::super::head::Parsed;
    use super::*;

    fn parse_req(text: &str) -> Head {
        let mut h = Head::default();
        assert!(matches!(
            h.parse_request(text.as_bytes(), crate::config::HeaderLimits::default()),
            Ok(Parsed::Complete(_))
        ));
        h
    }

    #[test]
    fn request_head_for_the_backend() {
        let req = parse_req(
            "POST http://a.test/p?q=1 HTTP/1.0\r\nConnection: keep-alive\r\n\
             X-Forwarded-For: 10.0.0.1\r\nTransfer-Encoding: chunked\r\nX-A: b\r\n\r\n",
        );
        let mut out = Vec::new();
        upstream_head(&req, Some("192.0.2.7"), false, &mut out);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "POST /p?q=1 HTTP/1.1\r\nX-A: b\r\nhost: a.test\r\ntransfer-encoding: chunked\r\n\
             x-forwarded-for: 10.0.0.1, 192.0.2.7\r\nx-forwarded-proto: http\r\n\r\n"
        );
        upstream_head(&req, Some("192.0.2.7"), true, &mut out);
        assert!(String::from_utf8_lossy(&out).ends_with("x-forwarded-proto: https\r\n\r\n"));
    }

    #[test]
    fn an_empty_absolute_path_becomes_slash() {
        let req = parse_req("GET http://a.test?x=1 HTTP/1.1\r\n\r\n");
        let mut out = Vec::new();
        upstream_head(&req, None, false, &mut out);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "GET /?x=1 HTTP/1.1\r\nhost: a.test\r\n\r\n"
        );
    }

    #[test]
    fn response_head_for_the_client() {
        let mut resp = Head::default();
        let text = "HTTP/1.1 200 Fine\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\
                    Keep-Alive: timeout=5\r\nX-B: 1\r\n\r\n";
        assert!(matches!(
            resp.parse_response(text.as_bytes(), false),
            Ok(Parsed::Complete(_))
        ));
        let mut out = Vec::new();
        response_head(
            &resp,
            Framing::Chunked,
            false,
            1,
            false,
            Some(b"LB=x"),
            &mut out,
        );
        assert_eq!(
            String::from_utf8_lossy(&out),
            "HTTP/1.1 200 Fine\r\nX-B: 1\r\ntransfer-encoding: chunked\r\nset-cookie: LB=x\r\n\r\n"
        );
        out.clear();
        response_head(&resp, Framing::Chunked, true, 0, true, None, &mut out);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "HTTP/1.1 200 Fine\r\nX-B: 1\r\nconnection: close\r\n\r\n"
        );
    }
}
