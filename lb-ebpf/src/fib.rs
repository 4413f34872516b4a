//! Next hop from the kernel's FIB (kept briefly per backend address, or per client address
//! and CPU) and the final MAC rewrite + forwarding verdict.

use core::mem;

use aya_ebpf::{
    EbpfContext,
    bindings::{bpf_fib_lookup as FibParams, xdp_action},
    helpers::generated::{bpf_fib_lookup, bpf_jiffies64, bpf_redirect},
    programs::XdpContext,
};
use lb_common::{Addr, GLOBAL_FIB_LOOKUP, MAX_NEXTHOPS, NEXTHOP_TTL_JIFFIES, NextHop, filter_bit};

use crate::ip::IpHeader;
use crate::maps::{HOPS, NEXTHOP_GEN, NEXTHOPS};
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

/// Where XDP sends a packet: the egress interface and the two MACs.
#[derive(Clone, Copy)]
pub struct Egress {
    pub ifindex: u32,
    pub smac: [u8; 6],
    pub dmac: [u8; 6],
}

/// The generation next hops must carry to be used (userspace bumps it to forget them all).
/// Read before the backend slot, so that a hop looked up for a slot's old address while
/// userspace rewrites the slot is written with the old generation and never used (the
/// address check catches it too).
#[inline(always)]
pub fn generation() -> u32 {
    NEXTHOP_GEN.get(0).copied().unwrap_or(0)
}

/// The next hop towards the backend address `dst`, whose slot names `index` in `HOPS`: the
/// one kept there while fresh (same address and generation, not expired, the packet no
/// bigger than one the FIB accepted), else the FIB's, kept there for the next packets.
/// Failures are never kept.
#[inline(always)]
pub fn towards_backend<H: IpHeader>(
    ctx: &XdpContext,
    pkt: &Packet<H>,
    dst: &[u32; 4],
    index: u32,
    generation: u32,
) -> Result<Egress, Miss> {
    let len = unsafe { H::tot_len(pkt.ip) };
    towards_backend_as(ctx, pkt, (&pkt.saddr, len), dst, index, generation)
}

/// [`towards_backend`] for a packet that leaves as `sent`: from another source and with
/// another length than `pkt` (an encapsulated packet: its outer source and length).
#[inline(always)]
pub fn towards_backend_as<H: IpHeader>(
    ctx: &XdpContext,
    pkt: &Packet<H>,
    sent: (&[u32; 4], u16),
    dst: &[u32; 4],
    index: u32,
    generation: u32,
) -> Result<Egress, Miss> {
    let (src, len) = sent;
    let now = unsafe { bpf_jiffies64() };
    let kept = HOPS.get_ptr_mut(index);
    if let Some(hop) = kept {
        let hop = unsafe { &*hop };
        if names::<H>(hop, dst) && fresh(hop, generation, now) && len <= hop.max_len {
            return Ok(Egress::of(hop));
        }
    }
    let egress = query(ctx, pkt, src, dst, len)?;
    if let Some(hop) = kept {
        // Shared by every CPU, without a lock: a racing writer writes the FIB's answer for
        // the same address (or, just after a configuration change gave the index to another
        // address, an answer of the old generation), so a half-written entry can only mix
        // two answers for one address for a moment.
        unsafe { *hop = entry::<H>(dst, &egress, len, generation, now) };
    }
    Ok(egress)
}

/// The next hop towards the client `dst`: from this CPU's cache while fresh (same
/// generation, not expired) and the packet no bigger than one the FIB accepted, else from
/// the FIB. The cache is two-way: `dst` may sit in either entry of its pair. Failures are
/// never cached.
#[inline(always)]
pub fn towards_client<H: IpHeader>(
    ctx: &XdpContext,
    pkt: &Packet<H>,
    src: &[u32; 4],
    dst: &[u32; 4],
) -> Result<Egress, Miss> {
    let pair = filter_bit(dst) & (MAX_NEXTHOPS - 2);
    let now = unsafe { bpf_jiffies64() };
    let generation = generation();
    let len = unsafe { H::tot_len(pkt.ip) };
    // The entry to replace on a miss: the one already for `dst`, else one that is stale.
    let mut victim = pair + 1;
    let mut way = 0;
    while way < 2 {
        if let Some(hop) = NEXTHOPS.get(pair + way) {
            let mine = names::<H>(hop, dst);
            let current = fresh(hop, generation, now);
            if mine && current && len <= hop.max_len {
                return Ok(Egress::of(hop));
            }
            if mine || !current {
                victim = pair + way;
            }
        }
        way += 1;
    }
    let egress = query(ctx, pkt, src, dst, len)?;
    let hop = entry::<H>(dst, &egress, len, generation, now);
    if let Some(slot) = NEXTHOPS.get_ptr_mut(victim) {
        // Per-CPU: no other CPU reads or writes this copy.
        unsafe { *slot = hop };
    }
    Ok(egress)
}

