//! The TCP check (S-HC2) as seen on the wire: a packet capture on `lo` records every segment of
//! a probe's connection, so these tests say which packets were sent, not only what the probe
//! reported.
//!
//! What they prove: the default half-open check sends SYN, takes the SYN-ACK as the success
//! and answers it with RST, never the final ACK (the kernel was told to delay it, and the
//! zero-linger close comes first), so the target's listener never completes a handshake and
//! nothing reaches its accept queue: the target pays nothing beyond answering a SYN, as with
//! HAProxy's layer-4 check. `handshake = "full"` completes the handshake (SYN, SYN-ACK, ACK)
//! before the RST, and a closed port answers the SYN with RST.
//!
//! The capture is an `AF_PACKET` socket, so these tests need root (CAP_NET_RAW), as in CI.

use std::fmt;
use std::io;
use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use lb::config::Handshake;
use lb::health::{Probe, ProbeResult, TcpProbe};

/// Timeout of each check.
const T: Duration = Duration::from_secs(1);

// S-HC2: the half-open check's wire is SYN, SYN-ACK, RST, and the listener never gets a
// connection.
#[tokio::test]
async fn s_hc2_tcp_half_open_check_sends_syn_then_rst_and_never_completes_the_handshake() {
    let listener = listen(Ipv4Addr::LOCALHOST.into()).expect("bind 127.0.0.1:0");
    assert_half_open(&listener).await;
}

// S-HC2: the same over IPv6, when the machine has ::1.
#[tokio::test]
async fn s_hc2_tcp_half_open_check_over_ipv6_sends_syn_then_rst() {
    let listener = match listen(Ipv6Addr::LOCALHOST.into()) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("cannot bind [::1]:0 ({e}): no IPv6 loopback here; skipping");
            return;
        }
    };
    assert_half_open(&listener).await;
}

// S-HC2: `Handshake::Full` completes the handshake (the client's ACK), then resets, and the
// listener accepts the connection.
#[tokio::test]
async fn s_hc2_tcp_full_handshake_check_completes_then_resets() {
    let listener = listen(Ipv4Addr::LOCALHOST.into()).expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("listener address");
    let (result, wire) = check_on_wire(addr, Handshake::Full).await;

    assert!(result.ok, "the full check failed: {result:?}; wire: {wire}");
    assert!(
        wire.sent(Dir::ToServer).contains(&ACK),
        "the full check never sent the bare ACK that completes the handshake; wire: {wire}"
    );
    assert_wire(
        &wire,
        &[
            "C>S SYN, S>C SYN-ACK, C>S ACK, C>S RST-ACK",
            "C>S SYN, S>C SYN-ACK, C>S ACK, C>S RST",
        ],
        "the full check",
    );
    match listener.accept() {
        Ok((_, peer)) => assert_eq!(
            Some(peer.port()),
            wire.client_port(),
            "the accepted connection is not the probe's; wire: {wire}"
        ),
        Err(e) => {
            panic!("the full check's connection never reached the accept queue: {e}; wire: {wire}")
        }
    }
}

// S-HC2/S-HC3: a closed port answers the half-open check's SYN with RST, and the check fails
// with "refused".
#[tokio::test]
async fn s_hc3_tcp_half_open_check_of_a_closed_port_sees_syn_answered_by_rst() {
    let addr = {
        let listener = listen(Ipv4Addr::LOCALHOST.into()).expect("bind 127.0.0.1:0");
        listener.local_addr().expect("listener address")
    };
    let (result, wire) = check_on_wire(addr, Handshake::HalfOpen).await;

    assert!(
        !result.ok,
        "a closed port passed the check: {result:?}; wire: {wire}"
    );
    assert!(
        result.reason.contains("refused"),
        "reason {:?} lacks \"refused\"; wire: {wire}",
        result.reason
    );
    assert_wire(
        &wire,
        &["C>S SYN, S>C RST-ACK"],
        "the check of a closed port",
    );
}

