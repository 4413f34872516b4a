//! The DNS side of a DNS vService: a hickory-server request handler that answers each
//! query at arrival from the latest site statuses (S-GS3), authoritative for its zone.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use hickory_proto::op::{Header, HeaderCounts, MessageType, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, SOA};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder, BinEncodable, BinEncoder};
use hickory_server::net::xfer::Protocol;
use hickory_server::server::Request;
use hickory_server::zone_handler::{MessageRequest, MessageResponseBuilder};

use crate::config::{DnsRecord, DnsVService};

use super::policy::{self, Family, View};
use super::rate::RateLimiter;
use super::status::{Board, SiteKey, SiteState};

/// Counters of one DNS vService, for the API and metrics. Every message received counts in
/// `queries` and in exactly one of the others but `standby_answers` and `malformed`: the
/// code of the answer sent, or why none was.
#[derive(Debug, Default)]
pub struct Counters {
    /// Messages received (UDP datagrams and TCP messages), whatever they hold.
    pub queries: AtomicU64,
    /// Answers sent with at least one address (NOERROR).
    pub answered: AtomicU64,
    /// Answers naming a standby site (S-GS1).
    pub standby_answers: AtomicU64,
    /// NOERROR answers sent without records: other types, or no site can serve.
    pub no_data: AtomicU64,
    /// NXDOMAIN sent: a name under the zone that is not configured.
    pub nxdomain: AtomicU64,
    /// REFUSED sent: a name outside the zone, or a class other than IN.
    pub refused: AtomicU64,
    /// FORMERR sent: a message that does not decode, or not exactly one question.
    pub formerr: AtomicU64,
    /// NOTIMP sent: an opcode other than QUERY.
    pub notimp: AtomicU64,
    /// SERVFAIL sent: an answer that could not be encoded.
    pub servfail: AtomicU64,
    /// Dropped by the per-source rate limit (no answer).
    pub rate_limited: AtomicU64,
    /// Shorter than a DNS header: no answer can name its id.
    pub too_short: AtomicU64,
    /// Not answered on purpose: responses (answering could loop between two servers) and
    /// messages from a source no answer can reach (port 0, unspecified or broadcast).
    pub ignored: AtomicU64,
    /// Answers the socket did not take (the client got none).
    pub send_failed: AtomicU64,
    /// Messages whose header decoded but whose body did not (answered FORMERR, so also in
    /// `formerr`).
    pub malformed: AtomicU64,
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

/// Answers the messages of one DNS vService, whatever they hold: decodes, decides, encodes
/// and counts, so every message received is counted exactly once (by the code of its answer,
/// or by why it got none).
pub struct Handler {
    /// State shared with the pollers.
    pub shared: Arc<Shared>,
}

/// How a message arrived: it bounds the size of the answer (RFC 1035 4.2.1: 512 bytes over
/// UDP without EDNS, which these answers never carry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A datagram.
    Udp,
    /// A length-prefixed message on a TCP connection.
    Tcp,
}

/// The response code an answer carries, as counted once it is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    /// NOERROR with at least one address.
    Answered,
    /// NOERROR without records.
    NoData,
    /// NXDOMAIN.
    NxDomain,
    /// REFUSED.
    Refused,
    /// FORMERR.
    FormErr,
    /// NOTIMP.
    NotImp,
    /// SERVFAIL: the answer could not be encoded.
    ServFail,
}

/// What to do with one received message.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// Send these bytes, then count them with [`Counters::sent`] (or
    /// [`Counters::send_failed`]).
    Send {
        /// The encoded answer.
        bytes: Vec<u8>,
        /// Its response code.
        code: Code,
    },
    /// No answer; the reason is already counted.
    Nothing,
}

