//! One path for every change made through this node's API or CLI (a flag, a weight, a
//! reload, a whole configuration): with `[cluster] store = "etcd"` it is a compare-and-swap
//! in etcd that every node then applies (S-CL3); otherwise it is applied here, written back
//! to the file (S-MT8) and, with `[[cluster.peer]]`, pushed to the peers (S-CL1/2).

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::ApiState;
use super::error::{ApiError, ApiResult};
use crate::cluster::{ApplyError, ChangeError, Edit, StoreError, apply_text};
use crate::config::write_back::{self, WriteBackError};

/// Where a change comes from, which decides whether it travels on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Made on this node: published to the cluster.
    Here,
    /// Pushed by a peer (`store = "peers"`): applied here only.
    Peer,
}

/// Makes `edit` and publishes it as `[cluster]` says. Answers what the change did:
/// `warnings`, and with etcd the `revision` now running and whether it is `staged`.
pub(crate) async fn make(st: &ApiState, edit: Edit, origin: Origin) -> ApiResult<Value> {
    if st.cluster.is_etcd() {
        let changed = st.cluster.change(edit).await.map_err(change_error)?;
        return Ok(json!({
            "warnings": changed.warnings,
            "revision": changed.revision,
            "staged": changed.staged,
        }));
    }
    let warnings = {
        let _one = st.cluster.edits().lock().await;
        let path = st.daemon.config_path();
        let old = write_back::read(path).map_err(text_error)?;
        let new = match edit {
            Edit::Set {
                table,
                name,
                key,
                value,
            } => write_back::set_value(&old, table, &name, key, value).map_err(text_error)?,
            Edit::Replace { text, .. } => write_back::merge_shared(&old, &text)
                .map_err(|e| ApiError::bad_request(format!("field `config`: {e}")))?,
            Edit::Reload | Edit::Publish => old.clone(),
            Edit::Discard => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "nothing to discard: staged changes exist only with [cluster] store = \"etcd\"",
                ));
            }
        };
        if new == old && origin == Origin::Peer {
            return Ok(json!({ "warnings": [], "changed": false }));
        }
        if new == old {
            super::admin::reload(st).await?
        } else {
            replace_config(st, &old, &new).await?
        }
    };
    if origin == Origin::Here {
        st.pushes.changed(&st.daemon);
    }
    Ok(json!({ "warnings": warnings, "changed": true }))
}

/// Validates `new`, writes it, reloads; restores `old` if the reload is refused. The caller
/// holds the edit lock.
pub(crate) async fn replace_config(st: &ApiState, old: &str, new: &str) -> ApiResult<Vec<String>> {
    apply_text(&st.daemon, old, new).await.map_err(apply_error)
}

/// The answer for a configuration that was not applied.
pub(crate) fn apply_error(e: ApplyError) -> ApiError {
    match e {
        ApplyError::File(e) => text_error(e),
        ApplyError::Invalid(_) | ApplyError::Refused(_) => {
            let mut err = ApiError::bad_request(e.to_string());
            err.issues = e.issues();
            err
        }
    }
}

/// The answer for a text that could not be edited or a file that could not be written.
pub(crate) fn text_error(e: WriteBackError) -> ApiError {
    match e {
        WriteBackError::NotInFile { .. } => ApiError::new(StatusCode::CONFLICT, e.to_string()),
        WriteBackError::Parse(_) => ApiError::bad_request(e.to_string()),
        WriteBackError::Io { .. } => ApiError::internal(e.to_string()),
    }
}

/// The answer for a change etcd did not take.
fn change_error(e: ChangeError) -> ApiError {
    match e {
        ChangeError::Unreachable(StoreError::Refused { .. }) => {
            ApiError::new(StatusCode::BAD_GATEWAY, e.to_string())
        }
        ChangeError::Unreachable(_) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
        ChangeError::Conflict { .. } | ChangeError::Busy(_) => {
            ApiError::new(StatusCode::CONFLICT, e.to_string())
        }
        ChangeError::Apply(e) => apply_error(e),
        ChangeError::Text(e) => text_error(e),
    }
}
