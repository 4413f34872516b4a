//! The last minutes of per-second rates, kept by the daemon so that a Live Stats page opened
//! during an incident shows at once what just happened, rather than "…" and empty charts
//! until it has polled a few times.
//!
//! A task samples the counters once a second, whether or not a page is open, and keeps
//! [`CAPACITY`] samples (5 minutes) in fixed rings: per vService the rates the page charts
//! and shows beside its charts, per DNS vService its queries, the totals of the overview
//! chart, and per Backend Service only its latest rates (its table shows no chart). The live
//! endpoint serves them when asked (`GET /api/v1/stats/live?history=1`), which the page does
//! on its first poll.
//!
//! Memory is fixed by the configuration, not by time or traffic: 6,000 bytes of samples per
//! vService (five 4-byte rates x [`CAPACITY`] samples), 1,200 per DNS vService, 7,200 for
//! the times and totals, and about 100 bytes per Backend Service, plus the names.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::time::MissedTickBehavior;

use super::view::expand;
use crate::config::ByName;
use crate::daemon::Daemon;
use crate::health::unix_ms_now;
use crate::proxy::balance::BackendStats;

/// Samples kept per series: 5 minutes at one a second, the span the page's charts show.
pub(crate) const CAPACITY: usize = 300;

/// Time between samples.
pub(crate) const STEP: Duration = Duration::from_secs(1);

/// A ring of at most `capacity` values that drops the oldest when full: memory fixed at
/// creation, whatever the time the daemon runs.
pub(crate) struct Ring<T> {
    buf: Box<[T]>,
    /// Index of the oldest value.
    start: usize,
    len: usize,
}

impl<T: Copy + Default> Ring<T> {
    /// An empty ring holding at most `capacity` values (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        Ring {
            buf: vec![T::default(); capacity.max(1)].into_boxed_slice(),
            start: 0,
            len: 0,
        }
    }

    /// Adds `value` as the newest, dropping the oldest when the ring is full.
    pub(crate) fn push(&mut self, value: T) {
        let cap = self.buf.len();
        if self.len < cap {
            self.buf[(self.start + self.len) % cap] = value;
            self.len += 1;
        } else {
            self.buf[self.start] = value;
            self.start = (self.start + 1) % cap;
        }
    }

    /// How many values it holds.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The values, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = T> + '_ {
        let cap = self.buf.len();
        (0..self.len).map(move |i| self.buf[(self.start + i) % cap])
    }
}

/// One second of a vService: what its card charts (main, errors) and shows beside the
/// charts. `f32` halves the memory of `f64` and is exact enough for a rate on a chart; NaN
/// says the counters could not be read that second.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct VsSample {
    /// Requests or connections (L7), packets (Network) per second.
    main: f32,
    /// L7: 5xx answers, 503s, 504s and server aborts; Network: drops; per second.
    errors: f32,
    /// Network: new flows per second.
    flows: f32,
    /// Bytes per second from clients.
    bytes_in: f32,
    /// Bytes per second to clients (Network: NAT replies).
    bytes_out: f32,
}

/// One second of the overview chart: the sums over every vService.
#[derive(Clone, Copy, Debug, Default)]
struct TotalSample {
    requests: f32,
    errors: f32,
    packets: f32,
    drops: f32,
}

/// A vService's counters as the page turns them into rates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct VsCounters {
    /// Requests or connections (L7), packets (Network).
    pub main: u64,
    /// L7: 5xx + unavailable + server timeouts + server aborts; Network: drops.
    pub errors: u64,
    /// Network: new flows.
    pub flows: u64,
    /// Bytes from clients.
    pub bytes_in: u64,
    /// Bytes to clients (Network: NAT replies).
    pub bytes_out: u64,
}

/// A Backend Service's counters as its row turns them into rates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BackendCounters {
    /// Requests or connections served (L7), packets (XDP).
    pub main: u64,
    /// Bytes from clients.
    pub bytes_in: u64,
    /// Bytes to clients.
    pub bytes_out: u64,
    /// L7: tries that failed on it (XDP has none).
    pub failures: Option<u64>,
}

/// What one sample reads from the daemon: every configured vService (network or not, its
/// counters when they could be read), DNS vService and Backend Service.
#[derive(Clone, Debug, Default)]
pub(crate) struct Reading {
    /// (name, is a Network vService, counters).
    pub vservices: Vec<(String, bool, Option<VsCounters>)>,
    /// (name, queries).
    pub dns: Vec<(String, Option<u64>)>,
    /// (name, counters).
    pub backends: Vec<(String, Option<BackendCounters>)>,
}

