//! The XDP data path of Network vServices.
//!
//! Per packet, IPv4 or IPv6: parse, find the VIP, choose the backend (connection table,
//! then Maglev), rewrite (NAT or DSR) and forward with the kernel's next hop. The path is
//! written once over [`ip::IpHeader`] and compiled for each family. Anything that is not for a
//! VIP, or that the program cannot handle, goes to the kernel untouched.
#![no_std]
#![no_main]

mod csum;
mod events;
mod fib;
mod filter;
mod flood;
mod flow;
mod headers;
mod health_tunnel;
mod icmp;
mod icmp_error;
mod ip;
mod maps;
mod nat;
mod parse;
mod parse6;
mod rewrite;
mod sanity;
mod stats;
mod tunnel;
mod vip;
mod zeroed;

use aya_ebpf::{
    bindings::xdp_action,
    macros::{classifier, xdp},
    programs::{TcContext, XdpContext},
};
use lb_common::*;

use crate::fib::{Egress, Miss};
use crate::flow::Known;
use crate::headers::{IPPROTO_TCP, IPPROTO_UDP, TCP_ACK, TCP_SYN};
use crate::ip::{IpHeader, Side};
use crate::maps::PROGS;
use crate::nat::{Found, NatReverse};
use crate::parse::{Packet, Parsed, Skip};

/// The balancer program.
#[xdp]
pub fn lb_xdp(ctx: XdpContext) -> u32 {
    match parse::parse(&ctx) {
        Ok(Parsed::V4(pkt)) => balance(&ctx, &pkt),
        Ok(Parsed::V6(pkt)) => balance(&ctx, &pkt),
        Err(skip) => {
            stats::global(match skip {
                Skip::Malformed => GLOBAL_MALFORMED,
                Skip::NotIp => GLOBAL_NOT_IP,
                Skip::Fragment => GLOBAL_FRAGMENT,
                Skip::Ipv6Ext => GLOBAL_IPV6_EXT,
                Skip::Neighbour => GLOBAL_NO_VIP,
            });
            xdp_action::XDP_PASS
        }
    }
}

/// "Too big" errors about VIP flows (reached from [`lb_xdp`] by a tail call): delivered to
/// the flow's backend or client, or passed to the kernel.
#[xdp]
pub fn lb_xdp_icmp(ctx: XdpContext) -> u32 {
    let verdict = match parse::parse(&ctx) {
        Ok(Parsed::V4(pkt)) if icmp_error::is_candidate(&pkt) => match header_checked(&ctx, &pkt) {
            Ok(()) => icmp_error::deliver_error(&ctx, &pkt),
            Err(verdict) => Some(verdict),
        },
        Ok(Parsed::V6(pkt)) if icmp_error::is_candidate(&pkt) => {
            icmp_error::deliver_error(&ctx, &pkt)
        }
        _ => None,
    };
    verdict.unwrap_or_else(|| {
        stats::global(GLOBAL_NO_VIP);
        xdp_action::XDP_PASS
    })
}

/// Packets from a NAT backend's address (reached from [`lb_xdp`] by a tail call, so that the
/// verifier checks the reply path apart: inlined, the two exceed its budget): a reply put
/// back to its client, or passed to the kernel.
#[xdp]
pub fn lb_xdp_nat(ctx: XdpContext) -> u32 {
    match parse::parse(&ctx) {
        Ok(Parsed::V4(pkt)) => nat_reply(&ctx, &pkt),
        Ok(Parsed::V6(pkt)) => nat_reply(&ctx, &pkt),
        Err(_) => {
            stats::global(GLOBAL_NO_VIP);
            xdp_action::XDP_PASS
        }
    }
}

/// Packets of tunnelled VIPs (reached from [`lb_xdp`] by a tail call once their backend is
/// chosen): encapsulated towards it.
#[xdp]
pub fn lb_xdp_tunnel(ctx: XdpContext) -> u32 {
    match parse::parse(&ctx) {
        Ok(Parsed::V4(pkt)) => tunnel::encapsulate(&ctx, &pkt),
        Ok(Parsed::V6(pkt)) => tunnel::encapsulate(&ctx, &pkt),
        Err(_) => {
            stats::global(GLOBAL_TUNNEL_FAILED);
            xdp_action::XDP_DROP
        }
    }
}

/// Packets leaving the balancer's interfaces: the health checks of tunnelled servers go
/// inside the tunnel (S-TN4); everything else is left alone.
#[classifier]
pub fn lb_tc_health(ctx: TcContext) -> i32 {
    health_tunnel::egress(&ctx)
}

