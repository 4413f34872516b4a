//! ICMP echo packets: building requests and recognising the replies (and errors) that belong
//! to one check. Pure functions, so they are tested without sockets.

/// ICMPv4 echo reply / destination unreachable / echo request types.
const V4_REPLY: u8 = 0;
const V4_UNREACHABLE: u8 = 3;
const V4_REQUEST: u8 = 8;
/// ICMPv6 destination unreachable / echo request / echo reply types.
const V6_UNREACHABLE: u8 = 1;
const V6_REQUEST: u8 = 128;
const V6_REPLY: u8 = 129;
/// Fixed IPv6 header length (the kernel hands raw ICMPv6 sockets no IP header, but error
/// messages embed the original one).
const V6_HEADER: usize = 40;

/// What one received ICMP message says about an echo exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Echo {
    /// An echo reply with this identifier and sequence number.
    Reply { ident: u16, seq: u16 },
    /// A destination-unreachable error about our request with this identifier and sequence.
    Unreachable { ident: u16, seq: u16, code: u8 },
}

/// Builds an echo request; the checksum is filled for IPv4 (the kernel fills ICMPv6's).
pub(crate) fn echo_request(v6: bool, ident: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut packet = Vec::with_capacity(8 + payload.len());
    packet.push(if v6 { V6_REQUEST } else { V4_REQUEST });
    packet.push(0);
    packet.extend_from_slice(&[0, 0]);
    packet.extend_from_slice(&ident.to_be_bytes());
    packet.extend_from_slice(&seq.to_be_bytes());
    packet.extend_from_slice(payload);
    if !v6 {
        let sum = checksum(&packet);
        packet[2..4].copy_from_slice(&sum.to_be_bytes());
    }
    packet
}

/// The Internet checksum (RFC 1071).
pub(crate) fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Parses one received datagram. `with_ip_header` is true for raw IPv4 sockets, which
/// deliver the IP header too. Anything that is not an echo reply or an error about an echo
/// request is None.
pub(crate) fn parse(packet: &[u8], v6: bool, with_ip_header: bool) -> Option<Echo> {
    let icmp = if with_ip_header {
        skip_ipv4_header(packet)?
    } else {
        packet
    };
    let (kind, code) = (*icmp.first()?, *icmp.get(1)?);
    let (reply, unreachable) = if v6 {
        (V6_REPLY, V6_UNREACHABLE)
    } else {
        (V4_REPLY, V4_UNREACHABLE)
    };
    if kind == reply && code == 0 {
        let (ident, seq) = ident_seq(icmp)?;
        return Some(Echo::Reply { ident, seq });
    }
    if kind == unreachable {
        // The error carries the original IP header and the first 8 bytes of our request.
        let inner = icmp.get(8..)?;
        let original = if v6 {
            inner.get(V6_HEADER..)?
        } else {
            skip_ipv4_header(inner)?
        };
        let request = if v6 { V6_REQUEST } else { V4_REQUEST };
        if *original.first()? != request {
            return None;
        }
        let (ident, seq) = ident_seq(original)?;
        return Some(Echo::Unreachable { ident, seq, code });
    }
    None
}

fn skip_ipv4_header(packet: &[u8]) -> Option<&[u8]> {
    let first = *packet.first()?;
    if first >> 4 != 4 {
        return None;
    }
    packet.get(usize::from(first & 0x0f) * 4..)
}

fn ident_seq(icmp: &[u8]) -> Option<(u16, u16)> {
    let b = icmp.get(4..8)?;
    Some((
        u16::from_be_bytes([b[0], b[1]]),
        u16::from_be_bytes([b[2], b[3]]),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s_hc2_checksum_of_request_verifies_to_zero() {
        let req = echo_request(false, 0x1234, 7, b"lb-health");
        assert_eq!(checksum(&req), 0);
        assert_eq!(&req[4..8], &[0x12, 0x34, 0, 7]);
    }

    #[test]
    fn s_hc2_reply_matched_by_ident_and_seq_with_ip_header() {
        let mut reply = echo_request(false, 0xabcd, 9, b"x");
        reply[0] = V4_REPLY;
        let mut ip = vec![0x45u8];
        ip.extend_from_slice(&[0; 19]);
        ip.extend_from_slice(&reply);
        assert_eq!(
            parse(&ip, false, true),
            Some(Echo::Reply {
                ident: 0xabcd,
                seq: 9
            })
        );
        // Our own request looped back on a raw socket is not a reply.
        let req = echo_request(false, 0xabcd, 9, b"x");
        assert_eq!(parse(&req, false, false), None);
        assert_eq!(parse(&[0x45, 0], false, true), None);
        assert_eq!(parse(&[], true, false), None);
    }

    #[test]
    fn s_hc2_unreachable_names_the_original_request() {
        let original = echo_request(false, 0x0101, 3, b"");
        let mut err = vec![V4_UNREACHABLE, 1, 0, 0, 0, 0, 0, 0, 0x45];
        err.extend_from_slice(&[0; 19]);
        err.extend_from_slice(&original);
        assert_eq!(
            parse(&err, false, false),
            Some(Echo::Unreachable {
                ident: 0x0101,
                seq: 3,
                code: 1
            })
        );
        let mut reply6 = echo_request(true, 5, 6, b"");
        reply6[0] = V6_REPLY;
        assert_eq!(
            parse(&reply6, true, false),
            Some(Echo::Reply { ident: 5, seq: 6 })
        );
    }
}