struct VsTrack {
    network: bool,
    prev: Option<VsCounters>,
    ring: Ring<VsSample>,
}

struct DnsTrack {
    prev: Option<u64>,
    ring: Ring<f32>,
}

#[derive(Default)]
struct BackendTrack {
    prev: Option<BackendCounters>,
    now: Option<[f32; 4]>,
}

#[derive(Default)]
struct Inner {
    /// When the previous sample was read (rates divide by the time since).
    last: Option<Instant>,
    /// Unix ms of each sample, oldest first; every series ends with the newest.
    times: Option<Ring<u64>>,
    total: Option<Ring<TotalSample>>,
    vservices: HashMap<String, VsTrack>,
    dns: HashMap<String, DnsTrack>,
    backends: HashMap<String, BackendTrack>,
}

/// The rates of the last minutes, shared by the sampler and the live endpoint.
#[derive(Default)]
pub(crate) struct History {
    inner: Mutex<Inner>,
}

/// The rate of a counter between two readings: NaN when either is missing, 0 when the
/// counter went down (its vService was recreated) rather than a negative rate.
fn rate(prev: Option<u64>, now: Option<u64>, secs: f64) -> f32 {
    match (prev, now) {
        (Some(p), Some(n)) if n >= p => ((n - p) as f64 / secs) as f32,
        (Some(_), Some(_)) => 0.0,
        _ => f32::NAN,
    }
}

/// A finite rate rounded to thousandths for the answer; None (null) for a second that
/// could not be read.
fn out(x: f32) -> Option<f64> {
    x.is_finite()
        .then(|| (f64::from(x) * 1000.0).round() / 1000.0)
}

impl History {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while sampling leaves rates, never a broken invariant: go on with them.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds one sample: `reading` taken at `at` (monotonic, for the rates) and `unix_ms`
    /// (for the page's time axis). The first reading only sets the baseline; a vService
    /// seen for the first time starts its ring at the next one. Names no longer read are
    /// forgotten.
    pub(crate) fn sample(&self, reading: &Reading, at: Instant, unix_ms: u64) {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let secs = inner
            .last
            .map(|last| at.saturating_duration_since(last).as_secs_f64())
            .filter(|s| *s > 0.0);
        inner.last = Some(at);
        let mut total = TotalSample::default();
        inner
            .vservices
            .retain(|name, _| reading.vservices.iter().any(|(n, _, _)| n == name));
        for (name, network, counters) in &reading.vservices {
            let track = inner.vservices.entry(name.clone()).or_insert(VsTrack {
                network: *network,
                prev: None,
                ring: Ring::new(CAPACITY),
            });
            if track.network != *network {
                // Another kind under the same name: its counters mean something else.
                *track = VsTrack {
                    network: *network,
                    prev: None,
                    ring: Ring::new(CAPACITY),
                };
            }
            let prev = track.prev.take();
            track.prev = *counters;
            let Some(secs) = secs else { continue };
            if prev.is_none() && counters.is_some() && track.ring.len() == 0 {
                // Its first reading: a baseline only.
                continue;
            }
            let r = |f: fn(&VsCounters) -> u64| {
                rate(prev.as_ref().map(f), counters.as_ref().map(f), secs)
            };
            let s = VsSample {
                main: r(|c| c.main),
                errors: r(|c| c.errors),
                flows: r(|c| c.flows),
                bytes_in: r(|c| c.bytes_in),
                bytes_out: r(|c| c.bytes_out),
            };
            track.ring.push(s);
            let add = |sum: &mut f32, x: f32| {
                if x.is_finite() {
                    *sum += x;
                }
            };
            if *network {
                add(&mut total.packets, s.main);
                add(&mut total.drops, s.errors);
            } else {
                add(&mut total.requests, s.main);
                add(&mut total.errors, s.errors);
            }
        }
        inner
            .dns
            .retain(|name, _| reading.dns.iter().any(|(n, _)| n == name));
        for (name, queries) in &reading.dns {
            let track = inner.dns.entry(name.clone()).or_insert(DnsTrack {
                prev: None,
                ring: Ring::new(CAPACITY),
            });
            let prev = std::mem::replace(&mut track.prev, *queries);
            let Some(secs) = secs else { continue };
            if prev.is_none() && queries.is_some() && track.ring.len() == 0 {
                continue;
            }
            track.ring.push(rate(prev, *queries, secs));
        }
        inner
            .backends
            .retain(|name, _| reading.backends.iter().any(|(n, _)| n == name));
        for (name, counters) in &reading.backends {
            let track = inner.backends.entry(name.clone()).or_default();
            let prev = std::mem::replace(&mut track.prev, *counters);
            track.now = match (prev, counters, secs) {
                (Some(p), Some(n), Some(secs)) => Some([
                    rate(Some(p.main), Some(n.main), secs),
                    rate(Some(p.bytes_in), Some(n.bytes_in), secs),
                    rate(Some(p.bytes_out), Some(n.bytes_out), secs),
                    rate(p.failures, n.failures, secs),
                ]),
                _ => None,
            };
        }
        if secs.is_some() {
            inner
                .times
                .get_or_insert_with(|| Ring::new(CAPACITY))
                .push(unix_ms);
            inner
                .total
                .get_or_insert_with(|| Ring::new(CAPACITY))
                .push(total);
        }
    }

