//! Header rewrites for NAT: addresses, ports, TTL, with incremental checksum updates.

use aya_ebpf::programs::XdpContext;

use crate::csum;
use crate::headers::*;
use crate::parse::{Packet, ptr_at};

/// Which address of the IPv4 header a NAT rewrite changes.
pub enum Side {
    /// Client -> VIP becomes client -> backend.
    Destination,
    /// Backend -> client becomes VIP -> client.
    Source,
}

/// Rewrites one address and (for TCP/UDP, when `port != 0`) the port on the same side,
/// fixing the IPv4 and L4 checksums incrementally.
#[inline(always)]
pub fn nat(ctx: &XdpContext, pkt: &Packet, side: Side, addr: u32, port: u16) {
    let ip = pkt.ip;
    let (old_addr, old_port) = match side {
        Side::Destination => (pkt.daddr, pkt.dport),
        Side::Source => (pkt.saddr, pkt.sport),
    };
    let new_port = if port == 0 { old_port } else { port };
    unsafe {
        match side {
            Side::Destination => (*ip).daddr = addr,
            Side::Source => (*ip).saddr = addr,
        }
        (*ip).check = csum::replace4((*ip).check, old_addr, addr);
    }
    match pkt.proto {
        IPPROTO_TCP => {
            let Some(tcp) = ptr_at::<TcpHdr>(ctx.data(), ctx.data_end(), pkt.l4_off) else {
                return;
            };
            unsafe {
                let mut check = csum::replace4((*tcp).check, old_addr, addr);
                check = csum::replace2(check, old_port, new_port);
                (*tcp).check = check;
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
                // A zero UDP checksum means "none" and stays zero.
                if (*udp).check != 0 {
                    let mut check = csum::replace4((*udp).check, old_addr, addr);
                    check = csum::replace2(check, old_port, new_port);
                    (*udp).check = if check == 0 { 0xffff } else { check };
                }
                match side {
                    Side::Destination => (*udp).dport = new_port,
                    Side::Source => (*udp).sport = new_port,
                }
            }
        }
        // ICMP and other protocols have no pseudo-header in their checksum.
        _ => {}
    }
}

/// Decrements the TTL like a router, fixing the header checksum.
#[inline(always)]
pub fn decrement_ttl(pkt: &Packet) {
    let ip = pkt.ip;
    unsafe {
        // TTL and protocol form one 16-bit word of the checksummed header.
        let word = (&raw const (*ip).ttl) as *const u16;
        let old = core::ptr::read_unaligned(word);
        (*ip).ttl -= 1;
        let new = core::ptr::read_unaligned(word);
        (*ip).check = csum::replace2((*ip).check, old, new);
    }
}
