//! The XDP data path of Network vServices.
//!
//! Per packet: parse, find the VIP, choose the backend (connection table, then Maglev),
//! rewrite (NAT or DSR) and forward with the kernel's next hop. Anything that is not for a
//! VIP, or that the program cannot handle, goes to the kernel untouched.
#![no_std]
#![no_main]

mod csum;
mod fib;
mod flow;
mod headers;
mod maps;
mod parse;
mod rewrite;
mod stats;

use aya_ebpf::{bindings::xdp_action, btf_maps::lpm_trie::Key, macros::xdp, programs::XdpContext};
use lb_common::*;

use crate::headers::{IPPROTO_TCP, IPPROTO_UDP, TCP_ACK, TCP_SYN};
use crate::maps::{ADDRS, NAT_REV, RANGES, VIPS};
use crate::parse::{Packet, Skip};
use crate::rewrite::Side;

/// The balancer program.
#[xdp]
pub fn lb_xdp(ctx: XdpContext) -> u32 {
    let pkt = match parse::parse(&ctx) {
        Ok(pkt) => pkt,
        Err(skip) => {
            stats::global(match skip {
                Skip::Malformed => GLOBAL_MALFORMED,
                Skip::NotIpv4 => GLOBAL_NOT_IPV4,
                Skip::Fragment => GLOBAL_FRAGMENT,
            });
            return xdp_action::XDP_PASS;
        }
    };
    if let Some(meta) = find_vip(&pkt) {
        return to_backend(&ctx, &pkt, &meta);
    }
    nat_reply(&ctx, &pkt)
}

/// Exact VIP first (one lookup for most VIP traffic), then, for addresses that have them,
/// Port Range and ANY-L3 entries.
#[inline(always)]
fn find_vip(pkt: &Packet) -> Option<VipMeta> {
    let addr = [pkt.daddr, 0, 0, 0];
    let has_ports = pkt.proto == IPPROTO_TCP || pkt.proto == IPPROTO_UDP;
    if has_ports {
        let key = VipKey {
            addr,
            port: pkt.dport,
            proto: pkt.proto,
            family: FAMILY_V4,
        };
        if let Some(meta) = unsafe { VIPS.get(&key) } {
            return Some(*meta);
        }
    }
    let roles = *unsafe { ADDRS.get(&AddrKey { addr }) }?;
    if has_ports && roles & ADDR_VIP_RANGE != 0 {
        let data = RangeData {
            addr,
            proto: pkt.proto,
            pad: 0,
            port: pkt.dport,
        };
        let key = Key::new(RANGE_PREFIX_BASE + 16, data);
        if let Some(meta) = RANGES.get(&key) {
            return Some(*meta);
        }
    }
    if roles & ADDR_VIP_ANY != 0 {
        let key = VipKey {
            addr,
            port: 0,
            proto: PROTO_ANY,
            family: FAMILY_V4,
        };
        if let Some(meta) = unsafe { VIPS.get(&key) } {
            return Some(*meta);
        }
    }
    None
}

/// Client -> VIP: choose a backend and forward.
#[inline(always)]
fn to_backend(ctx: &XdpContext, pkt: &Packet, meta: &VipMeta) -> u32 {
    let dsr = meta.flags & VIP_F_DSR != 0;
    if !dsr && unsafe { (*pkt.ip).ttl } <= 1 {
        stats::global(GLOBAL_TTL_EXPIRED);
        return xdp_action::XDP_PASS;
    }
    let key = FlowKey {
        src: [pkt.saddr, 0, 0, 0],
        dst: [pkt.daddr, 0, 0, 0],
        sport: pkt.sport,
        dport: pkt.dport,
        proto: pkt.proto,
        family: FAMILY_V4,
        pad: 0,
    };
    let is_syn = pkt.proto == IPPROTO_TCP && pkt.tcp_flags & (TCP_SYN | TCP_ACK) == TCP_SYN;
    let Some(choice) = flow::choose(&key, meta, is_syn) else {
        stats::dropped(meta.vip_id);
        return xdp_action::XDP_DROP;
    };
    let ev = stats::Event {
        bytes: pkt.len,
        new_flow: choice.new_flow,
        ct_miss: choice.ct_miss,
    };
    stats::forwarded(meta.vip_id, choice.slot, &ev);
    let backend_addr = choice.backend.addr[0];
    if dsr {
        return match fib::lookup(ctx, pkt, pkt.saddr, backend_addr) {
            Some(hop) => fib::transmit(ctx, pkt, &hop),
            None => {
                stats::global(GLOBAL_FIB_PASS);
                xdp_action::XDP_PASS
            }
        };
    }
    if choice.new_flow {
        let port = if choice.backend.port == 0 {
            pkt.dport
        } else {
            choice.backend.port
        };
        let rev_key = FlowKey {
            src: [backend_addr, 0, 0, 0],
            dst: [pkt.saddr, 0, 0, 0],
            sport: port,
            dport: pkt.sport,
            proto: pkt.proto,
            family: FAMILY_V4,
            pad: 0,
        };
        let rev = NatReverse {
            vip_addr: [pkt.daddr, 0, 0, 0],
            vip_port: pkt.dport,
            pad: 0,
            vip_id: meta.vip_id,
            slot: choice.slot,
        };
        let _ = NAT_REV.insert(&rev_key, &rev, 0);
    }
    rewrite::nat(
        ctx,
        pkt,
        Side::Destination,
        backend_addr,
        choice.backend.port,
    );
    forward(ctx, pkt, pkt.saddr, backend_addr)
}

/// Backend -> client in NAT mode: put the VIP back as the source. Anything without a
/// reverse entry is not ours and goes to the kernel untouched.
#[inline(always)]
fn nat_reply(ctx: &XdpContext, pkt: &Packet) -> u32 {
    let key = FlowKey {
        src: [pkt.saddr, 0, 0, 0],
        dst: [pkt.daddr, 0, 0, 0],
        sport: pkt.sport,
        dport: pkt.dport,
        proto: pkt.proto,
        family: FAMILY_V4,
        pad: 0,
    };
    let Some(rev) = (unsafe { NAT_REV.get(&key) }).copied() else {
        stats::global(GLOBAL_NO_VIP);
        return xdp_action::XDP_PASS;
    };
    if unsafe { (*pkt.ip).ttl } <= 1 {
        stats::global(GLOBAL_TTL_EXPIRED);
        return xdp_action::XDP_PASS;
    }
    let ev = stats::Event {
        bytes: pkt.len,
        new_flow: false,
        ct_miss: false,
    };
    stats::forwarded(rev.vip_id, rev.slot, &ev);
    stats::global(GLOBAL_NAT_REPLY);
    let port = if pkt.proto == IPPROTO_TCP || pkt.proto == IPPROTO_UDP {
        rev.vip_port
    } else {
        0
    };
    rewrite::nat(ctx, pkt, Side::Source, rev.vip_addr[0], port);
    forward(ctx, pkt, rev.vip_addr[0], pkt.daddr)
}

/// After a NAT rewrite: next hop, TTL, MACs; the kernel forwards what XDP cannot.
#[inline(always)]
fn forward(ctx: &XdpContext, pkt: &Packet, src: u32, dst: u32) -> u32 {
    match fib::lookup(ctx, pkt, src, dst) {
        Some(hop) => {
            rewrite::decrement_ttl(pkt);
            fib::transmit(ctx, pkt, &hop)
        }
        None => {
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
