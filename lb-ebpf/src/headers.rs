//! Wire headers, `#[repr(C)]` exactly as on the wire (multi-byte fields in network order).
//!
//! Written here rather than taken from network-types (which the agent uses): with that
//! crate's byte-array fields the balancer's parser measured 4 % slower per packet, and IPv6
//! addresses read through them pushed the main program past the BPF stack limit (see
//! docs/benchmarks.md, "Header layouts and event records"). Aligned fields let LLVM load an
//! address as whole words.

/// Ethernet header.
#[repr(C)]
pub struct EthHdr {
    pub dst: [u8; 6],
    pub src: [u8; 6],
    pub proto: u16,
}

/// 802.1Q / 802.1ad tag following the MAC addresses.
#[repr(C)]
pub struct VlanHdr {
    pub tci: u16,
    pub proto: u16,
}

/// IPv4 header without options.
#[repr(C)]
pub struct Ipv4Hdr {
    pub ver_ihl: u8,
    pub tos: u8,
    pub tot_len: u16,
    pub id: u16,
    pub frag_off: u16,
    pub ttl: u8,
    pub proto: u8,
    pub check: u16,
    pub saddr: u32,
    pub daddr: u32,
}

/// IPv6 fixed header.
#[repr(C)]
pub struct Ipv6Hdr {
    /// Version (4 bits), traffic class (8), flow label (20).
    pub ver_tc_flow: u32,
    pub payload_len: u16,
    pub nexthdr: u8,
    pub hop_limit: u8,
    pub saddr: [u32; 4],
    pub daddr: [u32; 4],
}

/// The first two bytes every walked IPv6 extension header starts with (hop-by-hop,
/// routing, destination options): next header and length in 8-byte units, not counting
/// the first 8.
#[repr(C)]
pub struct Ipv6ExtHdr {
    pub nexthdr: u8,
    pub len: u8,
}

/// The start of an IPv6 routing header.
#[repr(C)]
pub struct Ipv6RoutingHdr {
    pub nexthdr: u8,
    pub len: u8,
    pub kind: u8,
    pub segments_left: u8,
}

/// TCP header without options.
#[repr(C)]
pub struct TcpHdr {
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub doff: u8,
    pub flags: u8,
    pub window: u16,
    pub check: u16,
    pub urg: u16,
}

/// UDP header.
#[repr(C)]
pub struct UdpHdr {
    pub sport: u16,
    pub dport: u16,
    pub len: u16,
    pub check: u16,
}

/// The UDP header and the GUE header (RFC draft "Generic UDP Encapsulation", variant 0, no
/// options: version 0, C 0, length 0, then the inner protocol, then zero flags) that a GUE
/// tunnel puts after the outer IP header.
#[repr(C)]
pub struct UdpGue {
    pub udp: UdpHdr,
    pub gue: [u8; 4],
}

impl UdpGue {
    /// From `sport` (host order) to `dport` (wire order), `len` bytes of UDP (wire order
    /// written here), carrying an inner packet of protocol `inner` (4 or 41). The UDP
    /// checksum is zero: none over the tunnel (RFC 6935 allows it for IPv6 tunnels too); the
    /// inner packet keeps its own.
    #[inline(always)]
    pub fn new(sport: u16, dport: u16, len: u16, inner: u8) -> UdpGue {
        UdpGue {
            udp: UdpHdr {
                sport: sport.to_be(),
                dport,
                len: len.to_be(),
                check: 0,
            },
            gue: [0, inner, 0, 0],
        }
    }
}

/// ICMP header (echo layout).
#[repr(C)]
pub struct IcmpHdr {
    pub kind: u8,
    pub code: u8,
    pub check: u16,
    pub id: u16,
    pub seq: u16,
}

pub const ETH_P_IP: u16 = 0x0800u16.to_be();
pub const ETH_P_IPV6: u16 = 0x86ddu16.to_be();
pub const ETH_P_8021Q: u16 = 0x8100u16.to_be();
pub const ETH_P_8021AD: u16 = 0x88a8u16.to_be();
pub const IPPROTO_ICMP: u8 = 1;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;
pub const IPPROTO_ICMPV6: u8 = 58;
/// IPv4 inside IP (IPIP).
pub const IPPROTO_IPIP: u8 = 4;
/// IPv6 inside IP.
pub const IPPROTO_IPV6: u8 = 41;
/// IPv6 extension headers the parser walks.
pub const IPV6_HOPOPTS: u8 = 0;
pub const IPV6_ROUTING: u8 = 43;
pub const IPV6_DSTOPTS: u8 = 60;
/// IPv6 fragment header: the packet goes to the kernel.
pub const IPV6_FRAGMENT: u8 = 44;
/// IPv6 headers the parser does not walk (AH, Mobility, HIP, Shim6, experimental): the
/// packet goes to the kernel.
pub const IPV6_UNWALKED: [u8; 6] = [51, 135, 139, 140, 253, 254];
/// ICMPv6 neighbour discovery types (router solicitation ..= redirect): always the
/// kernel's, even when addressed to a VIP.
pub const ICMPV6_ND_FIRST: u8 = 133;
pub const ICMPV6_ND_LAST: u8 = 137;
/// Length of the IPv6 fixed header.
pub const IPV6_HDR_LEN: usize = 40;
/// MF flag and fragment offset bits of `frag_off`, in network order.
pub const IP_FRAG_MASK: u16 = 0x3fffu16.to_be();
/// The "don't fragment" flag of `frag_off`, in network order.
pub const IP_DF: u16 = 0x4000u16.to_be();
pub const TCP_SYN: u8 = 0x02;
pub const TCP_ACK: u8 = 0x10;
