//! Writes a plan into the maps without ever showing a packet a half-written VIP.
//!
//! Order: backend slots and Maglev tables first (a new table is a new inner map swapped
//! in with one update), then VIP entries, then address roles; stale entries last. Slot
//! and VIP ids are kept stable across runs and restarts (flows point at slots).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use aya::maps::lpm_trie::Key;
use lb_common::{
    ADDR_VIP_ANY, ADDR_VIP_RANGE, Addr, AddrKey, BackendSlot, MAX_BACKEND_SLOTS, MAX_VIPS,
    PROTO_ANY, RANGE_PREFIX_BASE, RangeData, SLOT_F_ACTIVE, VIP_F_DSR, VIP_F_FLOOD_GUARD,
    VIP_F_GUE, VIP_F_TUNNEL, VipById, VipKey, VipMeta,
};

use tracing::debug;

use crate::config::Config;
use crate::network::loading::loader::DataPath;
use crate::network::planning::build;
use crate::network::planning::plan::{VipPlan, plan, range_prefixes};
use crate::network::tables::batch;
use crate::network::tables::pins;
use crate::network::tables::sys;
use crate::network::writing::counters::CounterIds;
use crate::network::writing::filter::Filter;
use crate::network::writing::hops::HopIds;
use crate::network::writing::index_set::IndexSet;
use crate::network::writing::maps::Maps;
use crate::network::writing::nat::NatBackends;
use crate::network::writing::state::{SlotState, State, VipState};
use crate::selection::Health;

pub(crate) fn addr_key(a: IpAddr) -> AddrKey {
    let (addr, family) = Addr::from_ip(a);
    AddrKey {
        addr,
        family,
        pad: [0; 3],
    }
}

/// Writes the config's Network vServices; `down` names failed Backend Services (every
/// other one counts as OK). Used where no health engine runs (`lb load`, fixtures).
pub fn apply(dp: &mut DataPath, cfg: &Config, down: &HashSet<String>) -> Result<()> {
    let health = |name: &str| {
        if down.contains(name) {
            Health::Error
        } else {
            Health::Ok
        }
    };
    dp.set_tunnels(cfg)?;
    apply_plan(dp, &plan(cfg, &health)?)
}

