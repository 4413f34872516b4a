//! Configuration errors of vServices: ports, sizes and addresses, listeners that take the
//! same packets, the keys of L7 vServices (HTTP and L7 TCP) and of Conditional Backend
//! Services sets. Each test checks the exact line an error is reported on, the field path,
//! and a message naming the field or the rule.

use lb::config::parse;

mod support {
    pub mod config_issues;
}
use support::config_issues::*;

// ----- ports, sizes, addresses -----------------------------------------------------------

#[test]
fn port_range_start_after_end() {
    let more = vservice(&["port_range = \"2000-1000\"", "backends = [\"web1\"]"]);
    let words = "start 2000 is greater than end 1000";
    let issue = assert_issue(&with_backends(&more), "vservice[0].port_range", 25, words);
    assert_eq!(
        issue.to_string(),
        "lb.toml:25:14: vservice[0].port_range: start 2000 is greater than end 1000"
    );
}

#[test]
fn port_zero_on_single_port_vservice() {
    let more = vservice(&["port = 0", "backends = [\"web1\"]"]);
    let words = "port 0 cannot be listened on";
    assert_issue(&with_backends(&more), "vservice[0].port", 25, words);
}

#[test]
fn any_l3_with_port_or_range() {
    let text = with_backends(&[
        "[[vservice]]",
        "name = \"all\"",
        "kind = \"any-l3\"",
        "address = \"192.0.2.9\"",
        "port = 80",
        "port_range = [1, 5]",
        "backends = [\"web1\"]",
    ]);
    assert_issue(&text, "vservice[0].port", 25, "remove `port`");
    assert_issue(&text, "vservice[0].port_range", 26, "remove `port_range`");
}

#[test]
fn exactly_one_of_port_and_port_range() {
    let more = vservice(&["port = 80", "port_range = \"1-2\"", "backends = [\"web1\"]"]);
    let words = "exactly one of `port` or `port_range`";
    assert_issue(&with_backends(&more), "vservice[0].port_range", 26, words);
    let more = vservice(&["backends = [\"web1\"]"]);
    let words = "needs `port` or `port_range`";
    assert_issue(&with_backends(&more), "vservice[0].port", 21, words);
}

#[test]
fn maglev_size_must_be_prime_and_in_range() {
    let more = vservice(&["port = 80", "maglev_size = 65536", "backends = [\"web1\"]"]);
    let text = with_backends(&more);
    assert_issue(&text, "vservice[0].maglev_size", 26, "65536 is not prime");
    let more = vservice(&["port = 80", "maglev_size = 13", "backends = [\"web1\"]"]);
    let words = "13 is out of range 251..=1048576";
    assert_issue(&with_backends(&more), "vservice[0].maglev_size", 26, words);
}

#[test]
fn conn_table_size_out_of_range() {
    let text = doc(&["[xdp]", "conn_table_size = 100"]);
    let words = "100 is out of range 1024..=33554432";
    assert_issue(&text, "xdp.conn_table_size", 2, words);
}

#[test]
fn dsr_backend_must_keep_the_port() {
    // web1 listens on 80 (fine), web2 on 8080 (reached through the group): only web2 fails.
    let more = vservice(&["port = 80", "forwarding = \"dsr\"", "backends = [\"pool\"]"]);
    let words = "backend service `web2` has port 8080: dsr cannot change ports";
    assert_issue(&with_backends(&more), "vservice[0].backends[0]", 27, words);
}

#[test]
fn any_l3_backend_must_use_port_zero() {
    let text = with_backends(&[
        "[[vservice]]",
        "name = \"all\"",
        "kind = \"any-l3\"",
        "address = \"192.0.2.9\"",
        "backends = [\"web1\"]",
    ]);
    let words = "backend service `web1` has port 80: an any-l3 vservice forwards every";
    assert_issue(&text, "vservice[0].backends[0]", 25, words);
}

