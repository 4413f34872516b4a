//! Every class of configuration error: the exact line it is reported on, the field path,
//! and a message naming the field or the rule.

use lb::config::{ConfigIssue, Handshake, HealthKind, parse};

/// Joins lines into a file, so that `lines[i]` is on line `i + 1`.
fn doc(lines: &[&str]) -> String {
    lines.join("\n") + "\n"
}

/// Parses text that must be rejected and returns its issues.
fn issues(text: &str) -> Vec<ConfigIssue> {
    match parse(text, "lb.toml") {
        Ok(config) => panic!("config was accepted: {config:?}"),
        Err(error) => error.errors,
    }
}

/// Asserts that exactly one issue has `field`, on `line`, with `words` in its message.
fn assert_issue(text: &str, field: &str, line: usize, words: &str) -> ConfigIssue {
    let all = issues(text);
    let matching: Vec<&ConfigIssue> = all.iter().filter(|i| i.field == field).collect();
    assert_eq!(
        matching.len(),
        1,
        "one issue for `{field}` expected in {all:#?}"
    );
    let issue = matching[0].clone();
    assert_eq!(issue.line, line, "{issue}");
    assert!(issue.message.contains(words), "`{words}` not in: {issue}");
    assert_eq!(issue.origin, "lb.toml");
    issue
}

/// Lines 1..=20: a valid health check, two backend services and a group, as context.
const BACKENDS: [&str; 20] = [
    "[[health_check]]",
    "name = \"tcp\"",
    "type = \"tcp\"",
    "",
    "[[backend_service]]",
    "name = \"web1\"",
    "address = \"10.0.1.1\"",
    "port = 80",
    "health_check = \"tcp\"",
    "",
    "[[backend_service]]",
    "name = \"web2\"", // line 12
    "address = \"10.0.1.2\"",
    "port = 8080",
    "",
    "[[backend_group]]",
    "name = \"pool\"",
    "members = [\"web1\", \"web2\"]",
    "",
    "",
];

/// `BACKENDS` followed by `more` (whose first line is line 21).
fn with_backends(more: &[&str]) -> String {
    let mut lines = BACKENDS.to_vec();
    lines.extend_from_slice(more);
    doc(&lines)
}

/// A tcp-l4 vService `v` on lines 21..=24, then `extra` from line 25 on.
fn vservice<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut lines = vec![
        "[[vservice]]",
        "name = \"v\"",
        "kind = \"tcp-l4\"",
        "address = \"192.0.2.1\"",
    ];
    lines.extend_from_slice(extra);
    lines
}

// ----- reading: syntax, types, unknown and missing fields ---------------------------------

#[test]
fn syntax_error_has_its_line() {
    let text = doc(&[
        "[xdp]",
        "pin_dir = \"/sys/fs/bpf/lb\"",
        "conn_table_size = = 5",
    ]);
    let all = issues(&text);
    let syntax = all
        .iter()
        .find(|i| i.field.is_empty())
        .expect("a syntax error");
    assert_eq!(syntax.line, 3, "{all:?}");
    assert!(syntax.message.starts_with("TOML syntax"), "{syntax}");
    // The table holding it is not checked, and says so (issue 19).
    let skipped = assert_issue(&text, "xdp", 1, "the checks of its 2 keys were skipped");
    assert!(
        skipped.message.contains("syntax error at line 3"),
        "{skipped}"
    );
}

#[test]
fn wrong_type_names_the_field() {
    let text = doc(&["[xdp]", "", "conn_table_size = \"big\""]);
    let issue = assert_issue(&text, "xdp.conn_table_size", 3, "invalid type");
    assert_eq!(issue.column, 19);
}

#[test]
fn proxy_workers_out_of_range_names_the_field() {
    let text = doc(&["[proxy]", "workers = 0"]);
    assert_issue(&text, "proxy.workers", 2, "0 is out of range 1..=256");
    let text = doc(&["[proxy]", "threads = 2"]);
    assert_issue(&text, "proxy.threads", 2, "unknown field `threads`");
}

#[test]
fn proxy_sched_slice_out_of_range_names_the_field() {
    for bad in ["50", "-1", "100001"] {
        let text = doc(&["[proxy]", &format!("sched_slice_us = {bad}")]);
        assert_issue(
            &text,
            "proxy.sched_slice_us",
            2,
            &format!("{bad} is out of range: 0 (the kernel's default) or 100..=100000"),
        );
    }
    let text = doc(&["[proxy]", "sched_slice_us = \"fast\""]);
    assert_issue(&text, "proxy.sched_slice_us", 2, "invalid type");
}

