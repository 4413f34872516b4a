//! Read-only resources: status, vServices, Backend Services, groups, health check profiles,
//! transitions and Live Stats (S-OB1..3).

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::ApiState;
use super::error::{ApiError, ApiResult};
use super::view::{BackendIndex, Snapshot, used_in};
use crate::config::{Handshake, HealthCheck, HealthKind};

/// `GET /api/v1/status`: counts at a glance.
pub(crate) async fn status(State(st): State<ApiState>) -> Json<Value> {
    let snap = Snapshot::take(&st.daemon);
    let cfg = &snap.cfg;
    let mut by_health = json!({ "OK": 0, "Error": 0, "Preparing": 0 });
    for svc in &cfg.backend_services {
        let h = snap.health(&svc.name).to_string();
        if let Some(n) = by_health.get_mut(&h) {
            *n = json!(n.as_u64().unwrap_or(0) + 1);
        }
    }
    let network = cfg.vservices.iter().filter(|v| v.kind.is_network()).count();
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "config_path": st.daemon.config_path().display().to_string(),
        "vservices": { "total": cfg.vservices.len(), "network": network,
                       "l7": cfg.vservices.len() - network },
        "backend_services": {
            "total": cfg.backend_services.len(),
            "by_health": by_health,
            "maintenance": cfg.backend_services.iter().filter(|s| s.maintenance).count(),
            "backup": cfg.backend_services.iter().filter(|s| s.backup).count(),
        },
        "backend_groups": cfg.backend_groups.len(),
        "network_error": snap.report.network_error,
        "network_status_error": snap.net_error,
        "data_path": snap.net.is_some(),
        "proxy": snap.proxy.is_some(),
        "cluster": cfg.cluster.as_ref().map(|c| json!({
            "peers": c.peers.len(), "manual_sync": c.manual_sync })),
    }))
}

/// `GET /api/v1/vservices`.
pub(crate) async fn vservices(State(st): State<ApiState>) -> Json<Value> {
    let snap = Snapshot::take(&st.daemon);
    let lists = snap.list_index();
    let all: Vec<_> = snap
        .cfg
        .vservices
        .iter()
        .map(|v| snap.vservice_in(&lists, v))
        .collect();
    Json(json!({ "vservices": all }))
}

/// `GET /api/v1/vservices/{name}`.
pub(crate) async fn vservice(
    State(st): State<ApiState>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let snap = Snapshot::take(&st.daemon);
    let vs = snap
        .cfg
        .vservices
        .iter()
        .find(|v| v.name == name)
        .ok_or_else(|| ApiError::not_found("vService", &name))?;
    let mut v =
        serde_json::to_value(snap.vservice(vs)).map_err(|e| ApiError::internal(e.to_string()))?;
    if let Some(l7) = &vs.l7 {
        v["algorithm"] = json!(format!("{:?}", l7.algorithm));
        v["persistence"] = json!(format!("{:?}", l7.persistence));
    }
    Ok(Json(v))
}

fn backend_value(snap: &Snapshot, idx: &BackendIndex<'_>, name: &str) -> ApiResult<Value> {
    let view = snap
        .backend_in(idx, name)
        .ok_or_else(|| ApiError::not_found("Backend Service", name))?;
    // What Network traffic follows exists only where a Network vService uses it.
    let in_network = view.used_in.iter().any(|u| idx.is_network(&u.vservice));
    let mut v = serde_json::to_value(view).map_err(|e| ApiError::internal(e.to_string()))?;
    if let Some(svc) = idx.service(name) {
        v["health_check"] = json!(svc.health_check);
        v["max_connections"] = json!(svc.max_connections);
        v["groups"] = json!(
            snap.cfg
                .backend_groups
                .iter()
                .filter(|g| g.members.contains(&svc.name))
                .map(|g| g.name.clone())
                .collect::<Vec<_>>()
        );
    }
    if let Some(r) = snap.report.services.get(name) {
        if in_network {
            v["network_health"] = json!(r.network);
        }
        v["l7_health"] = json!(r.l7);
    }
    Ok(v)
}

/// `GET /api/v1/backends`.
pub(crate) async fn backends(State(st): State<ApiState>) -> ApiResult<Json<Value>> {
    let snap = Snapshot::take(&st.daemon);
    let idx = snap.index();
    let all = snap
        .cfg
        .backend_services
        .iter()
        .map(|s| backend_value(&snap, &idx, &s.name))
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(Json(json!({ "backends": all })))
}

/// `GET /api/v1/backends/{name}`.
pub(crate) async fn backend(
    State(st): State<ApiState>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let snap = Snapshot::take(&st.daemon);
    backend_value(&snap, &snap.index(), &name).map(Json)
}

