//! Network-namespace harness for end-to-end tests of Network vServices.
//!
//! Builds a client, a balancer and backend namespaces joined by veth pairs (see
//! [`topology`]), runs real TCP/UDP servers and clients in threads of the test process
//! ([`servers`], [`client`]) and drives the `lb` binary in the balancer namespace
//! ([`lbctl`]). Everything created is removed by the [`Topology`] drop guard, also on panic.
//! [`Topology::dual_stack`] adds IPv6 beside IPv4 in every namespace.
//! The end-to-end tests' shared parts live here too: config text ([`configs`]), reading
//! `lb status` ([`status`]), the address family ([`Family`]) and the scenarios both families
//! run ([`scenarios`]).
//! Needs root (namespaces, bpffs, XDP).

pub mod bird;
pub mod client;
pub mod cmd;
pub mod configs;
pub mod etcd;
pub mod family;
pub mod lbctl;
pub mod ns;
pub mod scale;
pub mod scenarios;
pub mod servers;
pub mod status;
pub mod topology;
pub mod tunnel_lab;

pub use client::{
    HeldConn, Reply, ask_many, count_by_backend, tcp_ask, tcp_ask_at, udp_ask, udp_ask_at,
};
pub use family::{Family, at, vip4, vip6};
pub use lbctl::{Daemon, find_counter, require_data_path};
pub use ns::Netns;
pub use servers::ServerStop;
pub use topology::{
    BALANCER_ADDR6, BackendHost, CLIENT_ADDR, CLIENT_ADDR6, Ipv6Options, Topology, TopologyOptions,
    VIP6_PREFIX, backend_addr, backend_addr6,
};
