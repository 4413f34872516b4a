//! Health checks through the tunnel (S-TN4): a tc egress program on the balancer's
//! interfaces puts a tunnelled server's check packets inside the same outer header as the
//! vService's traffic, so that a check reaches the VIP on the server only through the
//! server's agent, as a client's packet does. A server that lost its agent or its VIP then
//! fails its checks even though its own address still answers.
//!
//! The health engine opens each such check's socket to the VIP with a mark from the
//! `HEALTH_MARK_BASE` block; `HEALTH_TUNNELS` maps the mark to the server's address and the
//! outer source. Every other packet leaves after one comparison of its mark. The checks are
//! the kernel's own connections (TCP, TLS, HTTP, DNS): the program only wraps their packets
//! and sends them to the next hop towards the server (`bpf_redirect_neigh`, which resolves
//! the neighbour when needed). The server answers from the VIP straight to the balancer.

use aya_ebpf::bindings::{
    BPF_ADJ_ROOM_ENCAP_L2_SHIFT, BPF_F_ADJ_ROOM_ENCAP_L3_IPV4, BPF_F_ADJ_ROOM_ENCAP_L3_IPV6,
    BPF_F_ADJ_ROOM_ENCAP_L4_UDP, BPF_FIB_LKUP_RET_NO_NEIGH, BPF_FIB_LKUP_RET_SUCCESS,
    BPF_FIB_LOOKUP_OUTPUT, TC_ACT_OK, TC_ACT_SHOT, bpf_adj_room_mode::BPF_ADJ_ROOM_MAC,
    bpf_fib_lookup as FibParams,
};
use aya_ebpf::helpers::generated::{bpf_fib_lookup, bpf_redirect_neigh};
use aya_ebpf::programs::TcContext;
use lb_common::{
    FAMILY_V4, GUE_OVERHEAD, HEALTH_MARK_BASE, HEALTH_MARK_MASK, HealthTunnel, gue_source_port,
};

use crate::headers::{ETH_P_IP, ETH_P_IPV6, IPPROTO_UDP, Ipv4Hdr, Ipv6Hdr, UdpGue};
use crate::ip::IpHeader;
use crate::maps::HEALTH_TUNNELS;

const ETH_LEN: usize = 14;

/// The program's verdict for one packet leaving an interface.
#[inline(always)]
pub fn egress(ctx: &TcContext) -> i32 {
    // SAFETY: the context's socket buffer, valid for the whole run.
    let (mark, protocol) = unsafe { ((*ctx.skb.skb).mark, (*ctx.skb.skb).protocol) };
    if mark & HEALTH_MARK_MASK != HEALTH_MARK_BASE {
        return TC_ACT_OK as i32;
    }
    let Some(tunnel) = (unsafe { HEALTH_TUNNELS.get(&mark) }).copied() else {
        return TC_ACT_OK as i32;
    };
    // `protocol` holds the ethertype in wire order, in the low 16 bits.
    let ethertype = protocol as u16;
    let sent = if tunnel.family == FAMILY_V4 {
        ethertype == ETH_P_IP && wrap::<Ipv4Hdr>(ctx, &tunnel).is_some()
    } else {
        ethertype == ETH_P_IPV6 && wrap::<Ipv6Hdr>(ctx, &tunnel).is_some()
    };
    if !sent {
        // A check that cannot travel the tunnel must not reach the VIP some other way.
        return TC_ACT_SHOT as i32;
    }
    // The redirect below passes the packet through this interface's egress hook again:
    // unmarked, it then goes out as it is.
    ctx.set_mark(0);
    route(ctx, &tunnel)
}

