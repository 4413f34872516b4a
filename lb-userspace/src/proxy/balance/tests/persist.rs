//! Persistence: source-IP and cookie pins, re-pinning (S-MT5), drained pins (S-BK11), idle
//! expiry, Rebalance and Clear All.

use std::collections::HashMap;
use std::time::Duration;

use super::super::Pool;
use super::{client, cookie, infos, l7, sel, source_ip};
use crate::config::{Algorithm, Persistence};

const ABC: [(&str, u32); 3] = [("a", 1), ("b", 1), ("c", 1)];

fn abc_info() -> impl Fn(&str) -> Option<super::super::BackendInfo> + Clone {
    infos(&[
        ("a", 1, None, false),
        ("b", 1, None, false),
        ("c", 1, None, false),
    ])
}

#[tokio::test(start_paused = true)]
async fn source_ip_client_stays_on_its_backend() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, source_ip(60), 8));
    let info = abc_info();
    let list = sel(&ABC, &[], &[]);
    for i in 0..30 {
        let first = pool.acquire(&list, &info, client(i), None).await.unwrap();
        for _ in 0..3 {
            let again = pool.acquire(&list, &info, client(i), None).await.unwrap();
            assert_eq!(again.backend(), first.backend());
            assert_eq!(again.set_cookie(), None);
        }
    }
    assert_eq!(pool.pins().len(), 30);
}

#[tokio::test(start_paused = true)]
async fn s_mt5_source_ip_client_of_a_backend_in_maintenance_is_repinned() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, source_ip(600), 8));
    let list = sel(&ABC, &[], &[]);
    let lease = pool
        .acquire(&list, &abc_info(), client(1), None)
        .await
        .unwrap();
    assert_eq!(lease.backend(), "a");
    drop(lease);
    // a goes into maintenance: selection drains it, the resolver reports the flag.
    let maint = infos(&[
        ("a", 1, None, true),
        ("b", 1, None, false),
        ("c", 1, None, false),
    ]);
    let without_a = sel(&[("b", 1), ("c", 1)], &["a"], &[]);
    let moved = pool
        .acquire(&without_a, &maint, client(1), None)
        .await
        .unwrap();
    assert_ne!(moved.backend(), "a");
    let new_home = moved.backend().to_owned();
    drop(moved);
    assert_eq!(pool.pins()[0].backend, new_home);
    // Back from maintenance: the client stays where it was re-pinned.
    let back = pool
        .acquire(&list, &abc_info(), client(1), None)
        .await
        .unwrap();
    assert_eq!(back.backend(), new_home);
}

#[tokio::test(start_paused = true)]
async fn s_mt5_client_of_a_failed_backend_is_repinned() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, source_ip(600), 8));
    let list = sel(&ABC, &[], &[]);
    let info = abc_info();
    let lease = pool.acquire(&list, &info, client(1), None).await.unwrap();
    assert_eq!(lease.backend(), "a");
    let a_down = sel(&[("b", 1), ("c", 1)], &[], &["a"]);
    let moved = pool.acquire(&a_down, &info, client(1), None).await.unwrap();
    assert_ne!(moved.backend(), "a");
}

#[tokio::test(start_paused = true)]
async fn s_bk11_client_pinned_to_a_weight0_drained_backend_stays() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, source_ip(600), 8));
    let list = sel(&ABC, &[], &[]);
    let pinned = pool
        .acquire(&list, &abc_info(), client(1), None)
        .await
        .unwrap();
    assert_eq!(pinned.backend(), "a");
    drop(pinned);
    // a drained by weight 0: selection puts it in `drained`.
    let zero = infos(&[
        ("a", 0, None, false),
        ("b", 1, None, false),
        ("c", 1, None, false),
    ]);
    let drained = sel(&[("b", 1), ("c", 1)], &["a"], &[]);
    for _ in 0..5 {
        let lease = pool
            .acquire(&drained, &zero, client(1), None)
            .await
            .unwrap();
        assert_eq!(lease.backend(), "a");
    }
    // New clients never go to a.
    for i in 2..40 {
        let lease = pool
            .acquire(&drained, &zero, client(i), None)
            .await
            .unwrap();
        assert_ne!(lease.backend(), "a");
    }
}

