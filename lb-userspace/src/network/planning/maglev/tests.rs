//! Properties of the Maglev builder: determinism, balance, minimal disruption, edge cases.

use super::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const BIG: u32 = 65537;

fn keys(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("10.0.{}.{}:80", i / 250, i % 250 + 1))
        .collect()
}

fn equal(keys: &[String], weight: u32) -> Vec<MaglevBackend<'_>> {
    keys.iter()
        .enumerate()
        .map(|(i, k)| MaglevBackend {
            key: k,
            weight,
            value: i as u32,
        })
        .collect()
}

fn counts(table: &[u32]) -> HashMap<u32, usize> {
    let mut c = HashMap::new();
    for &v in table {
        *c.entry(v).or_insert(0) += 1;
    }
    c
}

/// Asserts every backend's share of `table` is within `tolerance` (relative) of its weight share.
fn assert_shares(backends: &[MaglevBackend<'_>], table: &[u32], tolerance: f64) {
    let total: f64 = backends.iter().map(|b| f64::from(b.weight)).sum();
    let c = counts(table);
    for b in backends {
        let expected = table.len() as f64 * f64::from(b.weight) / total;
        let got = *c.get(&b.value).unwrap_or(&0) as f64;
        let deviation = (got - expected).abs() / expected;
        assert!(
            deviation < tolerance,
            "{}: got {got} entries, expected {expected:.1} ({:.3}% off)",
            b.key,
            deviation * 100.0
        );
    }
}

#[test]
fn fnv1a64_matches_published_vectors() {
    // Reference values from the FNV specification's test suite.
    assert_eq!(fnv1a64("".bytes()), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a64("a".bytes()), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a64("foobar".bytes()), 0x8594_4171_f739_67e8);
}

#[test]
fn fmix64_is_a_bijection_on_samples_and_fixes_zero() {
    assert_eq!(fmix64(0), 0);
    let outputs: std::collections::HashSet<u64> = (0..10_000u64).map(fmix64).collect();
    assert_eq!(outputs.len(), 10_000);
}

#[test]
fn same_input_gives_same_table_every_time() {
    let k = keys(7);
    let backends = equal(&k, 3);
    let first = build(&backends, BIG).unwrap();
    for _ in 0..3 {
        assert_eq!(build(&backends, BIG).unwrap(), first);
    }
}

#[test]
fn table_is_pinned_across_versions() {
    // Golden table, cross-checked with an independent Python rewrite of the documented
    // algorithm: a change here means nodes running different versions would disagree on
    // where flows go. Change only deliberately.
    let k = ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"];
    let backends: Vec<_> = k
        .iter()
        .enumerate()
        .map(|(i, key)| MaglevBackend {
            key,
            weight: 1,
            value: i as u32,
        })
        .collect();
    let table = build(&backends, 13).unwrap();
    assert_eq!(table, GOLDEN_13);
}

const GOLDEN_13: [u32; 13] = [1, 0, 1, 0, 0, 2, 1, 2, 1, 2, 0, 2, 0];

#[test]
fn every_entry_is_filled_with_a_weighted_backend() {
    let k = keys(5);
    let mut backends = equal(&k, 2);
    backends[4].weight = 0;
    let table = build(&backends, BIG).unwrap();
    assert_eq!(table.len(), BIG as usize);
    let c = counts(&table);
    assert_eq!(c.values().sum::<usize>(), BIG as usize);
    for b in &backends[..4] {
        assert!(
            c.get(&b.value).copied().unwrap_or(0) > 0,
            "{} missing",
            b.key
        );
    }
}

#[test]
fn weights_2_1_1_get_shares_within_1_percent() {
    let k = keys(3);
    let mut backends = equal(&k, 1);
    backends[0].weight = 2;
    let table = build(&backends, BIG).unwrap();
    assert_shares(&backends, &table, 0.01);
}

#[test]
fn hundred_equal_backends_get_shares_within_1_percent() {
    let k = keys(100);
    let backends = equal(&k, 1);
    let table = build(&backends, BIG).unwrap();
    assert_shares(&backends, &table, 0.01);
}

#[test]
fn weight_sum_above_table_size_still_reaches_every_backend() {
    // 1,000 backends of weight 1,000: the sum (1,000,000) is far above the table size, so a
    // "w consecutive turns" fill would starve the last backends. Interleaved turns must not.
    let k = keys(1000);
    let backends = equal(&k, 1000);
    let table = build(&backends, BIG).unwrap();
    assert_shares(&backends, &table, 0.02);
}

#[test]
fn skewed_weights_follow_their_ratio() {
    let k = keys(10);
    let mut backends = equal(&k, 1);
    backends[3].weight = 100;
    let table = build(&backends, BIG).unwrap();
    assert_shares(&backends, &table, 0.01);
}

#[test]
fn removing_one_of_ten_moves_little_more_than_its_own_share() {
    let k = keys(10);
    let all = equal(&k, 1);
    let before = build(&all, BIG).unwrap();
    let removed = all[6].value;
    let rest: Vec<_> = all.iter().copied().filter(|b| b.value != removed).collect();
    let after = build(&rest, BIG).unwrap();
    let own = before.iter().filter(|&&v| v == removed).count();
    let changed = before.iter().zip(&after).filter(|(a, b)| a != b).count();
    assert!(
        changed >= own,
        "every entry of the removed backend must move"
    );
    assert!(
        changed < 2 * own,
        "{changed} entries changed, removed backend had {own}"
    );
    // The entries that did not belong to the removed backend mostly stay put.
    let others_moved = changed - own;
    assert!(others_moved < own, "{others_moved} foreign entries moved");
}

#[test]
fn weight_zero_backend_is_not_in_the_table() {
    let k = keys(4);
    let mut backends = equal(&k, 1);
    backends[2].weight = 0;
    let table = build(&backends, 251).unwrap();
    assert!(!table.contains(&backends[2].value));
    assert_shares(&[backends[0], backends[1], backends[3]], &table, 0.1);
}

#[test]
fn small_prime_size_251_works() {
    let k = keys(5);
    let backends = equal(&k, 1);
    let table = build(&backends, 251).unwrap();
    assert_eq!(table.len(), 251);
    // 50.2 entries each: the round-based fill keeps every backend within one entry of it.
    for (_, n) in counts(&table) {
        assert!((50..=51).contains(&n), "{n}");
    }
}

#[test]
fn no_weighted_backend_gives_none() {
    assert_eq!(build(&[], BIG), None);
    let k = keys(3);
    assert_eq!(build(&equal(&k, 0), BIG), None);
}

#[test]
fn non_prime_size_gives_none() {
    let k = keys(3);
    let backends = equal(&k, 1);
    assert_eq!(build(&backends, 65536), None);
    assert_eq!(build(&backends, 1), None);
    assert_eq!(build(&backends, 0), None);
}

#[test]
fn input_order_does_not_matter() {
    let k = keys(20);
    let mut backends = equal(&k, 1);
    for (i, b) in backends.iter_mut().enumerate() {
        b.weight = (i % 4 + 1) as u32;
    }
    let forward = build(&backends, BIG).unwrap();
    backends.reverse();
    assert_eq!(build(&backends, BIG).unwrap(), forward);
    // A fixed interleaving, different from both orders above.
    let mixed: Vec<_> = (0..backends.len())
        .map(|i| backends[(i * 7) % backends.len()])
        .collect();
    assert_eq!(build(&mixed, BIG).unwrap(), forward);
}

#[test]
fn is_prime_knows_small_and_table_sized_primes() {
    let primes = [2, 3, 5, 7, 11, 13, 251, 65537, 4_294_967_291];
    let composites = [0, 1, 4, 9, 15, 25, 255, 65535, 65536, 4_294_967_295];
    for p in primes {
        assert!(is_prime(p), "{p}");
    }
    for c in composites {
        assert!(!is_prime(c), "{c}");
    }
}

#[test]
fn thousand_backends_at_65537_build_quickly() {
    let k = keys(1000);
    let backends = equal(&k, 1);
    let limit = if cfg!(debug_assertions) {
        Duration::from_secs(5)
    } else {
        Duration::from_millis(100)
    };
    let start = Instant::now();
    let table = build(&backends, BIG).unwrap();
    let took = start.elapsed();
    assert_eq!(table.len(), BIG as usize);
    assert!(took < limit, "took {took:?}");
}

/// S-CL4: the same backends stored under other slot numbers, listed in another order, give
/// other table values but the same digest, and the digest recomputed from the table's keys
/// (what a dump of the maps shows) is the same too.
#[test]
fn digest_depends_on_backends_not_on_slot_numbers() {
    let k = keys(12);
    let a = equal(&k, 1);
    let mut b: Vec<_> = a
        .iter()
        .map(|m| MaglevBackend {
            value: m.value * 31 + 1000,
            ..*m
        })
        .collect();
    b.reverse();
    let (ta, tb) = (build(&a, 251).unwrap(), build(&b, 251).unwrap());
    assert_ne!(ta, tb, "the stored values differ");
    assert_eq!(digest(&ta, &a), digest(&tb, &b));
    let by_value: HashMap<u32, &str> = a.iter().map(|m| (m.value, m.key)).collect();
    let dumped: Vec<&str> = ta.iter().map(|v| by_value[v]).collect();
    assert_eq!(digest_of_keys(dumped.into_iter()), digest(&ta, &a));
}

/// S-CL4: a digest tells tables apart: one backend more, another weight, or another size
/// each change it; and its value is fixed across versions, like the table itself.
#[test]
fn digest_changes_with_the_backends_and_is_pinned() {
    let k = keys(12);
    let a = equal(&k, 1);
    let d = digest(&build(&a, 251).unwrap(), &a);
    let fewer = &a[..11];
    assert_ne!(digest(&build(fewer, 251).unwrap(), fewer), d);
    let mut heavier = a.clone();
    heavier[0].weight = 3;
    assert_ne!(digest(&build(&heavier, 251).unwrap(), &heavier), d);
    assert_ne!(digest(&build(&a, 257).unwrap(), &a), d);
    assert_eq!(format!("{d:016x}"), PINNED_DIGEST);
}

/// The digest of 12 equal backends at size 251 (`digest_changes_with_the_backends_and_is_pinned`).
const PINNED_DIGEST: &str = "2f82c430fda08d15";

/// One computation is shared by VIPs with the same backends: a table built as positions and
/// mapped to values is `build`'s table, its digest is `digest`'s, and the positions do not
/// depend on the values written (two VIPs' slot numbers).
#[test]
fn positions_give_the_same_table_and_digest_for_any_values() {
    let k = keys(40);
    let mut a = equal(&k, 1);
    for (i, b) in a.iter_mut().enumerate() {
        b.weight = 1 + (i as u32 % 3);
    }
    let mut b = a.clone();
    for (i, m) in b.iter_mut().enumerate() {
        m.value = 5000 - i as u32;
    }
    let table_a = build(&a, 1021).expect("table a");
    let table_b = build(&b, 1021).expect("table b");
    let mut live: Vec<&MaglevBackend<'_>> = a.iter().collect();
    live.sort_unstable_by(|x, y| (x.key, x.weight, x.value).cmp(&(y.key, y.weight, y.value)));
    let order: Vec<(&str, u32)> = live.iter().map(|m| (m.key, m.weight)).collect();
    let positions = build_positions(&order, 1021).expect("positions");
    let mapped: Vec<u32> = positions.iter().map(|&p| live[p as usize].value).collect();
    assert_eq!(mapped, table_a);
    // The same backends with other values: the same backend at every entry.
    let by_value_b: HashMap<u32, &str> = b.iter().map(|m| (m.value, m.key)).collect();
    let by_value_a: HashMap<u32, &str> = a.iter().map(|m| (m.value, m.key)).collect();
    for (x, y) in table_a.iter().zip(&table_b) {
        assert_eq!(by_value_a[x], by_value_b[y]);
    }
    let ordered_keys: Vec<&str> = order.iter().map(|o| o.0).collect();
    assert_eq!(
        digest_of_positions(&positions, &ordered_keys),
        digest(&table_a, &a)
    );
    assert_eq!(digest(&table_a, &a), digest(&table_b, &b));
    assert_eq!(build_positions(&[], 1021), None);
    assert_eq!(build_positions(&order, 1020), None);
}