/// Writes `vips` into the maps, replacing whatever was written before.
pub fn apply_plan(dp: &mut DataPath, vips: &[VipPlan]) -> Result<()> {
    let started = Instant::now();
    let old = &dp.state;
    let mut new = State {
        vips: Vec::new(),
        next_slot: old.next_slot,
        next_epoch: old.next_epoch,
    };
    let ids = assign_vip_ids(old, vips)?;
    // What this process wrote itself is known to be in the maps; the state of another
    // process (adopted) may lag behind them if it died mid-write, so its slots are
    // written again once.
    let trust_old = dp.written;
    let mut used_slots = IndexSet::new(MAX_BACKEND_SLOTS);
    // Slots that existing backends may keep: a new backend takes one of these only when
    // nothing else is free. Built once, not per allocation.
    let mut kept = IndexSet::new(MAX_BACKEND_SLOTS);
    for v in &old.vips {
        for b in &v.backends {
            kept.insert(b.slot);
        }
    }
    let mut hops = HopIds::new(old, trust_old);
    let mut counter_ids = CounterIds::new(old);
    let mut keys = build::Keys::default();
    // The key of each backend of each VIP, parallel to `new.vips[i].backends`.
    let mut key_ids: Vec<Vec<u32>> = Vec::with_capacity(vips.len());
    let mut previous_states = Vec::with_capacity(vips.len());
    let mut slot_writes = Vec::new();
    // The previous state of each VIP id, so 1,000 VIPs are not 1,000 x 1,000 scans.
    let old_by_id: HashMap<u32, &VipState> = old.vips.iter().map(|o| (o.vip_id, o)).collect();
    for (vip, &vip_id) in vips.iter().zip(&ids) {
        let previous = old_by_id.get(&vip_id).copied();
        let fresh_vip = previous.is_none_or(|o| o.name != vip.name);
        if fresh_vip {
            Maps::reset_counters(&mut dp.maps.vip_stats, vip_id)?;
        }
        let mut owners = Owners::new(previous);
        let mut slots = Vec::with_capacity(vip.backends.len());
        let mut vip_keys = Vec::with_capacity(vip.backends.len());
        let mut slots_written = false;
        for (i, b) in vip.backends.iter().enumerate() {
            // A slot keeps its owner (same VIP id, address and port); one whose active flag
            // is unchanged is not written again.
            let counters = counter_ids.of(&b.name)?;
            let (slot, unchanged) = match owners.find(i, b.address, b.port, &used_slots) {
                Some(old) => (
                    old.slot,
                    trust_old && old.active == b.active && old.counters == counters,
                ),
                None => (
                    allocate_slot(&mut new.next_slot, &used_slots, &kept)?,
                    false,
                ),
            };
            used_slots.insert(slot);
            let hop = hops.of(b.address)?;
            if !unchanged {
                let (addr, family) = Addr::from_ip(b.address);
                let entry = BackendSlot {
                    addr,
                    port: b.port,
                    flags: if b.active { SLOT_F_ACTIVE } else { 0 },
                    family,
                    vip_id,
                    hop,
                    counters,
                };
                slot_writes.push((slot, entry));
                slots_written = true;
            }
            let state = SlotState {
                name: b.name.clone(),
                slot,
                address: b.address,
                port: b.port,
                weight: b.weight,
                active: b.active,
                hop,
                counters,
            };
            vip_keys.push(keys.add(b.address, b.port));
            slots.push(state);
        }
        // Flows keep a copy of their slot while the VIP's epoch stays: it changes with any
        // slot written, taken or given up.
        let same_slots = previous.is_some_and(|o| {
            o.backends
                .iter()
                .map(|b| b.slot)
                .eq(slots.iter().map(|s| s.slot))
        });
        let epoch = match previous {
            Some(o) if trust_old && !fresh_vip && !slots_written && same_slots => o.epoch,
            _ => {
                let e = new.next_epoch;
                new.next_epoch = e.wrapping_add(1);
                e
            }
        };
        key_ids.push(vip_keys);
        previous_states.push(previous);
        new.vips.push(VipState {
            name: vip.name.clone(),
            vip_id,
            address: vip.address,
            proto: vip.proto,
            ports: vip.ports,
            dsr: vip.dsr,
            tunnel: vip.tunnel,
            gue: vip.gue,
            table_size: 0,
            table_hash: 0,
            table_digest: 0,
            flood_guard: false,
            epoch,
            backends: slots,
        });
    }
    let planned = started.elapsed();
    // New tables, filled but not yet in MAGLEV: swapped in together, once the slots they
    // name are written (also in one batch each).
    let sizes: Vec<u32> = vips.iter().map(|v| v.table_size).collect();
    keys.rank();
    let built = build::tables(&new.vips, &sizes, &previous_states, &key_ids, &keys)?;
    let computed = started.elapsed();
    let btf = dp.table_btf.as_ref().map(|fd| fd.as_fd());
    let mut tables = Vec::new();
    for (state, outcome) in new.vips.iter_mut().zip(&built.built) {
        state.table_size = outcome.size;
        state.table_hash = outcome.fingerprint;
        state.table_digest = outcome.digest;
        if let Some(table) = &outcome.new {
            let entries = built.entries(table);
            let inner = dp
                .pool
                .fill(state.vip_id, outcome.size, entries, btf)
                .with_context(|| format!("writing the Maglev table of {}", state.name))?;
            tables.push((state.vip_id, inner));
        }
    }
    // The filter grows before anything that needs a new bit is written.
    let old_filter = Filter::of(old);
    let new_filter = Filter::of(&new);
    let grown = old_filter.union(&new_filter);
    grown.write(&mut dp.maps, trust_old.then_some(&old_filter))?;
    // Replies of the first new flow must already find their VIP.
    // Taken, so that a write failing from here on leaves it to be read from the map.
    let old_nat = match (dp.nat.take(), trust_old) {
        (Some(nat), true) => nat,
        _ => NatBackends::read(&dp.maps)?,
    };
    let new_nat = NatBackends::plan(&new, Some(&old_nat));
    new_nat.mark(&mut new);
    let pin_dir = dp.pin_dir().map(std::path::Path::to_path_buf);
    // On a pinned data path the state file is saved before apply returns; its encoding
    // runs on a second thread while the maps are written, so apply returns sooner (one
    // backend of 1,000 VIPs failing, 100,000 slots: 86-101 ms instead of 105-143 ms).
    let (filled, swapped, encoded) = std::thread::scope(|s| -> Result<_> {
        let encoding = pin_dir.is_some().then(|| s.spawn(|| new.encode()));
        new_nat.write(&mut dp.maps, Some(&old_nat))?;
        let filled = started.elapsed();
        let maps = &mut dp.maps;
        maps.backend_stats.reset(&counter_ids.fresh)?;
        batch::write_slots(&mut maps.backends, maps.backends_fd.as_fd(), &slot_writes)?;
        batch::swap_tables(maps.maglev_fd.as_fd(), &tables)
            .context("swapping in the new Maglev tables")?;
        let swapped = started.elapsed();
        if let Some(dir) = &pin_dir {
            let dir = pins::dir(dir);
            if trust_old {
                for (id, table) in &tables {
                    pins::replace(&dir, *id, table.fd.as_fd())?;
                }
            }
        }
        dp.pool.swapped(tables);
        write_vip_entries(&mut dp.maps, old, &new, trust_old)?;
        remove_stale(&mut dp.maps, old, &new, &used_slots)?;
        for vip_id in drop_unused_tables(&mut dp.maps, old, &new, pin_dir.as_deref(), trust_old)? {
            dp.pool.forget(vip_id);
        }
        write_addrs(&mut dp.maps, old, &new)?;
        new_nat.remove_stale(&mut dp.maps, &old_nat);
        new_filter.write(&mut dp.maps, Some(&grown))?;
        dp.maps.flush_nexthops()?;
        if let Some(dir) = pin_dir.as_ref().filter(|_| !trust_old) {
            // The first write of this process: the pins are made to match MAGLEV, whatever
            // an earlier process left.
            let ids: Vec<u32> = new
                .vips
                .iter()
                .filter(|v| v.table_size > 0)
                .map(|v| v.vip_id)
                .collect();
            pins::sync(&pins::dir(dir), dp.maps.maglev_fd.as_fd(), &ids)?;
        }
        let encoded = match encoding {
            Some(thread) => Some(
                thread
                    .join()
                    .map_err(|_| anyhow::anyhow!("encoding the data-path state panicked"))??,
            ),
            None => None,
        };
        Ok((filled, swapped, encoded))
    })?;
    if let (Some(dir), Some(bytes)) = (&pin_dir, encoded) {
        State::write_encoded(dir, &bytes)?;
    }
    debug!(
        vips = new.vips.len(),
        tables = built.built.iter().filter(|b| b.new.is_some()).count(),
        computations = built.positions.len(),
        slots_written = slot_writes.len(),
        "Network vServices written in {:?} (slots decided {:?}, tables computed {:?}, \
         filled {:?}, swapped {:?})",
        started.elapsed(),
        planned,
        computed - planned,
        filled - computed,
        swapped - filled,
    );
    dp.state = new;
    dp.nat = Some(new_nat);
    dp.written = true;
    Ok(())
}