#[tokio::test(start_paused = true)]
async fn s_mt5_weight0_drained_backend_in_maintenance_loses_its_pins() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, cookie(), 8));
    let list = sel(&ABC, &[], &[]);
    let pinned = pool
        .acquire(&list, &abc_info(), client(1), None)
        .await
        .unwrap();
    let value = pinned.set_cookie().unwrap().to_owned();
    assert_eq!(pinned.backend(), "a");
    let zero_maint = infos(&[
        ("a", 0, None, true),
        ("b", 1, None, false),
        ("c", 1, None, false),
    ]);
    let drained = sel(&[("b", 1), ("c", 1)], &["a"], &[]);
    let lease = pool
        .acquire(&drained, &zero_maint, client(1), Some(&value))
        .await
        .unwrap();
    assert_ne!(lease.backend(), "a");
    assert!(lease.set_cookie().is_some());
}

#[tokio::test(start_paused = true)]
async fn s_mt5_backup_pin_moves_back_to_the_mains() {
    // A client pinned to the backup while it served returns to the mains once they recover
    // (the backup is drained on standby, not drained by weight 0).
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, source_ip(600), 8));
    let info = infos(&[("a", 1, None, false), ("spare", 1, None, false)]);
    let on_backup = sel(&[("spare", 1)], &[], &["a"]);
    let lease = pool
        .acquire(&on_backup, &info, client(1), None)
        .await
        .unwrap();
    assert_eq!(lease.backend(), "spare");
    let mains_back = sel(&[("a", 1)], &["spare"], &[]);
    let lease = pool
        .acquire(&mains_back, &info, client(1), None)
        .await
        .unwrap();
    assert_eq!(lease.backend(), "a");
}

#[tokio::test(start_paused = true)]
async fn cookie_values_are_stable_and_opaque() {
    let info = abc_info();
    let list = sel(&ABC, &[], &[]);
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, cookie(), 8));
    let mut values = HashMap::new();
    for i in 0..3 {
        let lease = pool.acquire(&list, &info, client(i), None).await.unwrap();
        let value = lease.set_cookie().unwrap().to_owned();
        assert!(
            !value.contains("127.0.0.1") && !value.contains("800"),
            "{value}"
        );
        assert_eq!(value.len(), 16, "{value}");
        assert!(value.bytes().all(|b| b.is_ascii_hexdigit()), "{value}");
        values.insert(lease.backend().to_owned(), value);
    }
    assert_eq!(values.len(), 3);
    let distinct: std::collections::HashSet<_> = values.values().collect();
    assert_eq!(distinct.len(), 3);
    // The right cookie is honoured and not set again.
    for (backend, value) in &values {
        for i in 10..13 {
            let lease = pool
                .acquire(&list, &info, client(i), Some(value))
                .await
                .unwrap();
            assert_eq!(lease.backend(), backend);
            assert_eq!(lease.set_cookie(), None);
        }
    }
    // A restarted daemon (new pool) issues the same values and honours the old ones.
    let restarted = Pool::new("vs", &l7(Algorithm::RoundRobin, cookie(), 8));
    for (backend, value) in &values {
        let lease = restarted
            .acquire(&list, &info, client(20), Some(value))
            .await
            .unwrap();
        assert_eq!(lease.backend(), backend);
        assert_eq!(lease.set_cookie(), None);
    }
    let fresh = restarted
        .acquire(&list, &info, client(21), None)
        .await
        .unwrap();
    assert_eq!(fresh.set_cookie(), Some(values[fresh.backend()].as_str()));
    // A moved backend (new address) gets a new value: the old one no longer pins.
    let readdressed = infos(&[
        ("b", 1, None, false),
        ("c", 1, None, false),
        ("a", 1, None, false),
    ]);
    let lease = restarted
        .acquire(&list, &readdressed, client(22), Some(&values["a"]))
        .await
        .unwrap();
    assert!(lease.set_cookie().is_some());
}

