//! The REST API's read side against a REAL daemon (no XDP; support/api_node.rs): every read
//! endpoint, /metrics as Prometheus reads it, the stats CSV, `lb status` without a data path,
//! and what the Live Stats page is fed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::TcpListener;

mod ports;
mod support {
    pub mod api_node;
}
use ports::free_port;
use support::api_node::*;

/// S-OB1..3: every read endpoint answers with the real state of the daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_ob_read_endpoints() {
    let node = start_node("read", free_port(), "").await;
    wait_healthy(&node).await;

    let st = node.get("/api/v1/status").await;
    assert_eq!(st.status, 200);
    assert_eq!(st.body["vservices"]["total"], 2);
    assert_eq!(st.body["backend_services"]["total"], 4);
    assert_eq!(st.body["backend_services"]["by_health"]["OK"], 4);

    let vs = node.get("/api/v1/vservices").await.body;
    assert_eq!(vs["vservices"].as_array().unwrap().len(), 2);
    let site = node.get("/api/v1/vservices/site").await.body;
    assert_eq!(site["kind"], "http");
    // Maglev tables come from an XDP data path; this daemon runs none and says so.
    let table = node.get("/api/v1/vservices/site/table").await;
    assert_eq!(table.status, 404);
    assert!(
        table.body["error"]
            .as_str()
            .is_some_and(|e| e.contains("without an XDP data path")),
        "{}",
        table.body
    );
    let api_list = find(&site, "lists", "api");
    assert_eq!(api_list["tier"], "mains");
    let members: Vec<&str> = api_list["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(members, ["g1", "b2"], "groups are expanded");
    let def = find(&site, "lists", "default");
    assert_eq!(find(def, "members", "spare")["role"], "backup");
    assert_eq!(find(def, "members", "spare")["state"], "standby");
    assert_eq!(find(def, "members", "b1")["state"], "eligible");

    // S-OB2: used in, with the list name.
    let b2 = node.get("/api/v1/backends/b2").await.body;
    assert_eq!(
        b2["used_in"],
        json!([{"vservice": "tcpvs", "list": "default"}, {"vservice": "site", "list": "api"}])
    );
    assert_eq!(b2["health"], "OK");
    assert_eq!(b2["checked"], true);
    assert_eq!(b2["server"], "OK");
    assert_eq!(b2["health_check"], "tcp1");
    let g1 = node.get("/api/v1/backends/g1").await.body;
    assert_eq!(g1["checked"], false);
    assert_eq!(g1["groups"], json!(["g"]));
    // A dual-stack service shows its IPv6 address and that address's own health.
    assert_eq!(
        (&g1["address6"], &g1["health6"]),
        (&json!("fd00::2"), &json!("OK"))
    );
    assert!(
        b2.get("address6").is_none(),
        "no address6 on a one-address service: {b2}"
    );
    let g1_v6 = node.get("/api/v1/backends/g1%20(IPv6)/transitions").await;
    assert_eq!(g1_v6.body["name"], "g1 (IPv6)", "{:?}", g1_v6.body);

    let groups = node.get("/api/v1/groups").await.body;
    assert_eq!(find(&groups, "groups", "g")["members"][0]["name"], "g1");
    let g = node.get("/api/v1/groups/g").await.body;
    assert_eq!(g["used_in"], json!([{"vservice": "site", "list": "api"}]));

    let profiles = node.get("/api/v1/profiles").await.body;
    let p = find(&profiles, "profiles", "tcp1");
    assert_eq!(p["type"], "tcp");
    assert_eq!(p["used_by"], json!(["b1", "b2"]));

    // S-HC8 / S-OB3: the Preparing -> OK transition and check durations are listed.
    let tr = node.get("/api/v1/backends/b1/transitions").await.body;
    let t0 = &tr["transitions"][0];
    assert_eq!(
        (t0["from"].as_str(), t0["to"].as_str()),
        (Some("Preparing"), Some("OK"))
    );
    assert!(t0["at_unix_ms"].as_u64().unwrap() > 1_600_000_000_000);
    assert!(
        tr["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["ok"] == true && c["duration_ms"].is_number())
    );

    // Live Stats payload shape.
    let live = node.get("/api/v1/stats/live").await.body;
    assert!(live["generated_unix_ms"].as_u64().unwrap() > 0);
    let lv = find(&live, "vservices", "tcpvs");
    assert_eq!(lv["kind"], "l7-tcp");
    assert_eq!(lv["lists"][0]["name"], "default");
    assert_eq!(lv["lists"][0]["tier"], "mains");
    let lb1 = find(&live, "backends", "b1");
    for key in [
        "name",
        "address",
        "port",
        "weight",
        "health",
        "checked",
        "maintenance",
        "backup",
        "server",
        "used_in",
    ] {
        assert!(!lb1[key].is_null(), "live backend has {key}: {lb1}");
    }

    // Static page files.
    for (path, needle) in [
        ("/", "<html"),
        ("/ui/app.js", "function"),
        ("/ui/charts.js", "polyline"),
        ("/ui/style.css", "{"),
    ] {
        let a = node.get(path).await;
        assert_eq!(a.status, 200, "{path}");
        assert!(
            a.body.as_str().unwrap().to_lowercase().contains(needle),
            "{path}"
        );
    }

    // Unknown names: 404 naming the problem.
    for path in [
        "/api/v1/backends/nope",
        "/api/v1/backends/nope/transitions",
        "/api/v1/vservices/nope",
        "/api/v1/groups/nope",
        "/api/v1/nothing",
    ] {
        let a = node.get(path).await;
        assert_eq!(a.status, 404, "{path}");
        assert!(
            a.body["error"].as_str().unwrap().contains("no"),
            "{path}: {}",
            a.body
        );
    }
    node.shutdown().await;
}

/// /metrics (S-OB): valid exposition as Prometheus' own linter reads it (`promtool check
/// metrics`), every sample after its family's TYPE, and the histograms an operator expects
/// (check durations, request durations, upstream connects) filled by real checks and requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_ob_metrics_parse() {
    let node = start_node("metrics", free_port(), "").await;
    wait_healthy(&node).await;
    // Requests through the HTTP vService: its backends accept and close, so each is answered
    // 502 by the proxy after its connects (retries included) succeeded.
    get_site(&node, 5).await;
    let text = node
        .get("/metrics")
        .await
        .body
        .as_str()
        .unwrap()
        .to_string();
    promtool_check(&text);
    let sample = regex::Regex::new(r#"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? -?[0-9.eE+-]+$"#).unwrap();
    let mut types = std::collections::HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split(' ');
            let name = words.next().unwrap().to_string();
            let kind = words.next().unwrap().to_string();
            assert!(
                types.insert(name.clone(), kind).is_none(),
                "TYPE once per family: {name}"
            );
        } else if !line.starts_with("# HELP ") {
            assert!(sample.is_match(line), "bad line: {line}");
            let name = line.split(['{', ' ']).next().unwrap();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| {
                    name.strip_suffix(suffix)
                        .filter(|f| types.get(*f).is_some_and(|k| k == "histogram"))
                })
                .unwrap_or(name);
            assert!(types.contains_key(family), "sample before its TYPE: {line}");
        }
    }
    assert!(
        text.contains(r#"lb_backend_health{backend="b1",address="127.0.0.1",state="OK"} 1"#),
        "{text}"
    );
    assert!(text.contains(r#"lb_backend_health{backend="g1",address="fd00::2",state="OK"} 1"#));
    assert!(text.contains(r#"lb_backend_maintenance{backend="b1"} 0"#));
    assert!(text.contains(r#"lb_list_tier{vservice="tcpvs",list="default"} 0"#));
    assert!(text.contains(r#"lb_health_transitions_total{backend="b1",address="127.0.0.1"} 1"#));
    assert!(
        text.contains(&format!(
            r#"lb_build_info{{version="{}"}} 1"#,
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
    assert!(text.contains("lb_data_path_loaded 0\n"), "{text}");
    assert!(text.contains("lb_proxy_running 1\n"), "{text}");
    for family in [
        "lb_l7_responses_total",
        "lb_l7_malformed_requests_total",
        "lb_l7_upstream_aborts_total",
        "lb_l7_retries_total",
        "lb_l7_server_timeouts_total",
        "lb_start_time_seconds",
    ] {
        assert!(types.contains_key(family), "{family} in /metrics");
    }
    let value = |series: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    // Two checks a second of b1 and b2 since the start, every one timed.
    assert!(value(r#"lb_health_check_duration_seconds_count{health_check="tcp1"}"#) >= 2.0);
    assert_eq!(
        value(r#"lb_health_check_duration_seconds_bucket{health_check="tcp1",le="+Inf"}"#),
        value(r#"lb_health_check_duration_seconds_count{health_check="tcp1"}"#),
    );
    assert!(value(r#"lb_l7_request_duration_seconds_count{vservice="site"}"#) >= 5.0);
    assert!(value(r#"lb_l7_request_duration_seconds_sum{vservice="site"}"#) > 0.0);
    assert!(value(r#"lb_l7_upstream_connect_duration_seconds_count{vservice="site"}"#) >= 5.0);
    // The L7 TCP vService connects too, but times no HTTP request.
    assert!(text.contains(r#"lb_l7_upstream_connect_duration_seconds_count{vservice="tcpvs"} 0"#));
    assert!(!text.contains(r#"lb_l7_request_duration_seconds_count{vservice="tcpvs"}"#));
    node.shutdown().await;
}

/// S-OB1, S-OB2 (like HAProxy's `show stat`): `/api/v1/stats.csv` has a row per vService
/// and per member of its lists, with the counters of that member in that vService; `lb
/// stats --csv` prints the same CSV and `lb stats` a table of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_ob1_s_ob2_stats_csv_has_a_row_per_vservice_and_member() {
    let node = start_node("csv", free_port(), "").await;
    wait_healthy(&node).await;
    get_site(&node, 3).await;
    let text = node.get("/api/v1/stats.csv").await.body;
    let text = text.as_str().expect("CSV text").to_string();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    for column in [
        "vservice", "row", "backend", "health", "total", "http_5xx", "packets",
    ] {
        assert!(header.iter().any(|h| h == column), "{column} in {header:?}");
    }
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let rows: Vec<Vec<String>> = reader
        .records()
        .map(|r| r.unwrap().iter().map(String::from).collect())
        .collect();
    let find = |vs: &str, list: &str, backend: &str| {
        rows.iter()
            .find(|r| {
                r[col("vservice")] == vs && r[col("list")] == list && r[col("backend")] == backend
            })
            .unwrap_or_else(|| panic!("no row {vs}/{list}/{backend} in\n{text}"))
    };
    let vservice_rows: Vec<&str> = rows
        .iter()
        .filter(|r| r[col("row")] == "vservice")
        .map(|r| r[col("vservice")].as_str())
        .collect();
    assert_eq!(vservice_rows, ["tcpvs", "site"], "{text}");
    // site's Default list is b1 (main) and spare (backup); its Conditional set g1 and b2.
    let b1 = find("site", "default", "b1");
    assert_eq!(b1[col("role")], "main");
    assert_eq!(b1[col("health")], "OK");
    assert_eq!(b1[col("maintenance")], "false");
    // Every request reached b1 and was answered 502: the backend closes without answering.
    let total: u64 = b1[col("total")].parse().unwrap();
    assert!(total >= 3, "{text}");
    assert_eq!(find("site", "default", "spare")[col("role")], "backup");
    assert_eq!(find("site", "api", "g1")[col("list")], "api");
    let site_row = rows
        .iter()
        .find(|r| r[col("row")] == "vservice" && r[col("vservice")] == "site")
        .unwrap();
    assert!(
        site_row[col("total")].parse::<u64>().unwrap() >= 3,
        "{text}"
    );
    assert_eq!(site_row[col("tier")], "mains");
    assert!(
        site_row[col("packets")].is_empty(),
        "no XDP counters for an L7 vService"
    );
    // The CLI prints the same CSV, and a table of it.
    let url = node.url.clone();
    let (csv_out, table) = tokio::task::spawn_blocking(move || {
        let run = |extra: &[&str]| {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_lb"))
                .args(["stats", "--api", &url, "--token", TOKEN])
                .args(extra)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        };
        (run(&["--csv"]), run(&[]))
    })
    .await
    .unwrap();
    assert!(
        csv_out.starts_with("vservice,row,kind,list,backend,"),
        "{csv_out}"
    );
    assert_eq!(csv_out.lines().count(), text.lines().count());
    let header_line = table.lines().next().unwrap();
    assert!(
        header_line.starts_with("vservice") && header_line.contains("total"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("site") && l.contains("b1")),
        "{table}"
    );
    node.shutdown().await;
}

/// S-OB1: `lb status` on a machine where only L7 vServices run (no XDP data path) shows
/// the daemon's side from its API and says XDP is not in use; with nothing running at all it
/// fails and says what it looked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_ob1_lb_status_without_a_data_path_shows_the_daemon() {
    let node = start_node("status", free_port(), "").await;
    wait_healthy(&node).await;
    let url = node.url.clone();
    let pins = node.dir.join("no-pins");
    let (text, json, nothing) = tokio::task::spawn_blocking(move || {
        let lb = |args: &[&str]| {
            std::process::Command::new(env!("CARGO_BIN_EXE_lb"))
                .arg("status")
                .arg("--pin-dir")
                .arg(&pins)
                .args(args)
                .output()
                .unwrap()
        };
        let text = lb(&["--api", &url, "--token", TOKEN]);
        let json = lb(&["--api", &url, "--token", TOKEN, "--json"]);
        let nothing = lb(&["--api", &format!("http://127.0.0.1:{}", free_port())]);
        (text, json, nothing)
    })
    .await
    .unwrap();
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&text.stderr)
    );
    for needle in [
        "XDP data path: not in use",
        "XDP not in use, L7 proxy running",
        "L7 vServices:",
        "site http",
        "tcpvs l7-tcp",
        "Backend Services: 4 (OK 4, Error 0, Preparing 0; Maintenance 0, Backup 1)",
    ] {
        assert!(out.contains(needle), "{needle:?} in:\n{out}");
    }
    assert!(
        out.lines()
            .any(|l| l.starts_with("b1 ") && l.contains(" OK ")),
        "b1's health in:\n{out}"
    );
    assert!(json.status.success());
    let v: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["data_path_loaded"], false);
    assert_eq!(v["vips"], json!([]));
    assert_eq!(v["daemon"]["status"]["proxy"], true);
    assert_eq!(v["daemon_error"], Value::Null);
    // Neither a data path nor a daemon: an error that says where it looked.
    let err = String::from_utf8_lossy(&nothing.stderr);
    assert!(!nothing.status.success());
    assert!(
        err.contains("nothing is running") && err.contains("no-pins"),
        "{err}"
    );
    node.shutdown().await;
}

/// `n` HTTP/1.1 GETs through the node's HTTP vService `site`.
async fn get_site(node: &Node, n: usize) {
    let site = node.get("/api/v1/vservices/site").await.body;
    let addr = format!(
        "{}:{}",
        site["address"].as_str().unwrap(),
        site["ports"].as_str().unwrap()
    );
    for _ in 0..n {
        http_get(&addr).await;
    }
}

/// One HTTP/1.1 GET to `addr`, read until the proxy closes or answers.
async fn http_get(addr: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await;
    assert!(answer.starts_with(b"HTTP/1.1 "), "{answer:?}");
}

/// Runs Prometheus' `promtool check metrics` on `text` and fails with what it says. promtool
/// comes from Debian's `prometheus` package, unpacked under target/ (not installed: the
/// package would start a Prometheus server); a promtool on PATH is used as it is.
fn promtool_check(text: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let promtool = promtool();
    let mut child = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", promtool.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn promtool() -> PathBuf {
    use std::process::Command;
    if let Ok(out) = Command::new("sh")
        .args(["-c", "command -v promtool"])
        .output()
        && out.status.success()
    {
        return PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/promtool");
    let bin = dir.join("usr/bin/promtool");
    if bin.exists() {
        return bin;
    }
    let download = dir.join("download");
    std::fs::create_dir_all(&download).unwrap();
    let fetch = || {
        Command::new("apt-get")
            .args(["download", "prometheus"])
            .current_dir(&download)
            .status()
            .is_ok_and(|s| s.success())
    };
    if !fetch() {
        // The package lists may be missing on a fresh machine.
        let updated = Command::new("apt-get").arg("update").status();
        assert!(updated.is_ok_and(|s| s.success()), "apt-get update failed");
        assert!(fetch(), "apt-get download prometheus failed");
    }
    let deb = std::fs::read_dir(&download)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .expect("the downloaded prometheus .deb");
    let unpacked = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&dir)
        .status();
    assert!(
        unpacked.is_ok_and(|s| s.success()),
        "dpkg-deb -x {}",
        deb.display()
    );
    assert!(bin.exists(), "{} after unpacking", bin.display());
    bin
}
/// A backend answering each HTTP request with 200, or 404 for `/missing`; closes other
/// connections (tcp health checks) at once.
async fn http_backend() -> (u16, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let status = if head.starts_with(b"GET /missing ") {
                    "404 Not Found"
                } else {
                    "200 OK"
                };
                let answer = format!("HTTP/1.1 {status}\r\nContent-Length: 2\r\n\r\nok");
                let _ = s.write_all(answer.as_bytes()).await;
            });
        }
    });
    (port, task)
}

/// One GET through a vService on loopback; the status code.
async fn http_status(port: u16, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// S-OB1..3: `/api/v1/stats/live` carries what the Live Stats page shows beyond counts:
/// per vService and backend HTTP status classes and failures, per backend the last check
/// (result, reason, duration, time), the time of the last transition and the profile, the
/// forwarding mode of a Network vService, and per DNS vService what each name answers now
/// (decided by the server's own code), its policy and query counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_stats_has_classes_checks_modes_and_dns_answers() {
    let (web_port, web_task) = http_backend().await;
    let api_port = free_port();
    let (vs_port, dns_port, dead_port) = (free_port(), free_port(), free_port());
    let text = format!(
        r#"[api]
listen = "127.0.0.1:{api_port}"
token = "{TOKEN}"

[reflection]
l7_delay = 0.1

[[health_check]]
name = "tcp1"
type = "tcp"
period = 0.5
timeout = 1
required_successes = 1
required_failures = 1

[[backend_service]]
name = "web1"
address = "127.0.0.1"
port = {web_port}
health_check = "tcp1"

[[backend_service]]
name = "dead"
address = "127.0.0.1"
port = {dead_port}
health_check = "tcp1"

[[vservice]]
name = "site"
kind = "http"
address = "127.0.0.1"
port = {vs_port}
backends = ["web1", "dead"]

[[backend_service]]
name = "real1"
address = "127.0.0.3"
port = 0

[[vservice]]
name = "direct"
kind = "tcp-l4"
address = "10.99.0.9"
port = 80
forwarding = "dsr"
backends = ["real1"]

[[dns_vservice]]
name = "g"
address = "127.0.0.1"
port = {dns_port}
zone = "gslb.test"
poll_period = 0.2
poll_timeout = 3

[[dns_vservice.record]]
name = "www"
policy = "weighted"

[[dns_vservice.record.site]]
name = "here"
address = "192.0.2.7"
api = "http://127.0.0.1:{api_port}"
token = "{TOKEN}"
vservice = "site"
"#
    );
    let node = start_with("live", api_port, text, vec![web_task]).await;
    let live = || async { node.get("/api/v1/stats/live").await.body };
    wait_until("web1 OK and dead Error", || async {
        let v = live().await;
        find(&v, "backends", "web1")["health"] == "OK"
            && find(&v, "backends", "dead")["health"] == "Error"
    })
    .await;
    wait_until("site on its mains", || async {
        tier(&node, "site", "default").await == "mains"
    })
    .await;

    // HTTP status classes, per vService and per backend.
    let mut got = Vec::new();
    for path in ["/", "/", "/", "/missing"] {
        got.push(http_status(vs_port, path).await);
    }
    assert_eq!(got, [200, 200, 200, 404]);
    let v = live().await;
    let site = find(&v, "vservices", "site");
    assert_eq!(site["counters"]["requests"], 4, "{site}");
    assert_eq!(site["counters"]["responses"]["2xx"], 3, "{site}");
    assert_eq!(site["counters"]["responses"]["4xx"], 1, "{site}");
    assert_eq!(site["counters"]["responses"]["5xx"], 0, "{site}");
    assert!(site["counters"]["failures"].is_u64(), "{site}");
    assert!(
        site.get("mode").is_none(),
        "an L7 vService has no forwarding mode: {site}"
    );
    let web1 = find(&v, "backends", "web1");
    assert_eq!(web1["responses"]["2xx"], 3, "{web1}");
    assert_eq!(web1["responses"]["4xx"], 1, "{web1}");
    assert_eq!(web1["failures"], 0, "{web1}");

    // The last check, the time in state and the profile.
    let now = v["generated_unix_ms"].as_u64().unwrap();
    let check = &web1["last_check"];
    assert_eq!(check["ok"], true, "{web1}");
    assert!(check["duration_ms"].as_f64().unwrap() > 0.0, "{web1}");
    assert!(!check["reason"].as_str().unwrap().is_empty(), "{web1}");
    let at = check["at_unix_ms"].as_u64().unwrap();
    assert!(
        at <= now && now - at < 5_000,
        "last check {at} vs now {now}"
    );
    assert_eq!(web1["health_check"], "tcp1");
    let since = web1["state_since_unix_ms"].as_u64().unwrap();
    assert!(
        since <= now && now - since < 30_000,
        "since {since} vs now {now}"
    );
    let dead = find(&v, "backends", "dead");
    assert_eq!(dead["last_check"]["ok"], false, "{dead}");
    assert!(
        dead["last_check"]["reason"]
            .as_str()
            .unwrap()
            .contains("refused"),
        "{dead}"
    );

    // A DSR Network vService says so (its replies bypass the balancer).
    let direct = find(&v, "vservices", "direct");
    assert_eq!(direct["mode"], "dsr", "{direct}");

    // The DNS vService: what `www` answers now, its policy and counters.
    wait_until("www answers 192.0.2.7", || async {
        let v = live().await;
        v["dns_vservices"][0]["names"][0]["a"] == json!(["192.0.2.7"])
    })
    .await;
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let query = [
        0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 3, b'w', b'w', b'w', 4, b'g', b's', b'l', b'b',
        4, b't', b'e', b's', b't', 0, 0, 1, 0, 1,
    ];
    sock.send_to(&query, ("127.0.0.1", dns_port)).await.unwrap();
    let mut buf = [0u8; 512];
    tokio::time::timeout(Duration::from_secs(2), sock.recv_from(&mut buf))
        .await
        .expect("the DNS vService answers")
        .unwrap();
    let v = live().await;
    let g = &v["dns_vservices"][0];
    assert_eq!(g["name"], "g", "{g}");
    assert_eq!(g["zone"], "gslb.test.", "{g}");
    assert_eq!(g["port"], dns_port, "{g}");
    assert_eq!(g["counters"]["queries"], 1, "{g}");
    assert_eq!(g["counters"]["answered"], 1, "{g}");
    assert_eq!(g["counters"]["formerr"], 0, "{g}");
    let www = &g["names"][0];
    assert_eq!(www["name"], "www.gslb.test.", "{www}");
    assert_eq!(www["policy"], "weighted", "{www}");
    assert_eq!(www["unreachable"], "skip", "{www}");
    assert_eq!(www["aaaa"], json!([]), "{www}");
    assert_eq!(www["sites"][0]["site"], "here", "{www}");
    assert_eq!(www["sites"][0]["state"], "OK", "{www}");
    // The same answer in /api/v1/gslb.
    let gslb = node.get("/api/v1/gslb").await.body;
    assert_eq!(gslb["names"][0]["a"], json!(["192.0.2.7"]), "{gslb}");

    // A reload polls the sites before it returns, here this daemon's own API: the live
    // payload must not wait for that reload (it would time the poll out, No Connection).
    let before = live().await["generated_unix_ms"].as_u64().unwrap();
    let started = Instant::now();
    let on = node
        .post("/api/v1/backends/real1/maintenance", json!({"on": true}))
        .await;
    assert_eq!(on.status, 200, "{}", on.body);
    let took = started.elapsed();
    let gslb = node.get("/api/v1/gslb").await.body;
    let lost: Vec<&Value> = gslb["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["to"] == "No Connection" && t["at_unix_ms"].as_u64() > Some(before))
        .collect();
    assert!(lost.is_empty(), "the reload cut the site off: {lost:?}");
    assert!(took < Duration::from_secs(3), "the reload took {took:?}");
    node.shutdown().await;
}
