//! Tunnel forwarding in the model (S-TN4): which servers have their checks sent through a
//! tunnel, to which VIP of each family, under which socket marks.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::*;

const TEXT: &str = r#"
[xdp]
tunnel_source_v4 = "10.255.0.0/24"
tunnel_source_v6 = "fd00:255::/64"

[[backend_service]]
name = "plain"
address = "10.0.0.1"
port = 80

[[backend_service]]
name = "far1"
address = "10.2.0.1"
address6 = "fd00:2::1"
port = 80

[[backend_service]]
name = "far2"
address = "10.2.0.2"
address6 = "fd00:2::2"
port = 80

[[backend_group]]
name = "far"
members = ["far1", "far2"]

[[vservice]]
name = "nat"
kind = "tcp-l4"
address = "192.0.2.1"
port = 80
backends = ["plain", "far1"]

[[vservice]]
name = "first"
kind = "tcp-l4"
address = "192.0.2.10"
address6 = "2001:db8::10"
port = 80
forwarding = "ipip"
backends = ["far"]

[[vservice]]
name = "second"
kind = "tcp-l4"
address = "192.0.2.20"
port = 80
forwarding = "ipip"
backends = ["far2"]
"#;

fn service<'a>(cfg: &'a Config, name: &str) -> &'a BackendService {
    cfg.backend_services
        .iter()
        .find(|s| s.name == name)
        .expect("the service")
}

#[test]
fn s_tn4_servers_of_ipip_vservices_are_checked_at_the_first_vip_of_each_family() {
    let cfg = parse(TEXT, "t.toml").expect("valid");
    assert_eq!(service(&cfg, "plain").tunnel_check, None);
    let far1 = service(&cfg, "far1")
        .tunnel_check
        .clone()
        .expect("far1 tunnelled");
    assert_eq!(far1.vip4, Some(Ipv4Addr::new(192, 0, 2, 10)));
    assert_eq!(far1.vip6, Some("2001:db8::10".parse::<Ipv6Addr>().unwrap()));
    // far2 is in both ipip vServices: the first in the file names its VIP.
    let far2 = service(&cfg, "far2")
        .tunnel_check
        .clone()
        .expect("far2 tunnelled");
    assert_eq!(far2.vip4, Some(Ipv4Addr::new(192, 0, 2, 10)));
    assert_ne!(far1.index, far2.index);
}

#[test]
fn s_tn4_check_route_is_the_vip_and_a_mark_per_address() {
    let cfg = parse(TEXT, "t.toml").expect("valid");
    let far1 = service(&cfg, "far1");
    let v4: IpAddr = "10.2.0.1".parse().unwrap();
    let v6: IpAddr = "fd00:2::1".parse().unwrap();
    let (to4, mark4) = far1.check_route(v4);
    let (to6, mark6) = far1.check_route(v6);
    assert_eq!(to4, "192.0.2.10".parse::<IpAddr>().unwrap());
    assert_eq!(to6, "2001:db8::10".parse::<IpAddr>().unwrap());
    assert_ne!(mark4, mark6);
    for mark in [mark4, mark6] {
        assert_eq!(
            mark & lb_common::HEALTH_MARK_MASK,
            lb_common::HEALTH_MARK_BASE
        );
    }
    // A server outside every ipip vService is checked at its own address, unmarked.
    let plain = service(&cfg, "plain");
    assert_eq!(plain.check_route(plain.address), (plain.address, 0));
}
