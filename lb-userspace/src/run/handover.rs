//! Zero-downtime upgrade: the new `lb run --upgrade` takes the listening sockets (every L7
//! vService's and the API's) from the running one over a Unix socket, like HAProxy's `-x`.
//!
//! The running daemon listens on `/run/lb/<config path>.handover`. The new one connects
//! and asks; the old saves its health decisions (so the new one starts from them) and sends
//! copies of its sockets (SCM_RIGHTS) with their addresses. Both processes then accept on
//! the same sockets, so no connection is refused while the new one starts. When the new one
//! is serving it says so; the old one stops accepting, lets its open requests and
//! connections finish within its drain timeout, and exits. If the new one fails before
//! that, the old one never stopped and carries on.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use sendfd::{RecvWithFd, SendWithFd};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::network::run_file;

/// Sockets passed in one message, below the kernel's limit of 253 per message.
const PER_MESSAGE: usize = 200;
/// How long either side waits for the other's next word.
const PATIENCE: Duration = Duration::from_secs(30);
/// Longest Unix socket path the kernel takes (108 bytes with the NUL).
const MAX_PATH: usize = 107;

/// What a listening socket serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Role {
    /// An HTTP or L7 TCP vService.
    L7,
    /// The REST API.
    Api,
    /// A DNS vService's UDP socket.
    DnsUdp,
    /// A DNS vService's TCP listener.
    DnsTcp,
}

impl Role {
    /// The role's word in a socket's name (the FD store's `FDNAME=`).
    pub(crate) fn word(self) -> &'static str {
        match self {
            Role::L7 => "l7",
            Role::Api => "api",
            Role::DnsUdp => "dns-udp",
            Role::DnsTcp => "dns-tcp",
        }
    }

    /// The role a word names, if any.
    pub(crate) fn from_word(word: &str) -> Option<Role> {
        [Role::L7, Role::Api, Role::DnsUdp, Role::DnsTcp]
            .into_iter()
            .find(|r| r.word() == word)
    }
}

/// Listening sockets that a starting daemon takes instead of binding: from the `lb run` it
/// replaces (an upgrade) or kept by systemd across a restart (the FD store).
#[derive(Default)]
pub(crate) struct Sockets {
    /// L7 vService sockets by address.
    pub l7: HashMap<SocketAddr, TcpListener>,
    /// The API's socket, with its address.
    pub api: Option<(SocketAddr, TcpListener)>,
    /// DNS vService sockets.
    pub dns: crate::gslb::DnsSockets,
}

impl Sockets {
    /// Files `fd`, which serves `role` at `addr`.
    pub(crate) fn add(&mut self, role: Role, addr: SocketAddr, fd: OwnedFd) {
        match role {
            Role::L7 => {
                self.l7.insert(addr, TcpListener::from(fd));
            }
            Role::Api => self.api = Some((addr, TcpListener::from(fd))),
            Role::DnsUdp => {
                self.dns.udp.insert(addr, std::net::UdpSocket::from(fd));
            }
            Role::DnsTcp => {
                self.dns.tcp.insert(addr, TcpListener::from(fd));
            }
        }
    }

    /// How many sockets.
    pub(crate) fn len(&self) -> usize {
        self.l7.len() + usize::from(self.api.is_some()) + self.dns.udp.len() + self.dns.tcp.len()
    }
}

/// One message of the old daemon: the addresses of the sockets that come with it.
#[derive(Debug, Serialize, Deserialize)]
struct Batch {
    sockets: Vec<(Role, SocketAddr)>,
    more: bool,
}

/// Where the daemon with configuration `config_path` waits for its successor.
pub(crate) fn socket_path(config_path: &Path) -> PathBuf {
    let absolute = std::fs::canonicalize(config_path).unwrap_or_else(|_| config_path.into());
    let path = run_file(&absolute, "handover");
    if path.as_os_str().len() <= MAX_PATH {
        return path;
    }
    // Too long for a Unix socket address: named by a digest of the path instead.
    let digest = foldhash::fast::FixedState::with_seed(0x6c62);
    let hash = std::hash::BuildHasher::hash_one(&digest, &absolute);
    Path::new("/run/lb").join(format!("{hash:016x}.handover"))
}

/// The sockets taken from the running daemon, and the line to it.
pub(crate) struct Taken {
    /// The sockets, which the new daemon listens on.
    pub sockets: Sockets,
    /// What each socket served, by name ([`Role::word`] and address), as the FD store
    /// names them.
    pub names: Vec<(Role, SocketAddr)>,
    line: UnixStream,
}

impl Taken {
    /// Tells the old daemon this one serves: it stops accepting and drains.
    pub(crate) fn serving(mut self) -> Result<()> {
        self.line
            .write_all(b"serving\n")
            .context("telling the old lb run to stop")
    }
}

