//! Rules of Network (XDP) vServices that involve their backends or other vServices:
//! DSR cannot change ports, IPv6 is not forwarded yet, listeners must not overlap.

use std::net::IpAddr;
use std::ops::Range;

use super::backends::Backends;
use super::document::Entry;
use super::issues::Issues;
use super::model::{Forwarding, PortSpec, VService, VServiceKind};
use super::raw::RawVService;
use super::vservice::NO_IPV6;

/// What a vService listens on, with where to point when it clashes.
pub(super) struct Listener {
    /// vService name.
    pub name: String,
    /// Kind (gives the protocol).
    pub kind: VServiceKind,
    /// The VIP.
    pub address: IpAddr,
    /// Ports listened on.
    pub ports: PortSpec,
    /// Span of the ports (or, for any-l3, of the address).
    pub span: Range<usize>,
    /// Field path matching `span`.
    pub field: String,
}

/// Per backend of the vService (groups expanded): IPv4 only; DSR keeps the port, so the
/// backend must use port 0 or the vService's port; any-l3 forwards every port unchanged.
pub(super) fn check_backends(
    vservice: &VService,
    entry: &Entry<RawVService>,
    backends: &Backends,
    issues: &mut Issues,
) {
    if !vservice.kind.is_network() {
        return;
    }
    let Some(list) = &entry.raw.backends else {
        return;
    };
    for (index, item) in list.get_ref().iter().enumerate() {
        let field = format!("{}.backends[{index}]", entry.path);
        for service in backends.expand(item.get_ref()) {
            let name = &service.name;
            if service.address.is_ipv6() {
                issues.error(
                    &item.span(),
                    &field,
                    format!(
                        "backend service `{name}` has address {}: {NO_IPV6}",
                        service.address
                    ),
                );
            }
            if let Some(problem) = port_problem(vservice, service.port) {
                issues.error(
                    &item.span(),
                    &field,
                    format!(
                        "backend service `{name}` has port {}: {problem}",
                        service.port
                    ),
                );
            }
        }
    }
}

/// Why a backend port cannot be used by this vService, if it cannot.
fn port_problem(vservice: &VService, port: u16) -> Option<String> {
    if port == 0 {
        return None;
    }
    match (vservice.ports, vservice.forwarding) {
        (PortSpec::Any, _) => Some(
            "an any-l3 vservice forwards every protocol and port unchanged, set the port to 0"
                .to_owned(),
        ),
        (PortSpec::Single(own), Forwarding::Dsr) if own != port => Some(format!(
            "dsr cannot change ports, set the port to 0 or {own}"
        )),
        (PortSpec::Range(..), Forwarding::Dsr) => {
            Some("dsr cannot change ports, set the port to 0".to_owned())
        }
        _ => None,
    }
}

/// Two vServices must not take the same packets: same address and protocol with
/// overlapping ports, or an any-l3 vService on an address another vService uses.
pub(super) fn check_conflicts(listeners: &[Listener], issues: &mut Issues) {
    for (index, later) in listeners.iter().enumerate() {
        for earlier in &listeners[..index] {
            if earlier.address != later.address {
                continue;
            }
            let clash = if earlier.kind == VServiceKind::AnyL3 || later.kind == VServiceKind::AnyL3
            {
                Some("an any-l3 vservice takes every protocol on its address".to_owned())
            } else if earlier.kind == later.kind && overlap(earlier.ports, later.ports) {
                Some("same address, protocol and overlapping ports".to_owned())
            } else {
                None
            };
            if let Some(why) = clash {
                let line = issues.line_of(earlier.span.start);
                issues.error(
                    &later.span,
                    &later.field,
                    format!(
                        "conflicts with vservice `{}` (line {line}) on {}: {why}",
                        earlier.name, later.address
                    ),
                );
            }
        }
    }
}

/// True when two port specs share a port.
fn overlap(a: PortSpec, b: PortSpec) -> bool {
    let bounds = |spec| match spec {
        PortSpec::Single(port) => (port, port),
        PortSpec::Range(start, end) => (start, end),
        PortSpec::Any => (0, u16::MAX),
    };
    let ((a_start, a_end), (b_start, b_end)) = (bounds(a), bounds(b));
    a_start <= b_end && b_start <= a_end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_overlap() {
        use PortSpec::{Range, Single};
        assert!(overlap(Single(80), Single(80)));
        assert!(!overlap(Single(80), Single(81)));
        assert!(overlap(Range(1000, 2000), Single(2000)));
        assert!(!overlap(Range(1000, 2000), Single(2001)));
        assert!(overlap(Range(1000, 2000), Range(1500, 3000)));
        assert!(!overlap(Range(1000, 2000), Range(2001, 3000)));
    }
}
