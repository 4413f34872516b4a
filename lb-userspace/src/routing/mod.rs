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

use crate::config::BgpSettings;

/// Refuses settings whose `bgp.device` does not exist in this network namespace, so that
/// `lb run` or a reload with it fails with the reason instead of announcing nothing.
pub fn check(settings: &BgpSettings) -> Result<(), RoutingError> {
    let Some(name) = settings.device.as_ref().filter(|_| settings.enabled) else {
        return Ok(());
    };
    let c =
        std::ffi::CString::new(name.as_str()).map_err(|_| RoutingError::NoDevice(name.clone()))?;
    // SAFETY: a valid NUL-terminated string; the call only reads it.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(RoutingError::NoDevice(name.clone())),
        _ => Ok(()),
    }
}
