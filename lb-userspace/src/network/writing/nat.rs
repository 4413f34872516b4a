//! `NAT_BACKENDS`: for every NAT backend address and port, the VIPs whose flows it serves
//! (with the protocol of each). The data path finds most replies by their client endpoint,
//! and a flow kept beside another flow of that endpoint by its reply's key; these entries
//! find the rest (such a flow that moved to another backend since), and tell which VIPs'
//! replies Maglev finds when the flood guard leaves flows unrecorded. A server running
//! several services, each on its own port, names each service's VIPs under its own entry.
//!
//! Entries are written before the slots and VIPs that send flows to a backend (a reply of
//! the first flow already finds its VIP) and removed after them. A VIP named in the entries
//! stays named for the backends it keeps, even when a change (a backend shared by too many
//! VIPs, a Port Range onto one port) leaves it untraced for the others: the flows it has
//! there may only be found through these entries.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use anyhow::{Context, Result};
use lb_common::{Addr, MAX_NAT_TARGETS, NatBackendKey, NatTarget, NatTargets, PROTO_ANY};

use crate::network::writing::maps::Maps;
use crate::network::writing::state::{State, VipState};

/// What `NAT_BACKENDS` holds for one written state.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct NatBackends {
    /// Digest of what `plan` read of the state (`inputs_of`); `None` when read from the map.
    inputs: Option<u64>,
    entries: HashMap<NatBackendKey, NatTargets>,
    /// Ids of the NAT VIPs left out (untraced): their replies are found by client
    /// endpoint or reply key only.
    untraced: HashSet<u32>,
    /// Ids of the NAT VIPs whose replies are found by Maglev when their flows are not
    /// recorded: only these may leave new flows unrecorded under a flood.
    guarded: HashSet<u32>,
}

/// What a reply of VIP `v` from a backend with `port` (host order, 0: keeps the client's)
/// tells: `Some((backend port, VIP port))`, 0 meaning "any" and "the
/// reply's source port"; `None` when a reply cannot tell the VIP's port.
fn ports_of(v: &VipState, port: u16) -> Option<(u16, u16)> {
    if v.proto == PROTO_ANY {
        // Every protocol and port kept as the client sent them.
        return Some((0, 0));
    }
    let (first, last) = v.ports;
    match (first == last, port) {
        (true, 0) => Some((first, first)),
        (true, p) => Some((p, first)),
        // A Port Range whose backends keep the client's port: the reply's port is the VIP's.
        (false, 0) => Some((0, 0)),
        // A Port Range onto one backend port: the reply cannot tell which port was used.
        (false, _) => None,
    }
}

/// The key replies from `addr` and `port` (0: any port) are looked up by.
fn nat_key(addr: std::net::IpAddr, port: u16) -> NatBackendKey {
    let (addr, family) = Addr::from_ip(addr);
    NatBackendKey {
        addr,
        port,
        family,
        pad: 0,
    }
}

/// The targets a reply of `v` can be traced by, one per backend address and port; true
/// when some backend's replies cannot name the VIP.
fn targets_of(v: &VipState) -> (Vec<(NatBackendKey, NatTarget)>, bool) {
    let (vip_addr, _) = Addr::from_ip(v.address);
    let mut targets = Vec::new();
    let mut untraceable = false;
    for b in &v.backends {
        let Some((backend_port, vip_port)) = ports_of(v, b.port) else {
            untraceable = true;
            continue;
        };
        let target = NatTarget {
            vip_addr,
            vip_port,
            backend_port,
            vip_id: v.vip_id,
            proto: v.proto,
            pad: [0; 3],
            // Filled in by `plan` for the VIPs the flood guard may leave unrecorded.
            table_size: 0,
        };
        let key = nat_key(b.address, backend_port);
        if !targets.contains(&(key, target)) {
            targets.push((key, target));
        }
    }
    (targets, untraceable)
}

/// A NAT VIP, the targets its replies are traced by, and whether some cannot be.
type Wanted<'a> = (&'a VipState, Vec<(NatBackendKey, NatTarget)>, bool);

