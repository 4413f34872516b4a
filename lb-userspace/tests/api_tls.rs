//! The API secured: TLS on its TCP listener (the token works over it, plain HTTP does not
//! reach it), mutual TLS with `client_ca`, the CLI with `--ca`, the Unix socket with its
//! permissions and no token, plain HTTP off loopback refused without
//! `insecure_plaintext`, and a reload that serves renewed files (a bad one refused, the
//! running certificate kept). Certificates are made here with rcgen.

mod ports;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use hyper::Method;
use lb::api::client::{Answer, ApiClient, ClientError, ClientTls};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use tokio::sync::watch;

use ports::free_port;

const TOKEN: &str = "tls-test-token-0123456789";

/// A directory of PEM files: CAs and certificates signed by them.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(tag: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!(
            "lb-api-tls-{tag}-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Pki { dir }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn path(&self, name: &str) -> String {
        self.file(name).display().to_string()
    }

    /// A CA `name` (`name.pem`), and under it a server certificate for 127.0.0.1
    /// (`name-server.pem`, `.key`) and a client certificate (`name-client.pem`, `.key`).
    fn ca(&self, name: &str) {
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(self.file(&format!("{name}.pem")), ca.pem()).unwrap();
        for (role, usage) in [
            ("server", ExtendedKeyUsagePurpose::ServerAuth),
            ("client", ExtendedKeyUsagePurpose::ClientAuth),
        ] {
            let key = KeyPair::generate().unwrap();
            let mut params =
                CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()]).unwrap();
            params.extended_key_usages = vec![usage];
            let cert = params.signed_by(&key, &ca).unwrap();
            std::fs::write(self.file(&format!("{name}-{role}.pem")), cert.pem()).unwrap();
            std::fs::write(
                self.file(&format!("{name}-{role}.key")),
                key.serialize_pem(),
            )
            .unwrap();
        }
    }

    /// Client settings trusting CA `ca`, with the client certificate `identity` if given.
    fn client_tls(&self, ca: &str, identity: Option<&str>) -> ClientTls {
        ClientTls {
            ca: Some(self.file(&format!("{ca}.pem"))),
            identity: identity.map(|name| {
                (
                    self.file(&format!("{name}-client.pem")),
                    self.file(&format!("{name}-client.key")),
                )
            }),
        }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A daemon (no data path) serving its API as `lb run` does, from the file `lb.toml`.
struct Node {
    port: u16,
    path: PathBuf,
    running: Option<lb::daemon::Running>,
    stop: watch::Sender<bool>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Node {
    async fn start(pki: &Pki, api: &str) -> Node {
        let port = free_port();
        let path = pki.file("lb.toml");
        let text = format!(
            "[api]\nlisten = \"127.0.0.1:{port}\"\ntoken = \"{TOKEN}\"\n{api}\n\
             [reflection]\nl7_delay = 0.0\n"
        );
        std::fs::write(&path, text).unwrap();
        let cfg = lb::config::load(&path).expect("test config is valid");
        let running = lb::daemon::start(None, cfg, path.clone())
            .await
            .expect("daemon starts");
        let (stop, stop_rx) = watch::channel(false);
        let server = tokio::spawn(lb::api::serve(
            running.daemon.clone(),
            format!("127.0.0.1:{port}").parse().unwrap(),
            Some(TOKEN.into()),
            stop_rx,
        ));
        // Listening once the port refuses no more.
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Node {
            port,
            path,
            running: Some(running),
            stop,
            server,
        }
    }

    fn https(&self, tls: &ClientTls, token: Option<&str>) -> ApiClient {
        ApiClient::with_tls(
            &format!("https://127.0.0.1:{}", self.port),
            token.map(str::to_owned),
            Duration::from_secs(5),
            tls,
        )
    }

    async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(10), &mut self.server).await;
        if let Some(r) = self.running.take() {
            r.stop().await;
        }
    }
}

async fn status(client: &ApiClient) -> Result<Answer, ClientError> {
    client.call(Method::GET, "/api/v1/status", None).await
}

