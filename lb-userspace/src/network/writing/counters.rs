//! The Backend Services' counters (BACKEND_STATS): their indexes, and reading and resetting
//! them through a memory mapping.
//!
//! The program keeps one counter block per Backend Service and CPU in a plain array, at
//! index `cpu * MAX_BACKEND_SLOTS + index`, instead of a per-CPU array: a per-CPU lookup
//! reads a pointer table before the block, one more cache miss per packet. A block per
//! Backend Service, not per slot: 100 VIPs over one farm of 1,000 backends count into 1,000
//! blocks, which stay in cache, where 100,000 slots' blocks cost a cache and TLB miss per
//! packet. The array is memory-mapped here, so `lb status` sums a block's CPUs with plain
//! reads instead of one system call per block.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use aya::maps::{Map, MapData};
use lb_common::{Counters, MAX_BACKEND_SLOTS};

use crate::network::tables::sys;
use crate::network::writing::index_set::IndexSet;
use crate::network::writing::state::State;

/// The `BACKEND_STATS` index of every Backend Service of one apply, by name.
pub(crate) struct CounterIds {
    by_name: HashMap<Arc<str>, u32>,
    /// Indexes taken, by this apply or by services of the previous one.
    taken: IndexSet,
    next: u32,
    /// Indexes given to a service that had none: their blocks are zeroed before any slot
    /// names them (they may hold a removed service's counts).
    pub fresh: Vec<u32>,
}

impl CounterIds {
    /// Keeps the indexes of the previous apply's services (whose counts go on, across
    /// restarts too: the state file keeps them).
    pub(crate) fn new(old: &State) -> CounterIds {
        let mut ids = CounterIds {
            by_name: HashMap::new(),
            taken: IndexSet::new(MAX_BACKEND_SLOTS),
            next: 0,
            fresh: Vec::new(),
        };
        for b in old.vips.iter().flat_map(|v| &v.backends) {
            ids.by_name.insert(b.name.clone(), b.counters);
            ids.taken.insert(b.counters);
        }
        ids
    }

    /// The index of the Backend Service `name`: the one it had, else the lowest one free.
    pub(crate) fn of(&mut self, name: &Arc<str>) -> Result<u32> {
        if let Some(&id) = self.by_name.get(name) {
            return Ok(id);
        }
        while self.next < MAX_BACKEND_SLOTS {
            let id = self.next;
            self.next += 1;
            if !self.taken.contains(id) {
                self.taken.insert(id);
                self.by_name.insert(name.clone(), id);
                self.fresh.push(id);
                return Ok(id);
            }
        }
        bail!("more than {MAX_BACKEND_SLOTS} Backend Services across all Network vServices")
    }
}

/// A shared mapping of BACKEND_STATS.
pub(crate) struct ServiceCounters {
    base: *mut Counters,
    bytes: usize,
    cpus: usize,
    /// The map itself: its descriptor stays open as long as the mapping (and for the
    /// programs loaded after it, whose instructions name it by descriptor).
    _map: MapData,
}

// SAFETY: the mapping belongs to this value alone; moving it to another thread moves the
// only access to it.
unsafe impl Send for ServiceCounters {}
// SAFETY: reads through `&self` are volatile reads of plain integers the program may be
// updating; resets need `&mut self`.
unsafe impl Sync for ServiceCounters {}

impl ServiceCounters {
    /// Maps BACKEND_STATS, which holds `cpus` blocks per Backend Service index.
    pub(crate) fn map(map: Map, cpus: usize) -> Result<ServiceCounters> {
        let Map::Array(map) = map else {
            bail!("BACKEND_STATS is not an array");
        };
        let entries = cpus * MAX_BACKEND_SLOTS as usize;
        // An array sized for fewer CPUs is refused by the kernel here.
        let (base, bytes) = sys::map_array(map.fd().as_fd(), entries * size_of::<Counters>())
            .with_context(|| {
                format!("mapping BACKEND_STATS ({cpus} CPUs x {MAX_BACKEND_SLOTS} services)")
            })?;
        Ok(ServiceCounters {
            base: base.cast(),
            bytes,
            cpus,
            _map: map,
        })
    }

    /// The block of the service at `index` on `cpu`.
    fn block(&self, cpu: usize, index: u32) -> Result<*mut Counters> {
        if index >= MAX_BACKEND_SLOTS || cpu >= self.cpus {
            bail!("counters index {index} on CPU {cpu} is outside BACKEND_STATS");
        }
        // SAFETY: cpu * MAX + index < cpus * MAX entries, all inside the mapping; the
        // page-aligned base plus a multiple of 64 is aligned for the u64 fields.
        Ok(unsafe {
            self.base
                .add(cpu * MAX_BACKEND_SLOTS as usize + index as usize)
        })
    }

    /// The counters of the service at `index`, summed over the CPUs.
    pub(crate) fn sum(&self, index: u32) -> Result<Counters> {
        let mut total = Counters::default();
        for cpu in 0..self.cpus {
            // SAFETY: `block` checked the index; the program may be adding to the block,
            // so the read is volatile (a torn sum is off by the packets of that moment).
            let c = unsafe { self.block(cpu, index)?.read_volatile() };
            total.add(&c);
        }
        Ok(total)
    }

    /// Zeroes the counters at `indexes` (indexes given to a new Backend Service).
    pub(crate) fn reset(&mut self, indexes: &[u32]) -> Result<()> {
        for &index in indexes {
            for cpu in 0..self.cpus {
                // SAFETY: as in `sum`.
                unsafe { self.block(cpu, index)?.write_volatile(Counters::default()) };
            }
        }
        Ok(())
    }
}

impl Drop for ServiceCounters {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `map` made; the map keeps its contents.
        unsafe { libc::munmap(self.base.cast(), self.bytes) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::writing::state::test_vip;

    /// Counters per Backend Service (S-OB1): a service keeps its index across applies, in
    /// every VIP; a new one takes a free index, listed so its block is zeroed.
    #[test]
    fn one_index_per_backend_service_kept_across_applies() {
        let mut vip = test_vip(0, "198.18.0.1", (6, (80, 80), false), &[("10.0.0.1", 80)]);
        vip.backends[0].counters = 3;
        let old = State {
            vips: vec![vip],
            next_slot: 0,
            next_epoch: 0,
        };
        let mut ids = CounterIds::new(&old);
        let (kept, new): (Arc<str>, Arc<str>) = ("10.0.0.1".into(), "web-2".into());
        assert_eq!(ids.of(&kept).unwrap(), 3);
        assert_eq!(ids.of(&new).unwrap(), 0);
        // The same service in another VIP: the same block.
        assert_eq!(ids.of(&new).unwrap(), 0);
        assert_eq!(ids.fresh, [0]);
    }
}
