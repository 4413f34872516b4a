//! The end-of-run report: per vService what was made and what failed (and why, and under
//! which fault), streams cut, the memory and fd figures, the XDP table occupancy, and the
//! invariants. The last line is `invariant violations: N`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::events::{Event, Fail, Op, Vs};
use crate::faults::{FaultKind, FaultRecord};
use crate::invariants;
use crate::lists::Snapshot;

/// A failure is blamed on a fault when it ends within this long after the fault ended (the
/// Network remove delay, 9 s, plus a check period and the client's own timeouts).
pub const SETTLE_MS: u64 = 15_000;

/// Whether the balancer is expected to hide `kind` from a client of `vs` (by retrying on
/// another backend, draining, or keeping the data path running). A failure under a fault
/// it does not cover is reported apart: L7 traffic through a killed `lb run`, new Network
/// flows to a killed or silent backend before the removal delay, requests on a backend
/// killed mid-answer.
pub fn covered(vs: Vs, kind: FaultKind) -> bool {
    if vs.is_network() {
        !matches!(kind, FaultKind::BackendKill | FaultKind::BackendSilent)
    } else {
        kind != FaultKind::DaemonKill
    }
}

/// How long after its end a fault's effects may last: [`SETTLE_MS`], and for an upgrade
/// the old process's drain timeout (30 s) on top, after which it cuts what is still open.
fn reach(f: &FaultRecord) -> u64 {
    match f.kind {
        FaultKind::Upgrade => f.end + 30_000 + SETTLE_MS,
        _ => f.end + SETTLE_MS,
    }
}

/// Whether fault `f` can touch traffic of `vs` at all.
pub fn affects(f: &FaultRecord, vs: Vs) -> bool {
    let http = matches!(vs, Vs::Web | Vs::WebApi);
    let service = f.service.as_deref().unwrap_or("");
    match f.kind {
        FaultKind::BackendKill | FaultKind::BackendSilent => {
            f.backend.is_some_and(|b| b <= 3) || http
        }
        FaultKind::Health500 | FaultKind::MainsMaintenance | FaultKind::BackupToggle => http,
        FaultKind::Maintenance | FaultKind::Weight => match service.as_bytes().first() {
            Some(b'w') => http,
            Some(b't') => vs == Vs::Tcp,
            Some(b'n') => vs == Vs::Nat,
            _ => true,
        },
        // They must not touch anyone else's traffic: what fails beside them is not theirs.
        FaultKind::Slowloris | FaultKind::Malformed => false,
        FaultKind::Reload
        | FaultKind::SighupInvalid
        | FaultKind::Upgrade
        | FaultKind::DaemonKill => true,
    }
}

/// The fault a failure of `vs`, sent at `sent` and ended at `done`, is blamed on: the
/// latest one that started before it ended, can touch `vs`, and whose effects may still
/// last ([`reach`]). An upgrade's old process cuts what is still open at its drain timeout
/// (30 s after the new one took over, which happened during the fault): an L7 failure then,
/// of a request or connection made before the upgrade ended (so possibly on the old
/// process), is blamed on it before any later fault.
pub fn blame(faults: &[FaultRecord], vs: Vs, sent: u64, done: u64) -> Option<&FaultRecord> {
    let drain_cut = faults.iter().rev().find(|f| {
        f.kind == FaultKind::Upgrade
            && !vs.is_network()
            && sent <= f.end
            && f.start + 29_000 <= done
            && done <= f.end + 31_000
    });
    drain_cut.or_else(|| {
        faults
            .iter()
            .rev()
            .find(|f| f.start <= done && done <= reach(f) && affects(f, vs))
    })
}

/// What the report calls a request that was on its backend when the backend was killed or
/// went silent: no retry can be sure it did not reach the server, so it is counted apart.
/// (S-RT1 allows, and does not require, a retry of an idempotent request that may have
/// reached the backend; the soak's GETs on a silenced backend were answered 504 after the
/// server timeout.)
pub const IN_FLIGHT: &str = "in flight when its backend was killed or silenced";

/// Whether `e` may have been on the backend of fault `f` when it was hit: sent at most
/// 500 ms after a kill began, or, for a silenced backend, before the daemon could take it
/// out (a silent server leaves L7 traffic within 6 s, S-RF3; until then a request the
/// proxy sends on an open connection to it waits for the server timeout). Such a failure
/// is counted as in flight, not as one the balancer should have hidden.
fn in_flight(f: &FaultRecord, e: &Event) -> bool {
    match f.kind {
        FaultKind::BackendKill => e.sent <= f.start + 500,
        FaultKind::BackendSilent => e.sent <= f.start + 6_000,
        _ => false,
    }
}

