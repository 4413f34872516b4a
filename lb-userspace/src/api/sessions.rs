//! The proxy's side of the API: L7 counters for views and metrics, and the Session Affinity
//! Manager (S-MT5): list pins, Rebalance one backend's pins, Clear All.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};
use tracing::info;

use super::ApiState;
use super::error::{ApiError, ApiResult};
use super::view::L7Counters;
use crate::daemon::Daemon;
use crate::proxy::Proxy;

/// The daemon's proxy (None only while it is shutting down).
fn proxy_of(daemon: &Daemon) -> Option<&Proxy> {
    daemon.proxy()
}

/// L7 counters by vService, or None when no proxy runs.
pub(crate) fn l7_counters(daemon: &Daemon) -> Option<BTreeMap<String, L7Counters>> {
    let proxy = proxy_of(daemon)?;
    let mut out = BTreeMap::new();
    for vs in proxy.stats() {
        let backends = vs
            .pool
            .backends
            .into_iter()
            .map(|b| (b.name.clone(), b))
            .collect();
        out.insert(
            vs.name.clone(),
            L7Counters {
                counts: vs.counts,
                backends,
                request_time: vs.request_time,
                connect_time: vs.connect_time,
            },
        );
    }
    Some(out)
}

/// The Session Affinity Manager's routes.
pub(crate) fn routes() -> Router<ApiState> {
    Router::new()
        .route("/api/v1/vservices/{name}/sessions", get(list).delete(clear))
        .route(
            "/api/v1/vservices/{name}/sessions/rebalance",
            axum::routing::post(rebalance),
        )
}

fn no_vservice(st: &ApiState, name: &str) -> ApiError {
    let known = st.daemon.config().vservices.iter().any(|v| v.name == name);
    if known {
        ApiError::new(
            axum::http::StatusCode::CONFLICT,
            format!(
                "vService `{name}` is not served by the proxy (Network vServices have no sessions)"
            ),
        )
    } else {
        ApiError::not_found("vService", name)
    }
}

fn proxy(st: &ApiState) -> ApiResult<&Proxy> {
    proxy_of(&st.daemon).ok_or_else(|| {
        ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "the L7 proxy is not running",
        )
    })
}

/// `GET /api/v1/vservices/{name}/sessions`.
async fn list(State(st): State<ApiState>, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    let pins = proxy(&st)?
        .pins(&name)
        .ok_or_else(|| no_vservice(&st, &name))?;
    let pins: Vec<Value> = pins
        .iter()
        .map(
            |p| json!({ "key": p.key, "backend": p.backend, "idle_ms": p.idle.as_millis() as u64 }),
        )
        .collect();
    Ok(Json(json!({ "vservice": name, "pins": pins })))
}

/// `POST /api/v1/vservices/{name}/sessions/rebalance` with `{"backend": "x"}`.
async fn rebalance(
    State(st): State<ApiState>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let v: Value = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "body must be JSON {{\"backend\": \"<name>\"}}: {e}"
        ))
    })?;
    let backend = v.get("backend").and_then(Value::as_str).ok_or_else(|| {
        ApiError::bad_request("field `backend` (a Backend Service name) is missing or not a string")
    })?;
    if !st
        .daemon
        .config()
        .backend_services
        .iter()
        .any(|s| s.name == backend)
    {
        return Err(ApiError::not_found("Backend Service", backend));
    }
    let moved = proxy(&st)?
        .rebalance(&name, backend)
        .ok_or_else(|| no_vservice(&st, &name))?;
    info!(vservice = %name, backend, moved, "sessions rebalanced through the API");
    Ok(Json(
        json!({ "vservice": name, "backend": backend, "moved": moved }),
    ))
}

/// `DELETE /api/v1/vservices/{name}/sessions`: Clear All.
async fn clear(State(st): State<ApiState>, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    let cleared = proxy(&st)?
        .clear_pins(&name)
        .ok_or_else(|| no_vservice(&st, &name))?;
    info!(vservice = %name, cleared, "sessions cleared through the API");
    Ok(Json(json!({ "vservice": name, "cleared": cleared })))
}
