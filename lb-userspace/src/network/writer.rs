//! Writes a plan into the maps without ever showing a packet a half-written VIP.
//!
//! Order: backend slots and Maglev tables first (a new table is a new inner map swapped
//! in with one update), then VIP entries, then address roles; stale entries last. Slot
//! and VIP ids are kept stable across runs and restarts (flows point at slots).

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::os::fd::AsFd;

use anyhow::{Context, Result, bail};
use aya::maps::lpm_trie::Key;
use lb_common::{
    ADDR_VIP_ANY, ADDR_VIP_RANGE, AddrKey, BackendSlot, FAMILY_V4, FAMILY_V6, MAX_BACKEND_SLOTS,
    MAX_VIPS, PROTO_ANY, RANGE_PREFIX_BASE, RangeData, SLOT_F_ACTIVE, VIP_F_DSR,
    VIP_F_REVERSE_ENTRY, VipKey, VipMeta,
};

use super::batch;
use super::filter::Filter;
use super::loader::DataPath;
use super::maglev::{self, MaglevBackend};
use super::maps::Maps;
use super::nat::NatBackends;
use super::plan::{VipPlan, plan, range_prefixes};
use super::state::{SlotState, State, VipState};
use crate::config::{Config, FastMap};
use crate::selection::Health;

/// An address in the maps' 16-byte form (network byte order; IPv4 in word 0) and its
/// family marker.
pub(crate) fn addr_words(a: IpAddr) -> ([u32; 4], u8) {
    match a {
        IpAddr::V4(a) => ([u32::from_ne_bytes(a.octets()), 0, 0, 0], FAMILY_V4),
        IpAddr::V6(a) => {
            let o = a.octets();
            let word = |i: usize| u32::from_ne_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
            ([word(0), word(4), word(8), word(12)], FAMILY_V6)
        }
    }
}

fn addr_key(a: IpAddr) -> AddrKey {
    let (addr, family) = addr_words(a);
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
    apply_plan(dp, &plan(cfg, &health)?)
}

