//! `[xdp]` and `[reflection]`: data-path settings and the S-RF reflection delays.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use serde_spanned::Spanned;

use super::backends::ranged;
use super::seconds::seconds;
use crate::config::issues::Issues;
use crate::config::model::{
    AttachMode, DEFAULT_PIN_DIR, HeaderLimits, ProxySettings, ReflectionSettings, XdpSettings,
};
use crate::config::raw::{RawAttachMode, RawProxy, RawReflection, RawXdp};

/// Default connection-table size in flows.
const DEFAULT_CONN_TABLE_SIZE: u32 = 1 << 20;
/// Allowed connection-table sizes: small enough for the kernel's memory limits, large
/// enough to be useful.
const CONN_TABLE_SIZES: std::ops::RangeInclusive<i64> = 1024..=33_554_432;
/// Default flood guard: new flows per second and CPU recorded (Katran's default too).
const DEFAULT_FLOOD_GUARD_RATE: u32 = 125_000;
/// Allowed flood guard rates (0: off).
const FLOOD_GUARD_RATES: std::ops::RangeInclusive<i64> = 0..=100_000_000;
/// Longest interface name the kernel accepts (IFNAMSIZ - 1).
const MAX_IFNAME: usize = 15;

/// Validates `[xdp]`, filling defaults.
pub(in crate::config) fn xdp(raw: &RawXdp, issues: &mut Issues) -> XdpSettings {
    let pin_dir = match &raw.pin_dir {
        Some(dir) if !dir.get_ref().starts_with('/') => {
            issues.error(
                &dir.span(),
                "xdp.pin_dir",
                format!("`{}` must be an absolute path on a bpffs", dir.get_ref()),
            );
            PathBuf::from(DEFAULT_PIN_DIR)
        }
        Some(dir) => PathBuf::from(dir.get_ref()),
        None => PathBuf::from(DEFAULT_PIN_DIR),
    };
    let conn_table_size = match &raw.conn_table_size {
        Some(size) => conn_table_size(size, issues),
        None => DEFAULT_CONN_TABLE_SIZE,
    };
    let flood_guard_rate = match &raw.flood_guard_rate {
        Some(rate) => ranged(
            rate,
            *FLOOD_GUARD_RATES.start(),
            *FLOOD_GUARD_RATES.end(),
            "xdp.flood_guard_rate",
            issues,
        )
        .unwrap_or(DEFAULT_FLOOD_GUARD_RATE),
        None => DEFAULT_FLOOD_GUARD_RATE,
    };
    let attach_mode = match raw.attach_mode {
        Some(RawAttachMode::Skb) => AttachMode::Skb,
        Some(RawAttachMode::Drv) | None => AttachMode::Driver,
    };
    XdpSettings {
        pin_dir,
        conn_table_size,
        flood_guard_rate,
        interfaces: interfaces(raw.interfaces.as_deref().unwrap_or_default(), issues),
        attach_mode,
        tunnel_source_v4: raw
            .tunnel_source_v4
            .as_ref()
            .and_then(|p| prefix(p, "xdp.tunnel_source_v4", issues)),
        tunnel_source_v6: raw
            .tunnel_source_v6
            .as_ref()
            .and_then(|p| prefix(p, "xdp.tunnel_source_v6", issues)),
        gue_port: match &raw.gue_port {
            Some(port) => ranged(port, 1, 65535, "xdp.gue_port", issues)
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(lb_common::GUE_PORT),
            None => lb_common::GUE_PORT,
        },
    }
}

/// A tunnel source prefix (`ADDRESS/LENGTH` of the key's family; the host bits, which the
/// flow's hash fills, must be zero so that the written prefix means what it says).
fn prefix<N>(raw: &Spanned<String>, field: &str, issues: &mut Issues) -> Option<N>
where
    N: std::str::FromStr + Copy + Into<ipnet::IpNet>,
{
    let text = raw.get_ref();
    let Ok(net) = text.parse::<N>() else {
        let family = if field.ends_with("v4") {
            "IPv4"
        } else {
            "IPv6"
        };
        issues.error(
            &raw.span(),
            field,
            format!(
                "`{text}` is not an {family} prefix such as {}",
                example(field)
            ),
        );
        return None;
    };
    let whole: ipnet::IpNet = net.into();
    if whole.addr() != whole.network() {
        issues.error(
            &raw.span(),
            field,
            format!(
                "`{text}` has host bits set; write the prefix as {}/{} (the flow's hash fills \
                 the host bits)",
                whole.network(),
                whole.prefix_len()
            ),
        );
        return None;
    }
    Some(net)
}

/// An example value of a tunnel source key, for its error messages.
fn example(field: &str) -> &'static str {
    if field.ends_with("v4") {
        "10.255.0.0/24"
    } else {
        "fd00:255::/64"
    }
}

