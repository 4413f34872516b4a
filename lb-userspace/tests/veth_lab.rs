//! A namespace lab set up as a newcomer would, with veths as `ip link add` makes them (TX
//! checksum offload on, GRO off): `lb load` says at start that frames through such a veth
//! will be corrupted or dropped, naming the peer, its namespace and the `ethtool` command,
//! and says nothing once the peer is set as docs/operations.md describes. Needs root and
//! the XDP object built by `cargo xtask build`.

use std::process::{Command, Output};

/// Two namespaces joined by one veth (`la` here, `lp` in the peer's), a pin dir; removed
/// on drop.
struct Lab {
    ns: String,
    peer_ns: String,
    pin: String,
    config: std::path::PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.lb(&["unload", "--iface", "la", "--pin-dir", &self.pin]);
        let _ = std::fs::remove_dir_all(&self.pin);
        let _ = std::fs::remove_file(&self.config);
        for ns in [&self.ns, &self.peer_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn ip(args: &[&str]) {
    let ok = Command::new("ip").args(args).status().expect("ip runs");
    assert!(ok.success(), "ip {args:?}");
}

impl Lab {
    fn new() -> Lab {
        let id = std::process::id();
        let lab = Lab {
            ns: format!("lbvetha{id}"),
            peer_ns: format!("lbvethb{id}"),
            pin: format!("/sys/fs/bpf/lb-veth-lab-{id}"),
            config: std::env::temp_dir().join(format!("lb-veth-lab-{id}.toml")),
        };
        ip(&["netns", "add", &lab.ns]);
        ip(&["netns", "add", &lab.peer_ns]);
        ip(&[
            "-n",
            &lab.ns,
            "link",
            "add",
            "la",
            "type",
            "veth",
            "peer",
            "name",
            "lp",
            "netns",
            &lab.peer_ns,
        ]);
        ip(&["-n", &lab.ns, "link", "set", "la", "up"]);
        ip(&["-n", &lab.peer_ns, "link", "set", "lp", "up"]);
        std::fs::write(
            &lab.config,
            "[[backend_service]]\nname = \"b1\"\naddress = \"10.1.0.11\"\nport = 80\n\n\
             [[vservice]]\nname = \"web\"\nkind = \"tcp-l4\"\naddress = \"10.99.0.1\"\nport = 80\n\
             forwarding = \"dsr\"\nbackends = [\"b1\"]\n",
        )
        .expect("config written");
        lab
    }

    fn lb(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.ns))
            .arg(env!("CARGO_BIN_EXE_lb"))
            .args(args)
            .env("LB_XDP_OBJECT", lb::network::object_path())
            .output()
            .expect("lb runs")
    }

    /// `lb load` on `la`; its log.
    fn load(&self) -> String {
        let out = self.lb(&[
            "load",
            "--config",
            self.config.to_str().expect("utf-8 path"),
            "--iface",
            "la",
            "--mode",
            "skb",
            "--pin-dir",
            &self.pin,
        ]);
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "lb load: {log}");
        log
    }
}

#[test]
fn lb_load_names_a_veth_whose_peer_will_drop_or_corrupt_forwarded_frames() {
    let lab = Lab::new();
    let log = lab.load();
    let peer_ns = format!("/run/netns/{}", lab.peer_ns);
    for (what, fix) in [("TX checksum offload on", "tx off"), ("GRO off", "gro on")] {
        let line = log
            .lines()
            .find(|l| l.contains("WARN") && l.contains(what))
            .unwrap_or_else(|| panic!("no warning about {what}:\n{log}"));
        assert!(
            line.contains("la") && line.contains("lp") && line.contains(&peer_ns),
            "the warning names the veth, its peer and the peer's namespace: {line}"
        );
        assert!(
            line.contains(&format!("nsenter --net={peer_ns} ethtool -K lp {fix}")),
            "the warning gives the command: {line}"
        );
    }

    // Set as the docs say: nothing to say.
    for setting in [["tx", "off"], ["gro", "on"]] {
        let out = Command::new("ip")
            .args(["netns", "exec", &lab.peer_ns, "ethtool", "-K", "lp"])
            .args(setting)
            .output()
            .expect("ethtool runs");
        assert!(out.status.success(), "ethtool -K lp {setting:?}");
    }
    let _ = lab.lb(&["unload", "--iface", "la", "--pin-dir", &lab.pin]);
    let log = lab.load();
    assert!(
        !log.contains("WARN"),
        "a veth set right still gets a warning:\n{log}"
    );
}
