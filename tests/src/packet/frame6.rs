//! IPv6 frames: the builders parallel to the IPv4 ones (`Frame::tcp6`, `Frame::udp6`,
//! `Frame::icmp6_echo`) and the fields a fixture changes on them.

use std::net::Ipv6Addr;

use super::ipv6::{ExtHeader, Ipv6, icmp6_echo_type};
use super::l4::{Icmp, L4, Tcp, Udp};
use super::{Body, Frame, Mac, TCP_ACK};

impl Frame {
    /// An IPv6 frame between two MACs, untagged.
    pub fn ipv6(src_mac: Mac, dst_mac: Mac, ip: Ipv6) -> Self {
        Self {
            dst_mac,
            src_mac,
            vlans: Vec::new(),
            body: Body::Ipv6(ip),
            padding: Vec::new(),
        }
    }

    /// A TCP segment over IPv6 with `flags` (seq 1000, ack 0 unless ACK is set, then
    /// 2000, window 64240), hop limit 64.
    pub fn tcp6(macs: (Mac, Mac), src: (Ipv6Addr, u16), dst: (Ipv6Addr, u16), flags: u8) -> Self {
        let tcp = Tcp {
            sport: src.1,
            dport: dst.1,
            seq: 1000,
            ack: if flags & TCP_ACK != 0 { 2000 } else { 0 },
            flags,
            window: 64240,
            options: Vec::new(),
            payload: Vec::new(),
        };
        Self::ipv6(macs.0, macs.1, Ipv6::new(src.0, dst.0, L4::Tcp(tcp)))
    }

    /// A UDP datagram over IPv6 with a checksum (mandatory in IPv6) and `payload`.
    pub fn udp6(
        macs: (Mac, Mac),
        src: (Ipv6Addr, u16),
        dst: (Ipv6Addr, u16),
        payload: &[u8],
    ) -> Self {
        let udp = Udp {
            sport: src.1,
            dport: dst.1,
            no_checksum: false,
            payload: payload.to_vec(),
        };
        Self::ipv6(macs.0, macs.1, Ipv6::new(src.0, dst.0, L4::Udp(udp)))
    }

    /// An ICMPv6 echo request (`reply` false, type 128) or reply (129), seq 1, with a
    /// 16-byte payload.
    pub fn icmp6_echo(
        macs: (Mac, Mac),
        src: Ipv6Addr,
        dst: Ipv6Addr,
        reply: bool,
        ident: u16,
    ) -> Self {
        let icmp = Icmp {
            kind: icmp6_echo_type(reply),
            code: 0,
            ident,
            seq: 1,
            payload: (0u8..16).collect(),
        };
        Self::ipv6(macs.0, macs.1, Ipv6::new(src, dst, L4::Icmp(icmp)))
    }

    /// The IPv6 packet; panics on a non-IPv6 frame (fixture code, built by the caller).
    pub fn ip6(&mut self) -> &mut Ipv6 {
        match &mut self.body {
            Body::Ipv6(ip) => ip,
            _ => panic!("frame has no IPv6 body"),
        }
    }

    /// Sets the hop limit of an IPv6 frame.
    pub fn with_hop_limit(mut self, hop_limit: u8) -> Self {
        self.ip6().hop_limit = hop_limit;
        self
    }

    /// Sets the IPv6 destination address and, for TCP/UDP, the destination port.
    pub fn with_dst6(mut self, addr: Ipv6Addr, port: u16) -> Self {
        let ip = self.ip6();
        ip.dst = addr;
        ip.l4.set_dport(port);
        self
    }

    /// Sets the IPv6 source address and, for TCP/UDP, the source port.
    pub fn with_src6(mut self, addr: Ipv6Addr, port: u16) -> Self {
        let ip = self.ip6();
        ip.src = addr;
        ip.l4.set_sport(port);
        self
    }

    /// Replaces the extension-header chain.
    pub fn with_ext(mut self, ext: Vec<ExtHeader>) -> Self {
        self.ip6().ext = ext;
        self
    }

    /// Writes `len` as the payload length instead of the real one (malformed fixtures).
    pub fn with_payload_len(mut self, len: u16) -> Self {
        self.ip6().payload_len_override = Some(len);
        self
    }

