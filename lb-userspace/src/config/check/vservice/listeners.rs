//! Listeners that would take the same traffic: two Network vServices on the same packets,
//! two L7 vServices (or the API) on one socket, or an L7 vService whose packets the XDP
//! program would take first.

use std::net::{IpAddr, SocketAddr};
use std::ops::Range;

use crate::config::issues::Issues;
use crate::config::model::{PortSpec, VServiceKind};

/// What a vService listens on, with where to point when it clashes.
pub(in crate::config) struct Listener {
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

/// Reports each listener that clashes with an earlier one, at the later one.
pub(in crate::config) fn check_conflicts(listeners: &[Listener], issues: &mut Issues) {
    for (index, later) in listeners.iter().enumerate() {
        for earlier in &listeners[..index] {
            if let Some(why) = clash(earlier, later) {
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

/// Why two listeners take the same traffic, if they do.
fn clash(a: &Listener, b: &Listener) -> Option<&'static str> {
    let (a_l7, b_l7) = (!a.kind.is_network(), !b.kind.is_network());
    if a_l7 && b_l7 {
        // Sockets: a wildcard address also holds every address of its family.
        return (same_socket_address(a.address, b.address) && overlap(a.ports, b.ports))
            .then_some("two L7 vservices cannot listen on the same address and port");
    }
    if a.address != b.address {
        return None;
    }
    if a.kind == VServiceKind::AnyL3 || b.kind == VServiceKind::AnyL3 {
        return Some("an any-l3 vservice takes every protocol on its address");
    }
    if !overlap(a.ports, b.ports) {
        return None;
    }
    if a_l7 || b_l7 {
        let tcp = |kind| kind == VServiceKind::TcpL4;
        return (tcp(a.kind) || tcp(b.kind))
            .then_some("the XDP program takes these TCP packets before the L7 proxy can see them");
    }
    (a.kind == b.kind).then_some("same address, protocol and overlapping ports")
}

/// True when two socket addresses would collide on bind: equal, or one is the wildcard
/// (0.0.0.0 or ::) of the other's family.
pub(in crate::config) fn same_socket_address(a: IpAddr, b: IpAddr) -> bool {
    a == b || (a.is_ipv4() == b.is_ipv4() && (a.is_unspecified() || b.is_unspecified()))
}

/// The API listener must not share a socket with an L7 vService. Reported at
/// `api.listen` when it is written, else at the vService's port (it takes the default).
pub(in crate::config) fn check_api(
    listen: SocketAddr,
    span: Option<Range<usize>>,
    listeners: &[Listener],
    issues: &mut Issues,
) {
    let port = PortSpec::Single(listen.port());
    let taken = listeners.iter().find(|l| {
        !l.kind.is_network()
            && same_socket_address(l.address, listen.ip())
            && overlap(l.ports, port)
    });
    let Some(listener) = taken else {
        return;
    };
    match span {
        Some(span) => {
            let line = issues.line_of(listener.span.start);
            issues.error(
                &span,
                "api.listen",
                format!(
                    "{listen} is also the listener of vservice `{}` (line {line}): give the \
                     API another port",
                    listener.name
                ),
            );
        }
        None => issues.error(
            &listener.span,
            &listener.field,
            format!(
                "the API listens on {listen} by default: give this vservice another port, or \
                 move the API with [api] listen"
            ),
        ),
    }
}

/// True when two port specs share a port.
pub(in crate::config) fn overlap(a: PortSpec, b: PortSpec) -> bool {
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

    fn listener(kind: VServiceKind, address: &str, ports: PortSpec) -> Listener {
        Listener {
            name: "x".into(),
            kind,
            address: address.parse().unwrap(),
            ports,
            span: 0..0,
            field: String::new(),
        }
    }

    #[test]
    fn l7_clashes() {
        use PortSpec::{Any, Range, Single};
        use VServiceKind::{AnyL3, Http, L7Tcp, TcpL4, UdpL4};
        let http = listener(Http, "192.0.2.1", Single(80));
        // Two proxies on one socket, whatever their L7 kind.
        assert!(clash(&http, &listener(L7Tcp, "192.0.2.1", Single(80))).is_some());
        assert!(clash(&http, &listener(Http, "192.0.2.1", Single(81))).is_none());
        // A wildcard holds every address of its family only.
        assert!(clash(&http, &listener(Http, "0.0.0.0", Single(80))).is_some());
        assert!(clash(&listener(Http, "::", Single(80)), &http).is_none());
        assert!(
            clash(
                &listener(Http, "::", Single(80)),
                &listener(Http, "::1", Single(80))
            )
            .is_some()
        );
        // XDP takes TCP (and any-l3) packets to its VIP; UDP does not touch a TCP proxy.
        assert!(clash(&listener(TcpL4, "192.0.2.1", Range(1, 100)), &http).is_some());
        assert!(clash(&listener(AnyL3, "192.0.2.1", Any), &http).is_some());
        assert!(clash(&listener(UdpL4, "192.0.2.1", Single(80)), &http).is_none());
        assert!(clash(&listener(TcpL4, "192.0.2.2", Single(80)), &http).is_none());
    }
}
