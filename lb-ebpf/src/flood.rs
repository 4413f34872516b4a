//! The connection table's flood guard: above a rate of new flows per CPU, new flows are
//! balanced without being recorded, so a SYN flood neither evicts the established flows
//! nor costs a table insert per packet (see `lb_common::FloodGuard`). What makes this
//! safe: an unrecorded flow's next packets hash to the same Maglev position, and a NAT
//! reply of one finds its backend the same way (`nat::reverse`).

use aya_ebpf::helpers::generated::bpf_ktime_get_ns;
use lb_common::GLOBAL_FLOOD_UNRECORDED;

use crate::maps::FLOOD_GUARD;

const NS_PER_SECOND: u64 = 1_000_000_000;

/// Whether the guard is on (it may have left flows unrecorded).
#[inline(always)]
pub fn guarding() -> bool {
    FLOOD_GUARD.get(0).is_some_and(|g| g.limit != 0)
}

/// Whether this CPU has recorded its limit of new flows (in the current second, or in the
/// last one it saw: the first new flow of a second finds out).
#[inline(always)]
pub fn saturated() -> bool {
    FLOOD_GUARD
        .get(0)
        .is_some_and(|g| g.limit != 0 && g.count >= g.limit)
}

/// Whether this new flow may be recorded: false once this CPU has seen more than the
/// limit's new flows in the current second (counted as unrecorded).
#[inline(always)]
pub fn may_record() -> bool {
    let Some(guard) = FLOOD_GUARD.get_ptr_mut(0) else {
        return true;
    };
    // SAFETY: a pointer into this CPU's copy of the map; no other CPU touches it.
    let guard = unsafe { &mut *guard };
    if guard.limit == 0 {
        return true;
    }
    let second = unsafe { bpf_ktime_get_ns() } / NS_PER_SECOND;
    if guard.second != second {
        guard.second = second;
        guard.count = 0;
    }
    if guard.count < guard.limit {
        guard.count += 1;
        return true;
    }
    crate::stats::global(GLOBAL_FLOOD_UNRECORDED);
    false
}
