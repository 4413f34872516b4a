//! Every class of configuration error: the exact line it is reported on, the field path,
//! and a message naming the field or the rule.

use lb::config::{ConfigIssue, parse};

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
    assert!(!all.is_empty());
    assert_eq!(all[0].line, 3, "{all:?}");
    assert!(all[0].message.starts_with("TOML syntax"), "{}", all[0]);
}

#[test]
fn wrong_type_names_the_field() {
    let text = doc(&["[xdp]", "", "conn_table_size = \"big\""]);
    let issue = assert_issue(&text, "xdp.conn_table_size", 3, "invalid type");
    assert_eq!(issue.column, 19);
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
fn ipv6_vservice_address_is_rejected() {
    let more = vservice(&["port = 80", "backends = [\"web1\"]"]);
    let text = with_backends(&more).replace("\"192.0.2.1\"", "\"2001:db8::1\"");
    let words = "IPv6 is not supported by the XDP data path yet";
    assert_issue(&text, "vservice[0].address", 24, words);
}

#[test]
fn ipv6_backend_in_network_vservice_is_rejected() {
    let more = vservice(&["port = 80", "backends = [\"web1\", \"web2\"]"]);
    let text = with_backends(&more).replace("\"10.0.1.2\"", "\"2001:db8::2\"");
    let words = "backend service `web2` has address 2001:db8::2: IPv6 is not supported by the XDP data path yet";
    assert_issue(&text, "vservice[0].backends[1]", 26, words);
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
        "port = \"x\"", // 10: the entry cannot be read, yet `a` is not "unknown" below
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
