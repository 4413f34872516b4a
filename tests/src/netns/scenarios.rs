//! The end-to-end scenarios both address families run, each written once.
//!
//! `e2e_network` / `e2e_health` (IPv4) and `e2e_ipv6` (IPv6) test the same behaviour of the
//! balancer: weighted spread, UDP, Port Range, ANY-L3, DSR, backend removal, daemon restart
//! and the S-HC9 / S-RF2 health timing. The logic does not depend on the address family, so
//! each scenario lives here, takes a [`Family`], and every test function is one call into it.
//! Split by concern: [`data_path`] (traffic through one `lb load`), [`lifecycle`] (reloads and
//! restarts with live connections), [`health`] (a backend failing and coming back).
//! Tests for one family only stay in their test file and use the helpers here.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use super::client::{ask_many, count_by_backend, tcp_ask_at};
use super::topology::Topology;

pub use super::family::Family;

pub mod data_path;
pub mod health;
pub mod lifecycle;

/// `count` new TCP connections from the client to `addr`, every one answered, counted by
/// backend.
pub fn ask_counts(topo: &Topology, count: usize, addr: SocketAddr) -> BTreeMap<String, usize> {
    count_by_backend(&ask_many(&topo.client, count, tcp_ask_at, addr))
}

/// Asserts each backend's share is within 10 percentage points of its weight's share.
/// (Percentage points, not a relative 10 %: with 600 flows hashed at random the standard
/// deviation of a 1/3 share is 1.9 points, so relative 10 % of 1/3 would fail by chance.)
pub fn assert_shares(label: &str, counts: &BTreeMap<String, usize>, weights: &[(&str, u32)]) {
    let total: usize = counts.values().sum();
    let weight_sum: u32 = weights.iter().map(|(_, w)| w).sum();
    for (name, w) in weights {
        let got = counts.get(*name).copied().unwrap_or(0) as f64 / total as f64;
        let want = f64::from(*w) / f64::from(weight_sum);
        println!(
            "{label}: {name} weight {w}: {} of {total} = {:.1} % (expected {:.1} %)",
            counts.get(*name).copied().unwrap_or(0),
            got * 100.0,
            want * 100.0
        );
        assert!(
            (got - want).abs() <= 0.10,
            "{label}: {name} got {:.1} %, expected {:.1} % +- 10 points",
            got * 100.0,
            want * 100.0
        );
    }
    for name in counts.keys() {
        assert!(
            weights.iter().any(|(n, _)| n == name),
            "{label}: unexpected backend {name}"
        );
    }
}
