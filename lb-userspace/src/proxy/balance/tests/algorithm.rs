//! Distribution of every algorithm over three backends (weights 2:1:1 and 1:1:1), source-IP
//! hash stability, and `first` filling to the limit.

use std::collections::HashMap;

use super::super::{Lease, Pool};
use super::{client, infos, l7, sel, share};
use crate::config::{Algorithm, Persistence};

const WEIGHTS_211: [(&str, u32); 3] = [("a", 2), ("b", 1), ("c", 1)];
const WEIGHTS_111: [(&str, u32); 3] = [("a", 1), ("b", 1), ("c", 1)];

/// Runs `n` sequential requests (each lease dropped before the next) from distinct clients
/// and counts the backends chosen.
async fn sequential(algorithm: Algorithm, weights: &[(&str, u32)], n: u32) -> HashMap<String, u32> {
    let pool = Pool::new("vs", &l7(algorithm, Persistence::None, 16));
    let specs: Vec<_> = weights.iter().map(|&(n, w)| (n, w, None, false)).collect();
    let info = infos(&specs);
    let list = sel(weights, &[], &[]);
    let mut counts = HashMap::new();
    for i in 0..n {
        let lease = pool.acquire(&list, &info, client(i), None).await.unwrap();
        *counts.entry(lease.backend().to_owned()).or_insert(0) += 1;
    }
    counts
}

/// Runs `n` concurrent requests (all leases held) and counts the backends chosen.
async fn held(algorithm: Algorithm, weights: &[(&str, u32)], n: u32) -> HashMap<String, u32> {
    let pool = Pool::new("vs", &l7(algorithm, Persistence::None, 16));
    let specs: Vec<_> = weights.iter().map(|&(n, w)| (n, w, None, false)).collect();
    let info = infos(&specs);
    let list = sel(weights, &[], &[]);
    let mut leases: Vec<Lease> = Vec::new();
    for i in 0..n {
        leases.push(pool.acquire(&list, &info, client(i), None).await.unwrap());
    }
    let mut counts = HashMap::new();
    for lease in &leases {
        *counts.entry(lease.backend().to_owned()).or_insert(0) += 1;
    }
    counts
}

fn assert_shares(counts: &HashMap<String, u32>, n: u32, expected: [f64; 3], tolerance: f64) {
    for (name, want) in ["a", "b", "c"].into_iter().zip(expected) {
        let got = share(counts, name, n);
        assert!(
            (got - want).abs() <= tolerance,
            "{name}: share {got:.4}, expected {want:.4} ± {tolerance} ({counts:?})"
        );
    }
}

const HALF: [f64; 3] = [0.5, 0.25, 0.25];
const THIRD: [f64; 3] = [1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0];

#[tokio::test]
async fn round_robin_ignores_weights_and_takes_turns() {
    let counts = sequential(Algorithm::RoundRobin, &WEIGHTS_211, 3000).await;
    assert_eq!(counts["a"], 1000);
    assert_eq!(counts["b"], 1000);
    assert_eq!(counts["c"], 1000);
    let counts = sequential(Algorithm::RoundRobin, &WEIGHTS_111, 3000).await;
    assert_shares(&counts, 3000, THIRD, 0.0);
}

#[tokio::test]
async fn weighted_round_robin_follows_weights() {
    let counts = sequential(Algorithm::WeightedRoundRobin, &WEIGHTS_211, 4000).await;
    assert_eq!((counts["a"], counts["b"], counts["c"]), (2000, 1000, 1000));
    let counts = sequential(Algorithm::WeightedRoundRobin, &WEIGHTS_111, 3000).await;
    assert_shares(&counts, 3000, THIRD, 0.0);
}

#[tokio::test]
async fn weighted_round_robin_is_smooth() {
    // Smooth WRR interleaves the light backends into the heavy one's turns: with 5:1:1 the
    // sequence is a a b a c a a (repeated), so b and c are never back to back and the heavy
    // backend never gets a whole cycle's 5 + the next cycle's picks in one run.
    let pool = Pool::new(
        "vs",
        &l7(Algorithm::WeightedRoundRobin, Persistence::None, 16),
    );
    let info = infos(&[
        ("a", 5, None, false),
        ("b", 1, None, false),
        ("c", 1, None, false),
    ]);
    let list = sel(&[("a", 5), ("b", 1), ("c", 1)], &[], &[]);
    let mut picks = String::new();
    for i in 0..70 {
        let lease = pool.acquire(&list, &info, client(i), None).await.unwrap();
        picks.push_str(lease.backend());
    }
    assert_eq!(&picks[..7], "aabacaa");
    assert!(!picks.contains("aaaaa"), "{picks}");
    assert!(!picks.contains("bc") && !picks.contains("cb"), "{picks}");
    assert_eq!(picks.matches('a').count(), 50);
}

