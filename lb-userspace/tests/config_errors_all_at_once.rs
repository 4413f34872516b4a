//! Every problem of a configuration file in one run: a wrong type, an unknown key or a
//! syntax error does not hide the other problems of the same entry or of other tables, and
//! each is reported with its line, in file order.

use lb::config::{ConfigIssue, parse};

mod support {
    pub mod config_issues;
}
use support::config_issues::*;

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

/// serde stops at the first wrong type of a table; here every one is reported, and the
/// entry's other keys are still checked.
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

/// A wrong type does not hide the semantic problems of the same vService.
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

/// Unknown keys and every missing required key of one entry, in one run.
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

/// An entry with an unreadable value is still defined: lists that name it are
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

/// Where a table cannot be read without a key (a vService's `kind`, a
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

/// A TOML syntax error does not stop every check: the table holding it is left
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

/// Problems of the single sections ([xdp], [api], [proxy], [cluster]) and of the
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

/// Duplicate names and bad references, in services, groups and vServices, all at
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

/// Problems of DNS vServices (a record's unreadable policy included) and of
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

/// `[backend_service]` written for `[[backend_service]]` is said, and the table
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

/// A new user's file with many mistakes of different kinds gets
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
