//! Next hop from the kernel's FIB (cached briefly per destination and CPU) and the final MAC
//! rewrite + forwarding verdict.

use core::mem;

use aya_ebpf::{
    EbpfContext,
    bindings::{bpf_fib_lookup as FibParams, xdp_action},
    helpers::generated::{bpf_fib_lookup, bpf_jiffies64, bpf_redirect},
    programs::XdpContext,
};
use lb_common::{
    Addr, GLOBAL_FIB_LOOKUP, NEXTHOP_REPLY_BASE, NEXTHOP_TTL_JIFFIES, NextHop, filter_bit,
};

use crate::ip::IpHeader;
use crate::maps::{NEXTHOP_GEN, NEXTHOPS};
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

/// Which half of the cache a destination uses: backends and clients apart, so that many
/// client addresses never push the few backends out.
#[derive(Clone, Copy)]
pub enum Towards {
    Backend,
    Client,
}

/// The next hop towards `dst`: from this CPU's cache while fresh (same generation, not
/// expired) and the packet no bigger than one the FIB accepted, else from the FIB as if the
/// packet arrived on the ingress interface (which checks the packet against the route's
/// MTU). The cache is two-way: `dst` may sit in either entry of its pair. Failures are
/// never cached.
#[inline(always)]
pub fn lookup<H: IpHeader>(
    ctx: &XdpContext,
    pkt: &Packet<H>,
    src: &[u32; 4],
    dst: &[u32; 4],
    towards: Towards,
) -> Result<NextHop, Miss> {
    let base = match towards {
        Towards::Backend => 0,
        Towards::Client => NEXTHOP_REPLY_BASE,
    };
    let pair = base + (filter_bit(dst) & (NEXTHOP_REPLY_BASE - 2));
    let now = unsafe { bpf_jiffies64() };
    let generation = NEXTHOP_GEN.get(0).copied().unwrap_or(0);
    let len = unsafe { H::tot_len(pkt.ip) };
    // The entry to replace on a miss: the one already for `dst`, else one that is stale.
    let mut victim = pair + 1;
    let mut way = 0;
    while way < 2 {
        if let Some(hop) = NEXTHOPS.get(pair + way) {
            let mine = hop.addr.words() == dst && hop.family == H::FAMILY;
            let fresh = hop.generation == generation && hop.expires > now;
            if mine && fresh && len <= hop.max_len {
                return Ok(*hop);
            }
            if mine || !fresh {
                victim = pair + way;
            }
        }
        way += 1;
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
        addr: Addr::from_words(dst),
        ifindex: params.ifindex,
        smac: params.smac,
        dmac: params.dmac,
        max_len: len,
        family: H::FAMILY,
        pad: 0,
        generation,
        expires: now + NEXTHOP_TTL_JIFFIES,
    };
    if let Some(slot) = NEXTHOPS.get_ptr_mut(victim) {
        // Per-CPU: no other CPU reads or writes this copy.
        unsafe { *slot = hop };
    }
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