#[test]
fn ipv6_vip_with_ipv4_backends_is_rejected() {
    let more = vservice(&["port = 80", "backends = [\"web1\"]"]);
    let text = with_backends(&more).replace("\"192.0.2.1\"", "\"2001:db8::1\"");
    let words = "backend service `web1` has IPv4 address 10.0.1.1 but the VIP 2001:db8::1 is IPv6: \
                 a Network vService forwards within one family (no NAT46)";
    assert_issue(&text, "vservice[0].backends[0]", 26, words);
}

#[test]
fn ipv6_backend_of_an_ipv4_vip_is_rejected() {
    let more = vservice(&["port = 80", "backends = [\"web1\", \"web2\"]"]);
    let text = with_backends(&more).replace("\"10.0.1.2\"", "\"2001:db8::2\"");
    let words = "backend service `web2` has IPv6 address 2001:db8::2 but the VIP 192.0.2.1 is IPv4";
    assert_issue(&text, "vservice[0].backends[1]", 26, words);
}

#[test]
fn ipv6_network_vservice_with_ipv6_backends_is_accepted() {
    let more = vservice(&["port = 80", "backends = [\"web1\", \"web2\"]"]);
    let text = with_backends(&more)
        .replace("\"192.0.2.1\"", "\"2001:db8::1\"")
        .replace("\"10.0.1.1\"", "\"2001:db8:1::1\"")
        .replace("\"10.0.1.2\"", "\"2001:db8:1::2\"");
    let cfg = parse(&text, "lb.toml").expect("an IPv6 vService over IPv6 backends");
    assert_eq!(
        cfg.vservices[0].address,
        "2001:db8::1".parse::<std::net::IpAddr>().unwrap()
    );
}

#[test]
fn link_local_vip_is_rejected() {
    let more = vservice(&["port = 80", "backends = [\"web1\"]"]);
    let text = with_backends(&more).replace("\"192.0.2.1\"", "\"fe80::1\"");
    assert_issue(
        &text,
        "vservice[0].address",
        24,
        "fe80::1: a link-local address is scoped",
    );
}

#[test]
fn zone_scoped_address_is_rejected() {
    let more = vservice(&["port = 80", "backends = [\"web1\"]"]);
    let text = with_backends(&more).replace("\"192.0.2.1\"", "\"fe80::1%eth0\"");
    assert_issue(
        &text,
        "vservice[0].address",
        24,
        "`fe80::1%eth0` has a zone index",
    );
}

#[test]
fn link_local_backend_of_a_network_vservice_is_rejected() {
    let more = vservice(&["port = 80", "backends = [\"web2\"]"]);
    let text = with_backends(&more)
        .replace("\"192.0.2.1\"", "\"2001:db8::1\"")
        .replace("\"10.0.1.2\"", "\"fe80::2\"");
    assert_issue(
        &text,
        "vservice[0].backends[0]",
        26,
        "backend service `web2` has address fe80::2: a link-local address",
    );
}

/// A dual-stack tcp-l4 vService over web1 (with `address6`, line 4) and web2; `web2_v6` is
/// line 12 (still in web2's table), `vip6` line 19, the vService's backends line 20.
fn dual_stack(web2_v6: &str, vip6: &str) -> String {
    doc(&[
        "[[backend_service]]",
        "name = \"web1\"",
        "address = \"10.0.1.1\"",
        "address6 = \"2001:db8:1::1\"",
        "port = 80",
        "",
        "[[backend_service]]",
        "name = \"web2\"",
        "address = \"10.0.1.2\"",
        "port = 80",
        "",
        web2_v6,
        "",
        "[[vservice]]",
        "name = \"web\"",
        "kind = \"tcp-l4\"",
        "address = \"192.0.2.1\"",
        "port = 80",
        vip6,
        "backends = [\"web1\", \"web2\"]",
    ])
}

