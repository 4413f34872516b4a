//! The health report: what the running daemon knows about health, written beside the
//! data-path state for `lb status` and served by the API.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::health::{HealthEngine, View};
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
    let flat: String = pin_dir
        .to_string_lossy()
        .trim_matches('/')
        .chars()
        .map(|c| if c == '/' { '-' } else { c })
        .collect();
    Path::new("/run/lb").join(format!("{flat}.health.json"))
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
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(report)?)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
