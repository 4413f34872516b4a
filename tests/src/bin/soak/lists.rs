//! The daemon's own view of the HTTP vService's lists, polled from the API every 100 ms:
//! for each list its serving tier and each member's role (main or backup) and state
//! (eligible, drained, down). This is what the proxy follows (`GET /api/v1/vservices/web`
//! reads the selections the proxy uses), so the invariants compare what clients saw with it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use crate::api;
use crate::events::now_ms;

/// One member of a list in one snapshot.
#[derive(Clone, Debug)]
pub struct Member {
    /// Backend Service name (`w1`...).
    pub name: String,
    /// `main` or `backup`.
    pub backup: bool,
    /// State `eligible` (takes new traffic).
    pub eligible: bool,
}

/// One list in one snapshot.
#[derive(Clone, Debug)]
pub struct List {
    /// `default` or the Conditional set's name.
    pub name: String,
    /// `mains`, `backup N` or `none`.
    pub tier: String,
    /// Its members in list order.
    pub members: Vec<Member>,
}

/// One poll: asked at `asked`, answered at `answered` (ms since the start); the state it
/// shows held at some moment in between.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// When the request was sent.
    pub asked: u64,
    /// When the answer was in.
    pub answered: u64,
    /// The lists.
    pub lists: Vec<List>,
}

impl Snapshot {
    /// The list called `name`.
    pub fn list(&self, name: &str) -> Option<&List> {
        self.lists.iter().find(|l| l.name == name)
    }
}

/// Every snapshot of the run, in order.
#[derive(Clone, Default)]
pub struct Snapshots(Arc<Mutex<Vec<Snapshot>>>);

impl Snapshots {
    /// All of them.
    pub fn all(&self) -> Vec<Snapshot> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }

    fn push(&self, s: Snapshot) {
        if let Ok(mut v) = self.0.lock() {
            v.push(s);
        }
    }
}

fn parse(v: &Value, asked: u64, answered: u64) -> Option<Snapshot> {
    let lists = v["lists"].as_array()?;
    let lists = lists
        .iter()
        .map(|l| List {
            name: l["name"].as_str().unwrap_or_default().to_owned(),
            tier: l["tier"].as_str().unwrap_or_default().to_owned(),
            members: l["members"]
                .as_array()
                .map(|ms| {
                    ms.iter()
                        .map(|m| Member {
                            name: m["name"].as_str().unwrap_or_default().to_owned(),
                            backup: m["role"] == "backup",
                            eligible: m["state"] == "eligible",
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect();
    Some(Snapshot {
        asked,
        answered,
        lists,
    })
}

/// Polls the lists every 100 ms until `stop` (a poll that fails, e.g. while the daemon
/// restarts, leaves a gap the invariants treat as unknown).
pub async fn poll(out: Snapshots, stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        let asked = now_ms();
        if let Ok(Ok((200, v))) = tokio::time::timeout(
            Duration::from_secs(2),
            api::call("GET", "/api/v1/vservices/web", None),
        )
        .await
            && let Some(s) = parse(&v, asked, now_ms())
        {
            out.push(s);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