/// One parsed packet of either family: to a VIP, a NAT reply, or the kernel's.
#[inline(always)]
fn balance<H: IpHeader>(ctx: &XdpContext, pkt: &Packet<H>) -> u32 {
    if icmp_error::is_candidate(pkt) {
        // Returns only when the program is not there: then the error goes on as any packet.
        unsafe { PROGS.tail_call(ctx, PROG_ICMP_ERROR) };
    }
    if filter::may_be_vip(&pkt.daddr) {
        if let Err(verdict) = header_checked(ctx, pkt) {
            return verdict;
        }
        if pkt.proto == IPPROTO_TCP && pkt.tcp_flags & (TCP_SYN | TCP_ACK) == TCP_SYN {
            // A SYN always selects afresh: its VIP first, as for any new flow.
            let Some(meta) = vip::find::<H>(&pkt.daddr, pkt.proto, pkt.dport) else {
                return not_for_us(ctx, pkt);
            };
            // Before a slot is read: see `fib::generation`.
            let generation = fib::generation();
            let key = flow::key(pkt);
            return to_backend(ctx, pkt, &meta, (&key, true, false), generation);
        }
        // Before a slot or a flow's copy of one is read: see `fib::generation`.
        let generation = fib::generation();
        let key = flow::key(pkt);
        // A known flow of an exact VIP names its VIP and backend: one hash lookup.
        let absent = match flow::known(&key) {
            Known::Fast(meta, choice) => {
                // No martian check: a flow is recorded only by `to_backend`, after it.
                if ttl_expired(pkt, &meta) {
                    return xdp_action::XDP_PASS;
                }
                stats::forwarded(meta.vip_id, choice.counters, &choice.event(pkt.len));
                return forward(ctx, pkt, &meta, &choice, generation);
            }
            Known::Absent => true,
            Known::Other => false,
        };
        if let Some(meta) = vip::find::<H>(&pkt.daddr, pkt.proto, pkt.dport) {
            return to_backend(ctx, pkt, &meta, (&key, false, absent), generation);
        }
    }
    not_for_us(ctx, pkt)
}

/// A packet to no VIP: a NAT reply, or the kernel's.
#[inline(always)]
fn not_for_us<H: IpHeader>(ctx: &XdpContext, pkt: &Packet<H>) -> u32 {
    if filter::may_be_nat_backend(&pkt.saddr) {
        if let Err(verdict) = header_checked(ctx, pkt) {
            return verdict;
        }
        // Returns only when the program is not there.
        unsafe { PROGS.tail_call(ctx, PROG_NAT_REPLY) };
    }
    stats::global(GLOBAL_NO_VIP);
    xdp_action::XDP_PASS
}

/// The kernel's receive checks of the IP header ([`IpHeader::check_header`]), made before
/// anything that may be forwarded: `Err` holds the verdict of a packet that fails them,
/// dropped and counted under its reason.
#[inline(always)]
fn header_checked<H: IpHeader>(ctx: &XdpContext, pkt: &Packet<H>) -> Result<(), u32> {
    unsafe { H::check_header(ctx, pkt.ip) }.map_err(|reason| {
        stats::global(reason);
        xdp_action::XDP_DROP
    })
}

/// A packet to a VIP from a source no host sends from is counted here; the caller drops
/// it.
#[inline(always)]
fn martian<H: IpHeader>(pkt: &Packet<H>) -> bool {
    let martian = unsafe { H::martian_source(pkt.ip) };
    if martian {
        stats::global(GLOBAL_MARTIAN_SOURCE);
    }
    martian
}

/// A NAT packet whose hop limit would end here goes to the kernel (which answers it). DSR
/// and tunnel forwarding leave the hop limit alone.
#[inline(always)]
fn ttl_expired<H: IpHeader>(pkt: &Packet<H>, meta: &VipMeta) -> bool {
    let expired =
        meta.flags & (VIP_F_DSR | VIP_F_TUNNEL) == 0 && unsafe { H::hop_limit(pkt.ip) } <= 1;
    if expired {
        stats::global(GLOBAL_TTL_EXPIRED);
    }
    expired
}

/// Client -> VIP: choose a backend (which counts the packet) and forward. `flow`: the
/// packet's flow key, whether it is a TCP SYN, and whether the connection table has already
/// been found not to hold it.
#[inline(always)]
fn to_backend<H: IpHeader>(
    ctx: &XdpContext,
    pkt: &Packet<H>,
    meta: &VipMeta,
    flow: (&FlowKey, bool, bool),
    generation: u32,
) -> u32 {
    let (key, is_syn, absent) = flow;
    if martian(pkt) {
        return xdp_action::XDP_DROP;
    }
    if ttl_expired(pkt, meta) {
        return xdp_action::XDP_PASS;
    }
    let Some(choice) = flow::choose(key, meta, is_syn, absent, pkt.len) else {
        stats::dropped(meta.vip_id);
        return xdp_action::XDP_DROP;
    };
    forward(ctx, pkt, meta, &choice, generation)
}