    /// Everything held, for the live endpoint.
    pub(crate) fn view(&self) -> HistoryView {
        let inner = self.lock();
        let series = |ring: &Ring<VsSample>, f: fn(&VsSample) -> f32| -> Vec<Option<f64>> {
            ring.iter().map(|s| out(f(&s))).collect()
        };
        let total = inner.total.as_ref();
        let totals = |f: fn(&TotalSample) -> f32| -> Vec<Option<f64>> {
            total
                .into_iter()
                .flat_map(Ring::iter)
                .map(|s| out(f(&s)))
                .collect()
        };
        HistoryView {
            step_ms: u64::try_from(STEP.as_millis()).unwrap_or(1000),
            t: inner.times.iter().flat_map(Ring::iter).collect(),
            total: TotalSeries {
                requests: totals(|s| s.requests),
                errors: totals(|s| s.errors),
                packets: totals(|s| s.packets),
                drops: totals(|s| s.drops),
            },
            vservices: inner
                .vservices
                .iter()
                .map(|(name, t)| {
                    let v = VsSeries {
                        main: series(&t.ring, |s| s.main),
                        errors: series(&t.ring, |s| s.errors),
                        flows: t.network.then(|| series(&t.ring, |s| s.flows)),
                        bytes_in: series(&t.ring, |s| s.bytes_in),
                        bytes_out: series(&t.ring, |s| s.bytes_out),
                    };
                    (name.clone(), v)
                })
                .collect(),
            dns_vservices: inner
                .dns
                .iter()
                .map(|(name, t)| (name.clone(), t.ring.iter().map(out).collect()))
                .collect(),
            backends: inner
                .backends
                .iter()
                .filter_map(|(name, t)| {
                    let [main, bytes_in, bytes_out, errors] = t.now?;
                    let now = BackendNow {
                        main: out(main),
                        bytes_in: out(bytes_in),
                        bytes_out: out(bytes_out),
                        errors: out(errors),
                    };
                    Some((name.clone(), now))
                })
                .collect(),
        }
    }
}

/// The `history` of the live payload: sample times and, per series, its rates. Every series
/// ends with the newest sample; one shorter than `t` began later (a vService added by a
/// reload) and lines up with the end of `t`. A null rate is a second whose counters could
/// not be read.
#[derive(Serialize)]
pub(crate) struct HistoryView {
    /// Milliseconds between samples.
    step_ms: u64,
    /// When each sample was taken (unix ms), oldest first.
    t: Vec<u64>,
    /// The overview chart: sums over the L7 vServices (requests, errors) and the Network
    /// ones (packets, drops).
    total: TotalSeries,
    /// Per vService.
    vservices: BTreeMap<String, VsSeries>,
    /// Per DNS vService: queries per second.
    dns_vservices: BTreeMap<String, Vec<Option<f64>>>,
    /// Per Backend Service: its rates over the latest second only.
    backends: BTreeMap<String, BackendNow>,
}

/// Totals per second.
#[derive(Serialize)]
struct TotalSeries {
    requests: Vec<Option<f64>>,
    errors: Vec<Option<f64>>,
    packets: Vec<Option<f64>>,
    drops: Vec<Option<f64>>,
}

