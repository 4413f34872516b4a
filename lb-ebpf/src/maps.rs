//! Map definitions. Declared once here with BTF, so `bpftool map dump` pretty-prints them;
//! the key and value types come from `lb-common`, shared with userspace.

use aya_ebpf::{
    btf_maps::{Array, ArrayOfMaps, HashMap, LpmTrie, LruHashMap, PerCpuArray, ProgramArray},
    macros::btf_map,
};
use lb_common::{
    AddrKey, BackendSlot, ClientKey, Counters, DEFAULT_CONN_TABLE_SIZE, DEFAULT_MAGLEV_SIZE,
    FILTER_WORDS, FloodGuard, FlowKey, FlowValue, GLOBAL_COUNT, HealthTunnel, MAX_ADDRS,
    MAX_BACKEND_SLOTS, MAX_HOPS, MAX_NEXTHOPS, MAX_RANGE_PREFIXES, MAX_VIPS, NatBackendKey,
    NatTargets, NextHop, RangeData, TunnelJob, TunnelSource, VipById, VipKey, VipMeta,
};

/// The Maglev tables' flags as the map-flags const parameter: inner tables may have any
/// size and are memory-mapped by userspace.
const MAGLEV_TABLE: usize = lb_common::MAGLEV_TABLE_FLAGS as usize;
/// The connection tables' LRU lists are the kernel's common ones (no `BPF_F_NO_COMMON_LRU`):
/// each CPU takes free entries from a local list that is refilled, and the oldest flows
/// evicted, 128 at a time under the shared lock. Per-CPU lists are rotated on every insert
/// and evict 4 entries at a time, which cost a new flow 60-110 ns more in `bench xdp`, and they
/// split the table's size between the CPUs. Entries are visible to every CPU either way (a reply
/// handled on another CPU finds its flow).
const SHARED_LRU: usize = 0;
/// `BPF_F_NO_PREALLOC`, required by LPM tries.
const NO_PREALLOC: usize = 1;

/// One bit per VIP address and per NAT backend address (`lb_common::filter_bit`): traffic
/// that is neither is passed after this one read.
#[btf_map]
pub static ADDR_FILTER: Array<u64, { FILTER_WORDS as usize }> = Array::new();

/// Role bits of the VIP addresses that have Port Range or ANY-L3 entries.
#[btf_map]
pub static ADDRS: HashMap<AddrKey, u32, { MAX_ADDRS as usize }> = HashMap::new();

/// Exact (address, protocol, port) VIPs and ANY-L3 VIPs.
#[btf_map]
pub static VIPS: HashMap<VipKey, VipMeta, { MAX_VIPS as usize }> = HashMap::new();

/// Exact VIPs by id, for the packets of known flows (see `flow::known`).
#[btf_map]
pub static VIP_BY_ID: Array<VipById, { MAX_VIPS as usize }> = Array::new();

/// Port Range VIPs, each range stored as the prefixes that cover it.
#[btf_map]
pub static RANGES: LpmTrie<RangeData, VipMeta, { MAX_RANGE_PREFIXES as usize }, NO_PREALLOC> =
    LpmTrie::new();

/// Backend slots (one per backend per VIP).
#[btf_map]
pub static BACKENDS: Array<BackendSlot, { MAX_BACKEND_SLOTS as usize }> = Array::new();

/// Next hops towards backends, at the index their slots carry, written from the FIB by
/// the program and reused for `NEXTHOP_TTL_JIFFIES` (see `fib`).
#[btf_map]
pub static HOPS: Array<NextHop, { MAX_HOPS as usize }> = Array::new();

/// Per-VIP Maglev tables, swapped whole by userspace.
#[btf_map]
pub static MAGLEV: ArrayOfMaps<
    Array<u32, { DEFAULT_MAGLEV_SIZE as usize }, MAGLEV_TABLE>,
    { MAX_VIPS as usize },
> = ArrayOfMaps::new();