/// The NAT VIPs whose unrecorded flows' replies Maglev finds without doubt: TCP VIPs of
/// one port (a reply names its backend port), traced under every backend, and whose every
/// backend address and port answers for no other VIP, of that port or of any port (else a
/// reply could be another VIP's flow). UDP VIPs always record their flows: a backend's own
/// datagrams from its service port (a resolver's queries from port 53) would pass for
/// replies.
fn guarded(
    wanted: &[Wanted],
    out: &HashMap<NatBackendKey, NatTargets>,
    untraced: &HashSet<u32>,
) -> HashSet<u32> {
    // An entry of a backend port lists the VIPs served from any port too (see `expand`).
    let alone = |k: &NatBackendKey, t: &NatTarget| {
        out.get(k).is_some_and(|entry| {
            entry.targets[..entry.len as usize].iter().all(|o| {
                o.vip_id == t.vip_id
                    || !(o.proto == t.proto || o.proto == PROTO_ANY)
                    || (o.backend_port != 0 && o.backend_port != t.backend_port)
            })
        })
    };
    wanted
        .iter()
        .filter(|(v, targets, _)| {
            v.proto == TCP
                && v.ports.0 == v.ports.1
                && !untraced.contains(&v.vip_id)
                && !targets.is_empty()
                && targets.iter().all(|(k, t)| alone(k, t))
        })
        .map(|(v, _, _)| v.vip_id)
        .collect()
}

/// A digest of everything `NatBackends::plan` reads of `state`: each VIP's id, address,
/// protocol, ports, mode and table size, and its backends' addresses and ports (active or
/// not: a failed backend keeps its targets).
fn inputs_of(state: &State) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    for v in &state.vips {
        (v.vip_id, v.address, v.proto, v.ports, v.dsr, v.table_size).hash(&mut h);
        v.backends.len().hash(&mut h);
        for b in &v.backends {
            (b.address, b.port).hash(&mut h);
        }
    }
    h.finish()
}

/// IP protocol number of TCP.
const TCP: u8 = 6;

/// The targets placed so far, each under its own key: a backend port, or port 0 for the
/// VIPs served from any port. The data path reads one entry per reply, so the entry of a
/// port will also list the address's any-port targets (`expand`): a port's own targets and
/// its address's any-port ones must fit in one entry together.
#[derive(Default)]
struct Placed {
    entries: HashMap<NatBackendKey, NatTargets>,
    /// Per address (port 0 in the key): the most targets any of its ports has of its own.
    peak: HashMap<NatBackendKey, usize>,
}

impl Placed {
    fn len(&self, k: &NatBackendKey) -> usize {
        self.entries.get(k).map_or(0, |t| t.len as usize)
    }

    fn place(&mut self, k: NatBackendKey, target: NatTarget) {
        let t = self.entries.entry(k).or_default();
        t.targets[t.len as usize] = target;
        t.len += 1;
        let len = t.len as usize;
        if k.port != 0 {
            let peak = self.peak.entry(NatBackendKey { port: 0, ..k }).or_default();
            *peak = (*peak).max(len);
        }
    }

    /// Whether `new` (one VIP's targets) fits beside what is placed: under every address
    /// it touches, its any-port targets and the targets of its busiest port.
    fn fits(&self, new: &[&(NatBackendKey, NatTarget)]) -> bool {
        let mut lens: HashMap<NatBackendKey, usize> = HashMap::new();
        for (k, _) in new {
            *lens.entry(*k).or_insert_with(|| self.len(k)) += 1;
        }
        // Per address touched (port 0 in the key): its busiest port, placed or new.
        let mut busiest: HashMap<NatBackendKey, usize> = HashMap::new();
        for (k, n) in &lens {
            let any = NatBackendKey { port: 0, ..*k };
            let most = busiest
                .entry(any)
                .or_insert_with(|| self.peak.get(&any).copied().unwrap_or(0));
            if k.port != 0 {
                *most = (*most).max(*n);
            }
        }
        busiest.iter().all(|(any, most)| {
            let any_len = lens.get(any).copied().unwrap_or_else(|| self.len(any));
            any_len + most <= MAX_NAT_TARGETS
        })
    }

