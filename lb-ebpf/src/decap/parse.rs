//! Finding a tunnel packet's outer header: Ethernet, then IPv4 or IPv6 whose protocol (or
//! first next header) is 4 or 41. Nothing here trusts a length field; `checks` does that.

use core::mem::size_of;

use lb_common::{FAMILY_V4, FAMILY_V6};

use crate::headers::{ETH_P_IP, ETH_P_IPV6, EthHdr, IPV6_HDR_LEN, Ipv4Hdr, Ipv6Hdr};

/// IPv4 inside IP (IPIP).
pub const PROTO_INNER_V4: u8 = 4;
/// IPv6 inside IP.
pub const PROTO_INNER_V6: u8 = 41;
/// Length of the outer IPv4 header the agent takes (no options).
pub const IPV4_HDR_LEN: usize = 20;

/// The outer header of a tunnel packet, as far as it has been read.
pub struct Outer {
    /// The outer IP header, right after the Ethernet header.
    pub ip: *const u8,
    /// `FAMILY_V4` or `FAMILY_V6`.
    pub family: u8,
    /// 4 (inner IPv4) or 41 (inner IPv6).
    pub proto: u8,
    /// Addresses in the 16-byte key form (IPv4 in word 0).
    pub saddr: [u32; 4],
    pub daddr: [u32; 4],
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
#[inline(always)]
pub fn outer(start: usize, end: usize) -> Option<Outer> {
    let eth: *mut EthHdr = ptr_at(start, end, 0)?;
    let l3 = size_of::<EthHdr>();
    let ethertype = unsafe { (*eth).proto };
    if ethertype == ETH_P_IP {
        let ip: *mut Ipv4Hdr = ptr_at(start, end, l3)?;
        let proto = unsafe { (*ip).proto };
        if proto != PROTO_INNER_V4 && proto != PROTO_INNER_V6 {
            return None;
        }
        Some(Outer {
            ip: ip as *const u8,
            family: FAMILY_V4,
            proto,
            saddr: [unsafe { (*ip).saddr }, 0, 0, 0],
            daddr: [unsafe { (*ip).daddr }, 0, 0, 0],
        })
    } else if ethertype == ETH_P_IPV6 {
        let ip: *mut Ipv6Hdr = ptr_at(start, end, l3)?;
        let proto = unsafe { (*ip).nexthdr };
        if proto != PROTO_INNER_V4 && proto != PROTO_INNER_V6 {
            return None;
        }
        Some(Outer {
            ip: ip as *const u8,
            family: FAMILY_V6,
            proto,
            saddr: unsafe { (*ip).saddr },
            daddr: unsafe { (*ip).daddr },
        })
    } else {
        None
    }
}

impl Outer {
    /// Length of the outer IP header: what the agent strips.
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        if self.family == FAMILY_V4 {
            IPV4_HDR_LEN
        } else {
            IPV6_HDR_LEN
        }
    }
}
