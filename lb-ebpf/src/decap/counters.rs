//! Counting, each CPU on its own copy (no atomic add on this target).

use crate::maps::DECAP_STATS;

/// Adds `n` to the counter at `index`.
#[inline(always)]
pub fn add(index: u32, n: u64) {
    if let Some(c) = DECAP_STATS.get_ptr_mut(index) {
        // SAFETY: a per-CPU value of this map; the program runs on one CPU throughout.
        unsafe { *c += n };
    }
}
