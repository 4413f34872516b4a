//! Types shared by the XDP program (`lb-ebpf`) and userspace (`lb-userspace`).
//!
//! Every map key and value is `#[repr(C)]` with explicit padding, so the kernel, the
//! eBPF program, userspace and `bpftool` (through BTF) all agree on the layout.
//! Addresses are always an [`Addr`]: 16 bytes in wire order, so that `bpftool map dump`
//! prints 198.18.1.10 as `{"octets":[198,18,1,10,0,...]}`. An IPv6 address fills them, an
//! IPv4 address takes the first four and the rest are zero. Every key that holds an
//! address also holds its family, so an IPv4 address and an IPv6 address that ends in 96
//! zero bits never meet in one map entry.
//! Ports are stored as numbers (port 80 is 80), except in the LPM key [`RangeData`], whose
//! bits must compare in wire order; the program converts them where it reads and writes
//! packets.
#![no_std]

pub mod decap;

/// Names of the maps, as declared in the eBPF object and pinned under the pin directory.
pub mod names {
    /// VIP table: [`VipKey`](crate::VipKey) -> [`VipMeta`](crate::VipMeta).
    pub const VIPS: &str = "VIPS";
    /// Port Range VIPs: LPM trie of [`RangeData`](crate::RangeData) prefixes -> [`VipMeta`](crate::VipMeta).
    pub const RANGES: &str = "RANGES";
    /// Exact VIPs by id: VIP id -> [`VipById`](crate::VipById) (its key and meta; zeroed for
    /// ids of no exact VIP). A packet of a known flow finds its VIP here, without `VIPS`.
    pub const VIP_BY_ID: &str = "VIP_BY_ID";
    /// VIP addresses that have Port Range or ANY-L3 entries: [`AddrKey`](crate::AddrKey) ->
    /// `u32` bit set of `ADDR_*` flags.
    pub const ADDRS: &str = "ADDRS";
    /// Backend slots: index -> [`BackendSlot`](crate::BackendSlot).
    pub const BACKENDS: &str = "BACKENDS";
    /// Array of maps: VIP id -> Maglev table (array of backend slot indexes).
    pub const MAGLEV: &str = "MAGLEV";
    /// LRU connection table: a flow's client endpoint ([`ClientKey`](crate::ClientKey)) ->
    /// [`FlowValue`](crate::FlowValue), which names the VIP as well as the backend.
    pub const CONNS: &str = "CONNS";
    /// LRU table of the flows whose client endpoint's `CONNS` entry holds another flow (the
    /// same client address and port to another VIP or port): [`FlowKey`](crate::FlowKey) ->
    /// [`FlowValue`](crate::FlowValue). A NAT flow is also kept under its reply's key,
    /// marked [`FLOW_KEY_REPLY`](crate::FLOW_KEY_REPLY), so that its replies find it whatever
    /// else its backend serves.
    pub const CONNS_CLASH: &str = "CONNS_CLASH";
    /// NAT backends: [`NatBackendKey`](crate::NatBackendKey) (a backend's address and the
    /// port its replies come from, 0 for any) -> [`NatTargets`](crate::NatTargets), the VIPs
    /// whose replies it sends.
    pub const NAT_BACKENDS: &str = "NAT_BACKENDS";
    /// Per-CPU counters per VIP id.
    pub const VIP_STATS: &str = "VIP_STATS";
    /// Counters per Backend Service and CPU: index `cpu * MAX_BACKEND_SLOTS + counters`
    /// (the `counters` index of the service's slots) -> [`Counters`](crate::Counters).
    pub const BACKEND_STATS: &str = "BACKEND_STATS";
    /// Per-CPU next-hop cache towards clients: index (hash of the address) ->
    /// [`NextHop`](crate::NextHop).
    pub const NEXTHOPS: &str = "NEXTHOPS";
    /// Next hops towards backends: the `hop` index of a [`BackendSlot`](crate::BackendSlot)
    /// -> [`NextHop`](crate::NextHop), one per backend address.
    pub const HOPS: &str = "HOPS";
    /// Generation of the next-hop cache (one `u32`): entries of another generation are stale.
    pub const NEXTHOP_GEN: &str = "NEXTHOP_GEN";
    /// Per-CPU global counters, indexed by the `GLOBAL_*` constants.
    pub const GLOBAL_STATS: &str = "GLOBAL_STATS";
    /// Per-CPU state of the connection table's flood guard (one
    /// [`FloodGuard`](crate::FloodGuard)).
    pub const FLOOD_GUARD: &str = "FLOOD_GUARD";
    /// Address filter: bits of the addresses that may be VIPs or NAT backends (see
    /// [`filter_bit`](crate::filter_bit)).
    pub const ADDR_FILTER: &str = "ADDR_FILTER";
    /// The maps' layout version (one `u32`, [`LAYOUT_VERSION`](crate::LAYOUT_VERSION)): an `lb`
    /// of another layout does not adopt these pins.
    pub const LAYOUT: &str = "LAYOUT";
    /// Programs reached by tail call: index -> program (`PROG_*`).
    pub const PROGS: &str = "PROGS";
    /// Name of the XDP program in the object.
    pub const PROGRAM: &str = "lb_xdp";
    /// The program for "too big" errors about VIP flows, at `PROG_ICMP_ERROR` of `PROGS`.
    pub const ICMP_PROGRAM: &str = "lb_xdp_icmp";
    /// The program for packets that may be NAT replies, at `PROG_NAT_REPLY` of `PROGS`.
    pub const NAT_PROGRAM: &str = "lb_xdp_nat";
    /// The program that encapsulates packets of tunnelled VIPs, at `PROG_TUNNEL` of `PROGS`.
    pub const TUNNEL_PROGRAM: &str = "lb_xdp_tunnel";
    /// Per-CPU hand-off from the balancer program to the tunnel program: one
    /// [`TunnelJob`](crate::TunnelJob), written just before the tail call.
    pub const TUNNEL_JOB: &str = "TUNNEL_JOB";
    /// The prefixes outer sources are taken from: index `TUNNEL_SOURCE_V4` and
    /// `TUNNEL_SOURCE_V6` -> [`TunnelSource`](crate::TunnelSource).
    pub const TUNNEL_SOURCES: &str = "TUNNEL_SOURCES";
    /// The tc egress program that puts the health checks of tunnelled backends inside the
    /// tunnel (S-TN4).
    pub const HEALTH_TUNNEL_PROGRAM: &str = "lb_tc_health";
    /// Socket mark of a health check -> [`HealthTunnel`](crate::HealthTunnel): the outer
    /// header its packets get.
    pub const HEALTH_TUNNELS: &str = "HEALTH_TUNNELS";
}

