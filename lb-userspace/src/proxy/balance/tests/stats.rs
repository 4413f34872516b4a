//! Counters per backend and per pool (S-OB1).

use super::super::{PickError, Pool};
use super::{client, infos, l7, sel};
use crate::config::{Algorithm, Persistence};

#[tokio::test]
async fn s_ob1_current_follows_leases_and_totals_accumulate() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, Persistence::None, 8));
    let info = infos(&[("a", 1, None, false), ("b", 1, None, false)]);
    let list = sel(&[("a", 1), ("b", 1)], &[], &[]);
    let one = pool.acquire(&list, &info, client(1), None).await.unwrap();
    let two = pool.acquire(&list, &info, client(2), None).await.unwrap();
    let three = pool.acquire(&list, &info, client(3), None).await.unwrap();
    let current = |pool: &Pool| -> Vec<(String, u64, u64)> {
        let stats = pool.stats();
        stats
            .backends
            .into_iter()
            .map(|b| (b.name, b.current, b.total))
            .collect()
    };
    assert_eq!(current(&pool), [("a".into(), 2, 2), ("b".into(), 1, 1)]);
    drop(one);
    assert_eq!(current(&pool), [("a".into(), 1, 2), ("b".into(), 1, 1)]);
    drop(two);
    drop(three);
    assert_eq!(current(&pool), [("a".into(), 0, 2), ("b".into(), 0, 1)]);
}

#[tokio::test]
async fn s_ob1_bytes_and_failures() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, Persistence::None, 8));
    let info = infos(&[("a", 1, None, false)]);
    let list = sel(&[("a", 1)], &[], &[]);
    let lease = pool.acquire(&list, &info, client(1), None).await.unwrap();
    assert_eq!(lease.addr(), "127.0.0.1:8001".parse().unwrap());
    lease.add_bytes(100, 2000);
    lease.add_bytes(5, 7);
    lease.fail(crate::proxy::balance::LiveError::Aborted);
    drop(lease);
    let other = pool.acquire(&list, &info, client(2), None).await.unwrap();
    other.add_bytes(1, 1);
    drop(other);
    let stats = pool.stats();
    let a = &stats.backends[0];
    assert_eq!(
        (a.bytes_in, a.bytes_out, a.failures, a.total),
        (106, 2008, 1, 2)
    );
}

#[tokio::test]
async fn s_ob1_refusals_are_counted() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, Persistence::None, 0));
    let info = infos(&[("a", 1, Some(1), false)]);
    let list = sel(&[("a", 1)], &[], &[]);
    let none = sel(&[], &[], &["a"]);
    assert_eq!(
        pool.acquire(&none, &info, client(1), None)
            .await
            .unwrap_err(),
        PickError::NoBackend
    );
    let _busy = pool.acquire(&list, &info, client(1), None).await.unwrap();
    assert_eq!(
        pool.acquire(&list, &info, client(2), None)
            .await
            .unwrap_err(),
        PickError::QueueFull
    );
    let stats = pool.stats();
    assert_eq!(
        (stats.no_backend, stats.queue_full, stats.queue_timeouts),
        (1, 1, 0)
    );
    assert_eq!(stats.backends[0].total, 1);
}

#[tokio::test]
async fn reload_keeps_counters_and_retain_drops_removed_backends() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, Persistence::None, 8));
    let info = infos(&[("a", 1, None, false), ("b", 1, None, false)]);
    let list = sel(&[("a", 1), ("b", 1)], &[], &[]);
    for i in 0..4 {
        drop(pool.acquire(&list, &info, client(i), None).await.unwrap());
    }
    let held_on_a = pool.acquire(&list, &info, client(9), None).await.unwrap();
    assert_eq!(held_on_a.backend(), "a");
    pool.update(&l7(Algorithm::WeightedRoundRobin, Persistence::None, 8));
    let totals: Vec<u64> = pool.stats().backends.iter().map(|b| b.total).collect();
    assert_eq!(totals, [3, 2]);
    // a is removed but still serving: kept until idle; b is removed and idle: dropped.
    pool.retain_backends(&|_| false);
    let names: Vec<String> = pool.stats().backends.into_iter().map(|b| b.name).collect();
    assert_eq!(names, ["a"]);
    drop(held_on_a);
    pool.retain_backends(&|_| false);
    assert!(pool.stats().backends.is_empty());
}

#[test]
fn s_ob1_a_sharded_counter_sums_what_every_thread_added() {
    let counter = super::super::Counter::default();
    std::thread::scope(|s| {
        // More threads than shards, so some share one.
        for t in 0..12u64 {
            let counter = &counter;
            s.spawn(move || {
                for _ in 0..1000 {
                    counter.add(t + 1);
                }
                counter.add(0);
            });
        }
    });
    assert_eq!(counter.get(), 1000 * (1..=12).sum::<u64>());
}
