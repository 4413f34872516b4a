//! Field-by-field decoding of a frame, so a failing fixture prints "ip.dst: expected
//! 10.1.0.11, got 10.99.0.1" instead of two hex dumps. Never panics on short input. IPv6
//! and its extension headers are decoded in `decode6`; the transport decoders here serve
//! both families.

use std::fmt::Write as _;
use std::net::Ipv4Addr;

use super::checksum::{self, PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP, Pseudo};
use super::{ETH_P_IPV4, ETH_P_IPV6, TPID_8021AD, TPID_8021Q};

/// Ordered (field, value) pairs.
pub type Fields = Vec<(String, String)>;

/// Reads fixed-size pieces from a frame and records where it ran out.
pub(super) struct Reader<'a> {
    pub(super) data: &'a [u8],
    pub(super) pos: usize,
    out: Fields,
}

impl<'a> Reader<'a> {
    pub(super) fn take(&mut self, n: usize, what: &str) -> Option<&'a [u8]> {
        if self.pos + n > self.data.len() {
            let left = self.data.len() - self.pos;
            self.push(
                "truncated",
                format!(
                    "{what}: needs {n} bytes at offset {}, {left} left",
                    self.pos
                ),
            );
            return None;
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Some(s)
    }

    fn u16(&mut self, what: &str) -> Option<u16> {
        self.take(2, what).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    pub(super) fn push(&mut self, field: &str, value: String) {
        self.out.push((field.to_string(), value));
    }
}

pub(super) fn hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "(none)".to_string();
    }
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn mac(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn addr(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

/// Decodes `frame` into ordered fields (Ethernet, VLAN tags, IPv4 or IPv6 with its extension
/// headers, TCP/UDP/ICMP/ICMPv6). Checksums are shown with "(ok)" or "(BAD, want 0x....)"
/// recomputed from scratch.
pub fn describe(frame: &[u8]) -> Fields {
    let mut r = Reader {
        data: frame,
        pos: 0,
        out: Vec::new(),
    };
    r.push("frame.len", frame.len().to_string());
    let _ = decode_eth(&mut r);
    if r.pos < frame.len()
        && !r
            .out
            .iter()
            .any(|(f, _)| f == "truncated" || f == "payload")
    {
        let rest = &frame[r.pos..];
        r.push("trailer", hex(rest));
    }
    r.out
}

fn decode_eth(r: &mut Reader) -> Option<()> {
    let dst = r.take(6, "ethernet")?;
    r.push("eth.dst", mac(dst));
    let src = r.take(6, "ethernet")?;
    r.push("eth.src", mac(src));
    let mut ethertype = r.u16("ethernet")?;
    let mut n = 0;
    while (ethertype == TPID_8021Q || ethertype == TPID_8021AD) && n < 4 {
        let tci = r.u16("vlan tag")?;
        r.push(
            &format!("vlan[{n}]"),
            format!(
                "tpid 0x{ethertype:04x} vid {} pcp {}",
                tci & 0xfff,
                tci >> 13
            ),
        );
        ethertype = r.u16("vlan tag")?;
        n += 1;
    }
    r.push("eth.type", format!("0x{ethertype:04x}"));
    if ethertype == ETH_P_IPV6 {
        return super::decode6::decode_ipv6(r);
    }
    if ethertype != ETH_P_IPV4 {
        let rest = &r.data[r.pos..];
        r.pos = r.data.len();
        r.push("payload", hex(rest));
        return Some(());
    }
    decode_ipv4(r)
}

fn decode_ipv4(r: &mut Reader) -> Option<()> {
    let start = r.pos;
    let h = r.take(20, "ipv4 header")?;
    let ihl = usize::from(h[0] & 0x0f);
    let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
    let flags = u16::from_be_bytes([h[6], h[7]]);
    let (src, dst, proto) = (addr(&h[12..16]), addr(&h[16..20]), h[9]);
    r.push("ip.version", (h[0] >> 4).to_string());
    r.push("ip.ihl", ihl.to_string());
    r.push("ip.tos", format!("0x{:02x}", h[1]));
    r.push("ip.total_len", total.to_string());
    r.push(
        "ip.id",
        format!("0x{:04x}", u16::from_be_bytes([h[4], h[5]])),
    );
    r.push(
        "ip.flags",
        format!("DF={} MF={}", flags >> 14 & 1, flags >> 13 & 1),
    );
    r.push("ip.frag_offset", (flags & 0x1fff).to_string());
    r.push("ip.ttl", h[8].to_string());
    r.push("ip.proto", proto.to_string());
    let options = if ihl > 5 {
        r.take((ihl - 5) * 4, "ipv4 options")?
    } else {
        &[][..]
    };
    let mut hdr = r.data[start..r.pos].to_vec();
    let sent = u16::from_be_bytes([hdr[10], hdr[11]]);
    hdr[10..12].copy_from_slice(&[0, 0]);
    r.push(
        "ip.checksum",
        checksum_note(sent, checksum::internet_checksum(&hdr)),
    );
    r.push("ip.src", src.to_string());
    r.push("ip.dst", dst.to_string());
    if ihl > 5 {
        r.push("ip.options", hex(options));
    }
    if ihl < 5 || flags & 0x1fff != 0 {
        let rest = &r.data[r.pos..];
        r.pos = r.data.len();
        r.push("payload", hex(rest));
        return Some(());
    }
    // The transport segment ends at the IPv4 total length (or at the frame end if shorter).
    let seg_end = (start + total).clamp(r.pos, r.data.len());
    decode_transport(r, Pseudo::V4(src, dst), proto, seg_end)
}

/// Decodes the upper-layer segment at `r.pos`, which ends at `seg_end` (the IP length,
/// clamped to the frame), its checksum checked under `pseudo`.
pub(super) fn decode_transport(
    r: &mut Reader,
    pseudo: Pseudo,
    proto: u8,
    seg_end: usize,
) -> Option<()> {
    let seg_end = seg_end.max(r.pos);
    let segment = &r.data[r.pos..seg_end];
    match (proto, pseudo) {
        (PROTO_TCP, _) => decode_tcp(r, pseudo, segment, seg_end),
        (PROTO_UDP, _) => decode_udp(r, pseudo, segment, seg_end),
        (PROTO_ICMP, Pseudo::V4(..)) => decode_icmp(r, None, segment, seg_end),
        (PROTO_ICMPV6, Pseudo::V6(..)) => decode_icmp(r, Some(pseudo), segment, seg_end),
        _ => {
            finish_segment(r, seg_end);
            Some(())
        }
    }
}

pub(super) fn checksum_note(sent: u16, want: u16) -> String {
    if sent == want {
        format!("0x{sent:04x} (ok)")
    } else {
        format!("0x{sent:04x} (BAD, want 0x{want:04x})")
    }
}

/// A copy of `seg` with the checksum field at `at` zeroed, if the segment holds it.
fn zeroed(seg: &[u8], at: usize) -> Option<Vec<u8>> {
    let mut copy = seg.to_vec();
    copy.get_mut(at..at + 2)?.copy_from_slice(&[0, 0]);
    Some(copy)
}

fn short_segment() -> String {
    "(the IP length ends inside this header)".to_string()
}

pub(super) fn finish_segment(r: &mut Reader, seg_end: usize) {
    let payload = &r.data[r.pos.min(seg_end)..seg_end];
    r.push("payload", hex(payload));
    r.pos = seg_end;
    if seg_end < r.data.len() {
        let trailer = &r.data[seg_end..];
        r.push("trailer", hex(trailer));
        r.pos = r.data.len();
    }
}

fn decode_tcp(r: &mut Reader, pseudo: Pseudo, seg: &[u8], seg_end: usize) -> Option<()> {
    let h = r.take(20, "tcp header")?;
    let doff = usize::from(h[12] >> 4);
    r.push("tcp.sport", u16::from_be_bytes([h[0], h[1]]).to_string());
    r.push("tcp.dport", u16::from_be_bytes([h[2], h[3]]).to_string());
    r.push(
        "tcp.seq",
        u32::from_be_bytes([h[4], h[5], h[6], h[7]]).to_string(),
    );
    r.push(
        "tcp.ack",
        u32::from_be_bytes([h[8], h[9], h[10], h[11]]).to_string(),
    );
    r.push("tcp.doff", doff.to_string());
    r.push("tcp.flags", tcp_flags(h[13]));
    r.push("tcp.window", u16::from_be_bytes([h[14], h[15]]).to_string());
    let sent = u16::from_be_bytes([h[16], h[17]]);
    let note = zeroed(seg, 16).map_or_else(short_segment, |copy| {
        checksum_note(sent, pseudo.checksum(PROTO_TCP, &copy))
    });
    r.push("tcp.checksum", note);
    if doff > 5 {
        let opts = r.take((doff - 5) * 4, "tcp options")?;
        r.push("tcp.options", hex(opts));
    }
    finish_segment(r, seg_end);
    Some(())
}

fn tcp_flags(f: u8) -> String {
    let names = [
        (0x01, "FIN"),
        (0x02, "SYN"),
        (0x04, "RST"),
        (0x08, "PSH"),
        (0x10, "ACK"),
        (0x20, "URG"),
    ];
    let set: Vec<&str> = names
        .iter()
        .filter(|(bit, _)| f & bit != 0)
        .map(|(_, n)| *n)
        .collect();
    format!("0x{f:02x} [{}]", set.join("|"))
}

fn decode_udp(r: &mut Reader, pseudo: Pseudo, seg: &[u8], seg_end: usize) -> Option<()> {
    let h = r.take(8, "udp header")?;
    r.push("udp.sport", u16::from_be_bytes([h[0], h[1]]).to_string());
    r.push("udp.dport", u16::from_be_bytes([h[2], h[3]]).to_string());
    r.push("udp.len", u16::from_be_bytes([h[4], h[5]]).to_string());
    let sent = u16::from_be_bytes([h[6], h[7]]);
    let note = match (sent, pseudo) {
        (0, Pseudo::V4(..)) => "0x0000 (none)".to_string(),
        (0, Pseudo::V6(..)) => "0x0000 (none: invalid over IPv6)".to_string(),
        _ => zeroed(seg, 6).map_or_else(short_segment, |copy| {
            let c = match pseudo.checksum(PROTO_UDP, &copy) {
                0 => 0xffff,
                c => c,
            };
            checksum_note(sent, c)
        }),
    };
    r.push("udp.checksum", note);
    finish_segment(r, seg_end);
    Some(())
}

/// ICMP (no pseudo-header) or ICMPv6 (`pseudo` given, fields named `icmp6.*`).
fn decode_icmp(r: &mut Reader, pseudo: Option<Pseudo>, seg: &[u8], seg_end: usize) -> Option<()> {
    let name = if pseudo.is_some() { "icmp6" } else { "icmp" };
    let h = r.take(8, &format!("{name} header"))?;
    r.push(&format!("{name}.type"), h[0].to_string());
    r.push(&format!("{name}.code"), h[1].to_string());
    let sent = u16::from_be_bytes([h[2], h[3]]);
    let note = zeroed(seg, 2).map_or_else(short_segment, |copy| {
        let want = match pseudo {
            Some(p) => p.checksum(PROTO_ICMPV6, &copy),
            None => checksum::internet_checksum(&copy),
        };
        checksum_note(sent, want)
    });
    r.push(&format!("{name}.checksum"), note);
    r.push(
        &format!("{name}.id"),
        u16::from_be_bytes([h[4], h[5]]).to_string(),
    );
    r.push(
        &format!("{name}.seq"),
        u16::from_be_bytes([h[6], h[7]]).to_string(),
    );
    finish_segment(r, seg_end);
    Some(())
}

/// Compares two frames. `None` when they are byte-identical; otherwise one line per field
/// that differs ("  ip.ttl: expected 63, got 64"), fields present on one side only included.
pub fn diff(expected: &[u8], actual: &[u8]) -> Option<String> {
    if expected == actual {
        return None;
    }
    let (e, a) = (describe(expected), describe(actual));
    let mut out = String::new();
    for (field, want) in &e {
        match a.iter().find(|(f, _)| f == field) {
            Some((_, got)) if got == want => {}
            Some((_, got)) => {
                let _ = writeln!(out, "  {field}: expected {want}, got {got}");
            }
            None => {
                let _ = writeln!(out, "  {field}: expected {want}, got (absent)");
            }
        }
    }
    for (field, got) in &a {
        if !e.iter().any(|(f, _)| f == field) {
            let _ = writeln!(out, "  {field}: expected (absent), got {got}");
        }
    }
    if out.is_empty() {
        let _ = writeln!(
            out,
            "  bytes differ: expected {}\n               got      {}",
            hex(expected),
            hex(actual)
        );
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::super::{Frame, TCP_SYN, TPID_8021Q};
    use super::*;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn field<'a>(f: &'a Fields, name: &str) -> &'a str {
        f.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("(absent)")
    }

    #[test]
    fn describes_a_tagged_tcp_frame_with_valid_checksums() {
        let f = Frame::tcp(
            (A, B),
            (Ipv4Addr::new(10, 0, 0, 2), 4000),
            (Ipv4Addr::new(10, 99, 0, 1), 80),
            TCP_SYN,
        )
        .tagged(TPID_8021Q, 42)
        .to_bytes();
        let d = describe(&f);
        assert_eq!(field(&d, "vlan[0]"), "tpid 0x8100 vid 42 pcp 0");
        assert_eq!(field(&d, "ip.dst"), "10.99.0.1");
        assert_eq!(field(&d, "tcp.flags"), "0x02 [SYN]");
        assert!(field(&d, "ip.checksum").ends_with("(ok)"));
        assert!(field(&d, "tcp.checksum").ends_with("(ok)"));
    }

    #[test]
    fn diff_names_the_changed_fields_and_flags_a_bad_checksum() {
        let base = Frame::tcp(
            (A, B),
            (Ipv4Addr::new(10, 0, 0, 2), 4000),
            (Ipv4Addr::new(10, 99, 0, 1), 80),
            TCP_SYN,
        );
        let want = base.clone().with_ttl(63).to_bytes();
        let mut got = base.to_bytes();
        got[14 + 8] = 62; // wrong TTL, stale checksum
        let d = diff(&want, &got).unwrap_or_default();
        assert!(d.contains("ip.ttl: expected 63, got 62"), "{d}");
        assert!(d.contains("BAD"), "{d}");
        assert!(diff(&want, &want).is_none());
    }

    #[test]
    fn truncated_frames_decode_without_panicking() {
        let f = Frame::tcp(
            (A, B),
            (Ipv4Addr::new(10, 0, 0, 2), 4000),
            (Ipv4Addr::new(10, 99, 0, 1), 80),
            TCP_SYN,
        )
        .to_bytes();
        for len in 0..f.len() {
            let d = describe(&f[..len]);
            assert!(d.iter().any(|(n, _)| n == "truncated"), "len {len}: {d:?}");
        }
    }
}