/// Highest number of VIPs (size of the VIP-indexed arrays).
pub const MAX_VIPS: u32 = 4096;
/// Highest number of backend slots. A slot is one backend in one VIP's list.
pub const MAX_BACKEND_SLOTS: u32 = 131_072;
/// Entries of `HOPS`: at most one per slot (slots of one address share one).
pub const MAX_HOPS: u32 = MAX_BACKEND_SLOTS;
/// Default size of the connection table (flows), changeable at load time.
pub const DEFAULT_CONN_TABLE_SIZE: u32 = 1 << 20;

/// Size of `CONNS_CLASH` for a connection table of `conn_table_size` flows: it holds only
/// the flows whose client endpoint is taken in `CONNS` by another flow, a small share.
pub const fn clash_table_size(conn_table_size: u32) -> u32 {
    let size = conn_table_size / 16;
    if size < 1024 { 1024 } else { size }
}
/// Default Maglev table size per VIP (a prime).
pub const DEFAULT_MAGLEV_SIZE: u32 = 65_537;
/// Smallest allowed Maglev table size (a prime).
pub const MIN_MAGLEV_SIZE: u32 = 251;
/// Largest allowed Maglev table size.
pub const MAX_MAGLEV_SIZE: u32 = 1 << 20;
/// Number of entries in the Port Range LPM trie.
pub const MAX_RANGE_PREFIXES: u32 = 16_384;
/// Number of distinct VIP addresses with Port Range or ANY-L3 entries.
pub const MAX_ADDRS: u32 = 65_536;
/// Entries of the next-hop cache towards clients (per CPU; a power of two). Next hops
/// towards backends are in `HOPS`, one per backend address.
pub const MAX_NEXTHOPS: u32 = 65_536;
/// How long a next hop is reused before the FIB is asked again, in kernel jiffies
/// (read for the price of a memory load, where a clock read costs more): 1 s at HZ=250
/// (Debian's kernels), 0.25 s at HZ=1000. Neighbour and route changes reach the data path
/// within this time; a configuration change forgets every entry at once.
pub const NEXTHOP_TTL_JIFFIES: u64 = 250;
/// `PROGS` index of the program for "too big" errors about VIP flows.
pub const PROG_ICMP_ERROR: u32 = 0;
/// `PROGS` index of the program for packets that may be NAT replies.
pub const PROG_NAT_REPLY: u32 = 1;
/// `PROGS` index of the program that encapsulates packets of tunnelled VIPs.
pub const PROG_TUNNEL: u32 = 2;
/// Entries of `PROGS`.
pub const PROG_COUNT: u32 = 3;
/// Flag for map-in-map inner arrays whose size may differ from the template.
pub const BPF_F_INNER_MAP: u32 = 0x1000;
/// Flag for arrays userspace may `mmap`: a new Maglev table is written with one copy into
/// its memory instead of one kernel-checked copy per entry (1,000 tables in milliseconds).
pub const BPF_F_MMAPABLE: u32 = 0x400;
/// Flags of `BACKEND_STATS`: memory-mapped, so userspace reads 100,000 Backend Services'
/// counters without a system call each.
pub const BACKEND_STATS_FLAGS: u32 = BPF_F_MMAPABLE;
/// Flags of every Maglev table: any size, memory-mapped. Inner maps must carry the
/// template's flags exactly, so both sides take them from here.
pub const MAGLEV_TABLE_FLAGS: u32 = BPF_F_INNER_MAP | BPF_F_MMAPABLE;

