//! "Too big" errors about a VIP flow, delivered where they belong, so that path MTU
//! discovery works through the balancer when a router beyond it is the narrow one:
//! ICMP "fragmentation needed" (type 3 code 4) and ICMPv6 "packet too big" (type 2).
//!
//! - From the client's side, about a packet VIP -> client (a translated reply, or a DSR
//!   backend's answer): addressed to the VIP, it goes to the flow's backend. In NAT mode the
//!   outer destination and the quoted source become the backend's, as the backend sent it.
//! - From the backend's side, about a packet client -> backend (translated by NAT): the
//!   quoted destination becomes the VIP again, as the client sent it, and the error goes on
//!   to the client.
//!
//! The checksums of the outer header, of the ICMP message (which covers the quote) and of
//! the quoted IPv4 header are updated incrementally; the quoted transport checksum is left
//! as it is (the quote is cut short, and stacks do not check it).
//!
//! This runs as a program of its own, reached by a tail call (`PROGS`), so that the
//! verifier checks it apart from the main path: inlined, the two together exceed its
//! budget.

use aya_ebpf::{bindings::xdp_action, programs::XdpContext};
use lb_common::*;

use crate::csum;
use crate::fib;
use crate::headers::*;
use crate::ip::{IpHeader, Side, replace_addr};
use crate::maps::BACKENDS;
use crate::nat::NatReverse;
use crate::parse::{Packet, ptr_at};

/// The quoted packet's addresses and ports, and where its fields are in the frame.
struct Quote {
    saddr: [u32; 4],
    daddr: [u32; 4],
    sport: u16,
    dport: u16,
    proto: u8,
    /// Offset of the quoted IP header.
    ip_off: usize,
    /// Offset of the quoted transport header (its ports).
    l4_off: usize,
}

/// Offset of the quoted packet in an ICMP error.
const QUOTE_OFF: usize = 8;

/// Whether `pkt` is an ICMP "fragmentation needed" or ICMPv6 "packet too big".
#[inline(always)]
pub fn is_candidate<H: IpHeader>(pkt: &Packet<H>) -> bool {
    pkt.proto == H::ICMP
        && if H::FAMILY == FAMILY_V4 {
            pkt.icmp_kind == 3 && pkt.icmp_code == 4
        } else {
            pkt.icmp_kind == 2
        }
}

/// Reads the quote: an IP header of this family and the ports of TCP or UDP after it.
#[inline(always)]
fn quote<H: IpHeader>(ctx: &XdpContext, pkt: &Packet<H>) -> Option<Quote> {
    let (start, end) = (ctx.data(), ctx.data_end());
    let ip_off = pkt.l4_off + QUOTE_OFF;
    let (saddr, daddr, proto, l4_off) = if H::FAMILY == FAMILY_V4 {
        let ip: *mut Ipv4Hdr = ptr_at(start, end, ip_off)?;
        let ihl = (unsafe { (*ip).ver_ihl } & 0x0f) as usize;
        if ihl < 5 {
            return None;
        }
        let (s, d) = unsafe { ((*ip).saddr, (*ip).daddr) };
        (
            [s, 0, 0, 0],
            [d, 0, 0, 0],
            unsafe { (*ip).proto },
            ip_off + ihl * 4,
        )
    } else {
        let ip: *mut Ipv6Hdr = ptr_at(start, end, ip_off)?;
        let (s, d) = unsafe { ((*ip).saddr, (*ip).daddr) };
        (s, d, unsafe { (*ip).nexthdr }, ip_off + IPV6_HDR_LEN)
    };
    if proto != IPPROTO_TCP && proto != IPPROTO_UDP {
        return None;
    }
    // Both transports start with the two ports.
    let ports: *mut UdpHdr = ptr_at(start, end, l4_off)?;
    Some(Quote {
        saddr,
        daddr,
        sport: unsafe { (*ports).sport },
        dport: unsafe { (*ports).dport },
        proto,
        ip_off,
        l4_off,
    })
}

/// Delivers a "too big" error about a VIP flow; `None` when it is about no flow of ours
/// (the caller passes it to the kernel).
#[inline(always)]
pub fn deliver_error<H: IpHeader>(ctx: &XdpContext, pkt: &Packet<H>) -> Option<u32> {
    let q = quote(ctx, pkt)?;
    // Either way the quote, turned around, is the key: client -> VIP for a quote VIP ->
    // client (the connection table), backend -> client for a quote client -> backend (a
    // NAT flow found as its replies are).
    let mut key = FlowKey {
        src: Addr::from_words(&q.daddr),
        dst: Addr::from_words(&q.saddr),
        sport: u16::from_be(q.dport),
        dport: u16::from_be(q.sport),
        proto: q.proto,
        family: H::FAMILY,
        dir: 0,
    };
    if let Some(v) = crate::flow::recorded(&key) {
        let backend = *BACKENDS.get(v.slot)?;
        if backend.vip_id != v.vip_id || backend.family != H::FAMILY {
            return None;
        }
        let meta = crate::vip::find::<H>(&q.saddr, q.proto, q.sport)?;
        crate::stats::global(GLOBAL_ICMP_TOO_BIG);
        if meta.flags & VIP_F_DSR != 0 {
            return Some(deliver(ctx, pkt, &pkt.saddr, backend.addr.words(), false));
        }
        to_backend(ctx, pkt, &q, &backend);
        return Some(deliver(ctx, pkt, &pkt.saddr, backend.addr.words(), true));
    }
    let mut rev = NatReverse::default();
    // Only a recorded flow: an error about one the flood guard left unrecorded goes to
    // the kernel.
    if crate::nat::reverse(&mut key, &mut rev) != crate::nat::Found::Recorded {
        return None;
    }
    crate::stats::global(GLOBAL_ICMP_TOO_BIG);
    to_client(ctx, pkt, &q, &rev);
    Some(deliver(ctx, pkt, &pkt.saddr, &pkt.daddr, true))
}

