//! `cargo xtask demo` as a newcomer sees it: the narrated run on namespaces, read from its
//! output. It waits for the health checks before its first request, so the first phase
//! shows balancing and no failure (the Preparing phase is shown as such, S-HC5); the drain
//! fails no request (S-MT1). Needs root and the XDP object built by `cargo xtask build`.

use std::process::Command;

#[test]
fn demo_shows_the_preparing_phase_then_traffic_without_failures() {
    let out = Command::new(env!("CARGO_BIN_EXE_lb-demo"))
        .env("LB_DEMO_HOLD", "0")
        .output()
        .expect("lb-demo runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "lb-demo failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("Waiting for the health checks"),
        "the demo does not say it waits for the health checks:\n{text}"
    );
    let first_phase: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("== 1."))
        .skip(1)
        .take_while(|l| !l.contains("== 2."))
        .filter(|l| l.contains("L4(XDP)"))
        .collect();
    assert!(
        !first_phase.is_empty(),
        "no counter line in the first phase:\n{text}"
    );
    for line in &first_phase {
        assert!(
            !line.contains("fail="),
            "the first phase shows failures although every backend was OK: {line}\n{text}"
        );
    }
    assert!(
        text.contains("failed HTTP requests during the drain: 0"),
        "the maintenance drain failed requests:\n{text}"
    );
}