/// 64-bit words of `ADDR_FILTER`: the first half holds a bit for every VIP address, the
/// second half a bit for every backend address of a NAT VIP. A packet whose destination bit
/// and source bit are both clear is for no VIP and is no NAT reply: it goes to the kernel
/// after one array read instead of three hash lookups. A set bit may be another address
/// with the same bit (about 1 in 100 at 1,000 addresses); the hash lookups decide then.
pub const FILTER_WORDS: u32 = 4096;
/// First word of the NAT backend half of `ADDR_FILTER`.
pub const FILTER_NAT_BASE: u32 = FILTER_WORDS / 2;

/// The bit of `addr` in either half of `ADDR_FILTER` (0..2^17): one multiplicative hash of
/// the address folded to a word, computed the same way by the program and by userspace.
#[inline(always)]
pub fn filter_bit(addr: &[u32; 4]) -> u32 {
    let folded =
        addr[0] ^ addr[1].rotate_left(8) ^ addr[2].rotate_left(16) ^ addr[3].rotate_left(24);
    folded.wrapping_mul(0x9e37_79b1) >> 15
}

/// An IPv4 or IPv6 address in a map entry: its bytes in wire order (IPv4 in the first
/// four), which `bpftool` prints as numbers a person reads. Aligned to 4 bytes, so the
/// program moves and compares it as four words, as it reads addresses from packets.
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Addr {
    /// The address's bytes, most significant first.
    pub octets: [u8; 16],
}

impl Addr {
    /// The address whose bytes are these words', as a packet holds them.
    #[inline(always)]
    pub fn from_words(words: &[u32; 4]) -> Addr {
        // SAFETY: both are 16 bytes of plain data, every bit pattern valid.
        Addr {
            octets: unsafe { core::mem::transmute::<[u32; 4], [u8; 16]>(*words) },
        }
    }

    /// The address as four words, the form the program reads from packets.
    #[inline(always)]
    pub fn words(&self) -> &[u32; 4] {
        // SAFETY: `Addr` is 16 bytes aligned to 4, so it is a valid `[u32; 4]`.
        unsafe { &*(self as *const Addr as *const [u32; 4]) }
    }

    /// The map form of `ip`, with its family (`FAMILY_V4` or `FAMILY_V6`).
    pub fn from_ip(ip: core::net::IpAddr) -> (Addr, u8) {
        let mut octets = [0; 16];
        match ip {
            core::net::IpAddr::V4(v4) => {
                octets[..4].copy_from_slice(&v4.octets());
                (Addr { octets }, FAMILY_V4)
            }
            core::net::IpAddr::V6(v6) => (
                Addr {
                    octets: v6.octets(),
                },
                FAMILY_V6,
            ),
        }
    }

    /// The address of `family` these bytes hold.
    pub fn to_ip(&self, family: u8) -> core::net::IpAddr {
        let o = self.octets;
        if family == FAMILY_V6 {
            core::net::IpAddr::V6(core::net::Ipv6Addr::from(o))
        } else {
            core::net::IpAddr::V4(core::net::Ipv4Addr::new(o[0], o[1], o[2], o[3]))
        }
    }
}

/// Version of the maps' layout, kept in the `LAYOUT` map: a data path pinned by an `lb` of
/// another layout is not adopted (its maps would be misread); the operator unloads it
/// first. Version 2: addresses as bytes, ports as numbers (pins of earlier versions have
/// no `LAYOUT` map). Version 3: backend slots name their
/// next hop in `HOPS`; BACKEND_STATS is a plain array with a block per slot and CPU.
/// Version 4: the `FLOOD_GUARD` map; NAT targets carry their VIP's table size; VIPs carry
/// an epoch and flows a copy of their slot; counters take 64 bytes; `BACKEND_STATS` has a
/// block per Backend Service instead of per slot. Version 5: the `VIP_BY_ID` map.
/// Version 6: `NAT_BACKENDS` keyed by backend address and port. Version 7: `CONNS` keyed by
/// client endpoint, its values naming the VIP; the `CONNS_CLASH` map; no `NAT_REV` map.
/// Version 8: every NAT flow in `CONNS_CLASH` is kept under its reply's key too (no VIP flag
/// `2` for that), and an older flow to the same backend gives its `CONNS` place up.
/// Version 9: a packet the kernel would not forward (a wrong IPv4 header checksum,
/// malformed IPv4 options, a martian source) is dropped and counted, never forwarded; an
/// `lb` of this version does not adopt a program that forwards them.
/// Version 10: tunnel forwarding: VIP flag `VIP_F_TUNNEL`, the program at `PROG_TUNNEL`,
/// the `TUNNEL_SOURCES` and `TUNNEL_JOB` maps, global counters 16 and 17; health checks
/// through the tunnel: the tc program `lb_tc_health` and the `HEALTH_TUNNELS` map.
pub const LAYOUT_VERSION: u32 = 10;

/// Address family marker stored in keys.
pub const FAMILY_V4: u8 = 4;
/// Address family marker for IPv6.
pub const FAMILY_V6: u8 = 6;

/// `ADDRS` role: the address is a VIP with Port Range entries.
pub const ADDR_VIP_RANGE: u32 = 1 << 1;
/// `ADDRS` role: the address is an ANY-L3 VIP (every protocol).
pub const ADDR_VIP_ANY: u32 = 1 << 2;

/// `VipMeta.flags`: direct server return (rewrite MACs only) instead of NAT.
pub const VIP_F_DSR: u32 = 1;

