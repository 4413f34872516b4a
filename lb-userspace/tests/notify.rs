//! Running under systemd (`Type=notify`, the packaged unit): a REAL `lb run` (no XDP; an HTTP vService
//! on 127.0.0.1) started with NOTIFY_SOCKET set to a datagram socket this test binds:
//! - READY=1 is its first message, and at that moment the API and the vService answer;
//! - SIGHUP sends RELOADING=1 (with MONOTONIC_USEC) then READY=1, and a refused reload
//!   says so in STATUS= while the daemon serves on;
//! - SIGTERM sends STOPPING=1 and the daemon exits 0;
//! - a NOTIFY_SOCKET nobody listens on changes nothing but a warning;
//! - an `lb run --upgrade` (what the unit's ExecReload= starts) tells MAINPID= with its own
//!   PID before the old process goes, and the old one sends no STOPPING=1 (which would stop
//!   the unit);
//! - a SIGHUP that comes while `lb run` starts is held and becomes a reload once ready;
//! - the runtime files in /run/lb do not pile up over runs of distinct configurations.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixDatagram};

mod ports;
mod servers;
use ports::free_port;
use servers::named_server;

/// A directory for the config, the log and the socket; removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("lb-notify-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        // The health decisions the daemon saved at exit, named after its config path.
        let flat = self
            .0
            .join("lb.toml")
            .to_string_lossy()
            .trim_matches('/')
            .replace('/', "-");
        for suffix in ["states.json", "owner", "handover"] {
            let _ = std::fs::remove_file(format!("/run/lb/{flat}.{suffix}"));
        }
    }
}

/// The daemon; stopped when dropped (SIGTERM, so it removes its hand-over socket, then
/// SIGKILL after 5 s). A test that passed has already seen it exit.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.0.try_wait() {
            return;
        }
        self.signal(libc::SIGTERM);
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Daemon {
    fn signal(&self, sig: i32) {
        // SAFETY: signalling a child this test spawned.
        unsafe {
            libc::kill(self.0.id() as i32, sig);
        }
    }
}

/// Writes a config with the API on `api` and an HTTP vService `web` on `web` over one
/// unchecked backend on `backend_port`.
fn write_config(path: &Path, api: SocketAddr, web: SocketAddr, backend_port: u16) {
    let text = format!(
        "[api]\nlisten = \"{api}\"\n[reflection]\nl7_delay = 0.0\n\
         [[backend_service]]\nname = \"b1\"\naddress = \"127.0.0.1\"\nport = {backend_port}\n\
         [[vservice]]\nname = \"web\"\nkind = \"http\"\naddress = \"{}\"\nport = {}\n\
         backends = [\"b1\"]\n",
        web.ip(),
        web.port()
    );
    std::fs::write(path, text).expect("write config");
}

/// `lb run` on `config` with NOTIFY_SOCKET = `socket`, logging to `log`.
fn lb_run(config: &Path, socket: &Path, log: &Path) -> Daemon {
    lb_run_with(config, socket, log, &[])
}

/// [`lb_run`] with more arguments (`--upgrade`).
fn lb_run_with(config: &Path, socket: &Path, log: &Path, more: &[&str]) -> Daemon {
    let bin = std::env::var("LB_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_lb").to_owned());
    let log = std::fs::File::create(log).expect("log file");
    let child = Command::new(bin)
        .args(["run", "--config"])
        .arg(config)
        .args(more)
        .env("NOTIFY_SOCKET", socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("lb run starts");
    Daemon(child)
}

/// The next datagram that is not an FD store message (`FDSTORE=1`, `FDSTOREREMOVE=1`: the
/// sockets filed for a restart, which come around starts and reloads), within `limit`.
async fn next_message(socket: &UnixDatagram, limit: Duration, log: &Path) -> String {
    loop {
        let message = next_any(socket, limit, log).await;
        if !message.starts_with("FDSTORE") {
            return message;
        }
    }
}

