//! `GET /metrics`: Prometheus text exposition of health, admin state, list tiers and the
//! XDP and proxy counters, for dashboards and alerts.

use std::fmt::Write;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::ApiState;
use super::view::Snapshot;
use crate::config::VServiceKind;
use crate::proxy::VsCounts;
use crate::proxy::balance::BackendStats;
use crate::stats::{BUCKETS, HistogramSnapshot};

/// Reads one counter of an XDP counter block.
type CounterOf = fn(&lb_common::Counters) -> u64;

/// Escapes a label value per the exposition format.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Accumulates families, each with its HELP and TYPE lines once.
struct Out(String);

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", esc(v)))
            .collect();
        if labels.is_empty() {
            let _ = writeln!(self.0, "{name} {value}");
        } else {
            let _ = writeln!(self.0, "{name}{{{}}} {value}", labels.join(","));
        }
    }

    /// The `_bucket`, `_sum` and `_count` series of one histogram (seconds).
    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &HistogramSnapshot) {
        let bucket = format!("{name}_bucket");
        let cumulative = h.cumulative();
        let bounds = BUCKETS.iter().map(f64::to_string).chain(["+Inf".into()]);
        for (le, n) in bounds.zip(cumulative) {
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.sample(&bucket, &with_le, n);
        }
        self.sample(&format!("{name}_sum"), labels, h.sum_seconds());
        self.sample(&format!("{name}_count"), labels, h.count());
    }
}

