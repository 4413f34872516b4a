//! What differs between IPv4 and IPv6 for the rest of the program, behind one trait: the
//! VIP lookup, the backend choice, NAT and forwarding are written once and compiled for
//! each family, so neither family's path carries a branch for the other.

use aya_ebpf::bindings::bpf_fib_lookup as FibParams;
use aya_ebpf::programs::XdpContext;
use lb_common::{
    FAMILY_V4, FAMILY_V6, TUNNEL_HOP_LIMIT, TUNNEL_OVERHEAD_V4, TUNNEL_OVERHEAD_V6,
    TUNNEL_SOURCE_V4, TUNNEL_SOURCE_V6,
};

use crate::csum;
use crate::headers::{
    ETH_P_IP, ETH_P_IPV6, IP_DF, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_IPIP, IPPROTO_IPV6,
    IPV6_HDR_LEN, Ipv4Hdr, Ipv6Hdr,
};
use crate::sanity;

/// Which address of the IP header a NAT rewrite changes.
#[derive(Clone, Copy)]
pub enum Side {
    /// Client -> VIP becomes client -> backend.
    Destination,
    /// Backend -> client becomes VIP -> client.
    Source,
}

/// An IP header the data path forwards. Methods take raw pointers into the frame: the
/// parser has bounds-checked the whole header before any of them is called.
pub trait IpHeader {
    /// `FAMILY_V4` or `FAMILY_V6`, as stored in map keys.
    const FAMILY: u8;
    /// `AF_INET` or `AF_INET6`, for the FIB lookup.
    const AF: u8;
    /// This family's ICMP protocol number.
    const ICMP: u8;
    /// Whether this family's ICMP checksum covers the addresses (ICMPv6's pseudo-header).
    const ICMP_PSEUDO_HEADER: bool;
    /// Words of the 16-byte address fields this family uses (the rest stay zero).
    const WORDS: usize;
    /// This family's ethertype, wire order.
    const ETHERTYPE: u16;
    /// Bytes an outer header of this family adds (tunnel forwarding).
    const TUNNEL_OVERHEAD: u16;
    /// The protocol number that says an outer header of this family carries a packet of
    /// this family (4 for IPIP, 41 for IP6IP6).
    const TUNNEL_PROTO: u8;
    /// This family's index in `TUNNEL_SOURCES`.
    const TUNNEL_SOURCE: u32;

    /// TTL or hop limit.
    ///
    /// # Safety
    /// `ip` points at a bounds-checked header of this type.
    unsafe fn hop_limit(ip: *const Self) -> u8;

    /// Decrements the TTL or hop limit like a router (fixing IPv4's header checksum).
    ///
    /// # Safety
    /// As [`IpHeader::hop_limit`].
    unsafe fn decrement_hop_limit(ip: *mut Self);

    /// Writes the source or destination address (fixing IPv4's header checksum).
    ///
    /// # Safety
    /// As [`IpHeader::hop_limit`].
    unsafe fn set_addr(ip: *mut Self, side: Side, old: &[u32; 4], new: &[u32; 4]);

    /// Length of the whole IP packet, for the FIB's MTU check.
    ///
    /// # Safety
    /// As [`IpHeader::hop_limit`].
    unsafe fn tot_len(ip: *const Self) -> u16;

    /// The DSCP and ECN bits (IPv4's TOS, IPv6's traffic class), which an outer header
    /// copies.
    ///
    /// # Safety
    /// As [`IpHeader::hop_limit`].
    unsafe fn traffic_class(ip: *const Self) -> u8;

    /// Writes an outer header at `outer` in front of `payload_len` bytes whose protocol is
    /// `proto` (the inner packet for IP in IP, UDP for GUE): from `src` to `dst`, the inner
    /// packet's traffic class, `TUNNEL_HOP_LIMIT`; IPv4 with DF (the balancer answers what
    /// does not fit, S-TN2) and its checksum, IPv6 with the flow's hash as its flow label
    /// (routers' ECMP spreads by it).
    ///
    /// # Safety
    /// `outer` points at a bounds-checked header's room of this type.
    unsafe fn write_outer(
        outer: *mut Self,
        addrs: (&[u32; 4], &[u32; 4]),
        payload_len: u16,
        proto: u8,
        traffic_class: u8,
        hash: u32,
    );

