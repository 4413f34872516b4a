//! Listening sockets that outlive `systemctl restart`: systemd's file descriptor store
//! (`FileDescriptorStoreMax=` in the unit).
//!
//! A restart is a stop and a start, with no process holding the vServices' ports in
//! between: a client connecting then is refused. So the daemon files a copy of every
//! listening socket with systemd (`FDSTORE=1`, named by role and address). systemd holds
//! them while the unit restarts and passes them to the next process (`LISTEN_FDS`), which
//! listens on them instead of binding. Between the two processes the kernel goes on
//! completing connections into the sockets' backlogs (and queueing DNS datagrams), so they
//! wait instead of being refused, and the new process answers them once it accepts.
//!
//! The store follows the running configuration: a socket that no vService uses any more
//! (removed by a reload, or not in the file a restart reads) is taken out of it
//! (`FDSTOREREMOVE=1`), so its port closes as it would without the store. A `systemctl
//! stop` empties the store (systemd's rule), so a stopped unit holds no port.
//!
//! Without `NOTIFY_SOCKET` (not started by systemd) nothing is filed; without `LISTEN_FDS`
//! nothing is inherited.

use std::collections::{HashMap, HashSet};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};

use sd_notify::NotifyState;
use tracing::{info, warn};

use super::handover::{Role, Sockets};

/// The name a socket is filed under: its role and address. `FDNAME=` takes no `:`, so the
/// address's colons become `_`; a name is only ever compared, never read back as an address
/// (the socket itself tells its address).
pub(super) fn name(role: Role, addr: SocketAddr) -> String {
    format!("{}@{}", role.word(), addr.to_string().replace(':', "_"))
}

/// What this process believes systemd holds for the unit.
pub(super) struct FdStore {
    /// Started by systemd: filing means something.
    active: bool,
    /// Names filed (by this process or a predecessor).
    stored: HashSet<String>,
    /// File every socket at the next [`FdStore::sync`], even under a known name: after a
    /// hand-over the old process may not have filed all of them (an older version).
    resend: bool,
}

impl FdStore {
    /// At start: the sockets systemd kept for the unit from its previous process, and the
    /// store as it is. A name that comes twice (a socket replaced under the same address)
    /// is taken out whole and the first socket filed again at the next sync; a socket with
    /// an unknown name is taken out and closed.
    pub(super) fn inherit() -> (FdStore, Sockets) {
        let mut store = FdStore {
            active: std::env::var_os("NOTIFY_SOCKET").is_some(),
            stored: HashSet::new(),
            resend: false,
        };
        let mut sockets = Sockets::default();
        let passed = match sd_notify::listen_fds_with_names() {
            Ok(passed) => passed,
            Err(e) => {
                warn!("the sockets systemd kept for this unit are unreadable: {e}");
                return (store, sockets);
            }
        };
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut kept = Vec::new();
        for (raw, fd_name) in passed {
            // SAFETY: systemd passed this descriptor to this process (LISTEN_PID is ours)
            // and nothing else owns it.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            *seen.entry(fd_name.clone()).or_default() += 1;
            kept.push((fd_name, fd));
        }
        for (fd_name, count) in &seen {
            if *count > 1 {
                store.remove(fd_name);
            }
        }
        for (fd_name, fd) in kept {
            let Some(role) = fd_name.split('@').next().and_then(Role::from_word) else {
                warn!(name = %fd_name, "systemd kept a socket this daemon does not know: closed");
                store.remove(&fd_name);
                continue;
            };
            let (addr, fd) = match address(role, fd) {
                Ok(found) => found,
                Err(e) => {
                    warn!(name = %fd_name, "a socket systemd kept has no address: {e}");
                    store.remove(&fd_name);
                    continue;
                }
            };
            if seen.get(&fd_name) == Some(&1) {
                store.stored.insert(fd_name);
            }
            let first = match role {
                Role::L7 => !sockets.l7.contains_key(&addr),
                Role::Api => sockets.api.is_none(),
                Role::DnsUdp => !sockets.dns.udp.contains_key(&addr),
                Role::DnsTcp => !sockets.dns.tcp.contains_key(&addr),
            };
            if first {
                sockets.add(role, addr, fd);
            }
        }
        if sockets.len() > 0 {
            info!(
                sockets = sockets.len(),
                "listening on the sockets systemd kept across the restart"
            );
        }
        (store, sockets)
    }