/// The previous backends of one VIP id, found by position first (a list rarely changes
/// order), by address and port otherwise.
struct Owners<'a> {
    previous: &'a [SlotState],
    by_address: Option<HashMap<(IpAddr, u16), &'a SlotState>>,
}

impl<'a> Owners<'a> {
    fn new(previous: Option<&'a VipState>) -> Self {
        Owners {
            previous: previous.map_or(&[], |p| &p.backends),
            by_address: None,
        }
    }

    /// The previous slot of the backend at `position` with `address` and `port`, unless
    /// another backend of this apply took it already.
    fn find(
        &mut self,
        position: usize,
        address: IpAddr,
        port: u16,
        used: &IndexSet,
    ) -> Option<&'a SlotState> {
        let same = |s: &&SlotState| s.address == address && s.port == port;
        if let Some(s) = self.previous.get(position).filter(same)
            && !used.contains(s.slot)
        {
            return Some(s);
        }
        let previous = self.previous;
        let by_address = self.by_address.get_or_insert_with(|| {
            // The last backend of an address wins, as the slot map of earlier versions had it.
            previous.iter().map(|s| ((s.address, s.port), s)).collect()
        });
        by_address
            .get(&(address, port))
            .copied()
            .filter(|s| !used.contains(s.slot))
    }
}

/// Removes MAGLEV's table (and its pin) of every VIP id that had one and has none now
/// (a VIP removed, or left without backend): its VIP entry no longer leads there, so no
/// packet reads it, and nothing keeps the memory. With `trust_old` false the pins are
/// left to the sync that follows. Returns those VIP ids.
fn drop_unused_tables(
    maps: &mut Maps,
    old: &State,
    new: &State,
    pin_dir: Option<&std::path::Path>,
    trust_old: bool,
) -> Result<Vec<u32>> {
    let mut dropped = Vec::new();
    let with_table: HashSet<u32> = new
        .vips
        .iter()
        .filter(|v| v.table_size > 0)
        .map(|v| v.vip_id)
        .collect();
    for v in old.vips.iter().filter(|v| v.table_size > 0) {
        if with_table.contains(&v.vip_id) {
            continue;
        }
        match sys::delete_u32(maps.maglev_fd.as_fd(), v.vip_id) {
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => {
                return Err(e).with_context(|| {
                    format!(
                        "removing the Maglev table of VIP id {} from MAGLEV",
                        v.vip_id
                    )
                });
            }
            _ => {}
        }
        if let (Some(dir), true) = (pin_dir, trust_old) {
            pins::remove(&pins::dir(dir), v.vip_id)?;
        }
        dropped.push(v.vip_id);
    }
    Ok(dropped)
}

