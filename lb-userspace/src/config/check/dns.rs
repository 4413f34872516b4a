//! `[[dns_vservice]]` (S-GS): listener, zone, TTL, polling, rate limit, and each name's
//! site services.

use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::time::Duration;

use serde_spanned::Spanned;

use super::backends::{address, address6, ranged};
use super::control::{check_token, valid_host};
use super::names::Namespace;
use super::seconds::seconds;
use super::vservice::listeners::{Listener, overlap, same_socket_address};
use crate::config::issues::Issues;
use crate::config::model::{
    DnsPolicy, DnsRecord, DnsVService, PortSpec, SiteService, Unreachable, VServiceKind,
};
use crate::config::raw::RawVService;
use crate::config::raw::dns::{
    RawDnsPolicy, RawDnsRecord, RawDnsVService, RawSite, RawUnreachable,
};
use crate::config::raw::document::Entry;

/// Defaults of a DNS vService.
const DEFAULT_PORT: u16 = 53;
const DEFAULT_TTL: u32 = 30;
const DEFAULT_POLL_PERIOD: Duration = Duration::from_secs(2);
const DEFAULT_POLL_TIMEOUT: Duration = Duration::from_secs(1);
const DEFAULT_RATE_LIMIT: u32 = 50;
/// Bounds of the polling durations: faster polling would load the sites' APIs for nothing.
const MIN_POLL: Duration = Duration::from_millis(100);
const MAX_POLL: Duration = Duration::from_secs(3600);
/// Longest name (RFC 1035: 255 octets on the wire, 253 as text).
const MAX_NAME: usize = 253;

/// What the DNS checks need from the rest of the file.
pub(in crate::config) struct Context<'a> {
    /// `[[vservice]]` entries (their names share the namespace).
    pub vservices: &'a [Entry<RawVService>],
    /// Listeners of the valid `[[vservice]]`s.
    pub listeners: &'a [Listener],
    /// The API listener.
    pub api: SocketAddr,
}

/// Validates every `[[dns_vservice]]`; only error-free ones are returned.
pub(in crate::config) fn dns_vservices(
    entries: &[Entry<RawDnsVService>],
    context: &Context<'_>,
    issues: &mut Issues,
) -> Vec<DnsVService> {
    let mut names = Namespace::default();
    let mut sockets: Vec<(SocketAddr, String, usize)> = Vec::new();
    let mut valid = Vec::new();
    for entry in entries {
        let before = issues.error_count();
        let name = &entry.raw.name;
        let field = format!("{}.name", entry.path);
        if let Some(other) = context
            .vservices
            .iter()
            .find(|v| v.raw.name.get_ref() == name.get_ref())
        {
            let line = issues.line_of(other.raw.name.span().start);
            issues.error(
                &name.span(),
                &field,
                format!(
                    "duplicate name `{}`: already used by the vservice at line {line}",
                    name.get_ref()
                ),
            );
        } else {
            names.define(name, "dns vservice", &field, issues);
        }
        let (dns, listen) = convert(entry, issues);
        let Some(listen) = listen else {
            continue;
        };
        let span = entry
            .raw
            .port
            .as_ref()
            .map_or(entry.raw.address.span(), Spanned::span);
        check_listener(listen, &span, &entry.path, context, &sockets, issues);
        sockets.push((listen, name.get_ref().clone(), issues.line_of(span.start)));
        if let Some(dns) = dns
            && issues.error_count() == before
            && !entry.partial
        {
            valid.push(dns);
        }
    }
    valid
}