#[test]
fn proxy_header_limits_out_of_range_name_the_field() {
    let text = doc(&["[proxy]", "max_header_bytes = 100"]);
    assert_issue(
        &text,
        "proxy.max_header_bytes",
        2,
        "100 is out of range 1024..=1048576",
    );
    // A line may not be longer than the whole head.
    let text = doc(&[
        "[proxy]",
        "max_header_bytes = 4096",
        "max_header_line_bytes = 8192",
    ]);
    assert_issue(
        &text,
        "proxy.max_header_line_bytes",
        3,
        "8192 is out of range 256..=4096",
    );
    let cfg = parse(&doc(&["[proxy]", "max_header_bytes = 4096"]), "lb.toml").expect("valid");
    let limits = cfg.proxy.header_limits;
    assert_eq!(
        (limits.head, limits.line),
        (4096, 4096),
        "the line default fits the head"
    );
    let cfg = parse("", "lb.toml").expect("valid");
    let limits = cfg.proxy.header_limits;
    assert_eq!(
        (limits.head, limits.line),
        (16384, 8192),
        "HAProxy- and nginx-like defaults"
    );
}

#[test]
fn retries_out_of_range_or_on_a_network_vservice_name_the_field() {
    let more = vservice(&["port = 80", "backends = [\"web1\"]", "retries = 1"]);
    assert_issue(
        &with_backends(&more),
        "vservice[0].retries",
        27,
        "`retries` applies only to http and l7-tcp vServices",
    );
    let more = vservice(&["port = 80", "backends = [\"web1\"]", "retries = 11"])
        .into_iter()
        .map(|l| {
            if l == "kind = \"tcp-l4\"" {
                "kind = \"http\""
            } else {
                l
            }
        })
        .collect::<Vec<_>>();
    assert_issue(
        &with_backends(&more),
        "vservice[0].retries",
        27,
        "11 is out of range 0..=10",
    );
}

/// S-RT1, S-RT2: `retry_on` names its conditions; the ones after a request went exist only
/// for http; `retry_budget` is a percentage.
#[test]
fn retry_on_and_retry_budget_name_what_is_wrong() {
    let kind = |kind: &'static str, extra: &'static str| {
        let more = vservice(&["port = 80", "backends = [\"web1\"]", extra]);
        more.into_iter()
            .map(|l| if l == "kind = \"tcp-l4\"" { kind } else { l })
            .collect::<Vec<_>>()
    };
    let http = |extra| kind("kind = \"http\"", extra);
    assert_issue(
        &with_backends(&http("retry_on = [\"connect-failure\", \"5xx\"]")),
        "vservice[0].retry_on[1]",
        27,
        "unknown retry condition `5xx`; expected connect-failure, empty-response or response-timeout",
    );
    assert_issue(
        &with_backends(&kind(
            "kind = \"l7-tcp\"",
            "retry_on = [\"empty-response\"]",
        )),
        "vservice[0].retry_on[0]",
        27,
        "`empty-response` applies only to http vServices",
    );
    assert_issue(
        &with_backends(&http("retry_budget = 150")),
        "vservice[0].retry_budget",
        27,
        "150 is out of range 0..=100",
    );
    let cfg = parse(
        &with_backends(&http("retry_on = [\"response-timeout\"]")),
        "lb.toml",
    );
    let retry = cfg.expect("valid").vservices[0]
        .l7
        .as_ref()
        .map(|l7| l7.retry)
        .expect("l7");
    assert_eq!(
        (
            retry.on_connect_failure,
            retry.on_empty_response,
            retry.on_response_timeout
        ),
        (false, false, true),
        "a written list replaces the default one"
    );
}

#[test]
fn unknown_field_is_named() {
    let more = vservice(&["port = 80", "backends = [\"web1\"]", "colour = \"blue\""]);
    assert_issue(
        &with_backends(&more),
        "vservice[0].colour",
        27,
        "unknown field `colour`",
    );
}

#[test]
fn missing_required_field_is_named() {
    let text = doc(&["[[backend_service]]", "name = \"a\"", "port = 80"]);
    assert_issue(&text, "backend_service[0]", 1, "missing field `address`");
}

#[test]
fn unknown_section_is_named() {
    let text = doc(&["[xdp]", "", "[[backend]]", "name = \"a\""]);
    assert_issue(&text, "backend", 3, "unknown section `backend`");
}

// ----- names and references --------------------------------------------------------------

#[test]
fn duplicate_health_check_points_at_second_and_names_first() {
    let text = doc(&[
        "[[health_check]]",
        "name = \"h\"",
        "type = \"tcp\"",
        "[[health_check]]",
        "name = \"h\"",
        "type = \"ping\"",
    ]);
    let words = "already used by the health check at line 2";
    assert_issue(&text, "health_check[1].name", 5, words);
}

#[test]
fn services_and_groups_share_one_namespace() {
    let text = with_backends(&[
        "[[backend_group]]",
        "name = \"web2\"",
        "members = [\"web1\"]",
    ]);
    let words = "already used by the backend service at line 12";
    assert_issue(&text, "backend_group[1].name", 22, words);
}

#[test]
fn duplicate_vservice_name() {
    let mut more = vservice(&["port = 80", "backends = [\"web1\"]", ""]);
    more.extend([
        "[[vservice]]",
        "name = \"v\"", // line 29
        "kind = \"udp-l4\"",
        "address = \"192.0.2.1\"",
        "port = 80",
        "backends = [\"web1\"]",
    ]);
    let words = "duplicate name `v`: already used by the vservice at line 22";
    assert_issue(&with_backends(&more), "vservice[1].name", 29, words);
}