/// Puts the packet (of family `H`) inside an outer header of its family.
#[inline(always)]
fn wrap<H: IpHeader>(ctx: &TcContext, tunnel: &HealthTunnel) -> Option<()> {
    let mut inner = core::mem::MaybeUninit::<H>::uninit();
    // SAFETY: the helper fills the whole header or fails.
    unsafe {
        aya_ebpf::helpers::generated::bpf_skb_load_bytes(
            ctx.skb.skb as *const _,
            ETH_LEN as u32,
            inner.as_mut_ptr() as *mut _,
            core::mem::size_of::<H>() as u32,
        )
    };
    let inner = unsafe { inner.assume_init() };
    let inner_len = unsafe { H::tot_len(&inner) };
    let traffic_class = unsafe { H::traffic_class(&inner) };
    let gue = tunnel.gue != 0;
    let mut flags = if H::WORDS == 1 {
        BPF_F_ADJ_ROOM_ENCAP_L3_IPV4
    } else {
        BPF_F_ADJ_ROOM_ENCAP_L3_IPV6
    } as u64;
    let mut overhead = H::TUNNEL_OVERHEAD;
    if gue {
        // UDP, then the 4-byte GUE header before the inner IP header (its "L2").
        flags |= BPF_F_ADJ_ROOM_ENCAP_L4_UDP as u64 | (4 << BPF_ADJ_ROOM_ENCAP_L2_SHIFT);
        overhead += GUE_OVERHEAD;
    }
    ctx.adjust_room(overhead as i32, BPF_ADJ_ROOM_MAC, flags)
        .ok()?;
    let (proto, payload) = if gue {
        (IPPROTO_UDP, inner_len.wrapping_add(GUE_OVERHEAD))
    } else {
        (H::TUNNEL_PROTO, inner_len)
    };
    let mut outer = core::mem::MaybeUninit::<H>::uninit();
    let addrs = (tunnel.src.words(), tunnel.dst.words());
    // SAFETY: write_outer writes every field of the header.
    unsafe { H::write_outer(outer.as_mut_ptr(), addrs, payload, proto, traffic_class, 0) };
    ctx.store(ETH_LEN, unsafe { outer.assume_init_ref() }, 0)
        .ok()?;
    if gue {
        let sport = gue_source_port(tunnel.src.words()[0] ^ tunnel.dst.words()[0]);
        let udp = UdpGue::new(sport, tunnel.gue_port, payload, H::TUNNEL_PROTO);
        ctx.store(ETH_LEN + H::TUNNEL_OVERHEAD as usize, &udp, 0)
            .ok()?;
    }
    Some(())
}

/// Sends the wrapped packet to the next hop towards the server, which the FIB gives as for a
/// packet this host sends out of the same interface; the neighbour subsystem writes the
/// MACs (and resolves the neighbour first when needed).
#[inline(always)]
fn route(ctx: &TcContext, tunnel: &HealthTunnel) -> i32 {
    let mut slot = core::mem::MaybeUninit::<FibParams>::uninit();
    let params = crate::zeroed::zeroed(&mut slot);
    // SAFETY: the context's socket buffer.
    params.ifindex = unsafe { (*ctx.skb.skb).ifindex };
    if tunnel.family == FAMILY_V4 {
        params.family = Ipv4Hdr::AF;
        Ipv4Hdr::fib_addrs(params, tunnel.src.words(), tunnel.dst.words());
    } else {
        params.family = Ipv6Hdr::AF;
        Ipv6Hdr::fib_addrs(params, tunnel.src.words(), tunnel.dst.words());
    }
    let size = core::mem::size_of::<FibParams>() as i32;
    // SAFETY: params is a zeroed, filled lookup structure of `size` bytes.
    let flags = BPF_FIB_LOOKUP_OUTPUT as u32;
    let rc = unsafe { bpf_fib_lookup(ctx.skb.skb as *mut _, params, size, flags) };
    let found = rc == BPF_FIB_LKUP_RET_SUCCESS as i64 || rc == BPF_FIB_LKUP_RET_NO_NEIGH as i64;
    if !found || params.ifindex == 0 {
        return TC_ACT_SHOT as i32;
    }
    // SAFETY: no next-hop structure: the kernel looks the route up again from the (outer)
    // header and resolves the neighbour itself.
    unsafe { bpf_redirect_neigh(params.ifindex, core::ptr::null_mut(), 0, 0) as i32 }
}
