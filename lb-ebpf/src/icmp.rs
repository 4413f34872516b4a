//! Answers a packet too big for the path to its backend, as a router would: ICMP
//! "fragmentation needed" (IPv4 with DF) or ICMPv6 "packet too big", from the VIP to the
//! client, quoting the start of the packet as the client sent it (so the client's stack
//! matches it to its connection and lowers its path MTU), sent back out of the ingress
//! interface. The frame is rebuilt in place: new headers in front, the quote cut short.

use aya_ebpf::{
    EbpfContext,
    bindings::xdp_action,
    helpers::generated::{bpf_csum_diff, bpf_redirect, bpf_xdp_adjust_head, bpf_xdp_adjust_tail},
    programs::XdpContext,
};
use lb_common::FAMILY_V4;

use crate::csum;
use crate::headers::*;
use crate::ip::IpHeader;
use crate::parse::{Packet, ptr_at};

const ETH_LEN: usize = 14;
/// Bytes of the original IPv4 packet quoted: a header with the longest options and the
/// first 8 bytes after it (RFC 792 asks for the header and 64 bits).
const QUOTE4: usize = 68;
/// Bytes of the original IPv6 packet quoted: the fixed header and 88 bytes after it
/// (RFC 4443 asks for as much as fits in the minimum MTU; this covers the ports and any
/// extension headers a client sends in practice).
const QUOTE6: usize = 128;
/// IPv4 header + ICMP header put in front.
const OUTER4: usize = 20 + 8;
/// IPv6 header + ICMPv6 header put in front.
const OUTER6: usize = 40 + 8;
/// TTL / hop limit of the answers.
const HOP_LIMIT: u8 = 64;

/// Sends the answer back out of the interface the packet came in on, as a redirect rather
/// than `XDP_TX`: a veth passes on what XDP_TX sends only when its peer runs an XDP program
/// (the kernel wakes a peer that merely has GRO on for redirects, not for XDP_TX), so in a
/// namespace lab a client's veth would get the answer only with its next frame. The answer
/// is rare, so the redirect's cost on a real NIC does not matter.
#[inline(always)]
fn send_back(ctx: &XdpContext) -> u32 {
    // SAFETY: the context is the program's own; the helper only reads the index.
    unsafe { bpf_redirect((*ctx.ctx).ingress_ifindex, 0) as u32 }
}

/// Turns the packet in `ctx` into the answer and returns its verdict (a redirect back out
/// of the interface it came in on, [`send_back`]), or `None` (nothing
/// changed, nothing called) when the caller should go on with the packet: an IPv4 packet
/// without DF (the kernel fragments it) or a VLAN-tagged frame. Once a resize was tried,
/// the packet's pointers are gone for the verifier, so every outcome is a verdict: XDP_PASS
/// when the frame could not be cut (it is unchanged), XDP_DROP when it was cut but could
/// not grow.
#[inline(always)]
pub fn too_big<H: IpHeader>(ctx: &XdpContext, pkt: &Packet<H>, mtu: u16) -> Option<u32> {
    answer::<H, true>(ctx, pkt, mtu)
}

/// [`too_big`] for a packet of a tunnelled VIP, IPv4 without DF too: a tunnel cannot
/// fragment it (the backend's agent would get fragments of the outer packet), so the client
/// is told the usable MTU whatever DF says (S-TN2).
#[inline(always)]
pub fn too_big_for_tunnel<H: IpHeader>(ctx: &XdpContext, pkt: &Packet<H>, mtu: u16) -> Option<u32> {
    answer::<H, false>(ctx, pkt, mtu)
}

/// The answer; `NEEDS_DF`: an IPv4 packet without DF gets none (`None`).
#[inline(always)]
fn answer<H: IpHeader, const NEEDS_DF: bool>(
    ctx: &XdpContext,
    pkt: &Packet<H>,
    mtu: u16,
) -> Option<u32> {
    if (pkt.ip as usize) != ctx.data() + ETH_LEN {
        return None;
    }
    let (client_mac, lb_mac) = unsafe { ((*pkt.eth).src, (*pkt.eth).dst) };
    let (client, vip) = (pkt.saddr, pkt.daddr);
    if H::FAMILY == FAMILY_V4 {
        if NEEDS_DF && unsafe { (*(pkt.ip as *mut Ipv4Hdr)).frag_off } & IP_DF == 0 {
            return None;
        }
        if let Err(verdict) = rebuild(ctx, OUTER4, ETH_LEN + QUOTE4) {
            return verdict;
        }
        Some(write4(ctx, client_mac, lb_mac, client[0], vip[0], mtu))
    } else {
        if let Err(verdict) = rebuild(ctx, OUTER6, ETH_LEN + QUOTE6) {
            return verdict;
        }
        Some(write6(ctx, client_mac, lb_mac, &client, &vip, mtu))
    }
}