#[test]
fn unknown_health_check_reference() {
    let text = doc(&[
        "[[backend_service]]",
        "name = \"a\"",
        "address = \"10.0.0.1\"",
        "port = 1",
        "health_check = \"nope\"",
    ]);
    let words = "unknown health check `nope`";
    assert_issue(&text, "backend_service[0].health_check", 5, words);
}

#[test]
fn unknown_backend_in_vservice_list() {
    let more = vservice(&["port = 80", "backends = [\"web1\", \"web9\"]"]);
    let words = "unknown backend service or group `web9`";
    assert_issue(&with_backends(&more), "vservice[0].backends[1]", 26, words);
}

#[test]
fn unknown_or_nested_group_member() {
    let text = with_backends(&[
        "[[backend_group]]",
        "name = \"outer\"",
        "members = [\"pool\", \"ghost\"]",
    ]);
    assert_issue(
        &text,
        "backend_group[1].members[0]",
        23,
        "`pool` is a backend group",
    );
    let words = "unknown backend service `ghost`";
    assert_issue(&text, "backend_group[1].members[1]", 23, words);
}

#[test]
fn empty_group_is_rejected() {
    let text = with_backends(&["[[backend_group]]", "name = \"none\"", "members = []"]);
    assert_issue(&text, "backend_group[1].members", 23, "has no members");
}

#[test]
fn duplicates_inside_lists() {
    let text = with_backends(&[
        "[[backend_group]]",
        "name = \"twice\"",
        "members = [\"web1\", \"web1\"]",
    ]);
    assert_issue(
        &text,
        "backend_group[1].members[1]",
        23,
        "`web1` is listed twice",
    );
    let more = vservice(&["port = 80", "backends = [\"web2\", \"web2\"]"]);
    let text = with_backends(&more);
    assert_issue(
        &text,
        "vservice[0].backends[1]",
        26,
        "`web2` is listed twice",
    );
    let more = vservice(&["port = 80", "backends = [\"web1\", \"pool\"]"]);
    let words = "backend service `web1` (member of `pool`) is already in this list";
    assert_issue(&with_backends(&more), "vservice[0].backends[1]", 26, words);
    let more = vservice(&["port = 80", "backends = [\"pool\", \"web2\"]"]);
    let words = "backend service `web2` is already in this list through `pool`";
    assert_issue(&with_backends(&more), "vservice[0].backends[1]", 26, words);
}

#[test]
fn missing_or_empty_backends_list() {
    let words = "vservice `v` has no backends list";
    let more = vservice(&["port = 80"]);
    assert_issue(&with_backends(&more), "vservice[0].backends", 21, words);
    let more = vservice(&["port = 80", "backends = []"]);
    assert_issue(&with_backends(&more), "vservice[0].backends", 26, words);
}

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

// ----- health checks (S-HC1..4) ----------------------------------------------------------

/// A health check `h` of `kind` on lines 1..=3, then `extra` from line 4 on.
fn check(kind: &str, extra: &[&str]) -> String {
    let kind_line = format!("type = \"{kind}\"");
    let mut lines = vec!["[[health_check]]", "name = \"h\"", kind_line.as_str()];
    lines.extend_from_slice(extra);
    doc(&lines)
}

#[test]
fn s_hc1_timeout_zero_is_an_error() {
    let text = check("tcp", &["timeout = 0"]);
    assert_issue(
        &text,
        "health_check[0].timeout",
        4,
        "timeout must be above 0",
    );
}

#[test]
fn s_hc1_required_counts_must_be_positive() {
    let text = check("tcp", &["required_successes = 0", "required_failures = 0"]);
    let words = "must be between 1 and";
    assert_issue(&text, "health_check[0].required_successes", 4, words);
    assert_issue(&text, "health_check[0].required_failures", 5, words);
}

#[test]
fn s_hc2_unknown_type() {
    let text = check("icmp", &[]);
    assert_issue(&text, "health_check[0].type", 3, "unknown variant `icmp`");
}

#[test]
fn s_hc2_field_of_another_type_is_named() {
    let words = "`path` applies only to http and https checks, not to a tcp check";
    assert_issue(
        &check("tcp", &["path = \"/\""]),
        "health_check[0].path",
        4,
        words,
    );
    let text = check("http", &["query_name = \"a.b\""]);
    let words = "`query_name` applies only to dns checks";
    assert_issue(&text, "health_check[0].query_name", 4, words);
    let text = check("http", &["verify_tls = true"]);
    let words = "`verify_tls` applies only to https checks";
    assert_issue(&text, "health_check[0].verify_tls", 4, words);
}