#[tokio::test]
async fn least_connections_balances_open_counts_and_rotates_ties() {
    // All leases held: open counts stay equal whatever the weights.
    let counts = held(Algorithm::LeastConnections, &WEIGHTS_211, 300).await;
    assert_eq!((counts["a"], counts["b"], counts["c"]), (100, 100, 100));
    // Sequential: every pick is a tie at zero, served in list-order turn.
    let counts = sequential(Algorithm::LeastConnections, &WEIGHTS_111, 3000).await;
    assert_shares(&counts, 3000, THIRD, 0.0);
}

#[tokio::test]
async fn least_connections_prefers_the_least_loaded() {
    let pool = Pool::new(
        "vs",
        &l7(Algorithm::LeastConnections, Persistence::None, 16),
    );
    let info = infos(&[("a", 1, None, false), ("b", 1, None, false)]);
    let both = sel(&[("a", 1), ("b", 1)], &[], &[]);
    let only_a = sel(&[("a", 1)], &[], &[]);
    // Load a with 3 open leases, then every new request goes to b until it catches up.
    let mut on_a = Vec::new();
    for i in 0..3 {
        on_a.push(pool.acquire(&only_a, &info, client(i), None).await.unwrap());
    }
    let mut held = Vec::new();
    for i in 0..3 {
        let lease = pool.acquire(&both, &info, client(i), None).await.unwrap();
        assert_eq!(lease.backend(), "b");
        held.push(lease);
    }
}

#[tokio::test]
async fn weighted_least_connections_follows_weights() {
    let counts = held(Algorithm::WeightedLeastConnections, &WEIGHTS_211, 400).await;
    assert_eq!((counts["a"], counts["b"], counts["c"]), (200, 100, 100));
    let counts = sequential(Algorithm::WeightedLeastConnections, &WEIGHTS_211, 4000).await;
    assert_shares(&counts, 4000, HALF, 0.0);
    let counts = held(Algorithm::WeightedLeastConnections, &WEIGHTS_111, 300).await;
    assert_shares(&counts, 300, THIRD, 0.0);
}

#[tokio::test]
async fn source_ip_hash_spreads_by_weight() {
    let counts = sequential(Algorithm::SourceIpHash, &WEIGHTS_211, 30000).await;
    assert_shares(&counts, 30000, HALF, 0.02);
    let counts = sequential(Algorithm::SourceIpHash, &WEIGHTS_111, 30000).await;
    assert_shares(&counts, 30000, THIRD, 0.02);
}

#[tokio::test]
async fn source_ip_hash_is_stable_and_consistent() {
    let info = infos(&[
        ("a", 1, None, false),
        ("b", 1, None, false),
        ("c", 1, None, false),
    ]);
    let all = sel(&WEIGHTS_111, &[], &[]);
    let without_b = sel(&[("a", 1), ("c", 1)], &[], &[]);
    let first = Pool::new("vs", &l7(Algorithm::SourceIpHash, Persistence::None, 16));
    // A second pool stands for a restarted daemon: the fixed hash gives the same answers.
    let restarted = Pool::new("vs", &l7(Algorithm::SourceIpHash, Persistence::None, 16));
    let mut moved_off_a_or_c = 0;
    for i in 0..2000 {
        let ip = client(i * 7919);
        let one = first.acquire(&all, &info, ip, None).await.unwrap();
        let again = first.acquire(&all, &info, ip, None).await.unwrap();
        let other = restarted.acquire(&all, &info, ip, None).await.unwrap();
        assert_eq!(one.backend(), again.backend());
        assert_eq!(one.backend(), other.backend());
        // Removing b moves only b's clients.
        let shrunk = first.acquire(&without_b, &info, ip, None).await.unwrap();
        if one.backend() != "b" && shrunk.backend() != one.backend() {
            moved_off_a_or_c += 1;
        }
    }
    assert_eq!(moved_off_a_or_c, 0);
}

