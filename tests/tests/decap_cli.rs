//! S-TN3 end to end through the `lb decap` command line: the agent attached to a veth in a
//! network namespace this test creates and deletes, real IPIP packets sent from the peer's
//! namespace reaching a UDP socket bound to the VIP on the backend's `lo`, `--status` (text
//! and JSON), the pins `bpftool` sees, a second run that updates the maps in place (same
//! link), the errors an operator meets, `--detach` (pins gone, no XDP on the link), and
//! `--follow` logging each packet the agent drops.
//!
//! Needs root, `bpftool`, the `lb` binary (`LB_BIN`, else target/debug/lb) and the agent's
//! object (`LB_DECAP_OBJECT`, else the `cargo xtask build` output). Run:
//! `cargo test -p lb-tests --test decap_cli`.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use lb_tests::netns::cmd;
use lb_tests::netns::lbctl::{LB_TIMEOUT, ensure_bpffs, lb_binary};
use lb_tests::netns::ns::Netns;
use lb_tests::packet::{Ipv4, L4, Udp};

/// The backend's side of the link and the router's.
const BACKEND_IF: &str = "dcb0";
const ROUTER_IF: &str = "dcr0";
const BACKEND_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const VIP: Ipv4Addr = Ipv4Addr::new(198, 18, 77, 10);
const CLIENT: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 7);
const PORT: u16 = 7777;

/// The two namespaces and the pin directory; dropped (also on a failed assertion), the
/// agent is detached, its pins removed and the namespaces deleted.
struct Lab {
    backend: Netns,
    router: Netns,
    pins: PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.lb(&["decap", "--detach", "--iface", BACKEND_IF]);
        let _ = std::fs::remove_dir_all(&self.pins);
        cmd::quiet("ip", &["netns", "delete", self.backend.name()]);
        cmd::quiet("ip", &["netns", "delete", self.router.name()]);
    }
}

impl Lab {
    fn new() -> Lab {
        ensure_bpffs().expect("a bpf filesystem");
        // Tests run in parallel: each lab gets names of its own.
        static LABS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = LABS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("{}-{n}", std::process::id());
        let backend = Netns::create(&format!("lbdc-be-{id}")).expect("backend namespace");
        let router = Netns::create(&format!("lbdc-rt-{id}")).expect("router namespace");
        let lab = Lab {
            backend,
            router,
            pins: PathBuf::from(format!("/sys/fs/bpf/lb-decap-test-{id}")),
        };
        let b = &lab.backend;
        b.ip(&[
            "link",
            "add",
            BACKEND_IF,
            "type",
            "veth",
            "peer",
            "name",
            ROUTER_IF,
            "netns",
            lab.router.name(),
        ])
        .expect("the veth pair");
        b.ip(&["addr", "add", "10.77.0.2/24", "dev", BACKEND_IF])
            .expect("backend address");
        b.ip(&["link", "set", BACKEND_IF, "up"]).expect("link up");
        b.ip(&["addr", "add", "198.18.77.10/32", "dev", "lo"])
            .expect("the VIP on lo");
        let r = &lab.router;
        r.ip(&["addr", "add", "10.77.0.1/24", "dev", ROUTER_IF])
            .expect("router address");
        r.ip(&["link", "set", ROUTER_IF, "up"]).expect("link up");
        // The backend answers the client directly: its reply goes by the router.
        b.ip(&["route", "add", "default", "via", "10.77.0.1"])
            .expect("default route");
        lab
    }

    /// Runs `lb args... --pin-dir PINS` in the backend namespace (nsenter keeps the host's
    /// bpffs visible).
    fn lb(&self, args: &[&str]) -> Output {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", self.backend.path().display()))
            .arg(lb_binary())
            .args(args)
            .arg("--pin-dir")
            .arg(&self.pins);
        cmd::output_within(c, LB_TIMEOUT).expect("running lb")
    }

