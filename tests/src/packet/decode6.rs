//! Field-by-field decoding of IPv6: the fixed header ("ip6.*"), each extension header
//! ("ext[N]") and then the transport part under the IPv6 pseudo-header. Never panics on
//! short input; a payload length that runs past the frame is pointed out.

use std::net::Ipv6Addr;

use super::checksum::Pseudo;
use super::decode::{Reader, decode_transport, finish_segment, hex};
use super::ipv6::{NH_AH, NH_DEST_OPTS, NH_FRAGMENT, NH_HOP_BY_HOP, NH_ROUTING};

/// More headers than any fixture builds; the decoder stops walking there.
const MAX_DECODED_EXT: usize = 16;

fn addr6(b: &[u8]) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[..16]);
    Ipv6Addr::from(a)
}

/// Decodes the IPv6 packet at `r.pos`.
pub(super) fn decode_ipv6(r: &mut Reader) -> Option<()> {
    let start = r.pos;
    let h = r.take(40, "ipv6 header")?;
    let first = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    let plen = usize::from(u16::from_be_bytes([h[4], h[5]]));
    let version = first >> 28;
    let (src, dst) = (addr6(&h[8..24]), addr6(&h[24..40]));
    r.push("ip6.version", version.to_string());
    r.push(
        "ip6.traffic_class",
        format!("0x{:02x}", (first >> 20) & 0xff),
    );
    r.push("ip6.flow_label", format!("0x{:05x}", first & 0x000f_ffff));
    let room = r.data.len() - r.pos;
    let plen_note = if plen > room {
        format!("{plen} (runs {} bytes past the frame)", plen - room)
    } else {
        plen.to_string()
    };
    r.push("ip6.payload_len", plen_note);
    r.push("ip6.next_header", h[6].to_string());
    r.push("ip6.hop_limit", h[7].to_string());
    r.push("ip6.src", src.to_string());
    r.push("ip6.dst", dst.to_string());
    let ip_end = (start + 40 + plen).min(r.data.len());
    if version != 6 {
        finish_segment(r, r.data.len());
        return Some(());
    }
    let mut next = h[6];
    for n in 0..MAX_DECODED_EXT {
        let what = format!("ext[{n}]");
        let (len, name) = match next {
            NH_HOP_BY_HOP | NH_DEST_OPTS | NH_ROUTING => {
                let b = r.data.get(r.pos..r.pos + 2);
                let len = b.map_or(8, |b| (usize::from(b[1]) + 1) * 8);
                let name = match next {
                    NH_HOP_BY_HOP => "hop-by-hop",
                    NH_DEST_OPTS => "destination options",
                    _ => "routing",
                };
                (len, name)
            }
            NH_FRAGMENT => (8, "fragment"),
            NH_AH => {
                let b = r.data.get(r.pos..r.pos + 2);
                (b.map_or(8, |b| (usize::from(b[1]) + 2) * 4), "ah")
            }
            _ => break,
        };
        let b = r.take(len, &format!("{what} {name}"))?;
        let detail = match next {
            NH_ROUTING => format!(" type {} segments_left {}", b[2], b[3]),
            NH_FRAGMENT => {
                let off = u16::from_be_bytes([b[2], b[3]]);
                let id = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
                format!(" offset {} M={} id 0x{id:08x}", off >> 3, off & 1)
            }
            _ => String::new(),
        };
        r.push(
            &what,
            format!("{name} next {} len {len}{detail}: {}", b[0], hex(b)),
        );
        let was = next;
        next = b[0];
        if was == NH_FRAGMENT {
            // A fragment's transport part is incomplete: show it as bytes.
            finish_segment(r, ip_end);
            return Some(());
        }
    }
    decode_transport(r, Pseudo::V6(src, dst), next, ip_end)
}

