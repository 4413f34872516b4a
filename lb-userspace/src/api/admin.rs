//! Changes: Maintenance and Backup flags (written back to the file, S-MT8) and reload.
//! Every change goes through [`change::make`]: file first, then reload (a rejected reload
//! restores the old file), published as `[cluster]` says.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};
use tracing::info;

use super::ApiState;
use super::change::{self, Origin, apply_error};
use super::error::{ApiError, ApiResult};
use crate::cluster::Edit;
use crate::config;

/// Which flag a request sets.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Flag {
    Maintenance,
    Backup,
}

impl Flag {
    fn key(self) -> &'static str {
        match self {
            Flag::Maintenance => "maintenance",
            Flag::Backup => "backup",
        }
    }
}

/// Reads `{"on": bool}`, naming the field in every complaint.
pub(crate) fn parse_on(body: &[u8]) -> ApiResult<bool> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("body must be JSON {{\"on\": true|false}}: {e}"))
    })?;
    let obj = v.as_object().ok_or_else(|| {
        ApiError::bad_request(
            "body must be a JSON object with the field `on`: {\"on\": true|false}",
        )
    })?;
    if let Some(k) = obj.keys().find(|k| k.as_str() != "on") {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("unknown field `{k}`: the body is {{\"on\": true|false}}"),
        ));
    }
    match obj.get("on") {
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("field `on` must be true or false, not {other}"),
        )),
        None => Err(ApiError::bad_request("missing field `on` (true or false)")),
    }
}

/// Loads the file and applies it; the running configuration stays on any error.
pub(crate) async fn reload(st: &ApiState) -> ApiResult<Vec<String>> {
    let path = st.daemon.config_path();
    let (cfg, mut warnings) = config::load_with_warnings(path)
        .map_err(|e| apply_error(crate::cluster::ApplyError::Invalid(e)))?;
    warnings.extend(st.daemon.restart_only_changes(&cfg));
    st.daemon.apply(cfg).await.map_err(|e| {
        ApiError::bad_request(format!(
            "configuration rejected: {e:#}; the running configuration stays"
        ))
    })?;
    Ok(warnings)
}

/// `POST /api/v1/reload`: the file as it is now; with etcd it is published (against the
/// revision running here) so that every node runs it.
pub(crate) async fn reload_handler(State(st): State<ApiState>) -> ApiResult<Json<Value>> {
    let mut answer = change::make(&st, Edit::Reload, Origin::Here).await?;
    info!("configuration reloaded through the API");
    answer["reloaded"] = json!(true);
    Ok(Json(answer))
}

/// `answer` with the etcd revision and staging of `done`, when there are any.
fn with(mut answer: Value, done: &Value) -> Value {
    for key in ["revision", "staged"] {
        if let Some(v) = done.get(key) {
            answer[key] = v.clone();
        }
    }
    answer
}

async fn set(
    st: ApiState,
    table: &'static str,
    what: &str,
    name: String,
    flag: Flag,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let on = parse_on(&body)?;
    let cfg = st.daemon.config();
    let exists = if table == "backend_service" {
        cfg.backend_services.iter().any(|s| s.name == name)
    } else {
        cfg.backend_groups.iter().any(|g| g.name == name)
    };
    if !exists {
        return Err(ApiError::not_found(what, &name));
    }
    let edit = Edit::Set {
        table,
        name: name.clone(),
        key: flag.key(),
        value: toml_edit::Value::from(on),
    };
    let done = change::make(&st, edit, Origin::Here).await?;
    info!(%name, flag = flag.key(), on, "{what} flag set through the API and written back");
    Ok(Json(with(json!({ "name": name, flag.key(): on }), &done)))
}

/// `POST /api/v1/backends/{name}/maintenance`.
pub(crate) async fn backend_maintenance(
    st: State<ApiState>,
    name: Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    set(
        st.0,
        "backend_service",
        "Backend Service",
        name.0,
        Flag::Maintenance,
        body,
    )
    .await
}

/// Largest weight a Backend Service takes (as in the configuration file).
const MAX_WEIGHT: u64 = 65_535;

/// Reads `{"weight": N}`, naming the field in every complaint.
pub(crate) fn parse_weight(body: &[u8]) -> ApiResult<u32> {
    let shape = "{\"weight\": 0..65535}";
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("body must be JSON {shape}: {e}")))?;
    let obj = v.as_object().ok_or_else(|| {
        ApiError::bad_request(format!(
            "body must be a JSON object with the field `weight`: {shape}"
        ))
    })?;
    if let Some(k) = obj.keys().find(|k| k.as_str() != "weight") {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("unknown field `{k}`: the body is {shape}"),
        ));
    }
    match obj.get("weight") {
        Some(Value::Number(n)) => match n.as_u64().filter(|w| *w <= MAX_WEIGHT) {
            Some(w) => Ok(w as u32),
            None => Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("field `weight` must be a whole number from 0 to {MAX_WEIGHT}, not {n}"),
            )),
        },
        Some(other) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("field `weight` must be a whole number from 0 to {MAX_WEIGHT}, not {other}"),
        )),
        None => Err(ApiError::bad_request(format!(
            "missing field `weight` (0 to {MAX_WEIGHT}; 0 drains)"
        ))),
    }
}

/// `POST /api/v1/backends/{name}/weight` (HAProxy's `set server weight`): the new weight is
/// written back to the file (S-MT8) and applies to new requests and flows when this answers;
/// 0 drains (S-BK11).
pub(crate) async fn backend_weight(
    State(st): State<ApiState>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let weight = parse_weight(&body)?;
    if !st
        .daemon
        .config()
        .backend_services
        .iter()
        .any(|s| s.name == name)
    {
        return Err(ApiError::not_found("Backend Service", &name));
    }
    let edit = Edit::Set {
        table: "backend_service",
        name: name.clone(),
        key: "weight",
        value: toml_edit::Value::from(i64::from(weight)),
    };
    let done = change::make(&st, edit, Origin::Here).await?;
    info!(%name, weight, "Backend Service weight set through the API and written back");
    Ok(Json(with(json!({ "name": name, "weight": weight }), &done)))
}

/// `POST /api/v1/backends/{name}/backup`.
pub(crate) async fn backend_backup(
    st: State<ApiState>,
    name: Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    set(
        st.0,
        "backend_service",
        "Backend Service",
        name.0,
        Flag::Backup,
        body,
    )
    .await
}

/// `POST /api/v1/groups/{name}/maintenance`.
pub(crate) async fn group_maintenance(
    st: State<ApiState>,
    name: Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    set(
        st.0,
        "backend_group",
        "Backend Group",
        name.0,
        Flag::Maintenance,
        body,
    )
    .await
}

/// `POST /api/v1/groups/{name}/backup`.
pub(crate) async fn group_backup(
    st: State<ApiState>,
    name: Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    set(
        st.0,
        "backend_group",
        "Backend Group",
        name.0,
        Flag::Backup,
        body,
    )
    .await
}
