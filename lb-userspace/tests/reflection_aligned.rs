//! S-RF2 across balancers: two `lb run` daemons with the same configuration, started seconds
//! apart, each with its own XDP data path, take a failed backend out of their Maglev tables
//! in the same instant (the removal ticks fall on the wall clock's multiples of
//! `network_remove_delay`), so the tables never differ for longer than the clocks do. The
//! removal still comes within the S-RF3 bound of the failure. Needs root and the XDP object
//! built by `cargo xtask build`.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// The namespace, its daemons, pins and temp dir; all removed on drop.
struct Lab {
    ns: String,
    dir: PathBuf,
    pins: [String; 2],
    daemons: Vec<Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
        for (pin, iface) in self.pins.iter().zip(["ra", "rb"]) {
            let _ = self.nsenter(
                env!("CARGO_BIN_EXE_lb"),
                &["unload", "--iface", iface, "--pin-dir", pin],
            );
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

impl Lab {
    fn new() -> Lab {
        let id = std::process::id();
        let ns = format!("lbalign{id}");
        ip(&["netns", "add", &ns]);
        let lab = Lab {
            dir: std::env::temp_dir().join(format!("lb-align-{id}")),
            pins: [
                format!("/sys/fs/bpf/lb-align-a-{id}"),
                format!("/sys/fs/bpf/lb-align-b-{id}"),
            ],
            ns,
            daemons: Vec::new(),
        };
        ip(&["-n", &lab.ns, "link", "set", "lo", "up"]);
        for addr in ["10.1.0.11/32", "10.1.0.12/32"] {
            ip(&["-n", &lab.ns, "addr", "add", addr, "dev", "lo"]);
        }
        for dev in ["ra", "rb"] {
            let peer = format!("{dev}p");
            ip(&[
                "-n", &lab.ns, "link", "add", dev, "type", "veth", "peer", "name", &peer,
            ]);
            ip(&["-n", &lab.ns, "link", "set", dev, "up"]);
            ip(&["-n", &lab.ns, "link", "set", &peer, "up"]);
        }
        std::fs::create_dir_all(&lab.dir).expect("temp dir");
        lab
    }

    /// Runs a command in the namespace (nsenter keeps the host's bpffs, so pins stay).
    fn nsenter(&self, bin: &str, args: &[&str]) -> std::process::Output {
        Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.ns))
            .arg(bin)
            .args(args)
            .env("LB_XDP_OBJECT", lb::network::object_path())
            .output()
            .expect("nsenter runs")
    }

    /// Starts daemon `which` (0 or 1) on its own veth, pins and API port.
    fn start(&mut self, which: usize) {
        let config = format!(
            "[xdp]\ninterfaces = [\"{iface}\"]\nattach_mode = \"skb\"\npin_dir = \"{pin}\"\n\n\
             [api]\nlisten = \"127.0.0.1:{port}\"\n\n\
             [[health_check]]\nname = \"tcp\"\ntype = \"tcp\"\n\n\
             [[backend_service]]\nname = \"b1\"\naddress = \"10.1.0.11\"\nport = 80\nhealth_check = \"tcp\"\n\n\
             [[backend_service]]\nname = \"b2\"\naddress = \"10.1.0.12\"\nport = 80\nhealth_check = \"tcp\"\n\n\
             [[vservice]]\nname = \"web\"\nkind = \"tcp-l4\"\naddress = \"10.99.0.1\"\nport = 80\n\
             forwarding = \"dsr\"\nbackends = [\"b1\", \"b2\"]\n",
            iface = ["ra", "rb"][which],
            pin = self.pins[which],
            port = api_port(which),
        );
        let path = self.dir.join(format!("{which}.toml"));
        std::fs::write(&path, config).expect("config written");
        let log = File::create(self.dir.join(format!("{which}.log"))).expect("log file");
        let child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.ns))
            .arg(env!("CARGO_BIN_EXE_lb"))
            .args(["run", "--config"])
            .arg(&path)
            .env("LB_XDP_OBJECT", lb::network::object_path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("lb run starts");
        self.daemons.push(child);
    }

    fn log(&self, which: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("{which}.log"))).unwrap_or_default()
    }
}

fn api_port(which: usize) -> u16 {
    19391 + which as u16
}

