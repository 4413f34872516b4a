//! A fixed, well-mixed 64-bit hash.
//!
//! Source-IP hashing and persistence cookies must give the same answer in every process and
//! after every restart, so they cannot use `RandomState` (randomly keyed per process) nor
//! `DefaultHasher` (its algorithm may change between Rust releases). FNV-1a spreads the bytes
//! and a MurmurHash3 finaliser mixes the result so that short, similar inputs (neighbouring IP
//! addresses) land far apart.

use std::net::{IpAddr, SocketAddr};

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Incremental hasher over byte slices; the same input always gives the same value.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StableHash(u64);

impl StableHash {
    /// A hasher with the fixed initial state.
    pub(crate) fn new() -> StableHash {
        StableHash(FNV_OFFSET)
    }

    /// Feeds bytes, followed by a separator so that `("ab","c")` and `("a","bc")` differ.
    pub(crate) fn bytes(mut self, data: &[u8]) -> StableHash {
        for byte in data.iter().copied().chain([0xff]) {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
        self
    }

    /// Feeds an IP address (its octets, with a family marker).
    pub(crate) fn ip(self, ip: IpAddr) -> StableHash {
        match ip {
            IpAddr::V4(v4) => self.bytes(&[4]).bytes(&v4.octets()),
            IpAddr::V6(v6) => self.bytes(&[6]).bytes(&v6.octets()),
        }
    }

    /// Feeds a socket address (IP and port).
    pub(crate) fn socket(self, addr: SocketAddr) -> StableHash {
        self.ip(addr.ip()).bytes(&addr.port().to_be_bytes())
    }

    /// The mixed 64-bit result.
    pub(crate) fn finish(self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^= h >> 33;
        h
    }
}
