//! The health report: what the running daemon knows about health, written beside the
//! data-path state for `lb status` and served by the API.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::health::{HealthEngine, Restored, View, unix_ms_now};
use crate::network::{run_file, write_atomically};
use crate::selection::{Health, server_state};

/// One health transition as reported.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReportTransition {
    /// Wall-clock time of the decision.
    pub at_unix_ms: u64,
    /// Previous state.
    pub from: String,
    /// New state.
    pub to: String,
    /// The last check's result.
    pub reason: String,
    /// The last check's duration.
    pub check_ms: u64,
}

/// One Backend Service as reported.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReportService {
    /// The engine's decision: OK, Error or Preparing.
    pub state: String,
    /// True when a health check is assigned.
    pub checked: bool,
    /// What Network traffic follows (after the S-RF2 delays).
    pub network: String,
    /// What HTTP / L7 TCP traffic follows (after the S-RF1 delay).
    pub l7: String,
    /// Recent transitions, oldest first (S-HC8).
    pub transitions: Vec<ReportTransition>,
}

/// Everything the daemon reports about health.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HealthReport {
    /// By health key: the Backend Service's name, and `NAME (IPv6)` for the `address6` of a
    /// dual-stack one.
    pub services: BTreeMap<String, ReportService>,
    /// Server state per address (S-SF): OK, Failed or Preparing.
    pub servers: BTreeMap<String, String>,
    /// Set while writing the XDP maps fails (the previous contents stay in force).
    pub network_error: Option<String>,
}

/// Where the running daemon of `pin_dir` writes its report.
pub fn report_path(pin_dir: &Path) -> PathBuf {
    run_file(pin_dir, "health.json")
}