#[test]
fn dual_stack_vservice_shares_its_backends_by_name() {
    let text = dual_stack("address6 = \"2001:db8:1::2\"", "address6 = \"2001:db8::1\"");
    let cfg = parse(&text, "lb.toml").expect("a dual-stack vService");
    let web = &cfg.vservices[0];
    assert_eq!(web.address.to_string(), "192.0.2.1");
    assert_eq!(web.address6, Some("2001:db8::1".parse().unwrap()));
    let vips: Vec<String> = web.vips().map(|a| a.to_string()).collect();
    assert_eq!(vips, ["192.0.2.1", "2001:db8::1"]);
    let web2 = &cfg.backend_services[1];
    assert_eq!(web2.address6, Some("2001:db8:1::2".parse().unwrap()));
    assert_eq!(
        web2.address_for("2001:db8::1".parse().unwrap()),
        Some("2001:db8:1::2".parse().unwrap())
    );
    assert_eq!(
        web2.health_key("2001:db8:1::2".parse().unwrap()),
        "web2 (IPv6)"
    );
    assert_eq!(web2.health_key("10.0.1.2".parse().unwrap()), "web2");
}

#[test]
fn dual_stack_backend_without_address6_is_rejected() {
    let text = dual_stack("", "address6 = \"2001:db8::1\"");
    let words = "backend service `web2` has IPv4 address 10.0.1.2 but the VIP 2001:db8::1 is IPv6: \
                 a Network vService forwards within one family (no NAT46); give it `address6`";
    assert_issue(&text, "vservice[0].backends[1]", 20, words);
}

#[test]
fn address6_must_be_ipv6_beside_an_ipv4_address() {
    let text = dual_stack("", "address6 = \"192.0.2.2\"");
    assert_issue(
        &text,
        "vservice[0].address6",
        19,
        "`192.0.2.2` is not an IPv6 address",
    );
    let text = dual_stack("", "address6 = \"2001:db8::1\"")
        .replace("address = \"10.0.1.1\"", "address = \"2001:db8:1::9\"");
    assert_issue(
        &text,
        "backend_service[0].address6",
        4,
        "`address` is already IPv6: put the IPv4 address in `address`",
    );
}

#[test]
fn address6_on_an_l7_vservice_points_at_the_wildcard() {
    let text = dual_stack("", "address6 = \"2001:db8::1\"").replace("tcp-l4", "http");
    assert_issue(
        &text,
        "vservice[0].address6",
        19,
        "`address6` applies only to Network vServices (tcp-l4, udp-l4, any-l3), not to this \
         http vService: to take IPv4 and IPv6 clients on one listener, set `address = \"::\"`",
    );
}

#[test]
fn ipv6_health_key_may_not_be_another_backends_name() {
    let text = dual_stack("", "").replace("name = \"web2\"", "name = \"web1 (IPv6)\"");
    assert_issue(
        &text,
        "backend_service[0].address6",
        4,
        "checked and shown as `web1 (IPv6)`, which is also the name of another backend service",
    );
}

#[test]
fn bad_backend_values() {
    let text = doc(&[
        "[[backend_service]]",
        "name = \"a\"",
        "address = \"10.0.0.300\"",
        "port = 70000",
        "weight = 65536",
        "max_connections = 0",
    ]);
    let words = "`10.0.0.300` is not an IPv4 or IPv6 address";
    assert_issue(&text, "backend_service[0].address", 3, words);
    assert_issue(
        &text,
        "backend_service[0].port",
        4,
        "70000 is out of range 0..=65535",
    );
    assert_issue(
        &text,
        "backend_service[0].weight",
        5,
        "65536 is out of range 0..=65535",
    );
    let words = "0 is out of range 1..=";
    assert_issue(&text, "backend_service[0].max_connections", 6, words);
}

// ----- listeners that take the same packets ----------------------------------------------

