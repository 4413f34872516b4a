//! Reading `lb status --json` in the end-to-end tests, and waiting on it.
//!
//! The data path and health tests of both address families read the same fields (VIP and
//! backend counters, `health` and `active`, transitions) and poll the daemon the same way;
//! this module holds that once: [`Sample`], [`watch`], [`wait_all_ok`] and the counter
//! lookups.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use serde_json::Value;

use super::configs::log_tail;
use super::lbctl::{Daemon, find_counter};
use super::topology::Topology;

/// Interval between two `lb status` samples (plus the time one call takes).
pub const POLL: Duration = Duration::from_millis(150);
/// Slack added to every health timing bound: status sampling, process start-up, a loaded host.
pub const MARGIN: f64 = 1.5;

/// Milliseconds since the Unix epoch (the clock of the transitions' `at_unix_ms`).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `d` in seconds.
pub fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Polls `f` every 100 ms until it returns true or `limit` passes.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// The entry of the VIP named `name` in `lb status --json`.
pub fn vip_entry<'a>(status: &'a Value, name: &str) -> Option<&'a Value> {
    status["vips"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == name)
}

/// The `packets` counter of the VIP named `name` in `lb status --json`.
pub fn vip_packets(status: &Value, name: &str) -> Option<u64> {
    vip_entry(status, name)?["counters"]["packets"].as_u64()
}

