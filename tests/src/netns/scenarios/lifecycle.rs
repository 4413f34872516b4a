//! Lifecycle scenarios: a reload that removes a backend and a daemon restart, both with
//! long-lived connections open across them, for either address family.

use std::time::Duration;

use super::Family;
use crate::netns::client::{HeldConn, ask_many, count_by_backend, tcp_ask_at};
use crate::netns::configs::{all_names, backend_services, load, validated, vservice};
use crate::netns::family::at;
use crate::netns::lbctl::require_data_path;
use crate::netns::status::{vip_entry, vip_packets, wait_until};

/// After `lb load` of a config without b3, long connections on b1/b2 keep working and new
/// connections never reach b3 (they use both remaining backends).
pub fn backend_removal_keeps_other_connections(family: Family) {
    require_data_path().expect("data path built");
    let label = family.label("removal");
    let (vip, name) = (family.vip(15), family.vip_name("web"));
    let topo = family.topology(None);
    topo.tcp_servers(8000).expect("servers");
    let services = backend_services(&topo, family, 8000, &[1, 1, 1]);
    let names = all_names(&topo);
    let addr = at(vip, 8000);
    let web = |list: &[&str]| vservice(&name, "tcp-l4", vip, "port = 8000", "nat", list);
    load(&topo, &(services.clone() + &web(&names)));
    // At least 10 connections and at least one on each backend (bounded: 40).
    let mut conns = topo
        .client
        .run(|| {
            let mut conns = Vec::new();
            while conns.len() < 40 {
                conns.push(HeldConn::open_at(addr).expect("open long connection"));
                let seen =
                    count_by_backend(&conns.iter().map(|c| c.reply.clone()).collect::<Vec<_>>());
                if conns.len() >= 10 && seen.len() == 3 {
                    break;
                }
            }
            conns
        })
        .expect("client namespace");
    let before = count_by_backend(&conns.iter().map(|c| c.reply.clone()).collect::<Vec<_>>());
    println!("{label}: {} long connections: {before:?}", conns.len());
    assert_eq!(before.len(), 3, "long connections on every backend");
    for (i, c) in conns.iter_mut().enumerate() {
        c.echo(&format!("before {i}")).expect("echo before reload");
    }
    load(&topo, &(services + &web(&["b1", "b2"])));
    let mut kept = 0;
    for (i, c) in conns.iter_mut().enumerate() {
        let result = c.echo(&format!("after {i}"));
        if c.reply.backend == "b3" {
            let shown = result.as_ref().map_err(|e| format!("{e:#}"));
            println!("{label}: connection {i} on removed b3 after reload: {shown:?}");
        } else {
            result.unwrap_or_else(|e| panic!("connection {i} on {} broke: {e:#}", c.reply.backend));
            kept += 1;
        }
    }
    println!("{label}: {kept} connections on b1/b2 still work after the reload");
    let replies = ask_many(&topo.client, 60, tcp_ask_at, addr);
    let counts = count_by_backend(&replies);
    println!("{label}: 60 new connections after reload: {counts:?}");
    assert!(
        !counts.contains_key("b3"),
        "new connection reached removed b3"
    );
    assert_eq!(counts.len(), 2, "both remaining backends used");
}

