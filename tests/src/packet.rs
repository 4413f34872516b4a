//! A small frame builder for the XDP fixtures: Ethernet (+ 802.1Q / 802.1ad tags, trailing
//! padding), IPv4 (options, flags, fragment offset, TTL, id), IPv6 (traffic class, flow
//! label, hop limit, extension headers) and TCP / UDP / ICMP(v6) echo, with every checksum
//! computed from scratch, plus a field-by-field decoder so failures read as a diff.
//!
//! A fixture builds its input frame, clones it, changes the fields the data path must
//! rewrite, and serialises both: the expected frame then carries fresh checksums that the
//! program's incremental updates must reproduce exactly.

pub mod checksum;
pub mod decode;
mod decode6;
mod frame6;
pub mod ipv4;
pub mod ipv6;
pub mod l4;

use std::net::Ipv4Addr;

pub use checksum::{PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP, Pseudo};
pub use decode::{describe, diff};
pub use ipv4::Ipv4;
pub use ipv6::{
    ExtHeader, ICMP6_ECHO_REPLY, ICMP6_ECHO_REQUEST, Ipv6, NH_AH, NH_DEST_OPTS, NH_FRAGMENT,
    NH_HOP_BY_HOP, NH_ROUTING,
};
pub use l4::{Icmp, L4, Tcp, Udp};

/// Ethertype of IPv4.
pub const ETH_P_IPV4: u16 = 0x0800;
/// Ethertype of ARP.
pub const ETH_P_ARP: u16 = 0x0806;
/// Ethertype of IPv6.
pub const ETH_P_IPV6: u16 = 0x86dd;
/// Tag protocol of an 802.1Q (customer) VLAN tag.
pub const TPID_8021Q: u16 = 0x8100;
/// Tag protocol of an 802.1ad (service, QinQ outer) VLAN tag.
pub const TPID_8021AD: u16 = 0x88a8;

/// TCP flag FIN.
pub const TCP_FIN: u8 = 0x01;
/// TCP flag SYN.
pub const TCP_SYN: u8 = 0x02;
/// TCP flag RST.
pub const TCP_RST: u8 = 0x04;
/// TCP flag PSH.
pub const TCP_PSH: u8 = 0x08;
/// TCP flag ACK.
pub const TCP_ACK: u8 = 0x10;

/// A MAC address.
pub type Mac = [u8; 6];

/// One VLAN tag as it sits on the wire after the MAC addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VlanTag {
    /// `TPID_8021Q` or `TPID_8021AD`.
    pub tpid: u16,
    /// Priority, DEI and VLAN id.
    pub tci: u16,
}

/// A whole Ethernet frame.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    /// Destination MAC.
    pub dst_mac: Mac,
    /// Source MAC.
    pub src_mac: Mac,
    /// VLAN tags, outermost first.
    pub vlans: Vec<VlanTag>,
    /// What follows the (last) ethertype.
    pub body: Body,
    /// Bytes after the packet (Ethernet padding or a trailer), not counted by any IP
    /// length field.
    pub padding: Vec<u8>,
}

/// The frame's payload after the Ethernet header and tags.
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    /// An IPv4 packet.
    Ipv4(Ipv4),
    /// An IPv6 packet.
    Ipv6(Ipv6),
    /// Any other ethertype with raw bytes (ARP, LLDP...).
    Raw {
        /// The ethertype.
        ethertype: u16,
        /// The bytes after it.
        bytes: Vec<u8>,
    },
}

impl Frame {
    /// An IPv4 frame between two MACs, untagged.
    pub fn ipv4(src_mac: Mac, dst_mac: Mac, ip: Ipv4) -> Self {
        Self {
            dst_mac,
            src_mac,
            vlans: Vec::new(),
            body: Body::Ipv4(ip),
            padding: Vec::new(),
        }
    }

