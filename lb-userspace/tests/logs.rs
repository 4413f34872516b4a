//! What `lb` writes to a file or a pipe: plain text without terminal colour codes, or one
//! JSON object per line with `--log-format json`. Checked on `lb check-config` of a file
//! whose health check Period is adjusted (a warning is logged).
//!
//! No rule of docs/behaviour.md covers log formats: log shippers need JSON, files and pipes
//! need no colour codes.

use std::process::Command;

/// Runs `lb check-config` on a valid file that logs one S-HC4 warning; returns stderr.
fn check_config(args: &[&str]) -> String {
    let dir = std::env::temp_dir().join(format!("lb-logs-{}-{}", std::process::id(), args.len()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("lb.toml");
    std::fs::write(
        &file,
        "[[health_check]]\nname = \"fast\"\ntype = \"tcp\"\nperiod = 0.2\n",
    )
    .expect("config written");
    let out = Command::new(env!("CARGO_BIN_EXE_lb"))
        .args(args)
        .arg("check-config")
        .arg(&file)
        .env_remove("RUST_LOG")
        .output()
        .expect("lb runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stderr).expect("UTF-8 logs")
}

#[test]
fn logs_to_a_pipe_carry_no_colour_codes() {
    let logs = check_config(&[]);
    assert!(logs.contains("WARN"), "a warning was logged: {logs}");
    assert!(!logs.contains('\u{1b}'), "ANSI escape in {logs:?}");
}

#[test]
fn json_log_format_writes_one_object_per_line() {
    let logs = check_config(&["--log-format", "json"]);
    let lines: Vec<&str> = logs.lines().collect();
    assert!(!lines.is_empty(), "nothing logged");
    for line in lines {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON object per line");
        assert_eq!(v["level"], "WARN", "{v}");
        assert!(
            v["fields"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{v}"
        );
    }
}