/// The DNS vService (None when any field is wrong) and its listener (when address and
/// port are usable, so that conflicts are reported along with the other problems).
fn convert(
    entry: &Entry<RawDnsVService>,
    issues: &mut Issues,
) -> (Option<DnsVService>, Option<SocketAddr>) {
    let raw = &entry.raw;
    let path = &entry.path;
    let vip = address(&raw.address, &format!("{path}.address"), issues);
    let port = match &raw.port {
        Some(port) => ranged(port, 1, 65535, &format!("{path}.port"), issues)
            .and_then(|p| u16::try_from(p).ok()),
        None => Some(DEFAULT_PORT),
    };
    let zone = zone(&raw.zone, &format!("{path}.zone"), issues);
    let ttl = match &raw.ttl {
        Some(ttl) => ranged(ttl, 0, 86_400, &format!("{path}.ttl"), issues),
        None => Some(DEFAULT_TTL),
    };
    let poll_period = poll(
        raw.poll_period.as_ref(),
        DEFAULT_POLL_PERIOD,
        "poll_period",
        path,
        issues,
    );
    let poll_timeout = poll(
        raw.poll_timeout.as_ref(),
        DEFAULT_POLL_TIMEOUT,
        "poll_timeout",
        path,
        issues,
    );
    let rate_limit = match &raw.rate_limit {
        Some(limit) => ranged(limit, 0, 1_000_000, &format!("{path}.rate_limit"), issues),
        None => Some(DEFAULT_RATE_LIMIT),
    };
    let records = records(entry, zone.as_deref(), issues);
    let listen = vip.zip(port).map(|(ip, port)| SocketAddr::new(ip, port));
    let dns = (|| {
        Some(DnsVService {
            name: raw.name.get_ref().clone(),
            address: vip?,
            port: port?,
            zone: zone?,
            ttl: ttl?,
            poll_period: poll_period?,
            poll_timeout: poll_timeout?,
            rate_limit: rate_limit?,
            records,
        })
    })();
    (dns, listen)
}

/// A polling duration within [`MIN_POLL`]..=[`MAX_POLL`].
fn poll(
    value: Option<&Spanned<f64>>,
    default: Duration,
    key: &str,
    path: &str,
    issues: &mut Issues,
) -> Option<Duration> {
    let Some(value) = value else {
        return Some(default);
    };
    let field = format!("{path}.{key}");
    let duration = seconds(value, &field, issues)?;
    if (MIN_POLL..=MAX_POLL).contains(&duration) {
        return Some(duration);
    }
    issues.error(
        &value.span(),
        &field,
        format!(
            "{} s is out of range {}..={} s",
            value.get_ref(),
            MIN_POLL.as_secs_f64(),
            MAX_POLL.as_secs()
        ),
    );
    None
}

/// The zone: a domain name, returned lower case and absolute (`example.` style).
fn zone(value: &Spanned<String>, field: &str, issues: &mut Issues) -> Option<String> {
    let text = value
        .get_ref()
        .trim()
        .trim_end_matches('.')
        .to_ascii_lowercase();
    match domain_problem(&text) {
        None => Some(format!("{text}.")),
        Some(problem) => {
            issues.error(
                &value.span(),
                field,
                format!("`{}` {problem}", value.get_ref()),
            );
            None
        }
    }
}

/// Why `name` (no trailing dot) is not a usable domain name, if it is not.
fn domain_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("is empty: give a domain name such as gslb.example.com");
    }
    if name.len() > MAX_NAME {
        return Some("is longer than 253 characters");
    }
    let bad_label = name.split('.').any(|label| {
        label.is_empty()
            || label.len() > 63
            || label.starts_with('-')
            || !label
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    });
    bad_label.then_some(
        "is not a domain name: labels of 1..=63 letters, digits, `-` or `_`, separated by dots",
    )
}

/// `[[dns_vservice.record]]`: unique names inside the zone, at least one site each.
fn records(
    entry: &Entry<RawDnsVService>,
    zone: Option<&str>,
    issues: &mut Issues,
) -> Vec<DnsRecord> {
    let path = &entry.path;
    let Some(list) = entry
        .raw
        .record
        .as_ref()
        .filter(|r| !r.get_ref().is_empty())
    else {
        let span = entry
            .raw
            .record
            .as_ref()
            .map_or(entry.span.clone(), Spanned::span);
        issues.error(
            &span,
            &format!("{path}.record"),
            "a dns vservice needs at least one [[dns_vservice.record]] (a name it answers)",
        );
        return Vec::new();
    };
    let mut seen = Namespace::default();
    let mut valid = Vec::new();
    for (index, record) in list.get_ref().iter().enumerate() {
        let path = format!("{path}.record[{index}]");
        let raw = record.get_ref();
        let before = issues.error_count();
        let name =
            zone.and_then(|zone| record_name(&raw.name, zone, &format!("{path}.name"), issues));
        if let Some(name) = &name {
            seen.define(
                &Spanned::new(raw.name.span(), name.clone()),
                "record",
                &format!("{path}.name"),
                issues,
            );
        }
        let converted = record_body(raw, record.span(), &path, issues);
        if let (Some(name), Some((policy, answers, sites))) = (name, converted)
            && issues.error_count() == before
        {
            let unreachable = match raw.unreachable.as_ref().map(|u| *u.get_ref()) {
                None | Some(RawUnreachable::Skip) => Unreachable::Skip,
                Some(RawUnreachable::Serve) => Unreachable::Serve,
            };
            valid.push(DnsRecord {
                name,
                policy,
                answers,
                unreachable,
                sites,
            });
        }
    }
    valid
}

