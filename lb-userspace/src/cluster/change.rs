//! Changes made on this node with `store = "etcd"` (S-CL3): each is a compare-and-swap on
//! the configuration key's revision, so two nodes changing at once never lose a change: a
//! flag or weight that loses the race is set again on the newer text, a whole configuration
//! made against an older revision is refused, naming both. With Manual Sync Mode a change
//! is applied here and staged until Synchronize publishes it.

use serde::Serialize;
use toml_edit::Value;
use tracing::info;

use super::apply::{ApplyError, apply_text, validate, validate_as};
use super::follow::{applied, merge_and_apply};
use super::state::Refused;
use super::store::{StoreError, Swap};
use super::{Inner, lock};
use crate::config::write_back::{self, WriteBackError};

/// How often a flag change is set again on a newer text before giving up.
const TRIES: usize = 5;

/// A change to the shared configuration.
#[derive(Clone, Debug)]
pub enum Edit {
    /// `key = value` in the `[[table]]` entry named `name` (Maintenance, Backup, weight).
    Set {
        /// `backend_service` or `backend_group`.
        table: &'static str,
        /// The entry's name.
        name: String,
        /// The key set.
        key: &'static str,
        /// Its new value.
        value: Value,
    },
    /// A whole configuration file (its node-local tables are ignored), made against
    /// revision `base` (None: the revision running here).
    Replace {
        /// The TOML text.
        text: String,
        /// The revision it was made against.
        base: Option<i64>,
    },
    /// This node's file as it is now (a reload): published, or staged with Manual Sync Mode.
    Reload,
    /// Synchronize: publish this node's file, staged changes included.
    Publish,
    /// Manual Sync Mode: drop the changes staged here and run etcd's revision again.
    Discard,
}

/// What a change did.
#[derive(Clone, Debug, Serialize)]
pub struct Changed {
    /// The revision now running here (the one published, or the one still running when the
    /// change is only staged).
    pub revision: i64,
    /// Applied here and waiting for Synchronize (Manual Sync Mode).
    pub staged: bool,
    /// What the reload reported.
    pub warnings: Vec<String>,
}

/// Why a change was not made.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// etcd does not answer, or refused the call: the change was not made anywhere.
    #[error("{0}; the change was not made (every node keeps its configuration)")]
    Unreachable(StoreError),
    /// The configuration was made against an older revision than etcd holds.
    #[error(
        "the shared configuration changed since: this change was made against revision {base}, etcd holds revision {current}; read it again and redo the change"
    )]
    Conflict {
        /// The revision the change was made against.
        base: i64,
        /// The revision etcd holds.
        current: i64,
    },
    /// Other nodes kept changing the configuration while this change was tried.
    #[error("the shared configuration changed {0} times while this change was tried; try again")]
    Busy(usize),
    /// The change does not make a valid configuration, or this node refused it.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// The entry is not in the configuration, or the text cannot be edited.
    #[error(transparent)]
    Text(#[from] WriteBackError),
}

impl From<StoreError> for ChangeError {
    fn from(e: StoreError) -> Self {
        ChangeError::Unreachable(e)
    }
}

/// Makes `edit`, holding the node's edit lock.
pub(super) async fn change(inner: &Inner, edit: Edit) -> Result<Changed, ChangeError> {
    let _one = inner.edits.lock().await;
    let manual = inner
        .daemon
        .config()
        .cluster
        .as_ref()
        .is_some_and(|c| c.manual_sync);
    let result = match edit {
        Edit::Discard => discard(inner).await,
        Edit::Publish => publish(inner).await,
        edit if manual => stage(inner, edit).await,
        Edit::Reload => publish(inner).await,
        Edit::Set {
            table,
            name,
            key,
            value,
        } => set(inner, table, &name, key, value).await,
        Edit::Replace { text, base } => replace(inner, &text, base).await,
    };
    // Refused calls say nothing of whether etcd answers; unanswered ones do.
    if let Err(ChangeError::Unreachable(e @ StoreError::Unreachable { .. })) = &result {
        inner.lost(e);
    }
    result
}

fn running(inner: &Inner) -> i64 {
    inner.etcd().map_or(0, |e| lock(&e.status).applied_revision)
}

/// A flag or weight, set on etcd's newest text and swapped in; set again on a newer text
/// when another node won the race.
async fn set(
    inner: &Inner,
    table: &str,
    name: &str,
    key: &str,
    value: Value,
) -> Result<Changed, ChangeError> {
    let store = inner.store().await?;
    let path = inner.daemon.config_path();
    for _ in 0..TRIES {
        let (stored, _) = store.read().await?;
        let local = write_back::read(path)?;
        let (base_text, base) = match stored {
            Some(s) => (s.text, s.revision),
            None => (write_back::shared_part(&local)?, 0),
        };
        let edited = write_back::set_value(&base_text, table, name, key, value.clone())?;
        let merged = write_back::merge_shared(&local, &edited)?;
        let origin = format!("shared configuration revision {base} with {key} of `{name}` set");
        validate_as(&merged, &origin)?;
        match store.swap(base, &edited).await? {
            Swap::Done(revision) => {
                return finish(inner, &local, &merged, &edited, revision).await;
            }
            Swap::Moved(current) => {
                info!(
                    base,
                    current,
                    "another node changed the shared configuration first: setting {key} again on the newer one"
                );
            }
        }
    }
    Err(ChangeError::Busy(TRIES))
}