/// The next datagram, within `limit`.
async fn next_any(socket: &UnixDatagram, limit: Duration, log: &Path) -> String {
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(limit, socket.recv(&mut buf)).await {
        Ok(Ok(n)) => String::from_utf8_lossy(&buf[..n]).into_owned(),
        Ok(Err(e)) => panic!("receiving a notification: {e}"),
        Err(_) => panic!(
            "no notification within {limit:?}; the daemon's log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        ),
    }
}

/// One GET on a new connection that closes after the answer: the answer's status line.
async fn get(addr: SocketAddr, path: &str) -> String {
    let mut conn = match TcpStream::connect(addr).await {
        Ok(conn) => conn,
        Err(e) => return format!("connect: {e}"),
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: lb\r\nConnection: close\r\n\r\n");
    if let Err(e) = conn.write_all(request.as_bytes()).await {
        return format!("send: {e}");
    }
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

fn lines(message: &str) -> Vec<&str> {
    message.lines().collect()
}

/// READY=1 only once the API and the listeners answer, and their sockets are filed in the FD
/// store (named by role and address); RELOADING=1/READY=1
/// around SIGHUP (with the refusal in STATUS= when the file is bad); STOPPING=1 at SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lb_run_tells_systemd_ready_reloading_and_stopping() {
    let dir = Dir::new("ready");
    let (backend_port, _backend) = named_server("b1").await;
    let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = dir.0.join("lb.toml");
    write_config(&config, api, web, backend_port);
    let socket_path = dir.0.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind the notify socket");
    let log = dir.0.join("lb.log");
    let mut daemon = lb_run(&config, &socket_path, &log);

    // Before READY=1, only the listening sockets filed for a restart (systemd's FD store).
    let mut filed = Vec::new();
    let first = loop {
        let message = next_any(&socket, Duration::from_secs(30), &log).await;
        match message.strip_prefix("FDSTORE=1\nFDNAME=") {
            Some(name) => filed.push(name.trim().to_owned()),
            None => break message,
        }
    };
    assert!(
        lines(&first).contains(&"READY=1"),
        "the first notification is not READY=1: {first:?}"
    );
    filed.sort();
    let named =
        |role: &str, addr: SocketAddr| format!("{role}@{}", addr.to_string().replace(':', "_"));
    assert_eq!(
        filed,
        [named("api", api), named("l7", web)],
        "the sockets filed before READY=1"
    );
    // At this moment, without waiting: the API and the vService's listener answer.
    let status = get(api, "/api/v1/status").await;
    assert!(
        status.starts_with("HTTP/1.1 200"),
        "the API at READY=1: {status}"
    );
    let served = get(web, "/").await;
    assert!(
        served.starts_with("HTTP/1.1 200"),
        "the vService at READY=1: {served}"
    );

    daemon.signal(libc::SIGHUP);
    let reloading = next_message(&socket, Duration::from_secs(10), &log).await;
    assert!(lines(&reloading).contains(&"RELOADING=1"), "{reloading:?}");
    assert!(
        reloading.contains("MONOTONIC_USEC="),
        "RELOADING=1 without MONOTONIC_USEC: {reloading:?}"
    );
    let ready = next_message(&socket, Duration::from_secs(10), &log).await;
    assert!(lines(&ready).contains(&"READY=1"), "{ready:?}");
    assert!(lines(&ready).contains(&"STATUS=serving"), "{ready:?}");

    std::fs::write(&config, "[api]\nlisten = 5\n").expect("break the config");
    daemon.signal(libc::SIGHUP);
    let reloading = next_message(&socket, Duration::from_secs(10), &log).await;
    assert!(lines(&reloading).contains(&"RELOADING=1"), "{reloading:?}");
    let refused = next_message(&socket, Duration::from_secs(10), &log).await;
    assert!(lines(&refused).contains(&"READY=1"), "{refused:?}");
    assert!(
        refused.contains("STATUS=serving the previous configuration; the reload failed"),
        "{refused:?}"
    );
    let status = get(api, "/api/v1/status").await;
    assert!(
        status.starts_with("HTTP/1.1 200"),
        "after a refused reload: {status}"
    );

    daemon.signal(libc::SIGTERM);
    let stopping = next_message(&socket, Duration::from_secs(10), &log).await;
    assert!(lines(&stopping).contains(&"STOPPING=1"), "{stopping:?}");
    let exit = tokio::task::spawn_blocking(move || {
        let status = daemon.0.wait();
        (daemon, status)
    });
    let (_daemon, status) = tokio::time::timeout(Duration::from_secs(15), exit)
        .await
        .expect("lb run exits after SIGTERM")
        .expect("join");
    assert!(status.expect("wait").success(), "lb run's exit status");
}

/// A NOTIFY_SOCKET that nobody listens on (a daemon started by hand from a
/// shell that had one) costs a warning, not the daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_notify_socket_is_only_a_warning() {
    let dir = Dir::new("dead");
    let (backend_port, _backend) = named_server("b1").await;
    let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = dir.0.join("lb.toml");
    write_config(&config, api, web, backend_port);
    let log = dir.0.join("lb.log");
    let _daemon = lb_run(&config, &dir.0.join("nobody.sock"), &log);
    let started = std::time::Instant::now();
    let mut status = String::new();
    while started.elapsed() < Duration::from_secs(30) {
        status = get(api, "/api/v1/status").await;
        if status.starts_with("HTTP/1.1 200") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(status.starts_with("HTTP/1.1 200"), "the API: {status}");
    assert!(
        get(web, "/").await.starts_with("HTTP/1.1 200"),
        "the vService"
    );
    // The warning is written right after the listeners are up, before the loop.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains("cannot tell systemd the daemon's state"),
        "no warning in the log:\n{text}"
    );
}

/// Waits (up to 15 s) for `daemon` to exit; its exit status.
async fn exited(daemon: Daemon) -> std::process::ExitStatus {
    let exit = tokio::task::spawn_blocking(move || {
        let mut daemon = daemon;
        let status = daemon.0.wait();
        (daemon, status)
    });
    let (_daemon, status) = tokio::time::timeout(Duration::from_secs(15), exit)
        .await
        .expect("lb run exits")
        .expect("join");
    status.expect("wait")
}

/// The ExecReload= of the unit starts `lb run --upgrade` beside the main process: that one
/// tells systemd MAINPID=<its PID> (NotifyAccess=all) before the old process is told to
/// go, and the old one, handing over, sends no STOPPING=1: from any process of the unit,
/// STOPPING=1 would make systemd stop the service, new process included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_tells_systemd_the_new_main_pid_and_the_old_one_does_not_stop_the_unit() {
    let dir = Dir::new("mainpid");
    let (backend_port, _backend) = named_server("b1").await;
    let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = dir.0.join("lb.toml");
    write_config(&config, api, web, backend_port);
    let socket_path = dir.0.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind the notify socket");
    let old_log = dir.0.join("old.log");
    let old = lb_run_with(&config, &socket_path, &old_log, &["--drain-timeout", "1"]);
    let first = next_message(&socket, Duration::from_secs(30), &old_log).await;
    assert!(lines(&first).contains(&"READY=1"), "{first:?}");

    let new_log = dir.0.join("new.log");
    let new = lb_run_with(&config, &socket_path, &new_log, &["--upgrade"]);
    let new_pid = new.0.id();
    let took = next_message(&socket, Duration::from_secs(30), &new_log).await;
    assert!(
        lines(&took).contains(&format!("MAINPID={new_pid}").as_str()),
        "the new process's first message does not name it the main process: {took:?}"
    );
    assert!(lines(&took).contains(&"READY=1"), "{took:?}");
    // The barrier: its descriptor is dropped with the datagram, which answers it.
    let barrier = next_message(&socket, Duration::from_secs(10), &new_log).await;
    assert_eq!(lines(&barrier), ["BARRIER=1"], "{barrier:?}");
    let status = exited(old).await;
    assert!(status.success(), "the old lb run's exit status: {status}");
    // Whatever came meanwhile (the new one's READY=1 once running): no STOPPING=1.
    let mut buf = vec![0u8; 4096];
    while let Ok(Ok(n)) =
        tokio::time::timeout(Duration::from_millis(300), socket.recv(&mut buf)).await
    {
        let message = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(
            !lines(&message).contains(&"STOPPING=1"),
            "a STOPPING=1 after the hand-over: {message:?}\nthe old one's log:\n{}",
            std::fs::read_to_string(&old_log).unwrap_or_default()
        );
    }
    assert!(
        get(web, "/").await.starts_with("HTTP/1.1 200"),
        "the new process serves"
    );
    new.signal(libc::SIGTERM);
    let stopping = next_message(&socket, Duration::from_secs(10), &new_log).await;
    assert!(lines(&stopping).contains(&"STOPPING=1"), "{stopping:?}");
    assert!(exited(new).await.success());
}