impl Counters {
    /// Counts an answer that left (by its code).
    pub fn sent(&self, code: Code) {
        let counter = match code {
            Code::Answered => &self.answered,
            Code::NoData => &self.no_data,
            Code::NxDomain => &self.nxdomain,
            Code::Refused => &self.refused,
            Code::FormErr => &self.formerr,
            Code::NotImp => &self.notimp,
            Code::ServFail => &self.servfail,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an answer the socket would not take.
    pub fn send_failed(&self) {
        self.send_failed.fetch_add(1, Ordering::Relaxed);
    }
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

/// Length of a DNS header: anything shorter cannot even be answered FORMERR (an answer
/// echoes the header's id).
const HEADER_LEN: usize = 12;

impl Handler {
    /// Decides what to send back for one message received from `src`, counting it: every
    /// message adds one to `queries`, and one to exactly one of the answer codes (once sent),
    /// `rate_limited`, `too_short` or `ignored`.
    pub fn reply(&self, raw: &[u8], src: SocketAddr, transport: Transport) -> Reply {
        let counters = &self.shared.counters;
        counters.queries.fetch_add(1, Ordering::Relaxed);
        let header = match Header::read(&mut BinDecoder::new(raw)) {
            Ok(header) if raw.len() >= HEADER_LEN => header,
            _ => {
                counters.too_short.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(source = %src, len = raw.len(), "dns message shorter than a header");
                return Reply::Nothing;
            }
        };
        if header.metadata.message_type == MessageType::Response || !answerable(src) {
            // Answering a response could start a loop between two servers.
            counters.ignored.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(source = %src, "dns message not answered: a response, or an unanswerable source");
            return Reply::Nothing;
        }
        if !self.shared.limiter.load().allow(src.ip(), Instant::now()) {
            counters.rate_limited.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(source = %src, "dns query dropped by the rate limit");
            return Reply::Nothing;
        }
        let protocol = match transport {
            Transport::Udp => Protocol::Udp,
            Transport::Tcp => Protocol::Tcp,
        };
        let request = match Request::from_bytes(raw.to_vec(), src, protocol) {
            Ok(request) => request,
            Err(error) => {
                counters.malformed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(source = %src, %error, "malformed dns query: FORMERR");
                return formerr(&header);
            }
        };
        let zone = self.shared.zone.load_full();
        let answer = self.answer(&zone, &request);
        let code = match answer.code {
            ResponseCode::NoError if answer.records.is_empty() => Code::NoData,
            ResponseCode::NoError => Code::Answered,
            ResponseCode::NXDomain => Code::NxDomain,
            ResponseCode::Refused => Code::Refused,
            ResponseCode::FormErr => Code::FormErr,
            ResponseCode::NotImp => Code::NotImp,
            _ => Code::ServFail,
        };
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.response_code = answer.code;
        metadata.authoritative =
            matches!(answer.code, ResponseCode::NoError | ResponseCode::NXDomain);
        metadata.recursion_available = false;
        let soa: Vec<&Record> = zone.soa.iter().filter(|_| answer.soa).collect();
        let response = MessageResponseBuilder::from_message_request(&request).build(
            metadata,
            answer.records.iter(),
            std::iter::empty(),
            soa,
            std::iter::empty(),
        );
        let mut bytes = Vec::with_capacity(512);
        let mut encoder = BinEncoder::new(&mut bytes);
        encoder.set_max_size(max_size(transport));
        match response.destructive_emit(&mut encoder) {
            Ok(_) => Reply::Send { bytes, code },
            Err(error) => {
                tracing::warn!(source = %src, %error, "dns answer could not be encoded: SERVFAIL");
                servfail(&request.metadata)
            }
        }
    }
}

/// Largest answer for `transport`.
fn max_size(transport: Transport) -> u16 {
    match transport {
        Transport::Udp => 512,
        Transport::Tcp => u16::MAX,
    }
}

/// False for a source an answer cannot go to (port 0, an unspecified or broadcast address).
fn answerable(src: SocketAddr) -> bool {
    let address_ok = match src.ip() {
        IpAddr::V4(v4) => !v4.is_unspecified() && !v4.is_broadcast(),
        IpAddr::V6(v6) => !v6.is_unspecified(),
    };
    src.port() != 0 && address_ok
}

/// FORMERR to a message whose header decoded but whose body did not: the header echoed with
/// no question (the question could not be read).
fn formerr(header: &Header) -> Reply {
    let mut metadata = Metadata::response_from_request(&header.metadata);
    metadata.response_code = ResponseCode::FormErr;
    metadata.recursion_available = false;
    header_only(metadata, Code::FormErr)
}

/// SERVFAIL with the header alone, when the full answer could not be encoded.
fn servfail(request: &Metadata) -> Reply {
    let mut metadata = Metadata::response_from_request(request);
    metadata.response_code = ResponseCode::ServFail;
    metadata.recursion_available = false;
    header_only(metadata, Code::ServFail)
}

/// An answer of a header alone (no section), which always fits.
fn header_only(metadata: Metadata, code: Code) -> Reply {
    let header = Header {
        metadata,
        counts: HeaderCounts::default(),
    };
    let mut bytes = Vec::with_capacity(HEADER_LEN);
    let mut encoder = BinEncoder::new(&mut bytes);
    match header.emit(&mut encoder) {
        Ok(()) => Reply::Send { bytes, code },
        // A 12-byte header fits any buffer; nothing else can fail.
        Err(_) => Reply::Nothing,
    }
}

impl Handler {
    /// Decides the answer to `request` against `zone` and the latest statuses.
    fn answer(&self, zone: &Zone, request: &MessageRequest) -> Answer {
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
        let mut named = Vec::new();
        for family in families {
            let chosen = policy::choose_sites(record, &views, *family, turn);
            let standby = chosen
                .iter()
                .any(|(site, _)| record.sites.get(*site).is_some_and(|s| s.standby));
            if standby {
                self.shared
                    .counters
                    .standby_answers
                    .fetch_add(1, Ordering::Relaxed);
            }
            records.extend(chosen.iter().map(|(_, address)| {
                let rdata = match address {
                    IpAddr::V4(v4) => RData::A(A(*v4)),
                    IpAddr::V6(v6) => RData::AAAA(AAAA(*v6)),
                };
                Record::from_rdata(owner.clone(), zone.cfg.ttl, rdata)
            }));
            named.extend(chosen.into_iter().map(|(site, _)| site));
        }
        // A site named in both families of one answer (ANY) is one answer naming it.
        named.sort_unstable();
        named.dedup();
        let sites = named
            .iter()
            .filter_map(|index| record.sites.get(*index))
            .map(|site| site.name.as_str());
        self.shared
            .board
            .count_answers(&zone.cfg.name, &record.name, sites);
        records
    }
}
