//! Bounds-checked parsing of Ethernet, VLAN, IPv4 (with options), TCP, UDP and ICMP.

use core::mem::size_of;

use aya_ebpf::programs::XdpContext;

use crate::headers::*;

/// What the rest of the program needs from one frame.
pub struct Packet {
    pub eth: *mut EthHdr,
    pub ip: *mut Ipv4Hdr,
    /// Offset of the L4 header from the frame start (checked again on each access, since
    /// the verifier cannot tie a saved pointer to the protocol it was parsed for).
    pub l4_off: usize,
    pub proto: u8,
    /// Ports in network order (0 when the protocol has none).
    pub sport: u16,
    pub dport: u16,
    pub tcp_flags: u8,
    pub saddr: u32,
    pub daddr: u32,
    /// Whole frame length in bytes.
    pub len: u64,
}

/// Why a frame is not for the balancer: each is passed to the kernel and counted.
pub enum Skip {
    Malformed,
    NotIpv4,
    Fragment,
}

#[inline(always)]
pub fn ptr_at<T>(start: usize, end: usize, off: usize) -> Option<*mut T> {
    if start + off + size_of::<T>() > end {
        return None;
    }
    Some((start + off) as *mut T)
}

/// Parses the frame in `ctx`, never reading past its end.
#[inline(always)]
pub fn parse(ctx: &XdpContext) -> Result<Packet, Skip> {
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
    if proto != ETH_P_IP {
        return Err(Skip::NotIpv4);
    }
    let ip: *mut Ipv4Hdr = ptr_at(start, end, l3).ok_or(Skip::Malformed)?;
    let ver_ihl = unsafe { (*ip).ver_ihl };
    let ihl = (ver_ihl & 0x0f) as usize;
    if ver_ihl >> 4 != 4 || ihl < 5 {
        return Err(Skip::Malformed);
    }
    let l4_off = l3 + ihl * 4;
    // The whole header, options included, must be in the frame.
    if start + l4_off > end {
        return Err(Skip::Malformed);
    }
    if unsafe { (*ip).frag_off } & IP_FRAG_MASK != 0 {
        return Err(Skip::Fragment);
    }
    let ip_proto = unsafe { (*ip).proto };
    let mut pkt = Packet {
        eth,
        ip,
        l4_off,
        proto: ip_proto,
        sport: 0,
        dport: 0,
        tcp_flags: 0,
        saddr: unsafe { (*ip).saddr },
        daddr: unsafe { (*ip).daddr },
        len: (end - start) as u64,
    };
    match ip_proto {
        IPPROTO_TCP => {
            let tcp: *mut TcpHdr = ptr_at(start, end, l4_off).ok_or(Skip::Malformed)?;
            let doff = ((unsafe { (*tcp).doff } >> 4) as usize) * 4;
            if doff < size_of::<TcpHdr>() || start + l4_off + doff > end {
                return Err(Skip::Malformed);
            }
            pkt.sport = unsafe { (*tcp).sport };
            pkt.dport = unsafe { (*tcp).dport };
            pkt.tcp_flags = unsafe { (*tcp).flags };
        }
        IPPROTO_UDP => {
            let udp: *mut UdpHdr = ptr_at(start, end, l4_off).ok_or(Skip::Malformed)?;
            pkt.sport = unsafe { (*udp).sport };
            pkt.dport = unsafe { (*udp).dport };
        }
        IPPROTO_ICMP => {
            let _: *mut IcmpHdr = ptr_at(start, end, l4_off).ok_or(Skip::Malformed)?;
        }
        _ => {}
    }
    Ok(pkt)
}
