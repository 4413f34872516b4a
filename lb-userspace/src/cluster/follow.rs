//! Following the shared configuration: read the key in full, apply it, watch it from the
//! next revision; any watch error, end or cancel (a compaction past our revision) goes back
//! to a full read. While etcd does not answer the node runs on what it applied last.

use std::time::Duration;

use etcd_client::{EventType, WatchOptions};
use tracing::{info, warn};

use super::state::{Refused, now_ms};
use super::store::{Store, Stored, Swap};
use super::{Inner, lock};
use crate::config::write_back;

/// Pause between two tries while etcd does not answer.
const RETRY: Duration = Duration::from_millis(500);

/// Runs until aborted.
pub(super) async fn follow(inner: std::sync::Arc<Inner>) {
    // Watch from the revision after the applied one (so every change made while etcd was
    // away arrives), or read in full first: at start, and after a compaction.
    let mut full = true;
    loop {
        match inner.store().await {
            Ok(store) => match round(&inner, store, full).await {
                Ok(()) => full = true,
                Err(e) => {
                    inner.lost(&e);
                    full = applied_revision(&inner) == 0;
                }
            },
            Err(e) => inner.lost(&e),
        }
        tokio::time::sleep(RETRY).await;
    }
}

fn applied_revision(inner: &Inner) -> i64 {
    inner.etcd().map_or(0, |e| lock(&e.status).applied_revision)
}

/// A full read (when `full`) and the watch that follows, until the watch breaks: Ok when
/// etcd compacted past the revision watched from (read in full next), Err when etcd failed.
async fn round(inner: &Inner, store: &Store, full: bool) -> Result<(), super::StoreError> {
    let from = if full {
        let (stored, header) = store.read().await?;
        inner.reached(stored.as_ref().map(|s| s.revision));
        if let Some(etcd) = inner.etcd() {
            lock(&etcd.status).full_reads += 1;
        }
        match stored {
            Some(stored) => {
                let _one = inner.edits.lock().await;
                take(inner, &stored).await;
            }
            None => seed(inner, store).await?,
        }
        header + 1
    } else {
        applied_revision(inner) + 1
    };
    let mut client = store.client();
    let options = WatchOptions::new().with_start_revision(from);
    let mut stream = store
        .bounded(client.watch(store.config_key.as_str(), Some(options)))
        .await?;
    loop {
        let message = stream.message().await.map_err(|e| store.failed(&e))?;
        let Some(resp) = message else {
            return Err(store.unreachable("the watch ended"));
        };
        if resp.canceled() {
            if resp.compact_revision() > 0 {
                info!(
                    from,
                    compacted = resp.compact_revision(),
                    "etcd compacted past the revision watched from: reading the configuration in full"
                );
                return Ok(());
            }
            return Err(
                store.unreachable(format!("the watch was canceled: {}", resp.cancel_reason()))
            );
        }
        if resp.created() {
            inner.reached(None);
        }
        // Each revision is a whole configuration: of a batch only the newest counts.
        let mut newest = None;
        for event in resp.events() {
            let Some(kv) = event.kv() else { continue };
            match event.event_type() {
                EventType::Put => {
                    newest = Some(Stored {
                        text: String::from_utf8_lossy(kv.value()).into_owned(),
                        revision: kv.mod_revision(),
                    })
                }
                EventType::Delete => warn!(
                    key = %store.config_key,
                    "the shared configuration was deleted from etcd: running on, on the last applied revision; any change made here writes it again"
                ),
            }
        }
        if let Some(stored) = newest {
            inner.reached(Some(stored.revision));
            let _one = inner.edits.lock().await;
            take(inner, &stored).await;
        }
    }
}

/// The key is absent (a new cluster): this node's shared part becomes revision one.
async fn seed(inner: &Inner, store: &Store) -> Result<(), super::StoreError> {
    let path = inner.daemon.config_path();
    let local = match write_back::read(path) {
        Ok(t) => t,
        Err(e) => {
            warn!("cannot seed etcd with the shared configuration: {e}");
            return Ok(());
        }
    };
    let Ok(shared) = write_back::shared_part(&local) else {
        return Ok(());
    };
    let _one = inner.edits.lock().await;
    if let Swap::Done(revision) = store.swap(0, &shared).await? {
        info!(revision, key = %store.config_key, "etcd held no shared configuration: this node's is now the shared one");
        applied(inner, revision, &shared);
    }
    Ok(())
}

/// Applies one revision unless it is already applied, was refused already, or Manual Sync
/// Mode holds staged changes here. The caller holds the edit lock.
pub(super) async fn take(inner: &Inner, stored: &Stored) {
    let Some(etcd) = inner.etcd() else { return };
    {
        let mut st = lock(&etcd.status);
        st.store_revision = st.store_revision.max(stored.revision);
        if stored.revision <= st.applied_revision
            || st
                .refused
                .as_ref()
                .is_some_and(|r| r.revision == stored.revision)
        {
            return;
        }
        if st.staged {
            info!(
                revision = stored.revision,
                "a new shared configuration is in etcd; not applied while changes made here wait for Synchronize"
            );
            return;
        }
    }
    let origin = format!("shared configuration revision {}", stored.revision);
    match merge_and_apply(inner, &stored.text, &origin).await {
        Ok(()) => {
            info!(revision = stored.revision, "shared configuration applied");
            applied(inner, stored.revision, &stored.text);
        }
        Err(error) => {
            warn!(
                revision = stored.revision,
                "shared configuration refused, the running configuration stays: {error}"
            );
            lock(&etcd.status).refused = Some(Refused {
                revision: stored.revision,
                error,
            });
            etcd.changed.notify_one();
        }
    }
}

/// This node's file with the shared part replaced by `shared`, applied when it differs;
/// validation issues name `origin` (which revision) rather than the local file.
pub(super) async fn merge_and_apply(
    inner: &Inner,
    shared: &str,
    origin: &str,
) -> Result<(), String> {
    let path = inner.daemon.config_path();
    let local = write_back::read(path).map_err(|e| e.to_string())?;
    let merged = write_back::merge_shared(&local, shared).map_err(|e| e.to_string())?;
    if merged == local {
        return Ok(());
    }
    super::validate_as(&merged, origin).map_err(|e| e.detail())?;
    super::apply_text(&inner.daemon, &local, &merged)
        .await
        .map(|_| ())
        .map_err(|e| e.detail())
}

/// Records `revision` (whose shared text is `shared`) as the one running here, with nothing
/// staged.
pub(super) fn applied(inner: &Inner, revision: i64, shared: &str) {
    let Some(etcd) = inner.etcd() else { return };
    {
        let mut st = lock(&etcd.status);
        st.applied_revision = revision;
        st.store_revision = st.store_revision.max(revision);
        st.applied_at_unix_ms = now_ms();
        st.refused = None;
        st.staged = false;
    }
    *lock(&etcd.applied_text) = Some(shared.to_owned());
    etcd.changed.notify_one();
}