    /// The upper-layer header's offset from the frame start (after tags and extensions).
    pub fn l4_offset(&self) -> usize {
        let Body::Ipv6(ip) = &self.body else {
            panic!("frame has no IPv6 body");
        };
        let l4 = ip.l4.to_bytes(ip.pseudo()).len();
        14 + 4 * self.vlans.len() + ip.to_bytes().len() - l4
    }
}

#[cfg(test)]
mod tests {
    use super::super::checksum::{
        PROTO_ICMPV6, PROTO_TCP, PROTO_UDP, fold, pseudo_header_sum6, sum_words,
    };
    use super::super::ipv6::{NH_DEST_OPTS, NH_HOP_BY_HOP, NH_ROUTING};
    use super::super::{ETH_P_IPV6, TCP_SYN, TPID_8021Q};
    use super::*;

    const A: Mac = [2, 0, 0, 0, 0, 1];
    const B: Mac = [2, 0, 0, 0, 0, 2];

    fn a6(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    /// Sums an upper-layer segment with its pseudo-header: 0xffff when it verifies.
    fn total(src: Ipv6Addr, dst: Ipv6Addr, proto: u8, seg: &[u8]) -> u16 {
        fold(pseudo_header_sum6(src, dst, proto, seg.len()) + sum_words(0, seg))
    }

    /// The hand-computed TCP SYN vector of `checksum`'s tests, built as a whole frame.
    #[test]
    fn tcp6_frame_layout_and_known_checksum() {
        let f = Frame::tcp6(
            (A, B),
            (a6("fd00:c::2"), 41001),
            (a6("fd99::1"), 80),
            TCP_SYN,
        )
        .to_bytes();
        assert_eq!(f.len(), 14 + 40 + 20);
        assert_eq!(&f[12..14], &ETH_P_IPV6.to_be_bytes());
        assert_eq!(&f[14..18], &[0x60, 0, 0, 0], "version 6, tc 0, flow 0");
        assert_eq!(&f[18..20], &[0, 20], "payload length");
        assert_eq!(f[20], PROTO_TCP);
        assert_eq!(f[21], 64, "hop limit");
        assert_eq!(&f[22..38], &a6("fd00:c::2").octets());
        assert_eq!(&f[38..54], &a6("fd99::1").octets());
        assert_eq!(&f[54 + 16..54 + 18], &[0x15, 0xe7], "TCP checksum");
        assert_eq!(
            total(a6("fd00:c::2"), a6("fd99::1"), PROTO_TCP, &f[54..]),
            0xffff
        );
    }

    /// The hand-computed ICMPv6 vector (no payload), then the builder's echo request.
    #[test]
    fn icmp6_echo_known_checksum_and_pseudo_header() {
        let (src, dst) = (a6("fd00:c::2"), a6("fd99::4"));
        let mut f = Frame::icmp6_echo((A, B), src, dst, false, 0x4401);
        if let L4::Icmp(i) = f.l4() {
            i.payload.clear();
        }
        let b = f.to_bytes();
        assert_eq!(b[20], PROTO_ICMPV6);
        assert_eq!(&b[54..62], &[128, 0, 0x41, 0x0e, 0x44, 0x01, 0, 1]);
        let full = Frame::icmp6_echo((A, B), src, dst, true, 0x4401).to_bytes();
        assert_eq!(full[54], 129, "echo reply type");
        assert_eq!(total(src, dst, PROTO_ICMPV6, &full[54..]), 0xffff);
        // The same message towards another address needs another checksum.
        let moved = Frame::icmp6_echo((A, B), src, a6("fd00:b::11"), true, 0x4401).to_bytes();
        assert_ne!(&moved[56..58], &full[56..58]);
        assert_eq!(
            total(src, a6("fd00:b::11"), PROTO_ICMPV6, &moved[54..]),
            0xffff
        );
    }

    /// Extension headers: 8-byte multiples, chained next headers, the payload length
    /// covers them, and the transport checksum uses the upper-layer length and protocol.
    #[test]
    fn extension_chain_is_linked_and_checksum_skips_it() {
        let (src, dst) = (a6("fd00:c::2"), a6("fd99::2"));
        let f = Frame::udp6((A, B), (src, 5000), (dst, 53), b"abc").with_ext(vec![
            ExtHeader::HopByHop(vec![]),
            ExtHeader::DestOpts(vec![0x1e, 3, 1, 2, 3]),
            ExtHeader::srh(0, &[dst]),
        ]);
        let b = f.to_bytes();
        assert_eq!(b[20], NH_HOP_BY_HOP);
        let hbh = &b[54..62];
        assert_eq!(hbh, &[NH_DEST_OPTS, 0, 1, 4, 0, 0, 0, 0], "PadN to 8 bytes");
        let dst_opts = &b[62..70];
        assert_eq!(dst_opts, &[NH_ROUTING, 0, 0x1e, 3, 1, 2, 3, 0], "Pad1");
        let rh = &b[70..94];
        assert_eq!(
            &rh[..4],
            &[PROTO_UDP, 2, 4, 0],
            "SRH: 24 bytes, segments left 0"
        );
        assert_eq!(&rh[8..24], &dst.octets());
        let udp = &b[94..];
        assert_eq!(udp.len(), 11);
        assert_eq!(u16::from_be_bytes([b[18], b[19]]), 8 + 8 + 24 + 11);
        assert_eq!(f.l4_offset(), 94);
        assert_eq!(total(src, dst, PROTO_UDP, udp), 0xffff);
    }

    #[test]
    fn fragment_and_raw_headers() {
        let f = Frame::udp6((A, B), (a6("::1"), 1), (a6("::2"), 2), b"").with_ext(vec![
            ExtHeader::Fragment {
                offset: 185,
                more: true,
                ident: 0x01020304,
            },
            ExtHeader::ah(0x1000, 7),
        ]);
        let b = f.to_bytes();
        assert_eq!(b[20], 44);
        assert_eq!(&b[54..62], &[51, 0, 0x05, 0xc9, 1, 2, 3, 4]);
        assert_eq!(b[62], PROTO_UDP, "AH's next header");
        assert_eq!(b[63], 4, "AH length: 24 bytes");
        assert_eq!(f.l4_offset(), 54 + 8 + 24);
    }

    /// Deliberate errors are written as asked; padding is after the payload and outside it.
    #[test]
    fn overrides_and_padding() {
        let mut f = Frame::udp6((A, B), (a6("::1"), 1), (a6("::2"), 2), b"")
            .with_payload_len(9)
            .with_padding(&[0xee, 0xee]);
        f.ip6().version_override = Some(4);
        f.ip6().traffic_class = 0xb8;
        f.ip6().flow_label = 0xabcde;
        let b = f.to_bytes();
        assert_eq!(&b[14..18], &[0x4b, 0x8a, 0xbc, 0xde]);
        assert_eq!(&b[18..20], &[0, 9]);
        assert_eq!(b.len(), 14 + 40 + 8 + 2);
        assert_eq!(&b[62..], &[0xee, 0xee]);
        let p = Frame::udp6((A, B), (a6("::1"), 1), (a6("::2"), 2), b"").padded_to(64);
        assert_eq!(p.to_bytes().len(), 64);
        assert_eq!(&p.to_bytes()[18..20], &[0, 8]);
    }

    #[test]
    fn udp6_without_checksum_writes_zero() {
        let mut f = Frame::udp6((A, B), (a6("::1"), 1), (a6("::2"), 2), b"x");
        if let L4::Udp(u) = f.l4() {
            u.no_checksum = true;
        }
        assert_eq!(&f.to_bytes()[60..62], &[0, 0]);
    }

    /// `with_dst6` / `with_src6` change the address and port, and the checksum follows.
    #[test]
    fn rewrites_recompute_checksums() {
        let (c, vip, be) = (a6("fd00:c::2"), a6("fd99::1"), a6("fd00:b::11"));
        let f = Frame::tcp6((A, B), (c, 41001), (vip, 80), TCP_SYN).tagged(TPID_8021Q, 7);
        let nat = f.clone().with_dst6(be, 8080).with_hop_limit(63).to_bytes();
        assert_eq!(&nat[42..58], &be.octets());
        assert_eq!(nat[25], 63);
        assert_eq!(&nat[58 + 2..58 + 4], &8080u16.to_be_bytes());
        assert_eq!(total(c, be, PROTO_TCP, &nat[58..]), 0xffff);
        let rev = f.with_src6(vip, 81).to_bytes();
        assert_eq!(&rev[58..60], &81u16.to_be_bytes());
        assert_eq!(total(vip, vip, PROTO_TCP, &rev[58..]), 0xffff);
    }
}
