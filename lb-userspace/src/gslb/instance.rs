//! One running DNS vService: its UDP and TCP listeners ([`super::serve`]), its pollers, and
//! how a reload changes it in place.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::config::DnsVService;

use super::poll::{self, HttpClient};
use super::rate::RateLimiter;
use super::serve;
use super::server::{Counters, Handler, Shared, Zone};
use super::status::{Board, Observation, SiteKey, SiteState};

/// Idle time after which a DNS-over-TCP connection is closed.
const TCP_IDLE: Duration = Duration::from_secs(5);
/// How long a stop may take (answering what was read, closing TCP connections) before the
/// serving tasks are cut.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Sockets handed over by the `lb run` this one replaces, by address: DNS vServices
/// listen on them instead of binding.
#[derive(Debug, Default)]
pub struct DnsSockets {
    /// UDP sockets.
    pub udp: HashMap<SocketAddr, std::net::UdpSocket>,
    /// TCP listeners.
    pub tcp: HashMap<SocketAddr, std::net::TcpListener>,
}

/// One site API polled on behalf of several site services.
struct Target {
    api: String,
    token: Option<String>,
    /// Site services reading this API, with their vService name at the site.
    sites: Vec<(SiteKey, String)>,
}

/// A running DNS vService.
pub struct Instance {
    /// Where it listens (UDP and TCP).
    pub listen: SocketAddr,
    /// State shared with the handler.
    pub shared: Arc<Shared>,
    /// Turned true to stop serving.
    stop: watch::Sender<bool>,
    /// The UDP and TCP serving tasks.
    serving: Vec<JoinHandle<()>>,
    pollers: Vec<JoinHandle<()>>,
    /// Copies of its UDP and TCP sockets, for an `lb run` that takes over.
    copies: (OwnedFd, OwnedFd),
}

impl Instance {
    /// Binds UDP and TCP on the configured address (or takes `inherited` sockets there,
    /// from the `lb run` this one replaces), polls every site once (so the first answers
    /// already reflect the sites), then serves.
    pub async fn start(cfg: DnsVService, inherited: &mut DnsSockets) -> anyhow::Result<Instance> {
        let listen = SocketAddr::new(cfg.address, cfg.port);
        let name = &cfg.name;
        let udp = match inherited.udp.remove(&listen) {
            Some(socket) => socket
                .set_nonblocking(true)
                .and_then(|()| UdpSocket::from_std(socket)),
            None => UdpSocket::bind(listen).await,
        }
        .with_context(|| format!("dns vservice `{name}`: binding UDP {listen}"))?;
        let tcp = match inherited.tcp.remove(&listen) {
            Some(socket) => socket
                .set_nonblocking(true)
                .and_then(|()| TcpListener::from_std(socket)),
            None => TcpListener::bind(listen).await,
        }
        .with_context(|| format!("dns vservice `{name}`: binding TCP {listen}"))?;
        let copies = (
            udp.as_fd().try_clone_to_owned()?,
            tcp.as_fd().try_clone_to_owned()?,
        );
        let shared = Arc::new(Shared {
            limiter: ArcSwap::from_pointee(RateLimiter::new(cfg.rate_limit)),
            zone: ArcSwap::from_pointee(Zone::new(cfg.clone())),
            board: Board::default(),
            counters: Counters::default(),
        });
        shared.board.retain(wanted(&cfg), |_| false);
        let pollers = start_pollers(&shared, &cfg).await;
        let handler = Arc::new(Handler {
            shared: shared.clone(),
        });
        let (stop, stopping) = watch::channel(false);
        let serving = vec![
            tokio::spawn(serve::udp(udp, handler.clone(), stopping.clone())),
            tokio::spawn(serve::tcp(tcp, handler, TCP_IDLE, stopping)),
        ];
        tracing::info!(dns_vservice = %cfg.name, %listen, zone = %cfg.zone, "dns vservice listening");
        Ok(Instance {
            listen,
            shared,
            stop,
            serving,
            pollers,
            copies,
        })
    }

    /// Copies of its (UDP, TCP) sockets, sharing them (closing ours later leaves these open).
    pub fn sockets(&self) -> std::io::Result<(OwnedFd, OwnedFd)> {
        Ok((self.copies.0.try_clone()?, self.copies.1.try_clone()?))
    }