#[tokio::test(start_paused = true)]
async fn cookie_garbage_is_ignored() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, cookie(), 8));
    let list = sel(&ABC, &[], &[]);
    let info = abc_info();
    for junk in [
        "",
        "zz",
        "0123456789abcdef",
        "0123456789abcdef-xyz",
        "-",
        "a-b-c",
    ] {
        let lease = pool
            .acquire(&list, &info, client(1), Some(junk))
            .await
            .unwrap();
        assert!(lease.set_cookie().is_some(), "{junk:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn s_mt5_cookie_client_of_a_backend_in_maintenance_is_repinned() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, cookie(), 8));
    let list = sel(&ABC, &[], &[]);
    let first = pool
        .acquire(&list, &abc_info(), client(1), None)
        .await
        .unwrap();
    assert_eq!(first.backend(), "a");
    let a_cookie = first.set_cookie().unwrap().to_owned();
    let maint = infos(&[
        ("a", 1, None, true),
        ("b", 1, None, false),
        ("c", 1, None, false),
    ]);
    let without_a = sel(&[("b", 1), ("c", 1)], &["a"], &[]);
    let moved = pool
        .acquire(&without_a, &maint, client(1), Some(&a_cookie))
        .await
        .unwrap();
    assert_ne!(moved.backend(), "a");
    let new_cookie = moved.set_cookie().unwrap().to_owned();
    assert_ne!(new_cookie, a_cookie);
    // Its new cookie pins it to the new backend, with or without a back.
    let again = pool
        .acquire(&list, &abc_info(), client(1), Some(&new_cookie))
        .await
        .unwrap();
    assert_eq!(again.backend(), moved.backend());
}

#[tokio::test(start_paused = true)]
async fn source_ip_pin_expires_after_idle() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, source_ip(60), 8));
    let list = sel(&ABC, &[], &[]);
    let info = abc_info();
    drop(pool.acquire(&list, &info, client(1), None).await.unwrap());
    // Used again within the idle time: the pin is refreshed and lives on.
    tokio::time::advance(Duration::from_secs(50)).await;
    let lease = pool.acquire(&list, &info, client(1), None).await.unwrap();
    assert_eq!(lease.backend(), "a");
    drop(lease);
    tokio::time::advance(Duration::from_secs(50)).await;
    let pins = pool.pins();
    assert_eq!(pins.len(), 1);
    assert_eq!(pins[0].key, "10.0.0.1");
    assert_eq!(pins[0].idle, Duration::from_secs(50));
    // Idle longer than 60 s: gone, and the client is balanced afresh (round robin is at b).
    tokio::time::advance(Duration::from_secs(11)).await;
    assert!(pool.pins().is_empty());
    let lease = pool.acquire(&list, &info, client(1), None).await.unwrap();
    assert_eq!(lease.backend(), "b");
}

#[tokio::test(start_paused = true)]
async fn s_mt5_rebalance_moves_only_that_backends_pins() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, source_ip(600), 8));
    let list = sel(&ABC, &[], &[]);
    let info = abc_info();
    for i in 0..30 {
        drop(pool.acquire(&list, &info, client(i), None).await.unwrap());
    }
    let before: HashMap<String, String> = pool
        .pins()
        .into_iter()
        .map(|p| (p.key, p.backend))
        .collect();
    assert_eq!(before.values().filter(|b| *b == "a").count(), 10);
    assert_eq!(pool.rebalance("a", &list, &info), 10);
    let after: HashMap<String, String> = pool
        .pins()
        .into_iter()
        .map(|p| (p.key, p.backend))
        .collect();
    assert_eq!(after.len(), 30);
    let mut landed = HashMap::new();
    for (ip, old) in &before {
        let new = &after[ip];
        if old == "a" {
            assert_ne!(new, "a");
            *landed.entry(new.clone()).or_insert(0) += 1;
        } else {
            assert_eq!(new, old, "{ip} moved although it was not on a");
        }
    }
    assert_eq!(
        (landed["b"], landed["c"]),
        (5, 5),
        "spread over the others by weight"
    );
    // The clients follow their new pins.
    for (ip, backend) in &after {
        let ip: std::net::IpAddr = ip.parse().unwrap();
        let lease = pool.acquire(&list, &info, ip, None).await.unwrap();
        assert_eq!(lease.backend(), backend);
    }
}

#[tokio::test(start_paused = true)]
async fn s_mt5_rebalance_moves_cookie_clients() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, cookie(), 8));
    let list = sel(&ABC, &[], &[]);
    let info = abc_info();
    let mut cookies = HashMap::new();
    for i in 0..3 {
        let lease = pool.acquire(&list, &info, client(i), None).await.unwrap();
        cookies.insert(
            lease.backend().to_owned(),
            lease.set_cookie().unwrap().to_owned(),
        );
    }
    assert_eq!(pool.rebalance("a", &list, &info), 1);
    for _ in 0..6 {
        let lease = pool
            .acquire(&list, &info, client(1), Some(&cookies["a"]))
            .await
            .unwrap();
        assert_ne!(lease.backend(), "a");
        assert!(lease.set_cookie().is_some());
    }
    // b's and c's clients are untouched.
    for name in ["b", "c"] {
        let lease = pool
            .acquire(&list, &info, client(1), Some(&cookies[name]))
            .await
            .unwrap();
        assert_eq!((lease.backend(), lease.set_cookie()), (name, None));
    }
    // New clients may still land on a, and their new cookie pins them there.
    let mut fresh = None;
    for i in 10..13 {
        let lease = pool.acquire(&list, &info, client(i), None).await.unwrap();
        if lease.backend() == "a" {
            fresh = lease.set_cookie().map(str::to_owned);
        }
    }
    let fresh = fresh.unwrap();
    assert_ne!(fresh, cookies["a"]);
    let lease = pool
        .acquire(&list, &info, client(1), Some(&fresh))
        .await
        .unwrap();
    assert_eq!((lease.backend(), lease.set_cookie()), ("a", None));
}

