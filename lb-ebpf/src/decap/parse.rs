//! Finding a tunnel packet's outer header: Ethernet, then IPv4 or IPv6 whose protocol (or
//! first next header) is 4 or 41, or UDP to the configured GUE port followed by a GUE
//! header. Nothing here trusts a length field; `checks` does that.

use core::mem::size_of;

use lb_common::{FAMILY_V4, FAMILY_V6};

use crate::headers::{
    ETH_P_IP, ETH_P_IPV6, EthHdr, IPPROTO_UDP, IPV6_HDR_LEN, Ipv4Hdr, Ipv6Hdr, UdpGue,
};

/// IPv4 inside IP (IPIP).
pub const PROTO_INNER_V4: u8 = 4;
/// IPv6 inside IP.
pub const PROTO_INNER_V6: u8 = 41;
/// Length of the outer IPv4 header the agent takes (no options).
pub const IPV4_HDR_LEN: usize = 20;
/// Bytes of UDP and GUE header between a GUE packet's outer IP header and its inner packet.
pub const GUE_LEN: usize = 12;

/// The outer header of a tunnel packet, as far as it has been read.
pub struct Outer {
    /// The outer IP header, right after the Ethernet header.
    pub ip: *const u8,
    /// `FAMILY_V4` or `FAMILY_V6`.
    pub family: u8,
    /// 4 (inner IPv4) or 41 (inner IPv6): the outer protocol, or for GUE the GUE header's.
    pub proto: u8,
    /// A GUE packet: UDP and a GUE header follow the outer IP header.
    pub gue: Option<Gue>,
    /// Addresses in the 16-byte key form (IPv4 in word 0).
    pub saddr: [u32; 4],
    pub daddr: [u32; 4],
}

/// What a GUE packet's UDP and GUE headers say, for `checks` to judge.
pub struct Gue {
    /// The UDP length field.
    pub udp_len: usize,
    /// The GUE header is variant 0 with no options and no flags (what a balancer sends).
    pub plain: bool,
}

/// A `T` at `off` bytes into the frame, if all of it is inside. Compared as pointers, as
/// the balancer's parser does, so that the verifier can tie the check to the packet.
#[inline(always)]
pub fn ptr_at<T>(start: usize, end: usize, off: usize) -> Option<*mut T> {
    let p = (start as *mut u8).wrapping_add(off);
    if p.wrapping_add(size_of::<T>()) > end as *mut u8 {
        return None;
    }
    Some(p as *mut T)
}

/// The outer header when the frame is a tunnel packet; `None` for anything else.
/// `gue_port` (wire order; 0: GUE off) is the UDP port GUE packets arrive on.
#[inline(always)]
pub fn outer(start: usize, end: usize, gue_port: u16) -> Option<Outer> {
    let eth: *mut EthHdr = ptr_at(start, end, 0)?;
    let l3 = size_of::<EthHdr>();
    let ethertype = unsafe { (*eth).proto };
    if ethertype == ETH_P_IP {
        let ip: *mut Ipv4Hdr = ptr_at(start, end, l3)?;
        let (proto, gue) = tunnel(
            unsafe { (*ip).proto },
            (start, end),
            l3 + IPV4_HDR_LEN,
            gue_port,
        )?;
        Some(Outer {
            ip: ip as *const u8,
            family: FAMILY_V4,
            proto,
            gue,
            saddr: [unsafe { (*ip).saddr }, 0, 0, 0],
            daddr: [unsafe { (*ip).daddr }, 0, 0, 0],
        })
    } else if ethertype == ETH_P_IPV6 {
        let ip: *mut Ipv6Hdr = ptr_at(start, end, l3)?;
        let (proto, gue) = tunnel(
            unsafe { (*ip).nexthdr },
            (start, end),
            l3 + IPV6_HDR_LEN,
            gue_port,
        )?;
        Some(Outer {
            ip: ip as *const u8,
            family: FAMILY_V6,
            proto,
            gue,
            saddr: unsafe { (*ip).saddr },
            daddr: unsafe { (*ip).daddr },
        })
    } else {
        None
    }
}

/// The inner protocol of a packet whose outer protocol is `proto` and whose outer header
/// ends at `l4`: itself for IP in IP; for UDP to the GUE port, the GUE header's. `None`:
/// no tunnel packet (any other protocol or port, or too short to read the headers).
#[inline(always)]
fn tunnel(
    proto: u8,
    (start, end): (usize, usize),
    l4: usize,
    gue_port: u16,
) -> Option<(u8, Option<Gue>)> {
    if proto == PROTO_INNER_V4 || proto == PROTO_INNER_V6 {
        return Some((proto, None));
    }
    if proto != IPPROTO_UDP || gue_port == 0 {
        return None;
    }
    let h: *mut UdpGue = ptr_at(start, end, l4)?;
    // SAFETY: bounds-checked above.
    let (dport, len, gue) = unsafe { ((*h).udp.dport, (*h).udp.len, (*h).gue) };
    if dport != gue_port {
        return None;
    }
    Some((
        gue[1],
        Some(Gue {
            udp_len: u16::from_be(len) as usize,
            // Version 0, control bit 0, no optional fields, no flags.
            plain: gue[0] == 0 && gue[2] == 0 && gue[3] == 0,
        }),
    ))
}

impl Outer {
    /// Length of the outer IP header alone.
    #[inline(always)]
    pub fn ip_len(&self) -> usize {
        if self.family == FAMILY_V4 {
            IPV4_HDR_LEN
        } else {
            IPV6_HDR_LEN
        }
    }

    /// What the agent strips: the outer IP header, and for GUE the UDP and GUE headers.
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        self.ip_len() + if self.gue.is_some() { GUE_LEN } else { 0 }
    }
}
