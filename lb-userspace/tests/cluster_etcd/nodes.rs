//! The balancers of the tests: real daemons (no XDP) with their API on loopback, started in
//! this process, or real `lb run` processes; the backends they check; polling helpers.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hyper::Method;
use lb::api::client::{Answer, ApiClient};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::ports::free_port;

/// The API token of every node.
pub const TOKEN: &str = "test-token-0123456789abcdef";
/// The key prefix of every test (each test has an etcd of its own).
pub const PREFIX: &str = "/lbtest";

/// A backend that accepts and closes connections (enough for a tcp check).
pub async fn backend() -> (u16, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            drop(s);
        }
    });
    (port, task)
}

/// The backends every node checks, alive as long as the test.
pub struct Backends {
    pub ports: Vec<u16>,
    pub _tasks: Vec<tokio::task::JoinHandle<()>>,
}

pub async fn backends() -> Backends {
    let (mut ports, mut tasks) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let (p, t) = backend().await;
        ports.push(p);
        tasks.push(t);
    }
    Backends {
        ports,
        _tasks: tasks,
    }
}

/// The configuration of node `name`: its own [api] and [cluster], the shared rest.
pub fn config(name: &str, api_port: u16, etcd_port: u16, b: &Backends, manual: bool) -> String {
    format!(
        r#"# top comment: must survive write-back
[api]
listen = "127.0.0.1:{api_port}"
token = "{TOKEN}"

[reflection]
l7_delay = 0.1

[[health_check]]
name = "tcp1"
type = "tcp"
period = 1
timeout = 1
required_successes = 1
required_failures = 1

[[backend_service]]
name = "b1" # first main
address = "127.0.0.1"
port = {p1}
health_check = "tcp1"

[[backend_service]]
name = "b2"
address = "127.0.0.1"
port = {p2}
health_check = "tcp1"
maintenance = false # b2 comment

[[backend_service]]
name = "spare"
address = "127.0.0.1"
port = {p3}
backup = true

[[vservice]]
name = "tcpvs"
kind = "tcp-l4"
address = "10.99.0.1"
port = 80
backends = ["b1", "b2", "spare"]

[cluster]
store = "etcd"
node_name = "{name}"
manual_sync = {manual}
[cluster.etcd]
endpoints = ["http://127.0.0.1:{etcd_port}"]
prefix = "{PREFIX}"
timeout = 2
"#,
        p1 = b.ports[0],
        p2 = b.ports[1],
        p3 = b.ports[2],
    )
}

pub struct Node {
    pub name: String,
    pub dir: PathBuf,
    pub path: PathBuf,
    pub url: String,
    pub running: Option<lb::daemon::Running>,
    pub stop: watch::Sender<bool>,
    pub server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Node {
    pub fn client(&self, timeout: Duration) -> ApiClient {
        ApiClient::new(&self.url, Some(TOKEN.into()), timeout)
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.client(Duration::from_secs(10))
            .call(Method::GET, path, None)
            .await
            .unwrap_or_else(|e| panic!("{} GET {path}: {e}", self.name))
    }

    pub async fn post(&self, path: &str, body: Value) -> Answer {
        self.client(Duration::from_secs(10))
            .call(Method::POST, path, Some(&body))
            .await
            .unwrap_or_else(|e| panic!("{} POST {path}: {e}", self.name))
    }

    pub async fn maintenance(&self, backend: &str, on: bool) -> Answer {
        self.post(
            &format!("/api/v1/backends/{backend}/maintenance"),
            json!({ "on": on }),
        )
        .await
    }

    /// This node's view of etcd (`status` of `GET /api/v1/cluster`).
    pub async fn status(&self) -> Value {
        self.get("/api/v1/cluster").await.body["status"].clone()
    }

    pub async fn applied(&self) -> i64 {
        self.status().await["applied_revision"]
            .as_i64()
            .unwrap_or(0)
    }

    pub async fn flag(&self, backend: &str, flag: &str) -> bool {
        self.get(&format!("/api/v1/backends/{backend}")).await.body[flag] == true
    }

    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap()
    }

