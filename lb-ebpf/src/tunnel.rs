//! Tunnel forwarding (S-TN1, S-TN2): the packet of a tunnelled VIP goes unchanged inside
//! an outer IP header of its own family (IPIP for IPv4, IP6IP6 for IPv6), or inside outer
//! IP, UDP and a GUE header (`gue`), addressed to the chosen backend, to the FIB's next hop
//! towards that backend, so that backends may sit behind routers; the backend's agent
//! (`lb decap`) removes the outer header and the backend answers the client directly.
//!
//! The balancer program chooses the backend as for any VIP, then hands the packet over by a
//! tail call ([`hand_over`]) to the tunnel program ([`encapsulate`]), so that the verifier
//! checks the encapsulation apart from the balancer's path (inlined, the two exceed its
//! budget), as it does for NAT replies and ICMP errors.
//!
//! The outer source is the family's configured prefix with the flow's hash in its host
//! bits (and, for IPv6, the hash in the flow label too; for GUE, in the UDP source port):
//! routers' ECMP and the backends' RSS spread flows, and every balancer builds the same
//! outer header for the same flow.

use aya_ebpf::{
    EbpfContext, bindings::xdp_action, helpers::generated::bpf_xdp_adjust_head,
    programs::XdpContext,
};
use lb_common::{Addr, GLOBAL_FIB_PASS, GLOBAL_TOO_BIG, GLOBAL_TUNNEL_FAILED, GLOBAL_TUNNELLED};
use lb_common::{
    GUE_OVERHEAD, PROG_TUNNEL, TunnelJob, TunnelSource, gue_source_port, tunnel_flow_hash,
};

use crate::events;
use crate::fib::{self, Miss};
use crate::headers::{EthHdr, IPPROTO_UDP, UdpGue};
use crate::icmp;
use crate::ip::IpHeader;
use crate::maps::{PROGS, TUNNEL_JOB, TUNNEL_SOURCES};
use crate::parse::{Packet, ptr_at};
use crate::stats;

const ETH_LEN: usize = 14;

/// Hands the packet to the tunnel program with its backend: `addr`, whose next hop is at
/// `hop` in `HOPS`, read under next-hop `generation`; `gue` for a GUE tunnel. Returns only
/// when that cannot be done (the program is not there): the packet is dropped and counted,
/// since the kernel has no tunnel to send it through.
#[inline(always)]
pub fn hand_over(
    ctx: &XdpContext,
    addr: &[u32; 4],
    (hop, generation): (u32, u32),
    gue: bool,
) -> u32 {
    if let Some(job) = TUNNEL_JOB.get_ptr_mut(0) {
        // SAFETY: this CPU's copy; the tail call below runs on this CPU before any other
        // packet does.
        unsafe {
            *job = TunnelJob {
                addr: Addr::from_words(addr),
                hop,
                generation,
                gue: gue as u32,
            }
        };
        // Returns only when the program is not there.
        unsafe { PROGS.tail_call(ctx, PROG_TUNNEL) };
    }
    failed(ctx, "the tunnel program is not loaded")
}

/// The tunnel program's work on a packet of family `H` handed over by [`hand_over`]:
/// encapsulated and sent to the backend's next hop (`XDP_TX` or a redirect); without a
/// usable next hop yet (a neighbour to resolve), encapsulated and passed to the kernel,
/// which forwards it as any routed packet; too big once encapsulated, answered with the
/// usable MTU (S-TN2).
#[inline(always)]
pub fn encapsulate<H: IpHeader>(ctx: &XdpContext, pkt: &Packet<H>) -> u32 {
    let Some(job) = TUNNEL_JOB.get(0).copied() else {
        return failed(ctx, "no backend handed over");
    };
    let source = match TUNNEL_SOURCES.get(H::TUNNEL_SOURCE) {
        Some(s) if s.set != 0 => *s,
        _ => return failed(ctx, "no tunnel source of this family configured"),
    };
    // A VLAN tag belongs to the interface the packet came in on, not to the one the
    // backend is behind: such a frame is not rebuilt here.
    if (pkt.ip as usize) != ctx.data() + ETH_LEN {
        return failed(ctx, "a VLAN-tagged frame");
    }
    // One specialised path per kind of tunnel: the verifier and the CPU each walk only
    // the one the VIP uses.
    if job.gue != 0 {
        wrap::<H, true>(ctx, pkt, &job, &source)
    } else {
        wrap::<H, false>(ctx, pkt, &job, &source)
    }
}

