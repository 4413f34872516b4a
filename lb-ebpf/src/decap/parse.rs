//! Finding a tunnel packet's outer header: Ethernet, then IPv4 or IPv6 whose protocol (or
//! first next header) is 4 or 41, or UDP to the configured GUE port followed by a GUE
//! header. Nothing here trusts a length field; `checks` does that.

use core::mem::size_of;

use lb_common::{FAMILY_V4, FAMILY_V6};

use network_types::eth::EthHdr;
use network_types::ip::{Ipv4Hdr, Ipv6Hdr};
use network_types::udp::UdpHdr;

use crate::headers::{ETH_P_IP, ETH_P_IPV6, IPPROTO_UDP, IPV6_HDR_LEN};

/// The 16-byte key form of an IPv6 address (four native-order words of its bytes).
#[inline(always)]
pub fn words6(a: &[u8; 16]) -> [u32; 4] {
    [
        u32::from_ne_bytes([a[0], a[1], a[2], a[3]]),
        u32::from_ne_bytes([a[4], a[5], a[6], a[7]]),
        u32::from_ne_bytes([a[8], a[9], a[10], a[11]]),
        u32::from_ne_bytes([a[12], a[13], a[14], a[15]]),
    ]
}

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
    pub gue: Gue,
    /// Addresses in the 16-byte key form (IPv4 in word 0).
    pub saddr: [u32; 4],
    pub daddr: [u32; 4],
}

/// What a GUE packet's UDP and GUE headers say, for `checks` to judge. Every field is set
/// for IP in IP too (`present` false), so that no byte of an `Outer` is left uninitialised
/// where the verifier would read it.
pub struct Gue {
    /// The packet is GUE (else IP in IP).
    pub present: bool,
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
    let ethertype = unsafe { (*eth).ether_type };
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
            saddr: [u32::from_ne_bytes(unsafe { (*ip).src_addr }), 0, 0, 0],
            daddr: [u32::from_ne_bytes(unsafe { (*ip).dst_addr }), 0, 0, 0],
        })
    } else if ethertype == ETH_P_IPV6 {
        let ip: *mut Ipv6Hdr = ptr_at(start, end, l3)?;
        let (proto, gue) = tunnel(
            unsafe { (*ip).next_hdr },
            (start, end),
            l3 + IPV6_HDR_LEN,
            gue_port,
        )?;
        Some(Outer {
            ip: ip as *const u8,
            family: FAMILY_V6,
            proto,
            gue,
            saddr: words6(unsafe { &(*ip).src_addr }),
            daddr: words6(unsafe { &(*ip).dst_addr }),
        })
    } else {
        None
    }
}

/// The inner protocol of a packet whose outer protocol is `proto` and whose outer header
/// ends at `l4`: itself for IP in IP; for UDP to the GUE port, the GUE header's. `None`:
/// no tunnel packet (any other protocol or port, or too short to read the headers).
#[inline(always)]
fn tunnel(proto: u8, (start, end): (usize, usize), l4: usize, gue_port: u16) -> Option<(u8, Gue)> {
    if proto == PROTO_INNER_V4 || proto == PROTO_INNER_V6 {
        return Some((
            proto,
            Gue {
                present: false,
                udp_len: 0,
                plain: false,
            },
        ));
    }
    if proto != IPPROTO_UDP || gue_port == 0 {
        return None;
    }
    let udp: *mut UdpHdr = ptr_at(start, end, l4)?;
    let gue: *mut [u8; 4] = ptr_at(start, end, l4 + size_of::<UdpHdr>())?;
    // SAFETY: bounds-checked above.
    let (dport, len, gue) = unsafe { ((*udp).dst, (*udp).len, *gue) };
    if u16::from_ne_bytes(dport) != gue_port {
        return None;
    }
    Some((
        gue[1],
        Gue {
            present: true,
            udp_len: u16::from_be_bytes(len) as usize,
            // Version 0, control bit 0, no optional fields, no flags.
            plain: gue[0] == 0 && gue[2] == 0 && gue[3] == 0,
        },
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
        self.ip_len() + if self.gue.present { GUE_LEN } else { 0 }
    }
}
