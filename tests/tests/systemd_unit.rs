//! The Debian package's unit under a REAL systemd (systemd 252 of Debian 12, booted with
//! systemd-nspawn): no connection refused and no request failed while the service is
//! started, reloaded and upgraded by the package, under load:
//! - the .deb (`LB_DEB`, as tests/package.rs) is installed in the container, and the unit
//!   started with an HTTP vService on 127.0.0.1:8080 inside (a backend this test serves in
//!   the container's network namespace) and the XDP program attached to a veth pair there;
//! - HTTP load from this process, also in the container's namespace, one connection per
//!   request, runs through `systemctl start`, `systemctl reload` (the hand-over: a new
//!   `lb run --upgrade` becomes the main process) and `dpkg -i` of the same .deb again (the
//!   maintainer scripts of an upgrade, whose postinst reloads): 0 failures, 0 refusals; the
//!   XDP program is the same (same id) before and after, and the main PID changes; a reload
//!   of a file with errors fails and the running process serves on;
//! - `systemctl restart` is a stop and a start, with systemd holding the listening sockets
//!   in between (its FD store): 0 failures, 0 refusals there too, the XDP program kept;
//! - the store follows the configuration: a vService added and then removed by in-place
//!   reloads (SIGHUP) has its port closed again, and `systemctl stop` closes them all.
//!
//! The Debian tree comes from debootstrap once and is cached in /var/cache/lb-tests
//! (`LB_TEST_TREE` names another place); each run boots an overlay of it, so the cache
//! stays clean. Runs as root; installs debootstrap and systemd-container when missing.
//! Everything made here (the container, the overlay, its namespace) goes when it ends,
//! failed or not.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The cached tree, and the file that says it is complete (its name carries the recipe's
/// version: a changed recipe builds a new tree).
const DEFAULT_TREE: &str = "/var/cache/lb-tests/bookworm-systemd";
const TREE_DONE: &str = ".lb-tests-tree-v1";
/// What the tree holds besides minbase: systemd as PID 1, `ip`, `ps`.
const TREE_PACKAGES: &str = "systemd,systemd-sysv,dbus,iproute2,procps";
/// The vService, the backend and the API inside the container.
const WEB: &str = "127.0.0.1:8080";
const BACKEND_PORT: u16 = 18080;
/// The vService that reloads add and remove.
const EXTRA: &str = "127.0.0.1:8081";
const API: &str = "127.0.0.1:9900";
/// Load bounds: each phase's requests stop at whichever comes first.
const PHASE_LIMIT: Duration = Duration::from_secs(60);
const PHASE_MAX_REQUESTS: u64 = 200_000;
const CLIENTS: usize = 4;

fn out(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"))
}

/// Runs `cmd`, asserts success, returns stdout + stderr.
fn ok(cmd: &mut Command) -> String {
    let o = out(cmd);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{cmd:?} failed ({}):\n{text}", o.status);
    text
}

/// Installs the host's tools when missing (apt only then).
fn ensure_host_tools() {
    let missing: Vec<&str> = [
        ("debootstrap", "debootstrap"),
        ("systemd-container", "systemd-nspawn"),
    ]
    .into_iter()
    .filter(|(_, bin)| {
        !out(Command::new("sh").args(["-c", &format!("command -v {bin}")]))
            .status
            .success()
    })
    .map(|(pkg, _)| pkg)
    .collect();
    if missing.is_empty() {
        return;
    }
    let install = out(Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends"])
        .args(&missing));
    if !install.status.success() {
        ok(Command::new("apt-get").arg("update"));
        ok(Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends"])
            .args(&missing));
    }
}

/// The first Debian mirror in the host's apt sources (a URL whose path ends in /debian, so
/// neither the security archive nor a third party's repository), else deb.debian.org.
fn mirror() -> String {
    let mut text = std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        for entry in dir.flatten() {
            text += &std::fs::read_to_string(entry.path()).unwrap_or_default();
        }
    }
    text.lines()
        .flat_map(|l| l.split_whitespace())
        .map(|w| w.trim_end_matches('/'))
        .find(|w| w.starts_with("http") && w.ends_with("/debian"))
        .map(str::to_owned)
        .unwrap_or_else(|| "http://deb.debian.org/debian".into())
}

