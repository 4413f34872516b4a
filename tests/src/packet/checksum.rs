//! Internet checksums computed from scratch (RFC 1071), the oracle for the XDP program's
//! incremental updates (RFC 1624): a fixture's expected frame never reuses an input checksum.
//! TCP, UDP and ICMPv6 over IPv6 use the IPv6 pseudo-header (RFC 8200 section 8.1).

use std::net::{Ipv4Addr, Ipv6Addr};

/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;
/// IP protocol number of ICMP.
pub const PROTO_ICMP: u8 = 1;
/// IPv6 next-header number of ICMPv6.
pub const PROTO_ICMPV6: u8 = 58;

/// One's-complement sum of `data` as big-endian 16-bit words (an odd last byte is padded
/// with zero), added to `initial`, not yet folded: callers chain several buffers.
pub fn sum_words(initial: u64, data: &[u8]) -> u64 {
    let mut sum = initial;
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u64::from(*last) << 8;
    }
    sum
}

/// Folds the carries of a wide sum into 16 bits (end-around carry).
pub fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The checksum of `data` (IPv4 header, ICMP message): complement of the folded sum.
/// The checksum field inside `data` must be zero when computing, or the result is 0 when
/// verifying a correct buffer.
pub fn internet_checksum(data: &[u8]) -> u16 {
    !fold(sum_words(0, data))
}

/// Sum of the IPv4 pseudo-header used by TCP and UDP.
fn pseudo_header_sum(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: usize) -> u64 {
    let mut pseudo = [0u8; 12];
    pseudo[0..4].copy_from_slice(&src.octets());
    pseudo[4..8].copy_from_slice(&dst.octets());
    pseudo[9] = proto;
    // A segment longer than 65535 bytes cannot be in an IPv4 packet; the builder never makes one.
    pseudo[10..12].copy_from_slice(&(len as u16).to_be_bytes());
    sum_words(0, &pseudo)
}

/// TCP checksum of `segment` (header with a zero checksum field, plus payload).
pub fn tcp_checksum(src: Ipv4Addr, dst: Ipv4Addr, segment: &[u8]) -> u16 {
    let sum = pseudo_header_sum(src, dst, PROTO_TCP, segment.len());
    !fold(sum_words(sum, segment))
}

/// UDP checksum of `datagram` (header with a zero checksum field, plus payload). A computed
/// zero is sent as 0xffff, because a zero on the wire means "no checksum" (RFC 768).
pub fn udp_checksum(src: Ipv4Addr, dst: Ipv4Addr, datagram: &[u8]) -> u16 {
    let sum = pseudo_header_sum(src, dst, PROTO_UDP, datagram.len());
    match !fold(sum_words(sum, datagram)) {
        0 => 0xffff,
        c => c,
    }
}

/// True when a received TCP/UDP segment (checksum field included) verifies against its
/// pseudo-header: the complemented sum is zero.
pub fn l4_verifies(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, segment: &[u8]) -> bool {
    let sum = pseudo_header_sum(src, dst, proto, segment.len());
    !fold(sum_words(sum, segment)) == 0
}

/// Sum of the IPv6 pseudo-header (RFC 8200 section 8.1): source, destination, the 32-bit
/// upper-layer packet length (the segment alone, without extension headers), three zero
/// bytes and the upper-layer next header (6, 17 or 58, never an extension header's).
pub fn pseudo_header_sum6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, len: usize) -> u64 {
    let mut pseudo = [0u8; 40];
    pseudo[0..16].copy_from_slice(&src.octets());
    pseudo[16..32].copy_from_slice(&dst.octets());
    pseudo[32..36].copy_from_slice(&(len as u32).to_be_bytes());
    pseudo[39] = next_header;
    sum_words(0, &pseudo)
}

/// The addresses a transport checksum covers: IPv4's or IPv6's pseudo-header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pseudo {
    /// IPv4 source and destination.
    V4(Ipv4Addr, Ipv4Addr),
    /// IPv6 source and (final) destination.
    V6(Ipv6Addr, Ipv6Addr),
}

