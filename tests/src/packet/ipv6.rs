//! The IPv6 packet (RFC 8200): the fixed header, a chain of extension headers (hop-by-hop,
//! routing, destination options, fragment, or any raw header such as AH) and the transport
//! part, whose checksum covers the IPv6 pseudo-header (final destination, upper-layer
//! length, upper-layer next header). Fields can be written wrong on purpose (payload
//! length, version, first next header) for malformed-packet fixtures.

use std::net::Ipv6Addr;

use super::checksum::Pseudo;
use super::l4::L4;

/// Next header of a hop-by-hop options header.
pub const NH_HOP_BY_HOP: u8 = 0;
/// Next header of a routing header.
pub const NH_ROUTING: u8 = 43;
/// Next header of a fragment header.
pub const NH_FRAGMENT: u8 = 44;
/// Next header of an Authentication Header (RFC 4302).
pub const NH_AH: u8 = 51;
/// Next header of a destination options header.
pub const NH_DEST_OPTS: u8 = 60;
/// ICMPv6 type of an echo request.
pub const ICMP6_ECHO_REQUEST: u8 = 128;
/// ICMPv6 type of an echo reply.
pub const ICMP6_ECHO_REPLY: u8 = 129;

/// One IPv6 extension header; its next-header byte is filled in from the chain.
#[derive(Clone, Debug, PartialEq)]
pub enum ExtHeader {
    /// Hop-by-hop options (next header 0): the options, padded with Pad1/PadN so the
    /// header is a multiple of 8 bytes.
    HopByHop(Vec<u8>),
    /// Destination options (next header 60), padded like hop-by-hop.
    DestOpts(Vec<u8>),
    /// Routing header (next header 43): type, segments left, then the type-specific data
    /// after those 4 bytes, zero-padded so the header is a multiple of 8 bytes.
    Routing {
        /// Routing type (4: segment routing, RFC 8754).
        routing_type: u8,
        /// Segments left.
        segments_left: u8,
        /// Type-specific data.
        data: Vec<u8>,
    },
    /// Fragment header (next header 44, 8 bytes).
    Fragment {
        /// Fragment offset in 8-byte units.
        offset: u16,
        /// More Fragments flag.
        more: bool,
        /// Identification.
        ident: u32,
    },
    /// Any header, written as its next-header byte followed by `bytes` exactly as given
    /// (its length field included), e.g. AH (51) or a header with a wrong length.
    Raw {
        /// The number the previous header names it by.
        proto: u8,
        /// Everything after its own next-header byte.
        bytes: Vec<u8>,
    },
}

/// `options` after a 2-byte header start, padded to a multiple of 8 (RFC 8200 4.2).
fn padded_options(options: &[u8]) -> Vec<u8> {
    let mut v = options.to_vec();
    match (8 - (2 + v.len()) % 8) % 8 {
        0 => {}
        1 => v.push(0), // Pad1
        n => {
            v.push(1); // PadN
            v.push((n - 2) as u8);
            v.extend(std::iter::repeat_n(0, n - 2));
        }
    }
    v
}

impl ExtHeader {
    /// The next-header number that announces this header.
    pub fn proto(&self) -> u8 {
        match self {
            ExtHeader::HopByHop(_) => NH_HOP_BY_HOP,
            ExtHeader::DestOpts(_) => NH_DEST_OPTS,
            ExtHeader::Routing { .. } => NH_ROUTING,
            ExtHeader::Fragment { .. } => NH_FRAGMENT,
            ExtHeader::Raw { proto, .. } => *proto,
        }
    }

    /// A segment routing header (type 4, RFC 8754) listing `segments` (segment 0 is the
    /// final destination), with `segments_left`.
    pub fn srh(segments_left: u8, segments: &[Ipv6Addr]) -> Self {
        // Last entry, flags, tag (2 bytes), then the segment list.
        let mut data = vec![segments.len().saturating_sub(1) as u8, 0, 0, 0];
        for s in segments {
            data.extend_from_slice(&s.octets());
        }
        ExtHeader::Routing {
            routing_type: 4,
            segments_left,
            data,
        }
    }

    /// An Authentication Header (RFC 4302) with a 12-byte ICV: 24 bytes, length field 4.
    pub fn ah(spi: u32, seq: u32) -> Self {
        let mut bytes = vec![4, 0, 0]; // payload length (4-byte units minus 2), reserved
        bytes.extend_from_slice(&spi.to_be_bytes());
        bytes.extend_from_slice(&seq.to_be_bytes());
        bytes.extend_from_slice(&[0xa5; 12]);
        ExtHeader::Raw {
            proto: NH_AH,
            bytes,
        }
    }

