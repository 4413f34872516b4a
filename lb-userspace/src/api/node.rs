//! This balancer as a node of an ECMP group (S-AN): what it announces to the routers, and
//! drain / resume. A drained node withdraws every VIP route at once and keeps forwarding
//! the flows it already has; the traffic counters let the operator see it go quiet.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::ApiState;
use super::error::{ApiError, ApiResult};

/// `GET /api/v1/node`: the announcements and the data path's traffic totals (new flows
/// and packets from clients, summed over VIPs), which `lb node drain` turns into rates.
pub(crate) async fn status(State(s): State<ApiState>) -> Json<Value> {
    Json(node_json(&s))
}

/// `POST /api/v1/node/drain`: withdraw every VIP; established flows keep being forwarded.
pub(crate) async fn drain(State(s): State<ApiState>) -> ApiResult<Json<Value>> {
    set(&s, true).await
}

/// `POST /api/v1/node/resume`: announce again what may be announced.
pub(crate) async fn resume(State(s): State<ApiState>) -> ApiResult<Json<Value>> {
    set(&s, false).await
}

async fn set(s: &ApiState, drained: bool) -> ApiResult<Json<Value>> {
    s.daemon
        .set_drained(drained)
        .await
        .map_err(|e| ApiError::internal(format!("saving the drain state: {e:#}")))?;
    Ok(Json(node_json(s)))
}

fn node_json(s: &ApiState) -> Value {
    let a = s.daemon.announcements();
    let traffic = match s.daemon.network_status() {
        Some(Ok(st)) => {
            let new_flows: u64 = st.vips.iter().map(|v| v.counters.new_flows).sum();
            let packets: u64 = st.vips.iter().map(|v| v.counters.packets).sum();
            json!({"new_flows": new_flows, "packets": packets})
        }
        Some(Err(e)) => json!({"error": format!("{e:#}")}),
        None => Value::Null,
    };
    json!({
        "bgp": &*a,
        "announced": a.announced_count(),
        "traffic": traffic,
    })
}