/// Renders every family from one snapshot; `dns` holds the DNS vServices' counters and
/// `sites` their site services.
pub(crate) fn render(
    st: &ApiState,
    dns: &[crate::gslb::DnsCounters],
    sites: &[crate::gslb::SiteStatus],
) -> String {
    let snap = Snapshot::take(&st.daemon);
    let cfg = &snap.cfg;
    let mut o = Out(String::new());

    o.family(
        "lb_build_info",
        "gauge",
        "Always 1; the labels say which lb runs.",
    );
    o.sample(
        "lb_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );
    node(&mut o, st, &snap);
    o.family(
        "lb_health_check_duration_seconds",
        "histogram",
        "How long health checks took, passed or failed, per health check profile.",
    );
    let durations = st.daemon.engine().check_durations();
    for hc in &cfg.health_checks {
        let h = durations.get(&hc.name).copied().unwrap_or_default();
        o.histogram(
            "lb_health_check_duration_seconds",
            &[("health_check", &hc.name)],
            &h,
        );
    }
    o.family(
        "lb_backend_health",
        "gauge",
        "Health decision per Backend Service address: 1 for its current state.",
    );
    for s in &cfg.backend_services {
        for (key, address) in s.health_targets() {
            let h = snap.health(&key);
            let address = address.to_string();
            for state in ["OK", "Error", "Preparing"] {
                o.sample(
                    "lb_backend_health",
                    &[
                        ("backend", &s.name),
                        ("address", &address),
                        ("state", state),
                    ],
                    u8::from(h == state),
                );
            }
        }
    }
    o.family(
        "lb_backend_maintenance",
        "gauge",
        "1 when Maintenance Mode is on (S-MT).",
    );
    for s in &cfg.backend_services {
        o.sample(
            "lb_backend_maintenance",
            &[("backend", &s.name)],
            u8::from(s.maintenance),
        );
    }
    o.family(
        "lb_backend_backup",
        "gauge",
        "1 when the Backup flag is on (S-BK).",
    );
    for s in &cfg.backend_services {
        o.sample(
            "lb_backend_backup",
            &[("backend", &s.name)],
            u8::from(s.backup),
        );
    }
    o.family(
        "lb_list_tier",
        "gauge",
        "Tier serving a list: 0 mains, N backup N, -1 none (S-BK9).",
    );
    let lists = snap.list_index();
    for vs in &cfg.vservices {
        for list in snap.lists_in(&lists, vs) {
            let v: i64 = match list.tier.as_str() {
                "mains" => 0,
                t => t
                    .strip_prefix("backup ")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(-1),
            };
            o.sample(
                "lb_list_tier",
                &[("vservice", &vs.name), ("list", &list.name)],
                v,
            );
        }
    }
    o.family(
        "lb_health_transitions_total",
        "counter",
        "Health state transitions since the service appeared.",
    );
    for s in &cfg.backend_services {
        for (key, address) in s.health_targets() {
            let n = st.daemon.engine().transition_count(&key);
            let address = address.to_string();
            o.sample(
                "lb_health_transitions_total",
                &[("backend", &s.name), ("address", &address)],
                n,
            );
        }
    }
    if let Some(net) = &snap.net {
        let per_backend: [(&str, &str, CounterOf); 5] = [
            (
                "lb_xdp_packets_total",
                "Packets forwarded by XDP per Backend Service (over every VIP it serves in).",
                |c| c.packets,
            ),
            (
                "lb_xdp_bytes_total",
                "Bytes forwarded by XDP per Backend Service (over every VIP it serves in).",
                |c| c.bytes,
            ),
            (
                "lb_xdp_new_flows_total",
                "New flows scheduled by XDP per Backend Service (over every VIP it serves in).",
                |c| c.new_flows,
            ),
            (
                "lb_xdp_reply_packets_total",
                "NAT replies from a backend that XDP translated back to clients.",
                |c| c.reply_packets,
            ),
            (
                "lb_xdp_reply_bytes_total",
                "Bytes of NAT replies from a backend that XDP translated back to clients.",
                |c| c.reply_bytes,
            ),
        ];
        // Counted per Backend Service over every VIP it serves in: one sample each.
        let services: std::collections::BTreeMap<&str, &lb_common::Counters> = net
            .vips
            .iter()
            .flat_map(|v| &v.backends)
            .map(|b| (b.name.as_str(), &b.counters))
            .collect();
        for (name, help, get) in per_backend {
            o.family(name, "counter", help);
            for (backend, counters) in &services {
                o.sample(name, &[("backend", backend)], get(counters));
            }
        }
        let per_vip: [(&str, &str, CounterOf); 7] = [
            (
                "lb_xdp_vip_packets_total",
                "Packets to a Network VIP that XDP handled.",
                |c| c.packets,
            ),
            (
                "lb_xdp_vip_bytes_total",
                "Bytes to a Network VIP that XDP handled.",
                |c| c.bytes,
            ),
            (
                "lb_xdp_vip_new_flows_total",
                "New flows to a Network VIP.",
                |c| c.new_flows,
            ),
            (
                "lb_xdp_drops_total",
                "Packets dropped per Network VIP.",
                |c| c.drops,
            ),
            (
                "lb_xdp_vip_reply_packets_total",
                "NAT replies that XDP translated back to a Network VIP's clients.",
                |c| c.reply_packets,
            ),
            (
                "lb_xdp_vip_reply_bytes_total",
                "Bytes of NAT replies that XDP translated back to a Network VIP's clients.",
                |c| c.reply_bytes,
            ),
            (
                "lb_xdp_ct_miss_rehash_total",
                "Non-SYN packets to a Network VIP that missed the connection table and were hashed again (another balancer's flow, or a restart).",
                |c| c.ct_misses,
            ),
        ];
        for (name, help, get) in per_vip {
            o.family(name, "counter", help);
            for vip in &net.vips {
                let labels = [("vservice", vip.name.as_str()), ("vip", &vip.address)];
                o.sample(name, &labels, get(&vip.counters));
            }
        }
        o.family(
            "lb_xdp_maglev_table_info",
            "gauge",
            "The Maglev table in use per Network VIP: balancers showing the same digest send every flow to the same backend (1; table size in `size`).",
        );
        for vip in &net.vips {
            let size = vip.table_size.to_string();
            let labels = [
                ("vservice", vip.name.as_str()),
                ("vip", &vip.address),
                ("digest", &vip.table_digest),
                ("size", &size),
            ];
            o.sample("lb_xdp_maglev_table_info", &labels, 1);
        }
        o.family("lb_xdp_global_total", "counter", "Global XDP counters.");
        for (counter, v) in &net.global {
            o.sample("lb_xdp_global_total", &[("counter", counter)], v);
        }
    }
    if let Some(proxy) = &snap.proxy {
        let per_backend: [(&str, &str, &str, BackendCountOf); 4] = [
            (
                "lb_l7_requests_total",
                "counter",
                "Requests (HTTP) or connections (L7 TCP) per backend.",
                |b| b.total,
            ),
            (
                "lb_l7_current_sessions",
                "gauge",
                "Open requests or connections per backend.",
                |b| b.current,
            ),
            (
                "lb_l7_retries_total",
                "counter",
                "Requests (HTTP) or connections (L7 TCP) sent again after failing on a backend, by the backend they left.",
                |b| b.retries,
            ),
            (
                "lb_l7_redispatches_total",
                "counter",
                "Retries that went to another backend, by the backend they left.",
                |b| b.redispatches,
            ),
        ];
        for (family, kind, help, read) in per_backend {
            o.family(family, kind, help);
            for (vs, c) in proxy {
                for (b, v) in &c.backends {
                    o.sample(family, &[("vservice", vs), ("backend", b)], read(v));
                }
            }
        }
        o.family(
            "lb_l7_request_duration_seconds",
            "histogram",
            "HTTP requests from their head to their answer's last byte, per vService.",
        );
        for (vs, c) in proxy {
            let http = cfg
                .vservices
                .iter()
                .any(|v| v.name == *vs && v.kind == VServiceKind::Http);
            if http {
                o.histogram(
                    "lb_l7_request_duration_seconds",
                    &[("vservice", vs)],
                    &c.request_time,
                );
            }
        }
        o.family(
            "lb_l7_upstream_connect_duration_seconds",
            "histogram",
            "Connects to backends that succeeded, per vService.",
        );
        for (vs, c) in proxy {
            o.histogram(
                "lb_l7_upstream_connect_duration_seconds",
                &[("vservice", vs)],
                &c.connect_time,
            );
        }
        o.family(
            "lb_l7_responses_total",
            "counter",
            "HTTP answers per backend, by status class (1xx to 5xx).",
        );
        for (vs, c) in proxy {
            for (b, v) in &c.backends {
                for (i, n) in v.classes.iter().enumerate() {
                    let class = format!("{}xx", i + 1);
                    let labels = [
                        ("vservice", vs.as_str()),
                        ("backend", b),
                        ("code_class", &class),
                    ];
                    o.sample("lb_l7_responses_total", &labels, n);
                }
            }
        }
        o.family(
            "lb_l7_bytes_total",
            "counter",
            "Bytes proxied per backend and direction.",
        );
        for (vs, c) in proxy {
            for (b, v) in &c.backends {
                for (direction, n) in [("in", v.bytes_in), ("out", v.bytes_out)] {
                    let labels = [
                        ("vservice", vs.as_str()),
                        ("backend", b),
                        ("direction", direction),
                    ];
                    o.sample("lb_l7_bytes_total", &labels, n);
                }
            }
        }
        let per_vservice: [(&str, &str, CountOf); 6] = [
            (
                "lb_l7_unavailable_total",
                "Requests refused because nothing could serve (S-BK9).",
                |c| c.unavailable,
            ),
            (
                "lb_l7_malformed_requests_total",
                "Requests refused before reaching a backend: malformed (400) or over a size limit (414, 431).",
                |c| c.bad_requests,
            ),
            (
                "lb_l7_upstream_aborts_total",
                "Answers or connections a backend cut short.",
                |c| c.upstream_aborts,
            ),
            (
                "lb_l7_retries_refused_total",
                "Retries not made because the vService's retry budget was spent.",
                |c| c.retries_refused,
            ),
            (
                "lb_l7_client_aborts_total",
                "Requests whose client left before the answer: the upstream request was cancelled.",
                |c| c.client_aborts,
            ),
            (
                "lb_l7_server_timeouts_total",
                "Requests answered 504: the backend stayed silent past the server timeout.",
                |c| c.server_timeouts,
            ),
        ];
        for (family, help, read) in per_vservice {
            o.family(family, "counter", help);
            for (vs, c) in proxy {
                o.sample(family, &[("vservice", vs)], read(&c.counts));
            }
        }
    }
    dns_families(&mut o, dns, sites);
    o.0
}

/// The DNS vServices' families: messages received, answers by response code, messages left
/// unanswered by reason, and answers per site, so that every query is accounted for (the
/// answers and the unanswered add up to the queries).
fn dns_families(o: &mut Out, dns: &[crate::gslb::DnsCounters], sites: &[crate::gslb::SiteStatus]) {
    if dns.is_empty() {
        return;
    }
    let per_dns: [(&str, &str, DnsCountOf); 6] = [
        (
            "lb_dns_queries_total",
            "Messages a DNS vService received over UDP and TCP, malformed ones included.",
            |c| c.queries,
        ),
        (
            "lb_dns_answers_total",
            "Answers with at least one address.",
            |c| c.answered,
        ),
        (
            "lb_dns_standby_answers_total",
            "Answers naming a standby site.",
            |c| c.standby_answers,
        ),
        ("lb_dns_nxdomain_total", "NXDOMAIN answers.", |c| c.nxdomain),
        (
            "lb_dns_formerr_total",
            "FORMERR answers (malformed queries, or not exactly one question).",
            |c| c.formerr,
        ),
        (
            "lb_dns_rate_limited_total",
            "Queries dropped by the per-source rate limit.",
            |c| c.rate_limited,
        ),
    ];
    for (family, help, read) in per_dns {
        o.family(family, "counter", help);
        for c in dns {
            o.sample(family, &[("dns_vservice", &c.dns_vservice)], read(c));
        }
    }
    let by_rcode: [(&str, DnsCountOf); 6] = [
        ("NOERROR", |c| c.answered + c.no_data),
        ("NXDOMAIN", |c| c.nxdomain),
        ("REFUSED", |c| c.refused),
        ("FORMERR", |c| c.formerr),
        ("NOTIMP", |c| c.notimp),
        ("SERVFAIL", |c| c.servfail),
    ];
    o.family(
        "lb_dns_responses_total",
        "counter",
        "Answers a DNS vService sent, by response code.",
    );
    for c in dns {
        for (rcode, read) in by_rcode {
            let labels = [("dns_vservice", c.dns_vservice.as_str()), ("rcode", rcode)];
            o.sample("lb_dns_responses_total", &labels, read(c));
        }
    }
    let unanswered: [(&str, DnsCountOf); 4] = [
        ("rate_limited", |c| c.rate_limited),
        ("too_short", |c| c.too_short),
        ("ignored", |c| c.ignored),
        ("send_failed", |c| c.send_failed),
    ];
    o.family(
        "lb_dns_unanswered_total",
        "counter",
        "Messages a DNS vService did not answer, by reason: over the rate limit, shorter than \
         a DNS header, a response or from a source no answer can reach (ignored), or the \
         answer could not be sent.",
    );
    for c in dns {
        for (reason, read) in unanswered {
            let labels = [
                ("dns_vservice", c.dns_vservice.as_str()),
                ("reason", reason),
            ];
            o.sample("lb_dns_unanswered_total", &labels, read(c));
        }
    }
    o.family(
        "lb_dns_malformed_total",
        "counter",
        "Messages that did not decode past their header (answered FORMERR).",
    );
    for c in dns {
        let labels = [("dns_vservice", c.dns_vservice.as_str())];
        o.sample("lb_dns_malformed_total", &labels, c.malformed);
    }
    o.family(
        "lb_dns_site_answers_total",
        "counter",
        "Answers that named a site, per DNS vService, name and site.",
    );
    for s in sites {
        let labels = [
            ("dns_vservice", s.key.dns_vservice.as_str()),
            ("name", s.key.record.as_str()),
            ("site", s.key.site.as_str()),
        ];
        o.sample("lb_dns_site_answers_total", &labels, s.answers);
    }
}

/// This node: when it started, whether its data path and proxy run, and how its last
/// configuration push to each cluster peer went.
fn node(o: &mut Out, st: &ApiState, snap: &Snapshot) {
    o.family(
        "lb_start_time_seconds",
        "gauge",
        "When this lb run started, in seconds since the Unix epoch.",
    );
    o.sample("lb_start_time_seconds", &[], start_time());
    o.family(
        "lb_data_path_loaded",
        "gauge",
        "1 when the XDP data path is loaded and its counters could be read.",
    );
    o.sample("lb_data_path_loaded", &[], u8::from(snap.net.is_some()));
    o.family(
        "lb_proxy_running",
        "gauge",
        "1 when the L7 proxy runs (HTTP or L7 TCP vServices).",
    );
    o.sample("lb_proxy_running", &[], u8::from(snap.proxy.is_some()));
    announcements(o, st);
    let Some(cluster) = &snap.cfg.cluster else {
        return;
    };
    o.family(
        "lb_cluster_manual_sync",
        "gauge",
        "1 when Manual Sync Mode holds changes until Synchronize.",
    );
    o.sample("lb_cluster_manual_sync", &[], u8::from(cluster.manual_sync));
    if let Some(status) = st.cluster.status() {
        o.family(
            "lb_cluster_store_reachable",
            "gauge",
            "1 when etcd (the shared configuration) answered the last call, 0 while this node runs on its last applied revision without it.",
        );
        o.sample(
            "lb_cluster_store_reachable",
            &[],
            u8::from(status.store_reachable),
        );
        o.family(
            "lb_cluster_applied_revision",
            "gauge",
            "The etcd revision of the shared configuration this node runs (0: its local file, before etcd first answered).",
        );
        o.sample("lb_cluster_applied_revision", &[], status.applied_revision);
        o.family(
            "lb_cluster_store_revision",
            "gauge",
            "The revision of the shared configuration etcd holds, as this node last saw it.",
        );
        o.sample("lb_cluster_store_revision", &[], status.store_revision);
        o.family(
            "lb_cluster_revision_refused",
            "gauge",
            "1 when this node refused the last revision it was given (it did not validate).",
        );
        o.sample(
            "lb_cluster_revision_refused",
            &[],
            u8::from(status.refused.is_some()),
        );
    }
    if cluster.peers.is_empty() {
        return;
    }
    o.family(
        "lb_cluster_peer_last_sync_ok",
        "gauge",
        "1 when the last configuration push to a peer succeeded, 0 when it failed (absent before the first).",
    );
    let pushes: Vec<_> = cluster
        .peers
        .iter()
        .filter_map(|p| st.pushes.last(&p.name).map(|r| (p, r)))
        .collect();
    for (peer, r) in &pushes {
        o.sample(
            "lb_cluster_peer_last_sync_ok",
            &[("peer", &peer.name)],
            u8::from(r.ok),
        );
    }
    o.family(
        "lb_cluster_peer_last_sync_timestamp_seconds",
        "gauge",
        "When the last configuration push to a peer was made, in seconds since the Unix epoch.",
    );
    for (peer, r) in &pushes {
        o.sample(
            "lb_cluster_peer_last_sync_timestamp_seconds",
            &[("peer", &peer.name)],
            r.at_unix_ms as f64 / 1000.0,
        );
    }
}

/// Route announcement (S-AN): drained or not, and each VIP's route.
fn announcements(o: &mut Out, st: &ApiState) {
    let a = st.daemon.announcements();
    if !a.enabled {
        return;
    }
    o.family(
        "lb_node_drained",
        "gauge",
        "1 while this balancer is drained (lb node drain): every VIP route is withdrawn.",
    );
    o.sample("lb_node_drained", &[], u8::from(a.drained));
    o.family(
        "lb_vip_announced",
        "gauge",
        "1 while the VIP's route is in the table BIRD announces to the routers, else 0.",
    );
    for v in &a.vips {
        let address = v.address.to_string();
        o.sample(
            "lb_vip_announced",
            &[("vip", &address), ("table", &a.table.to_string())],
            u8::from(v.announced),
        );
    }
    o.family(
        "lb_vip_routes_error",
        "gauge",
        "1 while the VIP routes could not be written to the table (see the log).",
    );
    o.sample("lb_vip_routes_error", &[], u8::from(a.error.is_some()));
}

/// This process's start: read the first time, which [`super::router`] makes the API's start.
pub(crate) fn start_time() -> f64 {
    static START: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    })
}

/// Reads one counter of a DNS vService.
type DnsCountOf = fn(&crate::gslb::DnsCounters) -> u64;

/// Reads one counter of a vService.
type CountOf = fn(&VsCounts) -> u64;
/// Reads one counter of a backend within a vService.
type BackendCountOf = fn(&BackendStats) -> u64;

/// `GET /metrics`.
pub(crate) async fn metrics(State(st): State<ApiState>) -> impl IntoResponse {
    let (dns, sites) = st
        .daemon
        .gslb_status()
        .await
        .map(|g| (g.counters, g.sites))
        .unwrap_or_default();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(&st, &dns, &sites),
    )
}
