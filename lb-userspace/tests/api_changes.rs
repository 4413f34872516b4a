//! The REST API's changes against a REAL daemon (no XDP; support/api_node.rs): Maintenance
//! and weights written back to the file (S-MT8), bad bodies, the token, reload, a failed
//! write, changes reaching cluster peers (S-CL), an API address already taken, and any body
//! fuzzed (`cargo xtask fuzz` runs this binary's `any_` test with many cases).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::Method;
use serde_json::{Value, json};
use tokio::sync::watch;

mod ports;
mod support {
    pub mod api_node;
}
use ports::free_port;
use support::api_node::*;

/// S-MT8, S-MT2, S-BK2: maintenance is written to the file (comments kept), shows in
/// /backends and moves the list to its backup; off returns it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_mt8_maintenance_written_back_and_selected() {
    let node = start_node("maint", free_port(), "").await;
    wait_healthy(&node).await;
    for b in ["b1", "b2"] {
        let a = node
            .post(
                &format!("/api/v1/backends/{b}/maintenance"),
                json!({"on": true}),
            )
            .await;
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.body["maintenance"], true);
    }
    let text = node.text();
    let cfg = lb::config::parse(&text, "re-read").unwrap();
    assert!(
        cfg.backend_services
            .iter()
            .filter(|s| s.name == "b1" || s.name == "b2")
            .all(|s| s.maintenance)
    );
    assert!(text.contains("# top comment: must survive write-back"));
    assert!(text.contains("name = \"b1\" # first main"));
    assert!(text.contains("maintenance = true # b2 comment"), "{text}");
    let b1 = node.get("/api/v1/backends/b1").await.body;
    assert_eq!(b1["maintenance"], true);
    wait_until("backup takes over", || async {
        tier(&node, "tcpvs", "default").await == "backup 1"
    })
    .await;

    // Backup flag on a group, then group maintenance: the api set has nothing left.
    let a = node
        .post("/api/v1/groups/g/maintenance", json!({"on": true}))
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let cfg = lb::config::load(&node.path).unwrap();
    assert!(cfg.backend_groups[0].maintenance);
    wait_until("api set down", || async {
        tier(&node, "site", "api").await == "none"
    })
    .await;

    let a = node
        .post("/api/v1/backends/b1/maintenance", json!({"on": false}))
        .await;
    assert_eq!(a.status, 200);
    wait_until("mains again", || async {
        tier(&node, "tcpvs", "default").await == "mains"
    })
    .await;
    let a = node
        .post("/api/v1/backends/spare/backup", json!({"on": false}))
        .await;
    assert_eq!(a.status, 200);
    let spare = node.get("/api/v1/backends/spare").await.body;
    assert_eq!(spare["backup"], false);
    assert!(
        !lb::config::load(&node.path)
            .unwrap()
            .backend_services
            .iter()
            .any(|s| s.name == "spare" && s.backup)
    );
    node.shutdown().await;
}

/// Bad bodies answer 400/422 naming the field; unknown names 404; nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_mt8_bad_body_and_unknown_name() {
    let node = start_node("bad", free_port(), "").await;
    let before = node.text();
    let c = node.client(Some(TOKEN));
    for (body, status) in [
        (json!({}), 400),
        (json!({"on": "yes"}), 422),
        (json!([true]), 400),
        (json!({"on": true, "x": 1}), 422),
    ] {
        let a = c
            .call(Method::POST, "/api/v1/backends/b1/maintenance", Some(&body))
            .await
            .unwrap();
        assert_eq!(a.status, status, "{body}: {}", a.body);
        assert!(
            a.body["error"].as_str().unwrap().contains('`'),
            "names the field: {}",
            a.body
        );
    }
    let a = c
        .call(Method::POST, "/api/v1/backends/b1/maintenance", None)
        .await
        .unwrap();
    assert_eq!(a.status, 400);
    let a = node
        .post("/api/v1/backends/nope/maintenance", json!({"on": true}))
        .await;
    assert_eq!(a.status, 404);
    assert!(a.body["error"].as_str().unwrap().contains("nope"));
    let a = node
        .post("/api/v1/groups/nope/backup", json!({"on": true}))
        .await;
    assert_eq!(a.status, 404);
    assert_eq!(node.text(), before);
    node.shutdown().await;
}

