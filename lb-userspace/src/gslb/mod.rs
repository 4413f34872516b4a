//! Global service standby (S-GS): DNS vServices that answer each configured name with the
//! addresses of the sites whose service is up, standbys only while no active site can
//! serve, decided at query time from statuses polled from each site daemon's API.
//!
//! - `server`: the answer to each message (zone, NXDOMAIN/REFUSED/FORMERR, rate limit) and
//!   the counters, by answer code or by why there was none.
//! - `serve`: the UDP and TCP sockets, and their drain at a stop (an upgrade loses no query).
//! - `policy`: the pure answer choice (S-GS1..3; round robin, weighted, least loaded).
//! - `poll`: reading a site's `GET /api/v1/stats/live` into a status (S-GS4).
//! - `status`: statuses and their transition log.
//! - `rate`: the per-source query limit.
//! - `instance`: one running DNS vService and its reload.
//! - `names`: what each name answers now, for the Live Stats page.

mod instance;
mod names;
pub mod policy;
pub mod poll;
mod rate;
mod serve;
mod server;
pub mod status;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arc_swap::ArcSwap;
use tokio::sync::Mutex;

use crate::config::Config;

pub use instance::DnsSockets;
use instance::Instance;
use server::Shared;

pub use names::{NameNow, policy_name};
pub use rate::RateLimiter;
pub use status::{SiteKey, SiteState, SiteStatus, SiteTransition};

/// Query counters of one DNS vService (a snapshot), for the API and metrics. Every message
/// received counts in `queries` and in exactly one of `answered`, `no_data`, `nxdomain`,
/// `refused`, `formerr`, `notimp`, `servfail` (answers sent, by code), `rate_limited`,
/// `too_short`, `ignored` and `send_failed` (no answer, by why), so operators can tell
/// what every query got.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DnsCounters {
    /// DNS vService name.
    pub dns_vservice: String,
    /// Messages received over UDP and TCP, whatever they hold.
    pub queries: u64,
    /// Answers with at least one address (NOERROR).
    pub answered: u64,
    /// Answers naming a standby site.
    pub standby_answers: u64,
    /// NOERROR answers without records.
    pub no_data: u64,
    /// NXDOMAIN answers.
    pub nxdomain: u64,
    /// REFUSED answers.
    pub refused: u64,
    /// FORMERR answers: to messages that do not decode (`malformed`) and to queries with
    /// other than one question.
    pub formerr: u64,
    /// NOTIMP answers.
    pub notimp: u64,
    /// SERVFAIL answers (an answer that could not be encoded).
    pub servfail: u64,
    /// Queries dropped by the per-source rate limit.
    pub rate_limited: u64,
    /// Messages shorter than a DNS header, not answered (no id to answer).
    pub too_short: u64,
    /// Messages not answered on purpose: responses, and sources no answer can reach.
    pub ignored: u64,
    /// Answers the socket did not take.
    pub send_failed: u64,
    /// Messages that do not decode past their header (answered FORMERR, also in `formerr`).
    pub malformed: u64,
}

/// Runs every DNS vService of a configuration; [`Gslb::update`] applies a reload.
pub struct Gslb {
    instances: Mutex<HashMap<String, Instance>>,
    /// Sockets handed over at start, taken by the DNS vServices that listen there.
    inherited: Mutex<DnsSockets>,
    /// What the synchronous readers see, in configuration order.
    published: Published,
}

/// The running DNS vServices as readers see them, in configuration order.
type Published = Arc<ArcSwap<Vec<(String, Arc<Shared>)>>>;

/// A lock-free view of the running DNS vServices for the API: reading it never waits for a
/// reload, which polls the sites (possibly this very daemon's API) while it applies.
#[derive(Clone)]
pub struct GslbReader {
    published: Published,
}

impl Gslb {
    /// Starts every DNS vService of `cfg` (binding its UDP and TCP sockets and polling its
    /// sites once). Fails, stopping what it started, when a listener cannot be bound.
    pub async fn start(cfg: Arc<Config>) -> anyhow::Result<Gslb> {
        Self::start_inheriting(cfg, DnsSockets::default()).await
    }

    /// Like [`Gslb::start`], listening on `inherited` sockets (from the `lb run` being
    /// replaced) where their address is a DNS vService's; unused ones are closed.
    pub async fn start_inheriting(cfg: Arc<Config>, inherited: DnsSockets) -> anyhow::Result<Gslb> {
        let gslb = Gslb {
            instances: Mutex::new(HashMap::new()),
            inherited: Mutex::new(inherited),
            published: Arc::new(ArcSwap::from_pointee(Vec::new())),
        };
        if let Err(error) = gslb.update(cfg).await {
            gslb.shutdown().await;
            return Err(error);
        }
        *gslb.inherited.lock().await = DnsSockets::default();
        Ok(gslb)
    }

