//! `[[vservice]]`: kind, address, ports, forwarding, Maglev size, the Default list and,
//! for L7 kinds, the proxy settings. The files beside this one check its parts: which keys
//! apply to which kind, ports, lists, Conditional sets and their matchers, persistence and
//! the L7 settings, the Network (XDP) rules, and listeners that would take the same traffic.

pub(in crate::config) mod conditions;
pub(in crate::config) mod kinds;
pub(in crate::config) mod l7;
pub(in crate::config) mod listeners;
pub(in crate::config) mod lists;
pub(in crate::config) mod matchers;
pub(in crate::config) mod network;
pub(in crate::config) mod persistence;
pub(in crate::config) mod ports;

use std::net::IpAddr;

use serde_spanned::Spanned;

use crate::config::check::backends::{Backends, address, address6, ranged};
use crate::config::check::names::Namespace;
use crate::config::issues::Issues;
use crate::config::model::{Forwarding, VService, VServiceKind};
use crate::config::raw::document::Entry;
use crate::config::raw::recover::is_placeholder;
use crate::config::raw::{RawForwarding, RawVService, RawVServiceKind};
use kinds::check_keys;
use l7::l7_settings;
use listeners::Listener;
use lists::{ListSource, backend_list, check_l7_ports};
use ports::ports;

/// Default Maglev table size (prime).
const DEFAULT_MAGLEV_SIZE: u32 = 65537;
/// Smallest and largest Maglev table size accepted.
const MAGLEV_MIN: i64 = 251;
const MAGLEV_MAX: i64 = 1_048_576;

/// Validates every vService, then the checks across them (conflicting listeners).
/// Also returns every usable listener, for checks against the API listener.
pub(in crate::config) fn vservices(
    entries: &[Entry<RawVService>],
    backends: &Backends,
    issues: &mut Issues,
) -> (Vec<VService>, Vec<Listener>) {
    let mut names = Namespace::default();
    let mut listeners = Vec::new();
    let mut valid = Vec::new();
    for entry in entries {
        let before = issues.error_count();
        names.define(
            &entry.raw.name,
            "vservice",
            &format!("{}.name", entry.path),
            issues,
        );
        let Some((vservice, own)) = convert(entry, backends, issues) else {
            continue;
        };
        network::check_backends(&vservice, entry, backends, issues);
        // A listener whose address or port is a stand-in (unreadable, reported) would
        // only give false conflicts.
        listeners.extend(own.into_iter().filter(|l| !is_placeholder(&l.span)));
        if issues.error_count() == before && !entry.partial {
            valid.push(vservice);
        }
    }
    listeners::check_conflicts(&listeners, issues);
    (valid, listeners)
}