/// A SIGHUP while `lb run` starts (before it is ready) used to end it with the default
/// action. Sent from its first log line on, every millisecond for 200 ms: the daemon lives,
/// becomes ready, and reloads once for what came while it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sighup_while_starting_is_held_and_becomes_a_reload() {
    let dir = Dir::new("early-hup");
    let (backend_port, _backend) = named_server("b1").await;
    let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = dir.0.join("lb.toml");
    write_config(&config, api, web, backend_port);
    let socket_path = dir.0.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind the notify socket");
    let log = dir.0.join("lb.log");
    let mut daemon = lb_run(&config, &socket_path, &log);
    // The first line is written by `lb run` itself (past the program's own start-up, which
    // no handler can cover), before the daemon is ready.
    let started = std::time::Instant::now();
    while std::fs::metadata(&log).map_or(0, |m| m.len()) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "lb run wrote nothing"
        );
        assert!(matches!(daemon.0.try_wait(), Ok(None)), "lb run exited");
        std::thread::sleep(Duration::from_micros(200));
    }
    let mut sent = 0;
    let hups = std::time::Instant::now();
    while hups.elapsed() < Duration::from_millis(200) {
        daemon.signal(libc::SIGHUP);
        sent += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(50));
    if let Ok(Some(status)) = daemon.0.try_wait() {
        panic!(
            "lb run did not survive {sent} SIGHUPs while starting ({status}); its log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    let ready = next_message(&socket, Duration::from_secs(30), &log).await;
    assert!(lines(&ready).contains(&"READY=1"), "{ready:?}");
    assert!(
        get(api, "/api/v1/status").await.starts_with("HTTP/1.1 200"),
        "the API"
    );
    // At least one reload after READY=1: the held SIGHUP (the later ones of the loop, when
    // it outlasted the start, are ordinary reloads).
    let reloading = next_message(&socket, Duration::from_secs(10), &log).await;
    assert!(lines(&reloading).contains(&"RELOADING=1"), "{reloading:?}");
    println!("{sent} SIGHUPs sent while starting");
    // The rest is read away: a full datagram queue (10 by default) would block the daemon's
    // next notification, as it would with a systemd that stopped reading.
    let drain = tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while socket.recv(&mut buf).await.is_ok() {}
    });
    daemon.signal(libc::SIGTERM);
    let status = exited(daemon).await;
    drain.abort();
    assert!(status.success(), "exit status {status}");
}

