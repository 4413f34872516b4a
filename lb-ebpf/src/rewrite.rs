//! Header rewrites for NAT: addresses and ports, with incremental checksum updates.

use aya_ebpf::programs::XdpContext;

use crate::csum;
use crate::headers::*;
use crate::ip::{IpHeader, Side, replace_addr};
use crate::parse::{Packet, ptr_at};

/// Rewrites one address and (for TCP/UDP, when `port != 0`) the port on the same side,
/// fixing the IPv4 header checksum and the transport checksum incrementally (ICMPv6's
/// too: its pseudo-header covers the addresses).
#[inline(always)]
pub fn nat<H: IpHeader>(ctx: &XdpContext, pkt: &Packet<H>, side: Side, addr: &[u32; 4], port: u16) {
    let (old_addr, old_port) = match side {
        Side::Destination => (&pkt.daddr, pkt.dport),
        Side::Source => (&pkt.saddr, pkt.sport),
    };
    let new_port = if port == 0 { old_port } else { port };
    unsafe { H::set_addr(pkt.ip, side, old_addr, addr) };
    match pkt.proto {
        IPPROTO_TCP => {
            let Some(tcp) = ptr_at::<TcpHdr>(ctx.data(), ctx.data_end(), pkt.l4_off) else {
                return;
            };
            unsafe {
                let check = replace_addr::<H>((*tcp).check, old_addr, addr);
                (*tcp).check = csum::replace2(check, old_port, new_port);
                match side {
                    Side::Destination => (*tcp).dport = new_port,
                    Side::Source => (*tcp).sport = new_port,
                }
            }
        }
        IPPROTO_UDP => {
            let Some(udp) = ptr_at::<UdpHdr>(ctx.data(), ctx.data_end(), pkt.l4_off) else {
                return;
            };
            unsafe {
                // A zero UDP checksum means "none" (IPv4 only; the parser refuses it in
                // IPv6) and stays zero.
                if (*udp).check != 0 {
                    let check = replace_addr::<H>((*udp).check, old_addr, addr);
                    let check = csum::replace2(check, old_port, new_port);
                    (*udp).check = if check == 0 { 0xffff } else { check };
                }
                match side {
                    Side::Destination => (*udp).dport = new_port,
                    Side::Source => (*udp).sport = new_port,
                }
            }
        }
        p if p == H::ICMP && H::ICMP_PSEUDO_HEADER => {
            let Some(icmp) = ptr_at::<IcmpHdr>(ctx.data(), ctx.data_end(), pkt.l4_off) else {
                return;
            };
            unsafe { (*icmp).check = replace_addr::<H>((*icmp).check, old_addr, addr) };
        }
        // ICMP and other protocols have no pseudo-header in their checksum.
        _ => {}
    }
}