/// The cached Debian 12 tree; built with debootstrap the first time (about a minute), under
/// a lock so that two test runs do not build it at once.
fn tree() -> PathBuf {
    let tree = PathBuf::from(std::env::var("LB_TEST_TREE").unwrap_or_else(|_| DEFAULT_TREE.into()));
    if tree.join(TREE_DONE).exists() {
        return tree;
    }
    let parent = tree.parent().expect("the tree has a parent directory");
    std::fs::create_dir_all(parent).expect("the cache directory");
    let lock = std::fs::File::create(parent.join(".lb-tests.lock")).expect("the cache's lock");
    // SAFETY: a descriptor this test owns; released when the file is closed.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    if tree.join(TREE_DONE).exists() {
        return tree;
    }
    let building = tree.with_extension("building");
    let _ = std::fs::remove_dir_all(&building);
    let started = Instant::now();
    ok(Command::new("debootstrap")
        .args([
            "--variant=minbase",
            &format!("--include={TREE_PACKAGES}"),
            "bookworm",
        ])
        .arg(&building)
        .arg(mirror()));
    let _ = std::fs::remove_dir_all(&tree);
    std::fs::rename(&building, &tree).expect("the tree into place");
    std::fs::write(tree.join(TREE_DONE), TREE_PACKAGES).expect("the tree's mark");
    println!("built the Debian tree in {:?}", started.elapsed());
    tree
}

/// A booted container on an overlay of the tree; powered off and removed when dropped.
struct Container {
    name: String,
    dir: PathBuf,
    root: PathBuf,
    nspawn: Option<Child>,
    pid1: u32,
}

impl Drop for Container {
    fn drop(&mut self) {
        if let Some(mut nspawn) = self.nspawn.take() {
            if self.pid1 != 0 {
                let _ = self.cmd("systemctl").args(["poweroff"]).output();
            }
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = nspawn.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if let Ok(None) = nspawn.try_wait() {
                let _ = nspawn.kill();
                let _ = nspawn.wait();
            }
        }
        let _ = Command::new("umount").arg(&self.root).output();
        if !is_mounted(&self.root) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        let _ = std::fs::remove_dir_all(format!("/run/systemd/nspawn/propagate/{}", self.name));
    }
}

fn is_mounted(path: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let path = path.to_string_lossy();
    mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(path.as_ref()))
}

