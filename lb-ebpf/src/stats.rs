//! Counter updates, each CPU on its own copy (no atomics on this target): per-CPU maps, and
//! for Backend Services a plain array with a block per CPU.

use aya_ebpf::helpers::generated::bpf_get_smp_processor_id;
use lb_common::{Counters, MAX_BACKEND_SLOTS};

use crate::maps::{BACKEND_STATS, BACKENDS, GLOBAL_STATS, VIP_STATS};

/// Adds one to a global counter.
#[inline(always)]
pub fn global(index: u32) {
    if let Some(c) = GLOBAL_STATS.get_ptr_mut(index) {
        unsafe { *c += 1 };
    }
}

/// This CPU's counters of the Backend Service at `index` (a slot's `counters`).
#[inline(always)]
fn backend_counters(index: u32) -> Option<*mut Counters> {
    if index >= MAX_BACKEND_SLOTS {
        return None;
    }
    // SAFETY: no preconditions; the program runs on one CPU from start to end.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    BACKEND_STATS.get_ptr_mut(cpu * MAX_BACKEND_SLOTS + index)
}

/// What happened to one packet, for the VIP and backend counters.
pub struct Event {
    pub bytes: u64,
    pub new_flow: bool,
    pub ct_miss: bool,
}

/// Counts a NAT reply translated back to its client, on its VIP and on the Backend
/// Service of its slot.
#[inline(always)]
pub fn replied(vip_id: u32, slot: u32, bytes: u64) {
    if let Some(c) = VIP_STATS.get_ptr_mut(vip_id) {
        bump_reply(c, bytes);
    }
    let index = BACKENDS.get(slot).map_or(u32::MAX, |b| b.counters);
    if let Some(c) = backend_counters(index) {
        bump_reply(c, bytes);
    }
}

#[inline(always)]
fn bump_reply(c: *mut Counters, bytes: u64) {
    unsafe {
        (*c).reply_packets += 1;
        (*c).reply_bytes += bytes;
    }
}

#[inline(always)]
fn bump(c: *mut Counters, ev: &Event) {
    unsafe {
        (*c).packets += 1;
        (*c).bytes += ev.bytes;
        if ev.new_flow {
            (*c).new_flows += 1;
        }
        if ev.ct_miss {
            (*c).ct_misses += 1;
        }
    }
}

/// Counts a forwarded packet on its VIP and on its Backend Service (`counters`, its
/// slot's index).
#[inline(always)]
pub fn forwarded(vip_id: u32, counters: u32, ev: &Event) {
    if let Some(c) = VIP_STATS.get_ptr_mut(vip_id) {
        bump(c, ev);
    }
    if let Some(c) = backend_counters(counters) {
        bump(c, ev);
    }
}

/// Counts a packet dropped for lack of a usable backend.
#[inline(always)]
pub fn dropped(vip_id: u32) {
    if let Some(c) = VIP_STATS.get_ptr_mut(vip_id) {
        unsafe { (*c).drops += 1 };
    }
    global(lb_common::GLOBAL_NO_BACKEND);
}
