//! S-CL3: balancers sharing one configuration through a REAL etcd (Debian's etcd-server,
//! started by each test on loopback ports of its own). Each balancer is a real daemon (no
//! XDP) with its REST API on its own loopback port; the shared configuration carries a
//! Network vService (it binds nothing without XDP, so three nodes fit on one host) and
//! Backend Services checked over TCP on 127.0.0.1.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hyper::Method;
use lb::api::client::{Answer, ApiClient};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

mod etcd;
mod ports;
use etcd::{Etcd, Gate};
use ports::free_port;

const TOKEN: &str = "test-token-0123456789abcdef";
const PREFIX: &str = "/lbtest";

/// A backend that accepts and closes connections (enough for a tcp check).
async fn backend() -> (u16, tokio::task::JoinHandle<()>) {
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
struct Backends {
    ports: Vec<u16>,
    _tasks: Vec<tokio::task::JoinHandle<()>>,
}

async fn backends() -> Backends {
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
fn config(name: &str, api_port: u16, etcd_port: u16, b: &Backends, manual: bool) -> String {
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

struct Node {
    name: String,
    dir: PathBuf,
    path: PathBuf,
    url: String,
    running: Option<lb::daemon::Running>,
    stop: watch::Sender<bool>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Node {
    fn client(&self, timeout: Duration) -> ApiClient {
        ApiClient::new(&self.url, Some(TOKEN.into()), timeout)
    }

    async fn get(&self, path: &str) -> Answer {
        self.client(Duration::from_secs(10))
            .call(Method::GET, path, None)
            .await
            .unwrap_or_else(|e| panic!("{} GET {path}: {e}", self.name))
    }

    async fn post(&self, path: &str, body: Value) -> Answer {
        self.client(Duration::from_secs(10))
            .call(Method::POST, path, Some(&body))
            .await
            .unwrap_or_else(|e| panic!("{} POST {path}: {e}", self.name))
    }

    async fn maintenance(&self, backend: &str, on: bool) -> Answer {
        self.post(
            &format!("/api/v1/backends/{backend}/maintenance"),
            json!({ "on": on }),
        )
        .await
    }

    /// This node's view of etcd (`status` of `GET /api/v1/cluster`).
    async fn status(&self) -> Value {
        self.get("/api/v1/cluster").await.body["status"].clone()
    }

    async fn applied(&self) -> i64 {
        self.status().await["applied_revision"]
            .as_i64()
            .unwrap_or(0)
    }

    async fn flag(&self, backend: &str, flag: &str) -> bool {
        self.get(&format!("/api/v1/backends/{backend}")).await.body[flag] == true
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap()
    }

    async fn metric(&self, name: &str) -> Option<f64> {
        let text = self.get("/metrics").await.body;
        let text = text.as_str().unwrap_or_default().to_owned();
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
    }

    async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(10), &mut self.server).await;
        if let Some(r) = self.running.take() {
            r.stop().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts node `name` on `text` (its API port is in it).
async fn start_node(name: &str, api_port: u16, text: String) -> Node {
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
async fn nodes(tag: &str, n: usize, etcd_port: u16, b: &Backends, manual: bool) -> Vec<Node> {
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
async fn wait_until<F, Fut>(what: &str, secs: u64, cond: F) -> Duration
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
fn edit(text: &str, name: &str, key: &str, value: bool) -> String {
    lb::config::write_back::set_flag(text, "backend_service", name, key, value).unwrap()
}

/// S-CL3: a Maintenance change made on node 3's API reaches nodes 1 and 2 through etcd
/// within 1 s, written into each node's file with its own [api] kept; flags changed on two
/// nodes at once are both kept (the loser of the compare-and-swap sets its flag again on
/// the newer text); a whole configuration made against an old revision is refused (409,
/// naming both revisions); every node registers with the revision it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_cl3_a_change_on_any_node_reaches_every_node() {
    let etcd = Etcd::start("change");
    let b = backends().await;
    let nodes = nodes("c", 3, etcd.port, &b, false).await;
    let (n1, n2, n3) = (&nodes[0], &nodes[1], &nodes[2]);
    let first = n1.applied().await;

    let listed = n3.get("/api/v1/cluster").await.body;
    assert_eq!(listed["store"], "etcd");
    let names: Vec<&str> = listed["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c1", "c2", "c3"], "{listed}");
    assert!(
        listed["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["agrees"] == true && n["applied_revision"] == first),
        "{listed}"
    );

    // A change on node 3 reaches nodes 1 and 2 within 1 s.
    let start = Instant::now();
    let r = n3.maintenance("b2", true).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let changed = r.body["revision"].as_i64().unwrap();
    assert!(changed > first, "{}", r.body);
    for node in [n1, n2] {
        wait_until("b2 in Maintenance everywhere", 1, || async {
            node.flag("b2", "maintenance").await
        })
        .await;
    }
    let took = start.elapsed();
    println!("Maintenance on node 3 seen on nodes 1 and 2 after {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    let text = n1.text();
    assert!(text.contains("maintenance = true # b2 comment"), "{text}");
    assert!(
        text.contains(&n1.url.replace("http://", "")),
        "node 1 keeps its [api]: {text}"
    );
    assert!(
        text.contains("node_name = \"c1\""),
        "node 1 keeps its [cluster]"
    );
    let (stored, revision) = etcd.get(&format!("{PREFIX}/config")).unwrap();
    assert_eq!(revision, changed);
    assert!(
        !stored.contains("[api]") && !stored.contains("[cluster]"),
        "{stored}"
    );

    // Two nodes at once: both changes survive.
    let (r1, r2) = tokio::join!(
        n1.post("/api/v1/backends/b1/backup", json!({"on": true})),
        n2.maintenance("spare", true)
    );
    assert_eq!(
        (r1.status, r2.status),
        (200, 200),
        "{} {}",
        r1.body,
        r2.body
    );
    for node in &nodes {
        wait_until("both concurrent changes everywhere", 2, || async {
            node.flag("b1", "backup").await && node.flag("spare", "maintenance").await
        })
        .await;
    }

    // A whole configuration made against an old revision is refused, naming both.
    let stale = n2
        .post(
            "/api/v1/cluster/config",
            json!({ "config": n2.text(), "revision": first }),
        )
        .await;
    assert_eq!(stale.status, 409, "{}", stale.body);
    let error = stale.body["error"].as_str().unwrap();
    let now = n2.applied().await;
    assert!(
        error.contains(&format!("revision {first}")) && error.contains(&format!("revision {now}")),
        "{error}"
    );
    assert!(n2.flag("b2", "maintenance").await, "nothing was lost");
    // The same against the current revision is taken by every node.
    let fresh = edit(&n2.text(), "b2", "maintenance", false);
    let r = n2
        .post(
            "/api/v1/cluster/config",
            json!({ "config": fresh, "revision": now }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    for node in &nodes {
        wait_until("b2 out of Maintenance everywhere", 2, || async {
            !node.flag("b2", "maintenance").await
        })
        .await;
    }

    // Registration: every node runs etcd's revision; metrics say so.
    let last = r.body["revision"].as_i64().unwrap();
    wait_until("every node registered the last revision", 5, || async {
        let v = n1.get("/api/v1/cluster").await.body;
        v["nodes"].as_array().is_some_and(|a| {
            a.len() == 3
                && a.iter()
                    .all(|n| n["applied_revision"] == last && n["agrees"] == true)
        })
    })
    .await;
    // The Live Stats payload carries the same, as last read (refreshed every few seconds).
    wait_until("Live Stats lists every node agreeing", 5, || async {
        let live = n2.get("/api/v1/stats/live").await.body;
        live["cluster"]["status"]["store_reachable"] == true
            && live["cluster"]["nodes"].as_array().is_some_and(|a| {
                a.len() == 3
                    && a.iter()
                        .all(|n| n["applied_revision"] == last && n["agrees"] == true)
            })
    })
    .await;
    assert_eq!(n3.metric("lb_cluster_store_reachable").await, Some(1.0));
    assert_eq!(
        n3.metric("lb_cluster_applied_revision").await,
        Some(last as f64)
    );

    // `lb cluster status` shows the same.
    let bin = std::env::var("LB_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_lb").to_owned());
    let out = std::process::Command::new(bin)
        .args(["cluster", "status", "--api", &n2.url, "--token", TOKEN])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("etcd: reachable"), "{shown}");
    for name in ["c1", "c2", "c3"] {
        assert!(
            shown.lines().any(|l| l.starts_with(name)
                && l.contains(&last.to_string())
                && l.ends_with("yes")),
            "{shown}"
        );
    }
    for node in nodes {
        node.shutdown().await;
    }
}

/// S-CL3: a revision put straight into etcd that does not validate is refused by every
/// node, each says so (API, its record in etcd, metrics), none runs any of it, and the next
/// valid revision is applied by all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_cl3_a_revision_that_does_not_validate_is_refused_by_every_node() {
    let etcd = Etcd::start("invalid");
    let b = backends().await;
    let nodes = nodes("v", 3, etcd.port, &b, false).await;
    let key = format!("{PREFIX}/config");
    let (good, _) = etcd.get(&key).unwrap();
    let files: Vec<String> = nodes.iter().map(Node::text).collect();
    let bad = format!(
        "{}\n[[vservice]]\nname = \"bad\"\nkind = \"tcp-l4\"\naddress = \"10.99.0.2\"\nport = 80\nbackends = [\"nope\"]\n",
        edit(&good, "b1", "maintenance", true)
    );
    let bad_revision = etcd.put(&key, &bad);
    for node in &nodes {
        wait_until("the bad revision refused", 5, || async {
            node.status().await["refused"]["revision"] == bad_revision
        })
        .await;
        let st = node.status().await;
        assert!(
            st["refused"]["error"].as_str().unwrap().contains("nope"),
            "{st}"
        );
        assert!(st["applied_revision"].as_i64().unwrap() < bad_revision);
        assert!(!node.flag("b1", "maintenance").await, "never half-applied");
        assert_eq!(node.get("/api/v1/vservices/bad").await.status, 404);
        assert_eq!(node.metric("lb_cluster_revision_refused").await, Some(1.0));
    }
    for (node, before) in nodes.iter().zip(&files) {
        assert_eq!(&node.text(), before, "{}'s file unchanged", node.name);
    }
    wait_until("every node's record says it refused", 5, || async {
        let v = nodes[0].get("/api/v1/cluster").await.body;
        v["nodes"].as_array().is_some_and(|a| {
            a.len() == 3
                && a.iter()
                    .all(|n| n["refused"]["revision"] == bad_revision && n["agrees"] == false)
        })
    })
    .await;
    // The next valid revision runs everywhere and clears the refusal.
    let fixed = etcd.put(&key, &edit(&good, "b2", "backup", true));
    for node in &nodes {
        wait_until("the fixed revision applied", 5, || async {
            let st = node.status().await;
            st["applied_revision"] == fixed && st["refused"].is_null()
        })
        .await;
        assert!(node.flag("b2", "backup").await);
    }
    for node in nodes {
        node.shutdown().await;
    }
}

/// Checks every node every 250 ms for `secs` seconds while etcd is away: each API answers
/// within 1 s and the vService still runs on its mains; by 6 s (etcd calls time out after
/// 2 s, the keep-alive notices a frozen etcd after about two timeouts) each says etcd is
/// unreachable (API and metrics) and a change is refused with 503. Prints when each node
/// first said so.
async fn serving_without_etcd(nodes: &[Node], secs: u64, what: &str) {
    let start = Instant::now();
    let mut noticed: Vec<Option<Duration>> = vec![None; nodes.len()];
    let mut refused_change = false;
    while start.elapsed() < Duration::from_secs(secs) {
        for (i, node) in nodes.iter().enumerate() {
            let asked = Instant::now();
            let v = node.get("/api/v1/vservices/tcpvs").await;
            assert_eq!(v.status, 200);
            let default = v.body["lists"]
                .as_array()
                .unwrap()
                .iter()
                .find(|l| l["name"] == "default")
                .unwrap()
                .clone();
            assert_eq!(default["tier"], "mains", "{}: {default}", node.name);
            let st = node.status().await;
            assert!(
                asked.elapsed() < Duration::from_secs(1),
                "{}: the API answers at once while etcd is away",
                node.name
            );
            if st["store_reachable"] == false && noticed[i].is_none() {
                assert!(st["store_error"].as_str().unwrap().contains("etcd"));
                noticed[i] = Some(start.elapsed());
            }
            if start.elapsed() > Duration::from_secs(6) {
                assert_eq!(st["store_reachable"], false, "{}: {st}", node.name);
                assert_eq!(node.metric("lb_cluster_store_reachable").await, Some(0.0));
            }
        }
        if start.elapsed() > Duration::from_secs(7) && !refused_change {
            let r = nodes[0].maintenance("b1", true).await;
            assert_eq!(r.status, 503, "{}", r.body);
            assert!(r.body["error"].as_str().unwrap().contains("unreachable"));
            refused_change = true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for (node, when) in nodes.iter().zip(noticed) {
        println!(
            "{what}: {} said etcd is unreachable after {when:?}",
            node.name
        );
    }
}

/// S-CL3: etcd frozen (SIGSTOP) for 10 s, then stopped (SIGTERM) for 10 s: all three nodes
/// keep serving their APIs on their last applied revision and say etcd is unreachable; when
/// it is back they say so and apply a change made through etcdctl as soon as it restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_cl3_etcd_stopped_nodes_run_on_and_catch_up() {
    let mut etcd = Etcd::start("down");
    let b = backends().await;
    let nodes = nodes("d", 3, etcd.port, &b, false).await;
    for node in &nodes {
        wait_until("mains up", 10, || async {
            let v = node.get("/api/v1/vservices/tcpvs").await.body;
            v["lists"][0]["tier"] == "mains"
        })
        .await;
    }

    etcd.signal(libc::SIGSTOP);
    serving_without_etcd(&nodes, 10, "SIGSTOP").await;
    etcd.signal(libc::SIGCONT);
    for node in &nodes {
        let took = wait_until("etcd reachable again", 10, || async {
            node.status().await["store_reachable"] == true
        })
        .await;
        println!("{} reached etcd again {took:?} after SIGCONT", node.name);
    }
    let r = nodes[1].maintenance("b2", true).await;
    assert_eq!(r.status, 200, "{}", r.body);
    for node in &nodes {
        wait_until("the change after the freeze everywhere", 2, || async {
            node.flag("b2", "maintenance").await
        })
        .await;
    }

    etcd.stop();
    serving_without_etcd(&nodes, 10, "SIGTERM").await;
    etcd.spawn();
    // Made as soon as etcd answers, before the nodes are back on it.
    let key = format!("{PREFIX}/config");
    let (text, _) = etcd.get(&key).unwrap();
    let revision = etcd.put(&key, &edit(&text, "b1", "backup", true));
    let start = Instant::now();
    for node in &nodes {
        wait_until(
            "the change made while they were away applied",
            10,
            || async {
                let st = node.status().await;
                st["applied_revision"] == revision && st["store_reachable"] == true
            },
        )
        .await;
        assert!(node.flag("b1", "backup").await);
    }
    println!(
        "every node applied the etcdctl change {:?} after etcd restarted",
        start.elapsed()
    );
    for node in nodes {
        node.shutdown().await;
    }
}

/// S-CL3: nodes cut off from etcd (a partition: etcd itself runs on) while revisions are
/// written and etcd compacts past the revision they run: once they reach it again they
/// read the configuration in full and run the newest revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_cl3_compaction_past_a_node_makes_it_read_in_full() {
    let etcd = Etcd::start("compact");
    let gate = Gate::new(etcd.port).await;
    let b = backends().await;
    let nodes = nodes("k", 2, gate.port, &b, false).await;
    let reads: Vec<i64> = {
        let mut v = Vec::new();
        for node in &nodes {
            v.push(node.status().await["full_reads"].as_i64().unwrap());
        }
        v
    };
    gate.set_open(false);
    for node in &nodes {
        wait_until("cut off from etcd", 10, || async {
            node.status().await["store_reachable"] == false
        })
        .await;
    }
    let key = format!("{PREFIX}/config");
    let (text, _) = etcd.get(&key).unwrap();
    etcd.put(&key, &edit(&text, "b1", "maintenance", true));
    etcd.put(&key, &edit(&text, "b2", "maintenance", true));
    let newest = etcd.put(&key, &edit(&text, "spare", "maintenance", true));
    etcd.etcdctl(&["compaction", &newest.to_string()]);
    gate.set_open(true);
    for (node, before) in nodes.iter().zip(reads) {
        wait_until("the newest revision applied", 10, || async {
            node.applied().await == newest
        })
        .await;
        let st = node.status().await;
        assert!(st["full_reads"].as_i64().unwrap() > before, "{st}");
        assert!(node.flag("spare", "maintenance").await);
        assert!(
            !node.flag("b1", "maintenance").await,
            "only the newest revision runs"
        );
    }
    for node in nodes {
        node.shutdown().await;
    }
}

/// S-CL2 with etcd (S-CL3): with Manual Sync Mode a change runs on the node it was made on
/// and is staged; only Synchronize publishes it. A Synchronize made against an older
/// revision than etcd holds is refused (409) and `--discard` runs etcd's revision again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_cl2_s_cl3_manual_sync_stages_until_synchronize() {
    let etcd = Etcd::start("manual");
    let b = backends().await;
    let nodes = nodes("m", 2, etcd.port, &b, true).await;
    let (n1, n2) = (&nodes[0], &nodes[1]);
    let r = n1.maintenance("b1", true).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["staged"], true, "{}", r.body);
    assert!(n1.flag("b1", "maintenance").await, "runs here at once");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !n2.flag("b1", "maintenance").await,
        "not published before Synchronize"
    );
    assert_eq!(n1.status().await["staged"], true);
    let r = n1.post("/api/v1/cluster/sync", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let published = r.body["revision"].as_i64().unwrap();
    wait_until("node 2 runs the published change", 1, || async {
        n2.flag("b1", "maintenance").await
    })
    .await;
    assert_eq!(n2.applied().await, published);
    assert_eq!(n1.status().await["staged"], false);

    // Both stage; node 2 publishes first; node 1's Synchronize is refused, naming both.
    assert_eq!(n1.maintenance("b2", true).await.status, 200);
    assert_eq!(
        n2.post("/api/v1/backends/spare/backup", json!({"on": false}))
            .await
            .status,
        200
    );
    let r = n2.post("/api/v1/cluster/sync", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let newer = r.body["revision"].as_i64().unwrap();
    let r = n1.post("/api/v1/cluster/sync", json!({})).await;
    assert_eq!(r.status, 409, "{}", r.body);
    let error = r.body["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("revision {published}"))
            && error.contains(&format!("revision {newer}")),
        "{error}"
    );
    let r = n1
        .post("/api/v1/cluster/sync", json!({"discard": true}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(n1.applied().await, newer);
    assert!(
        !n1.flag("b2", "maintenance").await,
        "the staged change was dropped"
    );
    assert!(!n1.flag("spare", "backup").await, "node 2's change runs");
    for node in nodes {
        node.shutdown().await;
    }
}

/// S-CL3, bad input: etcd unreachable when a node starts: the node starts on its own file,
/// serves, says which etcd it cannot reach, refuses changes with 503, and joins once etcd
/// answers. A prefix that already holds a configuration that does not validate: the node
/// refuses it, keeps running its own file and reports the revision it refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_cl3_bad_etcd_at_start_keeps_the_local_configuration() {
    let b = backends().await;
    let etcd_port = free_port();
    let api = free_port();
    let node = start_node("u1", api, config("u1", api, etcd_port, &b, false)).await;
    wait_until("says etcd is unreachable", 10, || async {
        let st = node.status().await;
        st["store_reachable"] == false
            && st["store_error"]
                .as_str()
                .is_some_and(|e| e.contains(&format!("127.0.0.1:{etcd_port}")))
    })
    .await;
    assert_eq!(node.get("/api/v1/backends").await.status, 200);
    let r = node.maintenance("b1", true).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(!node.flag("b1", "maintenance").await);
    let etcd = Etcd::start_on("late", etcd_port);
    wait_until("joined once etcd answers", 10, || async {
        node.applied().await > 0
    })
    .await;
    assert!(
        etcd.get(&format!("{PREFIX}/config")).is_some(),
        "it seeded etcd"
    );
    node.shutdown().await;

    // A prefix holding a configuration that does not validate.
    let key = format!("{PREFIX}/config");
    let bad_revision = etcd.put(&key, "[[backend_service]]\nname = \"x\"\nport = 0\n");
    let api = free_port();
    let node = start_node("u2", api, config("u2", api, etcd_port, &b, false)).await;
    wait_until("the invalid configuration refused", 10, || async {
        node.status().await["refused"]["revision"] == bad_revision
    })
    .await;
    let st = node.status().await;
    assert_eq!(st["applied_revision"], 0, "{st}");
    assert!(
        st["refused"]["error"]
            .as_str()
            .unwrap()
            .contains("missing field `address`"),
        "{st}"
    );
    assert_eq!(
        node.get("/api/v1/backends/b1").await.status,
        200,
        "its own file runs"
    );
    node.shutdown().await;
}

/// S-CL3, bad input: a configuration larger than etcd takes (its request limit, here 8 KiB)
/// is refused with 502 and etcd's reason, and nothing changes anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_cl3_a_configuration_etcd_refuses_changes_nothing() {
    let etcd = Etcd::start_with("large", free_port(), &["--max-request-bytes", "8192"]);
    let b = backends().await;
    let nodes = nodes("l", 2, etcd.port, &b, false).await;
    let before = nodes[1].applied().await;
    let large = format!("{}\n# {}\n", nodes[0].text(), "x".repeat(20_000));
    let r = nodes[0]
        .post("/api/v1/cluster/config", json!({ "config": large }))
        .await;
    assert_eq!(r.status, 502, "{}", r.body);
    let error = r.body["error"].as_str().unwrap();
    assert!(
        error.contains("refused") && error.contains("too large"),
        "{error}"
    );
    for node in &nodes {
        assert_eq!(node.applied().await, before);
        assert!(!node.text().contains("xxxx"));
        assert_eq!(
            node.status().await["store_reachable"],
            true,
            "etcd did answer"
        );
    }
    for node in nodes {
        node.shutdown().await;
    }
}

/// A real `lb run` (binary from env LB_BIN, else this package's `lb`), killed on drop.
struct LbRun {
    child: std::process::Child,
    dir: PathBuf,
    path: PathBuf,
    url: String,
}

impl LbRun {
    fn start(name: &str, etcd_port: u16, b: &Backends) -> LbRun {
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

    async fn get(&self, path: &str) -> Option<Value> {
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

/// S-CL3 with `lb run`: two daemons on one etcd; the configuration file edited on node 1
/// and SIGHUP sent (a reload) publishes it, and node 2 runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_cl3_sighup_publishes_the_edited_file() {
    let etcd = Etcd::start("hup");
    let b = backends().await;
    let n1 = LbRun::start("r1", etcd.port, &b);
    let n2 = LbRun::start("r2", etcd.port, &b);
    for node in [&n1, &n2] {
        wait_until("lb run follows etcd", 15, || async {
            node.get("/api/v1/cluster")
                .await
                .is_some_and(|v| v["status"]["applied_revision"].as_i64() > Some(0))
        })
        .await;
    }
    let text = std::fs::read_to_string(&n1.path).unwrap();
    let edited = lb::config::write_back::set_value(
        &text,
        "backend_service",
        "b1",
        "weight",
        toml_edit::Value::from(7),
    )
    .unwrap();
    std::fs::write(&n1.path, edited).unwrap();
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    let rc = unsafe { libc::kill(n1.child.id() as libc::pid_t, libc::SIGHUP) };
    assert_eq!(rc, 0);
    let took = wait_until("node 2 runs the reloaded file", 5, || async {
        n2.get("/api/v1/backends/b1")
            .await
            .is_some_and(|v| v["weight"] == 7)
    })
    .await;
    println!("SIGHUP on node 1 reached node 2 after {took:?}");
    let (stored, _) = etcd.get(&format!("{PREFIX}/config")).unwrap();
    assert!(stored.contains("weight = 7"), "{stored}");
}
