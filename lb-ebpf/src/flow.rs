//! Backend choice: connection table first, Maglev on a miss or a TCP SYN.

use aya_ebpf::bindings::BPF_NOEXIST;
use lb_common::{
    Addr, BackendSlot, ClientKey, FAMILY_V6, FLOW_F_NAT, FlowKey, FlowValue, SLOT_F_ACTIVE,
    VIP_F_DSR, VIP_F_FLOOD_GUARD, VipMeta,
};

use crate::flood;
use crate::headers::{IPPROTO_TCP, IPPROTO_UDP};
use crate::ip::IpHeader;
use crate::maps::{BACKENDS, CONNS, CONNS_CLASH, MAGLEV, VIP_BY_ID};
use crate::parse::Packet;
use crate::stats::{self, Event};

/// Result of choosing a backend for one packet.
pub struct Choice {
    /// The backend's address (words, wire order), port (0: the packet's) and next-hop
    /// index, from the slot or from the flow's copy of it.
    pub addr: [u32; 4],
    pub port: u16,
    pub hop: u32,
    /// The Backend Service's counters index.
    pub counters: u32,
    pub new_flow: bool,
    pub ct_miss: bool,
}

impl Choice {
    /// The backend a flow's entry names.
    #[inline(always)]
    fn of(v: &FlowValue, new_flow: bool, ct_miss: bool) -> Choice {
        Choice {
            addr: *v.addr.words(),
            port: v.port,
            hop: v.hop,
            counters: v.counters,
            new_flow,
            ct_miss,
        }
    }

    /// What a packet of `bytes` sent this way counts.
    #[inline(always)]
    pub fn event(&self, bytes: u64) -> Event {
        Event {
            bytes,
            new_flow: self.new_flow,
            ct_miss: self.ct_miss,
        }
    }
}

/// What the connection table says of a TCP or UDP packet before its VIP is looked up.
pub enum Known {
    /// A flow of an exact VIP whose key is the packet's destination (so the VIP that
    /// `vip::find` would find first) and whose slots have not changed since the flow's copy
    /// was taken: the VIP and the backend, without a VIP lookup.
    Fast(VipMeta, Choice),
    /// No flow of the packet's client endpoint in `CONNS` (`CONNS_CLASH` may hold it).
    Absent,
    /// Anything else (another protocol, a Port Range or ANY-L3 VIP's flow, a copy
    /// of another epoch, another flow of the client endpoint): the VIP is looked up, and
    /// the flow again.
    Other,
}

/// Looks up the flow of `key` (a packet other than a TCP SYN, which always selects afresh)
/// and, when it is a known flow of an exact VIP, that VIP in `VIP_BY_ID`.
#[inline(always)]
pub fn known(key: &FlowKey) -> Known {
    if key.proto != IPPROTO_TCP && key.proto != IPPROTO_UDP {
        return Known::Other;
    }
    let Some(v) = CONNS.get_ptr_mut(&client_key(key)) else {
        return Known::Absent;
    };
    // SAFETY: a pointer into the map's value, checked non-null by the lookup.
    let v = unsafe { &*v };
    if !is_flow_of(v, key) {
        return Known::Other;
    }
    let Some(e) = VIP_BY_ID.get(v.vip_id) else {
        return Known::Other;
    };
    let mine = e.key.addr.words() == key.dst.words()
        && (e.key.port, e.key.proto, e.key.family) == (key.dport, key.proto, key.family);
    if mine && e.meta.epoch == v.epoch {
        Known::Fast(e.meta, Choice::of(v, false, false))
    } else {
        Known::Other
    }
}

/// The `CONNS` key of the flow `key`: its client endpoint.
#[inline(always)]
pub fn client_key(key: &FlowKey) -> ClientKey {
    ClientKey {
        addr: key.src,
        port: key.sport,
        proto: key.proto,
        family: key.family,
    }
}

/// Whether a `CONNS` entry is the flow `key`'s, not another flow of its client endpoint.
#[inline(always)]
fn is_flow_of(v: &FlowValue, key: &FlowKey) -> bool {
    v.vip_port == key.dport && v.vip_addr.words() == key.dst.words()
}

/// The recorded entry of the flow `key` (client -> VIP), in `CONNS` or `CONNS_CLASH`.
#[inline(always)]
pub fn recorded(key: &FlowKey) -> Option<&'static FlowValue> {
    if let Some(v) = unsafe { CONNS.get(&client_key(key)) } {
        if is_flow_of(v, key) {
            return Some(v);
        }
    }
    unsafe { CONNS_CLASH.get(key) }
}

