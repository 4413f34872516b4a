//! `[bgp]`: a routing table that exists and does not carry this host's own forwarding
//! (or a device), and a delay in seconds (S-AN).

use std::path::Path;

use serde_spanned::Spanned;

use super::seconds::seconds;
use crate::config::issues::Issues;
use crate::config::model::{BgpSettings, MAIN_TABLE};
use crate::config::raw::{RawBgp, RawTable};

/// Where iproute2 keeps the table names, in the order it reads them (Debian 12 ships the
/// file under /etc, newer iproute2 under /usr/share).
const NAME_FILES: [&str; 2] = ["/etc/iproute2/rt_tables", "/usr/share/iproute2/rt_tables"];
/// Folders of extra name files (`*.conf`).
const NAME_DIRS: [&str; 2] = [
    "/etc/iproute2/rt_tables.d",
    "/usr/share/iproute2/rt_tables.d",
];

/// Validates `[bgp]`. Enabled needs `table` or `device`; a table is a number 1..2^32-1 or
/// a name iproute2 knows, and not the local, default or unspecified table; the main table
/// only together with a device.
pub(in crate::config) fn bgp(raw: &RawBgp, issues: &mut Issues) -> BgpSettings {
    let enabled = raw.enabled.as_ref().is_some_and(|e| *e.get_ref());
    let device = raw.device.as_ref().and_then(|d| device(d, issues));
    let table = match &raw.table {
        Some(t) => table(t, device.is_some(), issues).unwrap_or(0),
        None => MAIN_TABLE,
    };
    if enabled && raw.table.is_none() && raw.device.is_none() {
        let span = raw.enabled.as_ref().map(Spanned::span).unwrap_or(0..0);
        issues.error(
            &span,
            "bgp.table",
            "[bgp] is enabled but says nowhere to put the VIP routes: set `table` (a \
             routing table of its own that BIRD's kernel protocol learns, e.g. 100) or \
             `device` (a dummy device)",
        );
    }
    let announce_delay = raw
        .announce_delay
        .as_ref()
        .and_then(|d| seconds(d, "bgp.announce_delay", issues))
        .unwrap_or_default();
    BgpSettings {
        enabled,
        table,
        device,
        announce_delay,
    }
}

/// An interface name as the kernel accepts it: 1..15 bytes, no `/`, no white space.
fn device(name: &Spanned<String>, issues: &mut Issues) -> Option<String> {
    let text = name.get_ref();
    let ok = !text.is_empty()
        && text.len() < 16
        && !text.contains('/')
        && !text.chars().any(char::is_whitespace)
        && text != "."
        && text != "..";
    if !ok {
        issues.error(
            &name.span(),
            "bgp.device",
            format!("`{text}` is not an interface name (1 to 15 characters, no `/` or spaces)"),
        );
        return None;
    }
    Some(text.clone())
}

/// The table's id, reported when it does not exist or must not hold VIP routes.
fn table(raw: &Spanned<RawTable>, with_device: bool, issues: &mut Issues) -> Option<u32> {
    let span = raw.span();
    let id = match raw.get_ref() {
        RawTable::Id(n) => match u32::try_from(*n) {
            Ok(id) => id,
            Err(_) => {
                issues.error(
                    &span,
                    "bgp.table",
                    format!("routing table {n} does not exist: use 1 to 4294967295"),
                );
                return None;
            }
        },
        RawTable::Name(name) => match table_id(name) {
            Some(id) => id,
            None => {
                issues.error(
                    &span,
                    "bgp.table",
                    format!(
                        "no routing table is named `{name}` (looked in {} and \
                         rt_tables.d): give its number or add the name there",
                        NAME_FILES.join(", ")
                    ),
                );
                return None;
            }
        },
    };
    let problem = match id {
        0 => Some("0 is not a routing table"),
        253 => Some("table 253 (default) is used for this host's own forwarding"),
        255 => Some("table 255 (local) holds this host's own addresses"),
        MAIN_TABLE if !with_device => Some(
            "table 254 (main) is used for this host's own forwarding: a blackhole VIP route \
             there would drop traffic; use a table of its own or set `device`",
        ),
        _ => None,
    };
    if let Some(problem) = problem {
        issues.error(&span, "bgp.table", problem.to_string());
        return None;
    }
    Some(id)
}