    /// The entries as the map holds them: each port's own targets, then its address's
    /// any-port ones; the any-port entry as it is, for replies from other ports.
    fn expand(self) -> HashMap<NatBackendKey, NatTargets> {
        let mut out = self.entries.clone();
        for (k, t) in out.iter_mut().filter(|(k, _)| k.port != 0) {
            if let Some(any) = self.entries.get(&NatBackendKey { port: 0, ..*k }) {
                for target in &any.targets[..any.len as usize] {
                    t.targets[t.len as usize] = *target;
                    t.len += 1;
                }
            }
        }
        out
    }
}

impl NatBackends {
    /// The entries of `state`'s NAT VIPs, given what `old` (the entries in the map, when
    /// known) holds. Every target of `old` the state still has is kept first, so a VIP
    /// never loses the replies of the flows it has. A VIP that cannot be traced under every
    /// backend (its replies do not tell its port, or a backend address and port would name
    /// more than `MAX_NAT_TARGETS`) is named in `untraced`, and it gains no target (it
    /// keeps the ones it had).
    ///
    /// A state whose VIPs and backend addresses and ports are those `old` was planned for
    /// (a backend failing or returning, a weight or a name changing) keeps `old` as it is:
    /// planned again it would name the same targets, and at 1,000 VIPs x 100 backends the
    /// planning took about a third of the time to the tables' swap.
    pub fn plan(state: &State, old: Option<&NatBackends>) -> NatBackends {
        let inputs = inputs_of(state);
        if let Some(old) = old.filter(|o| o.inputs == Some(inputs)) {
            return old.clone();
        }
        let wanted: Vec<_> = state
            .vips
            .iter()
            .filter(|v| !v.dsr)
            .map(|v| {
                let (targets, untraceable) = targets_of(v);
                (v, targets, untraceable)
            })
            .collect();
        let sizes: HashMap<u32, u32> = state
            .vips
            .iter()
            .map(|v| (v.vip_id, v.table_size))
            .collect();
        let mut placed = Placed::default();
        // Kept targets first: they fitted in `old`'s entries, which listed each port's
        // targets with its address's any-port ones. A target
        // whose VIP's table changed size is the same target (rewritten with the new size).
        let same = |a: &NatTarget, b: &NatTarget| {
            NatTarget {
                table_size: 0,
                ..*a
            } == NatTarget {
                table_size: 0,
                ..*b
            }
        };
        let was = |k: &NatBackendKey, t: &NatTarget| {
            old.and_then(|o| o.entries.get(k))
                .is_some_and(|have| have.targets[..have.len as usize].iter().any(|h| same(h, t)))
        };
        for (_, targets, _) in &wanted {
            for (k, t) in targets.iter().filter(|(k, t)| was(k, t)) {
                placed.place(*k, *t);
            }
        }
        let mut untraced = HashSet::new();
        for (v, targets, untraceable) in &wanted {
            let new: Vec<&(NatBackendKey, NatTarget)> =
                targets.iter().filter(|(k, t)| !was(k, t)).collect();
            // Room for the rest under every backend, or none of it is added.
            if *untraceable || !placed.fits(&new) {
                untraced.insert(v.vip_id);
                continue;
            }
            for (k, target) in new {
                placed.place(*k, *target);
            }
        }
        let mut out = placed.expand();
        let guarded = guarded(&wanted, &out, &untraced);
        for t in out.values_mut() {
            for target in &mut t.targets[..t.len as usize] {
                if guarded.contains(&target.vip_id) {
                    target.table_size = sizes.get(&target.vip_id).copied().unwrap_or(0);
                }
            }
        }
        NatBackends {
            inputs: Some(inputs),
            entries: out,
            untraced,
            guarded,
        }
    }

    /// Marks the VIPs of `state` (the one planned) whose new flows the flood guard may leave
    /// unrecorded (DSR VIPs, which have no replies to find, and the NAT VIPs in `guarded`).
    pub fn mark(&self, state: &mut State) {
        for v in &mut state.vips {
            v.flood_guard = v.dsr || self.guarded.contains(&v.vip_id);
        }
    }

    /// Writes the entries that are new or changed since `old` (all of them when what the
    /// map holds is not known).
    pub fn write(&self, maps: &mut Maps, old: Option<&NatBackends>) -> Result<()> {
        for (k, t) in &self.entries {
            if old.is_some_and(|o| o.entries.get(k) == Some(t)) {
                continue;
            }
            maps.nat_backends
                .insert(k, t, 0)
                .context("writing NAT_BACKENDS")?;
        }
        Ok(())
    }

