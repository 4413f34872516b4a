//! Where `lb load` may pin: a bpf filesystem that outlives the process. Under
//! `ip netns exec` (which remounts /sys in a mount namespace of its own) the pins would
//! vanish with `lb`, and the program with them, so `lb` refuses and says what works.
//! Needs root and the XDP object built by `cargo xtask build`.
//!
//! No rule of docs/behaviour.md covers where pins live: refusing is better than a data
//! path that silently disappears when `lb` exits.

use std::process::Command;

struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ip(args: &[&str]) {
    let ok = Command::new("ip").args(args).status().expect("ip runs");
    assert!(ok.success(), "ip {args:?}");
}

#[test]
fn lb_load_under_ip_netns_exec_refuses_and_names_nsenter() {
    let name = format!("lbpins{}", std::process::id());
    ip(&["netns", "add", &name]);
    let ns = Netns(name);
    ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
    let dir = std::env::temp_dir().join(format!("lb-pins-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("lb.toml");
    std::fs::write(
        &config,
        "[[backend_service]]\nname = \"b\"\naddress = \"10.9.0.2\"\nport = 80\n\n\
         [[vservice]]\nname = \"v\"\nkind = \"tcp-l4\"\naddress = \"10.9.9.9\"\nport = 80\n\
         backends = [\"b\"]\n",
    )
    .expect("config written");
    let pin_dir = format!("/sys/fs/bpf/lb-pins-test-{}", std::process::id());
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, env!("CARGO_BIN_EXE_lb"), "load"])
        .args(["--config", config.to_str().expect("utf-8 path")])
        .args(["--iface", "lo", "--mode", "skb", "--pin-dir", &pin_dir])
        .env("LB_XDP_OBJECT", lb::network::object_path())
        .output()
        .expect("lb runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success(), "lb load must fail: {stderr}");
    assert!(
        stderr.contains("nsenter --net=/run/netns/NS") && stderr.contains("ip netns exec"),
        "{stderr}"
    );
    // Nothing was pinned on the host's bpffs either.
    assert!(!std::path::Path::new(&pin_dir).exists());
}
