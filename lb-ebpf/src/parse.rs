//! Bounds-checked parsing of Ethernet, VLAN, IPv4 (with options), IPv6 (with its
//! extension headers, in `parse6`), TCP, UDP, ICMP and ICMPv6.
//!
//! A frame is never trusted beyond what it proves: the IP length fields must fit in the
//! frame and hold the headers the program reads, or the frame is malformed and goes to the
//! kernel untouched.

use core::mem::size_of;

use aya_ebpf::programs::XdpContext;

use crate::headers::*;
use crate::ip::IpHeader;

/// What the rest of the program needs from one frame of one family.
pub struct Packet<H> {
    pub eth: *mut EthHdr,
    pub ip: *mut H,
    /// Offset of the L4 header from the frame start (checked again on each access, since
    /// the verifier cannot tie a saved pointer to the protocol it was parsed for).
    pub l4_off: usize,
    pub proto: u8,
    /// Ports in network order (0 when the protocol has none).
    pub sport: u16,
    pub dport: u16,
    pub tcp_flags: u8,
    /// ICMP or ICMPv6 type and code (0 for other protocols).
    pub icmp_kind: u8,
    pub icmp_code: u8,
    /// Addresses in the 16-byte key form (IPv4 in word 0).
    pub saddr: [u32; 4],
    pub daddr: [u32; 4],
    /// Whole frame length in bytes.
    pub len: u64,
}

/// A parsed frame of either family.
pub enum Parsed {
    V4(Packet<Ipv4Hdr>),
    V6(Packet<Ipv6Hdr>),
}

/// Why a frame is not for the balancer: each is passed to the kernel and counted.
pub enum Skip {
    Malformed,
    NotIp,
    Fragment,
    /// IPv6 extension headers the program does not walk (too many, routing with segments
    /// left, AH...).
    Ipv6Ext,
    /// IPv6 neighbour discovery: the kernel's, whatever its address.
    Neighbour,
}

/// A `T` at `off` bytes into the frame, if all of it is inside. Compared as pointers, not
/// integers: an integer compare lets LLVM rewrite `start + off > end` as
/// `off > end - start`, which the verifier cannot tie to the packet's bounds.
#[inline(always)]
pub fn ptr_at<T>(start: usize, end: usize, off: usize) -> Option<*mut T> {
    let p = (start as *mut u8).wrapping_add(off);
    if p.wrapping_add(size_of::<T>()) > end as *mut u8 {
        return None;
    }
    Some(p as *mut T)
}

/// Whether the first `off` bytes of the frame are all inside it (compared as in
/// [`ptr_at`]).
#[inline(always)]
pub fn fits(start: usize, end: usize, off: usize) -> bool {
    (start as *mut u8).wrapping_add(off) <= end as *mut u8
}

/// Parses the frame in `ctx`, never reading past its end.
#[inline(always)]
pub fn parse(ctx: &XdpContext) -> Result<Parsed, Skip> {
    let start = ctx.data();
    let end = ctx.data_end();
    let eth: *mut EthHdr = ptr_at(start, end, 0).ok_or(Skip::Malformed)?;
    let mut proto = unsafe { (*eth).proto };
    let mut l3 = size_of::<EthHdr>();
    // Up to two VLAN tags (802.1ad outer, 802.1Q inner); unrolled for the verifier.
    if proto == ETH_P_8021Q || proto == ETH_P_8021AD {
        let tag: *mut VlanHdr = ptr_at(start, end, l3).ok_or(Skip::Malformed)?;
        proto = unsafe { (*tag).proto };
        l3 += size_of::<VlanHdr>();
        if proto == ETH_P_8021Q || proto == ETH_P_8021AD {
            let tag: *mut VlanHdr = ptr_at(start, end, l3).ok_or(Skip::Malformed)?;
            proto = unsafe { (*tag).proto };
            l3 += size_of::<VlanHdr>();
        }
    }
    if proto == ETH_P_IP {
        parse4(start, end, eth, l3).map(Parsed::V4)
    } else if proto == ETH_P_IPV6 {
        crate::parse6::parse6(start, end, eth, l3).map(Parsed::V6)
    } else {
        Err(Skip::NotIp)
    }
}

