//! `[[vservice]]`: kind, address, ports, forwarding, Maglev size and the Default list.

use std::collections::HashMap;
use std::net::IpAddr;

use super::backends::{Backends, Lookup, address, ranged};
use super::document::Entry;
use super::issues::Issues;
use super::model::{Forwarding, VService, VServiceKind};
use super::names::Namespace;
use super::network::{self, Listener};
use super::ports::ports;
use super::raw::{RawForwarding, RawVService, RawVServiceKind};

/// Default Maglev table size (prime).
const DEFAULT_MAGLEV_SIZE: u32 = 65537;
/// Smallest and largest Maglev table size accepted.
const MAGLEV_MIN: i64 = 251;
const MAGLEV_MAX: i64 = 1_048_576;
/// Message for IPv6 where the data path cannot take it yet.
pub(super) const NO_IPV6: &str = "IPv6 is not supported by the XDP data path yet";

/// Validates every vService, then the checks across them (conflicting listeners).
pub(super) fn vservices(
    entries: &[Entry<RawVService>],
    backends: &Backends,
    issues: &mut Issues,
) -> Vec<VService> {
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
        let Some((vservice, listener)) = convert(entry, backends, issues) else {
            continue;
        };
        network::check_backends(&vservice, entry, backends, issues);
        listeners.push(listener);
        if issues.error_count() == before {
            valid.push(vservice);
        }
    }
    network::check_conflicts(&listeners, issues);
    valid
}

/// Converts one vService; `None` when its address or ports are unusable (reported).
fn convert(
    entry: &Entry<RawVService>,
    backends: &Backends,
    issues: &mut Issues,
) -> Option<(VService, Listener)> {
    let raw = &entry.raw;
    let path = &entry.path;
    let kind = match raw.kind.get_ref() {
        RawVServiceKind::TcpL4 => VServiceKind::TcpL4,
        RawVServiceKind::UdpL4 => VServiceKind::UdpL4,
        RawVServiceKind::AnyL3 => VServiceKind::AnyL3,
    };
    let address_field = format!("{path}.address");
    let vip = address(&raw.address, &address_field, issues);
    if let Some(IpAddr::V6(_)) = vip
        && kind.is_network()
    {
        issues.error(
            &raw.address.span(),
            &address_field,
            format!("{}: {NO_IPV6}", raw.address.get_ref()),
        );
    }
    let ports = ports(entry, issues);
    let forwarding = match raw.forwarding.as_ref().map(|f| *f.get_ref()) {
        Some(RawForwarding::Dsr) => Forwarding::Dsr,
        Some(RawForwarding::Nat) | None => Forwarding::Nat,
    };
    // Checked before giving up on a bad address or port, so their problems show too.
    let maglev_size = maglev_size(entry, issues);
    let backends = backend_list(entry, backends, issues);
    let vservice = VService {
        name: raw.name.get_ref().clone(),
        kind,
        address: vip?,
        ports: ports.as_ref()?.0,
        forwarding,
        maglev_size,
        backends,
        apply_admin_state: raw.apply_admin_state,
        l7: None,
    };
    let (_, span, field) = ports?;
    let listener = Listener {
        name: vservice.name.clone(),
        kind,
        address: vservice.address,
        ports: vservice.ports,
        span,
        field,
    };
    Some((vservice, listener))
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

/// The Default list: present, non-empty, names defined, no backend twice (also through
/// groups, which would double its share and blur the backup rules).
fn backend_list(
    entry: &Entry<RawVService>,
    backends: &Backends,
    issues: &mut Issues,
) -> Vec<String> {
    let raw = &entry.raw;
    let path = &entry.path;
    let no_list = format!("vservice `{}` has no backends list", raw.name.get_ref());
    let Some(list) = &raw.backends else {
        issues.error(&entry.span, &format!("{path}.backends"), no_list);
        return Vec::new();
    };
    if list.get_ref().is_empty() {
        issues.error(&list.span(), &format!("{path}.backends"), no_list);
    }
    // Backend Service name -> the list entry that brought it in.
    let mut seen: HashMap<&str, &str> = HashMap::new();
    for (index, item) in list.get_ref().iter().enumerate() {
        let field = format!("{path}.backends[{index}]");
        let name = item.get_ref().as_str();
        let members: Vec<&str> = match backends.lookup(name) {
            Lookup::Unknown => {
                issues.error(
                    &item.span(),
                    &field,
                    format!("unknown backend service or group `{name}`"),
                );
                continue;
            }
            Lookup::Service(_) | Lookup::Invalid => vec![name],
            Lookup::Group(group) => group.members.iter().map(String::as_str).collect(),
        };
        if seen.values().any(|via| *via == name) {
            issues.error(&item.span(), &field, format!("`{name}` is listed twice"));
            continue;
        }
        for member in members {
            let Some(first) = seen.get(member) else {
                seen.insert(member, name);
                continue;
            };
            let before = if *first == member {
                String::new()
            } else {
                format!(" through `{first}`")
            };
            let now = if member == name {
                String::new()
            } else {
                format!(" (member of `{name}`)")
            };
            issues.error(
                &item.span(),
                &field,
                format!("backend service `{member}`{now} is already in this list{before}"),
            );
        }
    }
    list.get_ref()
        .iter()
        .map(|item| item.get_ref().clone())
        .collect()
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
