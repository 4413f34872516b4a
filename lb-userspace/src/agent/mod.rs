//! The backend agent (`lb decap`): on a backend whose kernel has no tunnel devices, an XDP
//! program of its own (`lb-decap`) removes the outer header of the balancer's tunnel
//! packets, so the inner packet reaches the VIP on `lo` (S-TN3). This module loads it,
//! fills its maps (this host's addresses, the balancers' prefixes, the VIPs), attaches and
//! pins it per interface, reads its counters, and detaches it.
//!
//! It stands beside `network` (the balancer's data path) and imports nothing of the
//! library but `ebpf_log` (the program's log records): the two programs share no map.

mod addrs;
mod loader;
mod maps;
mod object;
mod ops;
mod prefix;

pub use addrs::host_addresses;
pub use loader::{Agent, DEFAULT_PIN_BASE, Hook, ensure_bpffs, is_attached};
pub use maps::{DecapMaps, MAP_NAMES, Settings, Snapshot};
pub use object::{OBJECT_ENV, PACKAGED_OBJECT, object_candidates, object_path, read_object};
pub use ops::{AttachReport, AttachRequest, Status, attach, detach, pin_dir, status};
pub use prefix::{Prefix, PrefixError};