/// Two vServices: `first` on lines 23..=25 and `second` on lines 29..=31 (kind, address,
/// ports).
fn two_vservices(first: [&str; 3], second: [&str; 3]) -> String {
    with_backends(&[
        "[[vservice]]",
        "name = \"first\"",
        first[0],
        first[1],
        first[2],
        "backends = [\"gw\"]",
        "[[vservice]]",
        "name = \"second\"",
        second[0],
        second[1],
        second[2],
        "backends = [\"gw\"]",
        "[[backend_service]]",
        "name = \"gw\"",
        "address = \"10.0.9.9\"",
        "port = 0",
    ])
}

#[test]
fn same_address_protocol_and_port_conflict() {
    let text = two_vservices(
        ["kind = \"tcp-l4\"", "address = \"192.0.2.1\"", "port = 80"],
        ["kind = \"tcp-l4\"", "address = \"192.0.2.1\"", "port = 80"],
    );
    let words = "conflicts with vservice `first` (line 25)";
    assert_issue(&text, "vservice[1].port", 31, words);
}

#[test]
fn overlapping_port_ranges_conflict() {
    let text = two_vservices(
        [
            "kind = \"udp-l4\"",
            "address = \"192.0.2.1\"",
            "port_range = \"1000-2000\"",
        ],
        [
            "kind = \"udp-l4\"",
            "address = \"192.0.2.1\"",
            "port = 1500",
        ],
    );
    assert_issue(&text, "vservice[1].port", 31, "overlapping ports");
}

#[test]
fn any_l3_on_a_used_address_conflicts() {
    let text = two_vservices(
        ["kind = \"udp-l4\"", "address = \"192.0.2.1\"", "port = 53"],
        ["kind = \"any-l3\"", "address = \"192.0.2.1\"", ""],
    );
    let words = "an any-l3 vservice takes every protocol";
    assert_issue(&text, "vservice[1].address", 30, words);
}

#[test]
fn different_protocols_or_ports_do_not_conflict() {
    let text = two_vservices(
        [
            "kind = \"tcp-l4\"",
            "address = \"192.0.2.1\"",
            "port_range = [1000, 2000]",
        ],
        [
            "kind = \"udp-l4\"",
            "address = \"192.0.2.1\"",
            "port_range = [1000, 2000]",
        ],
    );
    assert!(parse(&text, "lb.toml").is_ok());
    let text = two_vservices(
        [
            "kind = \"tcp-l4\"",
            "address = \"192.0.2.1\"",
            "port_range = [1000, 2000]",
        ],
        [
            "kind = \"tcp-l4\"",
            "address = \"192.0.2.1\"",
            "port = 2001",
        ],
    );
    assert!(parse(&text, "lb.toml").is_ok());
}

// ----- L7 vServices (HTTP and L7 TCP) ----------------------------------------------------

/// A scratch directory for files the loader reads (TLS, error page).
fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lb-cfg-errors-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn network_only_keys_on_an_l7_vservice() {
    let text = l7(
        "http",
        &[
            "forwarding = \"dsr\"",
            "maglev_size = 251",
            "apply_admin_state = true",
            "port_range = \"1-2\"",
        ],
    );
    let words = "`forwarding` applies only to Network vServices (tcp-l4, udp-l4, any-l3), not \
                 to this http vService";
    assert_issue(&text, "vservice[0].forwarding", 27, words);
    let words = "`maglev_size` applies only to Network vServices";
    assert_issue(&text, "vservice[0].maglev_size", 28, words);
    let words = "`apply_admin_state` applies only to Network vServices";
    assert_issue(&text, "vservice[0].apply_admin_state", 29, words);
    let words = "an http vservice listens on one port: use `port`, not `port_range`";
    assert_issue(&text, "vservice[0].port_range", 30, words);
}

#[test]
fn l7_vservice_needs_a_port() {
    let text = l7("l7-tcp", &[]).replace("port = 8080\nbackends", "backends");
    assert_issue(&text, "vservice[0].port", 21, "vservice `s` needs `port`");
}