/// `VipMeta.flags`: the flood guard ([`FloodGuard`]) may leave this VIP's new flows
/// unrecorded. DSR VIPs, and NAT TCP VIPs whose replies Maglev finds without doubt (their
/// `NAT_BACKENDS` targets carry the table size); every other VIP records every flow.
pub const VIP_F_FLOOD_GUARD: u32 = 4;

/// `VipMeta.flags`: tunnel forwarding (S-TN1): the packet goes unchanged inside an outer
/// IP header addressed to the backend (IPIP for IPv4, IP6IP6 for IPv6), to the FIB's next
/// hop towards the backend.
pub const VIP_F_TUNNEL: u32 = 8;

/// `VipMeta.flags`, with `VIP_F_TUNNEL`: the tunnel is GUE (RFC draft
/// "Generic UDP Encapsulation", variant 0): outer IP, UDP to the GUE port, a 4-byte GUE
/// header naming the inner protocol, then the packet.
pub const VIP_F_GUE: u32 = 16;
/// Bytes GUE adds to the outer IP header: UDP (8) and the GUE header (4).
pub const GUE_OVERHEAD: u16 = 12;
/// The default UDP port of GUE packets (`[xdp] gue_port`, `lb decap --gue-port`).
pub const GUE_PORT: u16 = 6080;
/// The lowest UDP source port of GUE packets: the flow's hash fills the 14 bits below it,
/// inside the ephemeral range, so that routers and NICs spread flows by the outer ports.
pub const GUE_SOURCE_PORT_BASE: u16 = 0xc000;

/// The UDP source port of a GUE packet of a flow whose hash is `hash` (the same on every
/// balancer).
#[inline(always)]
pub fn gue_source_port(hash: u32) -> u16 {
    GUE_SOURCE_PORT_BASE | ((hash >> 16) as u16 & 0x3fff)
}

/// `TUNNEL_SOURCES` index of the IPv4 outer source prefix.
pub const TUNNEL_SOURCE_V4: u32 = 0;
/// `TUNNEL_SOURCES` index of the IPv6 outer source prefix.
pub const TUNNEL_SOURCE_V6: u32 = 1;
/// Bytes an outer IPv4 header adds.
pub const TUNNEL_OVERHEAD_V4: u16 = 20;
/// Bytes an outer IPv6 header adds.
pub const TUNNEL_OVERHEAD_V6: u16 = 40;
/// TTL / hop limit of outer headers.
pub const TUNNEL_HOP_LIMIT: u8 = 64;

/// Socket marks of health checks that travel a tunnel (S-TN4) are `HEALTH_MARK_BASE` plus
/// an index below `MAX_HEALTH_TUNNELS`: the tc program leaves every packet whose mark is
/// outside that block alone after one comparison.
pub const HEALTH_MARK_BASE: u32 = 0x4c42_0000;
/// The bits of a mark that must equal `HEALTH_MARK_BASE`.
pub const HEALTH_MARK_MASK: u32 = 0xffff_0000;
/// Entries of `HEALTH_TUNNELS`: checked server addresses behind tunnels.
pub const MAX_HEALTH_TUNNELS: u32 = 65536;

/// Most VIPs one `NAT_BACKENDS` entry names (a backend address and port shared by several
/// NAT VIPs); a VIP beyond them is not named there. A server that runs each service on its
/// own port names each under its own entry, so it may serve any number of NAT VIPs.
pub const MAX_NAT_TARGETS: usize = 4;

/// `BackendSlot.flags`: the slot is in use and its backend may keep flows.
/// A slot without it (backend failed or removed) makes its flows re-hash.
pub const SLOT_F_ACTIVE: u8 = 1;

/// Protocol value used in [`VipKey`] for an ANY-L3 VIP.
pub const PROTO_ANY: u8 = 0;