/// Looks `name` up the way `ip route ... table NAME` does: a number, the built-in names,
/// then the iproute2 name files.
pub(in crate::config) fn table_id(name: &str) -> Option<u32> {
    if let Ok(id) = name.trim().parse::<u32>() {
        return Some(id);
    }
    match name {
        "main" => return Some(MAIN_TABLE),
        "local" => return Some(255),
        "default" => return Some(253),
        _ => {}
    }
    let mut files: Vec<std::path::PathBuf> = NAME_FILES.iter().map(Into::into).collect();
    for dir in NAME_DIRS {
        if let Ok(entries) = std::fs::read_dir(dir) {
            let mut more: Vec<_> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "conf"))
                .collect();
            more.sort();
            files.extend(more);
        }
    }
    files.iter().find_map(|file| lookup(file, name))
}

/// The id of `name` in one rt_tables file (`ID NAME` lines, `#` comments).
fn lookup(file: &Path, name: &str) -> Option<u32> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|line| {
        let line = line.split('#').next().unwrap_or_default();
        let mut words = line.split_whitespace();
        let id = words.next()?;
        let found = words.next()?;
        let id = match id.strip_prefix("0x") {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => id.parse().ok()?,
        };
        (found == name).then_some(id)
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{MAIN_TABLE, parse};

    fn errors(text: &str) -> Vec<String> {
        match parse(text, "t.toml") {
            Ok(_) => Vec::new(),
            Err(e) => e
                .errors
                .iter()
                .map(|i| format!("{}:{}", i.line, i.message))
                .collect(),
        }
    }

    /// Bad `[bgp]` settings get one clear error each, with their line (the routes of S-AN1).
    #[test]
    fn bad_bgp_settings_are_named_with_their_line() {
        let e = errors("[bgp]\nenabled = true\ntable = \"no-such-table\"\n");
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("3:") && e[0].contains("no routing table is named `no-such-table`"),
            "{e:?}"
        );
        let e = errors("[bgp]\nenabled = true\ntable = 254\n");
        assert!(e.len() == 1 && e[0].contains("table 254 (main)"), "{e:?}");
        let e = errors("[bgp]\nenabled = true\ntable = 255\n");
        assert!(e.len() == 1 && e[0].contains("(local)"), "{e:?}");
        let e = errors("[bgp]\nenabled = true\ntable = -4\n");
        assert!(e.len() == 1 && e[0].contains("does not exist"), "{e:?}");
        let e = errors("[bgp]\nenabled = true\n");
        assert!(
            e.len() == 1 && e[0].starts_with("2:") && e[0].contains("nowhere"),
            "{e:?}"
        );
        let e = errors("[bgp]\nenabled = true\ndevice = \"a/b\"\n");
        assert!(e.len() == 1 && e[0].starts_with("3:"), "{e:?}");
        let e = errors("[bgp]\nenabled = true\ntable = 100\nannounce_delay = -1\n");
        assert!(e.len() == 1 && e[0].starts_with("4:"), "{e:?}");
        let e = errors("[bgp]\nenabled = true\ntable = 100\nrouter = 1\n");
        assert!(e.len() == 1 && e[0].contains("router"), "{e:?}");
    }

    /// Good settings: a number, the main table with a device, a built-in name (S-AN).
    #[test]
    fn good_bgp_settings() {
        let c = parse(
            "[bgp]\nenabled = true\ntable = 100\nannounce_delay = 2.5\n",
            "t",
        )
        .unwrap();
        assert!(c.bgp.enabled);
        assert_eq!(c.bgp.table, 100);
        assert_eq!(c.bgp.announce_delay.as_millis(), 2500);
        let c = parse("[bgp]\nenabled = true\ndevice = \"lb-vips\"\n", "t").unwrap();
        assert_eq!(
            (c.bgp.table, c.bgp.device.as_deref()),
            (MAIN_TABLE, Some("lb-vips"))
        );
        let c = parse("", "t").unwrap();
        assert!(!c.bgp.enabled);
    }
}
