//! Connection limits and queues (S-BK8), on a paused tokio clock.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::super::{BackendInfo, PickError, Pool};
use super::{client, cookie, infos, l7, sel};
use crate::config::{Algorithm, Persistence};
use crate::selection::ListSelection;

/// Starts an acquire in its own task; resolves to the chosen backend's name, holding the
/// lease until `hold` has passed.
fn spawn_acquire(
    pool: &Arc<Pool>,
    list: &ListSelection,
    info: impl Fn(&str) -> Option<BackendInfo> + Send + 'static,
    ip: u32,
    cookie: Option<String>,
    hold: Duration,
) -> JoinHandle<Result<String, PickError>> {
    let pool = Arc::clone(pool);
    let list = list.clone();
    tokio::spawn(async move {
        let lease = pool
            .acquire(&list, &info, client(ip), cookie.as_deref())
            .await?;
        tokio::time::sleep(hold).await;
        Ok(lease.backend().to_owned())
    })
}

fn queued(pool: &Pool, name: &str) -> u64 {
    pool.stats()
        .backends
        .iter()
        .find(|b| b.name == name)
        .map_or(0, |b| b.queued)
}

/// Lets spawned tasks run (the paused clock advances only when all tasks are idle).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(10)).await;
}

#[tokio::test(start_paused = true)]
async fn s_bk8_at_the_limit_the_request_waits_and_the_backup_stays_idle() {
    // a is the only main (limit 1), the backup "spare" is on standby (drained). A second
    // request waits for a: it never goes to the backup, and gets a's slot when freed.
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, Persistence::None, 8));
    let info = infos(&[("a", 1, Some(1), false), ("spare", 1, None, false)]);
    let list = sel(&[("a", 1)], &["spare"], &[]);
    let first = pool.acquire(&list, &info, client(1), None).await.unwrap();
    let waiter = spawn_acquire(&pool, &list, info.clone(), 2, None, Duration::ZERO);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!waiter.is_finished());
    assert_eq!(queued(&pool, "a"), 1);
    drop(first);
    assert_eq!(waiter.await.unwrap().unwrap(), "a");
    let stats = pool.stats();
    assert!(stats.backends.iter().all(|b| b.name != "spare"));
    assert_eq!(stats.backends[0].total, 2);
}

#[tokio::test(start_paused = true)]
async fn s_bk8_pinned_client_waits_for_its_full_backend() {
    // With persistence, a pinned client at its backend's limit waits there even though b is
    // free (no spill to another backend).
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, cookie(), 8));
    let info = infos(&[("a", 1, Some(1), false), ("b", 1, None, false)]);
    let list = sel(&[("a", 1), ("b", 1)], &[], &[]);
    let first = pool.acquire(&list, &info, client(1), None).await.unwrap();
    assert_eq!(first.backend(), "a");
    let value = first.set_cookie().unwrap().to_owned();
    let waiter = spawn_acquire(&pool, &list, info.clone(), 2, Some(value), Duration::ZERO);
    settle().await;
    assert_eq!(queued(&pool, "a"), 1);
    drop(first);
    assert_eq!(waiter.await.unwrap().unwrap(), "a");
}

#[tokio::test(start_paused = true)]
async fn s_bk8_queue_timeout() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, Persistence::None, 8));
    let info = infos(&[("a", 1, Some(1), false)]);
    let list = sel(&[("a", 1)], &[], &[]);
    let _busy = pool.acquire(&list, &info, client(1), None).await.unwrap();
    let started = tokio::time::Instant::now();
    let err = pool
        .acquire(&list, &info, client(2), None)
        .await
        .unwrap_err();
    assert_eq!(err, PickError::QueueTimeout);
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    let stats = pool.stats();
    assert_eq!(stats.queue_timeouts, 1);
    assert_eq!(stats.backends[0].queued, 0);
    assert_eq!(stats.backends[0].current, 1);
}

#[tokio::test(start_paused = true)]
async fn s_bk8_queue_full() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, Persistence::None, 2));
    let info = infos(&[("a", 1, Some(1), false)]);
    let list = sel(&[("a", 1)], &[], &[]);
    let busy = pool.acquire(&list, &info, client(1), None).await.unwrap();
    let w1 = spawn_acquire(&pool, &list, info.clone(), 2, None, Duration::ZERO);
    let w2 = spawn_acquire(&pool, &list, info.clone(), 3, None, Duration::ZERO);
    settle().await;
    assert_eq!(queued(&pool, "a"), 2);
    let started = tokio::time::Instant::now();
    let err = pool
        .acquire(&list, &info, client(4), None)
        .await
        .unwrap_err();
    assert_eq!(err, PickError::QueueFull);
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "a full queue refuses at once"
    );
    assert_eq!(pool.stats().queue_full, 1);
    drop(busy);
    assert_eq!(w1.await.unwrap().unwrap(), "a");
    assert_eq!(w2.await.unwrap().unwrap(), "a");
}

