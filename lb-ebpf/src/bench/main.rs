//! Programs for the L4 benchmark (`cargo xtask bench l4`), separate from the balancer:
//!
//! - `bench_gen`: the traffic source. Run by BPF_PROG_TEST_RUN in live-frames mode, it
//!   rewrites every (recycled) frame from a template, varies the flow, and sends it out
//!   of the client's interface with XDP_TX.
//! - `bench_fwd`: the minimal XDP forwarder, the data-path ceiling: rewrite the
//!   destination address and MACs, update checksums incrementally, XDP_REDIRECT. No flow
//!   table, no fib lookup.
//! - `bench_sink`: counts and drops what reaches a backend.
//! - `bench_pass`: XDP_PASS, so a veth accepts live frames (NAPI mode) for kernel paths.
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::xdp_action,
    btf_maps::{Array, PerCpuArray},
    helpers::generated::bpf_redirect,
    macros::{btf_map, xdp},
    programs::XdpContext,
};

/// Length of the template frame the generator writes (a minimum Ethernet frame).
const FRAME: usize = 64;
/// Ethernet + IPv4 (no options) header length.
const L4_OFF: usize = 34;
/// Source ports cycle through this many values; further flows also vary the source address.
const PORTS: u32 = 60_000;
/// Most backends the forwarder spreads over.
const MAX_FWD: u32 = 8;

/// The generator's template and flow pattern, written by userspace.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GenCfg {
    /// The frame, with valid IPv4 and L4 checksums.
    pub template: [u8; FRAME],
    /// Distinct flows to cycle through; 0 means every frame is a new flow.
    pub flows: u32,
    /// 1 when the template is TCP, 0 for UDP (selects the L4 checksum to update).
    pub tcp: u32,
    /// Destination addresses to spread over (1 = the template's only).
    pub dst_count: u32,
    /// Host-order step between consecutive destination addresses.
    pub dst_step: u32,
}

/// One forwarding target of the minimal forwarder.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FwdTarget {
    /// Backend address (network order bytes).
    pub addr: [u8; 4],
    /// Egress interface.
    pub ifindex: u32,
    /// Destination MAC (the backend's).
    pub dmac: [u8; 6],
    /// Source MAC (the egress interface's).
    pub smac: [u8; 6],
}

#[btf_map]
static GEN_CFG: Array<GenCfg, 1> = Array::new();

#[btf_map]
static GEN_SEQ: PerCpuArray<u64, 1> = PerCpuArray::new();

/// Index 0: the VIP (network order bytes as u32), 1: the number of targets.
#[btf_map]
static FWD_META: Array<u32, 2> = Array::new();

#[btf_map]
static FWD_TARGETS: Array<FwdTarget, { MAX_FWD as usize }> = Array::new();

#[btf_map]
static SINK_COUNT: PerCpuArray<u64, 1> = PerCpuArray::new();

#[inline(always)]
fn fold(mut sum: u64) -> u16 {
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
}

/// RFC 1624 update of a checksum (big-endian value) for a 32-bit word change.
#[inline(always)]
fn csum_swap32(check: u16, old: u32, new: u32) -> u16 {
    let old = !old;
    let sum = u64::from(!check)
        + u64::from(old >> 16)
        + u64::from(old & 0xffff)
        + u64::from(new >> 16)
        + u64::from(new & 0xffff);
    !fold(sum)
}

#[inline(always)]
fn rd16(p: *const u8) -> u16 {
    unsafe { u16::from_be_bytes([*p, *p.add(1)]) }
}

#[inline(always)]
fn wr16(p: *mut u8, v: u16) {
    let b = v.to_be_bytes();
    unsafe {
        *p = b[0];
        *p.add(1) = b[1];
    }
}

#[inline(always)]
fn rd32(p: *const u8) -> u32 {
    unsafe { u32::from_be_bytes([*p, *p.add(1), *p.add(2), *p.add(3)]) }
}

#[inline(always)]
fn wr32(p: *mut u8, v: u32) {
    let b = v.to_be_bytes();
    unsafe {
        *p = b[0];
        *p.add(1) = b[1];
        *p.add(2) = b[2];
        *p.add(3) = b[3];
    }
}