#[test]
fn l7_keys_on_a_network_vservice() {
    let more = vservice(&[
        "port = 80",
        "backends = [\"web1\"]",
        "algorithm = \"first\"", // 27
        "queue_size = 5",
        "[vservice.persistence]", // 29
        "type = \"source-ip\"",
        "[[vservice.conditional_set]]", // 31
        "name = \"c\"",
        "backends = [\"web2\"]",
        "host = \"a.example\"",
    ]);
    let text = with_backends(&more);
    let words =
        "`algorithm` applies only to http and l7-tcp vServices, not to this tcp-l4 vService";
    assert_issue(&text, "vservice[0].algorithm", 27, words);
    assert_issue(
        &text,
        "vservice[0].queue_size",
        28,
        "`queue_size` applies only",
    );
    assert_issue(
        &text,
        "vservice[0].persistence",
        29,
        "`persistence` applies only",
    );
    let words = "`conditional_set` applies only to http vServices";
    assert_issue(&text, "vservice[0].conditional_set", 31, words);
}

#[test]
fn http_only_keys_on_an_l7_tcp_vservice() {
    let text = l7(
        "l7-tcp",
        &[
            "error_page = \"/nonexistent/503.html\"", // 27
            "forwarded_headers = false",
            "[vservice.persistence]", // 29
            "type = \"cookie\"",
            "[vservice.tls]", // 31
            "cert = \"/nonexistent/c.pem\"",
            "key = \"/nonexistent/k.pem\"",
        ],
    );
    let words = "`error_page` applies only to http vServices, not to this l7-tcp vService";
    assert_issue(&text, "vservice[0].error_page", 27, words);
    let words = "`forwarded_headers` applies only to http vServices";
    assert_issue(&text, "vservice[0].forwarded_headers", 28, words);
    let words = "cookie persistence needs an HTTP vService";
    assert_issue(&text, "vservice[0].persistence.type", 30, words);
    assert_issue(&text, "vservice[0].tls", 31, "`tls` applies only to http");
    // Keys that do not apply are not read: their files are not reported as missing.
    assert_eq!(issues(&text).len(), 4, "{:#?}", issues(&text));
}

#[test]
fn l7_backends_need_a_port() {
    let text = l7("http", &[]).replace("backends = [\"web1\"]", "backends = [\"gw\"]")
        + "[[backend_service]]\nname = \"gw\"\naddress = \"10.0.9.9\"\nport = 0\n";
    let words = "backend service `gw` has port 0: an http vservice connects to the backend's";
    assert_issue(&text, "vservice[0].backends[0]", 26, words);
}

#[test]
fn l7_queue_size_and_timeouts_ranges() {
    let text = l7(
        "l7-tcp",
        &[
            "queue_size = 0", // 27
            "[vservice.timeouts]",
            "connect = 0", // 29
            "client = 86400",
            "server = -1", // 31
        ],
    );
    let words = "0 is out of range 1..=4294967295";
    assert_issue(&text, "vservice[0].queue_size", 27, words);
    let words = "0 s must be above 0 and below 86400 s";
    assert_issue(&text, "vservice[0].timeouts.connect", 29, words);
    let words = "86400 s must be above 0 and below 86400 s";
    assert_issue(&text, "vservice[0].timeouts.client", 30, words);
    assert_issue(
        &text,
        "vservice[0].timeouts.server",
        31,
        "must not be negative",
    );
}

#[test]
fn unknown_algorithm_is_named() {
    let text = l7("http", &["algorithm = \"fastest\""]);
    assert_issue(
        &text,
        "vservice[0].algorithm",
        27,
        "unknown variant `fastest`",
    );
}