/// The `[api]` lines of TLS with CA `ca`'s server certificate.
fn tls_lines(pki: &Pki, ca: &str) -> String {
    format!(
        "cert = \"{}\"\nkey = \"{}\"\n",
        pki.path(&format!("{ca}-server.pem")),
        pki.path(&format!("{ca}-server.key"))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_works_over_tls_and_plain_http_does_not_reach_the_listener() {
    let pki = Pki::new("token");
    pki.ca("ca");
    pki.ca("other");
    let node = Node::start(&pki, &tls_lines(&pki, "ca")).await;

    let answer = status(&node.https(&pki.client_tls("ca", None), Some(TOKEN)))
        .await
        .expect("an answer over TLS");
    assert_eq!(answer.status, 200, "{}", answer.body);
    // Over TLS, the token is still required.
    let answer = status(&node.https(&pki.client_tls("ca", None), None))
        .await
        .expect("an answer over TLS");
    assert_eq!(answer.status, 401, "{}", answer.body);
    // Plain HTTP to the TLS listener gets no answer.
    let plain = ApiClient::new(
        &format!("http://127.0.0.1:{}", node.port),
        Some(TOKEN.into()),
        Duration::from_secs(5),
    );
    let e = status(&plain).await.expect_err("plain HTTP is not served");
    assert!(matches!(e, ClientError::Transport { .. }), "{e}");
    // A client that does not trust the API's CA stops at the handshake.
    let e = status(&node.https(&pki.client_tls("other", None), Some(TOKEN)))
        .await
        .expect_err("an unknown CA");
    assert!(e.to_string().contains("certificate"), "{e}");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_client_ca_a_missing_or_wrong_client_certificate_is_refused() {
    let pki = Pki::new("mtls");
    pki.ca("ca");
    pki.ca("rogue");
    let api = format!(
        "{}client_ca = \"{}\"\n",
        tls_lines(&pki, "ca"),
        pki.path("ca.pem")
    );
    let node = Node::start(&pki, &api).await;

    let good = node.https(&pki.client_tls("ca", Some("ca")), Some(TOKEN));
    let answer = status(&good).await.expect("a signed client certificate");
    assert_eq!(answer.status, 200, "{}", answer.body);
    for (why, tls) in [
        ("no client certificate", pki.client_tls("ca", None)),
        (
            "a client certificate of another CA",
            pki.client_tls("ca", Some("rogue")),
        ),
    ] {
        let e = status(&node.https(&tls, Some(TOKEN))).await.expect_err(why);
        assert!(matches!(e, ClientError::Transport { .. }), "{why}: {e}");
    }
    node.shutdown().await;
}

/// The `lb` binary's API commands with `--api https://`, `--ca` (or `LB_CA`), `--cert` and
/// `--key`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_talks_to_the_tls_api_with_its_ca() {
    let pki = Pki::new("cli");
    pki.ca("ca");
    let api = format!(
        "{}client_ca = \"{}\"\n",
        tls_lines(&pki, "ca"),
        pki.path("ca.pem")
    );
    let node = Node::start(&pki, &api).await;
    let url = format!("https://127.0.0.1:{}", node.port);
    let lb = |args: &[&str], env: &[(&str, String)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lb"));
        cmd.args(args)
            .env_remove("LB_CA")
            .env_remove("LB_CERT")
            .env_remove("LB_KEY")
            .env_remove("LB_TOKEN");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("lb runs")
    };
    let (ca, cert, key) = (
        pki.path("ca.pem"),
        pki.path("ca-client.pem"),
        pki.path("ca-client.key"),
    );
    let flags = [
        "backends", "--api", &url, "--token", TOKEN, "--ca", &ca, "--cert", &cert, "--key", &key,
        "--json",
    ];
    let out = tokio::task::block_in_place(|| lb(&flags, &[]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The same through the environment.
    let env = [
        ("LB_CA", ca.clone()),
        ("LB_CERT", cert.clone()),
        ("LB_KEY", key.clone()),
        ("LB_TOKEN", TOKEN.to_owned()),
    ];
    let out = tokio::task::block_in_place(|| lb(&["backends", "--api", &url, "--json"], &env));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Without the CA (the system's store does not know it) the CLI says why.
    let no_ca = [
        "backends", "--api", &url, "--token", TOKEN, "--cert", &cert, "--key", &key,
    ];
    let out = tokio::task::block_in_place(|| lb(&no_ca, &[]));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("certificate"), "{stderr}");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unix_socket_answers_without_a_token_with_its_permissions() {
    let pki = Pki::new("socket");
    let socket = pki.file("run/api.sock");
    let node = Node::start(
        &pki,
        &format!(
            "socket = \"{}\"\nsocket_mode = \"0600\"\n",
            socket.display()
        ),
    )
    .await;
    let meta = std::fs::metadata(&socket).expect("the socket is made");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);

    let local = ApiClient::new(
        &format!("unix:{}", socket.display()),
        None,
        Duration::from_secs(5),
    );
    let answer = status(&local).await.expect("an answer on the socket");
    assert_eq!(answer.status, 200, "{}", answer.body);
    // The TCP listener still asks for the token.
    let tcp = ApiClient::new(
        &format!("http://127.0.0.1:{}", node.port),
        None,
        Duration::from_secs(5),
    );
    assert_eq!(status(&tcp).await.expect("an answer").status, 401);
    // The CLI reaches it too.
    let api = format!("unix:{}", socket.display());
    let out = tokio::task::block_in_place(|| {
        Command::new(env!("CARGO_BIN_EXE_lb"))
            .args(["backends", "--api", &api, "--json"])
            .env_remove("LB_TOKEN")
            .output()
            .expect("lb runs")
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    node.shutdown().await;
    assert!(!socket.exists(), "the socket is removed at the end");
}

/// An upgrade's new process puts its socket over the old one's path atomically; the old
/// process, ending, leaves the new socket in place. The default mode is 0660.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_socket_replaces_the_old_one_which_leaves_it_in_place() {
    let pki = Pki::new("replace");
    let path = pki.file("api.sock");
    let settings = lb::config::ApiSocket {
        path: path.clone(),
        mode: lb::config::ApiSocket::DEFAULT_MODE,
    };
    let old = lb::api::bind_socket(&settings).expect("first socket");
    let new = lb::api::bind_socket(&settings).expect("second socket");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o660);
    drop(old);
    assert!(path.exists(), "the old process leaves the new socket");
    drop(new);
    assert!(!path.exists());
}

fn config_errors(text: &str) -> Vec<lb::config::ConfigIssue> {
    match lb::config::parse(text, "lb.toml") {
        Ok(_) => Vec::new(),
        Err(e) => e.errors,
    }
}

#[test]
fn plain_http_off_loopback_is_an_error_without_the_opt_in() {
    let base = format!("[api]\nlisten = \"0.0.0.0:9180\"\ntoken = \"{TOKEN}\"\n");
    let errors = config_errors(&base);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].field, "api.insecure_plaintext");
    assert!(
        errors[0].message.contains("api.insecure_plaintext = true"),
        "{}",
        errors[0].message
    );
    assert!(config_errors(&format!("{base}insecure_plaintext = true\n")).is_empty());
    let pki = Pki::new("plaintext");
    pki.ca("ca");
    assert!(config_errors(&format!("{base}{}", tls_lines(&pki, "ca"))).is_empty());
    // Peers reached in clear off loopback need the same opt-in.
    let peer = "[cluster]\n[[cluster.peer]]\nname = \"lb2\"\nurl = \"http://10.0.0.2:9180\"\n";
    let text = format!("[api]\nlisten = \"127.0.0.1:9180\"\ntoken = \"{TOKEN}\"\n{peer}");
    let errors = config_errors(&text);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].field, "cluster.peer[0].url");
    // check-config says so, naming the key.
    let file = pki.file("plain.toml");
    std::fs::write(&file, &base).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_lb"))
        .args(["check-config"])
        .arg(&file)
        .output()
        .expect("lb runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("api.insecure_plaintext"), "{stderr}");
}

#[test]
fn unusable_tls_files_are_errors_of_their_keys() {
    let pki = Pki::new("files");
    pki.ca("ca");
    pki.ca("other");
    std::fs::write(pki.file("garbage.pem"), "not a certificate\n").unwrap();
    let api = |lines: &str| format!("[api]\n{lines}");
    let cases = [
        (
            format!(
                "cert = \"{}\"\nkey = \"{}\"\n",
                pki.path("garbage.pem"),
                pki.path("ca-server.key")
            ),
            "api.cert",
        ),
        (
            format!(
                "cert = \"{}\"\nkey = \"{}\"\n",
                pki.path("ca-server.pem"),
                pki.path("other-server.key")
            ),
            "api.key",
        ),
        (
            format!(
                "{}client_ca = \"{}\"\n",
                tls_lines(&pki, "ca"),
                pki.path("garbage.pem")
            ),
            "api.client_ca",
        ),
        (
            format!("cert = \"{}\"\n", pki.path("ca-server.pem")),
            "api.key",
        ),
        (
            format!("client_ca = \"{}\"\n", pki.path("ca.pem")),
            "api.client_ca",
        ),
        ("socket = \"api.sock\"\n".to_owned(), "api.socket"),
        ("socket_mode = \"0660\"\n".to_owned(), "api.socket_mode"),
        (
            "socket = \"/run/lb/api.sock\"\nsocket_mode = \"rw\"\n".to_owned(),
            "api.socket_mode",
        ),
    ];
    for (lines, field) in cases {
        let errors = config_errors(&api(&lines));
        assert_eq!(errors.len(), 1, "{lines}: {errors:#?}");
        assert_eq!(errors[0].field, field, "{lines}: {}", errors[0]);
    }
}

/// A reload re-reads the files: a renewed certificate is served from the next connection;
/// a bad file is refused with the reload and the running certificate stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_serves_the_new_certificate_and_refuses_a_bad_one() {
    let pki = Pki::new("reload");
    pki.ca("first");
    pki.ca("second");
    // The files the configuration names: the first CA's certificate to start with.
    let (cert, key) = (pki.file("api.pem"), pki.file("api.key"));
    std::fs::copy(pki.file("first-server.pem"), &cert).unwrap();
    std::fs::copy(pki.file("first-server.key"), &key).unwrap();
    let api = format!(
        "cert = \"{}\"\nkey = \"{}\"\n",
        cert.display(),
        key.display()
    );
    let node = Node::start(&pki, &api).await;
    let first = node.https(&pki.client_tls("first", None), Some(TOKEN));
    let second = node.https(&pki.client_tls("second", None), Some(TOKEN));
    assert_eq!(status(&first).await.expect("first").status, 200);
    assert!(status(&second).await.is_err());

    std::fs::copy(pki.file("second-server.pem"), &cert).unwrap();
    std::fs::copy(pki.file("second-server.key"), &key).unwrap();
    let answer = first
        .call(Method::POST, "/api/v1/reload", None)
        .await
        .expect("reload over the running certificate");
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(status(&second).await.expect("second").status, 200);
    assert!(status(&first).await.is_err(), "the old certificate is gone");

    // A broken file: the reload is refused naming the key, the running certificate serves on.
    std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\nbroken\n").unwrap();
    let answer = second
        .call(Method::POST, "/api/v1/reload", None)
        .await
        .expect("an answer");
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(
        answer.body.to_string().contains("api.cert"),
        "{}",
        answer.body
    );
    assert_eq!(status(&second).await.expect("still served").status, 200);
    // And SIGHUP's path (the daemon re-reading its file) refuses it the same way.
    let daemon = node.running.as_ref().unwrap().daemon.clone();
    let e = daemon.reload_from_file().await.expect_err("refused");
    assert!(format!("{e:#}").contains("api.cert"), "{e:#}");
    assert_eq!(status(&second).await.expect("still served").status, 200);
    assert!(node.path.exists());
    node.shutdown().await;
}