#[tokio::test]
async fn first_fills_to_the_limit_then_spills() {
    let pool = Pool::new("vs", &l7(Algorithm::First, Persistence::None, 16));
    let info = infos(&[
        ("a", 1, Some(2), false),
        ("b", 1, Some(3), false),
        ("c", 1, None, false),
    ]);
    let list = sel(&WEIGHTS_111, &[], &[]);
    let mut leases = Vec::new();
    for i in 0..8 {
        leases.push(pool.acquire(&list, &info, client(i), None).await.unwrap());
    }
    let order: Vec<&str> = leases.iter().map(Lease::backend).collect();
    assert_eq!(order, ["a", "a", "b", "b", "b", "c", "c", "c"]);
    // A slot freed on a: the next request goes back to a.
    leases.remove(0);
    let next = pool.acquire(&list, &info, client(9), None).await.unwrap();
    assert_eq!(next.backend(), "a");
}

#[tokio::test(start_paused = true)]
async fn first_waits_on_the_first_backend_when_all_are_full() {
    let pool = Pool::new("vs", &l7(Algorithm::First, Persistence::None, 16));
    let info = infos(&[("a", 1, Some(1), false), ("b", 1, Some(1), false)]);
    let list = sel(&[("a", 1), ("b", 1)], &[], &[]);
    let on_a = pool.acquire(&list, &info, client(1), None).await.unwrap();
    let on_b = pool.acquire(&list, &info, client(2), None).await.unwrap();
    assert_eq!((on_a.backend(), on_b.backend()), ("a", "b"));
    let waiter = {
        let pool = pool.clone();
        let info = info.clone();
        let list = list.clone();
        tokio::spawn(async move {
            let lease = pool.acquire(&list, &info, client(3), None).await;
            lease.map(|l| l.backend().to_owned())
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let queued: Vec<u64> = pool.stats().backends.iter().map(|b| b.queued).collect();
    assert_eq!(queued, [1, 0]);
    drop(on_a);
    assert_eq!(waiter.await.unwrap().unwrap(), "a");
}

#[tokio::test]
async fn weighted_random_follows_weights() {
    let counts = sequential(Algorithm::WeightedRandom, &WEIGHTS_211, 20000).await;
    assert_shares(&counts, 20000, HALF, 0.02);
    let counts = sequential(Algorithm::WeightedRandom, &WEIGHTS_111, 20000).await;
    assert_shares(&counts, 20000, THIRD, 0.02);
}

#[tokio::test]
async fn turns_are_kept_per_list() {
    // Two lists of one vService (Default and a Conditional set) served alternately: each
    // list still takes its own turns (a shared counter would pin each list to one backend).
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, Persistence::None, 16));
    let info = infos(&[
        ("a", 1, None, false),
        ("b", 1, None, false),
        ("x", 1, None, false),
        ("y", 1, None, false),
    ]);
    let default = sel(&[("a", 1), ("b", 1)], &[], &[]);
    let set = sel(&[("x", 1), ("y", 1)], &[], &[]);
    let mut seen = HashMap::new();
    for i in 0..40 {
        let list = if i % 2 == 0 { &default } else { &set };
        let lease = pool.acquire(list, &info, client(i), None).await.unwrap();
        *seen.entry(lease.backend().to_owned()).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(seen.values().all(|&n| n == 10), "{seen:?}");
}

#[tokio::test]
async fn unknown_or_no_eligible_backend_is_no_backend() {
    // S-BK9: nothing eligible -> NoBackend; a name the resolver does not know is skipped.
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, Persistence::None, 16));
    let info = infos(&[("a", 1, None, false)]);
    let empty = sel(&[], &["a"], &[]);
    let err = pool
        .acquire(&empty, &info, client(1), None)
        .await
        .unwrap_err();
    assert_eq!(err, super::super::PickError::NoBackend);
    let ghost = sel(&[("ghost", 1), ("a", 1)], &[], &[]);
    for i in 0..4 {
        let lease = pool.acquire(&ghost, &info, client(i), None).await.unwrap();
        assert_eq!(lease.backend(), "a");
    }
    assert_eq!(pool.stats().no_backend, 1);
}