#[test]
fn persistence_keys_are_checked() {
    let text = l7(
        "http",
        &[
            "[vservice.persistence]",
            "type = \"cookie\"",
            "cookie_name = \"my cookie\"", // 29
            "idle_timeout = 60",
        ],
    );
    let words = "`my cookie` is not a valid cookie name";
    assert_issue(&text, "vservice[0].persistence.cookie_name", 29, words);
    let words = "`idle_timeout` applies only to `type = \"source-ip\"` persistence";
    assert_issue(&text, "vservice[0].persistence.idle_timeout", 30, words);
    let text = l7(
        "l7-tcp",
        &[
            "[vservice.persistence]",
            "type = \"source-ip\"",
            "same_site = \"lax\"", // 29
            "idle_timeout = 0",
        ],
    );
    let words = "`same_site` applies only to `type = \"cookie\"` persistence";
    assert_issue(&text, "vservice[0].persistence.same_site", 29, words);
    let words = "0 s must be above 0";
    assert_issue(&text, "vservice[0].persistence.idle_timeout", 30, words);
}

#[test]
fn unreadable_files_are_named() {
    let dir = scratch("files");
    let cert = dir.join("cert.pem");
    std::fs::write(&cert, "x").unwrap();
    let missing = dir.join("missing.pem");
    let page = dir.join("no-503.html");
    let lines = [
        format!("error_page = \"{}\"", page.display()), // 27
        "[vservice.tls]".to_owned(),
        format!("cert = \"{}\"", cert.display()),
        format!("key = \"{}\"", missing.display()), // 30
    ];
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let text = l7("http", &lines);
    let words = format!("cannot read error page `{}`", page.display());
    assert_issue(&text, "vservice[0].error_page", 27, &words);
    let words = format!("cannot read `{}`", missing.display());
    assert_issue(&text, "vservice[0].tls.key", 30, &words);
    // The certificate exists: only the key is reported.
    assert!(
        issues(&text)
            .iter()
            .all(|i| i.field != "vservice[0].tls.cert")
    );
    let text = l7("http", &["[vservice.tls]", "cert = \"/c.pem\""]);
    assert_issue(&text, "vservice[0].tls", 27, "missing field `key`");
    std::fs::remove_dir_all(&dir).unwrap();
}

// ----- L7 listeners ------------------------------------------------------------------------

#[test]
fn two_l7_vservices_on_one_socket() {
    let text = two_vservices(
        ["kind = \"http\"", "address = \"127.0.0.1\"", "port = 80"],
        ["kind = \"l7-tcp\"", "address = \"127.0.0.1\"", "port = 80"],
    )
    .replace("port = 0", "port = 81");
    let words = "conflicts with vservice `first` (line 25) on 127.0.0.1: two L7 vservices";
    assert_issue(&text, "vservice[1].port", 31, words);
    // A wildcard address takes the port on every address of its family.
    let text = two_vservices(
        ["kind = \"http\"", "address = \"127.0.0.1\"", "port = 80"],
        ["kind = \"http\"", "address = \"0.0.0.0\"", "port = 80"],
    )
    .replace("port = 0", "port = 81");
    assert_issue(&text, "vservice[1].port", 31, "two L7 vservices");
}

#[test]
fn l7_vservice_on_a_network_vip() {
    let text = two_vservices(
        [
            "kind = \"tcp-l4\"",
            "address = \"192.0.2.1\"",
            "port_range = \"1-100\"",
        ],
        ["kind = \"http\"", "address = \"192.0.2.1\"", "port = 80"],
    )
    .replace("port = 0", "port = 81");
    let words = "the XDP program takes these TCP packets before the L7 proxy can see them";
    assert_issue(&text, "vservice[1].port", 31, words);
    let text = two_vservices(
        ["kind = \"any-l3\"", "address = \"192.0.2.1\"", ""],
        ["kind = \"l7-tcp\"", "address = \"192.0.2.1\"", "port = 80"],
    )
    .replace("port = 0", "port = 81");
    assert_issue(
        &text,
        "vservice[1].port",
        31,
        "an any-l3 vservice takes every",
    );
    // UDP on the same address and port does not touch a TCP proxy.
    let text = two_vservices(
        ["kind = \"udp-l4\"", "address = \"192.0.2.1\"", "port = 80"],
        ["kind = \"http\"", "address = \"192.0.2.1\"", "port = 80"],
    );
    let all = issues(&text);
    assert!(
        all.iter().all(|i| i.field != "vservice[1].port"),
        "{all:#?}"
    );
}

