//! `lb node drain` / `resume` through the REST API against a real daemon without XDP
//! (S-AN2): the drained state is answered, saved, and kept by a restarted daemon until
//! resume; each Network VIP is listed with why it is not announced. `[bgp]` stays off here
//! so the test changes no routing table of the machine (e2e_scale drives the real routes).

use std::net::SocketAddr;
use std::time::Duration;

use hyper::Method;
use lb::api::client::ApiClient;
use serde_json::Value;
use tokio::sync::watch;

mod ports;
use ports::free_port;

fn config(api_port: u16) -> String {
    format!(
        "[api]\nlisten = \"127.0.0.1:{api_port}\"\n\n\
         [[backend_service]]\nname = \"b1\"\naddress = \"127.0.0.1\"\nport = 80\n\n\
         [[vservice]]\nname = \"web\"\nkind = \"tcp-l4\"\naddress = \"10.99.0.1\"\nport = 80\n\
         forwarding = \"dsr\"\nbackends = [\"b1\"]\n"
    )
}

/// Starts a daemon and its API on `path`; returns its stop handles.
async fn start(
    path: &std::path::Path,
    api_port: u16,
) -> (lb::daemon::Running, watch::Sender<bool>, ApiClient) {
    let cfg = lb::config::load(path).expect("valid config");
    let running = lb::daemon::start(None, cfg, path.to_path_buf())
        .await
        .expect("daemon starts");
    let (stop, stop_rx) = watch::channel(false);
    let listen: SocketAddr = format!("127.0.0.1:{api_port}").parse().expect("address");
    tokio::spawn(lb::api::serve(
        running.daemon.clone(),
        listen,
        None,
        stop_rx,
    ));
    let client = ApiClient::new(
        &format!("http://127.0.0.1:{api_port}"),
        None,
        Duration::from_secs(5),
    );
    for _ in 0..100 {
        if client.call(Method::GET, "/api/v1/node", None).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (running, stop, client)
}

async fn node(client: &ApiClient, method: Method, path: &str) -> Value {
    let answer = client.call(method, path, None).await.expect("API answers");
    assert!(answer.ok(), "{path}: {}", answer.error_text());
    answer.body
}

/// S-AN2: drain is answered at once, saved, survives a restart of the daemon, and resume
/// undoes it; the VIP says why it is not announced in the operator's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_an2_drain_is_saved_across_restarts_until_resume() {
    let dir = std::env::temp_dir().join(format!("lb-node-drain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("lb.toml");
    let api_port = free_port();
    std::fs::write(&path, config(api_port)).expect("config");
    let drained_file = lb::daemon::drained_path(&path);
    let _ = std::fs::remove_file(&drained_file);

    let (running, stop, client) = start(&path, api_port).await;
    let before = node(&client, Method::GET, "/api/v1/node").await;
    assert_eq!(before["bgp"]["drained"], false, "{before}");
    assert_eq!(before["bgp"]["enabled"], false, "{before}");
    let vip = &before["bgp"]["vips"][0];
    assert_eq!(vip["address"], "10.99.0.1", "{before}");
    assert_eq!(vip["announced"], false, "{before}");
    assert!(
        vip["reason"]
            .as_str()
            .unwrap_or("")
            .contains("announcement is off"),
        "{before}"
    );

    let drained = node(&client, Method::POST, "/api/v1/node/drain").await;
    assert_eq!(drained["bgp"]["drained"], true, "{drained}");
    assert!(drained_file.exists(), "the drained state is saved");
    let _ = stop.send(true);
    running.stop().await;

    let (running, stop, client) = start(&path, api_port).await;
    let again = node(&client, Method::GET, "/api/v1/node").await;
    assert_eq!(
        again["bgp"]["drained"], true,
        "a restarted daemon stays drained: {again}"
    );
    let resumed = node(&client, Method::POST, "/api/v1/node/resume").await;
    assert_eq!(resumed["bgp"]["drained"], false, "{resumed}");
    assert!(!drained_file.exists(), "resume removes the saved state");
    let _ = stop.send(true);
    running.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Bad input: a reload whose `[bgp] device` does not exist is refused with the
/// reason and the running configuration stays (S-AN1 announces nothing on a guess).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_an1_reload_with_a_missing_bgp_device_is_refused() {
    let dir = std::env::temp_dir().join(format!("lb-node-device-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("lb.toml");
    let api_port = free_port();
    std::fs::write(&path, config(api_port)).expect("config");
    let (running, stop, _client) = start(&path, api_port).await;
    let bad = format!(
        "{}\n[bgp]\nenabled = true\ndevice = \"lbnosuchdev0\"\n",
        config(api_port)
    );
    std::fs::write(&path, bad).expect("config");
    let err = running
        .daemon
        .reload_from_file()
        .await
        .expect_err("the reload is refused");
    let text = format!("{err:#}");
    assert!(
        text.contains("bgp.device `lbnosuchdev0` does not exist"),
        "{text}"
    );
    assert!(
        !running.daemon.config().bgp.enabled,
        "the running configuration stays"
    );
    let _ = stop.send(true);
    running.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