/// The packet's flow as the maps hold it: address bytes, ports as numbers.
#[inline(always)]
pub fn key<H: IpHeader>(pkt: &Packet<H>) -> FlowKey {
    FlowKey {
        src: Addr::from_words(&pkt.saddr),
        dst: Addr::from_words(&pkt.daddr),
        sport: u16::from_be(pkt.sport),
        dport: u16::from_be(pkt.dport),
        proto: pkt.proto,
        family: H::FAMILY,
        dir: 0,
    }
}

/// Mixes the 5-tuple into a well-spread 32-bit hash (murmur3 finaliser per word). IPv4
/// mixes the one address word it has; IPv6 all four.
#[inline(always)]
fn hash(key: &FlowKey) -> u32 {
    #[inline(always)]
    fn mix(mut h: u32, w: u32) -> u32 {
        h ^= w
            .wrapping_mul(0xcc9e_2d51)
            .rotate_left(15)
            .wrapping_mul(0x1b87_3593);
        h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64)
    }
    let (src, dst) = (key.src.words(), key.dst.words());
    let mut h = 0x9747_b28c;
    h = mix(h, src[0]);
    h = mix(h, dst[0]);
    if key.family == FAMILY_V6 {
        let mut i = 1;
        while i < 4 {
            h = mix(h, src[i]);
            h = mix(h, dst[i]);
            i += 1;
        }
    }
    h = mix(h, ((key.sport as u32) << 16) | key.dport as u32);
    h = mix(h, key.proto as u32);
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The slot at the flow's position in the VIP's Maglev table (of `table_size` entries).
#[inline(always)]
pub fn maglev_slot(key: &FlowKey, vip_id: u32, table_size: u32) -> Option<u32> {
    if table_size == 0 {
        return None;
    }
    let index = hash(key) % table_size;
    MAGLEV.get_value(vip_id, &index).copied()
}

#[inline(always)]
fn active_slot(slot: u32, vip_id: u32) -> Option<&'static BackendSlot> {
    let b = BACKENDS.get(slot)?;
    if b.flags & SLOT_F_ACTIVE != 0 && b.vip_id == vip_id {
        Some(b)
    } else {
        None
    }
}

/// The entry of the flow `key` as written for `slot` under the VIP's current epoch.
#[inline(always)]
fn entry(key: &FlowKey, slot: u32, b: &BackendSlot, meta: &VipMeta) -> FlowValue {
    FlowValue {
        slot,
        vip_id: meta.vip_id,
        epoch: meta.epoch,
        hop: b.hop,
        counters: b.counters,
        port: b.port,
        vip_port: key.dport,
        // Without a branch, which would double the verifier's paths through the rest.
        flags: (!meta.flags & VIP_F_DSR) * FLOW_F_NAT,
        addr: b.addr,
        vip_addr: key.dst,
    }
}

/// Writes the entry of a flow chosen by Maglev: in `CONNS` when its client endpoint is
/// free there, holds this flow already (a SYN that selects afresh) or holds an older flow
/// to the same backend address and port (which moves to `CONNS_CLASH`); else in
/// `CONNS_CLASH` (a NAT flow under its reply's key too). Deciding here, after
/// the insert, keeps the choice of the table off the verifier's paths through the rest of
/// the program.
#[inline(always)]
fn record(key: &FlowKey, value: &FlowValue, own: bool) {
    let client = client_key(key);
    // Over the flow's own entry when the SYN's lookup found it; else only into a free place.
    let flags = (!own as u64) * BPF_NOEXIST as u64;
    if CONNS.insert(&client, value, flags).is_ok() {
        return;
    }
    // Taken: by this very flow (a SYN selecting afresh), or by another.
    if let Some(v) = unsafe { CONNS.get(&client) } {
        if is_flow_of(v, key) {
            let _ = CONNS.insert(&client, value, 0);
            return;
        }
        // Another flow to the same backend address and port: the backend holds one
        // connection per client endpoint, now this one, so its replies are this flow's.
        if v.addr.words() == value.addr.words()
            && backend_port(v.port, v.vip_port) == backend_port(value.port, key.dport)
        {
            displace(key, v);
            let _ = CONNS.insert(&client, value, 0);
            return;
        }
    }
    // Best effort: a full LRU evicts the oldest flow, so this only fails on bad input.
    let _ = CONNS_CLASH.insert(key, value, 0);
    crate::nat::remember(key, value);
}