    /// `lb args...` must succeed; returns its stdout.
    fn lb_ok(&self, args: &[&str]) -> String {
        let out = self.lb(args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "lb {args:?} failed: {}{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }

    /// `lb args...` must fail naming `what`.
    fn lb_fails(&self, args: &[&str], what: &str) {
        let out = self.lb(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "lb {args:?} succeeded");
        assert!(
            err.contains(what),
            "lb {args:?}: {err:?} does not say {what:?}"
        );
    }

    fn status(&self) -> serde_json::Value {
        let text = self.lb_ok(&["decap", "--status", "--iface", BACKEND_IF, "--json"]);
        let all: serde_json::Value = serde_json::from_str(&text).expect("JSON status");
        all[0].clone()
    }

    fn link_id(&self) -> String {
        let pin = self.pins.join(BACKEND_IF).join("link");
        let out = cmd::run("bpftool", &["-j", "link", "show", "pinned", path(&pin)])
            .expect("bpftool link show");
        let json: serde_json::Value = serde_json::from_str(&out).expect("bpftool JSON");
        json["id"].to_string()
    }

    fn xdp_on_link(&self) -> bool {
        let out = self
            .backend
            .ip(&["-d", "link", "show", "dev", BACKEND_IF])
            .expect("ip link show");
        out.contains("xdp")
    }

    /// Sends one IPIP packet from the router's namespace (a raw socket of protocol 4: the
    /// kernel writes the outer header) whose inner packet is a client's datagram to the VIP,
    /// and returns what the UDP socket bound to the VIP in the backend received.
    fn tunnel_datagram(&self, payload: &[u8]) -> Option<(Vec<u8>, SocketAddr)> {
        let server = self
            .backend
            .run(|| UdpSocket::bind((VIP, PORT)))
            .expect("entering the backend")
            .expect("binding the VIP");
        server
            .set_read_timeout(Some(Duration::from_secs(2)))
            .expect("a timeout");
        let inner = Ipv4::new(
            CLIENT,
            VIP,
            L4::Udp(Udp {
                sport: 40000,
                dport: PORT,
                no_checksum: false,
                payload: payload.to_vec(),
            }),
        )
        .to_bytes();
        self.router
            .run(|| {
                use socket2::{Domain, Protocol, SockAddr, Socket, Type};
                let raw = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(4)))?;
                let to = SockAddr::from(SocketAddr::from((BACKEND_IP, 0)));
                raw.send_to(&inner, &to)
            })
            .expect("entering the router")
            .expect("sending IPIP");
        let mut buf = [0u8; 2048];
        let (n, from) = server.recv_from(&mut buf).ok()?;
        Some((buf[..n].to_vec(), from))
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

#[test]
fn s_tn3_lb_decap_attach_status_update_detach() {
    let lab = Lab::new();

    // Attach: the program, its link and maps are pinned and XDP is on the link.
    let out = lab.lb_ok(&["decap", "--iface", BACKEND_IF]);
    assert!(out.contains("attached to dcb0"), "{out}");
    assert!(lab.xdp_on_link(), "no XDP on {BACKEND_IF} after attaching");
    let dir = lab.pins.join(BACKEND_IF);
    let prog = cmd::run(
        "bpftool",
        &["prog", "show", "pinned", path(&dir.join("prog"))],
    )
    .expect("bpftool prog show");
    assert!(prog.contains("lb_decap"), "{prog}");
    for map in lb::agent::MAP_NAMES {
        cmd::run(
            "bpftool",
            &["map", "dump", "pinned", path(&dir.join("maps").join(map))],
        )
        .unwrap_or_else(|e| panic!("bpftool map dump {map}: {e:#}"));
    }
    let link = lab.link_id();

    // The status: this host's addresses (the VIP on lo included), no filters, no packet yet.
    let s = lab.status();
    let local = s["local"].to_string();
    assert!(
        local.contains("10.77.0.2") && local.contains("198.18.77.10"),
        "{s}"
    );
    assert_eq!(s["sources"], serde_json::json!([]), "{s}");
    assert_eq!(s["counters"]["decapsulated"], 0, "{s}");

    // A real IPIP packet reaches the socket on the VIP, from the client's address.
    let (got, from) = lab.tunnel_datagram(b"first").expect("the datagram arrives");
    assert_eq!(
        (got.as_slice(), from),
        (&b"first"[..], (CLIENT, 40000).into())
    );
    assert_eq!(lab.status()["counters"]["decapsulated"], 1);

    // Again with filters: the maps change in place, the link stays the same.
    let out = lab.lb_ok(&[
        "decap",
        "--iface",
        BACKEND_IF,
        "--source",
        "10.77.0.0/24",
        "--vip",
        "198.18.77.10",
    ]);
    assert!(out.contains("updated in place"), "{out}");
    assert_eq!(lab.link_id(), link, "the link was replaced");
    let s = lab.status();
    assert_eq!(s["sources"], serde_json::json!(["10.77.0.0/24"]), "{s}");
    assert_eq!(s["vips"], serde_json::json!(["198.18.77.10"]), "{s}");
    let (got, _) = lab
        .tunnel_datagram(b"second")
        .expect("the datagram arrives");
    assert_eq!(got, b"second");
    // Balancers elsewhere only: the router's packet is now a foreign source's, dropped.
    lab.lb_ok(&["decap", "--iface", BACKEND_IF, "--source", "192.0.2.0/24"]);
    assert!(
        lab.tunnel_datagram(b"third").is_none(),
        "a foreign source got through"
    );
    let s = lab.status();
    assert_eq!(s["counters"]["foreign_source"], 1, "{s}");
    assert_eq!(s["counters"]["decapsulated"], 2, "{s}");
    let text = lab.lb_ok(&["decap", "--status"]);
    assert!(
        text.contains("lb-decap on dcb0: attached") && text.contains("foreign_source"),
        "{text}"
    );

    // Errors name what is wrong.
    lab.lb_fails(
        &["decap", "--iface", "nosuch0"],
        "no such interface: nosuch0",
    );
    lab.lb_fails(
        &["decap", "--iface", BACKEND_IF, "--source", "10.77.0.5/24"],
        "did you mean 10.77.0.0/24",
    );
    let mut c = Command::new("nsenter");
    c.arg(format!("--net={}", lab.backend.path().display()))
        .arg(lb_binary())
        .args(["decap", "--iface", "lo", "--pin-dir"])
        .arg(&lab.pins)
        .env("LB_DECAP_OBJECT", "/nonexistent/lb-decap");
    let out = cmd::output_within(c, LB_TIMEOUT).expect("running lb");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("LB_DECAP_OBJECT"),
        "{err}"
    );
    let out = cmd::output_within(
        {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(lb_binary())
                .args(["decap", "--status"]);
            c
        },
        LB_TIMEOUT,
    )
    .expect("running lb as nobody");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("must run as root"),
        "{err}"
    );

