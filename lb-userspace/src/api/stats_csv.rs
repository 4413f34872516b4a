//! `GET /api/v1/stats.csv`: every vService and every member of its lists as one CSV row each,
//! like HAProxy's `show stat`, for spreadsheets and scripts that poll without a JSON parser.
//! A vService row carries the vService's own counters; a backend row the counters of that
//! Backend Service within that vService (L7 requests, or XDP packets, it took from it).

use std::collections::HashMap;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::ApiState;
use super::cli::host_port;
use super::error::ApiError;
use super::view::{Snapshot, kind_name};
use crate::config::ByName;

/// One row; the header is these field names, and a counter a row's kind does not have is
/// left empty.
#[derive(Default, Serialize)]
struct Row<'a> {
    vservice: &'a str,
    /// `vservice` or `backend`.
    row: &'static str,
    kind: &'static str,
    /// `default` or a Conditional set's name (backend rows).
    list: &'a str,
    backend: &'a str,
    address: String,
    /// `main` or `backup`.
    role: &'a str,
    /// `eligible`, `drained` or `down` in that list.
    state: &'a str,
    health: &'a str,
    maintenance: Option<bool>,
    backup: Option<bool>,
    weight: Option<u32>,
    /// The tier serving the list: `mains`, `backup N` or `none`.
    tier: &'a str,
    current: Option<u64>,
    total: Option<u64>,
    bytes_in: Option<u64>,
    bytes_out: Option<u64>,
    http_1xx: Option<u64>,
    http_2xx: Option<u64>,
    http_3xx: Option<u64>,
    http_4xx: Option<u64>,
    http_5xx: Option<u64>,
    unavailable: Option<u64>,
    failures: Option<u64>,
    retries: Option<u64>,
    redispatches: Option<u64>,
    packets: Option<u64>,
    bytes: Option<u64>,
    new_flows: Option<u64>,
    drops: Option<u64>,
    reply_packets: Option<u64>,
    reply_bytes: Option<u64>,
}

/// `GET /api/v1/stats.csv`.
pub(crate) async fn stats_csv(State(st): State<ApiState>) -> Response {
    match render(&Snapshot::take(&st.daemon)) {
        Ok(text) => ([(header::CONTENT_TYPE, "text/csv; charset=utf-8")], text).into_response(),
        Err(e) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("writing the CSV: {e}"),
        )
        .into_response(),
    }
}

/// The whole table, header first.
fn render(snap: &Snapshot) -> Result<String, csv::Error> {
    let mut out = csv::Writer::from_writer(Vec::new());
    let names = ByName::new(&snap.cfg);
    // XDP counters per (vService, backend), summed over a dual-stack vService's two VIPs.
    let mut xdp: HashMap<(&str, &str), lb_common::Counters> = HashMap::new();
    for vip in snap.net.iter().flat_map(|n| &n.vips) {
        for b in &vip.backends {
            xdp.entry((vip.name.as_str(), b.name.as_str()))
                .or_default()
                .add(&b.counters);
        }
    }
    let lists = snap.list_index();
    for vs in &snap.cfg.vservices {
        let view = snap.vservice_in(&lists, vs);
        let counter = |key: &str| view.counters.as_ref()?.get(key)?.as_u64();
        out.serialize(Row {
            vservice: &vs.name,
            row: "vservice",
            kind: kind_name(vs.kind),
            address: host_port(&view.address, &view.ports),
            tier: view.lists.first().map_or("", |l| l.tier.as_str()),
            current: counter("current"),
            total: counter("requests"),
            bytes_in: counter("bytes_in"),
            bytes_out: counter("bytes_out"),
            unavailable: counter("unavailable"),
            retries: counter("retries"),
            packets: counter("packets"),
            bytes: counter("bytes"),
            new_flows: counter("new_flows"),
            drops: counter("drops"),
            reply_packets: counter("reply_packets"),
            reply_bytes: counter("reply_bytes"),
            ..Row::default()
        })?;
        let l7 = snap.proxy.as_ref().and_then(|p| p.get(&vs.name));
        for list in &view.lists {
            for m in &list.members {
                let Some(svc) = names.service(&m.name) else {
                    continue;
                };
                let mut row = Row {
                    vservice: &vs.name,
                    row: "backend",
                    kind: kind_name(vs.kind),
                    list: &list.name,
                    backend: &m.name,
                    address: host_port(&svc.address.to_string(), svc.port),
                    role: m.role,
                    state: m.state,
                    health: snap.health(&m.name),
                    maintenance: Some(svc.maintenance),
                    backup: Some(svc.backup),
                    weight: Some(svc.weight),
                    tier: &list.tier,
                    ..Row::default()
                };
                if let Some(b) = l7.and_then(|c| c.backends.get(&m.name)) {
                    let [c1, c2, c3, c4, c5] = b.classes.map(Some);
                    row = Row {
                        current: Some(b.current),
                        total: Some(b.total),
                        bytes_in: Some(b.bytes_in),
                        bytes_out: Some(b.bytes_out),
                        http_1xx: c1,
                        http_2xx: c2,
                        http_3xx: c3,
                        http_4xx: c4,
                        http_5xx: c5,
                        failures: Some(b.failures),
                        retries: Some(b.retries),
                        redispatches: Some(b.redispatches),
                        ..row
                    };
                }
                if let Some(c) = xdp.get(&(vs.name.as_str(), m.name.as_str())) {
                    row = Row {
                        packets: Some(c.packets),
                        bytes: Some(c.bytes),
                        new_flows: Some(c.new_flows),
                        reply_packets: Some(c.reply_packets),
                        reply_bytes: Some(c.reply_bytes),
                        ..row
                    };
                }
                out.serialize(row)?;
            }
        }
    }
    let bytes = out.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