/// Runs `f` on a thread that has entered the namespace: the sockets it opens live there.
fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> thread::JoinHandle<T> {
    let path = format!("/run/netns/{ns}");
    thread::spawn(move || {
        let netns = File::open(&path).expect("namespace file");
        // SAFETY: setns on this thread only, with a namespace file we hold open.
        let rc = unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
}

/// A backend that accepts (and closes) connections until `stop`; then its port is closed.
fn backend(ns: &str, addr: SocketAddr, stop: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    in_ns(ns, move || {
        let l = TcpListener::bind(addr).expect("backend binds");
        l.set_nonblocking(true).expect("nonblocking");
        while !stop.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((c, _)) => drop(c),
                Err(_) => thread::sleep(Duration::from_millis(5)),
            }
        }
    })
}

/// The digest of `web`'s table that daemon `which` reports in /metrics, if it answered.
fn digest(port: u16) -> Option<String> {
    let mut s = TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    )
    .ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: lb\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let line = text
        .lines()
        .find(|l| l.starts_with("lb_xdp_maglev_table_info{") && l.contains("vservice=\"web\""))?;
    let at = line.find("digest=\"")? + "digest=\"".len();
    Some(line[at..].split('"').next()?.to_string())
}

/// Polls both daemons' digests every 10 ms until each differs from `from` (or `limit`
/// passes): the moment each changed, relative to `origin`.
fn changes(ns: &str, from: [String; 2], origin: Instant, limit: Duration) -> [Option<Duration>; 2] {
    in_ns(ns, move || {
        let mut seen = [None, None];
        while origin.elapsed() < limit && seen.iter().any(Option::is_none) {
            for which in 0..2 {
                if seen[which].is_none()
                    && let Some(d) = digest(api_port(which))
                    && d != from[which]
                {
                    seen[which] = Some(origin.elapsed());
                }
            }
            thread::sleep(Duration::from_millis(10));
        }
        seen
    })
    .join()
    .expect("poller")
}

#[test]
fn s_rf2_two_daemons_started_apart_remove_a_failed_backend_within_100_ms_of_each_other() {
    let mut lab = Lab::new();
    let stops = [
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    ];
    let backends: Vec<_> = ["10.1.0.11:80", "10.1.0.12:80"]
        .iter()
        .zip(&stops)
        .map(|(a, stop)| backend(&lab.ns, a.parse().expect("address"), stop.clone()))
        .collect();
    lab.start(0);
    // Started at a moment that is no multiple of the 9 s removal period away from the first.
    thread::sleep(Duration::from_millis(3300));
    lab.start(1);
    // Both serve both backends (Preparing -> OK takes RS x P = 3 s; the re-add tick 5 s):
    // the same digest on both, unchanged for longer than a re-add period.
    let ns = lab.ns.clone();
    let ready = in_ns(&ns, || {
        let until = Instant::now() + Duration::from_secs(40);
        let mut stable: Option<(String, Instant)> = None;
        while Instant::now() < until {
            let d = [digest(api_port(0)), digest(api_port(1))];
            match (&d, &stable) {
                ([Some(a), Some(b)], Some((s, since))) if a == b && a == s => {
                    if since.elapsed() > Duration::from_secs(6) {
                        return Some(a.clone());
                    }
                }
                ([Some(a), Some(b)], _) if a == b && !a.is_empty() => {
                    stable = Some((a.clone(), Instant::now()));
                }
                _ => stable = None,
            }
            thread::sleep(Duration::from_millis(100));
        }
        None
    })
    .join()
    .expect("poller");
    let both = ready.unwrap_or_else(|| {
        panic!(
            "the daemons never showed the same table of two backends\n--- a ---\n{}\n--- b ---\n{}",
            lab.log(0),
            lab.log(1)
        )
    });
    // b2's port closes: each daemon decides Error within RF x P (S-HC9), at moments of its
    // own, and removes it at the next removal tick.
    let origin = Instant::now();
    stops[1].store(true, Ordering::Relaxed);
    let seen = changes(&ns, [both.clone(), both], origin, Duration::from_secs(20));
    let [Some(a), Some(b)] = seen else {
        panic!(
            "a table did not change within 20 s: {seen:?}\n--- a ---\n{}\n--- b ---\n{}",
            lab.log(0),
            lab.log(1)
        );
    };
    let apart = a.abs_diff(b);
    assert!(
        apart <= Duration::from_millis(100),
        "the two daemons swapped their tables {apart:?} apart (at {a:?} and {b:?} after the \
         failure): the removal ticks are not aligned"
    );
    // S-RF3's end-to-end bound for a closed port: the decision (about RF x P = 2 s) plus at
    // most one removal period (9 s).
    assert!(
        a <= Duration::from_secs(12),
        "removed {a:?} after the failure, later than the decision plus one 9 s period"
    );
    stops[0].store(true, Ordering::Relaxed);
    for b in backends {
        let _ = b.join();
    }
}
