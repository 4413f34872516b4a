//! Which VIP a destination belongs to.

use aya_ebpf::btf_maps::lpm_trie::Key;
use lb_common::*;

use crate::headers::{IPPROTO_TCP, IPPROTO_UDP};
use crate::ip::IpHeader;
use crate::maps::{ADDRS, RANGES, VIPS};

/// Exact VIP first (one lookup for most VIP traffic), then, for addresses that have them,
/// Port Range and ANY-L3 entries. `wire_port` is the destination port as the packet holds it.
#[inline(always)]
pub fn find<H: IpHeader>(addr: &[u32; 4], proto: u8, wire_port: u16) -> Option<VipMeta> {
    let addr = Addr::from_words(addr);
    let port = u16::from_be(wire_port);
    let has_ports = proto == IPPROTO_TCP || proto == IPPROTO_UDP;
    if has_ports {
        let key = VipKey {
            addr,
            port,
            proto,
            family: H::FAMILY,
        };
        if let Some(meta) = unsafe { VIPS.get(&key) } {
            return Some(*meta);
        }
    }
    let addr_key = AddrKey {
        addr,
        family: H::FAMILY,
        pad: [0; 3],
    };
    let roles = *unsafe { ADDRS.get(&addr_key) }?;
    if has_ports && roles & ADDR_VIP_RANGE != 0 {
        let data = RangeData {
            addr,
            proto,
            family: H::FAMILY,
            port: wire_port.to_ne_bytes(),
        };
        let key = Key::new(RANGE_PREFIX_BASE + 16, data);
        if let Some(meta) = RANGES.get(&key) {
            return Some(*meta);
        }
    }
    if roles & ADDR_VIP_ANY != 0 {
        let key = VipKey {
            addr,
            port: 0,
            proto: PROTO_ANY,
            family: H::FAMILY,
        };
        if let Some(meta) = unsafe { VIPS.get(&key) } {
            return Some(*meta);
        }
    }
    None
}
