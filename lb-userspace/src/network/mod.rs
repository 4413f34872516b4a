//! Network vServices: Maglev tables, the XDP loader and the map writer.

mod batch;
mod btf;
mod build;
mod counters;
mod filter;
mod hops;
mod index_set;
mod loader;
pub mod maglev;
mod maps;
mod nat;
mod object;
mod pins;
mod plan;
mod reflect;
mod spare;
mod state;
mod status;
mod sys;
mod table;
mod tunnel;
mod veth;
mod writer;

pub use loader::{
    DataPath, LoadOptions, XdpRun, attached_interfaces, detach, forget_state, run_xdp,
};
pub use object::{PACKAGED_OBJECT, object_candidates, object_path, read_object};
pub use plan::{BackendPlan, VipPlan, plan, range_prefixes};
pub use reflect::{NetworkReflector, NetworkStatus};
pub(crate) use state::{run_file, write_atomically};
pub use status::{BackendStatus, Status, VipStatus};
pub use table::{TableDump, digest_text};
pub use veth::lab_warnings;
pub use writer::{apply, apply_plan};
