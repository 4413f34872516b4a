//! The buffers of one request/response exchange, lent by the worker thread to a connection
//! only while it has a request under way.
//!
//! A keep-alive connection spends most of its life waiting for the next request; holding its
//! buffers meanwhile would cost about 16 KiB per idle connection. Like HAProxy's buffer
//! pools, each worker thread keeps a few sets of buffers: a connection takes one when its
//! client sends, and gives it back once the answer is out and nothing is pending, so an idle
//! connection holds none and a busy one reuses warm buffers without asking the allocator.

use std::cell::RefCell;

use bytes::BytesMut;

use super::head::Head;

/// Sets kept per thread at most (about as many as the requests a worker serves at once under
/// a heavy keep-alive load); more are freed on return.
const POOL_LIMIT: usize = 64;
/// A set that grew past this many bytes (a large head, a pipelined burst) is freed on return
/// rather than kept: the pool holds only everyday sizes.
const KEEP_LIMIT: usize = 64 * 1024;

/// What one exchange reads into and writes from.
#[derive(Default)]
pub(super) struct Buffers {
    /// Bytes received from the client not yet consumed (a pipelined request may wait here).
    pub cbuf: BytesMut,
    /// Bytes received from the backend of the current exchange.
    pub ubuf: BytesMut,
    /// Bytes being assembled for the next write.
    pub out: Vec<u8>,
    /// The request head as the backend gets it.
    pub uphead: Vec<u8>,
    /// The client address as X-Forwarded-For gives it, written for the request that needs it.
    pub peer_text: String,
    /// The request being served.
    pub req: Head,
    /// The backend's answer.
    pub resp: Head,
}

impl Buffers {
    /// Bytes these buffers hold allocated.
    fn footprint(&self) -> usize {
        self.cbuf.capacity()
            + self.ubuf.capacity()
            + self.out.capacity()
            + self.uphead.capacity()
            + self.peer_text.capacity()
            + self.req.footprint()
            + self.resp.footprint()
    }
}

thread_local! {
    // Boxed sets: a connection holds its set by a pointer, so lending and returning one
    // moves 8 bytes, not the set.
    #[allow(clippy::vec_box)]
    static POOL: RefCell<Vec<Box<Buffers>>> = const { RefCell::new(Vec::new()) };
}

/// A set of buffers from this thread's pool (a new, empty one when the pool is empty).
pub(super) fn take() -> Box<Buffers> {
    POOL.with(|pool| pool.borrow_mut().pop())
        .unwrap_or_default()
}

/// Returns a set whose exchange is over: emptied and kept for the next request of any
/// connection of this thread, or freed when the pool is full or the set grew large.
pub(super) fn give_back(mut b: Box<Buffers>) {
    if b.footprint() > KEEP_LIMIT {
        return;
    }
    b.cbuf.clear();
    b.ubuf.clear();
    b.out.clear();
    b.uphead.clear();
    b.peer_text.clear();
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.len() < POOL_LIMIT {
            pool.push(b);
        }
    });
}

/// Sets in this thread's pool.
#[cfg(test)]
fn pooled() -> usize {
    POOL.with(|pool| pool.borrow().len())
}

/// No rule of docs/behaviour.md covers buffer reuse: these check that an idle connection
/// holds no buffer and a busy one reuses them.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_returned_set_comes_back_empty_with_its_room() {
        let mut b = take();
        b.cbuf.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        b.ubuf.reserve(16 * 1024);
        let before = pooled();
        give_back(b);
        assert_eq!(pooled(), before + 1);
        let b = take();
        assert!(b.cbuf.is_empty());
        assert!(b.ubuf.capacity() >= 16 * 1024, "kept its room");
        assert_eq!(pooled(), before);
    }

    #[test]
    fn a_large_set_is_freed_and_the_pool_is_bounded() {
        let mut big = take();
        big.cbuf.reserve(KEEP_LIMIT + 1);
        let before = pooled();
        give_back(big);
        assert_eq!(pooled(), before, "a grown set is not kept");
        let sets: Vec<_> = (0..POOL_LIMIT + 8)
            .map(|_| Box::<Buffers>::default())
            .collect();
        for b in sets {
            give_back(b);
        }
        assert_eq!(pooled(), POOL_LIMIT);
    }
}