/// The last report of the daemon of `pin_dir`, if one ran.
pub fn read_report(pin_dir: &Path) -> Option<HealthReport> {
    let bytes = std::fs::read(report_path(pin_dir)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

pub(crate) fn build_report(
    cfg: &Config,
    engine: &HealthEngine,
    net: &View,
    l7: &View,
) -> HealthReport {
    let snap = engine.snapshot();
    let mut report = HealthReport::default();
    let mut per_server: Vec<(IpAddr, Health)> = Vec::new();
    for svc in &cfg.backend_services {
        for (key, address) in svc.health_targets() {
            let Some(h) = snap.services.get(key.as_ref()) else {
                continue;
            };
            per_server.push((address, h.state));
            let transitions = engine
                .transitions(&key)
                .into_iter()
                .map(|t| ReportTransition {
                    at_unix_ms: t.at.unix_ms(),
                    from: t.from.to_string(),
                    to: t.to.to_string(),
                    reason: t.reason,
                    check_ms: t.check_duration.as_millis() as u64,
                })
                .collect();
            let service = ReportService {
                state: h.state.to_string(),
                checked: h.checked,
                network: net.get(&key).to_string(),
                l7: l7.get(&key).to_string(),
                transitions,
            };
            report.services.insert(key.into_owned(), service);
        }
    }
    for (addr, state) in server_state(&per_server) {
        let s = match state {
            crate::selection::ServerState::Ok => "OK",
            crate::selection::ServerState::Failed => "Failed",
            crate::selection::ServerState::Preparing => "Preparing",
        };
        report.servers.insert(addr.to_string(), s.into());
    }
    report
}

pub(crate) fn write_report(path: &Path, report: &HealthReport) -> Result<()> {
    write_atomically(path, &serde_json::to_vec_pretty(report)?)
}

/// A restart within this long after the last save starts services in their saved states.
pub const RESTORE_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// The saved health states, as written.
#[derive(Serialize, Deserialize)]
struct SavedStates {
    saved_at_unix_ms: u64,
    services: BTreeMap<String, Restored>,
}

/// Where `lb run` with configuration `config_path` saves its health states across restarts.
pub fn states_path(config_path: &Path) -> PathBuf {
    let absolute = std::fs::canonicalize(config_path).unwrap_or_else(|_| config_path.into());
    run_file(&absolute, "states.json")
}

/// Every checked service's decided state (OK or Error), with what it was decided for.
pub(crate) fn current_states(cfg: &Config, engine: &HealthEngine) -> BTreeMap<String, Restored> {
    let snap = engine.snapshot();
    let mut out = BTreeMap::new();
    for svc in &cfg.backend_services {
        let Some(check) = &svc.health_check else {
            continue;
        };
        for (key, address) in svc.health_targets() {
            let Some(h) = snap.services.get(key.as_ref()) else {
                continue;
            };
            if h.checked && h.state != Health::Preparing {
                let saved = Restored {
                    state: h.state,
                    address,
                    port: svc.port,
                    check: check.clone(),
                };
                out.insert(key.into_owned(), saved);
            }
        }
    }
    out
}

/// Writes `services` as the states saved now.
pub(crate) fn save_states(path: &Path, services: &BTreeMap<String, Restored>) -> Result<()> {
    let saved = SavedStates {
        saved_at_unix_ms: unix_ms_now(),
        services: services.clone(),
    };
    write_atomically(path, &serde_json::to_vec(&saved)?)
}

/// Marks the states saved at `path` as still current (the file's modification time), when
/// nothing changed since they were written.
pub(crate) fn touch_states(path: &Path) -> Result<()> {
    std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(std::time::SystemTime::now()))
        .with_context(|| format!("touching {}", path.display()))
}

/// When the states at `path` were last confirmed: the later of the time written in the file
/// and the file's modification time ([`touch_states`]).
fn confirmed_at(path: &Path, saved_at_unix_ms: u64) -> u64 {
    let touched = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    saved_at_unix_ms.max(touched)
}

/// The states saved at `path` within `within` of now; empty (with a warning) when the file
/// is unreadable or corrupt, empty (with a note) when it is older.
pub fn read_states(path: &Path, within: std::time::Duration) -> HashMap<String, Restored> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return HashMap::new(),
        Err(e) => {
            tracing::warn!(
                "saved health states {}: {e}; checks start from Preparing",
                path.display()
            );
            return HashMap::new();
        }
    };
    let saved: SavedStates = match serde_json::from_slice(&bytes) {
        Ok(saved) => saved,
        Err(e) => {
            tracing::warn!(
                "saved health states {} are corrupt ({e}); checks start from Preparing",
                path.display()
            );
            return HashMap::new();
        }
    };
    let age = unix_ms_now().saturating_sub(confirmed_at(path, saved.saved_at_unix_ms));
    if age > within.as_millis() as u64 {
        tracing::info!(
            age_s = age / 1000,
            "saved health states are too old; checks start from Preparing"
        );
        return HashMap::new();
    }
    tracing::info!(
        services = saved.services.len(),
        age_ms = age,
        "health states restored from the previous run"
    );
    saved.services.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No rule of docs/behaviour.md covers restarts: a stale or corrupt saved state is
    /// ignored (checks start from Preparing), so a restart never acts on old or broken
    /// decisions, and a fresh one is restored.
    #[test]
    fn saved_states_are_restored_only_fresh_and_well_formed() {
        let dir = std::env::temp_dir().join(format!("lb-states-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("states.json");
        let within = std::time::Duration::from_secs(30);
        let web = Restored {
            state: Health::Ok,
            address: "127.0.0.1".parse().expect("ip"),
            port: 80,
            check: "tcp".into(),
        };
        save_states(&path, &[("web".to_string(), web.clone())].into()).expect("save");
        assert_eq!(read_states(&path, within).get("web"), Some(&web));
        std::fs::write(&path, b"{ not json").expect("write");
        assert!(read_states(&path, within).is_empty(), "corrupt");
        // Written 31 s ago and not confirmed since: too old.
        let stale = format!(
            r#"{{"saved_at_unix_ms": {}, "services": {{"web": {}}}}}"#,
            unix_ms_now() - 31_000,
            serde_json::to_string(&web).expect("json")
        );
        std::fs::write(&path, stale).expect("write");
        let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(31);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(long_ago))
            .expect("set mtime");
        assert!(read_states(&path, within).is_empty(), "older than 30 s");
        // The same states confirmed unchanged a moment ago are current.
        touch_states(&path).expect("touch");
        assert_eq!(read_states(&path, within).get("web"), Some(&web));
        assert!(read_states(&dir.join("absent.json"), within).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
