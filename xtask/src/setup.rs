//! `cargo xtask setup`: install what a fresh Debian 12 machine lacks, and nothing more.
//!
//! Idempotent and fast when everything is present: a `dpkg-query` per package, a version
//! check of bpf-linker, a statfs of /sys/fs/bpf.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::sh::{output, run};

/// bpf-linker release known to work with aya 0.14 and LLVM 21-23.
const BPF_LINKER_VERSION: &str = "0.13.0";

/// cargo-deb release `cargo xtask package` builds the Debian package with.
const CARGO_DEB_VERSION: &str = "3.8.0";

/// Debian packages the build, the tests and the demo need.
const PACKAGES: &[&str] = &[
    // Compiler for the eBPF crate and its prebuilt `core` for bpfel-unknown-none.
    "rustc-web",
    "cargo-web",
    "libstd-rust-web-dev-bpf",
    // Inspecting and driving the data path and the namespace harness.
    "bpftool",
    "iproute2",
    "iputils-ping",
    "util-linux",
    "ethtool",
    // BIRD 2: the routers and balancers of the scale-out test (e2e_scale) announce VIPs
    // over BGP with BFD; `lb bird-config` writes its configuration.
    "bird2",
    // The shared configuration of `[cluster] store = "etcd"`: protoc builds the etcd
    // client's gRPC code (lb-userspace's build needs it) with the well-known types of
    // libprotobuf-dev (google/protobuf/descriptor.proto), etcd and etcdctl run its tests.
    "protobuf-compiler",
    "libprotobuf-dev",
    "etcd-server",
    "etcd-client",
];

/// What building lb-userspace itself needs (protoc and its well-known types for the etcd
/// client's gRPC code), for the commands that build it without the whole setup.
pub const BUILD_PACKAGES: &[&str] = &["protobuf-compiler", "libprotobuf-dev"];

/// Libraries bpf-linker links against when built from source.
const LINKER_BUILD_PACKAGES: &[&str] = &[
    "libz3-dev",
    "libxml2-dev",
    "libffi-dev",
    "libncurses-dev",
    "zlib1g-dev",
    "libzstd-dev",
];

fn installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

fn apt_install(pkgs: &[&str], updated: &mut bool) -> Result<()> {
    let missing: Vec<&str> = pkgs.iter().copied().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("setup: apt-get install {}", missing.join(" "));
    if !*updated {
        run(Command::new("apt-get").args(["update", "-qq"]))?;
        *updated = true;
    }
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

/// LLVM major version of Debian's rustc (bpf-linker must use the same LLVM).
pub fn llvm_major() -> Result<String> {
    let vv = output(Command::new("/usr/bin/rustc").arg("-vV"))?;
    vv.lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .and_then(|v| v.split('.').next())
        .map(str::to_string)
        .context("cannot read the LLVM version of /usr/bin/rustc")
}

/// Where `cargo install` puts binaries.
pub fn cargo_bin() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from("/root/.cargo"))
        .join("bin")
}

/// Path of the bpf-linker binary.
pub fn bpf_linker() -> PathBuf {
    cargo_bin().join("bpf-linker")
}

fn linker_ok(llvm: &str) -> bool {
    let marker = cargo_bin().join(format!(".bpf-linker-llvm-{llvm}"));
    let version = Command::new(bpf_linker())
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout).trim() == format!("bpf-linker {BPF_LINKER_VERSION}")
        })
        .unwrap_or(false);
    version && marker.exists()
}

fn install_linker(llvm: &str, updated: &mut bool) -> Result<()> {
    if !matches!(llvm, "21" | "22" | "23") {
        bail!(
            "bpf-linker {BPF_LINKER_VERSION} supports LLVM 21-23; Debian's rustc uses LLVM {llvm}"
        );
    }
    let dev = format!("llvm-{llvm}-dev");
    let mut pkgs = vec![dev.as_str()];
    pkgs.extend_from_slice(LINKER_BUILD_PACKAGES);
    apt_install(&pkgs, updated)?;
    eprintln!("setup: cargo install bpf-linker {BPF_LINKER_VERSION} (LLVM {llvm}), about a minute");
    let path = format!(
        "/usr/lib/llvm-{llvm}/bin:{}",
        std::env::var("PATH").unwrap_or_default()
    );
    run(Command::new("cargo")
        .args([
            "install",
            "bpf-linker",
            "--version",
            BPF_LINKER_VERSION,
            "--locked",
            "--force",
        ])
        .args([
            "--no-default-features",
            "--features",
            &format!("llvm-{llvm}"),
        ])
        .env("PATH", path))?;
    std::fs::write(cargo_bin().join(format!(".bpf-linker-llvm-{llvm}")), b"")?;
    Ok(())
}

fn is_bpffs(path: &str) -> bool {
    Command::new("stat")
        .args(["-f", "-c", "%T", path])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "bpf_fs")
        .unwrap_or(false)
}

/// Installs `pkgs` where missing (benchmarks' peers such as nftables); idempotent.
pub fn ensure_packages(pkgs: &[&str]) -> Result<()> {
    let mut updated = false;
    apt_install(pkgs, &mut updated)
}

/// Installs cargo-deb at the pinned version when it is missing or another version
/// (about two minutes, once); `cargo xtask package` needs it.
pub fn cargo_deb() -> Result<()> {
    let wanted = format!("cargo-deb {CARGO_DEB_VERSION}");
    let present = Command::new(cargo_bin().join("cargo-deb"))
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == wanted)
        .unwrap_or(false);
    if present {
        return Ok(());
    }
    eprintln!("setup: cargo install cargo-deb {CARGO_DEB_VERSION}, about two minutes");
    run(Command::new("cargo").args([
        "install",
        "cargo-deb",
        "--version",
        CARGO_DEB_VERSION,
        "--locked",
        "--force",
    ]))
}

/// Installs what is missing; prints nothing when nothing is.
pub fn setup() -> Result<()> {
    if euid() != 0 {
        bail!("setup installs packages and mounts bpffs: run it as root");
    }
    let mut updated = false;
    apt_install(PACKAGES, &mut updated)?;
    let llvm = llvm_major()?;
    if !linker_ok(&llvm) {
        install_linker(&llvm, &mut updated)?;
    }
    if !is_bpffs("/sys/fs/bpf") {
        eprintln!("setup: mount -t bpf bpf /sys/fs/bpf");
        std::fs::create_dir_all("/sys/fs/bpf")?;
        run(Command::new("mount").args(["-t", "bpf", "bpf", "/sys/fs/bpf"]))?;
    }
    Ok(())
}

fn euid() -> u32 {
    output(Command::new("id").arg("-u"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(u32::MAX)
}