/// S-MT8 for weights (HAProxy's `set server weight`): `POST backends/NAME/weight` writes the
/// weight to the file (comments kept), the running configuration and the API show it when
/// the call answers; bad bodies are refused naming the field, and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_mt8_weight_written_back_and_applied() {
    let node = start_node("weight", free_port(), "").await;
    let a = node
        .post("/api/v1/backends/b2/weight", json!({"weight": 7}))
        .await;
    assert_eq!(
        (a.status, a.body["weight"].as_u64()),
        (200, Some(7)),
        "{}",
        a.body
    );
    let text = node.text();
    assert!(text.contains("weight = 7"), "{text}");
    assert!(text.contains("maintenance = false # b2 comment"), "{text}");
    let running = node.running.as_ref().expect("running").daemon.config();
    let b2 = running.backend_services.iter().find(|s| s.name == "b2");
    assert_eq!(
        b2.map(|s| s.weight),
        Some(7),
        "applied when the call answered"
    );
    let view = node.get("/api/v1/backends/b2").await;
    assert_eq!(view.body["weight"], 7, "{}", view.body);
    let before = node.text();
    let c = node.client(Some(TOKEN));
    for (body, status) in [
        (json!({}), 400),
        (json!({"weight": -1}), 422),
        (json!({"weight": 70000}), 422),
        (json!({"weight": 1.5}), 422),
        (json!({"weight": "3"}), 422),
        (json!({"weight": 3, "on": true}), 422),
    ] {
        let a = c
            .call(Method::POST, "/api/v1/backends/b2/weight", Some(&body))
            .await
            .unwrap();
        assert_eq!(a.status, status, "{body}: {}", a.body);
        assert!(
            a.body["error"].as_str().unwrap().contains('`'),
            "{}",
            a.body
        );
    }
    let a = node
        .post("/api/v1/backends/nope/weight", json!({"weight": 1}))
        .await;
    assert_eq!(a.status, 404);
    assert_eq!(node.text(), before);
    node.shutdown().await;
}

/// Auth: missing or wrong token -> 401 JSON; the right one -> 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_token_required() {
    let node = start_node("auth", free_port(), "").await;
    for token in [None, Some("wrong-token-0123456789abcdef"), Some("x")] {
        for path in ["/api/v1/status", "/metrics", "/api/v1/stats/live"] {
            let a = node
                .client(token)
                .call(Method::GET, path, None)
                .await
                .unwrap();
            assert_eq!(a.status, 401, "{path} {token:?}");
            assert!(a.body["error"].is_string());
        }
        let a = node
            .client(token)
            .call(
                Method::POST,
                "/api/v1/backends/b1/maintenance",
                Some(&json!({"on": true})),
            )
            .await
            .unwrap();
        assert_eq!(a.status, 401);
    }
    assert!(!node.text().contains("maintenance = true"));
    assert_eq!(node.get("/api/v1/status").await.status, 200);
    // The page's static files carry no data and load without a token (a browser cannot send
    // one on navigation); the page sends it with its API calls.
    for path in ["/", "/ui/app.js", "/ui/style.css"] {
        let a = node.client(None).call(Method::GET, path, None).await;
        assert_eq!(a.map(|a| a.status).ok(), Some(200), "{path}");
    }
    // serve refuses a non-loopback address without a token.
    let (_tx, rx) = watch::channel(false);
    let daemon = node.running.as_ref().unwrap().daemon.clone();
    let e = lb::api::serve(daemon, "0.0.0.0:1".parse().unwrap(), None, rx)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("token"), "{e}");
    node.shutdown().await;
}

/// Reload: a broken file answers 400 with every issue and the running config stays; a good
/// one is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_rejects_broken_file() {
    let node = start_node("reload", free_port(), "").await;
    let daemon = node.running.as_ref().unwrap().daemon.clone();
    let before = daemon.config();
    let good = node.text();
    let broken = good
        .replace("weight", "x")
        .replace("health_check = \"tcp1\"", "health_check = \"missing\"")
        + "\n[[backend_service]]\nname = \"b1\"\naddress = \"nope\"\nport = 1\n";
    std::fs::write(&node.path, &broken).unwrap();
    let a = node.post("/api/v1/reload", json!({})).await;
    assert_eq!(a.status, 400, "{}", a.body);
    let issues = a.body["issues"].as_array().unwrap();
    assert!(issues.len() >= 3, "every issue: {issues:?}");
    assert_eq!(*daemon.config(), *before, "running config unchanged");

    std::fs::write(
        &node.path,
        good.replace(
            "name = \"spare\"\naddress",
            "name = \"spare\"\nweight = 7\naddress",
        ),
    )
    .unwrap();
    let a = node.post("/api/v1/reload", json!({})).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(node.get("/api/v1/backends/spare").await.body["weight"], 7);
    assert_eq!(
        a.body["warnings"],
        json!([]),
        "nothing restart-only changed"
    );

    // Settings read only at start are reported, not silently ignored; the rest applies.
    std::fs::write(
        &node.path,
        good.replace(
            "name = \"spare\"\naddress",
            "name = \"spare\"\nweight = 9\naddress",
        ) + "\n[proxy]\nworkers = 7\n",
    )
    .unwrap();
    let a = node.post("/api/v1/reload", json!({})).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(node.get("/api/v1/backends/spare").await.body["weight"], 9);
    let warnings = a.body["warnings"].to_string();
    assert!(
        warnings.contains("proxy.workers changed") && warnings.contains("next restart"),
        "{warnings}"
    );
    node.shutdown().await;
}