/// Pushes to an `https://` peer whose API asks for a client certificate: they reach it with
/// `[cluster] ca`, `cert` and `key`, and fail without the certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configurations_are_pushed_to_an_https_peer_with_a_client_certificate() {
    let pki = Pki::new("peers");
    pki.ca("ca");
    let peer_api = format!(
        "{}client_ca = \"{}\"\n",
        tls_lines(&pki, "ca"),
        pki.path("ca.pem")
    );
    let peer_dir = Pki::new("peer-b");
    std::fs::copy(pki.file("ca.pem"), peer_dir.file("ca.pem")).unwrap();
    let peer = Node::start(&peer_dir, &peer_api).await;
    let cluster = |identity: bool| {
        let mut text = format!(
            "[cluster]\nmanual_sync = true\nca = \"{}\"\n",
            pki.path("ca.pem")
        );
        if identity {
            text += &format!(
                "cert = \"{}\"\nkey = \"{}\"\n",
                pki.path("ca-client.pem"),
                pki.path("ca-client.key")
            );
        }
        text + &format!(
            "[[cluster.peer]]\nname = \"b\"\nurl = \"https://127.0.0.1:{}\"\n",
            peer.port
        )
    };
    // The pushing node's own API stays on loopback without TLS: [cluster] follows [api] in
    // the file, so it is appended after the [reflection] table.
    for (identity, expected) in [(true, 200), (false, 502)] {
        let dir = Pki::new(if identity { "push-a" } else { "push-a-bare" });
        let node = Node::start(&dir, "").await;
        let text = std::fs::read_to_string(&node.path).unwrap() + &cluster(identity);
        std::fs::write(&node.path, text).unwrap();
        let local = ApiClient::new(
            &format!("http://127.0.0.1:{}", node.port),
            Some(TOKEN.into()),
            Duration::from_secs(20),
        );
        let answer = local
            .call(Method::POST, "/api/v1/reload", None)
            .await
            .unwrap();
        assert_eq!(answer.status, 200, "{}", answer.body);
        let answer = local
            .call(Method::POST, "/api/v1/cluster/sync", None)
            .await
            .unwrap();
        assert_eq!(answer.status, expected, "{}", answer.body);
        node.shutdown().await;
    }
    peer.shutdown().await;
}

