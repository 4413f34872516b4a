//! The transport part of a packet (TCP, UDP, ICMP echo), shared by IPv4 and IPv6: the
//! pseudo-header it is serialised under decides its checksum (and, for ICMP, its kind of
//! checksum: none over the addresses for IPv4, the IPv6 pseudo-header for ICMPv6).

use super::checksum::{self, PROTO_ICMP, PROTO_ICMPV6, PROTO_TCP, PROTO_UDP, Pseudo};

/// The transport part of an IP packet.
#[derive(Clone, Debug, PartialEq)]
pub enum L4 {
    /// TCP segment.
    Tcp(Tcp),
    /// UDP datagram.
    Udp(Udp),
    /// ICMP echo request or reply (ICMPv6 in an IPv6 packet).
    Icmp(Icmp),
}

/// A TCP segment.
#[derive(Clone, Debug, PartialEq)]
pub struct Tcp {
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number.
    pub ack: u32,
    /// Flag bits (`TCP_*`).
    pub flags: u8,
    /// Receive window.
    pub window: u16,
    /// Options, padded with zeros to a multiple of 4 when serialised.
    pub options: Vec<u8>,
    /// Payload.
    pub payload: Vec<u8>,
}

/// A UDP datagram.
#[derive(Clone, Debug, PartialEq)]
pub struct Udp {
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Send checksum 0 ("no checksum": allowed for UDP over IPv4, invalid over IPv6).
    pub no_checksum: bool,
    /// Payload.
    pub payload: Vec<u8>,
}

/// An ICMP (or ICMPv6) echo message.
#[derive(Clone, Debug, PartialEq)]
pub struct Icmp {
    /// Type: 8 echo request, 0 echo reply (ICMPv6: 128 and 129).
    pub kind: u8,
    /// Code (0 for echo).
    pub code: u8,
    /// Echo identifier.
    pub ident: u16,
    /// Echo sequence number.
    pub seq: u16,
    /// Payload.
    pub payload: Vec<u8>,
}

/// Options padded with zero bytes (End of Option List) to a multiple of 4.
pub(crate) fn padded(opts: &[u8]) -> Vec<u8> {
    let mut v = opts.to_vec();
    while !v.len().is_multiple_of(4) {
        v.push(0);
    }
    v
}

impl L4 {
    /// The protocol number under `pseudo`'s family (ICMP is 1 for IPv4, 58 for IPv6).
    pub fn proto(&self, pseudo: Pseudo) -> u8 {
        match (self, pseudo) {
            (L4::Tcp(_), _) => PROTO_TCP,
            (L4::Udp(_), _) => PROTO_UDP,
            (L4::Icmp(_), Pseudo::V4(..)) => PROTO_ICMP,
            (L4::Icmp(_), Pseudo::V6(..)) => PROTO_ICMPV6,
        }
    }

    /// Sets the source port (TCP, UDP; ICMP has none).
    pub fn set_sport(&mut self, port: u16) {
        match self {
            L4::Tcp(t) => t.sport = port,
            L4::Udp(u) => u.sport = port,
            L4::Icmp(_) => {}
        }
    }

    /// Sets the destination port (TCP, UDP; ICMP has none).
    pub fn set_dport(&mut self, port: u16) {
        match self {
            L4::Tcp(t) => t.dport = port,
            L4::Udp(u) => u.dport = port,
            L4::Icmp(_) => {}
        }
    }

    /// Serialises the segment with its checksum computed from scratch under `pseudo`.
    pub fn to_bytes(&self, pseudo: Pseudo) -> Vec<u8> {
        let proto = self.proto(pseudo);
        match self {
            L4::Tcp(t) => {
                let opts = padded(&t.options);
                let doff = (20 + opts.len()) / 4;
                let mut b = Vec::with_capacity(20 + opts.len() + t.payload.len());
                b.extend_from_slice(&t.sport.to_be_bytes());
                b.extend_from_slice(&t.dport.to_be_bytes());
                b.extend_from_slice(&t.seq.to_be_bytes());
                b.extend_from_slice(&t.ack.to_be_bytes());
                b.push((doff as u8) << 4);
                b.push(t.flags);
                b.extend_from_slice(&t.window.to_be_bytes());
                b.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
                b.extend_from_slice(&opts);
                b.extend_from_slice(&t.payload);
                let c = pseudo.checksum(proto, &b);
                b[16..18].copy_from_slice(&c.to_be_bytes());
                b
            }
            L4::Udp(u) => {
                let len = (8 + u.payload.len()) as u16;
                let mut b = Vec::with_capacity(usize::from(len));
                b.extend_from_slice(&u.sport.to_be_bytes());
                b.extend_from_slice(&u.dport.to_be_bytes());
                b.extend_from_slice(&len.to_be_bytes());
                b.extend_from_slice(&[0, 0]);
                b.extend_from_slice(&u.payload);
                if !u.no_checksum {
                    // A computed zero goes on the wire as 0xffff (RFC 768, RFC 8200 8.1).
                    let c = match pseudo.checksum(proto, &b) {
                        0 => 0xffff,
                        c => c,
                    };
                    b[6..8].copy_from_slice(&c.to_be_bytes());
                }
                b
            }
            L4::Icmp(i) => {
                let mut b = vec![i.kind, i.code, 0, 0];
                b.extend_from_slice(&i.ident.to_be_bytes());
                b.extend_from_slice(&i.seq.to_be_bytes());
                b.extend_from_slice(&i.payload);
                let c = match pseudo {
                    Pseudo::V4(..) => checksum::internet_checksum(&b),
                    Pseudo::V6(..) => pseudo.checksum(proto, &b),
                };
                b[2..4].copy_from_slice(&c.to_be_bytes());
                b
            }
        }
    }
}
