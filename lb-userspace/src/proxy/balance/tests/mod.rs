//! Tests of balancing: algorithms, limits and queues, persistence, counters.

mod algorithm;
mod eject;
mod limit;
mod persist;
mod stats;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::BackendInfo;
use crate::config::{Algorithm, CookiePersistence, L7Settings, Persistence, SameSite, Timeouts};
use crate::selection::{Eligible, ListSelection, Tier};

/// L7 settings with the given algorithm and persistence, queue of `queue_size`, 5 s queue
/// timeout.
fn l7(algorithm: Algorithm, persistence: Persistence, queue_size: usize) -> L7Settings {
    L7Settings {
        algorithm,
        persistence,
        timeouts: Timeouts {
            connect: Duration::from_secs(5),
            client: Duration::from_secs(30),
            server: Duration::from_secs(30),
            queue: Duration::from_secs(5),
            keep_alive: Duration::from_secs(60),
        },
        queue_size,
        retry: Default::default(),
        tls: None,
        error_page: None,
        forwarded_headers: true,
        conditional_sets: Vec::new(),
    }
}

/// Cookie persistence with the defaults.
fn cookie() -> Persistence {
    Persistence::Cookie(CookiePersistence {
        name: "LBSERVER".to_owned(),
        http_only: true,
        secure: false,
        same_site: SameSite::Lax,
    })
}

/// Source-IP persistence with this idle expiry.
fn source_ip(idle_secs: u64) -> Persistence {
    Persistence::SourceIp {
        idle: Duration::from_secs(idle_secs),
    }
}

/// One backend description: (name, weight, limit, maintenance). Backends get addresses
/// 127.0.0.1:8001, 8002... in order.
type Spec<'a> = (&'a str, u32, Option<u32>, bool);

/// A resolver over `specs`, as the proxy builds from the Config.
fn infos(specs: &[Spec<'_>]) -> impl Fn(&str) -> Option<BackendInfo> + Clone + use<> {
    let map: HashMap<String, BackendInfo> = specs
        .iter()
        .enumerate()
        .map(|(i, &(name, weight, limit, maintenance))| {
            let port = 8001 + u16::try_from(i).unwrap();
            let info = BackendInfo {
                name: name.to_owned(),
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                weight,
                max_connections: limit,
                maintenance,
                passive_failures: None,
            };
            (name.to_owned(), info)
        })
        .collect();
    move |name: &str| map.get(name).cloned()
}

/// A Mains selection with these eligible (name, weight), drained and down members.
fn sel(eligible: &[(&str, u32)], drained: &[&str], down: &[&str]) -> ListSelection {
    ListSelection {
        tier: if eligible.is_empty() {
            Tier::None
        } else {
            Tier::Mains
        },
        eligible: eligible
            .iter()
            .map(|&(name, weight)| Eligible {
                name: name.to_owned(),
                weight,
            })
            .collect(),
        drained: drained.iter().map(|&d| d.to_owned()).collect(),
        down: down.iter().map(|&d| d.to_owned()).collect(),
    }
}

/// The i-th test client address (distinct for every i < 2^24).
fn client(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | (i & 0x00ff_ffff)))
}

/// Share of `name` in `counts` over `total`.
fn share(counts: &HashMap<String, u32>, name: &str, total: u32) -> f64 {
    f64::from(counts.get(name).copied().unwrap_or(0)) / f64::from(total)
}
