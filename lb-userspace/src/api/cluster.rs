//! Cluster synchronisation over HTTP or HTTPS. With `store = "peers"` (S-CL1/2), after a
//! change this node pushes its configuration file to every peer (at once, or only on
//! Synchronize with Manual Sync Mode); a peer keeps its own node-local tables ([xdp], [api],
//! [cluster], [bgp]) and takes everything else. With `store = "etcd"` (S-CL3) the same endpoints
//! publish through [`crate::cluster`] and report every node registered in etcd.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hyper::Method;
use serde::Serialize;
use serde_json::{Value, json};
use tracing::{info, warn};

use super::ApiState;
use super::change::{self, Origin};
use super::client::ApiClient;
use super::error::{ApiError, ApiResult};
use crate::cluster::Edit;
use crate::config::{ClientTls, ClusterPeer, write_back};
use crate::daemon::Daemon;

/// How long one push to one peer may take.
const PUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// The outcome of the last push to a peer.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub(crate) struct SyncResult {
    /// Peer name.
    pub peer: String,
    /// When the push ended.
    pub at_unix_ms: u64,
    /// Whether the peer took the configuration.
    pub ok: bool,
    /// Why not.
    pub error: Option<String>,
}

/// Per-node cluster bookkeeping, shared by the API's handlers.
#[derive(Default)]
pub(crate) struct ClusterState {
    last: Mutex<BTreeMap<String, SyncResult>>,
    /// One push round at a time, so the last round always carries the latest file.
    pushing: tokio::sync::Mutex<()>,
}

impl ClusterState {
    /// Called after every successful change made through the API: pushes in the background
    /// when clustering is on and Manual Sync Mode is off (S-CL1).
    pub(crate) fn changed(self: &Arc<Self>, daemon: &Arc<Daemon>) {
        let cfg = daemon.config();
        let Some(cluster) = &cfg.cluster else { return };
        if cluster.manual_sync || cluster.peers.is_empty() {
            return;
        }
        let (me, daemon) = (self.clone(), daemon.clone());
        tokio::spawn(async move {
            me.push_all(&daemon).await;
        });
    }

    /// Pushes this node's configuration file to every peer and records each outcome.
    pub(crate) async fn push_all(&self, daemon: &Daemon) -> Vec<SyncResult> {
        let _one = self.pushing.lock().await;
        let cfg = daemon.config();
        let Some(cluster) = &cfg.cluster else {
            return Vec::new();
        };
        let text = write_back::read(daemon.config_path()).map_err(|e| e.to_string());
        let tls = cluster.peer_tls.clone();
        let mut tasks = tokio::task::JoinSet::new();
        for peer in cluster.peers.clone() {
            let (text, tls) = (text.clone(), tls.clone());
            tasks.spawn(async move {
                let outcome = match text {
                    Ok(t) => push_one(&peer, &tls, &t).await,
                    Err(e) => Err(e),
                };
                (peer.name, outcome)
            });
        }
        let mut results = Vec::new();
        while let Some(done) = tasks.join_next().await {
            let Ok((peer, outcome)) = done else { continue };
            match &outcome {
                Ok(()) => info!(%peer, "configuration pushed to cluster peer"),
                Err(e) => warn!(%peer, "pushing the configuration to cluster peer failed: {e}"),
            }
            results.push(SyncResult {
                peer,
                at_unix_ms: now_ms(),
                ok: outcome.is_ok(),
                error: outcome.err(),
            });
        }
        results.sort_by(|a, b| a.peer.cmp(&b.peer));
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        for r in &results {
            last.insert(r.peer.clone(), r.clone());
        }
        results
    }

    /// The last push to `peer`, if any was made.
    pub(crate) fn last(&self, peer: &str) -> Option<SyncResult> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(peer)
            .cloned()
    }
}