    /// Puts the lookup's addresses into the FIB parameters.
    fn fib_addrs(params: &mut FibParams, src: &[u32; 4], dst: &[u32; 4]);

    /// The header checks the kernel makes on receive that the parser does not (IPv4's
    /// header checksum and options); `Err` names the `GLOBAL_*` counter of the drop.
    ///
    /// # Safety
    /// As [`IpHeader::hop_limit`], in the frame of `ctx`.
    unsafe fn check_header(ctx: &XdpContext, ip: *const Self) -> Result<(), u32>;

    /// Whether the packet's source is an address no host sends from (the kernel drops
    /// such a packet before it would forward it). Read from the header afresh: what the
    /// verifier learns from these comparisons then stays with registers that die here,
    /// instead of splitting the rest of the path by address range.
    ///
    /// # Safety
    /// As [`IpHeader::hop_limit`].
    unsafe fn martian_source(ip: *const Self) -> bool;
}

impl IpHeader for Ipv4Hdr {
    const FAMILY: u8 = FAMILY_V4;
    const AF: u8 = 2;
    const ICMP: u8 = IPPROTO_ICMP;
    const ICMP_PSEUDO_HEADER: bool = false;
    const WORDS: usize = 1;
    const ETHERTYPE: u16 = ETH_P_IP;
    const TUNNEL_OVERHEAD: u16 = TUNNEL_OVERHEAD_V4;
    const TUNNEL_PROTO: u8 = IPPROTO_IPIP;
    const TUNNEL_SOURCE: u32 = TUNNEL_SOURCE_V4;

    #[inline(always)]
    unsafe fn hop_limit(ip: *const Self) -> u8 {
        unsafe { (*ip).ttl }
    }

    #[inline(always)]
    unsafe fn decrement_hop_limit(ip: *mut Self) {
        unsafe {
            // TTL and protocol form one 16-bit word of the checksummed header.
            let word = (&raw const (*ip).ttl) as *const u16;
            let old = core::ptr::read_unaligned(word);
            (*ip).ttl -= 1;
            let new = core::ptr::read_unaligned(word);
            (*ip).check = csum::replace2((*ip).check, old, new);
        }
    }

    #[inline(always)]
    unsafe fn set_addr(ip: *mut Self, side: Side, old: &[u32; 4], new: &[u32; 4]) {
        unsafe {
            match side {
                Side::Destination => (*ip).daddr = new[0],
                Side::Source => (*ip).saddr = new[0],
            }
            (*ip).check = csum::replace4((*ip).check, old[0], new[0]);
        }
    }

    #[inline(always)]
    unsafe fn tot_len(ip: *const Self) -> u16 {
        u16::from_be(unsafe { (*ip).tot_len })
    }

    #[inline(always)]
    unsafe fn traffic_class(ip: *const Self) -> u8 {
        unsafe { (*ip).tos }
    }

    #[inline(always)]
    unsafe fn write_outer(
        outer: *mut Self,
        (src, dst): (&[u32; 4], &[u32; 4]),
        payload_len: u16,
        proto: u8,
        traffic_class: u8,
        _hash: u32,
    ) {
        let header = Ipv4Hdr {
            ver_ihl: 0x45,
            tos: traffic_class,
            tot_len: payload_len.wrapping_add(TUNNEL_OVERHEAD_V4).to_be(),
            id: 0,
            frag_off: IP_DF,
            ttl: TUNNEL_HOP_LIMIT,
            proto,
            check: 0,
            saddr: src[0],
            daddr: dst[0],
        };
        // The header's ten 16-bit words, summed as they sit in memory.
        let words = [
            u16::from_ne_bytes([header.ver_ihl, header.tos]),
            header.tot_len,
            header.id,
            header.frag_off,
            u16::from_ne_bytes([header.ttl, header.proto]),
            (header.saddr & 0xffff) as u16,
            (header.saddr >> 16) as u16,
            (header.daddr & 0xffff) as u16,
            (header.daddr >> 16) as u16,
        ];
        let mut sum = 0u64;
        let mut i = 0;
        while i < words.len() {
            sum += words[i] as u64;
            i += 1;
        }
        unsafe {
            *outer = header;
            (*outer).check = !csum::fold(sum);
        }
    }

