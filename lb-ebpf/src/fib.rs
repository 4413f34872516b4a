//! Next hop from the kernel's FIB (cached briefly per destination) and the final MAC
//! rewrite + forwarding verdict.

use core::mem;

use aya_ebpf::{
    EbpfContext,
    bindings::{bpf_fib_lookup as FibParams, xdp_action},
    helpers::generated::{bpf_fib_lookup, bpf_ktime_get_ns, bpf_redirect},
    programs::XdpContext,
};
use lb_common::{AddrKey, GLOBAL_FIB_LOOKUP, NEXTHOP_TTL_NS, NextHop};

use crate::ip::IpHeader;
use crate::maps::NEXTHOPS;
use crate::parse::Packet;

const BPF_FIB_LKUP_RET_SUCCESS: i64 = 0;
const BPF_FIB_LKUP_RET_FRAG_NEEDED: i64 = 8;

/// Why there is no next hop XDP can use.
pub enum Miss {
    /// The packet is bigger than the MTU towards the destination (the MTU).
    TooBig(u16),
    /// Anything else the kernel does better: no neighbour entry yet, no route, forwarding
    /// disabled...
    Kernel,
}

/// The next hop towards `dst`: from the cache while fresh and the packet no bigger than
/// one the FIB accepted, else from the FIB as if the packet arrived on the ingress
/// interface (which checks the packet against the route's MTU). Failures are never cached.
#[inline(always)]
pub fn lookup<H: IpHeader>(
    ctx: &XdpContext,
    pkt: &Packet<H>,
    src: &[u32; 4],
    dst: &[u32; 4],
) -> Result<NextHop, Miss> {
    let key = AddrKey {
        addr: *dst,
        family: H::FAMILY,
        pad: [0; 3],
    };
    let now = unsafe { bpf_ktime_get_ns() };
    let len = unsafe { H::tot_len(pkt.ip) };
    if let Some(hop) = unsafe { NEXTHOPS.get(&key) } {
        if hop.expires > now && len <= hop.max_len {
            return Ok(*hop);
        }
    }
    crate::stats::global(GLOBAL_FIB_LOOKUP);
    let mut params: FibParams = unsafe { mem::zeroed() };
    params.family = H::AF;
    params.l4_protocol = pkt.proto;
    params.sport = pkt.sport;
    params.dport = pkt.dport;
    params.__bindgen_anon_1.tot_len = len;
    params.ifindex = ctx.ingress_ifindex() as u32;
    H::fib_addrs(&mut params, src, dst);
    let rc = unsafe {
        bpf_fib_lookup(
            ctx.as_ptr(),
            &mut params,
            mem::size_of::<FibParams>() as i32,
            0,
        )
    };
    if rc == BPF_FIB_LKUP_RET_FRAG_NEEDED {
        return Err(Miss::TooBig(unsafe { params.__bindgen_anon_1.mtu_result }));
    }
    if rc != BPF_FIB_LKUP_RET_SUCCESS {
        return Err(Miss::Kernel);
    }
    let hop = NextHop {
        ifindex: params.ifindex,
        smac: params.smac,
        dmac: params.dmac,
        max_len: len,
        pad: [0; 6],
        expires: now + NEXTHOP_TTL_NS,
    };
    let _ = NEXTHOPS.insert(&key, &hop, 0);
    Ok(hop)
}

/// Writes the next hop's MACs and returns XDP_TX (same interface) or XDP_REDIRECT.
#[inline(always)]
pub fn transmit<H>(ctx: &XdpContext, pkt: &Packet<H>, hop: &NextHop) -> u32 {
    unsafe {
        (*pkt.eth).dst = hop.dmac;
        (*pkt.eth).src = hop.smac;
    }
    if hop.ifindex == ctx.ingress_ifindex() as u32 {
        xdp_action::XDP_TX
    } else {
        unsafe { bpf_redirect(hop.ifindex, 0) as u32 }
    }
}
