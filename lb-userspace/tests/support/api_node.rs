//! What the REST API tests share (api_reads, api_changes): a REAL daemon (no XDP) whose
//! backends are TCP listeners on 127.0.0.1 checked by a tcp health check, its API served on
//! a loopback port, and waits on what the API answers.
//!
//! A test binary takes it with `mod ports; mod support { pub mod api_node; }`.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hyper::Method;
use lb::api::client::{Answer, ApiClient};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::ports::free_port;

pub const TOKEN: &str = "test-token-0123456789abcdef";

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

pub struct Node {
    pub dir: PathBuf,
    pub path: PathBuf,
    pub url: String,
    pub running: Option<lb::daemon::Running>,
    pub stop: watch::Sender<bool>,
    pub server: tokio::task::JoinHandle<anyhow::Result<()>>,
    pub _backends: Vec<tokio::task::JoinHandle<()>>,
}

impl Node {
    pub fn client(&self, token: Option<&str>) -> ApiClient {
        ApiClient::new(
            &self.url,
            token.map(str::to_string),
            Duration::from_secs(20),
        )
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.client(Some(TOKEN))
            .call(Method::GET, path, None)
            .await
            .unwrap()
    }

    pub async fn post(&self, path: &str, body: Value) -> Answer {
        self.client(Some(TOKEN))
            .call(Method::POST, path, Some(&body))
            .await
            .unwrap()
    }

    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap()
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

pub fn tmpdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "lb-api-{tag}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The configuration of one node: b1, b2 mains and spare as backup of an l7-tcp vService,
/// an http vService with a Conditional set, a group g, and optional cluster peers.
pub fn config(api_port: u16, ports: &[u16], cluster: &str) -> String {
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

[[backend_service]]
name = "g1"
address = "127.0.0.2"
address6 = "fd00::2"
port = {p1}

[[backend_group]]
name = "g"
members = ["g1"]

{vservices}
{cluster}"#,
        p1 = ports[0],
        p2 = ports[1],
        p3 = ports[2],
        vservices = vservices(cluster),
    )
}

/// The vServices of a node. Cluster nodes share one host in these tests while their synced
/// configuration carries the same listeners, so they get Network vServices, which bind
/// nothing without XDP; a single node gets the L7 ones.
pub fn vservices(cluster: &str) -> String {
    if !cluster.is_empty() {
        return r#"[[vservice]]
name = "tcpvs"
kind = "tcp-l4"
address = "10.99.0.1"
port = 80
backends = ["b1", "b2", "spare"]
"#
        .to_string();
    }
    format!(
        r#"[[vservice]]
name = "tcpvs"
kind = "l7-tcp"
address = "127.0.0.1"
port = {vs1}
backends = ["b1", "b2", "spare"]

[[vservice]]
name = "site"
kind = "http"
address = "127.0.0.1"
port = {vs2}
backends = ["b1", "spare"]
[[vservice.conditional_set]]
name = "api"
backends = ["g", "b2"]
path_prefix = "/api/"
"#,
        vs1 = free_port(),
        vs2 = free_port(),
    )
}

pub async fn start_node(tag: &str, api_port: u16, cluster: &str) -> Node {
    let mut ports = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let (p, t) = backend().await;
        ports.push(p);
        tasks.push(t);
    }
    start_with(tag, api_port, config(api_port, &ports, cluster), tasks).await
}

/// Starts a daemon on configuration `text` with its API on `api_port`; `tasks` (the
/// backends) live as long as the node.
pub async fn start_with(
    tag: &str,
    api_port: u16,
    text: String,
    tasks: Vec<tokio::task::JoinHandle<()>>,
) -> Node {
    let dir = tmpdir(tag);
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
        dir,
        path,
        url: format!("http://127.0.0.1:{api_port}"),
        running: Some(running),
        stop,
        server,
        _backends: tasks,
    };
    wait_until("API answers", || async {
        node.client(Some(TOKEN))
            .call(Method::GET, "/api/v1/status", None)
            .await
            .is_ok()
    })
    .await;
    node
}

/// Polls `cond` every 100 ms for at most 10 s.
pub async fn wait_until<F, Fut>(what: &str, cond: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for: {what}");
}

pub fn find<'a>(v: &'a Value, key: &str, name: &str) -> &'a Value {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {v}"))
}

pub async fn tier(node: &Node, vs: &str, list: &str) -> String {
    let v = node.get(&format!("/api/v1/vservices/{vs}")).await.body;
    find(&v, "lists", list)["tier"]
        .as_str()
        .unwrap()
        .to_string()
}

pub async fn wait_healthy(node: &Node) {
    wait_until("b1 and b2 OK", || async {
        let v = node.get("/api/v1/backends").await.body;
        find(&v, "backends", "b1")["health"] == "OK" && find(&v, "backends", "b2")["health"] == "OK"
    })
    .await;
    wait_until("tcpvs on mains", || async {
        tier(node, "tcpvs", "default").await == "mains"
    })
    .await;
    // Every main in every list as L7 traffic sees it (the L7 view follows a tick later).
    wait_until("b1 and b2 eligible everywhere", || async {
        let v = node.get("/api/v1/vservices").await.body;
        let states: Vec<String> = v["vservices"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|vs| vs["lists"].as_array().cloned().unwrap_or_default())
            .flat_map(|l| l["members"].as_array().cloned().unwrap_or_default())
            .filter(|m| m["name"] == "b1" || m["name"] == "b2")
            .map(|m| m["state"].as_str().unwrap_or_default().to_string())
            .collect();
        !states.is_empty() && states.iter().all(|s| s == "eligible")
    })
    .await;
}