/// S-MT8: a write that fails (the temporary file's name is taken by a directory) answers
/// 500 naming the error and leaves the old file and the running config intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_mt8_failed_write_leaves_file_intact() {
    let node = start_node("fail", free_port(), "").await;
    let before = node.text();
    let tmp = lb::api::write_back::temp_path(&lb::api::write_back::target_of(&node.path));
    std::fs::create_dir_all(tmp.join("blocker")).unwrap();
    let a = node
        .post("/api/v1/backends/b1/maintenance", json!({"on": true}))
        .await;
    assert_eq!(a.status, 500, "{}", a.body);
    assert!(
        a.body["error"]
            .as_str()
            .unwrap()
            .contains(".lb.toml.lb-tmp"),
        "{}",
        a.body
    );
    assert_eq!(node.text(), before);
    assert_eq!(
        node.get("/api/v1/backends/b1").await.body["maintenance"],
        false
    );
    std::fs::remove_dir_all(&tmp).unwrap();
    let a = node
        .post("/api/v1/backends/b1/maintenance", json!({"on": true}))
        .await;
    assert_eq!(a.status, 200, "works again: {}", a.body);
    node.shutdown().await;
}

fn peer_block(name: &str, port: u16, manual: bool) -> String {
    format!(
        "\n[cluster]\nmanual_sync = {manual}\n[[cluster.peer]]\nname = \"{name}\"\nurl = \"http://127.0.0.1:{port}\"\n"
    )
}

async fn maint_on(node: &Node, name: &str) -> bool {
    lb::config::load(&node.path)
        .map(|c| {
            c.backend_services
                .iter()
                .any(|s| s.name == name && s.maintenance)
        })
        .unwrap_or(false)
}

async fn two_nodes(tag: &str, manual: bool) -> (Node, Node) {
    let (pa, pb) = (free_port(), free_port());
    let a = start_node(&format!("{tag}-a"), pa, &peer_block("b", pb, manual)).await;
    let b = start_node(&format!("{tag}-b"), pb, &peer_block("a", pa, manual)).await;
    (a, b)
}

fn api_listen(path: &Path) -> String {
    lb::config::load(path).unwrap().api.listen.to_string()
}

/// S-CL1: with Manual Sync off, a maintenance change on A reaches B's file and API; B keeps
/// its own [api] and [cluster].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_cl1_changes_reach_peer() {
    let (a, b) = two_nodes("auto", false).await;
    let b_listen = api_listen(&b.path);
    let r = a
        .post("/api/v1/backends/b2/maintenance", json!({"on": true}))
        .await;
    assert_eq!(r.status, 200);
    wait_until("B took the change", || async { maint_on(&b, "b2").await }).await;
    wait_until("B's API shows it", || async {
        b.get("/api/v1/backends/b2").await.body["maintenance"] == true
    })
    .await;
    assert_eq!(api_listen(&b.path), b_listen, "B keeps its own [api]");
    assert!(
        b.text().contains("name = \"a\""),
        "B keeps its own [cluster]"
    );
    let st = a.get("/api/v1/cluster").await.body;
    assert_eq!(st["enabled"], true);
    wait_until("A recorded the push", || async {
        a.get("/api/v1/cluster").await.body["peers"][0]["last_sync"]["ok"] == true
    })
    .await;
    // B did not push back: A's file still has its own [api].
    assert_eq!(api_listen(&a.path), a.url.trim_start_matches("http://"));
    a.shutdown().await;
    b.shutdown().await;
}