#[test]
fn s_hc2_tcp_handshake_is_half_open_or_full() {
    let text = check("tcp", &["handshake = \"syn\""]);
    let words = "`syn` is not a TCP check handshake: use \"half-open\"";
    assert_issue(&text, "health_check[0].handshake", 4, words);
    let text = check("http", &["handshake = \"full\""]);
    let words = "`handshake` applies only to tcp checks, not to a http check";
    assert_issue(&text, "health_check[0].handshake", 4, words);
    for (value, expected) in [
        ("half-open", Handshake::HalfOpen),
        ("full", Handshake::Full),
    ] {
        let text = check("tcp", &[&format!("handshake = \"{value}\"")]);
        let config = parse(&text, "lb.toml").expect(value);
        assert_eq!(config.health_checks[0].kind, HealthKind::Tcp(expected));
    }
    let config = parse(&check("tcp", &[]), "lb.toml").expect("no handshake");
    assert_eq!(
        config.health_checks[0].kind,
        HealthKind::Tcp(Handshake::HalfOpen),
        "half-open unless told otherwise"
    );
}

/// S-RT3: a passive profile watches 3 failures in a row and returns its server after 30 s
/// unless told otherwise; `passive_return` belongs to passive profiles only and is above 0;
/// `passive_failures` is at least 1.
#[test]
fn s_rt3_passive_profiles_and_their_fields_name_what_is_wrong() {
    let config = parse(&check("passive", &[]), "lb.toml").expect("defaults");
    let hc = &config.health_checks[0];
    assert_eq!(
        (&hc.kind, hc.passive_failures),
        (
            &HealthKind::Passive {
                return_after: std::time::Duration::from_secs(30)
            },
            Some(3)
        )
    );
    let text = check("tcp", &["passive_return = 10"]);
    let words = "`passive_return` applies only to passive checks, not to a tcp check";
    assert_issue(&text, "health_check[0].passive_return", 4, words);
    let text = check("passive", &["passive_return = 0"]);
    assert_issue(
        &text,
        "health_check[0].passive_return",
        4,
        "must be above 0 s",
    );
    let text = check("http", &["passive_failures = 0"]);
    assert_issue(
        &text,
        "health_check[0].passive_failures",
        4,
        "0 must be between 1",
    );
    let config = parse(&check("http", &["passive_failures = 5"]), "lb.toml").expect("valid");
    assert_eq!(config.health_checks[0].passive_failures, Some(5));
}

#[test]
fn s_hc2_dns_needs_query_name() {
    let text = check("dns", &["query_type = \"AAAA\""]);
    assert_issue(&text, "health_check[0].query_name", 1, "needs `query_name`");
    let text = check("dns", &["query_name = \"a.b\"", "query_type = \"MX\""]);
    assert_issue(
        &text,
        "health_check[0].query_type",
        5,
        "not a DNS query type",
    );
}

#[test]
fn s_hc2_http_fields_are_checked() {
    let text = check(
        "http",
        &[
            "method = \"get\"",
            "path = \"up\"",
            "expect_status = [200, 700]",
        ],
    );
    assert_issue(
        &text,
        "health_check[0].method",
        4,
        "`get` is not an HTTP method",
    );
    assert_issue(&text, "health_check[0].path", 5, "must start with `/`");
    let words = "700 is not an HTTP status code";
    assert_issue(&text, "health_check[0].expect_status[1]", 6, words);
}

#[test]
fn s_hc4_ping_period_zero_is_an_error() {
    let text = check("ping", &["period = 0"]);
    assert_issue(&text, "health_check[0].period", 4, "period must be above 0");
}

#[test]
fn s_hc4_negative_durations_are_errors() {
    let text = check("ping", &["period = -1", "timeout = -0.5"]);
    assert_issue(&text, "health_check[0].period", 4, "must not be negative");
    assert_issue(&text, "health_check[0].timeout", 5, "must not be negative");
    let text = doc(&["[reflection]", "l7_delay = -2"]);
    assert_issue(&text, "reflection.l7_delay", 2, "must not be negative");
}

// ----- all problems at once ----------------------------------------------------------------

#[test]
fn every_problem_is_reported_in_file_order() {
    let text = doc(&[
        "[xdp]",
        "conn_table_size = 5", // 2
        "[[health_check]]",
        "name = \"h\"",
        "type = \"tcp\"",
        "timeout = 0", // 6
        "[[backend_service]]",
        "name = \"a\"",
        "address = \"10.0.0.1\"",
        "port = \"x\"", // 10: the entry is partly unreadable, yet `a` is not "unknown" below
        "[[backend_service]]",
        "name = \"b\"",
        "address = \"10.0.0.2\"",
        "port = 1",
        "health_check = \"missing\"", // 15
        "[[vservice]]",
        "name = \"v\"",
        "kind = \"tcp-l4\"",
        "address = \"192.0.2.1\"",
        "port_range = \"9-1\"",             // 20
        "backends = [\"a\", \"b\", \"c\"]", // 21: only `c` is unknown
    ]);
    let all = issues(&text);
    let lines: Vec<usize> = all.iter().map(|i| i.line).collect();
    assert_eq!(lines, [2, 6, 10, 15, 20, 21], "{all:#?}");
    assert_eq!(all[5].field, "vservice[0].backends[2]");
    let shown = parse(&text, "lb.toml").unwrap_err().to_string();
    assert_eq!(shown.lines().count(), 6);
    assert!(shown.lines().all(|l| l.starts_with("lb.toml:")));
}