#[tokio::test(start_paused = true)]
async fn s_bk8_zero_queue_refuses_at_the_limit() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, Persistence::None, 0));
    let info = infos(&[("a", 1, Some(1), false)]);
    let list = sel(&[("a", 1)], &[], &[]);
    let _busy = pool.acquire(&list, &info, client(1), None).await.unwrap();
    let err = pool
        .acquire(&list, &info, client(2), None)
        .await
        .unwrap_err();
    assert_eq!(err, PickError::QueueFull);
}

#[tokio::test(start_paused = true)]
async fn s_bk8_waiters_are_served_first_in_first_out() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, Persistence::None, 8));
    let info = infos(&[("a", 1, Some(1), false)]);
    let list = sel(&[("a", 1)], &[], &[]);
    let busy = pool.acquire(&list, &info, client(0), None).await.unwrap();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 1..=4u32 {
        let pool = Arc::clone(&pool);
        let list = list.clone();
        let info = info.clone();
        let done = done_tx.clone();
        tokio::spawn(async move {
            let lease = pool.acquire(&list, &info, client(i), None).await.unwrap();
            done.send(i).unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            drop(lease);
        });
        settle().await; // Arrival order 1, 2, 3, 4.
    }
    drop(busy);
    let mut order = Vec::new();
    for _ in 0..4 {
        order.push(done_rx.recv().await.unwrap());
    }
    assert_eq!(order, [1, 2, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn s_bk8_newcomer_does_not_overtake_a_waiter() {
    // A freed slot goes straight to the waiter: a request arriving right after the release
    // must queue behind it.
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, Persistence::None, 8));
    let info = infos(&[("a", 1, Some(1), false)]);
    let list = sel(&[("a", 1)], &[], &[]);
    let busy = pool.acquire(&list, &info, client(0), None).await.unwrap();
    let waiter = spawn_acquire(&pool, &list, info.clone(), 1, None, Duration::from_secs(1));
    settle().await;
    drop(busy);
    // The waiter holds the slot now, even before its task runs again.
    let stats = pool.stats();
    assert_eq!(
        (stats.backends[0].current, stats.backends[0].queued),
        (1, 0)
    );
    let late = spawn_acquire(&pool, &list, info.clone(), 2, None, Duration::ZERO);
    settle().await;
    assert_eq!(queued(&pool, "a"), 1);
    assert_eq!(waiter.await.unwrap().unwrap(), "a");
    assert_eq!(late.await.unwrap().unwrap(), "a");
}

#[tokio::test(start_paused = true)]
async fn s_bk8_abandoned_waiter_leaves_the_queue() {
    // A client that goes away while queued (its acquire future dropped) frees its place; the
    // next waiter gets the slot.
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, Persistence::None, 8));
    let info = infos(&[("a", 1, Some(1), false)]);
    let list = sel(&[("a", 1)], &[], &[]);
    let busy = pool.acquire(&list, &info, client(0), None).await.unwrap();
    let gone = spawn_acquire(&pool, &list, info.clone(), 1, None, Duration::ZERO);
    settle().await;
    let next = spawn_acquire(&pool, &list, info.clone(), 2, None, Duration::ZERO);
    settle().await;
    assert_eq!(queued(&pool, "a"), 2);
    gone.abort();
    assert!(gone.await.unwrap_err().is_cancelled());
    assert_eq!(queued(&pool, "a"), 1);
    drop(busy);
    assert_eq!(next.await.unwrap().unwrap(), "a");
    let stats = pool.stats();
    assert_eq!(
        (stats.backends[0].current, stats.backends[0].queued),
        (0, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn raised_limit_serves_waiters() {
    // A reload that raises max_connections lets queued requests through at the next pick.
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, Persistence::None, 8));
    let list = sel(&[("a", 1)], &[], &[]);
    let low = infos(&[("a", 1, Some(1), false)]);
    let high = infos(&[("a", 1, Some(3), false)]);
    let _busy = pool.acquire(&list, &low, client(0), None).await.unwrap();
    let waiter = spawn_acquire(&pool, &list, low.clone(), 1, None, Duration::from_secs(60));
    settle().await;
    assert_eq!(queued(&pool, "a"), 1);
    let _third = pool.acquire(&list, &high, client(2), None).await.unwrap();
    settle().await;
    let stats = pool.stats();
    assert_eq!(
        (stats.backends[0].current, stats.backends[0].queued),
        (3, 0)
    );
    waiter.abort();
}

#[tokio::test(start_paused = true)]
async fn s_rt2_a_backend_at_its_limit_with_a_full_queue_is_full_for_retries() {
    // Limit 1, queue 1: one holds the slot, one waits; only then is `a` full.
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, Persistence::None, 1));
    let info = infos(&[("a", 1, Some(1), false)]);
    let list = sel(&[("a", 1)], &[], &[]);
    assert!(!pool.full("a"), "unknown yet: not full");
    let first = pool.acquire(&list, &info, client(1), None).await.unwrap();
    assert!(!pool.full("a"), "at its limit, its queue has room");
    let waiter = spawn_acquire(&pool, &list, info.clone(), 2, None, Duration::ZERO);
    settle().await;
    assert!(pool.full("a"), "at its limit with its queue full");
    drop(first);
    assert_eq!(waiter.await.unwrap().unwrap(), "a");
    assert!(!pool.full("a"));
}
