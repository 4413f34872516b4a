//! The DNS side of a DNS vService: a hickory-server request handler that answers each
//! query at arrival from the latest site statuses (S-GS3), authoritative for its zone.

use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use hickory_proto::op::{Header, HeaderCounts, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, SOA};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;

use crate::config::{DnsRecord, DnsVService};

use super::policy::{self, Family, View};
use super::rate::RateLimiter;
use super::status::{Board, SiteKey, SiteState};

/// Counters of one DNS vService, for the API and metrics.
#[derive(Debug, Default)]
pub struct Counters {
    /// Queries that reached the handler (rate-limited ones included).
    pub queries: AtomicU64,
    /// Answers with at least one address.
    pub answered: AtomicU64,
    /// Answers naming a standby site (S-GS1).
    pub standby_answers: AtomicU64,
    /// NOERROR answers without records: other types, or no site can serve.
    pub no_data: AtomicU64,
    /// NXDOMAIN: a name under the zone that is not configured.
    pub nxdomain: AtomicU64,
    /// REFUSED: a name outside the zone, or a class other than IN.
    pub refused: AtomicU64,
    /// FORMERR: not exactly one question.
    pub formerr: AtomicU64,
    /// NOTIMP: an opcode other than QUERY.
    pub notimp: AtomicU64,
    /// Dropped by the per-source rate limit.
    pub rate_limited: AtomicU64,
}

/// The zone as currently configured, swapped whole on a reload.
pub struct Zone {
    /// The configuration.
    pub cfg: DnsVService,
    /// Per record (same index as `cfg.records`): queries answered so far, for rotation.
    turns: Vec<AtomicU64>,
    /// The zone's SOA, for authoritative negative answers and SOA queries.
    soa: Option<Record>,
    /// A status older than this is treated as No Connection (the poller is stuck).
    stale_after: Duration,
}

impl Zone {
    /// The zone of `cfg`.
    pub fn new(cfg: DnsVService) -> Self {
        let turns = cfg.records.iter().map(|_| AtomicU64::new(0)).collect();
        let soa = soa_record(&cfg);
        let stale_after = cfg.poll_period * 3 + cfg.poll_timeout;
        Zone {
            cfg,
            turns,
            soa,
            stale_after,
        }
    }
}

/// SOA of the zone: this server as primary, the TTL as negative-caching time.
fn soa_record(cfg: &DnsVService) -> Option<Record> {
    let origin = Name::from_str(&cfg.zone).ok()?;
    let mname = Name::from_str("ns").ok()?.append_domain(&origin).ok()?;
    let rname = Name::from_str("hostmaster")
        .ok()?
        .append_domain(&origin)
        .ok()?;
    let serial = u32::try_from(super::status::unix_ms() / 1000).unwrap_or(1);
    let soa = SOA::new(mname, rname, serial, 3600, 600, 86_400, cfg.ttl);
    Some(Record::from_rdata(origin, cfg.ttl, RData::SOA(soa)))
}

/// What the handler shares with the pollers and the [`super::Gslb`] handle.
pub struct Shared {
    /// Current zone.
    pub zone: ArcSwap<Zone>,
    /// Site statuses.
    pub board: Board,
    /// Per-source limit (replaced on reload when the rate changes).
    pub limiter: ArcSwap<RateLimiter>,
    /// Counters.
    pub counters: Counters,
}

impl Shared {
    /// What the policy knows of each site of `record` at `now` (same order as its sites):
    /// the latest status, or No Connection when none is fresher than the zone's staleness
    /// bound. The answer to a query and the page's "answers now" both start from here.
    pub fn views(&self, zone: &Zone, record: &DnsRecord, now: Instant) -> Vec<View> {
        record
            .sites
            .iter()
            .map(|site| {
                let key = SiteKey {
                    dns_vservice: zone.cfg.name.clone(),
                    record: record.name.clone(),
                    site: site.name.clone(),
                };
                let latest = self.board.latest(&key);
                let fresh = latest
                    .as_ref()
                    .and_then(|l| l.checked)
                    .is_some_and(|checked| {
                        now.saturating_duration_since(checked) <= zone.stale_after
                    });
                match latest {
                    Some(latest) if fresh => View {
                        state: latest.state,
                        sessions: latest.sessions,
                    },
                    _ => View {
                        state: SiteState::NoConnection,
                        sessions: None,
                    },
                }
            })
            .collect()
    }

    /// The addresses record `index` of the current zone would be answered with by the next
    /// query of each family (A, AAAA), decided as a query would be, without taking its turn.
    pub fn answers_now(&self, index: usize) -> (Vec<IpAddr>, Vec<IpAddr>) {
        let zone = self.zone.load();
        let Some(record) = zone.cfg.records.get(index) else {
            return (Vec::new(), Vec::new());
        };
        let views = self.views(&zone, record, Instant::now());
        let turn = zone
            .turns
            .get(index)
            .map_or(0, |t| t.load(Ordering::Relaxed));
        (
            policy::choose(record, &views, Family::V4, turn),
            policy::choose(record, &views, Family::V6, turn),
        )
    }
}

/// The hickory-server handler of one DNS vService.
pub struct Handler {
    /// State shared with the pollers.
    pub shared: Arc<Shared>,
}