// ----- Conditional Backend Services sets ---------------------------------------------------

/// An http vService (lines 21..=26) with one conditional set `c` from line 27 on:
/// header on 27, name on 28, then `extra` from line 29 on.
fn set(extra: &[&str]) -> String {
    let mut lines = vec!["[[vservice.conditional_set]]", "name = \"c\""];
    lines.extend_from_slice(extra);
    l7("http", &lines)
}

#[test]
fn conditional_set_needs_a_condition_and_a_list() {
    let text = set(&[]);
    assert_issue(
        &text,
        "vservice[0].conditional_set[0]",
        27,
        "conditional set `c` has no condition",
    );
    assert_issue(
        &text,
        "vservice[0].conditional_set[0].backends",
        27,
        "conditional set `c` has no backends list",
    );
    let text = set(&["backends = []", "path = \"/\""]);
    let words = "conditional set `c` has no backends list";
    assert_issue(&text, "vservice[0].conditional_set[0].backends", 29, words);
}

#[test]
fn conditional_set_names_are_unique_and_lists_checked() {
    let text = set(&[
        "backends = [\"web1\", \"nope\", \"web1\"]", // 29
        "path = \"/a\"",
        "[[vservice.conditional_set]]",
        "name = \"c\"", // 32
        "backends = [\"pool\", \"gw\"]",
        "path = \"/b\"",
        "[[backend_service]]",
        "name = \"gw\"",
        "address = \"10.0.9.9\"",
        "port = 0",
    ]);
    let field = "vservice[0].conditional_set[0].backends[1]";
    assert_issue(&text, field, 29, "unknown backend service or group `nope`");
    let field = "vservice[0].conditional_set[0].backends[2]";
    assert_issue(&text, field, 29, "`web1` is listed twice");
    let words = "duplicate name `c`: already used by the conditional set at line 28";
    assert_issue(&text, "vservice[0].conditional_set[1].name", 32, words);
    let field = "vservice[0].conditional_set[1].backends[1]";
    assert_issue(&text, field, 33, "backend service `gw` has port 0");
}

#[test]
fn conditions_are_validated() {
    let text = set(&[
        "backends = [\"web2\"]",
        "host = \"api.example.com:8080\"", // 30
        "path = \"api\"",
        "path_prefix = \"/ok\"",
        "path_suffix = \"\"",
        "path_regex = \"^/v[0-9\"", // 34
        "method = [\"GET\", \"post\", \"GET\"]",
        "source_cidr = [\"10.0.0.0/8\", \"10.1.2.3/8\", \"10.0.0.0/40\"]", // 36
    ]);
    let f = |key: &str| format!("vservice[0].conditional_set[0].{key}");
    assert_issue(
        &text,
        &f("host"),
        30,
        "`api.example.com:8080` is not a host name",
    );
    assert_issue(&text, &f("path"), 31, "`api` must start with `/`");
    assert_issue(&text, &f("path_suffix"), 33, "must not be empty");
    let words = "`^/v[0-9` is not a valid regular expression: unclosed character class";
    assert_issue(&text, &f("path_regex"), 34, words);
    let words = "`post` is not an upper-case HTTP method";
    assert_issue(&text, &f("method[1]"), 35, words);
    assert_issue(&text, &f("method[2]"), 35, "`GET` is listed twice");
    let words = "`10.1.2.3/8` has host bits set: write 10.0.0.0/8";
    assert_issue(&text, &f("source_cidr[1]"), 36, words);
    assert_issue(
        &text,
        &f("source_cidr[2]"),
        36,
        "prefix length must be a number in 0..=32",
    );
    assert_eq!(issues(&text).len(), 8, "{:#?}", issues(&text));
}

