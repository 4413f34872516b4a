//! What the configuration error tests share (config_errors_fields, config_errors_vservices,
//! config_errors_all_at_once): files built line by line, so that each test knows the line
//! of every key, and assertions on the issues the parser reports.
//!
//! A test binary takes it with `mod support { pub mod config_issues; }`.
#![allow(dead_code)]

use lb::config::{ConfigIssue, parse};

/// Joins lines into a file, so that `lines[i]` is on line `i + 1`.
pub fn doc(lines: &[&str]) -> String {
    lines.join("\n") + "\n"
}

/// Parses text that must be rejected and returns its issues.
pub fn issues(text: &str) -> Vec<ConfigIssue> {
    match parse(text, "lb.toml") {
        Ok(config) => panic!("config was accepted: {config:?}"),
        Err(error) => error.errors,
    }
}

/// Asserts that exactly one issue has `field`, on `line`, with `words` in its message.
pub fn assert_issue(text: &str, field: &str, line: usize, words: &str) -> ConfigIssue {
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
pub const BACKENDS: [&str; 20] = [
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
pub fn with_backends(more: &[&str]) -> String {
    let mut lines = BACKENDS.to_vec();
    lines.extend_from_slice(more);
    doc(&lines)
}

/// A tcp-l4 vService `v` on lines 21..=24, then `extra` from line 25 on.
pub fn vservice<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut lines = vec![
        "[[vservice]]",
        "name = \"v\"",
        "kind = \"tcp-l4\"",
        "address = \"192.0.2.1\"",
    ];
    lines.extend_from_slice(extra);
    lines
}

/// An L7 vService `s` of `kind` on 127.0.0.1:8080 with backends ["web1"] on lines 21..=26,
/// then `extra` from line 27 on, after `BACKENDS`.
pub fn l7(kind: &str, extra: &[&str]) -> String {
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
