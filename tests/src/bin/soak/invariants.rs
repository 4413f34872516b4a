//! The invariants, decided after the run from the clients' records, the API snapshots and
//! the fault log (how each is decided is written in the module doc of `main.rs`).

use crate::events::{Event, Op, Vs};
use crate::faults::{FaultKind, FaultRecord, MtWindow};
use crate::lists::Snapshot;

/// Snapshots must bracket a request with this margin on both sides (the proxy reads the
/// selection when it picks, the API when it answers; both are published at once).
pub const MARGIN_MS: u64 = 300;
/// Two snapshots further apart than this leave the state in between unknown (a daemon
/// restart, a slow API): requests across such a gap are not judged.
pub const GAP_MS: u64 = 600;
/// A stream cut is blamed on a backend fault when it ends within this long after the fault
/// ended (the echo timeout plus one ping interval, with slack).
pub const CUT_SLACK_MS: u64 = 5_000;

/// One violation: which rule, when, and what was seen.
#[derive(Clone, Debug)]
pub struct Violation {
    /// `S-BK1`, `S-BK3`, `S-MT3`, `L4-flow`, `daemon`.
    pub rule: &'static str,
    /// Ms since the start.
    pub at: u64,
    /// What happened.
    pub what: String,
}

/// What the checks found, and how many requests they could judge.
#[derive(Default)]
pub struct Findings {
    /// Every violation.
    pub violations: Vec<Violation>,
    /// Requests answered by a backup that the snapshots judged.
    pub backup_answers_judged: u64,
    /// Requests answered by a backup across a snapshot gap (not judged).
    pub backup_answers_unjudged: u64,
    /// Snapshots read.
    pub snapshots: usize,
}

/// Runs every check.
pub fn check(
    events: &[Event],
    snaps: &[Snapshot],
    faults: &[FaultRecord],
    mt: &[MtWindow],
) -> Findings {
    let mut f = Findings {
        snapshots: snaps.len(),
        ..Findings::default()
    };
    maintenance(events, mt, &mut f);
    backups(events, snaps, &mut f);
    tiers(snaps, &mut f);
    l4_flows(events, faults, &mut f);
    f
}

/// S-MT3: nothing sent after a Maintenance call answered (and before the "off" call was
/// sent) reaches that server: HTTP requests of either list, L7 TCP connections and streams.
/// Stamps are whole milliseconds, so a request stamped in the millisecond of the answer
/// may have been sent before it: only a later millisecond proves "after".
fn maintenance(events: &[Event], mt: &[MtWindow], f: &mut Findings) {
    for w in mt {
        for e in events {
            let same_vs = match w.service.as_bytes()[0] {
                b'w' => matches!(e.vs, Vs::Web | Vs::WebApi),
                b't' => e.vs == Vs::Tcp,
                _ => false,
            };
            if same_vs
                && e.backend == Some(w.backend)
                && e.sent > w.on_answered
                && e.sent < w.off_sent
            {
                f.violations.push(Violation {
                    rule: "S-MT3",
                    at: e.sent,
                    what: format!(
                        "{:?} {:?} sent at {} ms reached {} in Maintenance (the API answered at {} ms)",
                        e.vs, e.op, e.sent, w.service, w.on_answered
                    ),
                });
            }
        }
    }
}

/// The snapshots that bracket [sent, done], if none of them is separated from the next by a
/// gap: the last one answered by `sent - MARGIN`, through the first one asked after
/// `done + MARGIN`.
pub fn bracket(snaps: &[Snapshot], sent: u64, done: u64) -> Option<&[Snapshot]> {
    // Snapshots are in order of both `asked` and `answered` (one poller, one at a time).
    let first = snaps
        .partition_point(|s| s.answered + MARGIN_MS <= sent)
        .checked_sub(1)?;
    let last = snaps.partition_point(|s| s.asked < done + MARGIN_MS);
    if last >= snaps.len() {
        return None;
    }
    let span = &snaps[first..=last];
    span.windows(2)
        .all(|w| w[1].asked.saturating_sub(w[0].answered) <= GAP_MS)
        .then_some(span)
}