    /// Removes the entries of `old` this one no longer has.
    pub fn remove_stale(&self, maps: &mut Maps, old: &NatBackends) {
        for k in old.entries.keys().filter(|k| !self.entries.contains_key(k)) {
            let _ = maps.nat_backends.remove(k);
        }
    }

    /// What the map holds now (after a restart, or a write that failed half-way): the
    /// entries to keep and to diff against.
    pub fn read(maps: &Maps) -> Result<NatBackends> {
        let mut entries = HashMap::new();
        for entry in maps.nat_backends.iter() {
            let (k, t) = entry.context("reading NAT_BACKENDS")?;
            entries.insert(k, t);
        }
        Ok(NatBackends {
            inputs: None,
            entries,
            untraced: HashSet::new(),
            guarded: HashSet::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::writing::state::test_vip;

    fn vip(id: u32, proto: u8, ports: (u16, u16), dsr: bool, backends: &[(&str, u16)]) -> VipState {
        test_vip(id, &format!("198.18.0.{id}"), (proto, ports, dsr), backends)
    }

    /// The plan of `vips` from an empty map, and the state it marked.
    fn planned(vips: Vec<VipState>) -> (NatBackends, State) {
        let mut state = State {
            vips,
            next_slot: 0,
            next_epoch: 0,
        };
        let nat = NatBackends::plan(&state, None);
        nat.mark(&mut state);
        (nat, state)
    }

    fn key(addr: &str, port: u16) -> NatBackendKey {
        nat_key(addr.parse().expect("ip"), port)
    }

    /// So that a new NAT flow costs one insert, each NAT backend names the VIPs it serves
    /// and the port a reply tells; DSR backends are not there.
    #[test]
    fn backends_name_their_vips_and_ports() {
        let mut state = State {
            vips: vec![
                vip(
                    1,
                    6,
                    (80, 80),
                    false,
                    &[("10.2.0.1", 8080), ("10.2.0.2", 0)],
                ),
                vip(2, 6, (443, 443), true, &[("10.2.0.1", 0)]),
                vip(3, 17, (5000, 5100), false, &[("10.2.0.3", 0)]),
                vip(4, 0, (0, 0), false, &[("10.2.0.4", 0)]),
            ],
            next_slot: 0,
            next_epoch: 0,
        };
        let planned = NatBackends::plan(&state, None);
        planned.mark(&mut state);
        assert!(untraced_ids(&state, &planned).is_empty());
        let nat = planned.entries;
        assert_eq!(nat.len(), 4);
        let t = nat[&key("10.2.0.1", 8080)];
        assert_eq!((t.len, t.targets[0].vip_id), (1, 1));
        assert_eq!(t.targets[0].vip_port, 80);
        assert_eq!(t.targets[0].backend_port, 8080);
        assert_eq!(t.targets[0].proto, 6);
        let t = nat[&key("10.2.0.2", 80)].targets[0];
        assert_eq!((t.backend_port, t.vip_port), (80, 80));
        // Port Range keeping the client's port, and ANY-L3: the reply's port is the VIP's.
        let t = nat[&key("10.2.0.3", 0)].targets[0];
        assert_eq!((t.backend_port, t.vip_port, t.proto), (0, 0, 17));
        let t = nat[&key("10.2.0.4", 0)].targets[0];
        assert_eq!((t.vip_id, t.proto), (4, PROTO_ANY));
    }

    /// VIPs whose replies cannot name them are left untraced: a Port Range onto
    /// one backend port, and the fifth VIP sharing one backend address.
    #[test]
    fn untraceable_vips_are_left_out() {
        let mut vips = vec![vip(1, 6, (8000, 8100), false, &[("10.2.0.1", 80)])];
        for id in 2..=6 {
            vips.push(vip(id, 6, (80, 80), false, &[("10.2.0.9", 8080)]));
        }
        let (nat, state) = planned(vips);
        assert_eq!(untraced_ids(&state, &nat), vec![1, 6]);
        let nat = nat.entries;
        assert_eq!(nat[&key("10.2.0.9", 8080)].len, MAX_NAT_TARGETS as u32);
        assert!(!nat.contains_key(&key("10.2.0.1", 80)));
    }

    /// A server running a service per port serves any number of traced NAT
    /// VIPs: each port names its own VIPs.
    #[test]
    fn a_port_per_vip_traces_every_vip() {
        let vips = (1..=20)
            .map(|id| vip(id, 6, (80, 80), false, &[("10.2.0.9", 8000 + id as u16)]))
            .collect();
        let (nat, state) = planned(vips);
        assert!(untraced_ids(&state, &nat).is_empty());
        assert_eq!(nat.entries.len(), 20);
        assert_eq!(vip_ids(&nat, "10.2.0.9", 8007), vec![7]);
    }

    /// A reply reads one entry, so a port's entry also lists the VIPs its
    /// address serves from any port (ANY-L3), and both must fit in it together: the VIP
    /// that would overfill it is left untraced.
    #[test]
    fn a_port_lists_the_vips_its_address_serves_from_any_port() {
        let mut vips: Vec<VipState> = (1..=3)
            .map(|id| {
                vip(
                    id,
                    6,
                    (80 + id as u16, 80 + id as u16),
                    false,
                    &[("10.2.0.9", 8080)],
                )
            })
            .collect();
        vips.push(vip(4, 6, (90, 90), false, &[("10.2.0.9", 9090)]));
        vips.push(vip(5, 0, (0, 0), false, &[("10.2.0.9", 0)]));
        vips.push(vip(6, 0, (0, 0), false, &[("10.2.0.9", 0)]));
        let (nat, _) = planned(vips);
        assert_eq!(nat.untraced, HashSet::from([6]));
        assert_eq!(vip_ids(&nat, "10.2.0.9", 8080), vec![1, 2, 3, 5]);
        assert_eq!(vip_ids(&nat, "10.2.0.9", 9090), vec![4, 5]);
        assert_eq!(vip_ids(&nat, "10.2.0.9", 0), vec![5]);
    }

    /// The ids of `state`'s VIPs that `nat` left untraced, in state order.
    fn untraced_ids(state: &State, nat: &NatBackends) -> Vec<u32> {
        state
            .vips
            .iter()
            .map(|v| v.vip_id)
            .filter(|id| nat.untraced.contains(id))
            .collect()
    }

    fn vip_ids(nat: &NatBackends, k: &str, port: u16) -> Vec<u32> {
        let t = nat.entries[&key(k, port)];
        t.targets[..t.len as usize]
            .iter()
            .map(|t| t.vip_id)
            .collect()
    }

    /// A traced VIP that gains a backend already shared by four VIPs is left
    /// untraced from then on, but keeps its targets under the backends it had: the
    /// replies of its flows there are still found.
    #[test]
    fn a_vip_keeps_its_targets_when_it_is_left_untraced() {
        let mut vips = vec![vip(1, 6, (80, 80), false, &[("10.2.0.1", 8080)])];
        for id in 2..=5 {
            vips.push(vip(id, 6, (80, 80), false, &[("10.2.0.9", 8080)]));
        }
        let state = State {
            vips,
            next_slot: 0,
            next_epoch: 0,
        };
        let before = NatBackends::plan(&state, None);
        assert!(before.untraced.is_empty());
        let mut changed = state;
        changed.vips[0] = vip(
            1,
            6,
            (80, 80),
            false,
            &[("10.2.0.1", 8080), ("10.2.0.9", 8080)],
        );
        let after = NatBackends::plan(&changed, Some(&before));
        assert_eq!(after.untraced, HashSet::from([1]));
        assert_eq!(vip_ids(&after, "10.2.0.1", 8080), vec![1]);
        assert_eq!(vip_ids(&after, "10.2.0.9", 8080), vec![2, 3, 4, 5]);
    }

    /// A new VIP placed before the others (a lower id) never takes the place of
    /// one already traced under a shared backend.
    #[test]
    fn a_new_vip_never_pushes_out_a_traced_one() {
        let vips: Vec<VipState> = (2..=5)
            .map(|id| vip(id, 6, (80, 80), false, &[("10.2.0.9", 8080)]))
            .collect();
        let state = State {
            vips,
            next_slot: 0,
            next_epoch: 0,
        };
        let before = NatBackends::plan(&state, None);
        let mut grown = state;
        grown
            .vips
            .insert(0, vip(1, 6, (80, 80), false, &[("10.2.0.9", 8080)]));
        let after = NatBackends::plan(&grown, Some(&before));
        assert_eq!(after.untraced, HashSet::from([1]));
        assert_eq!(vip_ids(&after, "10.2.0.9", 8080), vec![2, 3, 4, 5]);
        // Without what the map held, the same state plans in list order.
        let fresh = NatBackends::plan(&grown, None);
        assert_eq!(fresh.untraced, HashSet::from([5]));
    }

    /// Flood guard: only NAT TCP VIPs whose replies name them alone may leave
    /// flows unrecorded, and their targets carry the table size the reply path hashes
    /// with; DSR VIPs always may; UDP VIPs and VIPs sharing a backend with an ANY-L3 VIP
    /// never do.
    #[test]
    fn the_flood_guard_takes_only_vips_whose_replies_name_them() {
        let mut state = State {
            vips: vec![
                vip(
                    1,
                    6,
                    (80, 80),
                    false,
                    &[("10.2.0.1", 8080), ("10.2.0.2", 0)],
                ),
                vip(2, 6, (443, 443), true, &[("10.2.0.1", 0)]),
                vip(3, 17, (53, 53), false, &[("10.2.0.3", 53)]),
                vip(4, 6, (81, 81), false, &[("10.2.0.4", 81)]),
                vip(5, 0, (0, 0), false, &[("10.2.0.4", 0)]),
                vip(6, 6, (82, 82), false, &[("10.2.0.1", 8081)]),
            ],
            next_slot: 0,
            next_epoch: 0,
        };
        for v in &mut state.vips {
            v.table_size = 251;
        }
        let nat = NatBackends::plan(&state, None);
        nat.mark(&mut state);
        let guarded: Vec<(u32, bool)> = state
            .vips
            .iter()
            .map(|v| (v.vip_id, v.flood_guard))
            .collect();
        assert_eq!(
            guarded,
            [
                (1, true),
                (2, true),
                (3, false),
                (4, false),
                (5, false),
                (6, true)
            ]
        );
        let sizes = |addr: &str, port: u16| -> Vec<(u32, u32)> {
            let t = nat.entries[&key(addr, port)];
            t.targets[..t.len as usize]
                .iter()
                .map(|t| (t.vip_id, t.table_size))
                .collect()
        };
        assert_eq!(sizes("10.2.0.1", 8080), [(1, 251)]);
        assert_eq!(sizes("10.2.0.1", 8081), [(6, 251)]);
        assert_eq!(sizes("10.2.0.3", 53), [(3, 0)]);
        assert_eq!(sizes("10.2.0.4", 81), [(4, 0), (5, 0)]);
        assert_eq!(sizes("10.2.0.4", 0), [(5, 0)]);
    }

    /// So that a backend of 1,000 VIPs failing is swapped in within 100 ms, a state whose
    /// backends only changed health keeps the plan as it was, without planning again; one
    /// whose backend moved to another port is planned again.
    #[test]
    fn a_failed_backend_keeps_the_plan_and_a_moved_one_changes_it() {
        let vips = (1..=6)
            .map(|id| {
                vip(
                    id,
                    6,
                    (80, 80),
                    false,
                    &[("10.2.0.1", 8080), ("10.2.0.9", 8080)],
                )
            })
            .collect();
        let mut state = State {
            vips,
            next_slot: 0,
            next_epoch: 0,
        };
        let before = NatBackends::plan(&state, None);
        for v in &mut state.vips {
            v.backends[0].active = false;
        }
        let failed = NatBackends::plan(&state, Some(&before));
        assert_eq!(failed, before);
        assert_eq!(failed.entries, NatBackends::plan(&state, None).entries);
        state.vips[0].backends[0].port = 9090;
        let moved = NatBackends::plan(&state, Some(&before));
        assert_ne!(moved.inputs, before.inputs);
        assert_eq!(vip_ids(&moved, "10.2.0.1", 9090), vec![1]);
    }
}