#[inline(always)]
fn parse4(start: usize, end: usize, eth: *mut EthHdr, l3: usize) -> Result<Packet<Ipv4Hdr>, Skip> {
    let ip: *mut Ipv4Hdr = ptr_at(start, end, l3).ok_or(Skip::Malformed)?;
    let ver_ihl = unsafe { (*ip).ver_ihl };
    let ihl = (ver_ihl & 0x0f) as usize;
    if ver_ihl >> 4 != 4 || ihl < 5 {
        return Err(Skip::Malformed);
    }
    let l4_off = l3 + ihl * 4;
    // The whole header, options included, must be in the frame.
    if !fits(start, end, l4_off) {
        return Err(Skip::Malformed);
    }
    if unsafe { (*ip).frag_off } & IP_FRAG_MASK != 0 {
        // A fragment goes to the kernel; first malformed when its length does not fit the
        // frame or its header (the kernel drops it as truncated).
        let ip_end = l3 + u16::from_be(unsafe { (*ip).tot_len }) as usize;
        return Err(match within(ip_end, l4_off, end - start) {
            Ok(()) => Skip::Fragment,
            Err(malformed) => malformed,
        });
    }
    let mut pkt = Packet {
        eth,
        ip,
        l4_off,
        proto: unsafe { (*ip).proto },
        sport: 0,
        dport: 0,
        tcp_flags: 0,
        icmp_kind: 0,
        icmp_code: 0,
        saddr: [unsafe { (*ip).saddr }, 0, 0, 0],
        daddr: [unsafe { (*ip).daddr }, 0, 0, 0],
        len: (end - start) as u64,
    };
    let l4_end = transport(start, end, &mut pkt)?;
    // The packet, by its own length, must fit in the frame (trailing Ethernet padding is
    // allowed) and hold every header read above.
    let ip_end = l3 + u16::from_be(unsafe { (*ip).tot_len }) as usize;
    within(ip_end, l4_end, end - start)?;
    Ok(pkt)
}

/// The IP length check, done after every header has been bounds-checked against the frame
/// itself: were it done first, LLVM could derive those checks from it and drop them,
/// which the verifier cannot follow. `ip_end` is where the packet says it ends, `l4_end`
/// where the headers read end, `frame` the frame's length.
#[inline(always)]
pub fn within(ip_end: usize, l4_end: usize, frame: usize) -> Result<(), Skip> {
    if ip_end > frame || ip_end < l4_end {
        return Err(Skip::Malformed);
    }
    Ok(())
}

/// Reads the ports and flags of TCP and UDP and checks that TCP, UDP and ICMP headers lie
/// inside the frame; returns where the transport header ends (for UDP, where the datagram
/// says it ends), an offset from the frame start, for the caller's length check.
#[inline(always)]
pub fn transport<H: IpHeader>(
    start: usize,
    end: usize,
    pkt: &mut Packet<H>,
) -> Result<usize, Skip> {
    let l4_off = pkt.l4_off;
    match pkt.proto {
        IPPROTO_TCP => {
            let tcp: *mut TcpHdr = ptr_at(start, end, l4_off).ok_or(Skip::Malformed)?;
            pkt.sport = unsafe { (*tcp).sport };
            pkt.dport = unsafe { (*tcp).dport };
            pkt.tcp_flags = unsafe { (*tcp).flags };
            let doff = ((unsafe { (*tcp).doff } >> 4) as usize) * 4;
            if doff < size_of::<TcpHdr>() || !fits(start, end, l4_off + doff) {
                return Err(Skip::Malformed);
            }
            Ok(l4_off + doff)
        }
        IPPROTO_UDP => {
            let udp: *mut UdpHdr = ptr_at(start, end, l4_off).ok_or(Skip::Malformed)?;
            pkt.sport = unsafe { (*udp).sport };
            pkt.dport = unsafe { (*udp).dport };
            // A zero checksum means "none" in IPv4; IPv6 forbids it (RFC 8200 8.1).
            if H::ICMP_PSEUDO_HEADER && unsafe { (*udp).check } == 0 {
                return Err(Skip::Malformed);
            }
            // The datagram's own length covers its header and lies inside the IP payload
            // (the caller checks the end returned here against the IP length).
            let len = u16::from_be(unsafe { (*udp).len }) as usize;
            if len < size_of::<UdpHdr>() {
                return Err(Skip::Malformed);
            }
            Ok(l4_off + len)
        }
        p if p == H::ICMP => {
            let icmp: *mut IcmpHdr = ptr_at(start, end, l4_off).ok_or(Skip::Malformed)?;
            let kind = unsafe { (*icmp).kind };
            pkt.icmp_kind = kind;
            pkt.icmp_code = unsafe { (*icmp).code };
            if H::ICMP_PSEUDO_HEADER && (ICMPV6_ND_FIRST..=ICMPV6_ND_LAST).contains(&kind) {
                return Err(Skip::Neighbour);
            }
            Ok(l4_off + size_of::<IcmpHdr>())
        }
        _ => Ok(l4_off),
    }
}