/// S-BK1 and S-BK3 per HTTP answer from a backup: wrong if, in every snapshot around it,
/// that backup was not eligible while a main was (S-BK1) or another backup was (S-BK3).
fn backups(events: &[Event], snaps: &[Snapshot], f: &mut Findings) {
    for e in events {
        let list = match e.vs {
            Vs::Web => "default",
            Vs::WebApi => "api",
            _ => continue,
        };
        let Some(b) = e.backend else { continue };
        let name = format!("w{b}");
        let is_backup = |s: &Snapshot| {
            s.list(list)
                .and_then(|l| l.members.iter().find(|m| m.name == name))
                .is_some_and(|m| m.backup)
        };
        // Only answers from a member every bracketing snapshot calls a backup are judged.
        let Some(span) = bracket(snaps, e.sent, e.done) else {
            // w4 and w5 are the configured backups.
            if b > 3 {
                f.backup_answers_unjudged += 1;
            }
            continue;
        };
        if !span.iter().all(is_backup) {
            continue;
        }
        f.backup_answers_judged += 1;
        let eligible_self = span.iter().any(|s| {
            s.list(list)
                .is_some_and(|l| l.members.iter().any(|m| m.name == name && m.eligible))
        });
        if eligible_self {
            continue;
        }
        let main_up = span.iter().all(|s| {
            s.list(list)
                .is_some_and(|l| l.members.iter().any(|m| !m.backup && m.eligible))
        });
        let other_backup = span.iter().all(|s| {
            s.list(list).is_some_and(|l| {
                l.members
                    .iter()
                    .any(|m| m.backup && m.eligible && m.name != name)
            })
        });
        if main_up {
            f.violations.push(Violation {
                rule: "S-BK1",
                at: e.sent,
                what: format!(
                    "backup {name} answered a request of list {list} sent at {} ms while a main was available in every snapshot from {} to {} ms",
                    e.sent,
                    span[0].answered,
                    span[span.len() - 1].asked
                ),
            });
        } else if other_backup {
            f.violations.push(Violation {
                rule: "S-BK3",
                at: e.sent,
                what: format!(
                    "backup {name} answered a request of list {list} sent at {} ms while another backup was the one serving",
                    e.sent
                ),
            });
        }
    }
}

/// S-BK3 in the daemon's own view: a list serving from its backups has exactly one
/// eligible member.
fn tiers(snaps: &[Snapshot], f: &mut Findings) {
    for s in snaps {
        for l in &s.lists {
            let eligible: Vec<&str> = l
                .members
                .iter()
                .filter(|m| m.eligible)
                .map(|m| m.name.as_str())
                .collect();
            if l.tier.starts_with("backup") && eligible.len() != 1 {
                f.violations.push(Violation {
                    rule: "S-BK3",
                    at: s.asked,
                    what: format!(
                        "list {} serves from its backups ({}) with eligible members {eligible:?}",
                        l.name, l.tier
                    ),
                });
            }
        }
    }
}