/// Index into `GLOBAL_STATS`: frames too short or malformed for their headers.
pub const GLOBAL_MALFORMED: u32 = 0;
/// Index: frames that are neither IPv4 nor IPv6 (ARP, LLDP...; passed).
pub const GLOBAL_NOT_IP: u32 = 1;
/// Index: IPv4 and IPv6 fragments (passed untouched).
pub const GLOBAL_FRAGMENT: u32 = 2;
/// Index: packets to no VIP and with no reverse-NAT entry (passed untouched); IPv6
/// neighbour discovery counts here too.
pub const GLOBAL_NO_VIP: u32 = 3;
/// Index: packets for a VIP with no usable backend (dropped).
pub const GLOBAL_NO_BACKEND: u32 = 4;
/// Index: packets whose next hop could not be resolved (passed to the kernel).
pub const GLOBAL_FIB_PASS: u32 = 5;
/// Index: packets whose TTL would expire (passed to the kernel, which answers ICMP).
pub const GLOBAL_TTL_EXPIRED: u32 = 6;
/// Index: NAT replies reversed from the connection table.
pub const GLOBAL_NAT_REPLY: u32 = 7;
/// Index: next hops resolved through the FIB (next-hop cache misses).
pub const GLOBAL_FIB_LOOKUP: u32 = 8;
/// Index: IPv6 packets passed for their extension headers: a chain longer than
/// [`MAX_IPV6_EXT_HEADERS`], a routing header with segments left, or a header the program
/// does not walk (AH, Mobility, HIP, Shim6, experimental).
pub const GLOBAL_IPV6_EXT: u32 = 9;
/// Index: packets bigger than the MTU towards their next hop. Towards a backend they are
/// answered from the VIP with ICMP "fragmentation needed" / ICMPv6 "packet too big" (an
/// IPv4 packet without DF goes to the kernel, which fragments it); a NAT reply goes to the
/// kernel untranslated, which answers the backend.
pub const GLOBAL_TOO_BIG: u32 = 10;
/// Index: ICMP "fragmentation needed" / ICMPv6 "packet too big" errors about a VIP flow,
/// delivered to the flow's backend or client with the quoted packet translated.
pub const GLOBAL_ICMP_TOO_BIG: u32 = 11;
/// Index: new flows balanced but not recorded in the connection table, because this CPU
/// saw more new flows in the current second than the flood guard's limit
/// ([`FloodGuard`]).
pub const GLOBAL_FLOOD_UNRECORDED: u32 = 12;
/// Index: IPv4 packets that may be for a VIP or be a NAT reply whose header checksum is
/// wrong (dropped, as the kernel's receive path drops them).
pub const GLOBAL_BAD_CHECKSUM: u32 = 13;
/// Index: IPv4 packets that may be for a VIP or be a NAT reply whose options are
/// malformed: a length under 2 or one that runs past the header (dropped, as the kernel
/// drops them).
pub const GLOBAL_BAD_IP_OPTIONS: u32 = 14;
/// Index: packets to a VIP from a source no host sends from: IPv4 0/8, 127/8, 224/4,
/// 240/4; IPv6 ::, ::1, ff00::/8 (dropped, as the kernel drops them as martians).
pub const GLOBAL_MARTIAN_SOURCE: u32 = 15;

/// Index: packets of tunnelled VIPs encapsulated towards their backend.
pub const GLOBAL_TUNNELLED: u32 = 16;
/// Index: packets of tunnelled VIPs that could not be encapsulated and were dropped: a
/// VLAN-tagged frame, no room in front of the frame, no outer source prefix for the family.
pub const GLOBAL_TUNNEL_FAILED: u32 = 17;

/// Most IPv6 extension headers (hop-by-hop, routing, destination options) walked before
/// the upper-layer header; a longer chain goes to the kernel.
pub const MAX_IPV6_EXT_HEADERS: usize = 4;
/// Number of global counters.
pub const GLOBAL_COUNT: u32 = 18;

/// Key of the `NAT_BACKENDS` map: a reply's source. Replies of the VIPs whose backends keep
/// the client's port (ANY-L3, Port Ranges) may come from any port: those VIPs are named under
/// port 0, which a reply looks up after its own port.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NatBackendKey {
    /// The backend's address, wire order.
    pub addr: Addr,
    /// The port its replies come from (host order); 0: any.
    pub port: u16,
    /// `FAMILY_V4` or `FAMILY_V6`.
    pub family: u8,
    /// Reserved, zero.
    pub pad: u8,
}

/// Key of the `ADDRS` and `NEXTHOPS` maps.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AddrKey {
    /// The address, wire order.
    pub addr: Addr,
    /// `FAMILY_V4` or `FAMILY_V6`.
    pub family: u8,
    /// Reserved, zero.
    pub pad: [u8; 3],
}

/// Key of the `VIPS` map: one (address, protocol, port) service.
///
/// ANY-L3 VIPs use `proto = PROTO_ANY` and `port = 0`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VipKey {
    /// VIP address, wire order.
    pub addr: Addr,
    /// Destination port (0 for ANY-L3).
    pub port: u16,
    /// IP protocol number (6 TCP, 17 UDP, 0 any).
    pub proto: u8,
    /// `FAMILY_V4` or `FAMILY_V6`.
    pub family: u8,
}

/// Data part of the `RANGES` LPM key. Compared bit by bit in field order:
/// address, protocol, family, then the port's two bytes in wire order (most significant
/// first, so that a prefix covers a range of ports).
/// A Port Range is stored as the few prefixes that cover it exactly.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RangeData {
    /// VIP address, wire order.
    pub addr: Addr,
    /// IP protocol number.
    pub proto: u8,
    /// `FAMILY_V4` or `FAMILY_V6`.
    pub family: u8,
    /// Port, wire order (`port.to_be_bytes()`).
    pub port: [u8; 2],
}

/// Bits of `RangeData` before the port: a prefix of this length matches every port.
pub const RANGE_PREFIX_BASE: u32 = 144;

/// What the data path needs to know about a VIP.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VipMeta {
    /// Index into `MAGLEV` and `VIP_STATS`.
    pub vip_id: u32,
    /// `VIP_F_*` bits.
    pub flags: u32,
    /// Size of this VIP's Maglev table (prime).
    pub table_size: u32,
    /// Changes (never to an earlier value) whenever one of this VIP's backend slots is
    /// written: a flow whose connection-table entry holds another epoch reads its slot
    /// again instead of the backend the entry kept.
    pub epoch: u32,
}