/// Cuts the frame to its first `keep` bytes, then makes room for `outer` bytes of new
/// headers in front. `Err(None)`: nothing changed or called; `Err(Some(verdict))`: see
/// [`too_big`].
#[inline(always)]
fn rebuild(ctx: &XdpContext, outer: usize, keep: usize) -> Result<(), Option<u32>> {
    let len = ctx.data_end() - ctx.data();
    if len < keep {
        return Err(None);
    }
    if unsafe { bpf_xdp_adjust_tail(ctx.as_ptr() as *mut _, -((len - keep) as i32)) } != 0 {
        return Err(Some(xdp_action::XDP_PASS));
    }
    if unsafe { bpf_xdp_adjust_head(ctx.as_ptr() as *mut _, -(outer as i32)) } != 0 {
        return Err(Some(xdp_action::XDP_DROP));
    }
    Ok(())
}

/// The one's complement sum of `len` bytes at `p` (a multiple of 4), added to `seed`.
#[inline(always)]
fn sum(p: usize, len: u32, seed: u32) -> u64 {
    let s = unsafe { bpf_csum_diff(core::ptr::null_mut(), 0, p as *mut u32, len, seed) };
    if s < 0 { 0 } else { s as u64 }
}

#[inline(always)]
fn write4(
    ctx: &XdpContext,
    client_mac: [u8; 6],
    lb_mac: [u8; 6],
    client: u32,
    vip: u32,
    mtu: u16,
) -> u32 {
    const TOTAL: usize = ETH_LEN + OUTER4 + QUOTE4;
    let (start, end) = (ctx.data(), ctx.data_end());
    if ptr_at::<[u8; TOTAL]>(start, end, 0).is_none() {
        return xdp_action::XDP_DROP;
    }
    let eth = start as *mut EthHdr;
    let ip = (start + ETH_LEN) as *mut Ipv4Hdr;
    let icmp = (start + ETH_LEN + 20) as *mut IcmpHdr;
    unsafe {
        (*eth).dst = client_mac;
        (*eth).src = lb_mac;
        (*eth).proto = ETH_P_IP;
        (*ip).ver_ihl = 0x45;
        (*ip).tos = 0;
        (*ip).tot_len = ((OUTER4 + QUOTE4) as u16).to_be();
        (*ip).id = 0;
        (*ip).frag_off = 0;
        (*ip).ttl = HOP_LIMIT;
        (*ip).proto = IPPROTO_ICMP;
        (*ip).check = 0;
        (*ip).saddr = vip;
        (*ip).daddr = client;
        (*ip).check = !csum::fold(sum(ip as usize, 20, 0));
        // Destination unreachable, fragmentation needed; the next-hop MTU in the low half.
        (*icmp).kind = 3;
        (*icmp).code = 4;
        (*icmp).check = 0;
        (*icmp).id = 0;
        (*icmp).seq = mtu.to_be();
        (*icmp).check = !csum::fold(sum(icmp as usize, (8 + QUOTE4) as u32, 0));
    }
    send_back(ctx)
}

#[inline(always)]
fn write6(
    ctx: &XdpContext,
    client_mac: [u8; 6],
    lb_mac: [u8; 6],
    client: &[u32; 4],
    vip: &[u32; 4],
    mtu: u16,
) -> u32 {
    const TOTAL: usize = ETH_LEN + OUTER6 + QUOTE6;
    const ICMP_LEN: usize = 8 + QUOTE6;
    let (start, end) = (ctx.data(), ctx.data_end());
    if ptr_at::<[u8; TOTAL]>(start, end, 0).is_none() {
        return xdp_action::XDP_DROP;
    }
    let eth = start as *mut EthHdr;
    let ip = (start + ETH_LEN) as *mut Ipv6Hdr;
    let icmp = (start + ETH_LEN + IPV6_HDR_LEN) as *mut IcmpHdr;
    unsafe {
        (*eth).dst = client_mac;
        (*eth).src = lb_mac;
        (*eth).proto = ETH_P_IPV6;
        (*ip).ver_tc_flow = (6u32 << 28).to_be();
        (*ip).payload_len = (ICMP_LEN as u16).to_be();
        (*ip).nexthdr = IPPROTO_ICMPV6;
        (*ip).hop_limit = HOP_LIMIT;
        (*ip).saddr = *vip;
        (*ip).daddr = *client;
        // Packet too big: the MTU fills the 32 bits after the checksum.
        (*icmp).kind = 2;
        (*icmp).code = 0;
        (*icmp).check = 0;
        (*icmp).id = 0;
        (*icmp).seq = mtu.to_be();
        // The pseudo-header: both addresses, the upper-layer length and next header.
        let addrs = (ip as usize) + 8;
        let pseudo = sum(addrs, 32, 0)
            + ((ICMP_LEN as u32).to_be() as u64)
            + ((IPPROTO_ICMPV6 as u32).to_be() as u64);
        let total = pseudo + sum(icmp as usize, ICMP_LEN as u32, 0);
        (*icmp).check = !csum::fold(total);
    }
    send_back(ctx)
}