/// Takes the sockets of the daemon running with `config_path`. Fails, naming why, when none
/// runs (nothing to upgrade) or it does not answer.
pub(crate) fn take(config_path: &Path) -> Result<Taken> {
    let path = socket_path(config_path);
    let mut line = UnixStream::connect(&path).with_context(|| {
        format!(
            "no running lb run for {} to take over from ({})",
            config_path.display(),
            path.display()
        )
    })?;
    line.set_read_timeout(Some(PATIENCE))?;
    line.write_all(b"take 1\n")?;
    let mut sockets = Sockets::default();
    let mut names = Vec::new();
    loop {
        let (batch, fds) = receive(&line)?;
        if batch.sockets.len() != fds.len() {
            bail!(
                "the old lb run announced {} sockets and passed {}",
                batch.sockets.len(),
                fds.len()
            );
        }
        for ((role, addr), fd) in batch.sockets.into_iter().zip(fds) {
            names.push((role, addr));
            sockets.add(role, addr, fd);
        }
        if !batch.more {
            break;
        }
        line.write_all(b"next\n")?;
    }
    info!(
        sockets = sockets.len(),
        "took the listening sockets of the running lb run"
    );
    Ok(Taken {
        sockets,
        names,
        line,
    })
}

/// Reads one batch line and the descriptors that came with it.
fn receive(line: &UnixStream) -> Result<(Batch, Vec<OwnedFd>)> {
    let mut bytes = Vec::new();
    let mut fds = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut slots: [RawFd; 253] = [-1; 253];
    while !bytes.contains(&b'\n') {
        let (n, got) = line
            .recv_with_fd(&mut chunk, &mut slots)
            .context("reading from the old lb run")?;
        // SAFETY: the kernel just gave this process these descriptors; each is owned once.
        fds.extend(
            slots[..got]
                .iter()
                .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) }),
        );
        if n == 0 {
            bail!("the old lb run closed the hand-over");
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
    let text = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let batch = serde_json::from_slice(text).context("the old lb run's answer")?;
    Ok((batch, fds))
}

/// The running daemon's side: answers one successor on `line`. `sockets` lists what to pass
/// (read when asked, so a reload's new listeners are included); `before` runs first (saves
/// the health decisions). True once the successor says it serves.
pub(crate) fn answer(
    line: UnixStream,
    sockets: &dyn Fn() -> Vec<(Role, SocketAddr, OwnedFd)>,
    before: &dyn Fn(),
) -> Result<bool> {
    line.set_read_timeout(Some(PATIENCE))?;
    let mut reader = BufReader::new(line.try_clone()?);
    let mut word = String::new();
    reader.read_line(&mut word)?;
    if word.trim() != "take 1" {
        bail!("unknown hand-over request {:?}", word.trim());
    }
    before();
    let all = sockets();
    let mut batches = all.chunks(PER_MESSAGE).peekable();
    if batches.peek().is_none() {
        send(&line, &[], false)?;
    }
    while let Some(batch) = batches.next() {
        let more = batches.peek().is_some();
        send(&line, batch, more)?;
        if more {
            word.clear();
            reader.read_line(&mut word)?;
            if word.trim() != "next" {
                bail!("the new lb run stopped taking sockets");
            }
        }
    }
    // The successor starts; its word (or its end) decides.
    line.set_read_timeout(None)?;
    word.clear();
    reader.read_line(&mut word)?;
    Ok(word.trim() == "serving")
}

fn send(line: &UnixStream, batch: &[(Role, SocketAddr, OwnedFd)], more: bool) -> Result<()> {
    use std::os::fd::AsRawFd;
    let announced = Batch {
        sockets: batch.iter().map(|(role, addr, _)| (*role, *addr)).collect(),
        more,
    };
    let mut text = serde_json::to_vec(&announced)?;
    text.push(b'\n');
    let fds: Vec<RawFd> = batch.iter().map(|(_, _, fd)| fd.as_raw_fd()).collect();
    let mut sent = line.send_with_fd(&text, &fds)?;
    // The descriptors rode with the first bytes; the rest of the line follows plain.
    while sent < text.len() {
        sent += (&*line).write(&text[sent..])?;
    }
    Ok(())
}

/// Listens for a successor at the socket path of `config_path` (replacing a stale file).
pub(crate) fn listen(config_path: &Path) -> Result<tokio::net::UnixListener> {
    let path = socket_path(config_path);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)
        .with_context(|| format!("listening for an upgrade on {}", path.display()))?;
    // Only root (the owner) may take the sockets.
    use std::os::unix::fs::PermissionsExt;
    if let Err(e) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)) {
        warn!("restricting {}: {e}", path.display());
    }
    Ok(listener)
}