/// SIGTERM exits `lb run` without detaching (forwarding continues while the daemon is down)
/// and a restarted daemon adopts the pinned program and maps (counters continue), so an
/// established TCP connection keeps working and new ones are still balanced.
pub fn daemon_restart_keeps_connections_and_balancing(family: Family) {
    require_data_path().expect("data path built");
    let label = family.label("restart");
    let (vip, name) = (family.vip(16), family.vip_name("web"));
    let topo = family.topology(None);
    topo.tcp_servers(8000).expect("servers");
    let names = all_names(&topo);
    let cfg = backend_services(&topo, family, 8000, &[1, 1, 1])
        + &vservice(&name, "tcp-l4", vip, "port = 8000", "nat", &names);
    validated(&cfg);
    let addr = at(vip, 8000);
    let mut daemon = topo.lb_run(&cfg).expect("start lb run");
    let ready = wait_until(Duration::from_secs(15), || {
        daemon.is_running()
            && topo
                .client
                .run(|| tcp_ask_at(addr))
                .map(|r| r.is_ok())
                .unwrap_or(false)
    });
    assert!(
        ready,
        "lb run never balanced the {} VIP; log:\n{}",
        family.name(),
        daemon.log()
    );
    let mut held = topo
        .client
        .run(|| HeldConn::open_at(addr))
        .expect("ns")
        .expect("held");
    held.echo("before").expect("echo before restart");
    println!("{label}: long connection on {}", held.reply.backend);

    daemon.signal(libc::SIGTERM).expect("SIGTERM");
    let status = daemon
        .wait_exit(Duration::from_secs(10))
        .expect("daemon exits");
    println!("{label}: daemon exited with {status}");
    let packets_down = vip_packets(&topo.lb_status().expect("status"), &name);
    for n in 0..3 {
        held.echo(&format!("down {n}"))
            .expect("echo while the daemon is down");
    }
    let while_down = ask_many(&topo.client, 10, tcp_ask_at, addr);
    println!("{label}: while down: {:?}", count_by_backend(&while_down));

    let mut daemon = topo.lb_run(&cfg).expect("restart lb run");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        daemon.is_running(),
        "restarted lb run exited; log:\n{}",
        daemon.log()
    );
    for n in 0..3 {
        held.echo(&format!("restarted {n}"))
            .expect("echo after restart");
    }
    let replies = ask_many(&topo.client, 60, tcp_ask_at, addr);
    let counts = count_by_backend(&replies);
    println!("{label}: 60 new connections after restart: {counts:?}");
    assert_eq!(counts.len(), 3, "spread over all backends");
    let packets_after = vip_packets(&topo.lb_status().expect("status"), &name);
    println!("{label}: VIP packets when down {packets_down:?}, after restart {packets_after:?}");
    let (Some(down), Some(after)) = (packets_down, packets_after) else {
        panic!("lb status --json has no vips[name={name}].counters.packets");
    };
    assert!(
        after > down,
        "counters continued (maps adopted, not recreated)"
    );
    daemon.signal(libc::SIGTERM).expect("SIGTERM");
    daemon
        .wait_exit(Duration::from_secs(10))
        .expect("daemon exits");
    drop(held);
}

/// S-MT3 with S-MT7: on a Network vService with `apply_admin_state = true`, the Maintenance
/// API call answers only once the XDP maps hold the change, so `lb status` read right after
/// the answer shows b1 drained (weight 0: no new flows, its open ones continue, S-MT1) and
/// back at its weight after "off", five times each way.
pub fn maintenance_holds_in_the_maps_when_the_api_answers(family: Family) {
    require_data_path().expect("data path built");
    let label = family.label("admin-maps");
    let (vip, name) = (family.vip(17), family.vip_name("web"));
    let topo = family.topology(None);
    topo.tcp_servers(8000).expect("servers");
    let names = all_names(&topo);
    let api_port = 18080;
    let cfg = format!("[api]\nlisten = \"127.0.0.1:{api_port}\"\n\n")
        + &backend_services(&topo, family, 8000, &[1, 1, 1])
        + &vservice(&name, "tcp-l4", vip, "port = 8000", "nat", &names)
        + "apply_admin_state = true\n";
    validated(&cfg);
    let addr = at(vip, 8000);
    let mut daemon = topo.lb_run(&cfg).expect("start lb run");
    let ready = wait_until(Duration::from_secs(15), || {
        daemon.is_running()
            && topo
                .client
                .run(|| tcp_ask_at(addr))
                .map(|r| r.is_ok())
                .unwrap_or(false)
    });
    assert!(ready, "lb run never balanced; log:\n{}", daemon.log());
    let b1_takes_new_flows = || {
        let status = topo.lb_status().expect("lb status");
        let vip = vip_entry(&status, &name).expect("the VIP in lb status");
        let backends = vip["backends"].as_array().cloned().unwrap_or_default();
        let b1 = backends.iter().find(|b| b["name"] == "b1");
        b1.and_then(|b| b["weight"].as_u64()).unwrap_or(0) > 0
    };
    assert!(b1_takes_new_flows(), "b1 in the table before Maintenance");
    for round in 0..5 {
        for on in [true, false] {
            let answer = topo
                .balancer
                .run(|| post_json(api_port, "/api/v1/backends/b1/maintenance", on))
                .expect("ns")
                .expect("API call");
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            assert_eq!(
                b1_takes_new_flows(),
                !on,
                "round {round}: the maps did not hold Maintenance {on} when the API answered"
            );
        }
    }
    println!("{label}: 10 Maintenance calls, each held in the XDP maps when answered");
    let replies = ask_many(&topo.client, 30, tcp_ask_at, addr);
    assert_eq!(count_by_backend(&replies).len(), 3, "b1 serves again");
    let _ = daemon.signal(libc::SIGTERM);
    let _ = daemon.wait_exit(Duration::from_secs(10));
}

/// POST `{"on": on}` to the API on 127.0.0.1:`port` of the current namespace; the answer.
fn post_json(port: u16, path: &str, on: bool) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port))?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let body = format!("{{\"on\": {on}}}");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: lb\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes())?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer)?;
    Ok(answer)
}
