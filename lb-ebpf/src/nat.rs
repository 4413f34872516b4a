//! Which NAT flow a packet from a backend belongs to, without an entry per flow: the
//! backend's address and port name the VIPs it serves, with the protocol of each
//! (`NAT_BACKENDS`, written by userspace), and the connection table holds the flow
//! client -> VIP pinned to it. So a
//! new NAT flow costs one table insert, as a DSR one does (none when the flood guard
//! leaves it unrecorded: its reply finds the backend by Maglev, as its packets do). VIPs
//! whose replies do not tell their port keep a reverse entry per flow (`NAT_REV`).

use lb_common::{
    Addr, FlowKey, MAX_NAT_TARGETS, NatBackendKey, NatReverse, NatTarget, NatTargets, PROTO_ANY,
};

use crate::flood;
use crate::flow::maglev_slot;
use crate::maps::{BACKENDS, CONNS, NAT_BACKENDS, NAT_REV};

/// How a reply's flow was found.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Not a NAT flow of ours.
    No,
    /// Recorded in the connection table (or a reverse entry).
    Recorded,
    /// Unrecorded (flood guard): where Maglev sends the flow is this backend. A packet the
    /// backend sends to the balancer itself (a health check's answer) looks the same: the
    /// caller forwards only to a next hop the FIB gives.
    ByMaglev,
}

/// The flow of a packet `reply` (backend:bport -> client:cport), if it is a NAT flow of
/// ours: written to `out`. Recorded flows first (the VIPs the backend serves from the
/// reply's port, which userspace lists with those it serves from any port; else those
/// alone), then, while the flood guard may leave flows unrecorded, where Maglev sends them.
#[inline(always)]
pub fn reverse(reply: &FlowKey, out: &mut NatReverse) -> Found {
    let mut key = NatBackendKey {
        addr: reply.src,
        port: reply.sport,
        family: reply.family,
        pad: 0,
    };
    let mut targets = unsafe { NAT_BACKENDS.get(&key) };
    if targets.is_none() && key.port != 0 {
        key.port = 0;
        targets = unsafe { NAT_BACKENDS.get(&key) };
    }
    if let Some(targets) = targets {
        if recorded(reply, targets, out) {
            return Found::Recorded;
        }
        if flood::guarding() && by_maglev(reply, targets, out) {
            return Found::ByMaglev;
        }
    }
    match unsafe { NAT_REV.get(reply) } {
        Some(rev) => {
            *out = *rev;
            Found::Recorded
        }
        None => Found::No,
    }
}

/// The flow of `reply` in the connection table, among the VIPs its backend serves: true,
/// with `out` written, when one is pinned to this very backend.
#[inline(always)]
fn recorded(reply: &FlowKey, targets: &NatTargets, out: &mut NatReverse) -> bool {
    let mut i = 0;
    while i < MAX_NAT_TARGETS {
        if i as u32 >= targets.len {
            break;
        }
        let t = &targets.targets[i];
        i += 1;
        if !answers(t, reply) {
            continue;
        }
        let flow = flow_of(t, reply);
        if let Some(v) = unsafe { CONNS.get(&flow) } {
            if v.vip_id == t.vip_id && pinned_here(v.slot, t, reply, out) {
                return true;
            }
        }
    }
    false
}

/// The flow of `reply` where Maglev sends it, for an unrecorded flow: only VIPs whose
/// targets carry their table size, and of those one at most answers for a backend address
/// and port (userspace makes sure), so one table lookup.
#[inline(always)]
fn by_maglev(reply: &FlowKey, targets: &NatTargets, out: &mut NatReverse) -> bool {
    let mut pick = MAX_NAT_TARGETS;
    let mut i = 0;
    while i < MAX_NAT_TARGETS {
        if i as u32 >= targets.len {
            break;
        }
        let t = &targets.targets[i];
        if t.table_size != 0 && answers(t, reply) {
            pick = i;
            break;
        }
        i += 1;
    }
    if pick >= MAX_NAT_TARGETS {
        return false;
    }
    let t = &targets.targets[pick];
    let flow = flow_of(t, reply);
    match maglev_slot(&flow, t.vip_id, t.table_size) {
        Some(slot) => pinned_here(slot, t, reply, out),
        None => false,
    }
}

/// Whether replies of the target's VIP may come from the reply's protocol and port.
#[inline(always)]
fn answers(t: &NatTarget, reply: &FlowKey) -> bool {
    (t.proto == PROTO_ANY || t.proto == reply.proto)
        && (t.backend_port == 0 || t.backend_port == reply.sport)
}

/// The reply's flow client -> VIP of the target.
#[inline(always)]
fn flow_of(t: &NatTarget, reply: &FlowKey) -> FlowKey {
    FlowKey {
        src: reply.dst,
        dst: t.vip_addr,
        sport: reply.dport,
        dport: vip_port(t, reply),
        proto: reply.proto,
        family: reply.family,
        pad: 0,
    }
}

#[inline(always)]
fn vip_port(t: &NatTarget, reply: &FlowKey) -> u16 {
    if t.vip_port == 0 {
        reply.sport
    } else {
        t.vip_port
    }
}

/// Whether `slot` is of the target's VIP and names the reply's very backend (a flow that
/// moved elsewhere is not this packet's): then `out` is written.
#[inline(always)]
fn pinned_here(slot: u32, t: &NatTarget, reply: &FlowKey, out: &mut NatReverse) -> bool {
    let Some(b) = BACKENDS.get(slot) else {
        return false;
    };
    if b.vip_id == t.vip_id
        && b.addr.words() == reply.src.words()
        && (b.port == reply.sport || b.port == 0)
    {
        *out = NatReverse {
            vip_addr: t.vip_addr,
            vip_port: vip_port(t, reply),
            pad: 0,
            vip_id: t.vip_id,
            slot,
        };
        return true;
    }
    false
}

/// The key of the reverse entry of the flow `key` sent to `addr`:`port` (0: the flow's own
/// destination port), as the backend's replies carry it.
#[inline(always)]
pub fn reverse_key(key: &FlowKey, addr: &[u32; 4], port: u16) -> FlowKey {
    FlowKey {
        src: Addr::from_words(addr),
        dst: key.src,
        sport: if port == 0 { key.dport } else { port },
        dport: key.sport,
        proto: key.proto,
        family: key.family,
        pad: 0,
    }
}
