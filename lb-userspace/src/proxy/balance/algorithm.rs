//! The balancing algorithms: which of a list's eligible backends takes a new request.
//!
//! The state of the turn-based algorithms (round-robin positions, smooth weighted round-robin
//! current weights) is kept per eligible set, because one vService serves several lists (its
//! Default list and its Conditional sets): sharing one counter between lists would let the
//! interleaving of their requests skew each list's spread.

use std::collections::HashMap;
use std::net::IpAddr;

use rand::Rng;

use super::hash::StableHash;
use super::latency::Latency;
use super::p2c;
use crate::config::Algorithm;

/// Distinct eligible sets remembered before the state is reset (bounds memory when health
/// flaps through many combinations).
const MAX_LISTS: usize = 256;

/// One backend as an algorithm sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Candidate<'a> {
    /// Backend Service name.
    pub name: &'a str,
    /// Its weight (> 0 for eligible backends).
    pub weight: u32,
    /// Requests it is serving plus those waiting in its queue.
    pub load: u64,
    /// Whether it is below its connection limit (always true without a limit).
    pub has_room: bool,
    /// Its time-to-answer estimate (`peak-ewma`); None counts as instant.
    pub latency: Option<&'a Latency>,
}

/// Turn state of one eligible set.
#[derive(Debug, Default)]
struct ListState {
    /// Round-robin position (also the start of tie-breaking scans).
    next: usize,
    /// Smooth weighted round-robin current weights, by candidate index.
    current: Vec<i64>,
}

/// Turn state of every eligible set a pool has served.
#[derive(Debug, Default)]
pub(crate) struct Algorithms {
    lists: HashMap<u64, ListState>,
}

impl Algorithms {
    /// Forgets every turn position (after a reload changed the algorithm).
    pub(crate) fn reset(&mut self) {
        self.lists.clear();
    }

