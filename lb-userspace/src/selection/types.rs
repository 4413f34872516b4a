//! The vocabulary of selection: inputs (health, policy) and outputs (tier, eligible backends).

use crate::config::{PortSpec, VService, VServiceKind};

/// Health of one Backend Service (S-HC5): the health engine's own state type, which
/// selection reads and never derives.
pub use crate::health::HealthState as Health;

/// Whether Backup and Maintenance flags shape distribution for a list.
///
/// Network vServices ignore both unless `apply_admin_state` is set (S-BK10, S-MT7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyAdmin {
    /// Backups wait for the mains (S-BK), Maintenance stops new traffic (S-MT).
    Yes,
    /// Every member is a main and Maintenance is ignored.
    No,
}

/// Whether health states shape distribution for a list.
///
/// Network vServices with ANY-L3 or a Port Range do not reflect health (S-RF4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyHealth {
    /// Preparing and Error members get no new traffic.
    Yes,
    /// Every member counts as OK.
    No,
}

/// How one list is evaluated: which configuration and runtime inputs count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Backup and Maintenance (S-BK10, S-MT7).
    pub admin: ApplyAdmin,
    /// Health (S-RF4).
    pub health: ApplyHealth,
}

impl Policy {
    /// Everything applies: the policy of HTTP and L7 TCP lists.
    pub const FULL: Policy = Policy {
        admin: ApplyAdmin::Yes,
        health: ApplyHealth::Yes,
    };

    /// The policy a vService's configuration implies: Network vServices apply Backup and
    /// Maintenance only with `apply_admin_state` (S-BK10, S-MT7), and ignore health on ANY-L3
    /// or a Port Range (S-RF4).
    pub fn for_vservice(vs: &VService) -> Policy {
        if !vs.kind.is_network() {
            return Policy::FULL;
        }
        let admin = if vs.apply_admin_state {
            ApplyAdmin::Yes
        } else {
            ApplyAdmin::No
        };
        let no_health = vs.kind == VServiceKind::AnyL3 || matches!(vs.ports, PortSpec::Range(..));
        let health = if no_health {
            ApplyHealth::No
        } else {
            ApplyHealth::Yes
        };
        Policy { admin, health }
    }
}

/// Which part of a list takes new traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// The mains (all available mains share traffic by weight).
    Mains,
    /// One backup; the index counts the list's backups in list order, Backup groups expanded
    /// in row order, 0-based (S-BK3, S-BK7).
    Backup(usize),
    /// Nothing is available: S-BK9 applies (503, close, or drop).
    None,
}

/// A Backend Service that may take new traffic, with its weight (always > 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eligible {
    /// Backend Service name.
    pub name: String,
    /// Its configured weight.
    pub weight: u32,
}

/// The outcome for one list. Every member appears in exactly one of `eligible`, `drained`
/// and `down`, so consumers can tell "keep its flows" from "its flows may move".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListSelection {
    /// The tier that takes new traffic.
    pub tier: Tier,
    /// Members that take new traffic, in list order.
    pub eligible: Vec<Eligible>,
    /// Healthy members that take no new traffic but whose open connections and pinned flows
    /// continue: weight 0 (S-BK11), Maintenance (S-MT1), backups on standby or mains while a
    /// backup serves (S-BK4). In list order.
    pub drained: Vec<String>,
    /// Members whose health is Preparing or Error (health applied): no new traffic. In list order.
    pub down: Vec<String>,
}
