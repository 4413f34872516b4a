//! Settings `lb run` reads once, when it starts: the interfaces and maps of the data path,
//! the API listener, the proxy's worker threads and the reflection cadences. A reload that
//! changes one of them says so, so that an operator does not believe it applied.

use std::fmt::Debug;
use std::time::Duration;

use super::Config;

/// One line per setting that differs between `running` (the configuration the daemon
/// started with) and `new` and takes effect only at the next restart.
pub fn restart_only_changes(running: &Config, new: &Config) -> Vec<String> {
    let (r, n) = (running, new);
    let dbg = |v: &dyn Debug| format!("{v:?}");
    let workers = |w: Option<u16>| w.map_or_else(|| "one per CPU".to_owned(), |w| w.to_string());
    let slice = |s: Option<Duration>| {
        s.map_or_else(|| "the kernel's".to_owned(), |s| s.as_micros().to_string())
    };
    let (rr, nr) = (&r.reflection, &n.reflection);
    let fields = [
        ("xdp.pin_dir", dbg(&r.xdp.pin_dir), dbg(&n.xdp.pin_dir)),
        (
            "xdp.conn_table_size",
            dbg(&r.xdp.conn_table_size),
            dbg(&n.xdp.conn_table_size),
        ),
        (
            "xdp.flood_guard_rate",
            dbg(&r.xdp.flood_guard_rate),
            dbg(&n.xdp.flood_guard_rate),
        ),
        (
            "xdp.interfaces",
            dbg(&r.xdp.interfaces),
            dbg(&n.xdp.interfaces),
        ),
        (
            "xdp.attach_mode",
            dbg(&r.xdp.attach_mode),
            dbg(&n.xdp.attach_mode),
        ),
        (
            "api.listen",
            r.api.listen.to_string(),
            n.api.listen.to_string(),
        ),
        (SECRET, dbg(&r.api.token), dbg(&n.api.token)),
        ("api.socket", dbg(&r.api.socket), dbg(&n.api.socket)),
        (
            "proxy.workers",
            workers(r.proxy.workers),
            workers(n.proxy.workers),
        ),
        (
            "proxy.sched_slice_us",
            slice(r.proxy.sched_slice),
            slice(n.proxy.sched_slice),
        ),
        (
            "reflection.network_remove_delay",
            dbg(&rr.network_remove_delay),
            dbg(&nr.network_remove_delay),
        ),
        (
            "reflection.network_add_delay",
            dbg(&rr.network_add_delay),
            dbg(&nr.network_add_delay),
        ),
        ("reflection.l7_delay", dbg(&rr.l7_delay), dbg(&nr.l7_delay)),
        ("cluster.store", dbg(&etcd_of(r)), dbg(&etcd_of(n))),
        (
            "cluster.node_name",
            dbg(&r.cluster.as_ref().map(|c| &c.node_name)),
            dbg(&n.cluster.as_ref().map(|c| &c.node_name)),
        ),
    ];
    fields
        .into_iter()
        .filter(|(_, was, now)| was != now)
        .map(|(field, was, now)| {
            let change = match field {
                SECRET => String::new(),
                _ => format!(" ({was} -> {now})"),
            };
            format!(
                "{field} changed{change}: it takes effect at the next restart of lb run; the \
                 running value stays"
            )
        })
        .collect()
}

/// The etcd settings, read once at start; `store = "peers"` is read at each change.
fn etcd_of(c: &Config) -> Option<&super::EtcdSettings> {
    match c.cluster.as_ref().map(|c| &c.store) {
        Some(super::ClusterStore::Etcd(e)) => Some(e),
        _ => None,
    }
}

/// Said to have changed, never shown.
const SECRET: &str = "api.token";

/// No rule of docs/behaviour.md covers reloads of start-only settings; these check what a
/// reload reports.
#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Config {
        crate::config::parse(text, "restart.toml").expect("valid")
    }

    #[test]
    fn reloadable_changes_give_no_warning() {
        let a = parse("");
        let b = parse("[[backend_service]]\nname = \"b\"\naddress = \"127.0.0.1\"\nport = 8080\n");
        assert!(restart_only_changes(&a, &b).is_empty());
    }

    #[test]
    fn each_restart_only_change_is_named_and_a_token_is_never_shown() {
        let a = parse("[api]\ntoken = \"old-secret-token-1234\"\n");
        let b = parse(
            "[api]\nlisten = \"127.0.0.1:9999\"\ntoken = \"new-secret-token-5678\"\n\
             [proxy]\nworkers = 3\nsched_slice_us = 0\n\
             [reflection]\nl7_delay = 1.0\n",
        );
        let lines = restart_only_changes(&a, &b);
        let fields: Vec<&str> = lines
            .iter()
            .map(|l| l.split_once(' ').map_or(l.as_str(), |(f, _)| f))
            .collect();
        assert_eq!(
            fields,
            [
                "api.listen",
                "api.token",
                "proxy.workers",
                "proxy.sched_slice_us",
                "reflection.l7_delay"
            ]
        );
        assert!(
            lines[0].contains("127.0.0.1:9180 -> 127.0.0.1:9999"),
            "{}",
            lines[0]
        );
        assert!(lines.iter().all(|l| !l.contains("secret")), "{lines:?}");
        assert!(lines[2].contains("(one per CPU -> 3)"), "{}", lines[2]);
        assert!(lines[3].contains("(100 -> the kernel's)"), "{}", lines[3]);
    }
}