/// Asserts that the issues of `text` are exactly `expected`: for each (field, line, words)
/// one issue with that field, on that line, whose message holds the words, and no other.
fn assert_exactly(text: &str, expected: &[(&str, usize, &str)]) {
    let all = issues(text);
    for &(field, line, words) in expected {
        let found = all
            .iter()
            .filter(|i| i.field == field && i.line == line && i.message.contains(words))
            .count();
        assert_eq!(found, 1, "`{field}` line {line} `{words}` once in {all:#?}");
    }
    assert_eq!(all.len(), expected.len(), "unexpected issues in {all:#?}");
}

/// issue 19: serde stops at the first wrong type of a table; every one is reported, and
/// the entry's other keys are still checked.
#[test]
fn several_wrong_types_in_one_entry_are_all_reported() {
    let text = doc(&[
        "[[backend_service]]",
        "name = \"a\"",
        "address = 10",        // 3
        "port = \"80\"",       // 4
        "weight = \"heavy\"",  // 5
        "max_connections = 0", // 6: a semantic check of a readable key
        "backup = \"yes\"",    // 7
    ]);
    assert_exactly(
        &text,
        &[
            (
                "backend_service[0].address",
                3,
                "invalid type: integer `10`, expected a string",
            ),
            (
                "backend_service[0].port",
                4,
                "invalid type: string \"80\", expected an integer",
            ),
            ("backend_service[0].weight", 5, "expected an integer"),
            (
                "backend_service[0].max_connections",
                6,
                "0 is out of range 1..=",
            ),
            ("backend_service[0].backup", 7, "expected a boolean"),
        ],
    );
}

/// issue 19: a wrong type does not hide the semantic problems of the same vService.
#[test]
fn wrong_type_does_not_hide_the_entrys_semantic_problems() {
    let more = vservice(&[
        "port = \"http\"",                    // 25
        "backends = [\"web1\", \"nope\", 7]", // 26
        "maglev_size = 1000",                 // 27
        "forwarding = \"tunnel\"",            // 28
    ]);
    assert_exactly(
        &with_backends(&more),
        &[
            ("vservice[0].port", 25, "expected an integer"),
            (
                "vservice[0].backends[1]",
                26,
                "unknown backend service or group `nope`",
            ),
            (
                "vservice[0].backends[2]",
                26,
                "invalid type: integer `7`, expected a string",
            ),
            ("vservice[0].maglev_size", 27, "1000 is not prime"),
            ("vservice[0].forwarding", 28, "unknown variant `tunnel`"),
        ],
    );
}

/// issue 19: unknown keys and every missing required key of one entry, in one run.
#[test]
fn unknown_and_missing_keys_are_all_named() {
    let text = doc(&[
        "[[backend_service]]", // 1: lacks `address` and `port`
        "name = \"a\"",
        "adress = \"10.0.0.1\"", // 3
        "prot = 80",             // 4
        "[[dns_vservice]]",      // 5: lacks `zone` and a record
        "name = \"d\"",
        "address = \"192.0.2.53\"",
        "ttl = -5",   // 8
        "colour = 1", // 9
    ]);
    assert_exactly(
        &text,
        &[
            ("backend_service[0]", 1, "missing field `address`"),
            ("backend_service[0]", 1, "missing field `port`"),
            ("backend_service[0].adress", 3, "unknown field `adress`"),
            ("backend_service[0].prot", 4, "unknown field `prot`"),
            ("dns_vservice[0]", 5, "missing field `zone`"),
            (
                "dns_vservice[0].record",
                5,
                "needs at least one [[dns_vservice.record]]",
            ),
            ("dns_vservice[0].ttl", 8, "-5 is out of range 0..=86400"),
            ("dns_vservice[0].colour", 9, "unknown field `colour`"),
        ],
    );
}

/// issue 19: an entry with an unreadable value is still defined: lists that name it are
/// not told "unknown", and a check that needs its values (a port for an L7 vService) is
/// not made on a stand-in; its duplicate name is still found.
#[test]
fn references_to_a_partly_unreadable_entry_are_not_unknown() {
    let text = doc(&[
        "[[health_check]]",
        "name = \"h\"",
        "type = \"tcp\"",
        "period = \"2s\"", // 4
        "[[backend_service]]",
        "name = \"a\"",
        "address = \"10.0.0.1\"",
        "port = \"eighty\"", // 8: a stand-in port 0 must not give "has port 0" below
        "health_check = \"h\"",
        "[[backend_service]]",
        "name = \"a\"", // 11
        "address = \"10.0.0.2\"",
        "port = 80",
        "[[backend_group]]",
        "name = \"g\"",
        "members = [\"a\", \"ghost\"]", // 16
        "[[vservice]]",
        "name = \"web\"",
        "kind = \"http\"",
        "address = \"127.0.0.1\"",
        "port = 8080",
        "backends = [\"g\", \"b\"]", // 22
    ]);
    assert_exactly(
        &text,
        &[
            ("health_check[0].period", 4, "expected a number (seconds)"),
            ("backend_service[0].port", 8, "expected an integer"),
            (
                "backend_service[1].name",
                11,
                "duplicate name `a`: already used by the backend service at line 6",
            ),
            (
                "backend_group[0].members[1]",
                16,
                "unknown backend service `ghost`",
            ),
            (
                "vservice[0].backends[1]",
                22,
                "unknown backend service or group `b`",
            ),
        ],
    );
}

