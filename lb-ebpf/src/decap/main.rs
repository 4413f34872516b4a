//! The backend agent's programs (`lb-decap`): remove the outer header of the balancer's
//! tunnel packets (IPv4 or IPv6 inside IPv4 or IPv6) on hosts whose kernel has no tunnel
//! devices, so that the inner packet goes up the stack as if it had arrived plain (S-TN3).
//! An XDP program, and the same checks as a tc ingress program for an interface where XDP
//! cannot attach.
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
mod frame;
#[allow(dead_code)]
#[path = "../headers.rs"]
mod headers;
mod maps;
mod parse;

use core::mem::size_of;

use aya_ebpf::bindings::{
    BPF_F_ADJ_ROOM_DECAP_L3_IPV4, BPF_F_ADJ_ROOM_DECAP_L3_IPV6, bpf_adj_room_mode::BPF_ADJ_ROOM_MAC,
};
use aya_ebpf::bindings::{TC_ACT_OK, TC_ACT_SHOT, xdp_action};
use aya_ebpf::btf_maps::lpm_trie::Key;
use aya_ebpf::helpers::generated::bpf_xdp_adjust_head;
use aya_ebpf::macros::{classifier, xdp};
use aya_ebpf::programs::{TcContext, XdpContext};
use lb_common::decap::*;
use lb_common::{Addr, AddrKey, FAMILY_V4};

use network_types::eth::EthHdr;

use crate::frame::Frame;
use crate::headers::{ETH_P_IP, ETH_P_IPV6};
use crate::maps::{DECAP_CONFIG, DECAP_LOCAL, DECAP_SOURCES, DECAP_VIPS};
use crate::parse::{Outer, PROTO_INNER_V4, ptr_at};

/// Bytes the tc program makes readable directly before it parses: Ethernet, an outer IPv6
/// header, UDP and GUE, and an inner IPv6 header (14 + 40 + 12 + 40 = 106).
const TC_PULL: u32 = 106;

/// The agent's XDP program.
#[xdp]
pub fn lb_decap(ctx: XdpContext) -> u32 {
    match check(&ctx) {
        Ok(found) => {
            let verdict = strip_xdp(&ctx, &found);
            if verdict == xdp_action::XDP_PASS {
                counted(&found);
            }
            verdict
        }
        Err(reason) if passes(reason) => {
            counters::add(reason, 1);
            xdp_action::XDP_PASS
        }
        Err(reason) => {
            dropped(&ctx, reason);
            xdp_action::XDP_DROP
        }
    }
}

/// The agent's tc ingress program, for an interface where XDP cannot attach (another XDP
/// program holds it): the same checks and counters, the outer header removed from the
/// socket buffer instead.
#[classifier]
pub fn lb_decap_tc(ctx: TcContext) -> i32 {
    // A frame the driver split (GRO, a large MTU) is read directly only once its headers
    // are in the linear part; a frame shorter than that is pulled whole.
    let _ = ctx.pull_data(TC_PULL.min(ctx.len()));
    match check(&ctx) {
        Ok(found) => {
            if strip_tc(&ctx, &found) {
                counted(&found);
                TC_ACT_OK as i32
            } else {
                TC_ACT_SHOT as i32
            }
        }
        Err(reason) if passes(reason) => {
            counters::add(reason, 1);
            TC_ACT_OK as i32
        }
        Err(reason) => {
            dropped(&ctx, reason);
            TC_ACT_SHOT as i32
        }
    }
}

/// A frame that checked out: what to remove and what it leaves. Plain values rather than
/// the parsed `Outer`, whose unused GUE fields the verifier would see copied uninitialised.
struct Found {
    /// Bytes of outer headers after the Ethernet header.
    header_len: usize,
    /// The inner packet is IPv4 (else IPv6).
    inner_v4: bool,
    /// The outer header is IPv4 (else IPv6).
    outer_v4: bool,
    /// The inner packet's length.
    payload: usize,
}

/// Whether frames counted under `reason` go up untouched (not tunnel packets for this
/// host) rather than being dropped.
#[inline(always)]
fn passes(reason: u32) -> bool {
    reason == DECAP_NOT_TUNNEL || reason == DECAP_NOT_LOCAL
}

/// Counts a decapsulated packet.
#[inline(always)]
fn counted(found: &Found) {
    counters::add(DECAP_DECAPSULATED, 1);
    counters::add(DECAP_BYTES, found.payload as u64);
}

/// Counts and logs a dropped tunnel packet.
#[inline(always)]
fn dropped<F: Frame>(frame: &F, reason: u32) {
    counters::add(reason, 1);
    let gue_port = DECAP_CONFIG.get(0).map_or(0, |c| c.gue_port);
    events::dropped(frame, gue_port, reason);
}

/// One frame's checks, in the order the counters list them: the outer header to remove
/// when it is a tunnel packet to decapsulate, else the counter of why not.
#[inline(always)]
fn check<F: Frame>(frame: &F) -> Result<Found, u32> {
    let (start, end) = (frame.start(), frame.end());
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
    let inner = checks::inner(frame, (start, end), &o, l3 + o.header_len(), payload)?;
    if flags & DECAP_F_VIPS != 0 && !is_vip(inner.family, &inner.daddr) {
        return Err(DECAP_UNKNOWN_VIP);
    }
    Ok(Found {
        header_len: o.header_len(),
        inner_v4: o.proto == PROTO_INNER_V4,
        outer_v4: o.family == FAMILY_V4,
        payload,
    })
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
fn strip_xdp(ctx: &XdpContext, found: &Found) -> u32 {
    let Some(eth) = ptr_at::<EthHdr>(ctx.data(), ctx.data_end(), 0) else {
        return xdp_action::XDP_ABORTED;
    };
    // SAFETY: bounds-checked above; copied out before the header is overwritten.
    let (dst, src) = unsafe { ((*eth).dst_addr, (*eth).src_addr) };
    let ethertype = if found.inner_v4 { ETH_P_IP } else { ETH_P_IPV6 };
    // SAFETY: the helper checks the new start against the frame.
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, found.header_len as i32) } != 0 {
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

/// Removes the outer header from the socket buffer, behind its MAC header, and gives the
/// frame the inner packet's ethertype; when the families differ (4in6, 6in4) the kernel
/// is told, so that it hands the packet to the inner family's stack. False when the buffer
/// could not be changed (the frame is then dropped).
#[inline(always)]
fn strip_tc(ctx: &TcContext, found: &Found) -> bool {
    let (ethertype, decap_flag) = if found.inner_v4 {
        (ETH_P_IP, BPF_F_ADJ_ROOM_DECAP_L3_IPV4)
    } else {
        (ETH_P_IPV6, BPF_F_ADJ_ROOM_DECAP_L3_IPV6)
    };
    let flags = if found.inner_v4 == found.outer_v4 {
        0
    } else {
        decap_flag as u64
    };
    let shrink = -(found.header_len as i32);
    if ctx.adjust_room(shrink, BPF_ADJ_ROOM_MAC, flags).is_err() {
        return false;
    }
    // The ethertype's offset in the Ethernet header.
    ctx.store(12, &ethertype, 0).is_ok()
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
