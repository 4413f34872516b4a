//! Polling a site daemon's API (S-GS4): one `GET {api}/api/v1/stats/live` per period, read
//! into an [`Observation`] per site service that names a vService at that site.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::Request;
use hyper::header::{AUTHORIZATION, HeaderValue};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::status::{Observation, SiteState};

/// Largest stats document read; a bigger one is garbage for our purpose.
const MAX_BODY: usize = 8 << 20;
/// Path of the live stats document on a site daemon.
const LIVE_PATH: &str = "/api/v1/stats/live";

/// A plain-HTTP client for site APIs.
pub type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// A client with a connect timeout; connections are reused between polls.
pub fn client(timeout: Duration) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(timeout));
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector)
}

/// Fetches and parses a site's live stats within `timeout`; the error is the No Connection
/// reason in words.
pub async fn fetch(
    client: &HttpClient,
    api: &str,
    token: Option<&str>,
    timeout: Duration,
) -> Result<Value, String> {
    match tokio::time::timeout(timeout, fetch_inner(client, api, token)).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
    }
}

async fn fetch_inner(client: &HttpClient, api: &str, token: Option<&str>) -> Result<Value, String> {
    let mut request = Request::get(format!("{api}{LIVE_PATH}"))
        .body(Empty::new())
        .map_err(|e| format!("bad request: {e}"))?;
    if let Some(token) = token {
        let value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| "token is not a valid header value".to_owned())?;
        request.headers_mut().insert(AUTHORIZATION, value);
    }
    let response = client
        .request(request)
        .await
        .map_err(|e| format!("request failed: {}", chain(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("HTTP {status}"));
    }
    let body = Limited::new(response.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| format!("reading the answer failed: {e}"))?
        .to_bytes();
    let doc: Value =
        serde_json::from_slice(&body).map_err(|e| format!("answer is not JSON: {e}"))?;
    if !doc.get("vservices").is_some_and(Value::is_array) {
        return Err("answer has no `vservices` array".into());
    }
    Ok(doc)
}

/// An error with its sources, so "connection refused" shows, not only "client error".
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

/// The status of vService `name` in a site's live stats document (S-GS4).
pub fn evaluate(doc: &Value, name: &str) -> Observation {
    let found = doc["vservices"]
        .as_array()
        .and_then(|all| all.iter().find(|vs| vs["name"].as_str() == Some(name)));
    let Some(vs) = found else {
        return seen(
            SiteState::NoMetrics,
            format!("the site does not report vservice `{name}`"),
            None,
        );
    };
    let tier = vs["lists"].as_array().and_then(|lists| {
        lists
            .iter()
            .find(|list| list["name"].as_str() == Some("default"))
            .and_then(|list| list["tier"].as_str())
    });
    match tier {
        None => seen(
            SiteState::NoMetrics,
            format!("vservice `{name}` reports no default list tier"),
            None,
        ),
        Some("none") => seen(
            SiteState::NoServices,
            format!("vservice `{name}` has no available backend (tier none)"),
            sessions(doc, vs, name),
        ),
        Some(tier) => match sessions(doc, vs, name) {
            Some(count) => seen(
                SiteState::Ok,
                format!("vservice `{name}` serves ({tier})"),
                Some(count),
            ),
            None => seen(
                SiteState::NoMetrics,
                format!("vservice `{name}` serves ({tier}) but reports no session counters"),
                None,
            ),
        },
    }
}

fn seen(state: SiteState, reason: String, sessions: Option<u64>) -> Observation {
    Observation {
        state,
        reason,
        sessions,
    }
}

/// Current sessions of the vService: its own L7 `current` counter, else the sum of
/// `current_sessions` over the backends it uses. None when neither is reported.
fn sessions(doc: &Value, vs: &Value, name: &str) -> Option<u64> {
    if let Some(current) = vs["counters"]["current"].as_u64() {
        return Some(current);
    }
    let uses = |backend: &&Value| {
        backend["used_in"].as_array().is_some_and(|used| {
            used.iter()
                .any(|u| u.as_str() == Some(name) || u["vservice"].as_str() == Some(name))
        })
    };
    let counts: Vec<Option<u64>> = doc["backends"]
        .as_array()?
        .iter()
        .filter(uses)
        .map(|b| b["current_sessions"].as_u64())
        .collect();
    if counts.is_empty() {
        return None;
    }
    counts.into_iter().sum()
}