#[tokio::test(start_paused = true)]
async fn rebalance_without_another_backend_changes_nothing() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, source_ip(600), 8));
    let only_a = sel(&[("a", 1)], &[], &[]);
    let info = abc_info();
    drop(pool.acquire(&only_a, &info, client(1), None).await.unwrap());
    assert_eq!(pool.rebalance("a", &only_a, &info), 0);
    assert_eq!(pool.pins()[0].backend, "a");
}

#[tokio::test(start_paused = true)]
async fn s_mt5_clear_all_drops_every_pin() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, source_ip(600), 8));
    let list = sel(&ABC, &[], &[]);
    let info = abc_info();
    for i in 0..12 {
        drop(pool.acquire(&list, &info, client(i), None).await.unwrap());
    }
    assert_eq!(pool.clear_pins(), 12);
    assert!(pool.pins().is_empty());
    // Round robin continues at a: client 5 (pinned to c before) is balanced afresh.
    let lease = pool.acquire(&list, &info, client(5), None).await.unwrap();
    assert_eq!(lease.backend(), "a");
}

#[tokio::test(start_paused = true)]
async fn s_mt5_clear_all_voids_cookies() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, cookie(), 8));
    let list = sel(&ABC, &[], &[]);
    let info = abc_info();
    let lease = pool.acquire(&list, &info, client(1), None).await.unwrap();
    let old = lease.set_cookie().unwrap().to_owned();
    drop(lease);
    assert_eq!(pool.pins().len(), 1);
    assert_eq!(pool.clear_pins(), 1);
    assert!(pool.pins().is_empty());
    let lease = pool
        .acquire(&list, &info, client(1), Some(&old))
        .await
        .unwrap();
    let new = lease.set_cookie().unwrap().to_owned();
    assert_ne!(new, old);
    let again = pool
        .acquire(&list, &info, client(1), Some(&new))
        .await
        .unwrap();
    assert_eq!(
        (again.backend(), again.set_cookie()),
        (lease.backend(), None)
    );
}

#[tokio::test(start_paused = true)]
async fn reload_keeps_pins_of_the_same_kind_and_drops_others() {
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, source_ip(600), 8));
    let list = sel(&ABC, &[], &[]);
    let info = abc_info();
    for i in 0..3 {
        drop(pool.acquire(&list, &info, client(i), None).await.unwrap());
    }
    pool.update(&l7(Algorithm::LeastConnections, source_ip(900), 8));
    assert_eq!(pool.pins().len(), 3);
    pool.retain_backends(&|name| name != "b");
    let pins = pool.pins();
    assert_eq!(pins.len(), 2);
    assert!(pins.iter().all(|p| p.backend != "b"));
    pool.update(&l7(Algorithm::LeastConnections, Persistence::None, 8));
    assert!(pool.pins().is_empty());
}

#[tokio::test(start_paused = true)]
async fn source_ip_pin_ignores_ipv4_mapping() {
    // The same IPv4 client arriving on an IPv6 (dual-stack) socket keeps its pin.
    let pool = Pool::new("vs", &l7(Algorithm::RoundRobin, source_ip(600), 8));
    let list = sel(&ABC, &[], &[]);
    let info = abc_info();
    let v4: std::net::Ipv4Addr = "10.1.2.3".parse().unwrap();
    let first = pool.acquire(&list, &info, v4.into(), None).await.unwrap();
    for _ in 0..3 {
        let mapped = std::net::IpAddr::V6(v4.to_ipv6_mapped());
        let again = pool.acquire(&list, &info, mapped, None).await.unwrap();
        assert_eq!(again.backend(), first.backend());
    }
    assert_eq!(pool.pins()[0].key, "10.1.2.3");
}