/// An exact VIP as its id names it: a packet whose flow the connection table holds under
/// this id belongs to this VIP while its destination is `key` (checked by the program), so
/// the flow's packets need no hash lookup of the VIP. Zeroed (family 0, which no packet
/// has) for the ids of Port Range and ANY-L3 VIPs and for ids in no use.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VipById {
    /// The VIP's key in `VIPS`.
    pub key: VipKey,
    /// The VIP's meta, as in `VIPS`.
    pub meta: VipMeta,
}

/// One backend in one VIP's list.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendSlot {
    /// Backend address, wire order.
    pub addr: Addr,
    /// Backend port; 0 keeps the packet's destination port.
    pub port: u16,
    /// `SLOT_F_*` bits.
    pub flags: u8,
    /// `FAMILY_V4` or `FAMILY_V6`.
    pub family: u8,
    /// The VIP this slot belongs to.
    pub vip_id: u32,
    /// Index of this backend address's next hop in `HOPS` (one per distinct address,
    /// shared by every slot of that address; given by userspace).
    pub hop: u32,
    /// Index of this slot's Backend Service in `BACKEND_STATS` (one per Backend Service,
    /// shared by its slots in every VIP; given by userspace).
    pub counters: u32,
}

/// What the balancer program hands the tunnel program for the packet it tail-calls with:
/// where the chosen backend is. Per CPU, written just before the call, read at once.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TunnelJob {
    /// The backend's address, wire order (the outer destination).
    pub addr: Addr,
    /// The backend's next hop in `HOPS`.
    pub hop: u32,
    /// The next-hop generation read before the backend's slot.
    pub generation: u32,
    /// 1: GUE (outer IP, UDP, GUE header) rather than IP in IP.
    pub gue: u32,
}

/// A prefix outer sources are taken from: the prefix's bits, then bits of the flow's hash,
/// so that routers' ECMP and the backends' RSS spread flows, and every balancer builds the
/// same outer source for the same flow (S-TN1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TunnelSource {
    /// The prefix's address, wire order, host bits zero.
    pub addr: Addr,
    /// The host bits (wire order), which the flow's hash fills.
    pub host_mask: Addr,
    /// 1 when set (a family with no prefix cannot be tunnelled).
    pub set: u32,
    /// The UDP destination port of GUE packets, wire order (`[xdp] gue_port`).
    pub gue_port: u16,
    /// Reserved, zero.
    pub pad: u16,
}

impl TunnelSource {
    /// The outer source of a flow whose hash is `hash` ([`tunnel_flow_hash`]): the prefix's
    /// bits, the hash (rotated by a byte per word) in the host bits. `words` is 1 for IPv4,
    /// 4 for IPv6; the other words stay zero.
    #[inline(always)]
    pub fn outer_source(&self, words: usize, hash: u32) -> [u32; 4] {
        let prefix = self.addr.words();
        let mask = self.host_mask.words();
        let mut out = [0u32; 4];
        let mut i = 0;
        while i < words && i < 4 {
            out[i] = (prefix[i] & !mask[i]) | (hash.rotate_left(8 * i as u32) & mask[i]);
            i += 1;
        }
        out
    }
}

/// The hash of a flow's client end (source address words and source port as they sit in
/// the packet, read in native order; protocol) that tunnel forwarding puts in the outer source's host bits and
/// the IPv6 flow label (S-TN1). A pure function of the packet, so every balancer builds
/// the same outer header for the same flow; its bits are mixed so that a router's ECMP and
/// a NIC's RSS, which hash the outer header alone, spread flows evenly.
#[inline(always)]
pub fn tunnel_flow_hash(saddr: &[u32; 4], words: usize, sport: u16, proto: u8) -> u32 {
    let mut h = ((sport as u32) << 16) ^ (proto as u32) ^ 0x6c62_7475;
    let mut i = 0;
    while i < words && i < 4 {
        h = (h ^ saddr[i]).wrapping_mul(0x9e37_79b1);
        h ^= h >> 15;
        i += 1;
    }
    h.wrapping_mul(0x85eb_ca6b) ^ (h >> 13)
}

/// The outer header a tunnelled health check's packets get (S-TN4): the same tunnel as the
/// vService's traffic, from an address of the configured source prefix to the server.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HealthTunnel {
    /// Outer source, wire order (inside `[xdp] tunnel_source_v4` / `_v6`).
    pub src: Addr,
    /// Outer destination: the server's own address, wire order.
    pub dst: Addr,
    /// `FAMILY_V4` or `FAMILY_V6`: the family of both headers.
    pub family: u8,
    /// 1: the tunnel is GUE (the server's vService forwards by `gue`).
    pub gue: u8,
    /// The GUE UDP port, wire order (0 for IP in IP).
    pub gue_port: u16,
}

/// A flow as seen on the wire: client to VIP, or, marked [`FLOW_KEY_REPLY`], backend to
/// client. Non-TCP/UDP protocols use zero ports.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Source address, wire order.
    pub src: Addr,
    /// Destination address, wire order.
    pub dst: Addr,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol number.
    pub proto: u8,
    /// `FAMILY_V4` or `FAMILY_V6`.
    pub family: u8,
    /// 0, or [`FLOW_KEY_REPLY`].
    pub dir: u16,
}