/// NAT, client side: outer destination VIP -> backend, quoted source VIP:port ->
/// backend:port.
#[inline(always)]
fn to_backend<H: IpHeader>(ctx: &XdpContext, pkt: &Packet<H>, q: &Quote, backend: &BackendSlot) {
    let Some(icmp) = ptr_at::<IcmpHdr>(ctx.data(), ctx.data_end(), pkt.l4_off) else {
        return;
    };
    let mut check = unsafe { (*icmp).check };
    let addr = *backend.addr.words();
    unsafe { H::set_addr(pkt.ip, Side::Destination, &pkt.daddr, &addr) };
    if H::ICMP_PSEUDO_HEADER {
        check = replace_addr::<H>(check, &pkt.daddr, &addr);
    }
    check = rewrite_quote::<H>(ctx, q, Side::Source, &addr, backend.port.to_be(), check);
    if let Some(icmp) = ptr_at::<IcmpHdr>(ctx.data(), ctx.data_end(), pkt.l4_off) {
        unsafe { (*icmp).check = check };
    }
}

/// NAT, backend side: quoted destination backend:port -> VIP:port.
#[inline(always)]
fn to_client<H: IpHeader>(ctx: &XdpContext, pkt: &Packet<H>, q: &Quote, rev: &NatReverse) {
    let Some(icmp) = ptr_at::<IcmpHdr>(ctx.data(), ctx.data_end(), pkt.l4_off) else {
        return;
    };
    let check = unsafe { (*icmp).check };
    let check = rewrite_quote::<H>(
        ctx,
        q,
        Side::Destination,
        rev.vip_addr.words(),
        rev.vip_port.to_be(),
        check,
    );
    if let Some(icmp) = ptr_at::<IcmpHdr>(ctx.data(), ctx.data_end(), pkt.l4_off) {
        unsafe { (*icmp).check = check };
    }
}

/// Rewrites one side of the quote (address, and port unless 0), fixing the quoted IPv4
/// header checksum; returns the ICMP checksum updated for every byte changed.
#[inline(always)]
fn rewrite_quote<H: IpHeader>(
    ctx: &XdpContext,
    q: &Quote,
    side: Side,
    addr: &[u32; 4],
    port: u16,
    mut check: u16,
) -> u16 {
    let (start, end) = (ctx.data(), ctx.data_end());
    let (old_addr, old_port) = match side {
        Side::Source => (&q.saddr, q.sport),
        Side::Destination => (&q.daddr, q.dport),
    };
    if H::FAMILY == FAMILY_V4 {
        let Some(ip) = ptr_at::<Ipv4Hdr>(start, end, q.ip_off) else {
            return check;
        };
        unsafe {
            let old_ip_check = (*ip).check;
            H::set_addr(ip as *mut H, side, old_addr, addr);
            check = csum::replace2(check, old_ip_check, (*ip).check);
        }
    } else {
        let Some(ip) = ptr_at::<Ipv6Hdr>(start, end, q.ip_off) else {
            return check;
        };
        unsafe { H::set_addr(ip as *mut H, side, old_addr, addr) };
    }
    check = replace_addr::<H>(check, old_addr, addr);
    if port != 0 && port != old_port {
        if let Some(ports) = ptr_at::<UdpHdr>(start, end, q.l4_off) {
            unsafe {
                match side {
                    Side::Source => (*ports).sport = port,
                    Side::Destination => (*ports).dport = port,
                }
            }
            check = csum::replace2(check, old_port, port);
        }
    }
    check
}

/// Forwards the (rewritten) error towards `dst` like any routed packet.
#[inline(always)]
fn deliver<H: IpHeader>(
    ctx: &XdpContext,
    pkt: &Packet<H>,
    src: &[u32; 4],
    dst: &[u32; 4],
    routed: bool,
) -> u32 {
    if routed && unsafe { H::hop_limit(pkt.ip) } <= 1 {
        crate::stats::global(GLOBAL_TTL_EXPIRED);
        return xdp_action::XDP_PASS;
    }
    // Rare (one per path MTU change): the per-CPU cache serves both directions.
    match fib::towards_client(ctx, pkt, src, dst) {
        Ok(hop) => {
            if routed {
                unsafe { H::decrement_hop_limit(pkt.ip) };
            }
            fib::transmit(ctx, pkt, &hop)
        }
        Err(_) => {
            crate::stats::global(GLOBAL_FIB_PASS);
            xdp_action::XDP_PASS
        }
    }
}
