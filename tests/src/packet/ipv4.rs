//! The IPv4 packet: header fields (options, flags, fragment offset, TTL, id) and its
//! serialisation with the header checksum computed from scratch.

use std::net::Ipv4Addr;

use super::checksum::{self, Pseudo};
use super::l4::{L4, padded};

/// An IPv4 packet.
#[derive(Clone, Debug, PartialEq)]
pub struct Ipv4 {
    /// Type of service / DSCP+ECN byte.
    pub tos: u8,
    /// Identification.
    pub id: u16,
    /// Don't Fragment flag.
    pub dont_fragment: bool,
    /// More Fragments flag.
    pub more_fragments: bool,
    /// Fragment offset in 8-byte units.
    pub frag_offset: u16,
    /// Time to live.
    pub ttl: u8,
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Options, padded with zeros (End of Options) to a multiple of 4 when serialised.
    pub options: Vec<u8>,
    /// Writes this IHL instead of the real one (for malformed-header fixtures).
    pub ihl_override: Option<u8>,
    /// The transport part.
    pub l4: L4,
}

impl Ipv4 {
    /// A plain IPv4 header (TTL 64, DF set, id 1) around `l4`.
    pub fn new(src: Ipv4Addr, dst: Ipv4Addr, l4: L4) -> Self {
        Self {
            tos: 0,
            id: 1,
            dont_fragment: true,
            more_fragments: false,
            frag_offset: 0,
            ttl: 64,
            src,
            dst,
            options: Vec::new(),
            ihl_override: None,
            l4,
        }
    }

    /// The pseudo-header of this packet's transport checksum.
    pub fn pseudo(&self) -> Pseudo {
        Pseudo::V4(self.src, self.dst)
    }

    /// The IP protocol number of the transport part.
    pub fn proto(&self) -> u8 {
        self.l4.proto(self.pseudo())
    }

    /// Serialises the packet: header (checksum from scratch) then transport part.
    pub fn to_bytes(&self) -> Vec<u8> {
        let opts = padded(&self.options);
        let ihl = self.ihl_override.unwrap_or(((20 + opts.len()) / 4) as u8);
        let l4 = self.l4.to_bytes(self.pseudo());
        let total = (20 + opts.len() + l4.len()) as u16;
        let flags_frag = (u16::from(self.dont_fragment) << 14)
            | (u16::from(self.more_fragments) << 13)
            | (self.frag_offset & 0x1fff);
        let mut h = Vec::with_capacity(usize::from(total));
        h.push(0x40 | (ihl & 0x0f));
        h.push(self.tos);
        h.extend_from_slice(&total.to_be_bytes());
        h.extend_from_slice(&self.id.to_be_bytes());
        h.extend_from_slice(&flags_frag.to_be_bytes());
        h.push(self.ttl);
        h.push(self.proto());
        h.extend_from_slice(&[0, 0]);
        h.extend_from_slice(&self.src.octets());
        h.extend_from_slice(&self.dst.octets());
        h.extend_from_slice(&opts);
        let c = checksum::internet_checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h.extend_from_slice(&l4);
        h
    }
}