    #[inline(always)]
    fn fib_addrs(params: &mut FibParams, src: &[u32; 4], dst: &[u32; 4]) {
        params.__bindgen_anon_3.ipv4_src = src[0];
        params.__bindgen_anon_4.ipv4_dst = dst[0];
    }

    #[inline(always)]
    unsafe fn check_header(ctx: &XdpContext, ip: *const Self) -> Result<(), u32> {
        sanity::ipv4_header(ctx, ip)
    }

    #[inline(always)]
    unsafe fn martian_source(ip: *const Self) -> bool {
        sanity::martian_v4(unsafe { core::ptr::read_volatile(&raw const (*ip).saddr) })
    }
}

impl IpHeader for Ipv6Hdr {
    const FAMILY: u8 = FAMILY_V6;
    const AF: u8 = 10;
    const ICMP: u8 = IPPROTO_ICMPV6;
    const ICMP_PSEUDO_HEADER: bool = true;
    const WORDS: usize = 4;
    const ETHERTYPE: u16 = ETH_P_IPV6;
    const TUNNEL_OVERHEAD: u16 = TUNNEL_OVERHEAD_V6;
    const TUNNEL_PROTO: u8 = IPPROTO_IPV6;
    const TUNNEL_SOURCE: u32 = TUNNEL_SOURCE_V6;

    #[inline(always)]
    unsafe fn hop_limit(ip: *const Self) -> u8 {
        unsafe { (*ip).hop_limit }
    }

    #[inline(always)]
    unsafe fn decrement_hop_limit(ip: *mut Self) {
        // IPv6 has no header checksum.
        unsafe { (*ip).hop_limit -= 1 };
    }

    #[inline(always)]
    unsafe fn set_addr(ip: *mut Self, side: Side, _old: &[u32; 4], new: &[u32; 4]) {
        unsafe {
            match side {
                Side::Destination => (*ip).daddr = *new,
                Side::Source => (*ip).saddr = *new,
            }
        }
    }

    #[inline(always)]
    unsafe fn tot_len(ip: *const Self) -> u16 {
        u16::from_be(unsafe { (*ip).payload_len }).wrapping_add(IPV6_HDR_LEN as u16)
    }

    #[inline(always)]
    unsafe fn traffic_class(ip: *const Self) -> u8 {
        // Version (4 bits), then the traffic class (8), in wire order.
        let first = u32::from_be(unsafe { (*ip).ver_tc_flow });
        (first >> 20) as u8
    }

    #[inline(always)]
    unsafe fn write_outer(
        outer: *mut Self,
        (src, dst): (&[u32; 4], &[u32; 4]),
        payload_len: u16,
        proto: u8,
        traffic_class: u8,
        hash: u32,
    ) {
        let first = (6u32 << 28) | ((traffic_class as u32) << 20) | (hash & 0xf_ffff);
        unsafe {
            *outer = Ipv6Hdr {
                ver_tc_flow: first.to_be(),
                payload_len: payload_len.to_be(),
                nexthdr: proto,
                hop_limit: TUNNEL_HOP_LIMIT,
                saddr: *src,
                daddr: *dst,
            };
        }
    }

    #[inline(always)]
    fn fib_addrs(params: &mut FibParams, src: &[u32; 4], dst: &[u32; 4]) {
        params.__bindgen_anon_3.ipv6_src = *src;
        params.__bindgen_anon_4.ipv6_dst = *dst;
    }

    #[inline(always)]
    unsafe fn check_header(_ctx: &XdpContext, _ip: *const Self) -> Result<(), u32> {
        // No header checksum and no options: the parser's checks are the kernel's.
        Ok(())
    }

    #[inline(always)]
    unsafe fn martian_source(ip: *const Self) -> bool {
        sanity::martian_v6(&unsafe { core::ptr::read_volatile(&raw const (*ip).saddr) })
    }
}

/// A transport checksum after one address changed from `old` to `new` (only the words
/// this family uses).
#[inline(always)]
pub fn replace_addr<H: IpHeader>(check: u16, old: &[u32; 4], new: &[u32; 4]) -> u16 {
    let mut c = check;
    let mut i = 0;
    while i < H::WORDS {
        c = csum::replace4(c, old[i], new[i]);
        i += 1;
    }
    c
}
