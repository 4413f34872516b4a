//! One source for the BIRD configuration operators copy: docs/scale-out.md shows, between its
//! `lb bird-config` markers, exactly what `lb bird-config` prints for `[bgp] enabled = true`,
//! `table = 100` (S-AN1). A page that kept an older copy (without the reconnect timers, say)
//! would bring a restarted balancer back after minutes instead of a second.

use std::process::Command;

#[test]
fn the_scale_out_page_shows_what_lb_bird_config_prints() {
    let dir = std::env::temp_dir().join(format!("lb-bird-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("lb.toml");
    std::fs::write(&config, "[bgp]\nenabled = true\ntable = 100\n").expect("config written");
    let out = Command::new(env!("CARGO_BIN_EXE_lb"))
        .args(["bird-config", "--config"])
        .arg(&config)
        .output()
        .expect("lb bird-config runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "lb bird-config: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).expect("utf-8");

    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scale-out.md"))
            .expect("docs/scale-out.md");
    let begin = "<!-- lb bird-config: begin -->\n```conf\n";
    let end = "```\n<!-- lb bird-config: end -->";
    let start = page.find(begin).expect("the page has the begin marker") + begin.len();
    let stop = start
        + page[start..]
            .find(end)
            .expect("the page has the end marker");
    let shown = &page[start..stop];
    assert!(
        shown == printed,
        "docs/scale-out.md does not show what `lb bird-config` prints; replace the block \
         between its markers with:\n{printed}"
    );
}