impl Container {
    /// Boots `tree` (through an overlay) with what XDP needs inside: every capability,
    /// bpf() allowed, a private network (only `lo` until the test adds a veth pair).
    fn boot(tree: &Path) -> Container {
        let name = format!("lbtest{}", std::process::id());
        let dir = tree
            .parent()
            .expect("the tree has a parent")
            .join(format!("run-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        let root = dir.join("root");
        for d in ["upper", "work", "root"] {
            std::fs::create_dir_all(dir.join(d)).expect("overlay directories");
        }
        let mut container = Container {
            name,
            dir: dir.clone(),
            root: root.clone(),
            nspawn: None,
            pid1: 0,
        };
        ok(Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o"])
            .arg(format!(
                "lowerdir={},upperdir={},workdir={}",
                tree.display(),
                dir.join("upper").display(),
                dir.join("work").display()
            ))
            .arg(&root));
        let log = std::fs::File::create(dir.join("nspawn.log")).expect("nspawn log");
        let nspawn = Command::new("systemd-nspawn")
            .arg("-D")
            .arg(&root)
            .args(["-b", "--register=no", "--keep-unit", "-M", &container.name])
            .args([
                "--capability=all",
                "--private-network",
                "--system-call-filter=bpf",
            ])
            .arg("--bind=/sys/fs/bpf")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("systemd-nspawn starts");
        let nspawn_pid = nspawn.id();
        container.nspawn = Some(nspawn);
        let started = Instant::now();
        // nspawn's first child is short-lived; PID 1 of the container is a child named systemd.
        while container.pid1 == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the container did not start:\n{}",
                std::fs::read_to_string(dir.join("nspawn.log")).unwrap_or_default()
            );
            let ps = out(Command::new("ps")
                .args(["-o", "pid=,comm=", "--ppid"])
                .arg(nspawn_pid.to_string()));
            container.pid1 = String::from_utf8_lossy(&ps.stdout)
                .lines()
                .filter_map(|l| l.trim().split_once(char::is_whitespace))
                .find(|(_, comm)| comm.trim() == "systemd")
                .and_then(|(pid, _)| pid.trim().parse().ok())
                .unwrap_or(0);
            std::thread::sleep(Duration::from_millis(20));
        }
        loop {
            let state = out(container.cmd("systemctl").arg("is-system-running"));
            let state = String::from_utf8_lossy(&state.stdout).trim().to_string();
            if state == "running" || state == "degraded" {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "systemd in the container is {state:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        println!("container up in {:?}", started.elapsed());
        container
    }

    /// `program` run inside the container (its namespaces, the host's capabilities).
    fn cmd(&self, program: &str) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args(["-t", &self.pid1.to_string(), "-a", program]);
        cmd
    }

    /// `systemctl ARGS` inside; asserts success.
    fn systemctl(&self, args: &[&str]) -> String {
        ok(self.cmd("systemctl").args(args))
    }

    /// The unit's property `name`.
    fn property(&self, name: &str) -> String {
        self.systemctl(&["show", "--value", "-p", name, "lb.service"])
            .trim()
            .to_string()
    }

    /// The id of the XDP program on `iface` inside, if one is attached.
    fn xdp_prog(&self, iface: &str) -> Option<u64> {
        let text = ok(self
            .cmd("ip")
            .args(["-j", "-d", "link", "show", "dev", iface]));
        let links: serde_json::Value = serde_json::from_str(&text).expect("ip -j");
        links[0]["xdp"]["prog"]["id"]
            .as_u64()
            .or_else(|| links[0]["xdp"]["attached"][0]["prog"]["id"].as_u64())
    }

    /// The journal of the unit, for a failure's message.
    fn journal(&self) -> String {
        let o = out(self
            .cmd("journalctl")
            .args(["-u", "lb", "--no-pager", "-n", "80"]));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Enters the container's network namespace on the calling thread.
    fn enter_net(pid1: u32) {
        let ns =
            std::fs::File::open(format!("/proc/{pid1}/ns/net")).expect("the container's netns");
        // SAFETY: a valid namespace descriptor; this thread alone moves into it.
        let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
    }
}

/// A small HTTP/1.1 backend (keep-alive) on 127.0.0.1:BACKEND_PORT inside the container.
fn serve_backend(pid1: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        Container::enter_net(pid1);
        let listener = TcpListener::bind(("127.0.0.1", BACKEND_PORT)).expect("the backend binds");
        listener.set_nonblocking(true).expect("nonblocking");
        let _ = ready_tx.send(());
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((conn, _)) => {
                    std::thread::spawn(move || answer(conn));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    });
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the backend is up");
    handle
}

/// Answers each request on `conn` with 200 until the peer closes.
fn answer(mut conn: TcpStream) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(0) + 4;
        buf.drain(..end);
        let body = "ok\n";
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n{body}",
            body.len()
        );
        if conn.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// What the load saw.
#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
}

/// Load: `CLIENTS` threads in the container's namespace, one connection per GET, until
/// `stop` (or the phase's bounds).
struct Load {
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
    threads: Vec<std::thread::JoinHandle<Vec<String>>>,
}

