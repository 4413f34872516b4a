//! The first test every IP packet meets: may it be for a VIP, or a NAT reply? One array
//! read per address, so traffic that is neither (most of what a busy interface carries)
//! goes to the kernel without a hash lookup.

use lb_common::{FILTER_NAT_BASE, filter_bit};

use crate::maps::ADDR_FILTER;

/// Whether the bit of `addr` is set in the half of the filter that starts at `base`. A
/// missing word (impossible: the index is bounded) counts as set, so nothing is lost.
#[inline(always)]
fn marked(base: u32, addr: &[u32; 4]) -> bool {
    let bit = filter_bit(addr);
    match ADDR_FILTER.get(base + (bit >> 6)) {
        Some(word) => *word & (1u64 << (bit & 63)) != 0,
        None => true,
    }
}

/// `dst` may be a VIP address.
#[inline(always)]
pub fn may_be_vip(dst: &[u32; 4]) -> bool {
    marked(0, dst)
}

/// `src` may be the backend of a NAT VIP (so the packet may be a reply to reverse).
#[inline(always)]
pub fn may_be_nat_backend(src: &[u32; 4]) -> bool {
    marked(FILTER_NAT_BASE, src)
}
