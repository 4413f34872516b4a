//! Types shared by the backend agent's XDP program (`lb-decap`) and `lb decap`.
//!
//! Backends behind routers receive the balancer's packets inside a tunnel (IPv4 or IPv6 in
//! IPv4 or IPv6). A hardened kernel with no tunnel devices cannot take them, so the agent's
//! program strips the outer header itself (S-TN3). These are its maps' keys, values and
//! counter indexes, laid out as the rest of this crate: `#[repr(C)]`, explicit padding,
//! addresses as [`Addr`](crate::Addr) in wire order.

use crate::Addr;

/// Names of the agent's maps and program, as declared in the object and pinned under its
/// pin directory (`maps/NAME`).
pub mod names {
    /// This host's addresses: [`AddrKey`](crate::AddrKey) -> `u8` (1). An outer destination
    /// not in it is someone else's packet, passed untouched.
    pub const LOCAL: &str = "DECAP_LOCAL";
    /// The balancers a tunnel packet may come from: LPM trie of
    /// [`SourceKey`](super::SourceKey) prefixes -> `u32` (1). Read only when
    /// [`DECAP_F_SOURCES`](super::DECAP_F_SOURCES) is set.
    pub const SOURCES: &str = "DECAP_SOURCES";
    /// The VIPs an inner packet may be addressed to: [`AddrKey`](crate::AddrKey) -> `u8`
    /// (1). Read only when [`DECAP_F_VIPS`](super::DECAP_F_VIPS) is set.
    pub const VIPS: &str = "DECAP_VIPS";
    /// One [`DecapConfig`](super::DecapConfig) at index 0: which filters are in use.
    pub const CONFIG: &str = "DECAP_CONFIG";
    /// Per-CPU counters, indexed by the `DECAP_*` counter constants.
    pub const STATS: &str = "DECAP_STATS";
    /// Name of the XDP program in the object.
    pub const PROGRAM: &str = "lb_decap";
    /// Name of the tc ingress program in the object (where XDP cannot attach).
    pub const TC_PROGRAM: &str = "lb_decap_tc";
}

/// Entries of `DECAP_LOCAL`: addresses of one host.
pub const MAX_LOCAL_ADDRS: u32 = 1024;
/// Entries of `DECAP_SOURCES`: balancer prefixes.
pub const MAX_SOURCES: u32 = 1024;
/// Entries of `DECAP_VIPS`.
pub const MAX_DECAP_VIPS: u32 = 4096;

/// `DecapConfig.flags`: the outer source must be in `DECAP_SOURCES`. Without it any source
/// is taken, so that an agent with no list configured works at once.
pub const DECAP_F_SOURCES: u32 = 1;
/// `DecapConfig.flags`: the inner destination must be in `DECAP_VIPS`.
pub const DECAP_F_VIPS: u32 = 2;

/// The agent's settings, one entry: a flag says whether a filter map is in use, so that an
/// empty map and an unused one are told apart without counting entries in the program.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecapConfig {
    /// `DECAP_F_*` bits.
    pub flags: u32,
    /// The UDP port GUE packets arrive on, wire order; 0: GUE is not taken (UDP is then
    /// never a tunnel packet).
    pub gue_port: u16,
    /// Reserved, zero.
    pub pad: u16,
}

/// Data part of the `DECAP_SOURCES` LPM key: the family first, so that a prefix never
/// matches an address of the other family. A prefix of `n` address bits has prefix length
/// [`SOURCE_PREFIX_BASE`]` + n`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SourceKey {
    /// `FAMILY_V4` or `FAMILY_V6`.
    pub family: u8,
    /// Reserved, zero (inside every prefix, so it must match).
    pub pad: [u8; 3],
    /// The address, wire order.
    pub addr: Addr,
}

/// Bits of [`SourceKey`] before the address: a prefix of this length matches every address
/// of the family.
pub const SOURCE_PREFIX_BASE: u32 = 32;

// Counter indexes of `DECAP_STATS`, in the order the program decides them: a frame is
// counted once, under the first that applies, except `DECAP_BYTES`.

/// Index: frames that are not tunnel packets: not IPv4 or IPv6 (ARP, VLAN-tagged...), an
/// IP protocol or first next header other than 4 or 41 (IPv6 extension headers included),
/// or an IPv4 header too short to read. Passed untouched.
pub const DECAP_NOT_TUNNEL: u32 = 0;
/// Index: tunnel packets whose outer destination is not one of this host's addresses
/// (`DECAP_LOCAL`): someone else's, passed untouched for the kernel to route or drop.
pub const DECAP_NOT_LOCAL: u32 = 1;
/// Index: tunnel packets to this host whose outer header is malformed: a wrong version,
/// IPv4 options (IHL other than 5), a length that does not fit the frame or cannot hold
/// an inner header, a wrong IPv4 header checksum. Dropped.
pub const DECAP_BAD_OUTER: u32 = 2;
/// Index: outer IPv4 fragments (MF or an offset): the agent does not reassemble, and the
/// balancer never fragments. Dropped.
pub const DECAP_FRAGMENT: u32 = 3;
/// Index: outer sources outside `DECAP_SOURCES`, while that list is in use. Dropped.
pub const DECAP_FOREIGN_SOURCE: u32 = 4;
/// Index: inner packets that are malformed: a version that does not match the outer
/// protocol number, a length other than the outer payload's, IPv4 IHL under 5 or a header
/// past the payload, a wrong inner IPv4 header checksum. Dropped.
pub const DECAP_BAD_INNER: u32 = 5;
/// Index: inner destinations outside `DECAP_VIPS`, while that list is in use. Dropped.
pub const DECAP_UNKNOWN_VIP: u32 = 6;
/// Index: packets decapsulated and passed to the kernel as their inner packet.
pub const DECAP_DECAPSULATED: u32 = 7;
/// Index: bytes of the inner packets decapsulated (IP header and payload).
pub const DECAP_BYTES: u32 = 8;
/// Number of counters.
pub const DECAP_COUNT: u32 = 9;

/// Each counter's index and the name `lb decap --status` and the documentation use, in the
/// order the program decides them.
pub const DECAP_COUNTERS: [(u32, &str); DECAP_COUNT as usize] = [
    (DECAP_NOT_TUNNEL, "not_tunnel"),
    (DECAP_NOT_LOCAL, "not_local"),
    (DECAP_BAD_OUTER, "bad_outer"),
    (DECAP_FRAGMENT, "fragment"),
    (DECAP_FOREIGN_SOURCE, "foreign_source"),
    (DECAP_BAD_INNER, "bad_inner"),
    (DECAP_UNKNOWN_VIP, "unknown_vip"),
    (DECAP_DECAPSULATED, "decapsulated"),
    (DECAP_BYTES, "bytes"),
];

#[cfg(feature = "user")]
mod pod {
    // SAFETY: #[repr(C)] plain data with explicit padding fields: every bit pattern is
    // valid and there are no implicit holes.
    unsafe impl aya::Pod for super::DecapConfig {}
    unsafe impl aya::Pod for super::SourceKey {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{align_of, size_of};

    #[test]
    fn layouts_have_no_hidden_padding() {
        assert_eq!(size_of::<DecapConfig>(), 8);
        assert_eq!(size_of::<SourceKey>(), 20);
        assert!(align_of::<SourceKey>() >= 4);
        for (i, (index, _)) in DECAP_COUNTERS.iter().enumerate() {
            assert_eq!(*index as usize, i);
        }
    }
}
