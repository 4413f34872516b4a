//! Property tests of the parsers that face clients and backends: any bytes, in
//! any split, give an answer (a head, "more", or an error), never a panic, and what is
//! accepted is consistent. `cargo xtask fuzz` runs many more cases than `cargo test`.

use proptest::prelude::*;

use super::chunked::Chunked;
use super::head::{Head, Parsed};
use crate::config::HeaderLimits;

/// Bytes that look like an HTTP head often enough to reach deep into the parser.
fn head_like() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(b"GET ".to_vec()),
        Just(b"POST ".to_vec()),
        Just(b"HTTP/1.1".to_vec()),
        Just(b"HTTP/1.0".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\n".to_vec()),
        Just(b": ".to_vec()),
        Just(b"Content-Length".to_vec()),
        Just(b"Transfer-Encoding".to_vec()),
        Just(b"chunked".to_vec()),
        Just(b"Connection".to_vec()),
        Just(b"close".to_vec()),
        Just(b"keep-alive".to_vec()),
        Just(b"Upgrade".to_vec()),
        Just(b"Expect: 100-continue".to_vec()),
        Just(b"Host".to_vec()),
        Just(b"/".to_vec()),
        Just(b"http://h/p?q".to_vec()),
        Just(b",".to_vec()),
        "[0-9]{1,25}".prop_map(String::into_bytes),
        prop::collection::vec(any::<u8>(), 0..8),
    ];
    prop::collection::vec(token, 0..40).prop_map(|parts| parts.concat())
}

/// A request line and headers with awkward values, in wire form.
fn request() -> impl Strategy<Value = Vec<u8>> {
    let method = prop_oneof![
        Just("GET"),
        Just("HEAD"),
        Just("POST"),
        Just("CONNECT"),
        Just("OPTIONS")
    ];
    let target = "(/|\\*|http://[a-z.]{1,10}(:[0-9]{1,6})?/)[ -~]{0,30}";
    let name = prop_oneof![
        Just("Content-Length".to_string()),
        Just("Transfer-Encoding".to_string()),
        Just("Connection".to_string()),
        Just("Host".to_string()),
        Just("Cookie".to_string()),
        "[A-Za-z-]{1,12}",
    ];
    let value = "[ -~\t]{0,40}";
    let headers = prop::collection::vec((name, value), 0..12);
    let minor = 0u8..3;
    (method, target, minor, headers).prop_map(|(m, t, minor, headers)| {
        let mut out = format!("{m} {t} HTTP/1.{minor}\r\n");
        for (n, v) in headers {
            out += &format!("{n}: {v}\r\n");
        }
        out += "\r\n";
        out.into_bytes()
    })
}

/// Parses `input` as a request and reads everything the proxy reads from an accepted head.
fn parse_and_read(input: &[u8], limits: HeaderLimits) -> Option<usize> {
    let mut head = Head::default();
    match head.parse_request(input, limits) {
        Ok(Parsed::Complete(n)) => {
            let _ = (head.method_str(), head.target(), head.origin_form());
            let _ = head.wants_keep_alive();
            let _ = head.header_all("cookie").count();
            let _ = head.end_to_end(&|_| false).count();
            assert!(head.framing.is_some(), "an accepted request has a framing");
            Some(n)
        }
        Ok(Parsed::Partial) | Err(_) => None,
    }
}

/// A chunked coding of `chunks`, with extensions and trailers, then `after`.
fn chunked_coding(chunks: &[Vec<u8>], upper: bool, extension: bool, trailer: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in chunks.iter().filter(|c| !c.is_empty()) {
        let size = match upper {
            true => format!("{:X}", chunk.len()),
            false => format!("{:x}", chunk.len()),
        };
        out.extend_from_slice(size.as_bytes());
        if extension {
            out.extend_from_slice(b";name=value");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(chunk);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n");
    if trailer {
        out.extend_from_slice(b"Checksum: abc\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

proptest! {
    #[test]
    fn any_bytes_parse_as_a_request_head_or_fail_cleanly(
        input in prop_oneof![prop::collection::vec(any::<u8>(), 0..2048), head_like()],
    ) {
        if let Some(n) = parse_and_read(&input, HeaderLimits::default()) {
            prop_assert!(n <= input.len());
            // What was accepted is accepted alone, with the same length.
            prop_assert_eq!(parse_and_read(&input[..n], HeaderLimits::default()), Some(n));
        }
    }

    #[test]
    fn generated_requests_are_parsed_or_refused_within_the_limits(
        input in request(),
        extra in prop::collection::vec(any::<u8>(), 0..64),
        head_limit in 64usize..4096,
    ) {
        let limits = HeaderLimits { head: head_limit, line: head_limit.min(1024) };
        let mut bytes = input.clone();
        bytes.extend_from_slice(&extra);
        if let Some(n) = parse_and_read(&bytes, limits) {
            prop_assert!(n <= head_limit, "a head of {} bytes passed a limit of {}", n, head_limit);
            prop_assert_eq!(n, input.len(), "the head ends at its empty line");
        }
    }

    #[test]
    fn any_bytes_parse_as_a_response_head_or_fail_cleanly(
        input in prop_oneof![prop::collection::vec(any::<u8>(), 0..2048), head_like()],
        head_request in any::<bool>(),
    ) {
        let mut head = Head::default();
        if let Ok(Parsed::Complete(n)) = head.parse_response(&input, head_request) {
            prop_assert!(n <= input.len());
            let _ = (head.reason(), head.wants_keep_alive(), head.end_to_end(&|_| false).count());
        }
    }

    #[test]
    fn any_bytes_in_any_split_feed_the_chunked_decoder_cleanly(
        input in prop::collection::vec(any::<u8>(), 0..1024),
        split in any::<prop::sample::Index>(),
    ) {
        let at = split.index(input.len() + 1);
        let mut decoder = Chunked::default();
        let mut payload = 0usize;
        let mut count = |p: &[u8]| payload += p.len();
        if let Ok(first) = decoder.feed(&input[..at], &mut count) {
            prop_assert!(first <= at);
            if first == at
                && let Ok(second) = decoder.feed(&input[at..], &mut count)
            {
                prop_assert!(second <= input.len() - at);
            }
        }
        prop_assert!(payload <= input.len());
    }

    #[test]
    fn a_chunked_body_decodes_to_its_payload_whatever_the_splits(
        chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..8),
        upper in any::<bool>(),
        extension in any::<bool>(),
        trailer in any::<bool>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        after in prop::collection::vec(any::<u8>(), 0..16),
    ) {
        let coded = chunked_coding(&chunks, upper, extension, trailer);
        let mut wire = coded.clone();
        wire.extend_from_slice(&after);
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(wire.len() + 1)).collect();
        points.push(0);
        points.push(wire.len());
        points.sort_unstable();
        let mut decoder = Chunked::default();
        let mut payload = Vec::new();
        let mut consumed = 0;
        for pair in points.windows(2) {
            if decoder.is_done() {
                break;
            }
            let piece = &wire[pair[0]..pair[1]];
            let took = decoder
                .feed(piece, &mut |p| payload.extend_from_slice(p))
                .map_err(|e| TestCaseError::fail(format!("{e} at byte {}", pair[0])))?;
            consumed += took;
            if took < piece.len() {
                break;
            }
        }
        prop_assert!(decoder.is_done());
        prop_assert_eq!(consumed, coded.len(), "the body ends where its coding does");
        prop_assert_eq!(payload, chunks.concat());
    }
}
