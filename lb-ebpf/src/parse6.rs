//! IPv6: the fixed header and a bounded walk of its extension headers.
//!
//! Hop-by-hop, destination options and routing headers (with no segments left) are walked,
//! at most `MAX_IPV6_EXT_HEADERS` of them; a fragment goes to the kernel like an IPv4
//! fragment; any other chain (longer, AH, Mobility, a routing header still in transit) goes
//! to the kernel and is counted. Every header must lie inside both the frame and the
//! payload length, which itself must fit in the frame.

use lb_common::MAX_IPV6_EXT_HEADERS;

use crate::headers::*;
use crate::parse::{Packet, Skip, fits, ptr_at, transport, within};

#[inline(always)]
pub fn parse6(
    start: usize,
    end: usize,
    eth: *mut EthHdr,
    l3: usize,
) -> Result<Packet<Ipv6Hdr>, Skip> {
    let ip: *mut Ipv6Hdr = ptr_at(start, end, l3).ok_or(Skip::Malformed)?;
    // The version is the top nibble of the first byte.
    if unsafe { *(ip as *const u8) } >> 4 != 6 {
        return Err(Skip::Malformed);
    }
    let payload = u16::from_be(unsafe { (*ip).payload_len }) as usize;
    let ip_end = l3 + IPV6_HDR_LEN + payload;
    // Payload length 0 is a jumbogram (not on Ethernet) or an empty packet: neither is
    // for a VIP. Whether the payload fits in the frame is checked last (see `within`).
    if payload == 0 {
        return Err(Skip::Malformed);
    }
    // A packet handed to the kernel for its headers is still malformed first when it does
    // not fit in the frame (the kernel drops it as truncated). Only on exits: see `within`.
    let frame = end - start;
    let passed = |why: Skip| if ip_end > frame { Skip::Malformed } else { why };
    let mut next = unsafe { (*ip).nexthdr };
    let mut off = l3 + IPV6_HDR_LEN;
    let mut walked = 0;
    while walked < MAX_IPV6_EXT_HEADERS {
        match next {
            IPV6_HOPOPTS | IPV6_DSTOPTS | IPV6_ROUTING => {
                let ext: *mut Ipv6ExtHdr = ptr_at(start, end, off).ok_or(Skip::Malformed)?;
                // A header that runs past the frame or the payload is malformed, whatever
                // it says.
                let ext_end = off + (unsafe { (*ext).len } as usize + 1) * 8;
                if !fits(start, end, ext_end) || ext_end > ip_end {
                    return Err(Skip::Malformed);
                }
                if next == IPV6_ROUTING {
                    let rt: *mut Ipv6RoutingHdr = ptr_at(start, end, off).ok_or(Skip::Malformed)?;
                    // Still in transit: the destination address is not the final one.
                    if unsafe { (*rt).segments_left } != 0 {
                        return Err(passed(Skip::Ipv6Ext));
                    }
                }
                next = unsafe { (*ext).nexthdr };
                off = ext_end;
                walked += 1;
            }
            IPV6_FRAGMENT => return Err(passed(Skip::Fragment)),
            _ => break,
        }
    }
    if next == IPV6_HOPOPTS || next == IPV6_DSTOPTS || next == IPV6_ROUTING {
        return Err(passed(Skip::Ipv6Ext));
    }
    if next == IPV6_FRAGMENT {
        return Err(passed(Skip::Fragment));
    }
    if IPV6_UNWALKED.contains(&next) {
        return Err(passed(Skip::Ipv6Ext));
    }
    let mut pkt = Packet {
        eth,
        ip,
        l4_off: off,
        proto: next,
        sport: 0,
        dport: 0,
        tcp_flags: 0,
        icmp_kind: 0,
        icmp_code: 0,
        saddr: unsafe { (*ip).saddr },
        daddr: unsafe { (*ip).daddr },
        len: frame as u64,
    };
    let l4_end = transport(start, end, &mut pkt)?;
    within(ip_end, l4_end, frame)?;
    Ok(pkt)
}