/// An established NAT or DSR flow is never cut unless its own backend was killed or made
/// silent: not by a reload, a SIGHUP, a weight change, an upgrade or a kill -9 of `lb run`.
fn l4_flows(events: &[Event], faults: &[FaultRecord], f: &mut Findings) {
    for e in events {
        if !matches!(e.vs, Vs::Nat | Vs::Dsr) || e.op != Op::Stream || e.fail.is_none() {
            continue;
        }
        let Some(b) = e.backend else { continue };
        let own = faults.iter().any(|r| {
            matches!(r.kind, FaultKind::BackendKill | FaultKind::BackendSilent)
                && r.backend == Some(b)
                && r.start <= e.done
                && e.done <= r.end + CUT_SLACK_MS
        });
        if own {
            continue;
        }
        let during = faults
            .iter()
            .rev()
            .find(|r| r.start <= e.done && e.done <= r.end + CUT_SLACK_MS)
            .map_or("no fault".to_owned(), |r| r.describe());
        f.violations.push(Violation {
            rule: "L4-flow",
            at: e.done,
            what: format!(
                "{:?} stream to b{b} opened at {} ms cut at {} ms ({}) during: {during}",
                e.vs,
                e.sent,
                e.done,
                e.fail.map(|x| x.label()).unwrap_or_default()
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    //! The decisions of the checks on hand-made records.

    use super::*;
    use crate::events::Fail;
    use crate::lists::{List, Member};

    fn member(name: &str, backup: bool, eligible: bool) -> Member {
        Member {
            name: name.into(),
            backup,
            eligible,
        }
    }

    /// Snapshots every 100 ms from 0 to 2000 ms of the Default list: mains w1 (eligible
    /// when `main_up`), backups w4 then w5 (w4 eligible when the mains are not).
    fn snaps(main_up: impl Fn(u64) -> bool) -> Vec<Snapshot> {
        (0..=20)
            .map(|i| {
                let at = i * 100;
                let up = main_up(at);
                Snapshot {
                    asked: at,
                    answered: at + 5,
                    lists: vec![List {
                        name: "default".into(),
                        tier: if up {
                            "mains".into()
                        } else {
                            "backup 1".into()
                        },
                        members: vec![
                            member("w1", false, up),
                            member("w4", true, !up),
                            member("w5", true, false),
                        ],
                    }],
                }
            })
            .collect()
    }

    fn answer(backend: u8, sent: u64) -> Event {
        Event {
            vs: Vs::Web,
            op: Op::Request,
            sent,
            done: sent + 5,
            backend: Some(backend),
            fail: None,
        }
    }

    #[test]
    fn s_bk1_a_backup_answering_while_a_main_is_eligible_throughout_is_a_violation() {
        let f = check(&[answer(4, 1000)], &snaps(|_| true), &[], &[]);
        assert_eq!(f.violations.len(), 1, "{:?}", f.violations);
        assert_eq!(f.violations[0].rule, "S-BK1");
        assert_eq!(f.backup_answers_judged, 1);
    }

    #[test]
    fn s_bk1_a_backup_answering_near_a_change_of_tier_is_not_a_violation() {
        // The mains return at 1000 ms: a backup answer sent at 900 ms is within the margin.
        let f = check(&[answer(4, 900)], &snaps(|at| at >= 1000), &[], &[]);
        assert!(f.violations.is_empty(), "{:?}", f.violations);
    }

    #[test]
    fn s_bk3_the_second_backup_answering_while_the_first_serves_is_a_violation() {
        let f = check(&[answer(5, 1000)], &snaps(|_| false), &[], &[]);
        assert_eq!(f.violations.len(), 1, "{:?}", f.violations);
        assert_eq!(f.violations[0].rule, "S-BK3");
        let ok = check(&[answer(4, 1000)], &snaps(|_| false), &[], &[]);
        assert!(ok.violations.is_empty(), "{:?}", ok.violations);
    }

    #[test]
    fn answers_across_a_snapshot_gap_are_not_judged() {
        let mut s = snaps(|_| true);
        s.retain(|x| !(800..=1500).contains(&x.asked));
        let f = check(&[answer(4, 1000)], &s, &[], &[]);
        assert!(f.violations.is_empty());
        assert_eq!(f.backup_answers_unjudged, 1);
    }

    #[test]
    fn s_mt3_only_requests_sent_after_the_answer_count() {
        let w = MtWindow {
            service: "w1".into(),
            backend: 1,
            on_answered: 1000,
            off_sent: 2000,
        };
        // 1000: stamped in the answer's millisecond, so possibly sent before it.
        let events = [
            answer(1, 990),
            answer(1, 1000),
            answer(1, 1001),
            answer(1, 2000),
            answer(2, 1500),
        ];
        let f = check(&events, &[], &[], &[w]);
        assert_eq!(f.violations.len(), 1, "{:?}", f.violations);
        assert_eq!(f.violations[0].rule, "S-MT3");
        assert_eq!(f.violations[0].at, 1001);
    }

    #[test]
    fn an_l4_stream_cut_is_a_violation_unless_its_own_backend_was_hit() {
        let cut = |backend: u8| Event {
            vs: Vs::Nat,
            op: Op::Stream,
            sent: 0,
            done: 12_000,
            backend: Some(backend),
            fail: Some(Fail::Reset),
        };
        let kill = FaultRecord {
            kind: FaultKind::BackendKill,
            backend: Some(2),
            service: None,
            start: 10_000,
            end: 14_000,
        };
        let restart = FaultRecord {
            kind: FaultKind::DaemonKill,
            ..kill.clone()
        };
        assert!(
            check(&[cut(2)], &[], std::slice::from_ref(&kill), &[])
                .violations
                .is_empty()
        );
        let f = check(&[cut(1)], &[], &[kill], &[]);
        assert_eq!(f.violations.len(), 1);
        let f = check(&[cut(2)], &[], &[restart], &[]);
        assert_eq!(f.violations[0].rule, "L4-flow");
    }
}
