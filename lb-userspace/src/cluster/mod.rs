//! The shared configuration of N balancers (S-CL3): with `[cluster] store = "etcd"` the
//! configuration file minus its node-local tables is one key, `<prefix>/config`, in etcd.
//! Every node watches it and applies each revision whole; a change made on any node is a
//! compare-and-swap on that key's revision; each node registers under a lease with the
//! revision it runs. With `store = "peers"` (or no store) this handle only serializes the
//! node's edits, and the API pushes to peers as before.
//!
//! It sits between the daemon (which it applies configurations to) and the API (which
//! calls it for every change and reads its status).

mod apply;
mod change;
mod follow;
mod register;
mod state;
mod store;

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::warn;

pub use apply::{ApplyError, apply_text, validate, validate_as};
pub use change::{ChangeError, Changed, Edit};
pub use state::{NodeRecord, NodeView, Refused, Status};
pub use store::StoreError;

use crate::config::{ClusterStore, EtcdSettings};
use crate::daemon::Daemon;
use store::Store;

/// How long `GET /api/v1/cluster` waits for etcd's node list before answering with the
/// last one read.
const NODES_WAIT: std::time::Duration = std::time::Duration::from_millis(300);

/// The cluster side of one node, shared by the API's handlers and the background tasks.
pub struct Cluster {
    inner: Arc<Inner>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// State shared with the background tasks.
struct Inner {
    daemon: Arc<Daemon>,
    /// One configuration edit (and its reload) at a time on this node.
    edits: tokio::sync::Mutex<()>,
    /// Set when `store = "etcd"` at start.
    etcd: Option<Etcd>,
}

/// The etcd side: settings, the client once built, what this node knows.
struct Etcd {
    settings: EtcdSettings,
    node: String,
    store: tokio::sync::OnceCell<Store>,
    status: Mutex<Status>,
    /// The other nodes as last read (kept while etcd is unreachable).
    nodes: Mutex<Vec<NodeRecord>>,
    /// Wakes the registration task when the applied revision or the refusal changed.
    changed: Notify,
    /// The lease this node's record lives under, revoked at stop.
    lease: Mutex<Option<i64>>,
    /// The shared text of the revision applied here (Manual Sync Mode compares with it).
    applied_text: Mutex<Option<String>>,
}

/// Locks a std mutex whose data stays usable if a holder panicked.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Cluster {
    /// Starts following etcd when the running configuration says `store = "etcd"` (which
    /// is read at start only); otherwise only the edit lock is live.
    pub fn start(daemon: Arc<Daemon>) -> Arc<Cluster> {
        let cluster = Cluster::new(daemon);
        cluster.follow();
        cluster
    }

    /// The handle without its background tasks: changes and status work (etcd is asked on
    /// demand) but nothing follows etcd until [`Cluster::follow`]. `lb run --upgrade`
    /// follows only once the previous process handed over, so that two processes never
    /// write the same file at once.
    pub fn new(daemon: Arc<Daemon>) -> Arc<Cluster> {
        let cfg = daemon.config();
        let etcd = cfg.cluster.as_ref().and_then(|c| match &c.store {
            ClusterStore::Etcd(settings) => Some(Etcd {
                settings: settings.clone(),
                node: c.node_name.clone(),
                store: tokio::sync::OnceCell::new(),
                status: Mutex::default(),
                nodes: Mutex::default(),
                changed: Notify::new(),
                lease: Mutex::default(),
                applied_text: Mutex::default(),
            }),
            ClusterStore::Peers => None,
        });
        let inner = Arc::new(Inner {
            daemon,
            edits: tokio::sync::Mutex::new(()),
            etcd,
        });
        Arc::new(Cluster {
            inner,
            tasks: Mutex::default(),
        })
    }

    /// Starts following etcd and registering this node (once; nothing without etcd).
    pub fn follow(&self) {
        let mut tasks = lock(&self.tasks);
        if self.inner.etcd.is_none() || !tasks.is_empty() {
            return;
        }
        tasks.push(tokio::spawn(follow::follow(self.inner.clone())));
        tasks.push(tokio::spawn(register::register(self.inner.clone())));
    }

    /// One configuration edit at a time on this node: every change holds this.
    pub fn edits(&self) -> &tokio::sync::Mutex<()> {
        &self.inner.edits
    }

    /// Whether changes go through etcd.
    pub fn is_etcd(&self) -> bool {
        self.inner.etcd.is_some()
    }

    /// Manual Sync Mode as the running configuration sets it.
    pub fn manual_sync(&self) -> bool {
        self.inner
            .daemon
            .config()
            .cluster
            .as_ref()
            .is_some_and(|c| c.manual_sync)
    }