    /// Applies a new configuration with the same listener: statuses of site services that
    /// still poll the same API for the same vService are kept, pollers restart.
    pub async fn reconfigure(&mut self, cfg: DnsVService) {
        let old = self.shared.zone.load_full();
        let same_target = |key: &SiteKey| site_of(&old.cfg, key) == site_of(&cfg, key);
        self.shared.board.retain(wanted(&cfg), same_target);
        if old.cfg.rate_limit != cfg.rate_limit {
            self.shared
                .limiter
                .store(Arc::new(RateLimiter::new(cfg.rate_limit)));
        }
        self.shared.zone.store(Arc::new(Zone::new(cfg.clone())));
        for poller in self.pollers.drain(..) {
            poller.abort();
        }
        self.pollers = start_pollers(&self.shared, &cfg).await;
    }

    /// Stops polling and serving, draining first: no message more is read (at an upgrade
    /// the successor shares the sockets and reads the next ones), every message already read
    /// is answered, open TCP connections close between messages. Bounded by [`STOP_GRACE`].
    pub async fn stop(mut self) {
        for poller in self.pollers.drain(..) {
            poller.abort();
        }
        let _ = self.stop.send(true);
        let deadline = tokio::time::Instant::now() + STOP_GRACE;
        for mut task in self.serving.drain(..) {
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                tracing::warn!(listen = %self.listen, "dns vservice did not stop in time; cut");
                task.abort();
            }
        }
    }
}

/// What decides a site service's status: its API, token and vService name.
fn site_of<'a>(cfg: &'a DnsVService, key: &SiteKey) -> Option<(&'a str, Option<&'a str>, &'a str)> {
    let record = cfg.records.iter().find(|r| r.name == key.record)?;
    let site = record.sites.iter().find(|s| s.name == key.site)?;
    Some((&site.api, site.token.as_deref(), &site.vservice))
}

/// Every site service of `cfg`: key, vService at the site, standby flag.
fn wanted(cfg: &DnsVService) -> Vec<(SiteKey, String, bool)> {
    cfg.records
        .iter()
        .flat_map(|record| {
            record.sites.iter().map(|site| {
                let key = SiteKey {
                    dns_vservice: cfg.name.clone(),
                    record: record.name.clone(),
                    site: site.name.clone(),
                };
                (key, site.vservice.clone(), site.standby)
            })
        })
        .collect()
}

/// An API base URL and its token.
type ApiKey = (String, Option<String>);

/// Site services grouped by the API they read, so each API is polled once per period.
fn targets(cfg: &DnsVService) -> Vec<Target> {
    let mut by_api: BTreeMap<ApiKey, Vec<(SiteKey, String)>> = BTreeMap::new();
    for (key, vservice, _) in wanted(cfg) {
        if let Some((api, token, _)) = site_of(cfg, &key) {
            by_api
                .entry((api.to_owned(), token.map(str::to_owned)))
                .or_default()
                .push((key, vservice));
        }
    }
    by_api
        .into_iter()
        .map(|((api, token), sites)| Target { api, token, sites })
        .collect()
}

/// Polls every target once (concurrently, each bounded by the poll timeout), then starts
/// one periodic poller per target.
async fn start_pollers(shared: &Arc<Shared>, cfg: &DnsVService) -> Vec<JoinHandle<()>> {
    let client = poll::client(cfg.poll_timeout);
    let targets: Vec<Arc<Target>> = targets(cfg).into_iter().map(Arc::new).collect();
    let mut first = JoinSet::new();
    for target in &targets {
        let (shared, client, target) = (shared.clone(), client.clone(), target.clone());
        let timeout = cfg.poll_timeout;
        first.spawn(async move { poll_once(&shared, &client, &target, timeout).await });
    }
    while first.join_next().await.is_some() {}
    targets
        .into_iter()
        .map(|target| {
            let (shared, client) = (shared.clone(), client.clone());
            let (period, timeout) = (cfg.poll_period, cfg.poll_timeout);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(period).await;
                    poll_once(&shared, &client, &target, timeout).await;
                }
            })
        })
        .collect()
}

/// One poll of one API, written to the board for every site service reading it.
async fn poll_once(shared: &Shared, client: &HttpClient, target: &Target, timeout: Duration) {
    let result = poll::fetch(client, &target.api, target.token.as_deref(), timeout).await;
    for (key, vservice) in &target.sites {
        let seen = match &result {
            Ok(doc) => poll::evaluate(doc, vservice),
            Err(reason) => Observation {
                state: SiteState::NoConnection,
                reason: format!("{}: {reason}", target.api),
                sessions: None,
            },
        };
        shared.board.observe(key, seen);
    }
}
