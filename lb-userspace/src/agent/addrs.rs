//! This host's addresses, which `DECAP_LOCAL` holds: a tunnel packet is decapsulated only
//! when its outer destination is one of them.

use std::net::IpAddr;

use anyhow::{Result, bail};

/// Every IPv4 and IPv6 address of every interface in this network namespace (loopback's
/// and link-local ones included), sorted, without repeats, read with `getifaddrs`.
pub fn host_addresses() -> Result<Vec<IpAddr>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list it allocated into `list`; freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        bail!(
            "reading this host's addresses (getifaddrs): {}",
            std::io::Error::last_os_error()
        );
    }
    let mut out = Vec::new();
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: a node of the list getifaddrs returned, valid until freeifaddrs.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr whose family says its real type.
            let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: an AF_INET sockaddr is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                out.push(IpAddr::from(
                    u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                ));
            } else if family == libc::AF_INET6 {
                // SAFETY: an AF_INET6 sockaddr is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                out.push(IpAddr::from(sin6.sin6_addr.s6_addr));
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: the list getifaddrs returned, freed once.
    unsafe { libc::freeifaddrs(list) };
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    /// Loopback's address is always there.
    #[test]
    fn loopback_is_local() {
        let all = super::host_addresses().expect("getifaddrs");
        assert!(
            all.contains(&"127.0.0.1".parse().expect("an address")),
            "{all:?}"
        );
    }
}