    pub async fn metric(&self, name: &str) -> Option<f64> {
        let text = self.get("/metrics").await.body;
        let text = text.as_str().unwrap_or_default().to_owned();
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
    }

    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(10), &mut self.server).await;
        if let Some(r) = self.running.take() {
            r.stop().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Node {
    /// A test that failed before its shutdown leaves no directory behind.
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts node `name` on `text` (its API port is in it).
pub async fn start_node(name: &str, api_port: u16, text: String) -> Node {
    let dir = std::env::temp_dir().join(format!(
        "lb-etcd-node-{name}-{}-{api_port}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("lb.toml");
    std::fs::write(&path, text).unwrap();
    let cfg = lb::config::load(&path).expect("test config is valid");
    let running = lb::daemon::start(None, cfg, path.clone())
        .await
        .expect("daemon starts");
    let (stop, stop_rx) = watch::channel(false);
    let listen: SocketAddr = format!("127.0.0.1:{api_port}").parse().unwrap();
    let server = tokio::spawn(lb::api::serve(
        running.daemon.clone(),
        listen,
        Some(TOKEN.into()),
        stop_rx,
    ));
    let node = Node {
        name: name.into(),
        dir,
        path,
        url: format!("http://127.0.0.1:{api_port}"),
        running: Some(running),
        stop,
        server,
    };
    wait_until(&format!("{name}'s API answers"), 10, || async {
        node.client(Duration::from_secs(2))
            .call(Method::GET, "/api/v1/status", None)
            .await
            .is_ok()
    })
    .await;
    node
}

/// Starts `n` nodes on etcd at `etcd_port`; the first one seeds etcd. Waits until every
/// node runs the same revision.
pub async fn nodes(tag: &str, n: usize, etcd_port: u16, b: &Backends, manual: bool) -> Vec<Node> {
    let mut out = Vec::new();
    for i in 1..=n {
        let port = free_port();
        let name = format!("{tag}{i}");
        out.push(start_node(&name, port, config(&name, port, etcd_port, b, manual)).await);
    }
    wait_until("every node runs the same revision", 10, || async {
        let mut revisions = Vec::new();
        for node in &out {
            revisions.push(node.applied().await);
        }
        revisions[0] > 0 && revisions.iter().all(|r| *r == revisions[0])
    })
    .await;
    out
}

/// Polls `cond` every 20 ms for at most `secs` seconds; returns how long it took.
pub async fn wait_until<F, Fut>(what: &str, secs: u64, cond: F) -> Duration
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        if cond().await {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out after {secs} s waiting for: {what}");
}

/// `text` with `key = value` set in Backend Service `name` (as etcdctl users would edit it).
pub fn edit(text: &str, name: &str, key: &str, value: bool) -> String {
    lb::config::write_back::set_flag(text, "backend_service", name, key, value).unwrap()
}

/// A real `lb run` (binary from env LB_BIN, else this package's `lb`), killed on drop.
pub struct LbRun {
    pub child: std::process::Child,
    pub dir: PathBuf,
    pub path: PathBuf,
    pub url: String,
}

impl LbRun {
    pub fn start(name: &str, etcd_port: u16, b: &Backends) -> LbRun {
        let api = free_port();
        let dir =
            std::env::temp_dir().join(format!("lb-etcd-run-{name}-{}-{api}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lb.toml");
        let text = format!(
            "[api]\nlisten = \"127.0.0.1:{api}\"\ntoken = \"{TOKEN}\"\n\n\
             [[backend_service]]\nname = \"b1\"\naddress = \"127.0.0.1\"\nport = {}\n\n\
             [cluster]\nstore = \"etcd\"\nnode_name = \"{name}\"\n\
             [cluster.etcd]\nendpoints = [\"http://127.0.0.1:{etcd_port}\"]\nprefix = \"{PREFIX}\"\n",
            b.ports[0]
        );
        std::fs::write(&path, text).unwrap();
        let bin = std::env::var("LB_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_lb").to_owned());
        let child = std::process::Command::new(bin)
            .args(["run", "--config"])
            .arg(&path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        LbRun {
            child,
            dir,
            path,
            url: format!("http://127.0.0.1:{api}"),
        }
    }

    pub async fn get(&self, path: &str) -> Option<Value> {
        let client = ApiClient::new(&self.url, Some(TOKEN.into()), Duration::from_secs(2));
        client
            .call(Method::GET, path, None)
            .await
            .ok()
            .map(|a| a.body)
    }
}

impl Drop for LbRun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
