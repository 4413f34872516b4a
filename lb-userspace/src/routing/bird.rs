//! `lb bird-config`: a BIRD 2 configuration an operator adapts, so that BIRD announces the
//! routes `lb run` keeps (S-AN): a kernel protocol that learns the VIP table, BFD, and a
//! BGP template with short timers so a dead balancer leaves the routers' ECMP group fast.

use std::fmt::Write;

use super::PROTOCOL;
use crate::config::BgpSettings;

/// The BFD timers of the snippet, one value for every balancer and the test harness: 1 s to
/// notice a hung peer. 300 ms (100 ms x 3) made paths flap with nothing wrong on a busy
/// 2-core host.
pub const BFD_TIMERS: &str = "min rx interval 200 ms; min tx interval 200 ms; multiplier 5;";

/// The snippet for `settings`. Placeholders in capitals (ROUTER_ID, LOCAL_AS, PEER_ADDRESS,
/// PEER_AS, UPLINK) are the operator's to fill.
pub fn snippet(settings: &BgpSettings) -> String {
    let mut out = String::new();
    let source = match &settings.device {
        Some(device) => format!(
            "# lb keeps one route per VIP on device {device} (table {}), proto {PROTOCOL}.",
            settings.table
        ),
        None => format!(
            "# lb keeps one blackhole route per VIP in kernel table {}, proto {PROTOCOL}\n\
             # (no ip rule points at it, so it does not change this host's forwarding).",
            settings.table
        ),
    };
    let _ = write!(
        out,
        r#"# BIRD 2 configuration for a balancer that announces its VIPs (written by `lb bird-config`).
# Fill in the capitals, then check with `bird -p -c FILE`.
{source}
# A VIP is in the table while this balancer's data path is loaded and its vService can
# take new traffic, and not while the node is drained (`lb node drain`).
router id ROUTER_ID;

protocol device {{ scan time 10; }}

# Learn the VIP routes from the kernel at once (netlink), announce nothing back into it.
protocol kernel lb_vips {{
  kernel table {table};
  learn;
  scan time 10;
  ipv4 {{ import where krt_source = {PROTOCOL} && net.len = 32; export none; }};
}}
protocol kernel lb_vips6 {{
  kernel table {table};
  learn;
  scan time 10;
  ipv6 {{ import where krt_source = {PROTOCOL} && net.len = 128; export none; }};
}}

# BFD: a hung or cut-off balancer is noticed in 1 s (5 x 200 ms), not after the hold time;
# a dead link or BIRD goes at once (link state, closed session). Shorter timers flap on a
# busy host.
protocol bfd {{
  interface "UPLINK" {{ {BFD_TIMERS} }};
}}

# One session per router; keep every balancer's announcements alike (same AS-path length,
# origin, MED) so that the routers merge them into one ECMP route.
template bgp lb_router {{
  local as LOCAL_AS;
  hold time 3; keepalive time 1; connect retry time 1; connect delay time 1;
  error wait time 1, 5;
  bfd on;
  ipv4 {{ import none; export where proto = "lb_vips"; }};
  ipv6 {{ import none; export where proto = "lb_vips6"; }};
}}
protocol bgp router1 from lb_router {{ neighbor PEER_ADDRESS as PEER_AS; }}

# On the routers: `merge paths on;` in their kernel protocol and
# sysctl net.ipv4.fib_multipath_hash_policy=1 (and net.ipv6.fib_multipath_hash_policy=1)
# so that flows are spread by their ports too.
"#,
        table = settings.table,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The snippet names the table and our protocol number, and has BFD (S-AN).
    #[test]
    fn names_the_table_and_protocol() {
        let s = BgpSettings {
            enabled: true,
            table: 100,
            ..BgpSettings::default()
        };
        let text = snippet(&s);
        assert!(text.contains("kernel table 100;"));
        assert!(text.contains("krt_source = 241"));
        assert!(text.contains("bfd on;"));
    }
}
