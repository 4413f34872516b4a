//! The `--source` prefixes of `lb decap`: an address with an optional length, checked so
//! that a typo is named instead of quietly matching something else.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use lb_common::decap::{SOURCE_PREFIX_BASE, SourceKey};
use lb_common::{Addr, FAMILY_V4};

/// An IPv4 or IPv6 prefix whose host bits are zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// The prefix's address.
    pub addr: IpAddr,
    /// Its length in bits.
    pub len: u8,
}

/// Why a prefix was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PrefixError {
    /// The part before `/` is no address.
    #[error(
        "{0:?} is not an IP address or prefix (give 192.0.2.0/24, 2001:db8::/32 or an address)"
    )]
    Address(String),
    /// The length is no number or too long for the family.
    #[error("{text:?}: the prefix length must be a number from 0 to {max}")]
    Length {
        /// The prefix as written.
        text: String,
        /// The family's longest prefix.
        max: u8,
    },
    /// Bits past the length are set (most likely a mistyped address or length).
    #[error("{text:?} has bits set past its length: did you mean {suggest}?")]
    HostBits {
        /// The prefix as written.
        text: String,
        /// The prefix with those bits cleared.
        suggest: Prefix,
    },
}

impl Prefix {
    /// Bits of the family's addresses.
    fn max_len(addr: &IpAddr) -> u8 {
        if addr.is_ipv4() { 32 } else { 128 }
    }

    /// The address with every bit past `len` cleared.
    fn masked(addr: IpAddr, len: u8) -> IpAddr {
        match addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
        }
    }

    /// The `DECAP_SOURCES` key of this prefix (prefix length and data).
    pub fn key(&self) -> (u32, SourceKey) {
        let (addr, family) = Addr::from_ip(self.addr);
        let data = SourceKey {
            family,
            pad: [0; 3],
            addr,
        };
        (SOURCE_PREFIX_BASE + u32::from(self.len), data)
    }

    /// The prefix a `DECAP_SOURCES` key holds.
    pub fn from_key(prefix_len: u32, key: &SourceKey) -> Prefix {
        let len = prefix_len.saturating_sub(SOURCE_PREFIX_BASE);
        let max = if key.family == FAMILY_V4 { 32 } else { 128 };
        Prefix {
            addr: key.addr.to_ip(key.family),
            len: len.min(max) as u8,
        }
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;

    fn from_str(text: &str) -> Result<Prefix, PrefixError> {
        let (addr_text, len_text) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text, None),
        };
        let addr: IpAddr = addr_text
            .trim()
            .parse()
            .map_err(|_| PrefixError::Address(text.to_string()))?;
        let max = Prefix::max_len(&addr);
        let len =
            match len_text {
                None => max,
                Some(l) => l.trim().parse::<u8>().ok().filter(|l| *l <= max).ok_or(
                    PrefixError::Length {
                        text: text.to_string(),
                        max,
                    },
                )?,
            };
        let masked = Prefix::masked(addr, len);
        if masked != addr {
            return Err(PrefixError::HostBits {
                text: text.to_string(),
                suggest: Prefix { addr: masked, len },
            });
        }
        Ok(Prefix { addr, len })
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prefixes_and_names_mistakes() {
        let p: Prefix = "192.0.2.0/24".parse().expect("a prefix");
        assert_eq!(p.to_string(), "192.0.2.0/24");
        assert_eq!("2001:db8::1".parse::<Prefix>().map(|p| p.len), Ok(128));
        assert_eq!("0.0.0.0/0".parse::<Prefix>().map(|p| p.len), Ok(0));
        assert_eq!("::/0".parse::<Prefix>().map(|p| p.len), Ok(0));
        assert!(matches!(
            "10.0.0.0/33".parse::<Prefix>(),
            Err(PrefixError::Length { max: 32, .. })
        ));
        assert!(matches!(
            "10.0.0.0/x".parse::<Prefix>(),
            Err(PrefixError::Length { .. })
        ));
        assert!(matches!(
            "bogus/8".parse::<Prefix>(),
            Err(PrefixError::Address(_))
        ));
        let Err(PrefixError::HostBits { suggest, .. }) = "10.0.0.5/24".parse::<Prefix>() else {
            panic!("host bits accepted");
        };
        assert_eq!(suggest.to_string(), "10.0.0.0/24");
    }

    #[test]
    fn keys_round_trip() {
        for text in ["198.51.100.0/24", "2001:db8:1::/48", "0.0.0.0/0"] {
            let p: Prefix = text.parse().expect("a prefix");
            let (len, key) = p.key();
            assert_eq!(Prefix::from_key(len, &key), p);
        }
    }
}
