//! `[bgp]`: how `lb run` announces its VIPs to the routers through BIRD (S-AN): one host
//! route per announceable VIP in a kernel routing table (or on a device) that BIRD exports.

use std::time::Duration;

/// The main routing table's id: a route there is used for forwarding, so it is only
/// accepted with a `device` (a dummy device that takes no traffic of its own).
pub const MAIN_TABLE: u32 = 254;

/// Route announcement settings. Off by default: without `[bgp]` no route is touched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BgpSettings {
    /// Keep the VIP routes current. False leaves the table alone.
    pub enabled: bool,
    /// Kernel routing table that holds the VIP routes (an id; names are resolved when the
    /// file is read). The main table when only `device` is given.
    pub table: u32,
    /// Device the routes point at (`VIP/32 dev DEVICE`) instead of blackhole routes; it
    /// must exist when `lb run` applies the settings.
    pub device: Option<String>,
    /// How long `lb run` waits after it starts before it changes any route, so that
    /// health checks settle first; routes left by the previous run stay meanwhile.
    pub announce_delay: Duration,
}

impl Default for BgpSettings {
    /// Off; the table a `[bgp]` without `table` names (the main one, for a device).
    fn default() -> Self {
        BgpSettings {
            enabled: false,
            table: MAIN_TABLE,
            device: None,
            announce_delay: Duration::ZERO,
        }
    }
}
