//! Next-hop indexes: each backend address gets one entry of `HOPS`, shared by every slot of
//! that address in every VIP, so 100 VIPs over one farm of 1,000 backends keep 1,000 next
//! hops warm instead of 100,000.

use std::collections::HashMap;
use std::net::IpAddr;

use anyhow::{Result, bail};
use lb_common::MAX_HOPS;

use crate::network::writing::index_set::IndexSet;
use crate::network::writing::state::State;

/// The `HOPS` index of every backend address of one apply.
pub(crate) struct HopIds {
    by_addr: HashMap<IpAddr, u32>,
    /// Indexes taken, by this apply or by addresses of the previous one (which unchanged
    /// slots still name).
    taken: IndexSet,
    next: u32,
}

impl HopIds {
    /// Keeps the indexes of the previous apply when its slots are known to be in the maps
    /// (`trusted`); otherwise every slot is written again and indexes start afresh.
    pub(crate) fn new(old: &State, trusted: bool) -> HopIds {
        let mut ids = HopIds {
            by_addr: HashMap::new(),
            taken: IndexSet::new(MAX_HOPS),
            next: 0,
        };
        if trusted {
            for b in old.vips.iter().flat_map(|v| &v.backends) {
                ids.by_addr.insert(b.address, b.hop);
                ids.taken.insert(b.hop);
            }
        }
        ids
    }

    /// The index of `addr`: the one it had, else the lowest one free. An index freed by a
    /// removed address may be given again: its entry names its address, so the program
    /// asks the FIB again rather than use another address's hop.
    pub(crate) fn of(&mut self, addr: IpAddr) -> Result<u32> {
        if let Some(&id) = self.by_addr.get(&addr) {
            return Ok(id);
        }
        while self.next < MAX_HOPS {
            let id = self.next;
            self.next += 1;
            if !self.taken.contains(id) {
                self.taken.insert(id);
                self.by_addr.insert(addr, id);
                return Ok(id);
            }
        }
        bail!("more than {MAX_HOPS} backend addresses across all Network vServices")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::writing::state::test_vip;

    #[test]
    fn one_index_per_address_kept_across_applies() {
        let [a, b, c]: [IpAddr; 3] =
            ["10.0.0.1", "10.0.0.2", "10.0.0.3"].map(|s| s.parse().unwrap());
        let mut vip = test_vip(
            0,
            "198.18.0.1",
            (6, (80, 80), false),
            &[("10.0.0.2", 80), ("10.0.0.1", 80)],
        );
        vip.backends[1].hop = 1;
        let old = State {
            vips: vec![vip],
            next_slot: 0,
            next_epoch: 0,
        };
        let mut ids = HopIds::new(&old, true);
        assert_eq!(ids.of(a).unwrap(), 1);
        assert_eq!(ids.of(b).unwrap(), 0);
        // A new address takes an index no previous address holds, and keeps it.
        assert_eq!(ids.of(c).unwrap(), 2);
        assert_eq!(ids.of(c).unwrap(), 2);
        // Untrusted: afresh, in order of asking.
        let mut fresh = HopIds::new(&old, false);
        assert_eq!(fresh.of(c).unwrap(), 0);
        assert_eq!(fresh.of(a).unwrap(), 1);
    }
}
