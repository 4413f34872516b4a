//! Config text for the end-to-end tests, and loading it into a [`Topology`].
//!
//! Every e2e test file writes the same `[[backend_service]]`, `[[health_check]]` and
//! `[[vservice]]` entries and validates them with the library's parser before `lb load` /
//! `lb run` (a clear error early); this module is that one copy, for either address family.

use std::net::IpAddr;
use std::time::Duration;

use super::family::Family;
use super::lbctl::Daemon;
use super::topology::Topology;

/// `[[backend_service]]` entries b1..bN at their `family` addresses, `port`, the weights.
pub fn backend_services(topo: &Topology, family: Family, port: u16, weights: &[u32]) -> String {
    topo.backends
        .iter()
        .zip(weights)
        .enumerate()
        .map(|(i, (b, w))| {
            format!(
                "[[backend_service]]\nname = \"{}\"\naddress = \"{}\"\nport = {port}\nweight = {w}\n\n",
                b.name,
                family.backend_addr(topo, i)
            )
        })
        .collect()
}

/// One `[[vservice]]` entry; `ports` is a TOML line such as `port = 80`, or empty for ANY-L3.
pub fn vservice(
    name: &str,
    kind: &str,
    vip: impl Into<IpAddr>,
    ports: &str,
    fwd: &str,
    backends: &[&str],
) -> String {
    let vip: IpAddr = vip.into();
    let list: Vec<String> = backends.iter().map(|b| format!("\"{b}\"")).collect();
    format!(
        "[[vservice]]\nname = \"{name}\"\nkind = \"{kind}\"\naddress = \"{vip}\"\n{ports}\nforwarding = \"{fwd}\"\nbackends = [{}]\n\n",
        list.join(", ")
    )
}

/// A `[[health_check]]` profile; `extra` holds further `key = value` lines (may be empty).
pub fn check(name: &str, kind: &str, extra: &str) -> String {
    format!("[[health_check]]\nname = \"{name}\"\ntype = \"{kind}\"\n{extra}\n")
}

/// A `[[backend_service]]` at `addr:port` checked by profile `check`.
pub fn checked_service(name: &str, addr: impl Into<IpAddr>, port: u16, check: &str) -> String {
    let addr: IpAddr = addr.into();
    format!(
        "[[backend_service]]\nname = \"{name}\"\naddress = \"{addr}\"\nport = {port}\nhealth_check = \"{check}\"\n\n"
    )
}

/// b1..bN of the topology at their `family` addresses and `port`, all checked by `check`.
pub fn checked_services(topo: &Topology, family: Family, port: u16, check: &str) -> String {
    (0..topo.backends.len())
        .map(|i| {
            checked_service(
                &topo.backends[i].name,
                family.backend_addr(topo, i),
                port,
                check,
            )
        })
        .collect()
}

/// The backends' names, b1..bN.
pub fn all_names(topo: &Topology) -> Vec<&str> {
    topo.backends.iter().map(|b| b.name.as_str()).collect()
}

/// Validates `cfg` with the library's parser (a clear error early).
pub fn validated(cfg: &str) {
    if let Err(e) = lb::config::parse(cfg, "e2e test config") {
        panic!("test config invalid: {e}\n{cfg}");
    }
}

/// Validates `cfg`, then `lb load`s it.
pub fn load(topo: &Topology, cfg: &str) {
    validated(cfg);
    topo.lb_load(cfg).expect("lb load");
}

/// Validates `cfg`, then starts `lb run`.
pub fn start_daemon(topo: &Topology, cfg: &str) -> Daemon {
    validated(cfg);
    topo.lb_run(cfg).expect("start lb run")
}

/// Asks SIGTERM and waits; the topology's drop removes the pins (and so the program).
pub fn stop_daemon(mut daemon: Daemon) {
    if daemon.signal(libc::SIGTERM).is_ok() {
        let _ = daemon.wait_exit(Duration::from_secs(10));
    }
}

/// The last 4000 bytes of the daemon's log (for failure messages).
pub fn log_tail(daemon: &Daemon) -> String {
    let log = daemon.log();
    let start = log.len().saturating_sub(4000);
    let start = (start..log.len())
        .find(|&i| log.is_char_boundary(i))
        .unwrap_or(log.len());
    log[start..].to_owned()
}