    /// After an upgrade took `names` from the running process: systemd holds what that
    /// process filed, which the next sync brings in line with this one's sockets.
    pub(super) fn after_handover(names: &[(Role, SocketAddr)]) -> FdStore {
        FdStore {
            active: std::env::var_os("NOTIFY_SOCKET").is_some(),
            stored: names.iter().map(|&(r, a)| name(r, a)).collect(),
            resend: true,
        }
    }

    /// Makes the store hold exactly `now` (every socket this process listens on): files the
    /// new ones and takes out those no longer used. systemd keeps one copy of a socket
    /// filed twice.
    pub(super) fn sync(&mut self, now: &[(Role, SocketAddr, OwnedFd)]) {
        if !self.active {
            return;
        }
        let current: HashMap<String, &OwnedFd> = now
            .iter()
            .map(|(role, addr, fd)| (name(*role, *addr), fd))
            .collect();
        let gone: Vec<String> = self
            .stored
            .iter()
            .filter(|n| !current.contains_key(*n))
            .cloned()
            .collect();
        for fd_name in gone {
            self.remove(&fd_name);
        }
        for (fd_name, fd) in &current {
            if !self.resend && self.stored.contains(fd_name) {
                continue;
            }
            let states = [NotifyState::FdStore, NotifyState::FdName(fd_name)];
            match sd_notify::notify_with_fds(&states, &[fd.as_fd()]) {
                Ok(()) => {
                    self.stored.insert(fd_name.clone());
                }
                Err(e) => warn!(
                    name = %fd_name,
                    "cannot give systemd the socket to keep across a restart: {e}"
                ),
            }
        }
        self.resend = false;
    }

    /// Takes every socket named `fd_name` out of the store.
    fn remove(&mut self, fd_name: &str) {
        self.stored.remove(fd_name);
        if !self.active {
            return;
        }
        let states = [NotifyState::FdStoreRemove, NotifyState::FdName(fd_name)];
        if let Err(e) = sd_notify::notify(&states) {
            warn!(name = %fd_name, "cannot take the socket out of systemd's store: {e}");
        }
    }
}

/// The address a kept socket listens on (it says so itself), with the socket back.
fn address(role: Role, fd: OwnedFd) -> std::io::Result<(SocketAddr, OwnedFd)> {
    match role {
        Role::DnsUdp => {
            let socket = UdpSocket::from(fd);
            Ok((socket.local_addr()?, socket.into()))
        }
        Role::L7 | Role::Api | Role::DnsTcp => {
            let socket = TcpListener::from(fd);
            Ok((socket.local_addr()?, socket.into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names carry no `:` (systemd refuses them) and differ by role and address.
    #[test]
    fn names_are_valid_and_distinct() {
        let v4: SocketAddr = "127.0.0.1:8080".parse().expect("addr");
        let v6: SocketAddr = "[2001:db8::1]:53".parse().expect("addr");
        let names = [
            name(Role::L7, v4),
            name(Role::Api, v4),
            name(Role::DnsUdp, v6),
            name(Role::DnsTcp, v6),
        ];
        for n in &names {
            assert!(!n.contains(':') && n.is_ascii() && n.len() < 256, "{n}");
        }
        assert_eq!(names.iter().collect::<HashSet<_>>().len(), names.len());
        assert_eq!(name(Role::DnsUdp, v6), "dns-udp@[2001_db8__1]_53");
        for role in [Role::L7, Role::Api, Role::DnsUdp, Role::DnsTcp] {
            assert_eq!(Role::from_word(role.word()), Some(role));
        }
    }
}
