//! The port part of a vService: one port, a Port Range, or every port (ANY-L3); L7
//! vServices listen on exactly one port.

use std::ops::Range;

use serde_spanned::Spanned;

use crate::config::issues::Issues;
use crate::config::model::PortSpec;
use crate::config::raw::document::Entry;
use crate::config::raw::{RawVService, RawVServiceKind};

/// Reads `port` / `port_range` for the vService's kind; `None` when they cannot be used.
/// Also returns the span and field to point at when the ports clash with another vService.
pub(in crate::config) fn ports(
    entry: &Entry<RawVService>,
    issues: &mut Issues,
) -> Option<(PortSpec, Range<usize>, String)> {
    let raw = &entry.raw;
    let path = &entry.path;
    let kind = *raw.kind.get_ref();
    if kind == RawVServiceKind::AnyL3 {
        let mut fine = true;
        for (key, span) in [
            ("port", raw.port.as_ref().map(Spanned::span)),
            ("port_range", raw.port_range.as_ref().map(Spanned::span)),
        ] {
            if let Some(span) = span {
                issues.error(
                    &span,
                    &format!("{path}.{key}"),
                    format!("an any-l3 vservice takes every protocol and port: remove `{key}`"),
                );
                fine = false;
            }
        }
        let span = raw.address.span();
        return fine.then(|| (PortSpec::Any, span, format!("{path}.address")));
    }
    if kind.is_l7() {
        return l7_port(entry, issues);
    }
    match (&raw.port, &raw.port_range) {
        (Some(_), Some(range)) => {
            issues.error(
                &range.span(),
                &format!("{path}.port_range"),
                "set exactly one of `port` or `port_range`, not both",
            );
            None
        }
        (None, None) => {
            issues.error(
                &entry.span,
                &format!("{path}.port"),
                format!(
                    "vservice `{}` needs `port` or `port_range`",
                    raw.name.get_ref()
                ),
            );
            None
        }
        (Some(port), None) => {
            let field = format!("{path}.port");
            let single = one_port(port, &field, issues)?;
            Some((PortSpec::Single(single), port.span(), field))
        }
        (None, Some(range)) => {
            let field = format!("{path}.port_range");
            let (start, end) = port_range(range, &field, issues)?;
            Some((PortSpec::Range(start, end), range.span(), field))
        }
    }
}

/// HTTP and L7 TCP vServices listen on one socket: `port` is required, `port_range` is not
/// allowed.
fn l7_port(
    entry: &Entry<RawVService>,
    issues: &mut Issues,
) -> Option<(PortSpec, Range<usize>, String)> {
    let raw = &entry.raw;
    let path = &entry.path;
    let kind = raw.kind.get_ref().as_str();
    if let Some(range) = &raw.port_range {
        issues.error(
            &range.span(),
            &format!("{path}.port_range"),
            format!("an {kind} vservice listens on one port: use `port`, not `port_range`"),
        );
    }
    let Some(port) = &raw.port else {
        issues.error(
            &entry.span,
            &format!("{path}.port"),
            format!("vservice `{}` needs `port`", raw.name.get_ref()),
        );
        return None;
    };
    let field = format!("{path}.port");
    let single = one_port(port, &field, issues)?;
    raw.port_range
        .is_none()
        .then(|| (PortSpec::Single(single), port.span(), field))
}

/// A listening port: 1..=65535 (0 would mean "any port", which is what any-l3 is for).
fn one_port(port: &Spanned<i64>, field: &str, issues: &mut Issues) -> Option<u16> {
    let value = *port.get_ref();
    match u16::try_from(value) {
        Ok(ok) if ok >= 1 => Some(ok),
        Ok(_) => {
            issues.error(
                &port.span(),
                field,
                "port 0 cannot be listened on: give a port 1..=65535 (any-l3 takes every port)",
            );
            None
        }
        Err(_) => {
            issues.error(
                &port.span(),
                field,
                format!("port {value} is out of range 1..=65535"),
            );
            None
        }
    }
}

/// `"START-END"` or `[START, END]`, inclusive, 1 <= START <= END <= 65535.
fn port_range(
    value: &Spanned<toml::Value>,
    field: &str,
    issues: &mut Issues,
) -> Option<(u16, u16)> {
    let bounds: Option<(i64, i64)> = match value.get_ref() {
        toml::Value::String(text) => text
            .split_once('-')
            .and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?))),
        toml::Value::Array(items) => match items.as_slice() {
            [toml::Value::Integer(a), toml::Value::Integer(b)] => Some((*a, *b)),
            _ => None,
        },
        _ => None,
    };
    let Some((start, end)) = bounds else {
        issues.error(
            &value.span(),
            field,
            format!(
                "{} is not a port range: write \"START-END\" or [START, END]",
                value.get_ref()
            ),
        );
        return None;
    };
    let in_range = |port: i64| u16::try_from(port).ok().filter(|p| *p >= 1);
    match (in_range(start), in_range(end)) {
        (Some(a), Some(b)) if a <= b => Some((a, b)),
        (Some(_), Some(_)) => {
            issues.error(
                &value.span(),
                field,
                format!("start {start} is greater than end {end}"),
            );
            None
        }
        _ => {
            issues.error(
                &value.span(),
                field,
                format!("ports {start} and {end} must both be in 1..=65535"),
            );
            None
        }
    }
}
