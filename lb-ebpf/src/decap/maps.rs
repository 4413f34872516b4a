//! The agent's maps, declared with BTF so that `bpftool map dump` prints their fields; the
//! key and value types come from `lb_common::decap`, shared with `lb decap`.

use aya_ebpf::{
    btf_maps::{Array, HashMap, LpmTrie, PerCpuArray},
    macros::btf_map,
};
use lb_common::AddrKey;
use lb_common::decap::{
    DECAP_COUNT, DecapConfig, MAX_DECAP_VIPS, MAX_LOCAL_ADDRS, MAX_SOURCES, SourceKey,
};

/// This host's addresses, filled by `lb decap` from the kernel's address list.
#[btf_map]
pub static DECAP_LOCAL: HashMap<AddrKey, u8, { MAX_LOCAL_ADDRS as usize }> = HashMap::new();

/// The balancers' prefixes (read when `DECAP_F_SOURCES` is set).
#[btf_map]
pub static DECAP_SOURCES: LpmTrie<SourceKey, u32, { MAX_SOURCES as usize }> = LpmTrie::new();

/// The VIPs inner packets may be addressed to (read when `DECAP_F_VIPS` is set).
#[btf_map]
pub static DECAP_VIPS: HashMap<AddrKey, u8, { MAX_DECAP_VIPS as usize }> = HashMap::new();

/// Which filters are in use (one entry).
#[btf_map]
pub static DECAP_CONFIG: Array<DecapConfig, 1> = Array::new();

/// Counters, indexed by `lb_common::decap::DECAP_*`.
#[btf_map]
pub static DECAP_STATS: PerCpuArray<u64, { DECAP_COUNT as usize }> = PerCpuArray::new();