/// What the report calls an HTTP request answered 5xx while the daemon's own lists showed
/// no server of its list available (e.g. every main in Maintenance while the backup was
/// still down from an earlier kill): nothing could serve it.
pub const NO_SERVER: &str = "no server of its list available (the daemon's lists)";

/// Whether an HTTP failure of `e` came while its list had no eligible member in some
/// snapshot around it (judged only where the snapshots bracket it without a gap).
fn list_empty(snaps: &[Snapshot], e: &Event) -> bool {
    let list = match e.vs {
        Vs::Web => "default",
        Vs::WebApi => "api",
        _ => return false,
    };
    e.fail == Some(Fail::Status5xx)
        && invariants::bracket(snaps, e.sent, e.done).is_some_and(|span| {
            span.iter().any(|s| {
                s.list(list)
                    .is_some_and(|l| !l.members.iter().any(|m| m.eligible))
            })
        })
}

/// Per-vService figures.
#[derive(Default)]
pub struct VsFigures {
    /// Requests (HTTP, UDP) or connections made.
    pub made: BTreeMap<&'static str, u64>,
    /// Failed, by reason.
    pub failed: BTreeMap<&'static str, u64>,
    /// Failures outside any fault.
    pub outside: u64,
    /// Failures under a fault the balancer should hide.
    pub covered: u64,
    /// Failures under a fault it cannot hide, by fault.
    pub uncovered: BTreeMap<&'static str, u64>,
    /// Streams opened, and cut by reason.
    pub streams: u64,
    /// Streams cut, by reason.
    pub cut: BTreeMap<&'static str, u64>,
    /// Streams cut, by the fault they were cut under.
    pub cut_under: BTreeMap<&'static str, u64>,
    /// Answers per backend.
    pub by_backend: BTreeMap<u8, u64>,
}

/// Sums the records per vService; `snaps` tell which HTTP failures came while nothing of
/// their list could serve.
pub fn figures(
    events: &[Event],
    faults: &[FaultRecord],
    snaps: &[Snapshot],
) -> BTreeMap<Vs, VsFigures> {
    let mut out: BTreeMap<Vs, VsFigures> = BTreeMap::new();
    for e in events {
        let f = out.entry(e.vs).or_default();
        if let Some(b) = e.backend {
            *f.by_backend.entry(b).or_default() += 1;
        }
        if e.op == Op::Stream {
            f.streams += 1;
            if let Some(fail) = e.fail {
                *f.cut.entry(fail.label()).or_default() += 1;
                let under =
                    blame(faults, e.vs, e.sent, e.done).map_or("no fault", |r| r.kind.label());
                *f.cut_under.entry(under).or_default() += 1;
            }
            continue;
        }
        let what = if e.op == Op::Request {
            "requests"
        } else {
            "connections"
        };
        *f.made.entry(what).or_default() += 1;
        let Some(fail) = e.fail else { continue };
        *f.failed.entry(fail.label()).or_default() += 1;
        match blame(faults, e.vs, e.sent, e.done) {
            None => f.outside += 1,
            Some(r) if in_flight(r, e) => *f.uncovered.entry(IN_FLIGHT).or_default() += 1,
            Some(_) if list_empty(snaps, e) => *f.uncovered.entry(NO_SERVER).or_default() += 1,
            Some(r) if covered(e.vs, r.kind) => f.covered += 1,
            Some(r) => *f.uncovered.entry(r.kind.label()).or_default() += 1,
        }
    }
    out
}

