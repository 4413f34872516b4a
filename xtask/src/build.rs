//! Building the two halves (the eBPF object with Debian's rustc-web, the host crates with
//! rustup's stable) and running tests, benchmarks and the demo on top of them.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;

use crate::setup;
use crate::sh::run;

/// The repository root (xtask's parent directory).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The compiled XDP object.
pub fn object() -> PathBuf {
    root().join("lb-ebpf/target/bpfel-unknown-none/release/lb-xdp")
}

/// The compiled object of the backend agent (`lb decap`).
pub fn decap_object() -> PathBuf {
    root().join("lb-ebpf/target/bpfel-unknown-none/release/lb-decap")
}

/// Builds lb-ebpf with Debian's compiler and precompiled BPF `core` (see the toolchain notes).
pub fn ebpf() -> Result<()> {
    let mut cmd = Command::new("/usr/bin/cargo");
    cmd.current_dir(root().join("lb-ebpf"))
        .args(["build", "--release", "--locked", "--quiet"])
        .env("RUSTC", "/usr/bin/rustc")
        .env("RUSTDOC", "/usr/bin/rustdoc")
        // aya-ebpf uses one unstable feature on the bpf target; allow it for that crate only.
        .env("RUSTC_BOOTSTRAP", "aya_ebpf")
        .env(
            "CARGO_TARGET_BPFEL_UNKNOWN_NONE_LINKER",
            setup::bpf_linker(),
        );
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTUP_TOOLCHAIN",
    ] {
        cmd.env_remove(var);
    }
    run(&mut cmd)
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

/// Builds every binary of lb-userspace and lb-tests (`lb`, the demo, the benches).
fn build_bins(release: bool) -> Result<()> {
    let mut cmd = cargo();
    cmd.args([
        "build",
        "--locked",
        "--quiet",
        "-p",
        "lb-userspace",
        "-p",
        "lb-tests",
        "--bins",
    ]);
    if release {
        cmd.arg("--release");
    }
    run(&mut cmd)
}

/// Runs one lb-tests binary in release mode, with `lb` and the XDP object found by path.
fn run_release_bin(bin: &str) -> Result<()> {
    run(cargo()
        .args([
            "run",
            "--release",
            "--locked",
            "--quiet",
            "-p",
            "lb-tests",
            "--bin",
            bin,
        ])
        .env("LB_BIN", root().join("target/release/lb"))
        .env("LB_XDP_OBJECT", object()))
}

/// Setup, the XDP object, and the `lb` binary (debug profile).
pub fn all() -> Result<()> {
    setup::setup()?;
    ebpf()?;
    build_bins(false)
}

/// Setup, build, the Debian package, then every test of the workspace (the `package` test
/// installs the .deb, checks it and purges it), then a two-minute soak.
pub fn test(extra: &[String]) -> Result<()> {
    all()?;
    let deb = crate::package::package()?;
    // What the package test runs besides dpkg: `systemd-analyze verify` and `man -l`.
    setup::ensure_packages(&["systemd", "man-db"])?;
    run(cargo()
        .args(["test", "--locked", "--workspace"])
        .args(extra)
        .env("LB_BIN", root().join("target/debug/lb"))
        .env("LB_XDP_OBJECT", object())
        .env("LB_DECAP_OBJECT", decap_object())
        .env("LB_DEB", deb))?;
    // The CI soak: two minutes of load and faults; fails on a violation or a dead daemon.
    // Skipped when a test filter was given (the filter picks tests, not the soak).
    if extra.is_empty() {
        soak_ci()?;
    }
    Ok(())
}

/// The two-minute soak of `cargo xtask test` (debug build, already made by `all`).
fn soak_ci() -> Result<()> {
    run(Command::new(root().join("target/debug/soak"))
        .args(["--minutes", "2"])
        .env("LB_BIN", root().join("target/debug/lb"))
        .env("LB_XDP_OBJECT", object()))
}

/// `soak --minutes N`: the namespace topology under load and a seeded fault schedule
/// (tests/src/bin/soak). Builds `lb` and the soak (debug, or release with `release`) and runs
/// it as root; fails when it reports an invariant violation or `lb run` died.
pub fn soak(minutes: f64, seed: Option<u64>, faults: Option<&str>, release: bool) -> Result<()> {
    setup::setup()?;
    ebpf()?;
    build_bins(release)?;
    let profile = if release { "release" } else { "debug" };
    let mut cmd = Command::new(root().join("target").join(profile).join("soak"));
    cmd.args(["--minutes", &minutes.to_string()])
        .env("LB_BIN", root().join("target").join(profile).join("lb"))
        .env("LB_XDP_OBJECT", object());
    if let Some(s) = seed {
        cmd.args(["--seed", &s.to_string()]);
    }
    if let Some(f) = faults {
        cmd.args(["--faults", f]);
    }
    run(&mut cmd)
}