/// What keeps a VIP's id across applies: name, address, protocol and ports.
type IdKey<'a> = (&'a str, IpAddr, u8, (u16, u16));

/// Same name and same (address, protocol, ports) keep their id; others get the lowest free.
fn assign_vip_ids(old: &State, vips: &[VipPlan]) -> Result<Vec<u32>> {
    let mut taken = HashSet::new();
    let mut ids = vec![None; vips.len()];
    let old_ids: HashMap<IdKey<'_>, &VipState> = old
        .vips
        .iter()
        .map(|o| ((o.name.as_str(), o.address, o.proto, o.ports), o))
        .collect();
    for (i, v) in vips.iter().enumerate() {
        if let Some(o) = old_ids.get(&(v.name.as_str(), v.address, v.proto, v.ports)) {
            taken.insert(o.vip_id);
            ids[i] = Some(o.vip_id);
        }
    }
    let mut next = 0u32;
    ids.into_iter()
        .map(|id| match id {
            Some(id) => Ok(id),
            None => {
                while taken.contains(&next) {
                    next += 1;
                }
                if next >= MAX_VIPS {
                    bail!("more than {MAX_VIPS} Network vServices");
                }
                taken.insert(next);
                Ok(next)
            }
        })
        .collect()
}

/// Round-robin over the slot space, so a freed slot is reused as late as possible.
fn allocate_slot(next: &mut u32, used: &IndexSet, kept: &IndexSet) -> Result<u32> {
    for pass in 0..2 {
        for _ in 0..MAX_BACKEND_SLOTS {
            let s = *next % MAX_BACKEND_SLOTS;
            *next = (s + 1) % MAX_BACKEND_SLOTS;
            if !used.contains(s) && (pass == 1 || !kept.contains(s)) {
                return Ok(s);
            }
        }
    }
    bail!("more than {MAX_BACKEND_SLOTS} backends across all Network vServices")
}

fn meta(v: &VipState) -> VipMeta {
    VipMeta {
        vip_id: v.vip_id,
        flags: if v.dsr { VIP_F_DSR } else { 0 }
            | if v.tunnel { VIP_F_TUNNEL } else { 0 }
            | if v.gue { VIP_F_GUE } else { 0 }
            | if v.flood_guard { VIP_F_FLOOD_GUARD } else { 0 },
        table_size: v.table_size,
        epoch: v.epoch,
    }
}

fn exact_key(v: &VipState) -> Option<VipKey> {
    let (addr, family) = Addr::from_ip(v.address);
    if v.proto == PROTO_ANY {
        Some(VipKey {
            addr,
            port: 0,
            proto: PROTO_ANY,
            family,
        })
    } else if v.ports.0 == v.ports.1 {
        Some(VipKey {
            addr,
            port: v.ports.0,
            proto: v.proto,
            family,
        })
    } else {
        None
    }
}

fn range_keys(v: &VipState) -> Vec<Key<RangeData>> {
    if v.proto == PROTO_ANY || v.ports.0 == v.ports.1 {
        return Vec::new();
    }
    range_prefixes(v.ports.0, v.ports.1)
        .into_iter()
        .map(|(port, bits)| {
            let (addr, family) = Addr::from_ip(v.address);
            let data = RangeData {
                addr,
                proto: v.proto,
                family,
                port: port.to_be_bytes(),
            };
            Key::new(RANGE_PREFIX_BASE + bits, data)
        })
        .collect()
}

/// Writes the VIP entries (VIPS, RANGES) that differ from what `old` wrote; all of them
/// when `old` is not known to be in the maps (`trust_old` false).
fn write_vip_entries(maps: &mut Maps, old: &State, new: &State, trust_old: bool) -> Result<()> {
    let written: HashMap<u32, &VipState> = if trust_old {
        old.vips.iter().map(|v| (v.vip_id, v)).collect()
    } else {
        HashMap::new()
    };
    for v in &new.vips {
        if written.get(&v.vip_id).is_some_and(|o| same_entries(o, v)) {
            continue;
        }
        write_entries(maps, v)?;
    }
    Ok(())
}