/// Whether the FIB forwards a packet from `src` to `dst` (false for one of this host's
/// addresses, an unresolved neighbour, no route): asked afresh, never from a cache, so
/// that only a path the kernel would take right now counts.
#[inline(always)]
pub fn routes_onward<H: IpHeader>(
    ctx: &XdpContext,
    pkt: &Packet<H>,
    src: &[u32; 4],
    dst: &[u32; 4],
) -> bool {
    let len = unsafe { H::tot_len(pkt.ip) };
    !matches!(query(ctx, pkt, src, dst, len), Err(Miss::Kernel))
}

impl Egress {
    /// Where a kept next hop sends packets.
    #[inline(always)]
    fn of(hop: &NextHop) -> Egress {
        Egress {
            ifindex: hop.ifindex,
            smac: hop.smac,
            dmac: hop.dmac,
        }
    }
}

/// The kept next hop is for `dst` (of this family).
#[inline(always)]
fn names<H: IpHeader>(hop: &NextHop, dst: &[u32; 4]) -> bool {
    hop.addr.words() == dst && hop.family == H::FAMILY
}

/// The kept next hop is of the current generation and not expired.
#[inline(always)]
fn fresh(hop: &NextHop, generation: u32, now: u64) -> bool {
    hop.generation == generation && hop.expires > now
}

/// The entry kept for `dst` once the FIB answered `egress` for a packet of `len` bytes.
#[inline(always)]
fn entry<H: IpHeader>(
    dst: &[u32; 4],
    egress: &Egress,
    len: u16,
    generation: u32,
    now: u64,
) -> NextHop {
    NextHop {
        addr: Addr::from_words(dst),
        ifindex: egress.ifindex,
        smac: egress.smac,
        dmac: egress.dmac,
        max_len: len,
        family: H::FAMILY,
        pad: 0,
        generation,
        expires: now + NEXTHOP_TTL_JIFFIES,
    }
}

/// Asks the FIB for a packet of `len` bytes from `src` to `dst` as if it arrived on the
/// ingress interface (which checks the packet against the route's MTU).
#[inline(always)]
fn query<H: IpHeader>(
    ctx: &XdpContext,
    pkt: &Packet<H>,
    src: &[u32; 4],
    dst: &[u32; 4],
    len: u16,
) -> Result<Egress, Miss> {
    crate::stats::global(GLOBAL_FIB_LOOKUP);
    let mut slot = mem::MaybeUninit::<FibParams>::uninit();
    let params = crate::zeroed::zeroed(&mut slot);
    params.family = H::AF;
    params.l4_protocol = pkt.proto;
    params.sport = pkt.sport;
    params.dport = pkt.dport;
    params.__bindgen_anon_1.tot_len = len;
    params.ifindex = ctx.ingress_ifindex() as u32;
    H::fib_addrs(params, src, dst);
    let rc = unsafe { bpf_fib_lookup(ctx.as_ptr(), params, mem::size_of::<FibParams>() as i32, 0) };
    if rc == BPF_FIB_LKUP_RET_FRAG_NEEDED {
        return Err(Miss::TooBig(unsafe { params.__bindgen_anon_1.mtu_result }));
    }
    if rc != BPF_FIB_LKUP_RET_SUCCESS {
        return Err(Miss::Kernel);
    }
    Ok(Egress {
        ifindex: params.ifindex,
        smac: params.smac,
        dmac: params.dmac,
    })
}

/// Writes the next hop's MACs and returns XDP_TX (same interface) or XDP_REDIRECT.
#[inline(always)]
pub fn transmit<H>(ctx: &XdpContext, pkt: &Packet<H>, hop: &Egress) -> u32 {
    unsafe {
        (*pkt.eth).dst = hop.dmac;
        (*pkt.eth).src = hop.smac;
    }
    send(ctx, hop)
}

/// XDP_TX (the next hop is out of the interface the frame came in on) or XDP_REDIRECT,
/// for a frame whose MACs are written.
#[inline(always)]
pub fn send(ctx: &XdpContext, hop: &Egress) -> u32 {
    if hop.ifindex == ctx.ingress_ifindex() as u32 {
        xdp_action::XDP_TX
    } else {
        unsafe { bpf_redirect(hop.ifindex, 0) as u32 }
    }
}
