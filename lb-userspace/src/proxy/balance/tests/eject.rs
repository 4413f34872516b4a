//! Passive health's ejection cap (`max_ejection_percent`): runs of live failures never put
//! more than the cap of a list's mains in Error at once, counting both what the published
//! selection shows down and what was reported moments ago.

use std::sync::Arc;

use tokio::sync::mpsc::UnboundedReceiver;

use super::super::{Ejections, LiveFailure};
use crate::config::{Config, parse};
use crate::selection::{Health, Published, Selections};

/// Four mains a, b, c, d and a backup k behind one HTTP vService, checked by a TCP profile
/// with passive health and `extra` lines.
fn four_mains(extra: &str) -> Config {
    let mut text =
        format!("[[health_check]]\nname = \"hc\"\ntype = \"tcp\"\npassive_failures = 2\n{extra}\n");
    for (i, name) in ["a", "b", "c", "d", "k"].into_iter().enumerate() {
        let backup = if name == "k" { "backup = true\n" } else { "" };
        text += &format!(
            "[[backend_service]]\nname = \"{name}\"\naddress = \"127.0.0.1\"\nport = {}\n\
             health_check = \"hc\"\n{backup}\n",
            9001 + i
        );
    }
    text += "[[vservice]]\nname = \"web\"\nkind = \"http\"\naddress = \"127.0.0.1\"\n\
             port = 8080\nbackends = [\"a\", \"b\", \"c\", \"d\", \"k\"]\n";
    parse(&text, "eject.toml").expect("valid")
}

/// The cap over `cfg` with these services in Error in the published selection.
fn cap(cfg: &Config, errors: &[&str]) -> (Ejections, UnboundedReceiver<LiveFailure>) {
    let published = Arc::new(Published::default());
    let health = |name: &str| match errors.contains(&name) {
        true => Health::Error,
        false => Health::Ok,
    };
    published.store(Selections::compute(cfg, &health));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let ejections = Ejections::new(tx, published);
    ejections.configure(cfg);
    (ejections, rx)
}

/// Reports a run for each of `names`; returns those passed on to the health engine.
fn report(
    ejections: &Ejections,
    rx: &mut UnboundedReceiver<LiveFailure>,
    names: &[&str],
) -> Vec<String> {
    for name in names {
        ejections.failed(LiveFailure {
            backend: (*name).to_owned(),
            reason: "2 consecutive failures".to_owned(),
        });
    }
    std::iter::from_fn(|| rx.try_recv().ok().map(|f| f.backend)).collect()
}

#[test]
fn by_default_passive_failures_put_at_most_half_of_the_mains_in_error() {
    let cfg = four_mains("");
    let (ejections, mut rx) = cap(&cfg, &[]);
    // a and b are reported; the selection has not shown them down yet, they count anyway.
    assert_eq!(
        report(&ejections, &mut rx, &["a", "b", "c", "d"]),
        ["a", "b"]
    );
    // Once the selection shows them in Error, c and d are still held back.
    let (ejections, mut rx) = cap(&cfg, &["a", "b"]);
    assert!(report(&ejections, &mut rx, &["c", "d"]).is_empty());
    // One main in Error by its active check leaves room for one more.
    let (ejections, mut rx) = cap(&cfg, &["d"]);
    assert_eq!(report(&ejections, &mut rx, &["a", "b", "c"]), ["a"]);
}

#[test]
fn the_cap_follows_max_ejection_percent() {
    let cfg = four_mains("max_ejection_percent = 100");
    let (ejections, mut rx) = cap(&cfg, &[]);
    assert_eq!(report(&ejections, &mut rx, &["a", "b", "c", "d"]).len(), 4);
    let cfg = four_mains("max_ejection_percent = 75");
    let (ejections, mut rx) = cap(&cfg, &[]);
    assert_eq!(report(&ejections, &mut rx, &["a", "b", "c", "d"]).len(), 3);
    let cfg = four_mains("max_ejection_percent = 0");
    let (ejections, mut rx) = cap(&cfg, &[]);
    assert!(report(&ejections, &mut rx, &["a", "b"]).is_empty());
}

#[test]
fn a_backup_is_not_capped_by_the_mains_and_a_lone_main_can_still_go() {
    let cfg = four_mains("");
    let (ejections, mut rx) = cap(&cfg, &["a", "b"]);
    // k is no main of the list: nothing caps it.
    assert_eq!(report(&ejections, &mut rx, &["k"]), ["k"]);
    let text = "[[health_check]]\nname = \"hc\"\ntype = \"passive\"\n\
                [[backend_service]]\nname = \"a\"\naddress = \"127.0.0.1\"\nport = 9001\n\
                health_check = \"hc\"\n\
                [[vservice]]\nname = \"web\"\nkind = \"http\"\naddress = \"127.0.0.1\"\n\
                port = 8080\nbackends = [\"a\"]\n";
    let cfg = parse(text, "one.toml").expect("valid");
    let (ejections, mut rx) = cap(&cfg, &[]);
    assert_eq!(report(&ejections, &mut rx, &["a"]), ["a"], "at least one");
}