/// `FlowKey.dir` of a NAT flow's entry under its reply's key (backend -> client), so that it
/// never meets a flow's own key.
pub const FLOW_KEY_REPLY: u16 = 1;

/// Connection-table key (`CONNS`): a flow's client endpoint. Both directions of a flow
/// carry it (the source of a packet to the VIP, the destination of a NAT reply), so one
/// entry per flow serves both, as IPVS hashes its connections by client endpoint: a NAT
/// flow needs no reverse entry whatever its backend serves. A client endpoint is rarely in
/// two flows at once; when it is, the later flow goes to `CONNS_CLASH` under its whole
/// [`FlowKey`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClientKey {
    /// Client address, wire order.
    pub addr: Addr,
    /// Client port (0 for protocols without ports).
    pub port: u16,
    /// IP protocol number.
    pub proto: u8,
    /// `FAMILY_V4` or `FAMILY_V6`.
    pub family: u8,
}

/// `FlowValue.flags`: a NAT flow (its backend's replies come back through the balancer).
pub const FLOW_F_NAT: u32 = 1;

/// Connection-table value: the VIP a flow is to, the backend slot it is pinned to, and a
/// copy of what the slot said when the flow last read it. While the VIP's epoch is
/// unchanged, a packet of the flow takes the backend from here and never reads the slot:
/// with 100,000 slots that read is a cache miss per packet.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowValue {
    /// Backend slot index.
    pub slot: u32,
    /// VIP id the flow belongs to.
    pub vip_id: u32,
    /// The VIP's epoch (`VipMeta.epoch`) when the copy below was taken.
    pub epoch: u32,
    /// The slot's next-hop index (`BackendSlot.hop`).
    pub hop: u32,
    /// The slot's counters index (`BackendSlot.counters`).
    pub counters: u32,
    /// The slot's backend port (0: the packet's destination port).
    pub port: u16,
    /// The flow's destination port (the VIP's port, or the one in its Port Range).
    pub vip_port: u16,
    /// `FLOW_F_*` bits.
    pub flags: u32,
    /// The slot's backend address, wire order.
    pub addr: Addr,
    /// The flow's destination (the VIP) address, wire order.
    pub vip_addr: Addr,
}

/// One VIP a NAT backend's replies may belong to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NatTarget {
    /// VIP address, wire order.
    pub vip_addr: Addr,
    /// VIP port; 0: the reply's source port (a Port Range or ANY-L3
    /// VIP whose backends keep the client's destination port).
    pub vip_port: u16,
    /// The backend port replies of this VIP come from; 0: any.
    pub backend_port: u16,
    /// VIP id (the connection table's flows carry it).
    pub vip_id: u32,
    /// IP protocol of the VIP (`PROTO_ANY` for ANY-L3).
    pub proto: u8,
    /// Reserved, zero.
    pub pad: [u8; 3],
    /// Size of the VIP's Maglev table when the flood guard may leave its flows unrecorded
    /// (`VIP_F_FLOOD_GUARD`): a reply of an unrecorded flow finds its backend by hashing
    /// the flow again. 0: the VIP records every flow.
    pub table_size: u32,
}

/// Value of `NAT_BACKENDS`: the VIPs whose flows a backend address serves. A reply's flow is the connection-table entry (client -> one of these VIPs)
/// pinned to this backend.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NatTargets {
    /// Entries of `targets` in use.
    pub len: u32,
    /// Reserved, zero.
    pub pad: u32,
    /// The VIPs, `len` of them.
    pub targets: [NatTarget; MAX_NAT_TARGETS],
}

/// A FIB result kept for reuse: where to send frames for one destination address. Towards
/// backends, one per backend address in `HOPS`, at the index its slots carry (one array
/// read, shared by every CPU and every VIP of that backend). Towards clients (NAT replies
/// and ICMP errors), per CPU in `NEXTHOPS`, a direct-mapped, two-way cache indexed by the
/// address's hash. Either way the entry names its address, so a stale index or a collision
/// only costs a FIB lookup.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NextHop {
    /// The destination this entry is for, wire order.
    pub addr: Addr,
    /// Egress interface.
    pub ifindex: u32,
    /// Source MAC (the egress interface's).
    pub smac: [u8; 6],
    /// Destination MAC (the neighbour's).
    pub dmac: [u8; 6],
    /// Largest IP packet the FIB accepted for this hop (its MTU is at least this): a
    /// bigger packet asks the FIB again, which checks it against the MTU.
    pub max_len: u16,
    /// `FAMILY_V4` or `FAMILY_V6` (0: empty entry).
    pub family: u8,
    /// Reserved, zero.
    pub pad: u8,
    /// `NEXTHOP_GEN[0]` when the entry was written: userspace bumps it to forget every
    /// entry at once (after a configuration change).
    pub generation: u32,
    /// Kernel jiffies after which the FIB is asked again.
    pub expires: u64,
}

