//! Per-source query rate limit: a token bucket per client address, so a flood from one
//! source is bounded (and counted by the caller) while other clients keep their answers.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

/// Sources tracked at most; beyond it, idle (full) buckets are forgotten first.
const MAX_SOURCES: usize = 65_536;

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// Token buckets by source address: `per_second` tokens refill per second, up to
/// `per_second` (the burst).
pub struct RateLimiter {
    per_second: u32,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

impl RateLimiter {
    /// A limiter allowing `per_second` queries per second per source; 0 allows everything.
    pub fn new(per_second: u32) -> Self {
        RateLimiter {
            per_second,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// True when a query from `source` at `now` is within its rate; takes a token if so.
    pub fn allow(&self, source: IpAddr, now: Instant) -> bool {
        if self.per_second == 0 {
            return true;
        }
        let rate = f64::from(self.per_second);
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= MAX_SOURCES && !buckets.contains_key(&source) {
            buckets.retain(|_, b| refill(b, now, rate) < rate);
            if buckets.len() >= MAX_SOURCES {
                // Every tracked source is busy: a spoofed-source flood. Start over rather
                // than grow without bound.
                buckets.clear();
            }
        }
        let bucket = buckets.entry(source).or_insert(Bucket {
            tokens: rate,
            last: now,
        });
        bucket.tokens = refill(bucket, now, rate);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The bucket's tokens at `now`.
fn refill(bucket: &Bucket, now: Instant, rate: f64) -> f64 {
    let elapsed = now.saturating_duration_since(bucket.last).as_secs_f64();
    (bucket.tokens + elapsed * rate).min(rate)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Bad input: a flood from one source is bounded; others are not affected,
    /// and the bucket refills with time.
    #[test]
    fn s_gs_flood_from_one_source_is_bounded() {
        let limiter = RateLimiter::new(10);
        let start = Instant::now();
        let flooder: IpAddr = "192.0.2.1".parse().unwrap();
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        let allowed = (0..100).filter(|_| limiter.allow(flooder, start)).count();
        assert_eq!(allowed, 10);
        assert!(limiter.allow(other, start));
        let later = start + Duration::from_millis(500);
        let refilled = (0..100).filter(|_| limiter.allow(flooder, later)).count();
        assert_eq!(refilled, 5);
    }

    #[test]
    fn zero_turns_the_limit_off() {
        let limiter = RateLimiter::new(0);
        let now = Instant::now();
        let source: IpAddr = "192.0.2.1".parse().unwrap();
        assert!((0..10_000).all(|_| limiter.allow(source, now)));
    }
}
