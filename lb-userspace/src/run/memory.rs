//! Gives heap memory freed after a burst back to the system.
//!
//! glibc's allocator keeps what it frees: each proxy worker thread allocates from an arena of
//! its own, and an arena hands pages back only from its top, so after a burst of connections
//! closes (100 slow clients, a spike of keep-alive clients) the freed pages between
//! long-lived allocations stay resident and `lb run`'s RSS stays at its peak. Once a second
//! this watches the bytes in use, and when they have fallen well below their peak and stayed
//! there, `malloc_trim(0)` returns every whole free page of every arena (HAProxy trims its
//! pools the same way). Steady load, whose usage rises and falls within a few seconds,
//! does not trim.

use std::time::Duration;

use tracing::debug;

/// How often the bytes in use are read.
const PERIOD: Duration = Duration::from_secs(1);
/// Samples (one a second) the usage must stay low for before a trim: a burst has ended,
/// not a dip between requests.
const SETTLE: usize = 5;
/// A fall smaller than this is not worth a trim (the pages it would free are few, and the
/// next requests fault them back).
const MIN_FALL: usize = 256 * 1024;
/// A fall smaller than this share of the peak is not worth a trim either (a large heap
/// under load moves by more than a fixed amount, and trimming it takes longer). A soak's
/// burst of 100 slow clients frees about a tenth of the daemon's heap.
const PEAK_SHARE: usize = 16;

/// Decides from samples of the bytes in use when a trim is worth it.
#[derive(Debug, Default)]
pub(crate) struct TrimPolicy {
    /// The highest usage since the last trim.
    peak: usize,
    /// The last [`SETTLE`] samples, oldest first.
    recent: std::collections::VecDeque<usize>,
}

impl TrimPolicy {
    /// Takes one sample of the bytes in use; true when the memory should be trimmed now:
    /// every one of the last [`SETTLE`] samples lies below the peak since the last trim by
    /// at least [`MIN_FALL`] and a sixteenth of that peak.
    pub(crate) fn sample(&mut self, in_use: usize) -> bool {
        self.peak = self.peak.max(in_use);
        if self.recent.len() == SETTLE {
            self.recent.pop_front();
        }
        self.recent.push_back(in_use);
        let fall = MIN_FALL.max(self.peak / PEAK_SHARE);
        let settled = self.recent.len() == SETTLE
            && self
                .recent
                .iter()
                .all(|&u| u.saturating_add(fall) <= self.peak);
        if settled {
            self.peak = in_use;
            self.recent.clear();
        }
        settled
    }
}

/// Watches the allocator until the runtime stops, trimming after bursts.
pub(crate) fn spawn() -> tokio::task::JoinHandle<()> {
    tokio::spawn(async {
        let mut policy = TrimPolicy::default();
        let mut tick = tokio::time::interval(PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(in_use) = heap_in_use() else { return };
            if policy.sample(in_use) {
                let started = std::time::Instant::now();
                let returned = trim();
                debug!(
                    in_use_kib = in_use / 1024,
                    returned,
                    took_us = started.elapsed().as_micros(),
                    "freed heap memory returned to the system"
                );
            }
        }
    })
}

/// Bytes the allocator has handed out and not had back (None: not glibc, nothing to do).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn heap_in_use() -> Option<usize> {
    // SAFETY: mallinfo2 only reads the allocator's statistics (glibc 2.33 and later).
    let info = unsafe { libc::mallinfo2() };
    Some(info.uordblks)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap_in_use() -> Option<usize> {
    None
}

/// Returns the free pages of every arena to the system; true when any was returned.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() -> bool {
    // SAFETY: malloc_trim takes each arena's lock and only releases pages no chunk in use
    // lies on.
    unsafe { libc::malloc_trim(0) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    /// A burst that ended (usage down 4 MiB and staying down) is trimmed once,
    /// after SETTLE seconds, and not again while nothing changes.
    #[test]
    fn a_burst_that_ended_is_trimmed_once_it_settled() {
        let mut p = TrimPolicy::default();
        for _ in 0..10 {
            assert!(!p.sample(3 * MIB));
        }
        for _ in 0..10 {
            assert!(!p.sample(7 * MIB), "usage rising or high: no trim");
        }
        let trims: Vec<bool> = (0..10).map(|_| p.sample(3 * MIB)).collect();
        assert_eq!(
            trims,
            [
                false, false, false, false, true, false, false, false, false, false
            ]
        );
    }

    /// Steady load whose usage swings within seconds never trims, nor does a
    /// fall below either bound (256 KiB, a sixteenth of the peak).
    #[test]
    fn swings_and_small_falls_are_not_trimmed() {
        let mut p = TrimPolicy::default();
        for i in 0..100 {
            let in_use = if i % 3 == 0 { 40 * MIB } else { 30 * MIB };
            assert!(!p.sample(in_use), "sample {i}");
        }
        let mut small = TrimPolicy::default();
        assert!(!small.sample(2 * MIB));
        for _ in 0..20 {
            assert!(!small.sample(2 * MIB - 200 * 1024));
        }
        let mut large = TrimPolicy::default();
        assert!(!large.sample(80 * MIB));
        for _ in 0..20 {
            assert!(!large.sample(76 * MIB), "a fall of a twentieth of the peak");
        }
    }

    /// The bytes in use are read from glibc (the binary is built for it) and
    /// count what this test holds (other tests running meanwhile only add to them).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn heap_usage_counts_what_is_held() {
        let held: Vec<Vec<u8>> = (0..64).map(|_| vec![1u8; 64 * 1024]).collect();
        let in_use = heap_in_use().expect("glibc statistics");
        assert!(
            in_use >= 4 * MIB,
            "{in_use} bytes in use while 4 MiB are held"
        );
        drop(held);
        let _ = trim();
    }
}