/// Every property test (names with `fuzz`, `any_`, or parser properties) with `cases` cases
/// each, in release mode. Needs no XDP object: the properties run on loopback.
pub fn fuzz(cases: u32) -> Result<()> {
    setup::ensure_packages(setup::BUILD_PACKAGES)?;
    run(cargo()
        .args(["test", "--release", "--locked", "-p", "lb-userspace"])
        .args([
            "--lib",
            "--test",
            "config_fuzz",
            "--test",
            "api_changes",
            "--test",
            "gslb",
        ])
        .args(["--", "fuzz", "any_"])
        .env("PROPTEST_CASES", cases.to_string()))
}

/// ns/packet of the data path and the Maglev build time, in release mode.
pub fn bench_xdp() -> Result<()> {
    setup::setup()?;
    ebpf()?;
    run_release_bin("bench-xdp")
}

/// The release `lb` binary, which the benches that run the daemon start and the Debian
/// package ships.
pub fn build_release_lb() -> Result<()> {
    setup::ensure_packages(setup::BUILD_PACKAGES)?;
    run(cargo().args([
        "build",
        "--release",
        "--locked",
        "--quiet",
        "-p",
        "lb-userspace",
        "--bin",
        "lb",
    ]))
}

/// CPU and memory of health checking, `lb run` beside HAProxy, with 10,000 TCP-checked
/// services at P = 1 s (3 interleaved rounds each), then 50,000 at P = 5 s, in release mode.
/// Loopback only and no XDP (the bench's configuration has no Network vService), so neither
/// setup nor the XDP object is needed; the bench installs haproxy itself when it is missing.
pub fn bench_health() -> Result<()> {
    build_release_lb()?;
    run_release_bin("bench-health")
}

/// The HTTP proxy against HAProxy and nginx, in release mode. Loopback only and no XDP
/// (the bench's configuration has no Network vService); the bench installs wrk, haproxy
/// and nginx itself when they are missing.
pub fn bench_l7() -> Result<()> {
    build_release_lb()?;
    run_release_bin("bench-l7")
}

/// The namespace demo; `scale`: the three-balancer one (BIRD 2 installed when missing).
pub fn demo(scale: bool) -> Result<()> {
    all()?;
    let bin = if scale {
        // The scale-out demo's routers and balancers speak BGP through BIRD 2.
        setup::ensure_packages(&["bird2"])?;
        "lb-demo-scale"
    } else {
        "lb-demo"
    };
    run(Command::new(root().join("target/debug").join(bin))
        .env("LB_BIN", root().join("target/debug/lb"))
        .env("LB_XDP_OBJECT", object()))
}

/// Runs a release binary of lb-tests and saves its stdout+stderr as target/bench/`file`
/// (bench-all folds the file into the report). A failing bench is recorded, not fatal.
fn bench_capture(bin: &str, file: &str) -> Result<()> {
    let dir = root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let out = Command::new(root().join("target/release").join(bin))
        .env("LB_BIN", root().join("target/release/lb"))
        .env("LB_XDP_OBJECT", object())
        .output()?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text += &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        text += &format!("\n{bin} failed: {}\n", out.status);
    }
    print!("{text}");
    std::fs::write(dir.join(file), text)?;
    Ok(())
}

/// `part` of the comparative suite (`all`, `l4` or `control`): builds what it needs, and for
/// `all` first runs bench-xdp and bench-l7 so their figures land in the same report.
pub fn bench_suite(part: &str) -> Result<()> {
    setup::setup()?;
    if part != "control" {
        // The kernel's own balancer, compared against in the L4 part.
        setup::ensure_packages(&["nftables", "conntrack"])?;
    }
    ebpf()?;
    build_bins(true)?;
    if part == "all" {
        bench_capture("bench-xdp", "xdp.txt")?;
        bench_capture("bench-l7", "l7.txt")?;
    }
    run(Command::new(root().join("target/release/bench-all"))
        .arg(part)
        .env("LB_BIN", root().join("target/release/lb"))
        .env("LB_XDP_OBJECT", object()))
}
