//! Reading and judging an HTTP/1.x response with hard bounds: a garbled, truncated or huge
//! answer is a failed check with a reason, never a panic or an unbounded buffer.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::{Instant, timeout_at};

use crate::config::HttpCheck;

use super::tcp::describe_io;

/// Largest response head (status line and headers) accepted.
pub(crate) const MAX_HEAD: usize = 16 * 1024;
/// Largest body prefix searched for `body_contains`.
pub(crate) const MAX_BODY: usize = 64 * 1024;
/// Interim (1xx) responses skipped before giving up.
const MAX_INTERIM: usize = 4;

/// How the body of a response ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body (204, 304).
    Empty,
    /// `Content-Length` bytes.
    Length(usize),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the server closes the connection.
    UntilClose,
}

/// A parsed response head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    /// Status code.
    pub status: u16,
    /// Body framing.
    pub framing: Framing,
    /// Bytes the head takes, blank line included.
    pub len: usize,
}

/// Reads the response from `stream` and decides the check; Ok carries a success reason.
pub(crate) async fn read_response<S>(
    stream: &mut S,
    check: &HttpCheck,
    deadline: Instant,
) -> Result<String, String>
where
    S: AsyncRead + Unpin,
{
    let mut buf = Vec::with_capacity(4096);
    let mut eof = false;
    let mut interim = 0;
    let head = loop {
        match parse_head(&buf)? {
            Some(head) if (100..200).contains(&head.status) && head.status != 101 => {
                interim += 1;
                if interim > MAX_INTERIM {
                    return Err(format!("more than {MAX_INTERIM} interim responses"));
                }
                buf.drain(..head.len);
            }
            Some(head) => break head,
            None if eof && buf.is_empty() => {
                return Err("connection closed without a response".to_string());
            }
            None if eof => {
                return Err(format!("truncated response head ({} bytes)", buf.len()));
            }
            None if buf.len() > MAX_HEAD => {
                return Err(format!("response head larger than {} KiB", MAX_HEAD / 1024));
            }
            None => eof = read_more(stream, &mut buf, deadline).await?,
        }
    };
    if !check.expect_status.contains(&head.status) {
        return Err(format!(
            "status {}, expected one of {:?}",
            head.status, check.expect_status
        ));
    }
    let Some(needle) = check.body_contains.as_deref() else {
        return Ok(format!("status {}", head.status));
    };
    let mut raw = buf.split_off(head.len);
    loop {
        let (body, complete) = decode_body(&raw, head.framing)?;
        let searched = &body[..body.len().min(MAX_BODY)];
        if contains(searched, needle.as_bytes()) {
            return Ok(format!("status {}, body contains {needle:?}", head.status));
        }
        if complete || (eof && head.framing == Framing::UntilClose) {
            return Err(format!(
                "status {}, body does not contain {needle:?}",
                head.status
            ));
        }
        if body.len() >= MAX_BODY || raw.len() >= 2 * MAX_BODY {
            return Err(format!(
                "status {}, first {} KiB of the body do not contain {needle:?}",
                head.status,
                MAX_BODY / 1024
            ));
        }
        if eof {
            return Err(format!(
                "status {}, body truncated after {} bytes without {needle:?}",
                head.status,
                body.len()
            ));
        }
        eof = read_more(stream, &mut raw, deadline).await?;
    }
}

/// Appends what the stream has; Ok(true) at end of stream. A TLS peer that closes without
/// close_notify also counts as the end, since we asked for `Connection: close`.
async fn read_more<S>(stream: &mut S, buf: &mut Vec<u8>, deadline: Instant) -> Result<bool, String>
where
    S: AsyncRead + Unpin,
{
    let mut chunk = [0u8; 4096];
    match timeout_at(deadline, stream.read(&mut chunk)).await {
        Ok(Ok(0)) => Ok(true),
        Ok(Ok(n)) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(false)
        }
        Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(true),
        Ok(Err(e)) => Err(describe_io("read response", &e)),
        Err(_) => Err("read response: no complete answer before the timeout".to_string()),
    }
}

