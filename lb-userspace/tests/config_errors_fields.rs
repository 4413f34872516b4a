//! Configuration errors in reading and naming: syntax, types, unknown and missing fields,
//! duplicate names and references, health check profiles (S-HC1..4, S-RT3), `[api]` and
//! `[cluster]`. Each test checks the exact line an error is reported on, the field path, and
//! a message naming the field or the rule.

use lb::config::{Handshake, HealthKind, parse};

mod support {
    pub mod config_issues;
}
use support::config_issues::*;

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
    // The table holding it is not checked, and says so.
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

/// Passive health's ejection cap: `max_ejection_percent` is 50 unless written, and an integer
/// from 0 to 100; out of range, the message names the key and the range.
#[test]
fn max_ejection_percent_defaults_to_50_and_must_be_0_to_100() {
    let config = parse(&check("tcp", &["passive_failures = 3"]), "lb.toml").expect("valid");
    assert_eq!(config.max_ejection_percent("h"), 50);
    let text = check("tcp", &["max_ejection_percent = 0"]);
    let config = parse(&text, "lb.toml").expect("0 is valid");
    assert_eq!(config.max_ejection_percent("h"), 0);
    let text = check("passive", &["max_ejection_percent = 100"]);
    let config = parse(&text, "lb.toml").expect("100 is valid");
    assert_eq!(config.max_ejection_percent("h"), 100);
    for bad in ["101", "-1"] {
        let line = format!("max_ejection_percent = {bad}");
        let text = check("tcp", &[line.as_str()]);
        let words = format!("max_ejection_percent {bad} is out of range: an integer from 0 to 100");
        assert_issue(&text, "health_check[0].max_ejection_percent", 4, &words);
    }
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
        "url = \"https://10.0.0.2:9180\"",
        "[[cluster.peer]]",
        "name = \"lb2\"", // 5
        "url = \"https://10.0.0.2:9180/\"",
        "[[cluster.peer]]",
        "name = \"lb4\"",
        "url = \"ftp://10.0.0.4:9180\"", // 9
        "token = \"tiny\"",
    ]);
    let words = "duplicate name `lb2`: already used by the cluster peer at line 2";
    assert_issue(&text, "cluster.peer[1].name", 5, words);
    let words = "duplicate url `https://10.0.0.2:9180`: already used by the peer at line 3";
    assert_issue(&text, "cluster.peer[1].url", 6, words);
    let words = "`ftp://10.0.0.4:9180` is not a peer API URL: write https://HOST:PORT";
    assert_issue(&text, "cluster.peer[2].url", 9, words);
    assert_issue(&text, "cluster.peer[2].token", 10, "the token is too short");
}
