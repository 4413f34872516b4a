//! Which NAT flow a packet from a backend belongs to, without an entry per flow: the
//! connection table holds each flow by its client endpoint, which is the reply's
//! destination, and names the flow's VIP and backend. So a new NAT flow costs one table
//! insert, as a DSR one does (none when the flood guard leaves it unrecorded: its reply
//! finds the backend by Maglev, as its packets do). A flow whose client endpoint is taken
//! by another flow (`CONNS_CLASH`) is kept under its reply's key as well; one that moved to
//! another backend since is found from that backend's address and port, which name the
//! VIPs it serves (`NAT_BACKENDS`, written by userspace).

use lb_common::{
    Addr, ClientKey, FLOW_F_NAT, FLOW_KEY_REPLY, FlowKey, FlowValue, MAX_NAT_TARGETS,
    NatBackendKey, NatTarget, NatTargets, PROTO_ANY,
};

use crate::flood;
use crate::flow::maglev_slot;
use crate::maps::{BACKENDS, CONNS, CONNS_CLASH, NAT_BACKENDS};

/// What to put back into a backend's reply, and what to count it under.
#[derive(Clone, Copy, Default)]
pub struct NatReverse {
    /// VIP address, wire order (becomes the reply's source).
    pub vip_addr: Addr,
    /// VIP port (becomes the reply's source port).
    pub vip_port: u16,
    pub vip_id: u32,
    pub slot: u32,
}

impl NatReverse {
    /// The VIP side of a flow's entry.
    #[inline(always)]
    fn of(v: &FlowValue) -> NatReverse {
        NatReverse {
            vip_addr: v.vip_addr,
            vip_port: v.vip_port,
            vip_id: v.vip_id,
            slot: v.slot,
        }
    }
}

/// How a reply's flow was found.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Not a NAT flow of ours.
    No,
    /// Recorded in the connection tables (or a reverse entry).
    Recorded,
    /// Unrecorded (flood guard): where Maglev sends the flow is this backend. A packet the
    /// backend sends to the balancer itself (a health check's answer) looks the same: the
    /// caller forwards only to a next hop the FIB gives.
    ByMaglev,
}

/// The flow of a packet `reply` (backend:bport -> client:cport), if it is a NAT flow of
/// ours: written to `out`. The client endpoint's flow first, then a flow kept under the
/// reply's key (`reply` is marked as such for that lookup only), then the other recorded
/// flows (of the VIPs the backend serves from the reply's port, which userspace lists with
/// those it serves from any port; else those alone), last, while the flood guard may leave
/// flows unrecorded, where Maglev sends them.
#[inline(always)]
pub fn reverse(reply: &mut FlowKey, out: &mut NatReverse) -> Found {
    let client = ClientKey {
        addr: reply.dst,
        port: reply.dport,
        proto: reply.proto,
        family: reply.family,
    };
    if let Some(v) = unsafe { CONNS.get(&client) } {
        let port = if v.port == 0 { v.vip_port } else { v.port };
        if v.flags & FLOW_F_NAT != 0 && v.addr.words() == reply.src.words() && port == reply.sport {
            *out = NatReverse::of(v);
            return Found::Recorded;
        }
    }
    reply.dir = FLOW_KEY_REPLY;
    let kept = unsafe { CONNS_CLASH.get(&*reply) };
    reply.dir = 0;
    if let Some(v) = kept {
        *out = NatReverse::of(v);
        return Found::Recorded;
    }
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
    Found::No
}

/// The flow of `reply` in `CONNS_CLASH`, among the VIPs its backend serves: true, with
/// `out` written, when one is pinned to this very backend.
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
        if let Some(v) = unsafe { CONNS_CLASH.get(&flow) } {
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
        dir: 0,
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
            vip_id: t.vip_id,
            slot,
        };
        return true;
    }
    false
}

/// Keeps a NAT flow that `CONNS` does not hold under its reply's key as well: the reply
/// path looks there before it tries the VIPs its backend serves, so the latest flow of a
/// client endpoint to a backend address and port is the one its replies are put back to
/// (an older flow to another VIP may still be recorded), and a VIP whose replies do not
/// name it is found at all. Not inlined: the key on the stack would push the program past
/// the 512 bytes the BPF stack allows, and only clashing flows come here.
#[inline(never)]
pub fn remember(key: &FlowKey, value: &FlowValue) {
    if value.flags & FLOW_F_NAT == 0 {
        return;
    }
    let reply = FlowKey {
        src: value.addr,
        dst: key.src,
        sport: if value.port == 0 {
            key.dport
        } else {
            value.port
        },
        dport: key.sport,
        proto: key.proto,
        family: key.family,
        dir: FLOW_KEY_REPLY,
    };
    // Best effort, as the flow's own entry.
    let _ = CONNS_CLASH.insert(&reply, value, 0);
}
