//! Rules of Network (XDP) vServices that involve their addresses and backends: each VIP
//! forwards within its family (no NAT46), so the backends of a dual-stack vService have an
//! address of each; addresses the data path can route; DSR cannot change ports.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::config::check::backends::Backends;
use crate::config::issues::Issues;
use crate::config::model::{Forwarding, MAX_TUNNEL_CHECKS, PortSpec, TunnelCheck, VService};
use crate::config::raw::RawVService;
use crate::config::raw::document::Entry;

/// Why the XDP data path cannot use `address` as a VIP or a backend, if it cannot: it
/// forwards by the routing table, which needs a unicast address with no interface scope.
pub(in crate::config) fn unroutable(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(a) if a.is_unspecified() || a.is_multicast() || a.is_broadcast() => {
            Some("not a unicast address")
        }
        IpAddr::V6(a) if a.is_unspecified() || a.is_multicast() => Some("not a unicast address"),
        IpAddr::V6(a) if a.is_unicast_link_local() => Some(
            "a link-local address is scoped to one interface; use a global or unique-local (fc00::/7) address",
        ),
        IpAddr::V6(a) if a.to_ipv4_mapped().is_some() => {
            Some("an IPv4-mapped IPv6 address; write the IPv4 address instead")
        }
        _ => None,
    }
}

/// The name of an address's family, for messages.
pub(in crate::config) fn family(address: IpAddr) -> &'static str {
    if address.is_ipv4() { "IPv4" } else { "IPv6" }
}

/// Per backend of the vService (groups expanded): the VIP's family and a routable
/// address; DSR keeps the port, so the backend must use port 0 or the vService's port;
/// any-l3 forwards every port unchanged.
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
            for vip in vservice.vips() {
                let Some(address) = service.address_for(vip) else {
                    issues.error(
                        &item.span(),
                        &field,
                        family_problem(name, service.address, vip, vservice.address6.is_some()),
                    );
                    continue;
                };
                if let Some(problem) = unroutable(address) {
                    issues.error(
                        &item.span(),
                        &field,
                        format!("backend service `{name}` has address {address}: {problem}"),
                    );
                }
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

/// Why backend service `name` (main address `address`) cannot serve `vip`: it has no
/// address of the VIP's family. A Network vService forwards within one family (no NAT46).
fn family_problem(name: &str, address: IpAddr, vip: IpAddr, dual_stack: bool) -> String {
    let hint = if vip.is_ipv6() && address.is_ipv4() {
        "give it `address6`"
    } else if dual_stack {
        "put its IPv4 address in `address` and the IPv6 one in `address6`"
    } else {
        "use a vService per family, or a dual-stack vService (`address` IPv4, `address6` \
         IPv6) whose backends have both"
    };
    format!(
        "backend service `{name}` has {} address {address} but the VIP {vip} is {}: a Network \
         vService forwards within one family (no NAT46); {hint}",
        family(address),
        family(vip),
    )
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
        (PortSpec::Single(own), mode) if mode.is_direct() && own != port => Some(format!(
            "{} cannot change ports, set the port to 0 or {own}",
            mode.name()
        )),
        (PortSpec::Range(..), mode) if mode.is_direct() => Some(format!(
            "{} cannot change ports, set the port to 0",
            mode.name()
        )),
        _ => None,
    }
}

/// Each `ipip` vService's families have an outer source prefix (`[xdp] tunnel_source_v4`,
/// `tunnel_source_v6`): without one the data path could not build the outer header.
pub(in crate::config) fn tunnel_sources(
    entries: &[Entry<RawVService>],
    xdp: &crate::config::model::XdpSettings,
    issues: &mut Issues,
) {
    for entry in entries {
        let raw = &entry.raw;
        let Some(forwarding) = raw.forwarding.as_ref() else {
            continue;
        };
        let mode = match forwarding.get_ref() {
            crate::config::raw::RawForwarding::Ipip => "ipip",
            crate::config::raw::RawForwarding::Gue => "gue",
            _ => continue,
        };
        let v4 = raw
            .address
            .get_ref()
            .parse::<IpAddr>()
            .ok()
            .map(|a| a.is_ipv4());
        let needs = [
            (
                v4 == Some(true),
                xdp.tunnel_source_v4.is_some(),
                "v4",
                "IPv4",
            ),
            (
                v4 == Some(false) || raw.address6.is_some(),
                xdp.tunnel_source_v6.is_some(),
                "v6",
                "IPv6",
            ),
        ];
        for (needed, set, key, family) in needs {
            if needed && !set {
                issues.error(
                    &forwarding.span(),
                    &format!("{}.forwarding", entry.path),
                    format!(
                        "`{mode}` forwarding of an {family} VIP needs [xdp] tunnel_source_{key}, \
                         the prefix outer sources are taken from (for example \"{}\")",
                        if key == "v4" {
                            "10.255.0.0/24"
                        } else {
                            "fd00:255::/64"
                        }
                    ),
                );
            }
        }
    }
}

/// Gives every server of a tunnelled vService (`ipip`, `gue`) its [`TunnelCheck`]: the first
/// such vService of each family (file order) that lists it names the VIP its checks go to
/// and the tunnel they travel (S-TN4).
pub(in crate::config) fn tunnel_checks(
    vservices: &[VService],
    backends: &mut crate::config::check::backends::Backends,
    issues: &mut Issues,
) {
    let mut vips: HashMap<String, Vec<(IpAddr, bool)>> = HashMap::new();
    for vs in vservices.iter().filter(|v| v.forwarding.is_tunnel()) {
        let gue = vs.forwarding == Forwarding::Gue;
        for list_name in &vs.backends {
            for service in backends.expand(list_name) {
                vips.entry(service.name.clone())
                    .or_default()
                    .extend(vs.vips().map(|vip| (vip, gue)));
            }
        }
    }
    let mut count = 0u32;
    for service in &mut backends.services {
        let Some(listed) = vips.get(&service.name) else {
            continue;
        };
        let first = |v4: bool| listed.iter().copied().find(|(a, _)| a.is_ipv4() == v4);
        let (v4, v6) = (first(true), first(false));
        service.tunnel_check = Some(TunnelCheck {
            vip4: v4.and_then(|(a, _)| match a {
                IpAddr::V4(v4) => Some(v4),
                IpAddr::V6(_) => None,
            }),
            vip6: v6.and_then(|(a, _)| match a {
                IpAddr::V6(v6) => Some(v6),
                IpAddr::V4(_) => None,
            }),
            gue4: v4.is_some_and(|(_, gue)| gue),
            gue6: v6.is_some_and(|(_, gue)| gue),
            index: count,
        });
        count += 1;
    }
    if count > MAX_TUNNEL_CHECKS {
        issues.error(
            &(0..0),
            "vservice",
            format!(
                "{count} servers are listed by tunnelled vServices; the health checks of at most \
                 {MAX_TUNNEL_CHECKS} can travel the tunnel"
            ),
        );
    }
}
