//! The data path's rare events as log records (aya-log), which `lb run` shows at DEBUG: a
//! packet a tunnelled VIP could not encapsulate, and one too big for its tunnel. Only those
//! paths reach here, so forwarded packets pay nothing; and since the loader sets
//! `AYA_LOG_LEVEL` from the daemon's log filter, at the default INFO these records are not
//! even written. The counters (`GLOBAL_TUNNEL_FAILED`, `GLOBAL_TOO_BIG`) count every case;
//! the records say which backend and why.

use aya_ebpf::programs::XdpContext;
use aya_log_ebpf::debug;
use lb_common::Addr;

/// Logs a packet of a tunnelled VIP dropped because it could not be encapsulated.
#[inline(always)]
pub fn tunnel_failed(ctx: &XdpContext, why: &'static str) {
    debug!(ctx, "tunnel: packet dropped: {}", why);
}

/// Logs a packet to `backend` (IPv4 when `v4`) answered with ICMP "too big": `len` bytes
/// that do not fit the path once encapsulated, `usable` the MTU the client was given.
#[inline(always)]
pub fn too_big(ctx: &XdpContext, v4: bool, backend: &Addr, len: u16, usable: u16) {
    let o = backend.octets;
    if v4 {
        let backend = [o[0], o[1], o[2], o[3]];
        debug!(
            ctx,
            "tunnel to {:i}: {} bytes do not fit once encapsulated; ICMP too big sent, MTU {}",
            backend,
            len,
            usable
        );
    } else {
        debug!(
            ctx,
            "tunnel to {:i}: {} bytes do not fit once encapsulated; ICMP too big sent, MTU {}",
            o,
            len,
            usable
        );
    }
}
