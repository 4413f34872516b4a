//! `GET /api/v1/stats/live`: the Live Stats page's payload, polled every second by every
//! open page (and by the DNS vServices of other sites): vServices with their counters,
//! Backend Services with their counters and last health check, DNS vServices with what each
//! name answers now. Built in one pass over each collection (O(services + list entries)).
//! With `?history=1` (the page's first poll) it also carries the rates of the last minutes
//! that the daemon sampled ([`super::history`]), so the page draws them at once.

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use axum::http::Uri;
use axum::response::IntoResponse;
use serde::Serialize;
use serde_json::{Value, json};

use super::ApiState;
use super::history::HistoryView;
use super::view::{BackendView, Snapshot, VServiceView};
use crate::config::Config;
use crate::daemon::GslbStatus;
use crate::health::unix_ms_now;

/// The payload, serialized straight to the answer (no intermediate JSON tree: 10,000
/// Backend Services make megabytes of it each second).
#[derive(Serialize)]
struct Live {
    generated_unix_ms: u64,
    vservices: Vec<VServiceView>,
    backends: Vec<LiveBackend>,
    dns_vservices: Vec<Value>,
    /// Route announcement (S-AN): None when `[bgp]` is off.
    bgp: Option<crate::daemon::Announcements>,
    /// With `[cluster] store = "etcd"`: whether etcd answers, the revision running here and
    /// every node with the revision it runs (as last read, not asked of etcd per poll).
    cluster: Option<Value>,
    /// The rates of the last minutes, only when asked (`?history=1`): the page needs them
    /// once, and the DNS vServices of other sites that poll this endpoint not at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    history: Option<HistoryView>,
}

/// A Backend Service as Live Stats shows it: the `/backends` view plus its health details.
#[derive(Serialize)]
struct LiveBackend {
    #[serde(flatten)]
    view: BackendView,
    /// The health check profile's name (None: not checked, always OK).
    health_check: Option<String>,
    /// The latest check, so the page can say what it found and how long it took.
    last_check: Option<LastCheck>,
    /// When the engine's decision took its current value (the latest transition), so the
    /// page can say "OK for 3m12s"; None when no transition was recorded in this run.
    state_since_unix_ms: Option<u64>,
}

/// The latest health check of a Backend Service.
#[derive(Serialize)]
struct LastCheck {
    /// It passed.
    ok: bool,
    /// What it found ("SYN-ACK in 0.2 ms", "connect: connection refused").
    reason: String,
    /// How long it took, in milliseconds (fractional: loopback checks take microseconds).
    duration_ms: f64,
    /// When it started.
    at_unix_ms: u64,
}

/// `GET /api/v1/stats/live[?history=1]`.
pub(crate) async fn live(State(st): State<ApiState>, uri: Uri) -> impl IntoResponse {
    let history = wants_history(uri.query()).then(|| st.history.view());
    let snap = Snapshot::take(&st.daemon);
    let lists = snap.list_index();
    let vservices: Vec<_> = snap
        .cfg
        .vservices
        .iter()
        .map(|v| snap.vservice_in(&lists, v))
        .collect();
    let idx = snap.index();
    let mut checks = st.daemon.engine().last_checks();
    let backends: Vec<LiveBackend> = snap
        .cfg
        .backend_services
        .iter()
        .filter_map(|s| {
            let view = snap.backend_in(&idx, &s.name)?;
            let last_check = checks.remove(&s.name).map(|(record, reason)| LastCheck {
                ok: record.ok,
                reason,
                duration_ms: record.duration.as_secs_f64() * 1000.0,
                at_unix_ms: record.at.unix_ms(),
            });
            let state_since_unix_ms = snap
                .report
                .services
                .get(&s.name)
                .and_then(|r| r.transitions.last())
                .map(|t| t.at_unix_ms);
            Some(LiveBackend {
                view,
                health_check: s.health_check.clone(),
                last_check,
                state_since_unix_ms,
            })
        })
        .collect();
    let dns = match st.daemon.gslb_status().await {
        Some(g) => dns_vservices(&snap.cfg, g),
        None => Vec::new(),
    };
    Json(Live {
        generated_unix_ms: unix_ms_now(),
        vservices,
        backends,
        dns_vservices: dns,
        bgp: Some(st.daemon.announcements())
            .filter(|a| a.enabled)
            .map(|a| (*a).clone()),
        cluster: st.cluster.status().map(|status| {
            json!({
                "node": st.cluster.etcd_settings().map(|(node, _)| node),
                "status": status,
                "nodes": st.cluster.cached_nodes(),
            })
        }),
        history,
    })
}

/// True when the query string asks for the history: `history`, `history=1` (any value but
/// `0`, `false` or `no`), among other parameters in any order.
fn wants_history(query: Option<&str>) -> bool {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (key == "history").then_some(value)
        })
        .any(|v| !matches!(v, "0" | "false" | "no"))
}

/// Every DNS vService in configuration order: where it listens, its counters, and per name
/// the policy, the addresses the next query would get and the status of each site.
fn dns_vservices(cfg: &Config, g: GslbStatus) -> Vec<Value> {
    let mut counters: HashMap<String, Value> = g
        .counters
        .into_iter()
        .map(|c| {
            let name = c.dns_vservice.clone();
            let mut v = serde_json::to_value(c).unwrap_or(Value::Null);
            if let Some(obj) = v.as_object_mut() {
                obj.remove("dns_vservice");
            }
            (name, v)
        })
        .collect();
    let mut sites: HashMap<(String, String), Vec<Value>> = HashMap::new();
    for s in g.sites {
        let site = json!({
            "site": s.key.site, "vservice": s.vservice, "standby": s.standby,
            "state": s.state, "reason": s.reason, "sessions": s.sessions,
            "since_unix_ms": s.since_unix_ms,
        });
        sites
            .entry((s.key.dns_vservice, s.key.record))
            .or_default()
            .push(site);
    }
    let mut names: HashMap<String, Vec<Value>> = HashMap::new();
    for n in g.names {
        let key = (n.dns_vservice.clone(), n.name.clone());
        let v = json!({
            "name": n.name, "policy": n.policy, "answers": n.answers,
            "unreachable": n.unreachable, "a": n.a, "aaaa": n.aaaa,
            "sites": sites.remove(&key).unwrap_or_default(),
        });
        names.entry(n.dns_vservice).or_default().push(v);
    }
    cfg.dns_vservices
        .iter()
        .map(|d| {
            json!({
                "name": d.name,
                "address": d.address.to_string(),
                "port": d.port,
                "zone": d.zone,
                "counters": counters.remove(&d.name),
                "names": names.remove(&d.name).unwrap_or_default(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::wants_history;

    #[test]
    fn the_history_is_sent_only_when_asked() {
        assert!(!wants_history(None));
        assert!(!wants_history(Some("")));
        assert!(!wants_history(Some("history=0")));
        assert!(!wants_history(Some("histories=1")));
        assert!(wants_history(Some("history=1")));
        assert!(wants_history(Some("history")));
        assert!(wants_history(Some("x=2&history=yes")));
    }
}