impl Pseudo {
    /// The pseudo-header sum for an upper-layer `proto` segment of `len` bytes.
    pub fn sum(self, proto: u8, len: usize) -> u64 {
        match self {
            Pseudo::V4(s, d) => pseudo_header_sum(s, d, proto, len),
            Pseudo::V6(s, d) => pseudo_header_sum6(s, d, proto, len),
        }
    }

    /// The checksum of `segment` (its checksum field zero) under this pseudo-header.
    pub fn checksum(self, proto: u8, segment: &[u8]) -> u16 {
        !fold(sum_words(self.sum(proto, segment.len()), segment))
    }

    /// True when a received `segment` (checksum included) sums with its pseudo-header to
    /// 0xffff.
    pub fn verifies(self, proto: u8, segment: &[u8]) -> bool {
        fold(sum_words(self.sum(proto, segment.len()), segment)) == 0xffff
    }
}

/// TCP checksum over IPv6 of `segment` (checksum field zero).
pub fn tcp6_checksum(src: Ipv6Addr, dst: Ipv6Addr, segment: &[u8]) -> u16 {
    Pseudo::V6(src, dst).checksum(PROTO_TCP, segment)
}

/// UDP checksum over IPv6 of `datagram` (checksum field zero). A computed zero is sent as
/// 0xffff; a zero on the wire is invalid in IPv6 (RFC 8200 section 8.1).
pub fn udp6_checksum(src: Ipv6Addr, dst: Ipv6Addr, datagram: &[u8]) -> u16 {
    match Pseudo::V6(src, dst).checksum(PROTO_UDP, datagram) {
        0 => 0xffff,
        c => c,
    }
}

