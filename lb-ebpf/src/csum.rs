//! Incremental Internet checksum updates (RFC 1624, eqn. 3).
//!
//! All values are the raw 16/32-bit words as they sit in memory; the one's complement sum
//! is byte-order independent, so no swapping is needed.

/// Folds a one's complement sum to 16 bits.
#[inline(always)]
pub fn fold(mut sum: u64) -> u16 {
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
}

/// New checksum after a 16-bit word changed from `from` to `to`.
#[inline(always)]
pub fn replace2(check: u16, from: u16, to: u16) -> u16 {
    let sum = (!check) as u64 + (!from) as u64 + to as u64;
    !fold(sum)
}

/// New checksum after a 32-bit word changed from `from` to `to`.
#[inline(always)]
pub fn replace4(check: u16, from: u32, to: u32) -> u16 {
    let nf = !from;
    let sum = (!check) as u64
        + (nf & 0xffff) as u64
        + (nf >> 16) as u64
        + (to & 0xffff) as u64
        + (to >> 16) as u64;
    !fold(sum)
}
