//! Route announcement (S-AN): `lb run` keeps one host route per announceable VIP (/32 or
//! /128) in a kernel routing table of its own, or on a device, over netlink; BIRD's kernel
//! protocol learns that table and announces the routes to the routers over BGP, which
//! spread flows over the balancers by ECMP.
//!
//! Which VIPs are announceable is the daemon's decision (data path loaded, vService able to
//! take new traffic, node not drained); this module only makes the table match it, without
//! ever deleting a route it keeps ([`table::VipRoutes::sync`]). [`bird`] prints the BIRD 2
//! configuration an operator adapts.

pub mod bird;
mod error;
mod table;

pub use error::RoutingError;
pub use table::{PROTOCOL, VipRoutes, withdraw_all};