/// Per backend of VIP `name`: (Backend Service name, `counters.new_flows`).
pub fn backend_new_flows(status: &Value, name: &str) -> Vec<(String, u64)> {
    let Some(list) = vip_entry(status, name).and_then(|v| v["backends"].as_array()) else {
        return Vec::new();
    };
    list.iter()
        .map(|b| {
            (
                b["name"].as_str().unwrap_or_default().to_owned(),
                b["counters"]["new_flows"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// The global counter `name` of `lb status --json`.
pub fn global(status: &Value, name: &str) -> Option<u64> {
    find_counter(&status["global"], name)
}

/// The global counters of `lb status --json`, for failure messages and output.
pub fn globals(status: &Value) -> String {
    status["global"].to_string()
}

/// One health transition as `lb status --json` lists it (S-HC8).
#[derive(Clone, Debug)]
pub struct Transition {
    pub at_unix_ms: u64,
    pub from: String,
    pub to: String,
    pub reason: String,
    pub check_ms: Option<u64>,
}

/// One `lb status --json` answer and when it was asked.
pub struct Sample {
    /// When the call started: the state shown was read no earlier than this.
    pub asked: Instant,
    /// When the answer arrived: the state shown was read no later than this.
    pub answered: Instant,
    pub json: Value,
}

impl Sample {
    pub fn take(topo: &Topology) -> Result<Sample> {
        let asked = Instant::now();
        let json = topo.lb_status()?;
        Ok(Sample {
            asked,
            answered: Instant::now(),
            json,
        })
    }

    /// The entry of Backend Service `backend` in the VIP named `vip`.
    pub fn backend(&self, vip: &str, backend: &str) -> Option<&Value> {
        vip_entry(&self.json, vip)?["backends"]
            .as_array()?
            .iter()
            .find(|b| b["name"] == backend)
    }

    /// `vips[vip].backends[backend].health`: the engine's decision.
    pub fn health(&self, vip: &str, backend: &str) -> Option<&str> {
        self.backend(vip, backend)?["health"].as_str()
    }

    /// `vips[vip].backends[backend].active`: usable in the XDP maps.
    pub fn active(&self, vip: &str, backend: &str) -> Option<bool> {
        self.backend(vip, backend)?["active"].as_bool()
    }

    /// `vips[vip].backends[backend].counters.new_flows`.
    pub fn new_flows(&self, vip: &str, backend: &str) -> Option<u64> {
        self.backend(vip, backend)?["counters"]["new_flows"].as_u64()
    }

    /// True while the daemon has published its health view (null before / without one).
    pub fn has_health(&self) -> bool {
        self.json["health"].is_object()
    }

    /// `health.services[name].state`.
    pub fn service_state(&self, name: &str) -> Option<&str> {
        self.json["health"]["services"][name]["state"].as_str()
    }

    /// `health.servers[addr]` (S-SF).
    pub fn server_state(&self, addr: impl Into<std::net::IpAddr>) -> Option<&str> {
        self.json["health"]["servers"][addr.into().to_string()].as_str()
    }

    /// `health.services[name].transitions`, oldest first as listed.
    pub fn transitions(&self, name: &str) -> Vec<Transition> {
        let Some(list) = self.json["health"]["services"][name]["transitions"].as_array() else {
            return Vec::new();
        };
        list.iter()
            .filter_map(|t| {
                Some(Transition {
                    at_unix_ms: t["at_unix_ms"].as_u64()?,
                    from: t["from"].as_str()?.to_owned(),
                    to: t["to"].as_str()?.to_owned(),
                    reason: t["reason"].as_str().unwrap_or_default().to_owned(),
                    check_ms: t["check_ms"].as_u64(),
                })
            })
            .collect()
    }

    /// The latest transition of `name` into `to` at or after `since_unix_ms`.
    pub fn transition_to(&self, name: &str, to: &str, since_unix_ms: u64) -> Option<Transition> {
        self.transitions(name)
            .into_iter()
            .filter(|t| t.to == to && t.at_unix_ms + 50 >= since_unix_ms)
            .max_by_key(|t| t.at_unix_ms)
    }
}

/// Samples `lb status --json` every [`POLL`] until `step` returns true (it may also assert
/// what must hold on every sample) or `limit` passes; returns the last sample. A failed
/// `lb status` (e.g. before the daemon has loaded anything) only counts as "not yet".
pub fn watch(
    topo: &Topology,
    daemon: &mut Daemon,
    limit: Duration,
    what: &str,
    mut step: impl FnMut(&Sample) -> bool,
) -> Sample {
    let deadline = Instant::now() + limit;
    let mut last: Option<Sample> = None;
    let mut last_err = String::new();
    while Instant::now() < deadline {
        assert!(
            daemon.is_running(),
            "lb run exited while waiting for {what}; log:\n{}",
            log_tail(daemon)
        );
        match Sample::take(topo) {
            Ok(s) => {
                if step(&s) {
                    return s;
                }
                last = Some(s);
            }
            Err(e) => last_err = format!("{e:#}"),
        }
        std::thread::sleep(POLL);
    }
    let shown = last
        .as_ref()
        .map(|s| serde_json::to_string_pretty(&s.json).unwrap_or_default())
        .unwrap_or_else(|| format!("no status (last error: {last_err})"));
    panic!(
        "{what}: not within {limit:?}; last status:\n{shown}\ndaemon log (tail):\n{}",
        log_tail(daemon)
    );
}

/// Waits until every listed backend is OK and active on its VIP (`(vip, backends)` pairs);
/// prints how long that took.
pub fn wait_all_ok(
    topo: &Topology,
    daemon: &mut Daemon,
    vips: &[(&str, &[&str])],
    limit: Duration,
) -> Sample {
    let started = Instant::now();
    let last = watch(topo, daemon, limit, "all backends OK and active", |s| {
        vips.iter().all(|(v, list)| {
            list.iter()
                .all(|b| s.health(v, b) == Some("OK") && s.active(v, b) == Some(true))
        })
    });
    println!(
        "all OK and active {:.2} s after start",
        secs(started.elapsed())
    );
    last
}

/// Entries of the pinned map at `map`, counted by `bpftool map dump`; `None` when bpftool
/// fails or prints something else than a JSON array.
pub fn pinned_map_entries(map: &std::path::Path) -> Option<u64> {
    pinned_map_dump(map).map(|entries| entries.len() as u64)
}

/// The entries of the pinned map at `map` as `bpftool -j map dump` prints them (with BTF,
/// each has its decoded key and value under `formatted`).
pub fn pinned_map_dump(map: &std::path::Path) -> Option<Vec<Value>> {
    let out = std::process::Command::new("bpftool")
        .args(["-j", "map", "dump", "pinned"])
        .arg(map)
        .output()
        .ok()?;
    match serde_json::from_slice(&out.stdout).ok()? {
        Value::Array(entries) => Some(entries),
        _ => None,
    }
}