fn map_line(m: &BTreeMap<&'static str, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The per-vService part of the report.
pub fn vservices(figs: &BTreeMap<Vs, VsFigures>) -> String {
    let mut s = String::new();
    for vs in Vs::ALL {
        let Some(f) = figs.get(&vs) else { continue };
        let _ = writeln!(s, "{}:", vs.label());
        let made: u64 = f.made.values().sum();
        let failed: u64 = f.failed.values().sum();
        let _ = writeln!(
            s,
            "  made: {} ({made} in all), failed: {failed} ({})",
            map_line(&f.made),
            map_line(&f.failed)
        );
        let _ = writeln!(
            s,
            "  failures outside any fault: {}, under a fault the balancer covers (retry, drain, data path kept): {}, under a fault it cannot cover: {}",
            f.outside,
            f.covered,
            map_line(&f.uncovered)
        );
        if f.streams > 0 {
            let cut: u64 = f.cut.values().sum();
            let _ = writeln!(
                s,
                "  streams: {} opened, {cut} cut ({}); cut under: {}",
                f.streams,
                map_line(&f.cut),
                map_line(&f.cut_under)
            );
        }
        let spread: Vec<String> = f
            .by_backend
            .iter()
            .map(|(b, n)| format!("b{b} {n}"))
            .collect();
        let _ = writeln!(s, "  answered by: {}", spread.join(", "));
    }
    s
}

/// Counts of the faults by kind.
pub fn faults(records: &[FaultRecord]) -> String {
    let mut by: BTreeMap<&'static str, u64> = BTreeMap::new();
    for r in records {
        *by.entry(r.kind.label()).or_default() += 1;
    }
    format!("{} faults: {}", records.len(), map_line(&by))
}

/// Every failed record and cut stream as CSV (`failures.csv`), with the fault it is blamed on.
pub fn failures_csv(events: &[Event], faults: &[FaultRecord]) -> String {
    let mut s = String::from("sent_s,done_s,vservice,what,backend,reason,blamed_on\n");
    for e in events.iter().filter(|e| e.fail.is_some()) {
        let _ = writeln!(
            s,
            "{:.3},{:.3},{:?},{:?},{},{},{}",
            e.sent as f64 / 1000.0,
            e.done as f64 / 1000.0,
            e.vs,
            e.op,
            e.backend.map(|b| format!("b{b}")).unwrap_or_default(),
            e.fail.map(|f| f.label()).unwrap_or_default(),
            blame(faults, e.vs, e.sent, e.done).map_or("no fault".into(), |r| r.describe())
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lists::{List, Member};

    fn fault(kind: FaultKind, start: u64, end: u64) -> FaultRecord {
        FaultRecord {
            kind,
            backend: Some(2),
            service: None,
            start,
            end,
        }
    }

    fn failed_5xx(vs: Vs, sent: u64, done: u64) -> Event {
        Event {
            vs,
            op: Op::Request,
            sent,
            done,
            backend: None,
            fail: Some(Fail::Status5xx),
        }
    }

    #[test]
    fn only_what_was_made_before_an_upgrade_ended_is_cut_at_its_drain_timeout() {
        let faults = [
            fault(FaultKind::Upgrade, 10_000, 14_000),
            fault(FaultKind::BackendSilent, 40_000, 45_000),
        ];
        // A stream opened before the upgrade, cut 30 s after it.
        let cut = blame(&faults, Vs::Web, 5_000, 42_000).map(|f| f.kind);
        assert_eq!(cut, Some(FaultKind::Upgrade));
        // A request sent long after it, on a backend that just went silent.
        let late = blame(&faults, Vs::Web, 40_000, 45_000).map(|f| f.kind);
        assert_eq!(late, Some(FaultKind::BackendSilent));
    }

    /// Snapshots every 100 ms of the `api` list: w2 a main, w5 its backup, both eligible
    /// only when `up` says so.
    fn snaps(up: impl Fn(u64) -> bool) -> Vec<Snapshot> {
        (0..=20)
            .map(|i| {
                let at = 61_000 + i * 100;
                let eligible = up(at);
                Snapshot {
                    asked: at,
                    answered: at + 5,
                    lists: vec![List {
                        name: "api".into(),
                        tier: if eligible { "backup 1" } else { "none" }.into(),
                        members: vec![
                            Member {
                                name: "w2".into(),
                                backup: false,
                                eligible: false,
                            },
                            Member {
                                name: "w5".into(),
                                backup: true,
                                eligible,
                            },
                        ],
                    }],
                }
            })
            .collect()
    }

    #[test]
    fn a_5xx_while_the_list_had_no_server_is_not_one_the_balancer_covers() {
        let faults = [fault(FaultKind::MainsMaintenance, 61_500, 66_000)];
        let e = failed_5xx(Vs::WebApi, 61_700, 61_701);
        let down = figures(std::slice::from_ref(&e), &faults, &snaps(|at| at > 62_000));
        let f = &down[&Vs::WebApi];
        assert_eq!((f.covered, f.uncovered.get(NO_SERVER)), (0, Some(&1)));
        let up = figures(&[e], &faults, &snaps(|_| true));
        assert_eq!(up[&Vs::WebApi].covered, 1);
    }
}