#[test]
fn header_condition_takes_exactly_one_matcher() {
    let text = set(&[
        "backends = [\"web2\"]",
        "[vservice.conditional_set.header]", // 30
        "name = \"X Env\"",
        "exact = \"a\"",
        "prefix = \"b\"", // 33
    ]);
    let f = |key: &str| format!("vservice[0].conditional_set[0].header{key}");
    assert_issue(&text, &f(".name"), 31, "`X Env` is not an HTTP header name");
    let words = "set exactly one of `exact`, `prefix`, `suffix` or `regex`";
    assert_issue(&text, &f(".prefix"), 33, words);
    let text = set(&[
        "backends = [\"web2\"]",
        "[vservice.conditional_set.header]", // 30
        "name = \"X-Env\"",
    ]);
    assert_issue(&text, &f(""), 30, words);
}

// ----- tunnel forwarding (S-TN1) ----------------------------------------------------------

#[test]
fn ipip_needs_the_outer_source_prefix_of_its_family() {
    let more = vservice(&[
        "port = 80",
        "forwarding = \"ipip\"",
        "backends = [\"web1\"]",
    ]);
    let words = "`ipip` forwarding of an IPv4 VIP needs [xdp] tunnel_source_v4";
    assert_issue(&with_backends(&more), "vservice[0].forwarding", 26, words);
    // With the prefix the same vService is accepted.
    let mut lines = more.clone();
    lines.extend_from_slice(&["[xdp]", "tunnel_source_v4 = \"10.255.0.0/24\""]);
    parse(&with_backends(&lines), "lb.toml").expect("accepted with a prefix");
}

#[test]
fn ipip_backend_must_keep_the_port() {
    let more = vservice(&[
        "port = 80",
        "forwarding = \"ipip\"",
        "backends = [\"pool\"]",
        "[xdp]",
        "tunnel_source_v4 = \"10.255.0.0/24\"",
    ]);
    let words = "backend service `web2` has port 8080: ipip cannot change ports";
    assert_issue(&with_backends(&more), "vservice[0].backends[0]", 27, words);
}

#[test]
fn tunnel_source_must_be_a_prefix_of_its_family_without_host_bits() {
    let cases = [
        (
            "tunnel_source_v4 = \"10.255.0.1/24\"",
            "xdp.tunnel_source_v4",
            "has host bits set; write the prefix as 10.255.0.0/24",
        ),
        (
            "tunnel_source_v4 = \"fd00::/64\"",
            "xdp.tunnel_source_v4",
            "is not an IPv4 prefix",
        ),
        (
            "tunnel_source_v4 = \"10.255.0.0\"",
            "xdp.tunnel_source_v4",
            "is not an IPv4 prefix",
        ),
        (
            "tunnel_source_v6 = \"fd00:255::1/64\"",
            "xdp.tunnel_source_v6",
            "has host bits set; write the prefix as fd00:255::/64",
        ),
        (
            "tunnel_source_v6 = \"10.0.0.0/8\"",
            "xdp.tunnel_source_v6",
            "is not an IPv6 prefix",
        ),
    ];
    for (line, field, words) in cases {
        assert_issue(&doc(&["[xdp]", line]), field, 2, words);
    }
}

#[test]
fn gue_needs_the_outer_source_prefix_and_a_port_in_range() {
    let more = vservice(&["port = 80", "forwarding = \"gue\"", "backends = [\"web1\"]"]);
    let words = "`gue` forwarding of an IPv4 VIP needs [xdp] tunnel_source_v4";
    assert_issue(&with_backends(&more), "vservice[0].forwarding", 26, words);
    for bad in ["0", "65536", "-1"] {
        let text = doc(&["[xdp]", &format!("gue_port = {bad}")]);
        assert_issue(&text, "xdp.gue_port", 2, "out of range 1..=65535");
    }
}
