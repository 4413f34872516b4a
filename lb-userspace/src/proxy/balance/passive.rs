//! Passive health (S-RT3): consecutive failures of live traffic per backend, reported to the
//! health engine when they reach the profile's `passive_failures`. Counting costs one
//! relaxed load per successful exchange; only a failure writes.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use super::eject::Ejections;

/// Live traffic to a Backend Service failed `passive_failures` times in a row: the daemon
/// hands this to the health engine, which puts the service in Error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveFailure {
    /// The Backend Service.
    pub backend: String,
    /// What the failures were, for its transition log.
    pub reason: String,
}

/// How one exchange with a backend failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveError {
    /// Connecting failed (refused, unreachable, timed out).
    Connect,
    /// The connection closed or failed before a complete answer head.
    NoAnswer,
    /// No answer within the server timeout.
    Timeout,
    /// The answer could not be parsed, or was not what the request allows.
    BadAnswer,
    /// The answer was cut short.
    Aborted,
    /// The backend answered with this 5xx status.
    Status(u16),
}

impl fmt::Display for LiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LiveError::Connect => f.write_str("connect failed"),
            LiveError::NoAnswer => f.write_str("connection closed without an answer"),
            LiveError::Timeout => f.write_str("no answer within the server timeout"),
            LiveError::BadAnswer => f.write_str("malformed answer"),
            LiveError::Aborted => f.write_str("answer cut short"),
            LiveError::Status(code) => write!(f, "HTTP {code} answer"),
        }
    }
}

/// One backend's run of live failures within a pool.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    run: AtomicU32,
    report: Option<Arc<Ejections>>,
}

impl Watch {
    /// A watch that reports to `report`, under its ejection cap (None: counts, reports
    /// nowhere).
    pub(crate) fn new(report: Option<Arc<Ejections>>) -> Watch {
        Watch {
            run: AtomicU32::new(0),
            report,
        }
    }

    /// An exchange went well: the run ends.
    pub(crate) fn ok(&self) {
        if self.run.load(Ordering::Relaxed) != 0 {
            self.run.store(0, Ordering::Relaxed);
        }
    }

    /// An exchange with `backend` failed; reports when the run reaches `limit`, and starts
    /// counting anew (the service may return, and its next run must be reported too).
    pub(crate) fn failed(&self, backend: &str, limit: Option<u32>, error: LiveError) {
        let Some(limit) = limit else {
            return;
        };
        let run = self.run.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if run != limit.max(1) {
            return;
        }
        self.run.store(0, Ordering::Relaxed);
        if let Some(report) = &self.report {
            let reason = format!("{run} consecutive failures, the last: {error}");
            report.failed(LiveFailure {
                backend: backend.to_owned(),
                reason,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s_rt3_each_run_of_failures_is_reported_and_a_success_ends_it() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let published = Arc::new(crate::selection::Published::default());
        let watch = Watch::new(Some(Arc::new(Ejections::new(tx, published))));
        watch.failed("a", Some(3), LiveError::Connect);
        watch.failed("a", Some(3), LiveError::Connect);
        watch.ok();
        watch.failed("a", Some(3), LiveError::Connect);
        watch.failed("a", Some(3), LiveError::Status(503));
        assert!(rx.try_recv().is_err(), "the success ended the first run");
        watch.failed("a", Some(3), LiveError::Timeout);
        let report = rx.try_recv().expect("reported at the third");
        assert_eq!(report.backend, "a");
        assert_eq!(
            report.reason,
            "3 consecutive failures, the last: no answer within the server timeout"
        );
        watch.failed("a", Some(3), LiveError::Timeout);
        watch.failed("a", Some(3), LiveError::Timeout);
        assert!(rx.try_recv().is_err(), "a new run starts after a report");
        watch.failed("a", Some(3), LiveError::Timeout);
        assert!(rx.try_recv().is_ok(), "and is reported in turn");
        watch.failed("b", None, LiveError::Connect);
        assert!(rx.try_recv().is_err(), "off without passive_failures");
    }
}
