//! A latency histogram with fixed buckets, recorded from many threads without contention.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in seconds (Prometheus' `le`), from half a millisecond (a
/// proxied request on loopback) to 10 s (a check or request that hit its timeout). Values
/// above the last bound only count in `+Inf`.
pub const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The same bounds in microseconds, compared against each observation.
const BOUNDS_US: [u64; 14] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];

/// Slots of one shard: a count per bucket, the `+Inf` overflow, then the sum in microseconds.
const SLOTS: usize = BUCKETS.len() + 2;
const SUM: usize = SLOTS - 1;

/// Shards of a histogram; threads beyond this many share them.
const SHARDS: usize = 4;

/// One thread's part, on cache lines of its own.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard([AtomicU64; SLOTS]);

/// A latency histogram: each thread adds to its own shard (two relaxed additions per
/// observation, no shared cache line between proxy workers), and a read sums the shards.
#[derive(Debug, Default)]
pub struct Histogram([Shard; SHARDS]);

impl Histogram {
    /// Records one duration.
    pub fn observe(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let bucket = BOUNDS_US
            .iter()
            .position(|&bound| us <= bound)
            .unwrap_or(BUCKETS.len());
        let shard = &self.0[shard()].0;
        shard[bucket].fetch_add(1, Ordering::Relaxed);
        shard[SUM].fetch_add(us, Ordering::Relaxed);
    }

    /// Every bucket and the sum at this moment (summed over the shards).
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut counts = [0u64; BUCKETS.len() + 1];
        let mut sum_us = 0u64;
        for shard in &self.0 {
            for (total, slot) in counts.iter_mut().zip(&shard.0) {
                *total = total.wrapping_add(slot.load(Ordering::Relaxed));
            }
            sum_us = sum_us.wrapping_add(shard.0[SUM].load(Ordering::Relaxed));
        }
        HistogramSnapshot { counts, sum_us }
    }
}

/// The calling thread's shard, given out in turn the first time a thread records.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

/// A histogram read at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Observations per bucket (not cumulative); the last is above every bound.
    pub counts: [u64; BUCKETS.len() + 1],
    /// Sum of the observations, in microseconds.
    pub sum_us: u64,
}

impl HistogramSnapshot {
    /// Observations in all.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Sum of the observations in seconds.
    pub fn sum_seconds(&self) -> f64 {
        self.sum_us as f64 / 1e6
    }

    /// Cumulative counts per bound, as Prometheus' `_bucket{le}` series want them; the last
    /// is `+Inf` (the count).
    pub fn cumulative(&self) -> [u64; BUCKETS.len() + 1] {
        let mut out = self.counts;
        for i in 1..out.len() {
            out[i] += out[i - 1];
        }
        out
    }

    /// Adds another snapshot (the same histogram of several parts).
    pub fn absorb(&mut self, other: &HistogramSnapshot) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts) {
            *mine += theirs;
        }
        self.sum_us += other.sum_us;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let h = Histogram::default();
        for ms in [0.1, 0.5, 0.7, 3.0, 3.0, 20_000.0] {
            h.observe(Duration::from_secs_f64(ms / 1000.0));
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 6);
        // 0.1 ms and 0.5 ms fall in le=0.0005 (bounds are inclusive), 0.7 ms in le=0.001.
        assert_eq!(&s.counts[..3], &[2, 1, 0]);
        assert_eq!(s.counts[3], 2, "3 ms in le=0.005");
        assert_eq!(s.counts[BUCKETS.len()], 1, "20 s only in +Inf");
        let cumulative = s.cumulative();
        assert_eq!(cumulative[BUCKETS.len()], 6);
        assert!(cumulative.windows(2).all(|w| w[0] <= w[1]));
        assert!(
            (s.sum_seconds() - 20.0073).abs() < 1e-6,
            "{}",
            s.sum_seconds()
        );
    }

    #[test]
    fn threads_record_into_shards_and_the_read_sums_them() {
        let h = std::sync::Arc::new(Histogram::default());
        let threads: Vec<_> = (0..6)
            .map(|_| {
                let h = h.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        h.observe(Duration::from_millis(2));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("a recording thread");
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 6000);
        assert_eq!(s.counts[2], 6000, "2 ms in le=0.0025");
        assert_eq!(s.sum_us, 12_000_000);
    }
}