/// `GET /api/v1/backends/{name}/transitions` (S-HC8, S-OB3); `NAME (IPv6)` gives those of
/// a dual-stack service's IPv6 address.
pub(crate) async fn transitions(
    State(st): State<ApiState>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let cfg = st.daemon.config();
    let known = |s: &crate::config::BackendService| s.health_targets().any(|(key, _)| key == name);
    if !cfg.backend_services.iter().any(known) {
        return Err(ApiError::not_found("Backend Service", &name));
    }
    let engine = st.daemon.engine();
    let transitions: Vec<Value> = engine
        .transitions(&name)
        .into_iter()
        .map(|t| {
            json!({
                "at_unix_ms": t.at.unix_ms(),
                "from": t.from.to_string(),
                "to": t.to.to_string(),
                "reason": t.reason,
                "check_ms": t.check_duration.as_millis() as u64,
            })
        })
        .collect();
    let checks: Vec<Value> = engine
        .checks(&name)
        .into_iter()
        .map(|c| {
            json!({
                "at_unix_ms": c.at.unix_ms(),
                "duration_ms": c.duration.as_secs_f64() * 1000.0,
                "ok": c.ok,
            })
        })
        .collect();
    Ok(Json(
        json!({ "name": name, "transitions": transitions, "checks": checks }),
    ))
}

fn group_value(snap: &Snapshot, name: &str) -> ApiResult<Value> {
    let g = snap
        .cfg
        .backend_groups
        .iter()
        .find(|g| g.name == name)
        .ok_or_else(|| ApiError::not_found("Backend Group", name))?;
    let members: Vec<Value> = g
        .members
        .iter()
        .map(|m| {
            let maint = snap
                .cfg
                .backend_services
                .iter()
                .any(|s| s.name == *m && s.maintenance);
            json!({ "name": m, "health": snap.health(m), "maintenance": maint })
        })
        .collect();
    Ok(json!({
        "name": g.name,
        "members": members,
        "backup": g.backup,
        "maintenance": g.maintenance,
        "used_in": used_in(&snap.cfg, &g.name),
    }))
}

/// `GET /api/v1/groups`.
pub(crate) async fn groups(State(st): State<ApiState>) -> ApiResult<Json<Value>> {
    let snap = Snapshot::take(&st.daemon);
    let all = snap
        .cfg
        .backend_groups
        .iter()
        .map(|g| group_value(&snap, &g.name))
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(Json(json!({ "groups": all })))
}

/// `GET /api/v1/groups/{name}`.
pub(crate) async fn group(
    State(st): State<ApiState>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let snap = Snapshot::take(&st.daemon);
    group_value(&snap, &name).map(Json)
}

fn profile_value(hc: &HealthCheck, used_by: Vec<String>) -> Value {
    let mut v = json!({
        "name": hc.name,
        "period_s": hc.period.as_secs_f64(),
        "timeout_s": hc.timeout.as_secs_f64(),
        "required_successes": hc.required_successes,
        "required_failures": hc.required_failures,
        "passive_failures": hc.passive_failures,
        "used_by": used_by,
    });
    let (kind, extra) = match &hc.kind {
        HealthKind::Ping => ("ping", Value::Null),
        HealthKind::Passive { return_after } => (
            "passive",
            json!({ "passive_return_s": return_after.as_secs_f64() }),
        ),
        HealthKind::Tcp(handshake) => (
            "tcp",
            json!({ "handshake": match handshake {
                Handshake::HalfOpen => "half-open",
                Handshake::Full => "full",
            } }),
        ),
        HealthKind::Http(h) | HealthKind::Https(h) => (
            if matches!(hc.kind, HealthKind::Http(_)) {
                "http"
            } else {
                "https"
            },
            json!({ "method": h.method, "path": h.path, "host": h.host,
                    "expect_status": h.expect_status, "body_contains": h.body_contains,
                    "verify_tls": h.verify_tls }),
        ),
        HealthKind::Dns(d) => (
            "dns",
            json!({ "query_name": d.query_name, "query_type": d.query_type }),
        ),
    };
    v["type"] = json!(kind);
    if let (Some(obj), Value::Object(extra)) = (v.as_object_mut(), extra) {
        obj.extend(extra);
    }
    v
}

/// `GET /api/v1/gslb`: site statuses (S-GS4), their transitions and query counters of the
/// DNS vServices; `{"sites": [], ...}` when there are none.
pub(crate) async fn gslb(State(st): State<ApiState>) -> Json<Value> {
    match st.daemon.gslb_status().await {
        Some(g) => {
            Json(serde_json::to_value(g).unwrap_or_else(|e| json!({ "error": e.to_string() })))
        }
        None => Json(json!({ "sites": [], "transitions": [], "counters": [] })),
    }
}

/// `GET /api/v1/profiles`: health check profiles and the services using each.
pub(crate) async fn profiles(State(st): State<ApiState>) -> Json<Value> {
    let cfg = st.daemon.config();
    let all: Vec<Value> = cfg
        .health_checks
        .iter()
        .map(|hc| {
            let used = cfg
                .backend_services
                .iter()
                .filter(|s| s.health_check.as_deref() == Some(hc.name.as_str()))
                .map(|s| s.name.clone())
                .collect();
            profile_value(hc, used)
        })
        .collect();
    Json(json!({ "profiles": all }))
}