/// One vService's rates per second.
#[derive(Serialize)]
struct VsSeries {
    /// Requests or connections (L7), packets (Network).
    main: Vec<Option<f64>>,
    /// L7: 5xx answers, 503s, 504s, server aborts; Network: drops.
    errors: Vec<Option<f64>>,
    /// Network: new flows.
    #[serde(skip_serializing_if = "Option::is_none")]
    flows: Option<Vec<Option<f64>>>,
    bytes_in: Vec<Option<f64>>,
    bytes_out: Vec<Option<f64>>,
}

/// A Backend Service's rates over the latest second.
#[derive(Serialize)]
struct BackendNow {
    /// Requests or connections (L7), packets (XDP).
    main: Option<f64>,
    bytes_in: Option<f64>,
    bytes_out: Option<f64>,
    /// L7: failed tries.
    errors: Option<f64>,
}

/// Starts the sampler of `daemon` and returns what it fills. It reads once per [`STEP`]
/// until the daemon or the returned history is dropped; outside a tokio runtime nothing
/// samples and the history stays empty.
pub(crate) fn start(daemon: &Arc<Daemon>) -> Arc<History> {
    let history = Arc::new(History::default());
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        let (daemon, weak) = (Arc::downgrade(daemon), Arc::downgrade(&history));
        rt.spawn(sample_every_second(daemon, weak));
    }
    history
}

async fn sample_every_second(daemon: Weak<Daemon>, history: Weak<History>) {
    let mut tick = tokio::time::interval(STEP);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(d) = daemon.upgrade() else { return };
        if history.strong_count() == 0 {
            return;
        }
        // The XDP counters are read with system calls: off the async threads.
        let blocking = d.clone();
        let Ok(mut reading) = tokio::task::spawn_blocking(move || read(&blocking)).await else {
            continue;
        };
        let at = Instant::now();
        if !d.config().dns_vservices.is_empty() {
            let counters = d
                .gslb_status()
                .await
                .map(|g| g.counters)
                .unwrap_or_default();
            for (name, queries) in &mut reading.dns {
                *queries = counters
                    .iter()
                    .find(|c| c.dns_vservice == *name)
                    .map(|c| c.queries);
            }
        }
        drop(d);
        let Some(h) = history.upgrade() else { return };
        h.sample(&reading, at, unix_ms_now());
    }
}