/// Writes a VIP's entries: its exact key or its Port Range prefixes, each with its `meta`,
/// and its entry by id (zeroed unless it is an exact VIP).
fn write_entries(maps: &mut Maps, v: &VipState) -> Result<()> {
    let mut by_id = VipById::default();
    if let Some(k) = exact_key(v) {
        maps.vips.insert(k, meta(v), 0).context("writing VIPS")?;
        by_id = VipById {
            key: k,
            meta: meta(v),
        };
    }
    maps.vip_by_id
        .set(v.vip_id, by_id, 0)
        .context("writing VIP_BY_ID")?;
    for k in range_keys(v) {
        maps.ranges
            .insert(&k, meta(v), 0)
            .context("writing RANGES")?;
    }
    Ok(())
}

/// The entries of a VIP are its key(s) and `meta`: the same when these are.
fn same_entries(a: &VipState, b: &VipState) -> bool {
    (
        a.address,
        a.proto,
        a.ports,
        a.dsr,
        a.tunnel,
        a.gue,
        a.table_size,
    ) == (
        b.address,
        b.proto,
        b.ports,
        b.dsr,
        b.tunnel,
        b.gue,
        b.table_size,
    ) && a.flood_guard == b.flood_guard
        && a.epoch == b.epoch
}

/// Removes the entries of VIPs and backend slots no longer in use.
fn remove_stale(maps: &mut Maps, old: &State, new: &State, used: &IndexSet) -> Result<()> {
    let live_exact: HashSet<VipKey> = new.vips.iter().filter_map(exact_key).collect();
    let live_ranges: HashSet<(u32, RangeData)> = new
        .vips
        .iter()
        .flat_map(range_keys)
        .map(|k| (k.prefix_len(), k.data()))
        .collect();
    let live_ids: HashSet<u32> = new.vips.iter().map(|v| v.vip_id).collect();
    for v in &old.vips {
        if let Some(k) = exact_key(v).filter(|k| !live_exact.contains(k)) {
            let _ = maps.vips.remove(&k);
        }
        if !live_ids.contains(&v.vip_id) {
            maps.vip_by_id
                .set(v.vip_id, VipById::default(), 0)
                .context("clearing VIP_BY_ID")?;
        }
        for k in range_keys(v) {
            if !live_ranges.contains(&(k.prefix_len(), k.data())) {
                let _ = maps.ranges.remove(&k);
            }
        }
        // Slots no longer used: inactive, so their flows re-hash.
        for b in &v.backends {
            if !used.contains(b.slot) {
                maps.backends.set(b.slot, BackendSlot::default(), 0)?;
            }
        }
    }
    Ok(())
}

/// VIP addresses that need a second lookup (Port Range, ANY-L3) and which ones.
fn roles(state: &State) -> HashMap<IpAddr, u32> {
    let mut out: HashMap<IpAddr, u32> = HashMap::new();
    for v in &state.vips {
        let role = if v.proto == PROTO_ANY {
            ADDR_VIP_ANY
        } else if v.ports.0 != v.ports.1 {
            ADDR_VIP_RANGE
        } else {
            continue;
        };
        *out.entry(v.address).or_default() |= role;
    }
    out
}

fn write_addrs(maps: &mut Maps, old: &State, new: &State) -> Result<()> {
    let wanted = roles(new);
    for (addr, role) in &wanted {
        maps.addrs
            .insert(addr_key(*addr), role, 0)
            .context("writing ADDRS")?;
    }
    for addr in roles(old).keys() {
        if !wanted.contains_key(addr) {
            let _ = maps.addrs.remove(&addr_key(*addr));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No rule of docs/behaviour.md covers the map layout. The maps hold addresses as the
    /// packet carries them: the frame's bytes in order, IPv4 in the first word, each key
    /// marked with its family.
    #[test]
    fn addresses_are_stored_in_wire_order_with_their_family() {
        let (v4, f4) = Addr::from_ip("10.1.2.3".parse().expect("ip"));
        assert_eq!(f4, lb_common::FAMILY_V4);
        assert_eq!(v4.words()[0].to_ne_bytes(), [10, 1, 2, 3]);
        assert_eq!(v4.octets[4..], [0; 12]);
        let (v6, f6) = Addr::from_ip("2001:db8::a:1".parse().expect("ip"));
        assert_eq!(f6, lb_common::FAMILY_V6);
        assert_eq!(
            v6.octets,
            [
                0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a, 0, 0x01
            ]
        );
        // An IPv6 address ending in 96 zero bits never shares a key with an IPv4 one.
        let a = addr_key("32.1.13.184".parse().expect("ip"));
        let b = addr_key("2001:db8::".parse().expect("ip"));
        assert_eq!(a.addr, b.addr);
        assert_ne!(a, b);
    }
}