/// ICMPv6 checksum of `message` (checksum field zero): unlike ICMP for IPv4 it covers the
/// pseudo-header, with next header 58 (RFC 4443 section 2.3).
pub fn icmp6_checksum(src: Ipv6Addr, dst: Ipv6Addr, message: &[u8]) -> u16 {
    Pseudo::V6(src, dst).checksum(PROTO_ICMPV6, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 1071 section 3 worked example: the words sum to 0xddf2 (after carries).
    #[test]
    fn rfc1071_example_sum_and_checksum() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum_words(0, &data)), 0xddf2);
        assert_eq!(internet_checksum(&data), 0x220d);
    }

    /// The classic IPv4 header example (192.168.0.1 -> 192.168.0.199, UDP): checksum 0xb861.
    #[test]
    fn ipv4_header_known_vector() {
        let mut hdr = hex("450000730000400040110000c0a80001c0a800c7");
        assert_eq!(internet_checksum(&hdr), 0xb861);
        hdr[10..12].copy_from_slice(&[0xb8, 0x61]);
        assert_eq!(internet_checksum(&hdr), 0, "a correct header verifies to 0");
    }

    /// Captured UDP datagram 10.0.0.1:52716 -> 10.0.0.2:4000, payload "Hello\n" (odd
    /// length: exercises the padding), UDP checksum 0xea66.
    #[test]
    fn udp_known_vector_odd_payload() {
        let mut dgram = hex("cdec0fa0000e000048656c6c6f0a");
        let (src, dst) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(udp_checksum(src, dst, &dgram), 0xea66);
        dgram[6..8].copy_from_slice(&[0xea, 0x66]);
        assert!(l4_verifies(src, dst, PROTO_UDP, &dgram));
    }

    /// Captured TCP SYN with options, 192.168.0.101:59295 -> 192.30.252.154:80, checksum 0x5823.
    #[test]
    fn tcp_known_vector_syn_with_options() {
        let seg = hex(concat!(
            "e79f00505eab226500000000b002ffff00000000",
            "020405b4010303050101080a3a4dbdc50000000004020000"
        ));
        let (src, dst) = (
            Ipv4Addr::new(192, 168, 0, 101),
            Ipv4Addr::new(192, 30, 252, 154),
        );
        assert_eq!(tcp_checksum(src, dst, &seg), 0x5823);
    }

    /// A UDP sum that complements to zero must be sent as 0xffff (0 means "no checksum").
    #[test]
    fn udp_zero_result_is_sent_as_ffff() {
        // Find a payload word that makes the complemented sum zero: the sum must be 0xffff.
        let (src, dst) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut dgram = vec![0x12, 0x34, 0x56, 0x78, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00];
        let partial =
            fold(pseudo_header_sum(src, dst, PROTO_UDP, dgram.len()) + sum_words(0, &dgram));
        let filler = 0xffff - partial;
        dgram[8..10].copy_from_slice(&filler.to_be_bytes());
        assert_eq!(udp_checksum(src, dst, &dgram), 0xffff);
    }

    /// ICMPv6 echo request fd00:c::2 -> fd99::4, id 0x4401, seq 1, no payload, by hand:
    /// source words fd00+000c+0002 = fd0e, destination fd99+0004 = fd9d, length 0008,
    /// next header 003a, message 8000+0000+4401+0001 = c402; total 0x2beef, folded
    /// 0xbef1, complemented 0x410e.
    #[test]
    fn icmp6_echo_known_vector_by_hand() {
        let (src, dst) = (
            "fd00:c::2".parse::<Ipv6Addr>().unwrap(),
            "fd99::4".parse::<Ipv6Addr>().unwrap(),
        );
        let mut msg = vec![128, 0, 0, 0, 0x44, 0x01, 0x00, 0x01];
        assert_eq!(icmp6_checksum(src, dst, &msg), 0x410e);
        msg[2..4].copy_from_slice(&[0x41, 0x0e]);
        let total =
            fold(pseudo_header_sum6(src, dst, PROTO_ICMPV6, msg.len()) + sum_words(0, &msg));
        assert_eq!(total, 0xffff, "message + pseudo-header sum to 0xffff");
        // Without the pseudo-header (IPv4's ICMP rule) the value would differ.
        msg[2..4].copy_from_slice(&[0, 0]);
        assert_ne!(internet_checksum(&msg), 0x410e);
    }

    /// TCP SYN over IPv6 fd00:c::2:41001 -> fd99::1:80, seq 1000, window 64240, by hand:
    /// segment a029+0050+03e8+5002+faf0 = 1ef53, source fd0e, destination fd9a, length
    /// 0014, next header 0006; total 0x3ea15, folded 0xea18, complemented 0x15e7.
    #[test]
    fn tcp6_syn_known_vector_by_hand() {
        let (src, dst) = (
            "fd00:c::2".parse::<Ipv6Addr>().unwrap(),
            "fd99::1".parse::<Ipv6Addr>().unwrap(),
        );
        let mut seg = hex("a0290050000003e8000000005002faf000000000");
        assert_eq!(tcp6_checksum(src, dst, &seg), 0x15e7);
        seg[16..18].copy_from_slice(&[0x15, 0xe7]);
        assert!(Pseudo::V6(src, dst).verifies(PROTO_TCP, &seg));
        let total = fold(pseudo_header_sum6(src, dst, PROTO_TCP, seg.len()) + sum_words(0, &seg));
        assert_eq!(total, 0xffff);
    }

    /// The IPv6 pseudo-header carries a 32-bit length: a length above 65535 (jumbogram
    /// sizes) is not truncated to 16 bits.
    #[test]
    fn ipv6_pseudo_header_length_is_32_bits() {
        let a = Ipv6Addr::LOCALHOST;
        assert_eq!(
            pseudo_header_sum6(a, a, PROTO_UDP, 0x1_0002),
            pseudo_header_sum6(a, a, PROTO_UDP, 0) + 1 + 2
        );
    }

    /// A UDP-over-IPv6 sum that complements to zero is sent as 0xffff, which still verifies.
    #[test]
    fn udp6_zero_result_is_sent_as_ffff() {
        let (src, dst) = (
            "fd00:c::2".parse::<Ipv6Addr>().unwrap(),
            "fd99::2".parse::<Ipv6Addr>().unwrap(),
        );
        let mut dgram = vec![0x12, 0x34, 0x00, 0x35, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00];
        let partial =
            fold(pseudo_header_sum6(src, dst, PROTO_UDP, dgram.len()) + sum_words(0, &dgram));
        dgram[8..10].copy_from_slice(&(0xffff - partial).to_be_bytes());
        assert_eq!(udp6_checksum(src, dst, &dgram), 0xffff);
        dgram[6..8].copy_from_slice(&[0xff, 0xff]);
        assert!(Pseudo::V6(src, dst).verifies(PROTO_UDP, &dgram));
    }
}