#[cfg(test)]
mod tests {
    use super::super::decode::{Fields, describe, diff};
    use super::super::ipv6::ExtHeader;
    use super::super::{Frame, L4, TCP_ACK, TCP_SYN};
    use super::*;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn field<'a>(f: &'a Fields, name: &str) -> &'a str {
        f.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("(absent)")
    }

    fn a6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    fn tcp() -> Frame {
        Frame::tcp6(
            (A, B),
            (a6("fd00:c::2"), 41001),
            (a6("fd99::1"), 80),
            TCP_SYN,
        )
    }

    #[test]
    fn describes_ipv6_with_extensions_and_valid_checksums() {
        let f = tcp()
            .with_ext(vec![ExtHeader::HopByHop(vec![]), ExtHeader::srh(0, &[])])
            .with_padding(&[0, 0])
            .to_bytes();
        let d = describe(&f);
        assert_eq!(field(&d, "ip6.version"), "6");
        assert_eq!(field(&d, "ip6.next_header"), "0");
        assert_eq!(field(&d, "ip6.dst"), "fd99::1");
        assert_eq!(field(&d, "ip6.payload_len"), "36");
        assert!(
            field(&d, "ext[0]").starts_with("hop-by-hop next 43 len 8"),
            "{d:?}"
        );
        assert!(
            field(&d, "ext[1]").starts_with("routing next 6 len 8 type 4 segments_left 0"),
            "{d:?}"
        );
        assert_eq!(field(&d, "tcp.dport"), "80");
        assert!(field(&d, "tcp.checksum").ends_with("(ok)"), "{d:?}");
        assert_eq!(field(&d, "trailer"), "0000");
    }

    #[test]
    fn icmp6_is_checked_with_the_pseudo_header() {
        let f = Frame::icmp6_echo((A, B), a6("fd00:c::2"), a6("fd99::4"), false, 9).to_bytes();
        let d = describe(&f);
        assert_eq!(field(&d, "icmp6.type"), "128");
        assert!(field(&d, "icmp6.checksum").ends_with("(ok)"), "{d:?}");
        let mut bad = f.clone();
        bad[38 + 15] = 5; // destination changed, checksum left stale
        assert!(field(&describe(&bad), "icmp6.checksum").contains("BAD"));
    }

    #[test]
    fn diff_names_ipv6_fields() {
        let base = tcp();
        let want = base.clone().with_hop_limit(63).to_bytes();
        let got = base.clone().with_dst6(a6("fd00:b::11"), 80).to_bytes();
        let d = diff(&want, &got).unwrap_or_default();
        assert!(d.contains("ip6.hop_limit: expected 63, got 64"), "{d}");
        assert!(
            d.contains("ip6.dst: expected fd99::1, got fd00:b::11"),
            "{d}"
        );
        let long = base.with_payload_len(21).to_bytes();
        assert!(
            field(&describe(&long), "ip6.payload_len").contains("runs 1 bytes past"),
            "{:?}",
            describe(&long)
        );
    }

    #[test]
    fn udp6_zero_checksum_is_flagged_and_fragments_stop_the_walk() {
        let mut f = Frame::udp6((A, B), (a6("::1"), 1), (a6("::2"), 2), b"x");
        if let L4::Udp(u) = f.l4() {
            u.no_checksum = true;
        }
        let d = describe(&f.to_bytes());
        assert!(
            field(&d, "udp.checksum").contains("invalid over IPv6"),
            "{d:?}"
        );
        let frag = f.with_ext(vec![ExtHeader::Fragment {
            offset: 0,
            more: true,
            ident: 1,
        }]);
        let d = describe(&frag.to_bytes());
        assert!(field(&d, "ext[0]").contains("offset 0 M=1"), "{d:?}");
        assert_eq!(field(&d, "udp.sport"), "(absent)");
    }

    #[test]
    fn truncated_ipv6_frames_decode_without_panicking() {
        let f = Frame::tcp6((A, B), (a6("fd00:c::2"), 1), (a6("fd99::1"), 2), TCP_ACK)
            .with_ext(vec![
                ExtHeader::HopByHop(vec![]),
                ExtHeader::DestOpts(vec![0; 10]),
                ExtHeader::ah(1, 2),
            ])
            .to_bytes();
        for len in 0..f.len() {
            let d = describe(&f[..len]);
            assert!(
                d.iter()
                    .any(|(n, v)| n == "truncated" || v.contains("past the frame")),
                "len {len}: {d:?}"
            );
        }
        // A header length far past the end.
        let mut bogus = f.clone();
        bogus[54 + 1] = 200;
        let d = describe(&bogus);
        assert!(d.iter().any(|(n, _)| n == "truncated"), "{d:?}");
    }
}
