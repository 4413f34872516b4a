//! Telling systemd (a `Type=notify` unit) where `lb run` is: ready once the data path is
//! attached and every listener and the API are bound, reloading around a SIGHUP, stopping
//! at exit. Without `NOTIFY_SOCKET` (not started by systemd) every call does nothing.

use sd_notify::NotifyState;
use tracing::warn;

/// Sends `states`; a failure is logged, never fatal: the daemon serves whether or not
/// its service manager heard it.
fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        warn!("cannot tell systemd the daemon's state: {e}");
    }
}

/// Everything is up: systemd may start the units ordered after this one.
pub(super) fn ready() {
    send(&[NotifyState::Ready, NotifyState::Status("serving")]);
}

/// A SIGHUP reload begins; systemd waits for the next [`ready`] (`MONOTONIC_USEC` is what
/// newer systemd versions require with `RELOADING=1`).
pub(super) fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(_) => send(&[NotifyState::Reloading]),
    }
}

/// The reload is over (applied or refused: the daemon serves on either way).
pub(super) fn reloaded(error: Option<&str>) {
    match error {
        None => send(&[NotifyState::Ready, NotifyState::Status("serving")]),
        Some(e) => {
            let status = format!("serving the previous configuration; the reload failed: {e}");
            send(&[NotifyState::Ready, NotifyState::Status(&status)]);
        }
    }
}

/// The daemon is exiting (the XDP program stays attached).
pub(super) fn stopping() {
    send(&[NotifyState::Stopping]);
}
