//! What can go wrong while keeping the VIP routes.

use std::net::IpAddr;

/// A failure to read or change the VIP routes; the daemon logs it and retries.
#[derive(Debug, thiserror::Error)]
pub enum RoutingError {
    /// The netlink socket could not be opened.
    #[error("opening a netlink socket to the kernel's routing tables: {0}")]
    Socket(#[source] std::io::Error),
    /// `bgp.device` names no interface of this network namespace.
    #[error(
        "bgp.device `{0}` does not exist: create it (e.g. `ip link add {0} type dummy`) or fix the name"
    )]
    NoDevice(String),
    /// Reading the table failed.
    #[error("reading routing table {table}: {source}")]
    Dump {
        /// The table.
        table: u32,
        /// The kernel's answer.
        #[source]
        source: rtnetlink::Error,
    },
    /// Adding (announcing) a route failed.
    #[error("announcing {vip}: adding its route to table {table}: {source}")]
    Add {
        /// The VIP.
        vip: IpAddr,
        /// The table.
        table: u32,
        /// The kernel's answer.
        #[source]
        source: rtnetlink::Error,
    },
    /// Deleting (withdrawing) a route failed.
    #[error("withdrawing {vip}: deleting its route from table {table}: {source}")]
    Delete {
        /// The VIP.
        vip: IpAddr,
        /// The table.
        table: u32,
        /// The kernel's answer.
        #[source]
        source: rtnetlink::Error,
    },
}