    /// A TCP segment with `flags` (seq 1000, ack 0 unless ACK is set, then 2000, window 64240).
    pub fn tcp(macs: (Mac, Mac), src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16), flags: u8) -> Self {
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
        Self::ipv4(macs.0, macs.1, Ipv4::new(src.0, dst.0, L4::Tcp(tcp)))
    }

    /// A UDP datagram with a checksum and `payload`.
    pub fn udp(
        macs: (Mac, Mac),
        src: (Ipv4Addr, u16),
        dst: (Ipv4Addr, u16),
        payload: &[u8],
    ) -> Self {
        let udp = Udp {
            sport: src.1,
            dport: dst.1,
            no_checksum: false,
            payload: payload.to_vec(),
        };
        Self::ipv4(macs.0, macs.1, Ipv4::new(src.0, dst.0, L4::Udp(udp)))
    }

    /// An ICMP echo request (`reply` false) or reply with a 16-byte payload.
    pub fn icmp_echo(
        macs: (Mac, Mac),
        src: Ipv4Addr,
        dst: Ipv4Addr,
        reply: bool,
        ident: u16,
    ) -> Self {
        let icmp = Icmp {
            kind: if reply { 0 } else { 8 },
            code: 0,
            ident,
            seq: 1,
            payload: (0u8..16).collect(),
        };
        Self::ipv4(macs.0, macs.1, Ipv4::new(src, dst, L4::Icmp(icmp)))
    }

    /// A frame of another ethertype with raw bytes.
    pub fn raw(macs: (Mac, Mac), ethertype: u16, bytes: Vec<u8>) -> Self {
        Self {
            dst_mac: macs.1,
            src_mac: macs.0,
            vlans: Vec::new(),
            body: Body::Raw { ethertype, bytes },
            padding: Vec::new(),
        }
    }

    /// Adds a VLAN tag inside the existing ones (call outermost first).
    pub fn tagged(mut self, tpid: u16, vid: u16) -> Self {
        self.vlans.push(VlanTag {
            tpid,
            tci: vid & 0x0fff,
        });
        self
    }

    /// The IPv4 packet; panics on a non-IPv4 frame (fixture code, built by the caller).
    pub fn ip(&mut self) -> &mut Ipv4 {
        match &mut self.body {
            Body::Ipv4(ip) => ip,
            _ => panic!("frame has no IPv4 body"),
        }
    }

    /// The transport part of an IPv4 or IPv6 frame; panics on any other frame.
    pub fn l4(&mut self) -> &mut L4 {
        match &mut self.body {
            Body::Ipv4(ip) => &mut ip.l4,
            Body::Ipv6(ip) => &mut ip.l4,
            Body::Raw { .. } => panic!("frame has no IP body"),
        }
    }

    /// Appends `bytes` after the packet (padding or a trailer).
    pub fn with_padding(mut self, bytes: &[u8]) -> Self {
        self.padding.extend_from_slice(bytes);
        self
    }

    /// Pads the frame with zeros to at least `len` bytes (60: the Ethernet minimum
    /// without the FCS).
    pub fn padded_to(mut self, len: usize) -> Self {
        let have = self.to_bytes().len();
        self.padding
            .extend(std::iter::repeat_n(0, len.saturating_sub(have)));
        self
    }

    /// Sets the source MAC and destination MAC.
    pub fn with_macs(mut self, src: Mac, dst: Mac) -> Self {
        self.src_mac = src;
        self.dst_mac = dst;
        self
    }

    /// Sets the TTL.
    pub fn with_ttl(mut self, ttl: u8) -> Self {
        self.ip().ttl = ttl;
        self
    }

    /// Sets the destination address and, for TCP/UDP, the destination port.
    pub fn with_dst(mut self, addr: Ipv4Addr, port: u16) -> Self {
        let ip = self.ip();
        ip.dst = addr;
        ip.l4.set_dport(port);
        self
    }

    /// Sets the source address and, for TCP/UDP, the source port.
    pub fn with_src(mut self, addr: Ipv4Addr, port: u16) -> Self {
        let ip = self.ip();
        ip.src = addr;
        ip.l4.set_sport(port);
        self
    }

    /// Serialises the frame.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(64);
        b.extend_from_slice(&self.dst_mac);
        b.extend_from_slice(&self.src_mac);
        for tag in &self.vlans {
            b.extend_from_slice(&tag.tpid.to_be_bytes());
            b.extend_from_slice(&tag.tci.to_be_bytes());
        }
        match &self.body {
            Body::Ipv4(ip) => {
                b.extend_from_slice(&ETH_P_IPV4.to_be_bytes());
                b.extend_from_slice(&ip.to_bytes());
            }
            Body::Ipv6(ip) => {
                b.extend_from_slice(&ETH_P_IPV6.to_be_bytes());
                b.extend_from_slice(&ip.to_bytes());
            }
            Body::Raw { ethertype, bytes } => {
                b.extend_from_slice(&ethertype.to_be_bytes());
                b.extend_from_slice(bytes);
            }
        }
        b.extend_from_slice(&self.padding);
        b
    }
}