/// Forwards a packet to the backend of `choice`: encapsulated by the tunnel program, or
/// next hop, then the NAT rewrite or DSR as is.
#[inline(always)]
fn forward<H: IpHeader>(
    ctx: &XdpContext,
    pkt: &Packet<H>,
    meta: &VipMeta,
    choice: &flow::Choice,
    generation: u32,
) -> u32 {
    let dsr = meta.flags & VIP_F_DSR != 0;
    let (backend_addr, backend_port, hop) = (choice.addr, choice.port, choice.hop);
    if meta.flags & VIP_F_TUNNEL != 0 {
        let gue = meta.flags & VIP_F_GUE != 0;
        return tunnel::hand_over(ctx, &backend_addr, (hop, generation), gue);
    }
    // The next hop first: a packet too big for the path is answered before it is changed.
    let hop = fib::towards_backend(ctx, pkt, &backend_addr, hop, generation);
    if let Err(Miss::TooBig(mtu)) = hop {
        stats::global(GLOBAL_TOO_BIG);
        if let Some(verdict) = icmp::too_big(ctx, pkt, mtu) {
            return verdict;
        }
    }
    if dsr {
        return match hop {
            Ok(hop) => fib::transmit(ctx, pkt, &hop),
            Err(_) => {
                stats::global(GLOBAL_FIB_PASS);
                xdp_action::XDP_PASS
            }
        };
    }
    rewrite::nat(
        ctx,
        pkt,
        Side::Destination,
        &backend_addr,
        backend_port.to_be(),
    );
    // Unresolved or too big without DF: the kernel forwards (and fragments) the rewritten
    // packet.
    finish(ctx, pkt, hop)
}

/// Backend -> client in NAT mode: put the VIP back as the source. A packet that is no
/// NAT flow of ours goes to the kernel untouched.
#[inline(always)]
fn nat_reply<H: IpHeader>(ctx: &XdpContext, pkt: &Packet<H>) -> u32 {
    let mut reply = flow::key(pkt);
    let mut rev = NatReverse::default();
    let found = nat::reverse(&mut reply, &mut rev);
    // A flow found by Maglev only: its packets must have a route onward. The balancer's
    // own address (a health check's answer) has none, nor has an unresolved client yet:
    // only a recorded flow is surely a client's.
    if found == Found::No
        || (found == Found::ByMaglev
            && !fib::routes_onward(ctx, pkt, rev.vip_addr.words(), &pkt.daddr))
    {
        stats::global(GLOBAL_NO_VIP);
        return xdp_action::XDP_PASS;
    }
    if unsafe { H::hop_limit(pkt.ip) } <= 1 {
        stats::global(GLOBAL_TTL_EXPIRED);
        return xdp_action::XDP_PASS;
    }
    stats::replied(rev.vip_id, rev.slot, pkt.len);
    stats::global(GLOBAL_NAT_REPLY);
    let port = if pkt.proto == IPPROTO_TCP || pkt.proto == IPPROTO_UDP {
        rev.vip_port.to_be()
    } else {
        0
    };
    let vip_addr = *rev.vip_addr.words();
    let hop = fib::towards_client(ctx, pkt, &vip_addr, &pkt.daddr);
    if let Err(Miss::TooBig(_)) = hop {
        // Untranslated, so that the kernel's "too big" reaches the backend that sent it.
        stats::global(GLOBAL_TOO_BIG);
        return xdp_action::XDP_PASS;
    }
    rewrite::nat(ctx, pkt, Side::Source, &vip_addr, port);
    finish(ctx, pkt, hop)
}

/// After a NAT rewrite: TTL or hop limit and MACs towards the next hop; without one, the
/// kernel forwards the packet.
#[inline(always)]
fn finish<H: IpHeader>(ctx: &XdpContext, pkt: &Packet<H>, hop: Result<Egress, Miss>) -> u32 {
    match hop {
        Ok(hop) => {
            unsafe { H::decrement_hop_limit(pkt.ip) };
            fib::transmit(ctx, pkt, &hop)
        }
        Err(_) => {
            stats::global(GLOBAL_FIB_PASS);
            xdp_action::XDP_PASS
        }
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
