//! The clock seam: every wait and every time stamp of the health engine comes from
//! `tokio::time`, so a paused test clock drives checks, decisions and the logs alike.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Maps tokio instants to wall-clock time, anchored when the engine starts.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: Instant,
    origin_wall: SystemTime,
}

impl Clock {
    /// Anchors the clock at the current tokio instant and wall time.
    pub fn start() -> Self {
        Self {
            origin: Instant::now(),
            origin_wall: SystemTime::now(),
        }
    }

    /// The stamp of `at`.
    pub fn stamp(&self, at: Instant) -> Stamp {
        self.at(at.saturating_duration_since(self.origin))
    }

    /// The stamp of the moment `since_start` after the engine started.
    pub fn at(&self, since_start: Duration) -> Stamp {
        Stamp {
            at: self.origin_wall + since_start,
            since_start,
        }
    }

    /// The stamp of now.
    pub fn now(&self) -> Stamp {
        self.stamp(Instant::now())
    }
}

/// A moment, both as wall time (for operators) and as time since the engine started (for
/// arithmetic that must hold on a paused clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp {
    /// Wall-clock time.
    pub at: SystemTime,
    /// Time since the engine started, on the tokio clock.
    pub since_start: Duration,
}

impl Stamp {
    /// Milliseconds since the Unix epoch, the form logs and the API show.
    pub fn unix_ms(&self) -> u64 {
        unix_ms_of(self.at)
    }
}

/// Milliseconds since the Unix epoch now (wall time written to files that outlive a run).
pub fn unix_ms_now() -> u64 {
    unix_ms_of(SystemTime::now())
}

fn unix_ms_of(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