/// A record name: `@` (the zone apex), a name relative to the zone, or an absolute name
/// (trailing dot) inside the zone. Returned absolute and lower case.
fn record_name(
    value: &Spanned<String>,
    zone: &str,
    field: &str,
    issues: &mut Issues,
) -> Option<String> {
    let text = value.get_ref().trim().to_ascii_lowercase();
    let absolute = if text == "@" {
        zone.to_owned()
    } else if text.ends_with('.') {
        text.clone()
    } else {
        format!("{text}.{zone}")
    };
    let bare = absolute.trim_end_matches('.');
    let problem = domain_problem(bare).map(str::to_owned).or_else(|| {
        let inside = absolute == zone || absolute.ends_with(&format!(".{zone}"));
        (!inside).then(|| format!("is outside the zone `{zone}`"))
    });
    match problem {
        None => Some(absolute),
        Some(problem) => {
            issues.error(
                &value.span(),
                field,
                format!("`{}` {problem}", value.get_ref()),
            );
            None
        }
    }
}

/// Policy, answer count and sites of one record.
fn record_body(
    raw: &RawDnsRecord,
    span: Range<usize>,
    path: &str,
    issues: &mut Issues,
) -> Option<(DnsPolicy, u32, Vec<SiteService>)> {
    let policy = match raw.policy.as_ref().map(|p| *p.get_ref()) {
        None | Some(RawDnsPolicy::RoundRobin) => DnsPolicy::RoundRobin,
        Some(RawDnsPolicy::Weighted) => DnsPolicy::Weighted,
        Some(RawDnsPolicy::LeastLoaded) => DnsPolicy::LeastLoaded,
    };
    let answers = match &raw.answers {
        Some(answers) => ranged(answers, 1, 16, &format!("{path}.answers"), issues),
        None => Some(1),
    };
    let field = format!("{path}.site");
    let Some(list) = raw.site.as_ref().filter(|s| !s.get_ref().is_empty()) else {
        let span = raw.site.as_ref().map_or(span, Spanned::span);
        issues.error(
            &span,
            &field,
            "a record needs at least one [[dns_vservice.record.site]]",
        );
        return None;
    };
    let mut names = Namespace::default();
    let mut sites = Vec::new();
    for (index, site) in list.get_ref().iter().enumerate() {
        let path = format!("{field}[{index}]");
        names.define(
            &site.get_ref().name,
            "site",
            &format!("{path}.name"),
            issues,
        );
        sites.extend(site_service(site.get_ref(), &path, issues));
    }
    if list.get_ref().iter().all(|s| s.get_ref().standby) {
        issues.error(
            &list.span(),
            &field,
            "every site is a standby: mark at least one site `standby = false` (S-GS1: a \
             standby only stands in for a failed active site)",
        );
    }
    Some((policy, answers?, sites))
}

fn site_service(raw: &RawSite, path: &str, issues: &mut Issues) -> Option<SiteService> {
    let before = issues.error_count();
    let field = format!("{path}.address");
    let (mut ipv4, mut ipv6) = (None, None);
    match address(&raw.address, &field, issues) {
        Some(IpAddr::V4(v4)) => ipv4 = Some(v4),
        Some(IpAddr::V6(v6)) => ipv6 = Some(v6),
        None => {}
    }
    if let Some(v6) = address6(
        ipv6.map(IpAddr::V6),
        raw.address6.as_ref(),
        &format!("{path}.address6"),
        issues,
    ) {
        ipv6 = Some(v6);
    }
    let api = api_url(&raw.api, &format!("{path}.api"), issues);
    let token = raw
        .token
        .as_ref()
        .filter(|token| check_token(token, &format!("{path}.token"), issues))
        .map(|token| token.get_ref().clone());
    let vservice = raw.vservice.get_ref().trim();
    if vservice.is_empty() {
        issues.error(
            &raw.vservice.span(),
            &format!("{path}.vservice"),
            "name the vservice at that site whose status decides this site",
        );
    }
    let weight = match &raw.weight {
        Some(weight) => ranged(weight, 1, 1000, &format!("{path}.weight"), issues),
        None => Some(1),
    };
    if issues.error_count() != before {
        return None;
    }
    Some(SiteService {
        name: raw.name.get_ref().clone(),
        ipv4,
        ipv6,
        api: api?,
        token,
        vservice: vservice.to_owned(),
        standby: raw.standby,
        weight: weight?,
    })
}

