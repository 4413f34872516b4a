//! The backend agent's XDP program (`lb-decap`): removes the outer header of the
//! balancer's tunnel packets (IPv4 or IPv6 inside IPv4 or IPv6) on hosts whose kernel has
//! no tunnel devices, so that the inner packet goes up the stack as if it had arrived
//! plain (S-TN3).
//!
//! Tunnel packets are IP in IP (protocol 4 or 41) and, when a GUE port is configured, GUE
//! (UDP to that port, a GUE header of variant 0 without options naming 4 or 41).
//!
//! Per frame, in this order, each step counted under its `DECAP_*` index: not a tunnel
//! packet (passed untouched); not to this host (passed untouched); a malformed outer header
//! or a fragment (dropped); a source outside the configured balancers (dropped); a
//! malformed inner packet (dropped); an inner destination outside the configured VIPs
//! (dropped); else decapsulated and passed.
#![no_std]
#![no_main]

mod checks;
mod counters;
#[allow(dead_code)]
#[path = "../csum.rs"]
mod csum;
mod events;
#[allow(dead_code)]
#[path = "../headers.rs"]
mod headers;
mod maps;
mod parse;

use core::mem::size_of;

use aya_ebpf::bindings::xdp_action;
use aya_ebpf::btf_maps::lpm_trie::Key;
use aya_ebpf::helpers::generated::bpf_xdp_adjust_head;
use aya_ebpf::{macros::xdp, programs::XdpContext};
use lb_common::decap::*;
use lb_common::{Addr, AddrKey, FAMILY_V4};

use network_types::eth::EthHdr;

use crate::headers::{ETH_P_IP, ETH_P_IPV6};
use crate::maps::{DECAP_CONFIG, DECAP_LOCAL, DECAP_SOURCES, DECAP_VIPS};
use crate::parse::{Outer, PROTO_INNER_V4, ptr_at};

/// The agent's program.
#[xdp]
pub fn lb_decap(ctx: XdpContext) -> u32 {
    match decap(&ctx) {
        Ok(verdict) => verdict,
        Err(reason) => {
            counters::add(reason, 1);
            if reason == DECAP_NOT_TUNNEL || reason == DECAP_NOT_LOCAL {
                xdp_action::XDP_PASS
            } else {
                let gue_port = DECAP_CONFIG.get(0).map_or(0, |c| c.gue_port);
                events::dropped(&ctx, gue_port, reason);
                xdp_action::XDP_DROP
            }
        }
    }
}

/// One frame: the verdict of a decapsulated packet, or the counter of why it was not.
#[inline(always)]
fn decap(ctx: &XdpContext) -> Result<u32, u32> {
    let (start, end) = (ctx.data(), ctx.data_end());
    let config = DECAP_CONFIG.get(0).copied().unwrap_or_default();
    let o = parse::outer(start, end, config.gue_port).ok_or(DECAP_NOT_TUNNEL)?;
    if !is_local(o.family, &o.daddr) {
        return Err(DECAP_NOT_LOCAL);
    }
    let l3 = size_of::<EthHdr>();
    let payload = checks::outer(&o, l3, end - start)?;
    let flags = config.flags;
    if flags & DECAP_F_SOURCES != 0 && !from_balancer(&o) {
        return Err(DECAP_FOREIGN_SOURCE);
    }
    let inner = checks::inner(ctx.ctx, (start, end), &o, l3 + o.header_len(), payload)?;
    if flags & DECAP_F_VIPS != 0 && !is_vip(inner.family, &inner.daddr) {
        return Err(DECAP_UNKNOWN_VIP);
    }
    let verdict = strip(ctx, &o);
    if verdict == xdp_action::XDP_PASS {
        counters::add(DECAP_DECAPSULATED, 1);
        counters::add(DECAP_BYTES, payload as u64);
    }
    Ok(verdict)
}

/// The key of an address in `DECAP_LOCAL` and `DECAP_VIPS`.
#[inline(always)]
fn addr_key(family: u8, addr: &[u32; 4]) -> AddrKey {
    AddrKey {
        addr: Addr::from_words(addr),
        family,
        pad: [0; 3],
    }
}

/// Whether the outer destination is one of this host's addresses.
#[inline(always)]
fn is_local(family: u8, addr: &[u32; 4]) -> bool {
    DECAP_LOCAL.get_ptr(addr_key(family, addr)).is_some()
}

/// Whether the inner destination is a configured VIP.
#[inline(always)]
fn is_vip(family: u8, addr: &[u32; 4]) -> bool {
    DECAP_VIPS.get_ptr(addr_key(family, addr)).is_some()
}

/// Whether the outer source is inside a configured balancer prefix.
#[inline(always)]
fn from_balancer(o: &Outer) -> bool {
    let bits = if o.family == FAMILY_V4 { 32 } else { 128 };
    let data = SourceKey {
        family: o.family,
        pad: [0; 3],
        addr: Addr::from_words(&o.saddr),
    };
    DECAP_SOURCES
        .get(&Key::new(SOURCE_PREFIX_BASE + bits, data))
        .is_some()
}

/// Moves the frame's start past the outer header and writes the Ethernet header there: the
/// same MACs, the inner packet's ethertype. The move cannot fail for a frame this long; if
/// it does, the frame is aborted (seen in the `xdp:xdp_exception` tracepoint).
#[inline(always)]
fn strip(ctx: &XdpContext, o: &Outer) -> u32 {
    let Some(eth) = ptr_at::<EthHdr>(ctx.data(), ctx.data_end(), 0) else {
        return xdp_action::XDP_ABORTED;
    };
    // SAFETY: bounds-checked above; copied out before the header is overwritten.
    let (dst, src) = unsafe { ((*eth).dst_addr, (*eth).src_addr) };
    let ethertype = if o.proto == PROTO_INNER_V4 {
        ETH_P_IP
    } else {
        ETH_P_IPV6
    };
    // SAFETY: the helper checks the new start against the frame.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, o.header_len() as i32) } != 0 {
        return xdp_action::XDP_ABORTED;
    }
    let Some(eth) = ptr_at::<EthHdr>(ctx.data(), ctx.data_end(), 0) else {
        return xdp_action::XDP_ABORTED;
    };
    // SAFETY: bounds-checked against the moved frame.
    unsafe {
        (*eth).dst_addr = dst;
        (*eth).src_addr = src;
        (*eth).ether_type = ethertype;
    }
    xdp_action::XDP_PASS
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