/// Pushes `text` to `peer`; an `https://` peer is verified against `cluster.ca` and shown
/// this node's `cluster.cert` when it asks for a client certificate.
async fn push_one(peer: &ClusterPeer, tls: &ClientTls, text: &str) -> Result<(), String> {
    let client = ApiClient::with_tls(&peer.url, peer.token.clone(), PUSH_TIMEOUT, tls);
    let body = json!({ "config": text });
    let answer = client
        .call(Method::POST, "/api/v1/cluster/config", Some(&body))
        .await
        .map_err(|e| e.to_string())?;
    if answer.ok() {
        Ok(())
    } else {
        Err(answer.error_text())
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `GET /api/v1/cluster`.
pub(crate) async fn status(State(st): State<ApiState>) -> Json<Value> {
    let cfg = st.daemon.config();
    let Some(cluster) = &cfg.cluster else {
        return Json(json!({ "enabled": false, "manual_sync": false, "peers": [] }));
    };
    if let (Some(status), Some((node, etcd))) = (st.cluster.status(), st.cluster.etcd_settings()) {
        let nodes = st.cluster.nodes().await;
        // Read after the node list: listing the nodes refreshes what etcd holds.
        let status = st.cluster.status().unwrap_or(status);
        return Json(json!({
            "enabled": true,
            "store": "etcd",
            "manual_sync": cluster.manual_sync,
            "node": node,
            "endpoints": etcd.endpoints,
            "prefix": etcd.prefix,
            "status": status,
            "nodes": nodes,
            "peers": [],
        }));
    }
    let peers: Vec<Value> = cluster
        .peers
        .iter()
        .map(|p| json!({ "name": p.name, "url": p.url, "last_sync": st.pushes.last(&p.name) }))
        .collect();
    Json(
        json!({ "enabled": true, "store": "peers", "manual_sync": cluster.manual_sync, "peers": peers }),
    )
}

/// `POST /api/v1/cluster/sync`: Synchronize now (S-CL2); 502 when a peer refused. With
/// etcd it publishes the changes staged here (409 when etcd moved on since), or with
/// `{"discard": true}` drops them and runs etcd's revision again.
pub(crate) async fn sync(State(st): State<ApiState>, body: Bytes) -> ApiResult<Response> {
    if st.daemon.config().cluster.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "clustering is off: no [cluster] in the configuration",
        ));
    }
    if st.cluster.is_etcd() {
        let discard = match body.is_empty() {
            true => false,
            false => {
                let v: Value = serde_json::from_slice(&body).map_err(|e| {
                    ApiError::bad_request(format!(
                        "body must be empty or JSON {{\"discard\": true|false}}: {e}"
                    ))
                })?;
                match v.get("discard") {
                    None | Some(Value::Bool(false)) => false,
                    Some(Value::Bool(true)) => true,
                    Some(other) => {
                        return Err(ApiError::bad_request(format!(
                            "field `discard` must be true or false, not {other}"
                        )));
                    }
                }
            }
        };
        let edit = if discard {
            Edit::Discard
        } else {
            Edit::Publish
        };
        let mut done = change::make(&st, edit, Origin::Here).await?;
        done["synced"] = json!(true);
        info!(discard, "Synchronize through etcd done");
        return Ok(Json(done).into_response());
    }
    let results = st.pushes.push_all(&st.daemon).await;
    let failed: Vec<&str> = results
        .iter()
        .filter(|r| !r.ok)
        .map(|r| r.peer.as_str())
        .collect();
    if failed.is_empty() {
        return Ok(Json(json!({ "synced": true, "results": results })).into_response());
    }
    let body = json!({
        "error": format!("synchronizing failed for peer(s): {}", failed.join(", ")),
        "results": results,
    });
    Ok((StatusCode::BAD_GATEWAY, Json(body)).into_response())
}

/// `POST /api/v1/cluster/config`: a whole configuration `{"config": "<toml>"}`. With
/// `store = "peers"` a peer pushes it and it is not pushed on again (the change started
/// elsewhere). With etcd it replaces the shared configuration if etcd still holds
/// `"revision"` (default: the revision running here), else 409 naming both revisions.
pub(crate) async fn receive(State(st): State<ApiState>, body: Bytes) -> ApiResult<Json<Value>> {
    let v: Value = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!("body must be JSON {{\"config\": \"<toml>\"}}: {e}"))
    })?;
    let incoming = v.get("config").and_then(Value::as_str).ok_or_else(|| {
        ApiError::bad_request("field `config` (the TOML text) is missing or not a string")
    })?;
    let base = match v.get("revision") {
        None | Some(Value::Null) => None,
        Some(r) => Some(r.as_i64().filter(|r| *r >= 0).ok_or_else(|| {
            ApiError::bad_request(format!(
                "field `revision` must be the etcd revision the configuration was made against, not {r}"
            ))
        })?),
    };
    let edit = Edit::Replace {
        text: incoming.to_owned(),
        base,
    };
    let origin = match st.cluster.is_etcd() {
        true => Origin::Here,
        false => Origin::Peer,
    };
    let mut done = change::make(&st, edit, origin).await?;
    info!("whole configuration received through the API and applied");
    done["applied"] = json!(true);
    Ok(Json(done))
}
