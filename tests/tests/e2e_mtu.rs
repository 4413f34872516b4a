//! Path MTU end to end, seen by a real client (data path contract: "ICMP and path MTU"): the
//! links from the balancer to its backends carry 1,400 bytes, the client's 1,500. A UDP
//! datagram too big for the backend side, sent with DF (IPv4) or by an IPv6 client, is
//! answered from the VIP with "fragmentation needed" / "packet too big" naming 1,400; the
//! client's kernel takes that MTU for the VIP (`IP_MTU` / `IPV6_MTU` on the connected
//! socket) and refuses the next oversized send with EMSGSIZE, as it would for any router.
//! The balancer counts the packet in `too_big`.
//!
//! Needs root, the `lb` binary and the XDP object (`cargo xtask build`). The topology's
//! veths carry the lab settings of docs/operations.md (GRO on the client's end, no XDP
//! program there); the answer leaves by a redirect back out of the ingress interface, which
//! such a veth delivers at once (an XDP_TX there waited for the client's next frame).

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lb_tests::netns::configs::{all_names, backend_services, load, vservice};
use lb_tests::netns::{Family, at, find_counter, require_data_path};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The MTU of the links on the backends' side.
const BACKEND_MTU: u32 = 1400;
/// A UDP payload that fits the client's link and not the backends'.
const PAYLOAD: usize = 1450;

/// An integer socket option.
fn set_opt(s: &UdpSocket, level: i32, name: i32, value: i32) {
    // SAFETY: a valid descriptor and a pointer to an i32 of the size given.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt: {}", std::io::Error::last_os_error());
}

fn get_opt(s: &UdpSocket, level: i32, name: i32) -> std::io::Result<i32> {
    let mut value = 0i32;
    let mut len = size_of::<i32>() as libc::socklen_t;
    // SAFETY: a valid descriptor, and value/len describe an i32.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            level,
            name,
            (&raw mut value).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(value)
}

/// From the client namespace: a connected UDP socket to `vip` that forbids fragmentation,
/// one oversized datagram, then the path MTU its kernel learnt (polled up to 3 s) and the
/// error of a second oversized send.
fn client_learns_mtu(ns: std::path::PathBuf, vip: SocketAddr) -> (Option<i32>, Option<i32>) {
    std::thread::spawn(move || {
        lb_tests::netns::ns::enter_path(&ns).expect("enter the client namespace");
        let bind: SocketAddr = match vip {
            SocketAddr::V4(_) => "0.0.0.0:0".parse().expect("address"),
            SocketAddr::V6(_) => "[::]:0".parse().expect("address"),
        };
        let s = UdpSocket::bind(bind).expect("bind");
        let (level, discover, dont, mtu) = match vip {
            SocketAddr::V4(_) => (
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
                libc::IP_MTU,
            ),
            SocketAddr::V6(_) => (
                libc::IPPROTO_IPV6,
                libc::IPV6_MTU_DISCOVER,
                libc::IPV6_PMTUDISC_DO,
                libc::IPV6_MTU,
            ),
        };
        set_opt(&s, level, discover, dont);
        s.connect(vip).expect("connect");
        // Small datagrams first, until one is answered: attachment and neighbour resolution
        // are then done, and what follows depends on the path MTU alone.
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        let mut buf = [0u8; 2048];
        let answered = (0..20).any(|_| s.send(b"hello").is_ok() && s.recv(&mut buf).is_ok());
        assert!(answered, "no answer through {vip} to a small datagram");
        let big = vec![0x42u8; PAYLOAD];
        s.send(&big)
            .expect("the first oversized datagram leaves the client");
        let until = Instant::now() + Duration::from_secs(3);
        let mut learnt = None;
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
            if let Ok(m) = get_opt(&s, level, mtu)
                && m < 1500
            {
                learnt = Some(m);
                break;
            }
        }
        let refused = s.send(&big).err().and_then(|e| e.raw_os_error());
        (learnt, refused)
    })
    .join()
    .expect("client thread")
}

fn path_mtu_seen_by_a_real_client(family: Family) {
    require_data_path().expect("data path built");
    let label = family.label("path MTU");
    let vip = family.vip(21);
    let topo = family.topology(None);
    for b in &topo.backends {
        let mtu = BACKEND_MTU.to_string();
        topo.balancer
            .ip(&["link", "set", &b.balancer_dev, "mtu", &mtu])
            .expect("balancer side MTU");
        b.ns.ip(&["link", "set", "eth0", "mtu", &mtu])
            .expect("backend side MTU");
    }
    topo.udp_servers(5300).expect("servers");
    let cfg = backend_services(&topo, family, 5300, &[1, 1, 1])
        + &vservice(
            &family.vip_name("mtu"),
            "udp-l4",
            vip,
            "port = 5300",
            "nat",
            &all_names(&topo),
        );
    load(&topo, &cfg);
    let before = topo
        .lb_status()
        .ok()
        .and_then(|s| find_counter(&s["global"], "too_big"))
        .unwrap_or(0);
    let (learnt, refused) = client_learns_mtu(topo.client.path(), at(vip, 5300));
    let after = topo
        .lb_status()
        .ok()
        .and_then(|s| find_counter(&s["global"], "too_big"))
        .unwrap_or(0);
    println!(
        "{label}: client learnt {learnt:?}, second send {refused:?}, too_big +{}",
        after - before
    );
    assert_eq!(
        learnt,
        Some(BACKEND_MTU as i32),
        "{label}: the client's kernel did not learn the backend side's MTU from the \
         balancer's answer (too_big rose by {})",
        after - before
    );
    assert_eq!(
        refused,
        Some(libc::EMSGSIZE),
        "{label}: the second oversized send was not refused"
    );
    assert!(after > before, "{label}: too_big did not count the packet");
}

#[test]
fn ipv4_fragmentation_needed_reaches_a_real_client() {
    let _guard = serial();
    path_mtu_seen_by_a_real_client(Family::V4);
}

#[test]
fn ipv6_packet_too_big_reaches_a_real_client() {
    let _guard = serial();
    path_mtu_seen_by_a_real_client(Family::V6);
}