    // Detach: pins gone, no XDP on the link.
    let out = lab.lb_ok(&["decap", "--detach", "--iface", BACKEND_IF]);
    assert!(out.contains("detached from dcb0"), "{out}");
    assert!(!dir.exists(), "{} is still there", dir.display());
    assert!(!lab.xdp_on_link(), "XDP still on {BACKEND_IF}");
    lab.lb_fails(
        &["decap", "--detach", "--iface", BACKEND_IF],
        "not attached to dcb0",
    );
}

/// S-TN3: `lb decap --follow` stays in the foreground and logs each tunnel packet the agent
/// drops, with its outer source and why; SIGTERM ends it and leaves the agent attached.
#[test]
fn s_tn3_lb_decap_follow_logs_each_dropped_packet() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::mpsc;
    use std::time::Instant;

    let lab = Lab::new();
    let mut c = Command::new("nsenter");
    c.arg(format!("--net={}", lab.backend.path().display()))
        .arg(lb_binary())
        .args(["decap", "--iface", BACKEND_IF, "--source", "192.0.2.0/24"])
        .arg("--follow")
        .arg("--pin-dir")
        .arg(&lab.pins)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut follower = c.spawn().expect("starting lb decap --follow");
    let (lines, rx) = mpsc::channel::<String>();
    let stdout = follower.stdout.take().expect("stdout");
    let stderr = follower.stderr.take().expect("stderr");
    for stream in [
        Box::new(stdout) as Box<dyn std::io::Read + Send>,
        Box::new(stderr),
    ] {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
    }
    let mut seen = Vec::new();
    let mut wait_for = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
                let found = line.contains(what);
                seen.push(line);
                if found {
                    return;
                }
            }
        }
        let _ = follower.kill();
        panic!("no line saying {what:?} in 10 s; seen: {seen:#?}");
    };
    wait_for("following the agent on dcb0");

    // The router is no balancer: its IPIP packet is dropped, and the drop is logged.
    assert!(
        lab.tunnel_datagram(b"dropped").is_none(),
        "a foreign source got through"
    );
    wait_for("tunnel packet from 10.77.0.1 dropped: source outside --source");

    // SIGTERM ends the follower, not the agent.
    let pid = follower.id().to_string();
    cmd::run("kill", &["-TERM", &pid]).expect("kill -TERM");
    let deadline = Instant::now() + LB_TIMEOUT;
    let status = loop {
        if let Some(status) = follower.try_wait().expect("waiting for lb") {
            break status;
        }
        assert!(Instant::now() < deadline, "lb decap --follow did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "lb decap --follow exited with {status}");
    assert!(lab.xdp_on_link(), "the agent left {BACKEND_IF}");
    assert_eq!(lab.status()["counters"]["foreign_source"], 1);
}

/// S-TN3 where XDP cannot attach: `lb decap --mode tc` hooks the same checks into tc
/// ingress; a real IPIP packet reaches the VIP's socket, `--status` names the hook, XDP
/// stays free for another program, and `--detach` removes it.
#[test]
fn s_tn3_lb_decap_tc_mode_decapsulates_at_tc_ingress() {
    let lab = Lab::new();
    let out = lab.lb_ok(&["decap", "--iface", BACKEND_IF, "--mode", "tc"]);
    assert!(out.contains("attached to dcb0 (tc mode)"), "{out}");
    assert!(!lab.xdp_on_link(), "--mode tc attached XDP");
    let (got, from) = lab.tunnel_datagram(b"by tc").expect("the datagram arrives");
    assert_eq!(
        (got.as_slice(), from),
        (&b"by tc"[..], (CLIENT, 40000).into())
    );
    let s = lab.status();
    assert_eq!(s["hook"], "tc", "{s}");
    assert_eq!(s["counters"]["decapsulated"], 1, "{s}");
    let text = lab.lb_ok(&["decap", "--status", "--iface", BACKEND_IF]);
    assert!(text.contains("attached (tc ingress)"), "{text}");
    // A second run updates the maps in place, whatever mode it names.
    let out = lab.lb_ok(&["decap", "--iface", BACKEND_IF, "--vip", "198.18.77.10"]);
    assert!(out.contains("updated in place"), "{out}");
    let out = lab.lb_ok(&["decap", "--detach", "--iface", BACKEND_IF]);
    assert!(out.contains("detached from dcb0"), "{out}");
    assert!(
        lab.tunnel_datagram(b"after").is_none(),
        "a tunnel packet was decapsulated after --detach"
    );
}