/// Connection table by client endpoint (see `lb_common::ClientKey`); its size is set by
/// userspace at load time.
#[btf_map]
pub static CONNS: LruHashMap<
    ClientKey,
    FlowValue,
    { DEFAULT_CONN_TABLE_SIZE as usize },
    SHARED_LRU,
> = LruHashMap::new();

/// Flows whose client endpoint's `CONNS` entry holds another flow, by whole flow key;
/// sized by userspace at load time.
#[btf_map]
pub static CONNS_CLASH: LruHashMap<
    FlowKey,
    FlowValue,
    { lb_common::clash_table_size(DEFAULT_CONN_TABLE_SIZE) as usize },
    SHARED_LRU,
> = LruHashMap::new();

/// The VIPs each NAT backend address and port serves, for reversing replies.
#[btf_map]
pub static NAT_BACKENDS: HashMap<NatBackendKey, NatTargets, { MAX_BACKEND_SLOTS as usize }> =
    HashMap::new();

/// Next hops towards clients from the FIB, per CPU, reused for `NEXTHOP_TTL_JIFFIES`
/// (see `fib`).
#[btf_map]
pub static NEXTHOPS: PerCpuArray<NextHop, { MAX_NEXTHOPS as usize }> = PerCpuArray::new();

/// Generation of the next-hop cache, bumped by userspace to forget every entry.
#[btf_map]
pub static NEXTHOP_GEN: Array<u32, 1> = Array::new();

/// The maps' layout version (`LAYOUT_VERSION`), written by userspace at load: the
/// program never reads it; an `lb` of another layout refuses to adopt these pins.
#[btf_map]
pub static LAYOUT: Array<u32, 1> = Array::new();

/// Counters per VIP id.
#[btf_map]
pub static VIP_STATS: PerCpuArray<Counters, { MAX_VIPS as usize }> = PerCpuArray::new();

/// Counters per Backend Service and CPU, at `cpu * MAX_BACKEND_SLOTS + counters` (the
/// service's index in its slots; userspace sizes it for the possible CPUs at load and reads
/// it through a memory mapping): a plain array, so a packet touches one block, not a
/// per-CPU pointer table and then a block; and one block per service, not per slot, so
/// 100 VIPs over 1,000 backends count into 1,000 blocks that stay in cache.
#[btf_map]
pub static BACKEND_STATS: Array<
    Counters,
    { MAX_BACKEND_SLOTS as usize },
    { lb_common::BACKEND_STATS_FLAGS as usize },
> = Array::new();

/// Global counters, indexed by `lb_common::GLOBAL_*`.
#[btf_map]
pub static GLOBAL_STATS: PerCpuArray<u64, { GLOBAL_COUNT as usize }> = PerCpuArray::new();

/// The connection table's flood guard, per CPU (see `flood`).
#[btf_map]
pub static FLOOD_GUARD: PerCpuArray<FloodGuard, 1> = PerCpuArray::new();

/// Programs reached by tail call, indexed by `lb_common::PROG_*`.
#[btf_map]
pub static PROGS: ProgramArray<{ lb_common::PROG_COUNT as usize }> = ProgramArray::new();

/// What the balancer program hands the tunnel program, per CPU (see `tunnel`).
#[btf_map]
pub static TUNNEL_JOB: PerCpuArray<TunnelJob, 1> = PerCpuArray::new();

/// The outer source prefixes of tunnel forwarding, at `TUNNEL_SOURCE_V4` and
/// `TUNNEL_SOURCE_V6`.
#[btf_map]
pub static TUNNEL_SOURCES: Array<TunnelSource, 2> = Array::new();

/// Socket mark of a tunnelled health check -> the outer header of its packets (see
/// `health_tunnel`).
#[btf_map]
pub static HEALTH_TUNNELS: HashMap<u32, HealthTunnel, { lb_common::MAX_HEALTH_TUNNELS as usize }> =
    HashMap::new();
