//! Power of two choices: `least-request` and `peak-ewma`.
//!
//! Two distinct candidates are drawn at random, each with probability in proportion to its
//! weight (uniformly when the weights are equal), and the one with the lower cost takes the
//! request. Comparing two random members instead of scanning for the global least avoids the
//! herd behaviour of least-connections under many proxy threads (every thread sending to the
//! same momentarily idle backend) and needs no state shared between threads: the costs are
//! atomic reads (Mitzenmacher's "power of two choices"; Envoy's LEAST_REQUEST, tower's P2C).

use std::time::Instant;

use rand::Rng;

use super::algorithm::Candidate;

/// `least-request`: fewer in-flight requests (serving plus queued) per unit of weight.
/// Ties go to the first drawn.
pub(crate) fn least_request(cands: &[Candidate<'_>]) -> usize {
    let (a, b) = draw_two(cands);
    let cost = |c: &Candidate<'_>| (c.load as f64 + 1.0) / f64::from(c.weight.max(1));
    if cost(&cands[b]) < cost(&cands[a]) {
        b
    } else {
        a
    }
}

/// `peak-ewma`: lower latency estimate times (in-flight + 1), per unit of weight. Ties go
/// to the first drawn.
pub(crate) fn peak_ewma(cands: &[Candidate<'_>], now: Instant) -> usize {
    let (a, b) = draw_two(cands);
    let cost = |c: &Candidate<'_>| {
        let latency = c.latency.map_or(0.0, |l| l.estimate(now));
        latency * (c.load as f64 + 1.0) / f64::from(c.weight.max(1))
    };
    if cost(&cands[b]) < cost(&cands[a]) {
        b
    } else {
        a
    }
}

/// Two distinct indices drawn by weight (`cands` holds at least two).
fn draw_two(cands: &[Candidate<'_>]) -> (usize, usize) {
    let mut rng = rand::rng();
    let n = cands.len();
    let equal = cands.windows(2).all(|w| w[0].weight == w[1].weight);
    if equal {
        let a = rng.random_range(0..n);
        let b = rng.random_range(0..n - 1);
        return (a, if b >= a { b + 1 } else { b });
    }
    let weight = |i: usize| u64::from(cands[i].weight.max(1));
    let total: u64 = (0..n).map(weight).sum();
    let a = by_weight(&mut rng, n, total, None, weight);
    let b = by_weight(&mut rng, n, total - weight(a), Some(a), weight);
    (a, b)
}

/// One index with probability weight / `total`, `skip` left out (its weight is not in
/// `total`).
fn by_weight(
    rng: &mut impl Rng,
    n: usize,
    total: u64,
    skip: Option<usize>,
    weight: impl Fn(usize) -> u64,
) -> usize {
    let mut draw = rng.random_range(0..total.max(1));
    let mut last = 0;
    for i in (0..n).filter(|&i| Some(i) != skip) {
        if draw < weight(i) {
            return i;
        }
        draw -= weight(i);
        last = i;
    }
    last
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::latency::Latency;
    use super::*;

    /// Candidates of these (weight, in flight), named a, b, c..., without latency.
    fn cands<'a>(specs: &[(u32, u64)]) -> Vec<Candidate<'a>> {
        const NAMES: [&str; 4] = ["a", "b", "c", "d"];
        specs
            .iter()
            .zip(NAMES)
            .map(|(&(weight, load), name)| Candidate {
                name,
                weight,
                load,
                has_room: true,
                latency: None,
            })
            .collect()
    }

    /// Runs `pick` many times; panics unless it always gives `want`.
    fn always(want: usize, pick: impl Fn() -> usize) {
        for _ in 0..200 {
            assert_eq!(pick(), want);
        }
    }

    #[test]
    fn the_two_drawn_are_always_distinct_and_every_pair_comes_up() {
        for weights in [[1, 1, 1], [5, 1, 1]] {
            let list = cands(&weights.map(|w| (w, 0)));
            let mut seen = std::collections::HashSet::new();
            for _ in 0..2000 {
                let (a, b) = draw_two(&list);
                assert_ne!(a, b);
                seen.insert((a.min(b), a.max(b)));
            }
            assert_eq!(seen.len(), 3, "{weights:?}");
        }
    }

    #[test]
    fn draws_follow_the_weights() {
        let list = cands(&[(8, 0), (1, 0), (1, 0)]);
        let first_a = (0..10_000).filter(|_| draw_two(&list).0 == 0).count();
        // a is drawn first with probability 8/10.
        assert!((7_500..8_500).contains(&first_a), "{first_a}");
    }

    #[test]
    fn least_request_with_two_members_always_takes_the_less_loaded() {
        always(1, || least_request(&cands(&[(1, 4), (1, 1)])));
        // Per unit of weight: 4 in flight on weight 4 beats 2 on weight 1.
        always(0, || least_request(&cands(&[(4, 4), (1, 2)])));
    }

    #[test]
    fn least_request_never_takes_the_most_loaded_of_three() {
        let list = cands(&[(1, 0), (1, 9), (1, 1)]);
        assert!((0..500).all(|_| least_request(&list) != 1));
    }

    #[test]
    fn peak_ewma_prefers_the_faster_member_and_weighs_in_flight_requests() {
        let now = Instant::now();
        let (fast, slow) = (Latency::new(now), Latency::new(now));
        fast.record(Duration::from_millis(1), now);
        slow.record(Duration::from_millis(50), now);
        let with = |in_flight: [u64; 2]| {
            let mut list = cands(&[(1, in_flight[0]), (1, in_flight[1])]);
            list[0].latency = Some(&fast);
            list[1].latency = Some(&slow);
            peak_ewma(&list, now)
        };
        always(0, || with([0, 0]));
        // 30 ms (the fast one's estimate stays near the default for a while) x 3 in
        // flight is more than 50 ms x 1.
        always(1, || with([2, 0]));
    }
}
