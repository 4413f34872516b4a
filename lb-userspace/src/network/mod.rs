//! Network vServices: Maglev tables, the XDP loader and the map writer.
//!
//! `planning` derives what the maps should hold (the plan, Maglev tables); `tables` keeps
//! each VIP's table in the kernel; `writing` writes a plan into the maps without a packet
//! ever seeing a half-written VIP; `loading` finds, loads or adopts and attaches the
//! object. `reflect` paces health into the maps (S-RF2) and `status` reads them back.

mod loading;
mod planning;
mod reflect;
mod status;
mod tables;
mod writing;

pub use loading::loader::{
    DataPath, LoadOptions, XdpRun, attached_interfaces, detach, forget_state, run_xdp,
};
pub use loading::object::{PACKAGED_OBJECT, object_candidates, object_path, read_object};
pub use loading::veth::lab_warnings;
pub use planning::maglev;
pub use planning::plan::{BackendPlan, VipPlan, plan, range_prefixes};
pub use reflect::{NetworkReflector, NetworkStatus};
pub use status::{BackendStatus, Status, VipStatus};
pub use tables::table::{TableDump, digest_text};
pub(crate) use writing::state::{run_file, write_atomically};
pub use writing::writer::{apply, apply_plan};