/// The /run/lb file names of the configuration `config`.
fn run_files_of(config: &Path) -> Vec<String> {
    let flat = config.to_string_lossy().trim_matches('/').replace('/', "-");
    let mut found: Vec<String> = std::fs::read_dir("/run/lb")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|name| name.starts_with(&format!("{flat}.")))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// Each `lb run` used to leave its saved states (and more) in /run/lb for good: one set per
/// configuration path ever run. Five runs of distinct configurations, each stopped cleanly
/// and its directory removed (as a test does), then one killed: at a clean exit the
/// hand-over socket goes and the saved states stay (a restart within the window restores
/// them); the next start of any `lb run` prunes the files of a configuration that is gone,
/// and the hand-over socket of a killed one, so the files never grow with the runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_files_do_not_pile_up() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: /run/lb needs root");
        return;
    }
    let (backend_port, _backend) = named_server("b1").await;
    // Kept to the end: dropping one removes its /run/lb files, which is what is tested.
    let mut dirs = Vec::new();
    for run in 0..5 {
        let dir = Dir::new(&format!("files-{run}"));
        let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let config = dir.0.join("lb.toml");
        write_config(&config, api, web, backend_port);
        let socket_path = dir.0.join("notify.sock");
        let socket = UnixDatagram::bind(&socket_path).expect("bind the notify socket");
        let log = dir.0.join("lb.log");
        let daemon = lb_run(&config, &socket_path, &log);
        let ready = next_message(&socket, Duration::from_secs(30), &log).await;
        assert!(lines(&ready).contains(&"READY=1"), "{ready:?}");
        let running = run_files_of(&config);
        assert!(
            running.iter().any(|f| f.ends_with(".handover")),
            "run {run}: no hand-over socket while running: {running:?}"
        );
        daemon.signal(libc::SIGTERM);
        assert!(exited(daemon).await.success());
        let after = run_files_of(&config);
        assert!(
            !after.iter().any(|f| f.ends_with(".handover")),
            "run {run}: the hand-over socket outlived a clean exit: {after:?}"
        );
        assert!(
            after.iter().any(|f| f.ends_with(".states.json")),
            "run {run}: the saved states, which a restart restores, are gone: {after:?}"
        );
        // The configuration goes now: the next start prunes its files.
        std::fs::remove_dir_all(&dir.0).expect("remove the config's directory");
        dirs.push(dir);
    }
    // One more start prunes the last one's files; then it is killed (no clean exit).
    let dir = Dir::new("files-killed");
    let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = dir.0.join("lb.toml");
    write_config(&config, api, web, backend_port);
    let socket_path = dir.0.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind the notify socket");
    let log = dir.0.join("lb.log");
    let mut killed = lb_run(&config, &socket_path, &log);
    let ready = next_message(&socket, Duration::from_secs(30), &log).await;
    assert!(lines(&ready).contains(&"READY=1"), "{ready:?}");
    // Its states saved once (each second), as a crash would find them.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for run in 0..5 {
        let gone = std::env::temp_dir()
            .join(format!("lb-notify-files-{run}-{}", std::process::id()))
            .join("lb.toml");
        let left = run_files_of(&gone);
        assert!(
            left.is_empty(),
            "run {run}'s configuration is gone but its files stay: {left:?}"
        );
    }
    let _ = killed.0.kill();
    let _ = killed.0.wait();
    let left_by_kill = run_files_of(&config);
    assert!(
        left_by_kill.iter().any(|f| f.ends_with(".handover")),
        "{left_by_kill:?}"
    );
    // Another start (the first run's configuration again, written anew) prunes the killed
    // one's hand-over socket: nothing listens on it. Its states stay: fresh, and its
    // configuration is still there for a restart.
    let again = Dir::new("files-again");
    let config_again = again.0.join("lb.toml");
    let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    write_config(&config_again, api, web, backend_port);
    let socket_path = again.0.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind the notify socket");
    let log = again.0.join("lb.log");
    let daemon = lb_run(&config_again, &socket_path, &log);
    let ready = next_message(&socket, Duration::from_secs(30), &log).await;
    assert!(lines(&ready).contains(&"READY=1"), "{ready:?}");
    let after_kill = run_files_of(&config);
    assert!(
        !after_kill.iter().any(|f| f.ends_with(".handover")),
        "the killed run's hand-over socket was not pruned: {after_kill:?}"
    );
    assert!(
        after_kill.iter().any(|f| f.ends_with(".states.json")),
        "the killed run's fresh states were pruned: {after_kill:?}"
    );
    daemon.signal(libc::SIGTERM);
    assert!(exited(daemon).await.success());
}
