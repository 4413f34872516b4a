//! What the maps should hold: the plan from configuration and health, Maglev tables, and which VIPs need a new table.

pub(in crate::network) mod build;
pub mod maglev;
pub(in crate::network) mod plan;