fn conn_table_size(size: &Spanned<i64>, issues: &mut Issues) -> u32 {
    let value = *size.get_ref();
    match u32::try_from(value) {
        Ok(ok) if CONN_TABLE_SIZES.contains(&value) => ok,
        _ => {
            issues.error(
                &size.span(),
                "xdp.conn_table_size",
                format!(
                    "{value} is out of range {}..={}",
                    CONN_TABLE_SIZES.start(),
                    CONN_TABLE_SIZES.end()
                ),
            );
            DEFAULT_CONN_TABLE_SIZE
        }
    }
}

fn interfaces(raw: &[Spanned<String>], issues: &mut Issues) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut names = Vec::new();
    for (index, name) in raw.iter().enumerate() {
        let field = format!("xdp.interfaces[{index}]");
        let text = name.get_ref();
        if !valid_ifname(text) {
            issues.error(
                &name.span(),
                &field,
                format!("`{text}` is not a valid interface name"),
            );
        } else if !seen.insert(text.clone()) {
            issues.error(
                &name.span(),
                &field,
                format!("interface `{text}` is listed twice"),
            );
        } else {
            names.push(text.clone());
        }
    }
    names
}

/// The kernel's rule for interface names (dev_valid_name).
fn valid_ifname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_IFNAME
        && name != "."
        && name != ".."
        && !name.contains(|c: char| c == '/' || c == ':' || c.is_whitespace())
}

/// Validates `[reflection]`, filling the S-RF defaults (9 s, 5 s, 2.5 s).
/// Most proxy worker threads accepted.
const MAX_WORKERS: i64 = 256;
/// The scheduler slices the kernel grants a SCHED_OTHER thread (0.1 ms to 100 ms).
const MIN_SLICE_US: i64 = 100;
const MAX_SLICE_US: i64 = 100_000;

pub(in crate::config) fn proxy(raw: &RawProxy, issues: &mut Issues) -> ProxySettings {
    let workers = raw.workers.as_ref().and_then(|w| {
        let value = *w.get_ref();
        match u16::try_from(value) {
            Ok(n) if (1..=MAX_WORKERS).contains(&value) => Some(n),
            _ => {
                issues.error(
                    &w.span(),
                    "proxy.workers",
                    format!("{value} is out of range 1..={MAX_WORKERS}"),
                );
                None
            }
        }
    });
    let sched_slice = match &raw.sched_slice_us {
        None => Some(ProxySettings::DEFAULT_SCHED_SLICE),
        Some(us) => match *us.get_ref() {
            0 => None,
            v @ MIN_SLICE_US..=MAX_SLICE_US => u64::try_from(v).ok().map(Duration::from_micros),
            v => {
                issues.error(
                    &us.span(),
                    "proxy.sched_slice_us",
                    format!(
                        "{v} is out of range: 0 (the kernel's default) or \
                         {MIN_SLICE_US}..={MAX_SLICE_US} microseconds"
                    ),
                );
                None
            }
        },
    };
    ProxySettings {
        workers,
        sched_slice,
        header_limits: header_limits(raw, issues),
    }
}

/// Bounds of `[proxy] max_header_bytes` and `max_header_line_bytes`: a head must hold a
/// request line and a Host header; the proxy reads at most 1 MiB of head.
const MIN_HEAD: i64 = 1024;
const MAX_HEAD: i64 = 1 << 20;
const MIN_LINE: i64 = 256;

fn header_limits(raw: &RawProxy, issues: &mut Issues) -> HeaderLimits {
    let defaults = HeaderLimits::default();
    let head = raw
        .max_header_bytes
        .as_ref()
        .map_or(Some(defaults.head), |v| {
            ranged(v, MIN_HEAD, MAX_HEAD, "proxy.max_header_bytes", issues).map(|n| n as usize)
        });
    let head_bound = head.map_or(MAX_HEAD, |h| h as i64);
    let line = match &raw.max_header_line_bytes {
        None => Some(defaults.line.min(head_bound as usize)),
        Some(v) => {
            let bound = i64::max(head_bound, MIN_LINE);
            ranged(v, MIN_LINE, bound, "proxy.max_header_line_bytes", issues).map(|n| n as usize)
        }
    };
    HeaderLimits {
        head: head.unwrap_or(defaults.head),
        line: line.unwrap_or(defaults.line),
    }
}

pub(in crate::config) fn reflection(
    raw: &RawReflection,
    issues: &mut Issues,
) -> ReflectionSettings {
    let mut delay = |value: &Option<Spanned<f64>>, key: &str, default: Duration| match value {
        Some(secs) => seconds(secs, &format!("reflection.{key}"), issues).unwrap_or(default),
        None => default,
    };
    ReflectionSettings {
        network_remove_delay: delay(
            &raw.network_remove_delay,
            "network_remove_delay",
            Duration::from_secs(9),
        ),
        network_add_delay: delay(
            &raw.network_add_delay,
            "network_add_delay",
            Duration::from_secs(5),
        ),
        l7_delay: delay(&raw.l7_delay, "l7_delay", Duration::from_millis(2500)),
    }
}
