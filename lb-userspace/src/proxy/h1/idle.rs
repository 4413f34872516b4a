//! Idle keep-alive connections to backends, per thread.
//!
//! Each proxy worker thread keeps its own idle connections (like HAProxy's per-thread idle
//! lists), so taking and returning one needs no lock and no other thread's wakeup. A
//! connection is reused only while it is younger than the keep-alive timeout and the backend
//! has not closed it; the most recently used one is taken first, so the cold ones age out.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

/// Idle connections kept per backend and thread at most; more are closed on return.
const MAX_IDLE_PER_BACKEND: usize = 512;

struct Idle {
    stream: TcpStream,
    /// When the connection stops being worth reusing (the keep-alive timeout).
    until: Instant,
}

thread_local! {
    static IDLE: RefCell<HashMap<SocketAddr, Vec<Idle>>> = RefCell::new(HashMap::new());
}

/// A live idle connection to `addr` still within its keep-alive time, if this thread has one.
pub(crate) fn take(addr: SocketAddr) -> Option<TcpStream> {
    IDLE.with(|idle| {
        let mut idle = idle.borrow_mut();
        let list = idle.get_mut(&addr)?;
        let now = Instant::now();
        while let Some(c) = list.pop() {
            if c.until > now && alive(&c.stream) {
                return Some(c.stream);
            }
        }
        None
    })
}

/// Returns a connection whose last exchange ended cleanly, for reuse within `keep_alive`.
pub(crate) fn give_back(addr: SocketAddr, stream: TcpStream, keep_alive: Duration) {
    IDLE.with(|idle| {
        let mut idle = idle.borrow_mut();
        let list = idle.entry(addr).or_default();
        if list.len() < MAX_IDLE_PER_BACKEND {
            list.push(Idle {
                stream,
                until: Instant::now() + keep_alive,
            });
        }
    });
}

/// Closes this thread's connections past their keep-alive time or closed by the backend (run
/// periodically so backends are not left holding connections nobody will reuse).
pub(crate) fn expire() {
    IDLE.with(|idle| {
        let mut idle = idle.borrow_mut();
        let now = Instant::now();
        for list in idle.values_mut() {
            list.retain(|c| c.until > now && alive(&c.stream));
        }
        idle.retain(|_, list| !list.is_empty());
    });
}

/// False when the backend closed the connection or sent something unasked (both make it
/// unusable). Costs no system call while the reactor has seen nothing on the socket.
fn alive(stream: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}
