//! Wire headers, `#[repr(C)]` exactly as on the wire (multi-byte fields in network order).

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
pub const ETH_P_8021Q: u16 = 0x8100u16.to_be();
pub const ETH_P_8021AD: u16 = 0x88a8u16.to_be();
pub const IPPROTO_ICMP: u8 = 1;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;
/// MF flag and fragment offset bits of `frag_off`, in network order.
pub const IP_FRAG_MASK: u16 = 0x3fffu16.to_be();
pub const TCP_SYN: u8 = 0x02;
pub const TCP_ACK: u8 = 0x10;