    /// Serialises the header, `next` being the number of what follows it.
    pub fn to_bytes(&self, next: u8) -> Vec<u8> {
        let mut b = vec![next];
        match self {
            ExtHeader::HopByHop(opts) | ExtHeader::DestOpts(opts) => {
                let opts = padded_options(opts);
                b.push(((2 + opts.len()) / 8 - 1) as u8);
                b.extend_from_slice(&opts);
            }
            ExtHeader::Routing {
                routing_type,
                segments_left,
                data,
            } => {
                let mut data = data.clone();
                while !(4 + data.len()).is_multiple_of(8) {
                    data.push(0);
                }
                b.push(((4 + data.len()) / 8 - 1) as u8);
                b.push(*routing_type);
                b.push(*segments_left);
                b.extend_from_slice(&data);
            }
            ExtHeader::Fragment {
                offset,
                more,
                ident,
            } => {
                b.push(0);
                b.extend_from_slice(&((offset << 3) | u16::from(*more)).to_be_bytes());
                b.extend_from_slice(&ident.to_be_bytes());
            }
            ExtHeader::Raw { bytes, .. } => b.extend_from_slice(bytes),
        }
        b
    }
}

/// An IPv6 packet.
#[derive(Clone, Debug, PartialEq)]
pub struct Ipv6 {
    /// Traffic class (DSCP + ECN).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address (also the pseudo-header's: the builder's routing headers are
    /// meant to arrive with this as the final destination).
    pub dst: Ipv6Addr,
    /// Extension headers in order, before the transport part.
    pub ext: Vec<ExtHeader>,
    /// The transport part.
    pub l4: L4,
    /// Writes this payload length instead of the real one (malformed fixtures).
    pub payload_len_override: Option<u16>,
    /// Writes this version instead of 6 (malformed fixtures).
    pub version_override: Option<u8>,
}

impl Ipv6 {
    /// A plain IPv6 header (hop limit 64, traffic class 0, flow label 0) around `l4`.
    pub fn new(src: Ipv6Addr, dst: Ipv6Addr, l4: L4) -> Self {
        Self {
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
            src,
            dst,
            ext: Vec::new(),
            l4,
            payload_len_override: None,
            version_override: None,
        }
    }

    /// The pseudo-header of the transport checksum.
    pub fn pseudo(&self) -> Pseudo {
        Pseudo::V6(self.src, self.dst)
    }

    /// The upper-layer protocol (6, 17 or 58).
    pub fn upper_proto(&self) -> u8 {
        self.l4.proto(self.pseudo())
    }

    /// The next header of the fixed header: the first extension header's, or the
    /// upper layer's.
    pub fn next_header(&self) -> u8 {
        self.ext
            .first()
            .map_or_else(|| self.upper_proto(), ExtHeader::proto)
    }

    /// Serialises the packet: fixed header, extension headers, transport part.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut payload = Vec::new();
        for (i, h) in self.ext.iter().enumerate() {
            let next = self
                .ext
                .get(i + 1)
                .map_or_else(|| self.upper_proto(), ExtHeader::proto);
            payload.extend_from_slice(&h.to_bytes(next));
        }
        payload.extend_from_slice(&self.l4.to_bytes(self.pseudo()));
        let plen = self.payload_len_override.unwrap_or(payload.len() as u16);
        let version = u32::from(self.version_override.unwrap_or(6) & 0x0f);
        let first = (version << 28)
            | (u32::from(self.traffic_class) << 20)
            | (self.flow_label & 0x000f_ffff);
        let mut b = Vec::with_capacity(40 + payload.len());
        b.extend_from_slice(&first.to_be_bytes());
        b.extend_from_slice(&plen.to_be_bytes());
        b.push(self.next_header());
        b.push(self.hop_limit);
        b.extend_from_slice(&self.src.octets());
        b.extend_from_slice(&self.dst.octets());
        b.extend_from_slice(&payload);
        b
    }
}

/// The ICMPv6 echo type for a request or a reply.
pub fn icmp6_echo_type(reply: bool) -> u8 {
    if reply {
        ICMP6_ECHO_REPLY
    } else {
        ICMP6_ECHO_REQUEST
    }
}
