//! The checks the kernel's own IP receive path makes before it would forward a packet, made
//! here for the packets this program forwards (to a VIP, or a NAT reply): a packet the
//! kernel would drop is dropped and counted by reason, never sent on with `XDP_TX`.
//!
//! The header checks (IPv4 header checksum, IPv4 options) run for every packet that the
//! address filter says may be ours; they cost nothing for other traffic, which the kernel
//! checks itself. The source check runs once the VIP is known, so that a packet to the
//! host itself from an address such as 0.0.0.0 (a DHCP client) is never touched.

use lb_common::{GLOBAL_BAD_CHECKSUM, GLOBAL_BAD_IP_OPTIONS};

use aya_ebpf::bindings::xdp_md;
use aya_ebpf::helpers::generated::bpf_xdp_load_bytes;
use aya_ebpf::programs::XdpContext;

use crate::csum;
use crate::headers::Ipv4Hdr;

/// Bytes of IPv4 options at most (IHL 15).
const MAX_OPTIONS: usize = 40;
/// IPv4 option kinds that stand alone (RFC 791): end of list, no operation.
const OPT_END: u8 = 0;
const OPT_NOP: u8 = 1;
/// What [`options`] returns for malformed options (no sum of 20 words reaches it).
const BAD_OPTIONS: u64 = u64::MAX;

/// Why the IPv4 header is not one the kernel would accept, as a `GLOBAL_*` counter.
#[inline(always)]
pub fn ipv4_header(ctx: &XdpContext, ip: *const Ipv4Hdr) -> Result<(), u32> {
    let ihl = (unsafe { (*ip).ver_ihl } & 0x0f) as u32;
    // The fixed 20 bytes, as ten 16-bit words (the parser has bounds-checked them).
    let words = ip as *const u16;
    let mut sum = 0u64;
    let mut i = 0;
    while i < 10 {
        // SAFETY: inside the 20 bytes checked; an IP header starts at an even offset.
        sum += unsafe { *words.add(i) } as u64;
        i += 1;
    }
    if ihl > 5 {
        let at = (ip as usize - ctx.data()) as u32 + 20;
        let more = options(ctx.ctx, at, (ihl - 5) * 4);
        if more == BAD_OPTIONS {
            return Err(GLOBAL_BAD_IP_OPTIONS);
        }
        sum += more;
    }
    if csum::fold(sum) != 0xffff {
        return Err(GLOBAL_BAD_CHECKSUM);
    }
    Ok(())
}

/// The checksum words of the `len` bytes of options at `at`, or [`BAD_OPTIONS`] when their
/// structure is not one the kernel's `ip_options_compile` accepts: each option other than
/// end-of-list and no-operation has a length of at least 2 that stays inside the header.
///
/// A BPF subprogram that reads a copy of the options on its stack: each walk step is at a
/// fixed position and only compares the option's start with it, so the verifier's work
/// stays small, and the caller goes on once per result rather than once per shape of
/// options.
#[inline(never)]
fn options(ctx: *mut xdp_md, at: u32, len: u32) -> u64 {
    // One byte more than the longest options: a kind in the last byte reads a zero length.
    let mut buf = [0u8; MAX_OPTIONS + 2];
    let len = len as usize;
    if len == 0 || len > MAX_OPTIONS {
        return BAD_OPTIONS;
    }
    // SAFETY: `buf` holds `len` bytes; the helper checks `at + len` against the frame.
    if unsafe { bpf_xdp_load_bytes(ctx, at, buf.as_mut_ptr() as *mut _, len as u32) } != 0 {
        return BAD_OPTIONS;
    }
    let mut sum = 0u64;
    let mut i = 0;
    while i < MAX_OPTIONS {
        // Zeros past `len` add nothing.
        sum += u16::from_ne_bytes([buf[i], buf[i + 1]]) as u64;
        i += 2;
    }
    // Where the next option starts; no option is read after end-of-list.
    let mut next = 0usize;
    let mut i = 0;
    while i < MAX_OPTIONS {
        if i >= len {
            break;
        }
        if i == next {
            match buf[i] {
                OPT_END => break,
                OPT_NOP => next = i + 1,
                _ => {
                    let opt = buf[i + 1] as usize;
                    if opt < 2 || i + opt > len {
                        return BAD_OPTIONS;
                    }
                    next = i + opt;
                }
            }
        }
        i += 1;
    }
    sum
}

/// Whether an IPv4 source address is one no host sends from (RFC 1122 3.2.1.3, RFC 5735):
/// this network (0/8), loopback (127/8), multicast (224/4), reserved and broadcast
/// (240/4). `addr` is in network order.
#[inline(always)]
pub fn martian_v4(addr: u32) -> bool {
    let first = u32::from_be(addr) >> 24;
    first == 0 || first == 127 || first >= 224
}

/// Whether an IPv6 source address is one no host sends from (RFC 4291 2.5.2, 2.5.3, 2.7):
/// unspecified (::), loopback (::1), multicast (ff00::/8).
#[inline(always)]
pub fn martian_v6(addr: &[u32; 4]) -> bool {
    let first = u32::from_be(addr[0]);
    if first >> 24 == 0xff {
        return true;
    }
    first == 0 && addr[1] == 0 && addr[2] == 0 && (addr[3] == 0 || u32::from_be(addr[3]) == 1)
}
