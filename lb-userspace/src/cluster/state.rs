//! What this node knows of the shared configuration: whether etcd answers, the revision it
//! applied, the one it refused, and what it registers about itself for the other nodes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// This node's view of the store, read by the API, /metrics and the Live Stats page.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Status {
    /// Whether the last call to etcd was answered.
    pub store_reachable: bool,
    /// Why etcd was not reachable at the last try, if it was not.
    pub store_error: Option<String>,
    /// The configuration key's revision as last seen in etcd (0: not seen yet).
    pub store_revision: i64,
    /// The revision whose configuration runs here (0: the local file, no revision yet).
    pub applied_revision: i64,
    /// When it was applied (Unix ms; 0: never).
    pub applied_at_unix_ms: u64,
    /// The last revision this node refused and why (cleared by the next one applied).
    pub refused: Option<Refused>,
    /// Manual Sync Mode: changes made here and not yet published with Synchronize.
    pub staged: bool,
    /// How many times this node read the configuration in full: at start, and each time
    /// etcd had compacted past the revision it was to watch from.
    pub full_reads: u64,
}

/// A revision of the shared configuration this node would not apply.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Refused {
    /// The revision.
    pub revision: i64,
    /// What was wrong with it (every validation issue, one per line).
    pub error: String,
}

/// What a node registers under `<prefix>/nodes/<name>` (under a lease: it disappears when
/// the node stops or loses etcd for longer than the lease).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct NodeRecord {
    /// The node's name (`cluster.node_name`).
    pub name: String,
    /// Its API address, for operators.
    pub api: String,
    /// The revision it runs.
    pub applied_revision: i64,
    /// When it applied it (Unix ms).
    pub applied_at_unix_ms: u64,
    /// The last revision it refused, if any.
    pub refused: Option<Refused>,
    /// Its lb version.
    pub version: String,
    /// The digest of each Network VIP's Maglev table this node runs, by "vService VIP"
    /// (S-CL4): nodes whose digests agree send every flow to the same backend.
    #[serde(default)]
    pub table_digests: BTreeMap<String, String>,
}

/// One node as `GET /api/v1/cluster` lists it.
#[derive(Clone, Debug, Serialize)]
pub struct NodeView {
    /// What the node registered.
    #[serde(flatten)]
    pub record: NodeRecord,
    /// Whether it runs the revision etcd holds now.
    pub agrees: bool,
}

/// The milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