/// Outcome of one question, before it is encoded.
struct Answer {
    code: ResponseCode,
    records: Vec<Record>,
    /// Put the SOA in the authority section (negative answers).
    soa: bool,
}

impl Answer {
    fn code(code: ResponseCode) -> Self {
        Answer {
            code,
            records: Vec::new(),
            soa: false,
        }
    }
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let counters = &self.shared.counters;
        counters.queries.fetch_add(1, Ordering::Relaxed);
        if !self
            .shared
            .limiter
            .load()
            .allow(request.src().ip(), Instant::now())
        {
            counters.rate_limited.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(source = %request.src(), "dns query dropped by the rate limit");
            return ResponseInfo::from(Header {
                metadata: Metadata::response_from_request(&request.metadata),
                counts: HeaderCounts::default(),
            });
        }
        let zone = self.shared.zone.load_full();
        let answer = self.answer(&zone, request);
        let counter = match answer.code {
            ResponseCode::NoError if answer.records.is_empty() => &counters.no_data,
            ResponseCode::NoError => &counters.answered,
            ResponseCode::NXDomain => &counters.nxdomain,
            ResponseCode::Refused => &counters.refused,
            ResponseCode::FormErr => &counters.formerr,
            _ => &counters.notimp,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.response_code = answer.code;
        metadata.authoritative =
            matches!(answer.code, ResponseCode::NoError | ResponseCode::NXDomain);
        metadata.recursion_available = false;
        let soa: Vec<&Record> = zone.soa.iter().filter(|_| answer.soa).collect();
        let response = MessageResponseBuilder::from_message_request(request).build(
            metadata,
            answer.records.iter(),
            std::iter::empty(),
            soa,
            std::iter::empty(),
        );
        match response_handle.send_response(response).await {
            Ok(info) => info,
            Err(error) => {
                tracing::debug!(%error, source = %request.src(), "dns answer not sent");
                ResponseInfo::from(Header {
                    metadata,
                    counts: HeaderCounts::default(),
                })
            }
        }
    }
}

impl Handler {
    /// Decides the answer to `request` against `zone` and the latest statuses.
    fn answer(&self, zone: &Zone, request: &Request) -> Answer {
        if request.metadata.op_code != OpCode::Query {
            return Answer::code(ResponseCode::NotImp);
        }
        let [question] = request.queries.queries() else {
            return Answer::code(ResponseCode::FormErr);
        };
        if question.query_class() != DNSClass::IN {
            return Answer::code(ResponseCode::Refused);
        }
        let mut name = question.name().to_string().to_ascii_lowercase();
        if !name.ends_with('.') {
            name.push('.');
        }
        let cfg = &zone.cfg;
        let inside = name == cfg.zone || name.ends_with(&format!(".{}", cfg.zone));
        if !inside {
            return Answer::code(ResponseCode::Refused);
        }
        let qtype = question.query_type();
        let no_data = Answer {
            code: ResponseCode::NoError,
            records: Vec::new(),
            soa: true,
        };
        let Some(index) = cfg.records.iter().position(|r| r.name == name) else {
            if name == cfg.zone && qtype == RecordType::SOA {
                return Answer {
                    code: ResponseCode::NoError,
                    records: zone.soa.iter().cloned().collect(),
                    soa: false,
                };
            }
            // The apex and empty non-terminals exist (NODATA); anything else does not.
            let suffix = format!(".{name}");
            let exists = name == cfg.zone || cfg.records.iter().any(|r| r.name.ends_with(&suffix));
            if exists {
                return no_data;
            }
            return Answer {
                code: ResponseCode::NXDomain,
                records: Vec::new(),
                soa: true,
            };
        };
        let families: &[Family] = match qtype {
            RecordType::A => &[Family::V4],
            RecordType::AAAA => &[Family::V6],
            RecordType::ANY => &[Family::V4, Family::V6],
            _ => &[],
        };
        let records = self.addresses(zone, index, families, question.name().into());
        if records.is_empty() {
            return no_data;
        }
        Answer {
            code: ResponseCode::NoError,
            records,
            soa: false,
        }
    }

    /// The address records of record `index` for `families`, decided now (S-GS3).
    fn addresses(
        &self,
        zone: &Zone,
        index: usize,
        families: &[Family],
        owner: Name,
    ) -> Vec<Record> {
        let Some(record) = zone.cfg.records.get(index) else {
            return Vec::new();
        };
        let views = self.shared.views(zone, record, Instant::now());
        let turn = zone
            .turns
            .get(index)
            .map_or(0, |t| t.fetch_add(1, Ordering::Relaxed));
        let mut records = Vec::new();
        for family in families {
            let chosen = policy::choose(record, &views, *family, turn);
            let standby = chosen.iter().any(|address| {
                record.sites.iter().any(|s| {
                    s.standby
                        && (s.ipv4.map(IpAddr::V4) == Some(*address)
                            || s.ipv6.map(IpAddr::V6) == Some(*address))
                })
            });
            if standby {
                self.shared
                    .counters
                    .standby_answers
                    .fetch_add(1, Ordering::Relaxed);
            }
            records.extend(chosen.into_iter().map(|address| {
                let rdata = match address {
                    IpAddr::V4(v4) => RData::A(A(v4)),
                    IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
                };
                Record::from_rdata(owner.clone(), zone.cfg.ttl, rdata)
            }));
        }
        records
    }
}
