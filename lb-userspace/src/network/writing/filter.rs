//! The data path's address filter (`ADDR_FILTER`): a bit per VIP address and per NAT
//! backend address, so a packet that concerns neither passes after one array read.
//!
//! The filter must never miss a live address, so it only ever grows before the VIP entries
//! and slots that need it are written (the union of old and new), and shrinks to the new set
//! once the stale entries are gone. A bit set for an address that left only costs that
//! address's packets the hash lookups that decide.

use std::net::IpAddr;

use anyhow::{Context, Result};
use lb_common::{Addr, FILTER_NAT_BASE, FILTER_WORDS, filter_bit};

use crate::network::writing::maps::Maps;
use crate::network::writing::state::State;

/// The filter's words for one written state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Filter(Vec<u64>);

impl Filter {
    /// The bits of every VIP address of `state`, and of every backend of its NAT VIPs
    /// (active or not: replies of a backend in its removal delay are still reversed).
    pub fn of(state: &State) -> Filter {
        let mut f = Filter(vec![0; FILTER_WORDS as usize]);
        for v in &state.vips {
            f.mark(0, v.address);
            if !v.dsr {
                for b in &v.backends {
                    f.mark(FILTER_NAT_BASE, b.address);
                }
            }
        }
        f
    }

    fn mark(&mut self, base: u32, addr: IpAddr) {
        let bit = filter_bit(Addr::from_ip(addr).0.words());
        if let Some(word) = self.0.get_mut((base + (bit >> 6)) as usize) {
            *word |= 1 << (bit & 63);
        }
    }

    /// Every bit of either.
    pub fn union(&self, other: &Filter) -> Filter {
        Filter(self.0.iter().zip(&other.0).map(|(a, b)| a | b).collect())
    }

    /// Writes the words that differ from `written` (all of them when what the map holds is
    /// not known, after adopting another process's data path).
    pub fn write(&self, maps: &mut Maps, written: Option<&Filter>) -> Result<()> {
        for (i, word) in self.0.iter().enumerate() {
            if written.is_some_and(|w| w.0.get(i) == Some(word)) {
                continue;
            }
            maps.filter
                .set(i as u32, *word, 0)
                .with_context(|| format!("writing word {i} of the address filter"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::writing::state::{VipState, test_vip};

    fn vip(address: &str, dsr: bool, backends: &[&str]) -> VipState {
        let backends: Vec<(&str, u16)> = backends.iter().map(|b| (*b, 80)).collect();
        test_vip(0, address, (6, (80, 80), dsr), &backends)
    }

    fn has(f: &Filter, base: u32, addr: &str) -> bool {
        let bit = filter_bit(Addr::from_ip(addr.parse().expect("ip")).0.words());
        f.0[(base + (bit >> 6)) as usize] & (1 << (bit & 63)) != 0
    }

    /// One read rejects non-VIP traffic, so every VIP address and every NAT
    /// backend address must have its bit, and DSR backends (whose replies bypass us) need none.
    #[test]
    fn marks_vip_addresses_and_nat_backends_only() {
        let state = State {
            vips: vec![
                vip("198.18.0.10", false, &["10.2.0.1", "10.2.0.2"]),
                vip("2001:db8::10", true, &["10.3.0.1"]),
            ],
            next_slot: 0,
            next_epoch: 0,
        };
        let f = Filter::of(&state);
        assert!(has(&f, 0, "198.18.0.10"));
        assert!(has(&f, 0, "2001:db8::10"));
        assert!(has(&f, FILTER_NAT_BASE, "10.2.0.1"));
        assert!(has(&f, FILTER_NAT_BASE, "10.2.0.2"));
        let set: u32 = f.0.iter().map(|w| w.count_ones()).sum();
        assert_eq!(set, 4, "only the four addresses are marked");
        let empty = Filter::of(&State::default());
        assert_eq!(empty.union(&f), f);
    }

    /// 1,000 VIP addresses spread over the filter, so an address that is none of
    /// them is rejected by the read almost always.
    #[test]
    fn a_thousand_addresses_leave_most_bits_clear() {
        let vips = (0..1000u32)
            .map(|i| {
                let a = std::net::Ipv4Addr::from(0xc612_0000 + i).to_string();
                vip(&a, true, &[])
            })
            .collect();
        let f = Filter::of(&State {
            vips,
            next_slot: 0,
            next_epoch: 0,
        });
        let set: u32 = f.0[..FILTER_NAT_BASE as usize]
            .iter()
            .map(|w| w.count_ones())
            .sum();
        assert!(set > 990, "{set} distinct bits for 1,000 addresses");
        let hits = (0..10_000u32)
            .filter(|i| {
                let a = std::net::Ipv4Addr::from(0x0b00_0000 + i * 7919).to_string();
                has(&f, 0, &a)
            })
            .count();
        assert!(
            hits < 200,
            "{hits} of 10,000 other addresses pass the filter"
        );
    }
}