/// Parses a response head from the start of `buf`: Ok(None) while incomplete, Err as soon as
/// the bytes cannot be HTTP.
pub(crate) fn parse_head(buf: &[u8]) -> Result<Option<Head>, String> {
    const PREFIX: &[u8] = b"HTTP/";
    let n = buf.len().min(PREFIX.len());
    if buf[..n] != PREFIX[..n] {
        return Err(format!(
            "not an HTTP response: starts with {}",
            preview(buf)
        ));
    }
    let Some(line_end) = find(buf, b"\n") else {
        if buf.len() > MAX_HEAD {
            return Err("status line too long".to_string());
        }
        return Ok(None);
    };
    let status = parse_status_line(trim_cr(&buf[..line_end]))?;
    let crlf = find(buf, b"\r\n\r\n").map(|i| (i, i + 4));
    let lf = find(buf, b"\n\n").map(|i| (i, i + 2));
    let end = match (crlf, lf) {
        (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
        (a, b) => a.or(b),
    };
    let Some((headers_end, len)) = end else {
        return Ok(None);
    };
    let mut framing = if status == 204 || status == 304 {
        Framing::Empty
    } else {
        Framing::UntilClose
    };
    let headers = buf.get(line_end + 1..headers_end).unwrap_or_default();
    for line in headers.split(|&b| b == b'\n').map(trim_cr) {
        if line.is_empty() {
            continue;
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or_else(|| format!("malformed header line {}", preview(line)))?;
        let name = &line[..colon];
        let value = String::from_utf8_lossy(&line[colon + 1..])
            .trim()
            .to_ascii_lowercase();
        if framing == Framing::Empty {
            continue;
        }
        if name.eq_ignore_ascii_case(b"transfer-encoding") && value.contains("chunked") {
            framing = Framing::Chunked;
        } else if name.eq_ignore_ascii_case(b"content-length") && framing != Framing::Chunked {
            let n = value
                .parse::<usize>()
                .map_err(|_| format!("invalid Content-Length {value:?}"))?;
            framing = Framing::Length(n);
        }
    }
    Ok(Some(Head {
        status,
        framing,
        len,
    }))
}

/// `HTTP/1.1 200 OK` -> 200.
fn parse_status_line(line: &[u8]) -> Result<u16, String> {
    let text = std::str::from_utf8(line)
        .map_err(|_| format!("status line is not text: {}", preview(line)))?;
    let mut parts = text.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    let code = parts.next().unwrap_or_default();
    let version_ok = version.len() == 8
        && version.as_bytes()[5].is_ascii_digit()
        && version.as_bytes()[6] == b'.'
        && version.as_bytes()[7].is_ascii_digit();
    if !version_ok || code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("malformed status line {}", preview(line)));
    }
    code.parse::<u16>()
        .map_err(|_| format!("malformed status line {}", preview(line)))
}

/// Decodes the body bytes received so far; the flag says the body is complete.
pub(crate) fn decode_body(raw: &[u8], framing: Framing) -> Result<(Vec<u8>, bool), String> {
    match framing {
        Framing::Empty => Ok((Vec::new(), true)),
        Framing::Length(n) => Ok((raw[..raw.len().min(n)].to_vec(), raw.len() >= n)),
        Framing::UntilClose => Ok((raw.to_vec(), false)),
        Framing::Chunked => decode_chunked(raw),
    }
}

/// Decodes `Transfer-Encoding: chunked` data received so far.
fn decode_chunked(raw: &[u8]) -> Result<(Vec<u8>, bool), String> {
    let mut body = Vec::new();
    let mut pos = 0;
    loop {
        let Some(eol) = find(&raw[pos..], b"\r\n") else {
            return Ok((body, false));
        };
        let size_line = &raw[pos..pos + eol];
        let size_text = size_line.split(|&b| b == b';').next().unwrap_or_default();
        let size_text = std::str::from_utf8(size_text).unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("malformed chunk size {}", preview(size_line)))?;
        if size == 0 {
            return Ok((body, true));
        }
        let data_start = pos + eol + 2;
        let available = raw.len() - data_start;
        if available < size.saturating_add(2) {
            body.extend_from_slice(&raw[data_start..data_start + available.min(size)]);
            return Ok((body, false));
        }
        body.extend_from_slice(&raw[data_start..data_start + size]);
        if &raw[data_start + size..data_start + size + 2] != b"\r\n" {
            return Err("malformed chunk: data not followed by CRLF".to_string());
        }
        pos = data_start + size + 2;
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || find(haystack, needle).is_some()
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The first bytes of an answer, escaped, so a reason shows what the backend sent.
fn preview(bytes: &[u8]) -> String {
    let shown = &bytes[..bytes.len().min(32)];
    format!("\"{}\"", shown.escape_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s_hc2_head_with_content_length() {
        let head = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
            .unwrap()
            .unwrap();
        assert_eq!(head.status, 200);
        assert_eq!(head.framing, Framing::Length(5));
        assert_eq!(head.len, 38);
    }

    #[test]
    fn s_hc2_incomplete_head_waits_garbage_fails() {
        assert_eq!(parse_head(b"HTT").unwrap(), None);
        assert_eq!(
            parse_head(b"HTTP/1.1 200 OK\r\nServer: x\r\n").unwrap(),
            None
        );
        assert!(
            parse_head(b"SSH-2.0-OpenSSH")
                .unwrap_err()
                .contains("not an HTTP")
        );
        assert!(
            parse_head(b"HTTP/1.1 2x0 OK\r\n")
                .unwrap_err()
                .contains("malformed status")
        );
        assert!(
            parse_head(b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n")
                .unwrap_err()
                .contains("header")
        );
        assert!(
            parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n")
                .unwrap_err()
                .contains("Content-Length")
        );
    }

    #[test]
    fn s_hc2_chunked_body_is_decoded_across_chunks() {
        let raw = b"4\r\nheal\r\n3;ext=1\r\nthy\r\n0\r\n\r\n";
        let (body, complete) = decode_body(raw, Framing::Chunked).unwrap();
        assert_eq!(body, b"healthy");
        assert!(complete);
        let (partial, complete) = decode_body(&raw[..10], Framing::Chunked).unwrap();
        assert_eq!(partial, b"heal");
        assert!(!complete);
        assert!(decode_body(b"zz\r\n", Framing::Chunked).is_err());
        assert!(decode_body(b"2\r\nabcd\r\n", Framing::Chunked).is_err());
    }

    #[test]
    fn s_hc2_no_content_statuses_have_empty_bodies() {
        let head = parse_head(b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(head.framing, Framing::Empty);
    }
}