/// [`encapsulate`] for IP in IP (`GUE` false) or GUE.
#[inline(always)]
fn wrap<H: IpHeader, const GUE: bool>(
    ctx: &XdpContext,
    pkt: &Packet<H>,
    job: &TunnelJob,
    source: &TunnelSource,
) -> u32 {
    let dst = *job.addr.words();
    let hash = flow_hash(pkt);
    let src = source.outer_source(H::WORDS, hash);
    let inner_len = unsafe { H::tot_len(pkt.ip) };
    let extra = if GUE { GUE_OVERHEAD } else { 0 };
    let overhead = H::TUNNEL_OVERHEAD + extra;
    let outer_len = inner_len.saturating_add(overhead);
    let hop = fib::towards_backend_as(ctx, pkt, (&src, outer_len), &dst, job.hop, job.generation);
    if let Err(Miss::TooBig(mtu)) = hop {
        stats::global(GLOBAL_TOO_BIG);
        let usable = mtu.saturating_sub(overhead);
        events::too_big(ctx, H::WORDS == 1, &job.addr, inner_len, usable);
        return icmp::too_big_for_tunnel(ctx, pkt, usable)
            .unwrap_or_else(|| failed(ctx, "no room for the ICMP too big"));
    }
    let (arrived_dst, arrived_src) = unsafe { ((*pkt.eth).dst, (*pkt.eth).src) };
    let traffic_class = unsafe { H::traffic_class(pkt.ip) };
    if unsafe { bpf_xdp_adjust_head(ctx.as_ptr() as *mut _, -(overhead as i32)) } != 0 {
        return failed(ctx, "no headroom for the outer header");
    }
    let (start, end) = (ctx.data(), ctx.data_end());
    let (Some(eth), Some(outer)) = (
        ptr_at::<EthHdr>(start, end, 0),
        ptr_at::<H>(start, end, ETH_LEN),
    ) else {
        return failed(ctx, "the frame is shorter than its outer header");
    };
    let addrs = (&src, &dst);
    if GUE {
        let at = ETH_LEN + H::TUNNEL_OVERHEAD as usize;
        let Some(udp) = ptr_at::<UdpGue>(start, end, at) else {
            return failed(ctx, "the frame is shorter than its GUE header");
        };
        let payload = inner_len.wrapping_add(GUE_OVERHEAD);
        unsafe {
            H::write_outer(outer, addrs, payload, IPPROTO_UDP, traffic_class, hash);
            *udp = UdpGue::new(
                gue_source_port(hash),
                source.gue_port,
                payload,
                H::TUNNEL_PROTO,
            );
        }
    } else {
        unsafe {
            H::write_outer(
                outer,
                addrs,
                inner_len,
                H::TUNNEL_PROTO,
                traffic_class,
                hash,
            )
        };
    }
    stats::global(GLOBAL_TUNNELLED);
    match hop {
        Ok(hop) => {
            unsafe {
                (*eth).dst = hop.dmac;
                (*eth).src = hop.smac;
                (*eth).proto = H::ETHERTYPE;
            }
            fib::send(ctx, &hop)
        }
        Err(_) => {
            // Addressed as it arrived (to this host's MAC), so that the kernel takes it and
            // forwards it to the backend, resolving the neighbour on the way.
            unsafe {
                (*eth).dst = arrived_dst;
                (*eth).src = arrived_src;
                (*eth).proto = H::ETHERTYPE;
            }
            stats::global(GLOBAL_FIB_PASS);
            xdp_action::XDP_PASS
        }
    }
}

/// A packet that could not be encapsulated, for the reason `why`: counted, logged and
/// dropped (no kernel path would tunnel it).
#[inline(always)]
fn failed(ctx: &XdpContext, why: &'static str) -> u32 {
    stats::global(GLOBAL_TUNNEL_FAILED);
    events::tunnel_failed(ctx, why);
    xdp_action::XDP_DROP
}

/// The flow's hash, the same on every balancer (`lb_common::tunnel_flow_hash`).
#[inline(always)]
fn flow_hash<H: IpHeader>(pkt: &Packet<H>) -> u32 {
    tunnel_flow_hash(&pkt.saddr, H::WORDS, pkt.sport, pkt.proto)
}
