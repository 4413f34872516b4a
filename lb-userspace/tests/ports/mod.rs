//! Loopback ports for tests that must name a port before the code under test binds it.
//!
//! Picking a port by binding port 0 and releasing it races with every socket a parallel test
//! opens: the kernel hands the same ephemeral range to client sockets, and a DNS query's UDP
//! socket once took a DNS vService's port between the pick and the bind. Ports below the
//! ephemeral range are never handed out that way, so only another explicit pick can collide,
//! and picks start at different places in the range.

use std::net::{TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};

/// A port of 127.0.0.1 free for both TCP and UDP right now, below the ephemeral range.
pub fn free_port() -> u16 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let (low, high) = below_ephemeral_range();
    let span = u64::from(high - low);
    let seed = u64::from(std::process::id()) * 7919
        + std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::from(d.subsec_nanos()));
    let first = seed + NEXT.fetch_add(1, Ordering::Relaxed) * 4099;
    for i in 0..1000 {
        let port = low + u16::try_from((first + i * 7907) % span).unwrap_or(0);
        let udp = UdpSocket::bind(("127.0.0.1", port));
        if udp.is_ok() && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port below the ephemeral range");
}

/// From port 10000 up to the first port of the kernel's ephemeral range.
fn below_ephemeral_range() -> (u16, u16) {
    let high = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .filter(|&first| first > 11000)
        .unwrap_or(32768);
    (10000, high)
}