/// A whole configuration made against `base`.
async fn replace(inner: &Inner, text: &str, base: Option<i64>) -> Result<Changed, ChangeError> {
    let store = inner.store().await?;
    let path = inner.daemon.config_path();
    let local = write_back::read(path)?;
    let shared = write_back::shared_part(text)?;
    let merged = write_back::merge_shared(&local, &shared)?;
    validate(&inner.daemon, &merged)?;
    let base = base.unwrap_or_else(|| running(inner));
    match store.swap(base, &shared).await? {
        Swap::Done(revision) => finish(inner, &local, &merged, &shared, revision).await,
        Swap::Moved(current) => Err(ChangeError::Conflict { base, current }),
    }
}

/// Publishes this node's file against the revision running here (a reload, Synchronize).
async fn publish(inner: &Inner) -> Result<Changed, ChangeError> {
    let store = inner.store().await?;
    let path = inner.daemon.config_path();
    let local = write_back::read(path)?;
    validate(&inner.daemon, &local)?;
    let shared = write_back::shared_part(&local)?;
    let base = running(inner);
    let (stored, _) = store.read().await?;
    if let Some(s) = &stored
        && s.revision == base
        && s.text == shared
    {
        // Nothing new to publish: only make sure the file runs (a reload of an unchanged file).
        let warnings = reload(inner).await?;
        return Ok(Changed {
            revision: base,
            staged: false,
            warnings,
        });
    }
    match store.swap(base, &shared).await? {
        Swap::Done(revision) => {
            let warnings = reload(inner).await?;
            applied(inner, revision, &shared);
            info!(revision, "this node's configuration published to etcd");
            Ok(Changed {
                revision,
                staged: false,
                warnings,
            })
        }
        Swap::Moved(current) => Err(ChangeError::Conflict { base, current }),
    }
}

/// Manual Sync Mode: the change runs here and waits for Synchronize.
async fn stage(inner: &Inner, edit: Edit) -> Result<Changed, ChangeError> {
    let path = inner.daemon.config_path();
    let local = write_back::read(path)?;
    let new = match edit {
        Edit::Set {
            table,
            name,
            key,
            value,
        } => write_back::set_value(&local, table, &name, key, value)?,
        Edit::Replace { text, .. } => {
            write_back::merge_shared(&local, &write_back::shared_part(&text)?)?
        }
        Edit::Reload | Edit::Publish | Edit::Discard => local.clone(),
    };
    let warnings = apply_text(&inner.daemon, &local, &new).await?;
    // Staged while what runs here differs from the revision applied (a change undone, or
    // a reload of an unchanged file, stages nothing).
    let shared = write_back::shared_part(&new)?;
    let staged = inner.etcd().is_some_and(|e| {
        let differs = lock(&e.applied_text).as_deref() != Some(shared.as_str());
        lock(&e.status).staged = differs;
        differs
    });
    Ok(Changed {
        revision: running(inner),
        staged,
        warnings,
    })
}

/// Manual Sync Mode: etcd's revision replaces what was staged here.
async fn discard(inner: &Inner) -> Result<Changed, ChangeError> {
    let store = inner.store().await?;
    let (stored, _) = store.read().await?;
    let Some(stored) = stored else {
        return Err(ChangeError::Unreachable(
            store.unreachable("etcd holds no shared configuration to go back to"),
        ));
    };
    let origin = format!("shared configuration revision {}", stored.revision);
    merge_and_apply(inner, &stored.text, &origin)
        .await
        .map_err(ApplyError::Refused)?;
    applied(inner, stored.revision, &stored.text);
    Ok(Changed {
        revision: stored.revision,
        staged: false,
        warnings: Vec::new(),
    })
}

/// Runs a published revision here; a refusal is recorded like one from the watch.
async fn finish(
    inner: &Inner,
    local: &str,
    merged: &str,
    shared: &str,
    revision: i64,
) -> Result<Changed, ChangeError> {
    info!(revision, "change published to etcd");
    let warnings = if merged == local {
        Vec::new()
    } else {
        match apply_text(&inner.daemon, local, merged).await {
            Ok(w) => w,
            Err(e) => {
                if let Some(etcd) = inner.etcd() {
                    lock(&etcd.status).refused = Some(Refused {
                        revision,
                        error: e.detail(),
                    });
                    etcd.changed.notify_one();
                }
                return Err(e.into());
            }
        }
    };
    applied(inner, revision, shared);
    Ok(Changed {
        revision,
        staged: false,
        warnings,
    })
}

/// Loads the file and applies it (a reload).
async fn reload(inner: &Inner) -> Result<Vec<String>, ChangeError> {
    let path = inner.daemon.config_path();
    let (cfg, mut warnings) =
        crate::config::load_with_warnings(path).map_err(ApplyError::Invalid)?;
    warnings.extend(inner.daemon.restart_only_changes(&cfg));
    inner
        .daemon
        .apply(cfg)
        .await
        .map_err(|e| ApplyError::Refused(format!("{e:#}")))?;
    Ok(warnings)
}