/// Parses "02:00:00:00:00:01" into a MAC (fixture constants; panics on a bad literal).
pub fn mac(text: &str) -> Mac {
    let mut m = [0u8; 6];
    let parts: Vec<&str> = text.split(':').collect();
    assert_eq!(parts.len(), 6, "bad MAC literal {text}");
    for (slot, part) in m.iter_mut().zip(parts) {
        *slot = u8::from_str_radix(part, 16).unwrap_or_else(|_| panic!("bad MAC literal {text}"));
    }
    m
}

/// Formats a MAC as "02:00:00:00:00:01" (for `ip link set address`).
pub fn mac_text(m: &Mac) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Mac = [2, 0, 0, 0, 0, 1];
    const B: Mac = [2, 0, 0, 0, 0, 2];

    /// The captured UDP vector rebuilt by the builder matches byte for byte.
    #[test]
    fn builder_reproduces_captured_udp_packet() {
        let mut f = Frame::udp(
            (A, B),
            (Ipv4Addr::new(10, 0, 0, 1), 52716),
            (Ipv4Addr::new(10, 0, 0, 2), 4000),
            b"Hello\n",
        );
        f.ip().id = 0x5da1;
        let bytes = f.to_bytes();
        let ip = &bytes[14..];
        assert_eq!(&ip[10..12], &[0xc9, 0x27], "IPv4 checksum");
        assert_eq!(&ip[26..28], &[0xea, 0x66], "UDP checksum");
        assert_eq!(ip.len(), 0x22);
    }

    /// IP options change IHL and are covered by the header checksum.
    #[test]
    fn options_set_ihl_and_checksum_covers_them() {
        let mut f = Frame::tcp(
            (A, B),
            (Ipv4Addr::new(10, 0, 0, 1), 1),
            (Ipv4Addr::new(10, 0, 0, 2), 2),
            TCP_SYN,
        );
        f.ip().options = vec![1; 40];
        let bytes = f.to_bytes();
        assert_eq!(bytes[14], 0x4f);
        assert_eq!(checksum::internet_checksum(&bytes[14..74]), 0);
        let seg = &bytes[74..];
        assert!(checksum::l4_verifies(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            PROTO_TCP,
            seg
        ));
    }

    /// The UDP "no checksum" case keeps a zero field.
    #[test]
    fn udp_no_checksum_is_zero() {
        let mut f = Frame::udp(
            (A, B),
            (Ipv4Addr::new(10, 0, 0, 1), 5),
            (Ipv4Addr::new(10, 0, 0, 2), 6),
            b"x",
        );
        if let L4::Udp(u) = &mut f.ip().l4 {
            u.no_checksum = true;
        }
        let bytes = f.to_bytes();
        assert_eq!(&bytes[14 + 26..14 + 28], &[0, 0]);
    }

    /// Tags sit between the MACs and the ethertype, outermost first.
    #[test]
    fn qinq_tags_are_in_order() {
        let f = Frame::icmp_echo(
            (A, B),
            Ipv4Addr::new(1, 1, 1, 1),
            Ipv4Addr::new(2, 2, 2, 2),
            false,
            7,
        )
        .tagged(TPID_8021AD, 100)
        .tagged(TPID_8021Q, 200);
        let b = f.to_bytes();
        assert_eq!(
            &b[12..22],
            &[0x88, 0xa8, 0, 100, 0x81, 0, 0, 200, 0x08, 0x00]
        );
        assert_eq!(
            checksum::internet_checksum(&b[42..]),
            0,
            "ICMP checksum verifies"
        );
    }
}