/// The traffic source (see the crate doc).
#[xdp]
pub fn bench_gen(ctx: XdpContext) -> u32 {
    let data = ctx.data();
    if data + FRAME > ctx.data_end() {
        return xdp_action::XDP_ABORTED;
    }
    let Some(cfg) = GEN_CFG.get(0) else {
        return xdp_action::XDP_ABORTED;
    };
    let Some(seq) = GEN_SEQ.get_ptr_mut(0) else {
        return xdp_action::XDP_ABORTED;
    };
    let k = unsafe {
        let k = *seq;
        *seq = k + 1;
        k
    };
    let p = data as *mut u8;
    let words = p as *mut u64;
    let tpl = cfg.template.as_ptr() as *const u64;
    for i in 0..FRAME / 8 {
        unsafe { words.add(i).write_unaligned(tpl.add(i).read_unaligned()) };
    }
    let flow = if cfg.flows == 0 {
        k as u32
    } else {
        (k % u64::from(cfg.flows)) as u32
    };
    unsafe {
        let ip = p.add(14);
        let l4 = p.add(L4_OFF);
        let src0 = rd32(ip.add(12));
        let dst0 = rd32(ip.add(16));
        let sport0 = rd16(l4);
        let src = (src0 & 0xffff_0000) | ((src0 + flow / PORTS) & 0xffff);
        let dst = if cfg.dst_count > 1 {
            dst0 + (flow % cfg.dst_count) * cfg.dst_step
        } else {
            dst0
        };
        let sport = 1024 + (flow % PORTS) as u16;
        wr32(ip.add(12), src);
        wr32(ip.add(16), dst);
        wr16(l4, sport);
        let mut ipc = rd16(ip.add(10));
        ipc = csum_swap32(ipc, src0, src);
        ipc = csum_swap32(ipc, dst0, dst);
        wr16(ip.add(10), ipc);
        // The L4 checksum covers the addresses and ports too (UDP only when in use).
        let off = if cfg.tcp == 1 { 16 } else { 6 };
        let mut c = rd16(l4.add(off));
        if cfg.tcp == 1 || c != 0 {
            c = csum_swap32(c, src0, src);
            c = csum_swap32(c, dst0, dst);
            c = csum_swap32(c, u32::from(sport0), u32::from(sport));
            wr16(l4.add(off), if cfg.tcp == 0 && c == 0 { 0xffff } else { c });
        }
    }
    xdp_action::XDP_TX
}

/// The minimal forwarder (see the crate doc).
#[xdp]
pub fn bench_fwd(ctx: XdpContext) -> u32 {
    let data = ctx.data();
    if data + L4_OFF + 8 > ctx.data_end() {
        return xdp_action::XDP_PASS;
    }
    let p = data as *mut u8;
    unsafe {
        if rd16(p.add(12)) != 0x0800 || *p.add(14) != 0x45 {
            return xdp_action::XDP_PASS;
        }
        let ip = p.add(14);
        let proto = *ip.add(9);
        if proto != 6 && proto != 17 {
            return xdp_action::XDP_PASS;
        }
        let (Some(vip), Some(n)) = (FWD_META.get(0), FWD_META.get(1)) else {
            return xdp_action::XDP_PASS;
        };
        let dst0 = rd32(ip.add(16));
        if dst0 != u32::from_be(*vip) || *n == 0 {
            return xdp_action::XDP_PASS;
        }
        let l4 = p.add(L4_OFF);
        let src = rd32(ip.add(12));
        let ports = rd32(l4);
        let mut h = src ^ ports.rotate_left(16) ^ u32::from(proto);
        h = (h ^ (h >> 16)).wrapping_mul(0x45d9_f3b5);
        h ^= h >> 16;
        let idx = h % (*n).min(MAX_FWD);
        let Some(t) = FWD_TARGETS.get(idx) else {
            return xdp_action::XDP_PASS;
        };
        let dst = u32::from_be_bytes(t.addr);
        wr32(ip.add(16), dst);
        wr16(ip.add(10), csum_swap32(rd16(ip.add(10)), dst0, dst));
        let off = if proto == 6 { 16 } else { 6 };
        if data + L4_OFF + off + 2 > ctx.data_end() {
            return xdp_action::XDP_PASS;
        }
        let c = rd16(l4.add(off));
        if proto == 6 || c != 0 {
            wr16(l4.add(off), csum_swap32(c, dst0, dst));
        }
        for i in 0..6 {
            *p.add(i) = t.dmac[i];
            *p.add(6 + i) = t.smac[i];
        }
        bpf_redirect(t.ifindex, 0) as u32
    }
}

/// Counts and drops IPv4 (the backends' side of the benchmark). Everything else (ARP)
/// goes to the kernel, so the balancer's neighbour entries for the backends stay valid.
#[xdp]
pub fn bench_sink(ctx: XdpContext) -> u32 {
    let data = ctx.data();
    if data + 14 > ctx.data_end() || rd16((data + 12) as *const u8) != 0x0800 {
        return xdp_action::XDP_PASS;
    }
    if let Some(c) = SINK_COUNT.get_ptr_mut(0) {
        unsafe { *c += 1 };
    }
    xdp_action::XDP_DROP
}

/// Lets frames into the kernel stack.
#[xdp]
pub fn bench_pass(_ctx: XdpContext) -> u32 {
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