impl Load {
    fn start(pid1: u32) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let web: SocketAddr = WEB.parse().expect("address");
        let threads = (0..CLIENTS)
            .map(|_| {
                let (stop, counts) = (stop.clone(), counts.clone());
                std::thread::spawn(move || {
                    Container::enter_net(pid1);
                    let started = Instant::now();
                    let mut errors = Vec::new();
                    while !stop.load(Ordering::Relaxed)
                        && started.elapsed() < PHASE_LIMIT
                        && counts.ok.load(Ordering::Relaxed) < PHASE_MAX_REQUESTS
                    {
                        match get(web) {
                            Ok(()) => counts.ok.fetch_add(1, Ordering::Relaxed),
                            Err(Failure::Refused(e)) => {
                                if errors.len() < 5 {
                                    errors.push(e);
                                }
                                counts.refused.fetch_add(1, Ordering::Relaxed)
                            }
                            Err(Failure::Other(e)) => {
                                if errors.len() < 5 {
                                    errors.push(e);
                                }
                                counts.failed.fetch_add(1, Ordering::Relaxed)
                            }
                        };
                    }
                    errors
                })
            })
            .collect();
        Load {
            stop,
            counts,
            threads,
        }
    }

    /// Stops the clients: (ok, refused, failed, a few of the errors).
    fn finish(self) -> (u64, u64, u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let errors = self
            .threads
            .into_iter()
            .flat_map(|t| t.join().unwrap_or_default())
            .collect();
        (
            self.counts.ok.load(Ordering::Relaxed),
            self.counts.refused.load(Ordering::Relaxed),
            self.counts.failed.load(Ordering::Relaxed),
            errors,
        )
    }
}

enum Failure {
    Refused(String),
    Other(String),
}

/// One GET on a new connection; a 200 with its body is success.
fn get(web: SocketAddr) -> Result<(), Failure> {
    let mut conn = TcpStream::connect_timeout(&web, Duration::from_secs(2)).map_err(|e| {
        if e.kind() == std::io::ErrorKind::ConnectionRefused {
            Failure::Refused(format!("connect: {e}"))
        } else {
            Failure::Other(format!("connect: {e}"))
        }
    })?;
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    conn.write_all(b"GET / HTTP/1.1\r\nHost: lb\r\nConnection: close\r\n\r\n")
        .map_err(|e| Failure::Other(format!("send: {e}")))?;
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer)
        .map_err(|e| Failure::Other(format!("read: {e}")))?;
    let text = String::from_utf8_lossy(&answer);
    if text.starts_with("HTTP/1.1 200") && text.ends_with("ok\n") {
        Ok(())
    } else {
        Err(Failure::Other(format!(
            "answer: {:?}",
            text.lines().next().unwrap_or_default()
        )))
    }
}

/// The configuration written to /etc/lb/lb.toml inside: the HTTP vService, the API, and
/// the XDP program on `lbv0` (generic mode) with a small connection table.
fn config() -> String {
    format!(
        r#"[xdp]
pin_dir = "/sys/fs/bpf/lb"
conn_table_size = 65536
interfaces = ["lbv0"]
attach_mode = "skb"

[reflection]
l7_delay = 0.0

[api]
listen = "{API}"

[[backend_service]]
name = "b1"
address = "127.0.0.1"
port = {BACKEND_PORT}

[[vservice]]
name = "web"
kind = "http"
address = "127.0.0.1"
port = 8080
backends = ["b1"]
"#
    )
}

/// A second HTTP vService, for the store's following of reloads.
fn extra_vservice() -> String {
    format!(
        r#"
[[vservice]]
name = "web2"
kind = "http"
address = "127.0.0.1"
port = {}
backends = ["b1"]
"#,
        EXTRA.rsplit(':').next().unwrap_or_default()
    )
}

/// From the container's namespace: Some(true) when a GET at `addr` succeeds, Some(false)
/// when the connection is refused, None otherwise (a timeout, an error answer).
fn answers(pid1: u32, addr: SocketAddr) -> Option<bool> {
    let asked = std::thread::spawn(move || {
        Container::enter_net(pid1);
        match get(addr) {
            Ok(()) => Some(true),
            Err(Failure::Refused(_)) => Some(false),
            Err(Failure::Other(_)) => None,
        }
    });
    asked.join().unwrap_or(None)
}