/// Reads the counters the page turns into rates, as `/api/v1/stats/live` shows them: per
/// vService the proxy's (L7) or the XDP VIPs' (Network) counters, per Backend Service its
/// L7 counters over every vService it serves (zero for one listed in an L7 vService that
/// has served nothing yet), else its XDP ones. DNS queries are left for the caller (they
/// are read asynchronously).
fn read(daemon: &Daemon) -> Reading {
    let cfg = daemon.config();
    let names = ByName::new(&cfg);
    let net = daemon.network_status().and_then(Result::ok);
    let proxy = super::sessions::l7_counters(daemon);
    let mut l7_backends: HashMap<&str, BackendStats> = HashMap::new();
    for (name, stats) in proxy
        .iter()
        .flat_map(|p| p.values())
        .flat_map(|vs| &vs.backends)
    {
        l7_backends.entry(name.as_str()).or_default().absorb(stats);
    }
    let mut in_l7: HashSet<String> = HashSet::new();
    if proxy.is_some() {
        for vs in cfg.vservices.iter().filter(|v| !v.kind.is_network()) {
            let sets = vs.l7.iter().flat_map(|l| &l.conditional_sets);
            for list in std::iter::once(&vs.backends).chain(sets.map(|s| &s.backends)) {
                in_l7.extend(expand(&names, list).into_iter().map(|m| m.name));
            }
        }
    }
    let mut xdp_backends: HashMap<&str, lb_common::Counters> = HashMap::new();
    for b in net.iter().flat_map(|n| &n.vips).flat_map(|v| &v.backends) {
        xdp_backends
            .entry(b.name.as_str())
            .or_default()
            .add(&b.counters);
    }
    let vservices = cfg
        .vservices
        .iter()
        .map(|vs| {
            let network = vs.kind.is_network();
            let counters = if network {
                net.as_ref().map(|n| {
                    let mut c = lb_common::Counters::default();
                    for vip in n.vips.iter().filter(|v| v.name == vs.name) {
                        c.add(&vip.counters);
                    }
                    VsCounters {
                        main: c.packets,
                        errors: c.drops,
                        flows: c.new_flows,
                        bytes_in: c.bytes,
                        bytes_out: c.reply_bytes,
                    }
                })
            } else {
                proxy.as_ref().and_then(|p| p.get(&vs.name)).map(|l7| {
                    let mut all = BackendStats::default();
                    l7.backends.values().for_each(|b| all.absorb(b));
                    let c = &l7.counts;
                    VsCounters {
                        main: c.requests,
                        errors: all.classes[4]
                            + c.unavailable
                            + c.server_timeouts
                            + c.upstream_aborts,
                        flows: 0,
                        bytes_in: all.bytes_in,
                        bytes_out: all.bytes_out,
                    }
                })
            };
            (vs.name.clone(), network, counters)
        })
        .collect();
    let backends = cfg
        .backend_services
        .iter()
        .map(|s| {
            let name = s.name.as_str();
            let zero = BackendStats::default();
            let l7 = l7_backends
                .get(name)
                .or_else(|| in_l7.contains(name).then_some(&zero));
            let counters = match (l7, xdp_backends.get(name)) {
                (Some(l7), _) => Some(BackendCounters {
                    main: l7.total,
                    bytes_in: l7.bytes_in,
                    bytes_out: l7.bytes_out,
                    failures: Some(l7.failures),
                }),
                (None, Some(x)) => Some(BackendCounters {
                    main: x.packets,
                    bytes_in: x.bytes,
                    bytes_out: x.reply_bytes,
                    failures: None,
                }),
                (None, None) => None,
            };
            (s.name.clone(), counters)
        })
        .collect();
    let dns = cfg
        .dns_vservices
        .iter()
        .map(|d| (d.name.clone(), None))
        .collect();
    Reading {
        vservices,
        dns,
        backends,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_at_most_capacity_values_oldest_first() {
        let mut r = Ring::<u32>::new(5);
        assert_eq!(r.iter().count(), 0);
        for i in 0..3 {
            r.push(i);
        }
        assert_eq!(r.iter().collect::<Vec<_>>(), [0, 1, 2]);
        for i in 3..13 {
            r.push(i);
        }
        assert_eq!(r.len(), 5);
        assert_eq!(r.iter().collect::<Vec<_>>(), [8, 9, 10, 11, 12]);
        // A zero capacity still keeps the newest value.
        let mut one = Ring::<u32>::new(0);
        one.push(1);
        one.push(2);
        assert_eq!(one.iter().collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn a_vservice_ring_holds_six_thousand_bytes() {
        assert_eq!(std::mem::size_of::<VsSample>() * CAPACITY, 6000);
    }

    fn l7(name: &str, requests: u64) -> (String, bool, Option<VsCounters>) {
        let c = VsCounters {
            main: requests,
            errors: requests / 10,
            bytes_in: requests * 100,
            ..VsCounters::default()
        };
        (name.to_string(), false, Some(c))
    }

    fn json(h: &History) -> serde_json::Value {
        serde_json::to_value(h.view()).unwrap()
    }

    #[test]
    fn history_keeps_the_last_capacity_seconds_in_order() {
        let h = History::default();
        let t0 = Instant::now();
        // 20 requests more each second, then 40 more each second after the 200th.
        let mut requests = 0;
        let n = CAPACITY + 50;
        for i in 0..=n {
            let reading = Reading {
                vservices: vec![l7("web", requests)],
                dns: vec![("g".into(), Some(i as u64 * 3))],
                backends: vec![(
                    "b1".into(),
                    Some(BackendCounters {
                        main: requests,
                        failures: Some(0),
                        ..BackendCounters::default()
                    }),
                )],
            };
            h.sample(&reading, t0 + STEP * i as u32, 1_000_000 + 1000 * i as u64);
            requests += if i < 200 { 20 } else { 40 };
        }
        let v = json(&h);
        let t: Vec<u64> = serde_json::from_value(v["t"].clone()).unwrap();
        assert_eq!(t.len(), CAPACITY);
        assert!(t.windows(2).all(|w| w[1] == w[0] + 1000), "in order");
        assert_eq!(*t.last().unwrap(), 1_000_000 + 1000 * n as u64);
        let main: Vec<f64> = serde_json::from_value(v["vservices"]["web"]["main"].clone()).unwrap();
        assert_eq!(main.len(), CAPACITY);
        // Sample i covers the second before reading i: 20/s up to reading 200, then 40/s.
        let first = n - CAPACITY + 1;
        let want: Vec<f64> = (first..=n)
            .map(|i| if i <= 200 { 20.0 } else { 40.0 })
            .collect();
        assert_eq!(main, want);
        assert_eq!(v["vservices"]["web"]["errors"][0], 2.0);
        assert_eq!(v["vservices"]["web"]["bytes_in"][0], 2000.0);
        assert!(
            v["vservices"]["web"].get("flows").is_none(),
            "L7 has no flows"
        );
        assert_eq!(v["total"]["requests"].as_array().unwrap().len(), CAPACITY);
        assert_eq!(v["total"]["requests"][CAPACITY - 1], 40.0);
        assert_eq!(v["total"]["packets"][CAPACITY - 1], 0.0);
        assert_eq!(v["dns_vservices"]["g"][0], 3.0);
        assert_eq!(v["backends"]["b1"]["main"], 40.0);
        assert_eq!(v["backends"]["b1"]["errors"], 0.0);
    }

    #[test]
    fn history_starts_after_a_baseline_and_follows_the_configuration() {
        let h = History::default();
        let t0 = Instant::now();
        let at = |s: u32| t0 + STEP * s;
        h.sample(
            &Reading {
                vservices: vec![l7("web", 0)],
                ..Reading::default()
            },
            at(0),
            0,
        );
        assert_eq!(json(&h)["t"], serde_json::json!([]), "a baseline only");
        h.sample(
            &Reading {
                vservices: vec![l7("web", 10)],
                ..Reading::default()
            },
            at(1),
            1000,
        );
        // A vService added by a reload starts one sample later and lines up with the end.
        let both = Reading {
            vservices: vec![l7("web", 20), l7("api", 5)],
            ..Reading::default()
        };
        h.sample(&both, at(2), 2000);
        let both = Reading {
            vservices: vec![l7("web", 30), l7("api", 7)],
            ..Reading::default()
        };
        h.sample(&both, at(3), 3000);
        let v = json(&h);
        assert_eq!(v["t"], serde_json::json!([1000, 2000, 3000]));
        assert_eq!(
            v["vservices"]["web"]["main"],
            serde_json::json!([10.0, 10.0, 10.0])
        );
        assert_eq!(v["vservices"]["api"]["main"], serde_json::json!([2.0]));
        assert_eq!(
            v["total"]["requests"],
            serde_json::json!([10.0, 10.0, 12.0])
        );
        // A counter that went down (the vService recreated) gives 0, unreadable counters
        // null; a vService no longer configured is forgotten.
        let reading = Reading {
            vservices: vec![l7("web", 3), ("api".into(), false, None)],
            ..Reading::default()
        };
        h.sample(&reading, at(4), 4000);
        let v = json(&h);
        assert_eq!(v["vservices"]["web"]["main"][3], 0.0);
        assert_eq!(v["vservices"]["api"]["main"][1], serde_json::Value::Null);
        h.sample(
            &Reading {
                vservices: vec![l7("web", 4)],
                ..Reading::default()
            },
            at(5),
            5000,
        );
        assert!(json(&h)["vservices"].get("api").is_none());
    }

    #[test]
    fn a_network_vservice_shows_its_flows() {
        let h = History::default();
        let t0 = Instant::now();
        for i in 0..3u64 {
            let c = VsCounters {
                main: 1000 * i,
                errors: i,
                flows: 10 * i,
                bytes_in: 0,
                bytes_out: 0,
            };
            let reading = Reading {
                vservices: vec![("vip".into(), true, Some(c))],
                ..Reading::default()
            };
            // Half a second apart: the rate is per second, not per sample.
            h.sample(&reading, t0 + STEP / 2 * i as u32, 500 * i);
        }
        let v = json(&h);
        assert_eq!(
            v["vservices"]["vip"]["main"],
            serde_json::json!([2000.0, 2000.0])
        );
        assert_eq!(
            v["vservices"]["vip"]["flows"],
            serde_json::json!([20.0, 20.0])
        );
        assert_eq!(v["total"]["packets"], serde_json::json!([2000.0, 2000.0]));
        assert_eq!(v["total"]["drops"], serde_json::json!([2.0, 2.0]));
    }
}
