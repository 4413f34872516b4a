//! S-CL4: every balancer builds the same Maglev table for the same backends, whatever its
//! history. Two data paths, each pinned and attached to a veth interface of its own in a
//! namespace this test creates, reach the same configuration by different roads (other
//! config order, other Backend Service names, backends added and removed in between, a
//! program unloaded and loaded afresh, adoption of pins); `lb table --json` then shows the
//! same entries byte for byte and the same digest, although the backend slot numbers behind
//! them differ. A changed weight shows as a different digest (the comparison can fail).
//! Needs root and the XDP object built by `cargo xtask build`.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

/// The namespace, the pin directories and the temp dir, removed on drop.
struct Fixture {
    ns: String,
    dir: PathBuf,
    pins: Vec<String>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for (pin, iface) in self.pins.iter().zip(["da", "db"]) {
            let _ = self.lb(&["unload", "--iface", iface, "--pin-dir", pin]);
            let _ = std::fs::remove_dir_all(pin);
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ip(args: &[&str]) {
    let ok = Command::new("ip").args(args).status().expect("ip runs");
    assert!(ok.success(), "ip {args:?}");
}

impl Fixture {
    fn new() -> Fixture {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let id = format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let ns = format!("lbtables{}", id.replace('-', "x"));
        ip(&["netns", "add", &ns]);
        let f = Fixture {
            ns,
            dir: std::env::temp_dir().join(format!("lb-tables-{id}")),
            pins: vec![
                format!("/sys/fs/bpf/lb-tables-a-{id}"),
                format!("/sys/fs/bpf/lb-tables-b-{id}"),
            ],
        };
        for dev in ["da", "db"] {
            let peer = format!("{dev}p");
            ip(&[
                "-n", &f.ns, "link", "add", dev, "type", "veth", "peer", "name", &peer,
            ]);
            ip(&["-n", &f.ns, "link", "set", dev, "up"]);
            ip(&["-n", &f.ns, "link", "set", &peer, "up"]);
        }
        std::fs::create_dir_all(&f.dir).expect("temp dir");
        f
    }

    /// Runs `lb ARGS` in the namespace (nsenter keeps the host's bpffs, so pins stay).
    fn lb(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.ns))
            .arg(env!("CARGO_BIN_EXE_lb"))
            .args(args)
            .env("LB_XDP_OBJECT", lb::network::object_path())
            .output()
            .expect("lb runs")
    }

    /// Loads (or re-applies over the pins of) data path `which` with `config`.
    fn load(&self, which: usize, config: &str) {
        let path = self.dir.join(format!("{which}.toml"));
        std::fs::write(&path, config).expect("config written");
        let iface = ["da", "db"][which];
        let out = self.lb(&[
            "load",
            "--config",
            path.to_str().expect("utf-8 path"),
            "--iface",
            iface,
            "--mode",
            "skb",
            "--pin-dir",
            &self.pins[which],
        ]);
        assert!(
            out.status.success(),
            "lb load {iface}: {}",
            text(&out.stderr)
        );
    }

    fn unload(&self, which: usize) {
        let out = self.lb(&[
            "unload",
            "--iface",
            ["da", "db"][which],
            "--pin-dir",
            &self.pins[which],
        ]);
        assert!(out.status.success(), "lb unload: {}", text(&out.stderr));
    }