/// Waits (up to `limit`) until `check` holds.
fn wait_for(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Start, reload, the package's upgrade and restart under load refuse and fail nothing and
/// keep the XDP program; the kept sockets follow the configuration and go at a stop.
#[test]
fn reload_and_package_upgrade_under_systemd_refuse_nothing() {
    // SAFETY: no arguments; reads the process's effective user.
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test boots a container and installs a package in it: run it as root");
    }
    let deb = std::env::var("LB_DEB").unwrap_or_else(|_| {
        panic!(
            "LB_DEB is not set: `cargo xtask test` builds the package and sets it; by hand, \
             run `cargo xtask package` and set LB_DEB to the .deb it printed"
        )
    });
    assert!(Path::new(&deb).is_file(), "LB_DEB={deb} is not a file");
    let begun = Instant::now();
    ensure_host_tools();
    let tree = tree();
    let container = Container::boot(&tree);
    let pid1 = container.pid1;

    // Inside: a private bpffs (pins never reach the host's), a veth pair for XDP, the package.
    ok(container
        .cmd("mount")
        .args(["-t", "bpf", "bpf", "/sys/fs/bpf"]));
    ok(container.cmd("ip").args([
        "link", "add", "lbv0", "type", "veth", "peer", "name", "lbv1",
    ]));
    ok(container.cmd("ip").args(["link", "set", "lbv0", "up"]));
    ok(container.cmd("ip").args(["link", "set", "lbv1", "up"]));
    std::fs::copy(&deb, container.root.join("lb.deb")).expect("the .deb into the container");
    ok(container.cmd("dpkg").args(["-i", "/lb.deb"]));
    std::fs::write(container.root.join("etc/lb/lb.toml"), config()).expect("the config");
    let stop_backend = Arc::new(AtomicBool::new(false));
    let backend = serve_backend(pid1, stop_backend.clone());

    // Start: from the first answer on, under load.
    let t = Instant::now();
    container.systemctl(&["start", "lb"]);
    println!("systemctl start: {:?}", t.elapsed());
    // Type=notify: the vService answers once `start` returned (asked from a thread in the
    // container's namespace).
    let first = std::thread::spawn(move || {
        Container::enter_net(pid1);
        get(WEB.parse().expect("addr")).is_ok()
    });
    assert!(
        first.join().unwrap_or(false),
        "no answer right after start; journal:\n{}",
        container.journal()
    );
    let prog = container.xdp_prog("lbv0");
    assert!(
        prog.is_some(),
        "no XDP program on lbv0; journal:\n{}",
        container.journal()
    );
    let load = Load::start(pid1);
    std::thread::sleep(Duration::from_millis(500));

    // Reload: a hand-over to a new process, which becomes the main process.
    let first_pid = container.property("MainPID");
    let first_host_pid = host_pid(pid1, &first_pid);
    assert_ne!(
        first_host_pid, 0,
        "the main process {first_pid} is not found on the host"
    );
    let t = Instant::now();
    let reload = out(container.cmd("systemctl").args(["reload", "lb"]));
    let reload_took = t.elapsed();
    assert!(
        reload.status.success(),
        "systemctl reload failed: {}\njournal:\n{}",
        String::from_utf8_lossy(&reload.stderr),
        container.journal()
    );
    let second_pid = container.property("MainPID");
    println!("systemctl reload: {reload_took:?}, main PID {first_pid} -> {second_pid}");
    assert_ne!(
        first_pid, second_pid,
        "the reload did not change the main process"
    );
    assert_eq!(container.property("ActiveState"), "active");
    // The old process drains and exits; the unit stays active with the new one.
    wait_for(Duration::from_secs(40), "the old process exits", || {
        !Path::new(&format!("/proc/{first_host_pid}")).exists()
    });
    assert_eq!(
        container.property("ActiveState"),
        "active",
        "after the old process left"
    );
    assert_eq!(
        container.xdp_prog("lbv0"),
        prog,
        "the XDP program changed at the reload"
    );
    std::thread::sleep(Duration::from_millis(500));

    // The package's upgrade: the same .deb again runs prerm upgrade / postinst configure
    // with the installed version, and postinst reloads.
    let t = Instant::now();
    let upgrade = ok(container.cmd("dpkg").args(["-i", "/lb.deb"]));
    let upgrade_took = t.elapsed();
    let third_pid = container.property("MainPID");
    println!("dpkg -i (upgrade): {upgrade_took:?}, main PID {second_pid} -> {third_pid}");
    assert_ne!(
        second_pid,
        third_pid,
        "the package's upgrade did not hand over to a new process:\n{upgrade}\njournal:\n{}",
        container.journal()
    );
    assert_eq!(container.property("ActiveState"), "active");
    assert_eq!(
        container.xdp_prog("lbv0"),
        prog,
        "the XDP program changed at the upgrade"
    );
    std::thread::sleep(Duration::from_millis(500));

    // A file with errors: the reload fails, and the running process serves on.
    let config_path = container.root.join("etc/lb/lb.toml");
    std::fs::write(&config_path, "[api]\nlisten = 5\n").expect("break the config");
    let refused_reload = out(container.cmd("systemctl").args(["reload", "lb"]));
    assert!(
        !refused_reload.status.success(),
        "a reload of a broken file succeeded"
    );
    assert_eq!(
        container.property("MainPID"),
        third_pid,
        "a failed reload replaced the process"
    );
    assert_eq!(container.property("ActiveState"), "active");
    std::fs::write(&config_path, config()).expect("the config again");
    std::thread::sleep(Duration::from_millis(300));
    let (served, refused, failed, errors) = load.finish();
    println!("start -> reload -> upgrade: {served} requests, {refused} refused, {failed} failed");
    assert!(served > 100, "too few requests to mean anything: {served}");
    assert_eq!(
        (refused, failed),
        (0, 0),
        "connections refused or requests failed across reload and upgrade: {errors:?}\n\
         journal:\n{}",
        container.journal()
    );

    // Restart: a stop and a start; the sockets wait in systemd's FD store in between.
    let before_restart = container.property("MainPID");
    let load = Load::start(pid1);
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    container.systemctl(&["restart", "lb"]);
    let restart_took = t.elapsed();
    std::thread::sleep(Duration::from_millis(300));
    let (served, refused, failed, errors) = load.finish();
    println!(
        "systemctl restart: {restart_took:?}; {served} requests, {refused} refused, {failed} failed"
    );
    assert_eq!(container.property("ActiveState"), "active");
    assert_ne!(
        container.property("MainPID"),
        before_restart,
        "no new process"
    );
    assert!(served > 20, "too few requests to mean anything: {served}");
    assert_eq!(
        (refused, failed),
        (0, 0),
        "connections refused or requests failed across the restart: {errors:?}\njournal:\n{}",
        container.journal()
    );
    assert_eq!(
        container.xdp_prog("lbv0"),
        prog,
        "the XDP program changed at the restart"
    );
    let journal = container.journal();
    assert!(
        journal.contains("listening on the sockets systemd kept across the restart"),
        "the new process did not get the kept sockets; journal:\n{journal}"
    );

    // The store follows the configuration: a vService added by an in-place reload listens,
    // and once a reload removes it its port refuses again (no socket left in the store).
    let extra: SocketAddr = EXTRA.parse().expect("addr");
    let in_place = ["kill", "--kill-whom=main", "--signal=SIGHUP", "lb"];
    std::fs::write(&config_path, config() + &extra_vservice()).expect("add a vService");
    container.systemctl(&in_place);
    wait_for(
        Duration::from_secs(10),
        "the added vService answers",
        || answers(pid1, extra) == Some(true),
    );
    std::fs::write(&config_path, config()).expect("remove it");
    container.systemctl(&in_place);
    wait_for(
        Duration::from_secs(10),
        "the removed vService's port refuses",
        || answers(pid1, extra) == Some(false),
    );
    container.systemctl(&["stop", "lb"]);
    assert_eq!(
        answers(pid1, WEB.parse().expect("addr")),
        Some(false),
        "the vService's port still takes connections after systemctl stop"
    );
    stop_backend.store(true, Ordering::Relaxed);
    let _ = backend.join();
    drop(container);
    println!("the whole test: {:?}", begun.elapsed());
}

/// The host's PID of the container's process `pid` (the container has its own PID
/// namespace): the process in the PID namespace of the container's PID 1 whose NSpid ends
/// with it; 0 when there is none.
fn host_pid(pid1: u32, pid: &str) -> u32 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let ns = |p: u32| std::fs::read_link(format!("/proc/{p}/ns/pid")).ok();
    let container_ns = ns(pid1);
    for entry in entries.flatten() {
        let Some(host) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let status = std::fs::read_to_string(format!("/proc/{host}/status")).unwrap_or_default();
        let nspid = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_default();
        if nspid.len() > 1 && nspid.last() == Some(&pid) && ns(host) == container_ns {
            return host;
        }
    }
    0
}
