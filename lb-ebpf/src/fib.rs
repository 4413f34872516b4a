//! Next hop from the kernel's FIB and the final MAC rewrite + forwarding verdict.

use core::mem;

use aya_ebpf::{
    bindings::{bpf_fib_lookup as FibParams, xdp_action},
    helpers::generated::{bpf_fib_lookup, bpf_redirect},
    programs::XdpContext,
    EbpfContext,
};

use crate::parse::Packet;

const AF_INET: u8 = 2;
const BPF_FIB_LKUP_RET_SUCCESS: i64 = 0;

/// Looks up the route to `dst` (from `src`) as if the packet arrived on the ingress
/// interface. Returns the filled parameters on success; `None` means "let the kernel do
/// it" (no neighbour entry yet, no route, forwarding disabled...).
#[inline(always)]
pub fn lookup(ctx: &XdpContext, pkt: &Packet, src: u32, dst: u32) -> Option<FibParams> {
    let mut params: FibParams = unsafe { mem::zeroed() };
    params.family = AF_INET;
    params.l4_protocol = pkt.proto;
    params.sport = pkt.sport;
    params.dport = pkt.dport;
    params.__bindgen_anon_1.tot_len = u16::from_be(unsafe { (*pkt.ip).tot_len });
    params.ifindex = ctx.ingress_ifindex() as u32;
    params.__bindgen_anon_3.ipv4_src = src;
    params.__bindgen_anon_4.ipv4_dst = dst;
    let rc = unsafe {
        bpf_fib_lookup(
            ctx.as_ptr(),
            &mut params,
            mem::size_of::<FibParams>() as i32,
            0,
        )
    };
    if rc == BPF_FIB_LKUP_RET_SUCCESS { Some(params) } else { None }
}

/// Writes the next hop's MACs and returns XDP_TX (same interface) or XDP_REDIRECT.
#[inline(always)]
pub fn transmit(ctx: &XdpContext, pkt: &Packet, next: &FibParams) -> u32 {
    unsafe {
        (*pkt.eth).dst = next.dmac;
        (*pkt.eth).src = next.smac;
    }
    if next.ifindex == ctx.ingress_ifindex() as u32 {
        crate::stats::global(lb_common::GLOBAL_TX);
        xdp_action::XDP_TX
    } else {
        crate::stats::global(lb_common::GLOBAL_REDIRECT);
        unsafe { bpf_redirect(next.ifindex, 0) as u32 }
    }
}