/// Writes `vips` into the maps, replacing whatever was written before.
pub fn apply_plan(dp: &mut DataPath, vips: &[VipPlan]) -> Result<()> {
    let old = &dp.state;
    let mut new = State {
        vips: Vec::new(),
        next_slot: old.next_slot,
    };
    let ids = assign_vip_ids(old, vips)?;
    // What this process wrote itself is known to be in the maps; the state of another
    // process (adopted) may lag behind them if it died mid-write, so its slots are
    // written again once.
    let trust_old = dp.written;
    let mut used_slots = SlotSet::new();
    // Slots that keep their owner (same VIP id, address and port), with their active flag
    // as written: a slot whose flag is unchanged is not written again.
    let mut keep: FastMap<(u32, IpAddr, u16), (u32, bool)> = FastMap::default();
    // Slots that existing backends may keep: a new backend takes one of these only when
    // nothing else is free. Built once, not per allocation.
    let mut kept = SlotSet::new();
    for v in &old.vips {
        for b in &v.backends {
            keep.insert((v.vip_id, b.address, b.port), (b.slot, b.active));
            kept.insert(b.slot);
        }
    }
    let mut keys = KeyCache::default();
    let mut previous_states = Vec::with_capacity(vips.len());
    let mut slot_writes = Vec::new();
    let mut resets = Vec::new();
    // The previous state of each VIP id, so 1,000 VIPs are not 1,000 x 1,000 scans.
    let old_by_id: HashMap<u32, &VipState> = old.vips.iter().map(|o| (o.vip_id, o)).collect();
    for (vip, &vip_id) in vips.iter().zip(&ids) {
        let previous = old_by_id.get(&vip_id).copied();
        let fresh_vip = previous.is_none_or(|o| o.name != vip.name);
        if fresh_vip {
            Maps::reset_counters(&mut dp.maps.vip_stats, vip_id)?;
        }
        let mut slots = Vec::new();
        for b in &vip.backends {
            let (slot, unchanged) = match keep.get(&(vip_id, b.address, b.port)) {
                Some(&(s, active)) if !used_slots.contains(s) => {
                    (s, trust_old && active == b.active)
                }
                _ => {
                    let s = allocate_slot(&mut new.next_slot, &used_slots, &kept)?;
                    resets.push(s);
                    (s, false)
                }
            };
            used_slots.insert(slot);
            if !unchanged {
                let (addr, family) = addr_words(b.address);
                let entry = BackendSlot {
                    addr,
                    port: b.port.to_be(),
                    flags: if b.active { SLOT_F_ACTIVE } else { 0 },
                    family,
                    vip_id,
                };
                slot_writes.push((slot, entry));
            }
            let state = SlotState {
                name: b.name.clone(),
                slot,
                address: b.address,
                port: b.port,
                weight: b.weight,
                active: b.active,
            };
            keys.add(&state);
            slots.push(state);
        }
        previous_states.push(previous);
        new.vips.push(VipState {
            name: vip.name.clone(),
            vip_id,
            address: vip.address,
            proto: vip.proto,
            ports: vip.ports,
            dsr: vip.dsr,
            table_size: 0,
            table_hash: 0,
            table_digest: 0,
            reverse_entries: false,
            backends: slots,
        });
    }
    // New tables, filled but not yet in MAGLEV: swapped in together, once the slots they
    // name are written (also in one batch each).
    let mut tables = Vec::new();
    let built = build_tables(vips, &new.vips, &previous_states, &keys)?;
    for (state, (table_size, table_hash, table_digest, table)) in new.vips.iter_mut().zip(built) {
        state.table_size = table_size;
        state.table_hash = table_hash;
        state.table_digest = table_digest;
        if let Some(table) = table {
            // From one thread: map creation and mmap serialize on kernel locks anyway.
            let inner = batch::maglev_table(&table)
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
    let old_nat = NatBackends::plan(old);
    let new_nat = NatBackends::plan(&new);
    new_nat.mark(&mut new);
    new_nat.write(&mut dp.maps, trust_old.then_some(&old_nat))?;
    let maps = &mut dp.maps;
    batch::reset_counters(
        &mut maps.backend_stats,
        maps.backend_stats_fd.as_fd(),
        &resets,
    )?;
    batch::write_slots(&mut maps.backends, maps.backends_fd.as_fd(), &slot_writes)?;
    batch::swap_tables(&mut maps.maglev, maps.maglev_fd.as_fd(), &tables)
        .context("swapping in the new Maglev tables")?;
    drop(tables);
    write_vip_entries(&mut dp.maps, &new)?;
    remove_stale(&mut dp.maps, old, &new, &used_slots)?;
    write_addrs(&mut dp.maps, old, &new)?;
    new_nat.remove_stale(&mut dp.maps, &old_nat);
    new_filter.write(&mut dp.maps, Some(&grown))?;
    dp.maps.flush_nexthops()?;
    if let Some(dir) = dp.pin_dir() {
        new.write(dir)?;
    }
    dp.state = new;
    dp.written = true;
    Ok(())
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

/// A set of backend slots as one flag per slot: 100,000 lookups per apply cost nothing.
struct SlotSet(Vec<bool>);

impl SlotSet {
    fn new() -> SlotSet {
        SlotSet(vec![false; MAX_BACKEND_SLOTS as usize])
    }

    fn contains(&self, slot: u32) -> bool {
        self.0.get(slot as usize).copied().unwrap_or(false)
    }

    fn insert(&mut self, slot: u32) {
        if let Some(flag) = self.0.get_mut(slot as usize) {
            *flag = true;
        }
    }
}

/// Round-robin over the slot space, so a freed slot is reused as late as possible.
fn allocate_slot(next: &mut u32, used: &SlotSet, kept: &SlotSet) -> Result<u32> {
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

/// What building one VIP's table gave: (table size, fingerprint of the input, digest of the
/// table, the table to swap in when the input changed).
type Built = (u32, u64, u64, Option<Vec<u32>>);

/// Builds the VIP's new Maglev table when its input changed.
fn build_table(
    vip: &VipPlan,
    slots: &[SlotState],
    previous: Option<&VipState>,
    keys: &KeyCache,
) -> Built {
    let members: Vec<MaglevBackend<'_>> = slots
        .iter()
        .filter(|s| s.active)
        .map(|s| MaglevBackend {
            key: keys.key(s),
            weight: s.weight,
            value: s.slot,
        })
        .collect();
    let mut h = DefaultHasher::new();
    vip.table_size.hash(&mut h);
    for m in &members {
        (m.key, m.weight, m.value).hash(&mut h);
    }
    let fingerprint = h.finish();
    // A state from before digests is rebuilt once, so every table in use has its digest.
    if let Some(p) = previous.filter(|p| {
        p.table_hash == fingerprint
            && p.name == vip.name
            && (p.table_digest != 0 || p.table_size == 0)
    }) {
        return (p.table_size, fingerprint, p.table_digest, None);
    }
    match maglev::build(&members, vip.table_size) {
        Some(table) => {
            let digest = maglev::digest(&table, &members);
            (vip.table_size, fingerprint, digest, Some(table))
        }
        // No backend may take new flows: the VIP drops packets that have no flow.
        None => (0, fingerprint, 0, None),
    }
}

/// The Maglev keys of the backends ("address:port", the identity every balancer hashes
/// alike), each formatted once per apply however many VIPs share the backend, into one
/// buffer instead of a string per backend per VIP.
#[derive(Default)]
struct KeyCache {
    text: String,
    spans: FastMap<(IpAddr, u16), (usize, usize)>,
}

impl KeyCache {
    /// Formats the key of `slot` unless it is known already.
    fn add(&mut self, slot: &SlotState) {
        let text = &mut self.text;
        self.spans
            .entry((slot.address, slot.port))
            .or_insert_with(|| {
                use std::fmt::Write as _;
                let start = text.len();
                // Writing into a String cannot fail.
                let _ = write!(text, "{}:{}", slot.address, slot.port);
                (start, text.len())
            });
    }

    /// The key of `slot`, added before (empty if it was not, which `add` rules out).
    fn key(&self, slot: &SlotState) -> &str {
        self.spans
            .get(&(slot.address, slot.port))
            .map_or("", |&(start, end)| &self.text[start..end])
    }
}

/// Builds the new table of every VIP whose input changed, spread over the CPUs: each table
/// depends on its own VIP's slots only, and building them is most of the work of an apply
/// with large tables (100 VIPs x 1,000 backends x 65,537 entries: 0.36-0.43 s on one
/// thread, 0.26-0.27 s on two). Results are in `vips` order.
fn build_tables(
    vips: &[VipPlan],
    states: &[VipState],
    previous: &[Option<&VipState>],
    keys: &KeyCache,
) -> Result<Vec<Built>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = vips.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..vips.len())
            .step_by(chunk)
            .map(|start| {
                let end = (start + chunk).min(vips.len());
                scope.spawn(move || {
                    (start..end)
                        .map(|i| build_table(&vips[i], &states[i].backends, previous[i], keys))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut out = Vec::with_capacity(vips.len());
        for worker in workers {
            let built = worker
                .join()
                .map_err(|_| anyhow::anyhow!("building Maglev tables panicked"))?;
            out.extend(built);
        }
        Ok(out)
    })
}

fn meta(v: &VipState) -> VipMeta {
    VipMeta {
        vip_id: v.vip_id,
        flags: if v.dsr { VIP_F_DSR } else { 0 }
            | if v.reverse_entries {
                VIP_F_REVERSE_ENTRY
            } else {
                0
            },
        table_size: v.table_size,
        pad: 0,
    }
}

fn exact_key(v: &VipState) -> Option<VipKey> {
    let (addr, family) = addr_words(v.address);
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
            port: v.ports.0.to_be(),
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
            let (addr, family) = addr_words(v.address);
            let data = RangeData {
                addr,
                proto: v.proto,
                family,
                port: port.to_be(),
            };
            Key::new(RANGE_PREFIX_BASE + bits, data)
        })
        .collect()
}

fn write_vip_entries(maps: &mut Maps, new: &State) -> Result<()> {
    for v in &new.vips {
        if let Some(k) = exact_key(v) {
            maps.vips.insert(k, meta(v), 0).context("writing VIPS")?;
        }
        for k in range_keys(v) {
            maps.ranges
                .insert(&k, meta(v), 0)
                .context("writing RANGES")?;
        }
    }
    Ok(())
}

fn remove_stale(maps: &mut Maps, old: &State, new: &State, used: &SlotSet) -> Result<()> {
    let live_exact: HashSet<VipKey> = new.vips.iter().filter_map(exact_key).collect();
    let live_ranges: HashSet<(u32, RangeData)> = new
        .vips
        .iter()
        .flat_map(range_keys)
        .map(|k| (k.prefix_len(), k.data()))
        .collect();
    for v in &old.vips {
        if let Some(k) = exact_key(v).filter(|k| !live_exact.contains(k)) {
            let _ = maps.vips.remove(&k);
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

    /// No SPEC rule covers the map layout. The maps hold addresses as the packet carries
    /// them: the frame's bytes in order, IPv4 in the first word, each key marked with its
    /// family.
    #[test]
    fn addresses_are_stored_in_wire_order_with_their_family() {
        let (v4, f4) = addr_words("10.1.2.3".parse().expect("ip"));
        assert_eq!(f4, FAMILY_V4);
        assert_eq!(v4[0].to_ne_bytes(), [10, 1, 2, 3]);
        assert_eq!(&v4[1..], &[0, 0, 0]);
        let (v6, f6) = addr_words("2001:db8::a:1".parse().expect("ip"));
        assert_eq!(f6, FAMILY_V6);
        let bytes: Vec<u8> = v6.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(
            bytes,
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