/// The port a flow's packets reach its backend on: the slot's, or the VIP port the
/// client used when the slot keeps the packet's (0).
#[inline(always)]
fn backend_port(slot_port: u16, vip_port: u16) -> u16 {
    if slot_port == 0 { vip_port } else { slot_port }
}

/// Moves the older flow `v` of `key`'s client endpoint from `CONNS` to `CONNS_CLASH`, under
/// its whole flow key, so that its own packets keep their backend while the endpoint's
/// place goes to the newer flow. Not inlined: rare, and its key would crowd the stack.
#[inline(never)]
fn displace(key: &FlowKey, v: &FlowValue) {
    let older = FlowKey {
        src: key.src,
        dst: v.vip_addr,
        sport: key.sport,
        dport: v.vip_port,
        proto: key.proto,
        family: key.family,
        dir: 0,
    };
    // Best effort, as the flow's own entry.
    let _ = CONNS_CLASH.insert(&older, v, 0);
}

/// Picks the backend for `key` on the VIP `meta` and counts the packet (`bytes`) on the VIP
/// and the backend's Backend Service; `absent`: the connection table was just found not to
/// hold the flow. `None`: the VIP has no usable backend.
///
/// A new flow is counted before its entry is written: with 100,000 Backend Services their
/// counters miss the CPU cache, and that wait then overlaps the insert instead of following
/// it (`bench xdp`, a new flow at 100 VIPs x 1,000 backends, a port per VIP: about 1,030 ->
/// 980 ns).
///
/// A TCP SYN selects afresh, but looks its client endpoint up before the Maglev table and
/// the slot are read: the lookup brings the table's bucket into the CPU cache while those
/// reads wait on memory, so the insert that follows does not wait for it again (`bench xdp`,
/// a new flow at 100 VIPs x 1,000 backends with 1M flows, about 1,100 -> 800 ns in DSR). Not
/// while the flood guard leaves this CPU's new flows unrecorded: there is no insert to
/// speed up then, and a SYN flood must stay cheap.
#[inline(always)]
pub fn choose(
    key: &FlowKey,
    meta: &VipMeta,
    is_syn: bool,
    absent: bool,
    bytes: u64,
) -> Option<Choice> {
    let mut ct_miss = false;
    let mut own = false;
    if is_syn && !flood::saturated() {
        // SAFETY: a pointer into the map's value, checked non-null by the lookup.
        own = CONNS
            .get_ptr(&client_key(key))
            .is_some_and(|v| is_flow_of(unsafe { &*v }, key));
    }
    if !is_syn {
        let mut found = if absent {
            None
        } else {
            CONNS.get_ptr_mut(&client_key(key))
        };
        // SAFETY: a pointer into the map's value, checked non-null by the lookup.
        if found.is_some_and(|v| !is_flow_of(unsafe { &*v }, key)) {
            found = None;
        }
        if found.is_none() {
            found = CONNS_CLASH.get_ptr_mut(key);
        }
        match found {
            Some(v) => {
                // SAFETY: a pointer into the map's value, checked non-null by the lookup.
                let v = unsafe { &mut *v };
                // The backend the flow kept, while none of the VIP's slots changed.
                if v.epoch == meta.epoch && v.vip_id == meta.vip_id {
                    return Some(counted(Choice::of(v, false, false), meta, bytes));
                }
                // A flow keeps its backend while the slot is active (drained included);
                // a failed or removed backend makes it re-hash below.
                if let Some(b) = active_slot(v.slot, meta.vip_id) {
                    *v = entry(key, v.slot, b, meta);
                    return Some(counted(Choice::of(v, false, false), meta, bytes));
                }
            }
            None => ct_miss = true,
        }
    }
    let slot = maglev_slot(key, meta.vip_id, meta.table_size)?;
    let value = entry(key, slot, active_slot(slot, meta.vip_id)?, meta);
    let choice = counted(Choice::of(&value, true, ct_miss), meta, bytes);
    // Only VIPs whose unrecorded flows keep working may leave them unrecorded.
    if meta.flags & VIP_F_FLOOD_GUARD == 0 || flood::may_record() {
        record(key, &value, own);
    }
    Some(choice)
}

/// Counts a packet of `bytes` sent as `choice` says on its VIP and Backend Service.
#[inline(always)]
fn counted(choice: Choice, meta: &VipMeta, bytes: u64) -> Choice {
    stats::forwarded(meta.vip_id, choice.counters, &choice.event(bytes));
    choice
}
