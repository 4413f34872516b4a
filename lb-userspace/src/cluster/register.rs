//! This node's record under `<prefix>/nodes/<name>`: written under a lease that the node
//! keeps alive, rewritten whenever the revision it runs (or refused) changes, so that every
//! node's `lb cluster status` shows which nodes agree. A node that stops or loses etcd for
//! longer than the lease disappears from the list.

use std::time::Duration;

use etcd_client::PutOptions;
use tracing::info;

use super::state::NodeRecord;
use super::store::Store;
use super::{Inner, lock};

/// Lease time to live: how long a node that vanished stays listed.
const LEASE_TTL: i64 = 10;

/// How often the lease is renewed (well within its time to live).
const RENEW: Duration = Duration::from_secs(3);

/// Runs until aborted.
pub(super) async fn register(inner: std::sync::Arc<Inner>) {
    loop {
        if let Ok(store) = inner.store().await
            && let Err(e) = keep(&inner, store).await
        {
            inner.lost(&e);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// This node's record as it should read now.
fn record(inner: &Inner) -> Option<NodeRecord> {
    let etcd = inner.etcd()?;
    let st = lock(&etcd.status).clone();
    Some(NodeRecord {
        name: etcd.node.clone(),
        api: inner.daemon.config().api.listen.to_string(),
        applied_revision: st.applied_revision,
        applied_at_unix_ms: st.applied_at_unix_ms,
        refused: st.refused,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        table_digests: inner.daemon.table_digests(),
    })
}

/// Grants a lease, writes the record under it and keeps both up until etcd fails.
async fn keep(inner: &Inner, store: &Store) -> Result<(), super::StoreError> {
    let Some(etcd) = inner.etcd() else {
        return Ok(());
    };
    let mut client = store.client();
    let lease = store.bounded(client.lease_grant(LEASE_TTL, None)).await?;
    let id = lease.id();
    *lock(&etcd.lease) = Some(id);
    let key = format!("{}{}", store.nodes_prefix, etcd.node);
    let put = |record: NodeRecord| {
        let mut client = store.client();
        let key = key.clone();
        async move {
            let text = serde_json::to_string(&record).unwrap_or_default();
            let options = PutOptions::new().with_lease(id);
            store.bounded(client.put(key, text, Some(options))).await
        }
    };
    let Some(mut last) = record(inner) else {
        return Ok(());
    };
    put(last.clone()).await?;
    info!(%key, "registered in etcd");
    let (mut keeper, mut answers) = store.bounded(client.lease_keep_alive(id)).await?;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(RENEW) => {
                store.bounded(keeper.keep_alive()).await?;
                let answer = store.bounded(answers.message()).await?;
                if answer.is_none_or(|a| a.ttl() <= 0) {
                    return Err(store.unreachable("this node's lease expired"));
                }
                inner.refresh_nodes(store).await;
            }
            _ = etcd.changed.notified() => {}
        }
        if let Some(now) = record(inner).filter(|r| *r != last) {
            put(now.clone()).await?;
            last = now;
        }
    }
}
