//! Network-namespace harness for end-to-end tests of Network vServices.
//!
//! Builds a client, a balancer and backend namespaces joined by veth pairs (see
//! [`topology`]), runs real TCP/UDP servers and clients in threads of the test process
//! ([`servers`], [`client`]) and drives the `lb` binary in the balancer namespace
//! ([`lbctl`]). Everything created is removed by the [`Topology`] drop guard, also on panic.
//! Needs root (namespaces, bpffs, XDP).

pub mod client;
pub mod cmd;
pub mod lbctl;
pub mod ns;
pub mod servers;
pub mod topology;

pub use client::{HeldConn, Reply, ask_many, count_by_backend, tcp_ask, udp_ask};
pub use lbctl::{Daemon, find_counter, require_data_path};
pub use ns::Netns;
pub use servers::ServerStop;
pub use topology::{BackendHost, CLIENT_ADDR, Topology, TopologyOptions, backend_addr};