/// issue 19: where a table cannot be read without a key (a vService's `kind`, a
/// persistence `type`), one line says how many of its keys were not checked and why; the
/// rest of the file is checked.
#[test]
fn unreadable_kind_says_which_checks_were_skipped() {
    let text = with_backends(&[
        "[[vservice]]", // 21
        "name = \"v\"",
        "kind = \"tcp\"", // 23
        "address = \"192.0.2.1\"",
        "port = 80",
        "backends = [\"web1\"]",
        "[[vservice]]", // 27
        "name = \"w\"",
        "kind = \"http\"",
        "address = \"127.0.0.1\"",
        "port = 8080",
        "backends = [\"web1\", \"nobody\"]", // 32
        "[vservice.persistence]",            // 33
        "type = \"sticky\"",                 // 34
        "cookie_name = \"id\"",
        "idle_timeout = 60",
    ]);
    assert_exactly(
        &text,
        &[
            (
                "vservice[0]",
                21,
                "without a readable `kind`, the checks of its other 4 keys were skipped",
            ),
            ("vservice[0].kind", 23, "unknown variant `tcp`"),
            (
                "vservice[1].backends[1]",
                32,
                "unknown backend service or group `nobody`",
            ),
            (
                "vservice[1].persistence",
                33,
                "without a readable `type`, the checks of its other 2 keys were skipped",
            ),
            (
                "vservice[1].persistence.type",
                34,
                "unknown variant `sticky`",
            ),
        ],
    );
}

/// issue 19: a TOML syntax error no longer stops every check: the table holding it is left
/// out (one line says so) and every other table is checked.
#[test]
fn syntax_error_does_not_hide_other_tables() {
    let text = with_backends(&[
        "[[vservice]]", // 21
        "name = \"v\"",
        "kind = \"tcp-l4\"",
        "address = \"192.0.2.1\" 80", // 24
        "backends = [\"web1\"]",
        "[[vservice]]",
        "name = \"w\"",
        "kind = \"tcp-l4\"",
        "address = \"192.0.2.300\"", // 29
        "port = 70000",              // 30
        "backends = [\"web3\"]",     // 31
        "[proxy]",
        "workers = 0", // 33
    ]);
    let all = issues(&text);
    let syntax: Vec<&ConfigIssue> = all.iter().filter(|i| i.field.is_empty()).collect();
    assert!(!syntax.is_empty(), "{all:#?}");
    assert!(
        syntax
            .iter()
            .all(|i| i.line == 24 && i.message.starts_with("TOML syntax"))
    );
    let words = "the checks of its 4 keys were skipped: the TOML syntax error at line 24";
    let mut expected = vec![
        ("vservice[0]", 21, words),
        (
            "vservice[1].address",
            29,
            "`192.0.2.300` is not an IPv4 or IPv6 address",
        ),
        ("vservice[1].port", 30, "70000 is out of range"),
        (
            "vservice[1].backends[0]",
            31,
            "unknown backend service or group `web3`",
        ),
        ("proxy.workers", 33, "0 is out of range 1..=256"),
    ];
    for issue in &syntax {
        expected.push(("", issue.line, issue.message.as_str()));
    }
    assert_exactly(&text, &expected);
}

/// issue 19: problems of the single sections ([xdp], [api], [proxy], [cluster]) and of the
/// entries are reported together, several per section.
#[test]
fn section_and_entry_problems_are_reported_together() {
    let text = doc(&[
        "[xdp]",
        "conn_table_size = \"big\"", // 2
        "attach_mode = \"fast\"",    // 3
        "[api]",
        "listen = 9180",     // 5
        "token = \"short\"", // 6
        "[proxy]",
        "workers = \"4\"",    // 8
        "sched_slice_us = 5", // 9
        "[cluster]",
        "manual_sync = \"yes\"", // 11
        "[[cluster.peer]]",
        "name = \"p\"",
        "url = 5", // 14
        "[[backend_service]]",
        "name = \"a\"",
        "address = \"10.0.0.1\"",
        "port = 65536", // 18
    ]);
    assert_exactly(
        &text,
        &[
            ("xdp.conn_table_size", 2, "expected an integer"),
            ("xdp.attach_mode", 3, "unknown variant `fast`"),
            ("api.listen", 5, "expected a string"),
            ("api.token", 6, "at least 16"),
            ("proxy.workers", 8, "expected an integer"),
            ("proxy.sched_slice_us", 9, "5 is out of range"),
            ("cluster.manual_sync", 11, "expected a boolean"),
            ("cluster.peer[0].url", 14, "expected a string"),
            (
                "backend_service[0].port",
                18,
                "65536 is out of range 0..=65535",
            ),
        ],
    );
}

