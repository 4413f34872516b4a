//! Installs HAProxy from Debian when it is missing and makes sure its packaged system service
//! is not running (the bench starts its own instance). The same steps as bench-l7's setup,
//! for the one package this bench needs.

use std::path::Path;
use std::process::Command;

/// The HAProxy binary the Debian package installs.
pub const HAPROXY: &str = "/usr/sbin/haproxy";

/// Installs haproxy if its binary is missing (nothing runs when it is present), then stops
/// the package's own service. `Err` says why HAProxy cannot be used.
pub fn ensure_haproxy() -> Result<(), String> {
    if !Path::new(HAPROXY).exists() {
        println!("setup: apt-get update");
        let _ = Command::new("apt-get").args(["update", "-qq"]).status();
        println!("setup: apt-get install haproxy");
        let ok = Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends", "haproxy"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            return Err("`apt-get install haproxy` failed".into());
        }
        if !Path::new(HAPROXY).exists() {
            return Err(format!("{HAPROXY} is missing after install"));
        }
    }
    stop_system_service();
    Ok(())
}

/// Stops and disables the Debian unit under systemd; without systemd (this machine's
/// containers), ends the init script's daemon through its pid file, after checking that the
/// pid really is haproxy.
fn stop_system_service() {
    if Path::new("/run/systemd/system").exists() {
        let active = Command::new("systemctl")
            .args(["is-active", "--quiet", "haproxy"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if active {
            println!("setup: stopping and disabling the haproxy system service");
            let _ = Command::new("systemctl")
                .args(["disable", "--now", "--quiet", "haproxy"])
                .status();
        }
        return;
    }
    let Ok(text) = std::fs::read_to_string("/run/haproxy.pid") else {
        return;
    };
    let Ok(pid) = text.trim().parse::<libc::pid_t>() else {
        return;
    };
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if comm.trim() == "haproxy" {
        println!("setup: stopping the haproxy service the package started (pid {pid})");
        // SAFETY: kill(2) on the pid the package's own pid file names, checked to be haproxy.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
}
