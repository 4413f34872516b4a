//! Which `[[vservice]]` keys apply to which kind: Network-only keys on an L7 vService,
//! L7 keys on a Network vService and HTTP-only keys on an L7 TCP vService are errors, so a
//! setting is never silently ignored.

use std::ops::Range;

use serde_spanned::Spanned;

use crate::config::issues::Issues;
use crate::config::raw::document::Entry;
use crate::config::raw::{RawPersistenceType, RawVService, RawVServiceKind};

/// Kinds a key applies to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// tcp-l4, udp-l4, any-l3.
    Network,
    /// http and l7-tcp.
    L7,
    /// http only.
    Http,
}

impl Scope {
    fn allows(self, kind: RawVServiceKind) -> bool {
        match self {
            Self::Network => !kind.is_l7(),
            Self::L7 => kind.is_l7(),
            Self::Http => kind == RawVServiceKind::Http,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Self::Network => "Network vServices (tcp-l4, udp-l4, any-l3)",
            Self::L7 => "http and l7-tcp vServices",
            Self::Http => "http vServices",
        }
    }
}

/// The scoped keys written in the entry, with their spans. `port_range` is left to the
/// port rules, which explain it in terms of ports.
fn scoped_keys(raw: &RawVService) -> Vec<(&'static str, Range<usize>, Scope)> {
    fn span<T>(value: &Option<Spanned<T>>) -> Option<Range<usize>> {
        value.as_ref().map(Spanned::span)
    }
    [
        ("address6", span(&raw.address6), Scope::Network),
        ("forwarding", span(&raw.forwarding), Scope::Network),
        ("maglev_size", span(&raw.maglev_size), Scope::Network),
        (
            "apply_admin_state",
            span(&raw.apply_admin_state),
            Scope::Network,
        ),
        ("algorithm", span(&raw.algorithm), Scope::L7),
        ("queue_size", span(&raw.queue_size), Scope::L7),
        ("retries", span(&raw.retries), Scope::L7),
        ("retry_on", span(&raw.retry_on), Scope::L7),
        ("retry_budget", span(&raw.retry_budget), Scope::L7),
        ("persistence", span(&raw.persistence), Scope::L7),
        ("timeouts", span(&raw.timeouts), Scope::L7),
        ("tls", span(&raw.tls), Scope::Http),
        ("error_page", span(&raw.error_page), Scope::Http),
        (
            "forwarded_headers",
            span(&raw.forwarded_headers),
            Scope::Http,
        ),
        ("conditional_set", span(&raw.conditional_set), Scope::Http),
    ]
    .into_iter()
    .filter_map(|(key, span, scope)| span.map(|span| (key, span, scope)))
    .collect()
}

/// Reports every key the entry's kind does not use. Returns false when any was found.
pub(in crate::config) fn check_keys(entry: &Entry<RawVService>, issues: &mut Issues) -> bool {
    let raw = &entry.raw;
    let kind = *raw.kind.get_ref();
    let mut fine = true;
    for (key, span, scope) in scoped_keys(raw) {
        if !scope.allows(kind) {
            issues.error(
                &span,
                &format!("{}.{key}", entry.path),
                format!(
                    "`{key}` applies only to {}, not to this {} vService{}",
                    scope.describe(),
                    kind.as_str(),
                    if key == "address6" {
                        ": to take IPv4 and IPv6 clients on one listener, set `address = \"::\"`"
                    } else {
                        ""
                    }
                ),
            );
            fine = false;
        }
    }
    if let Some(persistence) = &raw.persistence {
        let kind_of = &persistence.get_ref().kind;
        if *kind_of.get_ref() == RawPersistenceType::Cookie && kind == RawVServiceKind::L7Tcp {
            issues.error(
                &kind_of.span(),
                &format!("{}.persistence.type", entry.path),
                "cookie persistence needs an HTTP vService: use `source-ip` on an l7-tcp vService",
            );
            fine = false;
        }
    }
    fine
}