/// issue 19: duplicate names and bad references, in services, groups and vServices, all at
/// once.
#[test]
fn duplicate_names_and_bad_references_are_reported_together() {
    let more = vservice(&[
        "port = 80",
        "backends = [\"pool\", \"web3\"]", // 26
        "[[vservice]]",
        "name = \"v\"", // 28
        "kind = \"udp-l4\"",
        "address = \"192.0.2.2\"",
        "port = 53",
        "backends = [\"ghost\"]", // 32
        "[[backend_group]]",
        "name = \"web1\"",                  // 34
        "members = [\"web2\", \"nobody\"]", // 35
    ]);
    assert_exactly(
        &with_backends(&more),
        &[
            (
                "vservice[0].backends[1]",
                26,
                "unknown backend service or group `web3`",
            ),
            ("vservice[1].name", 28, "duplicate name `v`"),
            (
                "vservice[1].backends[0]",
                32,
                "unknown backend service or group `ghost`",
            ),
            (
                "backend_group[1].name",
                34,
                "duplicate name `web1`: already used by the backend service at line 6",
            ),
            (
                "backend_group[1].members[1]",
                35,
                "unknown backend service `nobody`",
            ),
        ],
    );
}

/// issue 19: problems of DNS vServices (a record's unreadable policy included) and of
/// vServices, in one run.
#[test]
fn dns_vservice_and_vservice_problems_are_reported_together() {
    let text = with_backends(&[
        "[[vservice]]",
        "name = \"web\"", // 22
        "kind = \"tcp-l4\"",
        "address = \"192.0.2.1\"",
        "port = 80",
        "backends = [\"web1\", \"web1\"]", // 26
        "[[dns_vservice]]",
        "name = \"web\"", // 28
        "address = \"127.0.0.1\"",
        "port = 5300",
        "zone = \"bad..zone\"", // 31
        "[[dns_vservice.record]]",
        "name = \"www\"",
        "policy = \"fastest\"", // 34
        "answers = \"two\"",    // 35
        "[[dns_vservice.record.site]]",
        "name = \"s1\"",
        "address = \"not-an-ip\"", // 38
        "api = \"http://10.0.0.2:9180\"",
        "vservice = \"web\"",
    ]);
    assert_exactly(
        &text,
        &[
            ("vservice[0].backends[1]", 26, "`web1` is listed twice"),
            (
                "dns_vservice[0].name",
                28,
                "duplicate name `web`: already used by the vservice at line 22",
            ),
            ("dns_vservice[0].zone", 31, "is not a domain name"),
            (
                "dns_vservice[0].record[0].policy",
                34,
                "unknown variant `fastest`",
            ),
            (
                "dns_vservice[0].record[0].answers",
                35,
                "expected an integer",
            ),
            (
                "dns_vservice[0].record[0].site[0].address",
                38,
                "`not-an-ip` is not an IPv4 or IPv6 address",
            ),
        ],
    );
}

/// issue 19: `[backend_service]` written for `[[backend_service]]` is said, and the table
/// is still checked as the entry it was meant to be.
#[test]
fn single_brackets_for_an_entry_still_check_the_entry() {
    let text = doc(&[
        "[backend_service]", // 1
        "name = \"a\"",
        "address = \"10.0.0.999\"", // 3
        "port = 80",
        "weight = 70000", // 5
    ]);
    assert_exactly(
        &text,
        &[
            (
                "backend_service",
                1,
                "write each entry as [[backend_service]]",
            ),
            (
                "backend_service[0].address",
                3,
                "`10.0.0.999` is not an IPv4 or IPv6 address",
            ),
            (
                "backend_service[0].weight",
                5,
                "70000 is out of range 0..=65535",
            ),
        ],
    );
}