/// The half-open check against `listener`: success, SYN / SYN-ACK / RST on the wire, and an
/// empty accept queue.
async fn assert_half_open(listener: &TcpListener) {
    let addr = listener.local_addr().expect("listener address");
    let (result, wire) = check_on_wire(addr, Handshake::HalfOpen).await;

    assert!(
        result.ok,
        "the half-open check failed: {result:?}; wire: {wire}"
    );
    let client = wire.sent(Dir::ToServer);
    assert!(
        !client.contains(&ACK),
        "the half-open check sent a bare ACK, so the handshake completed; wire: {wire}"
    );
    assert!(
        !client.iter().any(|flags| flags & FIN != 0),
        "the half-open check closed with FIN instead of RST; wire: {wire}"
    );
    assert_eq!(
        wire.sent(Dir::ToClient),
        [SYN | ACK],
        "the listener should have sent one SYN-ACK and nothing else; wire: {wire}"
    );
    // Linux sends an active reset as RST with ACK set; a bare RST would do as well.
    assert_wire(
        &wire,
        &[
            "C>S SYN, S>C SYN-ACK, C>S RST-ACK",
            "C>S SYN, S>C SYN-ACK, C>S RST",
        ],
        "the half-open check",
    );
    match listener.accept() {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        Ok((_, peer)) => panic!(
            "the half-open check completed a connection (from {peer}) that reached the accept \
             queue; wire: {wire}"
        ),
        Err(e) => panic!("accept on the listener: {e}; wire: {wire}"),
    }
}

/// A non-blocking listener on `ip`, port 0, with the default backlog.
fn listen(ip: IpAddr) -> io::Result<TcpListener> {
    let listener = TcpListener::bind((ip, 0))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Runs one check of `addr` with the capture open, and returns its result and wire record.
async fn check_on_wire(addr: SocketAddr, handshake: Handshake) -> (ProbeResult, Wire) {
    let capture = Capture::open(addr);
    let probe = TcpProbe::new(addr, T, handshake);
    let result = tokio::time::timeout(T * 3, probe.check())
        .await
        .expect("the probe bounds itself by its timeout");
    let wire = capture.finish().await;
    eprintln!(
        "{handshake:?} check of {addr}: {} ({})",
        wire, result.reason
    );
    (result, wire)
}

/// Fails unless the wire record reads as one of `expected`.
fn assert_wire(wire: &Wire, expected: &[&str], what: &str) {
    let seen = wire.to_string();
    assert!(
        expected.contains(&seen.as_str()),
        "{what}: the wire showed {seen:?}, expected {}",
        expected.join(" or ")
    );
}

// ---- The capture ----

/// How long the capture keeps listening after a check: longer than Linux's delayed-ACK timer
/// (TCP_DELACK_MAX, 200 ms), so an ACK the kernel merely postponed would still be seen.
const LINGER: Duration = Duration::from_millis(300);
/// Bytes kept of each frame: enough for Ethernet, IPv6 and a TCP header with options.
const SNAPLEN: u32 = 256;

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;

/// Who sent a segment, seen from the checked address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    /// From the prober to the checked address ("C>S").
    ToServer,
    /// From the checked address back to the prober ("S>C").
    ToClient,
}

/// One TCP segment as it went over `lo`.
#[derive(Clone, Copy, Debug)]
struct Segment {
    dir: Dir,
    /// The prober's port, which tells one connection from another.
    client_port: u16,
    flags: u8,
    payload: usize,
}

impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dir = match self.dir {
            Dir::ToServer => "C>S",
            Dir::ToClient => "S>C",
        };
        let names: Vec<&str> = [
            (SYN, "SYN"),
            (FIN, "FIN"),
            (RST, "RST"),
            (PSH, "PSH"),
            (ACK, "ACK"),
        ]
        .iter()
        .filter(|(bit, _)| self.flags & bit != 0)
        .map(|(_, name)| *name)
        .collect();
        write!(f, "{dir} {}", names.join("-"))?;
        if self.payload > 0 {
            write!(f, " +{} bytes", self.payload)?;
        }
        Ok(())
    }
}

/// The segments of one probe connection, in wire order; shown as "C>S SYN, S>C SYN-ACK, ...".
struct Wire(Vec<Segment>);

impl fmt::Display for Wire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(nothing)");
        }
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join(", "))
    }
}

impl Wire {
    /// The flags of the segments sent in direction `dir`, in order.
    fn sent(&self, dir: Dir) -> Vec<u8> {
        self.0
            .iter()
            .filter(|s| s.dir == dir)
            .map(|s| s.flags)
            .collect()
    }

    /// The prober's port, if any segment was seen.
    fn client_port(&self) -> Option<u16> {
        self.0.first().map(|s| s.client_port)
    }
}

/// A packet socket on `lo` that queues, from the moment it is opened, the TCP segments to or
/// from one port (filtered in the kernel, so other loopback traffic cannot fill its buffer).
struct Capture {
    fd: OwnedFd,
    server: SocketAddr,
}

