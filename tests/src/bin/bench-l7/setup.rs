//! Installs wrk, HAProxy, nginx, h2load (`nghttp2-client`) and the openssl CLI (the TLS
//! cases' certificate) from Debian when missing, and makes sure their packaged
//! system services are not running (the bench starts its own instances on loopback ports).
//! Each package is installed on its own, so one that fails does not stop the others.

use std::path::Path;
use std::process::Command;

/// The Debian packages and the binary each provides.
pub const PACKAGES: &[(&str, &str)] = &[
    ("wrk", "/usr/bin/wrk"),
    ("haproxy", "/usr/sbin/haproxy"),
    ("nginx", "/usr/sbin/nginx"),
    ("nghttp2-client", "/usr/bin/h2load"),
    ("openssl", "/usr/bin/openssl"),
];

/// What the setup could provide.
#[derive(Default)]
pub struct Tools {
    /// Packages whose binary is there.
    pub present: Vec<&'static str>,
    /// Packages that are not, each with the reason.
    pub missing: Vec<(&'static str, String)>,
}

impl Tools {
    /// Whether `pkg`'s binary is available.
    pub fn has(&self, pkg: &str) -> bool {
        self.present.contains(&pkg)
    }
}

/// Installs what is missing (idempotent: nothing runs when every binary is present), then
/// stops the packages' own services.
pub fn ensure() -> Tools {
    let mut tools = Tools::default();
    let mut updated = false;
    for &(pkg, bin) in PACKAGES {
        if !Path::new(bin).exists() {
            if !updated {
                println!("setup: apt-get update");
                let _ = Command::new("apt-get").args(["update", "-qq"]).status();
                updated = true;
            }
            println!("setup: apt-get install {pkg}");
            let ok = Command::new("apt-get")
                .args(["install", "-y", "-qq", "--no-install-recommends", pkg])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !ok {
                tools
                    .missing
                    .push((pkg, format!("`apt-get install {pkg}` failed")));
                continue;
            }
        }
        if Path::new(bin).exists() {
            tools.present.push(pkg);
        } else {
            tools
                .missing
                .push((pkg, format!("{bin} is missing after install")));
        }
    }
    for pkg in ["haproxy", "nginx"] {
        if tools.has(pkg) {
            stop_system_service(pkg);
        }
    }
    tools
}

/// Stops and disables the Debian unit under systemd; without systemd (this machine's
/// containers), ends the init script's daemon through its pid file, after checking that the
/// pid really is that program.
fn stop_system_service(pkg: &str) {
    if Path::new("/run/systemd/system").exists() {
        let active = Command::new("systemctl")
            .args(["is-active", "--quiet", pkg])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if active {
            println!("setup: stopping and disabling the {pkg} system service");
            let _ = Command::new("systemctl")
                .args(["disable", "--now", "--quiet", pkg])
                .status();
        }
        return;
    }
    let pid_file = format!("/run/{pkg}.pid");
    let Ok(text) = std::fs::read_to_string(&pid_file) else {
        return;
    };
    let Ok(pid) = text.trim().parse::<libc::pid_t>() else {
        return;
    };
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if comm.trim() == pkg {
        println!("setup: stopping the {pkg} service the package started (pid {pid})");
        // SAFETY: kill(2) on the pid the package's own pid file names, checked to be `pkg`.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
}
