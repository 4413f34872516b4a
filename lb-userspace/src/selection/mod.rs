//! Selection: which Backend Services of a list may take new traffic (pure, no I/O).
//!
//! This is the single place that decides eligibility (docs/behaviour.md: S-BK, S-MT,
//! S-HC5/6, S-RF4, S-SF); the XDP map writer and the proxies read its output and never
//! re-derive it.

mod model;
mod server;
mod snapshot;
mod types;

pub use model::{Model, SelectionError};
pub use server::{ServerState, server_state};
pub use snapshot::{Published, Selections, VsSelection};
pub use types::{ApplyAdmin, ApplyHealth, Eligible, Health, ListSelection, Policy, Tier};

#[cfg(test)]
mod tests;