    /// This node's view of etcd (None when the store is not etcd).
    pub fn status(&self) -> Option<Status> {
        self.inner.etcd.as_ref().map(|e| lock(&e.status).clone())
    }

    /// This node's name and the etcd settings (None when the store is not etcd).
    pub fn etcd_settings(&self) -> Option<(&str, &EtcdSettings)> {
        self.inner
            .etcd
            .as_ref()
            .map(|e| (e.node.as_str(), &e.settings))
    }

    /// Every registered node, read from etcd now, each marked whether it runs the revision
    /// etcd holds. While etcd is known not to answer, or does not within [`NODES_WAIT`],
    /// the last list read: the API stays quick during an outage (the background tasks
    /// notice it and say so).
    pub async fn nodes(&self) -> Vec<NodeView> {
        if let Some(etcd) = self.inner.etcd()
            && let Some(store) = etcd.store.get()
            && lock(&etcd.status).store_reachable
        {
            let _ = tokio::time::timeout(NODES_WAIT, self.inner.refresh_nodes(store)).await;
        }
        self.cached_nodes()
    }

    /// The nodes as last read from etcd (every few seconds, and by [`Cluster::nodes`]),
    /// without asking etcd: for the Live Stats page, polled every second.
    pub fn cached_nodes(&self) -> Vec<NodeView> {
        let Some(etcd) = self.inner.etcd() else {
            return Vec::new();
        };
        let store_revision = lock(&etcd.status).store_revision;
        lock(&etcd.nodes)
            .iter()
            .map(|r| NodeView {
                agrees: r.applied_revision == store_revision && store_revision != 0,
                record: r.clone(),
            })
            .collect()
    }

    /// Applies `edit` through etcd (S-CL3): see [`Edit`]. The caller holds no edit lock.
    pub async fn change(&self, edit: Edit) -> Result<Changed, ChangeError> {
        change::change(&self.inner, edit).await
    }

    /// Stops following etcd and removes this node's record (its lease is revoked).
    pub async fn stop(&self) {
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
        let lease = self.inner.etcd.as_ref().and_then(|e| lock(&e.lease).take());
        if let Some(etcd) = &self.inner.etcd
            && let (Some(store), Some(id)) = (etcd.store.get(), lease)
        {
            let mut client = store.client();
            let _ = store.bounded(client.lease_revoke(id)).await;
        }
    }
}

impl Inner {
    fn etcd(&self) -> Option<&Etcd> {
        self.etcd.as_ref()
    }

    /// The client, built on first use; fails when a TLS file cannot be read.
    async fn store(&self) -> Result<&Store, StoreError> {
        let Some(etcd) = self.etcd() else {
            return Err(StoreError::Unreachable {
                endpoints: String::new(),
                message: "the cluster store is not etcd".into(),
            });
        };
        etcd.store
            .get_or_try_init(|| Store::connect(&etcd.settings))
            .await
    }

    /// Reads the configuration key's revision and every node record into the cache.
    async fn refresh_nodes(&self, store: &Store) {
        let Some(etcd) = self.etcd() else { return };
        let read = async {
            let (stored, _) = store.read().await?;
            let nodes = store.nodes().await?;
            Ok::<_, StoreError>((stored.map_or(0, |s| s.revision), nodes))
        };
        match read.await {
            Ok((revision, nodes)) => {
                let records: Vec<NodeRecord> = nodes
                    .iter()
                    .filter_map(|(name, text)| match serde_json::from_str(text) {
                        Ok(r) => Some(r),
                        Err(e) => {
                            warn!(node = %name, "a node record in etcd is not readable: {e}");
                            None
                        }
                    })
                    .collect();
                *lock(&etcd.nodes) = records;
                self.reached(Some(revision));
            }
            Err(e) => self.lost(&e),
        }
    }

    /// etcd answered (with the configuration key's revision when it was read).
    fn reached(&self, revision: Option<i64>) {
        let Some(etcd) = self.etcd() else { return };
        let mut st = lock(&etcd.status);
        if !st.store_reachable {
            tracing::info!(
                applied = st.applied_revision,
                "etcd answers: following the shared configuration"
            );
        }
        st.store_reachable = true;
        st.store_error = None;
        if let Some(r) = revision {
            st.store_revision = r;
        }
    }

    /// etcd did not answer: the node runs on, on the revision it applied last.
    fn lost(&self, e: &StoreError) {
        let Some(etcd) = self.etcd() else { return };
        let mut st = lock(&etcd.status);
        if st.store_reachable || st.store_error.is_none() {
            warn!(
                applied = st.applied_revision,
                "{e}; running on the last applied configuration until etcd answers"
            );
        }
        st.store_reachable = false;
        st.store_error = Some(e.to_string());
    }
}
