//! Ping check (S-HC2): one ICMP echo request, success on the matching echo reply.
//!
//! Uses a raw ICMP socket (we run as root); where raw sockets are not permitted it falls back
//! to the kernel's unprivileged "ping socket" (SOCK_DGRAM), which also demultiplexes replies.
//! A raw socket sees every ICMP message of the host, so each check opens its own socket only
//! for the check's duration and ignores what does not match its identifier and sequence.

use std::io;
use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::time::{Instant, timeout_at};

use super::icmp::{self, Echo};
use super::probe::{BoxFuture, Probe, ProbeResult, fmt_ms};

/// Payload carried by our echo requests (recognisable in captures).
const PAYLOAD: &[u8] = b"lb-health-check!";

/// Pings one address.
#[derive(Debug)]
pub struct PingProbe {
    target: IpAddr,
    /// Socket mark (0: none).
    mark: u32,
    timeout: Duration,
    seq: AtomicU16,
}

impl PingProbe {
    /// A probe for `target`, each check bounded by `timeout`.
    pub fn new(target: IpAddr, timeout: Duration) -> Self {
        Self {
            target,
            mark: 0,
            timeout,
            seq: AtomicU16::new(rand::random()),
        }
    }

    /// The same probe with its echo requests marked `mark` (a check through a tunnel,
    /// S-TN4).
    pub fn with_mark(mut self, mark: u32) -> Self {
        self.mark = mark;
        self
    }

    async fn run(&self) -> ProbeResult {
        let start = Instant::now();
        match self.ping(start + self.timeout).await {
            Ok(()) => ProbeResult::success(
                format!("echo reply in {}", fmt_ms(start.elapsed())),
                start.elapsed(),
            ),
            Err(reason) => ProbeResult::failure(reason, start.elapsed()),
        }
    }

    async fn ping(&self, deadline: Instant) -> Result<(), String> {
        let socket =
            IcmpSocket::open(self.target, self.mark).map_err(|e| format!("ICMP socket: {e}"))?;
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut ident: u16 = rand::random();
        let request = icmp::echo_request(socket.v6, ident, seq, PAYLOAD);
        match timeout_at(deadline, socket.send_to(&request, self.target)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("send echo request: {e}")),
            Err(_) => return Err("send echo request: blocked until the timeout".to_string()),
        }
        if !socket.raw {
            // A ping socket replaces the identifier with its own port number.
            ident = socket
                .local_port()
                .map_err(|e| format!("ICMP socket: {e}"))?;
        }
        let mut buf = [0u8; 1500];
        loop {
            let (n, from) = match timeout_at(deadline, socket.recv_from(&mut buf)).await {
                Ok(Ok(got)) => got,
                Ok(Err(e)) => return Err(format!("receive: {e}")),
                Err(_) => return Err("no echo reply before the timeout".to_string()),
            };
            let with_ip_header = socket.raw && !socket.v6;
            match icmp::parse(&buf[..n], socket.v6, with_ip_header) {
                Some(Echo::Reply { ident: i, seq: s })
                    if i == ident && s == seq && from == self.target =>
                {
                    return Ok(());
                }
                Some(Echo::Unreachable {
                    ident: i,
                    seq: s,
                    code,
                }) if i == ident && s == seq => {
                    return Err(format!("destination unreachable (code {code}) from {from}"));
                }
                _ => {}
            }
        }
    }
}

impl Probe for PingProbe {
    fn check(&self) -> BoxFuture<'_, ProbeResult> {
        Box::pin(self.run())
    }
}

/// A non-blocking ICMP or ICMPv6 socket registered with tokio.
struct IcmpSocket {
    fd: AsyncFd<OwnedFd>,
    v6: bool,
    raw: bool,
}

impl IcmpSocket {
    fn open(target: IpAddr, mark: u32) -> io::Result<Self> {
        let v6 = target.is_ipv6();
        let (domain, proto) = if v6 {
            (libc::AF_INET6, libc::IPPROTO_ICMPV6)
        } else {
            (libc::AF_INET, libc::IPPROTO_ICMP)
        };
        let (fd, raw) = match new_socket(domain, libc::SOCK_RAW, proto) {
            Ok(fd) => (fd, true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
                (new_socket(domain, libc::SOCK_DGRAM, proto)?, false)
            }
            Err(e) => return Err(e),
        };
        if mark != 0 {
            socket2::SockRef::from(&fd).set_mark(mark)?;
        }
        // SAFETY: `OwnedFd` keeps the descriptor open and unchanged until the AsyncFd drops it.
        let fd = unsafe { AsyncFd::register(fd) }.map_err(io::Error::from)?;
        Ok(Self { fd, v6, raw })
    }

    async fn send_to(&self, packet: &[u8], to: IpAddr) -> io::Result<()> {
        let (addr, len) = sockaddr(to);
        loop {
            let mut guard = self.fd.writable().await?;
            let sent = guard.try_io(|fd| {
                // SAFETY: `packet` and `addr` are valid for the lengths passed.
                let n = unsafe {
                    libc::sendto(
                        fd.as_raw_fd(),
                        packet.as_ptr().cast(),
                        packet.len(),
                        0,
                        (&raw const addr).cast(),
                        len,
                    )
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
            if let Ok(result) = sent {
                return result;
            }
        }
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, IpAddr)> {
        loop {
            let mut guard = self.fd.readable().await?;
            let got = guard.try_io(|fd| {
                // SAFETY: an all-zero sockaddr_storage is valid; the kernel writes at most
                // `len` bytes into it and at most `buf.len()` bytes into `buf`.
                let mut from: libc::sockaddr_storage = unsafe { mem::zeroed() };
                let mut len = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                let n = unsafe {
                    libc::recvfrom(
                        fd.as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        0,
                        (&raw mut from).cast(),
                        &mut len,
                    )
                };
                if n < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok((n as usize, ip_of(&from)))
            });
            if let Ok(result) = got {
                return result;
            }
        }
    }

    /// The identifier a ping socket uses: its local "port".
    fn local_port(&self) -> io::Result<u16> {
        // SAFETY: as in recv_from, the kernel fills at most `len` bytes.
        let mut addr: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let mut len = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let rc =
            unsafe { libc::getsockname(self.fd.as_raw_fd(), (&raw mut addr).cast(), &mut len) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(port_of(&addr))
    }
}

fn new_socket(domain: i32, kind: i32, proto: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; on success we own the returned descriptor.
    let fd = unsafe {
        libc::socket(
            domain,
            kind | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            proto,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh, valid descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn sockaddr(ip: IpAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is valid, and it is large and aligned enough to
    // hold either address family written below.
    let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let len = match ip {
        IpAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from(v4).to_be(),
                },
                sin_zero: [0; 8],
            };
            unsafe { (&raw mut storage).cast::<libc::sockaddr_in>().write(sin) };
            mem::size_of::<libc::sockaddr_in>()
        }
        IpAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: 0,
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.octets(),
                },
                sin6_scope_id: 0,
            };
            unsafe { (&raw mut storage).cast::<libc::sockaddr_in6>().write(sin6) };
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

fn ip_of(storage: &libc::sockaddr_storage) -> IpAddr {
    match i32::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
        }
        _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    }
}

fn port_of(storage: &libc::sockaddr_storage) -> u16 {
    match i32::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            u16::from_be(sin.sin_port)
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            u16::from_be(sin6.sin6_port)
        }
        _ => 0,
    }
}
