//! What the agent reads a frame through, the same for its XDP program and its tc one: the
//! packet's bounds for direct reads, and a copy of bytes at an offset for what the verifier
//! cannot follow by pointer (IPv4 options of variable length).

use aya_ebpf::EbpfContext;
use aya_ebpf::helpers::generated::{bpf_skb_load_bytes, bpf_xdp_load_bytes};
use aya_ebpf::programs::{TcContext, XdpContext};

/// A frame the agent checks: an XDP buffer or a socket buffer at tc ingress.
pub trait Frame: EbpfContext {
    /// The frame's first byte (its Ethernet header).
    fn start(&self) -> usize;
    /// One past its last byte readable directly.
    fn end(&self) -> usize;
    /// Copies `buf.len()` bytes from `at`; false when they are not all in the frame.
    fn load(&self, at: u32, buf: &mut [u8]) -> bool;
}

impl Frame for XdpContext {
    #[inline(always)]
    fn start(&self) -> usize {
        self.data()
    }

    #[inline(always)]
    fn end(&self) -> usize {
        self.data_end()
    }

    #[inline(always)]
    fn load(&self, at: u32, buf: &mut [u8]) -> bool {
        // SAFETY: `buf` holds the bytes asked for; the helper checks `at + len` against the
        // frame.
        unsafe {
            bpf_xdp_load_bytes(self.ctx, at, buf.as_mut_ptr() as *mut _, buf.len() as u32) == 0
        }
    }
}

impl Frame for TcContext {
    #[inline(always)]
    fn start(&self) -> usize {
        self.data()
    }

    #[inline(always)]
    fn end(&self) -> usize {
        self.data_end()
    }

    #[inline(always)]
    fn load(&self, at: u32, buf: &mut [u8]) -> bool {
        // The helper itself, not `load_bytes`, which would shorten the read to what is left
        // of the buffer (down to zero bytes, which the verifier refuses): the caller's length
        // is never zero.
        // SAFETY: `buf` holds the bytes asked for; the helper checks `at + len` against the
        // buffer.
        unsafe {
            bpf_skb_load_bytes(
                self.skb.skb as *const _,
                at,
                buf.as_mut_ptr() as *mut _,
                buf.len() as u32,
            ) == 0
        }
    }
}