    /// `lb table VSERVICE --json` of data path `which`.
    fn table(&self, which: usize, vservice: &str) -> Value {
        let out = self.lb(&["table", vservice, "--json", "--pin-dir", &self.pins[which]]);
        assert!(out.status.success(), "lb table: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("lb table prints JSON")
    }

    /// `lb status --json` of data path `which` (no daemon: the API part is absent).
    fn status(&self, which: usize) -> String {
        let out = self.lb(&[
            "status",
            "--json",
            "--pin-dir",
            &self.pins[which],
            "--api",
            "http://127.0.0.1:1",
        ]);
        assert!(out.status.success(), "lb status: {}", text(&out.stderr));
        text(&out.stdout)
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A configuration: `backends` as (name, address, weight), listed in this order, and two
/// Network vServices using them in `order` (names), one NAT, one DSR.
fn config(backends: &[(&str, &str, u32)], order: &[&str]) -> String {
    let mut s = String::new();
    for (name, address, weight) in backends {
        s.push_str(&format!(
            "[[backend_service]]\nname = \"{name}\"\naddress = \"{address}\"\nport = 0\n\
             weight = {weight}\n\n"
        ));
    }
    let list = order
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ");
    s.push_str(&format!(
        "[[vservice]]\nname = \"web\"\nkind = \"tcp-l4\"\naddress = \"10.99.0.1\"\nport = 80\n\
         backends = [{list}]\n\n\
         [[vservice]]\nname = \"dns\"\nkind = \"udp-l4\"\naddress = \"10.99.0.2\"\nport = 53\n\
         forwarding = \"dsr\"\nbackends = [{list}]\n"
    ));
    s
}

fn entries(t: &Value) -> Vec<Value> {
    t.as_array().expect("a list of tables").clone()
}

/// The backend slots data path `which` wrote for VIP 10.99.0.1 (address -> slot), from the
/// state file it keeps beside its pins.
fn slots_of(f: &Fixture, which: usize) -> Vec<(String, u64)> {
    let flat = f.pins[which].trim_matches('/').replace('/', "-");
    let state = std::fs::read(format!("/run/lb/{flat}.json")).expect("state file");
    let v: Value = serde_json::from_slice(&state).expect("state JSON");
    let vip = v["vips"]
        .as_array()
        .and_then(|vips| vips.iter().find(|x| x["address"] == "10.99.0.1"))
        .expect("web's VIP");
    let mut slots: Vec<(String, u64)> = vip["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .map(|b| {
            (
                b["address"].as_str().unwrap_or("").to_string(),
                b["slot"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    slots.sort();
    slots
}

#[test]
fn s_cl4_same_backends_give_the_same_table_whatever_the_history() {
    let f = Fixture::new();
    let final_backends = [
        ("b1", "10.1.0.11", 2),
        ("b2", "10.1.0.12", 1),
        ("b3", "10.1.0.13", 1),
        ("b4", "10.1.0.14", 3),
        ("b5", "10.1.0.15", 1),
    ];
    // Balancer A: straight to the final configuration.
    f.load(0, &config(&final_backends, &["b1", "b2", "b3", "b4", "b5"]));

    // Balancer B: a longer road. First other backends too (they take slots), in another order.
    let extra = [
        ("x1", "10.1.0.21", 1),
        ("x2", "10.1.0.22", 1),
        ("b5", "10.1.0.15", 1),
        ("b3", "10.1.0.13", 1),
    ];
    f.load(1, &config(&extra, &["x1", "x2", "b5", "b3"]));
    // Then some of them removed, and the rest of the final ones added in reverse order.
    let mut middle: Vec<_> = final_backends.iter().rev().copied().collect();
    middle.push(("x2", "10.1.0.22", 1));
    f.load(1, &config(&middle, &["x2", "b5", "b4", "b3", "b2", "b1"]));
    // A fresh program (unloaded and loaded again: slots allocated anew) with one backend
    // missing, then the final set under other names and in another order, applied over the
    // pins (adoption, as a restarted daemon does).
    f.unload(1);
    f.load(1, &config(&middle[1..], &["x2", "b4", "b3", "b2", "b1"]));
    let renamed = [
        ("web-4", "10.1.0.14", 3),
        ("web-2", "10.1.0.12", 1),
        ("web-5", "10.1.0.15", 1),
        ("web-1", "10.1.0.11", 2),
        ("web-3", "10.1.0.13", 1),
    ];
    f.load(
        1,
        &config(&renamed, &["web-3", "web-1", "web-5", "web-2", "web-4"]),
    );

    for vservice in ["web", "dns"] {
        let (a, b) = (
            entries(&f.table(0, vservice)),
            entries(&f.table(1, vservice)),
        );
        assert_eq!(a.len(), 1, "{vservice}: one VIP");
        let (a, b) = (&a[0], &b[0]);
        assert_eq!(a["size"], b["size"], "{vservice}");
        let digest = a["digest"].as_str().expect("digest");
        assert_eq!(digest.len(), 16, "{vservice}: {a}");
        assert_eq!(
            a["digest_of_entries"], a["digest"],
            "{vservice}: A's kernel table"
        );
        assert_eq!(
            b["digest_of_entries"], b["digest"],
            "{vservice}: B's kernel table"
        );
        // Byte for byte: the entries as JSON text.
        let (ea, eb) = (a["entries"].to_string(), b["entries"].to_string());
        assert!(ea == eb, "{vservice}: the tables differ");
        assert_eq!(a["digest"], b["digest"], "{vservice}");
    }
    // The slot numbers behind the tables do differ (else the test proves less than it says).
    assert_ne!(
        slots_of(&f, 0),
        slots_of(&f, 1),
        "the histories gave other slots"
    );
    // `lb status` shows the same digests.
    let digests = |which| {
        let v: Value = serde_json::from_str(&f.status(which)).expect("status JSON");
        v["vips"]
            .as_array()
            .expect("vips")
            .iter()
            .map(|x| x["table_digest"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(digests(0), digests(1), "lb status shows the same digests");

    // Negative control: one weight changed on B gives another table and digest.
    let mut heavier = renamed;
    heavier[0].2 = 4;
    f.load(
        1,
        &config(&heavier, &["web-3", "web-1", "web-5", "web-2", "web-4"]),
    );
    let (a, b) = (entries(&f.table(0, "web")), entries(&f.table(1, "web")));
    assert_ne!(a[0]["digest"], b[0]["digest"]);
    assert_ne!(a[0]["entries"].to_string(), b[0]["entries"].to_string());
}

#[test]
fn lb_table_names_an_unknown_vservice() {
    let f = Fixture::new();
    f.load(0, &config(&[("b1", "10.1.0.11", 1)], &["b1"]));
    let out = f.lb(&["table", "nope", "--pin-dir", &f.pins[0]]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no Network vService named `nope`"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn lb_table_finds_the_pins_through_the_configuration_as_the_other_commands_do() {
    let f = Fixture::new();
    let cfg = config(
        &[("b1", "10.1.0.11", 1), ("b2", "10.1.0.12", 1)],
        &["b1", "b2"],
    );
    f.load(0, &cfg);
    // The same configuration naming its pins in `[xdp] pin_dir`: no --pin-dir needed.
    let path = f.dir.join("with-pins.toml");
    std::fs::write(
        &path,
        format!("[xdp]\npin_dir = \"{}\"\n\n{cfg}", f.pins[0]),
    )
    .expect("config written");
    let out = f.lb(&[
        "table",
        "web",
        "--json",
        "--config",
        path.to_str().expect("utf-8 path"),
    ]);
    assert!(
        out.status.success(),
        "lb table --config: {}",
        text(&out.stderr)
    );
    let by_config: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        by_config,
        f.table(0, "web"),
        "--config reads the same pins as --pin-dir"
    );
}