impl Capture {
    /// Opens the capture for connections with `server`; panics when it cannot (needs root).
    fn open(server: SocketAddr) -> Capture {
        // Protocol 0: the socket receives nothing until it is bound (with ETH_P_ALL), so no
        // frame gets in before the filter is attached.
        // SAFETY: plain socket(2); the result is checked.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if raw < 0 {
            panic!(
                "cannot open an AF_PACKET capture socket ({}): these wire tests must run as root \
                 (CAP_NET_RAW), as they do in CI",
                io::Error::last_os_error()
            );
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let mut program = filter(server.port());
        let fprog = libc::sock_fprog {
            len: u16::try_from(program.len()).expect("a short filter"),
            filter: program.as_mut_ptr(),
        };
        // SAFETY: `fprog` points at `program`, alive across the call (the kernel copies it);
        // the option's true size is passed.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                (&raw const fprog).cast(),
                mem::size_of_val(&fprog) as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "SO_ATTACH_FILTER: {}", io::Error::last_os_error());

        // SAFETY: the name is a NUL-terminated literal.
        let ifindex = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
        assert_ne!(
            ifindex,
            0,
            "if_nametoindex(lo): {}",
            io::Error::last_os_error()
        );
        // SAFETY: sockaddr_ll is plain data, for which all zeroes is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = i32::try_from(ifindex).expect("an ifindex fits an int");
        // SAFETY: `sll` is a valid sockaddr_ll, of the size passed.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const sll).cast(),
                mem::size_of_val(&sll) as libc::socklen_t,
            )
        };
        assert_eq!(
            rc,
            0,
            "bind the capture to lo: {}",
            io::Error::last_os_error()
        );
        Capture { fd, server }
    }

    /// Waits [`LINGER`], then returns the segments of the probe's connection: the one whose
    /// client sent the first bare SYN to the server (a released port may meanwhile serve as
    /// another test's source port).
    async fn finish(self) -> Wire {
        tokio::time::sleep(LINGER).await;
        let all = self.drain();
        let client_port = all
            .iter()
            .find(|s| s.dir == Dir::ToServer && s.flags == SYN)
            .map(|s| s.client_port);
        Wire(match client_port {
            Some(port) => all.into_iter().filter(|s| s.client_port == port).collect(),
            None => all,
        })
    }

    /// Reads every queued frame (bounded in time and count), keeping one copy of each
    /// segment; fails if the kernel dropped any, since then the record would be incomplete.
    fn drain(&self) -> Vec<Segment> {
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut segments = Vec::new();
        let mut buf = [0u8; SNAPLEN as usize];
        for _ in 0..10_000 {
            assert!(Instant::now() < deadline, "the capture never ran dry");
            // SAFETY: sockaddr_ll is plain data, for which all zeroes is a valid value.
            let mut from: libc::sockaddr_ll = unsafe { mem::zeroed() };
            let mut from_len = mem::size_of_val(&from) as libc::socklen_t;
            // SAFETY: `buf` and `from` are valid for the lengths passed.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                    (&raw mut from).cast(),
                    &mut from_len,
                )
            };
            let Ok(n) = usize::try_from(n) else {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => break,
                    io::ErrorKind::Interrupted => continue,
                    _ => panic!("recvfrom on the capture: {e}"),
                }
            };
            // On lo each frame is seen twice: leaving (PACKET_OUTGOING) and arriving
            // (PACKET_HOST). Keep the outgoing copy only.
            if from.sll_pkttype != libc::PACKET_OUTGOING {
                continue;
            }
            if let Some(segment) = parse(&buf[..n.min(buf.len())], self.server) {
                segments.push(segment);
            }
        }
        let mut stats = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = mem::size_of_val(&stats) as libc::socklen_t;
        // SAFETY: `stats` is valid for `len` bytes.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&raw mut stats).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "PACKET_STATISTICS: {}", io::Error::last_os_error());
        assert_eq!(
            stats.tp_drops, 0,
            "the capture dropped {} frames, so its record is incomplete",
            stats.tp_drops
        );
        segments
    }
}