/// A site API base URL: `http://HOST:PORT`, an optional trailing `/` (dropped), no path.
fn api_url(url: &Spanned<String>, field: &str, issues: &mut Issues) -> Option<String> {
    let text = url.get_ref().trim();
    let authority = text
        .strip_prefix("http://")
        .map(|rest| rest.strip_suffix('/').unwrap_or(rest));
    let fine = authority.is_some_and(|authority| match authority.rsplit_once(':') {
        Some((host, port)) => port.parse::<u16>().is_ok_and(|p| p != 0) && valid_host(host),
        None => false,
    });
    if let (true, Some(authority)) = (fine, authority) {
        return Some(format!("http://{authority}"));
    }
    issues.error(
        &url.span(),
        field,
        format!(
            "`{}` is not a site API URL: write http://HOST:PORT (e.g. http://10.0.0.2:9180)",
            url.get_ref()
        ),
    );
    None
}

/// Reports a DNS listener that shares its socket with another listener, or whose packets
/// the XDP program would take first.
fn check_listener(
    listen: SocketAddr,
    span: &Range<usize>,
    path: &str,
    context: &Context<'_>,
    earlier: &[(SocketAddr, String, usize)],
    issues: &mut Issues,
) {
    let field = if span.is_empty() {
        format!("{path}.address")
    } else {
        format!("{path}.port")
    };
    let same_socket = |other: SocketAddr| {
        other.port() == listen.port() && same_socket_address(other.ip(), listen.ip())
    };
    let port = PortSpec::Single(listen.port());
    let mut problems = Vec::new();
    for (other, name, line) in earlier {
        if same_socket(*other) {
            problems.push(format!(
                "conflicts with dns vservice `{name}` (line {line}) on {listen}"
            ));
        }
    }
    for listener in context.listeners {
        let line = issues.line_of(listener.span.start);
        let clash = if listener.kind.is_network() {
            listener.address == listen.ip()
                && (listener.kind == VServiceKind::AnyL3 || overlap(listener.ports, port))
        } else {
            same_socket_address(listener.address, listen.ip()) && overlap(listener.ports, port)
        };
        if clash {
            problems.push(format!(
                "conflicts with vservice `{}` (line {line}) on {listen}: the same TCP or UDP \
                 port cannot serve both",
                listener.name
            ));
        }
    }
    if same_socket(context.api) {
        problems.push(format!(
            "{listen} is also the API listener: give one of them another port"
        ));
    }
    for problem in problems {
        issues.error(span, &field, problem);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str, zone: &str) -> Option<String> {
        let mut issues = Issues::new("t", "x = 1\n");
        let result = record_name(&Spanned::new(0..1, text.to_owned()), zone, "n", &mut issues);
        assert_eq!(result.is_none(), issues.has_errors());
        result
    }

    /// S-GS: names are answered inside the zone only, relative names are completed.
    #[test]
    fn s_gs_record_names_inside_the_zone() {
        let zone = "gslb.example.";
        assert_eq!(name("www", zone).as_deref(), Some("www.gslb.example."));
        assert_eq!(
            name("WWW.Gslb.Example.", zone).as_deref(),
            Some("www.gslb.example.")
        );
        assert_eq!(name("@", zone).as_deref(), Some("gslb.example."));
        assert_eq!(name("a.b", zone).as_deref(), Some("a.b.gslb.example."));
        assert_eq!(name("www.other.example.", zone), None);
        assert_eq!(name("xgslb.example.", zone), None);
        assert_eq!(name("bad..name", zone), None);
        assert_eq!(name("-x", zone), None);
    }
}
