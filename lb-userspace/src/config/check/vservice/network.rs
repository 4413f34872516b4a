//! Rules of Network (XDP) vServices that involve their backends: DSR cannot change
//! ports, IPv6 is not forwarded yet.

use super::NO_IPV6;
use crate::config::check::backends::Backends;
use crate::config::issues::Issues;
use crate::config::model::{Forwarding, PortSpec, VService};
use crate::config::raw::RawVService;
use crate::config::raw::document::Entry;

/// Per backend of the vService (groups expanded): IPv4 only; DSR keeps the port, so the
/// backend must use port 0 or the vService's port; any-l3 forwards every port unchanged.
pub(in crate::config) fn check_backends(
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