    /// Index into `cands` of the backend that takes the request; None only when `cands` is
    /// empty.
    pub(crate) fn choose(
        &mut self,
        algorithm: Algorithm,
        cands: &[Candidate<'_>],
        client: IpAddr,
    ) -> Option<usize> {
        if let Some(at) = choose_stateless(algorithm, cands, client) {
            return Some(at);
        }
        if cands.is_empty() {
            return None;
        }
        let state = self.state_for(cands);
        let all = 0..cands.len();
        Some(match algorithm {
            Algorithm::RoundRobin => state.round_robin(cands.len()),
            Algorithm::WeightedRoundRobin => state.smooth(cands, all),
            Algorithm::LeastConnections => {
                let least = least_by(cands, |a, b| a.load.cmp(&b.load));
                state.rotate_among(&least)
            }
            _ => {
                let least = least_by(cands, |a, b| {
                    let left = u128::from(a.load) * u128::from(b.weight);
                    let right = u128::from(b.load) * u128::from(a.weight);
                    left.cmp(&right)
                });
                state.smooth(cands, least.into_iter())
            }
        })
    }

    /// The turn state of this eligible set (names and weights), created on first use.
    fn state_for(&mut self, cands: &[Candidate<'_>]) -> &mut ListState {
        let key = cands
            .iter()
            .fold(StableHash::new(), |h, c| {
                h.bytes(c.name.as_bytes()).bytes(&c.weight.to_be_bytes())
            })
            .finish();
        if self.lists.len() >= MAX_LISTS && !self.lists.contains_key(&key) {
            self.lists.clear();
        }
        let state = self.lists.entry(key).or_default();
        if state.current.len() != cands.len() {
            state.current = vec![0; cands.len()];
        }
        state
    }
}

impl ListState {
    /// Plain round robin over `len` candidates.
    fn round_robin(&mut self, len: usize) -> usize {
        let index = self.next % len;
        self.next = self.next.wrapping_add(1);
        index
    }

    /// One of `tied` (indices in list order), taken in turn, so ties are served round robin.
    fn rotate_among(&mut self, tied: &[usize]) -> usize {
        if tied.is_empty() {
            return 0;
        }
        tied[self.round_robin(tied.len())]
    }

    /// Smooth weighted round robin (as nginx does) restricted to `subset`: every member gains
    /// its weight, the highest current weight wins and pays back the subset's total weight.
    fn smooth(&mut self, cands: &[Candidate<'_>], subset: impl Iterator<Item = usize>) -> usize {
        let mut total: i64 = 0;
        let mut best: Option<usize> = None;
        for i in subset {
            let weight = i64::from(cands[i].weight.max(1));
            self.current[i] += weight;
            total += weight;
            if best.is_none_or(|b| self.current[i] > self.current[b]) {
                best = Some(i);
            }
        }
        let chosen = best.unwrap_or(0);
        self.current[chosen] -= total;
        chosen
    }
}

/// The choice of the algorithms that keep no turn state (hashing, `first`, random and the
/// power-of-two-choices ones), so the pool can run them without taking its lock; None for
/// the turn-based ones (unless there is one candidate), and when `cands` is empty.
pub(crate) fn choose_stateless(
    algorithm: Algorithm,
    cands: &[Candidate<'_>],
    client: IpAddr,
) -> Option<usize> {
    if cands.len() <= 1 {
        return (!cands.is_empty()).then_some(0);
    }
    match algorithm {
        Algorithm::SourceIpHash => Some(source_hash(cands, client)),
        Algorithm::First => Some(cands.iter().position(|c| c.has_room).unwrap_or(0)),
        Algorithm::WeightedRandom => Some(weighted_random(cands)),
        Algorithm::LeastRequest => Some(p2c::least_request(cands)),
        Algorithm::PeakEwma => Some(p2c::peak_ewma(cands, std::time::Instant::now())),
        Algorithm::RoundRobin
        | Algorithm::WeightedRoundRobin
        | Algorithm::LeastConnections
        | Algorithm::WeightedLeastConnections => None,
    }
}

/// Indices of the candidates that compare least by `cmp`, in list order.
fn least_by(
    cands: &[Candidate<'_>],
    cmp: impl Fn(&Candidate<'_>, &Candidate<'_>) -> std::cmp::Ordering,
) -> Vec<usize> {
    let mut least: Vec<usize> = Vec::new();
    for (i, cand) in cands.iter().enumerate() {
        match least.first().map(|&l| cmp(cand, &cands[l])) {
            None | Some(std::cmp::Ordering::Equal) => least.push(i),
            Some(std::cmp::Ordering::Less) => {
                least.clear();
                least.push(i);
            }
            Some(std::cmp::Ordering::Greater) => {}
        }
    }
    least
}

/// Weighted rendezvous hashing of the client address: every candidate draws a score from a
/// fixed hash of (client, name) scaled by its weight, the highest wins. A client keeps its
/// backend while that backend stays eligible, and only the clients of a backend that leaves
/// move when the set changes.
fn source_hash(cands: &[Candidate<'_>], client: IpAddr) -> usize {
    let mut best = (0, f64::NEG_INFINITY);
    for (i, cand) in cands.iter().enumerate() {
        let h = StableHash::new()
            .ip(client)
            .bytes(cand.name.as_bytes())
            .finish();
        // A uniform value in (0, 1) from the top 53 bits; -ln(u) is exponential, and
        // weight / -ln(u) is the highest for each candidate with probability weight / total.
        let unit = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let score = f64::from(cand.weight.max(1)) / -unit.ln();
        if score > best.1 {
            best = (i, score);
        }
    }
    best.0
}

/// A random candidate, each with probability weight / total weight.
fn weighted_random(cands: &[Candidate<'_>]) -> usize {
    let total: u64 = cands.iter().map(|c| u64::from(c.weight.max(1))).sum();
    let mut draw = rand::rng().random_range(0..total);
    for (i, cand) in cands.iter().enumerate() {
        let weight = u64::from(cand.weight.max(1));
        if draw < weight {
            return i;
        }
        draw -= weight;
    }
    cands.len() - 1
}
