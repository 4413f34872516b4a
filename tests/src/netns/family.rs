//! The address family a shared end-to-end scenario runs in.
//!
//! The IPv4 tests (`e2e_network`, `e2e_health`) and the IPv6 ones (`e2e_ipv6`) run the same
//! scenarios ([`super::scenarios`]); only the addresses, the topology and a few command flags
//! differ. [`Family`] gives those, so each scenario is written once:
//!
//! | | [`Family::V4`] | [`Family::V6`] |
//! | --- | --- | --- |
//! | VIP `n` | `10.99.0.n` | `fd00:10:99::n` (same digits: 10 gives `::10`) |
//! | topology | [`Topology::new`] | [`Topology::dual_stack`] (servers on `[::]`) |
//! | backend `i` | `BackendHost::addr` | `BackendHost::addr6` |
//! | labels, VIP names | `tcp-l4`, `web` | `ipv6 tcp-l4`, `web6` |

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::topology::{
    BALANCER_ADDR, BALANCER_ADDR6, CLIENT_ADDR, CLIENT_ADDR6, Ipv6Options, Topology,
    TopologyOptions, backend_addr, backend_addr6,
};

/// IPv4 VIP `10.99.0.LAST`.
pub fn vip4(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 99, 0, last)
}

/// IPv6 VIP `fd00:10:99::LAST` (pass `0x10` for `::10`, mirroring IPv4's `10.99.0.10`).
pub fn vip6(last: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x10, 0x99, 0, 0, 0, 0, last)
}

/// `addr:port` for an address of either family.
pub fn at(addr: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(addr.into(), port)
}

/// Which address family a scenario's VIPs, backends and client traffic use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// IPv4 only: [`Topology::new`], backends at `10.11.N.2`.
    V4,
    /// IPv6 in a dual-stack topology: [`Topology::dual_stack`], backends at `fd00:10:11:N::2`.
    V6,
}

impl Family {
    /// VIP number `n`: `10.99.0.n`, or `fd00:10:99::n` with the same digits read as hex.
    pub fn vip(self, n: u8) -> IpAddr {
        match self {
            Family::V4 => vip4(n).into(),
            Family::V6 => {
                let last = u16::from_str_radix(&n.to_string(), 16).expect("decimal digits");
                vip6(last).into()
            }
        }
    }

    /// A topology with 3 backends (and the DSR wiring for `dsr_vip`, of this family).
    pub fn topology(self, dsr_vip: Option<IpAddr>) -> Topology {
        let built = match (self, dsr_vip) {
            (Family::V4, None) => Topology::new(&TopologyOptions::default()),
            (Family::V4, Some(IpAddr::V4(v4))) => Topology::new(&TopologyOptions {
                backends: 3,
                dsr_vip: Some(v4),
            }),
            (Family::V6, None) => {
                Topology::dual_stack(&TopologyOptions::default(), &Ipv6Options::default())
            }
            (Family::V6, Some(IpAddr::V6(v6))) => Topology::dual_stack(
                &TopologyOptions::default(),
                &Ipv6Options { dsr_vip: Some(v6) },
            ),
            (_, Some(other)) => panic!("{self:?} topology with a DSR VIP {other}"),
        };
        built.expect("topology")
    }

    /// The address of backend `i` (0-based) of `topo` in this family.
    pub fn backend_addr(self, topo: &Topology, i: usize) -> IpAddr {
        match self {
            Family::V4 => topo.backends[i].addr.into(),
            Family::V6 => topo.backends[i]
                .addr6
                .expect("dual-stack backend has an IPv6 address")
                .into(),
        }
    }

    /// The address plan's address of backend `n` (1-based), as the topology promises it.
    pub fn planned_backend_addr(self, n: usize) -> IpAddr {
        match self {
            Family::V4 => backend_addr(n).into(),
            Family::V6 => backend_addr6(n).into(),
        }
    }

    /// The client's address.
    pub fn client_addr(self) -> IpAddr {
        match self {
            Family::V4 => CLIENT_ADDR.into(),
            Family::V6 => CLIENT_ADDR6.into(),
        }
    }

    /// The balancer's address on the client link (the client's gateway).
    pub fn balancer_addr(self) -> IpAddr {
        match self {
            Family::V4 => BALANCER_ADDR.into(),
            Family::V6 => BALANCER_ADDR6.into(),
        }
    }

    /// The family flag of `ip` (`-4` / `-6`).
    pub fn ip_flag(self) -> &'static str {
        match self {
            Family::V4 => "-4",
            Family::V6 => "-6",
        }
    }

    /// The flags `ping` needs for this family (none for IPv4, `-6` for IPv6).
    pub fn ping_flags(self) -> &'static [&'static str] {
        match self {
            Family::V4 => &[],
            Family::V6 => &["-6"],
        }
    }

    /// The sysctl that turns forwarding on.
    pub fn forwarding_sysctl(self) -> &'static str {
        match self {
            Family::V4 => "net.ipv4.ip_forward",
            Family::V6 => "net.ipv6.conf.all.forwarding",
        }
    }

    /// `IPv4` / `IPv6`, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }

    /// A printed label: `what` for IPv4, `ipv6 what` for IPv6.
    pub fn label(self, what: &str) -> String {
        match self {
            Family::V4 => what.to_owned(),
            Family::V6 => format!("ipv6 {what}"),
        }
    }

    /// A vService name: `base` for IPv4, `base6` for IPv6.
    pub fn vip_name(self, base: &str) -> String {
        match self {
            Family::V4 => base.to_owned(),
            Family::V6 => format!("{base}6"),
        }
    }
}
