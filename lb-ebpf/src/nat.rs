//! Which NAT flow a packet from a backend belongs to, without an entry per flow: the
//! backend's address names the VIPs it serves, with the port and protocol of each
//! (`NAT_BACKENDS`, written by userspace), and the connection table holds the flow
//! client -> VIP pinned to it. So a
//! new NAT flow costs one table insert, as a DSR one does (none when the flood guard
//! leaves it unrecorded: its reply finds the backend by Maglev, as its packets do). VIPs
//! whose replies do not tell their port keep a reverse entry per flow (`NAT_REV`).

use lb_common::{AddrKey, FlowKey, MAX_NAT_TARGETS, NatReverse, PROTO_ANY};

use crate::flood;
use crate::flow::maglev_slot;
use crate::maps::{BACKENDS, CONNS, NAT_BACKENDS, NAT_REV};

/// The flow of a packet `reply` (backend:bport -> client:cport), if it is a NAT flow of
/// ours: written to `out`, and true.
#[inline(always)]
pub fn reverse(reply: &FlowKey, out: &mut NatReverse) -> bool {
    let (backend, bport, client, cport, proto) = (
        &reply.src,
        reply.sport,
        &reply.dst,
        reply.dport,
        reply.proto,
    );
    let key = AddrKey {
        addr: *backend,
        family: reply.family,
        pad: [0; 3],
    };
    if let Some(targets) = unsafe { NAT_BACKENDS.get(&key) } {
        let mut i = 0;
        while i < MAX_NAT_TARGETS {
            if i as u32 >= targets.len {
                break;
            }
            let t = &targets.targets[i];
            i += 1;
            if (t.proto != PROTO_ANY && t.proto != proto)
                || (t.backend_port != 0 && t.backend_port != bport)
            {
                continue;
            }
            let vip_port = if t.vip_port == 0 { bport } else { t.vip_port };
            let flow = FlowKey {
                src: *client,
                dst: t.vip_addr,
                sport: cport,
                dport: vip_port,
                proto,
                family: reply.family,
                pad: 0,
            };
            // The flow's backend: recorded, else, while the flood guard may leave flows
            // unrecorded, where Maglev sends it.
            let slot = match unsafe { CONNS.get(&flow) } {
                Some(v) if v.vip_id == t.vip_id => v.slot,
                Some(_) => continue,
                None if flood::guarding() => match maglev_slot(&flow, t.vip_id, t.table_size) {
                    Some(slot) => slot,
                    None => continue,
                },
                None => continue,
            };
            // The flow must be of this VIP and pinned to this very backend: a flow that
            // moved elsewhere is not this packet's.
            let Some(b) = BACKENDS.get(slot) else {
                continue;
            };
            if b.vip_id == t.vip_id
                && b.addr.words() == backend.words()
                && (b.port == bport || b.port == 0)
            {
                *out = NatReverse {
                    vip_addr: t.vip_addr,
                    vip_port,
                    pad: 0,
                    vip_id: t.vip_id,
                    slot,
                };
                return true;
            }
        }
    }
    match unsafe { NAT_REV.get(reply) } {
        Some(rev) => {
            *out = *rev;
            true
        }
        None => false,
    }
}
