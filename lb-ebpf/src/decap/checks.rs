//! The checks a tunnel packet to this host must pass before its outer header goes: the
//! outer header is one the kernel would take (no options, no fragment, a length that fits
//! the frame, a right checksum), and the inner packet is whole (its version matches the
//! outer protocol, its length is the outer payload's, its IPv4 header checksum is right).
//! Each failure names its counter.

use lb_common::decap::{DECAP_BAD_INNER, DECAP_BAD_OUTER, DECAP_FRAGMENT};
use lb_common::{FAMILY_V4, FAMILY_V6};

use crate::csum;
use crate::frame::Frame;
use network_types::ip::{Ipv4Hdr, Ipv6Hdr};

use crate::headers::{IP_FRAG_MASK, IPV6_HDR_LEN};
use crate::parse::words6;
use crate::parse::{GUE_LEN, IPV4_HDR_LEN, Outer, PROTO_INNER_V4, PROTO_INNER_V6, ptr_at};

/// Bytes of IPv4 options at most (IHL 15).
const MAX_OPTIONS: usize = 40;

/// The inner packet, checked.
pub struct Inner {
    /// `FAMILY_V4` or `FAMILY_V6`.
    pub family: u8,
    /// Destination in the 16-byte key form (IPv4 in word 0).
    pub daddr: [u32; 4],
}

/// The sum of an IPv4 header's fixed 20 bytes as ten 16-bit words (the caller has
/// bounds-checked them).
#[inline(always)]
fn fixed_sum(ip: *const Ipv4Hdr) -> u64 {
    let words = ip as *const u16;
    let mut sum = 0u64;
    let mut i = 0;
    while i < 10 {
        // SAFETY: inside the 20 bytes the caller checked.
        sum += unsafe { *words.add(i) } as u64;
        i += 1;
    }
    sum
}

/// The outer header of a tunnel packet to this host; `l3` is where it starts in the frame.
/// Returns the inner packet's length: the outer IP payload's, less the UDP and GUE headers
/// of a GUE packet, whose UDP length must be the IP payload's and whose GUE header must
/// be plain (variant 0, no options, no flags) and name IPv4 or IPv6.
#[inline(always)]
pub fn outer(o: &Outer, l3: usize, frame: usize) -> Result<usize, u32> {
    let payload = outer_ip(o, l3, frame)?;
    let gue = &o.gue;
    if !gue.present {
        return Ok(payload);
    }
    let inner_known = o.proto == PROTO_INNER_V4 || o.proto == PROTO_INNER_V6;
    if !gue.plain || !inner_known || gue.udp_len != payload || payload < GUE_LEN {
        return Err(DECAP_BAD_OUTER);
    }
    Ok(payload - GUE_LEN)
}

/// The outer IP header's checks; returns its payload's length.
#[inline(always)]
fn outer_ip(o: &Outer, l3: usize, frame: usize) -> Result<usize, u32> {
    if o.family == FAMILY_V4 {
        let ip = o.ip as *const Ipv4Hdr;
        // Version 4 and IHL 5: a balancer's outer header carries no options.
        if unsafe { (*ip).vihl } != 0x45 {
            return Err(DECAP_BAD_OUTER);
        }
        let total = u16::from_be_bytes(unsafe { (*ip).tot_len }) as usize;
        // Bytes past `total` are the link's padding; the kernel trims them.
        if total < IPV4_HDR_LEN || l3 + total > frame {
            return Err(DECAP_BAD_OUTER);
        }
        if csum::fold(fixed_sum(ip)) != 0xffff {
            return Err(DECAP_BAD_OUTER);
        }
        if u16::from_ne_bytes(unsafe { (*ip).frags }) & IP_FRAG_MASK != 0 {
            return Err(DECAP_FRAGMENT);
        }
        Ok(total - IPV4_HDR_LEN)
    } else {
        let ip = o.ip as *const Ipv6Hdr;
        if unsafe { (*ip).vcf[0] } >> 4 != 6 {
            return Err(DECAP_BAD_OUTER);
        }
        let payload = u16::from_be_bytes(unsafe { (*ip).payload_len }) as usize;
        if l3 + IPV6_HDR_LEN + payload > frame {
            return Err(DECAP_BAD_OUTER);
        }
        Ok(payload)
    }
}

/// The inner packet at `off` bytes into the frame, which the outer header says is
/// `payload` bytes long.
#[inline(always)]
pub fn inner<F: Frame>(
    frame: &F,
    (start, end): (usize, usize),
    o: &Outer,
    off: usize,
    payload: usize,
) -> Result<Inner, u32> {
    if o.proto == PROTO_INNER_V4 {
        let ip: *mut Ipv4Hdr = ptr_at(start, end, off).ok_or(DECAP_BAD_INNER)?;
        let ver_ihl = unsafe { (*ip).vihl };
        let header = ((ver_ihl & 0x0f) as usize) * 4;
        let total = u16::from_be_bytes(unsafe { (*ip).tot_len }) as usize;
        if ver_ihl >> 4 != 4 || header < IPV4_HDR_LEN || header > payload || total != payload {
            return Err(DECAP_BAD_INNER);
        }
        let mut sum = fixed_sum(ip);
        if header > IPV4_HDR_LEN {
            sum += options_sum(frame, (off + IPV4_HDR_LEN) as u32, header - IPV4_HDR_LEN)
                .ok_or(DECAP_BAD_INNER)?;
        }
        if csum::fold(sum) != 0xffff {
            return Err(DECAP_BAD_INNER);
        }
        Ok(Inner {
            family: FAMILY_V4,
            daddr: [u32::from_ne_bytes(unsafe { (*ip).dst_addr }), 0, 0, 0],
        })
    } else {
        let ip: *mut Ipv6Hdr = ptr_at(start, end, off).ok_or(DECAP_BAD_INNER)?;
        let version = unsafe { (*ip).vcf[0] } >> 4;
        let inner_payload = u16::from_be_bytes(unsafe { (*ip).payload_len }) as usize;
        if version != 6 || IPV6_HDR_LEN + inner_payload != payload {
            return Err(DECAP_BAD_INNER);
        }
        Ok(Inner {
            family: FAMILY_V6,
            daddr: words6(unsafe { &(*ip).dst_addr }),
        })
    }
}

/// The checksum words of the `len` bytes of inner IPv4 options at `at` (copied onto the
/// stack, so the verifier sees fixed offsets); `None` when they cannot be read.
#[inline(always)]
fn options_sum<F: Frame>(frame: &F, at: u32, len: usize) -> Option<u64> {
    let mut buf = [0u8; MAX_OPTIONS];
    if len == 0 || len > MAX_OPTIONS || !frame.load(at, &mut buf[..len]) {
        return None;
    }
    let mut sum = 0u64;
    let mut i = 0;
    while i < MAX_OPTIONS {
        // Zeros past `len` add nothing.
        sum += u16::from_ne_bytes([buf[i], buf[i + 1]]) as u64;
        i += 2;
    }
    Some(sum)
}