/// Converts one vService; `None` when its address or ports are unusable (reported).
fn convert(
    entry: &Entry<RawVService>,
    backends: &Backends,
    issues: &mut Issues,
) -> Option<(VService, Vec<Listener>)> {
    let raw = &entry.raw;
    let path = &entry.path;
    let kind = match raw.kind.get_ref() {
        RawVServiceKind::TcpL4 => VServiceKind::TcpL4,
        RawVServiceKind::UdpL4 => VServiceKind::UdpL4,
        RawVServiceKind::AnyL3 => VServiceKind::AnyL3,
        RawVServiceKind::Http => VServiceKind::Http,
        RawVServiceKind::L7Tcp => VServiceKind::L7Tcp,
    };
    check_keys(entry, issues);
    let address_field = format!("{path}.address");
    let vip = address(&raw.address, &address_field, issues);
    if let Some(problem) = vip
        .filter(|_| kind.is_network())
        .and_then(network::unroutable)
    {
        issues.error(
            &raw.address.span(),
            &address_field,
            format!("{}: {problem}", raw.address.get_ref()),
        );
    }
    if let Some(IpAddr::V6(a)) = vip
        && a.is_unicast_link_local()
        && !kind.is_network()
    {
        issues.error(
            &raw.address.span(),
            &address_field,
            format!(
                "{}: a link-local address is scoped to one interface; listen on a global \
                 or unique-local address, or on `::`",
                raw.address.get_ref()
            ),
        );
    }
    let address6_field = format!("{path}.address6");
    let before = issues.error_count();
    let vip6 = address6(vip, raw.address6.as_ref(), &address6_field, issues);
    if let (Some(a), Some(span)) = (vip6, raw.address6.as_ref().map(Spanned::span))
        && let Some(problem) = network::unroutable(IpAddr::V6(a))
    {
        issues.error(&span, &address6_field, format!("{a}: {problem}"));
    }
    let vip6_fine = issues.error_count() == before;
    let ports = ports(entry, issues);
    let forwarding = match raw.forwarding.as_ref().map(|f| *f.get_ref()) {
        Some(RawForwarding::Dsr) => Forwarding::Dsr,
        Some(RawForwarding::Ipip) => Forwarding::Ipip,
        Some(RawForwarding::Gue) => Forwarding::Gue,
        Some(RawForwarding::Nat) | None => Forwarding::Nat,
    };
    // Checked before giving up on a bad address or port, so their problems show too.
    let maglev_size = if kind.is_network() {
        maglev_size(entry, issues)
    } else {
        DEFAULT_MAGLEV_SIZE
    };
    let source = ListSource {
        list: raw.backends.as_ref(),
        field: format!("{path}.backends"),
        owner_span: entry.span.clone(),
        owner: format!("vservice `{}`", raw.name.get_ref()),
    };
    let list = backend_list(&source, backends, issues);
    if !kind.is_network() {
        check_l7_ports(&source, raw.kind.get_ref().as_str(), backends, issues);
    }
    let l7 = l7_settings(entry, backends, issues);
    if !vip6_fine {
        return None;
    }
    let vservice = VService {
        name: raw.name.get_ref().clone(),
        kind,
        address: vip?,
        address6: vip6,
        ports: ports.as_ref()?.0,
        forwarding,
        maglev_size,
        backends: list,
        apply_admin_state: raw.apply_admin_state.as_ref().is_some_and(|a| *a.get_ref()),
        l7,
    };
    let (_, span, field) = ports?;
    let listeners = vservice
        .vips()
        .map(|address| Listener {
            name: vservice.name.clone(),
            kind,
            address,
            ports: vservice.ports,
            span: span.clone(),
            field: field.clone(),
        })
        .collect();
    Some((vservice, listeners))
}

/// `maglev_size`: a prime in 251..=1048576 (Maglev needs a prime table size).
fn maglev_size(entry: &Entry<RawVService>, issues: &mut Issues) -> u32 {
    let Some(size) = &entry.raw.maglev_size else {
        return DEFAULT_MAGLEV_SIZE;
    };
    let field = format!("{}.maglev_size", entry.path);
    let Some(value) = ranged(size, MAGLEV_MIN, MAGLEV_MAX, &field, issues) else {
        return DEFAULT_MAGLEV_SIZE;
    };
    if !is_prime(value) {
        issues.error(
            &size.span(),
            &field,
            format!("{value} is not prime (Maglev needs a prime table size, e.g. 65537)"),
        );
    }
    value
}

/// Trial division; sizes are at most about a million.
fn is_prime(n: u32) -> bool {
    n >= 2
        && (2..)
            .take_while(|d| d * d <= n)
            .all(|d| !n.is_multiple_of(d))
}

#[cfg(test)]
mod tests {
    use super::is_prime;

    #[test]
    fn primes_for_maglev_sizes() {
        assert!(is_prime(251));
        assert!(is_prime(65537));
        assert!(is_prime(1_048_573));
        assert!(!is_prime(1));
        assert!(!is_prime(65536));
        assert!(!is_prime(1_048_576));
        assert!(!is_prime(253)); // 11 * 23
    }
}
