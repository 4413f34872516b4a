//! The type-specific fields of a health check profile (S-HC2): which type each belongs
//! to, their defaults and their checks.

use std::ops::Range;

use std::time::Duration;

use serde_spanned::Spanned;

use super::seconds::seconds;

use crate::config::issues::Issues;
use crate::config::model::{DnsCheck, Handshake, HealthKind, HttpCheck};
use crate::config::raw::document::Entry;
use crate::config::raw::{RawHealthCheck, RawHealthType};

/// DNS query types accepted by name.
const DNS_TYPES: [(&str, u16); 2] = [("A", 1), ("AAAA", 28)];

/// Type-specific fields present in the profile, with the types they belong to.
fn specific_fields(
    raw: &RawHealthCheck,
) -> Vec<(&'static str, Range<usize>, &'static [RawHealthType])> {
    use RawHealthType::{Dns, Http, Https, Passive, Tcp};
    const WEB: &[RawHealthType] = &[Http, Https];
    let span_of =
        |present: Option<Range<usize>>, name, types| present.map(|span| (name, span, types));
    [
        span_of(raw.method.as_ref().map(Spanned::span), "method", WEB),
        span_of(raw.path.as_ref().map(Spanned::span), "path", WEB),
        span_of(raw.host.as_ref().map(Spanned::span), "host", WEB),
        span_of(
            raw.expect_status.as_ref().map(Spanned::span),
            "expect_status",
            WEB,
        ),
        span_of(
            raw.body_contains.as_ref().map(Spanned::span),
            "body_contains",
            WEB,
        ),
        span_of(
            raw.verify_tls.as_ref().map(Spanned::span),
            "verify_tls",
            &[Https],
        ),
        span_of(
            raw.query_name.as_ref().map(Spanned::span),
            "query_name",
            &[Dns],
        ),
        span_of(
            raw.query_type.as_ref().map(Spanned::span),
            "query_type",
            &[Dns],
        ),
        span_of(
            raw.handshake.as_ref().map(Spanned::span),
            "handshake",
            &[Tcp],
        ),
        span_of(
            raw.passive_return.as_ref().map(Spanned::span),
            "passive_return",
            &[Passive],
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Reports each type-specific field set on a profile of another type.
pub(in crate::config) fn reject_foreign_fields(
    raw: &RawHealthCheck,
    path: &str,
    issues: &mut Issues,
) {
    let kind = *raw.kind.get_ref();
    for (name, span, types) in specific_fields(raw) {
        if !types.contains(&kind) {
            let owners: Vec<&str> = types.iter().map(|t| t.as_str()).collect();
            issues.error(
                &span,
                &format!("{path}.{name}"),
                format!(
                    "`{name}` applies only to {} checks, not to a {} check",
                    owners.join(" and "),
                    kind.as_str()
                ),
            );
        }
    }
}

/// The probe with its own fields.
pub(in crate::config) fn probe(entry: &Entry<RawHealthCheck>, issues: &mut Issues) -> HealthKind {
    match *entry.raw.kind.get_ref() {
        RawHealthType::Ping => HealthKind::Ping,
        RawHealthType::Tcp => HealthKind::Tcp(handshake(entry, issues)),
        RawHealthType::Http => HealthKind::Http(http(entry, issues)),
        RawHealthType::Https => HealthKind::Https(http(entry, issues)),
        RawHealthType::Dns => HealthKind::Dns(dns(entry, issues)),
        RawHealthType::Passive => HealthKind::Passive {
            return_after: passive_return(entry, issues),
        },
    }
}

/// How long a passive profile's Error lasts when no `passive_return` is written.
const PASSIVE_RETURN: Duration = Duration::from_secs(30);

/// `passive_return`: seconds, above 0, default 30.
fn passive_return(entry: &Entry<RawHealthCheck>, issues: &mut Issues) -> Duration {
    let Some(value) = &entry.raw.passive_return else {
        return PASSIVE_RETURN;
    };
    let field = format!("{}.passive_return", entry.path);
    match seconds(value, &field, issues) {
        Some(d) if d.is_zero() => {
            issues.error(&value.span(), &field, "passive_return must be above 0 s");
            PASSIVE_RETURN
        }
        Some(d) => d,
        None => PASSIVE_RETURN,
    }
}

/// `handshake = "half-open"` (the default) or `"full"`.
fn handshake(entry: &Entry<RawHealthCheck>, issues: &mut Issues) -> Handshake {
    let Some(value) = &entry.raw.handshake else {
        return Handshake::HalfOpen;
    };
    match value.get_ref().as_str() {
        "half-open" => Handshake::HalfOpen,
        "full" => Handshake::Full,
        other => {
            issues.error(
                &value.span(),
                &format!("{}.handshake", entry.path),
                format!(
                    "`{other}` is not a TCP check handshake: use \"half-open\" (SYN, SYN-ACK, \
                     RST; the default) or \"full\" (the connection is completed, then reset)"
                ),
            );
            Handshake::HalfOpen
        }
    }
}

fn http(entry: &Entry<RawHealthCheck>, issues: &mut Issues) -> HttpCheck {
    let raw = &entry.raw;
    let path = &entry.path;
    let method = match &raw.method {
        Some(m)
            if m.get_ref().is_empty() || !m.get_ref().bytes().all(|b| b.is_ascii_uppercase()) =>
        {
            issues.error(
                &m.span(),
                &format!("{path}.method"),
                format!(
                    "`{}` is not an HTTP method (upper-case letters, e.g. GET)",
                    m.get_ref()
                ),
            );
            String::new()
        }
        Some(m) => m.get_ref().clone(),
        None => "GET".to_owned(),
    };
    let request_path = match &raw.path {
        Some(p) if !p.get_ref().starts_with('/') => {
            issues.error(
                &p.span(),
                &format!("{path}.path"),
                format!("`{}` must start with `/`", p.get_ref()),
            );
            String::new()
        }
        Some(p) => p.get_ref().clone(),
        None => "/".to_owned(),
    };
    if let Some(host) = raw.host.as_ref().filter(|h| h.get_ref().trim().is_empty()) {
        issues.error(
            &host.span(),
            &format!("{path}.host"),
            "host must not be empty",
        );
    }
    HttpCheck {
        method,
        path: request_path,
        host: raw.host.as_ref().map(|h| h.get_ref().clone()),
        expect_status: expect_status(raw, path, issues),
        body_contains: raw.body_contains.as_ref().map(|b| b.get_ref().clone()),
        verify_tls: raw.verify_tls.as_ref().is_some_and(|v| *v.get_ref()),
    }
}

fn expect_status(raw: &RawHealthCheck, path: &str, issues: &mut Issues) -> Vec<u16> {
    let Some(list) = &raw.expect_status else {
        return vec![200];
    };
    if list.get_ref().is_empty() {
        issues.error(
            &list.span(),
            &format!("{path}.expect_status"),
            "expect_status must list at least one status code",
        );
    }
    let mut codes = Vec::new();
    for (index, code) in list.get_ref().iter().enumerate() {
        match u16::try_from(*code.get_ref()) {
            Ok(ok) if (100..=599).contains(&ok) => codes.push(ok),
            _ => issues.error(
                &code.span(),
                &format!("{path}.expect_status[{index}]"),
                format!("{} is not an HTTP status code (100..=599)", code.get_ref()),
            ),
        }
    }
    codes
}

fn dns(entry: &Entry<RawHealthCheck>, issues: &mut Issues) -> DnsCheck {
    let raw = &entry.raw;
    let path = &entry.path;
    let query_name = match &raw.query_name {
        None => {
            issues.error(
                &entry.span,
                &format!("{path}.query_name"),
                "a dns check needs `query_name`",
            );
            String::new()
        }
        Some(name) if !valid_dns_name(name.get_ref()) => {
            issues.error(
                &name.span(),
                &format!("{path}.query_name"),
                format!("`{}` is not a valid DNS name", name.get_ref()),
            );
            String::new()
        }
        Some(name) => name.get_ref().clone(),
    };
    let query_type = match &raw.query_type {
        None => 1,
        Some(value) => dns_type(value, &format!("{path}.query_type"), issues),
    };
    DnsCheck {
        query_name,
        query_type,
    }
}

/// Non-empty, at most 253 characters, labels of 1..=63 characters (a trailing dot allowed).
fn valid_dns_name(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| (1..=63).contains(&label.len()))
}

/// `"A"`, `"AAAA"` or a type number 1..=65535.
fn dns_type(value: &Spanned<toml::Value>, field: &str, issues: &mut Issues) -> u16 {
    let found = match value.get_ref() {
        toml::Value::String(name) => DNS_TYPES
            .iter()
            .find(|(known, _)| known.eq_ignore_ascii_case(name))
            .map(|(_, number)| *number),
        toml::Value::Integer(number) => u16::try_from(*number).ok().filter(|n| *n >= 1),
        _ => None,
    };
    found.unwrap_or_else(|| {
        issues.error(
            &value.span(),
            field,
            format!(
                "{} is not a DNS query type: use \"A\", \"AAAA\" or a number 1..=65535",
                value.get_ref()
            ),
        );
        1
    })
}
