//! S-CL3 when etcd goes away: frozen, stopped, or cut off while it compacts.

use std::time::{Duration, Instant};

use super::etcd::{Etcd, Gate};
use super::nodes::{Node, PREFIX, backends, edit, nodes, wait_until};

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