/// The capture's classic BPF filter: TCP over IPv4 or IPv6 (no extension headers, as on
/// loopback) with `port` as source or destination; keeps the first [`SNAPLEN`] bytes.
fn filter(port: u16) -> Vec<libc::sock_filter> {
    use libc::{
        BPF_ABS, BPF_B, BPF_H, BPF_IND, BPF_JEQ, BPF_JMP, BPF_K, BPF_LD, BPF_LDX, BPF_MSH, BPF_RET,
    };
    const ACCEPT: usize = 16;
    const DROP: usize = 17;
    fn op(code: u32, k: u32) -> libc::sock_filter {
        libc::sock_filter {
            code: code as u16,
            jt: 0,
            jf: 0,
            k,
        }
    }
    // The jump at index `at`: to `yes` if A == k, else to `no` (offsets count from the next).
    fn jeq(at: usize, k: u32, yes: usize, no: usize) -> libc::sock_filter {
        let offset = |to: usize| u8::try_from(to - at - 1).expect("a short jump");
        libc::sock_filter {
            code: (BPF_JMP | BPF_JEQ | BPF_K) as u16,
            jt: offset(yes),
            jf: offset(no),
            k,
        }
    }
    let port = u32::from(port);
    let tcp = libc::IPPROTO_TCP as u32;
    vec![
        /* 0 */ op(BPF_LD | BPF_H | BPF_ABS, 12), // ethertype
        /* 1 */ jeq(1, 0x0800, 2, 9),
        /* 2 */ op(BPF_LD | BPF_B | BPF_ABS, 14 + 9), // IPv4 protocol
        /* 3 */ jeq(3, tcp, 4, DROP),
        /* 4 */ op(BPF_LDX | BPF_B | BPF_MSH, 14), // X = IPv4 header length
        /* 5 */ op(BPF_LD | BPF_H | BPF_IND, 14), // TCP source port
        /* 6 */ jeq(6, port, ACCEPT, 7),
        /* 7 */ op(BPF_LD | BPF_H | BPF_IND, 14 + 2), // TCP destination port
        /* 8 */ jeq(8, port, ACCEPT, DROP),
        /* 9 */ jeq(9, libc::ETH_P_IPV6 as u32, 10, DROP),
        /* 10 */ op(BPF_LD | BPF_B | BPF_ABS, 14 + 6), // IPv6 next header
        /* 11 */ jeq(11, tcp, 12, DROP),
        /* 12 */ op(BPF_LD | BPF_H | BPF_ABS, 14 + 40), // TCP source port
        /* 13 */ jeq(13, port, ACCEPT, 14),
        /* 14 */ op(BPF_LD | BPF_H | BPF_ABS, 14 + 40 + 2), // TCP destination port
        /* 15 */ jeq(15, port, ACCEPT, DROP),
        /* ACCEPT */ op(BPF_RET | BPF_K, SNAPLEN),
        /* DROP */ op(BPF_RET | BPF_K, 0),
    ]
}

/// Parses a frame from lo (a 14-byte Ethernet header, then IPv4 or IPv6, then TCP) into a
/// segment to or from `server`, if it is one.
fn parse(frame: &[u8], server: SocketAddr) -> Option<Segment> {
    let be16 = |b: &[u8], at: usize| -> Option<u16> {
        Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
    };
    let ip = frame.get(14..)?;
    // The TCP segment, its length by the IP header, and the source and destination address.
    let (tcp, tcp_len, src, dst): (&[u8], usize, IpAddr, IpAddr) = match be16(frame, 12)? {
        0x0800 => {
            let ihl = usize::from(ip.first()? & 0x0f) * 4;
            if *ip.get(9)? != 6 || ihl < 20 {
                return None;
            }
            let addr = |at: usize| -> Option<IpAddr> {
                let b: [u8; 4] = ip.get(at..at + 4)?.try_into().ok()?;
                Some(IpAddr::from(b))
            };
            let total = usize::from(be16(ip, 2)?);
            (
                ip.get(ihl..)?,
                total.checked_sub(ihl)?,
                addr(12)?,
                addr(16)?,
            )
        }
        0x86dd => {
            if *ip.get(6)? != 6 {
                return None;
            }
            let addr = |at: usize| -> Option<IpAddr> {
                let b: [u8; 16] = ip.get(at..at + 16)?.try_into().ok()?;
                Some(IpAddr::from(b))
            };
            (
                ip.get(40..)?,
                usize::from(be16(ip, 4)?),
                addr(8)?,
                addr(24)?,
            )
        }
        _ => return None,
    };
    let (sport, dport) = (be16(tcp, 0)?, be16(tcp, 2)?);
    let header_len = usize::from(tcp.get(12)? >> 4) * 4;
    let flags = *tcp.get(13)?;
    let payload = tcp_len.checked_sub(header_len)?;
    let (dir, client_port) = if (dst, dport) == (server.ip(), server.port()) {
        (Dir::ToServer, sport)
    } else if (src, sport) == (server.ip(), server.port()) {
        (Dir::ToClient, dport)
    } else {
        return None;
    };
    Some(Segment {
        dir,
        client_port,
        flags,
        payload,
    })
}