    /// Copies of every DNS vService's sockets: (address, UDP, TCP), for the `lb run` that
    /// takes over.
    pub async fn listening_sockets(
        &self,
    ) -> Vec<(
        std::net::SocketAddr,
        std::os::fd::OwnedFd,
        std::os::fd::OwnedFd,
    )> {
        let instances = self.instances.lock().await;
        let mut out = Vec::new();
        for instance in instances.values() {
            match instance.sockets() {
                Ok((udp, tcp)) => out.push((instance.listen, udp, tcp)),
                Err(e) => {
                    tracing::warn!(listen = %instance.listen, "cannot copy the DNS sockets: {e}")
                }
            }
        }
        out
    }

    /// Applies a reloaded configuration: unchanged listeners keep serving (no socket is
    /// closed), statuses of unchanged site services are kept, new DNS vServices start and
    /// removed ones stop. Returns the first error (e.g. a new port that cannot be bound);
    /// the other DNS vServices are still updated.
    pub async fn update(&self, cfg: Arc<Config>) -> anyhow::Result<()> {
        let mut instances = self.instances.lock().await;
        let mut first_error = None;
        let wanted: Vec<&str> = cfg.dns_vservices.iter().map(|d| d.name.as_str()).collect();
        let gone: Vec<String> = instances
            .keys()
            .filter(|name| !wanted.contains(&name.as_str()))
            .cloned()
            .collect();
        for name in gone {
            if let Some(instance) = instances.remove(&name) {
                instance.stop().await;
            }
        }
        for dns in &cfg.dns_vservices {
            let listen = std::net::SocketAddr::new(dns.address, dns.port);
            if let Some(instance) = instances.get_mut(&dns.name)
                && instance.listen == listen
            {
                instance.reconfigure(dns.clone()).await;
                continue;
            }
            if let Some(old) = instances.remove(&dns.name) {
                old.stop().await;
            }
            let mut inherited = self.inherited.lock().await;
            let started = Instance::start(dns.clone(), &mut inherited).await;
            drop(inherited);
            match started {
                Ok(instance) => {
                    instances.insert(dns.name.clone(), instance);
                }
                Err(error) => {
                    tracing::error!("{error:#}");
                    first_error.get_or_insert(error);
                }
            }
        }
        let published = cfg
            .dns_vservices
            .iter()
            .filter_map(|d| {
                instances
                    .get(&d.name)
                    .map(|i| (d.name.clone(), i.shared.clone()))
            })
            .collect();
        self.published.store(Arc::new(published));
        first_error.map_or(Ok(()), Err)
    }

    /// The lock-free view for the API.
    pub fn reader(&self) -> GslbReader {
        GslbReader {
            published: self.published.clone(),
        }
    }

    /// Site status per site service (S-GS4), for the API and the Live Stats page.
    pub fn status(&self) -> Vec<SiteStatus> {
        self.reader().status()
    }

    /// Status changes of every site service, oldest first per DNS vService.
    pub fn transitions(&self) -> Vec<SiteTransition> {
        self.reader().transitions()
    }

    /// Query counters per DNS vService.
    pub fn counters(&self) -> Vec<DnsCounters> {
        self.reader().counters()
    }

    /// What every name of every DNS vService answers now, in configuration order.
    pub fn names(&self) -> Vec<NameNow> {
        self.reader().names()
    }

    /// Stops every DNS vService.
    pub async fn shutdown(self) {
        self.published.store(Arc::new(Vec::new()));
        let instances = self.instances.into_inner();
        for (_, instance) in instances {
            instance.stop().await;
        }
    }
}

impl GslbReader {
    /// Site status per site service (S-GS4), for the API and the Live Stats page.
    pub fn status(&self) -> Vec<SiteStatus> {
        self.published
            .load()
            .iter()
            .flat_map(|(_, shared)| shared.board.statuses())
            .collect()
    }

    /// Status changes of every site service, oldest first per DNS vService.
    pub fn transitions(&self) -> Vec<SiteTransition> {
        self.published
            .load()
            .iter()
            .flat_map(|(_, shared)| shared.board.transitions())
            .collect()
    }

    /// Query counters per DNS vService.
    pub fn counters(&self) -> Vec<DnsCounters> {
        self.published
            .load()
            .iter()
            .map(|(name, shared)| {
                let c = &shared.counters;
                let get = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
                DnsCounters {
                    dns_vservice: name.clone(),
                    queries: get(&c.queries),
                    answered: get(&c.answered),
                    standby_answers: get(&c.standby_answers),
                    no_data: get(&c.no_data),
                    nxdomain: get(&c.nxdomain),
                    refused: get(&c.refused),
                    formerr: get(&c.formerr),
                    notimp: get(&c.notimp),
                    servfail: get(&c.servfail),
                    rate_limited: get(&c.rate_limited),
                    too_short: get(&c.too_short),
                    ignored: get(&c.ignored),
                    send_failed: get(&c.send_failed),
                    malformed: get(&c.malformed),
                }
            })
            .collect()
    }

    /// What every name of every DNS vService answers now, in configuration order.
    pub fn names(&self) -> Vec<NameNow> {
        self.published
            .load()
            .iter()
            .flat_map(|(_, shared)| names::names_now(shared))
            .collect()
    }
}

#[cfg(test)]
mod tests;