/// The connection table's flood guard, one per CPU. Under a flood of new flows (a SYN
/// flood, or a burst of new clients), recording every one would evict the established
/// flows and cost a table insert each: above `limit` new flows in one second on a CPU,
/// new flows are still balanced (by Maglev, which sends a flow's every packet to the same
/// backend while its table is unchanged) but not recorded.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FloodGuard {
    /// New flows per second and CPU recorded at most; 0: every new flow is recorded.
    /// Written by userspace.
    pub limit: u32,
    /// New flows seen by this CPU in `second`.
    pub count: u32,
    /// The second (of the kernel's monotonic clock) `count` is for.
    pub second: u64,
}

/// Per-CPU counters of one VIP or one Backend Service (over every VIP it serves in).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets forwarded from clients to backends.
    pub packets: u64,
    /// Bytes forwarded from clients to backends (whole frames).
    pub bytes: u64,
    /// Flows newly assigned a backend (TCP SYN or connection-table miss).
    pub new_flows: u64,
    /// Packets dropped (no usable backend).
    pub drops: u64,
    /// Non-SYN packets that missed the connection table and were hashed again.
    pub ct_misses: u64,
    /// NAT replies translated back towards clients (DSR replies bypass the balancer).
    pub reply_packets: u64,
    /// Bytes of those replies (whole frames).
    pub reply_bytes: u64,
    /// Reserved, zero: makes a block one cache line, so that counting a packet on a slot
    /// touches one line, not two.
    pub pad: u64,
}

impl Counters {
    /// Sums the per-CPU values of one entry.
    pub fn add(&mut self, other: &Counters) {
        self.packets += other.packets;
        self.bytes += other.bytes;
        self.new_flows += other.new_flows;
        self.drops += other.drops;
        self.ct_misses += other.ct_misses;
        self.reply_packets += other.reply_packets;
        self.reply_bytes += other.reply_bytes;
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are #[repr(C)] plain data with explicit padding fields,
    // so every bit pattern is valid and there are no implicit holes.
    unsafe impl aya::Pod for super::AddrKey {}
    unsafe impl aya::Pod for super::NatBackendKey {}
    unsafe impl aya::Pod for super::VipKey {}
    unsafe impl aya::Pod for super::RangeData {}
    unsafe impl aya::Pod for super::VipMeta {}
    unsafe impl aya::Pod for super::VipById {}
    unsafe impl aya::Pod for super::BackendSlot {}
    unsafe impl aya::Pod for super::FlowKey {}
    unsafe impl aya::Pod for super::ClientKey {}
    unsafe impl aya::Pod for super::FlowValue {}
    unsafe impl aya::Pod for super::TunnelJob {}
    unsafe impl aya::Pod for super::TunnelSource {}
    unsafe impl aya::Pod for super::HealthTunnel {}
    unsafe impl aya::Pod for super::Counters {}
    unsafe impl aya::Pod for super::NextHop {}
    unsafe impl aya::Pod for super::NatTargets {}
    unsafe impl aya::Pod for super::FloodGuard {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::size_of;

    #[test]
    fn layouts_have_no_hidden_padding() {
        assert_eq!(size_of::<AddrKey>(), 20);
        assert_eq!(size_of::<NatBackendKey>(), 20);
        assert_eq!(size_of::<VipKey>(), 20);
        assert_eq!(size_of::<RangeData>(), 20);
        assert_eq!(size_of::<VipMeta>(), 16);
        assert_eq!(size_of::<VipById>(), 36);
        assert_eq!(size_of::<BackendSlot>(), 32);
        assert_eq!(size_of::<FlowKey>(), 40);
        assert_eq!(size_of::<ClientKey>(), 20);
        assert_eq!(size_of::<FlowValue>(), 60);
        assert_eq!(size_of::<Counters>(), 64);
        assert_eq!(size_of::<NextHop>(), 48);
        assert_eq!(size_of::<NatTarget>(), 32);
        assert_eq!(size_of::<NatTargets>(), 136);
        assert_eq!(size_of::<FloodGuard>(), 16);
        // Addresses move as four words in the program.
        for align in [
            core::mem::align_of::<Addr>(),
            core::mem::align_of::<AddrKey>(),
            core::mem::align_of::<NatBackendKey>(),
            core::mem::align_of::<VipKey>(),
            core::mem::align_of::<RangeData>(),
            core::mem::align_of::<BackendSlot>(),
            core::mem::align_of::<FlowKey>(),
            core::mem::align_of::<ClientKey>(),
            core::mem::align_of::<FlowValue>(),
            core::mem::align_of::<NatTarget>(),
            core::mem::align_of::<NextHop>(),
        ] {
            assert!(align >= 4);
        }
    }

    #[test]
    fn addresses_keep_their_bytes_as_words() {
        let (a, family) = Addr::from_ip("198.18.1.10".parse().unwrap());
        assert_eq!(family, FAMILY_V4);
        assert_eq!(a.octets[..5], [198, 18, 1, 10, 0]);
        assert_eq!(a.words()[0].to_ne_bytes(), [198, 18, 1, 10]);
        assert_eq!(Addr::from_words(a.words()), a);
        assert_eq!(
            a.to_ip(family),
            "198.18.1.10".parse::<core::net::IpAddr>().unwrap()
        );
        let (b, family) = Addr::from_ip("2001:db8::a:1".parse().unwrap());
        assert_eq!(
            (family, b.to_ip(family)),
            (FAMILY_V6, "2001:db8::a:1".parse().unwrap())
        );
    }
}
