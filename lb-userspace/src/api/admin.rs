//! Changes: Maintenance and Backup flags (written back to the file, S-MT8) and reload.
//! Every change goes file first, then reload; a rejected reload restores the old file.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};
use tracing::{info, warn};

use super::ApiState;
use super::error::{ApiError, ApiResult};
use super::write_back::{self, WriteBackError};
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

fn write_error(e: WriteBackError) -> ApiError {
    match e {
        WriteBackError::NotInFile { .. } => ApiError::new(StatusCode::CONFLICT, e.to_string()),
        _ => ApiError::internal(e.to_string()),
    }
}

/// Validates `new`, writes it atomically, reloads; restores `old` if the reload is refused.
/// The caller holds the edit lock.
pub(crate) async fn replace_config(st: &ApiState, old: &str, new: &str) -> ApiResult<Vec<String>> {
    let path = st.daemon.config_path();
    let origin = path.display().to_string();
    if let Err(e) = config::parse_with_warnings(new, &origin) {
        return Err(rejected(e));
    }
    write_back::atomic_write(path, new).map_err(write_error)?;
    match reload(st).await {
        Ok(w) => Ok(w),
        Err(e) => {
            if let Err(restore) = write_back::atomic_write(path, old) {
                warn!(
                    "restoring {} after a refused reload failed: {restore}",
                    path.display()
                );
                return Err(ApiError::internal(format!(
                    "{}; restoring the previous file also failed: {restore}",
                    e.message
                )));
            }
            Err(e)
        }
    }
}

fn rejected(e: config::ConfigError) -> ApiError {
    let mut err = ApiError::bad_request(format!(
        "configuration rejected ({} issue(s)); the running configuration stays",
        e.errors.len()
    ));
    err.issues = e.errors.iter().map(ToString::to_string).collect();
    err
}

/// Loads the file and applies it; the running configuration stays on any error.
pub(crate) async fn reload(st: &ApiState) -> ApiResult<Vec<String>> {
    let path = st.daemon.config_path();
    let (cfg, mut warnings) = config::load_with_warnings(path).map_err(rejected)?;
    warnings.extend(st.daemon.restart_only_changes(&cfg));
    st.daemon.apply(cfg).await.map_err(|e| {
        ApiError::bad_request(format!(
            "configuration rejected: {e:#}; the running configuration stays"
        ))
    })?;
    Ok(warnings)
}

/// `POST /api/v1/reload`.
pub(crate) async fn reload_handler(State(st): State<ApiState>) -> ApiResult<Json<Value>> {
    let warnings = {
        let _one = st.edits.lock().await;
        reload(&st).await?
    };
    info!("configuration reloaded through the API");
    st.cluster.changed(&st.daemon);
    Ok(Json(json!({ "reloaded": true, "warnings": warnings })))
}

async fn set(
    st: ApiState,
    table: &str,
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
    {
        let _one = st.edits.lock().await;
        let path = st.daemon.config_path();
        let old = write_back::read(path).map_err(write_error)?;
        let new = write_back::set_flag(&old, table, &name, flag.key(), on).map_err(write_error)?;
        replace_config(&st, &old, &new).await?;
    }
    info!(%name, flag = flag.key(), on, "{what} flag set through the API and written back");
    st.cluster.changed(&st.daemon);
    Ok(Json(json!({ "name": name, flag.key(): on })))
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
    {
        let _one = st.edits.lock().await;
        let path = st.daemon.config_path();
        let old = write_back::read(path).map_err(write_error)?;
        let value = toml_edit::Value::from(i64::from(weight));
        let new = write_back::set_value(&old, "backend_service", &name, "weight", value)
            .map_err(write_error)?;
        replace_config(&st, &old, &new).await?;
    }
    info!(%name, weight, "Backend Service weight set through the API and written back");
    st.cluster.changed(&st.daemon);
    Ok(Json(json!({ "name": name, "weight": weight })))
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
