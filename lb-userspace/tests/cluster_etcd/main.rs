//! S-CL3: balancers sharing one configuration through a REAL etcd (Debian's etcd-server,
//! started by each test on loopback ports of its own). Each balancer is a real daemon (no
//! XDP) with its REST API on its own loopback port; the shared configuration carries a
//! Network vService (it binds nothing without XDP, so three nodes fit on one host) and
//! Backend Services checked over TCP on 127.0.0.1.
//!
//! `nodes.rs` starts the balancers, `etcd.rs` etcd itself (and a gate that cuts them off
//! from it), `outage.rs` holds the tests where etcd goes away.

use std::time::{Duration, Instant};

use serde_json::json;

mod etcd;
mod nodes;
mod outage;
#[path = "../ports/mod.rs"]
mod ports;
mod secure;

use etcd::Etcd;
use nodes::{LbRun, Node, PREFIX, TOKEN, backends, config, edit, nodes, start_node, wait_until};
use ports::free_port;

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
    // A change made on top of it is refused too, naming the revision it was made on.
    let r = nodes[2].maintenance("b2", true).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let issues = r.body["issues"].to_string();
    assert!(
        issues.contains(&format!("shared configuration revision {bad_revision}"))
            && issues.contains("nope"),
        "{issues}"
    );
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
    // A reload of an unchanged file, or a change undone, stages nothing.
    let r = n1.post("/api/v1/reload", json!({})).await;
    assert_eq!(
        (r.status, &r.body["staged"]),
        (200, &json!(false)),
        "{}",
        r.body
    );
    assert_eq!(n1.maintenance("b1", false).await.body["staged"], true);
    assert_eq!(n1.maintenance("b1", true).await.body["staged"], false);
    assert_eq!(n1.status().await["staged"], false);
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