/// issue 19, the issue's case: a new user's file with many mistakes of different kinds gets
/// every one, each with its line, in one run of `lb check-config`'s parser.
#[test]
fn a_file_with_many_mistakes_gets_all_of_them_at_once() {
    let text = doc(&[
        "[xdp]",
        "conn_table_size = \"1M\"", // 2: wrong type
        "[[health_check]]",
        "name = \"web-check\"",
        "type = \"htttp\"", // 5: unknown type
        "path = \"/health\"",
        "[[backend_service]]",
        "name = \"web1\"",
        "address = \"10.0.0.300\"", // 9: not an address
        "port = \"8080\"",          // 10: wrong type, same entry
        "health_check = \"web-check\"",
        "[[backend_service]]",
        "name = \"web2\"",
        "addres = \"10.0.0.2\"", // 14: misspelled key (and so `address` is missing, line 12)
        "port = 8080",
        "[[vservice]]",
        "name = \"shop\"",
        "kind = \"http\"",
        "address = \"192.0.2.10\"",
        "port = 80",
        "backends = [\"web1\", \"web2\", \"web3\"]", // 21: web3 is not defined
        "retries = 99",                              // 22: out of range
        "[vservice.timeouts]",
        "connect = \"5s\"", // 24: wrong type
        "[proxy]",
        "workers = = 4", // 26: syntax error
    ]);
    let all = issues(&text);
    let syntax: Vec<&ConfigIssue> = all.iter().filter(|i| i.field.is_empty()).collect();
    assert!(syntax.iter().all(|i| i.line == 26), "{all:#?}");
    let mut expected = vec![
        ("xdp.conn_table_size", 2, "expected an integer"),
        (
            "health_check[0]",
            3,
            "without a readable `type`, the checks of its other 2 keys",
        ),
        ("health_check[0].type", 5, "unknown variant `htttp`"),
        (
            "backend_service[0].address",
            9,
            "`10.0.0.300` is not an IPv4 or IPv6 address",
        ),
        ("backend_service[0].port", 10, "expected an integer"),
        ("backend_service[1]", 12, "missing field `address`"),
        ("backend_service[1].addres", 14, "unknown field `addres`"),
        (
            "vservice[0].backends[2]",
            21,
            "unknown backend service or group `web3`",
        ),
        ("vservice[0].retries", 22, "99 is out of range"),
        (
            "vservice[0].timeouts.connect",
            24,
            "expected a number (seconds)",
        ),
        (
            "proxy",
            25,
            "the checks of its 1 key were skipped: the TOML syntax error at line 26",
        ),
    ];
    for issue in &syntax {
        expected.push(("", issue.line, issue.message.as_str()));
    }
    assert_exactly(&text, &expected);
    let shown = parse(&text, "lb.toml").unwrap_err().to_string();
    assert!(shown.lines().all(|l| l.starts_with("lb.toml:")), "{shown}");
}

// ----- L7 vServices (HTTP and L7 TCP) ----------------------------------------------------

/// An L7 vService `s` of `kind` on 127.0.0.1:8080 with backends ["web1"] on lines 21..=26,
/// then `extra` from line 27 on, after `BACKENDS`.
fn l7(kind: &str, extra: &[&str]) -> String {
    let kind_line = format!("kind = \"{kind}\"");
    let mut lines = vec![
        "[[vservice]]",
        "name = \"s\"",
        kind_line.as_str(),
        "address = \"127.0.0.1\"",
        "port = 8080",
        "backends = [\"web1\"]",
    ];
    lines.extend_from_slice(extra);
    with_backends(&lines)
}

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

// ----- [api] and [cluster] ---------------------------------------------------------------

#[test]
fn api_on_a_public_address_needs_a_token() {
    let text = doc(&["[api]", "listen = \"0.0.0.0:9180\""]);
    let words = "api.listen 0.0.0.0:9180 is not a loopback address: set `api.token`";
    assert_issue(&text, "api.token", 2, words);
    let text = doc(&["[api]", "listen = \"192.0.2.5:9180\"", "token = \"short\""]);
    assert_issue(&text, "api.token", 3, "the token is too short");
    let text = doc(&["[api]", "", "listen = \"localhost\""]);
    assert_issue(&text, "api.listen", 3, "`localhost` is not an address:port");
    let text = doc(&["[api]", "listen = \"127.0.0.1:9180\"", "tokn = \"x\""]);
    assert_issue(&text, "api.tokn", 3, "unknown field `tokn`");
}

#[test]
fn api_and_l7_vservice_on_one_socket() {
    let text = l7("http", &[]).replace("port = 8080\nbackends", "port = 9180\nbackends");
    let words = "the API listens on 127.0.0.1:9180 by default";
    assert_issue(&text, "vservice[0].port", 25, words);
    let text = l7("http", &["[api]", "listen = \"127.0.0.1:8080\""]);
    let words = "127.0.0.1:8080 is also the listener of vservice `s` (line 25)";
    assert_issue(&text, "api.listen", 28, words);
}

#[test]
fn s_cl_cluster_needs_peers() {
    let text = doc(&["[api]", "", "[cluster]", "manual_sync = true"]);
    assert_issue(
        &text,
        "cluster.peer",
        3,
        "needs at least one [[cluster.peer]]",
    );
}

#[test]
fn s_cl_peer_names_and_urls_are_unique_and_valid() {
    let text = doc(&[
        "[[cluster.peer]]",
        "name = \"lb2\"",
        "url = \"http://10.0.0.2:9180\"",
        "[[cluster.peer]]",
        "name = \"lb2\"", // 5
        "url = \"http://10.0.0.2:9180/\"",
        "[[cluster.peer]]",
        "name = \"lb4\"",
        "url = \"https://10.0.0.4:9180\"", // 9
        "token = \"tiny\"",
    ]);
    let words = "duplicate name `lb2`: already used by the cluster peer at line 2";
    assert_issue(&text, "cluster.peer[1].name", 5, words);
    let words = "duplicate url `http://10.0.0.2:9180`: already used by the peer at line 3";
    assert_issue(&text, "cluster.peer[1].url", 6, words);
    let words = "`https://10.0.0.4:9180` is not a peer API URL: write http://HOST:PORT";
    assert_issue(&text, "cluster.peer[2].url", 9, words);
    assert_issue(&text, "cluster.peer[2].token", 10, "the token is too short");
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