/// `lb run` with a socket and TLS, then `lb run --upgrade`: the new process makes its own
/// socket over the path and serves it (the old one, exiting, leaves it), over TLS too; at
/// its end the socket is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lb_run_upgrade_keeps_the_socket_and_tls_serving() {
    let pki = Pki::new("upgrade");
    pki.ca("ca");
    let (port, socket) = (free_port(), pki.file("api.sock"));
    let config = pki.file("lb.toml");
    std::fs::write(
        &config,
        format!(
            "[api]\nlisten = \"127.0.0.1:{port}\"\ntoken = \"{TOKEN}\"\n{}socket = \"{}\"\n",
            tls_lines(&pki, "ca"),
            socket.display()
        ),
    )
    .unwrap();
    let log = pki.file("lb.log");
    let run = |upgrade: bool| {
        let log = std::fs::File::create(if upgrade {
            log.with_extension("new.log")
        } else {
            log.clone()
        })
        .unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lb"));
        cmd.arg("run").arg("--config").arg(&config);
        if upgrade {
            cmd.args(["--upgrade", "--drain-timeout", "2"]);
        }
        let child = cmd
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("lb run starts");
        Daemon(child)
    };
    let local = ApiClient::new(
        &format!("unix:{}", socket.display()),
        None,
        Duration::from_secs(5),
    );
    let https = ApiClient::with_tls(
        &format!("https://127.0.0.1:{port}"),
        Some(TOKEN.into()),
        Duration::from_secs(5),
        &pki.client_tls("ca", None),
    );
    let answers = || async {
        let a = status(&local).await.ok()?;
        let b = status(&https).await.ok()?;
        Some((a, b))
    };
    let wait = |what: &'static str| async move {
        for _ in 0..200 {
            if let Some(both) = answers().await {
                return both;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{what}: the socket and the TLS listener do not answer");
    };
    let mut old = run(false);
    let (first, _) = wait("lb run").await;
    assert_eq!(first.status, 200);
    let mut new = run(true);
    // The old process exits once the new one serves.
    let exited = tokio::task::block_in_place(|| {
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = old.0.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    });
    assert!(
        exited,
        "the old lb run did not exit: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // Only the new process is left to answer.
    let (second, _) = wait("lb run --upgrade").await;
    assert_eq!(second.status, 200);
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o660);
    tokio::task::block_in_place(|| new.stop());
    drop(old);
    assert!(!socket.exists(), "the socket is removed at the end");
}

/// An `lb run` this test started: stopped (SIGTERM, then killed) and reaped when dropped,
/// also when an assertion fails first.
struct Daemon(std::process::Child);

impl Daemon {
    /// SIGTERM, and the exit waited for (at most 15 s, then killed).
    fn stop(&mut self) {
        if let Ok(Some(_)) = self.0.try_wait() {
            return;
        }
        // SAFETY: signalling a child this test spawned and has not reaped.
        unsafe {
            libc::kill(self.0.id() as i32, libc::SIGTERM);
        }
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(15) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}
