//! Running helper programs (`ip`, `ethtool`, `nsenter`, `lb`) with a time bound.
//!
//! Every external command the harness runs goes through here so that a hung program
//! can never hang a test: it is killed when its time is up.

use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Time bound for short administrative commands (`ip`, `sysctl`, `ethtool`).
pub const SHORT: Duration = Duration::from_secs(10);

/// Runs `cmd`, waits at most `timeout`, and returns its output whatever its exit status.
///
/// On timeout the child (which this function started) is killed by its pid.
pub fn output_within(mut cmd: Command, timeout: Duration) -> Result<Output> {
    let shown = format!("{cmd:?}");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {shown}"))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // The receiver may be gone after a timeout; nothing to do then.
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(out) => out.with_context(|| format!("waiting for {shown}")),
        Err(_) => {
            // SAFETY: kill(2) on the pid of a child this function spawned and has not reaped
            // (the waiting thread reaps it after this signal).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            bail!("{shown} did not finish within {timeout:?} and was killed")
        }
    }
}

/// Runs `program args...` and returns its stdout; a non-zero exit is an error carrying stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    checked(cmd, SHORT)
}

/// Runs a prepared command within `timeout`; a non-zero exit is an error carrying stderr.
pub fn checked(cmd: Command, timeout: Duration) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = output_within(cmd, timeout)?;
    if !out.status.success() {
        bail!(
            "{shown} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a command whose failure does not matter (cleanup); returns whether it succeeded.
pub fn quiet(program: &str, args: &[&str]) -> bool {
    let mut cmd = Command::new(program);
    cmd.args(args);
    matches!(output_within(cmd, SHORT), Ok(out) if out.status.success())
}
