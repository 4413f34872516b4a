//! Peak-sensitive moving average of one backend's time to answer, for `peak-ewma`.
//!
//! The shape is tower's `PeakEwma` (linkerd's balancer): a sample above the estimate replaces
//! it at once, so a server that slows down loses traffic at its first slow answer; a sample
//! below is blended in with weight `1 - exp(-elapsed / TAU)`, so one fast answer does not
//! erase a history of slow ones. Between samples the estimate decays toward zero, as if
//! zero-latency samples came: a server that was slow and gets no traffic any more is tried
//! again after a while instead of being starved forever.
//!
//! The estimate and its time are packed in one atomic word, so every proxy thread reads and
//! updates it without a lock: the high 40 bits hold the milliseconds since the backend's
//! state was created (34 years), the low 24 bits the estimate in microseconds (saturating at
//! 16.7 s; a server that slow already costs more than any other).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Time constant of the decay toward lower samples (tower's and linkerd's default).
pub(crate) const TAU: Duration = Duration::from_secs(10);
/// Estimate of a backend that has not answered yet (linkerd's default): a new member takes
/// its share at once without being flooded before its first answer tells how fast it is.
pub(crate) const DEFAULT_RTT: Duration = Duration::from_millis(30);

const RTT_BITS: u32 = 24;
const RTT_MASK: u64 = (1 << RTT_BITS) - 1;

/// The time-to-answer estimate of one backend.
#[derive(Debug)]
pub(crate) struct Latency {
    /// Zero of the packed timestamps.
    epoch: Instant,
    /// `(ms since epoch) << 24 | estimate in µs`.
    packed: AtomicU64,
}

impl Default for Latency {
    fn default() -> Self {
        Latency::new(Instant::now())
    }
}

impl Latency {
    /// A new estimate of [`DEFAULT_RTT`], as of `now`.
    pub(crate) fn new(now: Instant) -> Latency {
        Latency {
            epoch: now,
            packed: AtomicU64::new(micros(DEFAULT_RTT)),
        }
    }

    /// The estimate at `now`, in microseconds (decayed since the last sample).
    pub(crate) fn estimate(&self, now: Instant) -> f64 {
        let (at, rtt) = unpack(self.packed.load(Ordering::Relaxed));
        rtt * self.decay(at, now)
    }

    /// Takes in one answer that came `sample` after the request was sent.
    pub(crate) fn record(&self, sample: Duration, now: Instant) {
        let sample = micros(sample) as f64;
        let stamp = self.millis(now);
        let _ = self
            .packed
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |word| {
                let (at, rtt) = unpack(word);
                let next = if sample >= rtt {
                    sample
                } else {
                    let keep = self.decay(at, now);
                    rtt * keep + sample * (1.0 - keep)
                };
                Some(stamp << RTT_BITS | (next as u64).min(RTT_MASK))
            });
    }

    /// `exp(-elapsed / TAU)` from `at` (ms since epoch) to `now`.
    fn decay(&self, at: u64, now: Instant) -> f64 {
        let elapsed = self.millis(now).saturating_sub(at) as f64;
        (-elapsed / TAU.as_millis() as f64).exp()
    }

    /// Milliseconds from the epoch to `now` (40 bits).
    fn millis(&self, now: Instant) -> u64 {
        let ms = now.saturating_duration_since(self.epoch).as_millis();
        u64::try_from(ms).unwrap_or(u64::MAX).min((1 << 40) - 1)
    }
}

/// `d` in microseconds, saturating at the 24-bit field.
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros())
        .unwrap_or(u64::MAX)
        .min(RTT_MASK)
}

/// (ms since epoch, estimate in µs).
fn unpack(word: u64) -> (u64, f64) {
    (word >> RTT_BITS, (word & RTT_MASK) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_new_backend_starts_at_the_default_estimate() {
        let t0 = Instant::now();
        let l = Latency::new(t0);
        assert_eq!(l.estimate(t0), 30_000.0);
    }

    #[test]
    fn a_slower_answer_replaces_the_estimate_at_once() {
        let t0 = Instant::now();
        let l = Latency::new(t0);
        l.record(80 * MS, t0 + MS);
        let now = t0 + MS;
        assert!(
            (l.estimate(now) - 80_000.0).abs() < 1.0,
            "{}",
            l.estimate(now)
        );
    }

    #[test]
    fn faster_answers_pull_the_estimate_down_with_the_time_constant() {
        let t0 = Instant::now();
        let l = Latency::new(t0);
        l.record(50 * MS, t0);
        // One fast answer 1 ms later barely moves it.
        l.record(MS, t0 + MS);
        assert!(l.estimate(t0 + MS) > 49_000.0);
        // One TAU later, the blend keeps exp(-1) of the old estimate.
        l.record(MS, t0 + MS + TAU);
        let want = 50_000.0 * (-1.0f64).exp() + 1_000.0 * (1.0 - (-1.0f64).exp());
        let got = l.estimate(t0 + MS + TAU);
        assert!((got - want).abs() < 60.0, "{got} vs {want}");
    }

    #[test]
    fn without_samples_the_estimate_decays_toward_zero() {
        let t0 = Instant::now();
        let l = Latency::new(t0);
        l.record(50 * MS, t0);
        let later = l.estimate(t0 + 3 * TAU);
        assert!(later < 50_000.0 * 0.06, "{later}");
    }

    #[test]
    fn a_huge_sample_saturates_instead_of_wrapping() {
        let t0 = Instant::now();
        let l = Latency::new(t0);
        l.record(Duration::from_secs(3600), t0);
        assert_eq!(l.estimate(t0), RTT_MASK as f64);
    }
}
