//! `cargo xtask package`: the Debian package of `lb` (cargo-deb), with the XDP objects (the
//! balancer's and the backend agent's), the systemd unit, the default configuration, and the
//! shell completions and man pages generated from `lb`'s own clap definitions.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::build::{self, root};
use crate::setup;
use crate::sh::{output, run};

/// Where the generated files are staged; lb-userspace's `[package.metadata.deb]` assets
/// name these paths.
fn staging() -> PathBuf {
    root().join("target/lb-package")
}

/// Copies the XDP objects and writes the completions and man pages from the release `lb`.
fn stage(lb: &Path) -> Result<()> {
    let dir = staging();
    if dir.exists() {
        // A page of a removed subcommand must not linger in the next package.
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir.join("completions"))?;
    std::fs::copy(build::object(), dir.join("lb-xdp"))
        .with_context(|| format!("copying {}", build::object().display()))?;
    std::fs::copy(build::decap_object(), dir.join("lb-decap"))
        .with_context(|| format!("copying {}", build::decap_object().display()))?;
    for (shell, file) in [("bash", "lb.bash"), ("zsh", "_lb"), ("fish", "lb.fish")] {
        let script = output(Command::new(lb).args(["completions", shell]))?;
        if script.is_empty() {
            bail!("`lb completions {shell}` printed nothing");
        }
        std::fs::write(dir.join("completions").join(file), script)?;
    }
    let man = dir.join("man");
    run(Command::new(lb).arg("man").arg("--dir").arg(&man))?;
    Ok(())
}

/// Builds the package and returns the path of the .deb: setup (cargo-deb and
/// dpkg-shlibdeps included), the XDP object, the release `lb`, the staged files, cargo-deb.
pub fn package() -> Result<PathBuf> {
    setup::setup()?;
    setup::cargo_deb()?;
    // dpkg-shlibdeps, from which cargo-deb writes the package's Depends.
    setup::ensure_packages(&["dpkg-dev"])?;
    build::ebpf()?;
    build::build_release_lb()?;
    let lb = root().join("target/release/lb");
    stage(&lb)?;
    let printed = output(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(root())
            .args([
                "deb",
                "-p",
                "lb-userspace",
                "--no-build",
                "--strip",
                "--quiet",
            ])
            .args(["--output", "target/debian/"]),
    )?;
    let deb = printed
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.ends_with(".deb"))
        .map(PathBuf::from)
        .context("cargo deb printed no .deb path")?;
    let deb = if deb.is_absolute() {
        deb
    } else {
        root().join(deb)
    };
    if !deb.exists() {
        bail!("cargo deb reported {} but it does not exist", deb.display());
    }
    Ok(deb)
}