/// S-CL2: with Manual Sync on, a change reaches the peer only on Synchronize.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_cl2_manual_sync_only_on_synchronize() {
    let (a, b) = two_nodes("manual", true).await;
    let r = a
        .post("/api/v1/backends/b1/maintenance", json!({"on": true}))
        .await;
    assert_eq!(r.status, 200);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!maint_on(&b, "b1").await, "no push without Synchronize");
    assert!(a.get("/api/v1/cluster").await.body["peers"][0]["last_sync"].is_null());
    let r = a.post("/api/v1/cluster/sync", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["results"][0]["ok"], true);
    assert!(maint_on(&b, "b1").await);
    assert_eq!(b.get("/api/v1/backends/b1").await.body["maintenance"], true);
    // A peer that is down: 502 naming it, recorded in the cluster status.
    b.shutdown().await;
    let r = a.post("/api/v1/cluster/sync", json!({})).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert!(r.body["error"].as_str().unwrap().contains('b'));
    assert_eq!(
        a.get("/api/v1/cluster").await.body["peers"][0]["last_sync"]["ok"],
        false
    );
    a.shutdown().await;
}

/// A peer's push with a broken config is refused with 400 and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_cl_receive_rejects_invalid_config() {
    let node = start_node("recv", free_port(), "").await;
    let before = node.text();
    let r = node
        .post(
            "/api/v1/cluster/config",
            json!({"config": "[[backend_service]]\nname = 1\n"}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = node
        .post("/api/v1/cluster/config", json!({"cfg": ""}))
        .await;
    assert_eq!(r.status, 400);
    assert!(r.body["error"].as_str().unwrap().contains("`config`"));
    assert_eq!(node.text(), before);
    let _ = Arc::new(());
    node.shutdown().await;
}

/// No rule of docs/behaviour.md covers it: `lb run` whose API address is taken exits at
/// once with an error that names the address, instead of running with nobody able to reach
/// it.
#[test]
fn lb_run_refuses_to_start_when_the_api_address_is_taken() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tmpdir("taken");
    let path = dir.join("lb.toml");
    std::fs::write(&path, format!("[api]\nlisten = \"{addr}\"\n")).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_lb"))
        .arg("run")
        .arg("--config")
        .arg(&path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("lb run kept running without its API");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("binding the API on {addr}")),
        "the error names the address: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the API answers to `body` POSTed to `path`: the status code (0: no answer).
async fn post_raw(api_port: u16, path: &str, body: &[u8]) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut conn) = tokio::net::TcpStream::connect(("127.0.0.1", api_port)).await else {
        return 0;
    };
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: lb\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if conn.write_all(head.as_bytes()).await.is_err() || conn.write_all(body).await.is_err() {
        return 0;
    }
    let mut answer = Vec::new();
    let read = conn.read_to_end(&mut answer);
    let _ = tokio::time::timeout(Duration::from_secs(10), read).await;
    std::str::from_utf8(answer.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

/// Any JSON value, nested a few levels.
fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "[ -~]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("on".to_string()),
                    Just("weight".to_string()),
                    "[a-z]{1,6}"
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// The API's JSON bodies, fuzzed. Whatever is POSTed to an endpoint that takes a
/// body (bytes, JSON of any shape, the right keys with wrong types), the answer is a 2xx or
/// a 4xx that names the problem, never a 5xx or a dropped connection, and the daemon serves
/// on. `PROPTEST_CASES` sets the count (`cargo xtask fuzz` runs many).
#[test]
fn any_body_gets_an_answer_and_the_daemon_serves_on() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let api_port = free_port();
    let node = rt.block_on(start_node("fuzz", api_port, ""));
    let paths = [
        "/api/v1/backends/b1/maintenance",
        "/api/v1/backends/b2/backup",
        "/api/v1/backends/nope/maintenance",
        "/api/v1/groups/g/maintenance",
        "/api/v1/groups/g/backup",
        "/api/v1/vservices/web/sessions/rebalance",
        "/api/v1/cluster/config",
    ];
    let body = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        json_value().prop_map(|v| serde_json::to_vec(&v).expect("json")),
        json_value().prop_map(|v| serde_json::to_vec(&json!({ "on": v })).expect("json")),
    ];
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(128);
    let mut runner = TestRunner::new(Config::with_cases(cases));
    let strategy = (0..paths.len(), body);
    let result = runner.run(&strategy, |(which, body)| {
        let path = paths[which];
        let status = rt.block_on(post_raw(api_port, path, &body));
        prop_assert!(
            (200..500).contains(&status),
            "{path} answered {status} to {:?}",
            String::from_utf8_lossy(&body)
        );
        Ok(())
    });
    let status = rt.block_on(node.get("/api/v1/status"));
    rt.block_on(node.shutdown());
    result.expect("every body answered with 2xx or 4xx");
    assert_eq!(status.status, 200);
}
