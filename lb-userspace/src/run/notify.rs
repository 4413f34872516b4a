//! Telling systemd (a `Type=notify` unit) where `lb run` is: ready once the data path is
//! attached and every listener and the API are bound, reloading around a SIGHUP, stopping
//! at exit, and, for an `lb run --upgrade` started by the unit's `ExecReload=`, that this
//! process is now the unit's main process. Without `NOTIFY_SOCKET` (not started by systemd)
//! every call does nothing.

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

/// The daemon is exiting (the XDP program stays attached). Not sent by a daemon that handed
/// its sockets over: the unit goes on with its successor, and a STOPPING=1 from any process
/// of the unit (`NotifyAccess=all`) would make systemd stop it.
pub(super) fn stopping() {
    send(&[NotifyState::Stopping]);
}

/// This process took the sockets of the unit's main process (`lb run --upgrade` run by the
/// unit's `ExecReload=`) and is about to tell it to drain: systemd must watch this process
/// from now on, or the old one's exit would look like the service's end and stop the unit.
/// Waits (up to 5 s) until systemd has read the message, so the old process, which is told
/// to go right after, exits only once this one is the main process.
pub(super) fn took_over() {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    let pid = std::process::id();
    let status = format!("serving (took over the sockets as process {pid})");
    send(&[
        NotifyState::MainPid(pid),
        NotifyState::Ready,
        NotifyState::Status(&status),
    ]);
    if let Err(e) = barrier(std::time::Duration::from_secs(5)) {
        warn!("systemd did not confirm the new main process: {e}");
    }
}

/// `sd_notify_barrier(3)`: sends BARRIER=1 with the write end of a pipe and waits for systemd
/// to close its copy, which it does once every earlier message of this process is handled.
fn barrier(limit: std::time::Duration) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::net::UnixDatagram;

    use sendfd::SendWithFd;

    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(());
    };
    let mut fds = [-1; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: pipe2 just made both descriptors; each is owned once from here.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let socket = UnixDatagram::unbound()?;
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
    match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            socket.connect_addr(&addr)?;
        }
        None => socket.connect(&path)?,
    }
    socket.send_with_fd(b"BARRIER=1\n", &[write.as_raw_fd()])?;
    drop(write);
    let mut poll = libc::pollfd {
        fd: read.as_raw_fd(),
        events: 0,
        revents: 0,
    };
    let timeout = i32::try_from(limit.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd; POLLHUP comes when the last write end (systemd's) closes.
    match unsafe { libc::poll(&mut poll, 1, timeout) } {
        1 => Ok(()),
        0 => Err(Error::new(ErrorKind::TimedOut, "no answer to BARRIER=1")),
        _ => Err(Error::last_os_error()),
    }
}
